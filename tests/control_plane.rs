//! The control plane the other integration tests rely on is the real thing: a CRD's OpenAPI schema is enforced by the
//! API server with field paths, `/version` reports the pinned build, RBAC denies the restricted identity, and a private
//! control plane keeps its data across an API server and etcd restart.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use support::{Plane, TestEnv, unique_name};

#[tokio::test]
async fn the_api_server_is_the_pinned_version() {
    let env = TestEnv::new("version").await;
    let info = env.client.apiserver_version().await.expect("GET /version");
    assert_eq!(info.git_version, "v1.36.3");
    assert_eq!((info.major.as_str(), info.minor.as_str()), ("1", "36"));
}

#[tokio::test]
async fn crd_schema_violations_come_back_as_422_with_the_field_path() {
    let env = TestEnv::new("schema").await;
    // A CRD of this test's own (its group is unique, so parallel runs never collide).
    let group = format!("{}.example.test", unique_name("g"));
    let crd: CustomResourceDefinition = serde_json::from_value(serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{group}")},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {"spec": {
                        "type": "object",
                        "required": ["size"],
                        "properties": {"size": {"type": "integer", "minimum": 1, "maximum": 10}}
                    }}
                }}
            }]
        }
    }))
    .expect("crd");
    let crds: Api<CustomResourceDefinition> = Api::all(env.client.clone());
    crds.create(&PostParams::default(), &crd).await.expect("create CRD");
    let crd_name = format!("widgets.{group}");
    let established = await_condition(crds.clone(), &crd_name, conditions::is_crd_established());
    tokio::time::timeout(Duration::from_secs(30), established).await.expect("CRD established in time").expect("watch");

    let resource = support::resource(&group, "v1", "Widget");
    let widgets: Api<DynamicObject> = Api::namespaced_with(env.client.clone(), &env.namespace, &resource);
    let mut bad = DynamicObject::new("too-big", &resource);
    bad.data = serde_json::json!({"spec": {"size": 11}});
    let err = widgets.create(&PostParams::default(), &bad).await.expect_err("size 11 violates maximum 10");
    let kube::Error::Api(status) = err else { panic!("expected an API error, got {err:?}") };
    assert_eq!(status.code, 422, "{status:?}");
    assert_eq!(status.reason, "Invalid");
    let causes = status.details.as_ref().map(|d| d.causes.clone()).unwrap_or_default();
    assert!(causes.iter().any(|c| c.field == "spec.size"), "causes name spec.size: {causes:?}");
    assert!(status.message.contains("spec.size"), "{}", status.message);

    let mut good = DynamicObject::new("ok", &resource);
    good.data = serde_json::json!({"spec": {"size": 3}});
    widgets.create(&PostParams::default(), &good).await.expect("a valid widget is accepted");
    crds.delete(&format!("widgets.{group}"), &Default::default()).await.expect("delete CRD");
}

#[tokio::test]
async fn the_restricted_identity_is_denied_by_rbac() {
    let env = TestEnv::new("rbac").await;
    let restricted = env.plane.restricted_client().await;
    let err = Api::<ConfigMap>::namespaced(restricted, &env.namespace)
        .list(&Default::default())
        .await
        .expect_err("no rights");
    let kube::Error::Api(status) = err else { panic!("expected an API error, got {err:?}") };
    assert_eq!(status.code, 403);
}

#[tokio::test]
async fn a_private_control_plane_survives_restarts() {
    let plane = Plane::private("restart");
    let client = plane.client().await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let cm: ConfigMap =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "kept"}, "data": {"k": "v"}})).expect("cm");
    cms.create(&PostParams::default(), &cm).await.expect("create");

    plane.stop("apiserver");
    plane.stop("etcd");
    plane.start("etcd");
    plane.start("apiserver");

    let client = plane.client().await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let got = cms.get("kept").await.expect("the object survived the restart");
    assert_eq!(got.data.and_then(|d| d.get("k").cloned()), Some("v".to_owned()));
}
