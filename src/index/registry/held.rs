//! What the registry's holders are keyed by and hold, and what it answers with.

use std::net::{IpAddr, Ipv6Addr};

use super::pool_state::parse_ipv6;
use crate::api::PoolKind;
use crate::capi::IpAddressSpec;
use crate::compact::ObjectKey;
pub use crate::compact::PoolKey;
use crate::ipam::Allocation;
use crate::ipam::address::parse_ip;

/// What an IPAddress holds in its pool: an address (IP pools) or a prefix (prefix pools); `None` when unparsable.
/// Byte-aligned (20 bytes, where the allocator's 16-byte-aligned `Allocation` would make it 48): one is kept per
/// IPAddress.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Held {
    Ip(Option<IpAddr>),
    Prefix(Option<HeldPrefix>),
}

/// A child prefix as held: its base address and length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HeldPrefix {
    pub base: Ipv6Addr,
    pub len: u8,
}

impl From<Allocation> for HeldPrefix {
    fn from(a: Allocation) -> Self {
        HeldPrefix { base: Ipv6Addr::from(a.base), len: a.len }
    }
}

impl HeldPrefix {
    pub(super) fn allocation(self) -> Allocation {
        Allocation { base: u128::from(self.base), len: self.len }
    }
}

impl Held {
    /// Parses the address an IPAddress spec holds, for a pool of `kind`, as Go's netip reads it: a zone, which a
    /// hand-made IPAddress may carry, is no part of the address, so the address stays held.
    pub fn of(kind: PoolKind, spec: &IpAddressSpec) -> Held {
        if kind.is_prefix_pool() {
            let allocation = parse_ipv6(&spec.address)
                .zip(spec.prefix.and_then(|p| u8::try_from(p).ok()))
                .and_then(|(a, len)| Allocation::new(a, len));
            Held::Prefix(allocation.map(HeldPrefix::from))
        } else {
            Held::Ip(parse_ip(&spec.address).ok())
        }
    }
}

impl Held {
    /// Whether two holds share an address: the same address, or child prefixes that overlap whatever their lengths
    /// (one nested in the other: a pool edited past the webhook, or an IPAddress made by hand).
    pub fn overlaps(self, other: Held) -> bool {
        match (self, other) {
            (Held::Prefix(Some(a)), Held::Prefix(Some(b))) => a.allocation().overlaps(&b.allocation()),
            _ => self == other,
        }
    }

    /// Of two overlapping holds, the one containing the other (the shorter prefix).
    pub(super) fn wider(self, other: Held) -> Held {
        match (self, other) {
            (Held::Prefix(Some(a)), Held::Prefix(Some(b))) if b.len < a.len => other,
            _ => self,
        }
    }

    /// The address an IPAddress of it shows in `spec.address`: the address, or the child prefix's base address.
    pub fn address(self) -> Option<IpAddr> {
        match self {
            Held::Ip(ip) => ip,
            Held::Prefix(p) => p.map(|a| IpAddr::V6(a.base)),
        }
    }
}

impl std::fmt::Display for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Held::Ip(Some(ip)) => write!(f, "{ip}"),
            Held::Prefix(Some(a)) => write!(f, "{}/{}", a.base, a.len),
            Held::Ip(None) | Held::Prefix(None) => f.write_str("(unparsable)"),
        }
    }
}

/// The key of a reservation: an address of a global pool that an IPAddress took with it when `clusterctl move` moved
/// its Cluster to another management cluster (`super::moved_away`). Keyed by the address, in no namespace: no
/// IPAddress key is ever equal to it.
pub fn reservation_key(held: Held) -> ObjectKey {
    ObjectKey::new("", &held.to_string())
}

/// Whether a holder is a reservation of an address moved away.
pub fn is_reservation(key: &ObjectKey) -> bool {
    is_placeholder(key) && !super::is_pin(key) && !is_aside(key)
}

/// The key of the hold set aside for the claim of `address`'s name (`Registry::set_aside`): in no namespace, like a
/// reservation, with a prefix no address has.
pub fn aside_key(address: &ObjectKey) -> ObjectKey {
    ObjectKey::new("", &format!("{ASIDE_PREFIX}{}/{}", address.namespace, address.name))
}

const ASIDE_PREFIX: &str = "aside for ";

/// Whether a holder is a hold set aside for a claim ([`aside_key`]).
pub fn is_aside(key: &ObjectKey) -> bool {
    key.namespace.is_empty() && key.name.starts_with(ASIDE_PREFIX)
}

/// Whether a holder is no IPAddress: a reservation, the placeholder of a pinned address, or a hold set aside.
pub fn is_placeholder(key: &ObjectKey) -> bool {
    key.namespace.is_empty()
}

/// One address held by more than one IPAddress of a pool: something handed it out twice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Duplicate {
    pub pool: PoolKey,
    pub held: Held,
    /// Every IPAddress holding it, sorted.
    pub holders: Vec<ObjectKey>,
}

impl std::fmt::Display for Duplicate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self.holders.iter().map(ToString::to_string).collect();
        write!(f, "{} is held by more than one IPAddress: {}", self.held, names.join(", "))
    }
}

/// A new address for a claim.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assigned {
    /// The address (IP pools) or the child prefix's base address (prefix pools).
    pub address: IpAddr,
    /// `IPAddress.spec.prefix`: the pool's prefix, or the allocation length of a prefix pool.
    pub prefix: i64,
    pub gateway: Option<String>,
}

#[derive(Clone, Debug, thiserror::Error)]
pub enum AllocateError {
    #[error("{pool} has no free address")]
    Exhausted { pool: PoolKey },
    /// docs/compatibility.md D21.
    #[error("Cluster {cluster} holds {used} address(es) of {pool}, its quota of {quota} (spec.quota)")]
    QuotaExceeded { pool: PoolKey, cluster: String, used: u32, quota: u32 },
    #[error("{pool} has an invalid spec: {reason}")]
    InvalidPool { pool: PoolKey, reason: String },
    #[error("{pool} is not loaded yet")]
    Unknown { pool: PoolKey },
    #[error("requested address {requested} cannot be allocated from {pool}: {reason}")]
    Requested { pool: PoolKey, requested: String, reason: String },
    /// The index's, not the allocator's: the pool's `cluster.x-k8s.io/watch-filter` label gives it to the manager of
    /// another shard, which cannot see a hold of ours.
    #[error("{pool} is served by the manager of another shard (its label cluster.x-k8s.io/watch-filter)")]
    ServedElsewhere { pool: PoolKey },
}
