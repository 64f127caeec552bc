//! The controllers: claims get addresses, pools get status.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use kube::Client;
use tokio_util::sync::CancellationToken;

use crate::capi::CapiApis;
use crate::diagnostics::Readiness;
use crate::metrics::Metrics;

/// What the controllers watch.
#[derive(Clone, Debug)]
pub struct ControllerOptions {
    /// `--namespace`: only this namespace (None: all).
    pub namespace: Option<String>,
    /// `--watch-filter`: only objects labelled `cluster.x-k8s.io/watch-filter=<value>`.
    pub watch_filter: Option<String>,
    pub capi: CapiApis,
}

/// Runs the controllers until `stop`.
pub async fn run(
    _client: Client,
    _options: ControllerOptions,
    _metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    readiness.caches_synced.store(true, Ordering::Release);
    stop.cancelled().await;
    Ok(())
}
