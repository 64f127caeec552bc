//! The index driven by synthetic watch events, as `crate::runtime::watch` feeds it: what it keeps, what it forgets,
//! and whom it wakes.

use std::sync::Arc;

use parking_lot::Mutex;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::api::ObjectMeta;
use kube::runtime::watcher::Event;
use serde_json::json;

use super::registry::Claimant;
use super::relist::{Pools, Relist};
use super::*;
use crate::api::v1alpha2::{IPPoolSpec, InClusterIPPool, InClusterIPPoolSpec};
use crate::api::{CLUSTER_NAME_LABEL, PROTECT_ADDRESS_FINALIZER};
use crate::api::{PoolKind, PoolResource, PoolSpec};
use crate::capi::{Claim, IpAddress};
use crate::capi::{ClaimResource, Cluster, IpAddressSpec, NameRef, PoolRef};
use crate::compact::{ResourceVersion, intern};

/// Records what the index sends.
#[derive(Default)]
pub(crate) struct Recorder {
    pub woken: Mutex<Vec<ObjectKey>>,
    /// The claims also woken to go first (waiting for an address).
    pub first: Mutex<Vec<ObjectKey>>,
    pub pools: Mutex<Vec<PoolKey>>,
    pub gone: Mutex<Vec<ObjectKey>>,
    pub moved_away: Mutex<Vec<PoolKey>>,
    pub counted: Mutex<Vec<Counted>>,
}

impl Recorder {
    pub fn take_woken(&self) -> Vec<ObjectKey> {
        let mut woken = std::mem::take(&mut *self.woken.lock());
        woken.sort();
        woken.dedup();
        woken
    }
}

impl Sink for Recorder {
    fn wake(&self, claim: ObjectKey) {
        self.woken.lock().push(claim);
    }
    fn wake_first(&self, claim: ObjectKey) {
        self.first.lock().push(claim.clone());
        self.woken.lock().push(claim);
    }
    fn pool_changed(&self, pool: PoolKey) {
        self.pools.lock().push(pool);
    }
    fn claim_gone(&self, claim: ObjectKey) {
        self.gone.lock().push(claim);
    }
    fn moved_away_changed(&self, pool: PoolKey) {
        self.moved_away.lock().push(pool);
    }
    fn counted(&self, event: Counted) {
        self.counted.lock().push(event);
    }
}

pub(crate) fn index() -> (Index, Arc<Recorder>) {
    let recorder = Arc::new(Recorder::default());
    (Index::new(recorder.clone()), recorder)
}

pub(crate) fn key(name: &str) -> ObjectKey {
    ObjectKey::new("ns", name)
}

pub(crate) fn pool_key() -> PoolKey {
    PoolKey::new(PoolKind::InClusterIPPool, "ns", "pool")
}

pub(crate) fn claim(name: &str) -> Claim {
    Claim {
        key: key(name),
        uid: crate::compact::UidText::of(&format!(
            "00000000-0000-0000-0000-{:012}",
            name.len() * 1000 + name.bytes().map(usize::from).sum::<usize>()
        )),
        pool_kind: Some(PoolKind::InClusterIPPool),
        pool_name: intern("pool"),
        release_finalizer_index: Some(0),
        ..Claim::default()
    }
}

pub(crate) fn claim_event(claim: Claim) -> ClaimResource {
    ClaimResource { metadata: ObjectMeta::default(), claim }
}

pub(crate) fn ip_address(name: &str, address: &str, owner: &Claim) -> IpAddress {
    IpAddress {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some("ns".to_owned()),
            uid: Some(format!("10000000-0000-0000-0000-{:012}", address.bytes().map(u64::from).sum::<u64>())),
            finalizers: Some(vec![PROTECT_ADDRESS_FINALIZER.to_owned()]),
            owner_references: Some(vec![OwnerReference {
                kind: "IPAddressClaim".to_owned(),
                name: name.to_owned(),
                uid: owner.uid.to_string(),
                ..OwnerReference::default()
            }]),
            labels: owner.cluster().map(|c| [(CLUSTER_NAME_LABEL.to_owned(), c.to_owned())].into()),
            ..ObjectMeta::default()
        },
        spec: IpAddressSpec {
            claim_ref: NameRef { name: name.to_owned() },
            pool_ref: PoolRef {
                api_group: Some(crate::api::GROUP.to_owned()),
                kind: "InClusterIPPool".to_owned(),
                name: "pool".to_owned(),
            },
            address: address.to_owned(),
            prefix: Some(24),
            gateway: None,
        },
    }
}

pub(crate) fn pool(addresses: &str, generation: i64) -> InClusterIPPool {
    let spec: IPPoolSpec = serde_json::from_value(json!({"addresses": [addresses], "prefix": 24})).expect("spec");
    let mut pool = InClusterIPPool::new("pool", InClusterIPPoolSpec::from(spec));
    pool.metadata.namespace = Some("ns".to_owned());
    pool.metadata.uid = Some("20000000-0000-0000-0000-000000000001".to_owned());
    pool.metadata.generation = Some(generation);
    pool
}

/// Feeds the global pool `g` of ten addresses to the index, as its watch does; returns its key.
pub(crate) fn feed_global_pool(index: &Index) -> PoolKey {
    Relist::default().on_event(
        &Pools::<crate::api::v1alpha2::GlobalInClusterIPPool>::of(index),
        Event::Apply(global_pool(10, None)),
    );
    PoolKey::new(PoolKind::GlobalInClusterIPPool, "", "g")
}

fn feed_pool(index: &Index, pool: InClusterIPPool) {
    Relist::default().on_event(&Pools::<InClusterIPPool>::of(index), Event::Apply(pool));
}

/// A pool being deleted keeps its finalizer while an IPAddress references it: its view says it is in use until the
/// last one goes, and only then may the pool controller let it go.
#[test]
fn a_pool_being_deleted_is_in_use_until_its_last_ipaddress_goes() {
    let (index, _) = index();
    let mut going = pool("10.0.0.1-10.0.0.2", 1);
    going.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
    feed_pool(&index, going);
    let a = claim("a");
    let object = ip_address("a", "10.0.0.1", &a);
    index.apply_address(&object);
    let in_use = |index: &Index| match index.pool_view(&pool_key(), 5) {
        Some(PoolView::Deleting { in_use, .. }) => in_use,
        other => panic!("a pool being deleted: {other:?}"),
    };
    assert!(in_use(&index), "its IPAddress references it");
    index.address_delete_watched(&key("a"), &object);
    assert!(!in_use(&index), "the last one went");
}

#[test]
fn a_claim_deleted_while_waiting_for_its_cluster_leaves_nothing_behind() {
    let (index, sink) = index();
    let mut waiting = claim("w");
    waiting.cluster = Some(intern("absent"));
    let mut relist = Relist::default();
    relist.on_event(&index, Event::Apply(claim_event(waiting.clone())));
    assert_eq!(sink.take_woken(), [key("w")]);
    // What the worker keeps while the claim waits: when it was first seen, and the Ready state it wrote.
    index.first_seen(&waiting);
    index.remember_written(&waiting, Some(7));
    assert_eq!(index.books(), 1);
    relist.on_event(&index, Event::Delete(claim_event(waiting.clone())));
    assert_eq!(index.books(), 0, "the claim's bookkeeping outlived it");
    assert!(index.claim(&key("w")).is_none());
    assert_eq!(*sink.gone.lock(), [key("w")], "its IPAddress, if any, is checked at once");
    // A late write of a worker that was still running is not kept either.
    index.remember_written(&waiting, Some(8));
    assert_eq!(index.books(), 0);
}

#[test]
fn a_relist_after_410_gone_forgets_what_vanished_and_frees_its_address() {
    let (index, sink) = index();
    feed_pool(&index, pool("10.0.0.1-10.0.0.2", 1));
    let (a, b) = (claim("a"), claim("b"));
    let mut relist = Relist::default();
    for event in [Event::Init, Event::InitApply(ip_address("a", "10.0.0.1", &a)), Event::InitDone] {
        relist.on_event(&index, event);
    }
    relist.on_event(&index, Event::Apply(ip_address("b", "10.0.0.2", &b)));
    assert_eq!(index.pool_counts(&pool_key()).0.free, 0);
    // A claim waits for a free address.
    index.wait_for_address(&pool_key(), &key("c"));
    sink.take_woken();
    // The watch expired (410) and relists: `a` was deleted while no watch saw it.
    assert!(!relist.on_event(&index, Event::<IpAddress>::Init));
    relist.on_event(&index, Event::InitApply(ip_address("b", "10.0.0.2", &b)));
    assert!(relist.on_event(&index, Event::<IpAddress>::InitDone), "the relist is complete");
    assert!(index.address(&key("a")).is_none());
    assert!(index.address(&key("b")).is_some(), "what was listed again stays");
    assert_eq!(index.pool_counts(&pool_key()).0.free, 1, "the vanished IPAddress's address is free");
    let woken = sink.take_woken();
    assert!(woken.contains(&key("c")), "the waiting claim is woken: {woken:?}");
    assert!(woken.contains(&key("a")), "the claim of the vanished IPAddress gets another look: {woken:?}");
}

#[test]
fn a_relist_of_claims_forgets_the_claims_deleted_meanwhile() {
    let (index, sink) = index();
    let mut relist = Relist::default();
    for event in [
        Event::Init,
        Event::InitApply(claim_event(claim("a"))),
        Event::InitApply(claim_event(claim("b"))),
        Event::InitDone,
    ] {
        relist.on_event(&index, event);
    }
    index.first_seen(&claim("b"));
    for event in [Event::Init, Event::InitApply(claim_event(claim("a"))), Event::InitDone] {
        relist.on_event(&index, event);
    }
    assert_eq!(index.claim_keys(), [key("a")]);
    assert_eq!(*sink.gone.lock(), [key("b")]);
    assert_eq!(index.books(), 0);
}

#[test]
fn an_ipaddress_seen_holds_its_address_and_wakes_the_claim_of_its_name() {
    let (index, sink) = index();
    feed_pool(&index, pool("10.0.0.1-10.0.0.3", 1));
    sink.take_woken();
    let a = claim("a");
    index.apply_address(&ip_address("a", "10.0.0.1", &a));
    assert_eq!(sink.take_woken(), [key("a")]);
    assert_eq!(
        index
            .write(|s| s.registry().allocate(&pool_key(), &key("b"), None, &Claimant::default()))
            .expect("free")
            .address
            .to_string(),
        "10.0.0.2"
    );
    // Seen again under another name with the same address: a duplicate, and both claims are woken.
    index.apply_address(&ip_address("x", "10.0.0.1", &claim("x")));
    assert_eq!(index.duplicates(&pool_key()).len(), 1);
    assert_eq!(sink.take_woken(), [key("a"), key("x")]);
}

#[test]
fn an_ipaddress_we_deleted_is_not_brought_back_by_a_late_event() {
    let (index, _sink) = index();
    feed_pool(&index, pool("10.0.0.1", 1));
    let a = claim("a");
    let address = ip_address("a", "10.0.0.1", &a);
    index.apply_address(&address);
    index.address_deleted_by_us(&key("a"), &pool_key(), address.metadata.uid.as_deref());
    // The event of our finalizer removal arrives after the delete.
    index.apply_address(&address);
    assert!(index.address(&key("a")).is_none());
    assert_eq!(index.pool_counts(&pool_key()).0.free, 1);
    // A relist that still lists it (its deletion not done yet) keeps the tombstone: a later event of it is as stale.
    index.addresses_listing();
    index.apply_address(&address);
    index.addresses_listed();
    index.apply_address(&address);
    assert!(index.address(&key("a")).is_none(), "a tombstone listed again was dropped");
    assert_eq!(index.pool_counts(&pool_key()).0.free, 1);
    // Once the watch lists again without it, the tombstone goes; a new object of the name counts again.
    index.address_gone(&key("a"), None);
    index.addresses_listed();
    let mut again = ip_address("a", "10.0.0.1", &a);
    again.metadata.uid = Some("30000000-0000-0000-0000-000000000001".to_owned());
    index.apply_address(&again);
    assert!(index.address(&key("a")).is_some());
}

