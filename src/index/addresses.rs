//! The IPAddresses of our pools: their watch's events, our own writes, and the tombstones and doubts that keep the
//! two in order.

use kube::ResourceExt;

use super::{AddressRecord, Counted, Held, Notice, ObjectKey, PoolKey, State, moved_away, revision_of};
use crate::capi::IpAddress;
use crate::compact::Uid;

impl State {
    /// An IPAddress as its watch delivers it; returns its key.
    pub fn apply_address(&mut self, address: &IpAddress) -> ObjectKey {
        let key = self.shared_key(ObjectKey::new(&address.namespace().unwrap_or_default(), &address.name_any()));
        let uid = address.metadata.uid.as_deref().map(Uid::of);
        self.saw_addresses_until(&address.metadata);
        if self.is_deleted(&key, uid) {
            return key;
        }
        let Some(mut record) = AddressRecord::of(address) else {
            // Not one of our pools' (IPAddress specs are immutable, so it never was). A claim of ours of its name
            // cannot have it, and is told so: it looks again whenever the object changes or goes.
            if self.claims.get(&key).is_some() {
                self.wake(key.clone());
            }
            return key;
        };
        record.seen = true;
        if self.is_stale(&key, &record) {
            return key;
        }
        self.replacing(&key, uid);
        let held = Held::of(record.pool.kind, &address.spec);
        let pool = record.pool.clone();
        let cluster = record.cluster(&key);
        // Before a reservation it may take back or its record confirms the hold.
        let unseen_create = self.unseen_create_of(&pool, &key, uid, held);
        self.set_machines_address_aside(&pool, &key, held);
        let current = self.addresses.get(&key).filter(|r| r.uid == uid);
        let kept = current.is_some_and(|r| self.keeps_moving_away(r));
        record.moving_away_noticed = kept && current.is_some_and(|r| r.moving_away_noticed);
        record.deleting_when_moved = current.is_some_and(|r| r.deleting_when_moved);
        record.deleted_by_us = current.is_some_and(|r| r.deleted_by_us);
        let moving_away = pool.kind.is_global() && (record.moving_away || kept);
        record.moving_away = moving_away;
        if pool.kind.is_global() {
            // It holds a reserved address now (one that came back, or one a move left behind: never free between).
            moved_away::came_back(self, &pool, &key, held);
        }
        let claim_owner = record.claim_owner;
        let previous = self.addresses.insert(key.clone(), record);
        self.doubt_ended(previous.as_ref(), false);
        if let Some(old) = previous.filter(|p| *p.pool != *pool) {
            let woken = self.registry.forget(&old.pool, &key);
            self.wake_all(woken);
        }
        if let Some(duplicate) = self.registry.record(&pool, &key, held, cluster) {
            self.report_duplicate(&duplicate);
        }
        self.moved_before_recorded(&key, claim_owner, unseen_create);
        if moving_away {
            moved_away::still_moving_away(self, &pool, &key, held);
        }
        // The claim of the same name may need its finalizer, owner references or status (restore, move).
        self.wake(key.clone());
        key
    }

    /// Whether a watch event is about another object of the name than the one we recorded from our own write or read,
    /// before the watch delivered ours, and older than it: that object is gone already (ours could only be created
    /// once it was), and the watch, which delivers in order, has not caught up. One newer than our record (a relist
    /// after ours was deleted and another made, which a record from a read does not know of) is the news. The first
    /// event of our own object marks it seen; an event of it older than our record is stale too.
    pub(super) fn is_stale(&mut self, key: &ObjectKey, event: &AddressRecord) -> bool {
        let addresses = &mut self.addresses;
        let Some(current) = addresses.get_mut(key) else { return false };
        if current.uid != event.uid {
            let newer = event.revision != current.revision && event.revision.is_at_least(current.revision);
            return !current.seen && !newer;
        }
        current.seen = true;
        if std::mem::take(&mut current.doubtful) {
            self.registry.status_changed(&current.pool);
        }
        // An older event of the object than the one recorded from our own write or read (the watch catching up) is
        // no news: our DELETE's answer, recorded as being deleted, must not be undone by the watch's Added event
        // (soak seed 90039322: the claim was then bound to the IPAddress we had deleted).
        current.revision != event.revision && current.revision.is_at_least(event.revision)
    }

