//! `plan` as a table: each row a claim and its view, and the step that follows; then a property over every view a
//! generator makes: a run ends within `MAX_STEPS`, and the IPAddress a live bound claim is bound to is never let go or
//! released.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use proptest::prelude::*;

use super::*;
use crate::api::{PAUSED_ANNOTATION, PoolResource};
use crate::capi::ReadyCondition;
use crate::compact::intern;
use crate::index::tests::{claim, ip_address, key, pool, pool_key};
use crate::index::{Duplicate, PoolKey};

const ADDRESS: &str = "10.0.0.1";
const NOW: i64 = 1_000_000;

fn address() -> IpAddr {
    ADDRESS.parse().expect("an address")
}

/// What a run knows at its start.
fn facts() -> Facts<'static> {
    Facts {
        live: None,
        settled: false,
        bound_back: false,
        now: Timestamp::from_second(NOW).expect("a time"),
        restore_wait: Duration::from_secs(120),
        orphan_release_delay: Duration::from_secs(30),
    }
}

/// The view of a claim of an existing, unpaused pool that has recorded nothing of its name.
fn view() -> ClaimView {
    ClaimView {
        pool_key: pool_key(),
        pool: Some(Arc::new(pool("10.0.0.1-10.0.0.9", 1).into_pool())),
        cluster_paused: None,
        record: None,
        held: None,
        duplicate: None,
        moved_one_wins: false,
        moved_one_waits: false,
        restored_one_wins: false,
        others_orphaned: false,
        holds_reserved: false,
        left_behind: false,
        moved_away_unwritten: false,
        out_of_range: false,
        holds_unconfirmed: false,
        moved_away_no_room: false,
        status_written: None,
        served: Served::Here,
    }
}

/// `view` with the IPAddress of `claim`'s name recorded, made for it and complete, holding `ADDRESS`.
fn with_ipaddress(mut view: ClaimView, claim: &Claim) -> ClaimView {
    let mut object = ip_address(&claim.key.name, ADDRESS, claim);
    object.metadata.owner_references.get_or_insert_default().push(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            kind: "InClusterIPPool".to_owned(),
            name: "pool".to_owned(),
            uid: view.pool.as_ref().and_then(|p| p.metadata.uid.clone()).unwrap_or_default(),
            ..Default::default()
        },
    );
    view.record = AddressRecord::of(&object);
    view.held = Some(Held::Ip(Some(address())));
    view
}

/// `claim`, bound to the IPAddress of its name holding `ADDRESS`, Ready.
fn bound(mut claim: Claim) -> Claim {
    claim.bound = Some("".into());
    claim.bound_address = Some(address());
    claim.ready = Some(ready(true));
    claim
}

fn ready(status: bool) -> ReadyCondition {
    ReadyCondition { status: Some(status), transition_digest: 0, digest: 0, last_transition_time: None }
}

fn deleted(mut claim: Claim) -> Claim {
    claim.deletion_timestamp = Some(Time(Timestamp::from_second(NOW - 10).expect("a time")));
    claim
}

fn a_duplicate() -> Option<Duplicate> {
    Some(Duplicate { pool: pool_key(), held: Held::Ip(Some(address())), holders: vec![key("a"), key("other")] })
}

fn end(plan: Plan) -> End {
    match plan.step {
        Step::End(end) => end,
        other => panic!("the run goes on with {other:?}"),
    }
}

fn reason_of(end: &End) -> ClaimReason {
    match end {
        End::Say { reason, .. } => *reason,
        other => panic!("nothing is said: {other:?}"),
    }
}

#[test]
fn a_claim_another_manager_serves_is_left_alone_and_one_no_manager_serves_is_told_so_until_bound() {
    let c = claim("a");
    let elsewhere = ClaimView { served: Served::Elsewhere, ..view() };
    assert_eq!(end(plan(&c, &elsewhere, &facts())), End::Finish(Next::AwaitChange));
    let nowhere = ClaimView { served: Served::Nowhere { pool_shard: intern("blue"), claim_shard: None }, ..view() };
    let told = end(plan(&c, &nowhere, &facts()));
    assert_eq!(reason_of(&told), ClaimReason::PoolNotReady);
    assert_eq!(end(plan(&bound(c.clone()), &nowhere, &facts())), End::Finish(Next::AwaitChange));
    assert_eq!(
        end(plan(&deleted(c), &nowhere, &facts())),
        End::Release,
        "a deleted one is released by whoever sees it"
    );
}

