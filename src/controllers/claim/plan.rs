//! A claim's reconcile, decided in one pure step: [`plan`] looks at the claim, its view of the index and what this run
//! has read and done so far ([`Facts`]), and names the one thing to do next ([`Step`]). The executor
//! (`super::reconcile_claim`) does it, records what it found in the index, takes the next view and asks again, until a
//! step ends the run ([`End`]). No I/O and no context here: every rule of the reconcile reads as a row of a table.
//!
//! Guarantees: every step that does not end the run is taken at most once per run, or only after one that is (a live
//! read of the claim stands until the next write), so a run ends in at most [`MAX_STEPS`] steps; the IPAddress a
//! claim is bound to (its condition names the address it holds) is never let go or released while the claim is not
//! deleted.

use std::net::IpAddr;
use std::time::Duration;

use jiff::Timestamp;

use crate::api::{MOVED_AWAY_ANNOTATION, Pool, WATCH_FILTER_LABEL};
use crate::capi::{Claim, IpAddress};
use crate::compact::Uid;
use crate::controllers::ipaddress::is_ours_for;
use crate::controllers::status::ClaimReason;
use crate::index::{AddressRecord, ClaimView, Held, Served};
use crate::runtime::retry::{Next, RECHECK};

/// The most steps a run takes, with room to spare: each once-only step (the finalizer, a settled create, a binding
/// recorded) with a live read before it, and the end. More is a bug in [`plan`] (its property test runs every view
/// it generates to the end within it); the executor then looks again later.
pub const MAX_STEPS: usize = 10;

/// What a run knows besides the claim and its view.
#[derive(Clone, Copy, Debug)]
pub struct Facts<'a> {
    /// The claim as a live read found it since this run's last write (`Some(None)`: gone, or another claim of its
    /// name); `None`: not read.
    pub live: Option<Option<&'a Claim>>,
    /// This run found out already whether an uncertain create of the claim's IPAddress happened.
    pub settled: bool,
    /// This run recorded already that the claim is bound again to a reserved address.
    pub bound_back: bool,
    pub now: Timestamp,
    /// `--restore-wait`.
    pub restore_wait: Duration,
    /// `--orphan-release-delay`.
    pub orphan_release_delay: Duration,
}

/// What a run does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Read the claim live, then plan again.
    ReadClaim,
    /// Add our finalizer (before any address exists, so that a deleted claim never leaves an IPAddress behind), then
    /// plan again on the claim as that write returned it.
    AddFinalizer,
    /// Find out whether an uncertain create of the claim's IPAddress happened (a live read of its name; the hold goes
    /// if it did not), then end with `then`, or plan again.
    SettleUncertainCreate { then: Option<Next> },
    /// Record that the claim is bound again to the IPAddress of its name, holding the reserved `Held`, then plan again.
    BoundBack(Held),
    /// The last step of the run.
    End(End),
}

/// The step that ends a run: at most one write of the claim's status, or one IPAddress written or deleted first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum End {
    /// Nothing is written; the claim is looked at again as `Next` says.
    Finish(Next),
    /// The claim's Ready condition says `reason` and `message` (binding it to the IPAddress of its name if `binds`),
    /// then it is looked at again as `then` says.
    Say { reason: ClaimReason, message: String, binds: bool, then: Next },
    /// The IPAddress of the claim's name (the object `judged`) goes before the claim is bound to it.
    LetGo { judged: Option<Uid>, why: LetGo },
    /// The IPAddress of the claim's name, left behind by a move and its address recorded as moved away, goes once the
    /// API server shows its pool as the index knows it.
    LetGoLeftBehind { judged: Option<Uid> },
    /// An IPAddress of the claim's name belongs to `owner`, not to the claim's pool.
    BelongsElsewhere { owner: String },
    /// The claim is bound to the IPAddress of its name, after its owners, finalizer and label are put back if
    /// `repair`.
    Adopt { repair: bool },
    /// The claim is deleted: its IPAddress, read live, is released and then its finalizer.
    Release,
    /// An address is held for the claim (`previous`, the one its condition names, first while free) and its IPAddress
    /// created.
    Allocate { previous: Option<IpAddr> },
}

