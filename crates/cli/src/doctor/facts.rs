//! What `sluice doctor` reads: the kernel's own files under a root directory (`/` on a
//! host, a fixture tree in tests). Nothing here writes or changes anything; a file that
//! is missing or unreadable becomes `None`, and the check that needs it says so.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The capability bit of `CAP_IPC_LOCK` (mlock past RLIMIT_MEMLOCK).
const CAP_IPC_LOCK: u32 = 14;
/// The most CPUs, NICs, IRQs and processes read (bounded reads of a huge host).
const ENTRIES_MAX: usize = 65_536;

/// The host as its kernel files describe it.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// RLIMIT_MEMLOCK's soft value in bytes; `None`: unlimited.
    pub memlock_bytes: Option<u64>,
    /// Whether the limits file was readable at all.
    pub memlock_known: bool,
    /// This process holds CAP_IPC_LOCK.
    pub cap_ipc_lock: bool,
    /// `kernel.io_uring_disabled` (absent before Linux 6.6).
    pub io_uring_disabled: Option<u32>,
    /// `kernel.osrelease`.
    pub osrelease: Option<String>,
    /// The file-system type of the mount that holds the served root.
    pub root_fs: Option<String>,
    /// `net.core.rmem_max`, `net.core.wmem_max`.
    pub rmem_max: Option<u64>,
    pub wmem_max: Option<u64>,
    /// `net.ipv4.tcp_rmem` / `tcp_wmem` (min, default, max).
    pub tcp_rmem: Option<[u64; 3]>,
    pub tcp_wmem: Option<[u64; 3]>,
    /// `net.ipv4.tcp_congestion_control` (the system default).
    pub cc_default: Option<String>,
    /// `tcp_available_congestion_control` (loaded) and `tcp_allowed_congestion_control`
    /// (what a process without CAP_NET_ADMIN may set).
    pub cc_available: Vec<String>,
    pub cc_allowed: Vec<String>,
    /// `net.core.default_qdisc`.
    pub default_qdisc: Option<String>,
    /// `net.ipv4.tcp_mtu_probing`.
    pub mtu_probing: Option<u32>,
    /// CPU frequency governor -> how many CPUs use it (empty: no cpufreq).
    pub governors: BTreeMap<String, usize>,
    /// The network interfaces backed by a device (no `lo`, no virtual ones).
    pub nics: Vec<NicFacts>,
    /// NUMA node -> its CPUs.
    pub node_cpus: BTreeMap<u32, Vec<u32>>,
    /// A process named `irqbalance` runs.
    pub irqbalance: bool,
    /// The bracketed choice of `transparent_hugepage/enabled`.
    pub thp: Option<String>,
}

/// One NIC.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NicFacts {
    pub name: String,
    /// `speed` in Mbit/s (`None`: the driver does not say, or the link is down).
    pub speed_mbps: Option<u64>,
    pub mtu: Option<u32>,
    /// `operstate` is `up`.
    pub up: bool,
    /// `device/numa_node` (`None`: -1 or absent).
    pub numa_node: Option<u32>,
    /// Each MSI interrupt of the device with the CPUs it may run on.
    pub irqs: Vec<(u32, Vec<u32>)>,
}

/// Reads files relative to a root directory.
#[derive(Debug, Clone)]
pub struct Sysroot {
    dir: PathBuf,
}

impl Sysroot {
    pub fn new(dir: &Path) -> Sysroot {
        Sysroot {
            dir: dir.to_path_buf(),
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel.trim_start_matches('/'))
    }

    /// The file's text, trimmed; `None` when it cannot be read.
    pub fn read(&self, rel: &str) -> Option<String> {
        let text = std::fs::read_to_string(self.path(rel)).ok()?;
        Some(text.trim().to_string())
    }

    /// The file parsed as a number.
    pub fn number<T: std::str::FromStr>(&self, rel: &str) -> Option<T> {
        self.read(rel)?.parse().ok()
    }

    /// The names in a directory, sorted; empty when it cannot be read.
    pub fn list(&self, rel: &str) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(self.path(rel)) else {
            return Vec::new();
        };
        let mut names: Vec<String> = entries
            .take(ENTRIES_MAX)
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .collect();
        names.sort();
        names
    }

    pub fn exists(&self, rel: &str) -> bool {
        self.path(rel).exists()
    }
}

/// Reads everything `doctor` checks. `served_root` is the directory the daemon serves,
/// as seen on the host (its mount decides O_DIRECT).
pub fn read(root: &Sysroot, served_root: &Path) -> Facts {
    let (memlock_known, memlock_bytes) = memlock(root);
    let caps = root
        .read("proc/self/status")
        .and_then(|s| cap_eff(&s))
        .unwrap_or(0);
    Facts {
        memlock_bytes,
        memlock_known,
        cap_ipc_lock: caps & (1 << CAP_IPC_LOCK) != 0,
        io_uring_disabled: root.number("proc/sys/kernel/io_uring_disabled"),
        osrelease: root.read("proc/sys/kernel/osrelease"),
        root_fs: root
            .read("proc/self/mounts")
            .and_then(|m| fs_of(&m, served_root)),
        rmem_max: root.number("proc/sys/net/core/rmem_max"),
        wmem_max: root.number("proc/sys/net/core/wmem_max"),
        tcp_rmem: root
            .read("proc/sys/net/ipv4/tcp_rmem")
            .and_then(|t| triple(&t)),
        tcp_wmem: root
            .read("proc/sys/net/ipv4/tcp_wmem")
            .and_then(|t| triple(&t)),
        cc_default: root.read("proc/sys/net/ipv4/tcp_congestion_control"),
        cc_available: words(root.read("proc/sys/net/ipv4/tcp_available_congestion_control")),
        cc_allowed: words(root.read("proc/sys/net/ipv4/tcp_allowed_congestion_control")),
        default_qdisc: root.read("proc/sys/net/core/default_qdisc"),
        mtu_probing: root.number("proc/sys/net/ipv4/tcp_mtu_probing"),
        governors: governors(root),
        nics: nics(root),
        node_cpus: node_cpus(root),
        irqbalance: runs(root, "irqbalance"),
        thp: root
            .read("sys/kernel/mm/transparent_hugepage/enabled")
            .and_then(|t| bracketed(&t)),
    }
}

