//! The controller proper: epochs, goodput per codec, the CPU and link bounds.

use super::{
    CpuClock, EpochReport, Pick, CANDIDATES, EPOCH_CHUNKS, EPOCH_WARMUP, PROBE_EVERY, SWITCH_GAIN,
    TRY_MARGIN,
};
use crate::time::Instant;
use std::time::Duration;

/// The adaptive choice, measured end to end. `auto` runs one codec at a time for an
/// epoch of [`EPOCH_CHUNKS`] chunks and measures the goodput that epoch achieved: with
/// the link as the bottleneck a codec that halves the bytes doubles the goodput and
/// wins; with the CPU as the bottleneck raw wins. It starts raw. A codec is only tried
/// when it could win: its compression speed, measured on a chunk that then goes raw
/// anyway (a dry run), times the compressing threads, must beat the best goodput so far
/// by [`TRY_MARGIN`] (the CPU bound, within the CPU left once raw sending's own cost is
/// paid), and fewer bytes on the wire must be able to beat it too (the link bound
/// `r_j * d_j / d_i`), so a fast link never pays for a pointless trial. Then the best is
/// kept and one epoch in [`PROBE_EVERY`] tries another that could win, so a change of
/// link or data is followed. Pure: time and CPU counters are passed in.
#[derive(Debug, Clone)]
pub struct AutoController {
    /// The codec of the running epoch, as an index into `CANDIDATES`.
    pub(super) current: usize,
    /// The running epoch's number; chunks compressed in an earlier one are not counted.
    pub(super) epoch: u64,
    /// When the warm-up's last chunk went out (seconds), and bytes of the chunks after it.
    pub(super) first_sent: Option<f64>,
    /// The CPU counters then (sampled in raw epochs only).
    pub(super) first_cpu: Option<CpuClock>,
    /// What sending raw costs: CPU seconds of this process per original byte, and the
    /// cores it could use (its own busy ones plus the machine's idle ones), from the
    /// last raw epoch. A codec adds its own cost per byte to the first; if that leaves
    /// no more goodput than raw had, the CPU is the bottleneck and the codec is not tried.
    pub(super) raw_cost: Option<(f64, f64)>,
    /// CPUs this process may run on.
    pub(super) cores: f64,
    /// The share of their time the threads that hand chunks to the wire spent blocked
    /// there (in a socket write, or on a full queue to the senders) in the last raw epoch:
    /// near 1 when the link (or whatever drains it) is the bottleneck, near 0 when the
    /// disk or the CPU before it is. A codec makes only that share faster.
    pub(super) link_share: Option<f64>,
    /// Threads that hand raw chunks to the wire.
    pub(super) senders: u32,
    /// This epoch's sends: seconds blocked, first and last send time, sends counted.
    pub(super) send_blocked: f64,
    pub(super) send_first: Option<f64>,
    pub(super) send_last: f64,
    pub(super) sends: u32,
    pub(super) bytes: u64,
    pub(super) chunks: u32,
    /// Measured goodput per codec, bytes per second (smoothed).
    pub(super) rate: [Option<f64>; 3],
    /// Measured compression speed per codec, original bytes per second per thread.
    pub(super) speed: [Option<f64>; 3],
    /// Compressed size over original size per codec, from the dry runs.
    pub(super) ratio: [f64; 3],
    /// Threads compressing for the session.
    pub(super) threads: u32,
    /// Chunks handed out in the running epoch, and the dry runs handed out.
    pub(super) picked: u32,
    pub(super) dry_taken: [bool; 3],
    /// The codec judged best (raw until another has proven better).
    pub(super) best: usize,
    pub(super) epochs_done: u32,
    pub(super) probes: usize,
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

impl AutoController {
    /// A controller for a process that may run on `cores` CPUs (at least one).
    #[must_use]
    pub fn new(cores: u32) -> AutoController {
        AutoController {
            cores: f64::from(cores.max(1)),
            ..AutoController::default()
        }
    }

