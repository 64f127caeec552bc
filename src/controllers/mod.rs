//! The controllers: claims get addresses (`claim`), pools get their status and finalizer (`pool`), both sharing one
//! allocator (`registry`) that is fed by the IPAddress watch and by our own writes.
//!
//! Start-up allocates nothing before every pool's state is loaded: reconciles wait until the IPAddress, pool, claim
//! and Cluster caches have listed everything once.

mod claim;
mod claim_cache;
mod events;
mod moved_away;
mod pool;
mod queue;
mod reachability;
pub mod registry;
pub mod status;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use futures::channel::mpsc;
use futures::{FutureExt, StreamExt, TryStreamExt, future};
use kube::api::{ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use kube::runtime::controller::{Config as ControllerConfig, Controller};
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::api::{
    CLUSTER_NAME_LABEL, DELETE_FOR_MOVE_ANNOTATION, GROUP, PAUSED_ANNOTATION, PROTECT_ADDRESS_FINALIZER, PoolKind,
    WATCH_FILTER_LABEL,
};
use crate::capi::{CapiApis, CapiVersion, Claim, ClaimResource, Cluster, IpAddress};
use crate::compact::{Uid, intern};
use crate::diagnostics::Readiness;
use crate::leader::{Fence, Fenced};
use crate::metrics::Metrics;
use claim_cache::ClaimCache;
use queue::{Next, WorkQueue};
use reachability::Reachability;
use registry::{Duplicate, Held, ObjectKey, PoolKey, Registry};
use status::Ready;

/// The field manager of our server-side applies.
pub const FIELD_MANAGER: &str = "capi-ipam-in-cluster";

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
    /// How long an IPAddress must have had no claim before it is released (decision D11).
    pub orphan_release_delay: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{what}: {source}")]
    Kube {
        what: &'static str,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("{0}")]
    Rejected(String),
    #[error("internal error: {0}")]
    Internal(String),
    #[error(transparent)]
    Fenced(#[from] Fenced),
}

impl Error {
    pub fn kube(what: &'static str) -> impl FnOnce(kube::Error) -> Error {
        move |source| Error::Kube { what, source: Box::new(source) }
    }

    pub fn internal(e: impl std::fmt::Display) -> Error {
        Error::Internal(e.to_string())
    }

    /// A bounded label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Kube { source, .. } => match source.as_ref() {
                kube::Error::Api(s) if s.code == 409 => "conflict",
                kube::Error::Api(s) if s.code == 404 => "not_found",
                kube::Error::Api(s) if s.code == 429 => "throttled",
                kube::Error::Api(_) => "api",
                _ => "transport",
            },
            Error::Rejected(_) => "rejected",
            Error::Internal(_) => "internal",
            Error::Fenced(_) => "fenced",
        }
    }

    /// The request never got an answer from the API server (connect, TLS, timeout, a dropped connection).
    pub fn is_unreachable(&self) -> bool {
        matches!(self, Error::Kube { source, .. } if is_transport(source))
    }
}

fn is_transport(e: &kube::Error) -> bool {
    matches!(e, kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::HttpError(_))
}

/// Whether a watch failed because the API server did not answer (rather than refused).
fn watch_unreachable(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(e) | watcher::Error::WatchStartFailed(e) | watcher::Error::WatchFailed(e) => {
            is_transport(e)
        }
        _ => false,
    }
}

/// The watches' reconnect delay: 0.5 s doubling to 4 s, back to the start after any event. Short, so that the
/// controllers see the API server again within seconds of its return (kube's default grows to 30 s and resets only
/// after 2 quiet minutes); a failing watch costs one request per stream every few seconds.
#[derive(Clone, Debug)]
struct WatchBackoff {
    next: Duration,
}

impl WatchBackoff {
    const FIRST: Duration = Duration::from_millis(500);
    const MAX: Duration = Duration::from_secs(4);
}

impl Default for WatchBackoff {
    fn default() -> Self {
        Self { next: Self::FIRST }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let delay = self.next;
        self.next = (self.next * 2).min(Self::MAX);
        Some(delay)
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.next = Self::FIRST;
    }
}

/// An IPAddress of one of our pools, as the controllers keep it: what allocation, adoption and the orphan checks
/// compare, and no more (100,000 of these stay small). Repairs read the live object.
#[derive(Clone, Debug)]
pub struct AddressRecord {
    pub uid: Option<Uid>,
    pub pool: PoolKey,
    pub address: Box<str>,
    /// Our ProtectAddress finalizer is on it.
    pub protected: bool,
    /// The UID of its IPAddressClaim owner reference, if any.
    pub claim_owner: Option<Uid>,
    /// The UID of its owner reference to the pool, if any.
    pub pool_owner: Option<Uid>,
    pub cluster_label: Option<Arc<str>>,
    pub deleting: bool,
    /// clusterctl is deleting it for a move (`moved_away`).
    pub moving_away: bool,
}

