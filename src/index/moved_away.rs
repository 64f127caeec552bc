//! Addresses of global pools that `clusterctl move` took to another management cluster.
//!
//! clusterctl copies a global pool to the target and leaves it on the source with the IPAddresses below it, while it
//! deletes their claims and Cluster; the IPAddresses, orphans now, are released. Left alone, the source would hand
//! their addresses out again: the same address on two management clusters. So the IPAddress of a claim (or an
//! IPAddress itself) of a global pool deleted for a move (clusterctl's `delete-for-move` annotation) leaves a
//! reservation in its place, taken over in one step so the address is never free in between, and written
//! into the pool's `ipam.cluster.x-k8s.io/moved-away` annotation so that it outlives the manager. Its entries are
//! comma-separated, each `<address>@<namespace>/<name>` (prefix pools: `<base>/<length>@…`), the address and the
//! IPAddress that moved away with it; a bare `<address>` (written by hand) names none. A reservation counts as used.
//! Only an IPAddress of the entry's name takes it over (the Cluster moved back: clusterctl keeps names): one of
//! another name holding the address, such as a create of a deposed leader that landed late, is a duplicate of the
//! reservation. It ends when a claim is bound to its IPAddress again, or when an operator takes the entry out of the
//! annotation (the moved Cluster was deleted over there: docs/operations.md). The writes are
//! `controllers::moved_away`'s.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use tracing::{info, warn};

use super::registry::{Held, PoolKey, reservation_key};
use super::{Notice, ObjectKey, State};
use crate::api::{MOVED_AWAY_ANNOTATION, Pool};
use crate::capi::{Claim, IpAddressSpec};
use crate::compact::{ResourceVersion, Uid};

/// The changes to the pools' annotations our manager makes, per pool: those not written yet, and those written but not
/// yet seen in a pool event (the watch may still deliver events older than our write, which must not undo it).
#[derive(Default)]
pub struct Ledger {
    pools: HashMap<PoolKey, PoolLedger>,
    /// Entries already reported as not an address of their pool (said once, not on every pool event).
    reported: HashSet<(PoolKey, String)>,
}

#[derive(Default)]
struct PoolLedger {
    /// Entry → `true` to add it, `false` to remove it.
    pending: BTreeMap<String, bool>,
    /// Written, at `written_at` (the resourceVersion our last write returned).
    written: BTreeMap<String, bool>,
    written_at: ResourceVersion,
    /// Pending additions the writer found no room for: their claims of the name say so, rather than look again every
    /// second (soak seed 400090733).
    left_out: BTreeSet<String>,
    /// The pool object each pending addition was queued for, and its IPAddress (`QueuedFor`).
    queued_for: HashMap<String, QueuedFor>,
}

/// The pool object (by UID) an addition was queued for: the owner reference of the IPAddress it names, else the pool as
/// the index held it; and that IPAddress's UID. A pool deleted takes its reservations with it, those not yet written
/// too: a manager whose watches lag may queue an entry for a pool that is gone, from news of an IPAddress that is gone
/// too, and must not write it into a pool made again under the name (seed 520557168), where its address was handed out
/// since. Written there only while the IPAddress it names is still here (left behind, `pool_appeared`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueuedFor {
    pub pool: Option<Uid>,
    pub ipaddress: Option<Uid>,
}

/// A pending addition queued for another pool object than the one the API server has now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForAnotherPool {
    pub entry: String,
    /// The IPAddress it names, and its UID when known: written only if that object is still here.
    pub ipaddress: Option<(ObjectKey, Option<Uid>)>,
}

/// What the writer of a pool's moved-away annotation decides on, read in one step ([`State::moved_away_view`]).
#[derive(Clone, Debug, Default)]
pub struct MovedAwayView {
    /// The changes not written yet: entry → `true` to add it, `false` to remove it.
    pub pending: BTreeMap<String, bool>,
    /// The pool object each pending addition was queued for.
    queued_for: BTreeMap<String, QueuedFor>,
    /// The pending additions that no IPAddress left behind here backs (a bound claim's kept hold, its IPAddress
    /// deleted by a person before the move): the annotation is their only record.
    unbacked: BTreeSet<String>,
}

