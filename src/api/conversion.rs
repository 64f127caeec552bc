//! Conversion between v1alpha1 and v1alpha2 of the two IP pool kinds (v1alpha2 is the hub), lossless both ways
//! (docs/compatibility.md D3).
//!
//! v1alpha1 → v1alpha2 follows the Go provider exactly (reference §1.6): `subnet` defaults `start` to the second and
//! `end` to the second-to-last address and `prefix` to the subnet's length, `start-end` is appended to `addresses`, and
//! the v1alpha1 spec is kept in the hub annotation `cluster.x-k8s.io/conversion-data` so that v1alpha1 readers get it
//! back. We write that annotation only when the v1alpha1 spec used `subnet`, `start` or `end`: otherwise the plain
//! conversion gives it back exactly, and the stored object stays free of noise.
//!
//! v1alpha2 → v1alpha1 restores that v1alpha1 spec when it still converts to the hub's `addresses`, `prefix` and
//! `gateway` (for both kinds; the Go provider restores stale specs for global pools). The hub fields v1alpha1 cannot
//! express (`allocateReservedIPAddresses`, `excludedAddresses`, `addressReuseGracePeriodSeconds`, `preAllocations`,
//! `subnets`, `allocationStrategy`, `quota`) travel in the same annotation on the v1alpha1 object, as the hub spec, and come
//! back on the way up.

use serde_json::{Map, Value, json};

use super::CONVERSION_DATA_ANNOTATION;
use super::v1alpha1;
use super::v1alpha2;
use crate::ipam::address::parse_cidr;
use crate::ipam::validate::{FieldError, quote};

pub const V1ALPHA1: &str = "ipam.cluster.x-k8s.io/v1alpha1";
pub const V1ALPHA2: &str = "ipam.cluster.x-k8s.io/v1alpha2";

/// Why an object could not be converted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConversionError {
    #[error("{0}")]
    Field(String),
    #[error("cannot convert {kind} from {from} to {to}")]
    Unsupported { kind: String, from: String, to: String },
    #[error("malformed object: {0}")]
    Malformed(String),
}

/// Converts one object (as the API server sends it in a ConversionReview) to `desired_api_version`.
pub fn convert(object: &Value, desired_api_version: &str) -> Result<Value, ConversionError> {
    let api_version = object.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or_default();
    if api_version == desired_api_version {
        return Ok(object.clone());
    }
    let ip_pool = matches!(kind, "InClusterIPPool" | "GlobalInClusterIPPool");
    match (api_version, desired_api_version) {
        (V1ALPHA1, V1ALPHA2) if ip_pool => to_hub(object),
        (V1ALPHA2, V1ALPHA1) if ip_pool => from_hub(object),
        _ => Err(ConversionError::Unsupported {
            kind: kind.to_owned(),
            from: api_version.to_owned(),
            to: desired_api_version.to_owned(),
        }),
    }
}

/// An object taken apart: metadata, spec and status.
type Parts = (Map<String, Value>, Value, Option<Value>);

fn parts(object: &Value) -> Result<Parts, ConversionError> {
    let obj = object.as_object().ok_or_else(|| ConversionError::Malformed("not a JSON object".into()))?;
    let metadata = match obj.get("metadata") {
        Some(Value::Object(m)) => m.clone(),
        None => Map::new(),
        Some(_) => return Err(ConversionError::Malformed("metadata is not an object".into())),
    };
    Ok((metadata, obj.get("spec").cloned().unwrap_or_else(|| json!({})), obj.get("status").cloned()))
}

fn annotations(metadata: &mut Map<String, Value>) -> &mut Map<String, Value> {
    let entry = metadata.entry("annotations").or_insert_with(|| json!({}));
    if !entry.is_object() {
        *entry = json!({});
    }
    entry.as_object_mut().expect("annotations was just made an object")
}

fn take_annotation(metadata: &mut Map<String, Value>, key: &str) -> Option<String> {
    let value = annotations(metadata).remove(key).and_then(|v| v.as_str().map(str::to_owned));
    if annotations(metadata).is_empty() {
        metadata.remove("annotations");
    }
    value
}

