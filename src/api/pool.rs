//! A pool of any of the four kinds, typed, as the controllers keep it: its kind, its metadata, its spec (IP or prefix)
//! and its status. Each watch reads its kind's own type and turns it into this once.

use kube::Resource;
use kube::api::ObjectMeta;

use super::v1alpha2::{
    GlobalInClusterIPPool, GlobalInClusterPrefixPool, IPPoolSpec, InClusterIPPool, InClusterPrefixPool, PoolStatus,
    PrefixPoolSpec,
};
use super::{PAUSED_ANNOTATION, PoolKind};

#[derive(Clone, Debug, PartialEq)]
pub enum PoolSpec {
    Ip(IPPoolSpec),
    Prefix(PrefixPoolSpec),
}

impl PoolSpec {
    pub fn gateway(&self) -> Option<&str> {
        match self {
            PoolSpec::Ip(s) => s.gateway.as_deref(),
            PoolSpec::Prefix(s) => s.gateway.as_deref(),
        }
    }

    /// `spec.preAllocations[claim]` (IP pools only).
    pub fn pre_allocation(&self, claim: &str) -> Option<&str> {
        match self {
            PoolSpec::Ip(s) => s.pre_allocations.as_ref()?.get(claim).map(String::as_str),
            PoolSpec::Prefix(_) => None,
        }
    }

    /// `spec.addressReuseGracePeriodSeconds` (IP pools only).
    pub fn reuse_grace_period_seconds(&self) -> Option<i64> {
        match self {
            PoolSpec::Ip(s) => s.address_reuse_grace_period_seconds.map(i64::from),
            PoolSpec::Prefix(_) => None,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Pool {
    pub kind: PoolKind,
    /// Without managed fields.
    pub metadata: ObjectMeta,
    pub spec: PoolSpec,
    pub status: PoolStatus,
}

impl Pool {
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    /// "" for the global kinds.
    pub fn namespace(&self) -> &str {
        if self.kind.is_global() { "" } else { self.metadata.namespace.as_deref().unwrap_or_default() }
    }

    pub fn is_paused(&self) -> bool {
        self.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(PAUSED_ANNOTATION))
    }

    pub fn is_deleting(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
    }

    /// The shard the pool belongs to: its `cluster.x-k8s.io/watch-filter` label, served only by the manager started
    /// with `--watch-filter=<that value>` (docs/operations.md); `None`: any manager's.
    pub fn shard(&self) -> Option<&str> {
        self.metadata.labels.as_ref()?.get(super::WATCH_FILTER_LABEL).map(String::as_str).filter(|v| !v.is_empty())
    }

    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.metadata.annotations.as_ref()?.get(key).map(String::as_str)
    }
}

/// One of the four typed pool kinds, as its watch reads it.
pub trait PoolResource:
    Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + Sync + 'static
{
    const KIND: PoolKind;
    fn into_pool(self) -> Pool;
    /// The kind's objects in `namespace` (None: everywhere; the global kinds have no namespace).
    fn api(client: kube::Client, namespace: Option<&str>) -> kube::Api<Self>;
}

macro_rules! pool_resource {
    ($($ty:ident => $variant:ident, $global:tt);* $(;)?) => {$(
        impl PoolResource for $ty {
            const KIND: PoolKind = PoolKind::$ty;
            fn into_pool(mut self) -> Pool {
                self.metadata.managed_fields = None;
                Pool {
                    kind: Self::KIND,
                    spec: PoolSpec::$variant(self.spec.fields),
                    status: self.status.unwrap_or_default(),
                    metadata: self.metadata,
                }
            }
            fn api(client: kube::Client, namespace: Option<&str>) -> kube::Api<Self> {
                pool_api!($global, client, namespace)
            }
        }
    )*};
}

macro_rules! pool_api {
    (true, $client:expr, $namespace:expr) => {{
        let _ = $namespace;
        kube::Api::all($client)
    }};
    (false, $client:expr, $namespace:expr) => {
        match $namespace {
            Some(ns) => kube::Api::namespaced($client, ns),
            None => kube::Api::all($client),
        }
    };
}

pool_resource! {
    InClusterIPPool => Ip, false;
    GlobalInClusterIPPool => Ip, true;
    InClusterPrefixPool => Prefix, false;
    GlobalInClusterPrefixPool => Prefix, true;
}

impl Pool {
    /// A pool of `kind` from its JSON form (as read from the API server, at the storage version).
    pub fn from_object(kind: PoolKind, object: serde_json::Value) -> Result<Pool, String> {
        fn parse<K: PoolResource>(object: serde_json::Value) -> Result<Pool, String> {
            serde_json::from_value::<K>(object).map(K::into_pool).map_err(|e| format!("reading a {}: {e}", K::KIND))
        }
        match kind {
            PoolKind::InClusterIPPool => parse::<InClusterIPPool>(object),
            PoolKind::GlobalInClusterIPPool => parse::<GlobalInClusterIPPool>(object),
            PoolKind::InClusterPrefixPool => parse::<InClusterPrefixPool>(object),
            PoolKind::GlobalInClusterPrefixPool => parse::<GlobalInClusterPrefixPool>(object),
        }
    }
}

impl std::fmt::Display for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.metadata.namespace.as_deref() {
            Some(ns) if !self.kind.is_global() => write!(f, "{} {ns}/{}", self.kind, self.name()),
            _ => write!(f, "{} {:?}", self.kind, self.name()),
        }
    }
}
