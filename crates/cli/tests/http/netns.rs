//! Two daemons' namespaces for the HTTP third-party tests: `http-a-PID` and
//! `http-b-PID`, each joined to this namespace by a veth (10.66.1.0/24 to A,
//! 10.66.2.0/24 to B) and to each other by a third (10.66.3.0/24). B reaches A's
//! client-facing address through the A-B link, so a copy between them shows on that
//! link's byte counters and not on the client's. Deleted on drop.

use std::process::Command;

/// The namespaces and their links.
pub struct Pair {
    pub a: String,
    pub b: String,
    links: Vec<String>,
}

/// A's address as the client (this namespace) reaches it.
pub const A_IP: &str = "10.66.1.2";
/// B's address as the client reaches it.
pub const B_IP: &str = "10.66.2.2";

fn sh(args: &[&str]) -> Result<(), String> {
    let out = Command::new(args[0])
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

impl Pair {
    /// The pair; `None` (after a loud SKIP line) where namespaces cannot be made.
    pub fn new() -> Option<Pair> {
        let pid = std::process::id() % 100_000;
        let p = Pair {
            a: format!("http-a-{pid}"),
            b: format!("http-b-{pid}"),
            links: vec![
                format!("hta{pid}"),
                format!("htb{pid}"),
                format!("htab{pid}"),
            ],
        };
        match p.build(pid) {
            Ok(()) => Some(p),
            Err(e) => {
                crate::common::skip(&format!("cannot make network namespaces here: {e}"));
                None
            }
        }
    }

    fn build(&self, pid: u32) -> Result<(), String> {
        let (a, b) = (self.a.as_str(), self.b.as_str());
        sh(&["ip", "netns", "add", a])?;
        sh(&["ip", "netns", "add", b])?;
        let ab_a = format!("htab{pid}");
        let ab_b = format!("htba{pid}");
        let steps: Vec<Vec<String>> = vec![
            // this namespace <-> A
            vec![
                "ip".into(),
                "link".into(),
                "add".into(),
                self.links[0].clone(),
                "type".into(),
                "veth".into(),
                "peer".into(),
                "name".into(),
                format!("hta{pid}p"),
            ],
            vec![
                "ip".into(),
                "link".into(),
                "set".into(),
                format!("hta{pid}p"),
                "netns".into(),
                a.into(),
            ],
            // this namespace <-> B
            vec![
                "ip".into(),
                "link".into(),
                "add".into(),
                self.links[1].clone(),
                "type".into(),
                "veth".into(),
                "peer".into(),
                "name".into(),
                format!("htb{pid}p"),
            ],
            vec![
                "ip".into(),
                "link".into(),
                "set".into(),
                format!("htb{pid}p"),
                "netns".into(),
                b.into(),
            ],
            // A <-> B
            vec![
                "ip".into(),
                "link".into(),
                "add".into(),
                ab_a.clone(),
                "netns".into(),
                a.into(),
                "type".into(),
                "veth".into(),
                "peer".into(),
                "name".into(),
                ab_b.clone(),
                "netns".into(),
                b.into(),
            ],
        ];
        for s in &steps {
            sh(&s.iter().map(String::as_str).collect::<Vec<_>>())?;
        }
        let ex = |ns: &str, cmd: &str| -> Result<(), String> {
            let mut v = vec!["ip", "netns", "exec", ns];
            v.extend(cmd.split(' '));
            sh(&v)
        };
        sh(&["ip", "addr", "add", "10.66.1.1/24", "dev", &self.links[0]])?;
        sh(&["ip", "link", "set", &self.links[0], "up"])?;
        sh(&["ip", "addr", "add", "10.66.2.1/24", "dev", &self.links[1]])?;
        sh(&["ip", "link", "set", &self.links[1], "up"])?;
        ex(a, "ip link set lo up")?;
        ex(a, &format!("ip addr add {A_IP}/24 dev hta{pid}p"))?;
        ex(a, &format!("ip link set hta{pid}p up"))?;
        ex(a, &format!("ip addr add 10.66.3.1/24 dev {ab_a}"))?;
        ex(a, &format!("ip link set {ab_a} up"))?;
        ex(a, "ip route add 10.66.2.0/24 via 10.66.3.2")?;
        ex(b, "ip link set lo up")?;
        ex(b, &format!("ip addr add {B_IP}/24 dev htb{pid}p"))?;
        ex(b, &format!("ip link set htb{pid}p up"))?;
        ex(b, &format!("ip addr add 10.66.3.2/24 dev {ab_b}"))?;
        ex(b, &format!("ip link set {ab_b} up"))?;
        ex(b, "ip route add 10.66.1.0/24 via 10.66.3.1")?;
        Ok(())
    }

    /// Bytes received on this namespace's end of the link to A or B (`which` 0 or 1).
    pub fn client_rx(&self, which: usize) -> u64 {
        read_counter(None, &self.links[which], "rx_bytes")
            + read_counter(None, &self.links[which], "tx_bytes")
    }

    /// Bytes B received on the A-B link.
    pub fn b_rx_from_a(&self) -> u64 {
        let pid = std::process::id() % 100_000;
        read_counter(Some(&self.b), &format!("htba{pid}"), "rx_bytes")
    }
}

fn read_counter(ns: Option<&str>, dev: &str, what: &str) -> u64 {
    let path = format!("/sys/class/net/{dev}/statistics/{what}");
    let out = match ns {
        Some(n) => Command::new("ip")
            .args(["netns", "exec", n, "cat", &path])
            .output(),
        None => Command::new("cat").arg(&path).output(),
    };
    out.ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(0)
}

impl Drop for Pair {
    fn drop(&mut self) {
        for l in &self.links[..2] {
            let _ = sh(&["ip", "link", "del", l]);
        }
        let _ = sh(&["ip", "netns", "del", &self.a]);
        let _ = sh(&["ip", "netns", "del", &self.b]);
    }
}
