//! controller-runtime's metric families (v0.21, the version the Go provider v1.1.0 is built with), with its names,
//! label names and values, bucket boundaries and help texts, so that Cluster API's controller-runtime dashboard and
//! the alerts users wrote for the Go provider keep working (docs/compatibility.md D16). The controllers are named as
//! the Go provider names them: one per kind.

use std::sync::atomic::AtomicU64;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::api::PoolKind;

/// The claim controller's name.
pub const CLAIM_CONTROLLER: &str = "ipaddressclaim";

/// The Go provider's controller of each pool kind.
pub fn pool_controller(kind: PoolKind) -> &'static str {
    match kind {
        PoolKind::InClusterIPPool => "inclusterippool",
        PoolKind::GlobalInClusterIPPool => "globalinclusterippool",
        PoolKind::InClusterPrefixPool => "inclusterprefixpool",
        PoolKind::GlobalInClusterPrefixPool => "globalinclusterprefixpool",
    }
}

/// Every controller, claims first.
pub fn controllers() -> impl Iterator<Item = &'static str> {
    std::iter::once(CLAIM_CONTROLLER).chain(PoolKind::ALL.into_iter().map(pool_controller))
}

/// How a reconcile ended, in controller-runtime's words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReconcileResult {
    /// Done, nothing asked for until something changes.
    Success,
    /// Failed.
    Error,
    /// Done, another run asked for at once (we never ask for one; exported at 0 as controller-runtime does).
    Requeue,
    /// Done, another run asked for after a delay.
    RequeueAfter,
}

impl ReconcileResult {
    pub const ALL: [ReconcileResult; 4] =
        [ReconcileResult::Success, ReconcileResult::Error, ReconcileResult::Requeue, ReconcileResult::RequeueAfter];

    pub fn label(self) -> &'static str {
        match self {
            ReconcileResult::Success => "success",
            ReconcileResult::Error => "error",
            ReconcileResult::Requeue => "requeue",
            ReconcileResult::RequeueAfter => "requeue_after",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabel {
    controller: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    controller: &'static str,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    name: &'static str,
    controller: &'static str,
}

/// `workqueue_depth` also names the priority ("" for a queue without priorities, as ours are).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DepthLabels {
    name: &'static str,
    controller: &'static str,
    priority: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookLabel {
    webhook: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookCodeLabels {
    webhook: String,
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LeaseLabel {
    name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    code: String,
    method: String,
    host: String,
}

/// The series of one controller's work queue (client-go's workqueue metrics, labelled by controller-runtime).
#[derive(Clone, Debug)]
pub struct QueueSeries {
    pub depth: Gauge,
    pub adds: Counter,
    pub queue_duration: Histogram,
    pub work_duration: Histogram,
    pub unfinished_work: Gauge<f64, AtomicU64>,
    pub longest_running: Gauge<f64, AtomicU64>,
    pub retries: Counter,
}

impl Default for QueueSeries {
    /// Series of a queue that no registry exports (tests).
    fn default() -> Self {
        QueueSeries {
            depth: Gauge::default(),
            adds: Counter::default(),
            queue_duration: queue_histogram(),
            work_duration: queue_histogram(),
            unfinished_work: Gauge::default(),
            longest_running: Gauge::default(),
            retries: Counter::default(),
        }
    }
}

/// client-go's `ExponentialBuckets(10e-9, 10, 12)`: 10 ns to 1,000 s, multiplied up one bucket at a time as Go does, so
/// that the bounds are its very floats (`9.999999999999999e-06`, not `1e-05`).
fn queue_histogram() -> Histogram {
    Histogram::new(std::iter::successors(Some(10e-9_f64), |b| Some(b * 10.0)).take(12))
}

fn reconcile_histogram() -> Histogram {
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5,
        1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0,
    ])
}

/// Prometheus's default buckets (`prometheus.DefBuckets`), which the webhook latency uses.
fn webhook_histogram() -> Histogram {
    Histogram::new([0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0])
}

/// Metric families encoded with their help texts as they are.
struct Described(Vec<(&'static str, &'static str, Box<dyn EncodeMetric + Send + Sync>)>);

impl std::fmt::Debug for Described {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.iter().map(|(name, _, _)| name)).finish()
    }
}

