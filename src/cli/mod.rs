//! Command-line flags of the manager: the Go provider's flags with the same names and defaults (reference §5), plus
//! `--log-format`, `--log-level`, `--reject-overlapping-pools`, `--reject-gateway-outside-subnet`, `--webhook-host` and
//! `--leader-election-namespace`; and every flag the Cluster API Operator can pass a provider ([`compat`]), with our
//! meaning where one exists, else a notice in the log.

pub mod compat;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use crate::server::tls::TlsVersion;
pub use crate::telemetry::LogFormat;

#[derive(clap::Parser, Debug, Clone)]
// A flag given twice takes its last value, as Go's pflag does: the Cluster API Operator appends its flags to the
// Deployment's own.
#[command(
    name = "manager",
    version,
    about = "Cluster API IPAM provider for in-cluster pools",
    args_override_self = true
)]
pub struct Args {
    /// The address the probe endpoints (/healthz, /readyz) bind to; "0" disables them. --health-addr (the Cluster
    /// API Operator's name) is the same flag.
    #[arg(long, alias = "health-addr", default_value = ":8081")]
    pub health_probe_bind_address: String,

    /// Enable leader election: only the holder of the Lease `7bb7acb4.ipam.cluster.x-k8s.io` reconciles; every
    /// replica serves webhooks, probes and metrics.
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "false", action = clap::ArgAction::Set)]
    pub leader_elect: bool,

    /// How long a replica that does not lead waits, after it last saw the leader renew the Lease, before it takes the
    /// Lease over (a Go duration such as 15s).
    #[arg(long, default_value = "15s", value_parser = parse_go_duration)]
    pub leader_elect_lease_duration: Duration,

    /// How long the leader keeps allocating without a successful renewal of the Lease; then it stops every write on
    /// its own clock. Must be shorter than the lease duration: the difference covers clock-rate skew and in-flight
    /// writes.
    #[arg(long, default_value = "10s", value_parser = parse_go_duration)]
    pub leader_elect_renew_deadline: Duration,

    /// How often the leader renews the Lease and a candidate tries to take it.
    #[arg(long, default_value = "2s", value_parser = parse_go_duration)]
    pub leader_elect_retry_period: Duration,

    /// The namespace of the leader-election Lease (default: the pod's namespace).
    #[arg(long, env = "POD_NAMESPACE")]
    pub leader_election_namespace: Option<String>,

    /// The leader-election Lease, `<name>` or `<namespace>/<name>` (as the Cluster API Operator passes it). Managers
    /// with different --watch-filter values in one namespace each need their own.
    #[arg(long, default_value = "7bb7acb4.ipam.cluster.x-k8s.io")]
    pub leader_election_id: String,

    /// Only watch this namespace (default: all namespaces).
    #[arg(long, default_value = "")]
    pub namespace: String,

    /// Only reconcile objects labelled cluster.x-k8s.io/watch-filter=<value>.
    #[arg(long, default_value = "")]
    pub watch_filter: String,

    /// The webhook server port; 0 disables the webhook server.
    #[arg(long, default_value_t = 9443)]
    pub webhook_port: u16,

    /// The address the webhook server binds to (default: all interfaces).
    #[arg(long, default_value = "")]
    pub webhook_host: String,

    /// The folder holding the webhook serving certificate (default /tmp/k8s-webhook-server/serving-certs).
    #[arg(long, default_value = "")]
    pub webhook_cert_dir: String,

    /// The certificate file in --webhook-cert-dir (default tls.crt).
    #[arg(long, default_value = "")]
    pub webhook_cert_name: String,

    /// The key file in --webhook-cert-dir (default tls.key).
    #[arg(long, default_value = "")]
    pub webhook_key_name: String,

    /// The address the metrics endpoint binds to; "0" disables it.
    #[arg(long, default_value = ":8443")]
    pub diagnostics_address: String,

    /// Deprecated by Cluster API for --diagnostics-address: serves metrics on this address over plain HTTP without
    /// authentication, as Cluster API's managers did (it replaces --diagnostics-address).
    #[arg(long)]
    pub metrics_bind_addr: Option<String>,

    /// Serve metrics over plain HTTP without authentication (default: HTTPS with TokenReview and
    /// SubjectAccessReview authorization).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "false", action = clap::ArgAction::Set)]
    pub insecure_diagnostics: bool,

    /// A folder holding the metrics serving certificate (reloaded when it changes); empty: a self-signed certificate
    /// made at start. The Helm chart mounts a cert-manager certificate here so that Prometheus can verify it.
    #[arg(long, default_value = "")]
    pub metrics_cert_dir: String,

    /// The certificate file in --metrics-cert-dir.
    #[arg(long, default_value = "tls.crt")]
    pub metrics_cert_name: String,

    /// The key file in --metrics-cert-dir.
    #[arg(long, default_value = "tls.key")]
    pub metrics_key_name: String,

    /// The minimum TLS version of the webhook and metrics servers: VersionTLS12 or VersionTLS13.
    #[arg(long, default_value = "VersionTLS12")]
    pub tls_min_version: TlsVersion,

    /// Comma-separated TLS 1.2 cipher suites (IANA names) for the webhook and metrics servers; empty: defaults.
    #[arg(long, value_delimiter = ',', default_value = "")]
    pub tls_cipher_suites: Vec<String>,

    /// Path to a kubeconfig. Only required if out-of-cluster.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Log format: json (ISO-8601 UTC timestamps, for log aggregators) or text (human-readable). Default json.
    #[arg(long, value_enum)]
    pub log_format: Option<LogFormat>,

    /// Cluster API's name of --log-format (text or json); with --log-format too, the one given last wins.
    #[arg(long, value_enum)]
    pub logging_format: Option<LogFormat>,

    /// Log filter (tracing EnvFilter syntax, e.g. "info" or "debug,kube=info"); RUST_LOG overrides it. Default info,
    /// or what --v says.
    #[arg(long)]
    pub log_level: Option<String>,

    /// klog's verbosity, as Cluster API's managers take it: 0-3 log at info, 4 at debug, 5 and more at trace.
    /// With --log-level too, the one given last wins.
    #[arg(long = "v", value_name = "LEVEL")]
    pub verbosity: Option<u8>,

    /// Claims reconciled at once. Allocation decisions are serialized per pool whatever this is; it bounds how many
    /// API writes are in flight. --ipaddressclaim.ipam.cluster.x-k8s.io-concurrency (the Cluster API Operator's
    /// per-kind flag), when given, wins.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..))]
    pub max_concurrent_reconciles: u16,

    /// The Cluster API Operator's profiler address. This manager has no profiler: accepted (when it is an address)
    /// and said in the log.
    #[arg(long, value_parser = compat::parse_bind_address)]
    pub profiler_address: Option<String>,

    /// controller-runtime's resync period (a Go duration). This manager reconciles on every change and relists
    /// when a watch expires, so a resync adds nothing: accepted and said in the log.
    #[arg(long, value_parser = parse_go_duration)]
    pub sync_period: Option<Duration>,

    /// Feature gates, name=true|false,… This manager has none: accepted (when well formed) and said in the log.
    #[arg(long, value_parser = compat::parse_feature_gates)]
    pub feature_gates: Option<compat::FeatureGates>,

    /// `--<kind>.<group>-concurrency=N` flags, taken out of the command line before the others are parsed
    /// (`compat::split_kind_concurrency`).
    #[arg(skip)]
    pub kind_concurrency: Vec<compat::KindConcurrency>,

    /// Flags another one given after them overrode (Cluster API's and ours for one setting), for the notices.
    #[arg(skip)]
    pub superseded: Vec<String>,

    /// Seconds an IPAddress made by us must have had no claim before it is released (a safety net against leaks;
    /// claims normally release their address through their finalizer).
    #[arg(long, default_value_t = 60)]
    pub orphan_release_delay: u64,

    /// Seconds a claim restored by Velero (label velero.io/restore-name) waits, from its creation, for its IPAddress
    /// to be restored before it is allocated a new address (Velero restores IPAddressClaims before IPAddresses).
    #[arg(long, default_value_t = 120)]
    pub restore_wait: u64,

    /// Reject a pool whose addresses overlap another pool of the same kind and scope (default: warn).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "false", action = clap::ArgAction::Set)]
    pub reject_overlapping_pools: bool,

    /// Reject an IP pool whose IPv4 gateway lies outside its subnet, or whose gateway is 0.0.0.0 or :: (default: warn
    /// and admit, as the Go provider admits them; docs/compatibility.md D12).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", default_value = "false", action = clap::ArgAction::Set)]
    pub reject_gateway_outside_subnet: bool,
}

