//! The validation rules of pool specs, with the Go provider's message texts, plus pre-allocations
//! (docs/compatibility.md D14) and the gateway finding of D12 (a warning unless `--reject-gateway-outside-subnet`). The
//! admission webhook only maps these findings onto Kubernetes status causes and warnings.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use super::RangeSet;
use super::address::{CidrError, Family, block, parse_cidr, parse_entry, parse_ip, to_u128};
use super::ip_pool::{IpPoolConfig, IpPoolSpec};
use super::prefix_pool::{Allocation, PrefixPoolConfig, PrefixPoolSpec, effective_allocation_length};

mod claim;
mod prefix;
mod quota;
mod strategy;
mod subnets;
pub use claim::{ClaimAsking, pin_names, requested_ip_finding, requested_prefix_finding};
pub use prefix::{prefix_pool_non_allocatable, prefix_pool_warnings, validate_prefix_pool};
pub use quota::quota_findings;
pub use strategy::allocation_strategy_findings;
pub use subnets::subnet_gateway_findings;

/// How a field is wrong, as in Kubernetes' `field.Error` types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldErrorKind {
    Invalid,
    Required,
    Forbidden,
    TooMany,
}

impl FieldErrorKind {
    /// The Kubernetes `StatusCause.reason` for this kind.
    pub fn reason(self) -> &'static str {
        match self {
            FieldErrorKind::Invalid => "FieldValueInvalid",
            FieldErrorKind::Required => "FieldValueRequired",
            FieldErrorKind::Forbidden => "FieldValueForbidden",
            FieldErrorKind::TooMany => "FieldValueTooMany",
        }
    }
}

/// One finding about one field: its path (`spec.addresses[2]`), the offending value as text, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    pub kind: FieldErrorKind,
    pub field: String,
    /// The value, rendered as Kubernetes renders it (`"10.0.0.1"`, `[]string{"a", "b"}`, `24`); empty for Required.
    pub value: String,
    pub detail: String,
}

impl FieldError {
    pub fn invalid(field: impl Into<String>, value: impl Into<String>, detail: impl Into<String>) -> Self {
        Self { kind: FieldErrorKind::Invalid, field: field.into(), value: value.into(), detail: detail.into() }
    }

    /// A list or map with more than `max` entries (`count` of them).
    pub fn too_many(field: impl Into<String>, count: usize, max: usize) -> Self {
        Self {
            kind: FieldErrorKind::TooMany,
            field: field.into(),
            value: count.to_string(),
            detail: format!("must have at most {max} items"),
        }
    }

    pub fn required(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self { kind: FieldErrorKind::Required, field: field.into(), value: String::new(), detail: detail.into() }
    }
}

impl fmt::Display for FieldError {
    /// The text Kubernetes' `field.Error.Error()` produces.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            FieldErrorKind::Invalid => write!(f, "{}: Invalid value: {}: {}", self.field, self.value, self.detail),
            FieldErrorKind::Required => write!(f, "{}: Required value: {}", self.field, self.detail),
            FieldErrorKind::Forbidden => write!(f, "{}: Forbidden: {}", self.field, self.detail),
            FieldErrorKind::TooMany => write!(f, "{}: Too many: {}: {}", self.field, self.value, self.detail),
        }
    }
}

/// A string value as Kubernetes prints it in a field error.
pub fn quote(s: &str) -> String {
    format!("{s:?}")
}

/// A string list as Kubernetes prints it in a field error.
pub fn quote_list<S: AsRef<str>>(items: &[S]) -> String {
    let inner: Vec<String> = items.iter().map(|s| quote(s.as_ref())).collect();
    format!("[]string{{{}}}", inner.join(", "))
}

/// The most entries a list of a pool spec may hold (addresses, excluded addresses, prefixes, excluded prefixes). The
/// CRD schema says so too (`maxItems`), so the API server refuses a larger pool before any webhook runs; the webhook
/// checks it again, first, because anyone who reaches its port can send a review: the work one review causes is
/// bounded by this, not by the size of what is sent. Ranges and CIDRs keep real pools far below it.
pub const MAX_LIST_ENTRIES: usize = 1024;
/// The most entries of `spec.preAllocations` (claim names pinned to addresses).
pub const MAX_PRE_ALLOCATIONS: usize = 4096;
/// The longest entry: an IPv6 range of two full addresses is 79 characters.
pub const MAX_ENTRY_LENGTH: usize = 128;

