//! Adaptive placement's I/O shell (issue 17 part 5): one monitor thread per process,
//! running while bound threads are registered, ticking once a second. Each tick it
//! reads each CPU's foreign load ([`super::threads::Sampler`]), asks the decision core
//! ([`super::adapt::Adapter`]) what moves, re-pins a moved thread with
//! `sched_setaffinity` on its thread id and reads the kernel's mask back. Every move
//! and every refusal is recorded: a log line, `sluice_thread_moves_total{role,node}` or
//! `sluice_thread_move_refusals_total{role,node}`, and the `--json` summary's `placement_moves` / `placement_refusals`. A move across
//! nodes is never made (its buffer slots live on its node): it is refused and reported.

use super::adapt::{Adapter, Bound, CpuLoad, Decision, Tunables};
use super::threads::{self, ProcReader, Sampler, ThreadInfo};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How often the monitor looks.
pub const TICK: Duration = Duration::from_secs(1);
/// Moves and refusals kept for summaries at most (the oldest go first).
const MAX_RECORDS: usize = 256;
/// Empty ticks after which the monitor thread ends (it starts again with a session).
const IDLE_TICKS_MAX: u32 = 3;

static ENABLED: AtomicBool = AtomicBool::new(true);
static RUNNING: AtomicBool = AtomicBool::new(false);

/// A thread moved to another core of its node.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlacementMove {
    /// Its role.
    pub role: String,
    /// Its channel.
    pub channel: u32,
    /// Its node (the same before and after).
    pub node: u32,
    /// Its CPU before.
    pub from_cpu: u32,
    /// Its CPU after (the kernel's read-back).
    pub to_cpu: u32,
    /// Seconds since the transfer started.
    pub at_secs: f64,
    /// Why.
    pub reason: String,
}

/// A thread whose core is taken that stayed: its node had no free core.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlacementRefusal {
    /// Its role.
    pub role: String,
    /// Its channel.
    pub channel: u32,
    /// Its node.
    pub node: u32,
    /// Its (busy) CPU.
    pub cpu: u32,
    /// Seconds since the transfer started.
    pub at_secs: f64,
    /// Why it stayed.
    pub reason: String,
}

/// What a tick did.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A thread moved (tid, what).
    Moved(i32, PlacementMove),
    /// A thread stayed on its busy core.
    Refused(PlacementRefusal),
}

#[derive(Debug, Default)]
struct Log {
    moves: VecDeque<(Instant, PlacementMove)>,
    refusals: VecDeque<(Instant, PlacementRefusal)>,
    counts: BTreeMap<(String, u32), u64>,
    refused: BTreeMap<(String, u32), u64>,
}

static LOG: Mutex<Option<Log>> = Mutex::new(None);

fn with_log<R>(f: impl FnOnce(&mut Log) -> R) -> R {
    let mut g = LOG.lock().unwrap_or_else(PoisonError::into_inner);
    f(g.get_or_insert_with(Log::default))
}

/// Turns adaptive placement on or off for this process (`--adapt`; on by default).
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// Whether adaptive placement is on.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// The moves and refusals recorded since `start`, timed from it.
pub fn since(start: Instant) -> (Vec<PlacementMove>, Vec<PlacementRefusal>) {
    let secs = |at: Instant| at.saturating_duration_since(start).as_secs_f64();
    with_log(|l| {
        let moves = l.moves.iter().filter(|(at, _)| *at >= start);
        let refusals = l.refusals.iter().filter(|(at, _)| *at >= start);
        (
            moves
                .map(|(at, m)| PlacementMove {
                    at_secs: secs(*at),
                    ..m.clone()
                })
                .collect(),
            refusals
                .map(|(at, r)| PlacementRefusal {
                    at_secs: secs(*at),
                    ..r.clone()
                })
                .collect(),
        )
    })
}

/// The text summary's lines of a transfer's moves and refusals (none when there were none).
pub fn lines(moves: &[PlacementMove], refusals: &[PlacementRefusal]) -> Vec<String> {
    let moved = moves.iter().map(|m| {
        format!(
            "placement: moved {} (channel {}, node {}) from CPU {} to CPU {} at {:.1} s: {}",
            m.role, m.channel, m.node, m.from_cpu, m.to_cpu, m.at_secs, m.reason
        )
    });
    let stayed = refusals.iter().map(|r| {
        format!(
            "placement: {} (channel {}, node {}) stayed on busy CPU {} at {:.1} s: {}",
            r.role, r.channel, r.node, r.cpu, r.at_secs, r.reason
        )
    });
    moved.chain(stayed).collect()
}

/// Moves made so far per (role, node).
pub fn move_counts() -> Vec<((String, u32), u64)> {
    with_log(|l| l.counts.iter().map(|(k, v)| (k.clone(), *v)).collect())
}

