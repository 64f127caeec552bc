//! `ipam.cluster.x-k8s.io/v1alpha2`: the storage version of all four pool kinds.
//!
//! Both IP pool kinds share [`IPPoolSpec`] and both prefix pool kinds share [`PrefixPoolSpec`], as in the Go provider.
//! kube-derive makes one kind per spec struct, so each kind has a thin spec wrapper that flattens the shared fields
//! (the wire format and schema are unchanged) and dereferences to them.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ipam;
/// `spec.allocationStrategy` of an IP pool (docs/compatibility.md D20): the allocator's own type, as written.
pub use crate::ipam::AllocationStrategy;

/// The spec of `InClusterIPPool` and `GlobalInClusterIPPool`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IPPoolSpec {
    /// Addresses is a list of IP addresses that can be assigned. This set of addresses can be non-contiguous. Each
    /// entry is a single IP (10.0.0.5), an inclusive range (10.0.0.10-10.0.0.20) or a CIDR (10.0.0.0/24).
    #[schemars(length(max = 1024), inner(length(max = 128)))]
    pub addresses: Vec<String>,

    /// Prefix is the network prefix to use.
    #[schemars(range(min = 0, max = 128))]
    pub prefix: i32,

    /// Gateway is the network gateway. It is never allocated and is copied to every IPAddress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,

    /// AllocateReservedIPAddresses causes the provider to allocate the network address (the first address in the
    /// inferred subnet) and broadcast address (the last address in the inferred subnet) when IPv4. The provider will
    /// allocate the anycast address (the first address in the inferred subnet) when IPv6.
    #[serde(rename = "allocateReservedIPAddresses", default, skip_serializing_if = "Option::is_none")]
    pub allocate_reserved_ip_addresses: Option<bool>,

    /// ExcludedAddresses is a list of IP addresses, which will be excluded from the set of assignable IP addresses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024), inner(length(max = 128)))]
    pub excluded_addresses: Option<Vec<String>>,

    /// AddressReuseGracePeriodSeconds is the number of seconds an IPAddress is held after its claim is deleted,
    /// before the address may be handed out again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub address_reuse_grace_period_seconds: Option<i32>,

    /// PreAllocations pins addresses to claims by claim name: a claim of that name gets this address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxProperties" = 4096))]
    pub pre_allocations: Option<BTreeMap<String, String>>,

    /// Subnets are further subnets of the pool, each with its own addresses, prefix and gateway. The top-level
    /// addresses, prefix and gateway are the first subnet; an address is handed out from the first subnet, in that
    /// order, that has a free one, and its IPAddress carries the prefix and gateway of that subnet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    pub subnets: Option<Vec<IPPoolSubnet>>,

    /// AllocationStrategy is the order in which a subnet's free addresses are handed out: Sequential (the default,
    /// the lowest free address), Random (a free address chosen uniformly; not for a subnet of more than 2^63 - 1
    /// addresses, and cannot be changed to or from after creation) or LeastRecentlyReleased (never-used addresses
    /// first, then those released longest ago: the leader keeps the order of the pool's last 512 releases in memory,
    /// older ones come by address, and a new leader counts the free addresses below the highest in use as released).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "allocation_strategy_schema")]
    pub allocation_strategy: Option<AllocationStrategy>,

    /// Quota caps how many addresses of the pool the claims of one Cluster (spec.clusterName, else the
    /// cluster.x-k8s.io/cluster-name label) hold. A claim of a Cluster at its quota waits, with the reason
    /// QuotaExceeded, until the Cluster holds fewer. Claims of no Cluster are never limited, and an address pinned by
    /// preAllocations is given at the quota (and counted). Lowering a quota below what a Cluster holds takes nothing
    /// back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<PoolQuota>,
}

/// `spec.quota` of an IP pool: the most addresses the claims of one Cluster hold (docs/compatibility.md D21).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolQuota {
    /// PerCluster is the quota of every Cluster the clusters field does not name (absent: no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub per_cluster: Option<i32>,

    /// Clusters sets the quota of the Clusters it names, by "namespace/name" (a namespaced pool's claims are all of
    /// its namespace), in place of perCluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxProperties" = 4096))]
    pub clusters: Option<BTreeMap<String, i32>>,
}

/// A string of the strategies' names: schemars would list `null` among them for the `Option`, which a CRD's enum
/// cannot hold (an absent field is the default, Sequential).
fn allocation_strategy_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "enum": ["Sequential", "Random", "LeastRecentlyReleased"],
    })
}