#[test]
fn a_paused_claim_does_nothing_but_withdraw_a_late_duplicate_it_was_never_told_of() {
    let mut c = claim("a");
    c.paused = true;
    let paused = plan(&c, &view(), &facts());
    assert_eq!(paused, Plan { step: Step::End(End::Finish(Next::AwaitChange)), stops_waiting: true });
    let duplicate = ClaimView { duplicate: a_duplicate(), ..with_ipaddress(view(), &c) };
    let End::LetGo { why, judged } = end(plan(&c, &duplicate, &facts())) else { panic!("withdrawn") };
    assert_eq!((why, judged), (LetGo::Duplicate, duplicate.record.as_ref().and_then(|r| r.uid)));
    assert_eq!(end(plan(&bound(c), &duplicate, &facts())), End::Finish(Next::AwaitChange), "told of it: it stays");
    let mut paused_pool = pool("10.0.0.1-10.0.0.9", 1);
    paused_pool.metadata.annotations = Some([(PAUSED_ANNOTATION.to_owned(), String::new())].into());
    let of_a_paused_pool = ClaimView { pool: Some(Arc::new(paused_pool.into_pool())), ..view() };
    assert_eq!(end(plan(&claim("b"), &of_a_paused_pool, &facts())), End::Finish(Next::AwaitChange));
}

#[test]
fn a_new_claim_gets_its_finalizer_first_then_an_address() {
    let mut c = claim("a");
    c.release_finalizer_index = None;
    assert_eq!(plan(&c, &view(), &facts()).step, Step::AddFinalizer);
    c.release_finalizer_index = Some(0);
    assert_eq!(
        plan(&c, &view(), &facts()),
        Plan { step: Step::End(End::Allocate { previous: None }), stops_waiting: false }
    );
}

#[test]
fn a_claim_whose_pool_is_missing_or_going_settles_an_uncertain_create_then_says_so() {
    let c = claim("a");
    for (pool, words) in [(None, "not found"), (Some(deleting_pool()), "is being deleted")] {
        let missing = ClaimView { pool, ..view() };
        let End::Say { reason, message, .. } = end(plan(&c, &missing, &facts())) else { panic!("said") };
        assert_eq!(reason, ClaimReason::PoolNotReady);
        assert!(message.ends_with(words), "{message}");
        let uncertain = ClaimView { holds_unconfirmed: true, ..missing };
        assert_eq!(plan(&c, &uncertain, &facts()).step, Step::SettleUncertainCreate { then: None });
        assert_eq!(
            reason_of(&end(plan(&c, &uncertain, &Facts { settled: true, ..facts() }))),
            ClaimReason::PoolNotReady
        );
    }
}

fn deleting_pool() -> Arc<Pool> {
    let mut p = pool("10.0.0.1-10.0.0.9", 1);
    p.metadata.deletion_timestamp = Some(Time(Timestamp::from_second(NOW).expect("a time")));
    Arc::new(p.into_pool())
}

#[test]
fn a_claim_restored_by_velero_waits_for_its_ipaddress_before_it_is_allocated_one() {
    let mut c = claim("a");
    c.restored = true;
    c.created = u32::try_from(NOW - 20).expect("in range");
    let End::Say { reason, then, .. } = end(plan(&c, &view(), &facts())) else { panic!("waits") };
    assert_eq!((reason, then), (ClaimReason::WaitingForIPAddress, Next::After(Duration::from_secs(100))));
}

