//! The allocation strategies (docs/compatibility.md D20) through the allocator: the order each hands addresses out in,
//! and that none hands out an address that is not free, against a model of the order over thousands of steps.

use std::collections::{BTreeMap, HashSet};

use super::{alloc, allocate_n, ip, spec};
use crate::ipam::strategy::RELEASE_WINDOW;
use crate::ipam::{AllocationStrategy, IpPoolAllocator, IpPoolConfig, IpPoolSpec, IpSubnetSpec, RangeSet, SplitMix64};

fn with(mut s: IpPoolSpec, strategy: AllocationStrategy) -> IpPoolSpec {
    s.allocation_strategy = strategy;
    s
}

fn release(a: &mut IpPoolAllocator, addresses: &[&str]) {
    for s in addresses {
        a.release(Some(ip(s)));
    }
}

#[test]
fn least_recently_released_hands_out_never_used_addresses_first_then_the_oldest_release() {
    let mut a = alloc(&with(spec(&["10.0.0.1-10.0.0.6"], 24, ""), AllocationStrategy::LeastRecentlyReleased));
    assert_eq!(allocate_n(&mut a, 3), ["10.0.0.1", "10.0.0.2", "10.0.0.3"]);
    release(&mut a, &["10.0.0.2", "10.0.0.1"]);
    assert_eq!(allocate_n(&mut a, 3), ["10.0.0.4", "10.0.0.5", "10.0.0.6"], "never-used addresses first");
    release(&mut a, &["10.0.0.5"]);
    assert_eq!(
        allocate_n(&mut a, 4),
        ["10.0.0.2", "10.0.0.1", "10.0.0.5", "no address available"],
        "then the address released longest ago, whatever its value"
    );

    // Sequential, the default, hands the lowest back at once.
    let mut a = alloc(&spec(&["10.0.0.1-10.0.0.6"], 24, ""));
    allocate_n(&mut a, 3);
    release(&mut a, &["10.0.0.2"]);
    assert_eq!(allocate_n(&mut a, 1), ["10.0.0.2"]);
}

#[test]
fn least_recently_released_never_hands_out_a_released_address_that_was_reserved_or_found_in_use_since() {
    let mut a = alloc(&with(spec(&["10.0.0.1-10.0.0.4"], 24, ""), AllocationStrategy::LeastRecentlyReleased));
    allocate_n(&mut a, 4);
    release(&mut a, &["10.0.0.2", "10.0.0.3", "10.0.0.4"]);
    a.reserve(ip("10.0.0.2")).unwrap();
    a.record(Some(ip("10.0.0.3")));
    assert_eq!(allocate_n(&mut a, 2), ["10.0.0.4", "no address available"]);
    let (fresh, stale, recent) = a.recency().unwrap().remove(0);
    assert!(fresh.is_empty() && stale.is_empty() && recent.is_empty(), "{fresh:?} {stale:?} {recent:?}");
}

#[test]
fn least_recently_released_ages_releases_beyond_its_window_into_address_order_ahead_of_the_window() {
    let mut a = alloc(&with(spec(&["10.0.0.0/22"], 22, ""), AllocationStrategy::LeastRecentlyReleased));
    let all = allocate_n(&mut a, 1022);
    // Released from the top down: the first 10 releases (the highest addresses) leave the window.
    for s in all.iter().rev().take(RELEASE_WINDOW + 10) {
        a.release(Some(ip(s)));
    }
    let (fresh, stale, recent) = a.recency().unwrap().remove(0);
    assert!(fresh.is_empty());
    assert_eq!(stale.len(), 10);
    assert_eq!(recent.len(), RELEASE_WINDOW);
    let aged: Vec<String> = all[1012..].to_vec();
    assert_eq!(allocate_n(&mut a, 10), aged, "the aged releases first, lowest first");
    let window_oldest = all[1011].clone();
    assert_eq!(allocate_n(&mut a, 1), [window_oldest], "then the window, oldest first");
}

