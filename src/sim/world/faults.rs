//! Faults: the fate of every request (answered, lost, refused, landed late after its term), a watch expired, the
//! API server restarted.

use crate::apiserver::ApiError;
use crate::sim::client::{Op, lock};
use crate::sim::server::Kind;

use super::{Fate, WatchState, World, describe};

impl World {
    // ---- Requests ----

    /// Decides the fate of the pending request at `index`: applied and answered (`ok`), or one of the failures.
    pub(super) fn resolve(&mut self, index: usize, ok: bool) {
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
    pub(in crate::sim) fn resolve_as(&mut self, index: usize, fate: Fate) {
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
            && let Some(Ok(crate::sim::client::Answer::Object(Some(created)))) = &result
            && let Some(uid) = created["metadata"]["uid"].as_str()
        {
            self.late_created.insert(uid.to_owned());
        }
        drop(hub);
        if self.options.trace {
            let outcome = match &result {
                Some(Ok(crate::sim::client::Answer::Object(Some(o)))) => {
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

    pub(super) fn expire_watch(&mut self) {
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
    pub(super) fn restart_api_server(&mut self) {
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
}
