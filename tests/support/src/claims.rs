//! Helpers for tests of the claim and pool controllers: pools, claims and IPAddresses as dynamic objects of the CAPI
//! version under test, and waits on their state.

use std::time::Duration;

use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::eventually;

pub const GROUP: &str = "ipam.cluster.x-k8s.io";

pub fn pool_resource(kind: &str) -> ApiResource {
    crate::resource(GROUP, "v1alpha2", kind)
}

pub fn pools(client: &Client, kind: &str, namespace: &str) -> Api<DynamicObject> {
    if kind.starts_with("Global") {
        Api::all_with(client.clone(), &pool_resource(kind))
    } else {
        Api::namespaced_with(client.clone(), namespace, &pool_resource(kind))
    }
}

pub async fn create_pool(client: &Client, kind: &str, namespace: &str, name: &str, spec: Value) -> DynamicObject {
    let mut p = DynamicObject::new(name, &pool_resource(kind));
    p.data = json!({ "spec": spec });
    pools(client, kind, namespace)
        .create(&PostParams::default(), &p)
        .await
        .unwrap_or_else(|e| panic!("pool {name}: {e}"))
}

/// The CAPI API version the tests talk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Capi {
    V1Beta1,
    V1Beta2,
}

impl Capi {
    pub fn version(self) -> &'static str {
        match self {
            Capi::V1Beta1 => "v1beta1",
            Capi::V1Beta2 => "v1beta2",
        }
    }

    pub fn claims(self, client: &Client, namespace: &str) -> Api<DynamicObject> {
        let r = crate::resource(GROUP, self.version(), "IPAddressClaim");
        Api::namespaced_with(client.clone(), namespace, &r)
    }

    pub fn addresses(self, client: &Client, namespace: &str) -> Api<DynamicObject> {
        let r = crate::resource(GROUP, self.version(), "IPAddress");
        Api::namespaced_with(client.clone(), namespace, &r)
    }

    pub fn clusters(self, client: &Client, namespace: &str) -> Api<DynamicObject> {
        let r = crate::resource("cluster.x-k8s.io", self.version(), "Cluster");
        Api::namespaced_with(client.clone(), namespace, &r)
    }

    pub fn claim(self, name: &str, kind: &str, pool: &str) -> DynamicObject {
        let r = crate::resource(GROUP, self.version(), "IPAddressClaim");
        let mut c = DynamicObject::new(name, &r);
        c.data = json!({"spec": {"poolRef": {"apiGroup": GROUP, "kind": kind, "name": pool}}});
        c
    }

    pub async fn create_claim(
        self,
        client: &Client,
        namespace: &str,
        name: &str,
        kind: &str,
        pool: &str,
    ) -> DynamicObject {
        self.claims(client, namespace)
            .create(&PostParams::default(), &self.claim(name, kind, pool))
            .await
            .unwrap_or_else(|e| panic!("claim {name}: {e}"))
    }

    /// Claims `c0` .. `c{count-1}` on one pool, created all at once.
    pub async fn create_claims(self, client: &Client, namespace: &str, count: usize, kind: &str, pool: &str) {
        futures::future::join_all(
            (0..count).map(|i| async move { self.create_claim(client, namespace, &format!("c{i}"), kind, pool).await }),
        )
        .await;
    }

    /// A Cluster with the given spec.paused and paused annotation, whose infrastructureRef names a stand-in
    /// DemoCluster (tests/fixtures/stand-in-providers.yaml): CAPI's webhook wants an infrastructure or control-plane
    /// reference or a topology.
    pub async fn create_cluster(self, client: &Client, namespace: &str, name: &str, paused: bool, annotation: bool) {
        let r = crate::resource("cluster.x-k8s.io", self.version(), "Cluster");
        let mut c = DynamicObject::new(name, &r);
        if annotation {
            c.metadata.annotations = Some([("cluster.x-k8s.io/paused".to_owned(), String::new())].into());
        }
        let infrastructure = match self {
            Capi::V1Beta1 => {
                json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "DemoCluster", "name": name})
            }
            Capi::V1Beta2 => {
                json!({"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DemoCluster", "name": name})
            }
        };
        c.data = json!({"spec": {"paused": paused, "infrastructureRef": infrastructure}});
        self.clusters(client, namespace)
            .create(&PostParams::default(), &c)
            .await
            .unwrap_or_else(|e| panic!("cluster {name}: {e}"));
    }

    /// Waits until the claim's status.addressRef is set, and returns the bound IPAddress.
    pub async fn wait_bound(self, client: &Client, namespace: &str, name: &str) -> DynamicObject {
        self.wait_bound_within(client, namespace, name, Duration::from_secs(30)).await
    }

    /// As [`Capi::wait_bound`], for a claim that someone else (a consumer) creates within `timeout`.
    pub async fn wait_bound_within(
        self,
        client: &Client,
        namespace: &str,
        name: &str,
        timeout: Duration,
    ) -> DynamicObject {
        let claims = self.claims(client, namespace);
        let addresses = self.addresses(client, namespace);
        eventually(timeout, &format!("claim {namespace}/{name} bound"), || async {
            let claim = claims.get(name).await.ok()?;
            let address_name = claim.data.pointer("/status/addressRef/name")?.as_str()?.to_owned();
            addresses.get(&address_name).await.ok()
        })
        .await
    }

    /// The claim's Ready condition (v1beta2: status.conditions; v1beta1: status.conditions too, in its own shape).
    pub async fn ready(self, client: &Client, namespace: &str, name: &str) -> Option<Value> {
        let claim = self.claims(client, namespace).get(name).await.ok()?;
        claim.data.pointer("/status/conditions")?.as_array()?.iter().find(|c| c["type"] == "Ready").cloned()
    }

    pub async fn wait_reason(self, client: &Client, namespace: &str, name: &str, reason: &str) -> Value {
        eventually(Duration::from_secs(30), &format!("claim {namespace}/{name} Ready reason {reason}"), || async {
            self.ready(client, namespace, name).await.filter(|c| c["reason"] == reason)
        })
        .await
    }

    /// Waits until the manager has seen Cluster `cluster` paused, which it judges from its cache alone, so that a
    /// test may then act on the pause without a guessed sleep: a claim naming the Cluster, of a pool that does not
    /// exist (the Cluster is judged first: it allocates nothing, and gets no finalizer), says `ClusterPaused`, and is
    /// deleted. The manager's one index then shows the pause to every later reconcile.
    pub async fn wait_pause_seen(self, client: &Client, namespace: &str, cluster: &str) {
        let name = format!("pause-seen-{cluster}");
        let mut sentinel = self.claim(&name, "InClusterIPPool", "no-such-pool");
        sentinel.data["spec"]["clusterName"] = json!(cluster);
        self.claims(client, namespace)
            .create(&PostParams::default(), &sentinel)
            .await
            .unwrap_or_else(|e| panic!("claim {name}: {e}"));
        self.wait_reason(client, namespace, &name, "ClusterPaused").await;
        self.delete_claim(client, namespace, &name).await;
    }

    /// Deletes a claim and waits until it is gone.
    pub async fn delete_claim(self, client: &Client, namespace: &str, name: &str) {
        let claims = self.claims(client, namespace);
        let _ = claims.delete(name, &DeleteParams::default()).await;
        eventually(Duration::from_secs(30), &format!("claim {namespace}/{name} gone"), || async {
            matches!(claims.get_opt(name).await, Ok(None)).then_some(())
        })
        .await;
    }
}