impl Collector for Described {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for (name, help, metric) in &self.0 {
            metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)?;
        }
        Ok(())
    }
}

/// The families, registered once at the top level of the process's registry (no prefix).
#[derive(Debug)]
pub struct ControllerRuntime {
    reconciles: Family<ResultLabels, Counter>,
    reconcile_errors: Family<ControllerLabel, Counter>,
    terminal_reconcile_errors: Family<ControllerLabel, Counter>,
    reconcile_panics: Family<ControllerLabel, Counter>,
    reconcile_time: Family<ControllerLabel, Histogram>,
    max_concurrent_reconciles: Family<ControllerLabel, Gauge>,
    active_workers: Family<ControllerLabel, Gauge>,
    queue_depth: Family<DepthLabels, Gauge>,
    queue_adds: Family<QueueLabels, Counter>,
    queue_duration: Family<QueueLabels, Histogram>,
    work_duration: Family<QueueLabels, Histogram>,
    unfinished_work: Family<QueueLabels, Gauge<f64, AtomicU64>>,
    longest_running: Family<QueueLabels, Gauge<f64, AtomicU64>>,
    queue_retries: Family<QueueLabels, Counter>,
    webhook_latency: Family<WebhookLabel, Histogram>,
    webhook_requests: Family<WebhookCodeLabels, Counter>,
    webhook_in_flight: Family<WebhookLabel, Gauge>,
    /// Stays 0: a panic ends this process (controller-runtime counts those it recovers from).
    webhook_panics: Counter,
    leader: Family<LeaseLabel, Gauge>,
    rest_requests: Family<RequestLabels, Counter>,
}

