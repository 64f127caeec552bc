//! The IPAddressClaim controller: claims get an IPAddress and `status.addressRef`, exactly once, with a `Ready`
//! condition and an Event on failures, waits and recoveries; deleted claims release their address. A reconcile reads
//! the claim's view of the index in one step (`ClaimView`) and decides on it (`gate`, `adopt`'s checks); `allocate`
//! holds an address in one step; the rest writes, and each success is reported back in one call.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use tracing::{debug, info};

use super::status::ClaimReason;
use super::{Context, Error, finalizers, ipaddress};
use crate::api::{GROUP, Pool, RELEASE_ADDRESS_FINALIZER, WATCH_FILTER_LABEL};
use crate::apiserver::{ApiError, Target};
use crate::capi::{CapiVersion, Claim, IpAddress};
use crate::compact::Uid;
use crate::index::{
    AddressRecord, AllocateError, Assigned, ClaimView, IfNotCreated, Index, ObjectKey, Observation, Observed, PoolKey,
    Served,
};
use crate::runtime::retry::Next;
use crate::runtime::retry::RECHECK;

mod adopt;
use adopt::{LetGo, adopt, allocated_message, belongs_elsewhere, let_go, told_of};

mod ready;
#[cfg(test)]
pub(super) use ready::deserves_event;
use ready::{as_read, set_ready};

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
pub fn gate(claim: &Claim, view: &ClaimView) -> Gate {
    let namespace = &*claim.key.namespace;
    let deleting = claim.deletion_timestamp.is_some();
    if claim.paused {
        return Gate::Paused;
    }
    if let Some(cluster) = claim.cluster() {
        // Velero restores Clusters last: wait, the Cluster's creation (or unpause) wakes this claim.
        match view.cluster_paused {
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
    if view.pool.as_ref().is_some_and(|p| p.is_paused()) {
        return Gate::Paused;
    }
    if deleting { Gate::Release } else { Gate::Bind }
}

/// The address for a claim without an IPAddress, held in the pool's allocator before anything is written
/// (`Index::allocate`: the one it holds already, else the requested one, else the one its pool pins to it, else the
/// lowest free one). `previous`, the address a bound claim's IPAddress held, comes first while it is free.
pub fn allocate(
    claim: &Claim,
    pool_key: &PoolKey,
    previous: Option<&str>,
    index: &Index,
) -> Result<Assigned, AllocateError> {
    if previous.is_some() {
        match index.allocate(claim, pool_key, previous) {
            Err(AllocateError::Requested { .. }) => {}
            assigned => return assigned,
        }
    }
    index.allocate(claim, pool_key, claim.requested_address.as_deref())
}

/// Runs once every watch has listed (the claim workers wait for that before they read the claim).
pub async fn reconcile(claim: &Claim, ctx: &Context) -> Result<Next, Error> {
    let started = std::time::Instant::now();
    let result = reconcile_claim(claim, ctx).await;
    ctx.reconciled(crate::metrics::CLAIM_CONTROLLER, started.elapsed(), &result);
    result
}

async fn reconcile_claim(claim: &Claim, ctx: &Context) -> Result<Next, Error> {
    let key = &claim.key;
    let Some(kind) = claim.pool_kind else { return Ok(Next::AwaitChange) };
    let view = ctx.index.claim_view(claim, PoolKey::new(kind, &key.namespace, &claim.pool_name));
    let pool_key = view.pool_key.clone();
    match &view.served {
        Served::Here => {}
        // Its pool's shard's manager serves it (docs/operations.md, sharded managers).
        Served::Elsewhere => return Ok(Next::AwaitChange),
        Served::Nowhere { .. } if claim.deletion_timestamp.is_some() => {}
        Served::Nowhere { pool_shard, claim_shard } => {
            if claim.address_ref().is_none() {
                // The same words from every manager that sees it, so that two never rewrite each other's.
                let labelled = claim_shard.as_deref().map_or_else(|| "no such label".to_owned(), |s| format!("{s:?}"));
                let message = format!(
                    "{pool_key} belongs to the manager started with --watch-filter={pool_shard} (the pool's label \
                     {WATCH_FILTER_LABEL}), which does not watch this claim (its label: {labelled}): label the claim \
                     {WATCH_FILTER_LABEL}={pool_shard}, or use a pool of its own manager"
                );
                set_ready(claim, ctx, ClaimReason::PoolNotReady, message, None).await?;
            }
            return Ok(Next::AwaitChange);
        }
    }
    let gate = gate(claim, &view);
    if matches!(gate, Gate::Paused | Gate::WaitForCluster(..))
        && !told_of(claim, view.held)
        && view.unwanted_duplicate()
        && let Some(record) = view.record.as_ref().filter(|r| *r.pool == pool_key)
    {
        // Pause holds our decisions, not the undoing of a write that landed too late (a fenced leader's): an
        // IPAddress no claim is bound to, holding an address another holds, goes even now (a move would copy it).
        // Withdrawn already (a delete whose answer was lost), its deletion is finished: no one else finishes it
        // while a claim of its name exists, and the claim may wait for its Cluster for good.
        let why = if record.deleting { LetGo::Deleting } else { LetGo::Duplicate };
        return let_go(ctx, key, &pool_key, record.uid, why).await;
    }
    match gate {
        Gate::Paused => {
            ctx.index.stop_waiting(&pool_key, key);
            debug!(claim = %key, pool = %pool_key, "paused");
            return Ok(Next::AwaitChange);
        }
        Gate::WaitForCluster(reason, message) => {
            ctx.index.stop_waiting(&pool_key, key);
            // A bound claim's hold without an IPAddress (deleted from under it) is its machine's address: it stays, but
            // for a pool that goes (nothing is made again in it, and the hold must not keep it).
            let pool_stays = view.pool.as_ref().is_some_and(|p| !p.is_deleting());
            // The cache may show unbound a claim that our own status write bound (its watch relisting past it), whose
            // hold was kept when a person deleted its IPAddress: read live before it goes, or the address its machine
            // uses, here or after a move, is free (seed 430083652).
            // A bound claim made again with another address (its own taken meanwhile) and paused before that create
            // was confirmed: the hold is no machine's address (as at the Refused path's `machines`), and is found out
            // now, or a claim waiting on the pool starves for as long as the pause lasts (seed 480178155).
            let held_address = view.held.and_then(crate::index::Held::address);
            if !pool_stays
                || (claim.address_ref().is_none()
                    && ctx.index.holds_unconfirmed(&pool_key, key)
                    && lives_unbound(claim, ctx).await?)
                || (claim.address_ref().is_some()
                    && claim.bound_address.is_some_and(|b| held_address != Some(b))
                    && ctx.index.holds_unconfirmed(&pool_key, key)
                    && lives_bound_to_another(claim, ctx, held_address).await?)
            {
                settle_uncertain_create_before_waiting(ctx, &pool_key, key).await?;
            }
            // Bound again to the address that an entry of the pool's moved-away annotation reserves for it (it came
            // back with its Cluster), and paused again before the entry's removal was written (a leader change lost
            // it): the entry goes now, as adopting takes it out, not when the pause ends (seed 450041258). Read live:
            // a move away under way (clusterctl pauses first) keeps it.
            if let Some(held) = view.held
                && view.holds_reserved
                && view.record.as_ref().is_some_and(|r| *r.pool == pool_key)
                && claim.address_ref() == Some(&*key.name)
                && told_of(claim, view.held)
                && !claim.moving_away
                && claim.deletion_timestamp.is_none()
                && lives_bound_staying(claim, ctx).await?
            {
                ctx.index.observe(Observed::BoundTo { pool: &pool_key, key, held });
            }
            debug!(claim = %key, reason = reason.as_str(), "waiting for the Cluster");
            if claim.deletion_timestamp.is_none() {
                if claim.address_ref().is_none() {
                    set_ready(claim, ctx, reason, message, None).await?;
                } else if says_not_ready_while_held(claim, &view) {
                    // A bound claim keeps its Ready as it is (nothing changes for it), but for a failure it no longer
                    // has: its IPAddress made again, that status write lost, and a leader change (seed 630015735).
                    set_ready(claim, ctx, ClaimReason::Allocated, allocated_message(&view), Some(&key.name)).await?;
                }
            }
            return Ok(Next::AwaitChange);
        }
        Gate::Release => return release(claim, ctx, &view).await,
        Gate::Bind => {}
    }

    // The finalizer is persisted before any address exists, so a deleted claim never leaves an IPAddress behind. The
    // rest of this reconcile works on the claim as that write returned it (its resourceVersion is the status write's
    // precondition).
    let patched;
    let (claim, view) = if claim.release_finalizer_index.is_none() {
        let read = as_read(claim, ctx).await?;
        patched = ctx
            .api
            .add_claim_finalizer(key, RELEASE_ADDRESS_FINALIZER, &read)
            .await
            .map_err(Error::api("adding a finalizer"))?
            .claim;
        debug!(claim = %key, index = ?patched.release_finalizer_index, "finalizer added");
        // The write awaited, and the index may have moved on meanwhile (an IPAddress of the name seen): what follows
        // decides on a new view.
        let view = ctx.index.claim_view(&patched, pool_key.clone());
        (&patched, view)
    } else {
        (claim, view)
    };

    if let Some(record) = &view.record {
        return adopt(claim, ctx, &view, record).await;
    }

    let Some(pool) = view.pool else {
        settle_uncertain_create_before_waiting(ctx, &pool_key, key).await?;
        let message = format!("{pool_key} not found");
        set_ready(claim, ctx, ClaimReason::PoolNotReady, message, None).await?;
        return Ok(Next::AwaitChange);
    };
    if pool.is_deleting() {
        settle_uncertain_create_before_waiting(ctx, &pool_key, key).await?;
        let message = format!("{pool_key} is being deleted");
        set_ready(claim, ctx, ClaimReason::PoolNotReady, message, None).await?;
        return Ok(Next::AwaitChange);
    }
    if let Some(wait) = restore_wait_remaining(claim, view.held.is_some(), ctx) {
        // Velero restores IPAddressClaims before IPAddresses: allocated now, the claim's machine would lose its
        // address to the restore's AlreadyExists. Its IPAddress, when it comes, wakes it.
        let message = format!(
            "restored by Velero: waiting up to {} s after its creation for its IPAddress to be restored before \
             allocating a new address (--restore-wait)",
            ctx.options.restore_wait.as_secs()
        );
        set_ready(claim, ctx, ClaimReason::WaitingForIPAddress, message, None).await?;
        return Ok(Next::After(wait));
    }
    // Not bound, and its uncertain create was of an address the pool no longer allocates (an edit meanwhile): found
    // out first, so that the claim gets an address the pool allocates if that create did not happen. A bound claim's
    // hold is its machine's address, and stays (the pool says it is out of range); so is the hold of one the cache
    // shows unbound but our status write bound to it.
    if claim.address_ref().is_none()
        && view.out_of_range
        && ctx.index.holds_unconfirmed(&pool_key, key)
        && !bound_meanwhile_to(claim, ctx, view.held.and_then(crate::index::Held::address)).await?
    {
        settle_uncertain_create_before_waiting(ctx, &pool_key, key).await?;
        return Ok(Next::After(Duration::ZERO));
    }
    // Bound, and its IPAddress gone (a person deleted it): made again only for a claim that still lives bound, read
    // live. The cache may still show one that is gone (a watch stalled by an API server restart), and a claim gone
    // with its Cluster's move uses its address over there.
    if claim.address_ref().is_some() && !lives_bound(claim, ctx).await? {
        debug!(claim = %key, "the claim is gone or being deleted as the API server has it; its watch event follows");
        return Ok(Next::AwaitChange);
    }
    // Bound, and its IPAddress gone with what this process knew of it (deleted from under it before a restart or a
    // leader change): the address its condition names is the one its machine uses, and it gets it back while free.
    let previous = claim.bound_address.filter(|_| view.held.is_none()).map(|a| a.to_string());
    match allocate(claim, &pool_key, previous.as_deref(), &ctx.index) {
        Ok(assigned) => create_address(claim, ctx, &pool_key, &pool, &assigned).await,
        // The pool's label may have given it to another shard's manager while this run awaited (the view is from its
        // start): that manager cannot see our hold, so nothing is taken from it (the simulation's second manager met
        // it). Looked at again, the claim is another manager's.
        Err(AllocateError::ServedElsewhere { .. }) => Ok(Next::After(Duration::ZERO)),
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
            ctx.index.wait_for_requested(&pool_key, key);
            set_ready(claim, ctx, ClaimReason::AllocationFailed, e.to_string(), None).await?;
            Ok(Next::After(RECHECK))
        }
    }
}

/// Whether the bound `claim`'s condition says it is not Ready while the IPAddress of its name in its pool holds the
/// address it is bound to (what `adopt` says Ready of).
fn says_not_ready_while_held(claim: &Claim, view: &ClaimView) -> bool {
    claim.ready.as_ref().is_none_or(|ready| ready.status != Some(true))
        && claim.address_ref() == Some(&*claim.key.name)
        && view.record.as_ref().is_some_and(|r| *r.pool == view.pool_key)
        && view.held.is_some()
        && told_of(claim, view.held)
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
            let (Observation { latency, .. }, view) =
                ctx.index.observe_then_view(claim, pool_key.clone(), Observed::Created { claim, object: &created });
            let out_of_range = view.out_of_range;
            // Paused meanwhile, a move may have copied it (clusterctl pauses, then copies), and the claim over there
            // adopts it, in range or not: kept, the claim waits for its Cluster, and a move leaves it behind with its
            // address reserved (seed 460166466).
            if claim.address_ref().is_none()
                && out_of_range
                && ipaddress::cluster_paused_now(ctx, &key.namespace, claim.cluster()).await?
            {
                return Ok(Next::AwaitChange);
            }
            // Only an address not handed out yet: a bound claim making its IPAddress again keeps its machine's.
            if claim.address_ref().is_none()
                && (out_of_range || view.served != Served::Here)
                && !bound_meanwhile_to(claim, ctx, Some(assigned.address)).await?
            {
                // The pool was edited while the create was in flight (the webhook cannot see an allocation that is
                // not written yet), or relabelled for another shard's manager, which cannot see our hold: not handed
                // out; the claim gets an address the pool allocates, from the manager that serves it. Fenced as every
                // withdrawal is (a status write conditioned on the claim as read, then the delete): another manager
                // (both serve a claim whose pool went) may bind it after the read above (seed 470496860).
                let judged = created.metadata.uid.as_deref().map(Uid::of);
                return let_go(ctx, key, pool_key, judged, LetGo::NotAllocated).await;
            }
            ctx.metrics.allocated(pool_key.kind, latency);
            info!(claim = %key, address = %assigned.address, pool = %pool_key, "allocated");
            let message = format!("allocated {} from {pool_key}", assigned.address);
            match set_ready(claim, ctx, ClaimReason::Allocated, message, Some(&key.name)).await {
                // A DELETE that raced our finalizer can remove the claim anyway (the API server does not look at
                // finalizers again when it retries a delete). Its IPAddress is the orphan path's (the claim's Delete
                // event, or the sweep): released here, before that event can show a delete-for-move, a moved claim's
                // address would be freed instead of reserved (soak seed 100031277).
                Err(Error::Api { source: ApiError::NotFound, .. }) => {
                    debug!(claim = %key, "the claim vanished while its address was being created; left to the orphan check");
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
            // Not of this pool, our create never happened, and the address is free again.
            let then = IfNotCreated::Retried;
            let read = Observed::NameRead { pool: pool_key, key, live: Some(&existing), then };
            match ctx.index.observe_then_view(claim, pool_key.clone(), read) {
                (Observation { record: Some(record), .. }, view) => adopt(claim, ctx, &view, &record).await,
                _ if AddressRecord::of(&existing).is_none() => {
                    belongs_elsewhere(claim, ctx, pool_key, &ipaddress::owner_of(&existing)).await
                }
                // One we deleted a moment ago.
                _ => Ok(Next::After(Duration::from_millis(200))),
            }
        }
        Err(e @ (ApiError::Refused { .. } | ApiError::NotFound)) => {
            // Refused: nothing was created now. An earlier attempt that timed out may have created it, though (the
            // refusal comes from admission, before a name conflict): the hold goes only if no IPAddress exists.
            if ctx.index.holds_unconfirmed(pool_key, key) {
                let live = ctx.api.get_address(key).await.map_err(Error::api("reading the IPAddress"))?;
                // A bound claim making its IPAddress again keeps its hold: the address is its machine's, and a waiting
                // claim must not get it while the API server refuses (soak seed 110141832).
                let machines = (claim.address_ref().is_some()
                    && claim.bound_address.is_none_or(|b| b == assigned.address))
                    || bound_meanwhile_to(claim, ctx, Some(assigned.address)).await?;
                let then = if machines { IfNotCreated::KeptForTheMachine } else { IfNotCreated::GivenUp };
                let read = Observed::NameRead { pool: pool_key, key, live: live.as_ref(), then };
                if let (Observation { record: Some(record), .. }, view) =
                    ctx.index.observe_then_view(claim, pool_key.clone(), read)
                    && *record.pool == *pool_key
                {
                    return adopt(claim, ctx, &view, &record).await;
                }
            }
            let message = format!("creating IPAddress {key}: {}", refusal(&e));
            set_ready(claim, ctx, ClaimReason::AllocationFailed, message.clone(), None).await?;
            Err(Error::Rejected(message))
        }
        // Anything else may or may not have created it: keep the hold, the retry reuses the same address.
        Err(e) => Err(Error::api("creating the IPAddress")(e)),
    }
}

/// Whether the claim, unbound as cached, is bound to `address` as the API server has it: the cache may lag behind
/// our own status write that bound it (a watch that relists), and a bound claim's address is its machine's. Bound to
/// another address, `address` is no machine's.
async fn bound_meanwhile_to(claim: &Claim, ctx: &Context, address: Option<std::net::IpAddr>) -> Result<bool, Error> {
    let Some(address) = address else { return Ok(false) };
    Ok(live_claim(claim, ctx).await?.is_some_and(|l| l.address_ref().is_some() && l.bound_address == Some(address)))
}

/// The claim as the API server has it now, if it is still this one (its UID).
async fn live_claim(claim: &Claim, ctx: &Context) -> Result<Option<Claim>, Error> {
    let live = ctx.api.get_claim(&claim.key).await.map_err(Error::api("reading the claim"))?;
    Ok(live.map(|l| l.claim).filter(|l| l.uid == claim.uid))
}

/// Whether the claim, bound as cached, still lives bound as the API server has it (not deleted, not being deleted).
async fn lives_bound(claim: &Claim, ctx: &Context) -> Result<bool, Error> {
    Ok(live_claim(claim, ctx).await?.is_some_and(|l| l.address_ref().is_some() && l.deletion_timestamp.is_none()))
}

/// Whether the claim lives bound as the API server has it (not being deleted), its condition naming an address other
/// than `held`: `held` is then no machine's address. A cache behind our own status write naming `held` does not count.
async fn lives_bound_to_another(claim: &Claim, ctx: &Context, held: Option<std::net::IpAddr>) -> Result<bool, Error> {
    Ok(live_claim(claim, ctx).await?.is_some_and(|l| {
        l.address_ref().is_some() && l.deletion_timestamp.is_none() && l.bound_address.is_some_and(|b| Some(b) != held)
    }))
}

/// Whether the claim lives bound as the API server has it, and staying: not deleted, being deleted, or marked for a
/// move.
async fn lives_bound_staying(claim: &Claim, ctx: &Context) -> Result<bool, Error> {
    Ok(live_claim(claim, ctx)
        .await?
        .is_some_and(|l| l.address_ref().is_some() && l.deletion_timestamp.is_none() && !l.moving_away))
}

/// Whether the claim, unbound as cached, lives unbound as the API server has it: not bound meanwhile, and neither gone
/// nor being deleted unless the cache shows that already (its watch event decides about those).
async fn lives_unbound(claim: &Claim, ctx: &Context) -> Result<bool, Error> {
    Ok(live_claim(claim, ctx).await?.is_some_and(|l| {
        l.address_ref().is_none() && (l.deletion_timestamp.is_none() || claim.deletion_timestamp.is_some())
    }))
}

/// What the API server said when it refused a request.
fn refusal(error: &ApiError) -> String {
    match error {
        ApiError::Refused { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

/// The claim `key` is gone (or replaced by one of another pool) while the hold of its uncertain create stays: the
/// IPAddress was created (it is recorded, and released as an orphan) or not (the hold goes, unless a new claim of that
/// name in that pool took it over). Run by the claim's worker, so no create of the name is in flight meanwhile.
pub async fn settle_gone_claims_uncertain_create(ctx: &Context, key: &ObjectKey, pool: &PoolKey) -> Result<(), Error> {
    let live = ctx.api.get_address(key).await.map_err(Error::api("reading the IPAddress"))?;
    let then = IfNotCreated::GivenUpForAGoneClaim;
    // Recorded (created, or the name taken by an IPAddress of another of our pools), it is released as an orphan.
    if ctx.index.observe(Observed::NameRead { pool, key, live: live.as_ref(), then }).record.is_some() {
        super::orphans::release_if_orphaned(ctx, key).await;
    }
    Ok(())
}

/// A record of an IPAddress we wrote that a relist of the watch did not show: read, it stays or goes.
pub async fn resolve_doubtful_record(ctx: &Context, key: &ObjectKey, record: &AddressRecord) -> Result<(), Error> {
    let live = ctx.api.get_address(key).await.map_err(Error::api("reading the IPAddress"))?;
    ctx.index.observe(Observed::DoubtRead { key, uid: record.uid, live: live.as_ref() });
    Ok(())
}

/// A live claim that will not create its IPAddress now (its pool is going or gone, its Cluster keeps it waiting)
/// finds out whether an earlier create that failed uncertainly happened: if not, the hold goes, so that the address
/// is free and a pool being deleted is not held up by it.
async fn settle_uncertain_create_before_waiting(
    ctx: &Context,
    pool_key: &PoolKey,
    key: &ObjectKey,
) -> Result<(), Error> {
    if !ctx.index.holds_unconfirmed(pool_key, key) {
        return Ok(());
    }
    let live = ctx.api.get_address(key).await.map_err(Error::api("reading the IPAddress"))?;
    ctx.index.observe(Observed::NameRead { pool: pool_key, key, live: live.as_ref(), then: IfNotCreated::GivenUp });
    Ok(())
}

/// Deletion: the grace period, then the IPAddress (finalizer off, deleted), then the claim's finalizer. What the
/// index keeps about the claim goes with its Delete event.
async fn release(claim: &Claim, ctx: &Context, view: &ClaimView) -> Result<Next, Error> {
    let (key, pool_key) = (&claim.key, &view.pool_key);
    ctx.index.stop_waiting(pool_key, key);
    // Released already, the claim may still be held by another finalizer (deleted in the foreground, the garbage
    // collector's waits for its dependents): an IPAddress of its name that appeared since (a deposed leader's late
    // create) is released too, or the two would wait for each other for good (soak seed 100048737).
    if claim.release_finalizer_index.is_none() && view.record.is_none() {
        return Ok(Next::AwaitChange);
    }
    // addressReuseGracePeriodSeconds (IP pools): hold the address, unless the pool is gone or going.
    if let Some(wait) = view.pool.as_ref().and_then(|pool| reuse_grace_remaining(claim, pool, ctx.now())) {
        debug!(claim = %key, seconds = wait.as_secs_f64(), "holding the address for the reuse grace period");
        return Ok(Next::After(wait + Duration::from_millis(50)));
    }
    let found = ctx.api.get_address(key).await.map_err(Error::api("reading the IPAddress"))?;
    // Finalizer on, an IPAddress naming another claim of this name as its owner: seen through a lagging watch, this
    // claim may be long gone and a new one of its name have adopted it (seed 510263267). The claim read live, after
    // the IPAddress, tells: an adopter rewrites the owner before it binds, and two claims of a name never live at
    // once, so while this one lives the other owner is an earlier, gone claim, and the IPAddress is released here.
    let adopted_by_another = match &found {
        Some(address) if claim.release_finalizer_index.is_some() && made_for_another(address, claim) => {
            live_claim(claim, ctx).await?.is_none()
        }
        _ => false,
    };
    match found {
        // Only an IPAddress of the claim's pool, made for this claim, is ours to delete.
        // Released already (our finalizer off), only the IPAddress made for this claim (its owner reference) is
        // released: after the claim goes, one of its name may be a new claim's (helper-7's review).
        Some(address)
            if !made_for(&address, claim) && (claim.release_finalizer_index.is_none() || adopted_by_another) =>
        {
            debug!(claim = %key, "the IPAddress of this name was not made for this claim; leaving it alone");
        }
        // Left behind by the move of an earlier claim of this name (marked, or known to be moving away), not made for
        // this claim: the orphan release's, which keeps it until its address is in the pool's annotation. Deleted
        // here, its mark (the reservation's only record that survives a restart) could go before the entry is written
        // (seed 500178236). Only one the orphan release looks at: of a global pool (a namespaced pool's moves with
        // it), recorded as this very object, and made for a claim (helper-60 F1, F2).
        Some(address)
            if pool_key.kind.is_global()
                && !made_for(&address, claim)
                && view.record.as_ref().is_some_and(|r| {
                    r.uid == address.metadata.uid.as_deref().map(Uid::of)
                        && r.made_for_a_claim()
                        && (r.moving_away || AddressRecord::of(&address).is_some_and(|live| live.moving_away))
                }) =>
        {
            debug!(claim = %key, "the IPAddress of this name was left behind by a move; the orphan release takes it");
        }
        Some(address) if !ipaddress::is_ours_for(&address, &key.name, Some(pool_key)) => {
            debug!(claim = %key, "the IPAddress of this name belongs to another provider; leaving it alone");
            // The name is taken: a create of ours that failed uncertainly did not happen, and its hold goes.
            let read = Observed::NameRead { pool: pool_key, key, live: Some(&address), then: IfNotCreated::GivenUp };
            ctx.index.observe(read);
        }
        Some(address) => {
            ctx.index.claim_deleted_for_good(pool_key, claim);
            // Gone now: the address is free at once (the watch event confirms it later).
            if ipaddress::delete(ctx, &address, "deleting the IPAddress").await? {
                let uid = address.metadata.uid.as_deref();
                ctx.index.observe(Observed::DeletedByUs { key, pool: pool_key, uid });
            }
            info!(claim = %key, "released");
        }
        // None exists: a create of ours that failed uncertainly did not happen, and its hold goes.
        None => {
            ctx.index.observe(Observed::NameRead { pool: pool_key, key, live: None, then: IfNotCreated::GivenUp });
        }
    }
    if let Some(index) = claim.release_finalizer_index {
        let target = Target::Claim(key.clone());
        finalizers::remove_at(ctx, &target, RELEASE_ADDRESS_FINALIZER, usize::from(index), &claim.uid.to_string())
            .await?;
    }
    Ok(Next::AwaitChange)
}

/// Whether `address` names `claim` (its UID) as its owner.
fn made_for(address: &IpAddress, claim: &Claim) -> bool {
    let uid = claim.uid.to_string();
    address.metadata.owner_references.iter().flatten().any(|o| o.kind == "IPAddressClaim" && o.uid == uid)
}

/// Whether `address` names as its owner another claim of `claim`'s name (another UID).
fn made_for_another(address: &IpAddress, claim: &Claim) -> bool {
    let uid = claim.uid.to_string();
    address
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "IPAddressClaim" && *o.name == *claim.key.name && o.uid != uid)
}

/// How much longer a claim restored by Velero waits for its IPAddress before it is allocated a new one; `None` when
/// it was not restored, already holds an address here (an uncertain create of ours), or has waited long enough.
pub fn restore_wait_remaining(claim: &Claim, holds: bool, ctx: &Context) -> Option<Duration> {
    if !claim.restored || holds || claim.created == 0 {
        return None;
    }
    let until =
        i64::from(claim.created).saturating_add(i64::try_from(ctx.options.restore_wait.as_secs()).unwrap_or(i64::MAX));
    let remaining = until.saturating_sub(ctx.now().as_second());
    (remaining > 0).then(|| Duration::from_secs(remaining.unsigned_abs()))
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
