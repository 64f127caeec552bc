//! The shared allocator state of every pool: the allocator of `crate::ipam`, the IPAddresses holding its addresses,
//! and the claims waiting for a free address. It is fed by the IPAddress watch and by our own writes the moment they
//! succeed, so allocation never re-lists and never waits for a cache to catch up. It is part of the index's state and
//! written only through it, one step at a time (`super::Index`).

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;

use crate::api::{PoolKind, PoolSpec};
use crate::capi::IpAddressSpec;
use crate::compact::intern;
use crate::ipam::address::parse_ip;
use crate::ipam::{
    Allocation, Family, IpPoolAllocator, IpPoolConfig, PoolCounts, PrefixPoolAllocator, PrefixPoolConfig, ReserveError,
    prefix_pool::PrefixReserveError,
};

/// A pool: its kind, namespace ("" for global pools) and name (shared strings: every IPAddress of the pool keeps
/// one).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PoolKey {
    pub kind: PoolKind,
    pub namespace: Arc<str>,
    pub name: Arc<str>,
}

impl PoolKey {
    pub fn new(kind: PoolKind, namespace: &str, name: &str) -> Self {
        let namespace = if kind.is_global() { "" } else { namespace };
        Self { kind, namespace: intern(namespace), name: intern(name) }
    }

    /// One shared copy of the key, for what every IPAddress of the pool keeps (8 bytes instead of 40 each).
    pub fn shared(self) -> Arc<PoolKey> {
        static SHARED: std::sync::LazyLock<parking_lot::Mutex<HashSet<Arc<PoolKey>>>> =
            std::sync::LazyLock::new(Default::default);
        let mut set = SHARED.lock();
        if let Some(existing) = set.get(&self) {
            return existing.clone();
        }
        let shared = Arc::new(self);
        set.insert(shared.clone());
        shared
    }
}

impl std::fmt::Display for PoolKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{} {:?}", self.kind, self.name)
        } else {
            write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
        }
    }
}

pub use crate::compact::ObjectKey;

/// What an IPAddress holds in its pool: an address (IP pools) or a prefix (prefix pools); `None` when unparsable.
/// Byte-aligned (20 bytes, where the allocator's 16-byte-aligned `Allocation` would make it 48): one is kept per
/// IPAddress.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Held {
    Ip(Option<IpAddr>),
    Prefix(Option<HeldPrefix>),
}

/// A child prefix as held: its base address and length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HeldPrefix {
    pub base: Ipv6Addr,
    pub len: u8,
}

impl From<Allocation> for HeldPrefix {
    fn from(a: Allocation) -> Self {
        HeldPrefix { base: Ipv6Addr::from(a.base), len: a.len }
    }
}

impl HeldPrefix {
    fn allocation(self) -> Allocation {
        Allocation { base: u128::from(self.base), len: self.len }
    }
}

impl Held {
    /// Parses the address an IPAddress spec holds, for a pool of `kind`, as Go's netip reads it: a zone, which a
    /// hand-made IPAddress may carry, is no part of the address, so the address stays held.
    pub fn of(kind: PoolKind, spec: &IpAddressSpec) -> Held {
        if kind.is_prefix_pool() {
            let allocation = parse_ipv6(&spec.address)
                .zip(spec.prefix.and_then(|p| u8::try_from(p).ok()))
                .and_then(|(a, len)| Allocation::new(a, len));
            Held::Prefix(allocation.map(HeldPrefix::from))
        } else {
            Held::Ip(parse_ip(&spec.address).ok())
        }
    }
}

impl Held {
    /// The address an IPAddress of it shows in `spec.address`: the address, or the child prefix's base address.
    pub fn address(self) -> Option<IpAddr> {
        match self {
            Held::Ip(ip) => ip,
            Held::Prefix(p) => p.map(|a| IpAddr::V6(a.base)),
        }
    }
}

impl std::fmt::Display for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Held::Ip(Some(ip)) => write!(f, "{ip}"),
            Held::Prefix(Some(a)) => write!(f, "{}/{}", a.base, a.len),
            Held::Ip(None) | Held::Prefix(None) => f.write_str("(unparsable)"),
        }
    }
}

/// The key of a reservation: an address of a global pool that an IPAddress took with it when `clusterctl move` moved
/// its Cluster to another management cluster (`super::moved_away`). Keyed by the address, in no namespace: no
/// IPAddress key is ever equal to it.
pub fn reservation_key(held: Held) -> ObjectKey {
    ObjectKey::new("", &held.to_string())
}

pub fn is_reservation(key: &ObjectKey) -> bool {
    key.namespace.is_empty()
}

/// One address held by more than one IPAddress of a pool: something handed it out twice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Duplicate {
    pub pool: PoolKey,
    pub held: Held,
    /// Every IPAddress holding it, sorted.
    pub holders: Vec<ObjectKey>,
}

impl std::fmt::Display for Duplicate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self.holders.iter().map(ToString::to_string).collect();
        write!(f, "{} is held by more than one IPAddress: {}", self.held, names.join(", "))
    }
}

