//! End-to-end allocation throughput and API server cost against a real API server (`make bench-e2e`).
//!
//! On a private control plane, for N = 1,000 and 10,000 claims:
//! - minimal: the least any correct provider writes for one allocation, each write the cheapest correct way: the
//!   claim finalizer by a merge patch guarded by the claim's resourceVersion (persisted before the address exists),
//!   the IPAddress create, and the claim status by a merge patch guarded by the resourceVersion the finalizer write
//!   returned. Done by the same kube client with the same concurrency as the manager, for claims created by the same
//!   driver; no manager runs meanwhile;
//! - ours: the manager (release build) binds the same number of claims on one pool, created the same way;
//! - ours on 20 pools (the largest N only): the same manager binds N claims spread over 20 pools (pools allocate in
//!   parallel, so this should not be slower than one pool).
//!
//! Each phase reports claims/s and the kube-apiserver's CPU time per claim (user + system, read from /proc for the
//! whole phase, claim creation included: the same for every phase). Both phases watch the claims the same way to
//! detect completion. The manager's peak RSS (VmHWM) is read at the end of its one-pool phase.
//! The last line: `e2e 10000 claims: <X> claims/s, minimal <Y> claims/s, ratio <R>, apiserver <A> ms/claim (minimal
//! <B>), peak RSS <M> MiB`.

use std::sync::Arc;
use std::time::Duration;

use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use support::Plane;
use support::claims::create_pool;
use support::load::{CAPI, all_bound, assert_distinct, drive, measure};
use support::manager::{Launch, Manager};
use support::process::peak_rss_mib;
use tokio::sync::Semaphore;

/// The manager's default --max-concurrent-reconciles; the minimal writer uses the same.
const CONCURRENCY: usize = 32;
/// The minimal writer's claims and IPAddresses name a pool kind the manager ignores, so that they cost it nothing
/// later.
const MINIMAL_KIND: &str = "BenchPool";
/// The many-pools phase.
const POOLS: usize = 20;

/// The minimal writes of one allocation, for one claim as created.
async fn minimal_writes(client: &Client, claim: &DynamicObject, index: usize) {
    let namespace = claim.namespace().expect("namespaced");
    let name = claim.name_any();
    let claims = CAPI.claims(client, &namespace);
    let finalizer = json!({"metadata": {"resourceVersion": claim.resource_version(),
        "finalizers": ["ipam.cluster.x-k8s.io/ReleaseAddress"]}});
    let patched = claims.patch(&name, &PatchParams::default(), &Patch::Merge(&finalizer)).await.expect("finalizer");
    let r = support::resource("ipam.cluster.x-k8s.io", "v1beta2", "IPAddress");
    let mut address = DynamicObject::new(&name, &r).within(&namespace);
    address.metadata.finalizers = Some(vec!["ipam.cluster.x-k8s.io/ProtectAddress".to_owned()]);
    address.metadata.owner_references = Some(vec![
        serde_json::from_value(json!({
        "apiVersion": "ipam.cluster.x-k8s.io/v1beta2", "kind": "IPAddressClaim", "name": name,
        "uid": claim.uid().unwrap_or_default(), "controller": true, "blockOwnerDeletion": true}))
        .expect("owner"),
    ]);
    let ip = std::net::Ipv4Addr::from(u32::from(std::net::Ipv4Addr::new(10, 128, 0, 1)) + index as u32);
    address.data = json!({"spec": {"address": ip.to_string(), "prefix": 9, "claimRef": {"name": name},
        "poolRef": {"apiGroup": "ipam.cluster.x-k8s.io", "kind": MINIMAL_KIND, "name": "minimal"}}});
    CAPI.addresses(client, &namespace).create(&PostParams::default(), &address).await.expect("IPAddress");
    let status = json!({"metadata": {"resourceVersion": patched.resource_version()},
        "status": {"addressRef": {"name": name}, "conditions": [{"type": "Ready", "status": "True", "reason": "Allocated",
            "message": format!("allocated {ip}"), "lastTransitionTime": jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()}]}});
    claims.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status)).await.expect("status");
}

