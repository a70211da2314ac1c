//! Property tests of the planner over many synthetic machines, and the "done when"
//! cases of the placement brief.
//!
//! Each generated case is (machine shape, seed, policy); everything else (memory-less
//! nodes, a restricted cpuset, reservations, NICs, storage, thread counts, manual
//! placements, buffer sizes) is derived from the seed with SplitMix64, so a failure
//! prints a shape and a seed that replay it exactly.

use proptest::prelude::*;
use sluice_placement::{
    plan, Channel, ExecDomain, Job, ManualPlacement, Plan, PlanError, Policy, Role, ThreadPlan,
};
use sluice_topology::{BlockDevice, Machine, Nic};
use std::collections::{BTreeMap, BTreeSet};

const GIB: u64 = 1 << 30;

/// SplitMix64: a tiny deterministic generator for deriving a case from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    fn below(&mut self, n: u32) -> u32 {
        u32::try_from(self.next() % u64::from(n)).expect("below n")
    }

    /// True with probability `num / den`.
    fn chance(&mut self, num: u32, den: u32) -> bool {
        self.below(den) < num
    }
}

fn nic(name: &str, node: Option<u32>) -> Nic {
    Nic {
        name: name.into(),
        numa_node: node,
        link_speed_mbps: None,
        mac: None,
        addresses: Vec::new(),
        pci_bus_id: None,
    }
}

/// A generated case.
#[derive(Debug, Clone)]
struct Case {
    machine: Machine,
    job: Job,
    policy: Policy,
}

fn generate(shape: (u32, u32, u32, u32), seed: u64, policy: Policy) -> Case {
    let (packages, per_package, cores, pus) = shape;
    let mut rng = Rng(seed);
    let mut m = Machine::uniform(packages, per_package, cores, pus, 4 * GIB);
    let node_count = packages * per_package;

    // Some nodes without memory.
    for n in &mut m.nodes {
        if rng.chance(1, 8) {
            n.memory_bytes = 0;
        }
    }
    // A restricted cpuset (cgroup/taskset) now and then: node and core lists shrink too.
    if rng.chance(1, 4) {
        let total = u32::try_from(m.allowed_cpus.len()).expect("cpus");
        let keep: BTreeSet<u32> = m
            .allowed_cpus
            .iter()
            .copied()
            .filter(|_| !rng.chance(1, 3))
            .collect();
        let keep = if keep.is_empty() {
            BTreeSet::from([rng.below(total)])
        } else {
            keep
        };
        m.allowed_cpus.retain(|c| keep.contains(c));
        for n in &mut m.nodes {
            n.cpus.retain(|c| keep.contains(c));
            for core in &mut n.cores {
                core.pus.retain(|c| keep.contains(c));
            }
            n.cores.retain(|c| !c.pus.is_empty());
        }
    }

    // NICs: 0-3 on random nodes, some without a node, sometimes a loopback.
    let nic_count = rng.below(4);
    for i in 0..nic_count {
        let node = if rng.chance(1, 4) {
            None
        } else {
            Some(rng.below(node_count))
        };
        m.nics.push(nic(&format!("eth{i}"), node));
    }
    if rng.chance(1, 4) {
        m.nics.push(nic("lo", None));
    }
    for i in 0..rng.below(3) {
        let node = if rng.chance(1, 3) {
            None
        } else {
            Some(rng.below(node_count))
        };
        m.block_devices.push(BlockDevice {
            name: format!("nvme{i}n1"),
            numa_node: node,
            size_bytes: None,
            rotational: None,
        });
    }

    // Reservations: random PUs and sometimes a whole node, leaving at least one.
    let mut reserved: BTreeSet<u32> = BTreeSet::new();
    if rng.chance(1, 2) {
        for &c in &m.allowed_cpus {
            if rng.chance(1, 6) {
                reserved.insert(c);
            }
        }
    }
    if rng.chance(1, 4) {
        let n = &m.nodes[rng.below(node_count) as usize];
        reserved.extend(n.cpus.iter().copied());
    }
    if reserved.len() == m.allowed_cpus.len() {
        let spare =
            m.allowed_cpus[rng.below(u32::try_from(m.allowed_cpus.len()).expect("n")) as usize];
        reserved.remove(&spare);
    }

    let mut threads = Vec::new();
    for role in Role::ALL {
        let max = if role == Role::Control { 3 } else { 9 };
        let mut n = rng.below(max + 1);
        if rng.chance(1, 8) {
            n *= 12; // enough to oversubscribe most machines
        }
        if n > 0 {
            threads.push((role, n));
        }
    }

    // NIC selection: all with a node (empty), or a random subset by name.
    let mut nics = Vec::new();
    if rng.chance(1, 2) {
        for n in &m.nics {
            if rng.chance(1, 2) {
                nics.push(n.name.clone());
            }
        }
    }
    let storage: Vec<String> = m
        .block_devices
        .iter()
        .filter(|_| rng.chance(2, 3))
        .map(|b| b.name.clone())
        .collect();

    let mut placements = Vec::new();
    if rng.chance(1, 4) {
        for _ in 0..=rng.below(2) {
            let role = Role::ALL[rng.below(7) as usize];
            let mem_node = rng.below(node_count);
            let exec = if rng.chance(1, 3) {
                ExecDomain::Os
            } else {
                let mut nodes: Vec<u32> = (0..node_count).filter(|_| rng.chance(1, 2)).collect();
                if nodes.is_empty() {
                    nodes.push(rng.below(node_count));
                }
                ExecDomain::Nodes(nodes)
            };
            placements.push(ManualPlacement {
                role,
                mem_node,
                exec,
            });
        }
    }

    let chunk_bytes = 4096 * u64::from(1 + rng.below(256));
    let data: u64 = threads
        .iter()
        .filter(|(r, _)| *r != Role::Control)
        .map(|(_, n)| u64::from(*n))
        .sum();
    let buffer_bytes =
        chunk_bytes * (data + u64::from(rng.below(200))) + u64::from(rng.below(4096)) * 3;

    Case {
        machine: m,
        job: Job {
            threads,
            nics,
            storage,
            buffer_bytes,
            chunk_bytes,
            reserved_cpus: reserved.into_iter().collect(),
            placements,
        },
        policy,
    }
}

