//! The flags the Cluster API Operator passes a provider from an `IPAMProvider`'s `spec.manager`
//! (cluster-api-operator `internal/controller/component_customizer.go`), and Cluster API's logging flags: each is
//! accepted, with our meaning where one exists (`--health-addr`, `--metrics-bind-addr`, `--v`, `--logging-format`,
//! the claim kind's `--<kind>-concurrency`) and a notice in the log where it means nothing to us; a wrong value is an
//! error naming the flag. Never a crash-loop on a valid operator setting.

use std::ffi::OsString;

use super::Args;

/// One `--<kind>.<group>-concurrency=N` flag: the Operator's `spec.manager.controller.groupKindConcurrency`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KindConcurrency {
    /// The flag as given, for the log.
    pub flag: String,
    /// The kind, lowercase as the Operator writes it (`ipaddressclaim`).
    pub kind: String,
    pub workers: u16,
}

/// `--feature-gates=a=true,b=false`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeatureGates(pub Vec<(String, bool)>);

/// Takes the `--<kind>[.<group>]-concurrency` flags out of the command line (their names are not known in advance,
/// so the parser cannot declare them); the rest is parsed as usual.
pub fn split_kind_concurrency(
    args: impl IntoIterator<Item = OsString>,
) -> Result<(Vec<OsString>, Vec<KindConcurrency>), String> {
    let mut rest = Vec::new();
    let mut kinds = Vec::new();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let Some(flag) = arg.to_str().and_then(kind_concurrency_flag) else {
            rest.push(arg);
            continue;
        };
        let (name, value) = match flag.split_once('=') {
            Some((name, value)) => (name.to_owned(), value.to_owned()),
            None => {
                let value = args.next().and_then(|v| v.into_string().ok());
                (flag.to_owned(), value.ok_or_else(|| format!("--{flag} needs a number of workers"))?)
            }
        };
        let workers =
            value.parse::<u16>().ok().filter(|w| *w > 0).ok_or_else(|| {
                format!("--{name}={value}: the number of workers must be a whole number from 1 to 65535")
            })?;
        let kind = name.strip_suffix("-concurrency").unwrap_or(&name);
        let kind = kind.split('.').next().unwrap_or(kind).to_ascii_lowercase();
        kinds.push(KindConcurrency { flag: name, kind, workers });
    }
    Ok((rest, kinds))
}

/// The flag's text after `--` when it is a per-kind concurrency flag (`--max-concurrent-reconciles` is not one).
fn kind_concurrency_flag(arg: &str) -> Option<&str> {
    let flag = arg.strip_prefix("--")?;
    let name = flag.split_once('=').map_or(flag, |(name, _)| name);
    let kind = name.strip_suffix("-concurrency")?;
    (!kind.is_empty() && kind.chars().all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')).then_some(flag)
}

pub fn parse_feature_gates(value: &str) -> Result<FeatureGates, String> {
    let mut gates = Vec::new();
    for gate in value.split(',').map(str::trim).filter(|g| !g.is_empty()) {
        let (name, enabled) = gate.split_once('=').ok_or_else(|| format!("{gate:?} is not name=true or name=false"))?;
        let enabled = match enabled.trim().to_ascii_lowercase().as_str() {
            "true" => true,
            "false" => false,
            _ => return Err(format!("{gate:?}: {enabled:?} is not true or false")),
        };
        gates.push((name.trim().to_owned(), enabled));
    }
    Ok(FeatureGates(gates))
}

/// An address like `:6060` or `localhost:6060` (checked, not bound).
pub fn parse_bind_address(value: &str) -> Result<String, String> {
    super::bind_address("profiler-address", value).map(|_| value.to_owned())
}

/// klog's verbosity as our log filter: Cluster API's managers log what an operator reads at 0-2, more detail at 4,
/// and the most at 5 and above.
pub fn verbosity_filter(v: u8) -> &'static str {
    match v {
        0..=3 => "info",
        4 => "debug",
        _ => "trace",
    }
}

