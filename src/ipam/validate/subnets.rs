//! The rules of `spec.subnets[]` (docs/compatibility.md D19): each entry by the rules of the top-level fields, with
//! messages that name `spec.subnets[i].…`, then what holds between subnets (one family, no shared address, the same
//! network or disjoint ones), which [`IpPoolConfig::new`] decides for the allocator and the webhook alike.

use super::{
    FieldError, MIXED_FAMILIES, outside_subnet, parse_entries, quote, quote_list, single_family, subnet_finding,
    too_large,
};
use crate::ipam::address::{Family, block, parse_ip};
use crate::ipam::ip_pool::{IpPoolConfig, IpPoolSpec, IpSubnetSpec, MAX_SUBNETS};

/// The findings about `spec.subnets`, for a spec whose top-level fields are valid and of `family`.
pub(super) fn validate_subnets(spec: &IpPoolSpec, family: Family) -> Vec<FieldError> {
    if spec.subnets.is_empty() {
        return Vec::new();
    }
    if spec.subnets.len() > MAX_SUBNETS {
        return vec![FieldError::too_many("spec.subnets", spec.subnets.len(), MAX_SUBNETS)];
    }
    let mut errs = Vec::new();
    for (i, subnet) in spec.subnets.iter().enumerate() {
        let path = format!("spec.subnets[{i}]");
        let (addresses_field, excluded_field) = (format!("{path}.addresses"), format!("{path}.excludedAddresses"));
        let lists =
            [(addresses_field.as_str(), subnet.addresses.as_slice()), (&excluded_field, &subnet.excluded_addresses)];
        let too_large = too_large(&lists, 0);
        if !too_large.is_empty() {
            errs.extend(too_large);
            continue;
        }
        if subnet.addresses.is_empty() {
            errs.push(FieldError::invalid(&addresses_field, quote_list(&subnet.addresses), "addresses is required"));
        }
        let before = errs.len();
        let addresses = parse_entries(&addresses_field, &subnet.addresses, &mut errs);
        let own = single_family(&addresses);
        match own {
            Err(()) => errs.push(FieldError::invalid(&addresses_field, quote_list(&subnet.addresses), MIXED_FAMILIES)),
            Ok(Some(own)) if own != family => errs.push(FieldError::invalid(
                &addresses_field,
                quote_list(&subnet.addresses),
                "is of the other IP family than spec.addresses",
            )),
            Ok(_) => {}
        }
        let excluded = parse_entries(&excluded_field, &subnet.excluded_addresses, &mut errs);
        if excluded.iter().any(|(_, r)| r.family != family) {
            errs.push(FieldError::invalid(
                &excluded_field,
                quote_list(&subnet.excluded_addresses),
                "addresses and excluded addresses are of mixed IP families",
            ));
        }
        if let Some(g) = subnet.gateway.as_deref().filter(|g| !g.is_empty()) {
            match parse_ip(g) {
                Err(e) => errs.push(FieldError::invalid(format!("{path}.gateway"), quote(g), e)),
                Ok(ip) if Family::of(&ip) != family => errs.push(FieldError::invalid(
                    format!("{path}.gateway"),
                    quote(g),
                    "provided gateway and addresses are of mixed IP families",
                )),
                Ok(_) => {}
            }
        }
        // Judged by the entry's own family: an IPv6 entry of an IPv4 pool is told of its family, not of its prefix.
        let bits = own.ok().flatten().unwrap_or(family).bits();
        let Some(prefix) = u8::try_from(subnet.prefix).ok().filter(|p| *p <= bits) else {
            errs.push(FieldError::invalid(
                format!("{path}.prefix"),
                subnet.prefix.to_string(),
                "provided prefix is not valid",
            ));
            continue;
        };
        if errs.len() > before {
            continue;
        }
        let lowest = addresses.iter().map(|(_, r)| r.start).min().unwrap_or_default();
        errs.extend(outside_subnet(&addresses_field, &subnet.addresses, &addresses, block(family, lowest, prefix)));
    }
    if !errs.is_empty() {
        return errs;
    }
    if let Err(e) = IpPoolConfig::new(spec) {
        errs.push(FieldError::invalid(&e.field, value_of(spec, &e.field), e.detail));
    }
    errs
}

/// The value of a field [`IpPoolConfig::new`] names, as Kubernetes prints it.
fn value_of(spec: &IpPoolSpec, field: &str) -> String {
    let entry = field
        .strip_prefix("spec.subnets[")
        .and_then(|rest| rest.split_once(']'))
        .and_then(|(i, rest)| Some((spec.subnets.get(i.parse::<usize>().ok()?)?, rest)));
    match entry {
        Some((subnet, ".addresses")) => quote_list(&subnet.addresses),
        Some((subnet, ".prefix")) => subnet.prefix.to_string(),
        _ => String::new(),
    }
}

