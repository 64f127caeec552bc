//! Claims get addresses: the claim and pool controllers against the real API server with the real Cluster API v1.14.2
//! manager, CRDs (v1beta2 storage, conversion webhooks) and admission webhooks, our webhooks registered over TLS.

use std::collections::HashSet;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;
use support::claims::{Capi, address_of, create_pool, wait_pool_counts};
use support::{TestEnv, create_namespace, eventually, unique_name};

const CAPI: Capi = Capi::V1Beta2;

#[tokio::test]
async fn a_claim_gets_the_exact_ipaddress() {
    let env = TestEnv::with_manager("exact").await;
    let c = &env.client;
    let ns = &env.namespace;
    create_pool(
        c,
        "InClusterIPPool",
        ns,
        "pool",
        json!({"addresses": ["10.0.0.1-10.0.0.10"], "prefix": 24, "gateway": "10.0.0.254"}),
    )
    .await;
    let mut claim = CAPI.claim("claim", "InClusterIPPool", "pool");
    claim.metadata.labels = Some([("cluster.x-k8s.io/cluster-name".to_owned(), "c1".to_owned())].into());
    CAPI.create_cluster(c, ns, "c1", false, false).await;
    CAPI.claims(c, ns).create(&PostParams::default(), &claim).await.expect("claim");
    let address = CAPI.wait_bound(c, ns, "claim").await;
    assert_eq!(address.name_any(), "claim");
    assert_eq!(
        address.data["spec"],
        json!({
            "address": "10.0.0.1", "prefix": 24, "gateway": "10.0.0.254",
            "claimRef": {"name": "claim"},
            "poolRef": {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "pool"}
        })
    );
    assert_eq!(address.finalizers(), ["ipam.cluster.x-k8s.io/ProtectAddress"]);
    assert_eq!(address.labels().get("cluster.x-k8s.io/cluster-name").map(String::as_str), Some("c1"));
    let owners = address.owner_references();
    assert_eq!(owners.len(), 2);
    assert_eq!(
        (owners[0].kind.as_str(), owners[0].controller, owners[0].block_owner_deletion),
        ("IPAddressClaim", Some(true), Some(true))
    );
    assert_eq!(
        (owners[1].kind.as_str(), owners[1].controller, owners[1].block_owner_deletion),
        ("InClusterIPPool", Some(false), Some(true))
    );
    let stored = CAPI.claims(c, ns).get("claim").await.expect("claim");
    assert_eq!(stored.finalizers(), ["ipam.cluster.x-k8s.io/ReleaseAddress"]);
    let ready = CAPI.ready(c, ns, "claim").await.expect("Ready condition");
    assert_eq!((ready["status"].as_str(), ready["reason"].as_str()), (Some("True"), Some("Allocated")));
    // A v1beta1 reader (through CAPI's conversion webhook) sees Ready in its status.conditions too.
    let old = Capi::V1Beta1.ready(c, ns, "claim").await.expect("Ready condition read as v1beta1");
    assert_eq!((old["status"].as_str(), old["reason"].as_str()), (Some("True"), Some("Allocated")), "{old}");
    wait_pool_counts(c, "InClusterIPPool", ns, "pool", (10, 1, 9, 0)).await;
    // Our requests name us: the API server's audit log has the IPAddress create with our User-Agent.
    let audit = std::fs::read_to_string(env.plane.dir.join("logs/audit.log")).expect("audit log");
    let create = audit
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|e| {
            e["verb"] == "create"
                && e["objectRef"]["resource"] == "ipaddresses"
                && e["objectRef"]["namespace"] == ns.as_str()
        })
        .expect("the IPAddress create in the audit log");
    let agent = create["userAgent"].as_str().unwrap_or_default();
    assert!(agent.starts_with(&format!("capi-ipam-in-cluster-manager/v{} (", env!("CARGO_PKG_VERSION"))), "{agent}");
}

#[tokio::test]
async fn a_global_pool_serves_many_namespaces_without_duplicates() {
    let env = TestEnv::with_manager("global").await;
    let c = &env.client;
    let pool = unique_name("g");
    create_pool(c, "GlobalInClusterIPPool", "", &pool, json!({"addresses": ["10.1.0.1-10.1.0.20"], "prefix": 24}))
        .await;
    let mut namespaces = vec![env.namespace.clone()];
    for _ in 0..2 {
        namespaces.push(create_namespace(c, "global").await);
    }
    for ns in &namespaces {
        for i in 0..3 {
            CAPI.create_claim(c, ns, &format!("c{i}"), "GlobalInClusterIPPool", &pool).await;
        }
    }
    let mut seen = HashSet::new();
    for ns in &namespaces {
        for i in 0..3 {
            let a = CAPI.wait_bound(c, ns, &format!("c{i}")).await;
            assert!(seen.insert(address_of(&a)), "duplicate {}", address_of(&a));
        }
    }
    assert_eq!(seen.len(), 9);
    wait_pool_counts(c, "GlobalInClusterIPPool", "", &pool, (20, 9, 11, 0)).await;
}

#[tokio::test]
async fn same_named_pools_in_two_namespaces_are_independent() {
    let env = TestEnv::with_manager("samename").await;
    let c = &env.client;
    let other = create_namespace(c, "samename").await;
    for ns in [&env.namespace, &other] {
        create_pool(c, "InClusterIPPool", ns, "pool", json!({"addresses": ["10.0.0.50", "10.0.0.128"], "prefix": 24}))
            .await;
        CAPI.create_claim(c, ns, "claim", "InClusterIPPool", "pool").await;
    }
    for ns in [&env.namespace, &other] {
        assert_eq!(address_of(&CAPI.wait_bound(c, ns, "claim").await), "10.0.0.50");
    }
    // A global pool of the same name is independent too.
    let global = unique_name("pool");
    create_pool(c, "GlobalInClusterIPPool", "", &global, json!({"addresses": ["10.0.0.50"], "prefix": 24})).await;
    CAPI.create_claim(c, &other, "g", "GlobalInClusterIPPool", &global).await;
    assert_eq!(address_of(&CAPI.wait_bound(c, &other, "g").await), "10.0.0.50");
}

/// Allocates `n` claims one after another and returns their addresses, in order.
async fn allocate_in_order(env: &TestEnv, kind: &str, pool: &str, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    for i in 0..n {
        let name = format!("{pool}-c{i}");
        CAPI.create_claim(&env.client, &env.namespace, &name, kind, pool).await;
        out.push(address_of(&CAPI.wait_bound(&env.client, &env.namespace, &name).await));
    }
    out
}

/// The Go provider's allocation scenarios (reference §3.8 and ipaddressclaim_test.go), IPv4 and IPv6.
#[tokio::test]
async fn allocation_order_reserved_addresses_exclusions_and_ipv6() {
    let env = TestEnv::with_manager("order").await;
    let (c, ns) = (&env.client, &env.namespace);
    let cases: Vec<(&str, serde_json::Value, Vec<&str>)> = vec![
        (
            "reserved",
            json!({"addresses": ["10.0.1.0-10.0.1.2", "10.0.1.255"], "prefix": 24, "gateway": "10.0.1.1"}),
            vec!["10.0.1.2"],
        ),
        (
            "excluded",
            json!({"addresses": ["10.1.1.0/24"], "prefix": 24, "gateway": "10.1.1.1", "excludedAddresses": ["10.1.1.2-10.1.1.5", "10.1.1.7"]}),
            vec!["10.1.1.6", "10.1.1.8", "10.1.1.9"],
        ),
        ("unordered", json!({"addresses": ["10.0.2.3", "10.0.2.2"], "prefix": 24}), vec!["10.0.2.2", "10.0.2.3"]),
        ("single", json!({"addresses": ["10.0.3.128", "10.0.3.50"], "prefix": 24}), vec!["10.0.3.50", "10.0.3.128"]),
        (
            "v6",
            json!({"addresses": ["fd00::ff-fd00::101"], "prefix": 112, "gateway": "fd00::100"}),
            vec!["fd00::ff", "fd00::101"],
        ),
        ("rfc3021", json!({"addresses": ["10.0.4.6/31"], "prefix": 31}), vec!["10.0.4.6", "10.0.4.7"]),
    ];
    for (pool, spec, expected) in &cases {
        create_pool(c, "InClusterIPPool", ns, pool, spec.clone()).await;
        assert_eq!(&allocate_in_order(&env, "InClusterIPPool", pool, expected.len()).await, expected, "{pool}");
        if *pool == "excluded" {
            continue;
        }
        // One more claim finds the pool exhausted.
        let extra = format!("{pool}-extra");
        CAPI.create_claim(c, ns, &extra, "InClusterIPPool", pool).await;
        let ready = CAPI.wait_reason(c, ns, &extra, "PoolExhausted").await;
        assert_eq!(ready["status"], "False");
    }
    // Without a gateway the IPAddress has none.
    let a = CAPI.addresses(c, ns).get("unordered-c0").await.expect("IPAddress");
    assert!(a.data["spec"].get("gateway").is_none());
    let v6 = CAPI.addresses(c, ns).get("v6-c0").await.expect("IPAddress");
    assert_eq!(
        (v6.data["spec"]["prefix"].as_i64(), v6.data["spec"]["gateway"].as_str()),
        (Some(112), Some("fd00::100"))
    );
}

