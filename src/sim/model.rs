//! The world the simulation plays in: the namespaces, claim names, pools and their shapes, and the truth every
//! invariant is checked against, computed here independently of the allocator (the pools are small enough to list).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde_json::{Value, json};

use super::server::Kind;
use crate::api::PoolKind;
use crate::index::{ObjectKey, PoolKey};
use crate::ipam::AllocationStrategy;

pub const NAMESPACES: [&str; 2] = ["a", "b"];
/// Few names, so that claims are deleted and created again under the same name all the time.
pub const CLAIM_NAMES: [&str; 5] = ["m0", "m1", "m2", "m3", "m4"];
pub const CLUSTER: &str = "cl";

/// One of the simulation's pools.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PoolId {
    /// An InClusterIPPool named `ip` in namespace a or b (the same name in two namespaces: independent pools).
    Ip(usize),
    /// The GlobalInClusterIPPool `gip`, shared by both namespaces, and the one a move takes addresses from.
    Global,
    /// The InClusterPrefixPool `pp` in namespace a.
    Prefix,
}

pub const POOLS: [PoolId; 4] = [PoolId::Ip(0), PoolId::Ip(1), PoolId::Global, PoolId::Prefix];

impl PoolId {
    pub fn kind(self) -> PoolKind {
        match self {
            PoolId::Ip(_) => PoolKind::InClusterIPPool,
            PoolId::Global => PoolKind::GlobalInClusterIPPool,
            PoolId::Prefix => PoolKind::InClusterPrefixPool,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            PoolId::Ip(_) => "ip",
            PoolId::Global => "gip",
            PoolId::Prefix => "pp",
        }
    }

    pub fn namespace(self) -> &'static str {
        match self {
            PoolId::Ip(n) => NAMESPACES[n],
            PoolId::Global => "",
            PoolId::Prefix => "a",
        }
    }

    pub fn server_kind(self) -> Kind {
        Kind::Pool(self.kind())
    }

    pub fn key(self) -> ObjectKey {
        ObjectKey::new(self.namespace(), self.name())
    }

    pub fn pool_key(self) -> PoolKey {
        PoolKey::new(self.kind(), self.namespace(), self.name())
    }

    /// The pools a claim in `namespace` may name.
    pub fn usable_from(namespace: usize) -> Vec<PoolId> {
        let mut pools = vec![PoolId::Ip(namespace), PoolId::Global];
        if namespace == 0 {
            pools.push(PoolId::Prefix);
        }
        pools
    }

    /// The pool an IPAddress's `poolRef` and namespace name, if one of ours.
    pub fn of_reference(kind: &str, name: &str, namespace: &str) -> Option<PoolId> {
        POOLS
            .into_iter()
            .find(|p| p.kind().kind() == kind && p.name() == name && (p.is_global() || p.namespace() == namespace))
    }

    pub fn is_global(self) -> bool {
        self.kind().is_global()
    }
}

/// The spec of a pool, small: `size` consecutive addresses (IPv4 or IPv6) after `offset`, and an IP pool's `second`
/// addresses in a second subnet (docs/compatibility.md D19) of its own prefix and gateway; or for the prefix pool the
/// first `size` /64s of fd10::/62 (size 2 or 4).
///
/// `Sequential` is written as no `allocationStrategy` at all (its default), `null` in the merge patch of an edit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Shape {
    pub v6: bool,
    pub offset: u8,
    pub size: u8,
    pub second: u8,
    /// An IP pool's `spec.allocationStrategy` (docs/compatibility.md D20).
    pub strategy: AllocationStrategy,
    /// An IP pool's `spec.quota.perCluster` (docs/compatibility.md D21).
    pub quota: Option<u8>,
}

/// Where an IP pool's second subnet starts above its base: the /25 (IPv4) or /96 (IPv6) after the first subnet's /24
/// or /64.
fn second_subnet(v6: bool) -> u128 {
    if v6 { 1 << 64 } else { 256 }
}