/// An IPAddress deleted from under its live claim (its finalizer stripped by a person or a
/// tool) freed its address and woke a waiter before the loss was recorded for the claim: the waiter took the address
/// the claim's machine still uses. The hold stays for the claim, which makes its IPAddress again with it.
#[test]
fn an_ipaddress_deleted_from_under_its_live_claim_keeps_its_address_for_that_claim_and_wakes_no_waiter() {
    let (index, sink) = index();
    feed_pool(&index, pool("10.0.0.1-10.0.0.2", 1));
    let (a, b) = (claim("a"), claim("b"));
    index.apply_claim(a.clone());
    index.apply_address(&ip_address("a", "10.0.0.2", &a));
    index.apply_address(&ip_address("b", "10.0.0.1", &b));
    index.wait_for_address(&pool_key(), &key("w"));
    sink.take_woken();
    index.address_gone(&key("a"), None);
    let woken = sink.take_woken();
    assert!(!woken.contains(&key("w")), "no waiter is woken for an address its claim keeps: {woken:?}");
    assert!(woken.contains(&key("a")), "the claim makes its IPAddress again: {woken:?}");
    assert_eq!(index.pool_counts(&pool_key()).0.free, 0, "the address is not free");
    let w = claim("w");
    assert!(matches!(index.allocate(&w, &pool_key(), None), Err(AllocateError::Exhausted { .. })));
    assert_eq!(index.allocate(&a, &pool_key(), None).expect("its own").address.to_string(), "10.0.0.2");
    assert!(index.holds_unconfirmed(&pool_key(), &key("a")), "held as an uncertain create's, until it is made");
    // Once the claim goes, the hold goes the way an uncertain create's does (its worker finds out).
    index.delete_claim(&key("a"));
    assert_eq!(index.orphaned_hold(&key("a")), Some(pool_key()));
    index.give_up_gone_claims_hold(&pool_key(), &key("a"));
    assert_eq!(index.pool_counts(&pool_key()).0.free, 1);
    assert!(sink.take_woken().contains(&key("w")), "now the waiter is woken");
}

/// helper-11's review: the watch shows the IPAddress our create made, and then its deletion (a person stripped its
/// finalizer), before the create's answer arrives; the claim goes meanwhile. The answer must not confirm the hold: a
/// confirmed hold with no record is released by nothing (no orphan check, no sweep) for the rest of the term.
#[test]
fn the_answer_of_a_create_whose_ipaddress_is_gone_already_leaves_its_hold_to_be_settled() {
    let (index, sink) = index();
    feed_pool(&index, pool("10.0.0.1", 1));
    let a = claim("a");
    index.apply_claim(a.clone());
    assert_eq!(index.allocate(&a, &pool_key(), None).expect("free").address.to_string(), "10.0.0.1");
    let mut created = ip_address("a", "10.0.0.1", &a);
    created.metadata.resource_version = Some("5".to_owned());
    index.apply_address(&created);
    index.address_gone(&key("a"), None);
    index.delete_claim(&key("a"));
    let (record, _) = index.address_created(&a, &created);
    assert!(record.is_none(), "gone already: not recorded");
    assert_eq!(index.orphaned_hold(&key("a")), Some(pool_key()), "its worker settles the hold");
    index.give_up_gone_claims_hold(&pool_key(), &key("a"));
    assert_eq!(index.pool_counts(&pool_key()).0.free, 1);
    let w = claim("w");
    index.wait_for_address(&pool_key(), &key("w"));
    sink.take_woken();
    assert!(index.allocate(&w, &pool_key(), None).is_ok(), "the address is free again");
}

/// A claim deleted while the create of its IPAddress was in flight: its Delete event's orphan check found no
/// IPAddress yet, so the answer of the create asks for that check again (else only the sweep released it, after
/// `--orphan-release-delay`: the chaos suite's churn found it). A claim still here asks for nothing.
#[test]
fn the_answer_of_a_create_for_a_claim_gone_meanwhile_has_its_ipaddress_checked_again() {
    let (index, sink) = index();
    feed_pool(&index, pool("10.0.0.1-10.0.0.2", 1));
    let (a, b) = (claim("a"), claim("b"));
    index.apply_claim(a.clone());
    index.apply_claim(b.clone());
    index.allocate(&a, &pool_key(), None).expect("free");
    index.allocate(&b, &pool_key(), None).expect("free");
    index.delete_claim(&key("a"));
    assert_eq!(sink.gone.lock().drain(..).collect::<Vec<_>>(), vec![key("a")], "the Delete event's check");
    let (record, _) = index.address_created(&a, &ip_address("a", "10.0.0.1", &a));
    assert!(record.is_some(), "recorded");
    assert_eq!(sink.gone.lock().drain(..).collect::<Vec<_>>(), vec![key("a")], "checked again, now with a record");
    let (record, _) = index.address_created(&b, &ip_address("b", "10.0.0.2", &b));
    assert!(record.is_some(), "recorded");
    assert!(sink.gone.lock().is_empty(), "a claim still here is no orphan");
    assert!(index.orphans().iter().any(|(k, _)| *k == key("a")), "and the sweep would find it too");
}

/// The pool's status counts what every manager watching the pool sees (its IPAddresses, reservations and pins), not a
/// hold only this one knows of (a create in flight): two managers of different shards sharing a pool without the
/// label would otherwise rewrite each other's status for ever (the simulation's second manager found it). Allocation
/// still counts that hold.
#[test]
fn the_status_counts_leave_out_a_hold_no_ipaddress_confirms() {
    let (index, _sink) = index();
    feed_pool(&index, pool("10.0.0.1-10.0.0.2", 1));
    let a = claim("a");
    index.apply_claim(a.clone());
    index.allocate(&a, &pool_key(), None).expect("free");
    let status = |index: &Index| index.read(|s| s.status_counts(&pool_key()).0);
    assert_eq!((status(&index).used, status(&index).free), (0, 2), "in flight: not in the status");
    assert_eq!(index.pool_counts(&pool_key()).0.free, 1, "but not free to allocate");
    index.address_created(&a, &ip_address("a", "10.0.0.1", &a));
    assert_eq!((status(&index).used, status(&index).free), (1, 1), "created: in the status");
}

/// Soak seed 700007091: a record of our own create that a relist of the watch did not show is this manager's
/// knowledge alone until a read tells whether the object is gone: the status leaves it out (another manager watching
/// the pool does not count it, and the two rewrote each other's status until that read), while allocation still holds
/// its address. The status is written again when the doubt comes and when it ends, however it ends.
#[test]
fn the_status_counts_leave_out_a_record_a_relist_did_not_show() {
    for ends in ["a read of the doubt", "the watch's event", "the watch's event of another object of the name"] {
        let (index, _sink) = index();
        feed_pool(&index, pool("10.0.0.1-10.0.0.2", 1));
        let a = claim("a");
        index.apply_claim(a.clone());
        index.allocate(&a, &pool_key(), None).expect("free");
        let mut created = ip_address("a", "10.0.0.1", &a);
        created.metadata.resource_version = Some("5".to_owned());
        index.address_created(&a, &created);
        let used = |index: &Index| index.read(|s| s.status_counts(&pool_key()).0.used);
        assert_eq!(used(&index), 1, "created: in the status ({ends})");
        index.take_changed_pools(10);
        index.addresses_listing();
        index.addresses_listed();
        assert_eq!(used(&index), 0, "not listed: left out of the status ({ends})");
        assert_eq!(index.pool_counts(&pool_key()).0.free, 1, "but not free to allocate ({ends})");
        assert_eq!(index.take_changed_pools(10), [pool_key()], "the status is written again ({ends})");
        match ends {
            "a read of the doubt" => {
                index.doubt_resolved(&key("a"), created.metadata.uid.as_deref().map(Uid::of), Some(&created));
            }
            "the watch's event" => {
                index.apply_address(&created);
            }
            _ => {
                // Made again since (a GitOps tool, a person), holding the same address: news newer than the record.
                let mut again = created.clone();
                again.metadata.uid = Some("30000000-0000-0000-0000-000000000001".to_owned());
                again.metadata.resource_version = Some("40".to_owned());
                index.apply_address(&again);
            }
        }
        assert_eq!(used(&index), 1, "there: in the status again ({ends})");
        assert_eq!(index.take_changed_pools(10), [pool_key()], "and written again ({ends})");
    }
}

/// Helper-103 F2, helper-104 G3: an answer to a read or write of ours may be of a request sent before the relist that
/// left a record in doubt, and older news than that list (the object may be gone since): it leaves the doubt, whatever
/// its version, for the read of the doubt to resolve.
#[test]
fn an_answer_to_a_request_of_ours_does_not_end_a_doubt() {
    for version in ["5", "12"] {
        let (index, _sink) = index();
        feed_pool(&index, pool("10.0.0.1-10.0.0.3", 1));
        let a = claim("a");
        index.apply_claim(a.clone());
        index.allocate(&a, &pool_key(), None).expect("free");
        let mut created = ip_address("a", "10.0.0.1", &a);
        created.metadata.resource_version = Some("5".into());
        index.address_created(&a, &created);
        index.addresses_listing();
        let mut listed = ip_address("b", "10.0.0.2", &claim("b"));
        listed.metadata.resource_version = Some("9".into());
        index.apply_address(&listed);
        index.addresses_listed();
        let in_doubt = |index: &Index| index.address(&key("a")).is_some_and(|r| r.doubtful);
        assert!(in_doubt(&index), "not listed: in doubt");
        let mut answered = created.clone();
        answered.metadata.resource_version = Some(version.into());
        index.remember_address(&key("a"), &answered);
        assert!(in_doubt(&index), "an answer of version {version} ended the doubt");
        assert_eq!(index.read(|s| s.status_counts(&pool_key()).0.used), 1, "b only (version {version})");
    }
}

/// An IPAddress deleted while its claim is gone, or being deleted, frees its address at once.
#[test]
fn an_ipaddress_deleted_without_a_live_claim_frees_its_address() {
    let (index, _sink) = index();
    feed_pool(&index, pool("10.0.0.1-10.0.0.2", 1));
    let mut a = claim("a");
    a.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH));
    index.apply_claim(a.clone());
    index.apply_address(&ip_address("a", "10.0.0.2", &a));
    index.address_gone(&key("a"), None);
    assert_eq!(index.pool_counts(&pool_key()).0.free, 2);
}

#[test]
fn pool_changes_wake_the_claims_of_the_pool_unless_it_is_paused() {
    let (index, sink) = index();
    index.apply_claim(claim("a"));
    let mut other = claim("o");
    other.pool_name = intern("other");
    index.apply_claim(other);
    sink.take_woken();
    feed_pool(&index, pool("10.0.0.1", 1));
    assert_eq!(sink.take_woken(), [key("a")], "created");
    assert_eq!(*sink.pools.lock(), [pool_key()], "the pool itself is reconciled");
    feed_pool(&index, pool("10.0.0.1", 1));
    assert!(sink.take_woken().is_empty(), "nothing changed");
    let mut paused = pool("10.0.0.1-10.0.0.2", 2);
    paused.metadata.annotations = Some([(crate::api::PAUSED_ANNOTATION.to_owned(), String::new())].into());
    feed_pool(&index, paused.clone());
    assert!(sink.take_woken().is_empty(), "paused: no claim moves");
    assert!(index.pool(&pool_key()).is_some_and(|p| p.is_paused()));
    feed_pool(&index, pool("10.0.0.1-10.0.0.2", 2));
    assert_eq!(sink.take_woken(), [key("a")], "unpaused");
    let PoolSpec::Ip(spec) = &index.pool(&pool_key()).expect("pool").spec else { panic!("an IP pool") };
    assert_eq!(spec.addresses, ["10.0.0.1-10.0.0.2"]);
    // Deleted: its claims are told (they report the pool missing), and the spec leaves the allocator.
    index.delete_pool(&pool_key());
    assert_eq!(sink.take_woken(), [key("a")]);
    assert!(matches!(
        index.write(|s| s.registry().allocate(&pool_key(), &key("a"), None, &Claimant::default())),
        Err(AllocateError::Unknown { .. })
    ));
}

#[test]
fn a_pool_relist_forgets_only_pools_of_its_own_kind() {
    let (index, _sink) = index();
    feed_pool(&index, pool("10.0.0.1", 1));
    let global = PoolKey::new(PoolKind::GlobalInClusterIPPool, "", "g");
    let spec: IPPoolSpec = serde_json::from_value(json!({"addresses": ["10.1.0.1"], "prefix": 24})).expect("spec");
    let g = crate::api::v1alpha2::GlobalInClusterIPPool::new("g", spec.into());
    index.apply_pool(g.into_pool());
    let mut relist = Relist::default();
    for event in [Event::Init, Event::InitDone] {
        relist.on_event(&Pools::<InClusterIPPool>::of(&index), event);
    }
    assert!(index.pool(&pool_key()).is_none());
    assert!(index.pool(&global).is_some());
}

