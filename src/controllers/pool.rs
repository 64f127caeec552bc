//! The pool controller: the `ProtectPool` finalizer, and the status of docs/compatibility.md D4 with a `Ready` and an
//! `AddressesAvailable` condition, written only when it changed (the status writer coalesces bursts, see
//! `super::run`), and an Event on the pool for each condition's change. `desired_status` decides from the index
//! alone.

use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use tracing::info;

use super::events::{EventType, Note};
use super::status::READY;
use super::{Context, Error, finalizers};
use crate::api::v1alpha2::{ClusterUsage, PoolAddressesStatus, PoolStatus};
use crate::api::{
    GROUP, MOVED_AWAY_ANNOTATION, NEARLY_EXHAUSTED_AT_ANNOTATION, NearlyExhaustedAt, POOL_VERSION,
    PROTECT_POOL_FINALIZER, Pool,
};
use crate::apiserver::{Read, Target};
use crate::index::{PoolKey, PoolStatusView, PoolView};
use crate::runtime::retry::Next;

/// A safety net for missed events; changes arrive through watches.
const RESYNC: Duration = Duration::from_secs(600);

/// The status a pool should show: its counts, its Ready condition (status, reason, message) and its
/// `AddressesAvailable` condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DesiredStatus {
    pub addresses: PoolAddressesStatus,
    pub ready: bool,
    pub reason: &'static str,
    pub message: String,
    pub available: Availability,
    /// `status.clusterUsage`: written as it is, `None` removing it (a pool whose quota went).
    pub cluster_usage: Option<ClusterUsage>,
}

/// The `AddressesAvailable` condition: True/`Available`, True/`NearlyExhausted` (at most the threshold free), or
/// False/`Exhausted` (none free); Unknown/`InvalidSpec` while the spec cannot be counted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Availability {
    pub status: &'static str,
    pub reason: &'static str,
    pub message: String,
}

impl Availability {
    pub fn is_exhausted(&self) -> bool {
        self.reason == EXHAUSTED
    }

    pub fn is_nearly_exhausted(&self) -> bool {
        self.reason == NEARLY_EXHAUSTED
    }
}

pub const ADDRESSES_AVAILABLE: &str = "AddressesAvailable";
const AVAILABLE: &str = "Available";
const NEARLY_EXHAUSTED: &str = "NearlyExhausted";
const EXHAUSTED: &str = "Exhausted";

impl DesiredStatus {
    fn status(&self) -> &'static str {
        if self.ready { "True" } else { "False" }
    }

    /// Whether the pool's stored status says this already.
    pub fn is_current(&self, pool: &Pool) -> bool {
        let says = |type_: &str, status: &str, reason: &str, message: &str| {
            stored(pool, type_).is_some_and(|c| c.status == status && c.reason == reason && c.message == message)
        };
        pool.status.addresses.as_ref() == Some(&self.addresses)
            && pool.status.cluster_usage == self.cluster_usage
            && says(READY, self.status(), self.reason, &self.message)
            && says(ADDRESSES_AVAILABLE, self.available.status, self.available.reason, &self.available.message)
    }
}

fn stored<'p>(pool: &'p Pool, type_: &str) -> Option<&'p Condition> {
    pool.status.conditions.iter().flatten().find(|c| c.type_ == type_)
}

/// When the pool is nearly exhausted: its annotation, else [`NearlyExhaustedAt::DEFAULT`]; a wrong annotation is
/// said in the condition's message, and the default applies. Not a flag of the manager: every manager that writes a
/// pool's status (those of a pool without a shard label) must write the same one (helper-121 F5: two managers with
/// different thresholds would rewrite each other's condition, and publish an Event each time, for ever).
pub fn nearly_exhausted_at(pool: &Pool) -> (NearlyExhaustedAt, Option<String>) {
    let default = NearlyExhaustedAt::DEFAULT;
    match pool.annotation(NEARLY_EXHAUSTED_AT_ANNOTATION).map(str::parse::<NearlyExhaustedAt>) {
        None => (default, None),
        Some(Ok(at)) => (at, None),
        Some(Err(e)) => {
            (default, Some(format!("annotation {NEARLY_EXHAUSTED_AT_ANNOTATION}: {e}; the default {default} applies")))
        }
    }
}

/// The pool's `AddressesAvailable` condition from its counts (free is D4's: what can still be handed out).
fn availability(
    counts: &PoolAddressesStatus,
    spec_error: bool,
    (at, wrong_annotation): (NearlyExhaustedAt, Option<String>),
) -> Availability {
    let PoolAddressesStatus { total, free, .. } = *counts;
    let (status, reason, mut message) = if spec_error {
        ("Unknown", "InvalidSpec", "the spec is invalid (see the Ready condition): nothing can be counted".to_owned())
    } else if free == 0 {
        (
            "False",
            EXHAUSTED,
            format!("no free address of {total}: new claims wait until one is released or the pool grows"),
        )
    } else if free <= at.threshold(total) {
        ("True", NEARLY_EXHAUSTED, format!("{free} of {total} addresses free, at or below {at}"))
    } else {
        ("True", AVAILABLE, String::new())
    };
    if let Some(wrong) = wrong_annotation {
        message = if message.is_empty() { wrong } else { format!("{message}; {wrong}") };
    }
    Availability { status, reason, message }
}