fn assemble(api_version: &str, kind: &str, metadata: Map<String, Value>, spec: Value, status: Option<Value>) -> Value {
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!(api_version));
    out.insert("kind".into(), json!(kind));
    out.insert("metadata".into(), Value::Object(metadata));
    out.insert("spec".into(), spec);
    if let Some(s) = status {
        out.insert("status".into(), s);
    }
    Value::Object(out)
}

fn spec_of<T: serde::de::DeserializeOwned>(spec: Value, version: &str) -> Result<T, ConversionError> {
    serde_path_to_error::deserialize(spec).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." { "spec".to_owned() } else { format!("spec.{path}") };
        ConversionError::Field(format!("{field}: {} (in the {version} object)", e.inner()))
    })
}

fn to_value<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).expect("API types serialize to JSON")
}

/// Applies the Go provider's v1alpha1 → v1alpha2 rules; also returns the defaulted v1alpha1 spec.
pub fn v1alpha1_to_v1alpha2_spec(
    spoke: &v1alpha1::IPPoolSpec,
) -> Result<(v1alpha2::IPPoolSpec, v1alpha1::IPPoolSpec), ConversionError> {
    let mut src = spoke.clone();
    let nonempty = |s: &Option<String>| s.as_deref().is_some_and(|s| !s.is_empty());
    if let Some(subnet) = src.subnet.clone().filter(|s| !s.is_empty()) {
        let cidr = parse_cidr(&subnet, false).map_err(|e| {
            ConversionError::Field(FieldError::invalid("spec.subnet", quote(&subnet), e.to_string()).to_string())
        })?;
        let (first, last) = crate::ipam::address::block(cidr.family, cidr.base, cidr.len);
        let no_room = || {
            ConversionError::Field(
                FieldError::invalid("spec.subnet", quote(&subnet), "subnet is too small").to_string(),
            )
        };
        if !nonempty(&src.first) {
            let v = first.checked_add(1).filter(|v| *v <= cidr.family.max_value()).ok_or_else(no_room)?;
            src.first = Some(cidr.family.addr(v).to_string());
        }
        if !nonempty(&src.last) {
            let v = last.checked_sub(1).ok_or_else(no_room)?;
            src.last = Some(cidr.family.addr(v).to_string());
        }
        if src.prefix.unwrap_or(0) == 0 {
            src.prefix = Some(i32::from(cidr.len));
        }
    }
    let mut addresses = src.addresses.clone().unwrap_or_default();
    if let (Some(first), Some(last)) = (src.first.as_deref(), src.last.as_deref())
        && !first.is_empty()
        && !last.is_empty()
    {
        addresses.push(format!("{first}-{last}"));
    }
    let hub = v1alpha2::IPPoolSpec {
        addresses,
        prefix: src.prefix.unwrap_or(0),
        gateway: src.gateway.clone().filter(|g| !g.is_empty()),
        ..Default::default()
    };
    Ok((hub, src))
}

