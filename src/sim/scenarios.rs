//! Hand-written schedules: one order of events each, the order a hole of issue 25 needed, replayed against the real
//! controllers on the simulated API server. Each fails on the code before its fix.

use serde_json::{Value, json};

use super::client::Op;
use super::model::{PoolId, Shape};
use super::server::Kind;
use super::world::{Fate, Job, World};
use crate::api::{
    CLUSTER_NAME_LABEL, DELETE_FOR_MOVE_ANNOTATION, GROUP, MOVED_AWAY_ANNOTATION, PROTECT_ADDRESS_FINALIZER,
    VELERO_RESTORE_LABEL, WATCH_FILTER_LABEL,
};
use crate::index::ObjectKey;

/// A pool `ip` of two addresses in namespace a, and its claim `m0` bound to the first.
fn bound_claim_of_a_pool_of_two() -> (World, PoolId, ObjectKey) {
    let mut w = World::scripted();
    let ip = PoolId::Ip(0);
    w.create_pool_shaped(ip, Shape { v6: false, offset: 0, size: 2, ..Shape::default() });
    let m0 = w.create_claim_named(0, "m0", ip);
    w.begin_term();
    w.deliver_all(&[]);
    w.run_to_rest(Job::Claim(m0.clone()));
    (w, ip, m0)
}

/// A pool of two addresses and two claims (namespace index and name) bound in it in turn, the first to the first.
fn two_claims_bound_in(pool: PoolId, first: (usize, &str), second: (usize, &str)) -> (World, ObjectKey, ObjectKey) {
    let mut w = World::scripted();
    w.create_pool_shaped(pool, Shape { v6: false, offset: 0, size: 2, ..Shape::default() });
    let a = w.create_claim_named(first.0, first.1, pool);
    let b = w.create_claim_named(second.0, second.1, pool);
    w.begin_term();
    w.deliver_all(&[]);
    for claim in [&a, &b] {
        w.run_to_rest(Job::Claim(claim.clone()));
    }
    (w, a, b)
}

fn is_create(op: &Op) -> bool {
    matches!(op, Op::Create(Kind::Address, _))
}

fn is_claim_patch(name: &'static str) -> impl Fn(&Op) -> bool {
    move |op| matches!(op, Op::PatchJson { kind: Kind::Claim, key, .. } if &*key.name == name)
}

fn is_delete(op: &Op) -> bool {
    matches!(op, Op::Delete { kind: Kind::Address, .. })
}

fn fails(world: &World, result: Result<(), String>) {
    if let Err(what) = result {
        panic!("{what}\ntrace:\n{}", world.trace_text());
    }
}

/// Settles the world with every invariant holding; the claim `key` has made its IPAddress again, holding `address`
/// (its machine's).
fn settles_with_ipaddress_made_again(w: &mut World, key: &ObjectKey, address: &Value) {
    let result = w.finish();
    fails(w, result);
    let again =
        w.read(Kind::Address, key).unwrap_or_else(|| panic!("{key}'s IPAddress made again:\n{}", w.trace_text()));
    assert_eq!(again["spec"]["address"], *address, "{again}\n{}", w.trace_text());
}

/// Hole 2: a create applied without an answer is retried, gets 409, and reads the IPAddress it made; meanwhile the
/// pool's other claim is allocated. Its address must not be the one the first claim's IPAddress holds.
#[test]
fn a_retried_create_that_meets_its_own_ipaddress_keeps_the_address_held_while_it_reads() {
    let mut w = World::scripted();
    w.create_pool_shaped(PoolId::Ip(0), Shape { v6: false, offset: 0, size: 2, ..Shape::default() });
    let m0 = w.create_claim_named(0, "m0", PoolId::Ip(0));
    let m1 = w.create_claim_named(0, "m1", PoolId::Ip(0));
    w.begin_term();
    w.deliver_all(&[]);
    w.run_job(Job::Claim(m0.clone()));
    assert!(w.answer_where(is_claim_patch("m0"), Fate::Answered));
    assert!(w.answer_where(is_create, Fate::AppliedAnswerLost));
    // The claim watch shows the finalizer; the IPAddress watch is behind.
    w.deliver_all(&[Kind::Claim]);
    w.run_job(Job::Claim(m0));
    assert!(w.answer_where(is_create, Fate::Answered), "the retried create");
    // While m0 reads the IPAddress that exists (409), m1 is allocated and created.
    w.run_job(Job::Claim(m1));
    assert!(w.answer_where(is_claim_patch("m1"), Fate::Answered));
    assert!(w.answer_where(is_create, Fate::Answered), "m1's create");
    let result = w.check_now();
    fails(&w, result);
    w.answer_everything();
    let result = w.finish();
    fails(&w, result);
}

/// Hole 4: the IPAddress of a claim that is gone is released, and the request that deletes it fails. It must not be
/// left holding its address for good.
#[test]
fn an_orphan_whose_release_was_interrupted_is_released_later() {
    let mut w = World::scripted();
    w.create_pool_shaped(PoolId::Ip(0), Shape { v6: false, offset: 0, size: 2, ..Shape::default() });
    let m0 = w.create_claim_named(0, "m0", PoolId::Ip(0));
    w.begin_term();
    w.deliver_all(&[]);
    w.run_to_rest(Job::Claim(m0.clone()));
    // The claim is deleted with its finalizer stripped: only the orphan release can free its address.
    w.force_delete_claim(&m0);
    w.deliver_all(&[]);
    w.run_job(Job::Gone(m0));
    // Every request of the release is answered but the DELETE, whose connection breaks.
    while !w.answer_where(is_delete, Fate::NotApplied) {
        assert!(w.answer_where(|op| !is_delete(op), Fate::Answered), "the release never sent its DELETE");
    }
    w.answer_everything();
    let result = w.finish();
    fails(&w, result);
}

/// A create that failed (500, not applied) leaves a hold; its claim is then deleted without a release (finalizers
/// stripped). The hold must go with it, or the address stays taken and the pool's counts and deletion are off.
#[test]
fn the_hold_of_an_uncertain_create_goes_with_its_claim() {
    let mut w = World::scripted();
    w.create_pool_shaped(PoolId::Ip(0), Shape { v6: false, offset: 0, size: 1, ..Shape::default() });
    let m0 = w.create_claim_named(0, "m0", PoolId::Ip(0));
    w.begin_term();
    w.deliver_all(&[]);
    w.run_job(Job::Claim(m0.clone()));
    assert!(w.answer_where(is_claim_patch("m0"), Fate::Answered));
    assert!(w.answer_where(is_create, Fate::ServerError));
    w.force_delete_claim(&m0);
    let m1 = w.create_claim_named(0, "m1", PoolId::Ip(0));
    w.deliver_all(&[]);
    let _ = m1;
    let result = w.finish();
    fails(&w, result);
}

/// A review of the fixes found it: the orphan release of `m0` (its claim deleted with the finalizer stripped) has
/// confirmed the claim gone when a new claim `m0` adopts the IPAddress (owner references rewritten) and is bound. The
/// release must not then delete the IPAddress its new claim is bound to.
#[test]
fn an_orphan_release_leaves_an_ipaddress_adopted_meanwhile_alone() {
    let mut w = World::scripted();
    w.create_pool_shaped(PoolId::Ip(0), Shape { v6: false, offset: 0, size: 2, ..Shape::default() });
    let m0 = w.create_claim_named(0, "m0", PoolId::Ip(0));
    w.begin_term();
    w.deliver_all(&[]);
    w.run_to_rest(Job::Claim(m0.clone()));
    w.force_delete_claim(&m0);
    w.deliver_all(&[Kind::Claim]);
    w.run_job(Job::Gone(m0.clone()));
    // The release reads until it has seen the claim gone.
    loop {
        let claim_read = w.answer_where(|op| matches!(op, Op::Get(Kind::Claim, _)), Fate::Answered);
        if claim_read {
            break;
        }
        assert!(w.answer_where(|op| matches!(op, Op::Get(..)), Fate::Answered), "the release read nothing");
    }
    // Meanwhile claim m0 comes back and adopts its IPAddress; it is bound.
    w.create_claim_named(0, "m0", PoolId::Ip(0));
    w.deliver_all(&[Kind::Claim]);
    w.run_job(Job::Claim(m0.clone()));
    // Its requests are the newest in flight: the release waits.
    while w.is_running(&Job::Claim(m0.clone())) {
        assert!(w.answer_newest(), "the claim's worker waits for nothing");
    }
    assert_eq!(w.read(Kind::Claim, &m0).expect("claim m0")["status"]["addressRef"]["name"], "m0", "m0 is bound");
    w.answer_everything();
    let result = w.finish();
    fails(&w, result);
    let address = w.read(Kind::Address, &m0).expect("the adopted IPAddress is still there");
    assert_eq!(address["spec"]["address"], "10.0.0.1");
}

/// Soak seed 510263267: a deleted claim's release reads its IPAddress after another manager (one whose watch saw the
/// claim gone) let a new claim of its name adopt it, owner rewritten and bound. The release must leave it alone: it
/// is the new claim's, and its machine uses the address.
#[test]
fn a_release_leaves_an_ipaddress_a_new_claim_of_its_name_adopted_alone() {
    let (mut w, ip, m0) = bound_claim_of_a_pool_of_two();
    w.user_delete(Kind::Claim, &m0);
    w.deliver_all(&[Kind::Claim]);
    w.run_job(Job::Claim(m0.clone()));
    // The release asks for the IPAddress; before the answer, the claim goes and a new one of its name adopts it.
    let read = |op: &Op| matches!(op, Op::Get(Kind::Address, _));
    while !w.is_pending(read) {
        assert!(w.answer_newest(), "the release read nothing");
    }
    w.patch(Kind::Claim, &m0, json!({"metadata": {"finalizers": null}}));
    assert!(w.read(Kind::Claim, &m0).is_none(), "the deleted claim went");
    w.create_claim_named(0, "m0", ip);
    let new_uid = w.read(Kind::Claim, &m0).expect("the new claim")["metadata"]["uid"].clone();
    let mut owners = w.read(Kind::Address, &m0).expect("m0's IPAddress")["metadata"]["ownerReferences"].clone();
    owners[0]["uid"] = new_uid.clone();
    w.patch(Kind::Address, &m0, json!({"metadata": {"ownerReferences": owners}}));
    w.answer_everything();
    let address =
        w.read(Kind::Address, &m0).unwrap_or_else(|| panic!("the adopted IPAddress went:\n{}", w.trace_text()));
    assert_eq!(address["metadata"]["ownerReferences"][0]["uid"], new_uid);
    let result = w.finish();
    fails(&w, result);
    let claim = w.read(Kind::Claim, &m0).expect("the new claim");
    assert_eq!(claim["status"]["addressRef"]["name"], "m0", "bound to the adopted IPAddress: {claim}");
    assert_eq!(w.read(Kind::Address, &m0).expect("m0's IPAddress")["spec"]["address"], "10.0.0.1");
}

/// helper-63's review of the fix above: a claim being deleted whose IPAddress names an earlier, gone claim of its name
/// as its owner (a restore keeps the backup's owner references) releases it itself, at once. The claim, read live, is
/// this one, so the other owner is gone; left to the orphan release, the address would be held longer, and lost for
/// good if the garbage collector took the dangling owner reference off first. A failed read of the claim decides
/// nothing (helper-64 T1): the release is retried.
#[test]
fn a_release_deletes_its_ipaddress_made_for_an_earlier_claim_of_its_name() {
    let (mut w, _ip, m0) = bound_claim_of_a_pool_of_two();
    let mut owners = w.read(Kind::Address, &m0).expect("m0's IPAddress")["metadata"]["ownerReferences"].clone();
    owners[0]["uid"] = json!("uid-of-an-earlier-m0");
    w.patch(Kind::Address, &m0, json!({"metadata": {"ownerReferences": owners}}));
    w.user_delete(Kind::Claim, &m0);
    w.deliver_all(&[Kind::Claim]);
    w.run_job(Job::Claim(m0.clone()));
    let claim_read = |op: &Op| matches!(op, Op::Get(Kind::Claim, _));
    while !w.is_pending(claim_read) {
        assert!(w.answer_newest(), "the release read no claim:\n{}", w.trace_text());
    }
    assert!(w.answer_where(claim_read, Fate::ServerError));
    w.answer_everything();
    let claim =
        w.read(Kind::Claim, &m0).unwrap_or_else(|| panic!("a failed read let the claim go:\n{}", w.trace_text()));
    assert!(claim["metadata"]["finalizers"].to_string().contains("ReleaseAddress"), "{claim}");
    w.run_job(Job::Claim(m0.clone()));
    w.answer_everything();
    assert!(w.read(Kind::Claim, &m0).is_none(), "the claim went:\n{}", w.trace_text());
    assert!(w.read(Kind::Address, &m0).is_none(), "its release deleted the IPAddress:\n{}", w.trace_text());
    let result = w.finish();
    fails(&w, result);
}

/// A pool of two and its claim `m0`, which carries another controller's condition (returned), seen by a term that
/// has not reconciled it yet.
fn claim_with_another_controllers_condition() -> (World, ObjectKey, Value) {
    let mut w = World::scripted();
    let ip = PoolId::Ip(0);
    w.create_pool_shaped(ip, Shape { v6: false, offset: 0, size: 2, ..Shape::default() });
    let m0 = w.create_claim_named(0, "m0", ip);
    let theirs = json!({"type": "MachineReady", "status": "True", "reason": "Provisioned", "message": "",
                        "lastTransitionTime": "2023-11-14T22:13:20Z"});
    w.patch_status(Kind::Claim, &m0, json!({"status": {"conditions": [theirs.clone()]}}));
    w.begin_term();
    w.deliver_all(&[]);
    (w, m0, theirs)
}

