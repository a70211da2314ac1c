//! A network namespace joined to this one by a veth pair shaped with `tc tbf`: the
//! client runs inside it (10.42.N.2), the daemon outside on 10.42.N.1, so a transfer
//! is slow enough to be caught running. Deleted on drop.

use super::*;

/// The namespace, its veth, and its subnet number.
pub struct Netns {
    pub name: String,
    host_if: String,
    pub n: u8,
}

fn sh(args: &[&str]) -> Result<(), String> {
    let out = std::process::Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("{args:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Netns {
    /// `dmn-TAG-PID`, shaped to `rate` (tc's syntax, e.g. "40mbit") both ways; `None`
    /// (after a loud SKIP line) where namespaces cannot be made.
    pub fn new(tag: &str, n: u8, rate: &str) -> Option<Netns> {
        let pid = std::process::id() % 100_000;
        let ns = Netns {
            name: format!("dmn-{tag}-{pid}"),
            host_if: format!("dmn{n}h{pid}"),
            n,
        };
        let peer_if = format!("dmn{n}n{pid}");
        let (host, peer) = (ns.host_ip(), ns.client_ip());
        let steps: Vec<Vec<String>> = vec![
            vec!["ip", "netns", "add", &ns.name],
            vec![
                "ip",
                "link",
                "add",
                &ns.host_if,
                "type",
                "veth",
                "peer",
                "name",
                &peer_if,
            ],
            vec!["ip", "link", "set", &peer_if, "netns", &ns.name],
            vec![
                "ip",
                "addr",
                "add",
                &format!("{host}/24"),
                "dev",
                &ns.host_if,
            ],
            vec!["ip", "link", "set", &ns.host_if, "up"],
            vec![
                "ip",
                "-n",
                &ns.name,
                "addr",
                "add",
                &format!("{peer}/24"),
                "dev",
                &peer_if,
            ],
            vec!["ip", "-n", &ns.name, "link", "set", &peer_if, "up"],
            vec!["ip", "-n", &ns.name, "link", "set", "lo", "up"],
            vec![
                "tc",
                "qdisc",
                "add",
                "dev",
                &ns.host_if,
                "root",
                "tbf",
                "rate",
                rate,
                "burst",
                "32kbit",
                "latency",
                "400ms",
            ],
            vec![
                "ip", "netns", "exec", &ns.name, "tc", "qdisc", "add", "dev", &peer_if, "root",
                "tbf", "rate", rate, "burst", "32kbit", "latency", "400ms",
            ],
        ]
        .into_iter()
        .map(|v| v.into_iter().map(String::from).collect())
        .collect();
        for step in &steps {
            let args: Vec<&str> = step.iter().map(String::as_str).collect();
            if let Err(e) = sh(&args) {
                crate::common::skip(&format!(
                    "cannot build the network namespace {}: {e}",
                    ns.name
                ));
                return None;
            }
        }
        Some(ns)
    }

    /// The daemon's side (this namespace).
    pub fn host_ip(&self) -> String {
        format!("10.42.{}.1", self.n)
    }

    /// The client's side (inside the namespace).
    pub fn client_ip(&self) -> String {
        format!("10.42.{}.2", self.n)
    }

    /// `sluice cp` (small settings) run inside the namespace, as a child.
    pub fn spawn_cp(&self, args: &[&str]) -> ChildGuard {
        self.spawn_cp_env(args, &[])
    }

    /// [`Netns::spawn_cp`] with variables set in its environment (a fault to inject).
    pub fn spawn_cp_env(&self, args: &[&str], env: &[(&str, &str)]) -> ChildGuard {
        let mut cmd = std::process::Command::new("ip");
        cmd.args(["netns", "exec", &self.name, BIN, "cp"])
            .args(SMALL)
            .args(args)
            .env_remove("SLUICE_LOG")
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        ChildGuard(cmd.spawn().expect("ip netns exec runs"))
    }

    /// `sluice cp` (small settings) inside the namespace, to its end.
    pub fn cp(&self, args: &[&str]) -> Out {
        let mut full = vec!["netns", "exec", &self.name, BIN, "cp"];
        full.extend(SMALL);
        full.extend_from_slice(args);
        run_in("ip", &full, None)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = sh(&["ip", "netns", "del", &self.name]);
        let _ = sh(&["ip", "link", "del", &self.host_if]);
    }
}

/// Waits for `child` to end (up to `within`) and returns its exit code and stderr.
pub fn wait(child: &mut ChildGuard, within: Duration) -> (Option<i32>, String) {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.0.try_wait().expect("waiting") {
            let mut err = String::new();
            if let Some(mut e) = child.0.stderr.take() {
                let _ = e.read_to_string(&mut err);
            }
            return (status.code(), err);
        }
        assert!(Instant::now() < deadline, "still running after {within:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends `sig` to the process.
pub fn signal(child: &ChildGuard, sig: i32) {
    let pid = i32::try_from(child.0.id()).expect("a pid");
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
}

/// Waits until `cond` holds (checked every 20 ms), failing after `within`.
#[track_caller]
pub fn until(within: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A file of `mib` MiB of non-repeating bytes.
pub fn big_file(path: &Path, mib: usize) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).expect("a file"));
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut block = vec![0u8; 1 << 20];
    for _ in 0..mib {
        for b in block.chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b.copy_from_slice(&x.to_le_bytes()[..b.len()]);
        }
        f.write_all(&block).expect("writing");
    }
    f.flush().expect("flush");
}

