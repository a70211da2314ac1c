//! [`apply_and_verify`]: apply a plan to probe threads and probe memory, then read back
//! from the kernel where they really are.

use crate::bind::{allowed_cpus, allowed_nodes, bind_current_thread};
use crate::error::AffinityError;
use crate::kernel::{current_cpu, sorted, stat_cpu, thread_affinity, PolicyMode};
use crate::list;
use crate::memory::NodeMemory;
use serde::Serialize;
use sluice_placement::{Channel, Plan, Policy, Role, ThreadPlan};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Buffer memory allocated per channel to check its placement. A plan may give a channel
/// gigabytes; mapping, locking and touching all of it only to look at it would take
/// seconds and could push a small machine into reclaim. 64 MiB is 16 384 base pages, far
/// more than needed to see a binding fail, and bounds the check to 64 MiB at a time
/// (channels are checked one after the other). The report says how much was checked.
pub const VERIFY_BYTES_MAX_PER_CHANNEL: u64 = 64 << 20;

/// `sched_getcpu` samples per probe thread.
pub const CPU_SAMPLES_PER_THREAD: u32 = 32;
/// Busy time before each sample: 32 x 50 us = 1.6 ms of running per thread, long enough
/// for the scheduler to move a thread that is not really pinned.
const SPIN_PER_SAMPLE: Duration = Duration::from_micros(50);
/// Every how many samples the `/proc` witness is read too (it allocates and reads a file).
const STAT_SAMPLE_EVERY: u32 = 8;

/// What was planned and what the kernel reports, for every thread and every buffer
/// partition of a plan.
#[derive(Debug, Clone, Serialize)]
pub struct VerifyReport {
    /// The plan's policy.
    pub policy: Policy,
    /// One row per planned thread, in plan order.
    pub threads: Vec<ThreadRow>,
    /// One row per channel's buffer partition, in plan order.
    pub partitions: Vec<PartitionRow>,
    /// The per-channel cap on memory checked ([`VERIFY_BYTES_MAX_PER_CHANNEL`]).
    pub verify_bytes_max_per_channel: u64,
    /// `sched_getcpu` samples taken per thread.
    pub cpu_samples_per_thread: u32,
}

/// One planned thread, planned against observed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ThreadRow {
    /// Channel id.
    pub channel: u32,
    /// Role.
    pub role: Role,
    /// Index within the role.
    pub index: u32,
    /// The plan's CPUs, ascending; `None` for an unbound thread.
    pub planned_cpus: Option<Vec<u32>>,
    /// Every CPU `sched_getcpu` returned while the thread ran, ascending.
    pub observed_cpus: Vec<u32>,
    /// Every CPU `/proc/thread-self/stat` (field 39) reported, ascending.
    pub stat_cpus: Vec<u32>,
    /// The thread's affinity mask read back with `sched_getaffinity`.
    pub affinity: Vec<u32>,
    /// Bound: every observed CPU is planned and the mask equals the plan. Unbound: true.
    pub ok: bool,
}

/// One channel's buffer partition, planned against observed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PartitionRow {
    /// Channel id.
    pub channel: u32,
    /// The channel's `numa_node` from the plan.
    pub planned_node: Option<u32>,
    /// The nodes the probe memory was bound to: `[numa_node]`, or empty when unbound.
    /// A channel's `nodes` (a socket's nodes under `smts`) are where its threads may run,
    /// never where its buffers go, so they are not bound here.
    pub planned_nodes: Vec<u32>,
    /// The partition's size in the plan.
    pub bytes_planned: u64,
    /// Bytes mapped and checked (capped at [`VERIFY_BYTES_MAX_PER_CHANNEL`], rounded up
    /// to 2 MiB).
    pub bytes_verified: u64,
    /// Base pages checked.
    pub pages: usize,
    /// Pages on a planned node (any node when unbound).
    pub pages_on_node: usize,
    /// `pages_on_node / pages`.
    pub share: f64,
    /// Every page by node (negative: errno for pages on no node).
    pub by_node: BTreeMap<i32, usize>,
    /// The memory policy read back with `get_mempolicy` (`bind:0`, `default`).
    pub policy: String,
    /// Whether the probe memory could be locked.
    pub mlocked: bool,
    /// Every page on a planned node, and for a bound partition the kernel's policy is
    /// `bind` over exactly the planned nodes.
    pub ok: bool,
}