#[test]
fn an_unbound_claim_holding_an_out_of_range_uncertain_create_reads_itself_then_settles_it_unless_bound_meanwhile() {
    let c = claim("a");
    let out =
        ClaimView { out_of_range: true, holds_unconfirmed: true, held: Some(Held::Ip(Some(address()))), ..view() };
    assert_eq!(plan(&c, &out, &facts()).step, Step::ReadClaim);
    let unbound_live = c.clone();
    let read = Facts { live: Some(Some(&unbound_live)), ..facts() };
    assert_eq!(plan(&c, &out, &read).step, Step::SettleUncertainCreate { then: Some(Next::After(Duration::ZERO)) });
    let bound_live = bound(c.clone());
    let read = Facts { live: Some(Some(&bound_live)), ..facts() };
    assert_eq!(end(plan(&c, &out, &read)), End::Allocate { previous: None }, "its machine's address: kept");
}

#[test]
fn a_bound_claim_whose_ipaddress_is_gone_makes_it_again_only_while_it_lives_bound() {
    let c = bound(claim("a"));
    assert_eq!(plan(&c, &view(), &facts()).step, Step::ReadClaim);
    let gone = Facts { live: Some(None), ..facts() };
    assert_eq!(end(plan(&c, &view(), &gone)), End::Finish(Next::AwaitChange));
    let being_deleted = deleted(c.clone());
    let going = Facts { live: Some(Some(&being_deleted)), ..facts() };
    assert_eq!(end(plan(&c, &view(), &going)), End::Finish(Next::AwaitChange));
    let read = Facts { live: Some(Some(&c)), ..facts() };
    assert_eq!(
        end(plan(&c, &view(), &read)),
        End::Allocate { previous: Some(address()) },
        "its machine's address first"
    );
    let holds = ClaimView { held: Some(Held::Ip(Some(address()))), ..view() };
    assert_eq!(end(plan(&c, &holds, &read)), End::Allocate { previous: None }, "the one it holds");
}

#[test]
fn a_deleted_claim_is_released_after_its_grace_period_and_only_once() {
    let c = deleted(claim("a"));
    assert_eq!(plan(&c, &view(), &facts()), Plan { step: Step::End(End::Release), stops_waiting: true });
    let mut graced = pool("10.0.0.1-10.0.0.9", 1);
    graced.spec.fields.address_reuse_grace_period_seconds = Some(60);
    let with_grace = ClaimView { pool: Some(Arc::new(graced.into_pool())), ..view() };
    assert_eq!(end(plan(&c, &with_grace, &facts())), End::Finish(Next::After(Duration::from_millis(50_050))));
    let mut released = c.clone();
    released.release_finalizer_index = None;
    assert_eq!(end(plan(&released, &view(), &facts())), End::Finish(Next::AwaitChange));
    let late = with_ipaddress(view(), &released);
    assert_eq!(end(plan(&released, &late, &facts())), End::Release, "a late IPAddress of its name is released too");
}

#[test]
fn the_ipaddress_of_the_claims_name_is_adopted_repaired_or_let_go() {
    let c = claim("a");
    let found = with_ipaddress(view(), &c);
    assert_eq!(plan(&c, &found, &facts()), Plan { step: Step::End(End::Adopt { repair: false }), stops_waiting: true });
    let mut unprotected = found.clone();
    unprotected.record.as_mut().expect("recorded").protected = false;
    assert_eq!(end(plan(&c, &unprotected, &facts())), End::Adopt { repair: true });
    let mut of_another_pool = found.clone();
    of_another_pool.record.as_mut().expect("recorded").pool = PoolKey::new(pool_key().kind, "ns", "other").shared();
    let elsewhere = plan(&c, &of_another_pool, &facts());
    assert!(matches!(elsewhere.step, Step::End(End::BelongsElsewhere { .. })), "{elsewhere:?}");
    assert!(!elsewhere.stops_waiting, "it waits for the IPAddress of its name");
    let mut being_deleted = found.clone();
    being_deleted.record.as_mut().expect("recorded").deleting = true;
    let judged = found.record.as_ref().and_then(|r| r.uid);
    assert_eq!(end(plan(&c, &being_deleted, &facts())), End::LetGo { judged, why: LetGo::Deleting });
    assert_eq!(end(plan(&bound(c.clone()), &being_deleted, &facts())), End::Adopt { repair: false }, "its machine's");
    let duplicate = ClaimView { duplicate: a_duplicate(), ..found.clone() };
    assert_eq!(end(plan(&c, &duplicate, &facts())), End::LetGo { judged, why: LetGo::Duplicate });
    let mut told_of_another = bound(c.clone());
    told_of_another.bound_address = "10.0.0.7".parse().ok();
    assert_eq!(end(plan(&told_of_another, &found, &facts())), End::LetGo { judged, why: LetGo::Deleting }, "late");
}

