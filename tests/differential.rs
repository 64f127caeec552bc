//! Drop-in, proven by difference: generated pool specs (both versions, all four kinds, every field and edge) and
//! sequences of allocations and releases go to the Go provider v1.1.0's own code (`caip-oracle`, built by
//! `tests/tools/k8s-bin.sh caip` inside a copy of its module) and to ours: the conversion, the defaulting and
//! validating webhooks, the claim allocation and the pool status. Every answer must agree, except where
//! docs/compatibility.md lists a difference; each such row is encoded below as exactly what it allows.
//!
//! `DIFF_CASES=n` runs n specs (default 8,000: about a minute); a failure shrinks to the smallest batch, and prints
//! the case that differs.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use capi_ipam::api::conversion::{V1ALPHA2, convert};
use capi_ipam::api::{PoolKind, PoolSpec};
use capi_ipam::capi::IpAddressSpec;
use capi_ipam::index::registry::Claimant;
use capi_ipam::index::{Held, ObjectKey, PoolKey, Registry};
use capi_ipam::webhooks::admission::{AdmissionContext, ClusterReads, PoolAddress, review};
use capi_ipam::webhooks::routes::{AdmissionRoute, Purpose};
use futures::future::BoxFuture;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Value, json};

/// Specs per oracle run: one process answers a batch.
const BATCH: usize = 50;

/// What the cases exercised, printed at the end (a generator that stopped reaching a branch shows here).
struct Tally {
    created: AtomicUsize,
    refused: AtomicUsize,
    updated: AtomicUsize,
    update_refused: AtomicUsize,
    delete_refused: AtomicUsize,
    allocated: AtomicUsize,
    exhausted: AtomicUsize,
}

static TALLY: Tally = Tally {
    created: AtomicUsize::new(0),
    refused: AtomicUsize::new(0),
    updated: AtomicUsize::new(0),
    update_refused: AtomicUsize::new(0),
    delete_refused: AtomicUsize::new(0),
    allocated: AtomicUsize::new(0),
    exhausted: AtomicUsize::new(0),
};

/// How often each listed difference of docs/compatibility.md was met (a row never met is a row not checked).
static LISTED: std::sync::Mutex<std::collections::BTreeMap<&'static str, usize>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

fn listed(row: &'static str) {
    *LISTED.lock().unwrap_or_else(|e| e.into_inner()).entry(row).or_default() += 1;
}

fn count(counter: &AtomicUsize) {
    counter.fetch_add(1, Ordering::Relaxed);
}
const NAMESPACE: &str = "default";

// ------------------------------------------------------------------------------------------------ the generated cases

#[derive(Clone, Debug)]
enum Step {
    Claim(String),
    Release(String),
}

/// One pool and what happens to it: created, maybe updated while addresses are in use, then claimed from.
#[derive(Clone, Debug)]
struct Case {
    kind: PoolKind,
    /// The pool as applied: apiVersion, kind, metadata and spec.
    object: Value,
    /// IPAddresses of the pool that exist already: (address, prefix).
    in_use: Vec<(String, Option<i64>)>,
    /// A later spec, applied as an UPDATE while `in_use` exist.
    update: Option<Value>,
    /// An UPDATE of the labels alone, while `in_use` exist.
    relabel: bool,
    steps: Vec<Step>,
}

/// Address windows at the middle and at both edges of each family's space.
const V4_BASES: [&str; 4] = ["10.0.0.0", "0.0.0.0", "255.255.255.192", "192.168.7.64"];
const V6_BASES: [&str; 3] = ["fd00::", "::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffc0"];

fn offset(base: &str, n: u128) -> String {
    match base.parse::<std::net::IpAddr>().expect("a base") {
        std::net::IpAddr::V4(a) => {
            std::net::Ipv4Addr::from((u32::from(a) as u128 + n).min(u32::MAX as u128) as u32).to_string()
        }
        std::net::IpAddr::V6(a) => std::net::Ipv6Addr::from(u128::from(a).saturating_add(n)).to_string(),
    }
}

/// One entry of `addresses` or `excludedAddresses` in a 64-address window: a single address, a range (sometimes
/// reversed), a CIDR (sometimes with host bits), or something broken.
fn entry(base: &'static str, v6: bool) -> impl Strategy<Value = String> {
    let bits: u32 = if v6 { 128 } else { 32 };
    prop_oneof![
        6 => (0u128..64).prop_map(move |a| offset(base, a)),
        4 => (0u128..64, 0u128..64).prop_map(move |(a, b)| format!("{}-{}", offset(base, a.min(b)), offset(base, a.max(b)))),
        1 => (0u128..64, 0u128..64).prop_map(move |(a, b)| format!("{}-{}", offset(base, a), offset(base, b))),
        5 => (0u128..64, 0u32..7).prop_map(move |(a, k)| format!("{}/{}", offset(base, a), bits - k)),
        1 => Just(format!("{}/{}", offset(base, 0), bits + 1)),
        1 => prop::sample::select(vec!["abc", "10.0.0.1-10.0.0.2-10.0.0.3", "fd00::5", "10.0.0.5", "10.0.0.0/24-10.0.0.9", " 10.0.0.1", "::ffff:10.0.0.1", "fe80::1%eth0", "fd00::3%eth0-fd00::9", "fd00::3-fd00::9%br-lan", ""])
            .prop_map(str::to_owned),
    ]
}

