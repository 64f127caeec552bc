//! IP pools (`InClusterIPPool`, `GlobalInClusterIPPool`): the allocatable set of a spec, and the allocator state
//! (addresses in use, free addresses, counts) that hands out a free address of the first subnet that has one: the
//! lowest in O(log n), or as the pool's allocation strategy orders them ([`super::strategy`]).
//!
//! A pool is one or more subnets (docs/compatibility.md D19): the top-level `addresses`, `prefix` and `gateway` are the
//! first, `spec.subnets[]` the others, used in that order once the ones before them are full. Subnets never share an
//! address, and two of them are either the same network or disjoint ones, so every address has one subnet, whose
//! prefix and gateway its IPAddress carries.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;

use super::address::{AddressList, Family, block, parse_ip, parse_list, to_u128};
use super::strategy::{AllocationStrategy, Order};
use super::{PoolCounts, RangeSet};

/// The fields of an IP pool spec the allocator needs, as written by the user.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IpPoolSpec {
    pub addresses: Vec<String>,
    pub prefix: i64,
    pub gateway: Option<String>,
    /// Excluded from every subnet of the pool.
    pub excluded_addresses: Vec<String>,
    pub allocate_reserved_ip_addresses: bool,
    /// `spec.subnets[]`: the subnets after the top-level one, in the order they are used.
    pub subnets: Vec<IpSubnetSpec>,
    pub allocation_strategy: AllocationStrategy,
}

/// One entry of `spec.subnets[]`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IpSubnetSpec {
    pub addresses: Vec<String>,
    pub prefix: i64,
    pub gateway: Option<String>,
    /// Excluded from this subnet only.
    pub excluded_addresses: Vec<String>,
}

/// The most entries of `spec.subnets` (the CRD schema says so too).
pub const MAX_SUBNETS: usize = 32;

/// Why a spec has no allocatable set (the admission webhook rejects such specs with field-level messages): the field
/// (`spec.addresses`, `spec.subnets[1].gateway`) and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {detail}")]
pub struct IpPoolSpecError {
    pub field: String,
    pub detail: String,
}

impl IpPoolSpecError {
    fn new(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self { field: field.into(), detail: detail.into() }
    }
}

/// Why one address is not allocatable in a pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotAllocatable {
    OtherFamily,
    OutsidePool,
    Excluded,
    Gateway,
    /// The network address (IPv4) or subnet-router anycast address (IPv6) of the pool's subnet.
    NetworkAddress,
    BroadcastAddress,
}

impl NotAllocatable {
    pub fn describe(self) -> &'static str {
        match self {
            NotAllocatable::OtherFamily => "is of the other IP family than the pool",
            NotAllocatable::OutsidePool => "is not in the pool's addresses",
            NotAllocatable::Excluded => "is in the pool's excludedAddresses",
            NotAllocatable::Gateway => "is the pool's gateway",
            NotAllocatable::NetworkAddress => "is the network address of the pool's subnet",
            NotAllocatable::BroadcastAddress => "is the broadcast address of the pool's subnet",
        }
    }
}

/// One subnet of a pool, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Subnet {
    prefix: u8,
    gateway: Option<u128>,
    addresses: RangeSet,
    /// Its own exclusions (the pool's are in [`IpPoolConfig::excluded`]).
    excluded: RangeSet,
    /// `<lowest address>/<prefix>`, as a value range.
    block: (u128, u128),
    network: Option<u128>,
    broadcast: Option<u128>,
    allocatable: RangeSet,
}

/// A valid IP pool spec, parsed: each subnet's allocatable set is `addresses − excluded − every gateway − reserved`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IpPoolConfig {
    family: Family,
    /// The top-level subnet first, then `spec.subnets[]` in order.
    subnets: Vec<Subnet>,
    /// `spec.excludedAddresses`: excluded from every subnet.
    excluded: RangeSet,
    /// The addresses of every subnet, as `start → (end, subnet)`: which subnet a value belongs to, in O(log n).
    owners: BTreeMap<u128, (u128, usize)>,
    allocatable: RangeSet,
    total: u128,
    strategy: AllocationStrategy,
}