/// helper-73 F2, the other side of the scenario below: a claim carrying another controller's condition is bound, and
/// that condition is written back beside our Ready.
#[test]
fn a_claim_with_another_controllers_condition_is_bound_and_keeps_it() {
    let (mut w, m0, theirs) = claim_with_another_controllers_condition();
    w.run_to_rest(Job::Claim(m0.clone()));
    let result = w.finish();
    fails(&w, result);
    let claim = w.read(Kind::Claim, &m0).expect("m0");
    let conditions = claim["status"]["conditions"].as_array().cloned().unwrap_or_default();
    assert!(conditions.contains(&theirs), "{claim}");
    assert!(conditions.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"), "{claim}");
    assert_eq!(claim["status"]["addressRef"]["name"], "m0", "{claim}");
}

/// helper-71 F1: a claim carrying another controller's condition has its status written on a live read of the claim
/// of its name (merge patches replace lists whole). Replaced meanwhile by another provider's claim of the name, that
/// one is never written to.
#[test]
fn a_status_write_read_live_never_lands_on_another_providers_claim_of_the_name() {
    let (mut w, m0, _) = claim_with_another_controllers_condition();
    w.run_job(Job::Claim(m0.clone()));
    // Up to the status write's live read of the claim, which comes after the IPAddress's create.
    let mut created = false;
    loop {
        created |= w.is_pending(is_create);
        if created && w.is_pending(|op| matches!(op, Op::Get(Kind::Claim, _))) {
            break;
        }
        assert!(w.answer_newest(), "no live read of the claim after the create:\n{}", w.trace_text());
    }
    // Meanwhile the claim goes (its finalizers stripped) and a Metal3 claim of the name comes.
    w.force_delete_claim(&m0);
    let foreign = json!({
        "apiVersion": format!("{GROUP}/v1beta2"), "kind": "IPAddressClaim",
        "metadata": {"name": "m0", "namespace": m0.namespace.to_string()},
        "spec": {"poolRef": {"apiGroup": "ipam.metal3.io", "kind": "IPPool", "name": "m3"}},
    });
    w.create(Kind::Claim, foreign);
    w.answer_everything();
    let claim = w.read(Kind::Claim, &m0).expect("the Metal3 claim");
    assert_eq!(claim["spec"]["poolRef"]["apiGroup"], "ipam.metal3.io");
    assert!(claim["status"].is_null(), "we wrote to another provider's claim: {claim}\n{}", w.trace_text());
    assert!(claim["metadata"]["finalizers"].is_null(), "we wrote to another provider's claim: {claim}");
}

/// A review of the fixes found it: a Cluster moved back brings its claim and an IPAddress holding an address reserved
/// here as moved away; the claim reads it after its create meets it (409), before the IPAddress watch shows it. It is
/// the same address coming back, not a duplicate: the claim is bound to it and the reservation ends.
#[test]
fn an_address_that_comes_back_is_adopted_even_when_read_before_the_watch_shows_it() {
    let mut w = World::scripted();
    w.create_pool_shaped(PoolId::Global, Shape { v6: false, offset: 0, size: 2, ..Shape::default() });
    let gip = PoolId::Global;
    w.patch(gip.server_kind(), &gip.key(), json!({"metadata": {"annotations": { MOVED_AWAY_ANNOTATION: "10.1.0.1" }}}));
    w.create(
        Kind::Cluster,
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": "cl", "namespace": "a"}, "spec": {"paused": false}}),
    );
    w.begin_term();
    w.deliver_all(&[]);
    // clusterctl brings claim m0 back, and its IPAddress with the address it had.
    let claim = w.create(
        Kind::Claim,
        json!({
            "apiVersion": format!("{GROUP}/v1beta2"), "kind": "IPAddressClaim",
            "metadata": {"name": "m0", "namespace": "a", "labels": { CLUSTER_NAME_LABEL: "cl" }},
            "spec": {"poolRef": {"apiGroup": GROUP, "kind": "GlobalInClusterIPPool", "name": "gip"}},
        }),
    );
    w.create(Kind::Address, global_ipaddress("a", "m0", &claim["metadata"]["uid"], &json!("10.1.0.1"), Some("cl")));
    w.deliver_all(&[Kind::Claim]);
    let m0 = ObjectKey::new("a", "m0");
    w.run_job(Job::Claim(m0.clone()));
    w.answer_everything();
    let result = w.finish();
    fails(&w, result);
    let bound = w.read(Kind::Claim, &m0).expect("claim m0");
    assert_eq!(bound["status"]["addressRef"]["name"], "m0", "{}", w.trace_text());
    let address = w.read(Kind::Address, &m0).expect("its IPAddress");
    assert_eq!(address["spec"]["address"], "10.1.0.1", "the address that came back is the claim's");
    let pool = w.read(gip.server_kind(), &gip.key()).expect("the pool");
    assert!(pool["metadata"]["annotations"].get(MOVED_AWAY_ANNOTATION).is_none(), "the reservation ended: {pool}");
}

fn cluster(w: &mut World, paused: bool) -> ObjectKey {
    w.create(
        Kind::Cluster,
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": "cl", "namespace": "a"}, "spec": {"paused": paused}}),
    );
    ObjectKey::new("a", "cl")
}

fn claim_of_cluster(w: &mut World, name: &str) -> (ObjectKey, serde_json::Value) {
    let claim = w.create(
        Kind::Claim,
        json!({
            "apiVersion": format!("{GROUP}/v1beta2"), "kind": "IPAddressClaim",
            "metadata": {"name": name, "namespace": "a", "labels": { CLUSTER_NAME_LABEL: "cl" }},
            "spec": {"poolRef": {"apiGroup": GROUP, "kind": "GlobalInClusterIPPool", "name": "gip"}},
        }),
    );
    (ObjectKey::new("a", name), claim)
}

fn moved_away_entries(w: &World) -> String {
    let gip = PoolId::Global;
    let pool = w.read(gip.server_kind(), &gip.key()).expect("the pool");
    pool["metadata"]["annotations"][MOVED_AWAY_ANNOTATION].as_str().unwrap_or_default().to_owned()
}

/// A global pool of two, Cluster `a/cl` and its claim `a/m0` bound in it; the pool, the Cluster, the claim and the
/// claim's address.
fn claim_of_a_cluster_bound_in_the_global_pool() -> (World, PoolId, ObjectKey, ObjectKey, serde_json::Value) {
    claim_of_a_cluster_bound_in_the_global_pool_of_quota(None)
}

/// The same, the pool's Clusters each limited to `quota` addresses (docs/compatibility.md D21).
fn claim_of_a_cluster_bound_in_the_global_pool_of_quota(
    quota: Option<u8>,
) -> (World, PoolId, ObjectKey, ObjectKey, serde_json::Value) {
    let mut w = World::scripted();
    let gip = PoolId::Global;
    w.create_pool_shaped(gip, Shape { v6: false, offset: 0, size: 2, quota, ..Shape::default() });
    let cl = cluster(&mut w, false);
    let (m0, _) = claim_of_cluster(&mut w, "m0");
    w.begin_term();
    w.deliver_all(&[]);
    w.run_to_rest(Job::Claim(m0.clone()));
    let address = w.read(Kind::Address, &m0).expect("a/m0's IPAddress")["spec"]["address"].clone();
    (w, gip, cl, m0, address)
}

/// clusterctl's move away begins: the Cluster paused, its claim deleted for the move with its finalizers stripped.
fn clusterctl_deletes_for_the_move(w: &mut World, cl: &ObjectKey, claim: &ObjectKey) {
    w.patch(Kind::Cluster, cl, json!({"spec": {"paused": true}}));
    w.patch(Kind::Claim, claim, json!({"metadata": {"annotations": { DELETE_FOR_MOVE_ANNOTATION: "" }}}));
    w.force_delete_claim(claim);
}

/// clusterctl's move away, seen through: the claim's deletion for the move noticed (its IPAddress left behind, marked,
/// its entry queued), and the Cluster gone.
fn moves_away_leaving_its_ipaddress_behind(w: &mut World, cl: &ObjectKey, claim: &ObjectKey) {
    clusterctl_deletes_for_the_move(w, cl, claim);
    w.deliver_all(&[]);
    w.run_job(Job::Gone(claim.clone()));
    w.answer_everything();
    w.remove(Kind::Cluster, cl);
    w.deliver_all(&[]);
}

/// A person deletes the pool, its finalizer stripped first: it is gone at once.
fn a_person_deletes_the_pool(w: &mut World, pool: PoolId) {
    w.patch(pool.server_kind(), &pool.key(), json!({"metadata": {"finalizers": null}}));
    w.remove(pool.server_kind(), &pool.key());
}

/// The pool made again reserves `moved` in its annotation, and after a restart no new claim gets it.
fn the_pool_made_again_reserves_it_across_a_restart(w: &mut World, moved: Value) {
    assert!(
        moved_away_entries(w).contains(moved.as_str().unwrap_or("?")),
        "the pool made again does not reserve {moved}: {:?}\n{}",
        moved_away_entries(w),
        w.trace_text()
    );
    w.end_this_term();
    w.begin_term();
    w.deliver_all(&[]);
    new_claims_get_none_of(w, &[moved]);
}

/// A second review found it: a claim deleted without our release (its finalizer stripped by hand) leaves an
/// IPAddress that its pool owns too, and Kubernetes' garbage collector takes the dangling owner reference off (it
/// keeps a dependent that has a solid owner) before the orphan release looks. The IPAddress must still be released:
/// our finalizer and its `spec.claimRef` say whose it was.
#[test]
fn an_orphan_whose_claim_owner_the_garbage_collector_took_off_is_released() {
    let mut w = World::scripted();
    w.create_pool_shaped(PoolId::Ip(0), Shape { v6: false, offset: 0, size: 2, ..Shape::default() });
    let m0 = w.create_claim_named(0, "m0", PoolId::Ip(0));
    w.begin_term();
    w.deliver_all(&[]);
    w.run_to_rest(Job::Claim(m0.clone()));
    w.force_delete_claim(&m0);
    w.garbage_collect();
    let address = w.read(Kind::Address, &m0).expect("the orphan");
    let owners = address["metadata"]["ownerReferences"].as_array().map(Vec::len);
    assert_eq!(owners, Some(1), "only its pool owns it now: {address}");
    w.deliver_all(&[Kind::Address]);
    w.deliver_all(&[]);
    w.answer_everything();
    let result = w.finish();
    fails(&w, result);
    assert!(w.read(Kind::Address, &m0).is_none(), "the orphan was never released:\n{}", w.trace_text());
}

/// A second review found it: clusterctl moved Cluster `cl` away and left the IPAddress of its claim `m0` behind (a
/// global pool's); a new claim `m0` here, of no Cluster, must not adopt it (its address is in use over there): it is
/// let go, the address stays reserved, and the new claim gets another.
#[test]
fn an_ipaddress_a_move_left_behind_is_not_adopted_by_a_new_claim_of_its_name() {
    let mut w = World::scripted();
    let gip = PoolId::Global;
    w.create_pool_shaped(gip, Shape { v6: false, offset: 0, size: 2, ..Shape::default() });
    let cl = cluster(&mut w, false);
    let (m0, _) = claim_of_cluster(&mut w, "m0");
    w.begin_term();
    w.deliver_all(&[]);
    w.run_to_rest(Job::Claim(m0.clone()));
    let moved = w.read(Kind::Address, &m0).expect("m0's IPAddress")["spec"]["address"].clone();
    // clusterctl moves cl away: paused, its claim marked and deleted with the finalizers stripped, the Cluster deleted.
    w.patch(Kind::Cluster, &cl, json!({"spec": {"paused": true}}));
    w.patch(Kind::Claim, &m0, json!({"metadata": {"annotations": { DELETE_FOR_MOVE_ANNOTATION: "" }}}));
    w.force_delete_claim(&m0);
    w.remove(Kind::Cluster, &cl);
    w.deliver_all(&[]);
    w.run_to_rest(Job::MovedAway(gip.pool_key()));
    assert!(w.read(Kind::Address, &m0).is_some(), "the IPAddress is left behind");
    // A user creates a claim m0 of the pool here.
    let m0 = w.create_claim_named(0, "m0", gip);
    w.deliver_all(&[]);
    w.run_job(Job::Claim(m0.clone()));
    w.answer_everything();
    let result = w.finish();
    fails(&w, result);
    let bound = w.read(Kind::Address, &m0).expect("the new claim's IPAddress");
    assert_ne!(
        bound["spec"]["address"],
        moved,
        "the new claim took the address in use over there:\n{}",
        w.trace_text()
    );
    assert!(moved_away_entries(&w).contains(moved.as_str().unwrap_or("?")), "the reservation is gone");
}

/// Soak seed 110198788, scripted: as above, and the answer to taking our finalizer off the IPAddress let go is lost,
/// so the watch's Deleted event releases it. The answer of the DELETE before it (the object, being deleted, as the
/// API server returned it) must not make the index forget that it was left behind by a move: forgotten, its hold
/// stayed for the new claim of its name, which made its IPAddress with the address in use over there.
#[test]
fn an_ipaddress_a_move_left_behind_and_let_go_by_a_new_claim_of_its_name_keeps_its_address_reserved() {
    let mut w = World::scripted();
    let gip = PoolId::Global;
    w.create_pool_shaped(gip, Shape { v6: false, offset: 0, size: 2, ..Shape::default() });
    let cl = cluster(&mut w, false);
    let (m0, _) = claim_of_cluster(&mut w, "m0");
    w.begin_term();
    w.deliver_all(&[]);
    w.run_to_rest(Job::Claim(m0.clone()));
    let moved = w.read(Kind::Address, &m0).expect("m0's IPAddress")["spec"]["address"].clone();
    clusterctl_deletes_for_the_move(&mut w, &cl, &m0);
    w.remove(Kind::Cluster, &cl);
    w.deliver_all(&[Kind::Claim]);
    w.run_to_rest(Job::MovedAway(gip.pool_key()));
    let m0 = w.create_claim_named(0, "m0", gip);
    w.deliver_all(&[Kind::Claim]);
    w.run_job(Job::Claim(m0.clone()));
    let is_finalizer_off = |op: &Op| matches!(op, Op::PatchJson { kind: Kind::Address, .. });
    while !w.answer_where(is_finalizer_off, Fate::AppliedAnswerLost) {
        assert!(w.answer_where(|op| !is_finalizer_off(op), Fate::Answered), "never let go:\n{}", w.trace_text());
    }
    w.answer_everything();
    w.deliver_all(&[]);
    w.run_to_rest(Job::Claim(m0.clone()));
    let result = w.finish();
    fails(&w, result);
    let made = w.read(Kind::Address, &m0).unwrap_or_else(|| panic!("the new claim's IPAddress:\n{}", w.trace_text()));
    assert_ne!(made["spec"]["address"], moved, "the new claim took the address in use over there:\n{}", w.trace_text());
    assert!(moved_away_entries(&w).contains(moved.as_str().unwrap_or("?")), "the reservation is gone");
}

/// A second review found it: Cluster `cl` comes back with claim `m0` and its IPAddress, whose address is reserved
/// here as moved away, and the claim is deleted before it was bound again. The address is in use nowhere now: the
/// reservation ends (kept, it would be lost here and over there for good).
#[test]
fn a_claim_that_came_back_and_is_deleted_before_it_is_bound_ends_its_reservation() {
    let mut w = World::scripted();
    let gip = PoolId::Global;
    w.create_pool_shaped(gip, Shape { v6: false, offset: 0, size: 2, ..Shape::default() });
    w.patch(gip.server_kind(), &gip.key(), json!({"metadata": {"annotations": { MOVED_AWAY_ANNOTATION: "10.1.0.1" }}}));
    let cl = cluster(&mut w, true);
    w.begin_term();
    w.deliver_all(&[]);
    let (m0, claim) = claim_of_cluster(&mut w, "m0");
    w.create(Kind::Address, global_ipaddress("a", "m0", &claim["metadata"]["uid"], &json!("10.1.0.1"), Some("cl")));
    w.patch(Kind::Cluster, &cl, json!({"spec": {"paused": false}}));
    w.deliver_all(&[]);
    // Deleted for good before its worker ran.
    w.remove(Kind::Claim, &m0);
    w.deliver_all(&[]);
    w.answer_everything();
    let result = w.finish();
    fails(&w, result);
    assert!(w.read(Kind::Address, &m0).is_none(), "the IPAddress was released");
    assert_eq!(moved_away_entries(&w), "", "the reservation outlived the claim:\n{}", w.trace_text());
}

/// The soak of the final code found it: an IPAddress that a late create made (a duplicate, its claim gone) is being
/// deleted by an orphan release that did not finish, when a new claim of its name appears. The orphan release leaves
/// IPAddresses of a live claim's name alone, so the new claim must let it go itself rather than wait for it forever.
#[test]
fn a_new_claim_lets_a_duplicate_being_deleted_under_its_name_go() {
    let mut w = World::scripted();
    let gip = PoolId::Global;
    w.create_pool_shaped(gip, Shape { v6: false, offset: 0, size: 2, ..Shape::default() });
    let a = w.create_claim_named(0, "m0", gip);
    w.begin_term();
    w.deliver_all(&[]);
    w.run_to_rest(Job::Claim(a.clone()));
    let taken = w.read(Kind::Address, &a).expect("a/m0's IPAddress")["spec"]["address"].clone();
    // The late create of a claim b/m0 that is gone: the same address, owned by a claim that no longer exists.
    let b = ObjectKey::new("b", "m0");
    w.create(Kind::Address, global_ipaddress("b", "m0", &json!("00000000-0000-4000-8000-0000000000ff"), &taken, None));
    // Its release sent the DELETE, and stopped before our finalizer came off.
    w.remove(Kind::Address, &b);
    assert!(w.read(Kind::Address, &b).is_some_and(|o| !o["metadata"]["deletionTimestamp"].is_null()));
    w.create_claim_named(1, "m0", gip);
    w.deliver_all(&[]);
    w.run_job(Job::Claim(b.clone()));
    w.answer_everything();
    let result = w.finish();
    fails(&w, result);
    let bound = w.read(Kind::Address, &b).expect("b/m0's own IPAddress");
    assert_ne!(bound["spec"]["address"], taken, "b/m0 shares a/m0's address:\n{}", w.trace_text());
}

/// Seed 9039423 of a soak found it: the record of an IPAddress our create made (or a read found) that no watch event
/// showed yet is deleted, and another IPAddress of its name is made, before the IPAddress watch lists again. The list
/// brings the new one, newer than the record: it is the news, not an older event to skip. Skipped, it was never
/// indexed, and once its claim was gone no orphan release found it: a leak.
#[test]
fn a_relist_that_brings_a_newer_ipaddress_of_a_recorded_name_indexes_it() {
    let mut w = World::scripted();
    let gip = PoolId::Global;
    w.create_pool_shaped(gip, Shape { v6: false, offset: 0, size: 2, ..Shape::default() });
    cluster(&mut w, false);
    let (m0, _) = claim_of_cluster(&mut w, "m0");
    w.begin_term();
    w.deliver_all(&[]);
    // The claim's IPAddress is created; the IPAddress watch shows nothing of it.
    w.run_job(Job::Claim(m0.clone()));
    w.answer_everything();
    let first = w.read(Kind::Address, &m0).expect("m0's IPAddress");
    // It goes with its claim, and another claim m0 gets an IPAddress of the name (clusterctl, or another manager),
    // whose claim then goes too: an orphan to release.
    w.force_delete_claim(&m0);
    w.patch(Kind::Address, &m0, json!({"metadata": {"finalizers": null}}));
    w.remove(Kind::Address, &m0);
    let (_, claim) = claim_of_cluster(&mut w, "m0");
    w.create(
        Kind::Address,
        global_ipaddress("a", "m0", &claim["metadata"]["uid"], &first["spec"]["address"], Some("cl")),
    );
    w.force_delete_claim(&m0);
    // The IPAddress watch expires before it delivered any of this, and lists again.
    w.expire_watch_of(Kind::Address);
    w.deliver_all(&[]);
    w.answer_everything();
    let result = w.finish();
    fails(&w, result);
    assert!(w.read(Kind::Address, &m0).is_none(), "the orphan was never released:\n{}", w.trace_text());
}

/// Seed 9093993 of a soak led to it: the create of claim `b/m4`'s IPAddress, sent by a leader whose term then ended,
/// lands late, after the address it chose went to claim `a/m3` of Cluster `cl`, `cl` moved away, and the IPAddress
/// it left behind was released into a reservation. The late IPAddress holds a reserved address, but it is not the one
/// that moved away coming back (that one has the moved IPAddress's name): a duplicate of the reservation, withdrawn,
/// never adopted, and the reservation stays.
#[test]
fn a_late_ipaddress_holding_a_reserved_address_under_another_name_is_not_adopted() {
    let mut w = World::scripted();
    let gip = PoolId::Global;
    w.create_pool_shaped(gip, Shape { v6: false, offset: 0, size: 1, ..Shape::default() });
    let cl = cluster(&mut w, false);
    let (m3, _) = claim_of_cluster(&mut w, "m3");
    let m4 = w.create_claim_named(1, "m4", gip);
    w.begin_term();
    w.deliver_all(&[]);
    w.run_to_rest(Job::Claim(m3.clone()));
    // The pool's one address is a/m3's: b/m4 waits.
    w.run_to_rest(Job::Claim(m4.clone()));
    let moved = w.read(Kind::Address, &m3).expect("a/m3's IPAddress")["spec"]["address"].clone();
    // clusterctl moves cl away; the IPAddress a/m3 left behind is released into a reservation.
    move_away_and_release(&mut w, &cl, &m3);
    assert!(w.read(Kind::Address, &m3).is_none(), "the IPAddress left behind is released:\n{}", w.trace_text());
    // The late create of b/m4's IPAddress lands, holding that address.
    let claim = w.read(Kind::Claim, &m4).expect("claim b/m4");
    w.create(Kind::Address, global_ipaddress("b", "m4", &claim["metadata"]["uid"], &moved, None));
    w.deliver_all(&[]);
    w.run_job(Job::Claim(m4.clone()));
    w.answer_everything();
    let result = w.finish();
    fails(&w, result);
    let bound = w.read(Kind::Claim, &m4).expect("claim b/m4");
    assert!(
        bound["status"]["addressRef"]["name"].is_null()
            || w.read(Kind::Address, &m4).is_some_and(|a| a["spec"]["address"] != moved),
        "b/m4 took the address in use over there:\n{}",
        w.trace_text()
    );
    assert!(
        moved_away_entries(&w).contains(moved.as_str().unwrap_or("?")),
        "the reservation is gone:\n{}",
        w.trace_text()
    );
}

/// The same late IPAddress, met by a manager that starts after it landed, with the IPAddress watch listed before the
/// pool's (so the reservation comes after the IPAddress that holds its address): still a duplicate of the
/// reservation, not the IPAddress the entry names.
#[test]
fn a_late_ipaddress_holding_a_reserved_address_is_not_adopted_when_listed_before_its_pool() {
    let mut w = World::scripted();
    let gip = PoolId::Global;
    w.create_pool_shaped(gip, Shape { v6: false, offset: 0, size: 1, ..Shape::default() });
    w.patch(
        gip.server_kind(),
        &gip.key(),
        json!({"metadata": {"annotations": { MOVED_AWAY_ANNOTATION: "10.1.0.1@a/m3" }}}),
    );
    let m4 = w.create_claim_named(1, "m4", gip);
    let claim = w.read(Kind::Claim, &m4).expect("claim b/m4");
    w.create(Kind::Address, global_ipaddress("b", "m4", &claim["metadata"]["uid"], &json!("10.1.0.1"), None));
    w.begin_term();
    w.deliver_all(&[Kind::Address]);
    w.deliver_all(&[]);
    w.run_job(Job::Claim(m4.clone()));
    w.answer_everything();
    let result = w.finish();
    fails(&w, result);
    let bound = w.read(Kind::Claim, &m4).expect("claim b/m4");
    assert!(bound["status"]["addressRef"]["name"].is_null(), "b/m4 took the reserved address:\n{}", w.trace_text());
    assert!(w.read(Kind::Address, &m4).is_none(), "the late IPAddress is withdrawn:\n{}", w.trace_text());
    assert_eq!(moved_away_entries(&w), "10.1.0.1@a/m3", "the reservation stays:\n{}", w.trace_text());
}

/// Moves `cl` of claim `m0` away as clusterctl does, and releases the IPAddress it left behind into a reservation.
fn move_away_and_release(w: &mut World, cl: &ObjectKey, m0: &ObjectKey) {
    let gip = PoolId::Global;
    w.patch(Kind::Cluster, cl, json!({"spec": {"paused": true}}));
    w.patch(Kind::Claim, m0, json!({"metadata": {"annotations": { DELETE_FOR_MOVE_ANNOTATION: "" }}}));
    w.force_delete_claim(m0);
    w.remove(Kind::Cluster, cl);
    w.deliver_all(&[]);
    w.run_to_rest(Job::MovedAway(gip.pool_key()));
    w.sweep_to_rest();
}

/// The owner references of an IPAddress of the global pool once the garbage collector took its claim's off: the pool's.
fn owned_by_the_global_pool(w: &World) -> Value {
    let gip = PoolId::Global;
    let pool_uid = w.read(gip.server_kind(), &gip.key()).expect("the pool")["metadata"]["uid"].clone();
    json!([{"apiVersion": format!("{GROUP}/v1alpha2"), "kind": "GlobalInClusterIPPool", "name": "gip",
            "uid": pool_uid, "controller": false, "blockOwnerDeletion": true}])
}

/// Velero restores claim `name` of the namespace numbered `namespace` in the global pool (no status), then its
/// IPAddress holding `address`, as the garbage collector left it: its owner reference to the backup's claim taken off.
fn velero_restores_with_its_owner_collected(w: &mut World, namespace: usize, name: &str, address: &Value) -> ObjectKey {
    let claim = w.create_claim_named(namespace, name, PoolId::Global);
    w.patch(Kind::Claim, &claim, json!({"metadata": {"labels": { VELERO_RESTORE_LABEL: "restore-1" }}}));
    let backups_claim = json!("00000000-0000-0000-00ff-000000000000");
    let mut restored = global_ipaddress(&claim.namespace, name, &backups_claim, address, None);
    restored["metadata"]["labels"][VELERO_RESTORE_LABEL] = json!("restore-1");
    restored["metadata"]["ownerReferences"] = owned_by_the_global_pool(w);
    w.create(Kind::Address, restored);
    claim
}

/// An IPAddress of a global pool, as our manager or clusterctl makes it.
fn global_ipaddress(namespace: &str, name: &str, owner_uid: &Value, address: &Value, cluster: Option<&str>) -> Value {
    let labels = cluster.map_or_else(|| json!({}), |c| json!({ CLUSTER_NAME_LABEL: c }));
    json!({
        "apiVersion": format!("{GROUP}/v1beta2"), "kind": "IPAddress",
        "metadata": {"name": name, "namespace": namespace, "labels": labels, "finalizers": [PROTECT_ADDRESS_FINALIZER],
                     "ownerReferences": [{"apiVersion": format!("{GROUP}/v1beta2"), "kind": "IPAddressClaim",
                                          "name": name, "uid": owner_uid, "controller": true}]},
        "spec": {"claimRef": {"name": name}, "poolRef": {"apiGroup": GROUP, "kind": "GlobalInClusterIPPool", "name": "gip"},
                 "address": address, "prefix": 24},
    })
}

/// A global pool of one address; `a/m0` of Cluster `cl` bound to it and `b/m1` waiting. `cl` moves away, and the
/// IPAddress it left behind is released into a reservation; a deposed leader's create of `b/m1`'s IPAddress holding
/// that address lands; clusterctl brings `cl` back with `a/m0` and its IPAddress, and unpauses it. Returns the world,
/// the pool, `a/m0`, `b/m1` and the address.
fn came_back_beside_a_late_ipaddress() -> (World, PoolId, ObjectKey, ObjectKey, Value) {
    let mut w = World::scripted();
    let gip = PoolId::Global;
    w.create_pool_shaped(gip, Shape { v6: false, offset: 0, size: 1, ..Shape::default() });
    let cl = cluster(&mut w, false);
    let (m0, _) = claim_of_cluster(&mut w, "m0");
    let m1 = w.create_claim_named(1, "m1", gip);
    w.begin_term();
    w.deliver_all(&[]);
    w.run_to_rest(Job::Claim(m0.clone()));
    w.run_to_rest(Job::Claim(m1.clone()));
    let moved = w.read(Kind::Address, &m0).expect("a/m0's IPAddress")["spec"]["address"].clone();
    move_away_and_release(&mut w, &cl, &m0);
    let m1_uid = w.read(Kind::Claim, &m1).expect("claim b/m1")["metadata"]["uid"].clone();
    w.create(Kind::Address, global_ipaddress("b", "m1", &m1_uid, &moved, None));
    cluster(&mut w, true);
    let (_, back) = claim_of_cluster(&mut w, "m0");
    w.create(Kind::Address, global_ipaddress("a", "m0", &back["metadata"]["uid"], &moved, Some("cl")));
    w.patch(Kind::Cluster, &cl, json!({"spec": {"paused": false}}));
    w.deliver_all(&[]);
    (w, gip, m0, m1, moved)
}

/// The address the claim `key` is bound to: its IPAddress's, when its status names one.
fn bound_to(w: &World, key: &ObjectKey) -> Option<Value> {
    let claim = w.read(Kind::Claim, key).expect("the claim");
    let bound = claim["status"]["addressRef"]["name"].as_str().is_some_and(|n| !n.is_empty());
    bound.then(|| w.read(Kind::Address, key).map(|a| a["spec"]["address"].clone())).flatten()
}

/// The review of the fix above found it: a late IPAddress of `b/m1` holding an address reserved for `a/m0` lands, and
/// before `b/m1`'s claim withdraws it, Cluster `cl` moves back with `a/m0` and the IPAddress of that name. The one that
/// came back wins: it is the address its machine uses, so `a/m0` is bound to it and the reservation ends, while the
/// late one is withdrawn. A second review added: even when `a/m0`'s first status write fails (the reservation must
/// not end before the binding is written, or the next look finds two unnamed holders and withdraws `a/m0`).
#[test]
fn the_ipaddress_that_came_back_wins_over_a_late_one_holding_its_address() {
    let (mut w, gip, m0, m1, moved) = came_back_beside_a_late_ipaddress();
    // a/m0's first binding fails (its status write never arrives); the moved-away writer runs meanwhile.
    w.run_job(Job::Claim(m0.clone()));
    let is_status_write = |op: &Op| matches!(op, Op::PatchMerge { kind: Kind::Claim, status: true, .. });
    while !w.answer_where(is_status_write, Fate::NotApplied) {
        assert!(w.answer_where(|op| !is_status_write(op), Fate::Answered), "a/m0 never wrote its status");
    }
    w.answer_everything();
    w.run_to_rest(Job::MovedAway(gip.pool_key()));
    w.run_job(Job::Claim(m1.clone()));
    w.answer_everything();
    w.deliver_all(&[]);
    w.run_job(Job::Claim(m0.clone()));
    w.answer_everything();
    let result = w.finish();
    fails(&w, result);
    let back = w.read(Kind::Claim, &m0).expect("claim a/m0");
    assert_eq!(back["status"]["addressRef"]["name"], "m0", "a/m0 is bound again:\n{}", w.trace_text());
    let address = w.read(Kind::Address, &m0).expect("its IPAddress");
    assert_eq!(address["spec"]["address"], moved, "the IPAddress that came back was withdrawn:\n{}", w.trace_text());
    assert!(w.read(Kind::Address, &m1).is_none_or(|a| a["spec"]["address"] != moved), "{}", w.trace_text());
    assert_eq!(moved_away_entries(&w), "", "the reservation outlived the move back:\n{}", w.trace_text());
}

/// Helper-82: the same late IPAddress of `b/m1`, and its deposed leader's binding write of `b/m1` still in flight when
/// Cluster `cl` comes back with `a/m0`. The one that came back wins the duplicate as the cache shows it (no other
/// holder bound), but must not bind before `b/m1`'s is withdrawn: bound at once, the late write lands and two claims
/// are bound to one address.
#[test]
fn the_ipaddress_that_came_back_does_not_bind_beside_a_binding_in_flight() {
    let (mut w, gip, m0, m1, moved) = came_back_beside_a_late_ipaddress();
    w.run_job(Job::Claim(m0.clone()));
    w.answer_everything();
    // The deposed leader's binding of b/m1 lands now.
    let allocated = format!("allocated {} from {}", moved.as_str().unwrap_or("?"), gip.pool_key());
    let condition = json!({"type": "Ready", "status": "True", "reason": "Allocated", "message": allocated,
                           "lastTransitionTime": "2026-01-01T00:00:00Z"});
    w.patch_status(Kind::Claim, &m1, json!({"status": {"addressRef": {"name": "m1"}, "conditions": [condition]}}));
    w.deliver_all(&[]);
    w.run_to_rest(Job::Claim(m0.clone()));
    w.run_to_rest(Job::Claim(m1.clone()));
    let result = w.finish();
    fails(&w, result);
    let (m0_has, m1_has) = (bound_to(&w, &m0), bound_to(&w, &m1));
    assert!(
        m0_has.is_none() || m0_has != m1_has,
        "a/m0 and b/m1 are bound to one address ({m0_has:?})\n{}",
        w.trace_text()
    );
}

/// The same review found it: the IPAddress a move left behind is released, and before the IPAddress watch delivers
/// its deletion, a late create of its name lands holding another address; the watch then lists again. The record
/// replaced in place must hand the reserved address to the reservation, not free it.
#[test]
fn a_record_replaced_by_a_newer_ipaddress_of_its_name_keeps_its_reserved_address_reserved() {
    let (mut w, gip, cl, m0, moved) = claim_of_a_cluster_bound_in_the_global_pool();
    let claim = w.read(Kind::Claim, &m0).expect("claim a/m0");
    // Moved away; the IPAddress left behind is released, and the IPAddress watch does not show that.
    clusterctl_deletes_for_the_move(&mut w, &cl, &m0);
    w.remove(Kind::Cluster, &cl);
    w.deliver_all(&[Kind::Claim, Kind::Cluster]);
    w.run_job(Job::MovedAway(gip.pool_key()));
    w.answer_everything();
    w.deliver_all(&[gip.server_kind()]);
    w.sweep_after_the_delay();
    w.answer_everything();
    assert!(w.read(Kind::Address, &m0).is_none(), "the IPAddress left behind is released:\n{}", w.trace_text());
    assert!(moved_away_entries(&w).contains(moved.as_str().unwrap_or("?")), "{}", w.trace_text());
    // A late create of a/m0 (for the claim that moved) lands holding the other address; the watch lists again.
    let other = if moved == "10.1.0.1" { json!("10.1.0.2") } else { json!("10.1.0.1") };
    w.create(Kind::Address, global_ipaddress("a", "m0", &claim["metadata"]["uid"], &other, Some("cl")));
    w.expire_watch_of(Kind::Address);
    w.deliver_all(&[Kind::Address]);
    // A new claim of the pool must not get the address in use over there.
    let m5 = w.create_claim_named(1, "m5", gip);
    w.deliver_all(&[]);
    w.run_job(Job::Claim(m5.clone()));
    w.answer_everything();
    let result = w.finish();
    fails(&w, result);
    let got = w.read(Kind::Address, &m5).map(|a| a["spec"]["address"].clone());
    assert_ne!(got, Some(moved.clone()), "b/m5 got the address in use over there:\n{}", w.trace_text());
    assert!(moved_away_entries(&w).contains(moved.as_str().unwrap_or("?")), "{}", w.trace_text());
}

/// Seed 9311354 of the soak of the final code found it: a deposed leader's late IPAddress `a/m2` holds the address
/// bound claim `a/m0` has, its claim is gone, a new claim `a/m2` is of another pool (so it cannot withdraw it), and
/// the late IPAddress's Cluster is paused (so the orphan release kept it): a duplicate for as long as the pause
/// lasted. A paused Cluster keeps its addresses, but not a late duplicate of a bound claim's.
#[test]
fn a_late_duplicate_of_a_bound_address_is_released_even_while_its_cluster_is_paused() {
    late_duplicate_of_a_bound_address_under_a_pause(false);
}

/// Seed 802181713 of the soak: the same, the bound claim `a/m0` (of Cluster `cl`) being deleted while `cl` is paused,
/// which holds its release. Its machine may use the address until then; the late duplicate was kept beside it for as
/// long as the pause lasted.
#[test]
fn a_late_duplicate_is_released_while_the_bound_claim_of_its_address_is_being_deleted_under_a_pause() {
    late_duplicate_of_a_bound_address_under_a_pause(true);
}

fn late_duplicate_of_a_bound_address_under_a_pause(bound_one_deleting: bool) {
    let mut w = World::scripted();
    let gip = PoolId::Global;
    w.create_pool_shaped(gip, Shape { v6: false, offset: 0, size: 1, ..Shape::default() });
    w.create_pool_shaped(PoolId::Ip(0), Shape { v6: false, offset: 0, size: 2, ..Shape::default() });
    let cl = cluster(&mut w, false);
    let m0 = if bound_one_deleting { claim_of_cluster(&mut w, "m0").0 } else { w.create_claim_named(0, "m0", gip) };
    w.begin_term();
    w.deliver_all(&[]);
    w.run_to_rest(Job::Claim(m0.clone()));
    let taken = w.read(Kind::Address, &m0).expect("a/m0's IPAddress")["spec"]["address"].clone();
    // The late create of a gone claim a/m2 of Cluster cl lands with that address; cl is paused (and a/m0 deleted,
    // its release held); a new claim a/m2 of another pool appears.
    let gone = json!("00000000-0000-4000-8000-0000000000ff");
    w.create(Kind::Address, global_ipaddress("a", "m2", &gone, &taken, Some("cl")));
    w.patch(Kind::Cluster, &cl, json!({"spec": {"paused": true}}));
    if bound_one_deleting {
        w.remove(Kind::Claim, &m0);
    }
    let m2 = w.create_claim_named(0, "m2", PoolId::Ip(0));
    w.deliver_all(&[]);
    w.run_job(Job::Claim(m2.clone()));
    w.run_job(Job::Claim(m0.clone()));
    w.answer_everything();
    w.sweep_after_the_delay();
    w.answer_everything();
    let result = w.finish();
    fails(&w, result);
    let late = w.read(Kind::Address, &m2);
    assert!(late.is_none_or(|a| a["spec"]["address"] != taken), "the late duplicate stays:\n{}", w.trace_text());
    let bound = w.read(Kind::Claim, &m0).expect("a/m0");
    assert_eq!(bound["status"]["addressRef"]["name"], "m0");
    assert_eq!(bound["metadata"]["deletionTimestamp"].is_null(), !bound_one_deleting, "{bound}");
    assert!(w.read(Kind::Address, &m0).is_some(), "a/m0's IPAddress went while its Cluster is paused");
}

/// The review of issue 24 found it: claim `m1` is deleted with its finalizer stripped and the orphan release deletes
/// its IPAddress; before the IPAddress watch shows that, `m1` comes back with an IPAddress of its name made by hand,
/// holding the address `m0` is bound to. The claim judged the old IPAddress (no duplicate, not its own): it must not
/// adopt the new one on that judgement, or two bound claims share an address for good.
#[test]
fn a_claim_adopts_only_the_ipaddress_it_judged() {
    let ip = PoolId::Ip(0);
    let (mut w, m0, m1) = two_claims_bound_in(ip, (0, "m0"), (0, "m1"));
    let taken = w.read(Kind::Address, &m0).expect("m0's IPAddress")["spec"]["address"].clone();
    w.force_delete_claim(&m1);
    w.deliver_all(&[Kind::Claim]);
    w.run_job(Job::Gone(m1.clone()));
    w.answer_everything();
    assert!(w.read(Kind::Address, &m1).is_none(), "the orphan release deleted m1's IPAddress");
    w.create_claim_named(0, "m1", ip);
    let uid = w.read(Kind::Claim, &m1).expect("claim m1")["metadata"]["uid"].clone();
    w.create(
        Kind::Address,
        json!({
            "apiVersion": format!("{GROUP}/v1beta2"), "kind": "IPAddress",
            "metadata": {"name": "m1", "namespace": "a",
                         "ownerReferences": [{"apiVersion": format!("{GROUP}/v1beta2"), "kind": "IPAddressClaim",
                                              "name": "m1", "uid": uid, "controller": true}]},
            "spec": {"claimRef": {"name": "m1"}, "poolRef": {"apiGroup": GROUP, "kind": "InClusterIPPool", "name": "ip"},
                     "address": taken, "prefix": 24},
        }),
    );
    // Only the claim watch is up to date: the index still shows the deleted IPAddress of m1.
    w.deliver_all(&[Kind::Claim]);
    w.run_to_rest(Job::Claim(m1.clone()));
    w.run_job(Job::Claim(m1.clone()));
    w.answer_everything();
    let result = w.finish();
    fails(&w, result);
    let m1_bound = w.read(Kind::Claim, &m1).expect("claim m1")["status"]["addressRef"]["name"] == "m1";
    let m1_address = w.read(Kind::Address, &m1).map(|a| a["spec"]["address"].clone());
    assert!(!(m1_bound && m1_address == Some(taken)), "m0 and m1 are bound to one address:\n{}", w.trace_text());
}

/// Issue 33, finding 4: the moved-away annotation was rewritten whole on every change, and once it grew past the API
/// server's limit every write was refused, retried each second for ever. The IPAddresses a move left behind were held
/// back only by what the process knew; a restart lost it, released them as orphans, and handed their addresses out
/// while the other management cluster used them. Now what fits is written, and the IPAddresses whose address does
/// not fit carry our mark and are kept, across a restart, until an operator frees them.
#[test]
fn a_move_too_large_for_the_annotation_loses_nothing_across_a_restart() {
    let mut w = World::scripted();
    let gip = PoolId::Global;
    w.create_pool_shaped(gip, Shape { v6: false, offset: 0, size: 3, ..Shape::default() });
    // Room for one entry in the annotation; an API server that refuses two.
    w.limit_annotations(14, 50);
    let cl = cluster(&mut w, false);
    let (m0, _) = claim_of_cluster(&mut w, "m0");
    let (m1, _) = claim_of_cluster(&mut w, "m1");
    w.begin_term();
    w.deliver_all(&[]);
    for m in [&m0, &m1] {
        w.run_to_rest(Job::Claim(m.clone()));
    }
    let moved: Vec<Value> =
        [&m0, &m1].iter().map(|m| w.read(Kind::Address, m).expect("an IPAddress")["spec"]["address"].clone()).collect();
    // clusterctl moves cl away.
    w.patch(Kind::Cluster, &cl, json!({"spec": {"paused": true}}));
    for m in [&m0, &m1] {
        w.patch(Kind::Claim, m, json!({"metadata": {"annotations": { DELETE_FOR_MOVE_ANNOTATION: "" }}}));
        w.force_delete_claim(m);
    }
    w.deliver_all(&[]);
    for m in [&m0, &m1] {
        w.run_job(Job::Gone(m.clone()));
        w.answer_everything();
    }
    w.remove(Kind::Cluster, &cl);
    w.deliver_all(&[]);
    w.run_to_rest(Job::MovedAway(gip.pool_key()));
    w.sweep_to_rest();
    // The manager restarts: what it knew goes.
    w.end_this_term();
    w.begin_term();
    w.deliver_all(&[]);
    w.sweep_to_rest();
    new_claims_get_none_of(&mut w, &moved);
    let recorded = moved_away_entries(&w);
    let kept: Vec<ObjectKey> = [&m0, &m1].into_iter().filter(|m| w.read(Kind::Address, m).is_some()).cloned().collect();
    assert_eq!(
        recorded.split(',').filter(|e| !e.is_empty()).count() + kept.len(),
        2,
        "each address recorded once: {recorded:?}, kept {kept:?}\n{}",
        w.trace_text()
    );
    for m in &kept {
        let a = w.read(Kind::Address, m).expect("kept");
        assert_eq!(a["metadata"]["annotations"][MOVED_AWAY_ANNOTATION], "true", "{m} is kept by our mark: {a}");
    }
}

/// Issue 33, finding 5: a pool edit admitted while an allocation is in flight (the webhook lists live IPAddresses, and
/// the create has not landed) excluded the address being created: the claim was bound to an address the pool no
/// longer allocates, and only `outOfRange: 1` said so. The IPAddress is let go before the claim is bound, and the
/// claim gets an address the pool allocates.
#[test]
fn an_address_the_pool_stops_allocating_while_it_is_created_is_not_handed_out() {
    let mut w = World::scripted();
    let ip = PoolId::Ip(0);
    w.create_pool_shaped(ip, Shape { v6: false, offset: 0, size: 2, ..Shape::default() });
    let m0 = w.create_claim_named(0, "m0", ip);
    w.begin_term();
    w.deliver_all(&[]);
    w.run_job(Job::Claim(m0.clone()));
    assert!(w.answer_where(is_claim_patch("m0"), Fate::Answered), "the finalizer");
    // The create of 10.0.0.1 is in flight; the edit keeps 10.0.0.2 only, and the pool's watch shows it first.
    w.edit_pool_shaped(ip, Shape { v6: false, offset: 1, size: 1, ..Shape::default() });
    w.deliver_all(&[Kind::Pool(ip.kind())]);
    assert!(w.answer_where(is_create, Fate::Answered), "the create");
    w.answer_everything();
    let result = w.finish();
    fails(&w, result);
    let address = w.read(Kind::Address, &m0).expect("m0's IPAddress");
    assert_eq!(address["spec"]["address"], "10.0.0.2", "{address}\n{}", w.trace_text());
    let claim = w.read(Kind::Claim, &m0).expect("m0");
    assert_eq!(claim["status"]["addressRef"]["name"], "m0", "bound: {claim}");
}

/// The orphan release judges the object it recorded: an IPAddress made by hand under the name of an orphan, after the
/// release read its record and before it read the live object (no owner references, like the orphan whose claim
/// owner the garbage collector took off), is not ours to delete.
#[test]
fn an_orphan_release_leaves_an_ipaddress_made_by_hand_in_its_place_alone() {
    let (mut w, _, m0) = bound_claim_of_a_pool_of_two();
    w.force_delete_claim(&m0);
    w.garbage_collect();
    w.deliver_all(&[]);
    w.run_job(Job::Gone(m0.clone()));
    // The release reads the IPAddress; meanwhile someone replaces it with one of their own.
    w.patch(Kind::Address, &m0, json!({"metadata": {"finalizers": null}}));
    w.remove(Kind::Address, &m0);
    let by_hand = w.create(
        Kind::Address,
        json!({"apiVersion": format!("{GROUP}/v1beta2"), "kind": "IPAddress",
               "metadata": {"name": "m0", "namespace": "a"},
               "spec": {"claimRef": {"name": "m0"}, "address": "10.0.0.2", "prefix": 24,
                        "poolRef": {"apiGroup": GROUP, "kind": "InClusterIPPool", "name": "ip"}}}),
    );
    w.answer_everything();
    w.deliver_all(&[]);
    w.answer_everything();
    let live = w
        .read(Kind::Address, &m0)
        .unwrap_or_else(|| panic!("the hand-made IPAddress was deleted:\n{}", w.trace_text()));
    assert_eq!(live["metadata"]["uid"], by_hand["metadata"]["uid"]);
}

/// `addressReuseGracePeriodSeconds` holds a released address, whether the claim is deleted with its release (its
/// finalizer) or without (stripped by hand, issue 33 finding 8): the IPAddress stays for the grace period, and no other
/// claim gets the address meanwhile.
#[test]
fn the_reuse_grace_period_holds_an_address_whether_or_not_its_claim_went_through_its_release() {
    for stripped in [false, true] {
        let mut w = World::scripted();
        let ip = PoolId::Ip(0);
        w.create_pool_shaped(ip, Shape { v6: false, offset: 0, size: 2, ..Shape::default() });
        w.patch(ip.server_kind(), &ip.key(), json!({"spec": {"addressReuseGracePeriodSeconds": 60}}));
        let m0 = w.create_claim_named(0, "m0", ip);
        w.begin_term();
        w.deliver_all(&[]);
        w.run_to_rest(Job::Claim(m0.clone()));
        let held = w.read(Kind::Address, &m0).expect("m0's IPAddress")["spec"]["address"].clone();
        if stripped {
            w.force_delete_claim(&m0);
            w.deliver_all(&[]);
            w.run_job(Job::Gone(m0.clone()));
            w.answer_everything();
            w.run_job(Job::Sweep);
        } else {
            w.remove(Kind::Claim, &m0);
            w.deliver_all(&[]);
            w.run_job(Job::Claim(m0.clone()));
        }
        w.answer_everything();
        w.deliver_all(&[]);
        let kept = w.read(Kind::Address, &m0);
        assert!(
            kept.as_ref().is_some_and(|a| a["metadata"]["deletionTimestamp"].is_null()),
            "released within the grace period (finalizer stripped: {stripped}):\n{}",
            w.trace_text()
        );
        let m1 = w.create_claim_named(0, "m1", ip);
        w.deliver_all(&[]);
        w.run_job(Job::Claim(m1.clone()));
        w.answer_everything();
        let other = w.read(Kind::Address, &m1).expect("m1's IPAddress");
        assert_ne!(other["spec"]["address"], held, "the held address went to another claim (stripped: {stripped})");
    }
}

/// The second adversarial read found it: a bound claim's IPAddress deleted by a person, then a leader change. The new
/// leader knows nothing of the address, and a claim waiting for one (woken first at start-up) took it while the first
/// claim's machine used it. The address its condition names is held for it as soon as every watch has listed.
#[test]
fn a_bound_claim_whose_ipaddress_a_person_deleted_keeps_its_address_across_a_leader_change() {
    let (mut w, ip, m0) = bound_claim_of_a_pool_of_two();
    let held = w.read(Kind::Address, &m0).expect("m0's IPAddress")["spec"]["address"].clone();
    assert_eq!(held, "10.0.0.1");
    w.patch(Kind::Address, &m0, json!({"metadata": {"finalizers": null}}));
    w.remove(Kind::Address, &m0);
    w.end_this_term();
    let m1 = w.create_claim_named(0, "m1", ip);
    w.begin_term();
    w.deliver_all(&[]);
    // The waiting claim goes first, as at start-up.
    w.run_job(Job::Claim(m1.clone()));
    w.answer_everything();
    w.run_to_rest(Job::Claim(m0.clone()));
    let result = w.finish();
    fails(&w, result);
    let m1_address = w.read(Kind::Address, &m1).expect("m1's IPAddress")["spec"]["address"].clone();
    assert_ne!(m1_address, held, "the waiting claim took the address m0's machine uses:\n{}", w.trace_text());
    let again = w.read(Kind::Address, &m0).expect("m0's IPAddress made again");
    assert_eq!(again["spec"]["address"], held, "{again}");
}

/// The second adversarial read found it: an unbound claim's create that failed without an answer, of an address the
/// pool was then edited to no longer allocate, kept its hold and was made again out of range. It is found out first:
/// not made, the claim gets an address the pool allocates.
#[test]
fn an_uncertain_create_of_an_address_the_pool_stopped_allocating_is_found_out_before_it_is_made_again() {
    let mut w = World::scripted();
    let ip = PoolId::Ip(0);
    w.create_pool_shaped(ip, Shape { v6: false, offset: 0, size: 2, ..Shape::default() });
    let m0 = w.create_claim_named(0, "m0", ip);
    w.begin_term();
    w.deliver_all(&[]);
    w.run_job(Job::Claim(m0.clone()));
    assert!(w.answer_where(is_claim_patch("m0"), Fate::Answered), "the finalizer");
    assert!(w.answer_where(is_create, Fate::ServerError), "the create fails, not applied");
    w.edit_pool_shaped(ip, Shape { v6: false, offset: 1, size: 1, ..Shape::default() });
    w.deliver_all(&[]);
    w.run_to_rest(Job::Claim(m0.clone()));
    let result = w.finish();
    fails(&w, result);
    let address = w.read(Kind::Address, &m0).expect("m0's IPAddress");
    assert_eq!(address["spec"]["address"], "10.0.0.2", "{address}\n{}", w.trace_text());
}

/// Soak seeds 20007834 and 20033858, and the adversarial read of their fixes: an IPAddress a move left behind (marked,
/// its entry not yet written) outlives its pool, which a person deletes (its finalizer stripped) and GitOps makes
/// again under its name. The garbage collector then deletes the IPAddress (no owner of it is left). That is no
/// operator freeing the address: the new pool's annotation gets its entry, and no claim here gets the address the
/// moved Cluster uses over there. The writer reading the pool while it is gone drops nothing queued after its read.
/// When the garbage collector deleted it while the pool was gone (as seed 20033858 did), no event of the IPAddress
/// follows the pool's return, and only the pool's appearance queues the entry again. A restart then shows whether the
/// reservation was only in memory.
#[test]
fn an_ipaddress_left_behind_keeps_its_address_reserved_when_its_pool_is_made_again() {
    for collected in [Collected::AfterThePoolCameBack, Collected::WhileThePoolWasGone, Collected::Never] {
        left_behind_in_a_pool_made_again(collected);
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Collected {
    AfterThePoolCameBack,
    WhileThePoolWasGone,
    Never,
}

fn left_behind_in_a_pool_made_again(collected: Collected) {
    let mut w = World::scripted();
    let gip = PoolId::Global;
    let shape = Shape { v6: false, offset: 0, size: 3, ..Shape::default() };
    w.create_pool_shaped(gip, shape);
    let cl = cluster(&mut w, false);
    let (m0, _) = claim_of_cluster(&mut w, "m0");
    w.begin_term();
    w.deliver_all(&[]);
    w.run_to_rest(Job::Claim(m0.clone()));
    let moved = w.read(Kind::Address, &m0).expect("m0's IPAddress")["spec"]["address"].clone();
    // clusterctl moves cl away: the claim goes for the move, its IPAddress stays and is marked.
    w.patch(Kind::Cluster, &cl, json!({"spec": {"paused": true}}));
    w.patch(Kind::Claim, &m0, json!({"metadata": {"annotations": { DELETE_FOR_MOVE_ANNOTATION: "" }}}));
    w.force_delete_claim(&m0);
    w.deliver_all(&[]);
    w.run_job(Job::Gone(m0.clone()));
    w.answer_everything();
    w.remove(Kind::Cluster, &cl);
    w.deliver_all(&[]);
    w.sweep_to_rest();
    // Before the entry is written, the pool goes (its finalizer stripped) and the writer finds it gone.
    a_person_deletes_the_pool(&mut w, gip);
    w.deliver_all(&[]);
    if collected == Collected::WhileThePoolWasGone {
        w.garbage_collect();
        w.deliver_all(&[]);
    }
    w.run_job(Job::MovedAway(gip.pool_key()));
    w.answer_everything();
    // GitOps makes the pool again; the garbage collector deletes the IPAddress, whose owners are both gone.
    w.create_pool_shaped(gip, shape);
    w.deliver_all(&[]);
    if collected == Collected::AfterThePoolCameBack {
        w.garbage_collect();
        w.deliver_all(&[]);
    }
    w.sweep_to_rest();
    w.run_to_rest(Job::MovedAway(gip.pool_key()));
    w.sweep_to_rest();
    assert!(
        moved_away_entries(&w).contains(moved.as_str().unwrap_or("?")),
        "the new pool does not reserve {moved} (collected: {collected:?}): {:?}\n{}",
        moved_away_entries(&w),
        w.trace_text()
    );
    // The manager restarts: only what the API server holds counts.
    w.end_this_term();
    w.begin_term();
    w.deliver_all(&[]);
    new_claims_get_none_of(&mut w, &[moved]);
}

/// Soak seed 50010609: the orphan sweep deletes the IPAddress a move left behind once its entry is in the pool's
/// annotation, and its term ends before the finalizer comes off. The next term lists that IPAddress (marked, being
/// deleted) before its pool and queues its entry again; its sweep runs before the moved-away writer, takes the entry
/// for one still to be written and the deletion for an operator freeing the address (docs/operations.md), and cancels
/// it: the address the moved Cluster uses over there went to the next claim. An entry the annotation holds is written.
#[test]
fn an_ipaddress_left_behind_whose_release_a_new_term_finishes_keeps_its_address_reserved() {
    let (mut w, gip, cl, m0, moved) = claim_of_a_cluster_bound_in_the_global_pool();
    // clusterctl moves cl away: the claim goes for the move, its IPAddress stays, is marked, and its entry written.
    moves_away_leaving_its_ipaddress_behind(&mut w, &cl, &m0);
    w.run_to_rest(Job::MovedAway(gip.pool_key()));
    let entry = moved_away_entries(&w);
    assert!(entry.contains(moved.as_str().unwrap_or("?")), "the entry is written: {entry:?}");
    // The sweep deletes the IPAddress left behind; the request taking its finalizer off breaks, and the term ends.
    w.sweep_after_the_delay();
    let finalizer_off = |op: &Op| matches!(op, Op::PatchJson { kind: Kind::Address, .. });
    while !w.answer_where(finalizer_off, Fate::NotApplied) {
        assert!(w.answer_where(|op| !finalizer_off(op), Fate::Answered), "the sweep never took the finalizer off");
    }
    w.answer_everything();
    let left = w.read(Kind::Address, &m0).expect("the IPAddress left behind, being deleted");
    assert!(!left["metadata"]["deletionTimestamp"].is_null(), "deleted: {left}");
    w.end_this_term();
    // The next term lists the IPAddress before its pool, and sweeps before its moved-away writer runs.
    w.begin_term();
    w.deliver_all(&[Kind::Address]);
    w.deliver_all(&[]);
    w.sweep_to_rest();
    assert!(w.read(Kind::Address, &m0).is_none(), "the sweep finished the release:\n{}", w.trace_text());
    new_claims_get_none_of(&mut w, &[moved]);
    assert_eq!(moved_away_entries(&w), entry, "the reservation stays:\n{}", w.trace_text());
}

/// Users create three claims of the global pool in the other namespace, and the world settles: none may get one of
/// the addresses `moved` (in use on the other management cluster).
fn new_claims_get_none_of(w: &mut World, moved: &[Value]) {
    let others: Vec<ObjectKey> =
        ["x0", "x1", "x2"].iter().map(|n| w.create_claim_named(1, n, PoolId::Global)).collect();
    w.deliver_all(&[]);
    for x in &others {
        w.run_to_rest(Job::Claim(x.clone()));
    }
    let result = w.finish();
    fails(w, result);
    for x in &others {
        if let Some(a) = w.read(Kind::Address, x) {
            let got = &a["spec"]["address"];
            assert!(!moved.contains(got), "{x} got {got}, in use over there:\n{}", w.trace_text());
        }
    }
}

/// Soak seeds 20006318 and 20069266: a claim's status write was applied but its answer lost, and the digest of the
/// write before it stayed; when the claim needed that earlier status again, it was taken for written and never
/// written. Here a bound claim is told of a duplicate (that write's answer lost); the duplicate goes; the claim must
/// say Allocated again, without the duplicate.
#[test]
fn a_status_write_whose_answer_is_lost_does_not_hide_the_next_one() {
    let mut w = World::scripted();
    let ip = PoolId::Ip(0);
    w.create_pool_shaped(ip, Shape { v6: false, offset: 0, size: 2, ..Shape::default() });
    let m0 = w.create_claim_named(0, "m0", ip);
    w.begin_term();
    w.deliver_all(&[]);
    w.run_to_rest(Job::Claim(m0.clone()));
    let taken = w.read(Kind::Address, &m0).expect("m0's IPAddress")["spec"]["address"].clone();
    // An IPAddress made by hand, of another name, holding m0's address: m0 is told of the duplicate, and that
    // status write is applied with its answer lost.
    let mut copy = w.read(Kind::Address, &m0).expect("m0's IPAddress");
    copy["metadata"] = json!({"name": "by-hand", "namespace": m0.namespace.to_string()});
    copy["spec"]["claimRef"] = json!({"name": "by-hand"});
    w.create(Kind::Address, copy);
    w.deliver_all(&[]);
    let is_status = |op: &Op| matches!(op, Op::PatchMerge { kind: Kind::Claim, status: true, .. });
    w.run_job(Job::Claim(m0.clone()));
    assert!(w.answer_where(is_status, Fate::AppliedAnswerLost), "m0 is told of the duplicate");
    w.answer_everything();
    w.deliver_all(&[]);
    let told = w.read(Kind::Claim, &m0).expect("m0")["status"]["conditions"][0]["message"].clone();
    assert!(told.as_str().is_some_and(|m| m.contains("DUPLICATE")), "{told}");
    // The one made by hand goes: m0's status is what it was before, and must be written again.
    w.remove(Kind::Address, &ObjectKey::new(&m0.namespace, "by-hand"));
    w.deliver_all(&[]);
    w.run_to_rest(Job::Claim(m0.clone()));
    let result = w.finish();
    fails(&w, result);
    let ready = w.read(Kind::Claim, &m0).expect("m0")["status"]["conditions"][0].clone();
    let message = ready["message"].as_str().unwrap_or_default().to_owned();
    assert!(
        ready["reason"] == "Allocated"
            && !message.contains("DUPLICATE")
            && message.contains(taken.as_str().unwrap_or("?")),
        "m0 still says {ready}:\n{}",
        w.trace_text()
    );
}

/// Seeds of the soak that found orders the scripted scenarios did not: each keeps every invariant since its fix.
/// 20006318 and 20069266: a status write applied with its answer lost left the digest of an earlier write, so a
/// bound claim's Ready was never written again; 20007834: the garbage collector's delete of an IPAddress a move
/// left behind (its pool deleted and made again) was taken for an operator freeing its address; 20033858: a
/// left-behind IPAddress's entry was lost with its pool's ledger when the pool went and came back; 20057241: the
/// checker took an address held by a marked left-behind IPAddress, with no room left in the annotation, for a
/// reservation lost; 20056794: a deposed leader's late create landed, under the name of a bound claim whose IPAddress a
/// person deleted, with another claim's address, and was adopted; 70039910: a claim whose watch lagged behind our status write that bound it
/// was taken for unbound, and its IPAddress made again (a pinned address its pool no longer allocates) was deleted;
/// 70025494: settling took a failed run's longest backoff for a safety net; 80066535: a bound claim gone while its
/// watch stalled made its IPAddress again from the cache, holding an address in use over there; 90039322: the watch's
/// Added event of an IPAddress we had deleted overwrote our record of its deletion, and the claim was bound to it;
/// 90225114: a bound claim whose IPAddress a person deleted was deleted for a move while a new leader's watches
/// listed, and its address was handed out here; 90280782: a deposed leader's status write bound a claim between our
/// read of it and our withdrawal of its IPAddress; 100031277: a claim deleted for a move while its create was in
/// flight had its new IPAddress released at once (its status write found it gone), before its Delete event could show
/// the move; 100021395: a claim deleted (not for a move) before clusterctl moved its Cluster got a moved-away entry for
/// the address it had released, which another claim of the Cluster held; 100033379 and 100059661 (the checker): an
/// IPAddress made again under a moved claim's name from a stalled cache is that claim's reservation, and a late create
/// under a claim being deleted is no second user; 110141832: a bound claim's create of its IPAddress again, refused by
/// admission, gave up its machine's address to a waiting claim; 110198788: the answer of our DELETE of an IPAddress a
/// move left behind replaced its record and forgot the move, and a new claim of its name got the address in use over
/// there; 120037281: a claim back from a move, whose entry's removal a leader change lost, could not make its
/// IPAddress again after a person deleted it (120205854 too); 400110884 and 410017715: a paused Cluster's namespace
/// wiped before a Velero restore was taken for a move, and the restored claim was refused its restored IPAddress;
/// 420069014: a claim deleted for a move while the claim and Cluster watches relisted past it and the pause had its
/// IPAddress released as an orphan, and its address handed out here while the moved machine used it; 430083652: a claim
/// the cache showed unbound gave up the address kept for it while its Cluster moved; 430199264: a second manager's
/// late write put back the entry of an address its claim was bound to again; 430208541: a late create in a pool
/// deleted before the term listed was adopted beside a bound claim's; 430231703 (the model): a Cluster moved while a
/// restore's duplicate of its address was unresolved; 440475962 (the checker): two entries of one address are one
/// reservation; 440537881: a restored claim withdrew its own IPAddress as the duplicate of an orphan's late create; 450041258: a claim bound
/// again, its Cluster paused again, kept the entry whose removal a leader change lost; 460380971: an entry left out for
/// want of room waited for the next retry after its IPAddress went (unbacked, it has room of its own); 460384603 and
/// 460366352: a claim Velero restored had its own IPAddress let go as one a move left behind (Velero keeps the backup's
/// owner references); 460166466: a create that a pool edit put out of range was withdrawn after clusterctl paused and
/// copied it; 460473810 (the checker): a restore comes second to a bound claim whose IPAddress a person deleted;
/// 470144060: a manager of another shard released a left-behind IPAddress its watch did not show marked yet, though
/// the read that guarded its DELETE did; 470496860: a create put out of range was withdrawn on a read of the claim
/// that another manager's bind overtook (both serve a claim whose pool went); 470594159: an orphan release decided
/// before its reads deleted the marked IPAddress whose entry the pool, made again meanwhile, queued again; 470884774:
/// a claim a relist found replaced by one Velero restored was taken for moved (its Cluster went paused), and the
/// restored claim let its own IPAddress go; 470860383 (the checker): a restored claim bound after its restore wait
/// keeps the address it was told of when its IPAddress comes late; 480178155: a bound claim made again with another
/// address, paused before that create was confirmed, kept the hold, and a waiting claim starved; 500085155 (the
/// checker): a deposed leader's create for an earlier claim of the name, landed late with the address the claim was
/// told of, is adopted and its owner repaired; 500178236: a new claim of a moved claim's name, deleted before the
/// moved one's entry was written, deleted the marked IPAddress left behind, and a leader change lost the entry;
/// 510263267: a manager whose claim watch lagged released a long-deleted claim and deleted the IPAddress a new claim of
/// its name had adopted; 510571539 (the checker): a late create of another address does not bind a claim whose
/// IPAddress a person deleted; 520300326: a manager of a shard kept a restored IPAddress for a claim of its name that
/// no manager serves (another shard's, on a pool labelled for this one), duplicating a bound claim's address;
/// 520347817 (the model): an operator does not move a Cluster while its pool reports a duplicate; 540670193: a
/// create put out of range was let go with a status write on the claim of its name read live, which had been replaced
/// by another provider's; 550176934: our own withdrawal's DELETE of a create put out of range, landed after
/// clusterctl paused and copied it, was taken for an operator freeing the moved address, and its entry cancelled;
/// 540515841: a restored claim withdrew its own restored IPAddress for an unbound claim's late create of its address;
/// 520557168: a manager of another shard, its watches lagging, wrote an entry queued for a deleted global pool, whose
/// IPAddress was gone too, into the pool made again, where its address was bound meanwhile; 570188279: a restored claim
/// that won its duplicate on a cache that did not show the other claim bound yet was bound beside it; 570216407: a
/// restored claim adopted the IPAddress a move left behind, restored from a backup taken while it was left behind;
/// 580059062 (the checker): a later claim's entry for an address whose earlier move the manager missed (a leader
/// change over clusterctl's deletions, documented) does not record that earlier move; 610608073 (the checker): an
/// IPAddress marked after its pool was deleted, and being deleted, records nothing for the pool made again; 610567943
/// (the checker): Velero's failed restore of an earlier claim's orphan of another pool is no IPAddress of the claim's
/// own; 630015735: a bound claim waiting for its deleted Cluster kept the refusal its condition told after its
/// IPAddress was made again (that status write lost, then a leader change); 640181799 (the checker): a backup holding
/// both IPAddresses of an unresolved duplicate restores two holders, and the one restored first is no more the
/// machine's than the other; 650546392 (the checker): a restored IPAddress of a deleting claim, its address taken
/// meanwhile by the second manager for its shard's pool, is a restored duplicate (the first manager's index was asked);
/// 650784791: a bound claim marked for the move before its IPAddress's deletion was seen lost its hold, and a waiting
/// claim took its address, in use over there; 700007091: a record of our create that a relist did not show, its read
/// failing, was counted in the status of a pool two managers write, and they rewrote each other's status; 700328281: a
/// restored IPAddress, its dangling owner collected, was withdrawn for a late orphan that a pause of its Cluster kept;
/// 730861184: an unmarked IPAddress a move left behind, let go under a new claim of its name (the answer lost), had its
/// hold kept for that claim, which made it again with the address in use over there; 750843974: the marked IPAddress a
/// move left behind, collected by the garbage collector after its pool was made again, was released while the pool
/// watch had not shown the new pool, whose annotation then never reserved its address; 790461484: a new term's Cluster
/// watch, finished listing before the claim watch, found a Cluster gone that it last saw paused (a Velero restore's
/// namespace wipe; its unpause lost to a relist), and took the IPAddress of a claim not listed yet for one a move left
/// behind, and the restored claim lost its restored address to the reservation; 800989435 (the checker's, not the
/// manager's): a user deleted a claim Velero had just restored and made a new one of its name, which allocated at once
/// (it is no restored claim), and the checker took the restore's AlreadyExists for the restored claim's race;
/// 802474025: a release's read of an IPAddress, older than the watch's event of the garbage collector taking its
/// dangling claim owner off, put the owner back into the record, and the orphan release never released it;
/// 802181713: a paused Cluster kept a late duplicate beside a bound claim being deleted (its release held by the
/// pause); 804659163: a manager of another shard released as an orphan the IPAddress a move of a Cluster it did not
/// serve left behind, and the claim's manager took its deletion for an operator's and dropped the reservation;
/// 804814870: the sweep released the marked IPAddress a move left behind while its pool was made again, unseen;
/// 6962 (`make test`'s own soak): a manager without `--watch-filter` took a claim of another shard's deleted pool for
/// its own and bound it to the IPAddress that shard's manager was letting go; 809508772: a Cluster deleted while
/// paused (taken for moved) left a bound claim whose IPAddress a person had deleted, its hold let go and its address
/// taken by another claim; when Velero wiped the namespace and the claims' deletion came through a relist, the claim's
/// stale bound address was reserved for it, and the other claim, restored, lost its IPAddress to the reservation;
/// 810962108: in a Random pool, a deposed leader's late IPAddress under a bound claim's name held another address than
/// the claim's, whose hold was set aside; a person deleted the late one, and the claim's own create, in flight, came
/// back with the set-aside address, which was then held twice (counted twice, and never freed until the next term);
/// 811012589 and 811020392: a claim of no Cluster adopted an orphaned IPAddress labelled for one, and the pool's
/// `status.clusterUsage` counted it by its claim, not by the label every manager sees (docs/compatibility.md D21).
/// (A seed is a regression check only while the simulation draws the same numbers; the
/// scenarios above script the orders that matter. Here rather than in `sim::tests`, so that `make mutants` runs it
/// too.)
#[test]
fn seeds_the_soak_found_keep_every_invariant() {
    for seed in [
        20_006_318,
        20_007_834,
        20_033_858,
        20_056_794,
        20_057_241,
        20_069_266,
        70_025_494,
        70_039_910,
        80_006_453,
        80_066_535,
        90_039_322,
        90_225_114,
        90_280_782,
        100_021_395,
        100_031_277,
        100_033_379,
        100_059_661,
        110_141_832,
        110_198_788,
        120_037_281,
        120_205_854,
        150_050_407,
        150_126_055,
        300_000_110,
        300_000_376,
        310_006_725,
        310_032_691,
        320_030_977,
        320_051_137,
        330_000_784,
        330_044_805,
        330_088_935,
        340_056_375,
        400_062_764,
        400_067_100,
        400_090_733,
        400_163_327,
        400_167_895,
        400_222_993,
        400_110_884,
        400_344_446,
        410_017_715,
        420_069_014,
        430_083_652,
        430_199_264,
        430_208_541,
        430_231_703,
        440_475_962,
        440_537_881,
        450_041_258,
        460_166_466,
        460_366_352,
        460_380_971,
        460_384_603,
        460_473_810,
        470_144_060,
        470_496_860,
        470_594_159,
        470_860_383,
        470_884_774,
        480_178_155,
        500_085_155,
        500_178_236,
        510_263_267,
        510_571_539,
        520_300_326,
        520_347_817,
        540_670_193,
        550_176_934,
        540_515_841,
        520_557_168,
        570_188_279,
        570_216_407,
        580_059_062,
        610_567_943,
        610_608_073,
        630_015_735,
        640_181_799,
        650_546_392,
        650_784_791,
        700_007_091,
        700_328_281,
        730_861_184,
        750_843_974,
        790_461_484,
        800_989_435,
        802_181_713,
        802_474_025,
        804_659_163,
        804_814_870,
        6_962,
        809_508_772,
        810_962_108,
        811_012_589,
        811_020_392,
    ] {
        if let Err(violation) = super::run_seed(seed) {
            panic!("seed {seed}: {violation}");
        }
    }
}

/// Soak seed 20056794: claim `b/m1`'s create, sent by a leader whose term then ended, lands late, after `b/m1` was
/// bound to another address by a later term and a person deleted that IPAddress (so the name was free), holding the
/// address bound claim `a/m0` has. `b/m1` was never told of it: it is withdrawn, not adopted, and `b/m1` gets the
/// address its condition names back.
#[test]
fn a_late_create_under_a_bound_claim_whose_ipaddress_a_person_deleted_is_withdrawn() {
    for leader_change in [false, true] {
        let (mut w, a, b) = two_claims_bound_in(PoolId::Global, (0, "m0"), (1, "m1"));
        let taken = w.read(Kind::Address, &a).expect("a/m0's IPAddress")["spec"]["address"].clone();
        let own = w.read(Kind::Address, &b).expect("b/m1's IPAddress")["spec"]["address"].clone();
        // A person strips the finalizer of b/m1's IPAddress and deletes it.
        w.patch(Kind::Address, &b, json!({"metadata": {"finalizers": null}}));
        w.remove(Kind::Address, &b);
        if leader_change {
            w.end_this_term();
            w.begin_term();
        }
        w.deliver_all(&[]);
        // The late create of b/m1's IPAddress (sent before b/m1 was first bound) lands, holding a/m0's address.
        let uid = w.read(Kind::Claim, &b).expect("claim b/m1")["metadata"]["uid"].clone();
        w.create(Kind::Address, global_ipaddress("b", "m1", &uid, &taken, None));
        w.deliver_all(&[]);
        w.run_to_rest(Job::Claim(b.clone()));
        w.run_to_rest(Job::Claim(b.clone()));
        settles_with_ipaddress_made_again(&mut w, &b, &own);
        let ready = w.read(Kind::Claim, &b).expect("b/m1")["status"]["conditions"][0]["message"].clone();
        assert!(
            ready.as_str().is_some_and(|m| m.starts_with(&format!("allocated {} ", own.as_str().unwrap_or("?")))),
            "{ready}"
        );
    }
}

/// helper-110 F1, after soak seed 20056794: the late create lands under `b/m1`'s name while a claim waits for an
/// address of the full pool. Its record replaced the hold kept for `b/m1`'s machine, the address went free, and the
/// waiting claim took it while `b/m1` withdrew the late create: two machines on one address. The kept address stays
/// held aside until `b/m1` makes its IPAddress again with it.
#[test]
fn a_late_create_under_a_bound_claim_whose_ipaddress_a_person_deleted_frees_not_its_machines_address() {
    let (mut w, a, b) = two_claims_bound_in(PoolId::Global, (0, "m0"), (1, "m1"));
    let taken = w.read(Kind::Address, &a).expect("a/m0's IPAddress")["spec"]["address"].clone();
    let own = w.read(Kind::Address, &b).expect("b/m1's IPAddress")["spec"]["address"].clone();
    let waiting = w.create_claim_named(0, "m2", PoolId::Global);
    w.deliver_all(&[]);
    w.run_to_rest(Job::Claim(waiting.clone()));
    assert!(w.read(Kind::Address, &waiting).is_none(), "the pool is full: a/m2 waits");
    // A person strips the finalizer of b/m1's IPAddress and deletes it; the hold stays for b/m1's machine.
    w.patch(Kind::Address, &b, json!({"metadata": {"finalizers": null}}));
    w.remove(Kind::Address, &b);
    w.deliver_all(&[]);
    // The late create of b/m1's IPAddress lands, holding a/m0's address; the waiting claim runs before b/m1.
    let uid = w.read(Kind::Claim, &b).expect("claim b/m1")["metadata"]["uid"].clone();
    w.create(Kind::Address, global_ipaddress("b", "m1", &uid, &taken, None));
    w.deliver_all(&[]);
    w.run_to_rest(Job::Claim(waiting.clone()));
    assert!(w.read(Kind::Address, &waiting).is_none(), "a/m2 took b/m1's machine's address:\n{}", w.trace_text());
    w.run_to_rest(Job::Claim(b.clone()));
    w.run_to_rest(Job::Claim(b.clone()));
    settles_with_ipaddress_made_again(&mut w, &b, &own);
}

/// Soak seed 450041258, scripted: claim `a/m0` came back with its Cluster and was bound again to the address the
/// pool's annotation reserves for it, and a leader change lost the entry's removal (only the next term's annotation
/// write would have made it). The Cluster is paused again before that term sees the claim: the entry goes now, as
/// adopting takes it out, not when the pause ends (else the address stays reserved here while the claim here uses it).
#[test]
fn a_claim_bound_again_then_paused_ends_the_reservation_a_leader_change_kept() {
    let mut w = World::scripted();
    let gip = PoolId::Global;
    w.create_pool_shaped(gip, Shape { v6: false, offset: 0, size: 2, ..Shape::default() });
    w.patch(gip.server_kind(), &gip.key(), json!({"metadata": {"annotations": { MOVED_AWAY_ANNOTATION: "10.1.0.1" }}}));
    let cl = cluster(&mut w, false);
    w.begin_term();
    w.deliver_all(&[]);
    // clusterctl brings claim m0 back with its IPAddress, which holds the reserved address.
    let (m0, claim) = claim_of_cluster(&mut w, "m0");
    w.create(Kind::Address, global_ipaddress("a", "m0", &claim["metadata"]["uid"], &json!("10.1.0.1"), Some("cl")));
    w.deliver_all(&[]);
    w.run_job(Job::Claim(m0.clone()));
    w.answer_everything();
    assert_eq!(bound_to(&w, &m0), Some(json!("10.1.0.1")), "bound again:\n{}", w.trace_text());
    // The term ends before its annotation write; the Cluster is paused again before the next term sees the claim.
    w.end_this_term();
    w.patch(Kind::Cluster, &cl, json!({"spec": {"paused": true}}));
    w.begin_term();
    w.deliver_all(&[]);
    assert_eq!(moved_away_entries(&w), "10.1.0.1", "the removal was lost with the term");
    w.run_to_rest(Job::Claim(m0.clone()));
    w.run_to_rest(Job::MovedAway(gip.pool_key()));
    assert_eq!(moved_away_entries(&w), "", "the reservation of the address a/m0 uses here stays:\n{}", w.trace_text());
    let result = w.finish();
    fails(&w, result);
}

/// Soak seed 70039910, scripted: a claim's watch lags behind our status write that bound it; a person deletes its
/// IPAddress and the pool is edited to no longer allocate its address (the webhook sees no IPAddress holding it). The
/// claim, unbound as cached, neither gives up its hold (out of range, no IPAddress: an uncertain create that did not
/// happen, as the cache has it) nor deletes its IPAddress made again out of range: read live, it is bound to that
/// address, its machine's, which it keeps.
#[test]
fn an_ipaddress_made_again_for_a_claim_the_cache_shows_unbound_is_kept_when_it_is_bound_to_it() {
    let mut w = World::scripted();
    let ip = PoolId::Ip(0);
    w.create_pool_shaped(ip, Shape { v6: false, offset: 0, size: 2, ..Shape::default() });
    let m0 = w.create_claim_named(0, "m0", ip);
    let held = bound_behind_its_claim_watch(&mut w, &m0);
    assert_eq!(held, "10.0.0.1");
    w.strip_ipaddress_of(m0.clone());
    w.edit_pool_shaped(ip, Shape { v6: false, offset: 1, size: 1, ..Shape::default() });
    w.deliver_all(&[Kind::Address]);
    w.deliver_all(&[Kind::Pool(ip.kind())]);
    w.run_to_rest(Job::Claim(m0.clone()));
    settles_with_ipaddress_made_again(&mut w, &m0, &held);
}

/// A term begins and binds claim `m0` (named "m0"); the status write that bound it is applied, but the claim's watch
/// has not shown it. Returns the address it holds.
fn bound_behind_its_claim_watch(w: &mut World, m0: &ObjectKey) -> Value {
    w.begin_term();
    w.deliver_all(&[]);
    w.run_job(Job::Claim(m0.clone()));
    assert!(w.answer_where(is_claim_patch("m0"), Fate::Answered), "the finalizer");
    w.deliver_all(&[]);
    assert!(w.answer_where(is_create, Fate::Answered), "the create");
    w.answer_everything();
    w.deliver_all(&[Kind::Address]);
    let bound = w.read(Kind::Claim, m0).expect("m0");
    assert_eq!(bound["status"]["addressRef"]["name"], "m0", "bound: {bound}");
    w.read(Kind::Address, m0).expect("m0's IPAddress")["spec"]["address"].clone()
}

/// The review of soak seed 20056794's fix found it: a deposed leader's late create of `b/m1` lands after a person
/// deleted `b/m1`'s IPAddress, holding a free address rather than another claim's. `b/m1` is bound to the address its
/// condition names, which its machine uses: the late one is withdrawn, not adopted, and `b/m1` makes its IPAddress
/// again with its machine's address. Also when the answer to taking the withdrawn one's finalizer off is lost: the
/// watch tells of the deletion, and the late one's address is no hold to keep for the claim.
#[test]
fn a_late_create_of_a_free_address_under_a_bound_claim_whose_ipaddress_a_person_deleted_is_withdrawn() {
    for withdrawal in [Fate::Answered, Fate::AppliedAnswerLost] {
        let mut w = World::scripted();
        let gip = PoolId::Global;
        w.create_pool_shaped(gip, Shape { v6: false, offset: 0, size: 3, ..Shape::default() });
        let b = w.create_claim_named(1, "m1", gip);
        w.begin_term();
        w.deliver_all(&[]);
        w.run_to_rest(Job::Claim(b.clone()));
        let own = w.read(Kind::Address, &b).expect("b/m1's IPAddress")["spec"]["address"].clone();
        w.strip_ipaddress_of(b.clone());
        w.deliver_all(&[]);
        let uid = w.read(Kind::Claim, &b).expect("claim b/m1")["metadata"]["uid"].clone();
        w.create(Kind::Address, global_ipaddress("b", "m1", &uid, &json!("10.1.0.3"), None));
        w.deliver_all(&[]);
        w.run_job(Job::Claim(b.clone()));
        // Its finalizer comes off last.
        let finalizer_off = |op: &Op| matches!(op, Op::PatchJson { kind: Kind::Address, .. });
        while !w.answer_where(finalizer_off, withdrawal) {
            assert!(w.answer_where(|op| !finalizer_off(op), Fate::Answered), "the late one is never withdrawn");
        }
        w.answer_everything();
        w.deliver_all(&[]);
        w.run_to_rest(Job::Claim(b.clone()));
        settles_with_ipaddress_made_again(&mut w, &b, &own);
        let ready = w.read(Kind::Claim, &b).expect("b/m1")["status"]["conditions"][0]["message"].clone();
        let names_own =
            ready.as_str().is_some_and(|m| m.starts_with(&format!("allocated {} ", own.as_str().unwrap_or("?"))));
        assert!(names_own, "{withdrawal:?}: {ready}");
    }
}

/// Soak seed 80066535 led here: a person deletes the IPAddress of a bound claim of Cluster `cl` while clusterctl moves
/// `cl` away, and clusterctl then deletes the claim for the move. Its machine uses the address over there: the hold
/// the claim kept for it must not end as free here.
#[test]
fn a_bound_claim_whose_ipaddress_a_person_deleted_during_its_clusters_move_keeps_its_address_reserved() {
    for leader_change in [None, Some(Listed::Everything), Some(Listed::ClaimsOnly)] {
        kept_address_of_a_claim_deleted_for_a_move(leader_change);
    }
}

/// What the watches of a new term have listed.
#[derive(Clone, Copy, Debug)]
enum Listed {
    Everything,
    ClaimsOnly,
}

fn kept_address_of_a_claim_deleted_for_a_move(leader_change: Option<Listed>) {
    let (mut w, gip, cl, m0, moved) = claim_of_a_cluster_bound_in_the_global_pool();
    w.patch(Kind::Cluster, &cl, json!({"spec": {"paused": true}}));
    w.strip_ipaddress_of(m0.clone());
    w.deliver_all(&[]);
    w.run_job(Job::Claim(m0.clone()));
    w.answer_everything();
    if let Some(listed) = leader_change {
        // The next leader knows of the deletion only from the claim, bound without an IPAddress; in soak seed
        // 90225114 the claim is deleted while the other watches still list, before any address is held for it.
        w.end_this_term();
        w.begin_term();
        match listed {
            Listed::Everything => w.deliver_all(&[]),
            Listed::ClaimsOnly => w.deliver_all(&[Kind::Claim]),
        }
    }
    clusterctl_deletes_for_the_move(&mut w, &cl, &m0);
    w.deliver_all(&[Kind::Claim]);
    w.deliver_all(&[]);
    w.run_job(Job::Gone(m0.clone()));
    w.answer_everything();
    w.remove(Kind::Cluster, &cl);
    w.deliver_all(&[]);
    w.run_to_rest(Job::MovedAway(gip.pool_key()));
    let entry = moved_away_entries(&w);
    assert!(entry.contains(moved.as_str().unwrap_or("?")), "the entry is written: {entry:?}\n{}", w.trace_text());
    // It outlives the manager.
    w.end_this_term();
    w.begin_term();
    w.deliver_all(&[]);
    new_claims_get_none_of(&mut w, &[moved]);
}

/// Seed 650784791's order: the bound claim's Cluster paused for a move, its IPAddress deleted by a person, and
/// clusterctl's mark on the claim seen before that deletion.
fn marked_before_its_ipaddress_is_seen_gone(w: &mut World, cl: &ObjectKey, claim: &ObjectKey) {
    w.patch(Kind::Cluster, cl, json!({"spec": {"paused": true}}));
    w.deliver_all(&[]);
    w.strip_ipaddress_of(claim.clone());
    w.patch(Kind::Claim, claim, json!({"metadata": {"annotations": { DELETE_FOR_MOVE_ANNOTATION: "" }}}));
    w.deliver_all(&[Kind::Claim]);
    w.deliver_all(&[]);
}

/// clusterctl ends the move: the marked claim deleted (its finalizers stripped) and seen gone, the Cluster deleted,
/// and the pool's moved-away entries written.
fn clusterctl_finishes_the_move(w: &mut World, pool: PoolId, cl: &ObjectKey, claim: &ObjectKey) {
    w.force_delete_claim(claim);
    w.deliver_all(&[]);
    w.run_job(Job::Gone(claim.clone()));
    w.answer_everything();
    w.remove(Kind::Cluster, cl);
    w.deliver_all(&[]);
    w.run_to_rest(Job::MovedAway(pool.pool_key()));
}

/// Soak seed 650784791: clusterctl marks the claim of a global pool for the move (its Cluster paused) and the mark is
/// seen before the deletion of its IPAddress (a person's, or clusterctl's own seen through a relist). The address is
/// its machine's over there: it stays held for the claim, and becomes the reservation when clusterctl deletes the
/// claim; never free in between for a waiting claim to take.
#[test]
fn a_claim_marked_for_the_move_before_its_ipaddress_is_seen_gone_keeps_its_address() {
    let (mut w, gip, cl, m0, moved) = claim_of_a_cluster_bound_in_the_global_pool();
    marked_before_its_ipaddress_is_seen_gone(&mut w, &cl, &m0);
    // Claims waiting on the pool's one free address, before the claim's deletion would reserve the moved one.
    let others: Vec<ObjectKey> = ["x0", "x1"].iter().map(|n| w.create_claim_named(1, n, gip)).collect();
    w.deliver_all(&[]);
    for x in &others {
        w.run_to_rest(Job::Claim(x.clone()));
        let got = w.read(Kind::Address, x).map(|a| a["spec"]["address"].clone());
        assert_ne!(got.as_ref(), Some(&moved), "{x} got {moved}, in use over there:\n{}", w.trace_text());
    }
    clusterctl_finishes_the_move(&mut w, gip, &cl, &m0);
    let entry = moved_away_entries(&w);
    assert!(entry.contains(moved.as_str().unwrap_or("?")), "the entry is written: {entry:?}\n{}", w.trace_text());
    let result = w.finish();
    fails(&w, result);
}

/// Helper-93, on seed 650784791's fix: the claim marked for the move before its IPAddress was seen gone keeps its hold,
/// so clusterctl's deletion of it notes a create that may still be in flight (no record yet) as well as reserving the
/// address. No create was in flight; a new claim of the name, bound to another address here, must not be taken for
/// moved: its own address, its IPAddress deleted from under it, stays held for it, not handed to a waiting claim.
#[test]
fn a_new_claim_of_the_name_of_a_claim_moved_with_its_kept_hold_keeps_its_own_address() {
    let (mut w, gip, cl, m0, moved) = claim_of_a_cluster_bound_in_the_global_pool();
    marked_before_its_ipaddress_is_seen_gone(&mut w, &cl, &m0);
    clusterctl_finishes_the_move(&mut w, gip, &cl, &m0);
    // A new a/m0 of no Cluster gets the pool's other address.
    let m0 = w.create_claim_named(0, "m0", gip);
    w.deliver_all(&[]);
    w.run_to_rest(Job::Claim(m0.clone()));
    w.run_to_rest(Job::Claim(m0.clone()));
    w.run_to_rest(Job::MovedAway(gip.pool_key()));
    let own = w.read(Kind::Address, &m0).expect("the new m0's IPAddress")["spec"]["address"].clone();
    assert_ne!(own, moved, "{}", w.trace_text());
    let entries = moved_away_entries(&w);
    assert!(!entries.contains(own.as_str().unwrap_or("?")), "the new m0 is taken for moved: {entries:?}");
    // A person deletes its IPAddress from under it; a claim waits on the pool.
    w.strip_ipaddress_of(m0.clone());
    w.deliver_all(&[Kind::Address]);
    let x0 = w.create_claim_named(1, "x0", gip);
    w.deliver_all(&[]);
    w.run_to_rest(Job::Claim(x0.clone()));
    let got = w.read(Kind::Address, &x0).map(|a| a["spec"]["address"].clone());
    assert_ne!(got.as_ref(), Some(&own), "x0 took {own}, the new m0's machine's:\n{}", w.trace_text());
    let result = w.finish();
    fails(&w, result);
}

/// Soak seed 520557168's order, for the entry of a bound claim's kept hold (no IPAddress names it): the global pool is
/// deleted and made again under its name before the entry is written. The pool's deletion took its reservations
/// (docs/operations.md); the pool made again must not get the entry, whose address it may hand out meanwhile.
#[test]
fn an_entry_queued_for_a_pool_deleted_since_is_not_written_into_the_pool_made_again() {
    let (mut w, gip, cl, m0, moved) = claim_of_a_cluster_bound_in_the_global_pool();
    w.patch(Kind::Cluster, &cl, json!({"spec": {"paused": true}}));
    w.strip_ipaddress_of(m0.clone());
    w.deliver_all(&[]);
    w.run_job(Job::Claim(m0.clone()));
    w.answer_everything();
    clusterctl_deletes_for_the_move(&mut w, &cl, &m0);
    w.deliver_all(&[]);
    w.run_job(Job::Gone(m0.clone()));
    w.answer_everything();
    assert!(w.is_pending_moved_away(&gip), "the entry is queued, not written yet\n{}", w.trace_text());
    // GitOps deletes the pool (its finalizer stripped by hand) and makes it again.
    a_person_deletes_the_pool(&mut w, gip);
    w.create_pool_shaped(gip, Shape { v6: false, offset: 0, size: 2, ..Shape::default() });
    w.deliver_all(&[]);
    w.run_to_rest(Job::MovedAway(gip.pool_key()));
    let entries = moved_away_entries(&w);
    assert!(
        !entries.contains(moved.as_str().unwrap_or("?")),
        "the pool made again reserves {moved}: {entries:?}\n{}",
        w.trace_text()
    );
}

/// Helper-76 F1 and soak seed 570188279, after seed 540515841's fix: Velero restores claim `b/m4` with its IPAddress,
/// holding the address the restore's delete freed, while unbound claim `a/m3`'s create of that address landed and its
/// binding write is still in flight. `b/m4` wins the duplicate as the cache shows it, but must not bind before `a/m3`
/// withdraws: the write lands, `a/m3` is bound, and `b/m4` is the one to withdraw. Never two claims on one address.
#[test]
fn a_restored_claim_that_wins_its_duplicate_does_not_bind_beside_a_binding_in_flight() {
    let mut w = World::scripted();
    let gip = PoolId::Global;
    w.create_pool_shaped(gip, Shape { v6: false, offset: 0, size: 2, ..Shape::default() });
    let m3 = w.create_claim_named(0, "m3", gip);
    w.begin_term();
    w.deliver_all(&[]);
    w.run_job(Job::Claim(m3.clone()));
    let binds_m3 = |op: &Op| {
        matches!(op, Op::PatchMerge { kind: Kind::Claim, key, status: true, patch }
            if &*key.name == "m3" && patch.to_string().contains("addressRef"))
    };
    let binding = loop {
        if let Some(op) = w.hold_back_where(binds_m3) {
            break op;
        }
        assert!(w.answer_where(|op| !binds_m3(op), Fate::Answered), "a/m3 never bound\n{}", w.trace_text());
    };
    w.answer_everything();
    let address = w.read(Kind::Address, &m3).expect("a/m3's IPAddress")["spec"]["address"].clone();
    // Velero restores b/m4 and its IPAddress, owned by the backup's claim.
    let m4 = w.create_claim_named(1, "m4", gip);
    w.patch(Kind::Claim, &m4, json!({"metadata": {"labels": { VELERO_RESTORE_LABEL: "restore-1" }}}));
    let mut restored = global_ipaddress("b", "m4", &json!("00000000-0000-0000-00ff-000000000000"), &address, None);
    restored["metadata"]["labels"][VELERO_RESTORE_LABEL] = json!("restore-1");
    w.create(Kind::Address, restored);
    w.deliver_all(&[]);
    w.run_job(Job::Claim(m4.clone()));
    w.answer_everything();
    // a/m3's binding lands now; then everyone settles.
    w.land_late(&binding);
    w.deliver_all(&[]);
    w.run_to_rest(Job::Claim(m4.clone()));
    w.run_to_rest(Job::Claim(m3.clone()));
    let result = w.finish();
    fails(&w, result);
    assert_eq!(bound_to(&w, &m3), Some(address.clone()), "a/m3 keeps its binding\n{}", w.trace_text());
    assert_ne!(bound_to(&w, &m4), Some(address), "b/m4 bound beside a/m3\n{}", w.trace_text());
}

/// Soak seed 700328281: Velero restored claim `a/m0` (no status) and its IPAddress, whose dangling owner reference to
/// the backup's claim the garbage collector took off (the pool still owns it). A deposed leader's create for claim
/// `b/m1` of Cluster `b/cl`, of the address the restore's delete had freed, landed late; `b/m1` was deleted with its
/// finalizer stripped while no manager watched, and a person paused `b/cl`. The late one is an orphan only the pause
/// keeps; the restored one is the machine's: it stays, and is adopted once the orphan is released.
#[test]
fn a_restored_ipaddress_is_not_withdrawn_for_a_late_orphan_a_pause_keeps() {
    let mut w = World::scripted();
    let gip = PoolId::Global;
    w.create_pool_shaped(gip, Shape { v6: false, offset: 0, size: 1, ..Shape::default() });
    w.create(
        Kind::Cluster,
        json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
        "metadata": {"name": "cl", "namespace": "b"}, "spec": {"paused": true}}),
    );
    let address = json!("10.1.0.1");
    let m0 = velero_restores_with_its_owner_collected(&mut w, 0, "m0", &address);
    // The deposed leader's late create for b/m1, whose claim is gone (its owner reference collected too), lands
    // moments later: in the same second (helper-104 G1).
    w.pass_time(300);
    let m1 = ObjectKey::new("b", "m1");
    let mut late = global_ipaddress("b", "m1", &json!("00000000-0000-0000-00fe-000000000000"), &address, Some("cl"));
    late["metadata"]["ownerReferences"] = owned_by_the_global_pool(&w);
    w.create(Kind::Address, late);
    w.begin_term();
    w.deliver_all(&[]);
    w.run_to_rest(Job::Claim(m0.clone()));
    assert_kept(&w, &m0, &address, "the restored IPAddress was withdrawn for a late orphan its Cluster's pause keeps");
    w.sweep_to_rest();
    assert!(w.read(Kind::Address, &m1).is_none(), "the late orphan is kept:\n{}", w.trace_text());
    w.run_to_rest(Job::Claim(m0.clone()));
    assert_eq!(bound_to(&w, &m0), Some(address), "a/m0 adopts its restored IPAddress\n{}", w.trace_text());
    let result = w.finish();
    fails(&w, result);
}

/// Helper-102 F1, the other side of seed 700328281's fix: clusterctl moves Cluster `a/cl` away while no manager
/// watches (claim `a/m0` deleted for the move unseen: no mark on the IPAddress it left behind), and the Cluster stays
/// paused. A Velero restore of namespace `b` from an older backup brings claim `b/m1` back with an IPAddress of the
/// address `a/m0`'s machine uses over there (its dangling owner collected). The restored one came second: it is
/// withdrawn, and the left-behind IPAddress is kept by the pause until the Cluster's deletion makes its address a
/// reservation.
#[test]
fn a_stale_restored_ipaddress_does_not_get_a_paused_moves_left_behind_address() {
    let (mut w, gip, cl, m0, moved) = claim_of_a_cluster_bound_in_the_global_pool();
    // The move's claim deletion falls between terms: no mark, the IPAddress left behind.
    w.end_this_term();
    clusterctl_deletes_for_the_move(&mut w, &cl, &m0);
    w.pass_time(2000);
    // Velero restores b/m1 from a backup taken when the address was b/m1's.
    let m1 = velero_restores_with_its_owner_collected(&mut w, 1, "m1", &moved);
    w.begin_term();
    w.deliver_all(&[]);
    w.run_to_rest(Job::Claim(m1.clone()));
    w.sweep_to_rest();
    w.run_to_rest(Job::Claim(m1.clone()));
    assert!(
        w.read(Kind::Address, &m0).is_some(),
        "the paused move's left-behind IPAddress was released:\n{}",
        w.trace_text()
    );
    assert_ne!(bound_to(&w, &m1), Some(moved.clone()), "b/m1 took the address in use over there\n{}", w.trace_text());
    // clusterctl ends the move: the left-behind address becomes the reservation.
    w.remove(Kind::Cluster, &cl);
    w.deliver_all(&[]);
    w.run_to_rest(Job::MovedAway(gip.pool_key()));
    w.sweep_to_rest();
    assert!(moved_away_entries(&w).contains(moved.as_str().unwrap_or("?")), "not reserved:\n{}", w.trace_text());
    assert_ne!(bound_to(&w, &m1), Some(moved), "b/m1 took the reserved address\n{}", w.trace_text());
    let result = w.finish();
    fails(&w, result);
}

/// Soak seed 700007091: claim `a/m0`'s IPAddress was created while the IPAddress watch relisted, and went, claim and
/// IPAddress, finalizers stripped, before the list was served; the list did not show it, and the read that would tell
/// whether it is gone failed. The record is this manager's knowledge alone: counted in pool `a/ip`'s status, which the
/// second manager writes too (no shard label), the two rewrote each other's status until the read's retry.
#[test]
fn a_record_a_relist_did_not_show_is_not_counted_in_a_status_two_managers_write() {
    let mut w = World::scripted_sharded();
    let ip = PoolId::Ip(0);
    w.create_pool_shaped(ip, Shape { v6: false, offset: 0, size: 2, ..Shape::default() });
    let m0 = w.create_claim_named(0, "m0", ip);
    w.begin_term();
    w.deliver_all(&[]);
    w.expire_watch_of(Kind::Address);
    assert!(w.deliver_one(Kind::Address), "the relist's Init, before a/m0's IPAddress exists");
    w.run_job(Job::Claim(m0.clone()));
    w.answer_everything();
    w.deliver_all(&[Kind::Claim]);
    assert!(w.read(Kind::Address, &m0).is_some(), "a/m0's IPAddress was created\n{}", w.trace_text());
    // Gone before the list is served: the claim and its IPAddress, finalizers stripped.
    w.force_delete_claim(&m0);
    w.patch(Kind::Address, &m0, json!({"metadata": {"finalizers": null}}));
    w.remove(Kind::Address, &m0);
    w.deliver_all(&[Kind::Claim]);
    // Listed without it: the record is in doubt, and the read that would resolve it fails.
    w.deliver_all(&[Kind::Address]);
    w.run_job(Job::Claim(m0.clone()));
    assert!(
        w.answer_where(|op| matches!(op, Op::Get(Kind::Address, _)), Fate::ServerError),
        "a/m0's doubtful record is read\n{}",
        w.trace_text()
    );
    w.answer_everything();
    let result = w.finish();
    fails(&w, result);
}

/// Soak seed 570216407 (helper-80 D4): Velero restores a namespace from a backup taken while the IPAddress a move
/// left behind was still there: the claim comes back as a new object, and beside it the left-behind IPAddress, a new
/// object too, owned by the claim that went for the move and holding the address in use over there. The restored
/// claim must not adopt it (Velero keeps owner references, but this owner is the moved claim, not the backup of this
/// claim's own): its address stays reserved and the claim gets another.
#[test]
fn a_restored_claim_does_not_adopt_the_ipaddress_a_move_left_behind() {
    let (mut w, gip, cl, m0, moved) = claim_of_a_cluster_bound_in_the_global_pool();
    let moved_uid = w.read(Kind::Claim, &m0).expect("claim a/m0")["metadata"]["uid"].clone();
    clusterctl_deletes_for_the_move(&mut w, &cl, &m0);
    w.deliver_all(&[]);
    w.run_job(Job::Gone(m0.clone()));
    w.answer_everything();
    w.run_to_rest(Job::MovedAway(gip.pool_key()));
    assert!(moved_away_entries(&w).contains(moved.as_str().unwrap_or("?")), "recorded\n{}", w.trace_text());
    // clusterctl deletes cl once moved; Velero wipes namespace a and restores cl, the claim (no status) and the
    // left-behind IPAddress, from a backup taken before it was marked.
    w.remove(Kind::Cluster, &cl);
    w.patch(Kind::Address, &m0, json!({"metadata": {"finalizers": null}}));
    w.remove(Kind::Address, &m0);
    w.deliver_all(&[]);
    cluster(&mut w, false);
    claim_of_cluster(&mut w, "m0");
    w.patch(Kind::Claim, &m0, json!({"metadata": {"labels": { VELERO_RESTORE_LABEL: "restore-1" }}}));
    let mut restored = global_ipaddress("a", "m0", &moved_uid, &moved, Some("cl"));
    restored["metadata"]["labels"][VELERO_RESTORE_LABEL] = json!("restore-1");
    w.create(Kind::Address, restored);
    w.deliver_all(&[]);
    for _ in 0..3 {
        w.run_to_rest(Job::Claim(m0.clone()));
        w.run_to_rest(Job::MovedAway(gip.pool_key()));
        w.sweep_after_the_delay();
        w.answer_everything();
        w.deliver_all(&[]);
    }
    let claim = w.read(Kind::Claim, &m0).expect("the restored claim a/m0");
    let bound_to_moved = claim["status"]["addressRef"]["name"] == "m0"
        && w.read(Kind::Address, &m0).is_some_and(|a| a["spec"]["address"] == moved);
    assert!(!bound_to_moved, "the restored claim took {moved}, in use over there\n{}", w.trace_text());
    assert!(moved_away_entries(&w).contains(moved.as_str().unwrap_or("?")), "reservation gone\n{}", w.trace_text());
}

/// helper-96 F1: the answer to `a/m0`'s create is lost (the create landed), and clusterctl moves its Cluster away
/// before the worker finds out and before the IPAddress watch shows the object: the claim's deletion for the move and
/// the paused Cluster's are seen, with no record to mark. The worker's read of the IPAddress then records the move, so
/// the address the moved machine uses is reserved, not freed by the orphan release.
#[test]
fn a_claim_moved_away_while_the_answer_to_its_create_was_lost_keeps_its_address_reserved() {
    // Also when the garbage collector took the deleted claim's owner reference off the IPAddress first (helper-97 G1).
    for collected in [false, true] {
        let (mut w, gip, cl, m0) = a_create_of_a_cluster_claim_in_flight(3);
        assert!(w.answer_where(is_create, Fate::AppliedAnswerLost), "the create");
        let moved = w.read(Kind::Address, &m0).expect("a/m0's IPAddress")["spec"]["address"].clone();
        w.answer_everything();
        clusterctl_deletes_for_the_move(&mut w, &cl, &m0);
        if collected {
            w.garbage_collect();
        }
        w.deliver_all(&[Kind::Claim, Kind::Cluster]);
        w.remove(Kind::Cluster, &cl);
        w.deliver_all(&[Kind::Cluster]);
        // The worker finds out what became of its create: the IPAddress is there.
        w.run_to_rest(Job::Claim(m0.clone()));
        w.run_to_rest(Job::MovedAway(gip.pool_key()));
        let entry = moved_away_entries(&w);
        let trace = w.trace_text();
        assert!(
            entry.contains(moved.as_str().unwrap_or("?")),
            "{moved} not reserved ({collected}): {entry:?}\n{trace}"
        );
        let result = w.finish();
        fails(&w, result);
    }
}

/// Cluster `cl`'s claim `a/m0` in a global pool of `size` addresses, its create of the first address in flight.
fn a_create_of_a_cluster_claim_in_flight(size: u8) -> (World, PoolId, ObjectKey, ObjectKey) {
    let mut w = World::scripted();
    let gip = PoolId::Global;
    w.create_pool_shaped(gip, Shape { v6: false, offset: 0, size, ..Shape::default() });
    let cl = cluster(&mut w, false);
    let (m0, _) = claim_of_cluster(&mut w, "m0");
    w.begin_term();
    w.deliver_all(&[]);
    w.run_job(Job::Claim(m0.clone()));
    while !w.is_pending(is_create) {
        assert!(w.answer_where(|op| !is_create(op), Fate::Answered), "a/m0 never created\n{}", w.trace_text());
    }
    (w, gip, cl, m0)
}

/// Cluster `cl`'s claim `a/m0` in a global pool of three: its create of the first address is in flight when the pool
/// is edited to leave that address out (the pool's watch shows it first); the create lands, and the claim's
/// withdrawal of it is in flight. Returns the world, the pool, the Cluster, the claim and the address.
fn a_withdrawal_of_a_create_put_out_of_range_in_flight() -> (World, PoolId, ObjectKey, ObjectKey, Value) {
    let (mut w, gip, cl, m0) = a_create_of_a_cluster_claim_in_flight(3);
    w.edit_pool_shaped(gip, Shape { v6: false, offset: 1, size: 2, ..Shape::default() });
    w.deliver_all(&[Kind::Pool(gip.kind())]);
    assert!(w.answer_where(is_create, Fate::Answered), "the create");
    let moved = w.read(Kind::Address, &m0).expect("a/m0's IPAddress")["spec"]["address"].clone();
    while !w.is_pending(is_delete) {
        assert!(w.answer_where(|op| !is_delete(op), Fate::Answered), "never withdrawn\n{}", w.trace_text());
    }
    (w, gip, cl, m0, moved)
}

/// Answers every request in flight, each write of the pool `gip` failing (a 500).
fn answer_failing_the_pool(w: &mut World, gip: PoolId) {
    let writes_the_pool = |op: &Op| matches!(op, Op::PatchMerge { kind, .. } if *kind == gip.server_kind());
    while w.answer_where(writes_the_pool, Fate::ServerError) || w.answer_where(|_| true, Fate::Answered) {}
}

/// The entry of `moved` waits to be written (the pool's writes fail until the orphan sweep has run), and is written
/// once the sweep has run: the sweep did not cancel it.
fn the_moved_address_is_reserved_after_the_sweep(w: &mut World, gip: PoolId, moved: &Value) {
    assert!(w.is_pending_moved_away(&gip), "the entry waits to be written\n{}", w.trace_text());
    w.sweep_after_the_delay();
    answer_failing_the_pool(w, gip);
    w.deliver_all(&[]);
    answer_failing_the_pool(w, gip);
    w.run_to_rest(Job::MovedAway(gip.pool_key()));
    let entries = moved_away_entries(w);
    assert!(
        entries.contains(moved.as_str().unwrap_or("?")),
        "the moved address {moved} is not reserved: {entries:?}\n{}",
        w.trace_text()
    );
}

/// Helper-75 F1, seed 550176934's other order: a create put out of range by a pool edit is withdrawn, and the claim's
/// deletion for its Cluster's move is noticed while that DELETE is in flight (so the IPAddress is not deleting yet when
/// the move is noticed); the DELETE lands and the finalizer's removal fails. The orphan release must not take our own
/// DELETE for an operator freeing the address: the moved address's entry is written, not cancelled.
#[test]
fn our_withdrawal_landing_after_a_move_was_noticed_does_not_cancel_the_moved_address() {
    let (mut w, gip, cl, m0, moved) = a_withdrawal_of_a_create_put_out_of_range_in_flight();
    // clusterctl moves cl away (copying the IPAddress, still live), and the manager notices before the DELETE lands.
    clusterctl_deletes_for_the_move(&mut w, &cl, &m0);
    w.deliver_all(&[Kind::Claim]);
    assert!(w.answer_where(is_delete, Fate::Answered), "the DELETE");
    let strips_finalizer = |op: &Op| matches!(op, Op::PatchJson { kind: Kind::Address, .. });
    while !w.answer_where(strips_finalizer, Fate::ServerError) {
        assert!(w.answer_where(|op| !strips_finalizer(op), Fate::Answered), "no finalizer removal\n{}", w.trace_text());
    }
    // clusterctl deletes cl once moved; every write of the entry fails (a 500) until the orphan sweep has run.
    w.remove(Kind::Cluster, &cl);
    answer_failing_the_pool(&mut w, gip);
    w.deliver_all(&[]);
    answer_failing_the_pool(&mut w, gip);
    the_moved_address_is_reserved_after_the_sweep(&mut w, gip, &moved);
}

/// Soak seed 80066535: the claim watch stalls (an API server restart) while a bound claim whose IPAddress a person
/// deleted is itself deleted. The claim, as cached, must not make its IPAddress again: it is gone (in the seed, with
/// its Cluster's move, its address in use over there), and it is read live first.
#[test]
fn a_bound_claim_gone_while_its_watch_stalls_does_not_make_its_ipaddress_again() {
    let (mut w, _, m0) = bound_claim_of_a_pool_of_two();
    w.strip_ipaddress_of(m0.clone());
    w.force_delete_claim(&m0);
    w.deliver_all(&[Kind::Address]);
    w.run_job(Job::Claim(m0.clone()));
    w.answer_everything();
    let made = w.read(Kind::Address, &m0);
    assert!(made.is_none(), "made again for a claim that is gone: {made:?}\n{}", w.trace_text());
    w.deliver_all(&[]);
    let result = w.finish();
    fails(&w, result);
}

/// A pool deleted in the foreground (`kubectl delete --cascade=foreground`) while a claim is bound in it: the garbage
/// collector takes the pool's owner reference off the claim's IPAddress (the claim is an owner that stays), and the
/// claim must not put it back, or the two would write for as long as the claim lives.
#[test]
fn a_pool_deleted_in_the_foreground_keeps_its_bound_claims_without_a_fight_with_the_garbage_collector() {
    let (mut w, ip, m0) = bound_claim_of_a_pool_of_two();
    // The pool's own finalizer keeps it while an IPAddress of it is left.
    w.run_to_rest(Job::Pool(ip.pool_key()));
    assert!(w.delete_in_foreground(ip.server_kind(), &ip.key()), "the pool is deleted in the foreground");
    // The collector's steps, each followed by what the claim does about it: a few suffice, unless they fight.
    for _ in 0..8 {
        if !w.collect_in_foreground() {
            break;
        }
        w.deliver_all(&[]);
        w.run_to_rest(Job::Claim(m0.clone()));
    }
    let result = w.finish();
    fails(&w, result);
    let address = w.read(Kind::Address, &m0).expect("m0's IPAddress stays while m0 is bound");
    let owners: Vec<&str> = address["metadata"]["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| o["kind"].as_str())
        .collect();
    assert_eq!(owners, ["IPAddressClaim"], "{address}");
    let claim = w.read(Kind::Claim, &m0).expect("m0");
    assert_eq!(claim["status"]["addressRef"]["name"], "m0", "still bound: {claim}");
}

/// Soak seed 100048737: a claim deleted in the foreground is released (its IPAddress deleted, our finalizer off), and
/// then a deposed leader's create of its IPAddress lands. The garbage collector waits for that dependent before the
/// claim goes, and the IPAddress waits for our finalizer: the claim, still there, releases it too.
#[test]
fn a_late_ipaddress_of_a_claim_deleted_in_the_foreground_is_released() {
    let (mut w, _, m0) = bound_claim_of_a_pool_of_two();
    let mut late = w.read(Kind::Address, &m0).expect("m0's IPAddress");
    assert!(w.delete_in_foreground(Kind::Claim, &m0), "m0 is deleted in the foreground");
    w.deliver_all(&[]);
    w.run_to_rest(Job::Claim(m0.clone()));
    assert!(w.read(Kind::Address, &m0).is_none(), "released:\n{}", w.trace_text());
    for field in ["uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "generation"] {
        if let Some(meta) = late["metadata"].as_object_mut() {
            meta.remove(field);
        }
    }
    late["spec"]["address"] = json!("10.0.0.2");
    // Only the claim owns it (as when its pool is gone, in the seed): the collector deletes it rather than unblock.
    let claim_owner: Vec<Value> = late["metadata"]["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|o| o["kind"] == "IPAddressClaim")
        .cloned()
        .collect();
    late["metadata"]["ownerReferences"] = json!(claim_owner);
    w.create(Kind::Address, late);
    w.deliver_all(&[]);
    let result = w.finish();
    fails(&w, result);
    assert!(w.read(Kind::Claim, &m0).is_none(), "m0 is gone:\n{}", w.trace_text());
    assert!(w.read(Kind::Address, &m0).is_none(), "its late IPAddress is gone:\n{}", w.trace_text());
}

/// Soak seed 90039322, scripted: the IPAddress a claim's create made is deleted at once (its pool was edited while the
/// create was in flight), and the answer to taking our finalizer off is lost. The watch's Added event of it, older
/// than our record of the deletion, arrives before the rest: it must not undo that record, or the claim is bound to
/// an IPAddress that is gone.
#[test]
fn an_older_event_of_an_ipaddress_we_deleted_does_not_bring_it_back() {
    let mut w = World::scripted();
    let ip = PoolId::Ip(0);
    w.create_pool_shaped(ip, Shape { v6: false, offset: 0, size: 2, ..Shape::default() });
    let m0 = w.create_claim_named(0, "m0", ip);
    w.begin_term();
    w.deliver_all(&[]);
    w.run_job(Job::Claim(m0.clone()));
    assert!(w.answer_where(is_claim_patch("m0"), Fate::Answered), "the finalizer");
    w.deliver_all(&[Kind::Claim]);
    w.edit_pool_shaped(ip, Shape { v6: false, offset: 1, size: 1, ..Shape::default() });
    w.deliver_all(&[Kind::Pool(ip.kind())]);
    assert!(w.answer_where(is_create, Fate::Answered), "the create");
    let finalizer_off = |op: &Op| matches!(op, Op::PatchJson { kind: Kind::Address, .. });
    while !w.answer_where(finalizer_off, Fate::AppliedAnswerLost) {
        assert!(w.answer_where(|op| !finalizer_off(op), Fate::Answered), "the IPAddress is never deleted");
    }
    w.answer_everything();
    assert!(w.read(Kind::Address, &m0).is_none(), "deleted:\n{}", w.trace_text());
    assert!(w.deliver_one(Kind::Address), "the Added event");
    w.run_job(Job::Claim(m0.clone()));
    w.answer_everything();
    let result = w.check_now();
    fails(&w, result);
    w.deliver_all(&[]);
    let result = w.finish();
    fails(&w, result);
    let address = w.read(Kind::Address, &m0).expect("m0's IPAddress");
    assert_eq!(address["spec"]["address"], "10.0.0.2", "{address}\n{}", w.trace_text());
}

/// Soak seed 90280782, scripted: a deposed leader's create of `b/m1`'s IPAddress lands late, holding the address
/// `a/m0` is bound to, and its status write binding `b/m1` to it is still in flight. The next term withdraws the
/// duplicate, and the late status write lands after its reads of the claim. The withdrawal first writes the claim's
/// status, conditioned on the claim as read: the late write then fails its own precondition, and `b/m1` is never told
/// of `a/m0`'s address. Without that write, the late one binds `b/m1` to the IPAddress being withdrawn.
#[test]
fn a_late_status_write_that_would_bind_a_claim_cannot_land_once_its_duplicate_is_withdrawn() {
    let mut w = World::scripted_with_writes_late_anytime();
    let gip = PoolId::Global;
    w.create_pool_shaped(gip, Shape { v6: false, offset: 0, size: 2, ..Shape::default() });
    let m0 = w.create_claim_named(0, "m0", gip);
    let m1 = w.create_claim_named(1, "m1", gip);
    w.begin_term();
    w.deliver_all(&[]);
    w.run_to_rest(Job::Claim(m0.clone()));
    let taken = w.read(Kind::Address, &m0).expect("a/m0's IPAddress")["spec"]["address"].clone();
    w.run_job(Job::Claim(m1.clone()));
    assert!(w.answer_where(is_claim_patch("m1"), Fate::Answered), "b/m1's finalizer");
    assert!(w.hold_back_where(is_create).is_some(), "b/m1's create");
    w.end_this_term();
    // What the deposed leader sent: its create, landed, and its status write, in flight.
    let claim = w.read(Kind::Claim, &m1).expect("b/m1");
    w.create(Kind::Address, global_ipaddress("b", "m1", &claim["metadata"]["uid"], &taken, None));
    let message = format!("allocated {} from GlobalInClusterIPPool gip", taken.as_str().unwrap_or_default());
    let bind = Op::PatchMerge {
        kind: Kind::Claim,
        key: m1.clone(),
        patch: json!({
            "metadata": {"resourceVersion": claim["metadata"]["resourceVersion"]},
            "status": {"addressRef": {"name": "m1"}, "conditions": [{
                "type": "Ready", "status": "True", "reason": "Allocated", "message": message,
                "lastTransitionTime": "2023-11-14T22:13:20Z"}]},
        }),
        status: true,
    };
    w.begin_term();
    w.deliver_all(&[]);
    w.run_job(Job::Claim(m1.clone()));
    let is_claim_read = |op: &Op| matches!(op, Op::Get(Kind::Claim, _));
    assert!(w.answer_where(is_claim_read, Fate::Answered), "the live read of b/m1:\n{}", w.trace_text());
    assert!(w.answer_where(|op| matches!(op, Op::Get(Kind::Address, _)), Fate::Answered), "its IPAddress's");
    // The conditioned status write (and its Event), then the read after it; the late write lands right after.
    while !w.answer_where(is_claim_read, Fate::Answered) {
        let is_status_or_event = |op: &Op| is_status_write("m1")(op) || matches!(op, Op::Event);
        assert!(w.answer_where(is_status_or_event, Fate::Answered), "b/m1 is read again:\n{}", w.trace_text());
    }
    w.land_late(&bind);
    let result = w.check_now();
    fails(&w, result);
    w.answer_everything();
    w.deliver_all(&[]);
    for claim in [&m1, &m0, &m1] {
        w.run_to_rest(Job::Claim(claim.clone()));
    }
    let result = w.finish();
    fails(&w, result);
    let own = w.read(Kind::Address, &m1).expect("b/m1's IPAddress");
    assert_ne!(own["spec"]["address"], taken, "{}", w.trace_text());
}

fn is_status_write(name: &'static str) -> impl Fn(&Op) -> bool {
    move |op| matches!(op, Op::PatchMerge { kind: Kind::Claim, key, status: true, .. } if &*key.name == name)
}

/// Soak seed 110141832, scripted: a person deletes the IPAddress of bound claim `m0`, and the API server refuses the
/// create that makes it again (an admission webhook). The address is `m0`'s machine's: its hold stays, waiting claim
/// `m1` does not get it, and `m0` gets it back once the create goes through.
#[test]
fn a_refused_create_of_a_bound_claims_ipaddress_keeps_its_address_held() {
    let mut w = World::scripted();
    let ip = PoolId::Ip(0);
    w.create_pool_shaped(ip, Shape { v6: false, offset: 0, size: 1, ..Shape::default() });
    let m0 = w.create_claim_named(0, "m0", ip);
    w.begin_term();
    w.deliver_all(&[]);
    w.run_to_rest(Job::Claim(m0.clone()));
    let own = w.read(Kind::Address, &m0).expect("m0's IPAddress")["spec"]["address"].clone();
    let m1 = w.create_claim_named(0, "m1", ip);
    w.deliver_all(&[]);
    w.run_to_rest(Job::Claim(m1.clone()));
    w.patch(Kind::Address, &m0, json!({"metadata": {"finalizers": null}}));
    w.remove(Kind::Address, &m0);
    w.deliver_all(&[Kind::Address]);
    w.run_job(Job::Claim(m0.clone()));
    while !w.answer_where(is_create, Fate::RefusedByAdmission) {
        assert!(
            w.answer_where(|op| !is_create(op), Fate::Answered),
            "m0 never made its IPAddress again:\n{}",
            w.trace_text()
        );
    }
    w.answer_everything();
    w.deliver_all(&[]);
    w.run_to_rest(Job::Claim(m1.clone()));
    assert!(w.read(Kind::Address, &m1).is_none(), "m1 took m0's address:\n{}", w.trace_text());
    w.run_to_rest(Job::Claim(m0.clone()));
    settles_with_ipaddress_made_again(&mut w, &m0, &own);
}

/// Seed 120037281's order up to the next term (see the test after it), in a pool whose Clusters may each hold `quota`
/// addresses: `a/m0` bound again after its move back, the entry that reserved its address left behind by a term that
/// ended, its IPAddress deleted, and a new term begun and told of it all. The world, the pool, `a/m0`, its address.
fn back_from_a_move_its_entry_outliving_the_term(quota: Option<u8>) -> (World, PoolId, ObjectKey, Value) {
    let (mut w, gip, cl, m0, moved) = claim_of_a_cluster_bound_in_the_global_pool_of_quota(quota);
    move_away_and_release(&mut w, &cl, &m0);
    assert_ne!(moved_away_entries(&w), "", "reserved while a/m0 is away:\n{}", w.trace_text());
    cluster(&mut w, true);
    let (_, back) = claim_of_cluster(&mut w, "m0");
    w.create(Kind::Address, global_ipaddress("a", "m0", &back["metadata"]["uid"], &moved, Some("cl")));
    w.patch(Kind::Cluster, &cl, json!({"spec": {"paused": false}}));
    w.deliver_all(&[]);
    w.run_to_rest(Job::Claim(m0.clone()));
    assert_eq!(w.read(Kind::Claim, &m0).expect("a/m0")["status"]["addressRef"]["name"], "m0", "{}", w.trace_text());
    // The writer's removal of the entry fails its precondition; the term ends before it writes again.
    w.run_job(Job::MovedAway(gip.pool_key()));
    let is_pool_patch = |op: &Op| matches!(op, Op::PatchMerge { kind: Kind::Pool(_), status: false, .. });
    while !w.answer_where(is_pool_patch, Fate::NotApplied) {
        assert!(w.answer_where(|op| !is_pool_patch(op), Fate::Answered), "the writer never wrote:\n{}", w.trace_text());
    }
    w.answer_everything();
    w.end_this_term();
    w.patch(Kind::Address, &m0, json!({"metadata": {"finalizers": null}}));
    w.remove(Kind::Address, &m0);
    w.begin_term();
    w.deliver_all(&[]);
    (w, gip, m0, moved)
}

/// Soak seed 120037281, scripted: Cluster `cl` moves back with `a/m0` and its IPAddress, and `a/m0` is bound to it
/// again. The removal of the entry that reserved its address is refused (the pool changed meanwhile), and the term ends
/// before it is written again. A person deletes `a/m0`'s IPAddress. The next term finds `a/m0` bound, its IPAddress gone,
/// and its address reserved under its own name: the address is its machine's, it makes its IPAddress again with it,
/// and the entry goes.
#[test]
fn a_claim_back_from_a_move_whose_entry_outlived_a_leader_change_makes_its_ipaddress_again() {
    let (mut w, gip, m0, moved) = back_from_a_move_its_entry_outliving_the_term(None);
    w.run_to_rest(Job::Claim(m0.clone()));
    w.run_to_rest(Job::MovedAway(gip.pool_key()));
    settles_with_ipaddress_made_again(&mut w, &m0, &moved);
    assert_eq!(moved_away_entries(&w), "", "the reservation outlived the move back:\n{}", w.trace_text());
}

/// helper-131 F3: as seed 120037281, in a pool whose Clusters may each hold one address. The new term's hold of `a/m0`'s
/// reserved address, taken over from the reservation, counts for Cluster `cl`: its sibling `a/m1`, created then, waits
/// for its quota and does not take the pool's other address.
#[test]
fn a_reservation_a_bound_claim_takes_back_counts_in_its_clusters_quota() {
    let (mut w, gip, m0, moved) = back_from_a_move_its_entry_outliving_the_term(Some(1));
    assert_ne!(moved_away_entries(&w), "", "a/m0's address still reserved under its name:\n{}", w.trace_text());
    let (m1, _) = claim_of_cluster(&mut w, "m1");
    w.deliver_all(&[]);
    w.run_to_rest(Job::Claim(m1.clone()));
    assert!(w.read(Kind::Address, &m1).is_none(), "a/m1 went past cl's quota of 1:\n{}", w.trace_text());
    let reason = w.read(Kind::Claim, &m1).expect("a/m1")["status"]["conditions"][0]["reason"].clone();
    assert_eq!(reason, "QuotaExceeded", "{}", w.trace_text());
    w.run_to_rest(Job::Claim(m0.clone()));
    w.run_to_rest(Job::MovedAway(gip.pool_key()));
    settles_with_ipaddress_made_again(&mut w, &m0, &moved);
    assert!(w.read(Kind::Address, &m1).is_none(), "a/m1 went past cl's quota of 1:\n{}", w.trace_text());
}

/// helper-11's review: claim `a/m0` of Cluster `cl` is deleted while another controller's finalizer holds it; we
/// release its IPAddress and take our finalizer off, and claim `a/m1` of the same pool gets the address. Then
/// clusterctl moves `cl` away, marking and deleting `a/m0` too. Its machine is gone: its address, `a/m1`'s now, is
/// not reserved as moved away.
#[test]
fn a_claim_released_before_its_cluster_moved_reserves_nothing() {
    let mut w = World::scripted();
    let gip = PoolId::Global;
    w.create_pool_shaped(gip, Shape { v6: false, offset: 0, size: 1, ..Shape::default() });
    let cl = cluster(&mut w, false);
    let (m0, _) = claim_of_cluster(&mut w, "m0");
    w.begin_term();
    w.deliver_all(&[]);
    w.run_to_rest(Job::Claim(m0.clone()));
    let address = w.read(Kind::Address, &m0).expect("a/m0's IPAddress")["spec"]["address"].clone();
    let finalizers = json!([crate::api::RELEASE_ADDRESS_FINALIZER, "example.com/hold"]);
    w.patch(Kind::Claim, &m0, json!({"metadata": {"finalizers": finalizers}}));
    w.remove(Kind::Claim, &m0);
    w.deliver_all(&[]);
    w.run_to_rest(Job::Claim(m0.clone()));
    assert!(w.read(Kind::Address, &m0).is_none(), "released:\n{}", w.trace_text());
    let (m1, _) = claim_of_cluster(&mut w, "m1");
    w.deliver_all(&[]);
    w.run_to_rest(Job::Claim(m1.clone()));
    assert_eq!(w.read(Kind::Address, &m1).expect("a/m1's IPAddress")["spec"]["address"], address);
    clusterctl_deletes_for_the_move(&mut w, &cl, &m0);
    w.deliver_all(&[]);
    w.run_to_rest(Job::MovedAway(gip.pool_key()));
    let result = w.check_now();
    fails(&w, result);
    assert!(!moved_away_entries(&w).contains("@a/m0"), "a/m0's released address reserved:\n{}", w.trace_text());
}

/// Soak seed 100021395, scripted: a person deletes the IPAddress of bound claim `a/m0` while its Cluster is paused (the
/// claim keeps its address held, not made again while paused). Then a user deletes `a/m0`, strips its finalizers, and
/// the Cluster is deleted while paused (as a move leaves it). `a/m0` was not deleted for a move: its machine is gone,
/// and the address it kept is free, not reserved as in use over there. Whether the claim's deletion comes as its
/// watch's event or as a relist that no longer lists it (which cannot tell how it went: the Cluster's pause decides).
#[test]
fn a_claim_a_user_deleted_before_its_paused_cluster_went_reserves_nothing() {
    for relisted in [false, true] {
        a_claim_a_user_deleted_before_its_paused_cluster_went(relisted);
    }
}

fn a_claim_a_user_deleted_before_its_paused_cluster_went(relisted: bool) {
    let mut w = World::scripted();
    let gip = PoolId::Global;
    w.create_pool_shaped(gip, Shape { v6: false, offset: 0, size: 1, ..Shape::default() });
    let cl = cluster(&mut w, false);
    let (m0, _) = claim_of_cluster(&mut w, "m0");
    w.begin_term();
    w.deliver_all(&[]);
    w.run_to_rest(Job::Claim(m0.clone()));
    w.patch(Kind::Cluster, &cl, json!({"spec": {"paused": true}}));
    w.deliver_all(&[]);
    w.strip_ipaddress_of(m0.clone());
    w.deliver_all(&[]);
    w.remove(Kind::Claim, &m0);
    w.deliver_all(&[]);
    w.force_delete_claim(&m0);
    w.remove(Kind::Cluster, &cl);
    // The Cluster's deletion is seen first (it went while paused: moved, as far as anyone here can tell).
    w.deliver_all(&[Kind::Cluster]);
    if relisted {
        w.expire_watch_of(Kind::Claim);
    }
    w.deliver_all(&[]);
    w.run_to_rest(Job::MovedAway(gip.pool_key()));
    assert!(
        !moved_away_entries(&w).contains("@a/m0"),
        "a/m0's address reserved (relisted {relisted}):\n{}",
        w.trace_text()
    );
    let (m1, _) = claim_of_cluster(&mut w, "m1");
    cluster(&mut w, false);
    w.deliver_all(&[]);
    w.run_to_rest(Job::Claim(m1.clone()));
    let result = w.finish();
    fails(&w, result);
    assert!(w.read(Kind::Address, &m1).is_some(), "a/m1 got the free address:\n{}", w.trace_text());
}

/// Soak seed 6962: the pool labelled for the second manager's shard goes (its finalizer stripped) while the claim of
/// that shard on it holds an IPAddress, which the shard's manager is letting go. The first manager (no
/// `--watch-filter`) sees the claim: no longer seeing the pool's label, it took the claim for its own and bound it to
/// that IPAddress, and the claim was left bound to nothing. While its pool is not known, a claim labelled for another
/// shard is that shard's: the first manager writes nothing for it, also after a restart (helper-121 F1: what it knew
/// of the pool is gone then). Deleted, it is released by whoever sees it (helper-121 F3: the shard's manager may not
/// run); a pool of the name without the label makes it any manager's again.
#[test]
fn a_claim_of_another_shards_pool_stays_that_shards_after_the_pool_goes() {
    use super::swarm::{SHARD, SHARD_POOL};
    for (restart, then) in [(false, "deleted"), (true, "deleted"), (false, "pool made again")] {
        let case = format!("restart: {restart}, then {then}");
        let mut w = World::scripted_sharded();
        w.create_pool_shaped(SHARD_POOL, Shape { v6: false, offset: 0, size: 2, ..Shape::default() });
        let shard = json!({"metadata": {"labels": { WATCH_FILTER_LABEL: SHARD }}});
        w.patch(SHARD_POOL.server_kind(), &SHARD_POOL.key(), shard.clone());
        let m0 = w.create_claim_named(1, "m0", SHARD_POOL);
        w.patch(Kind::Claim, &m0, shard);
        w.patch(Kind::Claim, &m0, json!({"metadata": {"finalizers": [crate::api::RELEASE_ADDRESS_FINALIZER]}}));
        let uid = w.read(Kind::Claim, &m0).expect("claim b/m0")["metadata"]["uid"].clone();
        // The shard's manager's IPAddress for it (made by hand: that manager's term begins when the script ends).
        w.create(
            Kind::Address,
            json!({
                "apiVersion": format!("{GROUP}/v1beta2"), "kind": "IPAddress",
                "metadata": {"name": "m0", "namespace": "b", "finalizers": [PROTECT_ADDRESS_FINALIZER],
                             "ownerReferences": [{"apiVersion": format!("{GROUP}/v1beta2"), "kind": "IPAddressClaim",
                                                  "name": "m0", "uid": uid, "controller": true}]},
                "spec": {"claimRef": {"name": "m0"}, "address": "10.1.0.1", "prefix": 24,
                         "poolRef": {"apiGroup": GROUP, "kind": SHARD_POOL.kind().kind(), "name": SHARD_POOL.name()}},
            }),
        );
        w.begin_term();
        w.deliver_all(&[]);
        w.remove(SHARD_POOL.server_kind(), &SHARD_POOL.key());
        w.deliver_all(&[]);
        if restart {
            w.end_this_term();
            w.begin_term();
            w.deliver_all(&[]);
        }
        w.run_to_rest(Job::Claim(m0.clone()));
        w.sweep_after_the_delay();
        let touched =
            |w: &World| w.trace_text().lines().any(|l| l.contains("IPAddressClaim b/m0") && l.contains("PATCH"));
        assert!(!touched(&w), "{case}: the first manager wrote for another shard's claim:\n{}", w.trace_text());
        assert!(w.read(Kind::Address, &m0).is_some(), "{case}: released here:\n{}", w.trace_text());
        if then == "deleted" {
            w.user_delete(Kind::Claim, &m0);
            w.deliver_all(&[]);
            w.run_to_rest(Job::Claim(m0.clone()));
            w.answer_everything();
            assert!(w.read(Kind::Address, &m0).is_none(), "{case}: its IPAddress stays:\n{}", w.trace_text());
            assert!(w.read(Kind::Claim, &m0).is_none(), "{case}: the claim stays:\n{}", w.trace_text());
        } else {
            w.create_pool_shaped(SHARD_POOL, Shape { v6: false, offset: 0, size: 2, ..Shape::default() });
            w.deliver_all(&[]);
            w.run_to_rest(Job::Claim(m0.clone()));
            assert!(touched(&w), "{case}: the claim is served once its pool is anyone's:\n{}", w.trace_text());
        }
    }
}

/// A pool labelled for another shard's manager while a claim's run awaited its finalizer write: the run's view (served
/// here) is from its start, and the other manager cannot see our hold. Nothing is allocated from the pool (seed
/// 340056375: the two managers created one address at once).
#[test]
fn a_pool_labelled_for_another_shard_while_a_claim_awaited_is_not_allocated_from() {
    let mut w = World::scripted();
    w.create_pool_shaped(PoolId::Ip(1), Shape { v6: false, offset: 0, size: 2, ..Shape::default() });
    let m0 = w.create_claim_named(1, "m0", PoolId::Ip(1));
    w.begin_term();
    w.deliver_all(&[]);
    w.run_job(Job::Claim(m0));
    let pool = PoolId::Ip(1);
    let labels = json!({"metadata": {"labels": {crate::api::WATCH_FILTER_LABEL: "shard-b"}}});
    w.server_merge(pool.server_kind(), &pool.key(), labels).expect("the pool is labelled");
    w.deliver_all(&[pool.server_kind()]);
    assert!(w.answer_where(is_claim_patch("m0"), Fate::Answered), "the finalizer write");
    assert!(!w.answer_where(is_create, Fate::Answered), "no IPAddress is created:\n{}", w.trace_text());
}

/// Soak seed 430083652: the claim watch lags behind our status write that bound claim `a/m0` of Cluster `cl` (a
/// relist). `cl` is paused for a move, a person deletes `a/m0`'s IPAddress (its address is kept for the claim), and
/// clusterctl deletes the claim for the move, or not yet. `a/m0`, unbound as cached and waiting for its Cluster, must
/// not give its kept address up as an uncertain create that did not happen: read live, it is bound, or gone for the
/// move, and its machine uses the address.
#[test]
fn a_claim_the_cache_shows_unbound_keeps_the_address_kept_for_it_while_its_cluster_is_paused() {
    for deleted_for_the_move in [false, true] {
        let mut w = World::scripted();
        w.create_pool_shaped(PoolId::Global, Shape { v6: false, offset: 0, size: 2, ..Shape::default() });
        let cl = cluster(&mut w, false);
        let (m0, _) = claim_of_cluster(&mut w, "m0");
        let held = bound_behind_its_claim_watch(&mut w, &m0);
        w.patch(Kind::Cluster, &cl, json!({"spec": {"paused": true}}));
        w.strip_ipaddress_of(m0.clone());
        if deleted_for_the_move {
            clusterctl_deletes_for_the_move(&mut w, &cl, &m0);
        }
        w.deliver_all(&[Kind::Cluster, Kind::Address]);
        w.run_job(Job::Claim(m0.clone()));
        w.answer_everything();
        let case = format!("deleted for the move: {deleted_for_the_move}");
        let kept = w.live_index().is_some_and(|i| i.held_by(&PoolId::Global.pool_key(), &m0).is_some());
        assert!(kept, "{case}: the address kept for a/m0 went\n{}", w.trace_text());
        new_claims_get_none_of(&mut w, &[held]);
    }
}

/// Answers every request before the first that `which` matches, and gives that one `fate`.
fn answer_until(w: &mut World, which: impl Fn(&Op) -> bool, fate: Fate) {
    while !w.answer_where(&which, fate) {
        assert!(w.answer_where(|op| !which(op), Fate::Answered), "no such request was sent:\n{}", w.trace_text());
    }
}

/// Cluster `a/cl`'s claim `a/m0`, bound in a global pool of two; a person deletes its IPAddress, and the claim's first
/// create of it again is refused (its condition says so). Returns the world, the Cluster, the claim and the address
/// its machine uses.
fn bound_claim_refused_its_ipaddress_again() -> (World, ObjectKey, ObjectKey, Value) {
    let (mut w, _, cl, m0, address) = claim_of_a_cluster_bound_in_the_global_pool();
    w.strip_ipaddress_of(m0.clone());
    w.deliver_all(&[]);
    w.run_job(Job::Claim(m0.clone()));
    answer_until(&mut w, is_create, Fate::RefusedByAdmission);
    w.answer_everything();
    w.deliver_all(&[]);
    let refused = w.read(Kind::Claim, &m0).expect("claim a/m0")["status"]["conditions"][0].clone();
    assert_eq!(refused["status"], "False", "{refused}\n{}", w.trace_text());
    (w, cl, m0, address)
}

/// The Cluster goes, and the leader changes: the claim waits for its Cluster from now on.
fn cluster_deleted_and_a_new_term(w: &mut World, cl: &ObjectKey, m0: &ObjectKey) {
    w.remove(Kind::Cluster, cl);
    w.end_this_term();
    w.begin_term();
    w.deliver_all(&[]);
    w.run_to_rest(Job::Claim(m0.clone()));
}

/// Soak seed 630015735, scripted: a bound claim's second create of its IPAddress (deleted by a person) lands, but its
/// status write does not; then its Cluster is deleted and the leader changes. Waiting for its Cluster, bound to an
/// IPAddress that holds its address, its condition says so rather than the refusal it no longer has.
#[test]
fn a_bound_claim_waiting_for_its_cluster_says_ready_once_its_ipaddress_is_made_again() {
    let (mut w, cl, m0, address) = bound_claim_refused_its_ipaddress_again();
    w.run_job(Job::Claim(m0.clone()));
    answer_until(&mut w, is_create, Fate::Answered);
    answer_until(&mut w, |op| matches!(op, Op::PatchMerge { kind: Kind::Claim, status: true, .. }), Fate::NotApplied);
    w.answer_everything();
    cluster_deleted_and_a_new_term(&mut w, &cl, &m0);
    settles_with_ipaddress_made_again(&mut w, &m0, &address);
    let ready = w.read(Kind::Claim, &m0).expect("claim a/m0")["status"]["conditions"][0].clone();
    assert_eq!(ready["status"], "True", "{ready}\n{}", w.trace_text());
    let allocated = format!("allocated {} from GlobalInClusterIPPool \"gip\"", address.as_str().unwrap_or("?"));
    assert_eq!(ready["message"], allocated);
}

/// Its twins: no IPAddress of its name is made again (the new leader holds its address for it), or the one that lands
/// is a deposed leader's late create holding another address. The claim waiting for its Cluster is told Ready of
/// neither: its condition keeps naming its machine's address, as missing.
#[test]
fn a_bound_claim_waiting_for_its_cluster_is_not_told_ready_of_an_ipaddress_it_does_not_have() {
    for late in [None, Some("10.1.0.2")] {
        let (mut w, cl, m0, address) = bound_claim_refused_its_ipaddress_again();
        assert_eq!(address, "10.1.0.1");
        if let Some(late) = late {
            let uid = w.read(Kind::Claim, &m0).expect("claim a/m0")["metadata"]["uid"].clone();
            w.create(Kind::Address, global_ipaddress("a", "m0", &uid, &json!(late), Some("cl")));
        }
        cluster_deleted_and_a_new_term(&mut w, &cl, &m0);
        let result = w.finish();
        fails(&w, result);
        let ready = w.read(Kind::Claim, &m0).expect("claim a/m0")["status"]["conditions"][0].clone();
        assert_eq!(ready["status"], "False", "late {late:?}: {ready}\n{}", w.trace_text());
        assert!(ready["message"].as_str().is_some_and(|m| m.starts_with("allocated 10.1.0.1 ")), "{ready}");
    }
}

/// Soak seed 420069014's guard, scripted: clusterctl pauses Cluster `cl` and deletes its claim `a/m0` for the move;
/// this manager's Cluster watch has not shown the pause yet, and its claim watch relists past the deletion (so the
/// mark is not seen either). The IPAddress left behind is an orphan as the cache has it; the release reads the
/// Cluster live, finds it paused, and keeps it: its address is the moved machine's.
#[test]
fn an_orphan_of_a_cluster_paused_live_but_not_in_the_cache_is_kept() {
    let (mut w, _, cl, m0, address) = claim_of_a_cluster_bound_in_the_global_pool();
    w.patch(Kind::Cluster, &cl, json!({"spec": {"paused": true}}));
    w.patch(Kind::Claim, &m0, json!({"metadata": {"annotations": { DELETE_FOR_MOVE_ANNOTATION: "" }}}));
    w.force_delete_claim(&m0);
    w.expire_watch_of(Kind::Claim);
    w.deliver_all(&[Kind::Claim, Kind::Address]);
    w.sweep_after_the_delay();
    w.answer_everything();
    assert_kept(&w, &m0, &address, "released while its Cluster is paused for a move");
    w.deliver_all(&[]);
    let result = w.finish();
    fails(&w, result);
}

/// Asserts that the IPAddress `key` is there, not being deleted, and holds `address`.
fn assert_kept(w: &World, key: &ObjectKey, address: &Value, what: &str) {
    let kept = w.read(Kind::Address, key);
    let live = kept.is_some_and(|a| a["metadata"]["deletionTimestamp"].is_null() && a["spec"]["address"] == *address);
    assert!(live, "{what}:\n{}", w.trace_text());
}

/// Soak seed 460166466's guard, scripted: claim `a/m0`'s create is in flight when its pool is edited to no longer
/// allocate that address and its Cluster is paused for a move (clusterctl pauses, then copies). The create lands: not
/// handed out, but kept, as the Cluster read live is paused (the cache does not show it yet): the move may have copied
/// it, and the claim over there adopts it.
#[test]
fn a_create_put_out_of_range_is_kept_once_its_cluster_is_paused() {
    let (mut w, gip, cl, m0) = a_create_of_a_cluster_claim_in_flight(2);
    w.edit_pool_shaped(gip, Shape { v6: false, offset: 1, size: 1, ..Shape::default() });
    w.deliver_all(&[gip.server_kind()]);
    w.patch(Kind::Cluster, &cl, json!({"spec": {"paused": true}}));
    w.answer_everything();
    assert_kept(&w, &m0, &json!("10.1.0.1"), "withdrawn though its Cluster is paused for a move");
    w.deliver_all(&[]);
    let result = w.finish();
    fails(&w, result);
}

/// Soak seed 500178236's guard, scripted: clusterctl moves Cluster `cl` away and leaves `a/m0`'s IPAddress behind; a
/// new claim `a/m0` appears before the entry reserving its address is written, and is deleted. Its release leaves the
/// IPAddress left behind to the orphan release: deleted by the release, its mark (the only record of the move that
/// survives a restart) would go before the entry, and a new term would hand the address out while the machine over
/// there uses it.
#[test]
fn a_new_claim_of_a_moved_claims_name_deleted_before_the_entry_is_written_leaves_the_ipaddress_left_behind() {
    let (mut w, gip, cl, m0, moved) = claim_of_a_cluster_bound_in_the_global_pool();
    clusterctl_deletes_for_the_move(&mut w, &cl, &m0);
    w.remove(Kind::Cluster, &cl);
    w.deliver_all(&[]);
    let again = w.create_claim_named(0, "m0", gip);
    w.deliver_all(&[]);
    w.run_job(Job::Claim(again.clone()));
    w.answer_everything();
    w.remove(Kind::Claim, &again);
    w.deliver_all(&[]);
    w.run_job(Job::Claim(again.clone()));
    w.answer_everything();
    assert_kept(&w, &m0, &moved, "the release of the new claim deleted the IPAddress the move left behind");
    w.end_this_term();
    w.begin_term();
    w.deliver_all(&[]);
    let m1 = w.create_claim_named(0, "m1", gip);
    w.deliver_all(&[]);
    w.run_to_rest(Job::MovedAway(gip.pool_key()));
    w.run_to_rest(Job::Claim(m1.clone()));
    let result = w.finish();
    fails(&w, result);
    let made = w.read(Kind::Address, &m1).map(|a| a["spec"]["address"].clone());
    assert_ne!(made, Some(moved), "the address in use over there was handed out:\n{}", w.trace_text());
}

/// Seed 550176934's order across a leader change: our withdrawal's DELETE of a create put out of range lands, its
/// finalizer's removal fails, and the term ends. clusterctl marks the claim for its Cluster's move, the next term lists
/// the IPAddress already being deleted, and then sees the claim deleted for the move. The orphan release must not take
/// that deletion (ours, from a term this one knows nothing of) for an operator freeing the address: the entry of the
/// moved address is written, not cancelled.
#[test]
fn our_withdrawal_landed_in_an_earlier_term_does_not_cancel_the_moved_address() {
    let (mut w, gip, cl, m0, moved) = a_withdrawal_of_a_create_put_out_of_range_in_flight();
    assert!(w.answer_where(is_delete, Fate::Answered), "the DELETE");
    let strips_finalizer = |op: &Op| matches!(op, Op::PatchJson { kind: Kind::Address, .. });
    answer_until(&mut w, strips_finalizer, Fate::ServerError);
    w.answer_everything();
    w.end_this_term();
    // clusterctl pauses cl and marks a/m0; the next term lists them, then sees a/m0 deleted for the move.
    w.patch(Kind::Cluster, &cl, json!({"spec": {"paused": true}}));
    w.patch(Kind::Claim, &m0, json!({"metadata": {"annotations": { DELETE_FOR_MOVE_ANNOTATION: "" }}}));
    w.begin_term();
    w.deliver_all(&[]);
    w.force_delete_claim(&m0);
    w.remove(Kind::Cluster, &cl);
    w.deliver_all(&[]);
    answer_failing_the_pool(&mut w, gip);
    the_moved_address_is_reserved_after_the_sweep(&mut w, gip, &moved);
}

/// Soak seed 730861184, scripted: clusterctl moves `cl` away, and its IPAddress a/m0 is left behind unmarked (the
/// orphan check of the claim's deletion never ran), its entry written into the pool's annotation. A user makes a new
/// claim a/m0, and the term ends. The next term knows the move only from the annotation. It lets the IPAddress go,
/// the answer to taking our finalizer off is lost, and the watch's Deleted event ends it. Its hold must become the
/// reservation, not the new claim's: kept for the claim, it made its IPAddress with the address the moved machine
/// uses over there.
#[test]
fn an_unmarked_ipaddress_a_move_left_behind_let_go_in_a_term_that_knows_only_the_annotation_keeps_its_address_reserved()
{
    let (mut w, gip, cl, m0, moved) = claim_of_a_cluster_bound_in_the_global_pool();
    clusterctl_deletes_for_the_move(&mut w, &cl, &m0);
    w.remove(Kind::Cluster, &cl);
    w.deliver_all(&[]);
    // The entry is written; no orphan check or sweep runs, so the IPAddress left behind carries no mark.
    w.run_to_rest(Job::MovedAway(gip.pool_key()));
    let entry = moved_away_entries(&w);
    assert!(entry.contains(moved.as_str().unwrap_or("?")), "the entry is written: {entry:?}");
    let left = w.read(Kind::Address, &m0).expect("the IPAddress left behind");
    assert!(left["metadata"]["annotations"][MOVED_AWAY_ANNOTATION].is_null(), "unmarked: {left}");
    // A user makes a claim a/m0 of the pool (no Cluster); the term ends before it is reconciled.
    let m0 = w.create_claim_named(0, "m0", gip);
    w.end_this_term();
    // The next term lists everything and lets the IPAddress go; the answer to taking our finalizer off is lost.
    w.begin_term();
    w.deliver_all(&[]);
    w.run_job(Job::Claim(m0.clone()));
    let is_finalizer_off = |op: &Op| matches!(op, Op::PatchJson { kind: Kind::Address, .. });
    while !w.answer_where(is_finalizer_off, Fate::AppliedAnswerLost) {
        assert!(w.answer_where(|op| !is_finalizer_off(op), Fate::Answered), "never let go:\n{}", w.trace_text());
    }
    w.answer_everything();
    // The watch's Deleted event, then the claim allocates.
    w.deliver_all(&[]);
    w.run_to_rest(Job::Claim(m0.clone()));
    let made = w.read(Kind::Address, &m0).unwrap_or_else(|| panic!("the new claim's IPAddress:\n{}", w.trace_text()));
    assert_ne!(made["spec"]["address"], moved, "the new claim took the address in use over there:\n{}", w.trace_text());
    assert_eq!(moved_away_entries(&w), entry, "the reservation stays:\n{}", w.trace_text());
    let result = w.finish();
    fails(&w, result);
}

/// helper-108 F1: the entry of the IPAddress a move left behind is in the pool's annotation, and the IPAddress not yet
/// released, when a person deletes the pool and GitOps makes it again. The pool watch shows neither yet: the index
/// still knows the deleted pool, whose annotation holds the entry. The garbage collector deletes the IPAddress (no
/// owner of it is left), and the sweep must not release it as recorded: the pool made again, once shown, reserves
/// nothing (its annotation is empty), unless the IPAddress still there queues its entry for it.
#[test]
fn an_ipaddress_left_behind_collected_while_the_pool_watch_still_shows_its_deleted_pool_keeps_its_address_reserved() {
    let (mut w, gip, cl, m0, moved) = claim_of_a_cluster_bound_in_the_global_pool();
    moves_away_leaving_its_ipaddress_behind(&mut w, &cl, &m0);
    w.run_to_rest(Job::MovedAway(gip.pool_key()));
    assert!(moved_away_entries(&w).contains(moved.as_str().unwrap_or("?")), "the entry is written");
    // The pool is deleted and made again, and the garbage collector deletes the IPAddress; the pool watch lags.
    a_person_deletes_the_pool(&mut w, gip);
    w.create_pool_shaped(gip, Shape { v6: false, offset: 0, size: 2, ..Shape::default() });
    w.garbage_collect();
    w.deliver_all(&[Kind::Address, Kind::Claim, Kind::Cluster]);
    w.sweep_after_the_delay();
    w.answer_everything();
    // The pool watch catches up.
    w.deliver_all(&[]);
    w.sweep_to_rest();
    w.run_to_rest(Job::MovedAway(gip.pool_key()));
    w.sweep_to_rest();
    the_pool_made_again_reserves_it_across_a_restart(&mut w, moved);
}

/// Soak seeds 804659163 and 804814870: the pool of an IPAddress a move left behind (marked, its entry unwritten: the
/// pool was deleted, its finalizer stripped) is made again while the sweep releases that IPAddress. The sweep read
/// the pool as gone, as the index knows it; the pool watch shows the new pool only later. Released, the mark would go,
/// the move's only record, and the pool made again would never reserve the address in use over there: our
/// finalizer stays until the new pool's annotation records it.
fn a_pool_made_again_while_the_sweep_releases_its_ipaddress_left_behind(made_again_when: impl Fn(&Op) -> bool) {
    let (mut w, gip, cl, m0, moved) = claim_of_a_cluster_bound_in_the_global_pool();
    a_person_deletes_the_pool(&mut w, gip);
    w.deliver_all(&[]);
    moves_away_leaving_its_ipaddress_behind(&mut w, &cl, &m0);
    w.run_to_rest(Job::MovedAway(gip.pool_key()));
    assert_eq!(w.read(gip.server_kind(), &gip.key()), None, "the pool is gone");
    // The sweep that releases it, answered until `made_again_when`; GitOps makes the pool again then, unseen.
    w.sweep_after_the_delay();
    while !w.is_pending(&made_again_when) {
        assert!(w.answer_where(|_| true, Fate::Answered), "the sweep never got there:\n{}", w.trace_text());
    }
    w.create_pool_shaped(gip, Shape { v6: false, offset: 0, size: 2, ..Shape::default() });
    w.answer_everything();
    assert!(w.read(Kind::Address, &m0).is_some(), "released before the new pool recorded it:\n{}", w.trace_text());
    // The pool watch catches up, the writer records the entry, and the sweep finishes the release.
    w.deliver_all(&[]);
    w.run_to_rest(Job::MovedAway(gip.pool_key()));
    w.sweep_to_rest();
    assert_eq!(w.read(Kind::Address, &m0), None, "the IPAddress left behind is released once recorded");
    the_pool_made_again_reserves_it_across_a_restart(&mut w, moved);
}

/// helper-119 G1: the same race on the claim's path. A new claim a/m0 of the pool lets go the IPAddress of its name a
/// move left behind (its entry never written: the pool was gone), and the pool is made again while it deletes it.
#[test]
fn a_pool_made_again_while_a_new_claim_of_its_name_lets_go_the_ipaddress_left_behind_reserves_its_address() {
    a_pool_made_again_while_a_new_claim_of_its_name_lets_go_the_ipaddress_left_behind(false);
}

/// helper-120 F1: the same, the pool watch showing the pool made again at once (its appearance queues the entry): the
/// claim's let-go must still wait for the entry, the IPAddress it lets go not being one of the pool the index knows.
#[test]
fn a_pool_made_again_and_seen_at_once_while_a_new_claim_of_its_name_lets_go_the_ipaddress_left_behind_reserves_it() {
    a_pool_made_again_while_a_new_claim_of_its_name_lets_go_the_ipaddress_left_behind(true);
}

fn a_pool_made_again_while_a_new_claim_of_its_name_lets_go_the_ipaddress_left_behind(seen_at_once: bool) {
    let (mut w, gip, cl, m0, moved) = claim_of_a_cluster_bound_in_the_global_pool();
    a_person_deletes_the_pool(&mut w, gip);
    w.deliver_all(&[]);
    moves_away_leaving_its_ipaddress_behind(&mut w, &cl, &m0);
    w.run_to_rest(Job::MovedAway(gip.pool_key()));
    let m0 = w.create_claim_named(0, "m0", gip);
    w.deliver_all(&[]);
    w.run_job(Job::Claim(m0.clone()));
    while !w.is_pending(|op| matches!(op, Op::Delete { kind: Kind::Address, .. })) {
        assert!(w.answer_where(|_| true, Fate::Answered), "the claim never let it go:\n{}", w.trace_text());
    }
    w.create_pool_shaped(gip, Shape { v6: false, offset: 0, size: 2, ..Shape::default() });
    if seen_at_once {
        w.deliver_all(&[gip.server_kind()]);
    }
    w.answer_everything();
    assert!(w.read(Kind::Address, &m0).is_some(), "let go before the new pool recorded it:\n{}", w.trace_text());
    w.deliver_all(&[]);
    w.run_to_rest(Job::MovedAway(gip.pool_key()));
    w.sweep_to_rest();
    // Let go once the entry is written; then the claim allocates.
    w.run_to_rest(Job::Claim(m0.clone()));
    w.run_to_rest(Job::Claim(m0.clone()));
    let made = w.read(Kind::Address, &m0).unwrap_or_else(|| panic!("the new claim's IPAddress:\n{}", w.trace_text()));
    assert_ne!(made["spec"]["address"], moved, "the new claim took the address in use over there:\n{}", w.trace_text());
    the_pool_made_again_reserves_it_across_a_restart(&mut w, moved);
}

#[test]
fn a_pool_made_again_before_the_sweep_reads_the_ipaddress_left_behind_reserves_its_address() {
    a_pool_made_again_while_the_sweep_releases_its_ipaddress_left_behind(|op| matches!(op, Op::Get(Kind::Address, _)));
}

#[test]
fn a_pool_made_again_while_the_sweep_deletes_the_ipaddress_left_behind_reserves_its_address() {
    a_pool_made_again_while_the_sweep_releases_its_ipaddress_left_behind(|op| {
        matches!(op, Op::Delete { kind: Kind::Address, .. })
    });
}

/// helper-108 F2: a move leaves IPAddress a/m0 behind, its entry not yet written when a person deletes the pool and
/// GitOps makes it again (the new pool queues the entry of the IPAddress still there). The garbage collector deletes
/// the IPAddress, and a new claim a/m0 of the pool comes before the writer. Let go at once as one being deleted, its
/// reservation would live in memory only, and the writer, finding it gone, drop its entry: the new claim waits for
/// the entry, and no claim gets the address in use over there.
#[test]
fn a_new_claim_of_its_name_waits_for_the_entry_of_an_ipaddress_left_behind_being_deleted() {
    let (mut w, gip, cl, m0, moved) = claim_of_a_cluster_bound_in_the_global_pool();
    moves_away_leaving_its_ipaddress_behind(&mut w, &cl, &m0);
    // The pool goes before the entry is written (the writer finds it gone), and comes back.
    a_person_deletes_the_pool(&mut w, gip);
    w.deliver_all(&[]);
    w.run_job(Job::MovedAway(gip.pool_key()));
    w.answer_everything();
    w.create_pool_shaped(gip, Shape { v6: false, offset: 0, size: 2, ..Shape::default() });
    w.deliver_all(&[]);
    // The garbage collector deletes the IPAddress; a new claim a/m0 runs before the writer.
    w.garbage_collect();
    w.deliver_all(&[]);
    let m0 = w.create_claim_named(0, "m0", gip);
    w.deliver_all(&[]);
    w.run_job(Job::Claim(m0.clone()));
    w.answer_everything();
    w.deliver_all(&[]);
    w.run_to_rest(Job::MovedAway(gip.pool_key()));
    w.run_to_rest(Job::Claim(m0.clone()));
    w.sweep_to_rest();
    assert!(
        moved_away_entries(&w).contains(moved.as_str().unwrap_or("?")),
        "the pool made again does not reserve {moved}: {:?}\n{}",
        moved_away_entries(&w),
        w.trace_text()
    );
    if let Some(made) = w.read(Kind::Address, &m0) {
        assert_ne!(made["spec"]["address"], moved, "the new claim took the address in use over there");
    }
    w.end_this_term();
    w.begin_term();
    w.deliver_all(&[]);
    new_claims_get_none_of(&mut w, &[moved]);
}

/// helper-109 G1: the annotation has no room for the entry of the IPAddress a move left behind (kept, marked), and a
/// new claim of its name says so. A person deletes that IPAddress to free its address (docs/operations.md): it is let
/// go at once, and the claim gets another address. It must not wait for room, the IPAddress stuck being deleted.
#[test]
fn a_new_claim_of_its_name_lets_go_the_ipaddress_left_behind_a_person_deletes_while_the_annotation_is_full() {
    let mut w = World::scripted();
    let gip = PoolId::Global;
    w.create_pool_shaped(gip, Shape { v6: false, offset: 0, size: 3, ..Shape::default() });
    w.limit_annotations(0, 1 << 20);
    let cl = cluster(&mut w, false);
    let (m0, _) = claim_of_cluster(&mut w, "m0");
    w.begin_term();
    w.deliver_all(&[]);
    w.run_to_rest(Job::Claim(m0.clone()));
    let moved = w.read(Kind::Address, &m0).expect("m0's IPAddress")["spec"]["address"].clone();
    moves_away_leaving_its_ipaddress_behind(&mut w, &cl, &m0);
    w.run_to_rest(Job::MovedAway(gip.pool_key()));
    w.sweep_to_rest();
    let left = w.read(Kind::Address, &m0).expect("kept: no room for its entry");
    assert_eq!(left["metadata"]["annotations"][MOVED_AWAY_ANNOTATION], "true", "kept by our mark: {left}");
    // A new claim a/m0 of the pool waits for room; a person deletes the IPAddress left behind.
    let m0 = w.create_claim_named(0, "m0", gip);
    w.deliver_all(&[]);
    w.run_to_rest(Job::Claim(m0.clone()));
    w.user_delete(Kind::Address, &m0);
    w.deliver_all(&[]);
    w.run_to_rest(Job::Claim(m0.clone()));
    w.sweep_to_rest();
    w.run_to_rest(Job::Claim(m0.clone()));
    let made = w.read(Kind::Address, &m0).unwrap_or_else(|| panic!("the new claim's IPAddress:\n{}", w.trace_text()));
    assert!(
        made["metadata"]["deletionTimestamp"].is_null() && made["spec"]["address"] != moved,
        "the new claim waits on the IPAddress left behind, being deleted: {made}\n{}",
        w.trace_text()
    );
    let result = w.finish();
    fails(&w, result);
}

/// helper-109 G2: the entry of the IPAddress a move left behind is in the pool's annotation when a person deletes the
/// pool and GitOps makes it again; the pool watch shows neither yet. A new claim of the IPAddress's name must not let
/// it go on what the index knows (the deleted pool, whose annotation holds the entry): the pool made again would
/// then reserve nothing. It waits for the pool watch, which queues the entry for the new pool.
#[test]
fn a_new_claim_of_its_name_keeps_the_ipaddress_left_behind_while_the_pool_watch_lags_a_pool_made_again() {
    let (mut w, gip, cl, m0, moved) = claim_of_a_cluster_bound_in_the_global_pool();
    moves_away_leaving_its_ipaddress_behind(&mut w, &cl, &m0);
    w.run_to_rest(Job::MovedAway(gip.pool_key()));
    assert!(moved_away_entries(&w).contains(moved.as_str().unwrap_or("?")), "the entry is written");
    // The pool is deleted and made again; the pool watch lags. A new claim a/m0 runs meanwhile.
    a_person_deletes_the_pool(&mut w, gip);
    w.create_pool_shaped(gip, Shape { v6: false, offset: 0, size: 2, ..Shape::default() });
    let m0 = w.create_claim_named(0, "m0", gip);
    let not_pools = [Kind::Address, Kind::Claim, Kind::Cluster];
    w.deliver_all(&not_pools);
    w.run_job(Job::Claim(m0.clone()));
    w.answer_everything();
    w.deliver_all(&not_pools);
    // The pool watch catches up.
    w.deliver_all(&[]);
    w.run_to_rest(Job::MovedAway(gip.pool_key()));
    w.run_to_rest(Job::Claim(m0.clone()));
    w.sweep_to_rest();
    the_pool_made_again_reserves_it_across_a_restart(&mut w, moved);
}

/// helper-111 R2: a new term lists the claims, the IPAddresses and the Clusters, not yet the pools. clusterctl moves
/// Cluster `cl` meanwhile (paused, the claim deleted for the move, the Cluster deleted), and relists of the claim and
/// Cluster watches show neither deletion, only that they are gone. The claim's orphan check, queued by the relist, must
/// not release the IPAddress it left behind before every watch listed: the Cluster, gone paused, is judged only then,
/// and the moved address reserved.
#[test]
fn an_orphan_check_before_every_watch_listed_releases_nothing_a_move_left_behind() {
    let (mut w, gip, cl, m0, address) = claim_of_a_cluster_bound_in_the_global_pool();
    w.end_this_term();
    w.begin_term();
    w.deliver_all(&[Kind::Claim, Kind::Address, Kind::Cluster]);
    w.patch(Kind::Cluster, &cl, json!({"spec": {"paused": true}}));
    w.deliver_all(&[Kind::Cluster]);
    w.patch(Kind::Claim, &m0, json!({"metadata": {"annotations": { DELETE_FOR_MOVE_ANNOTATION: "" }}}));
    w.force_delete_claim(&m0);
    w.remove(Kind::Cluster, &cl);
    w.expire_watch_of(Kind::Claim);
    w.expire_watch_of(Kind::Cluster);
    w.deliver_all(&[Kind::Claim, Kind::Cluster]);
    w.run_job(Job::Gone(m0.clone()));
    w.answer_everything();
    assert!(w.read(Kind::Address, &m0).is_some(), "released before every watch listed:\n{}", w.trace_text());
    w.deliver_all(&[]);
    w.sweep_to_rest();
    w.run_to_rest(Job::MovedAway(gip.pool_key()));
    let moved = address.as_str().unwrap_or("?");
    assert!(moved_away_entries(&w).contains(moved), "{moved} is not reserved:\n{}", w.trace_text());
    let result = w.finish();
    fails(&w, result);
}