/// "it shows the total, used, free ip addresses in the pool" (reference §3.8), both kinds.
#[tokio::test]
async fn pool_status_counts() {
    let env = TestEnv::with_manager("counts").await;
    let (c, ns) = (&env.client, &env.namespace);
    let cases = [
        (json!({"addresses": ["10.0.0.10-10.0.0.20"], "prefix": 24}), 1, (11, 1, 10, 0)),
        (json!({"addresses": ["10.0.0.10-10.0.0.20"], "prefix": 24, "gateway": "10.0.0.10"}), 2, (10, 2, 8, 0)),
        (json!({"addresses": ["10.0.0.10-10.0.0.20"], "prefix": 24, "gateway": "10.0.0.1"}), 1, (11, 1, 10, 0)),
        (json!({"addresses": ["10.0.0.0-10.0.0.1"], "prefix": 24, "gateway": "10.0.0.2"}), 1, (1, 1, 0, 0)),
        (json!({"addresses": ["10.0.0.254-10.0.0.255"], "prefix": 24, "gateway": "10.0.0.1"}), 1, (1, 1, 0, 0)),
        (json!({"addresses": ["fe80::ffff"], "prefix": 120, "gateway": "fe80::ff0a"}), 1, (1, 1, 0, 0)),
        (json!({"addresses": ["fd00::/48"], "prefix": 48}), 2, (i64::MAX, 2, i64::MAX, 0)),
    ];
    for kind in ["InClusterIPPool", "GlobalInClusterIPPool"] {
        for (i, (spec, claims, counts)) in cases.iter().enumerate() {
            let pool = unique_name(&format!("p{i}"));
            create_pool(c, kind, ns, &pool, spec.clone()).await;
            for j in 0..*claims {
                let claim = format!("{pool}-{j}");
                CAPI.create_claim(c, ns, &claim, kind, &pool).await;
                CAPI.wait_bound(c, ns, &claim).await;
            }
            wait_pool_counts(c, kind, ns, &pool, *counts).await;
        }
    }
}

/// "it shows the out of range ips if any": an IPAddress the pool cannot hand out (here written directly, since the
/// update webhook refuses to strand allocated addresses) counts as used and out of range, and free stays right.
#[tokio::test]
async fn out_of_range_addresses_are_counted() {
    let env = TestEnv::with_manager("oor").await;
    let (c, ns) = (&env.client, &env.namespace);
    create_pool(c, "InClusterIPPool", ns, "pool", json!({"addresses": ["10.0.0.10-10.0.0.20"], "prefix": 24})).await;
    CAPI.create_claim(c, ns, "in", "InClusterIPPool", "pool").await;
    CAPI.wait_bound(c, ns, "in").await;
    let mut stray =
        kube::api::DynamicObject::new("stray", &support::resource("ipam.cluster.x-k8s.io", "v1beta2", "IPAddress"));
    stray.data = json!({"spec": {"address": "10.0.0.99", "prefix": 24, "claimRef": {"name": "stray"},
        "poolRef": {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "pool"}}});
    CAPI.addresses(c, ns).create(&PostParams::default(), &stray).await.expect("stray IPAddress");
    wait_pool_counts(c, "InClusterIPPool", ns, "pool", (11, 2, 10, 1)).await;
    // Issue 33, finding 5: the pool says so (it stayed Ready, outOfRange the only trace), naming the IPAddress.
    let pools = support::claims::pools(c, "InClusterIPPool", ns);
    let pool_ready = |reason: &'static str| {
        let pools = pools.clone();
        async move {
            support::eventually(Duration::from_secs(20), &format!("the pool's Ready reason {reason}"), || async {
                let pool = pools.get("pool").await.ok()?;
                let conditions = pool.data.pointer("/status/conditions")?.as_array()?.clone();
                conditions.into_iter().find(|c| c["type"] == "Ready" && c["reason"] == reason)
            })
            .await
        }
    };
    let ready = pool_ready("AddressesOutOfRange").await;
    assert_eq!(ready["status"], "False");
    assert!(ready["message"].as_str().unwrap_or_default().contains(&format!("{ns}/stray (10.0.0.99)")), "{ready}");
    CAPI.addresses(c, ns).delete("stray", &DeleteParams::default()).await.expect("delete");
    wait_pool_counts(c, "InClusterIPPool", ns, "pool", (11, 1, 10, 0)).await;
    assert_eq!(pool_ready("Ready").await["status"], "True");
}

#[tokio::test]
async fn an_exhausted_pool_serves_the_waiting_claim_as_soon_as_an_address_frees_up() {
    let env = TestEnv::with_manager("exhaust").await;
    let (c, ns) = (&env.client, &env.namespace);
    for kind in ["InClusterIPPool", "GlobalInClusterIPPool"] {
        let pool = unique_name("ex");
        create_pool(c, kind, ns, &pool, json!({"addresses": ["10.0.0.1-10.0.0.3"], "prefix": 24})).await;
        // The manager has seen the pool (its status is ours): a claim created before its watch delivered the pool
        // says PoolNotReady first, with an Event, which is not what this test is about.
        wait_pool_counts(c, kind, ns, &pool, (3, 0, 3, 0)).await;
        for i in 0..3 {
            CAPI.create_claim(c, ns, &format!("{pool}-{i}"), kind, &pool).await;
        }
        for i in 0..3 {
            CAPI.wait_bound(c, ns, &format!("{pool}-{i}")).await;
        }
        let waiting = format!("{pool}-waiting");
        CAPI.create_claim(c, ns, &waiting, kind, &pool).await;
        let ready = CAPI.wait_reason(c, ns, &waiting, "PoolExhausted").await;
        assert_eq!(ready["status"], "False");
        assert!(ready["message"].as_str().unwrap_or_default().contains("no free address"), "{ready}");
        wait_pool_counts(c, kind, ns, &pool, (3, 3, 0, 0)).await;

        let freed = address_of(&CAPI.addresses(c, ns).get(&format!("{pool}-1")).await.expect("address"));
        let started = std::time::Instant::now();
        CAPI.delete_claim(c, ns, &format!("{pool}-1")).await;
        let bound = CAPI.wait_bound(c, ns, &waiting).await;
        assert!(started.elapsed() < Duration::from_secs(10), "woken within seconds, took {:?}", started.elapsed());
        assert_eq!(address_of(&bound), freed, "the freed address is reused");
        let ready = CAPI.wait_reason(c, ns, &waiting, "Allocated").await;
        assert_eq!(ready["status"], "True");
        // The wait and the recovery have their Events; a first allocation has none (its condition says it).
        let both = |r: &[String]| r.iter().any(|r| r == "PoolExhausted") && r.iter().any(|r| r == "Allocated");
        let reasons = event_reasons_once(c, ns, &waiting, both).await;
        assert!(both(&reasons), "{reasons:?}");
        assert_eq!(event_reasons(c, ns, &format!("{pool}-0")).await, Vec::<String>::new());
    }
}

