//! The probe server (`/healthz`, `/readyz`, plain HTTP) and the metrics server (`/metrics`: HTTPS with TokenReview and
//! SubjectAccessReview authorization by default, plain HTTP with `--insecure-diagnostics`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum_server::tls_rustls::RustlsConfig;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::sync::{Mutex, Semaphore};
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::metrics::Metrics;
use crate::server::tls::{TlsOptions, server_config};

/// Readiness: the webhook server serves (when enabled) and, on the leader, the controllers' caches are synced. Set
/// by `crate::manager` only, which starts both.
#[derive(Debug, Default)]
pub struct Readiness {
    webhooks_serving: AtomicBool,
    caches_synced: AtomicBool,
}

impl Readiness {
    /// The webhook server is bound (or disabled).
    pub fn webhooks_serving(&self) {
        self.webhooks_serving.store(true, Ordering::Release);
    }

    /// Whether the controllers' caches are synced (a replica that does not lead has none to wait for).
    pub fn set_caches_synced(&self, synced: bool) {
        self.caches_synced.store(synced, Ordering::Release);
    }

    pub fn is_ready(&self) -> bool {
        self.webhooks_serving.load(Ordering::Acquire) && self.caches_synced.load(Ordering::Acquire)
    }
}

pub fn probe_router(readiness: Arc<Readiness>) -> Router {
    Router::new().route("/healthz", get(|| async { "ok" })).route(
        "/readyz",
        get(move || {
            let readiness = readiness.clone();
            async move {
                if readiness.is_ready() {
                    (StatusCode::OK, "ok")
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "not ready: webhook server or caches not up yet")
                }
            }
        }),
    )
}

/// Serves plain HTTP until `stop`.
pub async fn serve_http(addr: SocketAddr, router: Router, stop: CancellationToken) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| anyhow::anyhow!("binding {addr}: {e}"))?;
    axum::serve(listener, router).with_graceful_shutdown(stop.cancelled_owned()).await?;
    Ok(())
}

/// Decides who may read `/metrics`: authenticated through a TokenReview, authorized through a SubjectAccessReview
/// for `get` on the non-resource URL `/metrics` (as controller-runtime's secure metrics do).
///
/// Anyone who reaches the port can send tokens, so what a token can cost is bounded: only allowed tokens are cached
/// (for a minute, keyed by their SHA-256, at most [`AUTH_CACHE_ENTRIES`]); a token longer than [`MAX_TOKEN`] is
/// refused unread; at most [`CONCURRENT_REVIEWS`] reviews are in flight, further requests get 503 at once.
pub struct MetricsAuth {
    client: Client,
    allowed: Mutex<HashMap<[u8; 32], Instant>>,
    reviews: Semaphore,
}

const AUTH_CACHE_TTL: Duration = Duration::from_secs(60);
const AUTH_CACHE_ENTRIES: usize = 1024;
/// Service account tokens are about 1 KiB, OIDC tokens a few; anything longer is not a token.
const MAX_TOKEN: usize = 16 * 1024;
const CONCURRENT_REVIEWS: usize = 4;

/// The outcome of one authorization.
enum Decision {
    Allowed,
    Denied,
    Busy,
}

impl MetricsAuth {
    pub fn new(client: Client) -> Self {
        Self { client, allowed: Mutex::new(HashMap::new()), reviews: Semaphore::new(CONCURRENT_REVIEWS) }
    }

    fn key(token: &str) -> [u8; 32] {
        let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
        let mut key = [0u8; 32];
        key.copy_from_slice(digest.as_ref());
        key
    }

