//! The controllers' decisions: claims get addresses (`claim`), IPAddresses are created, repaired and deleted
//! (`ipaddress`), pools get their status and finalizer (`pool`), IPAddresses whose claim is gone are released
//! (`orphans`), and reservations of addresses moved away are written (`moved_away`). What they know comes from the
//! index (`crate::index`); `run` wires the watches, the queues and the workers.
//!
//! Start-up allocates nothing before every pool's state is loaded: reconciles wait until the IPAddress, pool, claim
//! and Cluster watches have listed everything once.

mod claim;
mod events;
mod finalizers;
mod ipaddress;
pub(crate) mod moved_away;
pub(crate) mod orphans;
mod pool;
#[cfg(test)]
mod recording;
pub mod status;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::api::{PoolKind, PoolResource, WATCH_FILTER_LABEL, v1alpha2};
use crate::apiserver::ApiServer;
use crate::apiserver::client::KubeApi;
use crate::capi::{CapiApis, ClaimResource, Cluster, IpAddress};
pub use crate::error::Error;
use crate::index::relist::Pools;
use crate::index::{Index, ObjectKey, Observed, PoolKey, Sink};
use crate::leader::Fence;
use crate::metrics::{CLAIM_CONTROLLER, Metrics, ReconcileResult, pool_controller};
use crate::runtime::reachability::Reachability;
use crate::runtime::retry::Next;
use crate::runtime::retry::Outcome;
use crate::runtime::supervisor::Supervisor;
use crate::runtime::watch::{self as watching, Health};
use crate::runtime::{Work, WorkStreams};

/// Pools reconciled at once, of every kind together (a pool's reconcile is its finalizer and status).
pub const POOL_WORKERS: usize = 4;

/// What the controllers watch and how.
#[derive(Clone, Debug)]
pub struct ControllerOptions {
    /// `--namespace`: only this namespace (None: all).
    pub namespace: Option<String>,
    /// `--watch-filter`: only claims labelled `cluster.x-k8s.io/watch-filter=<value>`.
    pub watch_filter: Option<String>,
    pub capi: CapiApis,
    /// Claims reconciled at once (allocation itself is serialized per pool).
    pub concurrency: u16,
    /// How long an IPAddress must have had no claim before it is released (docs/compatibility.md D11).
    pub orphan_release_delay: Duration,
    /// How long a claim restored by Velero waits, from its creation, for its IPAddress (`--restore-wait`).
    pub restore_wait: Duration,
    /// The most bytes of a global pool's moved-away annotation (`moved_away::MAX_BYTES`; the simulation's is small).
    pub moved_away_max_bytes: usize,
}

/// Where the controllers read the time of day (condition timestamps, Events, the reuse grace period, the restore wait,
/// the orphan release's delays): the wall clock, a fixed instant (tests), or the simulation's clock, which its
/// schedule advances step by step (its runs must not depend on when they run).
#[derive(Clone, Debug)]
pub enum Clock {
    Wall,
    Fixed(jiff::Timestamp),
    /// Milliseconds since the simulation's start (at Unix second 1,700,000,000).
    Simulated(Arc<std::sync::atomic::AtomicI64>),
}

/// When the simulation's clock starts, in Unix seconds.
pub const SIMULATED_EPOCH: i64 = 1_700_000_000;

impl Clock {
    pub fn now(&self) -> jiff::Timestamp {
        match self {
            Clock::Wall => jiff::Timestamp::now(),
            Clock::Fixed(t) => *t,
            Clock::Simulated(ms) => {
                let ms = SIMULATED_EPOCH * 1000 + ms.load(std::sync::atomic::Ordering::Relaxed);
                jiff::Timestamp::from_millisecond(ms).unwrap_or_default()
            }
        }
    }
}

/// Everything the reconcilers share.
pub struct Context {
    /// Every request of the controllers; every write passes this replica's leader fence (`crate::leader`).
    pub api: Arc<dyn ApiServer>,
    pub options: ControllerOptions,
    pub index: Arc<Index>,
    pub metrics: Arc<Metrics>,
    events: events::Events,
    pub(crate) reachability: Reachability,
    synced: watch::Receiver<bool>,
    clock: Clock,
    /// When the IPAddresses whose claim is gone were first seen so (`orphans`).
    orphaned_since: orphans::OrphanedSince,
}

