//! What the controllers ask of the API server: one typed interface, [`ApiServer`], for every read and write they
//! make. The manager's implementation ([`client::KubeApi`]) sends them with kube's client and passes every write
//! through the leader fence (`crate::leader`): a write that does not pass the fence cannot be written. The
//! deterministic simulation (`crate::sim`) implements the same interface with a simulated API server, so the same
//! controllers run against either. The request bodies (patches and their preconditions) are built once, in
//! [`requests`], for both.

pub mod client;
pub mod requests;

use futures::future::BoxFuture;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde_json::Value;

use crate::api::Pool;
use crate::api::v1alpha2::PoolStatus;
use crate::capi::status::ClaimStatusPatch;
use crate::capi::{ClaimResource, Cluster, IpAddress};
use crate::compact::{ObjectKey, PoolKey};
use crate::leader::Fenced;

/// A request to the API server.
pub type Call<'a, T> = BoxFuture<'a, Result<T, ApiError>>;

/// How a request failed, in the terms the controllers decide on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    #[error("not found")]
    NotFound,
    /// 409 on a create: an object of that name exists.
    #[error("already exists: {0}")]
    AlreadyExists(String),
    /// The object changed since it was read (a resourceVersion, UID or `test` precondition failed).
    #[error("conflict: {0}")]
    Conflict(String),
    /// Refused, and it will be refused again: 400, 403, 405, 413, 415, 422 (an admission webhook's denial among them).
    #[error("refused ({code}): {message}")]
    Refused { code: u16, message: String },
    /// An answer that may be different later: 429, 5xx and anything else.
    #[error("failed ({code}): {message}")]
    Failed { code: u16, message: String },
    /// No answer (connect, TLS, timeout, a dropped connection): the request may or may not have been applied.
    #[error("the API server did not answer: {0}")]
    Unreachable(String),
    /// Not sent, or dropped in flight because this replica's leader term ended: it may still be applied.
    #[error(transparent)]
    Fenced(#[from] Fenced),
}

impl ApiError {
    /// The error of an answer with this HTTP `code`, `reason` and `message`.
    pub fn from_status(code: u16, reason: &str, message: &str) -> ApiError {
        match code {
            404 => ApiError::NotFound,
            409 if reason == "AlreadyExists" => ApiError::AlreadyExists(message.to_owned()),
            409 => ApiError::Conflict(message.to_owned()),
            400 | 403 | 405 | 413 | 415 | 422 => ApiError::Refused { code, message: message.to_owned() },
            _ => ApiError::Failed { code, message: message.to_owned() },
        }
    }
}

/// The API server answers a JSON patch whose `test` operation fails with 422: the object is not as we read it, a
/// conflict (retried on a fresh read), not a refusal.
pub fn failed_test_is_conflict(error: ApiError) -> ApiError {
    match error {
        ApiError::Refused { code: 422, message } => ApiError::Conflict(message),
        other => other,
    }
}

/// The object as the decision to add a finalizer read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Read {
    pub resource_version: String,
    /// Whether `metadata.finalizers` had any element (ours is appended, or the list is created).
    pub has_finalizers: bool,
}

/// An object whose finalizer is removed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Claim(ObjectKey),
    Address(ObjectKey),
    Pool(PoolKey),
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Claim(key) => write!(f, "IPAddressClaim {key}"),
            Target::Address(key) => write!(f, "IPAddress {key}"),
            Target::Pool(key) => write!(f, "{key}"),
        }
    }
}

/// Where the finalizer was when we read the object: its UID and the finalizer's index. The removal is refused when
/// either changed (a new object of the same name is never touched).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FinalizerAt {
    pub uid: String,
    pub index: usize,
}

/// What removing a finalizer left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Removed {
    /// The object is still there (not being deleted, or another finalizer holds it).
    Kept,
    /// The object is gone: it was being deleted and ours was its last finalizer, or it was gone already.
    Gone,
}

/// What a DELETE did.
#[derive(Clone, Debug)]
pub enum Deleted {
    /// Gone at once (it had no finalizer).
    Gone,
    /// Marked for deletion; its finalizers hold it.
    Deleting(Box<IpAddress>),
}

