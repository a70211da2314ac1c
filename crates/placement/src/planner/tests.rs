//! Unit tests of the planner on small hand-checked machines.

use super::*;
use crate::types::ManualPlacement;
use sluice_topology::{BlockDevice, Nic};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

fn nic(name: &str, node: Option<u32>) -> Nic {
    Nic {
        name: name.into(),
        numa_node: node,
        link_speed_mbps: Some(100_000),
        mac: None,
        addresses: Vec::new(),
        pci_bus_id: None,
    }
}

fn disk(name: &str, node: Option<u32>) -> BlockDevice {
    BlockDevice {
        name: name.into(),
        numa_node: node,
        size_bytes: None,
        rotational: Some(false),
    }
}

fn job(threads: &[(Role, u32)]) -> Job {
    Job {
        threads: threads.to_vec(),
        nics: Vec::new(),
        storage: Vec::new(),
        buffer_bytes: GIB,
        chunk_bytes: 4 * MIB,
        reserved_cpus: Vec::new(),
        placements: Vec::new(),
    }
}

/// 2 sockets x 2 nodes x 4 cores x 1 PU (cpus 0-15), eth1 on node 1.
fn two_by_two() -> Machine {
    let mut m = Machine::uniform(2, 2, 4, 1, 16 * GIB);
    m.nics.push(nic("eth1", Some(1)));
    m
}

/// The node of a bound thread's CPUs (all of them on one node).
fn node_of(m: &Machine, cpus: &[u32]) -> u32 {
    let nodes: BTreeSet<u32> = cpus
        .iter()
        .map(|&c| m.node_of_cpu(c).expect("known cpu"))
        .collect();
    assert_eq!(nodes.len(), 1, "cpus {cpus:?} span nodes {nodes:?}");
    *nodes.iter().next().expect("one node")
}

fn threads_of(p: &Plan, role: Role) -> Vec<(&Channel, &ThreadPlan)> {
    p.threads().filter(|(_, t)| t.role == role).collect()
}

/// Whether no core carries two bound threads.
fn no_shared_core(p: &Plan) -> bool {
    let mut seen = BTreeSet::new();
    p.threads()
        .filter_map(|(_, t)| t.cpus.as_ref())
        .all(|cpus| seen.insert(cpus.clone()))
}

const SEND_SIDE: [(Role, u32); 3] = [(Role::Control, 1), (Role::NetSend, 2), (Role::IoRead, 2)];

#[test]
fn os_binds_nothing_and_keeps_one_channel() {
    let m = two_by_two();
    let p = plan(&m, &job(&SEND_SIDE), Policy::Os).expect("plan");
    assert_eq!(p.policy, Policy::Os);
    assert_eq!(p.channels.len(), 1);
    let ch = &p.channels[0];
    assert_eq!((ch.numa_node, ch.package), (None, None));
    assert!(ch.nodes.is_empty());
    assert_eq!(ch.nics, vec!["eth1".to_string()]);
    assert_eq!(ch.buffer_bytes, GIB);
    assert_eq!(ch.threads.len(), 5);
    assert!(p.threads().all(|(_, t)| t.cpus.is_none()));
    assert!(p.notes.iter().any(|n| n.contains("nothing is bound")));
}

#[test]
fn bind_keeps_everything_on_the_nic_node_and_says_when_it_oversubscribes() {
    let m = two_by_two();
    let p = plan(&m, &job(&SEND_SIDE), Policy::Bind).expect("plan");
    assert_eq!(p.channels.len(), 1);
    assert_eq!(p.channels[0].numa_node, Some(1));
    assert_eq!(p.channels[0].nodes, vec![1]);
    for (_, t) in p.threads() {
        assert_eq!(node_of(&m, t.cpus.as_ref().expect("bound")), 1);
    }
    // 5 threads on 4 cores.
    assert!(p
        .notes
        .iter()
        .any(|n| n == "bind keeps all 5 threads on node 1's 4 cores"));
    assert!(p
        .notes
        .iter()
        .any(|n| n.starts_with("oversubscribed: 5 threads on 4 cores")));
    // Net threads got their own cores (they are placed first).
    let net: Vec<_> = threads_of(&p, Role::NetSend);
    assert_ne!(net[0].1.cpus, net[1].1.cpus);
}

#[test]
fn bind_without_a_nic_node_uses_the_first_usable_node() {
    let mut m = Machine::uniform(2, 1, 2, 1, GIB);
    m.nics.push(nic("eth9", None));
    let mut j = job(&[(Role::NetRecv, 1)]);
    j.nics = vec!["eth9".into()];
    j.reserved_cpus = vec![0, 1]; // node 0 has no usable CPU left
    let p = plan(&m, &j, Policy::Bind).expect("plan");
    assert_eq!(p.channels[0].numa_node, Some(1));
    assert!(p.notes.iter().any(|n| n.contains("first usable node")));
    assert!(p
        .notes
        .iter()
        .any(|n| n.contains("eth9 has no known NUMA node")));
}

