//! What a claim's reconcile decides on, read from the index in one step ([`super::Index::claim_view`]): the claim's
//! pool, its Cluster, the IPAddress of its name and where that stands in its pool. The reconcile decides on the view
//! and writes; after a write it awaited, it takes a new view rather than mixing answers from before and after.

use std::sync::Arc;

use super::{AddressRecord, Duplicate, Held, ObjectKey, PoolKey, State};
use crate::api::Pool;
use crate::capi::Claim;
use crate::ipam::PoolCounts;

/// One claim's view of the index.
#[derive(Clone, Debug)]
pub struct ClaimView {
    pub pool_key: PoolKey,
    /// The pool as its watch shows it, if it exists.
    pub pool: Option<Arc<Pool>>,
    /// Whether the claim's Cluster is paused (`None`: it names none, or one that does not exist).
    pub cluster_paused: Option<bool>,
    /// The IPAddress of the claim's name, of any pool.
    pub record: Option<AddressRecord>,
    /// What that IPAddress holds in the claim's pool.
    pub held: Option<Held>,
    /// The duplicate it is part of, if another IPAddress of the pool holds its address too.
    pub duplicate: Option<Duplicate>,
    /// It is part of a duplicate as the one that moved away and came back (the pool's moved-away annotation names it),
    /// and no other holder is bound to it (`State::bound_as_told`): it stays and the others go (withdrawn, the machine
    /// that came back would lose the address it uses).
    pub moved_one_wins: bool,
    /// It wins so, and another holder is an IPAddress of ours for its own claim, which is unbound as the cache shows it
    /// (or bound to another address, as its condition tells): a binding write of that claim may be in flight (a deposed
    /// leader's), so this one is neither bound nor repaired until the other is withdrawn (scenario
    /// `the_ipaddress_that_came_back_does_not_bind_beside_a_binding_in_flight`: bound at once, both claims end up bound
    /// to one address). Not for a holder restored by Velero (it waits for this one: `restored_one_wins`) or one an
    /// entry names too.
    pub moved_one_waits: bool,
    /// It is part of a duplicate as a claim Velero restored with its IPAddress (owned by the backup's claim, an earlier
    /// one of its name), and every other holder is unbound and holds our own create for its claim (a late create of
    /// the address the restore's delete freed): it stays and the others go (seed 540515841: withdrawn, the restored
    /// machine would lose the address it uses).
    pub restored_one_wins: bool,
    /// Every other holder of its duplicate is an orphan the orphan release deletes (a deposed leader's late create for
    /// a claim since gone): this one stays, and is adopted once they go.
    pub others_orphaned: bool,
    /// It holds an address reserved as moved away (it came back with its Cluster, or a move left it behind).
    pub holds_reserved: bool,
    /// It is, for this claim, one a move left behind (`State::left_behind_for`): never adopted.
    pub left_behind: bool,
    /// Its address is still to be written into the pool's moved-away annotation.
    pub moved_away_unwritten: bool,
    /// What it holds is not an address the pool's spec allocates (the pool was edited while it was being created).
    pub out_of_range: bool,
    /// What it holds in the pool is an uncertain create's: the create failed without saying whether it happened.
    pub holds_unconfirmed: bool,
    /// Its entry is still to be written into the pool's moved-away annotation, which has no room for it.
    pub moved_away_no_room: bool,
    /// Who serves the claim, given its pool's shard (`--watch-filter`).
    pub served: Served,
    /// The digest of the Ready state we last wrote for it, and its resourceVersion that write was based on.
    pub status_written: Option<(u64, crate::compact::ResourceVersion)>,
}

/// What a pool's reconcile decides on, read from the index in one step ([`super::Index::pool_view`]).
#[derive(Clone, Debug)]
pub enum PoolView {
    /// The pool is being deleted: whether an IPAddress still references it, or a create of one is uncertain (its
    /// finalizer waits for neither; reservations go with it).
    Deleting { pool: Arc<Pool>, in_use: bool },
    /// The pool serves: what its status says.
    Serving { pool: Arc<Pool>, status: PoolStatusView },
}

impl PoolView {
    /// The pool as its watch shows it.
    pub fn pool(&self) -> &Arc<Pool> {
        match self {
            PoolView::Deleting { pool, .. } | PoolView::Serving { pool, .. } => pool,
        }
    }
}

