//! The one way this process serves HTTPS (webhooks, diagnostics): TLS with the options of `--tls-*`, and bounds on what a
//! client can make it hold, since nothing but a NetworkPolicy keeps others from its ports:
//!
//! - at most [`Limits::max_connections`] connections at once (more are closed at once);
//! - a TLS handshake within 5 s, request headers within [`Limits::header_read_timeout`] (which is also how long an
//!   idle HTTP/1 keep-alive connection stays open), the first request within 10 s;
//! - HTTP/2: at most 32 concurrent streams per connection, and pings that close a dead peer's connection.
//!
//! Request bodies and per-request work are bounded where the requests are handled ([`BodyLimit`]).

pub mod diagnostics;
pub mod tls;

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum_server::accept::Accept;
use axum_server::tls_rustls::{RustlsAcceptor, RustlsConfig};
use hyper_util::rt::TokioTimer;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

/// What one server lets its clients hold.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self { max_connections: 256, header_read_timeout: Duration::from_secs(10) }
    }
}

const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
const FIRST_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `router` over TLS on `addr` until `stop` (then drains for `drain`); `on_listening` fires once bound.
pub async fn serve_tls(
    addr: SocketAddr,
    tls: RustlsConfig,
    router: Router,
    limits: Limits,
    drain: Duration,
    stop: CancellationToken,
    on_listening: impl FnOnce(SocketAddr) + Send + 'static,
) -> io::Result<()> {
    let handle = axum_server::Handle::new();
    let shutdown = handle.clone();
    let listening = handle.clone();
    let acceptor = Capped {
        inner: RustlsAcceptor::new(tls).handshake_timeout(TLS_HANDSHAKE_TIMEOUT),
        slots: Arc::new(Semaphore::new(limits.max_connections)),
    };
    let mut server =
        axum_server::bind(addr).acceptor(acceptor).handle(handle).first_request_timeout(FIRST_REQUEST_TIMEOUT);
    let builder = server.http_builder();
    builder.http1().timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(32)
        .keep_alive_interval(Some(Duration::from_secs(30)))
        .keep_alive_timeout(Duration::from_secs(10));
    let serving = server.serve(router.into_make_service());
    tokio::pin!(serving);
    let announced = async move {
        if let Some(bound) = listening.listening().await {
            on_listening(bound);
        }
        std::future::pending::<()>().await
    };
    tokio::select! {
        result = &mut serving => return result,
        _ = announced => unreachable!("pending never resolves"),
        _ = stop.cancelled() => shutdown.graceful_shutdown(Some(drain)),
    }
    serving.await
}

/// Accepts a connection only while fewer than the limit are open; the slot is held by the stream until it closes.
#[derive(Clone)]
struct Capped<A> {
    inner: A,
    slots: Arc<Semaphore>,
}

impl<I, S, A> Accept<I, S> for Capped<A>
where
    A: Accept<I, S> + Clone + Send + 'static,
    A::Future: Send + 'static,
    I: Send + 'static,
    S: Send + 'static,
{
    type Stream = Slotted<A::Stream>;
    type Service = A::Service;
    type Future = Pin<Box<dyn Future<Output = io::Result<(Self::Stream, Self::Service)>> + Send>>;

    fn accept(&self, stream: I, service: S) -> Self::Future {
        let Ok(slot) = self.slots.clone().try_acquire_owned() else {
            // Dropping the connection here closes it before any TLS work.
            return Box::pin(async { Err(io::Error::other("connection limit reached")) });
        };
        let accepted = self.inner.accept(stream, service);
        Box::pin(async move {
            let (stream, service) = accepted.await?;
            Ok((Slotted { stream, _slot: slot }, service))
        })
    }
}

/// A connection holding one of the server's slots.
struct Slotted<S> {
    stream: S,
    _slot: OwnedSemaphorePermit,
}

impl<S: AsyncRead + Unpin> AsyncRead for Slotted<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Slotted<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

/// Bounds the requests one route handles at once and the body each may send, so that the memory a client can make
/// the process spend is `permits × max_body × (the cost of parsing a byte)`, whoever sends what.
#[derive(Clone)]
pub struct BodyLimit {
    permits: Arc<Semaphore>,
    max_body: usize,
}

/// How long a request waits for a free permit before it is turned away (503), and how long its body may take.
const PERMIT_WAIT: Duration = Duration::from_secs(10);
const BODY_TIMEOUT: Duration = Duration::from_secs(10);

impl BodyLimit {
    pub fn new(concurrent: usize, max_body: usize) -> Self {
        Self { permits: Arc::new(Semaphore::new(concurrent)), max_body }
    }

    /// Reads a body under the limits: 413 when it is too large, 408 when it is too slow, 503 when too many requests
    /// are being handled. The permit is held until the returned guard drops (after the handler is done).
    pub async fn read(&self, body: Body) -> Result<(Bytes, OwnedSemaphorePermit), Response> {
        let permit = tokio::time::timeout(PERMIT_WAIT, self.permits.clone().acquire_owned())
            .await
            .map_err(|_| (StatusCode::SERVICE_UNAVAILABLE, "too many requests at once; retry").into_response())?
            .map_err(|_| (StatusCode::SERVICE_UNAVAILABLE, "shutting down").into_response())?;
        let bytes = tokio::time::timeout(BODY_TIMEOUT, axum::body::to_bytes(body, self.max_body))
            .await
            .map_err(|_| (StatusCode::REQUEST_TIMEOUT, "the request body was not sent in time").into_response())?
            .map_err(|_| {
                let message = format!("the request body is larger than {} bytes", self.max_body);
                (StatusCode::PAYLOAD_TOO_LARGE, message).into_response()
            })?;
        Ok((bytes, permit))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bodies_over_the_limit_get_413_and_permits_bound_the_requests_at_once() {
        let limit = BodyLimit::new(1, 10);
        let (bytes, permit) = limit.read(Body::from("0123456789")).await.expect("at the limit");
        assert_eq!(&bytes[..], b"0123456789");
        drop(permit);
        let refused = limit.read(Body::from("0123456789a")).await.expect_err("over the limit");
        assert_eq!(refused.status(), StatusCode::PAYLOAD_TOO_LARGE);
        let (_, held) = limit.read(Body::from("x")).await.expect("a permit");
        tokio::time::pause();
        let waiting = limit.read(Body::from("y"));
        let turned_away = waiting.await.expect_err("no permit within the wait");
        assert_eq!(turned_away.status(), StatusCode::SERVICE_UNAVAILABLE);
        drop(held);
    }
}