#[test]
fn smts_makes_one_channel_per_socket_on_its_nic_node() {
    let m = two_by_two();
    let p = plan(
        &m,
        &job(&[
            (Role::NetRecv, 2),
            (Role::IoWrite, 4),
            (Role::Decompress, 2),
        ]),
        Policy::Smts,
    )
    .expect("plan");
    assert_eq!(p.channels.len(), 2);
    assert_eq!(p.channels[0].numa_node, Some(1), "socket 0's NIC node");
    assert_eq!(p.channels[0].nodes, vec![0, 1]);
    assert_eq!(p.channels[0].nics, vec!["eth1".to_string()]);
    assert_eq!(
        p.channels[1].numa_node,
        Some(2),
        "socket 1 has no NIC: its first node"
    );
    assert_eq!(p.channels[1].nodes, vec![2, 3]);
    for (c, t) in threads_of(&p, Role::NetRecv) {
        assert_eq!(c.id, 0);
        assert_eq!(node_of(&m, t.cpus.as_ref().expect("bound")), 1);
    }
    // I/O balanced over sockets: 2 and 2.
    let per_channel: Vec<usize> = p
        .channels
        .iter()
        .map(|c| c.threads.iter().filter(|t| t.role == Role::IoWrite).count())
        .collect();
    assert_eq!(per_channel, vec![2, 2]);
    for (c, t) in p.threads() {
        assert!(c
            .nodes
            .contains(&node_of(&m, t.cpus.as_ref().expect("bound"))));
    }
    assert!(p
        .notes
        .iter()
        .any(|n| n.starts_with("socket 1 has no selected NIC")));
    assert!(no_shared_core(&p));
}

#[test]
fn nmts_balances_over_nodes_with_control_next_to_net_threads() {
    let m = two_by_two();
    let p = plan(
        &m,
        &job(&[(Role::NetSend, 2), (Role::IoRead, 4), (Role::Compress, 4)]),
        Policy::Nmts,
    )
    .expect("plan");
    assert_eq!(p.channels.len(), 4, "every node has a channel");
    for (i, c) in p.channels.iter().enumerate() {
        assert_eq!(c.id as usize, i);
        assert_eq!(c.numa_node, u32::try_from(i).ok());
    }
    let (ctl_channel, ctl) = threads_of(&p, Role::Control)[0];
    assert_eq!(ctl_channel.numa_node, Some(1));
    assert_eq!(node_of(&m, ctl.cpus.as_ref().expect("bound")), 1);
    for (c, _) in threads_of(&p, Role::NetSend) {
        assert_eq!(c.numa_node, Some(1));
        assert_eq!(c.nics, vec!["eth1".to_string()]);
    }
    // io-read: one per node (round-robin per role), which fills the NIC node.
    let nodes = |role| -> Vec<u32> {
        threads_of(&p, role)
            .iter()
            .filter_map(|(c, _)| c.numa_node)
            .collect()
    };
    assert_eq!(nodes(Role::IoRead), vec![0, 1, 2, 3]);
    // compress: round-robin over the nodes that still have free cores, fewest threads first.
    assert_eq!(nodes(Role::Compress), vec![0, 0, 2, 3]);
    let totals: Vec<usize> = p.channels.iter().map(|c| c.threads.len()).collect();
    assert_eq!(totals, vec![3, 4, 2, 2]);
    assert!(no_shared_core(&p));
}

#[test]
fn mts_groups_node_channels_by_socket() {
    let m = two_by_two();
    let p = plan(
        &m,
        &job(&[
            (Role::NetRecv, 2),
            (Role::IoWrite, 4),
            (Role::Decompress, 4),
        ]),
        Policy::Mts,
    )
    .expect("plan");
    assert_eq!(p.channels.len(), 4);
    let packages: Vec<Option<u32>> = p.channels.iter().map(|c| c.package).collect();
    assert_eq!(packages, vec![Some(0), Some(0), Some(1), Some(1)]);
    for (c, t) in p.threads() {
        assert_eq!(c.nodes, vec![c.numa_node.expect("bound")]);
        assert_eq!(
            node_of(&m, t.cpus.as_ref().expect("bound")),
            c.numa_node.expect("bound")
        );
    }
    // I/O: two per socket.
    let per_socket = |pkg: u32| {
        threads_of(&p, Role::IoWrite)
            .iter()
            .filter(|(c, _)| c.package == Some(pkg))
            .count()
    };
    assert_eq!((per_socket(0), per_socket(1)), (2, 2));
    assert!(p
        .notes
        .iter()
        .any(|n| n.starts_with("socket 1 has no selected NIC")));
}

#[test]
fn auto_picks_os_on_one_node_bind_when_it_fits_and_mts_otherwise() {
    let one = Machine::uniform(1, 1, 8, 2, GIB);
    let p = plan(&one, &job(&SEND_SIDE), Policy::Auto).expect("plan");
    assert_eq!((p.policy, p.requested_policy), (Policy::Os, Policy::Auto));
    assert!(p.explain[0].starts_with("auto chose os"), "{:?}", p.explain);

    let m = two_by_two();
    let small = job(&[(Role::NetRecv, 2), (Role::IoWrite, 1)]);
    let p = plan(&m, &small, Policy::Auto).expect("plan");
    assert_eq!((p.policy, p.requested_policy), (Policy::Bind, Policy::Auto));
    assert!(
        p.explain[0].starts_with("auto chose bind: the 4 threads fit"),
        "{:?}",
        p.explain
    );

    let big = job(&[(Role::NetRecv, 2), (Role::IoWrite, 4)]);
    let p = plan(&m, &big, Policy::Auto).expect("plan");
    assert_eq!(p.policy, Policy::Mts);
    assert!(p.explain[0].starts_with("auto chose mts: the 7 threads do not fit"));

    let mut two_nics = two_by_two();
    two_nics.nics.push(nic("eth2", Some(2)));
    let p = plan(&two_nics, &small, Policy::Auto).expect("plan");
    assert_eq!(p.policy, Policy::Mts);
    assert!(p.explain[0].starts_with("auto chose mts: the selected NICs sit on nodes 1-2"));
    let mut only_eth2 = small.clone();
    only_eth2.nics = vec!["eth2".into()];
    let p = plan(&two_nics, &only_eth2, Policy::Auto).expect("plan");
    assert_eq!(p.policy, Policy::Bind);
    assert_eq!(p.channels[0].numa_node, Some(2));

    let mut no_nic = two_by_two();
    no_nic.nics.clear();
    let p = plan(&no_nic, &small, Policy::Auto).expect("plan");
    assert_eq!(p.policy, Policy::Mts);
    assert!(p.explain[0].contains("no selected NIC with a known node"));
}

