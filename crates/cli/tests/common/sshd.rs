//! A real OpenSSH server as the far host: `/usr/sbin/sshd -D -e -f CONFIG` in a network
//! namespace `ssh-<pid>-<n>` joined to the root namespace by a veth pair on a /30 of
//! 10.43.0.0/16, with a generated host key, an authorized client key and a private
//! known_hosts file. The namespaces share the file system, so the far side runs the
//! freshly built `sluice` (`--sluice-path`). Dropping it kills sshd and deletes the
//! namespace (the veth pair goes with it).

#![allow(dead_code)]

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// One sshd in its own namespace.
pub struct Sshd {
    /// The far host's address (in the namespace).
    pub ip: String,
    /// The namespace's name.
    pub ns: String,
    /// The root namespace's end of the veth pair.
    pub veth: String,
    /// Holds the keys, the config and known_hosts.
    pub dir: tempfile::TempDir,
    child: Option<Child>,
}

/// Runs `program args`, panicking with its stderr when it fails.
fn must(program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program} runs: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn keygen(path: &Path) {
    let p = path.to_str().expect("a UTF-8 temp path");
    must("ssh-keygen", &["-q", "-t", "ed25519", "-N", "", "-f", p]);
}

impl Sshd {
    /// Starts sshd, or says loudly why it cannot (not root, no sshd, no ssh client,
    /// no `ip`) and returns `None`.
    pub fn start() -> Option<Sshd> {
        if let Some(why) = missing() {
            crate::common::skip(&format!("the ssh tests need {why}"));
            return None;
        }
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        let slot = (pid.wrapping_mul(16).wrapping_add(n)) % 16_000;
        let (a, b) = (slot / 64, (slot % 64) * 4);
        let mut s = Sshd {
            ip: format!("10.43.{a}.{}", b + 2),
            ns: format!("ssh-{pid}-{n}"),
            veth: format!("ssh{pid}-{n}"),
            dir: tempfile::tempdir().expect("a temp dir"),
            child: None,
        };
        s.network(&format!("10.43.{a}.{}", b + 1));
        s.keys();
        s.spawn();
        Some(s)
    }

    /// The namespace, its loopback and the veth pair.
    fn network(&self, host_ip: &str) {
        let peer = format!("{}p", self.veth);
        must("ip", &["netns", "add", &self.ns]);
        must(
            "ip",
            &[
                "link", "add", &self.veth, "type", "veth", "peer", "name", &peer,
            ],
        );
        must("ip", &["link", "set", &peer, "netns", &self.ns]);
        must(
            "ip",
            &["addr", "add", &format!("{host_ip}/30"), "dev", &self.veth],
        );
        must("ip", &["link", "set", &self.veth, "up"]);
        let inside = |args: &[&str]| {
            let mut full = vec!["netns", "exec", &self.ns, "ip"];
            full.extend_from_slice(args);
            must("ip", &full);
        };
        inside(&["addr", "add", &format!("{}/30", self.ip), "dev", &peer]);
        inside(&["link", "set", &peer, "up"]);
        inside(&["link", "set", "lo", "up"]);
    }

    /// Host key, client key (authorized), a second client key (not authorized), the
    /// known_hosts file naming the host key, an empty one, and sshd's config.
    fn keys(&self) {
        keygen(&self.path("host"));
        keygen(&self.path("id"));
        keygen(&self.path("stranger"));
        std::fs::copy(self.path("id.pub"), self.path("authorized_keys")).expect("copying a key");
        let host_pub = std::fs::read_to_string(self.path("host.pub")).expect("the host key");
        let key: Vec<&str> = host_pub.split_whitespace().take(2).collect();
        std::fs::write(
            self.path("known_hosts"),
            format!("{} {}\n", self.ip, key.join(" ")),
        )
        .expect("writing known_hosts");
        std::fs::write(self.path("empty_known_hosts"), "").expect("writing known_hosts");
        let config = format!(
            "ListenAddress {ip}:22\nHostKey {host}\nAuthorizedKeysFile {auth}\n\
             PermitRootLogin prohibit-password\nPasswordAuthentication no\n\
             KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nPidFile none\n\
             AllowTcpForwarding yes\nLogLevel ERROR\n",
            ip = self.ip,
            host = self.path("host").display(),
            auth = self.path("authorized_keys").display(),
        );
        std::fs::write(self.path("sshd_config"), config).expect("writing sshd_config");
    }

