//! The release tools the packaging and `clusterctl move` tests drive: helm and clusterctl (built from their Go
//! modules), a local clusterctl repository with our release manifests, and the fixture CRDs clusterctl and the chart
//! expect (cert-manager, prometheus-operator).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::{Plane, release_bin_dir, repo_root, unique_name};

pub fn ok(out: Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Our release version, as clusterctl and the image name it (the crate's version).
pub fn our_version() -> String {
    format!("v{}", env!("CARGO_PKG_VERSION"))
}

/// The Go provider (sigs.k8s.io/cluster-api-ipam-provider-in-cluster v1.1.0): its binary `caip`, its `config/` and
/// `metadata.yaml`, built from its Go module once and cached (`tests/tools/k8s-bin.sh caip`).
pub fn go_provider_dir() -> PathBuf {
    let out = Command::new("bash")
        .arg(repo_root().join("tests/tools/k8s-bin.sh"))
        .arg("caip")
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("k8s-bin.sh caip");
    assert!(out.status.success(), "building the Go provider failed");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).lines().last().expect("the folder").trim())
}

/// The Go provider's binary (in `dir`, from [`go_provider_dir`]) running out of cluster against `plane`. Its log is
/// `logs/go-provider.log` in the plane's folder (each start appends). Killed when dropped (SIGKILL: its Lease stays
/// held until it expires, as when its pod is deleted; it never releases it anyway).
pub struct GoProvider {
    child: std::process::Child,
    /// Its `/metrics`, over plain HTTP on 127.0.0.1 (`--insecure-diagnostics`).
    pub metrics_port: u16,
    /// Its webhook server on 127.0.0.1 with the plane's certificate, when started [`GoProvider::as_deployed`].
    pub webhook_port: Option<u16>,
}

impl GoProvider {
    /// Its controllers alone, as a single replica runs them: leader election and its webhook server off.
    pub fn start(plane: &Plane, dir: &Path) -> GoProvider {
        Self::launch(plane, dir, None)
    }

    /// As its Deployment runs it: leader election on its Lease in `namespace` (its pod's namespace), and its webhook
    /// server (on 127.0.0.1: the build patches its host) with the plane's certificate. The caller registers its
    /// webhooks at [`GoProvider::webhook_port`].
    pub fn as_deployed(plane: &Plane, dir: &Path, namespace: &str) -> GoProvider {
        Self::launch(plane, dir, Some(namespace))
    }

    fn launch(plane: &Plane, dir: &Path, deployed_in: Option<&str>) -> GoProvider {
        use crate::manager::free_port;
        let (health, metrics_port) = (free_port(), free_port());
        let log_path = plane.dir.join("logs/go-provider.log");
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&log_path).expect("log");
        let mut args = vec![
            format!("--health-probe-bind-address=127.0.0.1:{health}"),
            format!("--diagnostics-address=127.0.0.1:{metrics_port}"),
            "--insecure-diagnostics".to_owned(),
        ];
        let mut command = Command::new(dir.join("caip"));
        let webhook_port = deployed_in.map(|namespace| {
            let port = free_port();
            let certs = plane.dir.join("webhook-certs");
            let made = Command::new("bash").arg(repo_root().join("tests/tools/dev-certs.sh")).arg(&certs).status();
            assert!(made.expect("dev-certs.sh").success(), "dev-certs.sh");
            args.extend([
                "--leader-elect=true".to_owned(),
                format!("--webhook-port={port}"),
                format!("--webhook-cert-dir={}", certs.display()),
            ]);
            command.env("POD_NAMESPACE", namespace);
            port
        });
        if webhook_port.is_none() {
            args.extend(["--leader-elect=false".to_owned(), "--webhook-port=0".to_owned()]);
        }
        let child = command
            .env("KUBECONFIG", plane.kubeconfig())
            .args(&args)
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("starting the Go provider");
        crate::manager::wait_go_ready(health, || format!("the Go provider, log {}", log_path.display()));
        GoProvider { child, metrics_port, webhook_port }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for GoProvider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn scratch(name: &str) -> PathBuf {
    let dir = repo_root().join(".dev/scratch").join(unique_name(name));
    std::fs::create_dir_all(&dir).expect("scratch folder");
    dir
}

pub fn helm(args: &[&str]) -> Output {
    helm_command(args).output().expect("helm")
}

/// helm with these arguments, run from the checkout with a state of its own (no user's repositories or plugins).
pub fn helm_command(args: &[&str]) -> Command {
    let state = scratch("helm");
    let mut helm = Command::new(release_bin_dir().join("helm"));
    helm.args(args)
        .env("HELM_CACHE_HOME", &state)
        .env("HELM_CONFIG_HOME", &state)
        .env("HELM_DATA_HOME", &state)
        .current_dir(repo_root());
    helm
}

/// The CRDs the chart and clusterctl expect beside ours: cert-manager's (a fixture) and the Prometheus Operator's
/// ServiceMonitor and PrometheusRule, the real ones from its Go module (`tests/tools/k8s-bin.sh prometheus`).
pub fn install_fixture_crds(plane: &Plane) {
    let cert_manager = repo_root().join("tests/fixtures/cert-manager-crds.yaml");
    let operator = tool_dir("prometheus").join("crd");
    for path in [cert_manager, operator] {
        let path = path.to_string_lossy().into_owned();
        ok(plane.kubectl_output(&["apply", "--server-side", "-f", &path]), &path);
    }
    ok(
        plane.kubectl_output(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/certificates.cert-manager.io",
            "crd/servicemonitors.monitoring.coreos.com",
            "crd/prometheusrules.monitoring.coreos.com",
        ]),
        "CRDs established",
    );
}