#[test]
fn every_policy_explains_every_role() {
    let m = two_by_two();
    let j = job(&[(Role::NetSend, 1), (Role::IoRead, 1), (Role::Compress, 1)]);
    for policy in Policy::ALL {
        let p = plan(&m, &j, policy).expect("plan");
        for role in [Role::Control, Role::NetSend, Role::IoRead, Role::Compress] {
            assert!(
                p.explain
                    .iter()
                    .any(|l| l.starts_with(&format!("{role}: "))),
                "{policy}: no sentence for {role} in {:?}",
                p.explain
            );
        }
        assert!(p.explain.iter().any(|l| l.starts_with("buffer: ")));
    }
}

#[test]
fn io_threads_start_at_the_storage_node() {
    let mut m = two_by_two();
    m.block_devices.push(disk("nvme0n1", Some(2)));
    let mut j = job(&[(Role::IoRead, 1)]);
    j.storage = vec!["nvme0n1".into()];
    for policy in [Policy::Nmts, Policy::Mts, Policy::Smts] {
        let p = plan(&m, &j, policy).expect("plan");
        let (_, t) = threads_of(&p, Role::IoRead)[0];
        assert_eq!(node_of(&m, t.cpus.as_ref().expect("bound")), 2, "{policy}");
    }
}

#[test]
fn regression_spilled_net_threads_stay_in_their_nic_channel() {
    // 6 net threads, 4 cores on eth1's node 1, and the job fits the machine: two spill
    // to the nearest node with free cores, but stay in node 1's channel (buffers next
    // to eth1), so that no channel lists a NIC that is not on one of its nodes.
    let m = two_by_two();
    let p = plan(&m, &job(&[(Role::NetRecv, 6)]), Policy::Nmts).expect("plan");
    let mut per_node: BTreeMap<u32, usize> = BTreeMap::new();
    for (c, t) in threads_of(&p, Role::NetRecv) {
        let node = node_of(&m, t.cpus.as_ref().expect("bound"));
        assert_eq!(
            c.numa_node,
            Some(1),
            "a spilled thread stays in its NIC's channel"
        );
        assert!(c.nodes.contains(&node), "{node} not in {:?}", c.nodes);
        *per_node.entry(node).or_default() += 1;
    }
    // Four on the NIC node, the rest on node 0 (same socket, distance 21).
    assert_eq!(per_node, BTreeMap::from([(0, 2), (1, 4)]));
    assert_eq!(p.channels.len(), 1);
    let ch = &p.channels[0];
    assert_eq!(
        ch.nodes,
        vec![0, 1],
        "threads run on both, buffers on node 1"
    );
    assert_eq!(ch.nics, vec!["eth1".to_string()]);
    assert_eq!(ch.buffer_bytes, GIB);
    // One channel drives eth1: one control thread, next to the spilled net threads.
    let controls = threads_of(&p, Role::Control);
    assert_eq!(controls.len(), 1);
    assert_eq!(node_of(&m, controls[0].1.cpus.as_ref().expect("bound")), 0);
    assert!(no_shared_core(&p), "the job fits: nothing shares a core");
    assert!(p.notes.is_empty(), "{:?}", p.notes);
}

/// The shape of testdata/topologies/qemu-2node-nic1.xml: 2 sockets x 1 node x 2 cores,
/// eth0 on node 1.
fn qemu_2node() -> Machine {
    let mut m = Machine::uniform(2, 1, 2, 1, GIB);
    m.nics.push(nic("eth0", Some(1)));
    m
}

/// `sluice plan --side both`'s default job.
const BOTH_SIDES: [(Role, u32); 5] = [
    (Role::Control, 1),
    (Role::NetSend, 2),
    (Role::NetRecv, 2),
    (Role::IoRead, 2),
    (Role::IoWrite, 2),
];

/// The nodes of the usable NICs a channel lists are among its nodes.
fn nics_are_local(m: &Machine, p: &Plan) -> bool {
    p.channels.iter().all(|c| {
        c.nics.iter().all(|name| {
            m.nic(name)
                .and_then(|n| n.numa_node)
                .is_none_or(|n| c.nodes.contains(&n))
        })
    })
}

