//! The index: the one owner of what the controllers know, fed by the watches (`crate::runtime::watch`) and by our own
//! writes the moment they succeed. It holds the claims of our pool kinds, the records of the IPAddresses of our pools
//! and the allocator state they hold (`registry`), the typed pools, which Clusters exist and are paused, and what we
//! keep per claim while it is reconciled. It is synchronous and does no I/O: every change it notices that concerns a
//! claim or a pool goes to one [`Sink`], so the controllers never forward wakes by hand, and a test can drive it with
//! synthetic events.

mod addresses;
mod claims;
mod handle;
pub mod moved_away;
mod observe;
mod orphans;
mod pools;
mod record;
pub mod registry;
pub mod relist;
mod view;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use crate::api::{Pool, PoolKind};
use crate::compact::{ResourceVersion, Uid};
use claims::{ClaimBook, ClaimCache};
pub use observe::{IfNotCreated, LiveCluster, Observation, Observed};
pub use pools::Wait;
pub use record::AddressRecord;
pub use registry::Registry;
pub use registry::{AllocateError, Assigned, Duplicate, Held, ObjectKey, PoolKey};
pub use view::{ClaimRun, ClaimView, OrphanView, PoolStatusView, PoolView, Served};

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
    /// Something the metrics count happened.
    fn counted(&self, event: Counted);
}

/// What the index tells the metrics (`crate::metrics`), as it tells the work queue what to do: it holds no metrics.
#[derive(Debug, PartialEq, Eq)]
pub enum Counted {
    /// An address of a pool of this kind was released.
    Released(PoolKind),
    /// A duplicate was found in a pool of this kind.
    DuplicateDetected(PoolKind),
    /// This pool is gone: its series go too.
    PoolForgotten(PoolKey),
}

/// What the index noticed while it was written: delivered to the [`Sink`] once its lock is released, in order.
#[derive(Debug, PartialEq, Eq)]
pub enum Notice {
    Wake(ObjectKey),
    WakeFirst(ObjectKey),
    PoolChanged(PoolKey),
    ClaimGone(ObjectKey),
    MovedAwayChanged(PoolKey),
    Counted(Counted),
}

/// Everything the index knows, written through `&mut self` by one caller at a time ([`Index`] holds it behind one
/// lock): the invariants between its parts hold at every method's end, with no lock order to keep.
#[derive(Default)]
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
    /// Clusters gone while paused before every watch listed once, and whether they were another shard's: what they
    /// left behind is looked for once the claims have listed (`hold_bound_addresses`), as a claim not listed yet is no
    /// claim gone (seed 790461484: a Velero restore's namespace wipe, the Cluster's unpause lost to a relist, took the
    /// restored claim's address for one a move left behind).
    clusters_gone_before_synced: Vec<(ObjectKey, bool)>,
    /// Claims gone for a move while the create of their IPAddress was in flight (no record to mark yet), by name and
    /// UID: the first record of that claim's IPAddress (its create's answer, a read of it, its watch event) records the
    /// move, and no later claim's of the name does (test
    /// `a_new_claim_of_the_name_of_a_moved_claim_is_not_taken_for_moved`: an entry whose create never came stayed, and
    /// a new claim of the name was taken for moved). Every one is kept: a second claim of the name gone for a move
    /// before the first one's answer must not hide it (test
    /// `a_second_claim_of_the_name_gone_for_a_move_does_not_hide_the_first_ones_create`).
    moved_before_created: HashSet<(ObjectKey, Uid)>,
    /// Holds kept for a live claim whose IPAddress is gone (deleted from under it, or a reservation a bound claim back
    /// from a move took back): unconfirmed as an uncertain create's hold is, but no create of ours is in flight until
    /// the claim allocates again. Its claim's deletion for a move notes no create (seed 460384603: such a note, taken
    /// by the IPAddress a Velero restore brought back with the old claim's owner reference, reserved the address of
    /// the claim restored with it).
    holds_without_create: HashSet<ObjectKey>,
    /// IPAddresses (by name, with their UID) whose claim's deletion was seen without clusterctl's mark: released even
    /// while their Cluster is paused, and not left behind by a move when it goes (a namespace wiped before a Velero
    /// restore).
    claims_seen_gone: HashMap<ObjectKey, Option<Uid>>,
    /// The resourceVersion of each Cluster as its watch last delivered it.
    cluster_revisions: HashMap<ObjectKey, ResourceVersion>,
    /// Clusters a live read showed paused (at that resourceVersion) before their watch did: older watch events do not
    /// unpause them.
    clusters_read_paused: HashMap<ObjectKey, ResourceVersion>,
    /// Clusters labelled for no shard of this manager's (`cluster.x-k8s.io/watch-filter`), for a manager with one:
    /// the claims of their IPAddresses are another manager's.
    clusters_of_other_shards: HashSet<ObjectKey>,
    moved_away: moved_away::Ledger,
    /// The claim owner (by UID) of the IPAddress of each name whose claim went for a move: an IPAddress of the name
    /// owned by it is the one left behind, also when it comes back as another object (Velero restoring a backup taken
    /// while it was left behind, seed 570216407). Until a claim of the name is bound to its address again.
    moved_owners: HashMap<ObjectKey, Uid>,
    /// Claims an IPAddress of their name of another pool or provider blocks (`blocked_elsewhere`).
    blocked_elsewhere: HashSet<ObjectKey>,
    /// This manager's `--watch-filter`: it serves the pools labelled with it, and those labelled with none.
    shard: Option<Arc<str>>,
    /// IPAddresses (name and UID) of claims another manager serves (with another `--watch-filter`): never orphans of
    /// ours, so the sweep leaves them alone.
    others_claims: HashSet<(ObjectKey, Option<Uid>)>,
    /// IPAddresses (name and UID) another shard's Cluster left behind when it went paused (moved away), on pools whose
    /// claims this manager does not all see: that shard's manager records their move, and releases them. Never orphans
    /// of ours, also after a relist (soak seed 804659163: released here as orphans, the other manager took their
    /// deletion for an operator's and dropped the reservation of an address in use over there).
    left_to_other_shards: HashSet<(ObjectKey, Option<Uid>)>,
    /// What to tell the sink once the lock is released.
    notices: Vec<Notice>,
}

