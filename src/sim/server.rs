//! The simulated API server: objects as JSON with UIDs and resourceVersions, and what kube-apiserver does with the
//! requests our controllers and the simulated users send: create (409 when the name is taken), get, JSON patches
//! whose `test` fails with 422, merge patches with a resourceVersion precondition (409), status subresource writes
//! that change the status only, deletes with UID and resourceVersion preconditions, finalizers that hold a deleted
//! object until the last one goes, and the watch events of every change, in order.
//!
//! What it does not model: admission webhooks' validation of pools (a pool edit the webhook would refuse is applied
//! here: the controllers must survive what the webhook cannot see), the garbage collector (in the simulation a pool
//! outlives its IPAddresses, and an IPAddress is collected only when every owner is gone), and lists served from a
//! stale cache (the watches list with `MostRecent`, a quorum read).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::api::PoolKind;
use crate::apiserver::ApiError;
use crate::index::ObjectKey;

/// The kinds the simulation serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Claim,
    Address,
    Pool(PoolKind),
    Cluster,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Claim => "IPAddressClaim",
            Kind::Address => "IPAddress",
            Kind::Pool(kind) => kind.kind(),
            Kind::Cluster => "Cluster",
        }
    }

    fn has_status(self) -> bool {
        !matches!(self, Kind::Cluster)
    }
}

/// A watch event's type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    Added,
    Modified,
    Deleted,
}

/// One change, as every watch of its kind delivers it.
#[derive(Clone, Debug)]
pub struct Logged {
    pub change: Change,
    pub object: Value,
}

/// What a DELETE did.
#[derive(Clone, Debug)]
pub enum Deletion {
    Gone,
    Deleting(Value),
}

#[derive(Default)]
pub struct Server {
    revision: u64,
    uids: u64,
    objects: BTreeMap<(Kind, ObjectKey), Value>,
    /// Every change of each kind, in order: the watches of a kind read it from their own position.
    logs: BTreeMap<Kind, Vec<Logged>>,
    /// Seconds since the start, for timestamps (the simulation has no wall clock).
    pub clock: i64,
    /// The most bytes an object's annotations may take, keys and values (the API server's 256 KiB; 0: that).
    pub annotation_limit: usize,
}

/// The API server's limit on an object's annotations, keys and values together.
pub const ANNOTATION_LIMIT: usize = 256 * 1024;

/// The bytes of an object's annotations, as the API server counts them.
fn annotation_bytes(object: &Value) -> usize {
    object["metadata"]["annotations"]
        .as_object()
        .map_or(0, |a| a.iter().map(|(k, v)| k.len() + v.as_str().map_or(0, str::len)).sum())
}

pub fn key_of(object: &Value) -> ObjectKey {
    let meta = &object["metadata"];
    ObjectKey::new(meta["namespace"].as_str().unwrap_or_default(), meta["name"].as_str().unwrap_or_default())
}

fn timestamp(clock: i64) -> String {
    jiff::Timestamp::from_second(crate::controllers::SIMULATED_EPOCH + clock).map(|t| t.to_string()).unwrap_or_default()
}

fn conflict(what: &str) -> ApiError {
    ApiError::Conflict(format!("Operation cannot be fulfilled: {what}"))
}

fn invalid(message: String) -> ApiError {
    ApiError::Refused { code: 422, message }
}

/// The object without its resourceVersion, to tell a change from a no-op.
fn without_revision(object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
    }
    object
}

fn finalizers_of(object: &Value) -> usize {
    object["metadata"]["finalizers"].as_array().map_or(0, Vec::len)
}

fn is_deleting(object: &Value) -> bool {
    !object["metadata"]["deletionTimestamp"].is_null()
}

impl Server {
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The API server refuses an object whose annotations are too large (422), whatever else the write does.
    fn check_size(&self, object: &Value) -> Result<(), ApiError> {
        let limit = if self.annotation_limit == 0 { ANNOTATION_LIMIT } else { self.annotation_limit };
        let bytes = annotation_bytes(object);
        if bytes > limit {
            return Err(invalid(format!(
                "metadata.annotations: Too long: may not be more than {limit} bytes (it would be {bytes})"
            )));
        }
        Ok(())
    }

    pub fn get(&self, kind: Kind, key: &ObjectKey) -> Option<&Value> {
        self.objects.get(&(kind, key.clone()))
    }

    /// Every object of `kind`, in key order.
    pub fn list(&self, kind: Kind) -> Vec<Value> {
        self.objects.iter().filter(|((k, _), _)| *k == kind).map(|(_, v)| v.clone()).collect()
    }

    /// The keys of every object of `kind`.
    pub fn keys(&self, kind: Kind) -> Vec<ObjectKey> {
        self.objects.keys().filter(|(k, _)| *k == kind).map(|(_, key)| key.clone()).collect()
    }

    fn next_revision(&mut self) -> String {
        self.revision += 1;
        self.revision.to_string()
    }