impl AddressRecord {
    /// The record of an IPAddress, `None` when it does not reference one of our pools.
    fn of(object: &IpAddress) -> Option<Self> {
        let kind = object.spec.pool_ref.our_kind()?;
        let namespace = object.metadata.namespace.as_deref().unwrap_or_default();
        let pool = PoolKey::new(kind, namespace, &object.spec.pool_ref.name);
        let owner = |k: &str, name: &str| {
            object
                .metadata
                .owner_references
                .iter()
                .flatten()
                .find(|o| o.kind == k && o.name == name)
                .map(|o| Uid::of(&o.uid))
        };
        Some(Self {
            uid: object.metadata.uid.as_deref().map(Uid::of),
            address: object.spec.address.as_str().into(),
            protected: object.metadata.finalizers.iter().flatten().any(|f| f == PROTECT_ADDRESS_FINALIZER),
            claim_owner: owner("IPAddressClaim", &object.spec.claim_ref.name),
            pool_owner: owner(kind.kind(), &pool.name),
            cluster_label: object.metadata.labels.as_ref().and_then(|l| l.get(CLUSTER_NAME_LABEL)).map(|v| intern(v)),
            deleting: object.metadata.deletion_timestamp.is_some(),
            moving_away: object
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(DELETE_FOR_MOVE_ANNOTATION)),
            pool,
        })
    }

    fn owned_by_a_claim(&self) -> bool {
        self.protected && self.claim_owner.is_some()
    }
}

