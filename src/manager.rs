//! The manager process: connects to the API server and runs until it is told to stop.

use std::process::ExitCode;

use anyhow::Context as _;
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tracing::{error, info};

use crate::cli::Args;

pub async fn main(args: Args) -> ExitCode {
    crate::telemetry::init(args.log_format);
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            error!(error = format!("{e:#}"), "manager failed");
            ExitCode::FAILURE
        }
    }
}

async fn client(args: &Args) -> anyhow::Result<Client> {
    let config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig =
                Kubeconfig::read_from(path).with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?
        }
        None => kube::Config::infer().await?,
    };
    Ok(Client::try_from(config)?)
}

async fn run(args: Args) -> anyhow::Result<()> {
    let client = client(&args).await?;
    let version = client.apiserver_version().await.context("reading the API server version")?;
    info!(server_version = version.git_version, "connected to the API server");
    tokio::signal::ctrl_c().await?;
    info!("shutting down");
    Ok(())
}