/// The cache folder of a set of tools `tests/tools/k8s-bin.sh` builds (`make test` builds them all first).
pub fn tool_dir(set: &str) -> PathBuf {
    let out = Command::new(repo_root().join("tests/tools/k8s-bin.sh")).args(["--print-dir", set]).output();
    PathBuf::from(ok(out.expect("k8s-bin.sh"), "k8s-bin.sh --print-dir").trim())
}

/// `make release-manifests` (out/ipam-components.yaml and out/metadata.yaml), once at a time in this test binary.
pub fn release_manifests() -> (String, String) {
    static WRITING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = WRITING.lock().unwrap_or_else(|e| e.into_inner());
    let out = Command::new("make")
        .arg("--no-print-directory")
        .arg("release-manifests")
        .current_dir(repo_root())
        .output()
        .expect("make");
    ok(out, "make release-manifests");
    let components = std::fs::read_to_string(repo_root().join("out/ipam-components.yaml")).expect("components");
    let metadata = std::fs::read_to_string(repo_root().join("out/metadata.yaml")).expect("metadata");
    (components, metadata)
}

/// The core provider's components in the local repository: its namespace only. Every test plane already runs Cluster
/// API's manager with its CRDs and webhooks (tests/tools/control-plane.sh); its real components would point them at
/// Services no API server here can reach.
const CORE_STAND_IN: &str = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: capi-system\n  labels:\n    cluster.x-k8s.io/provider: cluster-api\n";

/// A local clusterctl repository with our release (and, for `init`, the core provider and the kubeadm providers
/// clusterctl's first init always adds, as stand-ins).
pub fn repository(dir: &Path, components: &str, metadata: &str, with_core: bool) -> PathBuf {
    repository_of(dir, &[Release { version: &our_version(), components, metadata }], with_core)
}

/// One release of the `in-cluster` IPAM provider in a local repository.
pub struct Release<'a> {
    pub version: &'a str,
    pub components: &'a str,
    pub metadata: &'a str,
}

/// As [`repository`], with several releases of the `in-cluster` provider side by side (clusterctl lists the
/// versions of a `file://` repository from the folders beside the one its URL names).
pub fn repository_of(dir: &Path, releases: &[Release], with_core: bool) -> PathBuf {
    let mut url = PathBuf::new();
    for release in releases {
        let folder = dir.join("ipam-in-cluster").join(release.version);
        std::fs::create_dir_all(&folder).expect("repo");
        std::fs::write(folder.join("ipam-components.yaml"), release.components).expect("write");
        std::fs::write(folder.join("metadata.yaml"), release.metadata).expect("write");
        url = folder.join("ipam-components.yaml");
    }
    repository_config(dir, &url, with_core)
}

