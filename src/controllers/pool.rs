//! The pool controller: the `ProtectPool` finalizer, and the status of docs/compatibility.md D4 with a `Ready`
//! condition, written only when it changed (the status writer coalesces bursts, see `super::run`). `desired_status`
//! decides from the index alone.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use tracing::info;

use super::status::READY;
use super::{Context, Error, finalizers};
use crate::api::v1alpha2::{PoolAddressesStatus, PoolStatus};
use crate::api::{MOVED_AWAY_ANNOTATION, PROTECT_POOL_FINALIZER, Pool};
use crate::apiserver::{Read, Target};
use crate::index::{PoolKey, PoolStatusView, PoolView};
use crate::runtime::retry::Next;

/// A safety net for missed events; changes arrive through watches.
const RESYNC: Duration = Duration::from_secs(600);

/// The status a pool should show: its counts and its Ready condition (status, reason, message).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DesiredStatus {
    pub addresses: PoolAddressesStatus,
    pub ready: bool,
    pub reason: &'static str,
    pub message: String,
}

impl DesiredStatus {
    fn status(&self) -> &'static str {
        if self.ready { "True" } else { "False" }
    }

    /// Whether the pool's stored status says this already.
    pub fn is_current(&self, pool: &Pool) -> bool {
        pool.status.addresses.as_ref() == Some(&self.addresses)
            && stored_ready(pool)
                .is_some_and(|c| c.status == self.status() && c.reason == self.reason && c.message == self.message)
    }
}

fn stored_ready(pool: &Pool) -> Option<&Condition> {
    pool.status.conditions.iter().flatten().find(|c| c.type_ == READY)
}

/// How many IPAddresses out of range the pool's condition names.
pub const OUT_OF_RANGE_SHOWN: usize = 5;

/// What the pool's status is, as the index says it (`view`): an invalid spec, addresses held twice, IPAddresses holding
/// addresses the spec no longer allocates, or Ready (with the count of addresses reserved for Clusters moved away).
pub fn desired_status(view: &PoolStatusView) -> DesiredStatus {
    let PoolStatusView { counts, spec_error, duplicates, reserved: reservations, out_of_range, .. } = view.clone();
    let addresses = PoolAddressesStatus::from(counts);
    let (ready, reason, message) = match (spec_error, duplicates.as_slice()) {
        (Some(e), _) => (false, "InvalidSpec", e),
        // An edit admitted while an address was being handed out (the webhook cannot see one in flight), or an
        // IPAddress made by hand: said, so that someone moves them.
        (None, []) if !out_of_range.is_empty() => {
            let shown: Vec<String> = out_of_range.iter().map(|(k, held)| format!("{k} ({held})")).collect();
            let n = addresses.out_of_range;
            let more = usize::try_from(n).unwrap_or(usize::MAX).saturating_sub(shown.len());
            let mut message =
                format!("{n} IPAddress(es) hold addresses the pool's spec does not allocate: {}", shown.join(", "));
            if more > 0 {
                message.push_str(&format!(" and {more} more"));
            }
            message.push_str("; delete their claims to move them to addresses the pool allocates");
            (false, "AddressesOutOfRange", message)
        }
        (None, []) => match reservations {
            0 => (true, "Ready", String::new()),
            n => (
                true,
                "Ready",
                format!(
                    "{n} address(es) reserved for Clusters moved to another management cluster (annotation {MOVED_AWAY_ANNOTATION})"
                ),
            ),
        },
        (None, duplicates) => {
            let shown: Vec<String> = duplicates.iter().take(5).map(ToString::to_string).collect();
            let more = duplicates.len().saturating_sub(shown.len());
            let mut message = shown.join("; ");
            if more > 0 {
                message.push_str(&format!("; and {more} more"));
            }
            (false, "DuplicateAddresses", message)
        }
    };
    DesiredStatus { addresses, ready, reason, message }
}

/// Reconciles the pool `key` from its view (`Index::pool_view`).
pub async fn reconcile(key: &PoolKey, view: PoolView, ctx: &Context) -> Result<Next, Error> {
    let started = std::time::Instant::now();
    let result = reconcile_pool(key, view, ctx).await;
    ctx.reconciled(crate::metrics::pool_controller(key.kind), started.elapsed(), &result);
    result
}

async fn reconcile_pool(key: &PoolKey, view: PoolView, ctx: &Context) -> Result<Next, Error> {
    let pool = view.pool().clone();
    let finalizer = finalizers::index_of(&pool.metadata, PROTECT_POOL_FINALIZER);
    let view = match view {
        // The pool goes once no IPAddress references it.
        PoolView::Deleting { in_use, .. } => {
            if !in_use && finalizer.is_some() {
                finalizers::remove(ctx, &Target::Pool(key.clone()), &pool.metadata, PROTECT_POOL_FINALIZER).await?;
                ctx.metrics.forget_pool(key.kind, &key.namespace, &key.name);
                info!(pool = %key, "no IPAddress left; the pool may go");
            }
            return Ok(Next::AwaitChange);
        }
        PoolView::Serving { status, .. } => status,
    };
    if finalizer.is_none() {
        let read = Read {
            resource_version: pool.metadata.resource_version.clone().unwrap_or_default(),
            has_finalizers: pool.metadata.finalizers.as_ref().is_some_and(|f| !f.is_empty()),
        };
        ctx.api
            .add_pool_finalizer(key, PROTECT_POOL_FINALIZER, &read)
            .await
            .map_err(Error::api("adding a finalizer"))?;
    }
    let desired = desired_status(&view);
    ctx.metrics.set_pool(key.kind, &key.namespace, &key.name, view.counts);
    ctx.metrics.set_pool_duplicated(key.kind, &key.namespace, &key.name, view.duplicated_here);
    if desired.is_current(&pool) {
        return Ok(Next::After(RESYNC));
    }
    let transition = stored_ready(&pool)
        .filter(|c| c.status == desired.status())
        .map(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| Time(ctx.now()));
    let ready = Condition {
        type_: READY.to_owned(),
        status: desired.status().to_owned(),
        reason: desired.reason.to_owned(),
        message: desired.message.clone(),
        last_transition_time: transition,
        observed_generation: pool.metadata.generation,
    };
    // A merge patch: the counts whole, the conditions list whole with any other controller's entries kept.
    let mut conditions: Vec<Condition> = pool.status.conditions.clone().unwrap_or_default();
    match conditions.iter_mut().find(|c| c.type_ == READY) {
        Some(slot) => *slot = ready,
        None => conditions.push(ready),
    }
    let status = PoolStatus { addresses: Some(desired.addresses), conditions: Some(conditions) };
    ctx.api.patch_pool_status(key, &status).await.map_err(Error::api("writing the pool status"))?;
    Ok(Next::After(RESYNC))
}