pub fn notices(args: &Args) -> Vec<String> {
    let mut notices = Vec::new();
    if let Some(addr) = &args.metrics_bind_addr {
        notices.push(format!(
            "--metrics-bind-addr={addr}: serving metrics on it over plain HTTP without authentication, in place of \
             --diagnostics-address (Cluster API deprecated it for --diagnostics-address and --insecure-diagnostics)"
        ));
    }
    if let Some(addr) = &args.profiler_address {
        notices.push(format!("--profiler-address={addr}: this manager has no profiler; nothing is served there"));
    }
    if let Some(period) = args.sync_period {
        notices.push(format!(
            "--sync-period={period:?}: not needed here (every change is reconciled and an expired watch relists); \
             ignored"
        ));
    }
    if let Some(FeatureGates(gates)) = &args.feature_gates {
        let named: Vec<String> = gates.iter().map(|(name, on)| format!("{name}={on}")).collect();
        notices.push(format!("--feature-gates={}: this manager has no feature gates; ignored", named.join(",")));
    }
    notices.extend(args.superseded.iter().cloned());
    for k in &args.kind_concurrency {
        if k.kind == "ipaddressclaim" {
            continue;
        }
        let pool_kind = crate::api::PoolKind::ALL.into_iter().find(|p| p.kind().eq_ignore_ascii_case(&k.kind));
        notices.push(match pool_kind {
            Some(_) => format!(
                "--{}={}: the pool kinds share 4 workers (a pool's reconcile is its status and finalizer); ignored",
                k.flag, k.workers
            ),
            None => format!("--{}={}: this manager has no controller of kind {:?}; ignored", k.flag, k.workers, k.kind),
        });
    }
    notices
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every flag the Operator's `customizeManagerContainer` and `leaderElectionArgs` can write, as it writes them.
    const OPERATOR_FLAGS: [&str; 22] = [
        "--ipaddressclaim.ipam.cluster.x-k8s.io-concurrency=8",
        "--inclusterippool.ipam.cluster.x-k8s.io-concurrency=2",
        "--max-concurrent-reconciles=16",
        "--namespace=team-a",
        "--health-addr=:9440",
        "--metrics-bind-addr=:8080",
        "--diagnostics-address=:8443",
        "--webhook-host=0.0.0.0",
        "--webhook-cert-dir=/certs",
        "--profiler-address=localhost:6060",
        "--leader-elect=true",
        "--leader-election-id=capi-ipam-in-cluster-system/7bb7acb4.ipam.cluster.x-k8s.io",
        "--leader-elect-lease-duration=15s",
        "--leader-elect-renew-deadline=10s",
        "--leader-elect-retry-period=2s",
        "--insecure-diagnostics=true",
        "--webhook-port=9443",
        "--sync-period=600s",
        "--v=4",
        "--feature-gates=ClusterTopology=true,MachinePool=false",
        "--logging-format=text",
        "--watch-filter=shard-a",
    ];

    #[test]
    fn every_flag_the_operator_writes_is_accepted_with_our_meaning_or_a_notice() {
        let a = Args::from_args(std::iter::once("manager").chain(OPERATOR_FLAGS));
        assert_eq!(a.health_probe_bind_address, ":9440");
        assert_eq!(a.metrics_endpoint(), ("metrics-bind-addr", ":8080", true));
        assert_eq!((a.log_filter().as_str(), a.log_format()), ("debug", super::super::LogFormat::Text));
        assert_eq!(a.claim_concurrency(), 8);
        assert_eq!(a.namespace, "team-a");
        assert!(a.leader_elect);
        let notices = a.notices().join("\n");
        for said in [
            "--metrics-bind-addr=:8080",
            "--profiler-address=localhost:6060",
            "--sync-period=600s",
            "--feature-gates=ClusterTopology=true,MachinePool=false",
            "--inclusterippool.ipam.cluster.x-k8s.io-concurrency=2: the pool kinds share 4 workers",
        ] {
            assert!(notices.contains(said), "no notice of {said}:\n{notices}");
        }
        // The claim kind's flag has our meaning: no notice.
        assert!(!notices.contains("ipaddressclaim"), "{notices}");
    }

    #[test]
    fn a_flag_given_twice_takes_its_last_value_as_the_operator_expects() {
        let a =
            Args::from_args(["manager", "--health-probe-bind-address=:8081", "--health-addr=:9440", "--v=1", "--v=4"]);
        assert_eq!((a.health_probe_bind_address.as_str(), a.log_filter().as_str()), (":9440", "debug"));
    }

    #[test]
    fn without_the_kind_flag_the_claims_take_max_concurrent_reconciles_and_v_maps_to_a_level() {
        let a = Args::from_args(["manager", "--max-concurrent-reconciles", "5", "--v", "6"]);
        assert_eq!((a.claim_concurrency(), a.log_filter().as_str()), (5, "trace"));
        let a = Args::from_args(["manager", "--v=2", "--log-level=warn"]);
        assert_eq!(a.log_filter(), "warn");
        assert!(a.notices().join("\n").contains("--v=2 is overridden by --log-level=warn, given after it"));
    }

    /// The Deployment of our release passes --log-format and --log-level; the Operator appends --v and
    /// --logging-format from the IPAMProvider after them, and those are what the user asked for.
    #[test]
    fn of_capis_flag_and_ours_for_one_setting_the_one_given_last_wins() {
        let deployment = ["manager", "--log-format=json", "--log-level=info"];
        let a = Args::from_args(deployment.iter().copied().chain(["--v=4", "--logging-format=text"]));
        assert_eq!((a.log_filter().as_str(), a.log_format()), ("debug", super::super::LogFormat::Text));
        let notices = a.notices().join("\n");
        assert!(notices.contains("--log-level=info is overridden by --v=4, given after it"), "{notices}");
        assert!(notices.contains("--log-format=json is overridden by --logging-format=text"), "{notices}");
        let a = Args::from_args(["manager", "--logging-format=text", "--v=5", "--log-format=json", "--log-level=warn"]);
        assert_eq!((a.log_filter().as_str(), a.log_format()), ("warn", super::super::LogFormat::Json));
        // Given twice, a flag still takes its last value (and each pair its last given).
        let a = Args::from_args(["manager", "--log-level=warn", "--v=4", "--log-level=error"]);
        assert_eq!(a.log_filter(), "error");
    }

    #[test]
    fn a_wrong_value_is_an_error_that_names_the_flag() {
        let split = |args: &[&str]| split_kind_concurrency(args.iter().map(OsString::from));
        let e = split(&["manager", "--ipaddressclaim.ipam.cluster.x-k8s.io-concurrency=zero"]).unwrap_err();
        assert!(e.contains("--ipaddressclaim.ipam.cluster.x-k8s.io-concurrency=zero"), "{e}");
        assert!(split(&["manager", "--ipaddressclaim-concurrency=0"]).is_err());
        let (rest, kinds) = split(&["manager", "--ipaddressclaim-concurrency", "3", "--v=1"]).expect("valid");
        assert_eq!((rest.len(), kinds[0].workers, kinds[0].kind.as_str()), (2, 3, "ipaddressclaim"));
        assert!(parse_feature_gates("A=true,B").unwrap_err().contains("\"B\""));
        assert!(parse_feature_gates("A=maybe").unwrap_err().contains("\"maybe\""));
        assert!(parse_bind_address("not an address").unwrap_err().contains("--profiler-address"));
        for wrong in [
            ["manager", "--v=loud"],
            ["manager", "--sync-period=10"],
            ["manager", "--max-concurrent-reconciles=0"],
            ["manager", "--logging-format=yaml"],
        ] {
            let e = <Args as clap::Parser>::try_parse_from(wrong).expect_err("refused");
            let flag = wrong[1].split('=').next().unwrap_or_default();
            assert!(e.to_string().contains(flag), "{wrong:?}: {e}");
        }
    }
}
