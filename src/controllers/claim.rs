//! The IPAddressClaim controller: claims get an IPAddress and `status.addressRef`, exactly once, with a `Ready`
//! condition and an Event on failures, waits and recoveries; deleted claims release their address. `gate` and
//! `allocate` decide from the index alone; the rest writes.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use tracing::{debug, info};

use super::events::{EventType, Note};
use super::status::{ClaimReason, Ready, claim_status, is_current, is_transition, stored_conditions};
use super::{Context, Error, finalizers, ipaddress};
use crate::api::{GROUP, Pool, RELEASE_ADDRESS_FINALIZER};
use crate::apiserver::{ApiError, Read, Target};
use crate::capi::{CapiVersion, Claim, IpAddress};
use crate::compact::Uid;
use crate::index::{AddressRecord, AllocateError, Assigned, Duplicate, Index, ObjectKey, PoolKey};
use crate::runtime::queue::Next;
/// A claim that found its pool exhausted (or was refused for good) is woken by a change; this requeue is only a
/// safety net.
use crate::runtime::retry::RECHECK;

/// What a claim's pause state, Cluster and pool allow before anything is written (docs/compatibility.md D8, D9).
#[derive(Debug, PartialEq, Eq)]
pub enum Gate {
    /// Paused by its own annotation, or its pool is paused: nothing happens.
    Paused,
    /// Its Cluster does not exist yet, or is paused: it says why while it has no address.
    WaitForCluster(ClaimReason, String),
    /// Being deleted: release.
    Release,
    /// Bind it.
    Bind,
}

/// Pause (docs/compatibility.md D8), checked the same way on every event: the claim, its Cluster, its pool.
pub fn gate(claim: &Claim, pool_key: &PoolKey, index: &Index) -> Gate {
    let namespace = &*claim.key.namespace;
    let deleting = claim.deletion_timestamp.is_some();
    if claim.paused {
        return Gate::Paused;
    }
    if let Some(cluster) = claim.cluster() {
        // Velero restores Clusters last: wait, the Cluster's creation (or unpause) wakes this claim.
        match index.cluster_paused(namespace, cluster) {
            None if !deleting => {
                let message = format!("waiting for Cluster {namespace}/{cluster} to exist");
                return Gate::WaitForCluster(ClaimReason::WaitingForCluster, message);
            }
            Some(true) => {
                let message =
                    format!("Cluster {namespace}/{cluster} is paused; allocation resumes when it is unpaused");
                return Gate::WaitForCluster(ClaimReason::ClusterPaused, message);
            }
            _ => {}
        }
    }
    if index.pool(pool_key).is_some_and(|p| p.is_paused()) {
        return Gate::Paused;
    }
    if deleting { Gate::Release } else { Gate::Bind }
}

/// The address for a claim without an IPAddress, held in the pool's allocator before anything is written: the
/// requested one (docs/compatibility.md D14: the claim's annotation, else the pool's `preAllocations`), else the one
/// its IPAddress held before it was deleted from under the live claim (while still free), else the lowest free one.
pub fn allocate(claim: &Claim, pool_key: &PoolKey, pool: &Pool, index: &Index) -> Result<Assigned, AllocateError> {
    let requested = claim.requested_address.as_deref().or_else(|| pool.spec.pre_allocation(&claim.key.name));
    index.allocate(claim, pool_key, requested)
}

/// Runs once every watch has listed (the claim workers wait for that before they read the claim).
pub async fn reconcile(claim: &Claim, ctx: &Context) -> Result<Next, Error> {
    let started = std::time::Instant::now();
    let result = reconcile_claim(claim, ctx).await;
    ctx.metrics.reconciled(crate::metrics::CLAIM_CONTROLLER, started.elapsed(), result.as_ref().err().map(Error::kind));
    result
}

