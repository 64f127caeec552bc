//! The install paths as an operator walks them, each on a control plane of its own (kube-apiserver, etcd, the Cluster
//! API v1.14.2 core manager and its webhooks), with the real helm, kubectl and clusterctl:
//! - Helm: install, upgrade to changed values, uninstall that keeps the CRDs, pools, claims and IPAddresses, and
//!   install again;
//! - `kubectl apply -k config/default`;
//! - the chart and config/default on Cluster API v1.10.10 (the v1beta1 IPAM API);
//! - the migrations of docs/migration.md from the Go provider's release v1.1.0 (its components built from its Go
//!   module's config/, the way its release builds them), installed by clusterctl, and back: `clusterctl upgrade`
//!   through one local provider repository (back: `clusterctl delete` without `--include-crd`, then `clusterctl
//!   init` of v1.1.0), Helm, and kustomize;
//! - the Cluster API Operator v0.29.0: an `IPAMProvider` installs our release from ConfigMaps and upgrades it.
//!
//! No kubelet runs here, so no pod starts: the test plays the kubelet. It runs the manager out of cluster and points
//! the API server's webhook calls at it (tests/tools/dev-install.py, as `make run` does), taking them over from the
//! Services the install created. The Go provider runs the same way, with its own webhooks and leader election. The
//! claims, pools and IPAddresses are checked before and after each provider's turn: every claim keeps its address,
//! and no address is held twice.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use serde_json::{Value, json};
use support::claims::{Capi, GROUP, create_pool, pool_resource, pools};
use support::manager::{Launch, Manager, free_port, register_webhooks, wait_go_ready, wait_webhooks_reached};
use support::oci::{Registry, crane};
use support::release::{
    GoProvider, Release, clusterctl, clusterctl_init_from, go_provider_dir, helm, helm_command, install_fixture_crds,
    ipam_provider_version, ok, our_version, release_manifests, repository_of, scratch, tool_dir,
};
use support::{Plane, create_namespace, eventually, release_bin_dir, repo_root, tail};
use tokio::sync::Mutex;

const CAPI: Capi = Capi::V1Beta2;
const CHART: &str = "charts/capi-ipam-in-cluster";
const PROVIDER_NAMESPACE: &str = "capi-ipam-in-cluster-system";
const LEASE: &str = "7bb7acb4.ipam.cluster.x-k8s.io";

/// A control plane apiece is heavy on two cores: one install path at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

async fn private_plane(name: &'static str) -> Plane {
    let plane = tokio::task::spawn_blocking(move || Plane::private(name)).await.expect("plane");
    let dir = plane.dir.clone();
    tokio::task::spawn_blocking(move || install_fixture_crds(&Plane::at(&dir))).await.expect("fixture CRDs");
    plane
}

fn kubectl_json(plane: &Plane, args: &[&str]) -> Option<Value> {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let out = plane.kubectl_output(&all);
    out.status.success().then(|| serde_json::from_slice(&out.stdout).expect("JSON"))
}

/// Every claim of `namespace` → its bound address; panics on an address held twice.
async fn bound_addresses(client: &Client, namespace: &str) -> BTreeMap<String, String> {
    let addresses = CAPI.addresses(client, namespace).list(&ListParams::default()).await.expect("IPAddresses");
    let mut by_claim = BTreeMap::new();
    let mut seen = BTreeMap::new();
    for a in &addresses.items {
        let claim = a.data["spec"]["claimRef"]["name"].as_str().unwrap_or_default().to_owned();
        let address = a.data["spec"]["address"].as_str().unwrap_or_default().to_owned();
        if let Some(other) = seen.insert(address.clone(), claim.clone()) {
            panic!("{address} is held by the IPAddresses of {other} and {claim}");
        }
        by_claim.insert(claim, address);
    }
    let claims = CAPI.claims(client, namespace).list(&ListParams::default()).await.expect("claims");
    for c in &claims.items {
        let name = c.metadata.name.clone().unwrap_or_default();
        let bound = c.data.pointer("/status/addressRef/name").and_then(Value::as_str);
        assert!(bound.is_some() == by_claim.contains_key(&name), "claim {name}: addressRef {bound:?} vs {by_claim:?}");
    }
    by_claim
}

/// Claims `names` on the pool `nodes` of `namespace`, bound; returns every claim's address.
async fn claim_and_wait(client: &Client, namespace: &str, names: &[&str]) -> BTreeMap<String, String> {
    for name in names {
        CAPI.create_claim(client, namespace, name, "InClusterIPPool", "nodes").await;
    }
    for name in names {
        CAPI.wait_bound(client, namespace, name).await;
    }
    bound_addresses(client, namespace).await
}

/// The claims of `before` still hold the same addresses (a subset: more may have been bound since).
fn kept(before: &BTreeMap<String, String>, now: &BTreeMap<String, String>, step: &str) {
    for (claim, address) in before {
        assert_eq!(now.get(claim), Some(address), "{step}: claim {claim} lost or changed its address {address}");
    }
}

/// Pool writes are served at `step` (no webhook configuration or CRD conversion left calling a server that is not
/// there): a pool created (the mutating and validating webhooks), read at v1alpha1 (the conversion webhook: pools are
/// stored at v1alpha2) and deleted (the validating webhook again).
async fn pool_writes_are_served(client: &Client, namespace: &str, step: &str) {
    static WRITES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let name = format!("write-{}", WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    let mut pool = DynamicObject::new(&name, &pool_resource("InClusterIPPool"));
    pool.data = json!({"spec": {"addresses": ["10.99.0.10-10.99.0.20"], "prefix": 24, "gateway": "10.99.0.1"}});
    let api = pools(client, "InClusterIPPool", namespace);
    if let Err(e) = api.create(&PostParams::default(), &pool).await {
        panic!("{step}: a pool write was refused: {e}");
    }
    let v1alpha1: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &support::resource(GROUP, "v1alpha1", "InClusterIPPool"));
    if let Err(e) = v1alpha1.get(&name).await {
        panic!("{step}: reading a pool at v1alpha1 (the CRD's conversion webhook) failed: {e}");
    }
    if let Err(e) = api.delete(&name, &DeleteParams::default()).await {
        panic!("{step}: a pool delete was refused: {e}");
    }
}

/// `helm test ipam`, with this test as the kubelet of its pod (none runs here): once the pod is created, its kubectl
/// command runs here as the pod would run it (its ConfigMap volume's files at their mount path, a token of its
/// ServiceAccount, so the Role the chart gives it is what it may do), and the exit status becomes the pod's phase, which
/// is what `helm test` waits for. Returns whether `helm test` passed, and what it and the probe said.
fn helm_test(plane: &Plane) -> (bool, String) {
    let kubeconfig = plane.kubeconfig().to_string_lossy().into_owned();
    let args = ["test", "ipam", "--namespace", PROVIDER_NAMESPACE, "--kubeconfig", &kubeconfig, "--timeout", "90s"];
    let helm = std::thread::spawn({
        let mut command = helm_command(&args);
        move || command.output().expect("helm test")
    });
    let name = "ipam-capi-ipam-in-cluster-test";
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let pod = loop {
        match kubectl_json(plane, &["get", "pod", "-n", PROVIDER_NAMESPACE, name]) {
            Some(pod) if pod["metadata"]["deletionTimestamp"].is_null() && pod["status"]["phase"] == "Pending" => {
                break pod;
            }
            _ if helm.is_finished() => panic!("helm test ended before its pod was created: {:?}", helm.join()),
            _ => {}
        }
        assert!(std::time::Instant::now() < deadline, "helm test created no pod {name}");
        std::thread::sleep(Duration::from_millis(200));
    };

    // The pod as the kubelet would run it.
    let spec = &pod["spec"];
    let container = &spec["containers"][0];
    assert_eq!(container["command"], json!(["kubectl"]), "{container}");
    let root = scratch("helm-test-pod");
    let mut container_args: Vec<String> =
        container["args"].as_array().expect("args").iter().map(|a| a.as_str().expect("an arg").to_owned()).collect();
    for mount in container["volumeMounts"].as_array().expect("volumeMounts") {
        let volume = spec["volumes"].as_array().unwrap().iter().find(|v| v["name"] == mount["name"]).expect("volume");
        let at = root.join(mount["name"].as_str().unwrap());
        std::fs::create_dir_all(&at).expect("the volume");
        if let Some(config_map) = volume["configMap"]["name"].as_str() {
            let data = kubectl_json(plane, &["get", "configmap", "-n", PROVIDER_NAMESPACE, config_map]).expect("cm");
            for (file, content) in data["data"].as_object().expect("data") {
                std::fs::write(at.join(file), content.as_str().expect("text")).expect("a file of the volume");
            }
        }
        let path = mount["mountPath"].as_str().expect("mountPath");
        for arg in &mut container_args {
            if let Some(rest) = arg.strip_prefix(path) {
                *arg = format!("{}{rest}", at.display());
            }
        }
    }
    let account = spec["serviceAccountName"].as_str().expect("serviceAccountName");
    let token = plane.kubectl(&["create", "token", account, "-n", PROVIDER_NAMESPACE]);
    let restricted = std::fs::read_to_string(plane.restricted_kubeconfig()).expect("kubeconfig");
    let as_the_pod = restricted
        .lines()
        .map(|l| if l.trim_start().starts_with("token: ") { format!("    token: {}", token.trim()) } else { l.into() })
        .collect::<Vec<_>>()
        .join("\n");
    let pod_kubeconfig = root.join("kubeconfig");
    std::fs::write(&pod_kubeconfig, as_the_pod).expect("the pod's kubeconfig");
    let probe = std::process::Command::new(plane.bin_dir().join("kubectl"))
        .args(&container_args)
        .env_clear()
        .env("KUBECONFIG", &pod_kubeconfig)
        .env("HOME", &root)
        .output()
        .expect("the probe");
    let phase = if probe.status.success() { "Succeeded" } else { "Failed" };
    let status = json!({"status": {"phase": phase}}).to_string();
    let patch = ["patch", "pod", name, "-n", PROVIDER_NAMESPACE, "--subresource=status", "--type=merge", "-p", &status];
    ok(plane.kubectl_output(&patch), "the pod's phase");

    let out = helm.join().expect("helm test");
    let said = format!(
        "helm test: {}{}\nthe probe: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&probe.stdout),
        String::from_utf8_lossy(&probe.stderr)
    );
    (out.status.success(), said)
}

