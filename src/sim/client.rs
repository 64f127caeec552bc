//! [`ApiServer`] on the simulated API server: every request waits, as a pending request, until the schedule decides
//! its fate (answered, applied without an answer, not applied, refused); a write of a term that ended is not sent.

use parking_lot::{Mutex, MutexGuard};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use k8s_openapi::api::events::v1::Event;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::server::{Deletion, Kind, Server};
use crate::api::v1alpha2::PoolStatus;
use crate::api::{MOVED_AWAY_ANNOTATION, MOVED_AWAY_MARK, Pool};
use crate::apiserver::client::removed;
use crate::apiserver::{
    ApiError, ApiServer, Call, Deleted, FinalizerAt, Read, Removed, Repair, StoredConditions, Target,
    failed_test_is_conflict, requests,
};
use crate::capi::status::ClaimStatusPatch;
use crate::capi::{CapiVersion, ClaimResource, Cluster, IpAddress};
use crate::index::{ObjectKey, PoolKey};
use crate::leader::Fence;

/// A request as the simulated API server receives it.
#[derive(Clone, Debug)]
pub enum Op {
    Get(Kind, ObjectKey),
    Create(Kind, Value),
    PatchJson { kind: Kind, key: ObjectKey, patch: json_patch::Patch, status: bool },
    PatchMerge { kind: Kind, key: ObjectKey, patch: Value, status: bool },
    Delete { kind: Kind, key: ObjectKey, uid: Option<String>, resource_version: Option<String> },
    Event,
}

impl Op {
    pub fn is_write(&self) -> bool {
        !matches!(self, Op::Get(..))
    }
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Op::Get(kind, key) => write!(f, "GET {} {key}", kind.name()),
            Op::Create(kind, object) => {
                let address = object.pointer("/spec/address").and_then(Value::as_str).unwrap_or("");
                write!(f, "CREATE {} {} {address}", kind.name(), super::server::key_of(object))
            }
            Op::PatchJson { kind, key, patch, status } => {
                let sub = if *status { "/status" } else { "" };
                write!(f, "JSON-PATCH {} {key}{sub} {}", kind.name(), serde_json::to_string(patch).unwrap_or_default())
            }
            Op::PatchMerge { kind, key, patch, status } => {
                let sub = if *status { "/status" } else { "" };
                let mut shown = patch.to_string();
                shown.truncate(160);
                write!(f, "MERGE-PATCH {} {key}{sub} {shown}", kind.name())
            }
            Op::Delete { kind, key, uid, resource_version } => write!(
                f,
                "DELETE {} {key} (uid {}, rv {})",
                kind.name(),
                uid.as_deref().map_or("-", super::short_uid),
                resource_version.as_deref().unwrap_or("-")
            ),
            Op::Event => f.write_str("CREATE Event"),
        }
    }
}

/// An answer of the simulated API server.
#[derive(Clone, Debug)]
pub enum Answer {
    Object(Option<Value>),
    Deleted(Deletion),
    Done,
}

pub type Slot = Arc<Mutex<Option<Result<Answer, ApiError>>>>;

/// A request in flight.
pub struct Pending {
    /// The term that sent it (`World`'s numbering).
    pub term: u64,
    pub op: Op,
    /// Where the answer goes; `None` once the sender is gone (its term ended): it may still be applied.
    pub slot: Option<Slot>,
}

/// The simulated API server and the requests in flight to it.
#[derive(Default)]
pub struct Hub {
    pub server: Server,
    pub pending: Vec<Pending>,
}

impl Hub {
    /// Applies a request to the server and returns what it answers.
    pub fn apply(&mut self, op: &Op) -> Result<Answer, ApiError> {
        let server = &mut self.server;
        match op {
            Op::Get(kind, key) => Ok(Answer::Object(server.get(*kind, key).cloned())),
            Op::Create(kind, object) => server.create(*kind, object.clone()).map(|o| Answer::Object(Some(o))),
            Op::PatchJson { kind, key, patch, status } => {
                server.patch_json(*kind, key, patch, *status).map(|o| Answer::Object(Some(o)))
            }
            Op::PatchMerge { kind, key, patch, status } => {
                server.patch_merge(*kind, key, patch, *status).map(|o| Answer::Object(Some(o)))
            }
            Op::Delete { kind, key, uid, resource_version } => {
                server.delete(*kind, key, uid.as_deref(), resource_version.as_deref()).map(Answer::Deleted)
            }
            Op::Event => Ok(Answer::Done),
        }
    }
}

pub fn lock(hub: &Mutex<Hub>) -> MutexGuard<'_, Hub> {
    hub.lock()
}

/// One term's way to the simulated API server.
pub struct SimApi {
    pub hub: Arc<Mutex<Hub>>,
    pub term: u64,
    /// The fence of the term (`crate::leader`): every write passes it, as the manager's client's do.
    pub fence: Fence,
    pub version: CapiVersion,
}