/// Refusals so far, by (role, node): a bound thread whose core was taken and whose node
/// had no free core (said once per thread until its core cools).
pub fn refusal_counts() -> Vec<((String, u32), u64)> {
    with_log(|l| l.refused.iter().map(|(k, v)| (k.clone(), *v)).collect())
}

/// `sluice_thread_moves_total{role,node}`, `sluice_thread_move_refusals_total{role,node}`
/// and `sluice_thread_cpu{role,thread,channel,node}`.
pub(super) fn metrics(
    e: &mut prometheus_client::encoding::DescriptorEncoder,
) -> Result<(), std::fmt::Error> {
    use super::prom::{counters, gauges, Labels};
    let by_role_node = |counts: Vec<((String, u32), u64)>| -> Vec<(Labels, u64)> {
        counts
            .into_iter()
            .map(|((role, node), n)| (vec![("role", role), ("node", node.to_string())], n))
            .collect()
    };
    counters(
        e,
        "sluice_thread_moves",
        "Bound threads adaptive placement moved to another core of their node.",
        by_role_node(move_counts()),
    )?;
    counters(
        e,
        "sluice_thread_move_refusals",
        "Bound threads whose core was taken and whose node had no free core to move to.",
        by_role_node(refusal_counts()),
    )?;
    let cpus: Vec<(Labels, u64)> = threads::registered()
        .into_iter()
        .map(|t| {
            let labels = vec![
                ("role", t.role.clone()),
                ("thread", format!("{}-{}", t.role, t.index)),
                ("channel", t.channel.to_string()),
                ("node", t.node.to_string()),
            ];
            (labels, u64::from(t.cpu))
        })
        .collect();
    gauges(
        e,
        "sluice_thread_cpu",
        "The CPU a bound thread is pinned to now.",
        cpus,
    )
}

fn record(event: Event) {
    let at = Instant::now();
    with_log(|l| match event {
        Event::Moved(tid, m) => {
            tracing::info!(
                "placement: moved {} (thread {tid}, channel {}, node {}) from CPU {} to CPU {}: {}",
                m.role,
                m.channel,
                m.node,
                m.from_cpu,
                m.to_cpu,
                m.reason
            );
            threads::moved(tid, m.to_cpu);
            *l.counts.entry((m.role.clone(), m.node)).or_default() += 1;
            if l.moves.len() >= MAX_RECORDS {
                l.moves.pop_front();
            }
            l.moves.push_back((at, m));
        }
        Event::Refused(r) => {
            // info, not warn: the summary and the metrics report it; a busy machine
            // should not fill every copy's stderr.
            tracing::info!(
                "placement: {} (channel {}, node {}) stays on busy CPU {}: {}",
                r.role,
                r.channel,
                r.node,
                r.cpu,
                r.reason
            );
            *l.refused.entry((r.role.clone(), r.node)).or_default() += 1;
            if l.refusals.len() >= MAX_RECORDS {
                l.refusals.pop_front();
            }
            l.refusals.push_back((at, r));
        }
    });
}

/// Starts the monitor thread unless it runs (or adaptive placement is off).
pub fn ensure_running() {
    if !enabled() || RUNNING.swap(true, Ordering::AcqRel) {
        return;
    }
    let started = std::thread::Builder::new()
        .name("sluice-adapt".into())
        .spawn(run);
    if let Err(e) = started {
        tracing::warn!("adaptive placement off: cannot start its monitor thread: {e}");
        RUNNING.store(false, Ordering::Release);
    }
}

/// CPUs adaptive placement never moves a thread to, nor runs on (`--reserve-cores`).
static RESERVED: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// Sets the CPUs this process must never use (`--reserve-cores`): adaptive placement
/// leaves them out of the cores it may move a thread to. Set before threads are bound.
pub fn set_reserved(cpus: Vec<u32>) {
    *RESERVED.lock().unwrap_or_else(PoisonError::into_inner) = cpus;
}

/// The CPUs the monitor watches and may move threads to: those `allowed`, less the
/// `reserved` ones (all of `allowed` if that would leave none).
pub fn watched_cpus(allowed: Vec<u32>, reserved: &[u32]) -> Vec<u32> {
    let left: Vec<u32> = allowed
        .iter()
        .copied()
        .filter(|c| !reserved.contains(c))
        .collect();
    if left.is_empty() {
        allowed
    } else {
        left
    }
}

