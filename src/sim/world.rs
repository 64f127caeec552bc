//! One simulated run: the API server, two or three replicas taking turns at the lease, their watches, work queues and
//! workers (the real index and controllers, on [`SimApi`]), and the users and clusterctl acting on the API server.
//! Every step is chosen by one seeded generator; after every step the invariants are checked.

use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context as TaskContext, Poll, Waker};
use std::time::Duration;

use kube::runtime::watcher::Event;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::time::Instant;

use super::client::{Hub, lock};
use super::model::{CLUSTER, Held, NAMESPACES, POOLS, PoolId, Shape};
use super::rng::Rng;
use super::server::{Kind, key_of};
use super::swarm::{Late, Options, SHARD, SHARD_POOL, Step, Swarm};
use crate::api::{CLUSTER_NAME_LABEL, GROUP, MOVED_AWAY_ANNOTATION, PoolKind, WATCH_FILTER_LABEL, v1alpha2};
use crate::apiserver::ApiError;
use crate::capi::{ClaimResource, Cluster, IpAddress};
use crate::controllers::{self, Context};
use crate::index::relist::{Feed, Pools, Relist};
use crate::index::{Index, ObjectKey, PoolKey, Sink};
use crate::ipam::AllocationStrategy;
use crate::leader::SimulatedTerm;
use crate::runtime::retry::{Outcome, RECHECK};
use crate::runtime::{Work, WorkStreams};

mod checker;
mod faults;
mod harness;
mod liveness;
mod scenario;
mod workload;

/// An invariant broken, with the events that led there.
#[derive(Debug)]
pub struct Violation {
    pub seed: u64,
    pub step: usize,
    pub what: String,
    pub trace: Vec<String>,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "seed {} broke an invariant at step {}: {}", self.seed, self.step, self.what)?;
        if self.trace.is_empty() {
            writeln!(f, "(replay it with SIM_SEED={} for the trace)", self.seed)?;
        }
        for line in &self.trace {
            writeln!(f, "  {line}")?;
        }
        write!(f, "replay: SIM_SEED={} cargo test --lib sim::tests::replay -- --nocapture", self.seed)
    }
}

/// What a run did (for the soak's report).
#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub steps: usize,
    pub terms: u64,
    pub claims_created: u64,
    pub bindings: u64,
    pub late_writes: u64,
    pub relists: u64,
    pub moves: u64,
}

impl std::ops::AddAssign<&Stats> for Stats {
    fn add_assign(&mut self, o: &Stats) {
        self.steps += o.steps;
        self.terms += o.terms;
        self.claims_created += o.claims_created;
        self.bindings += o.bindings;
        self.late_writes += o.late_writes;
        self.relists += o.relists;
        self.moves += o.moves;
    }
}

/// Where one watch is in kube's list-then-watch cycle.
enum WatchState {
    /// It (re)starts: `Init` comes first, before the list request is sent.
    Start,
    /// `Init` delivered; the list is served at a later step.
    Requested,
    /// The list was served (a quorum read at that moment): its objects, then `InitDone`.
    Listing(std::collections::VecDeque<Value>),
    /// Events from `cursor` on.
    Watching,
}

/// How a watch's events enter the index: the real feed of its kind.
enum Feeder {
    Claims(Relist<<Index as Feed<ClaimResource>>::Key>),
    Addresses(Relist<<Index as Feed<IpAddress>>::Key>),
    Pools(PoolKind, Relist<PoolKey>),
    Clusters(Relist<<Index as Feed<Cluster>>::Key>),
}

fn typed<K: serde::de::DeserializeOwned>(event: Event<Value>) -> Event<K> {
    let parse =
        |v: Value| serde_json::from_value::<K>(v).unwrap_or_else(|e| panic!("the simulation wrote a bad object: {e}"));
    match event {
        Event::Init => Event::Init,
        Event::InitDone => Event::InitDone,
        Event::InitApply(v) => Event::InitApply(parse(v)),
        Event::Apply(v) => Event::Apply(parse(v)),
        Event::Delete(v) => Event::Delete(parse(v)),
    }
}

impl Feeder {
    fn new(kind: Kind) -> Self {
        match kind {
            Kind::Claim => Feeder::Claims(Relist::default()),
            Kind::Address => Feeder::Addresses(Relist::default()),
            Kind::Pool(k) => Feeder::Pools(k, Relist::default()),
            Kind::Cluster => Feeder::Clusters(Relist::default()),
        }
    }

