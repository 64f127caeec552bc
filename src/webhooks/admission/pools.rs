//! Validating a pool's spec on create and update: the allocator's own parsing, and overlaps with the other pools.

use serde_json::Value;

use super::{AdmissionContext, Outcome, Request, bad_request, deny_spec, internal, invalid, parse_spec};
use crate::api::PoolKind;
use crate::api::v1alpha2::{IPPoolSpec, PrefixPoolSpec};
use crate::ipam::address::Family;
use crate::ipam::prefix_pool::effective_allocation_length;
use crate::ipam::validate::{
    FieldError, InUse, IpPoolExtras, allocation_strategy_findings, first_overlap, ip_pool_gateway_finding,
    ip_pool_stranded_addresses, pin_warnings, pins_in_use, prefix_pool_non_allocatable, prefix_pool_warnings,
    quota_findings, quote_list, subnet_gateway_findings, validate_ip_pool, validate_prefix_pool,
};
use crate::ipam::{IpPoolConfig, PrefixPoolConfig};

pub(super) async fn validate_ip(
    ctx: &AdmissionContext,
    kind: PoolKind,
    request: &Request,
    namespace: Option<&str>,
    update: bool,
) -> Outcome {
    let new: IPPoolSpec = match parse_spec(request.object.as_ref()) {
        Ok(s) => s,
        Err(e) => return Outcome::deny(invalid(kind.kind(), &request.name, &[e])),
    };
    let old: Option<IPPoolSpec> = if update { parse_spec(request.old_object.as_ref()).ok() } else { None };
    let extras = IpPoolExtras {
        address_reuse_grace_period_seconds: new.address_reuse_grace_period_seconds.map(i64::from),
        pre_allocations: new.pre_allocations.as_ref(),
    };
    let ipam_spec = new.to_ipam();
    let old_ipam_spec = old.as_ref().map(IPPoolSpec::to_ipam);
    let errs = validate_ip_pool(&ipam_spec, &extras);
    if !errs.is_empty() {
        return Outcome::deny(invalid(kind.kind(), &request.name, &errs));
    }
    // On create, and on update when the gateway (or a subnet) is new or changed: a pool admitted before stays
    // admissible.
    let mut gateway_findings: Vec<FieldError> = ip_pool_gateway_finding(&ipam_spec)
        .filter(|_| old.as_ref().is_none_or(|o| o.gateway != new.gateway))
        .into_iter()
        .collect();
    let before = old_ipam_spec.as_ref().map_or(&[][..], |o| o.subnets.as_slice());
    gateway_findings.extend(subnet_gateway_findings(&ipam_spec, before));
    if let Some(finding) = gateway_findings.first()
        && ctx.reject_gateway_outside_subnet
    {
        let refused = FieldError {
            detail: format!("{}, and --reject-gateway-outside-subnet is set", finding.detail),
            ..finding.clone()
        };
        return Outcome::deny(invalid(kind.kind(), &request.name, &[refused]));
    }
    let config = match IpPoolConfig::new(&ipam_spec) {
        Ok(c) => c,
        Err(e) => return deny_spec(kind, &request.name, e),
    };
    let changed = old_ipam_spec.as_ref() != Some(&ipam_spec);
    // On create and spec changes only: a pool admitted before (by a release without the rule, while a rollout had the
    // new CRD) keeps its finalizer and annotations writable.
    let strategy_errs = allocation_strategy_findings(&config, old_ipam_spec.as_ref().map(|o| o.allocation_strategy));
    if (!update || changed) && !strategy_errs.is_empty() {
        return Outcome::deny(invalid(kind.kind(), &request.name, &strategy_errs));
    }
    // On create and quota changes only, as the strategy's rules.
    let quota = new.quota.as_ref();
    if old.as_ref().is_none_or(|o| o.quota.as_ref() != quota)
        && let Some(quota) = quota
    {
        let errs = quota_findings(quota.per_cluster, quota.clusters.as_ref(), namespace.filter(|_| !kind.is_global()));
        if !errs.is_empty() {
            return Outcome::deny(invalid(kind.kind(), &request.name, &errs));
        }
    }
    let old_pins = old.as_ref().and_then(|o| o.pre_allocations.as_ref());
    let pins_changed = new.pre_allocations.as_ref().is_some_and(|pins| Some(pins) != old_pins);
    // Only a spec change can strand an allocated address: an update of the metadata alone (our finalizer, the
    // moved-away annotation) is never refused for addresses stranded before it. A pin, new or changed, must not name
    // an address another claim's IPAddress holds (D14). A new pool's IPAddresses are restored ones.
    if (update && changed) || pins_changed {
        match ctx.reads.pool_addresses(kind, &request.name, namespace).await {
            Ok(addresses) => {
                let allocated: Vec<&str> = addresses.iter().map(|a| a.spec.address.as_str()).collect();
                if update
                    && changed
                    && let Some(message) = ip_pool_stranded_addresses(&config, &allocated)
                {
                    return Outcome::deny(bad_request(kind.kind(), &request.name, "spec.addresses", &message));
                }
                let in_use: Vec<InUse<'_>> = addresses
                    .iter()
                    .map(|a| InUse { namespace: &a.namespace, claim: &a.spec.claim_ref.name, address: &a.spec.address })
                    .collect();
                let pins = new.pre_allocations.as_ref().map(|p| pins_in_use(kind.is_global(), p, old_pins, &in_use));
                if let Some(errs) = pins.filter(|e| !e.is_empty()) {
                    return Outcome::deny(invalid(kind.kind(), &request.name, &errs));
                }
            }
            Err(e) => return Outcome::deny(internal(&format!("listing the IPAddresses of the pool: {e}"))),
        }
    }
    let mut outcome = Outcome::allow();
    outcome.warnings.extend(pin_warnings(kind.is_global(), new.pre_allocations.as_ref()));
    outcome.warnings.extend(gateway_findings.iter().map(|f| {
        format!(
            "{}: {} {} (admitted as the Go provider admits it; --reject-gateway-outside-subnet refuses it)",
            f.field, f.value, f.detail
        )
    }));
    if changed {
        let overlaps = match ip_pool_overlaps(ctx, kind, &request.name, namespace, &config).await {
            Ok(o) => o,
            Err(e) => return Outcome::deny(internal(&format!("listing the other pools: {e}"))),
        };
        if let Some(denied) = overlap_outcome(ctx, kind, &request.name, "spec.addresses", &new.addresses, &overlaps) {
            return denied;
        }
        outcome.warnings.extend(overlaps.iter().map(|(other, range)| overlap_warning(kind, "addresses", other, range)));
    }
    outcome
}

