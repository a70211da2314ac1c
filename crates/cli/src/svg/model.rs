//! What the drawing is made of: nodes placed in rows, their text, the layout.

use super::*;
use sluice_placement::{Plan, Role};
use sluice_topology::{cpulist, Machine, Node};
use std::collections::BTreeMap;
use std::fmt::Write as _;

pub(super) struct Spanning {
    pub(super) channel: u32,
    pub(super) bytes: u64,
    pub(super) nodes: Vec<u32>,
}

/// Who is bound to each CPU, and what each node's channels hold.
pub(super) struct Placed<'a> {
    pub(super) by_cpu: BTreeMap<u32, Vec<(Role, u32)>>,
    /// Buffer bytes and channel ids bound to exactly one node, by node.
    pub(super) buffer_by_node: BTreeMap<u32, (u64, Vec<u32>)>,
    /// Channels whose buffer spans several nodes (`smts`), by package.
    pub(super) spanning_by_package: BTreeMap<Option<u32>, Vec<Spanning>>,
    pub(super) unbound: Vec<(Role, u32)>,
    pub(super) unbound_buffer_bytes: u64,
    pub(super) roles: Vec<Role>,
    pub(super) plan: &'a Plan,
}

impl<'a> Placed<'a> {
    pub(super) fn new(plan: &'a Plan) -> Self {
        let mut by_cpu: BTreeMap<u32, Vec<(Role, u32)>> = BTreeMap::new();
        let mut buffer_by_node: BTreeMap<u32, (u64, Vec<u32>)> = BTreeMap::new();
        let mut spanning_by_package: BTreeMap<Option<u32>, Vec<Spanning>> = BTreeMap::new();
        let mut unbound = Vec::new();
        let mut unbound_buffer_bytes = 0;
        for ch in &plan.channels {
            match ch.numa_node {
                Some(_) if ch.nodes.len() > 1 => spanning_by_package
                    .entry(ch.package)
                    .or_default()
                    .push(Spanning {
                        channel: ch.id,
                        bytes: ch.buffer_bytes,
                        nodes: ch.nodes.clone(),
                    }),
                Some(node) => {
                    let entry = buffer_by_node.entry(node).or_default();
                    entry.0 += ch.buffer_bytes;
                    entry.1.push(ch.id);
                }
                None => unbound_buffer_bytes += ch.buffer_bytes,
            }
            for t in &ch.threads {
                match &t.cpus {
                    Some(cpus) => {
                        for cpu in cpus {
                            by_cpu.entry(*cpu).or_default().push((t.role, t.index));
                        }
                    }
                    None => unbound.push((t.role, t.index)),
                }
            }
        }
        let roles = Role::ALL
            .into_iter()
            .filter(|r| plan.threads().any(|(_, t)| t.role == *r))
            .collect();
        Placed {
            by_cpu,
            buffer_by_node,
            spanning_by_package,
            unbound,
            unbound_buffer_bytes,
            roles,
            plan,
        }
    }

    /// The threads bound to any PU of `pus`, each once, in plan order per PU.
    pub(super) fn threads_on(&self, pus: &[u32]) -> Vec<(Role, u32)> {
        let mut threads: Vec<(Role, u32)> = Vec::new();
        for t in pus.iter().filter_map(|pu| self.by_cpu.get(pu)).flatten() {
            if !threads.contains(t) {
                threads.push(*t);
            }
        }
        threads
    }
}

