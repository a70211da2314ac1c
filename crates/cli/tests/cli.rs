//! The `sluice` binary as a user meets it: `topo` and `plan`, their JSON contract, the
//! foundation issue's "done when" cases, exit codes and one-line errors for bad input,
//! `--help`, and the SVG drawings.
//!
//! Every test runs the real binary from the workspace root, so fixture paths read as in
//! the README (`testdata/topologies/...`). Tests that depend on this machine compare
//! with what the kernel says rather than with fixed numbers.

mod common;

use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const DTN: &str = "testdata/topologies/dtn-2x-e5-2643-2nic.xml";
const EPYC: &str = "testdata/topologies/epyc-2s-nps4-nic-node1.xml";
const OPTERON: &str = "testdata/topologies/opteron-6272-4s-8n.xml";
const QEMU: &str = "testdata/topologies/qemu-2node-nic1.xml";
const SYNTH_4N: &str = "synthetic:pack:2 numa:2 core:4 pu:1";
const POLICIES: [&str; 6] = ["os", "bind", "smts", "nmts", "mts", "auto"];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// What one run of `sluice` left behind.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    what: String,
}

impl Run {
    fn ok(self) -> Self {
        assert_eq!(self.code, Some(0), "{}: stderr: {}", self.what, self.stderr);
        self
    }

    fn json(self) -> Value {
        let run = self.ok();
        serde_json::from_str(&run.stdout)
            .unwrap_or_else(|e| panic!("{}: stdout is not JSON ({e}): {}", run.what, run.stdout))
    }
}

fn sluice(args: &[&str]) -> Run {
    let output = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .current_dir(workspace_root())
        .env_remove("SLUICE_LOG")
        .output()
        .expect("the sluice binary runs");
    run_of(args, output)
}

fn run_of(args: &[&str], output: Output) -> Run {
    Run {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        what: format!("sluice {}", args.join(" ")),
    }
}

/// Asserts the contract for bad input: exit code 2, nothing on stdout, exactly one line
/// on stderr that names `value`, and no panic.
#[track_caller]
fn assert_bad_input(args: &[&str], value: &str) {
    let run = sluice(args);
    assert_eq!(
        run.code,
        Some(2),
        "{}: want exit 2; stderr: {}",
        run.what,
        run.stderr
    );
    assert_eq!(run.stdout, "", "{}: stdout should be empty", run.what);
    assert_eq!(
        run.stderr.lines().count(),
        1,
        "{}: want exactly one line on stderr, got: {:?}",
        run.what,
        run.stderr
    );
    assert!(run.stderr.ends_with('\n'), "{}: {:?}", run.what, run.stderr);
    assert!(
        run.stderr.starts_with("sluice: error: "),
        "{}: {:?}",
        run.what,
        run.stderr
    );
    assert!(
        run.stderr.contains(value),
        "{}: the message should name {value:?}: {:?}",
        run.what,
        run.stderr
    );
    assert!(
        !run.stderr.contains("panicked"),
        "{}: {}",
        run.what,
        run.stderr
    );
}

/// Asserts that clap rejected the command line: exit code 2, usage on stderr.
#[track_caller]
fn assert_usage_error(args: &[&str]) {
    let run = sluice(args);
    assert_eq!(
        run.code,
        Some(2),
        "{}: want exit 2; stderr: {}",
        run.what,
        run.stderr
    );
    assert_eq!(run.stdout, "", "{}", run.what);
    assert!(
        run.stderr.contains("error: ") || run.stderr.contains("Usage: sluice"),
        "{}: {:?}",
        run.what,
        run.stderr
    );
    assert!(
        !run.stderr.contains("panicked"),
        "{}: {}",
        run.what,
        run.stderr
    );
}

fn u32s(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap_or_else(|| panic!("{v} is not an array"))
        .iter()
        .map(|x| {
            let n = x.as_u64().unwrap_or_else(|| panic!("{x} is not a number"));
            u32::try_from(n).expect("a CPU or node number")
        })
        .collect()
}

fn array(v: &Value) -> &Vec<Value> {
    v.as_array()
        .unwrap_or_else(|| panic!("{v} is not an array"))
}

/// Node OS index -> its CPUs, from `sluice topo --json`.
fn node_cpus(topo: &Value) -> Vec<(u32, BTreeSet<u32>)> {
    array(&topo["nodes"])
        .iter()
        .map(|n| {
            let id = u32s(&Value::Array(vec![n["os_index"].clone()]))[0];
            (id, u32s(&n["cpus"]).into_iter().collect())
        })
        .collect()
}

fn cpus_of(topo: &Value, node: u32) -> BTreeSet<u32> {
    node_cpus(topo)
        .into_iter()
        .find(|(id, _)| *id == node)
        .map(|(_, cpus)| cpus)
        .unwrap_or_else(|| panic!("node {node} not in the topology"))
}

/// Every thread of a plan as (channel, thread).
fn threads(plan: &Value) -> Vec<(&Value, &Value)> {
    array(&plan["channels"])
        .iter()
        .flat_map(|c| array(&c["threads"]).iter().map(move |t| (c, t)))
        .collect()
}