    fn record(&mut self, kind: Kind, change: Change, object: &Value) {
        self.logs.entry(kind).or_default().push(Logged { change, object: object.clone() });
    }

    /// Every change of `kind` so far, in order.
    pub fn log(&self, kind: Kind) -> &[Logged] {
        self.logs.get(&kind).map_or(&[], Vec::as_slice)
    }

    pub fn create(&mut self, kind: Kind, mut object: Value) -> Result<Value, ApiError> {
        let key = key_of(&object);
        if key.name.is_empty() {
            return Err(invalid("metadata.name: Required value".into()));
        }
        if self.objects.contains_key(&(kind, key.clone())) {
            return Err(ApiError::AlreadyExists(format!("{} \"{}\" already exists", kind.name(), key.name)));
        }
        self.check_size(&object)?;
        self.uids += 1;
        let uid = format!("00000000-0000-4000-8000-{:012x}", self.uids);
        let revision = self.next_revision();
        let created = timestamp(self.clock);
        let meta = object["metadata"].as_object_mut().ok_or_else(|| invalid("metadata: Required value".into()))?;
        meta.insert("uid".into(), json!(uid));
        meta.insert("resourceVersion".into(), json!(revision));
        meta.insert("creationTimestamp".into(), json!(created));
        meta.insert("generation".into(), json!(1));
        meta.remove("deletionTimestamp");
        if kind.has_status()
            && let Some(o) = object.as_object_mut()
        {
            // A CRD with a status subresource drops the status of a create.
            o.remove("status");
        }
        self.objects.insert((kind, key), object.clone());
        self.record(kind, Change::Added, &object);
        Ok(object)
    }

    /// Applies a JSON patch (`status`: to the status subresource). A failed `test` or a bad path is 422.
    pub fn patch_json(
        &mut self,
        kind: Kind,
        key: &ObjectKey,
        patch: &json_patch::Patch,
        status: bool,
    ) -> Result<Value, ApiError> {
        let old = self.get(kind, key).cloned().ok_or(ApiError::NotFound)?;
        let mut new = old.clone();
        json_patch::patch(&mut new, patch).map_err(|e| invalid(format!("the patch does not apply: {e}")))?;
        self.update(kind, key, old, new, status)
    }

    /// Applies a merge patch; a `metadata.resourceVersion` in it is a precondition (409 when it is not current).
    pub fn patch_merge(&mut self, kind: Kind, key: &ObjectKey, patch: &Value, status: bool) -> Result<Value, ApiError> {
        let old = self.get(kind, key).cloned().ok_or(ApiError::NotFound)?;
        let mut patch = patch.clone();
        if let Some(expected) = patch.pointer("/metadata/resourceVersion").and_then(Value::as_str) {
            if old["metadata"]["resourceVersion"].as_str() != Some(expected) {
                return Err(conflict("the object has been modified; please apply your changes to the latest version"));
            }
            if let Some(meta) = patch["metadata"].as_object_mut() {
                meta.remove("resourceVersion");
            }
        }
        let mut new = old.clone();
        json_patch::merge(&mut new, &patch);
        self.update(kind, key, old, new, status)
    }

    /// Writes `new` in place of `old` as an update of the main resource or of the status subresource would.
    fn update(
        &mut self,
        kind: Kind,
        key: &ObjectKey,
        old: Value,
        mut new: Value,
        status: bool,
    ) -> Result<Value, ApiError> {
        if status {
            // The status subresource changes the status only.
            let mut kept = old.clone();
            kept["status"] = new["status"].take();
            new = kept;
        } else {
            if kind.has_status() {
                new["status"] = old["status"].clone();
            }
            if kind == Kind::Address && new["spec"] != old["spec"] {
                return Err(invalid("spec: Invalid value: the IPAddress spec is immutable".into()));
            }
            for field in ["uid", "name", "namespace", "creationTimestamp", "deletionTimestamp", "generation"] {
                new["metadata"][field] = old["metadata"][field].clone();
            }
            if is_deleting(&old) {
                let before: Vec<&Value> = old["metadata"]["finalizers"].as_array().into_iter().flatten().collect();
                let added =
                    new["metadata"]["finalizers"].as_array().into_iter().flatten().any(|f| !before.contains(&f));
                if added {
                    return Err(ApiError::Refused {
                        code: 422,
                        message: "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted".into(),
                    });
                }
            }
        }
        // Nulls of a merge patch remove keys; tidy an emptied map or list the way the API server stores it.
        for field in ["annotations", "labels", "finalizers"] {
            let empty = match &new["metadata"][field] {
                Value::Object(o) => o.is_empty(),
                Value::Array(a) => a.is_empty(),
                Value::Null => true,
                _ => false,
            };
            if empty && let Some(meta) = new["metadata"].as_object_mut() {
                meta.remove(field);
            }
        }
        if without_revision(&new) == without_revision(&old) {
            return Ok(old);
        }
        self.check_size(&new)?;
        if !status && new["spec"] != old["spec"] {
            let generation = old["metadata"]["generation"].as_i64().unwrap_or(1);
            new["metadata"]["generation"] = json!(generation + 1);
        }
        new["metadata"]["resourceVersion"] = json!(self.next_revision());
        if is_deleting(&new) && finalizers_of(&new) == 0 {
            self.objects.remove(&(kind, key.clone()));
            self.record(kind, Change::Deleted, &new);
        } else {
            self.objects.insert((kind, key.clone()), new.clone());
            self.record(kind, Change::Modified, &new);
        }
        Ok(new)
    }