#[test]
fn a_duplicate_that_may_be_the_machines_waits_for_the_others_to_go() {
    let c = claim("a");
    let found = ClaimView { duplicate: a_duplicate(), ..with_ipaddress(view(), &c) };
    let orphans = ClaimView { others_orphaned: true, ..found.clone() };
    let End::Say { reason, then, .. } = end(plan(&c, &orphans, &facts())) else { panic!("waits") };
    assert_eq!((reason, then), (ClaimReason::WaitingForIPAddress, Next::After(Duration::from_secs(30))));
    let restored = ClaimView { restored_one_wins: true, ..found.clone() };
    assert_eq!(reason_of(&end(plan(&c, &restored, &facts()))), ClaimReason::WaitingForIPAddress);
    let moved = ClaimView { moved_one_wins: true, moved_one_waits: true, ..found.clone() };
    assert_eq!(reason_of(&end(plan(&c, &moved, &facts()))), ClaimReason::WaitingForIPAddress);
    let moved_alone = ClaimView { moved_one_wins: true, ..found };
    assert_eq!(end(plan(&c, &moved_alone, &facts())), End::Adopt { repair: false });
}

#[test]
fn one_left_behind_by_a_move_goes_only_once_its_address_is_recorded_as_moved_away() {
    let c = claim("a");
    let left = ClaimView { left_behind: true, moved_away_unwritten: true, ..with_ipaddress(view(), &c) };
    assert_eq!(end(plan(&c, &left, &facts())), End::Finish(Next::After(Duration::from_secs(1))));
    let no_room = ClaimView { moved_away_no_room: true, ..left.clone() };
    let End::Say { reason, then, .. } = end(plan(&c, &no_room, &facts())) else { panic!("said") };
    assert_eq!((reason, then), (ClaimReason::AllocationFailed, Next::After(RECHECK)));
    let written = ClaimView { moved_away_unwritten: false, ..left.clone() };
    let judged = left.record.as_ref().and_then(|r| r.uid);
    assert_eq!(end(plan(&c, &written, &facts())), End::LetGoLeftBehind { judged });
    let mut deleted_by_hand = left;
    deleted_by_hand.record.as_mut().expect("recorded").deleting = true;
    assert_eq!(end(plan(&c, &deleted_by_hand, &facts())), End::LetGoLeftBehind { judged }, "of the pool known");
}

#[test]
fn the_ipaddress_a_create_made_is_bound_unless_its_address_was_not_handed_out_to_an_unbound_claim() {
    let unbound = claim("a");
    let in_range = with_ipaddress(view(), &unbound);
    assert_eq!(created(&unbound, &in_range), Created::Bind);
    // The pool was edited while the create was in flight: withdrawn, unless a paused Cluster keeps it for a move.
    let out_of_range = ClaimView { out_of_range: true, ..in_range.clone() };
    assert_eq!(created(&unbound, &out_of_range), Created::Withdraw { unless_paused: true });
    // Relabelled for another shard's manager meanwhile, which cannot see our hold.
    let elsewhere = ClaimView { served: Served::Elsewhere, ..in_range.clone() };
    assert_eq!(created(&unbound, &elsewhere), Created::Withdraw { unless_paused: false });
    // A bound claim making its IPAddress again keeps its machine's address either way.
    let machines = bound(claim("a"));
    assert_eq!(created(&machines, &out_of_range), Created::Bind);
    assert_eq!(created(&machines, &elsewhere), Created::Bind);
}

