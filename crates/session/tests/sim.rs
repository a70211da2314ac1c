//! The deterministic simulation of whole file sessions (after TigerBeetle's VOPR and
//! quinn's simulated `Pair`): a source core and a sink core in one process, driven as the
//! engine drives them, over a simulated network and a simulated destination.
//!
//! Each seed draws a world ([`world`]): a source tree of 5 to 60 entries (directories,
//! symlinks, empty files, small files that travel packed, files of several chunks), the
//! options (`--resume`, `--update`, `--no-clobber`, chunk acknowledgements, a sink that
//! closes the session by itself or one that waits for `Close`), what the
//! destination holds already (nothing, the same file, another version, partials of this
//! version or another one), the network (1 to 4 data connections of their own latency
//! and speed, so chunks reorder across them), the threads, and the faults: chunks damaged
//! in flight, chunks duplicated, slow and failing disks, source files that cannot be
//! read after their scan, and a side that stops at a random moment (its connections
//! close). Events run in (time, sequence) order on a virtual clock ([`run`]); every
//! frame is encoded and decoded on its way ([`net`]). [`check`] states what must hold.
//! A seed whose session crashed or failed files is then resumed (`--resume`) from what
//! it left, and that session must end well.
//!
//! Not modelled: compression (and `auto`), the queued pipeline's io-write threads (the
//! net-recv threads write, as inline), read-ahead, and a peer that hangs without closing
//! its connections (the source core waits for its answers for ever, as the engine
//! does).
//!
//! `cargo test -p sluice-session --test sim` runs 10,000 seeds; `SIM_SEEDS=N` runs N;
//! `SIM_SEED=S ... -- --nocapture` replays seed S alone and prints its trace. A failing
//! seed's panic names it and says how to replay it.
//!
//! (The crate root of a test is in `tests/`, so its modules under `tests/sim/` are named
//! by path.)

#[path = "sim/check.rs"]
mod check;
#[path = "sim/fs.rs"]
mod fs;
#[path = "sim/net.rs"]
mod net;
#[path = "sim/reader.rs"]
mod reader;
#[path = "sim/recv.rs"]
mod recv;
#[path = "sim/rng.rs"]
mod rng;
#[path = "sim/run.rs"]
mod run;
#[path = "sim/sink.rs"]
mod sink;
#[path = "sim/source.rs"]
mod source;
#[path = "sim/world.rs"]
mod world;

use run::{Log, Outcome, Sim};
use std::collections::BTreeMap;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use world::{Side, World};

/// Seeds a test run covers by default.
const SEEDS: u64 = 10_000;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}

/// Runs one session of `w` and checks it.
fn session(w: World, verbose: bool) -> Sim {
    let mut sim = Sim::new(w, verbose);
    sim.run();
    check::check(&sim);
    sim
}

/// Runs seed `seed`: its session, and the resumed one after a crash or failed files.
/// Returns the trace hash and what each session saw.
fn simulate(seed: u64, verbose: bool) -> (u64, Vec<Log>) {
    let first = session(World::draw(seed), verbose);
    let mut hash = first.trace;
    let mut logs = vec![first.log.clone()];
    let failed = first
        .log
        .outcomes
        .values()
        .any(|o| matches!(o, Outcome::Failed(_)));
    if first.log.crashed.is_some() || failed {
        let w = first.w.resumed(first.fs.clone());
        let again = session(w, verbose);
        hash = rng::mix(hash, again.trace);
        logs.push(again.log);
    }
    (hash, logs)
}

/// [`simulate`], its panic turned into one that names the seed and how to replay it.
fn run_seed(seed: u64, verbose: bool) -> (u64, Vec<Log>) {
    match catch_unwind(AssertUnwindSafe(|| simulate(seed, verbose))) {
        Ok(r) => r,
        Err(e) => {
            let why = e
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| e.downcast_ref::<&str>().copied())
                .unwrap_or("a panic");
            panic!(
                "seed {seed} failed: {why}\n  replay it: SIM_SEED={seed} cargo test -p sluice-session --test sim -- --nocapture"
            );
        }
    }
}

