//! IPAddressClaims as the controllers keep them: compact, with only what they read.

use std::sync::Arc;

use serde::Deserialize;

use super::{CapiVersion, IpAddressClaimSpec, NameRef, slim_metadata};
use crate::api::{CLUSTER_NAME_LABEL, GROUP, PoolKind};
use crate::compact::ObjectKey;

/// A claim's stored `Ready` condition, as the controller compares it: the message is kept as a digest only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadyCondition {
    /// `Some(true)` for "True", `Some(false)` for "False", `None` for anything else.
    pub status: Option<bool>,
    /// [`ReadyCondition::digest_of`] of status and reason: a change of either is a transition.
    pub transition_digest: u64,
    /// [`ReadyCondition::digest_of`] of status, reason and message: a change of any needs a write.
    pub digest: u64,
    /// `lastTransitionTime` in Unix seconds.
    pub last_transition_time: Option<i64>,
}

/// An `IPAddressClaim` as the watch and our writes deliver it: the compact [`Claim`] the controller caches, and the
/// metadata the watcher resumes from (it is dropped once the claim is cached).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(from = "ClaimObject")]
pub struct ClaimResource {
    /// Identity, resourceVersion, generation and deletion only (no labels, annotations, owners or finalizers).
    pub metadata: kube::api::ObjectMeta,
    pub claim: Claim,
}

/// An `IPAddressClaim` as the controller keeps it, small enough to cache 100,000 of: its namespace and name, UID,
/// generation and deletion time, its spec, the few labels and annotations the controller reads,
/// `status.addressRef` and our `Ready` condition. No `ObjectMeta` (360 bytes even when empty).
#[derive(Clone, Debug, Default)]
pub struct Claim {
    pub key: ObjectKey,
    /// It goes into the IPAddress's owner reference as it is.
    pub uid: crate::compact::UidText,
    /// `metadata.generation` (the API server starts it at 1; 8 bytes where `Option<i64>` takes 16).
    pub generation: Option<std::num::NonZeroI64>,
    pub deletion_timestamp: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    /// `spec.poolRef`: the kind when it is one of ours, and the name.
    pub pool_kind: Option<PoolKind>,
    pub pool_name: Arc<str>,
    /// The Cluster it belongs to: `spec.clusterName` (v1beta2), else the `cluster.x-k8s.io/cluster-name` label (the
    /// older way). Read through [`Claim::cluster`], the one place that decides.
    pub(crate) cluster: Option<Arc<str>>,
    /// Where our `ReleaseAddress` finalizer is in `metadata.finalizers` (its removal tests that index).
    pub release_finalizer_index: Option<u16>,
    /// `metadata.finalizers` is not empty (ours is appended to the list, or the list is created).
    pub has_finalizers: bool,
    /// The precondition of our writes to it: they go through only if nothing changed since we read it.
    pub resource_version: crate::compact::ResourceVersion,
    /// Its status has conditions other than our `Ready` (in `status.conditions` or, for v1beta1,
    /// `status.v1beta2.conditions`): a status write reads them first, to write them back unchanged.
    pub foreign_conditions: bool,
    /// The `cluster.x-k8s.io/paused` annotation is present.
    pub paused: bool,
    /// `clusterctl move` is deleting it from this management cluster (its `delete-for-move` annotation).
    pub moving_away: bool,
    /// The `ipam.cluster.x-k8s.io/requested-address` annotation.
    pub requested_address: Option<Box<str>>,
    /// The `cluster.x-k8s.io/watch-filter` label.
    pub watch_filter: Option<Arc<str>>,
    /// `metadata.creationTimestamp`, in Unix seconds (0 when absent; 4 bytes, enough until 2106).
    pub created: u32,
    /// Velero restored it (its `velero.io/restore-name` label): its IPAddress may still be on its way.
    pub restored: bool,
    /// `status.addressRef.name`, read through [`Claim::address_ref`]: empty (no second copy of the name) when it is
    /// the claim's own name, as we write it.
    pub bound: Option<Box<str>>,
    pub ready: Option<ReadyCondition>,
    /// The address our `Ready` condition names (`allocated <address> from …`): a bound claim's only durable trace of
    /// the address its machine uses, should its IPAddress go with what a former leader knew of it.
    pub bound_address: Option<std::net::IpAddr>,
}

/// The wire form of a claim, read once and turned into a [`Claim`].
#[derive(Deserialize)]
pub(super) struct ClaimObject {
    #[serde(default)]
    metadata: kube::api::ObjectMeta,
    #[serde(default)]
    spec: IpAddressClaimSpec,
    #[serde(default)]
    status: Option<ClaimStatusObject>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(super) struct ClaimStatusObject {
    #[serde(default)]
    address_ref: Option<NameRef>,
    #[serde(default)]
    conditions: Option<Vec<ConditionObject>>,
    /// A v1beta1 claim's `status.v1beta2` (its metav1 conditions).
    #[serde(default)]
    v1beta2: Option<V1Beta2StatusObject>,
}

#[derive(Deserialize, Default)]
pub(super) struct V1Beta2StatusObject {
    #[serde(default)]
    conditions: Option<Vec<ConditionObject>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ConditionObject {
    #[serde(rename = "type", default)]
    type_: String,
    #[serde(default)]
    status: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    message: String,
    #[serde(default)]
    last_transition_time: String,
}

impl ReadyCondition {
    pub fn digest_of(status: &str, reason: &str, message: Option<&str>) -> u64 {
        crate::compact::digest(&(status, reason, message))
    }

