//! The index: the one owner of what the controllers know, fed by the watches (`crate::runtime::watch`) and by our own
//! writes the moment they succeed. It holds the claims of our pool kinds, the records of the IPAddresses of our pools
//! and the allocator state they hold (`registry`), the typed pools, which Clusters exist and are paused, and what we
//! keep per claim while it is reconciled. It is synchronous and does no I/O: every change it notices that concerns a
//! claim or a pool goes to one [`Sink`], so the controllers never forward wakes by hand, and a test can drive it with
//! synthetic events.

mod claims;
pub mod moved_away;
pub mod registry;
pub mod relist;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use kube::ResourceExt;
use tracing::info;

use crate::api::{CLUSTER_NAME_LABEL, DELETE_FOR_MOVE_ANNOTATION, PROTECT_ADDRESS_FINALIZER, Pool};
use crate::capi::{Claim, IpAddress};
use crate::compact::{ResourceVersion, Uid, intern};
use crate::ipam::PoolCounts;
use crate::metrics::Metrics;
use claims::ClaimCache;
pub use registry::Registry;
pub use registry::{AllocateError, Assigned, Duplicate, Held, ObjectKey, PoolKey};

/// Where the index sends what it noticed.
pub trait Sink: Send + Sync {
    /// Reconcile this claim soon.
    fn wake(&self, claim: ObjectKey);
    /// Reconcile this claim before those woken by `wake`: it waits for an address.
    fn wake_first(&self, claim: ObjectKey);
    /// This pool's object changed: its finalizer and status get another look.
    fn pool_changed(&self, pool: PoolKey);
    /// This claim is gone: an IPAddress we made for it is checked at once (docs/compatibility.md D11).
    fn claim_gone(&self, claim: ObjectKey);
    /// Reservations of this global pool changed and are to be written into its annotation (`moved_away`).
    fn moved_away_changed(&self, pool: PoolKey);
}

/// An IPAddress of one of our pools, as the controllers keep it: what allocation, adoption and the orphan checks
/// compare, and no more (100,000 of these stay small). Repairs read the live object.
#[derive(Clone, Debug)]
pub struct AddressRecord {
    pub uid: Option<Uid>,
    /// The resourceVersion of the version recorded: whether an event of another object of the name is older or newer
    /// news than this record.
    pub revision: ResourceVersion,
    /// The watch delivered this object (by UID). Until then the record comes from our own write, and the watch,
    /// which delivers in order, can only bring older news of this name.
    pub seen: bool,
    /// A list of the watch completed without it while it was not seen yet: it may have been deleted before the list,
    /// and then no event will ever say so. Its claim's worker reads it to find out.
    pub doubtful: bool,
    /// Shared by every IPAddress of the pool. The address itself is the registry's (`Registry::held_by`).
    pub pool: Arc<PoolKey>,
    /// Our ProtectAddress finalizer is on it.
    pub protected: bool,
    /// The UID of its IPAddressClaim owner reference, if any.
    pub claim_owner: Option<Uid>,
    /// The UID of its owner reference to the pool, if any.
    pub pool_owner: Option<Uid>,
    pub cluster_label: Option<Arc<str>>,
    pub deleting: bool,
    /// clusterctl is deleting it for a move (`moved_away`).
    pub moving_away: bool,
}

impl AddressRecord {
    /// The record of an IPAddress, `None` when it does not reference one of our pools.
    pub fn of(object: &IpAddress) -> Option<Self> {
        let kind = object.spec.pool_ref.our_kind()?;
        let namespace = object.metadata.namespace.as_deref().unwrap_or_default();
        let pool = PoolKey::new(kind, namespace, &object.spec.pool_ref.name).shared();
        let owner = |k: &str, name: &str| {
            object
                .metadata
                .owner_references
                .iter()
                .flatten()
                .find(|o| o.kind == k && o.name == name)
                .map(|o| Uid::of(&o.uid))
        };
        Some(Self {
            uid: object.metadata.uid.as_deref().map(Uid::of),
            revision: revision_of(&object.metadata),
            seen: false,
            doubtful: false,
            protected: object.metadata.finalizers.iter().flatten().any(|f| f == PROTECT_ADDRESS_FINALIZER),
            claim_owner: owner("IPAddressClaim", &object.spec.claim_ref.name),
            pool_owner: owner(kind.kind(), &pool.name),
            cluster_label: object.metadata.labels.as_ref().and_then(|l| l.get(CLUSTER_NAME_LABEL)).map(|v| intern(v)),
            deleting: object.metadata.deletion_timestamp.is_some(),
            moving_away: object
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(DELETE_FOR_MOVE_ANNOTATION)),
            pool,
        })
    }

    /// Made for a claim: its owner reference, or our finalizer (the garbage collector takes the owner reference of
    /// a claim that went without our release off an IPAddress whose pool still owns it, and `spec.claimRef` still
    /// names the claim), whether or not our finalizer is still on it.
    pub fn made_for_a_claim(&self) -> bool {
        self.claim_owner.is_some() || self.protected
    }
}

