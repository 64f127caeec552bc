//! The checker: the invariants every step keeps (no address held twice, no bound claim without its IPAddress) and
//! those that hold once everything settled.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Value, json};

use crate::api::{CLUSTER_NAME_LABEL, REQUESTED_ADDRESS_ANNOTATION};
use crate::index::ObjectKey;
use crate::sim::client::lock;
use crate::sim::model::{CLUSTER, Held, NAMESPACES, POOLS, PoolId};
use crate::sim::server::{Kind, key_of};
use crate::sim::swarm::{Late, SHARD, SHARD_POOL};

use super::{
    World, check_served_by_its_shard, claim_pool, cluster_of, describe, entries_of, entry_name, is_marked_moved_away,
    pool_of_address, short_uid, told_address, watch_filter_of,
};

impl World {
    // ---- Invariants ----

    /// What every step keeps: no address held twice (by two live IPAddresses of a pool, or by one here and the
    /// same address on the other management cluster once our manager recorded it; of an IPAddress no claim is bound
    /// to, which may be a late write, only under `Late::BeforeNextTerm`), and every bound claim names a live
    /// IPAddress of its own.
    pub(super) fn check_always(&mut self) -> Result<(), String> {
        if let Some(found) = self.found.take() {
            return Err(found);
        }
        let terms = [self.term.as_ref(), self.shard.as_ref().and_then(|s| s.term.as_ref())];
        for term in terms.into_iter().flatten() {
            term.ctx.index.check_consistency()?;
        }
        // What the API server holds is checked again only when it changed (most steps deliver or poll).
        let protected = self.elsewhere.values().filter(|e| e.protected).count();
        let signature = (lock(&self.hub).server.revision(), self.elsewhere.len(), protected);
        if self.checked == Some(signature) {
            return Ok(());
        }
        self.protect_recorded();
        self.check_foreign()?;
        let protected = self.elsewhere.values().filter(|e| e.protected).count();
        self.checked = Some((signature.0, self.elsewhere.len(), protected));
        let hub = lock(&self.hub);
        let addresses = hub.server.list(Kind::Address);
        let claims = hub.server.list(Kind::Claim);
        drop(hub);
        let bound: BTreeSet<ObjectKey> = claims
            .iter()
            .filter(|c| c.pointer("/status/addressRef/name").and_then(Value::as_str).is_some_and(|n| !n.is_empty()))
            .map(|c| {
                let key = key_of(c);
                let name = c.pointer("/status/addressRef/name").and_then(Value::as_str).unwrap_or_default();
                ObjectKey::new(&key.namespace, name)
            })
            .collect();
        let strict = self.options.late == Late::BeforeNextTerm;
        // The address each bound claim was told of (its Ready condition's `allocated <address>`): an IPAddress of its
        // name holding another (a deposed leader's late create, landed after a person deleted the claim's own) is
        // not the one it is bound to.
        let told: BTreeMap<ObjectKey, Option<std::net::IpAddr>> = claims
            .iter()
            .filter(|c| c.pointer("/status/addressRef/name").and_then(Value::as_str).is_some_and(|n| !n.is_empty()))
            .map(|c| {
                let key = key_of(c);
                let name = c.pointer("/status/addressRef/name").and_then(Value::as_str).unwrap_or_default();
                (ObjectKey::new(&key.namespace, name), told_address(c))
            })
            .collect();
        // A deposed leader's late create landed under a claim being deleted (its machine going) is released by that
        // claim's release; the address, freed here when the claim's own IPAddress went, is the other's alone.
        let deleting: BTreeSet<ObjectKey> = claims
            .iter()
            .filter(|c| !c["metadata"]["deletionTimestamp"].is_null())
            .filter_map(|c| {
                let name = c.pointer("/status/addressRef/name").and_then(Value::as_str).filter(|n| !n.is_empty())?;
                Some(ObjectKey::new(&key_of(c).namespace, name))
            })
            .collect();
        let late_under_deleting = |a: &Value, key: &ObjectKey| {
            deleting.contains(key) && a["metadata"]["uid"].as_str().is_some_and(|u| self.late_created.contains(u))
        };
        let bound_to = |key: &ObjectKey, h: Held| {
            bound.contains(key) && (told.get(key).copied().flatten().is_none_or(|t| h.address() == t))
        };
        // An IPAddress Velero restored holding an address handed out while it was gone is a conflict no one could stop
        // (nothing admits IPAddress creates): its claim withdraws it, and only two bound holders are a violation.
        let restored_duplicate =
            |a: &Value| a["metadata"]["uid"].as_str().is_some_and(|u| self.actors.velero_duplicates.contains(u));
        // An IPAddress the first manager made for a claim of no manager's shard, while it did not know the pool was
        // the second manager's (its label arrived while the create was in flight): it deletes it before the claim is
        // bound, so only a bound one is a violation.
        let unserved_create = |a: &Value| {
            self.options.sharded
                && pool_of_address(a) == Some(SHARD_POOL)
                && claims.iter().any(|c| key_of(c) == key_of(a) && watch_filter_of(c) != Some(SHARD))
        };
        let holders = holders_of(&addresses, |a, key, h| {
            let exempt = restored_duplicate(a) || unserved_create(a);
            // A restored duplicate under a claim being deleted: that claim's release withdraws it (seed 150010206).
            let used = bound_to(key, h) && !late_under_deleting(a, key) && !(exempt && deleting.contains(key));
            (used, exempt)
        });
        let conflict = |o: &Holder, h: &Holder| (strict && !o.exempt && !h.exempt) || (o.used && h.used);
        if let Some((other, this)) = first_duplicate(&holders, conflict) {
            return Err(format!(
                "DUPLICATE: IPAddresses {} ({}) and {} ({}) of pool {} hold the same address",
                other.key,
                other.held,
                this.key,
                this.held,
                this.pool.pool_key()
            ));
        }
        for (a, holder) in &holders {
            let Holder { pool, held: h, key, used, .. } = holder;
            let (pool, h, used) = (*pool, *h, *used);
            // An IPAddress no claim is bound to may be a late create of a deposed leader (as above): the claim
            // withdraws it, and only a bound one uses the address here.
            if pool == PoolId::Global
                && ((strict && !restored_duplicate(a)) || used)
                && let Some((e, where_)) = self
                    .elsewhere
                    .iter()
                    .find(|(e, w)| w.protected && e.overlaps(h) && !w.reserved_by(a, **e, bound.contains(key)))
            {
                return Err(format!(
                    "DUPLICATE ACROSS MANAGEMENT CLUSTERS: IPAddress {key} holds {h}, which claim {}/{} of the moved \
                     Cluster uses over there ({e})",
                    NAMESPACES[where_.namespace], where_.claim
                ));
            }
        }
        for c in &claims {
            let key = key_of(c);
            let Some(name) = c.pointer("/status/addressRef/name").and_then(Value::as_str).filter(|n| !n.is_empty())
            else {
                continue;
            };
            if !c["metadata"]["deletionTimestamp"].is_null() {
                continue;
            }
            let address_key = ObjectKey::new(&key.namespace, name);
            let found = addresses.iter().find(|a| key_of(a) == address_key);
            // An IPAddress of its name holding another address than the one it was told of is not its own made again.
            let told_here = told.get(&address_key).copied().flatten();
            let exists = found.is_some_and(|a| {
                told_here.is_none_or(|t| {
                    a["spec"]["address"].as_str().and_then(|s| s.parse::<std::net::IpAddr>().ok()) == Some(t)
                })
            });
            if self.lost_its_ipaddress(&key, exists) {
                // A person deleted it: the claim makes it again.
                continue;
            }
            let Some(address) = found else {
                return Err(format!("claim {key} is bound to IPAddress {address_key}, which does not exist"));
            };
            let uid = c["metadata"]["uid"].as_str().unwrap_or_default();
            let claim_owners = address["metadata"]["ownerReferences"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|o| o["kind"] == "IPAddressClaim")
                .filter_map(|o| o["uid"].as_str());
            let owned = claim_owners.clone().any(|o| o == uid);
            // Restored by Velero with its owner reference to the claim's UID before the restore, or a deposed leader's
            // create for an earlier claim of its name landed late (after a person deleted the claim's own: seed
            // 500085155), holding the address the claim was told of: the claim's adoption repairs the reference (or
            // the garbage collector deletes it, and the claim makes it again).
            let restored = address
                .pointer(&format!("/metadata/labels/{}", crate::api::VELERO_RESTORE_LABEL.replace('/', "~1")))
                .is_some();
            let late = address["metadata"]["uid"].as_str().is_some_and(|u| self.late_created.contains(u));
            let restored_for_it = (restored || late)
                && exists
                && claim_owners.clone().all(|o| !claims.iter().any(|c| c["metadata"]["uid"].as_str() == Some(o)));
            if restored_for_it {
                continue;
            }
            if !owned || address.pointer("/spec/claimRef/name").and_then(Value::as_str) != Some(&*key.name) {
                return Err(format!(
                    "claim {key} (uid {}) is bound to IPAddress {address_key}, which is not its own: {}",
                    short_uid(uid),
                    describe(Kind::Address, address)
                ));
            }
        }
        Ok(())
    }

