//! Tuning to the path without flags (issue 15): what the summaries say of the network.
//! Loopback here; the long paths themselves are measured by `bench/wan.sh` through the
//! delay line.

#![allow(clippy::unwrap_used, clippy::cast_possible_truncation)]

mod common;

use common::{cp, Daemon};
use serde_json::Value;
use std::path::Path;

const MIB: usize = 1 << 20;

/// The congestion control sluice must pick on this kernel (bbr, else htcp, else cubic).
fn best_congestion() -> &'static str {
    let offered = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
        .unwrap_or_default();
    let names: Vec<&str> = offered.split_whitespace().collect();
    ["bbr", "htcp", "cubic"]
        .into_iter()
        .find(|p| names.contains(p))
        .unwrap_or("default")
}

fn file(path: &Path, len: usize) {
    let data: Vec<u8> = (0..len).map(|i| (i * 7 + i / 4099) as u8).collect();
    std::fs::write(path, data).unwrap();
}

#[track_caller]
fn check_network(v: &Value, streams: usize, payload: u64) {
    let n = &v["network"];
    let rtt = n["rtt_ms"]
        .as_f64()
        .unwrap_or_else(|| panic!("rtt_ms in {n}"));
    assert!(rtt > 0.0 && rtt < 100.0, "loopback RTT {rtt} ms: {n}");
    assert_eq!(n["congestion"], best_congestion(), "{n}");
    // Loopback: the floor, what sluice always used on a LAN.
    assert_eq!(n["socket_bytes"], 8 * MIB as u64, "{n}");
    assert_eq!(n["capped"], false, "{n}");
    let reason = n["reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("RTT ") && reason.contains("congestion control"),
        "{reason}"
    );
    let conns = n["connections"].as_array().unwrap_or_else(|| panic!("{n}"));
    assert_eq!(conns.len(), streams, "one report per data connection: {n}");
    let mut bytes = 0;
    for c in conns {
        for key in ["retransmits", "rtt_ms", "rate", "cwnd"] {
            assert!(c[key].is_number(), "{key} in {c}");
        }
        bytes += c["bytes"].as_u64().unwrap_or(0);
    }
    // Every payload byte crossed a data connection (plus the chunk headers).
    assert!(
        bytes >= payload && bytes < payload + MIB as u64,
        "{bytes} of {payload}: {n}"
    );
}

#[test]
fn the_summary_reports_the_path_its_tuning_and_every_data_connection_both_ways() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let src = t.path().join("f.bin");
    let len = 5 * MIB + 1234;
    file(&src, len);
    let mut d = Daemon::start(&root);
    for streams in ["1", "3"] {
        let name = format!("f{streams}.bin");
        let out = cp(
            &[
                "--json",
                "--streams",
                streams,
                src.to_str().unwrap(),
                &d.url(&name),
            ],
            None,
        );
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        let v: Value = serde_json::from_str(&out.stdout).unwrap();
        check_network(&v, streams.parse().unwrap(), len as u64);
        let back = t.path().join(format!("back{streams}.bin"));
        let out = cp(
            &[
                "--json",
                "--streams",
                streams,
                &d.url(&name),
                back.to_str().unwrap(),
            ],
            None,
        );
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        let v: Value = serde_json::from_str(&out.stdout).unwrap();
        check_network(&v, streams.parse().unwrap(), len as u64);
        assert_eq!(std::fs::read(&back).unwrap(), std::fs::read(&src).unwrap());
    }
    // The human summary says it in one line.
    let out = cp(&[src.to_str().unwrap(), &d.url("h.bin")], None);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let line = out
        .stdout
        .lines()
        .find(|l| l.starts_with("network: "))
        .unwrap_or_else(|| panic!("no network line in {}", out.stdout));
    assert!(
        line.contains("congestion control") && line.contains("retransmitted"),
        "{line}"
    );
    d.assert_alive();
}