#[test]
fn regression_nic_threads_keep_the_nic_node_when_the_job_does_not_fit() {
    // 9 threads on 4 cores. Net threads used to spill to node 0, into a channel listing
    // eth0 (node 1), while I/O threads shared node 1's cores.
    let m = qemu_2node();
    for policy in [Policy::Mts, Policy::Nmts, Policy::Smts] {
        let p = plan(&m, &job(&BOTH_SIDES), policy).expect("plan");
        for (c, t) in p.threads() {
            let node = node_of(&m, t.cpus.as_ref().expect("bound"));
            if t.role.is_nic_facing() || t.role == Role::Control {
                assert_eq!(node, 1, "{policy}: {} {} next to eth0", t.role, t.index);
                assert_eq!(c.numa_node, Some(1), "{policy}");
            } else {
                assert_eq!(node, 0, "{policy}: {} {} off the NIC node", t.role, t.index);
            }
        }
        assert!(nics_are_local(&m, &p), "{policy}: {:?}", p.channels);
        assert_eq!(p.channels[0].nics, Vec::<String>::new(), "{policy}");
        assert!(
            p.notes
                .iter()
                .any(|n| n.starts_with("oversubscribed: 9 threads on 4 cores")),
            "{policy}: {:?}",
            p.notes
        );
        assert!(
            p.notes.iter().any(|n| n.contains(
                "2 net threads find no free core on NIC node 1 and share its cores with their \
                 control thread"
            )),
            "{policy}: {:?}",
            p.notes
        );
        // "socket N has no selected NIC" only for sockets whose channels list none.
        for note in &p.notes {
            if let Some(rest) = note.strip_prefix("socket ") {
                let pkg: u32 = rest
                    .split(' ')
                    .next()
                    .and_then(|n| n.parse().ok())
                    .expect("n");
                assert!(
                    p.channels
                        .iter()
                        .filter(|c| c.package == Some(pkg))
                        .all(|c| c.nics.is_empty()),
                    "{policy}: {note} but {:?}",
                    p.channels
                );
            }
        }
    }
}

#[test]
fn nic_threads_stay_on_a_nic_node_that_has_room_however_large_the_job() {
    // eth1's node 1 has 4 cores for 4 net threads; 40 I/O threads oversubscribe the rest.
    let m = two_by_two();
    let j = job(&[(Role::NetSend, 2), (Role::NetRecv, 2), (Role::IoRead, 40)]);
    for policy in [Policy::Mts, Policy::Nmts, Policy::Smts] {
        let p = plan(&m, &j, policy).expect("plan");
        for (_, t) in p.threads().filter(|(_, t)| t.role.is_nic_facing()) {
            assert_eq!(node_of(&m, t.cpus.as_ref().expect("bound")), 1, "{policy}");
        }
        // The NIC node's cores are not shared with I/O threads: its control thread
        // shares, I/O goes to the other nodes.
        for (_, t) in threads_of(&p, Role::IoRead) {
            assert_ne!(node_of(&m, t.cpus.as_ref().expect("bound")), 1, "{policy}");
        }
        assert!(nics_are_local(&m, &p), "{policy}");
    }
}

#[test]
fn regression_the_nic_socket_takes_its_share_of_io_threads() {
    // 4 sockets x 2 nodes x 8 cores, eth0 on node 0 (the Opteron fixture's shape): the
    // I/O threads used to skip socket 0 because its net threads made it look busy.
    let mut m = Machine::uniform(4, 2, 8, 1, GIB);
    m.nics.push(nic("eth0", Some(0)));
    for (io, per_socket) in [(2, 1), (8, 4)] {
        let j = job(&[
            (Role::NetSend, 2),
            (Role::NetRecv, 2),
            (Role::IoRead, io),
            (Role::IoWrite, io),
        ]);
        for policy in [Policy::Smts, Policy::Mts] {
            let p = plan(&m, &j, policy).expect("plan");
            let mut per: BTreeMap<u32, usize> = BTreeMap::new();
            for (_, t) in p.threads().filter(|(_, t)| t.role.is_io()) {
                let node = node_of(&m, t.cpus.as_ref().expect("bound"));
                *per.entry(node / 2).or_default() += 1;
            }
            let want: BTreeMap<u32, usize> = (0..4).map(|s| (s, per_socket)).collect();
            assert_eq!(per, want, "{policy} with {io}+{io} I/O threads");
            // Round-robin starts with the NIC's socket: its first I/O thread is io-read 0.
            let (c, _) = threads_of(&p, Role::IoRead)
                .into_iter()
                .find(|(_, t)| t.index == 0)
                .expect("io-read 0");
            assert_eq!(c.package, Some(0), "{policy}");
        }
    }
}

#[test]
fn regression_without_nics_every_data_channel_has_one_control_thread() {
    let mut m = two_by_two();
    m.nics.clear();
    let j = job(&[(Role::Control, 1), (Role::NetSend, 2), (Role::IoRead, 4)]);
    for policy in [Policy::Nmts, Policy::Mts, Policy::Smts] {
        let p = plan(&m, &j, policy).expect("plan");
        for c in &p.channels {
            let controls = c.threads.iter().filter(|t| t.role == Role::Control).count();
            assert_eq!(controls, 1, "{policy}: channel {} {:?}", c.id, c.threads);
        }
        let sentence = p
            .explain
            .iter()
            .find(|l| l.starts_with("control: "))
            .expect("a control sentence");
        assert!(
            sentence.contains("no NIC is selected, so one per channel that has data-path threads"),
            "{policy}: {sentence}"
        );
        assert!(!sentence.contains("drives a NIC"), "{policy}: {sentence}");
    }
    // Without net threads the same holds on a machine with NICs.
    let p = plan(&two_by_two(), &job(&[(Role::IoWrite, 4)]), Policy::Nmts).expect("plan");
    assert_eq!(p.channels.len(), 4);
    assert!(p.channels.iter().all(|c| c
        .threads
        .iter()
        .filter(|t| t.role == Role::Control)
        .count()
        == 1));
    assert!(p
        .explain
        .iter()
        .any(|l| l.starts_with("control: 4 threads") && l.contains("the job has no net threads")));
}

