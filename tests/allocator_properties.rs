//! Property tests: the allocator against a naive model (sorted sets of integers) for random pools, exclusions,
//! gateways, reserved-address settings, allocations, reservations, releases and pool edits. The same addresses must
//! come out in the same order and the counts must agree after every step. Pools of several subnets (docs/compatibility.md
//! D19) against the same model, which takes the lowest free address of the first subnet that has one; and with the
//! other allocation strategies (D20), which must take a free address of that subnet.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv6Addr};

use capi_ipam::ipam::address::{Family, block, to_u128};
use capi_ipam::ipam::prefix_pool::PrefixReserveError;
use capi_ipam::ipam::{
    Allocation, AllocationStrategy, IpPoolAllocator, IpPoolConfig, IpPoolSpec, IpSubnetSpec, PoolCounts,
    PrefixPoolAllocator, PrefixPoolConfig, PrefixPoolSpec, ReserveError,
};
use proptest::prelude::*;

/// Pools live in a 64-value window; the window sits in the middle or at either edge of the address space.
const WINDOW: u128 = 64;

#[derive(Clone, Debug)]
struct Space {
    family: Family,
    base: u128,
}

impl Space {
    fn addr(&self, offset: u128) -> IpAddr {
        self.family.addr(self.base + offset)
    }
}

fn space() -> impl Strategy<Value = Space> {
    prop_oneof![
        Just(Space { family: Family::V4, base: to_u128("10.0.0.0".parse().unwrap()) }),
        Just(Space { family: Family::V4, base: 0 }),
        Just(Space { family: Family::V4, base: u32::MAX as u128 - (WINDOW - 1) }),
        Just(Space { family: Family::V6, base: to_u128("fd00::".parse().unwrap()) }),
        Just(Space { family: Family::V6, base: 0 }),
        Just(Space { family: Family::V6, base: u128::MAX - (WINDOW - 1) }),
    ]
}

/// One entry of the address grammar inside the window, as (text, values).
fn entry(sp: Space) -> impl Strategy<Value = (String, Vec<u128>)> {
    let bits = sp.family.bits();
    prop_oneof![
        (0..WINDOW).prop_map({
            let sp = sp.clone();
            move |o| (sp.addr(o).to_string(), vec![sp.base + o])
        }),
        (0..WINDOW, 0..WINDOW).prop_map({
            let sp = sp.clone();
            move |(a, b)| {
                let (a, b) = (a.min(b), a.max(b));
                (format!("{}-{}", sp.addr(a), sp.addr(b)), (sp.base + a..=sp.base + b).collect())
            }
        }),
        (0..WINDOW, 0u8..4).prop_map(move |(o, host_bits)| {
            let len = bits - host_bits;
            let (s, e) = block(sp.family, sp.base + o, len);
            (format!("{}/{}", sp.addr(o), len), (s..=e).collect())
        }),
    ]
}

#[derive(Clone, Debug)]
struct PoolCase {
    spec: IpPoolSpec,
    /// The allocatable set of each subnet, in the order they are used.
    subnets: Vec<BTreeSet<u128>>,
}

impl PoolCase {
    fn allocatable(&self) -> BTreeSet<u128> {
        self.subnets.iter().flatten().copied().collect()
    }
}

