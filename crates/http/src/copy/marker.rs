//! The `text/perf-marker-stream` of a copy, as dCache and XRootD write it and as davix
//! (gfal2, FTS3) parses it: a `Perf Marker` block every few seconds, then one final
//! line, `success: Created` or `failure: WHY`.

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

/// The content type of a copy's answer.
pub const CONTENT_TYPE: &str = "text/perf-marker-stream";

/// One `Perf Marker` block: `bytes` moved so far over one stripe, the peer as
/// `tcp:ADDR:PORT` (`None`: not connected yet).
pub fn block(now: SystemTime, bytes: u64, remote: Option<&str>) -> String {
    let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let mut s = String::with_capacity(256);
    s.push_str("Perf Marker\n");
    let _ = writeln!(s, "    Timestamp: {secs}");
    s.push_str("    State: Running\n");
    s.push_str("    Stripe Index: 0\n");
    let _ = writeln!(s, "    Stripe Bytes Transferred: {bytes}");
    s.push_str("    Total Stripe Count: 1\n");
    if let Some(r) = remote {
        let _ = writeln!(s, "    RemoteConnections: {r}");
    }
    s.push_str("End\n");
    s
}

/// The final line of a copy that completed.
pub const SUCCESS: &str = "success: Created\n";

/// The final line of a copy that failed: `why` on one line.
pub fn failure(why: &str) -> String {
    let one: String = why
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    format!("failure: {one}\n")
}

/// `addr` as a marker's `RemoteConnections` entry (`tcp:1.2.3.4:80`,
/// `tcp:[::1]:80`).
pub fn remote(addr: std::net::SocketAddr) -> String {
    format!("tcp:{addr}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_as_davix_reads_it() {
        let b = block(
            UNIX_EPOCH + std::time::Duration::from_secs(7),
            42,
            Some("tcp:1.2.3.4:80"),
        );
        let lines: Vec<&str> = b.lines().map(str::trim).collect();
        assert_eq!(lines[0], "Perf Marker");
        assert!(lines.contains(&"Timestamp: 7"));
        assert!(lines.contains(&"Stripe Bytes Transferred: 42"));
        assert!(lines.contains(&"Total Stripe Count: 1"));
        assert!(lines.contains(&"RemoteConnections: tcp:1.2.3.4:80"));
        assert_eq!(lines.last(), Some(&"End"));
        assert_eq!(failure("a\nb"), "failure: a b\n");
    }
}
