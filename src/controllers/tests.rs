//! The controllers' decisions on a synthetic index, and a test `Context` whose client reaches nothing: a decision
//! that needs no write must not try one.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::json;

use super::claim::{Gate, gate, restore_wait_remaining, reuse_grace_remaining};
use super::pool::desired_status;
use super::status::ClaimReason;
use super::*;
use crate::api::NearlyExhaustedAt;
use crate::api::{PAUSED_ANNOTATION, PoolResource};
use crate::capi::CapiVersion;
use crate::capi::Claim;
use crate::capi::allocated_address;
use crate::compact::intern;
use crate::index::registry::Claimant;
use crate::index::tests::{claim, index, ip_address, key, pool, pool_key};
use crate::index::{AllocateError, Assigned, Held, Index, Observed, PoolKey};

/// What the claim's run holds for it before its create (`Observed::Allocating`), as the executor asks for it.
fn allocate(claim: &Claim, pool: &PoolKey, previous: Option<&str>, index: &Index) -> Result<Assigned, AllocateError> {
    let (observation, _) = index.observe_then_view(claim, pool.clone(), Observed::Allocating { claim, pool, previous });
    observation.assigned.expect("an allocation answers")
}
use recording::{Answer, RecordingApi};

/// A Context on an index of its own, with a client to a port where nothing listens.
fn test_context() -> Context {
    let config = kube::Config::new("http://127.0.0.1:9".parse().expect("a URL"));
    let client = Client::try_from(config).expect("a client");
    let options = test_options();
    let api = Arc::new(KubeApi::new(client, options.capi, Fence::none()));
    context_on(api, options)
}

fn test_options() -> ControllerOptions {
    ControllerOptions {
        namespace: None,
        watch_filter: None,
        capi: CapiApis { ipam: CapiVersion::V1Beta2, cluster: Some(CapiVersion::V1Beta2) },
        concurrency: 1,
        orphan_release_delay: Duration::from_secs(1),
        restore_wait: Duration::from_secs(120),
        moved_away_max_bytes: moved_away::MAX_BYTES,
    }
}

/// A Context on an index of its own, whose requests go to `api`.
fn context_on(api: Arc<dyn ApiServer>, options: ControllerOptions) -> Context {
    let (_, synced) = watch::channel(true);
    let metrics = Arc::new(Metrics::new());
    let (work, _streams) = Work::new(&metrics);
    Context::new(api, options, metrics, Arc::new(work), synced)
}

#[test]
fn the_gate_honours_pause_clusters_and_deletion() {
    let (index, _) = index();
    index.apply_pool(pool("10.0.0.1", 1).into_pool());
    let mut c = claim("a");
    assert_eq!(gate(&c, &index.claim_view(&c, pool_key())), Gate::Bind);
    c.paused = true;
    assert_eq!(gate(&c, &index.claim_view(&c, pool_key())), Gate::Paused);
    c.paused = false;
    c.cluster = Some(intern("demo"));
    let Gate::WaitForCluster(reason, message) = gate(&c, &index.claim_view(&c, pool_key())) else { panic!("waits") };
    assert_eq!((reason, message.as_str()), (ClaimReason::WaitingForCluster, "waiting for Cluster ns/demo to exist"));
    index.apply_cluster(key("demo"), true);
    assert!(matches!(gate(&c, &index.claim_view(&c, pool_key())), Gate::WaitForCluster(ClaimReason::ClusterPaused, _)));
    // A deleted claim of a paused Cluster keeps its address (a move); of a missing one, it is released.
    c.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
    assert!(matches!(gate(&c, &index.claim_view(&c, pool_key())), Gate::WaitForCluster(ClaimReason::ClusterPaused, _)));
    index.delete_cluster(&key("demo"));
    assert_eq!(gate(&c, &index.claim_view(&c, pool_key())), Gate::Release);
    // A paused pool holds everything, deletion included.
    let mut paused = pool("10.0.0.1", 2);
    paused.metadata.annotations = Some([(PAUSED_ANNOTATION.to_owned(), String::new())].into());
    index.apply_pool(paused.into_pool());
    assert_eq!(gate(&c, &index.claim_view(&c, pool_key())), Gate::Paused);
}

