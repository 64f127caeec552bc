//! Per-Cluster quotas (docs/compatibility.md D21): how many addresses of a pool the claims of one Cluster may hold,
//! and the claims that wait for their Cluster to hold fewer.

use std::collections::{BTreeMap, HashMap};

use super::holders::Holders;
use super::is_placeholder;
use super::{AllocateError, ObjectKey, PoolKey, PoolSpec, PoolState, Registry, Woken};
use crate::api::v1alpha2::{ClusterUsage, ClusterUsageEntry, PoolQuota};
use crate::compact::ClusterKey;

/// A pool's `spec.quota`, if it has one (IP pools only).
pub(super) fn quota_of(spec: &PoolSpec) -> Option<PoolQuota> {
    match spec {
        PoolSpec::Ip(spec) => spec.quota.clone(),
        PoolSpec::Prefix(_) => None,
    }
}

/// Who an allocation is for, as the pool's quota sees it.
#[derive(Clone, Debug, Default)]
pub struct Claimant {
    /// The claim's Cluster ([`super::cluster_key`]): none for a claim of no Cluster, which no quota limits.
    pub cluster: Option<ClusterKey>,
    /// The address is one the claim's machine uses already (a bound claim's, held again): it is given whatever the
    /// quota, which takes nothing back.
    pub bypasses_quota: bool,
}

impl Claimant {
    pub fn of_cluster(cluster: Option<ClusterKey>) -> Self {
        Self { cluster, bypasses_quota: false }
    }

    pub fn bound(cluster: Option<ClusterKey>) -> Self {
        Self { cluster, bypasses_quota: true }
    }
}

impl PoolState {
    /// Refuses a new address to a claimant whose Cluster holds its quota already.
    pub(super) fn check_quota(&self, pool: &PoolKey, claimant: &Claimant) -> Result<(), AllocateError> {
        let (Some(quota), Some(cluster), false) = (&self.quota, &claimant.cluster, claimant.bypasses_quota) else {
            return Ok(());
        };
        match Self::at_quota(Some(quota), &self.holders, cluster) {
            None => Ok(()),
            Some((used, limit)) => Err(AllocateError::QuotaExceeded {
                pool: pool.clone(),
                cluster: cluster.to_string(),
                used,
                quota: limit,
            }),
        }
    }

    /// What `cluster` holds and its quota, when it holds its quota (or more); `None` when it holds less or has none.
    fn at_quota(quota: Option<&PoolQuota>, holders: &Holders, cluster: &str) -> Option<(u32, u32)> {
        let limit = quota?.limit_of(cluster)?;
        let used = holders.of_cluster(cluster);
        (used >= limit).then_some((used, limit))
    }

    /// The claims waiting for their Cluster to drop below its quota that may go on now: every one of a Cluster below
    /// it (they are few; those that lose the race wait again).
    pub(super) fn take_quota_waiters(&mut self) -> Woken {
        if self.quota_waiters.is_empty() {
            return Vec::new();
        }
        let (quota, holders) = (self.quota.as_ref(), &self.holders);
        let free: Vec<ClusterKey> =
            self.quota_waiters.keys().filter(|c| Self::at_quota(quota, holders, c).is_none()).cloned().collect();
        free.iter().filter_map(|c| self.quota_waiters.remove(c)).flatten().collect()
    }

    /// Takes `claim` off the quota waiters.
    pub(super) fn stop_waiting_for_quota(&mut self, claim: &ObjectKey) {
        let Some(cluster) = self.quota_waiters.iter().find(|(_, w)| w.contains(claim)).map(|(c, _)| c.clone()) else {
            return;
        };
        if let Some(waiting) = self.quota_waiters.get_mut(&cluster) {
            waiting.retain(|c| c != claim);
            if waiting.is_empty() {
                self.quota_waiters.remove(&cluster);
            }
        }
    }
}

/// The claims waiting for a Cluster to drop below its quota, by Cluster.
pub(super) type QuotaWaiters = BTreeMap<ClusterKey, Vec<ObjectKey>>;

impl Registry {
    /// Registers a claim whose Cluster holds its quota: it is woken when the Cluster holds fewer, or the quota
    /// changes. It may have been woken for a free address it may not take (the oldest of the pool's waiters, taken off
    /// their queue by the wake): while the pool has a free address, the next waiter is woken in its place, as
    /// `stop_waiting` does, so that the wake is never lost.
    pub fn wait_for_quota(&mut self, pool_key: &PoolKey, claim: &ObjectKey, cluster: &ClusterKey) {
        let state = self.pools.entry(pool_key.clone()).or_default();
        state.waiters.retain(|c| c != claim);
        state.requesters.retain(|c| c != claim);
        state.stop_waiting_for_quota(claim);
        state.quota_waiters.entry(cluster.clone()).or_default().push(claim.clone());
        if !state.is_exhausted() {
            self.woken.extend(state.waiters.pop_front());
        }
        // Its Cluster may have dropped below the quota since the step that refused it (none comes between, but a
        // quota waiter is never left behind a Cluster below its quota).
        self.woken.extend(state.take_quota_waiters());
    }
}

/// How many Clusters a pool's status names (the rest are counted).
pub const CLUSTERS_SHOWN: usize = 10;

impl PoolState {
    /// `status.clusterUsage` of a pool with a quota: what the IPAddresses every manager watching the pool sees hold
    /// (no placeholder, no hold unconfirmed nor `known_here_only`, as `status_counts`), by their cluster-name label.
    /// A scan of the holders, as the status counts are.
    pub(super) fn cluster_usage(&self, known_here_only: impl Fn(&ObjectKey) -> bool) -> Option<ClusterUsage> {
        let quota = self.quota.as_ref()?;
        let mut used: HashMap<&ClusterKey, i64> = HashMap::new();
        let mut without_cluster = 0;
        for (key, holding) in self.holders.iter() {
            if !holding.confirmed || is_placeholder(key) || known_here_only(key) {
                continue;
            }
            match &holding.cluster {
                Some(cluster) => *used.entry(cluster).or_default() += 1,
                None => without_cluster += 1,
            }
        }
        let limit = |cluster: &str| quota.limit_of(cluster).map(i64::from);
        let at_quota = used.iter().filter(|(c, n)| limit(c).is_some_and(|l| **n >= l)).count();
        let mut top: Vec<ClusterUsageEntry> = used
            .iter()
            .map(|(cluster, n)| ClusterUsageEntry { cluster: cluster.to_string(), used: *n, quota: limit(cluster) })
            .collect();
        top.sort_unstable_by(|a, b| b.used.cmp(&a.used).then_with(|| a.cluster.cmp(&b.cluster)));
        top.truncate(CLUSTERS_SHOWN);
        Some(ClusterUsage {
            clusters: i64::try_from(used.len()).unwrap_or(i64::MAX),
            at_quota: i64::try_from(at_quota).unwrap_or(i64::MAX),
            top,
            without_cluster,
        })
    }
}

impl Registry {
    /// The pool's `status.clusterUsage` (`None` without a quota; see `PoolState::cluster_usage`).
    pub fn cluster_usage(&self, key: &PoolKey, known_here_only: impl Fn(&ObjectKey) -> bool) -> Option<ClusterUsage> {
        self.pools.get(key)?.cluster_usage(known_here_only)
    }
}
