//! The IPAddressClaim controller: claims get an IPAddress and `status.addressRef`, exactly once, with a `Ready`
//! condition and an Event on every transition; deleted claims release their address.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions};
use kube::{Api, Resource, ResourceExt};
use serde_json::{Value, json};
use tracing::{debug, info, warn};

use super::events::EventType;
use super::queue::Next;
use super::registry::{AllocateError, Assigned, ObjectKey, PoolKey};
use super::status::{ClaimReason, Ready, claim_status, is_current, is_transition, stored_conditions};
use super::{AddressRecord, Context, Error, FIELD_MANAGER};
use crate::api::{
    CLUSTER_NAME_LABEL, GROUP, PAUSED_ANNOTATION, PROTECT_ADDRESS_FINALIZER, PoolKind, RELEASE_ADDRESS_FINALIZER,
};
use crate::capi::{CapiVersion, Claim, IpAddressSpec};
use crate::compact::Uid;

/// A claim that found its pool exhausted is woken by a release; this requeue is only a safety net.
const EXHAUSTED_RECHECK: Duration = Duration::from_secs(300);

fn has_annotation(meta: &kube::api::ObjectMeta, key: &str) -> bool {
    meta.annotations.as_ref().is_some_and(|a| a.contains_key(key))
}

/// Runs once every cache has listed (the claim workers wait for that before they read the claim).
pub async fn reconcile(claim: Arc<Claim>, ctx: Arc<Context>) -> Result<Next, Error> {
    let started = std::time::Instant::now();
    let result = reconcile_claim(&claim, &ctx).await;
    ctx.metrics.reconciled("ipaddressclaim", started.elapsed(), result.as_ref().err().map(Error::kind));
    result
}

async fn reconcile_claim(claim: &Claim, ctx: &Context) -> Result<Next, Error> {
    let key = claim.key.clone();
    let namespace = &*key.namespace;
    let Some(kind) = claim.pool_kind else { return Ok(Next::AwaitChange) };
    let pool_key = PoolKey::new(kind, namespace, &claim.pool_name);
    let deleting = claim.deletion_timestamp.is_some();

    // Pause (decision D8), checked the same way on every event: the claim, its Cluster, its pool.
    if claim.paused {
        ctx.registry.stop_waiting(&pool_key, &key);
        debug!(claim = %key, "paused by annotation");
        return Ok(Next::AwaitChange);
    }
    if let Some(cluster_name) = claim.cluster() {
        // Velero restores Clusters last: wait, the Cluster's creation (or unpause) wakes this claim. A claim that
        // waits says why, once; a bound one keeps its Ready as it is (nothing changes for it).
        let waiting = match ctx.cluster(namespace, cluster_name) {
            None if !deleting => Some((
                ClaimReason::WaitingForCluster,
                format!("waiting for Cluster {namespace}/{cluster_name} to exist"),
            )),
            Some(c) if c.is_paused() => Some((
                ClaimReason::ClusterPaused,
                format!("Cluster {namespace}/{cluster_name} is paused; allocation resumes when it is unpaused"),
            )),
            _ => None,
        };
        if let Some((reason, message)) = waiting {
            ctx.registry.stop_waiting(&pool_key, &key);
            debug!(claim = %key, cluster = cluster_name, reason = reason.as_str(), "waiting for the Cluster");
            if claim.address_ref.is_none() && !deleting {
                set_ready(claim, ctx, reason, message, None).await?;
            }
            return Ok(Next::AwaitChange);
        }
    }
    let pool = ctx.pool(&pool_key);
    if pool.as_ref().is_some_and(|p| has_annotation(&p.metadata, PAUSED_ANNOTATION)) {
        ctx.registry.stop_waiting(&pool_key, &key);
        debug!(claim = %key, pool = %pool_key, "the pool is paused");
        return Ok(Next::AwaitChange);
    }
    if deleting {
        return release(claim, ctx, &key, &pool_key, pool.as_deref()).await;
    }

    // The finalizer is persisted before any address exists, so a deleted claim never leaves an IPAddress behind.
    if claim.release_finalizer_index.is_none() {
        add_claim_finalizer(claim, ctx).await?;
    }

    if let Some(record) = ctx.address(&key) {
        return adopt(claim, ctx, &key, &pool_key, pool.as_deref(), &record).await;
    }

    let Some(pool) = pool else {
        let message = format!("{pool_key} not found");
        set_ready(claim, ctx, ClaimReason::PoolNotReady, message, None).await?;
        return Ok(Next::AwaitChange);
    };
    if pool.metadata.deletion_timestamp.is_some() {
        let message = format!("{pool_key} is being deleted");
        set_ready(claim, ctx, ClaimReason::PoolNotReady, message, None).await?;
        return Ok(Next::AwaitChange);
    }
    if let Some(spec) = pool.data.get("spec") {
        let woken = ctx.registry.apply_spec(&pool_key, spec);
        ctx.wake(woken);
    }
    let requested = requested_address(claim, &pool);
    // An IPAddress deleted from under a live claim: the claim gets its old address back while it is still free.
    let previous = if requested.is_none() { ctx.take_vanished_address(&key, &pool_key) } else { None };
    let allocated = match previous {
        Some(previous) => match ctx.registry.allocate(&pool_key, &key, Some(&previous)) {
            Err(AllocateError::Requested { .. }) => ctx.registry.allocate(&pool_key, &key, None),
            again => again,
        },
        None => ctx.registry.allocate(&pool_key, &key, requested.as_deref()),
    };
    match allocated {
        Ok(assigned) => create_address(claim, ctx, &key, &pool_key, &pool, &assigned).await,
        Err(AllocateError::Exhausted { .. }) => {
            ctx.registry.wait(&pool_key, &key);
            set_ready(claim, ctx, ClaimReason::PoolExhausted, format!("{pool_key} has no free address"), None).await?;
            Ok(Next::After(EXHAUSTED_RECHECK))
        }
        Err(e @ (AllocateError::InvalidPool { .. } | AllocateError::Unknown { .. })) => {
            set_ready(claim, ctx, ClaimReason::PoolNotReady, e.to_string(), None).await?;
            Ok(Next::AwaitChange)
        }
        Err(e @ AllocateError::Requested { .. }) => {
            // Retried when an address of the pool frees up (it may be the requested one) or the pool changes.
            ctx.registry.wait(&pool_key, &key);
            set_ready(claim, ctx, ClaimReason::AllocationFailed, e.to_string(), None).await?;
            Ok(Next::After(EXHAUSTED_RECHECK))
        }
    }
}

