//! The checks of the network stack: socket buffer limits against the bandwidth-delay
//! product, congestion control, the default qdisc, MTU and path-MTU probing.

use super::facts::{Facts, NicFacts};
use super::finding::{size, sysctl_fix, Finding, Status, Target};

/// The largest socket buffer size a sysctl takes (an `int`).
const SYSCTL_INT_MAX: u64 = i32::MAX as u64;
/// The MTU of jumbo frames.
const JUMBO_MTU: u32 = 9000;
/// From this line rate on a 1500-byte MTU caps a connection (packets per second per core).
const MTU_LIMIT_BITS: u64 = 40_000_000_000;

/// Every network check, in the order the report prints them.
pub fn checks(f: &Facts, t: &Target, nics: &[&NicFacts]) -> Vec<Finding> {
    let mut out = Vec::new();
    out.extend(buffers(f, t, Direction::Receive));
    out.extend(buffers(f, t, Direction::Send));
    out.push(congestion(f, t));
    out.push(qdisc(f, nics));
    out.extend(nics.iter().map(|nic| mtu(nic, t)));
    out.push(mtu_probing(f, nics));
    out
}

/// One direction of a connection's socket buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Receive,
    Send,
}

impl Direction {
    fn names(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Direction::Receive => ("net.core.rmem_max", "net.ipv4.tcp_rmem", "SO_RCVBUF"),
            Direction::Send => ("net.core.wmem_max", "net.ipv4.tcp_wmem", "SO_SNDBUF"),
        }
    }

    fn values(self, f: &Facts) -> (Option<u64>, Option<[u64; 3]>) {
        match self {
            Direction::Receive => (f.rmem_max, f.tcp_rmem),
            Direction::Send => (f.wmem_max, f.tcp_wmem),
        }
    }
}

/// The `*mem_max` and `tcp_*mem` findings of one direction. sluice asks each connection
/// for `socket_bytes`: an explicit size is capped at `*mem_max` (the daemon runs without
/// CAP_NET_ADMIN, which could force it past, whoever runs the doctor), autotuning at `tcp_*mem`'s maximum, of which about half is window. The
/// direction is limited only when neither reaches what the path needs.
pub fn buffers(f: &Facts, t: &Target, dir: Direction) -> Vec<Finding> {
    let (cap_key, auto_key, opt) = dir.names();
    let (cap, auto) = dir.values(f);
    let need = t.socket_bytes;
    let cap_ok = cap.is_some_and(|c| c >= need);
    let auto_max = auto.map(|a| a[2]);
    let auto_ok = auto_max.is_some_and(|a| a >= need.saturating_mul(2));
    let window = cap.unwrap_or(0).min(need).max(auto_max.unwrap_or(0) / 2);
    let reach_bits = window
        .saturating_mul(8)
        .saturating_mul(u64::from(t.streams))
        * 1000
        / t.rtt_ms.max(1);
    // Short of what sluice asks is advice; a limit only where the windows in all
    // cannot carry the line rate over this RTT.
    let status = if cap_ok || auto_ok || reach_bits >= t.link_bits {
        Status::Advice
    } else {
        Status::Limit
    };
    let why = format!(
        "{}, {} are in flight; sluice asks {} of socket buffer on each of its {} \
         connection(s); with these limits each holds a window of about {}, {} in all{}",
        t.at(),
        size(t.bdp_bytes),
        size(need),
        t.streams,
        size(window),
        rate_of(reach_bits.min(t.link_bits)),
        if status == Status::Limit {
            ", below line rate"
        } else {
            ""
        }
    );
    let cap_found = format!(
        "{cap_key} = {}",
        cap.map_or("unreadable".into(), |c| c.to_string())
    );
    let cap_finding = if cap_ok {
        Finding::ok(
            cap_key,
            format!("{cap_found}: enough for {opt} of {}", size(need)),
            &why,
        )
    } else {
        let fix = sysctl_fix(cap_key, &pow2(need).to_string());
        Finding::needs(status, cap_key, cap_found, &why, fix)
    };
    let auto_found = format!(
        "{auto_key} = {}",
        auto.map_or("unreadable".into(), |a| format!(
            "{} {} {}",
            a[0], a[1], a[2]
        ))
    );
    let auto_finding = if auto_ok {
        Finding::ok(
            auto_key,
            format!("{auto_found}: autotuning reaches it"),
            why,
        )
    } else {
        let [min, default, _] = auto.unwrap_or([4096, 131_072, 0]);
        let value = format!("{min} {default} {}", pow2(need.saturating_mul(2)));
        Finding::needs(
            status,
            auto_key,
            auto_found,
            why,
            sysctl_fix(auto_key, &value),
        )
    };
    vec![cap_finding, auto_finding]
}

/// The next power of two at or above `bytes`, at most what a sysctl takes.
fn pow2(bytes: u64) -> u64 {
    bytes.next_power_of_two().min(SYSCTL_INT_MAX)
}

/// A rate in bits/s as people say it.
fn rate_of(bits: u64) -> String {
    if bits >= 1_000_000_000 {
        format!("{:.1} Gbit/s", bits as f64 / 1e9)
    } else {
        format!("{} Mbit/s", bits / 1_000_000)
    }
}