#[test]
fn a_new_least_recently_released_allocator_counts_what_lies_below_the_highest_address_in_use_as_used_before() {
    let config =
        IpPoolConfig::new(&with(spec(&["10.0.0.1-10.0.0.9"], 24, ""), AllocationStrategy::LeastRecentlyReleased))
            .unwrap();
    let mut a = IpPoolAllocator::rebuild(config, [Some(ip("10.0.0.1")), Some(ip("10.0.0.5"))]);
    assert_eq!(
        allocate_n(&mut a, 8),
        ["10.0.0.6", "10.0.0.7", "10.0.0.8", "10.0.0.9", "10.0.0.2", "10.0.0.3", "10.0.0.4", "no address available"]
    );
}

#[test]
fn an_edit_keeps_the_release_order_and_its_new_addresses_are_never_used() {
    let lrr = |addresses: &[&str]| with(spec(addresses, 24, ""), AllocationStrategy::LeastRecentlyReleased);
    let mut a = alloc(&lrr(&["10.0.0.1-10.0.0.4"]));
    allocate_n(&mut a, 4);
    release(&mut a, &["10.0.0.3", "10.0.0.1"]);
    a.apply_config(IpPoolConfig::new(&lrr(&["10.0.0.1-10.0.0.6"])).unwrap()).unwrap();
    assert_eq!(allocate_n(&mut a, 5), ["10.0.0.5", "10.0.0.6", "10.0.0.3", "10.0.0.1", "no address available"]);

    // Sequential → LeastRecentlyReleased on a pool in use: what lies below the highest address in use was used.
    let mut a = alloc(&spec(&["10.0.0.1-10.0.0.6"], 24, ""));
    allocate_n(&mut a, 4);
    release(&mut a, &["10.0.0.2"]);
    a.apply_config(IpPoolConfig::new(&lrr(&["10.0.0.1-10.0.0.6"])).unwrap()).unwrap();
    assert_eq!(allocate_n(&mut a, 3), ["10.0.0.5", "10.0.0.6", "10.0.0.2"]);
}

#[test]
fn random_hands_out_every_free_address_once_in_no_fixed_order() {
    let mut a = alloc(&with(spec(&["10.0.0.0/24"], 24, ""), AllocationStrategy::Random));
    let got = allocate_n(&mut a, 255);
    assert_eq!(got[254], "no address available");
    let distinct: HashSet<&String> = got[..254].iter().collect();
    assert_eq!(distinct.len(), 254);
    let ascending = got[..254].windows(2).filter(|w| ip(&w[0]) < ip(&w[1])).count();
    assert!((60..200).contains(&ascending), "{ascending} of 253 steps go up: not a shuffle");
    release(&mut a, &["10.0.0.7"]);
    assert_eq!(allocate_n(&mut a, 1), ["10.0.0.7"], "the only free address is found");
}

#[test]
fn random_keeps_to_the_first_subnet_with_a_free_address() {
    let mut s = with(spec(&["10.0.0.1-10.0.0.20"], 24, ""), AllocationStrategy::Random);
    s.subnets = vec![IpSubnetSpec { addresses: vec!["10.0.1.0/24".into()], prefix: 24, ..Default::default() }];
    let mut a = alloc(&s);
    let first: Vec<String> = allocate_n(&mut a, 20);
    assert!(first.iter().all(|s| s.starts_with("10.0.0.")), "{first:?}");
    assert!(allocate_n(&mut a, 1)[0].starts_with("10.0.1."));
}

/// What the test knows of one address: in use, or free and when (by release sequence, or never) it was released.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Known {
    InUse,
    Never,
    Aged,
    Released(u64),
}

/// The order `LeastRecentlyReleased` promises, computed the slow way.
struct Model {
    known: BTreeMap<u128, Known>,
    next: u64,
}

impl Model {
    fn expected(&self, subnet: &RangeSet) -> Option<u128> {
        let free = || self.known.iter().filter(|(v, _)| subnet.contains(**v));
        free()
            .find(|(_, k)| **k == Known::Never)
            .or_else(|| free().find(|(_, k)| **k == Known::Aged))
            .map(|(v, _)| *v)
            .or_else(|| {
                let released =
                    free().filter_map(|(v, k)| if let Known::Released(n) = k { Some((*n, *v)) } else { None });
                released.min().map(|(_, v)| v)
            })
    }