/// Everything the reconcilers share.
pub struct Context {
    pub client: Client,
    /// Every write goes through it: a replica whose leader term ended writes nothing (`crate::leader`).
    pub fence: Fence,
    pub capi: CapiApis,
    pub options: ControllerOptions,
    pub registry: Arc<Registry>,
    pub metrics: Arc<Metrics>,
    reachability: Reachability,
    events: events::Events,
    addresses: RwLock<HashMap<ObjectKey, AddressRecord>>,
    pools: HashMap<PoolKind, (Store<DynamicObject>, ApiResource)>,
    clusters: Option<(Store<Cluster>, CapiVersion)>,
    claims: ClaimCache,
    queue: WorkQueue,
    pool_triggers: HashMap<PoolKind, mpsc::UnboundedSender<ObjectRef<DynamicObject>>>,
    synced: watch::Receiver<bool>,
    /// A hash of the Ready state we last wrote per claim UID: a stale cached claim does not trigger a second write.
    written: Mutex<HashMap<Uid, u64>>,
    /// When each claim was first seen without an address (for the allocation latency histogram).
    first_seen: Mutex<HashMap<Uid, Instant>>,
    failures: Mutex<HashMap<Uid, u32>>,
    /// The address a live claim's IPAddress held when it was deleted from under it: the claim gets it back if free.
    vanished_addresses: Mutex<HashMap<ObjectKey, (PoolKey, Box<str>)>>,
    /// IPAddresses we deleted (by UID), until the watch reports them gone: a late event about one of them (the
    /// finalizer removal that preceded the delete) must not bring its address back into use.
    deleted: Mutex<HashMap<ObjectKey, Uid>>,
    /// Addresses of global pools moved to another management cluster, not yet written into their pools.
    moved_away: moved_away::MovedAway,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Context {
    pub async fn wait_synced(&self) {
        let mut synced = self.synced.clone();
        let _ = synced.wait_for(|s| *s).await;
    }

    pub fn cluster(&self, namespace: &str, name: &str) -> Option<Arc<Cluster>> {
        let (store, version) = self.clusters.as_ref()?;
        store.get(&ObjectRef::new_with(name, *version).within(namespace))
    }

    pub fn pool(&self, key: &PoolKey) -> Option<Arc<DynamicObject>> {
        let (store, resource) = self.pools.get(&key.kind)?;
        let mut r = ObjectRef::new_with(&key.name, resource.clone());
        if !key.kind.is_global() {
            r = r.within(&key.namespace);
        }
        store.get(&r)
    }

    pub fn address(&self, key: &ObjectKey) -> Option<AddressRecord> {
        self.addresses.read().unwrap_or_else(|e| e.into_inner()).get(key).cloned()
    }

    /// Records an IPAddress we just wrote or read (the watch will confirm it); `None` when it is not of our pools.
    pub fn remember_address(&self, key: &ObjectKey, object: &DynamicObject) -> Option<AddressRecord> {
        let typed =
            IpAddress { metadata: object.metadata.clone(), spec: crate::capi::spec_of(object).unwrap_or_default() };
        let record = AddressRecord::of(&typed)?;
        if let Some(duplicate) = self.registry.record(&record.pool, key, Held::of(record.pool.kind, &typed.spec)) {
            self.report_duplicate(&duplicate);
        }
        self.addresses.write().unwrap_or_else(|e| e.into_inner()).insert(key.clone(), record.clone());
        Some(record)
    }

    /// An address held twice: the one promise of an IPAddress provider is broken, so this is as loud as it gets. An
    /// IPAddress whose claim was never bound to it is withdrawn (`claim::adopt`); bound ones stay (a machine may
    /// use them), and the pool's Ready condition, both claims' conditions and the metric say so until one of them is
    /// released (docs/operations.md).
    fn report_duplicate(&self, duplicate: &Duplicate) {
        let holders: Vec<String> = duplicate.holders.iter().map(ToString::to_string).collect();
        tracing::error!(
            pool = %duplicate.pool,
            address = %duplicate.held,
            ipaddresses = holders.join(", "),
            "DUPLICATE ADDRESS: one address of the pool is held by more than one IPAddress"
        );
        self.metrics.duplicate_detected(duplicate.pool.kind);
        // Their claims' conditions name the duplicate (an unbound one withdraws its IPAddress).
        self.wake(duplicate.holders.clone());
    }

    /// We deleted the IPAddress `key` (`uid`) of `pool` and it is gone: its address is free at once, before the
    /// watch confirms it, and late events about it are ignored.
    pub fn deleted_address(&self, key: &ObjectKey, pool: &PoolKey, uid: Option<&str>) {
        if let Some(uid) = uid {
            lock(&self.deleted).insert(key.clone(), Uid::of(uid));
        }
        let woken = self.registry.forget(pool, key);
        self.wake(woken);
        self.metrics.released(pool.kind);
        self.addresses.write().unwrap_or_else(|e| e.into_inner()).remove(key);
    }

    /// Whether `address` is one we deleted (its events are stale).
    fn is_deleted(&self, key: &ObjectKey, address: &IpAddress) -> bool {
        let deleted = lock(&self.deleted);
        deleted.get(key).is_some_and(|uid| address.metadata.uid.as_deref().map(Uid::of).as_ref() == Some(uid))
    }

    pub fn claims_api(&self, namespace: &str) -> Api<ClaimResource> {
        Api::namespaced_with(self.client.clone(), namespace, &self.capi.ipam)
    }

    /// Reconciles these claims soon.
    pub fn wake(&self, claims: Vec<ObjectKey>) {
        for c in claims {
            self.queue.add(c);
        }
    }

    /// A watch delivered an event or a request succeeded: the claims parked while the API server did not answer
    /// are reconciled now.
    fn api_answered(&self) {
        let parked = self.reachability.answered();
        if !parked.is_empty() {
            self.wake(parked);
        }
    }

    /// A watch failed: said once when the API server does not answer; a watch that expired (410 Gone: it relists,
    /// as designed) at debug; anything else each time (a refusal is worth reading).
    fn watch_failed(&self, what: &'static str, error: &watcher::Error) {
        if watch_unreachable(error) {
            self.reachability.unreachable("watching", &what, error);
        } else if matches!(error, watcher::Error::WatchError(e) if e.code == 410) {
            debug!(watch = what, error = %error, "the watch expired; relisting");
        } else {
            warn!(watch = what, error = %error, "watch failed; retrying");
        }
    }

    /// An operation on `object` failed: an unreachable API server is said once; conflicts, vanished objects and
    /// fenced writes are the ordinary races of a controller (debug); anything else is a WARN naming the operation
    /// and the object.
    fn report_failure(&self, operation: &'static str, object: &ObjectKey, error: &Error) {
        if error.is_unreachable() {
            self.reachability.unreachable(operation, object, error);
        } else if matches!(error.kind(), "conflict" | "not_found" | "fenced") {
            debug!(operation, object = %object, error = %error, "failed; retried later");
        } else {
            warn!(operation, object = %object, error = %error, "failed; retried later");
        }
    }

    fn wake_claims_where(&self, predicate: impl Fn(&Claim) -> bool) {
        self.wake(self.claims.keys_where(predicate));
    }

    pub fn already_written(&self, uid: &str, ready: &Ready, address_ref: Option<&str>) -> bool {
        lock(&self.written).get(&Uid::of(uid)) == Some(&crate::compact::digest(&(ready, address_ref)))
    }

    pub fn remember_written(&self, uid: &str, ready: &Ready, address_ref: Option<&str>) {
        lock(&self.written).insert(Uid::of(uid), crate::compact::digest(&(ready, address_ref)));
    }

    /// The address the claim's IPAddress held in `pool` before it was deleted from under the live claim, once.
    pub fn take_vanished_address(&self, claim: &ObjectKey, pool: &PoolKey) -> Option<Box<str>> {
        let mut vanished = lock(&self.vanished_addresses);
        vanished.remove(claim).filter(|(p, _)| p == pool).map(|(_, address)| address)
    }

    pub fn forget_claim(&self, key: &ObjectKey, uid: &str) {
        lock(&self.vanished_addresses).remove(key);
        let uid = Uid::of(uid);
        lock(&self.written).remove(&uid);
        lock(&self.first_seen).remove(&uid);
        lock(&self.failures).remove(&uid);
    }

    /// Time since the claim was first seen, once: the allocation latency.
    pub fn allocation_latency(&self, claim: &Claim) -> Option<Duration> {
        lock(&self.first_seen).remove(&Uid::of(&claim.uid)).map(|t| t.elapsed())
    }

    fn first_seen(&self, claim: &Claim) {
        lock(&self.first_seen).entry(Uid::of(&claim.uid)).or_insert_with(Instant::now);
    }
}

/// Per-object exponential backoff: 200 ms doubling to 5 minutes, reset on success.
fn backoff(ctx: &Context, uid: &str) -> Duration {
    let mut failures = lock(&ctx.failures);
    let n = failures.entry(Uid::of(uid)).or_insert(0);
    *n = (*n + 1).min(12);
    let delay = Duration::from_millis(200).saturating_mul(1 << (*n - 1)).min(Duration::from_secs(300));
    // Spread retries of a burst a little.
    let jitter = Duration::from_millis(u64::from(uid.bytes().fold(0u8, |a, b| a.wrapping_add(b))) % 100);
    delay + jitter
}

fn reset_backoff(ctx: &Context, uid: &str) {
    lock(&ctx.failures).remove(&Uid::of(uid));
}

/// Watches end on the server's side after 45 s and resume from their last resourceVersion: the client's 60 s read
/// timeout (`crate::manager`) must not cut a quiet watch, which would log an error and reconnect.
fn watch_config() -> watcher::Config {
    watcher::Config::default().timeout(WATCH_TIMEOUT_SECONDS)
}

/// Below the client's read timeout.
const WATCH_TIMEOUT_SECONDS: u32 = 45;

fn api_for<K>(client: &Client, namespace: Option<&str>, dyntype: &K::DynamicType) -> Api<K>
where
    K: Resource<Scope = kube::core::DynamicResourceScope>,
{
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, dyntype),
        None => Api::all_with(client.clone(), dyntype),
    }
}

