//! The claims of our pool kinds, as compact [`Claim`]s by namespace and name, fed by the claim watch. A set of
//! `Arc<Claim>` looked up by the claim's own key: no second copy of the name per claim.

use std::borrow::Borrow;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use std::time::{Duration, Instant};

use super::registry::{Claimant, ObjectKey};
use super::{AddressRecord, Held, Notice, PoolKey, State, moved_away};
use crate::capi::Claim;

#[derive(Default)]
pub struct ClaimCache {
    claims: HashSet<Cached>,
}

struct Cached(Arc<Claim>);

impl Borrow<ObjectKey> for Cached {
    fn borrow(&self) -> &ObjectKey {
        &self.0.key
    }
}

impl Hash for Cached {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.key.hash(state);
    }
}

impl PartialEq for Cached {
    fn eq(&self, other: &Self) -> bool {
        self.0.key == other.0.key
    }
}

impl Eq for Cached {}

impl ClaimCache {
    pub fn get(&self, key: &ObjectKey) -> Option<Arc<Claim>> {
        self.claims.get(key).map(|c| c.0.clone())
    }

    /// Stores the claim, replacing the one of the same namespace and name.
    pub fn insert(&mut self, claim: Arc<Claim>) {
        self.claims.replace(Cached(claim));
    }

    pub fn remove(&mut self, key: &ObjectKey) -> Option<Arc<Claim>> {
        self.claims.take(key).map(|c| c.0)
    }

    pub fn len(&self) -> usize {
        self.claims.len()
    }

    /// The keys of the cached claims for which `predicate` holds, in the set's (per-process) order.
    pub fn keys_where(&self, predicate: impl Fn(&Claim) -> bool) -> Vec<ObjectKey> {
        self.claims.iter().filter(|c| predicate(&c.0)).map(|c| c.0.key.clone()).collect()
    }
}

/// What the controllers keep about one claim (by UID) while it is reconciled; forgotten with the claim.
#[derive(Default)]
pub(super) struct ClaimBook {
    /// A digest of the Ready state we last wrote, and the claim's resourceVersion our write was based on: a stale
    /// cached claim does not trigger a second write, a newer one (another writer's) does.
    written: Option<(u64, crate::compact::ResourceVersion)>,
    /// When it was first seen without an address (the allocation latency).
    pub(super) first_seen: Option<Instant>,
}

impl ClaimBook {
    fn is_empty(&self) -> bool {
        self.written.is_none() && self.first_seen.is_none()
    }
}

impl State {
    /// A claim as its watch delivers it: one of our pool kinds' is kept and reconciled; any other is not ours.
    pub fn apply_claim(&mut self, mut claim: Claim) {
        claim.key = self.shared_key(claim.key);
        let key = claim.key.clone();
        if self.claims.get(&key).is_some_and(|c| c.uid != claim.uid) {
            // Another claim of the name: the one cached was deleted while no watch event said so (a relist). Replaced
            // by a claim Velero restored, it went with its namespace (wiped before the restore), not for a move: as if
            // its deletion had been seen without clusterctl's mark (`claim_deleted`; a mark it carried when last seen
            // still counts), whatever its Cluster's pause says (seed 470884774: the paused-Cluster guess marked the
            // restored IPAddress as left behind, and the restored claim let it go).
            self.remove_claim(&key, claim.restored.then_some(false));
        }
        self.claims_seen_gone.remove(&key);
        if claim.pool_kind.is_some() {
            // At start-up every claim is queued: those waiting for an address go before the bound ones, which are
            // only checked.
            let waits = claim.address_ref().is_none() && claim.deletion_timestamp.is_none();
            self.claims.insert(Arc::new(claim));
            if waits { self.notices.push(Notice::WakeFirst(key)) } else { self.wake(key) }
        } else {
            self.claims.remove(&key);
        }
    }

    /// A claim's deletion as its watch event shows it, in its last state: it was deleted for a move only if clusterctl
    /// marked it so. A paused Cluster's claims deleted without the mark (a namespace wiped before a Velero restore,
    /// their finalizers stripped) are gone for good, and their addresses with them (seeds 400110884, 410017715: taken
    /// for moved, the addresses stayed reserved, and the restored claims were refused the IPAddresses they came back
    /// with).
    pub fn claim_deleted(&mut self, last: &Claim) {
        self.remove_claim(&last.key, Some(last.moving_away));
    }

    /// A claim is gone without its deletion seen (a relist no longer holds it, or another of its name replaced it):
    /// deleted by `clusterctl move` if it was marked when last seen, or if its Cluster went while paused (as clusterctl
    /// deletes it, last).
    pub fn delete_claim(&mut self, key: &ObjectKey) {
        self.remove_claim(key, None);
    }

