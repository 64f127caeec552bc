#!/usr/bin/env python3
"""make mutants: the proof of the proof. Applies each realistic regression of the allocation path below (a guard an
engineer "simplifying" the code might drop), one at a time, in a scratch copy of the checkout, and says what of
`make test`'s library tests caught it: a named unit test or scenario, or the number of simulation seeds (of the
8,000 `make test` runs) to the first violation, or "survived". Exits non-zero when one survived.

Python, not Rust: it edits and rebuilds the crate it tests, from outside it.

  tests/tools/mutants.py [--only ID[,ID...]] [--list] [--check] [--keep DIR] [--release]

Each mutation names one `find` text that must occur exactly once in its file (so that a refactor that moves the
guard makes this tool fail loudly, rather than test nothing), and what it is replaced with; `--check` (which
`make test` runs) only checks that, in seconds. The integration tests
are not run (minutes each): a mutation caught only there is caught by `make test` too, and says so in `caught_by`.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# (id, file, find, replace, what the regression is)
MUTATIONS = [
    ("uid-orphan", "src/controllers/ipaddress.rs",
     "    if address.metadata.uid.as_deref().map(Uid::of) != record.uid\n        || claim_owner",
     "    if claim_owner",
     "the orphan release no longer compares the live IPAddress's UID with the record's"),
    ("delete-precondition", "src/controllers/ipaddress.rs",
     "ctx.api.delete_address(&key, &uid, revision.as_deref())",
     "ctx.api.delete_address(&key, &uid, None)",
     "the DELETE of an IPAddress drops its resourceVersion precondition"),
    ("tombstone-relist", "src/index/orphans.rs",
     "        if let Some(unlisted) = self.unlisted_tombstones.as_mut() {\n            unlisted.remove(&(key.clone(), uid));\n        }",
     "",
     "a tombstone listed again by a relist is not kept"),
    ("moved-away-revision", "src/index/moved_away.rs",
     "        let shown = revision.is_at_least(self.written_at);",
     "        let shown = true;",
     "the moved-away ledger trusts any pool event, also one older than our annotation write"),
    ("grace-release", "src/controllers/claim/plan.rs",
     '    if let Some(wait) = view.pool.as_ref().and_then(|pool| reuse_grace_remaining(claim, pool, facts.now)) {',
     '    if let Some(wait) = None::<Duration> {',
     "a deleted claim's release skips the reuse grace period"),
    ("grace-orphan", "src/controllers/orphans.rs",
     "    if now < since + reuse_grace(&view) {\n        return;\n    }",
     "",
     "the release of an IPAddress whose claim went without its finalizer skips the reuse grace period"),
    ("orphan-owner-only", "src/index/record.rs",
     "        self.claim_owner.is_some() || self.protected",
     "        self.claim_owner.is_some()",
     "an IPAddress is taken for a claim's by its owner reference only (the garbage collector takes it off)"),
    ("create-past-fence", "src/apiserver/client.rs",
     "            self.write(api.create(&post_params(), &object)).await.map(typed_address)",
     "            api.create(&post_params(), &object).await.map_err(api_error).map(typed_address)",
     "one create is sent past the leader fence"),
    ("waiter-not-woken", "src/index/registry/mod.rs",
     "        state.let_go(old.held);\n        woken.extend(take_waiters(state));",
     "        state.let_go(old.held);",
     "an address freed by a released holder wakes no waiting claim"),
    ("recheck-await", "src/controllers/claim.rs",
     "            set_ready(claim, ctx, &view, ClaimReason::PoolExhausted, message, None).await?;\n            Ok(Next::After(RECHECK))",
     "            set_ready(claim, ctx, &view, ClaimReason::PoolExhausted, message, None).await?;\n            Ok(Next::AwaitChange)",
     "a claim that found its pool exhausted is not looked at again after RECHECK"),
    ("family-rebuild", "src/index/registry/mod.rs",
     "                            state.rebuild(Config::Ip(c, gateways));",
     "",
     "a pool edit to the other IP family keeps the old allocator"),
    ("pin-placeholder", "src/index/registry/pins.rs",
     "        for held in unheld {\n            self.hold_for_pin(held);\n        }",
     "        let _ = unheld;",
     "a pinned address is not held for its claim (preAllocations reserve nothing)"),
    ("pin-let-go", "src/index/registry/pins.rs",
     "        if self.pins.owner(held).is_some() && !self.is_held(held) {\n            self.hold_for_pin(held);\n        }",
     "",
     "a pinned address freed goes back to the pool, not to its pin"),
    ("pin-other-claim", "src/index/registry/mod.rs",
     "            if let Some(owner) = state.pins.owner(held).filter(|owner| !owner.matches(address)) {",
     "            if let Some(owner) = state.pins.owner(held).filter(|_| false) {",
     "a claim asking for an address pinned to another claim is not refused"),
    ("lost-ipaddress-hold", "src/index/addresses.rs",
     "        if self.keeps_hold_for_claim(&record, key) {",
     "        if false {",
     "an IPAddress deleted from under its live claim frees its address at once"),
    ("foreign-wake", "src/index/addresses.rs",
     "            // Not ours (another provider's, or gone already): a claim of its name that it blocked may go on now.\n            if self.claims.get(key).is_some() {\n                self.wake(key.clone());\n            }",
     "",
     "a claim blocked by another provider's IPAddress is not woken when it goes"),
    ("prefix-overlap", "src/ipam/prefix_pool.rs",
     "        self.in_use.contains_key(&allocation) || !self.overlapping(s, e).is_empty()",
     "        let _ = (s, e);\n        self.in_use.contains_key(&allocation)",
     "prefixes overlapping with different lengths are not a duplicate"),
    ("out-of-range-create", "src/controllers/claim/plan.rs",
     "    if claim.address_ref().is_some() || !(view.out_of_range || view.served != Served::Here) {",
     "    if claim.address_ref().is_some() || view.served == Served::Here {",
     "an IPAddress made while its pool stopped allocating its address is handed out"),
    ("hold-bound-addresses", "src/index/claims.rs",
     "            } else if self.registry.held_by(&pool, &key).is_none()\n                && self.registry.allocate",
     "            } else if false && self.registry.held_by(&pool, &key).is_none()\n                && self.registry.allocate",
     "a new leader does not hold the address of a bound claim whose IPAddress a person deleted"),
    ("relabel-wake", "src/index/pools.rs",
     "                p.shard().map(str::to_owned),",
     "                None::<String>,",
     "a pool relabelled for another shard does not wake its claims"),
    ("previous-address", "src/index/pools.rs",
     "        if previous.is_some() {\n",
     "        if previous.is_some() && false {\n",
     "a bound claim whose IPAddress went gets the lowest free address, not the one its condition names"),
    ("moved-away-mark", "src/controllers/orphans.rs",
     "    if !record.pool.kind.is_global() || !record.moving_away || record.marked_moved_away || record.deleting {",
     "    if true {",
     "an IPAddress a move left behind is not marked (a restart releases it)"),
    ("bound-duplicate-withdrawn", "src/controllers/claim/plan.rs",
     "    if !told_of(claim, view.held) && view.unwanted_duplicate() {",
     "    if view.unwanted_duplicate() {",
     "a claim bound to the IPAddress of its name withdraws it as a duplicate (its machine loses its address)"),
    ("settle-not-once", "src/controllers/claim/plan.rs",
     "    if view.holds_unconfirmed && !facts.settled {",
     "    if view.holds_unconfirmed {",
     "a run whose settled create leaves the hold unconfirmed settles it again and again (it never ends)"),
    ("counts-not-delivered", "src/index/mod.rs",
     "                Notice::Counted(event) => self.sink.counted(event),",
     "                Notice::Counted(_) => {}",
     "what the index counts (releases, duplicates, pools gone) never reaches the metrics"),
    ("blocked-name-unwatched", "src/index/pools.rs",
     "                self.blocked_elsewhere(claim);\n",
     "",
     "a claim whose name another pool's or provider's IPAddress holds is not woken when that IPAddress goes"),
    ("pool-finalizer-while-in-use", "src/index/view.rs",
     "            PoolView::Deleting { in_use: self.pool_in_use(key), pool }",
     "            PoolView::Deleting { in_use: false, pool }",
     "a pool being deleted loses its finalizer while IPAddresses still reference it"),
    ("unbound-duplicate", "src/controllers/claim/plan.rs",
     '    if !told_of(claim, view.held) && view.unwanted_duplicate() {',
     '    if false {',
     "an unbound claim adopts an IPAddress whose address another one holds (a deposed leader's late create)"),
    ("orphan-live-claim", "src/controllers/ipaddress.rs",
     "        Some(live) if live.claim.uses_pool(record.pool.kind, &record.pool.namespace, &record.pool.name) => {",
     "        Some(live) if false && live.claim.uses_pool(record.pool.kind, &record.pool.namespace, &record.pool.name) => {",
     "the orphan release does not confirm with the API server that the claim is gone"),
    ("shard-elsewhere", "src/index/view.rs",
     "        if claim.watch_filter.as_deref() == Some(pool_shard) {\n            return Served::Elsewhere;\n        }",
     "",
     "a manager takes claims of another shard's pool for no manager's"),
    ("restore-wait", "src/controllers/claim/plan.rs",
     '    if !claim.restored || holds || claim.created == 0 {',
     '    if holds || claim.created == 0 {',
     "every claim waits as if Velero restored it"),
    ("status-digest-forget", "src/controllers/claim/ready.rs",
     "        ctx.index.observe(Observed::StatusWriteFailed { claim });\n",
     "",
     "a status write whose answer is lost leaves the digest of the write before it standing"),
    ("gc-delete-cancels", "src/controllers/orphans.rs",
     "            || !owned_by_its_pool(ctx, record).await\n",
     "",
     "the garbage collector's delete of an IPAddress a move left behind is taken for an operator freeing its address"),
    ("pool-appeared-requeue", "src/index/pools.rs",
     "            if appeared {\n",
     "            if false {\n",
     "a pool made again does not queue the entries of the IPAddresses a move left behind in it"),
    ("writer-gone-drops-all", "src/index/moved_away.rs",
     "                if ledger.pending.is_empty() {\n                    pools.remove(pool);\n                }",
     "                pools.remove(pool);",
     "a writer that finds the pool gone drops every pending entry, also one queued while it read"),
    ("told-of-any", "src/controllers/claim/plan.rs",
     '    claim.address_ref().is_some()\n        && claim.bound_address.is_none_or(|bound| held.and_then(Held::address).is_none_or(|a| a == bound))',
     '    let _ = held;\n    claim.address_ref().is_some()',
     "a bound claim adopts any IPAddress of its name, also a deposed leader's late one holding another claim's address"),
    ("queue-backoff-parked-only", "src/runtime/queue.rs",
     "            if outcome == Outcome::Failed(Retry::WhenAnswering) {\n                state.parked.insert(key.clone());",
     "            if false {\n                state.parked.insert(key.clone());",
     "a key whose run failed while the API server did not answer is not parked (it waits for its backoff alone)"),
    ("unwritten-ignores-annotation", "src/index/moved_away.rs",
     "*add && !stored.contains(entry) && parse(pool, entry)",
     "*add && parse(pool, entry)",
     "an entry queued again by a new term is taken for unwritten though the annotation holds it (the sweep cancels it)"),
    ("bound-meanwhile-create", "src/controllers/claim.rs",
     '                if !bound_meanwhile(claim, ctx, assigned.address).await? {',
     '                if true {',
     "an IPAddress made again out of range for a claim the cache shows unbound is deleted without reading the claim"),
    ("bound-meanwhile-hold", "src/controllers/claim/plan.rs",
     '        if !bound_meanwhile {',
     '        if !bound_meanwhile || true {',
     "the out-of-range hold of a claim the cache shows unbound is given up without reading the claim"),
    ("late-adopted-by-bound", "src/controllers/claim/plan.rs",
     '    if bound && !told_of(claim, view.held) {',
     '    if false {',
     "a bound claim adopts a late IPAddress of its name holding a free address other than its condition names"),
    ("kept-hold-any-address", "src/index/addresses.rs",
     "                && c.bound_address.is_none_or(|bound| held == Some(bound))",
     "",
     "the hold of a withdrawn late IPAddress is kept for a bound claim whose condition names another address"),
    ("remake-from-cache", "src/controllers/claim/plan.rs",
     '        if !lives_bound(live) {',
     '        if false {',
     "a bound claim as cached makes its IPAddress again without reading the claim (it may be gone, moved away)"),
    ("kept-hold-not-reserved", "src/index/claims.rs",
     "            moved_away::kept_hold_moved_away(self, &claim);\n",
     "",
     "a bound claim deleted for a move while its IPAddress was gone frees its kept address instead of reserving it"),
    ("kept-address-unheld", "src/index/moved_away.rs",
     "        (None, Some(bound)) if !kind.is_prefix_pool() => Held::Ip(Some(bound)),",
     "        (None, Some(bound)) if false => Held::Ip(Some(bound)),",
     "a bound claim deleted for a move before this process held its address (watches still listing) reserves nothing"),
    ("older-event-applied", "src/index/addresses.rs",
     "        current.revision != event.revision && current.revision.is_at_least(event.revision)",
     "        false",
     "a watch event of an IPAddress older than our record of it (our DELETE's answer) overwrites the record"),
    ("withdraw-unfenced", "src/controllers/claim/adopt.rs",
     "    set_ready(&live.claim, ctx, view, ClaimReason::AllocationFailed, message, None).await?;\n",
     "    let _ = message;\n",
     "an IPAddress is withdrawn without first a status write conditioned on the claim as read"),
    ("repair-deleting-pool", "src/controllers/claim/plan.rs",
     '    view.pool.as_deref().filter(|p| !p.is_deleting())',
     '    view.pool.as_deref()',
     "the adoption puts back the owner reference of a pool being deleted (it fights the garbage collector)"),
    ("refused-gives-up-machines", "src/controllers/claim.rs",
     "                let then = if machines { IfNotCreated::KeptForTheMachine } else { IfNotCreated::GivenUp };",
     "                let then = IfNotCreated::GivenUp;",
     "a bound claim whose create of its IPAddress again is refused gives up its machine's address"),
    ("late-create-frees-machines-address", "src/index/addresses.rs",
     "            self.registry.set_aside(pool, key);\n",
     "",
     "a deposed leader's late create under a bound claim whose IPAddress a person deleted frees its machine's address "
     "to a waiting claim"),
    ("aside-not-taken-back", "src/index/registry/mod.rs",
     "            rename_holder(state, &aside, address);\n            state.holders.insert(address.clone(), holding);\n",
     "            state.holders.insert(aside.clone(), holding);\n",
     "a claim making its IPAddress again does not take back the address set aside for its machine"),
    ("aside-never-given-up", "src/index/registry/mod.rs",
     "        woken.extend(self.release_holder_if(pool_key, &aside_key(address), |holding| !holding.confirmed && !keep));\n",
     "",
     "the address set aside for a claim's machine stays held after the claim is gone"),
    ("aside-claim-gone-unwoken", "src/index/claims.rs",
     " || self.registry.has_aside(&pool, key) {",
     " {",
     "a claim deleted while its machine's address is set aside does not wake its worker to let it go"),
    ("cluster-gone-judged-before-claims-listed", "src/index/pools.rs",
     "            if self.registry.is_synced() {\n",
     "            if true {\n",
     "a Cluster a new term finds gone, last seen paused, before the claims listed takes the IPAddresses of claims not "
     "listed yet for ones a move left behind"),
    ("orphan-check-before-synced", "src/controllers/orphans.rs",
     "    if !*ctx.synced.borrow() {\n        return;\n    }\n    let first",
     "    let first",
     "a claim's orphan check before every watch listed releases an IPAddress a move left behind, whose Cluster is "
     "judged only once they have"),
    ("aside-kept-for-gone-claim", "src/index/observe.rs",
     "                    IfNotCreated::GivenUpForAGoneClaim => self.give_up_gone_claims_hold(pool, key),\n",
     "                    IfNotCreated::GivenUpForAGoneClaim if !still_held(pool, live, record.as_ref(), then) => {\n"
     "                        self.give_up_gone_claims_hold(pool, key)\n                    }\n",
     "the address set aside for a claim's machine stays held after the claim went while the late object lived"),
    ("placeholder-woken-as-claim", "src/index/orphans.rs",
     "        let claims = duplicate.holders.iter().filter(|h| !super::registry::is_placeholder(h)).cloned().collect();",
     "        let claims = duplicate.holders.clone();",
     "a duplicate wakes a hold set aside by its placeholder key, as if it were a claim"),
    ("placeholder-has-uncertain-hold", "src/index/registry/mod.rs",
     "        if is_placeholder(address) {\n            return None;\n        }\n        let aside",
     "        let aside",
     "a placeholder key is taken for an IPAddress whose uncertain hold its worker settles"),
    ("new-term-frees-late-bound-address", "src/index/claims.rs",
     "            .filter(|key| self.addresses.get(key).is_none_or(|r| self.holds_another_than_bound(r, key)))\n",
     "            .filter(|key| !self.addresses.contains_key(key))\n",
     "a new term leaves free the address of a bound claim whose IPAddress is a late create holding another"),
    ("name-read-keeps-another-pools", "src/index/observe.rs",
     "IfNotCreated::GivenUp | IfNotCreated::GivenUpForAGoneClaim => record.is_some_and(|r| *r.pool == *pool),",
     "IfNotCreated::GivenUp | IfNotCreated::GivenUpForAGoneClaim => record.is_some(),",
     "a claim that waits keeps the hold of a create that never happened: its name holds an IPAddress of another pool"),
    ("name-read-retry-keeps-taken", "src/index/observe.rs",
     "IfNotCreated::Retried => live.is_none_or(|l| AddressRecord::of(l).is_some_and(|r| *r.pool == *pool)),",
     "IfNotCreated::Retried => true,",
     "a create answered AlreadyExists by another pool's or provider's IPAddress keeps its hold for good"),
    ("remember-forgets-move", "src/index/addresses.rs",
     "                    if self.keeps_moving_away(current) {\n                        record.moving_away = true;",
     "                    if self.keeps_moving_away(current) {",
     "the answer of our own write replaces what the index knew of a move (the hold stays for a new claim of the name)"),
    ("deleted-before-move-reserved", "src/index/moved_away.rs",
     "        || (claim.deletion_timestamp.is_some() && !claim.moving_away)\n",
     "",
     "a claim deleted before its Cluster moved gets a moved-away entry for the address it released"),
    ("no-reclaim-for-bound", "src/index/moved_away.rs",
     "pub fn reclaim_for_bound(index: &mut State, pool: &PoolKey, claim: &Claim) {\n",
     "pub fn reclaim_for_bound(index: &mut State, pool: &PoolKey, claim: &Claim) {\n    if pool.kind.is_global() {\n        return;\n    }\n",
     "a bound claim that came back with its Cluster, its IPAddress gone, cannot take over the reservation under its own name"),
    ("released-then-moved-reserved", "src/index/moved_away.rs",
     "        (None, Some(_)) if claim.deletion_timestamp.is_some() => return,\n",
     "",
     "a claim released before clusterctl marked and deleted it for a move reserves the address it gave up"),
    ("deleted-pool-no-duplicate", "src/index/registry/pool_state.rs",
     "            (None, _) if self.spec_removed && held.address().is_some() => {",
     "            (None, _) if false => {",
     "a late IPAddress recorded in a pool deleted meanwhile is not found to duplicate a bound claim's address"),
    ("older-read-undoes-newer-event", "src/index/addresses.rs",
     "                    if current.revision != record.revision && current.revision.is_at_least(record.revision) =>\n",
     "                    if false =>\n",
     "a read or an answer older than the record undoes what the watch's newer event told (an owner reference taken off)"),
    ("deleting-bound-one-not-counted", "src/index/orphans.rs",
     "other != key && self.claims.get(other).is_some_and(|c| self.bound_as_told(pool, other, &c))",
     "other != key\n                    && self.claims.get(other).is_some_and(|c| {\n                        c.deletion_timestamp.is_none() && self.bound_as_told(pool, other, &c)\n                    })",
     "a paused Cluster keeps a late duplicate of the address of a bound claim being deleted (its release held by the pause)"),
    ("left-behind-released-before-the-pool-reread", "src/controllers/ipaddress.rs",
     "            let still_known =\n                is_live && !entry_waits && view.pool.as_ref().and_then(|p| p.metadata.uid.clone()) == known_uid;\n",
     "            let still_known = true;\n",
     "the IPAddress a move left behind is released while its pool, made again unseen, never recorded its address"),
    ("left-behind-let-go-without-the-pool-reread", "src/controllers/claim/adopt.rs",
     "        (LetGo::LeftBehind, Some(record)) => {\n",
     "        (LetGo::LeftBehind, Some(record)) if false => {\n",
     "a new claim of its name lets go the IPAddress a move left behind while its pool, made again unseen, never recorded it"),
    ("left-behind-let-go-of-another-pool-before-its-entry", "src/controllers/ipaddress.rs",
     "            let entry_waits = view.moved_away_unwritten && (one.entry_first || !of_the_pool_known);\n",
     "            let entry_waits = view.moved_away_unwritten && one.entry_first;\n",
     "a new claim of its name lets go the IPAddress a move left behind, of a pool made again and seen, before its entry"),
    ("orphan-check-of-another-managers", "src/controllers/orphans.rs",
     "    let Some(record) = first.record.filter(|_| !first.another_managers) else {\n",
     "    let Some(record) = first.record else {\n",
     "a claim's Delete event releases an IPAddress of its name that another shard's move left behind"),
    ("other-shards-move-released", "src/index/orphans.rs",
     "            || (self.left_to_other_shards.contains(&id) && !self.sees_claims_of(&record.pool))\n",
     "",
     "a filtered manager releases the IPAddress another shard's Cluster left behind (that shard's manager records the move)"),
    ("unbacked-waits-for-room", "src/controllers/moved_away.rs",
     "    let unbacked = ctx.index.moved_away_view(key).unbacked(&changes);\n",
     "    let unbacked = std::collections::BTreeSet::new();\n",
     "a moved-away entry that only the annotation can record waits for room in it (known to this process only)"),
    ("release-once-only", "src/controllers/claim/plan.rs",
     '    if claim.release_finalizer_index.is_none() && view.record.is_none() {',
     '    if claim.release_finalizer_index.is_none() {',
     "a released claim still held by another finalizer leaves a late IPAddress of its name alone (both wait for good)"),
    ("status-counts-in-memory", "src/index/registry/pool_state.rs",
     "        if unconfirmed == 0 {\n            return all;\n        }",
     "        if true {\n            return all;\n        }",
     "the pool status counts holds only this manager knows (two managers of a pool rewrite each other's status)"),
    ("left-behind-kept-by-all", "src/index/pools.rs",
     "            moved_away::claim_moved_away(self, &address, sees_its_claims);",
     "            moved_away::claim_moved_away(self, &address, true);",
     "a manager with --watch-filter keeps a move of a claim it never saw after the claim's manager undid it"),
    ("left-behind-unrecorded", "src/index/pools.rs",
     "            moved_away::claim_moved_away(self, &address, sees_its_claims);",
     "            let _ = sees_its_claims;",
     "a Cluster gone while paused leaves the moves of the claims whose deletion was not seen unrecorded"),
    ("left-behind-other-shard", "src/index/pools.rs",
     "            if others && !sees_its_claims {\n                self.left_to_other_shards.insert((address, uid));\n                continue;\n            }\n",
     "",
     "a manager with --watch-filter records as moved away the IPAddresses of another shard's Cluster gone while paused"),
    ("allocate-after-relabel", "src/index/pools.rs",
     "        if !self.serves_pool(pool) {\n",
     "        if false {\n",
     "a claim whose pool was labelled for another shard while its run awaited allocates from it anyway"),
    ("moved-before-created", "src/index/addresses.rs",
     "        if noted {\n",
     "        if false {\n",
     "a claim gone for a move before its IPAddress was recorded has its address freed by the orphan check"),
    ("moved-before-read-unrecorded", "src/index/addresses.rs",
     "        self.moved_before_recorded(key, record.claim_owner, unseen_create);\n",
     "",
     "a claim gone for a move while the answer to its create was lost: the worker's read of the IPAddress does not "
     "record the move, and the orphan check frees the address the moved machine uses"),
    ("moved-before-watched-unrecorded", "src/index/addresses.rs",
     "        self.moved_before_recorded(&key, claim_owner, unseen_create);\n",
     "",
     "a claim gone for a move while the answer to its create was lost: the watch's event of the IPAddress does not "
     "record the move, and the orphan check frees the address the moved machine uses"),
    ("confirm-not-dirty", "src/index/registry/mod.rs",
     "                if newly_confirmed {\n                    self.dirty.mark(pool_key);\n                }",
     "                let _ = newly_confirmed;",
     "a hold confirmed by its IPAddress leaves the pool's status (which now counts it) unwritten"),
    ("moving-away-sticky-for-all", "src/index/orphans.rs",
     "        record.moving_away && (record.moving_away_noticed || self.sees_claims_of(&record.pool))",
     "        record.moving_away",
     "a manager that does not see a claim keeps a move its manager took back off the IPAddress"),
    ("created-orphan-unchecked", "src/index/pools.rs",
     "        if record.is_some() && self.claims.get(&claim.key).is_none_or(|c| c.uid != claim.uid) {",
     "        if false {",
     "the answer of a create for a claim gone meanwhile leaves its IPAddress to the sweep"),
    ("seen-delete-as-move", "src/index/claims.rs",
     "        self.remove_claim(&last.key, Some(last.moving_away));",
     "        self.remove_claim(&last.key, None);",
     "a claim's deletion seen without clusterctl's mark is taken for a move when its Cluster went while paused"),
    ("seen-gone-left-behind", "src/index/pools.rs",
     "                    && !self.claim_seen_gone(k, r)\n",
     "",
     "a paused Cluster's deletion takes the IPAddress of a claim seen deleted for good for one a move left behind"),
    ("orphan-cluster-unread", "src/controllers/ipaddress.rs",
     "    if kept_for_the_pause && cluster_paused_now(ctx, &key.namespace, record.cluster_label.as_deref()).await? {",
     "    if false {",
     "the orphan release trusts the cached Cluster, which a relist past a move's pause shows unpaused"),
    ("stale-cluster-unpauses", "src/index/pools.rs",
     "        let paused = paused || self.paused_by_a_newer_read(&key, revision);",
     "        let paused = paused;",
     "a Cluster watch event older than a live read that showed the Cluster paused unpauses it"),
    ("cluster-delete-last-state", "src/index/relist.rs",
     "        self.cluster_deleted(&object_key(object), object.is_paused());",
     "        self.delete_cluster(&object_key(object));",
     "a Cluster's Delete event whose last state is paused is taken for an unpaused Cluster's"),
    ("cluster-shard-unread", "src/index/relist.rs",
     "object.is_paused(), object.watch_filter.as_deref(), revision);",
     "object.is_paused(), None, revision);",
     "a Cluster's watch-filter label is not read, and a filtered manager takes every Cluster for another shard's"),
    ("seen-gone-kept-for-pause", "src/index/orphans.rs",
     "        !self.claim_seen_gone(key, record)\n            && !self.duplicates_a_bound_one",
     "        !self.duplicates_a_bound_one",
     "the IPAddress of a claim seen deleted for good is kept while its Cluster is paused (a restart then reserves it)"),
    ("stale-cluster-read", "src/index/pools.rs",
     "        if !self.clusters.contains_key(&key)\n            || self.cluster_revisions.get(&key).is_some_and(|w| w.is_at_least(revision))\n",
     "        if false\n",
     "a live read of a paused Cluster that its watch has overtaken (unpaused or deleted since) pauses it for good"),
    ("waiting-claim-unread", "src/controllers/claim/plan.rs",
     '            if (unbound && lives_unbound(claim, live))',
     '            if unbound',
     "a claim waiting for its Cluster gives up the address kept for it when the cache shows it unbound"),
    ("entry-back-unwoken", "src/index/moved_away.rs",
     "            index.wake_all(bound_back);\n",
     "",
     "a moved-away entry put back for an address its claim is bound to again wakes no one, and stays"),
    ("unsynced-spec-less-pool", "src/index/registry/mod.rs",
     "    state.spec_removed |= synced && state.spec.is_none();\n",
     "",
     "a pool first seen through an IPAddress after every watch listed is taken for one whose spec may still come"),
    ("orphan-duplicate-withdrawn", "src/index/view.rs",
     " && !self.others_orphaned\n",
     "\n",
     "an unbound claim withdraws its IPAddress though every other holder of its address is an orphan"),
    ("paused-entry-kept", "src/controllers/claim/plan.rs",
     '        if lives_bound_staying(live) {\n            return Step::BoundBack(held);\n        }',
     '        let _ = (live, held);',
     "a claim bound again, its Cluster paused again, leaves the moved-away entry whose removal a leader change lost"),
    ("unbacked-entry-unwritten", "src/index/moved_away.rs",
     "        if index.moved_away_unwritten_for(pool, held) {\n",
     "        if false {\n",
     "an entry left out for want of room waits for the next retry after its IPAddress went (unbacked, it has room)"),
    ("restored-taken-for-left-behind", "src/index/orphans.rs",
     "(self.holds_reserved(&record.pool, key) && (!claim.restored || owner_moved_away))",
     "self.holds_reserved(&record.pool, key)",
     "a claim Velero restored lets its own IPAddress go as one a move left behind (the owner reference is stale)"),
    ("out-of-range-withdrawn-paused", "src/controllers/claim.rs",
     "                if unless_paused && ipaddress::cluster_paused_now(ctx, &key.namespace, claim.cluster()).await? {\n",
     "                if false {\n",
     "a create a pool edit put out of range is withdrawn after its Cluster was paused (a move may have copied it)"),
    ("orphan-live-mark-unread", "src/controllers/ipaddress.rs",
     "        && AddressRecord::of(&address).is_some_and(|live| live.moving_away)\n",
     "        && false\n",
     "the orphan release trusts its record over the live read that shows the IPAddress marked for a move"),
    ("retry-per-write", "src/controllers/moved_away.rs",
     "            (Some(delay), Some(at)) => self.queue.reset(at, delay),\n",
     "            (Some(delay), Some(_)) => {\n                self.queue.insert(pool.clone(), delay);\n            }\n",
     "every write that finds the annotation full adds one more retry of its pool"),
    ("not-allocated-unfenced", "src/controllers/claim.rs",
     "                return let_go(ctx, key, &view, judged, LetGo::NotAllocated).await;\n",
     "                let _ = judged;\n                ipaddress::delete(ctx, &created, \"withdrawing\").await?;\n"
     "                ctx.index.deleted_address(key, pool_key, created.metadata.uid.as_deref());\n"
     "                return Ok(Next::After(Duration::ZERO));\n",
     "a create put out of range is deleted on a plain read of the claim, with no status write to fence a bind"),
    ("orphan-entry-not-rechecked", "src/controllers/ipaddress.rs",
     "    if ctx.index.orphan_view(key, Some(record)).moved_away_unwritten {\n        return Ok(Released::Done);\n    }\n",
     "",
     "the orphan release does not look again, after its reads, for an entry of its address queued meanwhile"),
    ("restored-replacement-moved", "src/index/claims.rs",
     "            self.remove_claim(&key, claim.restored.then_some(false));\n",
     "            self.remove_claim(&key, None);\n",
     "a claim a relist finds replaced by one Velero restored is taken for moved when its Cluster went paused"),
    ("orphan-waits-for-address", "src/index/orphans.rs",
     "        self.moved_away_unwritten_named(pool, key)\n",
     "        self.registry.held_by(pool, key).is_some_and(|held| self.moved_away_unwritten_for(pool, held))\n",
     "an orphan's release waits for any entry of its address, also one naming another IPAddress (a duplicate)"),
    ("paused-new-hold-kept", "src/controllers/claim/plan.rs",
     '                || (bound_to_another && lives_bound_to_another(live, held_address))',
     '                || (bound_to_another && false)',
     "a bound claim paused before its create of another address was confirmed keeps that hold (a waiter starves)"),
    ("release-takes-left-behind", "src/controllers/claim/plan.rs",
     "                && (r.moving_away || AddressRecord::of(address).is_some_and(|live| live.moving_away))\n",
     "                && false\n",
     "a new claim of a moved claim's name, deleted, deletes the IPAddress the move left behind before its entry is written"),
    ("release-takes-adopted", "src/controllers/claim/plan.rs",
     "    if !made_for(address, claim) && (claim.release_finalizer_index.is_none() || adopted_by_another) {",
     "    if !made_for(address, claim) && claim.release_finalizer_index.is_none() {",
     "a deleted claim seen through a lagging watch deletes the IPAddress a new claim of its name adopted and is bound to"),
    ("release-leaves-dead-owners", "src/controllers/claim.rs",
     "=> live_claim(claim, ctx).await?.is_none(),\n",
     "=> true,\n",
     "a deleted claim leaves its IPAddress, made for an earlier claim of its name, to the orphan release (held longer)"),
    ("orphan-kept-for-unserved-claim", "src/controllers/ipaddress.rs",
     "            let duplicate_for_none = served_by_none\n",
     "            let duplicate_for_none = false\n",
     "a restored IPAddress is kept for good for a claim of its name that no manager serves, duplicating a bound address"),
    ("let-go-writes-another-pools-claim", "src/controllers/claim/adopt.rs",
     "    if !live.claim.uses_pool(pool_key.kind, &pool_key.namespace, &pool_key.name) {\n        return Ok(Err(Next::AwaitChange));\n    }\n    let Some(address) = ctx.api.get_address(key)",
     "    let Some(address) = ctx.api.get_address(key)",
     "letting an IPAddress go writes the status of a claim of its name that replaced ours, of another provider's pool"),
    ("status-written-to-another-claim", "src/controllers/claim/ready.rs",
     "            if live.uid != claim.uid.to_string() {",
     "            if false {",
     "a status write read live lands on another provider's claim that replaced ours under the name"),
    ("status-never-written-beside-others", "src/controllers/claim/ready.rs",
     "            if live.uid != claim.uid.to_string() {",
     "            if !live.uid.is_empty() {",
     "a claim carrying another controller's condition is never told it is bound (every such write refused)"),
    ("release-read-error-ignored", "src/controllers/claim.rs",
     "=> live_claim(claim, ctx).await?.is_none(),\n",
     "=> live_claim(claim, ctx).await.ok().flatten().is_none(),\n",
     "a failed read of a deleted claim leaves its IPAddress, made for an earlier claim of its name, to the orphan release"),
    ("withdrawal-taken-for-operator-cancel", "src/controllers/orphans.rs",
     "            || record.deleting_when_moved\n",
     "",
     "our own withdrawal's DELETE, landed before the claim's move was noticed, cancels the moved address's entry"),
    ("deleting-at-move-not-remembered", "src/index/moved_away.rs",
     "                record.deleting_when_moved |= record.deleting;\n",
     "",
     "an IPAddress already deleting when its claim moved away is not remembered so (its entry cancelled)"),
    ("restored-duplicate-withdrawn", "src/index/view.rs",
     " && !self.restored_one_wins",
     "",
     "a claim Velero restored withdraws its own IPAddress for an unbound claim's late create of the address"),
    ("entry-written-into-a-pool-made-again", "src/controllers/moved_away.rs",
     "    let dropped = queued_for_a_pool_gone(ctx, key, &live, &changes).await?;\n",
     "    let dropped: Vec<String> = Vec::new();\n",
     "an entry queued for a pool since deleted, with the IPAddress it names, is written into the pool made again"),
    ("restored-winner-bound-at-once", "src/controllers/claim/plan.rs",
     '    if unbound && view.restored_one_wins {',
     '    if false {',
     "a restored claim that wins its duplicate on the cache is bound beside a binding of the other claim in flight"),
    ("own-delete-taken-for-operator-cancel", "src/controllers/orphans.rs",
     "            || record.deleted_by_us\n",
     "",
     "our own withdrawal's DELETE, landed after the claim's move was noticed, cancels the moved address's entry"),
    ("restored-left-behind-adopted", "src/index/orphans.rs",
     "(!claim.restored || owner_moved_away)",
     "!claim.restored",
     "a restored claim adopts the IPAddress a move left behind, restored from a backup taken while it was left behind"),
    ("moved-winner-bound-at-once", "src/controllers/claim/plan.rs",
     '    if unbound && view.moved_one_waits {',
     '    if false {',
     "the IPAddress that came back wins its duplicate on the cache and is bound beside a binding in flight"),
    ("moved-winner-waits-for-a-restored-one", "src/index/view.rs",
     "                            self.addresses.get(other).is_some_and(|r| r.claim_owner == Some(c.uid.uid()))\n",
     "                            self.addresses.contains_key(other)\n",
     "the IPAddress that came back waits for a restored holder too, which waits for it: both stuck"),
    ("moved-winner-waits-for-another-moved-one", "src/index/view.rs",
     "                        && !self.is_moved_holder(&pool_key, other)\n",
     "",
     "two IPAddresses that came back holding one address each wait for the other: both stuck"),
    ("moved-winner-loses-to-a-claim-bound-elsewhere", "src/index/view.rs",
     " && claim.bound_address.is_none_or(|b| holds.is_none_or(|a| a == b))",
     "",
     "the IPAddress that came back is withdrawn for a late create of a claim bound to another address"),
    ("moved-winner-reads-the-duplicates-hold", "src/index/view.rs",
     "        let holds = self.held_by(pool_key, key).and_then(Held::address);",
     "        let holds = self.duplicate_of(pool_key, key).and_then(|d| d.held.address());",
     "in a prefix pool, a claim bound to its own prefix is taken for bound elsewhere when a wider one overlaps it"),
    ("waiting-bound-keeps-a-stale-failure", "src/controllers/claim/plan.rs",
     '    if says_not_ready_while_held(claim, view) {',
     '    if false {',
     "a bound claim waiting for its Cluster keeps a failure its condition tells after its IPAddress was made again"),
    ("waiting-bound-ready-of-any-address", "src/controllers/claim/plan.rs",
     '        && view.held.is_some()\n        && told_of(claim, view.held)\n}',
     '        && view.held.is_some()\n}',
     "a bound claim waiting for its Cluster is told Ready of a late IPAddress of its name holding another address"),
    ("waiting-bound-ready-without-ipaddress", "src/controllers/claim/plan.rs",
     '        && claim.address_ref() == Some(&*claim.key.name)\n        && view.record.as_ref().is_some_and(|r| *r.pool == view.pool_key)\n',
     '        && claim.address_ref() == Some(&*claim.key.name)\n',
     "a bound claim waiting for its Cluster is told Ready of the address held for it while it has no IPAddress"),
    ("marked-claim-loses-its-hold", "src/index/addresses.rs",
     "                && c.uses_pool(pool.kind, &pool.namespace, &pool.name)\n                && c.bound_address",
     "                && c.uses_pool(pool.kind, &pool.namespace, &pool.name)\n                && !c.moving_away\n"
     "                && c.bound_address",
     "a claim marked for a move before its IPAddress's deletion is seen frees the address its machine uses over there"),
    ("kept-hold-notes-a-create", "src/index/claims.rs",
     "                && !self.holds_without_create.contains(key)\n",
     "",
     "a claim whose IPAddress was deleted from under it, gone for a move, notes a create that was never sent: the "
     "IPAddress a restore brings back with its owner reference is taken for moved, and the restored claim loses it"),
    ("allocate-keeps-hold-without-create", "src/index/pools.rs",
     "            self.holds_without_create.remove(&claim.key);\n",
     "",
     "a kept hold making its IPAddress again is still taken for one without a create: that create, its answer lost, "
     "goes unnoted when the claim goes for a move, and the moved machine's address is freed"),
    ("moved-before-collected-owner", "src/index/addresses.rs",
     "            None if unseen_create => {",
     "            None if false => {",
     "the IPAddress of a claim gone for a move while its create's answer was lost, its owner reference taken off by "
     "the garbage collector first, does not record the move: the moved machine's address is freed"),
    ("ownerless-later-event-takes-note", "src/index/addresses.rs",
     "            && self.registry.holds_unconfirmed(pool, key)\n            && self.registry.held_by(pool, key) == Some(held)\n"
     "            && self.addresses.get(key).is_none_or(|r| r.uid != uid)",
     "            && { let _ = uid; self.registry.held_by(pool, key) == Some(held) }",
     "any ownerless event of an IPAddress recorded already (its owner reference collected after a restore) takes a "
     "note left over from an earlier claim of the name: the live claim's address is reserved as moved"),
    ("bound-hold-notes-a-create", "src/index/claims.rs",
     "                self.holds_without_create.insert(key.clone());\n                tracing::info!",
     "                tracing::info!",
     "a new term's hold for a bound claim without its IPAddress is taken for a create in flight: the claim's deletion "
     "for a move notes one, and a restore's IPAddress with the old owner reference is taken for moved"),
    ("moved-before-created-any-claim", "src/index/addresses.rs",
     "            Some(uid) => self.moved_before_created.remove(&(key.clone(), uid)),",
     "            Some(_) => self.moved_before_created.iter().any(|(k, _)| k == key),",
     "a new claim of the name of a claim moved while no create was in flight is taken for moved, its address reserved"),
    ("moved-before-created-last-only", "src/index/claims.rs",
     "                self.moved_before_created.insert((key.clone(), claim.uid.uid()));",
     "                self.moved_before_created.retain(|(k, _)| k != key);\n"
     "                self.moved_before_created.insert((key.clone(), claim.uid.uid()));",
     "a second claim of the name gone for a move hides the first one's create in flight: its move goes unrecorded"),
    ("pause-keeps-restored-duplicate", "src/index/orphans.rs",
     "            && !self.duplicates_a_restored_one(key, record)\n",
     "",
     "a pause keeps a late orphan duplicating a restored claim's IPAddress, which is withdrawn instead"),
    ("restored-duplicate-any-order", "src/index/orphans.rs",
     "                                    && r.created <= record.created\n",
     "",
     "a pause keeps no orphan duplicating a restored IPAddress, also one created first: a move's left-behind "
     "IPAddress is released for a stale backup's restore"),
    ("restored-duplicate-strictly-later", "src/index/orphans.rs",
     "                                    && r.created <= record.created\n",
     "                                    && r.created < record.created\n",
     "a deposed leader's late create landed in the same second as the restore is kept by the pause, and the restored "
     "IPAddress withdrawn"),
    ("status-duplicates-not-regrouped", "src/index/registry/mod.rs",
     "        let mut out: Vec<Duplicate> = pool_state::overlapping_groups(holds)\n            .map(",
     "        let mut out: Vec<Duplicate> = state.duplicates.iter().map(|(held, members)| (*held, members.iter().filter(|k| holds.iter().any(|(_, h)| h == *k)).cloned().collect::<Vec<_>>())).filter(|(_, m)| m.len() > 1)\n            .map(",
     "the status's duplicates only drop the holds left out, and a wide one left out still ties two that do not "
     "overlap"),
    ("restored-wins-needs-claim-owner", "src/index/view.rs",
     "            && self.addresses.get(key).is_some_and(|r| r.claim_owner != Some(claim.uid.uid()) && !r.moving_away)",
     "            && self.addresses.get(key).is_some_and(|r| r.claim_owner.is_some_and(|o| o != claim.uid.uid()))",
     "a restored IPAddress whose dangling owner the garbage collector took off loses to an unbound claim's late "
     "create"),
    ("doubtful-in-status", "src/index/pools.rs",
     "        let in_doubt = |key: &ObjectKey| self.in_doubt(pool, key);",
     "        let in_doubt = |_: &ObjectKey| false;",
     "a record a relist did not show is counted in the pool's status, which another manager writes without it"),
    ("status-duplicates-in-doubt", "src/index/view.rs",
     "            duplicates: self.status_duplicates(key),",
     "            duplicates: self.duplicates(key),",
     "the pool's condition names a duplicate with a record in doubt, which another manager writing the status lacks"),
    ("status-out-of-range-in-doubt", "src/index/pools.rs",
     "        self.registry.out_of_range(pool, limit, |k| self.in_doubt(pool, k))",
     "        self.registry.out_of_range(pool, limit, |_| false)",
     "the pool's condition names a record in doubt as out of range, which another manager writing the status lacks"),
    ("stale-answer-ends-doubt", "src/index/addresses.rs",
     "                    record.doubtful = current.doubtful;\n",
     "",
     "an answer older than the relist that left a record in doubt ends the doubt: a phantom held until the next relist"),
    ("invalid-spec-counts-left-out-as-out-of-range", "src/index/registry/pool_state.rs",
     "            if !self.allocates(holding.held) {",
     "            if self.allocator.is_some() && !self.allocates(holding.held) {",
     "without a valid spec a hold left out of the status still counts as out of range"),
    ("doubt-rewrites-no-status", "src/index/addresses.rs",
     "            if !std::mem::replace(&mut record.doubtful, true) {\n                self.registry.status_changed(&record.pool);\n            }",
     "            record.doubtful = true;",
     "a record put in doubt by a relist leaves the pool's status counting it until something else changes"),
    ("doubt-ended-no-status", "src/index/addresses.rs",
     "        if let Some(previous) = previous.filter(|p| p.doubtful && !doubtful) {\n            self.registry.status_changed(&previous.pool);\n        }",
     "        let _ = (previous, doubtful);",
     "a record in doubt replaced by a read leaves the pool's status without it until something else changes"),
    ("left-behind-hold-kept-for-new-claim", "src/index/addresses.rs",
     "                && !self.left_behind_for(record, key, &c)\n",
     "",
     "the hold of an unmarked IPAddress a move left behind, gone from under a new claim of its name, is kept for that "
     "claim, which makes it again with the address the moved machine uses"),
    ("left-behind-released-before-its-pool-is-shown", "src/controllers/orphans.rs",
     " && !pools.known_as_it_is(ctx, record, view).await {",
     " && false {",
     "a marked IPAddress a move left behind is released while the pool watch has not shown its pool made again"),
    ("left-behind-deleting-let-go-unrecorded", "src/controllers/claim/plan.rs",
     '        if view.moved_away_unwritten && !(record.deleting && of_the_pool_known) {',
     '        if view.moved_away_unwritten && !record.deleting {',
     "a new claim of its name lets go of an IPAddress a move left behind, being deleted, before its entry is written"),
    ("left-behind-let-go-for-a-stale-pool", "src/controllers/claim.rs",
     '            Some(record) if ipaddress::pool_known_as_it_is(ctx, record, view.pool.as_deref()).await => {',
     '            Some(_) => {',
     "a new claim of its name lets go of an IPAddress a move left behind while the pool watch lags a pool made again"),
    ("left-behind-deleted-by-hand-waits-for-room", "src/controllers/claim/plan.rs",
     '        if view.moved_away_unwritten && !(record.deleting && of_the_pool_known) {',
     '        if view.moved_away_unwritten {',
     "a new claim of its name keeps an IPAddress a move left behind, deleted by hand, until the annotation has room"),
    ("unknown-pool-claim-of-another-shard-served", "src/index/view.rs",
     "                Some(label) if Some(label) != self.shard.as_deref() => Served::Elsewhere,\n",
     "",
     "a manager without --watch-filter takes a claim of another shard's deleted pool for its own and binds it to the "
     "IPAddress that shard's manager is letting go"),
    ("gone-pool-claim-release-left-to-its-shard", "src/controllers/claim/plan.rs",
     "        Served::Elsewhere if claim.deletion_timestamp.is_some() && view.pool.is_none() => {}\n",
     "",
     "a deleted claim of another shard whose pool is gone keeps its finalizer while that shard's manager does not run"),
    ("prefix-reserve-unaligned", "src/ipam/prefix_pool.rs",
     "        self.base_of(index) == address && self.allocatable.contains(index)\n",
     "        self.allocatable.contains(index)\n",
     "a prefix pool hands out a requested child prefix that does not start at its first address"),
    ("subnet-order-ignored", "src/ipam/ip_pool.rs",
     "        let subnet = *self.with_free.first().ok_or(Exhausted)?;\n",
     "        let subnet = *self.with_free.last().ok_or(Exhausted)?;\n",
     "a pool of several subnets hands out addresses of a later subnet while an earlier one has free ones"),
    ("subnet-freed-not-offered-again", "src/ipam/ip_pool.rs",
     "            self.free[subnet].insert(v);\n            self.with_free.insert(subnet);\n",
     "            self.free[subnet].insert(v);\n",
     "an address released into a subnet that was full is never handed out again"),
    ("subnet-gateway-of-another-subnet-allocated", "src/ipam/ip_pool.rs",
     "            for v in [network, broadcast].into_iter().flatten().chain(gateways.iter().copied()) {\n",
     "            for v in [network, broadcast].into_iter().flatten().chain(gateway) {\n",
     "the gateway of one subnet is handed out by another subnet of the pool"),
    ("subnets-sharing-an-address-admitted", "src/ipam/ip_pool.rs",
     "                if let Some((s, _)) = shared.iter().next() {\n",
     "                if let Some((s, _)) = shared.iter().next().filter(|_| false) {\n",
     "two subnets of a pool that share an address are admitted (the address has two prefixes and gateways)"),
    ("subnets-half-overlapping-admitted", "src/ipam/ip_pool.rs",
     "                if !disjoint && (block, prefix) != (other.block, other.prefix) {\n",
     "                if !disjoint && block.0 != other.block.0 {\n",
     "two subnets of one network with different prefixes are admitted (one's broadcast address is the other's host)"),
    ("subnet-exclusions-ignored", "src/ipam/ip_pool.rs",
     "            let mut allocatable = list.set.difference(&pool_excluded).difference(&excluded.set);\n",
     "            let mut allocatable = list.set.difference(&pool_excluded);\n",
     "a subnet hands out the addresses its own excludedAddresses list"),
    ("subnet-addressing-of-the-top-level", "src/index/registry/pool_state.rs",
     "    let (index, prefix) = subnet.map_or((0, state.prefix), |(i, prefix)| (i, i64::from(prefix)));\n",
     "    let (index, prefix) = (0, state.prefix);\n    let _ = subnet;\n",
     "an IPAddress of a later subnet carries the top-level prefix and gateway"),
    ("subnets-unvalidated", "src/ipam/validate.rs",
     "    errs.extend(subnets::validate_subnets(spec, family));\n",
     "    let _ = family;\n",
     "the webhook admits any spec.subnets, however wrong (the pool then fails as InvalidSpec, unexplained)"),
    ("subnets-lost-through-v1alpha1", "src/api/conversion.rs",
     "        hub.subnets = stored_spec.subnets;\n",
     "",
     "a v1alpha1 client's update drops the pool's spec.subnets"),
    ("exhausted-claim-never-waits", "src/index/pools.rs",
     "            Err(AllocateError::Exhausted { .. }) if live => self.wait_for_address(pool, &claim.key),\n",
     "",
     "a claim that found its pool full is not registered as waiting: no freed address wakes it (RECHECK does)"),
    ("requester-never-waits", "src/index/pools.rs",
     "            Err(AllocateError::Requested { .. }) if live => self.wait_for_requested(pool, &claim.key),\n",
     "",
     "a claim whose requested address is held is not registered: the address freed does not wake it (RECHECK does)"),
    ("deleted-claim-waits", "src/index/pools.rs",
     "        let live = self.claims.get(&claim.key).is_some_and(|c| c.uid == claim.uid);\n",
     "        let live = true;\n",
     "a claim deleted while its worker awaited is registered as waiting and takes the wake of one that waits "
     "(helper-128 F2)"),
    ("moved-away-reserves-an-address-another-holds", "src/index/moved_away.rs",
     "        (None, Some(bound)) if index.registry.is_held_by_another_ipaddress(&pool, Held::Ip(Some(bound)), key) => {\n",
     "        (None, Some(bound)) if false && key.name.is_empty() => {\n",
     "a claim whose deletion is taken for a move reserves the stale address its status names, which another claim "
     "holds now, and that claim's IPAddress is withdrawn (soak seed 809508772)"),
    ("aside-not-taken-back-by-its-ipaddress", "src/index/registry/mod.rs",
     "        if state.holders.get(&aside).is_some_and(|h| h.held == held)\n",
     "        if state.holders.get(&aside).is_some_and(|h| h.held == held && false)\n",
     "a claim's hold set aside stays beside the IPAddress its own create made with that address: held twice, "
     "counted twice, never freed (soak seed 810962108)"),
    # Allocation strategies (docs/compatibility.md D20).
    ("strategy-taken-not-told", "src/ipam/ip_pool.rs",
     "        self.order.taken(subnet, v);\n        true\n",
     "        true\n",
     "a LeastRecentlyReleased pool still offers an address reserved or found in use since it was freed (a claim "
     "stuck as exhausted beside free addresses, or the address handed out twice)"),
    ("strategy-pick-not-told", "src/ipam/ip_pool.rs",
     "        self.order.taken(subnet, v);\n        Some(v)\n",
     "        Some(v)\n",
     "a LeastRecentlyReleased pool offers again the address it just handed out"),
    ("strategy-release-not-told", "src/ipam/ip_pool.rs",
     "            self.order.released(subnet, v);\n",
     "",
     "a LeastRecentlyReleased pool never offers an address again once it was released (leaked)"),
    ("lrr-release-before-never-used", "src/ipam/strategy.rs",
     "        self.fresh[subnet]\n            .first()\n            .or_else(|| self.stale[subnet].first())\n",
     "        self.stale[subnet]\n            .first()\n            .or_else(|| self.fresh[subnet].first())\n",
     "a LeastRecentlyReleased pool hands out a released address while never-used ones are free"),
    ("lrr-window-never-ages", "src/ipam/strategy.rs",
     "        if self.sequence_of.len() > RELEASE_WINDOW {\n",
     "        if self.sequence_of.len() > usize::MAX - 1 {\n",
     "a LeastRecentlyReleased pool remembers every release (its memory grows without bound)"),
    ("lrr-edit-forgets-the-order", "src/ipam/strategy.rs",
     "                Order::LeastRecentlyReleased(Box::new(Recency::carried(*known, free, subnet_of)))\n",
     "                Order::LeastRecentlyReleased(Box::new(Recency::guessed(free, highest_used)))\n",
     "an edit of a LeastRecentlyReleased pool forgets which addresses were released when"),
    ("random-lowest-first", "src/ipam/strategy.rs",
     "            Order::Random(rng) => pick_uniform(free, rng),\n",
     "            Order::Random(_) => free.first(),\n",
     "a Random pool hands out the lowest free address"),
    ("random-forward-scan-bias", "src/ipam/strategy.rs",
     "        if free.contains(v) {\n            return Some(v);\n        }\n",
     "        if let Some(v) = free.first_at_or_above(v).or(free.first()) {\n            return Some(v);\n        }\n",
     "a Random pool favours the free address after a long run of taken ones (Metal3's forward scan), not uniform"),
    ("random-huge-subnet-admitted", "src/ipam/validate/strategy.rs",
     "            config.subnet_allocatable().map(|a| a.len()).enumerate().find(|(_, size)| *size > STATUS_COUNT_CAP)\n",
     "            config.subnet_allocatable().map(|a| a.len()).enumerate().find(|(_, size)| *size == 0)\n",
     "Random is admitted for a subnet of more than 2^63 - 1 addresses, which Metal3 refuses"),
    ("random-change-admitted", "src/ipam/validate/strategy.rs",
     "        && AllocationStrategy::Random.is_one_of(before, strategy)\n",
     "        && AllocationStrategy::Random.is_one_of(before, strategy)\n        && false\n",
     "a pool's allocationStrategy changes to or from Random after creation, which Metal3 refuses"),
    ("lrr-guess-before-the-ipaddresses", "src/index/registry/mod.rs",
     "            state.reset_order();\n",
     "",
     "a new leader's LeastRecentlyReleased pool, whose spec listed before its IPAddresses, hands out the address "
     "released last below the highest in use first"),
    ("strategy-lost-through-v1alpha1", "src/api/conversion.rs",
     "        hub.allocation_strategy = stored_spec.allocation_strategy;\n",
     "",
     "a v1alpha1 client's update drops the pool's spec.allocationStrategy"),
    # Per-Cluster quotas (docs/compatibility.md D21).
    ("quota-not-checked", "src/index/registry/mod.rs",
     "        state.check_quota(pool_key, claimant)?;\n",
     "        let _ = state.check_quota(pool_key, claimant);\n",
     "a Cluster at its quota gets another address"),
    ("quota-refusal-keeps-the-wake", "src/index/registry/quota.rs",
     "        if !state.is_exhausted() {\n",
     "        if false {\n",
     "a claim woken for a free address that its quota refuses keeps the wake: the next waiter waits beside a free "
     "address"),
    ("quota-waiters-never-woken", "src/index/registry/waiting.rs",
     "    let mut woken = state.take_quota_waiters();\n",
     "    let mut woken = Woken::new();\n",
     "a claim refused for its quota is not woken when its Cluster lets go of an address (RECHECK does)"),
    ("quota-waiters-not-woken-by-an-edit", "src/index/registry/waiting.rs",
     "        let mut woken: Woken = std::mem::take(&mut state.quota_waiters).into_values().flatten().collect();\n",
     "        let mut woken = Woken::new();\n",
     "a quota raised or taken away wakes none of the claims it refused"),
    ("quota-label-change-ignored", "src/index/registry/mod.rs",
     "                if state.holders.set_cluster(address, cluster) {\n",
     "                if false && state.holders.set_cluster(address, cluster) {\n",
     "an IPAddress relabelled to another Cluster still counts for the first"),
    ("quota-bound-claim-refused", "src/index/pools.rs",
     "                Some(_) => Claimant::bound(cluster.clone()),\n",
     "                Some(_) => Claimant::of_cluster(cluster.clone()),\n",
     "a bound claim whose IPAddress went is refused the address its machine uses, its Cluster at its quota"),
    ("quota-refused-claim-never-waits", "src/index/pools.rs",
     "                    self.registry.wait_for_quota(pool, &claim.key, cluster);\n",
     "                    let _ = cluster;\n",
     "a claim refused for its quota is not registered: its Cluster letting go does not wake it (RECHECK does)"),
    ("quota-reservation-counts", "src/index/registry/mod.rs",
     "        let cluster = cluster.filter(|_| !is_placeholder(to));\n",
     "        let cluster = cluster;\n",
     "an address reserved for a Cluster moved away still counts in the quota of the Cluster of its name here"),
    ("quota-usage-counts-what-one-manager-knows", "src/index/registry/quota.rs",
     "            if !holding.confirmed || is_placeholder(key) || known_here_only(key) {\n",
     "            if is_placeholder(key) {\n",
     "two managers watching one pool rewrite each other's clusterUsage for ever (an allocation in flight, a record "
     "a relist did not show)"),
    ("quota-lost-through-v1alpha1", "src/api/conversion.rs",
     "        hub.quota = stored_spec.quota;\n",
     "",
     "a v1alpha1 client's update drops the pool's spec.quota"),
    ("quota-cluster-names-unchecked", "src/ipam/validate/quota.rs",
     "        if let Some(detail) = cluster_name_problem(cluster, namespace) {\n",
     "        if let Some(detail) = cluster_name_problem(cluster, namespace).filter(|_| false) {\n",
     "a quota naming no Cluster a claim can belong to (a bare name, another namespace's) is admitted and limits "
     "nothing"),
    ("quota-limits-a-pin", "src/index/registry/mod.rs",
     "        if pinned.is_none() {\n            state.check_quota(pool_key, claimant)?;\n",
     "        if true {\n            state.check_quota(pool_key, claimant)?;\n",
     "a claim whose pin another IPAddress holds is refused for its quota and waits for its Cluster, not for its pin: "
     "the pin freed wakes it not (helper-131 F1)"),
    ("quota-bound-claim-waits-for-its-cluster", "src/index/pools.rs",
     "            Err(AllocateError::QuotaExceeded { .. }) if live && previous.is_some() => {\n",
     "            Err(AllocateError::QuotaExceeded { .. }) if false => {\n",
     "a bound claim whose machine's address another holds, its Cluster at its quota, is not woken when that address "
     "frees up (helper-131 F4)"),
    ("quota-bound-claim-keeps-the-wake", "src/index/pools.rs",
     "                self.stop_waiting(pool, &claim.key);\n                self.wait_for_requested(pool, &claim.key);\n",
     "                self.wait_for_requested(pool, &claim.key);\n",
     "a bound claim woken from the waiters whose quota refuses it keeps the wake: the next waiter waits beside a free "
     "address (helper-132 N2)"),
    ("quota-label-change-wakes-no-requester", "src/index/registry/mod.rs",
     "                if state.holders.set_cluster(address, cluster) {\n                    self.woken.extend(take_waiters(state));\n",
     "                if state.holders.set_cluster(address, cluster) {\n                    self.woken.extend(state.take_quota_waiters());\n",
     "a label taken off an IPAddress wakes none of the bound claims of the Cluster it left that wait for their machine's "
     "address (helper-132 N3)"),
    ("quota-bypass-without-address-ref", "src/index/pools.rs",
     "                None => Claimant::of_cluster(cluster.clone()),\n",
     "                None => Claimant::bound(cluster.clone()),\n",
     "an unbound claim whose condition alone names an address gets it past its quota (helper-132 N6)"),
    ("quota-reclaimed-reservation-counts-for-no-cluster", "src/index/moved_away.rs",
     "    let cluster = claim.cluster_key();\n",
     "    let cluster = None;\n",
     "a bound claim back from a move that takes its reserved address back counts for no Cluster: a sibling takes an "
     "address past the Cluster's quota (helper-131 F3)"),
    ("quota-one-over", "src/index/registry/quota.rs",
     "        (used >= limit).then_some((used, limit))\n",
     "        (used > limit).then_some((used, limit))\n",
     "a Cluster holding its quota gets one address more (the rule's bound off by one)"),
    ("quota-usage-never-removed", "src/apiserver/requests.rs",
     "        patch[\"status\"][\"clusterUsage\"] = Value::Null;\n",
     "",
     "a pool whose quota went keeps showing the usage of its last status with one"),
]

# Mutations that cannot break a promise, with the reason.
EQUIVALENT = {
    "left-behind-let-go-for-a-stale-pool": "since stop 55 the let-go reads the pool again after its DELETE "
                                           "(`ipaddress::finish_left_behind`, mutation "
                                           "`left-behind-let-go-without-the-pool-reread`) and keeps our finalizer "
                                           "until the pool made again records the address; this read before it only "
                                           "spares a DELETE while the pool watch lags (the run of stop 55: every "
                                           "scenario passes with it, the scenarios of a pool made again included)",
    "recheck-await": "RECHECK is a safety net against a lost wake: the registry wakes an exhausted claim for every "
                     "address freed and every change of its pool, and the simulation settles without firing RECHECK "
                     "and finds no claim waiting beside a free address, on the real work queue (`runtime::Work`, "
                     "which the simulation runs; the queue's own tests cover a wake during a run)",
    "unwritten-ignores-annotation": "since d49553a its one caller (`moved_away`, index/moved_away.rs) only wakes the "
                                    "moved-away writer (the release waits on `moved_away_unwritten_named`); the "
                                    "writer merges the pending entries into the annotation as read, so a wake for an "
                                    "entry it holds already costs a GET and writes the value it read (the run of "
                                    "stop 46: every scenario passes with it, and a scripted relist-before-pool order "
                                    "kept the entry)",
    "bound-meanwhile-create": "let_go reads the claim live before it deletes anything (`unbound_ipaddress`, "
                              "claim/adopt.rs) and leaves an IPAddress its live claim is bound to (`told_of`), so the "
                              "read this mutation drops repeats that check; it only spares let_go's two GETs (the run "
                              "of stop 46: every scenario and 8,000 seeds pass with it)",
    "status-digest-forget": "the digest of a write counts only while the cached claim is no newer than the version it "
                            "was written on (`ClaimView::already_written`): a write applied with its answer lost makes "
                            "the claim newer once the watch shows it, and the earlier digest no longer hides anything; "
                            "forgetting a failed write's digest only matters for a resourceVersion that is not a "
                            "number, which an etcd-backed API server never returns (the full run of stop 45: 8,000 "
                            "seeds and every scenario pass with it; stop 54 moved the forgetting from before the write "
                            "to its failure, and the mutation stays equivalent)",
}


def run(cmd, cwd, env=None, timeout=None):
    full = dict(os.environ, **(env or {}))
    started = time.monotonic()
    p = subprocess.run(cmd, cwd=cwd, env=full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=timeout)
    return p.returncode, p.stdout, time.monotonic() - started


def copy_tree(dest):
    ignore = shutil.ignore_patterns("target", ".dev", ".git", "out", "__pycache__")
    shutil.copytree(REPO, dest, ignore=ignore, dirs_exist_ok=True)


def failed_tests(output):
    return sorted(set(re.findall(r"^test (\S+) \.\.\. FAILED", output, re.M)))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", help="comma-separated mutation ids")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--check", action="store_true",
                        help="only check that every mutation's text occurs once in its file, and exit")
    parser.add_argument("--keep", help="a scratch folder to reuse (its target/ keeps the build warm)")
    parser.add_argument("--release", action="store_true",
                        help="build optimised, incrementally (about half the time per mutation on two cores; a "
                             "mutation caught only by a debug assertion, such as an overflow, is then missed)")
    args = parser.parse_args()
    mutations = MUTATIONS
    if args.only:
        wanted = set(args.only.split(","))
        unknown = wanted - {m[0] for m in MUTATIONS}
        if unknown:
            sys.exit(f"mutants: unknown ids {sorted(unknown)}")
        mutations = [m for m in MUTATIONS if m[0] in wanted]
    if args.check:
        stale = [f"{mid}: its text occurs {open(os.path.join(REPO, path)).read().count(find)} times in {path}"
                 for mid, path, find, _, _ in mutations
                 if open(os.path.join(REPO, path)).read().count(find) != 1]
        if stale:
            sys.exit("mutants: update these mutations (expected once each):\n  " + "\n  ".join(stale))
        print(f"mutants: the texts of all {len(mutations)} mutations occur once each")
        return 0
    if args.list:
        for mid, path, _, _, what in mutations:
            print(f"{mid:22} {path:36} {what}")
        return 0

    scratch = args.keep or tempfile.mkdtemp(prefix="capi-ipam-mutants-")
    os.makedirs(scratch, exist_ok=True)
    copy_tree(scratch)
    env = {"CARGO_TARGET_DIR": os.path.join(scratch, "target"), "RUST_BACKTRACE": "0"}
    if args.release:
        env.update(CARGO_PROFILE_RELEASE_INCREMENTAL="true", CARGO_PROFILE_RELEASE_CODEGEN_UNITS="16")
    cargo_test = ["cargo", "test", "--release", "--lib"] if args.release else ["cargo", "test", "--lib"]
    # Every find text must be there exactly once before anything is built.
    for mid, path, find, _, _ in mutations:
        n = open(os.path.join(scratch, path)).read().count(find)
        if n != 1:
            sys.exit(f"mutants: {mid}: its text occurs {n} times in {path} (expected once): update the mutation")
    print(f"mutants: {len(mutations)} mutations in {scratch}; building the unmutated library tests first", flush=True)
    code, out, secs = run(cargo_test + ["--no-run"], scratch, env)
    if code != 0:
        sys.exit("mutants: the unmutated tree does not build:\n" + out[-3000:])
    rows = []
    for mid, path, find, replace, what in mutations:
        file = os.path.join(scratch, path)
        original = open(file).read()
        open(file, "w").write(original.replace(find, replace, 1))
        try:
            caught, secs = judge(scratch, env, cargo_test)
        finally:
            open(file, "w").write(original)
        if caught is None and mid in EQUIVALENT:
            caught = f"equivalent: {EQUIVALENT[mid]}"
        rows.append((mid, what, caught or "SURVIVED", secs))
        print(f"  {mid:22} {caught or 'SURVIVED'}  ({secs:.0f} s)", flush=True)
    print()
    print("| mutation | regression | caught by |")
    print("|---|---|---|")
    for mid, what, caught, _ in rows:
        print(f"| `{mid}` | {what} | {caught} |")
    survived = [r[0] for r in rows if r[2] == "SURVIVED"]
    print(f"\nmutants: {len(rows) - len(survived)} of {len(rows)} caught" +
          (f"; survived: {', '.join(survived)}" if survived else ""))
    if not args.keep:
        shutil.rmtree(scratch, ignore_errors=True)
    return 1 if survived else 0


def judge(scratch, env, cargo_test):
    """What of make test's library tests catches the mutated tree: the unit tests and scenarios first, then the
    simulation's seeds (those of make test: 0 to 7,999), stopping at the first violation."""
    started = time.monotonic()
    code, out, _ = run(cargo_test + ["--no-run"], scratch, env)
    if code != 0:
        return "the build (it does not compile)", time.monotonic() - started
    code, out, _ = run(cargo_test + ["--", "--skip", "sim::tests"], scratch, env, timeout=1800)
    failed = failed_tests(out)
    if failed:
        shown = ", ".join(f"`{t}`" for t in failed[:3]) + (f" and {len(failed) - 3} more" if len(failed) > 3 else "")
        return shown, time.monotonic() - started
    if code != 0:
        return "the unit tests (" + out.strip().splitlines()[-1][:80] + ")", time.monotonic() - started
    sim_env = dict(env, SIM_SEEDS="8000", SIM_SEED_BASE="0", SIM_STOP_AT_FIRST="1", SIM_THREADS="2")
    code, out, _ = run(cargo_test + ["sim::tests::soak", "--", "--exact", "--nocapture"], scratch,
                       sim_env, timeout=3600)
    found = re.search(r"^seed (\d+) \((\d+) seeds after the base\): (.*)$", out, re.M)
    if found:
        what = found.group(3).split(":")[0][:60]
        return f"the simulation: seed {found.group(1)}, {found.group(2)} seeds in ({what})", time.monotonic() - started
    if code != 0:
        return "the simulation (" + out.strip().splitlines()[-1][:80] + ")", time.monotonic() - started
    return None, time.monotonic() - started


if __name__ == "__main__":
    sys.exit(main())