    /// Notes how far the IPAddress watch has come. Not while it lists: a list comes in name order, not in the order
    /// of changes (the list's newest object is taken once it is complete, [`Index::addresses_listed`]).
    pub(super) fn saw_addresses_until(&mut self, meta: &kube::api::ObjectMeta) {
        let Some(revision) = revision_of(meta).number() else { return };
        if let Some(listing) = self.listing_until.as_mut() {
            *listing = (*listing).max(revision);
            return;
        }
        self.addresses_seen_until = self.addresses_seen_until.max(revision);
    }

    /// The IPAddress watch delivered `object`'s DELETED event.
    pub fn address_delete_watched(&mut self, key: &ObjectKey, object: &IpAddress) {
        self.saw_addresses_until(&object.metadata);
        self.address_gone(key, object.metadata.uid.as_deref().map(Uid::of));
    }

    /// An IPAddress is gone: its watch's DELETED event, a list that no longer holds it, or a read of a record in
    /// doubt. Only the object `uid`: another of the same name may hold an address now. (Our own DELETE's answer is
    /// [`State::address_deleted_by_us`].)
    pub fn address_gone(&mut self, key: &ObjectKey, uid: Option<Uid>) {
        if let Some(uid) = uid {
            self.deleted.remove(&(key.clone(), uid));
        }
        let record = {
            let addresses = &mut self.addresses;
            match addresses.get(key) {
                Some(r) if uid.is_none() || r.uid.is_none() || r.uid == uid => addresses.remove(key),
                _ => None,
            }
        };
        if record.is_some() {
            self.claims_seen_gone.remove(key);
        }
        let Some(record) = record else {
            // Not ours (another provider's, or gone already): a claim of its name that it blocked may go on now.
            if self.claims.get(key).is_some() {
                self.wake(key.clone());
            }
            return;
        };
        self.others_claims.remove(&(key.clone(), record.uid));
        self.left_to_other_shards.remove(&(key.clone(), record.uid));
        if self.keeps_hold_for_claim(&record, key) {
            // Its claim still lives, and its machine may use the address: the claim makes its IPAddress again with
            // it. Held as an uncertain create's hold, so that no waiter takes it meanwhile, and it goes the way such a
            // hold goes if the claim goes or will not create it.
            self.registry.unconfirm(&record.pool, key);
            self.holds_without_create.insert(key.clone());
        } else {
            self.release_hold(&record.pool, key);
            self.notices.push(Notice::Counted(Counted::Released(record.pool.kind)));
        }
        self.wake(key.clone());
    }

    /// Whether the hold of the IPAddress `key` (`record`), gone from under its claim (a finalizer stripped, a
    /// restore's garbage collection), stays for that claim: it lives, uses the pool, and is not being deleted, the
    /// address is no duplicate (a duplicate's claim gets another), and it is the address the claim's condition names
    /// when it names one (a late IPAddress of another address, withdrawn, is no machine's). A claim clusterctl marked
    /// for a move keeps it too: its machine uses the address over there, and the claim's deletion makes the hold the
    /// reservation (seed 650784791: the mark seen before the IPAddress's deletion freed it for a waiting claim).
    fn keeps_hold_for_claim(&self, record: &AddressRecord, key: &ObjectKey) -> bool {
        // One moving away (clusterctl's, or left behind by a move) keeps its address reserved instead.
        if record.moving_away {
            return false;
        }
        let pool = &*record.pool;
        let held = self.registry.held_by(pool, key).and_then(Held::address);
        self.claims.get(key).is_some_and(|c| {
            c.deletion_timestamp.is_none()
                && c.uses_pool(pool.kind, &pool.namespace, &pool.name)
                && c.bound_address.is_none_or(|bound| held == Some(bound))
                // One a move left behind unmarked (its address reserved, not this claim's): adopt.rs lets it go, and
                // its hold becomes the reservation (seed 730861184: kept, the claim made it again with the address
                // the moved machine uses).
                && !self.left_behind_for(record, key, &c)
        }) && held.is_some()
            && self.registry.duplicate_of(pool, key).is_none()
    }

    /// The hold of an IPAddress that is gone ends: its address is free, unless the pool's annotation says it is in
    /// use on another management cluster and this is the IPAddress that moved (one a move left behind here), where
    /// it stays reserved. Another IPAddress holding a reserved address (a duplicate of the reservation, or of the
    /// moved one) just lets go.
    pub(super) fn release_hold(&mut self, pool: &PoolKey, key: &ObjectKey) {
        if self.keep_reserved(pool, key) {
            return;
        }
        let woken = self.registry.forget(pool, key);
        self.wake_all(woken);
    }