fn pool_resource(kind: PoolKind) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, "v1alpha2", kind.kind()), &kind.plural())
}

/// Runs the controllers until `stop`.
pub async fn run(
    client: Client,
    options: ControllerOptions,
    fence: Fence,
    metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let capi = options.capi;
    let namespace = options.namespace.clone();
    // Claims that vanished: their IPAddress, if any, is checked at once (decision D11).
    let (vanished_tx, mut vanished) = mpsc::unbounded::<ObjectKey>();
    let (synced_tx, synced) = watch::channel(false);

    // Claims: only those pointing at our pool kinds are cached and reconciled.
    let mut claim_watch = watch_config();
    if let Some(filter) = &options.watch_filter {
        claim_watch = claim_watch.labels(&format!("{WATCH_FILTER_LABEL}={filter}"));
    }
    let claim_stream = watcher(api_for::<ClaimResource>(&client, namespace.as_deref(), &capi.ipam), claim_watch)
        .backoff(WatchBackoff::default());

    // Pools: one cached stream per kind.
    let mut pools = HashMap::new();
    let mut pool_streams = Vec::new();
    let mut pool_triggers = HashMap::new();
    let mut pool_trigger_streams = Vec::new();
    for kind in PoolKind::ALL {
        let resource = pool_resource(kind);
        let writer = Writer::<DynamicObject>::new(resource.clone());
        pools.insert(kind, (writer.as_reader(), resource.clone()));
        let scope = if kind.is_global() { None } else { namespace.as_deref() };
        let stream = watcher(api_for::<DynamicObject>(&client, scope, &resource), watch_config())
            .backoff(WatchBackoff::default())
            .modify(|p: &mut DynamicObject| p.metadata.managed_fields = None)
            .reflect(writer);
        pool_streams.push((kind, stream));
        let (tx, rx) = mpsc::unbounded();
        pool_triggers.insert(kind, tx);
        pool_trigger_streams.push(rx);
    }

    // Clusters, when the API server serves them.
    let cluster_parts = capi.cluster.map(|version| {
        let writer = Writer::<Cluster>::new(version);
        let reader = writer.as_reader();
        let stream = watcher(api_for::<Cluster>(&client, namespace.as_deref(), &version), watch_config())
            .backoff(WatchBackoff::default())
            .reflect(writer);
        (reader, version, stream)
    });

    let identity = std::env::var("HOSTNAME").unwrap_or_else(|_| "capi-ipam-in-cluster".to_owned());
    let (moved_away, moved_away_writes) = moved_away::MovedAway::new();
    let ctx = Arc::new(Context {
        client: client.clone(),
        fence,
        capi,
        registry: Arc::new(Registry::new()),
        metrics: metrics.clone(),
        reachability: Reachability::default(),
        events: events::Events::new(client.clone(), identity),
        addresses: RwLock::new(HashMap::new()),
        pools,
        clusters: cluster_parts.as_ref().map(|(reader, version, _)| (reader.clone(), *version)),
        claims: ClaimCache::default(),
        queue: WorkQueue::default(),
        pool_triggers,
        synced,
        written: Mutex::new(HashMap::new()),
        first_seen: Mutex::new(HashMap::new()),
        failures: Mutex::new(HashMap::new()),
        vanished_addresses: Mutex::new(HashMap::new()),
        deleted: Mutex::new(HashMap::new()),
        moved_away,
        options: options.clone(),
    });

    let mut tasks: Vec<futures::future::BoxFuture<'static, (&'static str, anyhow::Result<()>)>> = Vec::new();

    // Claims feed the claim cache and the queue.
    let (claims_synced_tx, mut claims_synced) = watch::channel(false);
    {
        let ctx = ctx.clone();
        tasks.push(
            async move {
                let result = watch_claims(ctx, claim_stream, claims_synced_tx, vanished_tx).await;
                ("IPAddressClaim watch", result)
            }
            .boxed(),
        );
    }

    // IPAddresses feed the allocator and the index.
    let (addresses_synced_tx, mut addresses_synced) = watch::channel(false);
    {
        let ctx = ctx.clone();
        let stream = watcher(api_for::<IpAddress>(&client, namespace.as_deref(), &capi.ipam), watch_config())
            .backoff(WatchBackoff::default());
        tasks.push(
            async move {
                let result = watch_addresses(ctx, stream, addresses_synced_tx).await;
                ("IPAddress watch", result)
            }
            .boxed(),
        );
    }

    // Pool streams: apply specs to the allocator and wake the claims a pool change concerns; then hand the
    // objects to the pool controllers.
    let mut pool_controllers = Vec::new();
    for ((kind, stream), trigger) in pool_streams.into_iter().zip(pool_trigger_streams) {
        let hook_ctx = ctx.clone();
        let mut seen: HashMap<PoolKey, (Option<i64>, bool)> = HashMap::new();
        let stream = stream.inspect_ok(move |event| on_pool_event(&hook_ctx, kind, event, &mut seen)).applied_objects();
        let (reader, resource) = ctx.pools[&kind].clone();
        let controller = Controller::for_stream_with(stream, reader, resource)
            .with_config(ControllerConfig::default().concurrency(4))
            .reconcile_on(trigger)
            .graceful_shutdown_on(stop.clone().cancelled_owned())
            .run(move |p, ctx| pool::reconcile(kind, p, ctx), pool::error_policy, ctx.clone())
            .for_each(|r| {
                if let Err(e) = r {
                    debug!(error = %e, "pool controller");
                }
                future::ready(())
            });
        pool_controllers.push(controller);
    }
    tasks.push(
        async move { ("pool controllers", Ok(futures::future::join_all(pool_controllers).await).map(|_| ())) }.boxed(),
    );

    let cluster_reader = cluster_parts.as_ref().map(|(reader, _, _)| reader.clone());
    if let Some((_, _, stream)) = cluster_parts {
        let ctx = ctx.clone();
        tasks.push(
            async move {
                let mut paused: HashMap<(String, String), bool> = HashMap::new();
                let mut stream = std::pin::pin!(stream);
                while let Some(event) = stream.next().await {
                    match event {
                        Ok(watcher::Event::Apply(c) | watcher::Event::InitApply(c)) => {
                            let key = (c.namespace().unwrap_or_default(), c.name_any());
                            let now_paused = c.is_paused();
                            let was = paused.insert(key.clone(), now_paused);
                            // A Cluster that appears, or is unpaused, wakes its claims (decision D9).
                            if !now_paused && was != Some(false) {
                                ctx.wake_claims_where(|claim| {
                                    *claim.key.namespace == *key.0 && claim.cluster() == Some(key.1.as_str())
                                });
                            }
                        }
                        Ok(watcher::Event::Delete(c)) => {
                            paused.remove(&(c.namespace().unwrap_or_default(), c.name_any()));
                        }
                        Ok(_) => {}
                        Err(e) => ctx.watch_failed("Clusters", &e),
                    }
                }
                ("Cluster watch", Ok(()))
            }
            .boxed(),
        );
    }

    // Start-up gate: nothing allocates before every cache listed everything once.
    {
        let ctx = ctx.clone();
        let readiness = readiness.clone();
        tasks.push(
            async move {
                let _ = addresses_synced.wait_for(|s| *s).await;
                for (store, _) in ctx.pools.values() {
                    let _ = store.wait_until_ready().await;
                }
                if let Some(r) = &cluster_reader {
                    let _ = r.wait_until_ready().await;
                }
                let _ = claims_synced.wait_for(|s| *s).await;
                info!(
                    claims = ctx.claims.len(),
                    addresses = ctx.addresses.read().map(|a| a.len()).unwrap_or(0),
                    "caches synced; allocating"
                );
                let _ = synced_tx.send(true);
                readiness.caches_synced.store(true, Ordering::Release);
                // Keep the sender alive: dropping it would not unset `synced`, but this task must not end early.
                future::pending::<()>().await;
                ("start-up gate", Ok(()))
            }
            .boxed(),
        );
    }

    // Pool status: written at most every 250 ms per pool, however many addresses change (decision D4).
    {
        let ctx = ctx.clone();
        tasks.push(
            async move {
                let mut tick = tokio::time::interval(Duration::from_millis(250));
                loop {
                    tick.tick().await;
                    for key in ctx.registry.take_dirty() {
                        if let Some(tx) = ctx.pool_triggers.get(&key.kind) {
                            let (_, resource) = &ctx.pools[&key.kind];
                            let mut r = ObjectRef::new_with(&key.name, resource.clone());
                            if !key.kind.is_global() {
                                r = r.within(&key.namespace);
                            }
                            let _ = tx.unbounded_send(r);
                        }
                    }
                }
            }
            .boxed(),
        );
    }

    // Reservations of addresses moved to another management cluster are written into their pools.
    {
        let ctx = ctx.clone();
        tasks.push(
            async move {
                moved_away::write_pending(ctx, moved_away_writes).await;
                ("moved-away writer", Ok(()))
            }
            .boxed(),
        );
    }

    // IPAddresses whose claim is gone are released (decision D11).
    {
        let ctx = ctx.clone();
        tasks.push(
            async move {
                let delay = ctx.options.orphan_release_delay;
                let mut orphaned_since: HashMap<ObjectKey, Instant> = HashMap::new();
                let mut tick = tokio::time::interval((delay / 2).max(Duration::from_millis(500)));
                loop {
                    tokio::select! {
                        _ = tick.tick() => {
                            if *ctx.synced.borrow() {
                                sweep_orphans(&ctx, &mut orphaned_since, delay).await;
                            }
                        }
                        Some(key) = vanished.next() => release_if_orphaned(&ctx, &key).await,
                    }
                }
            }
            .boxed(),
        );
    }

    // The claim workers, and the timer of their delayed requeues.
    {
        let ctx = ctx.clone();
        tasks.push(
            async move {
                ctx.queue.run_timers().await;
                ("claim requeue timer", Ok(()))
            }
            .boxed(),
        );
    }
    {
        let workers: Vec<_> =
            (0..options.concurrency.max(1)).map(|_| claim_worker(ctx.clone(), stop.clone())).collect();
        tasks.push(
            async move {
                futures::future::join_all(workers).await;
                ("claim workers", Ok(()))
            }
            .boxed(),
        );
    }

    // Run until stop; any task ending earlier is a failure of the controllers.
    let mut tasks = futures::future::select_all(tasks);
    tokio::select! {
        _ = stop.cancelled() => Ok(()),
        ((name, result), _, _) = &mut tasks => {
            if stop.is_cancelled() {
                return Ok(());
            }
            Err(result.err().unwrap_or_else(|| anyhow::anyhow!("{name} stopped unexpectedly")))
        }
    }
}

