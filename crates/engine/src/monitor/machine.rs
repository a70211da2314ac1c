//! The machine's state per NUMA node, read from the kernel at each scrape: per-core
//! time (`/proc/stat`), memory (`nodeN/meminfo`), NUMA allocation counts
//! (`nodeN/numastat`) and NIC byte counts (`/sys/class/net`). Nothing is kept between
//! reads: rates are the reader's (Prometheus' `rate()`, `sluice top`).

use std::path::Path;

const NODES: &str = "/sys/devices/system/node";

/// One CPU's time since boot, seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuTime {
    /// The CPU's number.
    pub cpu: u32,
    /// User time (nice included).
    pub user: f64,
    /// System time (irq and softirq included).
    pub system: f64,
    /// Waiting for I/O.
    pub iowait: f64,
    /// Idle.
    pub idle: f64,
    /// Stolen by the hypervisor.
    pub steal: f64,
}

/// One NUMA node now.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeState {
    /// The node's number.
    pub node: u32,
    /// Its CPUs' times.
    pub cpus: Vec<CpuTime>,
    /// Memory, bytes.
    pub mem_total: u64,
    /// Free memory, bytes.
    pub mem_free: u64,
    /// Pages allocated here as intended.
    pub numa_hit: u64,
    /// Pages allocated here though intended elsewhere.
    pub numa_miss: u64,
    /// Pages allocated here by a process running on another node.
    pub other_node: u64,
}

/// One network interface now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NicState {
    /// Its name.
    pub name: String,
    /// The node its device sits on, where the kernel says.
    pub node: Option<u32>,
    /// Bytes received since it came up.
    pub rx_bytes: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
}

/// Parses `/proc/stat`'s per-CPU lines (`cpuN user nice system idle iowait irq softirq
/// steal ...`, in clock ticks of `hz`).
pub fn parse_proc_stat(text: &str, hz: f64) -> Vec<CpuTime> {
    text.lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            let cpu = f.next()?.strip_prefix("cpu")?.parse::<u32>().ok()?;
            let v: Vec<f64> = f.take(8).filter_map(|x| x.parse::<f64>().ok()).collect();
            let at = |i: usize| v.get(i).copied().unwrap_or(0.0) / hz;
            Some(CpuTime {
                cpu,
                user: at(0) + at(1),
                system: at(2) + at(5) + at(6),
                idle: at(3),
                iowait: at(4),
                steal: at(7),
            })
        })
        .collect()
}

/// Parses a CPU list (`0-3,8,10-11`).
pub fn parse_cpulist(text: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>()) {
            out.extend(a..=b.min(a.saturating_add(4096)));
        }
    }
    out
}

/// A `key value` field of a numastat or meminfo text (`Node 0 MemFree: 123 kB` too).
fn field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let mut f = l
            .split_whitespace()
            .skip_while(|w| w.trim_end_matches(':') != key);
        f.next()?;
        f.next()?.parse().ok()
    })
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 {
        hz as f64
    } else {
        100.0
    }
}

/// Every node's state now (one node holding every CPU where the kernel shows none).
pub fn nodes() -> Vec<NodeState> {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let cpus = parse_proc_stat(&stat, clock_ticks());
    let mut ids: Vec<u32> = std::fs::read_dir(NODES)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("node")?.parse().ok())
        .collect();
    ids.sort_unstable();
    if ids.is_empty() {
        let mem = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        return vec![NodeState {
            node: 0,
            cpus,
            mem_total: field(&mem, "MemTotal").unwrap_or(0) * 1024,
            mem_free: field(&mem, "MemFree").unwrap_or(0) * 1024,
            ..NodeState::default()
        }];
    }
    ids.into_iter().map(|id| node(id, &cpus)).collect()
}

fn node(id: u32, cpus: &[CpuTime]) -> NodeState {
    let dir = Path::new(NODES).join(format!("node{id}"));
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
    let mine = parse_cpulist(&read("cpulist"));
    let mem = read("meminfo");
    let numastat = read("numastat");
    NodeState {
        node: id,
        cpus: cpus
            .iter()
            .filter(|c| mine.contains(&c.cpu))
            .copied()
            .collect(),
        mem_total: field(&mem, "MemTotal").unwrap_or(0) * 1024,
        mem_free: field(&mem, "MemFree").unwrap_or(0) * 1024,
        numa_hit: field(&numastat, "numa_hit").unwrap_or(0),
        numa_miss: field(&numastat, "numa_miss").unwrap_or(0),
        other_node: field(&numastat, "other_node").unwrap_or(0),
    }
}

/// Every network interface but loopback, with its byte counts now.
pub fn nics() -> Vec<NicState> {
    let mut out: Vec<NicState> = std::fs::read_dir("/sys/class/net")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            if name == "lo" {
                return None;
            }
            let dir = e.path();
            let num = |f: &str| -> Option<u64> {
                std::fs::read_to_string(dir.join(f))
                    .ok()?
                    .trim()
                    .parse()
                    .ok()
            };
            let node = std::fs::read_to_string(dir.join("device/numa_node"))
                .ok()
                .and_then(|s| s.trim().parse::<u32>().ok());
            Some(NicState {
                rx_bytes: num("statistics/rx_bytes")?,
                tx_bytes: num("statistics/tx_bytes")?,
                name,
                node,
            })
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_lines_become_seconds_per_cpu() {
        let text = "cpu  10 0 0 0 0 0 0 0\ncpu0 100 50 20 300 7 1 2 3 0 0\ncpu1 1 0 0 2\nintr 5";
        let c = parse_proc_stat(text, 100.0);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].cpu, 0);
        assert!((c[0].user - 1.5).abs() < 1e-9);
        assert!((c[0].system - 0.23).abs() < 1e-9);
        assert!((c[0].idle - 3.0).abs() < 1e-9);
        assert!((c[0].iowait - 0.07).abs() < 1e-9);
        assert!((c[1].idle - 0.02).abs() < 1e-9);
    }

    #[test]
    fn cpu_lists_and_numastat_fields_parse() {
        assert_eq!(parse_cpulist("0-2,5,7-8\n"), [0, 1, 2, 5, 7, 8]);
        assert!(parse_cpulist("").is_empty());
        let numastat = "numa_hit 123\nnuma_miss 4\nother_node 9\n";
        assert_eq!(field(numastat, "numa_miss"), Some(4));
        assert_eq!(field(numastat, "other_node"), Some(9));
        let meminfo = "Node 0 MemTotal:  1024 kB\nNode 0 MemFree:  512 kB\n";
        assert_eq!(field(meminfo, "MemFree"), Some(512));
    }

    #[test]
    fn this_machine_has_a_node_with_cpus() {
        let n = nodes();
        assert!(!n.is_empty());
        assert!(n.iter().any(|n| !n.cpus.is_empty() && n.mem_total > 0));
    }
}
