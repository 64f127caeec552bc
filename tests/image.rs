//! The image of `make image` (tests/tools/image.sh, which `make test` runs first), taken apart as a registry or a
//! container runtime would: every blob matches its digest, the config runs /manager as 65532:65532 with no shell,
//! the one layer holds the statically linked manager and nothing else, and crane accepts both the OCI layout and the
//! docker tarball. Then the entrypoint, extracted from the layer, runs as 65532 with an empty environment against the
//! test control plane and binds a claim; and it does so again from a copy of the checkout under a private folder
//! (mode 0700), as a home folder is: what that user reads must never be inside the checkout.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};
use support::claims::{Capi, address_of, create_pool};
use support::manager::{Launch, Manager};
use support::oci::{Registry, blob, crane, json_blob, layout_index, needs_a_loader, run_with_stdin, sha256_hex};
use support::{Plane, SharedScratch, TestEnv, enterable_by_anyone, repo_root};

const NONROOT: u32 = 65532;

fn image_dir() -> PathBuf {
    let dir = repo_root().join("out/image");
    assert!(dir.join("oci/index.json").is_file(), "no image in {}: run `make image` first", dir.display());
    dir
}

struct Image {
    /// The image's config.
    config: Value,
    /// The entrypoint, extracted from the layer.
    manager: PathBuf,
    /// Where it was extracted (removed with it).
    _extracted: SharedScratch,
}

/// Reads the OCI layout: index → manifest → config and the one layer, each against its digest; extracts the layer.
fn take_apart(dir: &Path) -> Image {
    let layout = dir.join("oci");
    let index = layout_index(&layout);
    let manifests = index["manifests"].as_array().expect("manifests");
    assert_eq!(manifests.len(), 1, "{index}");
    let name = std::fs::read_to_string(dir.join("name")).expect("the image name");
    let name = name.trim();
    assert_eq!(manifests[0]["annotations"]["io.containerd.image.name"], name);
    assert_eq!(manifests[0]["annotations"]["org.opencontainers.image.ref.name"], name.rsplit_once(':').unwrap().1);

    let manifest = json_blob(&layout, &manifests[0]);
    assert_eq!(manifest["mediaType"], "application/vnd.oci.image.manifest.v1+json");
    assert_eq!(manifest["config"]["mediaType"], "application/vnd.oci.image.config.v1+json");
    let config = json_blob(&layout, &manifest["config"]);
    let layers = manifest["layers"].as_array().expect("layers");
    assert_eq!(layers.len(), 1, "one layer, no base image: {manifest}");
    assert_eq!(layers[0]["mediaType"], "application/vnd.oci.image.layer.v1.tar+gzip");
    let compressed = blob(&layout, layers[0]["digest"].as_str().expect("digest"));
    assert_eq!(compressed.len() as u64, layers[0]["size"].as_u64().expect("size"));
    let layer = run_with_stdin("gzip", &["-dc"], &compressed);
    assert_eq!(config["rootfs"]["diff_ids"], json!([format!("sha256:{}", sha256_hex(&layer))]));

    // Only the manager: root-owned, executable, at /manager; no shell, no libc, no /etc.
    let listing = String::from_utf8(run_with_stdin("tar", &["--numeric-owner", "-tvf", "-"], &layer)).unwrap();
    let entries: Vec<Vec<&str>> = listing.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(entries.len(), 1, "the layer holds more than the manager:\n{listing}");
    let entry = &entries[0];
    assert_eq!((entry[0], entry[1], entry[entry.len() - 1]), ("-rwxr-xr-x", "0/0", "manager"), "{listing}");

    // The manager runs as 65532: extracted where that user can reach it, whatever the checkout's parents allow.
    let scratch = SharedScratch::new("image");
    let extracted = scratch.path().to_path_buf();
    let out = Command::new("tar")
        .args(["-xf", "-", "-C"])
        .arg(&extracted)
        .stdin(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().expect("stdin").write_all(&layer)?;
            child.wait()
        })
        .expect("tar -x");
    assert!(out.success());
    std::fs::set_permissions(&extracted, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let manager = extracted.join("manager");
    assert!(!needs_a_loader(&std::fs::read(&manager).expect("the manager")), "the manager is dynamically linked");
    assert!(needs_a_loader(&std::fs::read("/bin/sh").expect("/bin/sh")), "the ELF check cannot tell");
    Image { config, manager, _extracted: scratch }
}

