//! The IPAddressClaim controller: claims get an IPAddress and `status.addressRef`, exactly once, with a `Ready`
//! condition and an Event on failures, waits and recoveries; deleted claims release their address.
//!
//! A run is a loop of plan, do, observe: [`plan::plan`] decides the next step on the claim's view of the index (one
//! read of it, `ClaimView`) and what the run has read so far; this executor does the one read or write the step asks
//! for, records what the API server answered (`Index::observe`), takes the next view and plans again, until a step
//! ends the run. The rules that make it safe stay here: an address is held under the index's lock before any write
//! (`allocate`), a new view is taken only after a write was awaited, and nothing awaits between a run's end and the
//! queue's `finish`.

use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use tracing::{debug, info, warn};

use super::status::ClaimReason;
use super::{Context, Error, finalizers, ipaddress};
use crate::api::{GROUP, Pool, RELEASE_ADDRESS_FINALIZER};
use crate::apiserver::{ApiError, Target};
use crate::capi::{CapiVersion, Claim};
use crate::compact::Uid;
use crate::index::{
    AddressRecord, AllocateError, Assigned, ClaimView, IfNotCreated, ObjectKey, Observation, Observed, PoolKey, Wait,
};
use crate::runtime::retry::Next;
use crate::runtime::retry::RECHECK;

mod adopt;
use adopt::{belongs_elsewhere, let_go};

pub mod plan;
use plan::{Created, End, Facts, LetGo, MAX_STEPS, Plan, Release, Step, bound_meanwhile_to, plan};
#[cfg(test)]
pub use plan::{Gate, gate, restore_wait_remaining, reuse_grace_remaining};

mod ready;
#[cfg(test)]
pub(super) use ready::deserves_event;
use ready::{as_read, set_ready};

/// Runs once every watch has listed (the claim workers wait for that before they read the claim), on the claim's view
/// as its run started (`ClaimRun::view`).
pub async fn reconcile(claim: &Claim, view: ClaimView, ctx: &Context) -> Result<Next, Error> {
    let started = std::time::Instant::now();
    let result = reconcile_claim(claim, view, ctx).await;
    ctx.reconciled(crate::metrics::CLAIM_CONTROLLER, started.elapsed(), &result);
    result
}

/// Plans, does and observes until a step ends the run (see the module's documentation).
async fn reconcile_claim(claim: &Claim, mut view: ClaimView, ctx: &Context) -> Result<Next, Error> {
    let pool_key = view.pool_key.clone();
    // The claim as our finalizer write returned it: the rest of the run works on it (its resourceVersion is the status
    // write's precondition).
    let mut patched: Option<Claim> = None;
    let mut live: Option<Option<Claim>> = None;
    let (mut settled, mut bound_back) = (false, false);
    for _ in 0..MAX_STEPS {
        let claim = patched.as_ref().unwrap_or(claim);
        let facts = Facts { live: live.as_ref().map(Option::as_ref), settled, bound_back, ..facts(ctx) };
        let Plan { step, stops_waiting } = plan(claim, &view, &facts);
        debug!(claim = %claim.key, ?step, "next step");
        let key = &claim.key;
        match step {
            Step::ReadClaim => {
                live = Some(live_claim(claim, ctx).await?);
                continue;
            }
            Step::AddFinalizer => {
                let read = as_read(claim, ctx).await?;
                let written = ctx
                    .api
                    .add_claim_finalizer(key, RELEASE_ADDRESS_FINALIZER, &read)
                    .await
                    .map_err(Error::api("adding a finalizer"))?
                    .claim;
                debug!(claim = %key, index = ?written.release_finalizer_index, "finalizer added");
                // The write awaited, and the index may have moved on meanwhile (an IPAddress of the name seen): what
                // follows decides on a new view.
                view = ctx.index.observe_then_view(&written, pool_key.clone(), Observed::NothingNew).1;
                patched = Some(written);
            }
            Step::SettleUncertainCreate { then } => {
                view = settle_uncertain_create(claim, ctx, &pool_key).await?;
                settled = true;
                if let Some(next) = then {
                    return Ok(next);
                }
            }
            Step::BoundBack(held) => {
                let observed = Observed::BoundTo { pool: &pool_key, key, held };
                view = ctx.index.observe_then_view(claim, pool_key.clone(), observed).1;
                bound_back = true;
            }
            Step::End(end) => {
                if stops_waiting {
                    ctx.index.observe(Observed::Waits { pool: &pool_key, key, wait: Wait::Nothing });
                }
                return execute(claim, ctx, &view, end).await;
            }
        }
        // A write was awaited: what was read before it is news no more.
        live = None;
    }
    // A bug in `plan` (its property test says it never happens): looked at again later, not in a hot loop.
    warn!(claim = %claim.key, "the claim's reconcile took more than {MAX_STEPS} steps; it is looked at again");
    Ok(Next::After(RECHECK))
}