    /// If `key` holds a reserved address as the IPAddress that moved, its hold becomes the reservation (in one step,
    /// never free in between); returns whether it did.
    pub(super) fn keep_reserved(&mut self, pool: &PoolKey, key: &ObjectKey) -> bool {
        if pool.kind.is_global()
            && let Some(held) = self.registry.held_by(pool, key)
            && moved_away::may_hold_reserved(self, pool, key, held)
        {
            moved_away::moved_away(self, pool, key);
            return true;
        }
        false
    }

    /// Another object of the name than the one recorded is applied, newer: the recorded one is gone. If it held a
    /// reserved address as the IPAddress that moved, the reservation takes its hold over first (replaced in place,
    /// the hold would be released, and the address free here while in use over there).
    pub(super) fn replacing(&mut self, key: &ObjectKey, uid: Option<Uid>) {
        let replaced = self.addresses.get(key).filter(|r| r.uid != uid).map(|r| r.pool.clone());
        if let Some(pool) = replaced {
            self.keep_reserved(&pool, key);
        }
    }

    /// Whether the IPAddress `key` is the one an entry of the pool's moved-away annotation names for the address it
    /// holds: it came back (or was left behind), and wins over any other IPAddress holding that address.
    pub fn is_moved_holder(&self, pool: &PoolKey, key: &ObjectKey) -> bool {
        pool.kind.is_global()
            && self.registry.held_by(pool, key).is_some_and(|held| moved_away::is_named_holder(self, pool, key, held))
    }

    /// The IPAddress watch begins a list: the tombstones it must list again to keep.
    pub fn addresses_listing(&mut self) {
        self.unlisted_tombstones = Some(self.deleted.clone());
        self.listing_until = Some(0);
    }

    /// The watch listed every IPAddress again: the tombstones it did not list are not needed any more, and the records
    /// of our own writes it did not list (a list marks what it holds seen) may be of objects gone already.
    pub fn addresses_listed(&mut self) {
        if let Some(listed_until) = self.listing_until.take() {
            self.addresses_seen_until = self.addresses_seen_until.max(listed_until);
        }
        if let Some(gone) = self.unlisted_tombstones.take() {
            let deleted = &mut self.deleted;
            for tombstone in gone {
                deleted.remove(&tombstone);
            }
        }
        let mut doubtful = Vec::new();
        for (key, record) in self.addresses.iter_mut().filter(|(_, r)| !r.seen) {
            if !std::mem::replace(&mut record.doubtful, true) {
                self.registry.status_changed(&record.pool);
            }
            doubtful.push(key.clone());
        }
        // In order: the claims woken are queued in it (a hash map's order differs from one process to the next).
        doubtful.sort_unstable();
        self.wake_all(doubtful);
        // Another manager's claims are looked at again (one may have gone while no manager served it).
        self.others_claims.clear();
        // The IPAddresses that blocked claims may have gone while the watch was away: no event will say so.
        let mut blocked: Vec<ObjectKey> = std::mem::take(&mut self.blocked_elsewhere).into_iter().collect();
        blocked.sort_unstable();
        self.wake_all(blocked);
    }

    /// A doubtful record (see [`AddressRecord::doubtful`]) was read: `live` is what the API server holds now of that
    /// name. The record stays if it is that object, else it goes (an object of the name that is not ours to record
    /// yet comes with the watch).
    pub fn doubt_resolved(&mut self, key: &ObjectKey, uid: Option<Uid>, live: Option<&IpAddress>) {
        let live_uid = live.and_then(|a| a.metadata.uid.as_deref()).map(Uid::of);
        if live_uid.is_some() && live_uid == uid {
            if let Some(record) = self.addresses.get_mut(key).filter(|r| r.uid == uid && r.doubtful) {
                record.doubtful = false;
                self.registry.status_changed(&record.pool);
            }
            return;
        }
        let still_doubtful = self.addresses.get(key).is_some_and(|r| r.uid == uid && r.doubtful && !r.seen);
        if still_doubtful {
            self.address_gone(key, uid);
        }
    }

    /// A record (`doubtful` or not) replaced the `previous` one: if a relist had left that in doubt and the new one
    /// is not, its pool's status counts the hold again.
    fn doubt_ended(&mut self, previous: Option<&AddressRecord>, doubtful: bool) {
        if let Some(previous) = previous.filter(|p| p.doubtful && !doubtful) {
            self.registry.status_changed(&previous.pool);
        }
    }