/// The monitor thread: ticks while threads are registered, ends after a few idle ticks.
fn run() {
    let reserved = RESERVED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let allowed = watched_cpus(
        sluice_affinity::allowed_cpus().unwrap_or_default(),
        &reserved,
    );
    // Spawned by a pinned thread, it inherited that pin: it runs anywhere allowed.
    if let Err(e) = sluice_affinity::bind_current_thread(&allowed) {
        tracing::debug!("adaptive placement: cannot unpin its monitor thread: {e}");
    }
    let mut mover = Mover::new(
        Sampler::new(ProcReader::system(), allowed),
        Tunables::default(),
    );
    let mut idle = 0;
    loop {
        std::thread::sleep(TICK);
        let threads = threads::registered();
        if threads.is_empty() || !enabled() {
            idle += 1;
            if idle < IDLE_TICKS_MAX {
                continue;
            }
            RUNNING.store(false, Ordering::Release);
            // A thread registered since the check found RUNNING still set: go on for it.
            if threads::registered().is_empty() || RUNNING.swap(true, Ordering::AcqRel) {
                return;
            }
        }
        idle = 0;
        for event in mover.tick(&threads, &mut rebind) {
            record(event);
        }
    }
}

fn rebind(tid: i32, cpu: u32) -> Result<(), String> {
    sluice_affinity::rebind_thread(tid, cpu).map_err(|e| e.to_string())
}

/// The decision core fed by a sampler, keyed by thread id.
#[derive(Debug)]
pub struct Mover {
    adapter: Adapter,
    sampler: Sampler,
    tun: Tunables,
    info: HashMap<usize, ThreadInfo>,
}

impl Mover {
    /// A mover reading through `sampler`.
    pub fn new(sampler: Sampler, tun: Tunables) -> Mover {
        Mover {
            adapter: Adapter::new(&[], tun),
            sampler,
            tun,
            info: HashMap::new(),
        }
    }

    /// One tick: `threads` are the registered threads now; `apply` re-pins one (thread
    /// id, CPU) and says why not where it could not.
    pub fn tick(
        &mut self,
        threads: &[ThreadInfo],
        apply: &mut dyn FnMut(i32, u32) -> Result<(), String>,
    ) -> Vec<Event> {
        self.sync(threads);
        let loads = self.sampler.sample();
        if loads.is_empty() {
            return Vec::new();
        }
        let decisions = self.adapter.tick(&loads);
        decisions
            .into_iter()
            .filter_map(|d| self.apply(d, &loads, apply))
            .collect()
    }

    /// Watches new threads, forgets ended ones.
    fn sync(&mut self, threads: &[ThreadInfo]) {
        let live: HashMap<usize, &ThreadInfo> = threads
            .iter()
            .filter_map(|t| Some((usize::try_from(t.tid).ok()?, t)))
            .collect();
        for key in self.adapter.keys() {
            if !live.contains_key(&key) {
                self.adapter.unwatch(key);
                self.info.remove(&key);
            }
        }
        for (&key, &t) in &live {
            if !self.info.contains_key(&key) {
                self.adapter.watch(
                    key,
                    Bound {
                        node: t.node,
                        cpu: t.cpu,
                    },
                );
                self.info.insert(key, t.clone());
            }
        }
    }

    fn apply(
        &mut self,
        d: Decision,
        loads: &[CpuLoad],
        apply: &mut dyn FnMut(i32, u32) -> Result<(), String>,
    ) -> Option<Event> {
        let pct = |cpu: u32| {
            let l = loads
                .iter()
                .find(|l| l.cpu == cpu)
                .map_or(0.0, |l| l.foreign);
            (l * 100.0).round()
        };
        match d {
            Decision::Move {
                thread,
                from,
                to,
                node,
            } => {
                let t = self.info.get(&thread)?.clone();
                if let Err(e) = apply(t.tid, to) {
                    tracing::warn!("placement: cannot move {} to CPU {to}: {e}", t.role);
                    self.adapter.unwatch(thread);
                    self.info.remove(&thread);
                    return None;
                }
                let reason = format!(
                    "foreign load {}% on CPU {from} for {} s; CPU {to} of node {node} is free",
                    pct(from),
                    self.tun.sustain
                );
                Some(Event::Moved(t.tid, moved(&t, from, to, reason)))
            }
            Decision::Refused { thread, cpu, node } => {
                let t = self.info.get(&thread)?;
                let reason = format!(
                    "foreign load {}% on CPU {cpu} and no other core of node {node} under {}% \
                     (never to another node: its buffer slots live on node {node})",
                    pct(cpu),
                    (self.tun.low * 100.0).round()
                );
                Some(Event::Refused(PlacementRefusal {
                    role: t.role.clone(),
                    channel: t.channel,
                    node,
                    cpu,
                    at_secs: 0.0,
                    reason,
                }))
            }
        }
    }
}

fn moved(t: &ThreadInfo, from: u32, to: u32, reason: String) -> PlacementMove {
    PlacementMove {
        role: t.role.clone(),
        channel: t.channel,
        node: t.node,
        from_cpu: from,
        to_cpu: to,
        at_secs: 0.0,
        reason,
    }
}

#[cfg(test)]
mod tests;