    pub fn status_str(&self) -> &'static str {
        match self.status {
            Some(true) => "True",
            Some(false) => "False",
            None => "Unknown",
        }
    }
}

impl From<ConditionObject> for ReadyCondition {
    fn from(c: ConditionObject) -> Self {
        let status = match c.status.as_str() {
            "True" => Some(true),
            "False" => Some(false),
            _ => None,
        };
        ReadyCondition {
            status,
            transition_digest: Self::digest_of(&c.status, &c.reason, None),
            digest: Self::digest_of(&c.status, &c.reason, Some(&c.message)),
            last_transition_time: c.last_transition_time.parse::<jiff::Timestamp>().ok().map(|t| t.as_second()),
        }
    }
}

capi_resource!(ClaimResource, GROUP, "IPAddressClaim", "ipaddressclaims");

impl From<ClaimObject> for ClaimResource {
    fn from(mut o: ClaimObject) -> Self {
        let label = |k: &str| o.metadata.labels.as_ref().and_then(|l| l.get(k)).filter(|v| !v.is_empty()).cloned();
        let annotation = |k: &str| o.metadata.annotations.as_ref().and_then(|a| a.get(k)).cloned();
        let cluster = o.spec.cluster_name.take().filter(|n| !n.is_empty()).or_else(|| label(CLUSTER_NAME_LABEL));
        let watch_filter = label(crate::api::WATCH_FILTER_LABEL).map(|v| crate::compact::intern(&v));
        let restored = label(crate::api::VELERO_RESTORE_LABEL).is_some();
        let release_finalizer_index = o
            .metadata
            .finalizers
            .iter()
            .flatten()
            .position(|f| f == crate::api::RELEASE_ADDRESS_FINALIZER)
            .and_then(|i| u16::try_from(i).ok());
        let paused = annotation(crate::api::PAUSED_ANNOTATION).is_some();
        let moving_away = annotation(crate::api::DELETE_FOR_MOVE_ANNOTATION).is_some();
        let requested_address =
            annotation(crate::api::REQUESTED_ADDRESS_ANNOTATION).filter(|v| !v.is_empty()).map(String::into_boxed_str);
        let has_finalizers = o.metadata.finalizers.as_ref().is_some_and(|f| !f.is_empty());
        let status = o.status.take().unwrap_or_default();
        let secondary = status.v1beta2.and_then(|s| s.conditions).unwrap_or_default();
        let foreign_conditions = status.conditions.iter().flatten().chain(&secondary).any(|c| c.type_ != "Ready");
        slim_metadata(&mut o.metadata);
        let meta = &o.metadata;
        let claim = Claim {
            key: ObjectKey::new(
                meta.namespace.as_deref().unwrap_or_default(),
                meta.name.as_deref().unwrap_or_default(),
            ),
            uid: crate::compact::UidText::of(meta.uid.as_deref().unwrap_or_default()),
            generation: meta.generation.and_then(std::num::NonZeroI64::new),
            deletion_timestamp: meta.deletion_timestamp.clone(),
            pool_kind: o.spec.pool_ref.our_kind(),
            pool_name: crate::compact::intern(&o.spec.pool_ref.name),
            cluster: cluster.map(|n| crate::compact::intern(&n)),
            release_finalizer_index,
            has_finalizers,
            resource_version: crate::compact::ResourceVersion::of(meta.resource_version.as_deref().unwrap_or_default()),
            foreign_conditions,
            paused,
            moving_away,
            requested_address,
            watch_filter,
            created: crate::compact::created_seconds(meta),
            restored,
            bound: status
                .address_ref
                .map(|r| r.name)
                .filter(|n| !n.is_empty())
                .map(|n| if Some(n.as_str()) == meta.name.as_deref() { Box::default() } else { n.into_boxed_str() }),
            bound_address: None,
            ready: None,
        };
        let mut claim = claim;
        let ours = status.conditions.into_iter().flatten().find(|c| c.type_ == "Ready");
        claim.bound_address = ours
            .as_ref()
            .and_then(|c| allocated_address(&c.message))
            .and_then(|a| crate::ipam::address::parse_ip(a).ok());
        claim.ready = ours.map(ReadyCondition::from);
        ClaimResource { metadata: o.metadata, claim }
    }
}

/// The address an `Allocated` message of ours names (`allocated <address> from <pool>…`).
pub fn allocated_address(message: &str) -> Option<&str> {
    message.strip_prefix("allocated ")?.split_whitespace().next().filter(|a| !a.is_empty())
}

impl Claim {
    /// The Cluster this claim belongs to: `spec.clusterName`, else the cluster-name label.
    pub fn cluster(&self) -> Option<&str> {
        self.cluster.as_deref()
    }

    /// Its Cluster as a pool's quota counts it: `namespace/name` of its namespace (docs/compatibility.md D21).
    pub fn cluster_key(&self) -> Option<crate::compact::ClusterKey> {
        self.cluster().filter(|c| !c.is_empty()).map(|c| crate::compact::cluster_key(&self.key.namespace, c))
    }

    /// Whether the claim's pool is the one of an IPAddress of its name (`pool`, with its kind, namespace and name):
    /// then that IPAddress is adopted by the claim rather than released as an orphan.
    pub fn uses_pool(&self, kind: PoolKind, namespace: &str, name: &str) -> bool {
        self.pool_kind == Some(kind)
            && *self.pool_name == *name
            && (kind.is_global() || *self.key.namespace == *namespace)
    }

    /// `status.addressRef.name`.
    pub fn address_ref(&self) -> Option<&str> {
        self.bound.as_deref().map(|name| if name.is_empty() { &*self.key.name } else { name })
    }
}