impl Context {
    /// `synced` turns true once every watch has listed (the start-up gate of `run`); what the index notices goes to
    /// `sink`.
    pub fn new(
        api: Arc<dyn ApiServer>,
        options: ControllerOptions,
        metrics: Arc<Metrics>,
        sink: Arc<dyn Sink>,
        synced: watch::Receiver<bool>,
    ) -> Self {
        let index = Arc::new(Index::of_shard(sink.clone(), options.watch_filter.as_deref()));
        let waiting: Arc<dyn crate::metrics::WaitingClaims> = index.clone();
        metrics.watch_waiting(Arc::downgrade(&waiting));
        let identity = std::env::var("HOSTNAME").unwrap_or_else(|_| "capi-ipam-in-cluster".to_owned());
        Context {
            api,
            options,
            index,
            metrics,
            events: events::Events::new(identity),
            reachability: Reachability::default(),
            synced,
            clock: Clock::Wall,
            orphaned_since: orphans::OrphanedSince::default(),
        }
    }

    /// The same context, reading the time from `clock`.
    pub fn with_clock(self, clock: Clock) -> Self {
        Self { clock, ..self }
    }

    pub fn now(&self) -> jiff::Timestamp {
        self.clock.now()
    }

    pub fn capi(&self) -> CapiApis {
        self.options.capi
    }

    pub async fn wait_synced(&self) {
        let mut synced = self.synced.clone();
        let _ = synced.wait_for(|s| *s).await;
    }

    /// An operation on `object` failed: an unreachable API server is said once; conflicts, vanished objects and
    /// fenced writes are the ordinary races of a controller (debug); anything else is a WARN naming the operation
    /// and the object.
    fn report_failure(&self, operation: &'static str, object: &dyn std::fmt::Display, error: &Error) {
        if error.is_unreachable() {
            self.reachability.unreachable(operation, object, error);
        } else if matches!(error.kind(), "conflict" | "not_found" | "fenced") {
            debug!(operation, object = %object, error = %error, "failed; retried later");
        } else {
            warn!(operation, object = %object, error = %error, "failed; retried later");
        }
    }

    /// A run failed: said as [`Context::report_failure`] says it, and retried as the error policy says.
    fn failed(&self, operation: &'static str, object: &dyn std::fmt::Display, error: &Error) -> Outcome {
        self.report_failure(operation, object, error);
        Outcome::Failed(error.retry(self.reachability.is_down()))
    }

    /// Counts one reconcile of `controller` that took `duration`, in controller-runtime's terms and ours.
    fn reconciled(&self, controller: &'static str, duration: Duration, result: &Result<Next, Error>) {
        let (ended, error) = match result {
            Ok(Next::AwaitChange) => (ReconcileResult::Success, None),
            Ok(Next::After(_)) => (ReconcileResult::RequeueAfter, None),
            Err(error) => (ReconcileResult::Error, Some(error.kind())),
        };
        self.metrics.reconciled(controller, duration, ended, error);
    }
}

impl Health for Context {
    /// A watch delivered an event or a request succeeded: the claims parked while the API server did not answer
    /// are reconciled now (`run`'s "unpark" task).
    fn answered(&self) {
        self.reachability.answered();
    }

    /// A watch failed: said once when the API server does not answer; a watch that expired (410 Gone: it relists,
    /// as designed) at debug; anything else each time (a refusal is worth reading).
    fn failed(&self, what: &'static str, error: &watcher::Error) {
        if watching::unreachable(error) {
            self.reachability.unreachable("watching", &what, error);
        } else if matches!(error, watcher::Error::WatchError(e) if e.code == 410) {
            debug!(watch = what, error = %error, "the watch expired; relisting");
        } else {
            warn!(watch = what, error = %error, "watch failed; retrying");
        }
    }
}

fn api_for<K>(client: &Client, namespace: Option<&str>, dyntype: &K::DynamicType) -> Api<K>
where
    K: Resource<Scope = kube::core::DynamicResourceScope>,
{
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, dyntype),
        None => Api::all_with(client.clone(), dyntype),
    }
}

/// A watch's task: it feeds the index until the controllers stop, and says when it has listed everything once.
type Watch = fn(&Client, &Arc<Context>, watch::Sender<bool>) -> Option<BoxFuture<'static, ()>>;