/// The overlap warning of D12, naming the other pool.
pub(super) fn overlap_warning(kind: PoolKind, field: &str, other: &str, range: &str) -> String {
    format!("spec.{field} overlaps {kind} {other:?} ({range}): the two pools can hand out the same addresses")
}

/// Rejects the overlaps with `--reject-overlapping-pools`; `None` when the request may go on (with warnings).
pub(super) fn overlap_outcome(
    ctx: &AdmissionContext,
    kind: PoolKind,
    name: &str,
    field: &str,
    value: &[String],
    overlaps: &[(String, String)],
) -> Option<Outcome> {
    if !ctx.reject_overlapping_pools || overlaps.is_empty() {
        return None;
    }
    let errs: Vec<FieldError> = overlaps
        .iter()
        .map(|(other, range)| {
            FieldError::invalid(
                field,
                quote_list(value),
                format!("overlaps {kind} {other:?} ({range}), and --reject-overlapping-pools is set"),
            )
        })
        .collect();
    Some(Outcome::deny(invalid(kind.kind(), name, &errs)))
}

/// The other pools of the same kind and scope (same namespace, or all global pools), read live, as (name, spec).
pub(super) async fn other_pools(
    ctx: &AdmissionContext,
    kind: PoolKind,
    name: &str,
    namespace: Option<&str>,
) -> Result<Vec<(String, Value)>, kube::Error> {
    let pools = ctx.reads.pools(kind, namespace).await?;
    Ok(pools.into_iter().filter(|(other, _)| other != name).collect())
}

