//! The workload: users, clusterctl, Velero and the garbage collector acting on the API server, and what they
//! leave the model of the world to expect.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::api::{
    CLUSTER_NAME_LABEL, DELETE_FOR_MOVE_ANNOTATION, GROUP, MOVED_AWAY_ANNOTATION, PROTECT_ADDRESS_FINALIZER,
    REQUESTED_ADDRESS_ANNOTATION, WATCH_FILTER_LABEL,
};
use crate::index::ObjectKey;
use crate::sim::client::lock;
use crate::sim::model::{CLAIM_NAMES, CLUSTER, Held, NAMESPACES, POOLS, PoolId, Shape};
use crate::sim::server::{Kind, key_of};
use crate::sim::swarm::{SHARD, SHARD_POOL, User};

use super::{
    Elsewhere, Move, World, belongs_to_cluster, cluster_object, entries_of, is_marked_moved_away, pool_of_address,
};

impl World {
    // ---- Users and clusterctl ----

    pub(super) fn user(&mut self) {
        if self.actors.velero.is_some() && self.actors.rng.chance(50) && self.velero_continues() {
            return;
        }
        let n = self.rng.below(2);
        if let Move::Leaving(claims) = &self.moves[n]
            && self.rng.chance(50)
        {
            let claims = claims.clone();
            return self.continue_move_away(n, claims);
        }
        match self.swarm.users.pick(&mut self.rng, |_| true) {
            Some(User::CreateClaim) => self.create_claim(),
            Some(User::DeleteClaim) => self.delete_claim(),
            Some(User::PauseOrUnpauseCluster) => self.toggle_cluster_pause(n),
            Some(User::EditPool) => {
                let pool = *self.rng.pick(&POOLS).unwrap_or(&PoolId::Global);
                self.edit_pool(pool);
            }
            Some(User::DeleteOrCreatePool) => {
                let pool = *self.rng.pick(&POOLS).unwrap_or(&PoolId::Global);
                if self.object(pool.server_kind(), &pool.key()).is_some() {
                    let deleted = if self.actors.rng.chance(25) {
                        self.delete_in_foreground(pool.server_kind(), &pool.key())
                    } else {
                        self.server_delete(pool.server_kind(), &pool.key()).is_ok()
                    };
                    if deleted && pool == PoolId::Global {
                        // Deleting the pool is how an operator stops allocating from it here: its reservations go
                        // with it (docs/operations.md), and a new pool of the name knows nothing of them.
                        for e in self.elsewhere.values_mut() {
                            e.protected = false;
                        }
                    }
                } else {
                    self.create_pool(pool);
                }
            }
            Some(User::MoveAway) => self.start_move_away(n),
            Some(User::MoveBack) => self.move_back(n),
            Some(User::OperatorRelease) => self.release_moved_away(n),
            Some(User::CreateOrDeleteCluster)
                if self.options.velero && self.moves[n] == Move::Home && self.actors.rng.chance(15) =>
            {
                self.velero_begins(n);
            }
            Some(User::CreateOrDeleteCluster) => self.create_or_delete_cluster(n),
            Some(User::GarbageCollector) => self.garbage_collect(),
            Some(User::ClaimDeletedFinalizersStripped) => {
                let keys = lock(&self.hub).server.keys(Kind::Claim);
                if let Some(key) = self.rng.pick(&keys).cloned()
                    && !self.in_a_move(&key)
                {
                    self.force_delete_claim(&key);
                }
            }
            Some(User::AnotherProvider) => self.foreign_actor(),
            Some(User::BoundIpAddressDeletedFinalizerStripped) => self.strip_bound_ipaddress(),
            _ => {}
        }
    }

