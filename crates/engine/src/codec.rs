//! Chunk compression (seed 001): LZ4 or zstd per chunk, chosen by the user or by an
//! adaptive controller that compresses only while it makes the transfer faster.
//!
//! Each compressing thread owns one [`Compressor`] and each decompressing thread one
//! [`Decompressor`]; their scratch buffers are allocated once, by the thread itself, so
//! the kernel's first-touch policy puts them on the thread's (pinned) node. A chunk that
//! does not shrink travels raw. The chunk checksum always covers the original bytes.
//! `auto`'s [`AutoController`] is shared by a session's compressors ([`SharedAuto`]).

use sluice_wire::Compression;
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What `--compress` asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CompressMode {
    /// Never compress.
    #[default]
    None,
    /// LZ4 block format on every chunk.
    Lz4,
    /// zstd at this level on every chunk.
    Zstd(i32),
    /// Measure, and compress (LZ4 or zstd level 1) only while it makes chunks arrive sooner.
    Auto,
}

impl CompressMode {
    /// The mode a session sending to a peer actually uses: `auto` sends raw to a peer on
    /// this very host, where the bytes cross no wire, only memory that the same CPUs
    /// copy: a codec spends more CPU on a byte than moving it costs, so it can never win,
    /// and trying costs goodput (epochs on a loopback transfer measure within ±30 % of
    /// each other, so a trial could look good by chance). An explicit codec is kept.
    ///
    /// `SLUICE_AUTO_ON_LOOPBACK=1` (test only: the integration tests run over loopback)
    /// keeps `auto` measuring there.
    pub fn toward(self, peer_is_this_host: bool) -> CompressMode {
        let tested = std::env::var_os("SLUICE_AUTO_ON_LOOPBACK").is_some_and(|v| v == "1");
        match self {
            CompressMode::Auto if peer_is_this_host && !tested => {
                tracing::info!("--compress auto: the peer is this host (loopback): sending raw");
                CompressMode::None
            }
            other => other,
        }
    }
}

impl FromStr for CompressMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let expected = "expected none, lz4, zstd, zstd:LEVEL (1-19) or auto";
        match s {
            "none" => Ok(CompressMode::None),
            "lz4" => Ok(CompressMode::Lz4),
            "zstd" => Ok(CompressMode::Zstd(3)),
            "auto" => Ok(CompressMode::Auto),
            _ => match s.strip_prefix("zstd:").map(str::parse::<i32>) {
                Some(Ok(level)) if (1..=19).contains(&level) => Ok(CompressMode::Zstd(level)),
                _ => Err(format!("unknown compression {s:?}: {expected}")),
            },
        }
    }
}

impl fmt::Display for CompressMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CompressMode::None => f.write_str("none"),
            CompressMode::Lz4 => f.write_str("lz4"),
            CompressMode::Zstd(l) => write!(f, "zstd:{l}"),
            CompressMode::Auto => f.write_str("auto"),
        }
    }
}

/// The codecs the adaptive controller chooses between.
const CANDIDATES: [Codec; 3] = [Codec::Raw, Codec::Lz4, Codec::Zstd(1)];

/// One concrete way to send a chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Codec {
    Raw,
    Lz4,
    Zstd(i32),
}

/// Chunks compressed with one codec before its goodput is judged (one epoch).
const EPOCH_CHUNKS: u32 = 12;
/// Chunks of an epoch that only drain what the previous codec left in the pipeline
/// (queues, socket buffers, the receiver's backlog): the clock starts after them.
const EPOCH_WARMUP: u32 = 4;
/// One epoch in this many tries a codec other than the best (exploration), and codec
/// speeds are measured again.
const PROBE_EVERY: u32 = 16;
/// A codec replaces the best only when its goodput is this much higher.
const SWITCH_GAIN: f64 = 1.05;
/// An untried codec gets an epoch only when its ceiling beats the best goodput by this
/// much: the ceiling is an upper bound built from a dry run on this side alone (it knows
/// nothing of the receiver's decompression, or of the copies and checksums that share
/// its cores), and every trial that loses costs an epoch of goodput (on a 1 GB loopback
/// transfer, trials at a 1.05 margin took 10 % of it).
const TRY_MARGIN: f64 = 1.25;
/// Bytes of a chunk a dry run compresses to measure a codec's speed and ratio.
const DRY_RUN_BYTES: usize = 512 << 10;
/// Pieces of a chunk, spread over it, that make up a dry run's sample.
const DRY_RUN_PIECES: usize = 4;

/// CPU counters at one moment: CPU seconds this process has used, and seconds the
/// machine's CPUs have spent idle (idle + iowait in `/proc/stat`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct CpuClock {
    process: f64,
    idle: f64,
}

impl CpuClock {
    /// Now; `None` where `/proc/stat` cannot be read.
    fn now() -> Option<CpuClock> {
        let process = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let line = stat.lines().next()?.strip_prefix("cpu ")?;
        // user nice system idle iowait ...: idle and iowait, in clock ticks.
        let ticks: u64 = line
            .split_whitespace()
            .skip(3)
            .take(2)
            .map(|f| f.parse::<u64>().ok())
            .sum::<Option<u64>>()?;
        let hz = rustix::param::clock_ticks_per_second();
        #[allow(clippy::cast_precision_loss)]
        Some(CpuClock {
            process: process.tv_sec as f64 + process.tv_nsec as f64 * 1e-9,
            idle: ticks as f64 / hz as f64,
        })
    }
}