#[test]
fn allocation_takes_the_held_then_the_requested_then_the_pinned_then_the_lowest_free_address() {
    let (index, _) = index();
    let mut p = pool("10.0.0.1-10.0.0.5", 1);
    p.spec.fields.pre_allocations = Some([("pinned".to_owned(), "10.0.0.1".to_owned())].into());
    index.apply_pool(p.into_pool());
    let address = |name: &str| allocate(&claim(name), &pool_key(), None, &index).map(|a| a.address.to_string()).ok();
    // The lowest free address is 10.0.0.1, but it is pinned: another claim, first, does not get it.
    assert_eq!(address("first").as_deref(), Some("10.0.0.2"));
    assert_eq!(address("pinned").as_deref(), Some("10.0.0.1"), "preAllocations");
    let mut annotated = claim("annotated");
    annotated.requested_address = Some("10.0.0.5".into());
    assert_eq!(allocate(&annotated, &pool_key(), None, &index).expect("free").address.to_string(), "10.0.0.5");
    let mut taken = claim("taken");
    taken.requested_address = Some("10.0.0.5".into());
    let err = allocate(&taken, &pool_key(), None, &index).expect_err("taken");
    assert!(matches!(err, AllocateError::Requested { .. }), "{err}");
    assert!(err.to_string().contains("already allocated"), "{err}");
    // An IPAddress deleted from under its live claim: the claim gets the same address back, held for it meanwhile.
    let back = claim("back");
    index.apply_claim(back.clone());
    index.apply_address(&ip_address("back", "10.0.0.3", &back));
    index.address_gone(&key("back"), None);
    assert_eq!(address("other").as_deref(), Some("10.0.0.4"), "the address of a live claim's lost IPAddress is held");
    assert_eq!(allocate(&back, &pool_key(), None, &index).expect("held").address.to_string(), "10.0.0.3");
    // A bound claim whose IPAddress went with what a former leader knew: the address its condition names, while free.
    let (index, _) = super::super::index::tests::index();
    index.apply_pool(pool("10.0.0.1-10.0.0.5", 1).into_pool());
    let restarted = claim("restarted");
    assert_eq!(
        allocate(&restarted, &pool_key(), Some("10.0.0.4"), &index).expect("free").address.to_string(),
        "10.0.0.4"
    );
    assert_eq!(allocated_address("allocated 10.0.0.4 from InClusterIPPool ns/pool"), Some("10.0.0.4"));
    assert_eq!(allocated_address("allocated fd10:: from InClusterPrefixPool ns/pp; DUPLICATE: x"), Some("fd10::"));
    assert_eq!(allocated_address("ns/pool has no free address"), None);
    let other = claim("other");
    assert_eq!(
        allocate(&other, &pool_key(), Some("10.0.0.4"), &index).expect("taken: the lowest free").address.to_string(),
        "10.0.0.1"
    );
}

#[test]
fn a_claim_restored_by_velero_waits_for_its_ipaddress_from_its_creation_for_the_restore_wait() {
    let created = jiff::Timestamp::from_second(1_000_000).expect("time");
    let at = |s: i64| created + jiff::SignedDuration::from_secs(s);
    let wait = Duration::from_secs(120);
    let mut c = claim("a");
    c.created = u32::try_from(created.as_second()).expect("in range");
    assert_eq!(restore_wait_remaining(&c, false, at(10), wait), None, "not restored");
    c.restored = true;
    assert_eq!(restore_wait_remaining(&c, false, at(10), wait), Some(Duration::from_secs(110)));
    assert_eq!(restore_wait_remaining(&c, true, at(10), wait), None, "it holds an address here already");
    assert_eq!(restore_wait_remaining(&c, false, at(120), wait), None, "waited long enough: allocated anew");
}

#[test]
fn a_deleted_claim_holds_its_address_for_the_reuse_grace_period() {
    let (index, _) = index();
    let mut p = pool("10.0.0.1", 1);
    p.spec.fields.address_reuse_grace_period_seconds = Some(60);
    index.apply_pool(p.clone().into_pool());
    let pool = index.pool(&pool_key()).expect("pool");
    let mut c = claim("a");
    let deleted = jiff::Timestamp::from_second(1_000_000).expect("time");
    c.deletion_timestamp = Some(Time(deleted));
    let after = |s: i64| reuse_grace_remaining(&c, &pool, deleted + jiff::SignedDuration::from_secs(s));
    assert_eq!(after(20), Some(Duration::from_secs(40)));
    assert_eq!(after(60), None);
    p.metadata.deletion_timestamp = Some(Time(deleted));
    assert_eq!(reuse_grace_remaining(&c, &p.into_pool(), deleted), None, "the pool is going: no grace");
}

