use super::*;
use crate::api::PoolKind;
use crate::capi::IpAddressSpec;

/// What the simulation and the tests read of the registry.
impl Registry {
    /// Whether every pool's allocator counts as many addresses in use as it has holders (the simulation checks it
    /// after every step).
    pub fn check_consistency(&self) -> Result<(), String> {
        for (key, state) in &self.pools {
            let used = state.counts().used;
            if state.allocator.is_some() && used != state.holders.len() as i64 {
                let holders: Vec<String> = state.holders.iter().map(|(k, h)| format!("{k}={}", h.held)).collect();
                return Err(format!("{key} counts {used} in use but has {} holders: {holders:?}", state.holders.len()));
            }
            state.holders.check_counts().map_err(|e| format!("{key}: {e}"))?;
            let quota_waiting = state.quota_waiters.values().flatten();
            if let Some(both) =
                quota_waiting.into_iter().find(|c| state.waiters.contains(c) || state.requesters.contains(c))
            {
                return Err(format!("{key}: {both} waits for its quota and for an address at once"));
            }
        }
        Ok(())
    }

    /// Every holder of a pool: the IPAddress (or reservation), what it holds, and whether it is confirmed.
    pub fn holders(&self, key: &PoolKey) -> Vec<(ObjectKey, Held, bool)> {
        let Some(state) = self.pools.get(key) else { return Vec::new() };
        let mut holders: Vec<(ObjectKey, Held, bool)> =
            state.holders.iter().map(|(k, h)| (k.clone(), h.held, h.confirmed)).collect();
        holders.sort_by(|a, b| a.0.cmp(&b.0));
        holders
    }
}
use serde_json::json;

/// A pool spec from its JSON, for a pool of `kind`.
pub(crate) fn spec(kind: PoolKind, value: serde_json::Value) -> PoolSpec {
    if kind.is_prefix_pool() {
        PoolSpec::Prefix(serde_json::from_value(value).expect("a prefix pool spec"))
    } else {
        PoolSpec::Ip(serde_json::from_value(value).expect("an IP pool spec"))
    }
}

fn pool() -> PoolKey {
    PoolKey::new(PoolKind::InClusterIPPool, "ns", "p")
}

fn obj(n: &str) -> ObjectKey {
    ObjectKey::new("ns", n)
}

#[test]
fn holds_are_taken_before_the_create_and_kept_on_retry() {
    let mut r = Registry::new();
    r.apply_spec(
        &pool(),
        &spec(pool().kind, json!({"addresses": ["10.0.0.1-10.0.0.2"], "prefix": 24, "gateway": "10.0.0.254"})),
    );
    let a = r.allocate(&pool(), &obj("a"), None, &Claimant::default()).unwrap();
    assert_eq!(a.address.to_string(), "10.0.0.1");
    assert_eq!((a.prefix, a.gateway.as_deref()), (24, Some("10.0.0.254")));
    // A retry of the same claim gets the same address; another claim gets the next.
    assert_eq!(r.allocate(&pool(), &obj("a"), None, &Claimant::default()).unwrap().address.to_string(), "10.0.0.1");
    assert_eq!(r.allocate(&pool(), &obj("b"), None, &Claimant::default()).unwrap().address.to_string(), "10.0.0.2");
    assert!(matches!(r.allocate(&pool(), &obj("c"), None, &Claimant::default()), Err(AllocateError::Exhausted { .. })));
    r.wait(&pool(), &obj("c"));
    // The watch confirms a; b's create is rejected: b's address is free again and c is woken.
    r.record(&pool(), &obj("a"), Held::Ip(Some("10.0.0.1".parse().unwrap())), None);
    assert_eq!(r.abandon(&pool(), &obj("b")), vec![obj("c")]);
    assert_eq!(r.allocate(&pool(), &obj("c"), None, &Claimant::default()).unwrap().address.to_string(), "10.0.0.2");
    // A confirmed hold is not abandoned.
    r.confirm(&pool(), &obj("c"));
    assert!(r.abandon(&pool(), &obj("c")).is_empty());
    assert_eq!(r.used(&pool()), 2);
}