fn buffer_bytes(plan: &Value) -> u64 {
    array(&plan["channels"])
        .iter()
        .map(|c| c["buffer_bytes"].as_u64().expect("buffer_bytes"))
        .sum()
}

/// The kernel's list format (`0-3,8`), as in `/proc/self/status` and `/sys`.
fn parse_cpulist(list: &str) -> BTreeSet<u32> {
    let mut cpus = BTreeSet::new();
    for item in list.trim().split(',').filter(|s| !s.is_empty()) {
        let (a, b) = item.split_once('-').unwrap_or((item, item));
        let (a, b): (u32, u32) = (a.parse().expect("cpu"), b.parse().expect("cpu"));
        cpus.extend(a..=b);
    }
    cpus
}

// ---------------------------------------------------------------------------------------
// Done when: `sluice topo --json` here shows this machine (on the build machine: 1 node,
// 2 CPUs).

#[test]
fn topo_json_of_this_machine_agrees_with_the_kernel() {
    let topo = sluice(&["topo", "--json"]).json();
    for key in ["packages", "nodes", "nics", "block_devices"] {
        assert!(topo[key].is_array(), "topo JSON lacks {key}: {topo}");
    }
    let nodes = array(&topo["nodes"]);
    let ids: Vec<u32> = node_cpus(&topo).iter().map(|(id, _)| *id).collect();

    // The CPUs this process may use, as the kernel says; the child inherits them.
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let allowed_line = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .expect("Cpus_allowed_list");
    let allowed = parse_cpulist(allowed_line);
    let reported: BTreeSet<u32> = u32s(&topo["allowed_cpus"]).into_iter().collect();
    assert!(
        reported.is_subset(&allowed) && !reported.is_empty(),
        "allowed_cpus {reported:?} vs kernel {allowed:?}"
    );
    let union: BTreeSet<u32> = node_cpus(&topo).into_iter().flat_map(|(_, c)| c).collect();
    assert_eq!(union, reported, "node CPUs must add up to the allowed CPUs");

    // Nodes: the ones /sys lists, each with the CPUs /sys gives it (within the allowed).
    let sys = Path::new("/sys/devices/system/node");
    if sys.is_dir() {
        let mut sys_nodes: Vec<u32> = std::fs::read_dir(sys)
            .expect("read /sys/devices/system/node")
            .filter_map(|e| {
                e.ok()?
                    .file_name()
                    .to_str()?
                    .strip_prefix("node")?
                    .parse()
                    .ok()
            })
            .collect();
        sys_nodes.sort_unstable();
        assert_eq!(ids, sys_nodes, "NUMA nodes");
        for id in &ids {
            let list = std::fs::read_to_string(sys.join(format!("node{id}/cpulist")))
                .expect("node cpulist");
            let want: BTreeSet<u32> = parse_cpulist(&list)
                .intersection(&reported)
                .copied()
                .collect();
            assert_eq!(cpus_of(&topo, *id), want, "CPUs of node {id}");
        }
    }
    for node in nodes {
        let distances = u32s(&node["distances"]);
        assert!(
            distances.is_empty() || distances.len() == nodes.len(),
            "a distance row has one entry per node: {node}"
        );
        assert!(node["memory_bytes"].is_u64(), "{node}");
    }
    for nic in array(&topo["nics"]) {
        assert!(nic["name"].is_string(), "{nic}");
        match &nic["numa_node"] {
            Value::Null => {}
            n => assert!(
                ids.contains(&u32s(&Value::Array(vec![n.clone()]))[0]),
                "{nic}"
            ),
        }
    }
    eprintln!(
        "this machine: {} node(s), {} allowed CPU(s)",
        nodes.len(),
        reported.len()
    );
}

// Done when: mts on a synthetic 2-package, 4-node machine keeps every thread inside its
// channel's node, and uses all four nodes.
#[test]
fn mts_on_four_synthetic_nodes_keeps_threads_in_their_channel_node() {
    let topo = sluice(&["topo", "--topology", SYNTH_4N, "--json"]).json();
    let plan = sluice(&["plan", "--topology", SYNTH_4N, "--policy", "mts", "--json"]).json();
    assert_eq!(plan["policy"], "mts");
    let mut used = BTreeSet::new();
    for (channel, thread) in threads(&plan) {
        let node = u32s(&Value::Array(vec![channel["numa_node"].clone()]))[0];
        let cpus: BTreeSet<u32> = u32s(&thread["cpus"]).into_iter().collect();
        assert!(!cpus.is_empty(), "{thread}");
        assert!(
            cpus.is_subset(&cpus_of(&topo, node)),
            "thread {thread} runs outside its channel's node {node}"
        );
        used.insert(node);
    }
    assert_eq!(
        used,
        BTreeSet::from([0, 1, 2, 3]),
        "mts spreads over all 4 nodes"
    );
    // --buffer-mem auto: 4 slots for each of 8 data threads (2 streams and 2 I/O threads
    // per direction), and 3 more for each io-read thread's reads in flight, of 4 MiB.
    assert_eq!(buffer_bytes(&plan), (8 * 4 + 2 * 3) * (4 << 20));
    assert!(plan["notes"].is_array());
}

