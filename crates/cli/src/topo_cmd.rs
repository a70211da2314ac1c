//! `sluice topo`: the machine in the spirit of `numactl -H` + `lstopo`.

use crate::exit::{bad_input, ExitCode};
use crate::{output, svg};
use anyhow::{Context, Result};
use clap::Args;
use sluice_topology::{cpulist, discover, Machine, Node, TopologySource};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Arguments of `sluice topo`.
#[derive(Debug, Args)]
pub struct TopoArgs {
    /// Topology source: this machine (default), `synthetic:"pack:2 numa:2 core:8 pu:1"`,
    /// or the path of an hwloc XML file.
    #[arg(long, value_name = "SRC", default_value = "this")]
    pub topology: String,
    /// Print the machine as JSON (the contract other tools rely on).
    #[arg(long)]
    pub json: bool,
    /// Also draw the machine as SVG into FILE.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
}

/// Loads the machine named by a `--topology` value; errors are bad input (exit 2).
pub fn load_machine(src: &str) -> Result<Machine> {
    let source: TopologySource = src.parse().map_err(bad_input)?;
    discover(&source).map_err(bad_input)
}

/// Runs `sluice topo`.
pub fn run(args: &TopoArgs) -> Result<ExitCode> {
    let machine = load_machine(&args.topology)?;
    if let Some(path) = &args.svg {
        std::fs::write(path, svg::render(&machine, None))
            .with_context(|| format!("cannot write SVG to {}", path.display()))?;
    }
    // Free memory is a fact of this machine now; a file or synthetic topology has none.
    let memory = memory_of(
        &machine,
        (args.topology == "this").then_some(Path::new(SYS_NODES)),
    );
    let text = if args.json {
        add_memory(&serde_json::to_string_pretty(&machine)?, &memory) + "\n"
    } else {
        human_with(&machine, &memory)
    };
    output::stdout(&text)?;
    Ok(ExitCode::Ok)
}

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// Where the kernel lists NUMA nodes (`nodeN/meminfo`).
const SYS_NODES: &str = "/sys/devices/system/node";

/// A node's memory: total (the kernel's `MemTotal`, else hwloc's local memory) and free
/// (the kernel's `MemFree`, on this machine only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Memory {
    /// Bytes of memory local to the node.
    pub total: u64,
    /// Bytes of it free now, when known.
    pub free: Option<u64>,
}

/// Each node's memory, in the order of `m.nodes`; `nodes` is the kernel's node
/// directory when the machine is this one.
pub fn memory_of(m: &Machine, nodes: Option<&Path>) -> Vec<Memory> {
    m.nodes
        .iter()
        .map(|n| {
            let info = nodes.and_then(|d| meminfo(&d.join(format!("node{}/meminfo", n.os_index))));
            Memory {
                total: info.map_or(n.memory_bytes, |(total, _)| total),
                free: info.map(|(_, free)| free),
            }
        })
        .collect()
}

/// `MemTotal` and `MemFree` of a node's `meminfo` (`Node 0 MemFree:  1394892 kB`).
fn meminfo(path: &Path) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(path).ok()?;
    let field = |name: &str| -> Option<u64> {
        text.lines().find_map(|l| {
            let mut words = l.split_whitespace().skip(2);
            (words.next()? == name).then_some(())?;
            let kb: u64 = words.next()?.parse().ok()?;
            Some(kb * 1024)
        })
    };
    Some((field("MemTotal:")?, field("MemFree:")?))
}

/// The JSON of `sluice topo --json` gains, per node, `memory_total_bytes` and
/// `memory_free_bytes` (null when unknown) right after `memory_bytes`, which stays
/// (hwloc's local memory: the total). Inserted into the text so that every other key
/// keeps its place.
fn add_memory(json: &str, memory: &[Memory]) -> String {
    let mut out = String::with_capacity(json.len() + memory.len() * 96);
    let mut nodes = memory.iter();
    for line in json.lines() {
        out.push_str(line);
        out.push('\n');
        let body = line.trim_start();
        if !body.starts_with("\"memory_bytes\": ") {
            continue;
        }
        let indent = &line[..line.len() - body.len()];
        if let Some(mem) = nodes.next() {
            let free = mem
                .free
                .map_or_else(|| "null".to_string(), |f| f.to_string());
            out.push_str(&format!("{indent}\"memory_total_bytes\": {},\n", mem.total));
            out.push_str(&format!("{indent}\"memory_free_bytes\": {free},\n"));
        }
    }
    debug_assert!(nodes.next().is_none(), "one memory_bytes per node");
    out.trim_end().to_string()
}

/// The human view: a summary line, one block per package and node (its memory as
/// `memory` says) with its devices, then the distance matrix.
pub fn human_with(m: &Machine, memory: &[Memory]) -> String {
    let mut out = String::new();
    let cores: usize = m.nodes.iter().map(|n| n.cores.len()).sum();
    let _ = writeln!(
        out,
        "machine: {} — {} package(s), {} NUMA node(s), {} core(s), {} PU(s) allowed ({})",
        m.source,
        m.packages.len(),
        m.nodes.len(),
        cores,
        m.allowed_cpus.len(),
        cpulist::format(&m.allowed_cpus)
    );
    for (node, mem) in m.nodes.iter().zip(memory) {
        node_block(m, node, *mem, &mut out);
    }
    unlocated_devices(m, &mut out);
    distances(m, &mut out);
    out
}

