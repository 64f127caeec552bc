//! Unauthenticated abuse of the manager's ports (tests/tools/abuse.py): oversized and amplifying admission reviews,
//! a flood of random bearer tokens on /metrics, and thousands of half-sent requests. Throughout, the manager's peak
//! RSS stays below the chart's memory limit and `/readyz` stays green; afterwards the API server still reaches the
//! webhooks.

use std::collections::HashMap;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use support::Plane;
use support::manager::Manager;

/// The chart's memory limit (charts/capi-ipam-in-cluster/values.yaml).
const CHART_MEMORY_LIMIT_KIB: u64 = 256 * 1024;

fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the manager's /proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM")
}

/// Runs one attack; returns its outcome counts.
fn attack(name: &str, port: u16, count: usize) -> HashMap<String, u64> {
    let out = Command::new("python3")
        .arg(support::repo_root().join("tests/tools/abuse.py"))
        .args([name, &port.to_string(), &count.to_string()])
        .output()
        .expect("running abuse.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "abuse.py {name} failed: {stdout}{}", String::from_utf8_lossy(&out.stderr));
    let line = stdout.lines().last().unwrap_or_default();
    eprintln!("{line}");
    let json = line.split_once(": ").map(|(_, j)| j).unwrap_or("{}");
    serde_json::from_str(json).expect("abuse.py prints its counts as JSON")
}

/// Samples /readyz every 100 ms until stopped; counts the samples that were not 200.
struct ReadyWatch {
    stop: Arc<AtomicBool>,
    failures: Arc<AtomicUsize>,
    samples: Arc<AtomicUsize>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ReadyWatch {
    fn start(health_port: u16) -> Self {
        let (stop, failures, samples) = (Arc::new(AtomicBool::new(false)), Arc::default(), Arc::default());
        let thread = std::thread::spawn({
            let (stop, failures, samples): (Arc<AtomicBool>, Arc<AtomicUsize>, Arc<AtomicUsize>) =
                (stop.clone(), Arc::clone(&failures), Arc::clone(&samples));
            move || {
                while !stop.load(Ordering::Relaxed) {
                    samples.fetch_add(1, Ordering::Relaxed);
                    if support::manager::http_get(health_port, "/readyz").map(|(code, _)| code) != Some(200) {
                        failures.fetch_add(1, Ordering::Relaxed);
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        });
        Self { stop, failures, samples, thread: Some(thread) }
    }

    fn finish(mut self) -> (usize, usize) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        (self.failures.load(Ordering::Relaxed), self.samples.load(Ordering::Relaxed))
    }
}

#[test]
fn abuse_of_every_port_keeps_memory_under_the_limit_and_readyz_green() {
    let plane = Plane::shared();
    let manager = Manager::start(plane, &["--namespace=abuse-none"]);
    let pid = manager.pid().expect("a pid");
    let baseline = peak_rss_kib(pid);
    let ready = ReadyWatch::start(manager.health_port);

    // A body over the limit is answered 413, not read to the end.
    let big = attack("big-body", manager.webhook_port, 1);
    assert_eq!(big.get("413"), Some(&1), "{big:?}");

    // Reviews just under the limit, each a pool of ~200,000 single addresses, 16 at once: refused by the entry cap
    // before anything is parsed into ranges; the ones beyond the concurrency limit wait or get 503.
    let amplified = attack("amplify", manager.webhook_port, 16);
    let answered: u64 = ["200", "503"].iter().filter_map(|k| amplified.get(*k)).sum();
    assert_eq!(answered, 16, "every review is answered (200 with a denial, or 503): {amplified:?}");
    assert!(amplified.get("200").is_some_and(|n| *n >= 4), "{amplified:?}");

    // Random 32 KiB tokens: refused unread (too long for a token) or after a TokenReview, never cached.
    let tokens = attack("token-flood", manager.metrics_port, 1000);
    let refused: u64 = ["401", "403", "503"].iter().filter_map(|k| tokens.get(*k)).sum();
    assert_eq!(refused, 1000, "every flooded request is refused: {tokens:?}");

    // Thousands of half-sent requests: beyond the connection cap they are closed at once, and the rest are closed when
    // the header read timeout passes.
    let slow = attack("slow", manager.webhook_port, 2000);
    assert_eq!(slow.get("still_open_after_15s"), Some(&0), "idle half-sent requests are closed: {slow:?}");

    let (not_ready, samples) = ready.finish();
    let peak = peak_rss_kib(pid);
    eprintln!(
        "abuse: peak RSS {} MiB (baseline {} MiB), /readyz failed {not_ready} of {samples} samples",
        peak / 1024,
        baseline / 1024
    );
    assert_eq!(not_ready, 0, "/readyz stayed green through the abuse");
    assert!(
        peak < CHART_MEMORY_LIMIT_KIB,
        "peak RSS {} MiB is over the chart's limit of {} MiB",
        peak / 1024,
        CHART_MEMORY_LIMIT_KIB / 1024
    );
    assert!(manager.is_running(), "the manager survived:\n{}", manager.log_tail(40));
    // The API server still reaches the webhooks.
    manager.wait_ready(plane);
}
