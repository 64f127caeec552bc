//! Holds without an IPAddress, IPAddresses without a claim, addresses held twice, and reservations a claim ends.

use super::{AddressRecord, Counted, Duplicate, Held, Notice, ObjectKey, PoolKey, State, moved_away};
use crate::capi::Claim;
use crate::compact::Uid;

impl State {
    /// Our create of `key`'s IPAddress was refused (or found another in its place): its hold is given up.
    pub fn give_up_uncertain_create(&mut self, pool: &PoolKey, key: &ObjectKey) {
        let woken = self.registry.abandon(pool, key);
        self.wake_all(woken);
    }

    /// The claim `key` is gone: a hold its uncertain create left, and one set aside for its machine, are given up,
    /// unless a claim of that name is back (its own reconcile owns the hold then). Decided in one step, so
    /// a new claim's allocation cannot slip in between.
    pub fn give_up_gone_claims_hold(&mut self, pool: &PoolKey, key: &ObjectKey) {
        let taken_over = || self.claims.get(key).is_some_and(|c| c.uses_pool(pool.kind, &pool.namespace, &pool.name));
        let woken = self.registry.abandon_unless(pool, key, taken_over);
        self.wake_all(woken);
    }

    /// Whether `uid` of `key` is one we deleted (its events are stale).
    pub(super) fn is_deleted(&mut self, key: &ObjectKey, uid: Option<Uid>) -> bool {
        let Some(uid) = uid else { return false };
        let deleted = &self.deleted;
        if !deleted.contains(&(key.clone(), uid)) {
            return false;
        }
        // Listed again: it still exists, so its tombstone stays after the list.
        if let Some(unlisted) = self.unlisted_tombstones.as_mut() {
            unlisted.remove(&(key.clone(), uid));
        }
        true
    }

    /// An address held twice: the one promise of an IPAddress provider is broken, so this is as loud as it gets. An
    /// IPAddress whose claim was never bound to it is withdrawn (`controllers::claim`); bound ones stay (a machine
    /// may use them), and the pool's Ready condition, both claims' conditions and the metric say so until one of them
    /// is released (docs/operations.md).
    pub(super) fn report_duplicate(&mut self, duplicate: &Duplicate) {
        let holders: Vec<String> = duplicate.holders.iter().map(ToString::to_string).collect();
        tracing::error!(
            pool = %duplicate.pool,
            address = %duplicate.held,
            ipaddresses = holders.join(", "),
            "DUPLICATE ADDRESS: one address of the pool is held by more than one IPAddress"
        );
        self.notices.push(Notice::Counted(Counted::DuplicateDetected(duplicate.pool.kind)));
        // Their claims' conditions name the duplicate (an unbound one withdraws its IPAddress). A placeholder (a
        // reservation, a hold set aside) is no claim's IPAddress (test
        // `the_address_set_aside_goes_with_its_claim_though_the_late_object_of_its_name_lives`: woken, a hold set aside
        // was taken for an uncertain create whose name is free, and given up).
        let claims = duplicate.holders.iter().filter(|h| !super::registry::is_placeholder(h)).cloned().collect();
        self.wake_all(claims);
    }

    /// A claim of the pool is bound to the IPAddress holding `held`: a reservation of that address as moved away
    /// ends (its Cluster came back).
    pub fn claim_back(&mut self, pool: &PoolKey, claim: &ObjectKey, held: Held) {
        // Only a claim that is still here and staying (not deleted for a move meanwhile).
        if self.claims.get(claim).is_some_and(|c| !c.moving_away && c.deletion_timestamp.is_none()) {
            moved_away::claim_back(self, pool, claim, held);
        }
    }

    /// Whether the IPAddress `key` holds an address of `pool` that is reserved as moved away: it came back with its
    /// Cluster, or a move left it behind here.
    pub fn holds_reserved(&self, pool: &PoolKey, key: &ObjectKey) -> bool {
        pool.kind.is_global()
            && self.registry.held_by(pool, key).is_some_and(|held| moved_away::is_reserved(self, pool, held))
    }