/// The adaptive choice, measured end to end. `auto` runs one codec at a time for an
/// epoch of [`EPOCH_CHUNKS`] chunks, across every thread of the session, and measures
/// the *goodput* (original bytes per second onto the wire) that epoch achieved. Whatever
/// limits the transfer (the link, this side's CPU, the receiver's CPU through TCP back
/// pressure, the disk) is in that number: with the link as the bottleneck a codec that
/// halves the bytes doubles the goodput and wins; with the CPU as the bottleneck raw
/// wins. It starts raw. A codec is only tried when it could win: its compression speed,
/// measured on a chunk that then goes raw anyway (a dry run), times the compressing
/// threads, must beat the best goodput so far, so a fast link never pays for a
/// pointless trial. Then the best is kept and one epoch in [`PROBE_EVERY`] tries another
/// that could win, so a change of link or data is followed. Pure (time is passed in),
/// so it is tested with simulated pipelines.
#[derive(Debug, Clone)]
pub struct AutoController {
    /// The codec of the running epoch, as an index into `CANDIDATES`.
    current: usize,
    /// The running epoch's number; chunks compressed in an earlier one are not counted.
    epoch: u64,
    /// When the warm-up's last chunk went out (seconds), and bytes of the chunks after it.
    first_sent: Option<f64>,
    /// The CPU counters then (sampled in raw epochs only).
    first_cpu: Option<CpuClock>,
    /// What sending raw costs: CPU seconds of this process per original byte, and the
    /// cores it could use (its own busy ones plus the machine's idle ones), from the
    /// last raw epoch. A codec adds its own cost per byte to the first; if that leaves
    /// no more goodput than raw had, the CPU is the bottleneck and the codec is not tried.
    raw_cost: Option<(f64, f64)>,
    /// CPUs this process may run on.
    cores: f64,
    /// The share of their time the threads that hand chunks to the wire spent blocked
    /// there (in a socket write, or on a full queue to the senders) in the last raw epoch:
    /// near 1 when the link (or whatever drains it) is the bottleneck, near 0 when the
    /// disk or the CPU before it is. A codec makes only that share faster.
    link_share: Option<f64>,
    /// Threads that hand raw chunks to the wire.
    senders: u32,
    /// This epoch's sends: seconds blocked, first and last send time, sends counted.
    send_blocked: f64,
    send_first: Option<f64>,
    send_last: f64,
    sends: u32,
    bytes: u64,
    chunks: u32,
    /// Measured goodput per codec, bytes per second (smoothed).
    rate: [Option<f64>; 3],
    /// Measured compression speed per codec, original bytes per second per thread.
    speed: [Option<f64>; 3],
    /// Compressed size over original size per codec, from the dry runs.
    ratio: [f64; 3],
    /// Threads compressing for the session.
    threads: u32,
    /// Chunks handed out in the running epoch, and the dry runs handed out.
    picked: u32,
    dry_taken: [bool; 3],
    /// The codec judged best (raw until another has proven better).
    best: usize,
    epochs_done: u32,
    probes: usize,
}

impl Default for AutoController {
    fn default() -> Self {
        AutoController {
            current: 0,
            epoch: 0,
            first_sent: None,
            first_cpu: None,
            raw_cost: None,
            cores: f64::INFINITY,
            link_share: None,
            senders: 1,
            send_blocked: 0.0,
            send_first: None,
            send_last: 0.0,
            sends: 0,
            bytes: 0,
            chunks: 0,
            rate: [None; 3],
            speed: [Some(f64::INFINITY), None, None],
            ratio: [1.0; 3],
            threads: 1,
            picked: 0,
            dry_taken: [true, false, false],
            best: 0,
            epochs_done: 0,
            probes: 0,
        }
    }
}

/// What to do with the next chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pick {
    /// The codec to send it with.
    codec: usize,
    /// The epoch it counts in.
    epoch: u64,
    /// A codec whose speed is unknown, to be measured on this chunk first (dry run).
    dry: Option<usize>,
}

impl AutoController {
    /// The codec for the next chunk, the epoch it counts in, and whether to measure a
    /// codec's speed on it first. Dry runs go to the first chunks of an epoch, which
    /// are warm-up, not measured: they never slow a measured epoch.
    fn pick(&mut self) -> Pick {
        self.picked = self.picked.saturating_add(1);
        let dry = (1..CANDIDATES.len())
            .find(|&i| self.speed[i].is_none() && !self.dry_taken[i])
            .filter(|_| self.picked <= EPOCH_WARMUP / 2);
        if let Some(i) = dry {
            self.dry_taken[i] = true;
        }
        Pick {
            codec: self.current,
            epoch: self.epoch,
            dry,
        }
    }

    /// A dry run: codec `i` compressed at `bytes_per_sec` on one thread, to `ratio` of
    /// the original size.
    fn observe_speed(&mut self, i: usize, bytes_per_sec: f64, ratio: f64) {
        self.speed[i] = Some(bytes_per_sec);
        self.ratio[i] = ratio.clamp(0.01, 1.0);
    }

    /// A chunk picked in `epoch` was handed to the wire at `now` (seconds) after its
    /// thread waited `blocked` seconds for the socket or the senders' queue.
    fn handed(&mut self, epoch: u64, blocked: f64, now: f64) {
        if epoch != self.epoch || self.current != 0 {
            return;
        }
        self.send_first.get_or_insert(now);
        self.send_last = now;
        self.send_blocked += blocked;
        self.sends += 1;
    }

    /// The most goodput codec `i` could give, as two bounds: what the CPU allows (every
    /// thread compressing flat out, within the CPU left once raw sending's own cost is
    /// paid) and what fewer bytes on the wire allow (see [`Self::link_ceiling`]).
    fn ceilings(&self, i: usize) -> Option<(f64, f64)> {
        let speed = self.speed[i]?;
        let threads = speed * f64::from(self.threads.max(1));
        let cpu = match self.raw_cost {
            Some((cost, cores)) => threads.min(cores / (cost + 1.0 / speed)),
            None => threads,
        };
        Some((cpu, self.link_ceiling(i)))
    }

    /// Fewer bytes on the wire make only the time spent waiting on the link shorter, by
    /// the codec's ratio: with a share `f` of it, a pipeline that moved `r_j` with codec
    /// `j` moves at most `r_j * d_j / d_i` with codec `i`, where `d = (1 - f) + f * ratio`
    /// (raw: ratio 1). The best such estimate over the codecs measured so far. A codec
    /// that does not shrink the data (random bytes), or a pipeline that never waits on
    /// its link (a slow disk), gains nothing.
    fn link_ceiling(&self, i: usize) -> f64 {
        let f = self.link_share.unwrap_or(1.0);
        let d = |k: usize| (1.0 - f) + f * if k == 0 { 1.0 } else { self.ratio[k] };
        (0..CANDIDATES.len())
            .filter_map(|j| self.rate[j].map(|r| r * d(j) / d(i)))
            .reduce(f64::max)
            .unwrap_or(f64::INFINITY)
    }