/// The minimal writes for `n` claims, as they are created (no manager running).
async fn minimal(client: &Client, n: usize) {
    let namespace = support::create_namespace(client, "minimal").await;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<(usize, DynamicObject)>();
    let counter = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let done = tokio::spawn(all_bound(client.clone(), namespace.clone(), n));
    let workers = {
        let client = client.clone();
        tokio::spawn(async move {
            let semaphore = Arc::new(Semaphore::new(CONCURRENCY));
            let mut rx = rx;
            let mut handles = Vec::new();
            while let Some((i, claim)) = rx.recv().await {
                let permit = semaphore.clone().acquire_owned().await.expect("semaphore");
                let client = client.clone();
                handles.push(tokio::spawn(async move {
                    minimal_writes(&client, &claim, i).await;
                    drop(permit);
                }));
            }
            for h in handles {
                h.await.expect("worker");
            }
        })
    };
    drive(
        client,
        &namespace,
        MINIMAL_KIND,
        |_| "minimal".to_owned(),
        n,
        move |claim| {
            let i = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let _ = tx.send((i, claim));
        },
    )
    .await;
    workers.await.expect("workers");
    done.await.expect("watch");
}

/// A namespace with `pools` InClusterIPPools `pool-0..` (10.<k>.0.0/16 each), ready for claims.
async fn with_pools(client: &Client, pools: usize) -> String {
    let namespace = support::create_namespace(client, "ours").await;
    for k in 0..pools {
        let spec = json!({"addresses": [format!("10.{k}.0.0/16")], "prefix": 16});
        create_pool(client, "InClusterIPPool", &namespace, &format!("pool-{k}"), spec).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    namespace
}

/// The manager binds `n` claims of `namespace`, spread over its `pools` pools; every claim gets a distinct address.
async fn ours(client: &Client, namespace: &str, pools: usize, n: usize) {
    let done = tokio::spawn(all_bound(client.clone(), namespace.to_owned(), n));
    drive(client, namespace, "InClusterIPPool", |i| format!("pool-{}", i % pools), n, |_| {}).await;
    done.await.expect("watch");
}

#[tokio::main]
async fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` passes nothing: only run when benchmarking.
    if !std::env::args().any(|a| a == "--bench") {
        println!("e2e: skipped (run with `make bench-e2e`)");
        return;
    }
    capi_ipam::server::tls::install_crypto_provider();
    let sizes = support::load::sizes("E2E_SIZES", &[1_000, 10_000]);
    let plane = tokio::task::spawn_blocking(|| Plane::private("bench-e2e")).await.expect("plane");
    let client = plane.client().await;
    // A first start installs the CAPI CRDs and ours; the minimal writer then runs with no manager.
    drop(Manager::started(&plane, Launch::default(), &["--log-level=warn"]).await);
    let apiserver = plane.pid("apiserver").expect("the API server's pid");
    let mut results = Vec::new();
    for n in sizes.iter().copied() {
        // The minimal writer runs with no manager at all, then the manager gets a fresh start.
        let least = measure(apiserver, n, minimal(&client, n)).await;
        let manager =
            Manager::started(&plane, Launch::default(), &["--insecure-diagnostics", "--log-level=warn"]).await;
        let namespace = with_pools(&client, 1).await;
        let got = measure(apiserver, n, ours(&client, &namespace, 1, n)).await;
        assert_distinct(&client, &namespace, n).await;
        let rss = manager.pid().map(peak_rss_mib).unwrap_or(0.0);
        println!(
            "e2e {n} claims: ours {:.0} claims/s, minimal {:.0} claims/s, ratio {:.2}, apiserver {:.1} ms/claim \
             (minimal {:.1}, {:.2}x), peak RSS {rss:.0} MiB",
            got.claims_per_second,
            least.claims_per_second,
            got.claims_per_second / least.claims_per_second,
            got.apiserver_ms_per_claim,
            least.apiserver_ms_per_claim,
            got.apiserver_ms_per_claim / least.apiserver_ms_per_claim,
        );
        if Some(&n) == sizes.iter().max() {
            let namespace = with_pools(&client, POOLS).await;
            let spread = measure(apiserver, n, ours(&client, &namespace, POOLS, n)).await;
            assert_distinct(&client, &namespace, n).await;
            println!(
                "e2e {n} claims on {POOLS} pools: ours {:.0} claims/s ({:.2} of one pool), apiserver {:.1} ms/claim",
                spread.claims_per_second,
                spread.claims_per_second / got.claims_per_second,
                spread.apiserver_ms_per_claim,
            );
        }
        drop(manager);
        results.push((n, got, least, rss));
    }
    if let Some((n, got, least, rss)) = results.last() {
        println!(
            "e2e {n} claims: {:.0} claims/s, minimal {:.0} claims/s, ratio {:.2}, apiserver {:.1} ms/claim (minimal \
             {:.1}), peak RSS {rss:.0} MiB",
            got.claims_per_second,
            least.claims_per_second,
            got.claims_per_second / least.claims_per_second,
            got.apiserver_ms_per_claim,
            least.apiserver_ms_per_claim,
        );
    }
}
