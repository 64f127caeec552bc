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

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use kube::ResourceExt;
use tracing::info;

use crate::api::{CLUSTER_NAME_LABEL, DELETE_FOR_MOVE_ANNOTATION, PROTECT_ADDRESS_FINALIZER, Pool};
use crate::capi::{Claim, IpAddress};
use crate::compact::{ResourceVersion, Uid, intern};
use crate::metrics::Metrics;
use claims::ClaimCache;
pub use registry::{AllocateError, Assigned, Duplicate, Held, ObjectKey, PoolKey, Registry};

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

pub struct Index {
    claims: ClaimCache,
    addresses: RwLock<HashMap<ObjectKey, AddressRecord>>,
    registry: Registry,
    pools: RwLock<HashMap<PoolKey, Arc<Pool>>>,
    /// Every Cluster (namespace/name), and whether it is paused.
    clusters: RwLock<HashMap<ObjectKey, bool>>,
    books: Mutex<HashMap<Uid, ClaimBook>>,
    /// IPAddresses we deleted, by name and UID, until the watch reports them gone: a late event about one of them
    /// (the finalizer removal that preceded the delete) must not bring its address back into use, and a new object of
    /// the same name is not one of them.
    deleted: Mutex<HashSet<(ObjectKey, Uid)>>,
    /// While the IPAddress watch lists again: the tombstones that were there when the list began and that it has not
    /// listed yet. Those it never lists are gone for good (the list is a quorum read, sent after they were made).
    unlisted_tombstones: Mutex<Option<HashSet<(ObjectKey, Uid)>>>,
    /// The newest resourceVersion the IPAddress watch delivered: it has delivered every change up to it.
    addresses_seen_until: AtomicU64,
    /// While the IPAddress watch lists: the newest resourceVersion listed so far.
    listing_until: Mutex<Option<u64>>,
    /// Clusters deleted while paused (moved away by clusterctl, which deletes them last): claims of theirs that go
    /// later, with or without their `delete-for-move`, went with them.
    moved_clusters: Mutex<HashSet<ObjectKey>>,
    moved_away: moved_away::Ledger,
    sink: Arc<dyn Sink>,
    metrics: Arc<Metrics>,
}

fn revision_of(meta: &kube::api::ObjectMeta) -> ResourceVersion {
    ResourceVersion::of(meta.resource_version.as_deref().unwrap_or_default())
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding a lock would be a bug; every mutation completes before its guard drops, so the state is
    // still consistent: keep going rather than poisoning every later call.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn read<T>(m: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    m.read().unwrap_or_else(|e| e.into_inner())
}

fn write<T>(m: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    m.write().unwrap_or_else(|e| e.into_inner())
}

impl crate::metrics::WaitingClaims for Index {
    fn waiting(&self) -> (usize, Duration) {
        let books = lock(&self.books);
        books
            .values()
            .filter_map(|b| b.first_seen)
            .fold((0, Duration::ZERO), |(n, longest), seen| (n + 1, longest.max(seen.elapsed())))
    }
}

impl Index {
    pub fn new(sink: Arc<dyn Sink>, metrics: Arc<Metrics>) -> Self {
        Self {
            claims: ClaimCache::default(),
            addresses: RwLock::default(),
            registry: Registry::new(),
            pools: RwLock::default(),
            clusters: RwLock::default(),
            books: Mutex::default(),
            deleted: Mutex::default(),
            unlisted_tombstones: Mutex::default(),
            addresses_seen_until: AtomicU64::new(0),
            listing_until: Mutex::default(),
            moved_clusters: Mutex::default(),
            moved_away: moved_away::Ledger::default(),
            sink,
            metrics,
        }
    }