    /// Whether the IPAddress `key` (`record`) is, for `claim` (the claim of its name), one a move left behind: marked
    /// so, or holding a reserved address while neither owned by the claim nor the one it is bound to (clusterctl
    /// rewrites the owner references of one that came back). Not for a claim Velero restored: Velero keeps the
    /// backup's owner references, so its own IPAddress, restored beside it, is not owned by it (seed 460384603), unless
    /// that owner is the claim that went for the move (restored from a backup taken while it was left behind: seed
    /// 570216407). Its address is in use on the other management cluster: never this claim's.
    pub fn left_behind_for(&self, record: &AddressRecord, key: &ObjectKey, claim: &Claim) -> bool {
        let owner_moved_away = record.claim_owner.is_some_and(|owner| self.moved_owners.get(key) == Some(&owner));
        record.claim_owner != Some(claim.uid.uid())
            && claim.address_ref() != Some(&*key.name)
            && (record.moving_away || (self.holds_reserved(&record.pool, key) && (!claim.restored || owner_moved_away)))
    }

    /// The claim is deleted here for good, not for a move (neither marked by clusterctl, nor of a Cluster that is
    /// paused or was moved): an address of its own IPAddress reserved as moved away (its Cluster came back with it, and
    /// the claim goes before it was bound again) is in use nowhere any more, and the reservation ends. Unsure, it
    /// stays: a reservation too many wastes an address, one too few hands it out twice.
    pub fn claim_deleted_for_good(&mut self, pool: &PoolKey, claim: &Claim) {
        if !pool.kind.is_global() || claim.moving_away {
            return;
        }
        if let Some(cluster) = claim.cluster()
            && (self.cluster_paused(&claim.key.namespace, cluster) != Some(false)
                || self.moved_clusters.contains(&ObjectKey::new(&claim.key.namespace, cluster)))
        {
            return;
        }
        // Only its own IPAddress (owned by this claim: clusterctl rewrites the owner references of what it brings
        // back), not one a move left behind under its name.
        let owned = self.addresses.get(&claim.key).is_some_and(|r| r.claim_owner == Some(claim.uid.uid()));
        if owned && let Some(held) = self.registry.held_by(pool, &claim.key) {
            moved_away::claim_back(self, pool, &claim.key, held);
        }
    }

    /// Whether the entry of the address the IPAddress `key` holds in `pool` is still to be written into the pool's
    /// moved-away annotation.
    pub fn moved_away_unwritten(&self, pool: &PoolKey, key: &ObjectKey) -> bool {
        self.moved_away_unwritten_named(pool, key)
    }

    /// The pool holding something for the IPAddress `key` that the API server has not shown yet, a create of ours
    /// that failed without saying whether it happened, and that is not the pool of the claim of that name (whose
    /// own reconcile takes the hold over).
    pub fn orphaned_hold(&self, key: &ObjectKey) -> Option<PoolKey> {
        let pool = self.registry.unconfirmed_hold(key)?;
        let claimed = self.claims.get(key).is_some_and(|c| c.uses_pool(pool.kind, &pool.namespace, &pool.name));
        (!claimed).then_some(pool)
    }

    /// The IPAddresses made for a claim that is not cached, and whose Cluster (if any) is not paused: candidates for
    /// release once the API server confirms the claim is gone (docs/compatibility.md D11). Whether ours still protects
    /// them or a delete of ours did not finish (marked for deletion, or our finalizer already off), they are released.
    pub fn orphans(&self) -> Vec<(ObjectKey, AddressRecord)> {
        let candidates: Vec<(ObjectKey, AddressRecord)> = self
            .addresses
            .iter()
            .filter(|(k, r)| self.claim_gone_for(k, r))
            .map(|(k, r)| (k.clone(), r.clone()))
            .collect();
        candidates.into_iter().filter(|(key, record)| !self.keeps_orphan(key, record)).collect()
    }

