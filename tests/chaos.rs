//! Chaos: two or three replicas with leader election under a burst of claims and a churn of claims created and
//! deleted again, while a fault strikes the leader or the control plane. After each fault: every claim bound, every
//! deleted claim gone, no address handed out twice, no IPAddress leaked, the pool's `used` equal to the IPAddresses
//! that exist, and no replica logged a duplicate.
//!
//! `make test` runs each scenario once with a bounded burst. `CHAOS_ROUNDS=<n>` repeats each scenario (soak), and
//! `CHAOS_CLAIMS=<n>` sets the burst (default 600). `CAPI_IPAM_MANAGER_BIN` runs the suite against another build.
//!
//! The same-name churn deletes and creates again a few claim names on a small pool with claims waiting, beside a
//! burst in another pool that keeps the watches busy: a late event about an IPAddress of an earlier claim of the
//! same name must never free the address of the current one (issue 25, hole 1).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::json;
use support::claims::{Capi, address_of, create_pool, pools};
use support::manager::Manager;
use support::proxy::Proxy;
use support::{Plane, eventually};
use tokio::sync::Mutex;

const CAPI: Capi = Capi::V1Beta2;
const LEASE: &str = "7bb7acb4.ipam.cluster.x-k8s.io";
const POOL_ADDRESSES: i64 = 4094; // 10.80.0.0/20 less network and broadcast

/// One scenario at a time: each runs several managers and some stop the control plane.
static ONE_AT_A_TIME: Mutex<()> = Mutex::const_new(());

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn rounds() -> usize {
    env_number("CHAOS_ROUNDS", 1).max(1)
}

/// A fault's length in round `round`: `base`, then longer in later rounds, so that repeated rounds meet the
/// replicas' retry and backoff timers in different phases.
fn outage(base: u64, round: usize) -> Duration {
    Duration::from_secs(base + 7 * (round as u64 % 4))
}

fn burst() -> usize {
    env_number("CHAOS_CLAIMS", 600).clamp(10, 3000)
}

/// A replica: a manager, maybe behind a proxy. A replica that exits is started again, as the kubelet would.
struct Replica {
    manager: Manager,
    proxy: Option<Proxy>,
    restarts: usize,
}

impl Replica {
    fn keep_running(&mut self) {
        if !self.manager.is_running() {
            self.restarts += 1;
            self.manager.spawn();
        }
    }

    /// Whether this replica is the holder the Lease names (each replica logs its identity when it starts).
    fn is_holder(&self, holder: &str) -> bool {
        self.manager.log_tail(100_000).contains(&format!("identity={holder}"))
    }
}

