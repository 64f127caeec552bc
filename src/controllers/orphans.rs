//! IPAddresses whose claim is gone are released (docs/compatibility.md D11): at once when the claim's Delete event says
//! so, and by a sweep for those whose claim vanished while no watch saw it. The API server confirms the claim is gone
//! before anything is deleted (the cache may lag), and a paused Cluster (a move in progress) keeps its addresses, but
//! for a late duplicate of a bound claim's address. The pool's `addressReuseGracePeriodSeconds` holds the address of
//! a claim gone without its release (its finalizer stripped) as long as a release would have held it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use parking_lot::Mutex;
use tokio::sync::mpsc;

use super::ipaddress::{self, Released};
use super::{Context, Error};
use crate::compact::Uid;
use crate::index::{AddressRecord, ObjectKey, Observed, OrphanView, PoolKey};

/// When each IPAddress whose claim is gone was first seen so: its release waits out the sweep's delay and its pool's
/// reuse grace period from then. Kept in memory: after a restart they are counted from the first sweep, which holds
/// an address longer, never shorter.
#[derive(Default)]
pub struct OrphanedSince(Mutex<HashMap<ObjectKey, Timestamp>>);

impl OrphanedSince {
    fn mark(&self, key: &ObjectKey, now: Timestamp) -> Timestamp {
        *self.0.lock().entry(key.clone()).or_insert(now)
    }

    fn forget(&self, key: &ObjectKey) {
        self.0.lock().remove(key);
    }

    fn keep_only(&self, still: &HashSet<ObjectKey>) {
        self.0.lock().retain(|k, _| still.contains(k));
    }
}

/// Runs the immediate checks and the sweep until the controllers stop.
pub async fn run(ctx: Arc<Context>, mut gone: mpsc::UnboundedReceiver<ObjectKey>) {
    let delay = ctx.options.orphan_release_delay;
    let mut tick = tokio::time::interval((delay / 2).max(Duration::from_millis(500)));
    loop {
        tokio::select! {
            _ = tick.tick() => {
                if *ctx.synced.borrow() {
                    sweep(&ctx, delay).await;
                }
            }
            Some(key) = gone.recv() => release_if_orphaned(&ctx, &key).await,
        }
    }
}

/// A claim's Delete event is authoritative: an IPAddress we made for it goes now, unless its Cluster is paused or its
/// pool's reuse grace period holds it (the sweep releases it then).
pub(crate) async fn release_if_orphaned(ctx: &Context, key: &ObjectKey) {
    // Not before every watch has listed: what the index knows is partial (a Cluster gone while paused, whose
    // left-behind IPAddresses are judged once the claims listed: scenario
    // `an_orphan_check_before_every_watch_listed_releases_nothing_a_move_left_behind`). The sweep releases it after.
    if !*ctx.synced.borrow() {
        return;
    }
    let first = ctx.index.orphan_view(key, None);
    // Another manager's (a claim it serves, or another shard's move): its release is that manager's.
    let Some(record) = first.record.filter(|_| !first.another_managers) else {
        return;
    };
    mark_moved_away(ctx, key, &record).await;
    // Looked at after the mark's write, as the release then decides.
    let view = ctx.index.orphan_view(key, Some(&record));
    if view.kept {
        return;
    }
    let now = ctx.now();
    let since = ctx.orphaned_since.mark(key, now);
    if now < since + reuse_grace(&view) {
        return;
    }
    let left_behind = release_if_claim_gone(ctx, key, &record, &view, &mut PoolsRead::default()).await;
    finish_left_behind(ctx, left_behind.into_iter().collect()).await;
}

/// Finishes the deletions of IPAddresses a move left behind ([`ipaddress::finish_left_behind`]). One that waits for its
/// entry keeps its time as an orphan: it is not a new one.
async fn finish_left_behind(ctx: &Context, pending: Vec<ipaddress::LeftBehindDeleting>) {
    for (key, outcome) in ipaddress::finish_left_behind(ctx, pending).await {
        match outcome {
            Ok(Some(_)) => ctx.orphaned_since.forget(&key),
            Ok(None) => {}
            Err(e) => ctx.report_failure("releasing the IPAddress of a claim gone", &key, &e),
        }
    }
}

/// Whether each pool read live in one sweep is the one this manager knows (`pool_known_as_it_is`): read once per
/// sweep, not once per IPAddress left behind in it (thousands after a large move, each read carrying the pool's
/// annotation).
#[derive(Default)]
struct PoolsRead(HashMap<PoolKey, bool>);

impl PoolsRead {
    async fn known_as_it_is(&mut self, ctx: &Context, record: &AddressRecord, view: &OrphanView) -> bool {
        if let Some(known) = self.0.get(&*record.pool) {
            return *known;
        }
        let known = ipaddress::pool_known_as_it_is(ctx, record, view.pool.as_deref()).await;
        self.0.insert((*record.pool).clone(), known);
        known
    }
}

