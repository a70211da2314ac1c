//! The clients the HTTP tests drive (gfal2's `gfal-*`, davix, curl), run with a
//! deadline and the environment they need, and the daemon's HTTP address.

#![allow(dead_code)]

use super::common::{self, ChildGuard, Daemon};
use std::process::{Command, Stdio};
use std::time::Duration;

/// How long one client command may run.
const DEADLINE: Duration = Duration::from_secs(120);

/// gfal2's option that accepts the daemon's self-signed certificate.
pub const GFAL_INSECURE: &str = "HTTP PLUGIN:INSECURE=true";

/// A finished client command (the suites' own [`common::Out`]).
pub type Ran = common::Out;

impl Ran {
    #[track_caller]
    pub fn ok(&self, what: &str) -> &Ran {
        assert_eq!(self.code, Some(0), "{what} failed: {self:?}");
        self
    }
}

/// Whether `tool` can be run here; a loud skip when it cannot (a failure in CI).
pub fn have(tool: &str) -> bool {
    let found = common::have(tool);
    if !found {
        common::skip(&format!("{tool} is not installed (scripts/setup.sh installs gfal2, gfal2-plugin-http, gfal2-util-scripts, davix, curl)"));
    }
    found
}

/// Runs `program args` with `env`, failing the test after [`DEADLINE`].
pub fn run(program: &str, args: &[&str], env: &[(&str, &str)]) -> Ran {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .envs(env.iter().copied())
        // gfal's scripts pick the first python that imports gfal2: the system's.
        .env("GFAL_PYTHONBIN", "/usr/bin/python3");
    common::finish(cmd, &format!("{program} {args:?}"), DEADLINE)
}

/// The `ADDR:PORT` of the daemon's HTTP face (from its stderr line).
pub fn http_addr(d: &Daemon) -> String {
    let log = d.log();
    let line = log
        .lines()
        .find(|l| l.contains("sluice: http: serving"))
        .unwrap_or_else(|| panic!("no HTTP line in the daemon's log:\n{log}"));
    let addr = line
        .split(" on ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .unwrap_or_else(|| panic!("no address in {line}"));
    addr.to_string()
}

/// `curl -s -k` with `args`: the status (0: no HTTP answer) and the body as text.
pub fn curl(args: &[&str]) -> (u16, String) {
    let (code, body) = curl_bytes(args);
    (code, String::from_utf8_lossy(&body).into_owned())
}

/// [`curl`] with the body as bytes.
pub fn curl_bytes(args: &[&str]) -> (u16, Vec<u8>) {
    let out = tempfile::NamedTempFile::new().expect("a temp file");
    let path = out.path().to_str().expect("UTF-8").to_owned();
    let mut full = vec!["-s", "-k", "-o", &path, "-w", "%{http_code}"];
    full.extend_from_slice(args);
    let r = run("curl", &full, &[]);
    let body = std::fs::read(out.path()).unwrap_or_default();
    (r.stdout.trim().parse().unwrap_or(0), body)
}

/// Adler-32 of `bytes` (as zlib computes it).
pub fn adler32(bytes: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for &x in bytes {
        a = (a + u32::from(x)) % 65_521;
        b = (b + a) % 65_521;
    }
    (b << 16) | a
}

/// `n` bytes that differ from run to run of the pattern (no compression shortcut).
pub fn data(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()[3]
        })
        .collect()
}

/// A daemon started with `prefix` in front of the binary (e.g. `ip netns exec NS`),
/// ready once its `--json` line is printed; its stderr is kept in `log`.
pub struct Served {
    pub child: ChildGuard,
    pub log: std::path::PathBuf,
}

impl Served {
    /// Starts `sluice serve ARGS` under `prefix`, logging to `log`.
    pub fn start(prefix: &[&str], args: &[&str], log: &std::path::Path) -> Served {
        use std::io::BufRead;
        let (program, rest) = match prefix.split_first() {
            Some((p, rest)) => (*p, rest.to_vec()),
            None => (super::common::BIN, Vec::new()),
        };
        let mut cmd = Command::new(program);
        cmd.args(rest);
        if !prefix.is_empty() {
            cmd.arg(super::common::BIN);
        }
        cmd.arg("serve")
            .args(["--json", "--buffer-mem", "64MiB", "--chunk-size", "1MiB"])
            .args(args)
            .env("SLUICE_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log).expect("a log file"));
        let mut child = ChildGuard(cmd.spawn().expect("sluice serve starts"));
        let stdout = child.0.stdout.take().expect("piped stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = std::io::BufReader::new(stdout).lines();
            let _ = tx.send(lines.next());
            for _ in lines {}
        });
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(Some(Ok(_))) => {}
            _ => panic!(
                "sluice serve not ready: {}",
                std::fs::read_to_string(log).unwrap_or_default()
            ),
        }
        Served {
            child,
            log: log.to_path_buf(),
        }
    }

    /// What it logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

#[allow(unused_imports)] // not every suite that includes these tools dials a free port
pub use common::free_port;

/// Waits (at most 30 s) until something accepts on `addr`.
pub fn wait_listening(addr: &str) {
    for _ in 0..300 {
        if std::net::TcpStream::connect(addr).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("nothing listens on {addr}");
}
