//! The real `clusterctl move` (v1.14.2) between two control planes, each running the Cluster API v1.14.2 core manager
//! with its webhooks and our manager, for both install paths of our provider: `clusterctl init --ipam in-cluster` from
//! a local repository, and our Helm chart. A Cluster (stand-in infrastructure and control-plane kinds, provisioned as
//! far as move's preconditions go) uses a namespaced pool, a global pool, claims that name it by label and by
//! spec.clusterName, and an exhausted pool with a waiting claim. It moves there and back again: every IPAddress
//! arrives with the same address, prefix and pool, nothing is allocated anew, nothing is left behind or leaked, and
//! the waiting claim still waits.

use std::collections::BTreeMap;
use std::time::Duration;

use kube::api::{DynamicObject, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use support::claims::{Capi, create_pool, wait_pool_counts};
use support::manager::Manager;
use support::release::{clusterctl_init, clusterctl_move, helm, install_fixture_crds, ok};
use support::{Plane, eventually, unique_name};

const CAPI: Capi = Capi::V1Beta2;
const NS: &str = "tenant";
const CHART: &str = "charts/capi-ipam-in-cluster";

#[derive(Clone, Copy, Debug, PartialEq)]
enum Install {
    ClusterctlInit,
    Helm,
}

/// A management cluster: a control plane (with CAPI's manager) and our manager, installed one way.
struct Side {
    plane: Plane,
    manager: Manager,
    client: Client,
}

impl Side {
    async fn new(name: &str, install: Install) -> Side {
        let plane = tokio::task::spawn_blocking({
            let name = name.to_owned();
            move || Plane::private(&name)
        })
        .await
        .expect("plane");
        let dir = plane.dir.clone();
        let manager = tokio::task::spawn_blocking(move || {
            let plane = Plane::at(&dir);
            install_provider(&plane, install);
            Manager::start(&plane, &["--insecure-diagnostics", "--orphan-release-delay=2"])
        })
        .await
        .expect("manager");
        let client = plane.client().await;
        Side { plane, manager, client }
    }

    /// Creates of IPAddresses in the tenant namespace that our manager made, from the API server's audit log.
    fn ipaddresses_we_created(&self) -> usize {
        self.plane.audited_writes("create", "ipaddresses", NS, "capi-ipam-in-cluster-manager/")
    }
}

impl Drop for Side {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- manager log of {} (last 80 lines) ---\n{}",
                self.plane.dir.display(),
                self.manager.log_tail(80)
            );
        }
    }
}

/// The providers as a user installs them: `clusterctl init` (the core provider and the kubeadm providers are
/// stand-ins, see support::release) with or without `--ipam in-cluster`, and for Helm our chart on top.
fn install_provider(plane: &Plane, install: Install) {
    install_fixture_crds(plane);
    clusterctl_init(plane, install == Install::ClusterctlInit);
    let kubeconfig = plane.kubeconfig().to_string_lossy().into_owned();
    if install == Install::Helm {
        ok(
            helm(&[
                "install",
                "ipam",
                CHART,
                "--namespace",
                "capi-ipam-in-cluster-system",
                "--create-namespace",
                "--kubeconfig",
                &kubeconfig,
            ]),
            "helm install",
        );
    }
    // What clusterctl move discovers: the label comes from our own manifests (Helm) or from clusterctl init.
    for crd in ["inclusterippools", "globalinclusterippools", "inclusterprefixpools", "globalinclusterprefixpools"] {
        let labels = plane.kubectl(&[
            "get",
            "crd",
            &format!("{crd}.ipam.cluster.x-k8s.io"),
            "-o",
            "jsonpath={.metadata.labels}",
        ]);
        assert!(
            labels.contains("\"clusterctl.cluster.x-k8s.io\""),
            "{install:?}: {crd} lacks the clusterctl label: {labels}"
        );
    }
}

/// What the stand-in infrastructure and control-plane providers would report once the workload cluster is up.
async fn provision(side: &Side) {
    let c = &side.client;
    for (group, kind, status) in [
        (
            "infrastructure.cluster.x-k8s.io",
            "DemoCluster",
            json!({"initialization": {"provisioned": true}, "ready": true}),
        ),
        (
            "controlplane.cluster.x-k8s.io",
            "DemoControlPlane",
            json!({"initialization": {"controlPlaneInitialized": true}, "ready": true, "initialized": true}),
        ),
    ] {
        let api: kube::Api<DynamicObject> =
            kube::Api::namespaced_with(c.clone(), NS, &support::resource(group, "v1alpha1", kind));
        api.patch_status("wl", &PatchParams::default(), &Patch::Merge(json!({"status": status})))
            .await
            .unwrap_or_else(|e| panic!("{kind} status: {e}"));
    }
    // CAPI's Cluster controller reads them: move's preconditions.
    let clusters = CAPI.clusters(c, NS);
    eventually(Duration::from_secs(60), "the Cluster provisioned and its control plane initialized", || async {
        let cluster = clusters.get("wl").await.ok()?;
        let provisioned =
            cluster.data.pointer("/status/initialization/infrastructureProvisioned") == Some(&json!(true));
        let initialized = cluster
            .data
            .pointer("/status/conditions")?
            .as_array()?
            .iter()
            .any(|c| c["type"] == "ControlPlaneInitialized" && c["status"] == "True");
        (provisioned && initialized).then_some(())
    })
    .await;
}