/// An IPAddress written by hand with an IPv6 zone holds its address, as the Go provider reads it: it was counted
/// as unparsable, and its address (IP pools) or child prefix (prefix pools) handed out again.
#[test]
fn an_ipaddress_written_with_a_zone_holds_its_address() {
    let mut r = Registry::new();
    let key = PoolKey::new(PoolKind::InClusterIPPool, "ns", "v6");
    r.apply_spec(&key, &spec(key.kind, json!({"addresses": ["fd00::1-fd00::2"], "prefix": 64})));
    let zoned = IpAddressSpec { address: "fd00::1%eth0".into(), prefix: Some(64), ..Default::default() };
    assert_eq!(Held::of(key.kind, &zoned), Held::Ip(Some("fd00::1".parse().unwrap())));
    r.record(&key, &obj("by-hand"), Held::of(key.kind, &zoned), None);
    assert_eq!(r.allocate(&key, &obj("a"), None, &Claimant::default()).unwrap().address.to_string(), "fd00::2");
    assert_eq!(r.counts(&key).0.out_of_range, 0);

    let key = PoolKey::new(PoolKind::InClusterPrefixPool, "ns", "prefixes");
    r.apply_spec(&key, &spec(key.kind, json!({"prefixes": ["fd00::/63"], "allocationPrefixLength": 64})));
    let zoned = IpAddressSpec { address: "fd00::%eth0".into(), prefix: Some(64), ..Default::default() };
    r.record(&key, &obj("by-hand"), Held::of(key.kind, &zoned), None);
    assert_eq!(r.allocate(&key, &obj("a"), None, &Claimant::default()).unwrap().address.to_string(), "fd00:0:0:1::");
    assert!(matches!(r.allocate(&key, &obj("b"), None, &Claimant::default()), Err(AllocateError::Exhausted { .. })));
}

/// A requested address is read as the webhook reads it (which admits a zone in `preAllocations`): a claim the
/// pool was admitted with must not wait for ever on "not an IP address".
#[test]
fn a_requested_address_with_a_zone_is_the_address() {
    let mut r = Registry::new();
    let key = PoolKey::new(PoolKind::InClusterIPPool, "ns", "v6");
    r.apply_spec(&key, &spec(key.kind, json!({"addresses": ["fd00::1-fd00::9"], "prefix": 64})));
    assert_eq!(
        r.allocate(&key, &obj("a"), Some("fd00::5%eth0"), &Claimant::default()).unwrap().address.to_string(),
        "fd00::5"
    );
    assert!(matches!(
        r.allocate(&key, &obj("b"), Some("fd00::5"), &Claimant::default()),
        Err(AllocateError::Requested { .. })
    ));
}

#[test]
fn addresses_recorded_before_the_pool_spec_count_once_it_arrives() {
    let mut r = Registry::new();
    r.record(&pool(), &obj("x"), Held::Ip(Some("10.0.0.1".parse().unwrap())), None);
    assert!(matches!(r.allocate(&pool(), &obj("y"), None, &Claimant::default()), Err(AllocateError::Unknown { .. })));
    r.apply_spec(&pool(), &spec(pool().kind, json!({"addresses": ["10.0.0.1-10.0.0.3"], "prefix": 24})));
    assert_eq!(r.allocate(&pool(), &obj("y"), None, &Claimant::default()).unwrap().address.to_string(), "10.0.0.2");
    let (c, err) = r.counts(&pool());
    assert_eq!((c.total, c.used, c.free, err), (3, 2, 1, None));
}

#[test]
fn an_invalid_spec_allocates_nothing_and_counts_everything_out_of_range() {
    let mut r = Registry::new();
    r.record(&pool(), &obj("x"), Held::Ip(Some("10.0.0.1".parse().unwrap())), None);
    r.apply_spec(&pool(), &spec(pool().kind, json!({"addresses": ["nope"], "prefix": 24})));
    assert!(matches!(
        r.allocate(&pool(), &obj("y"), None, &Claimant::default()),
        Err(AllocateError::InvalidPool { .. })
    ));
    let (c, err) = r.counts(&pool());
    assert_eq!((c.total, c.used, c.out_of_range), (0, 1, 1));
    assert!(err.is_some());
}

#[test]
fn a_pool_edit_wakes_every_waiter_when_it_frees_space() {
    let mut r = Registry::new();
    r.apply_spec(&pool(), &spec(pool().kind, json!({"addresses": ["10.0.0.1"], "prefix": 24})));
    r.allocate(&pool(), &obj("a"), None, &Claimant::default()).unwrap();
    r.wait(&pool(), &obj("b"));
    r.wait(&pool(), &obj("c"));
    assert_eq!(
        r.apply_spec(&pool(), &spec(pool().kind, json!({"addresses": ["10.0.0.1-10.0.0.3"], "prefix": 24}))),
        vec![obj("b"), obj("c")]
    );
}