/// RLIMIT_MEMLOCK from `/proc/self/limits`: (readable, soft limit or None=unlimited).
fn memlock(root: &Sysroot) -> (bool, Option<u64>) {
    let Some(limits) = root.read("proc/self/limits") else {
        return (false, Some(0));
    };
    let Some(line) = limits.lines().find(|l| l.starts_with("Max locked memory")) else {
        return (false, Some(0));
    };
    let soft = line
        .trim_start_matches("Max locked memory")
        .split_whitespace()
        .next();
    match soft {
        Some("unlimited") => (true, None),
        Some(n) => (true, Some(n.parse().unwrap_or(0))),
        None => (false, Some(0)),
    }
}

/// The effective capability mask of a `/proc/PID/status` text.
pub fn cap_eff(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("CapEff:"))?;
    u64::from_str_radix(line.trim_start_matches("CapEff:").trim(), 16).ok()
}

/// The type of the file system mounted at the longest mount point above `path`.
pub fn fs_of(mounts: &str, path: &Path) -> Option<String> {
    let mut best: Option<(usize, String)> = None;
    for line in mounts.lines() {
        let mut fields = line.split_whitespace();
        let (Some(_dev), Some(point), Some(fs)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let point = point.replace("\\040", " ");
        if path.starts_with(&point) && best.as_ref().is_none_or(|(len, _)| point.len() >= *len) {
            best = Some((point.len(), fs.to_string()));
        }
    }
    best.map(|(_, fs)| fs)
}

fn triple(text: &str) -> Option<[u64; 3]> {
    let v: Vec<u64> = text
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    <[u64; 3]>::try_from(v).ok()
}

fn words(text: Option<String>) -> Vec<String> {
    text.unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// The `[chosen]` word of a sysfs choice list such as `always [madvise] never`.
pub fn bracketed(text: &str) -> Option<String> {
    let start = text.find('[')?;
    let end = text[start..].find(']')? + start;
    Some(text[start + 1..end].to_string())
}

fn governors(root: &Sysroot) -> BTreeMap<String, usize> {
    let mut count = BTreeMap::new();
    let cpus = root.list("sys/devices/system/cpu");
    for cpu in cpus.iter().filter(|c| is_numbered(c, "cpu")) {
        let file = format!("sys/devices/system/cpu/{cpu}/cpufreq/scaling_governor");
        if let Some(g) = root.read(&file) {
            *count.entry(g).or_insert(0) += 1;
        }
    }
    count
}

fn is_numbered(name: &str, prefix: &str) -> bool {
    name.strip_prefix(prefix)
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

fn node_cpus(root: &Sysroot) -> BTreeMap<u32, Vec<u32>> {
    let mut nodes = BTreeMap::new();
    for node in root.list("sys/devices/system/node") {
        if !is_numbered(&node, "node") {
            continue;
        }
        let Ok(index) = node.trim_start_matches("node").parse::<u32>() else {
            continue;
        };
        let list = root
            .read(&format!("sys/devices/system/node/{node}/cpulist"))
            .unwrap_or_default();
        nodes.insert(
            index,
            sluice_topology::cpulist::parse(&list).unwrap_or_default(),
        );
    }
    nodes
}

fn nics(root: &Sysroot) -> Vec<NicFacts> {
    let mut nics = Vec::new();
    for name in root.list("sys/class/net") {
        let dir = format!("sys/class/net/{name}");
        if !root.exists(&format!("{dir}/device")) {
            continue; // lo, veth, bridges: no hardware behind them
        }
        let irqs = root
            .list(&format!("{dir}/device/msi_irqs"))
            .iter()
            .filter_map(|irq| irq.parse::<u32>().ok())
            .map(|irq| (irq, irq_cpus(root, irq)))
            .collect();
        nics.push(NicFacts {
            speed_mbps: root
                .number::<i64>(&format!("{dir}/speed"))
                .and_then(|s| u64::try_from(s).ok())
                .filter(|s| *s > 0),
            mtu: root.number(&format!("{dir}/mtu")),
            up: root.read(&format!("{dir}/operstate")).as_deref() == Some("up"),
            numa_node: root
                .number::<i64>(&format!("{dir}/device/numa_node"))
                .and_then(|n| u32::try_from(n).ok()),
            irqs,
            name,
        });
    }
    nics
}

fn irq_cpus(root: &Sysroot, irq: u32) -> Vec<u32> {
    let list = root
        .read(&format!("proc/irq/{irq}/smp_affinity_list"))
        .unwrap_or_default();
    sluice_topology::cpulist::parse(&list).unwrap_or_default()
}

/// Whether a process whose `comm` is `name` runs (`/proc/PID/comm`).
fn runs(root: &Sysroot, name: &str) -> bool {
    root.list("proc")
        .iter()
        .filter(|p| p.bytes().all(|b| b.is_ascii_digit()))
        .any(|pid| root.read(&format!("proc/{pid}/comm")).as_deref() == Some(name))
}
