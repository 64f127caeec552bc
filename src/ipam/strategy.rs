//! Allocation strategies of IP pools (docs/compatibility.md D20): which free address of a subnet is handed out next.
//!
//! - `Sequential`, the Go provider's and the default: the lowest free address.
//! - `Random`, Metal3's: a free address chosen uniformly: O(log n) per draw over the subnet's free span, and when
//!   under 1 in 16 of that span is free, a count through its free ranges (see [`pick_uniform`]).
//! - `LeastRecentlyReleased`: never-used addresses first, lowest first; then the addresses released longest ago, so a
//!   switch's ARP cache entry for a released address has the longest time to expire before the address comes back.
//!
//! The strategy only orders the free addresses of one subnet; which subnet comes first, and which addresses are free,
//! is the allocator's.

use std::collections::{BTreeMap, HashMap};

use super::RangeSet;

/// `spec.allocationStrategy`, spelled as the spec writes it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum AllocationStrategy {
    #[default]
    Sequential,
    Random,
    LeastRecentlyReleased,
}

impl AllocationStrategy {
    /// As written in the spec.
    pub fn name(self) -> &'static str {
        match self {
            AllocationStrategy::Sequential => "Sequential",
            AllocationStrategy::Random => "Random",
            AllocationStrategy::LeastRecentlyReleased => "LeastRecentlyReleased",
        }
    }
}

/// The most releases whose order `LeastRecentlyReleased` keeps per pool: older ones are handed out by address, after
/// the never-used ones and before the ones in the window. A B-tree entry and a hash-map entry each, about 110 bytes:
/// at most ~60 KiB per pool.
pub const RELEASE_WINDOW: usize = 512;

/// Draws over a subnet's free span before a uniform pick counts its way to one: a miss costs O(log n), and 64 misses
/// in a row are rare unless under 1 in 16 of the span is free, when counting is cheap (few free ranges) or rarer still.
const RANDOM_ATTEMPTS: usize = 64;

/// The per-strategy state of one pool's allocator.
#[derive(Clone, Debug)]
pub(super) enum Order {
    Sequential,
    Random(SplitMix64),
    LeastRecentlyReleased(Box<Recency>),
}

impl Order {
    /// The state for `strategy` over the free sets `free` (one per subnet), keeping what `previous` knew: the random
    /// stream, or which free addresses were used before and when they were released. Without that knowledge (a new
    /// allocator: a restart or a new leader) an address below the highest one in use of its subnet, `highest_used`,
    /// counts as used before.
    pub(super) fn new(
        strategy: AllocationStrategy,
        previous: Order,
        free: &[RangeSet],
        subnet_of: impl Fn(u128) -> Option<usize>,
        highest_used: impl Fn(usize) -> Option<u128>,
        seed: u64,
    ) -> Order {
        match (strategy, previous) {
            (AllocationStrategy::Sequential, _) => Order::Sequential,
            (AllocationStrategy::Random, Order::Random(rng)) => Order::Random(rng),
            (AllocationStrategy::Random, _) => Order::Random(SplitMix64::new(seed)),
            (AllocationStrategy::LeastRecentlyReleased, Order::LeastRecentlyReleased(known)) => {
                Order::LeastRecentlyReleased(Box::new(Recency::carried(*known, free, subnet_of)))
            }
            (AllocationStrategy::LeastRecentlyReleased, _) => {
                Order::LeastRecentlyReleased(Box::new(Recency::guessed(free, highest_used)))
            }
        }
    }

    /// The free address of `subnet` (whose free set is `free`, not empty) to hand out next.
    pub(super) fn pick(&mut self, subnet: usize, free: &RangeSet) -> Option<u128> {
        match self {
            Order::Sequential => free.first(),
            Order::Random(rng) => pick_uniform(free, rng),
            Order::LeastRecentlyReleased(recency) => recency.pick(subnet),
        }
    }

    /// `v` of `subnet` left the free set (handed out, reserved, or found in use).
    pub(super) fn taken(&mut self, subnet: usize, v: u128) {
        if let Order::LeastRecentlyReleased(recency) = self {
            recency.taken(subnet, v);
        }
    }

