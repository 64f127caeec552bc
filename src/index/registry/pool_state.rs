//! One pool's allocator state (its allocator, its holders and its waiters), and the queue of pools that changed.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv6Addr};

use super::{
    Allocator, Assigned, Config, Duplicate, Held, HeldPrefix, IpPoolAllocator, IpPoolConfig, ObjectKey, PoolCounts,
    PoolKey, PoolSpec, PoolState, PrefixPoolAllocator, PrefixPoolConfig, parse_ip,
};
use crate::ipam::Family;

impl PoolState {
    pub(super) fn rebuild(&mut self, config: Config) {
        let held: Vec<Held> = self.holders.values().map(|h| h.held).collect();
        self.find_duplicates();
        self.allocator = Some(match config {
            Config::Ip(c, gateways) => {
                self.prefix = i64::from(c.prefix());
                self.gateways = gateways;
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
                self.gateways = vec![gateway];
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

    /// Rebuilds the duplicate index from every holder (at a rebuild, when addresses arrived before the spec): the
    /// holders that share an address, in groups keyed by the widest hold of each.
    pub(super) fn find_duplicates(&mut self) {
        let holds: Vec<(Held, ObjectKey)> =
            self.holders.iter().filter(|(_, h)| h.held.address().is_some()).map(|(k, h)| (h.held, k.clone())).collect();
        self.duplicates = overlapping_groups(holds).collect();
    }

    /// Whether another IPAddress holds `held` already, or for a prefix pool, a prefix overlapping it (known once the
    /// pool's spec is loaded).
    pub(super) fn is_held(&self, held: Held) -> bool {
        match (&self.allocator, held) {
            (Some(Allocator::Ip(a)), Held::Ip(Some(ip))) if a.config().family() == Family::of(&ip) => a.is_in_use(ip),
            (Some(Allocator::Prefix(a)), Held::Prefix(Some(p))) => a.holds(p.allocation()),
            // An address of the other family, which the allocator cannot represent: the holders say (rare, so a scan
            // is fine). Without a spec nothing is known yet (the duplicates are found when it arrives).
            (Some(Allocator::Ip(_)), Held::Ip(Some(_))) => self.holders.values().any(|h| h.held == held),
            // The pool deleted while its IPAddresses stay: no spec will come, the holders say (a deposed leader's late
            // create into it was adopted beside a bound claim's: soak seed 120232318).
            (None, _) if self.spec_removed && held.address().is_some() => {
                self.holders.values().any(|h| h.held.overlaps(held))
            }
            _ => false,
        }
    }

    /// The key of the duplicate group `address` is in, if any (there are none unless something went wrong, so a scan
    /// is fine).
    pub(super) fn group_of(&self, address: &ObjectKey) -> Option<Held> {
        self.duplicates.iter().find(|(_, members)| members.contains(address)).map(|(wide, _)| *wide)
    }

    /// Notes that `address` holds `held`, which another IPAddress holds too (or a prefix overlapping it); returns the
    /// duplicate. Every group it overlaps becomes one.
    pub(super) fn note_duplicate(&mut self, pool: &PoolKey, address: &ObjectKey, held: Held) -> Duplicate {
        let mut wide = held;
        let mut members: Vec<ObjectKey> = Vec::new();
        let joined: Vec<Held> = self.duplicates.keys().filter(|k| k.overlaps(held)).copied().collect();
        for key in joined {
            wide = wide.wider(key);
            members.extend(self.duplicates.remove(&key).into_iter().flatten());
        }
        // The earlier holders not in a group yet (rare, so a scan is fine).
        for (k, h) in self.holders.iter() {
            if h.held.overlaps(held) && k != address && !members.contains(k) {
                wide = wide.wider(h.held);
                members.push(k.clone());
            }
        }
        if !members.contains(address) {
            members.push(address.clone());
        }
        members.sort();
        self.duplicates.insert(wide, members.clone());
        Duplicate { pool: pool.clone(), held: wide, holders: members }
    }

    /// Takes `address` off the duplicate index; returns the other holders of its group (their claims' conditions name
    /// the duplicate, and must be told it is gone or changed).
    pub(super) fn clear_duplicate(&mut self, address: &ObjectKey, held: Held) -> Vec<ObjectKey> {
        let Some(wide) =
            self.duplicates.get(&held).filter(|m| m.contains(address)).map(|_| held).or_else(|| self.group_of(address))
        else {
            return Vec::new();
        };
        let Some(mut members) = self.duplicates.remove(&wide) else { return Vec::new() };
        members.retain(|k| k != address);
        // What is left may be one group, several (prefixes that only the one gone overlapped), or none.
        let rest: Vec<(Held, ObjectKey)> =
            members.iter().filter_map(|k| self.holders.get(k).map(|h| (h.held, k.clone()))).collect();
        self.duplicates.extend(overlapping_groups(rest));
        members
    }

    /// Has an IP pool's allocation strategy guess afresh from the addresses in use ([`IpPoolAllocator::reset_order`]).
    pub(super) fn reset_order(&mut self) {
        if let Some(Allocator::Ip(a)) = &mut self.allocator {
            a.reset_order();
        }
    }

    pub(super) fn record(&mut self, held: Held) {
        match (&mut self.allocator, held) {
            (Some(Allocator::Ip(a)), Held::Ip(ip)) => a.record(ip),
            (Some(Allocator::Prefix(a)), Held::Prefix(p)) => a.record(p.map(HeldPrefix::allocation)),
            (Some(Allocator::Ip(a)), Held::Prefix(_)) => a.record(None),
            (Some(Allocator::Prefix(a)), Held::Ip(_)) => a.record(None),
            (None, _) => {}
        }
    }

    pub(super) fn release(&mut self, held: Held) {
        match (&mut self.allocator, held) {
            (Some(Allocator::Ip(a)), Held::Ip(ip)) => a.release(ip),
            (Some(Allocator::Prefix(a)), Held::Prefix(p)) => a.release(p.map(HeldPrefix::allocation)),
            (Some(Allocator::Ip(a)), Held::Prefix(_)) => a.release(None),
            (Some(Allocator::Prefix(a)), Held::Ip(_)) => a.release(None),
            (None, _) => {}
        }
    }

    pub(super) fn counts(&self) -> PoolCounts {
        match &self.allocator {
            Some(Allocator::Ip(a)) => a.counts(),
            Some(Allocator::Prefix(a)) => a.counts(),
            // Without a valid spec nothing is allocatable: every IPAddress is out of range.
            None => PoolCounts::new(0, self.holders.len() as u64, self.holders.len() as u64),
        }
    }

    /// The counts the pool's status says: those of what every manager that watches the pool sees alike, its
    /// IPAddresses, its reservations and its pins. A hold no IPAddress confirms (a create in flight, the address of a
    /// bound claim whose IPAddress went) is this manager's knowledge alone: counted, two managers of different shards
    /// sharing a pool without the label would rewrite each other's status for ever (the simulation's second manager
    /// found it).
    ///
    /// `seen_by_all`: whether an address is reserved where every manager sees it (the pool's moved-away annotation): a
    /// hold that took such a reservation over counts, as the reservation did.
    ///
    /// `known_here_only`: whether a confirmed hold's IPAddress is one only this manager knows of (a record of our own
    /// write that a relist of the watch did not show): left out as an unconfirmed hold is.
    pub(super) fn status_counts(
        &self,
        seen_by_all: impl Fn(Held) -> bool,
        known_here_only: impl Fn(&ObjectKey) -> bool,
    ) -> PoolCounts {
        let all = self.counts();
        let (mut unconfirmed, mut unconfirmed_out) = (0_i64, 0_i64);
        for (key, holding) in self.holders.iter().filter(|(key, h)| !h.confirmed || known_here_only(key)) {
            // Sharing its address with another holder, or pinned (its placeholder holds it without the claim), the
            // address is in use either way.
            if self.duplicates.iter().any(|(_, members)| members.contains(key))
                || self.pins.owner(holding.held).is_some()
                || seen_by_all(holding.held)
            {
                continue;
            }
            unconfirmed += 1;
            // Without a valid spec every hold is out of range (`counts`): one left out is left out of that too.
            if !self.allocates(holding.held) {
                unconfirmed_out += 1;
            }
        }
        if unconfirmed == 0 {
            return all;
        }
        let used = (all.used - unconfirmed).max(0);
        let out_of_range = (all.out_of_range - unconfirmed_out).max(0);
        PoolCounts { used, out_of_range, free: (all.total - (used - out_of_range)).max(0), ..all }
    }

    /// Whether the pool's spec allocates `held` (false without a valid spec).
    pub(super) fn allocates(&self, held: Held) -> bool {
        match (&self.allocator, held) {
            (Some(Allocator::Ip(a)), Held::Ip(Some(ip))) => a.config().check(ip).is_ok(),
            (Some(Allocator::Prefix(a)), Held::Prefix(Some(p))) => a.config().is_allocatable(p.base, p.len),
            _ => false,
        }
    }

    pub(super) fn is_exhausted(&self) -> bool {
        match &self.allocator {
            Some(Allocator::Ip(a)) => a.is_exhausted(),
            Some(Allocator::Prefix(a)) => a.is_exhausted(),
            None => true,
        }
    }
}

/// The holds that share an address, in groups of two or more keyed by the widest hold of each (CIDR blocks are nested
/// or disjoint, so in the order of [`sort_key`] a group's members come one after another).
pub(super) fn overlapping_groups(mut holds: Vec<(Held, ObjectKey)>) -> impl Iterator<Item = (Held, Vec<ObjectKey>)> {
    holds.sort_by_key(|(held, key)| (sort_key(*held), key.clone()));
    let mut groups: Vec<(Held, Vec<ObjectKey>)> = Vec::new();
    for (held, key) in holds {
        match groups.last_mut().filter(|(wide, _)| wide.overlaps(held)) {
            Some((wide, members)) => {
                *wide = wide.wider(held);
                members.push(key);
            }
            None => groups.push((held, vec![key])),
        }
    }
    groups.into_iter().filter(|(_, members)| members.len() > 1).map(|(wide, mut members)| {
        members.sort();
        (wide, members)
    })
}

/// The order in which overlapping holds come next to each other: by first address, the widest first.
fn sort_key(held: Held) -> (bool, u128, u8) {
    match held {
        Held::Prefix(Some(p)) => (true, p.allocation().range().0, p.len),
        Held::Prefix(None) => (true, 0, 0),
        Held::Ip(ip) => (false, ip.map_or(0, crate::ipam::address::to_u128), 0),
    }
}

/// What an IPAddress holding `held` says: its address, and the prefix and gateway of the subnet it is in (an address no
/// subnet holds, which only an edit strands, gets the top-level ones).
pub(super) fn assigned(state: &PoolState, held: Held) -> Option<Assigned> {
    let address = held.address()?;
    let subnet = match (&state.allocator, held) {
        (Some(Allocator::Ip(a)), Held::Ip(Some(ip))) => {
            a.config().subnet_of(ip).and_then(|i| Some((i, a.config().subnet_prefix(i)?)))
        }
        _ => None,
    };
    let (index, prefix) = subnet.map_or((0, state.prefix), |(i, prefix)| (i, i64::from(prefix)));
    Some(Assigned { address, prefix, gateway: state.gateways.get(index).cloned().flatten() })
}

/// An IPv6 address as [`parse_ip`] reads it.
pub(super) fn parse_ipv6(s: &str) -> Option<Ipv6Addr> {
    match parse_ip(s) {
        Ok(IpAddr::V6(a)) => Some(a),
        _ => None,
    }
}

pub(super) fn parse_config(spec: &PoolSpec) -> Result<Config, String> {
    let written = |g: Option<&String>| g.filter(|g| !g.is_empty()).cloned();
    match spec {
        PoolSpec::Prefix(spec) => {
            let gateway = written(spec.gateway.as_ref());
            Ok(Config::Prefix(PrefixPoolConfig::new(&spec.to_ipam()).map_err(|e| e.to_string())?, gateway))
        }
        PoolSpec::Ip(spec) => {
            let gateways = std::iter::once(written(spec.gateway.as_ref()))
                .chain(spec.subnets.iter().flatten().map(|s| written(s.gateway.as_ref())))
                .collect();
            Ok(Config::Ip(IpPoolConfig::new(&spec.to_ipam()).map_err(|e| e.to_string())?, gateways))
        }
    }
}

/// A queue of pools without repeats: a pool changed again while it waits keeps its place.
#[derive(Default)]
pub(super) struct Dirty {
    order: std::collections::VecDeque<PoolKey>,
    queued: HashSet<PoolKey>,
}

impl Dirty {
    pub(super) fn mark(&mut self, key: &PoolKey) {
        // Every allocation passes here, and the pool is queued already but for the first one of a burst.
        if !self.queued.contains(key) {
            self.queued.insert(key.clone());
            self.order.push_back(key.clone());
        }
    }

    pub(super) fn take(&mut self, limit: usize) -> Vec<PoolKey> {
        let n = limit.min(self.order.len());
        let taken: Vec<PoolKey> = self.order.drain(..n).collect();
        for key in &taken {
            self.queued.remove(key);
        }
        taken
    }
}