    /// The claim `key` cannot get an IPAddress: one of its name exists for another pool or another provider. It is
    /// woken when that object changes or goes, and after every list of the IPAddress watch.
    pub fn blocked_elsewhere(&mut self, key: &ObjectKey) {
        self.blocked_elsewhere.insert(key.clone());
    }

    /// This manager is about to DELETE the IPAddress `key` of UID `uid` (`AddressRecord::deleted_by_us`).
    pub fn deleting_ourselves(&mut self, key: &ObjectKey, uid: Uid) {
        if let Some(record) = self.addresses.get_mut(key).filter(|r| r.uid == Some(uid)) {
            record.deleted_by_us = true;
        }
    }

    pub fn address(&self, key: &ObjectKey) -> Option<AddressRecord> {
        self.addresses.get(key).cloned()
    }

    pub fn address_keys(&self) -> Vec<ObjectKey> {
        self.addresses.keys().cloned().collect()
    }

    /// The name and UID of every IPAddress recorded (what a relist must see again to keep).
    pub fn address_ids(&self) -> Vec<(ObjectKey, Option<Uid>)> {
        self.addresses.iter().map(|(k, r)| (k.clone(), r.uid)).collect()
    }

    pub fn address_count(&self) -> usize {
        self.addresses.len()
    }

    /// Records an IPAddress we just created, read or patched (the watch will confirm it); `None` when it is not of
    /// our pools.
    pub fn remember_address(&mut self, key: &ObjectKey, object: &IpAddress) -> Option<AddressRecord> {
        let mut record = AddressRecord::of(object)?;
        if let Some(uid) = record.uid
            && self.deleted.contains(&(key.clone(), uid))
        {
            return None;
        }
        {
            let addresses = &self.addresses;
            match addresses.get(key).filter(|c| c.uid == record.uid) {
                // Older news of the object than the record (the watch, or a later read or answer, showed a newer
                // version): taken, it would undo what the newer one told (soak seed 802474025: a release's read from
                // before the garbage collector took a dangling claim owner reference off put it back, and the orphan
                // release, finding the live object without it, never released the IPAddress).
                Some(current)
                    if current.revision != record.revision && current.revision.is_at_least(record.revision) =>
                {
                    return Some(current.clone());
                }
                Some(current) => {
                    record.seen = current.seen;
                    // An answer may be of a request sent before the relist that did not show the object, and older news
                    // than that list (the object may be gone since; what the list had seen does not tell: it is its
                    // newest object's version, not the list's): the doubt stays for its own read, which comes next
                    // (test `an_answer_older_than_the_list_that_left_a_record_in_doubt_does_not_end_the_doubt`, test
                    // `an_answer_to_a_request_of_ours_does_not_end_a_doubt`).
                    record.doubtful = current.doubtful;
                    record.deleting_when_moved = current.deleting_when_moved;
                    record.deleted_by_us = current.deleted_by_us;
                    // What we read or wrote knows nothing of a move its claim's deletion told (no mark on it yet):
                    // forgotten, the hold would stay for a new claim of the name (soak seed 110198788).
                    if self.keeps_moving_away(current) {
                        record.moving_away = true;
                        record.moving_away_noticed = current.moving_away_noticed;
                    }
                }
                // The watch delivered this version of it already, and it is not recorded: it was deleted since (what
                // we read or wrote is older news than the watch's).
                None if revision_of(&object.metadata).number().is_some_and(|r| r <= self.addresses_seen_until) => {
                    return None;
                }
                None => {}
            }
        }
        self.replacing(key, record.uid);
        let held = Held::of(record.pool.kind, &object.spec);
        let unseen_create = self.unseen_create_of(&record.pool, key, record.uid, held);
        self.set_machines_address_aside(&record.pool, key, held);
        if record.pool.kind.is_global() {
            // It holds a reserved address now (one that came back with its Cluster, read before the watch saw it).
            moved_away::came_back(self, &record.pool, key, held);
        }
        if let Some(duplicate) = self.registry.record(&record.pool, key, held, record.cluster(key)) {
            self.report_duplicate(&duplicate);
        }
        let previous = self.addresses.insert(key.clone(), record.clone());
        self.doubt_ended(previous.as_ref(), record.doubtful);
        if let Some(old) = previous.filter(|p| *p.pool != *record.pool) {
            let woken = self.registry.forget(&old.pool, key);
            self.wake_all(woken);
        }
        self.moved_before_recorded(key, record.claim_owner, unseen_create);
        self.addresses.get(key).cloned()
    }