#[tokio::test]
async fn helm_install_upgrade_and_uninstall_keep_the_pools_and_their_addresses() {
    let _one = ONE_AT_A_TIME.lock().await;
    let plane = private_plane("helm").await;
    let client = plane.client().await;
    let kubeconfig = plane.kubeconfig().to_string_lossy().into_owned();
    let helm_in_plane = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--namespace", PROVIDER_NAMESPACE, "--kubeconfig", &kubeconfig]);
        helm(&all)
    };

    // Install with the default values, as the README says.
    let installed = ok(helm_in_plane(&["install", "ipam", CHART, "--create-namespace"]), "helm install");
    assert!(installed.contains("STATUS: deployed"), "{installed}");
    assert!(installed.contains("keeps the CRDs"), "NOTES do not say what uninstall keeps:\n{installed}");
    let deployment =
        kubectl_json(&plane, &["get", "deployment", "-n", PROVIDER_NAMESPACE, "ipam-capi-ipam-in-cluster"])
            .expect("the Deployment");
    let image = deployment["spec"]["template"]["spec"]["containers"][0]["image"].as_str().expect("image");
    assert_eq!(image, format!("ghcr.io/capi-ipam-in-cluster/manager:{}", our_version()));
    assert_eq!(deployment["spec"]["replicas"], 1);
    assert!(kubectl_json(&plane, &["get", "pdb", "-n", PROVIDER_NAMESPACE, "ipam-capi-ipam-in-cluster"]).is_none());

    let wiring = save_wiring(&plane);
    let manager = Manager::started(&plane, Launch::default(), &["--insecure-diagnostics"]).await;
    let tenant = create_namespace(&client, "tenant").await;
    let spec = json!({"addresses": ["10.80.0.10-10.80.0.20"], "prefix": 24, "gateway": "10.80.0.1"});
    create_pool(&client, "InClusterIPPool", &tenant, "nodes", spec).await;
    let installed = claim_and_wait(&client, &tenant, &["a", "b"]).await;

    // `helm test` passes while the webhooks are served, with the rights the chart gives its pod, and stores nothing.
    let dir = plane.dir.clone();
    let (passed, said) = tokio::task::spawn_blocking(move || helm_test(&Plane::at(&dir))).await.expect("helm test");
    assert!(passed, "{said}");
    assert!(
        said.contains("inclusterippool.ipam.cluster.x-k8s.io/ipam-capi-ipam-in-cluster-test created (server dry run)")
    );
    assert!(
        kubectl_json(&plane, &["get", "inclusterippool", "-n", PROVIDER_NAMESPACE, "ipam-capi-ipam-in-cluster-test"])
            .is_none()
    );
    assert!(
        kubectl_json(&plane, &["get", "pod", "-n", PROVIDER_NAMESPACE, "ipam-capi-ipam-in-cluster-test"]).is_none()
    );

    // Upgrade to other values: two replicas (and their PodDisruptionBudget), debug logs, the alerts and the dashboard.
    // The pod keeps running; only the stand-in's rewiring of the API server is undone for Helm to see its own.
    restore_wiring(&plane, &wiring);
    // The webhooks now point at the chart's Service, which no pod backs here: every pool write is refused, and so is
    // helm test's ("no endpoints", as after a migration that left the Go provider's webhooks in place).
    let dir = plane.dir.clone();
    let (passed, said) = tokio::task::spawn_blocking(move || helm_test(&Plane::at(&dir))).await.expect("helm test");
    assert!(!passed, "helm test passed with no webhook served:\n{said}");
    assert!(said.contains("failed calling webhook"), "{said}");
    let upgraded = ok(
        helm_in_plane(&[
            "upgrade",
            "ipam",
            CHART,
            "--reuse-values",
            "--set",
            "replicaCount=2",
            "--set",
            "logLevel=debug",
            "--set",
            "prometheusRule.enabled=true",
            "--set",
            "grafanaDashboard.enabled=true",
        ]),
        "helm upgrade",
    );
    assert!(upgraded.contains("REVISION: 2"), "{upgraded}");
    let deployment =
        kubectl_json(&plane, &["get", "deployment", "-n", PROVIDER_NAMESPACE, "ipam-capi-ipam-in-cluster"])
            .expect("the Deployment");
    assert_eq!(deployment["spec"]["replicas"], 2);
    let args = deployment["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(args.contains("--log-level=debug"), "{args}");
    for (kind, name) in [
        ("pdb", "ipam-capi-ipam-in-cluster"),
        ("prometheusrule", "ipam-capi-ipam-in-cluster"),
        ("configmap", "ipam-capi-ipam-in-cluster-dashboard"),
    ] {
        assert!(kubectl_json(&plane, &["get", kind, "-n", PROVIDER_NAMESPACE, name]).is_some(), "no {kind} {name}");
    }
    let wiring = save_wiring(&plane);
    // The stand-in takes the API server's calls over again.
    let dir = plane.dir.clone();
    let manager = tokio::task::spawn_blocking(move || {
        manager.take_over(&Plane::at(&dir));
        manager
    })
    .await
    .expect("take over");
    let upgraded = claim_and_wait(&client, &tenant, &["c"]).await;
    kept(&installed, &upgraded, "helm upgrade");

    // Uninstall: the workload goes (and with it the pod: the stand-in stops), the CRDs and every object stay.
    drop(manager);
    restore_wiring(&plane, &wiring);
    let uninstalled = ok(helm_in_plane(&["uninstall", "ipam"]), "helm uninstall");
    assert!(uninstalled.contains("kept due to the resource policy"), "{uninstalled}");
    for (kind, name) in [
        ("deployment", "ipam-capi-ipam-in-cluster"),
        ("service", "ipam-capi-ipam-in-cluster-webhook"),
        ("prometheusrule", "ipam-capi-ipam-in-cluster"),
    ] {
        assert!(kubectl_json(&plane, &["get", kind, "-n", PROVIDER_NAMESPACE, name]).is_none(), "{kind} {name} left");
    }
    let hooks = plane.kubectl(&["get", "validatingwebhookconfigurations", "-o", "name"]);
    assert!(!hooks.contains("ipam-capi-ipam-in-cluster"), "{hooks}");
    for crd in ["inclusterippools", "globalinclusterippools", "inclusterprefixpools", "globalinclusterprefixpools"] {
        let name = format!("crd/{crd}.ipam.cluster.x-k8s.io");
        assert!(kubectl_json(&plane, &["get", &name]).is_some(), "{name} deleted by helm uninstall");
    }
    assert!(kubectl_json(&plane, &["get", "inclusterippool", "-n", &tenant, "nodes"]).is_some(), "the pool is gone");
    let after_uninstall = bound_addresses(&client, &tenant).await;
    assert_eq!(after_uninstall, upgraded, "helm uninstall changed the claims' addresses");

    // Installed again (same release name and namespace: Helm adopts the CRDs it kept), everything is still there.
    ok(helm_in_plane(&["install", "ipam", CHART]), "helm install again");
    let _manager = Manager::started(&plane, Launch::default(), &["--insecure-diagnostics"]).await;
    let reinstalled = claim_and_wait(&client, &tenant, &["d"]).await;
    kept(&upgraded, &reinstalled, "helm install after uninstall");
    assert_eq!(reinstalled.len(), 4);
}