impl Args {
    /// The flags of this process: the per-kind concurrency flags first taken out, then the others parsed; a wrong
    /// value exits with clap's message naming the flag.
    pub fn from_command_line() -> Self {
        Self::from_args(std::env::args_os())
    }

    pub fn from_args<T: Into<std::ffi::OsString>>(args: impl IntoIterator<Item = T>) -> Self {
        match compat::split_kind_concurrency(args.into_iter().map(Into::into)) {
            Ok((rest, kinds)) => {
                let mut command = <Args as clap::CommandFactory>::command();
                let matches = command.try_get_matches_from_mut(rest).unwrap_or_else(|e| e.exit());
                let mut args = <Args as clap::FromArgMatches>::from_arg_matches(&matches)
                    .unwrap_or_else(|e| e.format(&mut command).exit());
                args.kind_concurrency = kinds;
                args.keep_the_last_of_each_pair(&matches);
                args
            }
            Err(error) => {
                let mut command = <Args as clap::CommandFactory>::command();
                command.error(clap::error::ErrorKind::ValueValidation, error).exit()
            }
        }
    }

    /// Where Cluster API's flag and ours set one thing (--v and --log-level, --logging-format and --log-format), the
    /// one given last wins, as a flag given twice does: the Cluster API Operator appends its flags (`verbosity`,
    /// `additionalArgs`) after the Deployment's own, which set ours. The other is dropped and said in a notice.
    fn keep_the_last_of_each_pair(&mut self, matches: &clap::ArgMatches) {
        let last = |id: &str| matches.indices_of(id).and_then(Iterator::max);
        if let (Some(ours), Some(capi)) = (last("log_level"), last("verbosity")) {
            let (level, v) = (self.log_level.clone().unwrap_or_default(), self.verbosity.unwrap_or_default());
            if ours > capi {
                self.verbosity = None;
                self.superseded.push(format!("--v={v} is overridden by --log-level={level}, given after it"));
            } else {
                self.log_level = None;
                self.superseded.push(format!("--log-level={level} is overridden by --v={v}, given after it"));
            }
        }
        if let (Some(ours), Some(capi)) = (last("log_format"), last("logging_format")) {
            let format = self.log_format.map_or("", LogFormat::name);
            let logging = self.logging_format.map_or("", LogFormat::name);
            if format == logging {
                self.logging_format = None;
            } else if ours > capi {
                self.logging_format = None;
                self.superseded
                    .push(format!("--logging-format={logging} is overridden by --log-format={format}, given after it"));
            } else {
                self.log_format = None;
                self.superseded
                    .push(format!("--log-format={format} is overridden by --logging-format={logging}, given after it"));
            }
        }
    }