    /// What the live term's index holds of a pool, for a violation's message.
    /// What each manager's index holds of every pool.
    pub(super) fn indexes_view(&mut self) -> String {
        let views: Vec<String> = POOLS
            .iter()
            .map(|&p| {
                let second = self.as_shard(|w| format!(" / second manager: {}", w.index_view(p))).unwrap_or_default();
                format!("{}: {}{second}", p.pool_key(), self.index_view(p))
            })
            .collect();
        format!("the indexes: {}", views.join("; "))
    }

    pub(super) fn index_view(&self, pool: PoolId) -> String {
        let Some(term) = &self.term else { return "nothing (no term)".into() };
        let key = pool.pool_key();
        let (holders, (counts, error)) = term.ctx.index.read(|s| (s.holders(&key), s.pool_counts(&key)));
        let held: Vec<String> = holders
            .into_iter()
            .map(|(k, h, confirmed)| {
                let record = if term.ctx.index.address(&k).is_some() { "" } else { " (no record)" };
                format!("{k}={h}{}{record}", if confirmed { "" } else { " unconfirmed" })
            })
            .collect();
        format!("[{}] counts {counts:?} {error:?}", held.join(", "))
    }

    /// Whether the global pool's annotation holds an entry for `held` now.
    pub(super) fn annotation_holds(&self, held: Held) -> bool {
        let pool = PoolId::Global;
        self.object(pool.server_kind(), &pool.key())
            .is_some_and(|o| entries_of(&o).iter().any(|e| Held::of_entry(pool, e) == Some(held)))
    }

