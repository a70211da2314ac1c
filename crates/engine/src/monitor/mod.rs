//! Live monitoring (issue 17): stage counters the data path bumps with relaxed atomics,
//! the machine's state read at each scrape, the Prometheus text of both, the HTTP
//! endpoint that serves it, and the bottleneck a transfer's counters point at.
//!
//! * [`stage`]: per stage and channel counters and the [`StageClock`] a stage thread
//!   laps; a session's own counters and the process's totals.
//! * [`machine`]: per-node cores (`/proc/stat`), memory and numastat, NIC byte counts.
//! * [`prom`]: the OpenMetrics text of the process (`prometheus-client`).
//! * [`http`]: `GET /metrics` on its own thread (hyper on a current-thread tokio).
//! * [`bottleneck`]: which resource bound a transfer, from its stage counters.
//! * [`adapt`], [`threads`], [`mover`]: adaptive placement: the decision core, the
//!   registry of bound threads with the `/proc` sampler, and the monitor thread.

pub mod adapt;
pub mod bottleneck;
pub mod http;
pub mod machine;
pub mod mover;
pub mod prom;
pub mod stage;
pub mod threads;

pub use bottleneck::Bottleneck;
pub use stage::{CellFigures, Stage, StageClock, StageCounters, Time};

use sluice_buffers::BufferPool;
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex, PoisonError, Weak};

/// Connections watched at once at most (the oldest are dropped beyond it).
const MAX_WATCHED: usize = 1024;

/// One data connection watched for its `TCP_INFO`.
#[derive(Debug)]
struct Watched {
    session: u64,
    index: usize,
    stream: TcpStream,
}

/// The process's monitor: totals over every session, and what samplers look at.
#[derive(Debug)]
pub struct Monitor {
    /// Every session's stage counters added up.
    pub(crate) stages: StageCounters,
    payload_bytes: AtomicU64,
    wire_bytes: AtomicU64,
    chunks_resent: AtomicU64,
    sendfile_bytes: AtomicU64,
    files_done: AtomicU64,
    files_failed: AtomicU64,
    sessions: AtomicU64,
    sessions_ended: AtomicU64,
    pools: Mutex<Vec<(u32, Weak<BufferPool>)>>,
    conns: Mutex<Vec<Watched>>,
}

static GLOBAL: LazyLock<Monitor> = LazyLock::new(|| Monitor {
    stages: StageCounters::new(),
    payload_bytes: AtomicU64::new(0),
    wire_bytes: AtomicU64::new(0),
    chunks_resent: AtomicU64::new(0),
    sendfile_bytes: AtomicU64::new(0),
    files_done: AtomicU64::new(0),
    files_failed: AtomicU64::new(0),
    sessions: AtomicU64::new(0),
    sessions_ended: AtomicU64::new(0),
    pools: Mutex::new(Vec::new()),
    conns: Mutex::new(Vec::new()),
});

/// The process's monitor.
pub fn global() -> &'static Monitor {
    &GLOBAL
}

/// Process totals read at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub struct Totals {
    /// Payload bytes read (source) or received and verified (sink).
    pub payload_bytes: u64,
    /// Chunk bytes that crossed the wire.
    pub wire_bytes: u64,
    /// Chunks sent (or asked for) again.
    pub chunks_resent: u64,
    /// Payload bytes sent straight from the page cache (`sendfile`).
    pub sendfile_bytes: u64,
    /// Entries done.
    pub files_done: u64,
    /// Entries failed.
    pub files_failed: u64,
    /// Sessions started.
    pub sessions: u64,
    /// Sessions ended.
    pub sessions_ended: u64,
}

/// A buffer pool's occupancy now.
#[derive(Debug, Clone, Copy)]
pub struct PoolNow {
    /// The plan's channel.
    pub channel: u32,
    /// Its node, if bound.
    pub node: Option<u32>,
    /// Slots.
    pub slots: u32,
    /// Slots held by chunks in flight.
    pub in_use: u32,
}

