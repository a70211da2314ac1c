//! `sluice doctor` against synthetic hosts (fixtures/doctor/{good,bad}: a well-tuned and
//! a badly tuned 100 Gbit/s DTN as kernel files), every finding and every fix asserted,
//! and one run on this machine that must not crash.

mod common;

use common::{run_in, BIN};
use serde_json::Value;
use std::collections::BTreeMap;

fn fixture(name: &str) -> String {
    format!(
        "{}/tests/fixtures/doctor/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// `sluice doctor --json` on a fixture: (exit code, whole report, findings by check).
fn doctor(name: &str, extra: &[&str]) -> (Option<i32>, Value, BTreeMap<String, Value>) {
    let root = fixture(name);
    let mut args = vec!["doctor", "--json", "--sysroot", &root];
    args.extend_from_slice(extra);
    let out = run_in(BIN, &args, None);
    let report: Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "doctor {name}: not JSON ({e}): {}{}",
            out.stdout, out.stderr
        )
    });
    let findings = report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| (f["check"].as_str().expect("check").to_string(), f.clone()))
        .collect();
    (out.code, report, findings)
}

/// Asserts one finding's status, that `found` holds `found_has` and `fix` holds `fix_has`.
fn assert_finding(
    all: &BTreeMap<String, Value>,
    check: &str,
    status: &str,
    found_has: &str,
    fix_has: &str,
) {
    let f = all
        .get(check)
        .unwrap_or_else(|| panic!("no finding {check}: {all:?}"));
    assert_eq!(f["status"], status, "{check}: {f}");
    let found = f["found"].as_str().expect("found");
    assert!(found.contains(found_has), "{check} found: {found}");
    assert!(
        !f["why"].as_str().expect("why").is_empty(),
        "{check}: no why"
    );
    let fix = f["fix"].as_str().expect("fix");
    if status == "ok" {
        assert!(fix.is_empty(), "{check}: an ok finding with a fix: {fix}");
    } else {
        assert!(fix.contains(fix_has), "{check} fix: {fix}");
    }
}

#[test]
fn a_well_tuned_100g_dtn_has_nothing_to_fix() {
    let (code, report, all) = doctor("good", &[]);
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["limited"], false);
    assert_eq!(report["target"]["link_bits"], 100_000_000_000u64);
    assert_eq!(report["target"]["bdp_bytes"], 1_250_000_000u64);
    assert_eq!(
        report["target"]["nics"],
        serde_json::json!(["ens1f0"]),
        "lo is not a NIC"
    );
    for (check, f) in &all {
        assert_eq!(f["status"], "ok", "{check}: {f}");
    }
    assert_finding(&all, "memlock", "ok", "unlimited", "");
    assert_finding(&all, "net.core.rmem_max", "ok", "2147483647", "");
    assert_finding(&all, "net.ipv4.tcp_wmem", "ok", "autotuning reaches it", "");
    assert_finding(&all, "congestion_control", "ok", "use bbr", "");
    assert_finding(&all, "cpu_governor", "ok", "all 8 CPUs use performance", "");
    assert_finding(
        &all,
        "irq_affinity:ens1f0",
        "ok",
        "all 4 interrupts of ens1f0 run on node 1",
        "",
    );
    assert_finding(&all, "o_direct", "ok", "xfs", "");
    assert_eq!(all.len(), 16, "{:?}", all.keys());
}

