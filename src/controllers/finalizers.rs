//! Our finalizers on claims, IPAddresses and pools, written by JSON patches that name their precondition
//! (`crate::apiserver::requests`): an add tests the resourceVersion it was decided on, a removal tests that the object
//! is still the one read and the element is still where we read it. Neither touches other owners' finalizers.

use kube::api::ObjectMeta;

use super::{Context, Error};
use crate::apiserver::{FinalizerAt, Removed, Target};

pub fn index_of(meta: &ObjectMeta, finalizer: &str) -> Option<usize> {
    meta.finalizers.as_ref().and_then(|f| f.iter().position(|x| x == finalizer))
}

/// Removes `finalizer` from `target`, read as `meta`; nothing to do when it does not carry it. `Removed::Gone` when
/// the object is gone now.
pub async fn remove(ctx: &Context, target: &Target, meta: &ObjectMeta, finalizer: &str) -> Result<Removed, Error> {
    let Some(index) = index_of(meta, finalizer) else { return Ok(Removed::Kept) };
    remove_at(ctx, target, finalizer, index, meta.uid.as_deref().unwrap_or_default()).await
}

/// Removes `finalizer`, found at `index` of the finalizers of the object `uid` (a concurrent change, or a new object
/// of the same name, fails the patch, and the retry reads again).
pub async fn remove_at(
    ctx: &Context,
    target: &Target,
    finalizer: &str,
    index: usize,
    uid: &str,
) -> Result<Removed, Error> {
    let at = FinalizerAt { uid: uid.to_owned(), index };
    // The caller reports a failure (an unreachable API server once, anything else with what it was reconciling).
    ctx.api.remove_finalizer(target, finalizer, &at).await.map_err(Error::api("removing a finalizer"))
}
