//! Runs the real `manager` binary against a control plane, with our CRDs and webhooks registered in the API server
//! over TLS (tests/tools/dev-install.py, the same code `make run` uses).

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{Plane, SharedScratch, repo_root, tail, unique_name};

/// How a manager is launched (the default: the binary under test, as root, with our CRDs and webhooks).
pub struct Launch {
    /// The program and its leading arguments, such as an image's entrypoint under `setpriv`.
    pub command: Vec<OsString>,
    /// The manager reads copies of the kubeconfig and the webhook certificates owned by this uid and readable by it
    /// alone, as from a pod's mounted Secrets.
    pub owner: Option<u32>,
    /// Registers these CRDs and webhook configurations (another provider's, the manager standing in for its
    /// webhooks) instead of ours.
    pub crds: Option<PathBuf>,
    pub webhooks: Option<PathBuf>,
    /// Whether the API server's calls go to this manager once it is ready (as a pod behind the webhook Service);
    /// without, it runs beside what serves them now, until [`Manager::take_over`].
    pub registered: bool,
    pub ready_within: Duration,
}

impl Default for Launch {
    fn default() -> Self {
        Launch {
            command: vec![manager_binary()],
            owner: None,
            crds: None,
            webhooks: None,
            registered: true,
            ready_within: Duration::from_secs(90),
        }
    }
}

/// A running manager process. It is killed when dropped, and also when the test process exits (it watches its stdin).
pub struct Manager {
    pub dir: PathBuf,
    pub webhook_port: u16,
    pub health_port: u16,
    pub metrics_port: u16,
    pub log: PathBuf,
    /// The program and its leading arguments (default: the manager binary under test).
    command: Vec<OsString>,
    args: Vec<String>,
    kubeconfig: PathBuf,
    wrapper: Option<Child>,
    pid: Option<u32>,
    /// When the process was last started.
    pub spawned_at: Option<Instant>,
    /// What a manager run as another user reads (kubeconfig, certificates), out of the checkout; held so that it is
    /// removed when the manager is dropped.
    _mounted: Option<SharedScratch>,
}

/// A port free now and never handed out before by this process. Below the kernel's ephemeral range (32768-60999),
/// so that a client connection cannot take it between our pick and the server's bind, and never the same twice: two
/// `bind(0)` probes in a row may return the same port, which once gave a manager one port for its health and its
/// metrics servers.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let _ = NEXT.compare_exchange(
        u32::MAX,
        std::process::id().wrapping_mul(7_919) % SPAN,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    for _ in 0..SPAN {
        let port = (FIRST + NEXT.fetch_add(1, Ordering::SeqCst) % SPAN) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {FIRST}..{}", FIRST + SPAN)
}

