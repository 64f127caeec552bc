//! The shared allocator state of every pool: the allocator of `crate::ipam`, the IPAddresses holding its addresses,
//! and the claims waiting for a free address. It is fed by the IPAddress watch and by our own writes the moment they
//! succeed, so allocation never re-lists and never waits for a cache to catch up. It is part of the index's state and
//! written only through it, one step at a time (`super::Index`).

mod held;
mod holders;
mod pins;
mod pool_state;
mod quota;
mod waiting;

use std::collections::{HashMap, VecDeque};

use crate::api::PoolSpec;
use crate::api::v1alpha2::PoolQuota;
pub use crate::compact::ObjectKey;
pub use crate::compact::{ClusterKey, cluster_key};
use crate::ipam::address::parse_ip;
use crate::ipam::{
    Allocation, IpPoolAllocator, IpPoolConfig, PoolCounts, PrefixPoolAllocator, PrefixPoolConfig, ReserveError,
    prefix_pool::PrefixReserveError,
};
pub use held::{
    AllocateError, Assigned, Duplicate, Held, HeldPrefix, PoolKey, aside_key, is_aside, is_placeholder, is_reservation,
    reservation_key,
};
use holders::{Holders, Holding};
pub use pins::{PinnedTo, is_pin, pin_key};
use pool_state::{Dirty, assigned, parse_config, parse_ipv6};
pub use quota::Claimant;
use quota::{QuotaWaiters, quota_of};
use waiting::take_waiters;

enum Allocator {
    Ip(IpPoolAllocator),
    Prefix(PrefixPoolAllocator),
}

/// The configuration a pool spec parses to.
#[derive(Clone, Debug, PartialEq)]
enum Config {
    /// With the gateway of each subnet, as written (top-level first).
    Ip(IpPoolConfig, Vec<Option<String>>),
    Prefix(PrefixPoolConfig, Option<String>),
}

/// The state of one pool.
#[derive(Default)]
struct PoolState {
    /// The spec we built the allocator from (to notice changes).
    spec: Option<PoolSpec>,
    config_error: Option<String>,
    allocator: Option<Allocator>,
    /// The top-level prefix of an IP pool, or the allocation length of a prefix pool.
    prefix: i64,
    /// The gateway of each subnet as written (docs/compatibility.md D19), top-level first; one for a prefix pool.
    gateways: Vec<Option<String>>,
    holders: Holders,
    /// `spec.quota`: how many addresses the claims of one Cluster may hold (docs/compatibility.md D21).
    quota: Option<PoolQuota>,
    /// Claims whose Cluster held its quota, by Cluster: all of a Cluster are woken once it holds fewer.
    quota_waiters: QuotaWaiters,
    /// Claims that found the pool exhausted, oldest first: one is woken for each address that frees up.
    waiters: VecDeque<ObjectKey>,
    /// Claims whose requested address is held: all are woken whenever an address frees up (they are few, and any
    /// freed address may be the one one of them wants). Kept apart so that they never take a wake the waiters need.
    requesters: Vec<ObjectKey>,
    /// Addresses held by more than one IPAddress, with their holders (empty unless something went wrong).
    duplicates: HashMap<Held, Vec<ObjectKey>>,
    /// `spec.preAllocations`: addresses reserved for the claims they name.
    pins: pins::Pins,
    /// A pin's placeholder took an address since the requesters were last woken: the pinned claim may wait for it.
    requesters_due: bool,
    /// Its spec was removed (the pool deleted while IPAddresses of it stay), or every watch listed without it (deleted
    /// before this process saw it): no spec will come to find duplicates.
    spec_removed: bool,
}

/// The allocator state of all pools.
#[derive(Default)]
pub struct Registry {
    pools: HashMap<PoolKey, PoolState>,
    /// Pools whose counts changed since the status writer last took them, oldest change first.
    dirty: Dirty,
    /// Claims woken by steps that return something else (an address replaced or handed over, a wake passed on);
    /// the index takes them at the end of its step.
    woken: Woken,
    /// Every watch has listed: a pool without a spec by then is gone, and none will come.
    synced: bool,
}