impl MovedAwayView {
    /// Of `changes` (the pending ones the writer read), the additions queued for another pool object than `live`, the
    /// pool's UID on the API server now (see [`QueuedFor`]).
    pub fn for_another_pool(
        &self,
        pool: &PoolKey,
        changes: &BTreeMap<String, bool>,
        live: Option<Uid>,
    ) -> Vec<ForAnotherPool> {
        changes
            .iter()
            .filter(|(_, add)| **add)
            .filter_map(|(entry, _)| {
                let queued_for = self.queued_for.get(entry)?;
                (queued_for.pool.is_some() && queued_for.pool != live).then(|| ForAnotherPool {
                    entry: entry.clone(),
                    ipaddress: parse(pool, entry).and_then(|e| e.address).map(|a| (a, queued_for.ipaddress)),
                })
            })
            .collect()
    }

    /// Of `changes`, the additions no IPAddress left behind here backs: they do not wait for the annotation's room
    /// (soak seed 120234571: one waited, known to this process only).
    pub fn unbacked(&self, changes: &BTreeMap<String, bool>) -> BTreeSet<String> {
        changes.keys().filter(|entry| self.unbacked.contains(*entry)).cloned().collect()
    }
}

impl PoolLedger {
    /// The entries the annotation holds once our changes are in, given a pool event's annotation and resourceVersion.
    /// Our written changes count until an event at or after our last write shows the annotation as it is since.
    fn wanted(&self, annotation: Option<&str>, revision: ResourceVersion) -> BTreeSet<String> {
        let shown = revision.is_at_least(self.written_at);
        let mut wanted = entries(annotation);
        let written = self.written.iter().filter(|_| !shown);
        for (entry, add) in written.chain(&self.pending) {
            if *add {
                wanted.insert(entry.clone());
            } else {
                wanted.remove(entry);
            }
        }
        wanted
    }

    fn is_empty(&self) -> bool {
        self.pending.is_empty() && self.written.is_empty() && self.left_out.is_empty()
    }

    /// Forgets the pending change of `entry` if it is still `add`.
    fn settle(&mut self, entry: &str, add: bool) {
        if self.pending.get(entry) == Some(&add) {
            self.pending.remove(entry);
            self.queued_for.remove(entry);
        }
    }
}

impl State {
    pub(crate) fn queue_moved_away(&mut self, pool: &PoolKey, entry: String, add: bool) {
        let queued_for = add.then(|| {
            let named = parse(pool, &entry).and_then(|e| e.address).and_then(|a| self.addresses.get(&a));
            let pool_now = self.pools.get(pool).and_then(|p| p.metadata.uid.as_deref().map(Uid::of));
            QueuedFor { pool: named.and_then(|r| r.pool_owner).or(pool_now), ipaddress: named.and_then(|r| r.uid) }
        });
        let ledger = self.moved_away.pools.entry(pool.clone()).or_default();
        match queued_for {
            Some(queued_for) => ledger.queued_for.insert(entry.clone(), queued_for),
            None => ledger.queued_for.remove(&entry),
        };
        ledger.pending.insert(entry, add);
        self.notices.push(Notice::MovedAwayChanged(pool.clone()));
    }

    /// The pending additions `dropped` were queued for a pool object that is gone, with the IPAddresses they name: not
    /// to be written, and the addresses they reserved here are free, as the pool's deletion left them.
    pub fn moved_away_dropped(&mut self, pool: &PoolKey, dropped: &[String]) {
        let Some(ledger) = self.moved_away.pools.get_mut(pool) else { return };
        for entry in dropped {
            ledger.settle(entry, true);
            ledger.left_out.remove(entry);
            warn!(pool = %pool, entry, annotation = MOVED_AWAY_ANNOTATION, "an address moved away was queued for an earlier pool of this name, deleted since with the IPAddress it names; not written");
        }
        if ledger.is_empty() {
            self.moved_away.pools.remove(pool);
        }
        if let Some(live) = self.pool(pool) {
            sync(self, pool, &live);
        }
    }

    /// Whether an entry that reserves `held` waits to be written into the pool's annotation: queued, and not in the
    /// annotation as the index holds the pool. A term that sees an IPAddress left behind before its pool queues the
    /// entry an earlier term wrote (and whose sweep then deleted that IPAddress): that entry is written, and the
    /// IPAddress's deletion frees nothing (soak seed 50010609).
    pub(super) fn moved_away_unwritten_for(&self, pool: &PoolKey, held: Held) -> bool {
        let stored = entries(self.pool(pool).as_deref().and_then(|p| p.annotation(MOVED_AWAY_ANNOTATION)));
        let Some(ledger) = self.moved_away.pools.get(pool) else { return false };
        ledger
            .pending
            .iter()
            .any(|(entry, add)| *add && !stored.contains(entry) && parse(pool, entry).is_some_and(|e| e.held == held))
    }