/// One subnet's fields, as written, with the path they are reported under.
struct SubnetFields<'a> {
    path: String,
    addresses: &'a [String],
    prefix: i64,
    gateway: Option<&'a str>,
    excluded: &'a [String],
}

impl IpPoolConfig {
    pub fn new(spec: &IpPoolSpec) -> Result<Self, IpPoolSpecError> {
        if spec.subnets.len() > MAX_SUBNETS {
            return Err(IpPoolSpecError::new("spec.subnets", format!("must have at most {MAX_SUBNETS} items")));
        }
        let top = SubnetFields {
            path: "spec".into(),
            addresses: &spec.addresses,
            prefix: spec.prefix,
            gateway: spec.gateway.as_deref(),
            excluded: &spec.excluded_addresses,
        };
        let fields: Vec<SubnetFields<'_>> = std::iter::once(top)
            .chain(spec.subnets.iter().enumerate().map(|(i, s)| SubnetFields {
                path: format!("spec.subnets[{i}]"),
                addresses: &s.addresses,
                prefix: s.prefix,
                gateway: s.gateway.as_deref(),
                excluded: &s.excluded_addresses,
            }))
            .collect();
        let mut family = None;
        let mut parsed = Vec::with_capacity(fields.len());
        for f in &fields {
            parsed.push(parse_subnet(f, &mut family)?);
        }
        let family = family.expect("the top-level subnet has addresses");
        let pool_excluded = parsed[0].1.set.clone();
        let gateways: Vec<u128> = parsed.iter().filter_map(|p| p.2).collect();
        let mut subnets: Vec<Subnet> = Vec::with_capacity(parsed.len());
        let mut owners = BTreeMap::new();
        for (i, (list, excluded, gateway, prefix)) in parsed.into_iter().enumerate() {
            let path = &fields[i].path;
            let lowest = list.set.first().unwrap_or_default();
            let block = block(family, lowest, prefix);
            for (j, other) in subnets.iter().enumerate() {
                let shared = other.addresses.intersection(&list.set);
                if let Some((s, _)) = shared.iter().next() {
                    return Err(IpPoolSpecError::new(
                        format!("{path}.addresses"),
                        format!("address {} is in {} too", family.addr(s), subnet_name(j)),
                    ));
                }
                let disjoint = block.1 < other.block.0 || other.block.1 < block.0;
                if !disjoint && (block, prefix) != (other.block, other.prefix) {
                    return Err(IpPoolSpecError::new(
                        format!("{path}.prefix"),
                        format!(
                            "subnet {}/{prefix} overlaps subnet {}/{} of {}: subnets must be the same network or \
                             disjoint ones",
                            family.addr(block.0),
                            family.addr(other.block.0),
                            other.prefix,
                            subnet_name(j)
                        ),
                    ));
                }
            }
            // RFC 3021 (docs/compatibility.md D13): IPv4 /31 and /32 subnets have no network or broadcast address.
            let rfc3021 = family == Family::V4 && prefix >= 31;
            let reserves = !(spec.allocate_reserved_ip_addresses || rfc3021);
            let network = reserves.then_some(block.0);
            let broadcast = (reserves && family == Family::V4).then_some(block.1);
            let mut allocatable = list.set.difference(&pool_excluded).difference(&excluded.set);
            for v in [network, broadcast].into_iter().flatten().chain(gateways.iter().copied()) {
                allocatable.remove(v);
            }
            for (s, e) in list.set.iter() {
                owners.insert(s, (e, i));
            }
            subnets.push(Subnet {
                prefix,
                gateway,
                addresses: list.set,
                excluded: if i == 0 { RangeSet::new() } else { excluded.set },
                block,
                network,
                broadcast,
                allocatable,
            });
        }
        let allocatable = subnets.iter().fold(RangeSet::new(), |all, s| all.union(&s.allocatable));
        let total = subnets.iter().fold(0u128, |n, s| n.saturating_add(s.allocatable.len()));
        Ok(Self {
            family,
            subnets,
            excluded: pool_excluded,
            owners,
            allocatable,
            total,
            strategy: spec.allocation_strategy,
        })
    }

