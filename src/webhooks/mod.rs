//! The webhook server: admission (defaulting and validation) for the four pool kinds and CRD conversion, over HTTPS.

pub mod admission;
pub mod conversion;
pub mod routes;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use admission::AdmissionContext;
use routes::{CONVERT_PATH, admission_routes};

/// Request bodies above this size are refused (the API server's own limit for webhooks is 3 MiB).
const MAX_BODY: usize = 8 * 1024 * 1024;

fn json_response(value: serde_json::Value) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], value.to_string()).into_response()
}

/// The router: one route per entry of the route table, plus `/convert`. Built without TLS so tests can drive it.
pub fn router(ctx: Arc<AdmissionContext>, metrics: Arc<Metrics>) -> Router {
    let mut router = Router::new();
    for route in admission_routes() {
        let (ctx, metrics, path) = (ctx.clone(), metrics.clone(), route.path());
        router = router.route(
            &route.path(),
            post(move |body: Bytes| async move {
                let started = Instant::now();
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
            post(move |body: Bytes| async move {
                let started = Instant::now();
                let (review, ok) = conversion::review(&body);
                convert_metrics.webhook(CONVERT_PATH, if ok { "converted" } else { "failed" }, started.elapsed());
                json_response(review)
            }),
        )
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
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
    let handle = axum_server::Handle::new();
    let shutdown = handle.clone();
    tokio::spawn(async move {
        stop.cancelled().await;
        shutdown.graceful_shutdown(Some(Duration::from_secs(5)));
    });
    let listening = handle.clone();
    tokio::spawn(async move {
        if let Some(bound) = listening.listening().await {
            on_listening(bound);
        }
    });
    axum_server::bind_rustls(addr, tls)
        .handle(handle)
        .serve(router.into_make_service())
        .await
        .map_err(|e| anyhow::anyhow!("webhook server on {addr}: {e}"))
}
