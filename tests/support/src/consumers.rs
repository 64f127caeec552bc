//! The real consumers of our pools, run against a control plane beside the Cluster API core manager: the Metal3
//! provider (CAPM3) and the vSphere provider (CAPV, with a vCenter simulator), each out of cluster like our manager,
//! with its CRDs and webhooks registered over TLS by tests/tools/dev-install.py. Built and cached by
//! tests/tools/k8s-bin.sh (sets `capm3`, `capv`, `vcsim`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::Plane;
use crate::manager::{free_port, http_get, is_zombie, spawn_tied};
use crate::release::{ok, tool_dir};

/// A consumer's controller-manager, killed when dropped (and when the test process exits).
pub struct Consumer {
    pub name: &'static str,
    pub log: PathBuf,
    wrapper: Option<Child>,
    pid: u32,
}

/// How one provider is registered and started.
struct Provider {
    name: &'static str,
    /// The k8s-bin.sh set holding `manager`, `crd/` and `webhook.yaml`.
    set: &'static str,
    /// `cluster.x-k8s.io/provider` as clusterctl labels its CRDs.
    provider_label: &'static str,
    /// The contract labels of its CRDs (from the provider's own kustomization, which the bare CRDs lack): CAPI reads
    /// them to find which version of a referenced kind to use.
    contract_labels: &'static [&'static str],
    /// A server-side dry run that only its validating webhook admits: the API server reaches the webhook.
    webhook_probe: &'static str,
}

const METAL3: Provider = Provider {
    name: "capm3",
    set: "capm3",
    provider_label: "infrastructure-metal3",
    contract_labels: &["cluster.x-k8s.io/v1beta1=v1beta1", "cluster.x-k8s.io/v1beta2=v1beta2"],
    webhook_probe: r#"{"apiVersion":"infrastructure.cluster.x-k8s.io/v1beta2","kind":"Metal3DataTemplate",
        "metadata":{"name":"webhook-probe","namespace":"default"},"spec":{"clusterName":"probe"}}"#,
};

const VSPHERE: Provider = Provider {
    name: "capv",
    set: "capv",
    provider_label: "infrastructure-vsphere",
    contract_labels: &["cluster.x-k8s.io/v1beta1=v1beta1", "cluster.x-k8s.io/v1beta2=v1beta2"],
    webhook_probe: r#"{"apiVersion":"infrastructure.cluster.x-k8s.io/v1beta2","kind":"VSphereMachineTemplate",
        "metadata":{"name":"webhook-probe","namespace":"default"},
        "spec":{"template":{"spec":{"template":"probe","numCPUs":2,"network":{"devices":[{"networkName":"n"}]}}}}}"#,
};

impl Consumer {
    /// CAPV v1.16.1 in govmomi (vCenter) mode, logging into `vcsim` with a credentials file. Its supervisor CRDs are
    /// not installed, which is how it picks that mode. `credentials` are vCenter's ([`Vcsim::credentials`]).
    pub fn vsphere(plane: &Plane, (username, password): (String, String)) -> Consumer {
        let credentials = plane.dir.join("capv-credentials.yaml");
        let text = format!("username: {username}\npassword: {password}\n");
        std::fs::write(&credentials, text).expect("CAPV's credentials file");
        let args = ["--leader-elect=false".to_owned(), format!("--credentials-file={}", credentials.display())];
        Self::start(plane, &VSPHERE, &args)
    }

    /// CAPM3 v1.13.2 with its CRDs (and the BareMetalHost CRD; no bare-metal operator, no Ironic: tests set a
    /// host's status by hand).
    pub fn metal3(plane: &Plane) -> Consumer {
        Self::start(plane, &METAL3, &[])
    }

    fn start(plane: &Plane, provider: &Provider, extra_args: &[String]) -> Consumer {
        let dir = tool_dir(provider.set);
        let certs = plane.dir.join(format!("{}-certs", provider.name));
        ok(
            Command::new("bash")
                .arg(crate::repo_root().join("tests/tools/dev-certs.sh"))
                .arg(&certs)
                .output()
                .expect("dev-certs.sh"),
            "dev-certs.sh",
        );
        let (webhook, health, metrics) = (free_port(), free_port(), free_port());
        let mut install = Command::new("python3");
        install
            .arg(crate::repo_root().join("tests/tools/dev-install.py"))
            .arg("--kubectl")
            .arg(plane.bin_dir().join("kubectl"))
            .arg("--kubeconfig")
            .arg(plane.kubeconfig())
            .arg("--url")
            .arg(format!("https://127.0.0.1:{webhook}"))
            .arg("--ca")
            .arg(certs.join("ca.crt"))
            .arg("--crds")
            .arg(dir.join("crd"))
            .arg("--webhooks")
            .arg(dir.join("webhook.yaml"))
            .arg("--name-prefix")
            .arg(format!("{}-", provider.name))
            .args(["--label", "clusterctl.cluster.x-k8s.io="])
            .arg("--label")
            .arg(format!("cluster.x-k8s.io/provider={}", provider.provider_label));
        for label in provider.contract_labels {
            install.args(["--label", label]);
        }
        ok(install.output().expect("dev-install.py"), "registering the consumer's CRDs and webhooks");

        let log = plane.dir.join("logs").join(format!("{}.log", provider.name));
        // Leader election is off by default; the webhook server has no bind-address flag (as CAPI's).
        // POD_NAMESPACE: where CAPV looks for its own identities (none here); CAPM3 ignores it.
        let mut command: Vec<OsString> = vec!["env".into(), "POD_NAMESPACE=capi-consumer-system".into()];
        command.push(dir.join("manager").into());
        command.extend(
            [
                format!("--kubeconfig={}", plane.kubeconfig().display()),
                format!("--webhook-port={webhook}"),
                format!("--webhook-cert-dir={}", certs.display()),
                format!("--health-addr=127.0.0.1:{health}"),
                format!("--diagnostics-address=127.0.0.1:{metrics}"),
                "--insecure-diagnostics".to_owned(),
                "--v=2".to_owned(),
            ]
            .into_iter()
            .chain(extra_args.iter().cloned())
            .map(OsString::from),
        );
        let (wrapper, pid) = spawn_tied(&log, &command);
        let consumer = Consumer { name: provider.name, log, wrapper: Some(wrapper), pid };
        consumer.wait_ready(plane, health, provider.webhook_probe);
        consumer
    }

