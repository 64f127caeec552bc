//! The scenario DSL: a world that does nothing by itself, and the steps a hand-written schedule takes.

use std::time::Duration;

use serde_json::{Value, json};

use crate::api::GROUP;
use crate::index::ObjectKey;
use crate::sim::Options;
use crate::sim::client::{Op, lock};
use crate::sim::model::{NAMESPACES, PoolId, Shape};
use crate::sim::server::Kind;
use crate::sim::swarm::Late;

use super::{Fate, Job, WatchState, World, pool_object};

impl World {
    // ---- Scripts: hand-written schedules for regression tests of one order of events ----

    /// A world that does nothing by itself: the script creates, delivers and answers.
    pub(in crate::sim) fn scripted() -> World {
        World::new(
            0,
            Options { replicas: 1, steps: 0, late: Late::BeforeNextTerm, trace: true, velero: false, sharded: false },
        )
    }

    /// A scripted world with the second manager (`Options::sharded`): its term begins when the script finishes.
    pub(in crate::sim) fn scripted_sharded() -> World {
        World::new(
            0,
            Options { replicas: 1, steps: 0, late: Late::BeforeNextTerm, trace: true, velero: false, sharded: true },
        )
    }

    /// A scripted world whose invariants allow for a write of an ended term landing after the next term began (an
    /// unbound duplicate may appear for a moment; two bound claims never share an address).
    pub(in crate::sim) fn scripted_with_writes_late_anytime() -> World {
        World::new(
            0,
            Options { replicas: 1, steps: 0, late: Late::Anytime, trace: true, velero: false, sharded: false },
        )
    }

    /// The room of the moved-away annotation (for the terms begun from now on), and the API server's limit on an
    /// object's annotations.
    pub(in crate::sim) fn limit_annotations(&mut self, moved_away_room: usize, server_limit: usize) {
        self.swarm.moved_away_max_bytes = moved_away_room;
        lock(&self.hub).server.annotation_limit = server_limit;
    }

    pub(in crate::sim) fn end_this_term(&mut self) {
        self.end_term();
    }

    pub(in crate::sim) fn create_pool_shaped(&mut self, pool: PoolId, shape: Shape) {
        self.server_create(pool.server_kind(), pool_object(pool, shape)).expect("a new pool");
        self.shapes.insert(pool, shape);
    }

    /// Edits a pool's spec to `shape`, at once (as a user whose edit the webhook admitted).
    pub(in crate::sim) fn edit_pool_shaped(&mut self, pool: PoolId, shape: Shape) {
        self.server_merge(pool.server_kind(), &pool.key(), json!({"spec": shape.spec(pool)}))
            .expect("the edit applies");
        self.shapes.insert(pool, shape);
    }

