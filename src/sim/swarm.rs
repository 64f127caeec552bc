//! A seed's options and its swarm: how many replicas, how long, how late a deposed leader's writes may land, and how
//! much each kind of step and user action weighs (keyed by [`Step`] and [`User`], never by position).

use super::model::PoolId;
use super::rng::Rng;
use crate::controllers;

/// When the writes of a term that ended may still land.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Late {
    /// Before the next term begins: the lease's margin holds (docs/operations.md, high availability).
    BeforeNextTerm,
    /// At any time, also after the next leader started (a write slower than the margin): a duplicate may appear for
    /// a moment, but no two bound claims ever share an address, and none is left after quiescence.
    Anytime,
}

#[derive(Clone, Debug)]
pub struct Options {
    pub replicas: usize,
    pub steps: usize,
    pub late: Late,
    /// Keep a readable line per step (replays; a run that found nothing does not need one).
    pub trace: bool,
    /// Velero restores a namespace now and then (`SIM_VELERO=0` turns it off, to replay a seed found before it).
    pub velero: bool,
    /// A second manager of ours runs beside the first, with `--watch-filter` [`SHARD`]: pool `b/ip` is its shard's,
    /// and most claims on it carry its label (`SIM_SHARDS=0` turns it off).
    pub sharded: bool,
}

/// The `--watch-filter` of the second manager, and the label of its shard's pool and claims.
pub const SHARD: &str = "shard-b";

/// The pool of the second manager's shard.
pub const SHARD_POOL: PoolId = PoolId::Ip(1);

impl Options {
    /// The options of a seed: its own number of replicas, length and kind of lateness.
    pub fn for_seed(seed: u64) -> Options {
        let mut rng = Rng::new(seed.rotate_left(17));
        Options {
            replicas: 2 + rng.below(2),
            steps: 150 + rng.below(350),
            late: if rng.chance(25) { Late::Anytime } else { Late::BeforeNextTerm },
            trace: false,
            velero: std::env::var("SIM_VELERO").map_or(true, |v| v != "0"),
            // Drawn last, so that the draws above stay those of the seeds recorded before it.
            sharded: rng.chance(30) && std::env::var("SIM_SHARDS").map_or(true, |v| v != "0"),
        }
    }
}

/// A kind of choice the swarm weighs: its variants in the order of their weights. The order is part of every seed's
/// schedule (the generator picks an index), so a new variant goes last.
pub(super) trait Choice: Copy + std::fmt::Debug + 'static {
    const ALL: &'static [Self];
}

/// One weight per variant of `C`.
#[derive(Clone, Debug)]
pub(super) struct Weights<C: Choice> {
    of: Vec<u32>,
    _choice: std::marker::PhantomData<C>,
}

impl<C: Choice + PartialEq> Weights<C> {
    fn new(mut weight: impl FnMut(C) -> u32) -> Self {
        Weights { of: C::ALL.iter().map(|c| weight(*c)).collect(), _choice: std::marker::PhantomData }
    }

    fn index(choice: C) -> usize {
        C::ALL.iter().position(|c| *c == choice).unwrap_or_default()
    }

    pub(super) fn of(&self, choice: C) -> u32 {
        self.of[Self::index(choice)]
    }

    fn set(&mut self, choice: C, weight: u32) {
        let i = Self::index(choice);
        self.of[i] = weight;
    }

    /// One of the choices `allowed` says may be taken, with probability proportional to its weight; `None` when none
    /// may (or all weigh 0).
    pub(super) fn pick(&self, rng: &mut Rng, allowed: impl Fn(C) -> bool) -> Option<C> {
        let weights: Vec<u32> = C::ALL.iter().zip(&self.of).map(|(c, w)| if allowed(*c) { *w } else { 0 }).collect();
        rng.weighted(&weights).map(|i| C::ALL[i])
    }
}

/// A step of [`super::world::World::act`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// A watch delivers its next event.
    Deliver,
    /// A request in flight is answered.
    Answer,
    /// A claim worker takes a claim.
    ClaimWorker,
    /// The pool worker takes a pool.
    PoolWorker,
    /// The orphan check of a claim gone.
    OrphanCheck,
    /// The orphan sweep.
    Sweep,
    /// The moved-away writer takes a pool.
    MovedAwayWriter,
    /// A delayed requeue fires.
    DelayedRequeue,
    /// The pool status coalescer.
    StatusCoalescer,
    /// A user or clusterctl acts ([`User`]).
    User,
    /// A watch expires and lists again.
    WatchExpiry,
    /// The leader's term ends (another replica takes the lease, or this one stops renewing it).
    TermEnd,
    /// A replica's term begins.
    TermStart,
    /// The API server restarts.
    ApiServerRestart,
    /// A write of a term that ended lands late (or is lost).
    LateWrite,
}

impl Choice for Step {
    const ALL: &'static [Step] = &[
        Step::Deliver,
        Step::Answer,
        Step::ClaimWorker,
        Step::PoolWorker,
        Step::OrphanCheck,
        Step::Sweep,
        Step::MovedAwayWriter,
        Step::DelayedRequeue,
        Step::StatusCoalescer,
        Step::User,
        Step::WatchExpiry,
        Step::TermEnd,
        Step::TermStart,
        Step::ApiServerRestart,
        Step::LateWrite,
    ];
}

impl Step {
    fn base_weight(self) -> u32 {
        match self {
            Step::Deliver | Step::Answer => 30,
            Step::ClaimWorker => 14,
            Step::PoolWorker | Step::MovedAwayWriter | Step::DelayedRequeue => 4,
            Step::OrphanCheck => 5,
            Step::Sweep | Step::WatchExpiry | Step::TermEnd | Step::ApiServerRestart => 1,
            Step::StatusCoalescer => 2,
            Step::User => 10,
            Step::TermStart => 12,
            Step::LateWrite => 3,
        }
    }

