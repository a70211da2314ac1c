//! The session's `auto` controller behind a lock, fed with this process's clocks.

use sluice_session::auto::{Auto, ChunkKey, Codec, CpuClock, Departure, EpochReport, Pick};
use sluice_session::time;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Where `auto`'s epoch reports are logged (`--log sluice_engine::codec=debug`).
const LOG_TARGET: &str = "sluice_engine::codec";

/// The CPU counters now: this process's CPU time and the machine's idle time (idle +
/// iowait in `/proc/stat`); `None` where `/proc/stat` cannot be read.
fn cpu_now() -> Option<CpuClock> {
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

/// One `auto` controller shared by every thread of a session that compresses: the pure
/// [`Auto`] (goodput measured on the sink's acknowledgements, see there) under a lock,
/// with time as the distance from the session's start and the CPU counters read only
/// when the controller asks for them.
#[derive(Debug)]
pub struct SharedAuto {
    origin: Instant,
    core: Mutex<Auto>,
}

impl SharedAuto {
    /// A fresh controller, its clock starting now.
    pub fn new() -> Arc<SharedAuto> {
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        Arc::new(SharedAuto {
            origin: Instant::now(),
            core: Mutex::new(Auto::new(u32::try_from(cores).unwrap_or(u32::MAX))),
        })
    }

    fn at(&self, t: Instant) -> time::Instant {
        time::Instant::from_origin(t.saturating_duration_since(self.origin))
    }

    fn lock(&self) -> MutexGuard<'_, Auto> {
        self.core
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The sink acknowledges every chunk: measure goodput on delivery from now on.
    pub fn measure_on_ack(&self) {
        self.lock().measure_on_ack();
    }

    /// The codec for the next chunk (see [`sluice_session::auto::AutoController::pick`]).
    pub(super) fn pick(&self) -> Pick {
        self.lock().controller_mut().pick()
    }

    /// A dry run's result.
    pub(super) fn observe_speed(&self, i: usize, bytes_per_sec: f64, ratio: f64) {
        self.lock()
            .controller_mut()
            .observe_speed(i, bytes_per_sec, ratio);
    }

    /// The codec judged best so far.
    pub(super) fn best(&self) -> Codec {
        sluice_session::auto::CANDIDATES[self.lock().controller().best()]
    }

    /// A chunk `key` of `payload` original bytes, picked in `epoch`, left at `now`,
    /// after its thread waited `blocked` for the wire.
    pub(super) fn sent(
        &self,
        key: ChunkKey,
        epoch: u64,
        payload: u64,
        now: Instant,
        blocked: Duration,
    ) {
        let at = self.at(now);
        let mut auto = self.lock();
        let cpu = if auto.wants_cpu_on_send(epoch) {
            cpu_now()
        } else {
            None
        };
        let departure = Departure {
            key,
            epoch,
            payload,
            at,
            blocked,
        };
        log(auto.sent(departure, cpu));
    }

    /// The sink acknowledged the chunk `key`; its word was read at `at`.
    pub fn delivered(&self, key: ChunkKey, at: Instant) {
        let at = self.at(at);
        let mut auto = self.lock();
        let cpu = if auto.wants_cpu_on_delivery(key) {
            cpu_now()
        } else {
            None
        };
        log(auto.delivered(key, at, cpu));
    }

    /// The sink refused the chunk `key` (it is sent again, as a new chunk).
    pub fn refused(&self, key: ChunkKey) {
        self.lock().refused(key);
    }

    /// How many threads compress for the session (the ceiling of a codec is its
    /// per-thread speed times this).
    pub fn set_threads(&self, n: u32) {
        self.lock().controller_mut().set_threads(n);
    }

    /// How many threads hand raw chunks to the wire (the link's share of their time is
    /// measured over all of them).
    pub fn set_senders(&self, n: u32) {
        self.lock().controller_mut().set_senders(n);
    }

    /// Whether the running epoch compresses (false: chunks go raw, and a thread can
    /// send them without handing them to a compress thread).
    pub fn compressing(&self) -> bool {
        self.lock().controller().compressing()
    }
}

fn log(report: Option<EpochReport>) {
    if let Some(r) = report {
        tracing::debug!(target: LOG_TARGET, "{r}");
    }
}