    /// Feeds one event; true when it ended a list.
    fn feed(&mut self, index: &Index, event: Event<Value>) -> bool {
        match self {
            Feeder::Claims(r) => r.on_event(index, typed::<ClaimResource>(event)),
            Feeder::Addresses(r) => r.on_event(index, typed::<IpAddress>(event)),
            Feeder::Clusters(r) => r.on_event(index, typed::<Cluster>(event)),
            Feeder::Pools(kind, r) => match kind {
                PoolKind::InClusterIPPool => r.on_event(&Pools::<v1alpha2::InClusterIPPool>::of(index), typed(event)),
                PoolKind::GlobalInClusterIPPool => {
                    r.on_event(&Pools::<v1alpha2::GlobalInClusterIPPool>::of(index), typed(event))
                }
                PoolKind::InClusterPrefixPool => {
                    r.on_event(&Pools::<v1alpha2::InClusterPrefixPool>::of(index), typed(event))
                }
                PoolKind::GlobalInClusterPrefixPool => {
                    r.on_event(&Pools::<v1alpha2::GlobalInClusterPrefixPool>::of(index), typed(event))
                }
            },
        }
    }
}

struct Watch {
    kind: Kind,
    state: WatchState,
    cursor: usize,
    feeder: Feeder,
    listed: bool,
}

/// The watches of a term: the manager's (`controllers::WATCHED`), in its order, but of a pool kind the simulation
/// has no pool of (a global prefix pool): that watch would deliver nothing, and the draws of every seed found so far
/// would change.
fn watched() -> Vec<Kind> {
    controllers::WATCHED
        .iter()
        .map(|w| match *w {
            controllers::Watched::Claims => Kind::Claim,
            controllers::Watched::IpAddresses => Kind::Address,
            controllers::Watched::Pools(kind) => Kind::Pool(kind),
            controllers::Watched::Clusters => Kind::Cluster,
        })
        .filter(|kind| !matches!(kind, Kind::Pool(_)) || POOLS.iter().any(|p| p.server_kind() == *kind))
        .collect()
}

/// What a worker is doing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Job {
    Claim(ObjectKey),
    Pool(PoolKey),
    /// The orphan task's check of a claim that is gone.
    Gone(ObjectKey),
    /// The orphan task's sweep.
    Sweep,
    MovedAway(PoolKey),
}

impl std::fmt::Display for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Job::Claim(k) => write!(f, "claim {k}"),
            Job::Pool(k) => write!(f, "pool {k}"),
            Job::Gone(k) => write!(f, "orphan check {k}"),
            Job::Sweep => f.write_str("orphan sweep"),
            Job::MovedAway(k) => write!(f, "moved-away writer {k}"),
        }
    }
}

struct Task {
    job: Job,
    run: Pin<Box<dyn Future<Output = Outcome>>>,
}

/// A replica's leader term: a fresh index and controllers, as `crate::manager::lead` starts them: the manager's own
/// work queues (on the simulated clock) and the real fence of a term that is renewed, lost or left to run out.
/// The second manager: its term, and its own choices of when it acts (so that a seed without it plays as before).
struct Shard {
    term: Option<Term>,
    rng: Rng,
}

struct Term {
    id: u64,
    replica: usize,
    ctx: Arc<Context>,
    /// The index's sink: the claim and pool queues, and the channels of the orphan task and the moved-away writer.
    work: Arc<Work>,
    streams: WorkStreams,
    /// What those channels delivered, not yet taken (the schedule takes them in any order).
    gone: BTreeSet<ObjectKey>,
    moved_away: BTreeSet<PoolKey>,
    /// The term behind the fence every write of this term passes (`SimApi`).
    lease: SimulatedTerm,
    /// Renewed as time passes; once not, the term runs on until its fence closes on the simulated clock.
    renewing: bool,
    watches: Vec<Watch>,
    synced: bool,
    synced_tx: watch::Sender<bool>,
    tasks: Vec<Task>,
    /// The delay each key's last run asked its queue for: a requeue of `RECHECK` or more is a safety net.
    asked_claims: BTreeMap<ObjectKey, Duration>,
    asked_pools: BTreeMap<PoolKey, Duration>,
    /// Claims reconciled at once (`--concurrency`).
    concurrency: usize,
}

impl Term {
    fn running(&self, job: &Job) -> bool {
        self.tasks.iter().any(|t| t.job == *job)
    }

    fn running_claims(&self) -> usize {
        self.tasks.iter().filter(|t| matches!(t.job, Job::Claim(_))).count()
    }

    fn orphan_task_busy(&self) -> bool {
        self.tasks.iter().any(|t| matches!(t.job, Job::Gone(_) | Job::Sweep))
    }

    fn running_pools(&self) -> usize {
        self.tasks.iter().filter(|t| matches!(t.job, Job::Pool(_))).count()
    }

    /// Whether a delayed requeue is due.
    fn due_timers(&self, now: Instant) -> bool {
        self.work.claims.next_due().is_some_and(|at| at <= now)
            || self.work.pools.next_due().is_some_and(|at| at <= now)
    }

    fn claim_safety_net(&self, key: &ObjectKey) -> bool {
        self.asked_claims.get(key).is_some_and(|delay| is_safety_net(*delay))
    }

    fn pool_safety_net(&self, key: &PoolKey) -> bool {
        self.asked_pools.get(key).is_some_and(|delay| is_safety_net(*delay))
    }

