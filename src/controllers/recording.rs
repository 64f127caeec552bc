//! A recording API server for the executor's tests, after controller-rs's `ApiServerVerifier`: every request is
//! recorded as one line (what, and on which object), and answered from a script, in order. A request the script does
//! not expect is answered with a refusal the test then sees, so a run that makes one request too many fails.

use std::collections::VecDeque;

use parking_lot::Mutex;

use crate::api::Pool;
use crate::api::v1alpha2::PoolStatus;
use crate::apiserver::{
    ApiError, ApiServer, Call, Deleted, FinalizerAt, Read, Removed, Repair, StoredConditions, Target,
};
use crate::capi::status::ClaimStatusPatch;
use crate::capi::{ClaimResource, Cluster, IpAddress};
use crate::index::{ObjectKey, PoolKey};

/// What the scripted API server answers, in order.
pub(super) enum Answer {
    /// A claim: read, or as a write returned it.
    Claim(ClaimResource),
    /// No claim of that name (or another one: the executor compares UIDs).
    NoClaim,
    /// The IPAddress posted, as created: the object sent, with a UID and a resourceVersion.
    Created,
    /// An IPAddress read or written.
    Address(IpAddress),
    /// No IPAddress of that name.
    NoAddress,
    /// A write that returns nothing.
    Done,
    /// An error.
    Error(ApiError),
}

/// The UID [`Answer::Created`] gives an IPAddress.
pub(super) const CREATED_UID: &str = "90000000-0000-0000-0000-000000000001";

#[derive(Default)]
pub(super) struct RecordingApi {
    script: Mutex<VecDeque<Answer>>,
    calls: Mutex<Vec<String>>,
}

impl RecordingApi {
    pub(super) fn answering(script: impl IntoIterator<Item = Answer>) -> Self {
        RecordingApi { script: Mutex::new(script.into_iter().collect()), calls: Mutex::default() }
    }

    /// The requests made so far, one line each.
    pub(super) fn calls(&self) -> Vec<String> {
        self.calls.lock().clone()
    }

    /// Records `call` and takes the next answer.
    fn answer(&self, call: String) -> Answer {
        let answer = self.script.lock().pop_front();
        let unexpected = || Answer::Error(ApiError::Refused { code: 500, message: format!("unexpected: {call}") });
        let answer = answer.unwrap_or_else(unexpected);
        self.calls.lock().push(call);
        answer
    }
}

fn mismatch<T>(what: &str) -> Result<T, ApiError> {
    Err(ApiError::Refused { code: 500, message: format!("the script answers something else to {what}") })
}

impl ApiServer for RecordingApi {
    fn get_claim<'a>(&'a self, key: &'a ObjectKey) -> Call<'a, Option<ClaimResource>> {
        let result = match self.answer(format!("get_claim {key}")) {
            Answer::Claim(claim) => Ok(Some(claim)),
            Answer::NoClaim => Ok(None),
            Answer::Error(e) => Err(e),
            _ => mismatch("get_claim"),
        };
        Box::pin(async move { result })
    }

    fn get_claim_conditions<'a>(&'a self, key: &'a ObjectKey) -> Call<'a, Option<StoredConditions>> {
        let result = match self.answer(format!("get_claim_conditions {key}")) {
            Answer::Claim(c) => Ok(Some(StoredConditions {
                resource_version: c.claim.resource_version.text().unwrap_or_default(),
                uid: c.claim.uid.to_string(),
                ..StoredConditions::default()
            })),
            Answer::NoClaim => Ok(None),
            Answer::Error(e) => Err(e),
            _ => mismatch("get_claim_conditions"),
        };
        Box::pin(async move { result })
    }

