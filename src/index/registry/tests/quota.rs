//! Per-Cluster quotas (docs/compatibility.md D21): checked in the step that holds, counted as holds come and go, and
//! the claims that wait for them woken the moment their Cluster holds fewer.

use serde_json::json;

use super::{ip, obj, pool, spec};
use crate::api::PoolKind;
use crate::index::registry::{AllocateError, Claimant, ObjectKey, PoolKey, Registry, cluster_key, reservation_key};

fn quota_pool(quota: serde_json::Value) -> Registry {
    let mut r = Registry::new();
    r.apply_spec(
        &pool(),
        &spec(pool().kind, json!({"addresses": ["10.0.0.1-10.0.0.10"], "prefix": 24, "quota": quota})),
    );
    r
}

fn of(cluster: &str) -> Claimant {
    Claimant::of_cluster(Some(cluster_key("ns", cluster)))
}

fn refused(r: &mut Registry, claim: &str, claimant: &Claimant) -> (u32, u32) {
    match r.allocate(&pool(), &obj(claim), None, claimant) {
        Err(AllocateError::QuotaExceeded { used, quota, cluster, .. }) => {
            assert_eq!(Some(&*cluster), claimant.cluster.as_deref(), "the message names the claim's Cluster");
            (used, quota)
        }
        other => panic!("{claim} should be refused for its Cluster's quota: {other:?}"),
    }
}

#[test]
fn a_cluster_at_its_quota_waits_and_takes_the_address_its_cluster_lets_go() {
    let mut r = quota_pool(json!({"perCluster": 2}));
    r.allocate(&pool(), &obj("a"), None, &of("c1")).expect("1 of 2");
    r.allocate(&pool(), &obj("b"), None, &of("c1")).expect("2 of 2");
    assert_eq!(refused(&mut r, "c", &of("c1")), (2, 2));
    // Other Clusters, and claims of no Cluster, are not limited by c1's use.
    r.allocate(&pool(), &obj("d"), None, &of("c2")).expect("c2 has its own quota");
    r.allocate(&pool(), &obj("e"), None, &Claimant::default()).expect("no Cluster, no quota");
    r.wait_for_quota(&pool(), &obj("c"), &cluster_key("ns", "c1"));
    r.check_consistency().expect("consistent");
    // c2 lets go: c1 still holds its quota, c waits on.
    assert!(!r.forget(&pool(), &obj("d")).contains(&obj("c")));
    // c1 lets go of one: c is woken, and takes an address.
    assert!(r.forget(&pool(), &obj("a")).contains(&obj("c")), "woken the moment its Cluster holds fewer");
    r.allocate(&pool(), &obj("c"), None, &of("c1")).expect("below its quota now");
    assert_eq!(refused(&mut r, "f", &of("c1")), (2, 2));
    r.check_consistency().expect("consistent");
}

#[test]
fn a_cluster_the_quota_names_has_its_own_and_the_rest_the_default() {
    let mut r = quota_pool(json!({"perCluster": 1, "clusters": {"ns/big": 3, "ns/none": 0}}));
    for claim in ["a", "b", "c"] {
        r.allocate(&pool(), &obj(claim), None, &of("big")).expect("big's quota is 3");
    }
    assert_eq!(refused(&mut r, "d", &of("big")), (3, 3));
    assert_eq!(refused(&mut r, "e", &of("none")), (0, 0));
    r.allocate(&pool(), &obj("f"), None, &of("small")).expect("the default of 1");
    assert_eq!(refused(&mut r, "g", &of("small")), (1, 1));
    // The same name in another namespace is another Cluster.
    let elsewhere = Claimant::of_cluster(Some(cluster_key("other", "big")));
    r.allocate(&pool(), &ObjectKey::new("other", "h"), None, &elsewhere).expect("other/big has the default");
}

