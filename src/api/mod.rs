//! The Kubernetes API: our pool CRDs (v1alpha1, v1alpha2), conversion between their versions, the CRD manifests, and
//! the names (group, finalizers, annotations, labels) we share with the Go provider and with Cluster API.

/// Declares one pool kind: a spec wrapper that flattens the shared spec, with the kind's CRD attributes.
macro_rules! pool_kind {
    ($(#[$attr:meta])* $wrapper:ident($shared:ty)) => {
        #[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
        $(#[$attr])*
        pub struct $wrapper {
            #[serde(flatten)]
            pub fields: $shared,
        }

        impl std::ops::Deref for $wrapper {
            type Target = $shared;
            fn deref(&self) -> &$shared {
                &self.fields
            }
        }

        impl std::ops::DerefMut for $wrapper {
            fn deref_mut(&mut self) -> &mut $shared {
                &mut self.fields
            }
        }

        impl From<$shared> for $wrapper {
            fn from(fields: $shared) -> Self {
                Self { fields }
            }
        }
    };
}

pub mod conversion;
mod pool;
pub use pool::{NearlyExhaustedAt, Pool, PoolResource, PoolSpec};
pub mod v1alpha1;
pub mod v1alpha2;

/// The API group of our pools, shared with Cluster API's IPAddress and IPAddressClaim.
pub const GROUP: &str = "ipam.cluster.x-k8s.io";

/// Finalizer on claims: the address is released before the claim goes.
pub const RELEASE_ADDRESS_FINALIZER: &str = "ipam.cluster.x-k8s.io/ReleaseAddress";
/// Finalizer on IPAddresses: only the claim's release removes it.
pub const PROTECT_ADDRESS_FINALIZER: &str = "ipam.cluster.x-k8s.io/ProtectAddress";
/// Finalizer on pools: removed once no IPAddress references the pool.
pub const PROTECT_POOL_FINALIZER: &str = "ipam.cluster.x-k8s.io/ProtectPool";

/// On a pool: lets it be deleted while addresses are allocated.
pub const SKIP_DELETE_VALIDATION_ANNOTATION: &str = "ipam.cluster.x-k8s.io/skip-validate-delete-webhook";
/// Set by `clusterctl move` on every object it deletes from the source cluster.
pub const DELETE_FOR_MOVE_ANNOTATION: &str = "clusterctl.cluster.x-k8s.io/delete-for-move";
/// On a global pool: the addresses (prefixes, for prefix pools) that IPAddresses took to another management cluster
/// with `clusterctl move`, comma-separated. They stay reserved here until they come back or an operator removes them
/// (`index::moved_away`).
pub const MOVED_AWAY_ANNOTATION: &str = "ipam.cluster.x-k8s.io/moved-away";
/// The value of [`MOVED_AWAY_ANNOTATION`] on an IPAddress of a global pool that `clusterctl move` left behind: its
/// address is in use on another management cluster. It marks the IPAddress itself, so that a restart (or a pool
/// annotation too full to take the address) never lets it be released as an orphan.
pub const MOVED_AWAY_MARK: &str = "true";
/// Cluster API's pause annotation, honoured on claims, pools and Clusters.
pub const PAUSED_ANNOTATION: &str = "cluster.x-k8s.io/paused";
/// A claim may ask for a specific address (docs/compatibility.md D14).
pub const REQUESTED_ADDRESS_ANNOTATION: &str = "ipam.cluster.x-k8s.io/requested-address";
/// When a pool is nearly exhausted: at most this many addresses free (`16`) or this share of the pool (`10%`); its
/// `AddressesAvailable` condition says `NearlyExhausted` then. Unset: 10%.
pub const NEARLY_EXHAUSTED_AT_ANNOTATION: &str = "ipam.cluster.x-k8s.io/nearly-exhausted-at";
/// The hub annotation carrying a v1alpha1 spec across a conversion (Cluster API's conversion-data convention).
pub const CONVERSION_DATA_ANNOTATION: &str = "cluster.x-k8s.io/conversion-data";

/// Links a claim to its Cluster when `spec.clusterName` is empty; put on every IPAddress of a claim that belongs to a
/// Cluster, however the claim names it.
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";
/// `--watch-filter` selects objects carrying this label with the given value.
pub const WATCH_FILTER_LABEL: &str = "cluster.x-k8s.io/watch-filter";
/// Velero labels every object it restores with the restore's name: a restored claim waits a while for its IPAddress
/// (Velero restores IPAddressClaims before IPAddresses) before it gets a new address.
pub const VELERO_RESTORE_LABEL: &str = "velero.io/restore-name";
/// The clusterctl provider label on every object we ship.
pub const PROVIDER_LABEL: &str = "cluster.x-k8s.io/provider";
pub const PROVIDER_NAME: &str = "ipam-in-cluster";
/// On our CRDs: clusterctl move treats every pool as the root of a move hierarchy.
pub const MOVE_HIERARCHY_LABEL: &str = "clusterctl.cluster.x-k8s.io/move-hierarchy";
/// On our CRDs, in every install path: `clusterctl move` only discovers the kinds of CRDs that carry it (`clusterctl
/// init` adds it; a Helm or kustomize install has only what we ship). Without it a move leaves pools and IPAddresses
/// behind.
pub const CLUSTERCTL_LABEL: &str = "clusterctl.cluster.x-k8s.io";

/// The four pool kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PoolKind {
    InClusterIPPool,
    GlobalInClusterIPPool,
    InClusterPrefixPool,
    GlobalInClusterPrefixPool,
}

impl PoolKind {
    pub const ALL: [PoolKind; 4] = [
        PoolKind::InClusterIPPool,
        PoolKind::GlobalInClusterIPPool,
        PoolKind::InClusterPrefixPool,
        PoolKind::GlobalInClusterPrefixPool,
    ];

    pub fn kind(self) -> &'static str {
        match self {
            PoolKind::InClusterIPPool => "InClusterIPPool",
            PoolKind::GlobalInClusterIPPool => "GlobalInClusterIPPool",
            PoolKind::InClusterPrefixPool => "InClusterPrefixPool",
            PoolKind::GlobalInClusterPrefixPool => "GlobalInClusterPrefixPool",
        }
    }

    pub fn from_kind(kind: &str) -> Option<PoolKind> {
        PoolKind::ALL.into_iter().find(|k| k.kind() == kind)
    }

    /// The plural resource name (`inclusterippools`).
    pub fn plural(self) -> String {
        format!("{}s", self.kind().to_ascii_lowercase())
    }

    /// Cluster-scoped kinds serve claims of every namespace.
    pub fn is_global(self) -> bool {
        matches!(self, PoolKind::GlobalInClusterIPPool | PoolKind::GlobalInClusterPrefixPool)
    }

    pub fn is_prefix_pool(self) -> bool {
        matches!(self, PoolKind::InClusterPrefixPool | PoolKind::GlobalInClusterPrefixPool)
    }
}

impl std::fmt::Display for PoolKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.kind())
    }
}

/// The storage version of every pool kind: the version we read, write and reference pools by.
pub const POOL_VERSION: &str = "v1alpha2";

impl PoolKind {
    /// `ipam.cluster.x-k8s.io/v1alpha2`.
    pub fn api_version(self) -> String {
        format!("{GROUP}/{POOL_VERSION}")
    }

    /// The resource of the kind at its storage version, for requests that address a pool by kind.
    pub fn api_resource(self) -> kube::api::ApiResource {
        kube::api::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk(GROUP, POOL_VERSION, self.kind()),
            &self.plural(),
        )
    }
}
