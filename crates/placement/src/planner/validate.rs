//! Validation of a job against the machine, in the order the errors are documented on
//! [`plan`](super::plan).

use super::context::{Context, Manual, Socket, UNode};
use super::{slot, usable_cpus_of, PAGE_BYTES, ROLES, THREADS_MAX};
use crate::cpulist::format_cpulist;
use crate::types::{ExecDomain, Job, PlanError, Role};
use sluice_topology::Machine;
use std::collections::BTreeSet;

pub(super) fn names_or(names: Vec<&str>, none: &str) -> String {
    if names.is_empty() {
        none.to_string()
    } else {
        names.join(", ")
    }
}

pub(super) fn list_or_none(cpus: &[u32]) -> String {
    if cpus.is_empty() {
        "none".to_string()
    } else {
        format_cpulist(cpus)
    }
}

impl<'a> Context<'a> {
    /// Validates `job` against `machine` (in the order the errors are documented on
    /// [`plan`]) and derives what the placement needs.
    pub(super) fn new(machine: &'a Machine, job: &'a Job) -> Result<Self, PlanError> {
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
}