/// The requested address of decision D14: the claim's annotation, else the pool's `preAllocations` entry.
fn requested_address(claim: &Claim, pool: &DynamicObject) -> Option<String> {
    claim.requested_address.as_deref().map(str::to_owned).or_else(|| {
        pool.data
            .pointer("/spec/preAllocations")
            .and_then(|p| p.get(&*claim.key.name))
            .and_then(Value::as_str)
            .map(str::to_owned)
    })
}

fn claim_reference(claim: &Claim, version: CapiVersion) -> ObjectReference {
    ObjectReference {
        api_version: Some(format!("{GROUP}/{}", version.version())),
        kind: Some("IPAddressClaim".to_owned()),
        name: Some(claim.key.name.to_string()),
        namespace: Some(claim.key.namespace.to_string()),
        uid: Some(claim.uid.to_string()),
        resource_version: None,
        field_path: None,
    }
}

async fn add_claim_finalizer(claim: &Claim, ctx: &Context) -> Result<(), Error> {
    // Server-side apply of one set element: idempotent, and it never touches other owners' finalizers.
    let patch = json!({
        "apiVersion": format!("{GROUP}/{}", ctx.capi.ipam.version()),
        "kind": "IPAddressClaim",
        "metadata": {"name": &*claim.key.name, "namespace": &*claim.key.namespace, "finalizers": [RELEASE_ADDRESS_FINALIZER]},
    });
    let api = ctx.claims_api(&claim.key.namespace);
    let patched = ctx
        .fence
        .guard(api.patch(&claim.key.name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&patch)))
        .await?
        .map_err(Error::kube("adding the claim finalizer"))?;
    debug!(claim = %claim.key.name, index = ?patched.claim.release_finalizer_index, "finalizer added");
    Ok(())
}

