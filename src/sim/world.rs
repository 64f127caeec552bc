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

use super::client::{Hub, Op, SimApi, lock};
use super::model::{CLAIM_NAMES, CLUSTER, Held, NAMESPACES, POOLS, PoolId, Shape};
use super::rng::Rng;
use super::server::{Change, Kind, key_of};
use super::swarm::{Late, Options, SHARD, SHARD_POOL, Step, Swarm, User};
use crate::api::{
    CLUSTER_NAME_LABEL, DELETE_FOR_MOVE_ANNOTATION, GROUP, MOVED_AWAY_ANNOTATION, PROTECT_ADDRESS_FINALIZER, PoolKind,
    REQUESTED_ADDRESS_ANNOTATION, WATCH_FILTER_LABEL, v1alpha2,
};
use crate::apiserver::ApiError;
use crate::capi::{CapiApis, CapiVersion, ClaimResource, Cluster, IpAddress};
use crate::controllers::{self, Context, ControllerOptions};
use crate::index::relist::{Feed, Pools, Relist};
use crate::index::{Index, ObjectKey, PoolKey, Sink};
use crate::leader::{SimulatedTerm, TermClock};
use crate::metrics::Metrics;
use crate::runtime::queue::QueueClock;
use crate::runtime::retry::Next;
use crate::runtime::retry::{Outcome, RECHECK};
use crate::runtime::{Work, WorkStreams};

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

