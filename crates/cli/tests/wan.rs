//! Tuning to the path without flags (issue 15): what the summaries say of the network.
//! Loopback here; the long paths themselves are measured by `bench/wan.sh` through the
//! delay line.

#![allow(clippy::unwrap_used, clippy::cast_possible_truncation)]

mod common;

use common::{cp, Daemon};
use serde_json::Value;
use std::path::Path;
use std::process::Stdio;

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

// ---------------------------------------------------------------------------------------
// A long path: the delay line (crates/delayline) between two namespaces
// ---------------------------------------------------------------------------------------

/// Why this host cannot make a delay line, if it cannot.
fn no_delay_line() -> Option<&'static str> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("needs root (network namespaces, TUN)");
    }
    if !Path::new("/dev/net/tun").exists() {
        return Some("needs /dev/net/tun");
    }
    None
}

/// The delay line's binary next to the sluice under test, built when missing (it is a
/// workspace member: `cargo test --workspace` builds it anyway).
fn delay_line_bin() -> std::path::PathBuf {
    let bin = Path::new(common::BIN).with_file_name("sluice-delayline");
    if !bin.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let release = common::BIN.contains("/release/");
        let mut cmd = std::process::Command::new(cargo);
        cmd.args(["build", "--locked", "-q", "-p", "sluice-delayline"]);
        if release {
            cmd.arg("--release");
        }
        assert!(cmd.status().unwrap().success(), "building sluice-delayline");
    }
    bin
}

/// Two namespaces joined by the delay line; stopped (SIGTERM: it deletes the namespaces
/// it made) and the namespaces deleted when dropped, also on a failed assertion.
struct LongPath {
    line: Option<std::process::Child>,
    ns: [String; 2],
}

