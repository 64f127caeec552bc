//! The install paths as an operator walks them, each on a control plane of its own (kube-apiserver, etcd, the Cluster
//! API v1.14.2 core manager and its webhooks), with the real helm, kubectl and clusterctl:
//! - Helm: install, upgrade to changed values, uninstall that keeps the CRDs, pools, claims and IPAddresses, and
//!   install again;
//! - `kubectl apply -k config/default`;
//! - `clusterctl upgrade` from the Go provider's release v1.1.0 (its components built from its Go module's config/,
//!   the way its release builds them) to ours, through one local provider repository.
//!
//! No kubelet runs here, so no pod starts: the test plays the kubelet. It runs the manager out of cluster and points
//! the API server's webhook calls at it (tests/tools/dev-install.py, as `make run` does), taking them over from the
//! Services the install created. The claims, pools and IPAddresses are checked before and after every step: every
//! claim keeps its address, and no address is held twice.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};
use support::claims::{Capi, create_pool};
use support::manager::{Launch, Manager};
use support::release::{
    GoProvider, Release, clusterctl, clusterctl_init_from, go_provider_dir, helm, install_fixture_crds, ok,
    our_version, release_manifests, repository_of, scratch,
};
use support::{Plane, create_namespace, eventually, repo_root};
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

    // Upgrade to other values: two replicas (and their PodDisruptionBudget), debug logs, the alerts and the dashboard.
    // The pod keeps running; only the stand-in's rewiring of the API server is undone for Helm to see its own.
    restore_wiring(&plane, &wiring);
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

#[tokio::test]
async fn kubectl_apply_k_config_default_installs_a_provider_that_binds_claims() {
    let _one = ONE_AT_A_TIME.lock().await;
    let plane = private_plane("kustomize").await;
    let client = plane.client().await;
    let config = repo_root().join("config/default").to_string_lossy().into_owned();
    let applied = ok(plane.kubectl_output(&["apply", "-k", &config]), "kubectl apply -k config/default");
    assert!(applied.contains("deployment.apps/capi-ipam-in-cluster-controller-manager created"), "{applied}");
    // Applied again, nothing changes (kubectl says "configured" for the webhook configurations whatever happens, so
    // ask kubectl diff: exit 0 is no difference).
    ok(plane.kubectl_output(&["apply", "-k", &config]), "kubectl apply -k again");
    ok(plane.kubectl_output(&["diff", "-k", &config]), "kubectl diff -k after apply -k (a difference exits 1)");

    let deployment = kubectl_json(
        &plane,
        &["get", "deployment", "-n", PROVIDER_NAMESPACE, "capi-ipam-in-cluster-controller-manager"],
    )
    .expect("the Deployment");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], format!("ghcr.io/capi-ipam-in-cluster/manager:{}", our_version()));
    let args: Vec<String> =
        container["args"].as_array().expect("args").iter().map(|a| a.as_str().unwrap().to_owned()).collect();
    assert!(args.iter().all(|a| !a.contains("${")), "clusterctl variables left in config/default: {args:?}");

    // The pod's manager, with the Deployment's own flags (but the ports and log format, which the test picks) and its
    // namespace for the Lease, as the downward API gives it.
    let mut flags: Vec<String> = args
        .into_iter()
        .filter(|a| {
            !["--diagnostics-address", "--insecure-diagnostics", "--log-format"].iter().any(|f| a.starts_with(f))
        })
        .collect();
    flags.extend(["--insecure-diagnostics".to_owned(), format!("--leader-election-namespace={PROVIDER_NAMESPACE}")]);
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

/// A Lease held by someone else for an hour: a manager that leader-elects on it serves webhooks and never allocates.
async fn hold_the_lease(client: &Client, namespace: &str) {
    let now = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string();
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": LEASE, "namespace": namespace},
        "spec": {"holderIdentity": "go-provider", "leaseDurationSeconds": 3600, "acquireTime": now, "renewTime": now}
    }))
    .expect("Lease");
    Api::<Lease>::namespaced(client.clone(), namespace).create(&PostParams::default(), &lease).await.expect("Lease");
}