/// Why an IPAddress of the claim's name is let go before the claim is bound to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LetGo {
    /// Another IPAddress of the pool holds its address: it can only come from a write that reached the API server
    /// late, after its leader's term ended (`crate::leader`). Withdrawn, the claim gets a free address. A bound claim's
    /// address is never withdrawn: a machine may use it already.
    Duplicate,
    /// Being deleted already (a delete of ours that did not finish, one by hand).
    Deleting,
    /// Left behind by the move of an earlier claim of its name, its address recorded as moved away
    /// (`End::LetGoLeftBehind`).
    LeftBehind,
    /// Just made, for an address its pool stopped allocating while the create was in flight (an edit), or in a pool
    /// another shard's manager serves now.
    NotAllocated,
}

/// A step, and whether the claim waits for an address no more once the run ends (it is bound, paused, deleted, or
/// its name is taken).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub step: Step,
    pub stops_waiting: bool,
}

impl Plan {
    fn then(step: Step) -> Self {
        Plan { step, stops_waiting: false }
    }

    fn end(end: End) -> Self {
        Plan::then(Step::End(end))
    }

    fn waiting_no_more(step: Step) -> Self {
        Plan { step, stops_waiting: true }
    }
}

/// What a claim's pause state, Cluster and pool allow before anything is written (docs/compatibility.md D8, D9).
#[derive(Debug, PartialEq, Eq)]
pub enum Gate {
    /// Paused by its own annotation, or its pool is paused: nothing happens.
    Paused,
    /// Its Cluster does not exist yet, or is paused: it says why while it has no address.
    WaitForCluster(ClaimReason, String),
    /// Being deleted: release.
    Release,
    /// Bind it.
    Bind,
}

/// Pause (docs/compatibility.md D8), checked the same way on every event: the claim, its Cluster, its pool.
pub fn gate(claim: &Claim, view: &ClaimView) -> Gate {
    let namespace = &*claim.key.namespace;
    let deleting = claim.deletion_timestamp.is_some();
    if claim.paused {
        return Gate::Paused;
    }
    if let Some(cluster) = claim.cluster() {
        // Velero restores Clusters last: wait, the Cluster's creation (or unpause) wakes this claim.
        match view.cluster_paused {
            None if !deleting => {
                let message = format!("waiting for Cluster {namespace}/{cluster} to exist");
                return Gate::WaitForCluster(ClaimReason::WaitingForCluster, message);
            }
            Some(true) => {
                let message =
                    format!("Cluster {namespace}/{cluster} is paused; allocation resumes when it is unpaused");
                return Gate::WaitForCluster(ClaimReason::ClusterPaused, message);
            }
            _ => {}
        }
    }
    if view.pool.as_ref().is_some_and(|p| p.is_paused()) {
        return Gate::Paused;
    }
    if deleting { Gate::Release } else { Gate::Bind }
}

/// The next step of `claim`'s run, on `view` and `facts`.
pub fn plan(claim: &Claim, view: &ClaimView, facts: &Facts) -> Plan {
    match &view.served {
        Served::Here => {}
        // A claim of a pool gone: whoever sees its deletion releases it, whether or not its shard's manager runs.
        Served::Elsewhere if claim.deletion_timestamp.is_some() && view.pool.is_none() => {}
        // Its pool's shard's manager serves it (docs/operations.md, sharded managers).
        Served::Elsewhere => return Plan::end(End::Finish(Next::AwaitChange)),
        Served::Nowhere { .. } if claim.deletion_timestamp.is_some() => {}
        Served::Nowhere { .. } if claim.address_ref().is_some() => return Plan::end(End::Finish(Next::AwaitChange)),
        Served::Nowhere { pool_shard, claim_shard } => {
            // The same words from every manager that sees it, so that two never rewrite each other's.
            let labelled = claim_shard.as_deref().map_or_else(|| "no such label".to_owned(), |s| format!("{s:?}"));
            let message = format!(
                "{} belongs to the manager started with --watch-filter={pool_shard} (the pool's label \
                 {WATCH_FILTER_LABEL}), which does not watch this claim (its label: {labelled}): label the claim \
                 {WATCH_FILTER_LABEL}={pool_shard}, or use a pool of its own manager",
                view.pool_key
            );
            return Plan::end(say(ClaimReason::PoolNotReady, message, Next::AwaitChange));
        }
    }
    let gate = gate(claim, view);
    if matches!(gate, Gate::Paused | Gate::WaitForCluster(..))
        && !told_of(claim, view.held)
        && view.unwanted_duplicate()
        && let Some(record) = view.record.as_ref().filter(|r| *r.pool == view.pool_key)
    {
        // Pause holds our decisions, not the undoing of a write that landed too late (a fenced leader's): an
        // IPAddress no claim is bound to, holding an address another holds, goes even now (a move would copy it).
        // Withdrawn already (a delete whose answer was lost), its deletion is finished: no one else finishes it
        // while a claim of its name exists, and the claim may wait for its Cluster for good.
        return Plan::end(let_go_duplicate(record));
    }
    match gate {
        Gate::Paused => Plan::waiting_no_more(Step::End(End::Finish(Next::AwaitChange))),
        Gate::WaitForCluster(reason, message) => {
            Plan::waiting_no_more(wait_for_cluster(claim, view, facts, reason, message))
        }
        Gate::Release => Plan::waiting_no_more(Step::End(release(claim, view, facts))),
        Gate::Bind => bind(claim, view, facts),
    }
}