/// The reasons of the Events about object `name` in `ns`, oldest first.
/// The claim's Event reasons once `done` holds of them, or as they are after 30 s (for the assertion to show them): an
/// Event is posted after the status write that the test waits for, so it may come a moment after.
async fn event_reasons_once(c: &kube::Client, ns: &str, name: &str, done: impl Fn(&[String]) -> bool) -> Vec<String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let reasons = event_reasons(c, ns, name).await;
        if done(&reasons) || std::time::Instant::now() > deadline {
            return reasons;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn event_reasons(c: &kube::Client, ns: &str, name: &str) -> Vec<String> {
    let events = kube::Api::<k8s_openapi::api::events::v1::Event>::namespaced(c.clone(), ns)
        .list(&Default::default())
        .await
        .expect("events");
    events
        .items
        .iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .filter_map(|e| e.reason.clone())
        .collect()
}

/// Asserts the claim stays without an address for a while (a negative check, so it waits a fixed time).
async fn assert_stays_unbound(env: &TestEnv, name: &str, for_how_long: Duration) {
    tokio::time::sleep(for_how_long).await;
    let claim = CAPI.claims(&env.client, &env.namespace).get(name).await.expect("claim");
    assert!(claim.data.pointer("/status/addressRef").is_none(), "{name} must not be bound: {:?}", claim.data);
    assert!(CAPI.addresses(&env.client, &env.namespace).get_opt(name).await.expect("get").is_none());
}

#[tokio::test]
async fn claims_of_other_pool_kinds_are_left_alone() {
    let env = TestEnv::with_manager("foreign").await;
    let (c, ns) = (&env.client, &env.namespace);
    let mut claim = CAPI.claim("foreign", "InClusterIPPool", "pool");
    claim.data["spec"]["poolRef"] = json!({"apiGroup": "ipam.metal3.io", "kind": "IPPool", "name": "pool"});
    CAPI.claims(c, ns).create(&PostParams::default(), &claim).await.expect("claim");
    let mut other_kind = CAPI.claim("unknown-kind", "InClusterIPPool", "pool");
    other_kind.data["spec"]["poolRef"]["kind"] = json!("SomeOtherPool");
    CAPI.claims(c, ns).create(&PostParams::default(), &other_kind).await.expect("claim");
    create_pool(c, "InClusterIPPool", ns, "pool", json!({"addresses": ["10.0.0.1-10.0.0.3"], "prefix": 24})).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    for name in ["foreign", "unknown-kind"] {
        let stored = CAPI.claims(c, ns).get(name).await.expect("claim");
        assert!(stored.finalizers().is_empty(), "{name}: no finalizer");
        assert!(
            stored.data.get("status").is_none_or(|s| s.is_null() || s.as_object().is_some_and(|o| o.is_empty())),
            "{name}: no status"
        );
    }
}

#[tokio::test]
async fn a_missing_pool_is_reported_and_its_creation_binds_the_claim() {
    let env = TestEnv::with_manager("nopool").await;
    let (c, ns) = (&env.client, &env.namespace);
    CAPI.create_claim(c, ns, "claim", "InClusterIPPool", "later").await;
    let ready = CAPI.wait_reason(c, ns, "claim", "PoolNotReady").await;
    assert!(ready["message"].as_str().unwrap_or_default().contains("not found"), "{ready}");
    let stored = CAPI.claims(c, ns).get("claim").await.expect("claim");
    assert_eq!(stored.finalizers(), ["ipam.cluster.x-k8s.io/ReleaseAddress"], "the finalizer comes first");
    create_pool(c, "InClusterIPPool", ns, "later", json!({"addresses": ["10.0.0.9"], "prefix": 24})).await;
    assert_eq!(address_of(&CAPI.wait_bound(c, ns, "claim").await), "10.0.0.9");
    // A deleting claim whose pool is gone is released at once.
    CAPI.create_claim(c, ns, "orphan", "GlobalInClusterIPPool", &unique_name("never")).await;
    CAPI.wait_reason(c, ns, "orphan", "PoolNotReady").await;
    CAPI.delete_claim(c, ns, "orphan").await;
}

/// Our writes are JSON and merge patches conditioned on the version we read (no server-side apply): another
/// controller's finalizer and conditions, written before and between our writes, stay as they are.
#[tokio::test]
async fn other_owners_finalizers_and_conditions_survive_our_writes() {
    let env = TestEnv::with_manager("others").await;
    let (c, ns) = (&env.client, &env.namespace);
    let mut claim = CAPI.claim("claim", "InClusterIPPool", "later");
    claim.metadata.finalizers = Some(vec!["example.com/theirs".to_owned()]);
    CAPI.claims(c, ns).create(&PostParams::default(), &claim).await.expect("claim");
    CAPI.wait_reason(c, ns, "claim", "PoolNotReady").await;
    let theirs = json!({"type": "Theirs", "status": "True", "reason": "Fine", "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"});
    let mut conditions: Vec<serde_json::Value> =
        CAPI.claims(c, ns).get("claim").await.expect("claim").data["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
    conditions.insert(0, theirs.clone());
    let patch = json!({"status": {"conditions": conditions}});
    CAPI.claims(c, ns)
        .patch_status("claim", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch))
        .await
        .expect("their condition");
    create_pool(c, "InClusterIPPool", ns, "later", json!({"addresses": ["10.0.0.9"], "prefix": 24})).await;
    CAPI.wait_bound(c, ns, "claim").await;
    let ready = CAPI.wait_reason(c, ns, "claim", "Allocated").await;
    let stored = CAPI.claims(c, ns).get("claim").await.expect("claim");
    assert_eq!(stored.finalizers(), ["example.com/theirs", "ipam.cluster.x-k8s.io/ReleaseAddress"]);
    let conditions = stored.data["status"]["conditions"].as_array().cloned().unwrap_or_default();
    assert_eq!(conditions, [theirs, ready], "their condition is kept, in its place");
    let applied = stored.managed_fields().iter().filter(|m| m.operation.as_deref() == Some("Apply")).count();
    assert_eq!(applied, 0, "no server-side apply: {:?}", stored.managed_fields());
    assert!(
        stored.managed_fields().iter().any(|m| m.manager.as_deref() == Some("capi-ipam-in-cluster")),
        "our writes name us"
    );
    let mut patched = stored.clone();
    patched.metadata.finalizers = Some(vec!["ipam.cluster.x-k8s.io/ReleaseAddress".to_owned()]);
    CAPI.claims(c, ns).replace("claim", &PostParams::default(), &patched).await.expect("their finalizer off");
    CAPI.delete_claim(c, ns, "claim").await;
}

/// What our finalizer patches rely on: the API server refuses a JSON patch whose resourceVersion test fails with 422
/// and changes nothing (the controllers treat it as a conflict and decide again on a fresh read).
#[tokio::test]
async fn a_json_patch_on_a_stale_resource_version_changes_nothing() {
    let env = TestEnv::new("stale").await;
    let (c, ns) = (&env.client, &env.namespace);
    let created = CAPI.create_claim(c, ns, "claim", "NotOurs", "pool").await;
    let stale = created.resource_version().expect("a resourceVersion");
    let label = json!({"metadata": {"labels": {"changed": "yes"}}});
    CAPI.claims(c, ns).patch("claim", &Default::default(), &kube::api::Patch::Merge(&label)).await.expect("a change");
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": stale},
        {"op": "add", "path": "/metadata/finalizers", "value": ["ipam.cluster.x-k8s.io/ReleaseAddress"]},
    ]))
    .expect("a patch");
    let refused = CAPI.claims(c, ns).patch("claim", &Default::default(), &kube::api::Patch::<()>::Json(patch)).await;
    assert!(matches!(&refused, Err(kube::Error::Api(s)) if s.code == 422), "{refused:?}");
    let stored = CAPI.claims(c, ns).get("claim").await.expect("claim");
    assert!(stored.finalizers().is_empty(), "{:?}", stored.finalizers());
}

#[tokio::test]
async fn a_paused_cluster_holds_allocation_until_it_is_unpaused() {
    let env = TestEnv::with_manager("pause").await;
    let (c, ns) = (&env.client, &env.namespace);
    create_pool(c, "InClusterIPPool", ns, "pool", json!({"addresses": ["10.0.0.1-10.0.0.10"], "prefix": 24})).await;
    // Paused by spec.paused (claim linked by spec.clusterName) and by the annotation (linked by the label).
    CAPI.create_cluster(c, ns, "by-spec", true, false).await;
    CAPI.create_cluster(c, ns, "by-annotation", false, true).await;
    let mut a = CAPI.claim("a", "InClusterIPPool", "pool");
    a.data["spec"]["clusterName"] = json!("by-spec");
    CAPI.claims(c, ns).create(&PostParams::default(), &a).await.expect("claim a");
    let mut b = CAPI.claim("b", "InClusterIPPool", "pool");
    b.metadata.labels = Some([("cluster.x-k8s.io/cluster-name".to_owned(), "by-annotation".to_owned())].into());
    CAPI.claims(c, ns).create(&PostParams::default(), &b).await.expect("claim b");
    assert_stays_unbound(&env, "a", Duration::from_secs(2)).await;
    assert_stays_unbound(&env, "b", Duration::ZERO).await;
    // Each says why it waits, once.
    for (claim, cluster) in [("a", "by-spec"), ("b", "by-annotation")] {
        let ready = CAPI.wait_reason(c, ns, claim, "ClusterPaused").await;
        assert_eq!(ready["status"], "False");
        let message = ready["message"].as_str().unwrap_or_default();
        assert!(message.contains(&format!("Cluster {ns}/{cluster} is paused")), "{message}");
        // A claim reconciled before the manager saw its Cluster, created a moment before it, waited for it first.
        let reasons = event_reasons_once(c, ns, claim, |r| r.iter().any(|r| r == "ClusterPaused")).await;
        let waited_first = reasons.first().is_some_and(|r| r == "WaitingForCluster");
        assert_eq!(&reasons[usize::from(waited_first)..], ["ClusterPaused"], "{reasons:?}");
    }
    // A superficial update while paused changes nothing.
    support::claims::annotate(&CAPI.claims(c, ns), "a", "touched", Some("yes")).await;
    assert_stays_unbound(&env, "a", Duration::from_secs(1)).await;

    let clusters = CAPI.clusters(c, ns);
    clusters
        .patch(
            "by-spec",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"paused": false}})),
        )
        .await
        .expect("unpause");
    support::claims::annotate(&clusters, "by-annotation", "cluster.x-k8s.io/paused", None).await;
    CAPI.wait_bound(c, ns, "a").await;
    CAPI.wait_bound(c, ns, "b").await;

    // Paused later: deletion waits too, and resumes on unpause.
    support::claims::annotate(&clusters, "by-spec", "cluster.x-k8s.io/paused", Some("")).await;
    CAPI.wait_pause_seen(c, ns, "by-spec").await;
    CAPI.claims(c, ns).delete("a", &DeleteParams::default()).await.expect("delete a");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(CAPI.claims(c, ns).get_opt("a").await.expect("get").is_some(), "a paused claim is not released");
    support::claims::annotate(&clusters, "by-spec", "cluster.x-k8s.io/paused", None).await;
    CAPI.delete_claim(c, ns, "a").await;
}

