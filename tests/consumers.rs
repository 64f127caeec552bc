//! The real consumers of our pools claim from them, beside the real Cluster API v1.14.2 core manager and its webhooks:
//! the Metal3 provider (CAPM3 v1.13.2, its data controllers rendering a host's network data) and the vSphere
//! provider (CAPV v1.16.1 against a vCenter simulator). Each test follows a machine's life as the consumer drives
//! it: the claims it makes are bound, the address reaches the machine, a machine beyond the pool's free addresses
//! waits and gets the address a deleted machine freed, a paused Cluster holds everything, and `clusterctl move`
//! carries a Cluster whose claims the consumer owns to another management cluster without a new allocation.

use std::collections::BTreeMap;
use std::time::Duration;

use kube::Client;
use kube::api::ListParams;
use serde_json::Value;
use support::claims::{Capi, address_of, wait_pool_counts};
use support::consumers::{Consumer, Vcsim};
use support::manager::Manager;
use support::release::{clusterctl_move, ok};
use support::{Plane, eventually, eventually_every};

const CAPI: Capi = Capi::V1Beta2;
const OUR_AGENT: &str = "capi-ipam-in-cluster-manager/";

/// A management cluster with one consumer: a private control plane (with CAPI's manager), the consumer and our
/// manager. Fields drop in order: the controllers stop before the plane goes.
struct Site {
    consumer: Consumer,
    manager: Manager,
    client: Client,
    plane: Plane,
}

impl Site {
    /// A private plane started with `options`, the consumer `start` makes on it, and our manager.
    async fn start<F>(name: &str, options: &'static [&'static str], start: F) -> Site
    where
        F: FnOnce(&Plane) -> Consumer + Send + 'static,
    {
        let name = name.to_owned();
        let (plane, consumer, manager) = tokio::task::spawn_blocking(move || {
            let plane = Plane::private_with(&name, options);
            let consumer = start(&plane);
            let manager = Manager::start(&plane, &["--insecure-diagnostics", "--orphan-release-delay=2"]);
            (plane, consumer, manager)
        })
        .await
        .expect("a management cluster with a consumer");
        let client = plane.client().await;
        Site { consumer, manager, client, plane }
    }

    /// Both kinds of site run kube-controller-manager's garbage collector, as every real management cluster does:
    /// CAPV leaves its claims to it, and clusterctl move deletes owners whose dependents it then collects.
    async fn metal3(name: &str) -> Site {
        Site::start(name, &["--garbage-collector"], Consumer::metal3).await
    }

    async fn vsphere(name: &str, vcsim: &Vcsim) -> Site {
        let credentials = vcsim.credentials();
        Site::start(name, &["--garbage-collector"], move |plane| Consumer::vsphere(plane, credentials)).await
    }

    fn apply(&self, namespace: Option<&str>, yaml: &str) {
        let mut args = vec!["apply", "-f", "-"];
        if let Some(ns) = namespace {
            args.extend(["-n", ns]);
        }
        ok(self.plane.kubectl_stdin(&args, yaml), "kubectl apply");
    }

    /// `kubectl get <what> -o jsonpath=<path>` in `namespace`; empty when the object is missing.
    fn get(&self, namespace: &str, what: &str, path: &str) -> String {
        let out = self.plane.kubectl_output(&["get", "-n", namespace, what, "-o", &format!("jsonpath={path}")]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits until the value at `path` is set (a consumer-driven chain: up to 90 s), and returns it.
    async fn wait_get(&self, namespace: &str, what: &str, path: &str, describe: &str) -> String {
        eventually_every(Duration::from_secs(90), Duration::from_millis(300), describe, || async {
            Some(self.get(namespace, what, path)).filter(|v| !v.is_empty())
        })
        .await
    }

    /// Waits until the value at `path` is `expected`.
    async fn wait_value(&self, namespace: &str, what: &str, path: &str, expected: &str) {
        let describe = format!("{what} {path} = {expected}");
        eventually_every(Duration::from_secs(90), Duration::from_millis(300), &describe, || async {
            (self.get(namespace, what, path) == expected).then_some(())
        })
        .await
    }

    /// Our manager's WARN and ERROR lines: on a plane of its own, serving the consumer alone, it has nothing to
    /// warn about (a pool that runs out is reported on the claim, not in the log).
    fn our_complaints(&self) -> Vec<String> {
        let log = std::fs::read_to_string(&self.manager.log).unwrap_or_default();
        log.lines().filter(|l| l.contains(" WARN ") || l.contains(" ERROR ")).map(str::to_owned).collect()
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- our manager's log in {} ---\n{}", self.plane.dir.display(), self.manager.log_tail(60));
        }
    }
}

/// Claim name → (address, prefix, gateway, pool name).
type Held = BTreeMap<String, (String, i64, String, String)>;

/// Every IPAddress in `namespace`.
async fn addresses(c: &Client, namespace: &str) -> Held {
    let list = CAPI.addresses(c, namespace).list(&ListParams::default()).await.expect("IPAddresses");
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    list.items
        .iter()
        .map(|a| {
            let s = &a.data["spec"];
            let value = (
                text(&s["address"]),
                s["prefix"].as_i64().unwrap_or(-1),
                text(&s["gateway"]),
                text(&s["poolRef"]["name"]),
            );
            (text(&s["claimRef"]["name"]), value)
        })
        .collect()
}

/// No address is held twice within a pool.
fn assert_no_duplicates(held: &Held) {
    let mut seen = BTreeMap::new();
    for (claim, (address, _, _, pool)) in held {
        if let Some(other) = seen.insert((pool.clone(), address.clone()), claim.clone()) {
            panic!("{address} of pool {pool} is held by both {other} and {claim}");
        }
    }
}

/// Runs two tests as tasks of their own (they block their thread on kubectl and clusterctl); the first failure
/// stops the other and fails the test.
async fn side_by_side<A, B>(a: A, b: B)
where
    A: std::future::Future<Output = ()> + Send + 'static,
    B: std::future::Future<Output = ()> + Send + 'static,
{
    let (mut a, mut b) = (tokio::spawn(a), tokio::spawn(b));
    let (first, other) = tokio::select! {
        result = &mut a => (result, b),
        result = &mut b => (result, a),
    };
    if let Err(e) = first {
        other.abort();
        std::panic::resume_unwind(e.into_panic());
    }
    if let Err(e) = other.await {
        std::panic::resume_unwind(e.into_panic());
    }
}