async fn reconcile_claim(claim: &Claim, ctx: &Context) -> Result<Next, Error> {
    let key = &claim.key;
    let Some(kind) = claim.pool_kind else { return Ok(Next::AwaitChange) };
    let pool_key = PoolKey::new(kind, &key.namespace, &claim.pool_name);
    let gate = gate(claim, &pool_key, &ctx.index);
    if matches!(gate, Gate::Paused | Gate::WaitForCluster(..))
        && claim.address_ref().is_none()
        && ctx.index.duplicate_of(&pool_key, key).is_some_and(|d| !moved_one_wins(ctx, &pool_key, key, &d))
        && let Some(record) = ctx.index.address(key).filter(|r| !r.deleting && *r.pool == pool_key)
    {
        // Pause holds our decisions, not the undoing of a write that landed too late (a fenced leader's): an
        // IPAddress no claim is bound to, holding an address another holds, goes even now (a move would copy it).
        return withdraw_duplicate(ctx, key, &pool_key, record.uid).await;
    }
    match gate {
        Gate::Paused => {
            ctx.index.stop_waiting(&pool_key, key);
            debug!(claim = %key, pool = %pool_key, "paused");
            return Ok(Next::AwaitChange);
        }
        Gate::WaitForCluster(reason, message) => {
            ctx.index.stop_waiting(&pool_key, key);
            settle_own_uncertain_create(ctx, &pool_key, key).await?;
            debug!(claim = %key, reason = reason.as_str(), "waiting for the Cluster");
            // A bound claim keeps its Ready as it is (nothing changes for it).
            if claim.address_ref().is_none() && claim.deletion_timestamp.is_none() {
                set_ready(claim, ctx, reason, message, None).await?;
            }
            return Ok(Next::AwaitChange);
        }
        Gate::Release => return release(claim, ctx, &pool_key).await,
        Gate::Bind => {}
    }
    let pool = ctx.index.pool(&pool_key);

    // The finalizer is persisted before any address exists, so a deleted claim never leaves an IPAddress behind. The
    // rest of this reconcile works on the claim as that write returned it (its resourceVersion is the status write's
    // precondition).
    let patched;
    let claim = if claim.release_finalizer_index.is_none() {
        let read = as_read(claim, ctx).await?;
        patched = ctx
            .api
            .add_claim_finalizer(key, RELEASE_ADDRESS_FINALIZER, &read)
            .await
            .map_err(Error::api("adding a finalizer"))?
            .claim;
        debug!(claim = %key, index = ?patched.release_finalizer_index, "finalizer added");
        &patched
    } else {
        claim
    };

    if let Some(record) = ctx.index.address(key) {
        return adopt(claim, ctx, &pool_key, pool.as_deref(), &record).await;
    }

    let Some(pool) = pool else {
        settle_own_uncertain_create(ctx, &pool_key, key).await?;
        let message = format!("{pool_key} not found");
        set_ready(claim, ctx, ClaimReason::PoolNotReady, message, None).await?;
        return Ok(Next::AwaitChange);
    };
    if pool.is_deleting() {
        settle_own_uncertain_create(ctx, &pool_key, key).await?;
        let message = format!("{pool_key} is being deleted");
        set_ready(claim, ctx, ClaimReason::PoolNotReady, message, None).await?;
        return Ok(Next::AwaitChange);
    }
    match allocate(claim, &pool_key, &pool, &ctx.index) {
        Ok(assigned) => create_address(claim, ctx, &pool_key, &pool, &assigned).await,
        Err(AllocateError::Exhausted { .. }) => {
            ctx.index.wait_for_address(&pool_key, key);
            set_ready(claim, ctx, ClaimReason::PoolExhausted, format!("{pool_key} has no free address"), None).await?;
            Ok(Next::After(RECHECK))
        }
        Err(e @ (AllocateError::InvalidPool { .. } | AllocateError::Unknown { .. })) => {
            set_ready(claim, ctx, ClaimReason::PoolNotReady, e.to_string(), None).await?;
            Ok(Next::AwaitChange)
        }
        Err(e @ AllocateError::Requested { .. }) => {
            // Retried when an address of the pool frees up (it may be the requested one) or the pool changes.
            ctx.index.wait_for_address(&pool_key, key);
            set_ready(claim, ctx, ClaimReason::AllocationFailed, e.to_string(), None).await?;
            Ok(Next::After(RECHECK))
        }
    }
}

fn claim_reference(claim: &Claim, version: CapiVersion) -> ObjectReference {
    ObjectReference {
        api_version: Some(format!("{GROUP}/{}", version.version())),
        kind: Some("IPAddressClaim".to_owned()),
        name: Some(claim.key.name.to_string()),
        namespace: Some(claim.key.namespace.to_string()),
        uid: Some(claim.uid.to_string()),
        resource_version: None,
        field_path: None,
    }
}

