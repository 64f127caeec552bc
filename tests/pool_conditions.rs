//! Pools say when they run out (docs/compatibility.md D18), against the real API server with the real Cluster API
//! manager: the `AddressesAvailable` condition follows the free count at the threshold the pool's annotation sets, each
//! change is an Event on the pool (a global pool's in the `default` namespace), and the manager's gauges say the same.

use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};
use support::claims::{Capi, annotate, create_pool, pools};
use support::{TestEnv, eventually, shared_manager, unique_name};

const CAPI: Capi = Capi::V1Beta2;
const NEARLY_EXHAUSTED_AT: &str = "ipam.cluster.x-k8s.io/nearly-exhausted-at";

/// Waits until the pool's condition `type_` has `reason`, and returns it.
async fn wait_condition(env: &TestEnv, kind: &str, name: &str, type_: &str, reason: &str) -> Value {
    wait_condition_where(env, kind, name, &format!("{type_} {reason}"), |c| c["type"] == type_ && c["reason"] == reason)
        .await
}

/// Waits until one of the pool's conditions is as `wanted` says (`what`, for the timeout's message), and returns it.
async fn wait_condition_where(
    env: &TestEnv,
    kind: &str,
    name: &str,
    what: &str,
    wanted: impl Fn(&Value) -> bool,
) -> Value {
    let api = pools(&env.client, kind, &env.namespace);
    eventually(Duration::from_secs(30), &format!("{kind} {name}: {what}"), || async {
        let pool = api.get(name).await.ok()?;
        let conditions = pool.data.pointer("/status/conditions")?.as_array()?.clone();
        conditions.into_iter().find(|c| wanted(c))
    })
    .await
}

/// The Events about the pool `name` in `namespace`, oldest first, as (type, reason).
async fn pool_events(env: &TestEnv, namespace: &str, kind: &str, name: &str) -> Vec<(String, String)> {
    let events: Api<Event> = Api::namespaced(env.client.clone(), namespace);
    let mut list: Vec<Event> = events.list(&ListParams::default()).await.expect("events").items;
    list.retain(|e| {
        e.regarding.as_ref().is_some_and(|r| r.kind.as_deref() == Some(kind) && r.name.as_deref() == Some(name))
    });
    list.sort_by_key(|e| e.event_time.as_ref().map(|t| t.0));
    list.into_iter().map(|e| (e.type_.unwrap_or_default(), e.reason.unwrap_or_default())).collect()
}

/// The value of the manager's gauge `family` for the pool, once it is `expected`.
async fn wait_gauge(family: &str, kind: &str, namespace: &str, name: &str, expected: &str) {
    let series = format!("{family}{{kind=\"{kind}\",namespace=\"{namespace}\",name=\"{name}\"}} ");
    eventually(Duration::from_secs(30), &format!("{series}{expected}"), || async {
        let scrape = shared_manager().metrics()?;
        scrape.lines().find_map(|l| l.strip_prefix(&series)).filter(|v| v.trim() == expected).map(|_| ())
    })
    .await;
}

