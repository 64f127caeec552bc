//! The chart's Grafana dashboard and Prometheus alerts: the alert rules pass `promtool check rules` and their unit
//! tests on synthetic series (`promtool test rules`, promtool built from its Go module), every metric the dashboard
//! and the rules name is one a running manager exports, and the chart ships both only when asked, unchanged. Cluster
//! API's controller-runtime dashboard (its queries in `tests/fixtures/capi-controller-runtime-dashboard-exprs.json`)
//! finds every series a manager that is not a Go program can have, and they move when claims are reconciled; and
//! every controller-runtime and client-go family the Go provider v1.1.0 exports is ours, with its type, help, labels
//! and buckets.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

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
    assert!(checked.contains("SUCCESS: 7 rules found"), "{checked}");
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
        "capi_ipam_pool_ready",
        "capi_ipam_pool_nearly_exhausted",
        "capi_ipam_pool_exhausted",
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
    let claims = [("controller", "ipaddressclaim")];
    let pools = [("controller", "inclusterippool")];
    let queue = [("name", "ipaddressclaim")];
    let moving: [(&str, &[(&str, &str)]); 10] = [
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
    ];
    // The pool's reconcile is not on the claims' path: it runs when a pool worker reaches the pool, behind every pool
    // the manager listed at its start (the shared plane keeps the earlier test binaries' pools, hundreds of them), so
    // the scrape is repeated until the series moved or a minute passed.
    let stuck = |after: &str| -> Vec<String> {
        moving
            .iter()
            .filter_map(|(name, labels)| {
                let (was, is) = (sample_sum(&before, name, labels), sample_sum(after, name, labels));
                (is <= was).then(|| format!("{name}{labels:?} did not move: {was} then {is}"))
            })
            .collect()
    };
    let started = std::time::Instant::now();
    let after = loop {
        let after = shared_manager().metrics().expect("a scrape of /metrics");
        if stuck(&after).is_empty() || started.elapsed() > Duration::from_secs(60) {
            break after;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    eprintln!("the series moved {:?} after the claims were bound", started.elapsed());
    let not_moved = stuck(&after);
    assert!(not_moved.is_empty(), "{not_moved:#?}");
    assert_eq!(sample_sum(&after, "controller_runtime_max_concurrent_reconciles", &claims), 32.0);
    assert!(sample_sum(&after, "process_resident_memory_bytes", &[]) > 0.0);
    // Our own results are lowercase, one controller per kind as the Go provider names them.
    assert!(
        sample_sum(&after, "capi_ipam_reconcile_total", &[("controller", "inclusterippool"), ("result", "success")])
            > 0.0
    );
    assert!(!after.contains("result=\"Success\""), "capitalized results are gone");
}

/// A metric family as a scrape shows it: its type, help text, label names (`le` aside) and bucket bounds.
#[derive(Debug, Default, PartialEq)]
struct Family {
    kind: String,
    help: String,
    labels: BTreeSet<String>,
    buckets: BTreeSet<String>,
}

/// A sample's label pairs, `a="x",b="y"` (values may hold escaped quotes and commas).
fn label_pairs(text: &str) -> Vec<(String, String)> {
    let (mut pairs, mut rest) = (Vec::new(), text);
    while let Some((key, after)) = rest.split_once("=\"") {
        let (mut value, mut chars) = (String::new(), after.char_indices());
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => value.extend(chars.next().map(|(_, c)| c)),
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        pairs.push((key.trim_start_matches(',').trim().to_owned(), value));
        rest = &after[end..];
    }
    pairs
}

/// The families of a scrape by base name. The Go client's text format names a counter's family `x_total`, OpenMetrics
/// (ours) `x`; bucket bounds are compared as numbers (the Go client prints `60`, ours `60.0`).
fn families(scrape: &str) -> std::collections::BTreeMap<String, Family> {
    let base = |name: &str| name.strip_suffix("_total").unwrap_or(name).to_owned();
    let mut families: std::collections::BTreeMap<String, Family> = Default::default();
    for line in scrape.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            families.entry(base(name)).or_default().help = help.to_owned();
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, ""));
            families.entry(base(name)).or_default().kind = kind.to_owned();
        } else if !line.starts_with('#') && !line.is_empty() {
            let series = line.rsplit_once(' ').map_or(line, |(s, _)| s);
            let (name, labels) = series.split_once('{').unwrap_or((series, ""));
            let family = ["", "_bucket", "_sum", "_count", "_total", "_created"]
                .iter()
                .filter_map(|suffix| name.strip_suffix(suffix))
                .map(base)
                .find(|f| families.contains_key(f));
            let Some(family) = family.and_then(|f| families.get_mut(&f)) else { continue };
            for (key, value) in label_pairs(labels.trim_end_matches('}')) {
                if key == "le" {
                    family.buckets.insert(value.parse::<f64>().map_or(value, |v| v.to_string()));
                } else {
                    family.labels.insert(key);
                }
            }
        }
    }
    families
}

