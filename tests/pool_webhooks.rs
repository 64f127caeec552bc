//! The pool API against the real API server with our webhooks registered over TLS: the Go provider's valid and
//! invalid scenarios (messages, field paths, warnings), defaulting, the update and delete guards, lossless
//! conversion between v1alpha1 and v1alpha2, and the printer columns of both versions.

use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde::Deserialize;
use serde_json::{Value, json};
use support::{TestEnv, unique_name};

const GROUP: &str = "ipam.cluster.x-k8s.io";
const IP_KINDS: [&str; 2] = ["InClusterIPPool", "GlobalInClusterIPPool"];
const PREFIX_KINDS: [&str; 2] = ["InClusterPrefixPool", "GlobalInClusterPrefixPool"];

fn is_global(kind: &str) -> bool {
    kind.starts_with("Global")
}

fn pools(env: &TestEnv, kind: &str, version: &str) -> Api<DynamicObject> {
    let r = support::resource(GROUP, version, kind);
    if is_global(kind) {
        Api::all_with(env.client.clone(), &r)
    } else {
        Api::namespaced_with(env.client.clone(), &env.namespace, &r)
    }
}

fn pool(kind: &str, version: &str, name: &str, spec: Value) -> DynamicObject {
    let mut p = DynamicObject::new(name, &support::resource(GROUP, version, kind));
    p.data = json!({ "spec": spec });
    p
}

async fn create(env: &TestEnv, kind: &str, name: &str, spec: Value) -> Result<DynamicObject, kube::Error> {
    pools(env, kind, "v1alpha2").create(&PostParams::default(), &pool(kind, "v1alpha2", name, spec)).await
}

/// Replaces the pool's spec (read-modify-write, retried when the controller wrote in between: its finalizer, status).
async fn update_spec(env: &TestEnv, kind: &str, name: &str, spec: Value) -> Result<DynamicObject, kube::Error> {
    let api = pools(env, kind, "v1alpha2");
    let mut attempts = 0;
    loop {
        let mut current = api.get(name).await.expect("the pool exists");
        current.data["spec"] = spec.clone();
        match api.replace(name, &PostParams::default(), &current).await {
            Err(kube::Error::Api(s)) if s.code == 409 && attempts < 10 => attempts += 1,
            other => return other,
        }
    }
}

/// Asserts an API error with `code` whose message contains `text` and whose causes name `field`.
fn assert_rejected(result: Result<DynamicObject, kube::Error>, code: u16, field: &str, text: &str) {
    let err = result.expect_err(&format!("expected a rejection naming {field}: {text}"));
    let kube::Error::Api(status) = err else { panic!("expected an API error, got {err:?}") };
    assert_eq!(status.code, code, "{status:?}");
    assert!(status.message.contains(text), "message {:?} lacks {text:?}", status.message);
    let causes = status.details.as_ref().map(|d| d.causes.clone()).unwrap_or_default();
    assert!(causes.iter().any(|c| c.field == field), "no cause names {field}: {causes:?} ({})", status.message);
}

fn ip_address(namespace: &str, name: &str, kind: &str, pool: &str, address: &str, prefix: i64) -> DynamicObject {
    let r = support::resource(GROUP, "v1beta2", "IPAddress");
    let mut a = DynamicObject::new(name, &r).within(namespace);
    a.data = json!({"spec": {
        "address": address, "prefix": prefix,
        "claimRef": {"name": name},
        "poolRef": {"apiGroup": GROUP, "kind": kind, "name": pool}
    }});
    a
}

fn addresses_api(env: &TestEnv) -> Api<DynamicObject> {
    let r = support::resource(GROUP, "v1beta2", "IPAddress");
    Api::namespaced_with(env.client.clone(), &env.namespace, &r)
}

#[tokio::test]
async fn invalid_ip_pools_are_rejected_with_the_go_messages_and_field_paths() {
    let env = TestEnv::with_manager("ip-invalid").await;
    let cases = [
        (json!({"addresses": [], "prefix": 24}), "spec.addresses", "addresses is required"),
        (
            json!({"addresses": ["10.0.0.1-10.0.0.0"], "prefix": 24}),
            "spec.addresses[0]",
            "provided address is not a valid IP, range, nor CIDR",
        ),
        (
            json!({"addresses": ["10.0.0.1/33"], "prefix": 24}),
            "spec.addresses[0]",
            "provided address is not a valid IP, range, nor CIDR",
        ),
        (
            json!({"addresses": ["nope"], "prefix": 24}),
            "spec.addresses[0]",
            "provided address is not a valid IP, range, nor CIDR",
        ),
        (
            json!({"addresses": ["10.0.0.1", "fd00::1"], "prefix": 24}),
            "spec.addresses",
            "provided addresses are of mixed IP families",
        ),
        (
            json!({"addresses": ["10.0.0.2"], "prefix": 24, "gateway": "invalid"}),
            "spec.gateway",
            "ParseAddr(\"invalid\"): unable to parse IP",
        ),
        (
            json!({"addresses": ["10.0.0.2"], "prefix": 24, "gateway": "fd00::1"}),
            "spec.gateway",
            "provided gateway and addresses are of mixed IP families",
        ),
        (
            json!({"addresses": ["10.0.0.2"], "prefix": 24, "excludedAddresses": ["x"]}),
            "spec.excludedAddresses[0]",
            "provided address is not a valid IP, range, nor CIDR",
        ),
        (
            json!({"addresses": ["10.0.0.2"], "prefix": 24, "excludedAddresses": ["10.0.0.3", "fd00::3"]}),
            "spec.excludedAddresses",
            "provided addresses are of mixed IP families",
        ),
        (
            json!({"addresses": ["10.0.0.2"], "prefix": 24, "excludedAddresses": ["fd00::3"]}),
            "spec.excludedAddresses",
            "addresses and excluded addresses are of mixed IP families",
        ),
        (json!({"addresses": ["10.0.0.2"], "prefix": 33}), "spec.prefix", "provided prefix is not valid"),
        (
            json!({"addresses": ["10.0.0.5", "10.0.1.5"], "prefix": 24}),
            "spec.addresses[1]",
            "provided address belongs to a different subnet than others",
        ),
        (
            json!({"addresses": ["10.0.0.5", "10.0.0.250-10.0.1.3"], "prefix": 24}),
            "spec.addresses[1]",
            "provided address belongs to a different subnet than others",
        ),
        (
            json!({"addresses": ["10.0.0.5", "10.0.0.0/23"], "prefix": 24}),
            "spec.addresses[1]",
            "provided address belongs to a different subnet than others",
        ),
        // D14: pre-allocations must be allocatable.
        (
            json!({"addresses": ["10.0.0.10-10.0.0.20"], "prefix": 24, "gateway": "10.0.0.12", "preAllocations": {"c": "10.0.0.12"}}),
            "spec.preAllocations[c]",
            "is the pool's gateway",
        ),
    ];
    for kind in IP_KINDS {
        for (i, (spec, field, text)) in cases.iter().enumerate() {
            let name = unique_name(&format!("bad{i}"));
            assert_rejected(create(&env, kind, &name, spec.clone()).await, 422, field, text);
        }
        // The same rules apply on update; a valid pool stays unchanged.
        let name = unique_name("upd");
        create(&env, kind, &name, json!({"addresses": ["10.0.0.10-10.0.0.20"], "prefix": 24}))
            .await
            .expect("valid pool");
        for (spec, field, text) in &cases {
            assert_rejected(update_spec(&env, kind, &name, spec.clone()).await, 422, field, text);
        }
        let stored = pools(&env, kind, "v1alpha2").get(&name).await.expect("get");
        assert_eq!(stored.data["spec"]["addresses"], json!(["10.0.0.10-10.0.0.20"]));
        pools(&env, kind, "v1alpha2").delete(&name, &DeleteParams::default()).await.expect("delete always passes");
    }
}

