//! [`ApiServer`] on kube's client: the manager's way to the API server. Every write passes the leader fence.

use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PostParams, Preconditions};
use kube::{Client, ResourceExt};
use serde_json::Value;

use super::{
    ApiError, ApiServer, Call, Deleted, FinalizerAt, Read, Removed, Repair, StoredConditions, Target,
    failed_test_is_conflict, requests,
};
use crate::api::v1alpha2::PoolStatus;
use crate::api::{MOVED_AWAY_ANNOTATION, MOVED_AWAY_MARK, Pool};
use crate::capi::status::ClaimStatusPatch;
use crate::capi::{CapiApis, ClaimResource, Cluster, IpAddress};
use crate::compact::{ObjectKey, PoolKey};
use crate::leader::Fence;

/// Whether a kube client error is one of transport (connect, TLS, timeout, a dropped connection): no answer from the
/// API server.
pub fn is_transport(e: &kube::Error) -> bool {
    matches!(e, kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::HttpError(_))
}

/// The field manager every write of ours names (managedFields show who wrote what).
pub const FIELD_MANAGER: &str = "capi-ipam-in-cluster";

fn patch_params() -> kube::api::PatchParams {
    kube::api::PatchParams { field_manager: Some(FIELD_MANAGER.to_owned()), ..Default::default() }
}

fn post_params() -> PostParams {
    PostParams { field_manager: Some(FIELD_MANAGER.to_owned()), ..Default::default() }
}

/// The API server as the manager reaches it: kube's client, the Cluster API versions it serves, and the fence of
/// this replica's leader term.
pub struct KubeApi {
    client: Client,
    capi: CapiApis,
    fence: Fence,
}

impl KubeApi {
    pub fn new(client: Client, capi: CapiApis, fence: Fence) -> Self {
        Self { client, capi, fence }
    }

    fn claims(&self, namespace: &str) -> Api<ClaimResource> {
        Api::namespaced_with(self.client.clone(), namespace, &self.capi.ipam)
    }

    fn raw_claims(&self, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), namespace, &self.capi.ipam.ip_address_claim())
    }

    fn addresses(&self, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), namespace, &self.capi.ipam.ip_address())
    }

    fn pools(&self, key: &PoolKey) -> Api<DynamicObject> {
        if key.kind.is_global() {
            Api::all_with(self.client.clone(), &key.kind.api_resource())
        } else {
            Api::namespaced_with(self.client.clone(), &key.namespace, &key.kind.api_resource())
        }
    }

    fn api_for(&self, target: &Target) -> (Api<DynamicObject>, String) {
        match target {
            Target::Claim(key) => (self.raw_claims(&key.namespace), key.name.to_string()),
            Target::Address(key) => (self.addresses(&key.namespace), key.name.to_string()),
            Target::Pool(key) => (self.pools(key), key.name.to_string()),
        }
    }

    /// Sends a write if this replica leads, and drops it if the term ends before the answer.
    async fn write<T>(&self, write: impl Future<Output = Result<T, kube::Error>>) -> Result<T, ApiError> {
        self.fence.guard(write).await?.map_err(api_error)
    }
}

/// Our error for kube's.
pub fn api_error(error: kube::Error) -> ApiError {
    match error {
        kube::Error::Api(s) => ApiError::from_status(s.code, &s.reason, &s.message),
        e if is_transport(&e) => ApiError::Unreachable(e.to_string()),
        e => ApiError::Failed { code: 0, message: e.to_string() },
    }
}

fn not_found_is_none<T>(result: Result<T, kube::Error>) -> Result<Option<T>, ApiError> {
    match result.map_err(api_error) {
        Ok(v) => Ok(Some(v)),
        Err(ApiError::NotFound) => Ok(None),
        Err(e) => Err(e),
    }
}

fn typed_address(object: DynamicObject) -> IpAddress {
    IpAddress::from_dynamic(object)
}

fn typed_pool(key: &PoolKey, object: DynamicObject) -> Result<Pool, ApiError> {
    let value = serde_json::to_value(object).map_err(|e| ApiError::Failed { code: 0, message: e.to_string() })?;
    Pool::from_object(key.kind, value).map_err(|e| ApiError::Failed { code: 0, message: e })
}

impl ApiServer for KubeApi {
    fn get_claim<'a>(&'a self, key: &'a ObjectKey) -> Call<'a, Option<ClaimResource>> {
        Box::pin(async move { not_found_is_none(self.claims(&key.namespace).get(&key.name).await) })
    }

