//! The webhook server: admission (defaulting and validation) for the four pool kinds and CRD conversion, over HTTPS.

pub mod admission;
pub mod conversion;
pub mod routes;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::server::{self, BodyLimit, Limits};
use admission::AdmissionContext;
use prometheus_client::metrics::gauge::Gauge;
use routes::{CONVERT_PATH, admission_routes};

/// Request bodies above this size get 413. It is the API server's own limit on a request body, so any review of an
/// object the API server accepted fits; the CRD schema's caps keep our pools far smaller.
pub const MAX_BODY: usize = 3 * 1024 * 1024;

/// Reviews parsed at once (others wait up to 10 s, then get 503): with [`MAX_BODY`] this bounds the memory that
/// reviews can take, whoever sends them. The API server sends one review per admission request and retries.
pub const CONCURRENT_REVIEWS: usize = 4;

fn json_response(value: serde_json::Value) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], value.to_string()).into_response()
}

/// The router: one route per entry of the route table, plus `/convert`. Built without TLS so tests can drive it.
pub fn router(ctx: Arc<AdmissionContext>, metrics: Arc<Metrics>) -> Router {
    let limit = BodyLimit::new(CONCURRENT_REVIEWS, MAX_BODY);
    let mut router = Router::new();
    for route in admission_routes() {
        let (ctx, metrics, path, limit) = (ctx.clone(), metrics.clone(), route.path(), limit.clone());
        metrics.controller_runtime().webhook_served(&path);
        router = router.route(
            &route.path(),
            post(move |body: Body| {
                instrumented(metrics, path, async move {
                    let (body, _permit) = match limit.read(body).await {
                        Ok(read) => read,
                        Err(refused) => return (refused, "refused"),
                    };
                    let (review, outcome) = admission::review(&ctx, route, &body).await;
                    (json_response(review), outcome.result_label())
                })
            }),
        );
    }
    metrics.controller_runtime().webhook_served(CONVERT_PATH);
    router
        .route(
            CONVERT_PATH,
            post(move |body: Body| {
                instrumented(metrics, CONVERT_PATH.to_owned(), async move {
                    let (body, _permit) = match limit.read(body).await {
                        Ok(read) => read,
                        Err(refused) => return (refused, "refused"),
                    };
                    let (review, ok) = conversion::review(&body);
                    (json_response(review), if ok { "converted" } else { "failed" })
                })
            }),
        )
        // The body is read by `BodyLimit`, which answers 413 itself; axum's own default limit (2 MiB) is lifted.
        .layer(axum::extract::DefaultBodyLimit::disable())
        .fallback(|| async { (StatusCode::NOT_FOUND, "no webhook at this path") })
}

/// Serves one request of the webhook at `path`, counted while in flight and when answered: our result label, and
/// the status code and latency controller-runtime's series have.
async fn instrumented(
    metrics: Arc<Metrics>,
    path: String,
    serve: impl std::future::Future<Output = (Response, &'static str)>,
) -> Response {
    /// Leaves the in-flight count also when the request is dropped unanswered (its client went).
    struct InFlight(Gauge);
    impl Drop for InFlight {
        fn drop(&mut self) {
            self.0.dec();
        }
    }
    let started = Instant::now();
    let in_flight = InFlight(metrics.controller_runtime().webhook_in_flight(&path));
    in_flight.0.inc();
    let (response, result) = serve.await;
    drop(in_flight);
    metrics.webhook(&path, result, response.status().as_u16(), started.elapsed());
    response
}

/// Serves `router` over TLS on `addr` until `stop`; `on_listening` fires once the socket is bound.
pub async fn serve(
    addr: SocketAddr,
    tls: axum_server::tls_rustls::RustlsConfig,
    router: Router,
    stop: CancellationToken,
    on_listening: impl FnOnce(SocketAddr) + Send + 'static,
) -> anyhow::Result<()> {
    server::serve_tls(addr, tls, router, Limits::default(), Duration::from_secs(5), stop, on_listening)
        .await
        .map_err(|e| anyhow::anyhow!("webhook server on {addr}: {e}"))
}