    /// Whether the entry naming the IPAddress `key` waits to be written into the pool's annotation. Its own entry only:
    /// one of another IPAddress holding the same address (a duplicate) does not keep this one (test
    /// `an_orphan_waits_for_its_own_moved_away_entry_only`: a duplicate orphan waited for as long as the annotation had
    /// no room for the other's entry).
    pub(super) fn moved_away_unwritten_named(&self, pool: &PoolKey, key: &ObjectKey) -> bool {
        let Some(held) = self.registry.held_by(pool, key) else { return false };
        let entry = entry_text(held, key);
        self.moved_away.pools.get(pool).is_some_and(|l| l.pending.get(&entry) == Some(&true))
            && !entries(self.pool(pool).as_deref().and_then(|p| p.annotation(MOVED_AWAY_ANNOTATION))).contains(&entry)
    }

    /// The writer found no room in the pool's annotation for these pending additions.
    pub fn moved_away_left_out(&mut self, pool: &PoolKey, left_out: impl IntoIterator<Item = String>) {
        let ledger = self.moved_away.pools.entry(pool.clone()).or_default();
        ledger.left_out.extend(left_out.into_iter().filter(|entry| ledger.pending.get(entry) == Some(&true)));
    }

    /// Whether the address the IPAddress `key` holds waits for room in the pool's annotation (the writer left it out).
    pub fn moved_away_no_room(&self, pool: &PoolKey, key: &ObjectKey) -> bool {
        let Some(held) = self.registry.held_by(pool, key) else { return false };
        self.moved_away.pools.get(pool).is_some_and(|l| l.left_out.contains(&entry_text(held, key)))
    }

    /// The IPAddress `address`, left behind by a move and waiting for room in the pool's annotation, is deleted by an
    /// operator: its address is not to be reserved (docs/operations.md), and its entry is not written.
    pub fn moved_away_cancelled(&mut self, pool: &PoolKey, address: &ObjectKey) {
        let Some(held) = self.registry.held_by(pool, address) else { return };
        let entry = entry_text(held, address);
        if let Some(ledger) = self.moved_away.pools.get_mut(pool)
            && ledger.pending.get(&entry) == Some(&true)
        {
            // A removal, not a forgotten addition: a write in flight that still carries the entry is undone by the
            // next one.
            ledger.queued_for.remove(&entry);
            ledger.pending.insert(entry, false);
            self.notices.push(Notice::MovedAwayChanged(pool.clone()));
            info!(pool = %pool, ipaddress = %address, address = %held, "an IPAddress left behind by a move was deleted before its address could be recorded; the address is free");
        }
    }

    /// What the writer of `pool`'s annotation decides on (see [`MovedAwayView`]).
    pub fn moved_away_view(&self, pool: &PoolKey) -> MovedAwayView {
        let Some(ledger) = self.moved_away.pools.get(pool) else { return MovedAwayView::default() };
        let additions = || ledger.pending.iter().filter(|(_, add)| **add).map(|(entry, _)| entry);
        MovedAwayView {
            pending: ledger.pending.clone(),
            queued_for: additions().filter_map(|e| Some((e.clone(), *ledger.queued_for.get(e)?))).collect(),
            unbacked: self.moved_away_unbacked(pool, &ledger.pending),
        }
    }

    /// Of `changes`, the additions no IPAddress left behind here backs ([`MovedAwayView::unbacked`]).
    fn moved_away_unbacked(&self, pool: &PoolKey, changes: &BTreeMap<String, bool>) -> BTreeSet<String> {
        changes
            .iter()
            .filter(|(text, add)| {
                **add
                    && parse(pool, text)
                        .and_then(|e| e.address)
                        .is_some_and(|name| !self.addresses.get(&name).is_some_and(|r| r.moving_away))
            })
            .map(|(text, _)| text.clone())
            .collect()
    }