fn say(reason: ClaimReason, message: String, then: Next) -> End {
    End::Say { reason, message, binds: false, then }
}

/// The duplicate `record` is withdrawn, or its withdrawal finished.
fn let_go_duplicate(record: &AddressRecord) -> End {
    let why = if record.deleting { LetGo::Deleting } else { LetGo::Duplicate };
    End::LetGo { judged: record.uid, why }
}

/// The claim waits for its Cluster (to exist, or to be unpaused).
fn wait_for_cluster(claim: &Claim, view: &ClaimView, facts: &Facts, reason: ClaimReason, message: String) -> Step {
    let key = &claim.key;
    let unbound = claim.address_ref().is_none();
    let held_address = view.held.and_then(Held::address);
    if !facts.settled && view.holds_unconfirmed {
        // A bound claim's hold without an IPAddress (deleted from under it) is its machine's address: it stays, but
        // for a pool that goes (nothing is made again in it, and the hold must not keep it).
        let pool_stays = view.pool.as_ref().is_some_and(|p| !p.is_deleting());
        if !pool_stays {
            return Step::SettleUncertainCreate { then: None };
        }
        // The cache may show unbound a claim that our own status write bound (its watch relisting past it), whose
        // hold was kept when a person deleted its IPAddress: read live before it goes, or the address its machine
        // uses, here or after a move, is free (seed 430083652).
        // A bound claim made again with another address (its own taken meanwhile) and paused before that create was
        // confirmed: the hold is no machine's address (as for a refused create's), and is found out now, or a claim
        // waiting on the pool starves for as long as the pause lasts (seed 480178155).
        let bound_to_another = !unbound && claim.bound_address.is_some_and(|b| held_address != Some(b));
        if unbound || bound_to_another {
            let Some(live) = facts.live else { return Step::ReadClaim };
            if (unbound && lives_unbound(claim, live))
                || (bound_to_another && lives_bound_to_another(live, held_address))
            {
                return Step::SettleUncertainCreate { then: None };
            }
        }
    }
    // Bound again to the address that an entry of the pool's moved-away annotation reserves for it (it came back with
    // its Cluster), and paused again before the entry's removal was written (a leader change lost it): the entry goes
    // now, as adopting takes it out, not when the pause ends (seed 450041258). Read live: a move away under way
    // (clusterctl pauses first) keeps it.
    if !facts.bound_back
        && let Some(held) = view.held
        && view.holds_reserved
        && view.record.as_ref().is_some_and(|r| *r.pool == view.pool_key)
        && claim.address_ref() == Some(&*key.name)
        && told_of(claim, view.held)
        && !claim.moving_away
        && claim.deletion_timestamp.is_none()
    {
        let Some(live) = facts.live else { return Step::ReadClaim };
        if lives_bound_staying(live) {
            return Step::BoundBack(held);
        }
    }
    if claim.deletion_timestamp.is_some() {
        return Step::End(End::Finish(Next::AwaitChange));
    }
    if unbound {
        return Step::End(say(reason, message, Next::AwaitChange));
    }
    if says_not_ready_while_held(claim, view) {
        // A bound claim keeps its Ready as it is (nothing changes for it), but for a failure it no longer has: its
        // IPAddress made again, that status write lost, and a leader change (seed 630015735).
        let message = allocated_message(view);
        return Step::End(End::Say { reason: ClaimReason::Allocated, message, binds: true, then: Next::AwaitChange });
    }
    Step::End(End::Finish(Next::AwaitChange))
}

