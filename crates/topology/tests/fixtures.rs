//! Discovery against the hand-made hwloc XML fixtures in `testdata/topologies/`, a
//! synthetic machine, this machine (with a restricted CPU affinity), and bad inputs.
#![cfg(feature = "discover")]
// Helpers outside #[test] functions unwrap too: a panic here is a failed assertion.
#![allow(clippy::unwrap_used)]

use sluice_topology::{discover, storage_for_path, Machine, TopologyError, TopologySource};
use std::path::PathBuf;

fn fixture_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/topologies")
        .join(name)
}

fn fixture(name: &str) -> Machine {
    let path = fixture_path(name);
    discover(&TopologySource::Xml(path.clone()))
        .unwrap_or_else(|e| panic!("{} does not load: {e}", path.display()))
}

fn range(r: std::ops::Range<u32>) -> Vec<u32> {
    r.collect()
}

/// Checks what every machine must satisfy: nodes, cores and packages only hold allowed
/// PUs, each PU is in exactly one node, distance rows are square with 10 on the diagonal.
fn assert_consistent(m: &Machine) {
    let mut all: Vec<u32> = m.nodes.iter().flat_map(|n| n.cpus.clone()).collect();
    all.sort_unstable();
    assert_eq!(all, m.allowed_cpus, "every allowed PU in exactly one node");
    for (i, node) in m.nodes.iter().enumerate() {
        let core_pus: Vec<u32> = node.cores.iter().flat_map(|c| c.pus.clone()).collect();
        let mut sorted = core_pus.clone();
        sorted.sort_unstable();
        assert_eq!(
            sorted, node.cpus,
            "node {} cores cover its cpus",
            node.os_index
        );
        if !node.distances.is_empty() {
            assert_eq!(node.distances.len(), m.nodes.len());
            assert_eq!(node.distances[i], 10);
        }
    }
    for pkg in &m.packages {
        assert!(pkg.cpus.iter().all(|c| m.allowed_cpus.contains(c)));
        for n in &pkg.nodes {
            assert_eq!(m.node(*n).unwrap().package, Some(pkg.os_index));
        }
    }
}

const GIB: u64 = 1 << 30;

#[test]
fn dtn_two_sockets_two_nics_one_nvme() {
    let m = fixture("dtn-2x-e5-2643-2nic.xml");
    assert_consistent(&m);
    assert!(m.source.ends_with("dtn-2x-e5-2643-2nic.xml"));
    assert_eq!(m.packages.len(), 2);
    assert_eq!(m.nodes.len(), 2);
    assert_eq!(m.allowed_cpus, range(0..16));
    // Linux numbering: hyperthread siblings are 8 apart.
    assert_eq!(m.nodes[0].cpus, vec![0, 1, 2, 3, 8, 9, 10, 11]);
    assert_eq!(m.nodes[1].cpus, vec![4, 5, 6, 7, 12, 13, 14, 15]);
    assert_eq!(m.nodes[0].cores.len(), 4);
    assert_eq!(m.nodes[0].cores[0].pus, vec![0, 8]);
    assert_eq!(m.nodes[1].cores[3].pus, vec![7, 15]);
    assert_eq!(m.nodes[0].memory_bytes, 64 * GIB);
    assert_eq!(m.nodes[1].memory_bytes, 64 * GIB);
    assert_eq!(m.nodes[0].distances, vec![10, 21]);
    assert_eq!(m.nodes[1].distances, vec![21, 10]);
    assert_eq!(m.packages[0].nodes, vec![0]);
    assert_eq!(m.packages[1].nodes, vec![1]);
    assert_eq!(m.packages[1].cpus, m.nodes[1].cpus);

    // The ConnectX-3 OpenFabrics devices (mlx4_*) are not NICs.
    let names: Vec<&str> = m.nics.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, vec!["eth0", "eth1"]);
    let eth0 = m.nic("eth0").unwrap();
    assert_eq!(eth0.numa_node, Some(0));
    assert_eq!(eth0.mac.as_deref(), Some("e4:1d:2d:7a:10:40"));
    assert_eq!(eth0.link_speed_mbps, Some(40_000));
    assert_eq!(eth0.pci_bus_id.as_deref(), Some("0000:03:00.0"));
    assert!(eth0.addresses.is_empty());
    let eth1 = m.nic("eth1").unwrap();
    assert_eq!(eth1.numa_node, Some(1));
    assert_eq!(eth1.pci_bus_id.as_deref(), Some("0000:82:00.0"));

    assert_eq!(m.block_devices.len(), 1);
    let nvme = m.block_device("nvme0n1").unwrap();
    assert_eq!(nvme.numa_node, Some(1));
    assert_eq!(nvme.size_bytes, Some(1_562_813_784 * 1024));
    assert_eq!(nvme.rotational, None);
}

