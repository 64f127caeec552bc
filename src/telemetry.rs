//! Structured logs (decision D15): ISO-8601 UTC timestamps, JSON by default, text for local runs.

use tracing_subscriber::{EnvFilter, fmt, prelude::*};

use crate::cli::LogFormat;

/// Installs the global subscriber. The filter comes from `RUST_LOG`, defaulting to `info` for us and `warn` for kube.
pub fn init(format: LogFormat) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,kube=warn,tower=warn,hyper=warn"));
    let registry = tracing_subscriber::registry().with(filter);
    // The default timer prints RFC 3339 UTC with microseconds (2026-11-30T12:00:00.123456Z).
    match format {
        LogFormat::Json => {
            registry.with(fmt::layer().json().flatten_event(true).with_current_span(true).with_span_list(false)).init()
        }
        LogFormat::Text => registry.with(fmt::layer().with_target(false)).init(),
    }
}