/// Creates the IPAddress for a freshly assigned address.
async fn create_address(
    claim: &Claim,
    ctx: &Context,
    key: &ObjectKey,
    pool_key: &PoolKey,
    pool: &DynamicObject,
    assigned: &Assigned,
) -> Result<Next, Error> {
    let mut metadata = json!({
        "name": key.name,
        "namespace": key.namespace,
        "finalizers": [PROTECT_ADDRESS_FINALIZER],
        "ownerReferences": [claim_owner(claim, ctx.capi.ipam), pool_owner(pool_key.kind, pool)],
    });
    // Named by spec.clusterName or by the label, the IPAddress carries the label: the orphan path reads it.
    if let Some(cluster) = claim.cluster() {
        metadata["labels"] = json!({ CLUSTER_NAME_LABEL: cluster });
    }
    let mut spec = json!({
        "address": assigned.address.to_string(),
        "prefix": assigned.prefix,
        "claimRef": {"name": key.name},
        "poolRef": {"apiGroup": GROUP, "kind": pool_key.kind.kind(), "name": pool_key.name},
    });
    if let Some(g) = &assigned.gateway {
        spec["gateway"] = json!(g);
    }
    let resource = ctx.capi.ipam.ip_address();
    let mut object = DynamicObject::new(&key.name, &resource).within(&key.namespace);
    object.metadata = serde_json::from_value(metadata).map_err(Error::internal)?;
    object.data = json!({ "spec": spec });
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &key.namespace, &resource);
    // Leadership is checked again right before the create, and a create still in flight when the term ends is
    // dropped (`crate::leader`): a replica that may have lost the Lease never creates an IPAddress.
    // Fenced, it is uncertain whether it was created: the hold stays (this replica's state goes with its term).
    match ctx.fence.guard(api.create(&PostParams::default(), &object)).await? {
        Ok(created) => {
            ctx.registry.confirm(pool_key, key);
            let record = ctx.remember_address(key, &created);
            ctx.metrics.allocated(pool_key.kind, ctx.allocation_latency(claim));
            info!(claim = %key, address = %assigned.address, pool = %pool_key, "allocated");
            let message = format!("allocated {} from {pool_key}", assigned.address);
            match set_ready(claim, ctx, ClaimReason::Allocated, message, Some(&key.name)).await {
                // A DELETE that raced our finalizer can remove the claim anyway (the API server does not look at
                // finalizers again when it retries a delete): give the address back at once.
                Err(Error::Kube { source, .. }) if matches!(source.as_ref(), kube::Error::Api(s) if s.code == 404) => {
                    warn!(claim = %key, "the claim vanished while its address was being created; releasing it");
                    if let Some(record) = &record {
                        release_orphan(ctx, key, record).await?;
                    }
                    Ok(Next::AwaitChange)
                }
                other => other.map(|()| Next::AwaitChange),
            }
        }
        Err(kube::Error::Api(s)) if s.code == 409 => {
            // An IPAddress of this name exists that we have not seen yet (a move or restore): adopt it instead.
            let woken = ctx.registry.abandon(pool_key, key);
            ctx.wake(woken);
            let existing = api.get(&key.name).await.map_err(Error::kube("reading the existing IPAddress"))?;
            match ctx.remember_address(key, &existing) {
                Some(record) => adopt(claim, ctx, key, pool_key, Some(pool), &record).await,
                None => {
                    let theirs = crate::capi::spec_of::<IpAddressSpec>(&existing).unwrap_or_default().pool_ref;
                    let owner = match theirs.api_group.as_deref().filter(|g| !g.is_empty()) {
                        Some(group) => format!("{} \"{}\" of group {group}", theirs.kind, theirs.name),
                        None => format!("{} \"{}\" of the core group", theirs.kind, theirs.name),
                    };
                    belongs_elsewhere(claim, ctx, key, pool_key, &owner).await
                }
            }
        }
        Err(kube::Error::Api(s)) if matches!(s.code, 400 | 403 | 404 | 422) => {
            // A definitive rejection: nothing was created, so the address is free again.
            let woken = ctx.registry.abandon(pool_key, key);
            ctx.wake(woken);
            let message = format!("creating IPAddress {key}: {}", s.message);
            set_ready(claim, ctx, ClaimReason::AllocationFailed, message.clone(), None).await?;
            Err(Error::Rejected(message))
        }
        // Anything else may or may not have created it: keep the hold, the retry reuses the same address.
        Err(e) => Err(Error::kube("creating the IPAddress")(e)),
    }
}

