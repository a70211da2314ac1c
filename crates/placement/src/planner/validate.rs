//! Validation of a job against the machine, in the order the errors are documented on
//! [`plan`](super::plan).

use super::context::{Context, Manual, Socket, UNode};
use super::{slot, usable_cpus_of, PAGE_BYTES, ROLES, THREADS_MAX};
use crate::cpulist::format_cpulist;
use crate::types::{ExecDomain, Job, ManualPlacement, PlanError, Role};
use sluice_topology::{Machine, Node};
use std::collections::BTreeSet;

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
    /// [`plan`](super::plan)) and derives what the placement needs.
    pub(super) fn new(machine: &'a Machine, job: &'a Job) -> Result<Self, PlanError> {
        check_names(machine, job)?;
        let (usable, reserved) = usable_cpus(machine, job)?;
        let (nodes, sockets) = usable_nodes(machine, &usable)?;
        let counts = role_counts(job)?;
        let (manual, notes) = manual_placements(machine, job, &usable, &nodes)?;
        check_buffer(job, &counts)?;
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
}

/// The chunk size, and that every NIC and block device the job names exists.
fn check_names(machine: &Machine, job: &Job) -> Result<(), PlanError> {
    if job.chunk_bytes == 0 || !job.chunk_bytes.is_multiple_of(PAGE_BYTES) {
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
    Ok(())
}

/// The usable CPUs (allowed and not reserved) and the reserved ones, sorted.
fn usable_cpus(machine: &Machine, job: &Job) -> Result<(BTreeSet<u32>, Vec<u32>), PlanError> {
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
    Ok((usable, reserved))
}

/// The usable nodes (some usable CPU and some memory) in machine order, and the sockets
/// they group into.
fn usable_nodes(
    machine: &Machine,
    usable: &BTreeSet<u32>,
) -> Result<(Vec<UNode>, Vec<Socket>), PlanError> {
    let mut nodes = Vec::new();
    let mut sockets: Vec<Socket> = Vec::new();
    for node in &machine.nodes {
        let cpus = usable_cpus_of(machine, node.os_index, usable);
        if cpus.is_empty() || node.memory_bytes == 0 {
            continue;
        }
        let idx = nodes.len();
        nodes.push(UNode {
            os_index: node.os_index,
            package: node.package,
            socket: join_socket(&mut sockets, node.package, idx),
            cores: usable_cores(node, &cpus),
        });
    }
    if nodes.is_empty() {
        return Err(PlanError::NoUsableNode);
    }
    Ok((nodes, sockets))
}

/// Each core's usable PUs (`cpus`, sorted) on `node`; PUs the source lists without a
/// core still run threads: one "core" each.
fn usable_cores(node: &Node, cpus: &[u32]) -> Vec<Vec<u32>> {
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
    cores.extend(
        cpus.iter()
            .filter(|p| !covered.contains(p))
            .map(|&p| vec![p]),
    );
    cores
}

/// Adds usable node `idx` of `package` to its socket (a new one for a new package, or
/// for a package-less node) and returns the socket's index.
fn join_socket(sockets: &mut Vec<Socket>, package: Option<u32>, idx: usize) -> usize {
    let found = match package {
        Some(p) => sockets.iter().position(|s| s.package == Some(p)),
        None => None,
    };
    match found {
        Some(s) => {
            sockets[s].nodes.push(idx);
            s
        }
        None => {
            sockets.push(Socket {
                package,
                nodes: vec![idx],
            });
            sockets.len() - 1
        }
    }
}

/// Threads per role, within [`THREADS_MAX`] in all.
fn role_counts(job: &Job) -> Result<[u32; ROLES], PlanError> {
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
    Ok(counts)
}

/// The manual placements per role (the last one given wins, with a note).
fn manual_placements(
    machine: &Machine,
    job: &Job,
    usable: &BTreeSet<u32>,
    nodes: &[UNode],
) -> Result<([Option<Manual>; ROLES], Vec<String>), PlanError> {
    let mut notes = Vec::new();
    let mut manual: [Option<Manual>; ROLES] = std::array::from_fn(|_| None);
    for p in &job.placements {
        let resolved = resolve_manual(machine, p, usable, nodes)?;
        if manual[slot(p.role)].is_some() {
            notes.push(format!(
                "--place {} is given more than once: the last one is used",
                p.role
            ));
        }
        manual[slot(p.role)] = Some(resolved);
    }
    Ok((manual, notes))
}

/// One manual placement checked and resolved: its memory node's index among the usable
/// `nodes`, and the union of its exec nodes' usable PUs (`None` for `exec:os`).
fn resolve_manual(
    machine: &Machine,
    p: &ManualPlacement,
    usable: &BTreeSet<u32>,
    nodes: &[UNode],
) -> Result<Manual, PlanError> {
    check_placement_node(machine, p.role, p.mem_node, true, usable)?;
    let cpus = match &p.exec {
        ExecDomain::Os => None,
        ExecDomain::Nodes(list) if list.is_empty() => {
            return Err(bad_placement(
                p.role,
                p.mem_node,
                "is given with an empty exec list: expected exec:A[+B...] or exec:os",
            ))
        }
        ExecDomain::Nodes(list) => {
            let mut cpus = BTreeSet::new();
            for &n in list {
                check_placement_node(machine, p.role, n, false, usable)?;
                cpus.extend(usable_cpus_of(machine, n, usable));
            }
            Some(cpus.into_iter().collect())
        }
    };
    let Some(mem) = nodes.iter().position(|n| n.os_index == p.mem_node) else {
        // `check_placement_node` accepted it, so it has CPUs and memory; unreachable in
        // practice.
        return Err(bad_placement(p.role, p.mem_node, "is not usable"));
    };
    Ok(Manual { mem, cpus })
}

/// That `node`, named by a placement of `role`, exists, has usable CPUs and (for the
/// memory node) memory.
fn check_placement_node(
    machine: &Machine,
    role: Role,
    node: u32,
    need_memory: bool,
    usable: &BTreeSet<u32>,
) -> Result<(), PlanError> {
    let Some(n) = machine.node(node) else {
        let node_names: Vec<u32> = machine.nodes.iter().map(|n| n.os_index).collect();
        return Err(bad_placement(
            role,
            node,
            format!(
                "does not exist: expected one of the machine's nodes {}",
                list_or_none(&node_names)
            ),
        ));
    };
    if need_memory && n.memory_bytes == 0 {
        return Err(bad_placement(
            role,
            node,
            "has no memory: expected a node with memory for the buffers",
        ));
    }
    if usable_cpus_of(machine, node, usable).is_empty() {
        return Err(bad_placement(
            role,
            node,
            "has no usable CPU (all reserved or outside the allowed cpuset): expected a node \
             with CPUs to run on",
        ));
    }
    Ok(())
}

fn bad_placement(role: Role, node: u32, problem: impl Into<String>) -> PlanError {
    PlanError::BadPlacementNode {
        role,
        node,
        problem: problem.into(),
    }
}

/// The buffer cap holds at least one chunk per data-path thread.
fn check_buffer(job: &Job, counts: &[u32; ROLES]) -> Result<(), PlanError> {
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
    Ok(())
}