#[tokio::test]
async fn a_claim_waits_for_its_cluster_and_can_be_deleted_without_it() {
    let env = TestEnv::with_manager("nocluster").await;
    let (c, ns) = (&env.client, &env.namespace);
    create_pool(c, "InClusterIPPool", ns, "pool", json!({"addresses": ["10.0.0.1-10.0.0.10"], "prefix": 24})).await;
    let mut claim = CAPI.claim("claim", "InClusterIPPool", "pool");
    claim.data["spec"]["clusterName"] = json!("restored-later");
    CAPI.claims(c, ns).create(&PostParams::default(), &claim).await.expect("claim");
    assert_stays_unbound(&env, "claim", Duration::from_secs(2)).await;
    let ready = CAPI.wait_reason(c, ns, "claim", "WaitingForCluster").await;
    let message = ready["message"].as_str().unwrap_or_default();
    assert!(message.contains(&format!("waiting for Cluster {ns}/restored-later to exist")), "{message}");
    CAPI.create_cluster(c, ns, "restored-later", false, false).await;
    CAPI.wait_bound(c, ns, "claim").await;
    CAPI.wait_reason(c, ns, "claim", "Allocated").await;
    let reasons = event_reasons_once(c, ns, "claim", |r| r.iter().any(|r| r == "Allocated")).await;
    assert_eq!(reasons, ["WaitingForCluster", "Allocated"]);

    let mut gone = CAPI.claim("gone", "InClusterIPPool", "pool");
    gone.data["spec"]["clusterName"] = json!("never-there");
    CAPI.claims(c, ns).create(&PostParams::default(), &gone).await.expect("claim");
    assert_stays_unbound(&env, "gone", Duration::from_secs(1)).await;
    CAPI.delete_claim(c, ns, "gone").await;
}

/// `clusterctl move` deletes the source claims of a paused Cluster without their finalizers, marked
/// `clusterctl.cluster.x-k8s.io/delete-for-move` first: the address stays held whether the claim names its Cluster by
/// spec.clusterName or by the label, and is released once the Cluster is unpaused and the claim is still gone. (A
/// claim deleted without the mark is no move, and its address goes at once: docs/operations.md.)
#[tokio::test]
async fn a_claim_deleted_while_its_cluster_is_paused_keeps_its_address_however_it_names_the_cluster() {
    let env = TestEnv::with_manager("pausedel").await;
    let (c, ns) = (&env.client, &env.namespace);
    create_pool(c, "InClusterIPPool", ns, "pool", json!({"addresses": ["10.0.0.1-10.0.0.10"], "prefix": 24})).await;
    CAPI.create_cluster(c, ns, "cl", false, false).await;
    let mut by_spec = CAPI.claim("by-spec", "InClusterIPPool", "pool");
    by_spec.data["spec"]["clusterName"] = json!("cl");
    CAPI.claims(c, ns).create(&PostParams::default(), &by_spec).await.expect("claim");
    let mut by_label = CAPI.claim("by-label", "InClusterIPPool", "pool");
    by_label.metadata.labels = Some([("cluster.x-k8s.io/cluster-name".to_owned(), "cl".to_owned())].into());
    CAPI.claims(c, ns).create(&PostParams::default(), &by_label).await.expect("claim");
    for name in ["by-spec", "by-label"] {
        let address = CAPI.wait_bound(c, ns, name).await;
        assert_eq!(address.labels().get("cluster.x-k8s.io/cluster-name").map(String::as_str), Some("cl"), "{name}");
    }
    let clusters = CAPI.clusters(c, ns);
    support::claims::annotate(&clusters, "cl", "cluster.x-k8s.io/paused", Some("")).await;
    CAPI.wait_pause_seen(c, ns, "cl").await;
    // As clusterctl move deletes: marked, finalizers dropped, then the delete.
    for name in ["by-spec", "by-label"] {
        let patch = json!({"metadata": {"annotations": {"clusterctl.cluster.x-k8s.io/delete-for-move": ""}, "finalizers": null}});
        CAPI.claims(c, ns)
            .patch(name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch))
            .await
            .expect("drop finalizers");
        CAPI.delete_claim(c, ns, name).await;
    }
    // Longer than the shared manager's --orphan-release-delay=2.
    tokio::time::sleep(Duration::from_secs(5)).await;
    for name in ["by-spec", "by-label"] {
        assert!(CAPI.addresses(c, ns).get_opt(name).await.expect("get").is_some(), "{name}: released while paused");
    }
    wait_pool_counts(c, "InClusterIPPool", ns, "pool", (10, 2, 8, 0)).await;
    // Unpaused here (the move did not happen after all): the claims are gone, so are their addresses.
    support::claims::annotate(&clusters, "cl", "cluster.x-k8s.io/paused", None).await;
    wait_pool_counts(c, "InClusterIPPool", ns, "pool", (10, 0, 10, 0)).await;
    for name in ["by-spec", "by-label"] {
        assert!(CAPI.addresses(c, ns).get_opt(name).await.expect("get").is_none(), "{name}: not released");
    }
}

#[tokio::test]
async fn paused_claims_and_pools_wait() {
    let env = TestEnv::with_manager("pausedobj").await;
    let (c, ns) = (&env.client, &env.namespace);
    create_pool(c, "InClusterIPPool", ns, "pool", json!({"addresses": ["10.0.0.1-10.0.0.10"], "prefix": 24})).await;
    let mut claim = CAPI.claim("claim", "InClusterIPPool", "pool");
    claim.metadata.annotations = Some([("cluster.x-k8s.io/paused".to_owned(), String::new())].into());
    CAPI.claims(c, ns).create(&PostParams::default(), &claim).await.expect("claim");
    assert_stays_unbound(&env, "claim", Duration::from_secs(2)).await;
    support::claims::annotate(&CAPI.claims(c, ns), "claim", "cluster.x-k8s.io/paused", None).await;
    assert_eq!(address_of(&CAPI.wait_bound(c, ns, "claim").await), "10.0.0.1");

    let pools = support::claims::pools(c, "InClusterIPPool", ns);
    // The pause, and a threshold the pool's status answers for, in one write: once the status says the threshold is
    // wrong, the manager holds the version of the pool that is paused (a paused pool's status is still written).
    let (paused, threshold) = ("cluster.x-k8s.io/paused", "ipam.cluster.x-k8s.io/nearly-exhausted-at");
    let pause = json!({"metadata": {"annotations": {paused: "", threshold: "pause-seen"}}});
    pools.patch("pool", &Default::default(), &kube::api::Patch::Merge(&pause)).await.expect("pause the pool");
    eventually(Duration::from_secs(30), "the pool's status answers the threshold written with its pause", || async {
        let pool = pools.get("pool").await.ok()?;
        let conditions = pool.data.pointer("/status/conditions")?.as_array()?.clone();
        conditions.iter().any(|c| c["message"].as_str().is_some_and(|m| m.contains("pause-seen"))).then_some(())
    })
    .await;
    CAPI.create_claim(c, ns, "second", "InClusterIPPool", "pool").await;
    assert_stays_unbound(&env, "second", Duration::from_secs(2)).await;
    let unpause = json!({"metadata": {"annotations": {paused: null, threshold: null}}});
    pools.patch("pool", &Default::default(), &kube::api::Patch::Merge(&unpause)).await.expect("unpause the pool");
    assert_eq!(address_of(&CAPI.wait_bound(c, ns, "second").await), "10.0.0.2");
}

