//! The steps of the index as the rest of the process calls them: each one call, one step under the lock. Each is
//! documented on the `State` method it runs.

use std::sync::Arc;
use std::time::Duration;

use super::{
    AddressRecord, ClaimRun, ClaimView, Duplicate, Held, Index, ObjectKey, Observation, Observed, OrphanView, PoolKey,
    PoolView,
};
use crate::api::Pool;
use crate::capi::{Claim, IpAddress};
use crate::compact::{ResourceVersion, Uid};
use crate::ipam::PoolCounts;

impl Index {
    #[cfg(test)]
    pub fn address_created(&self, claim: &Claim, created: &IpAddress) -> (Option<AddressRecord>, Option<Duration>) {
        self.write(|s| s.address_created(claim, created))
    }

    pub fn apply_claim(&self, claim: Claim) {
        self.write(|s| s.apply_claim(claim))
    }

    pub fn delete_claim(&self, key: &ObjectKey) {
        self.write(|s| s.delete_claim(key))
    }

    pub fn claim_deleted(&self, last: &Claim) {
        self.write(|s| s.claim_deleted(last))
    }

    /// Records what the API server told a controller (see [`Observed`]): the one way a read's or a write's answer
    /// reaches the index.
    pub fn observe(&self, observed: Observed) -> Observation {
        self.write(|s| s.observe(observed))
    }

    /// Records `observed` and returns `claim`'s view after it, in one step.
    pub fn observe_then_view(&self, claim: &Claim, pool_key: PoolKey, observed: Observed) -> (Observation, ClaimView) {
        self.write(|s| s.observe_then_view(claim, pool_key, observed))
    }

    /// What the orphan release decides on for the IPAddress `key`, in one step (see [`OrphanView`]).
    pub fn orphan_view(&self, key: &ObjectKey, judged: Option<&AddressRecord>) -> OrphanView {
        self.read(|s| s.orphan_view(key, judged))
    }

    /// What a run of the claim `key`'s worker starts from, in one step.
    pub fn claim_run(&self, key: &ObjectKey) -> ClaimRun {
        self.write(|s| s.claim_run(key))
    }

    /// What `claim`'s reconcile decides on, in one step.
    #[cfg(test)]
    pub fn claim_view(&self, claim: &Claim, pool_key: PoolKey) -> ClaimView {
        self.read(|s| s.claim_view(claim, pool_key))
    }

    pub fn claim(&self, key: &ObjectKey) -> Option<Arc<Claim>> {
        self.read(|s| s.claim(key))
    }

    pub fn claim_keys(&self) -> Vec<ObjectKey> {
        self.read(|s| s.claim_keys())
    }

    pub fn claim_count(&self) -> usize {
        self.read(|s| s.claim_count())
    }

    #[cfg(test)]
    pub fn remember_written(&self, claim: &Claim, digest: Option<u64>) {
        self.write(|s| s.remember_written(claim, digest))
    }

    #[cfg(test)]
    pub fn first_seen(&self, claim: &Claim) {
        self.write(|s| s.first_seen(claim))
    }

    #[cfg(test)]
    pub fn bound(&self, claim: &Claim) {
        self.write(|s| s.bound(claim))
    }

    pub fn allocation_latency(&self, claim: &Claim) -> Option<Duration> {
        self.write(|s| s.allocation_latency(claim))
    }

    #[cfg(test)]
    pub fn hold_bound_addresses(&self) {
        self.write(|s| s.hold_bound_addresses())
    }

    pub fn books(&self) -> usize {
        self.read(|s| s.books())
    }

    pub fn apply_address(&self, address: &IpAddress) -> ObjectKey {
        self.write(|s| s.apply_address(address))
    }

    pub fn address_delete_watched(&self, key: &ObjectKey, object: &IpAddress) {
        self.write(|s| s.address_delete_watched(key, object))
    }

    pub fn address_gone(&self, key: &ObjectKey, uid: Option<Uid>) {
        self.write(|s| s.address_gone(key, uid))
    }

    pub fn is_moved_holder(&self, pool: &PoolKey, key: &ObjectKey) -> bool {
        self.read(|s| s.is_moved_holder(pool, key))
    }

    #[cfg(test)]
    pub fn claim_of_another_manager(&self, key: &ObjectKey, uid: Option<Uid>, claim_shard: Option<&str>) {
        self.write(|s| s.claim_of_another_manager(key, uid, claim_shard))
    }