    /// Kubernetes' garbage collector, on one IPAddress whose owner is gone: with another owner still there (its
    /// pool), the dangling owner reference comes off (a dependent with a solid owner is kept); with none, it is
    /// deleted.
    pub(in crate::sim) fn garbage_collect(&mut self) {
        if self.actors.rng.chance(50) && self.collect_in_foreground() {
            return;
        }
        let mut owners: BTreeSet<String> = BTreeSet::new();
        let pools = [PoolId::Ip(0), PoolId::Global, PoolId::Prefix].map(PoolId::server_kind);
        for kind in std::iter::once(Kind::Claim).chain(pools) {
            for object in self.objects(kind) {
                owners.extend(object["metadata"]["uid"].as_str().map(str::to_owned));
            }
        }
        let exists = |r: &Value| r["uid"].as_str().is_some_and(|uid| owners.contains(uid));
        let dangling: Vec<Value> = self
            .objects(Kind::Address)
            .into_iter()
            .filter(|a| a["metadata"]["ownerReferences"].as_array().is_some_and(|refs| !refs.iter().all(exists)))
            .collect();
        let Some(address) = self.rng.pick(&dangling).cloned() else { return };
        let key = key_of(&address);
        let refs = address["metadata"]["ownerReferences"].as_array().cloned().unwrap_or_default();
        let solid: Vec<Value> = refs.into_iter().filter(exists).collect();
        self.note(|| format!("the garbage collector finds a dangling owner of IPAddress {key}"));
        if solid.is_empty() {
            // Deleted from under its claim as a person's delete would be (seed 330000784: a restored IPAddress whose
            // pool was deleted and made again of the other family).
            if let Some(held) = pool_of_address(&address).and_then(|pool| Held::of_address(pool, &address)) {
                self.actors.stripped.insert((key.clone(), held));
            }
            let _ = self.server_delete(Kind::Address, &key);
        } else {
            let revision = address["metadata"]["resourceVersion"].clone();
            let patch = json!({"metadata": {"ownerReferences": solid, "resourceVersion": revision}});
            let _ = self.server_merge(Kind::Address, &key, patch);
        }
    }