fn claim_owner(claim: &Claim, version: CapiVersion) -> Value {
    json!({
        "apiVersion": format!("{GROUP}/{}", version.version()),
        "kind": "IPAddressClaim",
        "name": &*claim.key.name,
        "uid": claim.uid.to_string(),
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

fn pool_owner(kind: PoolKind, pool: &DynamicObject) -> Value {
    json!({
        "apiVersion": format!("{GROUP}/v1alpha2"),
        "kind": kind.kind(),
        "name": pool.name_any(),
        "uid": pool.metadata.uid.clone().unwrap_or_default(),
        "controller": false,
        "blockOwnerDeletion": true,
    })
}

/// Adopts an existing IPAddress of the claim's name: its spec is never touched (it is immutable); missing
/// finalizers, owner references and the cluster-name label are put back (decision D7).
async fn adopt(
    claim: &Claim,
    ctx: &Context,
    key: &ObjectKey,
    pool_key: &PoolKey,
    pool: Option<&DynamicObject>,
    record: &AddressRecord,
) -> Result<Next, Error> {
    if record.pool != *pool_key {
        return belongs_elsewhere(claim, ctx, key, pool_key, &record.pool.to_string()).await;
    }
    ctx.registry.stop_waiting(pool_key, key);
    // A duplicate that this claim was never told about (no addressRef yet) is withdrawn rather than handed out: it can
    // only come from a write that reached the API server late, after its leader's term ended (`crate::leader`).
    let duplicate = ctx.registry.duplicate_of(pool_key, key);
    if claim.address_ref.is_none() && duplicate.is_some() {
        if record.deleting {
            return Ok(Next::After(Duration::from_secs(1)));
        }
        return withdraw_duplicate(ctx, key, pool_key, record).await;
    }
    let claim_uid = claim.uid.to_string();
    let pool_uid = pool.and_then(|p| p.metadata.uid.clone());
    let has_claim_owner = record.claim_owner == Some(Uid::of(&claim_uid));
    let has_pool_owner = pool_uid.is_none_or(|uid| record.pool_owner == Some(Uid::of(&uid)));
    let has_label = claim.cluster().is_none_or(|v| record.cluster_label.as_deref() == Some(v));
    let complete = has_claim_owner && has_pool_owner && record.protected && has_label;
    if !complete && !record.deleting {
        repair_address(claim, ctx, key, pool_key, pool).await?;
    }
    if record.deleting {
        debug!(claim = %key, "the IPAddress is being deleted; its finalizer holds it until the claim goes");
    }
    let mut message = format!("allocated {} from {pool_key}", record.address);
    if let Some(duplicate) = duplicate {
        // Bound, so it stays (a machine may use it); the condition says so until one holder is released.
        message.push_str(&format!(
            "; DUPLICATE: {duplicate}. Delete one of these claims to resolve it (see docs/operations.md)"
        ));
    }
    set_ready(claim, ctx, ClaimReason::Allocated, message, Some(&key.name)).await?;
    Ok(Next::AwaitChange)
}

/// Deletes an IPAddress whose address another IPAddress of the pool holds, before its claim is bound to it; the
/// claim then gets a free address. A bound claim's address is never withdrawn: a machine may use it already.
async fn withdraw_duplicate(
    ctx: &Context,
    key: &ObjectKey,
    pool_key: &PoolKey,
    record: &AddressRecord,
) -> Result<Next, Error> {
    // The cache may not show a status we wrote a moment ago: only the live claim can say it was never bound.
    let live = ctx.claims_api(&key.namespace).get_opt(&key.name).await.map_err(Error::kube("reading the claim"))?;
    if live.is_none_or(|c| c.claim.address_ref.is_some()) {
        return Ok(Next::After(Duration::from_millis(500)));
    }
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &key.namespace, &ctx.capi.ipam.ip_address());
    let address = match api.get(&key.name).await {
        Ok(address) => address,
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(Next::After(Duration::from_millis(200))),
        Err(e) => return Err(Error::kube("reading a duplicated IPAddress")(e)),
    };
    if !is_ours_for(&address, &key.name, Some(pool_key)) {
        return Ok(Next::AwaitChange);
    }
    tracing::error!(
        claim = %key,
        pool = %pool_key,
        address = %record.address,
        "DUPLICATE ADDRESS withdrawn: IPAddress {key} holds an address another IPAddress of the pool holds, and its \
         claim was not bound to it yet; deleting it so that the claim gets a free address"
    );
    if delete_ip_address(ctx, &api, &address, "deleting a duplicated IPAddress").await? {
        ctx.deleted_address(key, pool_key, address.metadata.uid.as_deref());
    }
    ctx.metrics.duplicate_withdrawn(pool_key.kind);
    Ok(Next::After(Duration::from_millis(200)))
}

/// An IPAddress of the claim's name exists for another pool: the claim cannot get one (IPAddress specs are
/// immutable, and the name is taken).
async fn belongs_elsewhere(
    claim: &Claim,
    ctx: &Context,
    key: &ObjectKey,
    pool_key: &PoolKey,
    owner: &str,
) -> Result<Next, Error> {
    ctx.registry.stop_waiting(pool_key, key);
    let message = format!("IPAddress {key} already exists and belongs to {owner}, not to {pool_key}");
    set_ready(claim, ctx, ClaimReason::AllocationFailed, message, None).await?;
    Ok(Next::AwaitChange)
}

/// Puts back what a restore or move lost on an IPAddress: our finalizer, the owner references (stale references to
/// this claim or pool, with other UIDs, go; unrelated owners stay first) and the cluster-name label. Reads the live
/// object, and writes guarded by its resourceVersion.
async fn repair_address(
    claim: &Claim,
    ctx: &Context,
    key: &ObjectKey,
    pool_key: &PoolKey,
    pool: Option<&DynamicObject>,
) -> Result<(), Error> {
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &key.namespace, &ctx.capi.ipam.ip_address());
    let live = api.get(&key.name).await.map_err(Error::kube("reading the IPAddress to adopt"))?;
    let mut references: Vec<Value> = live
        .owner_references()
        .iter()
        .filter(|o| !(o.kind == "IPAddressClaim" && *o.name == *key.name))
        .filter(|o| !(o.kind == pool_key.kind.kind() && *o.name == *pool_key.name))
        .map(|o| serde_json::to_value(o).unwrap_or_default())
        .collect();
    references.push(claim_owner(claim, ctx.capi.ipam));
    if let Some(p) = pool {
        references.push(pool_owner(pool_key.kind, p));
    }
    let mut finalizers: Vec<String> = live.finalizers().to_vec();
    if !finalizers.iter().any(|f| f == PROTECT_ADDRESS_FINALIZER) {
        finalizers.push(PROTECT_ADDRESS_FINALIZER.to_owned());
    }
    let mut metadata = json!({
        "resourceVersion": live.resource_version(),
        "ownerReferences": references,
        "finalizers": finalizers,
    });
    // Named by spec.clusterName or by the label, the IPAddress carries the label: the orphan path reads it.
    if let Some(cluster) = claim.cluster() {
        metadata["labels"] = json!({ CLUSTER_NAME_LABEL: cluster });
    }
    let patch = json!({ "metadata": metadata });
    let patched = ctx
        .fence
        .guard(api.patch(&key.name, &PatchParams::default(), &Patch::Merge(patch)))
        .await?
        .map_err(Error::kube("adopting the IPAddress"))?;
    ctx.remember_address(key, &patched);
    info!(claim = %key, "adopted the existing IPAddress");
    Ok(())
}

/// Writes the Ready condition (and addressRef) when it changed, and publishes an Event on a transition.
async fn set_ready(
    claim: &Claim,
    ctx: &Context,
    reason: ClaimReason,
    message: String,
    address_ref: Option<&str>,
) -> Result<(), Error> {
    let ready = Ready { reason, message };
    // The cache keeps our Ready condition only, in digest form; that is all the comparisons need.
    let stored = claim.ready.as_ref();
    let conditions = stored_conditions(stored);
    // v1beta1 claims show Ready in status.conditions too; either view tells whether the claim is current.
    let stored_ref = claim.address_ref.as_deref();
    let address_ref = address_ref.or(stored_ref);
    let current = is_current(stored, &ready) && stored_ref == address_ref;
    let uid = claim.uid.to_string();
    if current || ctx.already_written(&uid, &ready, address_ref) {
        return Ok(());
    }
    let now = Timestamp::now();
    let namespace = &*claim.key.namespace;
    let api = ctx.claims_api(namespace);
    let result = match ctx.capi.ipam {
        // v1beta2 keeps conditions in a map list: apply our entry only.
        CapiVersion::V1Beta2 => {
            let body = claim_status(ctx.capi.ipam, &conditions, &[], &ready, address_ref, claim.generation, now);
            let patch = json!({
                "apiVersion": format!("{GROUP}/v1beta2"), "kind": "IPAddressClaim",
                "metadata": {"name": &*claim.key.name, "namespace": namespace},
                "status": body,
            });
            let params = PatchParams::apply(FIELD_MANAGER).force();
            ctx.fence.guard(api.patch_status(&claim.key.name, &params, &Patch::Apply(&patch))).await?
        }
        // v1beta1 keeps conditions in atomic lists: read them live (the cache keeps only ours), replace them whole,
        // guarded by the version read.
        CapiVersion::V1Beta1 => {
            let raw: Api<DynamicObject> =
                Api::namespaced_with(ctx.client.clone(), namespace, &ctx.capi.ipam.ip_address_claim());
            let live = raw.get(&claim.key.name).await.map_err(Error::kube("reading the claim status"))?;
            let list =
                |pointer: &str| live.data.pointer(pointer).and_then(Value::as_array).cloned().unwrap_or_default();
            let body = claim_status(
                ctx.capi.ipam,
                &list("/status/conditions"),
                &list("/status/v1beta2/conditions"),
                &ready,
                address_ref,
                claim.generation,
                now,
            );
            let patch = json!({"metadata": {"resourceVersion": live.resource_version()}, "status": body});
            ctx.fence.guard(api.patch_status(&claim.key.name, &PatchParams::default(), &Patch::Merge(&patch))).await?
        }
    };
    result.map_err(Error::kube("writing the claim status"))?;
    ctx.remember_written(&uid, &ready, address_ref);
    if is_transition(stored, &ready) {
        let type_ = match reason {
            ClaimReason::Allocated | ClaimReason::WaitingForCluster | ClaimReason::ClusterPaused => EventType::Normal,
            _ => EventType::Warning,
        };
        ctx.events
            .publish(&claim_reference(claim, ctx.capi.ipam), type_, reason.as_str(), "Allocate", &ready.message)
            .await;
    }
    Ok(())
}

/// Deletion: the grace period, then the IPAddress (finalizer off, deleted), then the claim's finalizer.
async fn release(
    claim: &Claim,
    ctx: &Context,
    key: &ObjectKey,
    pool_key: &PoolKey,
    pool: Option<&DynamicObject>,
) -> Result<Next, Error> {
    ctx.registry.stop_waiting(pool_key, key);
    if claim.release_finalizer_index.is_none() {
        return Ok(Next::AwaitChange);
    }
    // addressReuseGracePeriodSeconds (IP pools): hold the address, unless the pool is gone or going.
    if let Some(pool) = pool.filter(|p| p.metadata.deletion_timestamp.is_none())
        && !pool_key.kind.is_prefix_pool()
        && let Some(grace) = pool.data.pointer("/spec/addressReuseGracePeriodSeconds").and_then(Value::as_i64)
        && grace > 0
        && let Some(deleted_at) = &claim.deletion_timestamp
    {
        let release_at = deleted_at.0 + jiff::SignedDuration::from_secs(grace);
        let remaining = Timestamp::now().duration_until(release_at);
        if remaining.is_positive() {
            let wait = Duration::try_from(remaining).unwrap_or(Duration::from_secs(1));
            debug!(claim = %key, seconds = wait.as_secs_f64(), "holding the address for the reuse grace period");
            return Ok(Next::After(wait + Duration::from_millis(50)));
        }
    }
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &key.namespace, &ctx.capi.ipam.ip_address());
    match api.get(&key.name).await {
        // Only an IPAddress of the claim's pool, made for this claim, is ours to delete.
        Ok(address) if !is_ours_for(&address, &key.name, Some(pool_key)) => {
            debug!(claim = %key, "the IPAddress of this name belongs to another provider; leaving it alone");
        }
        Ok(address) => {
            // Gone now: the address is free at once (the watch event confirms it later).
            if delete_ip_address(ctx, &api, &address, "deleting the IPAddress").await? {
                ctx.deleted_address(key, pool_key, address.metadata.uid.as_deref());
            }
            info!(claim = %key, "released");
        }
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => return Err(Error::kube("reading the IPAddress")(e)),
    }
    ctx.events
        .publish(
            &claim_reference(claim, ctx.capi.ipam),
            EventType::Normal,
            "Released",
            "Release",
            "the address was released",
        )
        .await;
    let claims = ctx.claims_api(&key.namespace);
    remove_finalizer(ctx, &claims, &key.name, RELEASE_ADDRESS_FINALIZER, claim.release_finalizer_index).await?;
    ctx.forget_claim(key, &claim.uid);
    Ok(Next::AwaitChange)
}

