//! The claim's Ready condition and binding, written only when they change.

use super::{Context, Error, claim_reference};
use crate::apiserver::{ApiError, Read};
use crate::capi::Claim;
use crate::controllers::events::{EventType, Note};
use crate::controllers::status::{ClaimReason, Ready, claim_status, is_current, is_transition, stored_conditions};
use crate::index::{ClaimView, Observed};

/// The claim's resourceVersion and whether it has finalizers, as cached; read live when its resourceVersion was not
/// kept (it is opaque, and only the API server's decimal ones are).
pub(super) async fn as_read(claim: &Claim, ctx: &Context) -> Result<Read, Error> {
    if let Some(resource_version) = claim.resource_version.text() {
        return Ok(Read { resource_version, has_finalizers: claim.has_finalizers });
    }
    let live = ctx
        .api
        .get_claim(&claim.key)
        .await
        .map_err(Error::api("reading the claim"))?
        .ok_or_else(|| Error::api("reading the claim")(ApiError::NotFound))?;
    Ok(Read {
        resource_version: live.metadata.resource_version.unwrap_or_default(),
        has_finalizers: live.claim.has_finalizers,
    })
}

/// Writes the Ready condition (and addressRef) when it changed, and publishes an Event when it tells something the
/// condition alone does not (see [`deserves_event`]).
///
/// One merge patch of the status subresource, guarded by the resourceVersion the decision was made on. Merge patches
/// replace lists whole, so the conditions lists are written with every other controller's entries as they are: from
/// the cache when the claim has none (it keeps our `Ready` only), read live otherwise.
pub(super) async fn set_ready(
    claim: &Claim,
    ctx: &Context,
    view: &ClaimView,
    reason: ClaimReason,
    message: String,
    address_ref: Option<&str>,
) -> Result<(), Error> {
    // A bound claim told something else keeps the address it was bound to in the message: its one durable trace.
    let message = match claim.bound_address {
        Some(address)
            if address_ref.or(claim.address_ref()).is_some()
                && !reason.is_ready()
                && !message.starts_with("allocated ") =>
        {
            format!("allocated {address} (its IPAddress is gone): {message}")
        }
        _ => message,
    };
    let ready = Ready { reason, message };
    let stored = claim.ready.as_ref();
    let stored_ref = claim.address_ref();
    let address_ref = address_ref.or(stored_ref);
    let current = is_current(stored, &ready) && stored_ref == address_ref;
    let written = crate::compact::digest(&(&ready, address_ref));
    // Not written again when it was (the cache may not show our write yet; the view tells what we wrote last, and only
    // this claim's run writes its status).
    if current || view.already_written(claim, written) {
        return Ok(());
    }
    let (conditions, v1beta2_conditions, resource_version) = match claim.resource_version.text() {
        Some(version) if !claim.foreign_conditions => {
            let ours = stored_conditions(stored);
            (ours.clone(), ours, version)
        }
        _ => {
            let live = ctx
                .api
                .get_claim_conditions(&claim.key)
                .await
                .map_err(Error::api("reading the claim status"))?
                .ok_or_else(|| Error::api("reading the claim status")(ApiError::NotFound))?;
            // Another claim of the name since (perhaps another provider's): never written to; the watch brings the
            // change (scenario `a_status_write_read_live_never_lands_on_another_providers_claim_of_the_name`).
            if live.uid != claim.uid.to_string() {
                return Err(Error::api("reading the claim status")(ApiError::Conflict(format!(
                    "claim {} is another claim of the name now (uid {})",
                    claim.key, live.uid
                ))));
            }
            (live.conditions, live.v1beta2, live.resource_version)
        }
    };
    let body = claim_status(
        ctx.capi().ipam,
        &conditions,
        &v1beta2_conditions,
        &ready,
        address_ref,
        claim.generation.map(i64::from),
        ctx.now(),
    );
    // Assumption: this future is never dropped mid-PATCH while the index lives on (a run is dropped only with the
    // whole controllers' run, whose index goes with it; the fence turns a term's end into an error): a write that
    // landed unobserved would leave the earlier digest standing, and that status might never be written again.
    if let Err(e) = ctx.api.patch_claim_status(&claim.key, &resource_version, &body).await {
        ctx.index.observe(Observed::StatusWriteFailed { claim });
        return Err(Error::api("writing the claim status")(e));
    }
    ctx.index.observe_then_view(claim, view.pool_key.clone(), Observed::StatusWritten { claim, digest: written });
    if deserves_event(stored, &ready) {
        let type_ = match reason {
            ClaimReason::Allocated
            | ClaimReason::WaitingForCluster
            | ClaimReason::ClusterPaused
            | ClaimReason::WaitingForIPAddress => EventType::Normal,
            _ => EventType::Warning,
        };
        ctx.events
            .publish(
                &*ctx.api,
                ctx.now(),
                &claim_reference(claim, ctx.capi().ipam),
                Note { type_, reason: reason.as_str(), action: "Allocate", note: &ready.message },
            )
            .await;
    }
    Ok(())
}

/// Events are for failures, waits and recoveries: every change of the Ready status or reason, except a claim's first
/// `Allocated` (the condition says it, and a burst of thousands of allocations would cost thousands of Event writes
/// that tell nothing more).
pub fn deserves_event(stored: Option<&crate::capi::ReadyCondition>, ready: &Ready) -> bool {
    is_transition(stored, ready) && !(stored.is_none() && ready.reason.is_ready())
}
