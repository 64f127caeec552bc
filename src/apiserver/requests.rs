//! The bodies of our requests, built once for the manager's client and the simulated API server: JSON patches whose
//! `test` operations are their preconditions, and merge patches guarded by a resourceVersion. None is a server-side
//! apply (it makes the API server compute managed fields for the whole object on every write).

use serde_json::{Value, json};

use super::{FinalizerAt, Read, Repair};
use crate::api::v1alpha2::PoolStatus;
use crate::api::{CLUSTER_NAME_LABEL, MOVED_AWAY_ANNOTATION};
use crate::capi::status::ClaimStatusPatch;

fn json_patch(ops: Value) -> json_patch::Patch {
    serde_json::from_value(ops).unwrap_or_else(|e| unreachable!("a JSON patch we build is valid: {e}"))
}

/// Adds `finalizer` if the object's resourceVersion is still the one read (a new object of the same name has
/// another).
pub fn add_finalizer(finalizer: &str, read: &Read) -> json_patch::Patch {
    let append = if read.has_finalizers {
        json!({"op": "add", "path": "/metadata/finalizers/-", "value": finalizer})
    } else {
        json!({"op": "add", "path": "/metadata/finalizers", "value": [finalizer]})
    };
    json_patch(json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": read.resource_version},
        append,
    ]))
}

/// Removes `finalizer` if the object is still the one read and the finalizer is still where it was.
pub fn remove_finalizer(finalizer: &str, at: &FinalizerAt) -> json_patch::Patch {
    let path = format!("/metadata/finalizers/{}", at.index);
    json_patch(json!([
        {"op": "test", "path": "/metadata/uid", "value": at.uid},
        {"op": "test", "path": path, "value": finalizer},
        {"op": "remove", "path": path},
    ]))
}

/// A merge patch of a claim's status, refused (409) when the claim changed since `resource_version`.
pub fn claim_status(resource_version: &str, status: &ClaimStatusPatch) -> Value {
    json!({"metadata": {"resourceVersion": resource_version}, "status": status})
}

/// A merge patch of a pool's status (the counts and the conditions list, whole).
pub fn pool_status(status: &PoolStatus) -> Value {
    let mut patch = json!({ "status": status });
    // A merge patch leaves out what it does not name: a pool whose quota went has its usage removed by a null.
    if status.cluster_usage.is_none() {
        patch["status"]["clusterUsage"] = Value::Null;
    }
    patch
}

/// A merge patch of one annotation (`None` removes it), refused when the object changed since `resource_version`.
pub fn annotation(resource_version: &str, annotation: &str, value: Option<&str>) -> Value {
    json!({"metadata": {"resourceVersion": resource_version, "annotations": { annotation: value }}})
}

/// A merge patch of an IPAddress's owner references, finalizers and cluster-name label, refused when it changed since
/// it was read.
pub fn repair(repair: &Repair) -> Value {
    let mut metadata = json!({
        "resourceVersion": repair.resource_version,
        "ownerReferences": repair.owner_references,
        "finalizers": repair.finalizers,
    });
    if let Some(cluster) = &repair.cluster_label {
        metadata["labels"] = json!({ CLUSTER_NAME_LABEL: cluster });
    }
    if repair.unmark_moved_away {
        metadata["annotations"] = json!({ MOVED_AWAY_ANNOTATION: null });
    }
    json!({ "metadata": metadata })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_status_without_a_quota_removes_the_usage_a_quota_wrote() {
        let patch = pool_status(&PoolStatus::default());
        assert_eq!(patch.pointer("/status/clusterUsage"), Some(&Value::Null), "{patch}");
        let usage = crate::api::v1alpha2::ClusterUsage { clusters: 1, ..Default::default() };
        let patch = pool_status(&PoolStatus { cluster_usage: Some(usage), ..PoolStatus::default() });
        assert_eq!(patch.pointer("/status/clusterUsage/clusters"), Some(&json!(1)), "{patch}");
    }
}