    /// When the next delayed requeue that is no safety net is due, if one is pending.
    fn next_due(&self) -> Option<Instant> {
        let claims =
            self.work.claims.delayed().into_iter().filter(|(k, _)| !self.claim_safety_net(k)).map(|(_, at)| at);
        let pools = self.work.pools.delayed().into_iter().filter(|(k, _)| !self.pool_safety_net(k)).map(|(_, at)| at);
        claims.chain(pools).min()
    }

    /// Queues the requeues due at `now` but safety nets.
    fn fire_due_but_safety_nets(&self, now: Instant) {
        self.work.claims.fire_due(now, |k| !self.claim_safety_net(k));
        self.work.pools.fire_due(now, |k| !self.pool_safety_net(k));
    }

    /// Takes what the channels of the orphan task and the moved-away writer delivered.
    fn pull(&mut self) {
        while let Ok(key) = self.streams.gone.try_recv() {
            self.gone.insert(key);
        }
        while let Ok(key) = self.streams.moved_away.try_recv() {
            self.moved_away.insert(key);
        }
    }

    fn moved_away_busy(&self) -> bool {
        self.tasks.iter().any(|t| matches!(t.job, Job::MovedAway(_)))
    }
}

/// What a finished run asked for, as settling weighs it: a failed run's backoff is the retry it counts on, however
/// long faults in a row made it, never a safety net.
/// A failed run's requeue (a backoff, or the wait after a write admission refused) is a retry the claim counts on, never
/// a safety net, however long.
fn asked(outcome: Outcome, delay: Duration) -> Duration {
    if matches!(outcome, Outcome::Failed(_)) { Duration::ZERO } else { delay }
}

/// A requeue this long or longer is a safety net (`RECHECK`, a pool's resync, the backoff at its longest) rather than
/// a wait a decision counts on (a grace period, the restore wait, a retry): settling does not fire it, so that a claim
/// that waits only for it is found out.
fn is_safety_net(delay: Duration) -> bool {
    delay >= RECHECK
}

/// How long the fence of a term that is no longer renewed lets writes through (the manager's renew deadline).
const RENEW_DEADLINE: Duration = Duration::from_secs(10);

/// clusterctl moving the Cluster of a namespace away, or back.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Move {
    /// The Cluster lives here.
    Home,
    /// Moving away: the claims still to delete for the move.
    Leaving(Vec<ObjectKey>),
    /// On the other management cluster, with the addresses in `World::elsewhere`.
    Away,
}

/// An address of the global pool in use on the other management cluster.
#[derive(Clone, Debug)]
struct Elsewhere {
    namespace: usize,
    claim: String,
    /// The UID of the IPAddress clusterctl left behind here (released later as an orphan): it holds the address
    /// legitimately until then.
    left_behind: String,
    /// Our manager recorded it in the pool's annotation: from then on it must never be handed out here.
    protected: bool,
    /// The annotation was seen without it since this move began. An entry left from an earlier trip of the same
    /// address (the Cluster came back, and the entry was not yet taken out) is not our manager recording this one.
    seen_absent: bool,
}

impl Elsewhere {
    /// Whether IPAddress `address`, holding `held`, is this moved claim's reservation rather than a second user of
    /// its address: the one clusterctl left behind, or one of the claim's name holding exactly that address that no
    /// claim here is bound to (made again from a cache that still showed the claim, after it went with its move).
    fn reserved_by(&self, address: &Value, held: Held, bound: bool) -> bool {
        if address["metadata"]["uid"].as_str() == Some(&*self.left_behind) {
            return true;
        }
        let key = key_of(address);
        !bound
            && *key.namespace == *NAMESPACES[self.namespace]
            && *key.name == *self.claim
            && Held::of_address(PoolId::Global, address) == Some(held)
    }
}

pub struct World {
    seed: u64,
    pub(super) rng: Rng,
    /// The allocation strategy of each pool shape: a stream of its own, so that a seed makes the choices it made
    /// before strategies (a recorded seed plays its schedule).
    strategies: Rng,
    /// The per-Cluster quota of each pool shape, a stream of its own for the same reason.
    quotas: Rng,
    swarm: Swarm,
    options: Options,
    hub: Arc<Mutex<Hub>>,
    term: Option<Term>,
    /// The second manager (`Options::sharded`), while the first one's term is the live one.
    shard: Option<Shard>,
    /// The `--watch-filter` of the manager whose term is the live one.
    serving: Option<&'static str>,
    next_term: u64,
    shapes: BTreeMap<PoolId, Shape>,
    moves: [Move; 2],
    elsewhere: BTreeMap<Held, Elsewhere>,
    /// The claims clusterctl brought back, by UID, with the IPAddress and address they came back with.
    pub(super) returned: Vec<(String, ObjectKey, Held)>,
    trace: Vec<String>,
    step: usize,
    /// What the per-step check last saw (the server's revision, and the addresses of the other management cluster).
    checked: Option<(u64, usize, usize)>,
    /// The simulated clock: milliseconds since the run began (the controllers, the work queues and the fence read
    /// it, the API server stamps with it).
    now_ms: Arc<std::sync::atomic::AtomicI64>,
    /// The work queues' instant of the clock's zero.
    epoch: Instant,
    /// The fence's timers need a tokio runtime to be made in; its time is paused and never driven, so that only the
    /// simulated clock and the term's end decide.
    runtime: tokio::runtime::Runtime,
    /// Pins, another provider, people (`super::actors`).
    pub(super) actors: super::actors::Actors,
    /// A violation found while the tasks ran (a create sent), reported by the next check.
    pub(super) found: Option<String>,
    /// The UIDs of IPAddresses a deposed leader's create made after its term ended.
    late_created: BTreeSet<String>,
    pub stats: Stats,
}