impl VerifyReport {
    /// Whether every thread and every partition is where the plan says.
    pub fn ok(&self) -> bool {
        self.threads.iter().all(|t| t.ok) && self.partitions.iter().all(|p| p.ok)
    }
}

/// Applies `plan` to this machine for real and reports what the kernel did.
///
/// For each channel, a [`NodeMemory`] of the channel's `buffer_bytes` (capped at
/// [`VERIFY_BYTES_MAX_PER_CHANNEL`]) is bound to exactly the channel's `numa_node` (the
/// planned node; its `nodes` only say where threads may run), locked, touched,
/// then every page is located with `move_pages` and the policy read with
/// `get_mempolicy`; the memory is freed before the next channel. For each planned
/// thread a probe thread is started that binds itself with [`bind_current_thread`]
/// (unbound threads keep the caller's mask: the engine spawns from an unpinned thread);
/// all probes start together, busy-run about 1.6 ms sampling `sched_getcpu` and
/// `/proc/thread-self/stat`, then read their mask back with `sched_getaffinity`.
///
/// This is a dry run: the probes exit and the memory is unmapped. The engine makes the
/// same calls on its own threads and buffers.
///
/// # Errors
/// - [`AffinityError::UnknownPlanCpu`], [`AffinityError::EmptyPlanCpus`],
///   [`AffinityError::UnknownPlanNode`] before anything is started, if the plan does not
///   fit this machine (made for another or a synthetic topology);
/// - binding, mapping or read-back errors from the kernel.
///
/// A placement the kernel accepted but did not honour is not an error: it is a row with
/// `ok == false`.
pub fn apply_and_verify(plan: &Plan) -> Result<VerifyReport, AffinityError> {
    check_plan_fits(plan)?;
    let threads = probe_threads(plan)?;
    let partitions = plan
        .channels
        .iter()
        .map(probe_partition)
        .collect::<Result<_, _>>()?;
    Ok(VerifyReport {
        policy: plan.policy,
        threads,
        partitions,
        verify_bytes_max_per_channel: VERIFY_BYTES_MAX_PER_CHANNEL,
        cpu_samples_per_thread: CPU_SAMPLES_PER_THREAD,
    })
}

/// The nodes a channel's memory is bound to: exactly its `numa_node`, even when the
/// channel spans several nodes (an `smts` socket): binding to the whole span let the
/// kernel put every page on whichever node it liked (seen in the emulated 4-node
/// machine: numa_node 0, every page on node 1). Empty when unbound.
fn planned_nodes(channel: &Channel) -> Vec<u32> {
    channel.numa_node.into_iter().collect()
}

fn check_plan_fits(plan: &Plan) -> Result<(), AffinityError> {
    let nodes = allowed_nodes()?;
    for channel in &plan.channels {
        if let Some(&node) = planned_nodes(channel).iter().find(|n| !nodes.contains(n)) {
            return Err(AffinityError::UnknownPlanNode {
                channel: channel.id,
                node,
                available: list(&nodes),
            });
        }
    }
    let cpus = allowed_cpus()?;
    for (channel, thread) in plan.threads() {
        let Some(planned) = &thread.cpus else {
            continue;
        };
        if planned.is_empty() {
            return Err(AffinityError::EmptyPlanCpus {
                channel: channel.id,
                role: thread.role,
                index: thread.index,
            });
        }
        if let Some(&cpu) = planned.iter().find(|c| !cpus.contains(c)) {
            return Err(AffinityError::UnknownPlanCpu {
                channel: channel.id,
                role: thread.role,
                index: thread.index,
                cpu,
                available: list(&cpus),
            });
        }
    }
    Ok(())
}

/// The start line the probes wait at, so that they all run at the same time.
#[derive(Default)]
struct StartLine {
    state: Mutex<Option<bool>>, // None: wait, Some(true): go, Some(false): abort
    changed: Condvar,
}

