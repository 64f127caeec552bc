//! The claim's `Ready` condition (docs/compatibility.md D5) in the shape each CAPI version stores, and the pool's
//! `Ready` condition. Pure functions: they take the conditions as stored and return them with our entry updated,
//! keeping every condition another controller owns.

use jiff::Timestamp;
use serde::Serialize;
use serde_json::Value;

use crate::capi::status::{ClaimStatusPatch, ConditionEntry, Conditions, Deprecated, ReadyEntry};
use crate::capi::{CapiVersion, NameRef, ReadyCondition};

pub const READY: &str = "Ready";

/// Why a claim is, or is not, Ready.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClaimReason {
    Allocated,
    PoolNotReady,
    PoolExhausted,
    /// Its Cluster holds its quota of the pool (docs/compatibility.md D21): it waits until the Cluster holds fewer.
    QuotaExceeded,
    AllocationFailed,
    /// The claim names a Cluster that does not exist (yet: Velero restores Clusters last).
    WaitingForCluster,
    /// The claim's Cluster is paused (a `clusterctl move`, or by hand): no allocation until it is unpaused.
    ClusterPaused,
    /// Restored by Velero, which restores IPAddressClaims before IPAddresses: it waits for its IPAddress a while.
    WaitingForIPAddress,
}

impl ClaimReason {
    pub fn as_str(self) -> &'static str {
        match self {
            ClaimReason::Allocated => "Allocated",
            ClaimReason::PoolNotReady => "PoolNotReady",
            ClaimReason::PoolExhausted => "PoolExhausted",
            ClaimReason::QuotaExceeded => "QuotaExceeded",
            ClaimReason::AllocationFailed => "AllocationFailed",
            ClaimReason::WaitingForCluster => "WaitingForCluster",
            ClaimReason::ClusterPaused => "ClusterPaused",
            ClaimReason::WaitingForIPAddress => "WaitingForIPAddress",
        }
    }

    pub fn is_ready(self) -> bool {
        self == ClaimReason::Allocated
    }
}

/// The Ready condition we want on a claim.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Ready {
    pub reason: ClaimReason,
    pub message: String,
}

impl Ready {
    fn status(&self) -> &'static str {
        if self.reason.is_ready() { "True" } else { "False" }
    }
}

fn find_ready(conditions: &[Value]) -> Option<&Value> {
    conditions.iter().find(|c| c.get("type").and_then(Value::as_str) == Some(READY))
}

impl Ready {
    fn digest(&self) -> u64 {
        ReadyCondition::digest_of(self.status(), self.reason.as_str(), Some(&self.message))
    }
}

/// Whether the stored condition already says `ready` (status, reason and message).
pub fn is_current(stored: Option<&ReadyCondition>, ready: &Ready) -> bool {
    stored.is_some_and(|c| c.digest == ready.digest())
}

/// Whether `ready` changes the stored Ready status or reason (a transition: it gets an Event).
pub fn is_transition(stored: Option<&ReadyCondition>, ready: &Ready) -> bool {
    stored.is_none_or(|c| c.transition_digest != ReadyCondition::digest_of(ready.status(), ready.reason.as_str(), None))
}

/// The stored condition as a conditions list, with what [`claim_status`] reads of it: status and transition time.
pub fn stored_conditions(stored: Option<&ReadyCondition>) -> Vec<Value> {
    /// What [`transition_time`] reads of a stored `Ready` entry.
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Stored {
        #[serde(rename = "type")]
        type_: &'static str,
        status: &'static str,
        last_transition_time: Option<String>,
    }
    stored
        .map(|c| {
            let time = c.last_transition_time.and_then(|s| Timestamp::from_second(s).ok()).map(rfc3339);
            let entry = Stored { type_: READY, status: c.status_str(), last_transition_time: time };
            serde_json::to_value(entry).unwrap_or_else(|e| unreachable!("a struct of strings serializes: {e}"))
        })
        .into_iter()
        .collect()
}

/// The `lastTransitionTime` to write: unchanged unless the status flips.
fn transition_time(conditions: &[Value], status: &str, now: Timestamp) -> String {
    match find_ready(conditions) {
        Some(c) if c.get("status").and_then(Value::as_str) == Some(status) => {
            c.get("lastTransitionTime").and_then(Value::as_str).map(str::to_owned).unwrap_or_else(|| rfc3339(now))
        }
        _ => rfc3339(now),
    }
}

