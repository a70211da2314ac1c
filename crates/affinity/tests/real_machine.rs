//! Binding and read-back on the machine running the tests. Written to pass on any Linux
//! machine with at least one CPU and one NUMA node (the CI machine has 2 CPUs, 1 node).

use sluice_affinity::{
    allowed_cpus, allowed_nodes, apply_and_verify, bind_current_thread, current_cpu, memory_policy,
    stat_cpu, thread_affinity, AffinityError, NodeMemory, PolicyMode, Populate,
};
use sluice_placement::{Channel, Plan, Policy, Role, ThreadPlan};

fn first_node() -> u32 {
    allowed_nodes().expect("hwloc topology")[0]
}

#[test]
fn a_thread_pinned_to_the_last_allowed_cpu_runs_there_and_only_there() {
    std::thread::spawn(|| {
        let last = *thread_affinity()
            .expect("sched_getaffinity")
            .last()
            .expect("a CPU");
        bind_current_thread(&[last]).expect("bind");
        assert_eq!(thread_affinity().expect("sched_getaffinity"), vec![last]);
        for _ in 0..20 {
            assert_eq!(current_cpu().expect("sched_getcpu"), last);
            assert_eq!(stat_cpu().expect("/proc stat"), last);
            std::thread::yield_now();
        }
    })
    .join()
    .expect("pinned thread");
}

#[test]
fn binding_to_a_cpu_that_does_not_exist_names_it() {
    let err = bind_current_thread(&[9999]).expect_err("CPU 9999");
    assert!(
        matches!(err, AffinityError::CpuNotAvailable { cpu: 9999, .. }),
        "{err}"
    );
    assert!(matches!(
        bind_current_thread(&[]),
        Err(AffinityError::EmptyCpuList)
    ));
}

#[test]
fn node_memory_bound_to_a_node_has_every_page_there() {
    let node = first_node();
    let memory = NodeMemory::new(16 << 20, Some(node)).expect("bound memory");
    let report = memory.verify_node().expect("move_pages");
    assert_eq!(report.pages, (16 << 20) / sluice_affinity::page_bytes());
    assert_eq!(report.on_node, report.pages, "{report:?}");
    assert!(report.elsewhere.is_empty(), "{report:?}");
    assert_eq!(report.share(), 1.0);
    // The kernel's own record of the binding, the witness that counts on one node.
    let policy = memory.policy().expect("get_mempolicy");
    assert_eq!(policy.mode, PolicyMode::Bind);
    assert_eq!(policy.nodes, vec![node]);
    assert_eq!(policy.to_string(), format!("bind:{node}"));
}

#[test]
fn on_demand_memory_has_a_page_only_once_touched_and_then_on_its_node() {
    let node = first_node();
    let len = 16 << 20;
    let memory = NodeMemory::populated(len, Some(node), Populate::OnDemand).expect("memory");
    assert_eq!(memory.populate(), Populate::OnDemand);
    let report = memory.verify_node().expect("move_pages");
    assert_eq!(report.on_node, 0, "nothing touched yet: {report:?}");
    assert_eq!(
        report.elsewhere.get(&-libc::ENOENT),
        Some(&report.pages),
        "{report:?}"
    );
    // One byte in the second 2 MiB: that page (a huge page where THP serves it) and no
    // other appears, on the bound node.
    // SAFETY: the offset lies inside the region, which nothing else refers to.
    unsafe { memory.as_mut_ptr().add(2 << 20).write_volatile(1) };
    let report = memory.verify_node().expect("move_pages");
    let huge = (2 << 20) / sluice_affinity::page_bytes();
    assert!(
        report.on_node >= 1 && report.on_node <= huge,
        "one page (or one huge page) present: {report:?}"
    );
    assert_eq!(
        report.by_node.get(&i32::try_from(node).expect("node")),
        Some(&report.on_node)
    );
    assert_eq!(
        memory.policy().expect("get_mempolicy").mode,
        PolicyMode::Bind
    );
    let now = NodeMemory::populated(len, Some(node), Populate::Now).expect("memory");
    assert!(now.verify_node().expect("move_pages").all_on_node());
}

#[test]
fn unbound_memory_keeps_the_default_policy() {
    let memory = NodeMemory::new(1, None).expect("memory");
    assert_eq!(
        memory.policy().expect("get_mempolicy").mode,
        PolicyMode::Default
    );
    assert!(memory.verify_node().expect("move_pages").all_on_node());
    assert!(
        memory_policy(std::ptr::null()).is_err(),
        "address 0 is not mapped"
    );
}

#[test]
fn binding_memory_to_a_missing_node_names_it() {
    let err = NodeMemory::new(4096, Some(4000)).expect_err("node 4000");
    assert!(
        matches!(err, AffinityError::NodeNotAvailable { node: 4000, .. }),
        "{err}"
    );
}

fn thread(role: Role, index: u32, cpus: Option<Vec<u32>>) -> ThreadPlan {
    ThreadPlan {
        role,
        index,
        cpus,
        manual: false,
    }
}