/// `kubectl apply -k config/default`, twice (nothing changes the second time), checked, and the flags of the
/// Deployment's manager as the pod would run it (but the ports and log format, which the test picks), with its
/// namespace for the Lease, as the downward API gives it.
fn apply_config_default(plane: &Plane) -> Vec<String> {
    let config = repo_root().join("config/default").to_string_lossy().into_owned();
    let applied = ok(plane.kubectl_output(&["apply", "-k", &config]), "kubectl apply -k config/default");
    assert!(applied.contains("deployment.apps/capi-ipam-in-cluster-controller-manager created"), "{applied}");
    // Applied again, nothing changes (kubectl says "configured" for the webhook configurations whatever happens, so
    // ask kubectl diff: exit 0 is no difference).
    ok(plane.kubectl_output(&["apply", "-k", &config]), "kubectl apply -k again");
    ok(plane.kubectl_output(&["diff", "-k", &config]), "kubectl diff -k after apply -k (a difference exits 1)");

    let container = &deployment(plane)["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], format!("ghcr.io/capi-ipam-in-cluster/manager:{}", our_version()));
    let args: Vec<String> =
        container["args"].as_array().expect("args").iter().map(|a| a.as_str().unwrap().to_owned()).collect();
    assert!(args.iter().all(|a| !a.contains("${")), "clusterctl variables left in config/default: {args:?}");
    let mut flags: Vec<String> = args
        .into_iter()
        .filter(|a| {
            !["--diagnostics-address", "--insecure-diagnostics", "--log-format"].iter().any(|f| a.starts_with(f))
        })
        .collect();
    flags.extend(["--insecure-diagnostics".to_owned(), format!("--leader-election-namespace={PROVIDER_NAMESPACE}")]);
    flags
}

#[tokio::test]
async fn kubectl_apply_k_config_default_installs_a_provider_that_binds_claims() {
    let _one = ONE_AT_A_TIME.lock().await;
    let plane = private_plane("kustomize").await;
    let client = plane.client().await;
    let flags = apply_config_default(&plane);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let _manager = Manager::started(&plane, Launch::default(), &flags).await;
    let tenant = create_namespace(&client, "tenant").await;
    let spec = json!({"addresses": ["10.81.0.10-10.81.0.11"], "prefix": 24});
    create_pool(&client, "InClusterIPPool", &tenant, "nodes", spec).await;
    let bound = claim_and_wait(&client, &tenant, &["a", "b"]).await;
    // Both addresses, one each: claims reconcile concurrently, so which of the two gets the lower one is not fixed.
    let mut addresses: Vec<String> = bound.values().cloned().collect();
    addresses.sort();
    assert_eq!(addresses, ["10.81.0.10", "10.81.0.11"], "{bound:?}");
    let lease: Api<Lease> = Api::namespaced(client.clone(), PROVIDER_NAMESPACE);
    assert!(lease.get(LEASE).await.is_ok(), "no Lease in the Deployment's namespace");
}

/// The API server's wiring to the provider's pods as an install wrote it: the IPAM CRDs' conversion settings and
/// the webhook configurations. A stand-in that takes it over (dev-install.py) puts it back with [`restore_wiring`]
/// when it stops, as if it had never been there.
struct Wiring {
    conversions: Vec<(String, Value)>,
    webhook_configurations: Vec<(&'static str, Value)>,
}

/// The wiring of the install labelled `cluster.x-k8s.io/provider: ipam-in-cluster` (clusterctl and the chart both
/// label theirs so).
fn save_wiring(plane: &Plane) -> Wiring {
    let crds = kubectl_json(plane, &["get", "crd"]).expect("CRDs");
    let conversions = crds["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter(|c| c["spec"]["group"] == "ipam.cluster.x-k8s.io" && c["spec"]["conversion"].is_object())
        .map(|c| (c["metadata"]["name"].as_str().unwrap().to_owned(), c["spec"]["conversion"].clone()))
        .collect();
    let mut webhook_configurations = Vec::new();
    for kind in ["validatingwebhookconfigurations", "mutatingwebhookconfigurations"] {
        let list =
            kubectl_json(plane, &["get", kind, "-l", "cluster.x-k8s.io/provider=ipam-in-cluster"]).expect("list");
        for mut cfg in list["items"].as_array().expect("items").iter().cloned() {
            let meta = cfg["metadata"].as_object_mut().expect("metadata");
            for server_set in ["resourceVersion", "uid", "creationTimestamp", "generation", "managedFields"] {
                meta.remove(server_set);
            }
            webhook_configurations.push((kind, cfg));
        }
    }
    assert!(!webhook_configurations.is_empty(), "the install wrote no webhook configuration");
    Wiring { conversions, webhook_configurations }
}

fn restore_wiring(plane: &Plane, wiring: &Wiring) {
    for (crd, conversion) in &wiring.conversions {
        let patch = json!([{"op": "replace", "path": "/spec/conversion", "value": conversion}]).to_string();
        ok(plane.kubectl_output(&["patch", "crd", crd, "--type=json", "-p", &patch]), "restoring a conversion");
    }
    for (kind, cfg) in &wiring.webhook_configurations {
        let name = cfg["metadata"]["name"].as_str().expect("name");
        ok(plane.kubectl_output(&["delete", kind, name, "--ignore-not-found"]), "deleting the stand-in's webhooks");
        ok(plane.kubectl_stdin(&["create", "-f", "-"], &cfg.to_string()), "restoring webhooks");
    }
}

/// Who holds the providers' Lease (the Go provider's and ours are the same one), if anyone.
async fn lease_holder(client: &Client) -> Option<String> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), PROVIDER_NAMESPACE);
    leases.get_opt(LEASE).await.expect("the Lease").and_then(|l| l.spec).and_then(|s| s.holder_identity)
}

/// The Go provider v1.1.0 installed by clusterctl, at work: three claims bound by it.
struct GoInstall {
    /// The local clusterctl repository (both releases) and its config.
    dir: std::path::PathBuf,
    config: std::path::PathBuf,
    tenant: String,
    by_the_go_provider: BTreeMap<String, String>,
    /// The webhook configurations and CRD conversions the install wrote.
    wiring: Wiring,
    /// The Go provider's process (its pod), with its webhooks and leader election, while it runs.
    process: Option<GoProvider>,
    /// The identity it holds the Lease with.
    go_holder: String,
    /// Its module's folder, and its release's components (as `clusterctl generate provider` writes them).
    go: std::path::PathBuf,
    components: String,
}

impl GoInstall {
    async fn start(plane: &Plane, client: &Client) -> GoInstall {
        let go = tokio::task::spawn_blocking(go_provider_dir).await.expect("the Go provider");
        // One local repository holds both releases: the Go provider's v1.1.0 and ours.
        let kustomized = ok(
            plane.kubectl_output(&["kustomize", &go.join("config/default").to_string_lossy()]),
            "kustomize the Go provider's config/default",
        );
        // Its release sets the image (`make set-manifest-image`) the same way.
        let theirs = kustomized.replace(
            "gcr.io/k8s-staging-capi-ipam-ic/cluster-api-ipam-in-cluster-controller:dev",
            "registry.k8s.io/capi-ipam-ic/cluster-api-ipam-in-cluster-controller:v1.1.0",
        );
        let their_metadata = std::fs::read_to_string(go.join("metadata.yaml")).expect("metadata");
        let (ours, our_metadata) = tokio::task::spawn_blocking(release_manifests).await.expect("release manifests");
        let version = our_version();
        let dir = scratch("clusterctl-upgrade");
        let config = repository_of(
            &dir,
            &[
                Release { version: "v1.1.0", components: &theirs, metadata: &their_metadata },
                Release { version: &version, components: &ours, metadata: &our_metadata },
            ],
            true,
        );
        let (dir_for_init, config_for_init, plane_dir) = (dir.clone(), config.clone(), plane.dir.clone());
        tokio::task::spawn_blocking(move || {
            clusterctl_init_from(&Plane::at(&plane_dir), &dir_for_init, &config_for_init, Some("v1.1.0"))
        })
        .await
        .expect("clusterctl init");
        assert_eq!(ipam_provider_version(plane), "IPAMProvider v1.1.0");
        assert!(deployment(plane).to_string().contains("cluster-api-ipam-in-cluster-controller:v1.1.0"));

        let wiring = save_wiring(plane);
        let go_provider = go_at_work(plane, &go).await;
        let tenant = create_namespace(client, "tenant").await;
        let spec = json!({"addresses": ["10.82.0.10-10.82.0.30"], "prefix": 24, "gateway": "10.82.0.1"});
        create_pool(client, "InClusterIPPool", &tenant, "nodes", spec).await;
        let by_the_go_provider = claim_and_wait(client, &tenant, &["a", "b", "c"]).await;
        assert_eq!(by_the_go_provider.len(), 3);
        assert!(go_log(plane).contains("successfully acquired lease"), "the Go provider leads: {}", go_log_tail(plane));
        let go_holder = lease_holder(client).await.expect("the Go provider holds the Lease");
        pool_writes_are_served(client, &tenant, "the Go provider at work").await;
        let addresses = CAPI.addresses(client, &tenant).list(&ListParams::default()).await.expect("IPAddresses");
        for a in &addresses.items {
            // Written by the Go provider: no conditions of ours on the claims yet, its finalizer on the IPAddresses.
            let finalizers = a.metadata.finalizers.clone().unwrap_or_default();
            assert!(finalizers.iter().any(|f| f == "ipam.cluster.x-k8s.io/ProtectAddress"), "{finalizers:?}");
        }
        GoInstall {
            dir,
            config,
            tenant,
            by_the_go_provider,
            wiring,
            process: Some(go_provider),
            go_holder,
            go,
            components: theirs,
        }
    }

    /// The Go provider at work again (rolled back to): its pod started, its webhooks served.
    async fn resume(&mut self, plane: &Plane) {
        self.process = Some(go_at_work(plane, &self.go).await);
    }

    /// The API server sees the install's own webhook configurations and CRD conversions again (the registration of a
    /// process at them undone), as an installer reading them would.
    fn unwire(&self, plane: &Plane) {
        restore_wiring(plane, &self.wiring);
    }

    /// The Go provider's pod goes (its Deployment scaled to 0, or deleted): killed, its Lease left to expire.
    fn stop(&mut self) {
        self.process = None;
    }
}

/// The Go provider at work as its Deployment's pod: its own webhook server, registered with its own CRDs and webhook
/// configurations (its Service's endpoint played by 127.0.0.1), and its leader election on the Lease of its
/// namespace, the one ours takes over. Returns once the API server's calls reach its webhooks.
async fn go_at_work(plane: &Plane, go: &std::path::Path) -> GoProvider {
    let (plane_dir, go) = (plane.dir.clone(), go.to_path_buf());
    tokio::task::spawn_blocking(move || {
        let plane = Plane::at(&plane_dir);
        let provider = GoProvider::as_deployed(&plane, &go, PROVIDER_NAMESPACE);
        let port = provider.webhook_port.expect("its webhook server");
        let (crds, webhooks) = (go.join("config/crd/bases"), go.join("config/webhook/manifests.yaml"));
        register_webhooks(&plane, port, &plane.dir.join("webhook-certs/ca.crt"), Some(&crds), Some(&webhooks));
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        wait_webhooks_reached(&plane, &plane.kubeconfig(), deadline, || go_log_tail(&plane));
        provider
    })
    .await
    .expect("the Go provider")
}