    pub fn addresses_listing(&self) {
        self.write(|s| s.addresses_listing())
    }

    pub fn addresses_listed(&self) {
        self.write(|s| s.addresses_listed())
    }

    #[cfg(test)]
    pub fn doubt_resolved(&self, key: &ObjectKey, uid: Option<Uid>, live: Option<&IpAddress>) {
        self.write(|s| s.doubt_resolved(key, uid, live))
    }

    #[cfg(test)]
    pub fn address(&self, key: &ObjectKey) -> Option<AddressRecord> {
        self.read(|s| s.address(key))
    }

    pub fn address_keys(&self) -> Vec<ObjectKey> {
        self.read(|s| s.address_keys())
    }

    pub fn address_ids(&self) -> Vec<(ObjectKey, Option<Uid>)> {
        self.read(|s| s.address_ids())
    }

    pub fn address_count(&self) -> usize {
        self.read(|s| s.address_count())
    }

    #[cfg(test)]
    pub fn deleting_ourselves(&self, key: &ObjectKey, uid: Uid) {
        self.write(|s| s.deleting_ourselves(key, uid))
    }

    #[cfg(test)]
    pub fn remember_address(&self, key: &ObjectKey, object: &IpAddress) -> Option<AddressRecord> {
        self.write(|s| s.remember_address(key, object))
    }

    #[cfg(test)]
    pub fn address_deleted_by_us(&self, key: &ObjectKey, pool: &PoolKey, uid: Option<&str>) {
        self.write(|s| s.address_deleted_by_us(key, pool, uid))
    }

    #[cfg(test)]
    pub fn give_up_uncertain_create(&self, pool: &PoolKey, key: &ObjectKey) {
        self.write(|s| s.give_up_uncertain_create(pool, key))
    }

    #[cfg(test)]
    pub fn give_up_gone_claims_hold(&self, pool: &PoolKey, key: &ObjectKey) {
        self.write(|s| s.give_up_gone_claims_hold(pool, key))
    }

    pub fn holds_reserved(&self, pool: &PoolKey, key: &ObjectKey) -> bool {
        self.read(|s| s.holds_reserved(pool, key))
    }

    #[cfg(test)]
    pub fn moved_away_unwritten(&self, pool: &PoolKey, key: &ObjectKey) -> bool {
        self.read(|s| s.moved_away_unwritten(pool, key))
    }

    #[cfg(test)]
    pub fn moved_away_left_out(&self, pool: &PoolKey, left_out: Vec<String>) {
        self.write(|s| s.moved_away_left_out(pool, left_out))
    }

    pub fn orphaned_hold(&self, key: &ObjectKey) -> Option<PoolKey> {
        self.read(|s| s.orphaned_hold(key))
    }

    pub fn orphans(&self) -> Vec<(ObjectKey, AddressRecord)> {
        self.read(|s| s.orphans())
    }

    #[cfg(test)]
    pub fn keeps_orphan(&self, key: &ObjectKey, record: &AddressRecord) -> bool {
        self.read(|s| s.keeps_orphan(key, record))
    }

    pub fn keeps_addresses(&self, namespace: &str, record: &AddressRecord) -> bool {
        self.read(|s| s.keeps_addresses(namespace, record))
    }

    #[cfg(test)]
    pub fn allocate(
        &self,
        claim: &Claim,
        pool: &PoolKey,
        requested: Option<&str>,
    ) -> Result<super::Assigned, super::AllocateError> {
        let claimant = super::registry::Claimant::of_cluster(claim.cluster_key());
        self.write(|s| s.allocate(claim, pool, requested, &claimant))
    }

    #[cfg(test)]
    pub fn claim_waits(&self, pool: &PoolKey, claim: &ObjectKey, wait: super::Wait) {
        self.write(|s| s.claim_waits(pool, claim, wait))
    }

    #[cfg(test)]
    pub fn wait_for_address(&self, pool: &PoolKey, claim: &ObjectKey) {
        self.write(|s| s.wait_for_address(pool, claim))
    }

    #[cfg(test)]
    pub fn holds_unconfirmed(&self, pool: &PoolKey, key: &ObjectKey) -> bool {
        self.read(|s| s.holds_unconfirmed(pool, key))
    }

    pub fn held_by(&self, pool: &PoolKey, key: &ObjectKey) -> Option<Held> {
        self.read(|s| s.held_by(pool, key))
    }

    pub fn duplicate_of(&self, pool: &PoolKey, key: &ObjectKey) -> Option<Duplicate> {
        self.read(|s| s.duplicate_of(pool, key))
    }