/// The global prefix pool that goes with the global IP pool `global_pool`.
fn prefix_pool(global_pool: &str) -> String {
    format!("{global_pool}-prefixes")
}

/// The Cluster, its pools and claims, on the source side.
async fn create_workload(side: &Side, global_pool: &str) {
    let stand_ins = format!(
        r#"apiVersion: v1
kind: Namespace
metadata: {{name: {NS}}}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: DemoCluster
metadata: {{name: wl, namespace: {NS}}}
spec: {{controlPlaneEndpoint: {{host: 192.0.2.10, port: 6443}}}}
---
apiVersion: controlplane.cluster.x-k8s.io/v1alpha1
kind: DemoControlPlane
metadata: {{name: wl, namespace: {NS}}}
spec: {{version: v1.36.3}}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {{name: wl, namespace: {NS}}}
spec:
  controlPlaneRef: {{apiGroup: controlplane.cluster.x-k8s.io, kind: DemoControlPlane, name: wl}}
  infrastructureRef: {{apiGroup: infrastructure.cluster.x-k8s.io, kind: DemoCluster, name: wl}}
"#
    );
    ok(side.plane.kubectl_stdin(&["apply", "-f", "-"], &stand_ins), "the Cluster and its stand-ins");
    provision(side).await;
    let c = &side.client;
    create_pool(
        c,
        "InClusterIPPool",
        NS,
        "nodes",
        json!({"addresses": ["10.10.0.1-10.10.0.20"], "prefix": 24, "gateway": "10.10.0.254"}),
    )
    .await;
    create_pool(
        c,
        "GlobalInClusterIPPool",
        NS,
        global_pool,
        json!({"addresses": ["10.20.0.1-10.20.0.20"], "prefix": 24}),
    )
    .await;
    create_pool(c, "InClusterIPPool", NS, "tiny", json!({"addresses": ["10.30.0.1"], "prefix": 24})).await;
    let prefixes = json!({"prefixes": ["fd00:20::/60"], "allocationPrefixLength": 64});
    create_pool(c, "GlobalInClusterPrefixPool", NS, &prefix_pool(global_pool), prefixes).await;
    create_pool(
        c,
        "InClusterPrefixPool",
        NS,
        "pods",
        json!({"prefixes": ["fd00:10::/48"], "allocationPrefixLength": 64}),
    )
    .await;
    let cluster = CAPI.clusters(c, NS).get("wl").await.expect("Cluster");
    // Claims are owned by the objects that make them (CAPV's VSphereVM, CAPM3's Metal3Data); here, the Cluster.
    let owner =
        json!([{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster", "name": "wl", "uid": cluster.uid()}]);
    let claims = CAPI.claims(c, NS);
    let claim = |name: &str, kind: &str, pool: &str, by_label: bool| {
        let mut claim = CAPI.claim(name, kind, pool);
        claim.metadata.owner_references = serde_json::from_value(owner.clone()).ok();
        if by_label {
            claim.metadata.labels = Some([("cluster.x-k8s.io/cluster-name".to_owned(), "wl".to_owned())].into());
        } else {
            claim.data["spec"]["clusterName"] = json!("wl");
        }
        claim
    };
    let mut all = Vec::new();
    for i in 0..3 {
        all.push(claim(&format!("node-{i}"), "InClusterIPPool", "nodes", true));
        all.push(claim(&format!("vip-{i}"), "GlobalInClusterIPPool", global_pool, false));
    }
    all.push(claim("pod-cidr", "InClusterPrefixPool", "pods", false));
    all.push(claim("lb-prefix", "GlobalInClusterPrefixPool", &prefix_pool(global_pool), false));
    all.push(claim("tiny-0", "InClusterIPPool", "tiny", true));
    for claim in &all {
        claims.create(&Default::default(), claim).await.unwrap_or_else(|e| panic!("{}: {e}", claim.name_any()));
    }
    for claim in &all {
        CAPI.wait_bound(c, NS, &claim.name_any()).await;
    }
    claims.create(&Default::default(), &claim("tiny-1", "InClusterIPPool", "tiny", false)).await.expect("tiny-1");
    CAPI.wait_reason(c, NS, "tiny-1", "PoolExhausted").await;
}

/// Claim name → (address, prefix, pool kind, pool name) of every IPAddress in the tenant namespace.
async fn addresses(c: &Client) -> BTreeMap<String, (String, i64, String, String)> {
    let list = CAPI.addresses(c, NS).list(&ListParams::default()).await.expect("IPAddresses");
    list.items
        .iter()
        .map(|a| {
            let s = &a.data["spec"];
            let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
            (
                text(&s["claimRef"]["name"]),
                (
                    text(&s["address"]),
                    s["prefix"].as_i64().unwrap_or(-1),
                    text(&s["poolRef"]["kind"]),
                    text(&s["poolRef"]["name"]),
                ),
            )
        })
        .collect()
}

fn move_between(from: &Side, to: &Side) {
    clusterctl_move(&from.plane, &to.plane, NS);
}

/// After a move to `to`: the same addresses, bound, the waiting claim still waiting, the pools counting them, and the
/// source side empty.
async fn assert_arrived(
    from: &Side,
    to: &Side,
    global_pool: &str,
    before: &BTreeMap<String, (String, i64, String, String)>,
) {
    let c = &to.client;
    // clusterctl unpauses the Cluster last; then our manager adopts what arrived.
    let got = eventually(Duration::from_secs(60), "every IPAddress on the target", || async {
        let got = addresses(c).await;
        (got.len() == before.len()).then_some(got)
    })
    .await;
    assert_eq!(&got, before, "the IPAddresses arrive unchanged");
    for claim in before.keys() {
        let ready = CAPI.wait_reason(c, NS, claim, "Allocated").await;
        assert_eq!(ready["status"], "True", "{claim}");
        let bound = CAPI.claims(c, NS).get(claim).await.expect("claim");
        assert_eq!(bound.data["status"]["addressRef"]["name"], claim.as_str());
    }
    CAPI.wait_reason(c, NS, "tiny-1", "PoolExhausted").await;
    wait_pool_counts(c, "InClusterIPPool", NS, "nodes", (20, 3, 17, 0)).await;
    wait_pool_counts(c, "InClusterIPPool", NS, "tiny", (1, 1, 0, 0)).await;
    wait_pool_counts(c, "GlobalInClusterIPPool", NS, global_pool, (20, 3, 17, 0)).await;
    wait_pool_counts(c, "GlobalInClusterPrefixPool", NS, &prefix_pool(global_pool), (16, 1, 15, 0)).await;
    assert!(CAPI.addresses(c, NS).get_opt("tiny-1").await.expect("get").is_none(), "the waiting claim got nothing");
    let unpaused = CAPI.clusters(c, NS).get("wl").await.expect("Cluster");
    assert_ne!(unpaused.data["spec"]["paused"], true, "clusterctl unpaused the Cluster on the target");

    // Nothing is left on the source but the global pool (clusterctl copies cluster-scoped objects).
    let source = &from.client;
    support::claims::wait_no_claims_or_addresses(CAPI, source, NS).await;
    let pools =
        support::claims::pools(source, "InClusterIPPool", NS).list(&ListParams::default()).await.expect("pools");
    assert!(pools.items.is_empty(), "namespaced pools moved: {:?}", support::claims::names(&pools.items));
    let global =
        support::claims::pools(source, "GlobalInClusterIPPool", NS).get(global_pool).await.expect("global pool");
    assert!(global.metadata.deletion_timestamp.is_none());
    assert_reserved(from, global_pool, before).await;
}

/// The addresses of the global pool that moved away stay reserved on the source: written into the pool's annotation,
/// counted as used, and a new claim there gets another address.
async fn assert_reserved(source: &Side, global_pool: &str, moved: &BTreeMap<String, (String, i64, String, String)>) {
    let c = &source.client;
    let global: Vec<(&String, &String)> = moved
        .iter()
        .filter(|(_, (_, _, kind, _))| kind == "GlobalInClusterIPPool")
        .map(|(name, (address, ..))| (name, address))
        .collect();
    let addresses: Vec<String> = global.iter().map(|(_, address)| (*address).clone()).collect();
    // Each entry names the IPAddress that moved away with the address: only that one may hold it here again.
    let mut expected: Vec<String> = global.iter().map(|(name, address)| format!("{address}@{NS}/{name}")).collect();
    expected.sort();
    assert_eq!(expected.len(), 3);
    // A claim made on the source after the move gets none of them.
    let probe = support::create_namespace(c, "probe").await;
    CAPI.create_claim(c, &probe, "probe", "GlobalInClusterIPPool", global_pool).await;
    let got = support::claims::address_of(&CAPI.wait_bound(c, &probe, "probe").await);
    assert!(!addresses.contains(&got), "{got} moved away with its Cluster ({addresses:?}) but was handed out again");
    let pools = support::claims::pools(c, "GlobalInClusterIPPool", NS);
    eventually(Duration::from_secs(30), "the moved-away annotation on the source", || async {
        let pool = pools.get(global_pool).await.ok()?;
        let value = pool.annotations().get("ipam.cluster.x-k8s.io/moved-away")?.clone();
        let mut entries: Vec<String> = value.split(',').map(str::to_owned).collect();
        entries.sort();
        (entries == expected).then_some(())
    })
    .await;
    wait_pool_counts(c, "GlobalInClusterIPPool", NS, global_pool, (20, 4, 16, 0)).await;
    let pool = pools.get(global_pool).await.expect("pool");
    let ready = pool.data["status"]["conditions"][0]["message"].as_str().unwrap_or_default().to_owned();
    assert!(ready.contains("3 address(es) reserved"), "{ready}");
    CAPI.delete_claim(c, &probe, "probe").await;
    wait_pool_counts(c, "GlobalInClusterIPPool", NS, global_pool, (20, 3, 17, 0)).await;
    // The global prefix pool keeps its moved child prefix the same way, as `base/length@namespace/name`.
    let (address, prefix, ..) = &moved["lb-prefix"];
    let entry = format!("{address}/{prefix}@{NS}/lb-prefix");
    let prefix_pools = support::claims::pools(c, "GlobalInClusterPrefixPool", NS);
    eventually(Duration::from_secs(30), "the moved-away annotation of the prefix pool", || async {
        let pool = prefix_pools.get(&prefix_pool(global_pool)).await.ok()?;
        (pool.annotations().get("ipam.cluster.x-k8s.io/moved-away") == Some(&entry)).then_some(())
    })
    .await;
    wait_pool_counts(c, "GlobalInClusterPrefixPool", NS, &prefix_pool(global_pool), (16, 1, 15, 0)).await;
}

async fn move_there_and_back(install: Install) {
    let a = Side::new(&format!("move-a-{install:?}").to_lowercase(), install).await;
    let b = Side::new(&format!("move-b-{install:?}").to_lowercase(), install).await;
    let global_pool = unique_name("shared");
    create_workload(&a, &global_pool).await;
    let before = addresses(&a.client).await;
    assert_eq!(before.len(), 9, "{before:?}");
    let created_on_a = a.ipaddresses_we_created();
    assert_eq!(created_on_a, 9, "our manager made each IPAddress once");

    tokio::task::block_in_place(|| move_between(&a, &b));
    assert_arrived(&a, &b, &global_pool, &before).await;
    assert_eq!(b.ipaddresses_we_created(), 0, "nothing is allocated anew on the target");

    // The reservations outlive the source's manager: SIGKILLed and started again, it reads them from the pool.
    let mut a = a;
    tokio::task::block_in_place(|| {
        a.manager.kill();
        a.manager.spawn();
        a.manager.wait_ready(&a.plane);
    });
    assert_reserved(&a, &global_pool, &before).await;

    // The infrastructure provider reports the workload cluster on its new management cluster too; then back.
    provision(&b).await;
    tokio::task::block_in_place(|| move_between(&b, &a));
    assert_arrived(&b, &a, &global_pool, &before).await;
    // Back home, the addresses are held by their IPAddresses again: no reservation is left on this side.
    for (kind, name) in
        [("GlobalInClusterIPPool", global_pool.clone()), ("GlobalInClusterPrefixPool", prefix_pool(&global_pool))]
    {
        let pools = support::claims::pools(&a.client, kind, NS);
        eventually(Duration::from_secs(30), "the reservations on the way back ended", || async {
            let pool = pools.get(&name).await.ok()?;
            (!pool.annotations().contains_key("ipam.cluster.x-k8s.io/moved-away")).then_some(())
        })
        .await;
    }
    assert_eq!(a.ipaddresses_we_created(), created_on_a, "nothing is allocated anew on the way back");
    assert_eq!(b.ipaddresses_we_created(), 0);
    for side in [&a, &b] {
        assert!(side.manager.is_running(), "{}", side.manager.log_tail(40));
        let log = std::fs::read_to_string(&side.manager.log).unwrap_or_default();
        assert!(!log.contains("DUPLICATE ADDRESS"), "{}", side.manager.log_tail(60));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clusterctl_init_install_moves_there_and_back_keeping_every_address() {
    move_there_and_back(Install::ClusterctlInit).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_helm_install_moves_there_and_back_keeping_every_address() {
    move_there_and_back(Install::Helm).await;
}
