//! One finding of `sluice doctor` and the figures every check is judged against.

use serde::Serialize;

/// How much a finding matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Nothing to do.
    Ok,
    /// Worth changing, but it does not keep a transfer below line rate.
    Advice,
    /// It keeps a transfer below the NIC's line rate (exit code 1).
    Limit,
}

impl Status {
    /// The label the text report prints.
    pub fn label(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Advice => "advice",
            Status::Limit => "LIMIT",
        }
    }
}

/// What one check found, why it matters at this line rate and RTT, and the fix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// The check's stable name (`memlock`, `tcp_rmem`, `irq_affinity:ens1f0`, ...).
    pub check: String,
    pub status: Status,
    /// What was found, with the file it was read from.
    pub found: String,
    /// Why it matters for a transfer at this NIC speed and RTT.
    pub why: String,
    /// The exact command or file change that fixes it (empty when status is ok).
    pub fix: String,
}

impl Finding {
    /// A finding that needs nothing done.
    pub fn ok(check: impl Into<String>, found: impl Into<String>, why: impl Into<String>) -> Self {
        Finding {
            check: check.into(),
            status: Status::Ok,
            found: found.into(),
            why: why.into(),
            fix: String::new(),
        }
    }

    /// A finding with a fix.
    pub fn needs(
        status: Status,
        check: impl Into<String>,
        found: impl Into<String>,
        why: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        let finding = Finding {
            check: check.into(),
            status,
            found: found.into(),
            why: why.into(),
            fix: fix.into(),
        };
        debug_assert!(status != Status::Ok && !finding.fix.is_empty());
        finding
    }
}

/// The transfer the host is checked for.
#[derive(Debug, Clone, Serialize)]
pub struct Target {
    /// The NICs checked (`--nic`, else every NIC with a device that is up).
    pub nics: Vec<String>,
    /// The line rate, bits/s: the fastest checked NIC's speed.
    pub link_bits: u64,
    /// Whether `link_bits` was read from a NIC (false: assumed).
    pub link_known: bool,
    /// The round-trip time, ms.
    pub rtt_ms: u64,
    /// The bandwidth-delay product at `link_bits` and `rtt_ms`, bytes.
    pub bdp_bytes: u64,
    /// Data connections per direction (`--streams`).
    pub streams: u32,
    /// The socket buffer sluice asks for each connection (the engine's path plan).
    pub socket_bytes: u64,
    /// The daemon's planned buffer memory (`--buffer-mem`), bytes.
    pub buffer_bytes: u64,
}

impl Target {
    /// The line rate as people say it: `100 Gbit/s`, `2.5 Gbit/s`, `100 Mbit/s`.
    pub fn rate(&self) -> String {
        let mbit = self.link_bits / 1_000_000;
        if mbit >= 1000 && mbit.is_multiple_of(1000) {
            format!("{} Gbit/s", mbit / 1000)
        } else if mbit >= 1000 {
            format!("{:.1} Gbit/s", mbit as f64 / 1000.0)
        } else {
            format!("{mbit} Mbit/s")
        }
    }

    /// `at 100 Gbit/s and 100 ms`.
    pub fn at(&self) -> String {
        format!("at {} and {} ms", self.rate(), self.rtt_ms)
    }
}

/// A byte count as people read it: `512 MiB`, `8 MiB`, `64 KiB`.
pub fn size(bytes: u64) -> String {
    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;
    if bytes >= GIB && bytes.is_multiple_of(GIB) {
        format!("{} GiB", bytes / GIB)
    } else if bytes >= GIB {
        format!("{:.1} GiB", bytes as f64 / GIB as f64)
    } else if bytes >= MIB {
        format!("{} MiB", bytes.div_ceil(MIB))
    } else {
        format!("{} KiB", bytes.div_ceil(1024))
    }
}

/// `sysctl -w KEY=VALUE` now and the line that keeps it across reboots.
pub fn sysctl_fix(key: &str, value: &str) -> String {
    format!(
        "sysctl -w {key}='{value}' and, to keep it, add `{key} = {value}` to \
         /etc/sysctl.d/90-sluice.conf"
    )
}
