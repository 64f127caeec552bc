//! Adopting an IPAddress of the claim's name, and letting go of one that is not to be adopted (a duplicate, one being deleted, one of another pool).

use std::time::Duration;

use tracing::debug;

use super::ready::set_ready;
use super::{Context, Error, ipaddress};
use crate::capi::{Claim, IpAddress};
use crate::compact::Uid;
use crate::controllers::orphans;
use crate::controllers::status::ClaimReason;
use crate::index::{AddressRecord, ClaimView, ObjectKey, Observed, PoolKey};
use crate::runtime::retry::Next;

/// Adopts an existing IPAddress of the claim's name: its spec is never touched (it is immutable); missing
/// finalizers, owner references and the cluster-name label are put back (docs/compatibility.md D7).
pub(super) async fn adopt(
    claim: &Claim,
    ctx: &Context,
    view: &ClaimView,
    record: &AddressRecord,
) -> Result<Next, Error> {
    let key = &claim.key;
    let (pool_key, pool) = (&view.pool_key, view.pool.as_deref());
    if *record.pool != *pool_key {
        return belongs_elsewhere(claim, ctx, pool_key, &record.pool.to_string()).await;
    }
    ctx.index.stop_waiting(pool_key, key);
    // A duplicate that this claim was never told about (no addressRef yet) is withdrawn rather than handed out: it comes
    // from a write that reached the API server late, after its leader's term ended (`crate::leader`), unless it is the
    // one that moved away and came back, or was restored with its claim (`ClaimView::unwanted_duplicate`).
    if !told_of(claim, view.held) && view.unwanted_duplicate() {
        // Withdrawn already, or an orphan whose release did not finish: no one else finishes it while a claim of its
        // name exists (the orphan release leaves those alone), so this claim does.
        let why = if record.deleting { LetGo::Deleting } else { LetGo::Duplicate };
        return let_go(ctx, key, pool_key, record.uid, why).await;
    }
    // Only an unbound claim: a bound one's IPAddress holding another address than the one it was bound to is a late
    // create, let go below (helper-40: waiting instead, the address of its machine was handed out meanwhile).
    if claim.address_ref().is_none() && view.duplicate.is_some() && view.others_orphaned {
        // Its address is held too by IPAddresses whose claims are gone (a deposed leader's late create for a claim
        // since deleted), which the orphan release deletes. This one may be its machine's (restored with its claim,
        // whose status Velero does not restore: seed 440537881): neither withdrawn nor bound beside them; adopted once
        // they go (their deletion wakes the claim).
        let message = format!(
            "IPAddress {key} holds an address that IPAddresses of claims gone hold too; it is adopted once they are \
             released (after --orphan-release-delay, or the pool's addressReuseGracePeriodSeconds if longer)"
        );
        set_ready(claim, ctx, ClaimReason::WaitingForIPAddress, message, None).await?;
        return Ok(Next::After(ctx.options.orphan_release_delay));
    }
    if claim.address_ref().is_none() && view.restored_one_wins {
        // Restored with its claim, its address held too by unbound claims' creates (seed 540515841): they withdraw
        // theirs. Neither bound nor repaired until then (helper-76): a binding write of theirs in flight may still
        // land, and then this one is the duplicate to withdraw; and repaired, its owner would no longer say it was
        // restored. Their withdrawal wakes the claim.
        let message = format!(
            "IPAddress {key}, restored with this claim, holds an address that other claims' IPAddresses hold too; it \
             is adopted once they are withdrawn"
        );
        set_ready(claim, ctx, ClaimReason::WaitingForIPAddress, message, None).await?;
        return Ok(Next::After(Duration::from_secs(1)));
    }
    if claim.address_ref().is_none() && view.moved_one_waits {
        // Came back with its Cluster, its address held too by another claim's IPAddress of ours, whose binding write
        // may still land (helper-82): that one is withdrawn first, and its withdrawal wakes this claim. Bound now, and
        // the write landing, two claims would be bound to one address.
        let others = view.duplicate.as_ref().map_or_else(String::new, |d| format!(" ({d})"));
        let message = format!(
            "IPAddress {key}, which came back with its Cluster, holds an address that another claim's IPAddress holds \
             too{others}; it is adopted once that one is withdrawn"
        );
        set_ready(claim, ctx, ClaimReason::WaitingForIPAddress, message, None).await?;
        return Ok(Next::After(Duration::from_secs(1)));
    }
    let bound = claim.address_ref() == Some(&*key.name);
    if bound && !told_of(claim, view.held) {
        // Bound to the address its condition names, while this IPAddress of its name holds another: a deposed
        // leader's late create, landed after a person deleted the claim's own. Its machine uses the address the
        // condition names, which the claim makes its IPAddress again with; this one is withdrawn, never adopted.
        return let_go(ctx, key, pool_key, record.uid, LetGo::Deleting).await;
    }
    let has_claim_owner = record.claim_owner == Some(claim.uid.uid());
    if record.deleting && !bound && !view.left_behind {
        // Being deleted, and the claim not bound to it: a delete of ours that did not finish (a withdrawn duplicate,
        // an orphan of an earlier claim of this name) or one by hand. It is let go, and the claim gets an address
        // anew. A bound claim's stays while it goes (its machine may use the address): its deletion wakes the claim.
        return let_go(ctx, key, pool_key, record.uid, LetGo::Deleting).await;
    }
    if view.left_behind {
        // Left behind by the move of an earlier claim of this name (`State::left_behind_for`): its address is in use
        // on the other management cluster. Never adopted: it is let go once its address is recorded as moved away
        // (so that the address stays reserved), and this claim gets another. One being deleted as an IPAddress of
        // the pool this manager knows (by hand, or the pool deleted in the foreground) goes at once, its hold the
        // reservation and its entry written as one no IPAddress backs; one of a pool gone (the garbage collector
        // deletes it once its pool is made again) waits for its entry: let go first, its reservation would live in
        // memory only, and the writer, finding it gone, drop the entry (helper-108 F2; helper-109 G1).
        let of_the_pool_known = record.pool_owner == pool.and_then(|p| p.metadata.uid.as_deref()).map(Uid::of);
        if view.moved_away_unwritten && !(record.deleting && of_the_pool_known) {
            // No room for its entry (operations.md: the IPAddress keeps the address until room is made): said, and
            // looked at again when the entry lands (its write wakes the claim of the name).
            if ctx.index.moved_away_no_room(pool_key, key) {
                let message = format!(
                    "IPAddress {key}, left behind by a move, keeps its address for the other management cluster, and \
                     {pool_key}'s annotation {} has no room to record it: make room \
                     (docs/operations.md) for this claim to get an address",
                    crate::api::MOVED_AWAY_ANNOTATION
                );
                set_ready(claim, ctx, ClaimReason::AllocationFailed, message, None).await?;
                return Ok(Next::After(crate::runtime::retry::RECHECK));
            }
            return Ok(Next::After(Duration::from_secs(1)));
        }
        // Its pool made again and not yet shown by the pool watch (or still the one deleted, whose annotation holds
        // the entry): let go now, the new pool would never reserve the address (helper-109 G2).
        if !orphans::pool_known_as_it_is(ctx, record).await {
            return Ok(Next::After(Duration::from_secs(1)));
        }
        return let_go(ctx, key, pool_key, record.uid, LetGo::Deleting).await;
    }
    // A pool being deleted is no owner to put back: deleted in the foreground, the garbage collector takes its owner
    // reference off the IPAddresses its claims keep, and would again after every repair.
    let owning_pool = pool.filter(|p| !p.is_deleting());
    let pool_uid = owning_pool.and_then(|p| p.metadata.uid.clone());
    let has_pool_owner = pool_uid.is_none_or(|uid| record.pool_owner == Some(Uid::of(&uid)));
    let has_label = claim.cluster().is_none_or(|v| record.cluster_label.as_deref() == Some(v));
    let complete = has_claim_owner && has_pool_owner && record.protected && has_label && !record.marked_moved_away;
    if !complete && !record.deleting && !ipaddress::repair(ctx, claim, pool_key, owning_pool, record.uid).await? {
        // Gone, going or replaced already: the claim looks again at what was read (or at its watch event).
        return Ok(Next::After(Duration::from_millis(200)));
    }
    if record.deleting {
        debug!(claim = %key, "the IPAddress is being deleted; its finalizer holds it until the claim goes");
    }
    // The view from before the repair still holds: repair adopted the very IPAddress judged (its UID), whose spec, and
    // so what it holds, is immutable.
    let held = view.held;
    set_ready(claim, ctx, ClaimReason::Allocated, allocated_message(view), Some(&key.name)).await?;
    if let Some(held) = held {
        // Bound to a claim again: an address that was moved away came back with its Cluster. Only once the binding is
        // written: the entry naming this IPAddress is what keeps it from being withdrawn as a duplicate until then.
        ctx.index.observe(Observed::BoundTo { pool: pool_key, key, held });
    }
    Ok(Next::AwaitChange)
}