/// Deletion: the grace period, then the IPAddress (finalizer off, deleted), then the claim's finalizer.
fn release(claim: &Claim, view: &ClaimView, facts: &Facts) -> End {
    // Released already, the claim may still be held by another finalizer (deleted in the foreground, the garbage
    // collector's waits for its dependents): an IPAddress of its name that appeared since (a deposed leader's late
    // create) is released too, or the two would wait for each other for good (soak seed 100048737).
    if claim.release_finalizer_index.is_none() && view.record.is_none() {
        return End::Finish(Next::AwaitChange);
    }
    // addressReuseGracePeriodSeconds (IP pools): hold the address, unless the pool is gone or going.
    if let Some(wait) = view.pool.as_ref().and_then(|pool| reuse_grace_remaining(claim, pool, facts.now)) {
        return End::Finish(Next::After(wait + Duration::from_millis(50)));
    }
    End::Release
}

/// The claim is to be bound: to the IPAddress of its name, or to a new one.
fn bind(claim: &Claim, view: &ClaimView, facts: &Facts) -> Plan {
    if claim.release_finalizer_index.is_none() {
        return Plan::then(Step::AddFinalizer);
    }
    if let Some(record) = &view.record {
        let end = adoption(claim, view, record, facts);
        // An IPAddress of its name another pool's: the claim waits for that name (`Wait::ItsName`) instead.
        let stops_waiting = !matches!(end, End::BelongsElsewhere { .. });
        return Plan { step: Step::End(end), stops_waiting };
    }
    let pool_key = &view.pool_key;
    let Some(pool) = &view.pool else {
        return Plan::then(settle_then_say(view, facts, format!("{pool_key} not found")));
    };
    if pool.is_deleting() {
        return Plan::then(settle_then_say(view, facts, format!("{pool_key} is being deleted")));
    }
    if let Some(wait) = restore_wait_remaining(claim, view.held.is_some(), facts.now, facts.restore_wait) {
        // Velero restores IPAddressClaims before IPAddresses: allocated now, the claim's machine would lose its
        // address to the restore's AlreadyExists. Its IPAddress, when it comes, wakes it.
        let message = format!(
            "restored by Velero: waiting up to {} s after its creation for its IPAddress to be restored before \
             allocating a new address (--restore-wait)",
            facts.restore_wait.as_secs()
        );
        return Plan::end(say(ClaimReason::WaitingForIPAddress, message, Next::After(wait)));
    }
    // Not bound, and its uncertain create was of an address the pool no longer allocates (an edit meanwhile): found
    // out first, so that the claim gets an address the pool allocates if that create did not happen. A bound claim's
    // hold is its machine's address, and stays (the pool says it is out of range); so is the hold of one the cache
    // shows unbound but our status write bound to it.
    if claim.address_ref().is_none() && view.out_of_range && view.holds_unconfirmed && !facts.settled {
        let bound_meanwhile = match view.held.and_then(Held::address) {
            None => false,
            Some(address) => {
                let Some(live) = facts.live else { return Plan::then(Step::ReadClaim) };
                bound_meanwhile_to(live, address)
            }
        };
        if !bound_meanwhile {
            return Plan::then(Step::SettleUncertainCreate { then: Some(Next::After(Duration::ZERO)) });
        }
    }
    // Bound, and its IPAddress gone (a person deleted it): made again only for a claim that still lives bound, read
    // live. The cache may still show one that is gone (a watch stalled by an API server restart), and a claim gone
    // with its Cluster's move uses its address over there.
    if claim.address_ref().is_some() {
        let Some(live) = facts.live else { return Plan::then(Step::ReadClaim) };
        if !lives_bound(live) {
            return Plan::end(End::Finish(Next::AwaitChange));
        }
    }
    // Bound, and its IPAddress gone with what this process knew of it (deleted from under it before a restart or a
    // leader change): the address its condition names is the one its machine uses, and it gets it back while free.
    Plan::end(End::Allocate { previous: claim.bound_address.filter(|_| view.held.is_none()) })
}

/// A live claim that will not create its IPAddress now (its pool is going or gone) finds out whether an earlier create
/// that failed uncertainly happened: if not, the hold goes, so that the address is free and a pool being deleted is
/// not held up by it. Then it says why it waits.
fn settle_then_say(view: &ClaimView, facts: &Facts, message: String) -> Step {
    if view.holds_unconfirmed && !facts.settled {
        return Step::SettleUncertainCreate { then: None };
    }
    Step::End(say(ClaimReason::PoolNotReady, message, Next::AwaitChange))
}

