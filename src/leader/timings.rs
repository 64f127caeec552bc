//! The leader election's timings (Lease duration, renew deadline, retry period) and the Lease arithmetic on them.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use tokio::time::Instant;

/// The timings of leader election, with controller-runtime's flags and defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timings {
    /// How long a non-leader waits after it last saw the Lease change before it may take it over.
    pub lease_duration: Duration,
    /// How long the leader keeps leading without a successful renewal.
    pub renew_deadline: Duration,
    /// How often the leader renews, and a candidate retries.
    pub retry_period: Duration,
}

impl Default for Timings {
    fn default() -> Self {
        Self {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

impl Timings {
    /// client-go's rules: the renew deadline is shorter than the lease duration, and leaves room for more than one
    /// renewal attempt (1.2 × the retry period, client-go's jitter factor).
    pub fn validate(&self) -> Result<(), String> {
        let Timings { lease_duration, renew_deadline, retry_period } = *self;
        if retry_period.is_zero() {
            return Err("--leader-elect-retry-period must be greater than zero".to_owned());
        }
        if lease_duration <= renew_deadline {
            return Err(format!(
                "--leader-elect-lease-duration ({lease_duration:?}) must be greater than \
                 --leader-elect-renew-deadline ({renew_deadline:?})"
            ));
        }
        if renew_deadline <= retry_period.mul_f64(1.2) {
            return Err(format!(
                "--leader-elect-renew-deadline ({renew_deadline:?}) must be greater than 1.2 × \
                 --leader-elect-retry-period ({retry_period:?})"
            ));
        }
        Ok(())
    }
}

pub(super) fn seconds(d: Duration) -> i32 {
    i32::try_from(d.as_secs().max(1)).unwrap_or(i32::MAX)
}

/// The Lease record of a release at `now`: still ours, for the margin between our renew deadline and the lease
/// duration (rounded up to whole seconds, at least one).
pub(super) fn released(spec: &mut LeaseSpec, timings: Timings, now: Timestamp) {
    let margin = timings.lease_duration.saturating_sub(timings.renew_deadline);
    let seconds = i32::try_from(margin.as_secs() + u64::from(margin.subsec_nanos() > 0)).unwrap_or(i32::MAX).max(1);
    spec.lease_duration_seconds = Some(seconds);
    spec.renew_time = Some(MicroTime(now));
}

/// Up to 20 % more, so that candidates do not retry in lockstep.
pub(super) fn jittered(d: Duration) -> Duration {
    use std::hash::{BuildHasher, RandomState};
    let r = RandomState::new().hash_one(Instant::now()) % 1000;
    d + d.mul_f64(0.2 * r as f64 / 1000.0)
}
