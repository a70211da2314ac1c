//! The planner: `plan(&Machine, &Job, Policy) -> Plan`, pure and deterministic.
//!
//! # How a plan is made
//!
//! 1. **Validate** the job against the machine ([`Context::new`]): chunk size, NIC and
//!    block device names, reserved CPUs, manual placements, the thread limit and the
//!    buffer cap. Every failure is a [`PlanError`]; nothing panics.
//! 2. **Usable nodes** are the nodes with at least one usable CPU (allowed and not
//!    reserved) and some memory. No channel is ever placed anywhere else. Each usable
//!    node's cores are listed with their usable PUs; a bound thread gets one whole core.
//! 3. **Channels** are made per policy: one unbound (`os`), one on the NIC's node
//!    (`bind`), one per socket (`smts`) or one per node (`nmts`, `mts`).
//! 4. **Threads** are placed in this order, each on a free core when one exists in an
//!    acceptable domain:
//!    net threads (first on their NIC's node; see [`build`] for those that find it
//!    full), one control thread per channel that drives a NIC (kept in that channel),
//!    I/O threads (balanced, starting at the storage device's node; for `smts` and
//!    `mts` round-robin over the sockets starting with the NIC's socket, then over the
//!    nodes of each socket), compression threads (balanced), then, when no channel
//!    drives a NIC (no selected NIC, or no net thread), one control thread per channel
//!    with data-path threads, then any further control threads the job asks for. Only
//!    when no free core is left does a thread share the least-loaded core of its
//!    channel; I/O and compression threads then keep off the nodes of the net threads
//!    while another node exists.
//!
//!    A net thread that finds its NIC's node full stays in that node's channel (its
//!    buffers stay next to the NIC, and a channel only lists NICs of its own nodes). If
//!    the whole job fits the machine it runs on the nearest free core, whose node joins
//!    the channel's `nodes`; if it does not fit, the net threads (and their control
//!    thread) share the NIC node's cores and leave the other cores to the other threads.
//! 5. **Buffers**: the cap is split over the channels in proportion to their data-path
//!    threads, in whole chunk-sized slots; the partitions add up exactly to the cap.
//!
//! Manual placements (`--place`) put every thread of a role in the channel of the
//! named memory node, bound to the union of the exec nodes' usable PUs (or unbound);
//! they take no core from the automatic placement.

use crate::cpulist::format_cpulist;
use crate::types::{Channel, ExecDomain, Job, Plan, PlanError, Policy, Role, ThreadPlan};
use sluice_topology::Machine;
use std::collections::{BTreeMap, BTreeSet};

/// Chunk sizes must be a positive multiple of this (the page size), so that every
/// slot of a buffer partition starts on a page boundary and can be bound on its own.
pub const PAGE_BYTES: u64 = 4096;

/// Most threads one plan may hold, all roles together. Far above any machine's core
/// count (oversubscription beyond it helps nobody) and small enough that planning
/// stays instant.
pub const THREADS_MAX: u64 = 4096;

const ROLES: usize = Role::ALL.len();

/// Index of a role in per-role arrays (the order of [`Role::ALL`]).
fn slot(role: Role) -> usize {
    role as usize
}

/// Makes a plan for `job` on `machine` under `policy`.
///
/// Pure and deterministic: the same inputs give the same plan, and nothing is read
/// from or done to the running system. See the module docs for the steps and the
/// crate docs for what each policy does.
///
/// # Errors
///
/// A [`PlanError`] when the job cannot be planned on this machine: a chunk size that is
/// not a positive multiple of 4096 ([`PlanError::BadChunkSize`]), an unknown NIC or
/// block device, a reserved CPU that is not allowed, reservations that leave no CPU
/// ([`PlanError::NoCpuLeft`]), no node with both usable CPUs and memory
/// ([`PlanError::NoUsableNode`]), more than [`THREADS_MAX`] threads, a manual placement
/// on a node that is missing or lacks CPUs or memory, or a buffer cap smaller than one
/// chunk per data-path thread ([`PlanError::BufferTooSmall`]).
pub fn plan(machine: &Machine, job: &Job, policy: Policy) -> Result<Plan, PlanError> {
    let ctx = Context::new(machine, job)?;
    Ok(match policy {
        Policy::Auto => auto(&ctx),
        p => build(&ctx, p, p, Vec::new()).0,
    })
}

