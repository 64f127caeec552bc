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
//! deleted over there: docs/operations.md).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use futures::StreamExt;
use futures::channel::mpsc;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use tracing::{info, warn};

use super::registry::{Held, PoolKey, reservation_key};
use super::{Context, Error, ObjectKey, lock, pool_resource};
use crate::api::MOVED_AWAY_ANNOTATION;
use crate::capi::IpAddressSpec;

/// The annotation's entries that are not written yet, per pool: entry → `true` to add it, `false` to remove it.
pub struct MovedAway {
    pending: Mutex<HashMap<PoolKey, BTreeMap<String, bool>>>,
    writes: mpsc::UnboundedSender<PoolKey>,
    /// Entries already reported as not an address of their pool (said once, not on every pool event).
    reported: Mutex<HashSet<(PoolKey, String)>>,
}

impl MovedAway {
    pub fn new() -> (MovedAway, mpsc::UnboundedReceiver<PoolKey>) {
        let (writes, dirty) = mpsc::unbounded();
        (MovedAway { pending: Mutex::new(HashMap::new()), writes, reported: Mutex::new(HashSet::new()) }, dirty)
    }

    fn queue(&self, pool: &PoolKey, held: Held, add: bool) {
        lock(&self.pending).entry(pool.clone()).or_default().insert(held.to_string(), add);
        let _ = self.writes.unbounded_send(pool.clone());
    }

    fn pending(&self, pool: &PoolKey) -> BTreeMap<String, bool> {
        lock(&self.pending).get(pool).cloned().unwrap_or_default()
    }
}

/// The entries of a pool's annotation, as written.
fn entries(pool: &DynamicObject) -> BTreeSet<String> {
    pool.annotations()
        .get(MOVED_AWAY_ANNOTATION)
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
pub fn moved_away(ctx: &Context, pool: &PoolKey, address: &ObjectKey) {
    let Some(held) = ctx.registry.held_by(pool, address).filter(|h| is_address(*h)) else { return };
    if ctx.registry.transfer(pool, address, &reservation_key(held)).is_some() {
        info!(pool = %pool, ipaddress = %address, address = %held, "moved to another management cluster; the address stays reserved here");
        ctx.moved_away.queue(pool, held, true);
    }
}

/// A claim is gone for a move. clusterctl leaves the IPAddresses of a global pool on the source (they hang below a
/// cluster-scoped object), so the claim's deletion is the signal: its IPAddress's address becomes a reservation now,
/// and the IPAddress, an orphan, is deleted later without freeing it.
pub fn claim_moved_away(ctx: &Context, claim: &ObjectKey) {
    let pool = {
        let mut addresses = ctx.addresses.write().unwrap_or_else(|e| e.into_inner());
        match addresses.get_mut(claim) {
            Some(record) if record.pool.kind.is_global() => {
                record.moving_away = true;
                record.pool.clone()
            }
            _ => return,
        }
    };
    moved_away(ctx, &pool, claim);
}

/// An IPAddress of a global pool seen again after it was moved away (until it is deleted): its address is a
/// reservation. One first seen in that state (the manager started during a move) is reserved at once.
pub fn still_moving_away(ctx: &Context, pool: &PoolKey, address: &ObjectKey, held: Held) {
    if is_address(held) && ctx.registry.held_by(pool, address).is_none() && ctx.registry.reserve(pool, held) {
        info!(pool = %pool, ipaddress = %address, address = %held, "moved to another management cluster; the address stays reserved here");
        ctx.moved_away.queue(pool, held, true);
    }
}

fn is_address(held: Held) -> bool {
    matches!(held, Held::Ip(Some(_)) | Held::Prefix(Some(_)))
}

/// An IPAddress appeared: if its address was reserved as moved away, the Cluster came back with it.
pub fn came_back(ctx: &Context, pool: &PoolKey, address: &ObjectKey, held: Held) {
    if ctx.registry.transfer(pool, &reservation_key(held), address).is_some() {
        info!(pool = %pool, ipaddress = %address, address = %held, "moved back; the reservation ends");
        ctx.moved_away.queue(pool, held, false);
    }
}

/// Brings the reservations of a global pool in line with its annotation (and the changes not written yet): an entry
/// an operator removed frees its address; one held by an IPAddress here came back.
pub fn sync(ctx: &Context, key: &PoolKey, pool: &DynamicObject) {
    let mut wanted = entries(pool);
    for (entry, add) in ctx.moved_away.pending(key) {
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
                if lock(&ctx.moved_away.reported).insert((key.clone(), entry.clone())) {
                    warn!(pool = %key, entry, annotation = MOVED_AWAY_ANNOTATION, "not an address of this pool; ignored");
                }
                None
            }
        })
        .collect();
    let reserved: HashSet<Held> = ctx.registry.reservations(key).into_iter().collect();
    for held in &reserved {
        if !wanted.contains_key(held) {
            info!(pool = %key, address = %held, "reservation removed from the annotation; the address is free");
            let woken = ctx.registry.forget(key, &reservation_key(*held));
            ctx.wake(woken);
        }
    }
    for held in wanted.into_keys().filter(|h| !reserved.contains(h)) {
        if !ctx.registry.reserve(key, held) {
            // An IPAddress here holds it: the Cluster came back while the annotation still named it.
            ctx.moved_away.queue(key, held, false);
        }
    }
}