impl ControllerRuntime {
    pub fn register(registry: &mut Registry) -> Self {
        let m = ControllerRuntime {
            reconciles: Family::default(),
            reconcile_errors: Family::default(),
            terminal_reconcile_errors: Family::default(),
            reconcile_panics: Family::default(),
            reconcile_time: Family::new_with_constructor(reconcile_histogram),
            max_concurrent_reconciles: Family::default(),
            active_workers: Family::default(),
            queue_depth: Family::default(),
            queue_adds: Family::default(),
            queue_duration: Family::new_with_constructor(queue_histogram),
            work_duration: Family::new_with_constructor(queue_histogram),
            unfinished_work: Family::default(),
            longest_running: Family::default(),
            queue_retries: Family::default(),
            webhook_latency: Family::new_with_constructor(webhook_histogram),
            webhook_requests: Family::default(),
            webhook_in_flight: Family::default(),
            webhook_panics: Counter::default(),
            leader: Family::default(),
            rest_requests: Family::default(),
        };
        // Registered through a collector so that each help text is controller-runtime's to the letter (the
        // registry would append a period). OpenMetrics adds `_total` to a counter's samples.
        let families: Vec<(&'static str, &'static str, Box<dyn EncodeMetric + Send + Sync>)> = vec![
            (
                "controller_runtime_reconcile",
                "Total number of reconciliations per controller",
                Box::new(m.reconciles.clone()),
            ),
            (
                "controller_runtime_reconcile_errors",
                "Total number of reconciliation errors per controller",
                Box::new(m.reconcile_errors.clone()),
            ),
            (
                "controller_runtime_terminal_reconcile_errors",
                "Total number of terminal reconciliation errors per controller",
                Box::new(m.terminal_reconcile_errors.clone()),
            ),
            (
                "controller_runtime_reconcile_panics",
                "Total number of reconciliation panics per controller",
                Box::new(m.reconcile_panics.clone()),
            ),
            (
                "controller_runtime_reconcile_time_seconds",
                "Length of time per reconciliation per controller",
                Box::new(m.reconcile_time.clone()),
            ),
            (
                "controller_runtime_max_concurrent_reconciles",
                "Maximum number of concurrent reconciles per controller",
                Box::new(m.max_concurrent_reconciles.clone()),
            ),
            (
                "controller_runtime_active_workers",
                "Number of currently used workers per controller",
                Box::new(m.active_workers.clone()),
            ),
            (
                "workqueue_depth",
                "Current depth of workqueue by workqueue and priority",
                Box::new(m.queue_depth.clone()),
            ),
            ("workqueue_adds", "Total number of adds handled by workqueue", Box::new(m.queue_adds.clone())),
            (
                "workqueue_queue_duration_seconds",
                "How long in seconds an item stays in workqueue before being requested",
                Box::new(m.queue_duration.clone()),
            ),
            (
                "workqueue_work_duration_seconds",
                "How long in seconds processing an item from workqueue takes.",
                Box::new(m.work_duration.clone()),
            ),
            (
                "workqueue_unfinished_work_seconds",
                "How many seconds of work has been done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate at which this increases.",
                Box::new(m.unfinished_work.clone()),
            ),
            (
                "workqueue_longest_running_processor_seconds",
                "How many seconds has the longest running processor for workqueue been running.",
                Box::new(m.longest_running.clone()),
            ),
            ("workqueue_retries", "Total number of retries handled by workqueue", Box::new(m.queue_retries.clone())),
            (
                "controller_runtime_webhook_latency_seconds",
                "Histogram of the latency of processing admission requests",
                Box::new(m.webhook_latency.clone()),
            ),
            (
                "controller_runtime_webhook_requests",
                "Total number of admission requests by HTTP status code.",
                Box::new(m.webhook_requests.clone()),
            ),
            (
                "controller_runtime_webhook_requests_in_flight",
                "Current number of admission requests being served.",
                Box::new(m.webhook_in_flight.clone()),
            ),
            ("controller_runtime_webhook_panics", "Total number of webhook panics", Box::new(m.webhook_panics.clone())),
            (
                "leader_election_master_status",
                "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease. Please make sure to group by name.",
                Box::new(m.leader.clone()),
            ),
            (
                "rest_client_requests",
                "Number of HTTP requests, partitioned by status code, method, and host.",
                Box::new(m.rest_requests.clone()),
            ),
        ];
        registry.register_collector(Box::new(Described(families)));
        for controller in controllers() {
            let label = ControllerLabel { controller };
            for result in ReconcileResult::ALL {
                let _ = m.reconciles.get_or_create(&ResultLabels { controller, result: result.label() });
            }
            for family in [&m.reconcile_errors, &m.terminal_reconcile_errors, &m.reconcile_panics] {
                let _ = family.get_or_create(&label);
            }
            let _ = m.active_workers.get_or_create(&label);
        }
        m
    }

    /// Records one reconcile of `controller`.
    pub fn reconciled(&self, controller: &'static str, result: ReconcileResult, seconds: f64) {
        self.reconciles.get_or_create(&ResultLabels { controller, result: result.label() }).inc();
        if result == ReconcileResult::Error {
            self.reconcile_errors.get_or_create(&ControllerLabel { controller }).inc();
        }
        self.reconcile_time.get_or_create(&ControllerLabel { controller }).observe(seconds);
    }

    pub fn set_max_concurrent_reconciles(&self, controller: &'static str, workers: usize) {
        let workers = i64::try_from(workers).unwrap_or(i64::MAX);
        self.max_concurrent_reconciles.get_or_create(&ControllerLabel { controller }).set(workers);
    }

    /// The gauge of `controller`'s workers that are reconciling now.
    pub fn active_workers(&self, controller: &'static str) -> Gauge {
        self.active_workers.get_or_create(&ControllerLabel { controller }).clone()
    }

