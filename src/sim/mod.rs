//! A deterministic simulation of the controllers against a simulated API server, in the manner of FoundationDB's
//! simulator: the real index, decisions and workers (`crate::controllers`, on [`client::SimApi`]), two or three
//! replicas taking turns at the lease, watches that lag and expire, requests that fail before or after they are
//! applied, an API server that restarts, users who create, delete and re-create claims under the same names, edit,
//! exhaust and delete pools and pause Clusters, and clusterctl moving a Cluster away and back. One seed fixes the
//! whole schedule: no wall clock and no thread decides an order. After every step the invariants of
//! `World::check_always` are checked, after the run settles those of `World::check_quiescent`; a violation prints the
//! seed and the trace of the steps that led there.
//!
//! `make test` runs `SIM_SEEDS` seeds (1,500 by default) from `SIM_SEED_BASE` (0); `make sim` soaks (release build,
//! `SIM_SEEDS=1000000` by default, from a random base); `SIM_SEED=<n>` replays one seed with its trace
//! (`cargo test --lib sim::tests::replay -- --ignored --nocapture`). docs/testing.md says what the model covers and
//! what it assumes about the API server.

mod client;
mod model;
mod rng;
mod server;
mod world;

pub use world::{Options, Stats, Violation, World};

pub(crate) use world::short_uid;

/// Runs one seed; on a violation, runs it again with its trace (the same schedule: the run is deterministic).
pub fn run_seed(seed: u64) -> Result<Stats, Violation> {
    let options = Options::for_seed(seed);
    World::new(seed, options.clone()).run().map_err(|_| {
        let traced = Options { trace: true, ..options };
        match World::new(seed, traced).run() {
            Err(v) => v,
            Ok(_) => {
                panic!("seed {seed} broke an invariant once and not on its replay: the simulation is not deterministic")
            }
        }
    })
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seeds of `make test` (and of `make sim`, with more of them).
    #[test]
    fn seeds_keep_every_invariant() {
        let seeds = env_u64("SIM_SEEDS").unwrap_or(1500);
        let base = env_u64("SIM_SEED_BASE").unwrap_or(0);
        let started = std::time::Instant::now();
        let mut total = Stats::default();
        for seed in base..base + seeds {
            match run_seed(seed) {
                Ok(stats) => total += &stats,
                Err(violation) => panic!("{violation}"),
            }
        }
        println!(
            "simulation: {seeds} seeds from {base}, {} steps, {} terms, {} claims created, {} relists, {} late \
             writes landed, {} moves, in {:.1} s: no violation",
            total.steps,
            total.terms,
            total.claims_created,
            total.relists,
            total.late_writes,
            total.moves,
            started.elapsed().as_secs_f64()
        );
    }

    #[test]
    fn a_seed_replays_the_same_schedule() {
        for seed in [3, 17] {
            let options = Options { trace: true, ..Options::for_seed(seed) };
            let first = World::new(seed, options.clone()).run_traced();
            let second = World::new(seed, options).run_traced();
            assert!(first.len() > 50, "a run of a few steps proves nothing: {}", first.len());
            assert_eq!(first, second, "seed {seed} took two different schedules");
        }
    }

    /// `make sim`: many seeds; every violation is reported (the first seed of each kind of violation with its
    /// message), not only the first, and the run fails if there was any.
    #[test]
    #[ignore = "the soak of make sim"]
    fn soak() {
        let seeds = env_u64("SIM_SEEDS").unwrap_or(1_000_000);
        let base = env_u64("SIM_SEED_BASE").unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() << 20)
        });
        let started = std::time::Instant::now();
        let mut total = Stats::default();
        let mut found: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
        for seed in base..base + seeds {
            match World::new(seed, Options::for_seed(seed)).run() {
                Ok(stats) => total += &stats,
                Err(v) => {
                    // The kind of violation: its message up to the first detail.
                    let kind: String = v.what.split([':', '(']).next().unwrap_or_default().to_owned();
                    let entry = found.entry(kind).or_insert((seed, 0));
                    entry.1 += 1;
                    if entry.1 == 1 {
                        println!("seed {seed} (after {} seeds): {}", seed - base + 1, v.what);
                    }
                }
            }
            if (seed - base + 1) % 100_000 == 0 {
                println!("... {} seeds in {:.0} s", seed - base + 1, started.elapsed().as_secs_f64());
            }
        }
        println!(
            "soak: {seeds} seeds from {base}: {} steps, {} terms, {} claims created, {} relists, {} late writes, {} \
             moves, in {:.0} s; {} seeds broke an invariant",
            total.steps,
            total.terms,
            total.claims_created,
            total.relists,
            total.late_writes,
            total.moves,
            started.elapsed().as_secs_f64(),
            found.values().map(|(_, n)| n).sum::<u64>()
        );
        for (kind, (first, n)) in &found {
            println!("  {n} x {kind} (first: seed {first})");
        }
        assert!(found.is_empty(), "the soak found violations");
    }

    /// `SIM_SEED=<n> cargo test --lib sim::tests::replay -- --ignored --nocapture`: one seed, with its trace.
    #[test]
    #[ignore = "replays the seed given by SIM_SEED"]
    fn replay() {
        let seed = env_u64("SIM_SEED").expect("SIM_SEED=<seed>");
        let options = Options { trace: true, ..Options::for_seed(seed) };
        let trace = World::new(seed, options).run_traced();
        for line in trace {
            println!("{line}");
        }
    }
}
