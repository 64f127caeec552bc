//! What the controllers found out from the API server, or are about to ask of it, recorded in one step
//! ([`super::Index::observe`]): the one author of what a live read, or the answer to a write, means for the index's
//! records and holds. The controllers decide what to read and write and what comes next; what the answer means is
//! decided here, once.

use std::collections::BTreeMap;
use std::time::Duration;

use super::{AddressRecord, AllocateError, Assigned, ClaimView, Held, ObjectKey, PoolKey, State, Wait};
use crate::capi::{Claim, IpAddress};
use crate::compact::{ResourceVersion, Uid};

/// One thing the API server told a controller, or one write a controller is about to send whose answer the index must
/// be ready for.
#[derive(Clone, Copy, Debug)]
pub enum Observed<'a> {
    /// Nothing new: the claim's view only (`observe_then_view`).
    NothingNew,
    /// Every watch has listed: bound claims hold their addresses again, and allocation may start.
    CachesSynced,
    /// `claim`'s IPAddress in `pool` is about to be created: an address is held for it first, under the lock
    /// ([`Observation::assigned`], `State::allocate_for`; `previous` is the address a bound claim's IPAddress held).
    Allocating { claim: &'a Claim, pool: &'a PoolKey, previous: Option<&'a str> },
    /// Our create of `claim`'s IPAddress answered with `object`.
    Created { claim: &'a Claim, object: &'a IpAddress },
    /// The IPAddress `key` as a read or a write of it answered (a repair, a mark, a DELETE that left it being deleted).
    Answered { key: &'a ObjectKey, object: &'a IpAddress },
    /// The IPAddress of `key`'s name as a live read found it (`None`: there is none), read to learn whether our create
    /// of it into `pool`, whose answer was lost or refused, happened; `then` is what follows for the hold if it did
    /// not.
    NameRead { pool: &'a PoolKey, key: &'a ObjectKey, live: Option<&'a IpAddress>, then: IfNotCreated },
    /// The IPAddress `key` whose record a relist left in doubt (its UID `uid`), as a live read found it.
    DoubtRead { key: &'a ObjectKey, uid: Option<Uid>, live: Option<&'a IpAddress> },
    /// Our DELETE of the IPAddress `key` (`uid`) of `pool`, or the removal of our finalizer after it, answered that
    /// it is gone.
    DeletedByUs { key: &'a ObjectKey, pool: &'a PoolKey, uid: Option<&'a str> },
    /// The claim `key` is written bound to the IPAddress of its name, which holds `held` of `pool`.
    BoundTo { pool: &'a PoolKey, key: &'a ObjectKey, held: Held },
    /// The claim `key` of `pool` waits (or, [`Wait::Nothing`], waits no more) for what `wait` names.
    Waits { pool: &'a PoolKey, key: &'a ObjectKey, wait: Wait },
    /// The claim's release is about to delete its IPAddress: its deletion is for good, not for a move
    /// (`State::claim_deleted_for_good`).
    ClaimDeletedForGood { pool: &'a PoolKey, claim: &'a Claim },
    /// The claim's status is written with the Ready state of digest `digest` (`ClaimView::already_written`).
    StatusWritten { claim: &'a Claim, digest: u64 },
    /// A write of the claim's status failed: it may have been applied, its answer lost, so what was written before is
    /// forgotten (`State::remember_written`).
    StatusWriteFailed { claim: &'a Claim },
    /// Our DELETE of the IPAddress `key` of UID `uid` is about to go (`AddressRecord::deleted_by_us`): its watch event
    /// is never taken for someone else's.
    DeletingOurselves { key: &'a ObjectKey, uid: Uid },
    /// A live read found the claim of the IPAddress `key` (`uid`) labelled for another manager's shard
    /// (`claim_shard`), in a pool without a shard (`State::claim_of_another_manager`).
    ClaimOfAnotherManager { key: &'a ObjectKey, uid: Option<Uid>, claim_shard: Option<&'a str> },
    /// The Cluster `key` as a live read found it, perhaps before its watch shows it
    /// ([`Observation::cluster_paused`]).
    ClusterRead { key: &'a ObjectKey, live: LiveCluster },
    /// The IPAddress `key` of `pool`, left behind by a move, was deleted by an operator before its entry was written:
    /// the reservation is cancelled (`State::moved_away_cancelled`).
    MovedAwayCancelled { pool: &'a PoolKey, key: &'a ObjectKey },
    /// The pending changes `changes` of `pool`'s moved-away annotation landed, by a write that returned `revision`;
    /// or the pool was read gone (`None`).
    MovedAwayWritten { pool: &'a PoolKey, changes: &'a BTreeMap<String, bool>, revision: Option<ResourceVersion> },
    /// The pending additions `dropped` of `pool` were queued for a pool object the API server no longer has, their
    /// IPAddresses gone too.
    MovedAwayDropped { pool: &'a PoolKey, dropped: &'a [String] },
    /// The pool's annotation, read live, has no room for the pending additions `left_out`.
    MovedAwayLeftOut { pool: &'a PoolKey, left_out: &'a [String] },
}

/// A Cluster as a live read found it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LiveCluster {
    /// Paused at this revision.
    Paused(ResourceVersion),
    NotPaused,
    /// Not found: the index's record (its watch's Delete event tells whether it went paused) decides.
    Gone,
}

/// What follows for the hold of a create whose answer was lost or refused, should a read of its name show that it
/// did not happen (the name does not hold our IPAddress of the pool).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IfNotCreated {
    /// The create is sent again: a name that is still free keeps the hold (the retry reuses its address); one that
    /// another object took (of another pool, or another provider's) never will be ours, and the hold goes.
    Retried,
    /// The hold is the address of a bound claim's machine: it stays whatever the name holds.
    KeptForTheMachine,
    /// No create follows now (it was refused, or the claim waits): the hold goes, and the address is free.
    GivenUp,
    /// The claim is gone: the hold goes as [`IfNotCreated::GivenUp`], unless a claim of the name in the pool took it
    /// over (its own reconcile owns the hold then).
    GivenUpForAGoneClaim,
}

/// What an observation recorded.
#[derive(Clone, Debug, Default)]
pub struct Observation {
    /// The record of the IPAddress observed, as the index keeps it now: `None` when there is none, it is not of our
    /// pools, or it is older news than the watch's (deleted since).
    pub record: Option<AddressRecord>,
    /// For [`Observed::Created`]: the claim's allocation latency.
    pub latency: Option<Duration>,
    /// For [`Observed::Allocating`]: the address held for the claim, or why there is none.
    pub assigned: Option<Result<Assigned, AllocateError>>,
    /// For [`Observed::ClusterRead`]: the Cluster is to be taken for paused (read paused, or gone while the index
    /// still holds it).
    pub cluster_paused: bool,
}

impl State {
    /// Records `observed` (see [`Observed`]).
    pub fn observe(&mut self, observed: Observed) -> Observation {
        match observed {
            Observed::NothingNew => Observation::default(),
            Observed::CachesSynced => {
                self.hold_bound_addresses();
                tracing::info!(
                    claims = self.claim_count(),
                    addresses = self.address_count(),
                    "caches synced; allocating"
                );
                Observation::default()
            }
            Observed::Allocating { claim, pool, previous } => {
                Observation { assigned: Some(self.allocate_for(claim, pool, previous)), ..Observation::default() }
            }
            Observed::Created { claim, object } => {
                let (record, latency) = self.address_created(claim, object);
                Observation { record, latency, ..Observation::default() }
            }
            Observed::Answered { key, object } => {
                Observation { record: self.remember_address(key, object), ..Observation::default() }
            }
            Observed::NameRead { pool, key, live, then } => {
                let record = live.and_then(|object| self.remember_address(key, object));
                match then {
                    // What the gone claim held goes whatever the name holds (our IPAddress of the pool, recorded, holds
                    // a confirmed hold the orphan release ends), the address set aside for its machine too: kept while
                    // a late one lived, nothing looked at the name again once that was released (test
                    // `the_address_set_aside_goes_with_its_claim_though_the_late_object_of_its_name_lives`).
                    IfNotCreated::GivenUpForAGoneClaim => self.give_up_gone_claims_hold(pool, key),
                    _ if !still_held(pool, live, record.as_ref(), then) => self.give_up_uncertain_create(pool, key),
                    _ => {}
                }
                Observation { record, ..Observation::default() }
            }
            Observed::DoubtRead { key, uid, live } => {
                self.doubt_resolved(key, uid, live);
                Observation::default()
            }
            Observed::DeletedByUs { key, pool, uid } => {
                self.address_deleted_by_us(key, pool, uid);
                Observation::default()
            }
            Observed::BoundTo { pool, key, held } => {
                self.claim_back(pool, key, held);
                Observation::default()
            }
            Observed::Waits { pool, key, wait } => {
                self.claim_waits(pool, key, wait);
                Observation::default()
            }
            Observed::ClaimDeletedForGood { pool, claim } => {
                self.claim_deleted_for_good(pool, claim);
                Observation::default()
            }
            Observed::StatusWriteFailed { claim } => {
                self.remember_written(claim, None);
                Observation::default()
            }
            Observed::StatusWritten { claim, digest } => {
                self.remember_written(claim, Some(digest));
                Observation::default()
            }
            Observed::DeletingOurselves { key, uid } => {
                self.deleting_ourselves(key, uid);
                Observation::default()
            }
            Observed::ClaimOfAnotherManager { key, uid, claim_shard } => {
                self.claim_of_another_manager(key, uid, claim_shard);
                Observation::default()
            }
            Observed::ClusterRead { key, live } => {
                let cluster_paused = match live {
                    LiveCluster::Paused(revision) => {
                        self.cluster_read_paused(key.clone(), revision);
                        true
                    }
                    LiveCluster::NotPaused => false,
                    LiveCluster::Gone => self.cluster_paused(&key.namespace, &key.name).is_some(),
                };
                Observation { cluster_paused, ..Observation::default() }
            }
            Observed::MovedAwayCancelled { pool, key } => {
                self.moved_away_cancelled(pool, key);
                Observation::default()
            }
            Observed::MovedAwayWritten { pool, changes, revision } => {
                self.moved_away_written(pool, changes, revision);
                Observation::default()
            }
            Observed::MovedAwayDropped { pool, dropped } => {
                self.moved_away_dropped(pool, dropped);
                Observation::default()
            }
            Observed::MovedAwayLeftOut { pool, left_out } => {
                self.moved_away_left_out(pool, left_out.iter().cloned());
                Observation::default()
            }
        }
    }

    /// Records `observed`, and the view of `claim` (of `pool_key`) after it, in one step: what the claim decides on
    /// next includes what was just found.
    pub fn observe_then_view(
        &mut self,
        claim: &Claim,
        pool_key: PoolKey,
        observed: Observed,
    ) -> (Observation, ClaimView) {
        let observation = self.observe(observed);
        (observation, self.claim_view(claim, pool_key))
    }
}

/// Whether the hold of a create into `pool` stays after a read of its name found `live` (recorded as `record`).
fn still_held(pool: &PoolKey, live: Option<&IpAddress>, record: Option<&AddressRecord>, then: IfNotCreated) -> bool {
    match then {
        IfNotCreated::KeptForTheMachine => true,
        // A retried create meets what the name holds: our IPAddress of the pool (perhaps one we deleted a moment ago,
        // which the next attempt finds gone) keeps it, as a free name does.
        IfNotCreated::Retried => live.is_none_or(|l| AddressRecord::of(l).is_some_and(|r| *r.pool == *pool)),
        // Only our IPAddress of the pool, recorded, is the create that happened: one of another of our pools took
        // the name (our create never could), and one we deleted or that is older news is gone.
        IfNotCreated::GivenUp | IfNotCreated::GivenUpForAGoneClaim => record.is_some_and(|r| *r.pool == *pool),
    }
}