    /// A chunk of `payload` original bytes, compressed in `epoch`, went onto the wire
    /// (its socket write returned, or the senders' queue took it) at `now` seconds;
    /// `cpu` reads the CPU counters (called at most twice an epoch, in raw epochs).
    fn sent(&mut self, epoch: u64, payload: u64, now: f64, cpu: &dyn Fn() -> Option<CpuClock>) {
        if epoch != self.epoch {
            return;
        }
        // Goodput from the departure of the warm-up's last chunk to the epoch's last:
        // the pipeline then runs at this codec's pace alone.
        self.chunks += 1;
        if self.chunks < EPOCH_WARMUP {
            return;
        }
        let raw = self.current == 0;
        let Some(t0) = self.first_sent else {
            self.first_sent = Some(now);
            self.first_cpu = if raw { cpu() } else { None };
            return;
        };
        self.bytes += payload;
        if self.chunks >= EPOCH_CHUNKS {
            let secs = (now - t0).max(1e-9);
            let load = match (self.first_cpu, if raw { cpu() } else { None }) {
                (Some(a), Some(b)) => {
                    Some(((b.process - a.process) / secs, (b.idle - a.idle) / secs))
                }
                _ => None,
            };
            self.close(secs, load);
        }
    }

    /// Whether codec `i` is worth an epoch: untried or stale, and able to beat `top`.
    fn could_win(&self, i: usize, top: f64) -> bool {
        // The CPU bound is optimistic (a dry run on this side alone), so it must promise
        // a clear win; the link bound comes from measured goodput, a plain win will do.
        self.ceilings(i)
            .is_some_and(|(cpu, link)| cpu > TRY_MARGIN * top && link > SWITCH_GAIN * top)
    }

    /// Ends the epoch: it moved its bytes in `secs`; `load` is the cores this process kept
    /// busy and the cores idle on the machine meanwhile (raw epochs).
    fn close(&mut self, secs: f64, load: Option<(f64, f64)>) {
        let r = self.bytes as f64 / secs.max(1e-9);
        let c = self.current;
        if let Some(first) = self
            .send_first
            .filter(|_| c == 0 && self.sends >= EPOCH_WARMUP)
        {
            let span = (self.send_last - first).max(1e-9) * f64::from(self.senders.max(1));
            self.link_share = Some((self.send_blocked / span).clamp(0.0, 1.0));
        }
        self.send_blocked = 0.0;
        self.send_first = None;
        self.sends = 0;
        if let Some((busy, idle)) = load.filter(|_| r > 0.0) {
            let idle = idle.clamp(0.0, (self.cores - busy).max(0.0));
            self.raw_cost = Some((busy / r, busy + idle));
        }
        self.rate[c] = Some(match self.rate[c] {
            None => r,
            Some(old) => old + 0.5 * (r - old),
        });
        self.epochs_done = self.epochs_done.saturating_add(1);
        let top = self.rate.iter().flatten().copied().fold(0.0, f64::max);
        let near = |i: usize| self.rate[i].is_some_and(|r| r * SWITCH_GAIN >= top);
        // Keep the best while it is within the margin of the top (no flapping on noise);
        // otherwise the cheapest codec near the top (raw before lz4 before zstd: equal
        // goodput for less CPU).
        if !near(self.best) {
            self.best = (0..CANDIDATES.len()).find(|&i| near(i)).unwrap_or(0);
        }
        let probe = self.epochs_done % PROBE_EVERY == 0;
        if probe {
            // Data and CPU load change: measure the codecs' speeds again.
            self.speed[1] = None;
            self.speed[2] = None;
            self.dry_taken = [true, false, false];
        }
        let untried =
            (1..CANDIDATES.len()).find(|&i| self.rate[i].is_none() && self.could_win(i, top));
        self.current = match untried {
            Some(i) => i,
            None if probe => {
                self.probes += 1;
                // Raw always (it costs no CPU); a codec only while it could still win.
                let others: Vec<usize> = (0..CANDIDATES.len())
                    .filter(|&i| {
                        i != self.best
                            && (i == 0 || (self.rate[i].is_some() && self.could_win(i, top)))
                    })
                    .collect();
                others
                    .get(self.probes % others.len().max(1))
                    .copied()
                    .unwrap_or(self.best)
            }
            None => self.best,
        };
        tracing::debug!(
            "auto: epoch {} {:?} ran at {:.0} MB/s; goodput raw/lz4/zstd {:?} MB/s, link share {:.2}, ceilings {:?} MB/s; next {:?}",
            self.epoch,
            CANDIDATES[c],
            r / 1e6,
            self.rate.map(|r| r.map(|x| (x / 1e6).round())),
            self.link_share.unwrap_or(f64::NAN),
            [1, 2].map(|i| self
                .ceilings(i)
                .map(|(cpu, link)| (cpu.min(link) / 1e6).round())),
            CANDIDATES[self.current]
        );
        self.epoch += 1;
        self.first_sent = None;
        self.first_cpu = None;
        self.bytes = 0;
        self.chunks = 0;
        self.picked = 0;
    }

    /// The codec judged best so far.
    fn best(&self) -> usize {
        self.best
    }
}

/// Chunks `auto` follows until the sink acknowledges them, at most: far more than can be
/// in flight (socket buffers and the sink's slots hold tens); past it, the oldest epochs'
/// entries are dropped.
const MAX_TRACKED: usize = 1 << 16;

/// A chunk as the sink names it in `ChunkAck`/`ChunkNack`: (file id, offset).
pub type ChunkKey = (u64, u64);

/// One [`AutoController`] shared by every thread of a session that compresses.
///
/// Where the sink acknowledges chunks (`CHUNK_ACKS`), goodput is measured when they are
/// *delivered*: each chunk sent is remembered with its epoch until its `ChunkAck`
/// arrives. Measured when the socket took it instead, a codec that halves the bytes
/// looks better than it is for as long as the pipeline's buffers (socket buffers on
/// both hosts, the sink's slots: tens of MB) fill with twice the data, longer than an
/// epoch on a fast path: `auto` then compressed 70 % of a loopback transfer that raw
/// finished faster.
#[derive(Debug)]
pub struct SharedAuto {
    origin: Instant,
    ctl: Mutex<AutoController>,
    /// Whether delivery is acknowledged (else goodput is counted at the socket).
    acked: std::sync::atomic::AtomicBool,
    /// Chunks sent and not yet acknowledged: key -> (epoch, original bytes).
    in_flight: Mutex<std::collections::HashMap<ChunkKey, (u64, u64)>>,
    /// Reads the CPU counters (a fixed function in tests).
    cpu: fn() -> Option<CpuClock>,
}

impl SharedAuto {
    /// A fresh controller, its clock starting now.
    pub fn new() -> Arc<SharedAuto> {
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        #[allow(clippy::cast_precision_loss)]
        let ctl = AutoController {
            cores: cores as f64,
            ..AutoController::default()
        };
        Arc::new(SharedAuto {
            origin: Instant::now(),
            ctl: Mutex::new(ctl),
            acked: std::sync::atomic::AtomicBool::new(false),
            in_flight: Mutex::new(std::collections::HashMap::new()),
            cpu: CpuClock::now,
        })
    }