/// Adopting the IPAddress of the claim's name (`record`), or letting go of one that is not to be adopted (a duplicate,
/// one being deleted, one of another pool); whichever it is, the claim waits for an address of its pool no more. Its spec is never touched (it is immutable); missing finalizers, owner
/// references and the cluster-name label are put back (docs/compatibility.md D7).
pub fn adoption(claim: &Claim, view: &ClaimView, record: &AddressRecord, facts: &Facts) -> End {
    let key = &claim.key;
    let pool_key = &view.pool_key;
    if *record.pool != *pool_key {
        return End::BelongsElsewhere { owner: record.pool.to_string() };
    }
    let unbound = claim.address_ref().is_none();
    // A duplicate that this claim was never told about (no addressRef yet) is withdrawn rather than handed out: it comes
    // from a write that reached the API server late, after its leader's term ended (`crate::leader`), unless it is the
    // one that moved away and came back, or was restored with its claim (`ClaimView::unwanted_duplicate`).
    if !told_of(claim, view.held) && view.unwanted_duplicate() {
        // Withdrawn already, or an orphan whose release did not finish: no one else finishes it while a claim of its
        // name exists (the orphan release leaves those alone), so this claim does.
        return let_go_duplicate(record);
    }
    // Only an unbound claim: a bound one's IPAddress holding another address than the one it was bound to is a late
    // create, let go below (mutation `late-adopted-by-bound`: waiting instead, the address of its machine was handed
    // out meanwhile).
    if unbound && view.duplicate.is_some() && view.others_orphaned {
        // Its address is held too by IPAddresses whose claims are gone (a deposed leader's late create for a claim
        // since deleted), which the orphan release deletes. This one may be its machine's (restored with its claim,
        // whose status Velero does not restore: seed 440537881): neither withdrawn nor bound beside them; adopted once
        // they go (their deletion wakes the claim).
        let message = format!(
            "IPAddress {key} holds an address that IPAddresses of claims gone hold too; it is adopted once they are \
             released (after --orphan-release-delay, or the pool's addressReuseGracePeriodSeconds if longer)"
        );
        return say(ClaimReason::WaitingForIPAddress, message, Next::After(facts.orphan_release_delay));
    }
    if unbound && view.restored_one_wins {
        // Restored with its claim, its address held too by unbound claims' creates (seed 540515841): they withdraw
        // theirs. Neither bound nor repaired until then (mutation `restored-winner-bound-at-once`): a binding write of
        // theirs in flight may still land, and then this one is the duplicate to withdraw; and repaired, its owner
        // would no longer say it was restored. Their withdrawal wakes the claim.
        let message = format!(
            "IPAddress {key}, restored with this claim, holds an address that other claims' IPAddresses hold too; it \
             is adopted once they are withdrawn"
        );
        return say(ClaimReason::WaitingForIPAddress, message, Next::After(Duration::from_secs(1)));
    }
    if unbound && view.moved_one_waits {
        // Came back with its Cluster, its address held too by another claim's IPAddress of ours, whose binding write
        // may still land (scenario `the_ipaddress_that_came_back_does_not_bind_beside_a_binding_in_flight`): that one
        // is withdrawn first, and its withdrawal wakes this claim. Bound now, and the write landing, two claims would
        // be bound to one address.
        let others = view.duplicate.as_ref().map_or_else(String::new, |d| format!(" ({d})"));
        let message = format!(
            "IPAddress {key}, which came back with its Cluster, holds an address that another claim's IPAddress holds \
             too{others}; it is adopted once that one is withdrawn"
        );
        return say(ClaimReason::WaitingForIPAddress, message, Next::After(Duration::from_secs(1)));
    }
    let bound = claim.address_ref() == Some(&*key.name);
    if bound && !told_of(claim, view.held) {
        // Bound to the address its condition names, while this IPAddress of its name holds another: a deposed
        // leader's late create, landed after a person deleted the claim's own. Its machine uses the address the
        // condition names, which the claim makes its IPAddress again with; this one is withdrawn, never adopted.
        return End::LetGo { judged: record.uid, why: LetGo::Deleting };
    }
    if record.deleting && !bound && !view.left_behind {
        // Being deleted, and the claim not bound to it: a delete of ours that did not finish (a withdrawn duplicate,
        // an orphan of an earlier claim of this name) or one by hand. It is let go, and the claim gets an address
        // anew. A bound claim's stays while it goes (its machine may use the address): its deletion wakes the claim.
        return End::LetGo { judged: record.uid, why: LetGo::Deleting };
    }
    if view.left_behind {
        // Left behind by the move of an earlier claim of this name (`State::left_behind_for`): its address is in use on
        // the other management cluster. Never adopted: it is let go once its address is recorded as moved away (so that
        // the address stays reserved), and this claim gets another. One being deleted as an IPAddress of the pool this
        // manager knows (by hand, or the pool deleted in the foreground) goes at once, its hold the reservation and its
        // entry written as one no IPAddress backs; one of a pool gone (the garbage collector deletes it once its pool
        // is made again) waits for its entry: let go first, its reservation would live in memory only, and the writer,
        // finding it gone, drop the entry (scenario
        // `a_new_claim_of_its_name_waits_for_the_entry_of_an_ipaddress_left_behind_being_deleted`; scenario
        // `a_new_claim_of_its_name_lets_go_the_ipaddress_left_behind_a_person_deletes_while_the_annotation_is_full`).
        let of_the_pool_known =
            record.pool_owner == view.pool.as_ref().and_then(|p| p.metadata.uid.as_deref()).map(Uid::of);
        if view.moved_away_unwritten && !(record.deleting && of_the_pool_known) {
            // No room for its entry (operations.md: the IPAddress keeps the address until room is made): said, and
            // looked at again when the entry lands (its write wakes the claim of the name).
            if view.moved_away_no_room {
                let message = format!(
                    "IPAddress {key}, left behind by a move, keeps its address for the other management cluster, and \
                     {pool_key}'s annotation {MOVED_AWAY_ANNOTATION} has no room to record it: make room \
                     (docs/operations.md) for this claim to get an address"
                );
                return say(ClaimReason::AllocationFailed, message, Next::After(RECHECK));
            }
            return End::Finish(Next::After(Duration::from_secs(1)));
        }
        // Its pool made again and not yet shown by the pool watch (or still the one deleted, whose annotation holds the
        // entry): let go only once the API server shows the pool the index knows, the new pool would never reserve the
        // address (scenario
        // `a_new_claim_of_its_name_keeps_the_ipaddress_left_behind_while_the_pool_watch_lags_a_pool_made_again`).
        return End::LetGoLeftBehind { judged: record.uid };
    }
    let has_claim_owner = record.claim_owner == Some(claim.uid.uid());
    let pool_uid = owning_pool(view).and_then(|p| p.metadata.uid.clone());
    let has_pool_owner = pool_uid.is_none_or(|uid| record.pool_owner == Some(Uid::of(&uid)));
    let has_label = claim.cluster().is_none_or(|v| record.cluster_label.as_deref() == Some(v));
    let complete = has_claim_owner && has_pool_owner && record.protected && has_label && !record.marked_moved_away;
    End::Adopt { repair: !complete && !record.deleting }
}

