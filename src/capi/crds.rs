//! CRDs for Cluster API's `IPAddressClaim`, `IPAddress` and `Cluster`, generated from the shape our controllers read
//! and write, in both versions we talk (v1beta2 as in CAPI ≥ 1.11, v1beta1 as in CAPI 1.6–1.10). CAPI ships these
//! CRDs, not us: these are for tests and `make run` when no real CAPI CRDs are at hand (`CAPI_CRDS=<dir>` takes the
//! real ones). Each set serves one version, as the real CRDs without their conversion webhook do.

// kube-derive's repeated `printcolumn(type_ = ...)` arguments look like duplicated attributes to clippy.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use kube::CustomResourceExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `poolRef`: group, kind and name of the pool.
#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolReference {
    /// APIGroup of the pool (optional in v1beta1, required in v1beta2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_group: Option<String>,
    pub kind: String,
    pub name: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
pub struct LocalReference {
    pub name: String,
}

/// A CAPI v1beta1 condition (with severity).
#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct V1Beta1Condition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub severity: Option<String>,
    pub last_transition_time: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IPAddressSpecFields {
    pub claim_ref: LocalReference,
    pub pool_ref: PoolReference,
    pub address: String,
    #[schemars(range(min = 0, max = 128))]
    pub prefix: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
pub struct ClusterSpecFields {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
}

pub mod v1beta2 {
    use super::*;

    /// IPAddressClaimSpec (v1beta2).
    #[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
    #[kube(
        group = "ipam.cluster.x-k8s.io",
        version = "v1beta2",
        kind = "IPAddressClaim",
        namespaced,
        status = "IPAddressClaimStatus",
        category = "cluster-api",
        printcolumn(name = "Pool Name", type_ = "string", json_path = ".spec.poolRef.name"),
        printcolumn(name = "Pool Kind", type_ = "string", json_path = ".spec.poolRef.kind"),
        printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
    )]
    #[serde(rename_all = "camelCase")]
    pub struct IPAddressClaimSpec {
        pub pool_ref: PoolReference,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub cluster_name: Option<String>,
    }

    #[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
    #[serde(rename_all = "camelCase")]
    pub struct IPAddressClaimStatus {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
        pub conditions: Option<Vec<Condition>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub address_ref: Option<LocalReference>,
    }

    /// IPAddressSpec (v1beta2).
    #[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
    #[kube(
        group = "ipam.cluster.x-k8s.io",
        version = "v1beta2",
        kind = "IPAddress",
        namespaced,
        category = "cluster-api",
        printcolumn(name = "Address", type_ = "string", json_path = ".spec.address"),
        printcolumn(name = "Pool Name", type_ = "string", json_path = ".spec.poolRef.name"),
        printcolumn(name = "Pool Kind", type_ = "string", json_path = ".spec.poolRef.kind"),
        printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
    )]
    pub struct IPAddressSpec {
        #[serde(flatten)]
        pub fields: IPAddressSpecFields,
    }

    /// ClusterSpec (v1beta2): only what the provider reads.
    #[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
    #[kube(group = "cluster.x-k8s.io", version = "v1beta2", kind = "Cluster", namespaced, category = "cluster-api")]
    pub struct ClusterSpec {
        #[serde(flatten)]
        pub fields: ClusterSpecFields,
    }
}

pub mod v1beta1 {
    use super::*;

    /// IPAddressClaimSpec (v1beta1).
    #[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
    #[kube(
        group = "ipam.cluster.x-k8s.io",
        version = "v1beta1",
        kind = "IPAddressClaim",
        namespaced,
        status = "IPAddressClaimStatus",
        category = "cluster-api",
        printcolumn(name = "Pool Name", type_ = "string", json_path = ".spec.poolRef.name"),
        printcolumn(name = "Pool Kind", type_ = "string", json_path = ".spec.poolRef.kind"),
        printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
    )]
    #[serde(rename_all = "camelCase")]
    pub struct IPAddressClaimSpec {
        pub pool_ref: PoolReference,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub cluster_name: Option<String>,
    }

    #[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
    #[serde(rename_all = "camelCase")]
    pub struct IPAddressClaimStatus {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub address_ref: Option<LocalReference>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub conditions: Option<Vec<V1Beta1Condition>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub v1beta2: Option<V1Beta2Status>,
    }

    #[derive(Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
    pub struct V1Beta2Status {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
        pub conditions: Option<Vec<Condition>>,
    }

    /// IPAddressSpec (v1beta1).
    #[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
    #[kube(
        group = "ipam.cluster.x-k8s.io",
        version = "v1beta1",
        kind = "IPAddress",
        namespaced,
        category = "cluster-api",
        printcolumn(name = "Address", type_ = "string", json_path = ".spec.address"),
        printcolumn(name = "Pool Name", type_ = "string", json_path = ".spec.poolRef.name"),
        printcolumn(name = "Pool Kind", type_ = "string", json_path = ".spec.poolRef.kind"),
        printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
    )]
    pub struct IPAddressSpec {
        #[serde(flatten)]
        pub fields: IPAddressSpecFields,
    }

    /// ClusterSpec (v1beta1): only what the provider reads.
    #[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, JsonSchema)]
    #[kube(group = "cluster.x-k8s.io", version = "v1beta1", kind = "Cluster", namespaced, category = "cluster-api")]
    pub struct ClusterSpec {
        #[serde(flatten)]
        pub fields: ClusterSpecFields,
    }
}

/// The test CRDs of one version: `("v1beta2", [...])` and `("v1beta1", [...])`.
pub fn test_crds() -> Vec<(&'static str, Vec<CustomResourceDefinition>)> {
    vec![
        ("v1beta2", vec![v1beta2::Cluster::crd(), v1beta2::IPAddressClaim::crd(), v1beta2::IPAddress::crd()]),
        ("v1beta1", vec![v1beta1::Cluster::crd(), v1beta1::IPAddressClaim::crd(), v1beta1::IPAddress::crd()]),
    ]
}