// Done when: on the two-socket DTN, `--nic eth1 --policy bind` puts every thread and all
// buffer bytes on node 1, eth1's node.
#[test]
fn bind_on_the_dtn_puts_everything_on_the_nic_node() {
    let topo = sluice(&["topo", "--topology", DTN, "--json"]).json();
    let eth1 = array(&topo["nics"])
        .iter()
        .find(|n| n["name"] == "eth1")
        .expect("eth1 in the DTN fixture");
    assert_eq!(eth1["numa_node"], 1);
    let node1 = cpus_of(&topo, 1);

    let plan = sluice(&[
        "plan",
        "--topology",
        DTN,
        "--nic",
        "eth1",
        "--policy",
        "bind",
        "--json",
    ])
    .json();
    assert_eq!(plan["policy"], "bind");
    for channel in array(&plan["channels"]) {
        assert_eq!(channel["numa_node"], 1, "{channel}");
        assert_eq!(channel["nics"], serde_json::json!(["eth1"]), "{channel}");
    }
    let all = threads(&plan);
    assert!(all.len() >= 9, "control + 2 of each data role: {plan}");
    for (_, thread) in all {
        let cpus: BTreeSet<u32> = u32s(&thread["cpus"]).into_iter().collect();
        assert!(
            !cpus.is_empty() && cpus.is_subset(&node1),
            "{thread} not on node 1"
        );
    }
    let on_node1: u64 = array(&plan["channels"])
        .iter()
        .filter(|c| c["numa_node"] == 1)
        .map(|c| c["buffer_bytes"].as_u64().expect("bytes"))
        .sum();
    assert_eq!(on_node1, 152 << 20, "all buffer bytes on node 1");
    assert_eq!(buffer_bytes(&plan), 152 << 20);
}

// Done when: `--policy os` binds nothing (threads carry "cpus": null).
#[test]
fn os_binds_nothing() {
    for topology in [DTN, EPYC, SYNTH_4N] {
        let plan = sluice(&["plan", "--topology", topology, "--policy", "os", "--json"]).json();
        assert_eq!(plan["policy"], "os");
        for channel in array(&plan["channels"]) {
            assert!(channel["numa_node"].is_null(), "{channel}");
        }
        for (_, thread) in threads(&plan) {
            assert!(thread.get("cpus").is_some_and(Value::is_null), "{thread}");
        }
    }
}

// Done when: `sluice plan --apply --verify` passes here, and its JSON carries the
// verification.
#[test]
fn apply_verify_passes_on_this_machine_for_every_policy() {
    let run = sluice(&["plan", "--apply", "--verify"]).ok();
    assert!(run.stdout.contains("placement check"), "{}", run.stdout);
    assert!(
        run.stdout.contains("everything where planned"),
        "{}",
        run.stdout
    );

    for policy in POLICIES {
        let plan = sluice(&["plan", "--apply", "--verify", "--json", "--policy", policy]).json();
        let verification = &plan["verification"];
        assert!(
            verification.is_object(),
            "{policy}: no verification object: {plan}"
        );
        assert_eq!(verification["ok"], true, "{policy}: {verification}");
        assert_eq!(
            array(&verification["threads"]).len(),
            threads(&plan).len(),
            "{policy}: one row per planned thread"
        );
        assert_eq!(
            array(&verification["partitions"]).len(),
            array(&plan["channels"]).len(),
            "{policy}: one row per channel"
        );
        for row in array(&verification["threads"]) {
            assert_eq!(row["ok"], true, "{policy}: {row}");
        }
    }
}

#[test]
fn plan_json_follows_the_contract() {
    let plan = sluice(&["plan", "--topology", EPYC, "--policy", "mts", "--json"]).json();
    assert_eq!(plan["policy"], "mts");
    assert!(plan["notes"].is_array());
    for channel in array(&plan["channels"]) {
        assert!(channel["numa_node"].is_u64(), "{channel}");
        assert!(channel["nics"].is_array(), "{channel}");
        assert!(channel["buffer_bytes"].is_u64(), "{channel}");
        for thread in array(&channel["threads"]) {
            assert!(thread["role"].is_string(), "{thread}");
            assert!(thread["cpus"].is_array(), "{thread}");
        }
    }
    // Net threads on the NIC's node (ens1f0 on node 1), OS indexes: node 1 is 8-15,72-79.
    let node1: BTreeSet<u32> = (8..16).chain(72..80).collect();
    for (channel, thread) in threads(&plan) {
        let role = thread["role"].as_str().expect("role");
        if role == "net-send" || role == "net-recv" {
            assert_eq!(channel["numa_node"], 1, "{thread}");
            let cpus: BTreeSet<u32> = u32s(&thread["cpus"]).into_iter().collect();
            assert!(cpus.is_subset(&node1), "{thread}");
        }
    }
}

