//! The claims of our pool kinds, as compact [`Claim`]s by namespace and name, fed by the claim watch. A set of
//! `Arc<Claim>` looked up by the claim's own key: no second copy of the name per claim.

use std::borrow::Borrow;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use super::registry::ObjectKey;
use crate::capi::Claim;

#[derive(Default)]
pub struct ClaimCache {
    claims: HashSet<Cached>,
}

struct Cached(Arc<Claim>);

impl Borrow<ObjectKey> for Cached {
    fn borrow(&self) -> &ObjectKey {
        &self.0.key
    }
}

impl Hash for Cached {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.key.hash(state);
    }
}

impl PartialEq for Cached {
    fn eq(&self, other: &Self) -> bool {
        self.0.key == other.0.key
    }
}

impl Eq for Cached {}

impl ClaimCache {
    pub fn get(&self, key: &ObjectKey) -> Option<Arc<Claim>> {
        self.claims.get(key).map(|c| c.0.clone())
    }

    /// Stores the claim, replacing the one of the same namespace and name.
    pub fn insert(&mut self, claim: Arc<Claim>) {
        self.claims.replace(Cached(claim));
    }

    pub fn remove(&mut self, key: &ObjectKey) -> Option<Arc<Claim>> {
        self.claims.take(key).map(|c| c.0)
    }

    pub fn len(&self) -> usize {
        self.claims.len()
    }

    /// The keys of the cached claims for which `predicate` holds.
    pub fn keys_where(&self, predicate: impl Fn(&Claim) -> bool) -> Vec<ObjectKey> {
        self.claims.iter().filter(|c| predicate(&c.0)).map(|c| c.0.key.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(namespace: &str, name: &str, pool: &str) -> Arc<Claim> {
        Arc::new(Claim { key: ObjectKey::new(namespace, name), pool_name: pool.into(), ..Claim::default() })
    }

    #[test]
    fn claims_are_found_replaced_and_removed_by_key() {
        let mut cache = ClaimCache::default();
        cache.insert(claim("a", "c1", "p1"));
        cache.insert(claim("b", "c1", "p1"));
        cache.insert(claim("a", "c1", "p2"));
        assert_eq!(cache.len(), 2);
        assert_eq!(&*cache.get(&ObjectKey::new("a", "c1")).unwrap().pool_name, "p2");
        assert_eq!(cache.keys_where(|c| &*c.pool_name == "p1"), vec![ObjectKey::new("b", "c1")]);
        assert!(cache.remove(&ObjectKey::new("a", "c1")).is_some());
        assert!(cache.get(&ObjectKey::new("a", "c1")).is_none());
        assert!(cache.remove(&ObjectKey::new("a", "c1")).is_none());
    }
}