fn pool(sp: Space) -> impl Strategy<Value = PoolCase> {
    let bits = sp.family.bits();
    (
        prop::collection::vec(entry(sp.clone()), 1..4),
        prop::collection::vec(entry(sp.clone()), 0..3),
        prop::option::of(0..WINDOW),
        any::<bool>(),
        (bits - 8)..=bits,
    )
        .prop_map(move |(addresses, excluded, gateway, reserved, prefix)| {
            let mut set: BTreeSet<u128> = addresses.iter().flat_map(|(_, v)| v.iter().copied()).collect();
            let lowest = *set.iter().next().expect("at least one entry");
            for (_, v) in &excluded {
                for x in v {
                    set.remove(x);
                }
            }
            let (net, bcast) = block(sp.family, lowest, prefix);
            let rfc3021 = sp.family == Family::V4 && prefix >= 31;
            if !(reserved || rfc3021) {
                set.remove(&net);
                if sp.family == Family::V4 {
                    set.remove(&bcast);
                }
            }
            if let Some(g) = gateway {
                set.remove(&(sp.base + g));
            }
            PoolCase {
                spec: IpPoolSpec {
                    addresses: addresses.into_iter().map(|(t, _)| t).collect(),
                    prefix: i64::from(prefix),
                    gateway: gateway.map(|g| sp.addr(g).to_string()),
                    excluded_addresses: excluded.into_iter().map(|(t, _)| t).collect(),
                    allocate_reserved_ip_addresses: reserved,
                    subnets: Vec::new(),
                    allocation_strategy: AllocationStrategy::Sequential,
                },
                subnets: vec![set],
            }
        })
}

/// The width of the window each subnet of a several-subnet pool lives in (its own /24 or /120).
const SUBNET_STRIDE: u128 = 256;

/// One subnet in the window at `sp.base + window·256`: its entries, exclusions, gateway (anywhere in `windows`
/// windows: a gateway of one subnet is never handed out by another) and prefix (its block stays in its window).
#[allow(clippy::type_complexity)]
fn subnet(
    sp: Space,
    window: u128,
    windows: u128,
) -> impl Strategy<Value = (Vec<(String, Vec<u128>)>, Vec<(String, Vec<u128>)>, Option<u128>, u8)> {
    let bits = sp.family.bits();
    let own = Space { family: sp.family, base: sp.base + window * SUBNET_STRIDE };
    (
        prop::collection::vec(entry(own.clone()), 1..3),
        prop::collection::vec(entry(own), 0..2),
        prop::option::of((0..windows, 0..WINDOW).prop_map(|(w, o)| w * SUBNET_STRIDE + o)),
        (bits - 6)..=bits,
    )
}

/// A pool of two to four subnets in distinct windows, listed in any order, with pool-wide exclusions over every window.
fn multi_pool(sp: Space) -> impl Strategy<Value = PoolCase> {
    let windows = Just(vec![0u128, 1, 2, 3]).prop_shuffle();
    (windows, 2usize..=4, any::<bool>()).prop_flat_map(move |(order, n, reserved)| {
        let sp = sp.clone();
        let subnets: Vec<_> = order[..n].iter().map(|w| subnet(sp.clone(), *w, 4)).collect();
        let pool_excluded = prop::collection::vec((0..4u128, 0..WINDOW).prop_map(|(w, o)| w * SUBNET_STRIDE + o), 0..4);
        (subnets, pool_excluded).prop_map(move |(subnets, pool_excluded)| {
            let gateways: Vec<u128> = subnets.iter().filter_map(|s| s.2).map(|g| sp.base + g).collect();
            let sets = subnets
                .iter()
                .map(|(addresses, excluded, _, prefix)| {
                    let mut set: BTreeSet<u128> = addresses.iter().flat_map(|(_, v)| v.iter().copied()).collect();
                    let (net, bcast) = block(sp.family, *set.iter().next().expect("an entry"), *prefix);
                    let rfc3021 = sp.family == Family::V4 && *prefix >= 31;
                    let pool_wide = pool_excluded.iter().map(|o| sp.base + o);
                    for v in
                        excluded.iter().flat_map(|(_, v)| v.iter().copied()).chain(pool_wide).chain(gateways.clone())
                    {
                        set.remove(&v);
                    }
                    if !(reserved || rfc3021) {
                        set.remove(&net);
                        if sp.family == Family::V4 {
                            set.remove(&bcast);
                        }
                    }
                    set
                })
                .collect();
            let fields: Vec<IpSubnetSpec> = subnets
                .iter()
                .map(|(addresses, excluded, gateway, prefix)| IpSubnetSpec {
                    addresses: addresses.iter().map(|(t, _)| t.clone()).collect(),
                    prefix: i64::from(*prefix),
                    gateway: gateway.map(|g| sp.addr(g).to_string()),
                    excluded_addresses: excluded.iter().map(|(t, _)| t.clone()).collect(),
                })
                .collect();
            let top = fields[0].clone();
            PoolCase {
                spec: IpPoolSpec {
                    addresses: top.addresses,
                    prefix: top.prefix,
                    gateway: top.gateway,
                    // The top-level exclusions are the pool's: its own and the pool-wide ones.
                    excluded_addresses: top
                        .excluded_addresses
                        .into_iter()
                        .chain(pool_excluded.iter().map(|o| sp.addr(*o).to_string()))
                        .collect(),
                    allocate_reserved_ip_addresses: reserved,
                    subnets: fields[1..].to_vec(),
                    allocation_strategy: AllocationStrategy::Sequential,
                },
                subnets: sets,
            }
        })
    })
}