#[test]
fn explain_says_why() {
    let run = sluice(&["plan", "--topology", DTN, "--explain"]).ok();
    assert!(
        run.stdout.starts_with("policy mts (requested auto)"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("\nwhy:\n"), "{}", run.stdout);
    assert!(run.stdout.contains("auto chose mts"), "{}", run.stdout);
}

#[test]
fn topo_human_output_has_the_distance_matrix() {
    let run = sluice(&["topo", "--topology", DTN]).ok();
    let out = &run.stdout;
    assert!(
        out.contains("2 package(s), 2 NUMA node(s), 8 core(s), 16 PU(s)"),
        "{out}"
    );
    assert!(out.contains("node 1 (package 1): cpus 4-7,12-15"), "{out}");
    assert!(out.contains("  nic  eth1  40000 Mb/s"), "{out}");
    assert!(
        out.contains("node distances:\nnode    0   1\n  0:   10  21\n  1:   21  10\n"),
        "{out}"
    );

    let run = sluice(&["topo", "--topology", OPTERON]).ok();
    assert!(
        run.stdout
            .contains("  0:   10  16  16  22  16  22  16  22\n"),
        "{}",
        run.stdout
    );
}

/// hwloc's GPU components never run: `gl` connected to every X display it found, and
/// they all cost start-up time. hwloc names its enabled components where
/// `HWLOC_COMPONENTS_VERBOSE` is set; the machine's own ones (`linux`) must still be
/// there.
#[test]
fn discovery_loads_no_gpu_components() {
    let output = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("topo")
        .env("HWLOC_COMPONENTS_VERBOSE", "1")
        .output()
        .expect("the sluice binary runs");
    let run = run_of(&["topo"], output).ok();
    let stderr = &run.stderr;
    let enabled = stderr
        .lines()
        .find(|l| l.contains("Final list of enabled discovery components"))
        .unwrap_or_else(|| panic!("hwloc names its components: {stderr}"));
    assert!(enabled.contains("linux("), "{enabled}");
    for gpu in ["gl(", "opencl(", "cuda(", "nvml(", "rsmi(", "levelzero("] {
        assert!(!enabled.contains(gpu), "{gpu} in {enabled}");
    }
}

// ---------------------------------------------------------------------------------------
// Bad input: one line on stderr naming the value, exit code 2.

#[test]
fn unknown_policy() {
    assert_bad_input(
        &["plan", "--topology", DTN, "--policy", "fastest"],
        "fastest",
    );
    assert_bad_input(&["plan", "--policy", "MTS2"], "MTS2");
}

#[test]
fn malformed_synthetic_topology() {
    assert_bad_input(
        &["topo", "--topology", "synthetic:pack:two core:2"],
        "pack:two core:2",
    );
    assert_bad_input(&["plan", "--topology", "synthetic:numa:0"], "numa:0");
    assert_bad_input(&["topo", "--topology", "synthetic:"], "synthetic");
}

#[test]
fn unreadable_or_invalid_topology_xml() {
    assert_bad_input(
        &[
            "topo",
            "--topology",
            "testdata/topologies/no-such-machine.xml",
        ],
        "no-such-machine.xml",
    );
    assert_bad_input(
        &["topo", "--topology", "testdata/topologies"],
        "testdata/topologies",
    );
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let broken = dir.join("sluice-cli-broken.xml");
    let text = std::fs::read_to_string(workspace_root().join(DTN)).expect("fixture");
    std::fs::write(&broken, &text[..text.len() / 2]).expect("write");
    let broken = broken.to_str().expect("utf-8 path");
    assert_bad_input(&["topo", "--topology", broken], broken);
    assert_bad_input(&["plan", "--topology", broken], broken);
    let not_xml = dir.join("sluice-cli-not-a-topology.xml");
    std::fs::write(&not_xml, "<?xml version=\"1.0\"?><inventory/>\n").expect("write");
    let not_xml = not_xml.to_str().expect("utf-8 path");
    assert_bad_input(&["topo", "--topology", not_xml], not_xml);
}

#[test]
fn nic_that_does_not_exist() {
    assert_bad_input(&["plan", "--topology", DTN, "--nic", "eth9"], "eth9");
    assert_bad_input(
        &["plan", "--topology", DTN, "--nic", "eth1", "--nic", "ib0"],
        "ib0",
    );
}

#[test]
fn reservations_that_leave_no_core() {
    assert_bad_input(
        &["plan", "--topology", DTN, "--reserve-cores", "0-15"],
        "0-15",
    );
    assert_bad_input(
        &[
            "plan",
            "--topology",
            QEMU,
            "--reserve-cores",
            "0-3",
            "--policy",
            "os",
        ],
        "0-3",
    );
    assert_bad_input(&["plan", "--topology", DTN, "--reserve-cores", "99"], "99");
}

#[test]
fn bad_reserve_cores_list() {
    assert_bad_input(
        &["plan", "--topology", DTN, "--reserve-cores", "x"],
        "\"x\"",
    );
    assert_bad_input(
        &["plan", "--topology", DTN, "--reserve-cores", "7-3"],
        "7-3",
    );
    assert_bad_input(
        &["plan", "--topology", DTN, "--reserve-cores", "0,,2"],
        "0,,2",
    );
}

#[test]
fn buffer_mem_auto_gives_four_slots_per_data_thread_and_one_per_read_in_flight() {
    let total = |extra: &[&str]| {
        let mut args = vec!["plan", "--topology", DTN, "--json"];
        args.extend_from_slice(extra);
        buffer_bytes(&sluice(&args).json())
    };
    // Both sides: 2+2 streams, 2+2 I/O threads; 4 MiB chunks; each of the 2 io-read
    // threads keeps 4 reads in flight (3 slots beyond its own).
    assert_eq!(total(&[]), (8 * 4 + 2 * 3) * (4 << 20));
    assert_eq!(
        total(&["--buffer-mem", "auto"]),
        (8 * 4 + 2 * 3) * (4 << 20)
    );
    assert_eq!(total(&["--read-depth", "1"]), 8 * 4 * (4 << 20));
    assert_eq!(total(&["--read-depth", "8"]), (8 * 4 + 2 * 7) * (4 << 20));
    assert_eq!(total(&["--io-threads", "4"]), (12 * 4 + 4 * 3) * (4 << 20));
    assert_eq!(
        total(&["--side", "send", "--chunk-size", "1MiB"]),
        (4 * 4 + 2 * 3) * (1 << 20)
    );
    // The receiving side reads nothing.
    assert_eq!(total(&["--side", "recv"]), 4 * 4 * (4 << 20));
    // At least 8 slots; an explicit size is taken as given.
    assert_eq!(
        total(&[
            "--side",
            "send",
            "--streams",
            "1",
            "--io-threads",
            "1",
            "--read-depth",
            "1"
        ]),
        8 * (4 << 20)
    );
    assert_eq!(total(&["--buffer-mem", "1GiB"]), 1 << 30);
}

#[test]
fn buffer_cap_too_small_for_one_slot_per_thread() {
    assert_bad_input(
        &["plan", "--topology", DTN, "--buffer-mem", "16MiB"],
        "16MiB",
    );
    assert_bad_input(
        &[
            "plan",
            "--topology",
            DTN,
            "--buffer-mem",
            "256MiB",
            "--chunk-size",
            "64MiB",
        ],
        "64MiB",
    );
    assert_bad_input(&["plan", "--topology", DTN, "--buffer-mem", "lots"], "lots");
}

#[test]
fn bad_chunk_size() {
    for value in ["5000", "0", "5KiB", "4X", ""] {
        assert_bad_input(&["plan", "--topology", DTN, "--chunk-size", value], value);
    }
    assert_bad_input(&["plan", "--topology", DTN, "--chunk-size=-4MiB"], "-4MiB");
    // What the protocol carries: a power of two from 64 KiB to 64 MiB. Before, 12KiB
    // passed the CLI and a daemon started with it failed every session.
    for value in ["12KiB", "32KiB", "128MiB", "3MiB"] {
        assert_bad_input(&["plan", "--topology", DTN, "--chunk-size", value], value);
        let root = tempfile::tempdir().unwrap();
        let serve = [
            "serve",
            "--root",
            root.path().to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--chunk-size",
            value,
        ];
        assert_bad_input(&serve, "power of two");
        let cp = ["cp", "--chunk-size", value, "a", "sluice://127.0.0.1:9/b"];
        assert_bad_input(&cp, "power of two");
    }
    // --streams beyond what a session may open is refused before anything is dialled.
    for streams in ["0", "300"] {
        assert_usage_error(&["cp", "--streams", streams, "a", "sluice://127.0.0.1:9/b"]);
    }
}

#[test]
fn bad_place() {
    let dtn = ["plan", "--topology", DTN, "--compress-threads", "2"];
    for spec in [
        "compress",
        "compress=mem:0",
        "zip=mem:0,exec:0",
        "compress=mem:x,exec:0",
        "compress=mem:0,exec:0+y",
        "compress=mem:0,exec:0,cache:1",
        "compress=mem:9,exec:0",
        "compress=mem:0,exec:0+5",
    ] {
        let mut args = dtn.to_vec();
        args.extend(["--place", spec]);
        assert_bad_input(&args, spec);
    }
    // A placement for a role the job does not run would be silently ignored.
    assert_bad_input(
        &[
            "plan",
            "--topology",
            DTN,
            "--place",
            "compress=mem:0,exec:0",
        ],
        "compress=mem:0,exec:0",
    );
    assert_bad_input(
        &[
            "plan",
            "--topology",
            DTN,
            "--side",
            "recv",
            "--place",
            "net-send=mem:1,exec:1",
        ],
        "net-send=mem:1,exec:1",
    );
}

#[test]
fn too_many_threads() {
    // (--streams stops at 256 in the parser: a session opens no more.)
    assert_bad_input(
        &["plan", "--topology", DTN, "--io-threads", "4000000000"],
        "threads",
    );
}

#[test]
fn apply_needs_this_machine() {
    assert_bad_input(&["plan", "--topology", DTN, "--apply"], DTN);
    assert_bad_input(
        &["plan", "--topology", SYNTH_4N, "--apply", "--verify"],
        "synthetic:",
    );
}

#[test]
fn clap_usage_errors_exit_2() {
    assert_usage_error(&[]);
    assert_usage_error(&["frobnicate"]);
    assert_usage_error(&["topo", "--bogus"]);
    assert_usage_error(&["plan", "--streams", "two"]);
    assert_usage_error(&["plan", "--streams", "-1"]);
    assert_usage_error(&["plan", "--io-threads"]);
    assert_usage_error(&["plan", "--verify"]);
    assert_usage_error(&["plan", "--side", "sideways"]);
    assert_usage_error(&["plan", "--topology"]);
    assert_usage_error(&["topo", "--svg"]);
}

#[test]
fn unwritable_svg_path_fails_in_one_line() {
    let run = sluice(&[
        "topo",
        "--topology",
        DTN,
        "--svg",
        "/nonexistent-dir/machine.svg",
    ]);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert_eq!(run.stderr.lines().count(), 1, "{:?}", run.stderr);
    assert!(
        run.stderr.contains("/nonexistent-dir/machine.svg"),
        "{}",
        run.stderr
    );
}

// Regression: `sluice topo --json | head -1` panicked with "failed printing to stdout:
// Broken pipe".
#[test]
fn closed_stdout_is_not_a_panic() {
    for args in [
        &["topo", "--topology", EPYC, "--json"][..],
        &["plan", "--topology", EPYC, "--explain"][..],
    ] {
        let (reader, writer) = std::os::unix::net::UnixStream::pair().expect("socket pair");
        drop(reader);
        let output = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(args)
            .current_dir(workspace_root())
            .stdout(Stdio::from(std::os::fd::OwnedFd::from(writer)))
            .stderr(Stdio::piped())
            .output()
            .expect("runs");
        let run = run_of(args, output);
        assert_eq!(run.code, Some(0), "{}: {}", run.what, run.stderr);
        assert_eq!(run.stderr, "", "{}", run.what);
    }
}

// ---------------------------------------------------------------------------------------
// --help and --version.

#[test]
fn help_for_each_command() {
    let run = sluice(&["--help"]).ok();
    for word in ["Usage: sluice", "topo", "plan"] {
        assert!(run.stdout.contains(word), "{word}: {}", run.stdout);
    }
    let run = sluice(&["topo", "--help"]).ok();
    for flag in [
        "Usage: sluice topo",
        "--topology <SRC>",
        "--json",
        "--svg <FILE>",
    ] {
        assert!(run.stdout.contains(flag), "{flag}: {}", run.stdout);
    }
    let run = sluice(&["plan", "--help"]).ok();
    for flag in [
        "Usage: sluice plan",
        "--topology <SRC>",
        "--policy <P>",
        "--streams <N>",
        "--io-threads <N>",
        "--compress-threads <N>",
        "--nic <NAME>",
        "--reserve-cores <LIST>",
        "--place <ROLE=SPEC>",
        "--json",
        "--svg <FILE>",
        "--explain",
        "--apply",
        "--verify",
    ] {
        assert!(run.stdout.contains(flag), "{flag}: {}", run.stdout);
    }
    for args in [
        &["help", "plan"][..],
        &["plan", "-h"][..],
        &["topo", "-h"][..],
    ] {
        let run = sluice(args).ok();
        assert!(run.stdout.contains("Usage: sluice"), "{}", run.what);
        assert_eq!(run.stderr, "", "{}", run.what);
    }
    let run = sluice(&["--version"]).ok();
    assert!(run.stdout.starts_with("sluice "), "{}", run.stdout);
}

// ---------------------------------------------------------------------------------------
// SVG drawings.

/// A minimal well-formedness check: one root `<svg>` element, every tag closed in order,
/// attribute quotes balanced, and every `&` an entity.
#[track_caller]
fn assert_well_formed_svg(svg: &str) {
    let doc = svg.trim();
    assert!(doc.starts_with("<svg"), "does not start with <svg");
    assert!(doc.ends_with("</svg>"), "does not end with </svg>");
    let check_text = |text: &str| {
        assert!(!text.contains('>'), "a raw '>' in text: {text:?}");
        for (i, _) in text.match_indices('&') {
            let entity = &text[i..];
            let ok = ["&amp;", "&lt;", "&gt;", "&quot;", "&apos;", "&#"]
                .iter()
                .any(|e| entity.starts_with(e));
            assert!(ok, "a raw '&' in text: {text:?}");
        }
    };
    let mut stack: Vec<String> = Vec::new();
    let mut rest = doc;
    let mut roots = 0;
    while let Some(lt) = rest.find('<') {
        check_text(&rest[..lt]);
        let after = &rest[lt + 1..];
        let gt = after.find('>').expect("a tag is closed with '>'");
        let tag = &after[..gt];
        assert!(!tag.contains('<'), "'<' inside a tag: {tag:?}");
        assert_eq!(
            tag.matches('"').count() % 2,
            0,
            "unbalanced quotes in {tag:?}"
        );
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(
                stack.pop().as_deref(),
                Some(name.trim()),
                "mismatched </{name}>"
            );
        } else if !tag.starts_with('?') && !tag.starts_with('!') {
            if stack.is_empty() {
                roots += 1;
            }
            let name = tag
                .split_whitespace()
                .next()
                .unwrap_or("")
                .trim_end_matches('/');
            assert!(!name.is_empty(), "a tag without a name");
            if !tag.ends_with('/') {
                stack.push(name.to_string());
            }
        }
        rest = &after[gt + 1..];
    }
    check_text(rest);
    assert!(stack.is_empty(), "unclosed elements: {stack:?}");
    assert_eq!(roots, 1, "exactly one root element");
}

