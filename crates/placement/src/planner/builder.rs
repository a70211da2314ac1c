//! The plan being built: channels and threads under construction, per-core load, and
//! the primitive moves (take a core, push a thread) the placement steps are made of.

use super::context::Context;
use super::{interleaved, slot, ROLES};
use crate::types::{Plan, Policy, Role};
use std::collections::BTreeSet;

/// Where a thread may go when its preferred node has no free core.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scope {
    /// Anywhere the policy accepts (the nearest node with a free core), joining that
    /// node's channel.
    Spill,
    /// Only inside this channel (control threads stay with their channel).
    Channel(usize),
}

/// A thread being planned.
#[derive(Debug)]
pub(super) struct Tb {
    pub(super) role: Role,
    /// Order of creation within the role (renumbered per channel at the end).
    pub(super) seq: u32,
    pub(super) cpus: Option<Vec<u32>>,
    pub(super) manual: bool,
    /// Usable node of the core it got (bound, non-manual threads only).
    pub(super) node: Option<usize>,
}

/// A channel being planned.
#[derive(Debug)]
pub(super) struct ChanB {
    pub(super) numa_node: Option<usize>,
    pub(super) nodes: Vec<usize>,
    pub(super) package: Option<u32>,
    /// Indexes into [`Context::nics`].
    pub(super) nics: BTreeSet<usize>,
    pub(super) threads: Vec<Tb>,
}

impl ChanB {
    pub(super) fn has(&self, pred: impl Fn(Role) -> bool) -> bool {
        self.threads.iter().any(|t| pred(t.role))
    }
}

/// What `auto` needs to know about a plan.
#[derive(Debug, Clone, Copy)]
pub(super) struct Stats {
    /// Whether two bound, non-manual threads share a core.
    pub(super) shared: bool,
    /// Bound, non-manual threads.
    pub(super) bound_threads: usize,
    /// Threads placed by `--place` (exempt from the core accounting).
    pub(super) manual_threads: usize,
}

/// Which channels get the one control thread each that the plan always has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ControlBasis {
    /// Every channel that drives a NIC (has net threads), placed right after them.
    NicChannels,
    /// No selected NIC, or no net thread: every channel with data-path threads, placed
    /// after those threads.
    DataChannels,
}

pub(super) struct Builder<'c, 'a> {
    pub(super) ctx: &'c Context<'a>,
    pub(super) policy: Policy,
    /// The node `bind` keeps everything on.
    pub(super) bind_node: usize,
    pub(super) channels: Vec<ChanB>,
    /// Threads per core, per usable node (bound, non-manual threads only).
    pub(super) load: Vec<Vec<u32>>,
    pub(super) role_on_node: Vec<[u32; ROLES]>,
    pub(super) total_on_node: Vec<u32>,
    pub(super) nic_role: Vec<[u32; ROLES]>,
    pub(super) nic_total: Vec<u32>,
    pub(super) next_seq: [u32; ROLES],
    /// How many net threads that find their NIC's node full may still take a free core
    /// on another node (see [`build`]).
    pub(super) spill_budget: usize,
    /// The budget this plan started with.
    pub(super) spill_allowed: usize,
    /// Net threads that found their NIC's node full and stayed, sharing its cores,
    /// because the spill budget was spent.
    pub(super) net_kept: usize,
    /// Where each of those is: (channel, position in its threads, node).
    pub(super) kept: Vec<(usize, usize, usize)>,
    /// Net threads that run on another node than their NIC's (spilled).
    pub(super) net_spilled: usize,
    /// Usable nodes that host automatically placed, bound net threads.
    pub(super) net_nodes: BTreeSet<usize>,
    /// Channels whose net threads stayed on their full NIC node (`net_kept`).
    pub(super) kept_channels: BTreeSet<usize>,
    /// Per role: a thread of it had to share a core and kept off the net threads' nodes.
    pub(super) kept_off_net: [bool; ROLES],
    /// Control threads beyond one per channel, placed because the job asks for them.
    pub(super) extra_controls: u32,
    /// Which channels the per-channel control threads went to.
    pub(super) control_basis: ControlBasis,
    /// A thread shared a core because no free core was left where it may go.
    pub(super) oversubscribed: bool,
    /// Channels whose control thread shared a core although other nodes had free cores.
    pub(super) kept_controls: BTreeSet<usize>,
    pub(super) notes: Vec<String>,
}

