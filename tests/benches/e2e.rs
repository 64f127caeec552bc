//! End-to-end allocation throughput against a real API server (`make bench-e2e`).
//!
//! On a private control plane, for N = 1,000 and 10,000 claims on one pool:
//! - ceiling: the API server's throughput for the bare writes one allocation needs (apply the claim finalizer,
//!   create the IPAddress, apply the claim status, create the Event), done by the same kube client with the same
//!   concurrency as the manager, for claims created by the same driver; no manager runs meanwhile;
//! - ours: the manager (release build) binds the same number of claims, created the same way.
//!
//! Both phases watch the claims the same way to detect completion. The ratio of the two rates is the overhead of
//! everything the manager does beyond those writes. The manager's peak RSS (VmHWM) is read from /proc at the end.
//! The last line: `e2e 10000 claims: <X> claims/s, ceiling <Y> claims/s, ratio <R>, peak RSS <M> MiB`.

#[path = "../support/mod.rs"]
#[allow(unused_imports)]
mod support;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;
use support::Plane;
use support::claims::{Capi, create_pool};
use support::manager::Manager;
use tokio::sync::Semaphore;

const CAPI: Capi = Capi::V1Beta2;
/// The manager's default --max-concurrent-reconciles; the ceiling uses the same.
const CONCURRENCY: usize = 32;
/// The ceiling's claims and IPAddresses name a pool kind the manager ignores, so that they cost it nothing later.
const CEILING_KIND: &str = "BenchPool";
/// How many claim creates the driver keeps in flight.
const DRIVER_CONCURRENCY: usize = 64;

/// Creates `n` claims `c0..` in `namespace` with bounded concurrency; `on_created` sees each created claim.
async fn drive(
    client: &Client,
    namespace: &str,
    kind: &'static str,
    pool: &str,
    n: usize,
    on_created: impl Fn(DynamicObject) + Send + Sync + 'static,
) {
    let claims = CAPI.claims(client, namespace);
    let on_created = Arc::new(on_created);
    futures::stream::iter(0..n)
        .for_each_concurrent(DRIVER_CONCURRENCY, |i| {
            let (claims, on_created) = (claims.clone(), on_created.clone());
            async move {
                let claim = CAPI.claim(&format!("c{i}"), kind, pool);
                let created = claims.create(&PostParams::default(), &claim).await.expect("create claim");
                on_created(created);
            }
        })
        .await;
}

/// Resolves once `n` claims of `namespace` have `status.addressRef`.
async fn all_bound(client: Client, namespace: String, n: usize) {
    let claims = CAPI.claims(&client, &namespace);
    let mut bound = HashSet::new();
    let mut stream = std::pin::pin!(watcher(claims, watcher::Config::default()).default_backoff().applied_objects());
    while let Some(claim) = stream.try_next().await.expect("watch") {
        if claim.data.pointer("/status/addressRef/name").is_some() {
            bound.insert(claim.name_any());
            if bound.len() >= n {
                return;
            }
        }
    }
}

/// The bare writes of one allocation, for one claim.
async fn bare_writes(client: &Client, claim: &DynamicObject, index: usize) {
    let namespace = claim.namespace().expect("namespaced");
    let name = claim.name_any();
    let claims = CAPI.claims(client, &namespace);
    let finalizer = json!({"apiVersion": "ipam.cluster.x-k8s.io/v1beta2", "kind": "IPAddressClaim",
        "metadata": {"name": name, "namespace": namespace, "finalizers": ["ipam.cluster.x-k8s.io/ReleaseAddress"]}});
    claims.patch(&name, &PatchParams::apply("bench").force(), &Patch::Apply(&finalizer)).await.expect("finalizer");
    let r = kube::api::ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("ipam.cluster.x-k8s.io", "v1beta2", "IPAddress"),
        "ipaddresses",
    );
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
        "poolRef": {"apiGroup": "ipam.cluster.x-k8s.io", "kind": CEILING_KIND, "name": "ceiling"}}});
    CAPI.addresses(client, &namespace).create(&PostParams::default(), &address).await.expect("IPAddress");
    let status = json!({"apiVersion": "ipam.cluster.x-k8s.io/v1beta2", "kind": "IPAddressClaim",
        "metadata": {"name": name, "namespace": namespace},
        "status": {"addressRef": {"name": name}, "conditions": [{"type": "Ready", "status": "True", "reason": "Allocated",
            "message": format!("allocated {ip}"), "lastTransitionTime": jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()}]}});
    claims.patch_status(&name, &PatchParams::apply("bench").force(), &Patch::Apply(&status)).await.expect("status");
    let event: k8s_openapi::api::events::v1::Event = serde_json::from_value(json!({
        "metadata": {"name": format!("{name}.{:x}", jiff::Timestamp::now().as_nanosecond()), "namespace": namespace},
        "eventTime": jiff::Timestamp::now().to_string(), "action": "Allocate", "reason": "Allocated",
        "note": format!("allocated {ip}"), "type": "Normal",
        "reportingController": "bench", "reportingInstance": "bench",
        "regarding": {"apiVersion": "ipam.cluster.x-k8s.io/v1beta2", "kind": "IPAddressClaim", "name": name, "namespace": namespace}}))
    .expect("event");
    Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), &namespace)
        .create(&PostParams::default(), &event)
        .await
        .expect("event");
}

