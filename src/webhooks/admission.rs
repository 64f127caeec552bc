//! Admission for the four pool kinds: defaulting, validation with the Go provider's rules and texts (the rules
//! themselves live in `crate::ipam::validate`), the update and delete guards, and the gateway and overlap warnings of
//! docs/compatibility.md D12.
//!
//! Reviews are kube's AdmissionReview types: whatever the body, the answer is a well-formed AdmissionReview in the
//! request's version (`admission.k8s.io/v1` or `v1beta1`), and a rejection names the field at fault (for a body that
//! is not a review, the JSON path of what is wrong with it).

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::ByteString;
use kube::api::{DynamicObject, ListParams};
use kube::core::Status;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::response::{StatusCause, StatusDetails};
use kube::{Api, Client};
use serde_json::{Value, json};

use super::routes::{AdmissionRoute, Purpose};
use crate::api::{DELETE_FOR_MOVE_ANNOTATION, GROUP, PoolKind, SKIP_DELETE_VALIDATION_ANNOTATION};
use crate::capi::{self, CapiVersion, IpAddressSpec};
use crate::ipam::validate::FieldError;

type Request = AdmissionRequest<DynamicObject>;

mod claims;
mod pools;
use pools::{validate_ip, validate_prefix};

/// What the admission handlers need from the outside.
#[derive(Clone)]
pub struct AdmissionContext {
    pub reads: Arc<dyn ClusterReads>,
    /// Reject pools that overlap another pool of the same kind and scope, instead of warning (D12).
    pub reject_overlapping_pools: bool,
    /// Reject an IPv4 gateway outside the pool's subnet, or an unspecified one, instead of warning (D12).
    pub reject_gateway_outside_subnet: bool,
}

impl AdmissionContext {
    /// Reads live from the API server; both `--reject-…` flags off.
    pub fn live(client: Client, capi: CapiVersion) -> Self {
        AdmissionContext {
            reads: Arc::new(LiveReads { client, capi }),
            reject_overlapping_pools: false,
            reject_gateway_outside_subnet: false,
        }
    }
}

/// What admission reads from the cluster: the IPAddresses of a pool (the update and delete guards) and the pools of
/// a kind and scope (the overlap warning). The manager reads them live ([`LiveReads`]); the differential test against
/// the Go provider gives them as data.
pub trait ClusterReads: Send + Sync {
    /// The IPAddresses whose poolRef names this pool, in `namespace` (all namespaces for global pools).
    fn pool_addresses<'a>(
        &'a self,
        kind: PoolKind,
        name: &'a str,
        namespace: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<PoolAddress>, kube::Error>>;

    /// Every pool of `kind` in `namespace` (all global pools), as (name, spec).
    fn pools<'a>(
        &'a self,
        kind: PoolKind,
        namespace: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<(String, Value)>, kube::Error>>;

    /// The pool `name` of `kind` in `namespace` (none for global pools), whole, if it exists.
    fn pool<'a>(
        &'a self,
        kind: PoolKind,
        name: &'a str,
        namespace: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Option<DynamicObject>, kube::Error>>;
}

/// One IPAddress of a pool, as admission reads it.
#[derive(Clone, Debug)]
pub struct PoolAddress {
    pub namespace: String,
    pub spec: IpAddressSpec,
}

/// [`ClusterReads`] from the API server, read live (not from a cache: a decision must see the latest writes).
pub struct LiveReads {
    pub client: Client,
    /// The IPAddress version to list.
    pub capi: CapiVersion,
}

impl LiveReads {
    /// The pools of `kind` in `namespace` (all namespaces, or the global pools, for none).
    fn pool_api(&self, kind: PoolKind, namespace: Option<&str>) -> Api<DynamicObject> {
        let resource = kind.api_resource();
        match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &resource),
            None => Api::all_with(self.client.clone(), &resource),
        }
    }
}

impl ClusterReads for LiveReads {
    fn pool_addresses<'a>(
        &'a self,
        kind: PoolKind,
        name: &'a str,
        namespace: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<PoolAddress>, kube::Error>> {
        Box::pin(async move {
            let addresses = capi::list_pool_addresses(&self.client, self.capi, kind, name, namespace).await?;
            Ok(addresses.into_iter().map(|(namespace, spec)| PoolAddress { namespace, spec }).collect())
        })
    }

    fn pools<'a>(
        &'a self,
        kind: PoolKind,
        namespace: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<(String, Value)>, kube::Error>> {
        Box::pin(async move {
            let list = self.pool_api(kind, namespace).list(&ListParams::default()).await?;
            Ok(list.items.into_iter().filter_map(|p| Some((p.metadata.name?, p.data.get("spec")?.clone()))).collect())
        })
    }