    /// Marks the addresses of the other management cluster that our manager wrote into the pool's annotation (for
    /// this move: an entry left from an earlier one must have been seen gone first).
    pub(super) fn protect_recorded(&mut self) {
        if self.elsewhere.is_empty() {
            return;
        }
        let pool = PoolId::Global;
        let Some(object) = self.object(pool.server_kind(), &pool.key()) else { return };
        if !object["metadata"]["deletionTimestamp"].is_null() {
            // A pool being deleted takes its reservations with it (docs/operations.md).
            return;
        }
        // Each entry's address, and the IPAddress it names (`None`: a bare entry, naming none).
        let recorded: Vec<(Held, Option<String>)> = entries_of(&object)
            .iter()
            .filter_map(|e| Some((Held::of_entry(pool, e)?, e.split_once('@').map(|(_, named)| named.to_owned()))))
            .collect();
        // An address the annotation had no room for is recorded on the IPAddress left behind, by our mark. Not one
        // being deleted that names no live pool as its owner: marked after its pool was deleted, it records nothing
        // for the pool made again (docs/operations.md; seed 610608073).
        let pool_uid = object["metadata"]["uid"].clone();
        let of_the_live_pool = |a: &Value| {
            a["metadata"]["ownerReferences"].as_array().is_some_and(|refs| refs.iter().any(|o| o["uid"] == pool_uid))
        };
        let marked: Vec<String> = self
            .objects(Kind::Address)
            .iter()
            .filter(|a| is_marked_moved_away(a))
            .filter(|a| a["metadata"]["deletionTimestamp"].is_null() || of_the_live_pool(a))
            .filter_map(|a| a["metadata"]["uid"].as_str().map(str::to_owned))
            .collect();
        for (h, e) in &mut self.elsewhere {
            // An entry of another IPAddress holding the address (a later claim's move: seed 580059062) records not this
            // move, which the manager missed.
            let names_it = |named: &Option<String>| {
                named.as_ref().is_none_or(|n| *n == format!("{}/{}", NAMESPACES[e.namespace], e.claim))
            };
            if marked.contains(&e.left_behind) {
                e.protected = true;
            } else if !recorded.iter().any(|(held, named)| held == h && names_it(named)) {
                e.seen_absent = true;
            } else if e.seen_absent {
                e.protected = true;
            }
        }
    }