    /// The allocator state of every pool.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    fn wake_all(&self, claims: Vec<ObjectKey>) {
        for claim in claims {
            self.sink.wake(claim);
        }
    }

    // ---- Claims ----

    /// A claim as its watch delivers it: one of our pool kinds' is kept and reconciled; any other is not ours.
    pub fn apply_claim(&self, mut claim: Claim) {
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
            if waits { self.sink.wake_first(key) } else { self.sink.wake(key) }
        } else {
            self.claims.remove(&key);
        }
    }

    /// A claim is gone: everything kept for it goes, and an IPAddress we made for it is checked. Deleted by
    /// `clusterctl move`, an address of a global pool stays reserved here.
    pub fn delete_claim(&self, key: &ObjectKey) {
        let mut books = lock(&self.books);
        let Some(claim) = self.claims.remove(key) else { return };
        books.remove(&claim.uid.uid());
        drop(books);
        let moved_cluster = claim
            .cluster()
            .is_some_and(|cluster| lock(&self.moved_clusters).contains(&ObjectKey::new(&key.namespace, cluster)));
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
                self.sink.wake(key.clone());
            }
        }
        self.sink.claim_gone(key.clone());
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

    fn wake_claims_where(&self, predicate: impl Fn(&Claim) -> bool) {
        self.wake_all(self.claims.keys_where(predicate));
    }

    /// The copy of `key` the index holds already, if any: a claim and its IPAddress (and the IPAddress's hold in the
    /// registry) share one copy of the name.
    fn shared_key(&self, key: ObjectKey) -> ObjectKey {
        if let Some(claim) = self.claims.get(&key) {
            return claim.key.clone();
        }
        read(&self.addresses).get_key_value(&key).map_or(key, |(k, _)| k.clone())
    }

    /// Runs `f` on the book of a cached claim; `None` (and nothing kept) once the claim is gone.
    fn book<R>(&self, claim: &Claim, f: impl FnOnce(&mut ClaimBook) -> R) -> Option<R> {
        let mut books = lock(&self.books);
        // Checked under the books' lock: `delete_claim` takes it before it removes the claim.
        if self.claims.get(&claim.key).is_none_or(|c| c.uid != claim.uid) {
            return None;
        }
        let uid = claim.uid.uid();
        let book = books.entry(uid).or_default();
        let result = f(book);
        if book.is_empty() {
            books.remove(&uid);
        }
        Some(result)
    }

    /// Whether the Ready state `digest` is the one we last wrote for the claim.
    pub fn already_written(&self, claim: &Claim, digest: u64) -> bool {
        self.book(claim, |b| b.written == Some(digest)).unwrap_or(false)
    }

    pub fn remember_written(&self, claim: &Claim, digest: u64) {
        self.book(claim, |b| b.written = Some(digest));
    }

    /// Notes when the claim was first seen without an address.
    pub fn first_seen(&self, claim: &Claim) {
        self.book(claim, |b| {
            b.first_seen.get_or_insert_with(Instant::now);
        });
    }

    /// The claim has its address (allocated, or adopted from an IPAddress that already named it): it waits no more.
    /// Every bound claim's check passes here (100,000 at start-up), so it only looks at a book that exists.
    pub fn bound(&self, claim: &Claim) {
        let uid = claim.uid.uid();
        let mut books = lock(&self.books);
        if let Some(book) = books.get_mut(&uid).filter(|b| b.first_seen.is_some()) {
            book.first_seen = None;
            if book.is_empty() {
                books.remove(&uid);
            }
        }
    }

    /// Time since the claim was first seen, once: the allocation latency.
    pub fn allocation_latency(&self, claim: &Claim) -> Option<Duration> {
        self.book(claim, |b| b.first_seen.take().map(|t| t.elapsed())).flatten()
    }

    /// Per-claim exponential backoff after a failure: 200 ms doubling to 5 minutes, reset on success.
    pub fn backoff(&self, claim: &Claim) -> Duration {
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

    pub fn reset_backoff(&self, claim: &Claim) {
        self.book(claim, |b| b.failures = 0);
    }

    /// The address the claim's IPAddress held in `pool` before it was deleted from under the live claim, once.
    pub fn take_vanished_address(&self, claim: &Claim, pool: &PoolKey) -> Option<Box<str>> {
        self.book(claim, |b| b.vanished.take().filter(|(p, _)| p == pool).map(|(_, address)| address)).flatten()
    }

    /// How many claims have something kept about them (for tests and diagnostics).
    pub fn books(&self) -> usize {
        lock(&self.books).len()
    }

    // ---- IPAddresses ----

    /// An IPAddress as its watch delivers it; returns its key.
    pub fn apply_address(&self, address: &IpAddress) -> ObjectKey {
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
            && (record.moving_away || read(&self.addresses).get(&key).is_some_and(|r| r.moving_away && r.uid == uid));
        record.moving_away = moving_away;
        if pool.kind.is_global() {
            // It holds a reserved address now (one that came back, or one a move left behind: never free between).
            moved_away::came_back(self, &pool, &key, held);
        }
        let previous = write(&self.addresses).insert(key.clone(), record);
        if let Some(old) = previous.filter(|p| *p.pool != *pool) {
            self.wake_all(self.registry.forget(&old.pool, &key));
        }
        if let Some(duplicate) = self.registry.record(&pool, &key, held) {
            self.report_duplicate(&duplicate);
        }
        if moving_away {
            moved_away::still_moving_away(self, &pool, &key, held);
        }
        // The claim of the same name may need its finalizer, owner references or status (restore, move).
        self.sink.wake(key.clone());
        key
    }

    /// Whether a watch event is about another object of the name than the one we recorded from our own write or read,
    /// before the watch delivered ours, and older than it: that object is gone already (ours could only be created
    /// once it was), and the watch, which delivers in order, has not caught up. One newer than our record (a relist
    /// after ours was deleted and another made, which a record from a read does not know of) is the news. The first
    /// event of our own object marks it seen.
    fn is_stale(&self, key: &ObjectKey, event: &AddressRecord) -> bool {
        let mut addresses = write(&self.addresses);
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
    fn saw_addresses_until(&self, meta: &kube::api::ObjectMeta) {
        let Some(revision) = revision_of(meta).number() else { return };
        if let Some(listing) = lock(&self.listing_until).as_mut() {
            *listing = (*listing).max(revision);
            return;
        }
        self.addresses_seen_until.fetch_max(revision, Ordering::AcqRel);
    }

    /// The IPAddress watch delivered `object`'s DELETED event.
    pub fn address_deleted(&self, key: &ObjectKey, object: &IpAddress) {
        self.saw_addresses_until(&object.metadata);
        self.delete_address(key, object.metadata.uid.as_deref().map(Uid::of));
    }

    pub fn delete_address(&self, key: &ObjectKey, uid: Option<Uid>) {
        if let Some(uid) = uid {
            lock(&self.deleted).remove(&(key.clone(), uid));
        }
        let record = {
            let mut addresses = write(&self.addresses);
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
        self.sink.wake(key.clone());
    }

    /// The hold of an IPAddress that is gone ends: its address is free, unless the pool's annotation says it is in
    /// use on another management cluster and this is the IPAddress that moved (one a move left behind here), where
    /// it stays reserved. Another IPAddress holding a reserved address (a duplicate of the reservation, or of the
    /// moved one) just lets go.
    fn release_hold(&self, pool: &PoolKey, key: &ObjectKey) {
        if self.keep_reserved(pool, key) {
            return;
        }
        self.wake_all(self.registry.forget(pool, key));
    }

    /// If `key` holds a reserved address as the IPAddress that moved, its hold becomes the reservation (under the
    /// pool's lock, never free in between); returns whether it did.
    fn keep_reserved(&self, pool: &PoolKey, key: &ObjectKey) -> bool {
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
    fn replacing(&self, key: &ObjectKey, uid: Option<Uid>) {
        let replaced = read(&self.addresses).get(key).filter(|r| r.uid != uid).map(|r| r.pool.clone());
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
    pub fn addresses_listing(&self) {
        *lock(&self.unlisted_tombstones) = Some(lock(&self.deleted).clone());
        *lock(&self.listing_until) = Some(0);
    }

    /// The watch listed every IPAddress again: the tombstones it did not list are not needed any more, and the records
    /// of our own writes it did not list (a list marks what it holds seen) may be of objects gone already.
    pub fn addresses_listed(&self) {
        if let Some(listed_until) = lock(&self.listing_until).take() {
            self.addresses_seen_until.fetch_max(listed_until, Ordering::AcqRel);
        }
        if let Some(gone) = lock(&self.unlisted_tombstones).take() {
            let mut deleted = lock(&self.deleted);
            for tombstone in gone {
                deleted.remove(&tombstone);
            }
        }
        let mut doubtful = Vec::new();
        for (key, record) in write(&self.addresses).iter_mut().filter(|(_, r)| !r.seen) {
            record.doubtful = true;
            doubtful.push(key.clone());
        }
        self.wake_all(doubtful);
    }

    /// A doubtful record (see [`AddressRecord::doubtful`]) was read: `live` is what the API server holds now of that
    /// name. The record stays if it is that object, else it goes (an object of the name that is not ours to record
    /// yet comes with the watch).
    pub fn doubt_resolved(&self, key: &ObjectKey, uid: Option<Uid>, live: Option<&IpAddress>) {
        let live_uid = live.and_then(|a| a.metadata.uid.as_deref()).map(Uid::of);
        if live_uid.is_some() && live_uid == uid {
            if let Some(record) = write(&self.addresses).get_mut(key).filter(|r| r.uid == uid) {
                record.doubtful = false;
            }
            return;
        }
        let still_doubtful = read(&self.addresses).get(key).is_some_and(|r| r.uid == uid && r.doubtful && !r.seen);
        if still_doubtful {
            self.delete_address(key, uid);
        }
    }

    pub fn address(&self, key: &ObjectKey) -> Option<AddressRecord> {
        read(&self.addresses).get(key).cloned()
    }

    pub fn address_keys(&self) -> Vec<ObjectKey> {
        read(&self.addresses).keys().cloned().collect()
    }

    /// The name and UID of every IPAddress recorded (what a relist must see again to keep).
    pub fn address_ids(&self) -> Vec<(ObjectKey, Option<Uid>)> {
        read(&self.addresses).iter().map(|(k, r)| (k.clone(), r.uid)).collect()
    }

    pub fn address_count(&self) -> usize {
        read(&self.addresses).len()
    }

    /// Records an IPAddress we just created, read or patched (the watch will confirm it); `None` when it is not of
    /// our pools.
    pub fn remember_address(&self, key: &ObjectKey, object: &IpAddress) -> Option<AddressRecord> {
        let mut record = AddressRecord::of(object)?;
        if let Some(uid) = record.uid
            && lock(&self.deleted).contains(&(key.clone(), uid))
        {
            return None;
        }
        {
            let addresses = read(&self.addresses);
            match addresses.get(key).filter(|c| c.uid == record.uid) {
                Some(current) => record.seen = current.seen,
                // The watch delivered this version of it already, and it is not recorded: it was deleted since (what
                // we read or wrote is older news than the watch's).
                None if revision_of(&object.metadata)
                    .number()
                    .is_some_and(|r| r <= self.addresses_seen_until.load(Ordering::Acquire)) =>
                {
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
        let previous = write(&self.addresses).insert(key.clone(), record.clone());
        if let Some(old) = previous.filter(|p| *p.pool != *record.pool) {
            self.wake_all(self.registry.forget(&old.pool, key));
        }
        Some(record)
    }

    /// We deleted the IPAddress `key` (`uid`) of `pool` and it is gone: its address is free at once, before the
    /// watch confirms it, and late events about it are ignored.
    pub fn deleted_address(&self, key: &ObjectKey, pool: &PoolKey, uid: Option<&str>) {
        let uid = uid.map(Uid::of);
        if let Some(uid) = uid {
            lock(&self.deleted).insert((key.clone(), uid));
        }
        let ours = read(&self.addresses).get(key).is_none_or(|r| r.uid.is_none() || uid.is_none() || r.uid == uid);
        if !ours {
            return;
        }
        self.release_hold(pool, key);
        self.metrics.released(pool.kind);
        write(&self.addresses).remove(key);
    }

    /// Our create of `key`'s IPAddress was refused (or found another in its place): its hold is given up.
    pub fn abandon(&self, pool: &PoolKey, key: &ObjectKey) {
        self.wake_all(self.registry.abandon(pool, key));
    }

    /// The claim `key` is gone, and no IPAddress of its name exists: a hold its uncertain create left is given up,
    /// unless a claim of that name is back (its own reconcile owns the hold then). Decided under the pool's lock, so
    /// a new claim's allocation cannot slip in between.
    pub fn abandon_orphaned_hold(&self, pool: &PoolKey, key: &ObjectKey) {
        let taken_over = || self.claims.get(key).is_some_and(|c| c.uses_pool(pool.kind, &pool.namespace, &pool.name));
        self.wake_all(self.registry.abandon_unless(pool, key, taken_over));
    }

    /// Whether `uid` of `key` is one we deleted (its events are stale).
    fn is_deleted(&self, key: &ObjectKey, uid: Option<Uid>) -> bool {
        let Some(uid) = uid else { return false };
        let deleted = lock(&self.deleted);
        if !deleted.contains(&(key.clone(), uid)) {
            return false;
        }
        // Listed again: it still exists, so its tombstone stays after the list.
        if let Some(unlisted) = lock(&self.unlisted_tombstones).as_mut() {
            unlisted.remove(&(key.clone(), uid));
        }
        true
    }

    /// An address held twice: the one promise of an IPAddress provider is broken, so this is as loud as it gets. An
    /// IPAddress whose claim was never bound to it is withdrawn (`controllers::claim`); bound ones stay (a machine
    /// may use them), and the pool's Ready condition, both claims' conditions and the metric say so until one of them
    /// is released (docs/operations.md).
    fn report_duplicate(&self, duplicate: &Duplicate) {
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
    pub fn claim_back(&self, pool: &PoolKey, claim: &ObjectKey, held: Held) {
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
    pub fn claim_deleted_for_good(&self, pool: &PoolKey, claim: &Claim) {
        if !pool.kind.is_global() || claim.moving_away {
            return;
        }
        if let Some(cluster) = claim.cluster()
            && (self.cluster_paused(&claim.key.namespace, cluster) != Some(false)
                || lock(&self.moved_clusters).contains(&ObjectKey::new(&claim.key.namespace, cluster)))
        {
            return;
        }
        // Only its own IPAddress (owned by this claim: clusterctl rewrites the owner references of what it brings
        // back), not one a move left behind under its name.
        let owned = read(&self.addresses).get(&claim.key).is_some_and(|r| r.claim_owner == Some(claim.uid.uid()));
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
        let candidates: Vec<(ObjectKey, AddressRecord)> = read(&self.addresses)
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

    // ---- Pools ----

    /// A pool as its watch delivers it: its spec goes to the allocator, and the claims it concerns get another look
    /// when it was created, changed or unpaused.
    pub fn apply_pool(&self, pool: Pool) {
        let key = PoolKey::new(pool.kind, pool.namespace(), pool.name());
        self.wake_all(self.registry.apply_spec(&key, &pool.spec));
        if key.kind.is_global() {
            moved_away::sync(self, &key, &pool);
        }
        // What a claim's reconcile decides on: another pool object of the name (deleted and created again while
        // the watch relisted), a new generation, pause, deletion.
        let state_of = |p: &Pool| (p.metadata.uid.clone(), p.metadata.generation, p.is_paused(), p.is_deleting());
        let state = state_of(&pool);
        let pool = Arc::new(pool);
        let before = write(&self.pools).insert(key.clone(), pool).map(|p| state_of(&p));
        if !state.2 && before != Some(state) {
            self.wake_pool_claims(&key);
        }
        self.sink.pool_changed(key);
    }

    pub fn delete_pool(&self, key: &PoolKey) {
        write(&self.pools).remove(key);
        self.registry.remove_spec(key);
        self.metrics.forget_pool(key.kind, &key.namespace, &key.name);
        self.wake_pool_claims(key);
    }

    pub fn pool(&self, key: &PoolKey) -> Option<Arc<Pool>> {
        read(&self.pools).get(key).cloned()
    }

    /// Whether an IPAddress references the pool, or a create of one is uncertain (the pool's finalizer waits for
    /// neither; reservations do not count, they go with the pool).
    pub fn pool_in_use(&self, key: &PoolKey) -> bool {
        read(&self.addresses).values().any(|r| *r.pool == *key) || self.registry.used(key) > 0
    }

    pub fn pool_keys(&self) -> Vec<PoolKey> {
        read(&self.pools).keys().cloned().collect()
    }

    fn wake_pool_claims(&self, key: &PoolKey) {
        self.wake_claims_where(|claim| {
            claim.pool_kind == Some(key.kind)
                && claim.pool_name == key.name
                && (key.kind.is_global() || claim.key.namespace == key.namespace)
        });
    }

    // ---- Clusters ----

    /// A Cluster as its watch delivers it: one that appears, or is unpaused, wakes its claims (docs/compatibility.md
    /// D9).
    pub fn apply_cluster(&self, key: ObjectKey, paused: bool) {
        lock(&self.moved_clusters).remove(&key);
        let was = write(&self.clusters).insert(key.clone(), paused);
        if !paused && was != Some(false) {
            self.wake_claims_where(|claim| claim.key.namespace == key.namespace && claim.cluster() == Some(&*key.name));
        }
    }

    /// A Cluster is gone: the claims it kept waiting (a deleted claim of a paused Cluster) go on without it. Gone
    /// while paused, it was moved to another management cluster (clusterctl deletes it last, paused): the IPAddresses
    /// of global pools it left behind, whose claims are gone, keep their addresses reserved even when the claims'
    /// deletion for the move was not seen (a relist, a restart).
    pub fn delete_cluster(&self, key: &ObjectKey) {
        let Some(paused) = write(&self.clusters).remove(key) else { return };
        if paused {
            lock(&self.moved_clusters).insert(key.clone());
            let left_behind: Vec<ObjectKey> = read(&self.addresses)
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
        read(&self.clusters).keys().cloned().collect()
    }

    /// Whether the Cluster is paused; `None` when it does not exist (or Clusters are not served).
    pub fn cluster_paused(&self, namespace: &str, name: &str) -> Option<bool> {
        read(&self.clusters).get(&ObjectKey::new(namespace, name)).copied()
    }

    /// What is logged when the caches have listed everything.
    pub fn log_synced(&self) {
        info!(claims = self.claim_count(), addresses = self.address_count(), "caches synced; allocating");
    }
}

#[cfg(test)]
pub(crate) mod tests;