/// What one of the controllers' watches follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Watched {
    Claims,
    IpAddresses,
    Pools(PoolKind),
    Clusters,
}

impl Watched {
    /// The watch's name in logs and in the supervisor's task list.
    fn name(self) -> &'static str {
        match self {
            Watched::Claims => "IPAddressClaims",
            Watched::IpAddresses => "IPAddresses",
            Watched::Pools(PoolKind::InClusterIPPool) => "InClusterIPPools",
            Watched::Pools(PoolKind::GlobalInClusterIPPool) => "GlobalInClusterIPPools",
            Watched::Pools(PoolKind::InClusterPrefixPool) => "InClusterPrefixPools",
            Watched::Pools(PoolKind::GlobalInClusterPrefixPool) => "GlobalInClusterPrefixPools",
            Watched::Clusters => "Clusters",
        }
    }
}

/// Every watch of the controllers, and what it feeds: claims (only those of our pool kinds are kept), IPAddresses
/// (the allocator), the four pool kinds (typed pools), and Clusters when the API server serves them. The simulation
/// derives its watches from this table (`WATCHED`).
const WATCHES: [(Watched, Watch); 7] = [
    (Watched::Claims, watch_claims),
    (Watched::IpAddresses, watch_addresses),
    (Watched::Pools(PoolKind::InClusterIPPool), watch_pools::<v1alpha2::InClusterIPPool>),
    (Watched::Pools(PoolKind::GlobalInClusterIPPool), watch_pools::<v1alpha2::GlobalInClusterIPPool>),
    (Watched::Pools(PoolKind::InClusterPrefixPool), watch_pools::<v1alpha2::InClusterPrefixPool>),
    (Watched::Pools(PoolKind::GlobalInClusterPrefixPool), watch_pools::<v1alpha2::GlobalInClusterPrefixPool>),
    (Watched::Clusters, watch_clusters),
];

/// What the controllers watch, in the order they start.
pub const WATCHED: [Watched; 7] = {
    let mut watched = [Watched::Claims; 7];
    let mut i = 0;
    while i < WATCHES.len() {
        watched[i] = WATCHES[i].0;
        i += 1;
    }
    watched
};

fn watch_claims(client: &Client, ctx: &Arc<Context>, listed: watch::Sender<bool>) -> Option<BoxFuture<'static, ()>> {
    let (options, ctx) = (&ctx.options, ctx.clone());
    let mut config = watching::config();
    if let Some(filter) = &options.watch_filter {
        config = config.labels(&format!("{WATCH_FILTER_LABEL}={filter}"));
    }
    let api = api_for::<ClaimResource>(client, options.namespace.as_deref(), &options.capi.ipam);
    let stream = watcher(api, config).backoff(watching::Backoff::default());
    Some(async move { watching::drive("IPAddressClaims", stream, &*ctx.index, &*ctx, listed).await }.boxed())
}

fn watch_addresses(client: &Client, ctx: &Arc<Context>, listed: watch::Sender<bool>) -> Option<BoxFuture<'static, ()>> {
    let (options, ctx) = (&ctx.options, ctx.clone());
    let api = api_for::<IpAddress>(client, options.namespace.as_deref(), &options.capi.ipam);
    let stream = watcher(api, watching::config()).backoff(watching::Backoff::default());
    Some(async move { watching::drive("IPAddresses", stream, &*ctx.index, &*ctx, listed).await }.boxed())
}

fn watch_pools<K: PoolResource>(
    client: &Client,
    ctx: &Arc<Context>,
    listed: watch::Sender<bool>,
) -> Option<BoxFuture<'static, ()>> {
    let namespace = if K::KIND.is_global() { None } else { ctx.options.namespace.as_deref() };
    let stream = watcher(K::api(client.clone(), namespace), watching::config())
        .backoff(watching::Backoff::default())
        .modify(|p: &mut K| p.meta_mut().managed_fields = None);
    let ctx = ctx.clone();
    Some(async move { watching::drive("pools", stream, &Pools::<K>::of(&ctx.index), &*ctx, listed).await }.boxed())
}

