//! Allocation, the pools and the Clusters.

use std::sync::Arc;
use std::time::Duration;

use super::registry::Claimant;
use super::{
    AddressRecord, AllocateError, Assigned, Counted, Duplicate, Held, Notice, ObjectKey, PoolKey, State, moved_away,
};
use crate::api::Pool;
use crate::capi::{Claim, IpAddress};
use crate::compact::{ResourceVersion, Uid};
use crate::ipam::PoolCounts;

/// What a claim's worker says it waits for, and so what wakes it besides its own events. A claim waits for an
/// address, or for its requested one, from the allocation step that found none (`State::allocate_for`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Nothing of its pool: it is bound, paused, waits for its Cluster, or is deleted.
    Nothing,
    /// The IPAddress of its name, another pool's or provider's, to change or go.
    ItsName,
}

impl State {
    /// The address for a claim without an IPAddress, held in the pool's allocator before anything is written:
    /// the one it holds already (an uncertain create, or an IPAddress deleted from under the live claim), else
    /// `requested` when given (docs/compatibility.md D14), else the one the pool pins to it, else the lowest free one.
    /// Nothing in a pool this manager does not serve (`State::serves_pool`): checked in the step that holds, as the
    /// pool's label may give it to another shard's manager at any time.
    pub fn allocate(
        &mut self,
        claim: &Claim,
        pool: &PoolKey,
        requested: Option<&str>,
        claimant: &Claimant,
    ) -> Result<Assigned, AllocateError> {
        if !self.serves_pool(pool) {
            return Err(AllocateError::ServedElsewhere { pool: pool.clone() });
        }
        if claim.bound_address.is_some_and(|b| requested == Some(&*b.to_string())) {
            moved_away::reclaim_for_bound(self, pool, claim);
        }
        let assigned = self.registry.allocate(pool, &claim.key, requested, claimant);
        if assigned.is_ok() {
            // Its create follows.
            self.holds_without_create.remove(&claim.key);
        }
        assigned
    }

    /// The address for the claim, whose IPAddress is to be created, as [`State::allocate`] holds it: `previous` (the
    /// address a bound claim's IPAddress held, which its machine uses) first while it is free, else the claim's
    /// requested one, pinned one or the lowest free one.
    pub fn allocate_for(
        &mut self,
        claim: &Claim,
        pool: &PoolKey,
        previous: Option<&str>,
    ) -> Result<Assigned, AllocateError> {
        let cluster = claim.cluster_key();
        if previous.is_some() {
            // The address its machine uses: given again whatever its Cluster's quota (which takes nothing back), to a
            // claim still bound (one whose condition alone names an address is limited as any: helper-132 N6).
            let bound = match claim.address_ref() {
                Some(_) => Claimant::bound(cluster.clone()),
                None => Claimant::of_cluster(cluster.clone()),
            };
            match self.allocate(claim, pool, previous, &bound) {
                Err(AllocateError::Requested { .. }) => {}
                assigned => return assigned,
            }
        }
        let claimant = Claimant::of_cluster(cluster);
        let assigned = self.allocate(claim, pool, claim.requested_address.as_deref(), &claimant);
        // The claim waits from the step that found nothing for it: the one place it is registered, so that no await
        // added to its worker could let an address go by unseen. Not a claim deleted while its worker awaited (the
        // copy it runs on is stale): it would take the wake of one that waits (helper-128 F2).
        let live = self.claims.get(&claim.key).is_some_and(|c| c.uid == claim.uid);
        match &assigned {
            Err(AllocateError::Exhausted { .. }) if live => self.wait_for_address(pool, &claim.key),
            Err(AllocateError::Requested { .. }) if live => self.wait_for_requested(pool, &claim.key),
            // A bound claim whose machine's address another holds now waits for any address to free up, that one
            // included (helper-131 F4); any other, for its Cluster to hold fewer.
            // A wake it took from the pool's waiters is passed on first (helper-132 N2).
            Err(AllocateError::QuotaExceeded { .. }) if live && previous.is_some() => {
                self.stop_waiting(pool, &claim.key);
                self.wait_for_requested(pool, &claim.key);
            }
            Err(AllocateError::QuotaExceeded { .. }) if live => {
                if let Some(cluster) = &claimant.cluster {
                    self.registry.wait_for_quota(pool, &claim.key, cluster);
                }
            }
            _ => {}
        }
        assigned
    }