#[derive(Clone, Debug)]
enum Op {
    Allocate,
    Reserve(u128),
    /// An existing IPAddress, `None` for an unparsable one.
    Record(Option<u128>),
    Release(usize),
    Edit(PoolCase),
}

fn ops(sp: Space) -> impl Strategy<Value = Vec<Op>> {
    let op = prop_oneof![
        6 => Just(Op::Allocate),
        2 => (0..WINDOW + 8).prop_map(Op::Reserve),
        1 => prop::option::of(0..WINDOW + 8).prop_map(Op::Record),
        3 => any::<usize>().prop_map(Op::Release),
        1 => pool(sp).prop_map(Op::Edit),
    ];
    prop::collection::vec(op, 1..80)
}

/// The naive model: the allocatable set of each subnet and a multiset of held addresses.
struct Model {
    subnets: Vec<BTreeSet<u128>>,
    allocatable: BTreeSet<u128>,
    held: Vec<Option<u128>>,
}

impl Model {
    fn in_use(&self) -> BTreeMap<u128, usize> {
        let mut m = BTreeMap::new();
        for v in self.held.iter().flatten() {
            *m.entry(*v).or_default() += 1;
        }
        m
    }

    fn set(&mut self, case: &PoolCase) {
        self.subnets = case.subnets.clone();
        self.allocatable = case.allocatable();
    }

    /// The lowest free address of the first subnet that has one.
    fn first_free(&self) -> Option<u128> {
        self.first_subnet_free().and_then(|free| free.first().copied())
    }

    /// The free addresses of the first subnet that has one.
    fn first_subnet_free(&self) -> Option<BTreeSet<u128>> {
        let in_use = self.in_use();
        self.subnets
            .iter()
            .map(|s| s.iter().copied().filter(|v| !in_use.contains_key(v)).collect::<BTreeSet<u128>>())
            .find(|free| !free.is_empty())
    }

    fn counts(&self) -> PoolCounts {
        let oor = self.held.iter().filter(|v| !v.is_some_and(|v| self.allocatable.contains(&v))).count() as u64;
        PoolCounts::new(self.allocatable.len() as u128, self.held.len() as u64, oor)
    }
}

fn value_in(sp: &Space, offset: u128) -> u128 {
    // Offsets past a window wrap around to the window's start, staying inside the family (several-subnet pools give
    // `window·256 + offset`).
    let window = offset / SUBNET_STRIDE * SUBNET_STRIDE;
    sp.base + window + offset % SUBNET_STRIDE % WINDOW
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn ip_pools_agree_with_the_naive_model((sp, case, ops) in space().prop_flat_map(|sp| (Just(sp.clone()), pool(sp.clone()), ops(sp)))) {
        agree(&sp, &case, ops, AllocationStrategy::Sequential)?;
    }

    #[test]
    fn pools_of_several_subnets_agree_with_the_naive_model(
        (sp, case, ops) in middle_space().prop_flat_map(|sp| (Just(sp.clone()), multi_pool(sp.clone()), multi_ops(sp)))
    ) {
        agree(&sp, &case, ops, AllocationStrategy::Sequential)?;
    }

    /// docs/compatibility.md D20: whatever the order, only a free address of the first subnet that has one, and none
    /// only when every subnet is full, through edits, reservations and records.
    #[test]
    fn random_and_least_recently_released_pools_hand_out_only_free_addresses_of_the_first_subnet_with_one(
        (sp, case, ops) in middle_space().prop_flat_map(|sp| (Just(sp.clone()), multi_pool(sp.clone()), multi_ops(sp))),
        strategy in prop_oneof![Just(AllocationStrategy::Random), Just(AllocationStrategy::LeastRecentlyReleased)],
    ) {
        agree(&sp, &case, ops, strategy)?;
    }
}