fn gateway(base: &'static str, v6: bool) -> impl Strategy<Value = Option<String>> {
    let others: Vec<&'static str> = if v6 {
        vec![
            "::",
            "fe80::1",
            "fd99::1",
            "10.0.0.1",
            "invalid",
            "FD00::1",
            "fe80::1%eth0",
            "fe80::1%br-lan",
            "fe80::1%",
            "::ffff:10.0.0.1",
        ]
    } else {
        vec!["0.0.0.0", "169.254.0.254", "10.99.0.1", "fd00::1", "invalid", "010.0.0.1", "255.255.255.255"]
    };
    prop_oneof![
        4 => Just(None),
        1 => Just(Some(String::new())),
        5 => (0u128..64).prop_map(move |a| Some(offset(base, a))),
        3 => prop::sample::select(others).prop_map(|g| Some(g.to_owned())),
    ]
}

fn prefix(v6: bool) -> impl Strategy<Value = Option<i64>> {
    let bits: i64 = if v6 { 128 } else { 32 };
    prop_oneof![
        // A 64-address window at an aligned base fits a prefix of bits − 6 or shorter.
        6 => (6i64..9).prop_map(move |k| Some(bits - k)),
        3 => (0i64..6).prop_map(move |k| Some(bits - k)),
        1 => Just(None),
        1 => prop::sample::select(vec![0, -1, 33, 129, 9999]).prop_map(Some),
    ]
}

/// A base address of either family, for a pool's window.
fn base() -> impl Strategy<Value = (&'static str, bool)> {
    (any::<bool>(), 0usize..4, 0usize..3)
        .prop_map(|(v6, b4, b6)| if v6 { (V6_BASES[b6], true) } else { (V4_BASES[b4], false) })
}

/// A v1alpha2 IP pool spec, as JSON with absent fields absent.
fn ip_spec() -> impl Strategy<Value = (Value, &'static str)> {
    base().prop_flat_map(|(base, v6)| ip_spec_at(base, v6).prop_map(move |spec| (spec, base)))
}

/// A v1alpha2 IP pool spec in the window at `base`.
fn ip_spec_at(base: &'static str, v6: bool) -> impl Strategy<Value = Value> {
    (
        prop_oneof![1 => Just(Vec::new()), 12 => prop::collection::vec(entry(base, v6), 1..4)],
        prefix(v6),
        gateway(base, v6),
        prop::option::of(prop::collection::vec(entry(base, v6), 0..3)),
        prop::option::of(any::<bool>()),
        prop::option::of(prop::sample::select(vec![0i64, 30, -1])),
    )
        .prop_map(move |(addresses, prefix, gateway, excluded, reserved, grace)| {
            let mut spec = json!({ "addresses": addresses });
            put(&mut spec, "prefix", prefix.map(Value::from));
            put(&mut spec, "gateway", gateway.map(Value::from));
            put(&mut spec, "excludedAddresses", excluded.map(Value::from));
            put(&mut spec, "allocateReservedIPAddresses", reserved.map(Value::from));
            put(&mut spec, "addressReuseGracePeriodSeconds", grace.map(Value::from));
            spec
        })
}

/// A v1alpha1 IP pool spec: `addresses`, or `subnet` with `start` and `end`, and their edges.
fn ip_spec_v1alpha1() -> impl Strategy<Value = (Value, &'static str)> {
    (any::<bool>(), 0usize..4, 0usize..3).prop_flat_map(|(v6, b4, b6)| {
        let base = if v6 { V6_BASES[b6] } else { V4_BASES[b4] };
        let bits: u32 = if v6 { 128 } else { 32 };
        (
            prop::option::of(prop::collection::vec(entry(base, v6), 1..3)),
            prop::option::of((0u128..64, 0u32..7).prop_map(move |(a, k)| format!("{}/{}", offset(base, a), bits - k))),
            prop::option::of((0u128..64).prop_map(move |a| offset(base, a))),
            prop::option::of((0u128..64).prop_map(move |a| offset(base, a))),
            prefix(v6),
            gateway(base, v6),
        )
            .prop_map(move |(addresses, subnet, start, end, prefix, gateway)| {
                let mut spec = json!({});
                put(&mut spec, "addresses", addresses.map(Value::from));
                put(&mut spec, "subnet", subnet.map(Value::from));
                put(&mut spec, "start", start.map(Value::from));
                put(&mut spec, "end", end.map(Value::from));
                put(&mut spec, "prefix", prefix.map(Value::from));
                put(&mut spec, "gateway", gateway.map(Value::from));
                (spec, base)
            })
    })
}

