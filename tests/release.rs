//! The release of `make release` (tests/tools/release.sh, which `make test` runs first), taken apart as the tools that
//! consume it would: `sha256sum -c` over every file; the image index pushed to a registry and each architecture's
//! manager extracted from its layer, statically linked for its machine and run (arm64 under qemu-user); the SBOMs
//! validated by pyspdxtools and held against `cargo tree` and the binaries; `clusterctl init` from the release's
//! repository layout against a real API server; the Operator's ConfigMap and OCI artifact against the clusterctl files
//! (the Operator itself installs from both forms in tests/install.rs); and the packaged chart against the chart's
//! folder.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use support::Plane;
use support::oci::{
    Registry, blob, crane, described_blob, elf_machine, json_blob, layout_index, needs_a_loader, run_with_stdin,
    sha256_hex,
};
use support::release::{
    clusterctl, clusterctl_init_from, helm, install_fixture_crds, ipam_provider_version, ok, our_version,
    release_manifests, repository_config, scratch,
};

const IMAGE: &str = "ghcr.io/capi-ipam-in-cluster/manager";
/// ELF machines (`e_machine`) by OCI architecture.
const ARCHITECTURES: [(&str, u16); 2] = [("amd64", 62), ("arm64", 183)];

fn release_dir() -> PathBuf {
    let dir = support::repo_root().join("out/release");
    assert!(dir.join("SHA256SUMS").is_file(), "no release in {}: run `make release` first", dir.display());
    dir
}

/// One architecture's image of the index: its manifest's digest, its config, and its manager from the layer.
struct PlatformImage {
    digest: String,
    config: Value,
    manager: Vec<u8>,
}

/// The release's image index, each image's blobs checked against their digests.
fn platform_images() -> Vec<(String, PlatformImage)> {
    let layout = release_dir().join("image/oci");
    let top = layout_index(&layout);
    let entries = top["manifests"].as_array().expect("manifests");
    assert_eq!(entries.len(), 1, "one image index in the layout: {top}");
    let version = our_version();
    assert_eq!(entries[0]["mediaType"], "application/vnd.oci.image.index.v1+json");
    assert_eq!(entries[0]["annotations"]["io.containerd.image.name"], format!("{IMAGE}:{version}"));
    assert_eq!(entries[0]["annotations"]["org.opencontainers.image.ref.name"], version.as_str());
    let index = json_blob(&layout, &entries[0]);
    let manifests = index["manifests"].as_array().expect("the index's manifests");
    let platforms: BTreeSet<String> =
        manifests.iter().map(|m| format!("{}/{}", m["platform"]["os"], m["platform"]["architecture"])).collect();
    assert_eq!(platforms, BTreeSet::from(["\"linux\"/\"amd64\"".into(), "\"linux\"/\"arm64\"".into()]), "{index}");
    manifests
        .iter()
        .map(|descriptor| {
            let arch = descriptor["platform"]["architecture"].as_str().expect("architecture").to_owned();
            let manifest = json_blob(&layout, descriptor);
            let config = json_blob(&layout, &manifest["config"]);
            let layers = manifest["layers"].as_array().expect("layers");
            assert_eq!(layers.len(), 1, "one layer, no base image: {manifest}");
            let layer = run_with_stdin("gzip", &["-dc"], &described_blob(&layout, &layers[0]));
            assert_eq!(config["rootfs"]["diff_ids"], json!([format!("sha256:{}", sha256_hex(&layer))]));
            let listing = String::from_utf8(run_with_stdin("tar", &["-tf", "-"], &layer)).expect("listing");
            assert_eq!(listing.trim(), "manager", "the layer holds the manager alone");
            let manager = run_with_stdin("tar", &["-xOf", "-", "manager"], &layer);
            let digest = descriptor["digest"].as_str().expect("digest").to_owned();
            (arch, PlatformImage { digest, config, manager })
        })
        .collect()
}

/// The files a `SHA256SUMS` lists, with their sums.
fn listed_sums(dir: &Path) -> Vec<(String, String)> {
    let sums = std::fs::read_to_string(dir.join("SHA256SUMS")).expect("SHA256SUMS");
    sums.lines()
        .map(|line| {
            let (sum, file) = line.split_once("  ").unwrap_or_else(|| panic!("not a sha256sum line: {line}"));
            (file.to_owned(), sum.to_owned())
        })
        .collect()
}