/// The Go provider's log (every start of it in this plane), and its end.
fn go_log(plane: &Plane) -> String {
    std::fs::read_to_string(go_log_path(plane)).unwrap_or_default()
}

fn go_log_tail(plane: &Plane) -> String {
    tail(&go_log_path(plane), 60)
}

fn go_log_path(plane: &Plane) -> std::path::PathBuf {
    plane.dir.join("logs/go-provider.log")
}

fn deployment(plane: &Plane) -> Value {
    kubectl_json(plane, &["get", "deployment", "-n", PROVIDER_NAMESPACE, "capi-ipam-in-cluster-controller-manager"])
        .expect("the Deployment")
}

/// Ours, where the new Deployment's pod would run: the Go provider's claims get our Ready condition and keep their
/// addresses, new ones get free ones.
/// It leader-elects on the Go provider's Lease, as the manager of our Deployment does in that namespace: the Go
/// provider's pod, killed, never released it, so ours allocates only once it expired.
async fn ours_keeps_and_binds(plane: &Plane, client: &Client, go: &GoInstall, step: &str) -> Manager {
    let manager = ours_in_the_namespace(plane, Launch::default()).await;
    keeps_and_binds(client, go, step).await;
    manager
}

/// Our manager as our Deployment's pod runs it there: leader election on the Lease of its namespace.
async fn ours_in_the_namespace(plane: &Plane, launch: Launch) -> Manager {
    let lease = format!("--leader-election-namespace={PROVIDER_NAMESPACE}");
    Manager::started(plane, launch, &["--insecure-diagnostics", "--leader-elect", &lease]).await
}

/// Ours started beside the Go provider at work (its pod's rollout, before the API server's calls go to ours): it
/// finds the Go provider's Lease held and waits; the caller stops the Go provider, then hands ours the calls with
/// [`ours_takes_over`].
async fn ours_beside_the_go_provider(plane: &Plane, client: &Client, go: &GoInstall) -> Manager {
    let ours = ours_in_the_namespace(plane, Launch { registered: false, ..Launch::default() }).await;
    eventually(Duration::from_secs(30), "ours finding the Go provider's Lease held", || async {
        std::fs::read_to_string(&ours.log).ok()?.contains("another replica holds the lease; waiting").then_some(())
    })
    .await;
    assert_eq!(lease_holder(client).await, Some(go.go_holder.clone()), "ours took the Lease the Go provider holds");
    ours
}

/// Our manager's log up to now: read as the Go provider stops, it says whether ours took the Lease while it ran (read
/// later, the Lease the Go provider left may have expired and been taken, as it should be).
fn log_while_the_go_provider_ran(ours: &Manager) -> String {
    std::fs::read_to_string(&ours.log).unwrap_or_default()
}

/// The Go provider's pod is gone: ours, still without the Lease (one allocator at a time while both ran, as its
/// `log` of that time says), gets the API server's calls, and takes the Lease once the one the Go provider left
/// expires.
fn ours_takes_over(plane: &Plane, ours: &Manager, log: &str) {
    assert!(
        !log.contains("acquired the lease"),
        "ours took the Lease while the Go provider ran:\n{}",
        ours.log_tail(40)
    );
    ours.take_over(plane);
    ours.wait_ready(plane);
}

/// Waits until the Go provider has taken the Lease `times` times in all (its log says so each time): after ours
/// released it (5 s later, as ours records a release) or after it expired (15 s), within one of its retries.
async fn go_took_the_lease(plane: &Plane, times: usize) {
    eventually(Duration::from_secs(60), "the Go provider taking the Lease", || async {
        (go_log(plane).matches("successfully acquired lease").count() == times).then_some(())
    })
    .await;
}

/// Ours at work: the Go provider's claims get our Ready condition and keep their addresses, new ones get free ones,
/// ours holds the Lease, and pool writes are served.
async fn keeps_and_binds(client: &Client, go: &GoInstall, step: &str) {
    let claims = CAPI.claims(client, &go.tenant);
    eventually(Duration::from_secs(60), "our Ready condition on the Go provider's claims", || async {
        let list = claims.list(&ListParams::default()).await.ok()?;
        list.items
            .iter()
            .all(|c| {
                c.data.pointer("/status/conditions").and_then(Value::as_array).is_some_and(|conds| {
                    conds.iter().any(|k| k["type"] == "Ready" && k["status"] == "True" && k["reason"] == "Allocated")
                })
            })
            .then_some(())
    })
    .await;
    let now = claim_and_wait(client, &go.tenant, &["d", "e"]).await;
    kept(&go.by_the_go_provider, &now, step);
    assert_eq!(now.len(), 5);
    let holder = lease_holder(client).await;
    assert!(holder.is_some() && holder != Some(go.go_holder.clone()), "{step}: ours holds the Lease: {holder:?}");
    pool_writes_are_served(client, &go.tenant, &format!("{step}, ours at work")).await;
}

#[tokio::test]
async fn clusterctl_upgrade_from_the_go_provider_keeps_every_claim_bound() {
    let _one = ONE_AT_A_TIME.lock().await;
    let plane = private_plane("upgrade").await;
    let client = plane.client().await;
    let mut go = GoInstall::start(&plane, &client).await;
    let (dir, config, version) = (go.dir.clone(), go.config.clone(), our_version());
    // clusterctl upgrade scales the old Deployment down first; the pod (here: the process) goes.
    go.stop();
    go.unwire(&plane);
    // `clusterctl upgrade plan` offers ours, and `upgrade apply` installs it in place.
    let kubeconfig = plane.kubeconfig().to_string_lossy().into_owned();
    let config_arg = config.to_string_lossy().into_owned();
    let plan = ok(
        clusterctl(&dir, &["upgrade", "plan", "--config", &config_arg, "--kubeconfig", &kubeconfig]),
        "clusterctl upgrade plan",
    );
    let offered = plan.lines().find(|l| l.contains("in-cluster")).unwrap_or_default();
    let columns: Vec<&str> = offered.split_whitespace().collect();
    assert!(columns.ends_with(&["v1.1.0", &version]), "the plan does not offer {version}:\n{plan}");
    let target = format!("{PROVIDER_NAMESPACE}/in-cluster:{version}");
    ok(
        clusterctl(
            &dir,
            &["upgrade", "apply", "--ipam", &target, "--config", &config_arg, "--kubeconfig", &kubeconfig],
        ),
        "clusterctl upgrade apply",
    );
    assert_eq!(ipam_provider_version(&plane), format!("IPAMProvider {version}"));
    let image = deployment(&plane)["spec"]["template"]["spec"]["containers"][0]["image"].clone();
    assert_eq!(image, format!("ghcr.io/capi-ipam-in-cluster/manager:{version}"));
    every_call_has_a_ready_pod(&plane, &["capi-ipam-in-cluster-webhook-service"], "clusterctl upgrade apply");
    let upgraded_wiring = save_wiring(&plane);
    let ours = ours_keeps_and_binds(&plane, &client, &go, "clusterctl upgrade").await;
    let with_ours = bound_addresses(&client, &go.tenant).await;

    // Rolling back as docs/migration.md writes it: `clusterctl delete --ipam in-cluster` without --include-crd (our
    // pod goes with our Deployment; the CRDs stay, and every pool, claim and IPAddress with them), then `clusterctl
    // init --ipam in-cluster:v1.1.0`.
    drop(ours);
    restore_wiring(&plane, &upgraded_wiring);
    let delete = ["delete", "--ipam", "in-cluster", "--config", &config_arg, "--kubeconfig", &kubeconfig];
    ok(clusterctl(&dir, &delete), "clusterctl delete --ipam in-cluster");
    assert!(deployment_gone(&plane), "clusterctl delete left our Deployment");
    assert_eq!(bound_addresses(&client, &go.tenant).await, with_ours, "clusterctl delete changed the claims");
    finish_namespace_deletion(&plane, "cert-manager-test");
    let init = ["init", "--ipam", "in-cluster:v1.1.0", "--config", &config_arg, "--kubeconfig", &kubeconfig];
    ok(clusterctl(&dir, &init), "clusterctl init --ipam in-cluster:v1.1.0 after the delete");
    assert_eq!(ipam_provider_version(&plane), "IPAMProvider v1.1.0");
    the_go_provider_back_at_work(&plane, &client, &mut go, &with_ours, "the rollback after clusterctl upgrade").await;
}

/// The Go provider's Deployment is back: its pod starts, takes the Lease our killed manager left over once it expires,
/// keeps every claim's address (`with_ours`) and binds a new claim with a free one; pool writes are served.
async fn the_go_provider_back_at_work(
    plane: &Plane,
    client: &Client,
    go: &mut GoInstall,
    with_ours: &BTreeMap<String, String>,
    step: &str,
) {
    let image = deployment(plane)["spec"]["template"]["spec"]["containers"][0]["image"].clone();
    assert_eq!(image, "registry.k8s.io/capi-ipam-ic/cluster-api-ipam-in-cluster-controller:v1.1.0");
    go.resume(plane).await;
    go_took_the_lease(plane, 2).await;
    let now = claim_and_wait(client, &go.tenant, &["f"]).await;
    kept(with_ours, &now, step);
    assert_eq!(now.len(), 6, "{step}: {now:?}");
    pool_writes_are_served(client, &go.tenant, step).await;
}

/// Finishes the deletion of a namespace, as kube-controller-manager's namespace controller (not run here) does: every
/// `clusterctl init` checks cert-manager by creating and deleting its objects in `cert-manager-test`, and a second
/// `init` could not create them in that namespace still terminating.
fn finish_namespace_deletion(plane: &Plane, name: &str) {
    let Some(mut namespace) = kubectl_json(plane, &["get", "namespace", name]) else { return };
    namespace["spec"]["finalizers"] = json!([]);
    let finalize = format!("/api/v1/namespaces/{name}/finalize");
    ok(plane.kubectl_stdin(&["replace", "--raw", &finalize, "-f", "-"], &namespace.to_string()), "finalizing");
}