    fn pool<'a>(
        &'a self,
        kind: PoolKind,
        name: &'a str,
        namespace: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Option<DynamicObject>, kube::Error>> {
        Box::pin(async move { self.pool_api(kind, namespace).get_opt(name).await })
    }
}

pub const POOL_IN_USE_MESSAGE: &str =
    "Pool has IPAddresses allocated. Cannot delete Pool until all IPAddresses have been removed.";

/// The decision on one request.
#[derive(Debug, Default)]
pub struct Outcome {
    pub allowed: bool,
    pub status: Option<Status>,
    pub patch: Option<json_patch::Patch>,
    pub warnings: Vec<String>,
}

impl Outcome {
    fn allow() -> Self {
        Outcome { allowed: true, ..Default::default() }
    }

    fn deny(status: Status) -> Self {
        Outcome { allowed: false, status: Some(status), ..Default::default() }
    }

    /// A short label for metrics: allowed, denied or error.
    pub fn result_label(&self) -> &'static str {
        match (&self.allowed, self.status.as_ref().map(|s| s.code)) {
            (true, _) => "allowed",
            (false, Some(code)) if code >= 500 => "error",
            (false, _) => "denied",
        }
    }
}

/// 422 Invalid with one cause per field error, as Kubernetes' `apierrors.NewInvalid` builds it.
/// A spec that passed the field checks but that the allocator still cannot build from: one error for the whole spec.
fn deny_spec(kind: PoolKind, name: &str, e: impl std::fmt::Display) -> Outcome {
    Outcome::deny(invalid(kind.kind(), name, &[FieldError::invalid("spec", "", e.to_string())]))
}

pub fn invalid(kind: &str, name: &str, errs: &[FieldError]) -> Status {
    let texts: Vec<String> = errs.iter().map(ToString::to_string).collect();
    let aggregate = if texts.len() == 1 { texts[0].clone() } else { format!("[{}]", texts.join(", ")) };
    Status::failure(&format!("{kind}.{GROUP} {name:?} is invalid: {aggregate}"), "Invalid").with_code(422).with_details(
        StatusDetails {
            name: name.to_owned(),
            group: GROUP.to_owned(),
            kind: kind.to_owned(),
            causes: errs
                .iter()
                .map(|e| StatusCause {
                    reason: e.kind.reason().to_owned(),
                    message: e.to_string().trim_start_matches(&format!("{}: ", e.field)).to_owned(),
                    field: e.field.clone(),
                })
                .collect(),
            uid: String::new(),
            retry_after_seconds: 0,
        },
    )
}

/// 400 BadRequest with the Go provider's message, plus a cause that names the field at fault.
pub fn bad_request(kind: &str, name: &str, field: &str, message: &str) -> Status {
    Status::failure(message, "BadRequest").with_code(400).with_details(StatusDetails {
        name: name.to_owned(),
        group: GROUP.to_owned(),
        kind: kind.to_owned(),
        causes: vec![StatusCause {
            reason: "FieldValueInvalid".to_owned(),
            message: message.to_owned(),
            field: field.to_owned(),
        }],
        uid: String::new(),
        retry_after_seconds: 0,
    })
}

/// A review we cannot read: `field` is the JSON path inside the AdmissionReview.
fn malformed(field: &str, message: &str) -> Status {
    bad_request("AdmissionReview", "", field, &format!("malformed AdmissionReview: {message}"))
}

fn internal(message: &str) -> Status {
    Status::failure(message, "InternalError").with_code(500)
}

/// Handles one AdmissionReview body for `route` and returns the response review.
pub async fn review(ctx: &AdmissionContext, route: AdmissionRoute, body: &[u8]) -> (Value, Outcome) {
    let parsed: Result<AdmissionReview<DynamicObject>, _> =
        serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_slice(body));
    let review = match parsed {
        Ok(review) => review,
        Err(e) => {
            let path = e.path().to_string();
            let field = if path == "." { "body".to_owned() } else { path };
            let outcome = Outcome::deny(malformed(&field, &format!("{field}: {}", e.inner())));
            return (response(AdmissionResponse::invalid(""), &outcome), outcome);
        }
    };
    let request: Request = match review.try_into() {
        Ok(request) => request,
        Err(_) => {
            let outcome = Outcome::deny(malformed("request", "request is required"));
            return (response(AdmissionResponse::invalid(""), &outcome), outcome);
        }
    };
    let outcome = match route {
        AdmissionRoute::Pool { kind, purpose: Purpose::Default } => default(kind, &request),
        AdmissionRoute::Pool { kind, purpose: Purpose::Validate } => validate(ctx, kind, &request).await,
        AdmissionRoute::ClaimWarnings => claims::warnings(ctx, &request).await,
    };
    (response(AdmissionResponse::from(&request), &outcome), outcome)
}

