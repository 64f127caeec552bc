//! The webhook server's TLS: it serves the certificate from the cert folder and picks up a new one written there,
//! without a restart.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use capi_ipam::capi::CapiVersion;
use capi_ipam::metrics::Metrics;
use capi_ipam::server::tls::{CertFiles, TlsOptions, TlsVersion, install_crypto_provider, load_and_watch};
use capi_ipam::webhooks::admission::AdmissionContext;
use capi_ipam::webhooks::{router, serve};
use support::manager::free_port;
use support::{Plane, repo_root};
use tokio_util::sync::CancellationToken;

fn certs(dir: &Path) {
    let status =
        Command::new("bash").arg(repo_root().join("tests/tools/dev-certs.sh")).arg(dir).status().expect("dev-certs");
    assert!(status.success());
}

/// POSTs an empty ConversionReview with curl, trusting `ca`; returns the HTTP status, or None when TLS fails.
fn curl(port: u16, ca: &Path) -> Option<String> {
    let out = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "5", "--cacert"])
        .arg(ca)
        .args(["-X", "POST", "-H", "content-type: application/json", "-d", "{}"])
        .arg(format!("https://127.0.0.1:{port}/convert"))
        .output()
        .expect("curl");
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

// curl runs synchronously here, so the server needs worker threads of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_certificate_is_served_without_a_restart() {
    install_crypto_provider();
    let base = repo_root().join(".dev/tls-test").join(support::unique_name("t"));
    let (served, first, second) = (base.join("served"), base.join("first"), base.join("second"));
    certs(&first);
    certs(&second);
    std::fs::create_dir_all(&served).expect("folder");
    for f in ["tls.crt", "tls.key"] {
        std::fs::copy(first.join(f), served.join(f)).expect("copy");
    }
    let stop = CancellationToken::new();
    let options = TlsOptions { min_version: TlsVersion::Tls12, cipher_suites: vec![] };
    let tls = load_and_watch(
        CertFiles::new(&served, "tls.crt", "tls.key"),
        options,
        Duration::from_millis(100),
        stop.clone(),
    )
    .await
    .expect("load");
    let client = Plane::shared().client().await;
    let ctx = Arc::new(AdmissionContext::live(client, CapiVersion::V1Beta2));
    let port = free_port();
    let server = tokio::spawn(serve(
        ([127, 0, 0, 1], port).into(),
        tls,
        router(ctx, Arc::new(Metrics::new())),
        stop.clone(),
        |_| {},
    ));

    let deadline = Instant::now() + Duration::from_secs(10);
    let first_ca = first.join("ca.crt");
    let second_ca = second.join("ca.crt");
    while curl(port, &first_ca).as_deref() != Some("200") {
        assert!(Instant::now() < deadline, "the server never served the first certificate");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(curl(port, &second_ca), None, "the second CA does not trust the first certificate");

    // Rotate, as cert-manager does: both files change on disk.
    for f in ["tls.key", "tls.crt"] {
        std::fs::copy(second.join(f), served.join(f)).expect("copy");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while curl(port, &second_ca).as_deref() != Some("200") {
        assert!(Instant::now() < deadline, "the rotated certificate was not picked up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(curl(port, &first_ca), None, "the old certificate is gone");

    stop.cancel();
    server.await.expect("join").expect("the server stopped cleanly");
    let _ = std::fs::remove_dir_all(&base);
}