/// Starts `n` replicas with leader election, watching only `namespace`, each behind a proxy of its own.
async fn replicas(plane: &Plane, namespace: &str, n: usize) -> Vec<Replica> {
    let mut out = Vec::new();
    for _ in 0..n {
        let proxy = Proxy::start(plane.api_port()).await;
        let kubeconfig = proxy.kubeconfig(&plane.kubeconfig(), plane.api_port(), &plane.dir.join("chaos"));
        let args = [
            "--insecure-diagnostics".to_owned(),
            "--leader-elect".to_owned(),
            format!("--leader-election-namespace={namespace}"),
            format!("--namespace={namespace}"),
            format!("--kubeconfig={}", kubeconfig.display()),
            "--log-level=info".to_owned(),
            // An orphan the claim's Delete event did not release (it came before the IPAddress was recorded) goes
            // with the sweep after this delay: the invariants' leak check waits for a few of them.
            "--orphan-release-delay=2".to_owned(),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let manager = tokio::task::block_in_place(|| Manager::start(plane, &args));
        out.push(Replica { manager, proxy: Some(proxy), restarts: 0 });
    }
    out
}

async fn wait_for_leader(client: &kube::Client, namespace: &str, replicas: &mut [Replica]) -> usize {
    let leases = kube::Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(client.clone(), namespace);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        for r in replicas.iter_mut() {
            r.keep_running();
        }
        let holder = leases.get_opt(LEASE).await.ok().flatten().and_then(|l| l.spec?.holder_identity);
        if let Some(i) = holder.and_then(|h| replicas.iter().position(|r| r.is_holder(&h))) {
            return i;
        }
        assert!(Instant::now() < deadline, "no replica became the leader");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Claims created and deleted again, one after another, through the fault: none may leave an IPAddress behind.
const CHURN: usize = 60;

/// Creates claim d{i}, waits a moment, deletes it; `CHURN` times. Requests are retried while the API server is down.
async fn churn(client: kube::Client, namespace: String) {
    let api = CAPI.claims(&client, &namespace);
    for i in 0..CHURN {
        let name = format!("d{i}");
        for _ in 0..600 {
            match api.create(&Default::default(), &CAPI.claim(&name, "InClusterIPPool", "pool")).await {
                Ok(_) => break,
                Err(kube::Error::Api(s)) if s.code == 409 => break,
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
        tokio::time::sleep(Duration::from_millis(50 + 37 * (i as u64 % 7))).await;
        for _ in 0..600 {
            match api.delete(&name, &Default::default()).await {
                Ok(_) => break,
                Err(kube::Error::Api(s)) if s.code == 404 => break,
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }
}

/// After the fault, claims keep arriving for this long: whenever a stale leader and a new one both allocate, they
/// meet claims to hand addresses to.
const AFTER_FAULT: Duration = Duration::from_secs(20);

/// Creates claims c{from}..c{to-1}, 32 requests at a time, like a load generator, spread evenly over `spread` (all at
/// once when zero); returns when all exist.
async fn create_burst(client: kube::Client, namespace: String, claims: std::ops::Range<usize>, spread: Duration) {
    let start = tokio::time::Instant::now();
    let first = claims.start;
    let interval = spread / u32::try_from(claims.len().max(1)).expect("a bounded burst");
    futures::stream::iter(claims)
        .for_each_concurrent(32, |i| {
            let (client, namespace) = (client.clone(), namespace.clone());
            async move {
                tokio::time::sleep_until(start + interval * u32::try_from(i - first).expect("bounded")).await;
                let name = format!("c{i}");
                let api = CAPI.claims(&client, &namespace);
                // The API server may be down for a while: retry until the claim exists.
                for _ in 0..600 {
                    match api.create(&Default::default(), &CAPI.claim(&name, "InClusterIPPool", "pool")).await {
                        Ok(_) => return,
                        Err(kube::Error::Api(s)) if s.code == 409 => return,
                        Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                    }
                }
                panic!("claim {name} could not be created");
            }
        })
        .await;
}

/// The invariants after a fault: every claim bound to its own IPAddress, all addresses distinct, no IPAddress without
/// a claim, pool counts equal to the IPAddresses, and no replica saw a duplicate.
async fn check_invariants(
    client: &kube::Client,
    namespace: &str,
    claims: usize,
    replicas: &mut [Replica],
    late_writes: bool,
) -> Duration {
    let started = Instant::now();
    let claims_api = CAPI.claims(client, namespace);
    let addresses_api = CAPI.addresses(client, namespace);
    let mut last = String::new();
    let bound_all = async {
        loop {
            for r in replicas.iter_mut() {
                r.keep_running();
            }
            if let Ok(list) = claims_api.list(&Default::default()).await {
                let bound = list.items.iter().filter(|c| c.data.pointer("/status/addressRef/name").is_some()).count();
                last = format!("{bound} of {} claims bound", list.items.len());
                if list.items.len() == claims && bound == claims {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    if tokio::time::timeout(Duration::from_secs(180), bound_all).await.is_err() {
        let logs: Vec<String> = replicas.iter().map(|r| r.manager.log_tail(30)).collect();
        panic!("not every claim was bound within 180 s after the fault ({last}):\n{}", logs.join("\n-----\n"));
    }
    let bound_after = started.elapsed();

    let claims_list = claims_api.list(&Default::default()).await.expect("claims");
    let addresses = addresses_api.list(&Default::default()).await.expect("IPAddresses");
    let mut by_address: HashMap<String, Vec<String>> = HashMap::new();
    for a in &addresses.items {
        by_address.entry(address_of(a)).or_default().push(a.metadata.name.clone().unwrap_or_default());
    }
    let duplicates: Vec<_> = by_address.iter().filter(|(_, holders)| holders.len() > 1).collect();
    assert!(duplicates.is_empty(), "{} addresses handed out twice: {duplicates:?}", duplicates.len());
    let claim_names: HashSet<String> = claims_list.items.iter().filter_map(|c| c.metadata.name.clone()).collect();
    let mut leaked: Vec<_> =
        addresses.items.iter().filter_map(|a| a.metadata.name.clone()).filter(|n| !claim_names.contains(n)).collect();
    // An IPAddress whose claim vanished while it was created is the orphan check's (released after
    // `--orphan-release-delay`, 2 s here): it must be gone within a few delays.
    let mut addresses = addresses;
    for _ in 0..50 {
        if leaked.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        addresses = addresses_api.list(&Default::default()).await.expect("IPAddresses");
        leaked = addresses
            .items
            .iter()
            .filter_map(|a| a.metadata.name.clone())
            .filter(|n| !claim_names.contains(n))
            .collect();
    }
    assert!(leaked.is_empty(), "IPAddresses without a claim after 10 s: {leaked:?}");
    assert_eq!(addresses.items.len(), claims, "one IPAddress per claim");
    for c in &claims_list.items {
        let name = c.metadata.name.clone().unwrap_or_default();
        assert_eq!(c.data.pointer("/status/addressRef/name").and_then(|v| v.as_str()), Some(name.as_str()));
    }
    // The pool's status is rebuilt from the IPAddresses: used is exact, and free follows.
    let used = claims as i64;
    let pool_api = pools(client, "InClusterIPPool", namespace);
    eventually(Duration::from_secs(30), "the pool's counts to equal the IPAddresses", || async {
        let p = pool_api.get("pool").await.ok()?;
        let s = p.data.pointer("/status/ipAddresses")?;
        (s["used"].as_i64()? == used && s["free"].as_i64()? == POOL_ADDRESSES - used).then_some(())
    })
    .await;
    assert_one_leader_at_a_time(replicas);
    for r in replicas.iter() {
        let log = r.manager.log_tail(100_000);
        // Late writes of a fenced leader may create a duplicate that the new leader withdraws before any claim is
        // bound to it; without late writes, none may ever be seen.
        if !late_writes {
            assert!(!log.contains("DUPLICATE ADDRESS"), "a replica saw a duplicate:\n{}", r.manager.log_tail(40));
        }
        assert!(!log.contains("panicked"), "a replica panicked:\n{}", r.manager.log_tail(40));
    }
    bound_after
}

/// The longest time, in whole seconds (creation timestamps have no more), from a claim's creation to its IPAddress's,
/// over the claims `range`: how soon claims are served after a fault.
async fn slowest_binding(client: &kube::Client, namespace: &str, range: std::ops::Range<usize>) -> i64 {
    let created = |o: &kube::api::DynamicObject| o.metadata.creation_timestamp.as_ref().map(|t| t.0.as_second());
    let claims = CAPI.claims(client, namespace).list(&Default::default()).await.expect("claims");
    let addresses = CAPI.addresses(client, namespace).list(&Default::default()).await.expect("IPAddresses");
    let bound: HashMap<String, i64> =
        addresses.items.iter().filter_map(|a| Some((a.metadata.name.clone()?, created(a)?))).collect();
    let wanted: HashSet<String> = range.map(|i| format!("c{i}")).collect();
    claims
        .items
        .iter()
        .filter(|c| c.metadata.name.as_ref().is_some_and(|n| wanted.contains(n)))
        .filter_map(|c| Some(bound.get(c.metadata.name.as_ref()?)? - created(c)?))
        .max()
        .unwrap_or(0)
}

/// Copies the replicas' logs to `.dev/chaos-logs/<namespace>/` at the end of a round, passed or failed: they outlive
/// a private plane, for a look afterwards.
struct KeepLogs {
    logs: Vec<std::path::PathBuf>,
    namespace: String,
}

impl Drop for KeepLogs {
    fn drop(&mut self) {
        let kept = support::repo_root().join(".dev/chaos-logs").join(&self.namespace);
        let _ = std::fs::create_dir_all(&kept);
        for (i, log) in self.logs.iter().enumerate() {
            let _ = std::fs::copy(log, kept.join(format!("replica-{i}.log")));
        }
    }
}

/// The leader terms in a replica's log (text format, one RFC 3339 timestamp per line): from "became the leader" to
/// the line that ends it ("fenced", a lost lease, a shutdown, or the next process's start after a kill); a term still
/// open at the end of the log lasts forever.
fn leader_terms(log: &str) -> Vec<(jiff::Timestamp, Option<jiff::Timestamp>)> {
    let mut terms = Vec::new();
    let mut open: Option<jiff::Timestamp> = None;
    for line in log.lines() {
        let Some(at) = line.split_whitespace().next().and_then(|t| t.parse::<jiff::Timestamp>().ok()) else {
            continue;
        };
        if line.contains("became the leader") {
            open = open.or(Some(at));
        } else if ["fenced:", "lost the leader election lease", "waiting for leadership", " stopped"]
            .iter()
            .any(|end| line.contains(end))
            && let Some(start) = open.take()
        {
            terms.push((start, Some(at)));
        }
    }
    if let Some(start) = open {
        terms.push((start, None));
    }
    terms
}

/// No two replicas ever led at the same time, by their own logs (one clock: they run on this machine).
fn assert_one_leader_at_a_time(replicas: &[Replica]) {
    let terms: Vec<Vec<_>> = replicas.iter().map(|r| leader_terms(&r.manager.log_tail(1_000_000))).collect();
    for (i, a_terms) in terms.iter().enumerate() {
        for (j, b_terms) in terms.iter().enumerate().skip(i + 1) {
            for (a_start, a_end) in a_terms {
                for (b_start, b_end) in b_terms {
                    let overlap = a_end.is_none_or(|e| *b_start < e) && b_end.is_none_or(|e| *a_start < e);
                    assert!(
                        !overlap,
                        "replicas {i} and {j} led at the same time: {a_start}..{a_end:?} and {b_start}..{b_end:?}\n\
                         --- replica {i} ---\n{}\n--- replica {j} ---\n{}",
                        replicas[i].manager.log_tail(30),
                        replicas[j].manager.log_tail(30)
                    );
                }
            }
        }
    }
}

enum Fault {
    /// The leader's connections to the API server are cut for this long, then healed.
    PartitionLeader(Duration),
    /// Nothing moves between the leader and the API server for this long; then what the leader sent meanwhile is
    /// delivered, late.
    HoldLeader(Duration),
    /// SIGKILL of the leader.
    KillLeader,
    /// A component of the control plane is stopped for this long, then started.
    Stop(&'static str, Duration),
}

/// One round: replicas up, a burst of claims, the fault while it is being served, then from the moment the fault ends
/// (when a stale leader and a new one could both be allocating) a second burst and a steady stream, then the
/// invariants.
async fn round(plane: &Plane, replica_count: usize, fault: Fault) {
    let client = plane.client().await;
    let namespace = support::create_namespace(&client, "chaos").await;
    let mut replicas = replicas(plane, &namespace, replica_count).await;
    let _logs =
        KeepLogs { logs: replicas.iter().map(|r| r.manager.log.clone()).collect(), namespace: namespace.clone() };
    create_pool(&client, "InClusterIPPool", &namespace, "pool", json!({"addresses": ["10.80.0.0/20"], "prefix": 20}))
        .await;
    let leader = wait_for_leader(&client, &namespace, &mut replicas).await;
    let claims = burst();
    let first = claims / 2;
    let load = tokio::spawn(create_burst(client.clone(), namespace.clone(), 0..first, Duration::ZERO));
    // Strike once some, not all, claims of the first burst are bound.
    let addresses = CAPI.addresses(&client, &namespace);
    eventually(Duration::from_secs(120), "a third of the first burst bound", || async {
        let n = addresses.list(&Default::default()).await.ok()?.items.len();
        (n >= first / 3).then_some(())
    })
    .await;
    let struck = Instant::now();
    let churning = tokio::spawn(churn(client.clone(), namespace.clone()));
    let late_writes = matches!(fault, Fault::HoldLeader(_));
    match fault {
        Fault::PartitionLeader(outage) => {
            let proxy = replicas[leader].proxy.as_ref().expect("a proxy");
            proxy.cut();
            tokio::time::sleep(outage).await;
            replicas[leader].proxy.as_ref().expect("a proxy").heal();
        }
        Fault::HoldLeader(outage) => {
            replicas[leader].proxy.as_ref().expect("a proxy").hold();
            tokio::time::sleep(outage).await;
            replicas[leader].proxy.as_ref().expect("a proxy").heal();
        }
        Fault::KillLeader => {
            replicas[leader].manager.kill();
            // Restarted at once, as the kubelet would (its log then marks where the killed process's term ended).
            replicas[leader].keep_running();
        }
        Fault::Stop(component, outage) => {
            tokio::task::block_in_place(|| plane.stop(component));
            tokio::time::sleep(outage).await;
            tokio::task::block_in_place(|| plane.start(component));
        }
    }
    let healed = struck.elapsed();
    // Right after the fault a burst (many claims for two would-be leaders at once), then a steady stream.
    let burst_end = first + (claims - first) / 2;
    let second = tokio::spawn(create_burst(client.clone(), namespace.clone(), first..burst_end, Duration::ZERO));
    let third = tokio::spawn(create_burst(client.clone(), namespace.clone(), burst_end..claims, AFTER_FAULT));
    load.await.expect("the first burst");
    churning.await.expect("the churn");
    second.await.expect("the burst after the fault");
    third.await.expect("the stream after the fault");
    let bound_after = check_invariants(&client, &namespace, claims, &mut replicas, late_writes).await;
    let wait_after_fault = slowest_binding(&client, &namespace, first..claims).await;
    let restarts: usize = replicas.iter().map(|r| r.restarts).sum();
    let withdrawn: usize =
        replicas.iter().map(|r| r.manager.log_tail(100_000).matches("DUPLICATE ADDRESS withdrawn").count()).sum();
    eprintln!(
        "chaos round: {replica_count} replicas, {claims} claims; fault over after {healed:.1?}; all bound {bound_after:.1?} \
         after the load; slowest binding of a claim created after the fault {wait_after_fault} s; replica restarts \
         {restarts}; late duplicates withdrawn {withdrawn}; no duplicate, no leak"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_partitioned_from_the_api_server_hands_out_nothing_twice() {
    let _one = ONE_AT_A_TIME.lock().await;
    for n in 0..rounds() {
        round(Plane::shared(), 2, Fault::PartitionLeader(outage(22, n))).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_held_off_the_api_server_with_its_writes_delivered_late_hands_out_nothing_twice() {
    let _one = ONE_AT_A_TIME.lock().await;
    for n in 0..rounds() {
        round(Plane::shared(), 2, Fault::HoldLeader(outage(22, n))).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_restarted_under_two_replicas_hands_out_nothing_twice() {
    let _one = ONE_AT_A_TIME.lock().await;
    let plane = tokio::task::block_in_place(|| Plane::private("chaos-restart"));
    for n in 0..rounds() {
        round(&plane, 2, Fault::Stop("apiserver", outage(25, n))).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_survive_a_sigkill_of_the_leader_and_an_etcd_restart() {
    let _one = ONE_AT_A_TIME.lock().await;
    let plane = tokio::task::block_in_place(|| Plane::private("chaos-etcd"));
    for n in 0..rounds() {
        round(&plane, 3, Fault::KillLeader).await;
        round(&plane, 3, Fault::Stop("etcd", outage(10, n))).await;
    }
}

/// The small pool of the same-name churn: fewer addresses than claim names, so that claims wait.
const SMALL: i64 = 6;
const SMALL_NAMES: usize = 10;

fn churn_operations() -> usize {
    env_number("CHURN_OPERATIONS", 400)
}

/// Deletes or creates claims s0..s9 of the small pool, one operation after another with no pause to speak of: a
/// name deleted is created again as soon as its claim is gone.
async fn same_name_churn(client: kube::Client, namespace: String) -> usize {
    let api = CAPI.claims(&client, &namespace);
    let mut created = 0;
    for i in 0..churn_operations() {
        // A spread of names that is not a cycle: every name comes back, some sooner than others.
        let name = format!("s{}", (i * 7 + i / 3) % SMALL_NAMES);
        match api.get_opt(&name).await {
            Ok(Some(c)) if c.metadata.deletion_timestamp.is_none() => {
                let _ = api.delete(&name, &Default::default()).await;
            }
            Ok(Some(_)) => {}
            Ok(None) => {
                if api.create(&Default::default(), &CAPI.claim(&name, "InClusterIPPool", "small")).await.is_ok() {
                    created += 1;
                }
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
        tokio::time::sleep(Duration::from_millis((i as u64 * 13) % 25)).await;
    }
    created
}

/// Same-name churn on a small pool beside a burst, under two replicas. Checked: the burst bound, the small pool's
/// claims bound as far as it has addresses, no address held twice in either pool, no IPAddress without its claim,
/// each pool's `used` equal to its IPAddresses, and no replica saw a duplicate.
async fn churn_round(plane: &Plane) {
    let client = plane.client().await;
    let namespace = support::create_namespace(&client, "churn").await;
    let mut replicas = replicas(plane, &namespace, 2).await;
    let _logs =
        KeepLogs { logs: replicas.iter().map(|r| r.manager.log.clone()).collect(), namespace: namespace.clone() };
    create_pool(&client, "InClusterIPPool", &namespace, "pool", json!({"addresses": ["10.80.0.0/20"], "prefix": 20}))
        .await;
    create_pool(
        &client,
        "InClusterIPPool",
        &namespace,
        "small",
        json!({"addresses": ["10.81.0.1-10.81.0.6"], "prefix": 24}),
    )
    .await;
    wait_for_leader(&client, &namespace, &mut replicas).await;
    let claims = burst();
    let started = Instant::now();
    let load = tokio::spawn(create_burst(client.clone(), namespace.clone(), 0..claims, Duration::from_secs(10)));
    let created = same_name_churn(client.clone(), namespace.clone()).await;
    load.await.expect("the burst");
    let claims_api = CAPI.claims(&client, &namespace);
    let addresses_api = CAPI.addresses(&client, &namespace);
    let mut last = String::new();
    let settled = async {
        loop {
            for r in replicas.iter_mut() {
                r.keep_running();
            }
            if let (Ok(cs), Ok(addresses)) =
                (claims_api.list(&Default::default()).await, addresses_api.list(&Default::default()).await)
            {
                let live: Vec<_> = cs.items.iter().filter(|c| c.metadata.deletion_timestamp.is_none()).collect();
                let small =
                    live.iter().filter(|c| c.metadata.name.as_ref().is_some_and(|n| n.starts_with('s'))).count();
                let bound = |prefix: char| {
                    live.iter()
                        .filter(|c| c.metadata.name.as_ref().is_some_and(|n| n.starts_with(prefix)))
                        .filter(|c| c.data.pointer("/status/addressRef/name").is_some())
                        .count()
                };
                let names: HashSet<String> = cs.items.iter().filter_map(|c| c.metadata.name.clone()).collect();
                let leaked = addresses
                    .items
                    .iter()
                    .filter(|a| a.metadata.name.as_ref().is_none_or(|n| !names.contains(n)))
                    .count();
                last = format!(
                    "{} of {claims} burst claims bound; {} of {small} small-pool claims bound; {} claims being deleted; \
                     {leaked} IPAddresses without a claim",
                    bound('c'),
                    bound('s'),
                    cs.items.len() - live.len()
                );
                if bound('c') == claims
                    && bound('s') as i64 == (small as i64).min(SMALL)
                    && live.len() == cs.items.len()
                    && leaked == 0
                    && addresses.items.len() == claims + bound('s')
                {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    if tokio::time::timeout(Duration::from_secs(180), settled).await.is_err() {
        let logs: Vec<String> = replicas.iter().map(|r| r.manager.log_tail(30)).collect();
        panic!("the churn did not settle within 180 s ({last}):\n{}", logs.join("\n-----\n"));
    }
    // No address held twice, in either pool.
    let addresses = addresses_api.list(&Default::default()).await.expect("IPAddresses");
    let mut by_address: HashMap<String, Vec<String>> = HashMap::new();
    for a in &addresses.items {
        by_address.entry(address_of(a)).or_default().push(a.metadata.name.clone().unwrap_or_default());
    }
    let duplicates: Vec<_> = by_address.iter().filter(|(_, holders)| holders.len() > 1).collect();
    assert!(duplicates.is_empty(), "addresses handed out twice: {duplicates:?}");
    let pool_api = pools(&client, "InClusterIPPool", &namespace);
    for (pool, total) in [("pool", POOL_ADDRESSES), ("small", SMALL)] {
        let used = addresses
            .items
            .iter()
            .filter(|a| a.data.pointer("/spec/poolRef/name").and_then(|v| v.as_str()) == Some(pool))
            .count() as i64;
        eventually(Duration::from_secs(30), "each pool's counts to equal its IPAddresses", || async {
            let s = pool_api.get(pool).await.ok()?.data.pointer("/status/ipAddresses")?.clone();
            (s["used"].as_i64()? == used && s["free"].as_i64()? == total - used).then_some(())
        })
        .await;
    }
    for r in replicas.iter() {
        let log = r.manager.log_tail(1_000_000);
        assert!(!log.contains("DUPLICATE"), "a replica saw a duplicate:\n{}", r.manager.log_tail(40));
        assert!(!log.contains("panicked"), "a replica panicked:\n{}", r.manager.log_tail(40));
    }
    eprintln!(
        "churn round: {} operations on {SMALL_NAMES} names of a pool of {SMALL} ({created} creates) beside {claims} \
         claims, {:.1?}: no duplicate, no leak",
        churn_operations(),
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_deleted_and_created_again_under_the_same_names_beside_a_burst_hold_nothing_twice() {
    let _one = ONE_AT_A_TIME.lock().await;
    for _ in 0..rounds() {
        churn_round(Plane::shared()).await;
    }
}
