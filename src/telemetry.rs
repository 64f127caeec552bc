//! Structured logs (docs/compatibility.md D15): ISO-8601 UTC timestamps, JSON by default, text for local runs.

use tracing_subscriber::{EnvFilter, fmt, prelude::*};

/// `--log-format` (`--logging-format`, the Go provider's name).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Json,
    Text,
}

impl LogFormat {
    pub fn name(self) -> &'static str {
        match self {
            LogFormat::Json => "json",
            LogFormat::Text => "text",
        }
    }
}

/// Installs the global subscriber. The filter is `RUST_LOG` when set, else `--log-level`. The kube client's own
/// logging is off unless the filter names it (`kube_client=debug`): it logs every failed request as an ERROR that
/// names neither the object nor the operation, while every error reaches our code, which says what failed on what
/// (and an unreachable API server once, not per request).
pub fn init(format: LogFormat, level: &str) {
    let directives =
        std::env::var("RUST_LOG").unwrap_or_else(|_| format!("kube=warn,kube_client=off,kube_runtime=warn,{level}"));
    let filter = EnvFilter::try_new(&directives).unwrap_or_else(|e| {
        eprintln!("invalid log filter {directives:?} ({e}); using info");
        EnvFilter::new("info")
    });
    let registry = tracing_subscriber::registry().with(filter);
    // The default timer prints RFC 3339 UTC with microseconds (2026-11-30T12:00:00.123456Z).
    match format {
        LogFormat::Json => {
            registry.with(fmt::layer().json().flatten_event(true).with_current_span(true).with_span_list(false)).init()
        }
        LogFormat::Text => registry
            .with(fmt::layer().with_target(false).with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout())))
            .init(),
    }
}
