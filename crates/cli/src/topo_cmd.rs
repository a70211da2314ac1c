//! `sluice topo`: the machine in the spirit of `numactl -H` + `lstopo`.

use crate::exit::{bad_input, ExitCode};
use crate::{output, svg};
use anyhow::{Context, Result};
use clap::Args;
use sluice_topology::{cpulist, discover, Machine, Node, TopologySource};
use std::fmt::Write as _;
use std::path::PathBuf;

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
    let text = if args.json {
        serde_json::to_string_pretty(&machine)? + "\n"
    } else {
        human(&machine)
    };
    output::stdout(&text)?;
    Ok(ExitCode::Ok)
}

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// The human view: a summary line, one block per package and node with its devices,
/// then the distance matrix.
pub fn human(m: &Machine) -> String {
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
    for node in &m.nodes {
        node_block(m, node, &mut out);
    }
    unlocated_devices(m, &mut out);
    distances(m, &mut out);
    out
}

/// A node's line, then one line per NIC and disk attached to it.
fn node_block(m: &Machine, node: &Node, out: &mut String) {
    let pkg = node
        .package
        .map_or_else(|| "-".to_string(), |p| p.to_string());
    let _ = writeln!(
        out,
        "node {} (package {}): cpus {}  cores {}  memory {}",
        node.os_index,
        pkg,
        if node.cpus.is_empty() {
            "none".to_string()
        } else {
            cpulist::format(&node.cpus)
        },
        node.cores.len(),
        gib(node.memory_bytes)
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
