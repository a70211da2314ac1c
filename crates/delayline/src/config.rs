//! The command line: flags, their parsing and their checks (one clear line per mistake).

use clap::{Args, Parser, Subcommand};

/// sluice-delayline: two network namespaces joined through a user-space forwarder that
/// holds every packet for a fixed one-way delay (RTT = 2 x delay), with an optional rate
/// limit (a router's tail-drop queue in front of it) and optional seeded random loss.
/// Bench tooling for sluice, not part of the product. Needs root and /dev/net/tun.
#[derive(Parser, Debug)]
#[command(name = "sluice-delayline", version)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// What to do.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Join the two namespaces (made if missing, deleted on exit if made) and forward in
    /// the foreground until SIGINT or SIGTERM; prints `ready ...` once the path is up and
    /// a JSON line of counters on exit.
    Up(UpArgs),
}

/// Flags of `up`.
#[derive(Args, Debug, Clone)]
pub struct UpArgs {
    /// Namespace of side A (the client side: link k has address SUBNET.k.1 there).
    #[arg(long)]
    pub ns_a: String,
    /// Namespace of side B (link k has address SUBNET.k.2 there).
    #[arg(long)]
    pub ns_b: String,
    /// One-way delay in milliseconds, each direction (RTT = 2 x this).
    #[arg(long, default_value = "0", allow_negative_numbers = true)]
    pub delay_ms: f64,
    /// Rate limit per direction and link: none, or a number with bit, kbit, mbit or gbit
    /// (IP bytes count, as tc's tbf counts them), e.g. 1gbit, 500mbit, 2.5gbit.
    #[arg(long, default_value = "none")]
    pub rate: String,
    /// Tail-drop queue in front of the rate limit, in milliseconds at the rate
    /// (default: one RTT, at least 10 ms).
    #[arg(long, allow_negative_numbers = true)]
    pub queue_ms: Option<f64>,
    /// Random loss per packet on the wire: a fraction (0.001) or a percentage (0.1%).
    #[arg(long, default_value = "0")]
    pub loss: String,
    /// Seed of the loss pattern (each direction and link draws its own stream from it).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// MTU of the TUN devices (1500; 9000 for jumbo paths as R&E networks use).
    #[arg(long, default_value_t = 1500)]
    pub mtu: u32,
    /// Number of independent links (each its own pair of TUN devices, addresses and rate).
    #[arg(long, default_value_t = 1)]
    pub links: u32,
    /// Two links: the same as --links 2.
    #[arg(long)]
    pub two_links: bool,
    /// First two octets of the links' addresses: link k is SUBNET.k.1 <-> SUBNET.k.2.
    #[arg(long, default_value = "10.44")]
    pub subnet: String,
    /// TSO/checksum offload on the TUN devices (on: the kernel hands over 64 KiB
    /// super-packets, far fewer packets per second; off: one packet per MTU).
    #[arg(long, default_value = "on")]
    pub offload: String,
    /// Scheduling of the forwarder threads: fifo (real-time priority 10, so that a busy
    /// machine does not delay packets beyond their due time; they sleep between packets)
    /// or normal.
    #[arg(long, default_value = "fifo")]
    pub sched: String,
    /// Bytes each direction may hold, in MiB (default: sized from rate x (delay + queue),
    /// 10 Gbit/s assumed without a rate, within 32..1024 MiB). A full ring drops at the tail
    /// and counts it as ring_full.
    #[arg(long)]
    pub ring_mib: Option<u64>,
}

/// `up`'s flags, checked and in the units the forwarder uses.
#[derive(Debug, Clone)]
pub struct Config {
    pub ns_a: String,
    pub ns_b: String,
    pub delay_ns: u64,
    pub rate_bps: u64,
    pub queue_bytes: u64,
    pub loss: f64,
    pub seed: u64,
    pub mtu: u32,
    pub links: u32,
    pub subnet: (u8, u8),
    pub offload: bool,
    pub realtime: bool,
    pub ring_bytes: usize,
}

const MIB: u64 = 1 << 20;

