//! Addresses of global pools that `clusterctl move` took to another management cluster.
//!
//! clusterctl copies a global pool to the target and leaves it on the source with the IPAddresses below it, while it
//! deletes their claims and Cluster; the IPAddresses, orphans now, are released. Left alone, the source would hand
//! their addresses out again: the same address on two management clusters. So the IPAddress of a claim (or an
//! IPAddress itself) of a global pool deleted for a move (clusterctl's `delete-for-move` annotation) leaves a
//! reservation in its place, taken over under the pool's lock so the address is never free in between, and written
//! into the pool's `ipam.cluster.x-k8s.io/moved-away` annotation (comma-separated addresses, or prefixes for prefix
//! pools) so that it outlives the manager. A reservation counts as used. It ends when an IPAddress with that address
//! comes back (the Cluster moved back), or when an operator takes it out of the annotation (the moved Cluster was
//! deleted over there: docs/operations.md). The writes are `controllers::moved_away`'s.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Mutex;

use tracing::{info, warn};

use super::registry::{Held, PoolKey, reservation_key};
use super::{Index, ObjectKey, lock, write};
use crate::api::{MOVED_AWAY_ANNOTATION, Pool};
use crate::capi::IpAddressSpec;

/// The annotation's entries that are not written yet, per pool: entry → `true` to add it, `false` to remove it.
#[derive(Default)]
pub struct Ledger {
    pending: Mutex<HashMap<PoolKey, BTreeMap<String, bool>>>,
    /// Entries already reported as not an address of their pool (said once, not on every pool event).
    reported: Mutex<HashSet<(PoolKey, String)>>,
}

impl Index {
    fn queue_moved_away(&self, pool: &PoolKey, held: Held, add: bool) {
        lock(&self.moved_away.pending).entry(pool.clone()).or_default().insert(held.to_string(), add);
        self.sink.moved_away_changed(pool.clone());
    }

    /// The changes to the pool's annotation not written yet.
    pub fn moved_away_pending(&self, pool: &PoolKey) -> BTreeMap<String, bool> {
        lock(&self.moved_away.pending).get(pool).cloned().unwrap_or_default()
    }

    /// `written` landed in the pool's annotation (or the pool is gone, `None`): no longer pending, unless it changed
    /// meanwhile.
    pub fn moved_away_written(&self, pool: &PoolKey, written: Option<&BTreeMap<String, bool>>) {
        let mut pending = lock(&self.moved_away.pending);
        match written {
            None => {
                pending.remove(pool);
            }
            Some(changes) => {
                if let Some(now) = pending.get_mut(pool) {
                    now.retain(|entry, add| changes.get(entry) != Some(add));
                    if now.is_empty() {
                        pending.remove(pool);
                    }
                }
            }
        }
    }
}

/// The entries of an annotation value, as written.
pub fn entries(annotation: Option<&str>) -> BTreeSet<String> {
    annotation
        .map(|v| v.split(',').map(str::trim).filter(|e| !e.is_empty()).map(str::to_owned).collect())
        .unwrap_or_default()
}

/// An entry as the address it holds in a pool of `key`'s kind; `None` when it is not one.
fn held(key: &PoolKey, entry: &str) -> Option<Held> {
    let (address, prefix) = match entry.split_once('/') {
        Some((address, prefix)) => (address, prefix.parse().ok()),
        None => (entry, None),
    };
    let spec = IpAddressSpec { address: address.to_owned(), prefix, ..Default::default() };
    let held = Held::of(key.kind, &spec);
    (held.to_string() == entry).then_some(held)
}

/// An IPAddress of a global pool is gone for a move: its address stays held, as a reservation.
pub fn moved_away(index: &Index, pool: &PoolKey, address: &ObjectKey) {
    let Some(held) = index.registry.held_by(pool, address).filter(|h| h.address().is_some()) else { return };
    if index.registry.transfer(pool, address, &reservation_key(held)).is_some() {
        info!(pool = %pool, ipaddress = %address, address = %held, "moved to another management cluster; the address stays reserved here");
        index.queue_moved_away(pool, held, true);
    }
}

