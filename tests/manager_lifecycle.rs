//! The manager process across its life: it waits while another provider (the Go provider, during a migration) holds
//! the leader-election Lease, adopts what `clusterctl move` created before it started, survives a SIGKILL in the
//! middle of a burst without handing an address out twice, and releases the Lease on SIGTERM.
//!
//! Each test runs a manager of its own; a lock keeps them from running at the same time (two managers would be two
//! allocators, which is exactly what leader election exists to prevent).

use std::collections::HashSet;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::claims::wait_pool_counts;
use support::claims::{Capi, address_of, create_pool};
use support::manager::{Launch, Manager};
use support::{Plane, TestEnv, eventually};
use tokio::sync::Mutex;

const CAPI: Capi = Capi::V1Beta2;
const LEASE: &str = "7bb7acb4.ipam.cluster.x-k8s.io";

static ONE_MANAGER_AT_A_TIME: Mutex<()> = Mutex::const_new(());

/// A metav1.MicroTime: RFC 3339 with microseconds.
fn micro_time(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// A Lease held by someone else, renewed just now, valid for an hour: the test lets it go with [`foreign_lease_ends`]
/// once it has checked that nothing happens while another leads (a short one ran out before that on a slow machine).
async fn foreign_lease(client: &kube::Client, namespace: &str) {
    let now = micro_time(jiff::Timestamp::now());
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": LEASE, "namespace": namespace},
        "spec": {"holderIdentity": "go-provider-7d9f", "leaseDurationSeconds": 3600,
                 "acquireTime": now, "renewTime": now, "leaseTransitions": 0}
    }))
    .expect("lease");
    Api::<Lease>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &lease)
        .await
        .expect("create lease");
}

/// The other provider is gone: its Lease, never renewed again, is valid for one second from when a candidate sees
/// this change (client-go's and our observed time).
async fn foreign_lease_ends(client: &kube::Client, namespace: &str) {
    Api::<Lease>::namespaced(client.clone(), namespace)
        .patch(LEASE, &PatchParams::default(), &Patch::Merge(json!({"spec": {"leaseDurationSeconds": 1}})))
        .await
        .expect("shorten the lease");
}

