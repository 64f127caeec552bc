//! Allocator benchmarks (`make bench-allocator`). Each group measures our allocator and the baseline side by side in
//! one run; docs/performance.md records the medians and ratios.
//!
//! Baseline: the Go provider's `FindFreeAddress`, a linear first-free walk from the start of the pool that steps over
//! the in-use set one address at a time. It is given its in-use set already built (a sorted set), so the ratio is a
//! lower bound: the Go provider also lists and parses every IPAddress on each allocation.

use std::collections::BTreeSet;
use std::hint::black_box;
use std::net::{IpAddr, Ipv6Addr};
use std::time::Duration;

use capi_ipam::ipam::{
    Allocation, AllocationStrategy, IpPoolAllocator, IpPoolConfig, IpPoolSpec, IpSubnetSpec, PrefixPoolAllocator,
    PrefixPoolConfig, PrefixPoolSpec,
};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

fn pool_10_0_0_0_8_spec() -> IpPoolSpec {
    IpPoolSpec { addresses: vec!["10.0.0.0/8".into()], prefix: 8, ..Default::default() }
}

fn pool_10_0_0_0_8() -> IpPoolConfig {
    IpPoolConfig::new(&pool_10_0_0_0_8_spec()).expect("valid pool")
}

/// A pool of 32 subnets: 31 of one address each (11.0.0.0 to 11.0.0.30, /32), then 10.0.0.0/8; with the 31 addresses.
fn pool_of_32_subnets() -> (IpPoolConfig, Vec<IpAddr>) {
    let tiny: Vec<String> = (0..31).map(|i| format!("11.0.0.{i}")).collect();
    let subnets = tiny[1..]
        .iter()
        .map(|a| IpSubnetSpec { addresses: vec![a.clone()], prefix: 32, ..Default::default() })
        .chain(std::iter::once(IpSubnetSpec { addresses: vec!["10.0.0.0/8".into()], prefix: 8, ..Default::default() }))
        .collect();
    let spec = IpPoolSpec { addresses: vec![tiny[0].clone()], prefix: 32, subnets, ..Default::default() };
    let full = tiny.iter().map(|a| a.parse().expect("address")).collect();
    (IpPoolConfig::new(&spec).expect("valid pool"), full)
}

/// The first `n` allocatable addresses of the pool: what lowest-first allocation leaves behind.
fn dense_in_use(config: &IpPoolConfig, n: u128) -> Vec<u128> {
    let start = config.allocatable().first().expect("non-empty pool");
    (start..start + n).collect()
}

/// The Go provider's walk: for each pool range, step from its start while the address is in use.
fn linear_first_free(pool: &IpPoolConfig, in_use: &BTreeSet<u128>) -> Option<u128> {
    for (start, end) in pool.allocatable().iter() {
        let mut v = start;
        loop {
            if !in_use.contains(&v) {
                return Some(v);
            }
            if v == end {
                break;
            }
            v += 1;
        }
    }
    None
}

fn allocation(c: &mut Criterion) {
    let config = pool_10_0_0_0_8();
    let mut group = c.benchmark_group("allocation");
    group.sample_size(20).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(3));
    for (label, used) in [("1e3", 1_000u128), ("1e5", 100_000), ("1e6", 1_000_000)] {
        let in_use = dense_in_use(&config, used);
        let family = config.family();

        // Ours: allocate the lowest free address, then release it so every iteration sees the same state.
        let mut ours = IpPoolAllocator::rebuild(config.clone(), in_use.iter().map(|v| Some(family.addr(*v))));
        group.bench_function(BenchmarkId::new("ours", label), |b| {
            b.iter(|| {
                let ip = ours.allocate().expect("free address");
                ours.release(Some(black_box(ip)));
            })
        });

        // Ours with a fragmented in-use set: every other address of the first 2·used, so the free set has `used`
        // ranges; allocation must stay O(log n).
        let fragmented = (0..used).map(|i| Some(family.addr(in_use[0] + 2 * i)));
        let mut ours_fragmented = IpPoolAllocator::rebuild(config.clone(), fragmented);
        group.bench_function(BenchmarkId::new("ours-fragmented", label), |b| {
            b.iter(|| {
                let ip = ours_fragmented.allocate().expect("free address");
                ours_fragmented.release(Some(black_box(ip)));
            })
        });

        // Ours, a pool of 32 subnets (D19) whose first 31 (one address each) are full: the same /8 as the last
        // subnet, with the same addresses in use; the full subnets are skipped in O(log subnets).
        let (subnets, full) = pool_of_32_subnets();
        let in_all = full.into_iter().chain(in_use.iter().map(|v| family.addr(*v))).map(Some);
        let mut ours_subnets = IpPoolAllocator::rebuild(subnets, in_all);
        group.bench_function(BenchmarkId::new("ours-32-subnets", label), |b| {
            b.iter(|| {
                let ip = ours_subnets.allocate().expect("free address");
                ours_subnets.release(Some(black_box(ip)));
            })
        });

        // The other allocation strategies (D20): the same /8, the same addresses in use. LeastRecentlyReleased hands
        // out a never-used address each time and ages a release out of its window once it is full.
        for (name, strategy) in
            [("ours-random", AllocationStrategy::Random), ("ours-lrr", AllocationStrategy::LeastRecentlyReleased)]
        {
            let config = IpPoolConfig::new(&IpPoolSpec { allocation_strategy: strategy, ..pool_10_0_0_0_8_spec() })
                .expect("valid pool");
            let mut ours = IpPoolAllocator::rebuild(config, in_use.iter().map(|v| Some(family.addr(*v))));
            group.bench_function(BenchmarkId::new(name, label), |b| {
                b.iter(|| {
                    let ip = ours.allocate().expect("free address");
                    ours.release(Some(black_box(ip)));
                })
            });
        }

        let set: BTreeSet<u128> = in_use.iter().copied().collect();
        group.bench_function(BenchmarkId::new("linear-scan", label), |b| {
            b.iter(|| black_box(linear_first_free(&config, &set)))
        });
    }

    // Random's hard case: a /16 with 1 address in 1,024 free (64 in all, spread out): a draw over the span misses 1,023
    // times in 1,024, so most picks count their way to the k-th free address after 64 misses.
    let spec = IpPoolSpec {
        addresses: vec!["10.0.0.0/16".into()],
        prefix: 16,
        allocation_strategy: AllocationStrategy::Random,
        ..Default::default()
    };
    let config = IpPoolConfig::new(&spec).expect("valid pool");
    let family = config.family();
    let taken = dense_in_use(&config, config.total()).into_iter().filter(|v| v % 1024 != 0);
    let mut ours = IpPoolAllocator::rebuild(config, taken.map(|v| Some(family.addr(v))));
    group.bench_function(BenchmarkId::new("ours-random", "1-in-1024-free"), |b| {
        b.iter(|| {
            let ip = ours.allocate().expect("free address");
            ours.release(Some(black_box(ip)));
        })
    });
    group.finish();
}