/// A pool's status as the index says it: the same for every manager that watches the pool (nothing only this one
/// knows of: an IPAddress in flight, or a record of ours a relist did not show).
#[derive(Clone, Debug, Default)]
pub struct PoolStatusView {
    /// The D4 counts of its IPAddresses, reservations and pins.
    pub counts: PoolCounts,
    /// Why its spec is invalid, if it is.
    pub spec_error: Option<String>,
    /// The addresses more than one IPAddress holds.
    pub duplicates: Vec<Duplicate>,
    /// How many addresses the moved-away annotation reserves.
    pub reserved: usize,
    /// Up to the number asked for of the IPAddresses holding an address its spec no longer allocates.
    pub out_of_range: Vec<(ObjectKey, Held)>,
    /// The addresses more than one IPAddress holds as this manager knows them (the metric, which is its own).
    pub duplicated_here: usize,
    /// How many addresses each Cluster holds, for a pool with a quota (docs/compatibility.md D21).
    pub cluster_usage: Option<crate::api::v1alpha2::ClusterUsage>,
}

/// Who serves a claim: the manager of its pool's shard (the pool's `cluster.x-k8s.io/watch-filter` label; a pool
/// without one is any manager's, as in the Go provider).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Served {
    /// This manager (or the pool is not known, and the claim is labelled for no other shard).
    Here,
    /// The manager of the pool's shard, which watches this claim too (or, while the pool is not known, the manager
    /// of the claim's shard): it is left alone, but for the release of a claim of a pool gone.
    Elsewhere,
    /// No manager: the pool's shard's manager does not watch the claim (its label differs). Said in the claim's
    /// status by whoever sees it, in the same words.
    Nowhere { pool_shard: Arc<str>, claim_shard: Option<Arc<str>> },
}

/// What the orphan release decides on for an IPAddress whose claim is gone, read in one step.
#[derive(Clone, Debug, Default)]
pub struct OrphanView {
    /// The index's record of it now, when it was made for a claim.
    pub record: Option<AddressRecord>,
    /// Its pool as the index knows it (its shard, its UID, its reuse grace period).
    pub pool: Option<Arc<Pool>>,
    /// Its Cluster's pause keeps it (`State::keeps_orphan`).
    pub kept: bool,
    /// A pause of its Cluster, read live, would keep it (`State::pause_may_keep`).
    pub pause_may_keep: bool,
    /// Another IPAddress of its address is a live bound claim's.
    pub duplicates_a_bound_one: bool,
    /// The entry of its address still waits to be written into its pool's moved-away annotation.
    pub moved_away_unwritten: bool,
    /// Another manager's to release (`State::another_managers`).
    pub another_managers: bool,
}

/// What a claim worker's run starts from, read in one step: what the index is unsure of about the name, and the
/// claim as cached. Taking it notes that the claim waits for an address (since when), or that it waits no more.
#[derive(Clone, Debug, Default)]
pub struct ClaimRun {
    /// A record of ours of the name that a relist did not show (`AddressRecord::doubtful`): read before anything is
    /// decided on it.
    pub doubtful: Option<AddressRecord>,
    /// The pool of a hold that an uncertain create of the name left, whose claim is gone (`State::orphaned_hold`).
    pub orphaned_hold: Option<PoolKey>,
    /// The claim; `None` when it is deleted.
    pub claim: Option<Arc<Claim>>,
    /// Its view, when it names a pool of our kinds.
    pub view: Option<ClaimView>,
}

impl ClaimView {
    /// Whether the Ready state `digest` is the one we last wrote for `claim`, and `claim` is not newer than what that
    /// write was based on. Newer, it shows what is stored since: another writer's status (a manager of another shard,
    /// a term before this one's answer) is not hidden by our digest (seed 400222993).
    pub fn already_written(&self, claim: &Claim, digest: u64) -> bool {
        let newer = |before: crate::compact::ResourceVersion| {
            claim.resource_version.is_at_least(before) && claim.resource_version != before
        };
        self.status_written.is_some_and(|(d, before)| d == digest && !newer(before))
    }