#[test]
fn requested_addresses() {
    let mut r = Registry::new();
    r.apply_spec(
        &pool(),
        &spec(
            pool().kind,
            json!({"addresses": ["10.0.0.1-10.0.0.5"], "prefix": 24, "excludedAddresses": ["10.0.0.4"]}),
        ),
    );
    assert_eq!(
        r.allocate(&pool(), &obj("a"), Some("10.0.0.3"), &Claimant::default()).unwrap().address.to_string(),
        "10.0.0.3"
    );
    let err = r.allocate(&pool(), &obj("b"), Some("10.0.0.3"), &Claimant::default()).unwrap_err().to_string();
    assert!(err.contains("already allocated"), "{err}");
    let err = r.allocate(&pool(), &obj("b"), Some("10.0.0.4"), &Claimant::default()).unwrap_err().to_string();
    assert!(err.contains("excludedAddresses"), "{err}");
    let err = r.allocate(&pool(), &obj("b"), Some("10.0.9.9"), &Claimant::default()).unwrap_err().to_string();
    assert!(err.contains("not in the pool's addresses"), "{err}");
    assert_eq!(r.allocate(&pool(), &obj("b"), None, &Claimant::default()).unwrap().address.to_string(), "10.0.0.1");
}

#[test]
fn an_address_held_twice_is_reported_and_stays_in_use_until_both_are_released() {
    let mut r = Registry::new();
    r.apply_spec(&pool(), &spec(pool().kind, json!({"addresses": ["10.0.0.1-10.0.0.3"], "prefix": 24})));
    let ip = |s: &str| Held::Ip(Some(s.parse().unwrap()));
    assert_eq!(r.record(&pool(), &obj("a"), ip("10.0.0.1"), None), None);
    // Seen again (a resync): not a duplicate.
    assert_eq!(r.record(&pool(), &obj("a"), ip("10.0.0.1"), None), None);
    let d = r.record(&pool(), &obj("b"), ip("10.0.0.1"), None).expect("a duplicate");
    assert_eq!(d.holders, vec![obj("a"), obj("b")]);
    assert_eq!(d.to_string(), "10.0.0.1 is held by more than one IPAddress: ns/a, ns/b");
    let d = r.record(&pool(), &obj("c"), ip("10.0.0.1"), None).expect("a third holder");
    assert_eq!(d.holders, vec![obj("a"), obj("b"), obj("c")]);
    assert_eq!(r.duplicates(&pool()).len(), 1);
    assert!(r.duplicate_of(&pool(), &obj("b")).is_some() && r.duplicate_of(&pool(), &obj("x")).is_none());
    // Releasing one holder keeps the address in use: the next allocation does not hand it out a third time. The
    // remaining holders are woken (their claims' conditions name the duplicate).
    assert_eq!(r.forget(&pool(), &obj("a")), vec![obj("b"), obj("c")]);
    assert_eq!(r.forget(&pool(), &obj("b")), vec![obj("c")]);
    assert!(r.duplicates(&pool()).is_empty(), "one holder left: no longer a duplicate");
    assert_eq!(r.allocate(&pool(), &obj("d"), None, &Claimant::default()).unwrap().address.to_string(), "10.0.0.2");
    r.forget(&pool(), &obj("c"));
    assert_eq!(r.allocate(&pool(), &obj("e"), None, &Claimant::default()).unwrap().address.to_string(), "10.0.0.1");
}

#[test]
fn duplicates_recorded_before_the_pool_spec_are_found_when_it_arrives() {
    let mut r = Registry::new();
    let ip = |s: &str| Held::Ip(Some(s.parse().unwrap()));
    assert_eq!(r.record(&pool(), &obj("a"), ip("10.0.0.1"), None), None);
    assert_eq!(r.record(&pool(), &obj("b"), ip("10.0.0.1"), None), None, "unknown before the spec");
    r.apply_spec(&pool(), &spec(pool().kind, json!({"addresses": ["10.0.0.1-10.0.0.3"], "prefix": 24})));
    let found = r.duplicates(&pool());
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].holders, vec![obj("a"), obj("b")]);
}

/// Soak seed 120232318: a pool deleted while an IPAddress of it stays; a deposed leader's late create of the same
/// address lands. No spec will come to find the duplicate: it is found as it is recorded.
#[test]
fn a_duplicate_recorded_after_the_pool_was_deleted_is_found_at_once() {
    let mut r = Registry::new();
    let ip = |s: &str| Held::Ip(Some(s.parse().unwrap()));
    r.apply_spec(&pool(), &spec(pool().kind, json!({"addresses": ["10.0.0.1-10.0.0.3"], "prefix": 24})));
    assert_eq!(r.record(&pool(), &obj("a"), ip("10.0.0.1"), None), None);
    r.remove_spec(&pool());
    let found = r.record(&pool(), &obj("b"), ip("10.0.0.1"), None).expect("a duplicate");
    assert_eq!(found.holders, vec![obj("a"), obj("b")]);
    assert_eq!(r.record(&pool(), &obj("c"), ip("10.0.0.2"), None), None, "another address is no duplicate");
}

