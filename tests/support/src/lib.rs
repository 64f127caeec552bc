//! Test support for the integration tests: a real etcd + kube-apiserver (tests/tools/control-plane.sh), clients and a
//! fresh namespace per test, private control planes for tests that stop or restart a component, and the API server's
//! log tail on failure.

pub mod claims;
pub mod consumers;
pub mod load;
pub mod manager;
pub mod oci;
pub mod process;
pub mod proxy;
pub mod release;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ApiResource, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::GroupVersionKind;
use kube::{Client, Config};

/// The checkout the tests run from: `CARGO_MANIFEST_DIR` as cargo sets it when it runs a test (or as a test sets it
/// for a copy of itself, see tests/image.rs), else the one this crate was built from (it lives in `tests/support`).
pub fn repo_root() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).expect("tests/support is two folders down").into(),
        PathBuf::from,
    )
}

/// A folder for files that a process of another user reads or runs, removed when dropped. It is made under the
/// system's temporary folder (or `/tmp`, `/var/tmp`, `/dev/shm`), whichever every user can enter, never inside the
/// checkout: a checkout under a private home folder (mode 0700 or 0750) is out of that user's reach.
pub struct SharedScratch(PathBuf);

impl SharedScratch {
    pub fn new(name: &str) -> SharedScratch {
        use std::os::unix::fs::PermissionsExt;
        let candidates = [std::env::temp_dir(), "/tmp".into(), "/var/tmp".into(), "/dev/shm".into()];
        let base = candidates.iter().find(|c| enterable_by_anyone(c)).unwrap_or_else(|| {
            panic!(
                "no temporary folder every user can enter among {candidates:?}: tests that run as another user need one"
            )
        });
        let dir = base.join(unique_name(&format!("capi-ipam-{name}")));
        std::fs::create_dir(&dir).expect("a shared scratch folder");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod 0755");
        SharedScratch(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for SharedScratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Whether any user can enter `dir`: it and every folder above it have the others' execute bit.
pub fn enterable_by_anyone(dir: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let Ok(dir) = dir.canonicalize() else { return false };
    dir.ancestors().all(|d| std::fs::metadata(d).is_ok_and(|m| m.is_dir() && m.permissions().mode() & 0o001 != 0))
}

/// The folder holding helm and clusterctl (`tests/tools/k8s-bin.sh release`; `make test` builds them).
pub fn release_bin_dir() -> PathBuf {
    let out = Command::new("bash")
        .arg(repo_root().join("tests/tools/k8s-bin.sh"))
        .arg("release")
        .output()
        .expect("running k8s-bin.sh release");
    assert!(out.status.success(), "building helm and clusterctl failed: {}", String::from_utf8_lossy(&out.stderr));
    PathBuf::from(String::from_utf8_lossy(&out.stdout).lines().last().expect("a folder").trim())
}

fn script(args: &[&str]) -> Result<(), String> {
    let out = Command::new("bash")
        .arg(repo_root().join("tests/tools/control-plane.sh"))
        .args(args)
        .output()
        .map_err(|e| format!("running control-plane.sh: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "control-plane.sh {} failed:\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// A running control plane: its state folder holds kubeconfigs, certificates and logs.
#[derive(Debug)]
pub struct Plane {
    pub dir: PathBuf,
    private: bool,
}

impl Plane {
    /// The shared control plane of `make cluster-up` (`.dev/`), started when it is not running
    /// (`make test` stops it again if it started it).
    pub fn shared() -> &'static Plane {
        static SHARED: OnceLock<Plane> = OnceLock::new();
        SHARED.get_or_init(|| {
            let dir =
                std::env::var_os("CAPI_IPAM_TEST_PLANE").map(PathBuf::from).unwrap_or_else(|| repo_root().join(".dev"));
            let dir_arg = dir.to_string_lossy().into_owned();
            if script(&["status", "--dir", &dir_arg]).is_err() {
                script(&["up", "--dir", &dir_arg]).unwrap_or_else(|e| panic!("{e}"));
            }
            Plane { dir, private: false }
        })
    }

    /// A control plane of this test's own, removed when dropped; for tests that stop or restart a component.
    pub fn private(name: &str) -> Plane {
        Self::private_with(name, &[])
    }

    /// A private plane started with extra `control-plane.sh up` options (such as `--no-watch-cache`).
    pub fn private_with(name: &str, options: &[&str]) -> Plane {
        static N: AtomicU32 = AtomicU32::new(0);
        let dir = repo_root().join(".dev/private").join(format!(
            "{name}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        let dir_arg = dir.to_string_lossy().into_owned();
        let mut args = vec!["up", "--dir", &dir_arg];
        args.extend_from_slice(options);
        script(&args).unwrap_or_else(|e| panic!("{e}"));
        Plane { dir, private: true }
    }

    /// A handle on a plane another handle owns (it is not removed when this one is dropped).
    pub fn at(dir: &Path) -> Plane {
        Plane { dir: dir.to_path_buf(), private: false }
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    pub fn restricted_kubeconfig(&self) -> PathBuf {
        self.dir.join("kubeconfig-restricted")
    }

    /// The folder holding kube-apiserver, kubectl and etcd.
    pub fn bin_dir(&self) -> PathBuf {
        self.env("BIN_DIR").map(PathBuf::from).expect("BIN_DIR in control-plane.env")
    }

    pub fn api_port(&self) -> u16 {
        self.env("API_PORT").and_then(|p| p.parse().ok()).expect("API_PORT in control-plane.env")
    }

    fn env(&self, key: &str) -> Option<String> {
        let text = std::fs::read_to_string(self.dir.join("control-plane.env")).ok()?;
        text.lines().find_map(|l| l.strip_prefix(&format!("{key}=")).map(str::to_owned))
    }

    /// An admin client (group system:masters).
    pub async fn client(&self) -> Client {
        client_from(&self.kubeconfig()).await
    }

    /// A client for user `it-restricted` (group `it:restricted`), which can do nothing until a test grants it rights.
    pub async fn restricted_client(&self) -> Client {
        client_from(&self.restricted_kubeconfig()).await
    }

    /// Stops etcd or the API server, keeping the state (private planes only).
    pub fn stop(&self, component: &str) {
        assert!(self.private, "only a private control plane may be stopped");
        script(&["stop", "--dir", &self.dir.to_string_lossy(), component]).unwrap_or_else(|e| panic!("{e}"));
    }

    /// Starts a stopped component again on the same port and data; returns once it is ready.
    pub fn start(&self, component: &str) {
        script(&["start", "--dir", &self.dir.to_string_lossy(), component]).unwrap_or_else(|e| panic!("{e}"));
    }

    /// The process id of a component (`etcd`, `apiserver`, `capi`), while it runs.
    pub fn pid(&self, component: &str) -> Option<u32> {
        std::fs::read_to_string(self.dir.join(format!("{component}.pid"))).ok()?.trim().parse().ok()
    }

    /// The last `lines` lines of the API server log.
    pub(crate) fn apiserver_log_tail(&self, lines: usize) -> String {
        tail(&self.dir.join("logs/apiserver.log"), lines)
    }

    /// Successful writes (`verb`: create, delete, ...) of `resource` in `namespace` whose user agent contains
    /// `agent`, from the API server's audit log (control-plane.sh audits the writes of the IPAM group).
    pub fn audited_writes(&self, verb: &str, resource: &str, namespace: &str, agent: &str) -> usize {
        self.audited(verb, resource, namespace, agent).len()
    }

    /// The audit events of [`Plane::audited_writes`].
    pub fn audited(&self, verb: &str, resource: &str, namespace: &str, agent: &str) -> Vec<serde_json::Value> {
        let audit = std::fs::read_to_string(self.dir.join("logs/audit.log")).expect("audit log");
        audit
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|e| {
                (verb == "*" || e["verb"] == verb)
                    && e["objectRef"]["resource"] == resource
                    && e["objectRef"]["namespace"] == namespace
                    && e["responseStatus"]["code"].as_u64().is_some_and(|c| (200..300).contains(&c))
                    && e["userAgent"].as_str().is_some_and(|a| a.contains(agent))
            })
            .collect()
    }

    /// Runs kubectl against this plane as admin and returns its stdout; panics with stderr on failure.
    pub fn kubectl(&self, args: &[&str]) -> String {
        let out = self.kubectl_output(args);
        assert!(out.status.success(), "kubectl {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs kubectl as admin with `input` on stdin (e.g. `apply -f -`).
    pub fn kubectl_stdin(&self, args: &[&str], input: &str) -> std::process::Output {
        use std::io::Write;
        let mut child = Command::new(self.bin_dir().join("kubectl"))
            .arg("--kubeconfig")
            .arg(self.kubeconfig())
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("running kubectl");
        child.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("writing to kubectl");
        child.wait_with_output().expect("kubectl")
    }

    pub fn kubectl_output(&self, args: &[&str]) -> std::process::Output {
        Command::new(self.bin_dir().join("kubectl"))
            .arg("--kubeconfig")
            .arg(self.kubeconfig())
            .args(args)
            .output()
            .expect("running kubectl")
    }
}

impl Drop for Plane {
    fn drop(&mut self) {
        if self.private {
            if std::thread::panicking() {
                eprintln!("--- private API server log (last 40 lines) ---\n{}", self.apiserver_log_tail(40));
            }
            let _ = script(&["down", "--dir", &self.dir.to_string_lossy()]);
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| format!("(cannot read {}: {e})", path.display()));
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

pub(crate) async fn client_from(kubeconfig: &Path) -> Client {
    let kc = Kubeconfig::read_from(kubeconfig).expect("reading kubeconfig");
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await.expect("kubeconfig");
    Client::try_from(config).expect("client")
}

/// One test's view of a control plane: an admin client and a fresh namespace. When the test panics, the API server's
/// log tail is printed.
pub struct TestEnv {
    pub plane: &'static Plane,
    pub client: Client,
    pub namespace: String,
}

/// The manager of this test binary, on the shared control plane (with Cluster API v1.14.2, v1beta2 storage),
/// started on first use. Test binaries run one after another, so only one manager reconciles at a time.
static MANAGER: OnceLock<manager::Manager> = OnceLock::new();

pub fn shared_manager() -> &'static manager::Manager {
    MANAGER.get_or_init(|| {
        manager::Manager::start(Plane::shared(), &["--insecure-diagnostics", "--orphan-release-delay=2"])
    })
}

impl TestEnv {
    /// A fresh namespace on the shared control plane, with this binary's manager running.
    pub async fn with_manager(prefix: &str) -> TestEnv {
        tokio::task::spawn_blocking(|| {
            shared_manager();
        })
        .await
        .expect("starting the manager");
        Self::new(prefix).await
    }

    /// A fresh namespace `<prefix>-<random>` on the shared control plane.
    pub async fn new(prefix: &str) -> TestEnv {
        let plane = Plane::shared();
        let client = plane.client().await;
        let namespace = create_namespace(&client, prefix).await;
        TestEnv { plane, client, namespace }
    }
}

impl Drop for TestEnv {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- API server log (last 40 lines) ---\n{}", self.plane.apiserver_log_tail(40));
            if let Some(m) = MANAGER.get() {
                eprintln!("--- manager log (last 80 lines) ---\n{}", m.log_tail(80));
            }
        }
    }
}

/// Creates a namespace with a unique name. Namespaces are never cleaned up: without kube-controller-manager they would
/// stay Terminating forever, so each test simply uses a new one.
pub async fn create_namespace(client: &Client, prefix: &str) -> String {
    let name = unique_name(prefix);
    let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).expect("namespace");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("creating the test namespace");
    name
}

/// `<prefix>-<8 random hex digits>`, valid as a DNS label.
pub fn unique_name(prefix: &str) -> String {
    use std::hash::{BuildHasher, RandomState};
    static N: AtomicU32 = AtomicU32::new(0);
    let h = RandomState::new().hash_one((
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst),
        std::time::SystemTime::now(),
    ));
    format!("{prefix}-{:08x}", h as u32)
}

/// The API resource of `kind` in `group`/`version`. Its plural is the kind in lower case with "s", or "es" after an
/// "s" (IPAddress: ipaddresses), as for every kind the tests use.
pub fn resource(group: &str, version: &str, kind: &str) -> ApiResource {
    let singular = kind.to_lowercase();
    let plural = if singular.ends_with('s') { format!("{singular}es") } else { format!("{singular}s") };
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), &plural)
}

/// Polls `check` every 50 ms until it returns `Some`, or panics after `timeout` with `what`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    eventually_every(timeout, Duration::from_millis(50), what, check).await
}

/// As [`eventually`], polling every `interval` (checks that start a process, such as kubectl, poll less often).
pub async fn eventually_every<T, F, Fut>(timeout: Duration, interval: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(interval).await;
    }
}