/// The channels a policy starts with (manual placements may add more): one unbound
/// (`os`), one on `bind_node` (`bind`), one per socket with its buffers on the socket's
/// NIC node or else its first node (`smts`), or one per usable node (`nmts`, `mts`).
fn first_channels(ctx: &Context<'_>, policy: Policy, bind_node: usize) -> Vec<ChanB> {
    let all_nics: BTreeSet<usize> = (0..ctx.nics.len()).collect();
    match policy {
        Policy::Os | Policy::Auto => vec![ChanB {
            numa_node: None,
            nodes: Vec::new(),
            package: None,
            nics: all_nics,
            threads: Vec::new(),
        }],
        Policy::Bind => vec![ChanB {
            numa_node: Some(bind_node),
            nodes: vec![bind_node],
            package: ctx.nodes[bind_node].package,
            nics: all_nics,
            threads: Vec::new(),
        }],
        Policy::Smts => ctx
            .sockets
            .iter()
            .map(|s| {
                let nic_node = ctx
                    .nics
                    .iter()
                    .filter_map(|n| n.node)
                    .find(|n| ctx.nodes[*n].socket == ctx.nodes[s.nodes[0]].socket);
                ChanB {
                    numa_node: Some(nic_node.unwrap_or(s.nodes[0])),
                    nodes: s.nodes.clone(),
                    package: s.package,
                    nics: BTreeSet::new(),
                    threads: Vec::new(),
                }
            })
            .collect(),
        Policy::Nmts | Policy::Mts => (0..ctx.nodes.len())
            .map(|n| ChanB {
                numa_node: Some(n),
                nodes: vec![n],
                package: ctx.nodes[n].package,
                nics: BTreeSet::new(),
                threads: Vec::new(),
            })
            .collect(),
    }
}

/// Plans under a resolved policy (never `auto`).
///
/// Net threads that find their NIC's node full first stay there, sharing its cores, so
/// that every other thread gets the cores it needs elsewhere. Cores that such a plan
/// leaves idle are then handed to those net threads: the plan is redone with that many
/// allowed to spill to the nearest free core, and any net thread still sharing its NIC
/// node's cores then moves to a core left idle (control threads, which stay in their
/// channel, can leave a few). When the whole job fits the machine every spilling net
/// thread gets its own core; when it does not, the NIC's node is shared by net threads
/// (and their control thread) and I/O and compression threads go to the other nodes.
pub(super) fn build(
    ctx: &Context<'_>,
    policy: Policy,
    requested: Policy,
    mut explain: Vec<String>,
) -> (Plan, Stats) {
    let mut b = Builder::run(ctx, policy, 0);
    if policy != Policy::Bind {
        let idle = b.idle_cores();
        if b.net_kept > 0 && idle > 0 {
            b = Builder::run(ctx, policy, idle);
        }
        b.settle_kept();
    }
    explain.push(b.policy_sentence());
    b.finish(requested, explain)
}