#[test]
fn the_pool_status_names_invalid_specs_duplicates_and_reservations() {
    let (index, _) = index();
    index.apply_pool(pool("10.0.0.1-10.0.0.4", 1).into_pool());
    let ready = desired_status(&index.pool_status(&pool_key(), 5), (NearlyExhaustedAt::DEFAULT, None));
    assert_eq!((ready.ready, ready.reason, ready.message.as_str()), (true, "Ready", ""));
    assert_eq!((ready.addresses.total, ready.addresses.free), (4, 4));
    let stored = index.pool(&pool_key()).expect("pool");
    assert!(!ready.is_current(&stored), "nothing written yet");
    let mut written = (*stored).clone();
    written.status.addresses = Some(ready.addresses);
    let condition = |type_: &str, reason: &str| k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
        type_: type_.into(),
        status: "True".into(),
        reason: reason.into(),
        message: String::new(),
        last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
        observed_generation: Some(1),
    };
    written.status.conditions = Some(vec![condition("Ready", "Ready")]);
    assert!(!ready.is_current(&written), "no AddressesAvailable condition yet");
    written.status.conditions = Some(vec![condition("Ready", "Ready"), condition("AddressesAvailable", "Available")]);
    assert!(ready.is_current(&written));

    index.apply_address(&ip_address("a", "10.0.0.1", &claim("a")));
    index.apply_address(&ip_address("b", "10.0.0.1", &claim("b")));
    let duplicated = desired_status(&index.pool_status(&pool_key(), 5), (NearlyExhaustedAt::DEFAULT, None));
    assert_eq!((duplicated.ready, duplicated.reason), (false, "DuplicateAddresses"));
    assert!(duplicated.message.contains("10.0.0.1 is held by more than one IPAddress: ns/a, ns/b"));
    assert!(!duplicated.is_current(&written));

    let global = PoolKey::new(crate::api::PoolKind::GlobalInClusterIPPool, "", "g");
    let spec = serde_json::from_value(json!({"addresses": ["10.1.0.1-10.1.0.2"], "prefix": 24})).expect("spec");
    let mut g = crate::api::v1alpha2::GlobalInClusterIPPool::new("g", spec);
    g.metadata.annotations = Some([(crate::api::MOVED_AWAY_ANNOTATION.to_owned(), "10.1.0.2".to_owned())].into());
    index.apply_pool(g.into_pool());
    let reserved = desired_status(&index.pool_status(&global, 5), (NearlyExhaustedAt::DEFAULT, None));
    assert_eq!((reserved.ready, reserved.addresses.used), (true, 1));
    assert!(reserved.message.starts_with("1 address(es) reserved"), "{}", reserved.message);
    assert_eq!(index.reservations(&global), [Held::Ip(Some("10.1.0.2".parse().expect("ip")))]);

    let mut invalid = pool("nope", 2);
    invalid.metadata.generation = Some(2);
    index.apply_pool(invalid.into_pool());
    let invalid = desired_status(&index.pool_status(&pool_key(), 5), (NearlyExhaustedAt::DEFAULT, None));
    assert_eq!((invalid.ready, invalid.reason), (false, "InvalidSpec"));
}

/// The `AddressesAvailable` condition follows the free count: available, nearly exhausted at the pool's threshold
/// (its annotation, else the manager's flag), exhausted at none free; a wrong annotation is said, and the flag applies.
#[test]
fn the_pool_says_when_it_is_nearly_exhausted_and_exhausted() {
    use super::pool::nearly_exhausted_at;
    let (index, _) = index();
    let mut p = pool("10.0.0.1-10.0.0.10", 1);
    p.metadata.annotations = Some([(crate::api::NEARLY_EXHAUSTED_AT_ANNOTATION.to_owned(), "3".to_owned())].into());
    index.apply_pool(p.into_pool());
    let stored = index.pool(&pool_key()).expect("pool");
    let at = || nearly_exhausted_at(&stored);
    assert_eq!(at(), (NearlyExhaustedAt::Free(3), None));
    let said = |index: &crate::index::Index| {
        let desired = desired_status(&index.pool_status(&pool_key(), 5), at());
        (desired.available.status, desired.available.reason, desired.available.message, desired.addresses.free)
    };
    assert_eq!(said(&index), ("True", "Available", String::new(), 10));
    for n in 0..10 {
        let c = claim(&format!("c{n}"));
        index.apply_claim(c.clone());
        let assigned = index.allocate(&c, &pool_key(), None).expect("free");
        index.address_created(&c, &ip_address(&format!("c{n}"), &assigned.address.to_string(), &c));
        let (status, reason, message, free) = said(&index);
        match free {
            4.. => assert_eq!((status, reason), ("True", "Available"), "{free} free"),
            1..=3 => {
                assert_eq!((status, reason), ("True", "NearlyExhausted"), "{free} free");
                assert_eq!(message, format!("{free} of 10 addresses free, at or below 3"));
            }
            0 => {
                assert_eq!((status, reason), ("False", "Exhausted"));
                assert!(message.starts_with("no free address of 10"), "{message}");
            }
            _ => unreachable!("free is never negative"),
        }
    }
    let mut wrong = pool("10.0.0.1-10.0.0.10", 2);
    wrong.metadata.annotations = Some([(crate::api::NEARLY_EXHAUSTED_AT_ANNOTATION.to_owned(), "x".to_owned())].into());
    let wrong = wrong.into_pool();
    let (at, note) = nearly_exhausted_at(&wrong);
    assert_eq!(at, NearlyExhaustedAt::DEFAULT);
    let note = note.expect("the wrong value is said");
    assert!(note.contains("ipam.cluster.x-k8s.io/nearly-exhausted-at: \"x\" is neither"), "{note}");
    assert!(note.ends_with("the default 10% applies"), "{note}");
    index.apply_pool(pool("nope", 3).into_pool());
    let invalid = desired_status(&index.pool_status(&pool_key(), 5), (at, Some(note.clone())));
    assert_eq!((invalid.available.status, invalid.available.reason), ("Unknown", "InvalidSpec"));
    assert!(invalid.available.message.ends_with(&note), "{}", invalid.available.message);
}