fn short_role(role: &str) -> &'static str {
    match role {
        "control" => "ctl",
        "net-send" => "ns",
        "net-recv" => "nr",
        "io-read" => "ir",
        "io-write" => "iw",
        "compress" => "cz",
        "decompress" => "dz",
        other => panic!("unknown role {other}"),
    }
}

fn svg_of(args: &[&str], name: &str) -> (String, Run) {
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_file(&path);
    let mut args = args.to_vec();
    let path_str = path.to_str().expect("utf-8 path").to_string();
    args.extend(["--svg", &path_str]);
    let run = sluice(&args).ok();
    let svg = std::fs::read_to_string(&path).expect("the SVG was written");
    assert_well_formed_svg(&svg);
    (svg, run)
}

#[test]
fn topo_svg_draws_every_node_core_and_device() {
    for (fixture, nodes, cores, devices) in [
        (EPYC, 8, 64, &["NIC ens1f0 100 Gb/s", "disk nvme0n1"][..]),
        (
            DTN,
            2,
            8,
            &["NIC eth0 40 Gb/s", "NIC eth1 40 Gb/s", "disk nvme0n1"][..],
        ),
        (OPTERON, 8, 64, &["NIC eth0 1 Gb/s", "disk sda"][..]),
    ] {
        let name = format!("topo-{}.svg", fixture.rsplit('/').next().unwrap_or("x"));
        let (svg, _) = svg_of(&["topo", "--topology", fixture], &name);
        for n in 0..nodes {
            assert!(
                svg.contains(&format!(">NUMA node {n} ")),
                "{fixture}: node {n}"
            );
        }
        assert_eq!(svg.matches(">core ").count(), cores, "{fixture}: cores");
        for device in devices {
            assert!(svg.contains(device), "{fixture}: {device}");
        }
    }
}