/// A claim is gone for a move. clusterctl leaves the IPAddresses of a global pool on the source (they hang below a
/// cluster-scoped object), so the claim's deletion is the signal: its IPAddress's address becomes a reservation now,
/// and the IPAddress, an orphan, is deleted later without freeing it.
pub fn claim_moved_away(index: &Index, claim: &ObjectKey) {
    let pool = {
        let mut addresses = write(&index.addresses);
        match addresses.get_mut(claim) {
            Some(record) if record.pool.kind.is_global() => {
                record.moving_away = true;
                (*record.pool).clone()
            }
            _ => return,
        }
    };
    moved_away(index, &pool, claim);
}

/// An IPAddress of a global pool seen again after it was moved away (until it is deleted): its address is a
/// reservation. One first seen in that state (the manager started during a move) is reserved at once.
pub fn still_moving_away(index: &Index, pool: &PoolKey, address: &ObjectKey, held: Held) {
    if held.address().is_some() && index.registry.held_by(pool, address).is_none() && index.registry.reserve(pool, held)
    {
        info!(pool = %pool, ipaddress = %address, address = %held, "moved to another management cluster; the address stays reserved here");
        index.queue_moved_away(pool, held, true);
    }
}

/// An IPAddress appeared: if its address was reserved as moved away, the Cluster came back with it.
pub fn came_back(index: &Index, pool: &PoolKey, address: &ObjectKey, held: Held) {
    if index.registry.transfer(pool, &reservation_key(held), address).is_some() {
        info!(pool = %pool, ipaddress = %address, address = %held, "moved back; the reservation ends");
        index.queue_moved_away(pool, held, false);
    }
}

/// Brings the reservations of a global pool in line with its annotation (and the changes not written yet): an entry
/// an operator removed frees its address; one held by an IPAddress here came back.
pub fn sync(index: &Index, key: &PoolKey, pool: &Pool) {
    let mut wanted = entries(pool.annotation(MOVED_AWAY_ANNOTATION));
    for (entry, add) in index.moved_away_pending(key) {
        if add {
            wanted.insert(entry);
        } else {
            wanted.remove(&entry);
        }
    }
    let wanted: HashMap<Held, String> = wanted
        .into_iter()
        .filter_map(|entry| match held(key, &entry) {
            Some(held) => Some((held, entry)),
            None => {
                if lock(&index.moved_away.reported).insert((key.clone(), entry.clone())) {
                    warn!(pool = %key, entry, annotation = MOVED_AWAY_ANNOTATION, "not an address of this pool; ignored");
                }
                None
            }
        })
        .collect();
    let reserved: HashSet<Held> = index.registry.reservations(key).into_iter().collect();
    for held in &reserved {
        if !wanted.contains_key(held) {
            info!(pool = %key, address = %held, "reservation removed from the annotation; the address is free");
            index.wake_all(index.registry.forget(key, &reservation_key(*held)));
        }
    }
    for held in wanted.into_keys().filter(|h| !reserved.contains(h)) {
        if !index.registry.reserve(key, held) {
            // An IPAddress here holds it: the Cluster came back while the annotation still named it.
            index.queue_moved_away(key, held, false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::PoolKind;

    #[test]
    fn entries_are_addresses_of_the_pool_kind_and_nothing_else() {
        let ip = PoolKey::new(PoolKind::GlobalInClusterIPPool, "", "g");
        let prefix = PoolKey::new(PoolKind::GlobalInClusterPrefixPool, "", "p");
        assert_eq!(held(&ip, "10.0.0.1").map(|h| h.to_string()).as_deref(), Some("10.0.0.1"));
        assert_eq!(held(&ip, "fd00::1").map(|h| h.to_string()).as_deref(), Some("fd00::1"));
        assert_eq!(held(&prefix, "fd00:0:0:1::/64").map(|h| h.to_string()).as_deref(), Some("fd00:0:0:1::/64"));
        for bad in ["", "10.0.0", "10.0.0.1/24", "nope", "010.0.0.1"] {
            assert_eq!(held(&ip, bad), None, "{bad:?}");
        }
        for bad in ["fd00::", "fd00::1/64", "10.0.0.0/24", "fd00::/200"] {
            assert_eq!(held(&prefix, bad), None, "{bad:?}");
        }
        assert_eq!(entries(Some(" 10.0.0.2, 10.0.0.1,,")).into_iter().collect::<Vec<_>>(), ["10.0.0.1", "10.0.0.2"]);
    }
}