#[tokio::test]
async fn prefix_pools_hand_out_child_prefixes() {
    let env = TestEnv::with_manager("prefix").await;
    let (c, ns) = (&env.client, &env.namespace);
    create_pool(c, "InClusterPrefixPool", ns, "p62", json!({"prefixes": ["fd00::/62"], "gateway": "fd10::1"})).await;
    assert_eq!(allocate_in_order(&env, "InClusterPrefixPool", "p62", 2).await, ["fd00::", "fd00:0:0:1::"]);
    let a = CAPI.addresses(c, ns).get("p62-c0").await.expect("address");
    assert_eq!((a.data["spec"]["prefix"].as_i64(), a.data["spec"]["gateway"].as_str()), (Some(64), Some("fd10::1")));
    create_pool(c, "InClusterPrefixPool", ns, "p56", json!({"prefixes": ["fd06::/48"], "allocationPrefixLength": 56}))
        .await;
    assert_eq!(allocate_in_order(&env, "InClusterPrefixPool", "p56", 2).await, ["fd06::", "fd06:0:0:100::"]);
    create_pool(c, "InClusterPrefixPool", ns, "mixed", json!({"prefixes": ["fd00:0:0:1::/64", "fd10::/48"]})).await;
    assert_eq!(allocate_in_order(&env, "InClusterPrefixPool", "mixed", 2).await, ["fd00:0:0:1::", "fd10::"]);
    wait_pool_counts(c, "InClusterPrefixPool", ns, "p56", (256, 2, 254, 0)).await;

    let global = unique_name("gp");
    create_pool(c, "GlobalInClusterPrefixPool", "", &global, json!({"prefixes": ["fd01::/64"]})).await;
    let other = create_namespace(c, "prefix").await;
    CAPI.create_claim(c, ns, "g1", "GlobalInClusterPrefixPool", &global).await;
    assert_eq!(address_of(&CAPI.wait_bound(c, ns, "g1").await), "fd01::");
    CAPI.create_claim(c, &other, "g2", "GlobalInClusterPrefixPool", &global).await;
    CAPI.wait_reason(c, &other, "g2", "PoolExhausted").await;
    wait_pool_counts(c, "GlobalInClusterPrefixPool", "", &global, (1, 1, 0, 0)).await;
    CAPI.delete_claim(c, ns, "g1").await;
    assert_eq!(address_of(&CAPI.wait_bound(c, &other, "g2").await), "fd01::");
}

#[tokio::test]
async fn requested_and_pre_allocated_addresses() {
    let env = TestEnv::with_manager("requested").await;
    let (c, ns) = (&env.client, &env.namespace);
    create_pool(
        c,
        "InClusterIPPool",
        ns,
        "pool",
        json!({"addresses": ["10.0.0.1-10.0.0.20"], "prefix": 24, "gateway": "10.0.0.20",
               "excludedAddresses": ["10.0.0.15"], "preAllocations": {"node-a": "10.0.0.10"}}),
    )
    .await;
    let request = |name: &str, address: &str| {
        let mut claim = CAPI.claim(name, "InClusterIPPool", "pool");
        claim.metadata.annotations =
            Some([("ipam.cluster.x-k8s.io/requested-address".to_owned(), address.to_owned())].into());
        claim
    };
    let claims = CAPI.claims(c, ns);
    claims.create(&PostParams::default(), &request("wants-7", "10.0.0.7")).await.expect("claim");
    assert_eq!(address_of(&CAPI.wait_bound(c, ns, "wants-7").await), "10.0.0.7");
    CAPI.create_claim(c, ns, "node-a", "InClusterIPPool", "pool").await;
    assert_eq!(address_of(&CAPI.wait_bound(c, ns, "node-a").await), "10.0.0.10", "pre-allocated by claim name");
    CAPI.create_claim(c, ns, "plain", "InClusterIPPool", "pool").await;
    assert_eq!(address_of(&CAPI.wait_bound(c, ns, "plain").await), "10.0.0.1", "first-free skips nothing it need not");

    for (name, address, text) in [
        ("taken", "10.0.0.7", "already allocated"),
        ("excluded", "10.0.0.15", "excludedAddresses"),
        ("gateway", "10.0.0.20", "gateway"),
        ("outside", "10.0.1.1", "not in the pool's addresses"),
        ("garbage", "not-an-ip", "not an IP address"),
    ] {
        claims.create(&PostParams::default(), &request(name, address)).await.expect("claim");
        let ready = CAPI.wait_reason(c, ns, name, "AllocationFailed").await;
        assert!(ready["message"].as_str().unwrap_or_default().contains(text), "{name}: {ready}");
    }
    // The taken address frees up: the claim asking for it gets it.
    CAPI.delete_claim(c, ns, "wants-7").await;
    assert_eq!(address_of(&CAPI.wait_bound(c, ns, "taken").await), "10.0.0.7");
}

/// Issue 33, finding 1: `spec.preAllocations` reserved nothing. The claim created first took the pinned address (the
/// lowest free one), and the pinned claim waited with `AllocationFailed` until it went. CAPM3 creates claims in no
/// fixed order.
#[tokio::test]
async fn a_pinned_address_goes_to_its_claim_whatever_the_order_of_the_claims() {
    let env = TestEnv::with_manager("pinned").await;
    let (c, ns) = (&env.client, &env.namespace);
    create_pool(
        c,
        "InClusterIPPool",
        ns,
        "pool",
        json!({"addresses": ["10.0.0.10-10.0.0.20"], "prefix": 24, "preAllocations": {"node-a-pool": "10.0.0.10"}}),
    )
    .await;
    CAPI.create_claim(c, ns, "node-b-pool", "InClusterIPPool", "pool").await;
    assert_eq!(address_of(&CAPI.wait_bound(c, ns, "node-b-pool").await), "10.0.0.11", "not the pinned address");
    let mut asking = CAPI.claim("asks-for-it", "InClusterIPPool", "pool");
    asking.metadata.annotations =
        Some([("ipam.cluster.x-k8s.io/requested-address".to_owned(), "10.0.0.10".to_owned())].into());
    CAPI.claims(c, ns).create(&PostParams::default(), &asking).await.expect("claim");
    let ready = CAPI.wait_reason(c, ns, "asks-for-it", "AllocationFailed").await;
    let message = ready["message"].as_str().unwrap_or_default();
    assert!(message.contains(&format!("pins it to claim {ns}/node-a-pool")), "{message}");
    CAPI.create_claim(c, ns, "node-a-pool", "InClusterIPPool", "pool").await;
    assert_eq!(address_of(&CAPI.wait_bound(c, ns, "node-a-pool").await), "10.0.0.10");
    // A pin added over an address another claim's IPAddress holds is refused, naming the field and the IPAddress.
    let pools = support::claims::pools(c, "InClusterIPPool", ns);
    let patch = json!({"spec": {"preAllocations": {"node-a-pool": "10.0.0.10", "node-c-pool": "10.0.0.11"}}});
    let refused = pools
        .patch("pool", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(patch))
        .await
        .expect_err("a pin over an address in use");
    let text = refused.to_string();
    assert!(
        text.contains("spec.preAllocations[node-c-pool]")
            && text.contains(&format!("in use by IPAddress {ns}/node-b-pool")),
        "{text}"
    );
}

/// Issue 33, finding 2: a claim whose name another provider's IPAddress holds was never retried once that IPAddress
/// went (the IPAddress watch woke nobody for objects outside our pools). A GitOps tool that re-creates a claim with
/// another poolRef meets this.
#[tokio::test]
async fn a_claim_blocked_by_another_providers_ipaddress_is_bound_once_it_goes() {
    let env = TestEnv::with_manager("foreign").await;
    let (c, ns) = (&env.client, &env.namespace);
    create_pool(c, "InClusterIPPool", ns, "pool", json!({"addresses": ["10.51.0.1-10.51.0.2"], "prefix": 24})).await;
    let address_resource = support::resource("ipam.cluster.x-k8s.io", "v1beta2", "IPAddress");
    let mut theirs = kube::api::DynamicObject::new("m", &address_resource);
    theirs.data = json!({"spec": {"address": "192.0.2.9", "prefix": 24, "claimRef": {"name": "m"},
                                  "poolRef": {"apiGroup": "ipam.metal3.io", "kind": "IPPool", "name": "m3"}}});
    CAPI.addresses(c, ns).create(&PostParams::default(), &theirs).await.expect("IPAddress");
    CAPI.create_claim(c, ns, "m", "InClusterIPPool", "pool").await;
    CAPI.wait_reason(c, ns, "m", "AllocationFailed").await;
    CAPI.addresses(c, ns).delete("m", &DeleteParams::default()).await.expect("delete theirs");
    let bound = CAPI.wait_bound(c, ns, "m").await;
    assert_eq!(address_of(&bound), "10.51.0.1");
}