#[test]
fn plan_svg_shows_every_node_and_every_thread() {
    let cases: [&[&str]; 5] = [
        &["--topology", EPYC, "--policy", "mts"],
        &[
            "--topology",
            EPYC,
            "--policy",
            "smts",
            "--streams",
            "4",
            "--compress-threads",
            "2",
        ],
        &["--topology", DTN, "--policy", "bind", "--nic", "eth1"],
        &["--topology", DTN, "--policy", "os"],
        &[
            "--topology",
            QEMU,
            "--place",
            "compress=mem:0,exec:0+1",
            "--compress-threads",
            "2",
        ],
    ];
    for (i, case) in cases.iter().enumerate() {
        let mut args = vec!["plan", "--json"];
        args.extend_from_slice(case);
        let (svg, run) = svg_of(&args, &format!("plan-{i}.svg"));
        let plan: Value = serde_json::from_str(&run.stdout).expect("plan JSON");
        let topo = sluice(&["topo", "--topology", case[1], "--json"]).json();
        for (id, _) in node_cpus(&topo) {
            assert!(
                svg.contains(&format!(">NUMA node {id} ")),
                "{case:?}: node {id}"
            );
        }
        for (_, thread) in threads(&plan) {
            let role = thread["role"].as_str().expect("role");
            // The legend names every role in the plan.
            assert!(
                svg.contains(&format!(">{role}</text>")),
                "{case:?}: legend lacks {role}"
            );
            let index = &thread["index"];
            if thread["cpus"].is_null() {
                assert!(
                    svg.contains(&format!("{role} {index}")),
                    "{case:?}: unbound {role} {index}"
                );
            } else {
                // Bound: named in its core(s) as ns0, iw1 ... (none of these cases
                // crowds a core so much that names are elided as "+N").
                let short = format!("{}{index}", short_role(role));
                let named = svg.contains(&format!(">{short} "))
                    || svg.contains(&format!(" {short} "))
                    || svg.contains(&format!(" {short}<"))
                    || svg.contains(&format!(">{short}<"));
                assert!(named, "{case:?}: {role} {index} ({short}) is not drawn");
            }
        }
        assert!(svg.contains(&format!(
            "policy {}",
            plan["policy"].as_str().expect("policy")
        )));
        for note in array(&plan["notes"]) {
            let first_words: String = note.as_str().expect("note").chars().take(30).collect();
            let escaped = first_words
                .replace('&', "&amp;")
                .replace('<', "&lt;")
                .replace('>', "&gt;");
            assert!(svg.contains(&escaped), "{case:?}: note {note}");
        }
    }
}