fn run(cmd: &mut Command, what: &str) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Manager {
    /// Installs our CRDs and registers our webhooks at a new port (the plane already runs Cluster API with its CRDs
    /// and webhooks), starts the manager and waits until it is ready and the API server reaches its webhooks.
    pub fn start(plane: &Plane, extra_args: &[&str]) -> Manager {
        Self::start_within(plane, extra_args, Duration::from_secs(90))
    }

    /// As [`Manager::start`], allowing `ready_within` for the first list of everything (100,000 objects take long).
    pub fn start_within(plane: &Plane, extra_args: &[&str], ready_within: Duration) -> Manager {
        Self::launch(plane, Launch { ready_within, ..Launch::default() }, extra_args)
    }

    /// As [`Manager::start`], launched as `launch` says, from a test's async runtime: starting blocks until the manager is ready, so it
    /// runs on a blocking thread.
    pub async fn started(plane: &Plane, launch: Launch, extra_args: &[&str]) -> Manager {
        let dir = plane.dir.clone();
        let args: Vec<String> = extra_args.iter().map(|a| a.to_string()).collect();
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            Self::launch(&Plane::at(&dir), launch, &args)
        })
        .await
        .expect("starting the manager")
    }

    fn launch(plane: &Plane, launch: Launch, extra_args: &[&str]) -> Manager {
        let Launch { command, owner, crds, webhooks, registered, ready_within } = launch;
        let dir = plane.dir.join("managers").join(unique_name("m"));
        std::fs::create_dir_all(&dir).expect("manager folder");
        let shared_certs = plane.dir.join("webhook-certs");
        run(Command::new("bash").arg(repo_root().join("tests/tools/dev-certs.sh")).arg(&shared_certs), "dev-certs.sh");
        let mut mounted = None;
        let (certs, kubeconfig) = match owner {
            None => (shared_certs.clone(), plane.kubeconfig()),
            Some(uid) => {
                // Where the other user can reach it: not in the checkout, whose parents may be private.
                let scratch = SharedScratch::new("mounted");
                let own = scratch.path().to_path_buf();
                mounted = Some(scratch);
                std::fs::create_dir_all(own.join("certs")).expect("folder");
                let mut files: Vec<(PathBuf, PathBuf)> = ["ca.crt", "tls.crt", "tls.key"]
                    .iter()
                    .map(|f| (shared_certs.join(f), own.join("certs").join(f)))
                    .collect();
                files.push((plane.kubeconfig(), own.join("kubeconfig")));
                for (from, to) in &files {
                    std::fs::copy(from, to).expect("copying for the manager");
                    std::os::unix::fs::chown(to, Some(uid), Some(uid)).expect("chown");
                    std::fs::set_permissions(to, std::os::unix::fs::PermissionsExt::from_mode(0o400)).expect("chmod");
                }
                for d in [&own, &own.join("certs")] {
                    std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
                }
                (own.join("certs"), own.join("kubeconfig"))
            }
        };
        let (webhook_port, health_port, metrics_port) = (free_port(), free_port(), free_port());
        let mut args: Vec<String> = vec!["--log-format=text".into()];
        // The manager runs as admin unless the test gives it an identity of its own.
        if !extra_args.iter().any(|a| a.starts_with("--kubeconfig")) {
            args.push(format!("--kubeconfig={}", kubeconfig.display()));
        }
        args.extend([
            "--webhook-host=127.0.0.1".into(),
            format!("--webhook-port={webhook_port}"),
            format!("--webhook-cert-dir={}", certs.display()),
            format!("--health-probe-bind-address=127.0.0.1:{health_port}"),
            format!("--diagnostics-address=127.0.0.1:{metrics_port}"),
        ]);
        if !extra_args.iter().any(|a| a.starts_with("--log-level")) {
            args.push("--log-level=debug,kube=info,hyper=info,h2=info,tower=info,rustls=info".into());
        }
        args.extend(extra_args.iter().map(|s| s.to_string()));
        let mut m = Manager {
            log: dir.join("manager.log"),
            dir,
            command,
            webhook_port,
            health_port,
            metrics_port,
            args,
            kubeconfig: plane.kubeconfig(),
            wrapper: None,
            pid: None,
            spawned_at: None,
            _mounted: mounted,
        };
        if registered {
            m.register(plane, &shared_certs, crds.as_deref(), webhooks.as_deref());
        }
        m.spawn();
        m.wait_ready_within(plane, ready_within, registered);
        m
    }

    /// Registers our CRDs and webhooks at this manager again, taking them over from an install (Helm, clusterctl)
    /// that just wrote its own, whose Services no API server here can reach.
    pub fn take_over(&self, plane: &Plane) {
        self.register(plane, &plane.dir.join("webhook-certs"), None, None);
    }

    fn register(&self, plane: &Plane, certs: &Path, crds: Option<&Path>, webhooks: Option<&Path>) {
        register_webhooks(plane, self.webhook_port, &certs.join("ca.crt"), crds, webhooks);
    }

    /// Starts the process (again), with the same ports and flags.
    pub fn spawn(&mut self) {
        let spawned_at = Instant::now();
        let command: Vec<OsString> = self.command.iter().cloned().chain(self.args.iter().map(OsString::from)).collect();
        let (wrapper, pid) = spawn_tied(&self.log, &command);
        self.pid = Some(pid);
        self.spawned_at = Some(spawned_at);
        self.wrapper = Some(wrapper);
    }

    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// GET a path on the probe server; returns the status code.
    pub fn probe(&self, path: &str) -> Option<u16> {
        http_get(self.health_port, path).map(|(code, _)| code)
    }

    /// GET /metrics on the metrics server (plain HTTP with --insecure-diagnostics).
    pub fn metrics(&self) -> Option<String> {
        http_get(self.metrics_port, "/metrics").map(|(_, body)| body)
    }

    pub fn is_running(&self) -> bool {
        self.pid.is_some_and(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists() && !is_zombie(pid))
    }

    /// Waits until /readyz is 200 and the API server's calls reach the validating webhook.
    pub fn wait_ready(&self, plane: &Plane) {
        self.wait_ready_within(plane, Duration::from_secs(90), true);
    }

    /// Waits until /readyz is 200 and, if the API server's calls go to this manager, until they reach it.
    fn wait_ready_within(&self, plane: &Plane, ready_within: Duration, registered: bool) {
        let deadline = Instant::now() + ready_within;
        while self.probe("/readyz") != Some(200) {
            assert!(self.is_running(), "the manager exited:\n{}", self.log_tail(60));
            assert!(Instant::now() < deadline, "the manager did not become ready:\n{}", self.log_tail(60));
            std::thread::sleep(Duration::from_millis(100));
        }
        if registered {
            wait_webhooks_reached(plane, &self.kubeconfig, deadline, || self.log_tail(40));
        }
    }

    /// Kills the manager with SIGKILL (no cleanup, no lease release).
    pub fn kill(&mut self) {
        if let Some(pid) = self.pid.take() {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while std::path::Path::new(&format!("/proc/{pid}")).exists() && !is_zombie(pid) && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        if let Some(mut w) = self.wrapper.take() {
            drop(w.stdin.take());
            let _ = w.wait();
        }
    }

    /// Sends SIGTERM and waits for the process to exit; returns whether it exited within the timeout.
    pub fn terminate(&mut self, timeout: Duration) -> bool {
        let Some(pid) = self.pid else { return true };
        let _ = Command::new("kill").args(["-TERM", &pid.to_string()]).status();
        let deadline = Instant::now() + timeout;
        while self.is_running() {
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.pid = None;
        if let Some(mut w) = self.wrapper.take() {
            drop(w.stdin.take());
            let _ = w.wait();
        }
        true
    }

    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.log, lines)
    }
}

