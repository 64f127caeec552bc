//! Generated files must match what the code generates: CRDs, webhook configurations, RBAC, and the Helm chart's
//! copies. The `generate` binary writes them (`make generate`) and checks them (`--check`, run here).

use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn generated_files_match_the_code() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_generate"))
        .arg("--check")
        .env("CARGO_MANIFEST_DIR", root())
        .output()
        .expect("run generate --check");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// The check finds drift: a generated file changed by hand fails it (checked on a copy of the repository's files).
#[test]
fn a_hand_edited_generated_file_is_reported() {
    let copy = std::env::temp_dir().join(format!("generated-drift-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&copy);
    for dir in ["config/crd/bases", "config/webhook", "config/rbac", "charts/capi-ipam-in-cluster/files/crds"] {
        std::fs::create_dir_all(copy.join(dir)).expect("folder");
        for entry in std::fs::read_dir(root().join(dir)).expect("read").flatten() {
            if entry.path().is_file() {
                std::fs::copy(entry.path(), copy.join(dir).join(entry.file_name())).expect("copy");
            }
        }
    }
    let chart_files = "charts/capi-ipam-in-cluster/files";
    for entry in std::fs::read_dir(root().join(chart_files)).expect("read").flatten() {
        if entry.path().is_file() {
            std::fs::copy(entry.path(), copy.join(chart_files).join(entry.file_name())).expect("copy");
        }
    }
    let check = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_generate"))
            .arg("--check")
            .env("CARGO_MANIFEST_DIR", &copy)
            .output()
            .expect("run generate --check")
    };
    assert!(check().status.success(), "{}", String::from_utf8_lossy(&check().stderr));
    let edited = copy.join("config/rbac/role.yaml");
    let text = std::fs::read_to_string(&edited).expect("role");
    std::fs::write(&edited, text.replace("watch", "watch\n  - escalate")).expect("edit");
    std::fs::write(copy.join("config/crd/bases/stale.yaml"), "---\n").expect("stale");
    let out = check();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("config/rbac/role.yaml differs"), "{stderr}");
    assert!(stderr.contains("config/crd/bases/stale.yaml: not generated"), "{stderr}");
    let _ = std::fs::remove_dir_all(&copy);
}

/// The chart's webhook configurations list exactly the paths the server serves.
#[test]
fn every_webhook_path_is_a_route() {
    let routes: Vec<String> = capi_ipam::webhooks::routes::admission_routes().iter().map(|r| r.path()).collect();
    let manifests = std::fs::read_to_string(root().join("config/webhook/manifests.yaml")).expect("manifests");
    let paths: Vec<&str> = manifests.lines().filter_map(|l| l.trim().strip_prefix("path: ")).collect();
    assert_eq!(paths.len(), routes.len());
    for p in paths {
        assert!(routes.iter().any(|r| r == p), "{p} is not served");
    }
}