/// v1alpha1 → v1alpha2.
fn to_hub(object: &Value) -> Result<Value, ConversionError> {
    let kind = object["kind"].as_str().unwrap_or_default().to_owned();
    let (mut metadata, spec, status) = parts(object)?;
    let spoke: v1alpha1::IPPoolSpec = spec_of(spec, "v1alpha1")?;
    let (mut hub, defaulted) = v1alpha1_to_v1alpha2_spec(&spoke)?;

    // Hub-only fields travel in the annotation of the v1alpha1 object (written by `from_hub`).
    if let Some(data) = take_annotation(&mut metadata, CONVERSION_DATA_ANNOTATION)
        && let Ok(stored) = serde_json::from_str::<Value>(&data)
        && stored.get("apiVersion").and_then(Value::as_str) == Some(V1ALPHA2)
        && let Some(stored_spec) = stored.get("spec").cloned()
        && let Ok(stored_spec) = serde_json::from_value::<v1alpha2::IPPoolSpec>(stored_spec)
    {
        hub.allocate_reserved_ip_addresses = stored_spec.allocate_reserved_ip_addresses;
        hub.excluded_addresses = stored_spec.excluded_addresses;
        hub.address_reuse_grace_period_seconds = stored_spec.address_reuse_grace_period_seconds;
        hub.pre_allocations = stored_spec.pre_allocations;
        hub.subnets = stored_spec.subnets;
        hub.allocation_strategy = stored_spec.allocation_strategy;
        hub.quota = stored_spec.quota;
    }

    // The v1alpha1 spec cannot be rebuilt from the hub when it used subnet/start/end: keep it for v1alpha1 readers.
    let used_range_fields = [&spoke.subnet, &spoke.first, &spoke.last].iter().any(|f| f.is_some());
    if used_range_fields {
        let mut data = Map::new();
        data.insert("apiVersion".into(), json!(V1ALPHA1));
        data.insert("kind".into(), json!(kind));
        data.insert("spec".into(), to_value(&defaulted));
        annotations(&mut metadata).insert(CONVERSION_DATA_ANNOTATION.into(), json!(Value::Object(data).to_string()));
    }
    Ok(assemble(V1ALPHA2, &kind, metadata, to_value(&hub), status))
}