const WATCHED: [Kind; 6] = [
    Kind::Claim,
    Kind::Address,
    Kind::Pool(PoolKind::InClusterIPPool),
    Kind::Pool(PoolKind::GlobalInClusterIPPool),
    Kind::Pool(PoolKind::InClusterPrefixPool),
    Kind::Cluster,
];

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
        let mut swarm = Swarm::new(&mut rng, WATCHED.len());
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
        Shape { v6, offset: self.rng.below(3) as u8, size: 1 + self.rng.below(4) as u8 }
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

    // ---- Terms ----

    fn start_term(&mut self) {
        if self.options.late == Late::BeforeNextTerm {
            self.land_orphaned_writes();
        }
        self.next_term += 1;
        self.stats.terms += 1;
        let id = self.next_term;
        let replica = self.rng.below(self.options.replicas) + if self.serving.is_some() { 10 } else { 0 };
        let (fence, lease) = SimulatedTerm::begin(TermClock::Simulated(self.now_ms.clone()), RENEW_DEADLINE);
        let api = Arc::new(SimApi { hub: self.hub.clone(), term: id, fence, version: CapiVersion::V1Beta2 });
        let metrics = Arc::new(Metrics::new());
        let (work, streams) = Work::new(&metrics);
        let (epoch, ms) = (self.epoch, self.now_ms.clone());
        let queue_clock: QueueClock =
            Arc::new(move || epoch + Duration::from_millis(u64::try_from(ms.load(Ordering::Relaxed)).unwrap_or(0)));
        let work = Arc::new(work.with_clock(queue_clock));
        let (synced_tx, synced) = watch::channel(false);
        let options = ControllerOptions {
            namespace: None,
            watch_filter: self.serving.map(str::to_owned),
            capi: CapiApis { ipam: CapiVersion::V1Beta2, cluster: Some(CapiVersion::V1Beta2) },
            concurrency: 4,
            orphan_release_delay: Duration::from_secs(1),
            restore_wait: Duration::from_secs(120),
            moved_away_max_bytes: self.swarm.moved_away_max_bytes,
        };
        let clock = controllers::Clock::Simulated(self.now_ms.clone());
        let ctx = Arc::new(Context::new(api, options, metrics, work.clone(), synced).with_clock(clock));
        let watches = WATCHED
            .iter()
            .map(|&kind| Watch { kind, state: WatchState::Start, cursor: 0, feeder: Feeder::new(kind), listed: false })
            .collect();
        let concurrency = 1 + self.rng.below(4);
        self.note(|| format!("replica {replica} starts term {id} (concurrency {concurrency})"));
        self.term = Some(Term {
            id,
            replica,
            ctx,
            work,
            streams,
            gone: BTreeSet::new(),
            moved_away: BTreeSet::new(),
            lease,
            renewing: true,
            watches,
            synced: false,
            synced_tx,
            tasks: Vec::new(),
            asked_claims: BTreeMap::new(),
            asked_pools: BTreeMap::new(),
            concurrency,
        });
    }

    /// The term is not renewed from now on: it runs on, its writes passing the fence, until the fence closes on the
    /// simulated clock (`World::retire_ended_term`).
    fn stop_renewing(&mut self) {
        let Some(term) = self.term.as_mut() else { return };
        if term.renewing {
            term.renewing = false;
            let (id, replica) = (term.id, term.replica);
            self.note(|| format!("term {id} of replica {replica} is no longer renewed"));
        }
    }

    /// A term whose fence closed on the clock ends.
    fn retire_ended_term(&mut self) {
        if self.term.as_ref().is_some_and(|t| !t.lease.holds()) {
            self.end_term();
        }
    }

    /// The term ends (another replica took the lease, or its fence closed): its writes in flight are dropped by the
    /// fence but may still land; everything it knew goes.
    fn end_term(&mut self) {
        let Some(term) = self.term.take() else { return };
        term.lease.lose();
        let mut hub = lock(&self.hub);
        hub.pending.retain_mut(|p| {
            if p.term != term.id {
                return true;
            }
            p.slot = None;
            p.op.is_write()
        });
        drop(hub);
        let (id, replica) = (term.id, term.replica);
        drop(term);
        self.note(|| format!("term {id} of replica {replica} ends; its writes in flight may still land"));
    }

    /// The writes of ended terms land or are lost.
    fn land_orphaned_writes(&mut self) {
        loop {
            let index = lock(&self.hub).pending.iter().position(|p| p.slot.is_none());
            let Some(index) = index else { return };
            let land = self.rng.chance(60);
            self.resolve(index, land);
        }
    }

    // ---- Requests ----

    /// Decides the fate of the pending request at `index`: applied and answered (`ok`), or one of the failures.
    fn resolve(&mut self, index: usize, ok: bool) {
        let roll = self.rng.next_u64() % 100;
        let (orphaned, create) = {
            let hub = lock(&self.hub);
            (hub.pending[index].slot.is_none(), matches!(hub.pending[index].op, Op::Create(..)))
        };
        let failures = self.swarm.failures;
        let fate = if orphaned {
            if ok { Fate::Answered } else { Fate::NotApplied }
        } else if ok || roll >= failures {
            Fate::Answered
        } else if roll < failures * 35 / 100 {
            Fate::AppliedAnswerLost
        } else if roll < failures * 65 / 100 {
            Fate::NotApplied
        } else if roll < failures * 90 / 100 || !create {
            Fate::ServerError
        } else {
            Fate::RefusedByAdmission
        };
        self.resolve_as(index, fate);
    }

    /// Gives the pending request at `index` the fate `fate`.
    pub(super) fn resolve_as(&mut self, index: usize, fate: Fate) {
        let mut hub = lock(&self.hub);
        let pending = hub.pending.remove(index);
        let (applied, answer) = match fate {
            Fate::Answered => (true, None),
            Fate::AppliedAnswerLost => {
                (true, Some(ApiError::Unreachable("timeout after the write was applied".into())))
            }
            Fate::NotApplied => (false, Some(ApiError::Unreachable("connection reset".into()))),
            Fate::ServerError => {
                (false, Some(ApiError::Failed { code: 500, message: "etcdserver: request timed out".into() }))
            }
            Fate::RefusedByAdmission => {
                let message =
                    "admission webhook \"validation.ipaddress.ipam.cluster.x-k8s.io\" denied the request".into();
                (false, Some(ApiError::Refused { code: 403, message }))
            }
        };
        let orphaned = pending.slot.is_none();
        if orphaned && applied {
            self.stats.late_writes += 1;
        }
        let result = if applied { Some(hub.apply(&pending.op)) } else { None };
        if orphaned
            && let Op::Create(Kind::Address, _) = &pending.op
            && let Some(Ok(super::client::Answer::Object(Some(created)))) = &result
            && let Some(uid) = created["metadata"]["uid"].as_str()
        {
            self.late_created.insert(uid.to_owned());
        }
        drop(hub);
        if self.options.trace {
            let outcome = match &result {
                Some(Ok(super::client::Answer::Object(Some(o)))) => {
                    let kind = match &pending.op {
                        Op::Get(k, _) | Op::Create(k, _) => *k,
                        Op::PatchJson { kind, .. } | Op::PatchMerge { kind, .. } | Op::Delete { kind, .. } => *kind,
                        Op::Event => Kind::Claim,
                    };
                    format!("-> {}", describe(kind, o))
                }
                Some(Ok(a)) => format!("-> {}", format!("{a:?}").chars().take(120).collect::<String>()),
                Some(Err(e)) => format!("-> {e}"),
                None => String::new(),
            };
            let fate = match (orphaned, applied) {
                (true, true) => "lands late",
                (true, false) => "is lost",
                _ => fate.describe(),
            };
            let line = format!("term {} {}: {fate} {outcome}", pending.term, pending.op);
            self.note(|| line);
        }
        if let Some(slot) = pending.slot {
            let reply = match (answer, result) {
                (Some(error), _) => Err(error),
                (None, Some(result)) => result,
                (None, None) => Err(ApiError::Unreachable("no answer".into())),
            };
            *slot.lock() = Some(reply);
        }
    }

    // ---- Watches ----

    /// Delivers the next thing watch `w` of the live term has; false when it has nothing.
    fn deliver(&mut self, w: usize) -> bool {
        let Some(term) = self.term.as_mut() else { return false };
        let index = term.ctx.index.clone();
        let filter = term.ctx.options.watch_filter.clone();
        let watch = &mut term.watches[w];
        let kind = watch.kind;
        // The claim watch of a manager with `--watch-filter` selects by the label (the selector is the API server's).
        let selected = |object: &Value| {
            kind != Kind::Claim
                || filter.as_deref().is_none_or(|f| {
                    object.pointer("/metadata/labels").and_then(|l| l.get(WATCH_FILTER_LABEL)).and_then(Value::as_str)
                        == Some(f)
                })
        };
        let mut line = None;
        let trace = self.options.trace;
        match &mut watch.state {
            WatchState::Start => {
                watch.feeder.feed(&index, Event::Init);
                watch.state = WatchState::Requested;
                if trace {
                    line = Some(format!("{} watch: Init", kind.name()));
                }
            }
            WatchState::Requested => {
                let hub = lock(&self.hub);
                let items: Vec<Value> = hub.server.list(kind).into_iter().filter(|o| selected(o)).collect();
                watch.cursor = hub.server.log(kind).len();
                drop(hub);
                if trace {
                    line = Some(format!("{} watch: list served ({} objects)", kind.name(), items.len()));
                }
                watch.state = WatchState::Listing(items.into());
            }
            WatchState::Listing(items) => match items.pop_front() {
                Some(item) => {
                    if trace {
                        line = Some(format!("{} watch: InitApply {}", kind.name(), describe(kind, &item)));
                    }
                    watch.feeder.feed(&index, Event::InitApply(item));
                }
                None => {
                    watch.feeder.feed(&index, Event::InitDone);
                    watch.listed = true;
                    watch.state = WatchState::Watching;
                    if trace {
                        line = Some(format!("{} watch: InitDone", kind.name()));
                    }
                }
            },
            WatchState::Watching => {
                let hub = lock(&self.hub);
                let Some(logged) = hub.server.log(kind).get(watch.cursor).cloned() else { return false };
                drop(hub);
                watch.cursor += 1;
                if !selected(&logged.object) {
                    return true;
                }
                if trace {
                    line =
                        Some(format!("{} watch: {:?} {}", kind.name(), logged.change, describe(kind, &logged.object)));
                }
                let event = match logged.change {
                    Change::Added | Change::Modified => Event::Apply(logged.object),
                    Change::Deleted => Event::Delete(logged.object),
                };
                watch.feeder.feed(&index, event);
            }
        }
        let replica = term.replica;
        if !term.synced && term.watches.iter().all(|w| w.listed) {
            term.ctx.index.hold_bound_addresses();
            term.synced = true;
            term.synced_tx.send_replace(true);
            if trace {
                let more = format!("replica {replica}: every watch listed; allocating");
                line = Some(line.map_or(more.clone(), |l| format!("{l}; {more}")));
            }
        }
        if let Some(line) = line {
            self.note(|| format!("replica {replica} {line}"));
        }
        true
    }

    fn has_events(&self, w: usize) -> bool {
        let Some(term) = &self.term else { return false };
        let watch = &term.watches[w];
        match watch.state {
            WatchState::Watching => lock(&self.hub).server.log(watch.kind).len() > watch.cursor,
            _ => true,
        }
    }

    // ---- Workers ----

    /// Starts `job` as a worker that took its key from the queue would (a key that runs already is left to its run).
    fn start(&mut self, job: Job) {
        let Some(term) = self.term.as_ref() else { return };
        let taken = match &job {
            Job::Claim(key) => term.work.claims.take(key),
            Job::Pool(key) => term.work.pools.take(key),
            _ => true,
        };
        if taken {
            self.launch(job);
        }
    }

    /// Starts a worker's run of `job`, whose key it has from its queue.
    fn launch(&mut self, job: Job) {
        let Some(term) = self.term.as_mut() else { return };
        let ctx = term.ctx.clone();
        let done = Outcome::Done(Next::AwaitChange);
        let run: Pin<Box<dyn Future<Output = Outcome>>> = match job.clone() {
            Job::Claim(key) => Box::pin(async move { controllers::work_claim(&ctx, &key).await }),
            Job::Pool(key) => Box::pin(async move { controllers::work_pool(&ctx, &key).await }),
            Job::Gone(key) => Box::pin(async move {
                controllers::orphans::release_if_orphaned(&ctx, &key).await;
                done
            }),
            Job::Sweep => Box::pin(async move {
                let delay = ctx.options.orphan_release_delay;
                controllers::orphans::sweep(&ctx, delay).await;
                done
            }),
            Job::MovedAway(key) => {
                let work = term.work.clone();
                Box::pin(async move {
                    // A write the annotation had no room for is not retried here: it waits for room.
                    if controllers::moved_away::write(&ctx, &key).await.is_err() {
                        // The writer retries a failed write.
                        work.moved_away_changed(key);
                    }
                    done
                })
            }
        };
        let replica = term.replica;
        term.tasks.push(Task { job: job.clone(), run });
        self.note(|| format!("replica {replica} starts {job}"));
    }

    /// Polls every task of the live term until none makes progress without an answer.
    fn poll_tasks(&mut self) {
        let sent_before = lock(&self.hub).pending.len();
        self.poll_tasks_once();
        let term_id = self.term.as_ref().map(|t| t.id);
        let hub = lock(&self.hub);
        let creates: Vec<Value> = hub.pending[sent_before.min(hub.pending.len())..]
            .iter()
            .filter(|p| Some(p.term) == term_id)
            .filter_map(|p| match &p.op {
                Op::Create(Kind::Address, object) => Some(object.clone()),
                _ => None,
            })
            .collect();
        drop(hub);
        for object in creates {
            if let Err(what) = self.check_create(&object)
                && self.found.is_none()
            {
                self.found = Some(what);
            }
        }
    }

    /// Polls every task once; a worker's run that ended is finished in its queue (the error policy's retry), with no
    /// await in between, as the manager's workers do; a return of the API server unparks what waited for it.
    fn poll_tasks_once(&mut self) {
        let Some(term) = self.term.as_mut() else { return };
        let _runtime = self.runtime.enter();
        let mut done = Vec::new();
        let mut i = 0;
        while i < term.tasks.len() {
            if let Poll::Ready(outcome) = poll_once(term.tasks[i].run.as_mut()) {
                let task = term.tasks.remove(i);
                let delay = match &task.job {
                    Job::Claim(k) => term.work.claims.finish(k.clone(), outcome).inspect(|d| {
                        term.asked_claims.insert(k.clone(), asked(outcome, *d));
                    }),
                    Job::Pool(k) => term.work.pools.finish(k.clone(), outcome).inspect(|d| {
                        term.asked_pools.insert(k.clone(), asked(outcome, *d));
                    }),
                    _ => None,
                };
                done.push((task.job, outcome, delay));
            } else {
                i += 1;
            }
        }
        if poll_once(std::pin::pin!(term.ctx.reachability.returned())).is_ready() {
            term.work.claims.unpark_all();
            term.work.pools.unpark_all();
        }
        let replica = term.replica;
        for (job, outcome, delay) in done {
            if self.options.trace {
                self.trace.push(format!(
                    "{:>4}: replica {replica} finished {job} ({outcome:?}, again in {delay:?})",
                    self.step
                ));
            }
        }
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

    fn expire_watch(&mut self) {
        let Some(term) = self.term.as_mut() else { return };
        let w = self.rng.below(term.watches.len());
        let watch = &mut term.watches[w];
        if matches!(watch.state, WatchState::Watching) {
            watch.state = WatchState::Start;
            self.stats.relists += 1;
            let kind = watch.kind.name();
            self.note(|| format!("the {kind} watch expires (410 Gone): it lists again"));
        }
    }

    /// Every watch breaks and lists again; requests in flight are applied or not, and get no answer.
    fn restart_api_server(&mut self) {
        self.note(|| "the API server restarts".to_owned());
        let indices: Vec<usize> = {
            let hub = lock(&self.hub);
            (0..hub.pending.len()).filter(|&i| hub.pending[i].slot.is_some()).collect()
        };
        for i in indices.into_iter().rev() {
            let applied = self.rng.chance(50);
            let mut hub = lock(&self.hub);
            let pending = hub.pending.remove(i);
            if applied {
                let _ = hub.apply(&pending.op);
            }
            drop(hub);
            let op = pending.op.to_string();
            self.note(|| {
                format!(
                    "term {} {op}: {} before the restart; no answer",
                    pending.term,
                    if applied { "applied" } else { "not applied" }
                )
            });
            if let Some(slot) = pending.slot {
                *slot.lock() = Some(Err(ApiError::Unreachable("the API server went away".into())));
            }
        }
        let terms = [self.term.as_mut(), self.shard.as_mut().and_then(|s| s.term.as_mut())];
        for term in terms.into_iter().flatten() {
            for watch in &mut term.watches {
                if matches!(watch.state, WatchState::Watching) {
                    watch.state = WatchState::Start;
                }
            }
        }
        self.stats.relists += 1;
    }

    // ---- Users and clusterctl ----

    fn user(&mut self) {
        if self.actors.velero.is_some() && self.actors.rng.chance(50) && self.velero_continues() {
            return;
        }
        let n = self.rng.below(2);
        if let Move::Leaving(claims) = &self.moves[n]
            && self.rng.chance(50)
        {
            let claims = claims.clone();
            return self.continue_move_away(n, claims);
        }
        match self.swarm.users.pick(&mut self.rng, |_| true) {
            Some(User::CreateClaim) => self.create_claim(),
            Some(User::DeleteClaim) => self.delete_claim(),
            Some(User::PauseOrUnpauseCluster) => self.toggle_cluster_pause(n),
            Some(User::EditPool) => {
                let pool = *self.rng.pick(&POOLS).unwrap_or(&PoolId::Global);
                self.edit_pool(pool);
            }
            Some(User::DeleteOrCreatePool) => {
                let pool = *self.rng.pick(&POOLS).unwrap_or(&PoolId::Global);
                if self.object(pool.server_kind(), &pool.key()).is_some() {
                    let deleted = if self.actors.rng.chance(25) {
                        self.delete_in_foreground(pool.server_kind(), &pool.key())
                    } else {
                        self.server_delete(pool.server_kind(), &pool.key()).is_ok()
                    };
                    if deleted && pool == PoolId::Global {
                        // Deleting the pool is how an operator stops allocating from it here: its reservations go
                        // with it (docs/operations.md), and a new pool of the name knows nothing of them.
                        for e in self.elsewhere.values_mut() {
                            e.protected = false;
                        }
                    }
                } else {
                    self.create_pool(pool);
                }
            }
            Some(User::MoveAway) => self.start_move_away(n),
            Some(User::MoveBack) => self.move_back(n),
            Some(User::OperatorRelease) => self.release_moved_away(n),
            Some(User::CreateOrDeleteCluster)
                if self.options.velero && self.moves[n] == Move::Home && self.actors.rng.chance(15) =>
            {
                self.velero_begins(n);
            }
            Some(User::CreateOrDeleteCluster) => self.create_or_delete_cluster(n),
            Some(User::GarbageCollector) => self.garbage_collect(),
            Some(User::ClaimDeletedFinalizersStripped) => {
                let keys = lock(&self.hub).server.keys(Kind::Claim);
                if let Some(key) = self.rng.pick(&keys).cloned()
                    && !self.in_a_move(&key)
                {
                    self.force_delete_claim(&key);
                }
            }
            Some(User::AnotherProvider) => self.foreign_actor(),
            Some(User::BoundIpAddressDeletedFinalizerStripped) => self.strip_bound_ipaddress(),
            _ => {}
        }
    }

    /// Kubernetes' garbage collector, on one IPAddress whose owner is gone: with another owner still there (its
    /// pool), the dangling owner reference comes off (a dependent with a solid owner is kept); with none, it is
    /// deleted.
    pub(super) fn garbage_collect(&mut self) {
        if self.actors.rng.chance(50) && self.collect_in_foreground() {
            return;
        }
        let mut owners: BTreeSet<String> = BTreeSet::new();
        let pools = [PoolId::Ip(0), PoolId::Global, PoolId::Prefix].map(PoolId::server_kind);
        for kind in std::iter::once(Kind::Claim).chain(pools) {
            for object in self.objects(kind) {
                owners.extend(object["metadata"]["uid"].as_str().map(str::to_owned));
            }
        }
        let exists = |r: &Value| r["uid"].as_str().is_some_and(|uid| owners.contains(uid));
        let dangling: Vec<Value> = self
            .objects(Kind::Address)
            .into_iter()
            .filter(|a| a["metadata"]["ownerReferences"].as_array().is_some_and(|refs| !refs.iter().all(exists)))
            .collect();
        let Some(address) = self.rng.pick(&dangling).cloned() else { return };
        let key = key_of(&address);
        let refs = address["metadata"]["ownerReferences"].as_array().cloned().unwrap_or_default();
        let solid: Vec<Value> = refs.into_iter().filter(exists).collect();
        self.note(|| format!("the garbage collector finds a dangling owner of IPAddress {key}"));
        if solid.is_empty() {
            // Deleted from under its claim as a person's delete would be (seed 330000784: a restored IPAddress whose
            // pool was deleted and made again of the other family).
            if let Some(held) = pool_of_address(&address).and_then(|pool| Held::of_address(pool, &address)) {
                self.actors.stripped.insert((key.clone(), held));
            }
            let _ = self.server_delete(Kind::Address, &key);
        } else {
            let revision = address["metadata"]["resourceVersion"].clone();
            let patch = json!({"metadata": {"ownerReferences": solid, "resourceVersion": revision}});
            let _ = self.server_merge(Kind::Address, &key, patch);
        }
    }

    fn create_claim(&mut self) {
        let n = self.rng.below(2);
        let namespace = NAMESPACES[n];
        let name = *self.rng.pick(&CLAIM_NAMES).unwrap_or(&"m0");
        let key = ObjectKey::new(namespace, name);
        // Names held by a Cluster on the other side stay free for its way back, mostly: a user may create a claim of
        // such a name here (its IPAddress may still be left behind), and the move back then waits for it to go.
        if self.elsewhere.values().any(|e| e.namespace == n && e.claim == name) && self.rng.chance(80) {
            return;
        }
        if self.object(Kind::Claim, &key).is_some() {
            return;
        }
        let clustered = self.moves[n] == Move::Home && self.rng.chance(30);
        let pool =
            if clustered { PoolId::Global } else { *self.rng.pick(&PoolId::usable_from(n)).unwrap_or(&PoolId::Global) };
        let mut object = json!({
            "apiVersion": format!("{GROUP}/v1beta2"),
            "kind": "IPAddressClaim",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"poolRef": {"apiGroup": GROUP, "kind": pool.kind().kind(), "name": pool.name()}},
        });
        if clustered {
            if self.rng.chance(50) {
                object["spec"]["clusterName"] = json!(CLUSTER);
            } else {
                object["metadata"]["labels"] = json!({ CLUSTER_NAME_LABEL: CLUSTER });
            }
        }
        // Most claims on the second manager's pool carry its label; one without is served by no manager, and says so.
        if let Some(shard) = self.shard.as_mut()
            && pool == SHARD_POOL
            && shard.rng.chance(85)
        {
            object["metadata"]["labels"] = json!({ WATCH_FILTER_LABEL: SHARD });
        }
        if pool != PoolId::Prefix && self.rng.chance(8) {
            let shape = self.shapes.get(&pool).copied().unwrap_or(Shape { v6: false, offset: 0, size: 2 });
            if let Some(held) = self.rng.pick(&shape.allocatable(pool)).copied() {
                object["metadata"]["annotations"] = json!({ REQUESTED_ADDRESS_ANNOTATION: held.address().to_string() });
            }
        }
        if self.server_create(Kind::Claim, object).is_ok() {
            self.stats.claims_created += 1;
        }
    }

    fn delete_claim(&mut self) {
        let keys = lock(&self.hub).server.keys(Kind::Claim);
        let Some(key) = self.rng.pick(&keys).cloned() else { return };
        if self.in_a_move(&key) {
            return;
        }
        if !(self.actors.rng.chance(25) && self.delete_in_foreground(Kind::Claim, &key)) {
            let _ = self.server_delete(Kind::Claim, &key);
        }
    }

    fn in_a_move(&self, key: &ObjectKey) -> bool {
        let n = NAMESPACES.iter().position(|ns| **ns == *key.namespace).unwrap_or(0);
        matches!(&self.moves[n], Move::Leaving(claims) if claims.contains(key))
    }

    fn toggle_cluster_pause(&mut self, n: usize) {
        if self.moves[n] != Move::Home {
            return;
        }
        let key = ObjectKey::new(NAMESPACES[n], CLUSTER);
        let Some(cluster) = self.object(Kind::Cluster, &key) else { return };
        let paused = cluster.pointer("/spec/paused").and_then(Value::as_bool).unwrap_or(false);
        let _ = self.server_merge(Kind::Cluster, &key, json!({"spec": {"paused": !paused}}));
    }

    fn create_or_delete_cluster(&mut self, n: usize) {
        if self.moves[n] != Move::Home {
            return;
        }
        let key = ObjectKey::new(NAMESPACES[n], CLUSTER);
        if self.object(Kind::Cluster, &key).is_some() {
            let _ = self.server_delete(Kind::Cluster, &key);
        } else {
            let _ = self.server_create(Kind::Cluster, cluster_object(NAMESPACES[n], false));
        }
    }

    fn edit_pool(&mut self, pool: PoolId) {
        if self.object(pool.server_kind(), &pool.key()).is_none() {
            return;
        }
        let shape = self.random_shape(pool);
        let before = self.actors.pins.get(&pool).cloned();
        self.choose_pin(pool, shape);
        let replaced = before
            .as_ref()
            .map(|(key, _)| key.clone())
            .filter(|key| self.actors.pins.get(&pool).is_some_and(|(now, _)| now != key));
        // Most edits meet the webhook's guard, which reads the live IPAddresses (an allocation in flight slips past it).
        if self.rng.chance(70) && !self.admits(pool, shape, self.actors.pins.get(&pool)) {
            self.note(|| format!("the webhook refuses an edit of pool {}", pool.pool_key()));
            match before {
                Some(pin) => self.actors.pins.insert(pool, pin),
                None => self.actors.pins.remove(&pool),
            };
            return;
        }
        let mut spec = self.spec_with_pin(pool, shape);
        if let Some(old) = replaced {
            // A merge patch merges maps: the old pin's key goes explicitly.
            spec["preAllocations"][old] = Value::Null;
        }
        if self.server_merge(pool.server_kind(), &pool.key(), json!({ "spec": spec })).is_ok() {
            self.shapes.insert(pool, shape);
        } else {
            match before {
                Some(pin) => self.actors.pins.insert(pool, pin),
                None => self.actors.pins.remove(&pool),
            };
        }
    }

    /// clusterctl move, on the source: pause the Cluster, copy (the addresses of the global pool are in use over
    /// there from now on), then delete each claim for the move and the Cluster.
    fn start_move_away(&mut self, n: usize) {
        if self.moves[n] != Move::Home || self.restoring(n) {
            return;
        }
        let cluster = ObjectKey::new(NAMESPACES[n], CLUSTER);
        if self.object(Kind::Cluster, &cluster).is_none() {
            return;
        }
        // An operator does not move a Cluster while its namespace holds an IPAddress a restore brought back over an
        // address handed out meanwhile (docs/operations.md): clusterctl would copy it, with an address in use here,
        // before its claim withdrew it (seed 430231703).
        let addresses = self.objects(Kind::Address);
        let restored_duplicate = addresses.iter().any(|a| {
            *key_of(a).namespace == *NAMESPACES[n]
                && a["metadata"]["uid"].as_str().is_some_and(|u| self.actors.velero_duplicates.contains(u))
        });
        // Nor while the global pool reports an address of the namespace held twice (`DuplicateAddresses`), such as a
        // deposed leader's late create: the copy would take an address in use here over there (seed 520347817).
        let global_held =
            |a: &Value| Held::of_address(PoolId::Global, a).filter(|_| pool_of_address(a) == Some(PoolId::Global));
        let duplicated = addresses.iter().filter(|a| *key_of(a).namespace == *NAMESPACES[n]).any(|a| {
            global_held(a).is_some_and(|held| {
                addresses.iter().any(|b| key_of(b) != key_of(a) && global_held(b).is_some_and(|o| o.overlaps(held)))
            })
        });
        if restored_duplicate || duplicated {
            return;
        }
        self.stats.moves += 1;
        let _ = self.server_merge(Kind::Cluster, &cluster, json!({"spec": {"paused": true}}));
        let mut leaving = Vec::new();
        for claim in self.objects(Kind::Claim) {
            let key = key_of(&claim);
            // A claim being deleted is not moved: it is released here once its Cluster is gone.
            if *key.namespace != *NAMESPACES[n]
                || !belongs_to_cluster(&claim)
                || !claim["metadata"]["deletionTimestamp"].is_null()
            {
                continue;
            }
            leaving.push(key.clone());
            if let Some(address) = self.object(Kind::Address, &key)
                // One being withdrawn (a create of an address its pool stopped allocating) is reserved for no one.
                && address["metadata"]["deletionTimestamp"].is_null()
                && let Some(held) = Held::of_address(PoolId::Global, &address)
                && address.pointer("/spec/poolRef/name").and_then(Value::as_str) == Some(PoolId::Global.name())
            {
                let left_behind = address["metadata"]["uid"].as_str().unwrap_or_default().to_owned();
                let seen_absent = !self.annotation_holds(held);
                let e =
                    Elsewhere { namespace: n, claim: key.name.to_string(), left_behind, protected: false, seen_absent };
                self.elsewhere.insert(held, e);
            }
        }
        self.note(|| {
            format!("clusterctl moves Cluster {}/{CLUSTER} away with {} claims", NAMESPACES[n], leaving.len())
        });
        self.moves[n] = Move::Leaving(leaving);
    }

    fn continue_move_away(&mut self, n: usize, mut claims: Vec<ObjectKey>) {
        match claims.pop() {
            Some(key) => {
                if self.object(Kind::Claim, &key).is_some_and(|c| c["metadata"]["deletionTimestamp"].is_null()) {
                    let _ = self.server_merge(
                        Kind::Claim,
                        &key,
                        json!({"metadata": {"annotations": { DELETE_FOR_MOVE_ANNOTATION: "" }}}),
                    );
                    let _ = self.server_merge(Kind::Claim, &key, json!({"metadata": {"finalizers": null}}));
                    let _ = self.server_delete(Kind::Claim, &key);
                    // What is left behind is the IPAddress of its name now: one a person deleted since the move
                    // began, made again by its claim with the same address, is it.
                    if let Some(address) = self.object(Kind::Address, &key)
                        && let Some(held) = Held::of_address(PoolId::Global, &address)
                        && let Some(uid) = address["metadata"]["uid"].as_str()
                        && let Some(e) = self.elsewhere.get_mut(&held)
                        && e.namespace == n
                        && *e.claim == *key.name
                    {
                        e.left_behind = uid.to_owned();
                    }
                }
                self.moves[n] = Move::Leaving(claims);
            }
            None => {
                let cluster = ObjectKey::new(NAMESPACES[n], CLUSTER);
                let _ = self.server_delete(Kind::Cluster, &cluster);
                self.moves[n] = Move::Away;
            }
        }
    }

    /// clusterctl moves the Cluster back: Cluster (paused), claims and their IPAddresses with the addresses they had,
    /// owner references rewritten to the new claims, then unpaused.
    fn move_back(&mut self, n: usize) {
        if self.moves[n] != Move::Away {
            return;
        }
        // Only what our manager recorded comes back: an address whose reservation it missed (its claim's deletion
        // for the move went unseen, docs/operations.md) may be in use here by now, and an operator must sort it out.
        let entries: Vec<(Held, String)> = self
            .elsewhere
            .iter()
            .filter(|(_, e)| e.namespace == n && e.protected)
            .map(|(h, e)| (*h, e.claim.clone()))
            .collect();
        let free = entries.iter().all(|(_, name)| {
            let key = ObjectKey::new(NAMESPACES[n], name);
            self.object(Kind::Claim, &key).is_none() && self.object(Kind::Address, &key).is_none()
        });
        let cluster = ObjectKey::new(NAMESPACES[n], CLUSTER);
        if !free || self.object(Kind::Cluster, &cluster).is_some() {
            return;
        }
        self.note(|| {
            format!("clusterctl moves Cluster {}/{CLUSTER} back with {} claims", NAMESPACES[n], entries.len())
        });
        let _ = self.server_create(Kind::Cluster, cluster_object(NAMESPACES[n], true));
        for (held, name) in entries {
            let claim = json!({
                "apiVersion": format!("{GROUP}/v1beta2"),
                "kind": "IPAddressClaim",
                "metadata": {"name": name, "namespace": NAMESPACES[n], "labels": { CLUSTER_NAME_LABEL: CLUSTER }},
                "spec": {"poolRef": {"apiGroup": GROUP, "kind": PoolId::Global.kind().kind(), "name": PoolId::Global.name()}},
            });
            let Ok(claim) = self.server_create(Kind::Claim, claim) else { continue };
            let uid = claim["metadata"]["uid"].clone();
            let key = ObjectKey::new(NAMESPACES[n], &name);
            self.came_back(uid.as_str().unwrap_or_default().to_owned(), key, held);
            let address = json!({
                "apiVersion": format!("{GROUP}/v1beta2"),
                "kind": "IPAddress",
                "metadata": {
                    "name": name, "namespace": NAMESPACES[n],
                    "labels": { CLUSTER_NAME_LABEL: CLUSTER },
                    "finalizers": [PROTECT_ADDRESS_FINALIZER],
                    "ownerReferences": [{"apiVersion": format!("{GROUP}/v1beta2"), "kind": "IPAddressClaim",
                                         "name": name, "uid": uid, "controller": true, "blockOwnerDeletion": true}],
                },
                "spec": {
                    "claimRef": {"name": name},
                    "poolRef": {"apiGroup": GROUP, "kind": PoolId::Global.kind().kind(), "name": PoolId::Global.name()},
                    "address": held.address().to_string(),
                    "prefix": 24,
                },
            });
            self.elsewhere.remove(&held);
            let _ = self.server_create(Kind::Address, address);
        }
        let _ = self.server_merge(Kind::Cluster, &cluster, json!({"spec": {"paused": false}}));
        self.moves[n] = Move::Home;
    }

    /// The moved Cluster was deleted over there: an operator takes its addresses out of the annotation here.
    fn release_moved_away(&mut self, n: usize) {
        if self.moves[n] != Move::Away {
            return;
        }
        let released: Vec<Held> = self.elsewhere.iter().filter(|(_, e)| e.namespace == n).map(|(h, _)| *h).collect();
        for held in &released {
            self.elsewhere.remove(held);
        }
        let pool = PoolId::Global;
        if let Some(object) = self.object(pool.server_kind(), &pool.key()) {
            let remaining: Vec<String> = entries_of(&object)
                .into_iter()
                .filter(|e| Held::of_entry(pool, e).is_none_or(|h| !released.contains(&h)))
                .collect();
            let value = if remaining.is_empty() { Value::Null } else { json!(remaining.join(",")) };
            let _ = self.server_merge(
                pool.server_kind(),
                &pool.key(),
                json!({"metadata": {"annotations": { MOVED_AWAY_ANNOTATION: value }}}),
            );
        }
        // And the IPAddresses left behind that the annotation had no room for (docs/operations.md).
        let marked: Vec<ObjectKey> = self
            .objects(Kind::Address)
            .iter()
            .filter(|a| *key_of(a).namespace == *NAMESPACES[n] && is_marked_moved_away(a))
            .map(key_of)
            .collect();
        for key in marked {
            let _ = self.server_delete(Kind::Address, &key);
        }
        self.note(|| {
            format!("an operator frees the addresses of Cluster {}/{CLUSTER}, deleted over there", NAMESPACES[n])
        });
        self.moves[n] = Move::Home;
    }

    // ---- Scripts: hand-written schedules for regression tests of one order of events ----

    /// A world that does nothing by itself: the script creates, delivers and answers.
    pub(super) fn scripted() -> World {
        World::new(
            0,
            Options { replicas: 1, steps: 0, late: Late::BeforeNextTerm, trace: true, velero: false, sharded: false },
        )
    }

    /// A scripted world with the second manager (`Options::sharded`): its term begins when the script finishes.
    pub(super) fn scripted_sharded() -> World {
        World::new(
            0,
            Options { replicas: 1, steps: 0, late: Late::BeforeNextTerm, trace: true, velero: false, sharded: true },
        )
    }

    /// A scripted world whose invariants allow for a write of an ended term landing after the next term began (an
    /// unbound duplicate may appear for a moment; two bound claims never share an address).
    pub(super) fn scripted_with_writes_late_anytime() -> World {
        World::new(
            0,
            Options { replicas: 1, steps: 0, late: Late::Anytime, trace: true, velero: false, sharded: false },
        )
    }

    /// The room of the moved-away annotation (for the terms begun from now on), and the API server's limit on an
    /// object's annotations.
    pub(super) fn limit_annotations(&mut self, moved_away_room: usize, server_limit: usize) {
        self.swarm.moved_away_max_bytes = moved_away_room;
        lock(&self.hub).server.annotation_limit = server_limit;
    }

    pub(super) fn end_this_term(&mut self) {
        self.end_term();
    }

    pub(super) fn create_pool_shaped(&mut self, pool: PoolId, shape: Shape) {
        self.server_create(pool.server_kind(), pool_object(pool, shape)).expect("a new pool");
        self.shapes.insert(pool, shape);
    }

    /// Edits a pool's spec to `shape`, at once (as a user whose edit the webhook admitted).
    pub(super) fn edit_pool_shaped(&mut self, pool: PoolId, shape: Shape) {
        self.server_merge(pool.server_kind(), &pool.key(), json!({"spec": shape.spec(pool)}))
            .expect("the edit applies");
        self.shapes.insert(pool, shape);
    }

    pub(super) fn create_claim_named(&mut self, namespace: usize, name: &str, pool: PoolId) -> ObjectKey {
        let object = json!({
            "apiVersion": format!("{GROUP}/v1beta2"),
            "kind": "IPAddressClaim",
            "metadata": {"name": name, "namespace": NAMESPACES[namespace]},
            "spec": {"poolRef": {"apiGroup": GROUP, "kind": pool.kind().kind(), "name": pool.name()}},
        });
        self.server_create(Kind::Claim, object).expect("a new claim");
        ObjectKey::new(NAMESPACES[namespace], name)
    }

    /// Deletes a claim the way clusterctl or an impatient user does: its finalizers off first.
    pub(super) fn force_delete_claim(&mut self, key: &ObjectKey) {
        let _ = self.server_merge(Kind::Claim, key, json!({"metadata": {"finalizers": null}}));
        let _ = self.server_delete(Kind::Claim, key);
    }

    pub(super) fn remove(&mut self, kind: Kind, key: &ObjectKey) {
        let _ = self.server_delete(kind, key);
    }

    /// The watch of `kind` expires (410 Gone) before it delivered what it has: it lists again.
    pub(super) fn expire_watch_of(&mut self, kind: Kind) {
        let Some(term) = self.term.as_mut() else { return };
        for watch in term.watches.iter_mut().filter(|w| w.kind == kind) {
            watch.state = WatchState::Start;
        }
    }

    pub(super) fn begin_term(&mut self) {
        self.start_term();
    }

    /// Delivers every event the watches of `kinds` have (every kind, when empty).
    pub(super) fn deliver_all(&mut self, kinds: &[Kind]) {
        let watches = self.term.as_ref().map_or(0, |t| t.watches.len());
        loop {
            let next = (0..watches).find(|&w| {
                self.has_events(w)
                    && (kinds.is_empty() || self.term.as_ref().is_some_and(|t| kinds.contains(&t.watches[w].kind)))
            });
            match next {
                Some(w) => {
                    self.deliver(w);
                }
                None => return,
            }
            self.poll_tasks();
        }
    }

    /// Delivers the next event the watch of `kind` has; false when it has none.
    pub(super) fn deliver_one(&mut self, kind: Kind) -> bool {
        let watches = self.term.as_ref().map_or(0, |t| t.watches.len());
        let next =
            (0..watches).find(|&w| self.has_events(w) && self.term.as_ref().is_some_and(|t| t.watches[w].kind == kind));
        let Some(w) = next else { return false };
        self.deliver(w);
        self.poll_tasks();
        true
    }

    /// Time passes: `ms` milliseconds, nothing else happening.
    pub(super) fn pass_time(&mut self, ms: i64) {
        self.advance(ms);
    }

    /// The orphan sweep as the orphan task runs it: once, and again once the orphan release delay has passed (an
    /// IPAddress is released only after it was an orphan that long), each answered in full.
    pub(super) fn sweep_after_the_delay(&mut self) {
        self.run_job(Job::Sweep);
        self.answer_everything();
        let delay = self.term.as_ref().map_or(Duration::ZERO, |t| t.ctx.options.orphan_release_delay);
        self.advance(i64::try_from(delay.as_millis()).unwrap_or(0) + 1);
        self.run_job(Job::Sweep);
    }

    /// [`World::sweep_after_the_delay`], every request answered, then every event delivered.
    pub(super) fn sweep_to_rest(&mut self) {
        self.sweep_after_the_delay();
        self.answer_everything();
        self.deliver_all(&[]);
    }

    /// Starts a worker's run of `job`.
    pub(super) fn run_job(&mut self, job: Job) {
        assert!(!self.is_running(&job), "a scenario runs {job} while it runs already: it would run nothing");
        self.start(job);
        self.poll_tasks();
    }

    /// Runs `job` to its end: every request answered as it comes, then every event delivered.
    pub(super) fn run_to_rest(&mut self, job: Job) {
        self.run_job(job);
        self.answer_everything();
        self.deliver_all(&[]);
    }

    /// Gives the first request in flight whose operation matches `which` the fate `fate`; false when none matches.
    pub(super) fn answer_where(&mut self, which: impl Fn(&Op) -> bool, fate: Fate) -> bool {
        let index = lock(&self.hub).pending.iter().position(|p| p.slot.is_some() && which(&p.op));
        let Some(index) = index else { return false };
        self.step += 1;
        self.resolve_as(index, fate);
        self.poll_tasks();
        true
    }

    /// Whether a request matching `which` is in flight.
    /// Whether the manager's index has changes of the pool's moved-away annotation not written yet.
    pub(super) fn is_pending_moved_away(&self, pool: &PoolId) -> bool {
        self.term.as_ref().is_some_and(|t| !t.ctx.index.moved_away_view(&pool.pool_key()).pending.is_empty())
    }

    pub(super) fn is_pending(&self, which: impl Fn(&Op) -> bool) -> bool {
        lock(&self.hub).pending.iter().any(|p| p.slot.is_some() && which(&p.op))
    }

    /// Takes the first request in flight whose operation matches `which` away from its task, unapplied (the task sees
    /// the connection reset), and returns it: a script lands it later with [`World::land_late`], as the write of a
    /// term that ended lands after the next one read.
    pub(super) fn hold_back_where(&mut self, which: impl Fn(&Op) -> bool) -> Option<Op> {
        let index = lock(&self.hub).pending.iter().position(|p| p.slot.is_some() && which(&p.op))?;
        let op = lock(&self.hub).pending[index].op.clone();
        self.step += 1;
        self.resolve_as(index, Fate::NotApplied);
        self.poll_tasks();
        Some(op)
    }

    /// Applies a write held back by [`World::hold_back_where`] now.
    pub(super) fn land_late(&mut self, op: &Op) {
        let result = lock(&self.hub).apply(op);
        self.note(|| {
            format!("a held-back write lands late: {op} -> {}", if result.is_ok() { "ok" } else { "refused" })
        });
    }

    /// Answers the newest request in flight; false when none is.
    pub(super) fn answer_newest(&mut self) -> bool {
        let index = lock(&self.hub).pending.iter().rposition(|p| p.slot.is_some());
        let Some(index) = index else { return false };
        self.step += 1;
        self.resolve_as(index, Fate::Answered);
        self.poll_tasks();
        true
    }

    /// Whether a worker of the live term runs `job` now.
    pub(super) fn is_running(&self, job: &Job) -> bool {
        self.term.as_ref().is_some_and(|t| t.running(job))
    }

    /// Answers every request in flight until no task of the live term is left running.
    pub(super) fn answer_everything(&mut self) {
        while self.answer_where(|_| true, Fate::Answered) {}
    }

    /// The per-step invariants, then settling and the quiescent ones.
    pub(super) fn finish(&mut self) -> Result<(), String> {
        self.check_always()?;
        self.settle()?;
        self.check_quiescent()
    }

    pub(super) fn check_now(&mut self) -> Result<(), String> {
        self.check_always()
    }

    /// An object as the API server holds it now.
    pub(super) fn read(&self, kind: Kind, key: &ObjectKey) -> Option<Value> {
        self.object(kind, key)
    }

    /// Patches an object as a user or clusterctl does (a merge patch, at once).
    pub(super) fn patch(&mut self, kind: Kind, key: &ObjectKey, patch: Value) {
        self.server_merge(kind, key, patch).expect("the patch applies");
    }

    /// Patches an object's status subresource as another controller does (a merge patch, at once).
    pub(super) fn patch_status(&mut self, kind: Kind, key: &ObjectKey, patch: Value) {
        let patched = lock(&self.hub).server.patch_merge(kind, key, &patch, true);
        let shown = patch.to_string();
        self.note(|| {
            format!("another controller patches {} {key}/status: {shown} -> {}", kind.name(), patched.is_ok())
        });
        patched.expect("the status patch applies");
    }

    /// Creates an object as a user or clusterctl does, at once.
    pub(super) fn create(&mut self, kind: Kind, object: Value) -> Value {
        self.server_create(kind, object).expect("a new object")
    }

    pub(super) fn trace_text(&self) -> String {
        self.trace.join("\n")
    }

    // ---- Settling ----

    /// No more faults or users: every request is answered, every event delivered, every queue drained, until a full
    /// round changes nothing in the API server.
    fn settle(&mut self) -> Result<(), String> {
        self.note(|| "settling: no more faults or users; clusterctl and Velero finish what they began".to_owned());
        while self.velero_continues() {}
        for n in 0..self.moves.len() {
            while let Move::Leaving(claims) = &self.moves[n] {
                let claims = claims.clone();
                self.continue_move_away(n, claims);
            }
        }
        self.each_manager(|w| {
            if w.term.as_ref().is_some_and(|t| !t.renewing) {
                w.end_term();
            }
        });
        self.land_orphaned_writes();
        self.each_manager(|w| {
            if w.term.is_none() {
                w.start_term();
            }
        });
        // A round drains everything, lets time pass (a second and a half, or up to the next requeue a decision counts
        // on: a retry, a grace period, the restore wait; never a safety net such as RECHECK, so that a claim that
        // waits only for one is found out), fires what is due and the periodic work (the orphan sweep, a look at
        // every pool's status) and drains again. Four rounds in a row that write nothing, with no such requeue
        // pending, end it (longer than the orphan delay and the grace periods, so the sweep has had its turn).
        let mut quiet = 0;
        for _ in 0..400 {
            self.drain()?;
            let before = lock(&self.hub).server.revision();
            let now = self.now();
            let next = self.next_due();
            let wait = next.map_or(1500, |due| due.saturating_duration_since(now).as_millis().clamp(1, 1500));
            self.advance(i64::try_from(wait).unwrap_or(1500));
            let now = self.now();
            self.each_manager(|w| {
                if let Some(term) = w.term.as_ref() {
                    term.fire_due_but_safety_nets(now);
                    for pool in POOLS {
                        term.work.pool_changed(pool.pool_key());
                    }
                }
                if !w.term.as_ref().is_some_and(Term::orphan_task_busy) {
                    w.start(Job::Sweep);
                }
            });
            // The garbage collector goes on with the foreground deletions.
            for _ in 0..20 {
                if !self.collect_in_foreground() {
                    break;
                }
            }
            self.each_manager(Self::poll_tasks);
            self.drain()?;
            let pending = self.next_due().is_some();
            quiet = if lock(&self.hub).server.revision() == before && !pending { quiet + 1 } else { 0 };
            if quiet >= 4 {
                return Ok(());
            }
        }
        let terms = [self.term.as_ref(), self.shard.as_ref().and_then(|s| s.term.as_ref())];
        let tasks: Vec<String> =
            terms.into_iter().flatten().flat_map(|t| t.tasks.iter().map(|t| t.job.to_string())).collect();
        let pending: Vec<String> = lock(&self.hub).pending.iter().map(|p| p.op.to_string()).collect();
        Err(format!(
            "the system does not settle: something is written again and again (running: {tasks:?}; in flight: \
             {pending:?}); {}",
            self.indexes_view()
        ))
    }

    /// The next requeue either manager counts on.
    fn next_due(&self) -> Option<Instant> {
        let terms = [self.term.as_ref(), self.shard.as_ref().and_then(|s| s.term.as_ref())];
        terms.into_iter().flatten().filter_map(Term::next_due).min()
    }

    /// Settles until nothing is left to do: every request answered, every event delivered, every queue drained.
    fn drain(&mut self) -> Result<(), String> {
        for _ in 0..20_000 {
            self.step += 1;
            let mut busy = false;
            self.each_manager(|w| {
                busy |= w.settle_step();
                w.poll_tasks();
                busy |= w.term.as_ref().is_some_and(|t| !t.tasks.is_empty());
            });
            self.check_always()?;
            if !busy {
                return Ok(());
            }
        }
        Err(format!("settling never runs out of work; {}", self.indexes_view()))
    }

    /// One step of settling; false when there was nothing to do.
    fn settle_step(&mut self) -> bool {
        let answerable = lock(&self.hub).pending.iter().position(|p| p.slot.is_some());
        if let Some(i) = answerable {
            self.resolve(i, true);
            return true;
        }
        let watches = self.term.as_ref().map_or(0, |t| t.watches.len());
        for w in 0..watches {
            if self.has_events(w) {
                self.deliver(w);
                return true;
            }
        }
        let Some(term) = self.term.as_mut() else { return false };
        if !term.synced {
            return false;
        }
        term.pull();
        let claim = term.work.claims.try_next();
        let pool = term.work.pools.try_next();
        let gone = if term.orphan_task_busy() { None } else { term.gone.pop_first() };
        let moved = if term.moved_away_busy() { None } else { term.moved_away.pop_first() };
        let started = claim.is_some() || pool.is_some() || gone.is_some() || moved.is_some();
        if let Some(k) = claim {
            self.launch(Job::Claim(k));
        }
        if let Some(k) = pool {
            self.launch(Job::Pool(k));
        }
        if let Some(k) = gone {
            self.start(Job::Gone(k));
        }
        if let Some(k) = moved {
            self.start(Job::MovedAway(k));
        }
        if !started {
            // The status coalescer takes what changed.
            let dirty = self.term.as_ref().map(|t| t.ctx.index.take_changed_pools(usize::MAX)).unwrap_or_default();
            if let Some(term) = self.term.as_ref() {
                for key in &dirty {
                    term.work.pool_changed(key.clone());
                }
            }
            return !dirty.is_empty();
        }
        true
    }

    // ---- Invariants ----

    /// What every step keeps: no address held twice (by two live IPAddresses of a pool, or by one here and the
    /// same address on the other management cluster once our manager recorded it; of an IPAddress no claim is bound
    /// to, which may be a late write, only under `Late::BeforeNextTerm`), and every bound claim names a live
    /// IPAddress of its own.
    fn check_always(&mut self) -> Result<(), String> {
        if let Some(found) = self.found.take() {
            return Err(found);
        }
        let terms = [self.term.as_ref(), self.shard.as_ref().and_then(|s| s.term.as_ref())];
        for term in terms.into_iter().flatten() {
            term.ctx.index.check_consistency()?;
        }
        // What the API server holds is checked again only when it changed (most steps deliver or poll).
        let protected = self.elsewhere.values().filter(|e| e.protected).count();
        let signature = (lock(&self.hub).server.revision(), self.elsewhere.len(), protected);
        if self.checked == Some(signature) {
            return Ok(());
        }
        self.protect_recorded();
        self.check_foreign()?;
        let protected = self.elsewhere.values().filter(|e| e.protected).count();
        self.checked = Some((signature.0, self.elsewhere.len(), protected));
        let hub = lock(&self.hub);
        let addresses = hub.server.list(Kind::Address);
        let claims = hub.server.list(Kind::Claim);
        drop(hub);
        let bound: BTreeSet<ObjectKey> = claims
            .iter()
            .filter(|c| c.pointer("/status/addressRef/name").and_then(Value::as_str).is_some_and(|n| !n.is_empty()))
            .map(|c| {
                let key = key_of(c);
                let name = c.pointer("/status/addressRef/name").and_then(Value::as_str).unwrap_or_default();
                ObjectKey::new(&key.namespace, name)
            })
            .collect();
        let strict = self.options.late == Late::BeforeNextTerm;
        // The address each bound claim was told of (its Ready condition's `allocated <address>`): an IPAddress of its
        // name holding another (a deposed leader's late create, landed after a person deleted the claim's own) is
        // not the one it is bound to.
        let told: BTreeMap<ObjectKey, Option<std::net::IpAddr>> = claims
            .iter()
            .filter(|c| c.pointer("/status/addressRef/name").and_then(Value::as_str).is_some_and(|n| !n.is_empty()))
            .map(|c| {
                let key = key_of(c);
                let name = c.pointer("/status/addressRef/name").and_then(Value::as_str).unwrap_or_default();
                (ObjectKey::new(&key.namespace, name), told_address(c))
            })
            .collect();
        // A deposed leader's late create landed under a claim being deleted (its machine going) is released by that
        // claim's release; the address, freed here when the claim's own IPAddress went, is the other's alone.
        let deleting: BTreeSet<ObjectKey> = claims
            .iter()
            .filter(|c| !c["metadata"]["deletionTimestamp"].is_null())
            .filter_map(|c| {
                let name = c.pointer("/status/addressRef/name").and_then(Value::as_str).filter(|n| !n.is_empty())?;
                Some(ObjectKey::new(&key_of(c).namespace, name))
            })
            .collect();
        let late_under_deleting = |a: &Value, key: &ObjectKey| {
            deleting.contains(key) && a["metadata"]["uid"].as_str().is_some_and(|u| self.late_created.contains(u))
        };
        let bound_to = |key: &ObjectKey, h: Held| {
            bound.contains(key) && (told.get(key).copied().flatten().is_none_or(|t| h.address() == t))
        };
        // An IPAddress Velero restored holding an address handed out while it was gone is a conflict no one could stop
        // (nothing admits IPAddress creates): its claim withdraws it, and only two bound holders are a violation.
        let restored_duplicate =
            |a: &Value| a["metadata"]["uid"].as_str().is_some_and(|u| self.actors.velero_duplicates.contains(u));
        // An IPAddress the first manager made for a claim of no manager's shard, while it did not know the pool was
        // the second manager's (its label arrived while the create was in flight): it deletes it before the claim is
        // bound, so only a bound one is a violation.
        let unserved_create = |a: &Value| {
            self.options.sharded
                && pool_of_address(a) == Some(SHARD_POOL)
                && claims.iter().any(|c| key_of(c) == key_of(a) && watch_filter_of(c) != Some(SHARD))
        };
        let mut held: Vec<(PoolId, Held, ObjectKey, bool, bool)> = Vec::new();
        for a in &addresses {
            let key = key_of(a);
            let Some(pool) = pool_of_address(a) else { continue };
            let Some(h) = Held::of_address(pool, a) else { continue };
            let exempt = restored_duplicate(a) || unserved_create(a);
            // A restored duplicate under a claim being deleted: that claim's release withdraws it (seed 150010206).
            let used = bound_to(&key, h) && !late_under_deleting(a, &key) && !(exempt && deleting.contains(&key));
            for (p, other, other_key, other_used, other_exempt) in &held {
                let strict = strict && !exempt && !*other_exempt;
                if *p == pool && other.overlaps(h) && (strict || (used && *other_used)) {
                    return Err(format!(
                        "DUPLICATE: IPAddresses {other_key} ({other}) and {key} ({h}) of pool {} hold the same address",
                        pool.pool_key()
                    ));
                }
            }
            // An IPAddress no claim is bound to may be a late create of a deposed leader (as above): the claim
            // withdraws it, and only a bound one uses the address here.
            if pool == PoolId::Global
                && ((strict && !restored_duplicate(a)) || used)
                && let Some((e, where_)) = self
                    .elsewhere
                    .iter()
                    .find(|(e, w)| w.protected && e.overlaps(h) && !w.reserved_by(a, **e, bound.contains(&key)))
            {
                return Err(format!(
                    "DUPLICATE ACROSS MANAGEMENT CLUSTERS: IPAddress {key} holds {h}, which claim {}/{} of the moved \
                     Cluster uses over there ({e})",
                    NAMESPACES[where_.namespace], where_.claim
                ));
            }
            held.push((pool, h, key, used, exempt));
        }
        for c in &claims {
            let key = key_of(c);
            let Some(name) = c.pointer("/status/addressRef/name").and_then(Value::as_str).filter(|n| !n.is_empty())
            else {
                continue;
            };
            if !c["metadata"]["deletionTimestamp"].is_null() {
                continue;
            }
            let address_key = ObjectKey::new(&key.namespace, name);
            let found = addresses.iter().find(|a| key_of(a) == address_key);
            // An IPAddress of its name holding another address than the one it was told of is not its own made again.
            let told_here = told.get(&address_key).copied().flatten();
            let exists = found.is_some_and(|a| {
                told_here.is_none_or(|t| {
                    a["spec"]["address"].as_str().and_then(|s| s.parse::<std::net::IpAddr>().ok()) == Some(t)
                })
            });
            if self.lost_its_ipaddress(&key, exists) {
                // A person deleted it: the claim makes it again.
                continue;
            }
            let Some(address) = found else {
                return Err(format!("claim {key} is bound to IPAddress {address_key}, which does not exist"));
            };
            let uid = c["metadata"]["uid"].as_str().unwrap_or_default();
            let claim_owners = address["metadata"]["ownerReferences"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|o| o["kind"] == "IPAddressClaim")
                .filter_map(|o| o["uid"].as_str());
            let owned = claim_owners.clone().any(|o| o == uid);
            // Restored by Velero with its owner reference to the claim's UID before the restore, or a deposed leader's
            // create for an earlier claim of its name landed late (after a person deleted the claim's own: seed
            // 500085155), holding the address the claim was told of: the claim's adoption repairs the reference (or
            // the garbage collector deletes it, and the claim makes it again).
            let restored = address
                .pointer(&format!("/metadata/labels/{}", crate::api::VELERO_RESTORE_LABEL.replace('/', "~1")))
                .is_some();
            let late = address["metadata"]["uid"].as_str().is_some_and(|u| self.late_created.contains(u));
            let restored_for_it = (restored || late)
                && exists
                && claim_owners.clone().all(|o| !claims.iter().any(|c| c["metadata"]["uid"].as_str() == Some(o)));
            if restored_for_it {
                continue;
            }
            if !owned || address.pointer("/spec/claimRef/name").and_then(Value::as_str) != Some(&*key.name) {
                return Err(format!(
                    "claim {key} (uid {}) is bound to IPAddress {address_key}, which is not its own: {}",
                    short_uid(uid),
                    describe(Kind::Address, address)
                ));
            }
        }
        Ok(())
    }

    /// What the live term's index holds of a pool, for a violation's message.
    /// What each manager's index holds of every pool.
    fn indexes_view(&mut self) -> String {
        let views: Vec<String> = POOLS
            .iter()
            .map(|&p| {
                let second = self.as_shard(|w| format!(" / second manager: {}", w.index_view(p))).unwrap_or_default();
                format!("{}: {}{second}", p.pool_key(), self.index_view(p))
            })
            .collect();
        format!("the indexes: {}", views.join("; "))
    }

    fn index_view(&self, pool: PoolId) -> String {
        let Some(term) = &self.term else { return "nothing (no term)".into() };
        let key = pool.pool_key();
        let (holders, (counts, error)) = term.ctx.index.read(|s| (s.holders(&key), s.pool_counts(&key)));
        let held: Vec<String> = holders
            .into_iter()
            .map(|(k, h, confirmed)| {
                let record = if term.ctx.index.address(&k).is_some() { "" } else { " (no record)" };
                format!("{k}={h}{}{record}", if confirmed { "" } else { " unconfirmed" })
            })
            .collect();
        format!("[{}] counts {counts:?} {error:?}", held.join(", "))
    }

    /// Whether the global pool's annotation holds an entry for `held` now.
    fn annotation_holds(&self, held: Held) -> bool {
        let pool = PoolId::Global;
        self.object(pool.server_kind(), &pool.key())
            .is_some_and(|o| entries_of(&o).iter().any(|e| Held::of_entry(pool, e) == Some(held)))
    }

    /// Marks the addresses of the other management cluster that our manager wrote into the pool's annotation (for
    /// this move: an entry left from an earlier one must have been seen gone first).
    fn protect_recorded(&mut self) {
        if self.elsewhere.is_empty() {
            return;
        }
        let pool = PoolId::Global;
        let Some(object) = self.object(pool.server_kind(), &pool.key()) else { return };
        if !object["metadata"]["deletionTimestamp"].is_null() {
            // A pool being deleted takes its reservations with it (docs/operations.md).
            return;
        }
        // Each entry's address, and the IPAddress it names (`None`: a bare entry, naming none).
        let recorded: Vec<(Held, Option<String>)> = entries_of(&object)
            .iter()
            .filter_map(|e| Some((Held::of_entry(pool, e)?, e.split_once('@').map(|(_, named)| named.to_owned()))))
            .collect();
        // An address the annotation had no room for is recorded on the IPAddress left behind, by our mark. Not one
        // being deleted that names no live pool as its owner: marked after its pool was deleted, it records nothing
        // for the pool made again (docs/operations.md; seed 610608073).
        let pool_uid = object["metadata"]["uid"].clone();
        let of_the_live_pool = |a: &Value| {
            a["metadata"]["ownerReferences"].as_array().is_some_and(|refs| refs.iter().any(|o| o["uid"] == pool_uid))
        };
        let marked: Vec<String> = self
            .objects(Kind::Address)
            .iter()
            .filter(|a| is_marked_moved_away(a))
            .filter(|a| a["metadata"]["deletionTimestamp"].is_null() || of_the_live_pool(a))
            .filter_map(|a| a["metadata"]["uid"].as_str().map(str::to_owned))
            .collect();
        for (h, e) in &mut self.elsewhere {
            // An entry of another IPAddress holding the address (a later claim's move: seed 580059062) records not this
            // move, which the manager missed.
            let names_it = |named: &Option<String>| {
                named.as_ref().is_none_or(|n| *n == format!("{}/{}", NAMESPACES[e.namespace], e.claim))
            };
            if marked.contains(&e.left_behind) {
                e.protected = true;
            } else if !recorded.iter().any(|(held, named)| held == h && names_it(named)) {
                e.seen_absent = true;
            } else if e.seen_absent {
                e.protected = true;
            }
        }
    }

    /// What holds once everything settled: no duplicate at all, no IPAddress without its claim, no claim waiting
    /// while its pool has a free address, nothing stuck being deleted, pool counts as they are, and every address
    /// recorded as moved away still recorded.
    fn check_quiescent(&mut self) -> Result<(), String> {
        let addresses = self.objects(Kind::Address);
        let claims = self.objects(Kind::Claim);
        let clusters = self.objects(Kind::Cluster);
        let paused_cluster = |namespace: &str| {
            clusters.iter().any(|c| {
                key_of(c) == ObjectKey::new(namespace, CLUSTER)
                    && c.pointer("/spec/paused").and_then(Value::as_bool) == Some(true)
            })
        };
        // A duplicate Velero restored under a claim being deleted whose Cluster is paused: that claim's release
        // withdraws it once the Cluster is unpaused, and the pause holds the release (as in `check_always`; seed
        // 330088935).
        let awaits_release = |a: &Value, key: &ObjectKey| {
            a["metadata"]["uid"].as_str().is_some_and(|u| self.actors.velero_duplicates.contains(u))
                && claims.iter().any(|c| key_of(c) == *key && !c["metadata"]["deletionTimestamp"].is_null())
                && paused_cluster(&key.namespace)
        };
        // No duplicate, also of late writes.
        let mut held: Vec<(PoolId, Held, ObjectKey)> = Vec::new();
        for a in &addresses {
            let (Some(pool), key) = (pool_of_address(a), key_of(a)) else { continue };
            let Some(h) = Held::of_address(pool, a) else { continue };
            // Still in use (the pool counts it), but no duplicate to report.
            if awaits_release(a, &key) {
                held.push((pool, h, key));
                continue;
            }
            let awaiting = |k: &ObjectKey| addresses.iter().any(|b| key_of(b) == *k && awaits_release(b, k));
            if let Some((_, other, other_key)) =
                held.iter().find(|(p, o, k)| *p == pool && o.overlaps(h) && !awaiting(k))
            {
                return Err(format!("after settling, {other_key} ({other}) and {key} ({h}) hold the same address"));
            }
            // Nor across management clusters: a late create holding an address in use over there is withdrawn.
            if pool == PoolId::Global
                && let Some((e, where_)) = self.elsewhere.iter().find(|(e, w)| {
                    let bound = claims.iter().any(|c| {
                        key_of(c).namespace == key.namespace
                            && c.pointer("/status/addressRef/name").and_then(Value::as_str) == Some(&*key.name)
                    });
                    w.protected && e.overlaps(h) && !w.reserved_by(a, **e, bound)
                })
            {
                return Err(format!(
                    "after settling, IPAddress {key} holds {h}, which claim {}/{} of the moved Cluster uses over there \
                     ({e})",
                    NAMESPACES[where_.namespace], where_.claim
                ));
            }
            held.push((pool, h, key));
        }
        // No leak: every IPAddress has its claim, but those of a paused Cluster (it keeps its addresses).
        for a in &addresses {
            let key = key_of(a);
            if pool_of_address(a).is_none() {
                continue;
            }
            let labelled =
                a.pointer("/metadata/labels").and_then(|l| l.get(CLUSTER_NAME_LABEL)).and_then(Value::as_str);
            if labelled == Some(CLUSTER) && paused_cluster(&key.namespace) {
                continue;
            }
            // Left behind by a move, its address in use over there, and no room in the pool's annotation: kept.
            if is_marked_moved_away(a) {
                continue;
            }
            if !claims.iter().any(|c| key_of(c) == key) {
                return Err(format!("leaked: {} has no claim", describe(Kind::Address, a)));
            }
        }
        let cluster_state = |namespace: &str| -> Option<bool> {
            clusters
                .iter()
                .find(|c| key_of(c) == ObjectKey::new(namespace, CLUSTER))
                .map(|c| c.pointer("/spec/paused").and_then(Value::as_bool).unwrap_or(false))
        };
        let mut free: BTreeMap<PoolId, Vec<Held>> = BTreeMap::new();
        for pool in POOLS {
            let Some(object) = self.object(pool.server_kind(), &pool.key()) else { continue };
            if !object["metadata"]["deletionTimestamp"].is_null() {
                if !held.iter().any(|(p, _, _)| *p == pool) {
                    return Err(format!("pool {} is stuck being deleted with no IPAddress left", pool.pool_key()));
                }
                continue;
            }
            let Some(shape) = self.shapes.get(&pool).copied() else { continue };
            let allocatable = shape.allocatable(pool);
            // An entry held by an IPAddress of the name it gives (or, a bare one, by any) is that IPAddress; held by
            // one of another name, both count (the pool says the duplicate: an entry written after an operator freed
            // the Cluster's addresses, while a claim here took one).
            let entries: Vec<(Held, Option<ObjectKey>)> = entries_of(&object)
                .iter()
                .filter_map(|e| Held::of_entry(pool, e).map(|h| (h, entry_name(e))))
                .collect();
            let reserved: Vec<Held> = entries.iter().map(|(h, _)| *h).collect();
            let in_use: Vec<Held> = held.iter().filter(|(p, _, _)| *p == pool).map(|(_, h, _)| *h).collect();
            let held_as_named = |r: Held, named: &Option<ObjectKey>| {
                held.iter().any(|(p, h, key)| *p == pool && h.overlaps(r) && named.as_ref().is_none_or(|n| n == key))
            };
            // One reservation per address, however many entries name it (two claims of a moved Cluster that held it
            // in turn: seed 440475962), unless an IPAddress one of them names holds it.
            let mut reservations: Vec<Held> = entries
                .iter()
                .filter(|(r, _)| !entries.iter().any(|(o, named)| o == r && held_as_named(*o, named)))
                .map(|(r, _)| *r)
                .collect();
            reservations.sort_unstable();
            reservations.dedup();
            let out_of_range = in_use.iter().chain(&reservations).filter(|h| !allocatable.contains(h)).count();
            // A pinned address no IPAddress holds is held for its claim (and not free for others).
            let pinned = self
                .pin_of(pool)
                .map(|(_, held)| held)
                .filter(|h| allocatable.contains(h) && !in_use.contains(h) && !reservations.contains(h));
            let used = in_use.len() + reservations.len() + usize::from(pinned.is_some());
            let total = allocatable.len();
            let expect = |used: usize, out_of_range: usize| {
                json!({
                    "total": total, "used": used, "outOfRange": out_of_range,
                    "free": total.saturating_sub(used - out_of_range),
                })
            };
            // A bound claim whose IPAddress a person deleted while its Cluster is paused (or gone) keeps its address
            // held for it in the term that saw the deletion, and not in a later one (which cannot know it): either
            // count is the truth.
            let kept = claims
                .iter()
                .filter(|c| {
                    let key = key_of(c);
                    self.is_lost(&key)
                        && claim_pool(c) == Some(pool)
                        && !addresses.iter().any(|a| key_of(a) == key)
                        && cluster_of(c).is_some_and(|_| cluster_state(&key.namespace) != Some(false))
                })
                .count();
            let status = object.pointer("/status/ipAddresses").cloned().unwrap_or(Value::Null);
            let kept_counts = (0..=kept).flat_map(|k| (0..=k).map(move |o| (used + k, out_of_range + o)));
            let expect = if kept_counts.clone().any(|(u, o)| status == expect(u, o)) {
                status.clone()
            } else {
                expect(used, out_of_range)
            };
            // An IPAddress the pool does not allocate (an edit that raced an allocation, or passed no webhook) is said.
            let stray = held.iter().find(|(p, h, _)| *p == pool && !allocatable.contains(h));
            if let Some((_, h, key)) = stray {
                let reason = object
                    .pointer("/status/conditions")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .find(|c| c["type"] == "Ready")
                    .and_then(|c| c["reason"].as_str().map(str::to_owned));
                let said =
                    matches!(reason.as_deref(), Some("AddressesOutOfRange" | "DuplicateAddresses" | "InvalidSpec"));
                if !said {
                    return Err(format!(
                        "IPAddress {key} holds {h}, which pool {} does not allocate, and the pool does not say so \
                         (Ready reason {reason:?})",
                        pool.pool_key()
                    ));
                }
            }
            if status != expect {
                return Err(format!(
                    "pool {} shows {status}, the truth is {expect}; the index holds {}",
                    pool.pool_key(),
                    self.index_view(pool)
                ));
            }
            // Every address recorded as moved away is still recorded: in the pool's annotation, or, while that has no
            // room, by the mark on the IPAddress the move left behind (found by seed 20057241 of the soak).
            let marked: Vec<Held> = addresses
                .iter()
                .filter(|a| is_marked_moved_away(a) && pool_of_address(a) == Some(pool))
                .filter_map(|a| Held::of_address(pool, a))
                .collect();
            for (h, e) in &self.elsewhere {
                if pool == PoolId::Global && e.protected && !reserved.contains(h) && !marked.contains(h) {
                    return Err(format!("the reservation of {h} (moved away) vanished from the pool's annotation"));
                }
            }
            // The addresses a claim whose IPAddress a person deleted may still hold (above) are not free to others.
            let kept_addresses: Vec<Held> = if kept > 0 {
                self.actors
                    .lost
                    .iter()
                    .filter(|(k, _)| claims.iter().any(|c| key_of(c) == *k && claim_pool(c) == Some(pool)))
                    .filter_map(|(k, h)| h.filter(|_| !addresses.iter().any(|a| key_of(a) == *k)))
                    .collect()
            } else {
                Vec::new()
            };
            let taken: Vec<Held> = in_use.iter().chain(&reserved).chain(&kept_addresses).copied().collect();
            free.insert(pool, allocatable.into_iter().filter(|a| !taken.iter().any(|t| t.overlaps(*a))).collect());
        }
        for c in &claims {
            let key = key_of(c);
            let paused_cluster = cluster_of(c).map(|_| cluster_state(&key.namespace));
            if !c["metadata"]["deletionTimestamp"].is_null() {
                if paused_cluster != Some(Some(true)) {
                    return Err(format!("claim {key} is stuck being deleted"));
                }
                continue;
            }
            if self.options.sharded
                && claim_pool(c) == Some(SHARD_POOL)
                && self.object(SHARD_POOL.server_kind(), &SHARD_POOL.key()).is_some()
            {
                check_served_by_its_shard(c)?;
                if watch_filter_of(c) != Some(SHARD) {
                    continue;
                }
            }
            let bound = c.pointer("/status/addressRef/name").and_then(Value::as_str).is_some_and(|n| !n.is_empty());
            // A bound claim whose IPAddress a person deleted and that has none again yet waits for an address like an
            // unbound one (a former leader knew its address, this one reads it from the claim's condition).
            // While its Cluster is paused (or gone), only an IPAddress of its name holding the address it lost makes
            // it bound again: a deposed leader's late create of another address is one the manager lets go once it
            // may act (seed 510571539). Otherwise it has let it go and made its own by now (helper-63 F1).
            let frozen = matches!(paused_cluster, Some(None | Some(true)));
            let lost = self.actors.lost.iter().any(|(k, held)| {
                *k == key
                    && !addresses.iter().any(|a| {
                        key_of(a) == key
                            && (!frozen
                                || held
                                    .is_none_or(|h| pool_of_address(a).and_then(|p| Held::of_address(p, a)) == Some(h)))
                    })
            });
            let bound = bound && !lost;
            // A claim whose IPAddress a person deleted, and whose pool went meanwhile (nothing held the pool's
            // deletion any more), is bound to nothing and says so.
            let pool_gone = claim_pool(c).is_none_or(|p| self.object(p.server_kind(), &p.key()).is_none());
            if lost && pool_gone {
                continue;
            }
            if bound {
                let ready = c
                    .pointer("/status/conditions")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .any(|x| x["type"] == "Ready" && x["status"] == "True");
                if !ready {
                    return Err(format!("claim {key} is bound but not Ready: {}", c["status"]));
                }
                continue;
            }
            if matches!(paused_cluster, Some(None | Some(true))) {
                continue;
            }
            let Some(pool) = claim_pool(c) else { continue };
            let Some(free) = free.get(&pool) else { continue };
            // An IPAddress of its name in another pool blocks it (IPAddress specs are immutable).
            if addresses.iter().any(|a| key_of(a) == key) {
                continue;
            }
            let requested = c
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(REQUESTED_ADDRESS_ANNOTATION))
                .and_then(Value::as_str);
            // A pinned address is its claim's only; the pinned claim takes it (docs/compatibility.md D14).
            let pin = self.pin_of(pool);
            let others_pin = |h: &Held| pin.as_ref().is_some_and(|(to, p)| p == h && !to.matches(&key));
            let own_pin = pin.as_ref().filter(|(to, _)| to.matches(&key)).map(|(_, p)| *p);
            let is_free = |h: Held| free.contains(&h);
            let can = match (requested, own_pin) {
                (Some(r), Some(p)) => p.address().to_string() == r && is_free(p),
                (None, Some(p)) => {
                    is_free(p)
                        || !self.shapes.get(&pool).is_some_and(|s| s.allocatable(pool).contains(&p))
                            && free.iter().any(|h| !others_pin(h))
                }
                (Some(r), None) => free.iter().any(|h| h.address().to_string() == r && !others_pin(h)),
                (None, None) => free.iter().any(|h| !others_pin(h)),
            };
            if can {
                return Err(format!(
                    "claim {key} waits while pool {} has a free address ({}): {}",
                    pool.pool_key(),
                    free.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "),
                    c["status"]
                ));
            }
        }
        self.check_returned(&claims, &addresses)
    }

    /// The claim `key` (UID `uid`) came back with its Cluster or a restore, holding `held`: checked by
    /// [`Self::check_returned`] from now on.
    pub(super) fn came_back(&mut self, uid: String, key: ObjectKey, held: Held) {
        self.actors.stripped.retain(|(k, _)| *k != key);
        self.returned.push((uid, key, held));
    }

    /// A claim that came back with its Cluster, still here (the same UID), keeps the IPAddress it came back with (its
    /// machine uses that address), and once bound to it, the address is no longer reserved as moved away.
    fn check_returned(&self, claims: &[Value], addresses: &[Value]) -> Result<(), String> {
        let pool = PoolId::Global;
        let reserved: Vec<Held> = self
            .object(pool.server_kind(), &pool.key())
            .map(|o| entries_of(&o).iter().filter_map(|e| Held::of_entry(pool, e)).collect())
            .unwrap_or_default();
        for (uid, key, held) in &self.returned {
            let Some(claim) = claims.iter().find(|c| c["metadata"]["uid"].as_str() == Some(uid)) else { continue };
            if !claim["metadata"]["deletionTimestamp"].is_null() {
                continue;
            }
            // Restored by Velero over an address the manager handed out before its watch showed the restore (the
            // conflict `check_create` marks): the bound claim keeps it, and the restored one is withdrawn (seed
            // 150020028, helper-20).
            if self.actors.velero_returned.get(uid).is_some_and(|ip| self.actors.velero_duplicates.contains(ip)) {
                continue;
            }
            // Its pool deleted since (or being deleted: nothing is made in it again), the garbage collector takes its
            // IPAddress (every owner reference dangles).
            let pool_now = claim_pool(claim).and_then(|p| self.object(p.server_kind(), &p.key()));
            if pool_now.is_none_or(|p| !p["metadata"]["deletionTimestamp"].is_null()) {
                continue;
            }
            // Restored by Velero without its status (it was told of no address), its restored IPAddress deleted before
            // it adopted it, by a person or by the garbage collector (its pool deleted and made again): it knows no
            // address to ask for (seeds 400062764, 400344446).
            if self.actors.velero_returned.contains_key(uid) && self.actors.stripped.contains(&(key.clone(), *held)) {
                continue;
            }
            let address = addresses.iter().find(|a| key_of(a) == *key);
            let holds = address.and_then(|a| Held::of_address(pool, a)) == Some(*held);
            // A person deleted its IPAddress while its Cluster is paused or gone: it waits with its address held (as
            // in the bound claims' check), and makes it again once the Cluster is unpaused (seed 120260858).
            let cluster = self.object(Kind::Cluster, &ObjectKey::new(&key.namespace, CLUSTER));
            let waits = cluster.is_none_or(|c| c.pointer("/spec/paused").and_then(Value::as_bool) == Some(true));
            let lost_waiting =
                address.is_none() && waits && self.actors.lost.iter().any(|(k, h)| k == key && *h == Some(*held));
            if lost_waiting && addresses.iter().any(|a| Held::of_address(pool, a).is_some_and(|h| h.overlaps(*held))) {
                return Err(format!("claim {key} waits for {held}, which another IPAddress holds"));
            }
            // A person deleted its IPAddress, and its address is no longer the pool's (an edit the webhook did not
            // see, or admitted once that IPAddress was gone): it is made again with another address (seeds 150050407,
            // 150126055).
            let stranded = self.actors.stripped.contains(&(key.clone(), *held))
                && claim_pool(claim)
                    .is_some_and(|p| !self.shapes.get(&p).is_some_and(|s| s.allocatable(p).contains(held)));
            if !holds && !lost_waiting && !stranded {
                return Err(format!(
                    "claim {key} came back with {held}, and its IPAddress is gone or holds another address: {}",
                    address.map_or_else(|| "none".to_owned(), |a| describe(Kind::Address, a))
                ));
            }
            let bound = claim.pointer("/status/addressRef/name").and_then(Value::as_str) == Some(&*key.name);
            if bound && reserved.contains(held) {
                return Err(format!("claim {key} is bound again to {held}, which is still reserved as moved away"));
            }
        }
        Ok(())
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
