//! Whether the API server answers. While it does not, every request fails the same way: that is said once (a WARN
//! when it stops answering, an INFO when it answers again), not once per claim, and the claims that failed on it are
//! parked instead of backing off for longer and longer. The first answer afterwards (any watch event, any successful
//! request) hands them back at once, so claims are bound within moments of the API server's return.

use parking_lot::Mutex;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use tracing::{debug, info, warn};

use crate::index::ObjectKey;

#[derive(Default)]
pub struct Reachability {
    /// A fast path for `answered`: nothing to do unless the API server was unreachable.
    down: AtomicBool,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    down_since: Option<Instant>,
    /// When the WARN was last said: requests that were already in flight when the API server went away fail one
    /// after another, between the successes of others, and must not say it again and again.
    warned_at: Option<Instant>,
    parked: HashSet<ObjectKey>,
}

/// An outage shorter than this is a blip (a connection that broke), not worth an INFO.
const BLIP: std::time::Duration = std::time::Duration::from_secs(1);
/// The WARN is said at most this often.
const WARN_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

impl Reachability {
    fn state(&self) -> parking_lot::MutexGuard<'_, State> {
        self.state.lock()
    }

    /// A request could not reach the API server. `operation` and `object` name what failed (for the one WARN);
    /// `claim`, when given, is reconciled again as soon as the API server answers.
    pub fn unreachable(&self, operation: &str, object: &dyn std::fmt::Display, error: &dyn std::fmt::Display) {
        let mut state = self.state();
        if state.down_since.is_none() {
            state.down_since = Some(Instant::now());
            self.down.store(true, Ordering::Release);
            if state.warned_at.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
                state.warned_at = Some(Instant::now());
                warn!(operation, object = %object, error = %error, "the API server does not answer; waiting for it");
            } else {
                debug!(operation, object = %object, error = %error, "the API server does not answer");
            }
        }
    }

    /// Parks a claim whose reconcile failed because the API server did not answer.
    pub fn park(&self, claim: ObjectKey) {
        self.state().parked.insert(claim);
    }

    /// The API server answered. Returns the parked claims, to reconcile now.
    pub fn answered(&self) -> Vec<ObjectKey> {
        if !self.down.load(Ordering::Acquire) {
            return Vec::new();
        }
        let mut state = self.state();
        if let Some(since) = state.down_since.take() {
            if since.elapsed() >= BLIP {
                info!(after_seconds = since.elapsed().as_secs_f64(), "the API server answers again");
                // A new outage after a real return is news again.
                state.warned_at = None;
            } else {
                debug!(after_seconds = since.elapsed().as_secs_f64(), "the API server answers again");
            }
        }
        self.down.store(false, Ordering::Release);
        state.parked.drain().collect()
    }

    pub fn is_down(&self) -> bool {
        self.down.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parked_claims_come_back_once_when_the_api_server_answers() {
        let r = Reachability::default();
        assert!(r.answered().is_empty(), "nothing parked while up");
        r.unreachable("creating the IPAddress", &"ns/a", &"connection refused");
        r.park(ObjectKey::new("ns", "a"));
        r.park(ObjectKey::new("ns", "b"));
        r.park(ObjectKey::new("ns", "a"));
        assert!(r.is_down());
        let mut back = r.answered();
        back.sort();
        assert_eq!(back, vec![ObjectKey::new("ns", "a"), ObjectKey::new("ns", "b")]);
        assert!(!r.is_down());
        assert!(r.answered().is_empty(), "handed back once");
    }
}