#[test]
fn the_image_holds_the_static_manager_run_as_nonroot_and_nothing_else() {
    let image = take_apart(&image_dir());
    let config = &image.config;
    assert_eq!((config["os"].as_str(), config["architecture"].as_str()), (Some("linux"), Some("amd64")));
    let run = &config["config"];
    assert_eq!(run["User"], "65532:65532");
    assert_eq!(run["Entrypoint"], json!(["/manager"]));
    assert!(run["Cmd"].is_null() && run["Env"].is_null() && run["Shell"].is_null(), "{run}");
    let version = env!("CARGO_PKG_VERSION");
    let labels = &run["Labels"];
    assert_eq!(labels["org.opencontainers.image.title"], "capi-ipam-in-cluster");
    assert_eq!(labels["org.opencontainers.image.licenses"], "Apache-2.0");
    assert_eq!(labels["org.opencontainers.image.version"], format!("v{version}"));
    assert!(labels["org.opencontainers.image.revision"].as_str().is_some_and(|r| !r.is_empty()));
    // Built from the same binary, the same image: no build time in it.
    assert_eq!(config["created"], "1970-01-01T00:00:00Z");

    let out = Command::new(&image.manager).arg("--version").env_clear().output().expect("the extracted manager");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), format!("manager {version}"));
}

#[test]
fn crane_accepts_the_oci_layout_and_the_docker_tarball() {
    let dir = image_dir();
    let tarball = dir.join("image.tar").to_string_lossy().into_owned();
    assert!(crane(&["validate", "--tarball", &tarball]).starts_with("PASS"));
    let manifest = String::from_utf8(run_with_stdin("tar", &["-xOf", &tarball, "manifest.json"], b"")).unwrap();
    let name = std::fs::read_to_string(dir.join("name")).unwrap();
    assert_eq!(serde_json::from_str::<Value>(&manifest).unwrap()[0]["RepoTags"], json!([name.trim()]));

    // A registry on 127.0.0.1 takes both, and serves back the layout's digest.
    let registry = Registry::start();
    let layout = dir.join("oci").to_string_lossy().into_owned();
    let (from_layout, from_tarball) =
        (format!("{}:layout", registry.reference("manager")), format!("{}:tar", registry.reference("m")));
    let pushed = crane(&["push", &layout, &from_layout]);
    crane(&["push", &tarball, &from_tarball]);
    for reference in [&from_layout, &from_tarball] {
        assert!(crane(&["validate", "--remote", reference]).starts_with("PASS"));
    }
    let index = layout_index(&dir.join("oci"));
    let digest = index["manifests"][0]["digest"].as_str().unwrap().to_owned();
    assert!(pushed.trim().ends_with(&digest), "{pushed} is not {digest}");
    assert_eq!(crane(&["digest", &from_layout]).trim(), digest);
    // The docker tarball carries the same config (its manifest is a docker one, hence another digest).
    let config = |r: &str| serde_json::from_str::<Value>(&crane(&["config", r])).expect("config");
    assert_eq!(config(&from_layout), config(&from_tarball));
}

/// The two entrypoint tests each register our webhooks at their manager (one configuration for the control plane):
/// run together, the one that ends first leaves the other's requests calling a webhook that is gone.
static ONE_ENTRYPOINT_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The entrypoint as a pod runs it: user 65532, no environment, its kubeconfig and certificates readable by it alone.
#[tokio::test]
async fn the_entrypoint_from_the_layer_binds_a_claim_against_the_real_api_server() {
    let _alone = ONE_ENTRYPOINT_AT_A_TIME.lock().await;
    let image = take_apart(&image_dir());
    let command: Vec<OsString> =
        ["setpriv", "--reuid=65532", "--regid=65532", "--clear-groups", "--inh-caps=-all", "env", "-i"]
            .iter()
            .map(OsString::from)
            .chain([image.manager.into_os_string()])
            .collect();
    let launch = Launch { command, owner: Some(NONROOT), ..Launch::default() };
    let manager = Manager::started(Plane::shared(), launch, &["--insecure-diagnostics"]).await;
    let status = std::fs::read_to_string(format!("/proc/{}/status", manager.pid().expect("pid"))).expect("status");
    let uid_line = status.lines().find(|l| l.starts_with("Uid:")).expect("Uid");
    assert!(uid_line.split_whitespace().skip(1).all(|u| u == NONROOT.to_string()), "{uid_line}");

    let env = TestEnv::new("image").await;
    let capi = Capi::V1Beta2;
    let spec = json!({"addresses": ["10.77.0.10-10.77.0.12"], "prefix": 24, "gateway": "10.77.0.1"});
    create_pool(&env.client, "InClusterIPPool", &env.namespace, "from-image", spec).await;
    capi.create_claim(&env.client, &env.namespace, "c", "InClusterIPPool", "from-image").await;
    let address = capi.wait_bound(&env.client, &env.namespace, "c").await;
    assert_eq!(address_of(&address), "10.77.0.10");
    let metrics = manager.metrics().expect("metrics");
    assert!(metrics.contains("capi_ipam_allocations_total{kind=\"InClusterIPPool\"} 1"), "{metrics}");
}

