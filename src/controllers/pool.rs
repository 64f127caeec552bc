//! The pool controllers: the `ProtectPool` finalizer, and the status of decision D4 with a `Ready` condition,
//! written only when it changed (the status writer coalesces bursts, see `super::run`).

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};
use tracing::{debug, info};

use super::claim::{finalizer_index, remove_finalizer};
use super::registry::PoolKey;
use super::status::{READY, rfc3339};
use super::{Context, Error, FIELD_MANAGER, pool_resource};
use crate::api::v1alpha2::PoolAddressesStatus;
use crate::api::{GROUP, MOVED_AWAY_ANNOTATION, PROTECT_POOL_FINALIZER, PoolKind};

/// A safety net for missed events; changes arrive through watches.
const RESYNC: Duration = Duration::from_secs(600);

pub async fn reconcile(kind: PoolKind, pool: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.wait_synced().await;
    let started = std::time::Instant::now();
    let result = reconcile_pool(kind, &pool, &ctx).await;
    ctx.metrics.reconciled("pool", started.elapsed(), result.as_ref().err().map(Error::kind));
    result
}

pub fn error_policy(pool: Arc<DynamicObject>, error: &Error, _ctx: Arc<Context>) -> Action {
    debug!(pool = %pool.name_any(), error = %error, "pool reconcile failed; retrying");
    Action::requeue(Duration::from_secs(2))
}

async fn reconcile_pool(kind: PoolKind, pool: &DynamicObject, ctx: &Context) -> Result<Action, Error> {
    let namespace = pool.namespace().unwrap_or_default();
    let key = PoolKey::new(kind, &namespace, &pool.name_any());
    let resource = pool_resource(kind);
    let api: Api<DynamicObject> = if kind.is_global() {
        Api::all_with(ctx.client.clone(), &resource)
    } else {
        Api::namespaced_with(ctx.client.clone(), &namespace, &resource)
    };
    let has_finalizer = pool.finalizers().iter().any(|f| f == PROTECT_POOL_FINALIZER);

    if pool.metadata.deletion_timestamp.is_some() {
        // The pool goes once no IPAddress references it.
        let used = ctx.registry.used(&key);
        if used == 0 && has_finalizer {
            let index = finalizer_index(&pool.metadata, PROTECT_POOL_FINALIZER);
            remove_finalizer(ctx, &api, &key.name, PROTECT_POOL_FINALIZER, index).await?;
            ctx.metrics.forget_pool(kind, &key.namespace, &key.name);
            info!(pool = %key, "no IPAddress left; the pool may go");
        }
        return Ok(Action::await_change());
    }
    if !has_finalizer {
        let patch = json!({
            "apiVersion": format!("{GROUP}/v1alpha2"), "kind": kind.kind(),
            "metadata": {"name": key.name, "finalizers": [PROTECT_POOL_FINALIZER]},
        });
        let params = PatchParams::apply(FIELD_MANAGER).force();
        ctx.fence
            .guard(api.patch(&key.name, &params, &Patch::Apply(&patch)))
            .await?
            .map_err(Error::kube("adding the pool finalizer"))?;
    }
    if let Some(spec) = pool.data.get("spec") {
        let woken = ctx.registry.apply_spec(&key, spec);
        ctx.wake(woken);
    }
    let (counts, spec_error) = ctx.registry.counts(&key);
    let duplicates = ctx.registry.duplicates(&key);
    ctx.metrics.set_pool(kind, &key.namespace, &key.name, counts);
    ctx.metrics.set_pool_duplicated(kind, &key.namespace, &key.name, duplicates.len());
    let addresses = serde_json::to_value(PoolAddressesStatus::from(counts)).map_err(Error::internal)?;
    let (status, reason, message) = match (&spec_error, duplicates.as_slice()) {
        (Some(e), _) => ("False", "InvalidSpec", e.clone()),
        (None, []) => match ctx.registry.reservations(&key).len() {
            0 => ("True", "Ready", String::new()),
            n => {
                let message = format!(
                    "{n} address(es) reserved for Clusters moved to another management cluster (annotation {MOVED_AWAY_ANNOTATION})"
                );
                ("True", "Ready", message)
            }
        },
        (None, duplicates) => {
            let shown: Vec<String> = duplicates.iter().take(5).map(ToString::to_string).collect();
            let more = duplicates.len().saturating_sub(shown.len());
            let mut message = shown.join("; ");
            if more > 0 {
                message.push_str(&format!("; and {more} more"));
            }
            ("False", "DuplicateAddresses", message)
        }
    };
    let stored = pool.data.get("status");
    let stored_ready = stored
        .and_then(|s| s.get("conditions"))
        .and_then(Value::as_array)
        .and_then(|c| c.iter().find(|c| c.get("type").and_then(Value::as_str) == Some(READY)));
    let unchanged = stored.and_then(|s| s.get("ipAddresses")) == Some(&addresses)
        && stored_ready.is_some_and(|c| {
            c.get("status").and_then(Value::as_str) == Some(status)
                && c.get("reason").and_then(Value::as_str) == Some(reason)
                && c.get("message").and_then(Value::as_str).unwrap_or("") == message
        });
    if unchanged {
        return Ok(Action::requeue(RESYNC));
    }
    let transition = stored_ready
        .filter(|c| c.get("status").and_then(Value::as_str) == Some(status))
        .and_then(|c| c.get("lastTransitionTime").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_else(|| rfc3339(Timestamp::now()));
    let patch = json!({
        "apiVersion": format!("{GROUP}/v1alpha2"), "kind": kind.kind(),
        "metadata": {"name": key.name},
        "status": {
            "ipAddresses": addresses,
            "conditions": [{
                "type": READY, "status": status, "reason": reason, "message": message,
                "lastTransitionTime": transition, "observedGeneration": pool.metadata.generation,
            }],
        },
    });
    let params = PatchParams::apply(FIELD_MANAGER).force();
    ctx.fence
        .guard(api.patch_status(&key.name, &params, &Patch::Apply(&patch)))
        .await?
        .map_err(Error::kube("writing the pool status"))?;
    Ok(Action::requeue(RESYNC))
}
