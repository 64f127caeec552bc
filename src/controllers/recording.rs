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
    /// A pool read, or as a write returned it.
    Pool(Box<Pool>),
    /// No pool of that name.
    NoPool,
    /// A write that returns nothing.
    Done,
    /// An error.
    Error(ApiError),
    /// What happens while the request is in flight (another watch event, another worker's step), then the answer.
    After(Box<dyn FnOnce() + Send>, Box<Answer>),
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

    /// Records `call` and takes the next answer, after what happens meanwhile.
    fn answer(&self, call: String) -> Answer {
        let answer = self.script.lock().pop_front();
        let unexpected = || Answer::Error(ApiError::Refused { code: 500, message: format!("unexpected: {call}") });
        let mut answer = answer.unwrap_or_else(unexpected);
        self.calls.lock().push(call);
        while let Answer::After(meanwhile, then) = answer {
            meanwhile();
            answer = *then;
        }
        answer
    }
}

impl RecordingApi {
    /// Records `call`, and answers with what `pick` makes of the next answer: an error as scripted, a refusal when the
    /// script answers something else.
    fn reply<'a, T: Send + 'a>(&self, call: String, pick: impl FnOnce(Answer) -> Option<T>) -> Call<'a, T> {
        let what = call.split(' ').next().unwrap_or_default().to_owned();
        let result = match self.answer(call) {
            Answer::Error(e) => Err(e),
            answer => pick(answer).ok_or_else(|| ApiError::Refused {
                code: 500,
                message: format!("the script answers something else to {what}"),
            }),
        };
        Box::pin(async move { result })
    }
}

impl ApiServer for RecordingApi {
    fn get_claim<'a>(&'a self, key: &'a ObjectKey) -> Call<'a, Option<ClaimResource>> {
        self.reply(format!("get_claim {key}"), |a| match a {
            Answer::Claim(claim) => Some(Some(claim)),
            Answer::NoClaim => Some(None),
            _ => None,
        })
    }

    fn get_claim_conditions<'a>(&'a self, key: &'a ObjectKey) -> Call<'a, Option<StoredConditions>> {
        self.reply(format!("get_claim_conditions {key}"), |a| match a {
            Answer::Claim(c) => Some(Some(StoredConditions {
                resource_version: c.claim.resource_version.text().unwrap_or_default(),
                uid: c.claim.uid.to_string(),
                ..StoredConditions::default()
            })),
            Answer::NoClaim => Some(None),
            _ => None,
        })
    }

    fn add_claim_finalizer<'a>(
        &'a self,
        key: &'a ObjectKey,
        finalizer: &'a str,
        _read: &'a Read,
    ) -> Call<'a, ClaimResource> {
        self.reply(format!("add_claim_finalizer {key} {finalizer}"), |a| match a {
            Answer::Claim(claim) => Some(claim),
            _ => None,
        })
    }

    fn patch_claim_status<'a>(
        &'a self,
        key: &'a ObjectKey,
        resource_version: &'a str,
        status: &'a ClaimStatusPatch,
    ) -> Call<'a, ()> {
        let bound = status.address_ref.as_ref().map_or("unbound", |r| r.name.as_str());
        self.reply(format!("patch_claim_status {key} at {resource_version} ({bound})"), done)
    }

    fn get_address<'a>(&'a self, key: &'a ObjectKey) -> Call<'a, Option<IpAddress>> {
        self.reply(format!("get_address {key}"), |a| match a {
            Answer::Address(address) => Some(Some(address)),
            Answer::NoAddress => Some(None),
            _ => None,
        })
    }

    fn create_address<'a>(&'a self, address: &'a IpAddress) -> Call<'a, IpAddress> {
        let name = address.metadata.name.as_deref().unwrap_or_default();
        let namespace = address.metadata.namespace.as_deref().unwrap_or_default();
        self.reply(format!("create_address {namespace}/{name} {}", address.spec.address), |a| match a {
            Answer::Created => {
                let mut created = address.clone();
                created.metadata.uid = Some(CREATED_UID.to_owned());
                created.metadata.resource_version = Some("10".to_owned());
                Some(created)
            }
            _ => None,
        })
    }

    fn repair_address<'a>(&'a self, key: &'a ObjectKey, _repair: &'a Repair) -> Call<'a, IpAddress> {
        self.reply(format!("repair_address {key}"), an_address)
    }

    fn mark_address_moved_away<'a>(&'a self, key: &'a ObjectKey, _resource_version: &'a str) -> Call<'a, IpAddress> {
        self.reply(format!("mark_address_moved_away {key}"), an_address)
    }

    fn delete_address<'a>(
        &'a self,
        key: &'a ObjectKey,
        uid: &'a str,
        _resource_version: Option<&'a str>,
    ) -> Call<'a, Deleted> {
        self.reply(format!("delete_address {key} {uid}"), |a| match a {
            Answer::Done => Some(Deleted::Gone),
            Answer::Address(address) => Some(Deleted::Deleting(Box::new(address))),
            _ => None,
        })
    }

    fn get_pool<'a>(&'a self, key: &'a PoolKey) -> Call<'a, Option<Pool>> {
        self.reply(format!("get_pool {key}"), |a| match a {
            Answer::Pool(pool) => Some(Some(*pool)),
            Answer::NoPool => Some(None),
            _ => None,
        })
    }

    fn get_cluster<'a>(&'a self, key: &'a ObjectKey) -> Call<'a, Option<Cluster>> {
        self.reply(format!("get_cluster {key}"), |_| None)
    }

    fn add_pool_finalizer<'a>(&'a self, key: &'a PoolKey, finalizer: &'a str, _read: &'a Read) -> Call<'a, ()> {
        self.reply(format!("add_pool_finalizer {key} {finalizer}"), done)
    }

    fn patch_pool_status<'a>(&'a self, key: &'a PoolKey, _status: &'a PoolStatus) -> Call<'a, ()> {
        self.reply(format!("patch_pool_status {key}"), done)
    }

    fn patch_pool_annotation<'a>(
        &'a self,
        key: &'a PoolKey,
        _resource_version: &'a str,
        annotation: &'a str,
        value: Option<&'a str>,
    ) -> Call<'a, Pool> {
        let value = value.unwrap_or("(removed)");
        self.reply(format!("patch_pool_annotation {key} {annotation}={value}"), |a| match a {
            Answer::Pool(pool) => Some(*pool),
            _ => None,
        })
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
        self.reply(format!("remove_finalizer {on} {finalizer}"), |a| matches!(a, Answer::Done).then_some(Removed::Kept))
    }

    /// Events are recorded, never scripted: they are best effort, and a test asserts them among the calls.
    fn publish_event(&self, event: k8s_openapi::api::events::v1::Event) -> Call<'_, ()> {
        self.calls.lock().push(format!("publish_event {}", event.reason.unwrap_or_default()));
        Box::pin(async move { Ok(()) })
    }
}

fn done(answer: Answer) -> Option<()> {
    matches!(answer, Answer::Done).then_some(())
}

fn an_address(answer: Answer) -> Option<IpAddress> {
    match answer {
        Answer::Address(address) => Some(address),
        _ => None,
    }
}