fn on_pool_event(
    ctx: &Context,
    kind: PoolKind,
    event: &watcher::Event<DynamicObject>,
    seen: &mut HashMap<PoolKey, (Option<i64>, bool)>,
) {
    match event {
        watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
            let key = PoolKey::new(kind, &p.namespace().unwrap_or_default(), &p.name_any());
            if let Some(spec) = p.data.get("spec") {
                let woken = ctx.registry.apply_spec(&key, spec);
                ctx.wake(woken);
            }
            if kind.is_global() {
                moved_away::sync(ctx, &key, p);
            }
            let paused = p.annotations().contains_key(PAUSED_ANNOTATION);
            let state = (p.metadata.generation, paused);
            let before = seen.insert(key.clone(), state);
            // Created, changed or unpaused: the claims that reference the pool get another look.
            if !paused && before != Some(state) {
                wake_pool_claims(ctx, &key);
            }
        }
        watcher::Event::Delete(p) => {
            let key = PoolKey::new(kind, &p.namespace().unwrap_or_default(), &p.name_any());
            seen.remove(&key);
            ctx.registry.remove_spec(&key);
            ctx.metrics.forget_pool(kind, &key.namespace, &key.name);
            wake_pool_claims(ctx, &key);
        }
        watcher::Event::Init | watcher::Event::InitDone => {}
    }
}

