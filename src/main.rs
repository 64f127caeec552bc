//! The `manager` binary: the container entrypoint `/manager`.
#![forbid(unsafe_code)]

use clap::Parser;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = capi_ipam::cli::Args::parse();
    capi_ipam::manager::main(args).await
}
