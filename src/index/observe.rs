//! What the controllers found out from the API server, recorded in one step ([`super::Index::observe`]): the one
//! author of what a live read, or the answer to a write, means for the index's records and holds. The controllers
//! decide what to read and write and what comes next; what the answer means is decided here, once.

use std::collections::BTreeMap;
use std::time::Duration;

use super::{AddressRecord, ClaimView, Held, ObjectKey, PoolKey, State};
use crate::capi::{Claim, IpAddress};
use crate::compact::{ResourceVersion, Uid};

/// One thing the API server told a controller.
#[derive(Clone, Copy, Debug)]
pub enum Observed<'a> {
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
    /// The claim's status is written with the Ready state of digest `digest` (`State::status_to_write`).
    StatusWritten { claim: &'a Claim, digest: u64 },
    /// The Cluster `key` read live, paused at `revision`, perhaps before its watch shows it.
    ClusterPaused { key: &'a ObjectKey, revision: ResourceVersion },
    /// The pending changes `changes` of `pool`'s moved-away annotation landed, by a write that returned `revision`;
    /// or the pool was read gone (`None`).
    MovedAwayWritten { pool: &'a PoolKey, changes: &'a BTreeMap<String, bool>, revision: Option<ResourceVersion> },
    /// The pending additions `dropped` of `pool` were queued for a pool object the API server no longer has, their
    /// IPAddresses gone too.
    MovedAwayDropped { pool: &'a PoolKey, dropped: &'a [String] },
    /// The pool's annotation, read live, has no room for the pending additions `left_out`.
    MovedAwayLeftOut { pool: &'a PoolKey, left_out: &'a [String] },
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
}

impl State {
    /// Records `observed` (see [`Observed`]).
    pub fn observe(&mut self, observed: Observed) -> Observation {
        match observed {
            Observed::Created { claim, object } => {
                let (record, latency) = self.address_created(claim, object);
                Observation { record, latency }
            }
            Observed::Answered { key, object } => {
                Observation { record: self.remember_address(key, object), latency: None }
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
                Observation { record, latency: None }
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
            Observed::StatusWritten { claim, digest } => {
                self.remember_written(claim, Some(digest));
                Observation::default()
            }
            Observed::ClusterPaused { key, revision } => {
                self.cluster_read_paused(key.clone(), revision);
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