    /// A duplicate to withdraw (or whose withdrawal to finish) before the claim is bound to it: every duplicate but
    /// the one the moved-back or restored IPAddress wins.
    pub fn unwanted_duplicate(&self) -> bool {
        self.duplicate.is_some() && !self.moved_one_wins && !self.restored_one_wins && !self.others_orphaned
    }
}

impl State {
    /// The view of the pool `key` (see [`PoolView`]), naming up to `out_of_range_shown` IPAddresses out of range;
    /// `None` when the pool is not known.
    pub fn pool_view(&self, key: &PoolKey, out_of_range_shown: usize) -> Option<PoolView> {
        let pool = self.pools.get(key)?.clone();
        // Whether it is in use is a walk of every IPAddress: only for a pool that waits for none to be left.
        Some(if pool.is_deleting() {
            PoolView::Deleting { in_use: self.pool_in_use(key), pool }
        } else {
            PoolView::Serving { status: self.pool_status(key, out_of_range_shown), pool }
        })
    }

    /// The status of the pool `key` (see [`PoolStatusView`]).
    pub fn pool_status(&self, key: &PoolKey, out_of_range_shown: usize) -> PoolStatusView {
        // The annotation may be large: read once per status.
        let reserved = self.reserved_in_annotation(key);
        let (counts, spec_error) = self.status_counts_with(key, &reserved);
        PoolStatusView {
            counts,
            spec_error,
            duplicates: self.status_duplicates(key),
            reserved: reserved.len(),
            out_of_range: self.out_of_range(key, out_of_range_shown),
            duplicated_here: self.duplicates(key).len(),
            cluster_usage: self.status_cluster_usage(key),
        }
    }

    /// What a run of the claim `key`'s worker starts from (see [`ClaimRun`]).
    pub fn claim_run(&mut self, key: &ObjectKey) -> ClaimRun {
        let claim = self.claim(key);
        if let Some(claim) = &claim {
            if claim.address_ref().is_none() {
                self.first_seen(claim);
            } else {
                self.bound(claim);
            }
        }
        let view = claim.as_deref().and_then(|c| {
            let kind = c.pool_kind?;
            Some(self.claim_view(c, PoolKey::new(kind, &c.key.namespace, &c.pool_name)))
        });
        ClaimRun {
            doubtful: self.address(key).filter(|r| r.doubtful),
            orphaned_hold: self.orphaned_hold(key),
            claim,
            view,
        }
    }

    /// The view of the IPAddress `key` whose claim is gone, judged as the record `judged` (the one the release works
    /// on; by default the index's).
    pub fn orphan_view(&self, key: &ObjectKey, judged: Option<&AddressRecord>) -> OrphanView {
        let record = self.address(key).filter(AddressRecord::made_for_a_claim);
        let Some(judged) = judged.or(record.as_ref()) else { return OrphanView::default() };
        OrphanView {
            pool: self.pool(&judged.pool),
            kept: self.keeps_orphan(key, judged),
            pause_may_keep: self.pause_may_keep(key, judged),
            duplicates_a_bound_one: self.duplicates_a_bound_one(&judged.pool, key),
            moved_away_unwritten: self.moved_away_unwritten(&judged.pool, key),
            another_managers: self.another_managers(key, judged),
            record: record.clone(),
        }
    }

    /// Who serves `claim`, whose pool is `pool_key` (see [`Served`]). While the pool is not known (not made yet, or
    /// gone), a claim labelled for another shard is that shard's manager's: its pool may have been that shard's
    /// (soak seed 6962: a manager without `--watch-filter`, no longer seeing a deleted pool's label, took such a claim
    /// for its own and bound it to the IPAddress that shard's manager was letting go). The claim's label says it
    /// alike to every manager, also after a restart; the pool's, once gone, would not.
    fn who_serves(&self, claim: &Claim, pool_key: PoolKey) -> Served {
        let Some(pool) = self.pools.get(&pool_key) else {
            return match claim.watch_filter.as_deref() {
                Some(label) if Some(label) != self.shard.as_deref() => Served::Elsewhere,
                _ => Served::Here,
            };
        };
        let Some(pool_shard) = pool.shard() else { return Served::Here };
        if Some(pool_shard) == self.shard.as_deref() {
            return Served::Here;
        }
        if claim.watch_filter.as_deref() == Some(pool_shard) {
            return Served::Elsewhere;
        }
        Served::Nowhere { pool_shard: crate::compact::intern(pool_shard), claim_shard: claim.watch_filter.clone() }
    }