/// A node's line, then one line per NIC and disk attached to it.
fn node_block(m: &Machine, node: &Node, mem: Memory, out: &mut String) {
    let pkg = node
        .package
        .map_or_else(|| "-".to_string(), |p| p.to_string());
    let _ = writeln!(
        out,
        "node {} (package {}): cpus {}  cores {}  memory {} total, {} free",
        node.os_index,
        pkg,
        if node.cpus.is_empty() {
            "none".to_string()
        } else {
            cpulist::format(&node.cpus)
        },
        node.cores.len(),
        gib(mem.total),
        mem.free.map_or_else(|| "?".to_string(), gib)
    );
    for nic in m.nics.iter().filter(|n| n.numa_node == Some(node.os_index)) {
        let _ = writeln!(out, "  nic  {}", nic_line(nic));
    }
    for disk in m
        .block_devices
        .iter()
        .filter(|d| d.numa_node == Some(node.os_index))
    {
        let _ = writeln!(out, "  disk {}", disk_line(disk));
    }
}

/// NICs and disks whose NUMA node is unknown, if any.
fn unlocated_devices(m: &Machine, out: &mut String) {
    let unlocated_nics: Vec<_> = m.nics.iter().filter(|n| n.numa_node.is_none()).collect();
    let unlocated_disks: Vec<_> = m
        .block_devices
        .iter()
        .filter(|d| d.numa_node.is_none())
        .collect();
    if unlocated_nics.is_empty() && unlocated_disks.is_empty() {
        return;
    }
    let _ = writeln!(out, "devices without NUMA locality:");
    for nic in unlocated_nics {
        let _ = writeln!(out, "  nic  {}", nic_line(nic));
    }
    for disk in unlocated_disks {
        let _ = writeln!(out, "  disk {}", disk_line(disk));
    }
}

/// The node distance matrix, when the source gives one.
fn distances(m: &Machine, out: &mut String) {
    if m.nodes.iter().all(|n| n.distances.is_empty()) {
        return;
    }
    let _ = writeln!(out, "node distances:");
    let _ = write!(out, "node ");
    for n in &m.nodes {
        let _ = write!(out, "{:>4}", n.os_index);
    }
    let _ = writeln!(out);
    for n in &m.nodes {
        let _ = write!(out, "{:>3}: ", n.os_index);
        for d in &n.distances {
            let _ = write!(out, "{d:>4}");
        }
        let _ = writeln!(out);
    }
}

fn nic_line(nic: &sluice_topology::Nic) -> String {
    let mut s = nic.name.clone();
    if let Some(speed) = nic.link_speed_mbps {
        let _ = write!(s, "  {speed} Mb/s");
    }
    if let Some(mac) = &nic.mac {
        let _ = write!(s, "  {mac}");
    }
    if !nic.addresses.is_empty() {
        let _ = write!(s, "  {}", nic.addresses.join(" "));
    }
    s
}

fn disk_line(disk: &sluice_topology::BlockDevice) -> String {
    let mut s = disk.name.clone();
    if let Some(size) = disk.size_bytes {
        let _ = write!(s, "  {}", gib(size));
    }
    if let Some(rot) = disk.rotational {
        s.push_str(if rot {
            "  rotational"
        } else {
            "  non-rotational"
        });
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_shows_total_and_free_memory_from_the_kernel() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("node0")).unwrap();
        std::fs::write(
            dir.path().join("node0/meminfo"),
            "Node 0 MemTotal:       24684084 kB\nNode 0 MemFree:         1394892 kB\nNode 0 MemUsed:        23289192 kB\n",
        )
        .unwrap();
        let m = load_machine("synthetic:pack:1 numa:1 core:2 pu:1").unwrap();
        let mem = memory_of(&m, Some(dir.path()));
        assert_eq!(
            mem,
            [Memory {
                total: 24_684_084 * 1024,
                free: Some(1_394_892 * 1024)
            }]
        );
        let text = human_with(&m, &mem);
        assert!(
            text.contains("memory 23.5 GiB total, 1.3 GiB free"),
            "{text}"
        );
        let json = add_memory(&serde_json::to_string_pretty(&m).unwrap(), &mem);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["nodes"][0]["memory_free_bytes"], 1_394_892u64 * 1024);
        assert_eq!(v["nodes"][0]["memory_total_bytes"], 24_684_084u64 * 1024);
    }

    #[test]
    fn a_topology_from_elsewhere_has_no_free_memory() {
        let m = load_machine("synthetic:pack:1 numa:2 core:2 pu:1").unwrap();
        let mem = memory_of(&m, None);
        assert!(mem
            .iter()
            .all(|x| x.free.is_none() && x.total == m.nodes[0].memory_bytes));
        assert!(human_with(&m, &mem).contains("total, ? free"));
        let json = add_memory(&serde_json::to_string_pretty(&m).unwrap(), &mem);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert!(v["nodes"][1]["memory_free_bytes"].is_null());
        assert_eq!(
            v["nodes"][1]["memory_total_bytes"],
            v["nodes"][1]["memory_bytes"]
        );
        // Every other key keeps its place.
        let keys = |j: &str| {
            j.lines()
                .filter(|l| !l.contains("memory_total") && !l.contains("memory_free"))
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert_eq!(keys(&json), serde_json::to_string_pretty(&m).unwrap());
    }
}