/// The conditions lists of a claim as stored (every controller's entries), and its resourceVersion.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StoredConditions {
    pub conditions: Vec<Value>,
    /// A v1beta1 claim's `status.v1beta2.conditions`.
    pub v1beta2: Vec<Value>,
    pub resource_version: String,
    /// The claim's UID: a claim of the name read in place of the one decided on is not written to.
    pub uid: String,
}

/// What a restore or move lost on an IPAddress, put back (`controllers::ipaddress::repair`).
#[derive(Clone, Debug, PartialEq)]
pub struct Repair {
    /// The resourceVersion it was read at: the patch is refused if it changed since.
    pub resource_version: String,
    pub owner_references: Vec<OwnerReference>,
    pub finalizers: Vec<String>,
    pub cluster_label: Option<String>,
    /// Take off our mark of an IPAddress a move left behind (`ipam.cluster.x-k8s.io/moved-away`): a claim adopts it.
    pub unmark_moved_away: bool,
}

/// Every request the controllers make. Writes go through the leader fence: once this replica's term ended they fail
/// with [`ApiError::Fenced`] without being sent.
pub trait ApiServer: Send + Sync {
    fn get_claim<'a>(&'a self, key: &'a ObjectKey) -> Call<'a, Option<ClaimResource>>;
    fn get_claim_conditions<'a>(&'a self, key: &'a ObjectKey) -> Call<'a, Option<StoredConditions>>;
    /// Adds `finalizer` if the claim is still as `read`; returns the claim as written.
    fn add_claim_finalizer<'a>(
        &'a self,
        key: &'a ObjectKey,
        finalizer: &'a str,
        read: &'a Read,
    ) -> Call<'a, ClaimResource>;
    /// Merges `status` into the claim's status if its resourceVersion is still `resource_version`.
    fn patch_claim_status<'a>(
        &'a self,
        key: &'a ObjectKey,
        resource_version: &'a str,
        status: &'a ClaimStatusPatch,
    ) -> Call<'a, ()>;

    fn get_address<'a>(&'a self, key: &'a ObjectKey) -> Call<'a, Option<IpAddress>>;
    fn create_address<'a>(&'a self, address: &'a IpAddress) -> Call<'a, IpAddress>;
    fn repair_address<'a>(&'a self, key: &'a ObjectKey, repair: &'a Repair) -> Call<'a, IpAddress>;
    /// Marks an IPAddress a move left behind (`ipam.cluster.x-k8s.io/moved-away`) if it is still as read at
    /// `resource_version`: the mark outlives this process.
    fn mark_address_moved_away<'a>(&'a self, key: &'a ObjectKey, resource_version: &'a str) -> Call<'a, IpAddress>;
    /// Deletes the IPAddress if it is still the object `uid` (at `resource_version`, when given).
    fn delete_address<'a>(
        &'a self,
        key: &'a ObjectKey,
        uid: &'a str,
        resource_version: Option<&'a str>,
    ) -> Call<'a, Deleted>;

    fn get_pool<'a>(&'a self, key: &'a PoolKey) -> Call<'a, Option<Pool>>;
    /// The Cluster `key` as the API server has it now; `None` when it does not exist or Clusters are not served.
    fn get_cluster<'a>(&'a self, key: &'a ObjectKey) -> Call<'a, Option<Cluster>>;
    fn add_pool_finalizer<'a>(&'a self, key: &'a PoolKey, finalizer: &'a str, read: &'a Read) -> Call<'a, ()>;
    fn patch_pool_status<'a>(&'a self, key: &'a PoolKey, status: &'a PoolStatus) -> Call<'a, ()>;
    /// Sets (or, with `None`, removes) one annotation if the pool's resourceVersion is still `resource_version`;
    /// returns the pool as written.
    fn patch_pool_annotation<'a>(
        &'a self,
        key: &'a PoolKey,
        resource_version: &'a str,
        annotation: &'a str,
        value: Option<&'a str>,
    ) -> Call<'a, Pool>;

    /// Removes `finalizer` if it is still at `at`.
    fn remove_finalizer<'a>(&'a self, target: &'a Target, finalizer: &'a str, at: &'a FinalizerAt)
    -> Call<'a, Removed>;

    /// Publishes a Kubernetes Event (best effort: the caller does not retry).
    fn publish_event(&self, event: Event) -> Call<'_, ()>;
}
