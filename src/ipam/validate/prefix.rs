//! Validating a prefix pool's spec.

use std::net::IpAddr;

use super::{
    Allocation, CidrError, Family, FieldError, PrefixPoolConfig, PrefixPoolSpec, effective_allocation_length,
    parse_cidr, parse_entry, parse_ip, quote, quote_list, too_large,
};

/// Validates a prefix pool spec (reference §2.6), after defaulting.
pub fn validate_prefix_pool(spec: &PrefixPoolSpec) -> Vec<FieldError> {
    let lists = [("spec.prefixes", spec.prefixes.as_slice()), ("spec.excludedPrefixes", &spec.excluded_prefixes)];
    let errs = too_large(&lists, 0);
    if !errs.is_empty() {
        return errs;
    }
    let mut errs = Vec::new();
    if spec.prefixes.is_empty() {
        errs.push(FieldError::invalid("spec.prefixes", quote_list(&spec.prefixes), "prefixes is required"));
        return errs;
    }
    let alloc_len = effective_allocation_length(spec.allocation_prefix_length);
    if !(1..=128).contains(&alloc_len) {
        errs.push(FieldError::invalid(
            "spec.allocationPrefixLength",
            alloc_len.to_string(),
            "allocationPrefixLength must be between 1 and 128",
        ));
        return errs;
    }
    for (i, p) in spec.prefixes.iter().enumerate() {
        let field = format!("spec.prefixes[{i}]");
        let cidr = match parse_cidr(p, false) {
            Ok(c) => c,
            Err(CidrError::NotCidr(_) | CidrError::NotAligned(_)) => {
                errs.push(FieldError::invalid(field, quote(p), "provided entry is not a valid IPv6 CIDR"));
                continue;
            }
        };
        if cidr.family == Family::V4 {
            errs.push(FieldError::invalid(field, quote(p), "only IPv6 prefixes are supported"));
            continue;
        }
        if parse_cidr(p, true).is_err() {
            errs.push(FieldError::invalid(field.clone(), quote(p), "CIDR must be network-aligned"));
        }
        if i64::from(cidr.len) > alloc_len {
            errs.push(FieldError::invalid(
                field,
                quote(p),
                format!("CIDR prefix length must be <= allocationPrefixLength ({alloc_len})"),
            ));
        }
    }
    if let Some(g) = spec.gateway.as_deref().filter(|g| !g.is_empty()) {
        match parse_ip(g) {
            Err(e) => errs.push(FieldError::invalid("spec.gateway", quote(g), e)),
            Ok(IpAddr::V4(_)) => {
                errs.push(FieldError::invalid("spec.gateway", quote(g), "provided gateway must be IPv6"))
            }
            Ok(IpAddr::V6(_)) => {}
        }
    }
    for (i, e) in spec.excluded_prefixes.iter().enumerate() {
        let field = format!("spec.excludedPrefixes[{i}]");
        match parse_entry(e) {
            Err(why) => errs.push(FieldError::invalid(
                field,
                quote(e),
                format!("provided entry is not a valid IP, range, nor CIDR: {why}"),
            )),
            Ok(r) if r.family == Family::V4 => {
                errs.push(FieldError::invalid(field, quote(e), "only IPv6 excluded prefixes are supported"))
            }
            Ok(_) => {}
        }
    }
    errs
}

/// The warnings of an accepted prefix pool (reference §2.6, exact texts).
pub fn prefix_pool_warnings(config: &PrefixPoolConfig) -> Vec<String> {
    let mut warnings = Vec::new();
    if config.allocation_length() == 128 {
        warnings.push(
            "spec.allocationPrefixLength=128 behaves like host-address allocation; consider InClusterIPPool for single-address semantics"
                .to_owned(),
        );
        if config.gateway_inside_prefixes() {
            warnings.push(
                "spec.gateway is within spec.prefixes and is not reserved; with /128 allocationPrefixLength it may also be allocated to claims"
                    .to_owned(),
            );
        }
    }
    warnings
}

/// The update guard of prefix pools: the `address` of every allocation (`address`, `prefix`) that is not allocatable
/// under the new config, sorted as strings; `None` when all are.
pub fn prefix_pool_non_allocatable(new: &PrefixPoolConfig, allocations: &[(String, Option<i64>)]) -> Option<String> {
    let mut bad: Vec<&str> = allocations
        .iter()
        .filter(|(address, prefix)| {
            let ok = match (address.parse::<std::net::Ipv6Addr>(), prefix.and_then(|p| u8::try_from(p).ok())) {
                (Ok(a), Some(len)) => Allocation::new(a, len)
                    .is_some_and(|al| new.is_allocatable(std::net::Ipv6Addr::from(al.base), al.len)),
                _ => false,
            };
            !ok
        })
        .map(|(a, _)| a.as_str())
        .collect();
    if bad.is_empty() {
        return None;
    }
    bad.sort_unstable();
    Some(format!("existing allocations become non-allocatable: [{}]", bad.join(" ")))
}