/// Names `to` in place of `from` in the duplicate group `from` is part of, if any (its hold moves over).
fn rename_holder(state: &mut PoolState, from: &ObjectKey, to: &ObjectKey) {
    if let Some(holders) = state.group_of(from).and_then(|wide| state.duplicates.get_mut(&wide)) {
        holders.iter_mut().filter(|k| *k == from).for_each(|k| *k = to.clone());
        holders.sort();
    }
}

/// The state of `pool_key`, made when it is not known yet: after every watch listed (`synced`), a pool seen first
/// through an IPAddress has no spec to come.
fn state_of<'a>(pools: &'a mut HashMap<PoolKey, PoolState>, synced: bool, pool_key: &PoolKey) -> &'a mut PoolState {
    let state = pools.entry(pool_key.clone()).or_default();
    state.spec_removed |= synced && state.spec.is_none();
    state
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
        self.dirty.take(limit)
    }

    /// Applies a pool's spec. Addresses in use are kept. Returns the claims to wake when the change may have freed
    /// addresses.
    pub fn apply_spec(&mut self, key: &PoolKey, spec: &PoolSpec) -> Woken {
        let state = self.pools.entry(key.clone()).or_default();
        if state.spec.as_ref() == Some(spec) {
            return Vec::new();
        }
        state.spec = Some(spec.clone());
        state.spec_removed = false;
        state.quota = quota_of(spec);
        let config = parse_config(spec);
        match config {
            Err(reason) => {
                state.config_error = Some(reason);
                state.allocator = None;
            }
            Ok(config) => {
                state.config_error = None;
                match (&mut state.allocator, config) {
                    (Some(Allocator::Ip(a)), Config::Ip(c, gateways)) => {
                        if a.apply_config(c.clone()).is_ok() {
                            state.prefix = i64::from(c.prefix());
                            state.gateways = gateways;
                        } else {
                            // The other family: the addresses in use are rebuilt from the holders, never dropped.
                            state.rebuild(Config::Ip(c, gateways));
                        }
                    }
                    (Some(Allocator::Prefix(a)), Config::Prefix(c, gateway)) => {
                        state.prefix = i64::from(c.allocation_length());
                        a.apply_config(c);
                        state.gateways = vec![gateway];
                    }
                    (_, config) => state.rebuild(config),
                }
            }
        }
        state.set_pins(key, spec);
        self.dirty.mark(key);
        self.wake_all(key)
    }

    /// Every watch has listed: the pools still without a spec are gone (deleted before this process saw them), and
    /// their holders are compared with each other from now on, as a removed spec's are. Returns the duplicates found
    /// among them (a deposed leader's late create into a pool deleted before this term listed, beside a bound
    /// claim's: soak seed 430208541).
    pub fn synced(&mut self) -> Vec<Duplicate> {
        self.synced = true;
        let mut found = Vec::new();
        for (key, state) in &mut self.pools {
            // A pool's spec may have listed before its IPAddresses: its strategy guesses again from all of them.
            state.reset_order();
            if state.spec.is_none() && !state.spec_removed {
                state.spec_removed = true;
                state.find_duplicates();
                found.extend(state.duplicates.iter().map(|(held, holders)| Duplicate {
                    pool: key.clone(),
                    held: *held,
                    holders: holders.clone(),
                }));
            }
        }
        found.sort_unstable_by(|a, b| (&a.pool, &a.holders).cmp(&(&b.pool, &b.holders)));
        found
    }

    /// Forgets a deleted pool's spec (its IPAddresses stay recorded: they count if the pool comes back).
    pub fn remove_spec(&mut self, key: &PoolKey) {
        if let Some(state) = self.pools.get_mut(key) {
            state.spec = None;
            state.spec_removed = true;
            state.config_error = None;
            state.allocator = None;
            state.quota = None;
            state.holders.retain(|k, _| !is_pin(k));
            state.pins = pins::Pins::default();
        }
    }

    /// Records an IPAddress seen in the API server (or just created by us). Returns the duplicate when another
    /// IPAddress of the pool holds the same address: that must never happen, and the caller says so loudly.
    /// `cluster`: the Cluster its cluster-name label names, whose quota it counts in.
    pub fn record(
        &mut self,
        pool_key: &PoolKey,
        address: &ObjectKey,
        held: Held,
        cluster: Option<ClusterKey>,
    ) -> Option<Duplicate> {
        let state = state_of(&mut self.pools, self.synced, pool_key);
        match state.holders.get(address) {
            Some(h) if h.held == held => {
                // Confirmed, it counts in the pool's status now (`PoolState::status_counts`).
                let newly_confirmed = state.holders.set_confirmed(address, true) == Some(false);
                // Its label changed, or it came over from a reservation: it counts in its Cluster's quota now. The
                // Cluster it counted in may hold less than its quota: its waiting claims, and the bound ones waiting
                // for their machine's address as requesters, look again (helper-132 N3).
                if state.holders.set_cluster(address, cluster) {
                    self.woken.extend(take_waiters(state));
                    self.dirty.mark(pool_key);
                }
                if newly_confirmed {
                    self.dirty.mark(pool_key);
                }
                return None;
            }
            Some(_) => {
                if let Some(old) = state.holders.remove(address) {
                    let _ = state.clear_duplicate(address, old.held);
                    state.let_go(old.held);
                }
            }
            None => {}
        }
        // The claim's own hold, set aside while a late IPAddress of its name held another address, is this
        // IPAddress's: its create, in flight meanwhile, made it with that address (soak seed 810962108, a Random pool
        // whose deposed leader picked another address than the new one).
        let aside = aside_key(address);
        if state.holders.get(&aside).is_some_and(|h| h.held == held)
            && let Some(holding) = state.holders.remove(&aside)
        {
            rename_holder(state, &aside, address);
            state.holders.insert(address.clone(), Holding { confirmed: true, cluster, ..holding });
            self.woken.extend(take_waiters(state));
            self.dirty.mark(pool_key);
            return None;
        }
        state.unpin(held);
        let duplicate = state.is_held(held).then(|| state.note_duplicate(pool_key, address, held));
        state.record(held);
        state.holders.insert(address.clone(), Holding::new(held, true, cluster));
        // The address it held before, if any, is free now.
        self.woken.extend(take_waiters(state));
        self.dirty.mark(pool_key);
        duplicate
    }

    /// The duplicate the IPAddress `address` is part of, if another IPAddress of the pool holds its address too.
    pub fn duplicate_of(&self, pool_key: &PoolKey, address: &ObjectKey) -> Option<Duplicate> {
        let state = self.pools.get(pool_key)?;
        let wide = state.group_of(address)?;
        let holders = state.duplicates.get(&wide)?.clone();
        Some(Duplicate { pool: pool_key.clone(), held: wide, holders })
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

    /// The duplicates as a manager that never knew some of their holds sees them: without the holds no IPAddress
    /// confirms and those `leave_out` names, the members left grouped again (a wide prefix left out may have been all
    /// that tied two narrower ones together), in the same order.
    pub fn duplicates_without(&self, pool_key: &PoolKey, leave_out: impl Fn(&ObjectKey) -> bool) -> Vec<Duplicate> {
        let Some(state) = self.pools.get(pool_key) else { return Vec::new() };
        let holds: Vec<(Held, ObjectKey)> = state
            .duplicates
            .values()
            .flatten()
            .filter(|k| !leave_out(k))
            .filter_map(|k| state.holders.get(k).filter(|h| h.confirmed).map(|h| (h.held, k.clone())))
            .collect();
        let mut out: Vec<Duplicate> = pool_state::overlapping_groups(holds)
            .map(|(held, holders)| Duplicate { pool: pool_key.clone(), held, holders })
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
    /// moved over, `None` when `from` held nothing. `cluster`: the Cluster whose quota `to` counts in (none for a
    /// reservation; an IPAddress's is set again when it is recorded).
    pub fn transfer(
        &mut self,
        pool_key: &PoolKey,
        from: &ObjectKey,
        to: &ObjectKey,
        cluster: Option<ClusterKey>,
    ) -> Option<Held> {
        let state = self.pools.get_mut(pool_key)?;
        let holding = state.holders.remove(from)?;
        if let Some(old) = state.holders.remove(to) {
            let _ = state.clear_duplicate(to, old.held);
            state.let_go(old.held);
        }
        rename_holder(state, from, to);
        let held = holding.held;
        // A reservation counts in no Cluster's quota.
        let cluster = cluster.filter(|_| !is_placeholder(to));
        state.holders.insert(to.clone(), Holding::new(held, true, cluster));
        // What `to` held before, if it held something else, is free now; the Cluster `from` counted in may hold less
        // than its quota.
        self.woken.extend(take_waiters(state));
        self.dirty.mark(pool_key);
        Some(held)
    }

    /// Sets the hold of `address` aside, still held and as unconfirmed as it was (see [`aside_key`]): another object of
    /// its name is about to be recorded, holding something else, while the address stays its claim's. The claim takes
    /// it back when it allocates (`allocate`), and it goes as the name's uncertain hold goes (`abandon_unless`).
    pub fn set_aside(&mut self, pool_key: &PoolKey, address: &ObjectKey) {
        let Some(state) = self.pools.get_mut(pool_key) else { return };
        let aside = aside_key(address);
        if state.holders.contains_key(&aside) {
            return;
        }
        if let Some(holding) = state.holders.remove(address) {
            rename_holder(state, address, &aside);
            state.holders.insert(aside, holding);
            self.dirty.mark(pool_key);
        }
    }

    /// Whether every watch has listed once (`synced` ran).
    pub fn is_synced(&self) -> bool {
        self.synced
    }

    /// Whether a hold is set aside for the claim of `address`'s name ([`Registry::set_aside`]).
    pub fn has_aside(&self, pool_key: &PoolKey, address: &ObjectKey) -> bool {
        self.pools.get(pool_key).is_some_and(|p| p.holders.contains_key(&aside_key(address)))
    }

    /// What `address` holds in the pool, if anything.
    pub fn held_by(&self, pool_key: &PoolKey, address: &ObjectKey) -> Option<Held> {
        self.pools.get(pool_key)?.holders.get(address).map(|h| h.held)
    }

    /// Whether, once every watch listed, an IPAddress of another claim than `claim`'s, confirmed by the watch, holds
    /// `held` (no reservation, pin placeholder or hold set aside; rare, so a scan is fine).
    pub fn is_held_by_another_ipaddress(&self, pool_key: &PoolKey, held: Held, claim: &ObjectKey) -> bool {
        self.synced
            && self.pools.get(pool_key).is_some_and(|state| {
                state.holders.iter().any(|(k, h)| h.held == held && h.confirmed && !is_placeholder(k) && k != claim)
            })
    }

    /// Reserves `held` even when an IPAddress holds it already; returns the duplicate that makes then.
    pub fn reserve_alongside(&mut self, pool_key: &PoolKey, held: Held) -> Option<Duplicate> {
        let state = state_of(&mut self.pools, self.synced, pool_key);
        let key = reservation_key(held);
        if state.holders.contains_key(&key) {
            return None;
        }
        state.unpin(held);
        let duplicate = state.is_held(held).then(|| state.note_duplicate(pool_key, &key, held));
        state.record(held);
        state.holders.insert(key, Holding::new(held, true, None));
        self.dirty.mark(pool_key);
        duplicate
    }

    /// Reserves `held` (see [`reservation_key`]) unless something holds it already; returns whether it did.
    pub fn reserve(&mut self, pool_key: &PoolKey, held: Held) -> bool {
        let state = state_of(&mut self.pools, self.synced, pool_key);
        let key = reservation_key(held);
        // A pin's placeholder makes way: an address in use on another management cluster is reserved for it here.
        state.unpin(held);
        if state.holders.contains_key(&key) || state.is_held(held) {
            return false;
        }
        state.record(held);
        state.holders.insert(key, Holding::new(held, true, None));
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

    /// Drops our not-yet-confirmed hold of `address`, and one set aside for its claim, unless `keep` says otherwise.
    pub fn abandon_unless(&mut self, pool_key: &PoolKey, address: &ObjectKey, keep: impl FnOnce() -> bool) -> Woken {
        let keep = keep();
        let mut woken = self.release_holder_if(pool_key, address, |holding| !holding.confirmed && !keep);
        woken.extend(self.release_holder_if(pool_key, &aside_key(address), |holding| !holding.confirmed && !keep));
        woken
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
        state.let_go(old.held);
        woken.extend(take_waiters(state));
        self.dirty.mark(pool_key);
        woken
    }

    /// The pool where `address` holds something not yet seen in the API server, or has a hold set aside, if any. A
    /// placeholder (a reservation, a pin, a hold set aside) is no IPAddress, and has none.
    pub fn unconfirmed_hold(&self, address: &ObjectKey) -> Option<PoolKey> {
        if is_placeholder(address) {
            return None;
        }
        let aside = aside_key(address);
        let unconfirmed = |p: &PoolState, k: &ObjectKey| p.holders.get(k).is_some_and(|h| !h.confirmed);
        self.pools.iter().find(|(_, p)| unconfirmed(p, address) || unconfirmed(p, &aside)).map(|(k, _)| k.clone())
    }

    /// Whether `address` holds something not yet seen in the API server (our create of it is uncertain).
    pub fn holds_unconfirmed(&self, pool_key: &PoolKey, address: &ObjectKey) -> bool {
        self.pools.get(pool_key).is_some_and(|p| p.holders.get(address).is_some_and(|h| !h.confirmed))
    }

    /// The IPAddress `address` is gone while its claim keeps its hold: unconfirmed again, as the hold of a create not
    /// known to have happened, until the claim's new IPAddress is created or seen.
    pub fn unconfirm(&mut self, pool_key: &PoolKey, address: &ObjectKey) {
        if let Some(state) = self.pools.get_mut(pool_key)
            && state.holders.set_confirmed(address, false) == Some(true)
        {
            self.dirty.mark(pool_key);
        }
    }

    /// Marks a hold confirmed, as recording its IPAddress does (for tests that hold without an IPAddress object).
    pub fn confirm(&mut self, pool_key: &PoolKey, address: &ObjectKey) {
        if let Some(state) = self.pools.get_mut(pool_key) {
            state.holders.set_confirmed(address, true);
        }
    }

    /// The address an IPAddress named `address` should get in `pool_key`: the one it holds already (a retry after an
    /// uncertain create, or an IPAddress deleted from under its live claim), else `requested` when given, else the one
    /// the pool pins to it, else the lowest free one (never a pinned one). The hold is taken here, before the
    /// IPAddress is created, so concurrent allocations in the pool never pick the same address. A new address, but a
    /// pinned one, is refused while the claimant's Cluster holds its quota (docs/compatibility.md D21): checked in
    /// this step, so that two claims of one Cluster never both take the last one.
    pub fn allocate(
        &mut self,
        pool_key: &PoolKey,
        address: &ObjectKey,
        requested: Option<&str>,
        claimant: &Claimant,
    ) -> Result<Assigned, AllocateError> {
        let state = self.pools.entry(pool_key.clone()).or_default();
        if let Some(reason) = &state.config_error {
            return Err(AllocateError::InvalidPool { pool: pool_key.clone(), reason: reason.clone() });
        }
        // The hold set aside for this claim (`set_aside`) is its own again: the address its machine uses.
        let aside = aside_key(address);
        if !state.holders.contains_key(address)
            && let Some(holding) = state.holders.remove(&aside)
        {
            rename_holder(state, &aside, address);
            state.holders.insert(address.clone(), holding);
        }
        if let Some(h) = state.holders.get(address) {
            let held = h.held;
            // Come over from a reservation (a bound claim's address moved back), it counts in its Cluster's quota.
            if h.cluster.is_none()
                && !is_placeholder(address)
                && state.holders.set_cluster(address, claimant.cluster.clone())
            {
                self.dirty.mark(pool_key);
            }
            return assigned(state, held).ok_or_else(|| AllocateError::InvalidPool {
                pool: pool_key.clone(),
                reason: format!("IPAddress {address} holds an address the pool cannot parse"),
            });
        }
        let prefix = state.prefix;
        // docs/compatibility.md D14: the claim's requested address, else the one its pool pins to it.
        let pinned = state.pins.of_claim(address).map(|h| h.to_string());
        let target = requested.map(str::to_owned).or(pinned.clone());
        let requested_error = |reason: String| AllocateError::Requested {
            pool: pool_key.clone(),
            requested: target.clone().unwrap_or_default(),
            reason,
        };
        if let (Some(pin), Some(asked)) = (&pinned, requested)
            && parse_ip(asked).ok().map(|ip| Held::Ip(Some(ip)).to_string()).as_ref() != Some(pin)
        {
            return Err(requested_error(format!("spec.preAllocations pins {pin} to this claim")));
        }
        if let (Some(Allocator::Ip(_)), Some(t)) = (&state.allocator, &target) {
            let ip = parse_ip(t).map_err(|_| requested_error("not an IP address".to_owned()))?;
            let held = Held::Ip(Some(ip));
            // A pinned address is reserved for its claim: no other gets it, however it asks.
            if let Some(owner) = state.pins.owner(held).filter(|owner| !owner.matches(address)) {
                return Err(requested_error(format!("spec.preAllocations pins it to claim {owner}")));
            }
            if state.take_pin(address, held, claimant.cluster.clone()) {
                self.dirty.mark(pool_key);
                return assigned(state, held).ok_or_else(|| AllocateError::Unknown { pool: pool_key.clone() });
            }
        }
        if state.allocator.is_none() {
            return Err(AllocateError::Unknown { pool: pool_key.clone() });
        }
        // The claim's own pin is its own, whatever its Cluster holds (held by another IPAddress now, it is asked for as
        // a requested address is, and waited for as one: helper-131 F1).
        if pinned.is_none() {
            state.check_quota(pool_key, claimant)?;
        }
        let Some(allocator) = state.allocator.as_mut() else {
            return Err(AllocateError::Unknown { pool: pool_key.clone() });
        };
        let held = match (allocator, target.as_deref()) {
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
        state.holders.insert(address.clone(), Holding::new(held, false, claimant.cluster.clone()));
        let result = assigned(state, held).ok_or_else(|| AllocateError::Unknown { pool: pool_key.clone() });
        self.dirty.mark(pool_key);
        result
    }

    /// Whether the pool's spec, as loaded, allocates `held` (`None` before a valid spec is loaded).
    pub fn allocates(&self, pool_key: &PoolKey, held: Held) -> Option<bool> {
        let state = self.pools.get(pool_key)?;
        state.allocator.as_ref()?;
        Some(state.allocates(held))
    }

    /// Up to `limit` IPAddresses of the pool holding what its spec does not allocate, by name, with what they hold.
    pub fn out_of_range(
        &self,
        pool_key: &PoolKey,
        limit: usize,
        known_here_only: impl Fn(&ObjectKey) -> bool,
    ) -> Vec<(ObjectKey, Held)> {
        let Some(state) = self.pools.get(pool_key) else { return Vec::new() };
        if state.counts().out_of_range == 0 {
            return Vec::new();
        }
        let mut found: Vec<(ObjectKey, Held)> = state
            .holders
            .iter()
            .filter(|(k, h)| {
                h.confirmed
                    && !is_placeholder(k)
                    && !known_here_only(k)
                    && self.allocates(pool_key, h.held) == Some(false)
            })
            .map(|(k, h)| (k.clone(), h.held))
            .collect();
        found.sort_by(|a, b| a.0.cmp(&b.0));
        found.truncate(limit);
        found
    }

    /// The D4 counts of a pool, and its spec error if any.
    pub fn counts(&self, key: &PoolKey) -> (PoolCounts, Option<String>) {
        match self.pools.get(key) {
            Some(state) => (state.counts(), state.config_error.clone()),
            None => (PoolCounts::default(), None),
        }
    }

    /// The counts of a pool its status says (see `PoolState::status_counts`).
    pub fn status_counts(
        &self,
        key: &PoolKey,
        seen_by_all: impl Fn(Held) -> bool,
        known_here_only: impl Fn(&ObjectKey) -> bool,
    ) -> PoolCounts {
        self.pools.get(key).map(|p| p.status_counts(seen_by_all, known_here_only)).unwrap_or_default()
    }

    /// The pool's status counts changed though its holds did not (a hold became known to this manager only, or known
    /// to every manager again): its status is written again.
    pub fn status_changed(&mut self, key: &PoolKey) {
        self.dirty.mark(key);
    }

    /// Number of IPAddresses recorded for a pool (the pool finalizer waits for 0; reservations and pins do not count,
    /// they go with the pool).
    pub fn used(&self, key: &PoolKey) -> usize {
        self.pools.get(key).map_or(0, |p| p.holders.keys().filter(|k| !is_placeholder(k)).count())
    }
}

#[cfg(test)]
pub(crate) mod tests;