    fn wait_ready(&self, plane: &Plane, health: u16, probe: &str) {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            assert!(self.is_running(), "{} exited:\n{}", self.name, self.log_tail(40));
            assert!(Instant::now() < deadline, "{} did not become ready:\n{}", self.name, self.log_tail(40));
            let ready = http_get(health, "/readyz").is_some_and(|(code, _)| code == 200);
            if ready && plane.kubectl_stdin(&["create", "--dry-run=server", "-f", "-"], probe).status.success() {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    pub fn is_running(&self) -> bool {
        Path::new(&format!("/proc/{}", self.pid)).exists() && !is_zombie(self.pid)
    }

    pub fn log_tail(&self, lines: usize) -> String {
        crate::tail(&self.log, lines)
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- {} log (last 40 lines) ---\n{}", self.name, self.log_tail(40));
        }
        if let Some(mut wrapper) = self.wrapper.take() {
            drop(wrapper.stdin.take());
            let _ = wrapper.wait();
        }
    }
}

/// vCenter's stand-in (tests/tools/vcsim: govmomi v0.53.0's simulator with a template to clone), on 127.0.0.1;
/// killed when dropped. Powered-on VMs report the first address of their metadata as VMware Tools would.
pub struct Vcsim {
    ready: serde_json::Value,
    wrapper: Option<Child>,
    pub log: PathBuf,
}

impl Vcsim {
    /// Starts a vCenter that several management clusters may share; its ready-file and log go to `dir`.
    pub fn start(dir: &Path) -> Vcsim {
        std::fs::create_dir_all(dir).expect("vcsim's folder");
        let ready_file = dir.join("vcsim.json");
        let _ = std::fs::remove_file(&ready_file);
        let log = dir.join("vcsim.log");
        let command: Vec<OsString> = vec![
            tool_dir("vcsim").join("vcsim").into(),
            "-listen=127.0.0.1:0".into(),
            "-http=127.0.0.1:0".into(),
            OsString::from(format!("-ready-file={}", ready_file.display())),
        ];
        let (wrapper, pid) = spawn_tied(&log, &command);
        let deadline = Instant::now() + Duration::from_secs(60);
        let ready = loop {
            if let Some(ready) = std::fs::read_to_string(&ready_file).ok().and_then(|t| serde_json::from_str(&t).ok()) {
                break ready;
            }
            let running = Path::new(&format!("/proc/{pid}")).exists() && !is_zombie(pid);
            assert!(running && Instant::now() < deadline, "vcsim did not start:\n{}", crate::tail(&log, 30));
            std::thread::sleep(Duration::from_millis(100));
        };
        Vcsim { ready, wrapper: Some(wrapper), log }
    }

    /// A field of the ready-file: `server` (host:port, as VSphereCluster.spec.server takes it), `thumbprint`,
    /// `username`, `password`, `datacenter`, `datastore`, `network`, `resourcePool`, `folder`, `template`.
    pub fn field(&self, name: &str) -> String {
        self.ready[name].as_str().unwrap_or_else(|| panic!("{name} in vcsim's ready-file")).to_owned()
    }

    /// The user and password vCenter accepts.
    pub fn credentials(&self) -> (String, String) {
        (self.field("username"), self.field("password"))
    }

    /// What CAPV wrote into the VM's guestinfo.metadata (decoded), once it has; None while the VM has none or does
    /// not exist.
    pub fn metadata(&self, vm: &str) -> Option<String> {
        self.metadata_endpoint(vm).and_then(|(code, body)| (code == 200).then_some(body))
    }

    /// Whether vCenter knows the VM (the endpoint answers 404 for none); panics when the endpoint does not answer.
    pub fn has_vm(&self, vm: &str) -> bool {
        self.metadata_endpoint(vm).expect("vcsim's metadata endpoint").0 != 404
    }

    fn metadata_endpoint(&self, vm: &str) -> Option<(u16, String)> {
        let url = self.field("metadataURL");
        let port = url.rsplit(':').next().and_then(|p| p.parse().ok()).expect("the metadata endpoint's port");
        http_get(port, &format!("/metadata/{vm}"))
    }
}

impl Drop for Vcsim {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- vcsim log (last 20 lines) ---\n{}", crate::tail(&self.log, 20));
        }
        if let Some(mut wrapper) = self.wrapper.take() {
            drop(wrapper.stdin.take());
            let _ = wrapper.wait();
        }
    }
}
