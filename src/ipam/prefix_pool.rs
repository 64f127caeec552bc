//! Prefix pools (`InClusterPrefixPool`, `GlobalInClusterPrefixPool`): IPv6 child prefixes of one length carved from
//! the merged `prefixes`, lowest address first, never overlapping `excludedPrefixes` or another allocation.
//!
//! Children are numbered by their block index (`base >> (128 − allocationPrefixLength)`). The allocatable children
//! form a range set over those indices, computed once per spec in O(number of ranges); allocation takes its first
//! element, so it costs O(log n) instead of the Go provider's recursive scan with linear set checks.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv6Addr};

use super::address::{Family, block, has_zone, parse_cidr, parse_ip, parse_list};
use super::{PoolCounts, RangeSet};

/// The fields of a prefix pool spec the allocator needs, as written by the user.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PrefixPoolSpec {
    pub prefixes: Vec<String>,
    /// 0 means the default, 64.
    pub allocation_prefix_length: i64,
    pub gateway: Option<String>,
    pub excluded_prefixes: Vec<String>,
}

pub const DEFAULT_ALLOCATION_PREFIX_LENGTH: u8 = 64;

/// The effective allocation length: 0 counts as 64.
pub fn effective_allocation_length(raw: i64) -> i64 {
    if raw == 0 { i64::from(DEFAULT_ALLOCATION_PREFIX_LENGTH) } else { raw }
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PrefixPoolSpecError {
    #[error("invalid prefix length {0}")]
    AllocationLength(i64),
    #[error("invalid pool CIDR {0:?}")]
    Prefix(String),
    #[error("pool CIDR {0:?} is not network aligned")]
    NotAligned(String),
    #[error("pool CIDR {0:?} is longer than the allocation prefix length")]
    TooLong(String),
    #[error("invalid excluded prefix: {0}")]
    Excluded(String),
    #[error("invalid gateway: {0}")]
    Gateway(String),
}

/// A valid prefix pool spec, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrefixPoolConfig {
    alloc_len: u8,
    prefixes: RangeSet,
    excluded: RangeSet,
    /// Block indices of the children that lie inside `prefixes` and overlap no exclusion.
    allocatable: RangeSet,
    total: u128,
    gateway: Option<Ipv6Addr>,
}

impl PrefixPoolConfig {
    pub fn new(spec: &PrefixPoolSpec) -> Result<Self, PrefixPoolSpecError> {
        let raw_len = effective_allocation_length(spec.allocation_prefix_length);
        let alloc_len = u8::try_from(raw_len)
            .ok()
            .filter(|l| (1..=128).contains(l))
            .ok_or(PrefixPoolSpecError::AllocationLength(raw_len))?;
        let mut ranges = Vec::with_capacity(spec.prefixes.len());
        for p in &spec.prefixes {
            let cidr = parse_cidr(p, true).map_err(|e| match e {
                super::address::CidrError::NotAligned(s) => PrefixPoolSpecError::NotAligned(s),
                super::address::CidrError::NotCidr(s) => PrefixPoolSpecError::Prefix(s),
            })?;
            if cidr.family != Family::V6 {
                return Err(PrefixPoolSpecError::Prefix(p.clone()));
            }
            if cidr.len > alloc_len {
                return Err(PrefixPoolSpecError::TooLong(p.clone()));
            }
            ranges.push(block(Family::V6, cidr.base, cidr.len));
        }
        let prefixes = RangeSet::from_ranges(ranges);
        let excluded = parse_list(&spec.excluded_prefixes).map_err(|e| PrefixPoolSpecError::Excluded(e.to_string()))?;
        if excluded.entries.iter().any(|e| e.family != Family::V6) {
            return Err(PrefixPoolSpecError::Excluded("only IPv6 excluded prefixes are supported".into()));
        }
        let gateway = match spec.gateway.as_deref().filter(|g| !g.is_empty()) {
            None => None,
            Some(g) => match parse_ip(g).map_err(PrefixPoolSpecError::Gateway)? {
                // Only for the warning about a gateway inside the prefixes, which the Go provider never gives for a
                // zoned gateway (its address sets hold no zoned address).
                IpAddr::V6(_) if has_zone(g) => None,
                IpAddr::V6(a) => Some(a),
                IpAddr::V4(_) => return Err(PrefixPoolSpecError::Gateway("provided gateway must be IPv6".into())),
            },
        };
        let shift = 128 - u32::from(alloc_len);
        // A child lies fully inside a free range [a, b] when its index is in [ceil(a / 2^s), floor((b + 1) / 2^s) − 1].
        let allocatable = RangeSet::from_ranges(prefixes.difference(&excluded.set).iter().filter_map(|(a, b)| {
            let size_mask = (1u128 << shift) - 1;
            let lo = (a >> shift) + u128::from(a & size_mask != 0);
            let hi = if b == u128::MAX { u128::MAX >> shift } else { ((b + 1) >> shift).checked_sub(1)? };
            (lo <= hi).then_some((lo, hi))
        }));
        let total = allocatable.len();
        Ok(Self { alloc_len, prefixes, excluded: excluded.set, allocatable, total, gateway })
    }