    /// Our create of the claim's IPAddress succeeded: the object is recorded (its hold confirmed with it). Returns the
    /// record (`None` when a newer event already said it is gone) and the claim's allocation latency.
    pub fn address_created(&mut self, claim: &Claim, created: &IpAddress) -> (Option<AddressRecord>, Option<Duration>) {
        // Recorded, the hold is confirmed. Not (the watch showed it deleted already, or we deleted it), the hold stays
        // unconfirmed: it goes the way an uncertain create's goes, and a confirmed hold with no IPAddress and no record
        // would stay for the rest of the term (scenario `a_claim_released_before_its_cluster_moved_reserves_nothing`).
        // A claim gone for a move before there was a record to mark has its move recorded with it (`remember_address`),
        // before the orphan check below could free an address the moved machine uses.
        let record = self.remember_address(&claim.key, created);
        // The claim's Delete event came while the create was in flight, and its orphan check found no IPAddress yet:
        // checked again now that there is one (else only the sweep releases it, after `--orphan-release-delay`; the
        // chaos suite's churn found it).
        if record.is_some() && self.claims.get(&claim.key).is_none_or(|c| c.uid != claim.uid) {
            self.notices.push(Notice::ClaimGone(claim.key.clone()));
        }
        (record, self.allocation_latency(claim))
    }

    /// What the claim `claim` of `pool` waits for now (see [`Wait`]): the one entry the claim's reconcile says it by.
    pub fn claim_waits(&mut self, pool: &PoolKey, claim: &ObjectKey, wait: Wait) {
        match wait {
            Wait::Nothing => self.stop_waiting(pool, claim),
            Wait::ItsName => {
                self.stop_waiting(pool, claim);
                self.blocked_elsewhere(claim);
            }
        }
    }

    /// The claim found the pool exhausted: it is woken when an address frees up.
    pub fn wait_for_address(&mut self, pool: &PoolKey, claim: &ObjectKey) {
        self.registry.wait(pool, claim);
    }

    /// The claim's requested address is held: it is woken whenever an address of the pool frees up.
    pub fn wait_for_requested(&mut self, pool: &PoolKey, claim: &ObjectKey) {
        self.registry.wait_for_requested(pool, claim);
    }

    /// The claim waits for an address no more (bound, paused, deleted).
    pub fn stop_waiting(&mut self, pool: &PoolKey, claim: &ObjectKey) {
        self.registry.stop_waiting(pool, claim);
    }

    /// Whether our create of `key`'s IPAddress failed without saying whether it happened.
    pub fn holds_unconfirmed(&self, pool: &PoolKey, key: &ObjectKey) -> bool {
        self.registry.holds_unconfirmed(pool, key)
    }

    /// What the IPAddress `key` holds in the pool, if anything.
    pub fn held_by(&self, pool: &PoolKey, key: &ObjectKey) -> Option<Held> {
        self.registry.held_by(pool, key)
    }

    /// The duplicate the IPAddress `key` is part of, if another IPAddress of the pool holds its address too.
    pub fn duplicate_of(&self, pool: &PoolKey, key: &ObjectKey) -> Option<Duplicate> {
        self.registry.duplicate_of(pool, key)
    }

    /// The addresses of the pool that more than one IPAddress holds.
    pub fn duplicates(&self, pool: &PoolKey) -> Vec<Duplicate> {
        self.registry.duplicates(pool)
    }

    /// The D4 counts of the pool, and its spec error if any.
    pub fn pool_counts(&self, pool: &PoolKey) -> (PoolCounts, Option<String>) {
        self.registry.counts(pool)
    }

    /// The counts the pool's status says, and its spec error if any: the D4 counts of its IPAddresses, reservations
    /// and pins, as every manager that watches the pool sees them (no hold only this one knows of: an IPAddress in
    /// flight, or one of our writes a relist did not show, whose read is yet to tell whether it is gone; soak seed
    /// 700007091: two managers rewrote each other's status until that read).
    pub fn status_counts(&self, pool: &PoolKey) -> (PoolCounts, Option<String>) {
        self.status_counts_with(pool, &self.reserved_in_annotation(pool))
    }

