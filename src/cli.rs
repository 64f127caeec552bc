//! Command-line flags of the manager.

use std::path::PathBuf;

#[derive(clap::Parser, Debug, Clone)]
#[command(name = "manager", version, about = "Cluster API IPAM provider for in-cluster pools")]
pub struct Args {
    /// Path to a kubeconfig. Only required if out-of-cluster.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Log format: json (ISO-8601 UTC timestamps, for log aggregators) or text (human-readable).
    #[arg(long, value_enum, default_value_t = LogFormat::Json)]
    pub log_format: LogFormat,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Json,
    Text,
}
