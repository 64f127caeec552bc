//! How one watch's events go into the index, the same way for every kind: an applied object is indexed, a deleted one
//! forgotten, and a relist (the watch restarted, or expired with 410 Gone) forgets what the new list no longer holds.
//! Synchronous: `crate::runtime::watch` feeds it from the stream, tests feed it by hand.

use std::collections::BTreeSet;

use kube::ResourceExt;
use kube::runtime::watcher::Event;

use super::{Index, ObjectKey, PoolKey};
use crate::api::{Pool, PoolResource};
use crate::capi::{Claim, ClaimResource, Cluster, IpAddress};
use crate::compact::Uid;

/// One kind of object the index keeps.
pub trait Feed<K> {
    type Key: Clone + Ord;
    /// Indexes the object; returns its key.
    fn apply(&self, object: K) -> Self::Key;
    fn delete(&self, object: &K);
    /// Forgets an object the relist no longer holds.
    fn forget(&self, key: &Self::Key);
    /// The keys indexed now.
    fn keys(&self) -> Vec<Self::Key>;
    /// A list begins (before its request is sent).
    fn listing(&self) {}
    /// Every object was listed again.
    fn listed(&self) {}
}

/// Where a watch is in its list-then-watch cycle.
pub struct Relist<Key> {
    /// While a list is under way: the indexed keys not listed again yet (none at start-up, so the first list of
    /// 100,000 objects builds no set). In order: a relist forgets in the same order in every process (the claims it
    /// wakes are queued in it, and the simulation's schedule follows).
    unlisted: Option<BTreeSet<Key>>,
}

impl<Key> Default for Relist<Key> {
    fn default() -> Self {
        Self { unlisted: None }
    }
}

impl<Key: Clone + Ord> Relist<Key> {
    /// Feeds one event; returns true when it ended a list (the index holds everything the API server listed).
    pub fn on_event<K, F: Feed<K, Key = Key>>(&mut self, feed: &F, event: Event<K>) -> bool {
        match event {
            Event::Init => {
                feed.listing();
                self.unlisted = Some(feed.keys().into_iter().collect());
                false
            }
            Event::InitApply(object) => {
                let key = feed.apply(object);
                if let Some(unlisted) = self.unlisted.as_mut() {
                    unlisted.remove(&key);
                }
                false
            }
            Event::InitDone => {
                for key in self.unlisted.take().into_iter().flatten() {
                    feed.forget(&key);
                }
                feed.listed();
                true
            }
            Event::Apply(object) => {
                feed.apply(object);
                false
            }
            Event::Delete(object) => {
                feed.delete(&object);
                false
            }
        }
    }
}

fn object_key<K: ResourceExt>(object: &K) -> ObjectKey {
    ObjectKey::new(&object.namespace().unwrap_or_default(), &object.name_any())
}

impl Feed<ClaimResource> for Index {
    type Key = ObjectKey;
    fn apply(&self, object: ClaimResource) -> ObjectKey {
        let claim: Claim = object.claim;
        let key = claim.key.clone();
        self.apply_claim(claim);
        key
    }
    fn delete(&self, object: &ClaimResource) {
        self.claim_deleted(&object.claim);
    }
    fn forget(&self, key: &ObjectKey) {
        self.delete_claim(key);
    }
    fn keys(&self) -> Vec<ObjectKey> {
        self.claim_keys()
    }
}

/// IPAddresses by name and UID: a name is reused (claims are deleted and created again), and what a relist no longer
/// holds is the object it recorded, not a newer one of the same name.
impl Feed<IpAddress> for Index {
    type Key = (ObjectKey, Option<Uid>);
    fn apply(&self, object: IpAddress) -> Self::Key {
        let uid = object.metadata.uid.as_deref().map(Uid::of);
        (self.apply_address(&object), uid)
    }
    fn delete(&self, object: &IpAddress) {
        self.address_delete_watched(&object_key(object), object);
    }
    fn forget(&self, (key, uid): &Self::Key) {
        self.address_gone(key, *uid);
    }
    fn keys(&self) -> Vec<Self::Key> {
        self.address_ids()
    }
    fn listing(&self) {
        self.addresses_listing();
    }
    fn listed(&self) {
        self.addresses_listed();
    }
}

impl Feed<Cluster> for Index {
    type Key = ObjectKey;
    fn apply(&self, object: Cluster) -> ObjectKey {
        let key = object_key(&object);
        let revision = super::revision_of(&object.metadata);
        self.apply_cluster_of_shard(key.clone(), object.is_paused(), object.watch_filter.as_deref(), revision);
        key
    }
    fn delete(&self, object: &Cluster) {
        self.cluster_deleted(&object_key(object), object.is_paused());
    }
    fn forget(&self, key: &ObjectKey) {
        self.delete_cluster(key);
    }
    fn keys(&self) -> Vec<ObjectKey> {
        self.cluster_keys()
    }
}

/// The pools of one kind `K` (the index keeps all four kinds; a relist of one kind forgets only its own).
pub struct Pools<'a, K> {
    pub index: &'a Index,
    kind: std::marker::PhantomData<K>,
}

impl<'a, K> Pools<'a, K> {
    pub fn of(index: &'a Index) -> Self {
        Self { index, kind: std::marker::PhantomData }
    }
}

impl<K: PoolResource> Feed<K> for Pools<'_, K> {
    type Key = PoolKey;
    fn apply(&self, object: K) -> PoolKey {
        let pool: Pool = object.into_pool();
        let key = PoolKey::new(pool.kind, pool.namespace(), pool.name());
        self.index.apply_pool(pool);
        key
    }
    fn delete(&self, object: &K) {
        self.index.delete_pool(&PoolKey::new(K::KIND, &object.namespace().unwrap_or_default(), &object.name_any()));
    }
    fn forget(&self, key: &PoolKey) {
        self.index.delete_pool(key);
    }
    fn keys(&self) -> Vec<PoolKey> {
        self.index.pool_keys().into_iter().filter(|k| k.kind == K::KIND).collect()
    }
}
