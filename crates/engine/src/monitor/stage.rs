//! Stage counters: per stage and channel, relaxed atomics in cache-line-padded cells,
//! written by the stage threads through a [`StageClock`] and read by samplers
//! (`/metrics`, the summary's bottleneck). No lock, no allocation per chunk.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// Channels counted apart; a channel id at or beyond it shares cell `id % MAX_CHANNELS`.
pub const MAX_CHANNELS: usize = 32;

/// [`MAX_CHANNELS`] as a channel id.
const MAX_CHANNEL_IDS: u32 = 32;
const _: () = assert!(MAX_CHANNEL_IDS as usize == MAX_CHANNELS);

/// A stage of the data path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stage {
    /// Reading files (source).
    Read,
    /// Compressing chunks (source).
    Compress,
    /// Writing chunks to the data connections (source).
    Send,
    /// Reading chunks off the data connections (sink).
    Recv,
    /// Decompressing chunks (sink).
    Decompress,
    /// Verifying chunks' checksums (sink).
    Verify,
    /// Writing files (sink).
    Write,
}

impl Stage {
    /// Every stage, in data-path order.
    pub const ALL: [Stage; 7] = [
        Stage::Read,
        Stage::Compress,
        Stage::Send,
        Stage::Recv,
        Stage::Decompress,
        Stage::Verify,
        Stage::Write,
    ];

    /// Its label (`stage="..."`).
    pub fn name(self) -> &'static str {
        match self {
            Stage::Read => "read",
            Stage::Compress => "compress",
            Stage::Send => "send",
            Stage::Recv => "recv",
            Stage::Decompress => "decompress",
            Stage::Verify => "verify",
            Stage::Write => "write",
        }
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// What a thread did since its clock's last lap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Time {
    /// Working (reading, compressing, sending, writing, receiving a payload).
    Busy,
    /// Waiting for input (work, a chunk from the wire or a queue).
    Idle,
    /// Waiting for the next stage (a free slot, room in a queue).
    Blocked,
    /// Not this clock's to count (another stage's clock counted it).
    Skip,
}

/// One stage of one channel. 128-byte aligned: two cells never share a cache line
/// (nor its adjacent-line prefetch pair).
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct Cell {
    bytes: AtomicU64,
    chunks: AtomicU64,
    busy_ns: AtomicU64,
    idle_ns: AtomicU64,
    blocked_ns: AtomicU64,
    threads: AtomicU64,
    /// Chunks put in the queue in front of the stage, and taken out of it.
    enqueued: AtomicU64,
    dequeued: AtomicU64,
}

/// A cell's figures read at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct CellFigures {
    /// Payload bytes through the stage.
    pub bytes: u64,
    /// Chunks through the stage.
    pub chunks: u64,
    /// Nanoseconds the stage's threads worked.
    pub busy_ns: u64,
    /// Nanoseconds they waited for input.
    pub idle_ns: u64,
    /// Nanoseconds they waited for the next stage.
    pub blocked_ns: u64,
    /// Threads that ran the stage.
    pub threads: u64,
    /// Chunks put in the queue in front of the stage.
    pub enqueued: u64,
    /// Chunks taken out of it.
    pub dequeued: u64,
}

impl Cell {
    fn read(&self) -> CellFigures {
        CellFigures {
            bytes: self.bytes.load(Ordering::Relaxed),
            chunks: self.chunks.load(Ordering::Relaxed),
            busy_ns: self.busy_ns.load(Ordering::Relaxed),
            idle_ns: self.idle_ns.load(Ordering::Relaxed),
            blocked_ns: self.blocked_ns.load(Ordering::Relaxed),
            threads: self.threads.load(Ordering::Relaxed),
            enqueued: self.enqueued.load(Ordering::Relaxed),
            dequeued: self.dequeued.load(Ordering::Relaxed),
        }
    }

    fn add_time(&self, time: Time, ns: u64) {
        let counter = match time {
            Time::Busy => &self.busy_ns,
            Time::Idle => &self.idle_ns,
            Time::Blocked => &self.blocked_ns,
            Time::Skip => return,
        };
        counter.fetch_add(ns, Ordering::Relaxed);
    }
}

/// Every stage's cells for [`MAX_CHANNELS`] channels (a session's, or the process's).
#[derive(Debug)]
pub struct StageCounters {
    cells: Box<[Cell]>,
    /// Bit `c`: channel cell `c` was used.
    used: AtomicU64,
    /// When the first clock started (the data phase's start).
    opened: OnceLock<Instant>,
    /// Nanoseconds from `opened` to the end of the last busy lap (0: none yet).
    last_busy_ns: AtomicU64,
}