/// The pool an adopted IPAddress is owned by. A pool being deleted is no owner to put back: deleted in the foreground,
/// the garbage collector takes its owner reference off the IPAddresses its claims keep, and would again after every
/// repair.
pub fn owning_pool(view: &ClaimView) -> Option<&Pool> {
    view.pool.as_deref().filter(|p| !p.is_deleting())
}

/// Whether the claim was told of `held` (bound to it): bound, and holding the address its condition names, when it
/// names one. A bound claim whose IPAddress a person deleted was told of the address that one held, not of what a
/// deposed leader's late create made under its name since (it may be another claim's address).
pub fn told_of(claim: &Claim, held: Option<Held>) -> bool {
    claim.address_ref().is_some()
        && claim.bound_address.is_none_or(|bound| held.and_then(Held::address).is_none_or(|a| a == bound))
}

/// Whether the bound `claim`'s condition says it is not Ready while the IPAddress of its name in its pool holds the
/// address it is bound to (what adopting it says Ready of).
fn says_not_ready_while_held(claim: &Claim, view: &ClaimView) -> bool {
    claim.ready.as_ref().is_none_or(|ready| ready.status != Some(true))
        && claim.address_ref() == Some(&*claim.key.name)
        && view.record.as_ref().is_some_and(|r| *r.pool == view.pool_key)
        && view.held.is_some()
        && told_of(claim, view.held)
}

/// The Ready message of a claim bound to the IPAddress of its name, holding `view.held`.
pub fn allocated_message(view: &ClaimView) -> String {
    // The address as `spec.address` shows it; one that does not parse is said so.
    let address = view.held.map_or_else(String::new, |held| {
        held.address().map_or_else(|| held.to_string(), |address| address.to_string())
    });
    let mut message = format!("allocated {address} from {}", view.pool_key);
    if let Some(duplicate) = &view.duplicate {
        // Bound, so it stays (a machine may use it); the condition says so until one holder is released.
        message.push_str(&format!(
            "; DUPLICATE: {duplicate}. Delete one of these claims to resolve it (see docs/operations.md)"
        ));
    }
    if view.out_of_range {
        // Bound, so it stays too; the pool's Ready condition names it as well.
        message.push_str(
            "; the pool's spec no longer allocates this address (it was edited while the address was being handed \
             out): delete the claim to move it to an address the pool allocates",
        );
    }
    message
}

