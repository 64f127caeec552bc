//! Leader election on a `coordination.k8s.io/v1` Lease, with the guarantee of client-go's leader election, and a
//! [`Fence`] that every allocating write checks.
//!
//! The guarantee. A leader counts its term from the moment it *sent* its last successful renewal and ends it on its
//! own clock `renew_deadline` later, whatever the API server or the network does meanwhile. That clock is
//! `CLOCK_BOOTTIME`, which keeps counting while the machine or its VM is suspended (`CLOCK_MONOTONIC`, tokio's, stops):
//! a leader frozen for longer than its term resumes with the term over, not with one it believes still valid. Any other
//! replica counts `lease_duration` (the record's `leaseDurationSeconds`) from the moment it *received* a record it had
//! not seen before, so it cannot take the Lease over before the leader's term has ended as long as
//! `lease_duration − renew_deadline` covers (a) the difference in rate between the two replicas' clocks over one
//! lease duration (wall-clock offsets do not matter: only durations on each replica's own clock are compared) and
//! (b) the time a write the leader sent before its term ended can take to reach the API server. With the defaults
//! (15 s and 10 s) that margin is 5 s. A write that leaves after the term ended is never sent: [`Fence::guard`]
//! refuses it, and drops one still in flight when the term ends.
//!
//! Renewals are read-modify-write updates guarded by the Lease's resourceVersion, so two replicas can never both
//! succeed in taking the same Lease. A leader that stops (SIGTERM) releases the Lease with the same margin: once its
//! writes stopped it records itself as holder for `lease_duration − renew_deadline` more, so that the next leader,
//! counting from when it sees that record, starts no sooner after the last write than it would after an expiry
//! (an empty holder would let it start at once, while writes the old leader sent can still land).

use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

mod timings;
pub use timings::Timings;
use timings::{jittered, released, seconds};

/// How a Lease holder's identity names its manager's `--watch-filter` (after the host and a random part): a replica
/// waiting for a Lease held by another shard says so, since it never leads while they share it.
const SHARD_MARK: &str = "_watch-filter=";

/// The `--watch-filter` a holder identity names; `None` when it names none (no filter, or the Go provider).
pub fn shard_of(identity: &str) -> Option<&str> {
    identity.split_once(SHARD_MARK).map(|(_, shard)| shard)
}

/// This replica's Lease holder identity: the host, a random part, and the `--watch-filter` it serves, if any.
pub fn holder_identity(shard: Option<&str>) -> String {
    use std::hash::{BuildHasher, RandomState};
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "manager".to_owned());
    let id = format!("{host}_{:016x}", RandomState::new().hash_one(std::process::id()));
    match shard {
        Some(shard) => format!("{id}{SHARD_MARK}{shard}"),
        None => id,
    }
}

/// The writes of a leader's term go through this. `Fence::none()` (no leader election: a single replica) lets
/// everything through.
#[derive(Clone, Debug, Default)]
pub struct Fence {
    term: Option<Arc<Term>>,
}

/// The write was not sent, or was dropped in flight: this replica's term has ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("this replica no longer holds the leader election lease; the write was not made")]
pub struct Fenced;

/// The clock terms are timed on.
#[derive(Clone, Debug)]
pub enum TermClock {
    /// `CLOCK_BOOTTIME`: it counts the time the machine was suspended.
    Boot,
    /// Seconds set by hand (tests: a suspend is a jump of this clock while tokio's stands still).
    #[cfg(test)]
    Manual(Arc<Mutex<Duration>>),
    /// Tokio's clock since an instant (tests with paused time).
    #[cfg(test)]
    Tokio(Instant),
    /// The simulation's clock, in milliseconds (`crate::sim`).
    #[cfg(test)]
    Simulated(Arc<std::sync::atomic::AtomicI64>),
}

impl TermClock {
    /// The time since boot on this clock.
    pub fn now(&self) -> Duration {
        match self {
            TermClock::Boot => {
                let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
                Duration::new(u64::try_from(t.tv_sec).unwrap_or(0), u32::try_from(t.tv_nsec).unwrap_or(0))
            }
            #[cfg(test)]
            TermClock::Manual(t) => *t.lock(),
            #[cfg(test)]
            TermClock::Tokio(since) => since.elapsed(),
            #[cfg(test)]
            TermClock::Simulated(ms) => {
                Duration::from_millis(u64::try_from(ms.load(std::sync::atomic::Ordering::Relaxed)).unwrap_or(0))
            }
        }
    }
}

