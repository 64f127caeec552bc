//! The seam between the controllers and the index, measured (issue 35): how many steps of the index a new claim's
//! first run takes, and the run that its own writes' watch events cause. Each has a ceiling, lowered as the seam
//! narrows: a change that crosses more often fails here, one that crosses less lowers it.

use super::model::{PoolId, Shape};
use super::server::Kind;
use super::world::{Job, World};

/// A new claim's first run: its finalizer, its address held, its IPAddress created, its status written.
const FIRST_RUN_CEILING: usize = 5;
/// The run its own writes wake: it finds its IPAddress and its status as written, and writes nothing.
const FOLLOW_UP_CEILING: usize = 3;

fn crossings(world: &World) -> usize {
    world.live_index().expect("a live term").crossings()
}

#[test]
fn a_new_claims_first_run_and_the_run_its_writes_wake_cross_into_the_index_at_most_their_ceilings() {
    let mut w = World::scripted();
    let pool = PoolId::Ip(0);
    w.create_pool_shaped(pool, Shape { v6: false, offset: 0, size: 2, ..Shape::default() });
    let claim = w.create_claim_named(0, "m0", pool);
    w.begin_term();
    w.deliver_all(&[]);
    let before = crossings(&w);
    w.run_job(Job::Claim(claim.clone()));
    w.answer_everything();
    let first_run = crossings(&w) - before;
    let bound = w.read(Kind::Claim, &claim).is_some_and(|c| !c["status"]["addressRef"]["name"].is_null());
    assert!(bound && w.read(Kind::Address, &claim).is_some(), "the first run binds the claim:\n{}", w.trace_text());
    w.deliver_all(&[]);
    let before = crossings(&w);
    w.run_job(Job::Claim(claim));
    w.answer_everything();
    let follow_up = crossings(&w) - before;
    println!("crossings into the index: a new claim's first run {first_run}, the run its writes wake {follow_up}");
    assert!(first_run <= FIRST_RUN_CEILING, "a new claim's first run crosses {first_run} times");
    assert!(follow_up <= FOLLOW_UP_CEILING, "the run its writes wake crosses {follow_up} times");
}
