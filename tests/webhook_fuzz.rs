//! Arbitrary AdmissionReview and ConversionReview bodies and pool specs never panic the webhook server, always get a
//! well-formed answer, and every rejection names a field. The router runs in-process (as the manager serves it) with
//! a client of the real API server for the guards' lookups.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use capi_ipam::capi::CapiVersion;
use capi_ipam::metrics::Metrics;
use capi_ipam::webhooks::admission::AdmissionContext;
use capi_ipam::webhooks::routes::{AdmissionRoute, admission_routes};
use capi_ipam::webhooks::{router, routes::CONVERT_PATH};
use proptest::prelude::*;
use serde_json::{Value, json};
use support::Plane;
use tower::ServiceExt;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
}

async fn app() -> axum::Router {
    tokio::task::spawn_blocking(|| {
        support::shared_manager();
    })
    .await
    .expect("CRDs installed");
    let client = Plane::shared().client().await;
    let ctx = Arc::new(AdmissionContext::live(client, CapiVersion::V1Beta2));
    router(ctx, Arc::new(Metrics::new()))
}

async fn post(app: &axum::Router, path: &str, body: Vec<u8>) -> (StatusCode, Value) {
    let request =
        Request::post(path).header("content-type", "application/json").body(Body::from(body)).expect("request");
    let response = app.clone().oneshot(request).await.expect("the router answers");
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 16 << 20).await.expect("body");
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

/// A rejection must carry causes, each naming a field.
fn check_admission_answer(answer: &Value, uid: Option<&str>) -> Result<(), TestCaseError> {
    prop_assert_eq!(answer["kind"].as_str(), Some("AdmissionReview"), "{}", answer);
    let response = &answer["response"];
    let allowed = response["allowed"].as_bool();
    prop_assert!(allowed.is_some(), "allowed is a bool: {}", answer);
    if let Some(uid) = uid {
        prop_assert_eq!(response["uid"].as_str(), Some(uid));
    }
    if allowed == Some(false) {
        let code = response["status"]["code"].as_u64().unwrap_or(0);
        prop_assert!((400..500).contains(&code), "a client error, not {code}: {}", answer);
        let causes = response["status"]["details"]["causes"].as_array().cloned().unwrap_or_default();
        prop_assert!(!causes.is_empty(), "a rejection names a field: {}", answer);
        for c in causes {
            prop_assert!(c["field"].as_str().is_some_and(|f| !f.is_empty()), "cause without a field: {}", answer);
        }
    }
    Ok(())
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        "[ -~]{0,12}".prop_map(Value::from),
        address_like().prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::from),
            prop::collection::btree_map("[a-zA-Z]{1,10}", inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Strings that look like entries of the address grammar, valid or not.
fn address_like() -> impl Strategy<Value = String> {
    prop_oneof![
        (any::<[u8; 4]>(), 0u8..40).prop_map(|(a, p)| format!("{}.{}.{}.{}/{p}", a[0], a[1], a[2], a[3])),
        (any::<[u8; 4]>(), any::<[u8; 4]>())
            .prop_map(|(a, b)| format!("{}.{}.{}.{}-{}.{}.{}.{}", a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3])),
        (any::<u16>(), any::<u16>(), 0u8..140).prop_map(|(a, b, p)| format!("fd{:02x}:{a:x}::{b:x}/{p}", a % 256)),
        (any::<u16>()).prop_map(|a| format!("fd00::{a:x}")),
        "[0-9a-f:.\\-/]{0,20}",
    ]
}