impl UpArgs {
    /// Checks every flag; the error is one line naming the flag and what was wrong.
    pub fn check(&self) -> Result<Config, String> {
        let ns_ok =
            |n: &str| !n.is_empty() && n.len() <= 64 && !n.contains('/') && n != "." && n != "..";
        if !ns_ok(&self.ns_a) || !ns_ok(&self.ns_b) || self.ns_a == self.ns_b {
            return Err(format!(
                "--ns-a {:?} / --ns-b {:?}: two different namespace names (no '/')",
                self.ns_a, self.ns_b
            ));
        }
        if !(0.0..=10_000.0).contains(&self.delay_ms) {
            return Err(format!(
                "--delay-ms {}: a one-way delay from 0 to 10000 ms",
                self.delay_ms
            ));
        }
        let rate_bps =
            parse_rate(&self.rate).map_err(|e| format!("--rate {:?}: {e}", self.rate))?;
        let loss = parse_loss(&self.loss).map_err(|e| format!("--loss {:?}: {e}", self.loss))?;
        if !(576..=65_535).contains(&self.mtu) {
            return Err(format!("--mtu {}: from 576 to 65535", self.mtu));
        }
        let links = if self.two_links { 2 } else { self.links };
        if !(1..=4).contains(&links) || (self.two_links && self.links != 1 && self.links != 2) {
            return Err(format!(
                "--links {}: from 1 to 4 (--two-links is --links 2)",
                self.links
            ));
        }
        let subnet = parse_subnet(&self.subnet)
            .ok_or_else(|| format!("--subnet {:?}: two octets such as 10.44", self.subnet))?;
        let offload = match self.offload.as_str() {
            "on" => true,
            "off" => false,
            o => return Err(format!("--offload {o:?}: on or off")),
        };
        let realtime = match self.sched.as_str() {
            "fifo" => true,
            "normal" => false,
            o => return Err(format!("--sched {o:?}: fifo or normal")),
        };
        let delay_ns = ms_to_ns(self.delay_ms);
        let queue_ms = self.queue_ms.unwrap_or((2.0 * self.delay_ms).max(10.0));
        if !(0.0..=10_000.0).contains(&queue_ms) {
            return Err(format!("--queue-ms {queue_ms}: from 0 to 10000 ms"));
        }
        let queue_bytes = bytes_at(rate_bps, ms_to_ns(queue_ms));
        let ring_bytes = match self.ring_mib {
            Some(m) if (1..=4096).contains(&m) => m * MIB,
            Some(m) => return Err(format!("--ring-mib {m}: from 1 to 4096")),
            None => {
                let sizing_bps = if rate_bps > 0 {
                    rate_bps
                } else {
                    10_000_000_000
                };
                (bytes_at(sizing_bps, delay_ns + ms_to_ns(queue_ms)) * 3 / 2)
                    .clamp(32 * MIB, 1024 * MIB)
            }
        };
        let ring_bytes = usize::try_from(ring_bytes)
            .map_err(|_| "--ring-mib: too large for this machine".to_string())?;
        Ok(Config {
            ns_a: self.ns_a.clone(),
            ns_b: self.ns_b.clone(),
            delay_ns,
            rate_bps,
            queue_bytes,
            loss,
            seed: self.seed,
            mtu: self.mtu,
            links,
            subnet,
            offload,
            realtime,
            ring_bytes,
        })
    }
}

fn ms_to_ns(ms: f64) -> u64 {
    // checked ranges above: at most 10^13 ns, well inside u64 and f64's exact integers
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let ns = (ms * 1e6).round() as u64;
    ns
}

/// Bytes that `rate_bps` moves in `ns`.
fn bytes_at(rate_bps: u64, ns: u64) -> u64 {
    let b = u128::from(rate_bps) * u128::from(ns) / 8_000_000_000;
    u64::try_from(b).unwrap_or(u64::MAX)
}