impl Shape {
    pub fn spec(self, pool: PoolId) -> Value {
        match pool {
            PoolId::Prefix => {
                let prefix = if self.size <= 2 { "fd10::/63" } else { "fd10::/62" };
                json!({"prefixes": [prefix], "allocationPrefixLength": 64})
            }
            _ => {
                let (first, last) = (self.first(), self.first() + u128::from(self.size) - 1);
                let range = format!("{}-{}", self.ip(pool, first), self.ip(pool, last));
                let (prefix, gateway) = Shape::addressing(pool, self.ip(pool, first));
                // `subnets: null` takes a second subnet away in the merge patch of an edit.
                let mut spec = json!({"addresses": [range], "prefix": prefix, "gateway": gateway, "subnets": null,
                    "allocationStrategy": null, "quota": null});
                if let Some(quota) = self.quota {
                    spec["quota"] = json!({"perCluster": quota});
                }
                if self.strategy != AllocationStrategy::Sequential {
                    spec["allocationStrategy"] = json!(self.strategy.name());
                }
                if self.second > 0 {
                    let at = second_subnet(self.v6);
                    let range = format!("{}-{}", self.ip(pool, at + 1), self.ip(pool, at + u128::from(self.second)));
                    let (prefix, gateway) = Shape::addressing(pool, self.ip(pool, at + 1));
                    spec["subnets"] = json!([{"addresses": [range], "prefix": prefix, "gateway": gateway}]);
                }
                spec
            }
        }
    }

    /// The prefix and gateway of the subnet of an IP pool that `address` is in, whatever the pool's shape: the pool's
    /// /24 (gateway .254) or /64 (gateway ::ff), or the /25 (gateway .126) or /96 (gateway ::ff) of its second subnet.
    pub fn addressing(pool: PoolId, address: IpAddr) -> (i64, String) {
        let v6 = address.is_ipv6();
        let shape = Shape { v6, offset: 0, size: 0, ..Shape::default() };
        let at = second_subnet(v6);
        let second = Held::of_address(pool, &json!({"spec": {"address": address.to_string()}}))
            .is_some_and(|h| h.start >= shape.base(pool) + at);
        match (v6, second) {
            (false, false) => (24, shape.ip(pool, 254).to_string()),
            (false, true) => (25, shape.ip(pool, at + 126).to_string()),
            (true, false) => (64, shape.ip(pool, 0xff).to_string()),
            (true, true) => (96, shape.ip(pool, at + 0xff).to_string()),
        }
    }

    fn base(self, pool: PoolId) -> u128 {
        match (pool, self.v6) {
            (PoolId::Global, false) => u128::from(u32::from(Ipv4Addr::new(10, 1, 0, 0))),
            (_, false) => u128::from(u32::from(Ipv4Addr::new(10, 0, 0, 0))),
            (PoolId::Global, true) => u128::from(Ipv6Addr::new(0xfd01, 0, 0, 0, 0, 0, 0, 0)),
            (_, true) => u128::from(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0)),
        }
    }

    fn first(self) -> u128 {
        1 + u128::from(self.offset)
    }

    /// The address `low` above the base of the pool's /24 or /64.
    fn ip(self, pool: PoolId, low: u128) -> IpAddr {
        Held { v6: self.v6, start: self.base(pool) + low, len: 0 }.address()
    }

    /// Every address (or child prefix) the pool hands out, as [`Held`] ranges.
    pub fn allocatable(self, pool: PoolId) -> Vec<Held> {
        match pool {
            PoolId::Prefix => {
                let base = u128::from(Ipv6Addr::new(0xfd10, 0, 0, 0, 0, 0, 0, 0));
                let children = if self.size <= 2 { 2 } else { 4 };
                (0..children).map(|i| Held { v6: true, start: base + (i << 64), len: 64 }).collect()
            }
            _ => {
                let base = self.base(pool);
                let len = if self.v6 { 128 } else { 32 };
                let second = base + second_subnet(self.v6) + 1;
                (0..u128::from(self.size))
                    .map(|i| base + self.first() + i)
                    .chain((0..u128::from(self.second)).map(|i| second + i))
                    .map(|start| Held { v6: self.v6, start, len })
                    .collect()
            }
        }
    }
}

/// What an IPAddress (or a reservation) holds: an address, or a child prefix, as a range of the family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Held {
    pub v6: bool,
    pub start: u128,
    /// The prefix length of the range (32 or 128 for a single address).
    pub len: u8,
}

impl Held {
    fn bits(self) -> u8 {
        if self.v6 { 128 } else { 32 }
    }