/// Why an IPAddress of the claim's name is let go before the claim is bound to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum LetGo {
    /// Another IPAddress of the pool holds its address: it can only come from a write that reached the API server
    /// late, after its leader's term ended (`crate::leader`). Withdrawn, the claim gets a free address. A bound claim's
    /// address is never withdrawn: a machine may use it already.
    Duplicate,
    /// Being deleted already (a delete of ours that did not finish, one by hand), or left behind by a move.
    Deleting,
    /// Just made, for an address its pool stopped allocating while the create was in flight (an edit), or in a pool
    /// another shard's manager serves now.
    NotAllocated,
}

/// Lets an IPAddress of the claim's name go (deleted, our finalizer off), once the live claim confirms it was never
/// bound to it; the claim is reconciled again to get an address.
pub(super) async fn let_go(
    ctx: &Context,
    key: &ObjectKey,
    pool_key: &PoolKey,
    judged: Option<Uid>,
    why: LetGo,
) -> Result<Next, Error> {
    let address = match unbound_ipaddress(ctx, key, pool_key, judged, why).await? {
        Ok(address) => address,
        Err(later) => return Ok(later),
    };
    let held = ctx.index.held_by(pool_key, key).map_or_else(String::new, |h| h.to_string());
    match why {
        LetGo::Duplicate => tracing::error!(
            claim = %key,
            pool = %pool_key,
            address = held,
            "DUPLICATE ADDRESS withdrawn: IPAddress {key} holds an address another IPAddress of the pool holds, and \
             its claim was not bound to it yet; deleting it so that the claim gets a free address"
        ),
        LetGo::Deleting => {
            debug!(claim = %key, "an IPAddress of the claim's name is being deleted; letting it go before allocating")
        }
        LetGo::NotAllocated => tracing::warn!(
            claim = %key,
            pool = %pool_key,
            address = held,
            "the pool no longer allocates the address just created, or another shard's manager serves it now; \
             deleting it before the claim is bound"
        ),
    }
    if ipaddress::delete(ctx, &address, "letting an IPAddress of the claim's name go").await? {
        ctx.index.observe(Observed::DeletedByUs { key, pool: pool_key, uid: address.metadata.uid.as_deref() });
    }
    if why == LetGo::Duplicate {
        ctx.metrics.duplicate_withdrawn(pool_key.kind);
    }
    Ok(Next::After(Duration::from_millis(200)))
}

