//! How a worker's run ended, and what the queue does about it. The queue ([`super::queue::WorkQueue::finish`]) owns
//! every retry of a key: its backoff after failures in a row, parking while the API server does not answer, and
//! delayed requeues. Which retry an error asks for is the controllers' error's to say (`Error::retry`): the runtime
//! knows no error of theirs.

use std::time::Duration;

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

/// The delay before the `failures`-th retry in a row (1 for the first), plus `jitter` (< 100 ms, fixed per key) so
/// that a burst's retries do not arrive together.
pub fn backoff(failures: u32, jitter: Duration) -> Duration {
    let doublings = failures.clamp(1, 12) - 1;
    Duration::from_millis(200).saturating_mul(1 << doublings).min(Duration::from_secs(300)) + jitter
}

#[cfg(test)]
mod tests {
    use super::*;

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