    /// The log format: --log-format or --logging-format (the last given of the two), else json.
    pub fn log_format(&self) -> LogFormat {
        self.log_format.or(self.logging_format).unwrap_or(LogFormat::Json)
    }

    /// The log filter: --log-level or what --v says (the last given of the two), else info.
    pub fn log_filter(&self) -> String {
        match (&self.log_level, self.verbosity) {
            (Some(level), _) => level.clone(),
            (None, Some(v)) => compat::verbosity_filter(v).to_owned(),
            (None, None) => "info".to_owned(),
        }
    }

    /// Claims reconciled at once: the claim kind's concurrency flag, else --max-concurrent-reconciles.
    pub fn claim_concurrency(&self) -> u16 {
        self.kind_concurrency
            .iter()
            .rev()
            .find(|k| k.kind.eq_ignore_ascii_case("ipaddressclaim"))
            .map_or(self.max_concurrent_reconciles, |k| k.workers)
    }

    /// Where metrics are served, and whether over plain HTTP: --metrics-bind-addr (Cluster API's deprecated flag)
    /// replaces --diagnostics-address and means plain HTTP.
    pub fn metrics_endpoint(&self) -> (&'static str, &str, bool) {
        match &self.metrics_bind_addr {
            Some(addr) => ("metrics-bind-addr", addr, true),
            None => ("diagnostics-address", &self.diagnostics_address, self.insecure_diagnostics),
        }
    }

    /// What the log says at start about flags that mean something else, or nothing, to this manager.
    pub fn notices(&self) -> Vec<String> {
        compat::notices(self)
    }

    /// The leader election timings, checked against client-go's rules.
    pub fn leader_election_timings(&self) -> Result<crate::leader::Timings, String> {
        let timings = crate::leader::Timings {
            lease_duration: self.leader_elect_lease_duration,
            renew_deadline: self.leader_elect_renew_deadline,
            retry_period: self.leader_elect_retry_period,
        };
        timings.validate().map(|()| timings)
    }

    pub fn webhook_cert_dir(&self) -> PathBuf {
        if self.webhook_cert_dir.is_empty() {
            PathBuf::from("/tmp/k8s-webhook-server/serving-certs")
        } else {
            PathBuf::from(&self.webhook_cert_dir)
        }
    }

    pub fn webhook_cert_name(&self) -> &str {
        if self.webhook_cert_name.is_empty() { "tls.crt" } else { &self.webhook_cert_name }
    }

    pub fn webhook_key_name(&self) -> &str {
        if self.webhook_key_name.is_empty() { "tls.key" } else { &self.webhook_key_name }
    }

