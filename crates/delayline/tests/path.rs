//! The delay line end to end, as root with /dev/net/tun (CI runs as root; elsewhere the
//! path checks skip LOUDLY): ping shows the configured RTT, a window-limited iperf3 stream
//! moves its window once per RTT, a rate limit is never exceeded, bad flags are refused.
//!
//! Not flaky: the RTT check measures a delay (the forwarder sleeps until a due time; load
//! can only add microseconds to a 50 ms RTT, and +-10 % is 5 ms). The window check moves
//! about 110 Mbit/s, a twentieth of what the forwarder reaches on this 2-core machine,
//! so the rate is bound by the window, not by the CPU; its lower margin (0.6) leaves room
//! for a loaded machine. The rate check is an upper bound, which load cannot break.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_sluice-delayline");

/// Why the path checks cannot run here, if they cannot.
fn cannot_run() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (namespaces and TUN need root)".into());
    }
    if !std::path::Path::new("/dev/net/tun").exists() {
        return Some("no /dev/net/tun".into());
    }
    for tool in ["ip", "ping"] {
        if Command::new(tool).arg("-V").output().is_err() {
            return Some(format!("{tool} not installed"));
        }
    }
    None
}

/// A running forwarder in two namespaces of its own (made and deleted by it); killed and
/// the namespaces removed on drop, also when an assertion fails.
struct Path {
    child: Child,
    ns_a: String,
    ns_b: String,
}

impl Path {
    fn up(tag: &str, flags: &[&str]) -> Path {
        let ns_a = format!("wan-t{}{tag}a", std::process::id());
        let ns_b = format!("wan-t{}{tag}b", std::process::id());
        let mut child = Command::new(BIN)
            .args(["up", "--ns-a", &ns_a, "--ns-b", &ns_b])
            .args(flags)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start sluice-delayline");
        let mut line = String::new();
        let stdout = child.stdout.as_mut().expect("stdout");
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read the ready line");
        let path = Path { child, ns_a, ns_b };
        assert!(
            line.starts_with("ready "),
            "sluice-delayline did not come up: {line:?}"
        );
        path
    }

    fn in_a(&self, cmd: &[&str]) -> std::process::Output {
        Command::new("ip")
            .args(["netns", "exec", &self.ns_a])
            .args(cmd)
            .output()
            .expect("ip netns exec")
    }

    /// Stops the forwarder with SIGTERM and returns its counters line.
    fn stop(mut self) -> String {
        let pid = self.child.id().to_string();
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill");
        let mut out = String::new();
        let stdout = self.child.stdout.take().expect("stdout");
        BufReader::new(stdout)
            .read_line(&mut out)
            .expect("read the counters line");
        let status = self.child.wait().expect("wait");
        assert!(status.success(), "sluice-delayline exited with {status}");
        assert!(
            !std::path::Path::new("/run/netns").join(&self.ns_a).exists(),
            "namespaces it made are deleted"
        );
        out
    }
}

impl Drop for Path {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for ns in [&self.ns_a, &self.ns_b] {
            if std::path::Path::new("/run/netns").join(ns).exists() {
                let _ = Command::new("ip").args(["netns", "del", ns]).status();
            }
        }
    }
}

fn skip(why: &str) {
    eprintln!("SKIP: sluice-delayline path checks: {why}");
}

#[test]
fn ping_shows_the_configured_rtt() {
    if let Some(why) = cannot_run() {
        return skip(&why);
    }
    let path = Path::up("r", &["--delay-ms", "25"]);
    let out = path.in_a(&["ping", "-q", "-c", "10", "-i", "0.1", "10.44.1.2"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let avg: f64 = text
        .lines()
        .find(|l| l.starts_with("rtt") || l.starts_with("round-trip"))
        .and_then(|l| l.split('=').nth(1))
        .and_then(|v| v.split('/').nth(1))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no RTT in ping's output: {text}"));
    assert!(
        (45.0..=55.0).contains(&avg),
        "RTT {avg} ms, configured 50 ms (+-10 %)"
    );
    let counters = path.stop();
    assert!(
        counters.contains("\"lost\":0") && counters.contains("\"packets_out\":"),
        "{counters}"
    );
}

/// iperf3 -c 10.44.1.2 FLAGS from A to B: (received bits/s, last snd_wnd).
fn iperf(path: &Path, flags: &[&str]) -> (f64, f64) {
    let server = Command::new("timeout")
        .args([
            "30",
            "ip",
            "netns",
            "exec",
            &path.ns_b,
            "iperf3",
            "-s",
            "-1",
            "-B",
            "10.44.1.2",
        ])
        .stdout(Stdio::null())
        .spawn()
        .expect("iperf3 -s");
    std::thread::sleep(std::time::Duration::from_millis(500));
    let out = path.in_a(&[&["iperf3", "-c", "10.44.1.2", "-J"], flags].concat());
    drop(server);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("iperf3 -J output");
    let bps = json["end"]["sum_received"]["bits_per_second"]
        .as_f64()
        .expect("bits_per_second");
    let wnd = json["intervals"]
        .as_array()
        .and_then(|i| i.last())
        .map_or(0.0, |i| i["streams"][0]["snd_wnd"].as_f64().unwrap_or(0.0));
    (bps, wnd)
}

#[test]
fn a_window_limited_stream_moves_one_window_per_rtt_and_a_rate_is_never_exceeded() {
    if let Some(why) = cannot_run() {
        return skip(&why);
    }
    if Command::new("iperf3").arg("-v").output().is_err() {
        return skip("iperf3 not installed");
    }
    let path = Path::up("w", &["--delay-ms", "25"]);
    let (bps, wnd) = iperf(&path, &["-P", "1", "-w", "512K", "-t", "4", "-O", "1"]);
    assert!(
        wnd > 0.0,
        "iperf3 reports the advertised window (TCP_INFO snd_wnd)"
    );
    let ratio = bps / (wnd * 8.0 / 0.050);
    assert!(
        (0.6..=1.15).contains(&ratio),
        "{bps} bit/s against window {wnd} B / 50 ms: {ratio:.2}"
    );
    drop(path);

    let path = Path::up("q", &["--delay-ms", "5", "--rate", "100mbit"]);
    let (bps, _) = iperf(&path, &["-P", "2", "-t", "3"]);
    assert!(
        bps > 0.0 && bps <= 100e6,
        "{bps} bit/s through a 100 Mbit/s limit"
    );
    let counters = path.stop();
    assert!(counters.contains("\"ring_full\":0"), "{counters}");
}

#[test]
fn bad_flags_are_refused_with_one_line() {
    let out = Command::new(BIN)
        .args(["up", "--ns-a", "x", "--ns-b", "y", "--rate", "lots"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--rate \"lots\""), "{err}");
    assert!(
        !std::path::Path::new("/run/netns/x").exists(),
        "nothing made"
    );
}