/// A new address for a claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assigned {
    /// The address (IP pools) or the child prefix's base address (prefix pools).
    pub address: IpAddr,
    /// `IPAddress.spec.prefix`: the pool's prefix, or the allocation length of a prefix pool.
    pub prefix: i64,
    pub gateway: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum AllocateError {
    #[error("{pool} has no free address")]
    Exhausted { pool: PoolKey },
    #[error("{pool} has an invalid spec: {reason}")]
    InvalidPool { pool: PoolKey, reason: String },
    #[error("{pool} is not loaded yet")]
    Unknown { pool: PoolKey },
    #[error("requested address {requested} cannot be allocated from {pool}: {reason}")]
    Requested { pool: PoolKey, requested: String, reason: String },
}

enum Allocator {
    Ip(IpPoolAllocator),
    Prefix(PrefixPoolAllocator),
}

/// The configuration a pool spec parses to.
#[derive(Clone, Debug, PartialEq)]
enum Config {
    Ip(IpPoolConfig, Option<String>),
    Prefix(PrefixPoolConfig, Option<String>),
}

struct Holding {
    held: Held,
    /// Seen in the API server (watch or a successful create); false while our create is in flight.
    confirmed: bool,
}

/// The state of one pool.
#[derive(Default)]
struct PoolState {
    /// The spec we built the allocator from (to notice changes).
    spec: Option<PoolSpec>,
    config_error: Option<String>,
    allocator: Option<Allocator>,
    prefix: i64,
    gateway: Option<String>,
    holders: HashMap<ObjectKey, Holding>,
    /// Claims that found the pool exhausted, oldest first.
    waiters: VecDeque<ObjectKey>,
    /// Addresses held by more than one IPAddress, with their holders (empty unless something went wrong).
    duplicates: HashMap<Held, Vec<ObjectKey>>,
}

impl PoolState {
    fn rebuild(&mut self, config: Config) {
        let held: Vec<Held> = self.holders.values().map(|h| h.held).collect();
        self.find_duplicates();
        self.allocator = Some(match config {
            Config::Ip(c, gateway) => {
                self.prefix = i64::from(c.prefix());
                self.gateway = gateway;
                Allocator::Ip(IpPoolAllocator::rebuild(
                    c,
                    held.iter().map(|h| match h {
                        Held::Ip(a) => *a,
                        Held::Prefix(_) => None,
                    }),
                ))
            }
            Config::Prefix(c, gateway) => {
                self.prefix = i64::from(c.allocation_length());
                self.gateway = gateway;
                Allocator::Prefix(PrefixPoolAllocator::rebuild(
                    c,
                    held.iter().map(|h| match h {
                        Held::Prefix(a) => a.map(HeldPrefix::allocation),
                        Held::Ip(_) => None,
                    }),
                ))
            }
        });
    }

    /// Rebuilds the duplicate index from every holder (at a rebuild, when addresses arrived before the spec).
    fn find_duplicates(&mut self) {
        let mut by_held: HashMap<Held, Vec<ObjectKey>> = HashMap::new();
        for (key, h) in &self.holders {
            if h.held.address().is_some() {
                by_held.entry(h.held).or_default().push(key.clone());
            }
        }
        by_held.retain(|_, holders| holders.len() > 1);
        for holders in by_held.values_mut() {
            holders.sort();
        }
        self.duplicates = by_held;
    }

    /// Whether another IPAddress holds `held` already (known once the pool's spec is loaded).
    fn is_held(&self, held: Held) -> bool {
        match (&self.allocator, held) {
            (Some(Allocator::Ip(a)), Held::Ip(Some(ip))) if a.config().family() == Family::of(&ip) => a.is_in_use(ip),
            (Some(Allocator::Prefix(a)), Held::Prefix(Some(p))) => a.holds(p.allocation()),
            // An address of the other family, which the allocator cannot represent: the holders say (rare, so a scan
            // is fine). Without a spec nothing is known yet (the duplicates are found when it arrives).
            (Some(Allocator::Ip(_)), Held::Ip(Some(_))) => self.holders.values().any(|h| h.held == held),
            _ => false,
        }
    }

    /// Notes that `address` holds `held` as another IPAddress does; returns the duplicate.
    fn note_duplicate(&mut self, pool: &PoolKey, address: &ObjectKey, held: Held) -> Duplicate {
        let known = self.duplicates.contains_key(&held);
        let holders = self.duplicates.entry(held).or_default();
        if !known {
            // The first duplicate of this address: find the earlier holder (rare, so a scan is fine).
            holders
                .extend(self.holders.iter().filter(|(k, h)| h.held == held && *k != address).map(|(k, _)| k.clone()));
        }
        if !holders.contains(address) {
            holders.push(address.clone());
        }
        holders.sort();
        Duplicate { pool: pool.clone(), held, holders: holders.clone() }
    }

    /// Takes `address` off the duplicate index of `held`; returns the other holders (their claims' conditions name
    /// the duplicate, and must be told it is gone or changed).
    fn clear_duplicate(&mut self, address: &ObjectKey, held: Held) -> Vec<ObjectKey> {
        let Some(holders) = self.duplicates.get_mut(&held) else { return Vec::new() };
        holders.retain(|k| k != address);
        let others = holders.clone();
        if holders.len() < 2 {
            self.duplicates.remove(&held);
        }
        others
    }

    fn record(&mut self, held: Held) {
        match (&mut self.allocator, held) {
            (Some(Allocator::Ip(a)), Held::Ip(ip)) => a.record(ip),
            (Some(Allocator::Prefix(a)), Held::Prefix(p)) => a.record(p.map(HeldPrefix::allocation)),
            (Some(Allocator::Ip(a)), Held::Prefix(_)) => a.record(None),
            (Some(Allocator::Prefix(a)), Held::Ip(_)) => a.record(None),
            (None, _) => {}
        }
    }