/// `clusterctl move` creates the IPAddresses (as they were on the source, with their finalizer and owner references
/// pointing at UIDs that no longer exist), then the claims and the pool. The controller must adopt every address.
#[tokio::test]
async fn a_move_is_adopted_without_patching_any_spec_once_the_lease_is_ours() {
    let _one = ONE_MANAGER_AT_A_TIME.lock().await;
    let env = TestEnv::new("move").await;
    let (c, ns) = (&env.client, &env.namespace);
    foreign_lease(c, ns).await;
    let manager = Manager::started(
        Plane::shared(),
        Launch::default(),
        &["--insecure-diagnostics", "--leader-elect", &format!("--leader-election-namespace={ns}")],
    )
    .await;
    assert!(manager.log_tail(50).contains("waiting for leadership"), "{}", manager.log_tail(20));

    create_pool(c, "InClusterIPPool", ns, "pool", json!({"addresses": ["10.50.0.1-10.50.0.20"], "prefix": 24})).await;
    let pool_uid =
        support::claims::pools(c, "InClusterIPPool", ns).get("pool").await.expect("pool").uid().unwrap_or_default();
    let addresses = CAPI.addresses(c, ns);
    let r = support::resource("ipam.cluster.x-k8s.io", "v1beta2", "IPAddress");
    // Moved addresses, deliberately not the lowest ones.
    let moved = [("m0", "10.50.0.7"), ("m1", "10.50.0.3"), ("m2", "10.50.0.12")];
    for (name, address) in moved {
        let mut a = DynamicObject::new(name, &r);
        a.metadata.finalizers = Some(vec!["ipam.cluster.x-k8s.io/ProtectAddress".to_owned()]);
        a.metadata.owner_references = Some(vec![
            serde_json::from_value(
                json!({"apiVersion": "ipam.cluster.x-k8s.io/v1beta2", "kind": "IPAddressClaim", "name": name,
                "uid": "00000000-0000-0000-0000-000000000001", "controller": true, "blockOwnerDeletion": true}),
            )
            .expect("owner"),
        ]);
        a.data = json!({"spec": {"address": address, "prefix": 24, "claimRef": {"name": name},
            "poolRef": {"apiGroup": "ipam.cluster.x-k8s.io", "kind": "InClusterIPPool", "name": "pool"}}});
        addresses.create(&PostParams::default(), &a).await.expect("moved IPAddress");
    }
    for (name, _) in moved {
        CAPI.create_claim(c, ns, name, "InClusterIPPool", "pool").await;
    }
    CAPI.create_claim(c, ns, "new", "InClusterIPPool", "pool").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(addresses.get_opt("new").await.expect("get").is_none(), "nothing is allocated while another holder leads");
    let specs_before: Vec<serde_json::Value> = {
        let mut v = Vec::new();
        for (name, _) in moved {
            v.push(addresses.get(name).await.expect("address").data["spec"].clone());
        }
        v
    };

    // The other provider is gone: its Lease expires, and ours takes over.
    foreign_lease_ends(c, ns).await;
    for ((name, address), spec) in moved.iter().zip(&specs_before) {
        let bound = CAPI.wait_bound(c, ns, name).await;
        assert_eq!(&address_of(&bound), address, "{name} adopted its moved address");
        assert_eq!(&bound.data["spec"], spec, "{name}: the spec is untouched");
        let adopted = eventually(Duration::from_secs(20), "owner references repaired", || async {
            let a = addresses.get(name).await.ok()?;
            let owners = a.owner_references();
            (owners.len() == 2 && owners.iter().all(|o| o.uid != "00000000-0000-0000-0000-000000000001")).then_some(a)
        })
        .await;
        let claim_uid = CAPI.claims(c, ns).get(name).await.expect("claim").uid().unwrap_or_default();
        assert_eq!(adopted.owner_references()[0].uid, claim_uid);
        assert_eq!(adopted.owner_references()[1].uid, pool_uid);
    }
    assert_eq!(
        address_of(&CAPI.wait_bound(c, ns, "new").await),
        "10.50.0.1",
        "new claims get addresses the move left free"
    );
    wait_pool_counts(c, "InClusterIPPool", ns, "pool", (20, 4, 16, 0)).await;
    let lease = Api::<Lease>::namespaced(c.clone(), ns).get(LEASE).await.expect("our lease");
    assert!(lease.spec.and_then(|s| s.holder_identity).is_some_and(|h| h != "go-provider-7d9f"));
    // No error loop: the log has no repeated failures of the adopted claims.
    let failures = manager.log_tail(5000).matches("claim reconcile failed").count();
    assert!(failures < 5, "{failures} failed reconciles:\n{}", manager.log_tail(40));
}

#[tokio::test]
async fn a_sigkill_in_the_middle_of_a_burst_hands_out_no_address_twice() {
    let _one = ONE_MANAGER_AT_A_TIME.lock().await;
    let env = TestEnv::new("crash").await;
    let (c, ns) = (&env.client, &env.namespace);
    let mut manager = Manager::started(Plane::shared(), Launch::default(), &["--insecure-diagnostics"]).await;
    create_pool(c, "InClusterIPPool", ns, "pool", json!({"addresses": ["10.60.0.0/23"], "prefix": 23})).await;
    let total = 300;
    let claims = CAPI.claims(c, ns);
    // Kill it once some, not all, claims are bound, while the burst is still being created: counted from a list of
    // one item and the rest's count, so each look is cheap. (Looking only once every claim was created let a busy
    // machine's manager bind them all first.)
    let some_bound = eventually(Duration::from_secs(60), "some claims bound", || async {
        let page = CAPI.addresses(c, ns).list(&ListParams::default().limit(1)).await.ok()?;
        let n = page.items.len() as i64 + page.metadata.remaining_item_count.unwrap_or(0);
        (n >= 40).then_some(())
    });
    let kill = async {
        some_bound.await;
        manager.kill();
    };
    tokio::join!(CAPI.create_claims(c, ns, total, "InClusterIPPool", "pool"), kill);
    let bound_at_kill = CAPI.addresses(c, ns).list(&Default::default()).await.expect("list").items.len();
    assert!(bound_at_kill < total, "the kill came mid-burst ({bound_at_kill} of {total} bound)");
    let _restarted = tokio::task::spawn_blocking(move || {
        manager.spawn();
        manager.wait_ready(Plane::shared());
        manager
    })
    .await
    .expect("restart");
    let addresses = eventually(Duration::from_secs(120), "every claim bound", || async {
        let list = claims.list(&Default::default()).await.ok()?;
        let bound = list.items.iter().filter(|c| c.data.pointer("/status/addressRef/name").is_some()).count();
        (bound == total).then_some(())?;
        CAPI.addresses(c, ns).list(&Default::default()).await.ok()
    })
    .await;
    let distinct: HashSet<String> = addresses.items.iter().map(address_of).collect();
    assert_eq!((addresses.items.len(), distinct.len()), (total, total), "one IPAddress per claim, no duplicate");
    wait_pool_counts(c, "InClusterIPPool", ns, "pool", (510, total as i64, 510 - total as i64, 0)).await;
}

