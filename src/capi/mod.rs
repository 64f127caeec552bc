//! The Cluster API types we consume and produce: `IPAddressClaim` and `IPAddress` (`ipam.cluster.x-k8s.io`) and the
//! parts of `Cluster` (`cluster.x-k8s.io`) we read. They are served as `v1beta2` by CAPI ≥ 1.11 and as `v1beta1` by
//! CAPI 1.6–1.10; the version is chosen once at start-up by discovery (docs/compatibility.md D6), so these are handled
//! as dynamic objects of that version and parsed into the small typed views below.

use kube::api::{ApiResource, DynamicObject, ListParams};
use kube::core::GroupVersionKind;
use kube::{Api, Client, ResourceExt};
use serde::{Deserialize, Serialize};

use crate::api::{GROUP, PoolKind};

pub const CLUSTER_GROUP: &str = "cluster.x-k8s.io";

/// The API version of CAPI's IPAM and core types we talk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CapiVersion {
    /// CAPI 1.6–1.10.
    V1Beta1,
    /// CAPI ≥ 1.11.
    V1Beta2,
}

impl CapiVersion {
    pub fn version(self) -> &'static str {
        match self {
            CapiVersion::V1Beta1 => "v1beta1",
            CapiVersion::V1Beta2 => "v1beta2",
        }
    }

    pub fn ip_address(self) -> ApiResource {
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, self.version(), "IPAddress"), "ipaddresses")
    }

    pub fn ip_address_claim(self) -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(GROUP, self.version(), "IPAddressClaim"),
            "ipaddressclaims",
        )
    }
}

/// The versions of CAPI's types the API server serves, found by discovery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CapiApis {
    pub ipam: CapiVersion,
    /// `cluster.x-k8s.io`: v1beta2 with CAPI ≥ 1.11; `None` when Clusters are not served at all.
    pub cluster: Option<CapiVersion>,
}

impl CapiApis {
    pub fn cluster_resource(&self) -> Option<ApiResource> {
        self.cluster.map(|v| {
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(CLUSTER_GROUP, v.version(), "Cluster"), "clusters")
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    #[error(
        "the API server serves neither ipam.cluster.x-k8s.io/v1beta2 nor v1beta1 IPAddressClaims: install Cluster API (core) first"
    )]
    NoIpamApi,
    #[error("discovery of {group}: {source}")]
    Kube {
        group: &'static str,
        #[source]
        source: kube::Error,
    },
}

/// Picks v1beta2 when the API server serves it, else v1beta1 (docs/compatibility.md D6).
pub async fn discover(client: &Client) -> Result<CapiApis, DiscoveryError> {
    let ipam = served_versions(client, GROUP).await?;
    let pick = |versions: &[String]| {
        if versions.iter().any(|v| v == "v1beta2") {
            Some(CapiVersion::V1Beta2)
        } else if versions.iter().any(|v| v == "v1beta1") {
            Some(CapiVersion::V1Beta1)
        } else {
            None
        }
    };
    let ipam = pick(&ipam).ok_or(DiscoveryError::NoIpamApi)?;
    let cluster = pick(&served_versions(client, CLUSTER_GROUP).await?);
    Ok(CapiApis { ipam, cluster })
}

async fn served_versions(client: &Client, group: &'static str) -> Result<Vec<String>, DiscoveryError> {
    match client.list_api_groups().await {
        Ok(groups) => Ok(groups
            .groups
            .into_iter()
            .filter(|g| g.name == group)
            .flat_map(|g| g.versions.into_iter().map(|v| v.version))
            .collect()),
        Err(source) => Err(DiscoveryError::Kube { group, source }),
    }
}

/// `spec.poolRef` of a claim or an IPAddress (`apiGroup` is optional in v1beta1).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_group: Option<String>,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub name: String,
}

impl PoolRef {
    /// Our pool kind, when the reference points at one of ours (group and kind, as the Go provider's predicate).
    pub fn our_kind(&self) -> Option<PoolKind> {
        (self.api_group.as_deref() == Some(GROUP)).then(|| PoolKind::from_kind(&self.kind)).flatten()
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NameRef {
    #[serde(default)]
    pub name: String,
}

/// `IPAddress.spec` (the same shape in v1beta1 and v1beta2).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IpAddressSpec {
    #[serde(default)]
    pub claim_ref: NameRef,
    #[serde(default)]
    pub pool_ref: PoolRef,
    #[serde(default)]
    pub address: String,
    #[serde(default)]
    pub prefix: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
}

/// `IPAddressClaim.spec`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IpAddressClaimSpec {
    #[serde(default)]
    pub pool_ref: PoolRef,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_name: Option<String>,
}

/// Parses the `spec` of a dynamic object; `None` when it is missing or malformed.
pub fn spec_of<T: serde::de::DeserializeOwned>(obj: &DynamicObject) -> Option<T> {
    obj.data.get("spec").and_then(|s| serde_json::from_value(s.clone()).ok())
}

