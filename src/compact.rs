//! Small representations for what the controllers cache per object, so that 100,000 claims and IPAddresses fit the
//! memory target: shared strings for the few distinct namespaces, pool and cluster names, UIDs as 16 bytes, and
//! digests in place of texts that are only ever compared.

use parking_lot::Mutex;
use std::collections::HashSet;
use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher, Hash};
use std::sync::{Arc, LazyLock};

use crate::api::PoolKind;

static INTERNED: LazyLock<Mutex<HashSet<Arc<str>>>> = LazyLock::new(Default::default);

/// One shared copy of a string that many cached objects repeat (a namespace, a pool or cluster name). The set only
/// grows: it holds each distinct namespace, pool name and cluster name seen, a handful per cluster.
pub fn intern(s: &str) -> Arc<str> {
    let mut set = INTERNED.lock();
    if let Some(existing) = set.get(s) {
        return existing.clone();
    }
    let shared: Arc<str> = Arc::from(s);
    set.insert(shared.clone());
    shared
}

/// A Cluster as a pool's quota names it (docs/compatibility.md D21): `namespace/name`, shared (a handful per Cluster,
/// many holders each).
pub type ClusterKey = Arc<str>;

/// The key of the Cluster `name` of `namespace`.
pub fn cluster_key(namespace: &str, name: &str) -> ClusterKey {
    intern(&format!("{namespace}/{name}"))
}

/// A namespaced object's name: an IPAddress, or the claim of the same name and namespace; the namespace is shared.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    pub namespace: Arc<str>,
    pub name: Arc<str>,
}

impl ObjectKey {
    pub fn new(namespace: &str, name: &str) -> Self {
        Self { namespace: intern(namespace), name: name.into() }
    }
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// An object UID in 16 bytes (byte-aligned, so an `Option<Uid>` takes 17). The API server's UIDs are UUIDs; anything else is kept as a 128-bit digest (equal
/// strings stay equal, distinct ones differ but for a 2^-128 chance).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Uid([u8; 16]);

impl Uid {
    pub fn of(s: &str) -> Uid {
        let hex: String = s.chars().filter(|c| *c != '-').collect();
        match u128::from_str_radix(&hex, 16) {
            Ok(v) if hex.len() == 32 && s.len() == 36 => Uid(v.to_be_bytes()),
            _ => Uid(((u128::from(digest(&(0u8, s))) << 64) | u128::from(digest(&(1u8, s)))).to_be_bytes()),
        }
    }
}

/// A claim's UID as the text it goes back into (owner references, Events): a canonical UUID, as the API server makes
/// them, in 16 bytes; anything else as written.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum UidText {
    Uuid(Uid),
    Other(Box<str>),
}

impl Default for UidText {
    fn default() -> Self {
        UidText::Other("".into())
    }
}

impl UidText {
    pub fn of(s: &str) -> UidText {
        let uid = Uid::of(s);
        if uid.to_string() == s { UidText::Uuid(uid) } else { UidText::Other(s.into()) }
    }

    pub fn uid(&self) -> Uid {
        match self {
            UidText::Uuid(uid) => *uid,
            UidText::Other(text) => Uid::of(text),
        }
    }
}

impl From<&str> for UidText {
    fn from(s: &str) -> Self {
        UidText::of(s)
    }
}

impl std::fmt::Display for UidText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UidText::Uuid(uid) => uid.fmt(f),
            UidText::Other(text) => f.write_str(text),
        }
    }
}

impl std::fmt::Display for Uid {
    /// The canonical UUID text (lowercase, hyphenated).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let b = &self.0;
        for (i, byte) in b.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                f.write_str("-")?;
            }
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

/// A resourceVersion kept as the precondition of our next write to the object. The API server's are decimal etcd
/// revisions, kept in 8 bytes; any other text (they are opaque to clients) is not kept, and the writer reads the live
/// object instead.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResourceVersion(Option<std::num::NonZeroU64>);

impl ResourceVersion {
    pub fn of(s: &str) -> ResourceVersion {
        // Only a canonical decimal is kept (digits, no sign, no leading zero): it comes back exactly as the API server
        // wrote it. Checked without formatting it again: every claim event passes here.
        let canonical = !s.starts_with('0') && !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        ResourceVersion(s.parse().ok().filter(|_| canonical))
    }

    /// The text to send back, when it was kept.
    pub fn text(self) -> Option<String> {
        self.0.map(|n| n.to_string())
    }