#[tokio::test]
async fn schema_bounds_are_enforced_by_the_api_server() {
    let env = TestEnv::with_manager("ip-schema").await;
    let err = create(&env, "InClusterIPPool", "too-long", json!({"addresses": ["10.0.0.1"], "prefix": 9999}))
        .await
        .expect_err("prefix 9999 exceeds the schema maximum");
    let kube::Error::Api(status) = err else { panic!("{err:?}") };
    assert_eq!(status.code, 422);
    assert!(status.message.contains("spec.prefix"), "{}", status.message);
    let err = create(
        &env,
        "InClusterIPPool",
        "neg",
        json!({"addresses": ["10.0.0.1"], "prefix": 24, "addressReuseGracePeriodSeconds": -1}),
    )
    .await
    .expect_err("negative grace period");
    assert!(err.to_string().contains("spec.addressReuseGracePeriodSeconds"), "{err}");
}

#[tokio::test]
async fn valid_ip_pools_are_accepted_and_a_missing_prefix_defaults_to_zero() {
    let env = TestEnv::with_manager("ip-valid").await;
    let valid = [
        json!({"addresses": ["10.0.0.1-10.0.0.100"], "prefix": 24, "gateway": "10.0.0.254"}),
        json!({"addresses": ["10.0.0.0/24", "10.0.0.3"], "prefix": 24}),
        json!({"addresses": ["fd00::1-fd00::ff"], "prefix": 64, "gateway": "fe80::1"}),
        json!({"addresses": ["fd00::/120"], "prefix": 120, "excludedAddresses": ["fd00::10-fd00::1f"]}),
        json!({"addresses": ["10.0.0.0/24"], "prefix": 24, "excludedAddresses": ["10.0.0.7"], "addressReuseGracePeriodSeconds": 30}),
        json!({"addresses": ["1.2.3.4", "200.1.1.1"], "prefix": 0}),
        json!({"addresses": ["10.0.0.0/31"], "prefix": 31, "allocateReservedIPAddresses": true}),
    ];
    for kind in IP_KINDS {
        for (i, spec) in valid.iter().enumerate() {
            let name = unique_name(&format!("ok{i}"));
            let created =
                create(&env, kind, &name, spec.clone()).await.unwrap_or_else(|e| panic!("{kind} {spec}: {e}"));
            assert_eq!(created.data["spec"]["addresses"], spec["addresses"]);
            update_spec(&env, kind, &name, spec.clone()).await.expect("an unchanged update passes");
            pools(&env, kind, "v1alpha2").delete(&name, &DeleteParams::default()).await.expect("delete");
        }
        let name = unique_name("noprefix");
        let created = create(&env, kind, &name, json!({"addresses": ["10.0.0.1"]})).await.expect("prefix omitted");
        assert_eq!(created.data["spec"]["prefix"], json!(0), "the defaulting webhook adds prefix 0");
    }
}

#[tokio::test]
async fn overlapping_pools_get_a_warning_naming_the_other_pool() {
    let env = TestEnv::with_manager("overlap").await;
    let a = unique_name("a");
    let b = unique_name("b");
    let manifest = |name: &str, range: &str| {
        json!({"apiVersion": format!("{GROUP}/v1alpha2"), "kind": "InClusterIPPool",
               "metadata": {"name": name, "namespace": env.namespace},
               "spec": {"addresses": [range], "prefix": 24}})
        .to_string()
    };
    let out = env.plane.kubectl_stdin(&["apply", "-f", "-"], &manifest(&a, "10.9.0.10-10.9.0.20"));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("Warning"), "no overlap yet");
    let out = env.plane.kubectl_stdin(&["apply", "-f", "-"], &manifest(&b, "10.9.0.18-10.9.0.30"));
    assert!(out.status.success(), "an overlap is only a warning by default");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("Warning: spec.addresses overlaps InClusterIPPool \"{a}\" (10.9.0.18-10.9.0.20)")),
        "{stderr}"
    );
}

/// docs/compatibility.md D12: the pools real charts apply (`gateway: 0.0.0.0`, a link-local or another subnet's
/// gateway) are admitted, as the Go provider admits them, with a warning that names the field, the value and the
/// subnet; a later update that leaves the gateway alone says nothing more.
#[tokio::test]
async fn a_gateway_outside_the_subnet_is_admitted_with_a_warning() {
    let env = TestEnv::with_manager("gateway").await;
    for (gateway, expected) in [
        ("0.0.0.0", "Warning: spec.gateway: \"0.0.0.0\" is the unspecified address"),
        ("169.254.0.254", "Warning: spec.gateway: \"169.254.0.254\" is not in the pool's subnet 10.9.2.0/24"),
    ] {
        let name = unique_name("gw");
        let manifest = |range: &str| {
            json!({"apiVersion": format!("{GROUP}/v1alpha2"), "kind": "GlobalInClusterIPPool",
                   "metadata": {"name": name},
                   "spec": {"addresses": [range], "prefix": 24, "gateway": gateway}})
            .to_string()
        };
        let out = env.plane.kubectl_stdin(&["apply", "-f", "-"], &manifest("10.9.2.10-10.9.2.20"));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{gateway}: refused: {stderr}");
        assert!(stderr.contains(expected), "{gateway}: {stderr}");
        let out = env.plane.kubectl_stdin(&["apply", "-f", "-"], &manifest("10.9.2.10-10.9.2.30"));
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(!String::from_utf8_lossy(&out.stderr).contains("Warning"), "the gateway did not change");
        let stored = pools(&env, "GlobalInClusterIPPool", "v1alpha2").get(&name).await.expect("get");
        assert_eq!(stored.data["spec"]["gateway"], json!(gateway), "stored as written");
        // The IPAddress carries the gateway as the Go provider writes it, and Cluster API's webhook takes it.
        let capi = support::claims::Capi::V1Beta2;
        capi.create_claim(&env.client, &env.namespace, &name, "GlobalInClusterIPPool", &name).await;
        let address = capi.wait_bound(&env.client, &env.namespace, &name).await;
        assert_eq!(address.data["spec"]["gateway"], json!(gateway), "{:?}", address.data);
        assert_eq!(address.data["spec"]["address"], json!("10.9.2.10"), "{:?}", address.data);
        capi.delete_claim(&env.client, &env.namespace, &name).await;
        let pool_api = pools(&env, "GlobalInClusterIPPool", "v1alpha2");
        support::eventually(
            std::time::Duration::from_secs(30),
            "the pool deleted once its address is released",
            || {
                let pool_api = pool_api.clone();
                let name = name.clone();
                async move { pool_api.delete(&name, &DeleteParams::default()).await.ok() }
            },
        )
        .await;
    }
}

