//! What the index keeps of one IPAddress of our pools.

use std::sync::Arc;

use super::registry::{ClusterKey, cluster_key};
use super::{ObjectKey, PoolKey, revision_of};
use crate::api::{
    CLUSTER_NAME_LABEL, DELETE_FOR_MOVE_ANNOTATION, MOVED_AWAY_ANNOTATION, MOVED_AWAY_MARK, PROTECT_ADDRESS_FINALIZER,
};
use crate::capi::IpAddress;
use crate::compact::{ResourceVersion, Uid, intern};

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
    /// This manager noticed the move itself (its claim's deletion for a move, or its Cluster gone while paused), not
    /// from the object: kept when the object does not say it (yet).
    pub moving_away_noticed: bool,
    /// It was deleting already when this manager noticed its move (seed 550176934): our own withdrawal's DELETE, not
    /// an operator's freeing its reservation, which can only come after the move.
    pub deleting_when_moved: bool,
    /// This manager sent its DELETE (mutation `own-delete-taken-for-operator-cancel`: the move noticed before our DELETE
    /// landed): never an operator's.
    pub deleted_by_us: bool,
    /// It carries clusterctl's `delete-for-move` itself.
    pub delete_for_move: bool,
    /// It carries our mark of an IPAddress a move left behind (`MOVED_AWAY_MARK`): it moved away for good, also after
    /// a restart.
    pub marked_moved_away: bool,
    /// `metadata.creationTimestamp`, in Unix seconds (0 when absent): which of two holders of an address came second.
    pub created: u32,
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
        let annotation = |k: &str| object.metadata.annotations.as_ref().and_then(|a| a.get(k));
        let marked_moved_away =
            kind.is_global() && annotation(MOVED_AWAY_ANNOTATION).is_some_and(|v| v == MOVED_AWAY_MARK);
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
            delete_for_move: annotation(DELETE_FOR_MOVE_ANNOTATION).is_some(),
            moving_away: annotation(DELETE_FOR_MOVE_ANNOTATION).is_some() || marked_moved_away,
            moving_away_noticed: false,
            deleting_when_moved: false,
            deleted_by_us: false,
            marked_moved_away,
            created: crate::compact::created_seconds(&object.metadata),
            pool,
        })
    }

    /// The Cluster its cluster-name label names, whose quota it counts in (docs/compatibility.md D21). The label, which
    /// every manager watching the pool sees alike, not its claim's Cluster: a manager that does not watch the claim
    /// would count it elsewhere, and the two would rewrite each other's `status.clusterUsage` (soak seeds 811012589
    /// and 811020392: a claim of no Cluster adopted an IPAddress labelled for one). A label edited by hand moves the
    /// count until our repair puts the claim's back (D7).
    /// `key`: the IPAddress's, whose namespace is its claim's and its Cluster's.
    pub fn cluster(&self, key: &ObjectKey) -> Option<ClusterKey> {
        self.cluster_label.as_deref().filter(|c| !c.is_empty()).map(|cluster| cluster_key(&key.namespace, cluster))
    }

    /// Made for a claim: its owner reference, or our finalizer (the garbage collector takes the owner reference of
    /// a claim that went without our release off an IPAddress whose pool still owns it, and `spec.claimRef` still
    /// names the claim), whether or not our finalizer is still on it.
    pub fn made_for_a_claim(&self) -> bool {
        self.claim_owner.is_some() || self.protected
    }
}
