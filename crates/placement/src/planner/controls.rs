//! Control threads: one per channel that drives a NIC (or has data-path threads), then
//! any further ones the job asks for.

use super::builder::{Builder, Scope};
use super::slot;
use crate::types::Role;

impl Builder<'_, '_> {
    /// Channels in node order (the unbound channel first).
    pub(super) fn channel_order(&self) -> Vec<usize> {
        let ctx = self.ctx;
        let mut order: Vec<usize> = (0..self.channels.len()).collect();
        order.sort_by_key(|&c| {
            let ch = &self.channels[c];
            (
                ch.nodes.first().map(|&n| ctx.nodes[n].os_index),
                ch.numa_node.map(|n| ctx.nodes[n].os_index),
            )
        });
        order
    }

    /// Channels (in channel order) with a thread whose role satisfies `pred`.
    pub(super) fn channels_with(&self, pred: impl Fn(Role) -> bool + Copy) -> Vec<usize> {
        self.channel_order()
            .into_iter()
            .filter(|&c| self.channels[c].has(pred))
            .collect()
    }

    /// One control thread in each of `channels`, on a core of that channel (next to
    /// its net threads, which were placed first). Returns how many more the job asks
    /// for (placed last).
    pub(super) fn place_controls(&mut self, channels: &[usize]) -> u32 {
        let wanted = self.ctx.count(Role::Control).max(1);
        let per_channel = u32::try_from(channels.len()).unwrap_or(u32::MAX);
        let count = wanted.max(per_channel);
        if self.ctx.manual[slot(Role::Control)].is_some() {
            for _ in 0..count {
                self.push_manual(Role::Control, None);
            }
            return 0;
        }
        for &c in channels {
            self.place_control(c);
        }
        count - per_channel
    }

    pub(super) fn place_control(&mut self, c: usize) {
        if !self.bound() {
            self.push(c, Role::Control, None, false, None);
            return;
        }
        let ch = &self.channels[c];
        let p = ch.numa_node.or(ch.nodes.first().copied()).unwrap_or(0);
        self.place(Role::Control, p, Scope::Channel(c), None);
    }

    /// Control threads beyond one per channel: first to channels with data-path
    /// threads but no control thread, then round-robin over the channels with threads.
    pub(super) fn place_extra_controls(&mut self, extra: u32) {
        if extra == 0 {
            return;
        }
        let order = self.channel_order();
        let is_data = |r: Role| r != Role::Control;
        let first: Vec<usize> = order
            .iter()
            .copied()
            .filter(|&c| {
                self.channels[c].has(is_data) && !self.channels[c].has(|r| r == Role::Control)
            })
            .collect();
        let mut cycle: Vec<usize> = order
            .iter()
            .copied()
            .filter(|&c| !self.channels[c].threads.is_empty())
            .collect();
        if cycle.is_empty() {
            let nic_channel = match self.ctx.first_nic_node() {
                Some((n, _)) if self.bound() => self.channel_of_node(n),
                _ => order.first().copied().unwrap_or(0),
            };
            cycle.push(nic_channel);
        }
        for i in 0..extra as usize {
            let c = match first.get(i) {
                Some(&c) => c,
                None => cycle[(i - first.len()) % cycle.len()],
            };
            self.place_control(c);
        }
    }
}