/// What a claim does with the IPAddress its own create just made (`view`: taken after the create was recorded).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Created {
    /// Bound to it, and said Ready.
    Bind,
    /// Its address was not handed out: out of range (the pool edited while the create was in flight: the webhook
    /// cannot see an allocation not written yet), or the pool relabelled for another shard's manager, which cannot see
    /// our hold. Withdrawn, unless a live read finds the claim bound to it meanwhile; and, when `unless_paused`, kept
    /// while its Cluster, read live, is paused: a move may have copied it (clusterctl pauses, then copies), and the
    /// claim over there adopts it, in range or not (seed 460166466).
    Withdraw { unless_paused: bool },
}

/// What the claim does with the IPAddress its create made. Only an address not handed out yet is withdrawn: a bound
/// claim making its IPAddress again keeps its machine's.
pub fn created(claim: &Claim, view: &ClaimView) -> Created {
    if claim.address_ref().is_some() || !(view.out_of_range || view.served != Served::Here) {
        return Created::Bind;
    }
    Created::Withdraw { unless_paused: view.out_of_range }
}

/// Whether the hold of `address` stays when the API server refuses the create of the claim's IPAddress and no
/// IPAddress of its name exists: the claim is bound to that address as its condition tells (making its IPAddress
/// again), so the address is its machine's, and a waiting claim must not get it while the API server refuses (soak
/// seed 110141832). A live read that finds it bound meanwhile keeps it too ([`bound_meanwhile_to`]).
pub fn refused_keeps_the_hold(claim: &Claim, address: IpAddr) -> bool {
    claim.address_ref().is_some() && claim.bound_address.is_none_or(|b| b == address)
}

/// What a claim's release does with the IPAddress of its name, read live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Release {
    /// Not made for this claim, and not ours to judge here (see [`release_of`]): left alone.
    NotMadeForIt,
    /// Left behind by the move of an earlier claim of this name: the orphan release's, which keeps it until its address
    /// is in the pool's annotation.
    LeftBehind,
    /// Another provider's, or of another pool of ours: left alone, and an uncertain create of ours did not happen.
    NotOurs,
    /// Ours, made for this claim: deleted, the claim's hold with it.
    Delete,
    /// None exists: an uncertain create of ours did not happen, and its hold goes.
    NoneExists,
}

/// Whether the release must read the claim live before it judges `found`: a finalizer of ours on it, and the IPAddress
/// names another claim of its name as its owner. Seen through a lagging watch, this claim may be long gone and a new
/// one of its name have adopted it (seed 510263267).
pub fn release_reads_the_claim(claim: &Claim, found: &IpAddress) -> bool {
    claim.release_finalizer_index.is_some() && made_for_another(found, claim)
}

/// What the release of `claim` does with `found`, the IPAddress of its name read live. `claim_gone_live`: the claim's
/// live read ([`release_reads_the_claim`]) found it gone. An adopter rewrites the owner before it binds, and two claims
/// of a name never live at once, so while this one lives another owner is an earlier, gone claim.
pub fn release_of(claim: &Claim, view: &ClaimView, found: Option<&IpAddress>, claim_gone_live: bool) -> Release {
    let Some(address) = found else { return Release::NoneExists };
    let pool_key = &view.pool_key;
    let adopted_by_another = claim_gone_live && release_reads_the_claim(claim, address);
    // Released already (our finalizer off), only the IPAddress made for this claim (its owner reference) is released:
    // after the claim goes, one of its name may be a new claim's (mutation `release-takes-adopted`).
    if !made_for(address, claim) && (claim.release_finalizer_index.is_none() || adopted_by_another) {
        return Release::NotMadeForIt;
    }
    // Left behind by the move of an earlier claim of this name (marked, or known to be moving away), not made for this
    // claim. Deleted here, its mark (the reservation's only record that survives a restart) could go before the entry
    // is written (seed 500178236). Only one the orphan release looks at: of a global pool (a namespaced pool's moves
    // with it), recorded as this very object, and made for a claim.
    let left_behind = pool_key.kind.is_global()
        && !made_for(address, claim)
        && view.record.as_ref().is_some_and(|r| {
            r.uid == address.metadata.uid.as_deref().map(Uid::of)
                && r.made_for_a_claim()
                && (r.moving_away || AddressRecord::of(address).is_some_and(|live| live.moving_away))
        });
    if left_behind {
        return Release::LeftBehind;
    }
    if !is_ours_for(address, &claim.key.name, Some(pool_key)) {
        return Release::NotOurs;
    }
    Release::Delete
}