/// A daemon of `accounts` listening on the namespace's host side.
pub fn daemon_for(ns: &Netns, root: &Path, accounts: &Path, extra: &[&str]) -> Daemon {
    let listen = format!("{}:0", ns.host_ip());
    let mut args = vec!["--accounts", s(accounts), "--listen", &listen];
    args.extend_from_slice(extra);
    // At info the daemon logs each data connection: the sign a transfer is running.
    Daemon::start_with(root, &args, &[("SLUICE_LOG", "info")])
}

/// Files under `dir` (names only, recursively), sorted.
pub fn names(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            out.push(e.file_name().to_string_lossy().into_owned());
        }
    }
    out.sort();
    out
}

#[test]
fn sighup_rotates_tokens_and_a_running_session_keeps_its_account() {
    let Some(ns) = Netns::new("hup", 11, "20mbit") else {
        return;
    };
    let site = Site::new();
    site.root("a");
    let accounts = site.accounts(&entry(
        "alice",
        "old-secret",
        "a",
        "\"read\", \"write\"",
        "",
    ));
    let mut d = daemon_for(&ns, &site.path("a"), &accounts, &[]);
    let old = site.token("old", "old-secret");
    let new = site.token("new", "new-secret");
    let big = site.path("big.bin");
    big_file(&big, 24);
    let url = format!("sluice://{}/big.bin", d.addr);
    let mut running = ns.spawn_cp(&["--token-file", s(&old), s(&big), &url]);
    until(Duration::from_secs(30), "the push starts", || {
        d.log().contains("data connection")
    });
    site.accounts(&entry(
        "alice",
        "new-secret",
        "a",
        "\"read\", \"write\"",
        "",
    ));
    signal(&d.child, libc::SIGHUP);
    until(Duration::from_secs(10), "the reload", || {
        d.log().contains("1 accounts reloaded")
    });
    let small = site.path("s.txt");
    std::fs::write(&small, b"small").unwrap();
    let small_url = format!("sluice://{}/s.txt", d.addr);
    assert_refused(
        &ns.cp(&["--token-file", s(&old), s(&small), &small_url]),
        "AuthFailed",
    );
    assert_ok(&ns.cp(&["--token-file", s(&new), s(&small), &small_url]));
    assert!(
        running.is_running(),
        "the push should still be running (too fast?)"
    );
    let (code, err) = wait(&mut running, Duration::from_secs(90));
    assert_eq!(code, Some(0), "the running push: {err}");
    assert_eq!(
        std::fs::read(site.path("a/big.bin")).unwrap(),
        std::fs::read(&big).unwrap()
    );
    // A file that does not parse keeps the accounts in force.
    site.accounts("[[account]]\nname = ");
    signal(&d.child, libc::SIGHUP);
    until(Duration::from_secs(10), "the failed reload", || {
        d.log().contains("keeping the 1 accounts")
    });
    assert_ok(&ns.cp(&["--token-file", s(&new), s(&small), &small_url]));
    d.assert_alive();
}