fn token(plane: &Plane, user: &str) -> String {
    let tokens = std::fs::read_to_string(plane.dir.join("tokens.csv")).expect("tokens");
    tokens
        .lines()
        .find(|l| l.split(',').nth(1) == Some(user))
        .and_then(|l| l.split(',').next())
        .expect("token")
        .to_owned()
}

/// GET https://127.0.0.1:<port>/metrics with an optional bearer token; returns the HTTP status.
fn metrics_status(port: u16, token: Option<&str>) -> String {
    let mut cmd = std::process::Command::new("curl");
    cmd.args(["-sk", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10"]);
    if let Some(t) = token {
        cmd.args(["-H", &format!("Authorization: Bearer {t}")]);
    }
    let out = cmd.arg(format!("https://127.0.0.1:{port}/metrics")).output().expect("curl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The manager runs under an identity bound to nothing but the Helm chart's roles, and takes a claim through its
/// whole life: allocation, status, events, the lease, release. The secure metrics endpoint authorizes its callers.
#[tokio::test]
async fn the_charts_roles_are_enough_for_a_claims_whole_life() {
    let _one = ONE_MANAGER_AT_A_TIME.lock().await;
    let plane = tokio::task::spawn_blocking(|| Plane::private("rbac")).await.expect("plane");
    let admin = plane.client().await;
    let ns = support::create_namespace(&admin, "rbac").await;
    // The chart's roles, rendered by helm, bound to the restricted test identity.
    let helm = support::release_bin_dir().join("helm");
    let scratch = support::repo_root().join(".dev/scratch").join(support::unique_name("helm"));
    let rendered = std::process::Command::new(helm)
        .args(["template", "ipam", "charts/capi-ipam-in-cluster", "-s", "templates/rbac.yaml", "--namespace", &ns])
        .env("HELM_CACHE_HOME", &scratch)
        .env("HELM_CONFIG_HOME", &scratch)
        .env("HELM_DATA_HOME", &scratch)
        .current_dir(support::repo_root())
        .output()
        .expect("helm");
    assert!(rendered.status.success(), "{}", String::from_utf8_lossy(&rendered.stderr));
    let out = plane.kubectl_stdin(&["apply", "-f", "-"], &String::from_utf8_lossy(&rendered.stdout));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    plane.kubectl(&[
        "create",
        "clusterrolebinding",
        "restricted-manager",
        "--clusterrole=ipam-capi-ipam-in-cluster-manager",
        "--user=it-restricted",
    ]);
    plane.kubectl(&[
        "create",
        "rolebinding",
        "restricted-election",
        "-n",
        &ns,
        "--role=ipam-capi-ipam-in-cluster-leader-election",
        "--user=it-restricted",
    ]);

    let restricted = plane.restricted_kubeconfig();
    let dir = plane.dir.clone();
    let args = [
        format!("--kubeconfig={}", restricted.display()),
        "--leader-elect".to_owned(),
        format!("--leader-election-namespace={ns}"),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let manager = Manager::started(&Plane::at(&dir), Launch::default(), &args).await;

    create_pool(&admin, "InClusterIPPool", &ns, "pool", json!({"addresses": ["10.70.0.1-10.70.0.10"], "prefix": 24}))
        .await;
    CAPI.create_claim(&admin, &ns, "claim", "InClusterIPPool", "pool").await;
    let bound = CAPI.wait_bound(&admin, &ns, "claim").await;
    assert_eq!(address_of(&bound), "10.70.0.1");
    CAPI.wait_reason(&admin, &ns, "claim", "Allocated").await;
    wait_pool_counts(&admin, "InClusterIPPool", &ns, "pool", (10, 1, 9, 0)).await;
    // A first allocation has no Event (its condition says it); a claim that cannot be bound has one.
    CAPI.create_claim(&admin, &ns, "no-pool", "InClusterIPPool", "missing").await;
    CAPI.wait_reason(&admin, &ns, "no-pool", "PoolNotReady").await;
    let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(admin.clone(), &ns);
    eventually(Duration::from_secs(10), "the PoolNotReady Event", || async {
        let list = events.list(&Default::default()).await.expect("events");
        list.items.iter().any(|e| e.reason.as_deref() == Some("PoolNotReady")).then_some(())
    })
    .await;
    CAPI.delete_claim(&admin, &ns, "no-pool").await;
    let lease = Api::<Lease>::namespaced(admin.clone(), &ns).get(LEASE).await.expect("the lease");
    assert!(lease.spec.and_then(|s| s.holder_identity).is_some());
    CAPI.delete_claim(&admin, &ns, "claim").await;
    assert!(CAPI.addresses(&admin, &ns).get_opt("claim").await.expect("get").is_none(), "released");
    wait_pool_counts(&admin, "InClusterIPPool", &ns, "pool", (10, 0, 10, 0)).await;

    // Secure metrics: 401 without a token, 403 for an identity without get /metrics, 200 for one with it.
    assert_eq!(metrics_status(manager.metrics_port, None), "401");
    assert_eq!(metrics_status(manager.metrics_port, Some(&token(&plane, "it-restricted"))), "403");
    assert_eq!(metrics_status(manager.metrics_port, Some(&token(&plane, "it-admin"))), "200");
    let log = manager.log_tail(5000);
    assert!(!log.to_lowercase().contains("forbidden"), "no permission was missing:\n{}", manager.log_tail(40));
}

async fn leading(client: &kube::Client, ns: &str) -> String {
    leading_after(client, ns, "").await
}

/// The holder of the Lease once it is another than `before` (a released Lease keeps its old holder for the margin).
async fn leading_after(client: &kube::Client, ns: &str, before: &str) -> String {
    eventually(Duration::from_secs(30), "a leader", || async {
        Api::<Lease>::namespaced(client.clone(), ns)
            .get(LEASE)
            .await
            .ok()?
            .spec?
            .holder_identity
            .filter(|h| !h.is_empty() && h != before)
    })
    .await
}

#[tokio::test]
async fn sigterm_releases_the_lease_and_a_lost_lease_stops_the_process() {
    let _one = ONE_MANAGER_AT_A_TIME.lock().await;
    let env = TestEnv::new("lease").await;
    let (c, ns) = (&env.client, &env.namespace);
    let mut manager = Manager::started(
        Plane::shared(),
        Launch::default(),
        &["--insecure-diagnostics", "--leader-elect", &format!("--leader-election-namespace={ns}")],
    )
    .await;
    let holder = leading(c, ns).await;
    assert!(manager.terminate(Duration::from_secs(15)), "SIGTERM stops the process:\n{}", manager.log_tail(20));
    // Released with the margin an expiry would leave (issue 25): the record says the lease runs out the lease
    // duration minus the renew deadline (15 s - 10 s) after the release, not a whole lease duration after its last
    // renewal, so that writes the old leader sent just before it stopped land before anyone else leads.
    let lease = Api::<Lease>::namespaced(c.clone(), ns).get(LEASE).await.expect("lease");
    let spec = lease.spec.expect("the lease's spec");
    assert_eq!(spec.holder_identity.as_deref(), Some(&*holder), "still the old leader's until the margin: {spec:?}");
    assert_eq!(spec.lease_duration_seconds, Some(5), "the lease was not released on SIGTERM: {spec:?}");

    // Another holder takes the lease over: the manager notices at its next renewal and exits with an error.
    let manager = Manager::started(
        Plane::shared(),
        Launch::default(),
        &["--insecure-diagnostics", "--leader-elect", &format!("--leader-election-namespace={ns}")],
    )
    .await;
    leading_after(c, ns, &holder).await;
    let now = micro_time(jiff::Timestamp::now());
    let steal =
        json!({"spec": {"holderIdentity": "thief", "renewTime": now, "acquireTime": now, "leaseDurationSeconds": 60}});
    Api::<Lease>::namespaced(c.clone(), ns)
        .patch(LEASE, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&steal))
        .await
        .expect("steal");
    eventually(Duration::from_secs(40), "the manager to exit", || async { (!manager.is_running()).then_some(()) })
        .await;
    let log = manager.log_tail(50);
    assert!(log.contains("lost the leader election lease"), "{log}");
}

/// The Go provider's flags, all at once (the five the test launcher passes too: `--kubeconfig`, `--webhook-port`,
/// `--webhook-cert-dir`, `--health-probe-bind-address`, `--diagnostics-address`), start a manager that means them:
/// it leads through the Lease, watches only `--namespace`, reconciles only claims labelled for `--watch-filter`,
/// serves its webhooks with the named certificate files and its metrics over plain HTTP. (tests/differential.rs
/// checks every flag of the Go provider's `--help` and its defaults; docs/compatibility.md C7 lists what we refuse.)
#[tokio::test]
async fn the_go_providers_flags_start_a_manager_that_means_them() {
    let _one = ONE_MANAGER_AT_A_TIME.lock().await;
    let env = TestEnv::new("goflags").await;
    let other = TestEnv::new("goflags-other").await;
    let (c, ns) = (&env.client, &env.namespace);
    let filter = support::unique_name("wf");
    let manager = Manager::started(
        Plane::shared(),
        Launch::default(),
        &[
            "--leader-elect",
            &format!("--leader-election-namespace={ns}"),
            &format!("--namespace={ns}"),
            &format!("--watch-filter={filter}"),
            "--webhook-cert-name=tls.crt",
            "--webhook-key-name=tls.key",
            "--insecure-diagnostics",
            "--tls-min-version=VersionTLS12",
            "--tls-cipher-suites=TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
        ],
    )
    .await;
    for env in [&env, &other] {
        create_pool(
            &env.client,
            "InClusterIPPool",
            &env.namespace,
            "pool",
            json!({"addresses": ["10.61.0.0/24"], "prefix": 24}),
        )
        .await;
    }
    let labelled = |name: &str| {
        let mut claim = CAPI.claim(name, "InClusterIPPool", "pool");
        claim.metadata.labels = Some([("cluster.x-k8s.io/watch-filter".to_owned(), filter.clone())].into());
        claim
    };
    let claims = CAPI.claims(c, ns);
    claims.create(&PostParams::default(), &labelled("in-filter")).await.expect("claim");
    claims.create(&PostParams::default(), &CAPI.claim("unlabelled", "InClusterIPPool", "pool")).await.expect("claim");
    CAPI.claims(&other.client, &other.namespace)
        .create(&PostParams::default(), &labelled("elsewhere"))
        .await
        .expect("claim");
    let bound = CAPI.wait_bound(c, ns, "in-filter").await;
    assert_eq!(address_of(&bound), "10.61.0.1");
    leading(c, ns).await;
    assert!(manager.metrics().is_some_and(|m| m.contains("# TYPE")), "metrics over plain HTTP");
    // Give the other two every chance to be (wrongly) reconciled: a claim bound after them would show it.
    claims.create(&PostParams::default(), &labelled("later")).await.expect("claim");
    CAPI.wait_bound(c, ns, "later").await;
    for (client, namespace, name) in
        [(c, ns.as_str(), "unlabelled"), (&other.client, other.namespace.as_str(), "elsewhere")]
    {
        let claim = CAPI.claims(client, namespace).get(name).await.expect("claim");
        assert!(
            claim.data.pointer("/status/addressRef").is_none(),
            "{namespace}/{name} was reconciled: {:?}",
            claim.data
        );
        assert!(claim.finalizers().is_empty(), "{namespace}/{name} got a finalizer: {:?}", claim.finalizers());
    }
}

/// Issue 33, finding 3: two of our managers with different `--watch-filter` values allocated from one pool with
/// separate state and bound two claims to one address; each took the other's IPAddresses for orphans; and with both
/// Leases in one namespace one shard never led. A pool now belongs to the shard its `cluster.x-k8s.io/watch-filter`
/// label names: only that shard's manager allocates from it and writes its status, a claim no manager serves is told
/// why in the same words by any manager, and shards in one namespace lead through Leases of their own
/// (`--leader-election-id`), a shared one being said loudly.
#[tokio::test]
async fn managers_of_two_shards_serve_their_own_pools_and_never_share_an_address() {
    let _one = ONE_MANAGER_AT_A_TIME.lock().await;
    let env = TestEnv::new("shards").await;
    let (c, ns) = (&env.client, &env.namespace);
    let (a, b) = (support::unique_name("shard-a"), support::unique_name("shard-b"));
    let start = |filter: &str, lease: Option<String>| {
        let mut args = vec![
            "--leader-elect".to_owned(),
            format!("--leader-election-namespace={ns}"),
            format!("--namespace={ns}"),
            format!("--watch-filter={filter}"),
            "--insecure-diagnostics".to_owned(),
        ];
        args.extend(lease.map(|l| format!("--leader-election-id={l}")));
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            Manager::started(Plane::shared(), Launch::default(), &args).await
        }
    };
    let manager_a = start(&a, None).await;
    let manager_b = start(&b, Some(format!("{ns}/shard-b.ipam.cluster.x-k8s.io"))).await;
    // Two pools over the same addresses, one per shard, labelled from the start.
    let pools = support::claims::pools(c, "InClusterIPPool", ns);
    for (name, shard) in [("pool-a", &a), ("pool-b", &b)] {
        let mut pool =
            DynamicObject::new(name, &support::resource("ipam.cluster.x-k8s.io", "v1alpha2", "InClusterIPPool"));
        pool.metadata.labels = Some([("cluster.x-k8s.io/watch-filter".to_owned(), shard.clone())].into());
        pool.data = json!({"spec": {"addresses": ["10.63.0.1-10.63.0.3"], "prefix": 24}});
        pools.create(&PostParams::default(), &pool).await.expect("pool");
    }
    // Each shard's manager has written its own pool's status: both have seen both pools by now.
    for pool in ["pool-a", "pool-b"] {
        wait_pool_counts(c, "InClusterIPPool", ns, pool, (3, 0, 3, 0)).await;
    }
    let labelled = |name: &str, pool: &str, shard: &str| {
        let mut claim = CAPI.claim(name, "InClusterIPPool", pool);
        claim.metadata.labels = Some([("cluster.x-k8s.io/watch-filter".to_owned(), shard.to_owned())].into());
        claim
    };
    let claims = CAPI.claims(c, ns);
    for (name, pool, shard) in
        [("a0", "pool-a", &a), ("a1", "pool-a", &a), ("b0", "pool-b", &b), ("stray", "pool-a", &b)]
    {
        claims.create(&PostParams::default(), &labelled(name, pool, shard)).await.expect("claim");
    }
    // Each shard's claims are bound by its own manager, both leading in one namespace.
    let mut a_addresses = HashSet::new();
    for name in ["a0", "a1"] {
        assert!(a_addresses.insert(address_of(&CAPI.wait_bound(c, ns, name).await)), "one address twice in pool-a");
    }
    CAPI.wait_bound(c, ns, "b0").await;
    // A claim of shard b on shard a's pool: neither manager serves it, and it is told why.
    let ready = CAPI.wait_reason(c, ns, "stray", "PoolNotReady").await;
    let message = ready["message"].as_str().unwrap_or_default();
    assert!(message.contains(&format!("--watch-filter={a}")) && message.contains("label the claim"), "{message}");
    assert!(
        claims.get("stray").await.expect("claim").finalizers().is_empty(),
        "no finalizer from a manager that does not serve it"
    );
    assert!(CAPI.addresses(c, ns).get_opt("stray").await.expect("get").is_none(), "no IPAddress for it");
    // Only pool-a's manager writes pool-a's status (its counts are its own claims'), and no orphan sweep of one
    // shard touches the other's IPAddresses.
    wait_pool_counts(c, "InClusterIPPool", ns, "pool-a", (3, 2, 1, 0)).await;
    wait_pool_counts(c, "InClusterIPPool", ns, "pool-b", (3, 1, 2, 0)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    for name in ["a0", "a1", "b0"] {
        let address = CAPI.addresses(c, ns).get(name).await.expect("still there");
        assert!(address.metadata.deletion_timestamp.is_none(), "{name}'s IPAddress is being deleted");
    }
    assert!(manager_a.is_running() && manager_b.is_running());
    // A third shard sharing shard a's Lease never leads, and says why.
    let c_shard = support::unique_name("shard-c");
    let manager_c = start(&c_shard, None).await;
    eventually(Duration::from_secs(30), "the shared Lease said", || async {
        manager_c.log_tail(200).contains("held by the manager of another shard").then_some(())
    })
    .await;
}

/// The Cluster API Operator crash-looped us: nine of the flags an `IPAMProvider`'s `spec.manager` writes made our flag
/// parser exit. Started with every flag the Operator writes, in its form (`--name=value`, appended after the
/// Deployment's own), the manager runs, says in its log what means nothing to it, gives `--<kind>-concurrency`,
/// `--metrics-bind-addr`, `--v` and `--logging-format` our meaning, and binds its shard's claims.
#[tokio::test]
async fn a_manager_started_with_every_flag_the_cluster_api_operator_writes_runs_and_binds_claims() {
    let _one = ONE_MANAGER_AT_A_TIME.lock().await;
    let env = TestEnv::new("operator").await;
    let (c, ns) = (&env.client, &env.namespace);
    let shard = support::unique_name("op");
    let metrics_port = support::manager::free_port();
    let args = [
        "--ipaddressclaim.ipam.cluster.x-k8s.io-concurrency=4".to_owned(),
        "--inclusterippool.ipam.cluster.x-k8s.io-concurrency=2".to_owned(),
        "--max-concurrent-reconciles=16".to_owned(),
        format!("--namespace={ns}"),
        format!("--metrics-bind-addr=127.0.0.1:{metrics_port}"),
        "--webhook-host=127.0.0.1".to_owned(),
        "--profiler-address=localhost:6060".to_owned(),
        "--leader-elect=true".to_owned(),
        format!("--leader-election-id={ns}/operator.ipam.cluster.x-k8s.io"),
        "--leader-elect-lease-duration=15s".to_owned(),
        "--leader-elect-renew-deadline=10s".to_owned(),
        "--leader-elect-retry-period=2s".to_owned(),
        "--insecure-diagnostics=true".to_owned(),
        "--sync-period=600s".to_owned(),
        "--v=4".to_owned(),
        "--feature-gates=ClusterTopology=true,MachinePool=false".to_owned(),
        "--logging-format=text".to_owned(),
        format!("--watch-filter={shard}"),
        // After the launcher's own --log-level: --v would be overridden by it otherwise.
        "--log-level=debug,kube=info,hyper=info,h2=info,tower=info,rustls=info".to_owned(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let manager = Manager::started(Plane::shared(), Launch::default(), &args).await;
    let log = std::fs::read_to_string(&manager.log).expect("the manager's log");
    for notice in [
        "--profiler-address=localhost:6060: this manager has no profiler",
        "--sync-period=600s: not needed here",
        "--feature-gates=ClusterTopology=true,MachinePool=false: this manager has no feature gates",
        "--inclusterippool.ipam.cluster.x-k8s.io-concurrency=2: the pool kinds share 4 workers",
        "--metrics-bind-addr=127.0.0.1:",
    ] {
        assert!(log.contains(notice), "the log does not say {notice:?}:\n{}", manager.log_tail(60));
    }
    let mut pool =
        DynamicObject::new("pool", &support::resource("ipam.cluster.x-k8s.io", "v1alpha2", "InClusterIPPool"));
    pool.metadata.labels = Some([("cluster.x-k8s.io/watch-filter".to_owned(), shard.clone())].into());
    pool.data = json!({"spec": {"addresses": ["10.64.0.1-10.64.0.3"], "prefix": 24}});
    support::claims::pools(c, "InClusterIPPool", ns).create(&PostParams::default(), &pool).await.expect("pool");
    let mut claim = CAPI.claim("c0", "InClusterIPPool", "pool");
    claim.metadata.labels = Some([("cluster.x-k8s.io/watch-filter".to_owned(), shard.clone())].into());
    CAPI.claims(c, ns).create(&PostParams::default(), &claim).await.expect("claim");
    assert_eq!(address_of(&CAPI.wait_bound(c, ns, "c0").await), "10.64.0.1");
    // Metrics over plain HTTP on --metrics-bind-addr, with the claim kind's concurrency.
    let (code, scrape) = support::manager::http_get(metrics_port, "/metrics").expect("metrics on --metrics-bind-addr");
    assert_eq!(code, 200);
    assert!(
        scrape.lines().any(|l| l == "controller_runtime_max_concurrent_reconciles{controller=\"ipaddressclaim\"} 4"),
        "{scrape}"
    );
    assert!(
        scrape.lines().any(|l| l == "leader_election_master_status{name=\"operator.ipam.cluster.x-k8s.io\"} 1"),
        "{scrape}"
    );
    drop(manager);
}