    pub(super) fn create_claim(&mut self) {
        let n = self.rng.below(2);
        let namespace = NAMESPACES[n];
        let name = *self.rng.pick(&CLAIM_NAMES).unwrap_or(&"m0");
        let key = ObjectKey::new(namespace, name);
        // Names held by a Cluster on the other side stay free for its way back, mostly: a user may create a claim of
        // such a name here (its IPAddress may still be left behind), and the move back then waits for it to go.
        if self.elsewhere.values().any(|e| e.namespace == n && e.claim == name) && self.rng.chance(80) {
            return;
        }
        if self.object(Kind::Claim, &key).is_some() {
            return;
        }
        let clustered = self.moves[n] == Move::Home && self.rng.chance(30);
        let pool =
            if clustered { PoolId::Global } else { *self.rng.pick(&PoolId::usable_from(n)).unwrap_or(&PoolId::Global) };
        let mut object = json!({
            "apiVersion": format!("{GROUP}/v1beta2"),
            "kind": "IPAddressClaim",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"poolRef": {"apiGroup": GROUP, "kind": pool.kind().kind(), "name": pool.name()}},
        });
        if clustered {
            if self.rng.chance(50) {
                object["spec"]["clusterName"] = json!(CLUSTER);
            } else {
                object["metadata"]["labels"] = json!({ CLUSTER_NAME_LABEL: CLUSTER });
            }
        }
        // Most claims on the second manager's pool carry its label; one without is served by no manager, and says so.
        if let Some(shard) = self.shard.as_mut()
            && pool == SHARD_POOL
            && shard.rng.chance(85)
        {
            object["metadata"]["labels"] = json!({ WATCH_FILTER_LABEL: SHARD });
        }
        if pool != PoolId::Prefix && self.rng.chance(8) {
            let shape =
                self.shapes.get(&pool).copied().unwrap_or(Shape { v6: false, offset: 0, size: 2, ..Shape::default() });
            if let Some(held) = self.rng.pick(&shape.allocatable(pool)).copied() {
                object["metadata"]["annotations"] = json!({ REQUESTED_ADDRESS_ANNOTATION: held.address().to_string() });
            }
        }
        if self.server_create(Kind::Claim, object).is_ok() {
            self.stats.claims_created += 1;
        }
    }

    pub(super) fn delete_claim(&mut self) {
        let keys = lock(&self.hub).server.keys(Kind::Claim);
        let Some(key) = self.rng.pick(&keys).cloned() else { return };
        if self.in_a_move(&key) {
            return;
        }
        if !(self.actors.rng.chance(25) && self.delete_in_foreground(Kind::Claim, &key)) {
            let _ = self.server_delete(Kind::Claim, &key);
        }
    }

    pub(super) fn in_a_move(&self, key: &ObjectKey) -> bool {
        let n = NAMESPACES.iter().position(|ns| **ns == *key.namespace).unwrap_or(0);
        matches!(&self.moves[n], Move::Leaving(claims) if claims.contains(key))
    }

    pub(super) fn toggle_cluster_pause(&mut self, n: usize) {
        if self.moves[n] != Move::Home {
            return;
        }
        let key = ObjectKey::new(NAMESPACES[n], CLUSTER);
        let Some(cluster) = self.object(Kind::Cluster, &key) else { return };
        let paused = cluster.pointer("/spec/paused").and_then(Value::as_bool).unwrap_or(false);
        let _ = self.server_merge(Kind::Cluster, &key, json!({"spec": {"paused": !paused}}));
    }

    pub(super) fn create_or_delete_cluster(&mut self, n: usize) {
        if self.moves[n] != Move::Home {
            return;
        }
        let key = ObjectKey::new(NAMESPACES[n], CLUSTER);
        if self.object(Kind::Cluster, &key).is_some() {
            let _ = self.server_delete(Kind::Cluster, &key);
        } else {
            let _ = self.server_create(Kind::Cluster, cluster_object(NAMESPACES[n], false));
        }
    }

    pub(super) fn edit_pool(&mut self, pool: PoolId) {
        if self.object(pool.server_kind(), &pool.key()).is_none() {
            return;
        }
        let shape = self.random_shape(pool);
        let before = self.actors.pins.get(&pool).cloned();
        self.choose_pin(pool, shape);
        let replaced = before
            .as_ref()
            .map(|(key, _)| key.clone())
            .filter(|key| self.actors.pins.get(&pool).is_some_and(|(now, _)| now != key));
        // Most edits meet the webhook's guard, which reads the live IPAddresses (an allocation in flight slips past it).
        if self.rng.chance(70) && !self.admits(pool, shape, self.actors.pins.get(&pool)) {
            self.note(|| format!("the webhook refuses an edit of pool {}", pool.pool_key()));
            match before {
                Some(pin) => self.actors.pins.insert(pool, pin),
                None => self.actors.pins.remove(&pool),
            };
            return;
        }
        let mut spec = self.spec_with_pin(pool, shape);
        if let Some(old) = replaced {
            // A merge patch merges maps: the old pin's key goes explicitly.
            spec["preAllocations"][old] = Value::Null;
        }
        if self.server_merge(pool.server_kind(), &pool.key(), json!({ "spec": spec })).is_ok() {
            self.shapes.insert(pool, shape);
        } else {
            match before {
                Some(pin) => self.actors.pins.insert(pool, pin),
                None => self.actors.pins.remove(&pool),
            };
        }
    }

    /// clusterctl move, on the source: pause the Cluster, copy (the addresses of the global pool are in use over
    /// there from now on), then delete each claim for the move and the Cluster.
    pub(super) fn start_move_away(&mut self, n: usize) {
        if self.moves[n] != Move::Home || self.restoring(n) {
            return;
        }
        let cluster = ObjectKey::new(NAMESPACES[n], CLUSTER);
        if self.object(Kind::Cluster, &cluster).is_none() {
            return;
        }
        // An operator does not move a Cluster while its namespace holds an IPAddress a restore brought back over an
        // address handed out meanwhile (docs/operations.md): clusterctl would copy it, with an address in use here,
        // before its claim withdrew it (seed 430231703).
        let addresses = self.objects(Kind::Address);
        let restored_duplicate = addresses.iter().any(|a| {
            *key_of(a).namespace == *NAMESPACES[n]
                && a["metadata"]["uid"].as_str().is_some_and(|u| self.actors.velero_duplicates.contains(u))
        });
        // Nor while the global pool reports an address of the namespace held twice (`DuplicateAddresses`), such as a
        // deposed leader's late create: the copy would take an address in use here over there (seed 520347817).
        let global_held =
            |a: &Value| Held::of_address(PoolId::Global, a).filter(|_| pool_of_address(a) == Some(PoolId::Global));
        let duplicated = addresses.iter().filter(|a| *key_of(a).namespace == *NAMESPACES[n]).any(|a| {
            global_held(a).is_some_and(|held| {
                addresses.iter().any(|b| key_of(b) != key_of(a) && global_held(b).is_some_and(|o| o.overlaps(held)))
            })
        });
        if restored_duplicate || duplicated {
            return;
        }
        self.stats.moves += 1;
        let _ = self.server_merge(Kind::Cluster, &cluster, json!({"spec": {"paused": true}}));
        let mut leaving = Vec::new();
        for claim in self.objects(Kind::Claim) {
            let key = key_of(&claim);
            // A claim being deleted is not moved: it is released here once its Cluster is gone.
            if *key.namespace != *NAMESPACES[n]
                || !belongs_to_cluster(&claim)
                || !claim["metadata"]["deletionTimestamp"].is_null()
            {
                continue;
            }
            leaving.push(key.clone());
            if let Some(address) = self.object(Kind::Address, &key)
                // One being withdrawn (a create of an address its pool stopped allocating) is reserved for no one.
                && address["metadata"]["deletionTimestamp"].is_null()
                && let Some(held) = Held::of_address(PoolId::Global, &address)
                && address.pointer("/spec/poolRef/name").and_then(Value::as_str) == Some(PoolId::Global.name())
            {
                let left_behind = address["metadata"]["uid"].as_str().unwrap_or_default().to_owned();
                let seen_absent = !self.annotation_holds(held);
                let e =
                    Elsewhere { namespace: n, claim: key.name.to_string(), left_behind, protected: false, seen_absent };
                self.elsewhere.insert(held, e);
            }
        }
        self.note(|| {
            format!("clusterctl moves Cluster {}/{CLUSTER} away with {} claims", NAMESPACES[n], leaving.len())
        });
        self.moves[n] = Move::Leaving(leaving);
    }

    pub(super) fn continue_move_away(&mut self, n: usize, mut claims: Vec<ObjectKey>) {
        match claims.pop() {
            Some(key) => {
                if self.object(Kind::Claim, &key).is_some_and(|c| c["metadata"]["deletionTimestamp"].is_null()) {
                    let _ = self.server_merge(
                        Kind::Claim,
                        &key,
                        json!({"metadata": {"annotations": { DELETE_FOR_MOVE_ANNOTATION: "" }}}),
                    );
                    let _ = self.server_merge(Kind::Claim, &key, json!({"metadata": {"finalizers": null}}));
                    let _ = self.server_delete(Kind::Claim, &key);
                    // What is left behind is the IPAddress of its name now: one a person deleted since the move
                    // began, made again by its claim with the same address, is it.
                    if let Some(address) = self.object(Kind::Address, &key)
                        && let Some(held) = Held::of_address(PoolId::Global, &address)
                        && let Some(uid) = address["metadata"]["uid"].as_str()
                        && let Some(e) = self.elsewhere.get_mut(&held)
                        && e.namespace == n
                        && *e.claim == *key.name
                    {
                        e.left_behind = uid.to_owned();
                    }
                }
                self.moves[n] = Move::Leaving(claims);
            }
            None => {
                let cluster = ObjectKey::new(NAMESPACES[n], CLUSTER);
                let _ = self.server_delete(Kind::Cluster, &cluster);
                self.moves[n] = Move::Away;
            }
        }
    }

    /// clusterctl moves the Cluster back: Cluster (paused), claims and their IPAddresses with the addresses they had,
    /// owner references rewritten to the new claims, then unpaused.
    pub(super) fn move_back(&mut self, n: usize) {
        if self.moves[n] != Move::Away {
            return;
        }
        // Only what our manager recorded comes back: an address whose reservation it missed (its claim's deletion
        // for the move went unseen, docs/operations.md) may be in use here by now, and an operator must sort it out.
        let entries: Vec<(Held, String)> = self
            .elsewhere
            .iter()
            .filter(|(_, e)| e.namespace == n && e.protected)
            .map(|(h, e)| (*h, e.claim.clone()))
            .collect();
        let free = entries.iter().all(|(_, name)| {
            let key = ObjectKey::new(NAMESPACES[n], name);
            self.object(Kind::Claim, &key).is_none() && self.object(Kind::Address, &key).is_none()
        });
        let cluster = ObjectKey::new(NAMESPACES[n], CLUSTER);
        if !free || self.object(Kind::Cluster, &cluster).is_some() {
            return;
        }
        self.note(|| {
            format!("clusterctl moves Cluster {}/{CLUSTER} back with {} claims", NAMESPACES[n], entries.len())
        });
        let _ = self.server_create(Kind::Cluster, cluster_object(NAMESPACES[n], true));
        for (held, name) in entries {
            let claim = json!({
                "apiVersion": format!("{GROUP}/v1beta2"),
                "kind": "IPAddressClaim",
                "metadata": {"name": name, "namespace": NAMESPACES[n], "labels": { CLUSTER_NAME_LABEL: CLUSTER }},
                "spec": {"poolRef": {"apiGroup": GROUP, "kind": PoolId::Global.kind().kind(), "name": PoolId::Global.name()}},
            });
            let Ok(claim) = self.server_create(Kind::Claim, claim) else { continue };
            let uid = claim["metadata"]["uid"].clone();
            let key = ObjectKey::new(NAMESPACES[n], &name);
            self.came_back(uid.as_str().unwrap_or_default().to_owned(), key, held);
            let address = json!({
                "apiVersion": format!("{GROUP}/v1beta2"),
                "kind": "IPAddress",
                "metadata": {
                    "name": name, "namespace": NAMESPACES[n],
                    "labels": { CLUSTER_NAME_LABEL: CLUSTER },
                    "finalizers": [PROTECT_ADDRESS_FINALIZER],
                    "ownerReferences": [{"apiVersion": format!("{GROUP}/v1beta2"), "kind": "IPAddressClaim",
                                         "name": name, "uid": uid, "controller": true, "blockOwnerDeletion": true}],
                },
                "spec": {
                    "claimRef": {"name": name},
                    "poolRef": {"apiGroup": GROUP, "kind": PoolId::Global.kind().kind(), "name": PoolId::Global.name()},
                    "address": held.address().to_string(),
                    "prefix": 24,
                },
            });
            self.elsewhere.remove(&held);
            let _ = self.server_create(Kind::Address, address);
        }
        let _ = self.server_merge(Kind::Cluster, &cluster, json!({"spec": {"paused": false}}));
        self.moves[n] = Move::Home;
    }

    /// The moved Cluster was deleted over there: an operator takes its addresses out of the annotation here.
    pub(super) fn release_moved_away(&mut self, n: usize) {
        if self.moves[n] != Move::Away {
            return;
        }
        let released: Vec<Held> = self.elsewhere.iter().filter(|(_, e)| e.namespace == n).map(|(h, _)| *h).collect();
        for held in &released {
            self.elsewhere.remove(held);
        }
        let pool = PoolId::Global;
        if let Some(object) = self.object(pool.server_kind(), &pool.key()) {
            let remaining: Vec<String> = entries_of(&object)
                .into_iter()
                .filter(|e| Held::of_entry(pool, e).is_none_or(|h| !released.contains(&h)))
                .collect();
            let value = if remaining.is_empty() { Value::Null } else { json!(remaining.join(",")) };
            let _ = self.server_merge(
                pool.server_kind(),
                &pool.key(),
                json!({"metadata": {"annotations": { MOVED_AWAY_ANNOTATION: value }}}),
            );
        }
        // And the IPAddresses left behind that the annotation had no room for (docs/operations.md).
        let marked: Vec<ObjectKey> = self
            .objects(Kind::Address)
            .iter()
            .filter(|a| *key_of(a).namespace == *NAMESPACES[n] && is_marked_moved_away(a))
            .map(key_of)
            .collect();
        for key in marked {
            let _ = self.server_delete(Kind::Address, &key);
        }
        self.note(|| {
            format!("an operator frees the addresses of Cluster {}/{CLUSTER}, deleted over there", NAMESPACES[n])
        });
        self.moves[n] = Move::Home;
    }
}