fn watch_clusters(client: &Client, ctx: &Arc<Context>, listed: watch::Sender<bool>) -> Option<BoxFuture<'static, ()>> {
    let (options, ctx) = (&ctx.options, ctx.clone());
    let version = options.capi.cluster?;
    let api = api_for::<Cluster>(client, options.namespace.as_deref(), &version);
    let stream = watcher(api, watching::config()).backoff(watching::Backoff::default());
    Some(async move { watching::drive("Clusters", stream, &*ctx.index, &*ctx, listed).await }.boxed())
}

/// Runs the controllers until `stop`; `on_synced` is called once every watch has listed everything.
pub async fn run(
    client: Client,
    options: ControllerOptions,
    fence: Fence,
    metrics: Arc<Metrics>,
    on_synced: impl FnOnce() + Send + 'static,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let (synced_tx, synced) = watch::channel(false);
    let (work, streams) = Work::new(&metrics);
    let work = Arc::new(work);
    let api = Arc::new(KubeApi::new(client.clone(), options.capi, fence));
    let ctx = Arc::new(Context::new(api, options.clone(), metrics, work.clone(), synced));
    // Polled in place: dropped with this future, nothing of a leader term outlives it (`crate::leader`).
    let mut tasks = Supervisor::default();

    let mut listed = Vec::new();
    for (what, start) in WATCHES {
        let (tx, rx) = watch::channel(false);
        if let Some(watch) = start(&client, &ctx, tx) {
            tasks.forever(what.name(), watch);
            listed.push(rx);
        }
    }

    // Start-up gate: nothing allocates before every watch listed everything once.
    {
        let ctx = ctx.clone();
        tasks.forever("start-up gate", async move {
            for mut rx in listed {
                let _ = rx.wait_for(|l| *l).await;
            }
            ctx.index.observe(Observed::CachesSynced);
            synced_tx.send_replace(true);
            on_synced();
            // Keep the sender alive: this task must not end early.
            std::future::pending::<()>().await;
        });
    }

    // Pool status (docs/compatibility.md D4): however many addresses change, one pool status is written per 250 ms in
    // all, taking the changed pools in turn. A busy pool is written 4 times a second; 20 busy pools each every 5 s, so
    // that the status writes per allocation do not grow with the number of pools in a burst.
    {
        let (ctx, work) = (ctx.clone(), work.clone());
        tasks.forever("pool status coalescer", async move {
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            loop {
                tick.tick().await;
                for key in ctx.index.take_changed_pools(1) {
                    work.pools.add(key);
                }
            }
        });
    }

    let WorkStreams { gone, moved_away } = streams;
    tasks.forever("moved-away writer", moved_away::write_pending(ctx.clone(), moved_away));
    tasks.forever("orphan release", orphans::run(ctx.clone(), gone));

    // The workers, the timers of their delayed requeues, and the return of the claims parked while the API server
    // did not answer.
    {
        let (ctx, work) = (ctx.clone(), work.clone());
        tasks.forever("unpark", async move {
            loop {
                ctx.reachability.returned().await;
                work.claims.unpark_all();
                work.pools.unpark_all();
            }
        });
    }
    {
        let work = work.clone();
        tasks.forever("claim requeue timer", async move { work.claims.run_timers().await });
    }
    {
        let work = work.clone();
        tasks.forever("pool requeue timer", async move { work.pools.run_timers().await });
    }
    {
        let work = work.clone();
        tasks.forever("work queue gauges", async move {
            tokio::join!(work.claims.report_work_in_progress(), work.pools.report_work_in_progress());
        });
    }
    let runtime = ctx.metrics.controller_runtime();
    runtime.set_max_concurrent_reconciles(CLAIM_CONTROLLER, usize::from(options.concurrency.max(1)));
    for kind in PoolKind::ALL {
        // The pool workers serve every pool kind: each kind's controller may use all of them.
        runtime.set_max_concurrent_reconciles(pool_controller(kind), POOL_WORKERS);
    }
    let claim_workers: Vec<_> =
        (0..options.concurrency.max(1)).map(|_| claim_worker(ctx.clone(), work.clone(), stop.clone())).collect();
    tasks.forever("claim workers", async move {
        futures::future::join_all(claim_workers).await;
    });
    let pool_workers: Vec<_> =
        (0..POOL_WORKERS).map(|_| pool_worker(ctx.clone(), work.clone(), stop.clone())).collect();
    tasks.forever("pool workers", async move {
        futures::future::join_all(pool_workers).await;
    });

    // A task ending while stopping (the workers end on `stop`) is no failure.
    match tasks.until(stop.cancelled()).await {
        Err(_) if stop.is_cancelled() => Ok(()),
        ended => ended,
    }
}