/// A prefix pool spec: aligned and unaligned prefixes, lengths at and past the edges, IPv4 where IPv6 is required.
fn prefix_spec() -> impl Strategy<Value = (Value, &'static str)> {
    let prefixes = prop::sample::select(vec![
        "fd00::/62",
        "fd00::/64",
        "fd00:0:0:4::/62",
        "fd00::/63",
        "fd00::1/64",
        "fd00::/65",
        "10.0.0.0/8",
        "fd00::",
        "fd00::/127",
        "fd00::/128",
        "fd00::/60",
    ]);
    let excluded = prop::sample::select(vec![
        "fd00::/64",
        "fd00:0:0:1::-fd00:0:0:1::5",
        "fd00:0:0:2::7",
        "fd00:0:0:4::/63",
        "10.0.0.1",
        "bad",
    ]);
    (
        prop::collection::vec(prefixes, 0..3),
        prop::option::of(prop::sample::select(vec![0i64, 64, 63, 62, 60, 128, 127, 129, 1, -1])),
        prop::option::of(prop::sample::select(vec!["", "fd00::1", "::", "10.0.0.1", "bad", "fd00:0:0:1::"])),
        prop::option::of(prop::collection::vec(excluded, 0..3)),
    )
        .prop_map(|(prefixes, length, gateway, excluded)| {
            let mut spec = json!({ "prefixes": prefixes });
            put(&mut spec, "allocationPrefixLength", length.map(Value::from));
            put(&mut spec, "gateway", gateway.map(Value::from));
            put(&mut spec, "excludedPrefixes", excluded.map(Value::from));
            (spec, "fd00::")
        })
}

fn put(spec: &mut Value, field: &str, value: Option<Value>) {
    if let Some(v) = value {
        spec[field] = v;
    }
}

fn object(kind: PoolKind, version: &str, spec: Value) -> Value {
    let mut metadata = json!({"name": "pool"});
    if !kind.is_global() {
        metadata["namespace"] = json!(NAMESPACE);
    }
    json!({"apiVersion": format!("ipam.cluster.x-k8s.io/{version}"), "kind": kind.kind(), "metadata": metadata, "spec": spec})
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec((any::<bool>(), 0usize..4), 0..8).prop_map(|raw| {
        let mut claimed: Vec<String> = Vec::new();
        let mut out = Vec::new();
        for (n, (release, pick)) in raw.into_iter().enumerate() {
            if release && !claimed.is_empty() {
                out.push(Step::Release(claimed.remove(pick % claimed.len())));
            } else {
                let name = format!("claim-{n}");
                claimed.push(name.clone());
                out.push(Step::Claim(name));
            }
        }
        out
    })
}

fn case() -> impl Strategy<Value = Case> {
    let kind = prop::sample::select(PoolKind::ALL.to_vec());
    (kind, 0u8..4).prop_flat_map(|(kind, version)| {
        let spec = if kind.is_prefix_pool() {
            prefix_spec().boxed()
        } else if version == 0 {
            ip_spec_v1alpha1().prop_map(|(s, b)| (json!({"v1alpha1": s}), b)).boxed()
        } else {
            ip_spec().boxed()
        };
        (spec, steps()).prop_flat_map(move |((spec, base), steps)| {
            // The update stays in the window of the pool and of its addresses in use.
            let v6 = base.contains(':');
            let update = if kind.is_prefix_pool() {
                prefix_spec().prop_map(|(s, _)| s).boxed()
            } else {
                ip_spec_at(base, v6).boxed()
            };
            let in_use = prop::collection::vec(
                (0u128..80, prop::option::of(prop::sample::select(vec![24i64, 64, 62, 128]))),
                0..3,
            )
            .prop_map(move |raw| {
                // Every 7th IPv6 address is written with a zone, as a hand-made IPAddress may be.
                raw.into_iter()
                    .map(|(a, p)| {
                        let zone = if base.contains(':') && a % 7 == 3 { "%eth0" } else { "" };
                        (format!("{}{zone}", offset(base, a)), p)
                    })
                    .collect::<Vec<_>>()
            });
            (Just(spec), prop::option::of(update), any::<bool>(), Just(steps), in_use).prop_map(
                move |(spec, update, relabel, steps, in_use)| {
                    let applied = match spec.get("v1alpha1") {
                        Some(s) => object(kind, "v1alpha1", s.clone()),
                        None => object(kind, "v1alpha2", spec),
                    };
                    let update = update.map(|u| object(kind, "v1alpha2", u));
                    Case { kind, object: applied, in_use, update, relabel, steps }
                },
            )
        })
    })
}

// ----------------------------------------------------------------------------------------------------- the oracle

fn oracle_binary() -> std::path::PathBuf {
    static PATH: OnceLock<std::path::PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let path = support::release::tool_dir("caip").join("caip-oracle");
        assert!(path.exists(), "{} is missing: run `tests/tools/k8s-bin.sh caip` (make test does)", path.display());
        path
    })
    .clone()
}