#[test]
fn a_refused_create_keeps_the_hold_only_of_the_address_its_claim_is_bound_to() {
    assert!(!refused_keeps_the_hold(&claim("a"), address()), "an unbound claim's hold goes");
    assert!(refused_keeps_the_hold(&bound(claim("a")), address()), "its machine's address");
    let another: IpAddr = "10.0.0.2".parse().expect("an address");
    assert!(!refused_keeps_the_hold(&bound(claim("a")), another), "bound to another address, this one is no machine's");
}

/// The release deletes the IPAddress of the claim's name only when it is ours and this claim's: made for it, or,
/// while the claim lives with our finalizer, for an earlier claim of its name; it leaves alone what a new claim of
/// the name adopted, what another provider made, and what a move left behind (the orphan release's).
#[test]
fn a_release_deletes_only_our_ipaddress_of_this_claim_and_leaves_what_a_move_left_behind() {
    let a = deleted(claim("a"));
    let nothing_recorded = view();
    let own = ip_address("a", ADDRESS, &a);
    assert_eq!(release_of(&a, &nothing_recorded, None, false), Release::NoneExists);
    assert_eq!(release_of(&a, &nothing_recorded, Some(&own), false), Release::Delete);
    assert_eq!(release_of(&a, &nothing_recorded, Some(&own), true), Release::Delete, "made for it");
    // Made for an earlier claim of the name.
    let earlier = Claim { uid: crate::compact::UidText::of("00000000-0000-0000-0000-00000000e0e0"), ..claim("a") };
    let earlier_ones = ip_address("a", ADDRESS, &earlier);
    assert!(release_reads_the_claim(&a, &earlier_ones) && !release_reads_the_claim(&a, &own));
    assert_eq!(release_of(&a, &nothing_recorded, Some(&earlier_ones), false), Release::Delete, "this claim lives");
    assert_eq!(release_of(&a, &nothing_recorded, Some(&earlier_ones), true), Release::NotMadeForIt, "adopted");
    let released = Claim { release_finalizer_index: None, ..a.clone() };
    assert_eq!(release_of(&released, &nothing_recorded, Some(&earlier_ones), false), Release::NotMadeForIt);
    // Another provider's.
    let mut foreign = own.clone();
    foreign.spec.pool_ref.api_group = Some("ipam.example.com".to_owned());
    assert_eq!(release_of(&a, &nothing_recorded, Some(&foreign), false), Release::NotOurs);
    // Left behind in a global pool by the move of an earlier claim of the name, as recorded.
    let global = PoolKey::new(crate::api::PoolKind::GlobalInClusterIPPool, "", "g");
    let mut left = ip_address("a", ADDRESS, &earlier);
    left.spec.pool_ref.kind = "GlobalInClusterIPPool".to_owned();
    left.spec.pool_ref.name = "g".to_owned();
    left.metadata.annotations =
        Some([(MOVED_AWAY_ANNOTATION.to_owned(), crate::api::MOVED_AWAY_MARK.to_owned())].into());
    let in_global = ClaimView { pool_key: global, record: AddressRecord::of(&left), ..view() };
    assert_eq!(release_of(&a, &in_global, Some(&left), false), Release::LeftBehind);
    let unrecorded = ClaimView { record: None, ..in_global.clone() };
    assert_eq!(release_of(&a, &unrecorded, Some(&left), false), Release::Delete, "not the object recorded");
}

