//! The plan's notes: what the user should know about it (reserved CPUs, oversubscription,
//! net threads kept on a full NIC node, NICs without threads, sockets without a NIC).

use super::builder::Builder;
use super::explain::socket_name;
use super::finish::Sharing;
use crate::cpulist::format_cpulist;
use crate::types::{Policy, Role};
use std::collections::BTreeMap;

impl Builder<'_, '_> {
    /// Every note, in the order the plan lists them: the validation's, the builder's, then
    /// those about the finished placement. `new_id` maps a builder channel to its id in
    /// the plan.
    pub(super) fn notes(
        &mut self,
        sharing: &Sharing,
        new_id: &BTreeMap<usize, u32>,
    ) -> Vec<String> {
        let mut notes = self.ctx.notes.clone();
        notes.append(&mut self.notes);
        self.reserved_notes(&mut notes);
        let oversubscribed = self.oversubscribed || self.net_kept > 0;
        self.bind_notes(sharing, oversubscribed, &mut notes);
        if oversubscribed {
            notes.push(oversubscribed_note(sharing));
        }
        if self.net_kept > 0 && self.policy != Policy::Bind {
            notes.push(self.kept_net_note());
        }
        self.kept_control_notes(new_id, &mut notes);
        self.idle_nic_notes(&mut notes);
        self.nicless_socket_notes(&mut notes);
        notes
    }

    /// Reserved CPUs, and that `os` binds nothing.
    fn reserved_notes(&self, notes: &mut Vec<String>) {
        let ctx = self.ctx;
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
    }

    /// What `bind` costs: an oversubscribed node, NIC traffic across the interconnect.
    fn bind_notes(&self, sharing: &Sharing, oversubscribed: bool, notes: &mut Vec<String>) {
        let ctx = self.ctx;
        if self.policy != Policy::Bind {
            return;
        }
        if oversubscribed {
            let node = &ctx.nodes[self.bind_node];
            let planned = if sharing.manual_threads > 0 {
                " planned"
            } else {
                ""
            };
            notes.push(format!(
                "bind keeps all {}{planned} threads on node {}'s {} cores{}",
                sharing.bound_threads,
                node.os_index,
                node.cores.len(),
                exempt(sharing.manual_threads)
            ));
        }
        if ctx.net_threads() > 0 {
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
    }

    /// Net threads that found no free core on their NIC's node and share its cores.
    fn kept_net_note(&self) -> String {
        let ctx = self.ctx;
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
        format!(
            "the job does not fit the machine: {threads} no free core on NIC {node_s} {} and \
             share {its} cores{control} rather than take cores that the other threads need",
            format_cpulist(&nodes)
        )
    }

    /// Control threads that share a core to stay with their channel's net threads.
    fn kept_control_notes(&self, new_id: &BTreeMap<usize, u32>, notes: &mut Vec<String>) {
        for &c in self.kept_controls.difference(&self.kept_channels) {
            if let (Some(id), Some(n)) = (new_id.get(&c), self.channels[c].numa_node) {
                notes.push(format!(
                    "the control thread of channel {id} shares a core on node {}: the node has \
                     no free core left and a control thread stays with its channel's net threads",
                    self.ctx.nodes[n].os_index
                ));
            }
        }
    }

    /// Selected NICs that drive no net thread.
    fn idle_nic_notes(&self, notes: &mut Vec<String>) {
        let ctx = self.ctx;
        if ctx.net_threads() == 0 {
            return;
        }
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

    /// Sockets (`smts`, `mts`) whose data-path threads have no NIC of their own.
    fn nicless_socket_notes(&self, notes: &mut Vec<String>) {
        let ctx = self.ctx;
        if !matches!(self.policy, Policy::Smts | Policy::Mts)
            || ctx.net_threads() == 0
            || ctx.first_nic_node().is_none()
        {
            return;
        }
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
}

/// That bound threads share cores, and how many.
fn oversubscribed_note(sharing: &Sharing) -> String {
    let Sharing {
        bound_threads,
        used_cores,
        max_per_core,
        manual_threads,
    } = *sharing;
    if manual_threads == 0 {
        format!(
            "oversubscribed: {bound_threads} threads on {used_cores} cores (up to \
             {max_per_core} per core); threads share cores round-robin"
        )
    } else {
        let total = bound_threads + manual_threads;
        format!(
            "oversubscribed: {total} threads, {manual_threads} of them placed by \
             --place and exempt (they run where --place puts them); the other \
             {bound_threads} on {used_cores} cores (up to {max_per_core} per core) \
             share cores round-robin"
        )
    }
}

/// ` (the N threads placed by --place are exempt: ...)`, or nothing without any.
fn exempt(manual_threads: usize) -> String {
    match manual_threads {
        0 => String::new(),
        1 => {
            " (the 1 thread placed by --place is exempt: it runs where --place puts it)".to_string()
        }
        m => format!(
            " (the {m} threads placed by --place are exempt: they run where --place puts \
             them)"
        ),
    }
}
