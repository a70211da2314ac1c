//! Goodput measured on the sink's acknowledgement: each chunk followed from its send to
//! its `ChunkAck`.

use super::{AutoController, CpuClock, EpochReport};
use crate::time::Instant;
use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasherDefault;
use std::time::Duration;

/// Chunks `auto` follows until the sink acknowledges them, at most: far more than can be
/// in flight (socket buffers and the sink's slots hold tens); past it, the oldest epochs'
/// entries are dropped.
pub const MAX_TRACKED: usize = 1 << 16;

/// Chunks the map has room for from the start (it grows up to [`MAX_TRACKED`] only on
/// a path that holds more in flight).
const TRACKED_AT_START: usize = 1024;

/// Acknowledgements read before their chunk's departure was recorded, kept at most: a
/// sending thread records a departure once its write returns, and a fast sink may
/// answer sooner (a handful wait at once, one per sending thread); past it, the oldest
/// are forgotten.
pub const MAX_EARLY: usize = 64;

/// A chunk as the sink names it in `ChunkAck`/`ChunkNack`: (file id, offset).
pub type ChunkKey = (u64, u64);

/// A chunk handed to the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Departure {
    /// The chunk, as the sink will name it.
    pub key: ChunkKey,
    /// The epoch it was picked in ([`super::Pick::epoch`]).
    pub epoch: u64,
    /// Its original bytes.
    pub payload: u64,
    /// When the wire took it.
    pub at: Instant,
    /// How long its thread waited for the socket or the senders' queue.
    pub blocked: Duration,
}

/// A fixed hasher: the map's behaviour never depends on a random seed.
type Fixed = BuildHasherDefault<DefaultHasher>;

/// One [`AutoController`] for a session, with the chunks it follows until delivered.
///
/// Where the sink acknowledges chunks (`CHUNK_ACKS`), goodput is measured when they are
/// *delivered*: each chunk sent is remembered with its epoch until its `ChunkAck`
/// arrives. Measured when the socket took it instead, a codec that halves the bytes
/// looks better than it is for as long as the pipeline's buffers (socket buffers on
/// both hosts, the sink's slots: tens of MB) fill with twice the data, longer than an
/// epoch on a fast path: `auto` then compressed 70 % of a loopback transfer that raw
/// finished faster.
#[derive(Debug, Clone)]
pub struct Auto {
    ctl: AutoController,
    /// Whether delivery is acknowledged (else goodput is counted at the socket).
    acked: bool,
    /// Chunks sent and not yet acknowledged: key -> (epoch, original bytes).
    in_flight: HashMap<ChunkKey, (u64, u64), Fixed>,
    /// Acknowledgements that came before their departure was recorded, and when.
    early: VecDeque<(ChunkKey, Instant)>,
}

impl Auto {
    /// A fresh controller for a process that may run on `cores` CPUs.
    #[must_use]
    pub fn new(cores: u32) -> Auto {
        Auto::with(AutoController::new(cores))
    }

    /// Around a controller set up by the caller (simulations).
    #[must_use]
    pub fn with(ctl: AutoController) -> Auto {
        Auto {
            ctl,
            acked: false,
            in_flight: HashMap::default(),
            early: VecDeque::new(),
        }
    }

    /// The controller.
    #[must_use]
    pub fn controller(&self) -> &AutoController {
        &self.ctl
    }

    /// The controller, to pick codecs and report dry runs.
    pub fn controller_mut(&mut self) -> &mut AutoController {
        &mut self.ctl
    }

    /// The sink acknowledges every chunk: measure goodput on delivery from now on.
    pub fn measure_on_ack(&mut self) {
        self.in_flight.reserve(TRACKED_AT_START);
        self.early.reserve(MAX_EARLY);
        self.acked = true;
    }

    /// Whether [`Self::sent`] for `epoch` may read the CPU counters: only where the
    /// chunk is counted as it leaves (not followed to its acknowledgement).
    #[must_use]
    pub fn wants_cpu_on_send(&self, epoch: u64) -> bool {
        (!self.acked || self.in_flight.len() >= MAX_TRACKED) && self.ctl.wants_cpu(epoch)
    }

    /// Whether [`Self::delivered`] for `key` reads the CPU counters.
    #[must_use]
    pub fn wants_cpu_on_delivery(&self, key: ChunkKey) -> bool {
        self.in_flight
            .get(&key)
            .is_some_and(|&(epoch, _)| self.ctl.wants_cpu(epoch))
    }

    /// A chunk left (`sent.at`, after its thread waited `sent.blocked` for the wire).
    /// `cpu`: the counters, where [`Self::wants_cpu_on_send`] asked for them.
    pub fn sent(&mut self, sent: Departure, cpu: Option<CpuClock>) -> Option<EpochReport> {
        let Departure {
            key,
            epoch,
            payload,
            at,
            blocked,
        } = sent;
        // Followed until the sink acknowledges it; if it cannot be (the map is full of
        // this epoch's chunks), counted as it leaves rather than never.
        let followed = self.acked && self.follow(key, epoch, payload);
        self.ctl.handed(epoch, blocked, at);
        if followed {
            // Already acknowledged: delivered when its word was read.
            return self
                .take_early(key)
                .and_then(|t| self.delivered(key, t, None));
        }
        self.ctl.sent(epoch, payload, at, cpu)
    }

    /// Removes and returns the time of an acknowledgement of `key` read before its
    /// departure.
    fn take_early(&mut self, key: ChunkKey) -> Option<Instant> {
        let i = self.early.iter().position(|(k, _)| *k == key)?;
        self.early.remove(i).map(|(_, t)| t)
    }

    fn follow(&mut self, key: ChunkKey, epoch: u64, payload: u64) -> bool {
        if self.in_flight.len() >= MAX_TRACKED {
            self.in_flight.retain(|_, (e, _)| *e >= epoch);
        }
        let room = self.in_flight.len() < MAX_TRACKED;
        if room {
            self.in_flight.insert(key, (epoch, payload));
        }
        debug_assert!(self.in_flight.len() <= MAX_TRACKED);
        room
    }

    /// The sink acknowledged the chunk `key`; its word was read at `at`. `cpu`: the
    /// counters, where [`Self::wants_cpu_on_delivery`] asked for them.
    pub fn delivered(
        &mut self,
        key: ChunkKey,
        at: Instant,
        cpu: Option<CpuClock>,
    ) -> Option<EpochReport> {
        let Some((epoch, payload)) = self.in_flight.remove(&key) else {
            self.note_early(key, at);
            return None;
        };
        self.ctl.sent(epoch, payload, at, cpu)
    }

    /// Keeps an acknowledgement of a chunk whose departure is not recorded yet (its
    /// sending thread is still in its write), for [`Self::sent`] to count.
    fn note_early(&mut self, key: ChunkKey, at: Instant) {
        if !self.acked {
            return;
        }
        if self.early.len() >= MAX_EARLY {
            self.early.pop_front();
        }
        self.early.push_back((key, at));
        debug_assert!(self.early.len() <= MAX_EARLY);
    }

    /// The sink refused the chunk `key` (it is sent again, as a new chunk).
    pub fn refused(&mut self, key: ChunkKey) {
        self.in_flight.remove(&key);
        self.take_early(key);
    }

    /// Chunks followed and not yet acknowledged.
    #[must_use]
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }
}