/// An IPAddress of a global pool whose claim moved away (deleted for a move, or of a Cluster moved away) is marked so
/// on the object itself before anything else: its address is in use on the other management cluster, and the mark,
/// unlike what this process knows, survives a restart and holds while the pool's annotation has no room for it
/// (docs/operations.md). A failed mark is tried again by the next sweep.
async fn mark_moved_away(ctx: &Context, key: &ObjectKey, record: &AddressRecord) {
    if !record.pool.kind.is_global() || !record.moving_away || record.marked_moved_away || record.deleting {
        return;
    }
    let Some(resource_version) = record.revision.text() else { return };
    match ctx.api.mark_address_moved_away(key, &resource_version).await {
        Ok(marked) => {
            ctx.index.observe(Observed::Answered { key, object: &marked });
        }
        Err(e) => ctx.report_failure("marking the IPAddress of a claim moved away", key, &Error::api("marking")(e)),
    }
}

/// The reuse grace period of the IPAddress's pool (`addressReuseGracePeriodSeconds`; none for a pool gone or going,
/// as for a claim's release).
fn reuse_grace(view: &OrphanView) -> SignedDuration {
    let pool = view.pool.as_ref();
    let seconds = pool.filter(|p| !p.is_deleting()).and_then(|p| p.spec.reuse_grace_period_seconds());
    SignedDuration::from_secs(seconds.unwrap_or(0).max(0))
}

/// Releases the IPAddress `key` once the API server confirms that its claim is gone, unless the address it holds
/// still waits to be recorded as moved away (released first, a restart would lose the reservation). `view` is the
/// index's, taken with nothing awaited since. One left behind by a move is returned being deleted, its finalizer for
/// the caller to take off ([`finish_left_behind`]).
async fn release_if_claim_gone(
    ctx: &Context,
    key: &ObjectKey,
    record: &AddressRecord,
    view: &OrphanView,
    pools: &mut PoolsRead,
) -> Option<ipaddress::LeftBehindDeleting> {
    // Whatever the record says now: a manager that follows the object (another shard's Cluster, `keeps_moving_away`)
    // forgets the move an unmarked IPAddress's next event does not show, while its entry still waits.
    if view.moved_away_unwritten {
        if !record.deleting
            || record.delete_for_move
            || record.deleting_when_moved
            || record.deleted_by_us
            || !owned_by_its_pool(ctx, record).await
        {
            return None;
        }
        // Deleted while its address waited to be recorded, by none of those that leave the entry to be written
        // (we wait for it, clusterctl's delete carries `delete-for-move`, the garbage collector deletes an
        // IPAddress whose pool owner is gone, our claim's withdrawal deleted it before the move was noticed): an
        // operator freeing it (docs/operations.md), as they asked.
        ctx.index.observe(Observed::MovedAwayCancelled { pool: &record.pool, key });
    } else if record.moving_away && record.pool.kind.is_global() && !pools.known_as_it_is(ctx, record, view).await {
        // Left behind by a move, and its pool is not what this manager knows: made again, and not yet shown by the pool
        // watch (unknown, or still the one deleted), which then queues this one's entry for it (`pool_appeared`).
        // Released before that, the pool made again would never reserve the address the moved machine uses (soak seed
        // 750843974, scenario
        // `an_ipaddress_left_behind_collected_while_the_pool_watch_still_shows_its_deleted_pool_keeps_its_address_reserved`).
        // It waits for the next sweep.
        return None;
    }
    match ipaddress::release_orphan(ctx, key, record).await {
        Ok(Released::Done) => ctx.orphaned_since.forget(key),
        Ok(Released::LeftBehind(deleting)) => return Some(*deleting),
        Err(e) => ctx.report_failure("releasing the IPAddress of a claim gone", key, &e),
    }
    None
}

/// Its pool, as the API server has it now, owns it. An IPAddress whose pool owner is gone (the pool deleted, perhaps
/// made again under its name) and whose claim went is the garbage collector's to delete, not an operator's. Read live:
/// the pool watch may not have shown the pool's deletion yet (found by the adversarial read of the soak's fixes). When
/// the pool cannot be read, the address stays reserved (the next sweep asks again).
async fn owned_by_its_pool(ctx: &Context, record: &AddressRecord) -> bool {
    ipaddress::live_pool_uid(ctx, record).await.flatten().is_some_and(|uid| record.pool_owner == Some(Uid::of(&uid)))
}

/// Releases the orphans that have been orphans for `delay` and for their pool's reuse grace period (the simulation
/// runs it as the orphan task does, on its own clock).
pub(crate) async fn sweep(ctx: &Context, delay: Duration) {
    let now = ctx.now();
    let delay = SignedDuration::try_from(delay).unwrap_or(SignedDuration::MAX);
    let mut candidates = ctx.index.orphans();
    candidates.sort_by(|a, b| a.0.cmp(&b.0));
    let still: HashSet<ObjectKey> = candidates.iter().map(|(k, _)| k.clone()).collect();
    ctx.orphaned_since.keep_only(&still);
    let mut pools = PoolsRead::default();
    let mut left_behind = Vec::new();
    for (key, record) in candidates {
        mark_moved_away(ctx, &key, &record).await;
        let view = ctx.index.orphan_view(&key, Some(&record));
        let since = ctx.orphaned_since.mark(&key, now);
        if now < since + delay.max(reuse_grace(&view)) {
            continue;
        }
        left_behind.extend(release_if_claim_gone(ctx, &key, &record, &view, &mut pools).await);
        if left_behind.len() >= ipaddress::LEFT_BEHIND_BATCH {
            finish_left_behind(ctx, std::mem::take(&mut left_behind)).await;
        }
    }
    finish_left_behind(ctx, left_behind).await;
}