/// Creates the IPAddress for a freshly assigned address.
async fn create_address(
    claim: &Claim,
    ctx: &Context,
    pool_key: &PoolKey,
    pool: &Pool,
    assigned: &Assigned,
) -> Result<Next, Error> {
    let key = &claim.key;
    let object = ipaddress::new(ctx, claim, pool_key, pool, assigned);
    // Leadership is checked again right before the create, and a create still in flight when the term ends is
    // dropped (`crate::leader`): a replica that may have lost the Lease never creates an IPAddress.
    // Fenced, it is uncertain whether it was created: the hold stays (this replica's state goes with its term).
    match ctx.api.create_address(&object).await {
        Ok(created) => {
            let (record, latency) = ctx.index.address_created(claim, pool_key, &created);
            ctx.metrics.allocated(pool_key.kind, latency);
            info!(claim = %key, address = %assigned.address, pool = %pool_key, "allocated");
            let message = format!("allocated {} from {pool_key}", assigned.address);
            match set_ready(claim, ctx, ClaimReason::Allocated, message, Some(&key.name)).await {
                // A DELETE that raced our finalizer can remove the claim anyway (the API server does not look at
                // finalizers again when it retries a delete): give the address back at once.
                Err(Error::Api { source: ApiError::NotFound, .. }) => {
                    debug!(claim = %key, "the claim vanished while its address was being created; releasing it");
                    if let Some(record) = &record {
                        ipaddress::release_orphan(ctx, key, record).await?;
                    }
                    Ok(Next::AwaitChange)
                }
                other => other.map(|()| Next::AwaitChange),
            }
        }
        Err(ApiError::AlreadyExists(_) | ApiError::Conflict(_)) => {
            // An IPAddress of this name exists that we have not seen yet: our earlier create that timed out but was
            // applied, a move or a restore. The hold stays until that IPAddress is recorded: given up before, its
            // address could go to another claim while we read.
            let existing = ctx.api.get_address(key).await.map_err(Error::api("reading the existing IPAddress"))?;
            let Some(existing) = existing else {
                // Gone again meanwhile: create it anew.
                return Ok(Next::After(Duration::from_millis(200)));
            };
            if AddressRecord::of(&existing).is_none_or(|r| *r.pool != *pool_key) {
                // Not of this pool: our create never happened, so the address is free again.
                ctx.index.abandon(pool_key, key);
            }
            match ctx.index.remember_address(key, &existing) {
                Some(record) => adopt(claim, ctx, pool_key, Some(pool), &record).await,
                None if AddressRecord::of(&existing).is_none() => {
                    belongs_elsewhere(claim, ctx, pool_key, &ipaddress::owner_of(&existing)).await
                }
                // One we deleted a moment ago.
                None => Ok(Next::After(Duration::from_millis(200))),
            }
        }
        Err(e @ (ApiError::Refused { .. } | ApiError::NotFound)) => {
            // Refused: nothing was created now. An earlier attempt that timed out may have created it, though (the
            // refusal comes from admission, before a name conflict): the hold goes only if no IPAddress exists.
            if ctx.index.holds_unconfirmed(pool_key, key)
                && let Some(existing) = ctx.api.get_address(key).await.map_err(Error::api("reading the IPAddress"))?
                && AddressRecord::of(&existing).is_some_and(|r| *r.pool == *pool_key)
                && let Some(record) = ctx.index.remember_address(key, &existing)
            {
                return adopt(claim, ctx, pool_key, Some(pool), &record).await;
            }
            ctx.index.abandon(pool_key, key);
            let message = format!("creating IPAddress {key}: {}", refusal(&e));
            set_ready(claim, ctx, ClaimReason::AllocationFailed, message.clone(), None).await?;
            Err(Error::Rejected(message))
        }
        // Anything else may or may not have created it: keep the hold, the retry reuses the same address.
        Err(e) => Err(Error::api("creating the IPAddress")(e)),
    }
}