/// Whether `address` names `claim` (its UID) as its owner.
fn made_for(address: &IpAddress, claim: &Claim) -> bool {
    let uid = claim.uid.to_string();
    address.metadata.owner_references.iter().flatten().any(|o| o.kind == "IPAddressClaim" && o.uid == uid)
}

/// Whether `address` names as its owner another claim of `claim`'s name (another UID).
fn made_for_another(address: &IpAddress, claim: &Claim) -> bool {
    let uid = claim.uid.to_string();
    address
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "IPAddressClaim" && *o.name == *claim.key.name && o.uid != uid)
}

/// Whether the claim, unbound as cached, is bound to `address` as the API server has it (`live`): the cache may lag
/// behind our own status write that bound it (a watch that relists), and a bound claim's address is its machine's.
/// Bound to another address, `address` is no machine's.
pub fn bound_meanwhile_to(live: Option<&Claim>, address: IpAddr) -> bool {
    live.is_some_and(|l| l.address_ref().is_some() && l.bound_address == Some(address))
}

/// Whether the claim, bound as cached, still lives bound as the API server has it (not deleted, not being deleted).
fn lives_bound(live: Option<&Claim>) -> bool {
    live.is_some_and(|l| l.address_ref().is_some() && l.deletion_timestamp.is_none())
}

/// Whether the claim lives bound as the API server has it (not being deleted), its condition naming an address other
/// than `held`: `held` is then no machine's address. A cache behind our own status write naming `held` does not count.
fn lives_bound_to_another(live: Option<&Claim>, held: Option<IpAddr>) -> bool {
    live.is_some_and(|l| {
        l.address_ref().is_some() && l.deletion_timestamp.is_none() && l.bound_address.is_some_and(|b| Some(b) != held)
    })
}

/// Whether the claim lives bound as the API server has it, and staying: not deleted, being deleted, or marked for a
/// move.
fn lives_bound_staying(live: Option<&Claim>) -> bool {
    live.is_some_and(|l| l.address_ref().is_some() && l.deletion_timestamp.is_none() && !l.moving_away)
}

/// Whether `claim`, unbound as cached, lives unbound as the API server has it (`live`): not bound meanwhile, and
/// neither gone nor being deleted unless the cache shows that already (its watch event decides about those).
fn lives_unbound(claim: &Claim, live: Option<&Claim>) -> bool {
    live.is_some_and(|l| {
        l.address_ref().is_none() && (l.deletion_timestamp.is_none() || claim.deletion_timestamp.is_some())
    })
}

/// How much longer a claim restored by Velero waits for its IPAddress before it is allocated a new one; `None` when
/// it was not restored, already holds an address here (an uncertain create of ours), or has waited long enough.
pub fn restore_wait_remaining(claim: &Claim, holds: bool, now: Timestamp, restore_wait: Duration) -> Option<Duration> {
    if !claim.restored || holds || claim.created == 0 {
        return None;
    }
    let until = i64::from(claim.created).saturating_add(i64::try_from(restore_wait.as_secs()).unwrap_or(i64::MAX));
    let remaining = until.saturating_sub(now.as_second());
    (remaining > 0).then(|| Duration::from_secs(remaining.unsigned_abs()))
}

/// How much longer a deleted claim's address is held (`addressReuseGracePeriodSeconds`, IP pools that are not being
/// deleted); `None` when it may go now.
pub fn reuse_grace_remaining(claim: &Claim, pool: &Pool, now: Timestamp) -> Option<Duration> {
    if pool.is_deleting() {
        return None;
    }
    let grace = pool.spec.reuse_grace_period_seconds().filter(|g| *g > 0)?;
    let deleted_at = claim.deletion_timestamp.as_ref()?;
    let remaining = now.duration_until(deleted_at.0 + jiff::SignedDuration::from_secs(grace));
    remaining.is_positive().then(|| Duration::try_from(remaining).unwrap_or(Duration::from_secs(1)))
}

#[cfg(test)]
mod tests;