    /// What holds once everything settled: no duplicate at all, no IPAddress without its claim, no claim waiting
    /// while its pool has a free address, nothing stuck being deleted, pool counts as they are, and every address
    /// recorded as moved away still recorded.
    pub(super) fn check_quiescent(&mut self) -> Result<(), String> {
        let addresses = self.objects(Kind::Address);
        let claims = self.objects(Kind::Claim);
        let clusters = self.objects(Kind::Cluster);
        let paused_cluster = |namespace: &str| {
            clusters.iter().any(|c| {
                key_of(c) == ObjectKey::new(namespace, CLUSTER)
                    && c.pointer("/spec/paused").and_then(Value::as_bool) == Some(true)
            })
        };
        // A duplicate Velero restored under a claim being deleted whose Cluster is paused: that claim's release
        // withdraws it once the Cluster is unpaused, and the pause holds the release (as in `check_always`; seed
        // 330088935).
        let awaits_release = |a: &Value, key: &ObjectKey| {
            a["metadata"]["uid"].as_str().is_some_and(|u| self.actors.velero_duplicates.contains(u))
                && claims.iter().any(|c| key_of(c) == *key && !c["metadata"]["deletionTimestamp"].is_null())
                && paused_cluster(&key.namespace)
        };
        // No duplicate, also of late writes. One that awaits its release is still in use (the pool counts it), but
        // no duplicate to report.
        let holders = holders_of(&addresses, |a, key, _| (false, awaits_release(a, key)));
        if let Some((other, this)) = first_duplicate(&holders, |o, h| !o.exempt && !h.exempt) {
            return Err(format!(
                "after settling, {} ({}) and {} ({}) hold the same address",
                other.key, other.held, this.key, this.held
            ));
        }
        for (a, holder) in holders.iter().filter(|(_, h)| !h.exempt) {
            let Holder { pool, held: h, key, .. } = holder;
            let (pool, h) = (*pool, *h);
            // Nor across management clusters: a late create holding an address in use over there is withdrawn.
            if pool == PoolId::Global
                && let Some((e, where_)) = self.elsewhere.iter().find(|(e, w)| {
                    let bound = claims.iter().any(|c| {
                        key_of(c).namespace == key.namespace
                            && c.pointer("/status/addressRef/name").and_then(Value::as_str) == Some(&*key.name)
                    });
                    w.protected && e.overlaps(h) && !w.reserved_by(a, **e, bound)
                })
            {
                return Err(format!(
                    "after settling, IPAddress {key} holds {h}, which claim {}/{} of the moved Cluster uses over there \
                     ({e})",
                    NAMESPACES[where_.namespace], where_.claim
                ));
            }
        }
        let held: Vec<(PoolId, Held, ObjectKey)> =
            holders.iter().map(|(_, h)| (h.pool, h.held, h.key.clone())).collect();
        // No leak: every IPAddress has its claim, but those of a paused Cluster (it keeps its addresses).
        for a in &addresses {
            let key = key_of(a);
            if pool_of_address(a).is_none() {
                continue;
            }
            let labelled =
                a.pointer("/metadata/labels").and_then(|l| l.get(CLUSTER_NAME_LABEL)).and_then(Value::as_str);
            if labelled == Some(CLUSTER) && paused_cluster(&key.namespace) {
                continue;
            }
            // Left behind by a move, its address in use over there, and no room in the pool's annotation: kept.
            if is_marked_moved_away(a) {
                continue;
            }
            if !claims.iter().any(|c| key_of(c) == key) {
                return Err(format!("leaked: {} has no claim", describe(Kind::Address, a)));
            }
        }
        let cluster_state = |namespace: &str| -> Option<bool> {
            clusters
                .iter()
                .find(|c| key_of(c) == ObjectKey::new(namespace, CLUSTER))
                .map(|c| c.pointer("/spec/paused").and_then(Value::as_bool).unwrap_or(false))
        };
        let mut free: BTreeMap<PoolId, Vec<Held>> = BTreeMap::new();
        for pool in POOLS {
            let Some(object) = self.object(pool.server_kind(), &pool.key()) else { continue };
            if !object["metadata"]["deletionTimestamp"].is_null() {
                if !held.iter().any(|(p, _, _)| *p == pool) {
                    return Err(format!("pool {} is stuck being deleted with no IPAddress left", pool.pool_key()));
                }
                continue;
            }
            let Some(shape) = self.shapes.get(&pool).copied() else { continue };
            let allocatable = shape.allocatable(pool);
            // An entry held by an IPAddress of the name it gives (or, a bare one, by any) is that IPAddress; held by
            // one of another name, both count (the pool says the duplicate: an entry written after an operator freed
            // the Cluster's addresses, while a claim here took one).
            let entries: Vec<(Held, Option<ObjectKey>)> = entries_of(&object)
                .iter()
                .filter_map(|e| Held::of_entry(pool, e).map(|h| (h, entry_name(e))))
                .collect();
            let reserved: Vec<Held> = entries.iter().map(|(h, _)| *h).collect();
            let in_use: Vec<Held> = held.iter().filter(|(p, _, _)| *p == pool).map(|(_, h, _)| *h).collect();
            let held_as_named = |r: Held, named: &Option<ObjectKey>| {
                held.iter().any(|(p, h, key)| *p == pool && h.overlaps(r) && named.as_ref().is_none_or(|n| n == key))
            };
            // One reservation per address, however many entries name it (two claims of a moved Cluster that held it
            // in turn: seed 440475962), unless an IPAddress one of them names holds it.
            let mut reservations: Vec<Held> = entries
                .iter()
                .filter(|(r, _)| !entries.iter().any(|(o, named)| o == r && held_as_named(*o, named)))
                .map(|(r, _)| *r)
                .collect();
            reservations.sort_unstable();
            reservations.dedup();
            let out_of_range = in_use.iter().chain(&reservations).filter(|h| !allocatable.contains(h)).count();
            // A pinned address no IPAddress holds is held for its claim (and not free for others).
            let pinned = self
                .pin_of(pool)
                .map(|(_, held)| held)
                .filter(|h| allocatable.contains(h) && !in_use.contains(h) && !reservations.contains(h));
            let used = in_use.len() + reservations.len() + usize::from(pinned.is_some());
            let total = allocatable.len();
            let expect = |used: usize, out_of_range: usize| {
                json!({
                    "total": total, "used": used, "outOfRange": out_of_range,
                    "free": total.saturating_sub(used - out_of_range),
                })
            };
            // A bound claim whose IPAddress a person deleted while its Cluster is paused (or gone) keeps its address
            // held for it in the term that saw the deletion, and not in a later one (which cannot know it): either
            // count is the truth.
            let kept = claims
                .iter()
                .filter(|c| {
                    let key = key_of(c);
                    self.is_lost(&key)
                        && claim_pool(c) == Some(pool)
                        && !addresses.iter().any(|a| key_of(a) == key)
                        && cluster_of(c).is_some_and(|_| cluster_state(&key.namespace) != Some(false))
                })
                .count();
            let status = object.pointer("/status/ipAddresses").cloned().unwrap_or(Value::Null);
            let kept_counts = (0..=kept).flat_map(|k| (0..=k).map(move |o| (used + k, out_of_range + o)));
            let expect = if kept_counts.clone().any(|(u, o)| status == expect(u, o)) {
                status.clone()
            } else {
                expect(used, out_of_range)
            };
            // An IPAddress the pool does not allocate (an edit that raced an allocation, or passed no webhook) is said.
            let stray = held.iter().find(|(p, h, _)| *p == pool && !allocatable.contains(h));
            if let Some((_, h, key)) = stray {
                let reason = object
                    .pointer("/status/conditions")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .find(|c| c["type"] == "Ready")
                    .and_then(|c| c["reason"].as_str().map(str::to_owned));
                let said =
                    matches!(reason.as_deref(), Some("AddressesOutOfRange" | "DuplicateAddresses" | "InvalidSpec"));
                if !said {
                    return Err(format!(
                        "IPAddress {key} holds {h}, which pool {} does not allocate, and the pool does not say so \
                         (Ready reason {reason:?})",
                        pool.pool_key()
                    ));
                }
            }
            if status != expect {
                return Err(format!(
                    "pool {} shows {status}, the truth is {expect}; the index holds {}",
                    pool.pool_key(),
                    self.index_view(pool)
                ));
            }
            check_cluster_usage(pool, shape.quota, &object, &addresses)?;
            // Every address recorded as moved away is still recorded: in the pool's annotation, or, while that has no
            // room, by the mark on the IPAddress the move left behind (found by seed 20057241 of the soak).
            let marked: Vec<Held> = addresses
                .iter()
                .filter(|a| is_marked_moved_away(a) && pool_of_address(a) == Some(pool))
                .filter_map(|a| Held::of_address(pool, a))
                .collect();
            for (h, e) in &self.elsewhere {
                if pool == PoolId::Global && e.protected && !reserved.contains(h) && !marked.contains(h) {
                    return Err(format!("the reservation of {h} (moved away) vanished from the pool's annotation"));
                }
            }
            // The addresses a claim whose IPAddress a person deleted may still hold (above) are not free to others.
            let kept_addresses: Vec<Held> = if kept > 0 {
                self.actors
                    .lost
                    .iter()
                    .filter(|(k, _)| claims.iter().any(|c| key_of(c) == *k && claim_pool(c) == Some(pool)))
                    .filter_map(|(k, h)| h.filter(|_| !addresses.iter().any(|a| key_of(a) == *k)))
                    .collect()
            } else {
                Vec::new()
            };
            let taken: Vec<Held> = in_use.iter().chain(&reserved).chain(&kept_addresses).copied().collect();
            free.insert(pool, allocatable.into_iter().filter(|a| !taken.iter().any(|t| t.overlaps(*a))).collect());
        }
        for c in &claims {
            let key = key_of(c);
            let paused_cluster = cluster_of(c).map(|_| cluster_state(&key.namespace));
            if !c["metadata"]["deletionTimestamp"].is_null() {
                if paused_cluster != Some(Some(true)) {
                    return Err(format!("claim {key} is stuck being deleted"));
                }
                continue;
            }
            if self.options.sharded
                && claim_pool(c) == Some(SHARD_POOL)
                && self.object(SHARD_POOL.server_kind(), &SHARD_POOL.key()).is_some()
            {
                check_served_by_its_shard(c)?;
                if watch_filter_of(c) != Some(SHARD) {
                    continue;
                }
            }
            let bound = c.pointer("/status/addressRef/name").and_then(Value::as_str).is_some_and(|n| !n.is_empty());
            // A bound claim whose IPAddress a person deleted and that has none again yet waits for an address like an
            // unbound one (a former leader knew its address, this one reads it from the claim's condition).
            // While its Cluster is paused (or gone), only an IPAddress of its name holding the address it lost makes
            // it bound again: a deposed leader's late create of another address is one the manager lets go once it
            // may act (seed 510571539). Otherwise it has let it go and made its own by now (helper-63 F1).
            let frozen = matches!(paused_cluster, Some(None | Some(true)));
            let lost = self.actors.lost.iter().any(|(k, held)| {
                *k == key
                    && !addresses.iter().any(|a| {
                        key_of(a) == key
                            && (!frozen
                                || held
                                    .is_none_or(|h| pool_of_address(a).and_then(|p| Held::of_address(p, a)) == Some(h)))
                    })
            });
            let bound = bound && !lost;
            // A claim whose IPAddress a person deleted, and whose pool went meanwhile (nothing held the pool's
            // deletion any more), is bound to nothing and says so.
            let pool_gone = claim_pool(c).is_none_or(|p| self.object(p.server_kind(), &p.key()).is_none());
            if lost && pool_gone {
                continue;
            }
            if bound {
                let ready = c
                    .pointer("/status/conditions")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .any(|x| x["type"] == "Ready" && x["status"] == "True");
                if !ready {
                    return Err(format!("claim {key} is bound but not Ready: {}", c["status"]));
                }
                continue;
            }
            if matches!(paused_cluster, Some(None | Some(true))) {
                continue;
            }
            let Some(pool) = claim_pool(c) else { continue };
            let Some(free) = free.get(&pool) else { continue };
            // An IPAddress of its name in another pool blocks it (IPAddress specs are immutable).
            if addresses.iter().any(|a| key_of(a) == key) {
                continue;
            }
            let requested = c
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(REQUESTED_ADDRESS_ANNOTATION))
                .and_then(Value::as_str);
            // A pinned address is its claim's only; the pinned claim takes it (docs/compatibility.md D14).
            let pin = self.pin_of(pool);
            let others_pin = |h: &Held| pin.as_ref().is_some_and(|(to, p)| p == h && !to.matches(&key));
            let own_pin = pin.as_ref().filter(|(to, _)| to.matches(&key)).map(|(_, p)| *p);
            let is_free = |h: Held| free.contains(&h);
            // Its Cluster holds its quota of the pool (docs/compatibility.md D21): it waits until the Cluster holds
            // fewer. What the Cluster holds: its IPAddresses, and at most the addresses kept for its bound claims whose
            // IPAddress a person deleted.
            let quota = self.shapes.get(&pool).and_then(|s| s.quota);
            // A claim's own pin, which the pool allocates, is not limited (it waits for it as for a requested address).
            let allocated_pin =
                own_pin.filter(|p| self.shapes.get(&pool).is_some_and(|s| s.allocatable(pool).contains(p)));
            if let (Some(quota), Some(cluster), None) = (quota, cluster_of(c), allocated_pin) {
                let ipaddresses = addresses
                    .iter()
                    .filter(|a| pool_of_address(a) == Some(pool) && key_of(a).namespace == key.namespace)
                    .filter(|a| {
                        a.pointer("/metadata/labels").and_then(|l| l.get(CLUSTER_NAME_LABEL)).and_then(Value::as_str)
                            == Some(cluster)
                    })
                    .count();
                let kept = self
                    .actors
                    .lost
                    .iter()
                    .filter(|(k, _)| {
                        k.namespace == key.namespace
                            && *k != key
                            && !addresses.iter().any(|a| key_of(a) == *k)
                            && claims.iter().any(|o| {
                                key_of(o) == *k && claim_pool(o) == Some(pool) && cluster_of(o) == Some(cluster)
                            })
                    })
                    .count();
                if ipaddresses + kept >= usize::from(quota) {
                    continue;
                }
            }
            let can = match (requested, own_pin) {
                (Some(r), Some(p)) => p.address().to_string() == r && is_free(p),
                (None, Some(p)) => {
                    is_free(p)
                        || !self.shapes.get(&pool).is_some_and(|s| s.allocatable(pool).contains(&p))
                            && free.iter().any(|h| !others_pin(h))
                }
                (Some(r), None) => free.iter().any(|h| h.address().to_string() == r && !others_pin(h)),
                (None, None) => free.iter().any(|h| !others_pin(h)),
            };
            if can {
                return Err(format!(
                    "claim {key} waits while pool {} has a free address ({}): {}",
                    pool.pool_key(),
                    free.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "),
                    c["status"]
                ));
            }
        }
        self.check_returned(&claims, &addresses)
    }

    /// The claim `key` (UID `uid`) came back with its Cluster or a restore, holding `held`: checked by
    /// [`Self::check_returned`] from now on.
    pub(in crate::sim) fn came_back(&mut self, uid: String, key: ObjectKey, held: Held) {
        self.actors.stripped.retain(|(k, _)| *k != key);
        self.returned.push((uid, key, held));
    }

    /// A claim that came back with its Cluster, still here (the same UID), keeps the IPAddress it came back with (its
    /// machine uses that address), and once bound to it, the address is no longer reserved as moved away.
    pub(super) fn check_returned(&self, claims: &[Value], addresses: &[Value]) -> Result<(), String> {
        let pool = PoolId::Global;
        let reserved: Vec<Held> = self
            .object(pool.server_kind(), &pool.key())
            .map(|o| entries_of(&o).iter().filter_map(|e| Held::of_entry(pool, e)).collect())
            .unwrap_or_default();
        for (uid, key, held) in &self.returned {
            let Some(claim) = claims.iter().find(|c| c["metadata"]["uid"].as_str() == Some(uid)) else { continue };
            if !claim["metadata"]["deletionTimestamp"].is_null() {
                continue;
            }
            // Restored by Velero over an address the manager handed out before its watch showed the restore (the
            // conflict `check_create` marks): the bound claim keeps it, and the restored one is withdrawn (seed
            // 150020028, helper-20).
            if self.actors.velero_returned.get(uid).is_some_and(|ip| self.actors.velero_duplicates.contains(ip)) {
                continue;
            }
            // Its pool deleted since (or being deleted: nothing is made in it again), the garbage collector takes its
            // IPAddress (every owner reference dangles).
            let pool_now = claim_pool(claim).and_then(|p| self.object(p.server_kind(), &p.key()));
            if pool_now.is_none_or(|p| !p["metadata"]["deletionTimestamp"].is_null()) {
                continue;
            }
            // Restored by Velero without its status (it was told of no address), its restored IPAddress deleted before
            // it adopted it, by a person or by the garbage collector (its pool deleted and made again): it knows no
            // address to ask for (seeds 400062764, 400344446).
            if self.actors.velero_returned.contains_key(uid) && self.actors.stripped.contains(&(key.clone(), *held)) {
                continue;
            }
            let address = addresses.iter().find(|a| key_of(a) == *key);
            let holds = address.and_then(|a| Held::of_address(pool, a)) == Some(*held);
            // A person deleted its IPAddress while its Cluster is paused or gone: it waits with its address held (as
            // in the bound claims' check), and makes it again once the Cluster is unpaused (seed 120260858).
            let cluster = self.object(Kind::Cluster, &ObjectKey::new(&key.namespace, CLUSTER));
            let waits = cluster.is_none_or(|c| c.pointer("/spec/paused").and_then(Value::as_bool) == Some(true));
            let lost_waiting =
                address.is_none() && waits && self.actors.lost.iter().any(|(k, h)| k == key && *h == Some(*held));
            if lost_waiting && addresses.iter().any(|a| Held::of_address(pool, a).is_some_and(|h| h.overlaps(*held))) {
                return Err(format!("claim {key} waits for {held}, which another IPAddress holds"));
            }
            // A person deleted its IPAddress, and its address is no longer the pool's (an edit the webhook did not
            // see, or admitted once that IPAddress was gone): it is made again with another address (seeds 150050407,
            // 150126055).
            let stranded = self.actors.stripped.contains(&(key.clone(), *held))
                && claim_pool(claim)
                    .is_some_and(|p| !self.shapes.get(&p).is_some_and(|s| s.allocatable(p).contains(held)));
            if !holds && !lost_waiting && !stranded {
                return Err(format!(
                    "claim {key} came back with {held}, and its IPAddress is gone or holds another address: {}",
                    address.map_or_else(|| "none".to_owned(), |a| describe(Kind::Address, a))
                ));
            }
            let bound = claim.pointer("/status/addressRef/name").and_then(Value::as_str) == Some(&*key.name);
            if bound && reserved.contains(held) {
                return Err(format!("claim {key} is bound again to {held}, which is still reserved as moved away"));
            }
        }
        Ok(())
    }
}