/// Resolves `auto` (seed 000: NUMA binding wins at low thread counts, MTS as the count
/// grows; with a single node there is nothing to bind against).
fn auto(ctx: &Context<'_>) -> Plan {
    if ctx.nodes.len() == 1 {
        let why = format!(
            "auto chose os: node {} is the only usable NUMA node, so there is no remote memory \
             to avoid, and leaving the scheduler free balances the threads best.",
            ctx.nodes[0].os_index
        );
        return build(ctx, Policy::Os, Policy::Auto, vec![why]).0;
    }
    let nic_nodes: BTreeSet<u32> = ctx
        .nics
        .iter()
        .filter_map(|n| n.node)
        .map(|n| ctx.nodes[n].os_index)
        .collect();
    let why = match ctx.first_nic_node() {
        Some(_) if nic_nodes.len() > 1 => {
            let list: Vec<u32> = nic_nodes.into_iter().collect();
            format!(
                "auto chose mts: the selected NICs sit on nodes {}, and binding everything to one \
                 of them would send the others' traffic across the interconnect; MTS gives each \
                 NIC node its own channel (seed 000).",
                format_cpulist(&list)
            )
        }
        Some((x, nic)) => {
            let (bind_plan, stats) = build(ctx, Policy::Bind, Policy::Auto, Vec::new());
            let node = &ctx.nodes[x];
            let exempt = match stats.manual_threads {
                0 => String::new(),
                m => format!(" (not counting the {m} placed by --place, which are exempt)"),
            };
            if !stats.shared {
                let why = format!(
                    "auto chose bind: the {} threads{exempt} fit on the {} free cores of node {}, \
                     where NIC {} is attached; seed 000 found binding everything to the NIC's node \
                     best at low thread counts.",
                    stats.bound_threads,
                    node.cores.len(),
                    node.os_index,
                    ctx.nics[nic].name
                );
                let mut plan = bind_plan;
                plan.explain.insert(0, why);
                return plan;
            }
            format!(
                "auto chose mts: the {} threads{exempt} do not fit on the {} free cores of node {}, \
                 where NIC {} is attached; seed 000 found MTS ahead of binding as the thread count \
                 grows.",
                stats.bound_threads,
                node.cores.len(),
                node.os_index,
                ctx.nics[nic].name
            )
        }
        None => format!(
            "auto chose mts: the machine has {} usable NUMA nodes and no selected NIC with a known \
             node to bind to, so channels are spread over every node (seed 000's MTS).",
            ctx.nodes.len()
        ),
    };
    build(ctx, Policy::Mts, Policy::Auto, vec![why]).0
}

// ---------------------------------------------------------------------------------------
// Validation and the machine as the planner sees it.
// ---------------------------------------------------------------------------------------

/// A usable NUMA node: at least one usable CPU and some memory.
#[derive(Debug)]
struct UNode {
    os_index: u32,
    package: Option<u32>,
    /// Index into [`Context::sockets`].
    socket: usize,
    /// Each core's usable PUs (never empty). A bound thread gets one whole core.
    cores: Vec<Vec<u32>>,
}

/// The usable nodes of one package (or one package-less node).
#[derive(Debug)]
struct Socket {
    package: Option<u32>,
    /// Indexes into [`Context::nodes`], in node order.
    nodes: Vec<usize>,
}

