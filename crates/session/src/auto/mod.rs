//! The `--compress auto` controller: compress (LZ4 or zstd level 1) only while it makes
//! the transfer faster, measured end to end.
//!
//! [`AutoController`] runs one codec at a time for an epoch of [`EPOCH_CHUNKS`] chunks,
//! across every thread of the session, and measures the *goodput* (original bytes per
//! second delivered) that epoch achieved. Whatever limits the transfer (the link, this
//! side's CPU, the receiver's CPU through TCP back pressure, the disk) is in that number.
//! [`Auto`] adds what the sink's acknowledgements need: each chunk is followed from its
//! send to its `ChunkAck`, so goodput is what arrived, not what the sockets took.
//!
//! Nothing here reads a clock: the engine passes the time ([`crate::time::Instant`]),
//! the CPU counters ([`CpuClock`], read only when [`Auto::wants_cpu_on_send`] or
//! [`Auto::wants_cpu_on_delivery`] says so) and the codecs' dry-run speeds in, and logs
//! the [`EpochReport`] an epoch's end returns.

mod controller;
mod track;

pub use controller::AutoController;
pub use track::{Auto, ChunkKey, Departure, MAX_EARLY, MAX_TRACKED};

use std::fmt;

/// The codecs the controller chooses between, by index: raw first (it costs no CPU).
pub const CANDIDATES: [Codec; 3] = [Codec::Raw, Codec::Lz4, Codec::Zstd(1)];

/// One concrete way to send a chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    /// The original bytes.
    Raw,
    /// LZ4 block format.
    Lz4,
    /// zstd at this level.
    Zstd(i32),
}

/// Chunks compressed with one codec before its goodput is judged (one epoch).
pub const EPOCH_CHUNKS: u32 = 12;
/// Chunks of an epoch that only drain what the previous codec left in the pipeline
/// (queues, socket buffers, the receiver's backlog): the clock starts after them.
pub const EPOCH_WARMUP: u32 = 4;
/// One epoch in this many tries a codec other than the best (exploration), and codec
/// speeds are measured again.
pub const PROBE_EVERY: u32 = 16;
/// A codec replaces the best only when its goodput is this much higher.
pub const SWITCH_GAIN: f64 = 1.05;
/// An untried codec gets an epoch only when its ceiling beats the best goodput by this
/// much: the ceiling is an upper bound built from a dry run on this side alone (it knows
/// nothing of the receiver's decompression, or of the copies and checksums that share
/// its cores), and every trial that loses costs an epoch of goodput (on a 1 GB loopback
/// transfer, trials at a 1.05 margin took 10 % of it).
pub const TRY_MARGIN: f64 = 1.25;

const _: () = assert!(EPOCH_WARMUP < EPOCH_CHUNKS);
const _: () = assert!(PROBE_EVERY > 1);

/// CPU counters at one moment, as the engine read them: CPU seconds this process has
/// used, and seconds the machine's CPUs have spent idle (idle + iowait in `/proc/stat`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuClock {
    /// CPU seconds of this process.
    pub process: f64,
    /// Idle seconds of the machine's CPUs, summed.
    pub idle: f64,
}

/// What to do with the next chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pick {
    /// The codec to send it with (an index into [`CANDIDATES`]).
    pub codec: usize,
    /// The epoch it counts in.
    pub epoch: u64,
    /// A codec whose speed is unknown, to be measured on this chunk first (dry run):
    /// the caller compresses a sample with it and reports through
    /// [`AutoController::observe_speed`].
    pub dry: Option<usize>,
}

/// What an epoch measured, returned when it ends (the engine logs it at debug level).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EpochReport {
    /// The epoch that ended.
    pub epoch: u64,
    /// Its codec.
    pub codec: Codec,
    /// Its goodput, bytes per second.
    pub rate: f64,
    /// Smoothed goodput per codec so far, bytes per second.
    pub rates: [Option<f64>; 3],
    /// The senders' share of time blocked on the link (NaN: not measured yet).
    pub link_share: f64,
    /// The most goodput LZ4 and zstd-1 could give (the lower of their CPU and link
    /// bounds), bytes per second; `None`: speed not measured.
    pub ceilings: [Option<f64>; 2],
    /// The codec of the next epoch.
    pub next: Codec,
}

impl fmt::Display for EpochReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mb = |x: f64| (x / 1e6).round();
        write!(
            f,
            "auto: epoch {} {:?} ran at {:.0} MB/s; goodput raw/lz4/zstd {:?} MB/s, link share {:.2}, ceilings {:?} MB/s; next {:?}",
            self.epoch,
            self.codec,
            self.rate / 1e6,
            self.rates.map(|r| r.map(mb)),
            self.link_share,
            self.ceilings.map(|c| c.map(mb)),
            self.next
        )
    }
}

#[cfg(test)]
// Simulated chunk sizes are whole numbers of bytes held as floats.
#[allow(clippy::cast_possible_truncation)]
mod tests;