/// Sends a batch of requests to one oracle process and returns its answers, in order.
fn ask(requests: &[Value]) -> Vec<Value> {
    let mut child = Command::new(oracle_binary())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("caip-oracle starts");
    let mut stdin = child.stdin.take().expect("stdin");
    let body: String = requests.iter().map(|r| format!("{r}\n")).collect();
    // Written from another thread: the answers would fill the pipe before a large batch is fully written.
    let writer = std::thread::spawn(move || stdin.write_all(body.as_bytes()));
    let answers: Vec<Value> = BufReader::new(child.stdout.take().expect("stdout"))
        .lines()
        .map(|l| serde_json::from_str(&l.expect("a line")).expect("caip-oracle answers JSON"))
        .collect();
    writer.join().expect("writer").expect("requests written");
    assert!(child.wait().expect("caip-oracle exits").success(), "caip-oracle failed");
    assert_eq!(answers.len(), requests.len(), "one answer per request");
    for a in &answers {
        assert!(a.get("error").is_none(), "caip-oracle could not run a request: {a}");
    }
    answers
}

// ------------------------------------------------------------------------------------------------------------ ours

/// The IPAddresses of the pool, given as data.
struct Existing(Vec<IpAddressSpec>);

impl ClusterReads for Existing {
    fn pool_addresses<'a>(
        &'a self,
        _: PoolKind,
        _: &'a str,
        _: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<PoolAddress>, kube::Error>> {
        let addresses = self.0.iter().map(|spec| PoolAddress { namespace: "default".into(), spec: spec.clone() });
        Box::pin(async move { Ok(addresses.collect()) })
    }

    fn pools<'a>(
        &'a self,
        _: PoolKind,
        _: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<(String, Value)>, kube::Error>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    fn pool<'a>(
        &'a self,
        _: PoolKind,
        _: &'a str,
        _: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Option<kube::api::DynamicObject>, kube::Error>> {
        Box::pin(async { Ok(None) })
    }
}

fn address_specs(case: &Case) -> Vec<IpAddressSpec> {
    case.in_use
        .iter()
        .map(|(address, prefix)| IpAddressSpec { address: address.clone(), prefix: *prefix, ..Default::default() })
        .collect()
}

/// Our verdict on one request, in the oracle's shape.
#[derive(Debug, Default)]
struct Verdict {
    /// Our conversion refused the object (C11).
    conversion_error: Option<String>,
    converted: Option<Value>,
    defaulted: Option<Value>,
    allowed: bool,
    code: i64,
    fields: BTreeSet<String>,
    /// A field named with the index of its entry (C1).
    indexed_fields: bool,
    warnings: Vec<String>,
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| tokio::runtime::Builder::new_current_thread().build().expect("a runtime"))
}

fn admission_review(operation: &str, object: &Value, old: Option<&Value>) -> Value {
    let kind = object["kind"].as_str().unwrap_or_default();
    let (object_field, old_field) = if operation == "DELETE" {
        (Value::Null, object.clone())
    } else {
        (object.clone(), old.cloned().unwrap_or(Value::Null))
    };
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "differential",
        "kind": {"group": "ipam.cluster.x-k8s.io", "version": "v1alpha2", "kind": kind},
        "resource": {"group": "ipam.cluster.x-k8s.io", "version": "v1alpha2", "resource": format!("{}s", kind.to_lowercase())},
        "name": object["metadata"]["name"], "namespace": object["metadata"].get("namespace").cloned().unwrap_or(Value::Null),
        "operation": operation, "userInfo": {"username": "differential"},
        "object": object_field, "oldObject": old_field}})
}

fn ours_admit(
    kind: PoolKind,
    operation: &str,
    object: &Value,
    old: Option<&Value>,
    in_use: &[IpAddressSpec],
) -> Verdict {
    let mut verdict = Verdict::default();
    let mut object = object.clone();
    if object["apiVersion"] != json!(V1ALPHA2) {
        match convert(&object, V1ALPHA2) {
            Ok(converted) => object = converted,
            Err(e) => {
                verdict.conversion_error = Some(e.to_string());
                return verdict;
            }
        }
        verdict.converted = Some(object.clone());
    }
    let ctx = AdmissionContext {
        reads: Arc::new(Existing(in_use.to_vec())),
        reject_overlapping_pools: false,
        reject_gateway_outside_subnet: false,
    };
    let run = |purpose, review_body: &Value| {
        let route = AdmissionRoute::Pool { kind, purpose };
        runtime().block_on(review(&ctx, route, review_body.to_string().as_bytes())).0
    };
    if operation != "DELETE" {
        let answer = run(Purpose::Default, &admission_review(operation, &object, old));
        let response = &answer["response"];
        if response["allowed"] != json!(true) {
            return fill(verdict, response);
        }
        if response["patch"].is_string() {
            let bytes: k8s_openapi::ByteString = serde_json::from_value(response["patch"].clone()).expect("base64");
            let patch: json_patch::Patch = serde_json::from_slice(&bytes.0).expect("a JSON patch");
            json_patch::patch(&mut object, &patch).expect("our patch applies");
        }
        verdict.defaulted = Some(object.clone());
    }
    let answer = run(Purpose::Validate, &admission_review(operation, &object, old));
    fill(verdict, &answer["response"])
}