/// An IPAddress of one of the simulated pools as the duplicate finder sees it.
struct Holder {
    pool: PoolId,
    held: Held,
    key: ObjectKey,
    /// A bound claim uses its address here.
    used: bool,
    /// A duplicate the check tolerates (restored by Velero, a create for a claim no manager serves, one that awaits
    /// its release).
    exempt: bool,
}

/// The IPAddresses of the simulated pools, each with what `judge` says of it (`used`, `exempt`), in the API server's
/// order.
fn holders_of(addresses: &[Value], judge: impl Fn(&Value, &ObjectKey, Held) -> (bool, bool)) -> Vec<(&Value, Holder)> {
    addresses
        .iter()
        .filter_map(|a| {
            let (pool, key) = (pool_of_address(a)?, key_of(a));
            let held = Held::of_address(pool, a)?;
            let (used, exempt) = judge(a, &key, held);
            Some((a, Holder { pool, held, key, used, exempt }))
        })
        .collect()
}

/// The first two holders of one pool whose addresses overlap and that `conflict` says may not share them, in the
/// API server's order: the one duplicate finder of the checks of every step and of the settled world.
fn first_duplicate<'h>(
    holders: &'h [(&Value, Holder)],
    conflict: impl Fn(&Holder, &Holder) -> bool,
) -> Option<(&'h Holder, &'h Holder)> {
    holders.iter().enumerate().find_map(|(i, (_, this))| {
        holders[..i]
            .iter()
            .map(|(_, other)| other)
            .find(|other| other.pool == this.pool && other.held.overlaps(this.held) && conflict(other, this))
            .map(|other| (other, this))
    })
}