    /// Whether the IPAddress `key` was made for a claim that is not cached, on a pool this manager serves for it.
    fn claim_gone_for(&self, key: &ObjectKey, record: &AddressRecord) -> bool {
        // A claim of the name in another pool cannot adopt it (IPAddress specs are immutable): still an orphan.
        record.made_for_a_claim()
            && !self
                .claims
                .get(key)
                .is_some_and(|c| c.uses_pool(record.pool.kind, &record.pool.namespace, &record.pool.name))
            && self.serves_pool(&record.pool)
            && !self.another_managers(key, record)
    }

    /// Whether the IPAddress `key` (`record`) is another manager's to release: its claim lives and another manager
    /// serves it, or another shard's Cluster left it behind when it moved away, on a pool whose claims this manager
    /// does not all see (labelled for this shard since, the pool's claims are all this manager's).
    pub(super) fn another_managers(&self, key: &ObjectKey, record: &AddressRecord) -> bool {
        let id = (key.clone(), record.uid);
        self.others_claims.contains(&id)
            || (self.left_to_other_shards.contains(&id) && !self.sees_claims_of(&record.pool))
    }

    /// Whether the IPAddress `key` is an orphan that the orphan release deletes, its address then free: its claim is
    /// gone, no pause keeps it, and no move left it behind (whose address stays reserved).
    pub(super) fn released_as_orphan(&self, key: &ObjectKey) -> bool {
        self.addresses
            .get(key)
            .is_some_and(|r| !r.moving_away && self.claim_gone_for(key, r) && !self.keeps_orphan(key, r))
    }

    /// Whether this manager serves the pool: it has no shard (`cluster.x-k8s.io/watch-filter` label), or this
    /// manager's. A pool not known (gone) is anyone's.
    pub fn serves_pool(&self, pool: &PoolKey) -> bool {
        self.pools.get(pool).and_then(|p| p.shard()).is_none_or(|shard| Some(shard) == self.shard.as_deref())
    }

    /// Whether this manager watches every claim that may use the pool: it has no `--watch-filter`, or the pool is
    /// labelled for its shard. A manager with a filter does not see the claims other managers serve on a pool without
    /// the label, and the moves of their IPAddresses are theirs to record (the simulation's second manager found the
    /// two rewriting each other's marks and entries for ever).
    pub fn sees_claims_of(&self, pool: &PoolKey) -> bool {
        self.shard.is_none()
            || self.pools.get(pool).and_then(|p| p.shard()).is_some_and(|s| Some(s) == self.shard.as_deref())
    }

    /// Whether the record's move stays known when the object does not say it: noticed by this manager, or, seen from
    /// the object (its mark, clusterctl's annotation), for a manager that watches every claim of the pool (what its
    /// claim's deletion told is not on the object yet: soak seed 110198788). A manager that does not see the claim
    /// follows the object: the claim's manager took the mark off (the claim came back).
    pub(super) fn keeps_moving_away(&self, record: &AddressRecord) -> bool {
        record.moving_away && (record.moving_away_noticed || self.sees_claims_of(&record.pool))
    }

    /// The IPAddress `key` (`uid`) of a pool without a shard belongs to a live claim this manager does not watch
    /// (another `--watch-filter`): not an orphan of ours, and a sign that two managers allocate from one pool, which can
    /// hand an address out twice (docs/operations.md: label the pool for one of them).
    pub fn claim_of_another_manager(&mut self, key: &ObjectKey, uid: Option<Uid>, claim_shard: Option<&str>) {
        if self.others_claims.insert((key.clone(), uid)) {
            let pool = self.addresses.get(key).map(|r| r.pool.to_string()).unwrap_or_default();
            tracing::warn!(
                ipaddress = %key,
                pool,
                claim_watch_filter = claim_shard.unwrap_or_default(),
                watch_filter = self.shard.as_deref().unwrap_or_default(),
                "an IPAddress of this pool belongs to a claim another manager serves: managers with different \
                 --watch-filter values must not share a pool, or they can hand an address out twice; label the pool \
                 cluster.x-k8s.io/watch-filter=<value> for the one that is to serve it"
            );
        }
    }

