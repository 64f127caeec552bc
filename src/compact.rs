//! Small representations for what the controllers cache per object, so that 100,000 claims and IPAddresses fit the
//! memory target: shared strings for the few distinct namespaces, pool and cluster names, UIDs as 16 bytes, and
//! digests in place of texts that are only ever compared.

use std::collections::HashSet;
use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher, Hash};
use std::sync::{Arc, LazyLock, Mutex};

static INTERNED: LazyLock<Mutex<HashSet<Arc<str>>>> = LazyLock::new(Default::default);

/// One shared copy of a string that many cached objects repeat (a namespace, a pool or cluster name). The set only
/// grows: it holds each distinct namespace, pool name and cluster name seen, a handful per cluster.
pub fn intern(s: &str) -> Arc<str> {
    let mut set = INTERNED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(existing) = set.get(s) {
        return existing.clone();
    }
    let shared: Arc<str> = Arc::from(s);
    set.insert(shared.clone());
    shared
}

/// A namespaced object's name: an IPAddress, or the claim of the same name and namespace; the namespace is shared.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    pub namespace: Arc<str>,
    pub name: Box<str>,
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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

/// A stable 64-bit digest (fixed keys, so equal values give equal digests for the life of the process).
pub fn digest<T: Hash + ?Sized>(value: &T) -> u64 {
    BuildHasherDefault::<DefaultHasher>::default().hash_one(value)
}

#[cfg(test)]
mod tests {
    use super::*;

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