#[test]
fn epyc_nps4_four_nodes_per_socket() {
    let m = fixture("epyc-2s-nps4-nic-node1.xml");
    assert_consistent(&m);
    assert_eq!(m.packages.len(), 2);
    assert_eq!(m.nodes.len(), 8);
    assert_eq!(m.allowed_cpus, range(0..128));
    for node in &m.nodes {
        let n = node.os_index;
        let mut want = range(n * 8..n * 8 + 8);
        want.extend(range(64 + n * 8..64 + n * 8 + 8));
        assert_eq!(node.cpus, want, "node {n}");
        assert_eq!(node.cores.len(), 8, "node {n}");
        assert!(node
            .cores
            .iter()
            .all(|c| c.pus.len() == 2 && c.pus[1] == c.pus[0] + 64));
        assert_eq!(node.memory_bytes, 32 * GIB);
        assert_eq!(node.package, Some(n / 4));
        let want_row: Vec<u32> = (0..8)
            .map(|o| {
                if o == n {
                    10
                } else if o / 4 == n / 4 {
                    12
                } else {
                    32
                }
            })
            .collect();
        assert_eq!(node.distances, want_row, "node {n}");
    }
    assert_eq!(m.packages[0].nodes, vec![0, 1, 2, 3]);
    assert_eq!(m.packages[1].nodes, vec![4, 5, 6, 7]);
    assert_eq!(m.packages[1].cpus.len(), 64);
    assert_eq!(m.distance(1, 2), 12);
    assert_eq!(m.distance(1, 5), 32);

    assert_eq!(
        m.nics.len(),
        1,
        "mlx5_0 is an OpenFabrics device, not a NIC"
    );
    let nic = m.nic("ens1f0").unwrap();
    assert_eq!(nic.numa_node, Some(1));
    assert_eq!(nic.link_speed_mbps, Some(100_000));
    assert_eq!(nic.pci_bus_id.as_deref(), Some("0000:41:00.0"));
    assert_eq!(m.block_devices.len(), 1);
    assert_eq!(m.block_device("nvme0n1").unwrap().numa_node, Some(5));
}

#[test]
fn opteron_6272_four_sockets_eight_nodes() {
    let m = fixture("opteron-6272-4s-8n.xml");
    assert_consistent(&m);
    assert_eq!(m.packages.len(), 4);
    assert_eq!(m.nodes.len(), 8);
    assert_eq!(m.allowed_cpus, range(0..64));
    for node in &m.nodes {
        let n = node.os_index;
        assert_eq!(node.cpus, range(n * 8..n * 8 + 8), "node {n}");
        assert_eq!(node.cores.len(), 8);
        assert!(node.cores.iter().all(|c| c.pus.len() == 1));
        assert_eq!(node.package, Some(n / 2));
        assert_eq!(node.memory_bytes, 32 * GIB);
    }
    for pkg in &m.packages {
        let p = pkg.os_index;
        assert_eq!(pkg.nodes, vec![2 * p, 2 * p + 1]);
        assert_eq!(pkg.cpus, range(p * 16..p * 16 + 16));
    }
    let rows: Vec<Vec<u32>> = m.nodes.iter().map(|n| n.distances.clone()).collect();
    assert_eq!(
        rows,
        vec![
            vec![10, 16, 16, 22, 16, 22, 16, 22],
            vec![16, 10, 16, 22, 22, 16, 22, 16],
            vec![16, 16, 10, 16, 16, 16, 16, 22],
            vec![22, 22, 16, 10, 16, 16, 22, 16],
            vec![16, 22, 16, 16, 10, 16, 16, 16],
            vec![22, 16, 16, 16, 16, 10, 22, 22],
            vec![16, 22, 16, 22, 16, 22, 10, 16],
            vec![22, 16, 22, 16, 16, 22, 16, 10],
        ]
    );
    let eth0 = m.nic("eth0").unwrap();
    assert_eq!(eth0.numa_node, Some(0));
    assert_eq!(eth0.link_speed_mbps, Some(1000));
    assert_eq!(m.nics.len(), 1);
    let sda = m.block_device("sda").unwrap();
    assert_eq!(sda.numa_node, Some(0));
    assert_eq!(sda.size_bytes, Some(2_000_472_768 * 1024));
}