    /// A fault a seed may leave out entirely.
    fn is_fault(self) -> bool {
        matches!(self, Step::WatchExpiry | Step::TermEnd | Step::ApiServerRestart)
    }
}

/// What a user (or clusterctl, Velero, the garbage collector, another provider) does in [`super::world::World::user`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum User {
    CreateClaim,
    DeleteClaim,
    PauseOrUnpauseCluster,
    EditPool,
    DeleteOrCreatePool,
    MoveAway,
    MoveBack,
    OperatorRelease,
    CreateOrDeleteCluster,
    GarbageCollector,
    ClaimDeletedFinalizersStripped,
    AnotherProvider,
    BoundIpAddressDeletedFinalizerStripped,
}

impl Choice for User {
    const ALL: &'static [User] = &[
        User::CreateClaim,
        User::DeleteClaim,
        User::PauseOrUnpauseCluster,
        User::EditPool,
        User::DeleteOrCreatePool,
        User::MoveAway,
        User::MoveBack,
        User::OperatorRelease,
        User::CreateOrDeleteCluster,
        User::GarbageCollector,
        User::ClaimDeletedFinalizersStripped,
        User::AnotherProvider,
        User::BoundIpAddressDeletedFinalizerStripped,
    ];
}

impl User {
    fn base_weight(self) -> u32 {
        match self {
            User::CreateClaim => 40,
            User::DeleteClaim => 22,
            User::PauseOrUnpauseCluster | User::GarbageCollector => 6,
            User::EditPool => 8,
            User::DeleteOrCreatePool => 4,
            User::MoveAway | User::MoveBack | User::BoundIpAddressDeletedFinalizerStripped => 3,
            User::OperatorRelease | User::CreateOrDeleteCluster | User::ClaimDeletedFinalizersStripped => 2,
            User::AnotherProvider => 5,
        }
    }
}

/// Swarm testing (Groce et al.): each seed weighs the kinds of steps its own way (a watch that crawls, users who
/// churn, an API server that fails often), so that the seeds between them reach orders an even mix rarely does.
#[derive(Clone, Debug)]
pub(super) struct Swarm {
    /// How often each watch delivers, relative to the others (in the order of the world's watches).
    pub(super) watch_speed: Vec<u32>,
    /// The weights of `World::act`'s steps.
    pub(super) steps: Weights<Step>,
    /// The weights of `World::user`'s actions.
    pub(super) users: Weights<User>,
    /// Percent of answered requests that fail instead.
    pub(super) failures: u64,
    /// The room of the moved-away annotation: now and then only two entries', so that a move overflows it.
    pub(super) moved_away_max_bytes: usize,
}

/// The rare steps of `World::act` a seed may focus on.
const RARE_STEPS: [Step; 5] = [Step::WatchExpiry, Step::TermEnd, Step::ApiServerRestart, Step::LateWrite, Step::Sweep];

/// The rare actions of `World::user` a seed may focus on.
const RARE_USERS: [User; 8] = [
    User::DeleteOrCreatePool,
    User::MoveAway,
    User::MoveBack,
    User::OperatorRelease,
    User::GarbageCollector,
    User::ClaimDeletedFinalizersStripped,
    User::AnotherProvider,
    User::BoundIpAddressDeletedFinalizerStripped,
];

impl Swarm {
    /// Rare orders get their own weight: in one seed of four, one rare step or user action comes ten times as often
    /// as its usual weight, so that a window it opens (a late write pending, a watch relisting, a move under way) is
    /// also met by the orders that exploit it. Drawn from a generator of its own, so that the other seeds play as
    /// they did; says what it focused on, for the trace.
    pub(super) fn focus(&mut self, seed: u64) -> Option<String> {
        let mut rng = Rng::new(seed ^ 0xF0C5_0000_0000_0001);
        if !rng.chance(25) {
            return None;
        }
        let n = rng.below(RARE_STEPS.len() + RARE_USERS.len());
        let (what, weight) = match RARE_STEPS.get(n) {
            Some(&step) => {
                let weight = self.steps.of(step).max(2) * 10;
                self.steps.set(step, weight);
                (format!("step {step:?}"), weight)
            }
            None => {
                let user = RARE_USERS[n - RARE_STEPS.len()];
                let weight = self.users.of(user).max(2) * 10;
                self.users.set(user, weight);
                (format!("user action {user:?}"), weight)
            }
        };
        Some(format!("this seed focuses on {what} (weight {weight})"))
    }

    /// The swarm of a run with `watches` watches.
    pub(super) fn new(rng: &mut Rng, watches: usize) -> Swarm {
        let watch_speed = (0..watches).map(|_| [1, 3, 10, 30][rng.below(4)]).collect();
        // Drawn in the order of `Step::ALL`, then `User::ALL`: the draws of the seeds recorded before stay theirs.
        let steps = Weights::new(|step: Step| {
            // Each weight from a third to three times its base; a fault now and then left out entirely.
            let factor: u32 = [1, 3, 9][rng.below(3)];
            let weight = (step.base_weight() * factor).div_ceil(3);
            if step.is_fault() && rng.chance(25) { 0 } else { weight }
        });
        let users = Weights::new(|user: User| (user.base_weight() * [1, 3, 9][rng.below(3)]).div_ceil(3));
        let moved_away_max_bytes = if rng.chance(20) { 30 } else { controllers::moved_away::MAX_BYTES };
        Swarm { watch_speed, steps, users, failures: [0, 5, 15, 30][rng.below(4)], moved_away_max_bytes }
    }
}
