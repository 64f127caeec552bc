//! The real consumers of our pools claim from them, beside the real Cluster API v1.14.2 core manager and its webhooks:
//! the Metal3 provider (CAPM3 v1.13.2, its data controllers rendering a host's network data) and the vSphere
//! provider (CAPV v1.16.1 against a vCenter simulator). Each test follows a machine's life as the consumer drives
//! it: the claims it makes are bound, the address reaches the machine, a machine beyond the pool's free addresses
//! waits and gets the address a deleted machine freed, a paused Cluster holds everything, and `clusterctl move`
//! carries a Cluster whose claims the consumer owns to another management cluster without a new allocation.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use kube::Client;
use kube::api::ListParams;
use serde_json::Value;
use support::claims::{Capi, address_of, wait_pool_counts};
use support::consumers::Consumer;
use support::manager::Manager;
use support::release::{clusterctl_move, ok};
use support::{Plane, eventually};

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
    async fn metal3(name: &str) -> Site {
        let name = name.to_owned();
        let (plane, consumer, manager) = tokio::task::spawn_blocking(move || {
            let plane = Plane::private(&name);
            let consumer = Consumer::metal3(&plane);
            let manager = Manager::start(&plane, &["--insecure-diagnostics", "--orphan-release-delay=2"]);
            (plane, consumer, manager)
        })
        .await
        .expect("a management cluster with CAPM3");
        let client = plane.client().await;
        Site { consumer, manager, client, plane }
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

    async fn wait_get(&self, namespace: &str, what: &str, path: &str, describe: &str) -> String {
        eventually(Duration::from_secs(90), describe, || async {
            Some(self.get(namespace, what, path)).filter(|v| !v.is_empty())
        })
        .await
    }

    /// Our manager's WARN and ERROR lines that name `namespace`: a consumer's claims must not make any.
    fn our_complaints_about(&self, namespace: &str) -> Vec<String> {
        let log = std::fs::read_to_string(&self.manager.log).unwrap_or_default();
        log.lines()
            .filter(|l| (l.contains(" WARN ") || l.contains(" ERROR ")) && l.contains(&format!("{namespace}/")))
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- our manager's log in {} ---\n{}", self.plane.dir.display(), self.manager.log_tail(60));
        }
    }
}

