//! The webhook server's TLS: certificate and key from `--webhook-cert-dir` (cert-manager mounts them there), reloaded
//! when their content changes on disk. Files mounted from a Secret are swapped through a symlink, so this polls and
//! compares content hashes instead of watching inodes. A failed reload keeps the previous certificate.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum_server::tls_rustls::RustlsConfig;
use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// TLS settings of `--tls-min-version` and `--tls-cipher-suites` (Go names, as in controller-runtime).
#[derive(Clone, Debug)]
pub struct TlsOptions {
    pub min_version: TlsVersion,
    /// Empty: the library's defaults.
    pub cipher_suites: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsVersion {
    Tls12,
    Tls13,
}

impl std::str::FromStr for TlsVersion {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "VersionTLS12" => Ok(TlsVersion::Tls12),
            "VersionTLS13" => Ok(TlsVersion::Tls13),
            other => Err(format!("unsupported TLS version {other:?}: use VersionTLS12 or VersionTLS13")),
        }
    }
}

/// Where the serving certificate lives.
#[derive(Clone, Debug)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl CertFiles {
    pub fn new(dir: &Path, cert_name: &str, key_name: &str) -> Self {
        Self { cert: dir.join(cert_name), key: dir.join(key_name) }
    }

    async fn read(&self) -> anyhow::Result<(Vec<u8>, Vec<u8>)> {
        let cert = tokio::fs::read(&self.cert).await.map_err(|e| anyhow::anyhow!("{}: {e}", self.cert.display()))?;
        let key = tokio::fs::read(&self.key).await.map_err(|e| anyhow::anyhow!("{}: {e}", self.key.display()))?;
        Ok((cert, key))
    }
}

/// Installs ring as the process-wide rustls provider (kube's client and our servers share it).
pub fn install_crypto_provider() {
    // Err means it is installed already, which is what we want.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

fn provider(options: &TlsOptions) -> anyhow::Result<CryptoProvider> {
    let mut provider = rustls::crypto::ring::default_provider();
    if !options.cipher_suites.is_empty() {
        let mut chosen = Vec::new();
        for name in &options.cipher_suites {
            let suite = provider
                .cipher_suites
                .iter()
                .find(|s| go_name(s.suite()).as_deref() == Some(name.as_str()))
                .ok_or_else(|| anyhow::anyhow!("--tls-cipher-suites: unsupported cipher suite {name:?}"))?;
            chosen.push(*suite);
        }
        // TLS 1.3 suites are not configurable in Go either: keep them all.
        chosen.extend(provider.cipher_suites.iter().filter(|s| s.version() == &rustls::version::TLS13).copied());
        provider.cipher_suites = chosen;
    }
    Ok(provider)
}

/// The Go (IANA) name of a TLS 1.2 suite, as `--tls-cipher-suites` takes it.
fn go_name(suite: rustls::CipherSuite) -> Option<String> {
    let debug = format!("{suite:?}");
    debug.starts_with("TLS_ECDHE_").then_some(debug)
}

/// Builds a server config from PEM bytes.
pub fn server_config(cert: &[u8], key: &[u8], options: &TlsOptions) -> anyhow::Result<Arc<ServerConfig>> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert)
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("parsing the serving certificate: {e}"))?;
    anyhow::ensure!(!certs.is_empty(), "the serving certificate file holds no certificate");
    let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| anyhow::anyhow!("parsing the serving key: {e}"))?;
    let versions: &[&rustls::SupportedProtocolVersion] = match options.min_version {
        TlsVersion::Tls12 => &[&rustls::version::TLS13, &rustls::version::TLS12],
        TlsVersion::Tls13 => &[&rustls::version::TLS13],
    };
    let mut config = ServerConfig::builder_with_provider(Arc::new(provider(options)?))
        .with_protocol_versions(versions)?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Loads the certificate, and keeps reloading it until `stop` whenever the files' content changes.
pub async fn load_and_watch(
    files: CertFiles,
    options: TlsOptions,
    poll: Duration,
    stop: CancellationToken,
) -> anyhow::Result<RustlsConfig> {
    let (cert, key) = files.read().await?;
    let rustls = RustlsConfig::from_config(server_config(&cert, &key, &options)?);
    let handle = rustls.clone();
    let mut last = hash(&cert, &key);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(poll);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            let Ok((cert, key)) = files.read().await else { continue };
            let h = hash(&cert, &key);
            if h == last {
                continue;
            }
            // cert-manager writes the two files one after the other; an unmatched pair fails and is retried.
            match server_config(&cert, &key, &options) {
                Ok(config) => {
                    handle.reload_from_config(config);
                    last = h;
                    info!(cert = %files.cert.display(), "reloaded the serving certificate");
                }
                Err(e) => warn!(error = %e, "the new serving certificate is not usable yet; keeping the old one"),
            }
        }
    });
    Ok(rustls)
}

fn hash(cert: &[u8], key: &[u8]) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
    BuildHasherDefault::<DefaultHasher>::default().hash_one((cert, key))
}