/// What the controllers keep about one claim (by UID) while it is reconciled; forgotten with the claim.
#[derive(Default)]
struct ClaimBook {
    /// A digest of the Ready state we last wrote: a stale cached claim does not trigger a second write.
    written: Option<u64>,
    /// When it was first seen without an address (the allocation latency).
    first_seen: Option<Instant>,
    /// Failed reconciles in a row (the backoff).
    failures: u32,
    /// The address its IPAddress held when that was deleted from under the live claim: it gets it back if free.
    vanished: Option<(PoolKey, Box<str>)>,
}

impl ClaimBook {
    fn is_empty(&self) -> bool {
        self.written.is_none() && self.first_seen.is_none() && self.failures == 0 && self.vanished.is_none()
    }
}

/// What the index noticed while it was written: delivered to the [`Sink`] once its lock is released, in order.
#[derive(Debug, PartialEq, Eq)]
pub enum Notice {
    Wake(ObjectKey),
    WakeFirst(ObjectKey),
    PoolChanged(PoolKey),
    ClaimGone(ObjectKey),
    MovedAwayChanged(PoolKey),
}

/// Everything the index knows, written through `&mut self` by one caller at a time ([`Index`] holds it behind one
/// lock): the invariants between its parts hold at every method's end, with no lock order to keep.
pub struct State {
    claims: ClaimCache,
    addresses: HashMap<ObjectKey, AddressRecord>,
    registry: Registry,
    pools: HashMap<PoolKey, Arc<Pool>>,
    /// Every Cluster (namespace/name), and whether it is paused.
    clusters: HashMap<ObjectKey, bool>,
    books: HashMap<Uid, ClaimBook>,
    /// IPAddresses we deleted, by name and UID, until the watch reports them gone: a late event about one of them
    /// (the finalizer removal that preceded the delete) must not bring its address back into use, and a new object of
    /// the same name is not one of them.
    deleted: HashSet<(ObjectKey, Uid)>,
    /// While the IPAddress watch lists again: the tombstones that were there when the list began and that it has not
    /// listed yet. Those it never lists are gone for good (the list is a quorum read, sent after they were made).
    unlisted_tombstones: Option<HashSet<(ObjectKey, Uid)>>,
    /// The newest resourceVersion the IPAddress watch delivered: it has delivered every change up to it.
    addresses_seen_until: u64,
    /// While the IPAddress watch lists: the newest resourceVersion listed so far.
    listing_until: Option<u64>,
    /// Clusters deleted while paused (moved away by clusterctl, which deletes them last): claims of theirs that go
    /// later, with or without their `delete-for-move`, went with them.
    moved_clusters: HashSet<ObjectKey>,
    moved_away: moved_away::Ledger,
    /// What to tell the sink once the lock is released.
    notices: Vec<Notice>,
    metrics: Arc<Metrics>,
}

fn revision_of(meta: &kube::api::ObjectMeta) -> ResourceVersion {
    ResourceVersion::of(meta.resource_version.as_deref().unwrap_or_default())
}

