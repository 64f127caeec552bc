//! The chart's Grafana dashboard and Prometheus alerts: the alert rules pass `promtool check rules` and their unit
//! tests on synthetic series (`promtool test rules`, promtool built from its Go module), every metric the dashboard
//! and the rules name is one a running manager exports, and the chart ships both only when asked, unchanged. Cluster
//! API's controller-runtime dashboard (its queries in `tests/fixtures/capi-controller-runtime-dashboard-exprs.json`)
//! finds every series a manager that is not a Go program can have, and they move when claims are reconciled.

use std::collections::BTreeSet;
use std::process::Command;

use serde_json::Value;
use support::release::{helm, ok, tool_dir};
use support::{TestEnv, repo_root, shared_manager};

const CHART: &str = "charts/capi-ipam-in-cluster";
const RULES: &str = "charts/capi-ipam-in-cluster/files/prometheus-rules.yaml";
const DASHBOARD: &str = "charts/capi-ipam-in-cluster/files/grafana-dashboard.json";

fn promtool(args: &[&str]) -> String {
    let out = Command::new(tool_dir("prometheus").join("promtool"))
        .args(args)
        .current_dir(repo_root())
        .output()
        .expect("promtool (tests/tools/k8s-bin.sh prometheus builds it)");
    ok(out, &format!("promtool {args:?}"))
}

fn rules() -> Value {
    serde_saphyr::from_str(&std::fs::read_to_string(repo_root().join(RULES)).expect("rules")).expect("rules YAML")
}

fn dashboard() -> Value {
    serde_json::from_str(&std::fs::read_to_string(repo_root().join(DASHBOARD)).expect("dashboard")).expect("JSON")
}

/// The families a manager exports: ours, controller-runtime's and client-go's, the process collector's.
const OURS: [&str; 6] =
    ["capi_ipam_", "controller_runtime_", "workqueue_", "rest_client_", "leader_election_", "process_"];

/// The metric names of `prefixes` a PromQL expression uses.
fn names_with(expr: &str, prefixes: &[&str]) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let is_name = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut at = 0;
    while at < expr.len() {
        let tail = &expr[at..];
        let end = tail.find(|c: char| !is_name(c)).unwrap_or(tail.len());
        let word = &tail[..end];
        let starts_word = at == 0 || !expr[..at].ends_with(is_name);
        if starts_word && prefixes.iter().any(|p| word.starts_with(p)) {
            names.insert(word.to_owned());
        }
        at += end.max(1);
        while at < expr.len() && !expr.is_char_boundary(at) {
            at += 1;
        }
    }
    names
}

/// The metric names of our families a PromQL expression uses.
fn metric_names(expr: &str) -> BTreeSet<String> {
    names_with(expr, &OURS)
}

fn rule_exprs() -> Vec<String> {
    let rules = rules();
    let groups = rules["groups"].as_array().expect("groups");
    groups
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("rules").iter())
        .map(|r| r["expr"].as_str().expect("expr").to_owned())
        .collect()
}

fn dashboard_exprs() -> Vec<String> {
    let dashboard = dashboard();
    let panels = dashboard["panels"].as_array().expect("panels");
    panels
        .iter()
        .flat_map(|p| p["targets"].as_array().expect("targets").iter())
        .map(|t| t["expr"].as_str().expect("expr").to_owned())
        .collect()
}

#[test]
fn the_alert_rules_are_valid_and_fire_on_their_synthetic_series() {
    let checked = promtool(&["check", "rules", RULES]);
    assert!(checked.contains("SUCCESS: 6 rules found"), "{checked}");
    let tested = promtool(&["test", "rules", "tests/fixtures/alert-rules-test.yaml"]);
    assert!(tested.contains("SUCCESS"), "{tested}");
    let names: BTreeSet<String> = rules()["groups"][0]["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .map(|r| r["alert"].as_str().expect("alert").to_owned())
        .collect();
    // Every alert has a test case in the fixture (promtool alone would not notice an untested one).
    let tests = std::fs::read_to_string(repo_root().join("tests/fixtures/alert-rules-test.yaml")).expect("fixture");
    for alert in &names {
        assert!(tests.contains(&format!("alertname: {alert}\n")), "{alert} has no promtool test");
    }
}

/// The names a scrape exposes: OpenMetrics counters end in `_total`, histograms in `_bucket`, `_sum` and `_count`.
fn exported(scrape: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in scrape.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else { continue };
        let mut parts = rest.split_whitespace();
        let (Some(name), Some(kind)) = (parts.next(), parts.next()) else { continue };
        match kind {
            "counter" => names.insert(format!("{name}_total")),
            "histogram" => {
                names.extend(["_bucket", "_sum", "_count"].map(|s| format!("{name}{s}")));
                true
            }
            _ => names.insert(name.to_owned()),
        };
    }
    names
}