#[test]
fn fixture_machine_survives_json() {
    let m = fixture("dtn-2x-e5-2643-2nic.xml");
    let json = serde_json::to_string(&m).unwrap();
    let back: Machine = serde_json::from_str(&json).unwrap();
    assert_eq!(back, m);
}

#[test]
fn synthetic_two_packages_of_two_nodes() {
    let source: TopologySource = "synthetic:\"pack:2 numa:2 core:4 pu:1\"".parse().unwrap();
    let m = discover(&source).unwrap();
    assert_consistent(&m);
    assert_eq!(m.source, "synthetic:pack:2 numa:2 core:4 pu:1");
    assert_eq!(m.nodes.len(), 4);
    assert_eq!(m.cpu_count(), 16);
    assert_eq!(m.allowed_cpus, range(0..16));
    assert_eq!(m.packages.len(), 2);
    assert_eq!(m.packages[0].nodes, vec![0, 1]);
    assert_eq!(m.packages[1].nodes, vec![2, 3]);
    assert_eq!(m.nodes[2].cpus, vec![8, 9, 10, 11]);
    assert_eq!(m.nodes[2].package, Some(1));
}

#[test]
fn this_machine_has_a_node_cpus_and_loopback() {
    let m = discover(&TopologySource::This).unwrap();
    assert_consistent(&m);
    assert_eq!(m.source, "this machine");
    assert!(!m.nodes.is_empty());
    assert!(!m.allowed_cpus.is_empty());
    assert!(m.nodes.iter().any(|n| n.memory_bytes > 0));
    // Distances come from hwloc or, failing that, from the kernel's rows in sysfs; a
    // one-node machine always has its own row, `[10]` (the JSON contract's example).
    for (i, node) in m.nodes.iter().enumerate() {
        assert_eq!(
            node.distances.len(),
            m.nodes.len(),
            "node {}",
            node.os_index
        );
        assert_eq!(node.distances[i], 10, "node {}", node.os_index);
    }
    let lo = m.nic("lo").expect("lo is listed from sysfs");
    assert_eq!(lo.numa_node, None);
    assert_eq!(lo.mac, None);
    assert!(
        lo.addresses.iter().any(|a| a == "127.0.0.1" || a == "::1"),
        "{:?}",
        lo.addresses
    );
    // The disk holding this source tree (if any) is one of the machine's disks.
    if let Some(disk) = storage_for_path(env!("CARGO_MANIFEST_DIR")).unwrap() {
        assert!(
            m.block_device(&disk).is_some(),
            "{disk} not in {:?}",
            m.block_devices
        );
    }
}

/// Environment variable that turns the affinity test into its restricted child.
const CHILD_CPU_VAR: &str = "SLUICE_TOPOLOGY_TEST_ONLY_CPU";

