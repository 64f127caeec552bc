//! The claims waiting for an address of a pool (docs/compatibility.md D9): who is woken when an address frees up.

use super::{ObjectKey, PoolKey, PoolState, Registry, Woken};

impl Registry {
    /// Registers a claim that found the pool exhausted; it is woken when an address frees up.
    pub fn wait(&mut self, pool_key: &PoolKey, claim: &ObjectKey) {
        let state = self.pools.entry(pool_key.clone()).or_default();
        // One list at a time: a requester in the waiters' queue would take the wake an exhausted claim needs.
        state.requesters.retain(|c| c != claim);
        state.stop_waiting_for_quota(claim);
        if !state.waiters.contains(claim) {
            state.waiters.push_back(claim.clone());
        }
    }

    /// Registers a claim whose requested address is held; it is woken whenever an address of the pool frees up.
    pub fn wait_for_requested(&mut self, pool_key: &PoolKey, claim: &ObjectKey) {
        let state = self.pools.entry(pool_key.clone()).or_default();
        state.waiters.retain(|c| c != claim);
        state.stop_waiting_for_quota(claim);
        if !state.requesters.contains(claim) {
            state.requesters.push(claim.clone());
        }
    }

    /// Removes a claim from a pool's waiting lists (it was allocated, deleted or paused). A claim that no longer
    /// waits may have been woken for a free address it did not take (its Cluster was paused meanwhile): while the
    /// pool has a free address, the next waiter is woken in its place, so that a wake is never lost.
    pub fn stop_waiting(&mut self, pool_key: &PoolKey, claim: &ObjectKey) {
        if let Some(state) = self.pools.get_mut(pool_key) {
            state.waiters.retain(|c| c != claim);
            state.requesters.retain(|c| c != claim);
            state.stop_waiting_for_quota(claim);
            if !state.is_exhausted() {
                self.woken.extend(state.waiters.pop_front());
            }
        }
    }

    /// The claims woken by steps that returned something else, since the last call.
    pub fn take_woken(&mut self) -> Woken {
        std::mem::take(&mut self.woken)
    }

    pub(super) fn wake_all(&mut self, key: &PoolKey) -> Woken {
        let Some(state) = self.pools.get_mut(key) else { return Vec::new() };
        // The quota may have changed: every claim that waits for it looks again.
        let mut woken: Woken = std::mem::take(&mut state.quota_waiters).into_values().flatten().collect();
        if state.is_exhausted() {
            woken.extend(take_requesters_due(state));
            return woken;
        }
        state.requesters_due = false;
        woken.extend(state.waiters.drain(..).chain(state.requesters.drain(..)));
        woken
    }
}

/// Once an address is free: the oldest waiter, and every claim whose requested address was held (one of them may
/// want this one; the others wait again without taking the waiter's wake); and the claims of every Cluster that holds
/// less than its quota now.
pub(super) fn take_waiters(state: &mut PoolState) -> Woken {
    let mut woken = state.take_quota_waiters();
    if state.is_exhausted() {
        woken.extend(take_requesters_due(state));
        return woken;
    }
    state.requesters_due = false;
    woken.extend(state.waiters.pop_front().into_iter().chain(state.requesters.drain(..)));
    woken
}

/// A pin's placeholder took an address: the claims whose requested (or pinned) address was held look again, even in
/// a pool with nothing free.
fn take_requesters_due(state: &mut PoolState) -> Woken {
    if !std::mem::take(&mut state.requesters_due) {
        return Vec::new();
    }
    state.requesters.drain(..).collect()
}