    /// [`State::status_counts`], the annotation's reservations already read (it may be large: read once per status).
    pub fn status_counts_with(
        &self,
        pool: &PoolKey,
        reserved: &std::collections::HashSet<Held>,
    ) -> (PoolCounts, Option<String>) {
        let in_doubt = |key: &ObjectKey| self.in_doubt(pool, key);
        (self.registry.status_counts(pool, |held| reserved.contains(&held), in_doubt), self.registry.counts(pool).1)
    }

    /// The pool's `status.clusterUsage`, as every manager watching the pool sees it (`None` without a quota).
    pub fn status_cluster_usage(&self, pool: &PoolKey) -> Option<crate::api::v1alpha2::ClusterUsage> {
        self.registry.cluster_usage(pool, |key| self.in_doubt(pool, key))
    }

    /// Whether the IPAddress `key` of `pool` is this manager's knowledge alone: a record of our own write that a
    /// relist of the watch did not show, whose read is yet to tell whether it is gone. The pool's status, which every
    /// manager watching the pool writes alike, leaves it out.
    fn in_doubt(&self, pool: &PoolKey, key: &ObjectKey) -> bool {
        self.addresses.get(key).is_some_and(|r| r.doubtful && *r.pool == *pool)
    }

    /// The addresses of the pool that more than one IPAddress holds, as its status says them: without a hold no
    /// IPAddress confirms nor one in doubt (test
    /// `a_record_a_relist_did_not_show_makes_no_duplicate_nor_out_of_range_condition`: the other manager, which never
    /// saw it, has none).
    pub fn status_duplicates(&self, pool: &PoolKey) -> Vec<Duplicate> {
        self.registry.duplicates_without(pool, |k| self.in_doubt(pool, k))
    }

    /// The addresses the pool's moved-away annotation reserves, as every manager watching the pool reads them (the
    /// pool's status says how many: a count of this manager's own would differ from another's).
    pub fn reserved_in_annotation(&self, pool: &PoolKey) -> std::collections::HashSet<Held> {
        let annotation = self.pools.get(pool).and_then(|p| p.annotation(crate::api::MOVED_AWAY_ANNOTATION));
        moved_away::reserved_by(pool, annotation)
    }

    /// Whether the pool's spec allocates `held` (`None` before a valid spec is loaded).
    pub fn allocates(&self, pool: &PoolKey, held: Held) -> Option<bool> {
        self.registry.allocates(pool, held)
    }

    /// Up to `limit` IPAddresses of the pool whose address its spec no longer allocates, as its status says them
    /// (none in doubt).
    pub fn out_of_range(&self, pool: &PoolKey, limit: usize) -> Vec<(ObjectKey, Held)> {
        self.registry.out_of_range(pool, limit, |k| self.in_doubt(pool, k))
    }

    /// The addresses of the pool reserved as moved away.
    pub fn reservations(&self, pool: &PoolKey) -> Vec<Held> {
        self.registry.reservations(pool)
    }

    /// Up to `limit` of the pools whose counts changed, oldest change first (their status is written next).
    pub fn take_changed_pools(&mut self, limit: usize) -> Vec<PoolKey> {
        self.registry.take_dirty(limit)
    }

    /// The allocator state itself, for tests that take holds without a claim.
    #[cfg(test)]
    pub(crate) fn registry(&mut self) -> &mut super::Registry {
        &mut self.registry
    }

    /// Whether every pool's allocator agrees with its holders (the simulation checks it after every step).
    #[cfg(test)]
    pub fn check_consistency(&self) -> Result<(), String> {
        self.registry.check_consistency()
    }

    /// Every holder of the pool: the IPAddress (or reservation), what it holds, and whether it is confirmed.
    #[cfg(test)]
    pub fn holders(&self, pool: &PoolKey) -> Vec<(ObjectKey, Held, bool)> {
        self.registry.holders(pool)
    }

    // ---- Pools ----