impl StartLine {
    fn release(&self, go: bool) {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = Some(go);
        self.changed.notify_all();
    }

    fn wait(&self) -> bool {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(go) = *state {
                return go;
            }
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

fn probe_threads(plan: &Plan) -> Result<Vec<ThreadRow>, AffinityError> {
    let start = StartLine::default();
    std::thread::scope(|scope| {
        let mut handles = Vec::new();
        for (channel, thread) in plan.threads() {
            let start = &start;
            let spawned = std::thread::Builder::new()
                .name(format!("v-{}-{}", thread.role, thread.index))
                .spawn_scoped(scope, move || probe_thread(channel, thread, start));
            match spawned {
                Ok(handle) => handles.push((thread, handle)),
                Err(source) => {
                    start.release(false);
                    return Err(AffinityError::Spawn {
                        role: thread.role,
                        index: thread.index,
                        source,
                    });
                }
            }
        }
        start.release(true);
        let mut rows = Vec::with_capacity(handles.len());
        for (thread, handle) in handles {
            let row = handle.join().map_err(|_| AffinityError::ThreadPanicked {
                role: thread.role,
                index: thread.index,
            })??;
            rows.push(row);
        }
        Ok(rows)
    })
}

/// Body of a probe thread. Binds first, then waits so all probes run together.
fn probe_thread(
    channel: &Channel,
    thread: &ThreadPlan,
    start: &StartLine,
) -> Result<ThreadRow, AffinityError> {
    let planned_cpus = thread.cpus.as_ref().map(|c| sorted(c.iter().copied()));
    let bound = match &planned_cpus {
        Some(cpus) => bind_current_thread(cpus),
        None => Ok(()),
    };
    let go = start.wait();
    bound?;
    let mut observed = BTreeSet::new();
    let mut stat = BTreeSet::new();
    if go {
        for sample in 0..CPU_SAMPLES_PER_THREAD {
            let until = Instant::now() + SPIN_PER_SAMPLE;
            while Instant::now() < until {
                std::hint::spin_loop();
            }
            observed.insert(current_cpu()?);
            if sample % STAT_SAMPLE_EVERY == 0 {
                stat.insert(stat_cpu()?);
            }
            std::thread::yield_now();
        }
    }
    let affinity = thread_affinity()?;
    let ok = match &planned_cpus {
        None => true,
        Some(planned) => {
            observed.iter().chain(&stat).all(|c| planned.contains(c)) && affinity == *planned
        }
    };
    Ok(ThreadRow {
        channel: channel.id,
        role: thread.role,
        index: thread.index,
        planned_cpus,
        observed_cpus: observed.into_iter().collect(),
        stat_cpus: stat.into_iter().collect(),
        affinity,
        ok,
    })
}

fn probe_partition(channel: &Channel) -> Result<PartitionRow, AffinityError> {
    let nodes = planned_nodes(channel);
    let verify_bytes = channel.buffer_bytes.min(VERIFY_BYTES_MAX_PER_CHANNEL);
    let mut row = PartitionRow {
        channel: channel.id,
        planned_node: channel.numa_node,
        planned_nodes: nodes.clone(),
        bytes_planned: channel.buffer_bytes,
        bytes_verified: 0,
        pages: 0,
        pages_on_node: 0,
        share: 1.0,
        by_node: BTreeMap::new(),
        policy: String::from("-"),
        mlocked: false,
        ok: true,
    };
    if verify_bytes == 0 {
        return Ok(row); // nothing planned, nothing to misplace
    }
    // At most VERIFY_BYTES_MAX_PER_CHANNEL, which fits any usize of 32 bits or more.
    let len =
        usize::try_from(verify_bytes).map_err(|_| AffinityError::TooLarge { len: usize::MAX })?;
    let memory = NodeMemory::on_nodes(len, &nodes)?;
    let pages = memory.verify_node()?;
    let policy = memory.policy()?;
    let policy_ok = nodes.is_empty() || (policy.mode == PolicyMode::Bind && policy.nodes == nodes);
    row.bytes_verified = memory.mapped_len() as u64;
    row.pages = pages.pages;
    row.pages_on_node = pages.on_node;
    row.share = pages.share();
    row.ok = pages.all_on_node() && policy_ok;
    row.by_node = pages.by_node;
    row.policy = policy.to_string();
    row.mlocked = memory.mlocked();
    Ok(row)
}

impl fmt::Display for VerifyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = |ok: bool| if ok { "ok" } else { "WRONG" };
        let cpus = |c: &Option<Vec<u32>>| c.as_ref().map_or_else(|| "any".to_string(), |c| list(c));
        writeln!(
            f,
            "placement check, policy {}: {}",
            self.policy,
            if self.ok() {
                "everything where planned"
            } else {
                "SOME PLACEMENTS WRONG"
            }
        )?;
        writeln!(
            f,
            "\nthreads ({} sched_getcpu samples each)\n{:<7} {:<16} {:<12} {:<12} {:<10} {:<12} ok?",
            self.cpu_samples_per_thread, "channel", "thread", "planned", "ran on", "/proc", "mask"
        )?;
        for t in &self.threads {
            writeln!(
                f,
                "{:<7} {:<16} {:<12} {:<12} {:<10} {:<12} {}",
                t.channel,
                format!("{} {}", t.role, t.index),
                cpus(&t.planned_cpus),
                list(&t.observed_cpus),
                list(&t.stat_cpus),
                list(&t.affinity),
                verdict(t.ok)
            )?;
        }
        writeln!(
            f,
            "\nbuffer partitions (at most {} checked per channel)\n{:<7} {:<8} {:<22} {:>8} {:>8} {:>7}  {:<14} {:<10} ok?",
            bytes(self.verify_bytes_max_per_channel),
            "channel",
            "planned",
            "checked of planned",
            "pages",
            "on node",
            "share",
            "policy",
            "pages by node",
        )?;
        for p in &self.partitions {
            let by_node: Vec<String> = p.by_node.iter().map(|(n, c)| format!("{n}:{c}")).collect();
            writeln!(
                f,
                "{:<7} {:<8} {:<22} {:>8} {:>8} {:>6.1}%  {:<14} {:<10} {}{}",
                p.channel,
                if p.planned_nodes.is_empty() {
                    "any".to_string()
                } else {
                    list(&p.planned_nodes)
                },
                format!("{} of {}", bytes(p.bytes_verified), bytes(p.bytes_planned)),
                p.pages,
                p.pages_on_node,
                p.share * 100.0,
                p.policy,
                by_node.join(","),
                verdict(p.ok),
                if p.mlocked { "" } else { " (not mlocked)" }
            )?;
        }
        Ok(())
    }
}