    pub fn family(&self) -> Family {
        self.family
    }

    /// The prefix of the top-level subnet.
    pub fn prefix(&self) -> u8 {
        self.subnets[0].prefix
    }

    pub fn strategy(&self) -> AllocationStrategy {
        self.strategy
    }

    /// The allocatable addresses of each subnet, the top-level one first.
    pub fn subnet_allocatable(&self) -> impl Iterator<Item = &RangeSet> {
        self.subnets.iter().map(|s| &s.allocatable)
    }

    /// The number of subnets: 1 + the entries of `spec.subnets`.
    pub fn subnet_count(&self) -> usize {
        self.subnets.len()
    }

    /// The subnet whose addresses hold `ip` (0 is the top-level one), allocatable or not.
    pub fn subnet_of(&self, ip: IpAddr) -> Option<usize> {
        self.value(ip).and_then(|v| self.subnet_of_value(v))
    }

    fn subnet_of_value(&self, v: u128) -> Option<usize> {
        self.owners.range(..=v).next_back().filter(|(_, (end, _))| *end >= v).map(|(_, (_, i))| *i)
    }

    /// The prefix of subnet `index` (see [`IpPoolConfig::subnet_of`]).
    pub fn subnet_prefix(&self, index: usize) -> Option<u8> {
        self.subnets.get(index).map(|s| s.prefix)
    }

    /// All addresses the pool may hand out.
    pub fn allocatable(&self) -> &RangeSet {
        &self.allocatable
    }

    /// Size of the allocatable set (exact; only a whole-space IPv6 pool saturates at `u128::MAX`).
    pub fn total(&self) -> u128 {
        self.total
    }

    /// Whether `ip` may be handed out by this pool, and if not, why.
    pub fn check(&self, ip: IpAddr) -> Result<(), NotAllocatable> {
        if Family::of(&ip) != self.family {
            return Err(NotAllocatable::OtherFamily);
        }
        let v = to_u128(ip);
        if self.allocatable.contains(v) {
            return Ok(());
        }
        let Some(subnet) = self.subnet_of_value(v).map(|i| &self.subnets[i]) else {
            return Err(NotAllocatable::OutsidePool);
        };
        Err(if self.excluded.contains(v) || subnet.excluded.contains(v) {
            NotAllocatable::Excluded
        } else if self.subnets.iter().any(|s| s.gateway == Some(v)) {
            NotAllocatable::Gateway
        } else if subnet.network == Some(v) {
            NotAllocatable::NetworkAddress
        } else {
            NotAllocatable::BroadcastAddress
        })
    }

    fn value(&self, ip: IpAddr) -> Option<u128> {
        (Family::of(&ip) == self.family).then(|| to_u128(ip))
    }
}

/// How a subnet is named in a message: the top-level fields or an entry of `spec.subnets`.
fn subnet_name(index: usize) -> String {
    if index == 0 { "spec.addresses".to_owned() } else { format!("spec.subnets[{}]", index - 1) }
}

