//! The work queue of the claim and pool workers, in place of kube's `Controller`: a key is reconciled by one worker at
//! a time, wakes that arrive while it runs fold into one more run, and of two delayed requeues the earlier wins. It
//! keys by our compact keys and gives its memory back once a burst drains (100,000 claims are queued at start-up).
//! Keys added with [`WorkQueue::add_first`] go before the others (a claim waiting for an address before 100,000 bound
//! claims that are only checked). Delayed requeues wait on a timeline of its own, read against its clock: tokio's in
//! the manager, the simulated one in `crate::sim`, which drives this same queue step by step ([`WorkQueue::try_next`],
//! [`WorkQueue::fire_due`]) where the manager's workers await it. It is the one owner of a key's retries: a run ends
//! with [`WorkQueue::finish`], which applies the error policy's answer (`super::retry`). It reports client-go's work
//! queue series per controller (`crate::metrics::QueueSeries`): one queue may serve several controllers (the pool
//! kinds), told apart by a key's class.

use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque, hash_map};
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::retry::{Next, Outcome, Retry, backoff};
use crate::metrics::{QueueGauges, QueueSeries};

/// Collections at most this large keep their capacity; larger ones shrink when they drain.
const KEEP_CAPACITY: usize = 1024;

/// What a queue reads the time from: tokio's clock, or another one (the simulation's).
pub type QueueClock = Arc<dyn Fn() -> Instant + Send + Sync>;

pub struct WorkQueue<K> {
    state: Mutex<State<K>>,
    /// Signalled when `ready` gains a key.
    ready_signal: Notify,
    /// Signalled when a delayed requeue comes due sooner than every other (the timer task sleeps until then).
    timer_signal: Notify,
    clock: Option<QueueClock>,
    gauges: QueueGauges,
    /// The series of each class of keys, and a key's class (an index into it).
    series: Box<[QueueSeries]>,
    class: fn(&K) -> usize,
}

impl<K> Default for WorkQueue<K> {
    fn default() -> Self {
        Self::with_gauges(QueueGauges::default())
    }
}

impl<K> WorkQueue<K> {
    /// A queue that reports its depth into `gauges` (`crate::metrics`), and nothing per controller.
    pub fn with_gauges(gauges: QueueGauges) -> Self {
        Self::with_metrics(gauges, vec![QueueSeries::default()], |_| 0)
    }

    /// A queue that also reports each class of keys into its series: `class` of a key is an index into `series`.
    pub fn with_metrics(gauges: QueueGauges, series: Vec<QueueSeries>, class: fn(&K) -> usize) -> Self {
        assert!(!series.is_empty(), "a queue reports into at least one series");
        let series = series.into_boxed_slice();
        Self {
            state: Mutex::new(State::default()),
            ready_signal: Notify::new(),
            timer_signal: Notify::new(),
            clock: None,
            gauges,
            series,
            class,
        }
    }

    /// The same queue on another clock (the simulation's): delayed requeues come due when [`WorkQueue::fire_due`] is
    /// called at or after their time.
    pub fn with_clock(self, clock: QueueClock) -> Self {
        Self { clock: Some(clock), ..self }
    }

    fn now(&self) -> Instant {
        self.clock.as_ref().map_or_else(Instant::now, |clock| clock())
    }

    fn series(&self, key: &K) -> &QueueSeries {
        // A class out of range would be a bug of the caller; its key is counted in the last series, not lost.
        &self.series[(self.class)(key).min(self.series.len() - 1)]
    }
}

/// What adding a key did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Added {
    /// It waits for a worker now.
    Queued,
    /// It runs now, and runs once more when its worker is done.
    Rerun,
    /// It was queued, or due for another run, already.
    Already,
}