    /// The series of `controller`'s work queue (controller-runtime names the queue after its controller).
    pub fn queue(&self, controller: &'static str) -> QueueSeries {
        let labels = QueueLabels { name: controller, controller };
        QueueSeries {
            depth: self.queue_depth.get_or_create(&DepthLabels { name: controller, controller, priority: "" }).clone(),
            adds: self.queue_adds.get_or_create(&labels).clone(),
            queue_duration: self.queue_duration.get_or_create(&labels).clone(),
            work_duration: self.work_duration.get_or_create(&labels).clone(),
            unfinished_work: self.unfinished_work.get_or_create(&labels).clone(),
            longest_running: self.longest_running.get_or_create(&labels).clone(),
            retries: self.queue_retries.get_or_create(&labels).clone(),
        }
    }

    /// The gauge of `webhook`'s requests being served.
    pub fn webhook_in_flight(&self, webhook: &str) -> Gauge {
        self.webhook_in_flight.get_or_create(&WebhookLabel { webhook: webhook.to_owned() }).clone()
    }

    pub fn webhook_answered(&self, webhook: &str, code: u16, seconds: f64) {
        let label = WebhookLabel { webhook: webhook.to_owned() };
        self.webhook_latency.get_or_create(&label).observe(seconds);
        self.webhook_requests
            .get_or_create(&WebhookCodeLabels { webhook: label.webhook, code: code.to_string() })
            .inc();
    }

    /// Exports the webhook's series at 0 before its first request.
    pub fn webhook_served(&self, webhook: &str) {
        let _ = self.webhook_in_flight.get_or_create(&WebhookLabel { webhook: webhook.to_owned() });
        let _ =
            self.webhook_requests.get_or_create(&WebhookCodeLabels { webhook: webhook.to_owned(), code: "200".into() });
    }

    pub fn set_leader(&self, lease: &str, leading: bool) {
        self.leader.get_or_create(&LeaseLabel { name: lease.to_owned() }).set(i64::from(leading));
    }

    /// One request to the API server: its status code (client-go's `<error>` when none came), method and host.
    pub fn rest_request(&self, code: &str, method: &str, host: &str) {
        let labels = RequestLabels { code: code.to_owned(), method: method.to_owned(), host: host.to_owned() };
        self.rest_requests.get_or_create(&labels).inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconcile_results_and_buckets_are_controller_runtimes() {
        let mut registry = Registry::default();
        let m = ControllerRuntime::register(&mut registry);
        m.reconciled(CLAIM_CONTROLLER, ReconcileResult::RequeueAfter, 0.02);
        m.reconciled(pool_controller(PoolKind::GlobalInClusterPrefixPool), ReconcileResult::Error, 0.3);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).expect("encode");
        for line in [
            "controller_runtime_reconcile_total{controller=\"ipaddressclaim\",result=\"requeue_after\"} 1",
            "controller_runtime_reconcile_total{controller=\"ipaddressclaim\",result=\"requeue\"} 0",
            "controller_runtime_reconcile_total{controller=\"inclusterippool\",result=\"success\"} 0",
            "controller_runtime_reconcile_errors_total{controller=\"globalinclusterprefixpool\"} 1",
            "controller_runtime_reconcile_errors_total{controller=\"ipaddressclaim\"} 0",
            "controller_runtime_reconcile_time_seconds_bucket{le=\"0.025\",controller=\"ipaddressclaim\"} 1",
            "controller_runtime_reconcile_time_seconds_bucket{le=\"60.0\",controller=\"ipaddressclaim\"} 1",
            "controller_runtime_active_workers{controller=\"inclusterprefixpool\"} 0",
        ] {
            assert!(out.lines().any(|l| l == line), "{line} missing from:\n{out}");
        }
        assert!(
            out.lines()
                .any(|l| l == "# HELP controller_runtime_reconcile Total number of reconciliations per controller")
        );
        assert!(out.lines().any(|l| l
            == "# HELP controller_runtime_webhook_requests Total number of admission requests by HTTP status code."));
    }
}