    /// `changes` landed in the pool's annotation by a write that returned `revision`, or the pool was gone (`None`):
    /// either way no longer pending, unless they changed meanwhile. Only the changes the writer read go: an entry
    /// queued while it wrote (a pool of the name appeared meanwhile, [`pool_appeared`]) waits for the next write.
    pub fn moved_away_written(
        &mut self,
        pool: &PoolKey,
        changes: &BTreeMap<String, bool>,
        revision: Option<ResourceVersion>,
    ) {
        let pools = &mut self.moved_away.pools;
        let ledger = pools.entry(pool.clone()).or_default();
        for (entry, add) in changes {
            ledger.settle(entry, *add);
            ledger.left_out.remove(entry);
        }
        ledger.left_out.retain(|entry| ledger.pending.get(entry) == Some(&true));
        match revision {
            Some(revision) => {
                for (entry, add) in changes {
                    ledger.written.insert(entry.clone(), *add);
                }
                ledger.written_at = revision;
            }
            // The pool is gone, and its reservations with it: nothing of ours is in an annotation.
            None => {
                ledger.written.clear();
                ledger.written_at = ResourceVersion::default();
                if ledger.pending.is_empty() {
                    pools.remove(pool);
                }
            }
        }
        // A claim of the name may wait for its entry: it lets the IPAddress left behind go once it is recorded.
        let named: Vec<ObjectKey> =
            changes.iter().filter(|(_, add)| **add).filter_map(|(entry, _)| parse(pool, entry)?.address).collect();
        for key in named {
            self.wake(key);
        }
    }

    /// The entries of the pool's annotation once our changes are in, as of the pool object the index holds.
    fn moved_away_wanted(&self, key: &PoolKey) -> BTreeSet<String> {
        let pool = self.pool(key);
        let (annotation, revision) = match &pool {
            Some(p) => (p.annotation(MOVED_AWAY_ANNOTATION), revision_of(p)),
            None => (None, ResourceVersion::default()),
        };
        match self.moved_away.pools.get(key) {
            Some(ledger) => ledger.wanted(annotation, revision),
            None => entries(annotation),
        }
    }
}

fn revision_of(pool: &Pool) -> ResourceVersion {
    ResourceVersion::of(pool.metadata.resource_version.as_deref().unwrap_or_default())
}

/// The entries of the pool's annotation (our changes included) that reserve `held`.
fn entries_for(index: &State, pool: &PoolKey, held: Held) -> Vec<(String, Entry)> {
    if held.address().is_none() {
        return Vec::new();
    }
    index
        .moved_away_wanted(pool)
        .into_iter()
        .filter_map(|text| parse(pool, &text).filter(|e| e.held == held).map(|e| (text, e)))
        .collect()
}

/// Whether `held` is reserved in the pool's annotation (our changes included): in use on another management cluster.
pub fn is_reserved(index: &State, pool: &PoolKey, held: Held) -> bool {
    !entries_for(index, pool, held).is_empty()
}

/// Whether the IPAddress `address` may hold the reserved `held` as the one that moved away (coming back, or left
/// behind and seen again): an entry names it, or only bare entries (naming none) reserve the address.
pub(super) fn may_hold_reserved(index: &State, pool: &PoolKey, address: &ObjectKey, held: Held) -> bool {
    let named: Vec<Option<ObjectKey>> = entries_for(index, pool, held).into_iter().map(|(_, e)| e.address).collect();
    !named.is_empty() && allows(&named, address)
}

/// Whether an entry names the IPAddress `address` for the reserved `held`: it is the one that moved away, which wins
/// over any other IPAddress holding the address.
pub(super) fn is_named_holder(index: &State, pool: &PoolKey, address: &ObjectKey, held: Held) -> bool {
    entries_for(index, pool, held).iter().any(|(_, e)| e.address.as_ref() == Some(address))
}

/// Whether entries naming `named` (`None`: a bare entry) let `address` hold their address: one names it, or none
/// names any (a bare entry, written by hand, cannot tell; a named one beside it can, so it decides).
fn allows(named: &[Option<ObjectKey>], address: &ObjectKey) -> bool {
    let names: Vec<&ObjectKey> = named.iter().flatten().collect();
    names.is_empty() || names.contains(&address)
}

/// The entries of an annotation value, as written.
pub fn entries(annotation: Option<&str>) -> BTreeSet<String> {
    annotation
        .map(|v| v.split(',').map(str::trim).filter(|e| !e.is_empty()).map(str::to_owned).collect())
        .unwrap_or_default()
}

/// One entry of the annotation: the address reserved, and the IPAddress that moved away with it when it says.
#[derive(Debug, PartialEq)]
struct Entry {
    held: Held,
    address: Option<ObjectKey>,
}

/// The entry our manager writes for `held`, moved away with the IPAddress `address`.
fn entry_text(held: Held, address: &ObjectKey) -> String {
    format!("{held}@{address}")
}

