//! docs/compatibility.md D17: a claim of one of our pool kinds gets admission warnings when it is created, from our
//! webhook registered over TLS beside the real Cluster API manager's own claim webhook. The claim is admitted whatever
//! they say, claims of other providers' pools never reach us, and a webhook that cannot be reached blocks nothing.

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};
use support::claims::{Capi, create_pool};
use support::{TestEnv, unique_name};

const GROUP: &str = "ipam.cluster.x-k8s.io";
const REQUESTED: &str = "ipam.cluster.x-k8s.io/requested-address";

/// A claim of `version` on `pool_ref`, asking for `requested` when given.
fn claim(namespace: &str, name: &str, version: &str, pool_ref: Value, requested: Option<&str>) -> Value {
    let mut claim = json!({"apiVersion": format!("{GROUP}/{version}"), "kind": "IPAddressClaim",
        "metadata": {"name": name, "namespace": namespace}, "spec": {"poolRef": pool_ref}});
    if let Some(requested) = requested {
        claim["metadata"]["annotations"] = json!({ REQUESTED: requested });
    }
    claim
}

fn ours(kind: &str, name: &str) -> Value {
    json!({"apiGroup": GROUP, "kind": kind, "name": name})
}

/// Creates `object` with kubectl and returns the warnings the API server passed on (kubectl prints them on stderr).
fn create_with_warnings(env: &TestEnv, object: &Value) -> Vec<String> {
    let out = env.plane.kubectl_stdin(&["create", "-f", "-"], &object.to_string());
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{} was refused: {stderr}", object["metadata"]["name"]);
    // Cluster API's own warnings (a deprecated claim version) are not ours.
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("Warning: "))
        .filter(|w| !w.contains(" is deprecated"))
        .map(str::to_owned)
        .collect()
}

fn assert_one_warning(warnings: &[String], parts: &[&str]) {
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    for part in parts {
        assert!(warnings[0].contains(part), "{:?} lacks {part:?}", warnings[0]);
    }
}

#[tokio::test]
async fn a_claim_of_a_pool_that_does_not_exist_is_admitted_with_a_warning_in_every_claim_version() {
    let env = TestEnv::with_manager("no-pool").await;
    let ns = env.namespace.clone();
    for version in ["v1beta1", "v1beta2"] {
        let name = format!("c-{version}");
        let warnings = create_with_warnings(&env, &claim(&ns, &name, version, ours("InClusterIPPool", "nope"), None));
        assert_one_warning(
            &warnings,
            &[&format!("spec.poolRef: InClusterIPPool \"nope\" in namespace \"{ns}\" does not exist"), "waits"],
        );
        Capi::V1Beta2.claims(&env.client, &ns).get(&name).await.expect("the claim was admitted");
    }
    let global = unique_name("nope");
    let warnings =
        create_with_warnings(&env, &claim(&ns, "g", "v1beta2", ours("GlobalInClusterIPPool", &global), None));
    assert_one_warning(&warnings, &[&format!("spec.poolRef: GlobalInClusterIPPool \"{global}\" does not exist")]);
    // Another provider's pool: the match condition keeps the API server from calling us at all.
    let metal3 = json!({"apiGroup": "ipam.metal3.io", "kind": "IPPool", "name": "nope"});
    assert_eq!(create_with_warnings(&env, &claim(&ns, "m", "v1beta2", metal3, None)), Vec::<String>::new());
}

