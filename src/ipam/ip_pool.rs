//! IP pools (`InClusterIPPool`, `GlobalInClusterIPPool`): the allocatable set of a spec, and the allocator state
//! (addresses in use, free addresses, counts) that hands out the lowest free address in O(log n).

use std::collections::HashMap;
use std::net::IpAddr;

use super::address::{Family, block, parse_ip, parse_list, to_u128};
use super::{PoolCounts, RangeSet};

/// The fields of an IP pool spec the allocator needs, as written by the user.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IpPoolSpec {
    pub addresses: Vec<String>,
    pub prefix: i64,
    pub gateway: Option<String>,
    pub excluded_addresses: Vec<String>,
    pub allocate_reserved_ip_addresses: bool,
}

/// Why a spec has no allocatable set (the admission webhook rejects such specs with field-level messages).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IpPoolSpecError {
    #[error("spec.addresses: {0}")]
    Addresses(String),
    #[error("spec.excludedAddresses: {0}")]
    Excluded(String),
    #[error("spec.gateway: {0}")]
    Gateway(String),
    #[error("spec.prefix: {0}")]
    Prefix(String),
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

/// A valid IP pool spec, parsed: the allocatable set is `addresses − excluded − gateway − reserved`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IpPoolConfig {
    family: Family,
    prefix: u8,
    gateway: Option<u128>,
    addresses: RangeSet,
    excluded: RangeSet,
    /// The subnet `<lowest address>/<prefix>`, as a value range.
    subnet: (u128, u128),
    network: Option<u128>,
    broadcast: Option<u128>,
    allocatable: RangeSet,
    total: u128,
}

impl IpPoolConfig {
    pub fn new(spec: &IpPoolSpec) -> Result<Self, IpPoolSpecError> {
        let list = parse_list(&spec.addresses).map_err(|e| IpPoolSpecError::Addresses(e.to_string()))?;
        let family = match list.family() {
            Ok(Some(f)) => f,
            Ok(None) => return Err(IpPoolSpecError::Addresses("addresses is required".into())),
            Err(()) => return Err(IpPoolSpecError::Addresses("provided addresses are of mixed IP families".into())),
        };
        let excluded = parse_list(&spec.excluded_addresses).map_err(|e| IpPoolSpecError::Excluded(e.to_string()))?;
        if excluded.entries.iter().any(|e| e.family != family) {
            return Err(IpPoolSpecError::Excluded("addresses and excluded addresses are of mixed IP families".into()));
        }
        let gateway = match spec.gateway.as_deref().filter(|g| !g.is_empty()) {
            None => None,
            Some(g) => {
                let ip = parse_ip(g).map_err(IpPoolSpecError::Gateway)?;
                if Family::of(&ip) != family {
                    return Err(IpPoolSpecError::Gateway(
                        "provided gateway and addresses are of mixed IP families".into(),
                    ));
                }
                Some(to_u128(ip))
            }
        };
        let prefix = u8::try_from(spec.prefix)
            .ok()
            .filter(|p| *p <= family.bits())
            .ok_or_else(|| IpPoolSpecError::Prefix("provided prefix is not valid".into()))?;
        let lowest = list.set.first().unwrap_or_default();
        let subnet = block(family, lowest, prefix);
        // RFC 3021 (docs/compatibility.md D13): IPv4 /31 and /32 subnets have no network or broadcast address.
        let rfc3021 = family == Family::V4 && prefix >= 31;
        let reserves = !(spec.allocate_reserved_ip_addresses || rfc3021);
        let network = reserves.then_some(subnet.0);
        let broadcast = (reserves && family == Family::V4).then_some(subnet.1);
        let mut allocatable = list.set.difference(&excluded.set);
        for v in [network, broadcast, gateway].into_iter().flatten() {
            allocatable.remove(v);
        }
        let total = allocatable.len();
        Ok(Self {
            family,
            prefix,
            gateway,
            addresses: list.set,
            excluded: excluded.set,
            subnet,
            network,
            broadcast,
            allocatable,
            total,
        })
    }