/// One more subnet of an IP pool, with its own addresses, prefix and gateway (docs/compatibility.md D19).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IPPoolSubnet {
    /// Addresses of this subnet that can be assigned: single IPs, inclusive ranges or CIDRs, as in spec.addresses.
    /// No address may be in another subnet of the pool.
    #[schemars(length(min = 1, max = 1024), inner(length(max = 128)))]
    pub addresses: Vec<String>,

    /// Prefix is the network prefix of this subnet.
    #[schemars(range(min = 0, max = 128))]
    pub prefix: i32,

    /// Gateway of this subnet. It is never allocated (from any subnet of the pool) and is copied to every IPAddress
    /// whose address comes from this subnet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,

    /// ExcludedAddresses are excluded from this subnet (spec.excludedAddresses are excluded from every subnet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024), inner(length(max = 128)))]
    pub excluded_addresses: Option<Vec<String>>,
}

impl IPPoolSubnet {
    fn to_ipam(&self) -> ipam::IpSubnetSpec {
        ipam::IpSubnetSpec {
            addresses: self.addresses.clone(),
            prefix: i64::from(self.prefix),
            gateway: self.gateway.clone(),
            excluded_addresses: self.excluded_addresses.clone().unwrap_or_default(),
        }
    }
}

impl IPPoolSpec {
    /// The fields the allocator works on.
    pub fn to_ipam(&self) -> ipam::IpPoolSpec {
        ipam::IpPoolSpec {
            addresses: self.addresses.clone(),
            prefix: i64::from(self.prefix),
            gateway: self.gateway.clone(),
            excluded_addresses: self.excluded_addresses.clone().unwrap_or_default(),
            allocate_reserved_ip_addresses: self.allocate_reserved_ip_addresses.unwrap_or(false),
            subnets: self.subnets.iter().flatten().map(IPPoolSubnet::to_ipam).collect(),
            allocation_strategy: self.allocation_strategy.unwrap_or_default(),
        }
    }
}

/// The status of every pool kind.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolStatus {
    /// Addresses reports the count of total, free, used and out-of-range addresses (or prefixes) in the pool.
    #[serde(rename = "ipAddresses", default, skip_serializing_if = "Option::is_none")]
    pub addresses: Option<PoolAddressesStatus>,

    /// Conditions of the pool: Ready is False with a reason when the spec is invalid or the pool is being deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Option<Vec<Condition>>,

    /// ClusterUsage says how many addresses the Clusters' claims hold, for a pool with a quota.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_usage: Option<ClusterUsage>,
}

impl PoolQuota {
    /// The quota of the Cluster `cluster` ("namespace/name"), if it has one: its entry in clusters, else perCluster. A
    /// negative number, which the webhook refuses, counts as 0.
    pub fn limit_of(&self, cluster: &str) -> Option<u32> {
        let limit = self.clusters.as_ref().and_then(|c| c.get(cluster)).copied().or(self.per_cluster)?;
        Some(u32::try_from(limit).unwrap_or(0))
    }
}

/// How many addresses of a pool with a quota the claims of each Cluster hold, as the pool's IPAddresses say (bounded:
/// the Clusters that hold the most are named, the rest counted).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterUsage {
    /// Clusters is the number of Clusters whose claims hold addresses of the pool.
    pub clusters: i64,
    /// AtQuota is the number of those that hold their quota or more: their next claims wait.
    pub at_quota: i64,
    /// Top names the Clusters that hold the most (at most 10), the most first.
    #[schemars(length(max = 10))]
    pub top: Vec<ClusterUsageEntry>,
    /// WithoutCluster is the number of addresses held by claims of no Cluster (never limited).
    pub without_cluster: i64,
}

/// One Cluster's use of a pool.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterUsageEntry {
    /// Cluster is the Cluster's "namespace/name".
    pub cluster: String,
    /// Used is the number of addresses its claims hold.
    pub used: i64,
    /// Quota is its quota (absent: no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<i64>,
}

/// Counts of a pool (docs/compatibility.md D4); saturate at 2^63 − 1.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolAddressesStatus {
    /// Total is the number of allocatable addresses (prefix pools: child prefixes) in the pool.
    pub total: i64,
    /// Used is the number of IPAddresses that reference the pool.
    pub used: i64,
    /// Free is total − (used − outOfRange), never negative.
    pub free: i64,
    /// OutOfRange is the number of IPAddresses of the pool that the current spec can no longer hand out.
    pub out_of_range: i64,
}

impl From<ipam::PoolCounts> for PoolAddressesStatus {
    fn from(c: ipam::PoolCounts) -> Self {
        Self { total: c.total, used: c.used, free: c.free, out_of_range: c.out_of_range }
    }
}

