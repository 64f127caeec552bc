//! The Go provider's test vectors (reference §3.8, §4 and `pool_test.go`), IPv4 and IPv6, plus the edges of both
//! address spaces.
#![allow(clippy::type_complexity)]

use std::net::{IpAddr, Ipv6Addr};

use super::prefix_pool::effective_allocation_length;
use super::validate::*;
use super::*;

mod strategies;

fn ip(s: &str) -> IpAddr {
    s.parse().expect("test address")
}

fn spec(addresses: &[&str], prefix: i64, gateway: &str) -> IpPoolSpec {
    IpPoolSpec {
        addresses: addresses.iter().map(|s| s.to_string()).collect(),
        prefix,
        gateway: (!gateway.is_empty()).then(|| gateway.to_owned()),
        ..Default::default()
    }
}

fn allocatable(s: &IpPoolSpec) -> Vec<String> {
    let c = IpPoolConfig::new(s).expect("valid spec");
    let family = c.family();
    c.allocatable().iter().flat_map(|(a, b)| (a..=b).map(move |v| family.addr(v).to_string())).collect()
}

fn allocate_n(a: &mut IpPoolAllocator, n: usize) -> Vec<String> {
    (0..n).map(|_| a.allocate().map(|ip| ip.to_string()).unwrap_or_else(|e| e.to_string())).collect()
}

fn alloc(s: &IpPoolSpec) -> IpPoolAllocator {
    IpPoolAllocator::new(IpPoolConfig::new(s).expect("valid spec"))
}

#[test]
fn allocatable_set_removes_gateway_network_and_broadcast() {
    let s = spec(&["192.168.0.2", "192.168.0.3-192.168.0.4", "192.168.0.6/31"], 24, "192.168.0.1");
    assert_eq!(allocatable(&s), ["192.168.0.2", "192.168.0.3", "192.168.0.4", "192.168.0.6", "192.168.0.7"]);

    // The subnet is keyed on the lowest address: 192.168.0.255/16 -> 192.168.0.0/16.
    let s = spec(&["192.168.1.0", "192.168.0.255", "192.168.255.255"], 16, "");
    assert_eq!(allocatable(&s), ["192.168.0.255", "192.168.1.0"]);

    let s = spec(&["fd01::ffff", "fd01::1:0", "fd01::ffff:ffff"], 112, "");
    assert_eq!(allocatable(&s).len(), 3);

    let mut s = spec(&["fd01::0-fd01::3"], 120, "");
    assert_eq!(allocatable(&s), ["fd01::1", "fd01::2", "fd01::3"], "IPv6 subnet-router anycast removed");
    s.allocate_reserved_ip_addresses = true;
    assert_eq!(allocatable(&s), ["fd01::", "fd01::1", "fd01::2", "fd01::3"]);

    let mut s = spec(&["10.0.0.0/30"], 30, "10.0.0.1");
    assert_eq!(allocatable(&s), ["10.0.0.2"]);
    s.allocate_reserved_ip_addresses = true;
    assert_eq!(allocatable(&s), ["10.0.0.0", "10.0.0.2", "10.0.0.3"], "the gateway is never allocatable");

    let s = spec(&["fe80::/126"], 126, "fe80::2");
    assert_eq!(allocatable(&s), ["fe80::1", "fe80::3"], "no IPv6 broadcast, gateway removed");
}

#[test]
fn exclusions() {
    let mut s = spec(&["192.168.0.0/24"], 24, "192.168.0.1");
    s.excluded_addresses = vec!["192.168.0.128/25".into()];
    assert_eq!(IpPoolConfig::new(&s).unwrap().total(), 126);
    s.excluded_addresses = vec!["192.168.0.2-192.168.0.20".into()];
    assert_eq!(IpPoolConfig::new(&s).unwrap().total(), 234);
    s.excluded_addresses = vec!["192.168.0.7".into(), "192.168.0.9".into()];
    assert_eq!(IpPoolConfig::new(&s).unwrap().total(), 251);
}

#[test]
fn prefix_zero_is_allowed() {
    let s = spec(&["10.0.0.1-10.0.0.8"], 0, "");
    assert_eq!(IpPoolConfig::new(&s).unwrap().total(), 8);
    // With /0, 0.0.0.0 and 255.255.255.255 are the reserved addresses.
    let s = spec(&["0.0.0.0-0.0.0.3", "255.255.255.254-255.255.255.255"], 0, "");
    assert_eq!(allocatable(&s), ["0.0.0.1", "0.0.0.2", "0.0.0.3", "255.255.255.254"]);
}

#[test]
fn rfc3021_small_ipv4_subnets_reserve_nothing() {
    assert_eq!(allocatable(&spec(&["10.0.0.0/31"], 31, "")), ["10.0.0.0", "10.0.0.1"]);
    assert_eq!(allocatable(&spec(&["10.0.0.7"], 32, "")), ["10.0.0.7"]);
    assert_eq!(allocatable(&spec(&["10.0.0.6/31"], 31, "10.0.0.6")), ["10.0.0.7"]);
    // IPv6 /127 keeps its subnet-router anycast rule.
    assert_eq!(allocatable(&spec(&["fd00::/127"], 127, "")), ["fd00::1"]);
}