fn fill(mut verdict: Verdict, response: &Value) -> Verdict {
    verdict.allowed = response["allowed"] == json!(true);
    verdict.code = response["status"]["code"].as_i64().unwrap_or(if verdict.allowed { 200 } else { 0 });
    verdict.fields = fields(&response["status"]["details"]["causes"]);
    verdict.indexed_fields = response["status"]["details"]["causes"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["field"].as_str().is_some_and(|f| f.ends_with(']')));
    verdict.warnings = strings(&response["warnings"]);
    verdict
}

/// A JSON list of strings (absent: empty).
fn strings(list: &Value) -> Vec<String> {
    list.as_array().into_iter().flatten().filter_map(|w| w.as_str().map(str::to_owned)).collect()
}

/// The fields named by the causes, without the entry index we add (`spec.addresses[2]` → `spec.addresses`).
fn fields(causes: &Value) -> BTreeSet<String> {
    causes
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["field"].as_str())
        .map(|f| f.split('[').next().unwrap_or(f).to_owned())
        .collect()
}

fn theirs(answer: &Value) -> Verdict {
    Verdict {
        allowed: answer["allowed"] == json!(true),
        code: answer["code"].as_i64().unwrap_or(0),
        fields: fields(&answer["causes"]),
        warnings: strings(&answer["warnings"]),
        converted: answer.get("converted").cloned(),
        defaulted: answer.get("defaulted").cloned(),
        ..Verdict::default()
    }
}

/// One step's outcome: the IPAddress's address, prefix and gateway, or none.
type Got = Option<(String, Option<i64>, Option<String>)>;

/// Our allocator state machine (the registry the claim controller allocates through), driven like the oracle: the
/// pool, its existing IPAddresses, then claims (allocate and confirm, as a created IPAddress is) and releases.
fn ours_allocate(case: &Case, pool: &Value) -> (Vec<Got>, [i64; 4]) {
    let mut registry = Registry::new();
    let key = PoolKey::new(case.kind, NAMESPACE, "pool");
    let spec = if case.kind.is_prefix_pool() {
        PoolSpec::Prefix(serde_json::from_value(pool["spec"].clone()).expect("a prefix pool spec"))
    } else {
        PoolSpec::Ip(serde_json::from_value(pool["spec"].clone()).expect("an IP pool spec"))
    };
    registry.apply_spec(&key, &spec);
    for (i, spec) in address_specs(case).iter().enumerate() {
        let name = ObjectKey::new(NAMESPACE, &format!("existing-{i}"));
        registry.record(&key, &name, Held::of(case.kind, spec), None);
    }
    let mut got = Vec::new();
    for step in &case.steps {
        match step {
            Step::Claim(name) => {
                let name = ObjectKey::new(NAMESPACE, name);
                match registry.allocate(&key, &name, None, &Claimant::default()) {
                    Ok(a) => {
                        registry.confirm(&key, &name);
                        got.push(Some((a.address.to_string(), Some(a.prefix), a.gateway)));
                    }
                    Err(_) => got.push(None),
                }
            }
            Step::Release(name) => {
                registry.forget(&key, &ObjectKey::new(NAMESPACE, name));
                got.push(None);
            }
        }
    }
    let (c, _) = registry.counts(&key);
    (got, [c.total, c.used, c.free, c.out_of_range])
}

// ------------------------------------------------------------------------------------------- the listed differences

/// docs/compatibility.md D13: an IPv4 pool of prefix 31 or 32 has no network or broadcast address for us; the Go
/// provider withholds them anyway unless `allocateReservedIPAddresses`.
fn rfc3021(pool: &Value) -> bool {
    let spec = &pool["spec"];
    let v4 = spec["addresses"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|a| a.as_str().is_some_and(|a| a.contains('.') && !a.contains(':')));
    v4 && spec["prefix"].as_i64().is_some_and(|p| p >= 31) && spec["allocateReservedIPAddresses"] != json!(true)
}

/// docs/compatibility.md C4: an IPAddress of a prefix pool without `spec.prefix`, or whose address and prefix are no
/// prefix (a zoned address).
fn prefix_pool_blocked(case: &Case) -> bool {
    case.kind.is_prefix_pool() && case.in_use.iter().any(|(address, prefix)| prefix.is_none() || address.contains('%'))
}

/// docs/compatibility.md C10: an IP pool whose gateway's zone holds a '-' or a '/' (the Go provider reads the
/// gateway as a range or a CIDR when it allocates).
fn gateway_blocks_allocation(pool: &Value) -> bool {
    pool["spec"]["gateway"].as_str().and_then(|g| g.split_once('%')).is_some_and(|(_, zone)| zone.contains(['-', '/']))
}

/// The same pool with a label more: an update that leaves the spec alone.
fn relabelled(stored: &Value) -> Value {
    let mut object = stored.clone();
    object["metadata"]["labels"] = json!({"team": "network"});
    object
}