/// Helper-103 F1: a record of our own create that a relist did not show is this manager's knowledge alone; the
/// condition of the status, which another manager watching the pool writes too, leaves it out as the counts do: no
/// duplicate with the address the other manager handed out meanwhile, nor an IPAddress out of range after an edit.
#[test]
fn a_record_a_relist_did_not_show_makes_no_duplicate_nor_out_of_range_condition() {
    for case in ["duplicate", "out of range"] {
        let (index, _) = index();
        index.apply_pool(pool("10.0.0.1-10.0.0.4", 1).into_pool());
        let a = claim("a");
        index.apply_claim(a.clone());
        index.allocate(&a, &pool_key(), None).expect("free");
        index.address_created(&a, &ip_address("a", "10.0.0.1", &a));
        index.addresses_listing();
        index.addresses_listed();
        match case {
            // The other manager, which never saw a's IPAddress, handed its address out.
            "duplicate" => {
                index.apply_address(&ip_address("b", "10.0.0.1", &claim("b")));
            }
            _ => index.apply_pool(pool("10.0.0.2-10.0.0.4", 2).into_pool()),
        }
        let desired = desired_status(&index.pool_status(&pool_key(), 5), (NearlyExhaustedAt::DEFAULT, None));
        assert_eq!((desired.ready, desired.reason), (true, "Ready"), "{case}: {}", desired.message);
        // Resolved as there after all: the condition says it.
        let listed = index.address(&key("a")).expect("a's record");
        index.doubt_resolved(&key("a"), listed.uid, Some(&ip_address("a", "10.0.0.1", &a)));
        let desired = desired_status(&index.pool_status(&pool_key(), 5), (NearlyExhaustedAt::DEFAULT, None));
        assert!(!desired.ready, "{case}: once resolved, the condition names it: {}", desired.message);
    }
}

#[tokio::test]
async fn decisions_that_write_nothing_make_no_request() {
    let ctx = test_context();
    ctx.index.apply_pool(pool("10.0.0.1", 1).into_pool());
    let mut paused = claim("paused");
    paused.paused = true;
    assert_eq!(
        claim::reconcile(&paused, ctx.index.claim_view(&paused, pool_key()), &ctx).await.expect("no request"),
        Next::AwaitChange
    );
    // Bound, and its Cluster went away: nothing to say, nothing written.
    let mut bound = claim("bound");
    bound.cluster = Some(intern("gone"));
    bound.bound = Some(Box::default());
    assert_eq!(
        claim::reconcile(&bound, ctx.index.claim_view(&bound, pool_key()), &ctx).await.expect("no request"),
        Next::AwaitChange
    );
    // One that must write does try, and fails on the unreachable API server (a transport error: retried soon).
    let unbound = claim("unbound");
    ctx.index.apply_claim(unbound.clone());
    let error = claim::reconcile(&unbound, ctx.index.claim_view(&unbound, pool_key()), &ctx)
        .await
        .expect_err("nothing listens");
    assert!(error.is_unreachable() && error.is_transient(), "{error}");
    // Its hold was taken before the create, and stays for the retry (an unanswered create may have landed).
    assert_eq!(ctx.index.pool_counts(&pool_key()).0.free, 0);
    let again = ctx
        .index
        .write(|s| s.registry().allocate(&pool_key(), &key("unbound"), None, &Claimant::default()))
        .expect("its own hold");
    assert_eq!(again.address.to_string(), "10.0.0.1");
}

#[test]
fn events_tell_failures_waits_and_recoveries_but_not_a_first_allocation() {
    use super::claim::deserves_event;
    use super::status::Ready;
    let ready = |reason| Ready { reason, message: "m".to_owned() };
    let stored = |reason: &str, status: &str| {
        let claim: crate::capi::ClaimResource = serde_json::from_value(json!({"status": {"conditions": [
            {"type": "Ready", "status": status, "reason": reason, "message": "m"}]}}))
        .expect("a claim");
        claim.claim.ready
    };
    assert!(!deserves_event(None, &ready(ClaimReason::Allocated)), "a first allocation");
    assert!(deserves_event(None, &ready(ClaimReason::PoolExhausted)), "a failure");
    assert!(deserves_event(None, &ready(ClaimReason::WaitingForCluster)), "a wait");
    let exhausted = stored("PoolExhausted", "False");
    assert!(deserves_event(exhausted.as_ref(), &ready(ClaimReason::Allocated)), "a recovery");
    assert!(!deserves_event(exhausted.as_ref(), &ready(ClaimReason::PoolExhausted)), "no change of reason");
    let allocated = stored("Allocated", "True");
    assert!(!deserves_event(allocated.as_ref(), &ready(ClaimReason::Allocated)));
    assert!(deserves_event(allocated.as_ref(), &ready(ClaimReason::PoolNotReady)));
}