/// An entry as the address it holds in a pool of `key`'s kind, and the IPAddress it names; `None` when it is not
/// one.
/// The addresses an annotation of the pool `key` reserves (entries that are not addresses of the pool left out).
pub fn reserved_by(key: &PoolKey, annotation: Option<&str>) -> std::collections::HashSet<Held> {
    entries(annotation).iter().filter_map(|e| parse(key, e)).map(|e| e.held).collect()
}

fn parse(key: &PoolKey, entry: &str) -> Option<Entry> {
    let (reserved, address) = match entry.split_once('@') {
        Some((reserved, named)) => {
            let (namespace, name) = named.split_once('/')?;
            if namespace.is_empty() || name.is_empty() || name.contains('/') {
                return None;
            }
            (reserved, Some(ObjectKey::new(namespace, name)))
        }
        None => (entry, None),
    };
    let (ip, prefix) = match reserved.split_once('/') {
        Some((ip, prefix)) => (ip, prefix.parse().ok()),
        None => (reserved, None),
    };
    let spec = IpAddressSpec { address: ip.to_owned(), prefix, ..Default::default() };
    let held = Held::of(key.kind, &spec);
    (held.to_string() == reserved).then_some(Entry { held, address })
}

/// An IPAddress of a global pool is gone for a move: its address stays held, as a reservation.
pub fn moved_away(index: &mut State, pool: &PoolKey, address: &ObjectKey) {
    let Some(held) = index.registry.held_by(pool, address).filter(|h| h.address().is_some()) else { return };
    if index.registry.transfer(pool, address, &reservation_key(held), None).is_some() {
        info!(pool = %pool, ipaddress = %address, address = %held, "the IPAddress of an address moved to another management cluster is gone; the address stays reserved here");
        if index.moved_away_unwritten_for(pool, held) {
            // Left out for want of room while its IPAddress backed it, the entry is unbacked now and has room of its
            // own (`fit`): written now, not at the next retry (seed 460380971).
            index.notices.push(Notice::MovedAwayChanged(pool.clone()));
        }
    }
}

/// A claim is gone for a move. clusterctl leaves the IPAddresses of a global pool on the source (they hang below a
/// cluster-scoped object), so the claim's deletion is the signal: its IPAddress's address is recorded in the pool's
/// annotation now, and when the IPAddress, an orphan, is deleted later, its hold becomes a reservation.
///
/// `noticed`: this manager knows the move itself (it saw the claim's deletion, or it watches every claim of the pool),
/// and keeps it when the object does not say it; a manager that does not see the claim follows the object once the
/// claim's own manager wrote on it (`State::keeps_moving_away`).
pub fn claim_moved_away(index: &mut State, claim: &ObjectKey, noticed: bool) {
    let (pool, held) = {
        let addresses = &mut index.addresses;
        match addresses.get_mut(claim) {
            Some(record) if record.pool.kind.is_global() => {
                record.moving_away = true;
                record.moving_away_noticed |= noticed;
                record.deleting_when_moved |= record.deleting;
                if let Some(owner) = record.claim_owner {
                    index.moved_owners.insert(claim.clone(), owner);
                }
                let pool = (*record.pool).clone();
                let held = index.registry.held_by(&pool, claim);
                (pool, held)
            }
            _ => return,
        }
    };
    if let Some(held) = held.filter(|h| h.address().is_some()) {
        record_moved_away(index, &pool, claim, held);
    }
}