#[test]
fn this_machine_respects_cpu_affinity() {
    if let Ok(cpu) = std::env::var(CHILD_CPU_VAR) {
        // Child: started with its affinity restricted to this one CPU.
        let cpu: u32 = cpu.parse().unwrap();
        let m = discover(&TopologySource::This).unwrap();
        assert_eq!(m.allowed_cpus, vec![cpu]);
        assert_consistent(&m);
        assert_eq!(
            m.node_of_cpu(cpu).map(|n| m.node(n).unwrap().cpus.clone()),
            Some(vec![cpu])
        );
        for pkg in &m.packages {
            assert!(pkg.cpus.iter().all(|&c| c == cpu), "{pkg:?}");
        }
        return;
    }
    let parent = discover(&TopologySource::This).unwrap();
    let cpu = parent.allowed_cpus[0];
    let output = run_restricted_child(cpu);
    assert!(
        output.status.success(),
        "child restricted to CPU {cpu} failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    // The child really ran the test (not filtered out).
    assert!(String::from_utf8_lossy(&output.stdout).contains("1 passed"));
}

/// Re-runs this test binary's affinity test with the CPU affinity set to `cpu` only,
/// as `taskset -c CPU` would.
fn run_restricted_child(cpu: u32) -> std::process::Output {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().unwrap();
    let mut cmd = std::process::Command::new(exe);
    cmd.args([
        "--exact",
        "this_machine_respects_cpu_affinity",
        "--test-threads=1",
    ])
    .env(CHILD_CPU_VAR, cpu.to_string());
    let cpu = usize::try_from(cpu).unwrap();
    // SAFETY: the closure runs in the forked child before exec and only calls
    // async-signal-safe functions (CPU_ZERO/CPU_SET on a local set, the
    // sched_setaffinity system call); it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            // SAFETY: cpu_set_t is plain data; all zeroes is the empty set.
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_ZERO(&mut set);
            libc::CPU_SET(cpu, &mut set);
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.output().unwrap()
}

fn error_of(source: &str) -> TopologyError {
    let source: TopologySource = match source.parse() {
        Ok(s) => s,
        Err(e) => return e,
    };
    discover(&source).expect_err("bad input must not load")
}

#[test]
fn malformed_synthetic_description_is_a_typed_error() {
    let err = error_of("synthetic:\"pack:x\"");
    assert!(matches!(err, TopologyError::InvalidSynthetic { .. }));
    assert_eq!(
        err.to_string(),
        "invalid synthetic topology \"pack:x\": hwloc could not parse it \
         (expected e.g. \"pack:2 numa:2 core:8 pu:1\")"
    );
    assert!(matches!(
        error_of("synthetic:pack:2 bogus:3"),
        TopologyError::InvalidSynthetic { .. }
    ));
    assert!(matches!(
        error_of("synthetic:"),
        TopologyError::InvalidSynthetic { .. }
    ));
}

#[test]
fn missing_xml_file_is_a_typed_error() {
    let err = error_of("/nonexistent/sluice/x.xml");
    assert!(matches!(err, TopologyError::XmlUnreadable { .. }));
    assert_eq!(
        err.to_string(),
        "cannot read topology XML \"/nonexistent/sluice/x.xml\": No such file or directory"
    );
}

#[test]
fn directory_as_xml_is_a_typed_error() {
    let dir = fixture_path("");
    let err = discover(&TopologySource::Xml(dir.clone())).unwrap_err();
    assert!(matches!(err, TopologyError::XmlUnreadable { .. }), "{err}");
    assert!(err.to_string().ends_with(": Is a directory"), "{err}");
}

#[test]
fn invalid_xml_content_is_a_typed_error() {
    let dir = std::env::temp_dir().join(format!("sluice-topology-badxml-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases = [
        ("garbage.xml", "this is not XML at all\n"),
        (
            "html.xml",
            "<?xml version=\"1.0\"?>\n<html><body/></html>\n",
        ),
        (
            "truncated.xml",
            "<?xml version=\"1.0\"?>\n<topology version=\"2.0\">\n  <object type=\"Machine\"",
        ),
        (
            "empty-topology.xml",
            "<?xml version=\"1.0\"?>\n<topology version=\"2.0\">\n</topology>\n",
        ),
    ];
    for (name, text) in cases {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        let err = discover(&TopologySource::Xml(path.clone())).unwrap_err();
        assert!(
            matches!(err, TopologyError::InvalidXml { .. }),
            "{name}: {err}"
        );
        let msg = err.to_string();
        assert!(
            msg.starts_with(&format!("invalid topology XML \"{}\": ", path.display())),
            "{msg}"
        );
        assert!(
            msg.ends_with("(expected an hwloc XML export, e.g. from `lstopo --of xml`)"),
            "{msg}"
        );
        assert!(!msg.contains('\n'), "{msg}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