    fn release(&mut self, held: Held) {
        match (&mut self.allocator, held) {
            (Some(Allocator::Ip(a)), Held::Ip(ip)) => a.release(ip),
            (Some(Allocator::Prefix(a)), Held::Prefix(p)) => a.release(p.map(HeldPrefix::allocation)),
            (Some(Allocator::Ip(a)), Held::Prefix(_)) => a.release(None),
            (Some(Allocator::Prefix(a)), Held::Ip(_)) => a.release(None),
            (None, _) => {}
        }
    }

    fn counts(&self) -> PoolCounts {
        match &self.allocator {
            Some(Allocator::Ip(a)) => a.counts(),
            Some(Allocator::Prefix(a)) => a.counts(),
            // Without a valid spec nothing is allocatable: every IPAddress is out of range.
            None => PoolCounts::new(0, self.holders.len() as u64, self.holders.len() as u64),
        }
    }

    fn is_exhausted(&self) -> bool {
        match &self.allocator {
            Some(Allocator::Ip(a)) => a.is_exhausted(),
            Some(Allocator::Prefix(a)) => a.is_exhausted(),
            None => true,
        }
    }
}

/// The allocator state of all pools.
#[derive(Default)]
pub struct Registry {
    pools: HashMap<PoolKey, PoolState>,
    /// Pools whose counts changed since the status writer last took them, oldest change first.
    dirty: Dirty,
}

/// A queue of pools without repeats: a pool changed again while it waits keeps its place.
#[derive(Default)]
struct Dirty {
    order: std::collections::VecDeque<PoolKey>,
    queued: HashSet<PoolKey>,
}

impl Dirty {
    fn mark(&mut self, key: &PoolKey) {
        // Every allocation passes here, and the pool is queued already but for the first one of a burst.
        if !self.queued.contains(key) {
            self.queued.insert(key.clone());
            self.order.push_back(key.clone());
        }
    }
}

/// What waking after a change found: claims to reconcile now.
pub type Woken = Vec<ObjectKey>;