pub fn address_of(ip_address: &DynamicObject) -> String {
    ip_address.data["spec"]["address"].as_str().unwrap_or_default().to_owned()
}

/// The pool's status.ipAddresses once it equals `expected` (total, used, free, outOfRange).
pub async fn wait_pool_counts(
    client: &Client,
    kind: &str,
    namespace: &str,
    name: &str,
    expected: (i64, i64, i64, i64),
) {
    let api = pools(client, kind, namespace);
    eventually(Duration::from_secs(30), &format!("{kind} {name} counts {expected:?}"), || async {
        let p = api.get(name).await.ok()?;
        let s = p.data.pointer("/status/ipAddresses")?;
        let got = (s["total"].as_i64()?, s["used"].as_i64()?, s["free"].as_i64()?, s["outOfRange"].as_i64()?);
        (got == expected).then_some(())
    })
    .await;
}

pub async fn annotate(api: &Api<DynamicObject>, name: &str, key: &str, value: Option<&str>) {
    let patch = json!({"metadata": {"annotations": { key: value }}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("annotating {name}: {e}"));
}

pub fn names(list: &[DynamicObject]) -> Vec<String> {
    list.iter().map(|o| o.name_any()).collect()
}

/// Waits until `namespace` holds no claim and no IPAddress (the source of a `clusterctl move`, once it is done).
pub async fn wait_no_claims_or_addresses(capi: Capi, client: &Client, namespace: &str) {
    eventually(Duration::from_secs(30), &format!("no claim or IPAddress left in {namespace}"), || async {
        let claims = capi.claims(client, namespace).list(&Default::default()).await.ok()?;
        let addresses = capi.addresses(client, namespace).list(&Default::default()).await.ok()?;
        (claims.items.is_empty() && addresses.items.is_empty()).then_some(())
    })
    .await;
}