    /// An object of `key`'s name holding `held` is about to be recorded while the name's hold, unconfirmed, is the
    /// address its live claim is bound to (its machine's: its IPAddress deleted from under it, being made again), and
    /// `held` is another: a deposed leader's late create. Recorded in its place, the machine's address would be free,
    /// and a waiting claim could take it while the claim withdraws the late one (scenario
    /// `a_late_create_under_a_bound_claim_whose_ipaddress_a_person_deleted_frees_not_its_machines_address`). It is set
    /// aside, still held, and the claim takes it back when it allocates again (`Registry::set_aside`).
    fn set_machines_address_aside(&mut self, pool: &PoolKey, key: &ObjectKey, held: Held) {
        let Some(kept) = self.registry.held_by(pool, key).filter(|kept| *kept != held) else { return };
        let machines = self.claims.get(key).is_some_and(|c| {
            c.address_ref().is_some()
                && c.bound_address.is_some_and(|bound| kept.address() == Some(bound))
                && c.deletion_timestamp.is_none()
                && c.uses_pool(pool.kind, &pool.namespace, &pool.name)
        });
        if machines && self.registry.holds_unconfirmed(pool, key) {
            self.registry.set_aside(pool, key);
        }
    }

    /// Whether an IPAddress of `key` (`uid`, holding `held`) may be the object of our create whose answer we have not
    /// had: not recorded before, and the name's hold still unconfirmed, of what it holds. A later event of an object
    /// recorded already (its owner reference collected, a `kubectl replace`) is not (test
    /// `a_later_ownerless_event_of_a_recorded_ipaddress_takes_no_left_over_note`).
    fn unseen_create_of(&self, pool: &PoolKey, key: &ObjectKey, uid: Option<Uid>, held: Held) -> bool {
        // No note, nothing to look up (every watch event comes here).
        !self.moved_before_created.is_empty()
            && self.registry.holds_unconfirmed(pool, key)
            && self.registry.held_by(pool, key) == Some(held)
            && self.addresses.get(key).is_none_or(|r| r.uid != uid)
    }

    /// The first record of `key` appeared (our create's answer, a read, or the watch's event) while its claim, whose
    /// UID the object's owner reference carries, is noted as gone for a move before there was a record to mark: the
    /// move is recorded now, before an orphan check could free the address the moved machine uses. Whichever comes
    /// first consumes the note: a create answered, or one whose answer was lost and that its worker then read or the
    /// watch showed (scenario `a_claim_moved_away_while_the_answer_to_its_create_was_lost_keeps_its_address_reserved`).
    /// The garbage collector takes the owner reference of the deleted claim off (the pool still owns the object) before
    /// we may see it: an IPAddress of the name with no claim owner that may be our unanswered create's
    /// (`unseen_create`; another claim's own object names its claim) consumes the name's notes (scenario
    /// `a_claim_moved_away_while_the_answer_to_its_create_was_lost_keeps_its_address_reserved`).
    fn moved_before_recorded(&mut self, key: &ObjectKey, claim_owner: Option<Uid>, unseen_create: bool) {
        let noted = match claim_owner {
            Some(uid) => self.moved_before_created.remove(&(key.clone(), uid)),
            None if unseen_create => {
                let before = self.moved_before_created.len();
                self.moved_before_created.retain(|(k, _)| k != key);
                self.moved_before_created.len() < before
            }
            None => false,
        };
        if noted {
            moved_away::claim_moved_away(self, key, true);
        }
    }

    /// We deleted the IPAddress `key` (`uid`) of `pool` and it is gone: its address is free at once, before the
    /// watch confirms it, and late events about it are ignored.
    pub fn address_deleted_by_us(&mut self, key: &ObjectKey, pool: &PoolKey, uid: Option<&str>) {
        let uid = uid.map(Uid::of);
        if let Some(uid) = uid {
            self.deleted.insert((key.clone(), uid));
        }
        let ours = self.addresses.get(key).is_none_or(|r| r.uid.is_none() || uid.is_none() || r.uid == uid);
        if !ours {
            return;
        }
        self.release_hold(pool, key);
        self.notices.push(Notice::Counted(Counted::Released(pool.kind)));
        if self.addresses.remove(key).is_some() {
            self.claims_seen_gone.remove(key);
        }
    }
}