/// What the test knows about the machine, computed independently of the planner.
struct Facts {
    usable_cpus: BTreeSet<u32>,
    /// OS index -> usable cores (each a sorted list of usable PUs) of usable nodes.
    usable_nodes: BTreeMap<u32, Vec<Vec<u32>>>,
}

impl Facts {
    fn of(m: &Machine, job: &Job) -> Facts {
        let reserved: BTreeSet<u32> = job.reserved_cpus.iter().copied().collect();
        let usable_cpus: BTreeSet<u32> = m
            .allowed_cpus
            .iter()
            .copied()
            .filter(|c| !reserved.contains(c))
            .collect();
        let mut usable_nodes = BTreeMap::new();
        for n in &m.nodes {
            let cores: Vec<Vec<u32>> = n
                .cores
                .iter()
                .map(|c| {
                    c.pus
                        .iter()
                        .copied()
                        .filter(|p| usable_cpus.contains(p))
                        .collect::<Vec<_>>()
                })
                .filter(|pus: &Vec<u32>| !pus.is_empty())
                .collect();
            if !cores.is_empty() && n.memory_bytes > 0 {
                usable_nodes.insert(n.os_index, cores);
            }
        }
        Facts {
            usable_cpus,
            usable_nodes,
        }
    }

    fn node_usable_cpus(&self, m: &Machine, node: u32) -> BTreeSet<u32> {
        m.node(node)
            .map(|n| {
                n.cpus
                    .iter()
                    .copied()
                    .filter(|c| self.usable_cpus.contains(c))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Where threads of a device on machine node `node` belong: the node itself when
    /// usable, else the nearest usable node (lowest index on ties).
    fn effective(&self, m: &Machine, node: u32) -> u32 {
        if self.usable_nodes.contains_key(&node) {
            return node;
        }
        let nearest = self
            .usable_nodes
            .keys()
            .min_by_key(|&&n| (m.distance(node, n), n));
        *nearest.expect("a usable node")
    }

    /// The usable node a bound core (list of PUs) belongs to.
    fn node_of_core(&self, cpus: &[u32]) -> Option<u32> {
        self.usable_nodes
            .iter()
            .find(|(_, cores)| cores.iter().any(|c| c == cpus))
            .map(|(n, _)| *n)
    }
}

/// Why a plan must fail, if it must.
fn expected_error(case: &Case, facts: &Facts) -> Option<&'static str> {
    if facts.usable_nodes.is_empty() {
        return Some("NoUsableNode");
    }
    let m = &case.machine;
    for p in &case.job.placements {
        let mem_ok = m.node(p.mem_node).is_some_and(|n| n.memory_bytes > 0)
            && !facts.node_usable_cpus(m, p.mem_node).is_empty();
        let exec_ok = match &p.exec {
            ExecDomain::Os => true,
            ExecDomain::Nodes(list) => list
                .iter()
                .all(|&n| !facts.node_usable_cpus(m, n).is_empty()),
        };
        if !mem_ok || !exec_ok {
            return Some("BadPlacementNode");
        }
    }
    None
}

/// Selected NICs as the brief defines them.
fn selected_nics<'m>(m: &'m Machine, job: &Job) -> Vec<&'m Nic> {
    if job.nics.is_empty() {
        m.nics
            .iter()
            .filter(|n| n.numa_node.is_some() && n.name != "lo")
            .collect()
    } else {
        job.nics.iter().filter_map(|name| m.nic(name)).collect()
    }
}