fn wake_pool_claims(ctx: &Context, key: &PoolKey) {
    ctx.wake_claims_where(|claim| {
        claim.pool_kind == Some(key.kind)
            && claim.pool_name == key.name
            && (key.kind.is_global() || claim.key.namespace == key.namespace)
    });
}

/// Consumes the claim watch: claims of our pool kinds are cached and queued; a relist drops what vanished meanwhile.
async fn watch_claims(
    ctx: Arc<Context>,
    stream: impl futures::Stream<Item = Result<watcher::Event<ClaimResource>, watcher::Error>>,
    synced: watch::Sender<bool>,
    vanished: mpsc::UnboundedSender<ObjectKey>,
) -> anyhow::Result<()> {
    let mut stream = std::pin::pin!(stream);
    // On a relist: the cached claims not listed again (empty at start-up, so the first list costs nothing here).
    let mut unlisted: Option<HashSet<ObjectKey>> = None;
    let forget = |key: &ObjectKey| {
        if let Some(claim) = ctx.claims.remove(key) {
            // Deleted by `clusterctl move`: an address of a global pool stays reserved here.
            if claim.moving_away {
                moved_away::claim_moved_away(&ctx, key);
            }
            let _ = vanished.unbounded_send(key.clone());
        }
    };
    while let Some(event) = stream.next().await {
        if event.is_ok() {
            ctx.api_answered();
        }
        match event {
            Ok(watcher::Event::Init) => unlisted = Some(ctx.claims.keys_where(|_| true).into_iter().collect()),
            Ok(watcher::Event::InitApply(c)) => {
                if let Some(set) = unlisted.as_mut() {
                    set.remove(&c.claim.key);
                }
                apply_claim(&ctx, c.claim);
            }
            Ok(watcher::Event::InitDone) => {
                for key in unlisted.take().into_iter().flatten() {
                    forget(&key);
                }
                let _ = synced.send(true);
            }
            Ok(watcher::Event::Apply(c)) => apply_claim(&ctx, c.claim),
            Ok(watcher::Event::Delete(c)) => {
                if c.claim.moving_away {
                    moved_away::claim_moved_away(&ctx, &c.claim.key);
                }
                forget(&c.claim.key);
            }
            Err(e) => ctx.watch_failed("IPAddressClaims", &e),
        }
    }
    Ok(())
}