#[test]
fn a_badly_tuned_100g_dtn_gets_every_finding_and_its_fix() {
    let (code, report, all) = doctor("bad", &["--root", "/srv/data"]);
    assert_eq!(code, Some(1), "{report}");
    assert_eq!(report["limited"], true);
    assert_finding(
        &all,
        "memlock",
        "limit",
        "RLIMIT_MEMLOCK is 8 MiB",
        "AmbientCapabilities=CAP_IPC_LOCK",
    );
    assert_finding(
        &all,
        "io_uring",
        "limit",
        "io_uring_disabled = 2",
        "sysctl -w kernel.io_uring_disabled='0'",
    );
    assert_finding(
        &all,
        "o_direct",
        "advice",
        "/srv/data is on tmpfs",
        "root = \"DIR\"",
    );
    assert_finding(
        &all,
        "cpu_governor",
        "limit",
        "6 of 8 CPUs use powersave",
        "cpupower frequency-set -g performance",
    );
    assert_finding(
        &all,
        "thp",
        "advice",
        "[never]",
        "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled",
    );
    // 100 Gbit/s x 100 ms over 2 connections: 512 MiB each (the engine's cap), twice
    // that for autotuning.
    assert_finding(
        &all,
        "net.core.rmem_max",
        "limit",
        "= 212992",
        "net.core.rmem_max='536870912'",
    );
    assert_finding(
        &all,
        "net.core.wmem_max",
        "limit",
        "= 212992",
        "net.core.wmem_max = 536870912",
    );
    assert_finding(
        &all,
        "net.ipv4.tcp_rmem",
        "limit",
        "6291456",
        "net.ipv4.tcp_rmem='4096 131072 1073741824'",
    );
    assert_finding(
        &all,
        "net.ipv4.tcp_wmem",
        "limit",
        "4194304",
        "/etc/sysctl.d/90-sluice.conf",
    );
    assert_finding(
        &all,
        "congestion_control",
        "limit",
        "use reno",
        "tcp_allowed_congestion_control='reno bbr'",
    );
    assert_finding(
        &all,
        "default_qdisc",
        "advice",
        "pfifo_fast",
        "net.core.default_qdisc='fq'",
    );
    assert_finding(
        &all,
        "mtu:ens1f0",
        "limit",
        "MTU 1500",
        "ip link set dev ens1f0 mtu 9000",
    );
    assert_finding(&all, "mtu:ens1f1", "ok", "MTU 9000", "");
    assert_finding(
        &all,
        "tcp_mtu_probing",
        "advice",
        "= 0",
        "net.ipv4.tcp_mtu_probing='1'",
    );
    assert_finding(
        &all,
        "irq_affinity:ens1f0",
        "limit",
        "irq 122 on CPUs 0-3, irq 123 on CPUs 0-7",
        "for i in 122 123; do echo 4-7 > /proc/irq/$i/smp_affinity_list",
    );
    assert_finding(
        &all,
        "irqbalance",
        "advice",
        "irqbalance runs",
        "systemctl disable --now irqbalance",
    );
    let why = all["net.core.rmem_max"]["why"].as_str().unwrap_or_default();
    assert!(
        why.contains("1.2 GiB are in flight") && why.contains("below line rate"),
        "{why}"
    );
}

#[test]
fn the_rtt_and_streams_change_what_the_buffers_must_hold() {
    // At 1 ms 12.5 MB are in flight: sluice asks its floor of 8 MiB per connection, more
    // than the bad host allows, but 8 connections' windows of 3 MiB (half of tcp_rmem's
    // 6 MiB) still carry 100 Gbit/s: advice, not a limit.
    let (_, report, all) = doctor("bad", &["--rtt", "1", "--streams", "8"]);
    assert_eq!(report["target"]["bdp_bytes"], 12_500_000u64);
    assert_eq!(report["target"]["socket_bytes"], 8u64 << 20);
    let fix = "net.ipv4.tcp_rmem='4096 131072 16777216'";
    assert_finding(&all, "net.ipv4.tcp_rmem", "advice", "6291456", fix);
    assert_finding(
        &all,
        "net.core.rmem_max",
        "advice",
        "212992",
        "rmem_max='8388608'",
    );
    // With 2 connections the same windows carry 50 Gbit/s: a limit; each asks 12.5 MB
    // (twice its share of the BDP), autotuning needs twice that.
    let (_, _, all) = doctor("bad", &["--rtt", "1", "--streams", "2"]);
    let fix = "net.ipv4.tcp_rmem='4096 131072 33554432'";
    assert_finding(&all, "net.ipv4.tcp_rmem", "limit", "6291456", fix);
}

