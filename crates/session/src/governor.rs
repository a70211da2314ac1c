//! The send-window governor of a long path (issue 15): BBR's start-up and its probing
//! overrun a bottleneck whose queue holds about one round trip of data, and with two or
//! more connections through it (each sizing its window at twice its own estimate) the
//! overrun persists: on a 3 Gbit/s, 50 ms path each of sluice's connections
//! retransmitted 45-90 k segments per GiB, 12-15 % of the bytes sent. `iperf3` does
//! not lose them there only because the distribution's `tcp_wmem` (4 MiB) caps every
//! stream's window far below the path's.
//!
//! The governor bounds what each connection may keep in flight, from what it measures:
//! when a connection's retransmitted share of the bytes it sent over an interval
//! exceeds [`HIGH_LOSS`], its send buffer is clamped to [`GAIN`] times the
//! bandwidth-delay product it actually achieves (its acknowledged rate, or the kernel's
//! delivery-rate sample where higher, times its minimum RTT) plus the unsent bytes the
//! writer may queue; while it keeps losing, the clamp shrinks by [`DECREASE`]; after
//! [`CALM_TICKS`] intervals below [`LOW_LOSS`] it grows by [`INCREASE`] until it reaches
//! the planned size and is lifted. Random loss (0.01-0.1 % on the lossy paths)
//! stays far below [`HIGH_LOSS`], so those paths keep their full windows: the governor
//! acts on queue overflow, not on noise. It has no I/O: the engine samples `TCP_INFO`
//! every [`Governor::period`] and applies the [`Clamp`]s it returns.

use std::time::Duration;

/// A retransmitted share of the bytes sent over one interval above which a connection
/// is overrunning its bottleneck's queue (random loss on a long path is 0.01-0.1 %).
pub const HIGH_LOSS: f64 = 0.02;
/// A share below which the path is calm.
pub const LOW_LOSS: f64 = 0.005;
/// In flight allowed, as a multiple of the bandwidth-delay product achieved: the path's
/// own window plus half of it queued at the bottleneck (a quarter measured 3 % slower
/// on a 2.5 Gbit/s, 50 ms path).
pub const GAIN: f64 = 1.5;
/// The clamp's factor while a clamped connection keeps losing.
pub const DECREASE: f64 = 0.85;
/// The clamp's factor after [`CALM_TICKS`] calm intervals.
pub const INCREASE: f64 = 1.10;
/// Calm intervals before a clamp grows.
pub const CALM_TICKS: u32 = 2;
/// The smallest clamp, bytes in flight.
pub const FLOOR_BYTES: u64 = 1 << 20;
/// Bytes a connection must have sent in an interval for the interval to count.
pub const MIN_INTERVAL_BYTES: u64 = 1 << 20;
/// The shortest sampling period.
pub const MIN_PERIOD: Duration = Duration::from_millis(200);

/// One connection's counters, read from `TCP_INFO` at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sample {
    /// When it was read: µs since an origin shared by all samples.
    pub at_us: u64,
    /// Bytes sent, retransmissions included.
    pub bytes_sent: u64,
    /// Bytes retransmitted.
    pub bytes_retrans: u64,
    /// Bytes acknowledged by the peer.
    pub bytes_acked: u64,
    /// The kernel's latest delivery-rate sample, bytes/s.
    pub delivery_rate: u64,
    /// The smallest RTT seen, µs.
    pub min_rtt_us: u32,
}

/// What the engine must do to one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clamp {
    /// The connection's index.
    pub conn: usize,
    /// Bytes it may keep in flight; `None`: the planned buffers again (clamp lifted).
    pub inflight: Option<u64>,
    /// Unsent bytes its writer may queue on top (`TCP_NOTSENT_LOWAT`).
    pub unsent: u64,
}

#[derive(Debug, Clone, Copy, Default)]
struct Conn {
    last: Option<Sample>,
    clamp: Option<u64>,
    calm: u32,
}

/// The governor of one session's data connections (the sending side).
#[derive(Debug, Clone)]
pub struct Governor {
    conns: Vec<Conn>,
    /// Bytes in flight the planned buffers allow each connection.
    planned: u64,
    /// Unsent bytes a writer may queue when not clamped.
    planned_unsent: u64,
    /// Clamps applied so far (for the summary).
    clamps: u64,
}

