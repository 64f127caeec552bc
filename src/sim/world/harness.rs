//! The replica harness: leader terms (a fresh index and the real controllers per term, the fence), the watches
//! feeding the index through the real feeds, and the workers polled on the simulated clock.

use std::collections::{BTreeMap, BTreeSet};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Poll;
use std::time::Duration;

use kube::runtime::watcher::Event;
use serde_json::Value;
use tokio::sync::watch;

use crate::api::WATCH_FILTER_LABEL;
use crate::capi::{CapiApis, CapiVersion};
use crate::controllers;
use crate::controllers::{Context, ControllerOptions};
use crate::index::Sink;
use crate::leader::{SimulatedTerm, TermClock};
use crate::metrics::Metrics;
use crate::runtime::Work;
use crate::runtime::queue::QueueClock;
use crate::runtime::retry::{Next, Outcome};
use crate::sim::client::{Op, SimApi, lock};
use crate::sim::server::{Change, Kind};
use crate::sim::swarm::Late;

use super::{Feeder, Job, RENEW_DEADLINE, Task, Term, Watch, WatchState, World, asked, describe, poll_once, watched};

impl World {
    // ---- Terms ----

    pub(super) fn start_term(&mut self) {
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
        let watches = watched()
            .into_iter()
            .map(|kind| Watch { kind, state: WatchState::Start, cursor: 0, feeder: Feeder::new(kind), listed: false })
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
    pub(super) fn stop_renewing(&mut self) {
        let Some(term) = self.term.as_mut() else { return };
        if term.renewing {
            term.renewing = false;
            let (id, replica) = (term.id, term.replica);
            self.note(|| format!("term {id} of replica {replica} is no longer renewed"));
        }
    }

    /// A term whose fence closed on the clock ends.
    pub(super) fn retire_ended_term(&mut self) {
        if self.term.as_ref().is_some_and(|t| !t.lease.holds()) {
            self.end_term();
        }
    }

    /// The term ends (another replica took the lease, or its fence closed): its writes in flight are dropped by the
    /// fence but may still land; everything it knew goes.
    pub(super) fn end_term(&mut self) {
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
    pub(super) fn land_orphaned_writes(&mut self) {
        loop {
            let index = lock(&self.hub).pending.iter().position(|p| p.slot.is_none());
            let Some(index) = index else { return };
            let land = self.rng.chance(60);
            self.resolve(index, land);
        }
    }

    // ---- Watches ----

    /// Delivers the next thing watch `w` of the live term has; false when it has nothing.
    pub(super) fn deliver(&mut self, w: usize) -> bool {
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

    pub(super) fn has_events(&self, w: usize) -> bool {
        let Some(term) = &self.term else { return false };
        let watch = &term.watches[w];
        match watch.state {
            WatchState::Watching => lock(&self.hub).server.log(watch.kind).len() > watch.cursor,
            _ => true,
        }
    }

    // ---- Workers ----

    /// Starts `job` as a worker that took its key from the queue would (a key that runs already is left to its run).
    pub(super) fn start(&mut self, job: Job) {
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
    pub(super) fn launch(&mut self, job: Job) {
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
    pub(super) fn poll_tasks(&mut self) {
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
    pub(super) fn poll_tasks_once(&mut self) {
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
}