fn arb_spec() -> impl Strategy<Value = Value> {
    (
        prop::collection::vec(address_like(), 0..4),
        prop::option::of(-5i64..140),
        prop::option::of(address_like()),
        prop::option::of(prop::collection::vec(address_like(), 0..3)),
        prop::option::of(any::<bool>()),
        prop::option::of(-3i64..100),
        prop::collection::vec(address_like(), 0..3),
        prop::option::of(0i64..140),
        arb_json(),
    )
        .prop_map(|(addresses, prefix, gateway, excluded, reserved, grace, prefixes, alloc, junk)| {
            let mut spec = json!({"addresses": addresses, "prefixes": prefixes});
            if let Some(p) = prefix {
                spec["prefix"] = json!(p);
            }
            if let Some(g) = gateway {
                spec["gateway"] = json!(g);
            }
            if let Some(e) = excluded {
                spec["excludedAddresses"] = json!(e.clone());
                spec["excludedPrefixes"] = json!(e);
            }
            if let Some(r) = reserved {
                spec["allocateReservedIPAddresses"] = json!(r);
            }
            if let Some(g) = grace {
                spec["addressReuseGracePeriodSeconds"] = json!(g);
            }
            if let Some(a) = alloc {
                spec["allocationPrefixLength"] = json!(a);
            }
            // Sometimes a field of the wrong type.
            if junk.is_string() {
                spec["prefix"] = junk;
            } else if junk.is_array() {
                spec["gateway"] = junk;
            }
            spec
        })
}