#[test]
fn a_requested_address_counts_and_is_refused_at_the_quota() {
    let mut r = quota_pool(json!({"perCluster": 1}));
    r.allocate(&pool(), &obj("a"), Some("10.0.0.5"), &of("c1")).expect("below its quota");
    match r.allocate(&pool(), &obj("b"), Some("10.0.0.6"), &of("c1")) {
        Err(AllocateError::QuotaExceeded { .. }) => {}
        other => panic!("a requested address is a new address too: {other:?}"),
    }
}

#[test]
fn an_address_a_machine_uses_and_a_pinned_one_are_given_at_the_quota_and_counted() {
    let mut r = Registry::new();
    r.apply_spec(
        &pool(),
        &spec(
            pool().kind,
            json!({"addresses": ["10.0.0.1-10.0.0.10"], "prefix": 24, "quota": {"perCluster": 1},
                   "preAllocations": {"pinned": "10.0.0.9"}}),
        ),
    );
    r.allocate(&pool(), &obj("a"), None, &of("c1")).expect("1 of 1");
    // A bound claim whose IPAddress went gets the address its machine uses again: a quota takes nothing back.
    let bound = Claimant::bound(Some(cluster_key("ns", "c1")));
    r.allocate(&pool(), &obj("b"), Some("10.0.0.7"), &bound).expect("its machine's address");
    // The pool's owner pinned an address to this claim: it is the claim's, whatever its Cluster holds.
    let pinned = r.allocate(&pool(), &obj("pinned"), None, &of("c1")).expect("its pinned address");
    assert_eq!(pinned.address.to_string(), "10.0.0.9");
    // All three count: c1 holds 3, and its next claim waits until it holds fewer than 1.
    assert_eq!(refused(&mut r, "c", &of("c1")), (3, 1));
    r.check_consistency().expect("consistent");
}

#[test]
fn an_ipaddress_counts_for_the_cluster_its_label_names_and_moves_with_the_label() {
    let mut r = quota_pool(json!({"perCluster": 1}));
    let c1 = Some(cluster_key("ns", "c1"));
    let c2 = Some(cluster_key("ns", "c2"));
    assert!(r.record(&pool(), &obj("a"), ip("10.0.0.1"), c1.clone()).is_none());
    assert_eq!(refused(&mut r, "b", &of("c1")), (1, 1));
    r.wait_for_quota(&pool(), &obj("b"), &cluster_key("ns", "c1"));
    // Relabelled to c2 (by hand, or the claim's label put back): c1 holds none, and its waiting claim is woken.
    assert!(r.record(&pool(), &obj("a"), ip("10.0.0.1"), c2).is_none());
    assert!(r.take_woken().contains(&obj("b")), "c1 dropped below its quota");
    assert_eq!(refused(&mut r, "x", &of("c2")), (1, 1));
    r.allocate(&pool(), &obj("b"), None, &of("c1")).expect("c1 holds none now");
    r.check_consistency().expect("consistent");
}

#[test]
fn a_quota_lowered_below_use_takes_nothing_back_and_one_raised_wakes_its_waiters() {
    let mut r = quota_pool(json!({"perCluster": 3}));
    for claim in ["a", "b", "c"] {
        r.allocate(&pool(), &obj(claim), None, &of("c1")).expect("below 3");
    }
    r.apply_spec(
        &pool(),
        &spec(pool().kind, json!({"addresses": ["10.0.0.1-10.0.0.10"], "prefix": 24, "quota": {"perCluster": 1}})),
    );
    assert_eq!(r.holders(&pool()).len(), 3, "nothing is taken back");
    assert_eq!(refused(&mut r, "d", &of("c1")), (3, 1));
    r.wait_for_quota(&pool(), &obj("d"), &cluster_key("ns", "c1"));
    // One of three let go: c1 holds 2, still above 1: d waits on.
    assert!(!r.forget(&pool(), &obj("a")).contains(&obj("d")));
    let woken = r.apply_spec(&pool(), &spec(pool().kind, json!({"addresses": ["10.0.0.1-10.0.0.10"], "prefix": 24})));
    assert!(woken.contains(&obj("d")), "the quota went: its waiters look again");
    r.allocate(&pool(), &obj("d"), None, &of("c1")).expect("no quota now");
}

