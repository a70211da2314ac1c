//! Placing one thread: a free core on its preferred node, else the nearest acceptable
//! one, else the least-loaded core of its channel; the balance that picks the node.

use super::builder::{Builder, Scope};
use super::{interleaved, slot};
use crate::types::{Policy, Role};

impl Builder<'_, '_> {
    /// Places a bound thread that prefers node `p`: a free core on `p`, else on the
    /// nearest acceptable node, else the least-loaded core of its channel.
    pub(super) fn place(&mut self, role: Role, p: usize, scope: Scope, nic: Option<usize>) {
        if let Some(k) = self.free_core(p) {
            let ch = match scope {
                Scope::Spill => self.channel_of_node(p),
                Scope::Channel(c) => c,
            };
            self.take(role, p, k, ch, nic);
            return;
        }
        let order = match scope {
            Scope::Spill => self.spill_order(p),
            Scope::Channel(c) => self.chan_order(c, p),
        };
        for n in order {
            if let Some(k) = self.free_core(n) {
                let ch = match scope {
                    Scope::Spill => self.channel_of_node(n),
                    Scope::Channel(c) => c,
                };
                self.take(role, n, k, ch, nic);
                return;
            }
        }
        let ch = match scope {
            Scope::Spill => self.channel_of_node(p),
            Scope::Channel(c) => c,
        };
        let mut nodes = self.chan_order(ch, p);
        if nodes.iter().any(|&n| !self.keeps_off(role, n)) {
            nodes.retain(|&n| !self.keeps_off(role, n));
        }
        if (0..self.ctx.nodes.len()).any(|n| self.keeps_off(role, n)) {
            self.kept_off_net[slot(role)] = true;
        }
        let mut best: Option<(u32, usize, usize)> = None;
        for n in nodes {
            for (k, &l) in self.load[n].iter().enumerate() {
                if best.is_none_or(|(bl, _, _)| l < bl) {
                    best = Some((l, n, k));
                }
            }
        }
        match scope {
            Scope::Channel(c) if self.any_free_acceptable() => {
                self.kept_controls.insert(c);
            }
            _ => self.oversubscribed = true,
        }
        if let Some((_, n, k)) = best {
            self.take(role, n, k, ch, nic);
        }
    }

    /// The NIC the next thread of `role` drives: round-robin over the selected NICs,
    /// staggered between net-send and net-recv.
    pub(super) fn pick_nic(&mut self, role: Role) -> Option<usize> {
        let i = (0..self.ctx.nics.len())
            .min_by_key(|&i| (self.nic_role[i][slot(role)], self.nic_total[i], i))?;
        self.nic_role[i][slot(role)] += 1;
        self.nic_total[i] += 1;
        Some(i)
    }

    /// Preference rank of a node for I/O threads: storage nodes first, in job order.
    pub(super) fn storage_rank(&self, n: usize, storage: bool) -> usize {
        if !storage {
            return 0;
        }
        let s = &self.ctx.storage;
        s.iter().position(|(node, _)| *node == n).unwrap_or(s.len())
    }