impl<'c, 'a> Builder<'c, 'a> {
    /// Places every thread of the job: net threads, then (when channels drive NICs) one
    /// control thread per such channel, I/O, compression, then (otherwise) one control
    /// thread per channel with data-path threads, then any further control threads.
    pub(super) fn run(ctx: &'c Context<'a>, policy: Policy, spill_budget: usize) -> Self {
        let mut b = Builder::new(ctx, policy);
        b.spill_budget = spill_budget;
        b.spill_allowed = spill_budget;
        b.place_net();
        let nic_driven = !ctx.nics.is_empty() && ctx.net_threads() > 0;
        let mut extra_controls = 0;
        if nic_driven {
            b.control_basis = ControlBasis::NicChannels;
            let channels = b.channels_with(Role::is_nic_facing);
            extra_controls = b.place_controls(&channels);
        }
        for role in interleaved(ctx, Role::IoRead, Role::IoWrite) {
            b.place_balanced(role, true);
        }
        for role in interleaved(ctx, Role::Compress, Role::Decompress) {
            b.place_balanced(role, false);
        }
        if !nic_driven {
            b.control_basis = ControlBasis::DataChannels;
            let channels = b.channels_with(|r| r != Role::Control);
            extra_controls = b.place_controls(&channels);
        }
        b.extra_controls = extra_controls;
        b.place_extra_controls(extra_controls);
        b
    }

    /// Free cores left on the usable nodes.
    pub(super) fn idle_cores(&self) -> usize {
        self.load.iter().flatten().filter(|&&l| l == 0).count()
    }

    pub(super) fn new(ctx: &'c Context<'a>, policy: Policy) -> Self {
        let mut notes = Vec::new();
        let bind_node = match ctx.first_nic_node() {
            Some((node, _)) => node,
            None => {
                if policy == Policy::Bind {
                    notes.push(format!(
                        "bind: no selected NIC has a known NUMA node, so everything is kept on \
                         node {}, the first usable node",
                        ctx.nodes[0].os_index
                    ));
                }
                0
            }
        };
        let channels = first_channels(ctx, policy, bind_node);
        Builder {
            ctx,
            policy,
            bind_node,
            channels,
            load: ctx.nodes.iter().map(|n| vec![0; n.cores.len()]).collect(),
            role_on_node: vec![[0; ROLES]; ctx.nodes.len()],
            total_on_node: vec![0; ctx.nodes.len()],
            nic_role: vec![[0; ROLES]; ctx.nics.len()],
            nic_total: vec![0; ctx.nics.len()],
            next_seq: [0; ROLES],
            spill_budget: 0,
            spill_allowed: 0,
            net_kept: 0,
            kept: Vec::new(),
            net_spilled: 0,
            net_nodes: BTreeSet::new(),
            kept_channels: BTreeSet::new(),
            kept_off_net: [false; ROLES],
            extra_controls: 0,
            control_basis: ControlBasis::NicChannels,
            oversubscribed: false,
            kept_controls: BTreeSet::new(),
            notes,
        }
    }

    pub(super) fn bound(&self) -> bool {
        !matches!(self.policy, Policy::Os | Policy::Auto)
    }

    /// The channel of a node for automatically placed threads.
    pub(super) fn channel_of_node(&self, n: usize) -> usize {
        match self.policy {
            Policy::Os | Policy::Auto | Policy::Bind => 0,
            Policy::Smts => self.ctx.nodes[n].socket,
            Policy::Nmts | Policy::Mts => n,
        }
    }

    /// The channel manual placements with memory node `n` go to (created if missing).
    pub(super) fn manual_channel(&mut self, n: usize) -> usize {
        match self.policy {
            Policy::Smts | Policy::Nmts | Policy::Mts => self.channel_of_node(n),
            Policy::Os | Policy::Auto | Policy::Bind => {
                if let Some(c) = self.channels.iter().position(|c| c.numa_node == Some(n)) {
                    return c;
                }
                self.channels.push(ChanB {
                    numa_node: Some(n),
                    nodes: vec![n],
                    package: self.ctx.nodes[n].package,
                    nics: BTreeSet::new(),
                    threads: Vec::new(),
                });
                self.channels.len() - 1
            }
        }
    }

