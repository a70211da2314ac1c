//! Adaptive placement with the real kernel (issue 17 part 5): a paced push with its
//! threads bound (`--policy bind`), a busy loop pinned (`taskset`) on the core of the
//! client's `net-send-0`; the kernel's read-back (`/proc/PID/task/TID/status`) shows
//! the thread moved to another core of its node, and the `--json` summary's
//! `placement_moves` says so. No timed assertion: it polls with a generous deadline.

#![allow(clippy::unwrap_used)]

mod common;

use common::{cp, ChildGuard, Daemon};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long the move may take at most (the monitor needs about 4 s).
const DEADLINE: Duration = Duration::from_secs(60);

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The pid of this test's child `sluice cp`, once it runs.
fn cp_child() -> Option<u32> {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
        let ppid = stat.rsplit_once(')')?.1.split_whitespace().nth(1)?;
        let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
        let is_cp = cmd.split(|b| *b == 0).nth(1) == Some(b"cp");
        (ppid == me && is_cp).then_some(pid)
    })
}

/// The tid of thread `name` of `pid`.
fn thread(pid: u32, name: &str) -> Option<String> {
    let dir = format!("/proc/{pid}/task");
    std::fs::read_dir(dir).ok()?.flatten().find_map(|e| {
        let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
        (comm.trim() == name).then(|| e.file_name().to_string_lossy().into_owned())
    })
}

/// The kernel's `Cpus_allowed_list` of a thread.
fn allowed(pid: u32, tid: &str) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(|v| v.trim().to_string())
}

/// Polls `f` every 100 ms until it answers or the deadline passes.
fn poll<T>(deadline: Instant, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    while Instant::now() < deadline {
        if let Some(v) = f() {
            return Some(v);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    None
}

#[test]
fn a_busy_loop_on_a_bound_threads_core_moves_the_thread_within_its_node() {
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    if cpus < 2 {
        eprintln!("SKIP: one CPU: there is no other core to move to");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let src = dir.path().join("24mb");
    std::fs::write(&src, vec![7u8; 24_000_000]).unwrap();
    let d = Daemon::start(&root);
    let url = d.url("24mb");
    let args = [
        "--json",
        "--policy",
        "bind",
        "--bwlimit",
        "2M",
        "--adapt",
        "on",
    ];
    let copy = {
        let (src, url) = (s(&src).to_string(), url.clone());
        std::thread::spawn(move || {
            let mut a: Vec<&str> = args.to_vec();
            a.extend([src.as_str(), url.as_str()]);
            cp(&a, None)
        })
    };
    let deadline = Instant::now() + DEADLINE;
    let (pid, tid, first) = poll(deadline, || {
        let pid = cp_child()?;
        let tid = thread(pid, "io-read-0")?;
        let cpus = allowed(pid, &tid)?;
        Some((pid, tid, cpus))
    })
    .expect("the client's io-read-0 thread runs");
    let cpu: u32 = first
        .parse()
        .unwrap_or_else(|_| panic!("io-read-0 is bound to one CPU, not {first}"));
    let _hog = ChildGuard(
        Command::new("taskset")
            .args(["-c", &cpu.to_string(), "sh", "-c", "while :; do :; done"])
            .stdin(Stdio::null())
            .spawn()
            .expect("taskset runs"),
    );
    // Until the thread is elsewhere, or the copy has ended (then the summary says why).
    let moved = poll(deadline, || match allowed(pid, &tid) {
        None => Some(None),
        Some(now) => (now != first).then_some(Some(now)),
    })
    .flatten();
    drop(_hog);
    let out = copy.join().unwrap();
    assert_eq!(out.code, Some(0), "{out:?}");
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    let moves = v["placement_moves"].as_array().expect("placement_moves");
    let refusals = v["placement_refusals"].as_array().expect("refusals");
    let Some(now) = moved else {
        // The machine's other cores were as busy as the hogged one (other processes'
        // load): the monitor must have seen the hog and said why it stayed.
        let said = refusals
            .iter()
            .any(|r| r["role"] == "io-read" && r["cpu"] == cpu && r["reason"].as_str().is_some());
        assert!(said, "io-read-0 neither moved nor was refused: {v}");
        eprintln!(
            "SKIP: every other core of the node was busy with other processes' load, so \
             the thread rightly stayed (refusals: {refusals:?})"
        );
        return;
    };
    let to: u32 = now.parse().expect("moved onto one CPU");
    assert_ne!(to, cpu);
    let node_of = |c: u32| {
        std::fs::read_dir("/sys/devices/system/node")
            .into_iter()
            .flatten()
            .flatten()
            .find(|e| e.path().join(format!("cpu{c}")).exists())
            .map(|e| e.file_name())
    };
    assert_eq!(node_of(cpu), node_of(to), "never across nodes");
    let m = moves
        .iter()
        .find(|m| m["role"] == "io-read" && m["from_cpu"] == cpu && m["to_cpu"] == to)
        .unwrap_or_else(|| panic!("the summary records the move {cpu} -> {to}: {v}"));
    assert!(m["at_secs"].as_f64().unwrap() > 0.0);
    assert!(m["reason"].as_str().unwrap().contains("foreign load"));
    assert_eq!(m["node"], v["plan"]["channels"][0]["numa_node"]);
}

#[test]
fn adapt_takes_on_or_off_only() {
    let out = cp(&["--adapt", "maybe", "a", "b"], None);
    assert_eq!(out.code, Some(2), "{out:?}");
    assert!(out.stderr.contains("--adapt"), "{}", out.stderr);
}