/// A one-channel plan for this machine: control on all CPUs, net-send on the last one,
/// io-read unbound, 8 MiB of buffers on the first node.
fn one_node_plan() -> Plan {
    let cpus = allowed_cpus().expect("hwloc");
    let node = first_node();
    let last = *cpus.last().expect("a CPU");
    Plan {
        policy: Policy::Bind,
        requested_policy: Policy::Bind,
        chunk_bytes: 1 << 20,
        channels: vec![Channel {
            id: 0,
            numa_node: Some(node),
            nodes: vec![node],
            package: None,
            nics: vec![],
            buffer_bytes: 8 << 20,
            threads: vec![
                thread(Role::Control, 0, Some(cpus.clone())),
                thread(Role::NetSend, 0, Some(vec![last])),
                thread(Role::IoRead, 0, None),
            ],
        }],
        notes: vec![],
        explain: vec![],
    }
}

#[test]
fn a_one_node_plan_is_applied_and_verified() {
    let plan = one_node_plan();
    let report = apply_and_verify(&plan).expect("apply");
    let table = report.to_string();
    assert!(report.ok(), "{table}\n{report:#?}");
    assert_eq!(report.threads.len(), 3);
    let last = *allowed_cpus().expect("hwloc").last().expect("a CPU");
    let net = &report.threads[1];
    assert_eq!(net.observed_cpus, vec![last]);
    assert_eq!(net.affinity, vec![last]);
    assert!(
        report.threads[2].planned_cpus.is_none() && !report.threads[2].observed_cpus.is_empty()
    );
    let part = &report.partitions[0];
    assert_eq!(part.bytes_verified, 8 << 20);
    assert_eq!(part.pages_on_node, part.pages);
    assert!(part.pages > 0);
    assert!(
        table.contains("net-send 0") && table.contains("everything where planned"),
        "{table}"
    );
    let json = serde_json::to_value(&report).expect("json");
    assert_eq!(json["threads"][1]["role"], "net-send");
    assert_eq!(json["partitions"][0]["ok"], true);
    println!("{table}");
}

#[test]
fn large_partitions_are_checked_up_to_the_cap() {
    let mut plan = one_node_plan();
    plan.channels[0].buffer_bytes = 1 << 40; // 1 TiB planned: never mapped
    plan.channels[0].threads.clear();
    let report = apply_and_verify(&plan).expect("apply");
    assert!(report.ok(), "{report}");
    assert_eq!(
        report.partitions[0].bytes_verified,
        sluice_affinity::VERIFY_BYTES_MAX_PER_CHANNEL
    );
    assert!(report.to_string().contains("64 MiB of 1 TiB"), "{report}");
}

#[test]
fn a_plan_for_a_bigger_machine_names_the_missing_cpu() {
    let mut plan = one_node_plan();
    plan.channels[0].threads[1].cpus = Some(vec![9999]);
    let err = apply_and_verify(&plan).expect_err("CPU 9999");
    assert!(
        matches!(
            err,
            AffinityError::UnknownPlanCpu {
                cpu: 9999,
                role: Role::NetSend,
                index: 0,
                ..
            }
        ),
        "{err:?}"
    );
    let cpus = allowed_cpus().expect("hwloc");
    let expected = "plan puts net-send 0 (channel 0) on CPU 9999, but this machine has CPUs ";
    assert!(err.to_string().starts_with(expected), "{err}");
    assert!(err.to_string().contains(&cpus[0].to_string()), "{err}");
}

#[test]
fn regression_a_spanning_channel_binds_its_buffers_to_numa_node_alone() {
    // An smts channel spans its socket's nodes; its buffers belong on `numa_node` only.
    // Bound to the whole span, the emulated 4-node machine put every page of channel 0
    // (numa_node 0) on node 1. Here the span is every allowed node and `numa_node` the
    // last one: the kernel's policy and every page must name that node alone.
    let nodes = allowed_nodes().expect("hwloc");
    let last = *nodes.last().expect("a node");
    let mut plan = one_node_plan();
    plan.policy = Policy::Smts;
    plan.requested_policy = Policy::Smts;
    plan.channels[0].numa_node = Some(last);
    plan.channels[0].nodes = nodes;
    let report = apply_and_verify(&plan).expect("apply");
    assert!(report.ok(), "{report}");
    let partition = &report.partitions[0];
    assert_eq!(partition.planned_node, Some(last));
    assert_eq!(partition.planned_nodes, vec![last]);
    assert_eq!(partition.policy, format!("bind:{last}"));
    assert_eq!(partition.pages_on_node, partition.pages);
    let on: Vec<i32> = partition.by_node.keys().copied().collect();
    assert_eq!(on, vec![i32::try_from(last).expect("small node index")]);
}