/// The text lines of one node's box.
pub(super) struct NodeText {
    pub(super) head: String,
    pub(super) cpus: String,
    pub(super) buffer: Option<String>,
    pub(super) devices: Vec<(&'static str, String)>,
}

impl NodeText {
    pub(super) fn new(machine: &Machine, node: &Node, placed: Option<&Placed<'_>>) -> Self {
        let head = format!(
            "NUMA node {} · {}",
            node.os_index,
            memory(node.memory_bytes)
        );
        let cpus = if node.cpus.is_empty() {
            "no CPUs".to_string()
        } else {
            format!("cpus {}", cpulist::format(&node.cpus))
        };
        let buffer = placed
            .and_then(|p| p.buffer_by_node.get(&node.os_index))
            .map(|(bytes, channels)| {
                let ids: Vec<String> = channels.iter().map(u32::to_string).collect();
                let s = if ids.len() == 1 { "" } else { "s" };
                format!("buffer {} MiB · channel{s} {}", bytes >> 20, ids.join(","))
            });
        let mut devices = Vec::new();
        for nic in machine
            .nics
            .iter()
            .filter(|n| n.numa_node == Some(node.os_index))
        {
            let mut line = format!("⇄ NIC {}", nic.name);
            if let Some(mbps) = nic.link_speed_mbps {
                let _ = write!(line, " {}", link_speed(mbps));
            }
            if let Some(p) = placed {
                let users: Vec<String> = p
                    .plan
                    .channels
                    .iter()
                    .filter(|c| c.nics.contains(&nic.name))
                    .map(|c| c.id.to_string())
                    .collect();
                match users.len() {
                    0 => line.push_str(" · not used"),
                    1 => {
                        let _ = write!(line, " · channel {}", users[0]);
                    }
                    _ => {
                        let _ = write!(line, " · channels {}", users.join(","));
                    }
                }
            }
            devices.push(("#0a4", line));
        }
        for disk in machine
            .block_devices
            .iter()
            .filter(|d| d.numa_node == Some(node.os_index))
        {
            let size = disk.size_bytes.map(|b| format!(" {}", memory(b)));
            devices.push((
                "#a40",
                format!("▤ disk {}{}", disk.name, size.unwrap_or_default()),
            ));
        }
        NodeText {
            head,
            cpus,
            buffer,
            devices,
        }
    }

    pub(super) fn lines(&self) -> u32 {
        2 + u32::from(self.buffer.is_some())
    }

    pub(super) fn width(&self) -> u32 {
        let head = text_w(&self.head, 13).max(text_w(&self.cpus, 12));
        let buffer = self.buffer.as_deref().map_or(0, |b| text_w(b, 12));
        let devices = self
            .devices
            .iter()
            .map(|(_, d)| text_w(d, 12))
            .max()
            .unwrap_or(0);
        head.max(buffer).max(devices) + 2 * GAP
    }
}

/// Sizes shared by every node box, so that the grid lines up.
pub(super) struct Layout {
    pub(super) core_w: u32,
    pub(super) node_w: u32,
    pub(super) node_h: u32,
    pub(super) head_h: u32,
}

impl Layout {
    pub(super) fn new(machine: &Machine, texts: &[NodeText]) -> Self {
        let core_w = machine
            .nodes
            .iter()
            .flat_map(|n| &n.cores)
            .map(|c| text_w(&format!("PU {}", cpulist::format(&c.pus)), 10) + GAP)
            .max()
            .unwrap_or(0)
            .max(CORE_W_MIN);
        let cores_max = machine
            .nodes
            .iter()
            .map(|n| n.cores.len())
            .max()
            .unwrap_or(0);
        let cols = u32_of(cores_max.clamp(1, CORE_COLS_MAX));
        let rows = u32_of(cores_max.div_ceil(CORE_COLS_MAX).max(1));
        let lines = texts.iter().map(NodeText::lines).max().unwrap_or(2);
        let devices = texts
            .iter()
            .map(|t| u32_of(t.devices.len()))
            .max()
            .unwrap_or(0);
        let head_h = 10 + lines * LINE_H;
        let grid_w = cols * (core_w + GAP) + GAP;
        let node_w = texts.iter().map(NodeText::width).fold(grid_w, u32::max);
        let node_h = head_h + rows * (CORE_H + GAP) + devices * LINE_H + GAP;
        Layout {
            core_w,
            node_w,
            node_h,
            head_h,
        }
    }
}