    fn add_claim_finalizer<'a>(
        &'a self,
        key: &'a ObjectKey,
        finalizer: &'a str,
        _read: &'a Read,
    ) -> Call<'a, ClaimResource> {
        let result = match self.answer(format!("add_claim_finalizer {key} {finalizer}")) {
            Answer::Claim(claim) => Ok(claim),
            Answer::Error(e) => Err(e),
            _ => mismatch("add_claim_finalizer"),
        };
        Box::pin(async move { result })
    }

    fn patch_claim_status<'a>(
        &'a self,
        key: &'a ObjectKey,
        resource_version: &'a str,
        status: &'a ClaimStatusPatch,
    ) -> Call<'a, ()> {
        let bound = status.address_ref.as_ref().map_or("unbound", |r| r.name.as_str());
        let result = match self.answer(format!("patch_claim_status {key} at {resource_version} ({bound})")) {
            Answer::Done => Ok(()),
            Answer::Error(e) => Err(e),
            _ => mismatch("patch_claim_status"),
        };
        Box::pin(async move { result })
    }

    fn get_address<'a>(&'a self, key: &'a ObjectKey) -> Call<'a, Option<IpAddress>> {
        let result = match self.answer(format!("get_address {key}")) {
            Answer::Address(address) => Ok(Some(address)),
            Answer::NoAddress => Ok(None),
            Answer::Error(e) => Err(e),
            _ => mismatch("get_address"),
        };
        Box::pin(async move { result })
    }

    fn create_address<'a>(&'a self, address: &'a IpAddress) -> Call<'a, IpAddress> {
        let name = address.metadata.name.as_deref().unwrap_or_default();
        let namespace = address.metadata.namespace.as_deref().unwrap_or_default();
        let result = match self.answer(format!("create_address {namespace}/{name} {}", address.spec.address)) {
            Answer::Created => {
                let mut created = address.clone();
                created.metadata.uid = Some(CREATED_UID.to_owned());
                created.metadata.resource_version = Some("10".to_owned());
                Ok(created)
            }
            Answer::Error(e) => Err(e),
            _ => mismatch("create_address"),
        };
        Box::pin(async move { result })
    }

    fn repair_address<'a>(&'a self, key: &'a ObjectKey, _repair: &'a Repair) -> Call<'a, IpAddress> {
        let result = match self.answer(format!("repair_address {key}")) {
            Answer::Address(address) => Ok(address),
            Answer::Error(e) => Err(e),
            _ => mismatch("repair_address"),
        };
        Box::pin(async move { result })
    }

    fn mark_address_moved_away<'a>(&'a self, key: &'a ObjectKey, _resource_version: &'a str) -> Call<'a, IpAddress> {
        let result = match self.answer(format!("mark_address_moved_away {key}")) {
            Answer::Address(address) => Ok(address),
            Answer::Error(e) => Err(e),
            _ => mismatch("mark_address_moved_away"),
        };
        Box::pin(async move { result })
    }

    fn delete_address<'a>(
        &'a self,
        key: &'a ObjectKey,
        uid: &'a str,
        _resource_version: Option<&'a str>,
    ) -> Call<'a, Deleted> {
        let result = match self.answer(format!("delete_address {key} {uid}")) {
            Answer::Done => Ok(Deleted::Gone),
            Answer::Address(address) => Ok(Deleted::Deleting(Box::new(address))),
            Answer::Error(e) => Err(e),
            _ => mismatch("delete_address"),
        };
        Box::pin(async move { result })
    }

    fn get_pool<'a>(&'a self, key: &'a PoolKey) -> Call<'a, Option<Pool>> {
        let result = match self.answer(format!("get_pool {key}")) {
            Answer::Error(e) => Err(e),
            _ => mismatch("get_pool"),
        };
        Box::pin(async move { result })
    }

    fn get_cluster<'a>(&'a self, key: &'a ObjectKey) -> Call<'a, Option<Cluster>> {
        let result = match self.answer(format!("get_cluster {key}")) {
            Answer::Error(e) => Err(e),
            _ => mismatch("get_cluster"),
        };
        Box::pin(async move { result })
    }

    fn add_pool_finalizer<'a>(&'a self, key: &'a PoolKey, finalizer: &'a str, _read: &'a Read) -> Call<'a, ()> {
        let result = match self.answer(format!("add_pool_finalizer {key} {finalizer}")) {
            Answer::Done => Ok(()),
            Answer::Error(e) => Err(e),
            _ => mismatch("add_pool_finalizer"),
        };
        Box::pin(async move { result })
    }

    fn patch_pool_status<'a>(&'a self, key: &'a PoolKey, _status: &'a PoolStatus) -> Call<'a, ()> {
        let result = match self.answer(format!("patch_pool_status {key}")) {
            Answer::Done => Ok(()),
            Answer::Error(e) => Err(e),
            _ => mismatch("patch_pool_status"),
        };
        Box::pin(async move { result })
    }

    fn patch_pool_annotation<'a>(
        &'a self,
        key: &'a PoolKey,
        _resource_version: &'a str,
        annotation: &'a str,
        _value: Option<&'a str>,
    ) -> Call<'a, Pool> {
        let result = match self.answer(format!("patch_pool_annotation {key} {annotation}")) {
            Answer::Error(e) => Err(e),
            _ => mismatch("patch_pool_annotation"),
        };
        Box::pin(async move { result })
    }

    fn remove_finalizer<'a>(
        &'a self,
        target: &'a Target,
        finalizer: &'a str,
        _at: &'a FinalizerAt,
    ) -> Call<'a, Removed> {
        let on = match target {
            Target::Claim(key) => format!("IPAddressClaim {key}"),
            Target::Address(key) => format!("IPAddress {key}"),
            Target::Pool(key) => key.to_string(),
        };
        let result = match self.answer(format!("remove_finalizer {on} {finalizer}")) {
            Answer::Done => Ok(Removed::Kept),
            Answer::Error(e) => Err(e),
            _ => mismatch("remove_finalizer"),
        };
        Box::pin(async move { result })
    }

    /// Events are recorded, never scripted: they are best effort, and a test asserts them among the calls.
    fn publish_event(&self, event: k8s_openapi::api::events::v1::Event) -> Call<'_, ()> {
        self.calls.lock().push(format!("publish_event {}", event.reason.unwrap_or_default()));
        Box::pin(async move { Ok(()) })
    }
}