/// How often the seeds reached each situation (a simulation that never damages a chunk
/// proves nothing about damaged chunks).
#[derive(Debug, Default)]
struct Coverage(BTreeMap<&'static str, u64>);

impl Coverage {
    fn add(&mut self, logs: &[Log]) {
        for (round, l) in logs.iter().enumerate() {
            let counts = [
                ("sessions", 1),
                ("clean", u64::from(l.crashed.is_none())),
                ("source crashed", u64::from(l.crashed == Some(Side::Source))),
                ("sink crashed", u64::from(l.crashed == Some(Side::Sink))),
                ("resumed sessions", u64::from(round > 0)),
                ("chunks sent", l.sent),
                ("chunks damaged", l.damaged),
                ("chunks duplicated", l.duplicated),
                ("chunks nacked", l.nacked),
                ("chunks resent", l.resent),
                ("chunks acked", l.acked),
                ("chunks left with the writer", l.queued),
                ("chunks waiting for their entry", l.waited),
                ("chunks of ended files dropped", l.dropped),
                ("chunks late for their entry, asked again", l.late),
                ("manifests applied past the entry wait", l.master_stalls),
                ("disk failures", l.disk_failures),
                ("read failures", l.read_failures),
                ("bytes resumed", l.resumed_src),
                ("partials complete at announce", l.completed_held),
                ("files skipped", l.skipped_snk),
                ("events", l.steps),
            ];
            for (name, n) in counts {
                *self.0.entry(name).or_default() += n;
            }
        }
    }

    fn merge(&mut self, other: Coverage) {
        for (name, n) in other.0 {
            *self.0.entry(name).or_default() += n;
        }
    }

    fn check(&self) {
        let never: Vec<_> = self.0.iter().filter(|(_, n)| **n == 0).collect();
        assert!(never.is_empty(), "situations never reached: {never:?}");
    }
}

/// Seeds `0..seeds`, spread over the machine's cores (each seed runs alone, so the
/// spread changes nothing in any run); the first failure stops the others.
fn run_seeds(seeds: u64) -> Coverage {
    let threads = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let failed = AtomicBool::new(false);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..(threads as u64).min(seeds).max(1))
            .map(|first| {
                let failed = &failed;
                s.spawn(move || {
                    let mut coverage = Coverage::default();
                    for seed in (first..seeds).step_by(threads) {
                        if failed.load(Ordering::Relaxed) {
                            break;
                        }
                        match catch_unwind(|| run_seed(seed, false)) {
                            Ok((_, logs)) => coverage.add(&logs),
                            Err(e) => {
                                failed.store(true, Ordering::Relaxed);
                                resume_unwind(e);
                            }
                        }
                    }
                    coverage
                })
            })
            .collect();
        let mut all = Coverage::default();
        for w in workers {
            match w.join() {
                Ok(c) => all.merge(c),
                Err(e) => resume_unwind(e),
            }
        }
        all
    })
}

#[test]
fn file_sessions_end_well_over_thousands_of_seeds() {
    if let Some(seed) = env_u64("SIM_SEED") {
        let (hash, logs) = run_seed(seed, true);
        println!("seed {seed}: trace hash {hash:016x}, {logs:#?}");
        return;
    }
    let seeds = env_u64("SIM_SEEDS").unwrap_or(SEEDS);
    let coverage = run_seeds(seeds);
    println!("{seeds} seeds: {:#?}", coverage.0);
    if seeds >= 1000 {
        coverage.check();
    }
}

#[test]
fn a_seed_replays_exactly() {
    for seed in 0..100 {
        assert_eq!(
            run_seed(seed, false).0,
            run_seed(seed, false).0,
            "seed {seed}"
        );
    }
}