fn manual_role(job: &Job, role: Role) -> Option<&ManualPlacement> {
    job.placements.iter().rev().find(|p| p.role == role)
}

fn check(case: &Case) -> Result<(), TestCaseError> {
    let (m, job) = (&case.machine, &case.job);
    let facts = Facts::of(m, job);
    let result = plan(m, job, case.policy);
    match (expected_error(case, &facts), &result) {
        (Some("NoUsableNode"), Err(PlanError::NoUsableNode)) => return Ok(()),
        (Some("BadPlacementNode"), Err(PlanError::BadPlacementNode { .. })) => return Ok(()),
        (None, Ok(_)) => {}
        (expected, got) => {
            prop_assert!(false, "expected {expected:?}, got {got:?}");
        }
    }
    let p = result.expect("checked above");
    prop_assert_eq!(
        &plan(m, job, case.policy).expect("again"),
        &p,
        "deterministic"
    );
    check_plan(case, &facts, &p)
}

fn check_plan(case: &Case, facts: &Facts, p: &Plan) -> Result<(), TestCaseError> {
    let (m, job) = (&case.machine, &case.job);
    prop_assert_ne!(p.policy, Policy::Auto);
    prop_assert_eq!(p.requested_policy, case.policy);
    if case.policy != Policy::Auto {
        prop_assert_eq!(p.policy, case.policy);
    }

    // Buffers add up exactly, each channel has a slot per data-path thread.
    prop_assert_eq!(p.buffer_bytes(), job.buffer_bytes);
    for c in &p.channels {
        let data = c.threads.iter().filter(|t| t.role != Role::Control).count() as u64;
        prop_assert!(
            c.buffer_bytes / job.chunk_bytes >= data,
            "channel {} slots",
            c.id
        );
    }

    // Channels: ids in order, sorted by node, only on usable nodes, never empty.
    for (i, c) in p.channels.iter().enumerate() {
        prop_assert_eq!(c.id as usize, i);
        prop_assert!(!c.threads.is_empty() || p.channels.len() == 1);
        for n in c.nodes.iter().chain(c.numa_node.iter()) {
            prop_assert!(
                facts.usable_nodes.contains_key(n),
                "channel on unusable node {}",
                n
            );
        }
        if let Some(n) = c.numa_node {
            prop_assert!(c.nodes.contains(&n));
        }
    }
    let keys: Vec<_> = p
        .channels
        .iter()
        .map(|c| (c.nodes.first().copied(), c.numa_node))
        .collect();
    let mut sorted = keys.clone();
    sorted.sort();
    prop_assert_eq!(keys, sorted, "channels in node order");

    // Thread counts and indexes. One control thread per channel that drives a NIC, or,
    // when no NIC is selected or the job has no net threads, per channel with data-path
    // threads; the job's count is a minimum.
    let nic_driven = !selected_nics(m, job).is_empty()
        && job.count(Role::NetSend) + job.count(Role::NetRecv) > 0;
    let needs_control = |c: &Channel| {
        c.threads.iter().any(|t| {
            if nic_driven {
                t.role.is_nic_facing()
            } else {
                t.role != Role::Control
            }
        })
    };
    let control_channels = p.channels.iter().filter(|c| needs_control(c)).count();
    for role in Role::ALL {
        let of_role: Vec<&ThreadPlan> = p
            .threads()
            .map(|(_, t)| t)
            .filter(|t| t.role == role)
            .collect();
        let want = if role == Role::Control {
            (job.count(role).max(1) as usize).max(control_channels)
        } else {
            job.count(role) as usize
        };
        prop_assert_eq!(of_role.len(), want, "{} threads", role);
        let idx: Vec<u32> = of_role.iter().map(|t| t.index).collect();
        let expected: Vec<u32> = (0..).take(idx.len()).collect();
        prop_assert_eq!(idx, expected, "{} indexes", role);
    }
    // Each of those channels has its control thread (unless control is manual).
    if manual_role(job, Role::Control).is_none() {
        for c in &p.channels {
            if needs_control(c) {
                prop_assert!(
                    c.threads.iter().any(|t| t.role == Role::Control),
                    "channel {} has no control thread",
                    c.id
                );
            }
        }
    }

    // CPUs: never reserved, never outside the allowed set.
    for (_, t) in p.threads() {
        for cpu in t.cpus.iter().flatten() {
            prop_assert!(facts.usable_cpus.contains(cpu), "cpu {} not usable", cpu);
        }
    }

    // Manual threads: the union of the exec nodes' usable PUs, or unbound.
    for (c, t) in p.threads().filter(|(_, t)| t.manual) {
        let placement = manual_role(job, t.role).expect("manual role");
        let expected = match &placement.exec {
            ExecDomain::Os => None,
            ExecDomain::Nodes(nodes) => {
                let mut all = BTreeSet::new();
                for &n in nodes {
                    all.extend(facts.node_usable_cpus(m, n));
                }
                Some(all.into_iter().collect::<Vec<_>>())
            }
        };
        prop_assert_eq!(&t.cpus, &expected);
        if p.policy == Policy::Smts {
            prop_assert!(c.nodes.contains(&placement.mem_node));
        } else {
            prop_assert_eq!(c.numa_node, Some(placement.mem_node));
        }
    }
    for (_, t) in p.threads() {
        prop_assert_eq!(t.manual, manual_role(job, t.role).is_some());
    }

    // Non-manual threads: unbound under os, else one whole core inside the channel.
    let auto_threads: Vec<(&Channel, &ThreadPlan)> =
        p.threads().filter(|(_, t)| !t.manual).collect();
    if p.policy == Policy::Os {
        for (_, t) in &auto_threads {
            prop_assert!(t.cpus.is_none());
        }
        return Ok(());
    }
    let mut load: BTreeMap<Vec<u32>, Vec<(&Channel, &ThreadPlan)>> = BTreeMap::new();
    for &(c, t) in &auto_threads {
        let cpus = t
            .cpus
            .as_ref()
            .expect("bound policy binds non-manual threads");
        let node = facts.node_of_core(cpus);
        prop_assert!(node.is_some(), "{:?} is not one whole usable core", cpus);
        let node = node.expect("checked");
        prop_assert!(
            c.nodes.contains(&node),
            "thread on node {} outside channel {:?}",
            node,
            c.nodes
        );
        load.entry(cpus.clone()).or_default().push((c, t));
    }
    let free_cores = |nodes: &[u32]| {
        nodes
            .iter()
            .filter_map(|n| facts.usable_nodes.get(n))
            .flatten()
            .filter(|core| !load.contains_key(*core))
            .count()
    };
    let all_nodes: Vec<u32> = facts.usable_nodes.keys().copied().collect();

    // No core sharing while a free core is left where the thread may go. A control thread
    // stays with its channel: it may share only when its channel has no free core.
    let domain: Vec<u32> = match p.policy {
        Policy::Bind => p
            .channels
            .iter()
            .filter(|c| {
                c.threads
                    .iter()
                    .any(|t| !t.manual && t.role != Role::Control)
            })
            .flat_map(|c| c.nodes.clone())
            .collect(),
        _ => all_nodes.clone(),
    };
    if free_cores(&domain) > 0 {
        for (core, on) in &load {
            if on.len() < 2 {
                continue;
            }
            let non_control = on.iter().filter(|(_, t)| t.role != Role::Control).count();
            prop_assert!(
                non_control <= 1,
                "core {:?} shared by {} data threads with free cores left",
                core,
                non_control
            );
            for (c, t) in on {
                if t.role == Role::Control {
                    prop_assert_eq!(
                        free_cores(&c.nodes),
                        0,
                        "control shares core {:?} while its channel has a free core",
                        core
                    );
                }
            }
        }
    }

    // Bind: everything automatic on one node (control threads of manual channels stay
    // with them).
    if p.policy == Policy::Bind {
        let nodes: BTreeSet<u32> = auto_threads
            .iter()
            .filter(|(_, t)| t.role != Role::Control)
            .filter_map(|(c, _)| c.numa_node)
            .collect();
        prop_assert!(nodes.len() <= 1);
    }

    // NIC-facing threads on their NIC's node. Strong form where it is unambiguous: all
    // selected NICs have a known node and share one usable node n. Then the net threads
    // on n are as many as fit: min(net threads, cores of n) (net threads are placed first).
    let net_manual =
        manual_role(job, Role::NetSend).is_some() || manual_role(job, Role::NetRecv).is_some();
    let selected = selected_nics(m, job);
    let nic_nodes: BTreeSet<Option<u32>> = selected
        .iter()
        .map(|n| n.numa_node.map(|node| facts.effective(m, node)))
        .collect();
    let auto_net: Vec<&(&Channel, &ThreadPlan)> = auto_threads
        .iter()
        .filter(|(_, t)| t.role.is_nic_facing())
        .collect();
    if let (false, [Some(n)]) = (
        net_manual,
        nic_nodes.iter().copied().collect::<Vec<_>>().as_slice(),
    ) {
        if let Some(cores) = facts.usable_nodes.get(n) {
            let on_n = auto_net
                .iter()
                .filter(|(_, t)| facts.node_of_core(t.cpus.as_ref().expect("bound")) == Some(*n))
                .count();
            prop_assert!(
                on_n >= auto_net.len().min(cores.len()),
                "net threads on NIC node {}",
                n
            );
            if on_n < auto_net.len() {
                // Some went elsewhere: only because n was full (bind never leaves n).
                prop_assert!(p.policy != Policy::Bind);
                prop_assert!(
                    on_n >= cores.len(),
                    "net threads left NIC node {} with room",
                    n
                );
            }
        }
    }
    // Strong form for any number of NICs, whatever the other threads: when every NIC
    // node has at least as many cores as there are net threads, every net thread is on
    // a NIC node (net threads are placed first, on their NIC's node).
    let known: Option<BTreeSet<u32>> = selected
        .iter()
        .map(|n| n.numa_node.map(|node| facts.effective(m, node)))
        .collect();
    if let (false, true, Some(known)) = (
        net_manual,
        matches!(p.policy, Policy::Nmts | Policy::Mts | Policy::Smts),
        known,
    ) {
        let room = known.iter().all(|n| {
            facts
                .usable_nodes
                .get(n)
                .is_some_and(|cores| cores.len() >= auto_net.len())
        });
        if room && !known.is_empty() {
            for (_, t) in &auto_net {
                let node = facts.node_of_core(t.cpus.as_ref().expect("bound"));
                prop_assert!(
                    node.is_some_and(|n| known.contains(&n)),
                    "{} {} on node {:?}, NIC nodes {:?} had room",
                    t.role,
                    t.index,
                    node,
                    known
                );
            }
        }
    }

    // A channel lists only NICs local to its nodes (its buffer node for nmts and mts),
    // or NICs of unknown locality (whose threads are balanced). Manual net threads may
    // make any channel drive any NIC.
    if !net_manual && matches!(p.policy, Policy::Nmts | Policy::Mts | Policy::Smts) {
        for c in &p.channels {
            for name in &c.nics {
                let Some(node) = m.nic(name).and_then(|n| n.numa_node) else {
                    continue;
                };
                let node = facts.effective(m, node);
                prop_assert!(
                    c.nodes.contains(&node),
                    "channel {} on nodes {:?} lists {} of node {}",
                    c.id,
                    c.nodes,
                    name,
                    node
                );
                if p.policy != Policy::Smts {
                    prop_assert_eq!(c.numa_node, Some(node), "channel {} lists {}", c.id, name);
                }
            }
        }
    }

    // When cores are shared, I/O and compression threads keep off the nodes of the net
    // threads (the NIC's node is shared by net threads and their control thread first),
    // unless every usable node hosts net threads.
    if matches!(p.policy, Policy::Nmts | Policy::Mts | Policy::Smts) {
        let net_nodes: BTreeSet<u32> = auto_net
            .iter()
            .filter_map(|(_, t)| facts.node_of_core(t.cpus.as_ref().expect("bound")))
            .collect();
        if net_nodes.len() < facts.usable_nodes.len() {
            for (core, on) in &load {
                let data: Vec<&ThreadPlan> = on
                    .iter()
                    .map(|(_, t)| *t)
                    .filter(|t| t.role != Role::Control)
                    .collect();
                let node = facts.node_of_core(core).expect("core");
                if data.len() >= 2 && net_nodes.contains(&node) {
                    prop_assert!(
                        data.iter().all(|t| t.role.is_nic_facing()),
                        "core {:?} on net node {} shared by {:?}",
                        core,
                        node,
                        data.iter().map(|t| t.role).collect::<Vec<_>>()
                    );
                }
            }
        }
    }

    // Weak form, any NICs: a net thread away from every NIC node its channel drives
    // spilled, so one of those NIC nodes is full of net threads. (Manual net threads
    // make a channel drive NICs that its automatic threads do not use.)
    if !net_manual && matches!(p.policy, Policy::Nmts | Policy::Mts | Policy::Smts) {
        for (c, t) in &auto_net {
            // A channel that also drives NICs of unknown locality may hold their
            // (balanced) threads anywhere.
            if c.nics
                .iter()
                .any(|name| m.nic(name).is_none_or(|n| n.numa_node.is_none()))
            {
                continue;
            }
            let k: BTreeSet<u32> = c
                .nics
                .iter()
                .filter_map(|name| m.nic(name).and_then(|n| n.numa_node))
                .map(|n| facts.effective(m, n))
                .collect();
            let node = facts
                .node_of_core(t.cpus.as_ref().expect("bound"))
                .expect("core");
            if k.is_empty() || k.contains(&node) {
                continue;
            }
            let full_of_net = k.iter().any(|n| {
                facts.usable_nodes[n].iter().all(|core| {
                    load.get(core)
                        .is_some_and(|on| on.iter().any(|(_, t)| t.role.is_nic_facing()))
                })
            });
            prop_assert!(
                full_of_net,
                "net thread on node {} while NIC nodes {:?} had room",
                node,
                k
            );
        }
    }
    Ok(())
}