/// How long a term's end is waited for in one sleep: tokio's timers run on the monotonic clock, so after a suspend
/// the term's end on the boot clock is noticed within this.
const TERM_CHECK: Duration = Duration::from_millis(250);

/// One leader term: it ends when `valid_until` (on `clock`) passes without a renewal, or when `ended` is cancelled.
#[derive(Debug)]
struct Term {
    clock: TermClock,
    valid_until: Mutex<Duration>,
    ended: CancellationToken,
}

impl Term {
    fn new(clock: TermClock, valid_until: Duration) -> Self {
        Term { clock, valid_until: Mutex::new(valid_until), ended: CancellationToken::new() }
    }

    fn valid_until(&self) -> Duration {
        *self.valid_until.lock()
    }

    /// A renewal succeeded: the term runs until `until`, if later (never a term that has already ended).
    fn extend_to(&self, until: Duration) {
        let mut valid_until = self.valid_until.lock();
        if !self.ended.is_cancelled() && self.clock.now() < *valid_until {
            *valid_until = (*valid_until).max(until);
        }
    }

    /// How long the term still runs, on its clock; zero once over.
    fn remaining(&self) -> Duration {
        self.valid_until().saturating_sub(self.clock.now())
    }

    fn holds(&self) -> bool {
        !self.ended.is_cancelled() && !self.remaining().is_zero()
    }

    /// Resolves when the term ends, on the clock or by `end()`.
    async fn ended(&self) {
        loop {
            let remaining = self.remaining();
            if remaining.is_zero() {
                self.ended.cancel();
                return;
            }
            tokio::select! {
                _ = self.ended.cancelled() => return,
                // A renewal may move the deadline while we sleep; a suspend may pass it.
                _ = tokio::time::sleep(remaining.min(TERM_CHECK)) => {}
            }
        }
    }
}

impl Fence {
    /// No leader election: every write goes through.
    pub fn none() -> Self {
        Self { term: None }
    }

    /// The fence of a term that ended already: no write passes it.
    #[cfg(test)]
    pub fn ended_term() -> Self {
        let clock = TermClock::Tokio(Instant::now());
        Self { term: Some(Arc::new(Term::new(clock, Duration::ZERO))) }
    }

    /// Whether a write may be sent now.
    pub fn holds(&self) -> bool {
        self.term.as_ref().is_none_or(|t| t.holds())
    }

    /// Runs `write` if this replica leads now, and drops it (closing its request) if the term ends before it
    /// completes.
    ///
    /// Guarantees: no write starts after the term is known to have ended, and none is awaited past it: its answer is
    /// dropped, so no decision of an ended term follows from it.
    ///
    /// Assumptions: a request sent before the term ended may still land at the API server after it (dropping the
    /// future cannot unsend it): each write that decides an address carries a precondition (a create's is its name,
    /// refused as AlreadyExists; the others test a UID or a resourceVersion), and the next term reads before it trusts,
    /// so a deposed leader's late write is found and undone.
    pub async fn guard<F: std::future::Future>(&self, write: F) -> Result<F::Output, Fenced> {
        let Some(term) = &self.term else { return Ok(write.await) };
        if !term.holds() {
            return Err(Fenced);
        }
        tokio::select! {
            biased;
            _ = term.ended() => Err(Fenced),
            output = write => Ok(output),
        }
    }

    /// Resolves when the term ends (never, without leader election).
    pub async fn ended(&self) {
        match &self.term {
            Some(term) => term.ended().await,
            None => std::future::pending().await,
        }
    }
}

/// A term that the simulation (`crate::sim`) begins, renews and loses by hand, as [`Elector::acquire`] and
/// [`Elector::keep`] do with the Lease, so that its writes pass the real [`Fence`] on the simulated clock.
#[cfg(test)]
pub struct SimulatedTerm(Arc<Term>);

#[cfg(test)]
impl SimulatedTerm {
    /// A term valid for `valid_for` from now on `clock`, and its fence.
    pub fn begin(clock: TermClock, valid_for: Duration) -> (Fence, SimulatedTerm) {
        let term = Arc::new(Term::new(clock.clone(), clock.now() + valid_for));
        (Fence { term: Some(term.clone()) }, SimulatedTerm(term))
    }