    fn get_claim_conditions<'a>(&'a self, key: &'a ObjectKey) -> Call<'a, Option<StoredConditions>> {
        Box::pin(async move {
            let Some(live) = not_found_is_none(self.raw_claims(&key.namespace).get(&key.name).await)? else {
                return Ok(None);
            };
            let list =
                |pointer: &str| live.data.pointer(pointer).and_then(Value::as_array).cloned().unwrap_or_default();
            Ok(Some(StoredConditions {
                conditions: list("/status/conditions"),
                v1beta2: list("/status/v1beta2/conditions"),
                resource_version: live.resource_version().unwrap_or_default(),
                uid: live.uid().unwrap_or_default(),
            }))
        })
    }

    fn add_claim_finalizer<'a>(
        &'a self,
        key: &'a ObjectKey,
        finalizer: &'a str,
        read: &'a Read,
    ) -> Call<'a, ClaimResource> {
        Box::pin(async move {
            let patch = requests::add_finalizer(finalizer, read);
            let api = self.claims(&key.namespace);
            self.write(api.patch(&key.name, &patch_params(), &Patch::<()>::Json(patch)))
                .await
                .map_err(failed_test_is_conflict)
        })
    }

    fn patch_claim_status<'a>(
        &'a self,
        key: &'a ObjectKey,
        resource_version: &'a str,
        status: &'a ClaimStatusPatch,
    ) -> Call<'a, ()> {
        Box::pin(async move {
            let patch = requests::claim_status(resource_version, status);
            let api = self.raw_claims(&key.namespace);
            self.write(api.patch_status(&key.name, &patch_params(), &Patch::Merge(&patch))).await.map(|_| ())
        })
    }

    fn get_address<'a>(&'a self, key: &'a ObjectKey) -> Call<'a, Option<IpAddress>> {
        Box::pin(async move {
            Ok(not_found_is_none(self.addresses(&key.namespace).get(&key.name).await)?.map(typed_address))
        })
    }

    fn create_address<'a>(&'a self, address: &'a IpAddress) -> Call<'a, IpAddress> {
        Box::pin(async move {
            let namespace = address.metadata.namespace.clone().unwrap_or_default();
            let object = address.to_dynamic(self.capi.ipam);
            let api = self.addresses(&namespace);
            self.write(api.create(&post_params(), &object)).await.map(typed_address)
        })
    }

    fn repair_address<'a>(&'a self, key: &'a ObjectKey, repair: &'a Repair) -> Call<'a, IpAddress> {
        Box::pin(async move {
            let patch = requests::repair(repair);
            let api = self.addresses(&key.namespace);
            self.write(api.patch(&key.name, &patch_params(), &Patch::Merge(&patch))).await.map(typed_address)
        })
    }

    fn mark_address_moved_away<'a>(&'a self, key: &'a ObjectKey, resource_version: &'a str) -> Call<'a, IpAddress> {
        Box::pin(async move {
            let patch = requests::annotation(resource_version, MOVED_AWAY_ANNOTATION, Some(MOVED_AWAY_MARK));
            let api = self.addresses(&key.namespace);
            self.write(api.patch(&key.name, &patch_params(), &Patch::Merge(&patch))).await.map(typed_address)
        })
    }

    fn delete_address<'a>(
        &'a self,
        key: &'a ObjectKey,
        uid: &'a str,
        resource_version: Option<&'a str>,
    ) -> Call<'a, Deleted> {
        Box::pin(async move {
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: Some(uid.to_owned()),
                    resource_version: resource_version.map(str::to_owned),
                }),
                ..DeleteParams::default()
            };
            let api = self.addresses(&key.namespace);
            // kube answers the object while finalizers hold it, else the API server's Status.
            match self.write(api.delete(&key.name, &params)).await?.left() {
                Some(deleting) => Ok(Deleted::Deleting(Box::new(typed_address(deleting)))),
                None => Ok(Deleted::Gone),
            }
        })
    }

    fn get_pool<'a>(&'a self, key: &'a PoolKey) -> Call<'a, Option<Pool>> {
        Box::pin(async move {
            match not_found_is_none(self.pools(key).get(&key.name).await)? {
                Some(object) => typed_pool(key, object).map(Some),
                None => Ok(None),
            }
        })
    }

    fn get_cluster<'a>(&'a self, key: &'a ObjectKey) -> Call<'a, Option<Cluster>> {
        Box::pin(async move {
            let Some(version) = self.capi.cluster else { return Ok(None) };
            let api: Api<Cluster> = Api::namespaced_with(self.client.clone(), &key.namespace, &version);
            not_found_is_none(api.get(&key.name).await)
        })
    }

    fn add_pool_finalizer<'a>(&'a self, key: &'a PoolKey, finalizer: &'a str, read: &'a Read) -> Call<'a, ()> {
        Box::pin(async move {
            let patch = requests::add_finalizer(finalizer, read);
            let api = self.pools(key);
            self.write(api.patch(&key.name, &patch_params(), &Patch::<()>::Json(patch)))
                .await
                .map(|_| ())
                .map_err(failed_test_is_conflict)
        })
    }

    fn patch_pool_status<'a>(&'a self, key: &'a PoolKey, status: &'a PoolStatus) -> Call<'a, ()> {
        Box::pin(async move {
            let patch = requests::pool_status(status);
            let api = self.pools(key);
            self.write(api.patch_status(&key.name, &patch_params(), &Patch::Merge(&patch))).await.map(|_| ())
        })
    }

    fn patch_pool_annotation<'a>(
        &'a self,
        key: &'a PoolKey,
        resource_version: &'a str,
        annotation: &'a str,
        value: Option<&'a str>,
    ) -> Call<'a, Pool> {
        Box::pin(async move {
            let patch = requests::annotation(resource_version, annotation, value);
            let api = self.pools(key);
            let written = self.write(api.patch(&key.name, &patch_params(), &Patch::Merge(&patch))).await?;
            typed_pool(key, written)
        })
    }

    fn remove_finalizer<'a>(
        &'a self,
        target: &'a Target,
        finalizer: &'a str,
        at: &'a FinalizerAt,
    ) -> Call<'a, Removed> {
        Box::pin(async move {
            let patch = requests::remove_finalizer(finalizer, at);
            let (api, name) = self.api_for(target);
            match self.write(api.patch(&name, &patch_params(), &Patch::<()>::Json(patch))).await {
                Ok(object) => Ok(removed(&object.metadata)),
                Err(ApiError::NotFound) => Ok(Removed::Gone),
                Err(e) => Err(failed_test_is_conflict(e)),
            }
        })
    }

    fn publish_event(&self, event: Event) -> Call<'_, ()> {
        Box::pin(async move {
            let namespace = event.metadata.namespace.clone().unwrap_or_default();
            let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
            self.write(api.create(&PostParams::default(), &event)).await.map(|_| ())
        })
    }
}

