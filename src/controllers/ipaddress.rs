//! The IPAddresses we write: created for a claim with typed owner references, repaired after a restore or a move,
//! and deleted (our finalizer first) only when they reference one of our pools and name the claim.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;
use kube::api::ObjectMeta;
use tracing::{debug, info};

use super::{Context, Error, finalizers};
use crate::api::{CLUSTER_NAME_LABEL, GROUP, MOVED_AWAY_ANNOTATION, MOVED_AWAY_MARK, PROTECT_ADDRESS_FINALIZER, Pool};
use crate::apiserver::{ApiError, Deleted, Removed, Repair, Target};
use crate::capi::{CapiVersion, Claim, IpAddress, IpAddressSpec, NameRef, PoolRef};
use crate::compact::Uid;
use crate::index::{AddressRecord, Assigned, LiveCluster, ObjectKey, Observed, PoolKey};

fn claim_owner(claim: &Claim, version: CapiVersion) -> OwnerReference {
    OwnerReference {
        api_version: format!("{GROUP}/{}", version.version()),
        kind: "IPAddressClaim".to_owned(),
        name: claim.key.name.to_string(),
        uid: claim.uid.to_string(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

fn pool_owner(pool: &Pool) -> OwnerReference {
    OwnerReference {
        api_version: pool.kind.api_version(),
        kind: pool.kind.kind().to_owned(),
        name: pool.name().to_owned(),
        uid: pool.metadata.uid.clone().unwrap_or_default(),
        controller: Some(false),
        block_owner_deletion: Some(true),
    }
}

/// The IPAddress of a freshly assigned address: owned by the claim and the pool, protected by our finalizer, and
/// labelled with the claim's Cluster (named by `spec.clusterName` or by the label; the orphan path reads it).
pub fn new(ctx: &Context, claim: &Claim, pool_key: &PoolKey, pool: &Pool, assigned: &Assigned) -> IpAddress {
    let key = &claim.key;
    let metadata = ObjectMeta {
        name: Some(key.name.to_string()),
        namespace: Some(key.namespace.to_string()),
        finalizers: Some(vec![PROTECT_ADDRESS_FINALIZER.to_owned()]),
        owner_references: Some(vec![claim_owner(claim, ctx.capi().ipam), pool_owner(pool)]),
        labels: claim.cluster().map(|cluster| [(CLUSTER_NAME_LABEL.to_owned(), cluster.to_owned())].into()),
        ..ObjectMeta::default()
    };
    let spec = IpAddressSpec {
        claim_ref: NameRef { name: key.name.to_string() },
        pool_ref: PoolRef {
            api_group: Some(GROUP.to_owned()),
            kind: pool_key.kind.kind().to_owned(),
            name: pool_key.name.to_string(),
        },
        address: assigned.address.to_string(),
        prefix: Some(assigned.prefix),
        gateway: assigned.gateway.clone(),
    };
    IpAddress { metadata, spec }
}

/// Puts back what a restore or move lost on an IPAddress: our finalizer, the owner references (stale references to
/// this claim or pool, with other UIDs, go; unrelated owners stay first) and the cluster-name label. Reads the live
/// object, and writes guarded by its resourceVersion. Only the IPAddress the caller judged (UID `judged`) is adopted:
/// `false` when it is gone, being deleted or replaced by another of its name (the cache has not caught up; what was
/// read is recorded, and the claim's next look judges that).
pub async fn repair(
    ctx: &Context,
    claim: &Claim,
    pool_key: &PoolKey,
    pool: Option<&Pool>,
    judged: Option<Uid>,
) -> Result<bool, Error> {
    let key = &claim.key;
    let Some(live) = ctx.api.get_address(key).await.map_err(Error::api("reading the IPAddress to adopt"))? else {
        return Ok(false);
    };
    let replaced = judged.is_some_and(|uid| live.metadata.uid.as_deref().map(Uid::of) != Some(uid));
    if live.metadata.deletion_timestamp.is_some() || replaced {
        // Being deleted, or a new IPAddress of the name (its address may be another's), since the cache saw it: not
        // adopted on a judgement of something else.
        ctx.index.observe(Observed::Answered { key, object: &live });
        return Ok(false);
    }
    // Without `pool` (the caller passes none for a pool being deleted: see `adopt`), the pool's owner reference
    // stays as it is.
    let mut owner_references: Vec<OwnerReference> = live
        .owner_references()
        .iter()
        .filter(|o| !(o.kind == "IPAddressClaim" && *o.name == *key.name))
        .filter(|o| pool.is_none() || !(o.kind == pool_key.kind.kind() && *o.name == *pool_key.name))
        .cloned()
        .collect();
    owner_references.push(claim_owner(claim, ctx.capi().ipam));
    if let Some(p) = pool {
        owner_references.push(pool_owner(p));
    }
    let mut finalizers: Vec<String> = live.finalizers().to_vec();
    if !finalizers.iter().any(|f| f == PROTECT_ADDRESS_FINALIZER) {
        finalizers.push(PROTECT_ADDRESS_FINALIZER.to_owned());
    }
    let repair = Repair {
        resource_version: live.resource_version().unwrap_or_default(),
        owner_references,
        finalizers,
        cluster_label: claim.cluster().map(str::to_owned),
        unmark_moved_away: live.annotations().get(MOVED_AWAY_ANNOTATION).is_some_and(|v| v == MOVED_AWAY_MARK),
    };
    let patched = ctx.api.repair_address(key, &repair).await.map_err(Error::api("adopting the IPAddress"))?;
    ctx.index.observe(Observed::Answered { key, object: &patched });
    info!(claim = %key, "adopted the existing IPAddress");
    Ok(true)
}

/// Deletes an IPAddress of ours; `true` when it is gone. The DELETE comes first, guarded by the UID and
/// resourceVersion we checked (a changed or new object of the name is not ours to judge: the caller looks again), so
/// that our finalizer keeps the object, marked for deletion, until our finalizer comes off: an interruption in between
/// leaves an IPAddress being deleted, which the orphan sweep or its claim finishes, never one that holds its address
/// for good.
///
/// Guarantees: only the object read (its UID and resourceVersion) is deleted; the index records our deletion before
/// the request goes (`Observed::DeletingOurselves`), so a watch event of it is never taken for someone else's; the
/// address is free only once the object is gone (the DELETE or our finalizer's removal answered so, or its Deleted
/// event), never while it is being deleted.
///
/// Assumptions: the caller decided on a live read that the IPAddress is ours to delete (`is_ours_for`, a claim gone
/// or not bound to it); the write passes the leader fence.
pub async fn delete(ctx: &Context, address: &IpAddress, what: &'static str) -> Result<bool, Error> {
    match start_deleting(ctx, address, what).await? {
        Some(deleting) => finish_deleting(ctx, address, &deleting).await,
        None => Ok(true),
    }
}

/// The first half of [`delete`]: the DELETE, unless the object is being deleted already. The object as it is being
/// deleted, our finalizer still on it; `None` when it is gone.
async fn start_deleting(ctx: &Context, address: &IpAddress, what: &'static str) -> Result<Option<ObjectMeta>, Error> {
    let key = key_of(address);
    Ok(Some(if address.metadata.deletion_timestamp.is_some() {
        address.metadata.clone()
    } else {
        let uid = address.metadata.uid.clone().unwrap_or_default();
        let revision = address.metadata.resource_version.clone();
        ctx.index.observe(Observed::DeletingOurselves { key: &key, uid: Uid::of(&uid) });
        match ctx.api.delete_address(&key, &uid, revision.as_deref()).await {
            Ok(Deleted::Gone) | Err(ApiError::NotFound) => return Ok(None),
            Ok(Deleted::Deleting(object)) => {
                // Recorded as being deleted: should the finalizer's removal fail, no decision takes it for a live one.
                ctx.index.observe(Observed::Answered { key: &key, object: &object });
                object.metadata
            }
            Err(e) => return Err(Error::api(what)(e)),
        }
    }))
}

/// The second half of [`delete`]: our finalizer comes off the object being deleted; `true` when it is gone.
async fn finish_deleting(ctx: &Context, address: &IpAddress, deleting: &ObjectMeta) -> Result<bool, Error> {
    let target = Target::Address(key_of(address));
    let removed = finalizers::remove(ctx, &target, deleting, PROTECT_ADDRESS_FINALIZER).await?;
    Ok(removed == Removed::Gone)
}

fn key_of(address: &IpAddress) -> ObjectKey {
    ObjectKey::new(address.metadata.namespace.as_deref().unwrap_or_default(), &address.name_any())
}

/// Whether an IPAddress references one of our pools (`pool`, when given) and names `claim` in its `claimRef`: the
/// only IPAddresses we ever delete.
pub fn is_ours_for(address: &IpAddress, claim: &str, pool: Option<&PoolKey>) -> bool {
    let spec = &address.spec;
    let Some(kind) = spec.pool_ref.our_kind() else { return false };
    let namespace = address.metadata.namespace.as_deref().unwrap_or_default();
    spec.claim_ref.name == claim && pool.is_none_or(|p| *p == PoolKey::new(kind, namespace, &spec.pool_ref.name))
}

/// Releases an IPAddress whose claim no longer exists (docs/compatibility.md D11). The IPAddress is read first, then
/// its claim: a new claim of the name that adopts it in between changes its owner (seen here) or its resourceVersion
/// (the DELETE, guarded by the one read, fails), so an IPAddress adopted meanwhile is never deleted.
pub async fn release_orphan(ctx: &Context, key: &ObjectKey, record: &AddressRecord) -> Result<Released, Error> {
    let Some(address) = ctx.api.get_address(key).await.map_err(Error::api("reading an orphaned IPAddress"))? else {
        return Ok(Released::Done);
    };
    let claim_owner = address
        .owner_references()
        .iter()
        .find(|o| o.kind == "IPAddressClaim" && *o.name == *key.name)
        .map(|o| Uid::of(&o.uid));
    if address.metadata.uid.as_deref().map(Uid::of) != record.uid
        || claim_owner != record.claim_owner
        || !is_ours_for(&address, &key.name, None)
    {
        return Ok(Released::Done);
    }
    let live_claim = ctx.api.get_claim(key).await.map_err(Error::api("reading the claim"))?;
    // What the index knows, after the reads: the pool's shard, the bound claims, what a pause keeps.
    let view = ctx.index.orphan_view(key, Some(record));
    match live_claim {
        // A claim of the name that would adopt it: not an orphan (the cache lagged, or another manager serves it). One
        // of another pool cannot. A claim of another shard than the pool's (labelled for ours, so ours alone) is served
        // by no manager until its label is fixed: what was not made for it is kept for it (a restored pair waits for
        // the label, its machine on the address), unless its address is a bound claim's (a restore's duplicate:
        // seed 520300326), which nothing else would ever withdraw, and the claim is not bound to it (a restore that
        // keeps status). Not recorded as another manager's: a duplicate may appear later.
        Some(live) if live.claim.uses_pool(record.pool.kind, &record.pool.namespace, &record.pool.name) => {
            let ours = ctx.options.watch_filter.as_deref();
            let another_shard = ours.is_some() && live.claim.watch_filter.as_deref() != ours;
            let pool_of_our_shard = ours.is_some() && view.pool.as_ref().is_some_and(|p| p.shard() == ours);
            let served_by_none = another_shard && pool_of_our_shard;
            let duplicate_for_none = served_by_none
                && live.claim.address_ref().is_none()
                && claim_owner != Some(live.claim.uid.uid())
                && view.duplicates_a_bound_one;
            if !duplicate_for_none {
                if another_shard && !served_by_none {
                    let claim_shard = live.claim.watch_filter.as_deref();
                    ctx.index.observe(Observed::ClaimOfAnotherManager { key, uid: record.uid, claim_shard });
                }
                return Ok(Released::Done);
            }
        }
        _ => {}
    }
    // Marked for a move (our mark, or clusterctl's delete-for-move) since the record was taken: the claim's own manager
    // noticed the move, and our watch has not shown it yet (a manager of another shard never sees that claim: seed
    // 470144060). The watch's event queues its entry, and the release waits for it to be written. Decided on this
    // read, which guards the DELETE. Only a global pool's: a namespaced pool's address moves with its pool.
    if record.pool.kind.is_global()
        && !record.moving_away
        && AddressRecord::of(&address).is_some_and(|live| live.moving_away)
    {
        return Ok(Released::Done);
    }
    // As a paused Cluster keeps its addresses (`OrphanView::kept`). One left behind by a move is released, its
    // address reserved.
    let kept_for_the_pause = !record.moving_away && view.pause_may_keep;
    if kept_for_the_pause && cluster_paused_now(ctx, &key.namespace, record.cluster_label.as_deref()).await? {
        return Ok(Released::Done);
    }
    // Looked at again after the reads: its address may have been queued for the pool's annotation meanwhile (the pool
    // made again under its name: seed 470594159). Released now, its mark, the move's only record, would go.
    if ctx.index.orphan_view(key, Some(record)).moved_away_unwritten {
        return Ok(Released::Done);
    }
    let what = "deleting an orphaned IPAddress";
    if record.moving_away && record.pool.kind.is_global() {
        let Some(deleting) = start_deleting(ctx, &address, what).await? else {
            let value = &address.spec.address;
            info!(address = %key, value, "the IPAddress of a claim moved away is gone; its address stays reserved");
            return Ok(Released::Done);
        };
        let one = LeftBehindDeleting { key: key.clone(), record: record.clone(), address, deleting, entry_first: true };
        return Ok(Released::LeftBehind(Box::new(one)));
    }
    delete(ctx, &address, what).await?;
    // A race the design handles (the claim went without our release): counted, and said at debug.
    debug!(address = %key, value = address.spec.address, "released an IPAddress whose claim is gone");
    ctx.metrics.orphan_released(record.pool.kind);
    Ok(Released::Done)
}

/// How many IPAddresses a move left behind the sweep deletes before it reads their pools and takes our finalizers
/// off ([`finish_left_behind`]): one read per pool per batch, and no IPAddress waits long being deleted, nor a pool
/// made again long unseen after that read.
pub const LEFT_BEHIND_BATCH: usize = 100;

/// What the release of an orphan came to.
pub enum Released {
    /// Deleted, kept or left alone: nothing is left to do.
    Done,
    /// Left behind by a move: being deleted, our finalizer still on it ([`finish_left_behind`]).
    LeftBehind(Box<LeftBehindDeleting>),
}

/// An IPAddress a move left behind (of a global pool), which we are deleting: its DELETE answered, our finalizer still
/// on it.
pub struct LeftBehindDeleting {
    key: ObjectKey,
    record: AddressRecord,
    address: IpAddress,
    deleting: ObjectMeta,
    /// Its entry is written first: the orphan release's. The claim of its name lets go before its entry one being
    /// deleted (by hand) as an IPAddress of the pool the index knows (`plan::adoption`: its hold is the reservation,
    /// and its entry is written as one no IPAddress backs), if it still is after the read.
    entry_first: bool,
}

/// Finishes the deletions of IPAddresses a move left behind: per pool, one live read after all their DELETEs, then our
/// finalizer comes off each whose entry waits for no write, while the pool the API server has is the one this manager
/// knows. Its mark is the move's only record, and a pool made again before the DELETE (unseen by the pool watch, whose
/// event then queues this one's entry: `pool_appeared`) must reserve its address (soak seeds 804659163, 804814870;
/// scenario `a_pool_made_again_while_the_sweep_deletes_the_ipaddress_left_behind_reserves_its_address`). One read per
/// pool, not per IPAddress: after a large move thousands go at once, and each read carries the pool's annotation (the
/// sweep finishes them [`LEFT_BEHIND_BATCH`] at a time, which bounds how long the read stands).
/// Each one's outcome: `Ok(Some(gone))`, or `Ok(None)` when it waits, being deleted with our finalizer on, for its
/// entry to be written (the sweep, or the claim of its name, finishes it then). A pool made again after the read gets
/// no entry for it (docs/operations.md: it records nothing of an IPAddress of the pool that went, being deleted
/// already).
pub async fn finish_left_behind(
    ctx: &Context,
    pending: Vec<LeftBehindDeleting>,
) -> Vec<(ObjectKey, Result<Option<bool>, Error>)> {
    let mut by_pool: BTreeMap<PoolKey, Vec<LeftBehindDeleting>> = BTreeMap::new();
    for one in pending {
        by_pool.entry((*one.record.pool).clone()).or_default().push(one);
    }
    let mut outcomes = Vec::new();
    for (pool, group) in by_pool {
        let Some(first) = group.first() else { continue };
        let known = ctx.index.orphan_view(&first.key, Some(&first.record)).pool;
        let known_uid = known.as_ref().and_then(|p| p.metadata.uid.clone());
        let is_live = pool_known_as_it_is(ctx, &first.record, known.as_deref()).await;
        for one in group {
            // After the read: the pool the index knows is the live one, and its appearance queued this one's entry if
            // at all.
            let view = ctx.index.orphan_view(&one.key, Some(&one.record));
            let of_the_pool_known = one.record.pool_owner.is_some_and(|o| known_uid.as_deref().map(Uid::of) == Some(o));
            let entry_waits = view.moved_away_unwritten && (one.entry_first || !of_the_pool_known);
            let still_known =
                is_live && !entry_waits && view.pool.as_ref().and_then(|p| p.metadata.uid.clone()) == known_uid;
            let outcome = if still_known {
                let finished = finish_deleting(ctx, &one.address, &one.deleting).await;
                if finished.is_ok() {
                    let (key, value) = (&one.key, &one.address.spec.address);
                    let said = "deleted the IPAddress of a claim moved away; its address stays reserved";
                    info!(address = %key, value, "{said}");
                }
                finished.map(Some)
            } else {
                info!(
                    address = %one.key,
                    pool = %pool,
                    "the pool of an IPAddress left behind by a move could not be read, or is not the one this manager \
                     knows (made again?), or its address waits to be recorded as moved away: our finalizer stays on \
                     it until the pool records that address"
                );
                Ok(None)
            };
            outcomes.push((one.key, outcome));
        }
    }
    outcomes
}

/// [`delete`] for the IPAddress `key` a move left behind (`record`, of a global pool) that the claim of its name lets
/// go: our finalizer comes off as [`finish_left_behind`] says, whether its entry is written or not (the claim's plan
/// decided on that). `None`: it waits, being deleted with our finalizer on.
pub async fn delete_left_behind(
    ctx: &Context,
    key: &ObjectKey,
    record: &AddressRecord,
    address: &IpAddress,
    what: &'static str,
) -> Result<Option<bool>, Error> {
    let Some(deleting) = start_deleting(ctx, address, what).await? else { return Ok(Some(true)) };
    let (key, record, address) = (key.clone(), record.clone(), address.clone());
    let one = LeftBehindDeleting { key, record, address, deleting, entry_first: false };
    finish_left_behind(ctx, vec![one]).await.pop().map_or(Ok(None), |(_, outcome)| outcome)
}

/// The pool of the IPAddress left behind, as the API server has it now, is the one this manager knows: both have
/// none (gone, its reservations with it), or the same object. Read live: the pool watch may lag. Unread, it is taken
/// for not (the address stays, and the next sweep asks again). `known` is the index's pool of the record.
pub(super) async fn pool_known_as_it_is(ctx: &Context, record: &AddressRecord, known: Option<&Pool>) -> bool {
    let known = known.and_then(|p| p.metadata.uid.clone());
    live_pool_uid(ctx, record).await.is_some_and(|live| live == known)
}

/// The UID of the IPAddress's pool as the API server has it now (`Some(None)`: none); `None` when it cannot be read
/// (reported).
pub(super) async fn live_pool_uid(ctx: &Context, record: &AddressRecord) -> Option<Option<String>> {
    match ctx.api.get_pool(&record.pool).await {
        Ok(pool) => Some(pool.and_then(|p| p.metadata.uid)),
        Err(e) => {
            ctx.report_failure(
                "reading the pool of an IPAddress left behind by a move",
                &record.pool,
                &Error::api("reading the pool")(e),
            );
            None
        }
    }
}

/// Whether the Cluster `name` (of an IPAddress whose claim is gone, or of a claim) is paused, read live: a move may be
/// under way that the Cluster watch has not shown (it relisted past the pause: seed 420069014), the address in use on
/// the target. Kept as a paused Cluster's, and the index learns of the pause, so that the Cluster's deletion is a
/// move. A Cluster gone that the index still holds is waited for too: its watch's Delete event says whether it went
/// paused.
pub(super) async fn cluster_paused_now(ctx: &Context, namespace: &str, name: Option<&str>) -> Result<bool, Error> {
    let Some(name) = name else { return Ok(false) };
    let key = ObjectKey::new(namespace, name);
    let live = match ctx
        .api
        .get_cluster(&key)
        .await
        .map_err(Error::api("reading a Cluster for a pause the watch may not show yet"))?
    {
        Some(live) if live.is_paused() => LiveCluster::Paused(crate::index::revision_of(&live.metadata)),
        Some(_) => LiveCluster::NotPaused,
        None if ctx.options.capi.cluster.is_none() => return Ok(false),
        None => LiveCluster::Gone,
    };
    Ok(ctx.index.observe(Observed::ClusterRead { key: &key, live }).cluster_paused)
}

/// Who an IPAddress of another provider belongs to, for the claim's status.
pub fn owner_of(existing: &IpAddress) -> String {
    let theirs = &existing.spec.pool_ref;
    match theirs.api_group.as_deref().filter(|g| !g.is_empty()) {
        Some(group) => format!("{} \"{}\" of group {group}", theirs.kind, theirs.name),
        None => format!("{} \"{}\" of the core group", theirs.kind, theirs.name),
    }
}