/// The spec of `InClusterPrefixPool` and `GlobalInClusterPrefixPool`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PrefixPoolSpec {
    /// Prefixes is a list of network-aligned IPv6 CIDRs (fd00::/48) that child prefixes are carved from.
    #[schemars(length(max = 1024), inner(length(max = 128)))]
    pub prefixes: Vec<String>,

    /// AllocationPrefixLength is the length of every allocated child prefix. Immutable.
    #[serde(default = "default_allocation_prefix_length")]
    #[schemars(range(min = 1, max = 128))]
    pub allocation_prefix_length: i32,

    /// Gateway is informational: it is copied to every IPAddress and never blocks allocation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,

    /// ExcludedPrefixes lists IPs, ranges or CIDRs; no child prefix overlapping one of them is handed out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024), inner(length(max = 128)))]
    pub excluded_prefixes: Option<Vec<String>>,
}

fn default_allocation_prefix_length() -> i32 {
    i32::from(ipam::prefix_pool::DEFAULT_ALLOCATION_PREFIX_LENGTH)
}

impl PrefixPoolSpec {
    /// The fields the allocator works on.
    pub fn to_ipam(&self) -> ipam::PrefixPoolSpec {
        ipam::PrefixPoolSpec {
            prefixes: self.prefixes.clone(),
            allocation_prefix_length: i64::from(self.allocation_prefix_length),
            gateway: self.gateway.clone(),
            excluded_prefixes: self.excluded_prefixes.clone().unwrap_or_default(),
        }
    }
}

pool_kind! {
    /// InClusterIPPoolSpec defines the desired state of InClusterIPPool.
    #[kube(
        group = "ipam.cluster.x-k8s.io", version = "v1alpha2", kind = "InClusterIPPool", namespaced,
        status = "PoolStatus", category = "cluster-api",
        doc = "InClusterIPPool is the Schema for the inclusterippools API.",
        printcolumn(name = "Addresses", type_ = "string", json_path = ".spec.addresses", description = "List of addresses, to allocate from"),
        printcolumn(name = "Prefix", type_ = "integer", json_path = ".spec.prefix", description = "Network prefix of the addresses"),
        printcolumn(name = "Gateway", type_ = "string", json_path = ".spec.gateway", description = "Gateway of the addresses"),
        printcolumn(name = "Total", type_ = "integer", json_path = ".status.ipAddresses.total", description = "Count of IPs configured for the pool"),
        printcolumn(name = "Free", type_ = "integer", json_path = ".status.ipAddresses.free", description = "Count of unallocated IPs in the pool"),
        printcolumn(name = "Used", type_ = "integer", json_path = ".status.ipAddresses.used", description = "Count of allocated IPs in the pool"),
        printcolumn(name = "OutOfRange", type_ = "integer", json_path = ".status.ipAddresses.outOfRange", description = "Count of allocated IPs the pool can no longer hand out"),
        printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status", description = "Whether the pool can hand out addresses (its Ready condition)"),
        printcolumn(name = "Available", type_ = "string", json_path = ".status.conditions[?(@.type==\"AddressesAvailable\")].reason", description = "Available, NearlyExhausted or Exhausted (its AddressesAvailable condition)"),
        printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    )]
    InClusterIPPoolSpec(IPPoolSpec)
}

pool_kind! {
    /// GlobalInClusterIPPoolSpec defines the desired state of GlobalInClusterIPPool.
    #[kube(
        group = "ipam.cluster.x-k8s.io", version = "v1alpha2", kind = "GlobalInClusterIPPool",
        status = "PoolStatus", category = "cluster-api",
        doc = "GlobalInClusterIPPool is the Schema for the global inclusterippools API. This pool type is cluster scoped. IPAddressClaims can reference pools of this type from any namespace.",
        printcolumn(name = "Addresses", type_ = "string", json_path = ".spec.addresses", description = "List of addresses, to allocate from"),
        printcolumn(name = "Prefix", type_ = "integer", json_path = ".spec.prefix", description = "Network prefix of the addresses"),
        printcolumn(name = "Gateway", type_ = "string", json_path = ".spec.gateway", description = "Gateway of the addresses"),
        printcolumn(name = "Total", type_ = "integer", json_path = ".status.ipAddresses.total", description = "Count of IPs configured for the pool"),
        printcolumn(name = "Free", type_ = "integer", json_path = ".status.ipAddresses.free", description = "Count of unallocated IPs in the pool"),
        printcolumn(name = "Used", type_ = "integer", json_path = ".status.ipAddresses.used", description = "Count of allocated IPs in the pool"),
        printcolumn(name = "OutOfRange", type_ = "integer", json_path = ".status.ipAddresses.outOfRange", description = "Count of allocated IPs the pool can no longer hand out"),
        printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status", description = "Whether the pool can hand out addresses (its Ready condition)"),
        printcolumn(name = "Available", type_ = "string", json_path = ".status.conditions[?(@.type==\"AddressesAvailable\")].reason", description = "Available, NearlyExhausted or Exhausted (its AddressesAvailable condition)"),
        printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    )]
    GlobalInClusterIPPoolSpec(IPPoolSpec)
}