    /// The node the next balanced thread of `role` prefers: fewest threads of its role,
    /// then (I/O) nearest the storage, then fewest threads in all. For `smts` and `mts`
    /// the socket is chosen first (seed 000's LADS): fewest threads of the role, nearest
    /// the storage, fewest threads of its group (I/O, compression or net), then
    /// round-robin starting with the first NIC's socket, so that the NIC's socket takes
    /// its share whatever its net threads already hold; then the node within it.
    pub(super) fn balanced(&self, role: Role, storage: bool) -> usize {
        let ctx = self.ctx;
        let r = slot(role);
        if self.policy == Policy::Bind {
            return self.bind_node;
        }
        // Only nodes with a free core compete while there are any: a full node would
        // only send the thread on to a neighbour that the balance did not choose. With
        // none left, data-path threads keep off the nodes of the net threads.
        let any_free = (0..ctx.nodes.len()).any(|n| self.free_core(n).is_some());
        let open = |n: &usize| {
            if any_free {
                self.free_core(*n).is_some()
            } else {
                !self.keeps_off(role, *n)
            }
        };
        let group: &[Role] = match role {
            Role::IoRead | Role::IoWrite => &[Role::IoRead, Role::IoWrite],
            Role::Compress | Role::Decompress => &[Role::Compress, Role::Decompress],
            Role::NetSend | Role::NetRecv => &[Role::NetSend, Role::NetRecv],
            Role::Control => &[Role::Control],
        };
        let in_group =
            |n: usize| -> u32 { group.iter().map(|&g| self.role_on_node[n][slot(g)]).sum() };
        let sockets = ctx.sockets.len();
        let first_socket = ctx.first_nic_node().map_or(0, |(n, _)| ctx.nodes[n].socket);
        let node_key = |n: &usize| {
            (
                self.role_on_node[*n][r],
                self.storage_rank(*n, storage),
                self.total_on_node[*n],
                *n,
            )
        };
        let candidates: Vec<usize> = match self.policy {
            Policy::Smts | Policy::Mts => {
                let socket_key = |s: &usize| {
                    let nodes = &ctx.sockets[*s].nodes;
                    (
                        nodes.iter().map(|&n| self.role_on_node[n][r]).sum::<u32>(),
                        nodes.iter().map(|&n| self.storage_rank(n, storage)).min(),
                        nodes.iter().map(|&n| in_group(n)).sum::<u32>(),
                        (*s + sockets - first_socket) % sockets,
                    )
                };
                let socket = (0..ctx.sockets.len())
                    .filter(|s| ctx.sockets[*s].nodes.iter().any(open))
                    .min_by_key(socket_key)
                    .unwrap_or(0);
                ctx.sockets[socket].nodes.clone()
            }
            _ => (0..ctx.nodes.len()).collect(),
        };
        candidates
            .into_iter()
            .filter(open)
            .min_by_key(node_key)
            .unwrap_or(0)
    }

    /// Net threads first: each on its NIC's node while it has a free core (pass 1),
    /// then spilled to the nearest node with one (pass 2); threads of NICs without
    /// locality, or with no NIC at all, are balanced like the others (pass 3).
    pub(super) fn place_net(&mut self) {
        let mut pending = Vec::new();
        for role in interleaved(self.ctx, Role::NetSend, Role::NetRecv) {
            let nic = self.pick_nic(role);
            if self.push_manual(role, nic) {
                continue;
            }
            if !self.bound() {
                self.push(0, role, None, false, None);
                continue;
            }
            let pref = match self.policy {
                Policy::Bind => Some(self.bind_node),
                _ => nic.and_then(|i| self.ctx.nics[i].node),
            };
            pending.push((role, nic, pref));
        }
        let mut spill = Vec::new();
        for (role, nic, pref) in pending {
            match pref.and_then(|p| self.free_core(p).map(|k| (p, k))) {
                Some((p, k)) => {
                    let ch = self.channel_of_node(p);
                    self.take(role, p, k, ch, nic);
                }
                None => spill.push((role, nic, pref)),
            }
        }
        for &(role, nic, pref) in &spill {
            if let Some(p) = pref {
                self.place_nic_facing(role, p, nic);
            }
        }
        for &(role, nic, pref) in &spill {
            if pref.is_none() {
                let p = self.balanced(role, false);
                self.place(role, p, Scope::Spill, nic);
            }
        }
    }

    /// A net thread whose NIC's node `p` has no free core left. It stays in `p`'s
    /// channel (whose buffers are on `p`, next to the NIC). While the spill budget lasts
    /// it runs on a free core of the nearest node that has one (the channel's nodes
    /// then include that node); otherwise it shares the least-loaded core of `p`.
    pub(super) fn place_nic_facing(&mut self, role: Role, p: usize, nic: Option<usize>) {
        let ch = self.channel_of_node(p);
        if self.spill_budget > 0 {
            let free = self
                .spill_order(p)
                .into_iter()
                .find_map(|n| self.free_core(n).map(|k| (n, k)));
            if let Some((n, k)) = free {
                self.spill_budget -= 1;
                self.net_spilled += 1;
                self.take(role, n, k, ch, nic);
                return;
            }
        }
        self.net_kept += 1;
        self.kept.push((ch, self.channels[ch].threads.len(), p));
        let k = self.least_loaded_core(p);
        self.take(role, p, k, ch, nic);
    }

    /// A data-path thread: manual, unbound (`os`), or on the balanced node's free core.
    pub(super) fn place_balanced(&mut self, role: Role, storage: bool) {
        if self.push_manual(role, None) {
            return;
        }
        if !self.bound() {
            self.push(0, role, None, false, None);
            return;
        }
        let p = self.balanced(role, storage);
        self.place(role, p, Scope::Spill, None);
    }
}