#[tokio::test]
async fn the_update_guard_keeps_allocated_addresses_allocatable() {
    let env = TestEnv::with_manager("guard").await;
    for kind in IP_KINDS {
        let name = unique_name("pool");
        create(
            &env,
            kind,
            &name,
            json!({"addresses": ["10.0.0.10-10.0.0.20"], "prefix": 24, "allocateReservedIPAddresses": true}),
        )
        .await
        .expect("pool");
        let addr = ip_address(&env.namespace, &unique_name("addr"), kind, &name, "10.0.0.10", 24);
        addresses_api(&env).create(&PostParams::default(), &addr).await.expect("IPAddress");
        let stranded = "pool addresses do not contain allocated addresses: [10.0.0.10-10.0.0.10]";
        let cases = [
            json!({"addresses": ["10.0.0.15-10.0.0.20"], "prefix": 24, "allocateReservedIPAddresses": true}),
            json!({"addresses": ["10.0.0.10-10.0.0.20"], "prefix": 24, "allocateReservedIPAddresses": true, "excludedAddresses": ["10.0.0.10"]}),
            json!({"addresses": ["10.0.0.10-10.0.0.20"], "prefix": 24, "allocateReservedIPAddresses": true, "gateway": "10.0.0.10"}),
        ];
        for spec in cases {
            assert_rejected(update_spec(&env, kind, &name, spec).await, 400, "spec.addresses", stranded);
        }
        update_spec(&env, kind, &name, json!({"addresses": ["10.0.0.10-10.0.0.30"], "prefix": 24}))
            .await
            .expect("growing is fine");
    }
}

