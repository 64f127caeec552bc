//! Prometheus metrics (docs/compatibility.md D16): controller-runtime's families as the Go provider exports them
//! ([`controller_runtime`]), the process collector's ([`process`]), and ours, `capi_ipam_*`. Labels stay bounded:
//! pool kind, namespace and name, controller, webhook path and result, error kind, status code and method. Nothing is
//! labelled per claim or per address.

/// Every kind of a reconcile's error (`crate::error::Error::kind`), each exported from the start, at 0.
pub const ERROR_KINDS: [&str; 8] =
    ["conflict", "not_found", "throttled", "api", "transport", "rejected", "internal", "fenced"];

pub mod controller_runtime;
pub mod process;
pub mod rest_client;

use parking_lot::Mutex;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Weak};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::api::PoolKind;
use crate::ipam::PoolCounts;
pub use controller_runtime::{CLAIM_CONTROLLER, ControllerRuntime, QueueSeries, ReconcileResult, pool_controller};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolLabels {
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolKindLabels {
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    pub queue: &'static str,
}

/// The gauges of one work queue (`crate::runtime::queue`): keys waiting for a worker, and keys due later.
#[derive(Clone, Debug, Default)]
pub struct QueueGauges {
    pub waiting: Gauge,
    pub delayed: Gauge,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    pub controller: &'static str,
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub controller: &'static str,
    pub error: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookLabels {
    pub path: String,
    pub result: &'static str,
}

/// The claims the leader has seen without an address and not yet bound (whatever they wait for: a free address, their
/// pool, their Cluster), read when metrics are scraped so that how long they waited is current.
pub trait WaitingClaims: Send + Sync {
    /// How many claims wait, and how long the one waiting longest has waited.
    fn waiting(&self) -> (usize, Duration);
}

/// Every metric of the process, registered once.
pub struct Metrics {
    registry: Registry,
    pool_total: Family<PoolLabels, Gauge>,
    pool_used: Family<PoolLabels, Gauge>,
    pool_free: Family<PoolLabels, Gauge>,
    pool_out_of_range: Family<PoolLabels, Gauge>,
    pool_duplicated: Family<PoolLabels, Gauge>,
    pool_ready: Family<PoolLabels, Gauge>,
    pool_nearly_exhausted: Family<PoolLabels, Gauge>,
    pool_exhausted: Family<PoolLabels, Gauge>,
    duplicates_detected: Family<PoolKindLabels, Counter>,
    duplicates_withdrawn: Family<PoolKindLabels, Counter>,
    orphans_released: Family<PoolKindLabels, Counter>,
    leader: Gauge,
    fenced: Counter,
    allocations: Family<PoolKindLabels, Counter>,
    releases: Family<PoolKindLabels, Counter>,
    allocation_latency: Histogram,
    reconciles: Family<ReconcileLabels, Counter>,
    reconcile_errors: Family<ErrorLabels, Counter>,
    reconcile_duration: Family<ControllerLabels, Histogram>,
    webhook_requests: Family<WebhookLabels, Counter>,
    webhook_duration: Family<WebhookLabels, Histogram>,
    queue_waiting: Family<QueueLabels, Gauge>,
    queue_delayed: Family<QueueLabels, Gauge>,
    claims_waiting: Gauge,
    claims_waiting_longest: Gauge<f64, AtomicU64>,
    /// The current leader term's claims; gone (0 waiting) between terms and on replicas that do not lead.
    waiting_source: Mutex<Option<Weak<dyn WaitingClaims>>>,
    controller_runtime: ControllerRuntime,
    /// The Lease `leader_election_master_status` names.
    lease: Mutex<Option<String>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

fn latency_histogram() -> Histogram {
    // 1 ms to ~65 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 17))
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut top = Registry::default();
        let controller_runtime = ControllerRuntime::register(&mut top);
        top.register_collector(Box::new(process::ProcessCollector));
        let registry = top.sub_registry_with_prefix("capi_ipam");
        let m = Metrics {
            pool_total: Family::default(),
            pool_used: Family::default(),
            pool_free: Family::default(),
            pool_out_of_range: Family::default(),
            pool_duplicated: Family::default(),
            pool_ready: Family::default(),
            pool_nearly_exhausted: Family::default(),
            pool_exhausted: Family::default(),
            duplicates_detected: Family::default(),
            duplicates_withdrawn: Family::default(),
            orphans_released: Family::default(),
            leader: Gauge::default(),
            fenced: Counter::default(),
            allocations: Family::default(),
            releases: Family::default(),
            allocation_latency: latency_histogram(),
            reconciles: Family::default(),
            reconcile_errors: Family::default(),
            reconcile_duration: Family::new_with_constructor(latency_histogram),
            webhook_requests: Family::default(),
            webhook_duration: Family::new_with_constructor(latency_histogram),
            queue_waiting: Family::default(),
            queue_delayed: Family::default(),
            claims_waiting: Gauge::default(),
            claims_waiting_longest: Gauge::default(),
            waiting_source: Mutex::new(None),
            controller_runtime,
            lease: Mutex::new(None),
            registry: Registry::default(),
        };
        registry.register(
            "workqueue_depth",
            "Keys waiting for a worker, by queue (claims, pools)",
            m.queue_waiting.clone(),
        );
        registry.register(
            "workqueue_delayed",
            "Keys due for another run later (retries, rechecks, grace periods), by queue",
            m.queue_delayed.clone(),
        );
        registry.register(
            "pool_addresses_total",
            "Allocatable addresses (prefix pools: child prefixes) of a pool",
            m.pool_total.clone(),
        );
        registry.register("pool_addresses_used", "IPAddresses that reference a pool", m.pool_used.clone());
        registry.register("pool_addresses_free", "Addresses a pool can still hand out", m.pool_free.clone());
        registry.register(
            "pool_addresses_out_of_range",
            "IPAddresses of a pool that its current spec can no longer hand out",
            m.pool_out_of_range.clone(),
        );
        registry.register(
            "pool_addresses_duplicated",
            "Addresses of a pool held by more than one IPAddress (must be 0)",
            m.pool_duplicated.clone(),
        );
        registry.register("pool_ready", "1 while the pool's Ready condition is True, else 0", m.pool_ready.clone());
        registry.register(
            "pool_nearly_exhausted",
            "1 while the pool's AddressesAvailable condition says NearlyExhausted, else 0",
            m.pool_nearly_exhausted.clone(),
        );
        registry.register(
            "pool_exhausted",
            "1 while the pool has no free address (its AddressesAvailable condition is False), else 0",
            m.pool_exhausted.clone(),
        );
        registry.register(
            "duplicate_addresses_detected",
            "Times an IPAddress was seen holding an address another IPAddress of its pool holds",
            m.duplicates_detected.clone(),
        );
        registry.register(
            "duplicate_addresses_withdrawn",
            "Duplicated IPAddresses deleted before their claim was bound to them",
            m.duplicates_withdrawn.clone(),
        );
        registry.register(
            "orphaned_addresses_released",
            "IPAddresses released because their claim was gone: deleted without our release (its finalizer removed by \
             hand or by clusterctl), or while its address was being created. Races the design handles, counted, not \
             logged as warnings",
            m.orphans_released.clone(),
        );
        registry.register("leader", "1 while this replica leads and allocates, else 0", m.leader.clone());
        registry.register(
            "leader_fenced",
            "Leader terms that ended because the Lease was not renewed within the renew deadline",
            m.fenced.clone(),
        );
        registry.register(
            "claims_waiting",
            "Claims seen without an address and not yet bound, in this replica's leader term",
            m.claims_waiting.clone(),
        );
        registry.register(
            "claims_waiting_longest_seconds",
            "How long the claim waiting longest has waited for its address, in this replica's leader term",
            m.claims_waiting_longest.clone(),
        );
        registry.register("allocations", "Addresses handed out", m.allocations.clone());
        registry.register("releases", "Addresses released", m.releases.clone());
        registry.register(
            "allocation_duration_seconds",
            "Time from a claim's first reconcile to its bound address",
            m.allocation_latency.clone(),
        );
        registry.register("reconcile", "Reconciles by controller and result", m.reconciles.clone());
        registry.register(
            "reconcile_errors",
            "Reconcile errors by controller and error kind",
            m.reconcile_errors.clone(),
        );
        registry.register("reconcile_time_seconds", "Duration of reconciles", m.reconcile_duration.clone());
        registry.register("webhook_requests", "Webhook requests by path and result", m.webhook_requests.clone());
        registry.register(
            "webhook_request_duration_seconds",
            "Duration of webhook requests",
            m.webhook_duration.clone(),
        );
        m.initialize_counters();
        Metrics { registry: top, ..m }
    }

    /// controller-runtime's families.
    pub fn controller_runtime(&self) -> &ControllerRuntime {
        &self.controller_runtime
    }

    /// Every counter series that can exist is exported from the start, at 0: Prometheus sees no increase in a series
    /// that first appears at 1, so the first error would never reach `rate()` or an alert.
    fn initialize_counters(&self) {
        for kind in PoolKind::ALL {
            let labels = PoolKindLabels { kind: kind.kind().to_owned() };
            for family in [
                &self.allocations,
                &self.releases,
                &self.duplicates_detected,
                &self.duplicates_withdrawn,
                &self.orphans_released,
            ] {
                let _ = family.get_or_create(&labels);
            }
        }
        for controller in controller_runtime::controllers() {
            for result in ["success", "error"] {
                let _ = self.reconciles.get_or_create(&ReconcileLabels { controller, result });
            }
            for error in ERROR_KINDS {
                let _ = self.reconcile_errors.get_or_create(&ErrorLabels { controller, error });
            }
        }
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let source = self.waiting_source.lock().as_ref().and_then(Weak::upgrade);
        let (waiting, longest) = source.map_or((0, Duration::ZERO), |s| s.waiting());
        self.claims_waiting.set(i64::try_from(waiting).unwrap_or(i64::MAX));
        self.claims_waiting_longest.set(longest.as_secs_f64());
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }

    pub fn set_pool(&self, kind: PoolKind, namespace: &str, name: &str, counts: PoolCounts) {
        let labels =
            PoolLabels { kind: kind.kind().to_owned(), namespace: namespace.to_owned(), name: name.to_owned() };
        self.pool_total.get_or_create(&labels).set(counts.total);
        self.pool_used.get_or_create(&labels).set(counts.used);
        self.pool_free.get_or_create(&labels).set(counts.free);
        self.pool_out_of_range.get_or_create(&labels).set(counts.out_of_range);
    }

    /// The pool's conditions as gauges for dashboards and alerts: Ready, nearly exhausted, exhausted (1 or 0).
    pub fn set_pool_conditions(
        &self,
        kind: PoolKind,
        namespace: &str,
        name: &str,
        ready: bool,
        nearly_exhausted: bool,
        exhausted: bool,
    ) {
        let labels =
            PoolLabels { kind: kind.kind().to_owned(), namespace: namespace.to_owned(), name: name.to_owned() };
        self.pool_ready.get_or_create(&labels).set(i64::from(ready));
        self.pool_nearly_exhausted.get_or_create(&labels).set(i64::from(nearly_exhausted));
        self.pool_exhausted.get_or_create(&labels).set(i64::from(exhausted));
    }

    pub fn set_pool_duplicated(&self, kind: PoolKind, namespace: &str, name: &str, duplicated: usize) {
        let labels =
            PoolLabels { kind: kind.kind().to_owned(), namespace: namespace.to_owned(), name: name.to_owned() };
        self.pool_duplicated.get_or_create(&labels).set(i64::try_from(duplicated).unwrap_or(i64::MAX));
    }

    pub fn duplicate_detected(&self, kind: PoolKind) {
        self.duplicates_detected.get_or_create(&PoolKindLabels { kind: kind.kind().to_owned() }).inc();
    }

    pub fn orphan_released(&self, kind: PoolKind) {
        self.orphans_released.get_or_create(&PoolKindLabels { kind: kind.kind().to_owned() }).inc();
    }

    pub fn duplicate_withdrawn(&self, kind: PoolKind) {
        self.duplicates_withdrawn.get_or_create(&PoolKindLabels { kind: kind.kind().to_owned() }).inc();
    }

    /// The gauges of the work queue `queue`.
    pub fn queue(&self, queue: &'static str) -> QueueGauges {
        let labels = QueueLabels { queue };
        QueueGauges {
            waiting: self.queue_waiting.get_or_create(&labels).clone(),
            delayed: self.queue_delayed.get_or_create(&labels).clone(),
        }
    }

    /// Reads the waiting claims from `source` at every scrape, while it lives.
    pub fn watch_waiting(&self, source: Weak<dyn WaitingClaims>) {
        *self.waiting_source.lock() = Some(source);
    }

    /// The Lease this replica campaigns for (`leader_election_master_status{name}`), exported at 0.
    pub fn campaign(&self, lease: &str) {
        *self.lease.lock() = Some(lease.to_owned());
        self.controller_runtime.set_leader(lease, false);
    }

    /// Every per-pool gauge family.
    fn pool_families(&self) -> [&Family<PoolLabels, Gauge>; 8] {
        [
            &self.pool_total,
            &self.pool_used,
            &self.pool_free,
            &self.pool_out_of_range,
            &self.pool_duplicated,
            &self.pool_ready,
            &self.pool_nearly_exhausted,
            &self.pool_exhausted,
        ]
    }

    pub fn set_leading(&self, leading: bool) {
        self.leader.set(i64::from(leading));
        if !leading {
            // Only the leader reconciles pools: a replica that stopped leading would go on exporting what was true
            // when it last did, beside the new leader's series (alerts take the max across replicas).
            for family in self.pool_families() {
                family.clear();
            }
        }
        if let Some(lease) = self.lease.lock().as_deref() {
            self.controller_runtime.set_leader(lease, leading);
        }
    }

    pub fn fenced(&self) {
        self.fenced.inc();
    }

    pub fn forget_pool(&self, kind: PoolKind, namespace: &str, name: &str) {
        let labels =
            PoolLabels { kind: kind.kind().to_owned(), namespace: namespace.to_owned(), name: name.to_owned() };
        for family in self.pool_families() {
            family.remove(&labels);
        }
    }

    pub fn allocated(&self, kind: PoolKind, latency: Option<Duration>) {
        self.allocations.get_or_create(&PoolKindLabels { kind: kind.kind().to_owned() }).inc();
        if let Some(l) = latency {
            self.allocation_latency.observe(l.as_secs_f64());
        }
    }

    pub fn released(&self, kind: PoolKind) {
        self.releases.get_or_create(&PoolKindLabels { kind: kind.kind().to_owned() }).inc();
    }

    /// One reconcile of `controller` (ours and controller-runtime's series): how it ended and, when it failed, the
    /// kind of its error.
    pub fn reconciled(
        &self,
        controller: &'static str,
        duration: Duration,
        result: ReconcileResult,
        error: Option<&'static str>,
    ) {
        let ours = if error.is_some() { "error" } else { "success" };
        self.reconciles.get_or_create(&ReconcileLabels { controller, result: ours }).inc();
        if let Some(error) = error {
            self.reconcile_errors.get_or_create(&ErrorLabels { controller, error }).inc();
        }
        self.reconcile_duration.get_or_create(&ControllerLabels { controller }).observe(duration.as_secs_f64());
        self.controller_runtime.reconciled(controller, result, duration.as_secs_f64());
    }

    /// One webhook request: our result label, and the HTTP status code controller-runtime counts.
    pub fn webhook(&self, path: &str, result: &'static str, code: u16, duration: Duration) {
        let labels = WebhookLabels { path: path.to_owned(), result };
        self.webhook_requests.get_or_create(&labels).inc();
        self.webhook_duration.get_or_create(&labels).observe(duration.as_secs_f64());
        self.controller_runtime.webhook_answered(path, code, duration.as_secs_f64());
    }
}

pub type SharedMetrics = Arc<Metrics>;

#[cfg(test)]
mod tests {
    use super::*;

    /// A replica that stops leading stops reconciling pools: what it last exported of them goes, so that it never
    /// stands beside the new leader's series (the alerts take the max across replicas).
    #[test]
    fn a_replica_that_stops_leading_drops_its_pool_gauges() {
        let m = Metrics::new();
        m.set_leading(true);
        m.set_pool(PoolKind::InClusterIPPool, "ns", "p", PoolCounts::new(4, 4, 0));
        m.set_pool_conditions(PoolKind::InClusterIPPool, "ns", "p", true, false, true);
        let pools = |m: &Metrics| m.encode().lines().filter(|l| l.starts_with("capi_ipam_pool_")).count();
        assert_eq!(pools(&m), 7, "{}", m.encode());
        assert!(
            m.encode().contains("capi_ipam_pool_exhausted{kind=\"InClusterIPPool\",namespace=\"ns\",name=\"p\"} 1")
        );
        m.set_leading(false);
        assert_eq!(pools(&m), 0, "{}", m.encode());
    }

    #[test]
    fn counters_are_exported_at_zero_before_anything_happens() {
        let scraped = Metrics::new().encode();
        for line in [
            "capi_ipam_reconcile_errors_total{controller=\"ipaddressclaim\",error=\"transport\"} 0",
            "capi_ipam_reconcile_errors_total{controller=\"globalinclusterippool\",error=\"fenced\"} 0",
            "capi_ipam_reconcile_total{controller=\"inclusterprefixpool\",result=\"error\"} 0",
            "controller_runtime_reconcile_total{controller=\"ipaddressclaim\",result=\"requeue_after\"} 0",
            "process_open_fds",
            "capi_ipam_allocations_total{kind=\"GlobalInClusterPrefixPool\"} 0",
            "capi_ipam_releases_total{kind=\"InClusterIPPool\"} 0",
            "capi_ipam_claims_waiting 0",
        ] {
            assert!(
                scraped.lines().any(|l| l == line || l.starts_with(&format!("{line} "))),
                "{line} missing from:\n{scraped}"
            );
        }
    }
}