/// Writes the queued changes into the pools' annotations, one pool at a time, retrying until they land.
pub async fn write_pending(ctx: std::sync::Arc<Context>, mut dirty: mpsc::UnboundedReceiver<PoolKey>) {
    while let Some(key) = dirty.next().await {
        if let Err(e) = write(&ctx, &key).await {
            ctx.report_failure("recording the addresses moved away", &ObjectKey::new("", &key.name), &e);
            let retry = ctx.moved_away.writes.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let _ = retry.unbounded_send(key);
            });
        }
    }
}

async fn write(ctx: &Context, key: &PoolKey) -> Result<(), Error> {
    let changes = ctx.moved_away.pending(key);
    if changes.is_empty() {
        return Ok(());
    }
    let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &pool_resource(key.kind));
    let Some(live) = api.get_opt(&key.name).await.map_err(Error::kube("reading the pool"))? else {
        // The pool is gone, and its reservations with it.
        lock(&ctx.moved_away.pending).remove(key);
        return Ok(());
    };
    let mut stored = entries(&live);
    for (entry, add) in &changes {
        if *add {
            stored.insert(entry.clone());
        } else {
            stored.remove(entry);
        }
    }
    let value = if stored.is_empty() { Value::Null } else { json!(stored.into_iter().collect::<Vec<_>>().join(",")) };
    let patch = json!({"metadata": {
        "resourceVersion": live.meta().resource_version,
        "annotations": { MOVED_AWAY_ANNOTATION: value },
    }});
    ctx.fence
        .guard(api.patch(&key.name, &PatchParams::default(), &Patch::Merge(&patch)))
        .await?
        .map_err(Error::kube("recording the addresses moved away"))?;
    // What was written is no longer pending, unless it changed meanwhile.
    let mut pending = lock(&ctx.moved_away.pending);
    if let Some(now) = pending.get_mut(key) {
        now.retain(|entry, add| changes.get(entry) != Some(add));
        if now.is_empty() {
            pending.remove(key);
        }
    }
    Ok(())
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
        let mut pool = DynamicObject::new("g", &pool_resource(PoolKind::GlobalInClusterIPPool));
        pool.metadata.annotations =
            Some([(MOVED_AWAY_ANNOTATION.to_owned(), " 10.0.0.2, 10.0.0.1,,".to_owned())].into());
        assert_eq!(entries(&pool).into_iter().collect::<Vec<_>>(), ["10.0.0.1", "10.0.0.2"]);
    }
}