/// Does the step that ends a run.
async fn execute(claim: &Claim, ctx: &Context, view: &ClaimView, end: End) -> Result<Next, Error> {
    let key = &claim.key;
    match end {
        End::Finish(next) => Ok(next),
        End::Say { reason, message, binds, then } => {
            set_ready(claim, ctx, view, reason, message, binds.then_some(&*key.name)).await?;
            Ok(then)
        }
        End::LetGo { judged, why } => let_go(ctx, key, view, judged, why).await,
        End::LetGoLeftBehind { judged } => match &view.record {
            // Of the claim's pool (`plan::adoption`), which the view shows as the index knows it: while the live pool
            // is another, not even deleted (the read after the DELETE guards the reservation: `finish_left_behind`).
            Some(record) if ipaddress::pool_known_as_it_is(ctx, record, view.pool.as_deref()).await => {
                let_go(ctx, key, view, judged, LetGo::LeftBehind).await
            }
            _ => Ok(Next::After(Duration::from_secs(1))),
        },
        End::BelongsElsewhere { owner } => belongs_elsewhere(claim, ctx, view, &owner).await,
        End::Adopt { repair } => adopt::bind(claim, ctx, view, repair).await,
        End::Release => release(claim, ctx, view).await,
        End::Allocate { previous } => allocate_and_create(claim, ctx, view, previous).await,
    }
}

/// What the claim does with an IPAddress of its name that a read after a create found (`plan::adoption`).
async fn adopt_found(claim: &Claim, ctx: &Context, view: &ClaimView, record: &AddressRecord) -> Result<Next, Error> {
    let end = plan::adoption(claim, view, record, &facts(ctx));
    if !matches!(end, End::BelongsElsewhere { .. }) {
        ctx.index.observe(Observed::Waits { pool: &view.pool_key, key: &claim.key, wait: Wait::Nothing });
    }
    Box::pin(execute(claim, ctx, view, end)).await
}

/// What a run knows before it read or did anything.
fn facts(ctx: &Context) -> Facts<'static> {
    Facts {
        live: None,
        settled: false,
        bound_back: false,
        now: ctx.now(),
        restore_wait: ctx.options.restore_wait,
        orphan_release_delay: ctx.options.orphan_release_delay,
    }
}