/// docs/compatibility.md D12: our warning about the gateway, which the Go provider does not give.
fn gateway_warning(w: &str) -> bool {
    w.starts_with("spec.gateway: ")
}

/// The spec, with null and empty lists left out: Go writes an absent list as `null`, which the API server drops
/// (the fields are not nullable), and an empty list means what an absent one does.
fn spec_of(object: &Option<Value>) -> Value {
    let mut spec = object.as_ref().map(|o| o["spec"].clone()).unwrap_or(Value::Null);
    if let Some(fields) = spec.as_object_mut() {
        fields.retain(|_, v| !(v.is_null() || v.as_array().is_some_and(Vec::is_empty)));
    }
    spec
}

fn compare_admission(what: &str, ours: &Verdict, theirs: &Verdict) -> Result<(), String> {
    if let Some(e) = &ours.conversion_error {
        // C11: a v1alpha1 subnet of one address: we refuse it at conversion, the Go provider converts it to a
        // range it cannot parse, which its webhook refuses.
        listed("C11");
        return match theirs.allowed {
            false => Ok(()),
            true => Err(format!("{what}: we refuse the conversion ({e}), the Go provider admits the pool")),
        };
    }
    let mut diffs = Vec::new();
    if ours.converted.is_some() && spec_of(&ours.converted) != spec_of(&theirs.converted) {
        diffs.push(format!("converted spec: ours {} theirs {}", spec_of(&ours.converted), spec_of(&theirs.converted)));
    }
    if ours.allowed != theirs.allowed {
        diffs.push(format!("allowed: ours {} theirs {}", ours.allowed, theirs.allowed));
    } else if !ours.allowed {
        if ours.code != theirs.code {
            diffs.push(format!("code: ours {} theirs {}", ours.code, theirs.code));
        }
        if ours.indexed_fields {
            listed("C1");
        }
        if ours.fields != theirs.fields && !theirs.fields.is_empty() {
            diffs.push(format!("fields: ours {:?} theirs {:?}", ours.fields, theirs.fields));
        }
    }
    if theirs.defaulted.is_some() && spec_of(&ours.defaulted) != spec_of(&theirs.defaulted) {
        diffs.push(format!("defaulted spec: ours {} theirs {}", spec_of(&ours.defaulted), spec_of(&theirs.defaulted)));
    }
    let ours_warnings: Vec<&String> = ours.warnings.iter().filter(|w| !gateway_warning(w)).collect();
    if ours_warnings.len() != ours.warnings.len() {
        listed("D12");
    }
    let theirs_warnings: Vec<&String> = theirs.warnings.iter().collect();
    if ours.allowed && theirs.allowed && ours_warnings != theirs_warnings {
        diffs.push(format!("warnings: ours {:?} theirs {:?}", ours.warnings, theirs.warnings));
    }
    if diffs.is_empty() { Ok(()) } else { Err(format!("{what}: {}", diffs.join("; "))) }
}

fn compare_allocation(case: &Case, pool: &Value, answer: &Value) -> Result<(), String> {
    let (ours, counts) = ours_allocate(case, pool);
    if rfc3021(pool) {
        listed("D13");
        return Ok(()); // D13: the allocatable sets differ by design; the admission verdicts were compared.
    }
    let results = answer["results"].as_array().cloned().unwrap_or_default();
    if prefix_pool_blocked(case) || (!case.kind.is_prefix_pool() && gateway_blocks_allocation(pool)) {
        listed(if prefix_pool_blocked(case) { "C4" } else { "C10" });
        // C4, C10: the Go provider hands out nothing from such a pool.
        let claimed = case.steps.iter().zip(&results).filter(|(s, _)| matches!(s, Step::Claim(_)));
        return match claimed.map(|(_, r)| r).find(|r| r.get("address").is_some()) {
            Some(r) => Err(format!("C4/C10 no longer hold: the Go provider allocated {r}")),
            None => Ok(()),
        };
    }
    let mut diffs = Vec::new();
    for ((step, ours), theirs) in case.steps.iter().zip(&ours).zip(&results) {
        if matches!(step, Step::Claim(_)) {
            count(if ours.is_some() { &TALLY.allocated } else { &TALLY.exhausted });
        }
        let theirs: Got = theirs["address"].as_str().map(|a| {
            let gateway = theirs["gateway"].as_str().map(str::to_owned);
            (a.to_owned(), theirs["prefix"].as_i64(), gateway)
        });
        if matches!(step, Step::Claim(_)) && *ours != theirs {
            diffs.push(format!("{step:?}: ours {ours:?} theirs {theirs:?}"));
        }
    }
    let status = &answer["status"];
    let mut go = ["total", "used", "free", "outOfRange"].map(|f| status[f].as_i64().unwrap_or(-1));
    let [total, used, free, out_of_range] = counts;
    // C5: `outOfRange` counts IPAddresses; the Go provider counts distinct addresses. They differ by at most the
    // IPAddresses that repeat an address.
    let distinct: BTreeSet<&str> = case.in_use.iter().map(|(a, _)| a.split('%').next().unwrap_or(a)).collect();
    let repeats = (case.in_use.len() - distinct.len()) as i64;
    if !case.kind.is_prefix_pool() && (go[3]..=go[3] + repeats).contains(&out_of_range) {
        if go[3] != out_of_range {
            listed("C5");
        }
        go[3] = out_of_range;
    }
    // D4: `free` counts what can still be handed out: out-of-range addresses take no allocatable address, and it is
    // never negative. The Go provider's IP pools show `total − used` (its prefix pools already do as we do).
    let mut go_free = if case.kind.is_prefix_pool() { go[2] } else { (go[0] - go[1] + go[3]).max(0) };
    if go_free != go[2] {
        listed("D4");
    }
    // C6: a pool of 2^63−1 addresses or more: each count saturates from its true value, so `free` is at least the
    // Go provider's, which subtracts from the saturated total.
    if go[0] == i64::MAX && free >= go_free {
        if free != go_free {
            listed("C6");
        }
        go_free = free;
    }
    if [total, used, free, out_of_range] != [go[0], go[1], go_free, go[3]] {
        diffs.push(format!("status: ours {counts:?} theirs {go:?} (free as D4 counts it: {go_free})"));
    }
    if diffs.is_empty() { Ok(()) } else { Err(format!("allocation: {}", diffs.join("; "))) }
}