/// Our `/metrics` held against the Go provider v1.1.0's own, both running on one plane and both having reconciled the
/// same claim and pool: every family it exports under controller-runtime's and client-go's names is ours too, with
/// the same type, help text, label names and bucket bounds (it found `controller_runtime_webhook_panics_total` missing,
/// and client-go's workqueue bounds printed from exact decimals, not from Go's floats).
#[tokio::test]
async fn every_controller_runtime_family_of_the_go_provider_is_ours_with_the_same_type_help_labels_and_buckets() {
    use support::claims::{Capi, create_pool};
    use support::manager::{Launch, Manager, http_get};
    use support::release::{GoProvider, go_provider_dir};
    let plane = tokio::task::spawn_blocking(|| support::Plane::private("metrics-vs-go")).await.expect("plane");
    let go_dir = tokio::task::spawn_blocking(go_provider_dir).await.expect("the Go provider");
    let plane_dir = plane.dir.clone();
    let go = tokio::task::spawn_blocking(move || GoProvider::start(&support::Plane::at(&plane_dir), &go_dir))
        .await
        .expect("the Go provider running");
    let manager = Manager::started(&plane, Launch::default(), &["--insecure-diagnostics"]).await;
    let client = plane.client().await;
    let ns = support::create_namespace(&client, "metrics").await;
    create_pool(
        &client,
        "InClusterIPPool",
        &ns,
        "pool",
        serde_json::json!({"addresses": ["10.9.1.1-10.9.1.9"], "prefix": 24}),
    )
    .await;
    Capi::V1Beta2.create_claim(&client, &ns, "c", "InClusterIPPool", "pool").await;
    Capi::V1Beta2.wait_bound(&client, &ns, "c").await;

    // Each has reconciled the claim and the pool once its reconcile histogram has their samples.
    let reconciled = |scrape: &str| {
        ["ipaddressclaim", "inclusterippool"]
            .iter()
            .all(|c| scrape.contains(&format!("controller_runtime_reconcile_time_seconds_count{{controller=\"{c}\"}}")))
    };
    let mut scrapes = None;
    for _ in 0..120 {
        let theirs = http_get(go.metrics_port, "/metrics").map(|(_, body)| body).unwrap_or_default();
        let ours = manager.metrics().unwrap_or_default();
        if reconciled(&theirs) && reconciled(&ours) {
            scrapes = Some((theirs, ours));
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    let (theirs, ours) = scrapes.expect("both reconciled the claim and the pool within a minute");
    let (theirs, ours) = (families(&theirs), families(&ours));
    assert!(theirs.len() > 20 && ours.len() > 20, "too few families read: {} and {}", theirs.len(), ours.len());
    let mut differences = Vec::new();
    for (name, family) in &theirs {
        let compared = ["controller_runtime_", "workqueue_", "rest_client_", "leader_election_", "process_"];
        if !compared.iter().any(|p| name.starts_with(p)) {
            continue;
        }
        match ours.get(name) {
            None => differences.push(format!("{name}: not ours ({} {:?})", family.kind, family.help)),
            Some(mine) => {
                for (what, same) in [
                    ("type", family.kind == mine.kind),
                    ("help", family.help == mine.help),
                    // Label names and bounds show only once a series has samples on both sides.
                    ("labels", family.labels.is_empty() || mine.labels.is_empty() || family.labels == mine.labels),
                    ("buckets", family.buckets.is_empty() || mine.buckets.is_empty() || family.buckets == mine.buckets),
                ] {
                    if !same {
                        differences.push(format!("{name}: {what} differs: theirs {family:?}, ours {mine:?}"));
                    }
                }
            }
        }
    }
    assert!(differences.is_empty(), "{} differences:\n{}", differences.len(), differences.join("\n"));
}
