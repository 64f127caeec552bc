//! Writes the reservations of addresses moved to another management cluster (`crate::index::moved_away`) into their
//! global pools' `ipam.cluster.x-k8s.io/moved-away` annotation, so that they outlive this process.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_util::time::{DelayQueue, delay_queue};

use super::{Context, Error};
use std::collections::{BTreeMap, BTreeSet, HashMap};

use tracing::warn;

use crate::api::{MOVED_AWAY_ANNOTATION, MOVED_AWAY_MARK};
use crate::compact::{ResourceVersion, Uid};
use crate::index::moved_away::entries;
use crate::index::{Observed, PoolKey};

/// A failed write is tried again after this long.
const RETRY: Duration = Duration::from_secs(1);

/// Entries that did not fit into the annotation are tried again after this long (an operator may have freed room).
const FULL_RETRY: Duration = Duration::from_secs(60);

/// The most bytes the annotation's value may take: the API server refuses an object whose annotations take more than
/// 256 KiB in all, and the pool's other annotations (kubectl's last-applied configuration, GitOps tools') need room.
/// About 4,000 entries; an address that does not fit stays held by the IPAddress left behind, which carries our mark
/// (`MOVED_AWAY_MARK`) and is kept, so nothing is lost.
pub const MAX_BYTES: usize = 128 * 1024;

/// What the additions no IPAddress left behind backs may take the value to, past the room `MAX_BYTES` leaves: still
/// under the API server's 256 KiB: a person stripping thousands of left-behind IPAddresses must not make every write of
/// the annotation, its removals included, refused for good.
const UNBACKED_MAX_BYTES: usize = 224 * 1024;

/// Writes the queued changes into the pools' annotations, one pool at a time, retrying until they land.
pub async fn write_pending(ctx: Arc<Context>, mut changed: mpsc::UnboundedReceiver<PoolKey>) {
    let mut retries = Retries::default();
    loop {
        let key = tokio::select! {
            Some(key) = changed.recv() => key,
            Some(key) = retries.next(), if !retries.is_empty() => key,
            else => return,
        };
        let retry = match write(&ctx, &key).await {
            Ok(Written::All) => None,
            Ok(Written::Full) => Some(FULL_RETRY),
            Err(e) => {
                ctx.report_failure("recording the addresses moved away", &key, &e);
                Some(RETRY)
            }
        };
        retries.schedule(key, retry);
    }
}

/// The writer's retries: one per pool at most (every write that finds the annotation full would add one more).
#[derive(Default)]
struct Retries {
    queue: DelayQueue<PoolKey>,
    scheduled: HashMap<PoolKey, delay_queue::Key>,
}