/// The entrypoint test again, from a copy of the checkout in a folder only root may enter (as a home folder with mode
/// 0700 is): this test binary, run with that copy as `CARGO_MANIFEST_DIR`, must find everything the manager, run as
/// 65532, reads outside the checkout. It fails here first when a test puts such a file back inside it.
#[test]
fn the_entrypoint_runs_from_a_checkout_under_a_private_folder() {
    if std::env::var_os("CAPI_IPAM_PRIVATE_CHECKOUT").is_some() {
        return; // The copy itself runs only the entrypoint test.
    }
    // The copy's entrypoint test runs while this one holds the lock, never beside this binary's own.
    let _alone = ONE_ENTRYPOINT_AT_A_TIME.blocking_lock();
    let root = repo_root();
    let private = tempfile_dir("private");
    std::fs::set_permissions(&private, std::os::unix::fs::PermissionsExt::from_mode(0o700)).expect("chmod 0700");
    let copy = private.join("checkout");
    // The checkout's own files (tracked and new, not ignored), and the image under test.
    let listed = Command::new("git")
        .args(["ls-files", "-z", "--cached", "--others", "--exclude-standard"])
        .current_dir(&root)
        .output()
        .expect("git ls-files");
    assert!(listed.status.success(), "git ls-files: {}", String::from_utf8_lossy(&listed.stderr));
    for file in listed.stdout.split(|b| *b == 0).filter(|f| !f.is_empty()) {
        let file = Path::new(std::str::from_utf8(file).expect("a UTF-8 path"));
        if !root.join(file).is_file() {
            continue; // Deleted but not yet committed.
        }
        let to = copy.join(file);
        std::fs::create_dir_all(to.parent().expect("a folder")).expect("folder");
        std::fs::copy(root.join(file), &to).expect("copying the checkout");
    }
    for file in ["oci/index.json", "oci/oci-layout", "image.tar", "name"] {
        let to = copy.join("out/image").join(file);
        std::fs::create_dir_all(to.parent().expect("a folder")).expect("folder");
        std::fs::copy(image_dir().join(file), &to).expect("copying the image");
    }
    let blobs = image_dir().join("oci/blobs/sha256");
    std::fs::create_dir_all(copy.join("out/image/oci/blobs/sha256")).expect("folder");
    for blob in std::fs::read_dir(&blobs).expect("blobs") {
        let blob = blob.expect("a blob").path();
        std::fs::copy(&blob, copy.join("out/image/oci/blobs/sha256").join(blob.file_name().expect("a name")))
            .expect("blob");
    }
    assert!(!enterable_by_anyone(&copy), "the copy must be out of other users' reach");
    let out = Command::new(std::env::current_exe().expect("this test binary"))
        .args(["--exact", "the_entrypoint_from_the_layer_binds_a_claim_against_the_real_api_server", "--nocapture"])
        .env("CARGO_MANIFEST_DIR", &copy)
        .env("CAPI_IPAM_PRIVATE_CHECKOUT", "1")
        // The control plane of this checkout (the copy has none of its own).
        .env("CAPI_IPAM_TEST_PLANE", Plane::shared().dir.clone())
        .output()
        .expect("running the entrypoint test from the copy");
    let _ = std::fs::remove_dir_all(&private);
    let output = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the entrypoint test failed from a checkout under a private folder:\n{output}");
    assert!(output.contains("1 passed"), "the entrypoint test did not run from the copy:\n{output}");
}

/// A new folder under the system's temporary folder.
fn tempfile_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(support::unique_name(&format!("capi-ipam-{name}")));
    std::fs::create_dir_all(&dir).expect("a temporary folder");
    dir
}