#[test]
fn a_cluster_that_appears_or_is_unpaused_wakes_its_claims() {
    let (index, sink) = index();
    let mut c = claim("a");
    c.cluster = Some(intern("demo"));
    index.apply_claim(c);
    index.apply_claim(claim("b"));
    sink.take_woken();
    let cluster = |paused: bool| Cluster {
        metadata: ObjectMeta { name: Some("demo".into()), namespace: Some("ns".into()), ..ObjectMeta::default() },
        paused,
        watch_filter: None,
    };
    let mut relist = Relist::default();
    relist.on_event(&index, Event::Apply(cluster(true)));
    assert!(sink.take_woken().is_empty());
    assert_eq!(index.cluster_paused("ns", "demo"), Some(true));
    relist.on_event(&index, Event::Apply(cluster(false)));
    assert_eq!(sink.take_woken(), [key("a")]);
    relist.on_event(&index, Event::Apply(cluster(false)));
    assert!(sink.take_woken().is_empty(), "no change");
    relist.on_event(&index, Event::Delete(cluster(false)));
    assert_eq!(index.cluster_paused("ns", "demo"), None);
}

#[test]
fn orphans_are_ipaddresses_of_claims_gone_whose_cluster_is_not_paused() {
    let (index, _sink) = index();
    feed_pool(&index, pool("10.0.0.1-10.0.0.9", 1));
    let live = claim("live");
    index.apply_claim(live.clone());
    index.apply_address(&ip_address("live", "10.0.0.1", &live));
    index.apply_address(&ip_address("gone", "10.0.0.2", &claim("gone")));
    let mut moving = claim("moving");
    moving.cluster = Some(intern("demo"));
    index.apply_address(&ip_address("moving", "10.0.0.3", &moving));
    // Our finalizer already off (a delete that did not finish): still made for a claim of our pool.
    let mut unprotected = ip_address("unprotected", "10.0.0.4", &claim("unprotected"));
    unprotected.metadata.finalizers = None;
    index.apply_address(&unprotected);
    // Not made for a claim (no claim owner, not our finalizer): never ours to release.
    let mut foreign = ip_address("foreign", "10.0.0.6", &claim("foreign"));
    foreign.metadata.owner_references = None;
    foreign.metadata.finalizers = None;
    index.apply_address(&foreign);
    // Ours, its claim's owner reference taken off by the garbage collector (the pool still owns it): an orphan.
    let mut collected = ip_address("collected", "10.0.0.7", &claim("collected"));
    collected.metadata.owner_references = None;
    index.apply_address(&collected);
    // Being deleted already, by a delete that did not finish.
    let mut deleting = ip_address("deleting", "10.0.0.5", &claim("deleting"));
    deleting.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
    index.apply_address(&deleting);
    index.apply_cluster(ObjectKey::new("ns", "demo"), true);
    let names = |index: &Index| {
        let mut names: Vec<String> = index.orphans().into_iter().map(|(k, _)| k.name.to_string()).collect();
        names.sort();
        names
    };
    assert_eq!(names(&index), ["collected", "deleting", "gone", "unprotected"]);
    index.apply_cluster(ObjectKey::new("ns", "demo"), false);
    assert_eq!(names(&index), ["collected", "deleting", "gone", "moving", "unprotected"]);
}

/// What is kept per claim and per IPAddress, 100,000 of each (the memory target of docs/performance.md): a field
/// that grows one of these shows here first.
#[test]
fn what_is_kept_per_object_stays_small() {
    use std::mem::size_of;
    // 248 bytes with the address its condition names (a bound claim's one durable trace of it) and its creation time
    // (for the restore wait): 1.6 MB more for 100,000.
    assert!(size_of::<Claim>() <= 248, "Claim: {} bytes", size_of::<Claim>());
    // 104 bytes with clusterctl's `delete-for-move` and our moved-away mark apart, and its creation time (which of
    // two holders came second): 0.8 MB more for 100,000.
    assert!(size_of::<AddressRecord>() <= 104, "AddressRecord: {} bytes", size_of::<AddressRecord>());
    assert!(size_of::<Held>() <= 20, "Held: {} bytes", size_of::<Held>());
    assert_eq!(size_of::<ObjectKey>(), 32);
}

#[test]
fn changed_pools_take_turns_for_their_status() {
    let (index, _) = index();
    let pools: Vec<PoolKey> = ["a", "b", "c"]
        .iter()
        .map(|name| {
            let mut p = pool("10.0.0.1-10.0.0.9", 1);
            p.metadata.name = Some((*name).to_owned());
            feed_pool(&index, p);
            PoolKey::new(crate::api::PoolKind::InClusterIPPool, "ns", name)
        })
        .collect();
    assert_eq!(index.take_changed_pools(1), [pools[0].clone()]);
    // Changed again while waiting: it keeps its place; taken and changed again: to the back.
    for p in [&pools[1], &pools[0]] {
        index.write(|s| s.registry().allocate(p, &key("x"), None, &Claimant::default())).expect("an address");
    }
    assert_eq!(index.take_changed_pools(1), [pools[1].clone()]);
    assert_eq!(index.take_changed_pools(5), [pools[2].clone(), pools[0].clone()]);
    assert!(index.take_changed_pools(5).is_empty());
}

#[test]
fn claims_waiting_for_an_address_are_woken_first() {
    let (index, sink) = index();
    let mut relist = Relist::default();
    let mut bound = claim("bound");
    bound.bound = Some(Box::default());
    let mut deleting = claim("deleting");
    deleting.deletion_timestamp = Some(Time(jiff::Timestamp::now()));
    for c in [bound, claim("waiting"), deleting] {
        relist.on_event(&index, Event::Apply(claim_event(c)));
    }
    assert_eq!(sink.take_woken(), [key("bound"), key("deleting"), key("waiting")]);
    assert_eq!(*sink.first.lock(), [key("waiting")]);
}

#[test]
fn the_metrics_count_claims_waiting_until_bound_deleted_or_the_term_ends() {
    let recorder = Arc::new(Recorder::default());
    let metrics = Arc::new(crate::metrics::Metrics::new());
    let index: Arc<Index> = Arc::new(Index::new(recorder));
    let source: Arc<dyn crate::metrics::WaitingClaims> = index.clone();
    metrics.watch_waiting(Arc::downgrade(&source));
    drop(source);
    let mut relist = Relist::default();
    for c in ["a", "b", "c"] {
        relist.on_event(&*index, Event::Apply(claim_event(claim(c))));
        index.first_seen(&claim(c));
    }
    std::thread::sleep(Duration::from_millis(20));
    index.first_seen(&claim("a")); // seen again: it waits since it was first seen
    let scraped = metrics.encode();
    assert!(scraped.contains("\ncapi_ipam_claims_waiting 3\n"), "{scraped}");
    let longest: f64 = scraped
        .lines()
        .find_map(|l| l.strip_prefix("capi_ipam_claims_waiting_longest_seconds "))
        .and_then(|v| v.parse().ok())
        .expect("the longest wait");
    assert!(longest >= 0.02, "{longest}");

    index.bound(&claim("a"));
    assert_eq!(index.allocation_latency(&claim("b")).map(|d| d >= Duration::from_millis(20)), Some(true));
    relist.on_event(&*index, Event::Delete(claim_event(claim("c"))));
    assert!(metrics.encode().contains("\ncapi_ipam_claims_waiting 0\n"));

    relist.on_event(&*index, Event::Apply(claim_event(claim("d"))));
    index.first_seen(&claim("d"));
    assert!(metrics.encode().contains("\ncapi_ipam_claims_waiting 1\n"));
    drop(index);
    let after_the_term = metrics.encode();
    assert!(after_the_term.contains("\ncapi_ipam_claims_waiting 0\n"), "{after_the_term}");
    assert!(after_the_term.contains("\ncapi_ipam_claims_waiting_longest_seconds 0.0\n"), "{after_the_term}");
}

/// The same claim name again, with another UID: the second incarnation of `name`.
fn incarnation(name: &str, n: u8) -> Claim {
    let mut c = claim(name);
    c.uid = crate::compact::UidText::of(&format!("00000000-0000-0000-00{n:02x}-000000000000"));
    c
}

/// The IPAddress `name` holding `address`, with UID number `n` (a new object of the same name has another).
fn ip_address_uid(name: &str, address: &str, owner: &Claim, n: u8) -> IpAddress {
    let mut a = ip_address(name, address, owner);
    a.metadata.uid = Some(format!("40000000-0000-0000-00{n:02x}-000000000000"));
    a
}

/// Claim `x` is deleted and its IPAddress (u1) with it; a new claim `x` gets a new IPAddress `x`
/// (u2), recorded from our own write; the watch, behind, then delivers u1's DELETED. It must not free u2's address.
#[test]
fn a_late_delete_event_of_an_old_ipaddress_leaves_its_same_named_replacement_alone() {
    let (index, _sink) = index();
    feed_pool(&index, pool("10.0.0.1-10.0.0.3", 1));
    let mut relist = Relist::default();
    let old = ip_address_uid("x", "10.0.0.1", &incarnation("x", 1), 1);
    relist.on_event(&index, Event::Apply(old.clone()));
    index.address_deleted_by_us(&key("x"), &pool_key(), old.metadata.uid.as_deref());
    // The new claim x: its address is held, created and recorded as `controllers::claim` does.
    let assigned =
        index.write(|s| s.registry().allocate(&pool_key(), &key("x"), None, &Claimant::default())).expect("free");
    let new = ip_address_uid("x", &assigned.address.to_string(), &incarnation("x", 2), 2);
    index.write(|s| s.registry().confirm(&pool_key(), &key("x")));
    index.remember_address(&key("x"), &new);
    relist.on_event(&index, Event::Delete(old));
    let next =
        index.write(|s| s.registry().allocate(&pool_key(), &key("y"), None, &Claimant::default())).expect("free");
    assert_ne!(next.address, assigned.address, "the address of the live IPAddress x was handed out again");
    assert!(index.address(&key("x")).is_some(), "the record of the live IPAddress x is gone");
    // Its own ADDED event, when it comes, changes nothing.
    relist.on_event(&index, Event::Apply(new));
    assert!(index.duplicates(&pool_key()).is_empty());
}

/// A relist that still lists an IPAddress we deleted (the list was served before
/// the delete) must keep its tombstone, or the watch's late MODIFIED event brings the record back.
#[test]
fn a_relist_that_still_lists_an_ipaddress_we_deleted_keeps_it_deleted() {
    let (index, _sink) = index();
    feed_pool(&index, pool("10.0.0.1-10.0.0.3", 1));
    let mut relist = Relist::default();
    let a = ip_address_uid("a", "10.0.0.1", &incarnation("a", 1), 1);
    relist.on_event(&index, Event::Apply(a.clone()));
    relist.on_event(&index, Event::<IpAddress>::Init);
    index.address_deleted_by_us(&key("a"), &pool_key(), a.metadata.uid.as_deref());
    relist.on_event(&index, Event::InitApply(a.clone()));
    relist.on_event(&index, Event::<IpAddress>::InitDone);
    let mut finalizer_removed = a.clone();
    finalizer_removed.metadata.finalizers = None;
    relist.on_event(&index, Event::Apply(finalizer_removed));
    assert!(index.address(&key("a")).is_none(), "a late event of the deleted IPAddress brought its record back");
    assert_eq!(index.pool_counts(&pool_key()).0.used, 0);
    // Its DELETED event ends the tombstone; a new object of the name counts again.
    relist.on_event(&index, Event::Delete(a));
    index.apply_address(&ip_address_uid("a", "10.0.0.1", &incarnation("a", 2), 2));
    assert_eq!(index.pool_counts(&pool_key()).0.used, 1);
}

/// Soak seed 90039322's guard: our DELETE of an IPAddress its finalizer holds answers with it being deleted, and that
/// answer is recorded; the watch, behind, then delivers the object's ADDED event, older than the answer. It is no news:
/// taken for news, the record says the IPAddress lives, and the claim of its name is bound to the one we deleted.
#[test]
fn an_older_event_of_an_ipaddress_does_not_undo_our_record_of_its_deletion() {
    let (index, _sink) = index();
    feed_pool(&index, pool("10.0.0.1-10.0.0.3", 1));
    let mut added = ip_address("a", "10.0.0.1", &claim("a"));
    added.metadata.resource_version = Some("5".to_owned());
    index.remember_address(&key("a"), &added);
    let mut deleting = added.clone();
    deleting.metadata.resource_version = Some("7".to_owned());
    deleting.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
    index.deleting_ourselves(&key("a"), crate::compact::Uid::of(added.metadata.uid.as_deref().unwrap_or_default()));
    index.remember_address(&key("a"), &deleting);
    assert!(index.address(&key("a")).is_some_and(|r| r.deleting), "our DELETE's answer was not recorded");
    index.apply_address(&added);
    assert!(index.address(&key("a")).is_some_and(|r| r.deleting), "the older ADDED event undid our record");
    // The watch's own event of the deletion, when it comes, is news again.
    let mut gone_finalizer = deleting.clone();
    gone_finalizer.metadata.resource_version = Some("8".to_owned());
    gone_finalizer.metadata.finalizers = None;
    index.apply_address(&gone_finalizer);
    assert!(index.address(&key("a")).is_some_and(|r| r.deleting && !r.protected), "a newer event was taken for stale");
}