/// A pool with a quota says what its IPAddresses hold per Cluster, by their cluster-name label (docs/compatibility.md
/// D21); one without says nothing.
fn check_cluster_usage(pool: PoolId, quota: Option<u8>, object: &Value, addresses: &[Value]) -> Result<(), String> {
    let shown = object.pointer("/status/clusterUsage").filter(|u| !u.is_null());
    let Some(quota) = quota else {
        return match shown {
            None => Ok(()),
            Some(u) => Err(format!("pool {} has no quota and shows clusterUsage {u}", pool.pool_key())),
        };
    };
    let mut used: BTreeMap<String, i64> = BTreeMap::new();
    let mut without_cluster = 0;
    for a in addresses.iter().filter(|a| pool_of_address(a) == Some(pool)) {
        let label = a.pointer("/metadata/labels").and_then(|l| l.get(CLUSTER_NAME_LABEL)).and_then(Value::as_str);
        match label.filter(|c| !c.is_empty()) {
            Some(cluster) => *used.entry(format!("{}/{cluster}", key_of(a).namespace)).or_default() += 1,
            None => without_cluster += 1,
        }
    }
    let mut top: Vec<(&String, &i64)> = used.iter().collect();
    top.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
    let expect = json!({
        "clusters": used.len(),
        "atQuota": used.values().filter(|n| **n >= i64::from(quota)).count(),
        "top": top.iter().take(10).map(|(c, n)| json!({"cluster": c, "used": n, "quota": quota})).collect::<Vec<_>>(),
        "withoutCluster": without_cluster,
    });
    if shown != Some(&expect) {
        return Err(format!("pool {} shows clusterUsage {shown:?}, the truth is {expect}", pool.pool_key()));
    }
    Ok(())
}