    pub fn family(&self) -> Family {
        self.family
    }

    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    pub fn gateway(&self) -> Option<IpAddr> {
        self.gateway.map(|g| self.family.addr(g))
    }

    /// The inferred subnet `<lowest address>/<prefix>` as its first and last address.
    pub fn subnet(&self) -> (IpAddr, IpAddr) {
        (self.family.addr(self.subnet.0), self.family.addr(self.subnet.1))
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
        Err(if !self.addresses.contains(v) {
            NotAllocatable::OutsidePool
        } else if self.excluded.contains(v) {
            NotAllocatable::Excluded
        } else if self.gateway == Some(v) {
            NotAllocatable::Gateway
        } else if self.network == Some(v) {
            NotAllocatable::NetworkAddress
        } else {
            NotAllocatable::BroadcastAddress
        })
    }

    fn value(&self, ip: IpAddr) -> Option<u128> {
        (Family::of(&ip) == self.family).then(|| to_u128(ip))
    }
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

/// The state of one IP pool: its config, the addresses in use (wherever they are) and the free set.
///
/// `free = allocatable − in_use` is kept up to date on every change, so allocation takes its first element.
#[derive(Clone, Debug)]
pub struct IpPoolAllocator {
    config: IpPoolConfig,
    free: RangeSet,
    in_use: RangeSet,
    /// Extra holders of an address already in `in_use` (two IPAddresses with one address: never made by us, but
    /// possible after a restore); releasing one holder must not free the address.
    duplicates: HashMap<u128, u32>,
    /// Number of in-use records, including unparsable ones and duplicates (one per IPAddress object).
    used: u64,
    /// Records that are not allocatable under the current config.
    out_of_range: u64,
}

impl IpPoolAllocator {
    pub fn new(config: IpPoolConfig) -> Self {
        let free = config.allocatable.clone();
        Self { config, free, in_use: RangeSet::new(), duplicates: HashMap::new(), used: 0, out_of_range: 0 }
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
        let mut s = Self {
            free: RangeSet::new(),
            in_use: in_use_set,
            duplicates,
            used: values.len() as u64 + unparsable,
            out_of_range: unparsable,
            config: config.clone(),
        };
        s.out_of_range += values.iter().filter(|v| !config.allocatable.contains(**v)).count() as u64;
        s.free = config.allocatable.difference(&s.in_use);
        s
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
        self.free = config.allocatable.difference(&self.in_use);
        self.config = config;
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

    /// Hands out the lowest free address.
    pub fn allocate(&mut self) -> Result<IpAddr, Exhausted> {
        let v = self.free.pop_first().ok_or(Exhausted)?;
        self.in_use.insert(v);
        self.used += 1;
        Ok(self.config.family.addr(v))
    }

    /// Hands out a specific address (requested or pre-allocated) if it is allocatable and free.
    pub fn reserve(&mut self, ip: IpAddr) -> Result<(), ReserveError> {
        self.config.check(ip).map_err(|reason| ReserveError::NotAllocatable { address: ip, reason })?;
        let v = to_u128(ip);
        if !self.free.remove(v) {
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
        self.free.remove(v);
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
        if self.in_use.remove(v) && self.config.allocatable.contains(v) {
            self.free.insert(v);
        }
    }

    pub fn is_in_use(&self, ip: IpAddr) -> bool {
        self.config.value(ip).is_some_and(|v| self.in_use.contains(v))
    }

    /// Whether nothing is free (the next `allocate` would fail).
    pub fn is_exhausted(&self) -> bool {
        self.free.is_empty()
    }

    /// The counts of docs/compatibility.md D4.
    pub fn counts(&self) -> PoolCounts {
        PoolCounts::new(self.config.total, self.used, self.out_of_range)
    }

    /// The free set (for tests and diagnostics).
    pub fn free(&self) -> &RangeSet {
        &self.free
    }
}