/// Soak seed 430208541: the pool was deleted before this process listed (no spec ever came, and no deletion was
/// seen); a bound claim's IPAddress and a deposed leader's late create of the same address are recorded in it. Once
/// every watch listed, the duplicate is found, among those recorded before and as the next ones are recorded.
#[test]
fn a_duplicate_in_a_pool_gone_before_the_process_listed_is_found_once_it_listed() {
    let mut r = Registry::new();
    let ip = |s: &str| Held::Ip(Some(s.parse().unwrap()));
    assert_eq!(r.record(&pool(), &obj("a"), ip("10.0.0.1"), None), None);
    assert_eq!(r.record(&pool(), &obj("b"), ip("10.0.0.1"), None), None, "unknown before every watch listed");
    let found = r.synced();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].holders, vec![obj("a"), obj("b")]);
    let other = PoolKey::new(pool().kind, &pool().namespace, "gone-too");
    assert_eq!(r.record(&other, &obj("c"), ip("10.0.0.2"), None), None);
    let late = r.record(&other, &obj("d"), ip("10.0.0.2"), None).expect("a duplicate, recorded after the listing");
    assert_eq!(late.holders, vec![obj("c"), obj("d")]);
    // A pool whose spec comes later (created since) is allocated from as ever.
    r.apply_spec(&other, &spec(other.kind, json!({"addresses": ["10.0.0.1-10.0.0.3"], "prefix": 24})));
    assert_eq!(r.allocate(&other, &obj("e"), None, &Claimant::default()).unwrap().address.to_string(), "10.0.0.1");
}

#[test]
fn prefix_pools() {
    let mut r = Registry::new();
    let key = PoolKey::new(PoolKind::GlobalInClusterPrefixPool, "ignored", "pp");
    assert_eq!(&*key.namespace, "");
    r.apply_spec(
        &key,
        &spec(key.kind, json!({"prefixes": ["fd00::/62"], "allocationPrefixLength": 64, "gateway": "fd00::1"})),
    );
    let a = r.allocate(&key, &obj("a"), None, &Claimant::default()).unwrap();
    assert_eq!((a.address.to_string(), a.prefix, a.gateway.as_deref()), ("fd00::".into(), 64, Some("fd00::1")));
    let spec = IpAddressSpec { address: "fd00:0:0:1::".into(), prefix: Some(64), ..Default::default() };
    r.record(&key, &obj("b"), Held::of(key.kind, &spec), None);
    assert_eq!(r.allocate(&key, &obj("c"), None, &Claimant::default()).unwrap().address.to_string(), "fd00:0:0:2::");
}

#[test]
fn a_moved_away_address_stays_held_as_a_reservation_until_it_comes_back() {
    let mut r = Registry::new();
    let key = PoolKey::new(PoolKind::GlobalInClusterIPPool, "", "g");
    r.apply_spec(&key, &spec(key.kind, json!({"addresses": ["10.0.0.1-10.0.0.2"], "prefix": 24})));
    let ip = Held::Ip(Some("10.0.0.1".parse().unwrap()));
    r.record(&key, &obj("a"), ip, None);
    // The IPAddress moves away: its hold becomes the reservation, never free in between.
    assert_eq!(r.transfer(&key, &obj("a"), &reservation_key(ip), None), Some(ip));
    assert_eq!(r.held_by(&key, &obj("a")), None);
    assert_eq!(r.reservations(&key), [ip]);
    assert_eq!(r.used(&key), 0, "a reservation does not hold the pool's finalizer");
    assert_eq!(r.counts(&key).0.used, 1, "but it counts as used");
    assert_eq!(r.allocate(&key, &obj("b"), None, &Claimant::default()).unwrap().address.to_string(), "10.0.0.2");
    assert!(matches!(r.allocate(&key, &obj("c"), None, &Claimant::default()), Err(AllocateError::Exhausted { .. })));
    // Reserving what is held does nothing; an unknown key transfers nothing.
    assert!(!r.reserve(&key, ip));
    assert_eq!(r.transfer(&key, &obj("nobody"), &obj("x"), None), None);
    // It comes back under a new IPAddress: no duplicate, no reservation left.
    assert_eq!(r.transfer(&key, &reservation_key(ip), &obj("a2"), None), Some(ip));
    assert_eq!(r.record(&key, &obj("a2"), ip, None), None);
    assert!(r.reservations(&key).is_empty());
    assert!(r.duplicates(&key).is_empty());
    // A reservation from the pool's annotation alone, released again.
    r.forget(&key, &obj("a2"));
    assert!(r.reserve(&key, ip));
    assert_eq!(r.counts(&key).0.used, 2);
    r.forget(&key, &reservation_key(ip));
    assert_eq!(r.allocate(&key, &obj("c"), None, &Claimant::default()).unwrap().address.to_string(), "10.0.0.1");
}

