//! The `manager` binary: the container entrypoint `/manager`.
#![forbid(unsafe_code)]

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = capi_ipam::cli::Args::from_command_line();
    capi_ipam::manager::main(args).await
}