#[test]
fn regression_oversubscription_notes_count_manual_threads_as_exempt() {
    let m = Machine::uniform(1, 1, 2, 1, GIB);
    let mut j = job(&[(Role::NetSend, 2), (Role::IoRead, 2), (Role::Compress, 2)]);
    j.placements = vec!["compress=mem:0,exec:0".parse().expect("parse")];
    let p = plan(&m, &j, Policy::Bind).expect("plan");
    assert!(
        p.notes.contains(
            &"oversubscribed: 7 threads, 2 of them placed by --place and exempt (they run where \
              --place puts them); the other 5 on 2 cores (up to 3 per core) share cores \
              round-robin"
                .to_string()
        ),
        "{:?}",
        p.notes
    );
    assert!(
        p.notes.contains(
            &"bind keeps all 5 planned threads on node 0's 2 cores (the 2 threads placed by \
              --place are exempt: they run where --place puts them)"
                .to_string()
        ),
        "{:?}",
        p.notes
    );
}

#[test]
fn regression_a_control_only_channel_says_it_holds_no_buffer() {
    let m = two_by_two();
    let mut j = job(&[(Role::NetRecv, 2), (Role::IoWrite, 2)]);
    j.placements = vec!["control=mem:0,exec:0".parse().expect("parse")];
    let p = plan(&m, &j, Policy::Bind).expect("plan");
    let ch = p
        .channels
        .iter()
        .find(|c| c.numa_node == Some(0))
        .expect("the manual channel");
    assert_eq!(ch.buffer_bytes, 0);
    let sentence = p.explain.last().expect("buffer sentence");
    assert!(
        sentence.contains(&format!("channel {} holds no buffer", ch.id)),
        "{sentence}"
    );
}

#[test]
fn two_nics_share_the_net_threads_round_robin() {
    let mut m = Machine::uniform(2, 1, 4, 2, GIB);
    m.nics.push(nic("eth0", Some(0)));
    m.nics.push(nic("eth1", Some(1)));
    let p = plan(
        &m,
        &job(&[(Role::NetSend, 2), (Role::NetRecv, 2)]),
        Policy::Mts,
    )
    .expect("plan");
    for (c, t) in p.threads().filter(|(_, t)| t.role.is_nic_facing()) {
        let node = node_of(&m, t.cpus.as_ref().expect("bound"));
        let expected = if node == 0 { "eth0" } else { "eth1" };
        assert_eq!(c.nics, vec![expected.to_string()]);
    }
    // Staggered: each NIC node carries one sender and one receiver.
    for node in [0, 1] {
        let roles: BTreeSet<Role> = p
            .threads()
            .filter(|(c, t)| c.numa_node == Some(node) && t.role.is_nic_facing())
            .map(|(_, t)| t.role)
            .collect();
        assert_eq!(roles, BTreeSet::from([Role::NetSend, Role::NetRecv]));
    }
}

#[test]
fn the_build_machine_oversubscribes_with_one_note() {
    let m = Machine::uniform(1, 1, 2, 1, GIB);
    let j = job(&[
        (Role::Control, 1),
        (Role::NetSend, 2),
        (Role::IoRead, 2),
        (Role::NetRecv, 2),
        (Role::IoWrite, 2),
    ]);
    for policy in [Policy::Bind, Policy::Smts, Policy::Nmts, Policy::Mts] {
        let p = plan(&m, &j, policy).expect("plan");
        let notes: Vec<&String> = p
            .notes
            .iter()
            .filter(|n| n.starts_with("oversubscribed"))
            .collect();
        assert_eq!(
            notes,
            vec!["oversubscribed: 9 threads on 2 cores (up to 5 per core); threads share cores round-robin"],
            "{policy}"
        );
        let mut per_core: BTreeMap<Vec<u32>, usize> = BTreeMap::new();
        for (_, t) in p.threads() {
            *per_core.entry(t.cpus.clone().expect("bound")).or_default() += 1;
        }
        assert_eq!(per_core.values().copied().collect::<Vec<_>>(), vec![5, 4]);
    }
}

#[test]
fn reserved_cpus_are_never_used_and_a_core_keeps_its_other_pu() {
    let m = Machine::uniform(1, 2, 2, 2, GIB); // node 0: cores {0,1},{2,3}
    let mut j = job(&[(Role::IoRead, 4)]);
    j.reserved_cpus = vec![0, 5];
    let p = plan(&m, &j, Policy::Nmts).expect("plan");
    let all: BTreeSet<u32> = p
        .threads()
        .flat_map(|(_, t)| t.cpus.clone().unwrap_or_default())
        .collect();
    assert!(!all.contains(&0) && !all.contains(&5));
    let cores: BTreeSet<Vec<u32>> = p.threads().filter_map(|(_, t)| t.cpus.clone()).collect();
    assert_eq!(
        cores,
        BTreeSet::from([vec![1], vec![2, 3], vec![4], vec![6, 7]])
    );
    assert!(p
        .notes
        .iter()
        .any(|n| n.starts_with("CPUs 0,5 are reserved")));
}