    async fn decide(&self, token: &str) -> Result<Decision, kube::Error> {
        if token.len() > MAX_TOKEN {
            return Ok(Decision::Denied);
        }
        let key = Self::key(token);
        if self.allowed.lock().await.get(&key).is_some_and(|at| at.elapsed() < AUTH_CACHE_TTL) {
            return Ok(Decision::Allowed);
        }
        let Ok(_review) = self.reviews.try_acquire() else { return Ok(Decision::Busy) };
        if !self.review(token).await? {
            return Ok(Decision::Denied);
        }
        let mut allowed = self.allowed.lock().await;
        allowed.retain(|_, at| at.elapsed() < AUTH_CACHE_TTL);
        if allowed.len() >= AUTH_CACHE_ENTRIES {
            // Full of live entries: forget the oldest (scrapers are few; this only happens under a flood).
            if let Some(oldest) = allowed.iter().min_by_key(|(_, at)| **at).map(|(k, _)| *k) {
                allowed.remove(&oldest);
            }
        }
        allowed.insert(key, Instant::now());
        Ok(Decision::Allowed)
    }

    /// A TokenReview, then a SubjectAccessReview for `get /metrics`.
    async fn review(&self, token: &str) -> Result<bool, kube::Error> {
        let review = TokenReview {
            spec: TokenReviewSpec { token: token.to_owned(), ..Default::default() },
            ..Default::default()
        };
        let reviewed = Api::<TokenReview>::all(self.client.clone()).create(&PostParams::default(), &review).await?;
        let status = reviewed.status.unwrap_or_default();
        if status.authenticated != Some(true) {
            return Ok(false);
        }
        let user = status.user.unwrap_or_default();
        let sar = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username,
                groups: user.groups,
                uid: user.uid,
                extra: user.extra,
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some("/metrics".to_owned()),
                    verb: Some("get".to_owned()),
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let decided = Api::<SubjectAccessReview>::all(self.client.clone()).create(&PostParams::default(), &sar).await?;
        Ok(decided.status.is_some_and(|s| s.allowed))
    }
}

#[derive(Clone)]
struct MetricsState {
    metrics: Arc<Metrics>,
    auth: Option<Arc<MetricsAuth>>,
}

async fn metrics_handler(State(state): State<MetricsState>, headers: HeaderMap) -> Response {
    if let Some(auth) = &state.auth {
        let token = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim)
            .filter(|t| !t.is_empty());
        let Some(token) = token else {
            return (StatusCode::UNAUTHORIZED, "Unauthorized: a bearer token is required").into_response();
        };
        match auth.decide(token).await {
            Ok(Decision::Allowed) => {}
            Ok(Decision::Denied) => {
                return (StatusCode::FORBIDDEN, "Forbidden: get on /metrics is not allowed").into_response();
            }
            Ok(Decision::Busy) => {
                return (StatusCode::SERVICE_UNAVAILABLE, "too many authorizations at once; retry").into_response();
            }
            Err(e) => {
                warn!(error = %e, "authorizing a metrics request");
                return (StatusCode::INTERNAL_SERVER_ERROR, "Authorization error").into_response();
            }
        }
    }
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], state.metrics.encode())
        .into_response()
}

pub fn metrics_router(metrics: Arc<Metrics>, auth: Option<Arc<MetricsAuth>>) -> Router {
    Router::new().route("/metrics", get(metrics_handler)).with_state(MetricsState { metrics, auth })
}

/// A self-signed serving certificate made at start (as controller-runtime does when no certificate is given).
pub fn self_signed(tls: &TlsOptions) -> anyhow::Result<RustlsConfig> {
    let generated = rcgen::generate_simple_self_signed(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])?;
    let config = server_config(generated.cert.pem().as_bytes(), generated.signing_key.serialize_pem().as_bytes(), tls)?;
    Ok(RustlsConfig::from_config(config))
}

/// Serves the metrics router over HTTPS until `stop`.
pub async fn serve_https(
    addr: SocketAddr,
    router: Router,
    tls: RustlsConfig,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    crate::server::serve_tls(addr, tls, router, crate::server::Limits::default(), Duration::from_secs(2), stop, |_| {})
        .await
        .map_err(|e| anyhow::anyhow!("metrics server on {addr}: {e}"))
}