/// Whether the answer to a finalizer removal shows the object gone: it was being deleted and has no finalizer left.
pub fn removed(meta: &kube::api::ObjectMeta) -> Removed {
    if meta.deletion_timestamp.is_some() && meta.finalizers.as_ref().is_none_or(Vec::is_empty) {
        Removed::Gone
    } else {
        Removed::Kept
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::PoolKind;
    use crate::capi::CapiVersion;

    /// Every write of the manager's client passes the leader fence (a deposed leader never writes): past an ended term
    /// each is refused as fenced, without being sent. One sent anyway would meet the closed port below and fail as
    /// unreachable instead. (The simulation runs its own client, so this is where a write that skips the fence shows.)
    #[tokio::test]
    async fn no_write_passes_an_ended_term() {
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("a URL"));
        let client = Client::try_from(config).expect("a client");
        let capi = CapiApis { ipam: CapiVersion::V1Beta2, cluster: Some(CapiVersion::V1Beta2) };
        let api = KubeApi::new(client, capi, Fence::ended_term());
        let key = ObjectKey::new("ns", "c");
        let pool = PoolKey::new(PoolKind::InClusterIPPool, "ns", "p");
        let read = Read { resource_version: "1".into(), has_finalizers: false };
        let at = FinalizerAt { index: 0, uid: "u".into() };
        let repair = Repair {
            resource_version: "1".into(),
            owner_references: Vec::new(),
            finalizers: Vec::new(),
            cluster_label: None,
            unmark_moved_away: false,
        };
        let address = IpAddress::default();
        let fenced = |what: &str, result: Result<(), ApiError>| {
            assert!(matches!(result, Err(ApiError::Fenced(_))), "{what} was not fenced: {result:?}");
        };
        fenced("add_claim_finalizer", api.add_claim_finalizer(&key, "f", &read).await.map(|_| ()));
        let status = ClaimStatusPatch { conditions: Vec::new(), deprecated: None, v1beta2: None, address_ref: None };
        fenced("patch_claim_status", api.patch_claim_status(&key, "1", &status).await);
        fenced("create_address", api.create_address(&address).await.map(|_| ()));
        fenced("repair_address", api.repair_address(&key, &repair).await.map(|_| ()));
        fenced("mark_address_moved_away", api.mark_address_moved_away(&key, "1").await.map(|_| ()));
        fenced("delete_address", api.delete_address(&key, "u", Some("1")).await.map(|_| ()));
        fenced("add_pool_finalizer", api.add_pool_finalizer(&pool, "f", &read).await);
        fenced("patch_pool_status", api.patch_pool_status(&pool, &PoolStatus::default()).await);
        fenced("patch_pool_annotation", api.patch_pool_annotation(&pool, "1", "a", None).await.map(|_| ()));
        fenced("remove_finalizer", api.remove_finalizer(&Target::Pool(pool.clone()), "f", &at).await.map(|_| ()));
        fenced("publish_event", api.publish_event(Event::default()).await);
    }
}