impl Governor {
    /// A governor of `conns` connections whose planned buffers allow `planned` bytes in
    /// flight each, with `planned_unsent` unsent bytes queued on top.
    pub fn new(conns: usize, planned: u64, planned_unsent: u64) -> Governor {
        assert!(conns > 0, "a session has data connections");
        Governor {
            conns: vec![Conn::default(); conns],
            planned: planned.max(FLOOR_BYTES),
            planned_unsent,
            clamps: 0,
        }
    }

    /// How often to sample: four round trips, at least [`MIN_PERIOD`] (an interval
    /// must hold enough segments for a loss share to mean something).
    pub fn period(rtt: Duration) -> Duration {
        (rtt * 4).max(MIN_PERIOD)
    }

    /// Times a connection's window was clamped or shrunk.
    pub fn clamps(&self) -> u64 {
        self.clamps
    }

    /// Whether connection `conn` is clamped now, and to how many bytes in flight.
    pub fn clamp_of(&self, conn: usize) -> Option<u64> {
        self.conns.get(conn).and_then(|c| c.clamp)
    }

    /// Feeds one sample per connection (`None` where `TCP_INFO` failed); returns the
    /// changes to make.
    pub fn tick(&mut self, samples: &[Option<Sample>]) -> Vec<Clamp> {
        debug_assert_eq!(samples.len(), self.conns.len());
        let mut out = Vec::new();
        for (i, s) in samples.iter().enumerate() {
            let Some(s) = *s else { continue };
            if let Some(change) = self.step(i, s) {
                out.push(change);
            }
        }
        out
    }

    fn step(&mut self, i: usize, now: Sample) -> Option<Clamp> {
        let c = &mut self.conns[i];
        let before = c.last.replace(now)?;
        let sent = now.bytes_sent.saturating_sub(before.bytes_sent);
        if sent < MIN_INTERVAL_BYTES || now.at_us <= before.at_us {
            return None; // idle, or too little to judge
        }
        let lost = now.bytes_retrans.saturating_sub(before.bytes_retrans);
        let share = lost as f64 / sent as f64;
        if share > HIGH_LOSS {
            c.calm = 0;
            let next = match c.clamp {
                None => achieved_bdp(&before, &now).mul_f(GAIN),
                Some(k) => k.mul_f(DECREASE),
            }
            .clamp(FLOOR_BYTES, self.planned);
            if c.clamp.is_some_and(|k| k <= next) {
                return None; // already at the floor
            }
            c.clamp = Some(next);
            self.clamps += 1;
            return Some(self.clamped(i, next));
        }
        if share >= LOW_LOSS {
            c.calm = 0;
            return None;
        }
        let k = c.clamp?;
        c.calm += 1;
        if c.calm < CALM_TICKS {
            return None;
        }
        c.calm = 0;
        let grown = k.mul_f(INCREASE).max(k + 1);
        if grown >= self.planned {
            c.clamp = None;
            return Some(Clamp {
                conn: i,
                inflight: None,
                unsent: self.planned_unsent,
            });
        }
        c.clamp = Some(grown);
        Some(self.clamped(i, grown))
    }

    fn clamped(&self, conn: usize, inflight: u64) -> Clamp {
        Clamp {
            conn,
            inflight: Some(inflight),
            unsent: (inflight / 4).min(self.planned_unsent),
        }
    }
}

/// The bandwidth-delay product a connection achieved between two samples: its
/// acknowledged rate (or the kernel's delivery-rate sample where higher: acknowledgements
/// lag while losses are repaired) times its minimum RTT.
fn achieved_bdp(before: &Sample, now: &Sample) -> u64 {
    let secs = (now.at_us - before.at_us) as f64 / 1e6;
    let acked = now.bytes_acked.saturating_sub(before.bytes_acked) as f64 / secs;
    let rate = acked.max(now.delivery_rate as f64);
    bytes(rate * f64::from(now.min_rtt_us) / 1e6)
}

/// A byte count from a product of rates and times: Rust's float-to-integer cast
/// saturates (negative and NaN give 0, too large gives `u64::MAX`), which is the
/// meaning wanted here.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn bytes(x: f64) -> u64 {
    x as u64
}

trait MulF {
    fn mul_f(self, f: f64) -> u64;
}

impl MulF for u64 {
    fn mul_f(self, f: f64) -> u64 {
        bytes(self as f64 * f)
    }
}

#[cfg(test)]
mod tests;
