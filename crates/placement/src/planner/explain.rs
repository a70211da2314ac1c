//! The plan's sentences: what the policy does, where each role went and why, and how
//! the buffer was split.

use super::builder::{Builder, ControlBasis, Tb};
use super::context::{Context, Manual, Socket};
use super::slot;
use crate::cpulist::format_cpulist;
use crate::types::{Channel, Job, Policy, Role};
use std::collections::BTreeMap;

impl Builder<'_, '_> {
    /// The first sentence of `explain`: what the policy does.
    pub(super) fn policy_sentence(&self) -> String {
        let ctx = self.ctx;
        let head = format!("policy {}:", self.policy);
        let body = match self.policy {
            Policy::Os | Policy::Auto => {
                "nothing is bound; the OS scheduler places threads and first touch places \
                 buffer pages."
                    .to_string()
            }
            Policy::Bind => {
                let node = ctx.nodes[self.bind_node].os_index;
                match ctx.first_nic_node() {
                    Some((_, nic)) => format!(
                        "every thread and all buffer memory on node {node}, where NIC {} is \
                         attached (seed 000's NUMA binding).",
                        ctx.nics[nic].name
                    ),
                    None => format!(
                        "every thread and all buffer memory on node {node} (seed 000's NUMA \
                         binding; no selected NIC has a known node)."
                    ),
                }
            }
            Policy::Smts => "one channel per socket, with its own buffer partition and \
                             connections; every thread runs on a core of its socket, so it only \
                             touches its socket's memory (seed 000's SMTS)."
                .to_string(),
            Policy::Nmts => "one channel per NUMA node; threads balanced over the nodes, each \
                             channel's control thread next to its net threads (seed 000's NMTS)."
                .to_string(),
            Policy::Mts => "one channel per NUMA node, grouped by socket: net threads on their \
                            NIC's node, I/O and compression balanced over the nodes of every \
                            socket, control next to the net threads (seed 000's MTS = SMTS + \
                            NMTS)."
                .to_string(),
        };
        format!("{head} {body}")
    }

    /// One sentence per role: where its threads went and why.
    pub(super) fn role_sentences(&self) -> Vec<String> {
        let mut out = Vec::new();
        for role in Role::ALL {
            let threads: Vec<&Tb> = self
                .channels
                .iter()
                .flat_map(|c| c.threads.iter())
                .filter(|t| t.role == role)
                .collect();
            if threads.is_empty() {
                continue;
            }
            let n = threads.len();
            let plural = if n == 1 { "thread" } else { "threads" };
            if let Some(m) = &self.ctx.manual[slot(role)] {
                out.push(self.manual_sentence(role, m, n, plural));
            } else if !self.bound() {
                out.push(format!(
                    "{role}: {n} {plural}, unbound: the scheduler places them."
                ));
            } else {
                let place = self.nodes_phrase(&threads);
                let why = self.role_reason(role);
                out.push(format!("{role}: {n} {plural} {place}: {why}."));
            }
        }
        out
    }

    /// The sentence of a role placed by `--place` (`m`), with `n` threads.
    fn manual_sentence(&self, role: Role, m: &Manual, n: usize, plural: &str) -> String {
        let ctx = self.ctx;
        let exec = match &m.cpus {
            Some(cpus) => format!("running on CPUs {}", format_cpulist(cpus)),
            None => "running wherever the scheduler puts them".to_string(),
        };
        let mem = ctx.nodes[m.mem].os_index;
        let mut s =
            format!("{role}: {n} {plural} placed by --place: buffers on node {mem}, {exec}.");
        if self.policy == Policy::Smts {
            let ch = &self.channels[self.channel_of_node(m.mem)];
            if let Some(c) = ch.numa_node.filter(|&c| c != m.mem) {
                s.push_str(&format!(
                    " smts keeps one channel per socket, so they join the channel of \
                     node {mem}'s socket, whose buffers are on node {}.",
                    ctx.nodes[c].os_index
                ));
            }
        }
        s
    }

    /// `on node 1` or `on nodes 0 (2), 1 (3)`: where bound `threads` run.
    fn nodes_phrase(&self, threads: &[&Tb]) -> String {
        let mut per_node: BTreeMap<u32, u32> = BTreeMap::new();
        for t in threads {
            if let Some(node) = t.node {
                *per_node.entry(self.ctx.nodes[node].os_index).or_default() += 1;
            }
        }
        if per_node.len() == 1 {
            format!(
                "on node {}",
                per_node.keys().map(u32::to_string).collect::<String>()
            )
        } else {
            let parts: Vec<String> = per_node
                .iter()
                .map(|(node, c)| format!("{node} ({c})"))
                .collect();
            format!("on nodes {}", parts.join(", "))
        }
    }