fn policy_strategy() -> impl Strategy<Value = Policy> {
    prop::sample::select(Policy::ALL.to_vec())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn plans_keep_their_invariants(
        shape in (1u32..=8, 1u32..=4, 1u32..=32, 1u32..=2),
        seed in any::<u64>(),
        policy in policy_strategy(),
    ) {
        check(&generate(shape, seed, policy))?;
    }

    #[test]
    fn small_machines_keep_their_invariants(
        shape in (1u32..=2, 1u32..=2, 1u32..=3, 1u32..=2),
        seed in any::<u64>(),
        policy in policy_strategy(),
    ) {
        check(&generate(shape, seed, policy))?;
    }
}

// ---------------------------------------------------------------------------------------
// "Done when" cases.
// ---------------------------------------------------------------------------------------

fn job(threads: &[(Role, u32)]) -> Job {
    Job {
        threads: threads.to_vec(),
        nics: Vec::new(),
        storage: Vec::new(),
        buffer_bytes: GIB,
        chunk_bytes: 4 << 20,
        reserved_cpus: Vec::new(),
        placements: Vec::new(),
    }
}

#[test]
fn mts_on_a_synthetic_2x2x4_machine_keeps_threads_inside_their_channel_node() {
    let mut m = Machine::uniform(2, 2, 4, 1, 4 * GIB);
    m.nics.push(nic("eth1", Some(1)));
    let j = job(&[
        (Role::Control, 1),
        (Role::NetSend, 2),
        (Role::IoRead, 4),
        (Role::NetRecv, 2),
        (Role::IoWrite, 4),
        (Role::Compress, 2),
    ]);
    let p = plan(&m, &j, Policy::Mts).expect("plan");
    let nodes: Vec<Option<u32>> = p.channels.iter().map(|c| c.numa_node).collect();
    assert_eq!(
        nodes,
        vec![Some(0), Some(1), Some(2), Some(3)],
        "every node has a channel"
    );
    for (c, t) in p.threads() {
        assert_eq!(c.nodes, vec![c.numa_node.expect("bound")]);
        for &cpu in t.cpus.as_ref().expect("bound") {
            assert_eq!(
                m.node_of_cpu(cpu),
                c.numa_node,
                "{} {} on cpu {cpu}",
                t.role,
                t.index
            );
        }
    }
    for (c, t) in p.threads().filter(|(_, t)| t.role.is_nic_facing()) {
        assert_eq!(c.numa_node, Some(1), "{} {} next to eth1", t.role, t.index);
    }
}