fn ip(a: &str) -> Held {
    Held::Ip(Some(a.parse().unwrap()))
}

/// A full pool of one address held by `a`.
fn full_pool() -> Registry {
    let mut r = Registry::new();
    r.apply_spec(&pool(), &spec(pool().kind, json!({"addresses": ["10.0.0.1"], "prefix": 24})));
    r.record(&pool(), &obj("a"), ip("10.0.0.1"), None);
    r
}

#[test]
fn a_claim_wanting_a_held_address_never_takes_the_wake_an_exhausted_claim_waits_for() {
    let mut r = full_pool();
    // r asked for an address someone holds, then e found the pool exhausted.
    r.wait_for_requested(&pool(), &obj("r"));
    r.wait(&pool(), &obj("e"));
    // An address frees up: e is woken for it, and r too (it may be the one r asked for).
    assert_eq!(r.forget(&pool(), &obj("a")), vec![obj("e"), obj("r")]);
    // r did not get its address and waits again: no one else is woken, and e keeps its wake.
    r.wait_for_requested(&pool(), &obj("r"));
    assert!(r.take_woken().is_empty());
    assert_eq!(r.allocate(&pool(), &obj("e"), None, &Claimant::default()).unwrap().address.to_string(), "10.0.0.1");
}

#[test]
fn a_claim_that_waited_for_any_address_and_now_wants_a_held_one_leaves_the_waiters_queue() {
    let mut r = full_pool();
    r.wait(&pool(), &obj("w"));
    r.wait(&pool(), &obj("e"));
    // w's requested address is now one someone holds (an annotation, a pre-allocation added to the pool).
    r.wait_for_requested(&pool(), &obj("w"));
    assert_eq!(r.forget(&pool(), &obj("a")), vec![obj("e"), obj("w")]);
}

#[test]
fn a_woken_claim_that_stops_waiting_passes_its_wake_on_while_an_address_is_free() {
    let mut r = full_pool();
    r.wait(&pool(), &obj("paused"));
    r.wait(&pool(), &obj("e"));
    assert_eq!(r.forget(&pool(), &obj("a")), vec![obj("paused")]);
    // Its Cluster was paused meanwhile: it stops waiting without taking the address, and e is woken instead.
    r.stop_waiting(&pool(), &obj("paused"));
    assert_eq!(r.take_woken(), vec![obj("e")]);
    // Once the address is taken, stopping to wait wakes no one.
    r.wait(&pool(), &obj("f"));
    r.allocate(&pool(), &obj("e"), None, &Claimant::default()).unwrap();
    r.stop_waiting(&pool(), &obj("e"));
    assert!(r.take_woken().is_empty());
}

#[test]
fn an_address_freed_by_a_replaced_or_handed_over_hold_wakes_a_waiter() {
    let mut r = full_pool();
    r.wait(&pool(), &obj("e"));
    // The IPAddress a now shows an address outside the pool: 10.0.0.1 is free.
    r.record(&pool(), &obj("a"), ip("10.0.0.9"), None);
    assert_eq!(r.take_woken(), vec![obj("e")]);

    let mut r = full_pool();
    r.apply_spec(&pool(), &spec(pool().kind, json!({"addresses": ["10.0.0.1-10.0.0.2"], "prefix": 24})));
    r.record(&pool(), &obj("b"), ip("10.0.0.2"), None);
    r.wait(&pool(), &obj("e"));
    // a's hold is handed to b, whose own address is then free.
    assert_eq!(r.transfer(&pool(), &obj("a"), &obj("b"), None), Some(ip("10.0.0.1")));
    assert_eq!(r.take_woken(), vec![obj("e")]);
}