struct State<K> {
    /// Keys waiting for a worker, in order, with when each was added: `first` before `ready`; `queued` holds the
    /// keys of both.
    first: VecDeque<(K, Instant)>,
    ready: VecDeque<(K, Instant)>,
    queued: HashSet<K>,
    /// Keys a worker has now, since when; a key woken meanwhile goes to `rerun` (with when) and back to `ready` when
    /// the worker is done.
    running: HashMap<K, Instant>,
    rerun: HashMap<K, Instant>,
    /// Delayed requeues in the order they come due (ties in the order they were asked for), and each key's place.
    timeline: BTreeMap<(Instant, u64), K>,
    due: HashMap<K, (Instant, u64)>,
    /// Orders requeues due at the same instant.
    asked: u64,
    /// Failed runs in a row, per key that is failing (the backoff).
    failures: HashMap<K, u32>,
    /// Keys whose run failed because the API server did not answer: queued again when it answers.
    parked: HashSet<K>,
}

impl<K> Default for State<K> {
    fn default() -> Self {
        Self {
            first: VecDeque::new(),
            ready: VecDeque::new(),
            queued: HashSet::new(),
            running: HashMap::new(),
            rerun: HashMap::new(),
            timeline: BTreeMap::new(),
            due: HashMap::new(),
            asked: 0,
            failures: HashMap::new(),
            parked: HashSet::new(),
        }
    }
}

fn shrink<T: Eq + Hash>(set: &mut HashSet<T>) {
    if set.len() * 4 < set.capacity() && set.capacity() > KEEP_CAPACITY {
        set.shrink_to(KEEP_CAPACITY.max(set.len() * 2));
    }
}

fn shrink_map<T: Eq + Hash, V>(map: &mut HashMap<T, V>) {
    if map.len() * 4 < map.capacity() && map.capacity() > KEEP_CAPACITY {
        map.shrink_to(KEEP_CAPACITY.max(map.len() * 2));
    }
}

impl<K: Clone + Eq + Hash> State<K> {
    /// Queues `key` at the back of `ready`, or of `first`, as added at `at`; a key queued already keeps its place.
    fn add(&mut self, key: K, first: bool, at: Instant) -> Added {
        self.undelay(&key);
        if self.running.contains_key(&key) {
            match self.rerun.entry(key) {
                hash_map::Entry::Occupied(_) => Added::Already,
                hash_map::Entry::Vacant(vacant) => {
                    vacant.insert(at);
                    Added::Rerun
                }
            }
        } else if self.queued.insert(key.clone()) {
            if first {
                self.first.push_back((key, at))
            } else {
                self.ready.push_back((key, at))
            }
            Added::Queued
        } else {
            Added::Already
        }
    }

    /// Drops `key`'s delayed requeue, if it has one.
    fn undelay(&mut self, key: &K) {
        if let Some(place) = self.due.remove(key) {
            self.timeline.remove(&place);
        }
    }

    /// Sets `key`'s delayed requeue to `at`, unless one is due earlier; whether it is now the first one due.
    fn delay(&mut self, key: K, at: Instant) -> bool {
        if let Some(&(earlier, _)) = self.due.get(&key) {
            if earlier <= at {
                return false;
            }
            self.undelay(&key);
        }
        self.asked += 1;
        let place = (at, self.asked);
        let first = self.timeline.first_key_value().is_none_or(|(&(next, _), _)| at < next);
        self.timeline.insert(place, key.clone());
        self.due.insert(key, place);
        first
    }

    fn pop(&mut self) -> Option<(K, Instant)> {
        self.first.pop_front().or_else(|| self.ready.pop_front())
    }

    fn waiting(&self) -> usize {
        self.first.len() + self.ready.len()
    }

    fn shrink_when_drained(&mut self) {
        for lane in [&mut self.first, &mut self.ready] {
            if lane.is_empty() && lane.capacity() > KEEP_CAPACITY {
                lane.shrink_to(KEEP_CAPACITY);
            }
        }
        shrink(&mut self.queued);
        shrink_map(&mut self.rerun);
        shrink(&mut self.parked);
        if self.due.len() * 4 < self.due.capacity() && self.due.capacity() > KEEP_CAPACITY {
            self.due.shrink_to(KEEP_CAPACITY.max(self.due.len() * 2));
        }
    }
}