    /// The etcd revision, when kept.
    pub fn number(self) -> Option<u64> {
        self.0.map(std::num::NonZeroU64::get)
    }

    /// Whether this one is known to be `other` or newer. The API server's resourceVersions are etcd revisions, which
    /// only grow: the watch, our writes and their answers can be ordered by them. Unknown (not kept) is neither.
    pub fn is_at_least(self, other: ResourceVersion) -> bool {
        matches!((self.0, other.0), (Some(a), Some(b)) if a >= b)
    }
}

/// A stable 64-bit digest (fixed keys, so equal values give equal digests for the life of the process).
pub fn digest<T: Hash + ?Sized>(value: &T) -> u64 {
    BuildHasherDefault::<DefaultHasher>::default().hash_one(value)
}

/// `metadata.creationTimestamp` in Unix seconds, in 4 bytes (enough until 2106); 0 when absent.
pub fn created_seconds(meta: &kube::api::ObjectMeta) -> u32 {
    meta.creation_timestamp.as_ref().map_or(0, |t| u32::try_from(t.0.as_second()).unwrap_or(0))
}

/// A pool: its kind, namespace ("" for global pools) and name (shared strings: every IPAddress of the pool keeps
/// one).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PoolKey {
    pub kind: PoolKind,
    pub namespace: Arc<str>,
    pub name: Arc<str>,
}

impl PoolKey {
    pub fn new(kind: PoolKind, namespace: &str, name: &str) -> Self {
        let namespace = if kind.is_global() { "" } else { namespace };
        Self { kind, namespace: intern(namespace), name: intern(name) }
    }

    /// One shared copy of the key, for what every IPAddress of the pool keeps (8 bytes instead of 40 each).
    pub fn shared(self) -> Arc<PoolKey> {
        static SHARED: std::sync::LazyLock<parking_lot::Mutex<HashSet<Arc<PoolKey>>>> =
            std::sync::LazyLock::new(Default::default);
        let mut set = SHARED.lock();
        if let Some(existing) = set.get(&self) {
            return existing.clone();
        }
        let shared = Arc::new(self);
        set.insert(shared.clone());
        shared
    }
}

impl std::fmt::Display for PoolKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{} {:?}", self.kind, self.name)
        } else {
            write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_versions_are_kept_only_when_they_come_back_unchanged() {
        assert_eq!(ResourceVersion::of("123456").text().as_deref(), Some("123456"));
        for opaque in ["", "0", "0123", "abc", "12a", "-1", "+5", "99999999999999999999999"] {
            assert_eq!(ResourceVersion::of(opaque).text(), None, "{opaque:?}");
        }
        assert_eq!(std::mem::size_of::<ResourceVersion>(), 8);
    }

    #[test]
    fn uuids_are_kept_in_16_bytes_and_written_back_as_they_came() {
        let uuid = "0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0";
        assert!(matches!(UidText::of(uuid), UidText::Uuid(_)));
        assert_eq!(UidText::of(uuid).to_string(), uuid);
        for other in ["0B1C2D3E-4F50-6172-8394-A5B6C7D8E9F0", "not-a-uuid", ""] {
            assert_eq!(UidText::of(other), UidText::Other(other.into()), "{other:?}");
            assert_eq!(UidText::of(other).to_string(), other);
        }
        assert_eq!(UidText::of(uuid).uid(), Uid::of(uuid));
    }

    #[test]
    fn interned_strings_are_shared() {
        let a = intern("default");
        let b = intern(&String::from("default"));
        assert!(Arc::ptr_eq(&a, &b));
        assert_ne!(&*intern("other"), &*a);
    }

    #[test]
    fn uids_compare_like_their_strings() {
        let u = "0b6e2a4c-7c1d-4f7e-9a57-0c2f3f6d8e11";
        assert_eq!(Uid::of(u), Uid::of(u));
        assert_ne!(Uid::of(u), Uid::of("0b6e2a4c-7c1d-4f7e-9a57-0c2f3f6d8e12"));
        // Not a UUID: still equal to itself and distinct from the UUID whose hex it shares.
        assert_eq!(Uid::of("0b6e2a4c7c1d4f7e9a570c2f3f6d8e11"), Uid::of("0b6e2a4c7c1d4f7e9a570c2f3f6d8e11"));
        assert_ne!(Uid::of("0b6e2a4c7c1d4f7e9a570c2f3f6d8e11"), Uid::of(u));
        assert_ne!(Uid::of(""), Uid::of("x"));
    }
}