/// Claim name → (address, prefix, gateway, pool name) of every IPAddress in `namespace`.
async fn addresses(c: &Client, namespace: &str) -> BTreeMap<String, (String, i64, String, String)> {
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
fn assert_no_duplicates(held: &BTreeMap<String, (String, i64, String, String)>) {
    let mut seen = BTreeMap::new();
    for (claim, (address, _, _, pool)) in held {
        if let Some(other) = seen.insert((pool.clone(), address.clone()), claim.clone()) {
            panic!("{address} of pool {pool} is held by both {other} and {claim}");
        }
    }
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

    /// The Cluster, its Metal3Cluster, the bootstrap data every Machine uses (no bootstrap provider), and the
    /// workload cluster's kubeconfig: this plane itself, where the test makes a Node for each provisioned machine.
    fn create_cluster(site: &Site) {
        let kubeconfig = std::fs::read_to_string(site.plane.kubeconfig()).expect("kubeconfig");
        let kubeconfig = serde_json::to_string(&kubeconfig).expect("JSON");
        site.apply(
            None,
            &format!(
                r##"apiVersion: v1
kind: Namespace
metadata: {{name: {NS}}}
---
apiVersion: v1
kind: Secret
metadata: {{name: bootstrap, namespace: {NS}, labels: {{cluster.x-k8s.io/cluster-name: metal3}}}}
stringData: {{value: "#cloud-config\n"}}
---
apiVersion: v1
kind: Secret
metadata: {{name: metal3-kubeconfig, namespace: {NS}, labels: {{cluster.x-k8s.io/cluster-name: metal3}}}}
type: cluster.x-k8s.io/secret
stringData: {{value: {kubeconfig}}}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: Metal3Cluster
metadata: {{name: metal3, namespace: {NS}}}
spec:
  controlPlaneEndpoint: {{host: 192.0.2.20, port: 6443}}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {{name: metal3, namespace: {NS}}}
spec:
  infrastructureRef: {{apiGroup: infrastructure.cluster.x-k8s.io, kind: Metal3Cluster, name: metal3}}
"##
            ),
        );
        site.apply(Some(NS), &example());
    }

    fn mac(i: usize) -> String {
        format!("00:00:5e:00:53:{i:02x}")
    }

    /// A BareMetalHost `host-<i>` ready to be provisioned, and a Machine `m-<i>` with its Metal3Machine (the first
    /// machine is the control plane's).
    fn add_machine(site: &Site, i: usize) {
        let role = if i == 0 { "cluster.x-k8s.io/control-plane: \"\"" } else { "role: worker" };
        site.apply(
            Some(NS),
            &format!(
                r#"apiVersion: metal3.io/v1alpha1
kind: BareMetalHost
metadata: {{name: host-{i}}}
spec: {{online: true, bootMACAddress: "{mac}"}}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta2
kind: Metal3Machine
metadata: {{name: m-{i}}}
spec:
  image: {{url: "http://192.0.2.1/image.qcow2", checksum: "http://192.0.2.1/image.qcow2.sha256sum", checksumType: sha256, diskFormat: qcow2}}
  dataTemplate: {{name: workers}}
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
"#,
                mac = mac(i)
            ),
        );
        set_host_state(site, i, "available");
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
        eventually(Duration::from_secs(60), &format!("{address} in the network data of m-{i}"), || async {
            let out = site.plane.kubectl_output(&["get", "-n", NS, &secret, "-o", template]);
            let text = String::from_utf8(out.stdout).ok()?;
            text.contains(&format!("ip_address: {address}\n")).then_some(text)
        })
        .await
    }

    /// Waits until both claims of machine `m-<i>` are bound and its network data holds both addresses; returns
    /// (IPv4, IPv6).
    async fn wait_machine_addresses(site: &Site, i: usize) -> (String, String) {
        let data = data_of(site, i).await;
        let c = &site.client;
        let v4 = address_of(&CAPI.wait_bound(c, NS, &format!("{data}-{V4_POOL}")).await);
        let v6 = address_of(&CAPI.wait_bound(c, NS, &format!("{data}-{V6_POOL}")).await);
        let network = wait_network_data(site, i, &v4).await;
        assert!(network.contains(&format!("ip_address: {v6}\n")), "{network}");
        // The pool's prefix and gateway reach the host too.
        assert!(network.contains("netmask: 255.255.255.0\n") && network.contains("gateway: 10.40.0.1\n"), "{network}");
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

    async fn delete_machine(site: &Site, i: usize) {
        ok(site.plane.kubectl_output(&["delete", "-n", NS, "machine", &format!("m-{i}"), "--wait=false"]), "delete");
    }

    async fn set_paused(site: &Site, paused: bool) {
        let patch = format!(r#"{{"spec":{{"paused":{paused}}}}}"#);
        ok(site.plane.kubectl_output(&["patch", "-n", NS, "cluster", "metal3", "--type=merge", "-p", &patch]), "pause");
    }

    async fn wait_gone(site: &Site, claims: &[String]) {
        let api = CAPI.addresses(&site.client, NS);
        eventually(Duration::from_secs(120), &format!("the IPAddresses of {claims:?} released"), || async {
            for claim in claims {
                if api.get_opt(claim).await.ok()?.is_some() {
                    return None;
                }
            }
            Some(())
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_metal3_machine_gets_its_addresses_waits_for_a_freed_one_and_holds_them_while_paused() {
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

        // A third machine: the IPv4 pool is exhausted; the claim says so, and CAPM3 waits for its data.
        add_machine(&site, 2);
        let data2 = data_of(&site, 2).await;
        let waiting = format!("{data2}-{V4_POOL}");
        CAPI.wait_reason(c, NS, &waiting, "PoolExhausted").await;
        site.wait_get(
            NS,
            "metal3machine/m-2",
            r#"{.status.conditions[?(@.type=="Metal3DataReady")].reason}"#,
            "m-2 waiting for its Metal3Data",
        )
        .await;
        assert_eq!(
            site.get(NS, "metal3machine/m-2", r#"{.status.conditions[?(@.type=="Metal3DataReady")].status}"#),
            "False"
        );

        // The first machine goes: CAPM3 deletes its claims, we release its addresses, and the waiting machine gets
        // the freed IPv4 address without anything being restarted.
        delete_machine(&site, 0).await;
        wait_gone(&site, &[format!("{data0}-{V4_POOL}"), format!("{data0}-{V6_POOL}")]).await;
        let (a2, _) = wait_machine_addresses(&site, 2).await;
        assert_eq!(a2, a0, "the waiting machine gets the address the deleted one freed");
        wait_pool_counts(c, "InClusterIPPool", NS, V4_POOL, (2, 2, 0, 0)).await;
        wait_pool_counts(c, "GlobalInClusterIPPool", NS, V6_POOL, (16, 2, 14, 0)).await;

        // Paused, a deleted machine keeps its addresses: CAPI and CAPM3 hold, and so do we.
        set_paused(&site, true).await;
        site.wait_get(NS, "machine/m-1", r#"{.status.conditions[?(@.type=="Paused")].status}"#, "m-1 paused").await;
        let before = addresses(c, NS).await;
        let (created, deleted) = (
            site.plane.audited_writes("create", "ipaddresses", NS, OUR_AGENT),
            site.plane.audited_writes("delete", "ipaddresses", NS, OUR_AGENT),
        );
        delete_machine(&site, 1).await;
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(addresses(c, NS).await, before, "nothing is released while the Cluster is paused");
        assert_eq!(site.plane.audited_writes("create", "ipaddresses", NS, OUR_AGENT), created);
        assert_eq!(site.plane.audited_writes("delete", "ipaddresses", NS, OUR_AGENT), deleted);
        wait_pool_counts(c, "InClusterIPPool", NS, V4_POOL, (2, 2, 0, 0)).await;

        // Unpaused, the deletion goes through.
        set_paused(&site, false).await;
        wait_gone(&site, &[format!("{data1}-{V4_POOL}"), format!("{data1}-{V6_POOL}")]).await;
        wait_pool_counts(c, "InClusterIPPool", NS, V4_POOL, (2, 1, 1, 0)).await;
        wait_pool_counts(c, "GlobalInClusterIPPool", NS, V6_POOL, (16, 1, 15, 0)).await;

        let held = addresses(c, NS).await;
        assert_eq!(held.len(), 2, "{held:?}");
        assert_no_duplicates(&held);
        // Each address was allocated once: two per machine, and m-2's IPv4 address once it was freed.
        assert_eq!(site.plane.audited_writes("create", "ipaddresses", NS, OUR_AGENT), 6);
        assert_eq!(site.our_complaints_about(NS), Vec::<String>::new());
        assert!(site.consumer.is_running(), "{}", site.consumer.log_tail(40));
    }

    /// Provisions machine `m-<i>` as far as `clusterctl move` requires: the host provisioned, CAPM3's providerID on
    /// a Node of the workload cluster (this plane), and CAPI's nodeRef on the Machine.
    async fn provision(site: &Site, i: usize) {
        set_host_state(site, i, "provisioned");
        let what = format!("metal3machine/m-{i}");
        let provider_id = site.wait_get(NS, &what, "{.spec.providerID}", &format!("m-{i}'s providerID")).await;
        site.apply(
            None,
            &format!(
                "apiVersion: v1\nkind: Node\nmetadata: {{name: m-{i}}}\nspec: {{providerID: \"{provider_id}\"}}\n"
            ),
        );
        let machine = format!("machine/m-{i}");
        site.wait_get(NS, &machine, "{.status.nodeRef.name}", &format!("m-{i}'s nodeRef")).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn clusterctl_move_carries_metal3_claims_without_a_new_allocation() {
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
        a.wait_get(
            NS,
            "cluster/metal3",
            r#"{.status.conditions[?(@.type=="ControlPlaneInitialized")].status}"#,
            "the control plane initialized",
        )
        .await;
        let before = addresses(&a.client, NS).await;
        assert_eq!(before.len(), 4, "{before:?}");
        assert_eq!(a.plane.audited_writes("create", "ipaddresses", NS, OUR_AGENT), 4);
        let claims_by_capm3 = a.plane.audited_writes("create", "ipaddressclaims", NS, CAPM3_AGENT);
        assert_eq!(claims_by_capm3, 4);

        tokio::task::block_in_place(|| clusterctl_move(&a.plane, &b.plane, NS));

        // On the target: the same addresses, bound, counted; CAPM3 renders the machines' data again from them.
        let c = &b.client;
        let got = eventually(Duration::from_secs(60), "every IPAddress on the target", || async {
            let got = addresses(c, NS).await;
            (got.len() == before.len()).then_some(got)
        })
        .await;
        assert_eq!(got, before, "the IPAddresses arrive unchanged");
        for claim in before.keys() {
            let ready = CAPI.wait_reason(c, NS, claim, "Allocated").await;
            assert_eq!(ready["status"], "True", "{claim}");
        }
        wait_pool_counts(c, "InClusterIPPool", NS, V4_POOL, (2, 2, 0, 0)).await;
        wait_pool_counts(c, "GlobalInClusterIPPool", NS, V6_POOL, (16, 2, 14, 0)).await;
        for i in 0..2 {
            let data = data_of(&b, i).await;
            b.wait_get(NS, &format!("metal3data/{data}"), "{.status.ready}", "the Metal3Data reconciled on the target")
                .await;
            let v4 = &before[&format!("{data}-{V4_POOL}")].0;
            wait_network_data(&b, i, v4).await;
        }
        assert_eq!(b.plane.audited_writes("create", "ipaddresses", NS, OUR_AGENT), 0, "nothing allocated anew");
        assert_eq!(b.plane.audited_writes("create", "ipaddressclaims", NS, CAPM3_AGENT), 0, "no new claim");
        assert_eq!(a.plane.audited_writes("create", "ipaddresses", NS, OUR_AGENT), 4);

        // The source let everything go without releasing: the namespace is empty and the global pool keeps the
        // moved IPv6 addresses reserved, naming the IPAddress that took each one away.
        let source = &a.client;
        eventually(Duration::from_secs(30), "the source namespace emptied", || async {
            let claims = CAPI.claims(source, NS).list(&ListParams::default()).await.ok()?;
            let addresses = CAPI.addresses(source, NS).list(&ListParams::default()).await.ok()?;
            (claims.items.is_empty() && addresses.items.is_empty()).then_some(())
        })
        .await;
        let mut expected: Vec<String> = before
            .iter()
            .filter(|(_, (_, _, _, pool))| pool == V6_POOL)
            .map(|(claim, (address, ..))| format!("{address}@{NS}/{claim}"))
            .collect();
        expected.sort();
        let pools = support::claims::pools(source, "GlobalInClusterIPPool", NS);
        eventually(Duration::from_secs(30), "the moved-away annotation on the source", || async {
            let pool = pools.get(V6_POOL).await.ok()?;
            let value = pool.metadata.annotations.as_ref()?.get("ipam.cluster.x-k8s.io/moved-away")?.clone();
            let mut entries: Vec<String> = value.split(',').map(str::to_owned).collect();
            entries.sort();
            (entries == expected).then_some(())
        })
        .await;
        wait_pool_counts(source, "GlobalInClusterIPPool", NS, V6_POOL, (16, 2, 14, 0)).await;
        for site in [&a, &b] {
            assert_eq!(site.our_complaints_about(NS), Vec::<String>::new());
            assert!(site.consumer.is_running(), "{}", site.consumer.log_tail(40));
        }
    }
}