    /// `v` of `subnet` came back to the free set: its last holder released it.
    pub(super) fn released(&mut self, subnet: usize, v: u128) {
        if let Order::LeastRecentlyReleased(recency) = self {
            recency.released(subnet, v);
        }
    }

    /// `LeastRecentlyReleased`'s partition of each subnet's free set (for tests): never used, released before the
    /// window, and the window's releases oldest first.
    #[cfg(test)]
    pub(super) fn recency(&self) -> Option<Vec<(RangeSet, RangeSet, Vec<u128>)>> {
        let Order::LeastRecentlyReleased(r) = self else { return None };
        Some(
            (0..r.fresh.len())
                .map(|s| (r.fresh[s].clone(), r.stale[s].clone(), r.recent[s].values().copied().collect()))
                .collect(),
        )
    }
}

/// A free value of `free` chosen uniformly: draws over its span until one is free, and after [`RANDOM_ATTEMPTS`]
/// misses the k-th free value for a uniform k. Each way picks every free value alike, so together they do too.
fn pick_uniform(free: &RangeSet, rng: &mut SplitMix64) -> Option<u128> {
    let (lowest, highest) = (free.first()?, free.last()?);
    for _ in 0..RANDOM_ATTEMPTS {
        let v = lowest + rng.at_most(highest - lowest);
        if free.contains(v) {
            return Some(v);
        }
    }
    free.nth(rng.at_most(free.len() - 1))
}

/// What `LeastRecentlyReleased` knows of each subnet's free addresses: `fresh ⊎ stale ⊎ recent = free`.
#[derive(Clone, Debug)]
pub(super) struct Recency {
    /// Never released (as far as this allocator knows): handed out first, lowest first.
    fresh: Vec<RangeSet>,
    /// Released before the window (or before this allocator was made): next, lowest first.
    stale: Vec<RangeSet>,
    /// The last [`RELEASE_WINDOW`] releases still free, by release sequence: last, oldest first.
    recent: Vec<BTreeMap<u64, u128>>,
    /// The release sequence of each value in `recent`.
    sequence_of: HashMap<u128, u64>,
    next_sequence: u64,
}

impl Recency {
    /// A new allocator's guess: what lies below the highest address in use of a subnet was used before.
    fn guessed(free: &[RangeSet], highest_used: impl Fn(usize) -> Option<u128>) -> Self {
        let (mut fresh, mut stale) = (Vec::with_capacity(free.len()), Vec::with_capacity(free.len()));
        for (s, f) in free.iter().enumerate() {
            let below = highest_used(s).map_or_else(RangeSet::new, |top| f.clipped(0, top));
            fresh.push(f.difference(&below));
            stale.push(below);
        }
        Self { recent: vec![BTreeMap::new(); free.len()], fresh, stale, sequence_of: HashMap::new(), next_sequence: 0 }
    }

    /// `known` carried over a config change: what it knew of addresses still free, under the new subnets; addresses
    /// new to the pool are fresh.
    fn carried(known: Recency, free: &[RangeSet], subnet_of: impl Fn(u128) -> Option<usize>) -> Self {
        let stale_before = known.stale.iter().fold(RangeSet::new(), |all, s| all.union(s));
        let mut recent = vec![BTreeMap::new(); free.len()];
        let mut sequence_of = HashMap::new();
        let mut recent_values = RangeSet::new();
        for (v, sequence) in known.sequence_of {
            if let Some(s) = subnet_of(v).filter(|s| free[*s].contains(v)) {
                recent[s].insert(sequence, v);
                sequence_of.insert(v, sequence);
                recent_values.insert(v);
            }
        }
        let stale: Vec<RangeSet> = free.iter().map(|f| f.intersection(&stale_before)).collect();
        let fresh = free.iter().zip(&stale).map(|(f, st)| f.difference(st).difference(&recent_values)).collect();
        Self { fresh, stale, recent, sequence_of, next_sequence: known.next_sequence }
    }