/// An IP pool changed to the other family and back keeps every address in use.
#[test]
fn a_family_change_and_back_keeps_every_address_in_use() {
    let (index, _sink) = index();
    feed_pool(&index, pool("10.0.0.1-10.0.0.2", 1));
    index.apply_address(&ip_address_uid("a", "10.0.0.1", &incarnation("a", 1), 1));
    feed_pool(&index, pool("fd00::1-fd00::2", 2));
    feed_pool(&index, pool("10.0.0.1-10.0.0.2", 3));
    let next =
        index.write(|s| s.registry().allocate(&pool_key(), &key("b"), None, &Claimant::default())).expect("free");
    assert_eq!(next.address.to_string(), "10.0.0.2", "10.0.0.1 is held by IPAddress a");
    assert!(index.duplicates(&pool_key()).is_empty());
    let counts = index.pool_counts(&pool_key()).0;
    assert_eq!((counts.used, counts.out_of_range, counts.free), (2, 0, 0));
}

pub(crate) fn global_pool(revision: u64, moved_away: Option<&str>) -> crate::api::v1alpha2::GlobalInClusterIPPool {
    let spec: IPPoolSpec =
        serde_json::from_value(json!({"addresses": ["10.1.0.1-10.1.0.2"], "prefix": 24})).expect("spec");
    let mut g = crate::api::v1alpha2::GlobalInClusterIPPool::new("g", spec.into());
    g.metadata.uid = Some("20000000-0000-0000-0000-000000000002".to_owned());
    g.metadata.resource_version = Some(revision.to_string());
    g.metadata.annotations = moved_away.map(|v| [(crate::api::MOVED_AWAY_ANNOTATION.to_owned(), v.to_owned())].into());
    g
}

/// Claim `x` of the global pool `g`, marked as going for a move, and its IPAddress holding 10.1.0.1.
pub(crate) fn moving_away_claim_of_global_pool(index: &Index) -> crate::capi::IpAddress {
    let mut x = incarnation("x", 1);
    x.pool_kind = Some(PoolKind::GlobalInClusterIPPool);
    x.pool_name = intern("g");
    x.moving_away = true;
    let mut address = ip_address_uid("x", "10.1.0.1", &x, 1);
    address.spec.pool_ref.kind = "GlobalInClusterIPPool".to_owned();
    address.spec.pool_ref.name = "g".to_owned();
    index.apply_claim(x);
    index.apply_address(&address);
    address
}

/// A pool event older than our write of the moved-away annotation (the status writer's, still in
/// the watch) must not end the reservation it does not show yet.
#[test]
fn a_pool_event_older_than_our_annotation_write_keeps_the_reservation() {
    use crate::api::v1alpha2::GlobalInClusterIPPool;
    let (index, _sink) = index();
    let global = PoolKey::new(PoolKind::GlobalInClusterIPPool, "", "g");
    let feed = |g: GlobalInClusterIPPool| {
        Relist::default().on_event(&Pools::<GlobalInClusterIPPool>::of(&index), Event::Apply(g));
    };
    feed(global_pool(10, None));
    let address = moving_away_claim_of_global_pool(&index);
    // clusterctl deletes the claim for a move: its address goes into the annotation, and once the IPAddress left
    // behind is released, the address is a reservation.
    index.delete_claim(&key("x"));
    Relist::default().on_event(&index, Event::Delete(address));
    assert_eq!(index.reservations(&global).len(), 1);
    let changes = index.moved_away_view(&global).pending;
    assert_eq!(changes, [("10.1.0.1@ns/x".to_owned(), true)].into(), "the entry names the IPAddress that moved");
    index.moved_away_written(&global, &changes, Some(crate::compact::ResourceVersion::of("12")));
    // The status writer's event from before our write arrives late, without the annotation.
    feed(global_pool(11, None));
    let next = index.write(|s| s.registry().allocate(&global, &key("y"), None, &Claimant::default())).expect("free");
    assert_eq!(next.address.to_string(), "10.1.0.2", "the reserved address was handed out again");
    // Our write's event, then an operator's removal of the entry: now the address is free.
    feed(global_pool(12, Some("10.1.0.1@ns/x")));
    assert_eq!(index.reservations(&global).len(), 1);
    feed(global_pool(13, None));
    assert!(index.reservations(&global).is_empty());
    assert_eq!(
        index
            .write(|s| s.registry().allocate(&global, &key("z"), None, &Claimant::default()))
            .expect("free")
            .address
            .to_string(),
        "10.1.0.1"
    );
}

/// The adversarial read of the soak's fixes: the writer read the pool's pending entries, found the pool gone, and
/// dropped the whole ledger, also an entry queued while it read (a pool of the name appeared meanwhile and queued the
/// entry of an IPAddress a move left behind in it). Only what it read goes.
#[test]
fn a_writer_that_finds_the_pool_gone_drops_only_the_entries_it_read() {
    let (index, _sink) = index();
    let global = feed_global_pool(&index);
    moving_away_claim_of_global_pool(&index);
    index.delete_claim(&key("x"));
    let read = index.moved_away_view(&global).pending;
    assert_eq!(read.len(), 1, "the move queued its entry");
    // While the writer reads the pool, another entry is queued (here by hand: what `pool_appeared` does).
    index.write(|s| s.queue_moved_away(&global, "10.1.0.2@ns/y".to_owned(), true));
    index.moved_away_written(&global, &read, None);
    let left = index.moved_away_view(&global).pending;
    assert_eq!(left, [("10.1.0.2@ns/y".to_owned(), true)].into(), "the entry queued after the read was dropped");
}

/// A read of the allocation path found a claim whose name another provider's IPAddress held never woken when that
/// IPAddress changed or went (the watch returned before any wake for objects outside our pools), nor after a relist
/// that no longer listed it.
#[test]
fn a_claim_blocked_by_another_providers_ipaddress_is_woken_when_it_goes_or_a_relist_may_have_missed_it() {
    let (index, sink) = index();
    feed_pool(&index, pool("10.0.0.1-10.0.0.2", 1));
    let m = claim("m");
    index.apply_claim(m.clone());
    let mut theirs = ip_address("m", "192.0.2.9", &m);
    theirs.spec.pool_ref =
        PoolRef { api_group: Some("ipam.metal3.io".into()), kind: "IPPool".into(), name: "m3".into() };
    sink.take_woken();
    index.apply_address(&theirs);
    assert_eq!(sink.take_woken(), [key("m")], "told when it appears or changes");
    index.address_delete_watched(&key("m"), &theirs);
    assert_eq!(sink.take_woken(), [key("m")], "woken when it goes");
    // Blocked again (its reconcile says it waits for its name); the watch expires and lists again without it (its
    // DELETED event was never seen).
    index.claim_waits(&pool_key(), &key("m"), crate::index::Wait::ItsName);
    index.addresses_listing();
    index.addresses_listed();
    assert_eq!(sink.take_woken(), [key("m")], "woken after the list");
    index.addresses_listing();
    index.addresses_listed();
    assert!(sink.take_woken().is_empty(), "once: it is blocked again only if its reconcile finds it so");
}

/// A pool belongs to the shard its `cluster.x-k8s.io/watch-filter` label names. Its claims are
/// this manager's only when the shard is its own; a claim the pool's shard's manager watches is that manager's; any
/// other is no manager's. Its IPAddresses are never orphans of another shard's manager.
#[test]
fn a_pool_of_another_shard_is_served_by_that_shards_manager_only() {
    let recorder = Arc::new(Recorder::default());
    let index = Index::of_shard(recorder.clone(), Some("a"));
    let labelled = |shard: Option<&str>| {
        let mut p = pool("10.0.0.1-10.0.0.2", 1);
        p.metadata.labels = shard.map(|s| [(crate::api::WATCH_FILTER_LABEL.to_owned(), s.to_owned())].into());
        p
    };
    let of_shard = |name: &str, shard: Option<&str>| Claim { watch_filter: shard.map(intern), ..claim(name) };
    let served = |c: &Claim| index.claim_view(c, pool_key()).served;
    index.apply_claim(of_shard("waiting", Some("a")));
    feed_pool(&index, labelled(Some("b")));
    recorder.take_woken();
    // Relabelled for this manager's shard (as its message tells the operator to): the pool's claims look again.
    feed_pool(&index, labelled(Some("a")));
    assert!(recorder.take_woken().contains(&key("waiting")), "a relabelled pool's claims are woken");
    index.delete_claim(&key("waiting"));
    assert_eq!(served(&of_shard("x", Some("a"))), Served::Here);
    feed_pool(&index, labelled(None));
    assert_eq!(served(&of_shard("x", Some("a"))), Served::Here, "a pool of no shard is any manager's");
    feed_pool(&index, labelled(Some("b")));
    assert_eq!(served(&of_shard("x", Some("b"))), Served::Elsewhere);
    assert!(matches!(served(&of_shard("x", Some("a"))), Served::Nowhere { .. }));
    // A claim of shard b is gone (its IPAddress stays): not an orphan of shard a's manager.
    let gone = of_shard("x", Some("b"));
    index.apply_address(&ip_address("x", "10.0.0.1", &gone));
    assert!(index.orphans().is_empty(), "another shard's pool: {:?}", index.orphans());
    feed_pool(&index, labelled(None));
    assert_eq!(index.orphans().len(), 1, "a pool of no shard: a candidate, until the claim is found alive");
    index.claim_of_another_manager(&key("x"), index.address(&key("x")).and_then(|r| r.uid), Some("b"));
    assert!(index.orphans().is_empty(), "a live claim of another manager: never read again by the sweep");
}

/// helper-23's review: a status left out of an in-flight hold must be written again once the hold is confirmed (the
/// status counts it then): confirming marks the pool changed, as does a hold that goes back to unconfirmed.
#[test]
fn a_hold_confirmed_or_unconfirmed_changes_the_pool_status() {
    let (index, _sink) = index();
    feed_pool(&index, pool("10.0.0.1-10.0.0.2", 1));
    let a = claim("a");
    index.apply_claim(a.clone());
    index.allocate(&a, &pool_key(), None).expect("free");
    index.take_changed_pools(usize::MAX);
    let address = ip_address("a", "10.0.0.1", &a);
    index.address_created(&a, &address);
    assert_eq!(index.take_changed_pools(usize::MAX), vec![pool_key()], "confirmed: the status counts it now");
    index.address_gone(&key("a"), None);
    assert_eq!(index.take_changed_pools(usize::MAX), vec![pool_key()], "unconfirmed again: it does not");
}

/// A claim of a global pool `g`, with Cluster `k`, and the IPAddress its create made.
pub(crate) fn claim_of_global_pool_with_cluster(name: &str) -> (Claim, crate::capi::IpAddress) {
    let mut c = incarnation(name, 1);
    c.pool_kind = Some(PoolKind::GlobalInClusterIPPool);
    c.pool_name = intern("g");
    c.cluster = Some(intern("k"));
    let mut address = ip_address_uid(name, "10.1.0.1", &c, 1);
    address.spec.pool_ref.kind = "GlobalInClusterIPPool".to_owned();
    address.spec.pool_ref.name = "g".to_owned();
    address.metadata.labels = Some([(crate::api::CLUSTER_NAME_LABEL.to_owned(), "k".to_owned())].into());
    (c, address)
}

/// A global pool `g`, and claim `x` of a Cluster holding an address of it; its IPAddress not created yet.
fn claim_x_allocated_from_a_global_pool() -> (Index, Arc<Recorder>, PoolKey, Claim, IpAddress) {
    let (index, sink) = index();
    let global = feed_global_pool(&index);
    let (x, address) = claim_of_global_pool_with_cluster("x");
    index.apply_claim(x.clone());
    index.allocate(&x, &global, None).expect("free");
    (index, sink, global, x, address)
}

/// clusterctl deletes claim `x` for a move (its mark seen with its deletion).
fn deleted_for_a_move(index: &Index, x: &mut Claim) {
    x.moving_away = true;
    index.apply_claim(x.clone());
    index.delete_claim(&key("x"));
}

/// A new claim `x` (another UID, of no Cluster) allocated from the global pool `g`, and the IPAddress its create makes.
fn a_new_claim_x_allocated(index: &Index, global: &PoolKey) -> (Claim, IpAddress) {
    let (mut again, _) = claim_of_global_pool_with_cluster("x");
    again.uid = crate::compact::UidText::of("x-again");
    again.cluster = None;
    index.apply_claim(again.clone());
    let assigned = index.allocate(&again, global, None).expect("a free address");
    let mut created = ip_address_uid("x", &assigned.address.to_string(), &again, 2);
    created.spec.pool_ref.kind = "GlobalInClusterIPPool".to_owned();
    created.spec.pool_ref.name = "g".to_owned();
    (again, created)
}