impl Registry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Up to `limit` of the pools whose counts changed, those that changed first first; the rest wait their turn (a
    /// pool taken and changed again goes to the back, so every changed pool gets its turn).
    pub fn take_dirty(&mut self, limit: usize) -> Vec<PoolKey> {
        let dirty = &mut self.dirty;
        let n = limit.min(dirty.order.len());
        let taken: Vec<PoolKey> = dirty.order.drain(..n).collect();
        for key in &taken {
            dirty.queued.remove(key);
        }
        taken
    }

    /// Applies a pool's spec. Addresses in use are kept. Returns the claims to wake when the change may have freed
    /// addresses.
    pub fn apply_spec(&mut self, key: &PoolKey, spec: &PoolSpec) -> Woken {
        let state = self.pools.entry(key.clone()).or_default();
        if state.spec.as_ref() == Some(spec) {
            return Vec::new();
        }
        state.spec = Some(spec.clone());
        let config = parse_config(spec);
        match config {
            Err(reason) => {
                state.config_error = Some(reason);
                state.allocator = None;
            }
            Ok(config) => {
                state.config_error = None;
                match (&mut state.allocator, config) {
                    (Some(Allocator::Ip(a)), Config::Ip(c, gateway)) => {
                        if a.apply_config(c.clone()).is_ok() {
                            state.prefix = i64::from(c.prefix());
                            state.gateway = gateway;
                        } else {
                            // The other family: the addresses in use are rebuilt from the holders, never dropped.
                            state.rebuild(Config::Ip(c, gateway));
                        }
                    }
                    (Some(Allocator::Prefix(a)), Config::Prefix(c, gateway)) => {
                        state.prefix = i64::from(c.allocation_length());
                        a.apply_config(c);
                        state.gateway = gateway;
                    }
                    (_, config) => state.rebuild(config),
                }
            }
        }
        self.dirty.mark(key);
        self.wake_all(key)
    }

    /// Forgets a deleted pool's spec (its IPAddresses stay recorded: they count if the pool comes back).
    pub fn remove_spec(&mut self, key: &PoolKey) {
        if let Some(state) = self.pools.get_mut(key) {
            state.spec = None;
            state.config_error = None;
            state.allocator = None;
        }
    }

    /// Records an IPAddress seen in the API server (or just created by us). Returns the duplicate when another
    /// IPAddress of the pool holds the same address: that must never happen, and the caller says so loudly.
    pub fn record(&mut self, pool_key: &PoolKey, address: &ObjectKey, held: Held) -> Option<Duplicate> {
        let state = self.pools.entry(pool_key.clone()).or_default();
        match state.holders.get_mut(address) {
            Some(h) if h.held == held => {
                h.confirmed = true;
                return None;
            }
            Some(_) => {
                if let Some(old) = state.holders.remove(address) {
                    let _ = state.clear_duplicate(address, old.held);
                    state.release(old.held);
                }
            }
            None => {}
        }
        let duplicate = state.is_held(held).then(|| state.note_duplicate(pool_key, address, held));
        state.record(held);
        state.holders.insert(address.clone(), Holding { held, confirmed: true });
        self.dirty.mark(pool_key);
        duplicate
    }

    /// The duplicate the IPAddress `address` is part of, if another IPAddress of the pool holds its address too.
    pub fn duplicate_of(&self, pool_key: &PoolKey, address: &ObjectKey) -> Option<Duplicate> {
        let state = self.pools.get(pool_key)?;
        let held = state.holders.get(address)?.held;
        let holders = state.duplicates.get(&held)?.clone();
        Some(Duplicate { pool: pool_key.clone(), held, holders })
    }

    /// The addresses of a pool that more than one IPAddress holds.
    pub fn duplicates(&self, pool_key: &PoolKey) -> Vec<Duplicate> {
        let Some(state) = self.pools.get(pool_key) else { return Vec::new() };
        let mut out: Vec<Duplicate> = state
            .duplicates
            .iter()
            .map(|(held, holders)| Duplicate { pool: pool_key.clone(), held: *held, holders: holders.clone() })
            .collect();
        out.sort_by(|a, b| a.holders.cmp(&b.holders));
        out
    }

    /// Forgets an IPAddress that is gone. Returns the claims to wake now that its address is free.
    pub fn forget(&mut self, pool_key: &PoolKey, address: &ObjectKey) -> Woken {
        self.release_holder_if(pool_key, address, |_| true)
    }

    /// Hands the hold of `from` over to `to` in one step, so the address is never free in between (an
    /// IPAddress moved away becomes a reservation, a reservation becomes the IPAddress that came back). Returns what
    /// moved over, `None` when `from` held nothing.
    pub fn transfer(&mut self, pool_key: &PoolKey, from: &ObjectKey, to: &ObjectKey) -> Option<Held> {
        let state = self.pools.get_mut(pool_key)?;
        let holding = state.holders.remove(from)?;
        if let Some(old) = state.holders.remove(to) {
            let _ = state.clear_duplicate(to, old.held);
            state.release(old.held);
        }
        if let Some(holders) = state.duplicates.get_mut(&holding.held) {
            holders.iter_mut().filter(|k| *k == from).for_each(|k| *k = to.clone());
        }
        let held = holding.held;
        state.holders.insert(to.clone(), Holding { held, confirmed: true });
        self.dirty.mark(pool_key);
        Some(held)
    }

    /// What `address` holds in the pool, if anything.
    pub fn held_by(&self, pool_key: &PoolKey, address: &ObjectKey) -> Option<Held> {
        self.pools.get(pool_key)?.holders.get(address).map(|h| h.held)
    }

    /// Reserves `held` even when an IPAddress holds it already; returns the duplicate that makes then.
    pub fn reserve_alongside(&mut self, pool_key: &PoolKey, held: Held) -> Option<Duplicate> {
        let state = self.pools.entry(pool_key.clone()).or_default();
        let key = reservation_key(held);
        if state.holders.contains_key(&key) {
            return None;
        }
        let duplicate = state.is_held(held).then(|| state.note_duplicate(pool_key, &key, held));
        state.record(held);
        state.holders.insert(key, Holding { held, confirmed: true });
        self.dirty.mark(pool_key);
        duplicate
    }

    /// Reserves `held` (see [`reservation_key`]) unless something holds it already; returns whether it did.
    pub fn reserve(&mut self, pool_key: &PoolKey, held: Held) -> bool {
        let state = self.pools.entry(pool_key.clone()).or_default();
        let key = reservation_key(held);
        if state.holders.contains_key(&key) || state.is_held(held) {
            return false;
        }
        state.record(held);
        state.holders.insert(key, Holding { held, confirmed: true });
        self.dirty.mark(pool_key);
        true
    }

    /// The reservations of a pool, as the addresses they hold.
    pub fn reservations(&self, pool_key: &PoolKey) -> Vec<Held> {
        let Some(state) = self.pools.get(pool_key) else { return Vec::new() };
        state.holders.iter().filter(|(k, _)| is_reservation(k)).map(|(_, h)| h.held).collect()
    }

    /// Drops our not-yet-confirmed hold after a create the API server rejected.
    pub fn abandon(&mut self, pool_key: &PoolKey, address: &ObjectKey) -> Woken {
        self.abandon_unless(pool_key, address, || false)
    }

    /// Drops our not-yet-confirmed hold of `address` unless `keep` says otherwise.
    pub fn abandon_unless(&mut self, pool_key: &PoolKey, address: &ObjectKey, keep: impl FnOnce() -> bool) -> Woken {
        self.release_holder_if(pool_key, address, |holding| !holding.confirmed && !keep())
    }

    /// Releases what `address` holds when `release` says so: its address is free, a duplicate
    /// it was part of is cleared, and the claims to wake are returned.
    fn release_holder_if(
        &mut self,
        pool_key: &PoolKey,
        address: &ObjectKey,
        release: impl FnOnce(&Holding) -> bool,
    ) -> Woken {
        let Some(state) = self.pools.get_mut(pool_key) else { return Vec::new() };
        if !state.holders.get(address).is_some_and(release) {
            return Vec::new();
        }
        let Some(old) = state.holders.remove(address) else { return Vec::new() };
        let mut woken = state.clear_duplicate(address, old.held);
        state.release(old.held);
        woken.extend(take_waiters(state));
        self.dirty.mark(pool_key);
        woken
    }

    /// The pool where `address` holds something not yet seen in the API server, if any.
    pub fn unconfirmed_hold(&self, address: &ObjectKey) -> Option<PoolKey> {
        self.pools.iter().find(|(_, p)| p.holders.get(address).is_some_and(|h| !h.confirmed)).map(|(k, _)| k.clone())
    }

    /// Whether `address` holds something not yet seen in the API server (our create of it is uncertain).
    pub fn holds_unconfirmed(&self, pool_key: &PoolKey, address: &ObjectKey) -> bool {
        self.pools.get(pool_key).is_some_and(|p| p.holders.get(address).is_some_and(|h| !h.confirmed))
    }

    /// Marks our hold confirmed once our create succeeded.
    pub fn confirm(&mut self, pool_key: &PoolKey, address: &ObjectKey) {
        if let Some(h) = self.pools.get_mut(pool_key).and_then(|p| p.holders.get_mut(address)) {
            h.confirmed = true;
        }
    }

    /// The address an IPAddress named `address` should get in `pool_key`: the one it holds already (a retry after an
    /// uncertain create), else `requested` when given, else the lowest free one. The hold is taken here, before the
    /// IPAddress is created, so concurrent allocations in the pool never pick the same address.
    pub fn allocate(
        &mut self,
        pool_key: &PoolKey,
        address: &ObjectKey,
        requested: Option<&str>,
    ) -> Result<Assigned, AllocateError> {
        let state = self.pools.entry(pool_key.clone()).or_default();
        if let Some(reason) = &state.config_error {
            return Err(AllocateError::InvalidPool { pool: pool_key.clone(), reason: reason.clone() });
        }
        if let Some(h) = state.holders.get(address) {
            let held = h.held;
            return assigned(&state, held).ok_or_else(|| AllocateError::InvalidPool {
                pool: pool_key.clone(),
                reason: format!("IPAddress {address} holds an address the pool cannot parse"),
            });
        }
        let prefix = state.prefix;
        let Some(allocator) = state.allocator.as_mut() else {
            return Err(AllocateError::Unknown { pool: pool_key.clone() });
        };
        let requested_error = |reason: String| AllocateError::Requested {
            pool: pool_key.clone(),
            requested: requested.unwrap_or_default().to_owned(),
            reason,
        };
        let held = match (allocator, requested) {
            (Allocator::Ip(a), None) => {
                Held::Ip(Some(a.allocate().map_err(|_| AllocateError::Exhausted { pool: pool_key.clone() })?))
            }
            (Allocator::Ip(a), Some(r)) => {
                let ip = parse_ip(r).map_err(|_| requested_error("not an IP address".to_owned()))?;
                a.reserve(ip).map_err(|e| match e {
                    ReserveError::Taken(_) => requested_error("it is already allocated".to_owned()),
                    other => requested_error(other.to_string()),
                })?;
                Held::Ip(Some(ip))
            }
            (Allocator::Prefix(a), None) => {
                let base = a.allocate().map_err(|_| AllocateError::Exhausted { pool: pool_key.clone() })?;
                Held::Prefix(Allocation::new(base, u8::try_from(prefix).unwrap_or(128)).map(HeldPrefix::from))
            }
            (Allocator::Prefix(a), Some(r)) => {
                let base = parse_ipv6(r).ok_or_else(|| requested_error("not an IPv6 address".to_owned()))?;
                a.reserve(base).map_err(|e| match e {
                    PrefixReserveError::Taken(..) => requested_error("it is already allocated".to_owned()),
                    other => requested_error(other.to_string()),
                })?;
                Held::Prefix(Allocation::new(base, u8::try_from(prefix).unwrap_or(128)).map(HeldPrefix::from))
            }
        };
        state.holders.insert(address.clone(), Holding { held, confirmed: false });
        let result = assigned(&state, held).ok_or_else(|| AllocateError::Unknown { pool: pool_key.clone() });
        self.dirty.mark(pool_key);
        result
    }

    /// Registers a claim that found the pool exhausted; it is woken when an address frees up.
    pub fn wait(&mut self, pool_key: &PoolKey, claim: &ObjectKey) {
        let state = self.pools.entry(pool_key.clone()).or_default();
        if !state.waiters.contains(claim) {
            state.waiters.push_back(claim.clone());
        }
    }

    /// Removes a claim from a pool's waiting list (it was allocated, deleted or paused).
    pub fn stop_waiting(&mut self, pool_key: &PoolKey, claim: &ObjectKey) {
        if let Some(state) = self.pools.get_mut(pool_key) {
            state.waiters.retain(|c| c != claim);
        }
    }

    fn wake_all(&mut self, key: &PoolKey) -> Woken {
        let Some(state) = self.pools.get_mut(key) else { return Vec::new() };
        if state.is_exhausted() {
            return Vec::new();
        }
        state.waiters.drain(..).collect()
    }

    /// Whether every pool's allocator counts as many addresses in use as it has holders (the simulation checks it
    /// after every step).
    #[cfg(test)]
    pub fn check_consistency(&self) -> Result<(), String> {
        for (key, state) in &self.pools {
            let used = state.counts().used;
            if state.allocator.is_some() && used != state.holders.len() as i64 {
                let holders: Vec<String> = state.holders.iter().map(|(k, h)| format!("{k}={}", h.held)).collect();
                return Err(format!("{key} counts {used} in use but has {} holders: {holders:?}", state.holders.len()));
            }
        }
        Ok(())
    }

    /// Every holder of a pool: the IPAddress (or reservation), what it holds, and whether it is confirmed.
    #[cfg(test)]
    pub fn holders(&self, key: &PoolKey) -> Vec<(ObjectKey, Held, bool)> {
        let Some(state) = self.pools.get(key) else { return Vec::new() };
        let mut holders: Vec<(ObjectKey, Held, bool)> =
            state.holders.iter().map(|(k, h)| (k.clone(), h.held, h.confirmed)).collect();
        holders.sort_by(|a, b| a.0.cmp(&b.0));
        holders
    }

    /// The D4 counts of a pool, and its spec error if any.
    pub fn counts(&self, key: &PoolKey) -> (PoolCounts, Option<String>) {
        match self.pools.get(key) {
            Some(state) => (state.counts(), state.config_error.clone()),
            None => (PoolCounts::default(), None),
        }
    }

    /// Number of IPAddresses recorded for a pool (the pool finalizer waits for 0; reservations do not count, they go
    /// with the pool).
    pub fn used(&self, key: &PoolKey) -> usize {
        self.pools.get(key).map_or(0, |p| p.holders.keys().filter(|k| !is_reservation(k)).count())
    }
}