#[test]
fn edges_of_both_address_spaces() {
    let mut s = spec(&["0.0.0.0-0.0.0.2", "255.255.255.253-255.255.255.255"], 24, "");
    s.allocate_reserved_ip_addresses = true;
    let mut a = alloc(&s);
    assert_eq!(
        allocate_n(&mut a, 7),
        [
            "0.0.0.0",
            "0.0.0.1",
            "0.0.0.2",
            "255.255.255.253",
            "255.255.255.254",
            "255.255.255.255",
            "no address available"
        ]
    );
    a.release(Some(ip("255.255.255.255")));
    a.release(Some(ip("0.0.0.0")));
    assert_eq!(allocate_n(&mut a, 3), ["0.0.0.0", "255.255.255.255", "no address available"]);

    let max = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff";
    let mut s =
        spec(&["::-::1", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe-ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"], 0, "");
    s.allocate_reserved_ip_addresses = true;
    let mut a = alloc(&s);
    assert_eq!(
        allocate_n(&mut a, 5),
        ["::", "::1", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe", max, "no address available"]
    );

    let whole = spec(&["::/0"], 0, "");
    assert_eq!(IpPoolConfig::new(&whole).unwrap().total(), u128::MAX, "2^128 - 1 after the anycast address");
    assert_eq!(alloc(&whole).counts().total, i64::MAX);
    let mut a = alloc(&whole);
    assert_eq!(a.allocate().unwrap(), ip("::1"));
}

#[test]
fn lowest_free_first_across_ranges_in_any_order() {
    let mut a = alloc(&spec(&["10.0.1.3", "10.0.1.2"], 24, ""));
    assert_eq!(allocate_n(&mut a, 3), ["10.0.1.2", "10.0.1.3", "no address available"]);

    let mut a = alloc(&spec(&["10.0.0.128", "10.0.0.50"], 24, ""));
    assert_eq!(allocate_n(&mut a, 2), ["10.0.0.50", "10.0.0.128"]);

    // "pool overlaps reserved addresses": .0 network, .1 gateway, .255 broadcast; only .2 is left.
    let mut a = alloc(&spec(&["10.0.1.0-10.0.1.2", "10.0.1.255"], 24, "10.0.1.1"));
    assert_eq!(allocate_n(&mut a, 2), ["10.0.1.2", "no address available"]);

    let mut s = spec(&["10.1.1.0/24"], 24, "10.1.1.1");
    s.excluded_addresses = vec!["10.1.1.2-10.1.1.5".into(), "10.1.1.7".into()];
    let mut a = alloc(&s);
    assert_eq!(allocate_n(&mut a, 3), ["10.1.1.6", "10.1.1.8", "10.1.1.9"]);

    // Only the last address is free.
    let mut a = IpPoolAllocator::rebuild(
        IpPoolConfig::new(&spec(&["10.0.0.10-10.0.0.13"], 24, "")).unwrap(),
        ["10.0.0.10", "10.0.0.11", "10.0.0.12"].map(|s| Some(ip(s))),
    );
    assert_eq!(allocate_n(&mut a, 2), ["10.0.0.13", "no address available"]);
}

#[test]
fn released_addresses_are_reused_lowest_first() {
    let mut a = alloc(&spec(&["10.0.0.10-10.0.0.20"], 24, ""));
    allocate_n(&mut a, 5);
    a.release(Some(ip("10.0.0.12")));
    a.release(Some(ip("10.0.0.11")));
    assert_eq!(allocate_n(&mut a, 3), ["10.0.0.11", "10.0.0.12", "10.0.0.15"]);
}

/// Reference §3.8, "it shows the total, used, free ip addresses in the pool" (prefix 24).
#[test]
fn status_counts_of_the_go_scenarios() {
    let cases: &[(&[&str], i64, &str, usize, (i64, i64, i64))] = &[
        (&["10.0.0.10-10.0.0.20"], 24, "", 1, (11, 1, 10)),
        (&["10.0.0.10-10.0.0.20"], 24, "10.0.0.10", 2, (10, 2, 8)),
        (&["10.0.0.10-10.0.0.20"], 24, "10.0.0.1", 1, (11, 1, 10)),
        (&["10.0.0.0-10.0.0.1"], 24, "10.0.0.2", 1, (1, 1, 0)),
        (&["10.0.0.254-10.0.0.255"], 24, "10.0.0.1", 1, (1, 1, 0)),
        (&["fe80::ffff"], 120, "fe80::a", 1, (1, 1, 0)),
        (&["fd00::10-fd00::20"], 64, "fd00::10", 2, (16, 2, 14)),
    ];
    for (addresses, prefix, gw, claims, (total, used, free)) in cases {
        let mut a = alloc(&spec(addresses, *prefix, gw));
        allocate_n(&mut a, *claims);
        let c = a.counts();
        assert_eq!((c.total, c.used, c.free, c.out_of_range), (*total, *used, *free, 0), "{addresses:?} gw {gw}");
    }
}

/// Reference §3.8, "it shows the out of range ips if any": addresses in use keep counting after a pool edit.
#[test]
fn out_of_range_after_a_pool_edit() {
    let cases: &[(&[&str], bool, usize, &[&str], i64, (i64, i64))] = &[
        (&["10.0.0.10-10.0.0.20"], true, 5, &["10.0.0.13-10.0.0.20"], 3, (8, 6)),
        (&["10.0.0.0-10.0.0.255"], false, 4, &["10.0.0.1-10.0.0.255"], 0, (254, 250)),
        (&["10.0.0.0-10.0.0.255"], false, 5, &["10.0.0.0", "10.0.0.2-10.0.0.255"], 1, (253, 249)),
        (&["10.0.0.251-10.0.0.255"], true, 5, &["10.0.0.251-10.0.0.254"], 1, (4, 0)),
    ];
    for (before, reserved, claims, after, out_of_range, (total, free)) in cases {
        let mut s = spec(before, 24, "");
        s.allocate_reserved_ip_addresses = *reserved;
        let mut a = alloc(&s);
        assert_eq!(allocate_n(&mut a, *claims).len(), *claims);
        let s2 = spec(after, 24, "");
        a.apply_config(IpPoolConfig::new(&s2).unwrap()).unwrap();
        let c = a.counts();
        assert_eq!(
            (c.used, c.out_of_range, c.total, c.free),
            (*claims as i64, *out_of_range, *total, *free),
            "{before:?} -> {after:?}"
        );
    }
}

#[test]
fn out_of_range_addresses_release_cleanly() {
    let mut a = alloc(&spec(&["10.0.0.10-10.0.0.12"], 24, ""));
    a.record(Some(ip("10.0.0.99")));
    a.record(None);
    a.record(Some(ip("fd00::1")));
    assert_eq!(a.counts(), PoolCounts { total: 3, used: 3, free: 3, out_of_range: 3 });
    assert_eq!(allocate_n(&mut a, 1), ["10.0.0.10"]);
    a.release(Some(ip("10.0.0.99")));
    a.release(None);
    a.release(Some(ip("fd00::1")));
    assert_eq!(a.counts(), PoolCounts { total: 3, used: 1, free: 2, out_of_range: 0 });
    // Widening the pool makes a recorded address allocatable and in use.
    a.record(Some(ip("10.0.0.13")));
    assert_eq!(a.counts().out_of_range, 1);
    a.apply_config(IpPoolConfig::new(&spec(&["10.0.0.10-10.0.0.13"], 24, "")).unwrap()).unwrap();
    assert_eq!(a.counts(), PoolCounts { total: 4, used: 2, free: 2, out_of_range: 0 });
    assert_eq!(allocate_n(&mut a, 3), ["10.0.0.11", "10.0.0.12", "no address available"]);
}

#[test]
fn duplicates_hold_the_address_until_the_last_holder_releases() {
    let mut a = alloc(&spec(&["10.0.0.1-10.0.0.2"], 24, ""));
    a.record(Some(ip("10.0.0.1")));
    a.record(Some(ip("10.0.0.1")));
    assert_eq!(a.counts(), PoolCounts { total: 2, used: 2, free: 0, out_of_range: 0 });
    a.release(Some(ip("10.0.0.1")));
    assert!(a.is_in_use(ip("10.0.0.1")));
    assert_eq!(allocate_n(&mut a, 1), ["10.0.0.2"]);
    a.release(Some(ip("10.0.0.1")));
    assert_eq!(allocate_n(&mut a, 2), ["10.0.0.1", "no address available"]);
}

#[test]
fn reserve_a_specific_address() {
    let mut s = spec(&["10.0.0.0/24"], 24, "10.0.0.1");
    s.excluded_addresses = vec!["10.0.0.5".into()];
    let mut a = alloc(&s);
    assert_eq!(a.reserve(ip("10.0.0.7")), Ok(()));
    assert_eq!(a.reserve(ip("10.0.0.7")), Err(ReserveError::Taken(ip("10.0.0.7"))));
    let why = |ip_: &str| match alloc(&s).reserve(ip(ip_)) {
        Err(ReserveError::NotAllocatable { reason, .. }) => Some(reason),
        _ => None,
    };
    assert_eq!(why("10.0.1.1"), Some(NotAllocatable::OutsidePool));
    assert_eq!(why("10.0.0.5"), Some(NotAllocatable::Excluded));
    assert_eq!(why("10.0.0.1"), Some(NotAllocatable::Gateway));
    assert_eq!(why("10.0.0.0"), Some(NotAllocatable::NetworkAddress));
    assert_eq!(why("10.0.0.255"), Some(NotAllocatable::BroadcastAddress));
    assert_eq!(why("fd00::1"), Some(NotAllocatable::OtherFamily));
    assert_eq!(
        alloc(&s).reserve(ip("10.0.0.5")).unwrap_err().to_string(),
        "address 10.0.0.5 is in the pool's excludedAddresses"
    );
    // The reserved address is skipped by first-free allocation.
    assert_eq!(allocate_n(&mut a, 5), ["10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.6", "10.0.0.8"]);
}

/// `IPSetCount` of the Go provider: exact, capped at 2^63 − 1.
#[test]
fn counts_saturate_at_int64() {
    let count = |entries: &[&str]| status_count(parse_list(entries).unwrap().set.len());
    assert_eq!(count(&["fe80::1/20"]), i64::MAX);
    assert_eq!(count(&["fe80::1/65"]), i64::MAX);
    assert_eq!(count(&["fe80::1/66"]), 1 << 62);
    assert_eq!(count(&["fe80::1/126"]), 4);
    assert_eq!(count(&[]), 0);
    let c = PoolCounts::new(u128::MAX, 5, 1);
    assert_eq!((c.total, c.free, c.used, c.out_of_range), (i64::MAX, i64::MAX, 5, 1));
    assert_eq!(PoolCounts::new(2, 5, 0).free, 0, "free never goes negative");
}

fn prefix_spec(prefixes: &[&str], len: i64) -> PrefixPoolSpec {
    PrefixPoolSpec {
        prefixes: prefixes.iter().map(|s| s.to_string()).collect(),
        allocation_prefix_length: len,
        ..Default::default()
    }
}

fn palloc(s: &PrefixPoolSpec) -> PrefixPoolAllocator {
    PrefixPoolAllocator::new(PrefixPoolConfig::new(s).expect("valid prefix spec"))
}

fn carve(a: &mut PrefixPoolAllocator, n: usize) -> Vec<String> {
    (0..n).map(|_| a.allocate().map(|p| p.to_string()).unwrap_or_else(|e| e.to_string())).collect()
}

#[test]
fn prefix_carving_vectors() {
    let mut a = palloc(&prefix_spec(&["fd00::/62"], 64));
    assert_eq!(a.counts().total, 4);
    assert_eq!(carve(&mut a, 5), ["fd00::", "fd00:0:0:1::", "fd00:0:0:2::", "fd00:0:0:3::", "no prefix available"]);

    let mut a = palloc(&prefix_spec(&["fd00::/48"], 56));
    assert_eq!(a.counts().total, 256);
    assert_eq!(carve(&mut a, 2), ["fd00::", "fd00:0:0:100::"]);
    assert_eq!(a.counts().free, 254);

    let mut s = prefix_spec(&["fd00::/62"], 0);
    s.excluded_prefixes = vec!["fd00:0:0:1::/64".into()];
    s.gateway = Some("fd00::1".into());
    let mut a = palloc(&s);
    assert_eq!(a.counts().total, 3);
    assert_eq!(carve(&mut a, 2), ["fd00::", "fd00:0:0:2::"], "the gateway never blocks; the exclusion does");

    let mut a = palloc(&prefix_spec(&["fd00:0:0:1::/64", "fd10::/48"], 64));
    assert_eq!(carve(&mut a, 2), ["fd00:0:0:1::", "fd10::"]);

    // Overlapping and adjacent prefixes merge: 8 children, the second /62 after the first is full.
    let mut a = palloc(&prefix_spec(&["fd00::/63", "fd00::/62", "fd00:0:0:8::/62"], 64));
    assert_eq!(a.counts().total, 8);
    assert_eq!(carve(&mut a, 5)[4], "fd00:0:0:8::");

    let mut a = palloc(&prefix_spec(&["fd07::/64"], 64));
    assert_eq!(carve(&mut a, 2), ["fd07::", "no prefix available"]);
    assert_eq!(a.counts(), PoolCounts { total: 1, used: 1, free: 0, out_of_range: 0 });
}

#[test]
fn prefix_exclusions_by_range_and_address() {
    let mut s = prefix_spec(&["fd00::/60"], 64);
    // A single address blocks its whole /64; a range blocks every /64 it touches.
    s.excluded_prefixes = vec!["fd00::5".into(), "fd00:0:0:1::ffff-fd00:0:0:3::".into()];
    let mut a = palloc(&s);
    assert_eq!(a.counts().total, 12);
    assert_eq!(carve(&mut a, 2), ["fd00:0:0:4::", "fd00:0:0:5::"]);
}

#[test]
fn prefix_allocations_skip_existing_and_out_of_range() {
    let cfg = PrefixPoolConfig::new(&prefix_spec(&["fd00::/62"], 64)).unwrap();
    let existing = |s: &str, len: u8| Allocation::new(s.parse().unwrap(), len);
    // fd00:0:0:5::1234/64 is masked to fd00:0:0:5::/64 (outside the pool: out of range).
    let mut a = PrefixPoolAllocator::rebuild(
        cfg.clone(),
        [existing("fd00::", 64), existing("fd00:0:0:5::1234", 64), existing("fd00:0:0:2::", 63), None],
    );
    assert_eq!(a.counts(), PoolCounts { total: 4, used: 4, free: 3, out_of_range: 3 });
    assert_eq!(carve(&mut a, 2), ["fd00:0:0:1::", "no prefix available"], "the /63 blocks two children");
    a.release(existing("fd00:0:0:2::", 63));
    assert_eq!(carve(&mut a, 3), ["fd00:0:0:2::", "fd00:0:0:3::", "no prefix available"]);
    assert!(cfg.is_allocatable("fd00:0:0:3::".parse().unwrap(), 64));
    assert!(!cfg.is_allocatable("fd00:0:0:3::".parse().unwrap(), 65));
    assert!(!cfg.is_allocatable("fd00:0:0:4::".parse().unwrap(), 64));
}

#[test]
fn prefix_release_keeps_children_that_another_allocation_overlaps() {
    let cfg = PrefixPoolConfig::new(&prefix_spec(&["fd00::/62"], 64)).unwrap();
    let existing = |s: &str, len: u8| Allocation::new(s.parse::<Ipv6Addr>().unwrap(), len);
    let mut a = PrefixPoolAllocator::rebuild(cfg, [existing("fd00::", 62), existing("fd00:0:0:1::", 64)]);
    assert!(a.is_exhausted());
    a.release(existing("fd00::", 62));
    assert_eq!(carve(&mut a, 4), ["fd00::", "fd00:0:0:2::", "fd00:0:0:3::", "no prefix available"]);
}

#[test]
fn prefix_status_after_edits() {
    let mut a = palloc(&prefix_spec(&["fd01::/62"], 64));
    carve(&mut a, 2);
    a.apply_config(PrefixPoolConfig::new(&prefix_spec(&["fd01:0:0:1::/64"], 64)).unwrap());
    assert_eq!(a.counts(), PoolCounts { total: 1, used: 2, free: 0, out_of_range: 1 });

    let mut a = palloc(&prefix_spec(&["fd03::/62"], 64));
    carve(&mut a, 1);
    let mut s = prefix_spec(&["fd03::/62"], 64);
    s.excluded_prefixes = vec!["fd03::/64".into()];
    a.apply_config(PrefixPoolConfig::new(&s).unwrap());
    assert_eq!(a.counts(), PoolCounts { total: 3, used: 1, free: 3, out_of_range: 1 });
    assert_eq!(carve(&mut a, 1), ["fd03:0:0:1::"]);
}

#[test]
fn prefix_full_space_and_128() {
    let a = palloc(&prefix_spec(&["::/0"], 1));
    assert_eq!(a.counts().total, 2);
    let mut a = palloc(&prefix_spec(&["ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffc/126"], 128));
    assert_eq!(carve(&mut a, 5).last().map(String::as_str), Some("no prefix available"));
    let a = palloc(&prefix_spec(&["::/0"], 128));
    assert_eq!(a.counts().total, i64::MAX);
    let mut a = palloc(&prefix_spec(&["fd00::/64"], 128));
    assert_eq!(a.reserve("fd00::7".parse().unwrap()), Ok(()));
    assert_eq!(carve(&mut a, 1), ["fd00::"]);
}

#[test]
fn prefix_reserve() {
    let mut a = palloc(&prefix_spec(&["fd00::/62"], 64));
    assert!(a.reserve("fd00:0:0:2::".parse().unwrap()).is_ok());
    assert!(matches!(a.reserve("fd00:0:0:2::".parse().unwrap()), Err(prefix_pool::PrefixReserveError::Taken(..))));
    assert!(a.reserve("fd00:0:0:2::1".parse().unwrap()).is_err(), "not a child base");
    assert!(a.reserve("fd00:0:0:4::".parse().unwrap()).is_err(), "outside");
    assert_eq!(carve(&mut a, 3), ["fd00::", "fd00:0:0:1::", "fd00:0:0:3::"]);
}

#[test]
fn prefix_spec_errors() {
    assert!(PrefixPoolConfig::new(&prefix_spec(&["fd00::1/64"], 64)).is_err());
    assert!(PrefixPoolConfig::new(&prefix_spec(&["fd00::/65"], 64)).is_err());
    assert!(PrefixPoolConfig::new(&prefix_spec(&["10.0.0.0/8"], 64)).is_err());
    assert!(PrefixPoolConfig::new(&prefix_spec(&["fd00::"], 64)).is_err());
    assert!(PrefixPoolConfig::new(&prefix_spec(&["fd00::/48"], 129)).is_err());
    assert_eq!(effective_allocation_length(0), 64);
}

fn messages(errs: &[FieldError]) -> Vec<String> {
    errs.iter().map(|e| e.to_string()).collect()
}

fn extras() -> IpPoolExtras<'static> {
    IpPoolExtras::default()
}

/// `TestInvalidScenarios` of the Go webhook tests: rule, field and message text.
#[test]
fn ip_pool_validation_messages() {
    let check = |s: IpPoolSpec, expected: &str| {
        let got = messages(&validate_ip_pool(&s, &extras()));
        assert!(got.iter().any(|m| m.contains(expected)), "{s:?}: expected {expected:?} in {got:?}");
    };
    check(spec(&[], 24, "10.0.0.1"), "spec.addresses: Invalid value: []string{}: addresses is required");
    check(spec(&["10.0.0.1"], -1, ""), "spec.prefix: Invalid value: -1: a valid prefix is required");
    check(
        spec(&["10.0.0.1-10.0.0.0"], 24, ""),
        "spec.addresses[0]: Invalid value: \"10.0.0.1-10.0.0.0\": provided address is not a valid IP, range, nor CIDR",
    );
    check(spec(&["10.0.0.1/33"], 24, ""), "provided address is not a valid IP, range, nor CIDR");
    check(spec(&["abc"], 24, ""), "spec.addresses[0]: Invalid value: \"abc\"");
    check(spec(&["10.0.0.1", "fd00::1"], 24, ""), "provided addresses are of mixed IP families");
    check(
        spec(&["10.0.0.2"], 24, "invalid"),
        "spec.gateway: Invalid value: \"invalid\": ParseAddr(\"invalid\"): unable to parse IP",
    );
    check(spec(&["10.0.0.2"], 24, "fd00::1"), "provided gateway and addresses are of mixed IP families");
    let mut s = spec(&["10.0.0.2"], 24, "");
    s.excluded_addresses = vec!["nope".into()];
    check(
        s.clone(),
        "spec.excludedAddresses[0]: Invalid value: \"nope\": provided address is not a valid IP, range, nor CIDR",
    );
    s.excluded_addresses = vec!["10.0.0.3".into(), "fd00::1".into()];
    check(
        s.clone(),
        "spec.excludedAddresses: Invalid value: []string{\"10.0.0.3\", \"fd00::1\"}: provided addresses are of mixed IP families",
    );
    s.excluded_addresses = vec!["fd00::1".into()];
    check(s, "addresses and excluded addresses are of mixed IP families");
    let neg = IpPoolExtras { address_reuse_grace_period_seconds: Some(-1), ..extras() };
    assert!(
        messages(&validate_ip_pool(&spec(&["10.0.0.2"], 24, ""), &neg))[0]
            .contains("addressReuseGracePeriodSeconds must not be negative")
    );
    check(spec(&["10.0.0.2"], 33, ""), "spec.prefix: Invalid value: 33: provided prefix is not valid");
    check(spec(&["10.0.0.2"], 9999, ""), "provided prefix is not valid");
    check(spec(&["fd00::2"], 129, ""), "provided prefix is not valid");
    // Ranges and CIDRs below, above and straddling the prefix of the lowest address.
    for (addresses, bad) in [
        (vec!["10.0.0.5", "10.0.1.5"], 1),
        (vec!["10.0.0.5", "10.0.0.250-10.0.1.3"], 1),
        (vec!["10.0.0.5", "10.0.0.0/23"], 1),
        (vec!["10.0.0.5-10.0.0.9", "9.255.255.255"], 0),
    ] {
        let errs = validate_ip_pool(&spec(&addresses, 24, ""), &extras());
        assert_eq!(errs.len(), 1, "{addresses:?}: {errs:?}");
        assert_eq!(errs[0].field, format!("spec.addresses[{bad}]"), "{addresses:?}");
        assert_eq!(errs[0].detail, "provided address belongs to a different subnet than others");
    }
    // Structural errors stop before the prefix check, as in the Go provider.
    let errs = validate_ip_pool(&spec(&["10.0.0.1", "nope"], 99, ""), &extras());
    assert_eq!(errs.len(), 1);
}

#[test]
fn ip_pool_valid_specs() {
    for s in [
        spec(&["10.0.0.1-10.0.0.100"], 24, "10.0.0.254"),
        spec(&["10.0.0.0/24", "10.0.0.3"], 24, ""),
        spec(&["fd00::1-fd00::ff"], 64, "fe80::1"),
        spec(&["1.2.3.4", "200.1.1.1"], 0, ""),
        spec(&["10.0.0.1"], 0, "192.168.0.1"),
    ] {
        assert_eq!(validate_ip_pool(&s, &extras()), vec![], "{s:?}");
    }
}

#[test]
fn the_gateway_finding_flags_an_ipv4_gateway_outside_the_subnet_and_unspecified_gateways() {
    let finding = |s: IpPoolSpec| ip_pool_gateway_finding(&s).map(|e| e.to_string());
    let outside = spec(&["10.0.0.10-10.0.0.20"], 24, "10.0.1.1");
    assert!(validate_ip_pool(&outside, &extras()).is_empty(), "admitted, as the Go provider admits it");
    assert_eq!(
        finding(outside).as_deref(),
        Some("spec.gateway: Invalid value: \"10.0.1.1\": is not in the pool's subnet 10.0.0.0/24")
    );
    assert_eq!(
        finding(spec(&["10.0.0.10"], 24, "0.0.0.0")).as_deref(),
        Some(
            "spec.gateway: Invalid value: \"0.0.0.0\": is the unspecified address; every IPAddress of the pool carries \
             it as its gateway"
        )
    );
    assert!(finding(spec(&["fd00::10"], 64, "::")).is_some(), "the unspecified IPv6 address too");
    assert_eq!(finding(spec(&["fd00::10"], 64, "fe80::1")), None, "an IPv6 gateway may be link-local");
    assert_eq!(finding(spec(&["10.0.0.10"], 24, "10.0.0.1")), None);
    assert_eq!(finding(spec(&["10.0.0.10"], 24, "")), None);
}

#[test]
fn pre_allocations_are_validated() {
    let mut pre = std::collections::BTreeMap::new();
    pre.insert("a".to_owned(), "10.0.0.5".to_owned());
    pre.insert("b".to_owned(), "10.0.0.5".to_owned());
    pre.insert("c".to_owned(), "10.0.0.1".to_owned());
    pre.insert("d".to_owned(), "what".to_owned());
    pre.insert("e".to_owned(), "10.0.0.7".to_owned());
    let x = IpPoolExtras { pre_allocations: Some(&pre), ..extras() };
    let got = messages(&validate_ip_pool(&spec(&["10.0.0.0/24"], 24, "10.0.0.1"), &x));
    assert_eq!(
        got,
        [
            "spec.preAllocations[b]: Invalid value: \"10.0.0.5\": address 10.0.0.5 is pre-allocated to both \"a\" and \"b\"",
            "spec.preAllocations[c]: Invalid value: \"10.0.0.1\": pre-allocated address 10.0.0.1 is the pool's gateway",
            "spec.preAllocations[d]: Invalid value: \"what\": pre-allocated address is not a valid IP",
        ]
    );
}

/// A read of the allocation path found a pin added over an address another claim's IPAddress holds admitted, and its
/// claim waited until that IPAddress went.
#[test]
fn a_new_pin_over_an_address_another_claim_holds_is_refused() {
    let pins = |entries: &[(&str, &str)]| -> std::collections::BTreeMap<String, String> {
        entries.iter().map(|(c, a)| (c.to_string(), a.to_string())).collect()
    };
    let in_use = [
        InUse { namespace: "ns", claim: "node-b", address: "10.0.0.10" },
        InUse { namespace: "ns", claim: "node-a", address: "10.0.0.11" },
    ];
    let got = messages(&pins_in_use(false, &pins(&[("node-a", "10.0.0.10")]), None, &in_use));
    assert_eq!(
        got,
        [
            "spec.preAllocations[node-a]: Invalid value: \"10.0.0.10\": address 10.0.0.10 is in use by IPAddress ns/node-b"
        ]
    );
    // Its own IPAddress, or a pin admitted before, is fine.
    assert!(pins_in_use(false, &pins(&[("node-a", "10.0.0.11")]), None, &in_use).is_empty());
    let before = pins(&[("node-a", "10.0.0.10")]);
    assert!(pins_in_use(false, &before, Some(&before), &in_use).is_empty());
    // A global pool's key names the namespace: a claim of the name in another namespace is another claim.
    assert!(pins_in_use(true, &pins(&[("ns/node-b", "10.0.0.10")]), None, &in_use).is_empty());
    assert_eq!(pins_in_use(true, &pins(&[("other/node-b", "10.0.0.10")]), None, &in_use).len(), 1);
    assert!(
        pins_in_use(true, &pins(&[("node-b", "10.0.0.10")]), None, &in_use).is_empty(),
        "a bare name: any namespace"
    );
    assert_eq!(pin_warnings(true, Some(&pins(&[("node-b", "10.0.0.10"), ("ns/x", "10.0.0.1")]))).len(), 1);
    assert!(pin_warnings(false, Some(&pins(&[("node-b", "10.0.0.10")]))).is_empty());
}

#[test]
fn oversized_specs_are_refused_before_anything_is_parsed() {
    let many: Vec<String> = (0..MAX_LIST_ENTRIES + 1).map(|i| format!("10.{}.{}.1", i / 256, i % 256)).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let got = messages(&validate_ip_pool(&spec(&many, 8, ""), &extras()));
    assert_eq!(got, ["spec.addresses: Too many: 1025: must have at most 1024 items"]);
    assert!(validate_ip_pool(&spec(&many[..MAX_LIST_ENTRIES], 8, ""), &extras()).is_empty(), "1024 is fine");
    let long = format!("10.0.0.1{}", " ".repeat(200));
    let got = messages(&validate_ip_pool(&spec(&["10.0.0.2", &long], 24, ""), &extras()));
    assert_eq!(got.len(), 1);
    assert!(got[0].starts_with("spec.addresses[1]: Invalid value: ") && got[0].ends_with("at most 128 characters"));
    let pre: std::collections::BTreeMap<String, String> =
        (0..MAX_PRE_ALLOCATIONS + 1).map(|i| (format!("c{i}"), "10.0.0.1".to_owned())).collect();
    let x = IpPoolExtras { pre_allocations: Some(&pre), ..extras() };
    let got = messages(&validate_ip_pool(&spec(&["10.0.0.0/24"], 24, ""), &x));
    assert_eq!(got, ["spec.preAllocations: Too many: 4097: must have at most 4096 items"]);
    let prefixes: Vec<String> = (0..MAX_LIST_ENTRIES + 1).map(|i| format!("fd00:{i:x}::/48")).collect();
    let prefix_spec = PrefixPoolSpec { prefixes, allocation_prefix_length: 64, ..Default::default() };
    assert_eq!(
        messages(&validate_prefix_pool(&prefix_spec)),
        ["spec.prefixes: Too many: 1025: must have at most 1024 items"]
    );
}

#[test]
fn update_guard_lists_stranded_ranges() {
    let new = IpPoolConfig::new(&spec(&["10.0.0.15-10.0.0.20"], 24, "")).unwrap();
    assert_eq!(
        ip_pool_stranded_addresses(&new, &["10.0.0.10", "10.0.0.11", "10.0.0.13", "10.0.0.16", "junk"]),
        Some("pool addresses do not contain allocated addresses: [10.0.0.10-10.0.0.11 10.0.0.13-10.0.0.13]".into())
    );
    assert_eq!(ip_pool_stranded_addresses(&new, &["10.0.0.15"]), None);
    let gw = IpPoolConfig::new(&spec(&["10.0.0.15-10.0.0.20"], 24, "10.0.0.15")).unwrap();
    assert!(ip_pool_stranded_addresses(&gw, &["10.0.0.15"]).is_some(), "gateway set to an allocated address");
}

#[test]
fn prefix_pool_validation_messages() {
    let check = |s: PrefixPoolSpec, expected: &str| {
        let got = messages(&validate_prefix_pool(&s));
        assert!(got.iter().any(|m| m.contains(expected)), "{s:?}: expected {expected:?} in {got:?}");
    };
    check(prefix_spec(&[], 64), "spec.prefixes: Invalid value: []string{}: prefixes is required");
    check(prefix_spec(&["fd00::/48"], 129), "allocationPrefixLength must be between 1 and 128");
    check(
        prefix_spec(&["fd00::1"], 64),
        "spec.prefixes[0]: Invalid value: \"fd00::1\": provided entry is not a valid IPv6 CIDR",
    );
    check(prefix_spec(&["10.0.0.0/8"], 64), "only IPv6 prefixes are supported");
    check(prefix_spec(&["fd00::1/64"], 64), "CIDR must be network-aligned");
    check(prefix_spec(&["fd00::/65"], 0), "CIDR prefix length must be <= allocationPrefixLength (64)");
    let mut s = prefix_spec(&["fd00::/48"], 64);
    s.gateway = Some("10.0.0.1".into());
    check(s.clone(), "provided gateway must be IPv6");
    s.gateway = None;
    s.excluded_prefixes = vec!["10.0.0.1".into()];
    check(s.clone(), "only IPv6 excluded prefixes are supported");
    s.excluded_prefixes = vec!["zz".into()];
    check(s, "provided entry is not a valid IP, range, nor CIDR");
    for len in [56, 96, 128, 64] {
        assert!(validate_prefix_pool(&prefix_spec(&["fd00::/48", "fd01::/48"], len)).is_empty());
    }
}

#[test]
fn prefix_pool_warnings_and_update_guard() {
    let mut s = prefix_spec(&["fd00::/120"], 128);
    s.gateway = Some("fd00::1".into());
    let w = prefix_pool_warnings(&PrefixPoolConfig::new(&s).unwrap());
    assert_eq!(w.len(), 2);
    assert!(w[0].starts_with("spec.allocationPrefixLength=128 behaves like host-address allocation"));
    assert!(w[1].starts_with("spec.gateway is within spec.prefixes and is not reserved"));
    s.gateway = Some("fd01::1".into());
    assert_eq!(prefix_pool_warnings(&PrefixPoolConfig::new(&s).unwrap()).len(), 1);
    assert!(prefix_pool_warnings(&PrefixPoolConfig::new(&prefix_spec(&["fd00::/48"], 64)).unwrap()).is_empty());

    let new = PrefixPoolConfig::new(&prefix_spec(&["fd01:0:0:1::/64"], 64)).unwrap();
    let allocations =
        vec![("fd01::".to_owned(), Some(64)), ("fd01:0:0:1::".to_owned(), Some(64)), ("fd00::".to_owned(), None)];
    assert_eq!(
        prefix_pool_non_allocatable(&new, &allocations),
        Some("existing allocations become non-allocatable: [fd00:: fd01::]".into())
    );
}

#[test]
fn overlap_between_pools() {
    let a = IpPoolConfig::new(&spec(&["10.0.0.10-10.0.0.20"], 24, "")).unwrap();
    let b = IpPoolConfig::new(&spec(&["10.0.0.18-10.0.0.30"], 24, "")).unwrap();
    let c = IpPoolConfig::new(&spec(&["10.0.0.21-10.0.0.30"], 24, "")).unwrap();
    let fam = Family::V4;
    assert_eq!(first_overlap(fam, a.allocatable(), b.allocatable()), Some("10.0.0.18-10.0.0.20".into()));
    assert_eq!(first_overlap(fam, a.allocatable(), c.allocatable()), None);
}

#[test]
fn an_edit_to_the_other_family_is_refused_and_changes_nothing() {
    let mut a = alloc(&spec(&["10.0.0.10-10.0.0.12"], 24, ""));
    assert_eq!(allocate_n(&mut a, 1), ["10.0.0.10"]);
    let before = a.counts();
    assert_eq!(a.apply_config(IpPoolConfig::new(&spec(&["fd00::1-fd00::3"], 64, "")).unwrap()), Err(FamilyChanged));
    assert_eq!(a.counts(), before);
    assert_eq!(allocate_n(&mut a, 1), ["10.0.0.11"]);
}