#[tokio::test]
async fn the_reuse_grace_period_holds_a_released_address() {
    let env = TestEnv::with_manager("grace").await;
    let (c, ns) = (&env.client, &env.namespace);
    create_pool(
        c,
        "InClusterIPPool",
        ns,
        "pool",
        json!({"addresses": ["10.0.0.1"], "prefix": 24, "addressReuseGracePeriodSeconds": 5}),
    )
    .await;
    CAPI.create_claim(c, ns, "first", "InClusterIPPool", "pool").await;
    CAPI.wait_bound(c, ns, "first").await;
    let started = std::time::Instant::now();
    CAPI.claims(c, ns).delete("first", &DeleteParams::default()).await.expect("delete");
    CAPI.create_claim(c, ns, "second", "InClusterIPPool", "pool").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(CAPI.addresses(c, ns).get_opt("first").await.expect("get").is_some(), "held during the grace period");
    let bound = CAPI.wait_bound(c, ns, "second").await;
    // deletionTimestamp has second precision, so the hold is between 4 and 5 seconds (as in the Go provider); long
    // enough that the check above, half a second and a create through two webhooks after the delete, is within it.
    assert!(
        started.elapsed() >= Duration::from_millis(4000),
        "released after the grace period: {:?}",
        started.elapsed()
    );
    assert!(started.elapsed() < Duration::from_secs(12), "released soon after: {:?}", started.elapsed());
    assert_eq!(address_of(&bound), "10.0.0.1");

    // A pool being deleted skips the grace period.
    create_pool(
        c,
        "InClusterIPPool",
        ns,
        "teardown",
        json!({"addresses": ["10.0.1.1"], "prefix": 24, "addressReuseGracePeriodSeconds": 300}),
    )
    .await;
    CAPI.create_claim(c, ns, "t", "InClusterIPPool", "teardown").await;
    CAPI.wait_bound(c, ns, "t").await;
    let pools = support::claims::pools(c, "InClusterIPPool", ns);
    support::claims::annotate(&pools, "teardown", "ipam.cluster.x-k8s.io/skip-validate-delete-webhook", Some("")).await;
    pools.delete("teardown", &DeleteParams::default()).await.expect("delete pool");
    CAPI.delete_claim(c, ns, "t").await;
    support::eventually(Duration::from_secs(10), "the pool gone", || async {
        matches!(pools.get_opt("teardown").await, Ok(None)).then_some(())
    })
    .await;
}

#[tokio::test]
async fn five_hundred_claims_at_once_get_five_hundred_distinct_addresses() {
    let env = TestEnv::with_manager("burst").await;
    let (c, ns) = (&env.client, &env.namespace);
    create_pool(c, "InClusterIPPool", ns, "pool", json!({"addresses": ["10.20.0.0/22"], "prefix": 22})).await;
    CAPI.create_claims(c, ns, 500, "InClusterIPPool", "pool").await;
    let addresses = support::eventually(Duration::from_secs(120), "500 claims bound", || async {
        let list = CAPI.claims(c, ns).list(&Default::default()).await.ok()?;
        let bound = list.items.iter().filter(|c| c.data.pointer("/status/addressRef/name").is_some()).count();
        (bound == 500).then_some(())?;
        CAPI.addresses(c, ns).list(&Default::default()).await.ok()
    })
    .await;
    let distinct: HashSet<String> = addresses.items.iter().map(address_of).collect();
    assert_eq!((addresses.items.len(), distinct.len()), (500, 500), "no duplicate");
    // Lowest first: exactly the first 500 allocatable addresses of 10.20.0.0/22 (network address skipped).
    let expected: HashSet<String> = (1..=500u32)
        .map(|i| std::net::Ipv4Addr::from(u32::from(std::net::Ipv4Addr::new(10, 20, 0, 0)) + i).to_string())
        .collect();
    assert_eq!(distinct, expected);
    wait_pool_counts(c, "InClusterIPPool", ns, "pool", (1022, 500, 522, 0)).await;
}

#[tokio::test]
async fn rapid_create_and_delete_leaves_no_ipaddress_behind() {
    let env = TestEnv::with_manager("rapid").await;
    let (c, ns) = (&env.client, &env.namespace);
    create_pool(c, "InClusterIPPool", ns, "pool", json!({"addresses": ["10.30.0.1-10.30.0.50"], "prefix": 24})).await;
    let claims = CAPI.claims(c, ns);
    for round in 0..20 {
        futures::future::join_all((0..10).map(|i| {
            let claims = claims.clone();
            async move {
                let name = format!("r{round}-{i}");
                claims
                    .create(&PostParams::default(), &CAPI.claim(&name, "InClusterIPPool", "pool"))
                    .await
                    .expect("claim");
                claims.delete(&name, &DeleteParams::default()).await.expect("delete");
            }
        }))
        .await;
    }
    support::eventually(Duration::from_secs(60), "every claim gone", || async {
        claims.list(&Default::default()).await.ok().filter(|l| l.items.is_empty()).map(|_| ())
    })
    .await;
    // A DELETE that races the finalizer can remove a claim outright (the API server does not re-check finalizers
    // when it retries a delete); its IPAddress must still go, within seconds.
    support::eventually(Duration::from_secs(15), "no IPAddress left", || async {
        CAPI.addresses(c, ns).list(&Default::default()).await.ok().filter(|l| l.items.is_empty()).map(|_| ())
    })
    .await;
    wait_pool_counts(c, "InClusterIPPool", ns, "pool", (50, 0, 50, 0)).await;
}

#[tokio::test]
async fn an_ipaddress_whose_claim_is_gone_is_released() {
    let env = TestEnv::with_manager("orphan").await;
    let (c, ns) = (&env.client, &env.namespace);
    create_pool(c, "InClusterIPPool", ns, "pool", json!({"addresses": ["10.0.0.1-10.0.0.5"], "prefix": 24})).await;
    CAPI.create_claim(c, ns, "claim", "InClusterIPPool", "pool").await;
    CAPI.wait_bound(c, ns, "claim").await;
    // Someone strips the claim's finalizer and deletes it: the claim vanishes without a release.
    let claims = CAPI.claims(c, ns);
    claims
        .patch(
            "claim",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect("strip");
    claims.delete("claim", &DeleteParams::default()).await.expect("delete");
    support::eventually(Duration::from_secs(20), "the orphaned IPAddress released", || async {
        matches!(CAPI.addresses(c, ns).get_opt("claim").await, Ok(None)).then_some(())
    })
    .await;
    wait_pool_counts(c, "InClusterIPPool", ns, "pool", (5, 0, 5, 0)).await;
}

#[tokio::test]
async fn a_deleted_ipaddress_of_a_live_claim_is_made_again_with_its_old_address() {
    let env = TestEnv::with_manager("recreate").await;
    let (c, ns) = (&env.client, &env.namespace);
    create_pool(c, "InClusterIPPool", ns, "pool", json!({"addresses": ["10.0.0.1-10.0.0.5"], "prefix": 24})).await;
    for name in ["a", "claim"] {
        CAPI.create_claim(c, ns, name, "InClusterIPPool", "pool").await;
        CAPI.wait_bound(c, ns, name).await;
    }
    let first = CAPI.addresses(c, ns).get("claim").await.expect("the IPAddress");
    assert_eq!(address_of(&first), "10.0.0.2");
    // A lower address frees up, so the lowest free one is no longer the claim's old one.
    CAPI.delete_claim(c, ns, "a").await;
    wait_pool_counts(c, "InClusterIPPool", ns, "pool", (5, 1, 4, 0)).await;
    let addresses = CAPI.addresses(c, ns);
    addresses.delete("claim", &DeleteParams::default()).await.expect("delete");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let held = addresses.get("claim").await.expect("the finalizer holds it");
    assert!(held.metadata.deletion_timestamp.is_some());
    addresses
        .patch(
            "claim",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect("strip");
    let again = support::eventually(Duration::from_secs(20), "a new IPAddress", || async {
        addresses.get_opt("claim").await.ok().flatten().filter(|a| a.metadata.uid != first.metadata.uid)
    })
    .await;
    assert_eq!(address_of(&again), "10.0.0.2", "the live claim gets its old address back, not the lowest free one");
}

/// Issue 33, finding 7: an IPAddress deleted from under its live bound claim (its finalizer stripped by a person or
/// a tool) freed its address and woke the claims waiting on the full pool before the loss was recorded: the first
/// waiter took the address the machine still uses.
#[tokio::test]
async fn an_ipaddress_stripped_from_under_its_bound_claim_is_not_handed_to_a_waiting_claim() {
    let env = TestEnv::with_manager("stripped").await;
    let (c, ns) = (&env.client, &env.namespace);
    create_pool(c, "InClusterIPPool", ns, "pool", json!({"addresses": ["10.0.0.1"], "prefix": 24})).await;
    CAPI.create_claim(c, ns, "machine", "InClusterIPPool", "pool").await;
    CAPI.wait_bound(c, ns, "machine").await;
    CAPI.create_claim(c, ns, "waiting", "InClusterIPPool", "pool").await;
    CAPI.wait_reason(c, ns, "waiting", "PoolExhausted").await;
    let addresses = CAPI.addresses(c, ns);
    let first = addresses.get("machine").await.expect("the IPAddress");
    let strip = kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}}));
    addresses.patch("machine", &Default::default(), &strip).await.expect("strip");
    addresses.delete("machine", &DeleteParams::default()).await.expect("delete");
    let again = support::eventually(Duration::from_secs(20), "the claim's IPAddress made again", || async {
        addresses.get_opt("machine").await.ok().flatten().filter(|a| a.metadata.uid != first.metadata.uid)
    })
    .await;
    assert_eq!(address_of(&again), "10.0.0.1");
    assert_stays_unbound(&env, "waiting", Duration::from_secs(3)).await;
    let duplicates: Vec<_> = addresses.list(&Default::default()).await.expect("list").items;
    assert_eq!(duplicates.len(), 1, "one IPAddress holds the address: {duplicates:?}");
}