/// A NIC the job uses.
#[derive(Debug)]
struct SelNic {
    name: String,
    /// The usable node its threads belong on: its own node, or the nearest usable node
    /// when its node has no usable CPU or memory. `None` when its locality is unknown.
    node: Option<usize>,
}

/// A resolved manual placement.
#[derive(Debug)]
struct Manual {
    /// Index into [`Context::nodes`] of the memory node.
    mem: usize,
    /// Union of the exec nodes' usable PUs, or `None` for `exec:os`.
    cpus: Option<Vec<u32>>,
}

/// The validated inputs.
struct Context<'a> {
    machine: &'a Machine,
    job: &'a Job,
    /// Usable nodes in machine (OS index) order.
    nodes: Vec<UNode>,
    /// Distances between usable nodes, by index into `nodes` (looked up once: the
    /// machine's own lookup is linear in the node count).
    distances: Vec<Vec<u32>>,
    sockets: Vec<Socket>,
    /// Selected NICs, in selection order.
    nics: Vec<SelNic>,
    /// Usable nodes of the job's storage devices (deduplicated, in job order), with the
    /// first device name seen on each.
    storage: Vec<(usize, String)>,
    manual: [Option<Manual>; ROLES],
    counts: [u32; ROLES],
    reserved: Vec<u32>,
    /// Notes found while validating (NIC and device locality, duplicate placements).
    notes: Vec<String>,
}

fn names_or(names: Vec<&str>, none: &str) -> String {
    if names.is_empty() {
        none.to_string()
    } else {
        names.join(", ")
    }
}

fn list_or_none(cpus: &[u32]) -> String {
    if cpus.is_empty() {
        "none".to_string()
    } else {
        format_cpulist(cpus)
    }
}

