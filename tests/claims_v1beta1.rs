//! The claim controller against Cluster API v1.10.10 (its manager, CRDs and webhooks; v1beta1 storage), on a private
//! control plane: discovery picks
//! v1beta1 (docs/compatibility.md D6), and allocation, exhaustion and pause work in that version, with v1beta1-shaped
//! conditions that pass its real schema.

use std::time::Duration;

use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use support::Plane;
use support::claims::{Capi, address_of, create_pool, wait_pool_counts};
use support::manager::{Launch, Manager};

const CAPI: Capi = Capi::V1Beta1;

#[tokio::test]
async fn allocation_exhaustion_and_pause_in_v1beta1() {
    let plane =
        tokio::task::spawn_blocking(|| Plane::private_with("v1beta1", &["--capi", "v1.10"])).await.expect("plane");
    let manager = Manager::started(&plane, Launch::default(), &["--insecure-diagnostics"]).await;
    let c = &plane.client().await;
    let ns = &support::create_namespace(c, "v1b1").await;
    assert!(manager.log_tail(200).contains("ipam=\"v1beta1\""), "discovery picked v1beta1:\n{}", manager.log_tail(20));

    // Allocation.
    create_pool(
        c,
        "InClusterIPPool",
        ns,
        "pool",
        json!({"addresses": ["10.0.0.1-10.0.0.2"], "prefix": 24, "gateway": "10.0.0.254"}),
    )
    .await;
    CAPI.create_cluster(c, ns, "cl", false, false).await;
    let mut claim = CAPI.claim("a", "InClusterIPPool", "pool");
    claim.data["spec"]["clusterName"] = json!("cl");
    CAPI.claims(c, ns).create(&PostParams::default(), &claim).await.expect("claim");
    let a = CAPI.wait_bound(c, ns, "a").await;
    assert_eq!(
        a.data["spec"],
        json!({"address": "10.0.0.1", "prefix": 24, "gateway": "10.0.0.254",
        "claimRef": {"name": "a"}, "poolRef": {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "pool"}})
    );
    let stored = CAPI.claims(c, ns).get("a").await.expect("claim");
    let ready = &stored.data["status"]["conditions"][0];
    assert_eq!(
        (ready["type"].as_str(), ready["status"].as_str(), ready["reason"].as_str()),
        (Some("Ready"), Some("True"), Some("Allocated"))
    );
    assert!(ready.get("severity").is_none());
    assert_eq!(stored.data["status"]["v1beta2"]["conditions"][0]["reason"], "Allocated");

    // Exhaustion, then a release wakes the waiting claim.
    CAPI.create_claim(c, ns, "b", "InClusterIPPool", "pool").await;
    CAPI.wait_bound(c, ns, "b").await;
    CAPI.create_claim(c, ns, "waiting", "InClusterIPPool", "pool").await;
    let ready = CAPI.wait_reason(c, ns, "waiting", "PoolExhausted").await;
    assert_eq!((ready["status"].as_str(), ready["severity"].as_str()), (Some("False"), Some("Warning")));
    wait_pool_counts(c, "InClusterIPPool", ns, "pool", (2, 2, 0, 0)).await;
    CAPI.delete_claim(c, ns, "a").await;
    assert_eq!(address_of(&CAPI.wait_bound(c, ns, "waiting").await), "10.0.0.1");

    // Pause through the Cluster.
    CAPI.clusters(c, ns)
        .patch("cl", &PatchParams::default(), &Patch::Merge(json!({"spec": {"paused": true}})))
        .await
        .expect("pause");
    CAPI.wait_pause_seen(c, ns, "cl").await;
    let mut paused = CAPI.claim("paused", "InClusterIPPool", "pool");
    paused.data["spec"]["clusterName"] = json!("cl");
    create_pool(c, "InClusterIPPool", ns, "more", json!({"addresses": ["10.0.1.1-10.0.1.5"], "prefix": 24})).await;
    paused.data["spec"]["poolRef"]["name"] = json!("more");
    CAPI.claims(c, ns).create(&PostParams::default(), &paused).await.expect("claim");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(CAPI.addresses(c, ns).get_opt("paused").await.expect("get").is_none(), "nothing while paused");
    CAPI.clusters(c, ns)
        .patch("cl", &PatchParams::default(), &Patch::Merge(json!({"spec": {"paused": false}})))
        .await
        .expect("unpause");
    assert_eq!(address_of(&CAPI.wait_bound(c, ns, "paused").await), "10.0.1.1");
    drop(manager);
}