#[tokio::test]
async fn a_requested_address_the_pool_will_not_hand_out_is_said_when_the_claim_is_created() {
    let env = TestEnv::with_manager("requested").await;
    let (c, ns) = (&env.client, env.namespace.clone());
    create_pool(
        c,
        "InClusterIPPool",
        &ns,
        "pool",
        json!({"addresses": ["10.77.0.1-10.77.0.20"], "prefix": 24, "gateway": "10.77.0.1",
               "preAllocations": {"pinned": "10.77.0.15"}}),
    )
    .await;
    let pool = ours("InClusterIPPool", "pool");
    let ask = |name: &str, requested: &str| claim(&ns, name, "v1beta2", pool.clone(), Some(requested));
    assert_eq!(create_with_warnings(&env, &ask("first", "10.77.0.12")), Vec::<String>::new());
    Capi::V1Beta2.wait_bound(c, &ns, "first").await;
    let field = format!("metadata.annotations[{REQUESTED}]");
    let cases = [
        ("outside", "10.77.0.50", "\"10.77.0.50\" is not in the pool's addresses".to_owned()),
        ("gateway", "10.77.0.1", "\"10.77.0.1\" is the pool's gateway".to_owned()),
        ("typo", "10.77.0.300", "\"10.77.0.300\" is not an IP address".to_owned()),
        (
            "another",
            "10.77.0.15",
            "\"10.77.0.15\" is pinned to another claim by the pool's spec.preAllocations[pinned]".to_owned(),
        ),
        (
            "pinned",
            "10.77.0.16",
            "\"10.77.0.16\" differs from 10.77.0.15, which the pool's spec.preAllocations pins to this claim"
                .to_owned(),
        ),
    ];
    for (name, requested, finding) in cases {
        let warnings = create_with_warnings(&env, &ask(name, requested));
        assert_one_warning(&warnings, &[&format!("{field}: {finding}"), "the claim waits until"]);
    }
    // The warnings were only words: each claim was admitted, and waits as its condition says.
    let claims = Capi::V1Beta2.claims(c, &ns);
    for name in ["outside", "gateway", "typo", "another", "pinned"] {
        claims.get(name).await.unwrap_or_else(|e| panic!("{name} was admitted: {e}"));
    }
    // A pool of a shard another manager serves: the claim without the pool's label is told whose it is.
    let sharded = json!({"apiVersion": format!("{GROUP}/v1alpha2"), "kind": "InClusterIPPool",
        "metadata": {"name": "sharded", "namespace": ns, "labels": {"cluster.x-k8s.io/watch-filter": "shard-x"}},
        "spec": {"addresses": ["10.78.0.10-10.78.0.20"], "prefix": 24}});
    create_with_warnings(&env, &sharded);
    let warnings =
        create_with_warnings(&env, &claim(&ns, "unlabelled", "v1beta2", ours("InClusterIPPool", "sharded"), None));
    assert_one_warning(
        &warnings,
        &["metadata.labels[cluster.x-k8s.io/watch-filter]", "--watch-filter=shard-x", "label the claim"],
    );
}

/// The claim webhook as we generate it, pointed at a port nobody listens on: the API server admits the claim, so a
/// provider whose webhook is down never stands between CAPV, CAPM3 or `clusterctl move` and their claims.
#[tokio::test]
async fn claims_are_admitted_when_the_warnings_webhook_cannot_be_reached() {
    let env = TestEnv::with_manager("fail-open").await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("a port").local_addr().expect("addr").port();
    let base = format!("https://127.0.0.1:{closed}");
    let (_, mut validating) = capi_ipam::webhooks::routes::webhook_configurations(
        ("unused", &unique_name("unreachable-claim-warnings")),
        &capi_ipam::webhooks::routes::Endpoint::Url { base: &base },
        None,
    );
    let path = capi_ipam::webhooks::routes::AdmissionRoute::ClaimWarnings.path();
    validating
        .webhooks
        .get_or_insert_default()
        .retain(|w| w.client_config.url.as_deref().is_some_and(|u| u.ends_with(&path)));
    assert_eq!(validating.webhooks.as_ref().map(Vec::len), Some(1), "the claim webhook is generated");
    let configs: Api<ValidatingWebhookConfiguration> = Api::all(env.client.clone());
    let name = validating.metadata.name.clone().expect("named");
    configs.create(&PostParams::default(), &validating).await.expect("registered");
    let created = env.plane.kubectl_stdin(
        &["create", "-f", "-"],
        &claim(&env.namespace, "through", "v1beta2", ours("InClusterIPPool", "pool"), None).to_string(),
    );
    configs.delete(&name, &DeleteParams::default()).await.expect("unregistered");
    assert!(created.status.success(), "refused: {}", String::from_utf8_lossy(&created.stderr));
}