impl<'a> Context<'a> {
    /// Validates `job` against `machine` (in the order the errors are documented on
    /// [`plan`]) and derives what the placement needs.
    fn new(machine: &'a Machine, job: &'a Job) -> Result<Self, PlanError> {
        if job.chunk_bytes == 0 || job.chunk_bytes % PAGE_BYTES != 0 {
            return Err(PlanError::BadChunkSize {
                chunk_bytes: job.chunk_bytes,
            });
        }
        for name in &job.nics {
            if machine.nic(name).is_none() {
                let names = machine.nics.iter().map(|n| n.name.as_str()).collect();
                return Err(PlanError::UnknownNic {
                    name: name.clone(),
                    available: names_or(names, "no NICs"),
                });
            }
        }
        for name in &job.storage {
            if machine.block_device(name).is_none() {
                let names = machine
                    .block_devices
                    .iter()
                    .map(|b| b.name.as_str())
                    .collect();
                return Err(PlanError::UnknownBlockDevice {
                    name: name.clone(),
                    available: names_or(names, "no block devices"),
                });
            }
        }
        let allowed: BTreeSet<u32> = machine.allowed_cpus.iter().copied().collect();
        let allowed_list: Vec<u32> = allowed.iter().copied().collect();
        for &cpu in &job.reserved_cpus {
            if !allowed.contains(&cpu) {
                return Err(PlanError::UnknownReservedCpu {
                    cpu,
                    allowed: list_or_none(&allowed_list),
                });
            }
        }
        let reserved: BTreeSet<u32> = job.reserved_cpus.iter().copied().collect();
        let usable: BTreeSet<u32> = allowed.difference(&reserved).copied().collect();
        let reserved: Vec<u32> = reserved.into_iter().collect();
        if usable.is_empty() {
            return Err(PlanError::NoCpuLeft {
                reserved: list_or_none(&reserved),
                allowed: list_or_none(&allowed_list),
            });
        }

        let mut nodes = Vec::new();
        let mut sockets: Vec<Socket> = Vec::new();
        for node in &machine.nodes {
            let cpus = usable_cpus_of(machine, node.os_index, &usable);
            if cpus.is_empty() || node.memory_bytes == 0 {
                continue;
            }
            let mut covered = BTreeSet::new();
            let mut cores = Vec::new();
            for core in &node.cores {
                let pus: Vec<u32> = core
                    .pus
                    .iter()
                    .copied()
                    .filter(|p| cpus.contains(p) && !covered.contains(p))
                    .collect();
                if !pus.is_empty() {
                    covered.extend(pus.iter().copied());
                    cores.push(pus);
                }
            }
            // PUs the source lists without a core still run threads: one "core" each.
            cores.extend(
                cpus.iter()
                    .filter(|p| !covered.contains(p))
                    .map(|&p| vec![p]),
            );
            let idx = nodes.len();
            let socket = match node.package {
                Some(p) => sockets.iter().position(|s| s.package == Some(p)),
                None => None,
            };
            let socket = match socket {
                Some(s) => {
                    sockets[s].nodes.push(idx);
                    s
                }
                None => {
                    sockets.push(Socket {
                        package: node.package,
                        nodes: vec![idx],
                    });
                    sockets.len() - 1
                }
            };
            nodes.push(UNode {
                os_index: node.os_index,
                package: node.package,
                socket,
                cores,
            });
        }
        if nodes.is_empty() {
            return Err(PlanError::NoUsableNode);
        }

        let mut counts = [0u32; ROLES];
        for role in Role::ALL {
            counts[slot(role)] = job.count(role);
        }
        let asked: u64 = counts.iter().map(|&c| u64::from(c)).sum();
        if asked > THREADS_MAX {
            return Err(PlanError::TooManyThreads {
                threads: asked,
                max: THREADS_MAX,
            });
        }

        let mut notes = Vec::new();
        let mut manual: [Option<Manual>; ROLES] = std::array::from_fn(|_| None);
        let node_names: Vec<u32> = machine.nodes.iter().map(|n| n.os_index).collect();
        let node_index = |os: u32| nodes.iter().position(|n| n.os_index == os);
        for p in &job.placements {
            let bad = |node: u32, problem: String| PlanError::BadPlacementNode {
                role: p.role,
                node,
                problem,
            };
            let check = |node: u32, need_memory: bool| -> Result<(), PlanError> {
                let Some(n) = machine.node(node) else {
                    return Err(bad(
                        node,
                        format!(
                            "does not exist: expected one of the machine's nodes {}",
                            list_or_none(&node_names)
                        ),
                    ));
                };
                if need_memory && n.memory_bytes == 0 {
                    return Err(bad(
                        node,
                        "has no memory: expected a node with memory for the buffers".into(),
                    ));
                }
                if usable_cpus_of(machine, node, &usable).is_empty() {
                    return Err(bad(
                        node,
                        "has no usable CPU (all reserved or outside the allowed cpuset): \
                         expected a node with CPUs to run on"
                            .into(),
                    ));
                }
                Ok(())
            };
            check(p.mem_node, true)?;
            let cpus = match &p.exec {
                ExecDomain::Os => None,
                ExecDomain::Nodes(list) if list.is_empty() => {
                    return Err(bad(
                        p.mem_node,
                        "is given with an empty exec list: expected exec:A[+B...] or exec:os"
                            .into(),
                    ))
                }
                ExecDomain::Nodes(list) => {
                    let mut cpus = BTreeSet::new();
                    for &n in list {
                        check(n, false)?;
                        cpus.extend(usable_cpus_of(machine, n, &usable));
                    }
                    Some(cpus.into_iter().collect())
                }
            };
            let Some(mem) = node_index(p.mem_node) else {
                // `check` accepted it, so it has CPUs and memory; unreachable in practice.
                return Err(bad(p.mem_node, "is not usable".into()));
            };
            if manual[slot(p.role)].is_some() {
                notes.push(format!(
                    "--place {} is given more than once: the last one is used",
                    p.role
                ));
            }
            manual[slot(p.role)] = Some(Manual { mem, cpus });
        }

        let data_threads: u64 = Role::ALL
            .iter()
            .filter(|r| **r != Role::Control)
            .map(|r| u64::from(counts[slot(*r)]))
            .sum();
        let needed = job.chunk_bytes.saturating_mul(data_threads);
        if job.buffer_bytes < needed {
            return Err(PlanError::BufferTooSmall {
                buffer_bytes: job.buffer_bytes,
                chunk_bytes: job.chunk_bytes,
                threads: data_threads,
                needed,
            });
        }

        let distances = nodes
            .iter()
            .map(|a| {
                nodes
                    .iter()
                    .map(|b| machine.distance(a.os_index, b.os_index))
                    .collect()
            })
            .collect();
        let mut ctx = Context {
            machine,
            job,
            nodes,
            distances,
            sockets,
            nics: Vec::new(),
            storage: Vec::new(),
            manual,
            counts,
            reserved,
            notes,
        };
        ctx.select_nics();
        ctx.locate_storage();
        Ok(ctx)
    }