    /// How many threads compress for the session (a codec's CPU ceiling is its
    /// per-thread speed times this).
    pub fn set_threads(&mut self, n: u32) {
        self.threads = n.max(1);
    }

    /// How many threads hand raw chunks to the wire (the link's share of their time is
    /// measured over all of them).
    pub fn set_senders(&mut self, n: u32) {
        self.senders = n.max(1);
    }

    /// The codec for the next chunk, the epoch it counts in, and whether to measure a
    /// codec's speed on it first. Dry runs go to the first chunks of an epoch, which
    /// are warm-up, not measured: they never slow a measured epoch.
    pub fn pick(&mut self) -> Pick {
        self.picked = self.picked.saturating_add(1);
        let dry = (1..CANDIDATES.len())
            .find(|&i| self.speed[i].is_none() && !self.dry_taken[i])
            .filter(|_| self.picked <= EPOCH_WARMUP / 2);
        if let Some(i) = dry {
            self.dry_taken[i] = true;
        }
        debug_assert!(self.current < CANDIDATES.len());
        Pick {
            codec: self.current,
            epoch: self.epoch,
            dry,
        }
    }

    /// A dry run: codec `i` compressed at `bytes_per_sec` on one thread, to `ratio` of
    /// the original size.
    pub fn observe_speed(&mut self, i: usize, bytes_per_sec: f64, ratio: f64) {
        assert!(i > 0 && i < CANDIDATES.len(), "a dry run of codec {i}");
        self.speed[i] = Some(bytes_per_sec);
        self.ratio[i] = ratio.clamp(0.01, 1.0);
    }

    /// A chunk picked in `epoch` was handed to the wire at `now` after its thread
    /// waited `blocked` for the socket or the senders' queue.
    pub fn handed(&mut self, epoch: u64, blocked: Duration, now: Instant) {
        if epoch != self.epoch || self.current != 0 {
            return;
        }
        let now = now.as_secs_f64();
        self.send_first.get_or_insert(now);
        self.send_last = now;
        self.send_blocked += blocked.as_secs_f64();
        self.sends += 1;
    }

    /// Whether the next [`Self::sent`] for `epoch` reads the CPU counters (the end of
    /// a raw epoch's warm-up, and its last chunk): the engine reads them only then.
    #[must_use]
    pub fn wants_cpu(&self, epoch: u64) -> bool {
        let chunks = self.chunks + 1;
        epoch == self.epoch
            && self.current == 0
            && chunks >= EPOCH_WARMUP
            && (self.first_sent.is_none() || chunks >= EPOCH_CHUNKS)
    }

