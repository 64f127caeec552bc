//! Shipping checked with the real tools, built from their Go modules: `helm lint` and `helm template`, the clusterctl
//! provider contract of `make release-manifests`, `clusterctl generate provider --describe` from a local repository,
//! `clusterctl init --ipam in-cluster` against a real API server, and everything rendered applied to the API server
//! as a server-side dry run.

use serde_json::Value;
use support::release::{
    clusterctl, clusterctl_init, helm, install_fixture_crds, ok, our_version, release_manifests, repository, scratch,
};
use support::{Plane, create_namespace, repo_root};

const CHART: &str = "charts/capi-ipam-in-cluster";

/// The objects of a multi-document YAML text, as JSON (parsed by kubectl's own YAML reader).
fn objects(plane: &Plane, yaml: &str) -> Vec<Value> {
    let out = plane.kubectl_stdin(&["create", "--dry-run=client", "-o", "json", "-f", "-"], yaml);
    let text = ok(out, "kubectl create --dry-run=client");
    let mut items = Vec::new();
    let mut stream = serde_json::Deserializer::from_str(&text).into_iter::<Value>();
    while let Some(Ok(v)) = stream.next() {
        match v.get("items").and_then(Value::as_array) {
            Some(list) if v["kind"] == "List" => items.extend(list.iter().cloned()),
            _ => items.push(v),
        }
    }
    items
}

fn kinds(objects: &[Value]) -> Vec<String> {
    let mut k: Vec<String> = objects.iter().map(|o| o["kind"].as_str().unwrap_or_default().to_owned()).collect();
    k.sort();
    k
}

/// Applies `yaml` to the API server as a server-side dry run; every object must pass schema and admission.
fn dry_run(plane: &Plane, yaml: &str) {
    let out =
        plane.kubectl_stdin(&["apply", "--server-side", "--dry-run=server", "--force-conflicts", "-f", "-"], yaml);
    ok(out, "server-side dry run");
}

fn deployment(objects: &[Value]) -> &Value {
    objects.iter().find(|o| o["kind"] == "Deployment").expect("a Deployment")
}