/// The middle of each family's space, where four windows of subnets fit.
fn middle_space() -> impl Strategy<Value = Space> {
    prop_oneof![
        Just(Space { family: Family::V4, base: to_u128("10.0.0.0".parse().unwrap()) }),
        Just(Space { family: Family::V6, base: to_u128("fd00::".parse().unwrap()) }),
    ]
}

/// The operations of [`ops`] over four windows, with edits to other several-subnet pools.
fn multi_ops(sp: Space) -> impl Strategy<Value = Vec<Op>> {
    let value = (0..4u128, 0..WINDOW + 8).prop_map(|(w, o)| w * SUBNET_STRIDE + o);
    let op = prop_oneof![
        6 => Just(Op::Allocate),
        2 => value.clone().prop_map(Op::Reserve),
        1 => prop::option::of(value).prop_map(Op::Record),
        3 => any::<usize>().prop_map(Op::Release),
        1 => multi_pool(sp.clone()).prop_map(Op::Edit),
        1 => pool(sp).prop_map(Op::Edit),
    ];
    prop::collection::vec(op, 1..80)
}

/// Runs `ops` on the allocator and the model, comparing every answer and the counts after every step. Every spec gets
/// `strategy`; a `Sequential` pool's addresses must be the model's, another's must be free ones of the same subnet.
fn agree(sp: &Space, case: &PoolCase, ops: Vec<Op>, strategy: AllocationStrategy) -> Result<(), TestCaseError> {
    let config = |case: &PoolCase| {
        IpPoolConfig::new(&IpPoolSpec { allocation_strategy: strategy, ..case.spec.clone() })
            .expect("generated specs parse")
    };
    let mut model = Model { subnets: Vec::new(), allocatable: BTreeSet::new(), held: Vec::new() };
    model.set(case);
    let mut real = IpPoolAllocator::new(config(case));
    prop_assert_eq!(real.config().total(), model.allocatable.len() as u128);
    for op in ops {
        match op {
            Op::Allocate => {
                let free = model.first_subnet_free();
                let got = real.allocate().ok().map(to_u128);
                if strategy == AllocationStrategy::Sequential {
                    prop_assert_eq!(got, model.first_free());
                } else {
                    prop_assert_eq!(got.is_some(), free.is_some());
                    prop_assert!(got.is_none_or(|v| free.is_some_and(|f| f.contains(&v))), "{:?} is not free", got);
                }
                if let Some(v) = got {
                    model.held.push(Some(v));
                }
            }
            Op::Reserve(o) => {
                let v = value_in(sp, o);
                let got = real.reserve(sp.family.addr(v));
                let expected_ok = model.allocatable.contains(&v) && !model.in_use().contains_key(&v);
                match got {
                    Ok(()) => {
                        prop_assert!(expected_ok);
                        model.held.push(Some(v));
                    }
                    Err(ReserveError::Taken(_)) => prop_assert!(model.allocatable.contains(&v) && !expected_ok),
                    Err(ReserveError::NotAllocatable { .. }) => prop_assert!(!model.allocatable.contains(&v)),
                }
            }
            Op::Record(o) => {
                let v = o.map(|o| value_in(sp, o));
                real.record(v.map(|v| sp.family.addr(v)));
                model.held.push(v);
            }
            Op::Release(i) => {
                if !model.held.is_empty() {
                    let v = model.held.remove(i % model.held.len());
                    real.release(v.map(|v| sp.family.addr(v)));
                }
            }
            Op::Edit(new) => {
                real.apply_config(config(&new)).expect("generated edits keep the family");
                model.set(&new);
            }
        }
        prop_assert_eq!(real.counts(), model.counts());
        prop_assert_eq!(real.is_exhausted(), model.first_free().is_none());
    }
    // Rebuilding from the list of addresses gives the same state.
    let rebuilt =
        IpPoolAllocator::rebuild(real.config().clone(), model.held.iter().map(|v| v.map(|v| sp.family.addr(v))));
    prop_assert_eq!(rebuilt.counts(), real.counts());
    prop_assert_eq!(rebuilt.free(), real.free());
    Ok(())
}

