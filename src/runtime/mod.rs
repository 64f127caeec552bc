//! What runs the controllers' decisions: the work queues and the [`Sink`] that feeds them, the watch driver, and
//! whether the API server answers.

pub mod queue;
pub mod reachability;
pub mod retry;
pub mod supervisor;
pub mod watch;

use std::sync::Arc;

use tokio::sync::mpsc;

use crate::api::PoolKind;
use crate::index::{Counted, ObjectKey, PoolKey, Sink};
use crate::metrics::{CLAIM_CONTROLLER, Metrics, pool_controller};
use queue::WorkQueue;

/// The work of the controllers: claims and pools to reconcile, claims gone (their IPAddress is checked at once), and
/// global pools whose reservations are to be written. The index's one sink.
pub struct Work {
    pub claims: WorkQueue<ObjectKey>,
    pub pools: WorkQueue<PoolKey>,
    gone: mpsc::UnboundedSender<ObjectKey>,
    moved_away: mpsc::UnboundedSender<PoolKey>,
    metrics: Arc<Metrics>,
}

/// The receiving ends of [`Work`]'s channels.
pub struct WorkStreams {
    pub gone: mpsc::UnboundedReceiver<ObjectKey>,
    pub moved_away: mpsc::UnboundedReceiver<PoolKey>,
}

impl Work {
    pub fn new(metrics: &Arc<Metrics>) -> (Work, WorkStreams) {
        let (gone, gone_rx) = mpsc::unbounded_channel();
        let (moved_away, moved_away_rx) = mpsc::unbounded_channel();
        let streams = WorkStreams { gone: gone_rx, moved_away: moved_away_rx };
        let runtime = metrics.controller_runtime();
        let claims = WorkQueue::with_metrics(metrics.queue("claims"), vec![runtime.queue(CLAIM_CONTROLLER)], |_| 0);
        // One queue for the four pool controllers of the Go provider, each with its series.
        let pool_series = PoolKind::ALL.into_iter().map(|kind| runtime.queue(pool_controller(kind))).collect();
        let pools = WorkQueue::with_metrics(metrics.queue("pools"), pool_series, |key: &PoolKey| {
            PoolKind::ALL.iter().position(|kind| *kind == key.kind).unwrap_or(0)
        });
        (Work { claims, pools, gone, moved_away, metrics: metrics.clone() }, streams)
    }

    /// The same work on another clock (the simulation's, `crate::sim`).
    pub fn with_clock(self, clock: queue::QueueClock) -> Work {
        Work {
            claims: self.claims.with_clock(clock.clone()),
            pools: self.pools.with_clock(clock),
            gone: self.gone,
            moved_away: self.moved_away,
            metrics: self.metrics,
        }
    }
}

impl Sink for Work {
    fn wake(&self, claim: ObjectKey) {
        self.claims.add(claim);
    }

    fn wake_first(&self, claim: ObjectKey) {
        self.claims.add_first(claim);
    }

    fn pool_changed(&self, pool: PoolKey) {
        self.pools.add(pool);
    }

    fn claim_gone(&self, claim: ObjectKey) {
        self.claims.forget(&claim);
        let _ = self.gone.send(claim);
    }

    fn moved_away_changed(&self, pool: PoolKey) {
        let _ = self.moved_away.send(pool);
    }

    fn counted(&self, event: Counted) {
        match event {
            Counted::Released(kind) => self.metrics.released(kind),
            Counted::DuplicateDetected(kind) => self.metrics.duplicate_detected(kind),
            Counted::PoolForgotten(pool) => self.metrics.forget_pool(pool.kind, &pool.namespace, &pool.name),
        }
    }
}
