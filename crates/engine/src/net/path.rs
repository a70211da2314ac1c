//! Tuning to the path without flags (issue 15): how big each data connection's socket
//! buffers must be for the round-trip time both sides measured, within the memory the
//! user allowed. Pure: the facts come in as values, [`PathPlan`] goes out with the
//! sentence that explains it (the summary and `--json` print it).

use std::time::Duration;

/// The socket buffers every data connection gets at least: what sluice always used on
/// LAN paths, where it measured best.
pub const FLOOR_SOCKET_BYTES: u64 = 8 << 20;
/// The most one connection's buffers may be asked to hold, whatever the path.
pub const MAX_SOCKET_BYTES: u64 = 512 << 20;
/// The link rate assumed when the NIC does not say (veth, tun, some virtual NICs).
pub const ASSUMED_LINK_BITS: u64 = 10_000_000_000;

/// What is known of the path when the data connections are opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathFacts {
    /// The control connection's round-trip time (the kernel's minimum sample).
    pub rtt: Duration,
    /// The link's rate in bits/s (the NIC's speed), or `None` when unknown.
    pub link_bits: Option<u64>,
    /// Data connections of the session.
    pub streams: u16,
    /// Kernel buffer memory the network side may use for all of them, bytes.
    pub cap_bytes: u64,
}

/// Socket buffers for each data connection, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathPlan {
    /// Bytes asked of the kernel for each connection's send and receive buffers.
    pub socket_bytes: u64,
    /// The path's bandwidth-delay product, bytes.
    pub bdp_bytes: u64,
    /// Whether the cap kept the buffers below what the path needs.
    pub capped: bool,
    /// One sentence for the summary.
    pub reason: String,
}

/// Buffers for each connection: twice its share of the bandwidth-delay product (the
/// kernel keeps about half a buffer for its own bookkeeping), at least
/// [`FLOOR_SOCKET_BYTES`], at most [`MAX_SOCKET_BYTES`] and the connection's share of
/// `cap_bytes`.
pub fn plan(f: &PathFacts) -> PathPlan {
    debug_assert!(f.streams >= 1);
    let streams = u64::from(f.streams.max(1));
    let bits = f.link_bits.unwrap_or(ASSUMED_LINK_BITS);
    let rtt_us = u64::try_from(f.rtt.as_micros()).unwrap_or(u64::MAX);
    let bdp = (u128::from(bits / 8) * u128::from(rtt_us) / 1_000_000)
        .try_into()
        .unwrap_or(u64::MAX);
    let want = (bdp.saturating_mul(2) / streams).max(FLOOR_SOCKET_BYTES);
    let share = (f.cap_bytes / streams).max(FLOOR_SOCKET_BYTES);
    let socket_bytes = want.min(MAX_SOCKET_BYTES).min(share);
    let capped = socket_bytes < want;
    let rate = match f.link_bits {
        Some(b) => format!("{} Mbit/s", b / 1_000_000),
        None => format!("an assumed {} Mbit/s", bits / 1_000_000),
    };
    let mut reason = format!(
        "RTT {:.1} ms at {rate}: {} KiB in flight, {} KiB of socket buffers on each of {streams} connection(s)",
        f.rtt.as_secs_f64() * 1e3,
        bdp >> 10,
        socket_bytes >> 10,
    );
    if capped {
        reason += &format!(
            "; the path needs {} KiB each: raise --buffer-mem",
            want.min(MAX_SOCKET_BYTES) >> 10
        );
    }
    debug_assert!(socket_bytes >= FLOOR_SOCKET_BYTES.min(share));
    PathPlan {
        socket_bytes,
        bdp_bytes: bdp,
        capped,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GBIT: u64 = 1_000_000_000;
    const MIB: u64 = 1 << 20;

    fn facts(rtt_ms: u64, link: Option<u64>, streams: u16, cap: u64) -> PathFacts {
        PathFacts {
            rtt: Duration::from_millis(rtt_ms),
            link_bits: link,
            streams,
            cap_bytes: cap,
        }
    }

    #[test]
    fn a_lan_keeps_the_floor() {
        let p = plan(&PathFacts {
            rtt: Duration::from_micros(50),
            ..facts(0, Some(10 * GBIT), 2, 1 << 30)
        });
        assert_eq!(p.socket_bytes, FLOOR_SOCKET_BYTES);
        assert!(!p.capped);
    }

    #[test]
    fn a_long_path_gets_twice_its_share_of_the_bdp() {
        // 1 Gbit/s × 100 ms = 12.5 MB in flight; two connections: 12.5 MB each.
        let p = plan(&facts(100, Some(GBIT), 2, 1 << 30));
        assert_eq!(p.bdp_bytes, 12_500_000);
        assert_eq!(p.socket_bytes, 12_500_000);
        assert!(p.reason.contains("RTT 100.0 ms"), "{}", p.reason);
        // An unknown link is taken as 10 Gbit/s.
        let p = plan(&facts(50, None, 4, 1 << 30));
        assert_eq!(p.bdp_bytes, 62_500_000);
        assert_eq!(p.socket_bytes, 31_250_000);
        assert!(p.reason.contains("assumed"), "{}", p.reason);
    }

    #[test]
    fn the_cap_bounds_the_buffers_and_says_so() {
        let p = plan(&facts(100, Some(10 * GBIT), 2, 64 * MIB));
        assert_eq!(p.socket_bytes, 32 * MIB);
        assert!(p.capped);
        assert!(p.reason.contains("raise --buffer-mem"), "{}", p.reason);
        let p = plan(&facts(1000, Some(100 * GBIT), 1, u64::MAX));
        assert_eq!(p.socket_bytes, MAX_SOCKET_BYTES);
    }
}