#[tokio::test]
async fn every_metric_the_dashboard_and_the_alerts_name_is_exported_by_a_running_manager() {
    let _env = TestEnv::with_manager("observability").await;
    let scrape = shared_manager().metrics().expect("a scrape of /metrics");
    let exported = exported(&scrape);
    assert!(exported.contains("capi_ipam_leader"), "the scrape has no capi_ipam metrics:\n{scrape}");
    let (dashboard, rules): (Vec<String>, Vec<String>) = (dashboard_exprs(), rule_exprs());
    let mut named = BTreeSet::new();
    for expr in dashboard.iter().chain(&rules) {
        named.extend(metric_names(expr));
    }
    let missing: Vec<&String> = named.difference(&exported).collect();
    assert!(missing.is_empty(), "named but not exported: {missing:?}\nexported: {exported:?}");
    // What the issue asks the dashboard to show.
    let all = dashboard.join("\n");
    for shown in [
        "capi_ipam_pool_addresses_free",
        "capi_ipam_claims_waiting",
        "capi_ipam_claims_waiting_longest_seconds",
        "capi_ipam_allocation_duration_seconds_bucket",
        "capi_ipam_reconcile_errors_total",
        "capi_ipam_webhook_request_duration_seconds_bucket",
        "capi_ipam_webhook_requests_total",
    ] {
        assert!(metric_names(&all).contains(shown), "the dashboard does not show {shown}");
    }
}

fn rendered(args: &[&str], template: &str) -> Option<Value> {
    let mut all = vec!["template", "ipam", CHART, "--namespace", "ipam-system", "--show-only", template];
    all.extend_from_slice(args);
    let out = helm(&all);
    if !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("could not find template") {
        return None; // rendered to nothing
    }
    Some(serde_saphyr::from_str(&ok(out, "helm template")).expect("YAML"))
}

#[test]
fn the_chart_ships_the_dashboard_and_the_alerts_only_when_asked_and_unchanged() {
    assert!(rendered(&[], "templates/prometheusrule.yaml").is_none());
    assert!(rendered(&[], "templates/grafana-dashboard.yaml").is_none());

    let rule = rendered(
        &["--set", "prometheusRule.enabled=true", "--set", "prometheusRule.labels.release=kube-prometheus-stack"],
        "templates/prometheusrule.yaml",
    )
    .expect("a PrometheusRule");
    assert_eq!(rule["kind"], "PrometheusRule");
    assert_eq!(rule["metadata"]["labels"]["release"], "kube-prometheus-stack");
    assert_eq!(rule["spec"], rules(), "the PrometheusRule differs from the rules promtool tests");

    let config_map = rendered(
        &["--set", "grafanaDashboard.enabled=true", "--set", "grafanaDashboard.namespace=monitoring"],
        "templates/grafana-dashboard.yaml",
    )
    .expect("a ConfigMap");
    assert_eq!(config_map["metadata"]["namespace"], "monitoring");
    assert_eq!(config_map["metadata"]["labels"]["grafana_dashboard"], "1");
    let shipped: Value =
        serde_json::from_str(config_map["data"]["capi-ipam-in-cluster.json"].as_str().expect("data")).expect("JSON");
    assert_eq!(shipped, dashboard());
    // A dashboard Grafana imports: a stable uid, a data source variable every panel uses.
    assert_eq!(shipped["uid"], "capi-ipam-in-cluster");
    for panel in shipped["panels"].as_array().expect("panels") {
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "{}", panel["title"]);
    }
}

