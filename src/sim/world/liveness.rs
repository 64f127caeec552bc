//! Liveness: once faults and users stop, every request is answered, every event delivered and every queue drained
//! until nothing changes; a claim that only a safety net would wake is found out.

use tokio::time::Instant;

use crate::index::Sink;
use crate::sim::client::lock;
use crate::sim::model::POOLS;

use super::{Job, Move, Term, World};

impl World {
    // ---- Settling ----

    /// No more faults or users: every request is answered, every event delivered, every queue drained, until a full
    /// round changes nothing in the API server.
    pub(super) fn settle(&mut self) -> Result<(), String> {
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
    pub(super) fn next_due(&self) -> Option<Instant> {
        let terms = [self.term.as_ref(), self.shard.as_ref().and_then(|s| s.term.as_ref())];
        terms.into_iter().flatten().filter_map(Term::next_due).min()
    }

    /// Settles until nothing is left to do: every request answered, every event delivered, every queue drained.
    pub(super) fn drain(&mut self) -> Result<(), String> {
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
    pub(super) fn settle_step(&mut self) -> bool {
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
}