    /// The sink acknowledges every chunk: measure goodput on delivery from now on.
    pub fn measure_on_ack(&self) {
        lock_ignoring_poison(&self.in_flight).reserve(1024);
        self.acked.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// A chunk of `payload` original bytes, picked in `epoch`, left at `now`, after its
    /// thread waited `blocked` for the wire.
    fn sent(&self, key: ChunkKey, epoch: u64, payload: u64, now: Instant, blocked: Duration) {
        let at = now.duration_since(self.origin).as_secs_f64();
        // Followed until the sink acknowledges it; if it cannot be (the map is full of
        // this epoch's chunks), counted as it leaves rather than never.
        let followed = self.acked.load(std::sync::atomic::Ordering::Relaxed) && {
            let mut map = lock_ignoring_poison(&self.in_flight);
            if map.len() >= MAX_TRACKED {
                map.retain(|_, (e, _)| *e >= epoch);
            }
            let room = map.len() < MAX_TRACKED;
            if room {
                map.insert(key, (epoch, payload));
            }
            room
        };
        let mut ctl = self.lock();
        ctl.handed(epoch, blocked.as_secs_f64(), at);
        if !followed {
            ctl.sent(epoch, payload, at, &self.cpu);
        }
    }

    /// The sink acknowledged the chunk `key`; its word was read at `at`.
    pub fn delivered(&self, key: ChunkKey, at: Instant) {
        let Some((epoch, payload)) = lock_ignoring_poison(&self.in_flight).remove(&key) else {
            return;
        };
        let at = at.saturating_duration_since(self.origin).as_secs_f64();
        self.lock().sent(epoch, payload, at, &self.cpu);
    }

    /// The sink refused the chunk `key` (it is sent again, as a new chunk).
    pub fn refused(&self, key: ChunkKey) {
        lock_ignoring_poison(&self.in_flight).remove(&key);
    }

    /// How many threads compress for the session (the ceiling of a codec is its
    /// per-thread speed times this).
    pub fn set_threads(&self, n: u32) {
        self.lock().threads = n.max(1);
    }

    /// How many threads hand raw chunks to the wire (the link's share of their time is
    /// measured over all of them).
    pub fn set_senders(&self, n: u32) {
        self.lock().senders = n.max(1);
    }

    /// Whether the running epoch compresses (false: chunks go raw, and a thread can
    /// send them without handing them to a compress thread).
    pub fn compressing(&self) -> bool {
        self.lock().current != 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, AutoController> {
        lock_ignoring_poison(&self.ctl)
    }
}

fn lock_ignoring_poison<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Compresses chunks for one thread.
pub struct Compressor {
    mode: CompressMode,
    scratch: Vec<u8>,
    zstd: Option<zstd::bulk::Compressor<'static>>,
    zstd_level: i32,
    auto: Arc<SharedAuto>,
    /// The `auto` epoch of the last chunk compressed (reported by `record_sent`).
    epoch: u64,
}

impl fmt::Debug for Compressor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Compressor")
            .field("mode", &self.mode)
            .field("auto", &self.auto)
            .finish()
    }
}

/// The result of [`Compressor::compress`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compressed {
    /// How the payload is encoded (`None`: it is the original bytes).
    pub compression: Compression,
    /// Payload bytes.
    pub wire_len: usize,
}

impl Compressor {
    /// A compressor for `mode` with a controller of its own; its scratch buffer grows
    /// once to the largest chunk.
    pub fn new(mode: CompressMode) -> Compressor {
        Compressor::sharing(mode, &SharedAuto::new())
    }

    /// A compressor whose `auto` decisions are the session's, shared with every other
    /// compressing thread through `auto`.
    pub fn sharing(mode: CompressMode, auto: &Arc<SharedAuto>) -> Compressor {
        Compressor {
            mode,
            scratch: Vec::new(),
            zstd: None,
            zstd_level: 0,
            auto: Arc::clone(auto),
            epoch: 0,
        }
    }

    /// Whether compression is off altogether.
    pub fn is_off(&self) -> bool {
        self.mode == CompressMode::None
    }