    /// A renewal sent now succeeded: valid for `valid_for` more (never a term that has already ended, as `keep`).
    pub fn renew(&self, valid_for: Duration) {
        self.0.extend_to(self.0.clock.now() + valid_for);
    }

    /// Another replica holds the Lease now.
    pub fn lose(&self) {
        self.0.ended.cancel();
    }

    /// Whether the term still runs (writes pass its fence).
    pub fn holds(&self) -> bool {
        self.0.holds()
    }
}

/// How a term ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TermEnd {
    /// No renewal succeeded within the renew deadline: writes stopped on the local clock. The Lease may still name
    /// this replica (an API server outage), so it stays a candidate and resumes at once when it can renew again.
    DeadlinePassed,
    /// Another replica holds the Lease now.
    Lost { holder: String },
    /// Shutdown was asked for.
    Stopped,
}

/// A replica's view of the Lease, as client-go's `LeaderElector` keeps it.
pub struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    timings: Timings,
    /// The clock our terms are timed on.
    clock: TermClock,
    /// The last record seen (its resourceVersion, holder and duration) and when it was first seen, on our clock.
    observed: Option<Observed>,
}

#[derive(Clone, Debug)]
struct Observed {
    resource_version: Option<String>,
    holder: String,
    duration: Duration,
    at: Instant,
}

/// What one attempt found.
enum Attempt {
    /// We hold the Lease; the term is valid from the given time on the term clock (when the successful request was
    /// sent).
    Held { sent: Duration },
    /// Someone else holds a valid Lease.
    Other { holder: String },
    /// The attempt failed (transport, timeout, conflict): try again.
    Failed,
}