/// docs/compatibility.md D19 through the real API server and our webhook over TLS: each entry of `spec.subnets` is
/// judged with its own field path, an edit may reorder subnets but not take away one whose address is in use, and a
/// subnet's gateway outside its network is a warning naming the entry.
#[tokio::test]
async fn a_pool_of_several_subnets_is_judged_entry_by_entry_and_keeps_its_addresses_in_use() {
    let env = TestEnv::with_manager("subnets").await;
    let first = json!({"addresses": ["10.8.0.10-10.8.0.20"], "prefix": 24, "gateway": "10.8.0.1"});
    let with = |subnets: Value| {
        let mut spec = first.clone();
        spec["subnets"] = subnets;
        spec
    };
    let second = json!({"addresses": ["10.8.1.10-10.8.1.20"], "prefix": 25, "gateway": "10.8.1.1"});
    let third = json!({"addresses": ["10.8.2.10"], "prefix": 24});
    for kind in IP_KINDS {
        let name = unique_name("subnets");
        let sharing = with(json!([{"addresses": ["10.8.0.20-10.8.0.21"], "prefix": 24}]));
        assert_rejected(
            create(&env, kind, &name, sharing).await,
            422,
            "spec.subnets[0].addresses",
            "address 10.8.0.20 is in spec.addresses too",
        );
        let bad_gateway = with(json!([second, {"addresses": ["10.8.2.10"], "prefix": 24, "gateway": "fd00::1"}]));
        assert_rejected(
            create(&env, kind, &name, bad_gateway).await,
            422,
            "spec.subnets[1].gateway",
            "provided gateway and addresses are of mixed IP families",
        );
        create(&env, kind, &name, with(json!([second, third]))).await.expect("a pool of three subnets");
        let addr = ip_address(&env.namespace, &unique_name("addr"), kind, &name, "10.8.1.10", 25);
        addresses_api(&env).create(&PostParams::default(), &addr).await.expect("IPAddress");
        assert_rejected(
            update_spec(&env, kind, &name, with(json!([third]))).await,
            400,
            "spec.addresses",
            "pool addresses do not contain allocated addresses: [10.8.1.10-10.8.1.10]",
        );
        update_spec(&env, kind, &name, with(json!([third, second]))).await.expect("reordered");
        let namespace = format!("--namespace={}", env.namespace);
        let resource = kind.to_lowercase();
        let mut args = vec!["patch", &resource, &name, "--type=json", "-p"];
        let patch = r#"[{"op": "add", "path": "/spec/subnets/0/gateway", "value": "10.9.9.1"}]"#;
        args.push(patch);
        if !is_global(kind) {
            args.push(&namespace);
        }
        let out = env.plane.kubectl_output(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(
            stderr.contains("Warning: spec.subnets[0].gateway: \"10.9.9.1\" is not in the pool's subnet 10.8.2.0/24"),
            "{stderr}"
        );
    }
}

/// Claims of a pool of two subnets: the first subnet's one address, then the second's, each IPAddress with its own
/// subnet's prefix and gateway, which Cluster API's webhook takes.
#[tokio::test]
async fn claims_get_the_second_subnet_with_its_prefix_and_gateway_once_the_first_is_full() {
    let env = TestEnv::with_manager("subnets-claims").await;
    let name = unique_name("two");
    let spec = json!({
        "addresses": ["10.8.3.10"], "prefix": 24, "gateway": "10.8.3.1",
        "subnets": [{"addresses": ["10.8.4.10"], "prefix": 26, "gateway": "10.8.4.1"}]
    });
    create(&env, "GlobalInClusterIPPool", &name, spec).await.expect("pool");
    let capi = support::claims::Capi::V1Beta2;
    let mut got = Vec::new();
    for claim in ["first", "second"] {
        capi.create_claim(&env.client, &env.namespace, claim, "GlobalInClusterIPPool", &name).await;
        let address = capi.wait_bound(&env.client, &env.namespace, claim).await;
        let spec = &address.data["spec"];
        got.push((spec["address"].clone(), spec["prefix"].clone(), spec["gateway"].clone()));
    }
    assert_eq!(
        got,
        [(json!("10.8.3.10"), json!(24), json!("10.8.3.1")), (json!("10.8.4.10"), json!(26), json!("10.8.4.1")),]
    );
}

/// docs/compatibility.md D20 through the real API server and our webhook over TLS: Metal3's two rules for Random (a
/// subnet too large, a change to or from it), the enum's spelling, and a change between the other two admitted.
#[tokio::test]
async fn allocation_strategies_are_judged_as_metal3_judges_random_and_the_others_may_change() {
    let env = TestEnv::with_manager("strategies").await;
    let v6 = |prefix: u8, strategy: &str| json!({"addresses": [format!("fd08::/{prefix}")], "prefix": prefix, "allocationStrategy": strategy});
    for kind in IP_KINDS {
        assert_rejected(
            create(&env, kind, &unique_name("huge"), v6(64, "Random")).await,
            422,
            "spec.allocationStrategy",
            "spec.allocationStrategy: Invalid value: \"Random\": cannot be used with a subnet of more than 2^63 - 1 \
             addresses: spec.addresses has 18446744073709551615",
        );
        // Metal3 spells it in lower case; the schema names the values it takes.
        assert_rejected(
            create(&env, kind, &unique_name("lower"), v6(120, "random")).await,
            422,
            "spec.allocationStrategy",
            "supported values: \"Sequential\", \"Random\", \"LeastRecentlyReleased\"",
        );
        let random = unique_name("random");
        create(&env, kind, &random, v6(65, "Random")).await.expect("a /65 holds 2^63 - 1 addresses: admitted");
        for (to, shown) in
            [(v6(65, "Sequential"), "Sequential"), (json!({"addresses": ["fd08::/65"], "prefix": 65}), "Sequential")]
        {
            assert_rejected(
                update_spec(&env, kind, &random, to).await,
                422,
                "spec.allocationStrategy",
                &format!("cannot be changed from \"Random\" to \"{shown}\" after creation"),
            );
        }
        let other = unique_name("other");
        create(&env, kind, &other, json!({"addresses": ["10.8.6.0/24"], "prefix": 24})).await.expect("sequential");
        update_spec(
            &env,
            kind,
            &other,
            json!({"addresses": ["10.8.6.0/24"], "prefix": 24, "allocationStrategy": "LeastRecentlyReleased"}),
        )
        .await
        .expect("Sequential → LeastRecentlyReleased: only the order of what comes next changes");
        assert_rejected(
            update_spec(
                &env,
                kind,
                &other,
                json!({"addresses": ["10.8.6.0/24"], "prefix": 24, "allocationStrategy": "Random"}),
            )
            .await,
            422,
            "spec.allocationStrategy",
            "cannot be changed from \"LeastRecentlyReleased\" to \"Random\" after creation",
        );
    }
}

/// Claims through the real Cluster API and our manager: a LeastRecentlyReleased pool hands out its never-used
/// addresses before the one a deleted claim released (Sequential would hand that one back at once), and a Random pool
/// hands out distinct addresses of its range in no fixed order.
#[tokio::test]
async fn claims_get_addresses_in_each_strategys_order() {
    let env = TestEnv::with_manager("strategy-claims").await;
    let capi = support::claims::Capi::V1Beta2;
    let kind = "GlobalInClusterIPPool";
    let lrr = unique_name("lrr");
    let spec =
        json!({"addresses": ["10.8.5.10-10.8.5.13"], "prefix": 24, "allocationStrategy": "LeastRecentlyReleased"});
    create(&env, kind, &lrr, spec).await.expect("pool");
    let bind = async |claim: &str, pool: &str| {
        capi.create_claim(&env.client, &env.namespace, claim, kind, pool).await;
        support::claims::address_of(&capi.wait_bound(&env.client, &env.namespace, claim).await)
    };
    assert_eq!([bind("a", &lrr).await, bind("b", &lrr).await], ["10.8.5.10", "10.8.5.11"]);
    capi.delete_claim(&env.client, &env.namespace, "a").await;
    support::claims::wait_pool_counts(&env.client, kind, "", &lrr, (4, 1, 3, 0)).await;
    let next = [bind("c", &lrr).await, bind("d", &lrr).await, bind("e", &lrr).await];
    assert_eq!(next, ["10.8.5.12", "10.8.5.13", "10.8.5.10"], "never-used addresses first, then the released one");

    let random = unique_name("random");
    create(&env, kind, &random, json!({"addresses": ["10.8.7.0/24"], "prefix": 24, "allocationStrategy": "Random"}))
        .await
        .expect("pool");
    let mut got = Vec::new();
    for i in 0..6 {
        got.push(bind(&format!("r{i}"), &random).await);
    }
    let distinct: std::collections::HashSet<&String> = got.iter().collect();
    assert_eq!(distinct.len(), 6, "{got:?}");
    assert!(got.iter().all(|a| a.starts_with("10.8.7.") && a != "10.8.7.0" && a != "10.8.7.255"), "{got:?}");
    let sequential: Vec<String> = (1..=6).map(|i| format!("10.8.7.{i}")).collect();
    assert_ne!(got, sequential, "six draws of 254 addresses that come out lowest first: not random");
}

/// Per-Cluster quotas through the real Cluster API and our manager (docs/compatibility.md D21): a burst of claims of
/// one Cluster binds its quota and no more, the rest wait saying QuotaExceeded and are bound the moment the Cluster
/// holds fewer, a Cluster the quota names has its own, and the pool's status counts what each Cluster holds.
#[tokio::test]
async fn a_clusters_claims_beyond_its_quota_wait_until_it_holds_fewer() {
    let env = TestEnv::with_manager("quota-claims").await;
    let capi = support::claims::Capi::V1Beta2;
    let (kind, ns) = ("GlobalInClusterIPPool", env.namespace.clone());
    for cluster in ["small", "big"] {
        capi.create_cluster(&env.client, &ns, cluster, false, false).await;
    }
    let pool = unique_name("quota");
    let spec = json!({"addresses": ["10.8.9.10-10.8.9.29"], "prefix": 24,
                      "quota": {"perCluster": 2, "clusters": {format!("{ns}/big"): 3}}});
    create(&env, kind, &pool, spec.clone()).await.expect("pool");
    let claims = capi.claims(&env.client, &ns);
    let claim_of = |name: String, cluster: &str| {
        let mut c = capi.claim(&name, kind, &pool);
        c.data["spec"]["clusterName"] = json!(cluster);
        c
    };
    // Five claims of each Cluster at once: the quota is checked in the step that holds, so no burst gets past it.
    let burst =
        ["small", "big"].into_iter().flat_map(|cluster| (0..5).map(move |i| (cluster, format!("{cluster}-{i}"))));
    futures::future::join_all(burst.map(|(cluster, name)| {
        let (claims, claim) = (claims.clone(), claim_of(name, cluster));
        async move { claims.create(&PostParams::default(), &claim).await.expect("claim") }
    }))
    .await;
    // The names of the claims of `cluster` bound, once `expected` of them are and `waiting` others wait.
    let bound_of = async |cluster: &str, expected: usize, waiting: usize| {
        support::eventually(
            std::time::Duration::from_secs(30),
            &format!("{expected} claims of {cluster} bound"),
            || async {
                let list = claims.list(&Default::default()).await.ok()?;
                let bound: Vec<String> = list
                    .items
                    .iter()
                    .filter(|c| {
                        c.data["spec"]["clusterName"] == cluster && c.data.pointer("/status/addressRef/name").is_some()
                    })
                    .filter_map(|c| c.metadata.name.clone())
                    .collect();
                let unbound =
                    list.items.iter().filter(|c| c.data["spec"]["clusterName"] == cluster).count() - bound.len();
                (bound.len() == expected && unbound == waiting).then_some(bound)
            },
        )
        .await
    };
    let small = bound_of("small", 2, 3).await;
    bound_of("big", 3, 2).await;
    let waiting = (0..5).map(|i| format!("small-{i}")).find(|n| !small.contains(n)).expect("a waiting claim");
    let ready = capi.wait_reason(&env.client, &ns, &waiting, "QuotaExceeded").await;
    assert_eq!(ready["status"], "False");
    let message = ready["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!("Cluster {ns}/small holds 2 address(es)")) && message.contains("quota of 2"),
        "{message}"
    );
    // The pool's status counts what each Cluster holds, the most first.
    let usage = json!({"clusters": 2, "atQuota": 2, "withoutCluster": 0, "top": [
        {"cluster": format!("{ns}/big"), "used": 3, "quota": 3},
        {"cluster": format!("{ns}/small"), "used": 2, "quota": 2}]});
    let pools_api = pools(&env, kind, "v1alpha2");
    support::eventually(std::time::Duration::from_secs(30), "the pool's clusterUsage", || async {
        let p = pools_api.get(&pool).await.ok()?;
        (p.data.pointer("/status/clusterUsage") == Some(&usage)).then_some(())
    })
    .await;
    // small lets go of one: one of its waiting claims is bound at once, and small holds its quota again.
    capi.delete_claim(&env.client, &ns, &small[0]).await;
    bound_of("small", 2, 2).await;
    // The quota goes: every waiting claim is bound, and the status says no usage.
    let mut without = spec.clone();
    without.as_object_mut().expect("a spec").remove("quota");
    update_spec(&env, kind, &pool, without).await.expect("the quota taken away");
    support::eventually(std::time::Duration::from_secs(30), "every claim bound", || async {
        let list = claims.list(&Default::default()).await.ok()?;
        list.items.iter().all(|c| c.data.pointer("/status/addressRef/name").is_some()).then_some(())
    })
    .await;
    support::eventually(std::time::Duration::from_secs(30), "no clusterUsage without a quota", || async {
        let p = pools_api.get(&pool).await.ok()?;
        p.data.pointer("/status/clusterUsage").is_none().then_some(())
    })
    .await;
}

/// The webhook names the quota's field and value: a Cluster is `namespace/name`, of the pool's namespace for a
/// namespaced pool, and no quota is negative. A pool admitted keeps its metadata writable.
#[tokio::test]
async fn quotas_are_judged_by_the_webhook() {
    let env = TestEnv::with_manager("quota-webhook").await;
    let ns = env.namespace.clone();
    let base = |quota: Value| json!({"addresses": ["10.8.10.10-10.8.10.20"], "prefix": 24, "quota": quota});
    let global = "GlobalInClusterIPPool";
    assert_rejected(
        create(&env, global, &unique_name("q"), base(json!({"clusters": {"web": 2}}))).await,
        422,
        "spec.quota.clusters[web]",
        "must be <namespace>/<name> of a Cluster",
    );
    assert_rejected(
        create(&env, global, &unique_name("q"), base(json!({"clusters": {format!("{ns}/web"): -1}}))).await,
        422,
        &format!("spec.quota.clusters[{ns}/web]"),
        "must not be negative",
    );
    // The schema refuses a negative perCluster before the webhook sees it.
    let negative = create(&env, global, &unique_name("q"), base(json!({"perCluster": -1}))).await;
    let kube::Error::Api(status) = negative.expect_err("a negative perCluster") else { panic!("an API error") };
    assert!(status.message.contains("spec.quota.perCluster"), "{}", status.message);
    assert_rejected(
        create(&env, "InClusterIPPool", &unique_name("q"), base(json!({"clusters": {"elsewhere/web": 1}}))).await,
        422,
        "spec.quota.clusters[elsewhere/web]",
        &format!("the pool is in namespace \"{ns}\""),
    );
    let name = unique_name("q");
    create(&env, "InClusterIPPool", &name, base(json!({"perCluster": 0, "clusters": {format!("{ns}/web"): 4}})))
        .await
        .expect("a valid quota");
    let api = pools(&env, "InClusterIPPool", "v1alpha2");
    support::claims::annotate(&api, &name, "team", Some("net")).await;
}

#[tokio::test]
async fn the_delete_guard_honours_both_skip_annotations() {
    let env = TestEnv::with_manager("delete").await;
    for kind in IP_KINDS.into_iter().chain(PREFIX_KINDS) {
        let prefix_pool = kind.contains("Prefix");
        let spec = if prefix_pool {
            json!({"prefixes": ["fd00::/56"], "allocationPrefixLength": 64})
        } else {
            json!({"addresses": ["10.0.0.10-10.0.0.20"], "prefix": 24})
        };
        let address = if prefix_pool { "fd00::" } else { "10.0.0.10" };
        let api = pools(&env, kind, "v1alpha2");
        for annotation in [
            None,
            Some("ipam.cluster.x-k8s.io/skip-validate-delete-webhook"),
            Some("clusterctl.cluster.x-k8s.io/delete-for-move"),
        ] {
            let name = unique_name("pool");
            create(&env, kind, &name, spec.clone()).await.expect("pool");
            let addr_name = unique_name("addr");
            addresses_api(&env)
                .create(
                    &PostParams::default(),
                    &ip_address(&env.namespace, &addr_name, kind, &name, address, if prefix_pool { 64 } else { 24 }),
                )
                .await
                .expect("IPAddress");
            match annotation {
                None => {
                    let err = api.delete(&name, &DeleteParams::default()).await.expect_err("addresses are allocated");
                    let kube::Error::Api(status) = err else { panic!("{err:?}") };
                    assert_eq!(status.code, 400);
                    assert!(status.message.contains(
                        "Pool has IPAddresses allocated. Cannot delete Pool until all IPAddresses have been removed."
                    ), "{}", status.message);
                    addresses_api(&env).delete(&addr_name, &DeleteParams::default()).await.expect("delete IPAddress");
                    api.delete(&name, &DeleteParams::default()).await.expect("no addresses left: the delete passes");
                }
                Some(key) => {
                    let patch = json!({"metadata": {"annotations": {key: ""}}});
                    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await.expect("annotate");
                    api.delete(&name, &DeleteParams::default()).await.unwrap_or_else(|e| panic!("{kind} {key}: {e}"));
                }
            }
        }
    }
}

#[tokio::test]
async fn invalid_prefix_pools_are_rejected() {
    let env = TestEnv::with_manager("prefix-invalid").await;
    let cases = [
        (json!({"prefixes": []}), "spec.prefixes", "prefixes is required"),
        (json!({"prefixes": ["fd00::1"]}), "spec.prefixes[0]", "provided entry is not a valid IPv6 CIDR"),
        (json!({"prefixes": ["fd00::1/64"]}), "spec.prefixes[0]", "CIDR must be network-aligned"),
        (
            json!({"prefixes": ["fd00::/65"]}),
            "spec.prefixes[0]",
            "CIDR prefix length must be <= allocationPrefixLength (64)",
        ),
        (json!({"prefixes": ["10.0.0.0/8"]}), "spec.prefixes[0]", "only IPv6 prefixes are supported"),
        (json!({"prefixes": ["fd00::/48"], "gateway": "10.0.0.1"}), "spec.gateway", "provided gateway must be IPv6"),
        (
            json!({"prefixes": ["fd00::/48"], "excludedPrefixes": ["10.0.0.1"]}),
            "spec.excludedPrefixes[0]",
            "only IPv6 excluded prefixes are supported",
        ),
    ];
    for kind in PREFIX_KINDS {
        for (i, (spec, field, text)) in cases.iter().enumerate() {
            assert_rejected(create(&env, kind, &unique_name(&format!("bad{i}")), spec.clone()).await, 422, field, text);
        }
        for len in [56, 96, 128, 64] {
            let spec = json!({"prefixes": ["fd00::/48", "fd01::/48"], "allocationPrefixLength": len});
            create(&env, kind, &unique_name("ok"), spec).await.expect("valid prefix pool");
        }
        let created =
            create(&env, kind, &unique_name("dflt"), json!({"prefixes": ["fd02::/48"]})).await.expect("default");
        assert_eq!(created.data["spec"]["allocationPrefixLength"], json!(64));
    }
}

#[tokio::test]
async fn prefix_pool_updates_keep_allocations_valid() {
    let env = TestEnv::with_manager("prefix-update").await;
    for kind in PREFIX_KINDS {
        let name = unique_name("pp");
        create(&env, kind, &name, json!({"prefixes": ["fd01::/62"]})).await.expect("pool");
        addresses_api(&env)
            .create(&PostParams::default(), &ip_address(&env.namespace, &unique_name("a"), kind, &name, "fd01::", 64))
            .await
            .expect("allocation");
        assert_rejected(
            update_spec(&env, kind, &name, json!({"prefixes": ["fd01::/62"], "allocationPrefixLength": 63})).await,
            400,
            "spec.allocationPrefixLength",
            "spec.allocationPrefixLength is immutable",
        );
        assert_rejected(
            update_spec(&env, kind, &name, json!({"prefixes": ["fd01:0:0:1::/64"]})).await,
            400,
            "spec.prefixes",
            "existing allocations become non-allocatable: [fd01::]",
        );
        assert_rejected(
            update_spec(&env, kind, &name, json!({"prefixes": ["fd01::/62"], "excludedPrefixes": ["fd01::/64"]})).await,
            400,
            "spec.prefixes",
            "existing allocations become non-allocatable: [fd01::]",
        );
        update_spec(
            &env,
            kind,
            &name,
            json!({"prefixes": ["fd01::/62"], "excludedPrefixes": ["fd01:0:0:3::/64"], "gateway": "fd01::1"}),
        )
        .await
        .expect("exclusions and gateway that keep the allocation valid");
    }
}

#[tokio::test]
async fn prefix_pool_warnings_for_128() {
    let env = TestEnv::with_manager("prefix-warn").await;
    let apply = |name: &str, gateway: Option<&str>| {
        let mut spec = json!({"prefixes": ["fd00::/120"], "allocationPrefixLength": 128});
        if let Some(g) = gateway {
            spec["gateway"] = json!(g);
        }
        let manifest = json!({"apiVersion": format!("{GROUP}/v1alpha2"), "kind": "InClusterPrefixPool",
            "metadata": {"name": name, "namespace": env.namespace}, "spec": spec});
        let out = env.plane.kubectl_stdin(&["apply", "-f", "-"], &manifest.to_string());
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let host = "spec.allocationPrefixLength=128 behaves like host-address allocation";
    let gw = "spec.gateway is within spec.prefixes and is not reserved";
    let w = apply(&unique_name("inside"), Some("fd00::1"));
    assert!(w.contains(host) && w.contains(gw), "{w}");
    let w = apply(&unique_name("outside"), Some("fd01::1"));
    assert!(w.contains(host) && !w.contains(gw), "{w}");
    let w = apply(&unique_name("none"), None);
    assert!(w.contains(host) && !w.contains(gw), "{w}");
}

#[tokio::test]
async fn a_v1alpha1_pool_reads_as_v1alpha2_and_back() {
    let env = TestEnv::with_manager("conv-up").await;
    for kind in IP_KINDS {
        let name = unique_name("v1");
        let spec = json!({"subnet": "10.5.0.0/24", "start": "10.5.0.10", "end": "10.5.0.20", "gateway": "10.5.0.1"});
        pools(&env, kind, "v1alpha1")
            .create(&PostParams::default(), &pool(kind, "v1alpha1", &name, spec))
            .await
            .expect("create v1alpha1");
        let v2 = pools(&env, kind, "v1alpha2").get(&name).await.expect("read as v1alpha2");
        assert_eq!(v2.data["spec"]["addresses"], json!(["10.5.0.10-10.5.0.20"]));
        assert_eq!(v2.data["spec"]["prefix"], json!(24));
        assert_eq!(v2.data["spec"]["gateway"], json!("10.5.0.1"));
        let v1 = pools(&env, kind, "v1alpha1").get(&name).await.expect("read as v1alpha1");
        assert_eq!(
            v1.data["spec"],
            json!({"subnet": "10.5.0.0/24", "start": "10.5.0.10", "end": "10.5.0.20", "prefix": 24, "gateway": "10.5.0.1"})
        );
        // Defaults from the subnet alone, as the Go provider does.
        let name = unique_name("v1s");
        let spec = json!({"subnet": "10.6.0.0/24", "gateway": "10.6.0.1"});
        pools(&env, kind, "v1alpha1")
            .create(&PostParams::default(), &pool(kind, "v1alpha1", &name, spec))
            .await
            .expect("create");
        let v2 = pools(&env, kind, "v1alpha2").get(&name).await.expect("read as v1alpha2");
        assert_eq!(v2.data["spec"]["addresses"], json!(["10.6.0.1-10.6.0.254"]));
    }
}

#[tokio::test]
async fn a_v1alpha2_pool_survives_a_v1alpha1_read_modify_write() {
    let env = TestEnv::with_manager("conv-down").await;
    for kind in IP_KINDS {
        let name = unique_name("v2");
        let spec = json!({
            "addresses": ["10.7.0.10-10.7.0.20"], "prefix": 24, "gateway": "10.7.0.1",
            "excludedAddresses": ["10.7.0.15"], "allocateReservedIPAddresses": true,
            "addressReuseGracePeriodSeconds": 45,
            "subnets": [{"addresses": ["10.7.1.10-10.7.1.20"], "prefix": 25, "gateway": "10.7.1.1"}],
            "allocationStrategy": "LeastRecentlyReleased"
        });
        let before = create(&env, kind, &name, spec.clone()).await.expect("create v1alpha2");
        // A v1alpha1 client writes back what it read, with a label of its own (reading again when the controller
        // wrote in between: its finalizer, the status).
        let v1_api = pools(&env, kind, "v1alpha1");
        for attempt in 0.. {
            let mut v1 = v1_api.get(&name).await.expect("read as v1alpha1");
            assert_eq!(v1.data["spec"]["addresses"], json!(["10.7.0.10-10.7.0.20"]));
            assert!(v1.data["spec"].get("excludedAddresses").is_none(), "v1alpha1 has no such field");
            assert!(v1.data["spec"].get("subnets").is_none(), "v1alpha1 has no such field");
            v1.metadata.labels.get_or_insert_with(Default::default).insert("touched".into(), "yes".into());
            match v1_api.replace(&name, &PostParams::default(), &v1).await {
                Ok(_) => break,
                Err(kube::Error::Api(s)) if s.code == 409 && attempt < 10 => continue,
                Err(e) => panic!("write back as v1alpha1: {e}"),
            }
        }
        let after = pools(&env, kind, "v1alpha2").get(&name).await.expect("read as v1alpha2");
        assert_eq!(after.data["spec"], before.data["spec"], "{kind}: nothing lost");
        assert_eq!(after.metadata.labels.as_ref().and_then(|l| l.get("touched")).map(String::as_str), Some("yes"));
        assert_eq!(after.metadata.annotations, before.metadata.annotations, "{kind}: no annotation left behind");
    }
}

#[tokio::test]
async fn printer_columns_of_both_versions() {
    let env = TestEnv::with_manager("columns").await;
    let name = unique_name("cols");
    create(
        &env,
        "InClusterIPPool",
        &name,
        json!({"addresses": ["10.8.0.10-10.8.0.20"], "prefix": 24, "gateway": "10.8.0.1"}),
    )
    .await
    .expect("pool");
    let v2 =
        env.plane.kubectl(&["get", "inclusterippools.v1alpha2.ipam.cluster.x-k8s.io", "-n", &env.namespace, &name]);
    let header: Vec<&str> = v2.lines().next().expect("header").split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "ADDRESSES", "PREFIX", "GATEWAY", "TOTAL", "FREE", "USED", "OUTOFRANGE", "READY", "AVAILABLE", "AGE"]
    );
    // Once the manager wrote the status: 10 of 11 addresses free (the gateway is outside), Ready and Available.
    let row = wait_row(&env, &["get", "inclusterippools.v1alpha2.ipam.cluster.x-k8s.io", "-n", &env.namespace, &name]);
    assert_eq!(
        row,
        [name.as_str(), "[\"10.8.0.10-10.8.0.20\"]", "24", "10.8.0.1", "11", "11", "0", "0", "True", "Available"]
    );

    let v1name = unique_name("cols1");
    let spec = json!({"subnet": "10.8.1.0/24", "start": "10.8.1.10", "end": "10.8.1.20"});
    pools(&env, "InClusterIPPool", "v1alpha1")
        .create(&PostParams::default(), &pool("InClusterIPPool", "v1alpha1", &v1name, spec))
        .await
        .expect("v1alpha1");
    let v1 =
        env.plane.kubectl(&["get", "inclusterippools.v1alpha1.ipam.cluster.x-k8s.io", "-n", &env.namespace, &v1name]);
    let header: Vec<&str> = v1.lines().next().expect("header").split_whitespace().collect();
    assert_eq!(header, ["NAME", "SUBNET", "START", "END", "ADDRESSES", "TOTAL", "FREE", "USED", "READY", "AVAILABLE"]);
    let row: Vec<&str> = v1.lines().nth(1).expect("row").split_whitespace().collect();
    assert_eq!(&row[..4], [v1name.as_str(), "10.8.1.0/24", "10.8.1.10", "10.8.1.20"]);

    let pp = unique_name("pp");
    create(&env, "InClusterPrefixPool", &pp, json!({"prefixes": ["fd09::/48"]})).await.expect("prefix pool");
    let out = env.plane.kubectl(&["get", "inclusterprefixpools", "-n", &env.namespace, &pp]);
    let header: Vec<&str> = out.lines().next().expect("header").split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "PREFIXES", "LENGTH", "GATEWAY", "TOTAL", "FREE", "USED", "OUTOFRANGE", "READY", "AVAILABLE", "AGE"]
    );
    // `kubectl get cluster-api` lists the pools through the category.
    let all = env.plane.kubectl(&["get", "cluster-api", "-n", &env.namespace]);
    assert!(all.contains(&name) && all.contains(&pp), "{all}");
}