impl<K: Clone + Eq + Hash> WorkQueue<K> {
    fn state(&self) -> parking_lot::MutexGuard<'_, State<K>> {
        self.state.lock()
    }

    fn observe(&self, state: &State<K>) {
        self.gauges.waiting.set(i64::try_from(state.waiting()).unwrap_or(i64::MAX));
        self.gauges.delayed.set(i64::try_from(state.due.len()).unwrap_or(i64::MAX));
    }

    /// Counts an add as client-go does: every add of a key not queued already, also of one running now.
    fn count(&self, key: &K, added: Added) {
        let series = self.series(key);
        match added {
            Added::Queued => {
                series.adds.inc();
                series.depth.inc();
            }
            Added::Rerun => {
                series.adds.inc();
            }
            Added::Already => {}
        }
    }

    /// Adds `key` under `state`'s lock and counts it; whether a worker is to be signalled.
    fn add_locked(&self, state: &mut State<K>, key: K, first: bool) -> bool {
        let added = state.add(key.clone(), first, self.now());
        self.count(&key, added);
        added == Added::Queued
    }

    /// Queues the key now (a delayed requeue of it is dropped: this run comes first).
    pub fn add(&self, key: K) {
        self.add_in_lane(key, false);
    }

    /// Queues the key now, before every key queued by [`WorkQueue::add`].
    pub fn add_first(&self, key: K) {
        self.add_in_lane(key, true);
    }

    fn add_in_lane(&self, key: K, first: bool) {
        let mut state = self.state();
        let added = self.add_locked(&mut state, key, first);
        self.observe(&state);
        drop(state);
        if added {
            self.ready_signal.notify_one();
        }
    }

    /// Queues the key after `delay`, unless it is queued already or due earlier.
    pub fn add_after(&self, key: K, delay: Duration) {
        if delay.is_zero() {
            return self.add(key);
        }
        let at = self.now() + delay;
        let mut state = self.state();
        if state.queued.contains(&key) || state.rerun.contains_key(&key) {
            return;
        }
        let first = state.delay(key, at);
        self.observe(&state);
        drop(state);
        if first {
            self.timer_signal.notify_one();
        }
    }

    /// The next key to reconcile; the caller owns it until [`WorkQueue::done`].
    pub async fn next(&self) -> K {
        loop {
            let notified = self.ready_signal.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(key) = self.try_next() {
                return key;
            }
            notified.await;
        }
    }

    /// The next key to reconcile if one waits; the caller owns it until [`WorkQueue::done`].
    pub fn try_next(&self) -> Option<K> {
        let mut state = self.state();
        let (key, added) = state.pop()?;
        state.queued.remove(&key);
        let now = self.now();
        state.running.insert(key.clone(), now);
        let series = self.series(&key);
        series.depth.dec();
        series.queue_duration.observe(now.saturating_duration_since(added).as_secs_f64());
        let more = state.waiting() > 0;
        state.shrink_when_drained();
        self.observe(&state);
        drop(state);
        if more {
            // Pass the signal on: `notify_one` stores one permit, and other workers may be waiting.
            self.ready_signal.notify_one();
        }
        Some(key)
    }

    /// A worker takes `key` out of its turn (the simulation's scripted runs); false when it runs already.
    pub fn take(&self, key: &K) -> bool {
        let mut state = self.state();
        if state.running.contains_key(key) {
            return false;
        }
        if state.queued.remove(key) {
            state.first.retain(|(k, _)| k != key);
            state.ready.retain(|(k, _)| k != key);
            self.series(key).depth.dec();
        }
        state.undelay(key);
        let now = self.now();
        state.running.insert(key.clone(), now);
        self.observe(&state);
        true
    }

    /// The keys that wait for a worker, in the order they are taken.
    pub fn waiting_keys(&self) -> Vec<K> {
        let state = self.state();
        state.first.iter().chain(&state.ready).map(|(key, _)| key.clone()).collect()
    }

    /// How many keys wait for a worker.
    pub fn waiting(&self) -> usize {
        self.state().waiting()
    }

    /// Ends a worker's run of `key`; a wake that came meanwhile queues it again.
    pub fn done(&self, key: &K) {
        let mut state = self.state();
        if let Some(started) = state.running.remove(key) {
            self.series(key).work_duration.observe(self.now().saturating_duration_since(started).as_secs_f64());
        }
        if let Some((again, at)) = state.rerun.remove_entry(key) {
            // Counted as an add when it came.
            if state.add(again, false, at) == Added::Queued {
                self.series(key).depth.inc();
                drop(state);
                self.ready_signal.notify_one();
            }
        }
    }

    /// Ends a worker's run of `key` with how it ended: the one place a key's next run is decided. A failure is
    /// retried after the backoff of its failures in a row (parked as well while the API server does not answer), or
    /// after the delay the policy gave; a run that did what it could ends the key's failures. Returns the delay it
    /// asked for (a wake may still come first, and an earlier requeue due already stays).
    ///
    /// Guarantees: a key runs on one worker at a time; a wake that came during the run is not lost (it runs the key
    /// again at once); the failures in a row, and so the backoff, are per key.
    ///
    /// Assumptions: the worker calls it exactly once for each key it took, also when the run failed; until then the
    /// key is not run again (a wake only marks it to run again).
    pub fn finish(&self, key: K, outcome: Outcome) -> Option<Duration> {
        if matches!(outcome, Outcome::Failed(_)) {
            self.series(&key).retries.inc();
        }
        let delay = {
            let mut state = self.state();
            if outcome == Outcome::Failed(Retry::WhenAnswering) {
                state.parked.insert(key.clone());
            } else {
                state.parked.remove(&key);
            }
            match outcome {
                Outcome::Done(next) => {
                    state.failures.remove(&key);
                    match next {
                        Next::AwaitChange => None,
                        Next::After(delay) => Some(delay),
                    }
                }
                Outcome::Failed(Retry::After(delay)) => Some(delay),
                Outcome::Failed(Retry::Backoff | Retry::WhenAnswering) => {
                    let failures = state.failures.entry(key.clone()).or_insert(0);
                    *failures = (*failures + 1).min(12);
                    Some(backoff(*failures, jitter(&key)))
                }
            }
        };
        self.done(&key);
        if let Some(delay) = delay {
            self.add_after(key, delay);
        }
        delay
    }

    /// The object of `key` is gone: its failures in a row end (a new object of its name starts without them). A
    /// retry still due runs once and finds it gone.
    pub fn forget(&self, key: &K) {
        let mut state = self.state();
        state.failures.remove(key);
        state.parked.remove(key);
    }

    /// Moves delayed requeues to the queue when they are due; runs for as long as the queue is used.
    pub async fn run_timers(&self) {
        loop {
            let wake = self.timer_signal.notified();
            tokio::pin!(wake);
            wake.as_mut().enable();
            self.fire_due(self.now(), |_| true);
            match self.next_due() {
                Some(at) => {
                    tokio::select! {
                        _ = tokio::time::sleep_until(at) => {}
                        _ = wake => {}
                    }
                }
                None => wake.await,
            }
        }
    }

    /// Queues the delayed requeues due at `now` that `fire` lets through (the manager lets every one; the
    /// simulation's settling holds back its safety nets); how many it queued.
    pub fn fire_due(&self, now: Instant, fire: impl Fn(&K) -> bool) -> usize {
        let mut state = self.state();
        let due: Vec<K> = state.timeline.range(..=(now, u64::MAX)).map(|(_, key)| key.clone()).collect();
        let mut woke = 0;
        for key in due.into_iter().filter(|key| fire(key)) {
            state.undelay(&key);
            if self.add_locked(&mut state, key, false) {
                woke += 1;
            }
        }
        state.shrink_when_drained();
        self.observe(&state);
        drop(state);
        for _ in 0..woke {
            self.ready_signal.notify_one();
        }
        woke
    }

    /// When the first delayed requeue is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.state().timeline.first_key_value().map(|(&(at, _), _)| at)
    }

    /// Every delayed requeue, with when it is due, the first first.
    pub fn delayed(&self) -> Vec<(K, Instant)> {
        self.state().timeline.iter().map(|(&(at, _), key)| (key.clone(), at)).collect()
    }

    /// Whether a key waits for a worker, runs, or is due later.
    pub fn is_idle(&self) -> bool {
        let state = self.state();
        state.queued.is_empty() && state.running.is_empty() && state.rerun.is_empty() && state.due.is_empty()
    }

    /// Whether `key` runs now.
    pub fn is_running(&self, key: &K) -> bool {
        self.state().running.contains_key(key)
    }

    /// How many keys run now.
    pub fn running(&self) -> usize {
        self.state().running.len()
    }

    /// Sets each class's seconds of work in progress and its longest run now, every 500 ms as client-go does;
    /// runs for as long as the queue is used.
    pub async fn report_work_in_progress(&self) {
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.observe_work_in_progress();
        }
    }

    fn observe_work_in_progress(&self) {
        let now = self.now();
        let mut in_progress = vec![(0.0_f64, 0.0_f64); self.series.len()];
        for (key, started) in &self.state().running {
            let class = (self.class)(key).min(self.series.len() - 1);
            let seconds = now.saturating_duration_since(*started).as_secs_f64();
            in_progress[class].0 += seconds;
            in_progress[class].1 = in_progress[class].1.max(seconds);
        }
        for (series, (unfinished, longest)) in self.series.iter().zip(in_progress) {
            series.unfinished_work.set(unfinished);
            series.longest_running.set(longest);
        }
    }

    /// Keys waiting, due later or running.
    #[cfg(test)]
    fn pending(&self) -> usize {
        let state = self.state();
        state.queued.len() + state.running.len() + state.due.len()
    }
}