fn files_under(dir: &Path, under: &Path, into: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).expect("a folder") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            files_under(&path, under, into);
        } else {
            into.insert(path.strip_prefix(under).expect("under").to_string_lossy().into_owned());
        }
    }
}

#[test]
fn every_file_of_the_release_is_in_its_checksums_and_matches() {
    let dir = release_dir();
    let listed = listed_sums(&dir);
    let mut files = BTreeSet::new();
    files_under(&dir, &dir, &mut files);
    files.remove("SHA256SUMS");
    assert_eq!(listed.iter().map(|(f, _)| f.clone()).collect::<BTreeSet<_>>(), files, "SHA256SUMS lists other files");
    for (file, sum) in &listed {
        assert_eq!(&sha256_hex(&std::fs::read(dir.join(file)).expect("a listed file")), sum, "{file}");
    }
    let version = our_version();
    for expected in [
        format!("clusterctl/ipam-in-cluster/{version}/ipam-components.yaml"),
        format!("clusterctl/ipam-in-cluster/{version}/metadata.yaml"),
        format!("operator/ipam-in-cluster-{version}.configmap.yaml"),
        format!("capi-ipam-in-cluster-{}.tgz", &version[1..]),
        "image/image-amd64.tar".into(),
        "image/image-arm64.tar".into(),
        "sbom/crates.spdx.json".into(),
        "sbom/image-linux-amd64.spdx.json".into(),
        "sbom/image-linux-arm64.spdx.json".into(),
    ] {
        assert!(files.contains(&expected), "the release lacks {expected}: {files:?}");
    }
    // As a user checks a download.
    let check = Command::new("sha256sum").args(["--check", "--strict", "SHA256SUMS"]).current_dir(&dir).output();
    ok(check.expect("sha256sum"), "sha256sum --check SHA256SUMS");
}

#[test]
fn each_architecture_gets_a_static_manager_for_its_machine_that_runs() {
    let version = our_version();
    let images = platform_images();
    for (arch, image) in &images {
        let machine = ARCHITECTURES.iter().find(|(a, _)| a == arch).expect("a known architecture").1;
        assert_eq!(elf_machine(&image.manager), machine, "linux/{arch}'s manager is built for another machine");
        assert!(!needs_a_loader(&image.manager), "linux/{arch}'s manager is dynamically linked");
        let config = &image.config;
        assert_eq!((config["os"].as_str(), config["architecture"].as_str()), (Some("linux"), Some(arch.as_str())));
        assert_eq!(config["variant"].as_str(), (arch == "arm64").then_some("v8"), "{config}");
        assert_eq!(config["config"]["User"], "65532:65532");
        assert_eq!(config["config"]["Entrypoint"], json!(["/manager"]));
        assert_eq!(config["config"]["Labels"]["org.opencontainers.image.version"], version.as_str());

        // It runs: natively, or under qemu-user as on a node of that architecture (an "exec format error" fails here).
        let file = scratch(&format!("manager-{arch}")).join("manager");
        std::fs::write(&file, &image.manager).expect("the manager");
        std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
        let native = (std::env::consts::ARCH == "x86_64" && arch == "amd64")
            || (std::env::consts::ARCH == "aarch64" && arch == "arm64");
        let mut run = if native { Command::new(&file) } else { Command::new("qemu-aarch64") };
        if !native {
            assert_eq!(arch, "arm64", "no emulator here for {arch}");
            run.arg(&file);
        }
        let out = ok(run.arg("--version").env_clear().output().expect("the manager"), &format!("{arch} --version"));
        assert_eq!(out.trim(), format!("manager {}", &version[1..]), "linux/{arch}");
    }

    // The amd64 image is the one `make image` builds: one build, one digest.
    let made = layout_index(&support::repo_root().join("out/image/oci"));
    let amd64 = &images.iter().find(|(a, _)| a == "amd64").expect("amd64").1;
    assert_eq!(made["manifests"][0]["digest"].as_str(), Some(amd64.digest.as_str()), "make image built another amd64");
}

