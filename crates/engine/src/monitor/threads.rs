//! The bound threads adaptive placement watches, and what it reads about the machine:
//! a bounded registry the runtime fills as it spawns pinned threads, and a sampler that
//! turns `/proc/stat` and `/proc/self/task/TID/stat` into each CPU's *foreign* load
//! (its busy share minus this process's threads' share) between two reads.
//!
//! The sampler reads under a root directory (`/` on a real machine) so a test can give
//! it a fake `/proc` and `/sys`.

use super::adapt::CpuLoad;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

/// Threads registered at once at most (more are run, pinned, but not watched).
pub const MAX_THREADS: usize = 1024;
/// Tasks of this process read per sample at most.
const MAX_TASKS: usize = 4096;

/// A thread pinned to one CPU of one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadInfo {
    /// Its kernel thread id.
    pub tid: i32,
    /// Its role (`net-recv`, ...).
    pub role: String,
    /// Its number within its role (the thread is named `ROLE-INDEX`).
    pub index: u32,
    /// The plan's channel it serves.
    pub channel: u32,
    /// The node its channel's buffers live on.
    pub node: u32,
    /// Its CPU now.
    pub cpu: u32,
}

static REGISTRY: Mutex<Vec<ThreadInfo>> = Mutex::new(Vec::new());

fn registry() -> std::sync::MutexGuard<'static, Vec<ThreadInfo>> {
    REGISTRY.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Removes its thread from the registry when dropped (when the thread ends).
#[derive(Debug)]
pub struct Registration {
    tid: i32,
}

impl Drop for Registration {
    fn drop(&mut self) {
        registry().retain(|t| t.tid != self.tid);
    }
}

/// Registers a pinned thread (`None` when the registry is full: it is not watched).
/// Starts the monitor thread where adaptive placement is on.
#[must_use]
pub fn register(info: ThreadInfo) -> Option<Registration> {
    let tid = info.tid;
    {
        let mut r = registry();
        if r.len() >= MAX_THREADS {
            tracing::debug!(
                "adaptive placement: registry full, {} not watched",
                info.role
            );
            return None;
        }
        r.retain(|t| t.tid != tid);
        r.push(info);
    }
    super::mover::ensure_running();
    Some(Registration { tid })
}

/// The registered threads now.
pub fn registered() -> Vec<ThreadInfo> {
    registry().clone()
}

/// Records that thread `tid` now runs on `cpu`.
pub(crate) fn moved(tid: i32, cpu: u32) {
    if let Some(t) = registry().iter_mut().find(|t| t.tid == tid) {
        t.cpu = cpu;
    }
}

/// Reads `/proc` and `/sys` under `root`.
#[derive(Debug, Clone)]
pub struct ProcReader {
    root: PathBuf,
}

impl ProcReader {
    /// A reader of this machine.
    pub fn system() -> ProcReader {
        ProcReader::at("/")
    }

    /// A reader of the tree under `root` (`root/proc/stat`, ...).
    pub fn at(root: impl AsRef<Path>) -> ProcReader {
        ProcReader {
            root: root.as_ref().to_path_buf(),
        }
    }

    fn read(&self, rel: &str) -> Option<String> {
        std::fs::read_to_string(self.root.join(rel)).ok()
    }

    /// Every CPU's (total, idle) clock ticks since boot (idle counts iowait). Time the
    /// hypervisor stole is left out of both: moving a thread within a guest cannot win
    /// it back, and every vCPU of an overloaded host would otherwise look taken.
    pub fn cpu_ticks(&self) -> HashMap<u32, (u64, u64)> {
        let text = self.read("proc/stat").unwrap_or_default();
        text.lines()
            .filter_map(|line| {
                let mut f = line.split_whitespace();
                let cpu = f.next()?.strip_prefix("cpu")?.parse::<u32>().ok()?;
                // user nice system idle iowait irq softirq (steal, guest... left out)
                let v: Vec<u64> = f.take(7).filter_map(|x| x.parse().ok()).collect();
                let total = v.iter().sum();
                let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
                Some((cpu, (total, idle)))
            })
            .collect()
    }