impl Default for StageCounters {
    fn default() -> Self {
        StageCounters::new()
    }
}

impl StageCounters {
    /// Zeroed cells (allocated once, here).
    pub fn new() -> StageCounters {
        let cells = (0..Stage::ALL.len() * MAX_CHANNELS)
            .map(|_| Cell::default())
            .collect();
        StageCounters {
            cells,
            used: AtomicU64::new(0),
            opened: OnceLock::new(),
            last_busy_ns: AtomicU64::new(0),
        }
    }

    fn slot(channel: u32) -> usize {
        channel as usize % MAX_CHANNELS
    }

    fn cell(&self, stage: Stage, channel: u32) -> &Cell {
        &self.cells[stage as usize * MAX_CHANNELS + Self::slot(channel)]
    }

    /// Nanoseconds the stages worked: from the first clock's start to the end of the
    /// last busy lap (0 before any). What a session does after its stages last worked
    /// (the peer writing the tail, the last acks) is not in it.
    pub fn wall_ns(&self) -> u64 {
        self.last_busy_ns.load(Ordering::Relaxed)
    }

    fn mark_used(&self, channel: u32) {
        self.opened.get_or_init(Instant::now);
        let bit = 1u64 << Self::slot(channel);
        if self.used.load(Ordering::Relaxed) & bit == 0 {
            self.used.fetch_or(bit, Ordering::Relaxed);
        }
    }

    /// The figures of `stage` in `channel` now.
    pub fn figures(&self, stage: Stage, channel: u32) -> CellFigures {
        self.cell(stage, channel).read()
    }

    /// The channel cells used so far (their ids modulo [`MAX_CHANNELS`]).
    pub fn channels(&self) -> impl Iterator<Item = u32> {
        let used = self.used.load(Ordering::Relaxed);
        (0..MAX_CHANNEL_IDS).filter(move |c| used & (1 << c) != 0)
    }

    /// `stage` summed over every channel.
    pub fn total(&self, stage: Stage) -> CellFigures {
        let mut t = CellFigures::default();
        for c in self.channels() {
            let f = self.figures(stage, c);
            t.bytes += f.bytes;
            t.chunks += f.chunks;
            t.busy_ns += f.busy_ns;
            t.idle_ns += f.idle_ns;
            t.blocked_ns += f.blocked_ns;
            t.threads += f.threads;
            t.enqueued += f.enqueued;
            t.dequeued += f.dequeued;
        }
        t
    }

    /// Chunks waiting in the queues in front of `stage` now (every channel's; a chunk
    /// may be queued by one channel's thread and taken by another's).
    pub fn queued(&self, stage: Stage) -> u64 {
        let t = self.total(stage);
        t.enqueued.saturating_sub(t.dequeued)
    }
}

/// A stage thread's stopwatch: each lap gives the time since the last one to a stage
/// of the thread's channel, in the session's counters and the process's.
#[derive(Debug)]
pub struct StageClock {
    session: Arc<StageCounters>,
    channel: u32,
    /// The stage the thread runs first (where [`Self::blocked`] counts).
    home: Stage,
    /// The session's data phase start (its counters' `opened`).
    opened: Instant,
    mark: Instant,
    /// Stages this thread has counted itself in (bits of [`Stage::bit`]).
    seen: u8,
}

impl StageClock {
    /// A clock for a thread of `channel`, started now.
    pub fn new(session: &Arc<StageCounters>, channel: u32) -> StageClock {
        session.mark_used(channel);
        super::global().stages.mark_used(channel);
        let now = Instant::now();
        StageClock {
            opened: *session.opened.get_or_init(|| now),
            session: Arc::clone(session),
            channel,
            home: Stage::Read,
            mark: now,
            seen: 0,
        }
    }

    /// This clock for a thread whose own stage is `home`.
    #[must_use]
    pub fn homed(mut self, home: Stage) -> StageClock {
        self.home = home;
        self
    }

    /// Gives the time since the last lap to the thread's own stage, as waiting for the
    /// next stage.
    pub fn blocked(&mut self) {
        self.lap(self.home, Time::Blocked);
    }

