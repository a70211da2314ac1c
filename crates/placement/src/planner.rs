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

mod builder;
mod context;
mod controls;
mod explain;
mod finish;
mod notes;
mod place;
mod settle;
mod validate;

use crate::cpulist::format_cpulist;
use crate::types::{Job, Plan, PlanError, Policy, Role};
use builder::build;
use context::{interleaved, usable_cpus_of, Context};
use sluice_topology::Machine;
use std::collections::BTreeSet;

// What the unit tests (planner/tests.rs, `use super::*`) name from here.
#[cfg(test)]
use {
    crate::types::{Channel, ExecDomain, ThreadPlan},
    finish::partition,
    std::collections::BTreeMap,
};

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

#[cfg(test)]
mod tests;