    /// Whether the IPAddress `key`, whose claim is gone, is kept: its Cluster is paused (a move in progress), unless a
    /// bound claim's IPAddress holds its address too (this one is then a late create no claim was ever bound to, and
    /// kept, it stays a duplicate for as long as the pause lasts).
    pub fn keeps_orphan(&self, key: &ObjectKey, record: &AddressRecord) -> bool {
        self.keeps_addresses(&key.namespace, record) && self.pause_may_keep(key, record)
    }

    /// Whether a pause of the Cluster of the IPAddress `key`, whose claim is gone, keeps it: not when it is a late
    /// duplicate of a bound claim's address or of a restored one's, nor when its claim's deletion was seen without
    /// clusterctl's mark (no move: released at once, the decision is on the API server before a restart forgets it;
    /// test `a_cluster_read_paused_live_makes_its_unseen_deletion_a_move`).
    pub fn pause_may_keep(&self, key: &ObjectKey, record: &AddressRecord) -> bool {
        !self.claim_seen_gone(key, record)
            && !self.duplicates_a_bound_one(&record.pool, key)
            && !self.duplicates_a_restored_one(key, record)
    }

    /// Whether the deletion of the claim of the IPAddress `key` was seen without clusterctl's mark.
    pub(super) fn claim_seen_gone(&self, key: &ObjectKey, record: &AddressRecord) -> bool {
        self.claims_seen_gone.get(key).is_some_and(|uid| *uid == record.uid)
    }

    /// Whether another IPAddress holding the address `key` holds in `pool` is the one of a claim bound to it, as its
    /// condition tells (a late create under a bound claim's name holding another address is no machine's). Also of
    /// a claim being deleted: its machine may use the address until its release, which a paused Cluster holds, so the
    /// pause would keep both for as long as it lasts (soak seed 802181713).
    pub(super) fn duplicates_a_bound_one(&self, pool: &PoolKey, key: &ObjectKey) -> bool {
        self.registry.duplicate_of(pool, key).is_some_and(|d| {
            d.holders.iter().any(|other| {
                other != key && self.claims.get(other).is_some_and(|c| self.bound_as_told(pool, other, &c))
            })
        })
    }

    /// Whether the IPAddress `key` (`record`) came second to one Velero restored with its claim, holding its address:
    /// the claim restored, live, unbound (Velero restores no status) and of the pool, the IPAddress not its own create
    /// (owned by the backup's claim, or by none once the garbage collector took that dangling reference off), and
    /// created before this one or in the same second. Its machine uses the address, the bound one Velero's missing
    /// status hides, and this one is a late create (a deposed leader's): a pause keeps no such duplicate (soak seed
    /// 700328281). One created first is kept: the IPAddress a move left behind (its claim's deletion unseen) must not
    /// be released for a stale backup's restore of its address (scenario
    /// `a_stale_restored_ipaddress_does_not_get_a_paused_moves_left_behind_address`). Timestamps are in seconds: one of
    /// the same second is taken for later, as a deposed leader's create in flight lands moments after the restore
    /// (scenario `a_restored_ipaddress_is_not_withdrawn_for_a_late_orphan_a_pause_keeps`), while an IPAddress a move
    /// left behind was there long before a stale backup was restored over it.
    fn duplicates_a_restored_one(&self, key: &ObjectKey, record: &AddressRecord) -> bool {
        let pool = &record.pool;
        self.registry.duplicate_of(pool, key).is_some_and(|d| {
            d.holders.iter().any(|other| {
                other != key
                    && self.claims.get(other).is_some_and(|c| {
                        c.restored
                            && c.deletion_timestamp.is_none()
                            && c.address_ref().is_none()
                            && c.uses_pool(pool.kind, &pool.namespace, &pool.name)
                            && self.addresses.get(other).is_some_and(|r| {
                                !r.moving_away
                                    && !r.deleting
                                    && r.claim_owner != Some(c.uid.uid())
                                    && r.created <= record.created
                            })
                    })
            })
        })
    }

    /// Whether the IPAddress's Cluster is paused (a move in progress): it keeps its addresses.
    pub fn keeps_addresses(&self, namespace: &str, record: &AddressRecord) -> bool {
        record.cluster_label.as_deref().is_some_and(|cluster| self.cluster_paused(namespace, cluster) == Some(true))
    }
}
