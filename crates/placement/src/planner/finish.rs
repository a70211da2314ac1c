//! The last step: empty channels dropped, channels and threads renumbered, the buffer
//! partitioned, the notes and sentences written.

use super::builder::{Builder, Stats};
use super::explain::{partition_sentence, socket_name};
use super::{slot, ROLES};
use crate::cpulist::format_cpulist;
use crate::types::{Channel, Plan, Policy, Role, ThreadPlan};
use std::collections::BTreeMap;

impl Builder<'_, '_> {
    /// Drops empty channels, orders them, partitions the buffer and writes the plan.
    pub(super) fn finish(mut self, requested: Policy, mut explain: Vec<String>) -> (Plan, Stats) {
        let ctx = self.ctx;
        let job = ctx.job;

        // Core sharing, for notes and for auto.
        let bound_threads: usize = self.load.iter().flatten().map(|&l| l as usize).sum();
        let used_cores = self.load.iter().flatten().filter(|&&l| l > 0).count();
        let max_per_core = self.load.iter().flatten().copied().max().unwrap_or(0);
        let shared = max_per_core > 1;
        let manual_threads = self
            .channels
            .iter()
            .flat_map(|c| c.threads.iter())
            .filter(|t| t.manual)
            .count();
        let exempt = match manual_threads {
            0 => String::new(),
            1 => " (the 1 thread placed by --place is exempt: it runs where --place puts it)"
                .to_string(),
            m => format!(
                " (the {m} threads placed by --place are exempt: they run where --place puts \
                 them)"
            ),
        };

        let mut order = self.channel_order();
        let all_empty = order.iter().all(|&c| self.channels[c].threads.is_empty());
        if !all_empty {
            order.retain(|&c| !self.channels[c].threads.is_empty());
        } else {
            order.truncate(1);
        }
        let new_id: BTreeMap<usize, u32> = order
            .iter()
            .enumerate()
            .map(|(i, &c)| (c, u32::try_from(i).unwrap_or(u32::MAX)))
            .collect();

        // Buffer partitions in proportion to data-path threads.
        let weights: Vec<u64> = order
            .iter()
            .map(|&c| {
                self.channels[c]
                    .threads
                    .iter()
                    .filter(|t| t.role != Role::Control)
                    .count() as u64
            })
            .collect();
        let parts = partition(job.buffer_bytes, job.chunk_bytes, &weights);

        let mut notes = ctx.notes.clone();
        notes.append(&mut self.notes);
        if !ctx.reserved.is_empty() {
            if self.bound() {
                notes.push(format!(
                    "CPUs {} are reserved: no thread is planned on them",
                    format_cpulist(&ctx.reserved)
                ));
            } else {
                notes.push(format!(
                    "CPUs {} are reserved, but os binds nothing, so the scheduler may still use \
                     them",
                    format_cpulist(&ctx.reserved)
                ));
            }
        }
        if !self.bound() {
            notes.push("os: nothing is bound; the scheduler places threads and pages".into());
        }
        let oversubscribed = self.oversubscribed || self.net_kept > 0;
        if self.policy == Policy::Bind && oversubscribed {
            let node = &ctx.nodes[self.bind_node];
            let planned = if manual_threads > 0 { " planned" } else { "" };
            notes.push(format!(
                "bind keeps all {bound_threads}{planned} threads on node {}'s {} cores{exempt}",
                node.os_index,
                node.cores.len()
            ));
        }
        if self.policy == Policy::Bind && ctx.net_threads() > 0 {
            for nic in &ctx.nics {
                if let Some(n) = nic.node.filter(|&n| n != self.bind_node) {
                    notes.push(format!(
                        "bind keeps everything on node {}: traffic of NIC {} (node {}) crosses \
                         the interconnect",
                        ctx.nodes[self.bind_node].os_index, nic.name, ctx.nodes[n].os_index
                    ));
                }
            }
        }
        if oversubscribed {
            if manual_threads == 0 {
                notes.push(format!(
                    "oversubscribed: {bound_threads} threads on {used_cores} cores (up to \
                     {max_per_core} per core); threads share cores round-robin"
                ));
            } else {
                let total = bound_threads + manual_threads;
                notes.push(format!(
                    "oversubscribed: {total} threads, {manual_threads} of them placed by \
                     --place and exempt (they run where --place puts them); the other \
                     {bound_threads} on {used_cores} cores (up to {max_per_core} per core) \
                     share cores round-robin"
                ));
            }
        }
        if self.net_kept > 0 && self.policy != Policy::Bind {
            let mut nodes: Vec<u32> = self
                .kept_channels
                .iter()
                .filter_map(|&c| self.channels[c].numa_node)
                .map(|n| ctx.nodes[n].os_index)
                .collect();
            nodes.sort_unstable();
            nodes.dedup();
            let (node_s, its) = if nodes.len() == 1 {
                ("node", "its")
            } else {
                ("nodes", "their")
            };
            let threads = match self.net_kept {
                1 => "1 net thread finds".to_string(),
                n => format!("{n} net threads find"),
            };
            let with_control = self.kept_channels.iter().all(|&c| {
                let ch = &self.channels[c];
                ch.threads
                    .iter()
                    .any(|t| t.role == Role::Control && t.node.is_some() && t.node == ch.numa_node)
            });
            let control = if with_control {
                " with their control thread"
            } else {
                ""
            };
            notes.push(format!(
                "the job does not fit the machine: {threads} no free core on NIC {node_s} {} and \
                 share {its} cores{control} rather than take cores that the other threads need",
                format_cpulist(&nodes)
            ));
        }
        for &c in self.kept_controls.difference(&self.kept_channels) {
            if let (Some(id), Some(n)) = (new_id.get(&c), self.channels[c].numa_node) {
                notes.push(format!(
                    "the control thread of channel {id} shares a core on node {}: the node has \
                     no free core left and a control thread stays with its channel's net threads",
                    ctx.nodes[n].os_index
                ));
            }
        }
        if ctx.net_threads() > 0 {
            for (i, nic) in ctx.nics.iter().enumerate() {
                if self.nic_total[i] == 0 {
                    notes.push(format!(
                        "NIC {} gets no net thread ({} net threads for {} NICs)",
                        nic.name,
                        ctx.net_threads(),
                        ctx.nics.len()
                    ));
                }
            }
        }
        if matches!(self.policy, Policy::Smts | Policy::Mts)
            && ctx.net_threads() > 0
            && ctx.first_nic_node().is_some()
        {
            for (s, socket) in ctx.sockets.iter().enumerate() {
                // The socket's own channels: those whose buffers are on its nodes.
                let own = || {
                    self.channels
                        .iter()
                        .filter(move |c| c.numa_node.is_some_and(|n| ctx.nodes[n].socket == s))
                };
                let has_nic = socket.nodes.iter().any(|&n| ctx.is_nic_node(n))
                    || own().any(|c| !c.nics.is_empty());
                let has_data = own().any(|c| c.has(|r| r != Role::Control && !r.is_nic_facing()));
                if !has_nic && has_data {
                    notes.push(format!(
                        "{} has no selected NIC: its chunks cross the interconnect once, between \
                         its threads and the net threads on a NIC's node",
                        socket_name(ctx, socket)
                    ));
                }
            }
        }

        // Channels and threads, renumbered.
        let mut next_index = [0u32; ROLES];
        let mut channels = Vec::new();
        for (pos, &c) in order.iter().enumerate() {
            let ch = &mut self.channels[c];
            ch.threads.sort_by_key(|t| (t.role, t.seq));
            let threads = ch
                .threads
                .iter()
                .map(|t| {
                    let index = next_index[slot(t.role)];
                    next_index[slot(t.role)] += 1;
                    ThreadPlan {
                        role: t.role,
                        index,
                        cpus: t.cpus.clone(),
                        manual: t.manual,
                    }
                })
                .collect();
            channels.push(Channel {
                id: u32::try_from(pos).unwrap_or(u32::MAX),
                numa_node: ch.numa_node.map(|n| ctx.nodes[n].os_index),
                nodes: ch.nodes.iter().map(|&n| ctx.nodes[n].os_index).collect(),
                package: ch.package,
                nics: ch.nics.iter().map(|&i| ctx.nics[i].name.clone()).collect(),
                buffer_bytes: parts[pos],
                threads,
            });
        }

        explain.extend(self.role_sentences());
        explain.push(partition_sentence(job, &channels, &weights));

        let plan = Plan {
            policy: if self.bound() {
                self.policy
            } else {
                Policy::Os
            },
            requested_policy: requested,
            chunk_bytes: job.chunk_bytes,
            channels,
            notes,
            explain,
        };
        let stats = Stats {
            shared,
            bound_threads,
            manual_threads,
        };
        (plan, stats)
    }
}