/// Waits for the schedule to answer.
struct Waiting(Slot);

impl Future for Waiting {
    type Output = Result<Answer, ApiError>;

    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Self::Output> {
        match self.0.lock().take() {
            Some(answer) => Poll::Ready(answer),
            None => Poll::Pending,
        }
    }
}

fn parse<T: DeserializeOwned>(value: Value) -> Result<T, ApiError> {
    serde_json::from_value(value).map_err(|e| ApiError::Failed { code: 0, message: format!("decoding: {e}") })
}

fn object(answer: Answer) -> Result<Option<Value>, ApiError> {
    match answer {
        Answer::Object(o) => Ok(o),
        other => Err(ApiError::Failed { code: 0, message: format!("unexpected answer {other:?}") }),
    }
}

fn required(answer: Answer) -> Result<Value, ApiError> {
    object(answer)?.ok_or(ApiError::NotFound)
}

impl SimApi {
    fn send(&self, op: Op) -> Pin<Box<dyn Future<Output = Result<Answer, ApiError>> + Send + 'static>> {
        let write = op.is_write();
        let (hub, term) = (self.hub.clone(), self.term);
        // Sent when first polled: inside the fence's guard, for a write.
        let request = async move {
            let slot: Slot = Arc::default();
            lock(&hub).pending.push(Pending { term, op, slot: Some(slot.clone()) });
            Waiting(slot).await
        };
        if !write {
            return Box::pin(request);
        }
        let fence = self.fence.clone();
        Box::pin(async move { fence.guard(request).await.unwrap_or_else(|fenced| Err(ApiError::Fenced(fenced))) })
    }

    fn address_object(&self, address: &IpAddress) -> Value {
        let mut object = serde_json::to_value(address.to_dynamic(self.version)).unwrap_or_default();
        if let Some(o) = object.as_object_mut() {
            o.insert("apiVersion".into(), Value::from(format!("{}/{}", crate::api::GROUP, self.version.version())));
            o.insert("kind".into(), Value::from("IPAddress"));
        }
        object
    }
}

fn target(target: &Target) -> (Kind, ObjectKey) {
    match target {
        Target::Claim(key) => (Kind::Claim, key.clone()),
        Target::Address(key) => (Kind::Address, key.clone()),
        Target::Pool(key) => (Kind::Pool(key.kind), ObjectKey::new(&key.namespace, &key.name)),
    }
}

fn pool_key(key: &PoolKey) -> ObjectKey {
    ObjectKey::new(&key.namespace, &key.name)
}

impl ApiServer for SimApi {
    fn get_claim<'a>(&'a self, key: &'a ObjectKey) -> Call<'a, Option<ClaimResource>> {
        let sent = self.send(Op::Get(Kind::Claim, key.clone()));
        Box::pin(async move { object(sent.await?)?.map(parse).transpose() })
    }