// -------------------------------------------------------------------------------------------------------- the test

/// Runs a batch of cases through both and returns the first unexplained difference.
fn differ(cases: &[Case]) -> Result<(), String> {
    let mut requests = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        requests.push(json!({"id": i * 3, "op": "admit", "operation": "CREATE", "object": case.object}));
    }
    let created = ask(&requests);
    let mut second = Vec::new();
    let mut ours_created = Vec::new();
    for (i, (case, answer)) in cases.iter().zip(&created).enumerate() {
        let ours = ours_admit(case.kind, "CREATE", &case.object, None, &[]);
        let theirs = theirs(answer);
        compare_admission("create", &ours, &theirs).map_err(|e| format!("{e}\n  case: {case:?}"))?;
        if !theirs.allowed {
            count(&TALLY.refused);
            ours_created.push(None);
            continue;
        }
        count(&TALLY.created);
        let stored = theirs.defaulted.clone().expect("a defaulted object");
        let in_use: Vec<Value> = case
            .in_use
            .iter()
            .enumerate()
            .map(|(n, (a, p))| json!({"name": format!("existing-{n}"), "address": a, "prefix": p}))
            .collect();
        if let Some(update) = &case.update {
            second.push(json!({"id": i * 3 + 1, "op": "admit", "operation": "UPDATE", "object": update, "oldObject": stored, "inUse": in_use}));
        }
        if case.relabel {
            let object = relabelled(&stored);
            second.push(json!({"id": i * 3 + 1, "op": "admit", "operation": "UPDATE", "object": object, "oldObject": stored, "inUse": in_use}));
        }
        second.push(json!({"id": i * 3 + 2, "op": "admit", "operation": "DELETE", "object": stored, "inUse": in_use}));
        let steps: Vec<Value> = case
            .steps
            .iter()
            .map(|s| match s {
                Step::Claim(n) => json!({"claim": n}),
                Step::Release(n) => json!({"release": n}),
            })
            .collect();
        second.push(json!({"id": i * 3 + 2, "op": "allocate", "object": stored, "inUse": in_use, "steps": steps}));
        ours_created.push(Some(stored));
    }
    let answers = ask(&second);
    let mut answers = answers.iter();
    for (case, stored) in cases.iter().zip(&ours_created) {
        let Some(stored) = stored else { continue };
        let in_use = address_specs(case);
        let context = |e: String| format!("{e}\n  case: {case:?}");
        if let Some(update) = &case.update {
            let answer = answers.next().expect("an update answer");
            let ours = ours_admit(case.kind, "UPDATE", update, Some(stored), &in_use);
            let theirs = theirs(answer);
            // D13: an address in use that only an IPv4 /31 or /32 without network and broadcast addresses allocates is
            // stranded for the Go provider, not for us.
            let stranded = theirs.code == 400
                && answer["message"].as_str().is_some_and(|m| m.starts_with("pool addresses do not contain"));
            if ours.allowed && stranded && rfc3021(update) {
                listed("D13");
            } else {
                compare_admission("update", &ours, &theirs).map_err(context)?;
            }
            count(if ours.allowed { &TALLY.updated } else { &TALLY.update_refused });
        }
        if case.relabel {
            let answer = answers.next().expect("a relabel answer");
            let ours = ours_admit(case.kind, "UPDATE", &relabelled(stored), Some(stored), &in_use);
            let theirs = theirs(answer);
            // C9: an update that leaves the spec alone is not refused for addresses stranded before it.
            let stranded = !case.kind.is_prefix_pool()
                && theirs.code == 400
                && answer["message"].as_str().is_some_and(|m| m.starts_with("pool addresses do not contain"));
            if ours.allowed && stranded {
                listed("C9");
            } else {
                compare_admission("relabel", &ours, &theirs).map_err(context)?;
            }
        }
        let answer = answers.next().expect("a delete answer");
        let ours = ours_admit(case.kind, "DELETE", stored, None, &in_use);
        compare_admission("delete", &ours, &theirs(answer)).map_err(context)?;
        if !ours.allowed {
            count(&TALLY.delete_refused);
        }
        let answer = answers.next().expect("an allocation answer");
        compare_allocation(case, stored, answer).map_err(context)?;
    }
    Ok(())
}