fn poll_once<T>(future: Pin<&mut (impl Future<Output = T> + ?Sized)>) -> Poll<T> {
    let mut cx = TaskContext::from_waker(Waker::noop());
    future.poll(&mut cx)
}

pub(crate) fn short_uid(uid: &str) -> &str {
    uid.rsplit('-').next().map(|s| s.trim_start_matches('0')).filter(|s| !s.is_empty()).unwrap_or(uid)
}

/// What becomes of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    Answered,
    /// Applied, but the answer never arrives (a timeout): the sender cannot tell whether it happened.
    AppliedAnswerLost,
    /// Not applied; the connection broke.
    NotApplied,
    /// Not applied; a 500.
    ServerError,
    /// A create refused by an admission webhook (403).
    RefusedByAdmission,
}

impl Fate {
    fn describe(self) -> &'static str {
        match self {
            Fate::Answered => "answered",
            Fate::AppliedAnswerLost => "applied, answer lost",
            Fate::NotApplied => "not applied, connection reset",
            Fate::ServerError => "500",
            Fate::RefusedByAdmission => "refused by admission",
        }
    }
}

/// One line about an object, for the trace.
fn describe(kind: Kind, object: &Value) -> String {
    let meta = &object["metadata"];
    let mut line = format!(
        "{} {} uid {} rv {}",
        kind.name(),
        key_of(object),
        short_uid(meta["uid"].as_str().unwrap_or("-")),
        meta["resourceVersion"].as_str().unwrap_or("-")
    );
    if let Some(address) = object.pointer("/spec/address").and_then(Value::as_str) {
        line.push_str(&format!(" {address}"));
    }
    if let Some(bound) = object.pointer("/status/addressRef/name").and_then(Value::as_str) {
        line.push_str(&format!(" bound to {bound}"));
    }
    if let Some(annotation) = object.pointer("/metadata/annotations").and_then(|a| a.get(MOVED_AWAY_ANNOTATION)) {
        line.push_str(&format!(" moved-away={annotation}"));
    }
    if !meta["deletionTimestamp"].is_null() {
        line.push_str(" deleting");
    }
    line
}

impl World {
    pub fn new(seed: u64, options: Options) -> World {
        let mut rng = Rng::new(seed);
        let mut swarm = Swarm::new(&mut rng, watched().len());
        let focus = swarm.focus(seed);
        let trace = focus.filter(|_| options.trace).map(|f| format!("   0: {f}")).into_iter().collect();
        let sharded = options.sharded;
        let hub: Arc<Mutex<Hub>> = Arc::default();
        if swarm.moved_away_max_bytes < controllers::moved_away::MAX_BYTES {
            // An API server whose annotation limit a move would exceed, as 4,000 addresses moved away do a real one.
            lock(&hub).server.annotation_limit = 200;
        }
        World {
            seed,
            rng,
            strategies: Rng::new(seed ^ 0x0057_7A7E_6135),
            quotas: Rng::new(seed ^ 0x0000_0A07_A000),
            swarm,
            options,
            hub,
            term: None,
            shard: sharded.then(|| Shard { term: None, rng: Rng::new(seed ^ 0x5A4D_5EED) }),
            serving: None,
            next_term: 0,
            shapes: BTreeMap::new(),
            moves: [Move::Home, Move::Home],
            elsewhere: BTreeMap::new(),
            returned: Vec::new(),
            trace,
            step: 0,
            checked: None,
            now_ms: Arc::default(),
            epoch: Instant::now(),
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .expect("a tokio runtime for the fence's timers"),
            actors: super::actors::Actors { rng: Rng::new(!seed), ..Default::default() },
            found: None,
            late_created: BTreeSet::new(),
            stats: Stats::default(),
        }
    }

    pub(super) fn note(&mut self, line: impl FnOnce() -> String) {
        if self.options.trace {
            let text = line();
            self.trace.push(format!("{:>4}: {text}", self.step));
        }
    }

    fn violation(&mut self, what: String) -> Violation {
        Violation { seed: self.seed, step: self.step, what, trace: std::mem::take(&mut self.trace) }
    }