fn review(uid: &str, kind: &str, operation: &str, object: Value, old: Value) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid, "kind": {"group": "ipam.cluster.x-k8s.io", "version": "v1alpha2", "kind": kind},
            "resource": {"group": "ipam.cluster.x-k8s.io", "version": "v1alpha2", "resource": format!("{}s", kind.to_lowercase())},
            "name": "fuzz-pool", "namespace": "fuzz-ns", "operation": operation,
            "userInfo": {"username": "fuzz"}, "object": object, "oldObject": old
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 250, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bodies_get_well_formed_answers(body in prop_oneof![
        prop::collection::vec(any::<u8>(), 0..200),
        arb_json().prop_map(|v| v.to_string().into_bytes()),
        arb_json().prop_map(|v| json!({"apiVersion": "admission.k8s.io/v1beta1", "request": v}).to_string().into_bytes()),
    ], route in 0usize..9) {
        let rt = runtime();
        rt.block_on(async {
            let app = app().await;
            let path = admission_routes()[route].path();
            let (status, answer) = post(&app, &path, body.clone()).await;
            prop_assert_eq!(status, StatusCode::OK);
            check_admission_answer(&answer, None)?;
            let (status, answer) = post(&app, CONVERT_PATH, body).await;
            prop_assert_eq!(status, StatusCode::OK);
            prop_assert_eq!(answer["kind"].as_str(), Some("ConversionReview"));
            let result = &answer["response"]["result"];
            prop_assert!(result["status"] == "Success" || result["message"].as_str().is_some_and(|m| !m.is_empty()), "{}", answer);
            Ok(())
        })?;
    }

    #[test]
    fn arbitrary_pool_specs_get_field_named_answers(
        spec in arb_spec(), old in arb_spec(), route in 0usize..8, op in 0usize..3, uid in "[a-f0-9]{8}",
    ) {
        let rt = runtime();
        rt.block_on(async {
            let app = app().await;
            let r = admission_routes()[route];
            let AdmissionRoute::Pool { kind, .. } = r else { unreachable!("the first 8 routes are the pools'") };
            let operation = ["CREATE", "UPDATE", "DELETE"][op];
            let object = json!({"apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": kind.kind(),
                "metadata": {"name": "fuzz-pool"}, "spec": spec});
            let old = json!({"apiVersion": "ipam.cluster.x-k8s.io/v1alpha2", "kind": kind.kind(),
                "metadata": {"name": "fuzz-pool"}, "spec": old});
            let body = review(&uid, kind.kind(), operation, object, old).to_string().into_bytes();
            let (status, answer) = post(&app, &r.path(), body).await;
            prop_assert_eq!(status, StatusCode::OK);
            check_admission_answer(&answer, Some(&uid))
        })?;
    }

    /// The claim warnings admit every claim, whatever its spec and requested address; a pool kind of ours that does
    /// not exist is said.
    #[test]
    fn arbitrary_claims_are_admitted_with_warnings_at_most(
        spec in arb_json(), requested in prop::option::of(address_like()), uid in "[a-f0-9]{8}",
        version in prop::sample::select(vec!["v1alpha1", "v1beta1", "v1beta2"]),
        kind in prop::sample::select(vec!["InClusterIPPool", "GlobalInClusterPrefixPool", "Other"]),
    ) {
        let rt = runtime();
        rt.block_on(async {
            let app = app().await;
            let annotations = match &requested {
                Some(r) => json!({"ipam.cluster.x-k8s.io/requested-address": r}),
                None => json!({}),
            };
            let claim = |spec: Value| json!({"apiVersion": format!("ipam.cluster.x-k8s.io/{version}"),
                "kind": "IPAddressClaim", "metadata": {"name": "fuzz-claim", "namespace": "default",
                "annotations": annotations}, "spec": spec});
            let path = AdmissionRoute::ClaimWarnings.path();
            for spec in [spec.clone(), json!({"poolRef": {"apiGroup": "ipam.cluster.x-k8s.io", "kind": kind,
                "name": "fuzz-no-such-pool"}})] {
                let body = review(&uid, "IPAddressClaim", "CREATE", claim(spec.clone()), Value::Null);
                let (status, answer) = post(&app, &path, body.to_string().into_bytes()).await;
                prop_assert_eq!(status, StatusCode::OK);
                check_admission_answer(&answer, Some(&uid))?;
                prop_assert_eq!(answer["response"]["allowed"].as_bool(), Some(true), "{}", answer);
                let warnings = answer["response"]["warnings"].as_array().cloned().unwrap_or_default();
                if spec["poolRef"]["name"] == "fuzz-no-such-pool" && kind != "Other" {
                    prop_assert!(warnings.iter().any(|w| w.as_str().is_some_and(|w| w.starts_with("spec.poolRef: ")
                        && w.contains("\"fuzz-no-such-pool\" ") && w.contains(" does not exist"))), "{}", answer);
                }
            }
            Ok(())
        })?;
    }

    #[test]
    fn arbitrary_v1alpha1_specs_convert_or_fail_with_a_field(
        subnet in prop::option::of(address_like()), start in prop::option::of(address_like()),
        end in prop::option::of(address_like()), prefix in prop::option::of(-5i64..200),
        addresses in prop::option::of(prop::collection::vec(address_like(), 0..3)),
    ) {
        let rt = runtime();
        rt.block_on(async {
            let app = app().await;
            let spec = json!({"subnet": subnet, "start": start, "end": end, "prefix": prefix, "addresses": addresses});
            let object = json!({"apiVersion": "ipam.cluster.x-k8s.io/v1alpha1", "kind": "InClusterIPPool",
                "metadata": {"name": "p", "namespace": "n"}, "spec": spec});
            let body = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                "request": {"uid": "u", "desiredAPIVersion": "ipam.cluster.x-k8s.io/v1alpha2", "objects": [object]}});
            let (status, answer) = post(&app, CONVERT_PATH, body.to_string().into_bytes()).await;
            prop_assert_eq!(status, StatusCode::OK);
            let result = &answer["response"]["result"];
            if result["status"] == "Success" {
                // What comes back converts down and up again to the same hub object.
                let hub = answer["response"]["convertedObjects"][0].clone();
                let down = capi_ipam::api::conversion::convert(&hub, "ipam.cluster.x-k8s.io/v1alpha1").expect("down");
                let up = capi_ipam::api::conversion::convert(&down, "ipam.cluster.x-k8s.io/v1alpha2").expect("up");
                prop_assert_eq!(up, hub);
            } else {
                let message = result["message"].as_str().unwrap_or_default();
                prop_assert!(message.contains(": spec."), "the message names the field: {}", message);
            }
            Ok(())
        })?;
    }
}