    /// The codec the controller would use now (for the summary).
    pub fn current(&self) -> &'static str {
        match self.pick_for_mode() {
            Codec::Raw => "none",
            Codec::Lz4 => "lz4",
            Codec::Zstd(_) => "zstd",
        }
    }

    fn pick_for_mode(&self) -> Codec {
        match self.mode {
            CompressMode::None => Codec::Raw,
            CompressMode::Lz4 => Codec::Lz4,
            CompressMode::Zstd(l) => Codec::Zstd(l),
            CompressMode::Auto => CANDIDATES[self.auto.lock().best()],
        }
    }

    /// Compresses `chunk[..raw_len]` in place when that shrinks it: the encoded bytes
    /// replace the chunk's prefix (`chunk` is the buffer slot, at least `raw_len` long).
    pub fn compress(&mut self, chunk: &mut [u8], raw_len: usize) -> Compressed {
        let raw = Compressed {
            compression: Compression::None,
            wire_len: raw_len,
        };
        let codec = match self.mode {
            CompressMode::Auto => {
                let pick = self.auto.lock().pick();
                self.epoch = pick.epoch;
                if let Some(i) = pick.dry.filter(|_| raw_len > 0) {
                    let (speed, ratio) = self.dry_run(CANDIDATES[i], &chunk[..raw_len]);
                    self.auto.lock().observe_speed(i, speed, ratio);
                }
                CANDIDATES[pick.codec]
            }
            _ => self.pick_for_mode(),
        };
        if codec == Codec::Raw || raw_len == 0 {
            return raw;
        }
        let Some((compression, n)) = self.encode(codec, &chunk[..raw_len]) else {
            return raw;
        };
        if n >= raw_len {
            return raw; // did not shrink: send the original bytes
        }
        chunk[..n].copy_from_slice(&self.scratch[..n]);
        Compressed {
            compression,
            wire_len: n,
        }
    }

    /// Measures `codec` on a sample of `chunk` (the output is not used): its speed in
    /// original bytes per second and its ratio. The sample is [`DRY_RUN_PIECES`] pieces
    /// spread over the chunk, not its start: a detector frame's first rows lie outside
    /// the beam and are all zeros, which made LZ4 look 100 times better and 5 times
    /// faster than it was on the whole frame.
    fn dry_run(&mut self, codec: Codec, chunk: &[u8]) -> (f64, f64) {
        let piece = (DRY_RUN_BYTES / DRY_RUN_PIECES).min(chunk.len());
        let step = chunk.len() / DRY_RUN_PIECES;
        // Contexts and scratch exist before the clock starts: their set-up is paid once,
        // not per chunk (it made zstd look 4x slower than it is).
        self.prepare(codec, piece);
        let (mut secs, mut raw, mut out) = (0.0f64, 0usize, 0usize);
        for k in 0..DRY_RUN_PIECES {
            let at = (k * step).min(chunk.len() - piece);
            let started = Instant::now();
            let n = self
                .encode(codec, &chunk[at..at + piece])
                .map_or(piece, |(_, n)| n);
            secs += started.elapsed().as_secs_f64();
            raw += piece;
            out += n.min(piece);
        }
        (raw as f64 / secs.max(1e-9), out as f64 / raw.max(1) as f64)
    }

    /// Makes the scratch buffer hold an encoding of `len` bytes and `codec`'s context
    /// exist (each grows or is made once, then reused).
    fn prepare(&mut self, codec: Codec, len: usize) {
        let bound =
            lz4_flex::block::get_maximum_output_size(len).max(zstd::zstd_safe::compress_bound(len));
        if self.scratch.len() < bound {
            self.scratch.resize(bound, 0);
        }
        if let Codec::Zstd(level) = codec {
            if self.zstd.is_none() || self.zstd_level != level {
                self.zstd = zstd::bulk::Compressor::new(level).ok();
                self.zstd_level = level;
            }
        }
    }

    /// Encodes `input` with `codec` into the scratch buffer: the encoding and its
    /// length, or `None` when the codec failed (the chunk then travels raw).
    fn encode(&mut self, codec: Codec, input: &[u8]) -> Option<(Compression, usize)> {
        self.prepare(codec, input.len());
        match codec {
            Codec::Lz4 => lz4_flex::block::compress_into(input, &mut self.scratch)
                .ok()
                .map(|n| (Compression::Lz4, n)),
            Codec::Zstd(_) => {
                let z = self.zstd.as_mut()?;
                z.compress_to_buffer(input, &mut self.scratch)
                    .ok()
                    .map(|n| (Compression::Zstd, n))
            }
            Codec::Raw => None,
        }
    }

    /// Records that the last chunk compressed, `key` with `payload` original bytes, is
    /// on the wire (its socket write returned, or the senders' queue took it) after the
    /// thread waited `blocked` for it: `auto` counts its goodput when the sink
    /// acknowledges it ([`SharedAuto::delivered`]), or now where the sink does not
    /// acknowledge chunks.
    pub fn record_sent(&mut self, key: ChunkKey, payload: usize, blocked: Duration) {
        if self.mode != CompressMode::Auto {
            return;
        }
        self.auto
            .sent(key, self.epoch, payload as u64, Instant::now(), blocked);
    }
}

/// Decompresses chunks for one thread.
pub struct Decompressor {
    scratch: Vec<u8>,
    zstd: Option<zstd::bulk::Decompressor<'static>>,
}

impl fmt::Debug for Decompressor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Decompressor").finish_non_exhaustive()
    }
}

impl Default for Decompressor {
    fn default() -> Self {
        Decompressor::new()
    }
}

impl Decompressor {
    /// A decompressor; its scratch buffer grows once to the largest chunk.
    pub fn new() -> Decompressor {
        Decompressor {
            scratch: Vec::new(),
            zstd: None,
        }
    }

    /// Replaces the `wire_len` encoded bytes at the start of `chunk` by the `raw_len`
    /// original bytes. A payload that does not decode to exactly `raw_len` bytes is an
    /// error: the chunk is corrupt and must never be written.
    ///
    /// # Errors
    /// The payload is not a valid `compression` encoding of `raw_len` bytes.
    pub fn decompress(
        &mut self,
        compression: Compression,
        chunk: &mut [u8],
        wire_len: usize,
        raw_len: usize,
    ) -> Result<(), String> {
        if compression == Compression::None {
            return Ok(());
        }
        if raw_len > chunk.len() {
            return Err(format!(
                "{raw_len} original bytes exceed the {}-byte slot",
                chunk.len()
            ));
        }
        if self.scratch.len() < raw_len {
            self.scratch.resize(raw_len, 0);
        }
        let input = &chunk[..wire_len];
        let out = &mut self.scratch[..raw_len];
        let n = match compression {
            Compression::Lz4 => {
                lz4_flex::block::decompress_into(input, out).map_err(|e| format!("lz4: {e}"))?
            }
            Compression::Zstd => {
                if self.zstd.is_none() {
                    self.zstd = zstd::bulk::Decompressor::new().ok();
                }
                let z = self
                    .zstd
                    .as_mut()
                    .ok_or("zstd: cannot create a decompression context")?;
                z.decompress_to_buffer(input, out)
                    .map_err(|e| format!("zstd: {e}"))?
            }
            Compression::None => raw_len,
        };
        if n != raw_len {
            return Err(format!("decoded {n} bytes, the header says {raw_len}"));
        }
        chunk[..raw_len].copy_from_slice(&self.scratch[..raw_len]);
        Ok(())
    }
}

#[cfg(test)]
// Test data generators truncate on purpose.
#[allow(clippy::cast_possible_truncation)]
mod tests {
    use super::*;

    fn compressible(n: usize) -> Vec<u8> {
        (0..n).map(|i| ((i / 7) % 13) as u8).collect()
    }