/// The namespace, the bootstrap data every Machine uses (`spec.bootstrap.dataSecretName: bootstrap`: no bootstrap
/// provider), a Cluster `cluster` whose infrastructure is the `kind` object of the same name with `spec` (a YAML flow
/// mapping), and the workload cluster's kubeconfig.
fn create_cluster_objects(site: &Site, namespace: &str, cluster: &str, kind: &str, spec: &str) {
    site.apply(
        None,
        &format!(
            r##"apiVersion: v1
kind: Namespace
metadata: {{name: {namespace}}}
---
apiVersion: v1
kind: Secret
metadata: {{name: bootstrap, namespace: {namespace}, labels: {{cluster.x-k8s.io/cluster-name: {cluster}}}}}
type: cluster.x-k8s.io/secret
stringData: {{format: cloud-config, value: "#cloud-config\n"}}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: {kind}
metadata: {{name: {cluster}, namespace: {namespace}}}
spec: {spec}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {{name: {cluster}, namespace: {namespace}}}
spec:
  infrastructureRef: {{apiGroup: infrastructure.cluster.x-k8s.io, kind: {kind}, name: {cluster}}}
"##
        ),
    );
    site.apply(None, &workload_kubeconfig(site, namespace, cluster));
}

/// The Secret holding the workload cluster's kubeconfig: the plane itself, where a test makes the Nodes of
/// provisioned machines (CAPI sets a Machine's nodeRef from the Node with its providerID; `clusterctl move` wants
/// every Machine to have one).
fn workload_kubeconfig(site: &Site, namespace: &str, cluster: &str) -> String {
    let kubeconfig = std::fs::read_to_string(site.plane.kubeconfig()).expect("kubeconfig");
    let kubeconfig = serde_json::to_string(&kubeconfig).expect("JSON");
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {cluster}-kubeconfig, namespace: {namespace}, labels: \
         {{cluster.x-k8s.io/cluster-name: {cluster}}}}}\ntype: cluster.x-k8s.io/secret\nstringData: {{value: {kubeconfig}}}\n"
    )
}

/// The Node a machine with `provider_id` would register, then CAPI's nodeRef on Machine `machine`.
async fn add_node(site: &Site, namespace: &str, machine: &str, provider_id: &str) {
    site.apply(
        None,
        &format!(
            "apiVersion: v1\nkind: Node\nmetadata: {{name: {machine}}}\nspec: {{providerID: \"{provider_id}\"}}\n"
        ),
    );
    let what = format!("machine/{machine}");
    site.wait_get(namespace, &what, "{.status.nodeRef.name}", &format!("{machine}'s nodeRef")).await;
}

fn delete_machine(site: &Site, namespace: &str, machine: &str) {
    ok(site.plane.kubectl_output(&["delete", "-n", namespace, "machine", machine, "--wait=false"]), "delete");
}