/// One subnet's addresses, exclusions, gateway and prefix, each checked against the family of the ones before it.
fn parse_subnet(
    f: &SubnetFields<'_>,
    family: &mut Option<Family>,
) -> Result<(AddressList, AddressList, Option<u128>, u8), IpPoolSpecError> {
    let field = |name: &str| format!("{}.{name}", f.path);
    let list = parse_list(f.addresses).map_err(|e| IpPoolSpecError::new(field("addresses"), e.to_string()))?;
    let own = match list.family() {
        Ok(Some(own)) => own,
        Ok(None) => return Err(IpPoolSpecError::new(field("addresses"), "addresses is required")),
        Err(()) => {
            return Err(IpPoolSpecError::new(field("addresses"), "provided addresses are of mixed IP families"));
        }
    };
    if family.is_some_and(|f| f != own) {
        return Err(IpPoolSpecError::new(field("addresses"), "every subnet of a pool is of the pool's IP family"));
    }
    *family = Some(own);
    let excluded =
        parse_list(f.excluded).map_err(|e| IpPoolSpecError::new(field("excludedAddresses"), e.to_string()))?;
    if excluded.entries.iter().any(|e| e.family != own) {
        return Err(IpPoolSpecError::new(
            field("excludedAddresses"),
            "addresses and excluded addresses are of mixed IP families",
        ));
    }
    let gateway = match f.gateway.filter(|g| !g.is_empty()) {
        None => None,
        Some(g) => {
            let ip = parse_ip(g).map_err(|e| IpPoolSpecError::new(field("gateway"), e))?;
            if Family::of(&ip) != own {
                return Err(IpPoolSpecError::new(
                    field("gateway"),
                    "provided gateway and addresses are of mixed IP families",
                ));
            }
            Some(to_u128(ip))
        }
    };
    let prefix = u8::try_from(f.prefix)
        .ok()
        .filter(|p| *p <= own.bits())
        .ok_or_else(|| IpPoolSpecError::new(field("prefix"), "provided prefix is not valid"))?;
    Ok((list, excluded, gateway, prefix))
}

/// Why a specific address could not be reserved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReserveError {
    #[error("address {address} {}", reason.describe())]
    NotAllocatable { address: IpAddr, reason: NotAllocatable },
    #[error("address {0} is already allocated")]
    Taken(IpAddr),
}

/// A pool edit changed the IP family: the allocator must be rebuilt from the addresses in use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the pool changed its IP family")]
pub struct FamilyChanged;

/// The pool has no free address left.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("no address available")]
pub struct Exhausted;

/// The state of one IP pool: its config, the addresses in use (wherever they are) and the free sets.
///
/// `free[i] = allocatable(subnet i) − in_use` is kept up to date on every change, and `with_free` names the subnets
/// whose free set is not empty, so allocation takes the element `order` picks of the first of them.
#[derive(Clone, Debug)]
pub struct IpPoolAllocator {
    config: IpPoolConfig,
    /// One free set per subnet, in the config's order.
    free: Vec<RangeSet>,
    with_free: BTreeSet<usize>,
    in_use: RangeSet,
    /// Extra holders of an address already in `in_use` (two IPAddresses with one address: never made by us, but
    /// possible after a restore); releasing one holder must not free the address.
    duplicates: HashMap<u128, u32>,
    /// Number of in-use records, including unparsable ones and duplicates (one per IPAddress object).
    used: u64,
    /// Records that are not allocatable under the current config.
    out_of_range: u64,
    /// The allocation strategy's state: which free address comes next.
    order: Order,
}

impl IpPoolAllocator {
    pub fn new(config: IpPoolConfig) -> Self {
        let mut s = Self {
            free: Vec::new(),
            with_free: BTreeSet::new(),
            config,
            in_use: RangeSet::new(),
            duplicates: HashMap::new(),
            used: 0,
            out_of_range: 0,
            order: Order::Sequential,
        };
        s.compute_free();
        s
    }

    /// The state after loading every address in use (`None` for an address that does not parse).
    pub fn rebuild(config: IpPoolConfig, in_use: impl IntoIterator<Item = Option<IpAddr>>) -> Self {
        let mut values = Vec::new();
        let mut unparsable = 0u64;
        for a in in_use {
            match a.and_then(|ip| config.value(ip)) {
                Some(v) => values.push(v),
                None => unparsable += 1,
            }
        }
        values.sort_unstable();
        let mut duplicates: HashMap<u128, u32> = HashMap::new();
        for w in values.windows(2) {
            if w[0] == w[1] {
                *duplicates.entry(w[0]).or_default() += 1;
            }
        }
        let in_use_set = RangeSet::from_ranges(values.iter().map(|v| (*v, *v)));
        let out_of_range = unparsable + values.iter().filter(|v| !config.allocatable.contains(**v)).count() as u64;
        let mut s = Self {
            free: Vec::new(),
            with_free: BTreeSet::new(),
            in_use: in_use_set,
            duplicates,
            used: values.len() as u64 + unparsable,
            out_of_range,
            config,
            order: Order::Sequential,
        };
        s.compute_free();
        s
    }

