//! The last step: empty channels dropped, channels and threads renumbered, the buffer
//! partitioned, the notes and sentences written.

use super::builder::{Builder, Stats};
use super::explain::partition_sentence;
use super::{slot, ROLES};
use crate::types::{Channel, Plan, Policy, Role, ThreadPlan};
use std::collections::BTreeMap;

/// How the bound threads share cores, for the notes and for `auto`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sharing {
    /// Bound, non-manual threads.
    pub(super) bound_threads: usize,
    /// Cores that run at least one of them.
    pub(super) used_cores: usize,
    /// The most of them on one core.
    pub(super) max_per_core: u32,
    /// Threads placed by `--place` (exempt from the core accounting).
    pub(super) manual_threads: usize,
}

impl Builder<'_, '_> {
    /// Drops empty channels, orders them, partitions the buffer and writes the plan.
    pub(super) fn finish(mut self, requested: Policy, mut explain: Vec<String>) -> (Plan, Stats) {
        let job = self.ctx.job;
        let sharing = self.sharing();
        let order = self.kept_channel_order();
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
        let notes = self.notes(&sharing, &new_id);
        let channels = self.renumbered_channels(&order, &parts);
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
            shared: sharing.max_per_core > 1,
            bound_threads: sharing.bound_threads,
            manual_threads: sharing.manual_threads,
        };
        (plan, stats)
    }

    /// Core sharing, for notes and for auto.
    fn sharing(&self) -> Sharing {
        Sharing {
            bound_threads: self.load.iter().flatten().map(|&l| l as usize).sum(),
            used_cores: self.load.iter().flatten().filter(|&&l| l > 0).count(),
            max_per_core: self.load.iter().flatten().copied().max().unwrap_or(0),
            manual_threads: self
                .channels
                .iter()
                .flat_map(|c| c.threads.iter())
                .filter(|t| t.manual)
                .count(),
        }
    }

    /// The channels the plan keeps, in channel order: those with threads, or the first
    /// one alone when none has any.
    fn kept_channel_order(&self) -> Vec<usize> {
        let mut order = self.channel_order();
        let all_empty = order.iter().all(|&c| self.channels[c].threads.is_empty());
        if !all_empty {
            order.retain(|&c| !self.channels[c].threads.is_empty());
        } else {
            order.truncate(1);
        }
        order
    }

    /// The channels of `order`, numbered in that order, with their threads sorted by
    /// role and numbered per role across the plan; channel `order[i]` gets `parts[i]`
    /// bytes of buffer.
    fn renumbered_channels(&mut self, order: &[usize], parts: &[u64]) -> Vec<Channel> {
        let ctx = self.ctx;
        let mut next_index = [0u32; ROLES];
        let mut channels = Vec::with_capacity(order.len());
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
        channels
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