    /// A DELETE with optional UID and resourceVersion preconditions.
    pub fn delete(
        &mut self,
        kind: Kind,
        key: &ObjectKey,
        uid: Option<&str>,
        resource_version: Option<&str>,
    ) -> Result<Deletion, ApiError> {
        let old = self.get(kind, key).cloned().ok_or(ApiError::NotFound)?;
        if uid.is_some_and(|uid| old["metadata"]["uid"].as_str() != Some(uid)) {
            return Err(conflict("Precondition failed: UID in precondition does not match the object"));
        }
        if resource_version.is_some_and(|rv| old["metadata"]["resourceVersion"].as_str() != Some(rv)) {
            return Err(conflict("Precondition failed: ResourceVersion in precondition does not match the object"));
        }
        if finalizers_of(&old) > 0 {
            if is_deleting(&old) {
                return Ok(Deletion::Deleting(old));
            }
            let mut new = old;
            new["metadata"]["deletionTimestamp"] = json!(timestamp(self.clock));
            new["metadata"]["resourceVersion"] = json!(self.next_revision());
            self.objects.insert((kind, key.clone()), new.clone());
            self.record(kind, Change::Modified, &new);
            return Ok(Deletion::Deleting(new));
        }
        let mut gone = old;
        gone["metadata"]["resourceVersion"] = json!(self.next_revision());
        self.objects.remove(&(kind, key.clone()));
        self.record(kind, Change::Deleted, &gone);
        Ok(Deletion::Gone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(name: &str) -> Value {
        json!({"apiVersion": "ipam.cluster.x-k8s.io/v1beta2", "kind": "IPAddressClaim",
               "metadata": {"name": name, "namespace": "ns"}, "spec": {}})
    }

    #[test]
    fn preconditions_finalizers_and_events_behave_as_the_api_server_does() {
        let mut s = Server::default();
        let key = ObjectKey::new("ns", "a");
        let a = s.create(Kind::Claim, claim("a")).unwrap();
        assert!(matches!(s.create(Kind::Claim, claim("a")), Err(ApiError::AlreadyExists(_))));
        let rv = a["metadata"]["resourceVersion"].as_str().unwrap().to_owned();
        let add: json_patch::Patch = serde_json::from_value(json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
            {"op": "add", "path": "/metadata/finalizers", "value": ["f"]}]))
        .unwrap();
        s.patch_json(Kind::Claim, &key, &add, false).unwrap();
        assert!(matches!(s.patch_json(Kind::Claim, &key, &add, false), Err(ApiError::Refused { code: 422, .. })));
        let stale = json!({"metadata": {"resourceVersion": rv}, "status": {"x": 1}});
        assert!(matches!(s.patch_merge(Kind::Claim, &key, &stale, true), Err(ApiError::Conflict(_))));
        // The status subresource writes the status only; the main resource leaves it alone.
        s.patch_merge(Kind::Claim, &key, &json!({"status": {"x": 1}, "spec": {"y": 2}}), true).unwrap();
        assert_eq!(s.get(Kind::Claim, &key).unwrap()["status"]["x"], 1);
        assert!(s.get(Kind::Claim, &key).unwrap()["spec"]["y"].is_null());
        // A delete with a finalizer marks it; removing the last finalizer deletes it.
        let uid = a["metadata"]["uid"].as_str().unwrap();
        assert!(matches!(s.delete(Kind::Claim, &key, Some("other"), None), Err(ApiError::Conflict(_))));
        assert!(matches!(s.delete(Kind::Claim, &key, Some(uid), None), Ok(Deletion::Deleting(_))));
        assert!(matches!(
            s.patch_merge(Kind::Claim, &key, &json!({"metadata": {"finalizers": ["f", "g"]}}), false),
            Err(ApiError::Refused { code: 422, .. })
        ));
        s.patch_merge(Kind::Claim, &key, &json!({"metadata": {"finalizers": null}}), false).unwrap();
        assert!(s.get(Kind::Claim, &key).is_none());
        let changes: Vec<Change> = s.log(Kind::Claim).iter().map(|l| l.change).collect();
        assert_eq!(changes, [Change::Added, Change::Modified, Change::Modified, Change::Modified, Change::Deleted]);
    }
}