#[tokio::test]
async fn a_pool_says_when_it_runs_out_with_a_condition_an_event_and_a_gauge() {
    let env = TestEnv::with_manager("runs-out").await;
    let (c, ns) = (&env.client, env.namespace.clone());
    let kind = "InClusterIPPool";
    create_pool(c, kind, &ns, "small", json!({"addresses": ["10.66.0.1-10.66.0.3"], "prefix": 24})).await;
    annotate(&pools(c, kind, &ns), "small", NEARLY_EXHAUSTED_AT, Some("1")).await;
    let ready = wait_condition(&env, kind, "small", "Ready", "Ready").await;
    assert_eq!(ready["status"], "True");
    wait_condition(&env, kind, "small", "AddressesAvailable", "Available").await;
    for (i, (status, reason)) in
        [("True", "Available"), ("True", "NearlyExhausted"), ("False", "Exhausted")].into_iter().enumerate()
    {
        let claim = format!("c{i}");
        CAPI.create_claim(c, &ns, &claim, kind, "small").await;
        CAPI.wait_bound(c, &ns, &claim).await;
        let condition = wait_condition(&env, kind, "small", "AddressesAvailable", reason).await;
        assert_eq!(condition["status"], status, "{condition}");
        if reason == "NearlyExhausted" {
            assert_eq!(condition["message"], "1 of 3 addresses free, at or below 1", "{condition}");
        }
    }
    wait_gauge("capi_ipam_pool_exhausted", kind, &ns, "small", "1").await;
    wait_gauge("capi_ipam_pool_nearly_exhausted", kind, &ns, "small", "0").await;
    wait_gauge("capi_ipam_pool_ready", kind, &ns, "small", "1").await;
    // One Event per change: none for the pool's first, good state.
    let said = eventually(Duration::from_secs(30), "the pool's Events", || async {
        let events = pool_events(&env, &ns, kind, "small").await;
        (events.len() >= 2).then_some(events)
    })
    .await;
    let expected =
        [("Warning", "NearlyExhausted"), ("Warning", "Exhausted")].map(|(t, r)| (t.to_owned(), r.to_owned()));
    assert_eq!(said, expected);
    // Two claims go: two addresses free, above the threshold, and the pool says it.
    CAPI.delete_claim(c, &ns, "c2").await;
    CAPI.delete_claim(c, &ns, "c1").await;
    wait_condition(&env, kind, "small", "AddressesAvailable", "Available").await;
    wait_gauge("capi_ipam_pool_exhausted", kind, &ns, "small", "0").await;
    let said = eventually(Duration::from_secs(30), "the pool's recovery Event", || async {
        let events = pool_events(&env, &ns, kind, "small").await;
        events.last().is_some_and(|(t, r)| t == "Normal" && r == "Available").then_some(events)
    })
    .await;
    assert!(said.len() <= 4, "one Event per change: {said:?}");

    // A global pool's Events go to the `default` namespace (it has none of its own).
    let global = unique_name("g");
    let gkind = "GlobalInClusterIPPool";
    create_pool(c, gkind, "", &global, json!({"addresses": ["10.67.0.1"], "prefix": 24})).await;
    CAPI.create_claim(c, &ns, "g0", gkind, &global).await;
    CAPI.wait_bound(c, &ns, "g0").await;
    wait_condition(&env, gkind, &global, "AddressesAvailable", "Exhausted").await;
    eventually(Duration::from_secs(30), "the global pool's Event in default", || async {
        let events = pool_events(&env, "default", gkind, &global).await;
        events.iter().any(|(t, r)| t == "Warning" && r == "Exhausted").then_some(())
    })
    .await;
    CAPI.delete_claim(c, &ns, "g0").await;
    let api = pools(c, gkind, "");
    let _ = api.delete(&global, &Default::default()).await;
}

/// A wrong threshold is said on the pool, and the default applies.
#[tokio::test]
async fn a_wrong_threshold_is_said_and_the_default_applies() {
    let env = TestEnv::with_manager("wrong-threshold").await;
    let (c, ns) = (&env.client, env.namespace.clone());
    let kind = "InClusterIPPool";
    create_pool(c, kind, &ns, "p", json!({"addresses": ["10.68.0.1-10.68.0.2"], "prefix": 24})).await;
    annotate(&pools(c, kind, &ns), "p", NEARLY_EXHAUSTED_AT, Some("ten")).await;
    let condition = wait_condition_where(&env, kind, "p", "the wrong annotation said", |c| {
        c["type"] == "AddressesAvailable" && c["message"].as_str().is_some_and(|m| m.contains("ten"))
    })
    .await;
    let message = condition["message"].as_str().unwrap_or_default();
    assert!(message.contains(&format!("annotation {NEARLY_EXHAUSTED_AT}: \"ten\" is neither")), "{message}");
    assert!(message.ends_with("the default 10% applies"), "{message}");
    // 10% of 2 is below one address: one address free is nearly exhausted.
    CAPI.create_claim(c, &ns, "c0", kind, "p").await;
    CAPI.wait_bound(c, &ns, "c0").await;
    wait_condition(&env, kind, "p", "AddressesAvailable", "NearlyExhausted").await;
}