    /// Runs the schedule, then lets everything settle and checks the quiescent invariants.
    pub fn run(mut self) -> Result<Stats, Violation> {
        match self.play() {
            Ok(()) => {
                self.stats.steps = self.step;
                Ok(self.stats)
            }
            Err(what) => Err(self.violation(what)),
        }
    }

    /// Runs like [`World::run`] and returns the trace, ending with the violation if there was one.
    pub fn run_traced(mut self) -> Vec<String> {
        let result = self.play();
        let mut trace = std::mem::take(&mut self.trace);
        match result {
            Ok(()) => trace.push(format!("settled after {} steps: every invariant holds", self.step)),
            Err(what) => trace.push(format!("VIOLATION at step {}: {what}", self.step)),
        }
        trace
    }

    fn play(&mut self) -> Result<(), String> {
        self.set_up();
        for _ in 0..self.options.steps {
            self.step += 1;
            // Time passes as the steps go: a few hundred milliseconds, now and then a quiet stretch of minutes (long
            // requeues such as RECHECK come due).
            let ms =
                if self.rng.chance(2) { 1000 * (1 + self.rng.below(400)) as i64 } else { self.rng.below(300) as i64 };
            self.advance(ms);
            self.act();
            self.poll_tasks();
            self.check_always()?;
        }
        self.settle()?;
        self.check_quiescent()
    }

    // ---- Setting up ----

    fn set_up(&mut self) {
        for pool in POOLS {
            if self.rng.chance(85) {
                self.create_pool(pool);
            }
        }
        for (n, namespace) in NAMESPACES.iter().enumerate() {
            if self.rng.chance(70) {
                let _ = self.server_create(Kind::Cluster, cluster_object(namespace, false));
            }
            let _ = n;
        }
        self.each_manager(Self::start_term);
    }

    fn random_shape(&mut self, pool: PoolId) -> Shape {
        let v6 = match self.shapes.get(&pool) {
            // Mostly the family it has; sometimes the other (hole 5: a family change and back).
            Some(s) => s.v6 != self.rng.chance(15),
            None => self.rng.chance(20),
        };
        let (offset, size) = (self.rng.below(3) as u8, 1 + self.rng.below(4) as u8);
        // Now and then an IP pool of two subnets (docs/compatibility.md D19), which an edit may add or take away.
        let second = if pool != PoolId::Prefix && self.rng.chance(30) { 1 + self.rng.below(2) as u8 } else { 0 };
        // Each allocation strategy (docs/compatibility.md D20), which an edit may change (the webhook refuses a change
        // to or from Random; the allocator takes any).
        let strategies =
            [AllocationStrategy::Sequential, AllocationStrategy::Random, AllocationStrategy::LeastRecentlyReleased];
        let strategy =
            if pool == PoolId::Prefix { AllocationStrategy::Sequential } else { strategies[self.strategies.below(3)] };
        // A quota of 0, 1 or 2 addresses per Cluster on a quarter of the IP pools (docs/compatibility.md D21), which an
        // edit may raise, lower below what a Cluster holds, or take away.
        let quota = (pool != PoolId::Prefix && self.quotas.chance(25)).then(|| self.quotas.below(3) as u8);
        Shape { v6, offset, size, second, strategy, quota }
    }

    fn create_pool(&mut self, pool: PoolId) {
        let shape = self.random_shape(pool);
        self.choose_pin(pool, shape);
        let mut object = pool_object(pool, shape);
        object["spec"] = self.spec_with_pin(pool, shape);
        if self.options.sharded && pool == SHARD_POOL {
            object["metadata"]["labels"] = json!({ WATCH_FILTER_LABEL: SHARD });
        }
        if self.server_create(pool.server_kind(), object).is_ok() {
            self.shapes.insert(pool, shape);
        }
    }

    // ---- The server, as users and clusterctl reach it (at once, not through a term) ----

    pub(super) fn server_create(&mut self, kind: Kind, object: Value) -> Result<Value, ApiError> {
        let created = lock(&self.hub).server.create(kind, object);
        if let Ok(o) = &created {
            let line = describe(kind, o);
            self.note(|| format!("user creates {line}"));
        }
        created
    }

    pub(super) fn server_merge(&mut self, kind: Kind, key: &ObjectKey, patch: Value) -> Result<Value, ApiError> {
        let patched = lock(&self.hub).server.patch_merge(kind, key, &patch, false);
        self.foreign_changed_by_user(kind, key);
        let shown = patch.to_string();
        self.note(|| {
            format!("user patches {} {key}: {shown} -> {}", kind.name(), if patched.is_ok() { "ok" } else { "refused" })
        });
        patched
    }

    pub(super) fn server_delete(&mut self, kind: Kind, key: &ObjectKey) -> Result<(), ApiError> {
        let deleted = lock(&self.hub).server.delete(kind, key, None, None);
        self.foreign_changed_by_user(kind, key);
        self.note(|| format!("user deletes {} {key}: {deleted:?}", kind.name()).chars().take(200).collect());
        deleted.map(|_| ())
    }