// ---- prefix pools ----------------------------------------------------------------------------------------------

/// Prefix pools live in fd00::/60 (sixteen /64s); allocation lengths 62..=65.
const P_BASE: u128 = 0xfd00u128 << 112;
const UNIT: u128 = 1 << 64;

fn cidr_text(base: u128, len: u8) -> String {
    format!("{}/{}", Ipv6Addr::from(base), len)
}

#[derive(Clone, Debug)]
struct PrefixCase {
    spec: PrefixPoolSpec,
    /// Address ranges of the merged prefixes, minus exclusions (as a sorted set of ranges to check children against).
    pool: Vec<(u128, u128)>,
    excluded: Vec<(u128, u128)>,
    len: u8,
}

fn prefix_case(len: u8) -> impl Strategy<Value = PrefixCase> {
    let prefix = (0u128..16, 60u8..=64).prop_filter_map("prefix longer than the allocation length", move |(o, l)| {
        (l <= len).then(|| {
            let (s, e) = block(Family::V6, P_BASE + o * UNIT, l);
            (cidr_text(s, l), (s, e))
        })
    });
    let excluded = prop_oneof![
        (0u128..16, 0u128..4).prop_map(|(o, x)| {
            let a = P_BASE + o * UNIT + x * 7;
            (Ipv6Addr::from(a).to_string(), (a, a))
        }),
        (0u128..16, 0u128..3).prop_map(|(o, n)| {
            let a = P_BASE + o * UNIT + UNIT / 2;
            let b = a + n * UNIT;
            (format!("{}-{}", Ipv6Addr::from(a), Ipv6Addr::from(b)), (a, b))
        }),
    ];
    (prop::collection::vec(prefix, 1..4), prop::collection::vec(excluded, 0..3)).prop_map(
        move |(prefixes, excluded)| PrefixCase {
            spec: PrefixPoolSpec {
                prefixes: prefixes.iter().map(|(t, _)| t.clone()).collect(),
                allocation_prefix_length: i64::from(len),
                gateway: None,
                excluded_prefixes: excluded.iter().map(|(t, _)| t.clone()).collect(),
            },
            pool: prefixes.iter().map(|(_, r)| *r).collect(),
            excluded: excluded.iter().map(|(_, r)| *r).collect(),
            len,
        },
    )
}

struct PrefixModel {
    case: PrefixCase,
    held: Vec<Option<(u128, u8)>>,
}

impl PrefixModel {
    fn children(&self) -> Vec<u128> {
        let size = 1u128 << (128 - u32::from(self.case.len));
        (0..(16 * UNIT / size)).map(|i| P_BASE + i * size).collect()
    }

    fn range(&self, base: u128) -> (u128, u128) {
        block(Family::V6, base, self.case.len)
    }

    fn allocatable(&self, base: u128, len: u8) -> bool {
        if len != self.case.len {
            return false;
        }
        let (s, e) = self.range(base);
        covered(&self.case.pool, s, e) && !self.case.excluded.iter().any(|(xs, xe)| *xs <= e && s <= *xe)
    }