/// A read of the allocation path found that `spec.preAllocations` reserved nothing. A pinned address is Metal3's: held
/// for its claim whatever the order in which claims come, refused to any other that asks for it, and back to the pin
/// when the claim's IPAddress goes.
#[test]
fn a_pinned_address_is_reserved_for_its_claim_whatever_the_order() {
    let mut r = Registry::new();
    let pinned = |pins: serde_json::Value| {
        spec(pool().kind, json!({"addresses": ["10.0.0.10-10.0.0.12"], "prefix": 24, "preAllocations": pins}))
    };
    r.apply_spec(&pool(), &pinned(json!({"node-a": "10.0.0.10"})));
    // node-b comes first: it does not get the lowest address, which is node-a's.
    assert_eq!(
        r.allocate(&pool(), &obj("node-b"), None, &Claimant::default()).unwrap().address.to_string(),
        "10.0.0.11"
    );
    let err = r.allocate(&pool(), &obj("node-c"), Some("10.0.0.10"), &Claimant::default()).unwrap_err().to_string();
    assert!(err.contains("pins it to claim ns/node-a"), "{err}");
    assert_eq!(r.counts(&pool()).0.free, 1, "the pinned address is not free for others");
    assert_eq!(r.used(&pool()), 1, "a pin holds no pool finalizer");
    assert_eq!(
        r.allocate(&pool(), &obj("node-a"), None, &Claimant::default()).unwrap().address.to_string(),
        "10.0.0.10"
    );
    assert_eq!(
        r.allocate(&pool(), &obj("node-c"), None, &Claimant::default()).unwrap().address.to_string(),
        "10.0.0.12"
    );
    // node-a's create is refused: the address goes back to the pin, not to the pool.
    r.wait(&pool(), &obj("w"));
    assert!(r.abandon(&pool(), &obj("node-a")).is_empty(), "nothing is free: no waiter is woken");
    assert!(matches!(r.allocate(&pool(), &obj("w"), None, &Claimant::default()), Err(AllocateError::Exhausted { .. })));
    // Created and seen, then deleted: the same.
    r.allocate(&pool(), &obj("node-a"), None, &Claimant::default()).unwrap();
    r.record(&pool(), &obj("node-a"), ip("10.0.0.10"), None);
    r.forget(&pool(), &obj("node-a"));
    assert!(matches!(r.allocate(&pool(), &obj("w"), None, &Claimant::default()), Err(AllocateError::Exhausted { .. })));
    // The pin asks for one address and the claim's annotation another: that is refused, as in Metal3.
    let err = r.allocate(&pool(), &obj("node-a"), Some("10.0.0.12"), &Claimant::default()).unwrap_err().to_string();
    assert!(err.contains("pins 10.0.0.10 to this claim"), "{err}");
    // The pin is removed: its address is free, and the waiter is woken for it.
    assert_eq!(r.apply_spec(&pool(), &pinned(json!({}))), vec![obj("w")]);
    assert_eq!(r.allocate(&pool(), &obj("w"), None, &Claimant::default()).unwrap().address.to_string(), "10.0.0.10");
    r.check_consistency().unwrap();
}

/// A pin added over an address an IPAddress of another claim holds: that one keeps it (it may be in use), and the
/// pinned claim, refused meanwhile, is woken when the placeholder takes the address, even in a full pool.
#[test]
fn a_pin_over_an_address_in_use_waits_for_it_and_then_wakes_its_claim() {
    let mut r = full_pool();
    r.apply_spec(
        &pool(),
        &spec(pool().kind, json!({"addresses": ["10.0.0.1"], "prefix": 24, "preAllocations": {"p": "10.0.0.1"}})),
    );
    let err = r.allocate(&pool(), &obj("p"), None, &Claimant::default()).unwrap_err();
    assert!(matches!(err, AllocateError::Requested { .. }), "{err}");
    r.wait_for_requested(&pool(), &obj("p"));
    r.wait(&pool(), &obj("e"));
    assert_eq!(r.forget(&pool(), &obj("a")), vec![obj("p")], "the pinned claim, not the exhausted one");
    assert!(matches!(r.allocate(&pool(), &obj("e"), None, &Claimant::default()), Err(AllocateError::Exhausted { .. })));
    assert_eq!(r.allocate(&pool(), &obj("p"), None, &Claimant::default()).unwrap().address.to_string(), "10.0.0.1");
    r.check_consistency().unwrap();
}

/// A global pool pins by `<namespace>/<name>`: same-named claims of two namespaces do not compete for it.
#[test]
fn a_global_pool_pins_a_claim_of_one_namespace() {
    let mut r = Registry::new();
    let key = PoolKey::new(PoolKind::GlobalInClusterIPPool, "", "g");
    let pins = json!({"tenant-a/node": "10.0.0.1", "bare": "10.0.0.2"});
    r.apply_spec(
        &key,
        &spec(key.kind, json!({"addresses": ["10.0.0.1-10.0.0.4"], "prefix": 24, "preAllocations": pins})),
    );
    let node = |ns: &str| ObjectKey::new(ns, "node");
    assert_eq!(
        r.allocate(&key, &node("tenant-b"), None, &Claimant::default()).unwrap().address.to_string(),
        "10.0.0.3"
    );
    assert_eq!(
        r.allocate(&key, &node("tenant-a"), None, &Claimant::default()).unwrap().address.to_string(),
        "10.0.0.1"
    );
    // A bare name pins a claim of that name in any namespace: the first to come holds it, the second is told.
    assert_eq!(
        r.allocate(&key, &ObjectKey::new("x", "bare"), None, &Claimant::default()).unwrap().address.to_string(),
        "10.0.0.2"
    );
    let err = r.allocate(&key, &ObjectKey::new("y", "bare"), None, &Claimant::default()).unwrap_err();
    assert!(err.to_string().contains("already allocated"), "{err}");
}

