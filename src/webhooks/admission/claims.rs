//! Warnings when an IPAddressClaim of one of our pool kinds is created (docs/compatibility.md D17): its pool does not
//! exist or is being deleted, belongs to a manager that does not watch the claim, or will not hand it the address
//! it asks for. Every answer admits the claim: the webhook only says now what the claim's condition would say later.
//! One read per claim, the pool's GET.

use kube::api::DynamicObject;
use kube::core::admission::Operation;

use super::{AdmissionContext, Outcome, Request};
use crate::api::{Pool, PoolSpec, REQUESTED_ADDRESS_ANNOTATION, WATCH_FILTER_LABEL};
use crate::capi::PoolRef;
use crate::ipam::validate::{ClaimAsking, requested_ip_finding, requested_prefix_finding};
use crate::ipam::{IpPoolConfig, PrefixPoolConfig};

/// Admits the claim, with what its pool will make of it as warnings.
pub(super) async fn warnings(ctx: &AdmissionContext, request: &Request) -> Outcome {
    let warnings = match (request.operation == Operation::Create, request.object.as_ref()) {
        (true, Some(claim)) => claim_warnings(ctx, request, claim).await,
        _ => Vec::new(),
    };
    Outcome { allowed: true, warnings, ..Default::default() }
}

async fn claim_warnings(ctx: &AdmissionContext, request: &Request, claim: &DynamicObject) -> Vec<String> {
    let pool_ref: Option<PoolRef> =
        claim.data.get("spec").and_then(|s| s.get("poolRef")).and_then(|r| serde_json::from_value(r.clone()).ok());
    let Some((kind, pool_ref)) = pool_ref.and_then(|r| Some((r.our_kind()?, r))) else { return Vec::new() };
    let namespace = claim.metadata.namespace.as_deref().or(request.namespace.as_deref()).unwrap_or_default();
    let name = claim.metadata.name.as_deref().unwrap_or(&request.name);
    let pool_namespace = (!kind.is_global()).then_some(namespace);
    let pool_name = &pool_ref.name;
    let named = match pool_namespace {
        Some(ns) => format!("{} {pool_name:?} in namespace {ns:?}", kind.kind()),
        None => format!("{} {pool_name:?}", kind.kind()),
    };
    // The pool as the controllers keep it: its shard, its deletion and its spec are read the same way.
    let typed = |o: DynamicObject| Pool::from_object(kind, serde_json::to_value(o).unwrap_or_default());
    let read = ctx.reads.pool(kind, pool_name, pool_namespace).await.map_err(|e| e.to_string());
    let pool = match read.and_then(|o| o.map(typed).transpose()) {
        Ok(Some(pool)) => pool,
        Ok(None) => {
            return vec![format!(
                "spec.poolRef: {named} does not exist; the claim waits for it (pool kinds and names are case-sensitive)"
            )];
        }
        Err(e) => return vec![format!("spec.poolRef: {named} could not be read to check the claim against it: {e}")],
    };
    let mut warnings = Vec::new();
    if pool.is_deleting() {
        warnings.push(format!("spec.poolRef: {named} is being deleted; it hands out no address"));
    }
    let claim_shard = claim.metadata.labels.as_ref().and_then(|l| l.get(WATCH_FILTER_LABEL)).map(String::as_str);
    if let Some(shard) = pool.shard()
        && claim_shard != Some(shard)
    {
        warnings.push(format!(
            "metadata.labels[{WATCH_FILTER_LABEL}]: {named} belongs to the manager started with \
             --watch-filter={shard}, which does not watch this claim: label the claim {WATCH_FILTER_LABEL}={shard}, or \
             use a pool of its own manager"
        ));
    }
    let requested = claim.metadata.annotations.as_ref().and_then(|a| a.get(REQUESTED_ADDRESS_ANNOTATION));
    if let Some(requested) = requested.filter(|r| !r.is_empty()) {
        let asking = ClaimAsking { namespace, name, requested };
        if let Some(finding) = requested_finding(&pool, &asking) {
            warnings.push(format!(
                "metadata.annotations[{REQUESTED_ADDRESS_ANNOTATION}]: {requested:?} {finding}; the claim waits until \
                 {named} can hand it out"
            ));
        }
    }
    warnings
}

/// Why the pool will not hand the claim the address it asks for, as its spec says, if it will not (a pool whose spec
/// does not parse says so: its claims wait with `PoolNotReady`). Its IPAddresses are not listed: a burst of claims
/// (a restore, a move) would list them all once per claim (helper-121 F8); the claim's condition says it if another
/// claim holds the address.
fn requested_finding(pool: &Pool, asking: &ClaimAsking<'_>) -> Option<String> {
    let judged = match &pool.spec {
        PoolSpec::Prefix(spec) => PrefixPoolConfig::new(&spec.to_ipam())
            .map(|config| requested_prefix_finding(&config, asking))
            .map_err(|e| e.to_string()),
        PoolSpec::Ip(spec) => IpPoolConfig::new(&spec.to_ipam()).map_err(|e| e.to_string()).map(|config| {
            let pins = spec.pre_allocations.as_ref();
            requested_ip_finding(&config, pool.kind.is_global(), pins.unwrap_or(&Default::default()), asking)
        }),
    };
    judged.unwrap_or_else(|e| Some(format!("cannot be judged: the pool's spec is invalid ({e})")))
}