    /// Starts sshd in the namespace and waits until it accepts connections.
    fn spawn(&mut self) {
        // sshd's privilege separation directory.
        let _ = std::fs::create_dir_all("/run/sshd");
        let log = std::fs::File::create(self.path("sshd.log")).expect("a log file");
        let child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.ns,
                "/usr/sbin/sshd",
                "-D",
                "-e",
                "-f",
            ])
            .arg(self.path("sshd_config"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("sshd starts");
        self.child = Some(child);
        let addr: SocketAddr = format!("{}:22", self.ip).parse().expect("an address");
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            assert!(
                Instant::now() < deadline,
                "sshd never listened: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A file in the fixture's directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// sshd's stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.path("sshd.log")).unwrap_or_default()
    }

    /// This (the root) namespace's address on the veth pair: where the far host
    /// reaches a server of ours.
    pub fn host_ip(&self) -> String {
        let (net, last) = self.ip.rsplit_once('.').expect("an IPv4 address");
        let last: u8 = last.parse().expect("an octet");
        format!("{net}.{}", last - 1)
    }

    /// `root@IP`.
    pub fn dest(&self) -> String {
        format!("root@{}", self.ip)
    }

    /// The remote shell for `-e`: the authorized key and the private known_hosts.
    pub fn rsh(&self) -> String {
        self.rsh_with("id", "known_hosts")
    }

    /// The remote shell with the key `key` and the known_hosts file `known` (files of
    /// the fixture); no user or system configuration applies.
    pub fn rsh_with(&self, key: &str, known: &str) -> String {
        format!(
            "ssh -F /dev/null -i {} -o IdentitiesOnly=yes -o UserKnownHostsFile={} \
             -o GlobalKnownHostsFile=/dev/null -o StrictHostKeyChecking=yes -o ConnectTimeout=20",
            self.path(key).display(),
            self.path(known).display()
        )
    }

    /// Runs `command` on the far host through ssh.
    pub fn ssh(&self, command: &str) -> Output {
        let rsh = self.rsh();
        let words: Vec<&str> = rsh.split_whitespace().collect();
        Command::new(words[0])
            .args(&words[1..])
            .args(["-o", "BatchMode=yes", &self.dest(), command])
            .stdin(Stdio::null())
            .output()
            .expect("ssh runs")
    }

    /// Starts `command` on the far host through ssh with its stdin, stdout and stderr
    /// piped (the way `sluice cp` starts its far side).
    pub fn spawn_ssh(&self, command: &str) -> Child {
        let rsh = self.rsh();
        let words: Vec<&str> = rsh.split_whitespace().collect();
        Command::new(words[0])
            .args(&words[1..])
            .args(["-o", "BatchMode=yes", &self.dest(), command])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("ssh runs")
    }

    /// Limits what the root namespace sends to the far host to `rate` (tc tbf), so a
    /// transfer lasts long enough to be interrupted.
    pub fn throttle(&self, rate: &str) {
        must(
            "tc",
            &[
                "qdisc", "add", "dev", &self.veth, "root", "tbf", "rate", rate, "burst", "32kbit",
                "latency", "400ms",
            ],
        );
    }
}

impl Sshd {
    /// Lifts [`Sshd::throttle`].
    pub fn unthrottle(&self) {
        must("tc", &["qdisc", "del", "dev", &self.veth, "root"]);
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        // Whatever sshd started in the namespace dies with its processes' parent; the
        // veth pair goes with the namespace.
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).output();
        let _ = Command::new("ip")
            .args(["link", "del", &self.veth])
            .output();
    }
}

/// Why the ssh tests cannot run here, if they cannot.
fn missing() -> Option<&'static str> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("root (network namespaces, sshd)");
    }
    if !Path::new("/usr/sbin/sshd").exists() {
        return Some("/usr/sbin/sshd (OpenSSH server)");
    }
    for tool in ["ssh", "ssh-keygen", "ip", "tc"] {
        let found = Command::new(tool).arg("-V").output().is_ok();
        if !found {
            return Some("ssh, ssh-keygen, ip and tc on PATH");
        }
    }
    None
}