/// A bound claim of a global pool is gone for a move while its IPAddress was gone from under it (a person deleted it,
/// and the Cluster's pause for the move kept the claim from making it again): its machine uses the address over
/// there. The hold the claim kept for that address becomes a reservation, its entry naming the IPAddress the claim
/// makes again over there (found by soak seed 80066535 and the scenario it led to).
pub fn kept_hold_moved_away(index: &mut State, claim: &Claim) {
    let key = &claim.key;
    let Some(kind) = claim.pool_kind.filter(|k| k.is_global()) else { return };
    // Being deleted before the move reached it (clusterctl marks the claims it deletes), it released its IPAddress,
    // and its address may be another claim's now: it did not move (soak seed 100021395).
    if claim.address_ref().is_none()
        || index.addresses.contains_key(key)
        || (claim.deletion_timestamp.is_some() && !claim.moving_away)
    {
        return;
    }
    let pool = PoolKey::new(kind, &key.namespace, &claim.pool_name);
    let kept = index.registry.held_by(&pool, key);
    let held = match (kept, claim.bound_address) {
        (Some(held), bound) if held.address().is_some() && bound.is_none_or(|b| held.address() == Some(b)) => held,
        (Some(_), _) => return,
        // Not held here: its deletion came while the watches listed, before this process held the address its
        // condition names (soak seed 90225114, after a leader change). A prefix pool's condition names the child
        // prefix's base only, not its length: nothing to reserve from it.
        // One being deleted before that (clusterctl marks what it deletes, also a claim still held by a finalizer of
        // another controller) released its IPAddress already, and its address may be another claim's: nothing to
        // reserve (scenario `a_claim_released_before_its_cluster_moved_reserves_nothing`).
        (None, Some(_)) if claim.deletion_timestamp.is_some() => return,
        // In a term that listed everything, the IPAddress of another claim holding it says the address is not the
        // claim's any more: this process let the claim's hold go (its Cluster deleted while paused, long before the
        // claims' deletion came through a relist) and another claim took it, whose IPAddress a reservation would
        // withdraw (soak seed 809508772). A placeholder (a pin's, the claim's own hold set aside) or a holder seen
        // while the watches list is no such sign, and the address stays reserved (helper-129 F1-F3).
        (None, Some(bound)) if index.registry.is_held_by_another_ipaddress(&pool, Held::Ip(Some(bound)), key) => {
            return;
        }
        (None, Some(bound)) if !kind.is_prefix_pool() => Held::Ip(Some(bound)),
        (None, Some(bound)) => {
            warn!(claim = %key, pool = %pool, base = %bound, annotation = MOVED_AWAY_ANNOTATION, "a bound claim was deleted for a move while its IPAddress was gone and before this manager held its prefix: add the entry `<prefix>/<length>@<namespace>/<name>` to the annotation by hand");
            return;
        }
        (None, None) => return,
    };
    // clusterctl copies no status: with no IPAddress to adopt over there, the claim gets an address anew, and the
    // entry may never end by itself (a move back brings the IPAddress of the new address).
    warn!(claim = %key, pool = %pool, address = %held, annotation = MOVED_AWAY_ANNOTATION, "a bound claim was deleted for a move while its IPAddress was gone (deleted by hand): its address stays reserved here for its machine; remove the entry from the annotation once no machine uses the address");
    record_moved_away(index, &pool, key, held);
    if kept.is_some() {
        moved_away(index, &pool, key);
    } else if let Some(duplicate) = index.registry.reserve_alongside(&pool, held) {
        index.report_duplicate(&duplicate);
    }
}

/// An IPAddress of a global pool marked as moving away (its claim was deleted for a move, or it carries clusterctl's
/// `delete-for-move` itself): its address goes into the pool's annotation unless it is there already.
pub fn still_moving_away(index: &mut State, pool: &PoolKey, address: &ObjectKey, held: Held) {
    if held.address().is_some() && !may_hold_reserved(index, pool, address, held) {
        record_moved_away(index, pool, address, held);
    }
}

/// A pool of the name appeared (new, or made again after it went, and its ledger with it): the IPAddresses a move left
/// behind in it hold addresses still in use elsewhere, and their entries are queued again (found by seed 20033858 of
/// the soak: the pool deleted and made again, the left-behind IPAddress then deleted by the garbage collector, and its
/// address handed out while the moved Cluster used it).
pub fn pool_appeared(index: &mut State, pool: &PoolKey) {
    let left_behind: Vec<(ObjectKey, Held)> = index
        .addresses
        .iter()
        .filter(|(_, record)| record.moving_away && *record.pool == *pool)
        .filter_map(|(key, _)| index.registry.held_by(pool, key).map(|held| (key.clone(), held)))
        .collect();
    for (key, held) in left_behind {
        still_moving_away(index, pool, &key, held);
    }
}

fn record_moved_away(index: &mut State, pool: &PoolKey, address: &ObjectKey, held: Held) {
    info!(pool = %pool, ipaddress = %address, address = %held, "moved to another management cluster; the address stays reserved here");
    index.queue_moved_away(pool, entry_text(held, address), true);
}