impl Elector {
    pub fn new(client: Client, namespace: &str, name: &str, identity: &str, timings: Timings) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            name: name.to_owned(),
            identity: identity.to_owned(),
            timings,
            clock: TermClock::Boot,
            observed: None,
        }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Tries every retry period until this replica holds the Lease; `None` on `stop`.
    pub async fn acquire(&mut self, stop: &CancellationToken) -> Option<Fence> {
        let mut waiting_for: Option<String> = None;
        loop {
            match self.try_acquire_or_renew(None).await {
                Attempt::Held { sent } => {
                    let term = Term::new(self.clock.clone(), sent + self.timings.renew_deadline);
                    return Some(Fence { term: Some(Arc::new(term)) });
                }
                Attempt::Other { holder } => {
                    if waiting_for.as_ref() != Some(&holder) {
                        let (theirs, ours) = (shard_of(&holder), shard_of(&self.identity));
                        if theirs.is_some() && theirs != ours {
                            tracing::error!(
                                lease = %self.name,
                                %holder,
                                "the lease is held by the manager of another shard (--watch-filter={}): this one \
                                 (--watch-filter={}) never leads while they share it, and its claims wait; give each \
                                 its own --leader-election-id, or run them in different namespaces",
                                theirs.unwrap_or_default(),
                                ours.unwrap_or_default()
                            );
                        } else {
                            info!(lease = %self.name, %holder, "another replica holds the lease; waiting");
                        }
                        waiting_for = Some(holder);
                    }
                }
                Attempt::Failed => {}
            }
            tokio::select! {
                _ = stop.cancelled() => return None,
                _ = tokio::time::sleep(jittered(self.timings.retry_period)) => {}
            }
        }
    }

    /// Renews the Lease every retry period while `fence` leads; returns how the term ended. The fence's term is
    /// extended by each successful renewal and ends on the local clock when none succeeded within the renew
    /// deadline.
    pub async fn keep(&mut self, fence: &Fence, stop: &CancellationToken) -> TermEnd {
        let Some(term) = fence.term.clone() else { return TermEnd::Stopped };
        loop {
            tokio::select! {
                _ = stop.cancelled() => return TermEnd::Stopped,
                _ = term.ended() => return TermEnd::DeadlinePassed,
                _ = tokio::time::sleep(self.timings.retry_period) => {}
            }
            let attempt = tokio::select! {
                _ = term.ended() => return TermEnd::DeadlinePassed,
                attempt = self.try_acquire_or_renew(Some(term.remaining())) => attempt,
            };
            match attempt {
                Attempt::Held { sent } => term.extend_to(sent + self.timings.renew_deadline),
                Attempt::Other { holder } => {
                    term.ended.cancel();
                    return TermEnd::Lost { holder };
                }
                Attempt::Failed => {
                    debug!(lease = %self.name, "lease renewal failed; retrying");
                }
            }
        }
    }

    /// Gives the Lease up on shutdown, once our writes stopped: it names us for `lease_duration − renew_deadline`
    /// more, counted from now. Another replica (ours or client-go's) takes it over once that has passed since it saw
    /// this record: the margin an expiry leaves after the last write (module docs), without waiting the rest of a
    /// lease duration.
    pub async fn release(&mut self) {
        let Ok(Ok(Some(mut lease))) =
            tokio::time::timeout(self.timings.retry_period, self.api.get_opt(&self.name)).await
        else {
            return;
        };
        let spec = lease.spec.get_or_insert_with(Default::default);
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return;
        }
        released(spec, self.timings, Timestamp::now());
        match tokio::time::timeout(
            self.timings.retry_period,
            self.api.replace(&self.name, &PostParams::default(), &lease),
        )
        .await
        {
            Ok(Ok(_)) => info!(lease = %self.name, "released the lease"),
            Ok(Err(e)) => warn!(lease = %self.name, error = %e, "releasing the lease"),
            Err(_) => warn!(lease = %self.name, "releasing the lease timed out"),
        }
    }

    /// client-go's `tryAcquireOrRenew`. `remaining`: how long the current term still runs; the request is abandoned
    /// then.
    async fn try_acquire_or_renew(&mut self, remaining: Option<Duration>) -> Attempt {
        // A request that hangs (an API server waiting for etcd) is abandoned after two retry periods and tried again,
        // so that the Lease is taken back within moments of the API server answering; never past the term's end.
        let limit = (self.timings.retry_period * 2).max(Duration::from_secs(1));
        let limit = remaining.map_or(limit, |r| r.min(limit));
        match tokio::time::timeout(limit, self.attempt()).await {
            Ok(Ok(attempt)) => attempt,
            Ok(Err(e)) => {
                debug!(lease = %self.name, error = %e, "leader election request failed");
                Attempt::Failed
            }
            Err(_) => {
                debug!(lease = %self.name, "leader election request timed out");
                Attempt::Failed
            }
        }
    }

    async fn attempt(&mut self) -> Result<Attempt, kube::Error> {
        let sent = self.clock.now();
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let now = MicroTime(Timestamp::now());
            let lease = Lease {
                metadata: ObjectMeta { name: Some(self.name.clone()), ..Default::default() },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(seconds(self.timings.lease_duration)),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            let sent = self.clock.now();
            let created = self.api.create(&PostParams::default(), &lease).await?;
            self.observe(&created);
            return Ok(Attempt::Held { sent });
        };
        self.observe(&lease);
        let observed = self.observed.clone().expect("observed just now");
        let ours = observed.holder == self.identity;
        if !observed.holder.is_empty() && !ours && observed.at + observed.duration > Instant::now() {
            return Ok(Attempt::Other { holder: observed.holder });
        }
        let now = MicroTime(Timestamp::now());
        let spec = lease.spec.get_or_insert_with(Default::default);
        if !ours {
            spec.acquire_time = Some(now.clone());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        spec.holder_identity = Some(self.identity.clone());
        spec.lease_duration_seconds = Some(seconds(self.timings.lease_duration));
        spec.renew_time = Some(now);
        // The term counts from the GET: the record we update is the one we read then, and a successful update proves
        // nobody changed it since (resourceVersion precondition of `replace`).
        let updated = self.api.replace(&self.name, &PostParams::default(), &lease).await?;
        self.observe(&updated);
        if !ours {
            info!(lease = %self.name, identity = %self.identity, "acquired the lease");
        }
        Ok(Attempt::Held { sent })
    }

    /// Records the Lease as seen now when it changed since we last looked (client-go's `observedTime`).
    fn observe(&mut self, lease: &Lease) {
        let resource_version = lease.metadata.resource_version.clone();
        if self.observed.as_ref().is_some_and(|o| o.resource_version == resource_version) {
            return;
        }
        let spec = lease.spec.clone().unwrap_or_default();
        self.observed = Some(Observed {
            resource_version,
            holder: spec.holder_identity.unwrap_or_default(),
            duration: Duration::from_secs(u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0))
                .max(Duration::from_secs(1)),
            at: Instant::now(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timings_follow_client_go_rules() {
        assert_eq!(Timings::default().validate(), Ok(()));
        let t = |l, r, p| Timings {
            lease_duration: Duration::from_secs(l),
            renew_deadline: Duration::from_secs(r),
            retry_period: Duration::from_secs(p),
        };
        assert!(t(10, 10, 2).validate().unwrap_err().contains("--leader-elect-lease-duration"));
        assert!(t(15, 2, 2).validate().unwrap_err().contains("--leader-elect-renew-deadline"));
        assert!(t(15, 10, 0).validate().unwrap_err().contains("--leader-elect-retry-period"));
    }

    fn term(valid_for: Duration) -> Fence {
        let clock = TermClock::Tokio(Instant::now());
        Fence { term: Some(Arc::new(Term::new(clock, valid_for))) }
    }

    #[tokio::test(start_paused = true)]
    async fn a_term_ends_on_the_local_clock_and_drops_writes_in_flight() {
        let fence = term(Duration::from_secs(10));
        assert!(fence.holds());
        assert_eq!(fence.guard(async { 1 }).await, Ok(1));
        // A write still waiting for its answer when the term ends is dropped.
        let slow = fence.guard(tokio::time::sleep(Duration::from_secs(30)));
        assert_eq!(slow.await, Err(Fenced));
        assert!(!fence.holds());
        // After the end, no write is even started.
        let mut started = false;
        assert_eq!(fence.guard(async { started = true }).await, Err(Fenced));
        assert!(!started);
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_moves_the_end_and_an_ended_term_stays_ended() {
        let fence = term(Duration::from_secs(10));
        let t = fence.term.clone().expect("a term");
        tokio::time::sleep(Duration::from_secs(8)).await;
        *t.valid_until.lock() = t.clock.now() + Duration::from_secs(10);
        tokio::time::sleep(Duration::from_secs(8)).await;
        assert!(fence.holds(), "renewed at 8 s, so it holds at 16 s");
        fence.ended().await;
        assert!(!fence.holds());
        *t.valid_until.lock() = t.clock.now() + Duration::from_secs(10);
        assert!(!fence.holds(), "a term that ended is never revived");
    }

    /// A leader suspended (its VM paused) for longer than its term resumes with the term over. The
    /// boot clock jumps while tokio's monotonic clock stands still, as in a suspend.
    #[tokio::test(start_paused = true)]
    async fn a_term_counts_the_time_the_machine_was_suspended() {
        let boot = Arc::new(Mutex::new(Duration::from_secs(100)));
        let fence =
            Fence { term: Some(Arc::new(Term::new(TermClock::Manual(boot.clone()), Duration::from_secs(110)))) };
        assert!(fence.holds());
        let in_flight = fence.guard(std::future::pending::<()>());
        let suspended = async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            *boot.lock() += Duration::from_secs(60);
        };
        let (dropped, ()) = tokio::join!(in_flight, suspended);
        assert_eq!(dropped, Err(Fenced), "the write in flight across the suspend is dropped");
        assert!(!fence.holds(), "the term ended during the suspend");
        assert!(TermClock::Boot.now() > Duration::ZERO, "CLOCK_BOOTTIME reads");
    }

    /// A release leaves the Lease ours for the margin an expiry leaves, instead of empty.
    #[test]
    fn a_release_keeps_the_margin_of_an_expiry() {
        let mut spec = LeaseSpec {
            holder_identity: Some("me".to_owned()),
            lease_duration_seconds: Some(15),
            ..Default::default()
        };
        let now = Timestamp::from_second(1_000_000).expect("time");
        released(&mut spec, Timings::default(), now);
        assert_eq!(spec.holder_identity.as_deref(), Some("me"), "an empty holder lets the next leader start at once");
        assert_eq!(spec.lease_duration_seconds, Some(5), "lease duration 15 s − renew deadline 10 s");
        assert_eq!(spec.renew_time, Some(MicroTime(now)));
        let odd = Timings {
            lease_duration: Duration::from_millis(2500),
            renew_deadline: Duration::from_secs(2),
            ..Timings::default()
        };
        released(&mut spec, odd, now);
        assert_eq!(spec.lease_duration_seconds, Some(1), "rounded up, never 0");
    }

    #[tokio::test]
    async fn no_leader_election_lets_everything_through() {
        let fence = Fence::none();
        assert!(fence.holds());
        assert_eq!(fence.guard(async { 2 }).await, Ok(2));
    }
}