#[test]
fn demo_moves_and_verifies_its_generated_data_set() {
    // The README's main job, small: a loopback daemon, a generated set, a verified push.
    let dir = tempfile::tempdir().expect("tempdir");
    let work = dir.path().join("demo");
    let work_s = work.to_str().expect("utf-8 path");
    let args = [
        "demo",
        "--big",
        "3MiB",
        "--small-files",
        "40",
        "--dir",
        work_s,
        "--json",
    ];
    let v = sluice(&args).json();
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["files_failed"], 0, "{v}");
    // Every generated file arrived with the same bytes.
    let mut stack = vec![work.join("src")];
    let mut files = 0;
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(work.join("src")).expect("under src");
                let got = std::fs::read(work.join("dst").join(rel)).expect("arrived");
                assert_eq!(got, std::fs::read(&p).expect("source"), "{}", rel.display());
                files += 1;
            }
        }
    }
    assert!(files >= 41, "the big file and 40 small ones: {files}");
}

#[test]
fn a_daemon_states_streams_beyond_its_plan_in_one_warning() {
    // The daemon plans one network thread per direction; a client opens three streams:
    // the two beyond the plan share its CPUs, and the daemon says so.
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("root");
    std::fs::create_dir(&root).expect("mkdir");
    let file = dir.path().join("f.bin");
    std::fs::write(&file, vec![7u8; 3 << 20]).expect("write");
    let daemon = common::Daemon::start_with(&root, &["--streams", "1"], &[]);
    let file_s = file.to_str().expect("utf-8");
    let out = common::cp(
        &["--json", "--streams", "3", file_s, &daemon.url("f.bin")],
        None,
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let v: Value = serde_json::from_str(&out.stdout).expect("JSON summary");
    // The client planned its three streams: nothing beyond its own plan.
    assert_eq!(v["threads_beyond_plan"], serde_json::json!([]), "{v}");
    let log = daemon.log();
    let warned: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("beyond the plan"))
        .collect();
    assert_eq!(warned.len(), 1, "{log}");
    assert!(
        warned[0].contains("3 net-recv threads asked for, 1 planned"),
        "{log}"
    );
    // Within the plan: no warning.
    let out = common::cp(&["--streams", "1", file_s, &daemon.url("g.bin")], None);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let log = daemon.log();
    assert_eq!(log.matches("beyond the plan").count(), 1, "{log}");
}

