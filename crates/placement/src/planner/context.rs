//! The machine as the planner sees it: the validated job ([`Context`]), its usable
//! nodes, sockets, selected NICs, storage nodes and manual placements.

use super::{slot, ROLES};
use crate::types::{Job, Role};
use sluice_topology::Machine;
use std::collections::BTreeSet;

/// A usable NUMA node: at least one usable CPU and some memory.
#[derive(Debug)]
pub(super) struct UNode {
    pub(super) os_index: u32,
    pub(super) package: Option<u32>,
    /// Index into [`Context::sockets`].
    pub(super) socket: usize,
    /// Each core's usable PUs (never empty). A bound thread gets one whole core.
    pub(super) cores: Vec<Vec<u32>>,
}

/// The usable nodes of one package (or one package-less node).
#[derive(Debug)]
pub(super) struct Socket {
    pub(super) package: Option<u32>,
    /// Indexes into [`Context::nodes`], in node order.
    pub(super) nodes: Vec<usize>,
}

/// A NIC the job uses.
#[derive(Debug)]
pub(super) struct SelNic {
    pub(super) name: String,
    /// The usable node its threads belong on: its own node, or the nearest usable node
    /// when its node has no usable CPU or memory. `None` when its locality is unknown.
    pub(super) node: Option<usize>,
}

/// A resolved manual placement.
#[derive(Debug)]
pub(super) struct Manual {
    /// Index into [`Context::nodes`] of the memory node.
    pub(super) mem: usize,
    /// Union of the exec nodes' usable PUs, or `None` for `exec:os`.
    pub(super) cpus: Option<Vec<u32>>,
}

/// The validated inputs.
pub(super) struct Context<'a> {
    pub(super) machine: &'a Machine,
    pub(super) job: &'a Job,
    /// Usable nodes in machine (OS index) order.
    pub(super) nodes: Vec<UNode>,
    /// Distances between usable nodes, by index into `nodes` (looked up once: the
    /// machine's own lookup is linear in the node count).
    pub(super) distances: Vec<Vec<u32>>,
    pub(super) sockets: Vec<Socket>,
    /// Selected NICs, in selection order.
    pub(super) nics: Vec<SelNic>,
    /// Usable nodes of the job's storage devices (deduplicated, in job order), with the
    /// first device name seen on each.
    pub(super) storage: Vec<(usize, String)>,
    pub(super) manual: [Option<Manual>; ROLES],
    pub(super) counts: [u32; ROLES],
    pub(super) reserved: Vec<u32>,
    /// Notes found while validating (NIC and device locality, duplicate placements).
    pub(super) notes: Vec<String>,
}

impl Context<'_> {
    /// The NICs the job uses and the usable node each one's threads belong on.
    pub(super) fn select_nics(&mut self) {
        let machine = self.machine;
        let names: Vec<&str> = if self.job.nics.is_empty() {
            machine
                .nics
                .iter()
                .filter(|n| n.numa_node.is_some() && n.name != "lo")
                .map(|n| n.name.as_str())
                .collect()
        } else {
            self.job.nics.iter().map(String::as_str).collect()
        };
        let has_net = self.counts[slot(Role::NetSend)] + self.counts[slot(Role::NetRecv)] > 0;
        for name in names {
            if self.nics.iter().any(|n| n.name == name) {
                continue;
            }
            let node = match machine.nic(name).and_then(|n| n.numa_node) {
                Some(os) => {
                    let idx = self.usable_near(os);
                    if self.nodes[idx].os_index != os {
                        self.notes.push(format!(
                            "NIC {name} is on node {os}, which has no usable CPU or no memory: \
                             its threads go to node {}, the nearest usable node",
                            self.nodes[idx].os_index
                        ));
                    }
                    Some(idx)
                }
                None => {
                    if has_net {
                        self.notes.push(format!(
                            "NIC {name} has no known NUMA node: its net threads are balanced \
                             like the other threads"
                        ));
                    }
                    None
                }
            };
            self.nics.push(SelNic {
                name: name.to_string(),
                node,
            });
        }
    }

    /// The usable nodes of the job's storage devices.
    pub(super) fn locate_storage(&mut self) {
        let machine = self.machine;
        let has_io = self.counts[slot(Role::IoRead)] + self.counts[slot(Role::IoWrite)] > 0;
        for name in &self.job.storage {
            match machine.block_device(name).and_then(|b| b.numa_node) {
                Some(os) => {
                    let idx = self.usable_near(os);
                    if !self.storage.iter().any(|(n, _)| *n == idx) {
                        self.storage.push((idx, name.clone()));
                    }
                }
                None if has_io => self.notes.push(format!(
                    "block device {name} has no known NUMA node: I/O threads are balanced \
                     without a preference"
                )),
                None => {}
            }
        }
    }

    /// The usable node nearest to machine node `os` (itself when usable).
    pub(super) fn usable_near(&self, os: u32) -> usize {
        let mut best = 0;
        let mut best_key = (u32::MAX, u32::MAX);
        for (i, n) in self.nodes.iter().enumerate() {
            let d = if n.os_index == os {
                0
            } else {
                self.machine.distance(os, n.os_index)
            };
            if (d, n.os_index) < best_key {
                best_key = (d, n.os_index);
                best = i;
            }
        }
        best
    }

    /// Distance between two usable nodes.
    pub(super) fn dist(&self, a: usize, b: usize) -> u32 {
        self.distances[a][b]
    }

    /// The node (and NIC) `bind` keeps everything on: the first selected NIC with a
    /// known node.
    pub(super) fn first_nic_node(&self) -> Option<(usize, usize)> {
        self.nics
            .iter()
            .enumerate()
            .find_map(|(i, n)| n.node.map(|node| (node, i)))
    }

    pub(super) fn count(&self, role: Role) -> u32 {
        self.counts[slot(role)]
    }

    pub(super) fn net_threads(&self) -> u32 {
        self.count(Role::NetSend) + self.count(Role::NetRecv)
    }

    /// Whether a usable node hosts a selected NIC with known locality.
    pub(super) fn is_nic_node(&self, node: usize) -> bool {
        self.nics.iter().any(|n| n.node == Some(node))
    }
}

/// The usable PUs of machine node `os`, sorted.
pub(super) fn usable_cpus_of(machine: &Machine, os: u32, usable: &BTreeSet<u32>) -> Vec<u32> {
    let Some(node) = machine.node(os) else {
        return Vec::new();
    };
    let set: BTreeSet<u32> = node
        .cpus
        .iter()
        .copied()
        .filter(|c| usable.contains(c))
        .collect();
    set.into_iter().collect()
}

/// Roles `a` and `b` alternated (a, b, a, b, ...) as many times as the job asks.
pub(super) fn interleaved(ctx: &Context<'_>, a: Role, b: Role) -> Vec<Role> {
    let (na, nb) = (ctx.count(a), ctx.count(b));
    let mut out = Vec::new();
    for i in 0..na.max(nb) {
        if i < na {
            out.push(a);
        }
        if i < nb {
            out.push(b);
        }
    }
    out
}
