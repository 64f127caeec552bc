//! What a claim's run does with an IPAddress of its name: binds the claim to it, lets it go (a duplicate, one being
//! deleted, one left behind by a move), or says it belongs to another pool. Which of them is `plan`'s decision.

use std::time::Duration;

use tracing::debug;

use super::plan::{LetGo, allocated_message, owning_pool, told_of};
use super::ready::set_ready;
use super::{Context, Error, ipaddress};
use crate::capi::{Claim, IpAddress};
use crate::compact::Uid;
use crate::controllers::status::ClaimReason;
use crate::index::{ClaimView, ObjectKey, Observed, Wait};
use crate::runtime::retry::Next;

/// Binds the claim to the IPAddress of its name (`End::Adopt`), after its missing finalizers, owner references and
/// cluster-name label are put back if `repair`; its spec is never touched (it is immutable: docs/compatibility.md D7).
pub(super) async fn bind(claim: &Claim, ctx: &Context, view: &ClaimView, repair: bool) -> Result<Next, Error> {
    let (key, pool_key) = (&claim.key, &view.pool_key);
    let judged = view.record.as_ref().and_then(|r| r.uid);
    if repair && !ipaddress::repair(ctx, claim, pool_key, owning_pool(view), judged).await? {
        // Gone, going or replaced already: the claim looks again at what was read (or at its watch event).
        return Ok(Next::After(Duration::from_millis(200)));
    }
    // The view from before the repair still holds: repair adopted the very IPAddress judged (its UID), whose spec, and
    // so what it holds, is immutable.
    set_ready(claim, ctx, view, ClaimReason::Allocated, allocated_message(view), Some(&key.name)).await?;
    if let Some(held) = view.held {
        // Bound to a claim again: an address that was moved away came back with its Cluster. Only once the binding is
        // written: the entry naming this IPAddress is what keeps it from being withdrawn as a duplicate until then.
        ctx.index.observe(Observed::BoundTo { pool: pool_key, key, held });
    }
    Ok(Next::AwaitChange)
}

/// Lets an IPAddress of the claim's name go (deleted, our finalizer off), once the live claim confirms it was never
/// bound to it; the claim is reconciled again to get an address.
pub(super) async fn let_go(
    ctx: &Context,
    key: &ObjectKey,
    view: &ClaimView,
    judged: Option<Uid>,
    why: LetGo,
) -> Result<Next, Error> {
    let pool_key = &view.pool_key;
    let address = match unbound_ipaddress(ctx, key, view, judged, why).await? {
        Ok(address) => address,
        Err(later) => return Ok(later),
    };
    let held = view.held.map_or_else(String::new, |h| h.to_string());
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
        LetGo::LeftBehind => {
            debug!(claim = %key, "the IPAddress of the claim's name was left behind by a move; letting it go")
        }
        LetGo::NotAllocated => tracing::warn!(
            claim = %key,
            pool = %pool_key,
            address = held,
            "the pool no longer allocates the address just created, or another shard's manager serves it now; \
             deleting it before the claim is bound"
        ),
    }
    let what = "letting an IPAddress of the claim's name go";
    let gone = match (why, &view.record) {
        (LetGo::LeftBehind, Some(record)) => {
            match ipaddress::delete_left_behind(ctx, key, record, &address, what).await? {
                Some(gone) => gone,
                // Its pool made again meanwhile: the claim looks again once the entry is written.
                None => return Ok(Next::After(Duration::from_secs(1))),
            }
        }
        _ => ipaddress::delete(ctx, &address, what).await?,
    };
    if gone {
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
    view: &ClaimView,
    judged: Option<Uid>,
    why: LetGo,
) -> Result<Result<IpAddress, Next>, Error> {
    let pool_key = &view.pool_key;
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
        LetGo::LeftBehind => format!(
            "letting IPAddress {key} (uid {uid}) go: a move left it behind, and its address stays reserved for the \
             other management cluster"
        ),
        LetGo::NotAllocated => format!(
            "letting IPAddress {key} (uid {uid}) go: {pool_key} no longer allocates its address, or another shard's \
             manager serves it"
        ),
    };
    set_ready(&live.claim, ctx, view, ClaimReason::AllocationFailed, message, None).await?;
    // `set_ready` conditions its write on a read of its own when the claim carries conditions of others: the claim
    // as that write found it is read again, and still not bound to this IPAddress.
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
    view: &ClaimView,
    owner: &str,
) -> Result<Next, Error> {
    let (key, pool_key) = (&claim.key, &view.pool_key);
    // Woken when that IPAddress changes or goes (also unseen, by the watch's next list).
    ctx.index.observe(Observed::Waits { pool: pool_key, key, wait: Wait::ItsName });
    let message = format!("IPAddress {key} already exists and belongs to {owner}, not to {pool_key}");
    set_ready(claim, ctx, view, ClaimReason::AllocationFailed, message, None).await?;
    Ok(Next::AwaitChange)
}
