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

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use kube::ResourceExt;
use tracing::info;

use crate::api::{CLUSTER_NAME_LABEL, DELETE_FOR_MOVE_ANNOTATION, PROTECT_ADDRESS_FINALIZER, Pool};
use crate::capi::{Claim, IpAddress};
use crate::compact::{Uid, intern};
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
    /// This claim is gone: an IPAddress we made for it is checked at once (decision D11).
    fn claim_gone(&self, claim: ObjectKey);
    /// Reservations of this global pool changed and are to be written into its annotation (`moved_away`).
    fn moved_away_changed(&self, pool: PoolKey);
}

/// An IPAddress of one of our pools, as the controllers keep it: what allocation, adoption and the orphan checks
/// compare, and no more (100,000 of these stay small). Repairs read the live object.
#[derive(Clone, Debug)]
pub struct AddressRecord {
    pub uid: Option<Uid>,
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

    /// Made by us for a claim: our finalizer and a claim owner reference.
    pub fn owned_by_a_claim(&self) -> bool {
        self.protected && self.claim_owner.is_some()
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
    /// IPAddresses we deleted (by UID), until the watch reports them gone: a late event about one of them (the
    /// finalizer removal that preceded the delete) must not bring its address back into use.
    deleted: Mutex<HashMap<ObjectKey, Uid>>,
    moved_away: moved_away::Ledger,
    sink: Arc<dyn Sink>,
    metrics: Arc<Metrics>,
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
        if claim.moving_away {
            moved_away::claim_moved_away(self, key);
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
        if self.is_deleted(&key, address) {
            return key;
        }
        let Some(mut record) = AddressRecord::of(address) else {
            // Not one of our pools' (IPAddress specs are immutable, so it never was).
            return key;
        };
        let held = Held::of(record.pool.kind, &address.spec);
        let pool = record.pool.clone();
        if pool.kind.is_global() {
            // Once moved away, its address is a reservation until the object is gone; else it may be one coming back.
            record.moving_away |= read(&self.addresses).get(&key).is_some_and(|r| r.moving_away);
            if record.moving_away {
                write(&self.addresses).insert(key.clone(), record);
                moved_away::still_moving_away(self, &pool, &key, held);
                return key;
            }
            moved_away::came_back(self, &pool, &key, held);
        }
        let previous = write(&self.addresses).insert(key.clone(), record);
        if let Some(old) = previous.filter(|p| *p.pool != *pool) {
            self.wake_all(self.registry.forget(&old.pool, &key));
        }
        if let Some(duplicate) = self.registry.record(&pool, &key, held) {
            self.report_duplicate(&duplicate);
        }
        // The claim of the same name may need its finalizer, owner references or status (restore, move).
        self.sink.wake(key.clone());
        key
    }

    /// An IPAddress is gone.
    pub fn delete_address(&self, key: &ObjectKey) {
        lock(&self.deleted).remove(key);
        let Some(record) = write(&self.addresses).remove(key) else { return };
        if record.moving_away && record.pool.kind.is_global() {
            moved_away::moved_away(self, &record.pool, key);
            return;
        }
        let held = self.registry.held_by(&record.pool, key);
        self.wake_all(self.registry.forget(&record.pool, key));
        self.metrics.released(record.pool.kind);
        // If its claim still lives, it gets a new IPAddress: with the same address, while that is still free.
        if let Some(claim) = self.claims.get(key).filter(|c| c.deletion_timestamp.is_none())
            && let Some(address) = held.and_then(Held::address)
        {
            self.book(&claim, |b| b.vanished = Some(((*record.pool).clone(), address.to_string().into())));
        }
        self.sink.wake(key.clone());
    }

    /// The watch listed every IPAddress again: tombstones of those it no longer holds are not needed any more.
    pub fn addresses_listed(&self) {
        let listed = read(&self.addresses);
        lock(&self.deleted).retain(|key, _| listed.contains_key(key));
    }

    pub fn address(&self, key: &ObjectKey) -> Option<AddressRecord> {
        read(&self.addresses).get(key).cloned()
    }

    pub fn address_keys(&self) -> Vec<ObjectKey> {
        read(&self.addresses).keys().cloned().collect()
    }

    pub fn address_count(&self) -> usize {
        read(&self.addresses).len()
    }

    /// Records an IPAddress we just created or patched (the watch will confirm it); `None` when it is not of our
    /// pools.
    pub fn remember_address(&self, key: &ObjectKey, object: &IpAddress) -> Option<AddressRecord> {
        let record = AddressRecord::of(object)?;
        if let Some(duplicate) = self.registry.record(&record.pool, key, Held::of(record.pool.kind, &object.spec)) {
            self.report_duplicate(&duplicate);
        }
        write(&self.addresses).insert(key.clone(), record.clone());
        Some(record)
    }

    /// We deleted the IPAddress `key` (`uid`) of `pool` and it is gone: its address is free at once, before the
    /// watch confirms it, and late events about it are ignored.
    pub fn deleted_address(&self, key: &ObjectKey, pool: &PoolKey, uid: Option<&str>) {
        if let Some(uid) = uid {
            lock(&self.deleted).insert(key.clone(), Uid::of(uid));
        }
        self.wake_all(self.registry.forget(pool, key));
        self.metrics.released(pool.kind);
        write(&self.addresses).remove(key);
    }

    /// Our create of `key`'s IPAddress was refused (or found another in its place): its hold is given up.
    pub fn abandon(&self, pool: &PoolKey, key: &ObjectKey) {
        self.wake_all(self.registry.abandon(pool, key));
    }

    /// Whether `address` is one we deleted (its events are stale).
    fn is_deleted(&self, key: &ObjectKey, address: &IpAddress) -> bool {
        let deleted = lock(&self.deleted);
        deleted.get(key).is_some_and(|uid| address.metadata.uid.as_deref().map(Uid::of).as_ref() == Some(uid))
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

    /// The IPAddresses made for a claim that is not cached, and whose Cluster (if any) is not paused: candidates for
    /// release once the API server confirms the claim is gone (decision D11).
    pub fn orphans(&self) -> Vec<(ObjectKey, AddressRecord)> {
        let candidates: Vec<(ObjectKey, AddressRecord)> = read(&self.addresses)
            .iter()
            .filter(|(k, r)| r.owned_by_a_claim() && !r.deleting && !self.claims.contains(k))
            .map(|(k, r)| (k.clone(), r.clone()))
            .collect();
        candidates.into_iter().filter(|(key, record)| !self.keeps_addresses(&key.namespace, record)).collect()
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
        let state = (pool.metadata.generation, pool.is_paused());
        let pool = Arc::new(pool);
        let before = write(&self.pools).insert(key.clone(), pool).map(|p| (p.metadata.generation, p.is_paused()));
        if !state.1 && before != Some(state) {
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

    /// A Cluster as its watch delivers it: one that appears, or is unpaused, wakes its claims (decision D9).
    pub fn apply_cluster(&self, key: ObjectKey, paused: bool) {
        let was = write(&self.clusters).insert(key.clone(), paused);
        if !paused && was != Some(false) {
            self.wake_claims_where(|claim| claim.key.namespace == key.namespace && claim.cluster() == Some(&*key.name));
        }
    }

    pub fn delete_cluster(&self, key: &ObjectKey) {
        write(&self.clusters).remove(key);
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