/// An IPAddress appeared holding an address reserved as moved away. The one that moved away (its entry names it)
/// holds it now, never free in between: it came back, or it is the IPAddress a move left behind here, seen again after
/// a restart, so the entry stays until a claim of the pool is bound to it again ([`claim_back`]). One of another name
/// is not the moved one coming back: it stays a duplicate of the reservation, which its claim withdraws.
pub fn came_back(index: &mut State, pool: &PoolKey, address: &ObjectKey, held: Held) {
    if index.registry.held_by(pool, &reservation_key(held)).is_none() {
        // Not reserved (or not yet: the pool's annotation is applied later, and `sync` decides then).
        return;
    }
    if !may_hold_reserved(index, pool, address, held) {
        warn!(pool = %pool, ipaddress = %address, address = %held, annotation = MOVED_AWAY_ANNOTATION, "an IPAddress holds an address reserved for another IPAddress that moved to another management cluster; it is a duplicate, not that one coming back");
        return;
    }
    // Its Cluster is set as it is recorded, next.
    if index.registry.transfer(pool, &reservation_key(held), address, None).is_some() {
        info!(pool = %pool, ipaddress = %address, address = %held, "an IPAddress holds a reserved address");
    }
}

/// A bound claim of a global IP pool whose IPAddress is gone, told of an address an entry reserves under the claim's
/// own name: it came back with its Cluster, and the entry's removal was lost (written by a term that ended, soak seed
/// 120037281). The address is its machine's: its hold takes the reservation over, as an uncertain create's hold until
/// it makes its IPAddress again, and the entry goes.
pub fn reclaim_for_bound(index: &mut State, pool: &PoolKey, claim: &Claim) {
    if !pool.kind.is_global() || pool.kind.is_prefix_pool() || claim.address_ref() != Some(&*claim.key.name) {
        return;
    }
    let Some(bound) = claim.bound_address else { return };
    let (key, held) = (&claim.key, Held::Ip(Some(bound)));
    if index.registry.held_by(pool, key).is_some()
        || index.registry.held_by(pool, &reservation_key(held)).is_none()
        || !is_named_holder(index, pool, key, held)
    {
        return;
    }
    // It counts in its Cluster's quota again (helper-131 F3: a new term holding it before a sibling allocates).
    let cluster = claim.cluster_key();
    if index.registry.transfer(pool, &reservation_key(held), key, cluster).is_some() {
        index.registry.unconfirm(pool, key);
        index.holds_without_create.insert(key.clone());
        info!(claim = %key, pool = %pool, address = %held, "a bound claim that came back with its Cluster holds its reserved address again");
        claim_back(index, pool, key, held);
    }
}

/// A live claim of the pool is bound to its IPAddress `address`, holding `held`: if the address was reserved as moved
/// away with that IPAddress, its Cluster came back with it and the reservation ends.
pub fn claim_back(index: &mut State, pool: &PoolKey, address: &ObjectKey, held: Held) {
    if !pool.kind.is_global() {
        return;
    }
    let entries = entries_for(index, pool, held);
    let named: Vec<Option<ObjectKey>> = entries.iter().map(|(_, e)| e.address.clone()).collect();
    if entries.is_empty() || !allows(&named, address) {
        return;
    }
    info!(pool = %pool, ipaddress = %address, address = %held, "moved back; the reservation ends");
    index.moved_owners.remove(address);
    for (text, _) in entries {
        index.queue_moved_away(pool, text, false);
    }
}