fn response(mut response: AdmissionResponse, outcome: &Outcome) -> Value {
    response.allowed = outcome.allowed;
    response.result = outcome.status.clone().unwrap_or_default();
    if let Some(patch) = outcome.patch.clone() {
        // A patch serializes; were it not to, the object goes unpatched rather than the request failing.
        response = match response.clone().with_patch(patch) {
            Ok(patched) => patched,
            Err(_) => response,
        };
    }
    if !outcome.warnings.is_empty() {
        response.warnings = Some(outcome.warnings.clone());
    }
    let patch = response.patch.clone();
    let mut review = serde_json::to_value(response.into_review()).unwrap_or_default();
    // kube writes the patch as an array of numbers; written as Go writes a []byte, base64.
    if let Some(bytes) = patch {
        review["response"]["patch"] = serde_json::to_value(ByteString(bytes)).unwrap_or_default();
    }
    review
}

/// Defaulting. IP pools: a missing `spec.prefix` becomes 0 (the Go webhook's serialization does the same, and the
/// schema requires the field). Prefix pools: `allocationPrefixLength` 0 or missing becomes 64.
fn default(kind: PoolKind, request: &Request) -> Outcome {
    if request.operation == Operation::Delete {
        return Outcome::allow();
    }
    let Some(spec) = request.object.as_ref().and_then(|o| o.data.get("spec")).and_then(Value::as_object) else {
        return Outcome::allow();
    };
    let patch = if kind.is_prefix_pool() {
        match spec.get("allocationPrefixLength") {
            None => Some(json!([{"op": "add", "path": "/spec/allocationPrefixLength", "value": 64}])),
            Some(v) if v.as_i64() == Some(0) => {
                Some(json!([{"op": "replace", "path": "/spec/allocationPrefixLength", "value": 64}]))
            }
            Some(_) => None,
        }
    } else {
        (!spec.contains_key("prefix")).then(|| json!([{"op": "add", "path": "/spec/prefix", "value": 0}]))
    };
    let patch = patch.and_then(|p| serde_json::from_value(p).ok());
    Outcome { allowed: true, patch, ..Default::default() }
}

/// Parses `object.spec` into a typed spec; a failure names the field.
fn parse_spec<T: serde::de::DeserializeOwned>(object: Option<&DynamicObject>) -> Result<T, FieldError> {
    let spec = object.and_then(|o| o.data.get("spec")).cloned().unwrap_or_else(|| json!({}));
    serde_path_to_error::deserialize(spec).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." { "spec".to_owned() } else { format!("spec.{path}") };
        FieldError::invalid(field, "", e.inner().to_string())
    })
}

fn annotations_of(object: Option<&DynamicObject>) -> BTreeMap<String, String> {
    object.and_then(|o| o.metadata.annotations.clone()).unwrap_or_default()
}

async fn validate(ctx: &AdmissionContext, kind: PoolKind, request: &Request) -> Outcome {
    let namespace = request.namespace.as_deref().filter(|_| !kind.is_global());
    match request.operation {
        Operation::Delete => delete_guard(ctx, kind, &request.name, namespace, request.old_object.as_ref()).await,
        Operation::Create | Operation::Update => {
            let update = request.operation == Operation::Update;
            if kind.is_prefix_pool() {
                validate_prefix(ctx, kind, request, namespace, update).await
            } else {
                validate_ip(ctx, kind, request, namespace, update).await
            }
        }
        Operation::Connect => Outcome::deny(malformed("request.operation", "unsupported operation CONNECT")),
    }
}

async fn delete_guard(
    ctx: &AdmissionContext,
    kind: PoolKind,
    name: &str,
    namespace: Option<&str>,
    old: Option<&DynamicObject>,
) -> Outcome {
    let annotations = annotations_of(old);
    if annotations.contains_key(SKIP_DELETE_VALIDATION_ANNOTATION)
        || annotations.contains_key(DELETE_FOR_MOVE_ANNOTATION)
    {
        return Outcome::allow();
    }
    match ctx.reads.pool_addresses(kind, name, namespace).await {
        Ok(addresses) if addresses.is_empty() => Outcome::allow(),
        Ok(_) => Outcome::deny(bad_request(
            kind.kind(),
            name,
            &format!("metadata.annotations[{SKIP_DELETE_VALIDATION_ANNOTATION}]"),
            POOL_IN_USE_MESSAGE,
        )),
        Err(e) => Outcome::deny(internal(&format!("listing the IPAddresses of the pool: {e}"))),
    }
}