#[test]
fn nodes_without_memory_or_usable_cpus_get_no_channel() {
    let mut m = Machine::uniform(1, 3, 2, 1, GIB);
    m.nodes[0].memory_bytes = 0;
    let mut j = job(&[(Role::IoRead, 6)]);
    j.reserved_cpus = vec![2, 3]; // all of node 1
    for policy in [Policy::Bind, Policy::Smts, Policy::Nmts, Policy::Mts] {
        let p = plan(&m, &j, policy).expect("plan");
        for c in &p.channels {
            assert!(c.nodes.iter().all(|&n| n == 2), "{policy}: {:?}", c.nodes);
        }
    }
}

#[test]
fn a_nic_on_an_unusable_node_sends_its_threads_to_the_nearest_usable_node() {
    let mut m = two_by_two();
    m.nodes[1].memory_bytes = 0;
    let p = plan(&m, &job(&[(Role::NetRecv, 1)]), Policy::Nmts).expect("plan");
    let (c, t) = threads_of(&p, Role::NetRecv)[0];
    assert_eq!(c.numa_node, Some(0));
    assert_eq!(node_of(&m, t.cpus.as_ref().expect("bound")), 0);
    assert!(p.notes.iter().any(|n| n.contains("NIC eth1 is on node 1")));
}

#[test]
fn manual_placement_follows_seed_001_configurations() {
    let mut m = Machine::uniform(2, 1, 4, 2, GIB);
    m.nics.push(nic("eth0", Some(0)));
    m.nics.push(nic("eth1", Some(1)));
    let mut j = job(&[(Role::Compress, 4), (Role::NetSend, 2)]);
    // Configuration E: memory on 0, execution on 0 & 1.
    j.placements = vec!["compress=mem:0,exec:0+1"
        .parse::<ManualPlacement>()
        .expect("parse")];
    for policy in Policy::ALL {
        let p = plan(&m, &j, policy).expect("plan");
        for (c, t) in threads_of(&p, Role::Compress) {
            assert!(t.manual, "{policy}");
            assert_eq!(t.cpus, Some((0..16).collect()), "{policy}");
            assert!(c.nodes.contains(&0), "{policy}: {:?}", c.nodes);
        }
    }
    // Configuration G: memory on 1, OS executes.
    j.placements = vec!["compress=mem:1,exec:os"
        .parse::<ManualPlacement>()
        .expect("parse")];
    let p = plan(&m, &j, Policy::Bind).expect("plan");
    let nodes: Vec<Option<u32>> = p.channels.iter().map(|c| c.numa_node).collect();
    assert_eq!(
        nodes,
        vec![Some(0), Some(1)],
        "bind on eth0's node 0, plus the manual channel"
    );
    for (c, t) in threads_of(&p, Role::Compress) {
        assert_eq!(
            (c.numa_node, t.cpus.clone(), t.manual),
            (Some(1), None, true)
        );
    }
}

#[test]
fn manual_placement_under_os_creates_a_bound_channel() {
    let m = two_by_two();
    let mut j = job(&[(Role::IoRead, 2), (Role::NetRecv, 1)]);
    j.placements = vec!["net-recv=mem:3,exec:3".parse().expect("parse")];
    let p = plan(&m, &j, Policy::Os).expect("plan");
    assert_eq!(p.channels.len(), 2);
    assert_eq!(p.channels[0].numa_node, None);
    let ch = &p.channels[1];
    assert_eq!(ch.numa_node, Some(3));
    assert_eq!(ch.nics, vec!["eth1".to_string()]);
    // The channel drives a NIC, so it has its control thread (unbound under os).
    assert!(ch
        .threads
        .iter()
        .any(|t| t.role == Role::Control && t.cpus.is_none()));
    assert_eq!(p.buffer_bytes(), GIB);
}

#[test]
fn extra_control_threads_go_to_channels_without_one() {
    let m = two_by_two();
    let j = job(&[(Role::Control, 3), (Role::NetRecv, 1), (Role::IoWrite, 4)]);
    let p = plan(&m, &j, Policy::Nmts).expect("plan");
    let controls: Vec<Option<u32>> = threads_of(&p, Role::Control)
        .iter()
        .map(|(c, _)| c.numa_node)
        .collect();
    assert_eq!(controls.len(), 3);
    assert!(controls.contains(&Some(1)), "one with the net thread");
    let distinct: BTreeSet<_> = controls.iter().collect();
    assert_eq!(distinct.len(), 3, "one per channel first: {controls:?}");
    // Indexes run 0.. in channel order.
    let idx: Vec<u32> = threads_of(&p, Role::Control)
        .iter()
        .map(|(_, t)| t.index)
        .collect();
    assert_eq!(idx, vec![0, 1, 2]);
}

#[test]
fn thread_indexes_number_each_role_across_the_plan() {
    let m = two_by_two();
    let p = plan(
        &m,
        &job(&[(Role::IoRead, 7), (Role::Compress, 3)]),
        Policy::Mts,
    )
    .expect("plan");
    for role in [Role::IoRead, Role::Compress] {
        let idx: Vec<u32> = threads_of(&p, role).iter().map(|(_, t)| t.index).collect();
        let expected: Vec<u32> = (0..).take(idx.len()).collect();
        assert_eq!(idx, expected);
    }
}