/// Child prefixes that overlap with different lengths (a pool edited past the webhook, an
/// IPAddress made by hand) are a duplicate like two equal ones, so that the one no claim is bound to is withdrawn.
#[test]
fn prefixes_that_overlap_with_different_lengths_are_a_duplicate() {
    let mut r = Registry::new();
    let key = PoolKey::new(PoolKind::InClusterPrefixPool, "ns", "pp");
    r.apply_spec(&key, &spec(key.kind, json!({"prefixes": ["fd00::/62"], "allocationPrefixLength": 64})));
    let prefix = |a: &str, len: i64| {
        Held::of(key.kind, &IpAddressSpec { address: a.into(), prefix: Some(len), ..Default::default() })
    };
    assert_eq!(r.record(&key, &obj("a"), prefix("fd00::", 64), None), None);
    let d = r.record(&key, &obj("wide"), prefix("fd00::", 63), None).expect("a /63 over a /64 is a duplicate");
    assert_eq!(d.holders, [obj("a"), obj("wide")]);
    assert_eq!(d.held, prefix("fd00::", 63), "named by the widest hold");
    let d = r.record(&key, &obj("b"), prefix("fd00:0:0:1::", 64), None).expect("inside the /63 too");
    assert_eq!(d.holders, [obj("a"), obj("b"), obj("wide")]);
    assert_eq!(r.duplicate_of(&key, &obj("b")).map(|d| d.holders.len()), Some(3));
    assert_eq!(r.forget(&key, &obj("wide")), vec![obj("a"), obj("b")]);
    assert!(r.duplicates(&key).is_empty(), "the two /64s do not overlap each other");
    assert!(r.duplicate_of(&key, &obj("a")).is_none());
    r.check_consistency().unwrap();
}

/// Helper-103 F3: without a valid spec every hold counts as out of range; a hold the status leaves out (one no
/// IPAddress confirms) is left out of that count too, so the status says what a manager that never knew the hold
/// says, and the two do not rewrite each other's status until someone fixes the spec.
#[test]
fn without_a_valid_spec_a_hold_left_out_of_the_status_is_left_out_of_its_out_of_range_count_too() {
    let mut r = Registry::new();
    r.apply_spec(&pool(), &spec(pool().kind, json!({"addresses": ["10.0.0.1-10.0.0.2"], "prefix": 24})));
    r.record(&pool(), &obj("x"), Held::Ip(Some("10.0.0.1".parse().expect("ip"))), None);
    r.allocate(&pool(), &obj("y"), None, &Claimant::default()).expect("free");
    r.apply_spec(&pool(), &spec(pool().kind, json!({"addresses": ["nope"], "prefix": 24})));
    let c = r.status_counts(&pool(), |_| false, |_| false);
    assert_eq!((c.total, c.used, c.out_of_range, c.free), (0, 1, 1, 0), "what a manager that knows only x says");
}

/// Helper-104 G2: the duplicates a pool's status names leave out the holds no IPAddress confirms and those in doubt,
/// and what is left is grouped again: a wide prefix left out was all that tied two narrower ones, which do not
/// overlap each other, into one duplicate.
#[test]
fn duplicates_without_a_hold_are_grouped_again() {
    let mut r = Registry::new();
    let key = PoolKey::new(PoolKind::InClusterPrefixPool, "ns", "pp");
    r.apply_spec(&key, &spec(key.kind, json!({"prefixes": ["fd00::/62"], "allocationPrefixLength": 64})));
    let prefix = |a: &str, len: i64| {
        Held::of(key.kind, &IpAddressSpec { address: a.into(), prefix: Some(len), ..Default::default() })
    };
    r.record(&key, &obj("a"), prefix("fd00::", 64), None);
    r.record(&key, &obj("b"), prefix("fd00:0:0:1::", 64), None);
    r.record(&key, &obj("wide"), prefix("fd00::", 63), None);
    assert_eq!(r.duplicates_without(&key, |_| false).len(), 1, "one group of three");
    assert!(r.duplicates_without(&key, |k| *k == obj("wide")).is_empty(), "the two /64s do not overlap");
    r.record(&key, &obj("c"), prefix("fd00::", 64), None);
    let left = r.duplicates_without(&key, |k| *k == obj("wide"));
    assert_eq!(left.iter().map(|d| d.holders.clone()).collect::<Vec<_>>(), [vec![obj("a"), obj("c")]]);
    assert_eq!(left[0].held, prefix("fd00::", 64), "named by the widest hold left");
}