    fn release(&mut self, v: u128) {
        self.known.insert(v, Known::Released(self.next));
        self.next += 1;
        let mut window: Vec<(u64, u128)> = self
            .known
            .iter()
            .filter_map(|(v, k)| if let Known::Released(n) = k { Some((*n, *v)) } else { None })
            .collect();
        if window.len() > RELEASE_WINDOW {
            window.sort();
            self.known.insert(window[0].1, Known::Aged);
        }
    }
}

#[test]
fn least_recently_released_follows_its_model_through_thousands_of_random_steps_in_two_subnets() {
    let mut s = with(spec(&["10.0.0.0/22"], 22, ""), AllocationStrategy::LeastRecentlyReleased);
    s.subnets = vec![IpSubnetSpec { addresses: vec!["10.0.8.0/25".into()], prefix: 25, ..Default::default() }];
    let config = IpPoolConfig::new(&s).unwrap();
    let subnets: Vec<RangeSet> = config.subnet_allocatable().cloned().collect();
    let mut a = IpPoolAllocator::new(config.clone());
    let mut model = Model {
        known: config.allocatable().iter().flat_map(|(s, e)| s..=e).map(|v| (v, Known::Never)).collect(),
        next: 0,
    };
    let mut rng = SplitMix64::new(36);
    let mut in_use: Vec<u128> = Vec::new();
    let (mut aged, mut second_subnet_used) = (false, false);
    for step in 0..6_000 {
        // Alternating phases that fill the pool and empty it, so that the window overflows and the second subnet is used.
        let filling = (step / 1_500) % 2 == 0;
        let roll = rng.at_most(9);
        if (filling && roll < 7) || (!filling && roll < 2) || in_use.is_empty() {
            let subnet =
                subnets.iter().find(|s| s.iter().flat_map(|(a, b)| a..=b).any(|v| model.known[&v] != Known::InUse));
            let expected = subnet.and_then(|s| model.expected(s));
            let got = a.allocate().ok().map(crate::ipam::address::to_u128);
            assert_eq!(got, expected, "step {step}");
            if let Some(v) = got {
                model.known.insert(v, Known::InUse);
                in_use.push(v);
            }
        } else if roll < 9 || !filling {
            let i = usize::try_from(rng.at_most(in_use.len() as u128 - 1)).unwrap();
            let v = in_use.swap_remove(i);
            a.release(Some(config.family().addr(v)));
            model.release(v);
        } else {
            // A pin or a restored IPAddress takes a free address, wherever it is in the order.
            let free: Vec<u128> = model.known.iter().filter(|(_, k)| **k != Known::InUse).map(|(v, _)| *v).collect();
            if let Some(v) = free.get(usize::try_from(rng.at_most(free.len().max(1) as u128 - 1)).unwrap()) {
                a.reserve(config.family().addr(*v)).unwrap();
                model.known.insert(*v, Known::InUse);
                in_use.push(*v);
            }
        }
        // The strategy's partition is of the free set, exactly.
        let parts = a.recency().unwrap();
        let free = a.free();
        let mut union = RangeSet::new();
        let mut count = 0u128;
        for (fresh, stale, recent) in &parts {
            count += fresh.len() + stale.len() + recent.len() as u128;
            union = union.union(fresh).union(stale).union(&RangeSet::from_ranges(recent.iter().map(|v| (*v, *v))));
        }
        assert_eq!((union, count), (free.clone(), free.len()), "step {step}");
        aged |= model.known.values().any(|k| *k == Known::Aged);
        second_subnet_used |= in_use.iter().any(|v| subnets[1].contains(*v));
    }
    assert!(
        aged && second_subnet_used,
        "the steps reach the window's end ({aged}) and the second subnet ({second_subnet_used})"
    );
}