#[test]
fn a_claim_waiting_for_its_cluster_says_so_settles_what_is_no_machines_and_ends_a_kept_reservation() {
    let mut c = claim("a");
    c.cluster = Some(intern("demo"));
    let waiting = plan(&c, &view(), &facts());
    assert!(waiting.stops_waiting);
    assert_eq!(reason_of(&end(waiting)), ClaimReason::WaitingForCluster);
    let paused = ClaimView { cluster_paused: Some(true), ..view() };
    assert_eq!(reason_of(&end(plan(&c, &paused, &facts()))), ClaimReason::ClusterPaused);
    // An uncertain create of an unbound claim: read live, then settled, unless our status write bound it meanwhile.
    let uncertain = ClaimView { holds_unconfirmed: true, held: Some(Held::Ip(Some(address()))), ..paused.clone() };
    assert_eq!(plan(&c, &uncertain, &facts()).step, Step::ReadClaim);
    let read = Facts { live: Some(Some(&c)), ..facts() };
    assert_eq!(plan(&c, &uncertain, &read).step, Step::SettleUncertainCreate { then: None });
    let bound_live = bound(c.clone());
    let read = Facts { live: Some(Some(&bound_live)), ..facts() };
    assert_eq!(reason_of(&end(plan(&c, &uncertain, &read))), ClaimReason::ClusterPaused);
    // Its pool going: settled without a read.
    let going = ClaimView { pool: Some(deleting_pool()), ..uncertain };
    assert_eq!(plan(&c, &going, &facts()).step, Step::SettleUncertainCreate { then: None });
    // Bound to a reserved address that came back with it: read live, the reservation ends, then nothing is said.
    let b = bound(c);
    let reserved = ClaimView { holds_reserved: true, ..with_ipaddress(paused, &b) };
    assert_eq!(plan(&b, &reserved, &facts()).step, Step::ReadClaim);
    let read = Facts { live: Some(Some(&b)), ..facts() };
    assert_eq!(plan(&b, &reserved, &read).step, Step::BoundBack(Held::Ip(Some(address()))));
    let mut moving = b.clone();
    moving.moving_away = true;
    let read_moving = Facts { live: Some(Some(&moving)), ..facts() };
    assert_eq!(end(plan(&b, &reserved, &read_moving)), End::Finish(Next::AwaitChange), "a move under way keeps it");
    let after = Facts { bound_back: true, ..facts() };
    assert_eq!(end(plan(&b, &reserved, &after)), End::Finish(Next::AwaitChange));
    // Bound, its condition not Ready though its IPAddress holds the address: said Ready again.
    let mut not_ready = b;
    not_ready.ready = Some(ready(false));
    let End::Say { reason, binds, .. } = end(plan(&not_ready, &reserved, &after)) else { panic!("said") };
    assert_eq!((reason, binds), (ClaimReason::Allocated, true));
}

/// A claim and its views, from a generator's choices: any combination the fields allow, reachable or not.
#[derive(Clone, Debug)]
struct Case {
    claim: Claim,
    view: ClaimView,
    /// The view after the run's first write: the index moves on while a write is awaited (a pause, a pool edited or
    /// relabelled, an IPAddress of the name seen).
    later: ClaimView,
    /// What a live read of the claim finds: as cached, gone, or bound (to `ADDRESS`).
    live: u8,
    /// Whether a settled create leaves the hold unconfirmed still.
    stays_unconfirmed: bool,
}

fn claim_of(c: [bool; 8]) -> Claim {
    let mut claim = claim("a");
    claim.paused = c[0];
    claim.cluster = c[1].then(|| intern("demo"));
    claim.release_finalizer_index = c[2].then_some(0);
    if c[3] {
        claim = bound(claim);
    }
    if c[4] {
        claim.bound_address = "10.0.0.7".parse().ok();
    }
    if c[5] {
        claim = deleted(claim);
    }
    claim.moving_away = c[6];
    claim.restored = c[7];
    claim.created = u32::try_from(NOW - 20).expect("in range");
    claim
}