/// Splits `cap` bytes over channels with data-path thread counts `weights`: every
/// channel gets one `chunk`-byte slot per thread, the remaining whole slots go out in
/// proportion to the weights (largest remainder first, then channel order), and the
/// bytes that do not fill a slot go to the last channel with a weight. The parts add up
/// exactly to `cap`. With all weights zero the slots are split evenly.
///
/// The caller guarantees `cap >= chunk * sum(weights)` and `chunk > 0`.
pub(super) fn partition(cap: u64, chunk: u64, weights: &[u64]) -> Vec<u64> {
    if weights.is_empty() {
        return Vec::new();
    }
    let total_slots = cap / chunk;
    let rem_bytes = cap % chunk;
    let sum: u64 = weights.iter().sum();
    let (weights, base): (Vec<u64>, Vec<u64>) = if sum == 0 {
        (vec![1; weights.len()], vec![0; weights.len()])
    } else {
        (weights.to_vec(), weights.to_vec())
    };
    let wsum: u128 = weights.iter().map(|&w| u128::from(w)).sum();
    let base_sum: u64 = base.iter().sum();
    let extra = u128::from(total_slots.saturating_sub(base_sum));
    let mut slots: Vec<u64> = Vec::with_capacity(weights.len());
    let mut fractions: Vec<(u128, usize)> = Vec::with_capacity(weights.len());
    let mut given: u128 = 0;
    for (i, &w) in weights.iter().enumerate() {
        let share = extra * u128::from(w);
        let whole = share / wsum;
        given += whole;
        // `whole <= extra <= total_slots`, which fits in u64.
        slots.push(base[i] + u64::try_from(whole).unwrap_or(u64::MAX));
        fractions.push((share % wsum, i));
    }
    fractions.sort_by_key(|&(f, i)| (std::cmp::Reverse(f), i));
    let leftover = usize::try_from(extra - given).unwrap_or(usize::MAX);
    for &(_, i) in fractions.iter().take(leftover) {
        slots[i] += 1;
    }
    let mut bytes: Vec<u64> = slots.iter().map(|&s| s * chunk).collect();
    let last = weights
        .iter()
        .rposition(|&w| w > 0)
        .unwrap_or(weights.len() - 1);
    bytes[last] += rem_bytes;
    bytes
}