#[test]
fn sigterm_lets_a_running_push_finish_then_exits_0() {
    let Some(ns) = Netns::new("drn", 12, "40mbit") else {
        return;
    };
    let site = Site::new();
    site.root("a");
    let accounts = site.accounts(&entry("alice", "t-secret", "a", "\"read\", \"write\"", ""));
    let mut d = daemon_for(&ns, &site.path("a"), &accounts, &["--drain-timeout", "120"]);
    let tok = site.token("t", "t-secret");
    let big = site.path("big.bin");
    big_file(&big, 16);
    let url = format!("sluice://{}/big.bin", d.addr);
    let mut push = ns.spawn_cp(&["--token-file", s(&tok), s(&big), &url]);
    until(Duration::from_secs(30), "the push starts", || {
        d.log().contains("data connection")
    });
    signal(&d.child, libc::SIGTERM);
    // No new session while draining: the listener is closed.
    until(Duration::from_secs(10), "the drain", || {
        d.log().contains("draining")
    });
    let again = ns.cp(&[
        "--token-file",
        s(&tok),
        s(&big),
        &format!("sluice://{}/again.bin", d.addr),
    ]);
    assert_ne!(again.code, Some(0), "{again:?}");
    let (code, err) = wait(&mut push, Duration::from_secs(120));
    assert_eq!(code, Some(0), "the push: {err}");
    let (code, err) = wait(&mut d.child, Duration::from_secs(30));
    assert_eq!(code, Some(0), "the daemon: {err} {}", d.log());
    assert_eq!(
        std::fs::read(site.path("a/big.bin")).unwrap(),
        std::fs::read(&big).unwrap()
    );
    assert!(!site.path("a/again.bin").exists());
}

#[test]
fn sigterm_past_the_drain_timeout_aborts_and_leaves_no_partial_file() {
    let Some(ns) = Netns::new("abt", 13, "20mbit") else {
        return;
    };
    let site = Site::new();
    site.root("a");
    let accounts = site.accounts(&entry("alice", "t-secret", "a", "\"read\", \"write\"", ""));
    let mut d = daemon_for(&ns, &site.path("a"), &accounts, &["--drain-timeout", "1"]);
    let tok = site.token("t", "t-secret");
    let big = site.path("big.bin");
    big_file(&big, 48);
    let url = format!("sluice://{}/big.bin", d.addr);
    let mut push = ns.spawn_cp(&["--token-file", s(&tok), s(&big), &url]);
    until(Duration::from_secs(30), "the push starts", || {
        d.log().contains("data connection")
    });
    signal(&d.child, libc::SIGTERM);
    let (code, _) = wait(&mut d.child, Duration::from_secs(60));
    let log = d.log();
    assert_eq!(code, Some(1), "aborted sessions: exit 1: {log}");
    let aborted: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("drain: aborted session"))
        .collect();
    assert_eq!(aborted.len(), 1, "{log}");
    assert!(
        aborted[0].contains("alice") && aborted[0].contains("push"),
        "{log}"
    );
    let (code, _) = wait(&mut push, Duration::from_secs(60));
    assert_ne!(code, Some(0), "the client saw its session aborted");
    // Never a partial file under its final name.
    assert!(
        !site.path("a/big.bin").exists(),
        "{:?}",
        names(&site.path("a"))
    );
}

/// Alice's site with an audited daemon whose idle timeout is 2 s, her token file and a
/// `mib` MiB file to push: what the idle-timeout tests share.
fn idle_site(ns: &Netns, mib: usize) -> (Site, Daemon, PathBuf, PathBuf, String) {
    let site = Site::new();
    site.root("a");
    let accounts = site.accounts(&entry("alice", "t-secret", "a", "\"read\", \"write\"", ""));
    let audit = site.path("audit.jsonl");
    let d = daemon_for(
        ns,
        &site.path("a"),
        &accounts,
        &["--idle-timeout", "2", "--audit-log", s(&audit)],
    );
    let tok = site.token("t", "t-secret");
    let big = site.path("big.bin");
    big_file(&big, mib);
    let url = format!("sluice://{}/big.bin", d.addr);
    (site, d, audit, tok, url)
}