/// Another object of `address`'s name and spec (a restore, a create again): its own UID, a later resourceVersion.
fn another_object_of(address: &IpAddress, uid: &str) -> IpAddress {
    let mut other = address.clone();
    other.metadata.uid = Some(uid.to_owned());
    other.metadata.resource_version = Some("90".to_owned());
    other
}

/// helper-23's review: clusterctl deletes a claim for a move while the create of its IPAddress is in flight (no record
/// to mark yet). The create's answer records the move before the orphan check it asks for could free the address the
/// moved machine uses.
#[test]
fn a_claim_gone_for_a_move_before_its_create_answered_keeps_its_address_reserved() {
    let (index, _sink, global, mut x, address) = claim_x_allocated_from_a_global_pool();
    deleted_for_a_move(&index, &mut x);
    let (record, _) = index.address_created(&x, &address);
    assert!(record.is_some_and(|r| r.moving_away), "the move is recorded with the IPAddress");
    assert!(index.moved_away_unwritten(&global, &key("x")), "its address is queued for the pool's annotation");
}

/// helper-96 F1: the answer to the create was lost (it landed), and clusterctl deleted the claim for a move before its
/// worker found out: the IPAddress, read by the worker or shown by the watch, records the move, so the address the
/// moved machine uses is reserved, not freed by the orphan check.
///
/// The garbage collector may take the deleted claim's owner reference off first (the pool still owns the object):
/// an IPAddress of the name without a claim owner, holding the address held for the name, records the move too
/// (helper-97 G1).
#[test]
fn a_claim_gone_for_a_move_whose_create_answer_was_lost_keeps_its_address_reserved() {
    for (watch_first, collected) in [(false, false), (true, false), (false, true), (true, true)] {
        let (index, _sink, global, mut x, mut address) = claim_x_allocated_from_a_global_pool();
        if collected {
            address.metadata.owner_references = None;
        }
        deleted_for_a_move(&index, &mut x);
        let record = if watch_first {
            index.apply_address(&address);
            index.address(&key("x"))
        } else {
            index.remember_address(&key("x"), &address)
        };
        assert!(record.is_some_and(|r| r.moving_away), "the move is recorded (watch first: {watch_first})");
        assert!(
            index.moved_away_unwritten(&global, &key("x")),
            "queued for the annotation (watch first: {watch_first})"
        );
    }
}

/// helper-94 R1: a second claim of the name (a move back) is gone for a move too while the first one's create is still
/// in flight, its address held under the name: the first one's answer still records the first one's move.
#[test]
fn a_second_claim_of_the_name_gone_for_a_move_does_not_hide_the_first_ones_create() {
    let (index, _sink, global, mut x, address) = claim_x_allocated_from_a_global_pool();
    deleted_for_a_move(&index, &mut x);
    let mut again = x.clone();
    again.uid = crate::compact::UidText::of("x-again");
    index.apply_claim(again);
    index.delete_claim(&key("x"));
    let (record, _) = index.address_created(&x, &address);
    assert!(record.is_some_and(|r| r.moving_away), "the first claim's move is recorded with its IPAddress");
    assert!(index.moved_away_unwritten(&global, &key("x")), "its address is queued for the pool's annotation");
}

/// helper-93, on seed 650784791's fix: claim `x`, marked for the move, loses its IPAddress and keeps its hold, then
/// goes; its note of a create that might be in flight stays (none was). A new claim `x`, allocated here, is no moved
/// claim when its own create answers.
#[test]
fn a_new_claim_of_the_name_of_a_moved_claim_is_not_taken_for_moved() {
    let (index, _sink, global, mut x, address) = claim_x_allocated_from_a_global_pool();
    index.address_created(&x, &address);
    x.moving_away = true;
    index.apply_claim(x.clone());
    index.address_delete_watched(&key("x"), &address);
    index.delete_claim(&key("x"));
    let (again, created) = a_new_claim_x_allocated(&index, &global);
    let (record, _) = index.address_created(&again, &created);
    assert!(record.is_some_and(|r| !r.moving_away), "the new claim is taken for moved");
}

/// Seed 460384603: claim `x` keeps its hold after its IPAddress was deleted from under it (Velero wiping the
/// namespace), and its deletion is taken for a move (its paused Cluster went too). No create of it was in flight, so it
/// notes none: the IPAddress the restore brings back, with the old claim's owner reference, is no moved one, and the
/// address stays the restored claim's to take.
#[test]
fn a_kept_hold_notes_no_create_for_a_restored_ipaddress_to_take_for_moved() {
    let (index, _sink, _global, mut x, address) = claim_x_allocated_from_a_global_pool();
    index.address_created(&x, &address);
    index.apply_address(&address);
    index.address_delete_watched(&key("x"), &address);
    deleted_for_a_move(&index, &mut x);
    index.apply_address(&another_object_of(&address, "restored"));
    assert!(index.address(&key("x")).is_some_and(|r| !r.moving_away), "the restored IPAddress is taken for moved");
}

/// A claim whose IPAddress was deleted from under it keeps its hold and makes the IPAddress again: that create, in
/// flight when the claim goes for a move and its answer lost, is noted, and the IPAddress its worker then reads
/// records the move (the address is the moved machine's).
#[test]
fn a_kept_hold_making_its_ipaddress_again_notes_that_create() {
    let (index, _sink, global, mut x, address) = claim_x_allocated_from_a_global_pool();
    index.address_created(&x, &address);
    index.apply_address(&address);
    index.address_delete_watched(&key("x"), &address);
    index.allocate(&x, &global, None).expect("its kept hold");
    deleted_for_a_move(&index, &mut x);
    let record = index.remember_address(&key("x"), &another_object_of(&address, "again"));
    assert!(record.is_some_and(|r| r.moving_away), "the move is recorded");
    assert!(index.moved_away_unwritten(&global, &key("x")), "its address is queued for the pool's annotation");
}

/// helper-98 H1: a note outlives the create it was for (the claim gone for a move, its create found never to have
/// landed, its hold given up). A new claim of the name binds its own IPAddress; a later event of that object without a
/// claim owner (the garbage collector took a dangling one off after a restore) is no unanswered create of ours, and
/// takes no note: the address stays the claim's.
#[test]
fn a_later_ownerless_event_of_a_recorded_ipaddress_takes_no_left_over_note() {
    let (index, _sink, global, mut x, _address) = claim_x_allocated_from_a_global_pool();
    deleted_for_a_move(&index, &mut x);
    index.give_up_uncertain_create(&global, &key("x"));
    let (again, created) = a_new_claim_x_allocated(&index, &global);
    index.address_created(&again, &created);
    index.apply_address(&created);
    let mut collected = created.clone();
    collected.metadata.owner_references = None;
    collected.metadata.resource_version = Some("95".to_owned());
    index.apply_address(&collected);
    assert!(index.address(&key("x")).is_some_and(|r| !r.moving_away), "the claim's own IPAddress is taken for moved");
}

/// helper-97 G2: a new term holds the address of a bound claim whose IPAddress is gone (`hold_bound_addresses`): no
/// create is behind that hold, so the claim's deletion taken for a move notes none, and an IPAddress a restore brings
/// back with the old claim's owner reference is no moved one.
#[test]
fn a_hold_a_new_term_keeps_for_a_bound_claim_notes_no_create() {
    let (index, _sink, _global, mut x, address) = claim_x_allocated_from_a_global_pool();
    index.give_up_uncertain_create(&_global, &key("x"));
    x.bound = Some(Box::default());
    x.bound_address = Some("10.1.0.1".parse().expect("an address"));
    index.apply_claim(x.clone());
    index.hold_bound_addresses();
    assert!(index.held_by(&_global, &key("x")).is_some(), "the bound claim's address is held for it");
    deleted_for_a_move(&index, &mut x);
    index.apply_address(&another_object_of(&address, "restored"));
    assert!(index.address(&key("x")).is_some_and(|r| !r.moving_away), "the restored IPAddress is taken for moved");
}

/// A claim gone for a move while its create was in flight notes it for that claim alone: a new claim of the name,
/// whose own create answers, is no moved claim (the first one's create never answered).
#[test]
fn a_new_claim_of_the_name_is_not_taken_for_the_moved_claim_whose_create_never_answered() {
    let (index, _sink, global, mut x, _address) = claim_x_allocated_from_a_global_pool();
    deleted_for_a_move(&index, &mut x);
    index.give_up_uncertain_create(&global, &key("x"));
    let (again, created) = a_new_claim_x_allocated(&index, &global);
    let (record, _) = index.address_created(&again, &created);
    assert!(record.is_some_and(|r| !r.moving_away), "the new claim is taken for moved");
}

/// helper-55 F1: the orphan release waits for the entry naming its own IPAddress, not for another's of the same
/// address (a duplicate orphan waited for as long as the annotation had no room for the moved one's entry).
#[test]
fn an_orphan_waits_for_its_own_moved_away_entry_only() {
    let (index, _sink, global, mut x, address) = claim_x_allocated_from_a_global_pool();
    index.address_created(&x, &address);
    index.apply_address(&address);
    let (_, mut late) = claim_of_global_pool_with_cluster("y");
    late.metadata.uid = Some("late-y".to_owned());
    index.apply_address(&late);
    assert_eq!(index.held_by(&global, &key("y")), index.held_by(&global, &key("x")), "a duplicate of x's address");
    deleted_for_a_move(&index, &mut x);
    assert!(index.moved_away_unwritten(&global, &key("x")), "x's entry waits to be written");
    assert!(!index.moved_away_unwritten(&global, &key("y")), "no entry names y: its release does not wait for x's");
}

/// helper-23's review: a manager with `--watch-filter` on a pool without the label still records the move of an
/// IPAddress whose claim's deletion it did not see (a relist, a new term) when its shard's Cluster goes while paused;
/// it only follows the object instead of keeping the move when that object says otherwise. A Cluster of another shard
/// is not its to record: the claims of its IPAddresses may well live (the simulation's second manager reserved a live
/// bound claim's address).
#[test]
fn a_filtered_manager_records_the_move_of_a_cluster_gone_while_paused() {
    let recorder = Arc::new(Recorder::default());
    let index = Index::of_shard(recorder, Some("a"));
    let global = feed_global_pool(&index);
    let (_, address) = claim_of_global_pool_with_cluster("x");
    // Through the Cluster watch's feed, as the manager reads it (helper-32: the label was dropped before it was read,
    // and every Cluster was another shard's).
    let cluster = |shard: Option<&str>| -> crate::capi::Cluster {
        let labels = shard.map(|s| json!({ crate::api::WATCH_FILTER_LABEL: s })).unwrap_or(json!({}));
        serde_json::from_value(json!({
            "metadata": {"name": "k", "namespace": "ns", "labels": labels, "resourceVersion": "1"},
            "spec": {"paused": true},
        }))
        .expect("a Cluster")
    };
    let mut clusters = Relist::default();
    clusters.on_event(&index, Event::Apply(cluster(None)));
    index.apply_address(&address);
    index.hold_bound_addresses();
    clusters.on_event(&index, Event::Delete(cluster(None)));
    assert!(!index.moved_away_unwritten(&global, &key("x")), "another shard's Cluster: nothing recorded");
    // Nor released: that shard's manager records the move (soak seed 804659163), also after the IPAddresses relist.
    let mut addresses = Relist::default();
    for event in [Event::Init, Event::InitApply(address.clone()), Event::InitDone] {
        addresses.on_event(&index, event);
    }
    assert!(index.orphans().is_empty(), "another shard's move left it behind: {:?}", index.orphans());
    clusters.on_event(&index, Event::Apply(cluster(Some("a"))));
    clusters.on_event(&index, Event::Delete(cluster(Some("a"))));
    assert!(index.moved_away_unwritten(&global, &key("x")), "the left-behind address is queued for the annotation");
    // The claim's own manager saw it come back and wrote on the IPAddress (no mark): this manager follows.
    let mut adopted = address.clone();
    adopted.metadata.resource_version = Some("99".to_owned());
    index.apply_address(&adopted);
    assert!(index.address(&key("x")).is_some_and(|r| !r.moving_away), "not kept against the object");
}