/// An object's resourceVersion, as the index keeps it.
pub(crate) fn revision_of(meta: &kube::api::ObjectMeta) -> ResourceVersion {
    ResourceVersion::of(meta.resource_version.as_deref().unwrap_or_default())
}

impl State {
    /// What was noticed since the last call.
    pub fn take_notices(&mut self) -> Vec<Notice> {
        let woken = self.registry.take_woken();
        self.wake_all(woken);
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
}

/// The index as the rest of the process shares it: its [`State`] behind one lock. Each call is one step, under the
/// lock from its start to its end; what the step noticed goes to the [`Sink`] after the lock is released.
pub struct Index {
    state: Mutex<State>,
    sink: Arc<dyn Sink>,
    /// How many steps the index ran (`write` and `read`): what a reconcile costs in crossings of the seam between the
    /// controllers and the index (issue 35 measures it: `sim::seam`).
    #[cfg(test)]
    crossings: std::sync::atomic::AtomicUsize,
}

impl Index {
    pub fn new(sink: Arc<dyn Sink>) -> Self {
        Self::of_shard(sink, None)
    }

    /// An index of the manager started with `--watch-filter=<shard>`.
    pub fn of_shard(sink: Arc<dyn Sink>, shard: Option<&str>) -> Self {
        let state = State { shard: shard.map(crate::compact::intern), ..State::default() };
        Self {
            state: Mutex::new(state),
            sink,
            #[cfg(test)]
            crossings: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// How many steps the index has run so far.
    #[cfg(test)]
    pub fn crossings(&self) -> usize {
        self.crossings.load(std::sync::atomic::Ordering::Relaxed)
    }

    #[cfg(test)]
    fn crossed(&self) {
        self.crossings.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    #[cfg(not(test))]
    fn crossed(&self) {}

    /// Runs one step that writes the state; what it noticed goes to the sink once the lock is released.
    ///
    /// Guarantees: the step sees and leaves the state whole (one lock, no await inside), so a decision and the hold it
    /// takes are one step: no other claim can take an address between them. Notices are delivered in order, after
    /// the lock is released, so a sink (the work queue, metrics) may call back into the index.
    ///
    /// Assumptions: a step is short and does no I/O; a caller that writes to the API server takes its hold first and
    /// records the answer in a later step (a crash in between leaves a hold the next term's relist settles).
    pub fn write<R>(&self, step: impl FnOnce(&mut State) -> R) -> R {
        self.crossed();
        let (result, notices) = {
            let mut state = self.state.lock();
            let result = step(&mut state);
            (result, state.take_notices())
        };
        self.deliver(notices);
        result
    }

    /// Hands what a step noticed to the sink, in order (not generic: one copy for every step).
    fn deliver(&self, notices: Vec<Notice>) {
        for notice in notices {
            match notice {
                Notice::Wake(claim) => self.sink.wake(claim),
                Notice::WakeFirst(claim) => self.sink.wake_first(claim),
                Notice::PoolChanged(pool) => self.sink.pool_changed(pool),
                Notice::ClaimGone(claim) => self.sink.claim_gone(claim),
                Notice::MovedAwayChanged(pool) => self.sink.moved_away_changed(pool),
                Notice::Counted(event) => self.sink.counted(event),
            }
        }
    }

    /// Reads the state.
    pub fn read<R>(&self, look: impl FnOnce(&State) -> R) -> R {
        self.crossed();
        look(&self.state.lock())
    }

    /// Reads the state without counting a crossing: for the simulation's checker, which is no controller.
    #[cfg(test)]
    pub fn peek<R>(&self, look: impl FnOnce(&State) -> R) -> R {
        look(&self.state.lock())
    }
}

#[cfg(test)]
pub(crate) mod tests;