/// The row `kubectl get` prints once the pool's status is written (its AGE column left out).
fn wait_row(env: &TestEnv, args: &[&str]) -> Vec<String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let out = env.plane.kubectl(args);
        let row: Vec<String> = out.lines().nth(1).unwrap_or_default().split_whitespace().map(str::to_owned).collect();
        if row.len() > 2 && !row.iter().any(|c| c == "<none>") || std::time::Instant::now() > deadline {
            return row[..row.len().saturating_sub(1)].to_vec();
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// Every path in the committed webhook configuration (and /convert) is served by the running manager over TLS: a
/// webhook can never point at a path the server does not serve.
#[tokio::test]
async fn every_registered_path_is_served() {
    let env = TestEnv::with_manager("paths").await;
    let manager = support::shared_manager();
    let manifests =
        std::fs::read_to_string(support::repo_root().join("config/webhook/manifests.yaml")).expect("manifests");
    let mut paths: Vec<String> =
        manifests.lines().filter_map(|l| l.trim().strip_prefix("path: ").map(str::to_owned)).collect();
    assert_eq!(paths.len(), 9, "{paths:?}");
    paths.push("/convert".to_owned());
    let ca = env.plane.dir.join("webhook-certs/ca.crt");
    for path in paths {
        let out = std::process::Command::new("curl")
            .args(["-s", "--max-time", "5", "--cacert"])
            .arg(&ca)
            .args(["-X", "POST", "-H", "content-type: application/json", "-d", "{}"])
            .arg(format!("https://127.0.0.1:{}{path}", manager.webhook_port))
            .output()
            .expect("curl");
        let body: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let kind = body["kind"].as_str().unwrap_or_default();
        assert!(kind == "AdmissionReview" || kind == "ConversionReview", "{path}: {body}");
    }
}

/// With `--reject-overlapping-pools` (and `--reject-gateway-outside-subnet`) the overlap is a rejection instead of a
/// warning (the router in-process, with a client of the real API server to find the other pool).
#[tokio::test]
async fn overlapping_pools_are_rejected_when_asked() {
    use capi_ipam::webhooks::admission::{AdmissionContext, review};
    use capi_ipam::webhooks::routes::{AdmissionRoute, Purpose};
    let env = TestEnv::with_manager("overlap-reject").await;
    let a = unique_name("a");
    create(&env, "InClusterIPPool", &a, json!({"addresses": ["10.9.1.0/24"], "prefix": 24})).await.expect("pool a");
    let ctx = AdmissionContext {
        reject_overlapping_pools: true,
        reject_gateway_outside_subnet: true,
        ..AdmissionContext::live(env.client.clone(), capi_ipam::capi::CapiVersion::V1Beta2)
    };
    let request = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "kind": {"group": "ipam.cluster.x-k8s.io", "version": "v1alpha2", "kind": "InClusterIPPool"},
        "resource": {"group": "ipam.cluster.x-k8s.io", "version": "v1alpha2", "resource": "inclusterippools"},
        "userInfo": {"username": "test"},
        "uid": "u1", "name": "b", "namespace": env.namespace, "operation": "CREATE",
        "object": {"metadata": {"name": "b"}, "spec": {"addresses": ["10.9.1.200-10.9.1.210"], "prefix": 24}}}});
    let route = AdmissionRoute::Pool { kind: capi_ipam::api::PoolKind::InClusterIPPool, purpose: Purpose::Validate };
    let (answer, _) = review(&ctx, route, request.to_string().as_bytes()).await;
    let response = &answer["response"];
    assert_eq!(response["allowed"], json!(false), "{answer}");
    assert_eq!(response["status"]["code"], json!(422));
    assert_eq!(response["status"]["details"]["causes"][0]["field"], json!("spec.addresses"));
    let message = response["status"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(&format!("overlaps InClusterIPPool \"{a}\" (10.9.1.200-10.9.1.210)")), "{message}");
    // Another namespace is another scope: no overlap there.
    let elsewhere = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "kind": {"group": "ipam.cluster.x-k8s.io", "version": "v1alpha2", "kind": "InClusterIPPool"},
        "resource": {"group": "ipam.cluster.x-k8s.io", "version": "v1alpha2", "resource": "inclusterippools"},
        "userInfo": {"username": "test"},
        "uid": "u2", "name": "b", "namespace": "other-namespace", "operation": "CREATE",
        "object": {"metadata": {"name": "b"}, "spec": {"addresses": ["10.9.1.200-10.9.1.210"], "prefix": 24}}}});
    let (answer, _) = review(&ctx, route, elsewhere.to_string().as_bytes()).await;
    assert_eq!(answer["response"]["allowed"], json!(true), "{answer}");
    // And with --reject-gateway-outside-subnet, the gateway warning of D12 is a rejection naming the field.
    let gateway = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "kind": {"group": "ipam.cluster.x-k8s.io", "version": "v1alpha2", "kind": "InClusterIPPool"},
        "resource": {"group": "ipam.cluster.x-k8s.io", "version": "v1alpha2", "resource": "inclusterippools"},
        "userInfo": {"username": "test"},
        "uid": "u3", "name": "c", "namespace": "other-namespace", "operation": "CREATE",
        "object": {"metadata": {"name": "c"}, "spec": {"addresses": ["10.9.3.10"], "prefix": 24, "gateway": "0.0.0.0"}}}});
    let (answer, _) = review(&ctx, route, gateway.to_string().as_bytes()).await;
    assert_eq!(answer["response"]["allowed"], json!(false), "{answer}");
    assert_eq!(answer["response"]["status"]["details"]["causes"][0]["field"], json!("spec.gateway"));
    let message = answer["response"]["status"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("\"0.0.0.0\": is the unspecified address")
            && message.contains("--reject-gateway-outside-subnet"),
        "{message}"
    );
}