    /// Whether `claim` is bound to the IPAddress `key` as its condition tells (`told_of` in the claim's adopt): a claim
    /// bound to another address (a deposed leader's late create under its name, its own deleted by a person) withdraws
    /// this one (test `the_ipaddress_that_came_back_waits_only_for_a_holder_of_ours_whose_binding_may_be_in_flight`).
    /// Its own hold: in a prefix pool, a duplicate's may be a wider prefix overlapping it (test
    /// `in_a_prefix_pool_a_claim_bound_to_its_own_prefix_is_bound_as_told`).
    pub(super) fn bound_as_told(&self, pool_key: &PoolKey, key: &ObjectKey, claim: &Claim) -> bool {
        let holds = self.held_by(pool_key, key).and_then(Held::address);
        claim.address_ref() == Some(&*key.name) && claim.bound_address.is_none_or(|b| holds.is_none_or(|a| a == b))
    }

    /// The view of `claim`, whose pool is `pool_key`.
    pub fn claim_view(&self, claim: &Claim, pool_key: PoolKey) -> ClaimView {
        let key = &claim.key;
        let duplicate = self.duplicate_of(&pool_key, key);
        let moved_one_wins = duplicate.as_ref().is_some_and(|d| {
            self.is_moved_holder(&pool_key, key)
                && !d.holders.iter().any(|other| {
                    other != key && self.claim(other).is_some_and(|c| self.bound_as_told(&pool_key, other, &c))
                })
        });
        let moved_one_waits = moved_one_wins
            && duplicate.as_ref().is_some_and(|d| {
                d.holders.iter().any(|other| {
                    // Not one an entry names too (two came back with one address, an annotation edited by hand): it
                    // waits for this one, and both waiting would be stuck (test
                    // `the_ipaddress_that_came_back_waits_only_for_a_holder_of_ours_whose_binding_may_be_in_flight`).
                    other != key
                        && !self.is_moved_holder(&pool_key, other)
                        && self.claim(other).is_some_and(|c| {
                            self.addresses.get(other).is_some_and(|r| r.claim_owner == Some(c.uid.uid()))
                        })
                })
            });
        let restored_one_wins = claim.restored
            // Owned by the backup's claim, or by none once the garbage collector took that reference off.
            && self.addresses.get(key).is_some_and(|r| r.claim_owner != Some(claim.uid.uid()) && !r.moving_away)
            && duplicate.as_ref().is_some_and(|d| {
                d.holders.iter().filter(|o| *o != key).all(|other| {
                    self.claim(other).is_some_and(|c| {
                        c.address_ref() != Some(&*other.name)
                            && self.addresses.get(other).is_some_and(|r| r.claim_owner == Some(c.uid.uid()))
                    })
                })
            });
        let others_orphaned = duplicate
            .as_ref()
            .is_some_and(|d| d.holders.iter().filter(|o| *o != key).all(|other| self.released_as_orphan(other)));
        ClaimView {
            others_orphaned,
            pool: self.pool(&pool_key),
            cluster_paused: claim.cluster().and_then(|cluster| self.cluster_paused(&key.namespace, cluster)),
            record: self.address(key),
            held: self.held_by(&pool_key, key),
            duplicate,
            moved_one_wins,
            moved_one_waits,
            restored_one_wins,
            holds_reserved: self.holds_reserved(&pool_key, key),
            left_behind: self.addresses.get(key).is_some_and(|r| self.left_behind_for(r, key, claim)),
            moved_away_unwritten: self.moved_away_unwritten(&pool_key, key),
            holds_unconfirmed: self.holds_unconfirmed(&pool_key, key),
            moved_away_no_room: self.moved_away_no_room(&pool_key, key),
            served: self.who_serves(claim, pool_key.clone()),
            status_written: self.status_written(claim),
            out_of_range: self
                .held_by(&pool_key, key)
                .is_some_and(|held| self.allocates(&pool_key, held) == Some(false)),
            pool_key,
        }
    }
}