/// `1 GiB`, `64 MiB`, `4 KiB`, `1000 B`: exact binary units when they divide.
fn bytes(n: u64) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if n >= 1 << shift && n.is_multiple_of(1 << shift) {
            return format!("{} {unit}", n >> shift);
        }
    }
    format!("{n} B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_print_in_exact_binary_units() {
        assert_eq!(bytes(64 << 20), "64 MiB");
        assert_eq!(bytes(3 << 30), "3 GiB");
        assert_eq!(bytes(1000), "1000 B");
        assert_eq!(bytes(0), "0 B");
    }

    #[test]
    fn regression_smts_partition_binds_only_its_numa_node() {
        // An smts channel spans its socket's nodes; its buffers belong on numa_node
        // alone (they were bound to the whole socket and landed on the other node).
        let mut c = Channel {
            id: 0,
            numa_node: Some(2),
            nodes: vec![3, 2],
            package: Some(1),
            nics: vec![],
            buffer_bytes: 0,
            threads: vec![],
        };
        assert_eq!(planned_nodes(&c), vec![2]);
        c.numa_node = Some(3);
        assert_eq!(planned_nodes(&c), vec![3]);
        c.nodes = vec![3];
        assert_eq!(planned_nodes(&c), vec![3]);
        c.nodes.clear();
        c.numa_node = None;
        assert!(planned_nodes(&c).is_empty());
    }
}