impl Drop for Manager {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- manager log (last 60 lines) ---\n{}", self.log_tail(60));
        }
        self.kill();
    }
}

/// Starts `command` with its output appended to `log`, tied to this test process: bash starts it in the background,
/// prints its pid, and kills it when stdin closes. The test process holds the other end, so the program never outlives
/// the test binary, even one that is killed. Returns the wrapper (drop its stdin to stop the program) and the pid.
pub(crate) fn spawn_tied(log: &Path, command: &[OsString]) -> (Child, u32) {
    let mut wrapper = Command::new("bash")
        .arg("-c")
        .arg(r#"log=$1; shift; "$@" </dev/null >>"$log" 2>&1 & pid=$!; echo "$pid"; cat >/dev/null; kill -9 "$pid" 2>/dev/null; wait"#)
        .arg("tied-wrapper")
        .arg(log)
        .args(command)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting a program tied to the test process");
    let mut line = String::new();
    BufReader::new(wrapper.stdout.as_mut().expect("stdout")).read_line(&mut line).expect("the program's pid");
    (wrapper, line.trim().parse().expect("a pid"))
}

/// The manager binary under test: `CAPI_IPAM_MANAGER_BIN` (to run a suite against another build, such as an older
/// commit's, and see a test fail there), else this build's. Cargo builds it beside the test or bench binary
/// (`target/<profile>/deps/<test>` runs `target/<profile>/manager`), as it builds a package's binaries for its tests.
fn manager_binary() -> OsString {
    if let Some(bin) = std::env::var_os("CAPI_IPAM_MANAGER_BIN") {
        return bin;
    }
    let test = std::env::current_exe().expect("the path of this test binary");
    let profile = test.ancestors().nth(2).expect("a test binary lives in target/<profile>/deps");
    let manager = profile.join("manager");
    assert!(manager.is_file(), "no manager binary at {} (built by cargo test or cargo bench)", manager.display());
    manager.into_os_string()
}

pub(crate) fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')))
        .unwrap_or(true)
}