impl Retries {
    /// The pool's next write is due after `delay`, or never (`None`: everything landed).
    fn schedule(&mut self, pool: PoolKey, delay: Option<Duration>) {
        match (delay, self.scheduled.get(&pool)) {
            (Some(delay), Some(at)) => self.queue.reset(at, delay),
            (Some(delay), None) => {
                let at = self.queue.insert(pool.clone(), delay);
                self.scheduled.insert(pool, at);
            }
            (None, _) => {
                if let Some(at) = self.scheduled.remove(&pool) {
                    self.queue.remove(&at);
                }
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// The next pool whose retry is due.
    async fn next(&mut self) -> Option<PoolKey> {
        let pool = self.queue.next().await?.into_inner();
        self.scheduled.remove(&pool);
        Some(pool)
    }
}

/// What a write of a pool's pending changes did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written {
    /// Every change is in the annotation (or there was none).
    All,
    /// Some entries did not fit ([`MAX_BYTES`]): they stay pending, and their IPAddresses stay.
    Full,
}

/// Writes the changes pending for one pool (the simulation calls it as the writer does): removals first, then the
/// additions that fit into `ctx.options.moved_away_max_bytes`.
pub async fn write(ctx: &Context, key: &PoolKey) -> Result<Written, Error> {
    let mut changes = ctx.index.moved_away_view(key).pending;
    if changes.is_empty() {
        return Ok(Written::All);
    }
    let Some(live) = ctx.api.get_pool(key).await.map_err(Error::api("reading the pool"))? else {
        // The pool is gone, and its reservations with it.
        ctx.index.observe(Observed::MovedAwayWritten { pool: key, changes: &changes, revision: None });
        return Ok(Written::All);
    };
    let dropped = queued_for_a_pool_gone(ctx, key, &live, &changes).await?;
    if !dropped.is_empty() {
        ctx.index.observe(Observed::MovedAwayDropped { pool: key, dropped: &dropped });
        changes.retain(|entry, _| !dropped.contains(entry));
        if changes.is_empty() {
            return Ok(Written::All);
        }
    }
    let stored = entries(live.annotation(MOVED_AWAY_ANNOTATION));
    // Looked at after the reads: an IPAddress left behind may have been recorded, or gone, meanwhile.
    let unbacked = ctx.index.moved_away_view(key).unbacked(&changes);
    let (value, landed) = fit(stored, &changes, ctx.options.moved_away_max_bytes, &unbacked);
    let full = landed.len() < changes.len();
    if full {
        let left_out: Vec<String> = changes.keys().filter(|e| !landed.contains_key(*e)).cloned().collect();
        ctx.index.observe(Observed::MovedAwayLeftOut { pool: key, left_out: &left_out });
        warn!(
            pool = %key,
            annotation = MOVED_AWAY_ANNOTATION,
            left_out = changes.len() - landed.len(),
            max_bytes = ctx.options.moved_away_max_bytes,
            "the pool's annotation has no room for more addresses moved away; their IPAddresses are kept (marked {MOVED_AWAY_ANNOTATION}={MOVED_AWAY_MARK}) until room is made (docs/operations.md)"
        );
    }
    if landed.is_empty() {
        return Ok(Written::Full);
    }
    let resource_version = live.metadata.resource_version.clone().unwrap_or_default();
    let written = ctx
        .api
        .patch_pool_annotation(key, &resource_version, MOVED_AWAY_ANNOTATION, value.as_deref())
        .await
        .map_err(Error::api("recording the addresses moved away"))?;
    let revision = ResourceVersion::of(written.metadata.resource_version.as_deref().unwrap_or_default());
    ctx.index.observe(Observed::MovedAwayWritten { pool: key, changes: &landed, revision: Some(revision) });
    Ok(if full { Written::Full } else { Written::All })
}

/// Of `changes`, the additions queued for an earlier pool object of the name (deleted since: `live` is another) whose
/// IPAddress is gone too, read live: the pool's deletion took their reservations (seed 520557168). One whose IPAddress
/// is still here was left behind in the pool made again, and is written (`index::moved_away::pool_appeared`).
async fn queued_for_a_pool_gone(
    ctx: &Context,
    key: &PoolKey,
    live: &crate::api::Pool,
    changes: &BTreeMap<String, bool>,
) -> Result<Vec<String>, Error> {
    let live_uid = live.metadata.uid.as_deref().map(Uid::of);
    let mut dropped = Vec::new();
    let stored = entries(live.annotation(MOVED_AWAY_ANNOTATION));
    for addition in ctx.index.moved_away_view(key).for_another_pool(key, changes, live_uid) {
        if stored.contains(&addition.entry) {
            // Written there already (another manager's write): not ours to drop.
            continue;
        }
        let here = match &addition.ipaddress {
            Some((name, uid)) => {
                let object = ctx.api.get_address(name).await.map_err(Error::api("reading the IPAddress"))?;
                object.is_some_and(|o| uid.is_none_or(|uid| o.metadata.uid.as_deref().map(Uid::of) == Some(uid)))
            }
            // A bare entry names no IPAddress that could still be here.
            None => false,
        };
        if !here {
            dropped.push(addition.entry);
        }
    }
    Ok(dropped)
}

/// The annotation's value once `changes` are applied to `stored`, removals first, then the additions no IPAddress
/// left behind backs (`unbacked`: the annotation is their only record) while it stays within [`UNBACKED_MAX_BYTES`],
/// then the others while it stays within `max_bytes`; and the changes that are in it.
fn fit(
    mut stored: BTreeSet<String>,
    changes: &BTreeMap<String, bool>,
    max_bytes: usize,
    unbacked: &BTreeSet<String>,
) -> (Option<String>, BTreeMap<String, bool>) {
    let mut landed = BTreeMap::new();
    for (entry, _) in changes.iter().filter(|(_, add)| !**add) {
        stored.remove(entry);
        landed.insert(entry.clone(), false);
    }
    // The joined length: every entry and a comma between two.
    let mut length = stored.iter().map(|e| e.len() + 1).sum::<usize>().saturating_sub(1);
    for (entry, _) in changes.iter().filter(|(entry, add)| **add && unbacked.contains(*entry)) {
        let grown = if stored.is_empty() { entry.len() } else { length + 1 + entry.len() };
        if stored.contains(entry) || grown > UNBACKED_MAX_BYTES {
            continue;
        }
        length = grown;
        stored.insert(entry.clone());
        landed.insert(entry.clone(), true);
    }
    for (entry, _) in changes.iter().filter(|(_, add)| **add) {
        if stored.contains(entry) {
            landed.insert(entry.clone(), true);
            continue;
        }
        let grown = if stored.is_empty() { entry.len() } else { length + 1 + entry.len() };
        if grown > max_bytes {
            continue;
        }
        length = grown;
        stored.insert(entry.clone());
        landed.insert(entry.clone(), true);
    }
    let value = (!stored.is_empty()).then(|| stored.into_iter().collect::<Vec<_>>().join(","));
    (value, landed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A read of the allocation path found that at 4,000-5,000 entries the whole annotation was refused by the API
    /// server on every write, retried each second for ever. What fits is written, removals first; the rest stays
    /// pending.
    #[test]
    fn the_annotation_takes_what_fits_and_removals_first() {
        let stored: BTreeSet<String> = ["10.0.0.1@a/m1".to_owned()].into();
        let changes: BTreeMap<String, bool> = [
            ("10.0.0.1@a/m1".to_owned(), false),
            ("10.0.0.2@a/m2".to_owned(), true),
            ("10.0.0.3@a/m3".to_owned(), true),
        ]
        .into();
        let (value, landed) = fit(stored, &changes, 30, &BTreeSet::new());
        assert_eq!(value.as_deref(), Some("10.0.0.2@a/m2,10.0.0.3@a/m3"));
        assert_eq!(landed, changes);
        let (value, landed) = fit(BTreeSet::new(), &changes, 20, &BTreeSet::new());
        assert_eq!(value.as_deref(), Some("10.0.0.2@a/m2"), "what fits");
        assert_eq!(landed.len(), 2, "the removal and one addition: {landed:?}");
        assert!(!landed.contains_key("10.0.0.3@a/m3"));
        let many: BTreeMap<String, bool> = (0..20_000)
            .map(|i| (format!("10.{}.{}.{}@ns/machine-{i}", i / 65536, i / 256 % 256, i % 256), true))
            .collect();
        let (value, landed) = fit(BTreeSet::new(), &many, MAX_BYTES, &BTreeSet::new());
        assert!(value.is_some_and(|v| v.len() <= MAX_BYTES));
        assert!(landed.len() > 4_000 && landed.len() < many.len(), "{}", landed.len());
    }

    /// Soak seed 120234571: an addition no IPAddress left behind backs (a kept hold whose IPAddress a person deleted)
    /// lands even when the annotation has no room: it is its only record.
    #[test]
    fn an_addition_nothing_else_records_lands_without_room() {
        let stored: BTreeSet<String> = ["10.0.0.2@a/m2".to_owned()].into();
        let changes: BTreeMap<String, bool> =
            [("10.0.0.1@b/m3".to_owned(), true), ("10.0.0.3@a/m3".to_owned(), true)].into();
        let unbacked: BTreeSet<String> = ["10.0.0.1@b/m3".to_owned()].into();
        let (value, landed) = fit(stored, &changes, 20, &unbacked);
        assert_eq!(value.as_deref(), Some("10.0.0.1@b/m3,10.0.0.2@a/m2"));
        assert_eq!(landed.keys().collect::<Vec<_>>(), ["10.0.0.1@b/m3"], "the backed one waits for room");
        // Not past what the API server takes, even so: the removals beside them must land.
        let many: BTreeMap<String, bool> = (0..20_000)
            .map(|i| (format!("10.{}.{}.{}@ns/machine-{i}", i / 65536, i / 256 % 256, i % 256), true))
            .collect();
        let unbacked: BTreeSet<String> = many.keys().cloned().collect();
        let (value, landed) = fit(BTreeSet::new(), &many, MAX_BYTES, &unbacked);
        assert!(value.as_ref().is_some_and(|v| v.len() > MAX_BYTES && v.len() <= UNBACKED_MAX_BYTES));
        assert!(landed.len() < many.len(), "{}", landed.len());
    }

    /// A write that finds the annotation full again moves its pool's one retry, never adds another; a failed write
    /// brings it forward; a write that lands takes it out.
    #[tokio::test(start_paused = true)]
    async fn a_pool_has_one_retry_at_most() {
        let (a, b) = (
            PoolKey::new(crate::api::PoolKind::GlobalInClusterIPPool, "", "a"),
            PoolKey::new(crate::api::PoolKind::GlobalInClusterIPPool, "", "b"),
        );
        let mut retries = Retries::default();
        for _ in 0..5 {
            retries.schedule(a.clone(), Some(FULL_RETRY));
        }
        retries.schedule(b.clone(), Some(FULL_RETRY));
        retries.schedule(a.clone(), Some(RETRY));
        let started = tokio::time::Instant::now();
        assert_eq!(retries.next().await, Some(a.clone()), "the failed write's retry comes first");
        assert_eq!(started.elapsed(), RETRY);
        assert_eq!(retries.next().await, Some(b.clone()));
        assert!(retries.is_empty(), "a's other four retries were never added");
        // Due but not taken yet, and landed meanwhile: taken out, never delivered.
        retries.schedule(a.clone(), Some(RETRY));
        tokio::time::advance(RETRY * 2).await;
        retries.schedule(a.clone(), None);
        assert!(retries.is_empty());
        // Due but not taken yet, and full again: moved, not doubled.
        retries.schedule(b.clone(), Some(RETRY));
        tokio::time::advance(RETRY * 2).await;
        retries.schedule(b.clone(), Some(RETRY));
        assert_eq!(retries.next().await, Some(b));
        assert!(retries.is_empty());
    }
}
