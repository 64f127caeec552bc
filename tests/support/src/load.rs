//! The benches' load: claims created with bounded concurrency, a watch that counts them bound, and the check that
//! every bound claim got an address of its own.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use kube::api::{DynamicObject, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};

use crate::claims::{Capi, address_of};
use crate::process::cpu_seconds;

pub const CAPI: Capi = Capi::V1Beta2;
/// How many claim creates the driver keeps in flight.
const DRIVER_CONCURRENCY: usize = 64;

/// Creates `n` claims `c0..` in `namespace` with bounded concurrency, claim `i` on pool `pool(i)` of `kind`;
/// `on_created` sees each created claim.
pub async fn drive(
    client: &Client,
    namespace: &str,
    kind: &'static str,
    pool: impl Fn(usize) -> String,
    n: usize,
    on_created: impl Fn(DynamicObject) + Send + Sync + 'static,
) {
    let claims = CAPI.claims(client, namespace);
    let on_created = Arc::new(on_created);
    futures::stream::iter(0..n)
        .for_each_concurrent(DRIVER_CONCURRENCY, |i| {
            let (claims, on_created) = (claims.clone(), on_created.clone());
            let claim = CAPI.claim(&format!("c{i}"), kind, &pool(i));
            async move {
                let created = claims.create(&PostParams::default(), &claim).await.expect("create claim");
                on_created(created);
            }
        })
        .await;
}

/// How many claims of `namespace` have `status.addressRef` once `n` have, or when `deadline` passes.
pub async fn bound_by(client: Client, namespace: String, n: usize, deadline: Instant) -> usize {
    let claims = CAPI.claims(&client, &namespace);
    let mut bound = HashSet::new();
    let mut stream = std::pin::pin!(watcher(claims, watcher::Config::default()).default_backoff().applied_objects());
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.try_next()).await {
            Ok(next) => {
                let Some(claim) = next.expect("watch") else { return bound.len() };
                if claim.data.pointer("/status/addressRef/name").is_some() {
                    bound.insert(claim.name_any());
                    if bound.len() >= n {
                        return bound.len();
                    }
                }
            }
            Err(_) => return bound.len(),
        }
    }
}

/// Resolves once `n` claims of `namespace` are bound.
pub async fn all_bound(client: Client, namespace: String, n: usize) {
    let far = Instant::now() + Duration::from_secs(24 * 3600);
    bound_by(client, namespace, n, far).await;
}

/// No duplicate, whatever the speed: `n` IPAddresses, each with an address of its own.
pub async fn assert_distinct(client: &Client, namespace: &str, n: usize) {
    let addresses = CAPI.addresses(client, namespace).list(&Default::default()).await.expect("list").items;
    let distinct: HashSet<String> = addresses.iter().map(address_of).collect();
    assert_eq!((addresses.len(), distinct.len()), (n, n), "one distinct address per bound claim");
}

/// The claim counts a bench runs: the comma-separated list in `variable`, else `default`.
pub fn sizes(variable: &str, default: &[usize]) -> Vec<usize> {
    std::env::var(variable)
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| default.to_vec())
}

/// What one phase of a bench measured.
#[derive(Clone, Copy, Debug)]
pub struct Phase {
    pub claims_per_second: f64,
    /// The API server's CPU time during the phase, per claim.
    pub apiserver_ms_per_claim: f64,
}

/// Runs `phase` for `n` claims, timing it and reading the API server's (pid `apiserver`) CPU time around it.
pub async fn measure(apiserver: u32, n: usize, phase: impl Future<Output = ()>) -> Phase {
    let (cpu, started) = (cpu_seconds(apiserver), Instant::now());
    phase.await;
    let (elapsed, cpu) = (started.elapsed().as_secs_f64(), cpu_seconds(apiserver) - cpu);
    Phase { claims_per_second: n as f64 / elapsed, apiserver_ms_per_claim: cpu * 1000.0 / n as f64 }
}