/// Seconds precision, as metav1.Time serializes.
pub fn rfc3339(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A `metav1.Condition` (v1beta2 `status.conditions`, v1beta1 `status.v1beta2.conditions`).
pub fn metav1_condition(existing: &[Value], ready: &Ready, generation: Option<i64>, now: Timestamp) -> ReadyEntry {
    ReadyEntry {
        type_: READY,
        status: ready.status(),
        reason: ready.reason.as_str(),
        message: Some(ready.message.clone()),
        last_transition_time: transition_time(existing, ready.status(), now),
        observed_generation: generation,
        severity: None,
    }
}

/// A CAPI v1beta1 condition (with severity when False; message omitted when empty, as its schema requires).
pub fn v1beta1_condition(existing: &[Value], ready: &Ready, now: Timestamp) -> ReadyEntry {
    let severity = match ready.reason {
        ClaimReason::Allocated => None,
        ClaimReason::PoolExhausted | ClaimReason::QuotaExceeded => Some("Warning"),
        ClaimReason::WaitingForCluster | ClaimReason::ClusterPaused | ClaimReason::WaitingForIPAddress => Some("Info"),
        ClaimReason::PoolNotReady | ClaimReason::AllocationFailed => Some("Error"),
    };
    ReadyEntry {
        type_: READY,
        status: ready.status(),
        reason: ready.reason.as_str(),
        message: Some(ready.message.clone()).filter(|m| !m.is_empty()),
        last_transition_time: transition_time(existing, ready.status(), now),
        observed_generation: None,
        severity,
    }
}

/// `conditions` with our Ready entry replaced (or appended), every other entry kept in place.
pub fn with_condition(conditions: &[Value], ours: ReadyEntry) -> Vec<ConditionEntry> {
    let mut out: Vec<ConditionEntry> = Vec::with_capacity(conditions.len() + 1);
    let mut ours = Some(ours);
    for c in conditions {
        match ours.take_if(|_| c.get("type").and_then(Value::as_str) == Some(READY)) {
            Some(ours) => out.push(ConditionEntry::Ours(ours)),
            None => out.push(ConditionEntry::Theirs(c.clone())),
        }
    }
    out.extend(ours.map(ConditionEntry::Ours));
    out
}

/// The claim status body for `version`, a merge patch: every conditions list whole (merge patches replace lists), with
/// our Ready entry updated and every other entry kept as given. v1beta2 claims also carry the v1beta1-shaped Ready that
/// CAPI's conversion shows to v1beta1 readers as `status.conditions` (`deprecated.v1beta1.conditions`, a list only
/// the IPAM provider writes); v1beta1 claims carry the metav1 shape in `v1beta2.conditions`.
pub fn claim_status(
    version: CapiVersion,
    conditions: &[Value],
    v1beta2_conditions: &[Value],
    ready: &Ready,
    address_ref: Option<&str>,
    generation: Option<i64>,
    now: Timestamp,
) -> ClaimStatusPatch {
    let address_ref = address_ref.map(|name| NameRef { name: name.to_owned() });
    match version {
        CapiVersion::V1Beta2 => ClaimStatusPatch {
            conditions: with_condition(conditions, metav1_condition(conditions, ready, generation, now)),
            deprecated: Some(Deprecated {
                v1beta1: Conditions {
                    conditions: vec![ConditionEntry::Ours(v1beta1_condition(conditions, ready, now))],
                },
            }),
            v1beta2: None,
            address_ref,
        },
        CapiVersion::V1Beta1 => ClaimStatusPatch {
            conditions: with_condition(conditions, v1beta1_condition(conditions, ready, now)),
            deprecated: None,
            v1beta2: Some(Conditions {
                conditions: with_condition(
                    v1beta2_conditions,
                    metav1_condition(v1beta2_conditions, ready, generation, now),
                ),
            }),
            address_ref,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The body as the API server receives it.
    fn sent(status: ClaimStatusPatch) -> Value {
        serde_json::to_value(status).unwrap()
    }

    fn ready(reason: ClaimReason, message: &str) -> Ready {
        Ready { reason, message: message.into() }
    }

    #[test]
    fn other_conditions_are_kept_and_transition_times_only_move_on_flips() {
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let t1: Timestamp = "2026-01-02T00:00:00Z".parse().unwrap();
        let others = vec![json!({"type": "Other", "status": "True", "lastTransitionTime": "2025-01-01T00:00:00Z"})];
        let first = ready(ClaimReason::PoolExhausted, "no free address");
        let s = sent(claim_status(CapiVersion::V1Beta1, &others, &[], &first, None, Some(1), t0));
        let conditions = s["conditions"].as_array().unwrap().clone();
        assert_eq!(conditions.len(), 2);
        assert_eq!(conditions[0]["type"], "Other");
        assert_eq!(conditions[1]["severity"], "Warning");
        assert!(s.get("addressRef").is_none());
        // Same status, other message: the transition time stays.
        let again = sent(claim_status(
            CapiVersion::V1Beta1,
            &conditions,
            &[],
            &ready(ClaimReason::PoolNotReady, "x"),
            None,
            Some(1),
            t1,
        ));
        assert_eq!(again["conditions"][1]["lastTransitionTime"], "2026-01-01T00:00:00Z");
        // False -> True moves it.
        let done = sent(claim_status(
            CapiVersion::V1Beta1,
            &conditions,
            &[],
            &ready(ClaimReason::Allocated, "ok"),
            Some("c"),
            None,
            t1,
        ));
        assert_eq!(done["conditions"][1]["lastTransitionTime"], "2026-01-02T00:00:00Z");
        assert!(done["conditions"][1].get("severity").is_none());
        assert_eq!(done["addressRef"]["name"], "c");
        assert_eq!(done["v1beta2"]["conditions"][0]["reason"], "Allocated");
    }

    #[test]
    fn v1beta2_keeps_other_conditions_and_updates_ours() {
        let now: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let s = sent(claim_status(
            CapiVersion::V1Beta2,
            &[],
            &[],
            &ready(ClaimReason::Allocated, "ok"),
            Some("c"),
            Some(3),
            now,
        ));
        assert_eq!(s["conditions"].as_array().unwrap().len(), 1);
        assert_eq!(s["conditions"][0]["observedGeneration"], 3);
        assert_eq!(s["conditions"][0]["message"], "ok");
        let others = vec![
            json!({"type": "Other", "status": "True", "reason": "Theirs", "lastTransitionTime": "2025-01-01T00:00:00Z"}),
            json!({"type": "Ready", "status": "False", "reason": "PoolExhausted", "lastTransitionTime": "2025-06-01T00:00:00Z"}),
        ];
        let s = sent(claim_status(
            CapiVersion::V1Beta2,
            &others,
            &[],
            &ready(ClaimReason::Allocated, "ok"),
            None,
            None,
            now,
        ));
        let conditions = s["conditions"].as_array().unwrap();
        assert_eq!(conditions.len(), 2);
        assert_eq!(conditions[0], others[0]);
        assert_eq!(
            (&conditions[1]["reason"], &conditions[1]["lastTransitionTime"]),
            (&json!("Allocated"), &json!("2026-01-01T00:00:00Z"))
        );
        assert_eq!(s["deprecated"]["v1beta1"]["conditions"].as_array().map(Vec::len), Some(1));
    }

    fn stored(condition: Value) -> Option<ReadyCondition> {
        let claim: crate::capi::ClaimResource =
            serde_json::from_value(json!({"status": {"conditions": [{"type": "Other", "status": "True"}, condition]}}))
                .unwrap();
        claim.claim.ready
    }

    #[test]
    fn current_and_transitions() {
        let stored = stored(json!({"type": "Ready", "status": "False", "reason": "PoolExhausted", "message": "m"}));
        let stored = stored.as_ref();
        assert!(is_current(stored, &ready(ClaimReason::PoolExhausted, "m")));
        assert!(!is_current(stored, &ready(ClaimReason::PoolExhausted, "other")));
        assert!(!is_current(stored, &ready(ClaimReason::PoolNotReady, "m")));
        assert!(!is_transition(stored, &ready(ClaimReason::PoolExhausted, "other")));
        assert!(is_transition(stored, &ready(ClaimReason::PoolNotReady, "m")));
        assert!(is_transition(stored, &ready(ClaimReason::Allocated, "m")));
        assert!(is_transition(None, &ready(ClaimReason::PoolExhausted, "m")));
        assert!(!is_current(None, &ready(ClaimReason::PoolExhausted, "m")));
        // A missing message is an empty one.
        let no_message = super::tests::stored(json!({"type": "Ready", "status": "True", "reason": "Allocated"}));
        assert!(is_current(no_message.as_ref(), &ready(ClaimReason::Allocated, "")));
    }

    #[test]
    fn the_stored_transition_time_is_kept_until_the_status_flips() {
        let t1: Timestamp = "2026-01-02T00:00:00Z".parse().unwrap();
        let stored = stored(json!({"type": "Ready", "status": "False", "reason": "PoolExhausted", "message": "m",
                                   "lastTransitionTime": "2026-01-01T00:00:00Z"}));
        let conditions = stored_conditions(stored.as_ref());
        let same = metav1_condition(&conditions, &ready(ClaimReason::PoolNotReady, "x"), None, t1);
        assert_eq!(same.last_transition_time, "2026-01-01T00:00:00Z");
        let flipped = metav1_condition(&conditions, &ready(ClaimReason::Allocated, "ok"), None, t1);
        assert_eq!(flipped.last_transition_time, "2026-01-02T00:00:00Z");
        assert!(stored_conditions(None).is_empty());
    }

    #[test]
    fn v1beta2_claims_also_carry_the_v1beta1_shape_for_v1beta1_readers() {
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let waiting = ready(ClaimReason::ClusterPaused, "Cluster ns/c is paused");
        let s = sent(claim_status(CapiVersion::V1Beta2, &[], &[], &waiting, None, Some(2), t0));
        assert_eq!(s["conditions"][0]["reason"], "ClusterPaused");
        assert_eq!(s["conditions"][0]["observedGeneration"], 2);
        let old = &s["deprecated"]["v1beta1"]["conditions"];
        assert_eq!(old.as_array().map(Vec::len), Some(1));
        assert_eq!(
            (&old[0]["type"], &old[0]["status"], &old[0]["reason"], &old[0]["severity"]),
            (&json!("Ready"), &json!("False"), &json!("ClusterPaused"), &json!("Info"))
        );
        let bound = sent(claim_status(
            CapiVersion::V1Beta2,
            &[],
            &[],
            &ready(ClaimReason::Allocated, "ok"),
            Some("a"),
            None,
            t0,
        ));
        assert!(bound["deprecated"]["v1beta1"]["conditions"][0].get("severity").is_none());
        assert_eq!(bound["addressRef"]["name"], "a");
    }
}