    fn first_free(&self) -> Option<u128> {
        self.children().into_iter().find(|c| {
            let (s, e) = self.range(*c);
            self.allocatable(*c, self.case.len)
                && !self.held.iter().flatten().any(|(b, l)| {
                    let (hs, he) = block(Family::V6, *b, *l);
                    hs <= e && s <= he
                })
        })
    }

    fn counts(&self) -> PoolCounts {
        let total = self.children().into_iter().filter(|c| self.allocatable(*c, self.case.len)).count() as u128;
        let oor = self.held.iter().filter(|h| !h.is_some_and(|(b, l)| self.allocatable(b, l))).count() as u64;
        PoolCounts::new(total, self.held.len() as u64, oor)
    }
}

/// Whether `s..=e` is covered by the union of `ranges`.
fn covered(ranges: &[(u128, u128)], s: u128, e: u128) -> bool {
    let mut sorted = ranges.to_vec();
    sorted.sort();
    let mut cur = s;
    for (rs, re) in sorted {
        if rs > cur {
            break;
        }
        if re >= cur {
            if re >= e {
                return true;
            }
            cur = re + 1;
        }
    }
    false
}

#[derive(Clone, Debug)]
enum POp {
    Allocate,
    Reserve(u128),
    Record(Option<(u128, u8)>),
    Release(usize),
}

fn p_ops() -> impl Strategy<Value = Vec<POp>> {
    let op = prop_oneof![
        6 => Just(POp::Allocate),
        2 => (0u128..32).prop_map(|i| POp::Reserve(P_BASE + i * UNIT / 2)),
        1 => prop::option::of((0u128..32, 61u8..=66)).prop_map(|o| POp::Record(o.map(|(i, l)| (block(Family::V6, P_BASE + i * UNIT / 2, l).0, l)))),
        3 => any::<usize>().prop_map(POp::Release),
    ];
    prop::collection::vec(op, 1..60)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn prefix_pools_agree_with_the_naive_model((case, ops) in (62u8..=65).prop_flat_map(|len| (prefix_case(len), p_ops()))) {
        let mut real = PrefixPoolAllocator::new(PrefixPoolConfig::new(&case.spec).expect("generated specs parse"));
        let mut model = PrefixModel { case, held: Vec::new() };
        prop_assert_eq!(real.counts(), model.counts());
        for op in ops {
            match op {
                POp::Allocate => {
                    let expected = model.first_free();
                    let got = real.allocate().ok().map(u128::from);
                    prop_assert_eq!(got, expected);
                    if let Some(b) = expected { model.held.push(Some((b, model.case.len))); }
                }
                POp::Reserve(base) => {
                    let aligned = block(Family::V6, base, model.case.len).0 == base;
                    let free = model.first_free_at(base);
                    match real.reserve(Ipv6Addr::from(base)) {
                        Ok(()) => { prop_assert!(aligned && free); model.held.push(Some((base, model.case.len))); }
                        Err(PrefixReserveError::Taken(..)) => prop_assert!(aligned && model.allocatable(base, model.case.len) && !free),
                        Err(PrefixReserveError::NotAllocatable(..)) => prop_assert!(!aligned || !model.allocatable(base, model.case.len)),
                    }
                }
                POp::Record(a) => {
                    real.record(a.map(|(b, l)| Allocation::new(Ipv6Addr::from(b), l).expect("valid length")));
                    model.held.push(a);
                }
                POp::Release(i) => {
                    if !model.held.is_empty() {
                        let a = model.held.remove(i % model.held.len());
                        real.release(a.map(|(b, l)| Allocation::new(Ipv6Addr::from(b), l).expect("valid length")));
                    }
                }
            }
            prop_assert_eq!(real.counts(), model.counts());
        }
    }
}

impl PrefixModel {
    fn first_free_at(&self, base: u128) -> bool {
        let (s, e) = self.range(base);
        self.allocatable(base, self.case.len)
            && !self.held.iter().flatten().any(|(b, l)| {
                let (hs, he) = block(Family::V6, *b, *l);
                hs <= e && s <= he
            })
    }
}