/// The size checks, before anything is parsed.
fn too_large<S: AsRef<str>>(lists: &[(&str, &[S])], pre_allocations: usize) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (field, entries) in lists {
        if entries.len() > MAX_LIST_ENTRIES {
            errs.push(FieldError::too_many(*field, entries.len(), MAX_LIST_ENTRIES));
        } else if let Some((i, e)) = entries.iter().enumerate().find(|(_, e)| e.as_ref().len() > MAX_ENTRY_LENGTH) {
            let shown: String = e.as_ref().chars().take(40).collect();
            errs.push(FieldError::invalid(
                format!("{field}[{i}]"),
                quote(&format!("{shown}...")),
                format!("must be at most {MAX_ENTRY_LENGTH} characters"),
            ));
        }
    }
    if pre_allocations > MAX_PRE_ALLOCATIONS {
        errs.push(FieldError::too_many("spec.preAllocations", pre_allocations, MAX_PRE_ALLOCATIONS));
    }
    errs
}

const NOT_AN_ADDRESS: &str = "provided address is not a valid IP, range, nor CIDR";
const MIXED_FAMILIES: &str = "provided addresses are of mixed IP families";

/// What the IP pool validation needs beyond the allocator's spec.
#[derive(Clone, Debug, Default)]
pub struct IpPoolExtras<'a> {
    pub address_reuse_grace_period_seconds: Option<i64>,
    /// `spec.preAllocations`: claim name → address (docs/compatibility.md D14).
    pub pre_allocations: Option<&'a BTreeMap<String, String>>,
}

/// Validates an IP pool spec: the Go provider's rules and texts in their order (reference §2.3), then D14. Whatever
/// it admits, the Go provider admits too (checked against its own code by tests/differential.rs).
pub fn validate_ip_pool(spec: &IpPoolSpec, extras: &IpPoolExtras<'_>) -> Vec<FieldError> {
    let lists = [("spec.addresses", spec.addresses.as_slice()), ("spec.excludedAddresses", &spec.excluded_addresses)];
    let errs = too_large(&lists, extras.pre_allocations.map_or(0, BTreeMap::len));
    if !errs.is_empty() {
        return errs;
    }
    let mut errs = Vec::new();
    if spec.addresses.is_empty() {
        errs.push(FieldError::invalid("spec.addresses", quote_list(&spec.addresses), "addresses is required"));
    }
    if spec.prefix < 0 {
        errs.push(FieldError::invalid("spec.prefix", spec.prefix.to_string(), "a valid prefix is required"));
    }
    let addresses = parse_entries("spec.addresses", &spec.addresses, &mut errs);
    let family = single_family(&addresses);
    if family.is_err() {
        errs.push(FieldError::invalid("spec.addresses", quote_list(&spec.addresses), MIXED_FAMILIES));
    }
    if let Some(g) = spec.gateway.as_deref().filter(|g| !g.is_empty()) {
        match parse_ip(g) {
            Err(e) => errs.push(FieldError::invalid("spec.gateway", quote(g), e)),
            Ok(ip) => {
                if addresses.iter().any(|(_, r)| r.family != Family::of(&ip)) {
                    errs.push(FieldError::invalid(
                        "spec.gateway",
                        quote(g),
                        "provided gateway and addresses are of mixed IP families",
                    ));
                }
            }
        }
    }
    let excluded = parse_entries("spec.excludedAddresses", &spec.excluded_addresses, &mut errs);
    if single_family(&excluded).is_err() {
        errs.push(FieldError::invalid("spec.excludedAddresses", quote_list(&spec.excluded_addresses), MIXED_FAMILIES));
    }
    // As the Go provider checks it: any family of the addresses against any other family of the exclusions, so mixed
    // addresses are named here too.
    let has = |entries: &[(usize, super::address::AddressRange)], f: Family| entries.iter().any(|(_, r)| r.family == f);
    if (has(&addresses, Family::V4) && has(&excluded, Family::V6))
        || (has(&addresses, Family::V6) && has(&excluded, Family::V4))
    {
        errs.push(FieldError::invalid(
            "spec.excludedAddresses",
            quote_list(&spec.excluded_addresses),
            "addresses and excluded addresses are of mixed IP families",
        ));
    }
    if let Some(grace) = extras.address_reuse_grace_period_seconds.filter(|g| *g < 0) {
        errs.push(FieldError::invalid(
            "spec.addressReuseGracePeriodSeconds",
            grace.to_string(),
            "addressReuseGracePeriodSeconds must not be negative",
        ));
    }
    if !errs.is_empty() {
        return errs;
    }
    let Ok(Some(family)) = family else { return errs };

    // The subnet is keyed on the numerically lowest address and spec.prefix.
    let lowest = addresses.iter().map(|(_, r)| r.start).min().unwrap_or_default();
    let Some(prefix) = u8::try_from(spec.prefix).ok().filter(|p| *p <= family.bits()) else {
        errs.push(FieldError::invalid("spec.prefix", spec.prefix.to_string(), "provided prefix is not valid"));
        return errs;
    };
    errs.extend(outside_subnet("spec.addresses", &spec.addresses, &addresses, block(family, lowest, prefix)));
    if !errs.is_empty() {
        return errs;
    }
    // docs/compatibility.md D19; nothing for a pool without subnets, which the Go provider's rules alone judge.
    errs.extend(subnets::validate_subnets(spec, family));
    if !errs.is_empty() {
        return errs;
    }
    if let Some(pre) = extras.pre_allocations {
        match IpPoolConfig::new(spec) {
            Ok(config) => validate_pre_allocations(&config, pre, &mut errs),
            Err(e) => errs.push(FieldError::invalid("spec", "", e.to_string())),
        }
    }
    errs
}