/// Holds an address for the claim and creates its IPAddress; a pool that has none for it says why.
async fn allocate_and_create(
    claim: &Claim,
    ctx: &Context,
    view: &ClaimView,
    previous: Option<std::net::IpAddr>,
) -> Result<Next, Error> {
    let pool_key = &view.pool_key;
    // `plan` allocates only in a pool the view shows.
    let Some(pool) = &view.pool else { return Ok(Next::After(RECHECK)) };
    let previous = previous.map(|a| a.to_string());
    // The address is held under the index's lock before the create goes (`State::allocate_for`).
    let allocating = Observed::Allocating { claim, pool: pool_key, previous: previous.as_deref() };
    let (Observation { assigned, .. }, view) = ctx.index.observe_then_view(claim, pool_key.clone(), allocating);
    // (An allocation always answers.)
    let Some(assigned) = assigned else { return Ok(Next::After(RECHECK)) };
    match assigned {
        Ok(assigned) => create_address(claim, ctx, &view, pool, &assigned).await,
        // The pool's label may have given it to another shard's manager while this run awaited (the view is from its
        // start): that manager cannot see our hold, so nothing is taken from it (the simulation's second manager met
        // it). Looked at again, the claim is another manager's.
        Err(AllocateError::ServedElsewhere { .. }) => Ok(Next::After(Duration::ZERO)),
        // The index registered the claim as waiting in the step that found nothing (`State::allocate_for`).
        Err(AllocateError::Exhausted { .. }) => {
            let message = format!("{pool_key} has no free address");
            set_ready(claim, ctx, &view, ClaimReason::PoolExhausted, message, None).await?;
            Ok(Next::After(RECHECK))
        }
        // The index registered the claim as waiting for its Cluster to hold fewer (`State::allocate_for`).
        Err(e @ AllocateError::QuotaExceeded { .. }) => {
            let message = format!("{e}: allocation resumes when the Cluster holds fewer or the quota is raised");
            set_ready(claim, ctx, &view, ClaimReason::QuotaExceeded, message, None).await?;
            Ok(Next::After(RECHECK))
        }
        Err(e @ (AllocateError::InvalidPool { .. } | AllocateError::Unknown { .. })) => {
            set_ready(claim, ctx, &view, ClaimReason::PoolNotReady, e.to_string(), None).await?;
            Ok(Next::AwaitChange)
        }
        Err(e @ AllocateError::Requested { .. }) => {
            // Retried when an address of the pool frees up (it may be the requested one) or the pool changes.
            set_ready(claim, ctx, &view, ClaimReason::AllocationFailed, e.to_string(), None).await?;
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

/// Creates the IPAddress for a freshly assigned address (`view`: the claim's, as its address was held).
async fn create_address(
    claim: &Claim,
    ctx: &Context,
    view: &ClaimView,
    pool: &Pool,
    assigned: &Assigned,
) -> Result<Next, Error> {
    let (key, pool_key) = (&claim.key, &view.pool_key);
    let object = ipaddress::new(ctx, claim, pool_key, pool, assigned);
    // Leadership is checked again right before the create, and a create still in flight when the term ends is
    // dropped (`crate::leader`): a replica that may have lost the Lease never creates an IPAddress.
    // Fenced, it is uncertain whether it was created: the hold stays (this replica's state goes with its term).
    match ctx.api.create_address(&object).await {
        Ok(created) => {
            let (Observation { latency, .. }, view) =
                ctx.index.observe_then_view(claim, pool_key.clone(), Observed::Created { claim, object: &created });
            if let Created::Withdraw { unless_paused } = plan::created(claim, &view) {
                // Kept while paused: the claim waits for its Cluster, and a move leaves it behind with its address
                // reserved.
                if unless_paused && ipaddress::cluster_paused_now(ctx, &key.namespace, claim.cluster()).await? {
                    return Ok(Next::AwaitChange);
                }
                if !bound_meanwhile(claim, ctx, assigned.address).await? {
                    // The claim gets an address the pool allocates, from the manager that serves it. Fenced as every
                    // withdrawal is (a status write conditioned on the claim as read, then the delete): another
                    // manager (both serve a claim whose pool went) may bind it after the read above (seed 470496860).
                    let judged = created.metadata.uid.as_deref().map(Uid::of);
                    return let_go(ctx, key, &view, judged, LetGo::NotAllocated).await;
                }
            }
            ctx.metrics.allocated(pool_key.kind, latency);
            info!(claim = %key, address = %assigned.address, pool = %pool_key, "allocated");
            let message = format!("allocated {} from {pool_key}", assigned.address);
            match set_ready(claim, ctx, &view, ClaimReason::Allocated, message, Some(&key.name)).await {
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
                (Observation { record: Some(record), .. }, view) => adopt_found(claim, ctx, &view, &record).await,
                (_, view) if AddressRecord::of(&existing).is_none() => {
                    belongs_elsewhere(claim, ctx, &view, &ipaddress::owner_of(&existing)).await
                }
                // One we deleted a moment ago.
                _ => Ok(Next::After(Duration::from_millis(200))),
            }
        }
        Err(e @ (ApiError::Refused { .. } | ApiError::NotFound)) => {
            // Refused: nothing was created now. An earlier attempt that timed out may have created it, though (the
            // refusal comes from admission, before a name conflict): the hold goes only if no IPAddress exists.
            // Looked at after the create's answer: the IPAddress's watch event may have confirmed the hold meanwhile.
            let (_, view) = ctx.index.observe_then_view(claim, pool_key.clone(), Observed::NothingNew);
            if view.holds_unconfirmed {
                let live = ctx.api.get_address(key).await.map_err(Error::api("reading the IPAddress"))?;
                let machines = plan::refused_keeps_the_hold(claim, assigned.address)
                    || bound_meanwhile(claim, ctx, assigned.address).await?;
                let then = if machines { IfNotCreated::KeptForTheMachine } else { IfNotCreated::GivenUp };
                let read = Observed::NameRead { pool: pool_key, key, live: live.as_ref(), then };
                if let (Observation { record: Some(record), .. }, view) =
                    ctx.index.observe_then_view(claim, pool_key.clone(), read)
                    && *record.pool == *pool_key
                {
                    return adopt_found(claim, ctx, &view, &record).await;
                }
            }
            let message = format!("creating IPAddress {key}: {}", refusal(&e));
            set_ready(claim, ctx, &view, ClaimReason::AllocationFailed, message.clone(), None).await?;
            Err(Error::Rejected(message))
        }
        // Anything else may or may not have created it: keep the hold, the retry reuses the same address.
        Err(e) => Err(Error::api("creating the IPAddress")(e)),
    }
}

/// Whether the claim, unbound as cached, is bound to `address` as the API server has it, read live
/// (`plan::bound_meanwhile_to`).
async fn bound_meanwhile(claim: &Claim, ctx: &Context, address: std::net::IpAddr) -> Result<bool, Error> {
    Ok(bound_meanwhile_to(live_claim(claim, ctx).await?.as_ref(), address))
}

/// The claim as the API server has it now, if it is still this one (its UID).
async fn live_claim(claim: &Claim, ctx: &Context) -> Result<Option<Claim>, Error> {
    let live = ctx.api.get_claim(&claim.key).await.map_err(Error::api("reading the claim"))?;
    Ok(live.map(|l| l.claim).filter(|l| l.uid == claim.uid))
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

/// A live claim that will not create its IPAddress now (its pool is going or gone, its Cluster keeps it waiting, its
/// pool no longer allocates what it holds) finds out whether an earlier create that failed uncertainly happened: if
/// not, the hold goes, so that the address is free and a pool being deleted is not held up by it. Returns the view
/// after it.
async fn settle_uncertain_create(claim: &Claim, ctx: &Context, pool_key: &PoolKey) -> Result<ClaimView, Error> {
    let key = &claim.key;
    // Confirmed meanwhile (its IPAddress seen), there is nothing to find out.
    let (_, view) = ctx.index.observe_then_view(claim, pool_key.clone(), Observed::NothingNew);
    if !view.holds_unconfirmed {
        return Ok(view);
    }
    let live = ctx.api.get_address(key).await.map_err(Error::api("reading the IPAddress"))?;
    let read = Observed::NameRead { pool: pool_key, key, live: live.as_ref(), then: IfNotCreated::GivenUp };
    Ok(ctx.index.observe_then_view(claim, pool_key.clone(), read).1)
}

/// Deletion, its grace period over (`plan`): the IPAddress (finalizer off, deleted), then the claim's finalizer. What
/// the index keeps about the claim goes with its Delete event.
async fn release(claim: &Claim, ctx: &Context, view: &ClaimView) -> Result<Next, Error> {
    let (key, pool_key) = (&claim.key, &view.pool_key);
    let found = ctx.api.get_address(key).await.map_err(Error::api("reading the IPAddress"))?;
    // The claim read live after the IPAddress, when `plan` needs it to judge that IPAddress.
    let claim_gone_live = match &found {
        Some(address) if plan::release_reads_the_claim(claim, address) => live_claim(claim, ctx).await?.is_none(),
        _ => false,
    };
    match (plan::release_of(claim, view, found.as_ref(), claim_gone_live), &found) {
        (Release::NotMadeForIt, _) => {
            debug!(claim = %key, "the IPAddress of this name was not made for this claim; leaving it alone");
        }
        (Release::LeftBehind, _) => {
            debug!(claim = %key, "the IPAddress of this name was left behind by a move; the orphan release takes it");
        }
        (Release::NotOurs, _) => {
            debug!(claim = %key, "the IPAddress of this name belongs to another provider; leaving it alone");
            // The name is taken: a create of ours that failed uncertainly did not happen, and its hold goes.
            let read = Observed::NameRead { pool: pool_key, key, live: found.as_ref(), then: IfNotCreated::GivenUp };
            ctx.index.observe(read);
        }
        (Release::Delete, Some(address)) => {
            ctx.index.observe(Observed::ClaimDeletedForGood { pool: pool_key, claim });
            // Gone now: the address is free at once (the watch event confirms it later).
            if ipaddress::delete(ctx, address, "deleting the IPAddress").await? {
                let uid = address.metadata.uid.as_deref();
                ctx.index.observe(Observed::DeletedByUs { key, pool: pool_key, uid });
            }
            info!(claim = %key, "released");
        }
        // (`release_of` deletes only what it found.)
        (Release::NoneExists | Release::Delete, _) => {
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
