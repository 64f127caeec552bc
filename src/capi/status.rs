//! The claim status we write: a merge patch of the status subresource in the shape the claim's CAPI version stores.
//! Merge patches replace lists whole, so every conditions list is written whole: other controllers' entries exactly as
//! read, ours in place of the `Ready` entry.

use serde::Serialize;
use serde_json::Value;

use super::NameRef;

/// Our `Ready` condition: a `metav1.Condition` (v1beta2 `status.conditions`, v1beta1 `status.v1beta2.conditions`) or
/// a CAPI v1beta1 condition (`severity` when False; `message` omitted when empty, as that schema requires).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadyEntry {
    #[serde(rename = "type")]
    pub type_: &'static str,
    pub status: &'static str,
    pub reason: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    pub last_transition_time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub severity: Option<&'static str>,
}

/// One entry of a conditions list we write: another controller's, kept as read, or ours.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ConditionEntry {
    Theirs(Value),
    Ours(ReadyEntry),
}

/// A `{"conditions": [...]}` object (`status.v1beta2`, `status.deprecated.v1beta1`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Conditions {
    pub conditions: Vec<ConditionEntry>,
}

/// `status.deprecated` of a v1beta2 claim.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Deprecated {
    pub v1beta1: Conditions,
}

/// The body of a claim status write.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimStatusPatch {
    pub conditions: Vec<ConditionEntry>,
    /// v1beta2 claims: the v1beta1-shaped `Ready` that CAPI's conversion shows to v1beta1 readers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deprecated: Option<Deprecated>,
    /// v1beta1 claims: the metav1-shaped conditions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub v1beta2: Option<Conditions>,
    /// Left out when unbound: a merge patch never removes a binding.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address_ref: Option<NameRef>,
}