pool_kind! {
    /// InClusterPrefixPoolSpec defines the desired state of InClusterPrefixPool.
    #[kube(
        group = "ipam.cluster.x-k8s.io", version = "v1alpha2", kind = "InClusterPrefixPool", namespaced,
        status = "PoolStatus", category = "cluster-api",
        doc = "InClusterPrefixPool is the Schema for the inclusterprefixpools API: it hands out IPv6 child prefixes.",
        printcolumn(name = "Prefixes", type_ = "string", json_path = ".spec.prefixes", description = "List of prefixes, to carve child prefixes from"),
        printcolumn(name = "Length", type_ = "integer", json_path = ".spec.allocationPrefixLength", description = "Length of every allocated child prefix"),
        printcolumn(name = "Gateway", type_ = "string", json_path = ".spec.gateway", description = "Gateway copied to every allocation"),
        printcolumn(name = "Total", type_ = "integer", json_path = ".status.ipAddresses.total", description = "Count of allocatable sub-prefixes in the pool"),
        printcolumn(name = "Free", type_ = "integer", json_path = ".status.ipAddresses.free", description = "Count of unallocated sub-prefixes in the pool"),
        printcolumn(name = "Used", type_ = "integer", json_path = ".status.ipAddresses.used", description = "Count of allocated sub-prefixes in the pool"),
        printcolumn(name = "OutOfRange", type_ = "integer", json_path = ".status.ipAddresses.outOfRange", description = "Count of allocations the pool can no longer hand out"),
        printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status", description = "Whether the pool can hand out addresses (its Ready condition)"),
        printcolumn(name = "Available", type_ = "string", json_path = ".status.conditions[?(@.type==\"AddressesAvailable\")].reason", description = "Available, NearlyExhausted or Exhausted (its AddressesAvailable condition)"),
        printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    )]
    InClusterPrefixPoolSpec(PrefixPoolSpec)
}

pool_kind! {
    /// GlobalInClusterPrefixPoolSpec defines the desired state of GlobalInClusterPrefixPool.
    #[kube(
        group = "ipam.cluster.x-k8s.io", version = "v1alpha2", kind = "GlobalInClusterPrefixPool",
        status = "PoolStatus", category = "cluster-api",
        doc = "GlobalInClusterPrefixPool is the Schema for the globalinclusterprefixpools API. This pool type is cluster scoped.",
        printcolumn(name = "Prefixes", type_ = "string", json_path = ".spec.prefixes", description = "List of prefixes, to carve child prefixes from"),
        printcolumn(name = "Length", type_ = "integer", json_path = ".spec.allocationPrefixLength", description = "Length of every allocated child prefix"),
        printcolumn(name = "Gateway", type_ = "string", json_path = ".spec.gateway", description = "Gateway copied to every allocation"),
        printcolumn(name = "Total", type_ = "integer", json_path = ".status.ipAddresses.total", description = "Count of allocatable sub-prefixes in the pool"),
        printcolumn(name = "Free", type_ = "integer", json_path = ".status.ipAddresses.free", description = "Count of unallocated sub-prefixes in the pool"),
        printcolumn(name = "Used", type_ = "integer", json_path = ".status.ipAddresses.used", description = "Count of allocated sub-prefixes in the pool"),
        printcolumn(name = "OutOfRange", type_ = "integer", json_path = ".status.ipAddresses.outOfRange", description = "Count of allocations the pool can no longer hand out"),
        printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status", description = "Whether the pool can hand out addresses (its Ready condition)"),
        printcolumn(name = "Available", type_ = "string", json_path = ".status.conditions[?(@.type==\"AddressesAvailable\")].reason", description = "Available, NearlyExhausted or Exhausted (its AddressesAvailable condition)"),
        printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    )]
    GlobalInClusterPrefixPoolSpec(PrefixPoolSpec)
}
