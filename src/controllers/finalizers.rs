//! Our finalizers on claims and pools, written by JSON patches that name their precondition: an add tests the
//! resourceVersion it was decided on, a removal tests that the element is still where we read it. Neither touches
//! other owners' finalizers, and neither costs the API server a server-side apply.

use kube::api::Patch;
use kube::{Api, Resource};
use serde_json::json;

use super::{Context, Error, patch_params};

pub fn index_of(meta: &kube::api::ObjectMeta, finalizer: &str) -> Option<usize> {
    meta.finalizers.as_ref().and_then(|f| f.iter().position(|x| x == finalizer))
}

/// The object as the decision to add a finalizer read it.
pub struct Read {
    pub resource_version: String,
    /// Whether `metadata.finalizers` had any element (ours is appended, or the list is created).
    pub has_finalizers: bool,
}

/// Adds `finalizer` to the object `name`, if it is still as `read` (a change since, or a new object of the same name,
/// fails the patch as a conflict; the retry decides again on a fresh read).
pub async fn add<K>(ctx: &Context, api: &Api<K>, name: &str, finalizer: &str, read: &Read) -> Result<K, Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let append = if read.has_finalizers {
        json!({"op": "add", "path": "/metadata/finalizers/-", "value": finalizer})
    } else {
        json!({"op": "add", "path": "/metadata/finalizers", "value": [finalizer]})
    };
    let patch = json_patch(json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": read.resource_version},
        append,
    ]))?;
    ctx.fence
        .guard(api.patch(name, &patch_params(), &Patch::<()>::Json(patch)))
        .await?
        .map_err(|e| Error::kube("adding a finalizer")(failed_test_is_conflict(e)))
}

/// Removes one finalizer, found at `index` of the finalizers we read (a concurrent change fails the patch, and the
/// retry reads the list again).
pub async fn remove<K>(
    ctx: &Context,
    api: &Api<K>,
    name: &str,
    finalizer: &str,
    index: Option<usize>,
) -> Result<(), Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let Some(index) = index else { return Ok(()) };
    let patch = json_patch(json!([
        {"op": "test", "path": format!("/metadata/finalizers/{index}"), "value": finalizer},
        {"op": "remove", "path": format!("/metadata/finalizers/{index}")},
    ]))?;
    match ctx.fence.guard(api.patch(name, &patch_params(), &Patch::<()>::Json(patch))).await? {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        // The caller reports it (an unreachable API server once, anything else with the object it was reconciling).
        Err(e) => Err(Error::kube("removing a finalizer")(failed_test_is_conflict(e))),
    }
}

fn json_patch(ops: serde_json::Value) -> Result<json_patch::Patch, Error> {
    serde_json::from_value(ops).map_err(Error::internal)
}

/// The API server answers a failed `test` operation with 422: the object is not as we read it, which is a conflict
/// (retried with a fresh read), not a refusal.
fn failed_test_is_conflict(error: kube::Error) -> kube::Error {
    match error {
        kube::Error::Api(mut s) if s.code == 422 => {
            s.code = 409;
            kube::Error::Api(s)
        }
        other => other,
    }
}
