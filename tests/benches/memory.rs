//! Controller memory with many claims and IPAddresses cached (`make bench-memory`; 100,000 by default,
//! MEMORY_CLAIMS=n to change).
//!
//! On a private control plane without the API server's watch cache (with it, kube-apiserver holds ~50 KB per
//! custom object, and 200,000 of them exhaust a 24 GB machine; the manager receives the same objects either way):
//! one pool, and N bound claims with their IPAddresses written directly (as a running provider would have left them,
//! CAPV-style owner references and labels included). Then the manager (release build) starts, lists everything,
//! checks every claim once, and its resident memory is read from /proc: VmRSS once settled, and VmHWM, the peak.
//! Before it starts, a new claim is created and `kubectl get` lists the claims and IPAddresses (timed); the line
//! `startup <N> claims: first allocation <T> s after the start, kubectl get lists them in <L> s, ratio <R>` says how
//! long the new claim waited for its address from the manager's start.
//! Last line: `memory <N> claims: RSS <M> MiB, peak <P> MiB`.
//!
//! Writing 100,000 pairs takes long (15 minutes with Cluster API's webhooks in the plane): `MEMORY_KEEP=1` keeps the
//! plane after writing, and `MEMORY_PLANE=<its directory>` measures a manager against it without writing again (set
//! `CAPI_IPAM_MANAGER_BIN` to compare two builds on the same data).

use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::ResourceExt;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;
use support::Plane;
use support::claims::{Capi, create_pool, pools};
use support::manager::Manager;
use support::process::status_kib;

const CAPI: Capi = Capi::V1Beta2;

#[tokio::main]
async fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("memory: skipped (run with `make bench-memory`)");
        return;
    }
    capi_ipam::server::tls::install_crypto_provider();
    let n: usize = std::env::var("MEMORY_CLAIMS").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000);
    let (dir, _plane) = match std::env::var_os("MEMORY_PLANE") {
        Some(dir) => (std::path::PathBuf::from(dir), None),
        None => match write(n).await {
            Some(plane) => (plane.dir.clone(), Some(plane)),
            None => return,
        },
    };
    measure(n, dir).await;
}