fn set_paused(site: &Site, namespace: &str, cluster: &str, paused: bool) {
    let patch = format!(r#"{{"spec":{{"paused":{paused}}}}}"#);
    ok(
        site.plane.kubectl_output(&["patch", "-n", namespace, "cluster", cluster, "--type=merge", "-p", &patch]),
        "pause",
    );
}

/// Waits until `claims` and their IPAddresses are gone (a claim left Terminating with our finalizer is a leak).
async fn wait_released(site: &Site, namespace: &str, claims: &[String]) {
    let addresses = CAPI.addresses(&site.client, namespace);
    let claims_api = CAPI.claims(&site.client, namespace);
    eventually(Duration::from_secs(120), &format!("{claims:?} and their IPAddresses gone"), || async {
        for claim in claims {
            if addresses.get_opt(claim).await.ok()?.is_some() || claims_api.get_opt(claim).await.ok()?.is_some() {
                return None;
            }
        }
        Some(())
    })
    .await;
}

/// By the audit log: our manager deleted the IPAddress `released` before it created `taken`, which holds the same
/// address (an address is handed out again only once it is free).
fn assert_freed_before_taken(site: &Site, namespace: &str, released: &str, taken: &str) {
    let time = |verb: &str, name: &str| {
        site.plane
            .audited(verb, "ipaddresses", namespace, OUR_AGENT)
            .into_iter()
            .filter(|e| e["objectRef"]["name"] == name)
            .filter_map(|e| e["stageTimestamp"].as_str().map(str::to_owned))
            .max()
            .unwrap_or_else(|| panic!("our {verb} of IPAddress {name} in the audit log"))
    };
    let (deleted, created) = (time("delete", released), time("create", taken));
    assert!(deleted < created, "{taken} was created ({created}) before {released} was deleted ({deleted})");
}

/// Pauses the Cluster and deletes `machine`: CAPI and the consumer hold it, so the test also deletes its claim
/// `claim` by hand, as a consumer that ignored the pause would. We hold that claim: its IPAddress stays, with our
/// finalizer on the claim, and our manager writes no IPAddress at all. Then unpauses the Cluster.
async fn delete_while_paused(site: &Site, namespace: &str, cluster: &str, machine: &str, claim: &str) {
    set_paused(site, namespace, cluster, true);
    let paused = r#"{.status.conditions[?(@.type=="Paused")].status}"#;
    site.wait_value(namespace, &format!("machine/{machine}"), paused, "True").await;
    // CAPI saw the pause; our manager, which judges it from its own cache, too.
    CAPI.wait_pause_seen(&site.client, namespace, cluster).await;
    let before = addresses(&site.client, namespace).await;
    let writes = || site.plane.audited_writes("*", "ipaddresses", namespace, OUR_AGENT);
    let written = writes();
    delete_machine(site, namespace, machine);
    ok(
        site.plane.kubectl_output(&[
            "delete",
            "-n",
            namespace,
            "ipaddressclaims.ipam.cluster.x-k8s.io",
            claim,
            "--wait=false",
        ]),
        "delete",
    );
    // Longer than our manager's orphan-release delay (2 s), which would otherwise have let the address go.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(addresses(&site.client, namespace).await, before, "nothing is released while the Cluster is paused");
    assert_eq!(writes(), written, "no IPAddress written while paused");
    let held = CAPI.claims(&site.client, namespace).get(claim).await.expect("the claim deleted while paused");
    assert!(held.metadata.deletion_timestamp.is_some(), "{claim} is being deleted");
    let finalizers = held.metadata.finalizers.unwrap_or_default();
    assert!(finalizers.contains(&"ipam.cluster.x-k8s.io/ReleaseAddress".to_owned()), "{finalizers:?}");
    set_paused(site, namespace, cluster, false);
}

/// After `clusterctl move` from `a` to `b`: every IPAddress arrives unchanged and bound, nothing is allocated anew
/// on either side, the consumer on the target creates no claim, the source is emptied, and the global pool
/// `global_pool` keeps the moved addresses reserved on the source, naming each IPAddress that took one away.
async fn assert_moved(a: &Site, b: &Site, namespace: &str, before: &Held, global_pool: &str, consumer_agent: &str) {
    let c = &b.client;
    let got = eventually(Duration::from_secs(60), "every IPAddress on the target", || async {
        let got = addresses(c, namespace).await;
        (got.len() == before.len()).then_some(got)
    })
    .await;
    assert_eq!(&got, before, "the IPAddresses arrive unchanged");
    assert_no_duplicates(&got);
    for claim in before.keys() {
        let ready = eventually(Duration::from_secs(90), &format!("{claim} Allocated on the target"), || async {
            CAPI.ready(c, namespace, claim).await.filter(|r| r["reason"] == "Allocated")
        })
        .await;
        assert_eq!(ready["status"], "True", "{claim}");
    }
    assert_eq!(b.plane.audited_writes("create", "ipaddresses", namespace, OUR_AGENT), 0, "nothing allocated anew");
    assert_eq!(b.plane.audited_writes("create", "ipaddressclaims", namespace, consumer_agent), 0, "no new claim");
    let source = &a.client;
    support::claims::wait_no_claims_or_addresses(CAPI, source, namespace).await;
    let mut expected: Vec<String> = before
        .iter()
        .filter(|(_, (_, _, _, pool))| pool == global_pool)
        .map(|(claim, (address, ..))| format!("{address}@{namespace}/{claim}"))
        .collect();
    expected.sort();
    let pools = support::claims::pools(source, "GlobalInClusterIPPool", namespace);
    eventually(Duration::from_secs(30), "the moved-away annotation on the source", || async {
        let pool = pools.get(global_pool).await.ok()?;
        let value = pool.metadata.annotations.as_ref()?.get("ipam.cluster.x-k8s.io/moved-away")?.clone();
        let mut entries: Vec<String> = value.split(',').map(str::to_owned).collect();
        entries.sort();
        (entries == expected).then_some(())
    })
    .await;
    let moved = expected.len() as i64;
    let total = support::claims::pools(source, "GlobalInClusterIPPool", namespace)
        .get(global_pool)
        .await
        .ok()
        .and_then(|p| p.data.pointer("/status/ipAddresses/total")?.as_i64())
        .expect("the global pool's total");
    wait_pool_counts(source, "GlobalInClusterIPPool", namespace, global_pool, (total, moved, total - moved, 0)).await;
}

/// The end of a move, once the consumer on the target has reconciled: still the same addresses, nothing written by
/// us on the target, and the moved claims are ours to release there: deleting `machine` on the target releases
/// its `claims` (deleted by us, by the audit log) and leaves every other address as it was.
async fn assert_released_on_the_target(b: &Site, namespace: &str, before: &Held, machine: &str, claims: &[String]) {
    assert_eq!(&addresses(&b.client, namespace).await, before, "the addresses stay as they arrived");
    assert_eq!(b.plane.audited_writes("create", "ipaddresses", namespace, OUR_AGENT), 0, "nothing allocated anew");
    assert_eq!(b.plane.audited_writes("delete", "ipaddresses", namespace, OUR_AGENT), 0, "nothing released");
    delete_machine(b, namespace, machine);
    wait_released(b, namespace, claims).await;
    assert_eq!(b.plane.audited_writes("delete", "ipaddresses", namespace, OUR_AGENT), claims.len());
    assert_eq!(b.plane.audited_writes("create", "ipaddresses", namespace, OUR_AGENT), 0);
    let left = addresses(&b.client, namespace).await;
    let expected: Held =
        before.iter().filter(|(c, _)| !claims.contains(c)).map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(left, expected);
    assert_eq!(b.our_complaints(), Vec::<String>::new());
    assert!(b.consumer.is_running(), "{}", b.consumer.log_tail(40));
}

mod metal3 {
    //! CAPM3: a Metal3DataTemplate (examples/consumers/metal3datatemplate.yaml) whose network data takes an IPv4 address from an
    //! InClusterIPPool and an IPv6 one from a GlobalInClusterIPPool. The chain Cluster → Metal3Cluster → Machine →
    //! Metal3Machine → BareMetalHost → Metal3DataClaim → Metal3Data runs without Ironic or the bare-metal operator:
    //! the test sets a host's status as the operator would.

    use super::*;

    const NS: &str = "metal3";
    const V4_POOL: &str = "metal3-provisioning";
    const V6_POOL: &str = "metal3-v6";
    const CAPM3_AGENT: &str = "cluster-api-provider-metal3-manager";

    fn example() -> String {
        std::fs::read_to_string(support::repo_root().join("examples/consumers/metal3datatemplate.yaml"))
            .expect("the example")
    }

    /// The Cluster with its Metal3Cluster (the workload cluster is this plane itself, where the test makes a Node
    /// for each provisioned machine), and the example's pools and template.
    fn create_cluster(site: &Site) {
        let spec = "{controlPlaneEndpoint: {host: 192.0.2.20, port: 6443}}";
        create_cluster_objects(site, NS, "metal3", "Metal3Cluster", spec);
        site.apply(Some(NS), &example());
    }

    fn mac(i: usize) -> String {
        format!("00:00:5e:00:53:{i:02x}")
    }

    /// A BareMetalHost `host-<i>` ready to be provisioned, then a Machine `m-<i>` with its Metal3Machine, which
    /// selects that host (CAPM3 picks among free hosts at random). The first machine is the control plane's.
    fn add_machine(site: &Site, i: usize) {
        site.apply(
            Some(NS),
            &format!(
                "apiVersion: metal3.io/v1alpha1\nkind: BareMetalHost\nmetadata: {{name: host-{i}, labels: {{host: host-{i}}}}}\n\
                 spec: {{online: true, bootMACAddress: \"{}\"}}\n",
                mac(i)
            ),
        );
        // Available before CAPM3 looks: it maps a host's events only to the machine that already holds it.
        set_host_state(site, i, "available");
        let role = if i == 0 { "cluster.x-k8s.io/control-plane: \"\"" } else { "role: worker" };
        site.apply(
            Some(NS),
            &format!(
                r#"apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: Metal3Machine
metadata: {{name: m-{i}}}
spec:
  image: {{url: "http://192.0.2.1/image.qcow2", checksum: "http://192.0.2.1/image.qcow2.sha256sum", checksumType: sha256, diskFormat: qcow2}}
  dataTemplate: {{name: workers}}
  hostSelector: {{matchLabels: {{host: host-{i}}}}}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Machine
metadata:
  name: m-{i}
  labels: {{{role}}}
spec:
  clusterName: metal3
  bootstrap: {{dataSecretName: bootstrap}}
  infrastructureRef: {{apiGroup: infrastructure.cluster.x-k8s.io, kind: Metal3Machine, name: m-{i}}}
"#
            ),
        );
    }

    /// What the bare-metal operator would report: the host is inspected and `state`.
    fn set_host_state(site: &Site, i: usize, state: &str) {
        let status = serde_json::json!({"status": {
            "provisioning": {"state": state, "ID": ""},
            "operationalStatus": "OK", "errorMessage": "", "hardwareProfile": "unknown", "errorCount": 0,
            "poweredOn": state == "provisioned",
            "hardware": {"nics": [{"name": "enp1s0", "mac": mac(i), "ip": "", "speedGbps": 1}]},
        }});
        ok(
            site.plane.kubectl_output(&[
                "patch",
                "-n",
                NS,
                "baremetalhost",
                &format!("host-{i}"),
                "--subresource=status",
                "--type=merge",
                "-p",
                &status.to_string(),
            ]),
            "the BareMetalHost's status",
        );
    }

    /// The Metal3Data CAPM3 rendered for machine `m-<i>`; its claims are `<data>-<pool>`.
    async fn data_of(site: &Site, i: usize) -> String {
        let what = format!("metal3machine/m-{i}");
        site.wait_get(NS, &what, "{.status.renderedData.name}", &format!("the Metal3Data of m-{i}")).await
    }

    /// The network data CAPM3 rendered for machine `m-<i>`, once it names `address`.
    async fn wait_network_data(site: &Site, i: usize, address: &str) -> String {
        let secret = format!("secret/m-{i}-networkdata");
        let template = r#"go-template={{index .data "networkData" | base64decode}}"#;
        let what = format!("{address} in the network data of m-{i}");
        eventually_every(Duration::from_secs(60), Duration::from_millis(300), &what, || async {
            let out = site.plane.kubectl_output(&["get", "-n", NS, &secret, "-o", template]);
            let text = String::from_utf8(out.stdout).ok()?;
            text.contains(&format!("ip_address: {address}\n")).then_some(text)
        })
        .await
    }

    /// Waits until both claims of machine `m-<i>` are bound and its network data holds both addresses, with the
    /// first subnet's netmask and gateway; returns (IPv4, IPv6).
    async fn wait_machine_addresses(site: &Site, i: usize) -> (String, String) {
        wait_machine_addresses_in(site, i, ("255.255.255.0", "10.40.0.1")).await
    }

    /// [`wait_machine_addresses`], for an IPv4 address of the subnet of `(netmask, gateway)`.
    async fn wait_machine_addresses_in(site: &Site, i: usize, subnet: (&str, &str)) -> (String, String) {
        let data = data_of(site, i).await;
        let c = &site.client;
        let within = Duration::from_secs(90);
        let v4 = address_of(&CAPI.wait_bound_within(c, NS, &format!("{data}-{V4_POOL}"), within).await);
        let v6 = address_of(&CAPI.wait_bound_within(c, NS, &format!("{data}-{V6_POOL}"), within).await);
        let network = wait_network_data(site, i, &v4).await;
        assert!(network.contains(&format!("ip_address: {v6}\n")), "{network}");
        // The prefix and gateway of the address's subnet reach the host too.
        let (netmask, gateway) = subnet;
        assert!(
            network.contains(&format!("netmask: {netmask}\n")) && network.contains(&format!("gateway: {gateway}\n")),
            "{network}"
        );
        assert!(network.contains("netmask: 'ffff:ffff:ffff:ffff::'"), "{network}");
        (v4, v6)
    }

    /// What CAPM3's claims look like, as our hand-made ones in tests/claims.rs do not: named `<data>-<pool>`, owned
    /// by the Metal3Data as controller, labelled with the Cluster's name (CAPM3 copies the Metal3Data's labels), no
    /// spec.clusterName, and CAPM3's own finalizer beside ours.
    async fn assert_claim_shape(site: &Site, data: &str) {
        let claim = CAPI.claims(&site.client, NS).get(&format!("{data}-{V4_POOL}")).await.expect("claim");
        let owners = claim.metadata.owner_references.clone().unwrap_or_default();
        assert!(
            owners.iter().any(|o| o.kind == "Metal3Data" && o.name == data && o.controller == Some(true)),
            "{owners:?}"
        );
        let labels = claim.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels.get("cluster.x-k8s.io/cluster-name").map(String::as_str), Some("metal3"), "{labels:?}");
        assert!(claim.data["spec"].get("clusterName").is_none(), "{}", claim.data["spec"]);
        let finalizers = claim.metadata.finalizers.clone().unwrap_or_default();
        assert!(finalizers.contains(&"metal3data.infrastructure.cluster.x-k8s.io".to_owned()), "{finalizers:?}");
        assert!(finalizers.contains(&"ipam.cluster.x-k8s.io/ReleaseAddress".to_owned()), "{finalizers:?}");
    }

    /// A machine's life and a move, side by side (each on planes of its own): most of their time is spent waiting
    /// for the controllers, and `make test` runs two tests at a time.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn metal3_machines_get_wait_for_and_keep_their_addresses_and_move() {
        side_by_side(
            a_machine_gets_its_addresses_waits_for_a_freed_one_and_holds_them_while_paused(),
            clusterctl_move_carries_the_claims_without_a_new_allocation(),
        )
        .await;
    }

    async fn a_machine_gets_its_addresses_waits_for_a_freed_one_and_holds_them_while_paused() {
        let site = Site::metal3("capm3-life").await;
        create_cluster(&site);
        add_machine(&site, 0);
        add_machine(&site, 1);
        let (a0, _) = wait_machine_addresses(&site, 0).await;
        let (a1, _) = wait_machine_addresses(&site, 1).await;
        assert_ne!(a0, a1);
        let data0 = data_of(&site, 0).await;
        let data1 = data_of(&site, 1).await;
        assert_claim_shape(&site, &data0).await;
        let c = &site.client;
        wait_pool_counts(c, "InClusterIPPool", NS, V4_POOL, (2, 2, 0, 0)).await;
        wait_pool_counts(c, "GlobalInClusterIPPool", NS, V6_POOL, (16, 2, 14, 0)).await;

        // CAPM3 creates claims as v1beta2 (its cache watches them as v1beta1, through CAPI's conversion webhook).
        let created = site.plane.audited("create", "ipaddressclaims", NS, CAPM3_AGENT);
        assert!(
            !created.is_empty() && created.iter().all(|e| e["objectRef"]["apiVersion"] == "v1beta2"),
            "{created:?}"
        );

        // A third machine: the IPv4 pool is exhausted; the claim says so, and CAPM3 waits for its data without
        // rendering any.
        add_machine(&site, 2);
        let data2 = data_of(&site, 2).await;
        let waiting = format!("{data2}-{V4_POOL}");
        eventually(Duration::from_secs(90), &format!("{waiting} PoolExhausted"), || async {
            CAPI.ready(c, NS, &waiting).await.filter(|r| r["reason"] == "PoolExhausted")
        })
        .await;
        let data_ready = r#"{.status.conditions[?(@.type=="Metal3DataReady")].reason}"#;
        site.wait_value(NS, "metal3machine/m-2", data_ready, "WaitingForMetal3Data").await;
        assert_eq!(site.get(NS, "secret/m-2-networkdata", "{.metadata.name}"), "", "no network data while waiting");
        assert_no_duplicates(&addresses(c, NS).await);

        // The first machine goes: CAPM3 deletes its claims, we release its addresses, and the waiting machine gets
        // the freed IPv4 address without anything being restarted, only once it was released.
        delete_machine(&site, NS, "m-0");
        wait_released(&site, NS, &[format!("{data0}-{V4_POOL}"), format!("{data0}-{V6_POOL}")]).await;
        let (a2, _) = wait_machine_addresses(&site, 2).await;
        assert_eq!(a2, a0, "the waiting machine gets the address the deleted one freed");
        assert_freed_before_taken(&site, NS, &format!("{data0}-{V4_POOL}"), &waiting);
        assert_no_duplicates(&addresses(c, NS).await);
        wait_pool_counts(c, "InClusterIPPool", NS, V4_POOL, (2, 2, 0, 0)).await;
        wait_pool_counts(c, "GlobalInClusterIPPool", NS, V6_POOL, (16, 2, 14, 0)).await;

        // Paused: CAPI and CAPM3 hold the deleted machine, and we hold the claim deleted by hand. Unpaused, the
        // deletion goes through.
        delete_while_paused(&site, NS, "metal3", "m-1", &format!("{data1}-{V4_POOL}")).await;
        wait_released(&site, NS, &[format!("{data1}-{V4_POOL}"), format!("{data1}-{V6_POOL}")]).await;
        wait_pool_counts(c, "InClusterIPPool", NS, V4_POOL, (2, 1, 1, 0)).await;
        wait_pool_counts(c, "GlobalInClusterIPPool", NS, V6_POOL, (16, 1, 15, 0)).await;

        let held = addresses(c, NS).await;
        let expected: Vec<String> = [V4_POOL, V6_POOL].iter().map(|p| format!("{data2}-{p}")).collect();
        assert_eq!(held.keys().cloned().collect::<Vec<_>>(), expected, "only m-2's addresses are left");
        let claims = CAPI.claims(c, NS).list(&ListParams::default()).await.expect("claims");
        assert_eq!(support::claims::names(&claims.items), expected, "only m-2's claims are left");
        // Each address was allocated once: two per machine, and m-2's IPv4 address once it was freed.
        assert_eq!(site.plane.audited_writes("create", "ipaddresses", NS, OUR_AGENT), 6);

        // The pool gets a second subnet (docs/compatibility.md D19). Its first subnet has one free address, which
        // m-3 gets; m-4 then gets the second subnet's, and CAPM3 renders that subnet's netmask and gateway.
        site.apply(
            Some(NS),
            &format!(
                "apiVersion: ipam.cluster.x-k8s.io/v1alpha2\nkind: InClusterIPPool\nmetadata: {{name: {V4_POOL}}}\n\
                 spec: {{addresses: [10.40.0.10-10.40.0.11], prefix: 24, gateway: 10.40.0.1,\n\
                 subnets: [{{addresses: [10.41.0.10], prefix: 25, gateway: 10.41.0.1}}]}}\n"
            ),
        );
        add_machine(&site, 3);
        let (a3, _) = wait_machine_addresses(&site, 3).await;
        add_machine(&site, 4);
        let (a4, _) = wait_machine_addresses_in(&site, 4, ("255.255.255.128", "10.41.0.1")).await;
        assert_eq!((a3.as_str(), a4.as_str()), (a1.as_str(), "10.41.0.10"), "the first subnet first, then the second");
        wait_pool_counts(c, "InClusterIPPool", NS, V4_POOL, (3, 3, 0, 0)).await;
        assert_no_duplicates(&addresses(c, NS).await);
        assert_eq!(site.our_complaints(), Vec::<String>::new());
        assert!(site.consumer.is_running(), "{}", site.consumer.log_tail(40));
    }

    /// Provisions machine `m-<i>` as far as `clusterctl move` requires: the host provisioned, CAPM3's providerID on
    /// a Node of the workload cluster (this plane), and CAPI's nodeRef on the Machine.
    async fn provision(site: &Site, i: usize) {
        set_host_state(site, i, "provisioned");
        let what = format!("metal3machine/m-{i}");
        let provider_id = site.wait_get(NS, &what, "{.spec.providerID}", &format!("m-{i}'s providerID")).await;
        add_node(site, NS, &format!("m-{i}"), &provider_id).await;
    }

    async fn clusterctl_move_carries_the_claims_without_a_new_allocation() {
        let a = Site::metal3("capm3-move-a").await;
        let b = Site::metal3("capm3-move-b").await;
        create_cluster(&a);
        for i in 0..2 {
            add_machine(&a, i);
        }
        for i in 0..2 {
            wait_machine_addresses(&a, i).await;
            provision(&a, i).await;
        }
        let initialized = r#"{.status.conditions[?(@.type=="ControlPlaneInitialized")].status}"#;
        a.wait_value(NS, "cluster/metal3", initialized, "True").await;
        let before = addresses(&a.client, NS).await;
        assert_eq!(before.len(), 4, "{before:?}");
        assert_eq!(a.plane.audited_writes("create", "ipaddresses", NS, OUR_AGENT), 4);
        let claims_by_capm3 = a.plane.audited_writes("create", "ipaddressclaims", NS, CAPM3_AGENT);
        assert_eq!(claims_by_capm3, 4);

        tokio::task::block_in_place(|| clusterctl_move(&a.plane, &b.plane, NS));

        // On the target: the same addresses, bound and counted. CAPM3 reconciles each Metal3Data (a move carries no
        // status, so `ready` is its work on the target); the network data moved with its Secret, which CAPM3 keeps.
        assert_moved(&a, &b, NS, &before, V6_POOL, CAPM3_AGENT).await;
        let c = &b.client;
        wait_pool_counts(c, "InClusterIPPool", NS, V4_POOL, (2, 2, 0, 0)).await;
        wait_pool_counts(c, "GlobalInClusterIPPool", NS, V6_POOL, (16, 2, 14, 0)).await;
        for i in 0..2 {
            let data = data_of(&b, i).await;
            b.wait_value(NS, &format!("metal3data/{data}"), "{.status.ready}", "true").await;
            wait_network_data(&b, i, &before[&format!("{data}-{V4_POOL}")].0).await;
        }
        assert_eq!(b.plane.audited_writes("create", "ipaddressclaims", NS, CAPM3_AGENT), 0, "no new claim");
        assert_eq!(a.plane.audited_writes("create", "ipaddresses", NS, OUR_AGENT), 4);
        // The moved claims are ours to release on the target.
        let data1 = data_of(&b, 1).await;
        let claims: Vec<String> = [V4_POOL, V6_POOL].iter().map(|p| format!("{data1}-{p}")).collect();
        assert_released_on_the_target(&b, NS, &before, "m-1", &claims).await;
        wait_pool_counts(c, "InClusterIPPool", NS, V4_POOL, (2, 1, 1, 0)).await;
        wait_pool_counts(c, "GlobalInClusterIPPool", NS, V6_POOL, (16, 1, 15, 0)).await;
    }
}