#[test]
fn a_registry_takes_the_index_and_serves_each_node_its_architecture() {
    let dir = release_dir();
    let registry = Registry::start();
    let reference = format!("{}:{}", registry.reference("manager"), our_version());
    crane(&["push", &dir.join("image/oci").to_string_lossy(), &reference]);
    let served: Value = serde_json::from_str(&crane(&["manifest", &reference])).expect("the served index");
    assert_eq!(served["mediaType"], "application/vnd.oci.image.index.v1+json", "{served}");
    for (arch, image) in platform_images() {
        let platform = format!("linux/{arch}");
        assert_eq!(crane(&["digest", "--platform", &platform, &reference]).trim(), image.digest, "{platform}");
        let config: Value = serde_json::from_str(&crane(&["config", "--platform", &platform, &reference])).unwrap();
        assert_eq!(config, image.config, "{platform}");
        assert!(crane(&["validate", "--remote", &format!("{reference}@{}", image.digest)]).starts_with("PASS"));
        // Its docker tarball holds the same image (a docker manifest, hence another digest; the same config).
        let tarball = dir.join(format!("image/image-{arch}.tar")).to_string_lossy().into_owned();
        assert!(crane(&["validate", "--tarball", &tarball]).starts_with("PASS"), "{tarball}");
        let from_tarball = format!("{}:{arch}", registry.reference("from-tarball"));
        crane(&["push", &tarball, &from_tarball]);
        assert_eq!(serde_json::from_str::<Value>(&crane(&["config", &from_tarball])).unwrap(), image.config);
    }
}

/// pyspdxtools' verdict on a document: empty when it is valid SPDX.
fn spdx_problems(document: &Path) -> String {
    let bin = PathBuf::from(
        ok(
            Command::new(support::repo_root().join("tests/tools/spdx-tools.sh")).output().expect("spdx-tools.sh"),
            "spdx-tools.sh",
        )
        .lines()
        .last()
        .expect("its folder"),
    );
    let out = Command::new(bin.join("pyspdxtools")).arg("-i").arg(document).output().expect("pyspdxtools");
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)).trim().to_owned()
        + if out.status.success() { "" } else { " (failed)" }
}

