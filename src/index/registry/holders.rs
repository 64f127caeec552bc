//! A pool's holders, and how many of them each Cluster has: counted as they come and go, so that a quota is checked
//! in constant time (docs/compatibility.md D21).

use std::collections::HashMap;

use super::{Held, ObjectKey};
use crate::compact::ClusterKey;

pub(super) struct Holding {
    pub(super) held: Held,
    /// Seen in the API server (watch or a successful create); false while our create is in flight.
    pub(super) confirmed: bool,
    /// The Cluster whose claim it is for: the IPAddress's cluster-name label once recorded, the claim's Cluster while
    /// its create is in flight; none for a placeholder but a hold set aside (its claim's).
    pub(super) cluster: Option<ClusterKey>,
}

impl Holding {
    pub(super) fn new(held: Held, confirmed: bool, cluster: Option<ClusterKey>) -> Self {
        Self { held, confirmed, cluster }
    }
}

/// The holders of a pool by key, read as a map; written only here, so that each Cluster's count stays right.
#[derive(Default)]
pub(super) struct Holders {
    by_key: HashMap<ObjectKey, Holding>,
    /// How many holders each Cluster has (no entry for none).
    per_cluster: HashMap<ClusterKey, u32>,
}

impl std::ops::Deref for Holders {
    type Target = HashMap<ObjectKey, Holding>;

    fn deref(&self) -> &Self::Target {
        &self.by_key
    }
}

impl Holders {
    pub(super) fn insert(&mut self, key: ObjectKey, holding: Holding) -> Option<Holding> {
        let old = self.remove(&key);
        self.count(holding.cluster.as_ref(), true);
        self.by_key.insert(key, holding);
        old
    }

    pub(super) fn remove(&mut self, key: &ObjectKey) -> Option<Holding> {
        let holding = self.by_key.remove(key)?;
        self.count(holding.cluster.as_ref(), false);
        Some(holding)
    }

    pub(super) fn retain(&mut self, mut keep: impl FnMut(&ObjectKey, &Holding) -> bool) {
        let gone: Vec<ObjectKey> = self.by_key.iter().filter(|(k, h)| !keep(k, h)).map(|(k, _)| k.clone()).collect();
        for key in gone {
            self.remove(&key);
        }
    }

    /// Sets whether `key`'s hold is confirmed; returns what it was (`None`: no such holder).
    pub(super) fn set_confirmed(&mut self, key: &ObjectKey, confirmed: bool) -> Option<bool> {
        self.by_key.get_mut(key).map(|h| std::mem::replace(&mut h.confirmed, confirmed))
    }

    /// Counts `key`'s hold for `cluster` from now on (its IPAddress's label changed, or it came over from a
    /// placeholder); returns whether that changed anything.
    pub(super) fn set_cluster(&mut self, key: &ObjectKey, cluster: Option<ClusterKey>) -> bool {
        let Some(holding) = self.by_key.get_mut(key) else { return false };
        if holding.cluster == cluster {
            return false;
        }
        let old = std::mem::replace(&mut holding.cluster, cluster.clone());
        self.count(old.as_ref(), false);
        self.count(cluster.as_ref(), true);
        true
    }

    /// How many holders `cluster` has.
    pub(super) fn of_cluster(&self, cluster: &str) -> u32 {
        self.per_cluster.get(cluster).copied().unwrap_or(0)
    }

    fn count(&mut self, cluster: Option<&ClusterKey>, up: bool) {
        let Some(cluster) = cluster else { return };
        if up {
            *self.per_cluster.entry(cluster.clone()).or_default() += 1;
        } else if let Some(n) = self.per_cluster.get_mut(cluster) {
            *n -= 1;
            if *n == 0 {
                self.per_cluster.remove(cluster);
            }
        }
    }

    /// Whether each Cluster's count is what a count of the holders says (the simulation's invariant).
    #[cfg(test)]
    pub(super) fn check_counts(&self) -> Result<(), String> {
        let mut recount: HashMap<ClusterKey, u32> = HashMap::new();
        for cluster in self.by_key.values().filter_map(|h| h.cluster.clone()) {
            *recount.entry(cluster).or_default() += 1;
        }
        if recount != self.per_cluster {
            return Err(format!(
                "the Clusters' counts {:?} are not a count of the holders {recount:?}",
                self.per_cluster
            ));
        }
        Ok(())
    }
}