/// A v1beta1 AdmissionReview gets a v1beta1 answer; the defaulting patch sets allocationPrefixLength 0 to 64.
#[tokio::test]
async fn v1beta1_reviews_and_the_defaulting_patch() {
    use capi_ipam::webhooks::admission::{AdmissionContext, review};
    use capi_ipam::webhooks::routes::{AdmissionRoute, Purpose};
    let env = TestEnv::with_manager("v1beta1").await;
    let ctx = AdmissionContext::live(env.client.clone(), capi_ipam::capi::CapiVersion::V1Beta2);
    let request = json!({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {
        "kind": {"group": "ipam.cluster.x-k8s.io", "version": "v1alpha2", "kind": "InClusterPrefixPool"},
        "resource": {"group": "ipam.cluster.x-k8s.io", "version": "v1alpha2", "resource": "inclusterprefixpools"},
        "userInfo": {"username": "test"},
        "uid": "u9", "name": "p", "namespace": env.namespace, "operation": "CREATE",
        "object": {"metadata": {"name": "p"}, "spec": {"prefixes": ["fd00::/48"], "allocationPrefixLength": 0}}}});
    let route = AdmissionRoute::Pool { kind: capi_ipam::api::PoolKind::InClusterPrefixPool, purpose: Purpose::Default };
    let (answer, _) = review(&ctx, route, request.to_string().as_bytes()).await;
    assert_eq!(answer["apiVersion"], json!("admission.k8s.io/v1beta1"));
    assert_eq!(answer["response"]["uid"], json!("u9"));
    assert_eq!(answer["response"]["patchType"], json!("JSONPatch"));
    let patch = k8s_openapi::ByteString::deserialize(answer["response"]["patch"].clone()).expect("base64 patch");
    let patch: Value = serde_json::from_slice(&patch.0).expect("JSON patch");
    assert_eq!(patch, json!([{"op": "replace", "path": "/spec/allocationPrefixLength", "value": 64}]));
}