    pub(super) fn user_create(&mut self, kind: Kind, object: Value) -> Result<Value, ApiError> {
        self.server_create(kind, object)
    }

    pub(super) fn user_merge(&mut self, kind: Kind, key: &ObjectKey, patch: Value) -> Result<Value, ApiError> {
        self.server_merge(kind, key, patch)
    }

    pub(super) fn user_delete(&mut self, kind: Kind, key: &ObjectKey) {
        let _ = self.server_delete(kind, key);
    }

    /// Runs `f` with the second manager's term as the live one (every step of a manager reads `self.term`); `None`
    /// when the seed runs one manager.
    fn as_shard<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> Option<R> {
        let mut shard = self.shard.take()?;
        std::mem::swap(&mut self.term, &mut shard.term);
        self.serving = Some(SHARD);
        let result = f(self);
        self.serving = None;
        std::mem::swap(&mut self.term, &mut shard.term);
        self.shard = Some(shard);
        Some(result)
    }

    /// Runs `f` for each manager, the first one and the second one if it runs.
    fn each_manager(&mut self, mut f: impl FnMut(&mut Self)) {
        f(self);
        self.as_shard(f);
    }

    /// The live term's index, if a term lives.
    pub(super) fn live_index(&self) -> Option<&crate::index::Index> {
        self.term.as_ref().map(|t| &*t.ctx.index)
    }

    /// The live index of the manager serving `pool`: the second manager's for its shard's pool (seed 650546392: the
    /// first manager's index knows nothing of what the second one holds there).
    pub(super) fn serving_index(&self, pool: PoolId) -> Option<&crate::index::Index> {
        let shards_pool = self.options.sharded && pool == SHARD_POOL;
        match self.serving {
            // Outside `as_shard` the live term is the first manager's, and the second one's is put aside.
            None if shards_pool => self.shard.as_ref()?.term.as_ref().map(|t| &*t.ctx.index),
            None => self.live_index(),
            // Inside it, the other way round; the first manager's term is out of reach.
            Some(_) => {
                if shards_pool {
                    self.live_index()
                } else {
                    None
                }
            }
        }
    }

    pub(super) fn object(&self, kind: Kind, key: &ObjectKey) -> Option<Value> {
        lock(&self.hub).server.get(kind, key).cloned()
    }

    pub(super) fn objects(&self, kind: Kind) -> Vec<Value> {
        lock(&self.hub).server.list(kind)
    }

    // ---- Choosing the next step ----

    /// One step of the first manager, the world, or now and then of the second manager.
    fn act(&mut self) {
        if self.shard.as_mut().is_some_and(|s| s.rng.chance(35)) {
            self.as_shard(|w| {
                w.act_here();
                w.poll_tasks();
            });
            return;
        }
        self.act_here();
    }