#[test]
fn an_address_of_a_later_subnet_carries_that_subnets_prefix_and_gateway_also_when_asked_for_again() {
    let mut r = Registry::new();
    let subnets = json!({
        "addresses": ["10.0.0.1"], "prefix": 24, "gateway": "10.0.0.254",
        "subnets": [
            {"addresses": ["10.0.1.1"], "prefix": 25, "gateway": "10.0.1.126"},
            {"addresses": ["10.0.2.1"], "prefix": 26}
        ]
    });
    r.apply_spec(&pool(), &spec(pool().kind, subnets));
    let got = |r: &mut Registry, n: &str| {
        let a = r.allocate(&pool(), &obj(n), None, &Claimant::default()).unwrap();
        (a.address.to_string(), a.prefix, a.gateway)
    };
    assert_eq!(got(&mut r, "a"), ("10.0.0.1".to_owned(), 24, Some("10.0.0.254".to_owned())));
    assert_eq!(got(&mut r, "b"), ("10.0.1.1".to_owned(), 25, Some("10.0.1.126".to_owned())));
    assert_eq!(got(&mut r, "c"), ("10.0.2.1".to_owned(), 26, None));
    // A retry (the hold is kept) and a requested address read their subnet too.
    assert_eq!(got(&mut r, "b"), ("10.0.1.1".to_owned(), 25, Some("10.0.1.126".to_owned())));
    r.forget(&pool(), &obj("b"));
    let asked = r.allocate(&pool(), &obj("d"), Some("10.0.1.1"), &Claimant::default()).unwrap();
    assert_eq!((asked.prefix, asked.gateway.as_deref()), (25, Some("10.0.1.126")));
}

/// helper-123 F1, helper-125 F1 (docs/testing.md, orders left): a hold whose subnet the spec lost (a pool made again by
/// GitOps from a manifest without it, while the claim's IPAddress is gone) keeps its address, counted out of range, and
/// its IPAddress made again carries the top-level prefix and gateway. Changing that is a decision, not an accident.
#[test]
fn a_hold_whose_subnet_the_spec_lost_keeps_its_address_with_the_top_level_prefix_and_gateway() {
    let mut r = Registry::new();
    let two = json!({
        "addresses": ["10.0.0.1"], "prefix": 24, "gateway": "10.0.0.254",
        "subnets": [{"addresses": ["10.0.1.1"], "prefix": 25, "gateway": "10.0.1.126"}]
    });
    r.apply_spec(&pool(), &spec(pool().kind, two));
    r.record(&pool(), &obj("a"), Held::Ip(Some("10.0.0.1".parse().unwrap())), None);
    r.record(&pool(), &obj("b"), Held::Ip(Some("10.0.1.1".parse().unwrap())), None);
    r.remove_spec(&pool());
    let one = json!({"addresses": ["10.0.0.1"], "prefix": 24, "gateway": "10.0.0.254"});
    r.apply_spec(&pool(), &spec(pool().kind, one));
    r.unconfirm(&pool(), &obj("b"));
    let again = r.allocate(&pool(), &obj("b"), None, &Claimant::default()).unwrap();
    assert_eq!(
        (again.address.to_string(), again.prefix, again.gateway.as_deref()),
        ("10.0.1.1".to_owned(), 24, Some("10.0.0.254"))
    );
    let (counts, _) = r.counts(&pool());
    assert_eq!((counts.total, counts.used, counts.free, counts.out_of_range), (1, 2, 0, 1));
}

/// A new leader's pool watch lists before its IPAddresses (helper-126): the LeastRecentlyReleased pool's guess of what
/// was released must wait for every IPAddress, or the address just released below the highest in use comes first.
#[test]
fn a_least_recently_released_pool_guesses_again_once_every_ipaddress_listed() {
    let mut r = Registry::new();
    let lrr = json!({"addresses": ["10.0.0.1-10.0.0.9"], "prefix": 24, "allocationStrategy": "LeastRecentlyReleased"});
    r.apply_spec(&pool(), &spec(pool().kind, lrr));
    for (name, address) in [("a", "10.0.0.1"), ("e", "10.0.0.5")] {
        r.record(&pool(), &obj(name), Held::Ip(Some(address.parse().unwrap())), None);
    }
    r.synced();
    let next: Vec<String> = ["x", "y"]
        .iter()
        .map(|n| r.allocate(&pool(), &obj(n), None, &Claimant::default()).unwrap().address.to_string())
        .collect();
    assert_eq!(next, ["10.0.0.6", "10.0.0.7"], "the addresses above the highest in use were never handed out");
}

mod quota;