/// A watched connection's `TCP_INFO` now.
#[derive(Debug, Clone)]
pub struct ConnNow {
    /// `s<session>c<index>`.
    pub label: String,
    /// The kernel's figures.
    pub figures: crate::net::tcp::TcpFigures,
}

impl Monitor {
    /// Counts payload bytes (a chunk read, or received and verified).
    pub(crate) fn add_payload(&self, bytes: u64) {
        self.payload_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Counts chunk bytes on the wire.
    pub(crate) fn add_wire(&self, bytes: u64) {
        self.wire_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Counts a chunk sent (or asked for) again.
    /// Counts payload bytes sent straight from the page cache.
    pub(crate) fn add_sendfile(&self, bytes: u64) {
        self.sendfile_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    pub(crate) fn chunk_resent(&self) {
        self.chunks_resent.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an entry that ended.
    pub(crate) fn file_ended(&self, ok: bool) {
        let c = if ok {
            &self.files_done
        } else {
            &self.files_failed
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// The totals now.
    pub fn totals(&self) -> Totals {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Totals {
            payload_bytes: l(&self.payload_bytes),
            wire_bytes: l(&self.wire_bytes),
            chunks_resent: l(&self.chunks_resent),
            sendfile_bytes: l(&self.sendfile_bytes),
            files_done: l(&self.files_done),
            files_failed: l(&self.files_failed),
            sessions: l(&self.sessions),
            sessions_ended: l(&self.sessions_ended),
        }
    }

    /// The process's stage counters (every session's added up).
    pub fn stages(&self) -> &StageCounters {
        &self.stages
    }

    /// Watches a runtime's buffer pool (occupancy at each scrape; dropped with it).
    pub fn watch_pool(&self, channel: u32, pool: &std::sync::Arc<BufferPool>) {
        let mut p = self.pools.lock().unwrap_or_else(PoisonError::into_inner);
        p.retain(|(_, w)| w.strong_count() > 0);
        p.push((channel, std::sync::Arc::downgrade(pool)));
    }

    /// Every live pool's occupancy now.
    pub fn pools(&self) -> Vec<PoolNow> {
        let p = self.pools.lock().unwrap_or_else(PoisonError::into_inner);
        p.iter()
            .filter_map(|(channel, w)| {
                let s = w.upgrade()?.stats();
                let free = u32::try_from(s.free).unwrap_or(u32::MAX);
                Some(PoolNow {
                    channel: *channel,
                    node: s.node,
                    slots: s.slots,
                    in_use: s.slots.saturating_sub(free),
                })
            })
            .collect()
    }

    /// A session starts on these data connections (watched until [`Self::session_ended`]).
    /// Returns the session's number.
    pub fn session_started(&self, data: &[TcpStream]) -> u64 {
        let session = self.sessions.fetch_add(1, Ordering::Relaxed) + 1;
        let mut c = self.conns.lock().unwrap_or_else(PoisonError::into_inner);
        for (index, s) in data.iter().enumerate() {
            if let Ok(stream) = s.try_clone() {
                if c.len() >= MAX_WATCHED {
                    c.remove(0);
                }
                c.push(Watched {
                    session,
                    index,
                    stream,
                });
            }
        }
        session
    }

    /// Session `session` ended: its connections are no longer watched.
    pub fn session_ended(&self, session: u64) {
        self.sessions_ended.fetch_add(1, Ordering::Relaxed);
        let mut c = self.conns.lock().unwrap_or_else(PoisonError::into_inner);
        c.retain(|w| w.session != session);
    }

    /// Every watched connection's `TCP_INFO` now.
    pub fn connections(&self) -> Vec<ConnNow> {
        let c = self.conns.lock().unwrap_or_else(PoisonError::into_inner);
        c.iter()
            .filter_map(|w| {
                Some(ConnNow {
                    label: format!("s{}c{}", w.session, w.index),
                    figures: crate::net::tcp::figures(&w.stream)?,
                })
            })
            .collect()
    }
}