    /// One step of the live term's manager or of the world.
    fn act_here(&mut self) {
        self.retire_ended_term();
        let pending = lock(&self.hub).pending.len();
        let orphaned = lock(&self.hub).pending.iter().filter(|p| p.slot.is_none()).count();
        let live = self.term.is_some();
        let synced = self.term.as_ref().is_some_and(|t| t.synced);
        let now = self.now();
        let (ready_claims, pools, gone, moved, delayed) = match &mut self.term {
            Some(t) => {
                t.pull();
                (
                    t.work.claims.waiting() > 0 && t.running_claims() < t.concurrency,
                    t.work.pools.waiting() > 0 && t.running_pools() < controllers::POOL_WORKERS,
                    !t.gone.is_empty() && !t.orphan_task_busy(),
                    !t.moved_away.is_empty() && !t.moved_away_busy(),
                    t.due_timers(now),
                )
            }
            None => (false, false, false, false, false),
        };
        let deliverable: Vec<usize> =
            (0..self.term.as_ref().map_or(0, |t| t.watches.len())).filter(|&w| self.has_events(w)).collect();
        let anytime_late = self.options.late == Late::Anytime && orphaned > 0;
        let allowed = |step: Step| match step {
            Step::Deliver => !deliverable.is_empty(),
            Step::Answer => pending > orphaned,
            Step::ClaimWorker => synced && ready_claims,
            Step::PoolWorker => synced && pools,
            Step::OrphanCheck => gone,
            Step::Sweep | Step::StatusCoalescer => synced,
            Step::MovedAwayWriter => moved,
            Step::DelayedRequeue => synced && delayed,
            Step::User | Step::ApiServerRestart => true,
            Step::WatchExpiry | Step::TermEnd => live,
            Step::TermStart => !live,
            Step::LateWrite => anytime_late,
        };
        match self.swarm.steps.pick(&mut self.rng, allowed) {
            Some(Step::Deliver) => {
                let speeds: Vec<u32> = deliverable.iter().map(|&w| self.swarm.watch_speed[w]).collect();
                let w = deliverable[self.rng.weighted(&speeds).unwrap_or(0)];
                self.deliver(w);
            }
            Some(Step::Answer) => {
                let candidates: Vec<usize> = lock(&self.hub)
                    .pending
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| p.slot.is_some())
                    .map(|(i, _)| i)
                    .collect();
                let i = candidates[self.rng.below(candidates.len())];
                self.resolve(i, false);
            }
            Some(Step::ClaimWorker) => self.start_ready_claim(),
            Some(Step::PoolWorker) => {
                if let Some(key) = self.term.as_ref().and_then(|t| t.work.pools.try_next()) {
                    self.launch(Job::Pool(key));
                }
            }
            Some(Step::OrphanCheck) => {
                if let Some(key) = self.take_from(|t| &mut t.gone) {
                    self.start(Job::Gone(key));
                }
            }
            Some(Step::Sweep) if !self.term.as_ref().is_some_and(Term::orphan_task_busy) => self.start(Job::Sweep),
            Some(Step::MovedAwayWriter) => {
                if let Some(key) = self.take_from(|t| &mut t.moved_away) {
                    self.start(Job::MovedAway(key));
                }
            }
            Some(Step::DelayedRequeue) => self.fire_delayed(),
            Some(Step::StatusCoalescer) => self.coalesce_status(),
            // The world acts once per step, as itself: not as the second manager (whose index the actors would read).
            Some(Step::User) if self.serving.is_none() => self.user(),
            Some(Step::WatchExpiry) => self.expire_watch(),
            Some(Step::TermEnd) => {
                // Another replica takes the lease at once, or this one can no longer renew it.
                if self.rng.chance(50) { self.end_term() } else { self.stop_renewing() }
            }
            Some(Step::TermStart) => self.start_term(),
            Some(Step::ApiServerRestart) => self.restart_api_server(),
            Some(Step::LateWrite) => {
                let candidates: Vec<usize> = lock(&self.hub)
                    .pending
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| p.slot.is_none())
                    .map(|(i, _)| i)
                    .collect();
                let i = candidates[self.rng.below(candidates.len())];
                let land = self.rng.chance(70);
                self.resolve(i, land);
            }
            _ => {}
        }
    }

    /// Takes a random element of one of the term's sets.
    fn take_from<T: Ord + Clone>(&mut self, set: impl Fn(&mut Term) -> &mut BTreeSet<T>) -> Option<T> {
        let term = self.term.as_mut()?;
        let set = set(term);
        let n = set.len();
        if n == 0 {
            return None;
        }
        let chosen = set.iter().nth(self.rng.below(n))?.clone();
        set.remove(&chosen);
        Some(chosen)
    }

    /// A claim worker takes the next key of its queue; now and then one further back (as if the worker that took
    /// the first were slow to start it), so that a claim queued later also decides first.
    fn start_ready_claim(&mut self) {
        let Some(term) = self.term.as_ref() else { return };
        let waiting = term.work.claims.waiting_keys();
        if waiting.len() > 1 && self.rng.chance(30) {
            let key = waiting[self.rng.below(waiting.len())].clone();
            self.start(Job::Claim(key));
        } else if let Some(key) = term.work.claims.try_next() {
            self.launch(Job::Claim(key));
        }
    }

    /// The delayed requeues that are due are queued (the queue's timer task).
    fn fire_delayed(&mut self) {
        let now = self.now();
        if let Some(term) = self.term.as_ref() {
            term.work.claims.fire_due(now, |_| true);
            term.work.pools.fire_due(now, |_| true);
        }
    }

    /// The work queues' instant of now on the simulated clock.
    /// The simulated clock, in milliseconds since the run began.
    pub(super) fn now_ms(&self) -> i64 {
        self.now_ms.load(Ordering::Relaxed)
    }

    fn now(&self) -> Instant {
        self.epoch + Duration::from_millis(u64::try_from(self.now_ms.load(Ordering::Relaxed)).unwrap_or(0))
    }

    /// The simulated clock moves on by `ms`.
    /// A term that is renewed stays valid as time passes.
    fn advance(&mut self, ms: i64) {
        // Renewed all along the stretch (every retry period), so valid for the renew deadline past its end.
        let terms = [self.term.as_ref(), self.shard.as_ref().and_then(|s| s.term.as_ref())];
        for term in terms.into_iter().flatten().filter(|t| t.renewing) {
            term.lease.renew(RENEW_DEADLINE + Duration::from_millis(u64::try_from(ms).unwrap_or(0)));
        }
        let now = self.now_ms.fetch_add(ms, Ordering::Relaxed) + ms;
        lock(&self.hub).server.clock = now / 1000;
    }

    fn coalesce_status(&mut self) {
        let Some(term) = self.term.as_ref() else { return };
        for key in term.ctx.index.take_changed_pools(1) {
            term.work.pool_changed(key);
        }
    }
}