#[test]
fn a_claim_keeps_what_its_writes_are_conditioned_on() {
    let parse =
        |value: serde_json::Value| serde_json::from_value::<crate::capi::ClaimResource>(value).expect("a claim");
    let bare = parse(json!({"metadata": {"name": "a", "namespace": "ns", "resourceVersion": "42"}})).claim;
    assert_eq!(bare.resource_version.text().as_deref(), Some("42"));
    assert!(!bare.has_finalizers && !bare.foreign_conditions);
    let busy = parse(json!({
        "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "opaque", "finalizers": ["x/y"]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }))
    .claim;
    assert_eq!(busy.resource_version.text(), None, "an opaque resourceVersion is read live");
    assert!(busy.has_finalizers && !busy.foreign_conditions);
    let theirs = |status| parse(json!({"metadata": {"name": "a"}, "status": status})).claim.foreign_conditions;
    assert!(theirs(json!({"conditions": [{"type": "Ready"}, {"type": "Other"}]})));
    assert!(theirs(json!({"conditions": [{"type": "Ready"}], "v1beta2": {"conditions": [{"type": "Other"}]}})));
    assert!(!theirs(json!({"conditions": [{"type": "Ready"}], "v1beta2": {"conditions": [{"type": "Ready"}]}})));
}

#[tokio::test]
async fn what_the_index_counts_reaches_the_metrics_through_its_notices() {
    let ctx = test_context();
    ctx.index.apply_pool(pool("10.0.0.1-10.0.0.3", 1).into_pool());
    ctx.metrics.set_pool(PoolKind::InClusterIPPool, "ns", "pool", crate::ipam::PoolCounts::default());
    let (a, b) = (claim("a"), claim("b"));
    ctx.index.apply_claim(a.clone());
    ctx.index.apply_claim(b.clone());
    let first = ip_address("a", "10.0.0.1", &a);
    ctx.index.apply_address(&first);
    // A second IPAddress of the address (a deposed leader's late create): detected.
    let mut late = ip_address("b", "10.0.0.1", &b);
    late.metadata.uid = Some("30000000-0000-0000-0000-000000000001".to_owned());
    ctx.index.apply_address(&late);
    // Our DELETE of the first, answered: its address is released.
    let uid = first.metadata.uid.as_deref();
    ctx.index.observe(crate::index::Observed::DeletedByUs { key: &key("a"), pool: &pool_key(), uid });
    let scraped = ctx.metrics.encode();
    for series in [
        "capi_ipam_duplicate_addresses_detected_total{kind=\"InClusterIPPool\"} 1\n",
        "capi_ipam_releases_total{kind=\"InClusterIPPool\"} 1\n",
        "capi_ipam_pool_addresses_free{kind=\"InClusterIPPool\",namespace=\"ns\",name=\"pool\"}",
    ] {
        assert!(scraped.contains(series), "{series} in\n{scraped}");
    }
    // The pool deleted, its series go.
    ctx.index.delete_pool(&pool_key());
    assert!(!ctx.metrics.encode().contains("capi_ipam_pool_addresses_free{"), "{}", ctx.metrics.encode());
}

/// A claim at resourceVersion `rv`, as its watch delivers it.
fn at_version(mut claim: crate::capi::Claim, rv: &str) -> crate::capi::Claim {
    claim.resource_version = crate::compact::ResourceVersion::of(rv);
    claim
}

/// The claim as a write or a read returns it.
fn resource(claim: &crate::capi::Claim) -> crate::capi::ClaimResource {
    crate::capi::ClaimResource { metadata: Default::default(), claim: claim.clone() }
}

/// Runs one reconcile of `claim` against the scripted `api`, on an index holding `pool("10.0.0.1-10.0.0.3")`.
async fn reconcile_against(api: &Arc<RecordingApi>, claim: &crate::capi::Claim) -> Result<Next, Error> {
    let ctx = context_on(api.clone(), test_options());
    ctx.index.apply_pool(pool("10.0.0.1-10.0.0.3", 1).into_pool());
    ctx.index.apply_claim(claim.clone());
    claim::reconcile(claim, ctx.index.claim_view(claim, pool_key()), &ctx).await
}

#[tokio::test]
async fn a_new_claims_first_run_writes_its_finalizer_its_ipaddress_and_its_status_once_each() {
    let new = at_version(claim("a"), "1");
    let new = crate::capi::Claim { release_finalizer_index: None, ..new };
    let written = crate::capi::Claim { release_finalizer_index: Some(0), ..at_version(new.clone(), "2") };
    let api = Arc::new(RecordingApi::answering([Answer::Claim(resource(&written)), Answer::Created, Answer::Done]));
    assert_eq!(reconcile_against(&api, &new).await.expect("answered"), Next::AwaitChange);
    assert_eq!(
        api.calls(),
        [
            "add_claim_finalizer ns/a ipam.cluster.x-k8s.io/ReleaseAddress",
            "create_address ns/a 10.0.0.1",
            "patch_claim_status ns/a at 2 (a)",
        ],
        "one write per step, the status conditioned on the claim as the finalizer write returned it"
    );
}

#[tokio::test]
async fn a_bound_claim_whose_ipaddress_is_gone_reads_itself_live_before_it_makes_it_again_with_its_address() {
    let mut bound = at_version(claim("a"), "5");
    bound.bound = Some(Box::default());
    bound.bound_address = "10.0.0.3".parse().ok();
    // Gone, as the API server has it: nothing is made.
    let api = Arc::new(RecordingApi::answering([Answer::NoClaim]));
    assert_eq!(reconcile_against(&api, &bound).await.expect("answered"), Next::AwaitChange);
    assert_eq!(api.calls(), ["get_claim ns/a"]);
    // Still bound: made again with the address its condition names (its machine's), not the lowest free one.
    let api = Arc::new(RecordingApi::answering([Answer::Claim(resource(&bound)), Answer::Created, Answer::Done]));
    assert_eq!(reconcile_against(&api, &bound).await.expect("answered"), Next::AwaitChange);
    assert_eq!(
        api.calls(),
        ["get_claim ns/a", "create_address ns/a 10.0.0.3", "patch_claim_status ns/a at 5 (a)"],
        "no Event: a first Allocated is said by the condition alone"
    );
}

#[tokio::test]
async fn a_run_that_would_make_one_request_too_many_fails() {
    // The script answers the finalizer only: the create is unexpected, refused, and the run says so.
    let new = crate::capi::Claim { release_finalizer_index: None, ..at_version(claim("a"), "1") };
    let written = crate::capi::Claim { release_finalizer_index: Some(0), ..at_version(new.clone(), "2") };
    let api = Arc::new(RecordingApi::answering([Answer::Claim(resource(&written))]));
    assert!(reconcile_against(&api, &new).await.is_err());
    assert_eq!(api.calls()[1], "create_address ns/a 10.0.0.1");
}

#[tokio::test]
async fn a_deleted_claims_release_reads_its_ipaddress_deletes_it_then_takes_its_own_finalizer_off() {
    let mut going = at_version(claim("a"), "7");
    going.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
    let mut its_own = ip_address("a", "10.0.0.1", &going);
    its_own.metadata.resource_version = Some("6".to_owned());
    let uid = its_own.metadata.uid.clone().unwrap_or_default();
    let api = Arc::new(RecordingApi::answering([Answer::Address(its_own), Answer::Done, Answer::Done]));
    assert_eq!(reconcile_against(&api, &going).await.expect("answered"), Next::AwaitChange);
    assert_eq!(
        api.calls(),
        [
            "get_address ns/a".to_owned(),
            format!("delete_address ns/a {uid}"),
            "remove_finalizer IPAddressClaim ns/a ipam.cluster.x-k8s.io/ReleaseAddress".to_owned(),
        ]
    );
    // None of its name: nothing is deleted, and the claim's finalizer comes off.
    let api = Arc::new(RecordingApi::answering([Answer::NoAddress, Answer::Done]));
    assert_eq!(reconcile_against(&api, &going).await.expect("answered"), Next::AwaitChange);
    assert_eq!(
        api.calls(),
        ["get_address ns/a", "remove_finalizer IPAddressClaim ns/a ipam.cluster.x-k8s.io/ReleaseAddress"]
    );
}

#[tokio::test]
async fn an_orphans_release_reads_the_ipaddress_then_its_claim_and_deletes_only_what_it_read() {
    let gone = at_version(claim("a"), "3");
    let mut orphan = ip_address("a", "10.0.0.1", &gone);
    orphan.metadata.resource_version = Some("4".to_owned());
    let uid = orphan.metadata.uid.clone().unwrap_or_default();
    let on = |api: &Arc<RecordingApi>| {
        let ctx = context_on(api.clone(), test_options());
        ctx.index.apply_pool(pool("10.0.0.1-10.0.0.3", 1).into_pool());
        ctx.index.apply_address(&orphan);
        ctx
    };
    // Its claim gone as the API server has it too: the IPAddress read is the one deleted.
    let api = Arc::new(RecordingApi::answering([Answer::Address(orphan.clone()), Answer::NoClaim, Answer::Done]));
    orphans::release_if_orphaned(&on(&api), &key("a")).await;
    assert_eq!(
        api.calls(),
        ["get_address ns/a".to_owned(), "get_claim ns/a".to_owned(), format!("delete_address ns/a {uid}")]
    );
    // The cache lagged: the claim of the name lives, in the same pool, and adopts it; nothing is deleted.
    let api = Arc::new(RecordingApi::answering([Answer::Address(orphan.clone()), Answer::Claim(resource(&gone))]));
    orphans::release_if_orphaned(&on(&api), &key("a")).await;
    assert_eq!(api.calls(), ["get_address ns/a", "get_claim ns/a"]);
    // Made again under the name since the record was taken (another UID): not the object judged, left alone.
    let mut another = orphan.clone();
    another.metadata.uid = Some("70000000-0000-0000-0000-000000000007".to_owned());
    let api = Arc::new(RecordingApi::answering([Answer::Address(another)]));
    orphans::release_if_orphaned(&on(&api), &key("a")).await;
    assert_eq!(api.calls(), ["get_address ns/a"]);
}

#[tokio::test]
async fn a_new_pools_run_writes_its_finalizer_and_its_status_and_a_deleted_one_lets_go_once_nothing_uses_it() {
    let api = Arc::new(RecordingApi::answering([Answer::Done, Answer::Done]));
    let ctx = context_on(api.clone(), test_options());
    ctx.index.apply_pool(pool("10.0.0.1-10.0.0.3", 1).into_pool());
    assert!(matches!(work_pool(&ctx, &pool_key()).await, Outcome::Done(Next::After(_))));
    let (pool_name, finalizer) = (pool_key().to_string(), crate::api::PROTECT_POOL_FINALIZER);
    assert_eq!(
        api.calls(),
        [format!("add_pool_finalizer {pool_name} {finalizer}"), format!("patch_pool_status {pool_name}")]
    );
    // Deleted while an IPAddress references it: nothing is written.
    let api = Arc::new(RecordingApi::answering([Answer::Done]));
    let ctx = context_on(api.clone(), test_options());
    let mut going = pool("10.0.0.1-10.0.0.3", 2);
    going.metadata.finalizers = Some(vec![finalizer.to_owned()]);
    going.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
    ctx.index.apply_pool(going.into_pool());
    let object = ip_address("a", "10.0.0.1", &claim("a"));
    ctx.index.apply_address(&object);
    assert!(matches!(work_pool(&ctx, &pool_key()).await, Outcome::Done(Next::AwaitChange)));
    assert!(api.calls().is_empty(), "{:?}", api.calls());
    // Its last IPAddress gone (its watch's Delete event): our finalizer comes off.
    ctx.index.address_delete_watched(&key("a"), &object);
    assert!(matches!(work_pool(&ctx, &pool_key()).await, Outcome::Done(Next::AwaitChange)));
    assert_eq!(api.calls(), [format!("remove_finalizer {pool_name} {finalizer}")]);
}

/// Helper-121 F7: a pool labelled for another shard is no longer reconciled here, and its gauges go (ours, from before,
/// would stand beside that shard's manager's, and the alerts take the max across replicas).
#[tokio::test]
async fn a_pool_labelled_for_another_shard_has_no_gauges_here() {
    let api = Arc::new(RecordingApi::answering([Answer::Done, Answer::Done]));
    let ctx = context_on(api.clone(), ControllerOptions { watch_filter: Some("a".to_owned()), ..test_options() });
    ctx.index.apply_pool(pool("10.0.0.1-10.0.0.3", 1).into_pool());
    assert!(matches!(work_pool(&ctx, &pool_key()).await, Outcome::Done(Next::After(_))));
    let series = |ctx: &Context| ctx.metrics.encode().lines().filter(|l| l.starts_with("capi_ipam_pool_")).count();
    assert_eq!(series(&ctx), 8, "{}", ctx.metrics.encode());
    let mut labelled = pool("10.0.0.1-10.0.0.3", 1);
    labelled.metadata.labels = Some([(crate::api::WATCH_FILTER_LABEL.to_owned(), "b".to_owned())].into());
    ctx.index.apply_pool(labelled.into_pool());
    assert!(matches!(work_pool(&ctx, &pool_key()).await, Outcome::Done(Next::AwaitChange)));
    assert_eq!(series(&ctx), 0, "{}", ctx.metrics.encode());
    assert_eq!(api.calls().len(), 2, "nothing written for another shard's pool: {:?}", api.calls());
}

#[tokio::test]
async fn the_moved_away_writer_reads_the_pool_then_writes_the_pending_entry_once() {
    use crate::index::tests::{feed_global_pool, global_pool, moving_away_claim_of_global_pool};
    let on = |api: &Arc<RecordingApi>| {
        let ctx = context_on(api.clone(), test_options());
        let global = feed_global_pool(&ctx.index);
        moving_away_claim_of_global_pool(&ctx.index);
        // clusterctl deletes the claim for a move: the address its IPAddress holds is to be recorded.
        ctx.index.delete_claim(&key("x"));
        (ctx, global)
    };
    let pool_of = |revision, entry| Box::new(PoolResource::into_pool(global_pool(revision, entry)));
    let api = Arc::new(RecordingApi::answering([
        Answer::Pool(pool_of(10, None)),
        Answer::Pool(pool_of(11, Some("10.1.0.1@ns/x"))),
    ]));
    let (ctx, global) = on(&api);
    assert_eq!(moved_away::write(&ctx, &global).await.expect("written"), moved_away::Written::All);
    let annotation = crate::api::MOVED_AWAY_ANNOTATION;
    assert_eq!(
        api.calls(),
        [format!("get_pool {global}"), format!("patch_pool_annotation {global} {annotation}=10.1.0.1@ns/x")]
    );
    assert!(ctx.index.moved_away_view(&global).pending.is_empty(), "written, no longer pending");
    // Nothing pending: nothing read, nothing written.
    assert_eq!(moved_away::write(&ctx, &global).await.expect("nothing to do"), moved_away::Written::All);
    assert_eq!(api.calls().len(), 2);
    // The pool gone as the API server has it: its reservations went with it, and nothing is written.
    let api = Arc::new(RecordingApi::answering([Answer::NoPool]));
    let (ctx, global) = on(&api);
    assert_eq!(moved_away::write(&ctx, &global).await.expect("read"), moved_away::Written::All);
    assert_eq!(api.calls(), [format!("get_pool {global}")]);
    assert!(ctx.index.moved_away_view(&global).pending.is_empty());
}

#[tokio::test]
async fn an_orphans_release_looks_again_after_its_reads_for_an_entry_of_its_address_queued_meanwhile() {
    use crate::index::tests::feed_global_pool;
    let api = Arc::new(RecordingApi::default());
    let ctx = context_on(api.clone(), test_options());
    let global = feed_global_pool(&ctx.index);
    let mut gone = at_version(claim("x"), "3");
    gone.pool_kind = Some(PoolKind::GlobalInClusterIPPool);
    gone.pool_name = intern("g");
    let mut orphan = ip_address("x", "10.1.0.1", &gone);
    orphan.spec.pool_ref.kind = "GlobalInClusterIPPool".to_owned();
    orphan.spec.pool_ref.name = "g".to_owned();
    ctx.index.apply_address(&orphan);
    // While the claim is read, the address's entry is queued for the pool's annotation (the pool made again under its
    // name queues what a move left behind: seed 470594159). Released now, its reservation's only record would go.
    let index = ctx.index.clone();
    let queued = move || index.write(|s| s.queue_moved_away(&global, "10.1.0.1@ns/x".to_owned(), true));
    let api = Arc::new(RecordingApi::answering([
        Answer::Address(orphan.clone()),
        Answer::After(Box::new(queued), Box::new(Answer::NoClaim)),
    ]));
    let ctx = Context { api: api.clone(), ..ctx };
    orphans::release_if_orphaned(&ctx, &key("x")).await;
    assert_eq!(api.calls(), ["get_address ns/x", "get_claim ns/x"], "nothing deleted");
}

/// Soak seed 804659163: a manager of shard `a`, on a global pool without the label, saw another shard's Cluster go
/// while paused (moved away). The IPAddress it left behind is that shard's manager's to record and release: neither a
/// claim's Delete event of its name nor the sweep touches it here.
#[tokio::test]
async fn a_filtered_manager_leaves_another_shards_left_behind_ipaddress_to_that_shards_manager() {
    use crate::compact::ResourceVersion;
    use crate::index::tests::{claim_of_global_pool_with_cluster, feed_global_pool};
    let api = Arc::new(RecordingApi::default());
    let ctx = context_on(api.clone(), ControllerOptions { watch_filter: Some("a".to_owned()), ..test_options() });
    feed_global_pool(&ctx.index);
    let (_, address) = claim_of_global_pool_with_cluster("x");
    ctx.index.apply_cluster_of_shard(key("k"), true, None, ResourceVersion::of("5"));
    ctx.index.apply_address(&address);
    ctx.index.hold_bound_addresses();
    ctx.index.cluster_deleted(&key("k"), true);
    orphans::release_if_orphaned(&ctx, &key("x")).await;
    orphans::sweep(&ctx, Duration::ZERO).await;
    assert_eq!(api.calls(), Vec::<String>::new(), "nothing read, marked or deleted");
}