#[test]
fn the_text_report_names_each_finding_with_why_and_fix() {
    let root = fixture("bad");
    let out = run_in(
        BIN,
        &["doctor", "--sysroot", &root, "--nic", "ens1f0"],
        None,
    );
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(
        out.stdout
            .starts_with("sluice doctor: 100 Gbit/s (ens1f0), RTT 100 ms"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("LIMIT   memlock: RLIMIT_MEMLOCK is 8 MiB"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("        fix: ip link set dev ens1f0 mtu 9000"),
        "{}",
        out.stdout
    );
    assert!(
        !out.stdout.contains("ens1f1"),
        "--nic ens1f0 checks only ens1f0: {}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("finding(s) limit this host below 100 Gbit/s"),
        "{}",
        out.stdout
    );
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let root = fixture("good");
    let cases: [(&[&str], &str); 4] = [
        (&["--nic", "eth9"], "--nic eth9: no such NIC"),
        (
            &["--buffer-mem", "lots"],
            "--buffer-mem \"lots\" is not a size",
        ),
        (&["--rtt", "0"], "--rtt"),
        (
            &["--sysroot", "/nonexistent/sysroot"],
            "--sysroot /nonexistent/sysroot: not a directory",
        ),
    ];
    for (extra, message) in cases {
        let mut args = vec!["doctor"];
        args.extend_from_slice(extra);
        if !extra.contains(&"--sysroot") {
            args.extend(["--sysroot", &root]);
        }
        let out = run_in(BIN, &args, None);
        assert_eq!(out.code, Some(2), "{extra:?}: {}", out.stderr);
        assert!(out.stdout.is_empty(), "{extra:?}: {}", out.stdout);
        assert!(out.stderr.contains(message), "{extra:?}: {}", out.stderr);
    }
}

#[test]
fn this_machine_is_checked_without_a_crash() {
    for args in [&["doctor"][..], &["doctor", "--json"][..]] {
        let out = run_in(BIN, args, None);
        assert!(
            matches!(out.code, Some(0 | 1)),
            "{args:?}: {}{}",
            out.stdout,
            out.stderr
        );
        assert!(out.stderr.is_empty(), "{args:?}: {}", out.stderr);
        if args.len() == 2 {
            let report: Value = serde_json::from_str(&out.stdout).expect("JSON");
            let limited = report["limited"].as_bool().expect("limited");
            assert_eq!(limited, out.code == Some(1), "{report}");
        } else {
            assert!(out.stdout.contains("memlock:"), "{}", out.stdout);
        }
    }
}

#[test]
fn the_daemons_config_file_sets_what_is_judged_and_flags_override_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let conf = dir.path().join("sluice.toml");
    let text = "listen = \"0.0.0.0:7878\"\nroot = \"/srv/data\"\nstreams = 8\n\
                buffer-mem = \"16GiB\"\nnic = [\"ens1f0\"]\n";
    std::fs::write(&conf, text).expect("write");
    let conf = conf.display().to_string();
    let (code, report, all) = doctor("bad", &["--config", &conf]);
    assert_eq!(code, Some(1), "{report}");
    assert_eq!(report["target"]["streams"], 8);
    assert_eq!(report["target"]["buffer_bytes"], 16u64 << 30);
    assert_eq!(report["target"]["nics"], serde_json::json!(["ens1f0"]));
    assert_finding(
        &all,
        "o_direct",
        "advice",
        "/srv/data is on tmpfs",
        "root =",
    );
    assert_finding(
        &all,
        "memlock",
        "limit",
        "plans 16 GiB of buffers",
        "LimitMEMLOCK",
    );
    assert!(
        !all.contains_key("mtu:ens1f1"),
        "nic = [ens1f0] checks only it"
    );
    let (_, report, all) = doctor("bad", &["--config", &conf, "--streams", "4", "--root", "/"]);
    assert_eq!(report["target"]["streams"], 4);
    assert_finding(&all, "o_direct", "ok", "/ is on ext4", "");
}

#[test]
fn a_config_key_of_the_wrong_type_names_file_line_and_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = fixture("good");
    for (text, message) in [
        (
            "root = \"/\"\nstreams = \"many\"\n",
            ":2: streams: expected an integer",
        ),
        (
            "nic = \"ens1f0\"\n",
            ":1: nic: expected an array of strings, found a string",
        ),
        ("streams = [\n", ":"),
        (
            "streams = 0\n",
            ":1: streams: expected an integer from 1 to 256",
        ),
        (
            "streams = 1000\n",
            ":1: streams: expected an integer from 1 to 256",
        ),
    ] {
        let conf = dir.path().join("sluice.toml");
        std::fs::write(&conf, text).expect("write");
        let conf = conf.display().to_string();
        let out = run_in(
            BIN,
            &["doctor", "--sysroot", &root, "--config", &conf],
            None,
        );
        assert_eq!(out.code, Some(2), "{text}: {}", out.stderr);
        assert!(out.stdout.is_empty(), "{text}: {}", out.stdout);
        assert!(
            out.stderr.contains(&format!("{conf}{message}")),
            "{text}: {}",
            out.stderr
        );
        assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    }
}