/// A plane with `n` bound claims and their IPAddresses; `None` when it was kept for later runs (`MEMORY_KEEP`).
async fn write(n: usize) -> Option<Plane> {
    let plane = tokio::task::spawn_blocking(|| Plane::private_with("bench-memory", &["--no-watch-cache"]))
        .await
        .expect("plane");
    let client = plane.client().await;
    let namespace = support::create_namespace(&client, "mem").await;

    // A manager installs the CRDs and serves the webhook the pool's creation needs; then it goes.
    let dir = plane.dir.clone();
    let installer = tokio::task::spawn_blocking(move || Manager::start(&Plane::at(&dir), &["--log-level=warn"]))
        .await
        .expect("install");
    create_pool(&client, "InClusterIPPool", &namespace, "pool", json!({"addresses": ["10.0.0.0/8"], "prefix": 8}))
        .await;
    let pool_uid =
        pools(&client, "InClusterIPPool", &namespace).get("pool").await.expect("pool").uid().unwrap_or_default();
    drop(installer);

    let started = Instant::now();
    let r = support::resource("ipam.cluster.x-k8s.io", "v1beta2", "IPAddress");
    futures::stream::iter(0..n)
        .for_each_concurrent(64, |i| {
            let (client, namespace, pool_uid, r) = (client.clone(), namespace.clone(), pool_uid.clone(), r.clone());
            async move {
                let name = format!("demo-md-0-{i:06}-0-0");
                let mut claim = CAPI.claim(&name, "InClusterIPPool", "pool");
                claim.metadata.labels = Some([("cluster.x-k8s.io/cluster-name".to_owned(), "demo".to_owned())].into());
                claim.metadata.finalizers = Some(vec![
                    "ipam.cluster.x-k8s.io/ReleaseAddress".to_owned(),
                    "vspherevm.infrastructure.cluster.x-k8s.io/ip-claim-protection".to_owned(),
                ]);
                claim.metadata.owner_references = Some(vec![serde_json::from_value(json!({
                    "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "VSphereVM",
                    "name": format!("demo-md-0-{i:06}"), "uid": format!("00000000-0000-0000-0000-{i:012}")}))
                .expect("owner")]);
                let claim = CAPI.claims(&client, &namespace).create(&PostParams::default(), &claim).await.expect("claim");
                let ip = std::net::Ipv4Addr::from(u32::from(std::net::Ipv4Addr::new(10, 0, 0, 1)) + i as u32);
                let mut a = DynamicObject::new(&name, &r).within(&namespace);
                a.metadata.finalizers = Some(vec!["ipam.cluster.x-k8s.io/ProtectAddress".to_owned()]);
                a.metadata.labels = Some([("cluster.x-k8s.io/cluster-name".to_owned(), "demo".to_owned())].into());
                a.metadata.owner_references = Some(vec![
                    serde_json::from_value(json!({"apiVersion": "ipam.cluster.x-k8s.io/v1beta2", "kind": "IPAddressClaim",
                        "name": name, "uid": claim.uid().unwrap_or_default(), "controller": true, "blockOwnerDeletion": true}))
                    .expect("owner"),
                    serde_json::from_value(json!({"apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": "InClusterIPPool",
                        "name": "pool", "uid": pool_uid, "controller": false, "blockOwnerDeletion": true}))
                    .expect("owner"),
                ]);
                a.data = json!({"spec": {"address": ip.to_string(), "prefix": 8, "claimRef": {"name": name},
                    "poolRef": {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "pool"}}});
                CAPI.addresses(&client, &namespace).create(&PostParams::default(), &a).await.expect("IPAddress");
                let status = json!({"apiVersion": "ipam.cluster.x-k8s.io/v1beta2", "kind": "IPAddressClaim",
                    "metadata": {"name": name, "namespace": namespace},
                    "status": {"addressRef": {"name": name}, "conditions": [{"type": "Ready", "status": "True",
                        "reason": "Allocated", "message": format!("allocated {ip} from InClusterIPPool {namespace}/pool"),
                        "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}]}});
                CAPI.claims(&client, &namespace)
                    .patch_status(&name, &PatchParams::apply("capi-ipam-in-cluster").force(), &Patch::Apply(&status))
                    .await
                    .expect("status");
            }
        })
        .await;
    println!("memory: wrote {n} claims and IPAddresses in {:.0} s", started.elapsed().as_secs_f64());
    if std::env::var_os("MEMORY_KEEP").is_some() {
        // For profiling the manager by hand against this data: the control plane stays up.
        println!("memory: kept the control plane in {}", plane.dir.display());
        std::mem::forget(plane);
        return None;
    }
    Some(plane)
}

/// Starts the manager against the plane in `dir`, waits until it settled, and reads its memory. On the way, the
/// start-up time: a new claim created before the start is bound how long after it, next to how long `kubectl get`
/// takes to list the same claims and IPAddresses just before.
async fn measure(n: usize, dir: std::path::PathBuf) {
    let plane = Plane::at(&dir);
    let client = plane.client().await;
    let pools =
        kube::Api::<DynamicObject>::all_with(client.clone(), &support::claims::pool_resource("InClusterIPPool"));
    let pool = pools.list(&Default::default()).await.expect("pools").items.into_iter().find(|p| p.name_any() == "pool");
    let namespace = pool.and_then(|p| p.namespace()).expect("the bench's pool");
    let fresh = support::unique_name("new");
    CAPI.create_claim(&client, &namespace, &fresh, "InClusterIPPool", "pool").await;
    let list_started = Instant::now();
    let listed = plane.kubectl_output(&[
        "get",
        "ipaddressclaims.ipam.cluster.x-k8s.io,ipaddresses.ipam.cluster.x-k8s.io",
        "--all-namespaces",
        "--no-headers",
    ]);
    let list_time = list_started.elapsed();
    assert!(listed.status.success(), "kubectl get: {}", String::from_utf8_lossy(&listed.stderr));
    let rows = listed.stdout.iter().filter(|b| **b == b'\n').count();
    println!("memory: kubectl get listed {rows} claims and IPAddresses in {:.1} s", list_time.as_secs_f64());

    let bound_at = {
        let claims = CAPI.claims(&client, &namespace);
        let fresh = fresh.clone();
        tokio::spawn(async move {
            loop {
                if let Ok(claim) = claims.get(&fresh).await
                    && claim.data.pointer("/status/addressRef/name").is_some()
                {
                    return Instant::now();
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let started = Instant::now();
    let manager = tokio::task::spawn_blocking(move || {
        let args = ["--insecure-diagnostics", "--log-level=info"];
        Manager::start_within(&Plane::at(&dir), &args, Duration::from_secs(900))
    })
    .await
    .expect("manager");
    let pid = manager.pid().expect("pid");
    let bound_at = tokio::time::timeout(Duration::from_secs(900), bound_at).await.expect("bound").expect("poll");
    let first = bound_at.duration_since(manager.spawned_at.expect("spawned"));
    println!(
        "startup {n} claims: first allocation {:.1} s after the start, kubectl get lists them in {:.1} s, ratio {:.2}",
        first.as_secs_f64(),
        list_time.as_secs_f64(),
        first.as_secs_f64() / list_time.as_secs_f64()
    );
    // Settled: the reconcile counter stops moving once every claim has been checked.
    let mut last = String::new();
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let metrics = manager.metrics().unwrap_or_default();
        let reconciles: String = metrics.lines().filter(|l| l.starts_with("capi_ipam_reconcile_total")).collect();
        if !reconciles.is_empty() && reconciles == last || Instant::now() > deadline {
            break;
        }
        last = reconciles;
    }
    let settled = started.elapsed();
    let rss = status_kib(pid, "VmRSS:") / 1024.0;
    let peak = status_kib(pid, "VmHWM:") / 1024.0;
    println!("memory: the manager listed and checked everything in {:.0} s", settled.as_secs_f64());
    println!("memory {n} claims: RSS {rss:.0} MiB, peak {peak:.0} MiB");
}