/// The entries of `field` (parsed as `parsed`) outside the subnet `block` of the lowest of them: the Go provider's
/// "different subnet" rule.
fn outside_subnet(
    field: &str,
    texts: &[String],
    parsed: &[(usize, super::address::AddressRange)],
    (net_start, net_end): (u128, u128),
) -> Vec<FieldError> {
    parsed
        .iter()
        .filter(|(_, r)| r.start < net_start || r.end > net_end)
        .map(|(i, _)| {
            FieldError::invalid(
                format!("{field}[{i}]"),
                quote(&texts[*i]),
                "provided address belongs to a different subnet than others",
            )
        })
        .collect()
}

/// A gateway that cannot be the gateway of the pool's hosts (docs/compatibility.md D12): the unspecified address
/// (`0.0.0.0`, `::`; charts write it for "no gateway"), or an IPv4 gateway outside the pool's subnet
/// `<lowest address>/<prefix>` (IPv6 gateways are often link-local, so only the unspecified one is flagged). The Go
/// provider admits both and copies the gateway to every IPAddress; so do we, with this as a warning. `None` for a
/// spec [`validate_ip_pool`] refuses.
pub fn ip_pool_gateway_finding(spec: &IpPoolSpec) -> Option<FieldError> {
    subnet_finding("spec.gateway", spec.gateway.as_deref()?, &spec.addresses, spec.prefix)
}

/// The finding of D12 about one subnet's gateway (the top-level one or an entry of `spec.subnets`).
fn subnet_finding(field: &str, gateway: &str, addresses: &[String], prefix: i64) -> Option<FieldError> {
    if gateway.is_empty() {
        return None;
    }
    let ip = parse_ip(gateway).ok()?;
    if ip.is_unspecified() {
        return Some(FieldError::invalid(
            field,
            quote(gateway),
            "is the unspecified address; every IPAddress of the pool carries it as its gateway",
        ));
    }
    let family = Family::of(&ip);
    let lowest = addresses.iter().filter_map(|a| parse_entry(a).ok()).map(|r| r.start).min()?;
    let prefix = u8::try_from(prefix).ok().filter(|p| *p <= family.bits())?;
    let (net_start, net_end) = block(family, lowest, prefix);
    (family == Family::V4 && !(net_start..=net_end).contains(&to_u128(ip))).then(|| {
        FieldError::invalid(
            field,
            quote(gateway),
            format!("is not in the pool's subnet {}/{prefix}", family.addr(net_start)),
        )
    })
}

fn validate_pre_allocations(config: &IpPoolConfig, pre: &BTreeMap<String, String>, errs: &mut Vec<FieldError>) {
    let mut owners: BTreeMap<IpAddr, &str> = BTreeMap::new();
    for (claim, address) in pre {
        let field = format!("spec.preAllocations[{claim}]");
        let ip = match parse_ip(address) {
            Ok(ip) => ip,
            Err(_) => {
                errs.push(FieldError::invalid(field, quote(address), "pre-allocated address is not a valid IP"));
                continue;
            }
        };
        if let Err(reason) = config.check(ip) {
            errs.push(FieldError::invalid(
                field,
                quote(address),
                format!("pre-allocated address {ip} {}", reason.describe()),
            ));
            continue;
        }
        if let Some(other) = owners.insert(ip, claim) {
            errs.push(FieldError::invalid(
                field,
                quote(address),
                format!("address {ip} is pre-allocated to both {other:?} and {claim:?}"),
            ));
        }
    }
}