    fn pick(&self, subnet: usize) -> Option<u128> {
        self.fresh[subnet]
            .first()
            .or_else(|| self.stale[subnet].first())
            .or_else(|| self.recent[subnet].first_key_value().map(|(_, v)| *v))
    }

    fn taken(&mut self, subnet: usize, v: u128) {
        if self.fresh[subnet].remove(v) || self.stale[subnet].remove(v) {
            return;
        }
        if let Some(sequence) = self.sequence_of.remove(&v) {
            self.recent[subnet].remove(&sequence);
        }
    }

    fn released(&mut self, subnet: usize, v: u128) {
        let sequence = self.next_sequence;
        self.next_sequence += 1;
        self.recent[subnet].insert(sequence, v);
        self.sequence_of.insert(v, sequence);
        if self.sequence_of.len() > RELEASE_WINDOW {
            self.age_oldest();
        }
    }

    /// Moves the oldest release of the window to its subnet's stale set (the oldest of the subnets' oldest: a pool has
    /// at most 33 subnets).
    fn age_oldest(&mut self) {
        let oldest = (0..self.recent.len())
            .filter_map(|s| self.recent[s].first_key_value().map(|(sequence, _)| (*sequence, s)))
            .min();
        if let Some((_, s)) = oldest
            && let Some((_, v)) = self.recent[s].pop_first()
        {
            self.sequence_of.remove(&v);
            self.stale[s].insert(v);
        }
    }
}

/// SplitMix64: small, fast and good enough to spread addresses (not to keep them secret). Seeded from the pool's state,
/// so that the allocator stays pure and a simulation run replays.
#[derive(Clone, Debug, Default)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed ^ 0x5851_f42d_4c95_7f2d)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A value in `0..=max`, every one alike (draws that would favour the low values are drawn again).
    pub fn at_most(&mut self, max: u128) -> u128 {
        if let Ok(max) = u64::try_from(max) {
            let Some(n) = max.checked_add(1) else { return u128::from(self.next_u64()) };
            // 2^64 mod n values at the top would make the low ones likelier.
            let skip = n.wrapping_neg() % n;
            loop {
                let x = self.next_u64();
                if x <= u64::MAX - skip {
                    return u128::from(x % n);
                }
            }
        }
        let draw = |rng: &mut Self| (u128::from(rng.next_u64()) << 64) | u128::from(rng.next_u64());
        let Some(n) = max.checked_add(1) else { return draw(self) };
        let skip = n.wrapping_neg() % n;
        loop {
            let x = draw(self);
            if x <= u128::MAX - skip {
                return x % n;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_covers_its_range_evenly_and_stays_inside_it() {
        let mut rng = SplitMix64::new(7);
        let mut seen = [0u32; 5];
        for _ in 0..50_000 {
            let v = rng.at_most(4);
            seen[usize::try_from(v).unwrap()] += 1;
        }
        assert!(seen.iter().all(|n| (9_000..11_000).contains(n)), "uneven: {seen:?}");
        for max in [0, 1, u128::from(u64::MAX), u128::from(u64::MAX) + 1, u128::MAX - 1, u128::MAX] {
            for _ in 0..100 {
                assert!(rng.at_most(max) <= max);
            }
        }
        assert_eq!(rng.at_most(0), 0);
    }

    #[test]
    fn a_uniform_pick_reaches_every_free_value_alike_even_when_most_of_the_span_is_taken() {
        // 4 free values in a span of 10,000: nearly every draw misses, so most picks count their way there.
        let free = RangeSet::from_ranges([(100, 100), (5_000, 5_001), (10_099, 10_099)]);
        let mut rng = SplitMix64::new(1);
        let mut seen: HashMap<u128, u32> = HashMap::new();
        for _ in 0..8_000 {
            *seen.entry(pick_uniform(&free, &mut rng).unwrap()).or_default() += 1;
        }
        assert_eq!(seen.len(), 4, "{seen:?}");
        assert!(seen.values().all(|n| (1_700..2_300).contains(n)), "uneven: {seen:?}");
        assert_eq!(pick_uniform(&RangeSet::new(), &mut rng), None);
    }
}