    /// A claim is gone: everything kept for it goes, and an IPAddress we made for it is checked. Deleted by
    /// `clusterctl move`, an address of a global pool stays reserved here.
    fn remove_claim(&mut self, key: &ObjectKey, seen_marked: Option<bool>) {
        let Some(claim) = self.claims.remove(key) else { return };
        self.books.remove(&claim.uid.uid());
        self.blocked_elsewhere.remove(key);
        let moved_cluster = || {
            claim
                .cluster()
                .is_some_and(|cluster| self.moved_clusters.contains(&ObjectKey::new(&key.namespace, cluster)))
        };
        let moved = claim.moving_away || seen_marked.unwrap_or_else(moved_cluster);
        if seen_marked == Some(false)
            && !moved
            && let Some(record) = self.addresses.get(key)
        {
            self.claims_seen_gone.insert(key.clone(), record.uid);
        }
        if moved {
            if !self.addresses.contains_key(key)
                && !self.holds_without_create.contains(key)
                && claim.pool_kind.is_some_and(|kind| {
                    self.registry.holds_unconfirmed(&PoolKey::new(kind, &key.namespace, &claim.pool_name), key)
                })
            {
                self.moved_before_created.insert((key.clone(), claim.uid.uid()));
            }
            moved_away::claim_moved_away(self, key, true);
            moved_away::kept_hold_moved_away(self, &claim);
        }
        if let Some(kind) = claim.pool_kind {
            let pool = PoolKey::new(kind, &key.namespace, &claim.pool_name);
            self.claim_deleted_for_good(&pool, &claim);
            // A claim deleted while it waited must not take the wake of an address that frees up.
            self.registry.stop_waiting(&pool, key);
            if self.registry.holds_unconfirmed(&pool, key) || self.registry.has_aside(&pool, key) {
                // A create of its IPAddress failed uncertainly, or its machine's address is set aside: its worker
                // finds out whether it happened, and lets what it holds go.
                self.wake(key.clone());
            }
        }
        self.notices.push(Notice::ClaimGone(key.clone()));
    }

    pub fn claim(&self, key: &ObjectKey) -> Option<Arc<Claim>> {
        self.claims.get(key)
    }

    pub fn claim_keys(&self) -> Vec<ObjectKey> {
        self.claims.keys_where(|_| true)
    }

    pub fn claim_count(&self) -> usize {
        self.claims.len()
    }

    pub(super) fn wake_claims_where(&mut self, predicate: impl Fn(&Claim) -> bool) {
        // In key order: the claims are queued in it, and a hash set's order differs from one process to the next (the
        // simulation's schedule followed it: seed 93 played two orders).
        let mut keys = self.claims.keys_where(predicate);
        keys.sort_unstable();
        self.wake_all(keys);
    }

    /// The copy of `key` the index holds already, if any: a claim and its IPAddress (and the IPAddress's hold in the
    /// registry) share one copy of the name.
    pub(super) fn shared_key(&self, key: ObjectKey) -> ObjectKey {
        if let Some(claim) = self.claims.get(&key) {
            return claim.key.clone();
        }
        self.addresses.get_key_value(&key).map_or(key, |(k, _)| k.clone())
    }

    /// Runs `f` on the book of a cached claim; `None` (and nothing kept) once the claim is gone.
    pub(super) fn book<R>(&mut self, claim: &Claim, f: impl FnOnce(&mut ClaimBook) -> R) -> Option<R> {
        if self.claims.get(&claim.key).is_none_or(|c| c.uid != claim.uid) {
            return None;
        }
        let uid = claim.uid.uid();
        let books = &mut self.books;
        let book = books.entry(uid).or_default();
        let result = f(book);
        if book.is_empty() {
            books.remove(&uid);
        }
        Some(result)
    }

    /// The digest of the Ready state we last wrote for the cached claim, and the claim's resourceVersion that write was
    /// based on (`ClaimView::already_written`).
    pub(super) fn status_written(&self, claim: &Claim) -> Option<(u64, crate::compact::ResourceVersion)> {
        if self.claims.get(&claim.key).is_none_or(|c| c.uid != claim.uid) {
            return None;
        }
        self.books.get(&claim.uid.uid()).and_then(|b| b.written)
    }

    /// What we wrote last, on the claim as cached; `None` once a write failed, whose answer may be lost although it
    /// was applied (the digest of an earlier write would then hide that the status changed since, and that status
    /// would never be written again).
    pub fn remember_written(&mut self, claim: &Claim, digest: Option<u64>) {
        self.book(claim, |b| b.written = digest.map(|d| (d, claim.resource_version)));
    }

    /// Notes when the claim was first seen without an address.
    pub fn first_seen(&mut self, claim: &Claim) {
        self.book(claim, |b| {
            b.first_seen.get_or_insert_with(Instant::now);
        });
    }

    /// The claim has its address (allocated, or adopted from an IPAddress that already named it): it waits no more.
    /// Every bound claim's check passes here (100,000 at start-up), so it only looks at a book that exists.
    pub fn bound(&mut self, claim: &Claim) {
        let uid = claim.uid.uid();
        let books = &mut self.books;
        if let Some(book) = books.get_mut(&uid).filter(|b| b.first_seen.is_some()) {
            book.first_seen = None;
            if book.is_empty() {
                books.remove(&uid);
            }
        }
    }