/// Wakes as many waiters as the pool can now serve (at least one when anything is free).
fn take_waiters(state: &mut PoolState) -> Woken {
    if state.waiters.is_empty() || state.is_exhausted() {
        return Vec::new();
    }
    state.waiters.pop_front().into_iter().collect()
}

fn assigned(state: &PoolState, held: Held) -> Option<Assigned> {
    Some(Assigned { address: held.address()?, prefix: state.prefix, gateway: state.gateway.clone() })
}

/// An IPv6 address as [`parse_ip`] reads it.
fn parse_ipv6(s: &str) -> Option<Ipv6Addr> {
    match parse_ip(s) {
        Ok(IpAddr::V6(a)) => Some(a),
        _ => None,
    }
}

fn parse_config(spec: &PoolSpec) -> Result<Config, String> {
    let gateway = spec.gateway().filter(|g| !g.is_empty()).map(str::to_owned);
    match spec {
        PoolSpec::Prefix(spec) => {
            Ok(Config::Prefix(PrefixPoolConfig::new(&spec.to_ipam()).map_err(|e| e.to_string())?, gateway))
        }
        PoolSpec::Ip(spec) => Ok(Config::Ip(IpPoolConfig::new(&spec.to_ipam()).map_err(|e| e.to_string())?, gateway)),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// A pool spec from its JSON, for a pool of `kind`.
    pub(crate) fn spec(kind: PoolKind, value: serde_json::Value) -> PoolSpec {
        if kind.is_prefix_pool() {
            PoolSpec::Prefix(serde_json::from_value(value).expect("a prefix pool spec"))
        } else {
            PoolSpec::Ip(serde_json::from_value(value).expect("an IP pool spec"))
        }
    }

    fn pool() -> PoolKey {
        PoolKey::new(PoolKind::InClusterIPPool, "ns", "p")
    }

    fn obj(n: &str) -> ObjectKey {
        ObjectKey::new("ns", n)
    }

    #[test]
    fn holds_are_taken_before_the_create_and_kept_on_retry() {
        let mut r = Registry::new();
        r.apply_spec(
            &pool(),
            &spec(pool().kind, json!({"addresses": ["10.0.0.1-10.0.0.2"], "prefix": 24, "gateway": "10.0.0.254"})),
        );
        let a = r.allocate(&pool(), &obj("a"), None).unwrap();
        assert_eq!(a.address.to_string(), "10.0.0.1");
        assert_eq!((a.prefix, a.gateway.as_deref()), (24, Some("10.0.0.254")));
        // A retry of the same claim gets the same address; another claim gets the next.
        assert_eq!(r.allocate(&pool(), &obj("a"), None).unwrap().address.to_string(), "10.0.0.1");
        assert_eq!(r.allocate(&pool(), &obj("b"), None).unwrap().address.to_string(), "10.0.0.2");
        assert!(matches!(r.allocate(&pool(), &obj("c"), None), Err(AllocateError::Exhausted { .. })));
        r.wait(&pool(), &obj("c"));
        // The watch confirms a; b's create is rejected: b's address is free again and c is woken.
        r.record(&pool(), &obj("a"), Held::Ip(Some("10.0.0.1".parse().unwrap())));
        assert_eq!(r.abandon(&pool(), &obj("b")), vec![obj("c")]);
        assert_eq!(r.allocate(&pool(), &obj("c"), None).unwrap().address.to_string(), "10.0.0.2");
        // A confirmed hold is not abandoned.
        r.confirm(&pool(), &obj("c"));
        assert!(r.abandon(&pool(), &obj("c")).is_empty());
        assert_eq!(r.used(&pool()), 2);
    }

    /// An IPAddress written by hand with an IPv6 zone holds its address, as the Go provider reads it: it was counted
    /// as unparsable, and its address (IP pools) or child prefix (prefix pools) handed out again.
    #[test]
    fn an_ipaddress_written_with_a_zone_holds_its_address() {
        let mut r = Registry::new();
        let key = PoolKey::new(PoolKind::InClusterIPPool, "ns", "v6");
        r.apply_spec(&key, &spec(key.kind, json!({"addresses": ["fd00::1-fd00::2"], "prefix": 64})));
        let zoned = IpAddressSpec { address: "fd00::1%eth0".into(), prefix: Some(64), ..Default::default() };
        assert_eq!(Held::of(key.kind, &zoned), Held::Ip(Some("fd00::1".parse().unwrap())));
        r.record(&key, &obj("by-hand"), Held::of(key.kind, &zoned));
        assert_eq!(r.allocate(&key, &obj("a"), None).unwrap().address.to_string(), "fd00::2");
        assert_eq!(r.counts(&key).0.out_of_range, 0);

        let key = PoolKey::new(PoolKind::InClusterPrefixPool, "ns", "prefixes");
        r.apply_spec(&key, &spec(key.kind, json!({"prefixes": ["fd00::/63"], "allocationPrefixLength": 64})));
        let zoned = IpAddressSpec { address: "fd00::%eth0".into(), prefix: Some(64), ..Default::default() };
        r.record(&key, &obj("by-hand"), Held::of(key.kind, &zoned));
        assert_eq!(r.allocate(&key, &obj("a"), None).unwrap().address.to_string(), "fd00:0:0:1::");
        assert!(matches!(r.allocate(&key, &obj("b"), None), Err(AllocateError::Exhausted { .. })));
    }

    /// A requested address is read as the webhook reads it (which admits a zone in `preAllocations`): a claim the
    /// pool was admitted with must not wait for ever on "not an IP address".
    #[test]
    fn a_requested_address_with_a_zone_is_the_address() {
        let mut r = Registry::new();
        let key = PoolKey::new(PoolKind::InClusterIPPool, "ns", "v6");
        r.apply_spec(&key, &spec(key.kind, json!({"addresses": ["fd00::1-fd00::9"], "prefix": 64})));
        assert_eq!(r.allocate(&key, &obj("a"), Some("fd00::5%eth0")).unwrap().address.to_string(), "fd00::5");
        assert!(matches!(r.allocate(&key, &obj("b"), Some("fd00::5")), Err(AllocateError::Requested { .. })));
    }

    #[test]
    fn addresses_recorded_before_the_pool_spec_count_once_it_arrives() {
        let mut r = Registry::new();
        r.record(&pool(), &obj("x"), Held::Ip(Some("10.0.0.1".parse().unwrap())));
        assert!(matches!(r.allocate(&pool(), &obj("y"), None), Err(AllocateError::Unknown { .. })));
        r.apply_spec(&pool(), &spec(pool().kind, json!({"addresses": ["10.0.0.1-10.0.0.3"], "prefix": 24})));
        assert_eq!(r.allocate(&pool(), &obj("y"), None).unwrap().address.to_string(), "10.0.0.2");
        let (c, err) = r.counts(&pool());
        assert_eq!((c.total, c.used, c.free, err), (3, 2, 1, None));
    }

    #[test]
    fn an_invalid_spec_allocates_nothing_and_counts_everything_out_of_range() {
        let mut r = Registry::new();
        r.record(&pool(), &obj("x"), Held::Ip(Some("10.0.0.1".parse().unwrap())));
        r.apply_spec(&pool(), &spec(pool().kind, json!({"addresses": ["nope"], "prefix": 24})));
        assert!(matches!(r.allocate(&pool(), &obj("y"), None), Err(AllocateError::InvalidPool { .. })));
        let (c, err) = r.counts(&pool());
        assert_eq!((c.total, c.used, c.out_of_range), (0, 1, 1));
        assert!(err.is_some());
    }

    #[test]
    fn a_pool_edit_wakes_every_waiter_when_it_frees_space() {
        let mut r = Registry::new();
        r.apply_spec(&pool(), &spec(pool().kind, json!({"addresses": ["10.0.0.1"], "prefix": 24})));
        r.allocate(&pool(), &obj("a"), None).unwrap();
        r.wait(&pool(), &obj("b"));
        r.wait(&pool(), &obj("c"));
        assert_eq!(
            r.apply_spec(&pool(), &spec(pool().kind, json!({"addresses": ["10.0.0.1-10.0.0.3"], "prefix": 24}))),
            vec![obj("b"), obj("c")]
        );
    }

    #[test]
    fn requested_addresses() {
        let mut r = Registry::new();
        r.apply_spec(
            &pool(),
            &spec(
                pool().kind,
                json!({"addresses": ["10.0.0.1-10.0.0.5"], "prefix": 24, "excludedAddresses": ["10.0.0.4"]}),
            ),
        );
        assert_eq!(r.allocate(&pool(), &obj("a"), Some("10.0.0.3")).unwrap().address.to_string(), "10.0.0.3");
        let err = r.allocate(&pool(), &obj("b"), Some("10.0.0.3")).unwrap_err().to_string();
        assert!(err.contains("already allocated"), "{err}");
        let err = r.allocate(&pool(), &obj("b"), Some("10.0.0.4")).unwrap_err().to_string();
        assert!(err.contains("excludedAddresses"), "{err}");
        let err = r.allocate(&pool(), &obj("b"), Some("10.0.9.9")).unwrap_err().to_string();
        assert!(err.contains("not in the pool's addresses"), "{err}");
        assert_eq!(r.allocate(&pool(), &obj("b"), None).unwrap().address.to_string(), "10.0.0.1");
    }

    #[test]
    fn an_address_held_twice_is_reported_and_stays_in_use_until_both_are_released() {
        let mut r = Registry::new();
        r.apply_spec(&pool(), &spec(pool().kind, json!({"addresses": ["10.0.0.1-10.0.0.3"], "prefix": 24})));
        let ip = |s: &str| Held::Ip(Some(s.parse().unwrap()));
        assert_eq!(r.record(&pool(), &obj("a"), ip("10.0.0.1")), None);
        // Seen again (a resync): not a duplicate.
        assert_eq!(r.record(&pool(), &obj("a"), ip("10.0.0.1")), None);
        let d = r.record(&pool(), &obj("b"), ip("10.0.0.1")).expect("a duplicate");
        assert_eq!(d.holders, vec![obj("a"), obj("b")]);
        assert_eq!(d.to_string(), "10.0.0.1 is held by more than one IPAddress: ns/a, ns/b");
        let d = r.record(&pool(), &obj("c"), ip("10.0.0.1")).expect("a third holder");
        assert_eq!(d.holders, vec![obj("a"), obj("b"), obj("c")]);
        assert_eq!(r.duplicates(&pool()).len(), 1);
        assert!(r.duplicate_of(&pool(), &obj("b")).is_some() && r.duplicate_of(&pool(), &obj("x")).is_none());
        // Releasing one holder keeps the address in use: the next allocation does not hand it out a third time. The
        // remaining holders are woken (their claims' conditions name the duplicate).
        assert_eq!(r.forget(&pool(), &obj("a")), vec![obj("b"), obj("c")]);
        assert_eq!(r.forget(&pool(), &obj("b")), vec![obj("c")]);
        assert!(r.duplicates(&pool()).is_empty(), "one holder left: no longer a duplicate");
        assert_eq!(r.allocate(&pool(), &obj("d"), None).unwrap().address.to_string(), "10.0.0.2");
        r.forget(&pool(), &obj("c"));
        assert_eq!(r.allocate(&pool(), &obj("e"), None).unwrap().address.to_string(), "10.0.0.1");
    }

    #[test]
    fn duplicates_recorded_before_the_pool_spec_are_found_when_it_arrives() {
        let mut r = Registry::new();
        let ip = |s: &str| Held::Ip(Some(s.parse().unwrap()));
        assert_eq!(r.record(&pool(), &obj("a"), ip("10.0.0.1")), None);
        assert_eq!(r.record(&pool(), &obj("b"), ip("10.0.0.1")), None, "unknown before the spec");
        r.apply_spec(&pool(), &spec(pool().kind, json!({"addresses": ["10.0.0.1-10.0.0.3"], "prefix": 24})));
        let found = r.duplicates(&pool());
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].holders, vec![obj("a"), obj("b")]);
    }

    #[test]
    fn prefix_pools() {
        let mut r = Registry::new();
        let key = PoolKey::new(PoolKind::GlobalInClusterPrefixPool, "ignored", "pp");
        assert_eq!(&*key.namespace, "");
        r.apply_spec(
            &key,
            &spec(key.kind, json!({"prefixes": ["fd00::/62"], "allocationPrefixLength": 64, "gateway": "fd00::1"})),
        );
        let a = r.allocate(&key, &obj("a"), None).unwrap();
        assert_eq!((a.address.to_string(), a.prefix, a.gateway.as_deref()), ("fd00::".into(), 64, Some("fd00::1")));
        let spec = IpAddressSpec { address: "fd00:0:0:1::".into(), prefix: Some(64), ..Default::default() };
        r.record(&key, &obj("b"), Held::of(key.kind, &spec));
        assert_eq!(r.allocate(&key, &obj("c"), None).unwrap().address.to_string(), "fd00:0:0:2::");
    }

    #[test]
    fn a_moved_away_address_stays_held_as_a_reservation_until_it_comes_back() {
        let mut r = Registry::new();
        let key = PoolKey::new(PoolKind::GlobalInClusterIPPool, "", "g");
        r.apply_spec(&key, &spec(key.kind, json!({"addresses": ["10.0.0.1-10.0.0.2"], "prefix": 24})));
        let ip = Held::Ip(Some("10.0.0.1".parse().unwrap()));
        r.record(&key, &obj("a"), ip);
        // The IPAddress moves away: its hold becomes the reservation, never free in between.
        assert_eq!(r.transfer(&key, &obj("a"), &reservation_key(ip)), Some(ip));
        assert_eq!(r.held_by(&key, &obj("a")), None);
        assert_eq!(r.reservations(&key), [ip]);
        assert_eq!(r.used(&key), 0, "a reservation does not hold the pool's finalizer");
        assert_eq!(r.counts(&key).0.used, 1, "but it counts as used");
        assert_eq!(r.allocate(&key, &obj("b"), None).unwrap().address.to_string(), "10.0.0.2");
        assert!(matches!(r.allocate(&key, &obj("c"), None), Err(AllocateError::Exhausted { .. })));
        // Reserving what is held does nothing; an unknown key transfers nothing.
        assert!(!r.reserve(&key, ip));
        assert_eq!(r.transfer(&key, &obj("nobody"), &obj("x")), None);
        // It comes back under a new IPAddress: no duplicate, no reservation left.
        assert_eq!(r.transfer(&key, &reservation_key(ip), &obj("a2")), Some(ip));
        assert_eq!(r.record(&key, &obj("a2"), ip), None);
        assert!(r.reservations(&key).is_empty());
        assert!(r.duplicates(&key).is_empty());
        // A reservation from the pool's annotation alone, released again.
        r.forget(&key, &obj("a2"));
        assert!(r.reserve(&key, ip));
        assert_eq!(r.counts(&key).0.used, 2);
        r.forget(&key, &reservation_key(ip));
        assert_eq!(r.allocate(&key, &obj("c"), None).unwrap().address.to_string(), "10.0.0.1");
    }
}
