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

/// When a pool counts as nearly exhausted (annotation [`super::NEARLY_EXHAUSTED_AT_ANNOTATION`], else
/// [`NearlyExhaustedAt::DEFAULT`]): at most a count of free addresses (child prefixes in prefix pools), or at most a
/// share of the pool's total (never below one address, so that a small pool says it before its last one goes). `0`
/// and `0%` turn the state off: such a pool is only ever available or exhausted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NearlyExhaustedAt {
    Free(u64),
    Percent(u8),
}

impl NearlyExhaustedAt {
    pub const DEFAULT: NearlyExhaustedAt = NearlyExhaustedAt::Percent(10);

    /// The most free addresses at which a pool of `total` is nearly exhausted.
    pub fn threshold(self, total: i64) -> i64 {
        match self {
            NearlyExhaustedAt::Free(n) => i64::try_from(n).unwrap_or(i64::MAX),
            NearlyExhaustedAt::Percent(0) => 0,
            NearlyExhaustedAt::Percent(p) => {
                let share = i128::from(total.max(0)) * i128::from(p) / 100;
                i64::try_from(share).unwrap_or(i64::MAX).max(1)
            }
        }
    }
}

impl std::str::FromStr for NearlyExhaustedAt {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let wrong = || format!("{s:?} is neither a count of free addresses (16) nor a share of the pool (10%)");
        match s.strip_suffix('%') {
            Some(p) => p.parse::<u8>().ok().filter(|p| *p <= 100).map(NearlyExhaustedAt::Percent).ok_or_else(wrong),
            None => s.parse::<u64>().map(NearlyExhaustedAt::Free).map_err(|_| wrong()),
        }
    }
}

impl std::fmt::Display for NearlyExhaustedAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NearlyExhaustedAt::Free(n) => write!(f, "{n}"),
            NearlyExhaustedAt::Percent(p) => write!(f, "{p}%"),
        }
    }
}

#[cfg(test)]
mod nearly_exhausted_tests {
    use super::NearlyExhaustedAt;

    #[test]
    fn thresholds_parse_and_scale_with_the_pool() {
        let at = |s: &str| s.parse::<NearlyExhaustedAt>();
        assert_eq!(at("10%"), Ok(NearlyExhaustedAt::Percent(10)));
        assert_eq!(at(" 16 "), Ok(NearlyExhaustedAt::Free(16)));
        for wrong in ["101%", "-1", "ten", "%", "1.5%", ""] {
            let e = at(wrong).expect_err(wrong);
            assert!(e.contains("neither a count") && e.contains(&format!("{:?}", wrong.trim())), "{e}");
        }
        assert_eq!(NearlyExhaustedAt::Percent(10).threshold(1000), 100);
        assert_eq!(NearlyExhaustedAt::Percent(10).threshold(5), 1, "never below one address");
        assert_eq!(NearlyExhaustedAt::Percent(0).threshold(1000), 0);
        assert_eq!(NearlyExhaustedAt::Percent(100).threshold(i64::MAX), i64::MAX);
        assert_eq!(NearlyExhaustedAt::Free(u64::MAX).threshold(3), i64::MAX);
        assert_eq!(NearlyExhaustedAt::Percent(10).to_string(), "10%");
    }
}