    /// Time since the claim was first seen, once: the allocation latency.
    pub fn allocation_latency(&mut self, claim: &Claim) -> Option<Duration> {
        self.book(claim, |b| b.first_seen.take().map(|t| t.elapsed())).flatten()
    }

    /// Once every watch has listed (before anything is allocated): a bound claim whose IPAddress is gone (deleted from
    /// under it while a former leader held its address for it) has the address its condition names held again, while
    /// it is free, so that no claim waiting for an address takes the one its machine uses.
    pub fn hold_bound_addresses(&mut self) {
        for duplicate in self.registry.synced() {
            self.report_duplicate(&duplicate);
        }
        // Clusters gone while paused before the claims listed: what they left behind is known now.
        for (cluster, others) in std::mem::take(&mut self.clusters_gone_before_synced) {
            if self.moved_clusters.contains(&cluster) {
                self.left_behind_by(&cluster, others);
            }
        }
        let mut lost: Vec<(PoolKey, ObjectKey, String)> = self
            .claims
            .keys_where(|c| {
                c.address_ref() == Some(&*c.key.name) && c.deletion_timestamp.is_none() && c.bound_address.is_some()
            })
            .into_iter()
            .filter(|key| self.addresses.get(key).is_none_or(|r| self.holds_another_than_bound(r, key)))
            .filter_map(|key| {
                let claim = self.claims.get(&key)?;
                let pool = PoolKey::new(claim.pool_kind?, &key.namespace, &claim.pool_name);
                Some((pool, key, claim.bound_address?.to_string()))
            })
            .collect();
        // In key order, as every wake (two lost claims may name one address).
        lost.sort_unstable_by(|a, b| a.1.cmp(&b.1));
        for (pool, key, address) in lost {
            // The address its machine uses: held whatever its Cluster's quota.
            let mut bound = Claimant::bound(None);
            if let Some(claim) = self.claims.get(&key) {
                bound = Claimant::bound(claim.cluster_key());
                super::moved_away::reclaim_for_bound(self, &pool, &claim);
            }
            if self.addresses.contains_key(&key) {
                // An IPAddress of its name holds another address (a former leader's late create, which the claim
                // withdraws): the machine's address is held aside meanwhile (test
                // `a_new_term_holds_aside_the_address_of_a_bound_claim_whose_ipaddress_holds_another`: free in a new
                // term, a waiting claim took it).
                let aside = super::registry::aside_key(&key);
                if self.registry.held_by(&pool, &aside).is_none()
                    && self.registry.allocate(&pool, &aside, Some(&address), &bound).is_ok()
                {
                    tracing::info!(claim = %key, %address, pool = %pool, "a bound claim whose IPAddress holds another address: its address is held aside for it");
                }
            } else if self.registry.held_by(&pool, &key).is_none()
                && self.registry.allocate(&pool, &key, Some(&address), &bound).is_ok()
            {
                // Held for the machine, no create behind it until the claim allocates (test
                // `a_hold_a_new_term_keeps_for_a_bound_claim_notes_no_create`).
                self.holds_without_create.insert(key.clone());
                tracing::info!(claim = %key, %address, pool = %pool, "a bound claim without its IPAddress: its address is held for it");
            }
        }
    }

    /// Whether the IPAddress `key` (`record`) of a bound claim's pool holds another address than the one the claim's
    /// condition names (IP pools: a prefix pool's condition names a base only).
    fn holds_another_than_bound(&self, record: &AddressRecord, key: &ObjectKey) -> bool {
        let Some(claim) = self.claims.get(key) else { return false };
        !record.pool.kind.is_prefix_pool()
            && claim.uses_pool(record.pool.kind, &record.pool.namespace, &record.pool.name)
            && self
                .registry
                .held_by(&record.pool, key)
                .and_then(Held::address)
                .is_some_and(|held| claim.bound_address.is_some_and(|bound| bound != held))
    }

    /// How many claims have something kept about them (for tests and diagnostics).
    pub fn books(&self) -> usize {
        self.books.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn claim(namespace: &str, name: &str, pool: &str) -> Arc<Claim> {
        Arc::new(Claim { key: ObjectKey::new(namespace, name), pool_name: pool.into(), ..Claim::default() })
    }

    #[test]
    pub(super) fn claims_are_found_replaced_and_removed_by_key() {
        let mut cache = ClaimCache::default();
        cache.insert(claim("a", "c1", "p1"));
        cache.insert(claim("b", "c1", "p1"));
        cache.insert(claim("a", "c1", "p2"));
        assert_eq!(cache.len(), 2);
        assert_eq!(&*cache.get(&ObjectKey::new("a", "c1")).unwrap().pool_name, "p2");
        assert_eq!(cache.keys_where(|c| &*c.pool_name == "p1"), vec![ObjectKey::new("b", "c1")]);
        assert!(cache.remove(&ObjectKey::new("a", "c1")).is_some());
        assert!(cache.get(&ObjectKey::new("a", "c1")).is_none());
        assert!(cache.remove(&ObjectKey::new("a", "c1")).is_none());
    }
}