    /// The NICs the job uses and the usable node each one's threads belong on.
    fn select_nics(&mut self) {
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
    fn locate_storage(&mut self) {
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
    fn usable_near(&self, os: u32) -> usize {
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
    fn dist(&self, a: usize, b: usize) -> u32 {
        self.distances[a][b]
    }

    /// The node (and NIC) `bind` keeps everything on: the first selected NIC with a
    /// known node.
    fn first_nic_node(&self) -> Option<(usize, usize)> {
        self.nics
            .iter()
            .enumerate()
            .find_map(|(i, n)| n.node.map(|node| (node, i)))
    }

    fn count(&self, role: Role) -> u32 {
        self.counts[slot(role)]
    }

    fn net_threads(&self) -> u32 {
        self.count(Role::NetSend) + self.count(Role::NetRecv)
    }

    /// Whether a usable node hosts a selected NIC with known locality.
    fn is_nic_node(&self, node: usize) -> bool {
        self.nics.iter().any(|n| n.node == Some(node))
    }
}

/// The usable PUs of machine node `os`, sorted.
fn usable_cpus_of(machine: &Machine, os: u32, usable: &BTreeSet<u32>) -> Vec<u32> {
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
fn interleaved(ctx: &Context<'_>, a: Role, b: Role) -> Vec<Role> {
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

// ---------------------------------------------------------------------------------------
// Placement.
// ---------------------------------------------------------------------------------------

/// Where a thread may go when its preferred node has no free core.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// Anywhere the policy accepts (the nearest node with a free core), joining that
    /// node's channel.
    Spill,
    /// Only inside this channel (control threads stay with their channel).
    Channel(usize),
}

/// A thread being planned.
#[derive(Debug)]
struct Tb {
    role: Role,
    /// Order of creation within the role (renumbered per channel at the end).
    seq: u32,
    cpus: Option<Vec<u32>>,
    manual: bool,
    /// Usable node of the core it got (bound, non-manual threads only).
    node: Option<usize>,
}

/// A channel being planned.
#[derive(Debug)]
struct ChanB {
    numa_node: Option<usize>,
    nodes: Vec<usize>,
    package: Option<u32>,
    /// Indexes into [`Context::nics`].
    nics: BTreeSet<usize>,
    threads: Vec<Tb>,
}

impl ChanB {
    fn has(&self, pred: impl Fn(Role) -> bool) -> bool {
        self.threads.iter().any(|t| pred(t.role))
    }
}

/// What `auto` needs to know about a plan.
#[derive(Debug, Clone, Copy)]
struct Stats {
    /// Whether two bound, non-manual threads share a core.
    shared: bool,
    /// Bound, non-manual threads.
    bound_threads: usize,
    /// Threads placed by `--place` (exempt from the core accounting).
    manual_threads: usize,
}

/// Which channels get the one control thread each that the plan always has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ControlBasis {
    /// Every channel that drives a NIC (has net threads), placed right after them.
    NicChannels,
    /// No selected NIC, or no net thread: every channel with data-path threads, placed
    /// after those threads.
    DataChannels,
}

struct Builder<'c, 'a> {
    ctx: &'c Context<'a>,
    policy: Policy,
    /// The node `bind` keeps everything on.
    bind_node: usize,
    channels: Vec<ChanB>,
    /// Threads per core, per usable node (bound, non-manual threads only).
    load: Vec<Vec<u32>>,
    role_on_node: Vec<[u32; ROLES]>,
    total_on_node: Vec<u32>,
    nic_role: Vec<[u32; ROLES]>,
    nic_total: Vec<u32>,
    next_seq: [u32; ROLES],
    /// How many net threads that find their NIC's node full may still take a free core
    /// on another node (see [`build`]).
    spill_budget: usize,
    /// The budget this plan started with.
    spill_allowed: usize,
    /// Net threads that found their NIC's node full and stayed, sharing its cores,
    /// because the spill budget was spent.
    net_kept: usize,
    /// Where each of those is: (channel, position in its threads, node).
    kept: Vec<(usize, usize, usize)>,
    /// Net threads that run on another node than their NIC's (spilled).
    net_spilled: usize,
    /// Usable nodes that host automatically placed, bound net threads.
    net_nodes: BTreeSet<usize>,
    /// Channels whose net threads stayed on their full NIC node (`net_kept`).
    kept_channels: BTreeSet<usize>,
    /// Per role: a thread of it had to share a core and kept off the net threads' nodes.
    kept_off_net: [bool; ROLES],
    /// Control threads beyond one per channel, placed because the job asks for them.
    extra_controls: u32,
    /// Which channels the per-channel control threads went to.
    control_basis: ControlBasis,
    /// A thread shared a core because no free core was left where it may go.
    oversubscribed: bool,
    /// Channels whose control thread shared a core although other nodes had free cores.
    kept_controls: BTreeSet<usize>,
    notes: Vec<String>,
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
fn build(
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
    fn run(ctx: &'c Context<'a>, policy: Policy, spill_budget: usize) -> Self {
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
    fn idle_cores(&self) -> usize {
        self.load.iter().flatten().filter(|&&l| l == 0).count()
    }

    fn new(ctx: &'c Context<'a>, policy: Policy) -> Self {
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
        let all_nics: BTreeSet<usize> = (0..ctx.nics.len()).collect();
        let channels = match policy {
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
        };
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

    fn bound(&self) -> bool {
        !matches!(self.policy, Policy::Os | Policy::Auto)
    }

    /// The channel of a node for automatically placed threads.
    fn channel_of_node(&self, n: usize) -> usize {
        match self.policy {
            Policy::Os | Policy::Auto | Policy::Bind => 0,
            Policy::Smts => self.ctx.nodes[n].socket,
            Policy::Nmts | Policy::Mts => n,
        }
    }

    /// The channel manual placements with memory node `n` go to (created if missing).
    fn manual_channel(&mut self, n: usize) -> usize {
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

    fn push(
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
    fn push_manual(&mut self, role: Role, nic: Option<usize>) -> bool {
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
    fn take(&mut self, role: Role, n: usize, k: usize, ch: usize, nic: Option<usize>) {
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
    fn least_loaded_core(&self, n: usize) -> usize {
        let load = &self.load[n];
        (0..load.len()).min_by_key(|&k| (load[k], k)).unwrap_or(0)
    }

    /// Whether a data-path thread that must share a core keeps off node `n`: `n` hosts
    /// net threads and another usable node hosts none (the NIC's node is shared by net
    /// threads before any I/O or compression thread is put there).
    fn keeps_off(&self, role: Role, n: usize) -> bool {
        role != Role::Control
            && !role.is_nic_facing()
            && self.net_nodes.contains(&n)
            && self.net_nodes.len() < self.ctx.nodes.len()
    }

    fn free_core(&self, n: usize) -> Option<usize> {
        self.load[n].iter().position(|&l| l == 0)
    }

    /// Nodes a spilling thread may go to, best first.
    fn spill_order(&self, p: usize) -> Vec<usize> {
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
    fn chan_order(&self, c: usize, p: usize) -> Vec<usize> {
        let mut order = self.channels[c].nodes.clone();
        order.sort_by_key(|&n| (n != p, self.ctx.dist(p, n), n));
        order
    }

    fn any_free_acceptable(&self) -> bool {
        match self.policy {
            Policy::Bind => self.free_core(self.bind_node).is_some(),
            _ => (0..self.ctx.nodes.len()).any(|n| self.free_core(n).is_some()),
        }
    }

    /// Places a bound thread that prefers node `p`: a free core on `p`, else on the
    /// nearest acceptable node, else the least-loaded core of its channel.
    fn place(&mut self, role: Role, p: usize, scope: Scope, nic: Option<usize>) {
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
    fn pick_nic(&mut self, role: Role) -> Option<usize> {
        let i = (0..self.ctx.nics.len())
            .min_by_key(|&i| (self.nic_role[i][slot(role)], self.nic_total[i], i))?;
        self.nic_role[i][slot(role)] += 1;
        self.nic_total[i] += 1;
        Some(i)
    }

    /// Preference rank of a node for I/O threads: storage nodes first, in job order.
    fn storage_rank(&self, n: usize, storage: bool) -> usize {
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
    fn balanced(&self, role: Role, storage: bool) -> usize {
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
    fn place_net(&mut self) {
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
    fn place_nic_facing(&mut self, role: Role, p: usize, nic: Option<usize>) {
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

    /// Moves net threads that share their NIC node's cores to cores left idle, nearest
    /// first, one from the most loaded core each time, until either runs out. Then
    /// records the channels whose net threads still share their NIC's node.
    fn settle_kept(&mut self) {
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
    fn rehome_controls(&mut self, ch: usize) {
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

    /// Channels in node order (the unbound channel first).
    fn channel_order(&self) -> Vec<usize> {
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
    fn channels_with(&self, pred: impl Fn(Role) -> bool + Copy) -> Vec<usize> {
        self.channel_order()
            .into_iter()
            .filter(|&c| self.channels[c].has(pred))
            .collect()
    }

    /// One control thread in each of `channels`, on a core of that channel (next to
    /// its net threads, which were placed first). Returns how many more the job asks
    /// for (placed last).
    fn place_controls(&mut self, channels: &[usize]) -> u32 {
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

    fn place_control(&mut self, c: usize) {
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
    fn place_extra_controls(&mut self, extra: u32) {
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

    /// A data-path thread: manual, unbound (`os`), or on the balanced node's free core.
    fn place_balanced(&mut self, role: Role, storage: bool) {
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

    /// The first sentence of `explain`: what the policy does.
    fn policy_sentence(&self) -> String {
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

    /// Drops empty channels, orders them, partitions the buffer and writes the plan.
    fn finish(mut self, requested: Policy, mut explain: Vec<String>) -> (Plan, Stats) {
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

    /// One sentence per role: where its threads went and why.
    fn role_sentences(&self) -> Vec<String> {
        let ctx = self.ctx;
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
            if let Some(m) = &ctx.manual[slot(role)] {
                let exec = match &m.cpus {
                    Some(cpus) => format!("running on CPUs {}", format_cpulist(cpus)),
                    None => "running wherever the scheduler puts them".to_string(),
                };
                let mem = ctx.nodes[m.mem].os_index;
                let mut s = format!(
                    "{role}: {n} {plural} placed by --place: buffers on node {mem}, {exec}."
                );
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
                out.push(s);
                continue;
            }
            if !self.bound() {
                out.push(format!(
                    "{role}: {n} {plural}, unbound: the scheduler places them."
                ));
                continue;
            }
            let mut per_node: BTreeMap<u32, u32> = BTreeMap::new();
            for t in &threads {
                if let Some(node) = t.node {
                    *per_node.entry(ctx.nodes[node].os_index).or_default() += 1;
                }
            }
            let place = if per_node.len() == 1 {
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
            };
            let why = self.role_reason(role);
            out.push(format!("{role}: {n} {plural} {place}: {why}."));
        }
        out
    }

    fn role_reason(&self, role: Role) -> String {
        let ctx = self.ctx;
        let bind_node = ctx.nodes[self.bind_node].os_index;
        if self.policy == Policy::Bind {
            return format!("bind keeps every thread on node {bind_node} with the buffers");
        }
        let storage = match ctx.storage.first() {
            Some((n, dev)) => {
                format!(
                    ", starting at node {} where {dev} is attached",
                    ctx.nodes[*n].os_index
                )
            }
            None => String::new(),
        };
        let over = match self.policy {
            Policy::Smts => "balanced over the sockets, each on a core of its socket",
            Policy::Mts => "balanced over the sockets, then over the nodes of each socket",
            _ => "balanced round-robin over the nodes",
        };
        match role {
            Role::NetSend | Role::NetRecv => {
                if ctx.first_nic_node().is_some() {
                    let elsewhere = if self.policy == Policy::Smts {
                        "elsewhere in its socket"
                    } else {
                        "on the nearest node with one"
                    };
                    let rest = match (self.net_spilled, self.net_kept) {
                        (0, 0) => format!(", else {elsewhere}"),
                        (_, 0) => format!(
                            ", else {elsewhere}, staying in the NIC's channel with its buffers"
                        ),
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
                } else {
                    format!("no selected NIC has a known node, so they are {over}")
                }
            }
            Role::Control => {
                let basis = match self.control_basis {
                    ControlBasis::NicChannels => {
                        "one per channel that drives a NIC, on the same \
                                                  node as that channel's net threads (seed 000's \
                                                  NMTS: control and communication threads share \
                                                  work queues)"
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
                            Some((_, nic)) => {
                                format!("the channel of NIC {}'s node", ctx.nics[nic].name)
                            }
                            None => "the first channel".to_string(),
                        };
                        format!(
                            "the job has no data-path threads; the {n} it asks for go to {place}"
                        )
                    }
                    n => format!(
                        "{basis}; {n} more because the job asks for {}, first to channels \
                         without one",
                        ctx.count(Role::Control)
                    ),
                }
            }
            Role::IoRead | Role::IoWrite => {
                let away = self.kept_off_sentence(role);
                format!("{over}{storage}{away} (seed 002: I/O threads near the device)")
            }
            Role::Compress | Role::Decompress => {
                let away = self.kept_off_sentence(role);
                format!("{over}{away}, so every node carries an even share (seed 001)")
            }
        }
    }

    /// `; with no free core left, they share cores away from node 1, where the net
    /// threads are` when a thread of `role` kept off the net threads' nodes.
    fn kept_off_sentence(&self, role: Role) -> String {
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

fn socket_name(ctx: &Context<'_>, socket: &Socket) -> String {
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

fn partition_sentence(job: &Job, channels: &[Channel], weights: &[u64]) -> String {
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

/// Splits `cap` bytes over channels with data-path thread counts `weights`: every
/// channel gets one `chunk`-byte slot per thread, the remaining whole slots go out in
/// proportion to the weights (largest remainder first, then channel order), and the
/// bytes that do not fill a slot go to the last channel with a weight. The parts add up
/// exactly to `cap`. With all weights zero the slots are split evenly.
///
/// The caller guarantees `cap >= chunk * sum(weights)` and `chunk > 0`.
fn partition(cap: u64, chunk: u64, weights: &[u64]) -> Vec<u64> {
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

#[cfg(test)]
mod tests;