/// The version clusterctl's inventory records for the IPAM provider.
fn ipam_provider_version(plane: &Plane) -> String {
    plane.kubectl(&[
        "get",
        "providers.clusterctl.cluster.x-k8s.io",
        "-n",
        PROVIDER_NAMESPACE,
        "ipam-in-cluster",
        "-o",
        "jsonpath={.type} {.version}",
    ])
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
    /// The Go provider's process (its pod) and ours standing in for its webhooks, while they run.
    processes: Option<(GoProvider, Manager)>,
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

        // The Go provider at work. Its webhook server cannot listen on 127.0.0.1 only, so ours stands in for its
        // webhooks (the same paths), registered with the Go provider's own CRDs and webhook configurations,
        // leader-electing on a Lease held by someone else: it never allocates.
        let wiring = save_wiring(plane);
        let holder = create_namespace(client, "lease").await;
        hold_the_lease(client, &holder).await;
        let standing_in = Launch {
            crds: Some(go.join("config/crd/bases")),
            webhooks: Some(go.join("config/webhook/manifests.yaml")),
            ..Launch::default()
        };
        let webhooks = Manager::started(
            plane,
            standing_in,
            &["--insecure-diagnostics", "--leader-elect", &format!("--leader-election-namespace={holder}")],
        )
        .await;
        let (plane_dir, go_dir) = (plane.dir.clone(), go.clone());
        let go_provider =
            tokio::task::spawn_blocking(move || GoProvider::start(&Plane::at(&plane_dir), &go_dir)).await.expect("Go");
        let tenant = create_namespace(client, "tenant").await;
        let spec = json!({"addresses": ["10.82.0.10-10.82.0.30"], "prefix": 24, "gateway": "10.82.0.1"});
        create_pool(client, "InClusterIPPool", &tenant, "nodes", spec).await;
        let by_the_go_provider = claim_and_wait(client, &tenant, &["a", "b", "c"]).await;
        assert_eq!(by_the_go_provider.len(), 3);
        assert!(webhooks.log_tail(200).contains("waiting for leadership"), "the stand-in must not allocate");
        let addresses = CAPI.addresses(client, &tenant).list(&ListParams::default()).await.expect("IPAddresses");
        for a in &addresses.items {
            // Written by the Go provider: no conditions of ours on the claims yet, its finalizer on the IPAddresses.
            let finalizers = a.metadata.finalizers.clone().unwrap_or_default();
            assert!(finalizers.iter().any(|f| f == "ipam.cluster.x-k8s.io/ProtectAddress"), "{finalizers:?}");
        }
        GoInstall { dir, config, tenant, by_the_go_provider, wiring, processes: Some((go_provider, webhooks)) }
    }

    /// The API server sees the install's own webhook configurations and CRD conversions again (the stand-in's
    /// rewiring undone), as an installer reading them would.
    fn unwire(&self, plane: &Plane) {
        restore_wiring(plane, &self.wiring);
    }

    /// The Go provider's pod goes (its Deployment scaled to 0), and the stand-in for its webhooks with it.
    fn stop(&mut self) {
        self.processes = None;
    }
}

fn deployment(plane: &Plane) -> Value {
    kubectl_json(plane, &["get", "deployment", "-n", PROVIDER_NAMESPACE, "capi-ipam-in-cluster-controller-manager"])
        .expect("the Deployment")
}