/// The gateway findings of D12 for each entry of `spec.subnets` (the top-level one is
/// [`super::ip_pool_gateway_finding`]'s) that is not in `before` as it is now: an entry admitted before stays
/// admissible, wherever an edit moves it.
pub fn subnet_gateway_findings(spec: &IpPoolSpec, before: &[IpSubnetSpec]) -> Vec<FieldError> {
    spec.subnets
        .iter()
        .enumerate()
        .filter(|(_, s)| !before.contains(s))
        .filter_map(|(i, s)| {
            subnet_finding(&format!("spec.subnets[{i}].gateway"), s.gateway.as_deref()?, &s.addresses, s.prefix)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::{IpPoolExtras, validate_ip_pool};
    use super::*;
    use crate::ipam::ip_pool::{IpPoolAllocator, NotAllocatable};

    fn subnet(addresses: &[&str], prefix: i64, gateway: Option<&str>) -> IpSubnetSpec {
        IpSubnetSpec {
            addresses: addresses.iter().map(|a| (*a).to_owned()).collect(),
            prefix,
            gateway: gateway.map(str::to_owned),
            excluded_addresses: Vec::new(),
        }
    }

    /// 10.0.0.10-10.0.0.11/24 via 10.0.0.1, then `subnets`.
    fn pool(subnets: Vec<IpSubnetSpec>) -> IpPoolSpec {
        IpPoolSpec {
            addresses: vec!["10.0.0.10-10.0.0.11".into()],
            prefix: 24,
            gateway: Some("10.0.0.1".into()),
            subnets,
            ..Default::default()
        }
    }

    fn texts(spec: &IpPoolSpec) -> Vec<String> {
        validate_ip_pool(spec, &IpPoolExtras::default()).iter().map(ToString::to_string).collect()
    }

    #[test]
    fn the_next_subnet_is_used_once_the_ones_before_it_are_full_and_freed_addresses_go_back_first() {
        // The second subnet is numerically lower: the order written decides, not the addresses.
        let spec = pool(vec![subnet(&["10.0.2.10-10.0.2.11"], 25, Some("10.0.2.1")), subnet(&["9.0.0.5"], 32, None)]);
        let config = IpPoolConfig::new(&spec).expect("valid");
        assert_eq!(config.subnet_count(), 3);
        assert_eq!(config.total(), 5);
        let mut pool = IpPoolAllocator::new(config);
        let order: Vec<String> = (0..5).map(|_| pool.allocate().expect("free").to_string()).collect();
        assert_eq!(order, ["10.0.0.10", "10.0.0.11", "10.0.2.10", "10.0.2.11", "9.0.0.5"]);
        assert!(pool.is_exhausted());
        pool.release(Some("10.0.2.11".parse().unwrap()));
        pool.release(Some("10.0.0.10".parse().unwrap()));
        assert_eq!(pool.allocate().map(|ip| ip.to_string()), Ok("10.0.0.10".to_owned()));
        assert_eq!(pool.allocate().map(|ip| ip.to_string()), Ok("10.0.2.11".to_owned()));
        let of = |ip: &str| pool.config().subnet_of(ip.parse().unwrap());
        assert_eq!(
            (of("10.0.0.11"), of("10.0.2.10"), of("9.0.0.5"), of("10.0.1.1")),
            (Some(0), Some(1), Some(2), None)
        );
        assert_eq!(pool.config().subnet_prefix(1), Some(25));
    }

    #[test]
    fn every_gateway_is_kept_out_of_every_subnet_and_a_subnets_exclusions_stay_its_own() {
        // Subnet 1's gateway is in the top-level addresses; subnet 1 excludes an address the top-level one also has
        // (impossible: addresses are never shared), so its exclusion of .0.12 stays outside the top-level subnet.
        let mut other = subnet(&["10.0.1.0/28"], 28, Some("10.0.0.11"));
        other.excluded_addresses = vec!["10.0.1.5".into(), "10.0.0.10".into()];
        let mut spec = pool(vec![other]);
        spec.excluded_addresses = vec!["10.0.1.6".into()];
        let config = IpPoolConfig::new(&spec).expect("valid");
        let why = |ip: &str| config.check(ip.parse().unwrap()).err();
        assert_eq!(why("10.0.0.10"), None, "a subnet's exclusion is its own");
        assert_eq!(why("10.0.0.11"), Some(NotAllocatable::Gateway));
        assert_eq!(why("10.0.1.5"), Some(NotAllocatable::Excluded));
        assert_eq!(why("10.0.1.6"), Some(NotAllocatable::Excluded), "the pool's exclusions reach every subnet");
        assert_eq!(why("10.0.1.0"), Some(NotAllocatable::NetworkAddress));
        assert_eq!(why("10.0.1.15"), Some(NotAllocatable::BroadcastAddress));
        assert_eq!(why("10.0.1.7"), None);
        assert_eq!(why("10.0.1.16"), Some(NotAllocatable::OutsidePool));
        // 10.0.0.10 + 10.0.1.1-14 less .5 and .6.
        assert_eq!(config.total(), 1 + 12);
    }

    #[test]
    fn subnets_sharing_an_address_or_half_a_network_or_a_family_are_refused_naming_the_entry() {
        let err = |spec: IpPoolSpec| IpPoolConfig::new(&spec).expect_err("refused").to_string();
        assert_eq!(
            err(pool(vec![subnet(&["10.0.0.11-10.0.0.12"], 24, None)])),
            "spec.subnets[0].addresses: address 10.0.0.11 is in spec.addresses too"
        );
        assert_eq!(
            err(pool(vec![subnet(&["10.0.1.1"], 24, None), subnet(&["10.0.1.0/30"], 24, None)])),
            "spec.subnets[1].addresses: address 10.0.1.1 is in spec.subnets[0] too"
        );
        assert_eq!(
            err(pool(vec![subnet(&["10.0.0.128/26"], 26, None)])),
            "spec.subnets[0].prefix: subnet 10.0.0.128/26 overlaps subnet 10.0.0.0/24 of spec.addresses: subnets \
             must be the same network or disjoint ones"
        );
        assert_eq!(
            err(pool(vec![subnet(&["fd00::1"], 64, None)])),
            "spec.subnets[0].addresses: every subnet of a pool is of the pool's IP family"
        );
        // The same base is not the same network when the prefix differs.
        assert_eq!(
            err(pool(vec![subnet(&["10.0.0.100-10.0.0.110"], 25, None)])),
            "spec.subnets[0].prefix: subnet 10.0.0.0/25 overlaps subnet 10.0.0.0/24 of spec.addresses: subnets \
             must be the same network or disjoint ones"
        );
        // The same network split in two is one network.
        IpPoolConfig::new(&pool(vec![subnet(&["10.0.0.100-10.0.0.110"], 24, Some("10.0.0.1"))])).expect("valid");
    }

    #[test]
    fn the_webhook_names_the_entry_and_the_value_of_each_finding() {
        let mut bad = subnet(&["10.0.1.1", "nonsense"], 24, Some("10.0.1"));
        bad.excluded_addresses = vec!["fd00::1".into()];
        let spec = pool(vec![subnet(&["10.0.2.0/24"], 24, None), bad, subnet(&["10.0.3.1"], 33, None)]);
        assert_eq!(
            texts(&spec),
            [
                "spec.subnets[1].addresses[1]: Invalid value: \"nonsense\": provided address is not a valid IP, range, \
                 nor CIDR: \"nonsense\" is not an IP address",
                "spec.subnets[1].excludedAddresses: Invalid value: []string{\"fd00::1\"}: addresses and excluded \
                 addresses are of mixed IP families",
                "spec.subnets[1].gateway: Invalid value: \"10.0.1\": ParseAddr(\"10.0.1\"): unable to parse IP",
                "spec.subnets[2].prefix: Invalid value: 33: provided prefix is not valid",
            ]
        );
        assert_eq!(
            texts(&pool(vec![subnet(&["10.0.1.1", "10.0.2.1"], 24, None)])),
            ["spec.subnets[0].addresses[1]: Invalid value: \"10.0.2.1\": provided address belongs to a different \
              subnet than others"]
        );
        assert_eq!(
            texts(&pool(vec![subnet(&["10.0.0.0/24"], 24, None)])),
            ["spec.subnets[0].addresses: Invalid value: []string{\"10.0.0.0/24\"}: address 10.0.0.10 is in \
              spec.addresses too"]
        );
        assert_eq!(
            texts(&pool(vec![subnet(&["fd00::/64"], 64, None)])),
            ["spec.subnets[0].addresses: Invalid value: []string{\"fd00::/64\"}: is of the other IP family than \
              spec.addresses"]
        );
        let many = pool((0..=MAX_SUBNETS).map(|i| subnet(&[&format!("10.1.{i}.1")], 24, None)).collect());
        assert_eq!(texts(&many), ["spec.subnets: Too many: 33: must have at most 32 items"]);
        assert_eq!(texts(&pool(vec![subnet(&["10.0.1.1"], 24, Some("10.0.1.254"))])), Vec::<String>::new());
        // A pool without subnets is judged by the Go provider's rules alone.
        assert_eq!(texts(&pool(Vec::new())), Vec::<String>::new());
    }

    #[test]
    fn a_subnets_gateway_outside_its_network_is_a_warning_naming_it() {
        let spec =
            pool(vec![subnet(&["10.0.1.1"], 24, Some("10.0.1.254")), subnet(&["10.0.2.1"], 24, Some("10.0.9.1"))]);
        let findings: Vec<String> = subnet_gateway_findings(&spec, &[]).iter().map(ToString::to_string).collect();
        assert_eq!(
            findings,
            ["spec.subnets[1].gateway: Invalid value: \"10.0.9.1\": is not in the pool's subnet 10.0.2.0/24"]
        );
        // Admitted before (here as the first entry), it is not judged again when the edit moves it.
        let mut moved = spec.clone();
        moved.subnets.reverse();
        assert_eq!(subnet_gateway_findings(&moved, &spec.subnets[1..]), Vec::new());
    }
}