fn crates_of(document: &Value) -> BTreeSet<String> {
    document["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .filter(|p| p["SPDXID"].as_str().is_some_and(|id| id.starts_with("SPDXRef-crate-")))
        .map(|p| format!("{} v{}", p["name"].as_str().unwrap(), p["versionInfo"].as_str().unwrap()))
        .collect()
}

/// `cargo tree`'s crates of the manager (normal and build dependencies) for these targets.
fn cargo_tree(targets: &[&str]) -> BTreeSet<String> {
    let mut args = vec!["tree", "--locked", "-e", "normal,build", "--prefix", "none", "-p", "capi-ipam-in-cluster"];
    for target in targets {
        args.extend(["--target", target]);
    }
    let out = ok(Command::new("cargo").args(&args).current_dir(support::repo_root()).output().unwrap(), "cargo tree");
    out.lines().map(|l| l.split(" (").next().unwrap().trim().to_owned()).filter(|l| !l.is_empty()).collect()
}

#[test]
fn the_sboms_are_valid_spdx_and_name_exactly_what_was_built() {
    let dir = release_dir();
    let read = |name: &str| -> Value {
        serde_json::from_slice(&std::fs::read(dir.join("sbom").join(name)).expect("an SBOM")).expect("JSON")
    };
    for name in ["crates.spdx.json", "image-linux-amd64.spdx.json", "image-linux-arm64.spdx.json"] {
        assert_eq!(spdx_problems(&dir.join("sbom").join(name)), "", "{name} is not valid SPDX 2.3");
    }
    // The validator refuses what is wrong: an SBOM with a broken license expression.
    let mut broken = read("crates.spdx.json");
    broken["packages"][0]["licenseDeclared"] = json!("MIT OR ???");
    let broken_path = scratch("sbom").join("broken.spdx.json");
    std::fs::write(&broken_path, broken.to_string()).expect("write");
    assert!(spdx_problems(&broken_path).contains("LicenseExpression"), "the validator let a broken license through");

    // The crate graph: the crates cargo builds the manager from for both targets, no test-only crate, with Cargo.lock's
    // checksums.
    let crates = read("crates.spdx.json");
    let version = our_version();
    assert_eq!(crates["documentDescribes"], json!([format!("SPDXRef-crate-capi-ipam-in-cluster-{}", &version[1..])]));
    let both = cargo_tree(&["x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu"]);
    assert_eq!(crates_of(&crates), both, "the SBOM's crates are not cargo tree's");
    for dev_only in ["proptest", "criterion"] {
        assert!(!both.iter().any(|c| c.starts_with(&format!("{dev_only} "))), "{dev_only} is a dev-dependency");
    }
    let lock = std::fs::read_to_string(support::repo_root().join("Cargo.lock")).expect("Cargo.lock");
    let kube = lock.split("[[package]]").find(|p| p.contains("\nname = \"kube\"\n")).expect("kube in Cargo.lock");
    let field = |text: &str, key: &str| {
        text.lines().find_map(|l| l.strip_prefix(&format!("{key} = \""))).map(|v| v.trim_end_matches('"').to_owned())
    };
    let package = crates["packages"].as_array().unwrap().iter().find(|p| p["name"] == "kube").expect("kube");
    assert_eq!(package["versionInfo"].as_str(), field(kube, "version").as_deref());
    assert_eq!(package["checksums"][0]["checksumValue"].as_str(), field(kube, "checksum").as_deref());
    assert!(crates["relationships"].as_array().unwrap().iter().any(|r| r["relationshipType"] == "BUILD_DEPENDENCY_OF"
        && r["spdxElementId"].as_str().is_some_and(|id| id.starts_with("SPDXRef-crate-cc-"))
        && r["relatedSpdxElement"].as_str().is_some_and(|id| id.starts_with("SPDXRef-crate-ring-"))));

    // Each image's: its digest in the index, the manager in its layer, the crates of its target.
    for (arch, image) in platform_images() {
        let sbom = read(&format!("image-linux-{arch}.spdx.json"));
        let described =
            sbom["packages"].as_array().unwrap().iter().find(|p| p["SPDXID"] == sbom["documentDescribes"][0]);
        let described = described.expect("the described image");
        assert_eq!(described["primaryPackagePurpose"], "CONTAINER");
        assert_eq!(format!("sha256:{}", described["checksums"][0]["checksumValue"].as_str().unwrap()), image.digest);
        let file = &sbom["files"][0];
        assert_eq!(file["fileName"], "./manager");
        let sha256 = file["checksums"].as_array().unwrap().iter().find(|c| c["algorithm"] == "SHA256").expect("SHA256");
        assert_eq!(sha256["checksumValue"].as_str(), Some(sha256_hex(&image.manager).as_str()), "linux/{arch}");
        let triple = if arch == "amd64" { "x86_64-unknown-linux-gnu" } else { "aarch64-unknown-linux-gnu" };
        let of_target = cargo_tree(&[triple]);
        assert_eq!(crates_of(&sbom), of_target, "linux/{arch}");
        assert!(of_target.is_subset(&both));
    }
}

#[tokio::test]
async fn clusterctl_installs_the_release_from_its_repository_layout() {
    let dir = release_dir();
    let version = our_version();
    let release = dir.join("clusterctl/ipam-in-cluster").join(&version);
    let components = std::fs::read_to_string(release.join("ipam-components.yaml")).expect("ipam-components.yaml");
    let metadata = std::fs::read_to_string(release.join("metadata.yaml")).expect("metadata.yaml");
    let made = tokio::task::spawn_blocking(release_manifests).await.expect("make release-manifests");
    assert_eq!((&components, &metadata), (&made.0, &made.1), "the release's manifests are not make release-manifests'");
    assert!(components.contains(&format!("image: {IMAGE}:{version}\n")), "the components run another image");

    let scratch_dir = scratch("release-clusterctl");
    let config = repository_config(&scratch_dir, &release.join("ipam-components.yaml"), true);
    let config_arg = config.to_string_lossy().into_owned();
    let ipam = format!("in-cluster:{version}");
    let described = ok(
        clusterctl(&scratch_dir, &["generate", "provider", "--ipam", &ipam, "--describe", "--config", &config_arg]),
        "clusterctl generate provider --describe",
    );
    assert!(described.contains("capi-ipam-in-cluster-system"), "{described}");

    let plane = tokio::task::spawn_blocking(|| Plane::private("release")).await.expect("plane");
    // cert-manager's CRDs, as packaging.rs installs them: clusterctl then installs no cert-manager of its own.
    install_fixture_crds(&plane);
    let log = clusterctl_init_from(&plane, &scratch_dir, &config, Some(&version));
    assert!(log.contains("Installing provider=\"ipam-in-cluster\""), "{log}");
    assert_eq!(ipam_provider_version(&plane), format!("IPAMProvider {version}"));
    let deployment = "deployment/capi-ipam-in-cluster-controller-manager";
    let image = "jsonpath={.spec.template.spec.containers[0].image}";
    let image = plane.kubectl(&["get", deployment, "-n", "capi-ipam-in-cluster-system", "-o", image]);
    assert_eq!(image, format!("{IMAGE}:{version}"), "clusterctl installed another image than the release's");
}

#[test]
fn the_operator_artifacts_hold_the_clusterctl_release() {
    let dir = release_dir();
    let version = our_version();
    let release = dir.join("clusterctl/ipam-in-cluster").join(&version);
    let file = |name: &str| std::fs::read_to_string(release.join(name)).expect("a release file");
    let (components, metadata) = (file("ipam-components.yaml"), file("metadata.yaml"));

    // The air-gapped form: one ConfigMap, labelled as docs/install.md's selector matches it.
    let path = dir.join(format!("operator/ipam-in-cluster-{version}.configmap.yaml"));
    let config_map: Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("ConfigMap")).expect("JSON");
    assert_eq!(config_map["metadata"]["namespace"], "capi-ipam-in-cluster-system");
    assert_eq!(
        config_map["metadata"]["labels"],
        json!({"provider-components": "ipam-in-cluster", "provider.cluster.x-k8s.io/version": version})
    );
    assert_eq!(config_map["data"], json!({"components": components, "metadata": metadata}));
    let install = std::fs::read_to_string(support::repo_root().join("docs/install.md")).expect("install.md");
    assert!(install.contains(&format!(
        "matchLabels: {{provider-components: ipam-in-cluster, provider.cluster.x-k8s.io/version: {version}}}"
    )));

    // The OCI artifact: the two files as layers titled by name (what fetchConfig.oci looks for), an empty config.
    let layout = dir.join("operator/oci");
    let index = layout_index(&layout);
    let entries = index["manifests"].as_array().expect("manifests");
    assert_eq!(entries.len(), 1, "{index}");
    assert_eq!(entries[0]["annotations"]["org.opencontainers.image.ref.name"], version.as_str());
    let manifest = json_blob(&layout, &entries[0]);
    assert_eq!(manifest["artifactType"], entries[0]["artifactType"]);
    assert!(manifest["artifactType"].as_str().is_some_and(|t| !t.is_empty()), "{manifest}");
    assert_eq!(manifest["config"]["mediaType"], "application/vnd.oci.empty.v1+json");
    assert_eq!(blob(&layout, manifest["config"]["digest"].as_str().unwrap()), b"{}");
    let layers: Vec<(String, String)> = manifest["layers"]
        .as_array()
        .expect("layers")
        .iter()
        .map(|l| {
            let title = l["annotations"]["org.opencontainers.image.title"].as_str().expect("a title").to_owned();
            (title, String::from_utf8(described_blob(&layout, l)).expect("UTF-8"))
        })
        .collect();
    assert_eq!(layers, [("ipam-components.yaml".to_owned(), components), ("metadata.yaml".to_owned(), metadata)]);

    // A registry takes it as it is.
    let registry = Registry::start();
    let reference = format!("{}:{version}", registry.reference("ipam-in-cluster"));
    crane(&["push", &layout.to_string_lossy(), &reference]);
    let served: Value = serde_json::from_str(&crane(&["manifest", &reference])).expect("the served manifest");
    assert_eq!(served, manifest);
}

#[test]
fn the_packaged_chart_is_the_charts_folder() {
    let dir = release_dir();
    let version = our_version();
    let tgz = dir.join(format!("capi-ipam-in-cluster-{}.tgz", &version[1..])).to_string_lossy().into_owned();
    let chart = ok(helm(&["show", "chart", &tgz]), "helm show chart");
    assert!(chart.contains(&format!("\nversion: {}\n", &version[1..])), "{chart}");
    assert!(chart.contains(&format!("\nappVersion: {version}\n")), "{chart}");
    let folder = support::repo_root().join("charts/capi-ipam-in-cluster").to_string_lossy().into_owned();
    let render =
        |chart: &str| ok(helm(&["template", "ipam", chart, "-n", "capi-ipam-in-cluster-system"]), "helm template");
    assert_eq!(render(&tgz), render(&folder), "the packaged chart renders otherwise than charts/");
    assert!(ok(helm(&["lint", "--strict", &tgz]), "helm lint").contains("0 chart(s) failed"));
}