/// An IPAddress of a pool as the pin check reads it: its namespace, the claim it names, its address.
#[derive(Clone, Debug)]
pub struct InUse<'a> {
    pub namespace: &'a str,
    pub claim: &'a str,
    pub address: &'a str,
}

/// The pins of `spec.preAllocations` that are new or changed since `old` and whose address an IPAddress of another
/// claim holds (docs/compatibility.md D14): admitted, the pinned claim would wait until that IPAddress goes. A key of
/// a global pool names `<namespace>/<name>`, or a bare name in any namespace; a namespaced pool's names a claim of
/// its namespace.
pub fn pins_in_use(
    global: bool,
    new: &BTreeMap<String, String>,
    old: Option<&BTreeMap<String, String>>,
    in_use: &[InUse<'_>],
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (claim, address) in new {
        if old.is_some_and(|o| o.get(claim) == Some(address)) {
            continue;
        }
        let Ok(ip) = parse_ip(address) else { continue };
        let theirs = in_use
            .iter()
            .find(|a| parse_ip(a.address).ok() == Some(ip) && !pin_names(global, claim, a.namespace, a.claim));
        if let Some(other) = theirs {
            errs.push(FieldError::invalid(
                format!("spec.preAllocations[{claim}]"),
                quote(address),
                format!("address {ip} is in use by IPAddress {}/{}", other.namespace, other.claim),
            ));
        }
    }
    errs
}

/// Warnings about `spec.preAllocations` a pool is admitted with: a bare claim name in a global pool pins a claim of
/// that name in any namespace (the first to come holds the address).
pub fn pin_warnings(global: bool, pins: Option<&BTreeMap<String, String>>) -> Vec<String> {
    if !global {
        return Vec::new();
    }
    pins.into_iter()
        .flatten()
        .filter(|(claim, _)| !claim.contains('/'))
        .map(|(claim, _)| {
            format!(
                "spec.preAllocations[{claim}]: a bare claim name in a global pool pins a claim of that name in any \
                 namespace; write <namespace>/{claim} to pin one"
            )
        })
        .collect()
}

fn parse_entries<S: AsRef<str>>(
    field: &str,
    entries: &[S],
    errs: &mut Vec<FieldError>,
) -> Vec<(usize, super::address::AddressRange)> {
    let mut out = Vec::with_capacity(entries.len());
    for (i, e) in entries.iter().enumerate() {
        match parse_entry(e.as_ref()) {
            Ok(r) => out.push((i, r)),
            Err(why) => errs.push(FieldError::invalid(
                format!("{field}[{i}]"),
                quote(e.as_ref()),
                format!("{NOT_AN_ADDRESS}: {why}"),
            )),
        }
    }
    out
}

fn single_family(entries: &[(usize, super::address::AddressRange)]) -> Result<Option<Family>, ()> {
    let mut family = None;
    for (_, r) in entries {
        match family {
            None => family = Some(r.family),
            Some(f) if f != r.family => return Err(()),
            Some(_) => {}
        }
    }
    Ok(family)
}

/// The update guard of IP pools: allocated addresses the new spec can no longer hand out. `None` when all are still
/// allocatable; otherwise the Go provider's message (`pool addresses do not contain allocated addresses: [a-b ...]`).
pub fn ip_pool_stranded_addresses<S: AsRef<str>>(new: &IpPoolConfig, allocated: &[S]) -> Option<String> {
    let parsed: Vec<IpAddr> = allocated.iter().filter_map(|a| parse_ip(a.as_ref()).ok()).collect();
    // One merged set per family, IPv4 first, as the Go provider prints its set; addresses of the other family can
    // never be handed out by the new pool.
    let mut ranges = Vec::new();
    for family in [Family::V4, Family::V6] {
        let in_use = RangeSet::from_ranges(
            parsed.iter().filter(|ip| Family::of(ip) == family).map(|ip| (to_u128(*ip), to_u128(*ip))),
        );
        let stranded = if family == new.family() { in_use.difference(new.allocatable()) } else { in_use };
        ranges.extend(stranded.iter().map(|(s, e)| format!("{}-{}", family.addr(s), family.addr(e))));
    }
    if ranges.is_empty() {
        return None;
    }
    Some(format!("pool addresses do not contain allocated addresses: [{}]", ranges.join(" ")))
}

/// The first address range two sets share, for the overlap warning of D12.
pub fn first_overlap(family: Family, a: &RangeSet, b: &RangeSet) -> Option<String> {
    let (s, e) = a.intersection(b).iter().next()?;
    Some(if s == e { family.addr(s).to_string() } else { format!("{}-{}", family.addr(s), family.addr(e)) })
}