    pub(in crate::sim) fn create_claim_named(&mut self, namespace: usize, name: &str, pool: PoolId) -> ObjectKey {
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
    pub(in crate::sim) fn force_delete_claim(&mut self, key: &ObjectKey) {
        let _ = self.server_merge(Kind::Claim, key, json!({"metadata": {"finalizers": null}}));
        let _ = self.server_delete(Kind::Claim, key);
    }

    pub(in crate::sim) fn remove(&mut self, kind: Kind, key: &ObjectKey) {
        let _ = self.server_delete(kind, key);
    }

    /// The watch of `kind` expires (410 Gone) before it delivered what it has: it lists again.
    pub(in crate::sim) fn expire_watch_of(&mut self, kind: Kind) {
        let Some(term) = self.term.as_mut() else { return };
        for watch in term.watches.iter_mut().filter(|w| w.kind == kind) {
            watch.state = WatchState::Start;
        }
    }

    pub(in crate::sim) fn begin_term(&mut self) {
        self.start_term();
    }

    /// Delivers every event the watches of `kinds` have (every kind, when empty).
    pub(in crate::sim) fn deliver_all(&mut self, kinds: &[Kind]) {
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
    pub(in crate::sim) fn deliver_one(&mut self, kind: Kind) -> bool {
        let watches = self.term.as_ref().map_or(0, |t| t.watches.len());
        let next =
            (0..watches).find(|&w| self.has_events(w) && self.term.as_ref().is_some_and(|t| t.watches[w].kind == kind));
        let Some(w) = next else { return false };
        self.deliver(w);
        self.poll_tasks();
        true
    }

    /// Time passes: `ms` milliseconds, nothing else happening.
    pub(in crate::sim) fn pass_time(&mut self, ms: i64) {
        self.advance(ms);
    }

    /// The orphan sweep as the orphan task runs it: once, and again once the orphan release delay has passed (an
    /// IPAddress is released only after it was an orphan that long), each answered in full.
    pub(in crate::sim) fn sweep_after_the_delay(&mut self) {
        self.run_job(Job::Sweep);
        self.answer_everything();
        let delay = self.term.as_ref().map_or(Duration::ZERO, |t| t.ctx.options.orphan_release_delay);
        self.advance(i64::try_from(delay.as_millis()).unwrap_or(0) + 1);
        self.run_job(Job::Sweep);
    }

    /// [`World::sweep_after_the_delay`], every request answered, then every event delivered.
    pub(in crate::sim) fn sweep_to_rest(&mut self) {
        self.sweep_after_the_delay();
        self.answer_everything();
        self.deliver_all(&[]);
    }

    /// Starts a worker's run of `job`.
    pub(in crate::sim) fn run_job(&mut self, job: Job) {
        assert!(!self.is_running(&job), "a scenario runs {job} while it runs already: it would run nothing");
        self.start(job);
        self.poll_tasks();
    }

    /// Runs `job` to its end: every request answered as it comes, then every event delivered.
    pub(in crate::sim) fn run_to_rest(&mut self, job: Job) {
        self.run_job(job);
        self.answer_everything();
        self.deliver_all(&[]);
    }

    /// Gives the first request in flight whose operation matches `which` the fate `fate`; false when none matches.
    pub(in crate::sim) fn answer_where(&mut self, which: impl Fn(&Op) -> bool, fate: Fate) -> bool {
        let index = lock(&self.hub).pending.iter().position(|p| p.slot.is_some() && which(&p.op));
        let Some(index) = index else { return false };
        self.step += 1;
        self.resolve_as(index, fate);
        self.poll_tasks();
        true
    }

    /// Whether the manager's index has changes of the pool's moved-away annotation not written yet.
    pub(in crate::sim) fn is_pending_moved_away(&self, pool: &PoolId) -> bool {
        self.term.as_ref().is_some_and(|t| !t.ctx.index.moved_away_view(&pool.pool_key()).pending.is_empty())
    }

    /// Whether a request matching `which` is in flight.
    pub(in crate::sim) fn is_pending(&self, which: impl Fn(&Op) -> bool) -> bool {
        lock(&self.hub).pending.iter().any(|p| p.slot.is_some() && which(&p.op))
    }

    /// Takes the first request in flight whose operation matches `which` away from its task, unapplied (the task sees
    /// the connection reset), and returns it: a script lands it later with [`World::land_late`], as the write of a
    /// term that ended lands after the next one read.
    pub(in crate::sim) fn hold_back_where(&mut self, which: impl Fn(&Op) -> bool) -> Option<Op> {
        let index = lock(&self.hub).pending.iter().position(|p| p.slot.is_some() && which(&p.op))?;
        let op = lock(&self.hub).pending[index].op.clone();
        self.step += 1;
        self.resolve_as(index, Fate::NotApplied);
        self.poll_tasks();
        Some(op)
    }

    /// Applies a write held back by [`World::hold_back_where`] now.
    pub(in crate::sim) fn land_late(&mut self, op: &Op) {
        let result = lock(&self.hub).apply(op);
        self.note(|| {
            format!("a held-back write lands late: {op} -> {}", if result.is_ok() { "ok" } else { "refused" })
        });
    }

    /// Answers the newest request in flight; false when none is.
    pub(in crate::sim) fn answer_newest(&mut self) -> bool {
        let index = lock(&self.hub).pending.iter().rposition(|p| p.slot.is_some());
        let Some(index) = index else { return false };
        self.step += 1;
        self.resolve_as(index, Fate::Answered);
        self.poll_tasks();
        true
    }

    /// Whether a worker of the live term runs `job` now.
    pub(in crate::sim) fn is_running(&self, job: &Job) -> bool {
        self.term.as_ref().is_some_and(|t| t.running(job))
    }

    /// Answers every request in flight until no task of the live term is left running.
    pub(in crate::sim) fn answer_everything(&mut self) {
        while self.answer_where(|_| true, Fate::Answered) {}
    }

    /// The per-step invariants, then settling and the quiescent ones.
    pub(in crate::sim) fn finish(&mut self) -> Result<(), String> {
        self.check_always()?;
        self.settle()?;
        self.check_quiescent()
    }

    pub(in crate::sim) fn check_now(&mut self) -> Result<(), String> {
        self.check_always()
    }

    /// An object as the API server holds it now.
    pub(in crate::sim) fn read(&self, kind: Kind, key: &ObjectKey) -> Option<Value> {
        self.object(kind, key)
    }

    /// Patches an object as a user or clusterctl does (a merge patch, at once).
    pub(in crate::sim) fn patch(&mut self, kind: Kind, key: &ObjectKey, patch: Value) {
        self.server_merge(kind, key, patch).expect("the patch applies");
    }

    /// Patches an object's status subresource as another controller does (a merge patch, at once).
    pub(in crate::sim) fn patch_status(&mut self, kind: Kind, key: &ObjectKey, patch: Value) {
        let patched = lock(&self.hub).server.patch_merge(kind, key, &patch, true);
        let shown = patch.to_string();
        self.note(|| {
            format!("another controller patches {} {key}/status: {shown} -> {}", kind.name(), patched.is_ok())
        });
        patched.expect("the status patch applies");
    }

    /// Creates an object as a user or clusterctl does, at once.
    pub(in crate::sim) fn create(&mut self, kind: Kind, object: Value) -> Value {
        self.server_create(kind, object).expect("a new object")
    }

    pub(in crate::sim) fn trace_text(&self) -> String {
        self.trace.join("\n")
    }
}