#[test]
fn bind_on_a_dtn_keeps_every_thread_and_byte_on_the_chosen_nic_node() {
    // 2 sockets x 1 node x 4 cores x 2 PUs, eth0 on node 0, eth1 on node 1.
    let mut m = Machine::uniform(2, 1, 4, 2, 64 * GIB);
    m.nics.push(nic("eth0", Some(0)));
    m.nics.push(nic("eth1", Some(1)));
    let mut j = job(&[
        (Role::NetRecv, 2),
        (Role::IoWrite, 2),
        (Role::Decompress, 2),
    ]);
    j.nics = vec!["eth1".into()];
    let p = plan(&m, &j, Policy::Bind).expect("plan");
    assert_eq!(p.channels.len(), 1);
    let ch = &p.channels[0];
    assert_eq!((ch.numa_node, ch.nodes.clone()), (Some(1), vec![1]));
    assert_eq!(ch.nics, vec!["eth1".to_string()]);
    assert_eq!(ch.buffer_bytes, GIB, "all buffer bytes on node 1");
    for (_, t) in p.threads() {
        let cpus = t.cpus.as_ref().expect("bound");
        assert!(
            cpus.iter().all(|&c| (8..16).contains(&c)),
            "{} on {cpus:?}",
            t.role
        );
        assert_eq!(cpus.len(), 2, "a whole core: both hyperthreads");
    }
    // 7 threads on 4 cores: said once.
    assert!(p
        .notes
        .iter()
        .any(|n| n == "bind keeps all 7 threads on node 1's 4 cores"));
}