    fn get_claim_conditions<'a>(&'a self, key: &'a ObjectKey) -> Call<'a, Option<StoredConditions>> {
        let sent = self.send(Op::Get(Kind::Claim, key.clone()));
        Box::pin(async move {
            Ok(object(sent.await?)?.map(|live| {
                let list = |p: &str| live.pointer(p).and_then(Value::as_array).cloned().unwrap_or_default();
                StoredConditions {
                    conditions: list("/status/conditions"),
                    v1beta2: list("/status/v1beta2/conditions"),
                    resource_version: live["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_owned(),
                    uid: live["metadata"]["uid"].as_str().unwrap_or_default().to_owned(),
                }
            }))
        })
    }

    fn add_claim_finalizer<'a>(
        &'a self,
        key: &'a ObjectKey,
        finalizer: &'a str,
        read: &'a Read,
    ) -> Call<'a, ClaimResource> {
        let patch = requests::add_finalizer(finalizer, read);
        let sent = self.send(Op::PatchJson { kind: Kind::Claim, key: key.clone(), patch, status: false });
        Box::pin(async move { parse(required(sent.await.map_err(failed_test_is_conflict)?)?) })
    }

    fn patch_claim_status<'a>(
        &'a self,
        key: &'a ObjectKey,
        resource_version: &'a str,
        status: &'a ClaimStatusPatch,
    ) -> Call<'a, ()> {
        let patch = requests::claim_status(resource_version, status);
        let sent = self.send(Op::PatchMerge { kind: Kind::Claim, key: key.clone(), patch, status: true });
        Box::pin(async move { sent.await.map(|_| ()) })
    }

    fn get_address<'a>(&'a self, key: &'a ObjectKey) -> Call<'a, Option<IpAddress>> {
        let sent = self.send(Op::Get(Kind::Address, key.clone()));
        Box::pin(async move { object(sent.await?)?.map(parse).transpose() })
    }

    fn create_address<'a>(&'a self, address: &'a IpAddress) -> Call<'a, IpAddress> {
        let sent = self.send(Op::Create(Kind::Address, self.address_object(address)));
        Box::pin(async move { parse(required(sent.await?)?) })
    }

    fn repair_address<'a>(&'a self, key: &'a ObjectKey, repair: &'a Repair) -> Call<'a, IpAddress> {
        let patch = requests::repair(repair);
        let sent = self.send(Op::PatchMerge { kind: Kind::Address, key: key.clone(), patch, status: false });
        Box::pin(async move { parse(required(sent.await?)?) })
    }

    fn mark_address_moved_away<'a>(&'a self, key: &'a ObjectKey, resource_version: &'a str) -> Call<'a, IpAddress> {
        let patch = requests::annotation(resource_version, MOVED_AWAY_ANNOTATION, Some(MOVED_AWAY_MARK));
        let sent = self.send(Op::PatchMerge { kind: Kind::Address, key: key.clone(), patch, status: false });
        Box::pin(async move { parse(required(sent.await?)?) })
    }

    fn delete_address<'a>(
        &'a self,
        key: &'a ObjectKey,
        uid: &'a str,
        resource_version: Option<&'a str>,
    ) -> Call<'a, Deleted> {
        let sent = self.send(Op::Delete {
            kind: Kind::Address,
            key: key.clone(),
            uid: Some(uid.to_owned()),
            resource_version: resource_version.map(str::to_owned),
        });
        Box::pin(async move {
            match sent.await? {
                Answer::Deleted(Deletion::Gone) => Ok(Deleted::Gone),
                Answer::Deleted(Deletion::Deleting(object)) => Ok(Deleted::Deleting(Box::new(parse(object)?))),
                other => Err(ApiError::Failed { code: 0, message: format!("unexpected answer {other:?}") }),
            }
        })
    }

    fn get_pool<'a>(&'a self, key: &'a PoolKey) -> Call<'a, Option<Pool>> {
        let sent = self.send(Op::Get(Kind::Pool(key.kind), pool_key(key)));
        Box::pin(async move {
            object(sent.await?)?
                .map(|o| Pool::from_object(key.kind, o).map_err(|message| ApiError::Failed { code: 0, message }))
                .transpose()
        })
    }

    fn get_cluster<'a>(&'a self, key: &'a ObjectKey) -> Call<'a, Option<Cluster>> {
        let sent = self.send(Op::Get(Kind::Cluster, key.clone()));
        Box::pin(async move { object(sent.await?)?.map(parse).transpose() })
    }

    fn add_pool_finalizer<'a>(&'a self, key: &'a PoolKey, finalizer: &'a str, read: &'a Read) -> Call<'a, ()> {
        let patch = requests::add_finalizer(finalizer, read);
        let sent = self.send(Op::PatchJson { kind: Kind::Pool(key.kind), key: pool_key(key), patch, status: false });
        Box::pin(async move { sent.await.map(|_| ()).map_err(failed_test_is_conflict) })
    }

    fn patch_pool_status<'a>(&'a self, key: &'a PoolKey, status: &'a PoolStatus) -> Call<'a, ()> {
        let patch = requests::pool_status(status);
        let sent = self.send(Op::PatchMerge { kind: Kind::Pool(key.kind), key: pool_key(key), patch, status: true });
        Box::pin(async move { sent.await.map(|_| ()) })
    }

    fn patch_pool_annotation<'a>(
        &'a self,
        key: &'a PoolKey,
        resource_version: &'a str,
        annotation: &'a str,
        value: Option<&'a str>,
    ) -> Call<'a, Pool> {
        let patch = requests::annotation(resource_version, annotation, value);
        let sent = self.send(Op::PatchMerge { kind: Kind::Pool(key.kind), key: pool_key(key), patch, status: false });
        Box::pin(async move {
            Pool::from_object(key.kind, required(sent.await?)?).map_err(|message| ApiError::Failed { code: 0, message })
        })
    }

    fn remove_finalizer<'a>(
        &'a self,
        target_: &'a Target,
        finalizer: &'a str,
        at: &'a FinalizerAt,
    ) -> Call<'a, Removed> {
        let (kind, key) = target(target_);
        let patch = requests::remove_finalizer(finalizer, at);
        let sent = self.send(Op::PatchJson { kind, key, patch, status: false });
        Box::pin(async move {
            match sent.await {
                Ok(answer) => {
                    let meta: kube::api::ObjectMeta = parse(required(answer)?["metadata"].take())?;
                    Ok(removed(&meta))
                }
                Err(ApiError::NotFound) => Ok(Removed::Gone),
                Err(e) => Err(failed_test_is_conflict(e)),
            }
        })
    }

    fn publish_event(&self, _event: Event) -> Call<'_, ()> {
        let sent = self.send(Op::Event);
        Box::pin(async move { sent.await.map(|_| ()) })
    }
}