/// Ours, where the new Deployment's pod would run: the Go provider's claims get our Ready condition and keep their
/// addresses, new ones get free ones.
async fn ours_keeps_and_binds(plane: &Plane, client: &Client, go: &GoInstall, step: &str) -> Manager {
    let manager = Manager::started(plane, Launch::default(), &["--insecure-diagnostics"]).await;
    let claims = CAPI.claims(client, &go.tenant);
    eventually(Duration::from_secs(30), "our Ready condition on the Go provider's claims", || async {
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
    manager
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

    let _manager = ours_keeps_and_binds(&plane, &client, &go, "clusterctl upgrade").await;
}

/// The shell blocks of the Helm steps of docs/migration.md, as written there.
fn migration_md_helm_blocks() -> Vec<String> {
    let doc = std::fs::read_to_string(repo_root().join("docs/migration.md")).expect("docs/migration.md");
    let helm = doc.split("**Helm**").nth(1).and_then(|s| s.split("**kustomize**").next()).expect("the Helm steps");
    helm.split("```sh").skip(1).filter_map(|b| b.split("```").next()).map(str::to_owned).collect()
}

/// Runs a shell block of the docs with the plane's kubectl and kubeconfig.
fn run_block(plane: &Plane, block: &str) {
    let path = format!("{}:{}", plane.bin_dir().display(), std::env::var("PATH").unwrap_or_default());
    let out = std::process::Command::new("bash")
        .args(["-euo", "pipefail", "-c", block])
        .env("PATH", path)
        .env("KUBECONFIG", plane.kubeconfig())
        .output()
        .expect("bash");
    ok(out, &format!("docs/migration.md:\n{block}"));
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
/// shell blocks run as they are: Helm takes the CRDs over, both providers' webhooks serve while both run, the Go
/// provider's go before its Deployment does (so no step leaves a webhook without a server), and ours then keeps every
/// claim's address and binds new ones.
#[tokio::test]
async fn the_helm_migration_from_the_go_provider_as_migration_md_writes_it_keeps_every_claim() {
    let _one = ONE_AT_A_TIME.lock().await;
    let plane = private_plane("helm-migration").await;
    let client = plane.client().await;
    let mut go = GoInstall::start(&plane, &client).await;
    go.unwire(&plane);
    let blocks = migration_md_helm_blocks();
    assert_eq!(blocks.len(), 2, "docs/migration.md's Helm steps have two shell blocks: {blocks:?}");
    let go_services = pool_webhook_services(&plane);
    assert!(!go_services.is_empty() && go_services.iter().all(|(_, s)| s == "capi-ipam-in-cluster-webhook-service"));

    // 1. Helm takes the CRDs over; 2. the chart installs over the running Go provider.
    run_block(&plane, &blocks[0]);
    let kubeconfig = plane.kubeconfig().to_string_lossy().into_owned();
    let installed = ok(
        helm(&["install", "capi-ipam", CHART, "--namespace", PROVIDER_NAMESPACE, "--kubeconfig", &kubeconfig]),
        "helm install over the Go provider",
    );
    assert!(installed.contains("STATUS: deployed"), "{installed}");
    let chart_service = "capi-ipam-capi-ipam-in-cluster-webhook";
    let both = pool_webhook_services(&plane);
    for service in ["capi-ipam-in-cluster-webhook-service", chart_service] {
        assert!(both.iter().any(|(_, s)| s == service), "while both run, {service}'s webhooks are called: {both:?}");
    }
    let crd = kubectl_json(&plane, &["get", "crd", "inclusterippools.ipam.cluster.x-k8s.io"]).expect("CRD");
    assert_eq!(crd["spec"]["conversion"]["webhook"]["clientConfig"]["service"]["name"], chart_service);

    // 3. The Go provider's webhook configurations go, then its Deployment: only the chart's webhooks are called.
    run_block(&plane, &blocks[1]);
    go.stop();
    let left = pool_webhook_services(&plane);
    assert!(!left.is_empty() && left.iter().all(|(_, s)| s == chart_service), "{left:?}");
    assert_eq!(deployment(&plane)["spec"]["replicas"], 0);

    // Ours, where the chart's pod would run.
    let _manager = ours_keeps_and_binds(&plane, &client, &go, "the Helm migration").await;
}

/// On Cluster API 1.6–1.10 clusterctl refuses our v1beta2-contract release, and docs/install.md says to install with
/// Helm there: the chart installs on a Cluster API v1.10.10 control plane, and the manager binds a claim through the
/// v1beta1 API.
#[tokio::test]
async fn the_chart_installs_on_cluster_api_1_10_and_binds_a_v1beta1_claim() {
    let _one = ONE_AT_A_TIME.lock().await;
    let plane =
        tokio::task::spawn_blocking(|| Plane::private_with("helm-v1beta1", &["--capi", "v1.10"])).await.expect("plane");
    let dir = plane.dir.clone();
    tokio::task::spawn_blocking(move || install_fixture_crds(&Plane::at(&dir))).await.expect("fixture CRDs");
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