    /// A chunk of `payload` original bytes, compressed in `epoch`, was delivered (or
    /// went onto the wire, where the sink does not acknowledge) at `now`; `cpu` is the
    /// CPU counters where [`Self::wants_cpu`] asked for them. Returns what the epoch
    /// measured when this chunk ended it.
    pub fn sent(
        &mut self,
        epoch: u64,
        payload: u64,
        now: Instant,
        cpu: Option<CpuClock>,
    ) -> Option<EpochReport> {
        if epoch != self.epoch {
            return None;
        }
        let now = now.as_secs_f64();
        // Goodput from the departure of the warm-up's last chunk to the epoch's last:
        // the pipeline then runs at this codec's pace alone.
        self.chunks += 1;
        if self.chunks < EPOCH_WARMUP {
            return None;
        }
        let raw = self.current == 0;
        let Some(t0) = self.first_sent else {
            self.first_sent = Some(now);
            self.first_cpu = cpu.filter(|_| raw);
            return None;
        };
        self.bytes += payload;
        if self.chunks < EPOCH_CHUNKS {
            return None;
        }
        let secs = (now - t0).max(1e-9);
        let load = match (self.first_cpu, cpu.filter(|_| raw)) {
            (Some(a), Some(b)) => Some(((b.process - a.process) / secs, (b.idle - a.idle) / secs)),
            _ => None,
        };
        Some(self.close(secs, load))
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

    /// Whether codec `i` is worth an epoch: untried or stale, and able to beat `top`.
    fn could_win(&self, i: usize, top: f64) -> bool {
        // The CPU bound is optimistic (a dry run on this side alone), so it must promise
        // a clear win; the link bound comes from measured goodput, a plain win will do.
        self.ceilings(i)
            .is_some_and(|(cpu, link)| cpu > TRY_MARGIN * top && link > SWITCH_GAIN * top)
    }

    /// Ends the epoch: it moved its bytes in `secs`; `load` is the cores this process kept
    /// busy and the cores idle on the machine meanwhile (raw epochs).
    fn close(&mut self, secs: f64, load: Option<(f64, f64)>) -> EpochReport {
        let r = self.bytes as f64 / secs.max(1e-9);
        let c = self.current;
        self.measure_link_share();
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
        self.current = self.next_codec(top);
        let report = self.report(c, r);
        self.epoch += 1;
        self.first_sent = None;
        self.first_cpu = None;
        self.bytes = 0;
        self.chunks = 0;
        self.picked = 0;
        debug_assert!(self.current < CANDIDATES.len() && self.best < CANDIDATES.len());
        report
    }

    /// The senders' share of time blocked on the link, from a raw epoch's sends.
    fn measure_link_share(&mut self) {
        if let Some(first) = self
            .send_first
            .filter(|_| self.current == 0 && self.sends >= EPOCH_WARMUP)
        {
            let span = (self.send_last - first).max(1e-9) * f64::from(self.senders.max(1));
            self.link_share = Some((self.send_blocked / span).clamp(0.0, 1.0));
        }
        self.send_blocked = 0.0;
        self.send_first = None;
        self.sends = 0;
    }

    /// The codec of the next epoch: an untried one that could win, else the best, or
    /// one epoch in [`PROBE_EVERY`] another (raw, or a codec that could still win).
    fn next_codec(&mut self, top: f64) -> usize {
        let probe = self.epochs_done.is_multiple_of(PROBE_EVERY);
        if probe {
            // Data and CPU load change: measure the codecs' speeds again.
            self.speed[1] = None;
            self.speed[2] = None;
            self.dry_taken = [true, false, false];
        }
        let untried =
            (1..CANDIDATES.len()).find(|&i| self.rate[i].is_none() && self.could_win(i, top));
        match untried {
            Some(i) => i,
            None if probe => {
                self.probes += 1;
                // Raw always (it costs no CPU); a codec only while it could still win:
                // at most two others, counted without allocating.
                let other = |i: usize| {
                    i != self.best && (i == 0 || (self.rate[i].is_some() && self.could_win(i, top)))
                };
                let count = (0..CANDIDATES.len()).filter(|&i| other(i)).count();
                (0..CANDIDATES.len())
                    .filter(|&i| other(i))
                    .nth(self.probes % count.max(1))
                    .unwrap_or(self.best)
            }
            None => self.best,
        }
    }

    fn report(&self, codec: usize, rate: f64) -> EpochReport {
        EpochReport {
            epoch: self.epoch,
            codec: CANDIDATES[codec],
            rate,
            rates: self.rate,
            link_share: self.link_share.unwrap_or(f64::NAN),
            ceilings: [1, 2].map(|i| self.ceilings(i).map(|(cpu, link)| cpu.min(link))),
            next: CANDIDATES[self.current],
        }
    }

    /// The codec judged best so far, as an index into [`CANDIDATES`].
    #[must_use]
    pub fn best(&self) -> usize {
        self.best
    }

    /// Whether the running epoch compresses (false: chunks go raw).
    #[must_use]
    pub fn compressing(&self) -> bool {
        self.current != 0
    }
}
