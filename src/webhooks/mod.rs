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
        router = router.route(
            &route.path(),
            post(move |body: Body| async move {
                let started = Instant::now();
                let (body, _permit) = match limit.read(body).await {
                    Ok(read) => read,
                    Err(refused) => {
                        metrics.webhook(&path, "refused", started.elapsed());
                        return refused;
                    }
                };
                let (review, outcome) = admission::review(&ctx, route, &body).await;
                metrics.webhook(&path, outcome.result_label(), started.elapsed());
                json_response(review)
            }),
        );
    }
    let convert_metrics = metrics.clone();
    router
        .route(
            CONVERT_PATH,
            post(move |body: Body| async move {
                let started = Instant::now();
                let (body, _permit) = match limit.read(body).await {
                    Ok(read) => read,
                    Err(refused) => {
                        convert_metrics.webhook(CONVERT_PATH, "refused", started.elapsed());
                        return refused;
                    }
                };
                let (review, ok) = conversion::review(&body);
                convert_metrics.webhook(CONVERT_PATH, if ok { "converted" } else { "failed" }, started.elapsed());
                json_response(review)
            }),
        )
        // The body is read by `BodyLimit`, which answers 413 itself; axum's own default limit (2 MiB) is lifted.
        .layer(axum::extract::DefaultBodyLimit::disable())
        .fallback(|| async { (StatusCode::NOT_FOUND, "no webhook at this path") })
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