/// v1alpha2 → v1alpha1.
fn from_hub(object: &Value) -> Result<Value, ConversionError> {
    let kind = object["kind"].as_str().unwrap_or_default().to_owned();
    let (mut metadata, spec, status) = parts(object)?;
    let hub: v1alpha2::IPPoolSpec = spec_of(spec, "v1alpha2")?;
    let mut spoke = v1alpha1::IPPoolSpec {
        addresses: Some(hub.addresses.clone()),
        subnet: None,
        first: None,
        last: None,
        prefix: Some(hub.prefix),
        gateway: hub.gateway.clone(),
    };
    if let Some(data) = take_annotation(&mut metadata, CONVERSION_DATA_ANNOTATION)
        && let Ok(stored) = serde_json::from_str::<Value>(&data)
        && stored.get("apiVersion").and_then(Value::as_str).is_none_or(|v| v == V1ALPHA1)
        && let Some(stored_spec) = stored.get("spec").cloned()
        && let Ok(restored) = serde_json::from_value::<v1alpha1::IPPoolSpec>(stored_spec)
        && let Ok((again, _)) = v1alpha1_to_v1alpha2_spec(&restored)
        && again.addresses == hub.addresses
        && again.prefix == hub.prefix
        && again.gateway == hub.gateway
    {
        spoke = restored;
    }
    let hub_only = hub.allocate_reserved_ip_addresses.is_some()
        || hub.excluded_addresses.is_some()
        || hub.address_reuse_grace_period_seconds.is_some()
        || hub.pre_allocations.is_some()
        || hub.subnets.is_some()
        || hub.allocation_strategy.is_some()
        || hub.quota.is_some();
    if hub_only {
        let data = json!({"apiVersion": V1ALPHA2, "kind": kind, "spec": to_value(&hub)});
        annotations(&mut metadata).insert(CONVERSION_DATA_ANNOTATION.into(), json!(data.to_string()));
    }
    Ok(assemble(V1ALPHA1, &kind, metadata, to_value(&spoke), status))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v1(kind: &str, spec: Value) -> Value {
        json!({"apiVersion": V1ALPHA1, "kind": kind, "metadata": {"name": "p", "namespace": "ns", "uid": "u1"}, "spec": spec})
    }

    fn v2(kind: &str, spec: Value) -> Value {
        json!({"apiVersion": V1ALPHA2, "kind": kind, "metadata": {"name": "p", "namespace": "ns", "uid": "u1"}, "spec": spec})
    }

    const KINDS: [&str; 2] = ["InClusterIPPool", "GlobalInClusterIPPool"];

    /// The Go provider's conversion table (reference §1.6).
    #[test]
    fn v1alpha1_to_v1alpha2_table() {
        let cases = [
            (
                json!({"gateway": "1.1.1.1", "subnet": "1.1.1.1/28", "start": "1.1.1.1", "end": "1.1.1.10", "prefix": 28}),
                json!({"addresses": ["1.1.1.1-1.1.1.10"], "prefix": 28, "gateway": "1.1.1.1"}),
            ),
            (
                json!({"subnet": "1.1.1.0/24", "start": "1.1.1.10", "end": "1.1.1.15", "gateway": "1.1.1.1"}),
                json!({"addresses": ["1.1.1.10-1.1.1.15"], "prefix": 24, "gateway": "1.1.1.1"}),
            ),
            (
                json!({"subnet": "1.1.1.0/24", "gateway": "1.1.1.1"}),
                json!({"addresses": ["1.1.1.1-1.1.1.254"], "prefix": 24, "gateway": "1.1.1.1"}),
            ),
            (
                json!({"addresses": ["1.1.1.1-1.1.1.10"], "prefix": 28}),
                json!({"addresses": ["1.1.1.1-1.1.1.10"], "prefix": 28}),
            ),
        ];
        for kind in KINDS {
            for (from, to) in &cases {
                let hub = convert(&v1(kind, from.clone()), V1ALPHA2).unwrap();
                assert_eq!(hub["spec"], *to, "{kind} {from}");
                assert_eq!(hub["apiVersion"], V1ALPHA2);
                assert_eq!(hub["metadata"]["uid"], "u1", "metadata is kept");
            }
        }
    }

    #[test]
    fn a_v1alpha1_subnet_pool_reads_back_as_written_defaults_filled() {
        for kind in KINDS {
            let hub = convert(&v1(kind, json!({"subnet": "1.1.1.1/24", "gateway": "1.1.1.1"})), V1ALPHA2).unwrap();
            assert!(hub["metadata"]["annotations"][CONVERSION_DATA_ANNOTATION].is_string());
            let back = convert(&hub, V1ALPHA1).unwrap();
            assert_eq!(
                back["spec"],
                json!({"subnet": "1.1.1.1/24", "start": "1.1.1.1", "end": "1.1.1.254", "prefix": 24, "gateway": "1.1.1.1"}),
                "{kind}"
            );
            assert!(back["metadata"].get("annotations").is_none(), "the hub annotation does not leak: {back}");
        }
    }

    #[test]
    fn a_stale_v1alpha1_spec_is_not_restored_after_a_v1alpha2_edit_for_either_kind() {
        for kind in KINDS {
            let mut hub = convert(&v1(kind, json!({"subnet": "1.1.1.0/24"})), V1ALPHA2).unwrap();
            hub["spec"]["addresses"] = json!(["1.1.1.100-1.1.1.200"]);
            let back = convert(&hub, V1ALPHA1).unwrap();
            assert_eq!(back["spec"], json!({"addresses": ["1.1.1.100-1.1.1.200"], "prefix": 24}), "{kind}");
        }
    }

    #[test]
    fn hub_only_fields_survive_a_round_trip_through_v1alpha1() {
        let spec = json!({
            "addresses": ["10.0.0.10-10.0.0.20"], "prefix": 24, "gateway": "10.0.0.1",
            "allocateReservedIPAddresses": true, "excludedAddresses": ["10.0.0.15"],
            "addressReuseGracePeriodSeconds": 30, "preAllocations": {"claim-a": "10.0.0.12"},
            "subnets": [{"addresses": ["10.0.1.10-10.0.1.20"], "prefix": 25, "gateway": "10.0.1.1",
                         "excludedAddresses": ["10.0.1.15"]}],
            "allocationStrategy": "LeastRecentlyReleased",
            "quota": {"perCluster": 4, "clusters": {"ns/big": 16}}
        });
        // A hub-only field alone is carried too.
        let strategy_alone = json!({"addresses": ["10.0.0.10-10.0.0.20"], "prefix": 24, "gateway": "10.0.0.1",
                                    "allocationStrategy": "Random"});
        let quota_alone = json!({"addresses": ["10.0.0.10-10.0.0.20"], "prefix": 24, "gateway": "10.0.0.1",
                                 "quota": {"perCluster": 0}});
        let alone = |k| [(k, &spec), (k, &strategy_alone), (k, &quota_alone)];
        for (kind, spec) in KINDS.into_iter().flat_map(alone) {
            let hub = v2(kind, spec.clone());
            let spoke = convert(&hub, V1ALPHA1).unwrap();
            assert_eq!(
                spoke["spec"],
                json!({"addresses": ["10.0.0.10-10.0.0.20"], "prefix": 24, "gateway": "10.0.0.1"})
            );
            let again = convert(&spoke, V1ALPHA2).unwrap();
            assert_eq!(again, hub, "{kind}: nothing lost, nothing added");
        }
    }

    #[test]
    fn a_plain_v1alpha2_pool_round_trips_without_annotations() {
        let hub = v2("InClusterIPPool", json!({"addresses": ["10.0.0.1"], "prefix": 24}));
        let spoke = convert(&hub, V1ALPHA1).unwrap();
        assert!(spoke["metadata"].get("annotations").is_none());
        assert_eq!(convert(&spoke, V1ALPHA2).unwrap(), hub);
    }

    #[test]
    fn user_annotations_are_kept() {
        let mut hub = v2("InClusterIPPool", json!({"addresses": ["10.0.0.1"], "prefix": 24, "excludedAddresses": []}));
        hub["metadata"]["annotations"] = json!({"team": "net"});
        let spoke = convert(&hub, V1ALPHA1).unwrap();
        assert_eq!(spoke["metadata"]["annotations"]["team"], "net");
        assert_eq!(convert(&spoke, V1ALPHA2).unwrap(), hub);
    }

    #[test]
    fn a_go_written_hub_annotation_is_honoured() {
        // What the Go provider stores: the v1alpha1 object without metadata.
        let data = json!({"kind": "InClusterIPPool", "apiVersion": V1ALPHA1,
            "spec": {"subnet": "10.0.0.0/24", "start": "10.0.0.10", "end": "10.0.0.20", "prefix": 24}});
        let mut hub = v2("InClusterIPPool", json!({"addresses": ["10.0.0.10-10.0.0.20"], "prefix": 24}));
        hub["metadata"]["annotations"] = json!({CONVERSION_DATA_ANNOTATION: data.to_string()});
        let spoke = convert(&hub, V1ALPHA1).unwrap();
        assert_eq!(spoke["spec"]["subnet"], "10.0.0.0/24");
        assert_eq!(spoke["spec"]["start"], "10.0.0.10");
    }

    #[test]
    fn errors_name_the_field() {
        let err = convert(&v1("InClusterIPPool", json!({"subnet": "nope"})), V1ALPHA2).unwrap_err();
        assert!(err.to_string().starts_with("spec.subnet: Invalid value: \"nope\""), "{err}");
        let err = convert(&v1("InClusterIPPool", json!({"subnet": "255.255.255.255/32"})), V1ALPHA2).unwrap_err();
        assert!(err.to_string().contains("spec.subnet"), "{err}");
        let err = convert(&v1("InClusterIPPool", json!({"prefix": "x"})), V1ALPHA2).unwrap_err();
        assert!(err.to_string().starts_with("spec.prefix: invalid type"), "{err}");
        assert!(matches!(
            convert(&v2("InClusterPrefixPool", json!({})), V1ALPHA1),
            Err(ConversionError::Unsupported { .. })
        ));
    }

    #[test]
    fn ipv6_and_edges() {
        let hub = convert(&v1("InClusterIPPool", json!({"subnet": "fd00::/120"})), V1ALPHA2).unwrap();
        assert_eq!(hub["spec"], json!({"addresses": ["fd00::1-fd00::fe"], "prefix": 120}));
        let hub = convert(&v1("InClusterIPPool", json!({"subnet": "0.0.0.0/0"})), V1ALPHA2).unwrap();
        assert_eq!(hub["spec"]["addresses"], json!(["0.0.0.1-255.255.255.254"]));
        let hub = convert(&v1("InClusterIPPool", json!({"subnet": "::/0"})), V1ALPHA2).unwrap();
        assert_eq!(hub["spec"]["addresses"], json!(["::1-ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe"]));
    }
}