mod vsphere {
    //! CAPV in govmomi mode against vCenter's stand-in (tests/tools/vcsim), with the VSphereMachineTemplate of
    //! examples/consumers/vspheremachinetemplate.yaml: a device taking IPv4 from an InClusterIPPool and IPv6 from a
    //! GlobalInClusterIPPool, and a second device taking a /64 from an InClusterPrefixPool. CAPV clones the VM,
    //! creates the claims, waits for them, then writes the addresses into the VM's guestinfo.metadata. It never
    //! deletes a claim: it leaves them to the garbage collector, which runs in these planes.

    use super::*;

    const NS: &str = "vsphere";
    const CLUSTER: &str = "capv";
    const V4_POOL: &str = "vsphere-nodes";
    const V6_POOL: &str = "vsphere-v6";
    const PREFIX_POOL: &str = "vsphere-prefixes";
    const CAPV_AGENT: &str = "cluster-api-vsphere-manager";

    fn example_path() -> String {
        support::repo_root().join("examples/consumers/vspheremachinetemplate.yaml").to_string_lossy().into_owned()
    }

    /// The example's pools, and its template's machine spec pointed at `vcsim`.
    fn example(site: &Site, vcsim: &Vcsim) -> (String, Value) {
        let json = site.plane.kubectl(&["create", "--dry-run=client", "-o", "json", "-f", &example_path()]);
        // One JSON object per document.
        let items: Vec<Value> = serde_json::Deserializer::from_str(&json)
            .into_iter()
            .collect::<Result<_, _>>()
            .expect("the example as JSON");
        let (templates, mut pools): (Vec<Value>, Vec<Value>) =
            items.into_iter().partition(|o| o["kind"] == "VSphereMachineTemplate");
        // kubectl filled in its context's namespace; the pools go where the test applies them.
        for pool in &mut pools {
            pool["metadata"].as_object_mut().expect("metadata").remove("namespace");
        }
        let mut spec = templates[0]["spec"]["template"]["spec"].clone();
        spec["server"] = vcsim.field("server").into();
        spec["thumbprint"] = vcsim.field("thumbprint").into();
        let pools = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": pools});
        (pools.to_string(), spec)
    }