    pub fn allocation_length(&self) -> u8 {
        self.alloc_len
    }

    pub fn gateway(&self) -> Option<Ipv6Addr> {
        self.gateway
    }

    /// Number of allocatable children (exclusions applied, allocations ignored).
    pub fn total(&self) -> u128 {
        self.total
    }

    /// The merged `prefixes` as address ranges.
    pub fn prefixes(&self) -> &RangeSet {
        &self.prefixes
    }

    fn shift(&self) -> u32 {
        128 - u32::from(self.alloc_len)
    }

    /// The base address of child number `index`.
    fn base_of(&self, index: u128) -> Ipv6Addr {
        Ipv6Addr::from(index << self.shift())
    }

    /// Whether an allocation `address/len` is allocatable under this config: exactly the allocation length,
    /// inside `prefixes` and overlapping no exclusion (the Go provider's `PrefixIsAllocatable`, with masking).
    pub fn is_allocatable(&self, address: Ipv6Addr, len: u8) -> bool {
        len == self.alloc_len && self.allocatable.contains(u128::from(address) >> self.shift())
    }

    /// Whether the child prefix whose first address is `address` is one the pool hands out (what `reserve` asks).
    pub fn allocates_child_at(&self, address: Ipv6Addr) -> bool {
        let index = u128::from(address) >> self.shift();
        self.base_of(index) == address && self.allocatable.contains(index)
    }

    /// Whether the gateway lies inside the merged prefixes.
    pub fn gateway_inside_prefixes(&self) -> bool {
        self.gateway.is_some_and(|g| self.prefixes.contains(u128::from(g)))
    }
}

/// Why a specific prefix could not be reserved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PrefixReserveError {
    #[error("prefix {0}/{1} is not an allocatable child of the pool")]
    NotAllocatable(Ipv6Addr, u8),
    #[error("prefix {0}/{1} is already allocated")]
    Taken(Ipv6Addr, u8),
}

/// The pool has no free child prefix left.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("no prefix available")]
pub struct PrefixExhausted;

/// An allocation as recorded in an IPAddress: `address/prefix`, masked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Allocation {
    pub base: u128,
    pub len: u8,
}

impl Allocation {
    /// `address/len`, masked; `None` when `len` is out of range for IPv6.
    pub fn new(address: Ipv6Addr, len: u8) -> Option<Self> {
        (len <= 128).then(|| Allocation { base: block(Family::V6, u128::from(address), len).0, len })
    }

    /// The first and last address of the allocation.
    pub fn range(&self) -> (u128, u128) {
        block(Family::V6, self.base, self.len)
    }

    /// Whether the two share an address (CIDR blocks are nested or disjoint: one contains the other).
    pub fn overlaps(&self, other: &Allocation) -> bool {
        let ((s, e), (os, oe)) = (self.range(), other.range());
        s <= oe && os <= e
    }
}

/// The state of one prefix pool: its config, the allocations in use and the free children.
#[derive(Clone, Debug)]
pub struct PrefixPoolAllocator {
    config: PrefixPoolConfig,
    /// Block indices of allocatable children that overlap no allocation.
    free: RangeSet,
    /// Allocations in use, with the number of IPAddresses holding each.
    in_use: BTreeMap<Allocation, u32>,
    used: u64,
    out_of_range: u64,
}

impl PrefixPoolAllocator {
    pub fn new(config: PrefixPoolConfig) -> Self {
        Self { free: config.allocatable.clone(), config, in_use: BTreeMap::new(), used: 0, out_of_range: 0 }
    }

    /// The state after loading every allocation in use (`None` for one without a valid address or prefix).
    pub fn rebuild(config: PrefixPoolConfig, in_use: impl IntoIterator<Item = Option<Allocation>>) -> Self {
        let mut s = Self::new(config);
        let mut invalid = 0u64;
        for a in in_use {
            s.used += 1;
            match a {
                Some(a) => *s.in_use.entry(a).or_default() += 1,
                None => invalid += 1,
            }
        }
        s.recompute(invalid);
        s
    }

    pub fn config(&self) -> &PrefixPoolConfig {
        &self.config
    }

    /// Replaces the config (a pool edit), keeping every allocation in use.
    pub fn apply_config(&mut self, config: PrefixPoolConfig) {
        if config == self.config {
            return;
        }
        let held: u64 = self.in_use.values().map(|n| u64::from(*n)).sum();
        let invalid = self.used - held;
        self.config = config;
        self.recompute(invalid);
    }