#[test]
fn a_claim_woken_for_a_free_address_its_quota_refuses_passes_the_wake_on() {
    let mut r = Registry::new();
    r.apply_spec(
        &pool(),
        &spec(pool().kind, json!({"addresses": ["10.0.0.1-10.0.0.2"], "prefix": 24, "quota": {"perCluster": 1}})),
    );
    r.allocate(&pool(), &obj("b"), None, &Claimant::default()).expect("free");
    r.allocate(&pool(), &obj("e"), None, &of("c2")).expect("free");
    // Both wait for any address, oldest first.
    for (claim, cluster) in [("x", "c1"), ("y", "c3")] {
        assert!(matches!(r.allocate(&pool(), &obj(claim), None, &of(cluster)), Err(AllocateError::Exhausted { .. })));
        r.wait(&pool(), &obj(claim));
    }
    // Meanwhile an IPAddress of c1 shows up, holding an address the pool does not allocate (made by hand): c1 holds its
    // quota.
    assert!(r.record(&pool(), &obj("by-hand"), ip("10.0.9.9"), Some(cluster_key("ns", "c1"))).is_none());
    // An address frees up: x, the oldest, is woken, and its quota refuses it.
    assert_eq!(r.forget(&pool(), &obj("e")), vec![obj("x")]);
    assert_eq!(refused(&mut r, "x", &of("c1")), (1, 1));
    r.wait_for_quota(&pool(), &obj("x"), &cluster_key("ns", "c1"));
    // The wake it could not use goes to y, which takes the address.
    assert_eq!(r.take_woken(), vec![obj("y")]);
    r.allocate(&pool(), &obj("y"), None, &of("c3")).expect("the free address");
    r.check_consistency().expect("consistent");
}

#[test]
fn holds_set_aside_and_handed_over_keep_their_cluster_and_reservations_count_in_none() {
    let mut r = Registry::new();
    let global = PoolKey::new(PoolKind::GlobalInClusterIPPool, "", "g");
    r.apply_spec(
        &global,
        &spec(global.kind, json!({"addresses": ["10.0.0.1-10.0.0.10"], "prefix": 24, "quota": {"perCluster": 1}})),
    );
    r.allocate(&global, &obj("a"), None, &of("c1")).expect("1 of 1");
    r.set_aside(&global, &obj("a"));
    let refused_aside = r.allocate(&global, &obj("b"), None, &of("c1"));
    assert!(
        matches!(refused_aside, Err(AllocateError::QuotaExceeded { .. })),
        "set aside, it is still c1's: {refused_aside:?}"
    );
    // Taken back by its claim, then moved away: the reservation is no Cluster's.
    r.allocate(&global, &obj("a"), None, &of("c1")).expect("its own hold again");
    let c1 = Some(cluster_key("ns", "c1"));
    let held = r.transfer(&global, &obj("a"), &reservation_key(ip("10.0.0.1")), c1).expect("moved away");
    r.allocate(&global, &obj("b"), None, &of("c1")).expect("a reservation counts in no quota");
    // It comes back: it counts for c1 again once its IPAddress is recorded.
    r.transfer(&global, &reservation_key(held), &obj("a"), None).expect("came back");
    assert!(r.record(&global, &obj("a"), held, Some(cluster_key("ns", "c1"))).is_none());
    let mut counts = 0;
    for claim in ["c", "d"] {
        if r.allocate(&global, &obj(claim), None, &of("c1")).is_ok() {
            counts += 1;
        }
    }
    assert_eq!(counts, 0, "c1 holds 2 of 1");
    r.check_consistency().expect("consistent");
}