    /// Why the bound threads of an automatically placed `role` went where they did.
    pub(super) fn role_reason(&self, role: Role) -> String {
        let ctx = self.ctx;
        if self.policy == Policy::Bind {
            let bind_node = ctx.nodes[self.bind_node].os_index;
            return format!("bind keeps every thread on node {bind_node} with the buffers");
        }
        let over = match self.policy {
            Policy::Smts => "balanced over the sockets, each on a core of its socket",
            Policy::Mts => "balanced over the sockets, then over the nodes of each socket",
            _ => "balanced round-robin over the nodes",
        };
        match role {
            Role::NetSend | Role::NetRecv => self.net_reason(over),
            Role::Control => self.control_reason(),
            Role::IoRead | Role::IoWrite => {
                let storage = match ctx.storage.first() {
                    Some((n, dev)) => {
                        format!(
                            ", starting at node {} where {dev} is attached",
                            ctx.nodes[*n].os_index
                        )
                    }
                    None => String::new(),
                };
                let away = self.kept_off_sentence(role);
                format!("{over}{storage}{away} (seed 002: I/O threads near the device)")
            }
            Role::Compress | Role::Decompress => {
                let away = self.kept_off_sentence(role);
                format!("{over}{away}, so every node carries an even share (seed 001)")
            }
        }
    }

    /// [`Self::role_reason`] for net threads; `over` says how balanced threads spread.
    fn net_reason(&self, over: &str) -> String {
        if self.ctx.first_nic_node().is_none() {
            return format!("no selected NIC has a known node, so they are {over}");
        }
        let elsewhere = if self.policy == Policy::Smts {
            "elsewhere in its socket"
        } else {
            "on the nearest node with one"
        };
        let rest = match (self.net_spilled, self.net_kept) {
            (0, 0) => format!(", else {elsewhere}"),
            (_, 0) => format!(", else {elsewhere}, staying in the NIC's channel with its buffers"),
            (0, _) => "; the job does not fit the machine, so the others share the \
                       NIC node's cores rather than take cores the other threads need"
                .to_string(),
            (spilled, _) => format!(
                "; the job does not fit the machine, so only {spilled} more take \
                 cores that no other thread needs ({elsewhere}, staying in the NIC's \
                 channel) and the others share the NIC node's cores"
            ),
        };
        format!(
            "NIC-facing threads are placed first, each on its NIC's node while it has \
             a free core{rest} (seed 001: receivers next to the NIC win)"
        )
    }

    /// [`Self::role_reason`] for control threads.
    fn control_reason(&self) -> String {
        let ctx = self.ctx;
        let basis = match self.control_basis {
            ControlBasis::NicChannels => {
                "one per channel that drives a NIC, on the same node as that channel's net \
                 threads (seed 000's NMTS: control and communication threads share work queues)"
            }
            ControlBasis::DataChannels if ctx.nics.is_empty() => {
                "no NIC is selected, so one per channel that has data-path threads, on a \
                 core of that channel"
            }
            ControlBasis::DataChannels => {
                "the job has no net threads, so one per channel that has data-path \
                 threads, on a core of that channel"
            }
        };
        let per_channel = ctx.count(Role::Control).max(1) - self.extra_controls;
        match self.extra_controls {
            0 => basis.to_string(),
            n if per_channel == 0 => {
                let place = match ctx.first_nic_node() {
                    Some((_, nic)) => format!("the channel of NIC {}'s node", ctx.nics[nic].name),
                    None => "the first channel".to_string(),
                };
                format!("the job has no data-path threads; the {n} it asks for go to {place}")
            }
            n => format!(
                "{basis}; {n} more because the job asks for {}, first to channels \
                 without one",
                ctx.count(Role::Control)
            ),
        }
    }

    /// `; with no free core left, they share cores away from node 1, where the net
    /// threads are` when a thread of `role` kept off the net threads' nodes.
    pub(super) fn kept_off_sentence(&self, role: Role) -> String {
        if !self.kept_off_net[slot(role)] {
            return String::new();
        }
        let nodes: Vec<u32> = self
            .net_nodes
            .iter()
            .map(|&n| self.ctx.nodes[n].os_index)
            .collect();
        let node_s = if nodes.len() == 1 { "node" } else { "nodes" };
        format!(
            "; with no free core left, they share cores away from {node_s} {}, where the net \
             threads are",
            format_cpulist(&nodes)
        )
    }
}

pub(super) fn socket_name(ctx: &Context<'_>, socket: &Socket) -> String {
    match socket.package {
        Some(p) => format!("socket {p}"),
        None => {
            let nodes: Vec<u32> = socket
                .nodes
                .iter()
                .map(|&n| ctx.nodes[n].os_index)
                .collect();
            format!("node {} (no socket)", format_cpulist(&nodes))
        }
    }
}

pub(super) fn partition_sentence(job: &Job, channels: &[Channel], weights: &[u64]) -> String {
    let parts: Vec<String> = channels
        .iter()
        .map(|c| {
            let slots = c.buffer_bytes / job.chunk_bytes;
            let rest = c.buffer_bytes % job.chunk_bytes;
            if c.buffer_bytes == 0 {
                format!(
                    "channel {} holds no buffer (only control threads, which need no slot)",
                    c.id
                )
            } else if rest == 0 {
                format!("channel {} {slots} slots", c.id)
            } else {
                format!("channel {} {slots} slots + {rest} bytes", c.id)
            }
        })
        .collect();
    let basis = if weights.iter().sum::<u64>() == 0 {
        "evenly (no data-path threads)"
    } else {
        "in proportion to their data-path threads"
    };
    format!(
        "buffer: {} bytes split over {} channel(s) {basis}, in {}-byte slots: {}.",
        job.buffer_bytes,
        channels.len(),
        job.chunk_bytes,
        parts.join(", ")
    )
}