/// The live IPAddress `key` that a claim never bound to it may let go: ours, of the pool, the object judged (`judged`),
/// read after the live claim confirmed it is not bound (the cache may not show a status we wrote a moment ago), and
/// after the claim was told so in a status write conditioned on the claim as read. Otherwise when to look again.
pub(super) async fn unbound_ipaddress(
    ctx: &Context,
    key: &ObjectKey,
    pool_key: &PoolKey,
    judged: Option<Uid>,
    why: LetGo,
) -> Result<Result<IpAddress, Next>, Error> {
    let Some(live) = ctx.api.get_claim(key).await.map_err(Error::api("reading the claim"))? else {
        // Gone: the claim's watch event brings it back.
        return Ok(Err(Next::AwaitChange));
    };
    // Replaced by a claim of the name of another pool, perhaps another provider's: not ours to write to (seed
    // 540670193); the IPAddress is then an orphan, the orphan release's.
    if !live.claim.uses_pool(pool_key.kind, &pool_key.namespace, &pool_key.name) {
        return Ok(Err(Next::AwaitChange));
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
    if told_of(&live.claim, Some(crate::index::Held::of(pool_key.kind, &address.spec))) {
        // Bound to it after all (the cache is behind our status write): the claim's watch event brings it back.
        return Ok(Err(Next::AwaitChange));
    }
    // A deposed leader's status write still in flight, made on the claim as read here, could bind it to this
    // IPAddress after our read (soak seed 90280782). Written first, this one makes that one fail its precondition;
    // landed first, that one makes this one fail, and the next look sees the claim bound.
    let uid = address.metadata.uid.as_deref().unwrap_or_default();
    let message = match why {
        LetGo::Duplicate => format!("withdrawing IPAddress {key} (uid {uid}): another IPAddress holds its address"),
        LetGo::Deleting => format!("letting IPAddress {key} (uid {uid}) go before allocating"),
        LetGo::NotAllocated => format!(
            "letting IPAddress {key} (uid {uid}) go: {pool_key} no longer allocates its address, or another shard's \
             manager serves it"
        ),
    };
    set_ready(&live.claim, ctx, ClaimReason::AllocationFailed, message, None).await?;
    // `set_ready` conditions its write on a read of its own when the claim carries conditions of others: the claim
    // as that write found it is read again, and still not bound to this IPAddress (helper-7's review).
    let Some(fenced) = ctx.api.get_claim(key).await.map_err(Error::api("reading the claim"))? else {
        return Ok(Err(Next::AwaitChange));
    };
    if fenced.claim.uid != live.claim.uid
        || told_of(&fenced.claim, Some(crate::index::Held::of(pool_key.kind, &address.spec)))
    {
        return Ok(Err(Next::AwaitChange));
    }
    Ok(Ok(address))
}

/// Whether the claim was told of `held` (bound to it): bound, and holding the address its condition names, when it
/// names one. A bound claim whose IPAddress a person deleted was told of the address that one held, not of what a
/// deposed leader's late create made under its name since (it may be another claim's address).
pub(super) fn told_of(claim: &Claim, held: Option<crate::index::Held>) -> bool {
    claim.address_ref().is_some()
        && claim.bound_address.is_none_or(|bound| held.and_then(crate::index::Held::address).is_none_or(|a| a == bound))
}

/// Whether the live IPAddress is the object the decision was made on: another object of the name (created again, or
/// brought back by a move or a restore) is judged anew once the watch shows it.
pub(super) fn is_the_one(address: &IpAddress, judged: Option<Uid>) -> bool {
    judged.is_some() && address.metadata.uid.as_deref().map(Uid::of) == judged
}

/// An IPAddress of the claim's name exists for another pool: the claim cannot get one (IPAddress specs are
/// immutable, and the name is taken).
pub(super) async fn belongs_elsewhere(
    claim: &Claim,
    ctx: &Context,
    pool_key: &PoolKey,
    owner: &str,
) -> Result<Next, Error> {
    let key = &claim.key;
    ctx.index.stop_waiting(pool_key, key);
    // Woken when that IPAddress changes or goes (also unseen, by the watch's next list).
    ctx.index.blocked_elsewhere(key);
    let message = format!("IPAddress {key} already exists and belongs to {owner}, not to {pool_key}");
    set_ready(claim, ctx, ClaimReason::AllocationFailed, message, None).await?;
    Ok(Next::AwaitChange)
}

/// The Ready message of a claim bound to the IPAddress of its name, holding `view.held`.
pub(super) fn allocated_message(view: &ClaimView) -> String {
    // The address as `spec.address` shows it; one that does not parse is said so.
    let address = view.held.map_or_else(String::new, |held| {
        held.address().map_or_else(|| held.to_string(), |address| address.to_string())
    });
    let mut message = format!("allocated {address} from {}", view.pool_key);
    if let Some(duplicate) = &view.duplicate {
        // Bound, so it stays (a machine may use it); the condition says so until one holder is released.
        message.push_str(&format!(
            "; DUPLICATE: {duplicate}. Delete one of these claims to resolve it (see docs/operations.md)"
        ));
    }
    if view.out_of_range {
        // Bound, so it stays too; the pool's Ready condition names it as well.
        message.push_str(
            "; the pool's spec no longer allocates this address (it was edited while the address was being handed \
             out): delete the claim to move it to an address the pool allocates",
        );
    }
    message
}
