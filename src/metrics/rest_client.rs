//! `rest_client_requests_total{code,method,host}`: a layer in the kube client's stack that counts every request to
//! the API server (watches included) as client-go's metrics adapter does, `<error>` when no answer came.

use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use http::{Request, Response};
use tower::{Layer, Service};

#[derive(Clone)]
pub struct CountRequestsLayer {
    metrics: Arc<super::Metrics>,
    host: Arc<str>,
}

impl CountRequestsLayer {
    /// Counts requests to `host` (the API server's `host:port`, as client-go labels them).
    pub fn new(metrics: Arc<super::Metrics>, host: &str) -> Self {
        Self { metrics, host: host.into() }
    }
}

impl<S> Layer<S> for CountRequestsLayer {
    type Service = CountRequests<S>;

    fn layer(&self, inner: S) -> Self::Service {
        CountRequests { inner, metrics: self.metrics.clone(), host: self.host.clone() }
    }
}

#[derive(Clone)]
pub struct CountRequests<S> {
    inner: S,
    metrics: Arc<super::Metrics>,
    host: Arc<str>,
}

impl<S, B, R> Service<Request<B>> for CountRequests<S>
where
    S: Service<Request<B>, Response = Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let method = request.method().as_str().to_owned();
        let (metrics, host) = (self.metrics.clone(), self.host.clone());
        let answer = self.inner.call(request);
        Box::pin(async move {
            let answer = answer.await;
            let code = match &answer {
                Ok(response) => response.status().as_u16().to_string(),
                Err(_) => "<error>".to_owned(),
            };
            metrics.controller_runtime().rest_request(&code, &method, &host);
            answer
        })
    }
}
