//! Whether the API server answers. While it does not, every request fails the same way: that is said once (a WARN
//! when it stops answering, an INFO when it answers again), not once per claim. The first answer afterwards (any watch
//! event, any successful request) is signalled ([`Reachability::returned`]): the work queue hands back the claims it
//! parked meanwhile (`super::retry`), so claims are bound within moments of the API server's return.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use tokio::sync::Notify;
use tracing::{debug, info, warn};

#[derive(Default)]
pub struct Reachability {
    /// A fast path for `answered`: nothing to do unless the API server was unreachable.
    down: AtomicBool,
    state: Mutex<State>,
    /// Signalled when the API server answers again.
    back: Notify,
}

#[derive(Default)]
struct State {
    down_since: Option<Instant>,
    /// When the WARN was last said: requests that were already in flight when the API server went away fail one
    /// after another, between the successes of others, and must not say it again and again.
    warned_at: Option<Instant>,
}

/// An outage shorter than this is a blip (a connection that broke), not worth an INFO.
const BLIP: std::time::Duration = std::time::Duration::from_secs(1);
/// The WARN is said at most this often.
const WARN_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

impl Reachability {
    fn state(&self) -> parking_lot::MutexGuard<'_, State> {
        self.state.lock()
    }

    /// A request could not reach the API server. `operation` and `object` name what failed, and `error` how (for the
    /// one WARN). What waits for the API server to answer again is parked by the work queue, not here.
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

    /// The API server answered.
    pub fn answered(&self) {
        if !self.down.load(Ordering::Acquire) {
            return;
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
        drop(state);
        // One stored permit: a return while the waiter is busy is not lost.
        self.back.notify_one();
    }

    /// Resolves when the API server answers after it did not.
    pub async fn returned(&self) {
        self.back.notified().await;
    }

    pub fn is_down(&self) -> bool {
        self.down.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_return_is_signalled_once_and_only_after_an_outage() {
        let r = Reachability::default();
        r.answered();
        assert!(!r.is_down());
        let early = tokio::time::timeout(std::time::Duration::from_millis(20), r.returned()).await;
        assert!(early.is_err(), "no outage, no return");
        r.unreachable("creating the IPAddress", &"ns/a", &"connection refused");
        r.unreachable("creating the IPAddress", &"ns/b", &"connection refused");
        assert!(r.is_down());
        r.answered();
        r.answered();
        assert!(!r.is_down());
        // Signalled before anyone waited: the permit is kept.
        r.returned().await;
        let again = tokio::time::timeout(std::time::Duration::from_millis(20), r.returned()).await;
        assert!(again.is_err(), "one return, one signal");
    }
}