/// Reconciles queued claims one at a time until `stop`; a run that has begun is finished first.
async fn claim_worker(ctx: Arc<Context>, work: Arc<Work>, stop: CancellationToken) {
    loop {
        let key = tokio::select! {
            _ = stop.cancelled() => return,
            key = work.claims.next() => key,
        };
        // Read the claim once every watch has listed (at start-up), so that it is the freshest we have.
        ctx.wait_synced().await;
        // No await between the run's end and `finish`: a return of the API server that `unpark` hands on cannot
        // slip in between the policy's "parked" and the park (the workers and `unpark` are polled in one task).
        let active = ctx.metrics.controller_runtime().active_workers(CLAIM_CONTROLLER);
        active.inc();
        let outcome = work_claim(&ctx, &key).await;
        active.dec();
        work.claims.finish(key, outcome);
    }
}

/// One run of a claim worker: the claim as the index holds it now, reconciled, and how the run ended.
pub async fn work_claim(ctx: &Context, key: &ObjectKey) -> Outcome {
    // What the index is not sure of comes first: a record of ours a relist did not show, a hold of an uncertain
    // create that outlived its claim (deleted, or replaced by one of another pool). Each is read live, and the run
    // goes on from what the index holds after that read.
    let mut run = ctx.index.claim_run(key);
    if let Some(record) = run.doubtful.take() {
        if let Err(error) = claim::resolve_doubtful_record(ctx, key, &record).await {
            return ctx.failed("reading an IPAddress the watch did not list", key, &error);
        }
        run = ctx.index.claim_run(key);
    }
    if let Some(pool) = run.orphaned_hold.take() {
        if let Err(error) = claim::settle_gone_claims_uncertain_create(ctx, key, &pool).await {
            return ctx.failed("finding out whether an IPAddress was created", key, &error);
        }
        run = ctx.index.claim_run(key);
    }
    // Deleted meanwhile (its Delete event did what was left to do), or of no pool kind of ours (it waits for a change of its spec).
    let (Some(claim), Some(view)) = (run.claim, run.view) else { return Outcome::Done(Next::AwaitChange) };
    match claim::reconcile(&claim, view, ctx).await {
        Ok(next) => {
            ctx.answered();
            Outcome::Done(next)
        }
        Err(error) => ctx.failed("reconciling the claim", key, &error),
    }
}

/// Reconciles queued pools (finalizer and status) until `stop`.
async fn pool_worker(ctx: Arc<Context>, work: Arc<Work>, stop: CancellationToken) {
    loop {
        let key: PoolKey = tokio::select! {
            _ = stop.cancelled() => return,
            key = work.pools.next() => key,
        };
        ctx.wait_synced().await;
        let active = ctx.metrics.controller_runtime().active_workers(pool_controller(key.kind));
        active.inc();
        let outcome = work_pool(&ctx, &key).await;
        active.dec();
        work.pools.finish(key, outcome);
    }
}

/// One run of a pool worker.
pub async fn work_pool(ctx: &Context, key: &PoolKey) -> Outcome {
    let Some(view) = ctx.index.pool_view(key, pool::OUT_OF_RANGE_SHOWN) else {
        return Outcome::Done(Next::AwaitChange);
    };
    if view.pool().shard().is_some_and(|shard| Some(shard) != ctx.options.watch_filter.as_deref()) {
        // Another shard's pool: its manager writes its finalizer and status, and exports its gauges (ours, from
        // before it was labelled so, would stand beside them: helper-121 F7).
        ctx.metrics.forget_pool(key.kind, &key.namespace, &key.name);
        return Outcome::Done(Next::AwaitChange);
    }
    match pool::reconcile(key, view, ctx).await {
        Ok(next) => Outcome::Done(next),
        Err(error) => ctx.failed("reconciling the pool", key, &error),
    }
}

/// The metrics read how many claims wait for an address, and since when, from the index.
impl crate::metrics::WaitingClaims for Index {
    fn waiting(&self) -> (usize, std::time::Duration) {
        self.read(crate::index::State::waiting)
    }
}