/// Every metric name Cluster API's controller-runtime dashboard queries, and what it leaves out as no manager of ours
/// can have it: the Go runtime's (`go_*`), the kubelet's and kube-state-metrics' (`container_*`, `kube_*`), and Cluster
/// API's own controllers' (`capi_*`).
fn capi_dashboard_names() -> BTreeSet<String> {
    let text = std::fs::read_to_string(repo_root().join("tests/fixtures/capi-controller-runtime-dashboard-exprs.json"))
        .expect("fixture");
    let fixture: Value = serde_json::from_str(&text).expect("JSON");
    let mut names = BTreeSet::new();
    for expr in fixture["exprs"].as_array().expect("exprs") {
        let expr = expr.as_str().expect("an expression");
        names.extend(names_with(expr, &["go_", "container_", "kube_", "capi_"]).into_iter().filter(|n| {
            // Cluster API's own series start with `capi_`; ours with `capi_ipam_`, which this dashboard does not query.
            n.starts_with("capi_ipam_")
        }));
        names.extend(metric_names(expr));
    }
    names
}

/// The value of the sample `series` (a name and its labels as the scrape prints them), summed over the samples whose
/// labels include all of `labels`.
fn sample_sum(scrape: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    scrape
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (n, rest) = series.split_once('{').unwrap_or((series, "}"));
            let matches = n == name && labels.iter().all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")));
            matches.then(|| value.parse::<f64>().ok()).flatten()
        })
        .sum()
}

#[tokio::test]
async fn cluster_apis_controller_runtime_dashboard_finds_its_series_and_they_move_when_claims_are_reconciled() {
    let env = TestEnv::with_manager("crdash").await;
    let (c, ns) = (&env.client, &env.namespace);
    let before = shared_manager().metrics().expect("a scrape of /metrics");
    let named = capi_dashboard_names();
    for expected in ["controller_runtime_reconcile_total", "workqueue_depth", "rest_client_requests_total"] {
        assert!(named.contains(expected), "the fixture's dashboard does not query {expected}: {named:?}");
    }
    let exported = exported(&before);
    // A histogram's bare name is a native histogram, which the Go client serves only over protobuf to a Prometheus
    // that asks; ours is the classic one (`_bucket`, `_sum`, `_count`), which the dashboard's quantile panels query.
    let missing: Vec<&String> =
        named.iter().filter(|n| !exported.contains(*n) && !exported.contains(&format!("{n}_bucket"))).collect();
    assert!(missing.is_empty(), "Cluster API's dashboard queries, and we do not export: {missing:?}");

    support::claims::create_pool(
        c,
        "InClusterIPPool",
        ns,
        "pool",
        serde_json::json!({"addresses": ["10.9.0.1-10.9.0.9"], "prefix": 24}),
    )
    .await;
    let capi = support::claims::Capi::V1Beta2;
    for i in 0..3 {
        capi.create_claim(c, ns, &format!("c{i}"), "InClusterIPPool", "pool").await;
    }
    for i in 0..3 {
        capi.wait_bound(c, ns, &format!("c{i}")).await;
    }
    let after = shared_manager().metrics().expect("a scrape of /metrics");
    let claims = [("controller", "ipaddressclaim")];
    let pools = [("controller", "inclusterippool")];
    let queue = [("name", "ipaddressclaim")];
    for (name, labels) in [
        ("controller_runtime_reconcile_total", &claims[..]),
        ("controller_runtime_reconcile_total", &pools[..]),
        ("controller_runtime_reconcile_time_seconds_count", &claims[..]),
        ("workqueue_adds_total", &queue[..]),
        ("workqueue_queue_duration_seconds_count", &queue[..]),
        ("workqueue_work_duration_seconds_count", &queue[..]),
        ("controller_runtime_webhook_requests_total", &[("code", "200")][..]),
        ("controller_runtime_webhook_latency_seconds_count", &[][..]),
        ("rest_client_requests_total", &[("method", "POST"), ("code", "201")][..]),
        ("process_cpu_seconds_total", &[][..]),
    ] {
        let (was, is) = (sample_sum(&before, name, labels), sample_sum(&after, name, labels));
        assert!(is > was, "{name}{labels:?} did not move: {was} then {is}");
    }
    assert_eq!(sample_sum(&after, "controller_runtime_max_concurrent_reconciles", &claims), 32.0);
    assert!(sample_sum(&after, "process_resident_memory_bytes", &[]) > 0.0);
    // Our own results are lowercase, one controller per kind as the Go provider names them.
    assert!(
        sample_sum(&after, "capi_ipam_reconcile_total", &[("controller", "inclusterippool"), ("result", "success")])
            > 0.0
    );
    assert!(!after.contains("result=\"Success\""), "capitalized results are gone");
}