    /// The Cluster with its VSphereCluster and the example's pools; returns the machine spec of its template.
    fn create_cluster(site: &Site, vcsim: &Vcsim) -> Value {
        let spec = format!(
            r#"{{server: "{}", thumbprint: "{}", controlPlaneEndpoint: {{host: 192.0.2.30, port: 6443}}}}"#,
            vcsim.field("server"),
            vcsim.field("thumbprint")
        );
        create_cluster_objects(site, NS, CLUSTER, "VSphereCluster", &spec);
        // The example as a user applies it passes CAPV's schema and webhooks (and ours); the test's machines take
        // its template's spec.
        ok(site.plane.kubectl_output(&["create", "--dry-run=server", "-n", NS, "-f", &example_path()]), "the example");
        let (pools, spec) = example(site, vcsim);
        site.apply(Some(NS), &pools);
        spec
    }

    /// Machine `m-<i>` with its VSphereMachine from the template (the first is the control plane's). The
    /// VSphereMachine goes first: CAPI backs off while a Machine's infrastructureRef is missing.
    fn add_machine(site: &Site, spec: &Value, i: usize) {
        let role = if i == 0 { r#""cluster.x-k8s.io/control-plane": """# } else { r#""role": "worker""# };
        let labels = format!(r#"{{"cluster.x-k8s.io/cluster-name": "{CLUSTER}", {role}}}"#);
        let machine = format!(
            r#"{{"apiVersion": "v1", "kind": "List", "items": [
  {{"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "VSphereMachine",
    "metadata": {{"name": "m-{i}", "labels": {labels}}}, "spec": {spec}}},
  {{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
    "metadata": {{"name": "m-{i}", "labels": {labels}}},
    "spec": {{"clusterName": "{CLUSTER}", "version": "v1.36.3", "bootstrap": {{"dataSecretName": "bootstrap"}},
      "infrastructureRef": {{"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "VSphereMachine", "name": "m-{i}"}}}}}}
]}}"#
        );
        site.apply(Some(NS), &machine);
    }

    /// The claims CAPV makes for machine `m-<i>`: `<vspherevm>-<device>-<entry>`.
    fn claims_of(i: usize) -> [String; 3] {
        [format!("m-{i}-0-0"), format!("m-{i}-0-1"), format!("m-{i}-1-0")]
    }

    /// Waits until machine `m-<i>`'s claims are bound and the VM's metadata holds their addresses, prefixes and
    /// gateways; returns its IPv4 address.
    async fn wait_machine_addresses(site: &Site, vcsim: &Vcsim, i: usize) -> String {
        let c = &site.client;
        let [v4, v6, prefix] = claims_of(i);
        let v4 = address_of(&CAPI.wait_bound_within(c, NS, &v4, Duration::from_secs(90)).await);
        let v6 = address_of(&CAPI.wait_bound_within(c, NS, &v6, Duration::from_secs(90)).await);
        let prefix = address_of(&CAPI.wait_bound_within(c, NS, &prefix, Duration::from_secs(90)).await);
        let fulfilled = r#"{.status.conditions[?(@.type=="IPAddressClaimsFulfilled")].status}"#;
        site.wait_value(NS, &format!("vspherevm/m-{i}"), fulfilled, "True").await;
        let what = format!("m-{i}'s metadata in vCenter");
        let metadata = eventually_every(Duration::from_secs(60), Duration::from_millis(300), &what, || async {
            vcsim.metadata(&format!("m-{i}"))
        })
        .await;
        for expected in [
            format!("\"{v4}/24\""),
            "gateway4: \"10.50.0.1\"".to_owned(),
            format!("\"{v6}/64\""),
            "gateway6: \"fd00:50::1\"".to_owned(),
            format!("\"{prefix}/64\""),
        ] {
            assert!(metadata.contains(&expected), "{expected} in m-{i}'s metadata:\n{metadata}");
        }
        v4
    }

    /// What CAPV's claims look like: written as v1beta2, owned by the VSphereVM (not as controller), the Cluster's
    /// name only as a label, CAPV's finalizer beside ours.
    async fn assert_claim_shape(site: &Site, claim: &str, vm: &str) {
        let claim = CAPI.claims(&site.client, NS).get(claim).await.expect("claim");
        let owners = claim.metadata.owner_references.clone().unwrap_or_default();
        assert!(
            owners.iter().any(|o| o.kind == "VSphereVM" && o.name == vm && o.controller != Some(true)),
            "{owners:?}"
        );
        let labels = claim.metadata.labels.clone().unwrap_or_default();
        assert_eq!(labels.get("cluster.x-k8s.io/cluster-name").map(String::as_str), Some(CLUSTER), "{labels:?}");
        assert!(claim.data["spec"].get("clusterName").is_none(), "{}", claim.data["spec"]);
        let finalizers = claim.metadata.finalizers.clone().unwrap_or_default();
        let capv = "vspherevm.infrastructure.cluster.x-k8s.io/ip-claim-protection".to_owned();
        assert!(finalizers.contains(&capv), "{finalizers:?}");
        assert!(finalizers.contains(&"ipam.cluster.x-k8s.io/ReleaseAddress".to_owned()), "{finalizers:?}");
    }

    /// A machine's life and a move, side by side (as for CAPM3).
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn vsphere_machines_get_wait_for_and_keep_their_addresses_and_move() {
        side_by_side(
            a_machine_gets_its_addresses_waits_for_a_freed_one_and_holds_them_while_paused(),
            clusterctl_move_carries_the_claims_without_a_new_allocation(),
        )
        .await;
    }

    async fn a_machine_gets_its_addresses_waits_for_a_freed_one_and_holds_them_while_paused() {
        let vcsim = Vcsim::start(&support::release::scratch("vcsim"));
        let site = Site::vsphere("capv-life", &vcsim).await;
        let spec = create_cluster(&site, &vcsim);
        add_machine(&site, &spec, 0);
        let a0 = wait_machine_addresses(&site, &vcsim, 0).await;
        add_machine(&site, &spec, 1);
        let a1 = wait_machine_addresses(&site, &vcsim, 1).await;
        assert_ne!(a0, a1);
        assert_claim_shape(&site, "m-0-0-0", "m-0").await;
        // CAPV writes claims as v1beta2.
        let created = site.plane.audited("create", "ipaddressclaims", NS, CAPV_AGENT);
        assert!(
            !created.is_empty() && created.iter().all(|e| e["objectRef"]["apiVersion"] == "v1beta2"),
            "{created:?}"
        );
        let c = &site.client;
        wait_pool_counts(c, "InClusterIPPool", NS, V4_POOL, (2, 2, 0, 0)).await;
        wait_pool_counts(c, "GlobalInClusterIPPool", NS, V6_POOL, (16, 2, 14, 0)).await;
        wait_pool_counts(c, "InClusterPrefixPool", NS, PREFIX_POOL, (256, 2, 254, 0)).await;

        // A third machine: the IPv4 pool is exhausted. The claim says so, CAPV reports it with our message, and
        // the VM gets no metadata.
        add_machine(&site, &spec, 2);
        eventually(Duration::from_secs(90), "m-2-0-0 PoolExhausted", || async {
            CAPI.ready(c, NS, "m-2-0-0").await.filter(|r| r["reason"] == "PoolExhausted")
        })
        .await;
        let fulfilled = r#"{.status.conditions[?(@.type=="IPAddressClaimsFulfilled")].message}"#;
        eventually_every(Duration::from_secs(60), Duration::from_millis(300), "CAPV reporting the pool", || async {
            site.get(NS, "vspherevm/m-2", fulfilled).contains("has no free address").then_some(())
        })
        .await;
        assert!(vcsim.has_vm("m-2"), "CAPV cloned the VM");
        assert_eq!(vcsim.metadata("m-2"), None, "no metadata before every claim is bound");
        assert_no_duplicates(&addresses(c, NS).await);

        // The first machine goes: CAPV lets go of its claims, the garbage collector deletes them, we release the
        // addresses, and the waiting machine gets the freed IPv4 address.
        delete_machine(&site, NS, "m-0");
        wait_released(&site, NS, &claims_of(0)).await;
        let a2 = wait_machine_addresses(&site, &vcsim, 2).await;
        assert_eq!(a2, a0, "the waiting machine gets the address the deleted one freed");
        assert_freed_before_taken(&site, NS, "m-0-0-0", "m-2-0-0");
        assert_no_duplicates(&addresses(c, NS).await);
        assert!(!vcsim.has_vm("m-0"), "CAPV destroyed the VM");
        wait_pool_counts(c, "InClusterIPPool", NS, V4_POOL, (2, 2, 0, 0)).await;
        wait_pool_counts(c, "GlobalInClusterIPPool", NS, V6_POOL, (16, 2, 14, 0)).await;

        // Paused: CAPI and CAPV hold the deleted machine, and we hold the claim deleted by hand. Unpaused, they go.
        delete_while_paused(&site, NS, CLUSTER, "m-1", "m-1-0-0").await;
        wait_released(&site, NS, &claims_of(1)).await;
        wait_pool_counts(c, "InClusterIPPool", NS, V4_POOL, (2, 1, 1, 0)).await;
        wait_pool_counts(c, "GlobalInClusterIPPool", NS, V6_POOL, (16, 1, 15, 0)).await;
        wait_pool_counts(c, "InClusterPrefixPool", NS, PREFIX_POOL, (256, 1, 255, 0)).await;

        let held = addresses(c, NS).await;
        let expected: Vec<String> = claims_of(2).into();
        assert_eq!(held.keys().cloned().collect::<Vec<_>>(), expected, "only m-2's addresses are left");
        let claims = CAPI.claims(c, NS).list(&ListParams::default()).await.expect("claims");
        assert_eq!(support::claims::names(&claims.items), expected, "only m-2's claims are left");
        // Each address was allocated once: three per machine for m-0 and m-1, and m-2's.
        assert_eq!(site.plane.audited_writes("create", "ipaddresses", NS, OUR_AGENT), 9);
        assert_eq!(site.our_complaints(), Vec::<String>::new());
        assert!(site.consumer.is_running(), "{}", site.consumer.log_tail(40));
    }

    async fn clusterctl_move_carries_the_claims_without_a_new_allocation() {
        // Both management clusters use the same vCenter.
        let vcsim = Vcsim::start(&support::release::scratch("vcsim"));
        let a = Site::vsphere("capv-move-a", &vcsim).await;
        let b = Site::vsphere("capv-move-b", &vcsim).await;
        let spec = create_cluster(&a, &vcsim);
        for i in 0..2 {
            add_machine(&a, &spec, i);
            wait_machine_addresses(&a, &vcsim, i).await;
            let machine = format!("machine/m-{i}");
            let id = a.wait_get(NS, &machine, "{.spec.providerID}", &format!("m-{i}'s providerID")).await;
            add_node(&a, NS, &format!("m-{i}"), &id).await;
        }
        let initialized = r#"{.status.conditions[?(@.type=="ControlPlaneInitialized")].status}"#;
        a.wait_value(NS, &format!("cluster/{CLUSTER}"), initialized, "True").await;
        let before = addresses(&a.client, NS).await;
        assert_eq!(before.len(), 6, "{before:?}");
        assert_eq!(a.plane.audited_writes("create", "ipaddresses", NS, OUR_AGENT), 6);
        assert_eq!(a.plane.audited_writes("create", "ipaddressclaims", NS, CAPV_AGENT), 6);

        tokio::task::block_in_place(|| clusterctl_move(&a.plane, &b.plane, NS));

        assert_moved(&a, &b, NS, &before, V6_POOL, CAPV_AGENT).await;
        let c = &b.client;
        wait_pool_counts(c, "InClusterIPPool", NS, V4_POOL, (2, 2, 0, 0)).await;
        wait_pool_counts(c, "GlobalInClusterIPPool", NS, V6_POOL, (16, 2, 14, 0)).await;
        wait_pool_counts(c, "InClusterPrefixPool", NS, PREFIX_POOL, (256, 2, 254, 0)).await;
        // CAPV on the target takes the VMs over: each VSphereVM is ready again (a move carries no status) and the
        // VMs keep their metadata.
        for i in 0..2 {
            b.wait_value(NS, &format!("vspherevm/m-{i}"), "{.status.ready}", "true").await;
            let metadata = vcsim.metadata(&format!("m-{i}")).expect("the VM's metadata");
            assert!(metadata.contains(&format!("\"{}/24\"", before[&format!("m-{i}-0-0")].0)), "{metadata}");
        }
        assert_eq!(b.plane.audited_writes("create", "ipaddressclaims", NS, CAPV_AGENT), 0, "no new claim");
        assert_eq!(a.plane.audited_writes("create", "ipaddresses", NS, OUR_AGENT), 6);
        // The moved claims are ours to release on the target: CAPV lets go, the target's garbage collector deletes
        // them, and we release the addresses.
        assert_released_on_the_target(&b, NS, &before, "m-1", &claims_of(1)).await;
        wait_pool_counts(c, "InClusterIPPool", NS, V4_POOL, (2, 1, 1, 0)).await;
        wait_pool_counts(c, "InClusterPrefixPool", NS, PREFIX_POOL, (256, 1, 255, 0)).await;
    }
}