/// A clusterctl config in `dir` whose `in-cluster` IPAM provider is the release at `url` (a repository's
/// `.../ipam-in-cluster/<version>/ipam-components.yaml`), with the stand-ins of [`repository`] for `init`.
pub fn repository_config(dir: &Path, url: &Path, with_core: bool) -> PathBuf {
    let mut config =
        format!("providers:\n  - name: in-cluster\n    type: IPAMProvider\n    url: \"file://{}\"\n", url.display());
    if with_core {
        // clusterctl's first init always adds the kubeadm bootstrap and control-plane providers: stand-ins too.
        let kubeadm = |label: &str| {
            format!(
                "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: capi-kubeadm-{label}-system\n  labels:\n    cluster.x-k8s.io/provider: {label}\n"
            )
        };
        for (folder, name, kind, file, components) in [
            ("cluster-api", "cluster-api", "CoreProvider", "core-components.yaml", CORE_STAND_IN.to_owned()),
            (
                "bootstrap-kubeadm",
                "kubeadm",
                "BootstrapProvider",
                "bootstrap-components.yaml",
                kubeadm("bootstrap-kubeadm"),
            ),
            (
                "control-plane-kubeadm",
                "kubeadm",
                "ControlPlaneProvider",
                "control-plane-components.yaml",
                kubeadm("control-plane-kubeadm"),
            ),
        ] {
            let dir = dir.join(folder).join("v1.14.2");
            std::fs::create_dir_all(&dir).expect("repo");
            std::fs::write(dir.join(file), components).expect("write");
            std::fs::write(
                dir.join("metadata.yaml"),
                "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\nreleaseSeries:\n  - {major: 1, minor: 14, contract: v1beta2}\n",
            )
            .expect("write");
            config.push_str(&format!(
                "  - name: {name}\n    type: {kind}\n    url: \"file://{}\"\n",
                dir.join(file).display()
            ));
        }
        config.push_str("cert-manager:\n  version: v1.21.1\n");
    }
    let path = dir.join("clusterctl.yaml");
    std::fs::write(&path, config).expect("write");
    path
}

pub fn clusterctl(dir: &Path, args: &[&str]) -> Output {
    Command::new(release_bin_dir().join("clusterctl"))
        .args(args)
        .env("CLUSTERCTL_DISABLE_VERSIONCHECK", "true")
        .env("XDG_CONFIG_HOME", dir)
        .env("HOME", dir)
        .output()
        .expect("clusterctl")
}

/// `clusterctl move` of `namespace` from one plane to another; panics with clusterctl's output when it fails.
pub fn clusterctl_move(from: &Plane, to: &Plane, namespace: &str) {
    let dir = scratch("move");
    let out = clusterctl(
        &dir,
        &[
            "move",
            "--kubeconfig",
            &from.kubeconfig().to_string_lossy(),
            "--to-kubeconfig",
            &to.kubeconfig().to_string_lossy(),
            "--namespace",
            namespace,
            "-v",
            "1",
        ],
    );
    let log = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "clusterctl move failed:\n{log}");
    assert!(log.contains("Moving Cluster API objects"), "{log}");
}

/// `clusterctl init` of the core provider (and the kubeadm providers it always adds), with our IPAM provider when
/// `with_ipam`, from a local repository of our release manifests; returns clusterctl's output.
pub fn clusterctl_init(plane: &Plane, with_ipam: bool) -> String {
    let (components, metadata) = release_manifests();
    let dir = scratch("clusterctl-init");
    let config = repository(&dir, &components, &metadata, true);
    clusterctl_init_from(plane, &dir, &config, with_ipam.then(our_version).as_deref())
}

/// `clusterctl init` from the repository `config` (in `dir`), with the `in-cluster` IPAM provider at `ipam` version.
pub fn clusterctl_init_from(plane: &Plane, dir: &Path, config: &Path, ipam: Option<&str>) -> String {
    let config = config.to_string_lossy().into_owned();
    let kubeconfig = plane.kubeconfig().to_string_lossy().into_owned();
    let mut args = vec!["init", "--core", "cluster-api:v1.14.2", "--bootstrap", "kubeadm:v1.14.2"];
    args.extend(["--control-plane", "kubeadm:v1.14.2"]);
    let ipam = ipam.map(|v| format!("in-cluster:{v}"));
    if let Some(ipam) = &ipam {
        args.extend(["--ipam", ipam]);
    }
    args.extend(["--config", &config, "--kubeconfig", &kubeconfig]);
    let out = clusterctl(dir, &args);
    let log = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    ok(out, "clusterctl init");
    log
}

/// The type and version clusterctl's inventory records for our IPAM provider ("IPAMProvider v2.0.0").
pub fn ipam_provider_version(plane: &Plane) -> String {
    let inventory = "providers.clusterctl.cluster.x-k8s.io/ipam-in-cluster";
    plane.kubectl(&["get", inventory, "-n", "capi-ipam-in-cluster-system", "-o", "jsonpath={.type} {.version}"])
}