#[tokio::test]
async fn the_pool_finalizer_holds_a_pool_until_its_addresses_are_gone() {
    let env = TestEnv::with_manager("poolfin").await;
    let (c, ns) = (&env.client, &env.namespace);
    for kind in ["InClusterIPPool", "GlobalInClusterPrefixPool"] {
        let pool = unique_name("pf");
        let spec = if kind.contains("Prefix") {
            json!({"prefixes": ["fd20::/60"]})
        } else {
            json!({"addresses": ["10.0.0.1-10.0.0.5"], "prefix": 24})
        };
        create_pool(c, kind, ns, &pool, spec).await;
        let pools = support::claims::pools(c, kind, ns);
        support::eventually(Duration::from_secs(10), "the ProtectPool finalizer", || async {
            pools
                .get(&pool)
                .await
                .ok()
                .filter(|p| p.finalizers().iter().any(|f| f == "ipam.cluster.x-k8s.io/ProtectPool"))
                .map(|_| ())
        })
        .await;
        CAPI.create_claim(c, ns, &pool, kind, &pool).await;
        CAPI.wait_bound(c, ns, &pool).await;
        support::claims::annotate(&pools, &pool, "ipam.cluster.x-k8s.io/skip-validate-delete-webhook", Some("")).await;
        pools.delete(&pool, &DeleteParams::default()).await.expect("delete accepted");
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(pools.get_opt(&pool).await.expect("get").is_some(), "{kind}: held while an IPAddress exists");
        CAPI.delete_claim(c, ns, &pool).await;
        support::eventually(Duration::from_secs(10), "the pool gone", || async {
            matches!(pools.get_opt(&pool).await, Ok(None)).then_some(())
        })
        .await;
    }
}

/// Backup and restore: claims and IPAddresses come back without finalizers, owner references or status (Velero does
/// not restore status, and UIDs change); the controller puts everything back, and every claim keeps its address.
#[tokio::test]
async fn a_restore_gets_every_claim_its_old_address_back() {
    let env = TestEnv::with_manager("restore").await;
    let (c, ns) = (&env.client, &env.namespace);
    CAPI.create_cluster(c, ns, "cl", false, false).await;
    create_pool(c, "InClusterIPPool", ns, "pool", json!({"addresses": ["10.40.0.1-10.40.0.20"], "prefix": 24})).await;
    let mut before = std::collections::BTreeMap::new();
    for i in 0..5 {
        let mut claim = CAPI.claim(&format!("c{i}"), "InClusterIPPool", "pool");
        claim.metadata.labels = Some([("cluster.x-k8s.io/cluster-name".to_owned(), "cl".to_owned())].into());
        CAPI.claims(c, ns).create(&PostParams::default(), &claim).await.expect("claim");
    }
    for i in 0..5 {
        before.insert(format!("c{i}"), address_of(&CAPI.wait_bound(c, ns, &format!("c{i}")).await));
    }
    // Take the backup: specs and labels only.
    let claims_backup = CAPI.claims(c, ns).list(&Default::default()).await.expect("claims").items;
    let addresses_backup = CAPI.addresses(c, ns).list(&Default::default()).await.expect("addresses").items;
    // The disaster, with the Cluster paused (as a restore tool does): everything goes, finalizers and all.
    support::claims::annotate(&CAPI.clusters(c, ns), "cl", "cluster.x-k8s.io/paused", Some("")).await;
    CAPI.wait_pause_seen(c, ns, "cl").await;
    let strip = kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}}));
    for a in &addresses_backup {
        CAPI.addresses(c, ns).patch(&a.name_any(), &Default::default(), &strip).await.expect("strip");
        CAPI.addresses(c, ns).delete(&a.name_any(), &DeleteParams::default()).await.expect("delete");
    }
    for claim in &claims_backup {
        CAPI.claims(c, ns).patch(&claim.name_any(), &Default::default(), &strip).await.expect("strip");
        CAPI.claims(c, ns).delete(&claim.name_any(), &DeleteParams::default()).await.expect("delete");
    }
    // The restore: IPAddresses first (they are leaves), then claims, all without finalizers, owners or status.
    for a in &addresses_backup {
        let mut restored = kube::api::DynamicObject::new(
            &a.name_any(),
            &support::resource("ipam.cluster.x-k8s.io", "v1beta2", "IPAddress"),
        );
        restored.metadata.labels = a.metadata.labels.clone();
        restored.data = json!({"spec": a.data["spec"]});
        CAPI.addresses(c, ns).create(&PostParams::default(), &restored).await.expect("restore IPAddress");
    }
    for claim in &claims_backup {
        let mut restored = CAPI.claim(&claim.name_any(), "InClusterIPPool", "pool");
        restored.metadata.labels = claim.metadata.labels.clone();
        CAPI.claims(c, ns).create(&PostParams::default(), &restored).await.expect("restore claim");
    }
    support::claims::annotate(&CAPI.clusters(c, ns), "cl", "cluster.x-k8s.io/paused", None).await;
    for (name, address) in &before {
        let bound = CAPI.wait_bound(c, ns, name).await;
        assert_eq!(&address_of(&bound), address, "{name} keeps its address");
        let with_owners = support::eventually(Duration::from_secs(20), "owner references back", || async {
            let a = CAPI.addresses(c, ns).get(name).await.ok()?;
            (a.owner_references().len() == 2
                && a.finalizers().contains(&"ipam.cluster.x-k8s.io/ProtectAddress".to_owned()))
            .then_some(a)
        })
        .await;
        let claim = CAPI.claims(c, ns).get(name).await.expect("claim");
        assert_eq!(with_owners.owner_references()[0].uid, claim.uid().unwrap_or_default(), "the new claim UID");
        assert_eq!(claim.finalizers(), ["ipam.cluster.x-k8s.io/ReleaseAddress"]);
    }
    wait_pool_counts(c, "InClusterIPPool", ns, "pool", (20, 5, 15, 0)).await;
}

/// Issue 33, finding 6: Velero restores IPAddressClaims before IPAddresses (alphabetically; Clusters last). A
/// restored claim that names no Cluster was allocated a new address before its IPAddress came; the restore of the
/// IPAddress then failed with AlreadyExists, and the machine's address was free in the pool. It waits for it now.
#[tokio::test]
async fn a_claim_restored_by_velero_waits_for_its_ipaddress_before_it_allocates() {
    let env = TestEnv::with_manager("velero").await;
    let (c, ns) = (&env.client, &env.namespace);
    create_pool(c, "InClusterIPPool", ns, "pool", json!({"addresses": ["10.41.0.1-10.41.0.5"], "prefix": 24})).await;
    let velero = [("velero.io/restore-name".to_owned(), "nightly-1".to_owned())];
    let mut claim = CAPI.claim("machine-0", "InClusterIPPool", "pool");
    claim.metadata.labels = Some(velero.clone().into());
    claim.metadata.finalizers = Some(vec!["ipam.cluster.x-k8s.io/ReleaseAddress".to_owned()]);
    CAPI.claims(c, ns).create(&PostParams::default(), &claim).await.expect("restored claim");
    let ready = CAPI.wait_reason(c, ns, "machine-0", "WaitingForIPAddress").await;
    assert!(ready["message"].as_str().unwrap_or_default().contains("restored by Velero"), "{ready}");
    assert!(CAPI.addresses(c, ns).get_opt("machine-0").await.expect("get").is_none(), "nothing allocated meanwhile");
    // Velero goes on: the IPAddress, with the machine's address (not the lowest free one), and its stale owners.
    let mut restored =
        kube::api::DynamicObject::new("machine-0", &support::resource("ipam.cluster.x-k8s.io", "v1beta2", "IPAddress"));
    restored.metadata.labels = Some(velero.into());
    restored.data = json!({"spec": {"address": "10.41.0.4", "prefix": 24, "claimRef": {"name": "machine-0"},
                                    "poolRef": {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "pool"}}});
    CAPI.addresses(c, ns).create(&PostParams::default(), &restored).await.expect("the IPAddress is restored");
    assert_eq!(address_of(&CAPI.wait_bound(c, ns, "machine-0").await), "10.41.0.4", "its own address, adopted");
    // A claim Velero did not restore is allocated at once, as ever.
    CAPI.create_claim(c, ns, "fresh", "InClusterIPPool", "pool").await;
    assert_eq!(address_of(&CAPI.wait_bound(c, ns, "fresh").await), "10.41.0.1");
}