/// Caches a claim that references one of our pool kinds and queues it; any other claim is not ours to keep.
fn apply_claim(ctx: &Context, claim: Claim) {
    let key = claim.key.clone();
    if claim.pool_kind.is_some() {
        ctx.claims.insert(Arc::new(claim));
        ctx.queue.add(key);
    } else {
        ctx.claims.remove(&key);
    }
}

/// Reconciles queued claims one at a time until `stop`; a run that has begun is finished first.
async fn claim_worker(ctx: Arc<Context>, stop: CancellationToken) {
    loop {
        let key = tokio::select! {
            _ = stop.cancelled() => return,
            key = ctx.queue.next() => key,
        };
        // Read the claim once every cache has listed (at start-up), so that it is the freshest we have.
        ctx.wait_synced().await;
        let next = match ctx.claims.get(&key) {
            Some(claim) => {
                if claim.address_ref.is_none() {
                    ctx.first_seen(&claim);
                }
                let uid = claim.uid.clone();
                match claim::reconcile(claim, ctx.clone()).await {
                    Ok(next) => {
                        reset_backoff(&ctx, &uid);
                        ctx.api_answered();
                        next
                    }
                    Err(error) => {
                        ctx.report_failure("reconciling the claim", &key, &error);
                        if error.is_unreachable() {
                            // Reconciled again when the API server answers.
                            ctx.reachability.park(key.clone());
                        }
                        if error.is_unreachable() && !ctx.reachability.is_down() {
                            // It answered while this claim was failing: do not wait for the next outage.
                            Next::After(Duration::from_millis(200))
                        } else {
                            Next::After(backoff(&ctx, &uid))
                        }
                    }
                }
            }
            // Deleted meanwhile: its Delete event did what was left to do.
            None => Next::AwaitChange,
        };
        ctx.queue.done(&key);
        if let Next::After(delay) = next {
            ctx.queue.add_after(key, delay);
        }
    }
}

/// Consumes the IPAddress watch: every change goes into the index and the allocator; a relist replaces both.
async fn watch_addresses(
    ctx: Arc<Context>,
    stream: impl futures::Stream<Item = Result<watcher::Event<IpAddress>, watcher::Error>>,
    synced: watch::Sender<bool>,
) -> anyhow::Result<()> {
    let mut stream = std::pin::pin!(stream);
    // On a relist: the known IPAddresses not listed again (empty at start-up, so the first list costs nothing here).
    let mut unlisted: Option<HashSet<ObjectKey>> = None;
    while let Some(event) = stream.next().await {
        if event.is_ok() {
            ctx.api_answered();
        }
        match event {
            Ok(watcher::Event::Init) => {
                unlisted = Some(ctx.addresses.read().unwrap_or_else(|e| e.into_inner()).keys().cloned().collect());
            }
            Ok(watcher::Event::InitApply(a)) => {
                let key = apply_address(&ctx, &a);
                if let Some(set) = unlisted.as_mut() {
                    set.remove(&key);
                }
            }
            Ok(watcher::Event::InitDone) => {
                // Whatever vanished while the watch was down is gone now.
                for key in unlisted.take().into_iter().flatten() {
                    delete_address(&ctx, &key);
                }
                // What we deleted and the list no longer holds needs no tombstone.
                let listed = ctx.addresses.read().unwrap_or_else(|e| e.into_inner());
                lock(&ctx.deleted).retain(|key, _| listed.contains_key(key));
                drop(listed);
                let _ = synced.send(true);
            }
            Ok(watcher::Event::Apply(a)) => {
                apply_address(&ctx, &a);
            }
            Ok(watcher::Event::Delete(a)) => {
                let key = ObjectKey::new(&a.namespace().unwrap_or_default(), &a.name_any());
                delete_address(&ctx, &key);
            }
            Err(e) => ctx.watch_failed("IPAddresses", &e),
        }
    }
    Ok(())
}