#[test]
fn the_status_counts_what_each_clusters_ipaddresses_hold_the_most_first_and_names_ten() {
    let mut r = Registry::new();
    r.apply_spec(
        &pool(),
        &spec(
            pool().kind,
            json!({"addresses": ["10.0.0.1-10.0.0.30"], "prefix": 24,
                   "quota": {"perCluster": 2, "clusters": {"ns/big": 12}}}),
        ),
    );
    let mut n = 0;
    let mut record = |r: &mut Registry, name: String, cluster: Option<&str>| {
        n += 1;
        let held = ip(&format!("10.0.0.{n}"));
        assert!(r.record(&pool(), &obj(&name), held, cluster.map(|c| cluster_key("ns", c))).is_none());
    };
    for i in 0..12 {
        record(&mut r, format!("c{i}"), Some(&format!("c{i:02}")));
    }
    record(&mut r, "c0-second".to_owned(), Some("c00"));
    for i in 0..3 {
        record(&mut r, format!("big{i}"), Some("big"));
    }
    record(&mut r, "bare0".to_owned(), None);
    record(&mut r, "bare1".to_owned(), None);
    // What only this manager knows is left out, as in the counts: an allocation in flight, a reservation.
    r.allocate(&pool(), &obj("in-flight"), None, &of("c01")).expect("c01 holds 1 of 2");
    assert!(r.reserve(&pool(), ip("10.0.0.29")));
    let usage = r.cluster_usage(&pool(), |_| false).expect("a pool with a quota has a usage");
    assert_eq!((usage.clusters, usage.at_quota, usage.without_cluster), (13, 1, 2));
    let top: Vec<(String, i64, Option<i64>)> = usage.top.iter().map(|e| (e.cluster.clone(), e.used, e.quota)).collect();
    let mut expected = vec![("ns/big".to_owned(), 3, Some(12)), ("ns/c00".to_owned(), 2, Some(2))];
    expected.extend((1..9).map(|i| (format!("ns/c{i:02}"), 1, Some(2))));
    assert_eq!(top, expected, "the most first, then by name, ten at most");
    // An IPAddress only this manager knows of (a relist did not show it) is left out too.
    let usage = r.cluster_usage(&pool(), |k| *k == obj("big0")).expect("usage");
    assert_eq!(usage.top[0].used, 2);
    // No quota, no usage.
    r.apply_spec(&pool(), &spec(pool().kind, json!({"addresses": ["10.0.0.1-10.0.0.30"], "prefix": 24})));
    assert_eq!(r.cluster_usage(&pool(), |_| false), None);
}

#[test]
fn a_claim_whose_pin_another_holds_waits_for_its_pin_not_its_quota() {
    let mut r = Registry::new();
    r.apply_spec(
        &pool(),
        &spec(
            pool().kind,
            json!({"addresses": ["10.0.0.1-10.0.0.10"], "prefix": 24, "quota": {"perCluster": 0},
                   "preAllocations": {"pinned": "10.0.0.9"}}),
        ),
    );
    // An IPAddress of another claim holds the pinned address (it took it before the pin was written).
    assert!(r.record(&pool(), &obj("other"), ip("10.0.0.9"), None).is_none());
    match r.allocate(&pool(), &obj("pinned"), None, &of("c1")) {
        Err(AllocateError::Requested { .. }) => {}
        other => panic!("the claim waits for its pin, which its quota does not limit: {other:?}"),
    }
    r.wait_for_requested(&pool(), &obj("pinned"));
    // The other goes: the pin's placeholder takes the address back, and the pinned claim is woken for it.
    assert!(r.forget(&pool(), &obj("other")).contains(&obj("pinned")));
    let got = r.allocate(&pool(), &obj("pinned"), None, &of("c1")).expect("its pin, at a quota of 0");
    assert_eq!(got.address.to_string(), "10.0.0.9");
}

#[test]
fn a_label_taken_off_wakes_the_requesters_of_the_cluster_it_left() {
    let mut r = quota_pool(json!({"perCluster": 1}));
    assert!(r.record(&pool(), &obj("a"), ip("10.0.0.1"), Some(cluster_key("ns", "c1"))).is_none());
    // A bound claim of c1 waits, as a requester, for its machine's address (helper-132 N3).
    r.wait_for_requested(&pool(), &obj("b"));
    assert!(r.record(&pool(), &obj("a"), ip("10.0.0.1"), None).is_none());
    assert!(r.take_woken().contains(&obj("b")), "c1 holds less than its quota now");
    r.check_consistency().expect("consistent");
}