#[test]
fn os_binds_nothing() {
    let mut m = Machine::uniform(2, 1, 4, 2, 64 * GIB);
    m.nics.push(nic("eth0", Some(0)));
    let p = plan(
        &m,
        &job(&[(Role::NetSend, 4), (Role::IoRead, 4)]),
        Policy::Os,
    )
    .expect("plan");
    assert_eq!(p.channels.len(), 1);
    assert_eq!(p.channels[0].numa_node, None);
    assert!(p.threads().all(|(_, t)| t.cpus.is_none()));
    let json = serde_json::to_value(&p).expect("json");
    assert!(json["channels"][0]["threads"][0]["cpus"].is_null());
}

/// Replays one generated case and prints it with its plan:
/// `SLUICE_CASE="2,2,4,1 12345 mts" cargo test -p sluice-placement --test properties -- --ignored --nocapture replay`.
#[test]
#[ignore = "a debugging aid: set SLUICE_CASE"]
fn replay() {
    let Ok(spec) = std::env::var("SLUICE_CASE") else {
        return;
    };
    let parts: Vec<&str> = spec.split_whitespace().collect();
    let dims: Vec<u32> = parts[0]
        .split(',')
        .map(|d| d.parse().expect("dimension"))
        .collect();
    let seed: u64 = parts[1].parse().expect("seed");
    let policy: Policy = parts[2].parse().expect("policy");
    let case = generate((dims[0], dims[1], dims[2], dims[3]), seed, policy);
    println!("{:#?}", case.job);
    println!(
        "nics {:?}",
        case.machine
            .nics
            .iter()
            .map(|n| (&n.name, n.numa_node))
            .collect::<Vec<_>>()
    );
    for n in &case.machine.nodes {
        println!(
            "node {} mem {} cpus {:?}",
            n.os_index, n.memory_bytes, n.cpus
        );
    }
    match plan(&case.machine, &case.job, case.policy) {
        Ok(p) => {
            print!("{}", sluice_placement::describe(&p));
            for n in &p.notes {
                println!("note: {n}");
            }
            for n in &p.explain {
                println!("why: {n}");
            }
        }
        Err(e) => println!("error: {e}"),
    }
    println!("{:?}", check(&case));
}