    /// Every task of this process: (tid, user + system ticks, the CPU it last ran on).
    pub fn tasks(&self) -> Vec<(i32, u64, u32)> {
        let dir = self.root.join("proc/self/task");
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Vec::new();
        };
        entries
            .flatten()
            .take(MAX_TASKS)
            .filter_map(|e| {
                let tid: i32 = e.file_name().to_str()?.parse().ok()?;
                let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
                let (ticks, cpu) = parse_task_stat(&stat)?;
                Some((tid, ticks, cpu))
            })
            .collect()
    }

    /// Each CPU's node (`sys/devices/system/node/nodeN/cpulist`); empty where the
    /// kernel shows no node (every CPU is then on node 0).
    pub fn cpu_nodes(&self) -> HashMap<u32, u32> {
        let dir = self.root.join("sys/devices/system/node");
        let mut out = HashMap::new();
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let name = e.file_name();
            let Some(node) = name
                .to_str()
                .and_then(|n| n.strip_prefix("node")?.parse::<u32>().ok())
            else {
                continue;
            };
            let list = std::fs::read_to_string(e.path().join("cpulist")).unwrap_or_default();
            for cpu in super::machine::parse_cpulist(&list) {
                out.insert(cpu, node);
            }
        }
        out
    }
}

/// Fields 14-15 (utime, stime) and 39 (processor) of a task's `stat`, counted after the
/// last `)` (the name may hold spaces and parentheses), where field 3 starts.
fn parse_task_stat(stat: &str) -> Option<(u64, u32)> {
    let (_, rest) = stat.rsplit_once(')')?;
    let f: Vec<&str> = rest.split_ascii_whitespace().collect();
    let utime: u64 = f.get(14 - 3)?.parse().ok()?;
    let stime: u64 = f.get(15 - 3)?.parse().ok()?;
    let cpu: u32 = f.get(39 - 3)?.parse().ok()?;
    Some((utime + stime, cpu))
}

/// Turns two reads of the counters into each CPU's foreign load over the interval.
#[derive(Debug)]
pub struct Sampler {
    reader: ProcReader,
    nodes: HashMap<u32, u32>,
    cpus: Vec<u32>,
    prev_cpu: HashMap<u32, (u64, u64)>,
    prev_task: HashMap<i32, u64>,
}

impl Sampler {
    /// A sampler of `cpus` (the CPUs this process may use) read through `reader`.
    pub fn new(reader: ProcReader, cpus: Vec<u32>) -> Sampler {
        let nodes = reader.cpu_nodes();
        Sampler {
            reader,
            nodes,
            cpus,
            prev_cpu: HashMap::new(),
            prev_task: HashMap::new(),
        }
    }

    /// The node of `cpu` (0 where the kernel shows none).
    pub fn node_of(&self, cpu: u32) -> u32 {
        self.nodes.get(&cpu).copied().unwrap_or(0)
    }

    /// Reads the counters again: each CPU's foreign load since the last call (empty on
    /// the first call, which only sets the baseline).
    pub fn sample(&mut self) -> Vec<CpuLoad> {
        let now_cpu = self.reader.cpu_ticks();
        let tasks = self.reader.tasks();
        let mut ours: HashMap<u32, u64> = HashMap::new();
        for &(tid, ticks, cpu) in &tasks {
            if let Some(prev) = self.prev_task.get(&tid) {
                *ours.entry(cpu).or_default() += ticks.saturating_sub(*prev);
            }
        }
        let first = self.prev_cpu.is_empty();
        let loads = self
            .cpus
            .iter()
            .filter_map(|&cpu| {
                let (t1, i1) = *now_cpu.get(&cpu)?;
                let (t0, i0) = *self.prev_cpu.get(&cpu)?;
                let total = t1.saturating_sub(t0);
                if total == 0 {
                    return None;
                }
                let busy = total.saturating_sub(i1.saturating_sub(i0));
                let mine = ours.get(&cpu).copied().unwrap_or(0);
                let foreign = busy.saturating_sub(mine) as f64 / total as f64;
                Some(CpuLoad {
                    cpu,
                    node: self.node_of(cpu),
                    foreign: foreign.clamp(0.0, 1.0),
                })
            })
            .collect();
        self.prev_cpu = now_cpu;
        self.prev_task = tasks.into_iter().map(|(tid, t, _)| (tid, t)).collect();
        if first {
            Vec::new()
        } else {
            loads
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