#[test]
fn a_plan_for_a_bigger_machine_names_the_missing_node() {
    let mut plan = one_node_plan();
    plan.channels[0].numa_node = Some(7);
    plan.channels[0].nodes = vec![7];
    let err = apply_and_verify(&plan).expect_err("node 7");
    assert!(
        matches!(
            err,
            AffinityError::UnknownPlanNode {
                channel: 0,
                node: 7,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("channel 0's buffers on NUMA node 7"),
        "{err}"
    );
}

#[test]
fn an_empty_cpu_list_in_a_plan_is_an_error() {
    let mut plan = one_node_plan();
    plan.channels[0].threads[0].cpus = Some(vec![]);
    let err = apply_and_verify(&plan).expect_err("empty");
    assert!(
        matches!(
            err,
            AffinityError::EmptyPlanCpus {
                role: Role::Control,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn an_unbound_plan_reports_where_things_landed() {
    let mut plan = one_node_plan();
    plan.policy = Policy::Os;
    plan.channels[0].numa_node = None;
    plan.channels[0].nodes.clear();
    for t in &mut plan.channels[0].threads {
        t.cpus = None;
    }
    let report = apply_and_verify(&plan).expect("apply");
    assert!(report.ok(), "{report}");
    assert!(report.threads.iter().all(|t| !t.observed_cpus.is_empty()));
    assert_eq!(report.partitions[0].policy, "default");
    assert!(!report.partitions[0].by_node.is_empty());
}

/// The allowed CPUs of `node`, from `/sys/devices/system/node/nodeN/cpulist`.
fn node_cpus(node: u32) -> Vec<u32> {
    let allowed = allowed_cpus().expect("hwloc");
    let path = format!("/sys/devices/system/node/node{node}/cpulist");
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b): (u32, u32) = (a.parse().expect("cpu"), b.parse().expect("cpu"));
        cpus.extend((a..=b).filter(|c| allowed.contains(c)));
    }
    cpus
}

/// One channel per node with CPUs: its memory bound there, a net-send thread on all the
/// node's CPUs and an io-read thread on its last one. On a one-node machine this is one
/// channel; in the emulated 2- and 4-node machines (`tests/vm/placement.sh`) it is the
/// check that placement is real and that the read-backs tell nodes apart.
#[test]
fn every_node_holds_its_own_memory_and_runs_its_own_threads() {
    let mut channels = Vec::new();
    for node in allowed_nodes().expect("hwloc") {
        let cpus = node_cpus(node);
        let Some(&last) = cpus.last() else { continue }; // a memory-only node
        let id = u32::try_from(channels.len()).expect("few nodes");
        channels.push(Channel {
            id,
            numa_node: Some(node),
            nodes: vec![node],
            package: None,
            nics: vec![],
            buffer_bytes: 4 << 20,
            threads: vec![
                thread(Role::NetSend, id, Some(cpus.clone())),
                thread(Role::IoRead, id, Some(vec![last])),
            ],
        });
    }
    assert!(!channels.is_empty(), "no node with CPUs");
    let plan = Plan {
        policy: Policy::Nmts,
        requested_policy: Policy::Nmts,
        chunk_bytes: 1 << 20,
        channels,
        notes: vec![],
        explain: vec![],
    };
    let report = apply_and_verify(&plan).expect("apply");
    println!("{report}");
    assert!(report.ok(), "{report}");
    for (channel, part) in plan.channels.iter().zip(&report.partitions) {
        let node = channel.numa_node.expect("bound") as i32;
        assert_eq!(
            part.by_node.keys().copied().collect::<Vec<_>>(),
            vec![node],
            "{report}"
        );
    }
    for row in &report.threads {
        let node_cpus = node_cpus(
            plan.channels[row.channel as usize]
                .numa_node
                .expect("bound"),
        );
        assert!(
            row.observed_cpus.iter().all(|c| node_cpus.contains(c)),
            "{report}"
        );
    }
}

#[test]
fn page_locations_tell_nodes_apart() {
    let nodes = allowed_nodes().expect("hwloc");
    for &node in &nodes {
        let memory = NodeMemory::new(2 << 20, Some(node)).expect("bound memory");
        let statuses =
            sluice_affinity::page_nodes(memory.as_mut_ptr(), memory.len()).expect("move_pages");
        assert!(
            statuses.iter().all(|&s| s == node as i32),
            "node {node}: {statuses:?}"
        );
        for &other in nodes.iter().filter(|&&n| n != node) {
            let wrong = sluice_affinity::PageReport::from_statuses(&statuses, &[other]);
            assert_eq!(wrong.on_node, 0);
            assert_eq!(wrong.elsewhere.get(&(node as i32)), Some(&statuses.len()));
        }
    }
    if nodes.len() < 2 {
        skipped_part("one NUMA node here: the cross-node half of page_locations_tell_nodes_apart");
    }
}

/// Reports the part of a check this machine's hardware cannot exercise: a `SKIPPED:` line
/// on stderr, written past the test harness's capture so that it shows. Unlike a refused
/// capability, a second NUMA node is not something root can grant, and the CI machine has
/// one node, so this never fails under `CI`: tests/numa-vm runs the two-node case.
fn skipped_part(reason: &str) {
    use std::io::Write;
    let line = format!("SKIPPED: {reason}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
}