/// Seeds 400110884 and 410017715: a paused Cluster's namespace is wiped before a Velero restore (its claims deleted
/// with their finalizers stripped, no clusterctl mark, and the Cluster). A claim's deletion seen without the mark is no
/// move, whether its Cluster's deletion was seen before or after it (helper-31); one that a relist no longer holds is
/// taken for moved.
#[test]
fn a_claim_seen_deleted_without_the_move_mark_is_not_moved_though_its_cluster_went_paused() {
    for (seen, cluster_first) in [(true, true), (true, false), (false, true), (false, false)] {
        let (index, _sink) = index();
        let global = feed_global_pool(&index);
        let (x, address) = claim_of_global_pool_with_cluster("x");
        index.apply_cluster(key("k"), true);
        index.apply_claim(x.clone());
        index.apply_address(&address);
        index.hold_bound_addresses();
        if cluster_first {
            index.delete_cluster(&key("k"));
        }
        if seen {
            index.claim_deleted(&x);
        } else {
            index.delete_claim(&key("x"));
        }
        if !cluster_first {
            // Released at once though its Cluster is paused, when its claim's deletion was seen (helper-32: the
            // decision is on the API server before a restart forgets it).
            let record = index.address(&key("x")).expect("the IPAddress");
            assert_eq!(index.keeps_orphan(&key("x"), &record), !seen, "kept for the pause (seen: {seen})");
            index.delete_cluster(&key("k"));
        }
        let moved = index.address(&key("x")).is_some_and(|r| r.moving_away);
        let case = format!("deletion seen: {seen}, the Cluster's first: {cluster_first}");
        assert_eq!(moved, !seen, "taken for moved ({case})");
        assert_eq!(index.moved_away_unwritten(&global, &key("x")), !seen, "queued for the annotation ({case})");
    }
}

/// Seed 420069014: clusterctl pauses a Cluster and deletes its claim for a move while the Cluster and claim watches
/// relist (neither the pause nor the claim's deletion is seen; the claim is forgotten unmarked). The orphan release's
/// live read finds the Cluster paused and tells the index: a stale watch event does not unpause it, and the Cluster's
/// deletion, even one only a relist shows, leaves the IPAddress behind for the move. A Delete event whose last state
/// is paused says so too.
#[test]
fn a_cluster_read_paused_live_makes_its_unseen_deletion_a_move() {
    for deletion in ["read paused, forgotten by a relist", "its Delete event paused"] {
        let (index, _sink) = index();
        let global = feed_global_pool(&index);
        let (_, address) = claim_of_global_pool_with_cluster("x");
        index.apply_cluster_of_shard(key("k"), false, None, ResourceVersion::of("5"));
        index.apply_address(&address);
        index.hold_bound_addresses();
        if deletion.starts_with("read") {
            index.cluster_read_paused(key("k"), ResourceVersion::of("8"));
            index.apply_cluster_of_shard(key("k"), false, None, ResourceVersion::of("6"));
            assert_eq!(index.cluster_paused("ns", "k"), Some(true), "an older event does not unpause it");
            index.delete_cluster(&key("k"));
        } else {
            // Through the Cluster watch's feed, as the manager reads the event.
            let last: crate::capi::Cluster = serde_json::from_value(json!({
                "metadata": {"name": "k", "namespace": "ns", "resourceVersion": "7"},
                "spec": {"paused": true},
            }))
            .expect("a Cluster");
            Relist::default().on_event(&index, Event::Delete(last));
        }
        assert!(index.address(&key("x")).is_some_and(|r| r.moving_away), "left behind by the move ({deletion})");
        assert!(index.moved_away_unwritten(&global, &key("x")), "queued for the annotation ({deletion})");
    }
    // A newer event unpauses it as ever; a read the watch has overtaken (a newer event, or the deletion) is ignored
    // (helper-32: a phantom paused Cluster kept its addresses for good).
    let (index, _sink) = index();
    index.apply_cluster_of_shard(key("k"), false, None, ResourceVersion::of("5"));
    index.cluster_read_paused(key("k"), ResourceVersion::of("8"));
    index.apply_cluster_of_shard(key("k"), false, None, ResourceVersion::of("9"));
    assert_eq!(index.cluster_paused("ns", "k"), Some(false));
    index.cluster_read_paused(key("k"), ResourceVersion::of("8"));
    assert_eq!(index.cluster_paused("ns", "k"), Some(false), "a read older than the watch's news");
    index.delete_cluster(&key("k"));
    index.cluster_read_paused(key("k"), ResourceVersion::of("10"));
    assert_eq!(index.cluster_paused("ns", "k"), None, "a read of a Cluster the watch saw deleted");
}

/// Soak seed 430199264: a second manager's late write puts back the moved-away entry of an address that claim `x`,
/// come back with its Cluster, is bound to again (its own manager took the entry out). The pool event wakes `x`, whose
/// reconcile takes the entry out again; an entry naming a claim not bound to it wakes nothing.
#[test]
fn an_entry_put_back_for_an_address_its_claim_is_bound_to_again_wakes_the_claim() {
    for bound in [true, false] {
        let (index, sink) = index();
        let pools = Pools::<crate::api::v1alpha2::GlobalInClusterIPPool>::of(&index);
        Relist::default().on_event(&pools, Event::Apply(global_pool(10, None)));
        let (mut x, address) = claim_of_global_pool_with_cluster("x");
        if bound {
            x.bound = Some(Box::default());
        }
        index.apply_claim(x);
        index.apply_address(&address);
        sink.take_woken();
        Relist::default().on_event(&pools, Event::Apply(global_pool(11, Some("10.1.0.1@ns/x"))));
        let woken = sink.take_woken();
        assert_eq!(woken.contains(&key("x")), bound, "woken: {woken:?} (bound: {bound})");
    }
}

/// Soak seed 440537881: a deposed leader's late create of IPAddress `y`, for a claim since gone, lands holding the
/// address of IPAddress `x`, which Velero restored with its claim (no status, so the claim was never told of it). `x` is
/// the machine's: it is not the duplicate to withdraw while every other holder is an orphan the release deletes; it is
/// while a claim of `y` lives.
#[test]
fn a_duplicate_whose_other_holders_are_orphans_is_not_withdrawn() {
    for y_lives in [false, true] {
        let (index, _sink) = index();
        feed_pool(&index, pool("10.0.0.1-10.0.0.3", 1));
        let x = claim("x");
        index.apply_claim(x.clone());
        index.apply_address(&ip_address_uid("x", "10.0.0.1", &x, 1));
        if y_lives {
            index.apply_claim(claim("y"));
        }
        index.apply_address(&ip_address_uid("y", "10.0.0.1", &claim("y"), 2));
        let view = index.claim_view(&x, pool_key());
        assert!(view.duplicate.is_some(), "a duplicate (y lives: {y_lives})");
        assert_eq!(view.others_orphaned, !y_lives, "(y lives: {y_lives})");
        assert_eq!(view.unwanted_duplicate(), y_lives, "withdrawn (y lives: {y_lives})");
    }
}

/// Soak seed 540515841: Velero restores claim `x` with its IPAddress (owned by the backup's claim, an earlier one of
/// the name), while a deposed leader's create for unbound claim `y` of the address the restore's delete freed lands
/// late. The restored one is the machine's: it stays and `y`'s goes, also once the garbage collector took its dangling
/// owner reference off (seed 700328281's review). Not when `x` is no restore, nor when `y` is bound (its machine uses
/// the address), nor when `y`'s IPAddress is not its own claim's create.
#[test]
fn a_restored_claims_ipaddress_wins_over_an_unbound_claims_late_create_of_its_address() {
    let cases = [
        (true, false, true, false, true),
        (true, false, true, true, true),
        (false, false, true, false, false),
        (false, false, true, true, false),
        (true, true, true, false, false),
        (true, false, false, false, false),
    ];
    for (restored, y_bound, y_own_create, x_owner_collected, wins) in cases {
        let case = format!(
            "restored {restored}, y bound {y_bound}, y's own create {y_own_create}, x's owner collected \
             {x_owner_collected}"
        );
        let (index, _sink) = index();
        feed_pool(&index, pool("10.0.0.1-10.0.0.3", 1));
        let mut x = incarnation("x", 2);
        x.restored = restored;
        index.apply_claim(x.clone());
        let mut x_address = ip_address_uid("x", "10.0.0.1", &incarnation("x", 1), 1);
        if x_owner_collected {
            x_address.metadata.owner_references = None;
        }
        index.apply_address(&x_address);
        let mut y = incarnation("y", 3);
        if y_bound {
            y.bound = Some(Box::default());
        }
        index.apply_claim(y.clone());
        let y_owner = if y_own_create { y.clone() } else { incarnation("y", 4) };
        index.apply_address(&ip_address_uid("y", "10.0.0.1", &y_owner, 2));
        let view = index.claim_view(&x, pool_key());
        assert!(view.duplicate.is_some(), "a duplicate ({case})");
        assert_eq!(view.restored_one_wins, wins, "({case})");
        assert_eq!(view.unwanted_duplicate(), !wins, "x withdrawn ({case})");
        assert!(index.claim_view(&y, pool_key()).unwanted_duplicate(), "y's is not unwanted ({case})");
    }
}

/// Helper-82: IPAddress `x` came back with its Cluster (the pool's moved-away annotation names it) and wins its
/// duplicate with `y`'s, whose claim is unbound as the cache shows it. When `y`'s is our create for its claim, a
/// binding write of `y` may be in flight: `x` waits for it to be withdrawn. Not when `y`'s is restored (owned by an
/// earlier claim of its name): that one waits for `x` (`restored_one_wins`), and both waiting would be stuck; nor when
/// an entry names `y` too (helper-83 F1: two came back holding one address, and each would wait for the other). A `y`
/// bound to another address (its condition names it: a late create under its name) is no binding of this one's
/// address: `x` still wins, and waits (helper-83 F2).
#[test]
fn the_ipaddress_that_came_back_waits_only_for_a_holder_of_ours_whose_binding_may_be_in_flight() {
    let cases = [
        (true, false, false, true),
        (false, false, false, false),
        (true, true, false, false),
        (true, false, true, true),
    ];
    for (y_own_create, y_named, y_bound_elsewhere, waits) in cases {
        let case = format!(
            "y's own create {y_own_create}, an entry names y {y_named}, y bound to another address {y_bound_elsewhere}"
        );
        let (index, _sink) = index();
        let global = PoolKey::new(PoolKind::GlobalInClusterIPPool, "", "g");
        let entries = if y_named { "10.1.0.1@ns/x,10.1.0.1@ns/y" } else { "10.1.0.1@ns/x" };
        Relist::default().on_event(
            &Pools::<crate::api::v1alpha2::GlobalInClusterIPPool>::of(&index),
            Event::Apply(global_pool(10, Some(entries))),
        );
        let of_global = |mut c: Claim| {
            c.pool_kind = Some(PoolKind::GlobalInClusterIPPool);
            c.pool_name = intern("g");
            c
        };
        let in_global = |name: &str, owner: &Claim, n: u8| {
            let mut address = ip_address_uid(name, "10.1.0.1", owner, n);
            address.spec.pool_ref.kind = "GlobalInClusterIPPool".to_owned();
            address.spec.pool_ref.name = "g".to_owned();
            address
        };
        let x = of_global(incarnation("x", 2));
        index.apply_claim(x.clone());
        index.apply_address(&in_global("x", &x, 1));
        let mut y = of_global(incarnation("y", 3));
        y.restored = !y_own_create;
        if y_bound_elsewhere {
            y.bound = Some(Box::default());
            y.bound_address = Some("10.1.0.2".parse().expect("an address"));
        }
        index.apply_claim(y.clone());
        let y_owner = if y_own_create { y.clone() } else { of_global(incarnation("y", 4)) };
        index.apply_address(&in_global("y", &y_owner, 2));
        let view = index.claim_view(&x, global.clone());
        assert!(view.moved_one_wins, "x is the one that came back ({case})");
        assert_eq!(view.moved_one_waits, waits, "({case})");
    }
}

