//! The manager process: every replica serves webhooks, probes and metrics; only the leader (with `--leader-elect`)
//! runs the controllers. Every long-running task is supervised: if one ends unexpectedly, or leadership is lost, the
//! process exits non-zero so that Kubernetes restarts it. SIGTERM and Ctrl-C shut down gracefully and release the
//! lease so that a standby takes over at once.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use crate::runtime::supervisor::Supervisor;
use anyhow::Context as _;
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::cli::{Args, bind_address};
use crate::controllers::{self, ControllerOptions};
use crate::leader::{Elector, Fence, TermEnd, Timings};
use crate::metrics::Metrics;
use crate::server::diagnostics::{self, MetricsAuth, Readiness};
use crate::server::tls;
use crate::webhooks::{self, admission::AdmissionContext};

/// The Lease the Go provider uses too, so a migration never runs two allocators at once (docs/compatibility.md D1).
pub const LEADER_ELECTION_ID: &str = "7bb7acb4.ipam.cluster.x-k8s.io";
const CERT_POLL: Duration = Duration::from_secs(2);

pub async fn main(args: Args) -> ExitCode {
    crate::telemetry::init(args.log_format(), &args.log_filter());
    for notice in args.notices() {
        info!(notice, "a flag this manager takes differently");
    }
    tls::install_crypto_provider();
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            error!(error = format!("{e:#}"), "manager failed");
            ExitCode::FAILURE
        }
    }
}

/// `capi-ipam-in-cluster-manager/v<version> (<os>/<arch>)`, as client-go names its callers.
pub fn user_agent() -> String {
    let (os, arch) = (std::env::consts::OS, std::env::consts::ARCH);
    format!("capi-ipam-in-cluster-manager/v{} ({os}/{arch})", env!("CARGO_PKG_VERSION"))
}

async fn client(args: &Args, metrics: &Arc<Metrics>) -> anyhow::Result<Client> {
    let mut config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig =
                Kubeconfig::read_from(path).with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?
        }
        None => kube::Config::infer().await?,
    };
    // A request that gets no answer for a minute fails and is retried, instead of holding a worker forever on a
    // dead connection. The clock starts when the request is sent, not when its pooled connection went idle; watches
    // end sooner on the server's side (`runtime::watch::config`).
    config.read_timeout = Some(Duration::from_secs(60));
    config.reset_reader_on_write = true;
    // Audit logs and API priority and fairness tell our requests apart by it.
    config.headers.push((axum::http::header::USER_AGENT, axum::http::HeaderValue::from_str(&user_agent())?));
    // Every request counted as client-go counts it (`rest_client_requests_total`).
    let host = config.cluster_url.authority().map(ToString::to_string).unwrap_or_default();
    let counted = crate::metrics::rest_client::CountRequestsLayer::new(metrics.clone(), &host);
    Ok(kube::client::ClientBuilder::try_from(config)?.with_layer(&counted).build())
}

/// The Lease's namespace and name: `--leader-election-id=<namespace>/<name>`, else `--leader-election-namespace` (or
/// the pod's namespace) and `--leader-election-id`.
fn leader_election_lease(args: &Args) -> (String, String) {
    match args.leader_election_id.split_once('/') {
        Some((namespace, name)) if !namespace.is_empty() && !name.is_empty() => (namespace.to_owned(), name.to_owned()),
        _ => (leader_election_namespace(args), args.leader_election_id.clone()),
    }
}