#[test]
fn a_resumable_failure_hints_resume_and_others_do_not() {
    // A daemon that serves one connection at a time refuses the data connection
    // (Busy): a new session can continue, and the one-line error says how.
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("root");
    std::fs::create_dir(&root).expect("mkdir");
    let file = dir.path().join("f.bin");
    std::fs::write(&file, b"data").expect("write");
    let file_s = file.to_str().expect("utf-8");
    let busy = common::Daemon::start_with(&root, &["--max-connections", "1"], &[]);
    let out = common::cp(&[file_s, &busy.url("f.bin")], None);
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    assert!(out.stderr.contains("Busy"), "{}", out.stderr);
    assert!(
        out.stderr.contains("with --resume to continue"),
        "{}",
        out.stderr
    );
    let out = common::cp(&["--resume", file_s, &busy.url("f.bin")], None);
    assert!(
        out.stderr.contains("run the same command again"),
        "{}",
        out.stderr
    );
    // A missing source cannot be resumed: no hint.
    let daemon = common::Daemon::start(&root);
    let local = dir.path().join("back.bin");
    let out = common::cp(
        &[&daemon.url("missing"), local.to_str().expect("utf-8")],
        None,
    );
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("NotFound"), "{}", out.stderr);
    assert!(!out.stderr.contains("--resume"), "{}", out.stderr);
}

#[test]
fn gen_tomo_writes_whole_pixels() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("frames.raw");
    for (size, want) in [("3", 2), ("4", 4), ("1", 0)] {
        let run = sluice(&["gen", "tomo", "--size", size, out.to_str().unwrap()]);
        assert_eq!(run.code, Some(0), "{}: {}", run.what, run.stderr);
        let len = std::fs::metadata(&out).unwrap().len();
        assert_eq!(
            len, want,
            "--size {size}: 16-bit pixels, the odd byte dropped"
        );
    }
}

#[test]
fn a_daemon_that_could_serve_nothing_is_refused_at_start() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path().to_str().unwrap();
    // Before, --max-connections 0 started a daemon that refused every connection.
    assert_usage_error(&["serve", "--root", root, "--max-connections", "0"]);
    assert_bad_input(
        &["serve", "--root", root, "--max-sessions", "0"],
        "--max-sessions",
    );
}
