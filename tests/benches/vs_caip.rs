//! Side by side with the Go provider (`make bench-vs-caip`): sigs.k8s.io/cluster-api-ipam-provider-in-cluster
//! v1.1.0 (CAIP, built from its Go module by `tests/tools/k8s-bin.sh caip`) and ours (release build).
//!
//! For each N (1,000, 3,000 and 10,000 by default; `VS_CAIP_SIZES` to change), each provider in turn gets a fresh
//! private control plane: kube-apiserver and etcd with Cluster API's CRDs and no webhook (`control-plane.sh up --capi
//! crds`; `VS_CAIP_PLANE=capi` for the tests' plane, with Cluster API's manager and webhooks), our CRDs, one
//! InClusterIPPool 10.0.0.0/16 and N claims from the same load generator. Both run outside the cluster as admin, with
//! no webhook of theirs in the claims' path (CAIP's `--webhook-port=0`; ours only validate pools). CAIP is given at
//! most 20 minutes (`VS_CAIP_CAP_SECONDS`), and the bench reports how many claims it bound by then.
//!
//! Per run: claims/s, the provider's CPU seconds and peak RSS, the API server's CPU ms per claim; then a correctness
//! check (as many IPAddresses as bound claims, each with an address of its own). Last line:
//! `vs CAIP 3000 claims: ours <X>/s, CAIP <Y>/s, ratio <R>`.

use std::time::{Duration, Instant};

use serde_json::json;
use support::Plane;
use support::claims::create_pool;
use support::load::{bound_by, drive};
use support::manager::Manager;
use support::process::{cpu_seconds, peak_rss_mib};
use support::release::GoProvider;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Provider {
    Ours,
    Caip,
}

/// What one provider did with N claims.
#[derive(Debug)]
struct Run {
    bound: usize,
    ipaddresses: usize,
    seconds: f64,
    provider_cpu: f64,
    peak_rss: f64,
    apiserver_ms_per_claim: f64,
}

impl Run {
    fn rate(&self) -> f64 {
        self.bound as f64 / self.seconds
    }
}

/// One provider, N claims, on a fresh plane.
async fn run(provider: Provider, n: usize, caip: &std::path::Path, cap: Duration) -> Run {
    let plane = tokio::task::spawn_blocking(move || {
        let name = format!("vs-caip-{provider:?}").to_lowercase();
        match std::env::var("VS_CAIP_PLANE").as_deref() {
            Ok("capi") => Plane::private(&name),
            _ => Plane::private_with(&name, &["--capi", "crds"]),
        }
    })
    .await
    .expect("plane");
    let client = plane.client().await;
    let apiserver = plane.pid("apiserver").expect("the API server's pid");
    // Our manager installs the CRDs (the same API for both) and serves the pool webhooks while the pool is created;
    // for CAIP it then goes, and CAIP starts.
    let dir = plane.dir.clone();
    let manager = tokio::task::spawn_blocking(move || {
        Manager::start(&Plane::at(&dir), &["--insecure-diagnostics", "--log-level=warn"])
    })
    .await
    .expect("manager");
    let namespace = support::create_namespace(&client, "vs").await;
    create_pool(&client, "InClusterIPPool", &namespace, "pool", json!({"addresses": ["10.0.0.0/16"], "prefix": 16}))
        .await;
    let (ours, theirs, pid) = match provider {
        Provider::Ours => {
            let pid = manager.pid().expect("pid");
            (Some(manager), None, pid)
        }
        Provider::Caip => {
            drop(manager);
            let (dir, caip) = (plane.dir.clone(), caip.to_path_buf());
            let c =
                tokio::task::spawn_blocking(move || GoProvider::start(&Plane::at(&dir), &caip)).await.expect("CAIP");
            let pid = c.pid();
            (None, Some(c), pid)
        }
    };
    tokio::time::sleep(Duration::from_millis(500)).await;

    let (provider_cpu, apiserver_cpu, started) = (cpu_seconds(pid), cpu_seconds(apiserver), Instant::now());
    let cap = if provider == Provider::Caip { cap } else { Duration::from_secs(24 * 3600) };
    let bound = tokio::spawn(bound_by(client.clone(), namespace.clone(), n, started + cap));
    drive(&client, &namespace, "InClusterIPPool", |_| "pool".to_owned(), n, |_| {}).await;
    let bound = bound.await.expect("watch");
    let seconds = started.elapsed().as_secs_f64();
    let run = Run {
        bound,
        ipaddresses: 0,
        seconds,
        provider_cpu: cpu_seconds(pid) - provider_cpu,
        peak_rss: peak_rss_mib(pid),
        apiserver_ms_per_claim: (cpu_seconds(apiserver) - apiserver_cpu) * 1000.0 / bound.max(1) as f64,
    };
    // Stopped before the check, so that nothing is created after the count.
    drop((ours, theirs));
    let addresses = support::load::CAPI.addresses(&client, &namespace).list(&Default::default()).await.expect("list");
    let distinct: std::collections::HashSet<String> = addresses.items.iter().map(support::claims::address_of).collect();
    // A capped run may have created IPAddresses whose claims it had not bound yet.
    let created = addresses.items.len();
    assert!(created >= bound && (bound < n || created == n), "{created} IPAddresses for {bound} bound claims");
    assert_eq!(distinct.len(), created, "an address of its own for every IPAddress");
    Run { ipaddresses: created, ..run }
}

#[tokio::main]
async fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("vs_caip: skipped (run with `make bench-vs-caip`)");
        return;
    }
    capi_ipam::server::tls::install_crypto_provider();
    let sizes = support::load::sizes("VS_CAIP_SIZES", &[1_000, 3_000, 10_000]);
    let cap =
        Duration::from_secs(std::env::var("VS_CAIP_CAP_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(20 * 60));
    let caip = tokio::task::spawn_blocking(support::release::go_provider_dir).await.expect("CAIP");
    let mut lines = Vec::new();
    for n in sizes {
        let ours = run(Provider::Ours, n, &caip, cap).await;
        let theirs = run(Provider::Caip, n, &caip, cap).await;
        for (name, r) in [("ours", &ours), ("CAIP", &theirs)] {
            println!(
                "vs CAIP {n} claims, {name}: {} bound in {:.0} s, {:.1} claims/s, provider CPU {:.1} s, peak RSS {:.0} MiB, \
                 apiserver {:.1} ms/claim; {} IPAddresses, all distinct",
                r.bound,
                r.seconds,
                r.rate(),
                r.provider_cpu,
                r.peak_rss,
                r.apiserver_ms_per_claim,
                r.ipaddresses,
            );
        }
        let capped = if theirs.bound < n {
            format!(" (CAIP bound {} of {n} in {:.0} s)", theirs.bound, theirs.seconds)
        } else {
            String::new()
        };
        let line = format!(
            "vs CAIP {n} claims: ours {:.1}/s, CAIP {:.1}/s, ratio {:.1}{capped}",
            ours.rate(),
            theirs.rate(),
            ours.rate() / theirs.rate()
        );
        println!("{line}");
        lines.push((n, line));
    }
    // The headline: 3,000 claims when it was measured, else the last size.
    if let Some((_, line)) = lines.iter().find(|(n, _)| *n == 3_000).or(lines.last()) {
        println!("{line}");
    }
}
