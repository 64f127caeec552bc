//! IPAddresses whose claim is gone are released (docs/compatibility.md D11): at once when the claim's Delete event says
//! so, and by a sweep for those whose claim vanished while no watch saw it. The API server confirms the claim is gone
//! before anything is deleted (the cache may lag), and a paused Cluster (a move in progress) keeps its addresses, but
//! for a late duplicate of a bound claim's address.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::{Context, ipaddress};
use crate::index::{AddressRecord, ObjectKey};

/// Runs the immediate checks and the sweep until the controllers stop.
pub async fn run(ctx: Arc<Context>, mut gone: mpsc::UnboundedReceiver<ObjectKey>) {
    let delay = ctx.options.orphan_release_delay;
    let mut orphaned_since: HashMap<ObjectKey, Instant> = HashMap::new();
    let mut tick = tokio::time::interval((delay / 2).max(Duration::from_millis(500)));
    loop {
        tokio::select! {
            _ = tick.tick() => {
                if *ctx.synced.borrow() {
                    sweep(&ctx, &mut orphaned_since, delay).await;
                }
            }
            Some(key) = gone.recv() => release_if_orphaned(&ctx, &key).await,
        }
    }
}

/// A claim's Delete event is authoritative: an IPAddress we made for it goes now, unless its Cluster is paused.
pub(crate) async fn release_if_orphaned(ctx: &Context, key: &ObjectKey) {
    let Some(record) = ctx.index.address(key).filter(AddressRecord::made_for_a_claim) else {
        return;
    };
    if ctx.index.keeps_orphan(key, &record) {
        return;
    }
    release_if_claim_gone(ctx, key, &record).await;
}

/// Releases the IPAddress `key` once the API server confirms that its claim is gone, unless the address it holds
/// still waits to be recorded as moved away (released first, a restart would lose the reservation).
async fn release_if_claim_gone(ctx: &Context, key: &ObjectKey, record: &AddressRecord) {
    if record.moving_away && ctx.index.moved_away_unwritten(&record.pool, key) {
        return;
    }
    if let Err(e) = ipaddress::release_orphan(ctx, key, record).await {
        ctx.report_failure("releasing the IPAddress of a claim gone", key, &e);
    }
}

/// Releases every orphan now, one after another (the simulation's sweep: it has no clock to wait on).
#[cfg(test)]
pub(crate) async fn sweep_now(ctx: &Context) {
    let mut candidates = ctx.index.orphans();
    candidates.sort_by(|a, b| a.0.cmp(&b.0));
    for (key, record) in candidates {
        release_if_claim_gone(ctx, &key, &record).await;
    }
}

/// Releases the orphans that have been orphans for `delay`.
async fn sweep(ctx: &Context, orphaned_since: &mut HashMap<ObjectKey, Instant>, delay: Duration) {
    let mut still = HashSet::new();
    for (key, record) in ctx.index.orphans() {
        still.insert(key.clone());
        let since = *orphaned_since.entry(key.clone()).or_insert_with(Instant::now);
        if since.elapsed() < delay {
            continue;
        }
        release_if_claim_gone(ctx, &key, &record).await;
        orphaned_since.remove(&key);
    }
    orphaned_since.retain(|k, _| still.contains(k));
}