    fn recompute(&mut self, invalid: u64) {
        let shift = self.config.shift();
        let blocked = RangeSet::from_ranges(self.in_use.keys().map(|a| {
            let (s, e) = a.range();
            (s >> shift, e >> shift)
        }));
        self.free = self.config.allocatable.difference(&blocked);
        self.out_of_range = invalid
            + self
                .in_use
                .iter()
                .filter(|(a, _)| !self.config.is_allocatable(Ipv6Addr::from(a.base), a.len))
                .map(|(_, n)| u64::from(*n))
                .sum::<u64>();
    }

    /// Hands out the lowest free child prefix, returning its base address.
    pub fn allocate(&mut self) -> Result<Ipv6Addr, PrefixExhausted> {
        let index = self.free.pop_first().ok_or(PrefixExhausted)?;
        let base = self.config.base_of(index);
        self.used += 1;
        *self.in_use.entry(Allocation { base: u128::from(base), len: self.config.alloc_len }).or_default() += 1;
        Ok(base)
    }

    /// Hands out the child whose base is `address`, if it is allocatable and free.
    pub fn reserve(&mut self, address: Ipv6Addr) -> Result<(), PrefixReserveError> {
        let len = self.config.alloc_len;
        if !self.config.allocates_child_at(address) {
            return Err(PrefixReserveError::NotAllocatable(address, len));
        }
        let index = u128::from(address) >> self.config.shift();
        if !self.free.remove(index) {
            return Err(PrefixReserveError::Taken(address, len));
        }
        self.used += 1;
        *self.in_use.entry(Allocation { base: u128::from(address), len }).or_default() += 1;
        Ok(())
    }

    /// Whether an IPAddress already holds an allocation sharing an address with this one (the same, or one nested
    /// in it or containing it, whatever its length).
    pub fn holds(&self, allocation: Allocation) -> bool {
        let (s, e) = allocation.range();
        self.in_use.contains_key(&allocation) || !self.overlapping(s, e).is_empty()
    }

    /// Records an allocation that exists already (loaded from an IPAddress), allocatable or not.
    pub fn record(&mut self, allocation: Option<Allocation>) {
        self.used += 1;
        let Some(a) = allocation else {
            self.out_of_range += 1;
            return;
        };
        if !self.config.is_allocatable(Ipv6Addr::from(a.base), a.len) {
            self.out_of_range += 1;
        }
        let (s, e) = a.range();
        let shift = self.config.shift();
        self.free.remove_range(s >> shift, e >> shift);
        *self.in_use.entry(a).or_default() += 1;
    }

    /// Releases one holder of an allocation (the inverse of `allocate`, `reserve` or `record`).
    pub fn release(&mut self, allocation: Option<Allocation>) {
        self.used = self.used.saturating_sub(1);
        let Some(a) = allocation else {
            self.out_of_range = self.out_of_range.saturating_sub(1);
            return;
        };
        if !self.config.is_allocatable(Ipv6Addr::from(a.base), a.len) {
            self.out_of_range = self.out_of_range.saturating_sub(1);
        }
        match self.in_use.get_mut(&a) {
            Some(n) if *n > 1 => {
                *n -= 1;
                return;
            }
            Some(_) => {
                self.in_use.remove(&a);
            }
            None => return,
        }
        // Give back the children this allocation blocked, except those another allocation still overlaps.
        let shift = self.config.shift();
        let (s, e) = a.range();
        let (lo, hi) = (s >> shift, e >> shift);
        let mut freed = self.config.allocatable.clipped(lo, hi);
        // Another allocation may share a child without overlapping the released range (two /63s in one /62 child).
        let (span_start, span_end) = (lo << shift, (hi << shift) | ((1u128 << shift) - 1));
        for other in self.overlapping(span_start, span_end) {
            let (os, oe) = other.range();
            freed.remove_range(os >> shift, oe >> shift);
        }
        for (from, to) in freed.iter() {
            self.free.insert_range(from, to);
        }
    }

    /// Allocations in use that overlap the address range `s..=e`. CIDR blocks are nested or disjoint, so these are the
    /// ones starting inside the range plus the (at most 129) blocks that contain its start.
    fn overlapping(&self, s: u128, e: u128) -> Vec<Allocation> {
        let inside = Allocation { base: s, len: 0 }..=Allocation { base: e, len: 128 };
        let mut found: Vec<Allocation> = self.in_use.range(inside).map(|(a, _)| *a).collect();
        for len in 0..=128u8 {
            let candidate = Allocation { base: block(Family::V6, s, len).0, len };
            if candidate.base < s && self.in_use.contains_key(&candidate) {
                found.push(candidate);
            }
        }
        found
    }

    pub fn is_exhausted(&self) -> bool {
        self.free.is_empty()
    }

    /// The counts of docs/compatibility.md D4 (`free = max(0, total − used + outOfRange)`).
    pub fn counts(&self) -> PoolCounts {
        PoolCounts::new(self.config.total, self.used, self.out_of_range)
    }
}