fn apply_address(ctx: &Context, address: &IpAddress) -> ObjectKey {
    let key = ObjectKey::new(&address.namespace().unwrap_or_default(), &address.name_any());
    if ctx.is_deleted(&key, address) {
        return key;
    }
    let Some(mut record) = AddressRecord::of(address) else {
        // Not one of our pools' (IPAddress specs are immutable, so it never was).
        return key;
    };
    let held = Held::of(record.pool.kind, &address.spec);
    let pool = record.pool.clone();
    if pool.kind.is_global() {
        // Once moved away, its address is a reservation until the object is gone; else it may be one coming back.
        record.moving_away |=
            ctx.addresses.read().unwrap_or_else(|e| e.into_inner()).get(&key).is_some_and(|r| r.moving_away);
        if record.moving_away {
            ctx.addresses.write().unwrap_or_else(|e| e.into_inner()).insert(key.clone(), record);
            moved_away::still_moving_away(ctx, &pool, &key, held);
            return key;
        }
        moved_away::came_back(ctx, &pool, &key, held);
    }
    let previous = ctx.addresses.write().unwrap_or_else(|e| e.into_inner()).insert(key.clone(), record);
    if let Some(old) = previous.filter(|p| p.pool != pool) {
        let woken = ctx.registry.forget(&old.pool, &key);
        ctx.wake(woken);
    }
    if let Some(duplicate) = ctx.registry.record(&pool, &key, held) {
        ctx.report_duplicate(&duplicate);
    }
    // The claim of the same name may need its finalizer, owner references or status (restore, move).
    ctx.wake(vec![key.clone()]);
    key
}

fn delete_address(ctx: &Context, key: &ObjectKey) {
    lock(&ctx.deleted).remove(key);
    let removed = ctx.addresses.write().unwrap_or_else(|e| e.into_inner()).remove(key);
    if let Some(record) = removed {
        if record.moving_away && record.pool.kind.is_global() {
            moved_away::moved_away(ctx, &record.pool, key);
            return;
        }
        let woken = ctx.registry.forget(&record.pool, key);
        ctx.metrics.released(record.pool.kind);
        ctx.wake(woken);
        // If its claim still lives, it gets a new IPAddress: with the same address, while that is still free.
        if ctx.claims.get(key).is_some_and(|c| c.deletion_timestamp.is_none()) {
            lock(&ctx.vanished_addresses).insert(key.clone(), (record.pool, record.address));
        }
        ctx.wake(vec![key.clone()]);
    }
}

/// A claim's Delete event is authoritative: an IPAddress we made for it goes now, unless its Cluster is paused.
async fn release_if_orphaned(ctx: &Context, key: &ObjectKey) {
    let Some(record) = ctx.address(key).filter(|r| r.owned_by_a_claim() && !r.deleting) else {
        return;
    };
    if let Some(cluster) = &record.cluster_label
        && ctx.cluster(&key.namespace, cluster).is_some_and(|c| c.is_paused())
    {
        return;
    }
    release_if_claim_gone(ctx, key, &record).await;
}

/// Releases the IPAddress `key` once the API server confirms that its claim is gone (the cache may lag).
async fn release_if_claim_gone(ctx: &Context, key: &ObjectKey, record: &AddressRecord) {
    match ctx.claims_api(&key.namespace).get_opt(&key.name).await {
        Ok(None) => {
            if let Err(e) = claim::release_orphan(ctx, key, record).await {
                ctx.report_failure("releasing the IPAddress of a vanished claim", key, &e);
            }
        }
        Ok(Some(_)) => {}
        Err(e) => ctx.report_failure("checking the claim of an IPAddress", key, &Error::kube("reading the claim")(e)),
    }
}

async fn sweep_orphans(ctx: &Context, orphaned_since: &mut HashMap<ObjectKey, Instant>, delay: Duration) {
    let candidates: Vec<(ObjectKey, AddressRecord)> = ctx
        .addresses
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|(k, r)| r.owned_by_a_claim() && !r.deleting && !ctx.claims.contains(k))
        .map(|(k, r)| (k.clone(), r.clone()))
        .collect();
    let mut still = HashSet::new();
    for (key, record) in candidates {
        // A paused Cluster (a move in progress) keeps its addresses.
        if let Some(cluster) = &record.cluster_label
            && ctx.cluster(&key.namespace, cluster).is_some_and(|c| c.is_paused())
        {
            continue;
        }
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
