//! Addresses pinned to claims by a pool's `spec.preAllocations` (docs/compatibility.md D14). As in Metal3, a pinned
//! address is reserved: while no IPAddress holds it, a placeholder does ([`pin_key`]), so that the lowest-free
//! allocation never hands it out and another claim that asks for it is refused, whatever the order in which claims
//! come. The pinned claim takes the placeholder's hold over; when its IPAddress goes, the hold goes back to it.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use super::{ClusterKey, Holding, ObjectKey, PoolKey, PoolState};
use crate::api::PoolSpec;
use crate::compact::intern;
use crate::index::Held;
use crate::ipam::address::parse_ip;

/// The claim a pinned address is for: in the pool's namespace (namespaced pools), in the namespace a global pool's
/// key names (`<namespace>/<name>`), or, for a bare name in a global pool, a claim of that name in any namespace
/// (the first to take it holds it).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PinnedTo {
    pub namespace: Option<Arc<str>>,
    pub name: Arc<str>,
}

impl PinnedTo {
    /// The claim a key of `spec.preAllocations` names in the pool `pool`.
    pub fn of(pool: &PoolKey, key: &str) -> PinnedTo {
        if !pool.kind.is_global() {
            return PinnedTo { namespace: Some(pool.namespace.clone()), name: intern(key) };
        }
        match key.split_once('/') {
            Some((namespace, name)) => PinnedTo { namespace: Some(intern(namespace)), name: intern(name) },
            None => PinnedTo { namespace: None, name: intern(key) },
        }
    }

    pub fn matches(&self, claim: &ObjectKey) -> bool {
        *self.name == *claim.name && self.namespace.as_ref().is_none_or(|ns| **ns == *claim.namespace)
    }
}

impl std::fmt::Display for PinnedTo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{ns}/{}", self.name),
            None => write!(f, "{} (in any namespace)", self.name),
        }
    }
}

/// The key of the placeholder holding a pinned address no IPAddress holds: in no namespace, like a reservation, and
/// with a space no address has, so that it is never taken for one ([`is_pin`]).
pub fn pin_key(held: Held) -> ObjectKey {
    ObjectKey::new("", &format!("{PIN_PREFIX}{held}"))
}

const PIN_PREFIX: &str = "pin ";

pub fn is_pin(key: &ObjectKey) -> bool {
    key.namespace.is_empty() && key.name.starts_with(PIN_PREFIX)
}

/// The pins of a pool, both ways.
#[derive(Default)]
pub(super) struct Pins {
    by_address: HashMap<Held, PinnedTo>,
    by_claim: HashMap<PinnedTo, Held>,
}

impl Pins {
    /// Who `held` is pinned to, if anyone.
    pub(super) fn owner(&self, held: Held) -> Option<&PinnedTo> {
        self.by_address.get(&held)
    }

    /// The address pinned to the claim `claim`, if any.
    pub(super) fn of_claim(&self, claim: &ObjectKey) -> Option<Held> {
        let exact = PinnedTo { namespace: Some(claim.namespace.clone()), name: claim.name.clone() };
        let any = PinnedTo { namespace: None, name: claim.name.clone() };
        self.by_claim.get(&exact).or_else(|| self.by_claim.get(&any)).copied()
    }
}

impl PoolState {
    /// Takes the pins of `spec` (IP pools; only addresses the pool allocates can be reserved): a pin gone frees its
    /// placeholder's address, a new one is held by a placeholder unless an IPAddress holds its address already (the
    /// placeholder takes it when that IPAddress goes).
    pub(super) fn set_pins(&mut self, pool: &PoolKey, spec: &PoolSpec) {
        let wanted: HashMap<Held, PinnedTo> = match spec {
            PoolSpec::Ip(ip) => ip
                .pre_allocations
                .iter()
                .flatten()
                .filter_map(|(claim, address)| {
                    let ip: IpAddr = parse_ip(address).ok()?;
                    let held = Held::Ip(Some(ip));
                    self.allocates(held).then(|| (held, PinnedTo::of(pool, claim)))
                })
                .collect(),
            PoolSpec::Prefix(_) => HashMap::new(),
        };
        let mut gone: Vec<Held> = self.pins.by_address.keys().filter(|h| !wanted.contains_key(*h)).copied().collect();
        // Released in one order whatever the map's: the order is a LeastRecentlyReleased pool's.
        gone.sort_unstable();
        for held in gone {
            self.pins.by_address.remove(&held);
            if self.holders.remove(&pin_key(held)).is_some() {
                self.release(held);
            }
        }
        self.pins.by_claim = wanted.iter().map(|(held, to)| (to.clone(), *held)).collect();
        self.pins.by_address = wanted;
        let unheld: Vec<Held> = self.pins.by_address.keys().filter(|h| !self.is_held(**h)).copied().collect();
        for held in unheld {
            self.hold_for_pin(held);
        }
    }

    fn hold_for_pin(&mut self, held: Held) {
        self.record(held);
        self.holders.insert(pin_key(held), Holding::new(held, true, None));
        // The pinned claim may wait for it (as one whose requested address was held).
        self.requesters_due = true;
    }

    /// One holder of `held` lets go: the address is free, unless it is pinned, and then the pin's placeholder holds
    /// it again.
    pub(super) fn let_go(&mut self, held: Held) {
        self.release(held);
        if self.pins.owner(held).is_some() && !self.is_held(held) {
            self.hold_for_pin(held);
        }
    }

    /// A real IPAddress (or a reservation) comes to hold `held`: the pin's placeholder makes way for it, so that an
    /// address is never counted twice (an IPAddress of another claim holding a pinned address keeps it; the pinned
    /// claim waits until it goes).
    pub(super) fn unpin(&mut self, held: Held) {
        if self.holders.remove(&pin_key(held)).is_some() {
            self.release(held);
        }
    }

    /// The pinned address `claim` may take, held by its placeholder: handed over to `claim` in one step (never free
    /// in between), unconfirmed until its create succeeds.
    /// It counts in `cluster`'s quota, which does not limit it: the pool's owner chose it for the claim.
    pub(super) fn take_pin(&mut self, claim: &ObjectKey, held: Held, cluster: Option<ClusterKey>) -> bool {
        if self.holders.remove(&pin_key(held)).is_none() {
            return false;
        }
        self.holders.insert(claim.clone(), Holding::new(held, false, cluster));
        true
    }
}