    /// Gives the time since the last lap to `stage` as `time`.
    pub fn lap(&mut self, stage: Stage, time: Time) {
        let now = Instant::now();
        let ns = u64::try_from(now.duration_since(self.mark).as_nanos()).unwrap_or(u64::MAX);
        self.mark = now;
        if time == Time::Skip {
            return;
        }
        if time == Time::Busy {
            let at = u64::try_from(now.duration_since(self.opened).as_nanos()).unwrap_or(u64::MAX);
            self.session.last_busy_ns.fetch_max(at, Ordering::Relaxed);
        }
        let first = self.seen & stage.bit() == 0;
        self.seen |= stage.bit();
        for counters in [&*self.session, &super::global().stages] {
            let cell = counters.cell(stage, self.channel);
            cell.add_time(time, ns);
            if first {
                cell.threads.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Counts one chunk of `bytes` through `stage`.
    pub fn chunk(&self, stage: Stage, bytes: u64) {
        for counters in [&*self.session, &super::global().stages] {
            let cell = counters.cell(stage, self.channel);
            cell.bytes.fetch_add(bytes, Ordering::Relaxed);
            cell.chunks.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A chunk was put in the queue in front of `stage`.
    pub fn enqueued(&self, stage: Stage) {
        for counters in [&*self.session, &super::global().stages] {
            let cell = counters.cell(stage, self.channel);
            cell.enqueued.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A chunk was taken out of the queue in front of `stage`.
    pub fn dequeued(&self, stage: Stage) {
        for counters in [&*self.session, &super::global().stages] {
            let cell = counters.cell(stage, self.channel);
            cell.dequeued.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// [`Self::lap`] as busy, and one chunk of `bytes`.
    #[inline]
    pub fn worked(&mut self, stage: Stage, bytes: u64) {
        self.lap(stage, Time::Busy);
        self.chunk(stage, bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn laps_add_up_per_stage_and_a_thread_counts_once() {
        let c = Arc::new(StageCounters::new());
        let mut clock = StageClock::new(&c, 3);
        std::thread::sleep(std::time::Duration::from_millis(2));
        clock.lap(Stage::Read, Time::Idle);
        clock.worked(Stage::Read, 100);
        clock.worked(Stage::Read, 50);
        clock.blocked();
        clock.lap(Stage::Send, Time::Skip);
        clock.enqueued(Stage::Write);
        clock.enqueued(Stage::Write);
        clock.dequeued(Stage::Write);
        assert_eq!(c.queued(Stage::Write), 1);
        assert_eq!(c.queued(Stage::Send), 0);
        let r = c.figures(Stage::Read, 3);
        assert_eq!((r.bytes, r.chunks, r.threads), (150, 2, 1));
        assert!(r.idle_ns >= 2_000_000, "{r:?}");
        assert_eq!(c.figures(Stage::Send, 3), CellFigures::default());
        assert_eq!(c.channels().collect::<Vec<_>>(), [3]);
        let other = StageClock::new(&c, 3 + MAX_CHANNEL_IDS);
        drop(other);
        assert_eq!(c.total(Stage::Read).bytes, 150);
        assert!(
            c.wall_ns() >= 2_000_000,
            "the first busy lap ended after the sleep"
        );
        assert!(
            super::super::global()
                .stages()
                .figures(Stage::Read, 3)
                .bytes
                >= 150
        );
    }
}

/// What the hooks cost: run with `cargo test --release -p sluice-engine --lib
/// hook_cost -- --ignored --nocapture` (a measurement, not a check: timings drift).
#[cfg(test)]
mod cost {
    use super::*;

    #[test]
    #[ignore = "a measurement; run by hand in release"]
    fn hook_cost() {
        let c = Arc::new(StageCounters::new());
        let mut clock = StageClock::new(&c, 0);
        let n = 2_000_000u32;
        let t = Instant::now();
        for i in 0..n {
            // What one chunk costs on an inline source thread: idle, blocked, read,
            // blocked, send.
            clock.lap(Stage::Read, Time::Idle);
            clock.blocked();
            clock.worked(Stage::Read, u64::from(i));
            clock.blocked();
            clock.worked(Stage::Send, u64::from(i));
        }
        let per_chunk = t.elapsed().as_nanos() as f64 / f64::from(n);
        let chunk_ns_at_10_gbit = (1u64 << 20) as f64 * 8.0 / 10.0;
        eprintln!(
            "hooks: {per_chunk:.0} ns per chunk; {:.4} % of a 1 MiB chunk at 10 Gbit/s",
            100.0 * per_chunk / chunk_ns_at_10_gbit
        );
        assert_eq!(c.figures(Stage::Read, 0).chunks, u64::from(n));
    }
}