/// How many IPAddresses out of range the pool's condition names.
pub const OUT_OF_RANGE_SHOWN: usize = 5;

/// What the pool's status is, as the index says it (`view`): an invalid spec, addresses held twice, IPAddresses holding
/// addresses the spec no longer allocates, or Ready (with the count of addresses reserved for Clusters moved away).
/// `nearly` is when the pool counts as nearly exhausted ([`nearly_exhausted_at`]).
pub fn desired_status(view: &PoolStatusView, nearly: (NearlyExhaustedAt, Option<String>)) -> DesiredStatus {
    let PoolStatusView { counts, spec_error, duplicates, reserved: reservations, out_of_range, cluster_usage, .. } =
        view.clone();
    let addresses = PoolAddressesStatus::from(counts);
    let available = availability(&addresses, spec_error.is_some(), nearly);
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
    DesiredStatus { addresses, ready, reason, message, available, cluster_usage }
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
    let desired = desired_status(&view, nearly_exhausted_at(&pool));
    ctx.metrics.set_pool(key.kind, &key.namespace, &key.name, view.counts);
    ctx.metrics.set_pool_duplicated(key.kind, &key.namespace, &key.name, view.duplicated_here);
    ctx.metrics.set_pool_conditions(
        key.kind,
        &key.namespace,
        &key.name,
        desired.ready,
        desired.available.is_nearly_exhausted(),
        desired.available.is_exhausted(),
    );
    if desired.is_current(&pool) {
        return Ok(Next::After(RESYNC));
    }
    let condition = |type_: &str, status: &str, reason: &str, message: &str| Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        last_transition_time: stored(&pool, type_)
            .filter(|c| c.status == status)
            .map(|c| c.last_transition_time.clone())
            .unwrap_or_else(|| Time(ctx.now())),
        observed_generation: pool.metadata.generation,
    };
    let ready = condition(READY, desired.status(), desired.reason, &desired.message);
    let available = &desired.available;
    let available = condition(ADDRESSES_AVAILABLE, available.status, available.reason, &available.message);
    let transitions: Vec<Condition> =
        [&ready, &available].into_iter().filter(|c| deserves_event(stored(&pool, &c.type_), c)).cloned().collect();
    // A merge patch: the counts whole, the conditions list whole with any other controller's entries kept.
    let mut conditions: Vec<Condition> = pool.status.conditions.clone().unwrap_or_default();
    for new in [ready, available] {
        match conditions.iter_mut().find(|c| c.type_ == new.type_) {
            Some(slot) => *slot = new,
            None => conditions.push(new),
        }
    }
    let status = PoolStatus {
        addresses: Some(desired.addresses),
        conditions: Some(conditions),
        cluster_usage: desired.cluster_usage,
    };
    ctx.api.patch_pool_status(key, &status).await.map_err(Error::api("writing the pool status"))?;
    for c in transitions {
        let type_ =
            if c.status == "True" && c.reason != NEARLY_EXHAUSTED { EventType::Normal } else { EventType::Warning };
        let note = if c.message.is_empty() { format!("{} is {}", c.type_, c.status) } else { c.message.clone() };
        let what = Note { type_, reason: &c.reason, action: "UpdateStatus", note: &note };
        ctx.events.publish(&*ctx.api, ctx.now(), &pool_reference(key, &pool), what).await;
    }
    Ok(Next::After(RESYNC))
}

/// An Event for every change of a condition's status or reason, except a good first one (a new pool is Ready and
/// Available; a pool written by a version without the condition becomes so on the upgrade).
fn deserves_event(stored: Option<&Condition>, new: &Condition) -> bool {
    match stored {
        Some(old) => old.status != new.status || old.reason != new.reason,
        None => !(new.status == "True" && matches!(new.reason.as_str(), "Ready" | AVAILABLE)),
    }
}

/// The pool an Event is about (a global pool's Events go to the `default` namespace, as client-go puts them).
fn pool_reference(key: &PoolKey, pool: &Pool) -> ObjectReference {
    ObjectReference {
        api_version: Some(format!("{GROUP}/{POOL_VERSION}")),
        kind: Some(key.kind.kind().to_owned()),
        name: Some(key.name.to_string()),
        namespace: (!key.kind.is_global()).then(|| key.namespace.to_string()),
        uid: pool.metadata.uid.clone(),
        resource_version: pool.metadata.resource_version.clone(),
        ..Default::default()
    }
}