/// What `make run` applies (the example Cluster, pools of every shape and CAPV/CAPM3-style claims) passes the real
/// Cluster API schema and webhooks and ours, as a server-side dry run; the invalid examples are refused, fields named.
#[tokio::test]
async fn the_examples_pass_cluster_api_and_our_admission() {
    let env = TestEnv::with_manager("examples").await;
    let root = support::repo_root();
    let path = |p: &str| root.join(p).to_string_lossy().into_owned();
    let (cluster, pools, claims) = (path("examples/cluster.yaml"), path("examples/pools"), path("examples/claims"));
    let out = env.plane.kubectl_output(&["apply", "--dry-run=server", "-f", &cluster, "-f", &pools, "-f", &claims]);
    assert!(out.status.success(), "the examples are refused: {}", String::from_utf8_lossy(&out.stderr));
    let applied = String::from_utf8_lossy(&out.stdout);
    for kind in ["cluster.cluster.x-k8s.io/demo", "democluster", "globalinclusterippool", "ipaddressclaim"] {
        assert!(applied.contains(kind), "{kind} missing from:\n{applied}");
    }
    let invalid = env.plane.kubectl_output(&["apply", "--dry-run=server", "-f", &path("examples/invalid")]);
    let stderr = String::from_utf8_lossy(&invalid.stderr);
    assert!(
        !invalid.status.success() && stderr.contains("spec.addresses") && stderr.contains("mixed IP families"),
        "{stderr}"
    );
    assert!(stderr.contains("spec.subnets[0].addresses: Invalid value") && stderr.contains("is in spec.addresses too"));
    assert!(
        stderr.contains("spec.allocationStrategy: Invalid value: \"Random\": cannot be used with a subnet"),
        "{stderr}"
    );
    assert!(
        stderr.contains("spec.quota.clusters[demo]: Invalid value: \"demo\": must be <namespace>/<name> of a Cluster"),
        "{stderr}"
    );
}