#[test]
fn the_go_provider_and_we_agree_on_every_pool_except_as_documented() {
    let cases: u32 = std::env::var("DIFF_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(8_000);
    let batches = cases.div_ceil(BATCH as u32).max(1);
    let mut runner = TestRunner::new(Config { cases: batches, failure_persistence: None, ..Config::default() });
    let result = runner.run(&prop::collection::vec(case(), BATCH), |cases| differ(&cases).map_err(TestCaseError::fail));
    if let Err(e) = result {
        panic!("the Go provider and we differ, beyond docs/compatibility.md:\n{e}");
    }
    let t = &TALLY;
    let n = |c: &AtomicUsize| c.load(Ordering::Relaxed);
    println!(
        "agreed on {} pools: {} created, {} refused; updates {} admitted, {} refused; {} deletes refused; claims {} \
         allocated, {} without an address",
        n(&t.created) + n(&t.refused),
        n(&t.created),
        n(&t.refused),
        n(&t.updated),
        n(&t.update_refused),
        n(&t.delete_refused),
        n(&t.allocated),
        n(&t.exhausted),
    );
    println!("listed differences met: {:?}", LISTED.lock().unwrap_or_else(|e| e.into_inner()));
}

/// Every flag the Go provider's binary lists in its `--help` is ours too, with the same default; the values its help
/// offers that we cannot serve are refused at start with a message that names the flag and says what to use (C7). A
/// flag added upstream shows up here as a failure. (The Go provider's release manifests pass only `--leader-elect`.)
#[test]
fn every_flag_of_the_go_provider_is_ours_with_the_same_default() {
    use capi_ipam::cli::Args;
    use clap::{CommandFactory, Parser};
    let help =
        Command::new(support::release::tool_dir("caip").join("caip")).arg("--help").output().expect("caip --help");
    let help = String::from_utf8_lossy(&help.stdout).into_owned() + &String::from_utf8_lossy(&help.stderr);
    let ours = Args::command();
    // One entry per flag: its line and the lines that continue its description.
    let mut flags: Vec<String> = Vec::new();
    for line in help.lines() {
        match (line.trim_start().starts_with("--"), flags.last_mut()) {
            (true, _) => flags.push(line.trim_start().to_owned()),
            (false, Some(last)) => last.push_str(line),
            (false, None) => {}
        }
    }
    let mut seen = 0;
    for line in &flags {
        let Some(rest) = line.strip_prefix("--") else { continue };
        let mut words = rest.split_whitespace();
        let name = words.next().expect("a flag name");
        let kind = words.next().filter(|w| matches!(*w, "string" | "strings" | "int" | "duration"));
        seen += 1;
        let arg = ours.get_arguments().find(|a| a.get_long() == Some(name));
        let arg = arg.unwrap_or_else(|| panic!("the Go provider's --{name} is not a flag of ours"));
        let go_default = line.split("(default ").nth(1).map(|d| d.trim_end_matches(')').trim_matches('"').to_owned());
        let our_default: Vec<String> =
            arg.get_default_values().iter().map(|v| v.to_string_lossy().into_owned()).collect();
        let our_default = our_default.join(",");
        let expected = go_default.unwrap_or_else(|| if kind.is_none() { "false".into() } else { String::new() });
        // --kubeconfig falls back to $KUBECONFIG in both (client-go's loading rules; clap's env).
        if name != "kubeconfig" {
            assert_eq!(our_default, expected, "--{name}: our default differs from the Go provider's");
        }
        let value = match (name, kind) {
            (_, None) => None,
            ("tls-min-version", _) => Some("VersionTLS13"),
            ("tls-cipher-suites", _) => Some("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"),
            ("webhook-port", _) => Some("9443"),
            (_, Some(_)) => Some(":9999"),
        };
        let flag = match value {
            Some(v) => format!("--{name}={v}"),
            None => format!("--{name}"),
        };
        if let Err(e) = Args::try_parse_from(["manager", flag.as_str()]) {
            panic!("{flag}, which the Go provider takes, is refused: {e}");
        }
    }
    assert!(seen >= 13, "read only {seen} flags from the Go provider's --help:\n{help}");
    for old in ["VersionTLS10", "VersionTLS11"] {
        let refused =
            Args::try_parse_from(["manager", &format!("--tls-min-version={old}")]).expect_err(old).to_string();
        assert!(refused.contains("--tls-min-version") && refused.contains("VersionTLS12"), "{refused}");
    }
}