/// Helper-84 F1: in a global prefix pool, IPAddress `x` came back holding fd00::/56, and `y`, bound to
/// fd00:0:0:1::/64 as its condition tells (made after the pool's allocation length was edited), overlaps it. `y` is
/// bound to its own prefix: `x` does not win (read against the duplicate's wider prefix, `y` looked bound elsewhere,
/// `x` won and waited for a withdrawal that never comes).
#[test]
fn in_a_prefix_pool_a_claim_bound_to_its_own_prefix_is_bound_as_told() {
    use crate::api::v1alpha2::{GlobalInClusterPrefixPool, PrefixPoolSpec};
    let (index, _sink) = index();
    let global = PoolKey::new(PoolKind::GlobalInClusterPrefixPool, "", "gp");
    let spec: PrefixPoolSpec =
        serde_json::from_value(json!({"prefixes": ["fd00::/48"], "allocationPrefixLength": 64})).expect("spec");
    let mut pool = GlobalInClusterPrefixPool::new("gp", spec.into());
    pool.metadata.uid = Some("20000000-0000-0000-0000-000000000003".to_owned());
    pool.metadata.resource_version = Some("10".to_owned());
    pool.metadata.annotations =
        Some([(crate::api::MOVED_AWAY_ANNOTATION.to_owned(), "fd00::/56@ns/x".to_owned())].into());
    Relist::default().on_event(&Pools::<GlobalInClusterPrefixPool>::of(&index), Event::Apply(pool));
    let of_global = |mut c: Claim| {
        c.pool_kind = Some(PoolKind::GlobalInClusterPrefixPool);
        c.pool_name = intern("gp");
        c
    };
    let in_global = |name: &str, prefix: (&str, i64), owner: &Claim, n: u8| {
        let mut address = ip_address_uid(name, prefix.0, owner, n);
        address.spec.prefix = Some(prefix.1);
        address.spec.pool_ref.kind = "GlobalInClusterPrefixPool".to_owned();
        address.spec.pool_ref.name = "gp".to_owned();
        address
    };
    let x = of_global(incarnation("x", 2));
    index.apply_claim(x.clone());
    index.apply_address(&in_global("x", ("fd00::", 56), &x, 1));
    let mut y = of_global(incarnation("y", 3));
    y.bound = Some(Box::default());
    y.bound_address = Some("fd00:0:0:1::".parse().expect("an address"));
    index.apply_claim(y.clone());
    index.apply_address(&in_global("y", ("fd00:0:0:1::", 64), &y, 2));
    let view = index.claim_view(&x, global);
    assert!(view.duplicate.is_some(), "x and y overlap");
    assert!(view.holds_reserved, "x holds the reserved prefix");
    assert!(!view.moved_one_wins, "y is bound to its own prefix: x does not win");
}

/// Global pool `g` whose moved-away annotation reserves 10.1.0.1 for IPAddress `ns/x`; claim `x` (a new object of the
/// name, restored by Velero when `restored`), and IPAddress `x` holding 10.1.0.1, owned by an earlier claim `x` (the
/// backup's, or the one that moved away), not by this one.
fn claim_x_beside_an_ipaddress_holding_its_reserved_address(restored: bool) -> (Index, PoolKey, Claim, IpAddress) {
    let (index, _sink) = index();
    let global = PoolKey::new(PoolKind::GlobalInClusterIPPool, "", "g");
    Relist::default().on_event(
        &Pools::<crate::api::v1alpha2::GlobalInClusterIPPool>::of(&index),
        Event::Apply(global_pool(10, Some("10.1.0.1@ns/x"))),
    );
    let (earlier, address) = claim_of_global_pool_with_cluster("x");
    let mut x = earlier.clone();
    x.uid = crate::compact::UidText::of("x-again");
    x.restored = restored;
    index.apply_claim(x.clone());
    index.apply_address(&address);
    (index, global, x, address)
}

/// The rule adopt.rs and the watch's deletion share (`State::left_behind_for`): an IPAddress holding a reserved address
/// and owned by an earlier claim of its name is one a move left behind for a new claim (never adopted; gone, its hold
/// is the reservation, not the claim's: seed 730861184), but for a claim Velero restored it is its own, restored
/// beside it with the backup's owner reference (seed 460384603): adopted, and kept for it when deleted from under it.
#[test]
fn an_ipaddress_holding_a_reserved_address_is_left_behind_for_a_new_claim_but_a_restored_claims_own() {
    let (index, global, x, address) = claim_x_beside_an_ipaddress_holding_its_reserved_address(false);
    assert!(index.claim_view(&x, global.clone()).left_behind, "a new claim adopts what a move left behind");
    index.address_delete_watched(&key("x"), &address);
    assert!(index.held_by(&global, &key("x")).is_none(), "the new claim keeps the hold of what a move left behind");
    let next = index.write(|s| s.registry().allocate(&global, &key("y"), None, &Claimant::default())).expect("free");
    assert_eq!(next.address.to_string(), "10.1.0.2", "the address in use over there was handed out");

    let (index, global, x, address) = claim_x_beside_an_ipaddress_holding_its_reserved_address(true);
    assert!(!index.claim_view(&x, global.clone()).left_behind, "a restored claim lets its own IPAddress go");
    index.address_delete_watched(&key("x"), &address);
    assert!(index.holds_unconfirmed(&global, &key("x")), "the restored claim lost the hold of its machine's address");
}

/// What a read of the name of a create whose answer was lost or refused means for its hold, for every step that may
/// follow and everything the name may hold (`Observed::NameRead`): the hold stays only while that create may have
/// happened, or will be sent again into a free name, or is a bound claim's machine's address.
#[test]
fn a_read_of_an_uncertain_creates_name_keeps_its_hold_only_while_that_create_may_have_happened() {
    use IfNotCreated::{GivenUp, GivenUpForAGoneClaim, KeptForTheMachine, Retried};
    let names = ["free", "our IPAddress of the pool", "our IPAddress of another pool", "another provider's object"];
    let table = [
        (Retried, [true, true, false, false]),
        (KeptForTheMachine, [true, true, true, true]),
        (GivenUp, [false, true, false, false]),
        (GivenUpForAGoneClaim, [false, true, false, false]),
    ];
    for (then, kept) in table {
        for (name, kept) in names.into_iter().zip(kept) {
            let (index, _) = index();
            feed_pool(&index, pool("10.0.0.1-10.0.0.2", 1));
            let a = claim("a");
            if then != GivenUpForAGoneClaim {
                index.apply_claim(a.clone());
            }
            index.allocate(&a, &pool_key(), None).expect("a free address");
            let mut live = ip_address("a", "10.0.0.1", &a);
            match name {
                "our IPAddress of another pool" => live.spec.pool_ref.name = "other".to_owned(),
                "another provider's object" => {
                    live.spec.pool_ref.api_group = Some("ipam.example.com".to_owned());
                    live.spec.pool_ref.kind = "OtherPool".to_owned();
                }
                _ => {}
            }
            let live = (name != "free").then_some(&live);
            index.observe(Observed::NameRead { pool: &pool_key(), key: &key("a"), live, then });
            let held = index.held_by(&pool_key(), &key("a")).is_some();
            assert_eq!(held, kept, "{then:?}, the name holding {name}: is the hold kept?");
            assert_eq!(index.pool_counts(&pool_key()).0.free, if kept { 1 } else { 2 }, "{then:?}, {name}");
        }
    }
    // A gone claim's hold that a new claim of the name in the pool took over stays for that claim.
    let (index, _) = index();
    feed_pool(&index, pool("10.0.0.1-10.0.0.2", 1));
    let a = claim("a");
    index.allocate(&a, &pool_key(), None).expect("a free address");
    index.apply_claim(claim("a"));
    let then = GivenUpForAGoneClaim;
    index.observe(Observed::NameRead { pool: &pool_key(), key: &key("a"), live: None, then });
    assert!(index.held_by(&pool_key(), &key("a")).is_some(), "taken over by the claim of the name");
}

/// A pool of two: claim `a` bound to 10.0.0.1, and claim `b` bound to 10.0.0.2 whose IPAddress a person deleted (seen
/// by this index when `seen_made`; a new term lists none); and the late create of `b`'s IPAddress, another object
/// holding `a`'s address, not applied yet.
fn a_late_create_under_bound_claim_b(seen_made: bool) -> (Index, Arc<Recorder>, Claim, IpAddress) {
    let (index, sink) = index();
    feed_pool(&index, pool("10.0.0.1-10.0.0.2", 1));
    let (a, mut b) = (claim("a"), claim("b"));
    b.bound = Some(Box::default());
    b.bound_address = Some("10.0.0.2".parse().expect("an address"));
    index.apply_claim(a.clone());
    index.apply_claim(b.clone());
    index.apply_address(&ip_address("a", "10.0.0.1", &a));
    if seen_made {
        let own = ip_address("b", "10.0.0.2", &b);
        index.apply_address(&own);
        index.address_delete_watched(&key("b"), &own);
    }
    let mut late = ip_address("b", "10.0.0.1", &b);
    late.metadata.uid = Some("30000000-0000-0000-0000-000000000001".to_owned());
    (index, sink, b, late)
}

/// helper-110 F1: a late object of another address lands under the name of a bound claim whose IPAddress a person
/// deleted. The address kept for the claim's machine is set aside, still held, and no waiting claim is woken for it;
/// the claim takes it back when it allocates again. Set aside again and the claim gone, it goes as the claim's
/// uncertain hold goes, and the waiter is woken then.
#[test]
fn a_late_object_under_a_bound_claims_name_sets_the_address_of_its_machine_aside() {
    let (index, sink, b, mut late) = a_late_create_under_bound_claim_b(true);
    index.wait_for_address(&pool_key(), &key("w"));
    sink.take_woken();
    index.apply_address(&late);
    let woken = sink.take_woken();
    assert!(!woken.contains(&key("w")), "no waiter is woken for the address b's machine uses: {woken:?}");
    assert_eq!(index.pool_counts(&pool_key()).0.free, 0, "the address b's machine uses is not free");
    let w = claim("w");
    assert!(matches!(index.allocate(&w, &pool_key(), None), Err(AllocateError::Exhausted { .. })));
    // b withdraws the late one, and makes its IPAddress again with its machine's address.
    index.address_deleted_by_us(&key("b"), &pool_key(), late.metadata.uid.as_deref());
    assert_eq!(index.allocate(&b, &pool_key(), None).expect("its own").address.to_string(), "10.0.0.2");
    // Another late one sets it aside again, and b is deleted: the hold goes as its uncertain create's would, and the
    // waiter gets the address.
    late.metadata.uid = Some("30000000-0000-0000-0000-000000000002".to_owned());
    index.apply_address(&late);
    assert_eq!(index.pool_counts(&pool_key()).0.free, 0, "set aside again");
    sink.take_woken();
    index.delete_claim(&key("b"));
    assert!(sink.take_woken().contains(&key("b")), "b's worker is woken to settle the hold set aside");
    assert_eq!(index.orphaned_hold(&key("b")), Some(pool_key()), "b's worker settles the hold set aside");
    index.give_up_gone_claims_hold(&pool_key(), &key("b"));
    assert!(sink.take_woken().contains(&key("w")), "now the waiter is woken");
    assert_eq!(index.allocate(&w, &pool_key(), None).expect("free now").address.to_string(), "10.0.0.2");
    index.check_consistency().expect("consistent");
}

/// Seed 790461484: a Velero restore wipes a namespace (its Cluster unpaused, then deleted), and an API server restart
/// makes a new term's watches list: the Cluster's, last seen paused, finishes first and finds it gone, before the
/// claims have listed. A claim not listed yet is no claim gone: what the Cluster left behind is looked for once every
/// watch listed. The claim's deletion, seen since without clusterctl's mark, is no move; a claim that never lists is.
#[test]
fn a_cluster_gone_paused_before_the_claims_listed_leaves_behind_only_what_no_listed_claim_owned() {
    for claim_listed in [true, false] {
        let (index, _sink) = index();
        let global = feed_global_pool(&index);
        let (x, address) = claim_of_global_pool_with_cluster("x");
        index.apply_cluster(key("k"), true);
        index.apply_address(&address);
        index.delete_cluster(&key("k"));
        assert!(index.address(&key("x")).is_some_and(|r| !r.moving_away), "not judged before the claims listed");
        if claim_listed {
            index.apply_claim(x.clone());
            index.claim_deleted(&x);
        }
        index.hold_bound_addresses();
        let moved = index.address(&key("x")).is_some_and(|r| r.moving_away);
        assert_eq!(moved, !claim_listed, "left behind by a move (the claim listed: {claim_listed})");
        assert_eq!(index.moved_away_unwritten(&global, &key("x")), !claim_listed, "queued ({claim_listed})");
    }
}