fn assert_hardened(deployment: &Value) {
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["securityContext"]["runAsUser"], 65532);
    assert_eq!(pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
    let manager = &pod["containers"][0];
    assert_eq!(manager["name"], "manager");
    assert_eq!(manager["command"][0], "/manager");
    assert_eq!(manager["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(manager["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(manager["securityContext"]["capabilities"]["drop"][0], "ALL");
    assert!(
        manager["livenessProbe"]["httpGet"]["path"] == "/healthz"
            && manager["readinessProbe"]["httpGet"]["path"] == "/readyz"
    );
    assert!(manager["resources"]["limits"]["memory"].is_string());
    assert!(
        manager["args"]
            .as_array()
            .expect("args")
            .iter()
            .any(|a| a.as_str().is_some_and(|a| a.starts_with("--leader-elect")))
    );
}

/// The chart and the release manifests are applied to a fresh API server as server-side dry runs (on one with our
/// CRDs already installed, server-side apply would merge the dry run with their test wiring), then clusterctl init
/// installs the provider there for real.
#[tokio::test]
async fn packaging_checked_against_a_fresh_api_server() {
    let plane = tokio::task::spawn_blocking(|| Plane::private("packaging")).await.expect("plane");
    install_fixture_crds(&plane);
    helm_chart(&plane).await;
    release_manifests_follow_the_clusterctl_provider_contract(&plane);
    clusterctl_init_installs_the_provider(&plane);
}

async fn helm_chart(plane: &Plane) {
    let client = plane.client().await;
    let out = ok(helm(&["lint", "--strict", CHART]), "helm lint");
    assert!(out.contains("0 chart(s) failed"), "{out}");

    let variants: [(&str, &[&str]); 3] = [
        ("cert-manager", &[]),
        (
            "own-certificate",
            &[
                "--set",
                "webhook.certManager.enabled=false",
                "--set",
                "webhook.certificateSecretName=my-cert",
                "--set",
                "webhook.caBundle=Q0EK",
            ],
        ),
        (
            "ha-with-monitoring",
            &[
                "--set",
                "replicaCount=2",
                "--set",
                "metrics.serviceMonitor.enabled=true",
                "--set",
                "prometheusRule.enabled=true",
                "--set",
                "grafanaDashboard.enabled=true",
            ],
        ),
    ];
    for (name, extra) in variants {
        let namespace = create_namespace(&client, "chart").await;
        let mut args = vec!["template", "ipam", CHART, "--namespace", namespace.as_str()];
        args.extend_from_slice(extra);
        let rendered = ok(helm(&args), &format!("helm template ({name})"));
        let objs = objects(plane, &rendered);
        let k = kinds(&objs);
        for expected in [
            "ClusterRole",
            "CustomResourceDefinition",
            "Deployment",
            "MutatingWebhookConfiguration",
            "Service",
            "ServiceAccount",
            "ValidatingWebhookConfiguration",
        ] {
            assert!(k.iter().any(|x| x == expected), "{name}: {expected} missing from {k:?}");
        }
        assert_eq!(k.iter().filter(|x| *x == "CustomResourceDefinition").count(), 4);
        assert_hardened(deployment(&objs));
        let crd = objs.iter().find(|o| o["metadata"]["name"] == "inclusterippools.ipam.cluster.x-k8s.io").expect("CRD");
        assert_eq!(crd["spec"]["conversion"]["webhook"]["clientConfig"]["service"]["path"], "/convert");
        assert_eq!(crd["metadata"]["labels"]["clusterctl.cluster.x-k8s.io/move-hierarchy"], "");
        // Without it `clusterctl move` does not see the pools and IPAddresses of a Helm install.
        for crd in objs.iter().filter(|o| o["kind"] == "CustomResourceDefinition") {
            assert_eq!(crd["metadata"]["labels"]["clusterctl.cluster.x-k8s.io"], "", "{}", crd["metadata"]["name"]);
            // Every kind, as the Go provider's CRDs: a release taking them over replaces its Service on each (Helm
            // leaves a field it never set, and the prefix pools' pointed at the Go provider's Service after it went).
            let path = &crd["spec"]["conversion"]["webhook"]["clientConfig"]["service"]["path"];
            assert_eq!(path, "/convert", "{}", crd["metadata"]["name"]);
        }
        match name {
            "cert-manager" => {
                assert!(k.contains(&"Certificate".to_owned()) && k.contains(&"Issuer".to_owned()));
                assert!(
                    crd["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
                        .as_str()
                        .is_some_and(|a| a.starts_with(&namespace))
                );
                assert!(!k.contains(&"PodDisruptionBudget".to_owned()), "no PDB with one replica");
            }
            "own-certificate" => {
                assert!(!k.contains(&"Certificate".to_owned()));
                assert_eq!(crd["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"], "Q0EK");
                let hooks = objs.iter().find(|o| o["kind"] == "ValidatingWebhookConfiguration").expect("webhooks");
                assert!(
                    hooks["webhooks"].as_array().expect("list").iter().all(|w| w["clientConfig"]["caBundle"] == "Q0EK")
                );
            }
            _ => {
                // Two replicas are spread over nodes where the scheduler can.
                let spread = &deployment(&objs)["spec"]["template"]["spec"]["topologySpreadConstraints"][0];
                assert_eq!(spread["topologyKey"], "kubernetes.io/hostname", "{spread}");
                assert_eq!(spread["whenUnsatisfiable"], "ScheduleAnyway", "{spread}");
                for kind in ["PodDisruptionBudget", "ServiceMonitor", "PrometheusRule", "ConfigMap"] {
                    assert!(k.iter().any(|x| x == kind), "{name}: no {kind}");
                }
                // Prometheus verifies the metrics certificate against cert-manager's CA, and the manager serves it.
                let monitor = objs.iter().find(|o| o["kind"] == "ServiceMonitor").expect("ServiceMonitor");
                let tls = &monitor["spec"]["endpoints"][0]["tlsConfig"];
                assert!(tls.get("insecureSkipVerify").is_none(), "{tls}");
                let secret = tls["ca"]["secret"]["name"].as_str().expect("a CA Secret");
                let cert = objs
                    .iter()
                    .find(|o| o["kind"] == "Certificate" && o["spec"]["secretName"] == secret)
                    .expect("the metrics Certificate");
                let dns = format!("ipam-capi-ipam-in-cluster-metrics.{namespace}.svc");
                assert_eq!(tls["serverName"], dns.as_str());
                assert!(cert["spec"]["dnsNames"].as_array().expect("names").iter().any(|n| n == dns.as_str()));
                let args = deployment(&objs)["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
                assert!(args.contains("--metrics-cert-dir=/tmp/k8s-metrics-server/serving-certs"), "{args}");
            }
        }
        // Ingress is refused but for the webhook, metrics (from the monitoring namespace) and probe ports.
        let policy = objs.iter().find(|o| o["kind"] == "NetworkPolicy").expect("a NetworkPolicy");
        let ports: Vec<&str> = policy["spec"]["ingress"]
            .as_array()
            .expect("ingress rules")
            .iter()
            .filter_map(|r| r["ports"][0]["port"].as_str())
            .collect();
        assert_eq!(ports, ["webhook-server", "metrics", "healthz"], "{name}");
        assert_eq!(
            policy["spec"]["ingress"][1]["from"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
            "monitoring"
        );
        // The chart's webhooks serve exactly our paths, with the chart's Service.
        let validating = objs.iter().find(|o| o["kind"] == "ValidatingWebhookConfiguration").expect("webhooks");
        for hook in validating["webhooks"].as_array().expect("list") {
            assert_eq!(hook["clientConfig"]["service"]["namespace"], namespace.as_str());
            let path = hook["clientConfig"]["service"]["path"].as_str().expect("path");
            assert!(capi_ipam::webhooks::routes::admission_routes().iter().any(|r| r.path() == path), "{path}");
        }
        dry_run(plane, &rendered);
    }
}

fn release_manifests_follow_the_clusterctl_provider_contract(plane: &Plane) {
    let (components, metadata) = release_manifests();
    assert!(metadata.contains("contract: v1beta2"), "{metadata}");
    let objs = objects(plane, &components);
    let namespaces: Vec<&Value> = objs.iter().filter(|o| o["kind"] == "Namespace").collect();
    assert_eq!(namespaces.len(), 1, "exactly one Namespace");
    assert_eq!(namespaces[0]["metadata"]["name"], "capi-ipam-in-cluster-system");
    for o in &objs {
        let name = o["metadata"]["name"].as_str().unwrap_or_default();
        assert_eq!(
            o["metadata"]["labels"]["cluster.x-k8s.io/provider"], "ipam-in-cluster",
            "{name} lacks the provider label"
        );
        if o["kind"] == "CustomResourceDefinition" {
            assert_eq!(o["metadata"]["labels"]["clusterctl.cluster.x-k8s.io"], "", "{name}: clusterctl move skips it");
        } else {
            assert!(name.starts_with("capi-ipam-in-cluster-"), "{name} lacks the name prefix");
        }
        if let Some(ns) = o["metadata"]["namespace"].as_str() {
            assert_eq!(ns, "capi-ipam-in-cluster-system", "{name}");
        }
    }
    assert_hardened(deployment(&objs));
    for kind in ["Issuer", "Certificate", "NetworkPolicy"] {
        assert!(objs.iter().any(|o| o["kind"] == kind), "{kind} missing");
    }
    let injected = |o: &&Value| {
        o["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
            == "capi-ipam-in-cluster-system/capi-ipam-in-cluster-serving-cert"
    };
    for name in [
        "capi-ipam-in-cluster-mutating-webhook-configuration",
        "capi-ipam-in-cluster-validating-webhook-configuration",
        "inclusterippools.ipam.cluster.x-k8s.io",
        "globalinclusterippools.ipam.cluster.x-k8s.io",
    ] {
        assert!(objs.iter().filter(|o| o["metadata"]["name"] == name).any(|o| injected(&o)), "{name}: no CA injection");
    }
    assert!(components.contains("${CAPI_IPAM_IN_CLUSTER_LOG_FORMAT:=json}"), "variables with defaults");
    // The NetworkPolicy's metrics peer is a variable too (it admitted only a namespace named monitoring).
    let policy = objs.iter().find(|o| o["kind"] == "NetworkPolicy").expect("NetworkPolicy");
    let peer =
        &policy["spec"]["ingress"][1]["from"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"];
    assert_eq!(peer, "${CAPI_IPAM_IN_CLUSTER_METRICS_NAMESPACE:=monitoring}", "{policy}");

    // One version everywhere: the crate, the chart, the kustomize image tag, and a release series for it.
    let version = our_version();
    let chart = std::fs::read_to_string(repo_root().join(CHART).join("Chart.yaml")).expect("Chart.yaml");
    assert!(chart.contains(&format!("\nappVersion: {version}\n")), "Chart.yaml appVersion is not {version}");
    assert!(chart.contains(&format!("\nversion: {}\n", &version[1..])), "Chart.yaml version is not {version}");
    assert!(chart.contains(&format!("/manager:{version}\n")), "Chart.yaml's Artifact Hub image is not {version}");
    let kustomization = std::fs::read_to_string(repo_root().join("config/manager/kustomization.yaml")).expect("read");
    assert!(kustomization.contains(&format!("newTag: {version}\n")), "config/manager image tag is not {version}");
    let (major, minor) = version[1..].split_once('.').map(|(a, b)| (a, b.split('.').next().unwrap())).unwrap();
    assert!(metadata.contains(&format!("  - major: {major}\n    minor: {minor}\n")), "no series for {version}");

    let ipam = format!("in-cluster:{version}");
    let dir = scratch("clusterctl");
    let config = repository(&dir, &components, &metadata, false);
    let config_arg = config.to_string_lossy().into_owned();
    let described = ok(
        clusterctl(&dir, &["generate", "provider", "--ipam", &ipam, "--describe", "--config", &config_arg]),
        "clusterctl generate provider --describe",
    );
    for expected in [
        "in-cluster",
        "capi-ipam-in-cluster-system",
        "CAPI_IPAM_IN_CLUSTER_LOG_FORMAT",
        "CAPI_IPAM_IN_CLUSTER_DIAGNOSTICS_ADDRESS",
        "CAPI_IPAM_IN_CLUSTER_METRICS_NAMESPACE",
    ] {
        assert!(described.contains(expected), "--describe lacks {expected}:\n{described}");
    }
    // What clusterctl would install, variables resolved, passes the API server's checks.
    let processed = ok(
        clusterctl(&dir, &["generate", "provider", "--ipam", &ipam, "--config", &config_arg]),
        "clusterctl generate provider",
    );
    assert!(!processed.contains("${"), "every variable has a default");
    assert!(processed.contains("kubernetes.io/metadata.name: monitoring\n"), "the metrics peer's default");
    // The metrics peer set as clusterctl variables are (in clusterctl.yaml or the environment).
    let mut with_peer = std::fs::read_to_string(&config).expect("clusterctl.yaml");
    with_peer.push_str("CAPI_IPAM_IN_CLUSTER_METRICS_NAMESPACE: observability\n");
    std::fs::write(&config, with_peer).expect("clusterctl.yaml");
    let observed = ok(
        clusterctl(&dir, &["generate", "provider", "--ipam", &ipam, "--config", &config_arg]),
        "clusterctl generate provider with the metrics namespace",
    );
    assert_eq!(observed, processed.replace("metadata.name: monitoring\n", "metadata.name: observability\n"));
    let ns = plane.kubectl_output(&["get", "namespace", "capi-ipam-in-cluster-system"]);
    if !ns.status.success() {
        ok(plane.kubectl_output(&["create", "namespace", "capi-ipam-in-cluster-system"]), "create namespace");
    }
    dry_run(plane, &processed);
}

fn clusterctl_init_installs_the_provider(plane: &Plane) {
    let log = clusterctl_init(plane, true);
    assert!(log.contains("Installing provider=\"ipam-in-cluster\""), "{log}");
    let crds = plane.kubectl(&["get", "crd", "-o", "name"]);
    for crd in ["inclusterippools", "globalinclusterippools", "inclusterprefixpools", "globalinclusterprefixpools"] {
        assert!(crds.contains(&format!("{crd}.ipam.cluster.x-k8s.io")), "{crd} missing:\n{crds}");
    }
    let deployment = plane.kubectl(&[
        "get",
        "deployment",
        "-n",
        "capi-ipam-in-cluster-system",
        "capi-ipam-in-cluster-controller-manager",
        "-o",
        "json",
    ]);
    let deployment: Value = serde_json::from_str(&deployment).expect("json");
    assert_eq!(deployment["spec"]["template"]["spec"]["containers"][0]["name"], "manager");
    assert!(
        deployment["metadata"]["labels"].get("clusterctl.cluster.x-k8s.io").is_some(),
        "clusterctl labels what it installs"
    );
    plane.kubectl(&["get", "clusterrole", "capi-ipam-in-cluster-manager-role"]);
    let providers = plane.kubectl(&["get", "providers.clusterctl.cluster.x-k8s.io", "-A"]);
    assert!(providers.contains("ipam-in-cluster"), "{providers}");
}

/// No engine here builds the Dockerfile (its base images cannot be pulled); it must at least build what `make image`
/// builds (tests/image.rs checks that image): the same static manager, alone, non-root.
#[test]
fn the_dockerfile_builds_the_image_make_image_builds() {
    let dockerfile = std::fs::read_to_string(repo_root().join("Dockerfile")).expect("Dockerfile");
    let script = std::fs::read_to_string(repo_root().join("tests/tools/image.sh")).expect("image.sh");
    for flag in ["RUSTFLAGS=\"-C target-feature=+crt-static\"", "CARGO_PROFILE_RELEASE_STRIP=symbols"] {
        assert!(dockerfile.contains(flag) && script.contains(flag), "{flag} in one of them only");
    }
    assert!(dockerfile.contains("cargo build --release --locked --target \"$triple\" --bin manager"));
    // Cargo reads every workspace member's manifest to resolve the lockfile, so the builder stage needs them all.
    let manifest = std::fs::read_to_string(repo_root().join("Cargo.toml")).expect("Cargo.toml");
    let members = manifest.lines().find_map(|l| l.strip_prefix("members = ")).expect("a workspace members line");
    for member in members.trim_matches(['[', ']']).split(", ").map(|m| m.trim_matches('"')).filter(|m| *m != ".") {
        assert!(
            dockerfile.contains(&format!("\nCOPY {member} ")),
            "the Dockerfile does not copy workspace member {member}"
        );
    }
    let final_stage = dockerfile.rsplit("\nFROM ").next().expect("a final stage");
    assert!(final_stage.starts_with("scratch\n"), "the image has no base image");
    assert_eq!(final_stage.matches("\nCOPY ").count(), 1, "only the manager goes into the image");
    assert!(final_stage.contains("USER 65532:65532"));
    assert!(final_stage.contains("ENTRYPOINT [\"/manager\"]"));
    for label in ["org.opencontainers.image.title", "org.opencontainers.image.licenses"] {
        assert!(final_stage.contains(label) && script.contains(label), "{label}");
    }
}

/// The chart's README is what `tests/tools/chart-readme.py` generates from values.yaml (`make generate`).
#[test]
fn the_charts_readme_is_generated_from_its_values() {
    let out = std::process::Command::new("python3")
        .arg(repo_root().join("tests/tools/chart-readme.py"))
        .arg("--check")
        .output()
        .expect("python3");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// `values.schema.json` refuses a wrong value by its path (a `logFormat: yaml` rendered, then crash-looped), and the
/// overrides Helm users expect render: names, the image by digest, the ServiceAccount's annotations, and a pod
/// security context without a fixed user (OpenShift's restricted SCC assigns one).
#[test]
fn the_chart_refuses_wrong_values_by_name_and_renders_every_override() {
    for (set, path) in [
        ("logFormat=yaml", "/logFormat"),
        ("replicaCount=two", "/replicaCount"),
        ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
        ("maxConcurrentReconciles=0", "/maxConcurrentReconciles"),
        ("networkPolicy.webhookFrom[0]=apiserver", "/networkPolicy/webhookFrom/0"),
        ("logformat=text", "logformat"),
    ] {
        let out = helm(&["template", "ipam", CHART, "--set", set]);
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && said.contains(path), "--set {set}: {said}");
    }
    let digest = format!("sha256:{}", "ab".repeat(32));
    let rendered = ok(
        helm(&[
            "template",
            "ipam",
            CHART,
            "--set",
            "fullnameOverride=ipam-x",
            "--set",
            "nameOverride=ipam-name",
            "--set",
            &format!("image.digest={digest}"),
            "--set",
            "serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn=arn:aws:iam::1:role/ipam",
            "--set",
            "podSecurityContext.runAsUser=null",
            "--set",
            "podSecurityContext.runAsGroup=null",
            "--set",
            "networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=observability",
        ]),
        "helm template with overrides",
    );
    let docs: Vec<Value> = rendered
        .split("\n---")
        .filter_map(|d| serde_saphyr::from_str::<Value>(d).ok())
        .filter(|d| d.is_object())
        .collect();
    let deployment = docs.iter().find(|d| d["kind"] == "Deployment").expect("a Deployment");
    assert_eq!(deployment["metadata"]["name"], "ipam-x");
    assert_eq!(deployment["metadata"]["labels"]["app.kubernetes.io/name"], "ipam-name");
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["containers"][0]["image"], format!("ghcr.io/capi-ipam-in-cluster/manager@{digest}").as_str());
    assert!(pod["securityContext"].get("runAsUser").is_none(), "{}", pod["securityContext"]);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"], true);
    let account = docs.iter().find(|d| d["kind"] == "ServiceAccount" && d["metadata"]["name"] == "ipam-x");
    let account = account.expect("the manager's ServiceAccount");
    assert_eq!(account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"], "arn:aws:iam::1:role/ipam");
    // One replica: no spread constraint.
    assert!(pod.get("topologySpreadConstraints").is_none());
    let policy = docs.iter().find(|d| d["kind"] == "NetworkPolicy").expect("the NetworkPolicy");
    let peer = &policy["spec"]["ingress"][1]["from"][0]["namespaceSelector"]["matchLabels"];
    assert_eq!(peer["kubernetes.io/metadata.name"], "observability", "{policy}");
    // `helm test`'s pod is no pod of the Deployment's: its ReplicaSet would adopt it (and the PodDisruptionBudget and
    // NetworkPolicy, which select the same labels, would count and admit it).
    let test_pod = docs.iter().find(|d| d["kind"] == "Pod").expect("helm test's pod");
    assert_eq!(test_pod["metadata"]["annotations"]["helm.sh/hook"], "test");
    let selector = deployment["spec"]["selector"]["matchLabels"].as_object().expect("the Deployment's selector");
    let labels = &test_pod["metadata"]["labels"];
    assert!(selector.iter().any(|(k, v)| &labels[k] != v), "the Deployment selects helm test's pod: {labels}");
}

/// The kustomize overlay docs/install.md gives for the NetworkPolicy's metrics peer, rendered by kustomize: that peer
/// alone changes, everything else is `config/default` as it is.
#[test]
fn the_kustomize_overlay_of_install_md_names_another_metrics_namespace() {
    let doc = std::fs::read_to_string(repo_root().join("docs/install.md")).expect("install.md");
    let overlay = doc
        .split("```yaml\n# kustomization.yaml of your overlay\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the overlay in install.md");
    // The overlay in a folder of its own, naming config/default by a relative path as a checkout beside it would.
    let dir = repo_root().join(".dev/scratch").join(support::unique_name("overlay"));
    std::fs::create_dir_all(&dir).expect("scratch");
    let overlay = overlay.replace("../capi-ipam-in-cluster/config/default", "../../../config/default");
    std::fs::write(dir.join("kustomization.yaml"), &overlay).expect("kustomization.yaml");
    let kustomize = support::release::tool_dir("kustomize").join("kustomize");
    let build = |path: &std::path::Path| {
        ok(std::process::Command::new(&kustomize).arg("build").arg(path).output().expect("kustomize"), "kustomize")
    };
    let (ours, theirs) = (build(&repo_root().join("config/default")), build(&dir));
    let _ = std::fs::remove_dir_all(&dir);
    let peer = "kubernetes.io/metadata.name: monitoring\n";
    assert_eq!(ours.matches(peer).count(), 1, "config/default's NetworkPolicy has one metrics peer:\n{ours}");
    assert_eq!(
        theirs,
        ours.replace(peer, "kubernetes.io/metadata.name: observability\n"),
        "the overlay changes the metrics peer and nothing else"
    );
}