/// A view from `v`; `rare` makes the duplicate's winners and orphans rarer than the rest, so that the plain duplicate
/// is met often.
fn view_of(v: [bool; 16], rare: [bool; 4], served: u8, claim: &Claim) -> ClaimView {
    let mut view = if v[0] { with_ipaddress(view(), claim) } else { view() };
    if let Some(record) = view.record.as_mut() {
        record.deleting = v[1];
        record.protected = v[2];
    }
    view.pool = match (v[3], v[4]) {
        (false, _) => None,
        (true, false) => view.pool,
        (true, true) => Some(deleting_pool()),
    };
    view.cluster_paused = v[5].then_some(v[6]);
    view.duplicate = if v[7] { a_duplicate() } else { None };
    view.others_orphaned = v[8] && rare[0];
    view.restored_one_wins = v[9] && rare[1];
    view.moved_one_wins = v[10] && rare[2];
    view.moved_one_waits = v[10] && rare[2] && v[11];
    view.holds_reserved = v[12];
    // `State::left_behind_for` never says it of a claim bound to the IPAddress of its name.
    view.left_behind = v[13] && claim.address_ref().is_none();
    view.moved_away_unwritten = v[14];
    view.out_of_range = v[15] && v[13];
    view.holds_unconfirmed = v[15];
    if view.held.is_none() && v[15] {
        view.held = Some(Held::Ip(Some(address())));
    }
    view.served = match served {
        0 | 1 => Served::Here,
        2 => Served::Elsewhere,
        _ => Served::Nowhere { pool_shard: intern("blue"), claim_shard: None },
    };
    view
}

fn case() -> impl Strategy<Value = Case> {
    let views = (any::<[bool; 16]>(), any::<[bool; 4]>(), 0u8..4);
    (any::<[bool; 8]>(), views.clone(), views, 0u8..3).prop_map(
        |(c, (v, rare, served), (w, rare_later, served_later), live)| {
            let claim = claim_of(c);
            let view = view_of(v, rare, served, &claim);
            let later = view_of(w, rare_later, served_later, &claim);
            Case { claim, view, later, live, stays_unconfirmed: v[2] }
        },
    )
}

/// Runs `case` as the executor would, with the index's answers modelled: the steps taken, the one that ends it, and
/// the claim and view it was decided on.
fn run(case: &Case) -> (Vec<Step>, Option<End>, Claim, ClaimView) {
    let mut claim = case.claim.clone();
    let mut view = case.view.clone();
    let live_claim = match case.live {
        0 => Some(claim.clone()),
        1 => None,
        _ => Some(bound(claim.clone())),
    };
    let (mut read, mut settled, mut bound_back) = (false, false, false);
    let mut steps = Vec::new();
    for _ in 0..MAX_STEPS {
        let facts = Facts { live: read.then_some(live_claim.as_ref()), settled, bound_back, ..facts() };
        let step = plan(&claim, &view, &facts).step;
        steps.push(step.clone());
        match step {
            Step::ReadClaim => {
                read = true;
                continue;
            }
            Step::AddFinalizer => claim.release_finalizer_index = Some(0),
            Step::SettleUncertainCreate { .. } => settled = true,
            Step::BoundBack(_) => bound_back = true,
            Step::End(end) => return (steps, Some(end), claim, view),
        }
        // The write awaited, the index moved on.
        view = case.later.clone();
        if settled {
            view.holds_unconfirmed &= case.stays_unconfirmed;
        }
        if bound_back {
            view.holds_reserved = false;
        }
        read = false;
    }
    (steps, None, claim, view)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16384, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn every_run_ends_within_its_bound_and_never_lets_go_of_what_a_live_bound_claim_is_bound_to(case in case()) {
        let (steps, end, claim, view) = run(&case);
        prop_assert!(end.is_some(), "no end after {} steps: {steps:?}", MAX_STEPS);
        let bound_to_it = claim.address_ref() == Some(&*claim.key.name)
            && claim.deletion_timestamp.is_none()
            && view.record.as_ref().is_some_and(|r| *r.pool == view.pool_key)
            && told_of(&claim, view.held);
        if bound_to_it {
            prop_assert!(
                !matches!(end, Some(End::LetGo { .. } | End::LetGoLeftBehind { .. } | End::Release)),
                "{end:?} after {steps:?}"
            );
        }
        // A step that does not end the run is taken once, but for live reads after each write.
        for once in [Step::AddFinalizer, Step::SettleUncertainCreate { then: None }] {
            prop_assert!(steps.iter().filter(|s| **s == once).count() <= 1, "{steps:?}");
        }
    }
}