    #[cfg(test)]
    pub fn duplicates(&self, pool: &PoolKey) -> Vec<Duplicate> {
        self.read(|s| s.duplicates(pool))
    }

    pub fn serves_pool(&self, pool: &PoolKey) -> bool {
        self.read(|s| s.serves_pool(pool))
    }

    pub fn allocates(&self, pool: &PoolKey, held: Held) -> Option<bool> {
        self.read(|s| s.allocates(pool, held))
    }

    pub fn pool_counts(&self, pool: &PoolKey) -> (PoolCounts, Option<String>) {
        self.read(|s| s.pool_counts(pool))
    }

    pub fn reservations(&self, pool: &PoolKey) -> Vec<Held> {
        self.read(|s| s.reservations(pool))
    }

    pub fn take_changed_pools(&self, limit: usize) -> Vec<PoolKey> {
        self.write(|s| s.take_changed_pools(limit))
    }

    #[cfg(test)]
    pub fn check_consistency(&self) -> Result<(), String> {
        self.read(|s| s.check_consistency())
    }

    #[cfg(test)]
    pub fn holders(&self, pool: &PoolKey) -> Vec<(ObjectKey, Held, bool)> {
        self.read(|s| s.holders(pool))
    }

    pub fn apply_pool(&self, pool: Pool) {
        self.write(|s| s.apply_pool(pool))
    }

    pub fn delete_pool(&self, key: &PoolKey) {
        self.write(|s| s.delete_pool(key))
    }

    #[cfg(test)]
    pub fn pool(&self, key: &PoolKey) -> Option<Arc<Pool>> {
        self.read(|s| s.pool(key))
    }

    pub fn pool_view(&self, key: &PoolKey, out_of_range_shown: usize) -> Option<PoolView> {
        self.read(|s| s.pool_view(key, out_of_range_shown))
    }

    #[cfg(test)]
    pub fn pool_status(&self, key: &PoolKey, out_of_range_shown: usize) -> super::PoolStatusView {
        self.read(|s| s.pool_status(key, out_of_range_shown))
    }

    #[cfg(test)]
    pub fn pool_in_use(&self, key: &PoolKey) -> bool {
        self.read(|s| s.pool_in_use(key))
    }

    pub fn pool_keys(&self) -> Vec<PoolKey> {
        self.read(|s| s.pool_keys())
    }

    pub fn apply_cluster(&self, key: ObjectKey, paused: bool) {
        self.write(|s| s.apply_cluster(key, paused))
    }

    /// A Cluster with its `cluster.x-k8s.io/watch-filter` label, as its watch delivers it.
    pub fn apply_cluster_of_shard(&self, key: ObjectKey, paused: bool, shard: Option<&str>, revision: ResourceVersion) {
        self.write(|s| s.apply_cluster_of_shard(key, paused, shard, revision))
    }

    #[cfg(test)]
    pub fn cluster_read_paused(&self, key: ObjectKey, revision: ResourceVersion) {
        self.write(|s| s.cluster_read_paused(key, revision))
    }

    pub fn cluster_deleted(&self, key: &ObjectKey, paused: bool) {
        self.write(|s| s.cluster_deleted(key, paused))
    }

    pub fn delete_cluster(&self, key: &ObjectKey) {
        self.write(|s| s.delete_cluster(key))
    }

    pub fn cluster_keys(&self) -> Vec<ObjectKey> {
        self.read(|s| s.cluster_keys())
    }

    #[cfg(test)]
    pub fn cluster_paused(&self, namespace: &str, name: &str) -> Option<bool> {
        self.read(|s| s.cluster_paused(namespace, name))
    }

    /// What the writer of `pool`'s moved-away annotation decides on, in one step.
    pub fn moved_away_view(&self, pool: &PoolKey) -> super::moved_away::MovedAwayView {
        self.read(|s| s.moved_away_view(pool))
    }

    #[cfg(test)]
    pub fn moved_away_dropped(&self, pool: &PoolKey, dropped: &[String]) {
        self.write(|s| s.moved_away_dropped(pool, dropped))
    }

    #[cfg(test)]
    pub fn moved_away_written(
        &self,
        pool: &PoolKey,
        changes: &std::collections::BTreeMap<String, bool>,
        revision: Option<ResourceVersion>,
    ) {
        self.write(|s| s.moved_away_written(pool, changes, revision))
    }
}