#[test]
fn partitions_follow_data_threads_in_whole_slots_and_add_up() {
    assert_eq!(partition(100, 10, &[1, 1]), vec![50, 50]);
    assert_eq!(partition(105, 10, &[1, 2]), vec![30, 75]);
    assert_eq!(partition(40, 10, &[3, 1]), vec![30, 10]);
    // Every data thread has its slot even when the proportions would round it away.
    assert_eq!(partition(40, 10, &[1, 0, 3]), vec![10, 0, 30]);
    assert_eq!(partition(7, 10, &[0, 0]), vec![0, 7]);
    assert_eq!(partition(30, 10, &[0, 0, 0]), vec![10, 10, 10]);
    let big = partition(u64::MAX, 4096, &[3, 5, 7]);
    assert_eq!(
        big.iter().map(|&b| u128::from(b)).sum::<u128>(),
        u128::from(u64::MAX)
    );
}

#[test]
fn channel_partitions_add_up_to_the_cap_with_the_remainder_last() {
    let m = two_by_two();
    let mut j = job(&[
        (Role::NetRecv, 1),
        (Role::IoWrite, 2),
        (Role::Decompress, 3),
    ]);
    j.buffer_bytes = 64 * MIB + 12_345;
    let p = plan(&m, &j, Policy::Mts).expect("plan");
    assert_eq!(p.buffer_bytes(), j.buffer_bytes);
    let last = p
        .channels
        .iter()
        .rposition(|c| c.buffer_bytes % j.chunk_bytes != 0);
    assert_eq!(last, Some(p.channels.len() - 1));
    for c in &p.channels {
        let data = c.threads.iter().filter(|t| t.role != Role::Control).count() as u64;
        assert!(c.buffer_bytes / j.chunk_bytes >= data);
    }
}

#[test]
fn the_same_input_gives_the_same_plan() {
    let mut m = two_by_two();
    m.block_devices.push(disk("sda", Some(3)));
    let mut j = job(&[(Role::NetSend, 3), (Role::IoRead, 5), (Role::Compress, 6)]);
    j.storage = vec!["sda".into()];
    for policy in Policy::ALL {
        assert_eq!(plan(&m, &j, policy), plan(&m, &j, policy));
    }
}

#[test]
fn json_has_the_contract_shape() {
    let m = two_by_two();
    let p = plan(&m, &job(&[(Role::NetRecv, 2)]), Policy::Mts).expect("plan");
    let v = serde_json::to_value(&p).expect("json");
    assert_eq!(v["policy"], "mts");
    let ch = &v["channels"][0];
    assert_eq!(ch["numa_node"], 1);
    assert_eq!(ch["nics"][0], "eth1");
    assert!(ch["buffer_bytes"].is_u64());
    let roles: Vec<&str> = ch["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .filter_map(|t| t["role"].as_str())
        .collect();
    assert_eq!(roles, vec!["control", "net-recv", "net-recv"]);
    assert!(ch["threads"][1]["cpus"].is_array());
    assert!(
        ch["threads"][1].get("manual").is_none(),
        "manual is omitted when false"
    );
    assert!(v["notes"].is_array());

    let p = plan(&m, &job(&[(Role::NetRecv, 2)]), Policy::Os).expect("plan");
    let v = serde_json::to_value(&p).expect("json");
    assert_eq!(v["policy"], "os");
    assert!(v["channels"][0]["threads"][0]["cpus"].is_null());
}

#[test]
fn describe_shows_channels_roles_and_cpu_lists() {
    let m = two_by_two();
    let p = plan(
        &m,
        &job(&[(Role::NetRecv, 2), (Role::IoWrite, 1)]),
        Policy::Bind,
    )
    .expect("plan");
    let text = crate::describe(&p);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "policy bind: 1 channel, 4 threads, buffer 1 GiB in 4 MiB slots"
    );
    assert!(lines[1].starts_with("channel  node  package  nics  buffer MiB  role"));
    assert!(
        lines[2].starts_with("0        1     0        eth1  1024.0"),
        "{text}"
    );
    assert!(text.contains("net-recv  2        4-5"), "{text}");
    let os = crate::describe(&plan(&m, &job(&[(Role::IoRead, 1)]), Policy::Os).expect("plan"));
    assert!(os.contains("unbound"), "{os}");
}