#[tokio::test]
async fn an_ipaddress_name_taken_by_another_pool_is_reported_and_frees_the_hold() {
    let env = TestEnv::with_manager("taken").await;
    let (c, ns) = (&env.client, &env.namespace);
    create_pool(c, "InClusterIPPool", ns, "pool", json!({"addresses": ["10.50.0.1-10.50.0.2"], "prefix": 24})).await;
    create_pool(c, "InClusterIPPool", ns, "other", json!({"addresses": ["10.60.0.1"], "prefix": 24})).await;
    // Two IPAddresses made by hand under the claims' names: one of a Metal3 pool, one of our other pool.
    let address_resource = support::resource("ipam.cluster.x-k8s.io", "v1beta2", "IPAddress");
    for (name, pool_ref, address) in [
        ("metal3", json!({"apiGroup": "ipam.metal3.io", "kind": "IPPool", "name": "m3"}), "192.0.2.7"),
        ("ours", json!({"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "other"}), "10.60.0.1"),
    ] {
        let mut a = kube::api::DynamicObject::new(name, &address_resource);
        a.data = json!({"spec": {"address": address, "prefix": 24, "claimRef": {"name": name}, "poolRef": pool_ref}});
        CAPI.addresses(c, ns).create(&PostParams::default(), &a).await.expect("IPAddress");
    }
    for (name, owner) in
        [("metal3", "IPPool \"m3\" of group ipam.metal3.io"), ("ours", &format!("InClusterIPPool {ns}/other"))]
    {
        CAPI.create_claim(c, ns, name, "InClusterIPPool", "pool").await;
        let ready = CAPI.wait_reason(c, ns, name, "AllocationFailed").await;
        let message = ready["message"].as_str().unwrap_or_default();
        assert!(message.contains("already exists and belongs to") && message.contains(owner), "{name}: {message}");
        assert!(!message.contains("Some(") && !message.contains("None"), "no Rust debug formatting: {message}");
    }
    // Neither failed claim keeps an address of the pool: both are still there for new claims.
    let mut got = HashSet::new();
    for name in ["x", "y"] {
        CAPI.create_claim(c, ns, name, "InClusterIPPool", "pool").await;
        got.insert(address_of(&CAPI.wait_bound(c, ns, name).await));
    }
    assert_eq!(got, HashSet::from(["10.50.0.1".to_owned(), "10.50.0.2".to_owned()]));
    let metal3 = CAPI.addresses(c, ns).get("metal3").await.expect("the Metal3 IPAddress");
    assert_eq!(metal3.data["spec"]["address"], "192.0.2.7", "its spec is untouched");
    assert!(metal3.owner_references().is_empty(), "and it is not adopted");
    // Deleting the failed claims touches neither IPAddress: one is another provider's, the other another pool's.
    for name in ["metal3", "ours"] {
        CAPI.delete_claim(c, ns, name).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    for name in ["metal3", "ours"] {
        let kept = CAPI.addresses(c, ns).get(name).await.unwrap_or_else(|e| panic!("{name} was deleted: {e}"));
        assert!(kept.metadata.deletion_timestamp.is_none(), "{name} is not being deleted");
    }
}

/// Quiet watches end on the server's side before the client's 60 s read timeout could cut them (which logged a watch
/// error and reconnected every minute or two): two and a half quiet minutes leave no watch error in the manager's log.
#[tokio::test]
async fn quiet_watches_are_not_cut_by_the_read_timeout() {
    let _env = TestEnv::with_manager("quiet").await;
    tokio::time::sleep(Duration::from_secs(150)).await;
    let log = std::fs::read_to_string(&support::shared_manager().log).expect("the manager log");
    let errors: Vec<&str> = log.lines().filter(|l| l.contains("watch stream failed")).collect();
    assert!(errors.is_empty(), "quiet watches were cut:\n{}", errors.join("\n"));
}

/// Two IPAddresses of one pool holding one address (made by hand here; a late write of a fenced leader in real life):
/// the pool says so in its Ready condition; an IPAddress whose claim was never bound to it is withdrawn and its claim
/// gets a free address; a bound claim keeps its address and its condition names the duplicate until it is resolved.
#[tokio::test]
async fn an_address_held_twice_is_reported_and_an_unbound_duplicate_is_withdrawn() {
    let env = TestEnv::with_manager("dup").await;
    let (c, ns) = (&env.client, &env.namespace);
    create_pool(c, "InClusterIPPool", ns, "pool", json!({"addresses": ["10.90.0.1-10.90.0.5"], "prefix": 24})).await;
    CAPI.create_claim(c, ns, "a", "InClusterIPPool", "pool").await;
    assert_eq!(address_of(&CAPI.wait_bound(c, ns, "a").await), "10.90.0.1");
    let resource = support::resource("ipam.cluster.x-k8s.io", "v1beta2", "IPAddress");
    let duplicate_of_a = |name: &str| {
        let mut a = kube::api::DynamicObject::new(name, &resource);
        a.data = json!({"spec": {"address": "10.90.0.1", "prefix": 24, "claimRef": {"name": name},
            "poolRef": {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "pool"}}});
        a
    };
    let pool_ready = |reason: &'static str| async move {
        support::eventually(Duration::from_secs(20), &format!("the pool's Ready reason {reason}"), || async {
            let p = support::claims::pools(c, "InClusterIPPool", ns).get("pool").await.ok()?;
            let ready =
                p.data.pointer("/status/conditions")?.as_array()?.iter().find(|c| c["type"] == "Ready")?.clone();
            (ready["reason"] == reason).then_some(ready)
        })
        .await
    };

    // Unbound: claim b finds an IPAddress of its name holding a's address; it is withdrawn and b gets a free one.
    let addresses = CAPI.addresses(c, ns);
    addresses.create(&PostParams::default(), &duplicate_of_a("b")).await.expect("IPAddress b");
    let ready = pool_ready("DuplicateAddresses").await;
    let message = ready["message"].as_str().unwrap_or_default();
    assert!(message.contains("10.90.0.1") && message.contains("/a") && message.contains("/b"), "{message}");
    CAPI.create_claim(c, ns, "b", "InClusterIPPool", "pool").await;
    let b = support::eventually(Duration::from_secs(20), "b bound to a free address", || async {
        let a = addresses.get_opt("b").await.ok().flatten()?;
        (address_of(&a) != "10.90.0.1").then_some(a)
    })
    .await;
    assert_eq!(address_of(&b), "10.90.0.2");
    pool_ready("Ready").await;

    // Bound: a keeps its address; its condition and the pool's name the duplicate until the other one goes.
    addresses.create(&PostParams::default(), &duplicate_of_a("x")).await.expect("IPAddress x");
    pool_ready("DuplicateAddresses").await;
    let claim_a = CAPI.claims(c, ns);
    support::eventually(Duration::from_secs(20), "a's condition names the duplicate", || async {
        let ready = CAPI.ready(c, ns, "a").await?;
        let message = ready["message"].as_str()?;
        (ready["reason"] == "Allocated" && message.contains("DUPLICATE") && message.contains("/x")).then_some(())
    })
    .await;
    assert_eq!(address_of(&addresses.get("a").await.expect("a's IPAddress")), "10.90.0.1", "a keeps its address");
    addresses.delete("x", &DeleteParams::default()).await.expect("delete x");
    pool_ready("Ready").await;
    support::eventually(Duration::from_secs(20), "a's condition clears", || async {
        let ready = CAPI.ready(c, ns, "a").await?;
        (!ready["message"].as_str()?.contains("DUPLICATE")).then_some(())
    })
    .await;
    assert!(claim_a.get("a").await.is_ok());
    wait_pool_counts(c, "InClusterIPPool", ns, "pool", (5, 2, 3, 0)).await;
}
