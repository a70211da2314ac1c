//! The fixture of the integration suites that drive the real binary: a daemon started
//! on `127.0.0.1:0` (its `--json` line is the readiness signal and names the port) and
//! `sluice` commands run with a deadline. Every child is killed when its guard is
//! dropped.

#![allow(dead_code)]

use serde_json::Value;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A check that cannot run here: a `SKIPPED:` line past libtest's capture. In CI (`CI`
/// set) scripts/setup.sh installs every tool, so a skip there is a failure.
pub fn skip(reason: &str) {
    use std::io::Write;
    assert!(
        std::env::var_os("CI").is_none(),
        "CI is set, so this check must run: {reason}"
    );
    let _ = std::io::stderr().write_all(format!("SKIPPED: {reason}\n").as_bytes());
}

/// Whether `tool` is on `PATH`.
pub fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A loopback port nobody listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_sluice");
/// Small buffer pools and chunks on both sides.
pub const SMALL: [&str; 4] = ["--buffer-mem", "64MiB", "--chunk-size", "1MiB"];
/// How long a daemon may take to print its `--json` line.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// The engine's fault knob that corrupts the N-th chunk sent (crates/engine/src/fault.rs,
/// built only with the `fault-injection` feature, which these tests enable).
pub const FAULT_CORRUPT: &str = "SLUICE_FAULT_CORRUPT_CHUNK";
/// How long one `sluice` command may run before the test fails.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(90);

/// A child process that is killed (SIGKILL) and reaped when dropped.
pub struct ChildGuard(pub Child);

impl ChildGuard {
    /// Kills and reaps the child.
    pub fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }

    /// Whether the child is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.0.try_wait(), Ok(None))
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `sluice serve` on `127.0.0.1:0`, its stderr in a log file.
pub struct Daemon {
    /// The `sluice serve` process.
    pub child: ChildGuard,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// The `sha256:...` fingerprint of the certificate it presents.
    pub fingerprint: String,
    log: PathBuf,
    _logdir: tempfile::TempDir,
}

impl Daemon {
    /// Starts a daemon serving `root` and waits for its readiness line.
    pub fn start(root: &Path) -> Daemon {
        Daemon::start_with(root, &[], &[])
    }

    /// [`Daemon::start`] with `/metrics` on a free loopback port behind the token
    /// `secret`, written to `token` (`--metrics-token-file`), and `env` for its
    /// environment; with the endpoint's address.
    pub fn with_metrics(
        root: &Path,
        token: &Path,
        secret: &str,
        env: &[(&str, &str)],
    ) -> (Daemon, String) {
        std::fs::write(token, format!("{secret}\n")).expect("a token file");
        let metrics = format!("127.0.0.1:{}", free_port());
        let tok = token.to_str().expect("a UTF-8 path");
        let args = ["--metrics", &metrics, "--metrics-token-file", tok];
        (Daemon::start_with(root, &args, env), metrics)
    }