fn pool_object(pool: PoolId, shape: Shape) -> Value {
    let mut metadata = json!({"name": pool.name()});
    if !pool.is_global() {
        metadata["namespace"] = json!(pool.namespace());
    }
    json!({
        "apiVersion": format!("{GROUP}/v1alpha2"),
        "kind": pool.kind().kind(),
        "metadata": metadata,
        "spec": shape.spec(pool),
    })
}

fn cluster_object(namespace: &str, paused: bool) -> Value {
    json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Cluster",
        "metadata": {"name": CLUSTER, "namespace": namespace},
        "spec": {"paused": paused},
    })
}

fn cluster_of(claim: &Value) -> Option<&str> {
    claim
        .pointer("/spec/clusterName")
        .and_then(Value::as_str)
        .or_else(|| claim.pointer("/metadata/labels").and_then(|l| l.get(CLUSTER_NAME_LABEL)).and_then(Value::as_str))
}

fn belongs_to_cluster(claim: &Value) -> bool {
    cluster_of(claim) == Some(CLUSTER)
}

/// The claim's `cluster.x-k8s.io/watch-filter` label.
fn watch_filter_of(claim: &Value) -> Option<&str> {
    claim.pointer("/metadata/labels").and_then(|l| l.get(WATCH_FILTER_LABEL)).and_then(Value::as_str)
}

/// A claim on the second manager's pool without that manager's label is served by no manager: it is bound to nothing,
/// and says why (docs/operations.md, sharded managers).
fn check_served_by_its_shard(claim: &Value) -> Result<(), String> {
    if watch_filter_of(claim) == Some(SHARD) {
        return Ok(());
    }
    let key = key_of(claim);
    // A finalizer it got while its pool was not known yet stays: its deletion is finished by whoever sees it.
    let bound = claim.pointer("/status/addressRef/name").and_then(Value::as_str).is_some_and(|n| !n.is_empty());
    let ready = claim
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready");
    let said = ready.is_some_and(|r| {
        r["status"] == "False"
            && r["reason"] == "PoolNotReady"
            && r["message"].as_str().is_some_and(|m| m.contains(SHARD))
    });
    if bound || !said {
        return Err(format!(
            "claim {key}, of no manager's shard on pool {} (shard {SHARD}), is bound {bound}, and says {}",
            SHARD_POOL.pool_key(),
            ready.map_or_else(|| "nothing".to_owned(), ToString::to_string)
        ));
    }
    Ok(())
}

/// The address a claim was told of: its Ready condition's `allocated <address>`.
pub(super) fn told_address(claim: &Value) -> Option<std::net::IpAddr> {
    claim
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready")
        .and_then(|c| c["message"].as_str())
        .and_then(crate::capi::allocated_address)
        .and_then(|a| a.parse().ok())
}

pub(super) fn claim_pool(claim: &Value) -> Option<PoolId> {
    let kind = claim.pointer("/spec/poolRef/kind")?.as_str()?;
    let name = claim.pointer("/spec/poolRef/name")?.as_str()?;
    PoolId::of_reference(kind, name, &key_of(claim).namespace)
}

pub(super) fn pool_of_address(address: &Value) -> Option<PoolId> {
    let kind = address.pointer("/spec/poolRef/kind")?.as_str()?;
    let name = address.pointer("/spec/poolRef/name")?.as_str()?;
    PoolId::of_reference(kind, name, &key_of(address).namespace)
}

/// Whether an IPAddress carries our mark of one a move left behind.
fn is_marked_moved_away(address: &Value) -> bool {
    address.pointer("/metadata/annotations").and_then(|a| a.get(MOVED_AWAY_ANNOTATION)).and_then(Value::as_str)
        == Some(crate::api::MOVED_AWAY_MARK)
}

/// The IPAddress a moved-away entry names, if it names one (`<address>@<namespace>/<name>`).
fn entry_name(entry: &str) -> Option<ObjectKey> {
    let (namespace, name) = entry.split_once('@')?.1.split_once('/')?;
    Some(ObjectKey::new(namespace, name))
}

fn entries_of(pool: &Value) -> Vec<String> {
    pool.pointer("/metadata/annotations")
        .and_then(|a| a.get(MOVED_AWAY_ANNOTATION))
        .and_then(Value::as_str)
        .map(|v| v.split(',').map(str::trim).filter(|e| !e.is_empty()).map(str::to_owned).collect())
        .unwrap_or_default()
}

#[test]
fn a_term_watches_what_the_manager_watches_but_a_pool_kind_the_simulation_has_no_pool_of() {
    let left_out: Vec<controllers::Watched> = controllers::WATCHED
        .into_iter()
        .filter(|w| match *w {
            controllers::Watched::Pools(kind) => !watched().contains(&Kind::Pool(kind)),
            _ => false,
        })
        .collect();
    assert_eq!(left_out, [controllers::Watched::Pools(PoolKind::GlobalInClusterPrefixPool)]);
    assert_eq!(watched().len(), controllers::WATCHED.len() - 1, "every other watch of the manager, once");
}