/// The other pools (see [`other_pools`]) whose spec `overlap` finds overlapping, with the first overlapping range.
pub(super) async fn overlaps(
    ctx: &AdmissionContext,
    kind: PoolKind,
    name: &str,
    namespace: Option<&str>,
    overlap: impl Fn(Value) -> Option<String>,
) -> Result<Vec<(String, String)>, kube::Error> {
    let others = other_pools(ctx, kind, name, namespace).await?;
    Ok(others.into_iter().filter_map(|(other, spec)| overlap(spec).map(|range| (other, range))).collect())
}

pub(super) async fn ip_pool_overlaps(
    ctx: &AdmissionContext,
    kind: PoolKind,
    name: &str,
    namespace: Option<&str>,
    config: &IpPoolConfig,
) -> Result<Vec<(String, String)>, kube::Error> {
    overlaps(ctx, kind, name, namespace, |spec| {
        let spec = serde_json::from_value::<IPPoolSpec>(spec).ok()?;
        let other = IpPoolConfig::new(&spec.to_ipam()).ok().filter(|o| o.family() == config.family())?;
        first_overlap(config.family(), config.allocatable(), other.allocatable())
    })
    .await
}

pub(super) async fn validate_prefix(
    ctx: &AdmissionContext,
    kind: PoolKind,
    request: &Request,
    namespace: Option<&str>,
    update: bool,
) -> Outcome {
    let new: PrefixPoolSpec = match parse_spec(request.object.as_ref()) {
        Ok(s) => s,
        Err(e) => return Outcome::deny(invalid(kind.kind(), &request.name, &[e])),
    };
    let errs = validate_prefix_pool(&new.to_ipam());
    if !errs.is_empty() {
        return Outcome::deny(invalid(kind.kind(), &request.name, &errs));
    }
    let config = match PrefixPoolConfig::new(&new.to_ipam()) {
        Ok(c) => c,
        Err(e) => return deny_spec(kind, &request.name, e),
    };
    let old: Option<PrefixPoolSpec> = if update { parse_spec(request.old_object.as_ref()).ok() } else { None };
    if let Some(old) = &old {
        let before = effective_allocation_length(i64::from(old.allocation_prefix_length));
        let after = effective_allocation_length(i64::from(new.allocation_prefix_length));
        if before != after {
            return Outcome::deny(bad_request(
                kind.kind(),
                &request.name,
                "spec.allocationPrefixLength",
                "spec.allocationPrefixLength is immutable",
            ));
        }
        match ctx.reads.pool_addresses(kind, &request.name, namespace).await {
            Ok(addresses) => {
                let allocations: Vec<(String, Option<i64>)> =
                    addresses.into_iter().map(|a| (a.spec.address, a.spec.prefix)).collect();
                if let Some(message) = prefix_pool_non_allocatable(&config, &allocations) {
                    return Outcome::deny(bad_request(kind.kind(), &request.name, "spec.prefixes", &message));
                }
            }
            Err(e) => return Outcome::deny(internal(&format!("listing the IPAddresses of the pool: {e}"))),
        }
    }
    let mut outcome = Outcome::allow();
    outcome.warnings = prefix_pool_warnings(&config);
    if old.as_ref().is_none_or(|o| o.to_ipam() != new.to_ipam()) {
        let overlaps = match prefix_pool_overlaps(ctx, kind, &request.name, namespace, &config).await {
            Ok(o) => o,
            Err(e) => return Outcome::deny(internal(&format!("listing the other pools: {e}"))),
        };
        if let Some(denied) = overlap_outcome(ctx, kind, &request.name, "spec.prefixes", &new.prefixes, &overlaps) {
            return denied;
        }
        outcome.warnings.extend(overlaps.iter().map(|(other, range)| overlap_warning(kind, "prefixes", other, range)));
    }
    outcome
}

pub(super) async fn prefix_pool_overlaps(
    ctx: &AdmissionContext,
    kind: PoolKind,
    name: &str,
    namespace: Option<&str>,
    config: &PrefixPoolConfig,
) -> Result<Vec<(String, String)>, kube::Error> {
    overlaps(ctx, kind, name, namespace, |spec| {
        let spec = serde_json::from_value::<PrefixPoolSpec>(spec).ok()?;
        let other = PrefixPoolConfig::new(&spec.to_ipam()).ok()?;
        first_overlap(Family::V6, config.prefixes(), other.prefixes())
    })
    .await
}