/// helper-111 A1 and A2: the claim whose machine's address is set aside is deleted while the late object of its name
/// still exists. Its worker reads the name (the late one, recorded) and the address set aside goes all the same: the
/// claim it was kept for is gone. A duplicate that the hold set aside is part of wakes no one by the placeholder's key,
/// and that key has no uncertain hold of its own.
#[test]
fn the_address_set_aside_goes_with_its_claim_though_the_late_object_of_its_name_lives() {
    let (index, sink, _b, late) = a_late_create_under_bound_claim_b(true);
    index.apply_address(&late);
    // A restore brings an IPAddress of another name holding the address set aside: a duplicate with the placeholder.
    sink.take_woken();
    let restored = ip_address("r", "10.0.0.2", &claim("r"));
    index.apply_address(&restored);
    let aside = crate::index::registry::aside_key(&key("b"));
    assert!(!sink.take_woken().contains(&aside), "a placeholder is woken as a claim");
    assert_eq!(index.orphaned_hold(&aside), None, "a placeholder taken for an IPAddress with an uncertain hold");
    index.address_gone(&key("r"), restored.metadata.uid.as_deref().map(crate::compact::Uid::of));
    // b is deleted with the late one still there; its worker reads the name.
    index.wait_for_address(&pool_key(), &key("w"));
    index.delete_claim(&key("b"));
    assert_eq!(index.orphaned_hold(&key("b")), Some(pool_key()));
    let then = IfNotCreated::GivenUpForAGoneClaim;
    index.observe(Observed::NameRead { pool: &pool_key(), key: &key("b"), live: Some(&late), then });
    assert!(sink.take_woken().contains(&key("w")), "the waiter is woken");
    assert_eq!(index.allocate(&claim("w"), &pool_key(), None).expect("free").address.to_string(), "10.0.0.2");
    index.check_consistency().expect("consistent");
}

/// helper-111 A3: a new term lists a bound claim whose IPAddress holds another address than the one its condition
/// names (a former leader's late create, landed after a person deleted the claim's own). The address the claim's
/// machine uses is held aside before anything is allocated, and the claim takes it back once it withdrew the late one.
#[test]
fn a_new_term_holds_aside_the_address_of_a_bound_claim_whose_ipaddress_holds_another() {
    let (index, _sink, b, late) = a_late_create_under_bound_claim_b(false);
    index.apply_address(&late);
    index.hold_bound_addresses();
    let w = claim("w");
    assert!(
        matches!(index.allocate(&w, &pool_key(), None), Err(AllocateError::Exhausted { .. })),
        "a waiting claim took the address b's machine uses"
    );
    index.address_deleted_by_us(&key("b"), &pool_key(), late.metadata.uid.as_deref());
    assert_eq!(index.allocate(&b, &pool_key(), None).expect("its own").address.to_string(), "10.0.0.2");
    index.check_consistency().expect("consistent");
}

/// Soak seed 802474025: a claim's release recorded a read of the IPAddress of its name taken before the garbage
/// collector took the dangling claim owner reference off it, after the watch had shown that newer version. The older
/// read put the owner back into the record, and the orphan release, finding the live object without it, never released
/// the IPAddress (stuck being deleted under our finalizer).
#[test]
fn a_read_older_than_the_record_does_not_undo_what_a_newer_event_told() {
    let (index, _) = index();
    feed_pool(&index, pool("10.0.0.1-10.0.0.2", 1));
    let mut read = ip_address("a", "10.0.0.1", &claim("a"));
    read.metadata.resource_version = Some("60".to_owned());
    read.metadata.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
    let mut collected = read.clone();
    collected.metadata.resource_version = Some("61".to_owned());
    collected.metadata.owner_references = None;
    index.apply_address(&collected);
    assert_eq!(index.address(&key("a")).map(|r| r.claim_owner), Some(None), "the watch's newer event");
    let then = IfNotCreated::GivenUp;
    let observed = index.observe(Observed::NameRead { pool: &pool_key(), key: &key("a"), live: Some(&read), then });
    assert_eq!(observed.record.map(|r| (r.claim_owner, r.revision)), Some((None, ResourceVersion::of("61"))));
    assert_eq!(index.address(&key("a")).map(|r| r.claim_owner), Some(None), "the older read undid the newer event");
    // A read as new as the record, or newer, is taken.
    let mut newer = collected.clone();
    newer.metadata.resource_version = Some("62".to_owned());
    newer.metadata.labels = Some([(CLUSTER_NAME_LABEL.to_owned(), "c".to_owned())].into());
    index.observe(Observed::Answered { key: &key("a"), object: &newer });
    assert_eq!(index.address(&key("a")).and_then(|r| r.cluster_label).as_deref(), Some("c"));
}

/// A claim whose allocation found its pool full waits from that very step (helper-127 F0, helper-128 F1): the one
/// place it is registered, so that no await its worker may come to make leaves an address freed meanwhile unseen.
#[test]
fn a_claim_that_found_its_pool_full_waits_from_that_step() {
    let (index, sink) = index();
    feed_pool(&index, pool("10.0.0.1", 1));
    let (b, w) = (claim("b"), claim("w"));
    index.apply_claim(w.clone());
    index.apply_address(&ip_address("b", "10.0.0.1", &b));
    let allocating = Observed::Allocating { claim: &w, pool: &pool_key(), previous: None };
    let (observation, _) = index.observe_then_view(&w, pool_key(), allocating);
    assert!(matches!(observation.assigned, Some(Err(AllocateError::Exhausted { .. }))));
    sink.take_woken();
    // Claim b is gone (never applied): its IPAddress's deletion frees the address.
    index.address_gone(&key("b"), None);
    assert!(sink.take_woken().contains(&key("w")), "the waiting claim is woken for the address freed");
}

/// helper-128 F2: a claim deleted while its worker awaited (a person stripped its finalizer) runs on a stale copy that
/// finds the pool full; registered as a waiter, it would take the one wake another claim, really waiting, needs.
#[test]
fn a_claim_deleted_while_its_worker_awaited_takes_no_wake_from_one_that_waits() {
    let (index, sink) = index();
    feed_pool(&index, pool("10.0.0.1", 1));
    let (b, w, x) = (claim("b"), claim("w"), claim("x"));
    index.apply_claim(w.clone());
    index.apply_claim(x.clone());
    index.apply_address(&ip_address("b", "10.0.0.1", &b));
    index.delete_claim(&key("w"));
    for c in [&w, &x] {
        let allocating = Observed::Allocating { claim: c, pool: &pool_key(), previous: None };
        let (observation, _) = index.observe_then_view(c, pool_key(), allocating);
        assert!(matches!(observation.assigned, Some(Err(AllocateError::Exhausted { .. }))));
    }
    sink.take_woken();
    index.address_gone(&key("b"), None);
    let woken = sink.take_woken();
    assert!(woken.contains(&key("x")) && !woken.contains(&key("w")), "{woken:?}");
}

/// A pool of `addresses` whose Clusters may each hold `per_cluster` of them (docs/compatibility.md D21).
fn quota_pool(addresses: &str, per_cluster: i32) -> InClusterIPPool {
    let mut pool = pool(addresses, 1);
    pool.spec.quota = Some(crate::api::v1alpha2::PoolQuota { per_cluster: Some(per_cluster), clusters: None });
    pool
}

fn claim_of_cluster(name: &str, cluster: &str) -> Claim {
    Claim { cluster: Some(intern(cluster)), ..claim(name) }
}

/// A claim of `cluster` bound to the IPAddress of its name.
fn bound_claim_of_cluster(name: &str, cluster: &str) -> Claim {
    Claim { bound: Some("".into()), ..claim_of_cluster(name, cluster) }
}

fn allocate_for(index: &Index, claim: &Claim, previous: Option<&str>) -> Result<Assigned, AllocateError> {
    let allocating = Observed::Allocating { claim, pool: &pool_key(), previous };
    let (observation, _) = index.observe_then_view(claim, pool_key(), allocating);
    observation.assigned.expect("an allocation answers")
}

#[test]
fn a_claim_its_quota_refuses_waits_and_is_woken_when_its_cluster_lets_go() {
    let (index, sink) = index();
    feed_pool(&index, quota_pool("10.0.0.1-10.0.0.5", 1));
    let (a, x) = (claim_of_cluster("a", "c1"), claim_of_cluster("x", "c1"));
    index.apply_claim(x.clone());
    // a's IPAddress carries its Cluster's label: c1 holds its quota (a's claim is gone: its IPAddress goes next).
    index.apply_address(&ip_address("a", "10.0.0.1", &a));
    match allocate_for(&index, &x, None) {
        Err(e @ AllocateError::QuotaExceeded { .. }) => {
            assert_eq!(
                e.to_string(),
                "Cluster ns/c1 holds 1 address(es) of InClusterIPPool ns/pool, its quota of 1 (spec.quota)"
            );
        }
        other => panic!("x's Cluster holds its quota: {other:?}"),
    }
    // The pool has free addresses: a claim of no Cluster gets one.
    allocate_for(&index, &claim("y"), None).expect("no Cluster, no quota");
    sink.take_woken();
    index.address_gone(&key("a"), None);
    assert!(sink.take_woken().contains(&key("x")), "woken the moment its Cluster holds fewer");
    allocate_for(&index, &x, None).expect("below its quota now");
}

#[test]
fn a_bound_claim_gets_its_machines_address_back_whatever_its_clusters_quota() {
    let (index, _sink) = index();
    feed_pool(&index, quota_pool("10.0.0.1-10.0.0.5", 1));
    let (a, b) = (claim_of_cluster("a", "c1"), bound_claim_of_cluster("b", "c1"));
    index.apply_claim(a.clone());
    index.apply_claim(b.clone());
    index.apply_address(&ip_address("a", "10.0.0.1", &a));
    // An unbound claim whose condition alone names an address (edited by hand) is limited as any (helper-132 N6).
    let unbound = claim_of_cluster("u", "c1");
    index.apply_claim(unbound.clone());
    assert!(matches!(allocate_for(&index, &unbound, Some("10.0.0.4")), Err(AllocateError::QuotaExceeded { .. })));
    // b was bound to 10.0.0.3 (a quota lowered since, or a's IPAddress made by hand) and its IPAddress went: the
    // address its machine uses is held for it again; a quota takes nothing back.
    let again = allocate_for(&index, &b, Some("10.0.0.3")).expect("its machine's address");
    assert_eq!(again.address.to_string(), "10.0.0.3");
    index.check_consistency().expect("consistent");
}

#[test]
fn a_bound_claim_whose_address_another_holds_waits_for_it_past_its_quota() {
    let (index, sink) = index();
    feed_pool(&index, quota_pool("10.0.0.1-10.0.0.5", 1));
    let (a, b) = (claim_of_cluster("a", "c1"), bound_claim_of_cluster("b", "c1"));
    index.apply_claim(a.clone());
    index.apply_claim(b.clone());
    index.apply_address(&ip_address("a", "10.0.0.1", &a));
    // b's machine uses 10.0.0.3, which a hand-made IPAddress of no claim holds now; c1 holds its quota.
    index.apply_address(&ip_address("o", "10.0.0.3", &claim("o")));
    assert!(matches!(allocate_for(&index, &b, Some("10.0.0.3")), Err(AllocateError::QuotaExceeded { .. })));
    sink.take_woken();
    // That IPAddress goes (c1 still holds its quota): b is woken for its machine's address, and gets it.
    index.address_gone(&key("o"), None);
    assert!(sink.take_woken().contains(&key("b")), "woken when the address its machine uses frees up (helper-131 F4)");
    let again = allocate_for(&index, &b, Some("10.0.0.3")).expect("its machine's address");
    assert_eq!(again.address.to_string(), "10.0.0.3");
}

#[test]
fn a_bound_claim_its_quota_refuses_passes_on_the_wake_it_took_from_the_waiters() {
    let (index, sink) = index();
    feed_pool(&index, quota_pool("10.0.0.1-10.0.0.3", 1));
    let (a, b, w) = (claim_of_cluster("a", "c1"), bound_claim_of_cluster("b", "c1"), claim("w"));
    for c in [&b, &w] {
        index.apply_claim(c.clone());
    }
    // The pool is full of hand-made IPAddresses of no claim; b's machine's address is one of them.
    for (name, address) in [("o1", "10.0.0.1"), ("o2", "10.0.0.2"), ("o3", "10.0.0.3")] {
        index.apply_address(&ip_address(name, address, &claim(name)));
    }
    // b and w wait for an address, b first.
    let b_previous = Some("10.0.0.3");
    assert!(matches!(allocate_for(&index, &b, b_previous), Err(AllocateError::Exhausted { .. })));
    assert!(matches!(allocate_for(&index, &w, None), Err(AllocateError::Exhausted { .. })));
    // Meanwhile c1 comes to hold its quota (a's IPAddress, made by hand outside the pool's range).
    index.apply_address(&ip_address("a", "10.0.9.9", &a));
    sink.take_woken();
    // o2 goes: b, the oldest, is woken; its machine's address is still held, and c1 holds its quota: b waits for its
    // address, and the wake goes on to w, which takes the free one (helper-132 N2).
    index.address_gone(&key("o2"), None);
    assert!(sink.take_woken().contains(&key("b")));
    assert!(matches!(allocate_for(&index, &b, b_previous), Err(AllocateError::QuotaExceeded { .. })));
    assert!(sink.take_woken().contains(&key("w")), "the wake b could not use goes on");
    allocate_for(&index, &w, None).expect("the free address");
}