    /// A pool as its watch delivers it: its spec goes to the allocator, and the claims it concerns get another look
    /// when it was created, changed or unpaused.
    pub fn apply_pool(&mut self, pool: Pool) {
        let key = PoolKey::new(pool.kind, pool.namespace(), pool.name());
        let woken = self.registry.apply_spec(&key, &pool.spec);
        self.wake_all(woken);
        if key.kind.is_global() {
            let appeared = self.pools.get(&key).map(|p| p.metadata.uid.clone()) != Some(pool.metadata.uid.clone());
            moved_away::sync(self, &key, &pool);
            if appeared {
                moved_away::pool_appeared(self, &key);
            }
        }
        // What a claim's reconcile decides on: another pool object of the name (deleted and created again while
        // the watch relisted), a new generation, pause, deletion.
        // A new shard label too (`--watch-filter`): the claims of the pool may be this manager's now, or no longer.
        let state_of = |p: &Pool| {
            (
                p.metadata.uid.clone(),
                p.metadata.generation,
                p.is_paused(),
                p.is_deleting(),
                p.shard().map(str::to_owned),
            )
        };
        let state = state_of(&pool);
        let pool = Arc::new(pool);
        let before = self.pools.insert(key.clone(), pool).map(|p| state_of(&p));
        if !state.2 && before != Some(state) {
            self.wake_pool_claims(&key);
        }
        self.notices.push(Notice::PoolChanged(key));
    }

    pub fn delete_pool(&mut self, key: &PoolKey) {
        self.pools.remove(key);
        self.registry.remove_spec(key);
        self.notices.push(Notice::Counted(Counted::PoolForgotten(key.clone())));
        self.wake_pool_claims(key);
    }

    pub fn pool(&self, key: &PoolKey) -> Option<Arc<Pool>> {
        self.pools.get(key).cloned()
    }

    /// Whether an IPAddress references the pool, or a create of one is uncertain (the pool's finalizer waits for
    /// neither; reservations do not count, they go with the pool).
    pub fn pool_in_use(&self, key: &PoolKey) -> bool {
        self.addresses.values().any(|r| *r.pool == *key) || self.registry.used(key) > 0
    }

    pub fn pool_keys(&self) -> Vec<PoolKey> {
        self.pools.keys().cloned().collect()
    }

    pub(super) fn wake_pool_claims(&mut self, key: &PoolKey) {
        self.wake_claims_where(|claim| {
            claim.pool_kind == Some(key.kind)
                && claim.pool_name == key.name
                && (key.kind.is_global() || claim.key.namespace == key.namespace)
        });
    }

    // ---- Clusters ----

    /// A Cluster as its watch delivers it: one that appears, or is unpaused, wakes its claims (docs/compatibility.md
    /// D9).
    /// Notes whether a Cluster is of this manager's shard (its `cluster.x-k8s.io/watch-filter` label): a manager with
    /// `--watch-filter` does not see the claims of another's.
    pub fn cluster_of_shard(&mut self, key: &ObjectKey, shard: Option<&str>) {
        if self.shard.is_some() && shard != self.shard.as_deref() {
            self.clusters_of_other_shards.insert(key.clone());
        } else {
            self.clusters_of_other_shards.remove(key);
        }
    }

    /// A Cluster as its watch delivers it, with its shard label and resourceVersion.
    pub fn apply_cluster_of_shard(
        &mut self,
        key: ObjectKey,
        paused: bool,
        shard: Option<&str>,
        revision: ResourceVersion,
    ) {
        self.cluster_of_shard(&key, shard);
        let paused = paused || self.paused_by_a_newer_read(&key, revision);
        self.cluster_revisions.insert(key.clone(), revision);
        self.apply_cluster(key, paused);
    }

    /// A Cluster's deletion as its watch event shows it: paused in its last state (a pause the watch had not shown
    /// before), it went paused.
    pub fn cluster_deleted(&mut self, key: &ObjectKey, paused: bool) {
        if paused && let Some(known) = self.clusters.get_mut(key) {
            *known = true;
        }
        self.delete_cluster(key);
    }

    /// Whether a live read newer than this watch event of the Cluster showed it paused: the event does not unpause it.
    fn paused_by_a_newer_read(&mut self, key: &ObjectKey, revision: ResourceVersion) -> bool {
        let Some(read) = self.clusters_read_paused.get(key) else { return false };
        if revision.is_at_least(*read) {
            self.clusters_read_paused.remove(key);
            return false;
        }
        true
    }