    pub(super) fn push(
        &mut self,
        ch: usize,
        role: Role,
        cpus: Option<Vec<u32>>,
        manual: bool,
        node: Option<usize>,
    ) {
        let seq = self.next_seq[slot(role)];
        self.next_seq[slot(role)] += 1;
        self.channels[ch].threads.push(Tb {
            role,
            seq,
            cpus,
            manual,
            node,
        });
    }

    /// Puts a thread of a manually placed role in its channel. Returns false when the
    /// role is not placed manually.
    pub(super) fn push_manual(&mut self, role: Role, nic: Option<usize>) -> bool {
        let Some(m) = &self.ctx.manual[slot(role)] else {
            return false;
        };
        let cpus = m.cpus.clone();
        let ch = self.manual_channel(m.mem);
        self.push(ch, role, cpus, true, None);
        if let Some(i) = nic {
            self.channels[ch].nics.insert(i);
        }
        true
    }

    /// Counts a thread on core `k` of node `n` and adds it to channel `ch`, whose nodes
    /// then include `n` (a spilled net thread stays in its NIC's channel).
    pub(super) fn take(&mut self, role: Role, n: usize, k: usize, ch: usize, nic: Option<usize>) {
        self.load[n][k] += 1;
        self.role_on_node[n][slot(role)] += 1;
        self.total_on_node[n] += 1;
        if role.is_nic_facing() {
            self.net_nodes.insert(n);
        }
        let cpus = self.ctx.nodes[n].cores[k].clone();
        self.push(ch, role, Some(cpus), false, Some(n));
        let channel = &mut self.channels[ch];
        if let Err(at) = channel.nodes.binary_search(&n) {
            channel.nodes.insert(at, n);
        }
        if let Some(i) = nic {
            channel.nics.insert(i);
        }
    }

    /// The least-loaded core of node `n` (the first on ties).
    pub(super) fn least_loaded_core(&self, n: usize) -> usize {
        let load = &self.load[n];
        (0..load.len()).min_by_key(|&k| (load[k], k)).unwrap_or(0)
    }

    /// Whether a data-path thread that must share a core keeps off node `n`: `n` hosts
    /// net threads and another usable node hosts none (the NIC's node is shared by net
    /// threads before any I/O or compression thread is put there).
    pub(super) fn keeps_off(&self, role: Role, n: usize) -> bool {
        role != Role::Control
            && !role.is_nic_facing()
            && self.net_nodes.contains(&n)
            && self.net_nodes.len() < self.ctx.nodes.len()
    }

    pub(super) fn free_core(&self, n: usize) -> Option<usize> {
        self.load[n].iter().position(|&l| l == 0)
    }

    /// Nodes a spilling thread may go to, best first.
    pub(super) fn spill_order(&self, p: usize) -> Vec<usize> {
        let ctx = self.ctx;
        let mut order: Vec<usize> = match self.policy {
            Policy::Bind => vec![self.bind_node],
            _ => (0..ctx.nodes.len()).collect(),
        };
        let same_socket = |n: usize| ctx.nodes[n].socket == ctx.nodes[p].socket;
        match self.policy {
            // smts stays in the socket while it can.
            Policy::Smts => order.sort_by_key(|&n| (!same_socket(n), n != p, ctx.dist(p, n), n)),
            _ => order.sort_by_key(|&n| (n != p, ctx.dist(p, n), !same_socket(n), n)),
        }
        order
    }

    /// A channel's nodes, nearest to `p` first.
    pub(super) fn chan_order(&self, c: usize, p: usize) -> Vec<usize> {
        let mut order = self.channels[c].nodes.clone();
        order.sort_by_key(|&n| (n != p, self.ctx.dist(p, n), n));
        order
    }

    pub(super) fn any_free_acceptable(&self) -> bool {
        match self.policy {
            Policy::Bind => self.free_core(self.bind_node).is_some(),
            _ => (0..self.ctx.nodes.len()).any(|n| self.free_core(n).is_some()),
        }
    }
}