    fn end(self) -> u128 {
        let size = if self.bits() - self.len >= 128 { u128::MAX } else { (1u128 << (self.bits() - self.len)) - 1 };
        self.start.saturating_add(size)
    }

    pub fn overlaps(self, other: Held) -> bool {
        self.v6 == other.v6 && self.start <= other.end() && other.start <= self.end()
    }

    /// What an IPAddress of `pool` holds, from its spec.
    pub fn of_address(pool: PoolId, object: &Value) -> Option<Held> {
        let address: IpAddr = object.pointer("/spec/address")?.as_str()?.parse().ok()?;
        let (v6, start) = match address {
            IpAddr::V4(a) => (false, u128::from(u32::from(a))),
            IpAddr::V6(a) => (true, u128::from(a)),
        };
        let len = match pool {
            PoolId::Prefix => u8::try_from(object.pointer("/spec/prefix")?.as_i64()?).ok()?,
            _ if v6 => 128,
            _ => 32,
        };
        Some(Held { v6, start, len })
    }

    /// An entry of the moved-away annotation, as our controllers write it.
    pub fn of_entry(pool: PoolId, entry: &str) -> Option<Held> {
        // `<address>@<namespace>/<name>`, or a bare `<address>`.
        let entry = entry.split_once('@').map_or(entry, |(reserved, _)| reserved);
        let (address, len) = match entry.split_once('/') {
            Some((a, l)) => (a, Some(l.parse::<u8>().ok()?)),
            None => (entry, None),
        };
        let object = json!({"spec": {"address": address, "prefix": len}});
        Held::of_address(pool, &object)
    }

    pub fn address(self) -> IpAddr {
        if self.v6 {
            IpAddr::V6(Ipv6Addr::from(self.start))
        } else {
            IpAddr::V4(Ipv4Addr::from(u32::try_from(self.start).unwrap_or(0)))
        }
    }
}

impl std::fmt::Display for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.len == self.bits() {
            write!(f, "{}", self.address())
        } else {
            write!(f, "{}/{}", self.address(), self.len)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_list_what_the_allocator_hands_out() {
        let shape = Shape { v6: false, offset: 1, size: 3, second: 2, ..Shape::default() };
        assert_eq!(shape.spec(PoolId::Ip(0))["addresses"], json!(["10.0.0.2-10.0.0.4"]));
        assert_eq!(
            shape.spec(PoolId::Global)["subnets"],
            json!([{"addresses": ["10.1.1.1-10.1.1.2"], "prefix": 25, "gateway": "10.1.1.126"}])
        );
        let held: Vec<String> = shape.allocatable(PoolId::Global).iter().map(ToString::to_string).collect();
        assert_eq!(held, ["10.1.0.2", "10.1.0.3", "10.1.0.4", "10.1.1.1", "10.1.1.2"]);
        let v6 = Shape { v6: true, offset: 0, size: 2, second: 1, ..Shape::default() };
        assert_eq!(v6.spec(PoolId::Ip(1))["addresses"], json!(["fd00::1-fd00::2"]));
        assert_eq!(
            v6.spec(PoolId::Ip(1))["subnets"],
            json!([{"addresses": ["fd00:0:0:1::1-fd00:0:0:1::1"], "prefix": 96, "gateway": "fd00:0:0:1::ff"}])
        );
        let ip = |s: &str| s.parse().unwrap();
        assert_eq!(Shape::addressing(PoolId::Ip(0), ip("10.0.0.3")), (24, "10.0.0.254".to_owned()));
        assert_eq!(Shape::addressing(PoolId::Global, ip("10.1.1.2")), (25, "10.1.1.126".to_owned()));
        assert_eq!(Shape::addressing(PoolId::Ip(0), ip("fd00::2")), (64, "fd00::ff".to_owned()));
        let prefixes: Vec<String> = v6.allocatable(PoolId::Prefix).iter().map(ToString::to_string).collect();
        assert_eq!(prefixes, ["fd10::/64", "fd10:0:0:1::/64"]);
        let a = Held::of_entry(PoolId::Prefix, "fd10:0:0:1::/64").unwrap();
        assert!(a.overlaps(Held::of_entry(PoolId::Prefix, "fd10::/63").unwrap()));
        assert!(!a.overlaps(Held::of_entry(PoolId::Prefix, "fd10::/64").unwrap()));
    }
}