    /// The webhook server's socket address, `None` when --webhook-port is 0.
    pub fn webhook_addr(&self) -> Result<Option<SocketAddr>, String> {
        if self.webhook_port == 0 {
            return Ok(None);
        }
        let ip: IpAddr = if self.webhook_host.is_empty() {
            IpAddr::V4(Ipv4Addr::UNSPECIFIED)
        } else {
            self.webhook_host
                .parse()
                .map_err(|_| format!("--webhook-host: {:?} is not an IP address", self.webhook_host))?
        };
        Ok(Some(SocketAddr::new(ip, self.webhook_port)))
    }
}

/// Parses a Go-style bind address: ":8081" (all interfaces), "127.0.0.1:8081", "[::1]:8081"; "0" or "" disables.
pub fn bind_address(flag: &str, value: &str) -> Result<Option<SocketAddr>, String> {
    if value.is_empty() || value == "0" {
        return Ok(None);
    }
    if let Some(port) = value.strip_prefix(':') {
        let port: u16 = port.parse().map_err(|_| format!("--{flag}: {value:?} has no valid port"))?;
        return Ok(Some(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port)));
    }
    value.parse::<SocketAddr>().map(Some).or_else(|_| {
        // host:port with a host name such as localhost
        match value.rsplit_once(':') {
            Some(("localhost", port)) => port
                .parse()
                .map(|p| Some(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), p)))
                .map_err(|_| format!("--{flag}: {value:?} has no valid port")),
            _ => Err(format!("--{flag}: {value:?} is not an address like :8081 or 127.0.0.1:8081")),
        }
    })
}

/// Parses a Go duration as controller-runtime's flags take it: "15s", "1m30s", "500ms", "1h".
pub fn parse_go_duration(value: &str) -> Result<Duration, String> {
    let invalid = || format!("{value:?} is not a duration like 15s, 1m30s or 500ms");
    let mut rest = value.trim();
    if rest.is_empty() {
        return Err(invalid());
    }
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total = Duration::ZERO;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(invalid)?;
        let number: f64 = rest[..digits].parse().map_err(|_| invalid())?;
        rest = &rest[digits..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let seconds = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return Err(invalid()),
        };
        total += Duration::try_from_secs_f64(number * seconds).map_err(|_| invalid())?;
        rest = &rest[unit_len..];
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_go_provider() {
        let a = Args::from_args(["manager"]);
        assert_eq!(a.health_probe_bind_address, ":8081");
        assert_eq!(a.diagnostics_address, ":8443");
        assert_eq!(a.webhook_port, 9443);
        assert!(!a.leader_elect && !a.insecure_diagnostics && !a.reject_overlapping_pools);
        assert_eq!(a.webhook_cert_dir(), PathBuf::from("/tmp/k8s-webhook-server/serving-certs"));
        assert_eq!((a.webhook_cert_name(), a.webhook_key_name()), ("tls.crt", "tls.key"));
        assert_eq!(a.tls_min_version, TlsVersion::Tls12);
        assert_eq!(a.log_format(), LogFormat::Json);
        assert_eq!((a.log_filter().as_str(), a.claim_concurrency()), ("info", 32));
        assert_eq!(a.metrics_endpoint(), ("diagnostics-address", ":8443", false));
        assert!(a.notices().is_empty());
    }

    #[test]
    fn go_style_booleans_and_lists() {
        let a =
            Args::from_args(["manager", "--leader-elect", "--insecure-diagnostics=true", "--tls-cipher-suites=A,B"]);
        assert!(a.leader_elect && a.insecure_diagnostics);
        assert_eq!(a.tls_cipher_suites, ["A", "B"]);
        let a = Args::from_args(["manager", "--leader-elect=false"]);
        assert!(!a.leader_elect);
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_go_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_go_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_go_duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert!(parse_go_duration("15").unwrap_err().contains("\"15\""));
        assert!(parse_go_duration("-1s").is_err() && parse_go_duration("").is_err());
        let a = Args::from_args(["manager"]);
        let t = a.leader_election_timings().expect("defaults are valid");
        assert_eq!(t, crate::leader::Timings::default());
        let a = Args::from_args(["manager", "--leader-elect-renew-deadline=20s"]);
        assert!(a.leader_election_timings().unwrap_err().contains("--leader-elect-lease-duration"));
    }

    #[test]
    fn bind_addresses() {
        assert_eq!(bind_address("x", ":8081").unwrap().unwrap().port(), 8081);
        assert_eq!(bind_address("x", "127.0.0.1:9").unwrap().unwrap().to_string(), "127.0.0.1:9");
        assert_eq!(bind_address("x", "localhost:9").unwrap().unwrap().to_string(), "127.0.0.1:9");
        assert_eq!(bind_address("x", "0").unwrap(), None);
        assert!(bind_address("x", "nope").unwrap_err().contains("--x"));
    }
}