/// Claims per second the API server sustains for the bare writes (no manager running).
async fn ceiling(client: &Client, n: usize) -> f64 {
    let namespace = support::create_namespace(client, "ceiling").await;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<(usize, DynamicObject)>();
    let counter = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let started = Instant::now();
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
                    bare_writes(&client, &claim, i).await;
                    drop(permit);
                }));
            }
            for h in handles {
                h.await.expect("worker");
            }
        })
    };
    drive(client, &namespace, CEILING_KIND, "ceiling", n, move |claim| {
        let i = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let _ = tx.send((i, claim));
    })
    .await;
    workers.await.expect("workers");
    done.await.expect("watch");
    n as f64 / started.elapsed().as_secs_f64()
}

/// Claims per second the manager binds.
async fn ours(client: &Client, n: usize) -> f64 {
    let namespace = support::create_namespace(client, "ours").await;
    create_pool(client, "InClusterIPPool", &namespace, "pool", json!({"addresses": ["10.0.0.0/8"], "prefix": 8})).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    let done = tokio::spawn(all_bound(client.clone(), namespace.clone(), n));
    drive(client, &namespace, "InClusterIPPool", "pool", n, |_| {}).await;
    done.await.expect("watch");
    let rate = n as f64 / started.elapsed().as_secs_f64();
    // No duplicate, whatever the speed.
    let addresses = CAPI.addresses(client, &namespace).list(&Default::default()).await.expect("list").items;
    let distinct: HashSet<String> = addresses.iter().map(support::claims::address_of).collect();
    assert_eq!((addresses.len(), distinct.len()), (n, n), "one distinct address per claim");
    rate
}

fn peak_rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    kib / 1024.0
}

#[tokio::main]
async fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` passes nothing: only run when benchmarking.
    if !std::env::args().any(|a| a == "--bench") {
        println!("e2e: skipped (run with `make bench-e2e`)");
        return;
    }
    capi_ipam::server::tls::install_crypto_provider();
    let sizes: Vec<usize> = std::env::var("E2E_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1_000, 10_000]);
    let plane = tokio::task::spawn_blocking(|| Plane::private("bench-e2e")).await.expect("plane");
    let client = plane.client().await;
    // A first start installs the CAPI CRDs and ours; the ceiling then runs with no manager.
    let dir = plane.dir.clone();
    tokio::task::spawn_blocking(move || drop(Manager::start(&Plane::at(&dir), &["--log-level=warn"])))
        .await
        .expect("install");
    let mut results = Vec::new();
    for n in sizes {
        // The ceiling runs with no manager at all, then the manager gets a fresh start.
        let top = ceiling(&client, n).await;
        let dir = plane.dir.clone();
        let manager = tokio::task::spawn_blocking(move || {
            Manager::start(&Plane::at(&dir), &["--insecure-diagnostics", "--log-level=warn"])
        })
        .await
        .expect("manager");
        let got = ours(&client, n).await;
        let rss = manager.pid().map(peak_rss_mib).unwrap_or(0.0);
        drop(manager);
        println!(
            "e2e {n} claims: ours {got:.0} claims/s, ceiling {top:.0} claims/s, ratio {:.2}, peak RSS {rss:.0} MiB",
            got / top
        );
        results.push((n, got, top, rss));
    }
    if let Some((n, got, top, rss)) = results.last() {
        println!(
            "e2e {n} claims: {got:.0} claims/s, ceiling {top:.0} claims/s, ratio {:.2}, peak RSS {rss:.0} MiB",
            got / top
        );
    }
}
