//! After placement: net threads kept on a full NIC node move to cores left idle, and
//! their channel's control threads follow.

use super::builder::Builder;
use super::slot;
use crate::types::Role;

impl Builder<'_, '_> {
    /// Moves net threads that share their NIC node's cores to cores left idle, nearest
    /// first, one from the most loaded core each time, until either runs out. Then
    /// records the channels whose net threads still share their NIC's node.
    pub(super) fn settle_kept(&mut self) {
        let ctx = self.ctx;
        let core_of = |b: &Self, (ch, i, p): (usize, usize, usize)| {
            let cpus = b.channels[ch].threads[i]
                .cpus
                .as_deref()
                .unwrap_or_default();
            ctx.nodes[p]
                .cores
                .iter()
                .position(|c| c == cpus)
                .unwrap_or(0)
        };
        while !self.kept.is_empty() {
            // The kept thread on the most loaded core (the last one kept on ties).
            let Some(pick) = (0..self.kept.len()).max_by_key(|&j| {
                let (_, _, p) = self.kept[j];
                (self.load[p][core_of(self, self.kept[j])], j)
            }) else {
                break;
            };
            let (ch, i, p) = self.kept[pick];
            let Some((n, k)) = self
                .spill_order(p)
                .into_iter()
                .find_map(|n| self.free_core(n).map(|k| (n, k)))
            else {
                break;
            };
            let old = core_of(self, self.kept[pick]);
            let role = self.channels[ch].threads[i].role;
            self.load[p][old] -= 1;
            self.role_on_node[p][slot(role)] -= 1;
            self.total_on_node[p] -= 1;
            self.load[n][k] += 1;
            self.role_on_node[n][slot(role)] += 1;
            self.total_on_node[n] += 1;
            self.net_nodes.insert(n);
            let thread = &mut self.channels[ch].threads[i];
            thread.cpus = Some(ctx.nodes[n].cores[k].clone());
            thread.node = Some(n);
            let channel = &mut self.channels[ch];
            if let Err(at) = channel.nodes.binary_search(&n) {
                channel.nodes.insert(at, n);
            }
            self.kept.swap_remove(pick);
            self.net_kept -= 1;
            self.net_spilled += 1;
            self.rehome_controls(ch);
        }
        self.kept_channels = self.kept.iter().map(|&(ch, _, _)| ch).collect();
    }

    /// Moves the control threads of channel `ch` that share a core to free cores the
    /// channel has gained (a net thread moved to a new node), nearest its node first.
    pub(super) fn rehome_controls(&mut self, ch: usize) {
        let ctx = self.ctx;
        let Some(home) = self.channels[ch].numa_node else {
            return;
        };
        for i in 0..self.channels[ch].threads.len() {
            let t = &self.channels[ch].threads[i];
            let (Role::Control, false, Some(p), Some(cpus)) = (t.role, t.manual, t.node, &t.cpus)
            else {
                continue;
            };
            let Some(old) = ctx.nodes[p].cores.iter().position(|c| c == cpus) else {
                continue;
            };
            if self.load[p][old] < 2 {
                continue;
            }
            let Some((n, k)) = self
                .chan_order(ch, home)
                .into_iter()
                .find_map(|n| self.free_core(n).map(|k| (n, k)))
            else {
                return;
            };
            self.load[p][old] -= 1;
            self.role_on_node[p][slot(Role::Control)] -= 1;
            self.total_on_node[p] -= 1;
            self.load[n][k] += 1;
            self.role_on_node[n][slot(Role::Control)] += 1;
            self.total_on_node[n] += 1;
            let thread = &mut self.channels[ch].threads[i];
            thread.cpus = Some(ctx.nodes[n].cores[k].clone());
            thread.node = Some(n);
        }
        let still_shares = self.channels[ch].threads.iter().any(|t| {
            t.role == Role::Control
                && t.node.is_some_and(|p| {
                    let cpus = t.cpus.as_deref().unwrap_or_default();
                    ctx.nodes[p]
                        .cores
                        .iter()
                        .position(|c| c == cpus)
                        .is_some_and(|k| self.load[p][k] > 1)
                })
        });
        if !still_shares {
            self.kept_controls.remove(&ch);
        }
    }
}