impl LongPath {
    fn up(rtt_ms: u32, rate: &str, loss: &str) -> LongPath {
        use std::io::BufRead;
        let id = std::process::id();
        let ns = [format!("sltw{id}a"), format!("sltw{id}b")];
        let delay = (rtt_ms / 2).to_string();
        let mut child = std::process::Command::new(delay_line_bin())
            .args([
                "up",
                "--ns-a",
                &ns[0],
                "--ns-b",
                &ns[1],
                "--delay-ms",
                &delay,
            ])
            .args([
                "--rate", rate, "--loss", loss, "--links", "1", "--mtu", "1500",
            ])
            .args(["--subnet", "10.46", "--seed", "7"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let path = LongPath {
            line: Some(child),
            ns,
        };
        let mut lines = std::io::BufReader::new(out).lines().map_while(Result::ok);
        let ready = lines.any(|l| l.starts_with("ready"));
        // The rest (its counters at exit) is read, so that it never writes to a closed pipe.
        std::thread::spawn(move || lines.for_each(drop));
        assert!(ready, "the delay line did not come up");
        path
    }

    /// `ip netns exec NS program args`, as a child.
    fn spawn(&self, side: usize, args: &[&str], stdout: std::process::Stdio) -> common::ChildGuard {
        common::ChildGuard(
            std::process::Command::new("ip")
                .args(["netns", "exec", &self.ns[side], common::BIN])
                .args(args)
                .env_remove("SLUICE_LOG")
                .stdin(std::process::Stdio::null())
                .stdout(stdout)
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap(),
        )
    }
}

impl Drop for LongPath {
    fn drop(&mut self) {
        if let Some(mut c) = self.line.take() {
            if let Ok(pid) = i32::try_from(c.id()) {
                // SAFETY: signalling our own child, which has not been reaped yet.
                unsafe { libc::kill(pid, libc::SIGTERM) };
            }
            let _ = c.wait();
        }
        for ns in &self.ns {
            let _ = std::process::Command::new("ip")
                .args(["netns", "del", ns])
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}

/// The output of a finished child with a deadline.
fn finish(mut c: common::ChildGuard) -> (Option<i32>, String, String) {
    use std::io::Read;
    let deadline = std::time::Instant::now() + common::COMMAND_TIMEOUT;
    let status = loop {
        if let Some(s) = c.0.try_wait().unwrap() {
            break s;
        }
        assert!(std::time::Instant::now() < deadline, "still running");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let (mut out, mut err) = (String::new(), String::new());
    c.0.stdout.take().map(|mut s| s.read_to_string(&mut out));
    c.0.stderr.take().map(|mut s| s.read_to_string(&mut err));
    (status.code(), out, err)
}

/// One file pushed over a [`LongPath`] to a daemon in its far namespace.
struct Push<'a> {
    path: &'a LongPath,
    dir: &'a Path,
    root: std::path::PathBuf,
    src: std::path::PathBuf,
}

impl Push<'_> {
    /// A daemon serving `root` in the far namespace, and the URL of the file on it.
    fn daemon(&self) -> (common::ChildGuard, String) {
        use std::io::BufRead;
        let dir = |name: &str| self.dir.join(name).to_str().unwrap().to_string();
        let (root, token, state) = (dir("root"), dir("token"), dir("state"));
        let args = [
            "serve",
            "--root",
            &root,
            "--listen",
            "10.46.1.2:0",
            "--json",
        ];
        let more = ["--token-file", &token, "--state-dir", &state];
        let mut d = self
            .path
            .spawn(1, &[&args[..], &more].concat(), Stdio::piped());
        let out = d.0.stdout.take().unwrap();
        let mut lines = std::io::BufReader::new(out).lines().map_while(Result::ok);
        let v: Value = serde_json::from_str(&lines.next().unwrap()).unwrap();
        std::thread::spawn(move || lines.for_each(drop));
        let url = format!("sluice://{}/f.bin", v["listen"].as_str().unwrap());
        (d, url)
    }

    /// `sluice cp` of the file to `url`, as a child.
    fn cp(&self, url: &str, resume: bool) -> common::ChildGuard {
        self.cp_with(url, if resume { &["--resume"] } else { &[] })
    }

    /// `sluice cp` of the file to `url` with `extra` flags, as a child.
    fn cp_with(&self, url: &str, extra: &[&str]) -> common::ChildGuard {
        let dir = |name: &str| self.dir.join(name).to_str().unwrap().to_string();
        let (token, known) = (dir("token"), dir("known_hosts"));
        let mut args = vec![
            "cp",
            "--json",
            "--token-file",
            &token,
            "--known-hosts",
            &known,
        ];
        args.extend(common::SMALL);
        args.extend(extra);
        args.extend([self.src.to_str().unwrap(), url]);
        self.path.spawn(0, &args, Stdio::piped())
    }

    /// Waits until chunks are logged in the partial's resume log, `push` (the client)
    /// still running.
    fn midway(&self, push: &mut common::ChildGuard) {
        let log = self.root.join(".f.bin.sluice-part.log");
        let deadline = std::time::Instant::now() + common::COMMAND_TIMEOUT;
        while std::fs::metadata(&log).map_or(0, |m| m.len()) < 64 {
            assert!(
                push.is_running(),
                "the push ended before it could be killed"
            );
            assert!(std::time::Instant::now() < deadline, "nothing logged");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// `--resume` to `url`: it succeeds, resumes something and leaves the file identical;
    /// its summary.
    fn resume(&self, url: &str) -> Value {
        let (code, out, err) = finish(self.cp(url, true));
        assert_eq!(code, Some(0), "{err}");
        let v: Value = serde_json::from_str(out.trim()).unwrap();
        let got = std::fs::read(self.root.join("f.bin")).unwrap();
        assert!(
            got == std::fs::read(&self.src).unwrap(),
            "not byte-identical"
        );
        assert!(v["bytes_resumed"].as_u64().unwrap() > 0, "{v}");
        std::fs::remove_file(self.root.join("f.bin")).unwrap();
        v
    }
}

#[test]
fn a_long_lossy_path_is_measured_and_a_push_killed_on_either_side_resumes() {
    if let Some(why) = no_delay_line() {
        common::skip(&format!("the long-path test {why}"));
        return;
    }
    let path = LongPath::up(100, "200mbit", "0.001");
    let t = tempfile::tempdir().unwrap();
    let push = Push {
        path: &path,
        dir: t.path(),
        root: t.path().join("root"),
        src: t.path().join("f.bin"),
    };
    std::fs::create_dir(&push.root).unwrap();
    file(&push.src, 48 * MIB + 4321);
    std::fs::write(t.path().join("token"), "0123456789abcdef0123456789abcdef").unwrap();
    // The client killed mid-way.
    let (_daemon, url) = push.daemon();
    let mut client = push.cp(&url, false);
    push.midway(&mut client);
    client.kill();
    // The daemon's side of the killed session ends when the resets arrive.
    std::thread::sleep(std::time::Duration::from_secs(1));
    let v = push.resume(&url);
    let n = &v["network"];
    let rtt = n["rtt_ms"].as_f64().unwrap();
    assert!(
        (90.0..200.0).contains(&rtt),
        "RTT {rtt} ms over a 100 ms path: {n}"
    );
    // The RTT sized the buffers past the LAN floor (within SMALL's --buffer-mem).
    assert!(n["socket_bytes"].as_u64().unwrap() > 8 * MIB as u64, "{n}");
    // No --streams on a long path: 8 connections, and the reason says why.
    let reason = n["reason"].as_str().unwrap_or_default();
    assert_eq!(n["connections"].as_array().map(Vec::len), Some(8), "{n}");
    assert!(
        reason.starts_with("8 data connections for a path of "),
        "{reason}"
    );
    // Where the NIC reports its rate (a TUN does), each of the eight connections
    // through it is paced at most at an eighth of it.
    if n["link_assumed"] == false {
        let each = n["link_bits"].as_u64().unwrap() / 8 / 1_000_000;
        assert!(
            reason.contains(&format!("paced at most {each} Mbit/s each")),
            "{reason}"
        );
    } else {
        eprintln!("SKIP: the TUN device reports no rate here, so nothing is paced: {n}");
    }
    // `--streams` given: that many, on a long path too.
    let (code, out, err) = finish(push.cp_with(&url, &["--streams", "2"]));
    assert_eq!(code, Some(0), "{err}");
    let v: Value = serde_json::from_str(out.trim()).unwrap();
    let n = &v["network"];
    assert_eq!(n["connections"].as_array().map(Vec::len), Some(2), "{n}");
    assert!(n["reason"].as_str().unwrap().starts_with("RTT "), "{n}");
    std::fs::remove_file(push.root.join("f.bin")).unwrap();
    // The daemon killed mid-way, a new one started on the same root.
    let (mut daemon, url) = push.daemon();
    let mut client = push.cp(&url, false);
    push.midway(&mut client);
    daemon.kill();
    let (code, _, _) = finish(client);
    assert_ne!(code, Some(0), "the push lost its daemon");
    let (_daemon, url) = push.daemon();
    push.resume(&url);
}
