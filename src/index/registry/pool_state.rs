//! One pool's allocator state (its allocator, its holders and its waiters), and the queue of pools that changed.

use std::net::{IpAddr, Ipv6Addr};

use super::*;
use crate::ipam::Family;

impl PoolState {
    pub(super) fn rebuild(&mut self, config: Config) {
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
    pub(super) fn find_duplicates(&mut self) {
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
    pub(super) fn is_held(&self, held: Held) -> bool {
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
    pub(super) fn note_duplicate(&mut self, pool: &PoolKey, address: &ObjectKey, held: Held) -> Duplicate {
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
    pub(super) fn clear_duplicate(&mut self, address: &ObjectKey, held: Held) -> Vec<ObjectKey> {
        let Some(holders) = self.duplicates.get_mut(&held) else { return Vec::new() };
        holders.retain(|k| k != address);
        let others = holders.clone();
        if holders.len() < 2 {
            self.duplicates.remove(&held);
        }
        others
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

    pub(super) fn is_exhausted(&self) -> bool {
        match &self.allocator {
            Some(Allocator::Ip(a)) => a.is_exhausted(),
            Some(Allocator::Prefix(a)) => a.is_exhausted(),
            None => true,
        }
    }
}

pub(super) fn assigned(state: &PoolState, held: Held) -> Option<Assigned> {
    Some(Assigned { address: held.address()?, prefix: state.prefix, gateway: state.gateway.clone() })
}

/// An IPv6 address as [`parse_ip`] reads it.
pub(super) fn parse_ipv6(s: &str) -> Option<Ipv6Addr> {
    match parse_ip(s) {
        Ok(IpAddr::V6(a)) => Some(a),
        _ => None,
    }
}

pub(super) fn parse_config(spec: &PoolSpec) -> Result<Config, String> {
    let gateway = spec.gateway().filter(|g| !g.is_empty()).map(str::to_owned);
    match spec {
        PoolSpec::Prefix(spec) => {
            Ok(Config::Prefix(PrefixPoolConfig::new(&spec.to_ipam()).map_err(|e| e.to_string())?, gateway))
        }
        PoolSpec::Ip(spec) => Ok(Config::Ip(IpPoolConfig::new(&spec.to_ipam()).map_err(|e| e.to_string())?, gateway)),
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
