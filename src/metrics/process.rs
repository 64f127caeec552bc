//! The `process_*` metrics of the Prometheus Go client's process collector, with its names and help texts, read from
//! `/proc` at each scrape (Linux; elsewhere nothing is exported). The Go runtime's `go_*` metrics have no counterpart
//! in a Rust process and are not imitated (docs/compatibility.md D16).

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Linux reports CPU times in clock ticks of `USER_HZ`, 100 on every architecture it supports.
const TICKS_PER_SECOND: f64 = 100.0;

#[derive(Debug, Default)]
pub struct ProcessCollector;

/// One reading of `/proc/self`.
#[derive(Debug, Default, PartialEq)]
pub struct Reading {
    pub cpu_seconds: f64,
    pub start_time_seconds: f64,
    pub virtual_memory_bytes: f64,
    pub resident_memory_bytes: f64,
    pub open_fds: f64,
    pub max_fds: Option<f64>,
    pub virtual_memory_max_bytes: Option<f64>,
    pub network: Option<(f64, f64)>,
}

/// The fields of `/proc/self/stat` after the command (which may hold spaces and parentheses): utime and stime in
/// ticks, start time in ticks after boot, virtual memory in bytes.
fn parse_stat(stat: &str) -> Option<(f64, f64, f64)> {
    let fields: Vec<&str> = stat.get(stat.rfind(')')? + 1..)?.split_whitespace().collect();
    // After the command come the state (field 3 of proc(5)) and on: utime is field 14, so index 11 here.
    let number = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
    Some((number(11)? + number(12)?, number(19)?, number(20)?))
}

/// `btime` of `/proc/stat`: the boot time in seconds since the epoch.
fn parse_boot_time(stat: &str) -> Option<f64> {
    stat.lines().find_map(|l| l.strip_prefix("btime ")).and_then(|v| v.trim().parse().ok())
}

/// `VmRSS` of `/proc/self/status`, in bytes.
fn parse_resident(status: &str) -> Option<f64> {
    let kib: f64 =
        status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?.trim().strip_suffix("kB")?.trim().parse().ok()?;
    Some(kib * 1024.0)
}

/// The soft limit of a row of `/proc/self/limits`; "unlimited" is the largest value, as the Go client reports it.
fn parse_limit(limits: &str, row: &str) -> Option<f64> {
    let rest = limits.lines().find_map(|l| l.strip_prefix(row))?;
    match rest.split_whitespace().next()? {
        "unlimited" => Some(u64::MAX as f64),
        soft => soft.parse().ok(),
    }
}

/// `IpExt: InOctets OutOctets` of `/proc/self/net/netstat`: bytes received and sent by the process's network
/// namespace, as the Go client reads them.
fn parse_network(netstat: &str) -> Option<(f64, f64)> {
    let mut rows = netstat.lines().filter(|l| l.starts_with("IpExt:"));
    let (names, values) = (rows.next()?, rows.next()?);
    let column = |name: &str| {
        let at = names.split_whitespace().position(|n| n == name)?;
        values.split_whitespace().nth(at)?.parse::<f64>().ok()
    };
    Some((column("InOctets")?, column("OutOctets")?))
}

impl Reading {
    pub fn of_self() -> Option<Reading> {
        let read = |path: &str| std::fs::read_to_string(path).ok();
        let (ticks, start_ticks, virtual_memory_bytes) = parse_stat(&read("/proc/self/stat")?)?;
        let boot = parse_boot_time(&read("/proc/stat")?)?;
        let limits = read("/proc/self/limits").unwrap_or_default();
        Some(Reading {
            cpu_seconds: ticks / TICKS_PER_SECOND,
            start_time_seconds: boot + start_ticks / TICKS_PER_SECOND,
            virtual_memory_bytes,
            resident_memory_bytes: read("/proc/self/status").as_deref().and_then(parse_resident).unwrap_or(0.0),
            open_fds: std::fs::read_dir("/proc/self/fd").map(|d| d.count() as f64).unwrap_or(0.0),
            max_fds: parse_limit(&limits, "Max open files"),
            virtual_memory_max_bytes: parse_limit(&limits, "Max address space"),
            network: read("/proc/self/net/netstat").as_deref().and_then(parse_network),
        })
    }
}

fn gauge(encoder: &mut DescriptorEncoder, name: &str, help: &str, value: f64) -> Result<(), std::fmt::Error> {
    let metric = ConstGauge::new(value);
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

fn counter(encoder: &mut DescriptorEncoder, name: &str, help: &str, value: f64) -> Result<(), std::fmt::Error> {
    let metric = ConstCounter::new(value);
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(r) = Reading::of_self() else { return Ok(()) };
        let e = &mut encoder;
        counter(e, "process_cpu_seconds", "Total user and system CPU time spent in seconds.", r.cpu_seconds)?;
        gauge(e, "process_open_fds", "Number of open file descriptors.", r.open_fds)?;
        if let Some(max) = r.max_fds {
            gauge(e, "process_max_fds", "Maximum number of open file descriptors.", max)?;
        }
        gauge(e, "process_virtual_memory_bytes", "Virtual memory size in bytes.", r.virtual_memory_bytes)?;
        if let Some(max) = r.virtual_memory_max_bytes {
            let help = "Maximum amount of virtual memory available in bytes.";
            gauge(e, "process_virtual_memory_max_bytes", help, max)?;
        }
        gauge(e, "process_resident_memory_bytes", "Resident memory size in bytes.", r.resident_memory_bytes)?;
        let help = "Start time of the process since unix epoch in seconds.";
        gauge(e, "process_start_time_seconds", help, r.start_time_seconds)?;
        if let Some((received, sent)) = r.network {
            let help = "Number of bytes received by the process over the network.";
            counter(e, "process_network_receive_bytes", help, received)?;
            counter(
                e,
                "process_network_transmit_bytes",
                "Number of bytes sent by the process over the network.",
                sent,
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_files_parse_as_the_go_client_reads_them() {
        let stat = "4242 (my (odd) cmd) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 150 0 0 20 0 8 0 5000 104857600 \
                    2560 18446744073709551615";
        assert_eq!(parse_stat(stat), Some((400.0, 5000.0, 104_857_600.0)));
        assert_eq!(parse_boot_time("cpu  1 2 3\nbtime 1764770000\nprocesses 9\n"), Some(1_764_770_000.0));
        assert_eq!(parse_resident("Name:\tmanager\nVmRSS:\t   10240 kB\n"), Some(10_485_760.0));
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1048576              1048576              files\n\
                      Max address space         unlimited            unlimited            bytes\n";
        assert_eq!(parse_limit(limits, "Max open files"), Some(1_048_576.0));
        assert_eq!(parse_limit(limits, "Max address space"), Some(u64::MAX as f64));
        let netstat = "TcpExt: SyncookiesSent\nTcpExt: 0\nIpExt: InNoRoutes InOctets OutOctets\nIpExt: 0 1234 5678\n";
        assert_eq!(parse_network(netstat), Some((1234.0, 5678.0)));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn this_process_is_read() {
        let r = Reading::of_self().expect("/proc/self is readable on Linux");
        assert!(r.resident_memory_bytes > 0.0 && r.open_fds > 0.0, "{r:?}");
        assert!(r.start_time_seconds > 1.0e9, "{r:?}");
    }
}
