//! A claim's requested address (docs/compatibility.md D14) judged against its pool, for the warnings admission gives
//! when the claim is created (D17). The allocator decides alone; these findings say in advance what it will say.

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::ipam::address::parse_ip;
use crate::ipam::ip_pool::IpPoolConfig;
use crate::ipam::prefix_pool::PrefixPoolConfig;

/// A claim that asks for `requested`.
#[derive(Clone, Copy, Debug)]
pub struct ClaimAsking<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub requested: &'a str,
}

/// Whether the key `key` of a pool's `spec.preAllocations` names the claim `namespace/name`: a global pool's keys are
/// `<namespace>/<name>` or a bare name (a claim of that name in any namespace); a namespaced pool's are names.
pub fn pin_names(global: bool, key: &str, namespace: &str, name: &str) -> bool {
    match key.split_once('/') {
        Some((ns, n)) if global => ns == namespace && n == name,
        _ => key == name,
    }
}

/// The address a pool pins to the claim: its `<namespace>/<name>` key before a bare name, as the allocator reads them.
fn pin_of<'p>(global: bool, pins: &'p BTreeMap<String, String>, claim: &ClaimAsking<'_>) -> Option<&'p str> {
    let named = |exact: bool| {
        pins.iter()
            .find(|(key, _)| key.contains('/') == exact && pin_names(global, key, claim.namespace, claim.name))
            .map(|(_, address)| address.as_str())
    };
    named(true).or_else(|| named(false))
}

/// Why an IP pool will not hand the claim its requested address, if it will not, as its spec says: the address does
/// not parse, the pool pins another to the claim, does not allocate it, or pins it to another claim. `pins` is the
/// pool's `spec.preAllocations`. (Whether another claim's IPAddress holds it would take a list of the pool's
/// IPAddresses on every claim's creation: the claim's condition says that.)
pub fn requested_ip_finding(
    config: &IpPoolConfig,
    global: bool,
    pins: &BTreeMap<String, String>,
    claim: &ClaimAsking<'_>,
) -> Option<String> {
    let Ok(ip) = parse_ip(claim.requested) else { return Some("is not an IP address".to_owned()) };
    if let Some(own) = pin_of(global, pins, claim)
        && parse_ip(own).ok() != Some(ip)
    {
        return Some(format!("differs from {own}, which the pool's spec.preAllocations pins to this claim"));
    }
    if let Err(why) = config.check(ip) {
        return Some(why.describe().to_owned());
    }
    let pinned_to_another = pins
        .iter()
        .find(|(key, address)| {
            parse_ip(address).ok() == Some(ip) && !pin_names(global, key, claim.namespace, claim.name)
        })
        .map(|(key, _)| key);
    pinned_to_another.map(|key| format!("is pinned to another claim by the pool's spec.preAllocations[{key}]"))
}

/// Why a prefix pool will not hand the claim the child prefix starting at its requested address, if it will not.
pub fn requested_prefix_finding(config: &PrefixPoolConfig, claim: &ClaimAsking<'_>) -> Option<String> {
    let base = match parse_ip(claim.requested) {
        Ok(IpAddr::V6(base)) => base,
        _ => return Some("is not an IPv6 address".to_owned()),
    };
    let len = config.allocation_length();
    (!config.allocates_child_at(base))
        .then(|| format!("is not the first address of a /{len} prefix the pool hands out"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipam::ip_pool::IpPoolSpec;
    use crate::ipam::prefix_pool::PrefixPoolSpec;

    fn pool() -> IpPoolConfig {
        IpPoolConfig::new(&IpPoolSpec {
            addresses: vec!["10.0.0.0/24".to_owned()],
            prefix: 24,
            gateway: Some("10.0.0.1".to_owned()),
            excluded_addresses: vec!["10.0.0.200-10.0.0.210".to_owned()],
            ..Default::default()
        })
        .expect("valid")
    }

    fn asking(requested: &str) -> ClaimAsking<'_> {
        ClaimAsking { namespace: "ns", name: "a", requested }
    }

    fn pins(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
        entries.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn an_address_the_pool_hands_out_has_no_finding() {
        assert_eq!(requested_ip_finding(&pool(), false, &pins(&[("a", "10.0.0.5")]), &asking("10.0.0.5")), None);
        assert_eq!(requested_ip_finding(&pool(), false, &BTreeMap::new(), &asking("10.0.0.6")), None);
    }

    #[test]
    fn each_reason_the_pool_will_not_hand_it_out_is_named() {
        let none = BTreeMap::new();
        let find = |pins: &BTreeMap<String, String>, requested: &str| {
            requested_ip_finding(&pool(), true, pins, &asking(requested)).unwrap_or_default()
        };
        assert_eq!(find(&none, "10.0.0.300"), "is not an IP address");
        assert_eq!(find(&none, "10.0.1.5"), "is not in the pool's addresses");
        assert_eq!(find(&none, "10.0.0.205"), "is in the pool's excludedAddresses");
        assert_eq!(find(&none, "10.0.0.1"), "is the pool's gateway");
        assert_eq!(find(&none, "fd00::5"), "is of the other IP family than the pool");
        assert_eq!(
            find(&pins(&[("other/a", "10.0.0.9")]), "10.0.0.9"),
            "is pinned to another claim by the pool's spec.preAllocations[other/a]"
        );
        assert_eq!(
            find(&pins(&[("ns/a", "10.0.0.7"), ("a", "10.0.0.9")]), "10.0.0.9"),
            "differs from 10.0.0.7, which the pool's spec.preAllocations pins to this claim"
        );
    }

    #[test]
    fn keys_name_claims_as_the_allocator_reads_them() {
        assert!(pin_names(true, "ns/a", "ns", "a"));
        assert!(pin_names(true, "a", "elsewhere", "a"));
        assert!(!pin_names(true, "other/a", "ns", "a"));
        assert!(pin_names(false, "a", "ns", "a"));
        assert!(!pin_names(false, "ns/a", "ns", "a"));
    }

    #[test]
    fn a_prefix_pool_hands_out_only_the_first_address_of_a_child() {
        let config = PrefixPoolConfig::new(&PrefixPoolSpec {
            prefixes: vec!["2001:db8::/48".to_owned()],
            allocation_prefix_length: 64,
            ..Default::default()
        })
        .expect("valid");
        let find = |requested: &str| requested_prefix_finding(&config, &asking(requested)).unwrap_or_default();
        assert_eq!(find("2001:db8:0:1::"), "");
        assert_eq!(find("2001:db8:0:1::5"), "is not the first address of a /64 prefix the pool hands out");
        assert_eq!(find("2001:db9::"), "is not the first address of a /64 prefix the pool hands out");
        assert_eq!(find("10.0.0.1"), "is not an IPv6 address");
    }
}