/// Waits up to a minute for a Go controller's health probe on 127.0.0.1:`port` to answer `/readyz` with 200; panics
/// with `why_not()` (its log) otherwise.
pub fn wait_go_ready(port: u16, why_not: impl Fn() -> String) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while http_get(port, "/readyz").map(|(code, _)| code) != Some(200) {
        assert!(std::time::Instant::now() < deadline, "not ready on 127.0.0.1:{port}: {}", why_not());
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A minimal HTTP/1.0 GET on 127.0.0.1 (the probe and insecure metrics servers are plain HTTP).
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut response = String::new();
    s.read_to_string(&mut response).ok()?;
    let code = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    Some((code, body))
}

/// Registers CRDs and webhook configurations (ours unless given) at a webhook server on 127.0.0.1:`port` whose
/// certificate `ca` signed, taking them over from an install whose Services no API server here can reach
/// (tests/tools/dev-install.py, as `make run` does).
pub fn register_webhooks(plane: &Plane, port: u16, ca: &Path, crds: Option<&Path>, webhooks: Option<&Path>) {
    let mut install = Command::new("python3");
    install.arg(repo_root().join("tests/tools/dev-install.py"));
    if let Some(crds) = crds {
        install.arg("--crds").arg(crds);
    }
    if let Some(webhooks) = webhooks {
        install.arg("--webhooks").arg(webhooks);
    }
    run(
        install
            .arg("--kubectl")
            .arg(plane.bin_dir().join("kubectl"))
            .arg("--kubeconfig")
            .arg(plane.kubeconfig())
            .arg("--url")
            .arg(format!("https://127.0.0.1:{port}"))
            .arg("--ca")
            .arg(ca),
        "dev-install.py",
    );
}

/// Waits until the API server's calls reach the pool webhooks: an invalid pool, created as a server-side dry run,
/// comes back with the validating webhook's message (ours and the Go provider's say the same). `why_not` tells what
/// the server says when the deadline passes.
pub fn wait_webhooks_reached(plane: &Plane, kubeconfig: &Path, deadline: Instant, why_not: impl Fn() -> String) {
    let probe = r#"{"apiVersion":"ipam.cluster.x-k8s.io/v1alpha2","kind":"GlobalInClusterIPPool","metadata":{"name":"webhook-probe"},"spec":{"addresses":[],"prefix":24}}"#;
    loop {
        let mut child = Command::new(plane.bin_dir().join("kubectl"))
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["create", "--dry-run=server", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl");
        child.stdin.take().expect("stdin").write_all(probe.as_bytes()).expect("write");
        let out = child.wait_with_output().expect("kubectl");
        let stderr = String::from_utf8_lossy(&out.stderr);
        if stderr.contains("addresses is required") {
            return;
        }
        assert!(Instant::now() < deadline, "the API server does not reach the webhooks: {stderr}\n{}", why_not());
        std::thread::sleep(Duration::from_millis(200));
    }
}