    /// `free`, `with_free` and the strategy's state from the config and `in_use`, keeping what the strategy knew.
    fn compute_free(&mut self) {
        self.free = self.config.subnets.iter().map(|s| s.allocatable.difference(&self.in_use)).collect();
        self.with_free = (0..self.free.len()).filter(|i| !self.free[*i].is_empty()).collect();
        let previous = std::mem::replace(&mut self.order, Order::Sequential);
        self.compute_order(previous);
    }

    /// Forgets what the strategy learned (the release order, the random stream) and guesses afresh from the addresses
    /// in use: once a new leader knows every IPAddress, whose pool's spec may have come before them.
    pub fn reset_order(&mut self) {
        self.compute_order(Order::Sequential);
    }

    /// The strategy's state over the free sets, from what `previous` knew.
    fn compute_order(&mut self, previous: Order) {
        let subnets = &self.config.subnets;
        let highest_used = |s: usize| {
            let a: &RangeSet = &subnets[s].allocatable;
            self.in_use.clipped(a.first()?, a.last()?).last()
        };
        // A new random stream for each state of the pool: a restart does not replay the draws of the last run.
        let seed = match self.config.strategy {
            AllocationStrategy::Random => {
                self.in_use.iter().fold(self.used, |h, (s, e)| h.rotate_left(5) ^ (s as u64) ^ ((e >> 64) as u64))
            }
            _ => 0,
        };
        self.order = Order::new(
            self.config.strategy,
            previous,
            &self.free,
            |v| self.config.subnet_of_value(v),
            highest_used,
            seed,
        );
    }

    pub fn config(&self) -> &IpPoolConfig {
        &self.config
    }

    /// Replaces the config (a pool edit), keeping every address in use. A config of the other family is refused: the
    /// addresses in use cannot be carried over (their values mean other addresses); the caller rebuilds the allocator
    /// from the addresses themselves ([`IpPoolAllocator::rebuild`]).
    pub fn apply_config(&mut self, config: IpPoolConfig) -> Result<(), FamilyChanged> {
        if config == self.config {
            return Ok(());
        }
        if config.family != self.config.family {
            return Err(FamilyChanged);
        }
        let unparsable_or_foreign = self.out_of_range - self.count_out_of_range(&self.config);
        self.out_of_range = unparsable_or_foreign + self.count_out_of_range(&config);
        self.config = config;
        self.compute_free();
        Ok(())
    }

    fn count_out_of_range(&self, config: &IpPoolConfig) -> u64 {
        let outside = self.in_use.difference(&config.allocatable);
        let mut n = u64::try_from(outside.len()).unwrap_or(u64::MAX);
        for (v, extra) in &self.duplicates {
            if !config.allocatable.contains(*v) {
                n += u64::from(*extra);
            }
        }
        n
    }

    /// Hands out a free address of the first subnet that has one: the one the strategy picks (the lowest by default).
    pub fn allocate(&mut self) -> Result<IpAddr, Exhausted> {
        let subnet = *self.with_free.first().ok_or(Exhausted)?;
        let v = match self.order {
            // The default, as fast as before strategies: the lowest free address, taken in one step.
            Order::Sequential => self.free[subnet].pop_first().ok_or(Exhausted)?,
            _ => self.take_picked(subnet).ok_or(Exhausted)?,
        };
        if self.free[subnet].is_empty() {
            self.with_free.remove(&subnet);
        }
        self.in_use.insert(v);
        self.used += 1;
        Ok(self.config.family.addr(v))
    }