fn status(c: &mut Criterion) {
    let mut group = c.benchmark_group("status");
    group.sample_size(20).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(3));

    let config = pool_10_0_0_0_8();
    let family = config.family();
    let addresses: Vec<IpAddr> = dense_in_use(&config, 1_000_000).into_iter().map(|v| family.addr(v)).collect();
    let state = IpPoolAllocator::rebuild(config.clone(), addresses.iter().map(|a| Some(*a)));
    group.bench_function(BenchmarkId::new("ours", "ipv4-1e6-used"), |b| b.iter(|| black_box(state.counts())));
    group.bench_function(BenchmarkId::new("rebuild-from-addresses", "ipv4-1e6-used"), |b| {
        b.iter(|| black_box(IpPoolAllocator::rebuild(config.clone(), addresses.iter().map(|a| Some(*a))).counts()))
    });

    // An IPv6 /48 (2^80 addresses) with 1e6 in use: the counts are exact up to the int64 cap, independent of its size.
    let v6 = IpPoolSpec { addresses: vec!["fd00::/48".into()], prefix: 48, ..Default::default() };
    let v6_config = IpPoolConfig::new(&v6).expect("valid pool");
    let v6_addresses: Vec<IpAddr> =
        dense_in_use(&v6_config, 1_000_000).into_iter().map(|v| v6_config.family().addr(v)).collect();
    let v6_state = IpPoolAllocator::rebuild(v6_config.clone(), v6_addresses.iter().map(|a| Some(*a)));
    group.bench_function(BenchmarkId::new("ours", "ipv6-48-1e6-used"), |b| b.iter(|| black_box(v6_state.counts())));
    group.bench_function(BenchmarkId::new("rebuild-from-addresses", "ipv6-48-1e6-used"), |b| {
        b.iter(|| {
            black_box(IpPoolAllocator::rebuild(v6_config.clone(), v6_addresses.iter().map(|a| Some(*a))).counts())
        })
    });
    // A spec edit recomputes the allocatable set and the free set: O(ranges), whatever the pool's size.
    group.bench_function(BenchmarkId::new("spec-edit", "ipv6-48-1e6-used"), |b| {
        let mut s = v6_state.clone();
        let mut toggle = false;
        b.iter(|| {
            toggle = !toggle;
            let mut spec = v6.clone();
            spec.gateway = toggle.then(|| "fd00::ffff:ffff".to_owned());
            s.apply_config(IpPoolConfig::new(&spec).expect("valid pool")).expect("the same family");
            black_box(s.counts())
        })
    });
    group.finish();
}

fn prefix_allocation(c: &mut Criterion) {
    let mut group = c.benchmark_group("prefix-allocation");
    group.sample_size(20).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(3));
    let spec =
        PrefixPoolSpec { prefixes: vec!["fd00::/32".into()], allocation_prefix_length: 64, ..Default::default() };
    let config = PrefixPoolConfig::new(&spec).expect("valid pool");
    let base = u128::from("fd00::".parse::<Ipv6Addr>().expect("address"));
    // 1e5 /64s, every other one, so that the free children are as fragmented as they get.
    let allocations: Vec<Option<Allocation>> =
        (0..100_000u128).map(|i| Allocation::new(Ipv6Addr::from(base + ((2 * i) << 64)), 64)).collect();
    let mut state = PrefixPoolAllocator::rebuild(config.clone(), allocations.iter().copied());
    group.bench_function(BenchmarkId::new("ours", "1e5-of-64-in-32"), |b| {
        b.iter(|| {
            let p = state.allocate().expect("free prefix");
            state.release(Allocation::new(black_box(p), 64));
        })
    });
    group.bench_function(BenchmarkId::new("rebuild", "1e5-of-64-in-32"), |b| {
        b.iter(|| black_box(PrefixPoolAllocator::rebuild(config.clone(), allocations.iter().copied()).counts()))
    });
    group.finish();
}

criterion_group!(benches, allocation, status, prefix_allocation);
criterion_main!(benches);
