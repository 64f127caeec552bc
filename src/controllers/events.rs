//! Kubernetes Events on claims and pools, one per transition (docs/compatibility.md D5, D18). Best effort: a failed
//! Event is logged, never retried, and never fails a reconcile.
//!
//! Not kube's `Recorder`: it keeps every Event it published for six minutes (to turn repeats into series) and scans
//! them all on every publish, under one lock. A burst of 10,000 allocations would keep 10,000 Events in memory and
//! cost a quadratic scan; ours are one per transition of one claim, so there is nothing to aggregate.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::ObjectMeta;
use tracing::debug;

use crate::apiserver::ApiServer;

pub const REPORTING_CONTROLLER: &str = "ipam.cluster.x-k8s.io/capi-ipam-in-cluster";

#[derive(Clone)]
pub struct Events {
    instance: String,
}

/// What an Event says.
pub struct Note<'a> {
    pub type_: EventType,
    pub reason: &'a str,
    pub action: &'a str,
    pub note: &'a str,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

impl Events {
    pub fn new(instance: String) -> Self {
        Self { instance }
    }

    /// Publishes an Event about `regarding` at `now`; one about a cluster-scoped object goes to the `default`
    /// namespace, as client-go's recorder puts it.
    pub async fn publish(&self, api: &dyn ApiServer, now: Timestamp, regarding: &ObjectReference, what: Note<'_>) {
        let Note { type_, reason, action, note } = what;
        let namespace = regarding.namespace.clone().filter(|n| !n.is_empty()).unwrap_or_else(|| "default".to_owned());
        let event = Event {
            metadata: ObjectMeta {
                // Unique per publish, like client-go's recorder: <object>.<nanoseconds in hex>.
                name: Some(format!("{}.{:x}", regarding.name.as_deref().unwrap_or("ipam"), now.as_nanosecond())),
                namespace: Some(namespace.clone()),
                ..Default::default()
            },
            action: Some(action.to_owned()),
            reason: Some(reason.to_owned()),
            note: Some(note.chars().take(1024).collect()),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            reporting_controller: Some(REPORTING_CONTROLLER.to_owned()),
            reporting_instance: Some(self.instance.clone()),
            type_: Some(match type_ {
                EventType::Normal => "Normal".to_owned(),
                EventType::Warning => "Warning".to_owned(),
            }),
            ..Default::default()
        };
        if let Err(e) = api.publish_event(event).await {
            debug!(error = %e, reason, "publishing an event failed");
        }
    }
}