    /// A live read shows the Cluster paused before its watch did (which may relist past the pause and the Cluster's
    /// deletion, seed 420069014): its addresses are kept as a paused Cluster's, and its deletion is a move. A read the
    /// watch has overtaken (a newer event, or the Cluster's deletion) is old news, and ignored (test
    /// `a_cluster_read_paused_live_makes_its_unseen_deletion_a_move`).
    pub fn cluster_read_paused(&mut self, key: ObjectKey, revision: ResourceVersion) {
        if !self.clusters.contains_key(&key)
            || self.cluster_revisions.get(&key).is_some_and(|w| w.is_at_least(revision))
        {
            return;
        }
        self.clusters_read_paused.insert(key.clone(), revision);
        if self.clusters.get(&key) != Some(&true) {
            self.apply_cluster(key, true);
        }
    }

    pub fn apply_cluster(&mut self, key: ObjectKey, paused: bool) {
        self.moved_clusters.remove(&key);
        let was = self.clusters.insert(key.clone(), paused);
        if !paused && was != Some(false) {
            self.wake_claims_where(|claim| claim.key.namespace == key.namespace && claim.cluster() == Some(&*key.name));
        }
    }

    /// A Cluster is gone: the claims it kept waiting (a deleted claim of a paused Cluster) go on without it. Gone
    /// while paused, it was moved to another management cluster (clusterctl deletes it last, paused): the IPAddresses
    /// of global pools it left behind, whose claims are gone, keep their addresses reserved even when the claims'
    /// deletion for the move was not seen (a relist, a restart).
    pub fn delete_cluster(&mut self, key: &ObjectKey) {
        self.clusters_read_paused.remove(key);
        self.cluster_revisions.remove(key);
        let Some(paused) = self.clusters.remove(key) else { return };
        // Another shard's Cluster: on a pool this manager does not watch every claim of, the claims of its IPAddresses
        // are that shard manager's, alive or gone for the move, and theirs to record (the simulation's second manager
        // reserved the address of a live bound claim it could not see).
        let others = self.clusters_of_other_shards.remove(key);
        if paused {
            self.moved_clusters.insert(key.clone());
            if self.registry.is_synced() {
                self.left_behind_by(key, others);
            } else {
                self.clusters_gone_before_synced.push((key.clone(), others));
            }
        }
        self.wake_claims_where(|claim| claim.key.namespace == key.namespace && claim.cluster() == Some(&*key.name));
    }

    /// The Cluster `key`, gone while paused (moved away), left behind the IPAddresses of global pools labelled for it
    /// whose claims are gone: their addresses stay reserved. `others`: it was another shard's Cluster.
    pub(super) fn left_behind_by(&mut self, key: &ObjectKey, others: bool) {
        let left_behind: Vec<(ObjectKey, Option<Uid>, bool)> = self
            .addresses
            .iter()
            .filter(|(k, r)| {
                r.pool.kind.is_global()
                    && k.namespace == key.namespace
                    && r.cluster_label.as_deref() == Some(&*key.name)
                    && !r.moving_away
                    && self.claims.get(k).is_none()
                    && !self.claim_seen_gone(k, r)
            })
            .map(|(k, r)| (k.clone(), r.uid, self.sees_claims_of(&r.pool)))
            .collect();
        for (address, uid, sees_its_claims) in left_behind {
            if others && !sees_its_claims {
                self.left_to_other_shards.insert((address, uid));
                continue;
            }
            // A Cluster of this shard's now (brought back, labelled): the move is this manager's to record.
            self.left_to_other_shards.remove(&(address.clone(), uid));
            moved_away::claim_moved_away(self, &address, sees_its_claims);
        }
    }

    pub fn cluster_keys(&self) -> Vec<ObjectKey> {
        self.clusters.keys().cloned().collect()
    }

    /// Whether the Cluster is paused; `None` when it does not exist (or Clusters are not served).
    pub fn cluster_paused(&self, namespace: &str, name: &str) -> Option<bool> {
        self.clusters.get(&ObjectKey::new(namespace, name)).copied()
    }
}