/// `none`/`0` (no limit) or NUMBER[bit|kbit|mbit|gbit] -> bits per second.
pub fn parse_rate(s: &str) -> Result<u64, String> {
    let s = s.trim().to_ascii_lowercase();
    if s == "none" || s == "0" {
        return Ok(0);
    }
    let (num, mult) = [("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3), ("bit", 1.0)]
        .iter()
        .find_map(|(suf, m)| s.strip_suffix(suf).map(|n| (n, *m)))
        .unwrap_or((s.as_str(), 1.0));
    let v: f64 = num
        .parse()
        .map_err(|_| "a rate such as 1gbit, 500mbit or none".to_string())?;
    let bps = v * mult;
    if !(1e5..=1e12).contains(&bps) {
        return Err("from 100kbit to 1000gbit, or none".into());
    }
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let bps = bps.round() as u64; // within 1e5..1e12 by the check above
    Ok(bps)
}

/// A fraction in [0, 0.5] or a percentage ("0.1%").
pub fn parse_loss(s: &str) -> Result<f64, String> {
    let s = s.trim();
    let (num, div) = match s.strip_suffix('%') {
        Some(n) => (n, 100.0),
        None => (s, 1.0),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| "a fraction such as 0.001 or a percentage such as 0.1%".to_string())?;
    let p = v / div;
    if !(0.0..=0.5).contains(&p) {
        return Err("a loss probability from 0 to 0.5 (50%)".into());
    }
    Ok(p)
}

fn parse_subnet(s: &str) -> Option<(u8, u8)> {
    let (a, b) = s.split_once('.')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> Result<Config, String> {
        let mut v = vec![
            "sluice-delayline",
            "up",
            "--ns-a",
            "wan-a",
            "--ns-b",
            "wan-b",
        ];
        v.extend_from_slice(extra);
        let Command::Up(a) = Cli::try_parse_from(v).map_err(|e| e.to_string())?.command;
        a.check()
    }

    #[test]
    fn rates_and_losses_parse() {
        assert_eq!(parse_rate("1gbit"), Ok(1_000_000_000));
        assert_eq!(parse_rate("2.5Gbit"), Ok(2_500_000_000));
        assert_eq!(parse_rate("500mbit"), Ok(500_000_000));
        assert_eq!(parse_rate("none"), Ok(0));
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("1bit").is_err());
        assert_eq!(parse_loss("0.1%"), Ok(0.001));
        assert_eq!(parse_loss("0.0001"), Ok(0.0001));
        assert!(parse_loss("2").is_err());
        assert!(parse_loss("-0.1").is_err());
    }

    #[test]
    fn up_flags_are_checked_with_one_line_each() {
        let c = args(&[
            "--delay-ms",
            "25",
            "--rate",
            "1gbit",
            "--loss",
            "0.001",
            "--mtu",
            "9000",
        ])
        .expect("valid");
        assert_eq!(c.delay_ns, 25_000_000);
        assert_eq!(c.queue_bytes, 6_250_000, "one RTT (50 ms) at 1 Gbit/s");
        assert_eq!(c.links, 1);
        assert_eq!(args(&["--two-links"]).expect("valid").links, 2);
        for (bad, word) in [
            (vec!["--delay-ms", "-1"], "--delay-ms"),
            (vec!["--rate", "lots"], "--rate"),
            (vec!["--loss", "70%"], "--loss"),
            (vec!["--mtu", "100"], "--mtu"),
            (vec!["--links", "9"], "--links"),
            (vec!["--subnet", "10"], "--subnet"),
            (vec!["--offload", "maybe"], "--offload"),
            (vec!["--sched", "rr"], "--sched"),
        ] {
            let e = args(&bad).expect_err("must be refused");
            assert!(e.starts_with(word) && !e.contains('\n'), "{bad:?}: {e}");
        }
    }

    #[test]
    fn the_ring_is_bounded() {
        let c = args(&["--delay-ms", "50", "--rate", "1gbit"]).expect("valid");
        // 1 Gbit/s x (50 ms + 100 ms queue) x 1.5 = 28 MB: the floor of 32 MiB
        assert_eq!(c.ring_bytes, 32 << 20);
        let c = args(&["--delay-ms", "50", "--rate", "10gbit"]).expect("valid");
        assert_eq!(c.ring_bytes, 281_250_000, "10 Gbit/s x 150 ms x 1.5");
        let c = args(&["--delay-ms", "5000"]).expect("valid");
        assert_eq!(c.ring_bytes, 1024 << 20, "capped at 1 GiB per direction");
    }
}