fn deployment_gone(plane: &Plane) -> bool {
    kubectl_json(plane, &["get", "deployment", "-n", PROVIDER_NAMESPACE, "capi-ipam-in-cluster-controller-manager"])
        .is_none()
}

/// The shell blocks of the Helm steps of docs/migration.md, as written there.
fn migration_md_helm_blocks() -> Vec<String> {
    let doc = std::fs::read_to_string(repo_root().join("docs/migration.md")).expect("docs/migration.md");
    let helm = doc.split("**Helm**").nth(1).and_then(|s| s.split("**kustomize**").next()).expect("the Helm steps");
    helm.split("```sh").skip(1).filter_map(|b| b.split("```").next()).map(str::to_owned).collect()
}

/// Runs a shell block of the docs with the plane's kubectl and kubeconfig.
fn run_block(plane: &Plane, block: &str) {
    let state = scratch("helm");
    let path = format!(
        "{}:{}:{}",
        plane.bin_dir().display(),
        release_bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = std::process::Command::new("bash")
        .args(["-euo", "pipefail", "-c", block])
        .current_dir(repo_root())
        .env("PATH", path)
        .env("KUBECONFIG", plane.kubeconfig())
        .env("HELM_CACHE_HOME", &state)
        .env("HELM_CONFIG_HOME", &state)
        .env("HELM_DATA_HOME", &state)
        .output()
        .expect("bash");
    ok(out, &format!("docs/migration.md:\n{block}"));
}

/// One of the four pool CRDs (the IPAddress and IPAddressClaim CRDs are Cluster API's).
fn is_pool_crd(crd: &Value) -> bool {
    crd["metadata"]["name"].as_str().is_some_and(|n| n.ends_with("pools.ipam.cluster.x-k8s.io"))
}

/// Every webhook configuration and IPAM CRD conversion the API server calls names one of `ready`, the Services with a
/// ready pod behind them at this step: no pool write is refused (a call to a Service without one is, under
/// `failurePolicy: Fail`). No kube-proxy runs here to route them, so this is what the test checks at each step.
fn every_call_has_a_ready_pod(plane: &Plane, ready: &[&str], step: &str) {
    let called = pool_webhook_services(plane);
    assert!(!called.is_empty(), "{step}: no webhook configuration for the pools");
    for (configuration, service) in &called {
        assert!(ready.contains(&service.as_str()), "{step}: {configuration} calls {service}, with no ready pod");
    }
    let crds = kubectl_json(plane, &["get", "crd"]).expect("CRDs");
    for crd in crds["items"].as_array().expect("items") {
        let Some(service) = crd.pointer("/spec/conversion/webhook/clientConfig/service/name").and_then(Value::as_str)
        else {
            continue;
        };
        let name = crd["metadata"]["name"].as_str().unwrap_or_default();
        if is_pool_crd(crd) {
            assert!(ready.contains(&service), "{step}: CRD {name}'s conversion calls {service}, with no ready pod");
        }
    }
}

/// The webhook configurations whose webhooks the API server calls for our pools, and the Service each calls.
fn pool_webhook_services(plane: &Plane) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for kind in ["validatingwebhookconfigurations", "mutatingwebhookconfigurations"] {
        let list = kubectl_json(plane, &["get", kind]).expect("webhook configurations");
        for cfg in list["items"].as_array().expect("items") {
            for hook in cfg["webhooks"].as_array().into_iter().flatten() {
                let ours = hook["rules"].as_array().into_iter().flatten().any(|r| {
                    r["apiGroups"].as_array().is_some_and(|g| g.iter().any(|g| g == "ipam.cluster.x-k8s.io"))
                        && r["resources"].to_string().contains("inclusterippools")
                });
                if ours {
                    let service = hook["clientConfig"]["service"]["name"].as_str().unwrap_or("(a URL)").to_owned();
                    found.push((cfg["metadata"]["name"].as_str().unwrap_or_default().to_owned(), service));
                }
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

/// Issue 34: "install the chart in their namespace and scale the Go provider's Deployment to 0" failed: `helm install`
/// refused the four CRDs it did not own, and the Go provider's webhook configurations (`failurePolicy: Fail`) then
/// pointed at a Service with no endpoints, refusing every pool write. Walked as docs/migration.md writes it now, its
/// three shell blocks run as they are: the chart installed without its CRDs and webhook configurations (its pod ready,
/// nothing calls it), then Helm takes the CRDs over and the release gets its webhooks (both providers' serve), then
/// the Go provider's go before its Deployment does. After every step, every webhook configuration and CRD conversion
/// names a Service with a ready pod. Ours then keeps every claim's address and binds new ones. Then the rollback
/// docs/migration.md writes: the Go provider keeps every address and binds a new claim with a free one.
#[tokio::test]
async fn the_helm_migration_from_the_go_provider_as_migration_md_writes_it_keeps_every_claim() {
    let _one = ONE_AT_A_TIME.lock().await;
    let plane = private_plane("helm-migration").await;
    let client = plane.client().await;
    let mut go = GoInstall::start(&plane, &client).await;
    go.unwire(&plane);
    let blocks = migration_md_helm_blocks();
    assert_eq!(blocks.len(), 3, "docs/migration.md's Helm steps have three shell blocks: {blocks:?}");
    let go_service = "capi-ipam-in-cluster-webhook-service";
    let chart_service = "capi-ipam-capi-ipam-in-cluster-webhook";
    every_call_has_a_ready_pod(&plane, &[go_service], "the Go provider at work");

    // 1. The chart installed beside the running Go provider, its CRDs and webhook configurations left out: nothing
    // calls ours yet. Its pod ready (played here: ours, beside the Go provider), it waits for the Go provider's Lease.
    run_block(&plane, &blocks[0]);
    let crd = kubectl_json(&plane, &["get", "crd", "inclusterippools.ipam.cluster.x-k8s.io"]).expect("CRD");
    assert_eq!(crd["spec"]["conversion"]["webhook"]["clientConfig"]["service"]["name"], go_service);
    assert!(pool_webhook_services(&plane).iter().all(|(_, s)| s == go_service), "only the Go provider's are called");
    let mut ours = ours_beside_the_go_provider(&plane, &client, &go).await;
    every_call_has_a_ready_pod(&plane, &[go_service, chart_service], "1. the chart installed, its pod ready");

    // cert-manager (not run here) issued our certificate in step 1: its Secret. The upgrade writes its CA with our
    // Service in one write, so no call meets our certificate with the Go provider's CA (helper-99).
    let pem = std::fs::read(plane.dir.join("webhook-certs/ca.crt")).expect("the plane's CA");
    let data: BTreeMap<String, ByteString> =
        ["ca.crt", "tls.crt", "tls.key"].iter().map(|k| (k.to_string(), ByteString(pem.clone()))).collect();
    let secret = serde_json::to_value(Secret {
        metadata: kube::api::ObjectMeta {
            name: Some("capi-ipam-capi-ipam-in-cluster-webhook-service-cert".to_owned()),
            namespace: Some(PROVIDER_NAMESPACE.to_owned()),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".to_owned()),
        data: Some(data),
        ..Default::default()
    })
    .expect("JSON");
    let ca = secret["data"]["ca.crt"].clone();
    ok(plane.kubectl_stdin(&["apply", "-f", "-"], &secret.to_string()), "cert-manager's Secret");

    // 2. Helm takes the CRDs over and the release is upgraded to its defaults: the conversion calls ours, whose pod is
    // ready, and both providers' webhooks are called; both serve.
    run_block(&plane, &blocks[1]);
    for kind in ["validatingwebhookconfigurations", "mutatingwebhookconfigurations"] {
        let list = kubectl_json(&plane, &["get", kind]).expect("webhook configurations");
        for hook in
            list["items"].as_array().expect("items").iter().flat_map(|c| c["webhooks"].as_array().into_iter().flatten())
        {
            if hook["clientConfig"]["service"]["name"] == chart_service {
                assert_eq!(hook["clientConfig"]["caBundle"], ca, "{}: our CA with our Service", hook["name"]);
            }
        }
    }
    let crds = kubectl_json(&plane, &["get", "crd"]).expect("CRDs");
    for crd in crds["items"].as_array().expect("items").iter().filter(|c| is_pool_crd(c)) {
        assert_eq!(crd["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"], ca, "{}", crd["metadata"]["name"]);
    }
    let both = pool_webhook_services(&plane);
    for service in [go_service, chart_service] {
        assert!(both.iter().any(|(_, s)| s == service), "while both run, {service}'s webhooks are called: {both:?}");
    }
    let crd = kubectl_json(&plane, &["get", "crd", "inclusterippools.ipam.cluster.x-k8s.io"]).expect("CRD");
    assert_eq!(crd["spec"]["conversion"]["webhook"]["clientConfig"]["service"]["name"], chart_service);
    every_call_has_a_ready_pod(&plane, &[go_service, chart_service], "2. the CRDs taken over, the release upgraded");

    // 3. The Go provider's webhook configurations go, then its Deployment: only the chart's webhooks are called.
    run_block(&plane, &blocks[2]);
    let log_while_go_ran = log_while_the_go_provider_ran(&ours);
    go.stop();
    every_call_has_a_ready_pod(&plane, &[chart_service], "3. the Go provider's webhooks and pod gone");
    assert_eq!(deployment(&plane)["spec"]["replicas"], 0);

    // The chart's Service now calls ours alone (the chart's wiring kept, to give back before the rollback's apply),
    // and ours takes over the Lease the Go provider's pod left when it expires.
    let chart_wiring = save_wiring(&plane);
    ours_takes_over(&plane, &ours, &log_while_go_ran);
    keeps_and_binds(&client, &go, "the Helm migration").await;
    let with_ours = bound_addresses(&client, &go.tenant).await;

    // Rolling back as docs/migration.md writes it: the Go provider's components applied again, its pod ready (ours
    // still serving: no claim waits meanwhile), then the chart uninstalled; its CRDs stay, and every pool with them.
    assert!(!go.components.contains("${"), "the Go provider's components need no variables");
    // The API server's wiring as the chart wrote it: the test's stand-in for the chart's pod registered its webhooks
    // under the names of config/webhook (the Go provider's names) in place of the chart's.
    for kind in ["validatingwebhookconfiguration", "mutatingwebhookconfiguration"] {
        let name =
            format!("capi-ipam-in-cluster-{}-webhook-configuration", kind.trim_end_matches("webhookconfiguration"));
        ok(plane.kubectl_output(&["delete", kind, &name]), "the stand-in's webhook configuration");
    }
    restore_wiring(&plane, &chart_wiring);
    ok(plane.kubectl_stdin(&["apply", "-f", "-"], &go.components), "the Go provider's components applied again");
    let ours_holding = lease_holder(&client).await.expect("ours holds the Lease");
    go.resume(&plane).await;
    let kubeconfig = plane.kubeconfig().to_string_lossy().into_owned();
    // Both run now, one allocates: the Go provider waits for the Lease ours holds.
    assert_eq!(lease_holder(&client).await.as_ref(), Some(&ours_holding), "the Go provider took the Lease from ours");
    assert_eq!(go_log(&plane).matches("successfully acquired lease").count(), 1, "{}", go_log_tail(&plane));
    ok(
        helm(&["uninstall", "capi-ipam", "--namespace", PROVIDER_NAMESPACE, "--kubeconfig", &kubeconfig]),
        "helm uninstall after the rollback",
    );
    // The chart's Deployment gone, its pod gets SIGTERM: ours releases the Lease (recorded as held 5 s more, the
    // margin for a write still in flight), and the Go provider takes it over.
    assert!(ours.terminate(Duration::from_secs(30)), "our manager did not stop on SIGTERM");
    let log = std::fs::read_to_string(&ours.log).unwrap_or_default();
    assert!(log.contains("released the lease"), "ours did not release the Lease on SIGTERM:\n{}", ours.log_tail(40));
    go_took_the_lease(&plane, 2).await;
    let go_again = pool_webhook_services(&plane);
    assert!(go_again.iter().all(|(_, s)| s != chart_service), "the chart's webhooks are gone: {go_again:?}");
    let now = claim_and_wait(&client, &go.tenant, &["f"]).await;
    kept(&with_ours, &now, "the rollback to the Go provider");
    assert_eq!(now.len(), 6, "{now:?}");
    pool_writes_are_served(&client, &go.tenant, "the Helm rollback to the Go provider").await;
}

/// The kustomize path of docs/migration.md, and its rollback, walked from the Go provider's clusterctl install:
/// `kubectl apply -k config/default` writes our objects over the Go provider's under the same names, so its webhook
/// configurations call our Service at once (no pool write refused), and ours keeps every claim's address and binds
/// new ones; then the rollback as docs/migration.md writes it (its components applied again over ours, our Deployment
/// gone with them): the Go provider keeps every address and binds a new claim with a free one.
#[tokio::test]
async fn the_kustomize_migration_from_the_go_provider_and_back_keeps_every_claim() {
    let _one = ONE_AT_A_TIME.lock().await;
    let plane = private_plane("kustomize-migration").await;
    let client = plane.client().await;
    let mut go = GoInstall::start(&plane, &client).await;
    go.unwire(&plane);
    let go_services = pool_webhook_services(&plane);
    assert!(!go_services.is_empty(), "{go_services:?}");
    let config = repo_root().join("config/default").to_string_lossy().into_owned();
    ok(plane.kubectl_output(&["apply", "-k", &config]), "kubectl apply -k config/default over the Go provider");
    // The same webhook configurations, calling the same Service, now ours: no pool write is refused at any step.
    assert_eq!(pool_webhook_services(&plane), go_services, "the webhook configurations changed hands, not names");
    every_call_has_a_ready_pod(
        &plane,
        &["capi-ipam-in-cluster-webhook-service"],
        "kubectl apply -k over the Go provider",
    );
    let image = deployment(&plane)["spec"]["template"]["spec"]["containers"][0]["image"].clone();
    assert_eq!(image, format!("ghcr.io/capi-ipam-in-cluster/manager:{}", our_version()));
    // The Deployment's rollout replaces the Go provider's pod with ours: ours starts beside it and waits, then the
    // Go provider's pod goes.
    let ours = ours_beside_the_go_provider(&plane, &client, &go).await;
    let log_while_go_ran = log_while_the_go_provider_ran(&ours);
    go.stop();
    ours_takes_over(&plane, &ours, &log_while_go_ran);
    keeps_and_binds(&client, &go, "the kustomize migration").await;
    let with_ours = bound_addresses(&client, &go.tenant).await;

    // Rolling back: our pod goes, the Go provider's components are applied again over ours (docs/migration.md).
    drop(ours);
    go.unwire(&plane);
    assert!(!go.components.contains("${"), "the Go provider's components need no variables");
    ok(plane.kubectl_stdin(&["apply", "-f", "-"], &go.components), "the Go provider's components applied again");
    let ours_only = ["delete", "networkpolicy", "-n", PROVIDER_NAMESPACE, "capi-ipam-in-cluster-controller-manager"];
    ok(plane.kubectl_output(&ours_only), "our NetworkPolicy, the one object the Go provider has not");
    the_go_provider_back_at_work(&plane, &client, &mut go, &with_ours, "the kustomize rollback").await;
}

/// A plane of its own with Cluster API v1.10.10 (the v1beta1 IPAM API) and the fixture CRDs.
async fn plane_with_cluster_api_1_10(name: &'static str) -> Plane {
    let plane =
        tokio::task::spawn_blocking(move || Plane::private_with(name, &["--capi", "v1.10"])).await.expect("plane");
    let dir = plane.dir.clone();
    tokio::task::spawn_blocking(move || install_fixture_crds(&Plane::at(&dir))).await.expect("fixture CRDs");
    plane
}

/// On Cluster API 1.6–1.10 clusterctl refuses our v1beta2-contract release, and docs/install.md says to install with
/// Helm there: the chart installs on a Cluster API v1.10.10 control plane, and the manager binds a claim through the
/// v1beta1 API.
#[tokio::test]
async fn the_chart_installs_on_cluster_api_1_10_and_binds_a_v1beta1_claim() {
    let _one = ONE_AT_A_TIME.lock().await;
    let plane = plane_with_cluster_api_1_10("helm-v1beta1").await;
    let client = plane.client().await;
    let kubeconfig = plane.kubeconfig().to_string_lossy().into_owned();
    let installed = ok(
        helm(&[
            "install",
            "ipam",
            CHART,
            "--create-namespace",
            "--namespace",
            PROVIDER_NAMESPACE,
            "--kubeconfig",
            &kubeconfig,
        ]),
        "helm install on Cluster API 1.10",
    );
    assert!(installed.contains("STATUS: deployed"), "{installed}");
    let manager = Manager::started(&plane, Launch::default(), &["--insecure-diagnostics"]).await;
    assert!(manager.log_tail(200).contains("ipam=\"v1beta1\""), "{}", manager.log_tail(20));
    let tenant = create_namespace(&client, "tenant").await;
    let spec = json!({"addresses": ["10.83.0.10-10.83.0.12"], "prefix": 24, "gateway": "10.83.0.1"});
    create_pool(&client, "InClusterIPPool", &tenant, "nodes", spec).await;
    Capi::V1Beta1.create_claim(&client, &tenant, "a", "InClusterIPPool", "nodes").await;
    let bound = Capi::V1Beta1.wait_bound(&client, &tenant, "a").await;
    assert_eq!(bound.data["spec"]["address"], "10.83.0.10");
}

/// docs/install.md's other path on Cluster API 1.6–1.10: `kubectl apply -k config/default` on a Cluster API v1.10.10
/// control plane installs a provider whose manager binds a claim through the v1beta1 API.
#[tokio::test]
async fn kubectl_apply_k_config_default_on_cluster_api_1_10_binds_a_v1beta1_claim() {
    let _one = ONE_AT_A_TIME.lock().await;
    let plane = plane_with_cluster_api_1_10("kustomize-v1beta1").await;
    let client = plane.client().await;
    let flags = apply_config_default(&plane);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let manager = Manager::started(&plane, Launch::default(), &flags).await;
    assert!(manager.log_tail(200).contains("ipam=\"v1beta1\""), "{}", manager.log_tail(20));
    let tenant = create_namespace(&client, "tenant").await;
    let spec = json!({"addresses": ["10.84.0.10-10.84.0.12"], "prefix": 24, "gateway": "10.84.0.1"});
    create_pool(&client, "InClusterIPPool", &tenant, "nodes", spec).await;
    Capi::V1Beta1.create_claim(&client, &tenant, "a", "InClusterIPPool", "nodes").await;
    let bound = Capi::V1Beta1.wait_bound(&client, &tenant, "a").await;
    assert_eq!(bound.data["spec"]["address"], "10.84.0.10");
}

/// The Cluster API Operator v0.29.0 (tests/tools/k8s-bin.sh operator) running out of cluster against a plane, as its
/// single replica runs: leader election off, its webhook server on 127.0.0.1 with the plane's throwaway certificate
/// (its webhooks only default what the test sets itself), its health probe on a free port, diagnostics and profiler
/// off. Its log is `logs/operator.log` in the plane's folder. Killed when dropped.
struct Operator {
    child: std::process::Child,
    log: std::path::PathBuf,
}

impl Operator {
    fn start(plane: &Plane) -> Operator {
        let dir = tool_dir("operator");
        let certs = plane.dir.join("webhook-certs");
        let certs_made = std::process::Command::new("bash")
            .arg(repo_root().join("tests/tools/dev-certs.sh"))
            .arg(&certs)
            .status()
            .expect("dev-certs.sh");
        assert!(certs_made.success(), "dev-certs.sh");
        let health = free_port();
        let log = plane.dir.join("logs/operator.log");
        let file = std::fs::OpenOptions::new().create(true).append(true).open(&log).expect("log");
        let child = std::process::Command::new(dir.join("operator"))
            .env("KUBECONFIG", plane.kubeconfig())
            .args([
                "--leader-elect=false",
                &format!("--webhook-port={}", free_port()),
                &format!("--webhook-cert-dir={}", certs.display()),
                &format!("--health-addr=127.0.0.1:{health}"),
                "--diagnostics-address=0",
                "--profiler-address=",
                "-v=2",
            ])
            .stdin(std::process::Stdio::null())
            .stdout(file.try_clone().expect("log"))
            .stderr(file)
            .spawn()
            .expect("starting the operator");
        let operator = Operator { child, log };
        wait_go_ready(health, || format!("the operator; its log:\n{}", operator.log_tail()));
        operator
    }

    fn log_tail(&self) -> String {
        support::tail(&self.log, 40)
    }

    /// Waits up to two minutes for `check` to find what it looks for in the plane; panics with the operator's log.
    async fn wait_for<T>(&self, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(found) = check() {
                return found;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what}: not within 2 min; the operator's log:\n{}",
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Pushes a release (`ipam-components.yaml` and `metadata.yaml`) to `registry` as `<repository>:<version>`, as the OCI
/// artifact `make release` writes (`oci-image artifact`, the files titled by name as the Operator reads them); returns
/// the artifact's URL as `fetchConfig.oci` takes it (plain HTTP).
fn publish(registry: &Registry, repository: &str, version: &str, components: &str, metadata: &str) -> String {
    let dir = scratch("oci-artifact");
    let files = [dir.join("ipam-components.yaml"), dir.join("metadata.yaml")];
    std::fs::write(&files[0], components).expect("ipam-components.yaml");
    std::fs::write(&files[1], metadata).expect("metadata.yaml");
    let reference = format!("{}:{version}", registry.reference(repository));
    let layout = dir.join("oci");
    let out = std::process::Command::new(tool_dir("image").join("oci-image"))
        .args(["artifact", "--layout", &layout.to_string_lossy(), "--tag", &reference])
        .args(&files)
        .output()
        .expect("oci-image artifact");
    ok(out, "oci-image artifact");
    crane(&["push", &layout.to_string_lossy(), &reference]);
    format!("http://{reference}")
}

/// Our release's ConfigMap for the Operator's air-gapped `fetchConfig.selector`, as `make release` writes it.
fn released_config_map(version: &str) -> String {
    let path = repo_root().join(format!("out/release/operator/ipam-in-cluster-{version}.configmap.yaml"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}: run `make release` first", path.display()))
}

/// The label the operator's `fetchConfig.selector` matches, beside the version label (as in docs/install.md and the
/// ConfigMap of make release).
const COMPONENTS_LABEL: &str = "provider-components";

/// A ConfigMap in the operator's air-gapped layout: one release of a provider, its components and metadata, labelled
/// with its version (one ConfigMap per version: a selector that matches two is an error to the operator).
fn components_config_map(namespace: &str, provider: &str, version: &str, components: &str, metadata: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("{provider}-{version}"), "namespace": namespace,
                     "labels": {COMPONENTS_LABEL: provider, "provider.cluster.x-k8s.io/version": version}},
        "data": {"components": components, "metadata": metadata},
    })
}

fn fetch_selector(provider: &str, version: &str) -> Value {
    json!({"selector": {"matchLabels": {COMPONENTS_LABEL: provider, "provider.cluster.x-k8s.io/version": version}}})
}

/// The core provider the operator requires before any other (named `cluster-api`, Ready). The plane already runs Cluster
/// API's manager with its CRDs and webhooks; its operator-installed components are a stand-in Deployment that no
/// kubelet runs, whose `Available` condition the test writes, as the Deployment controller would.
async fn core_provider_ready(plane: &Plane, operator: &Operator) {
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "capi-system"}});
    ok(plane.kubectl_stdin(&["apply", "-f", "-"], &namespace.to_string()), "namespace capi-system");
    let components = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: capi-controller-manager\n  namespace: capi-system\nspec:\n  selector:\n    matchLabels: {app: capi}\n  template:\n    metadata:\n      labels: {app: capi}\n    spec:\n      containers:\n      - name: manager\n        image: registry.k8s.io/cluster-api/cluster-api-controller:v1.14.2\n";
    let metadata = "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\nreleaseSeries:\n- {major: 1, minor: 14, contract: v1beta2}\n";
    let config_map = components_config_map("capi-system", "cluster-api", "v1.14.2", components, metadata);
    ok(plane.kubectl_stdin(&["create", "-f", "-"], &config_map.to_string()), "the core provider's ConfigMap");
    let core = json!({
        "apiVersion": "operator.cluster.x-k8s.io/v1alpha2", "kind": "CoreProvider",
        "metadata": {"name": "cluster-api", "namespace": "capi-system"},
        "spec": {"version": "v1.14.2", "fetchConfig": fetch_selector("cluster-api", "v1.14.2")},
    });
    ok(plane.kubectl_stdin(&["create", "-f", "-"], &core.to_string()), "the CoreProvider");
    operator
        .wait_for("the core provider's Deployment", || {
            kubectl_json(plane, &["get", "deployment", "-n", "capi-system", "capi-controller-manager"])
        })
        .await;
    let available = json!({"status": {"conditions": [{"type": "Available", "status": "True",
        "reason": "MinimumReplicasAvailable", "message": "the test plays the Deployment controller"}]}});
    ok(
        plane.kubectl_output(&[
            "patch",
            "deployment",
            "-n",
            "capi-system",
            "capi-controller-manager",
            "--subresource=status",
            "--type=merge",
            "-p",
            &available.to_string(),
        ]),
        "the core Deployment Available",
    );
    operator
        .wait_for("the CoreProvider Ready", || {
            let core = kubectl_json(plane, &["get", "coreprovider", "-n", "capi-system", "cluster-api"])?;
            condition_true(&core, "Ready").then_some(())
        })
        .await;
}

fn condition_true(object: &Value, kind: &str) -> bool {
    object["status"]["conditions"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c["type"] == kind && c["status"] == "True"))
}

/// The IPAMProvider `in-cluster` once the operator has installed `version` of it.
async fn ipam_provider_installed(plane: &Plane, operator: &Operator, version: &str) -> Value {
    operator
        .wait_for(&format!("the IPAMProvider installed at {version}"), || {
            let provider = kubectl_json(plane, &["get", "ipamprovider", "-n", PROVIDER_NAMESPACE, "in-cluster"])?;
            (provider["status"]["installedVersion"] == version && condition_true(&provider, "ProviderInstalled"))
                .then_some(provider)
        })
        .await
}

/// The manager's container's arguments in the Deployment the operator wrote.
fn manager_args(plane: &Plane) -> Vec<String> {
    let deployment = deployment(plane);
    let containers = deployment["spec"]["template"]["spec"]["containers"].as_array().expect("containers").clone();
    let manager = containers.iter().find(|c| c["name"] == "manager").expect("the container named manager");
    manager["args"].as_array().expect("args").iter().map(|a| a.as_str().expect("an argument").to_owned()).collect()
}

/// Our manager where the Deployment's pod would run: every flag the operator wrote, but those that say where to
/// listen and how to log (the test picks them: 127.0.0.1, free ports, text), and the Lease's namespace the downward
/// API gives the pod.
async fn ours_with_the_operators_flags(plane: &Plane) -> Manager {
    let local = [
        "--health-addr",
        "--metrics-bind-addr",
        "--diagnostics-address",
        "--insecure-diagnostics",
        "--webhook-host",
        "--webhook-port",
        "--webhook-cert-dir",
    ];
    let mut flags: Vec<String> =
        manager_args(plane).into_iter().filter(|a| !local.iter().any(|f| a.split('=').next() == Some(*f))).collect();
    flags.extend(["--insecure-diagnostics".to_owned(), format!("--leader-election-namespace={PROVIDER_NAMESPACE}")]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    Manager::started(plane, Launch::default(), &flags).await
}

/// Issue 34: the Cluster API Operator path, run for real. The operator (built from its Go module) installs our
/// release from a ConfigMap (an `IPAMProvider`'s air-gapped `fetchConfig.selector`), with a `spec.manager` that sets
/// every kind of flag it can inject and a variable from its `configSecret`; our manager, run with the Deployment's
/// flags as the operator wrote them, binds claims. Then an upgrade through the operator (`spec.version`) to a later
/// release published as an OCI artifact (`fetchConfig.oci`, a registry on 127.0.0.1) deletes and re-creates the
/// Deployment, Services and webhook configurations, keeps the CRDs, every pool, claim and IPAddress, and the manager
/// of the new Deployment keeps every address and binds new claims.
#[tokio::test]
async fn the_cluster_api_operator_installs_and_upgrades_us_and_every_address_is_kept() {
    let _one = ONE_AT_A_TIME.lock().await;
    let plane = private_plane("operator").await;
    let client = plane.client().await;
    let crds = tool_dir("operator").join("crd").to_string_lossy().into_owned();
    ok(plane.kubectl_output(&["apply", "--server-side", "-f", &crds]), "the operator's CRDs");
    ok(
        plane.kubectl_output(&["wait", "--for=condition=Established", "--timeout=60s", "crd", "--all"]),
        "the operator's CRDs established",
    );
    let operator = Operator::start(&plane);
    core_provider_ready(&plane, &operator).await;

    // Our release (make release-manifests) in a ConfigMap, and a later one, v2.1.0, as an OCI artifact; the later
    // one's metadata lists both series, as a release's does (the operator's upgrade reads the installed series there).
    let (components, metadata) = tokio::task::spawn_blocking(release_manifests).await.expect("release manifests");
    let version = our_version();
    let later = "v2.1.0";
    assert!(later > version.as_str(), "{later} is later than {version}");
    let later_components = components.replace(&format!("manager:{version}"), &format!("manager:{later}"));
    assert_ne!(later_components, components, "the image names the version");
    let later_metadata = format!("{}\n  - major: 2\n    minor: 1\n    contract: v1beta2\n", metadata.trim_end());
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": PROVIDER_NAMESPACE}});
    ok(plane.kubectl_stdin(&["apply", "-f", "-"], &namespace.to_string()), "our namespace");
    // The release's own ConfigMap, holding what make release-manifests writes.
    let config_map: Value = serde_json::from_str(&released_config_map(&version)).expect("the release's ConfigMap");
    assert_eq!(
        (config_map["data"]["components"].as_str(), config_map["data"]["metadata"].as_str()),
        (Some(components.as_str()), Some(metadata.as_str()))
    );
    ok(plane.kubectl_stdin(&["create", "-f", "-"], &config_map.to_string()), "our ConfigMap");
    let registry = Registry::start();
    let later_artifact = publish(&registry, "ipam-in-cluster", later, &later_components, &later_metadata);
    let variables = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "ipam-variables", "namespace": PROVIDER_NAMESPACE},
        "stringData": {"CAPI_IPAM_IN_CLUSTER_REJECT_OVERLAPPING_POOLS": "true"},
    });
    ok(plane.kubectl_stdin(&["create", "-f", "-"], &variables.to_string()), "the variables");
    let provider = json!({
        "apiVersion": "operator.cluster.x-k8s.io/v1alpha2", "kind": "IPAMProvider",
        "metadata": {"name": "in-cluster", "namespace": PROVIDER_NAMESPACE},
        "spec": {
            "version": version,
            "fetchConfig": fetch_selector("ipam-in-cluster", &version),
            "configSecret": {"name": "ipam-variables", "namespace": PROVIDER_NAMESPACE},
            "manager": {
                "verbosity": 4,
                "syncPeriod": "5m",
                "maxConcurrentReconciles": 4,
                "featureGates": {"MachinePool": true},
                "controller": {"groupKindConcurrency": {"IPAddressClaim.ipam.cluster.x-k8s.io": 3,
                                                        "InClusterIPPool.ipam.cluster.x-k8s.io": 2}},
                "leaderElection": {"leaderElect": true, "resourceLock": "leases", "resourceName": LEASE, "resourceNamespace": PROVIDER_NAMESPACE,
                                   "leaseDuration": "20s", "renewDeadline": "15s", "retryPeriod": "3s"},
                "health": {"healthProbeBindAddress": ":9440"},
                "metrics": {"bindAddress": ":8080", "diagnosticsAddress": ":8443", "insecureDiagnostics": true},
                "webhook": {"port": 9443, "host": "0.0.0.0", "certDir": "/tmp/k8s-webhook-server/serving-certs"},
                "profilerAddress": "localhost:6060",
                // The Deployment says --log-format=json and --log-level=info; these, written after, win.
                "additionalArgs": {"--logging-format": "text"},
            },
        },
    });
    ok(plane.kubectl_stdin(&["create", "-f", "-"], &provider.to_string()), "the IPAMProvider");
    let installed = ipam_provider_installed(&plane, &operator, &version).await;
    let installed_uid = installed["metadata"]["uid"].clone();

    // What the operator wrote: our Deployment, owned by the IPAMProvider, the variable substituted, and every flag of
    // spec.manager.
    let written = deployment(&plane);
    let owners = written["metadata"]["ownerReferences"].to_string();
    assert!(owners.contains("IPAMProvider") && owners.contains(installed_uid.as_str().expect("uid")), "{owners}");
    let args = manager_args(&plane);
    for expected in [
        "--reject-overlapping-pools=true",
        "--v=4",
        "--sync-period=300s",
        "--max-concurrent-reconciles=4",
        "--feature-gates=MachinePool=true",
        "--ipaddressclaim.ipam.cluster.x-k8s.io-concurrency=3",
        "--inclusterippool.ipam.cluster.x-k8s.io-concurrency=2",
        "--leader-elect=true",
        &format!("--leader-election-id={PROVIDER_NAMESPACE}/{LEASE}"),
        "--leader-elect-lease-duration=20s",
        "--leader-elect-renew-deadline=15s",
        "--leader-elect-retry-period=3s",
        "--health-addr=:9440",
        "--metrics-bind-addr=:8080",
        "--diagnostics-address=:8443",
        "--insecure-diagnostics=true",
        "--webhook-port=9443",
        "--webhook-host=0.0.0.0",
        "--profiler-address=localhost:6060",
        "--logging-format=text",
    ] {
        assert!(args.iter().any(|a| a == expected), "the operator did not write {expected}: {args:?}");
    }
    let deployment_uid = written["metadata"]["uid"].clone();
    let crd_uid = |plane: &Plane| {
        kubectl_json(plane, &["get", "crd", "inclusterippools.ipam.cluster.x-k8s.io"]).expect("CRD")["metadata"]["uid"]
            .clone()
    };
    let crd_before = crd_uid(&plane);

    // The operator re-applies its cached components on every reconcile, forcing its ownership: it would take the API
    // server's wiring back from the test's stand-in for the pod (the manager on 127.0.0.1), and its upgrade patches
    // the CRDs' conversion onto the stand-in's. In a cluster the pod is behind the Service it wires; here the operator
    // runs only while it installs and upgrades, and sees the wiring as it wrote it.
    drop(operator);
    let wiring = save_wiring(&plane);
    let manager = ours_with_the_operators_flags(&plane).await;
    let log = manager.log_tail(100_000);
    for notice in [
        "--sync-period=",
        "--feature-gates=",
        "--profiler-address=",
        "--inclusterippool.ipam.cluster.x-k8s.io-concurrency=2:",
        "--log-level=info is overridden by --v=4, given after it",
        "--log-format=json is overridden by --logging-format=text, given after it",
    ] {
        assert!(log.contains(notice), "no notice of {notice} in the manager's log:\n{log}");
    }
    // --v=4 is debug, in the text format.
    assert!(log.lines().any(|l| l.contains(" DEBUG ")), "no debug line in the manager's log:\n{log}");
    let tenant = create_namespace(&client, "tenant").await;
    let spec = json!({"addresses": ["10.84.0.10-10.84.0.30"], "prefix": 24, "gateway": "10.84.0.1"});
    create_pool(&client, "InClusterIPPool", &tenant, "nodes", spec).await;
    let before = claim_and_wait(&client, &tenant, &["a", "b", "c"]).await;
    assert_eq!(before.len(), 3);
    let lease = Api::<Lease>::namespaced(client.clone(), PROVIDER_NAMESPACE).get(LEASE).await.expect("the Lease");
    assert!(lease.spec.and_then(|s| s.holder_identity).is_some(), "the manager holds the operator's Lease");
    let address_uids = |list: &kube::api::ObjectList<kube::api::DynamicObject>| -> BTreeMap<String, String> {
        list.items
            .iter()
            .map(|a| (a.metadata.name.clone().unwrap_or_default(), a.metadata.uid.clone().unwrap_or_default()))
            .collect()
    };
    let addresses = CAPI.addresses(&client, &tenant);
    let uids_before = address_uids(&addresses.list(&ListParams::default()).await.expect("IPAddresses"));

    // The upgrade: the operator scales the Deployment to 0 first (the pod, here the process, goes), deletes it, the
    // Services and webhook configurations, and re-creates them from v2.1.0.
    drop(manager);
    restore_wiring(&plane, &wiring);
    let operator = Operator::start(&plane);
    let upgrade = json!({"spec": {"version": later, "fetchConfig": {"oci": later_artifact, "selector": null}}});
    ok(
        plane.kubectl_output(&[
            "patch",
            "ipamprovider",
            "-n",
            PROVIDER_NAMESPACE,
            "in-cluster",
            "--type=merge",
            "-p",
            &upgrade.to_string(),
        ]),
        "the upgrade",
    );
    let upgraded = ipam_provider_installed(&plane, &operator, later).await;
    assert!(condition_true(&upgraded, "ProviderUpgraded"), "{}", upgraded["status"]);
    let rewritten = deployment(&plane);
    assert_ne!(rewritten["metadata"]["uid"], deployment_uid, "the upgrade re-created the Deployment");
    let image = rewritten["spec"]["template"]["spec"]["containers"][0]["image"].clone();
    assert_eq!(image, format!("ghcr.io/capi-ipam-in-cluster/manager:{later}"));
    assert_eq!(crd_uid(&plane), crd_before, "the upgrade kept the CRDs");
    let uids_after = address_uids(&addresses.list(&ListParams::default()).await.expect("IPAddresses"));
    assert_eq!(uids_after, uids_before, "the upgrade kept every IPAddress");
    kept(&before, &bound_addresses(&client, &tenant).await, "the operator's upgrade");

    drop(operator);
    let _manager = ours_with_the_operators_flags(&plane).await;
    let now = claim_and_wait(&client, &tenant, &["d", "e"]).await;
    kept(&before, &now, "the manager of the upgraded Deployment");
    assert_eq!(now.len(), 5);
}