impl State {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self {
            claims: ClaimCache::default(),
            addresses: HashMap::new(),
            registry: Registry::default(),
            pools: HashMap::new(),
            clusters: HashMap::new(),
            books: HashMap::new(),
            deleted: HashSet::new(),
            unlisted_tombstones: None,
            addresses_seen_until: 0,
            listing_until: None,
            moved_clusters: HashSet::new(),
            moved_away: moved_away::Ledger::default(),
            notices: Vec::new(),
            metrics,
        }
    }

    /// What was noticed since the last call.
    pub fn take_notices(&mut self) -> Vec<Notice> {
        std::mem::take(&mut self.notices)
    }

    fn wake(&mut self, claim: ObjectKey) {
        self.notices.push(Notice::Wake(claim));
    }

    fn wake_all(&mut self, claims: Vec<ObjectKey>) {
        self.notices.extend(claims.into_iter().map(Notice::Wake));
    }

    /// How many claims wait for an address, and the longest wait.
    pub fn waiting(&self) -> (usize, Duration) {
        self.books
            .values()
            .filter_map(|b| b.first_seen)
            .fold((0, Duration::ZERO), |(n, longest), seen| (n + 1, longest.max(seen.elapsed())))
    }

    // ---- Claims ----

    /// A claim as its watch delivers it: one of our pool kinds' is kept and reconciled; any other is not ours.
    pub fn apply_claim(&mut self, mut claim: Claim) {
        claim.key = self.shared_key(claim.key);
        let key = claim.key.clone();
        if self.claims.get(&key).is_some_and(|c| c.uid != claim.uid) {
            // Another claim of the name: the one cached was deleted while no watch event said so (a relist).
            self.delete_claim(&key);
        }
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

    /// A claim is gone: everything kept for it goes, and an IPAddress we made for it is checked. Deleted by
    /// `clusterctl move`, an address of a global pool stays reserved here.
    pub fn delete_claim(&mut self, key: &ObjectKey) {
        let Some(claim) = self.claims.remove(key) else { return };
        self.books.remove(&claim.uid.uid());
        let moved_cluster = claim
            .cluster()
            .is_some_and(|cluster| self.moved_clusters.contains(&ObjectKey::new(&key.namespace, cluster)));
        if claim.moving_away || moved_cluster {
            moved_away::claim_moved_away(self, key);
        }
        if let Some(kind) = claim.pool_kind {
            let pool = PoolKey::new(kind, &key.namespace, &claim.pool_name);
            self.claim_deleted_for_good(&pool, &claim);
            // A claim deleted while it waited must not take the wake of an address that frees up.
            self.registry.stop_waiting(&pool, key);
            if self.registry.holds_unconfirmed(&pool, key) {
                // A create of its IPAddress failed uncertainly: its worker finds out whether it happened.
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

    fn wake_claims_where(&mut self, predicate: impl Fn(&Claim) -> bool) {
        self.wake_all(self.claims.keys_where(predicate));
    }

    /// The copy of `key` the index holds already, if any: a claim and its IPAddress (and the IPAddress's hold in the
    /// registry) share one copy of the name.
    fn shared_key(&self, key: ObjectKey) -> ObjectKey {
        if let Some(claim) = self.claims.get(&key) {
            return claim.key.clone();
        }
        self.addresses.get_key_value(&key).map_or(key, |(k, _)| k.clone())
    }

    /// Runs `f` on the book of a cached claim; `None` (and nothing kept) once the claim is gone.
    fn book<R>(&mut self, claim: &Claim, f: impl FnOnce(&mut ClaimBook) -> R) -> Option<R> {
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

    /// Whether the Ready state `digest` is the one we last wrote for the claim.
    pub fn already_written(&mut self, claim: &Claim, digest: u64) -> bool {
        self.book(claim, |b| b.written == Some(digest)).unwrap_or(false)
    }

    pub fn remember_written(&mut self, claim: &Claim, digest: u64) {
        self.book(claim, |b| b.written = Some(digest));
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

    /// Per-claim exponential backoff after a failure: 200 ms doubling to 5 minutes, reset on success.
    pub fn backoff(&mut self, claim: &Claim) -> Duration {
        let n = self
            .book(claim, |b| {
                b.failures = (b.failures + 1).min(12);
                b.failures
            })
            .unwrap_or(1);
        let delay = Duration::from_millis(200).saturating_mul(1 << (n - 1)).min(Duration::from_secs(300));
        // Spread retries of a burst a little.
        let jitter = Duration::from_millis(crate::compact::digest(&claim.uid) % 100);
        delay + jitter
    }

    pub fn reset_backoff(&mut self, claim: &Claim) {
        self.book(claim, |b| b.failures = 0);
    }

    /// The address the claim's IPAddress held in `pool` before it was deleted from under the live claim, once.
    pub fn take_vanished_address(&mut self, claim: &Claim, pool: &PoolKey) -> Option<Box<str>> {
        self.book(claim, |b| b.vanished.take().filter(|(p, _)| p == pool).map(|(_, address)| address)).flatten()
    }

    /// How many claims have something kept about them (for tests and diagnostics).
    pub fn books(&self) -> usize {
        self.books.len()
    }

    // ---- IPAddresses ----

    /// An IPAddress as its watch delivers it; returns its key.
    pub fn apply_address(&mut self, address: &IpAddress) -> ObjectKey {
        let key = self.shared_key(ObjectKey::new(&address.namespace().unwrap_or_default(), &address.name_any()));
        let uid = address.metadata.uid.as_deref().map(Uid::of);
        self.saw_addresses_until(&address.metadata);
        if self.is_deleted(&key, uid) {
            return key;
        }
        let Some(mut record) = AddressRecord::of(address) else {
            // Not one of our pools' (IPAddress specs are immutable, so it never was).
            return key;
        };
        record.seen = true;
        if self.is_stale(&key, &record) {
            return key;
        }
        self.replacing(&key, uid);
        let held = Held::of(record.pool.kind, &address.spec);
        let pool = record.pool.clone();
        let moving_away = pool.kind.is_global()
            && (record.moving_away || self.addresses.get(&key).is_some_and(|r| r.moving_away && r.uid == uid));
        record.moving_away = moving_away;
        if pool.kind.is_global() {
            // It holds a reserved address now (one that came back, or one a move left behind: never free between).
            moved_away::came_back(self, &pool, &key, held);
        }
        let previous = self.addresses.insert(key.clone(), record);
        if let Some(old) = previous.filter(|p| *p.pool != *pool) {
            let woken = self.registry.forget(&old.pool, &key);
            self.wake_all(woken);
        }
        if let Some(duplicate) = self.registry.record(&pool, &key, held) {
            self.report_duplicate(&duplicate);
        }
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
    /// event of our own object marks it seen.
    fn is_stale(&mut self, key: &ObjectKey, event: &AddressRecord) -> bool {
        let addresses = &mut self.addresses;
        let Some(current) = addresses.get_mut(key) else { return false };
        if current.uid != event.uid {
            let newer = event.revision != current.revision && event.revision.is_at_least(current.revision);
            return !current.seen && !newer;
        }
        current.seen = true;
        current.doubtful = false;
        false
    }

    /// An IPAddress is gone (its watch's DELETED event, or a list that no longer holds it). Only the object `uid`:
    /// another of the same name may hold an address now.
    /// Notes how far the IPAddress watch has come. Not while it lists: a list comes in name order, not in the order
    /// of changes (the list's newest object is taken once it is complete, [`Index::addresses_listed`]).
    fn saw_addresses_until(&mut self, meta: &kube::api::ObjectMeta) {
        let Some(revision) = revision_of(meta).number() else { return };
        if let Some(listing) = self.listing_until.as_mut() {
            *listing = (*listing).max(revision);
            return;
        }
        self.addresses_seen_until = self.addresses_seen_until.max(revision);
    }

    /// The IPAddress watch delivered `object`'s DELETED event.
    pub fn address_deleted(&mut self, key: &ObjectKey, object: &IpAddress) {
        self.saw_addresses_until(&object.metadata);
        self.delete_address(key, object.metadata.uid.as_deref().map(Uid::of));
    }

    pub fn delete_address(&mut self, key: &ObjectKey, uid: Option<Uid>) {
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
        let Some(record) = record else { return };
        let held = self.registry.held_by(&record.pool, key);
        self.release_hold(&record.pool, key);
        self.metrics.released(record.pool.kind);
        // If its claim still lives, it gets a new IPAddress: with the same address, while that is still free.
        if let Some(claim) = self.claims.get(key).filter(|c| c.deletion_timestamp.is_none())
            && let Some(address) = held.and_then(Held::address)
        {
            self.book(&claim, |b| b.vanished = Some(((*record.pool).clone(), address.to_string().into())));
        }
        self.wake(key.clone());
    }

    /// The hold of an IPAddress that is gone ends: its address is free, unless the pool's annotation says it is in
    /// use on another management cluster and this is the IPAddress that moved (one a move left behind here), where
    /// it stays reserved. Another IPAddress holding a reserved address (a duplicate of the reservation, or of the
    /// moved one) just lets go.
    fn release_hold(&mut self, pool: &PoolKey, key: &ObjectKey) {
        if self.keep_reserved(pool, key) {
            return;
        }
        let woken = self.registry.forget(pool, key);
        self.wake_all(woken);
    }

    /// If `key` holds a reserved address as the IPAddress that moved, its hold becomes the reservation (in one step,
    /// never free in between); returns whether it did.
    fn keep_reserved(&mut self, pool: &PoolKey, key: &ObjectKey) -> bool {
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
    fn replacing(&mut self, key: &ObjectKey, uid: Option<Uid>) {
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
            record.doubtful = true;
            doubtful.push(key.clone());
        }
        self.wake_all(doubtful);
    }

    /// A doubtful record (see [`AddressRecord::doubtful`]) was read: `live` is what the API server holds now of that
    /// name. The record stays if it is that object, else it goes (an object of the name that is not ours to record
    /// yet comes with the watch).
    pub fn doubt_resolved(&mut self, key: &ObjectKey, uid: Option<Uid>, live: Option<&IpAddress>) {
        let live_uid = live.and_then(|a| a.metadata.uid.as_deref()).map(Uid::of);
        if live_uid.is_some() && live_uid == uid {
            if let Some(record) = self.addresses.get_mut(key).filter(|r| r.uid == uid) {
                record.doubtful = false;
            }
            return;
        }
        let still_doubtful = self.addresses.get(key).is_some_and(|r| r.uid == uid && r.doubtful && !r.seen);
        if still_doubtful {
            self.delete_address(key, uid);
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
                Some(current) => record.seen = current.seen,
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
        if record.pool.kind.is_global() {
            // It holds a reserved address now (one that came back with its Cluster, read before the watch saw it).
            moved_away::came_back(self, &record.pool, key, held);
        }
        if let Some(duplicate) = self.registry.record(&record.pool, key, held) {
            self.report_duplicate(&duplicate);
        }
        let previous = self.addresses.insert(key.clone(), record.clone());
        if let Some(old) = previous.filter(|p| *p.pool != *record.pool) {
            let woken = self.registry.forget(&old.pool, key);
            self.wake_all(woken);
        }
        Some(record)
    }

    /// We deleted the IPAddress `key` (`uid`) of `pool` and it is gone: its address is free at once, before the
    /// watch confirms it, and late events about it are ignored.
    pub fn deleted_address(&mut self, key: &ObjectKey, pool: &PoolKey, uid: Option<&str>) {
        let uid = uid.map(Uid::of);
        if let Some(uid) = uid {
            self.deleted.insert((key.clone(), uid));
        }
        let ours = self.addresses.get(key).is_none_or(|r| r.uid.is_none() || uid.is_none() || r.uid == uid);
        if !ours {
            return;
        }
        self.release_hold(pool, key);
        self.metrics.released(pool.kind);
        self.addresses.remove(key);
    }

    /// Our create of `key`'s IPAddress was refused (or found another in its place): its hold is given up.
    pub fn abandon(&mut self, pool: &PoolKey, key: &ObjectKey) {
        let woken = self.registry.abandon(pool, key);
        self.wake_all(woken);
    }

    /// The claim `key` is gone, and no IPAddress of its name exists: a hold its uncertain create left is given up,
    /// unless a claim of that name is back (its own reconcile owns the hold then). Decided in one step, so
    /// a new claim's allocation cannot slip in between.
    pub fn abandon_orphaned_hold(&mut self, pool: &PoolKey, key: &ObjectKey) {
        let taken_over = || self.claims.get(key).is_some_and(|c| c.uses_pool(pool.kind, &pool.namespace, &pool.name));
        let woken = self.registry.abandon_unless(pool, key, taken_over);
        self.wake_all(woken);
    }

    /// Whether `uid` of `key` is one we deleted (its events are stale).
    fn is_deleted(&mut self, key: &ObjectKey, uid: Option<Uid>) -> bool {
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
    fn report_duplicate(&mut self, duplicate: &Duplicate) {
        let holders: Vec<String> = duplicate.holders.iter().map(ToString::to_string).collect();
        tracing::error!(
            pool = %duplicate.pool,
            address = %duplicate.held,
            ipaddresses = holders.join(", "),
            "DUPLICATE ADDRESS: one address of the pool is held by more than one IPAddress"
        );
        self.metrics.duplicate_detected(duplicate.pool.kind);
        // Their claims' conditions name the duplicate (an unbound one withdraws its IPAddress).
        self.wake_all(duplicate.holders.clone());
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

    /// Whether the address the IPAddress `key` holds in `pool` is still to be written into the pool's moved-away
    /// annotation.
    pub fn moved_away_unwritten(&self, pool: &PoolKey, key: &ObjectKey) -> bool {
        self.registry.held_by(pool, key).is_some_and(|held| self.moved_away_unwritten_for(pool, held))
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
            .filter(|(k, r)| {
                // A claim of the name in another pool cannot adopt it (IPAddress specs are immutable): still an orphan.
                r.made_for_a_claim()
                    && !self.claims.get(k).is_some_and(|c| c.uses_pool(r.pool.kind, &r.pool.namespace, &r.pool.name))
            })
            .map(|(k, r)| (k.clone(), r.clone()))
            .collect();
        candidates.into_iter().filter(|(key, record)| !self.keeps_orphan(key, record)).collect()
    }

    /// Whether the IPAddress `key`, whose claim is gone, is kept: its Cluster is paused (a move in progress), unless a
    /// bound claim's IPAddress holds its address too (this one is then a late create no claim was ever bound to, and
    /// kept, it stays a duplicate for as long as the pause lasts).
    pub fn keeps_orphan(&self, key: &ObjectKey, record: &AddressRecord) -> bool {
        self.keeps_addresses(&key.namespace, record) && !self.duplicates_a_bound_one(&record.pool, key)
    }

    /// Whether another IPAddress holding the address `key` holds in `pool` is the one of a live claim bound to it.
    fn duplicates_a_bound_one(&self, pool: &PoolKey, key: &ObjectKey) -> bool {
        self.registry.duplicate_of(pool, key).is_some_and(|d| {
            d.holders.iter().any(|other| {
                other != key
                    && self
                        .claims
                        .get(other)
                        .is_some_and(|c| c.deletion_timestamp.is_none() && c.address_ref() == Some(&*other.name))
            })
        })
    }

    /// Whether the IPAddress's Cluster is paused (a move in progress): it keeps its addresses.
    pub fn keeps_addresses(&self, namespace: &str, record: &AddressRecord) -> bool {
        record.cluster_label.as_deref().is_some_and(|cluster| self.cluster_paused(namespace, cluster) == Some(true))
    }

    // ---- Allocation ----

    /// The address for a claim without an IPAddress, held in the pool's allocator before anything is written:
    /// `requested` when given (docs/compatibility.md D14), else the one its IPAddress held before it was deleted from
    /// under the live claim (while still free), else the lowest free one.
    pub fn allocate(
        &mut self,
        claim: &Claim,
        pool: &PoolKey,
        requested: Option<&str>,
    ) -> Result<Assigned, AllocateError> {
        if requested.is_some() {
            return self.registry.allocate(pool, &claim.key, requested);
        }
        match self.take_vanished_address(claim, pool) {
            Some(previous) => match self.registry.allocate(pool, &claim.key, Some(&previous)) {
                Err(AllocateError::Requested { .. }) => self.registry.allocate(pool, &claim.key, None),
                again => again,
            },
            None => self.registry.allocate(pool, &claim.key, None),
        }
    }

    /// Our create of the claim's IPAddress succeeded: its hold is confirmed and the object recorded. Returns the
    /// record (`None` when a newer event already said it is gone) and the claim's allocation latency.
    pub fn address_created(
        &mut self,
        claim: &Claim,
        pool: &PoolKey,
        created: &IpAddress,
    ) -> (Option<AddressRecord>, Option<Duration>) {
        self.registry.confirm(pool, &claim.key);
        let record = self.remember_address(&claim.key, created);
        (record, self.allocation_latency(claim))
    }

    /// The claim found the pool exhausted: it is woken when an address frees up.
    pub fn wait_for_address(&mut self, pool: &PoolKey, claim: &ObjectKey) {
        self.registry.wait(pool, claim);
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
    pub(crate) fn registry(&mut self) -> &mut Registry {
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
            moved_away::sync(self, &key, &pool);
        }
        // What a claim's reconcile decides on: another pool object of the name (deleted and created again while
        // the watch relisted), a new generation, pause, deletion.
        let state_of = |p: &Pool| (p.metadata.uid.clone(), p.metadata.generation, p.is_paused(), p.is_deleting());
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
        self.metrics.forget_pool(key.kind, &key.namespace, &key.name);
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

    fn wake_pool_claims(&mut self, key: &PoolKey) {
        self.wake_claims_where(|claim| {
            claim.pool_kind == Some(key.kind)
                && claim.pool_name == key.name
                && (key.kind.is_global() || claim.key.namespace == key.namespace)
        });
    }

    // ---- Clusters ----

    /// A Cluster as its watch delivers it: one that appears, or is unpaused, wakes its claims (docs/compatibility.md
    /// D9).
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
        let Some(paused) = self.clusters.remove(key) else { return };
        if paused {
            self.moved_clusters.insert(key.clone());
            let left_behind: Vec<ObjectKey> = self
                .addresses
                .iter()
                .filter(|(k, r)| {
                    r.pool.kind.is_global()
                        && k.namespace == key.namespace
                        && r.cluster_label.as_deref() == Some(&*key.name)
                        && !r.moving_away
                        && self.claims.get(k).is_none()
                })
                .map(|(k, _)| k.clone())
                .collect();
            for address in &left_behind {
                moved_away::claim_moved_away(self, address);
            }
        }
        self.wake_claims_where(|claim| claim.key.namespace == key.namespace && claim.cluster() == Some(&*key.name));
    }

    pub fn cluster_keys(&self) -> Vec<ObjectKey> {
        self.clusters.keys().cloned().collect()
    }

    /// Whether the Cluster is paused; `None` when it does not exist (or Clusters are not served).
    pub fn cluster_paused(&self, namespace: &str, name: &str) -> Option<bool> {
        self.clusters.get(&ObjectKey::new(namespace, name)).copied()
    }
}

/// The index as the rest of the process shares it: its [`State`] behind one lock. Each call is one step, under the
/// lock from its start to its end; what the step noticed goes to the [`Sink`] after the lock is released.
pub struct Index {
    state: Mutex<State>,
    sink: Arc<dyn Sink>,
}

impl Index {
    pub fn new(sink: Arc<dyn Sink>, metrics: Arc<Metrics>) -> Self {
        Self { state: Mutex::new(State::new(metrics)), sink }
    }

    /// Runs one step that writes the state; what it noticed goes to the sink once the lock is released.
    pub fn write<R>(&self, step: impl FnOnce(&mut State) -> R) -> R {
        let (result, notices) = {
            let mut state = self.state.lock();
            let result = step(&mut state);
            (result, state.take_notices())
        };
        for notice in notices {
            match notice {
                Notice::Wake(claim) => self.sink.wake(claim),
                Notice::WakeFirst(claim) => self.sink.wake_first(claim),
                Notice::PoolChanged(pool) => self.sink.pool_changed(pool),
                Notice::ClaimGone(claim) => self.sink.claim_gone(claim),
                Notice::MovedAwayChanged(pool) => self.sink.moved_away_changed(pool),
            }
        }
        result
    }

    pub fn address_created(
        &self,
        claim: &Claim,
        pool: &PoolKey,
        created: &IpAddress,
    ) -> (Option<AddressRecord>, Option<Duration>) {
        self.write(|s| s.address_created(claim, pool, created))
    }

    /// Reads the state.
    pub fn read<R>(&self, look: impl FnOnce(&State) -> R) -> R {
        look(&self.state.lock())
    }

    /// What is logged when the caches have listed everything.
    pub fn log_synced(&self) {
        let (claims, addresses) = self.read(|s| (s.claim_count(), s.address_count()));
        info!(claims, addresses, "caches synced; allocating");
    }

    pub fn waiting(&self) -> (usize, Duration) {
        self.read(|s| s.waiting())
    }

    pub fn apply_claim(&self, claim: Claim) {
        self.write(|s| s.apply_claim(claim))
    }

    pub fn delete_claim(&self, key: &ObjectKey) {
        self.write(|s| s.delete_claim(key))
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

    pub fn already_written(&self, claim: &Claim, digest: u64) -> bool {
        self.write(|s| s.already_written(claim, digest))
    }

    pub fn remember_written(&self, claim: &Claim, digest: u64) {
        self.write(|s| s.remember_written(claim, digest))
    }

    pub fn first_seen(&self, claim: &Claim) {
        self.write(|s| s.first_seen(claim))
    }

    pub fn bound(&self, claim: &Claim) {
        self.write(|s| s.bound(claim))
    }

    pub fn allocation_latency(&self, claim: &Claim) -> Option<Duration> {
        self.write(|s| s.allocation_latency(claim))
    }

    pub fn backoff(&self, claim: &Claim) -> Duration {
        self.write(|s| s.backoff(claim))
    }

    pub fn reset_backoff(&self, claim: &Claim) {
        self.write(|s| s.reset_backoff(claim))
    }

    pub fn take_vanished_address(&self, claim: &Claim, pool: &PoolKey) -> Option<Box<str>> {
        self.write(|s| s.take_vanished_address(claim, pool))
    }

    pub fn books(&self) -> usize {
        self.read(|s| s.books())
    }

    pub fn apply_address(&self, address: &IpAddress) -> ObjectKey {
        self.write(|s| s.apply_address(address))
    }

    pub fn address_deleted(&self, key: &ObjectKey, object: &IpAddress) {
        self.write(|s| s.address_deleted(key, object))
    }

    pub fn delete_address(&self, key: &ObjectKey, uid: Option<Uid>) {
        self.write(|s| s.delete_address(key, uid))
    }

    pub fn is_moved_holder(&self, pool: &PoolKey, key: &ObjectKey) -> bool {
        self.read(|s| s.is_moved_holder(pool, key))
    }

    pub fn addresses_listing(&self) {
        self.write(|s| s.addresses_listing())
    }

    pub fn addresses_listed(&self) {
        self.write(|s| s.addresses_listed())
    }

    pub fn doubt_resolved(&self, key: &ObjectKey, uid: Option<Uid>, live: Option<&IpAddress>) {
        self.write(|s| s.doubt_resolved(key, uid, live))
    }

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

    pub fn remember_address(&self, key: &ObjectKey, object: &IpAddress) -> Option<AddressRecord> {
        self.write(|s| s.remember_address(key, object))
    }

    pub fn deleted_address(&self, key: &ObjectKey, pool: &PoolKey, uid: Option<&str>) {
        self.write(|s| s.deleted_address(key, pool, uid))
    }

    pub fn abandon(&self, pool: &PoolKey, key: &ObjectKey) {
        self.write(|s| s.abandon(pool, key))
    }

    pub fn abandon_orphaned_hold(&self, pool: &PoolKey, key: &ObjectKey) {
        self.write(|s| s.abandon_orphaned_hold(pool, key))
    }

    pub fn claim_back(&self, pool: &PoolKey, claim: &ObjectKey, held: Held) {
        self.write(|s| s.claim_back(pool, claim, held))
    }

    pub fn holds_reserved(&self, pool: &PoolKey, key: &ObjectKey) -> bool {
        self.read(|s| s.holds_reserved(pool, key))
    }

    pub fn claim_deleted_for_good(&self, pool: &PoolKey, claim: &Claim) {
        self.write(|s| s.claim_deleted_for_good(pool, claim))
    }

    pub fn moved_away_unwritten(&self, pool: &PoolKey, key: &ObjectKey) -> bool {
        self.read(|s| s.moved_away_unwritten(pool, key))
    }

    pub fn orphaned_hold(&self, key: &ObjectKey) -> Option<PoolKey> {
        self.read(|s| s.orphaned_hold(key))
    }

    pub fn orphans(&self) -> Vec<(ObjectKey, AddressRecord)> {
        self.read(|s| s.orphans())
    }

    pub fn keeps_orphan(&self, key: &ObjectKey, record: &AddressRecord) -> bool {
        self.read(|s| s.keeps_orphan(key, record))
    }

    pub fn keeps_addresses(&self, namespace: &str, record: &AddressRecord) -> bool {
        self.read(|s| s.keeps_addresses(namespace, record))
    }

    pub fn allocate(&self, claim: &Claim, pool: &PoolKey, requested: Option<&str>) -> Result<Assigned, AllocateError> {
        self.write(|s| s.allocate(claim, pool, requested))
    }

    pub fn wait_for_address(&self, pool: &PoolKey, claim: &ObjectKey) {
        self.write(|s| s.wait_for_address(pool, claim))
    }

    pub fn stop_waiting(&self, pool: &PoolKey, claim: &ObjectKey) {
        self.write(|s| s.stop_waiting(pool, claim))
    }

    pub fn holds_unconfirmed(&self, pool: &PoolKey, key: &ObjectKey) -> bool {
        self.read(|s| s.holds_unconfirmed(pool, key))
    }

    pub fn held_by(&self, pool: &PoolKey, key: &ObjectKey) -> Option<Held> {
        self.read(|s| s.held_by(pool, key))
    }

    pub fn duplicate_of(&self, pool: &PoolKey, key: &ObjectKey) -> Option<Duplicate> {
        self.read(|s| s.duplicate_of(pool, key))
    }

    pub fn duplicates(&self, pool: &PoolKey) -> Vec<Duplicate> {
        self.read(|s| s.duplicates(pool))
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

    pub fn pool(&self, key: &PoolKey) -> Option<Arc<Pool>> {
        self.read(|s| s.pool(key))
    }

    pub fn pool_in_use(&self, key: &PoolKey) -> bool {
        self.read(|s| s.pool_in_use(key))
    }

    pub fn pool_keys(&self) -> Vec<PoolKey> {
        self.read(|s| s.pool_keys())
    }

    pub fn apply_cluster(&self, key: ObjectKey, paused: bool) {
        self.write(|s| s.apply_cluster(key, paused))
    }

    pub fn delete_cluster(&self, key: &ObjectKey) {
        self.write(|s| s.delete_cluster(key))
    }

    pub fn cluster_keys(&self) -> Vec<ObjectKey> {
        self.read(|s| s.cluster_keys())
    }

    pub fn cluster_paused(&self, namespace: &str, name: &str) -> Option<bool> {
        self.read(|s| s.cluster_paused(namespace, name))
    }

    pub fn moved_away_pending(&self, pool: &PoolKey) -> BTreeMap<String, bool> {
        self.read(|s| s.moved_away_pending(pool))
    }

    pub fn moved_away_written(&self, pool: &PoolKey, written: Option<(&BTreeMap<String, bool>, ResourceVersion)>) {
        self.write(|s| s.moved_away_written(pool, written))
    }
}

impl crate::metrics::WaitingClaims for Index {
    fn waiting(&self) -> (usize, Duration) {
        self.read(State::waiting)
    }
}

#[cfg(test)]
pub(crate) mod tests;