    /// Takes the free address of `subnet` the strategy picks out of the free set, and tells the strategy.
    fn take_picked(&mut self, subnet: usize) -> Option<u128> {
        let mut picked = self.order.pick(subnet, &self.free[subnet]).filter(|v| self.free[subnet].remove(*v));
        if picked.is_none() {
            // The strategy's state and the free set disagree (the tests compare the two after every step, so this is
            // not reached): never hand out what is not free, nor leave a claim waiting beside a free address.
            self.reset_order();
            picked = self.order.pick(subnet, &self.free[subnet]).filter(|v| self.free[subnet].remove(*v));
        }
        let v = picked.or_else(|| self.free[subnet].pop_first())?;
        self.order.taken(subnet, v);
        Some(v)
    }

    /// Takes `v` out of its subnet's free set; false when it was not free.
    fn take_free(&mut self, v: u128) -> bool {
        let Some(subnet) = self.config.subnet_of_value(v) else { return false };
        if !self.free[subnet].remove(v) {
            return false;
        }
        if self.free[subnet].is_empty() {
            self.with_free.remove(&subnet);
        }
        self.order.taken(subnet, v);
        true
    }

    /// Hands out a specific address (requested or pre-allocated) if it is allocatable and free.
    pub fn reserve(&mut self, ip: IpAddr) -> Result<(), ReserveError> {
        self.config.check(ip).map_err(|reason| ReserveError::NotAllocatable { address: ip, reason })?;
        let v = to_u128(ip);
        if !self.take_free(v) {
            return Err(ReserveError::Taken(ip));
        }
        self.in_use.insert(v);
        self.used += 1;
        Ok(())
    }

    /// Records an address that is in use already (loaded from an IPAddress), allocatable or not.
    pub fn record(&mut self, address: Option<IpAddr>) {
        self.used += 1;
        let Some(v) = address.and_then(|ip| self.config.value(ip)) else {
            self.out_of_range += 1;
            return;
        };
        if !self.config.allocatable.contains(v) {
            self.out_of_range += 1;
        }
        if !self.in_use.insert(v) {
            *self.duplicates.entry(v).or_default() += 1;
        }
        self.take_free(v);
    }

    /// Releases one holder of an address (the inverse of `allocate`, `reserve` or `record`).
    pub fn release(&mut self, address: Option<IpAddr>) {
        self.used = self.used.saturating_sub(1);
        let Some(v) = address.and_then(|ip| self.config.value(ip)) else {
            self.out_of_range = self.out_of_range.saturating_sub(1);
            return;
        };
        if !self.config.allocatable.contains(v) {
            self.out_of_range = self.out_of_range.saturating_sub(1);
        }
        if let Some(extra) = self.duplicates.get_mut(&v) {
            *extra -= 1;
            if *extra == 0 {
                self.duplicates.remove(&v);
            }
            return;
        }
        if self.in_use.remove(v)
            && self.config.allocatable.contains(v)
            && let Some(subnet) = self.config.subnet_of_value(v)
        {
            self.free[subnet].insert(v);
            self.with_free.insert(subnet);
            self.order.released(subnet, v);
        }
    }

    pub fn is_in_use(&self, ip: IpAddr) -> bool {
        self.config.value(ip).is_some_and(|v| self.in_use.contains(v))
    }

    /// Whether nothing is free (the next `allocate` would fail).
    pub fn is_exhausted(&self) -> bool {
        self.with_free.is_empty()
    }

    /// The counts of docs/compatibility.md D4.
    pub fn counts(&self) -> PoolCounts {
        PoolCounts::new(self.config.total, self.used, self.out_of_range)
    }

    /// The free addresses of every subnet (for tests and diagnostics).
    pub fn free(&self) -> RangeSet {
        self.free.iter().fold(RangeSet::new(), |all, f| all.union(f))
    }

    /// `LeastRecentlyReleased`'s partition of each subnet's free set: never used, released before the window, the
    /// window oldest first (for tests).
    #[cfg(test)]
    pub(crate) fn recency(&self) -> Option<Vec<(RangeSet, RangeSet, Vec<u128>)>> {
        self.order.recency()
    }
}