#[test]
fn errors_name_the_value_and_what_is_expected() {
    let mut m = two_by_two();
    m.block_devices.push(disk("sda", None));
    let base = job(&[(Role::IoRead, 2)]);
    let err = |j: &Job| plan(&m, j, Policy::Mts).expect_err("should fail");

    let mut j = base.clone();
    j.chunk_bytes = 1000;
    assert_eq!(err(&j), PlanError::BadChunkSize { chunk_bytes: 1000 });
    assert_eq!(
        err(&j).to_string(),
        "--chunk-size 1000 is invalid: expected a positive multiple of 4096 bytes"
    );
    j.chunk_bytes = 0;
    assert_eq!(err(&j), PlanError::BadChunkSize { chunk_bytes: 0 });

    let mut j = base.clone();
    j.nics = vec!["eth7".into()];
    assert_eq!(
        err(&j).to_string(),
        "unknown NIC \"eth7\": this machine has eth1"
    );
    let mut bare = m.clone();
    bare.nics.clear();
    assert_eq!(
        plan(&bare, &j, Policy::Os)
            .expect_err("no NICs")
            .to_string(),
        "unknown NIC \"eth7\": this machine has no NICs"
    );

    let mut j = base.clone();
    j.storage = vec!["nvme9n1".into()];
    assert_eq!(
        err(&j).to_string(),
        "unknown block device \"nvme9n1\": this machine has sda"
    );

    let mut j = base.clone();
    j.reserved_cpus = vec![99];
    assert_eq!(
        err(&j).to_string(),
        "reserved CPU 99 does not exist: allowed CPUs are 0-15"
    );

    let mut j = base.clone();
    j.reserved_cpus = (0..16).collect();
    assert_eq!(
        err(&j).to_string(),
        "--reserve-cores 0-15 leaves no usable CPU: allowed CPUs are 0-15"
    );

    let mut no_mem = m.clone();
    for n in &mut no_mem.nodes {
        n.memory_bytes = 0;
    }
    let e = plan(&no_mem, &base, Policy::Mts).expect_err("no node");
    assert_eq!(e, PlanError::NoUsableNode);
    assert_eq!(
        e.to_string(),
        "the machine has no NUMA node with both usable CPUs and memory"
    );

    let mut j = base.clone();
    j.threads = vec![(Role::Compress, 5000)];
    j.buffer_bytes = u64::MAX;
    assert_eq!(
        err(&j).to_string(),
        "the job asks for 5000 threads: expected at most 4096"
    );

    let mut j = base.clone();
    j.placements = vec!["io-read=mem:9,exec:0".parse().expect("parse")];
    assert_eq!(
        err(&j).to_string(),
        "--place io-read: node 9 does not exist: expected one of the machine's nodes 0-3"
    );
    j.placements = vec!["io-read=mem:0,exec:0+7".parse().expect("parse")];
    assert!(err(&j)
        .to_string()
        .starts_with("--place io-read: node 7 does not exist"));
    let mut no_mem0 = m.clone();
    no_mem0.nodes[0].memory_bytes = 0;
    j.placements = vec!["io-read=mem:0,exec:os".parse().expect("parse")];
    assert_eq!(
        plan(&no_mem0, &j, Policy::Mts)
            .expect_err("no memory")
            .to_string(),
        "--place io-read: node 0 has no memory: expected a node with memory for the buffers"
    );
    // A memory-less node can still execute.
    j.placements = vec!["io-read=mem:1,exec:0".parse().expect("parse")];
    assert!(plan(&no_mem0, &j, Policy::Mts).is_ok());
    j.reserved_cpus = vec![0, 1, 2, 3];
    assert_eq!(
        err(&j).to_string(),
        "--place io-read: node 0 has no usable CPU (all reserved or outside the allowed \
         cpuset): expected a node with CPUs to run on"
    );
    let mut j = base.clone();
    j.placements = vec![ManualPlacement {
        role: Role::IoRead,
        mem_node: 0,
        exec: ExecDomain::Nodes(Vec::new()),
    }];
    assert_eq!(
        err(&j).to_string(),
        "--place io-read: node 0 is given with an empty exec list: expected exec:A[+B...] or exec:os"
    );

    let mut j = base.clone();
    j.buffer_bytes = 4 * MIB;
    assert_eq!(
        err(&j),
        PlanError::BufferTooSmall {
            buffer_bytes: 4 * MIB,
            chunk_bytes: 4 * MIB,
            threads: 2,
            needed: 8 * MIB
        }
    );
    assert_eq!(
        err(&j).to_string(),
        "--buffer-mem 4194304 is too small: 2 threads need at least one 4194304-byte slot each (8388608 bytes)"
    );
}

#[test]
fn a_repeated_placement_uses_the_last_one_and_notes_it() {
    let m = two_by_two();
    let mut j = job(&[(Role::IoRead, 1)]);
    j.placements = vec![
        "io-read=mem:0,exec:0".parse().expect("parse"),
        "io-read=mem:2,exec:2".parse().expect("parse"),
    ];
    let p = plan(&m, &j, Policy::Nmts).expect("plan");
    let (c, _) = threads_of(&p, Role::IoRead)[0];
    assert_eq!(c.numa_node, Some(2));
    assert!(p.notes.iter().any(|n| n.contains("more than once")));
}

#[test]
fn a_job_without_threads_still_gets_one_control_thread_and_the_whole_cap() {
    let m = two_by_two();
    for policy in Policy::ALL {
        let p = plan(&m, &job(&[]), policy).expect("plan");
        assert_eq!(p.channels.len(), 1, "{policy}");
        assert_eq!(p.channels[0].threads.len(), 1);
        assert_eq!(p.channels[0].threads[0].role, Role::Control);
        assert_eq!(p.buffer_bytes(), GIB);
    }
}

#[test]
fn the_largest_job_on_a_large_machine_plans_quickly() {
    // 8 sockets x 8 nodes x 32 cores x 2 PUs, THREADS_MAX threads: a limit check as much
    // as a test (planning is a start-up cost, it must stay far below a second).
    let mut m = Machine::uniform(8, 8, 32, 2, GIB);
    m.nics.push(nic("eth0", Some(5)));
    m.block_devices.push(disk("nvme0n1", Some(40)));
    let per_role = u32::try_from(THREADS_MAX).expect("fits") / 7;
    let mut j = job(&Role::ALL.map(|r| (r, per_role)));
    j.storage = vec!["nvme0n1".into()];
    j.chunk_bytes = 4096;
    let started = std::time::Instant::now();
    for policy in Policy::ALL {
        let p = plan(&m, &j, policy).expect("plan");
        assert_eq!(p.buffer_bytes(), GIB);
    }
    let elapsed = started.elapsed();
    assert!(elapsed.as_secs() < 20, "planning took {elapsed:?}");
}