    /// [`Daemon::start`] with `extra` arguments for `sluice serve` (they may set their own
    /// `--listen`, `--buffer-mem` or `--chunk-size`) and `env` for its environment.
    pub fn start_with(root: &Path, extra: &[&str], env: &[(&str, &str)]) -> Daemon {
        let logdir = tempfile::tempdir().expect("a temp dir");
        let log = logdir.path().join("daemon.log");
        // Its TLS identity lives in the log directory unless `extra` names one.
        let state = logdir.path().join("state");
        let own_identity = extra.contains(&"--state-dir") || extra.contains(&"--cert");
        let mut cmd = Command::new(BIN);
        cmd.arg("serve")
            // An accounts file names the roots itself (and conflicts with --root).
            .args(if extra.contains(&"--accounts") {
                &[][..]
            } else {
                &["--root"][..]
            })
            .args(if extra.contains(&"--accounts") {
                None
            } else {
                Some(root)
            })
            .args(if extra.contains(&"--listen") {
                &[][..]
            } else {
                &["--listen", "127.0.0.1:0"][..]
            })
            .arg("--json")
            // `extra` may set its own --buffer-mem or --chunk-size.
            .args(
                SMALL
                    .chunks(2)
                    .filter(|pair| !extra.contains(&pair[0]))
                    .flatten(),
            )
            .args(extra)
            .args(if own_identity {
                Vec::new()
            } else {
                vec!["--state-dir".into(), state.into_os_string()]
            })
            .env_remove("SLUICE_LOG")
            .env_remove(FAULT_CORRUPT)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("a log file"));
        let mut child = ChildGuard(cmd.spawn().expect("sluice serve starts"));
        let stdout = child.0.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let _ = tx.send(lines.next());
            for _ in lines {}
        });
        let read_log = || std::fs::read_to_string(&log).unwrap_or_default();
        let line = match rx.recv_timeout(READY_TIMEOUT) {
            Ok(Some(Ok(line))) => line,
            Ok(_) => panic!("sluice serve exited before it was ready: {}", read_log()),
            Err(_) => panic!(
                "sluice serve not ready in {READY_TIMEOUT:?}: {}",
                read_log()
            ),
        };
        let v: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("serve --json line is not JSON ({e}): {line}"));
        let fingerprint = v["fingerprint"].as_str().unwrap_or_default().to_string();
        let addr = v["listen"]
            .as_str()
            .unwrap_or_else(|| panic!("no \"listen\" in {line}"))
            .to_string();
        let port: u16 = addr
            .rsplit_once(':')
            .and_then(|(_, p)| p.parse().ok())
            .unwrap_or_else(|| panic!("no port in {addr}"));
        assert_ne!(port, 0, "{addr}");
        // A wildcard address is reached on loopback.
        let addr = addr.replace("0.0.0.0:", "127.0.0.1:");
        Daemon {
            child,
            addr,
            fingerprint,
            log,
            _logdir: logdir,
        }
    }

    /// `sluice://ADDR/PATH`.
    pub fn url(&self, path: &str) -> String {
        format!("sluice://{}/{path}", self.addr)
    }

    /// What the daemon logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    #[track_caller]
    /// Fails the test (with the daemon's log) if the daemon has died.
    pub fn assert_alive(&mut self) {
        assert!(
            self.child.is_running(),
            "the daemon died; its log:\n{}",
            self.log()
        );
    }
}

/// What one finished command left behind.
#[derive(Debug)]
pub struct Out {
    /// Exit code (None: killed by a signal).
    pub code: Option<i32>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// Runs `program args` in `cwd` (None: the test's own), failing after
/// [`COMMAND_TIMEOUT`].
pub fn run_in(program: &str, args: &[&str], cwd: Option<&Path>) -> Out {
    let mut cmd = Command::new(program);
    cmd.args(args).env_remove("SLUICE_LOG");
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    finish(cmd, &format!("{program} {args:?}"), COMMAND_TIMEOUT)
}

/// Runs `cmd` (no input, output captured) to its end, failing the test when it runs
/// longer than `limit`; `what` names it in that failure.
pub fn finish(mut cmd: Command, what: &str, limit: Duration) -> Out {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = ChildGuard(cmd.spawn().unwrap_or_else(|e| panic!("{what} runs: {e}")));
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut s);
            }
            String::from_utf8_lossy(&s).into_owned()
        })
    };
    let stdout = drain(child.0.stdout.take().map(|s| Box::new(s) as _));
    let stderr = drain(child.0.stderr.take().map(|s| Box::new(s) as _));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.0.try_wait().expect("waiting for a child") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: still running after {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    Out {
        code: status.code(),
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    }
}

/// `sluice cp` with the small settings in front of `args`.
pub fn cp(args: &[&str], cwd: Option<&Path>) -> Out {
    let mut full = vec!["cp"];
    full.extend(SMALL);
    full.extend_from_slice(args);
    run_in(BIN, &full, cwd)
}