    fn random(n: usize) -> Vec<u8> {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    fn round_trip(mode: CompressMode, data: &[u8]) -> Compressed {
        let mut slot = data.to_vec();
        let mut c = Compressor::new(mode);
        let out = c.compress(&mut slot, data.len());
        let mut d = Decompressor::new();
        d.decompress(out.compression, &mut slot, out.wire_len, data.len())
            .unwrap();
        assert_eq!(&slot[..data.len()], data, "{mode} round trip");
        out
    }

    #[test]
    fn every_codec_round_trips_compressible_random_and_mixed_data() {
        let mut mixed = compressible(1 << 19);
        mixed.extend(random(1 << 19));
        for mode in [
            CompressMode::None,
            CompressMode::Lz4,
            CompressMode::Zstd(1),
            CompressMode::Zstd(9),
            CompressMode::Auto,
        ] {
            for data in [
                compressible(1 << 20),
                random(1 << 20),
                mixed.clone(),
                vec![],
                vec![7],
            ] {
                round_trip(mode, &data);
            }
        }
    }

    #[test]
    fn a_chunk_that_does_not_shrink_travels_raw() {
        let out = round_trip(CompressMode::Lz4, &random(1 << 20));
        assert_eq!(out.compression, Compression::None);
        assert_eq!(out.wire_len, 1 << 20);
        let out = round_trip(CompressMode::Lz4, &compressible(1 << 20));
        assert_eq!(out.compression, Compression::Lz4);
        assert!(out.wire_len < 1 << 18);
    }

    #[test]
    fn a_corrupt_compressed_chunk_is_an_error() {
        let data = compressible(1 << 16);
        let mut slot = data.clone();
        let out = Compressor::new(CompressMode::Lz4).compress(&mut slot, data.len());
        slot[out.wire_len / 2] ^= 0xff;
        slot[1] ^= 0x55;
        let mut d = Decompressor::new();
        let r = d.decompress(out.compression, &mut slot, out.wire_len, data.len());
        // Either the decoder refuses it, or it decodes to other bytes, which the chunk
        // checksum then refuses: it never silently yields the original length of garbage
        // without one of the two checks failing.
        if r.is_ok() {
            assert_ne!(&slot[..data.len()], &data[..]);
        }
        let mut zslot = data.clone();
        let zout = Compressor::new(CompressMode::Zstd(3)).compress(&mut zslot, data.len());
        zslot[zout.wire_len - 3] ^= 0xff;
        assert!(d
            .decompress(zout.compression, &mut zslot, zout.wire_len, data.len())
            .is_err());
    }

    /// A simulated pipeline: codec `i` delivers min(its CPU speed, link / its ratio)
    /// original bytes per second (raw: the link). Drives `n` chunks of 4 MiB through the
    /// controller with that clock; returns the codec it judges best.
    fn drive(
        a: &mut AutoController,
        t: &mut f64,
        cpu: [f64; 3],
        ratio: [f64; 3],
        link: f64,
        n: u32,
    ) -> Codec {
        const CHUNK: f64 = 4.0 * 1048576.0;
        for _ in 0..n {
            let pick = a.pick();
            if let Some(d) = pick.dry {
                a.observe_speed(d, cpu[d], ratio[d]);
            }
            let i = pick.codec;
            let goodput = (link / ratio[i]).min(cpu[i]);
            *t += CHUNK / goodput;
            a.sent(pick.epoch, CHUNK as u64, *t, &|| None);
        }
        CANDIDATES[a.best()]
    }

    fn settle(cpu: [f64; 3], ratio: [f64; 3], link: f64) -> Codec {
        drive(
            &mut AutoController::default(),
            &mut 0.0,
            cpu,
            ratio,
            link,
            400,
        )
    }

    const MB: f64 = 1e6;

    #[test]
    fn auto_compresses_only_while_the_link_is_the_bottleneck() {
        // Per core, seed 001's data: LZ4 ~500 MB/s at 2:1, zstd-1 ~200 MB/s at 2.6:1.
        let cpu = [f64::INFINITY, 500.0 * MB, 200.0 * MB];
        let ratio = [1.0, 0.5, 0.38];
        // 1 Gbit/s: LZ4 doubles the goodput (250 vs 125 MB/s); zstd is CPU-bound at 200.
        assert_eq!(settle(cpu, ratio, 125.0 * MB), Codec::Lz4);
        // 100 Mbit/s: the stronger codec wins (33 vs 25 MB/s).
        assert_eq!(settle(cpu, ratio, 12.5 * MB), Codec::Zstd(1));
        // Loopback at 2 GB/s: the CPU is the bottleneck, send raw.
        assert_eq!(settle(cpu, ratio, 2000.0 * MB), Codec::Raw);
        // Incompressible data on a slow link: equal goodput, so the cheapest (raw).
        assert_eq!(settle(cpu, [1.0, 1.004, 1.001], 125.0 * MB), Codec::Raw);
    }

    #[test]
    fn auto_follows_a_change_of_link_and_ignores_chunks_of_an_earlier_epoch() {
        let mut a = AutoController::default();
        let mut t = 0.0;
        let (cpu, ratio) = ([f64::INFINITY, 500.0 * MB, 200.0 * MB], [1.0, 0.5, 0.38]);
        assert_eq!(
            drive(&mut a, &mut t, cpu, ratio, 125.0 * MB, 300),
            Codec::Lz4
        );
        assert_eq!(
            drive(&mut a, &mut t, cpu, ratio, 2000.0 * MB, 600),
            Codec::Raw,
            "the link got fast: stop compressing"
        );
        // A chunk of an earlier epoch arriving late changes nothing.
        let before = a.clone();
        a.sent(a.epoch.wrapping_sub(1), 1 << 30, t + 1e-6, &|| None);
        assert_eq!(
            (a.bytes, a.chunks, a.epoch),
            (before.bytes, before.chunks, before.epoch)
        );
    }

    /// Runs 600 raw chunks at `raw` goodput past a controller for 2 compressing threads
    /// whose codecs' dry runs give `speed` and `ratio`, and fails if any chunk of them
    /// is picked for compression.
    fn assert_never_compresses(speed: [f64; 3], ratio: [f64; 3], raw: f64, what: &str) {
        let mut a = AutoController {
            threads: 2,
            ..AutoController::default()
        };
        let mut t = 0.0;
        for _ in 0..600 {
            let pick = a.pick();
            if let Some(d) = pick.dry {
                a.observe_speed(d, speed[d], ratio[d]);
            }
            assert_eq!(pick.codec, 0, "{what}: epoch {} compressed", pick.epoch);
            t += 4.0 * 1048576.0 / raw;
            a.sent(pick.epoch, 4 << 20, t, &|| None);
        }
    }

    #[test]
    fn auto_never_tries_a_codec_that_cannot_beat_raw() {
        // Loopback at 2 GB/s, compressors at 500 and 200 MB/s on 2 threads: no epoch is
        // ever spent compressing (the dry runs cost CPU, not goodput).
        let speed = [f64::INFINITY, 500.0 * MB, 200.0 * MB];
        assert_never_compresses(speed, [1.0, 0.5, 0.5], 2000.0 * MB, "fast link");
    }

    #[test]
    fn auto_never_tries_a_codec_on_data_it_cannot_shrink_nor_on_a_thin_promise() {
        // Random data behind a 1 Gbit/s link: the link is the bottleneck and LZ4 runs at
        // 700 MB/s, but its dry runs shrink nothing (ratio 1.0): fewer bytes cannot be
        // sent, so no epoch compresses.
        let speed = [f64::INFINITY, 700.0 * MB, 300.0 * MB];
        assert_never_compresses(speed, [1.0, 1.0, 0.99], 125.0 * MB, "random");
        // Compressible data at 1.3 GB/s raw, LZ4 able to carry 1.5 GB/s by its dry runs:
        // not enough above raw to pay for a trial that the receiver's decompression and
        // the shared cores would likely lose.
        let speed = [f64::INFINITY, 750.0 * MB, 300.0 * MB];
        assert_never_compresses(speed, [1.0, 0.5, 0.5], 1300.0 * MB, "thin");
    }

    /// Drives `a` with chunks that leave every `CHUNK / goodput` seconds, the sending
    /// threads waiting on the wire for `wait` of their time (raw: `wait[0]`); returns
    /// the codecs used.
    fn drive_waiting(
        a: &mut AutoController,
        (speed, ratio): ([f64; 3], [f64; 3]),
        goodput: [f64; 3],
        wait: f64,
        n: u32,
    ) -> Vec<usize> {
        const CHUNK: f64 = 4.0 * 1048576.0;
        let mut t = 0.0;
        let mut codecs = Vec::new();
        for _ in 0..n {
            let pick = a.pick();
            if let Some(d) = pick.dry {
                a.observe_speed(d, speed[d], ratio[d]);
            }
            let dt = CHUNK / goodput[pick.codec];
            t += dt;
            // Each sender hands every `senders`-th chunk: its cycle is senders * dt.
            a.handed(pick.epoch, wait * dt * f64::from(a.senders), t);
            a.sent(pick.epoch, CHUNK as u64, t, &|| None);
            codecs.push(pick.codec);
        }
        codecs
    }

    #[test]
    fn auto_leaves_a_pipeline_that_never_waits_on_its_link_alone() {
        // A disk read at 900 MB/s feeding a fast link: the senders hardly ever wait on
        // the wire (5 % of their time), the CPU has room and LZ4 would halve the bytes,
        // but fewer bytes cannot make the disk faster. No epoch compresses.
        let codecs = ([f64::INFINITY, 1500.0 * MB, 500.0 * MB], [1.0, 0.5, 0.5]);
        let mut a = AutoController {
            threads: 2,
            senders: 2,
            ..AutoController::default()
        };
        let used = drive_waiting(&mut a, codecs, [900.0 * MB; 3], 0.05, 600);
        assert!(used.iter().all(|&c| c == 0), "{used:?}");
        assert!(a.link_share.is_some_and(|f| f < 0.1), "{:?}", a.link_share);
        // The same senders behind a 1 Gbit/s link wait 95 % of their time: LZ4 is tried
        // and kept (halving the bytes doubles the goodput).
        let mut a = AutoController {
            threads: 2,
            senders: 2,
            ..AutoController::default()
        };
        let goodput = [120.0 * MB, 240.0 * MB, 250.0 * MB];
        let used = drive_waiting(&mut a, codecs, goodput, 0.95, 600);
        let compressed = used[300..].iter().filter(|&&c| c != 0).count();
        assert!(compressed >= 300 - 300 / 8, "{compressed} of 300");
        // Once LZ4 runs, zstd-1 (ratio 0.4, fast enough) is tried against it and kept:
        // its promise is measured from LZ4's goodput, not only from raw's.
        let mut a = AutoController {
            threads: 2,
            senders: 2,
            ..AutoController::default()
        };
        let zstd = ([f64::INFINITY, 1500.0 * MB, 800.0 * MB], [1.0, 0.5, 0.4]);
        let goodput = [120.0 * MB, 240.0 * MB, 300.0 * MB];
        let used = drive_waiting(&mut a, zstd, goodput, 0.95, 600);
        let on_zstd = used[300..].iter().filter(|&&c| c == 2).count();
        assert!(on_zstd >= 300 - 300 / 8, "{on_zstd} of 300 on zstd");
    }

    #[test]
    fn auto_explores_little_once_settled() {
        // Chunks on the best codec after the first three epochs: at least 1 - 1/PROBE_EVERY.
        let mut a = AutoController::default();
        let mut t = 0.0;
        let (cpu, ratio) = ([f64::INFINITY, 500.0 * MB, 200.0 * MB], [1.0, 0.5, 0.38]);
        drive(&mut a, &mut t, cpu, ratio, 125.0 * MB, 3 * EPOCH_CHUNKS);
        let mut on_best = 0u32;
        for _ in 0..800 {
            let pick = a.pick();
            if let Some(d) = pick.dry {
                a.observe_speed(d, cpu[d], ratio[d]);
            }
            let i = pick.codec;
            on_best += u32::from(i == 1);
            t += 4.0 * 1048576.0 / (125.0 * MB / ratio[i]).min(cpu[i]);
            a.sent(pick.epoch, 4 << 20, t, &|| None);
        }
        assert!(
            on_best >= 800 - 800 / PROBE_EVERY - EPOCH_CHUNKS,
            "{on_best} of 800"
        );
    }

    /// A machine of `cores` CPUs on which sending raw (both ends, as on loopback) costs
    /// `raw_cost` CPU seconds per byte and codec `i` another `1 / speed[i]`: codec `i`
    /// delivers min(link / ratio, threads × speed, cores / its whole cost). The CPU
    /// counters the controller reads are this machine's. Returns the codec of each chunk.
    fn drive_cpu(
        a: &mut AutoController,
        speed: [f64; 3],
        ratio: [f64; 3],
        link: f64,
        raw_cost: f64,
        n: u32,
    ) -> Vec<usize> {
        use std::cell::Cell;
        const CHUNK: f64 = 4.0 * 1048576.0;
        let (t, busy, idle) = (Cell::new(0.0), Cell::new(0.0), Cell::new(0.0));
        let (cores, threads) = (a.cores, f64::from(a.threads));
        let mut codecs = Vec::new();
        for _ in 0..n {
            let pick = a.pick();
            if let Some(d) = pick.dry {
                a.observe_speed(d, speed[d], ratio[d]);
            }
            let i = pick.codec;
            let cost = raw_cost + if i == 0 { 0.0 } else { 1.0 / speed[i] };
            let goodput = (link / ratio[i]).min(threads * speed[i]).min(cores / cost);
            let dt = CHUNK / goodput;
            let used = goodput * cost;
            t.set(t.get() + dt);
            busy.set(busy.get() + used * dt);
            idle.set(idle.get() + (cores - used) * dt);
            let clock = || {
                Some(CpuClock {
                    process: busy.get(),
                    idle: idle.get(),
                })
            };
            a.sent(pick.epoch, CHUNK as u64, t.get(), &clock);
            codecs.push(i);
        }
        codecs
    }

    /// A pipeline with buffers between the sender's sockets and the receiver: the
    /// sockets take a chunk as long as `buffer` wire bytes are not yet drained; the
    /// receiver drains chunks in order, each in `orig / rx[codec] + wire / link` seconds
    /// (its own work per original byte, the link per wire byte); the sender compresses at
    /// `tx[codec]`. Returns the codec of every chunk.
    fn drive_pipeline(
        auto: &SharedAuto,
        tx: [f64; 3],
        rx: [f64; 3],
        ratio: [f64; 3],
        link: f64,
        buffer: f64,
        n: u64,
    ) -> Vec<usize> {
        use std::collections::VecDeque;
        use std::time::Duration;
        const CHUNK: f64 = 4.0 * 1048576.0;
        let at = |t: f64| auto.origin + Duration::from_secs_f64(t);
        // In the buffers: (key, wire bytes, when the receiver is done with it).
        let mut queue: VecDeque<(ChunkKey, f64, f64)> = VecDeque::new();
        let (mut t, mut rx_done) = (0.0f64, 0.0f64);
        let mut codecs = Vec::new();
        for k in 0..n {
            let pick = auto.lock().pick();
            if let Some(d) = pick.dry {
                auto.lock().observe_speed(d, tx[d], ratio[d]);
            }
            let i = pick.codec;
            t += if i == 0 { 0.0 } else { CHUNK / tx[i] };
            let wire = CHUNK * ratio[i];
            let ready = t;
            // Wait for room, delivering what the receiver finished meanwhile.
            loop {
                let held: f64 = queue.iter().map(|q| q.1).sum();
                while let Some(&(key, _, done)) = queue.front() {
                    if done > t {
                        break;
                    }
                    queue.pop_front();
                    auto.delivered(key, at(done));
                }
                if held + wire <= buffer || queue.is_empty() {
                    break;
                }
                t = t.max(queue.front().map_or(t, |q| q.2));
            }
            rx_done = rx_done.max(t) + CHUNK / rx[i] + wire / link;
            let key = (1, k * CHUNK as u64);
            queue.push_back((key, wire, rx_done));
            auto.sent(
                key,
                pick.epoch,
                CHUNK as u64,
                at(t),
                Duration::from_secs_f64(t - ready),
            );
            codecs.push(i);
        }
        codecs
    }

    fn shared_auto(acked: bool) -> Arc<SharedAuto> {
        let auto = SharedAuto::new();
        let mut a = Arc::into_inner(auto).expect("one owner");
        a.cpu = || None;
        a.lock().threads = 2;
        if acked {
            a.measure_on_ack();
        }
        Arc::new(a)
    }

    #[test]
    fn auto_measures_what_the_receiver_gets_not_what_the_sockets_took() {
        // A receiver that writes 1,000 MB/s raw but only 800 MB/s when it also has to
        // decompress, behind 64 MB of buffers (loopback: 16 MB of socket buffers per
        // connection, the sink's slots), on a link that is no limit: raw is the faster
        // choice. Counted when the socket takes a chunk, a codec that halves the bytes
        // looks better than it is while the buffers fill with twice the data: this
        // simulation then compressed 564 of the last 600 chunks (any buffer from 48 MB
        // up). Counted on the receiver's acknowledgement, raw wins.
        let (tx, rx, ratio) = (
            [f64::INFINITY, 1500.0 * MB, 400.0 * MB],
            [1000.0 * MB, 800.0 * MB, 700.0 * MB],
            [1.0, 0.5, 0.38],
        );
        let codecs = drive_pipeline(&shared_auto(true), tx, rx, ratio, 1e12, 64.0 * MB, 1200);
        let compressed = codecs[600..].iter().filter(|&&c| c != 0).count();
        assert!(
            compressed <= 600 / 8,
            "acknowledged: {compressed} of the last 600 chunks compressed"
        );
        // The same link at 1 Gbit/s: now the bytes on the wire are the limit and the
        // acknowledged goodput says so.
        let codecs = drive_pipeline(
            &shared_auto(true),
            tx,
            rx,
            ratio,
            125.0 * MB,
            64.0 * MB,
            1200,
        );
        let compressed = codecs[600..].iter().filter(|&&c| c != 0).count();
        assert!(
            compressed >= 600 - 600 / 8,
            "1 Gbit/s: {compressed} of the last 600 chunks compressed"
        );
    }

    #[test]
    fn auto_never_compresses_when_the_cpu_not_the_link_is_the_limit() {
        // Loopback on 2 cores: raw saturates both at 600 MB/s. By their dry runs LZ4
        // (700 MB/s per thread) and zstd-1 (300) on 2 threads could carry 1,400 and 600
        // MB/s, but every byte they compress is CPU that raw sending needs: no epoch may
        // compress (that cost 7-47 % of loopback goodput before the CPU was counted).
        let mut a = AutoController {
            threads: 2,
            cores: 2.0,
            ..AutoController::default()
        };
        let (speed, ratio) = ([f64::INFINITY, 700.0 * MB, 300.0 * MB], [1.0, 0.5, 0.38]);
        let codecs = drive_cpu(&mut a, speed, ratio, 3000.0 * MB, 2.0 / (600.0 * MB), 800);
        assert!(codecs.iter().all(|&c| c == 0), "{codecs:?}");
        // The same machine behind a 1 Gbit/s link: the CPU is mostly idle, so a codec
        // is tried and kept.
        let mut a = AutoController {
            threads: 2,
            cores: 2.0,
            ..AutoController::default()
        };
        let codecs = drive_cpu(&mut a, speed, ratio, 125.0 * MB, 2.0 / (600.0 * MB), 800);
        let compressed = codecs[400..].iter().filter(|&&c| c != 0).count();
        assert!(
            compressed >= 400 - 400 / PROBE_EVERY as usize - EPOCH_CHUNKS as usize,
            "{compressed} of 400"
        );
    }

    #[test]
    fn modes_parse_and_print() {
        for s in ["none", "lz4", "zstd:3", "zstd:19", "auto"] {
            assert_eq!(s.parse::<CompressMode>().unwrap().to_string(), s);
        }
        assert_eq!(
            "zstd".parse::<CompressMode>().unwrap(),
            CompressMode::Zstd(3)
        );
        for bad in ["gzip", "zstd:0", "zstd:x", ""] {
            assert!(bad.parse::<CompressMode>().unwrap_err().contains(bad));
        }
    }
}
