//! Our finalizers on claims and pools: added by server-side apply of the one list element (idempotent, and other
//! owners' finalizers are never touched), removed by a JSON patch that first tests the element is still where we read
//! it.

use kube::api::{Patch, PatchParams};
use kube::{Api, Resource};
use serde_json::json;

use super::{Context, Error, FIELD_MANAGER};

pub fn index_of(meta: &kube::api::ObjectMeta, finalizer: &str) -> Option<usize> {
    meta.finalizers.as_ref().and_then(|f| f.iter().position(|x| x == finalizer))
}

/// Adds `finalizer` to the object `name` of `api_version`/`kind` (server-side apply names the type in the body).
pub async fn add<K>(
    ctx: &Context,
    api: &Api<K>,
    api_version: &str,
    kind: &str,
    name: &str,
    finalizer: &str,
) -> Result<K, Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let patch = json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name, "finalizers": [finalizer]}});
    ctx.fence
        .guard(api.patch(name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&patch)))
        .await?
        .map_err(Error::kube("adding a finalizer"))
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
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": format!("/metadata/finalizers/{index}"), "value": finalizer},
        {"op": "remove", "path": format!("/metadata/finalizers/{index}")},
    ]))
    .map_err(Error::internal)?;
    match ctx.fence.guard(api.patch(name, &PatchParams::default(), &Patch::<()>::Json(patch))).await? {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        // The list changed since we read it (the test op failed, 422): a conflict, retried with a fresh read.
        Err(kube::Error::Api(mut s)) if s.code == 422 => {
            s.code = 409;
            Err(Error::kube("removing a finalizer")(kube::Error::Api(s)))
        }
        // The caller reports it (an unreachable API server once, anything else with the object it was reconciling).
        Err(e) => Err(Error::kube("removing a finalizer")(e)),
    }
}