/// The size of the file the idle-timeout test pushes.
const IDLE_FILE_MIB: usize = 96;

/// The audit record of the session ended as idle, once it is written.
fn idle_record(audit: &Path) -> serde_json::Value {
    until(Duration::from_secs(60), "the idle session ends", || {
        audit_lines(audit)
            .iter()
            .any(|l| l["result"] == "IdleTimeout")
    });
    audit_lines(audit)
        .into_iter()
        .find(|l| l["result"] == "IdleTimeout")
        .unwrap()
}

#[test]
fn a_session_whose_client_goes_silent_is_ended_at_the_idle_timeout() {
    let Some(ns) = Netns::new("idl", 15, "20mbit") else {
        return;
    };
    // Eight connections, each with up to 4 MiB (tcp_wmem's default top) in its client's
    // kernel: the file is three times what the stopped client's kernel may still send.
    let (site, mut d, audit, tok, url) = idle_site(&ns, IDLE_FILE_MIB);
    let big = site.path("big.bin");
    let args = ["--streams", "8", "--token-file", s(&tok), s(&big), &url];
    let push = ns.spawn_cp(&args);
    // Bytes reach the file system only once every data connection joined: the stop
    // below comes mid-transfer, not during the gather (the next test's case).
    until(Duration::from_secs(30), "the push writes", || {
        !names(&site.path("a")).is_empty()
    });
    // The client stops (as a hung peer would): its kernel still acknowledges, but
    // nothing more arrives.
    signal(&push, libc::SIGSTOP);
    let line = idle_record(&audit);
    assert_eq!(line["identity"], "alice");
    assert!(
        line["bytes"].as_u64().unwrap() < (IDLE_FILE_MIB << 20) as u64,
        "{line}"
    );
    assert!(
        !site.path("a/big.bin").exists(),
        "{:?}",
        names(&site.path("a"))
    );
    d.assert_alive();
    drop(push);
}

#[test]
fn a_client_silent_before_its_data_connections_joined_is_audited_as_idle() {
    let Some(ns) = Netns::new("idj", 16, "20mbit") else {
        return;
    };
    let (site, mut d, audit, tok, url) = idle_site(&ns, 4);
    let big = site.path("big.bin");
    // Data connection 1 connects and never sends its `Join`: the daemon's gather
    // waits for it while nothing arrives on the control connection.
    let args = ["--streams", "2", "--token-file", s(&tok), s(&big), &url];
    let push = ns.spawn_cp_env(&args, &[("SLUICE_FAULT_JOIN_STALL", "1")]);
    let line = idle_record(&audit);
    assert_eq!(line["identity"], "alice", "{line}");
    assert_eq!(line["bytes"].as_u64(), Some(0), "{line}");
    assert!(
        names(&site.path("a")).is_empty(),
        "{:?}",
        names(&site.path("a"))
    );
    d.assert_alive();
    drop(push);
}

#[test]
fn a_daemon_ends_the_control_connection_of_a_finished_session_its_client_holds_open() {
    let Some(ns) = Netns::new("end", 17, "1gbit") else {
        return;
    };
    let (site, mut d, audit, tok, url) = idle_site(&ns, 4);
    let big = site.path("big.bin");
    // The client stops for good once its session ended, before it closes anything.
    let args = ["--token-file", s(&tok), s(&big), &url];
    let push = ns.spawn_cp_env(&args, &[("SLUICE_FAULT_HOLD_AT_END", "1")]);
    until(Duration::from_secs(30), "the session ends", || {
        audit_lines(&audit).iter().any(|l| l["result"] == "ok")
    });
    assert!(site.path("a/big.bin").exists());
    // Its reading thread and its socket do not wait on the silent client: the daemon's
    // side of every connection to it leaves ESTABLISHED.
    until(
        Duration::from_secs(10),
        "the daemon closes its side",
        || established_to(&ns.client_ip()).is_empty(),
    );
    d.assert_alive();
    drop(push);
}

/// This namespace's established TCP connections to `ip` (`ss`'s lines).
fn established_to(ip: &str) -> Vec<String> {
    let out = std::process::Command::new("ss")
        .args(["-Htn", "state", "established", "dst", ip])
        .output()
        .expect("ss runs");
    assert!(out.status.success(), "ss: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}