/// The IPAddresses that reference a pool, read live from the API server (the webhooks must not trust a cache).
/// `namespace` is the pool's namespace, `None` for a global pool (all namespaces). Each comes with its namespace.
pub async fn list_pool_addresses(
    client: &Client,
    version: CapiVersion,
    kind: PoolKind,
    pool_name: &str,
    namespace: Option<&str>,
) -> Result<Vec<(String, IpAddressSpec)>, kube::Error> {
    let resource = version.ip_address();
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let mut out = Vec::new();
    let mut params = ListParams::default().limit(500);
    loop {
        let page = match api.list(&params).await {
            Ok(page) => page,
            // No IPAddress type at all: nothing can reference the pool.
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(out),
            Err(e) => return Err(e),
        };
        for obj in &page.items {
            if let Some(spec) = spec_of::<IpAddressSpec>(obj)
                && spec.pool_ref.our_kind() == Some(kind)
                && spec.pool_ref.name == pool_name
            {
                out.push((obj.namespace().unwrap_or_default(), spec));
            }
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(out),
        }
    }
}

/// Implements `kube::Resource` for a compact CAPI object whose version is chosen at run time. The dynamic type is
/// the version alone (one byte), not an `ApiResource`: every cache key and every reconcile request carries it.
macro_rules! capi_resource {
    ($t:ty, $group:expr, $kind:literal, $plural:literal) => {
        impl kube::Resource for $t {
            type DynamicType = CapiVersion;
            type Scope = kube::core::DynamicResourceScope;

            fn group(_: &CapiVersion) -> std::borrow::Cow<'_, str> {
                $group.into()
            }
            fn version(v: &CapiVersion) -> std::borrow::Cow<'_, str> {
                v.version().into()
            }
            fn kind(_: &CapiVersion) -> std::borrow::Cow<'_, str> {
                $kind.into()
            }
            fn api_version(v: &CapiVersion) -> std::borrow::Cow<'_, str> {
                format!("{}/{}", $group, v.version()).into()
            }
            fn plural(_: &CapiVersion) -> std::borrow::Cow<'_, str> {
                $plural.into()
            }
            fn meta(&self) -> &kube::api::ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut kube::api::ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

/// Keeps only what the controllers read of an object's metadata: labels, annotations, finalizers, owner references
/// and managed fields go (the compact objects carry the few they need as fields of their own). The resourceVersion
/// stays: the watcher resumes from it.
fn slim_metadata(meta: &mut kube::api::ObjectMeta) {
    meta.labels = None;
    meta.finalizers = None;
    meta.annotations = None;
    meta.owner_references = None;
    meta.managed_fields = None;
    meta.generate_name = None;
    meta.self_link = None;
}

/// The parts of a `Cluster` we read: its name and whether it is paused.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(from = "ClusterObject")]
pub struct Cluster {
    pub metadata: kube::api::ObjectMeta,
    /// `spec.paused` or the paused annotation (docs/compatibility.md D8).
    pub paused: bool,
    /// Its `cluster.x-k8s.io/watch-filter` label (CAPI's sharding): the shard of the managers that serve it. Read
    /// before the labels are dropped.
    pub watch_filter: Option<String>,
}

#[derive(Deserialize)]
struct ClusterObject {
    #[serde(default)]
    metadata: kube::api::ObjectMeta,
    #[serde(default)]
    spec: ClusterSpec,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct ClusterSpec {
    #[serde(default)]
    paused: Option<bool>,
}

impl From<ClusterObject> for Cluster {
    fn from(mut o: ClusterObject) -> Self {
        let paused = o.spec.paused == Some(true)
            || o.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(crate::api::PAUSED_ANNOTATION));
        let watch_filter =
            o.metadata.labels.as_mut().and_then(|l| l.remove(crate::api::WATCH_FILTER_LABEL)).filter(|v| !v.is_empty());
        slim_metadata(&mut o.metadata);
        Cluster { metadata: o.metadata, paused, watch_filter }
    }
}

capi_resource!(Cluster, CLUSTER_GROUP, "Cluster", "clusters");

impl Cluster {
    pub fn is_paused(&self) -> bool {
        self.paused
    }
}

/// An `IPAddress`, as its watch delivers it (the controllers keep a smaller record of it).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct IpAddress {
    #[serde(default)]
    pub metadata: kube::api::ObjectMeta,
    #[serde(default)]
    pub spec: IpAddressSpec,
}

capi_resource!(IpAddress, GROUP, "IPAddress", "ipaddresses");

impl IpAddress {
    /// The typed view of an IPAddress read or written as a dynamic object (a malformed spec reads as the default).
    pub fn from_dynamic(object: DynamicObject) -> IpAddress {
        let spec = spec_of(&object).unwrap_or_default();
        IpAddress { metadata: object.metadata, spec }
    }

    /// The object as it is sent, at the IPAM API `version` the API server serves.
    pub fn to_dynamic(&self, version: CapiVersion) -> DynamicObject {
        let mut object = DynamicObject::new(self.metadata.name.as_deref().unwrap_or_default(), &version.ip_address());
        object.metadata = self.metadata.clone();
        object.data = serde_json::json!({ "spec": self.spec });
        object
    }
}

// After `capi_resource!`, which it uses.
mod claim;
pub mod status;
pub use claim::{Claim, ClaimResource, ReadyCondition, allocated_address};