/// What the API server said when it refused a request.
fn refusal(error: &ApiError) -> String {
    match error {
        ApiError::Refused { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

/// Adopts an existing IPAddress of the claim's name: its spec is never touched (it is immutable); missing
/// finalizers, owner references and the cluster-name label are put back (docs/compatibility.md D7).
async fn adopt(
    claim: &Claim,
    ctx: &Context,
    pool_key: &PoolKey,
    pool: Option<&Pool>,
    record: &AddressRecord,
) -> Result<Next, Error> {
    let key = &claim.key;
    if *record.pool != *pool_key {
        return belongs_elsewhere(claim, ctx, pool_key, &record.pool.to_string()).await;
    }
    ctx.index.stop_waiting(pool_key, key);
    // A duplicate that this claim was never told about (no addressRef yet) is withdrawn rather than handed out: it can
    // only come from a write that reached the API server late, after its leader's term ended (`crate::leader`).
    let duplicate = ctx.index.duplicate_of(pool_key, key);
    if claim.address_ref().is_none() && duplicate.as_ref().is_some_and(|d| !moved_one_wins(ctx, pool_key, key, d)) {
        if record.deleting {
            // Withdrawn already, or an orphan whose release did not finish: no one else finishes it while a claim of
            // its name exists (the orphan release leaves those alone), so this claim does.
            return finish_deletion(ctx, key, pool_key, record.uid).await;
        }
        return withdraw_duplicate(ctx, key, pool_key, record.uid).await;
    }
    let has_claim_owner = record.claim_owner == Some(claim.uid.uid());
    if record.deleting && !(has_claim_owner && claim.address_ref() == Some(&*key.name)) {
        // Being deleted, and never this claim's: a delete of ours that did not finish (a withdrawn duplicate, an
        // orphan of an earlier claim of this name) or one by hand. It is let go, and the claim gets an address anew.
        return finish_deletion(ctx, key, pool_key, record.uid).await;
    }
    if !has_claim_owner && (record.moving_away || ctx.index.holds_reserved(pool_key, key)) {
        // Left behind by the move of an earlier claim of this name (marked so, or holding a reserved address while
        // not owned by this claim, as one that came back would be: clusterctl rewrites the owner references): its
        // address is in use on the other management cluster. Never adopted: it is let go once its address is
        // recorded as moved away (so that the address stays reserved), and this claim gets another.
        if ctx.index.moved_away_unwritten(pool_key, key) {
            return Ok(Next::After(Duration::from_secs(1)));
        }
        return finish_deletion(ctx, key, pool_key, record.uid).await;
    }
    let pool_uid = pool.and_then(|p| p.metadata.uid.clone());
    let has_pool_owner = pool_uid.is_none_or(|uid| record.pool_owner == Some(Uid::of(&uid)));
    let has_label = claim.cluster().is_none_or(|v| record.cluster_label.as_deref() == Some(v));
    let complete = has_claim_owner && has_pool_owner && record.protected && has_label;
    if !complete && !record.deleting && !ipaddress::repair(ctx, claim, pool_key, pool).await? {
        // Gone already: its DELETED event is on its way, and the claim gets an address then.
        return Ok(Next::After(Duration::from_millis(200)));
    }
    if record.deleting {
        debug!(claim = %key, "the IPAddress is being deleted; its finalizer holds it until the claim goes");
    }
    let held = ctx.index.held_by(pool_key, key);
    // The address as `spec.address` shows it; one that does not parse is said so.
    let address = held.map_or_else(String::new, |held| {
        held.address().map_or_else(|| held.to_string(), |address| address.to_string())
    });
    let mut message = format!("allocated {address} from {pool_key}");
    if let Some(duplicate) = duplicate {
        // Bound, so it stays (a machine may use it); the condition says so until one holder is released.
        message.push_str(&format!(
            "; DUPLICATE: {duplicate}. Delete one of these claims to resolve it (see docs/operations.md)"
        ));
    }
    set_ready(claim, ctx, ClaimReason::Allocated, message, Some(&key.name)).await?;
    if let Some(held) = held {
        // Bound to a claim again: an address that was moved away came back with its Cluster. Only once the binding is
        // written: the entry naming this IPAddress is what keeps it from being withdrawn as a duplicate until then.
        ctx.index.claim_back(pool_key, key, held);
    }
    Ok(Next::AwaitChange)
}

/// Whether the IPAddress `key`, part of `duplicate`, is the one that moved away with its address and came back (the
/// pool's moved-away annotation names it): it stays, and the others holding the address, none bound (a late create
/// of a deposed leader, the reservation), go. Withdrawn, the machine that came back would lose the address it uses.
fn moved_one_wins(ctx: &Context, pool_key: &PoolKey, key: &ObjectKey, duplicate: &Duplicate) -> bool {
    ctx.index.is_moved_holder(pool_key, key)
        && !duplicate
            .holders
            .iter()
            .any(|other| other != key && ctx.index.claim(other).is_some_and(|c| c.address_ref() == Some(&*other.name)))
}

/// Deletes an IPAddress whose address another IPAddress of the pool holds, before its claim is bound to it; the
/// claim then gets a free address. A bound claim's address is never withdrawn: a machine may use it already.
async fn withdraw_duplicate(
    ctx: &Context,
    key: &ObjectKey,
    pool_key: &PoolKey,
    judged: Option<Uid>,
) -> Result<Next, Error> {
    let address = match unbound_ipaddress(ctx, key, pool_key, judged).await? {
        Ok(address) => address,
        Err(later) => return Ok(later),
    };
    tracing::error!(
        claim = %key,
        pool = %pool_key,
        address = %ctx.index.held_by(pool_key, key).map_or_else(String::new, |h| h.to_string()),
        "DUPLICATE ADDRESS withdrawn: IPAddress {key} holds an address another IPAddress of the pool holds, and its \
         claim was not bound to it yet; deleting it so that the claim gets a free address"
    );
    if ipaddress::delete(ctx, &address, "deleting a duplicated IPAddress").await? {
        ctx.index.deleted_address(key, pool_key, address.metadata.uid.as_deref());
    }
    ctx.metrics.duplicate_withdrawn(pool_key.kind);
    Ok(Next::After(Duration::from_millis(200)))
}

/// Lets an IPAddress of the claim's name that is being deleted go (our finalizer off), once the live claim confirms
/// it was never bound to it; the claim is reconciled again to get an address.
async fn finish_deletion(
    ctx: &Context,
    key: &ObjectKey,
    pool_key: &PoolKey,
    judged: Option<Uid>,
) -> Result<Next, Error> {
    let address = match unbound_ipaddress(ctx, key, pool_key, judged).await? {
        Ok(address) => address,
        Err(later) => return Ok(later),
    };
    debug!(claim = %key, "an IPAddress of the claim's name is being deleted; letting it go before allocating");
    if ipaddress::delete(ctx, &address, "letting a deleted IPAddress go").await? {
        ctx.index.deleted_address(key, pool_key, address.metadata.uid.as_deref());
    }
    Ok(Next::After(Duration::from_millis(200)))
}

/// The live IPAddress `key` that a claim never bound to it may let go: ours, of the pool, the object judged (`judged`),
/// read after the live claim confirmed it is not bound (the cache may not show a status we wrote a moment ago).
/// Otherwise when to look again.
async fn unbound_ipaddress(
    ctx: &Context,
    key: &ObjectKey,
    pool_key: &PoolKey,
    judged: Option<Uid>,
) -> Result<Result<IpAddress, Next>, Error> {
    let live = ctx.api.get_claim(key).await.map_err(Error::api("reading the claim"))?;
    if live.is_none_or(|c| c.claim.address_ref().is_some()) {
        return Ok(Err(Next::After(Duration::from_millis(500))));
    }
    let Some(address) = ctx.api.get_address(key).await.map_err(Error::api("reading the IPAddress"))? else {
        return Ok(Err(Next::After(Duration::from_millis(200))));
    };
    if !ipaddress::is_ours_for(&address, &key.name, Some(pool_key)) {
        return Ok(Err(Next::AwaitChange));
    }
    if !is_the_one(&address, judged) {
        return Ok(Err(Next::After(Duration::from_millis(200))));
    }
    Ok(Ok(address))
}

/// Whether the live IPAddress is the object the decision was made on: another object of the name (created again, or
/// brought back by a move or a restore) is judged anew once the watch shows it.
fn is_the_one(address: &IpAddress, judged: Option<Uid>) -> bool {
    judged.is_some() && address.metadata.uid.as_deref().map(Uid::of) == judged
}

/// An IPAddress of the claim's name exists for another pool: the claim cannot get one (IPAddress specs are
/// immutable, and the name is taken).
async fn belongs_elsewhere(claim: &Claim, ctx: &Context, pool_key: &PoolKey, owner: &str) -> Result<Next, Error> {
    let key = &claim.key;
    ctx.index.stop_waiting(pool_key, key);
    let message = format!("IPAddress {key} already exists and belongs to {owner}, not to {pool_key}");
    set_ready(claim, ctx, ClaimReason::AllocationFailed, message, None).await?;
    Ok(Next::AwaitChange)
}

/// The claim's resourceVersion and whether it has finalizers, as cached; read live when its resourceVersion was not
/// kept (it is opaque, and only the API server's decimal ones are).
async fn as_read(claim: &Claim, ctx: &Context) -> Result<Read, Error> {
    if let Some(resource_version) = claim.resource_version.text() {
        return Ok(Read { resource_version, has_finalizers: claim.has_finalizers });
    }
    let live = ctx
        .api
        .get_claim(&claim.key)
        .await
        .map_err(Error::api("reading the claim"))?
        .ok_or_else(|| Error::api("reading the claim")(ApiError::NotFound))?;
    Ok(Read {
        resource_version: live.metadata.resource_version.unwrap_or_default(),
        has_finalizers: live.claim.has_finalizers,
    })
}

/// Writes the Ready condition (and addressRef) when it changed, and publishes an Event when it tells something the
/// condition alone does not (see [`deserves_event`]).
///
/// One merge patch of the status subresource, guarded by the resourceVersion the decision was made on. Merge patches
/// replace lists whole, so the conditions lists are written with every other controller's entries as they are: from
/// the cache when the claim has none (it keeps our `Ready` only), read live otherwise.
async fn set_ready(
    claim: &Claim,
    ctx: &Context,
    reason: ClaimReason,
    message: String,
    address_ref: Option<&str>,
) -> Result<(), Error> {
    let ready = Ready { reason, message };
    let stored = claim.ready.as_ref();
    let stored_ref = claim.address_ref();
    let address_ref = address_ref.or(stored_ref);
    let current = is_current(stored, &ready) && stored_ref == address_ref;
    let written = crate::compact::digest(&(&ready, address_ref));
    if current || ctx.index.already_written(claim, written) {
        return Ok(());
    }
    let (conditions, v1beta2_conditions, resource_version) = match claim.resource_version.text() {
        Some(version) if !claim.foreign_conditions => {
            let ours = stored_conditions(stored);
            (ours.clone(), ours, version)
        }
        _ => {
            let live = ctx
                .api
                .get_claim_conditions(&claim.key)
                .await
                .map_err(Error::api("reading the claim status"))?
                .ok_or_else(|| Error::api("reading the claim status")(ApiError::NotFound))?;
            (live.conditions, live.v1beta2, live.resource_version)
        }
    };
    let body = claim_status(
        ctx.capi().ipam,
        &conditions,
        &v1beta2_conditions,
        &ready,
        address_ref,
        claim.generation.map(i64::from),
        ctx.now(),
    );
    ctx.api
        .patch_claim_status(&claim.key, &resource_version, body)
        .await
        .map_err(Error::api("writing the claim status"))?;
    ctx.index.remember_written(claim, written);
    if deserves_event(stored, &ready) {
        let type_ = match reason {
            ClaimReason::Allocated | ClaimReason::WaitingForCluster | ClaimReason::ClusterPaused => EventType::Normal,
            _ => EventType::Warning,
        };
        ctx.events
            .publish(
                &*ctx.api,
                ctx.now(),
                &claim_reference(claim, ctx.capi().ipam),
                Note { type_, reason: reason.as_str(), action: "Allocate", note: &ready.message },
            )
            .await;
    }
    Ok(())
}

/// Events are for failures, waits and recoveries: every change of the Ready status or reason, except a claim's first
/// `Allocated` (the condition says it, and a burst of thousands of allocations would cost thousands of Event writes
/// that tell nothing more).
pub fn deserves_event(stored: Option<&crate::capi::ReadyCondition>, ready: &Ready) -> bool {
    is_transition(stored, ready) && !(stored.is_none() && ready.reason.is_ready())
}

/// The claim `key` is gone (or replaced by one of another pool) while the hold of its uncertain create stays: the
/// IPAddress was created (it is recorded, and released as an orphan) or not (the hold goes, unless a new claim of that
/// name in that pool took it over). Run by the claim's worker, so no create of the name is in flight meanwhile.
pub async fn settle_uncertain_create(ctx: &Context, key: &ObjectKey) -> Result<Next, Error> {
    let Some(pool) = ctx.index.orphaned_hold(key) else { return Ok(Next::AwaitChange) };
    match ctx.api.get_address(key).await.map_err(Error::api("reading the IPAddress"))? {
        Some(created) if ctx.index.remember_address(key, &created).is_some() => {
            if AddressRecord::of(&created).is_none_or(|r| *r.pool != pool) {
                // The name was taken by an IPAddress of another of our pools: our create never happened.
                ctx.index.abandon_orphaned_hold(&pool, key);
            }
            super::orphans::release_if_orphaned(ctx, key).await;
        }
        // Not created, or gone again already.
        _ => ctx.index.abandon_orphaned_hold(&pool, key),
    }
    Ok(Next::AwaitChange)
}

/// A record of an IPAddress we wrote that a relist of the watch did not show: read, it stays or goes.
pub async fn resolve_doubtful_record(ctx: &Context, key: &ObjectKey) -> Result<(), Error> {
    let Some(record) = ctx.index.address(key).filter(|r| r.doubtful) else { return Ok(()) };
    let live = ctx.api.get_address(key).await.map_err(Error::api("reading the IPAddress"))?;
    ctx.index.doubt_resolved(key, record.uid, live.as_ref());
    Ok(())
}

/// A live claim that will not create its IPAddress now (its pool is going or gone, its Cluster keeps it waiting)
/// finds out whether an earlier create that failed uncertainly happened: if not, the hold goes, so that the address
/// is free and a pool being deleted is not held up by it.
async fn settle_own_uncertain_create(ctx: &Context, pool_key: &PoolKey, key: &ObjectKey) -> Result<(), Error> {
    if !ctx.index.holds_unconfirmed(pool_key, key) {
        return Ok(());
    }
    match ctx.api.get_address(key).await.map_err(Error::api("reading the IPAddress"))? {
        Some(created) if ctx.index.remember_address(key, &created).is_some() => {}
        _ => ctx.index.abandon(pool_key, key),
    }
    Ok(())
}

/// Deletion: the grace period, then the IPAddress (finalizer off, deleted), then the claim's finalizer. What the
/// index keeps about the claim goes with its Delete event.
async fn release(claim: &Claim, ctx: &Context, pool_key: &PoolKey) -> Result<Next, Error> {
    let key = &claim.key;
    ctx.index.stop_waiting(pool_key, key);
    if claim.release_finalizer_index.is_none() {
        return Ok(Next::AwaitChange);
    }
    // addressReuseGracePeriodSeconds (IP pools): hold the address, unless the pool is gone or going.
    if let Some(wait) = ctx.index.pool(pool_key).and_then(|pool| reuse_grace_remaining(claim, &pool, ctx.now())) {
        debug!(claim = %key, seconds = wait.as_secs_f64(), "holding the address for the reuse grace period");
        return Ok(Next::After(wait + Duration::from_millis(50)));
    }
    match ctx.api.get_address(key).await.map_err(Error::api("reading the IPAddress"))? {
        // Only an IPAddress of the claim's pool, made for this claim, is ours to delete.
        Some(address) if !ipaddress::is_ours_for(&address, &key.name, Some(pool_key)) => {
            debug!(claim = %key, "the IPAddress of this name belongs to another provider; leaving it alone");
            // The name is taken: a create of ours that failed uncertainly did not happen, and its hold goes.
            ctx.index.abandon(pool_key, key);
        }
        Some(address) => {
            ctx.index.claim_deleted_for_good(pool_key, claim);
            // Gone now: the address is free at once (the watch event confirms it later).
            if ipaddress::delete(ctx, &address, "deleting the IPAddress").await? {
                ctx.index.deleted_address(key, pool_key, address.metadata.uid.as_deref());
            }
            info!(claim = %key, "released");
        }
        // None exists: a create of ours that failed uncertainly did not happen, and its hold goes.
        None => ctx.index.abandon(pool_key, key),
    }
    if let Some(index) = claim.release_finalizer_index {
        let target = Target::Claim(key.clone());
        finalizers::remove_at(ctx, &target, RELEASE_ADDRESS_FINALIZER, usize::from(index), &claim.uid.to_string())
            .await?;
    }
    Ok(Next::AwaitChange)
}

/// How much longer a deleted claim's address is held (`addressReuseGracePeriodSeconds`, IP pools that are not being
/// deleted); `None` when it may go now.
pub fn reuse_grace_remaining(claim: &Claim, pool: &Pool, now: Timestamp) -> Option<Duration> {
    if pool.is_deleting() {
        return None;
    }
    let grace = pool.spec.reuse_grace_period_seconds().filter(|g| *g > 0)?;
    let deleted_at = claim.deletion_timestamp.as_ref()?;
    let remaining = now.duration_until(deleted_at.0 + jiff::SignedDuration::from_secs(grace));
    remaining.is_positive().then(|| Duration::try_from(remaining).unwrap_or(Duration::from_secs(1)))
}
