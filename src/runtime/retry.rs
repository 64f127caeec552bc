//! How a worker's run ended, and what the queue does about it: the one error policy of the controllers. The queue
//! ([`super::queue::WorkQueue::finish`]) owns every retry of a key: its backoff after failures in a row, parking while
//! the API server does not answer, and delayed requeues.

use std::time::Duration;

use crate::error::Error;

/// What a reconcile asks for next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Nothing until something changes (a watch event or a wake).
    AwaitChange,
    /// Another run after this long, unless a change comes first.
    After(Duration),
}

/// How a run of a worker ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It did what it could; what it asks for next. A key's failures in a row end here.
    Done(Next),
    /// It failed; how to try again.
    Failed(Retry),
}

/// How a failed run is tried again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retry {
    /// Soon, later after each failure in a row: 200 ms doubling to 5 minutes, spread a little per key.
    Backoff,
    /// After this long, whatever came before (a refusal that will not change by itself is looked at again when the
    /// object changes, and after this as a safety net).
    After(Duration),
    /// As soon as the API server answers again, and with the backoff as a safety net.
    WhenAnswering,
}

/// A refused request, or a claim that found its pool exhausted, is looked at again when its object or pool changes;
/// this requeue is only a safety net.
pub const RECHECK: Duration = Duration::from_secs(300);

/// The error policy: what a run that failed with `error` asks of its queue; `api_down` is whether the API server
/// still does not answer.
pub fn policy(error: &Error, api_down: bool) -> Retry {
    if error.is_unreachable() {
        // It answered while this run was failing: do not wait for the next outage.
        if api_down { Retry::WhenAnswering } else { Retry::After(Duration::from_millis(200)) }
    } else if !error.is_transient() {
        Retry::After(RECHECK)
    } else {
        Retry::Backoff
    }
}

/// The delay before the `failures`-th retry in a row (1 for the first), plus `jitter` (< 100 ms, fixed per key) so
/// that a burst's retries do not arrive together.
pub fn backoff(failures: u32, jitter: Duration) -> Duration {
    let doublings = failures.clamp(1, 12) - 1;
    Duration::from_millis(200).saturating_mul(1 << doublings).min(Duration::from_secs(300)) + jitter
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::ApiError;

    #[test]
    fn the_policy_parks_while_unreachable_rechecks_refusals_and_backs_off_otherwise() {
        let unreachable = Error::api("creating")(ApiError::Unreachable("reset".into()));
        assert_eq!(policy(&unreachable, true), Retry::WhenAnswering);
        assert_eq!(policy(&unreachable, false), Retry::After(Duration::from_millis(200)));
        let refused = Error::api("creating")(ApiError::from_status(422, "Invalid", "denied"));
        assert_eq!(policy(&refused, false), Retry::After(RECHECK));
        assert_eq!(policy(&Error::Rejected("denied".into()), false), Retry::After(RECHECK));
        let conflict = Error::api("writing")(ApiError::from_status(409, "Conflict", "changed"));
        assert_eq!(policy(&conflict, false), Retry::Backoff);
    }

    #[test]
    fn the_backoff_doubles_to_five_minutes() {
        let none = Duration::ZERO;
        assert_eq!(backoff(1, none), Duration::from_millis(200));
        assert_eq!(backoff(2, none), Duration::from_millis(400));
        assert_eq!(backoff(11, none), Duration::from_millis(200 * 1024));
        assert_eq!(backoff(12, none), Duration::from_secs(300));
        assert_eq!(backoff(40, Duration::from_millis(7)), Duration::from_millis(300_007));
    }
}