/// The congestion control sluice's connections end up with: its preferred one (BBR,
/// H-TCP, CUBIC) where a daemon without CAP_NET_ADMIN may set it (the allowed list),
/// else the system default.
pub fn congestion(f: &Facts, t: &Target) -> Finding {
    const CHECK: &str = "congestion_control";
    let available = f.cc_available.join(" ");
    let allowed = f.cc_allowed.join(" ");
    let best = sluice_engine::net::tcp::pick_congestion(&available);
    let default = f.cc_default.clone().unwrap_or_else(|| "unknown".into());
    let settable = |cc: &str| f.cc_allowed.iter().any(|a| a == cc);
    let used = match best {
        Some(cc) if settable(cc) => cc.to_string(),
        _ => default.clone(),
    };
    let found = format!(
        "sluice's connections use {used} (default {default}; available: {available}; \
         allowed without CAP_NET_ADMIN: {allowed})"
    );
    let why = format!(
        "the congestion control decides how fast a connection grows back after a loss: \
         reno halves its window and adds one segment per RTT, hours to refill the {} in \
         flight {}; BBR paces at the measured rate, H-TCP and CUBIC grow back in seconds",
        size(t.bdp_bytes),
        t.at()
    );
    match used.as_str() {
        "bbr" => Finding::ok(CHECK, found, why),
        "htcp" | "cubic" => Finding::needs(Status::Advice, CHECK, found, why, bbr_fix(f)),
        _ => Finding::needs(Status::Limit, CHECK, found, why, bbr_fix(f)),
    }
}

fn bbr_fix(f: &Facts) -> String {
    if !f.cc_available.iter().any(|c| c == "bbr") {
        return "modprobe tcp_bbr && echo tcp_bbr > /etc/modules-load.d/sluice-bbr.conf; \
                then allow it: "
            .to_string()
            + &sysctl_fix(
                "net.ipv4.tcp_allowed_congestion_control",
                &format!("{} bbr", f.cc_allowed.join(" ")),
            );
    }
    sysctl_fix(
        "net.ipv4.tcp_allowed_congestion_control",
        &format!("{} bbr", f.cc_allowed.join(" ")),
    )
}

/// `net.core.default_qdisc`: fq paces each flow.
pub fn qdisc(f: &Facts, nics: &[&NicFacts]) -> Finding {
    const CHECK: &str = "default_qdisc";
    let why = "fq paces every flow at its rate, so bursts of a fast sender do not overflow \
               a switch buffer on the way; ESnet's DTN tuning uses fq";
    match f.default_qdisc.as_deref() {
        Some("fq") => Finding::ok(CHECK, "net.core.default_qdisc = fq", why),
        other => {
            let found = format!("net.core.default_qdisc = {}", other.unwrap_or("unreadable"));
            let devices: Vec<&str> = nics.iter().map(|n| n.name.as_str()).collect();
            let fix = format!(
                "{}; it applies to qdiscs created later: `tc qdisc replace dev NIC root fq` \
                 for {} (or reboot)",
                sysctl_fix("net.core.default_qdisc", "fq"),
                if devices.is_empty() {
                    "each NIC".to_string()
                } else {
                    devices.join(", ")
                }
            );
            Finding::needs(Status::Advice, CHECK, found, why, fix)
        }
    }
}

/// A NIC's MTU against its speed.
pub fn mtu(nic: &NicFacts, t: &Target) -> Finding {
    let check = format!("mtu:{}", nic.name);
    let mtu = nic.mtu.unwrap_or(0);
    let speed_bits = nic.speed_mbps.unwrap_or(0).saturating_mul(1_000_000);
    let pps = t.link_bits / 8 / u64::from(mtu.max(1));
    let why = format!(
        "{} a {mtu}-byte MTU is {:.1} million packets/s per direction, each handled by a \
         core; jumbo frames ({JUMBO_MTU}) cut the packet rate six-fold",
        t.at(),
        pps as f64 / 1e6
    );
    let found = format!("{} has MTU {mtu}", nic.name);
    if mtu >= JUMBO_MTU || speed_bits < 10_000_000_000 {
        return Finding::ok(check, found, why);
    }
    let status = if speed_bits >= MTU_LIMIT_BITS {
        Status::Limit
    } else {
        Status::Advice
    };
    let fix = format!(
        "ip link set dev {} mtu {JUMBO_MTU}, and `mtu: {JUMBO_MTU}` (netplan) or `mtu \
         {JUMBO_MTU}` (ifupdown) in its configuration; only where the switches and the far \
         end carry jumbo frames",
        nic.name
    );
    Finding::needs(status, check, found, why, fix)
}

/// `net.ipv4.tcp_mtu_probing` on a host with jumbo frames.
pub fn mtu_probing(f: &Facts, nics: &[&NicFacts]) -> Finding {
    const CHECK: &str = "tcp_mtu_probing";
    let jumbo = nics.iter().any(|n| n.mtu.unwrap_or(0) > 1500);
    let value = f.mtu_probing.map_or("unreadable".into(), |v| v.to_string());
    let found = format!("net.ipv4.tcp_mtu_probing = {value}");
    let why = "with jumbo frames a path through a smaller MTU whose routers drop ICMP \
               black-holes the connection; probing finds the path MTU instead of stalling";
    if !jumbo || f.mtu_probing.unwrap_or(0) >= 1 {
        return Finding::ok(CHECK, found, why);
    }
    let fix = sysctl_fix("net.ipv4.tcp_mtu_probing", "1");
    Finding::needs(Status::Advice, CHECK, found, why, fix)
}