/// Brings the reservations of a global pool in line with its annotation (and our changes the event may not show
/// yet): an entry an operator removed frees its address; one an IPAddress here holds stays held by it.
pub fn sync(index: &mut State, key: &PoolKey, pool: &Pool) {
    let wanted = {
        let pools = &mut index.moved_away.pools;
        let annotation = pool.annotation(MOVED_AWAY_ANNOTATION);
        match pools.get_mut(key) {
            Some(ledger) => {
                let wanted = ledger.wanted(annotation, revision_of(pool));
                if revision_of(pool).is_at_least(ledger.written_at) {
                    // The pool shows the annotation as it is since our last write.
                    ledger.written.clear();
                }
                if ledger.is_empty() {
                    pools.remove(key);
                }
                wanted
            }
            None => entries(annotation),
        }
    };
    // Each address reserved, with the IPAddresses its entries name (`None`: an entry that names none).
    let mut wanted_by: HashMap<Held, Vec<Option<ObjectKey>>> = HashMap::new();
    for entry in wanted {
        match parse(key, &entry) {
            Some(parsed) => wanted_by.entry(parsed.held).or_default().push(parsed.address),
            None => {
                if index.moved_away.reported.insert((key.clone(), entry.clone())) {
                    warn!(pool = %key, entry, annotation = MOVED_AWAY_ANNOTATION, "not an address of this pool; ignored");
                }
            }
        }
    }
    let wanted = wanted_by;
    // Released in one order (a LeastRecentlyReleased pool's order of releases), whatever the registry's map's.
    let reserved: std::collections::BTreeSet<Held> = index.registry.reservations(key).into_iter().collect();
    for held in &reserved {
        if !wanted.contains_key(held) {
            info!(pool = %key, address = %held, "reservation removed from the annotation; the address is free");
            let woken = index.registry.forget(key, &reservation_key(*held));
            index.wake_all(woken);
        }
    }
    for (held, named) in wanted.into_iter().filter(|(h, _)| !reserved.contains(h)) {
        let names: Vec<&ObjectKey> = named.iter().flatten().collect();
        let moved_one_holds = names.is_empty() || names.iter().any(|a| index.registry.held_by(key, a) == Some(held));
        if moved_one_holds {
            // Held by the IPAddress that moved away, here already (left behind, or come back), or free: it stays held
            // by it, or is reserved.
            index.registry.reserve(key, held);
            // A claim of that name bound to it, here (come back with its Cluster): the entry is old news (another
            // manager's late write of it: seed 430199264), which the claim's reconcile takes out again.
            let bound_back: Vec<ObjectKey> = names
                .iter()
                .filter(|a| index.registry.held_by(key, a) == Some(held))
                .filter(|a| {
                    index.claims.get(a).is_some_and(|c| {
                        c.address_ref() == Some(&*a.name) && !c.moving_away && c.deletion_timestamp.is_none()
                    })
                })
                .map(|a| (*a).clone())
                .collect();
            index.wake_all(bound_back);
        } else if let Some(duplicate) = index.registry.reserve_alongside(key, held) {
            // Held by another IPAddress (a late create of a deposed leader): the reservation is held beside it, a
            // duplicate its claim withdraws unless bound.
            index.report_duplicate(&duplicate);
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
        let reserved = |key: &PoolKey, entry: &str| parse(key, entry).map(|e| e.held.to_string());
        assert_eq!(reserved(&ip, "10.0.0.1").as_deref(), Some("10.0.0.1"));
        assert_eq!(reserved(&ip, "fd00::1").as_deref(), Some("fd00::1"));
        assert_eq!(reserved(&prefix, "fd00:0:0:1::/64").as_deref(), Some("fd00:0:0:1::/64"));
        for bad in ["", "10.0.0", "10.0.0.1/24", "nope", "010.0.0.1", "10.0.0.1@", "10.0.0.1@ns", "10.0.0.1@/m0"] {
            assert_eq!(parse(&ip, bad), None, "{bad:?}");
        }
        for bad in ["fd00::", "fd00::1/64", "10.0.0.0/24", "fd00::/200", "fd00:0:0:1::/64@a/b/c"] {
            assert_eq!(parse(&prefix, bad), None, "{bad:?}");
        }
        assert_eq!(entries(Some(" 10.0.0.2, 10.0.0.1,,")).into_iter().collect::<Vec<_>>(), ["10.0.0.1", "10.0.0.2"]);
    }

    #[test]
    fn an_entry_names_the_ipaddress_that_moved_away_and_reads_back_as_written() {
        let ip = PoolKey::new(PoolKind::GlobalInClusterIPPool, "", "g");
        let prefix = PoolKey::new(PoolKind::GlobalInClusterPrefixPool, "", "p");
        let moved = ObjectKey::new("cluster-a", "vm-0-eth0-g");
        for (key, entry) in
            [(&ip, "10.0.0.1@cluster-a/vm-0-eth0-g"), (&prefix, "fd00:0:0:1::/64@cluster-a/vm-0-eth0-g")]
        {
            let parsed = parse(key, entry).expect(entry);
            assert_eq!(parsed.address.as_ref(), Some(&moved), "{entry}");
            assert_eq!(entry_text(parsed.held, &moved), entry, "written as read");
        }
        assert_eq!(parse(&ip, "10.0.0.1").expect("a bare address").address, None);
    }

    #[test]
    fn a_named_entry_decides_who_may_hold_its_address_even_beside_a_bare_one() {
        let moved = ObjectKey::new("a", "m0");
        let late = ObjectKey::new("b", "m1");
        assert!(allows(&[None], &late), "a bare entry names no IPAddress: any may hold it");
        assert!(allows(&[Some(moved.clone())], &moved));
        assert!(!allows(&[Some(moved.clone())], &late));
        assert!(!allows(&[None, Some(moved.clone())], &late), "a bare entry beside a named one opens nothing");
        assert!(allows(&[None, Some(moved.clone())], &moved));
    }
}
