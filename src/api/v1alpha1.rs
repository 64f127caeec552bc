//! `ipam.cluster.x-k8s.io/v1alpha1`: the deprecated, still served version of the two IP pool kinds. It is converted
//! to and from v1alpha2 by the conversion webhook (see [`super::conversion`]).

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::v1alpha2::PoolStatus;

/// The v1alpha1 spec of `InClusterIPPool` and `GlobalInClusterIPPool`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IPPoolSpec {
    /// Addresses is a list of IP addresses that can be assigned. This set of addresses can be non-contiguous.
    /// Can be omitted if subnet, start and end are set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024), inner(length(max = 128)))]
    pub addresses: Option<Vec<String>>,

    /// Subnet is the subnet to assign IP addresses from. Can be omitted if addresses or first, last and prefix are set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet: Option<String>,

    /// First is the first address that can be assigned. If unset, the second address of subnet will be used.
    #[serde(rename = "start", default, skip_serializing_if = "Option::is_none")]
    pub first: Option<String>,

    /// Last is the last address that can be assigned. Must come after first and needs to be part of the subnet.
    /// If unset, the second last address of subnet will be used.
    #[serde(rename = "end", default, skip_serializing_if = "Option::is_none")]
    pub last: Option<String>,

    /// Prefix is the network prefix to use. If unset the prefix from the subnet will be used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = 128))]
    pub prefix: Option<i32>,

    /// Gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
}

pool_kind! {
    /// InClusterIPPoolSpec defines the desired state of InClusterIPPool (v1alpha1).
    #[kube(
        group = "ipam.cluster.x-k8s.io", version = "v1alpha1", kind = "InClusterIPPool", namespaced,
        status = "PoolStatus", category = "cluster-api", storage = false, deprecated,
        doc = "InClusterIPPool is the Schema for the inclusterippools API.",
        printcolumn(name = "Subnet", type_ = "string", json_path = ".spec.subnet", description = "Subnet to allocate IPs from"),
        printcolumn(name = "Start", type_ = "string", json_path = ".spec.start", description = "First address of the range to allocate from"),
        printcolumn(name = "End", type_ = "string", json_path = ".spec.end", description = "Last address of the range to allocate from"),
        printcolumn(name = "Addresses", type_ = "string", json_path = ".spec.addresses", description = "List of addresses, to allocate from"),
        printcolumn(name = "Total", type_ = "integer", json_path = ".status.ipAddresses.total", description = "Count of IPs configured for the pool"),
        printcolumn(name = "Free", type_ = "integer", json_path = ".status.ipAddresses.free", description = "Count of unallocated IPs in the pool"),
        printcolumn(name = "Used", type_ = "integer", json_path = ".status.ipAddresses.used", description = "Count of allocated IPs in the pool"),
        printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status", description = "Whether the pool can hand out addresses (its Ready condition)"),
        printcolumn(name = "Available", type_ = "string", json_path = ".status.conditions[?(@.type==\"AddressesAvailable\")].reason", description = "Available, NearlyExhausted or Exhausted (its AddressesAvailable condition)"),
    )]
    InClusterIPPoolSpec(IPPoolSpec)
}

pool_kind! {
    /// GlobalInClusterIPPoolSpec defines the desired state of GlobalInClusterIPPool (v1alpha1).
    #[kube(
        group = "ipam.cluster.x-k8s.io", version = "v1alpha1", kind = "GlobalInClusterIPPool",
        status = "PoolStatus", category = "cluster-api", storage = false, deprecated,
        doc = "GlobalInClusterIPPool is the Schema for the global inclusterippools API. This pool type is cluster scoped. IPAddressClaims can reference pools of this type from any namespace.",
        printcolumn(name = "Subnet", type_ = "string", json_path = ".spec.subnet", description = "Subnet to allocate IPs from"),
        printcolumn(name = "Start", type_ = "string", json_path = ".spec.start", description = "First address of the range to allocate from"),
        printcolumn(name = "End", type_ = "string", json_path = ".spec.end", description = "Last address of the range to allocate from"),
        printcolumn(name = "Addresses", type_ = "string", json_path = ".spec.addresses", description = "List of addresses, to allocate from"),
        printcolumn(name = "Total", type_ = "integer", json_path = ".status.ipAddresses.total", description = "Count of IPs configured for the pool"),
        printcolumn(name = "Free", type_ = "integer", json_path = ".status.ipAddresses.free", description = "Count of unallocated IPs in the pool"),
        printcolumn(name = "Used", type_ = "integer", json_path = ".status.ipAddresses.used", description = "Count of allocated IPs in the pool"),
        printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status", description = "Whether the pool can hand out addresses (its Ready condition)"),
        printcolumn(name = "Available", type_ = "string", json_path = ".status.conditions[?(@.type==\"AddressesAvailable\")].reason", description = "Available, NearlyExhausted or Exhausted (its AddressesAvailable condition)"),
    )]
    GlobalInClusterIPPoolSpec(IPPoolSpec)
}