/// Up to 99 ms, fixed per key: retries of a burst spread a little.
fn jitter<K: Hash>(key: &K) -> Duration {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    Duration::from_millis(BuildHasherDefault::<DefaultHasher>::default().hash_one(key) % 100)
}

impl<K: Clone + Eq + Hash + Ord> WorkQueue<K> {
    /// The API server answers again: the keys parked while it did not are queued now, in order (a hash set's order
    /// differs from one process to the next, and the simulation's schedule follows the queue's).
    pub fn unpark_all(&self) {
        let mut parked: Vec<K> = self.state().parked.drain().collect();
        parked.sort_unstable();
        for key in parked {
            self.add(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    use crate::compact::ObjectKey;
    use crate::runtime::retry::{Outcome, Retry};

    fn key(name: &str) -> ObjectKey {
        ObjectKey::new("ns", name)
    }

    /// A queue and its running timer task (abort it at the end).
    fn with_timers() -> (Arc<WorkQueue<ObjectKey>>, tokio::task::JoinHandle<()>) {
        let q = Arc::new(WorkQueue::<ObjectKey>::default());
        let timers = tokio::spawn({
            let q = q.clone();
            async move { q.run_timers().await }
        });
        (q, timers)
    }

    #[tokio::test]
    async fn a_key_queued_twice_runs_once() {
        let q = WorkQueue::<ObjectKey>::default();
        q.add(key("a"));
        q.add(key("b"));
        q.add(key("a"));
        assert_eq!(q.next().await, key("a"));
        assert_eq!(q.next().await, key("b"));
        assert_eq!(q.state().ready.len(), 0);
    }

    #[tokio::test]
    async fn keys_added_first_go_before_the_others_in_their_own_order() {
        let q = WorkQueue::<ObjectKey>::default();
        q.add(key("a"));
        q.add(key("b"));
        q.add_first(key("c"));
        q.add_first(key("d"));
        // Queued already: it keeps its place.
        q.add_first(key("a"));
        for expected in ["c", "d", "a", "b"] {
            assert_eq!(q.next().await, key(expected));
        }
        assert_eq!(q.state().waiting(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn failures_in_a_row_back_off_longer_and_a_done_run_ends_them() {
        let (q, timers) = with_timers();
        let a = key("a");
        let jitter = jitter(&a);
        let mut waited = Vec::new();
        for _ in 0..3 {
            q.add(a.clone());
            assert_eq!(q.next().await, a);
            q.finish(a.clone(), Outcome::Failed(Retry::Backoff));
            let start = Instant::now();
            assert_eq!(q.next().await, a);
            waited.push(start.elapsed());
            q.done(&a);
        }
        let expected: Vec<Duration> = [200, 400, 800].map(|ms| Duration::from_millis(ms) + jitter).into();
        assert_eq!(waited, expected);
        // A run that did what it could: the next failure starts over.
        q.add(a.clone());
        assert_eq!(q.next().await, a);
        q.finish(a.clone(), Outcome::Done(Next::AwaitChange));
        q.add(a.clone());
        assert_eq!(q.next().await, a);
        q.finish(a.clone(), Outcome::Failed(Retry::Backoff));
        let start = Instant::now();
        assert_eq!(q.next().await, a);
        assert_eq!(start.elapsed(), Duration::from_millis(200) + jitter);
        q.done(&a);
        assert!(q.state().failures.contains_key(&a), "still failing until a run ends well");
        timers.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn parked_keys_come_back_when_the_api_server_answers_and_the_backoff_stays_a_safety_net() {
        let (q, timers) = with_timers();
        for name in ["a", "b"] {
            q.add(key(name));
            let k = q.next().await;
            q.finish(k, Outcome::Failed(Retry::WhenAnswering));
        }
        let start = Instant::now();
        q.unpark_all();
        let mut back = vec![q.next().await, q.next().await];
        back.sort();
        assert_eq!(back, [key("a"), key("b")]);
        assert_eq!(start.elapsed(), Duration::ZERO, "at once, not after the backoff");
        q.finish(key("a"), Outcome::Done(Next::AwaitChange));
        q.finish(key("b"), Outcome::Failed(Retry::WhenAnswering));
        // Not unparked again: the backoff brings it back.
        let again = q.next().await;
        assert_eq!(again, key("b"));
        assert!(start.elapsed() >= Duration::from_millis(400), "{:?}", start.elapsed());
        // Its run goes well now: no longer parked, and no retry is left.
        q.finish(again, Outcome::Done(Next::AwaitChange));
        q.unpark_all();
        assert!(tokio::time::timeout(Duration::from_secs(600), q.next()).await.is_err(), "parked once, back once");
        timers.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_forgotten_key_starts_over_without_its_failures() {
        let (q, timers) = with_timers();
        let a = key("a");
        for _ in 0..5 {
            q.add(a.clone());
            assert_eq!(q.next().await, a);
            q.finish(a.clone(), Outcome::Failed(Retry::Backoff));
        }
        q.forget(&a);
        q.add(a.clone());
        assert_eq!(q.next().await, a);
        q.finish(a.clone(), Outcome::Failed(Retry::Backoff));
        let start = Instant::now();
        assert_eq!(q.next().await, a);
        assert_eq!(start.elapsed(), Duration::from_millis(200) + jitter(&a), "the first failure of a new object");
        q.done(&a);
        timers.abort();
    }

    #[tokio::test]
    async fn a_wake_during_a_run_runs_it_once_more_after() {
        let q = WorkQueue::<ObjectKey>::default();
        q.add(key("a"));
        let a = q.next().await;
        q.add(key("a"));
        q.add(key("a"));
        // Not handed to a second worker while the first has it.
        assert!(q.state().ready.is_empty());
        q.done(&a);
        assert_eq!(q.next().await, key("a"));
        q.done(&key("a"));
        assert_eq!(q.pending(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn delayed_requeues_come_due_and_the_earlier_wins() {
        let (q, timers) = with_timers();
        q.add_after(key("a"), Duration::from_secs(10));
        q.add_after(key("a"), Duration::from_secs(30));
        q.add_after(key("b"), Duration::from_secs(20));
        q.add_after(key("b"), Duration::from_secs(5));
        let start = Instant::now();
        assert_eq!(q.next().await, key("b"));
        assert_eq!(start.elapsed().as_secs(), 5);
        assert_eq!(q.next().await, key("a"));
        assert_eq!(start.elapsed().as_secs(), 10);
        // Nothing else is due: the 30 s requeue of `a` was replaced by the earlier one.
        q.done(&key("a"));
        q.done(&key("b"));
        assert!(tokio::time::timeout(Duration::from_secs(60), q.next()).await.is_err());
        timers.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_wake_now_replaces_a_delayed_requeue() {
        let (q, timers) = with_timers();
        q.add_after(key("a"), Duration::from_secs(10));
        q.add(key("a"));
        assert_eq!(q.next().await, key("a"));
        q.done(&key("a"));
        assert!(tokio::time::timeout(Duration::from_secs(60), q.next()).await.is_err());
        timers.abort();
    }

    #[tokio::test]
    async fn a_burst_gives_its_memory_back_when_drained() {
        let q = WorkQueue::<ObjectKey>::default();
        for i in 0..20_000 {
            q.add(key(&format!("c{i}")));
        }
        assert!(q.state().queued.capacity() >= 20_000);
        for _ in 0..20_000 {
            let k = q.next().await;
            q.done(&k);
        }
        let state = q.state();
        assert!(state.queued.capacity() <= 2 * KEEP_CAPACITY, "{}", state.queued.capacity());
        assert!(state.ready.capacity() <= 2 * KEEP_CAPACITY, "{}", state.ready.capacity());
    }

    #[tokio::test(start_paused = true)]
    async fn the_gauges_show_what_waits_and_what_is_due_later() {
        let gauges = QueueGauges::default();
        let q = Arc::new(WorkQueue::<ObjectKey>::with_gauges(gauges.clone()));
        q.add(key("a"));
        q.add(key("b"));
        q.add_after(key("c"), Duration::from_secs(5));
        assert_eq!((gauges.waiting.get(), gauges.delayed.get()), (2, 1));
        let a = q.next().await;
        assert_eq!(gauges.waiting.get(), 1);
        q.done(&a);
        let timers = tokio::spawn({
            let q = q.clone();
            async move { q.run_timers().await }
        });
        tokio::time::sleep(Duration::from_secs(6)).await;
        assert_eq!((gauges.waiting.get(), gauges.delayed.get()), (2, 0));
        timers.abort();
    }

    /// client-go's series, per class of keys: adds (also of a key that runs), depth, time queued and worked, work in
    /// progress, retries.
    #[tokio::test(start_paused = true)]
    async fn each_class_of_keys_reports_client_gos_work_queue_series() {
        let (a_series, b_series) = (QueueSeries::default(), QueueSeries::default());
        let class = |k: &ObjectKey| usize::from(k.name.starts_with('b'));
        let q = WorkQueue::with_metrics(QueueGauges::default(), vec![a_series.clone(), b_series.clone()], class);
        q.add(key("a1"));
        q.add(key("a1"));
        q.add(key("b1"));
        assert_eq!((a_series.adds.get(), a_series.depth.get(), b_series.depth.get()), (1, 1, 1));
        tokio::time::sleep(Duration::from_secs(2)).await;
        let first = q.next().await;
        assert_eq!(first, key("a1"));
        assert_eq!((a_series.depth.get(), b_series.depth.get()), (0, 1));
        // Woken while it runs: another add, and it waits again once its run is done.
        q.add(key("a1"));
        assert_eq!((a_series.adds.get(), a_series.depth.get()), (2, 0));
        tokio::time::sleep(Duration::from_secs(3)).await;
        q.observe_work_in_progress();
        assert_eq!((a_series.unfinished_work.get(), a_series.longest_running.get()), (3.0, 3.0));
        assert_eq!(b_series.unfinished_work.get(), 0.0);
        q.finish(first, Outcome::Failed(Retry::Backoff));
        assert_eq!((a_series.retries.get(), a_series.depth.get(), b_series.retries.get()), (1, 1, 0));
        q.observe_work_in_progress();
        assert_eq!(a_series.unfinished_work.get(), 0.0);
        let mut encoded = String::new();
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register("queued", "", a_series.queue_duration.clone());
        registry.register("worked", "", a_series.work_duration.clone());
        prometheus_client::encoding::text::encode(&mut encoded, &registry).expect("encode");
        // Queued 2 s (in the bucket of 10 s, not of 1 s); worked 3 s.
        assert!(encoded.contains("queued_bucket{le=\"1.0\"} 0\nqueued_bucket{le=\"10.0\"} 1"), "{encoded}");
        assert!(encoded.contains("worked_count 1") && encoded.contains("worked_sum 3.0"), "{encoded}");
    }

    /// The simulation's way of driving a queue: its own clock, due requeues fired by hand, some held back.
    #[test]
    fn on_another_clock_requeues_come_due_when_fired_at_their_time_and_a_filter_holds_some_back() {
        let epoch = Instant::now();
        let ms = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let clock: QueueClock = {
            let ms = ms.clone();
            Arc::new(move || epoch + Duration::from_millis(ms.load(std::sync::atomic::Ordering::Relaxed)))
        };
        let q = WorkQueue::<ObjectKey>::default().with_clock(clock);
        q.add(key("a"));
        let a = q.try_next().expect("a waits");
        assert_eq!(q.finish(a, Outcome::Done(Next::After(Duration::from_secs(5)))), Some(Duration::from_secs(5)));
        q.add_after(key("b"), Duration::from_secs(3));
        assert_eq!(q.next_due(), Some(epoch + Duration::from_secs(3)));
        ms.store(4_000, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(q.fire_due(epoch + Duration::from_secs(4), |_| true), 1);
        assert_eq!(q.try_next(), Some(key("b")));
        assert_eq!(q.try_next(), None, "a is due at 5 s");
        let at = epoch + Duration::from_secs(5);
        assert_eq!(q.fire_due(at, |k| *k != key("a")), 0, "held back");
        assert_eq!(q.delayed(), vec![(key("a"), at)]);
        assert_eq!(q.fire_due(at, |_| true), 1);
        assert_eq!(q.waiting_keys(), vec![key("a")]);
        assert!(q.take(&key("a")) && !q.take(&key("a")), "taken once, then it runs");
    }

    #[tokio::test]
    async fn waiting_workers_all_get_work() {
        let q = Arc::new(WorkQueue::<ObjectKey>::default());
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let q = q.clone();
                tokio::spawn(async move { q.next().await })
            })
            .collect();
        tokio::task::yield_now().await;
        for i in 0..4 {
            q.add(key(&format!("c{i}")));
        }
        let mut got = Vec::new();
        for w in workers {
            got.push(tokio::time::timeout(Duration::from_secs(5), w).await.expect("a worker starved").unwrap());
        }
        got.sort();
        assert_eq!(got, (0..4).map(|i| key(&format!("c{i}"))).collect::<Vec<_>>());
    }
}