pub fn finalizer_index(meta: &kube::api::ObjectMeta, finalizer: &str) -> Option<usize> {
    meta.finalizers.as_ref().and_then(|f| f.iter().position(|x| x == finalizer))
}

/// Removes one finalizer, found at `index` of the finalizers we read, with a JSON patch that first tests it is still
/// there (a concurrent change fails the patch, and the retry reads the list again).
pub async fn remove_finalizer<K>(
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

/// Takes our finalizer off an IPAddress and deletes it; `true` when it is gone at once (no other finalizer).
async fn delete_ip_address(
    ctx: &Context,
    api: &Api<DynamicObject>,
    address: &DynamicObject,
    what: &'static str,
) -> Result<bool, Error> {
    let name = address.name_any();
    let index = finalizer_index(&address.metadata, PROTECT_ADDRESS_FINALIZER);
    remove_finalizer(ctx, api, &name, PROTECT_ADDRESS_FINALIZER, index).await?;
    // Deleted only while it is still the object we checked (a new one of the same name is not ours to judge).
    let params = DeleteParams {
        preconditions: address.metadata.uid.clone().map(|uid| Preconditions { uid: Some(uid), resource_version: None }),
        ..DeleteParams::default()
    };
    match ctx.fence.guard(api.delete(&name, &params)).await? {
        Ok(either::Either::Right(_)) => Ok(true),
        Ok(either::Either::Left(_)) => Ok(false),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(false),
        Err(e) => Err(Error::kube(what)(e)),
    }
}

/// Whether an IPAddress references one of our pools (`pool`, when given) and names `claim` in its `claimRef`: the
/// only IPAddresses we ever delete.
fn is_ours_for(address: &DynamicObject, claim: &str, pool: Option<&PoolKey>) -> bool {
    let Some(spec) = crate::capi::spec_of::<IpAddressSpec>(address) else { return false };
    let Some(kind) = spec.pool_ref.our_kind() else { return false };
    let namespace = address.metadata.namespace.as_deref().unwrap_or_default();
    spec.claim_ref.name == claim && pool.is_none_or(|p| *p == PoolKey::new(kind, namespace, &spec.pool_ref.name))
}

/// Releases an IPAddress whose claim no longer exists (decision D11).
pub async fn release_orphan(ctx: &Context, key: &ObjectKey, record: &AddressRecord) -> Result<(), Error> {
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &key.namespace, &ctx.capi.ipam.ip_address());
    let Ok(address) = api.get(&key.name).await else { return Ok(()) };
    if address.metadata.uid.as_deref().map(Uid::of) != record.uid || !is_ours_for(&address, &key.name, None) {
        return Ok(());
    }
    delete_ip_address(ctx, &api, &address, "deleting an orphaned IPAddress").await?;
    if record.moving_away {
        info!(address = %key, value = record.address, "deleted the IPAddress of a claim moved away; its address stays reserved");
    } else {
        warn!(address = %key, value = record.address, "released an IPAddress whose claim is gone");
    }
    Ok(())
}