fn leader_election_namespace(args: &Args) -> String {
    args.leader_election_namespace
        .clone()
        .filter(|n| !n.is_empty())
        .or_else(|| std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace").ok())
        .map(|n| n.trim().to_owned())
        .unwrap_or_else(|| "default".to_owned())
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => info!("SIGTERM received"),
                    _ = tokio::signal::ctrl_c() => info!("interrupt received"),
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    let timings = args.leader_election_timings().map_err(anyhow::Error::msg)?;
    let metrics = Arc::new(Metrics::new());
    let client = client(&args, &metrics).await?;
    let version = client.apiserver_version().await.context("reading the API server version")?;
    info!(server_version = version.git_version, "connected to the API server");
    let capi = crate::capi::discover(&client).await?;
    info!(ipam = capi.ipam.version(), cluster = capi.cluster.map(|v| v.version()), "Cluster API versions in use");

    let readiness = Arc::new(Readiness::default());
    let stop = CancellationToken::new();
    let tls_options = tls::TlsOptions {
        min_version: args.tls_min_version,
        cipher_suites: args.tls_cipher_suites.iter().filter(|s| !s.is_empty()).cloned().collect(),
    };
    let mut tasks = Supervisor::default();

    if let Some(addr) =
        bind_address("health-probe-bind-address", &args.health_probe_bind_address).map_err(anyhow::Error::msg)?
    {
        let (router, stop) = (diagnostics::probe_router(readiness.clone()), stop.clone());
        tasks.spawn("probe server", diagnostics::serve_http(addr, router, stop));
        info!(%addr, "serving /healthz and /readyz");
    }
    let (metrics_flag, metrics_addr, insecure_metrics) = args.metrics_endpoint();
    if let Some(addr) = bind_address(metrics_flag, metrics_addr).map_err(anyhow::Error::msg)? {
        let stop = stop.clone();
        if insecure_metrics {
            let router = diagnostics::metrics_router(metrics.clone(), None);
            tasks.spawn("metrics server", diagnostics::serve_http(addr, router, stop));
            info!(%addr, flag = metrics_flag, "serving /metrics over plain HTTP");
        } else {
            let router = diagnostics::metrics_router(metrics.clone(), Some(Arc::new(MetricsAuth::new(client.clone()))));
            let rustls = if args.metrics_cert_dir.is_empty() {
                diagnostics::self_signed(&tls_options)?
            } else {
                let dir = std::path::Path::new(&args.metrics_cert_dir);
                let files = tls::CertFiles::new(dir, &args.metrics_cert_name, &args.metrics_key_name);
                tls::load_and_watch(files, tls_options.clone(), CERT_POLL, stop.clone())
                    .await
                    .context("loading the metrics serving certificate")?
            };
            tasks.spawn("metrics server", diagnostics::serve_https(addr, router, rustls, stop));
            info!(%addr, "serving /metrics over HTTPS with TokenReview/SubjectAccessReview authorization");
        }
    }
    match args.webhook_addr().map_err(anyhow::Error::msg)? {
        Some(addr) => {
            let files =
                tls::CertFiles::new(&args.webhook_cert_dir(), args.webhook_cert_name(), args.webhook_key_name());
            let rustls = tls::load_and_watch(files, tls_options.clone(), CERT_POLL, stop.clone())
                .await
                .context("loading the webhook serving certificate")?;
            let ctx = Arc::new(AdmissionContext {
                reject_overlapping_pools: args.reject_overlapping_pools,
                reject_gateway_outside_subnet: args.reject_gateway_outside_subnet,
                ..AdmissionContext::live(client.clone(), capi.ipam)
            });
            let router = webhooks::router(ctx, metrics.clone());
            let (stop, ready) = (stop.clone(), readiness.clone());
            tasks.spawn(
                "webhook server",
                webhooks::serve(addr, rustls, router, stop, move |bound| {
                    info!(addr = %bound, "serving webhooks");
                    ready.webhooks_serving();
                }),
            );
        }
        None => {
            info!("webhook server disabled (--webhook-port=0)");
            readiness.webhooks_serving();
        }
    }

    let options = ControllerOptions {
        namespace: Some(args.namespace.clone()).filter(|n| !n.is_empty()),
        watch_filter: Some(args.watch_filter.clone()).filter(|f| !f.is_empty()),
        capi,
        concurrency: args.claim_concurrency().max(1),
        orphan_release_delay: Duration::from_secs(args.orphan_release_delay),
        restore_wait: Duration::from_secs(args.restore_wait),
        moved_away_max_bytes: crate::controllers::moved_away::MAX_BYTES,
    };
    if args.leader_elect {
        // A replica that does not lead has no caches to wait for.
        readiness.set_caches_synced(true);
        let lease = leader_election_lease(&args);
        let (client, metrics, readiness, stop) = (client.clone(), metrics.clone(), readiness.clone(), stop.clone());
        tasks.spawn("leader election", lead(client, lease, timings, options, metrics, readiness, stop));
    } else {
        let (client, metrics, readiness, stop) = (client.clone(), metrics.clone(), readiness.clone(), stop.clone());
        let synced = move || readiness.set_caches_synced(true);
        tasks.spawn("controllers", controllers::run(client, options, Fence::none(), metrics, synced, stop));
    }

    supervise(tasks, stop).await
}

/// Waits for a signal or for the first task to end (a failure), then stops every task.
async fn supervise(mut tasks: Supervisor, stop: CancellationToken) -> anyhow::Result<()> {
    let ended = tasks.until(shutdown_signal()).await;
    if let Err(e) = &ended {
        error!(error = format!("{e:#}"), "shutting down");
    }
    stop.cancel();
    if !tasks.drain(Duration::from_secs(10)).await {
        warn!("tasks did not stop within 10s");
    }
    info!("stopped");
    ended
}

/// Runs the controllers while this replica holds the Lease (`crate::leader`). A term that ends on the renew deadline
/// (the API server or the network failed) stops every write at once and drops the controllers with all their state;
/// the replica stays a candidate and, when the Lease still names it, resumes as soon as it can renew. A Lease taken by
/// another replica is an error (crash-only, like controller-runtime). On shutdown the Lease is released.
async fn lead(
    client: Client,
    (namespace, lease): (String, String),
    timings: Timings,
    options: ControllerOptions,
    metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let identity = crate::leader::holder_identity(options.watch_filter.as_deref());
    let mut elector = Elector::new(client.clone(), &namespace, &lease, &identity, timings);
    metrics.campaign(&lease);
    info!(%lease, %namespace, %identity, "waiting for leadership");
    let result = loop {
        let Some(fence) = elector.acquire(&stop).await else { break Ok(()) };
        info!(%lease, %identity, "became the leader");
        metrics.set_leading(true);
        readiness.set_caches_synced(false);
        let controllers_stop = stop.child_token();
        let controllers = controllers::run(
            client.clone(),
            options.clone(),
            fence.clone(),
            metrics.clone(),
            {
                let readiness = readiness.clone();
                move || readiness.set_caches_synced(true)
            },
            controllers_stop.clone(),
        );
        let ended = tokio::select! {
            end = elector.keep(&fence, &stop) => Ok(end),
            ended = controllers => Err(ended),
        };
        // The controllers' future is dropped here (or has ended): no write of this term is left in flight.
        controllers_stop.cancel();
        metrics.set_leading(false);
        readiness.set_caches_synced(true);
        match ended {
            Ok(TermEnd::Stopped) => break Ok(()),
            Ok(TermEnd::DeadlinePassed) => {
                metrics.fenced();
                error!(
                    %lease,
                    renew_deadline = ?timings.renew_deadline,
                    "fenced: the lease was not renewed within the renew deadline; stopped allocating and dropped \
                     every cache; retrying as a candidate"
                );
                // The Lease may still name us, and we would take it back at once: first let the writes this term
                // sent land, as another replica would (the margin of an expiry), before a new term lists them.
                tokio::select! {
                    _ = stop.cancelled() => break Ok(()),
                    _ = tokio::time::sleep(timings.lease_duration.saturating_sub(timings.renew_deadline)) => {}
                }
            }
            Ok(TermEnd::Lost { holder }) => {
                break Err(anyhow::anyhow!("lost the leader election lease {lease} to {holder}"));
            }
            Err(Ok(())) if stop.is_cancelled() => break Ok(()),
            Err(Ok(())) => break Err(anyhow::anyhow!("the controllers stopped unexpectedly")),
            Err(Err(e)) => break Err(e),
        }
    };
    if stop.is_cancelled() {
        elector.release().await;
    }
    result
}
