//! From a chunk read (and compressed, when on) to the wire: sent by the thread holding
//! it on one of its channel's connections (inline, seed 003), or queued for the
//! channel's net-send threads; and the compress stage between the readers and the wire.

use super::earliest;
use crate::bwlimit::Pace;
use crate::codec::{CodecPlan, Compressor, SharedAuto};
use crate::error::EngineError;
use crate::monitor::{Stage, StageClock, Time};
use crate::net::tcp;
use crate::pipeline::Stages;
use crate::runtime::{queue_for, Queues, Runtime};
use crate::stats::Stats;
use crate::transport::ChunkSender;
use crossbeam_channel::{bounded, Receiver, Sender};
use sluice_buffers::Slot;
use sluice_placement::Role;
use sluice_wire::{ChunkHeader, Close, CloseReason, Compression, Segment};
use std::collections::HashMap;
use std::fs::File;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// One data connection: its sending half, shared by the threads that may use it, and
/// a handle on its socket that reads the connection's backlog without the lock.
struct Conn {
    sender: Mutex<ChunkSender>,
    probe: Option<TcpStream>,
}

impl Conn {
    fn lock(&self) -> MutexGuard<'_, ChunkSender> {
        self.sender.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// When a chunk of `len` bytes would have left this connection ([`earliest`]).
    fn finish_ns(&self, len: u64) -> u128 {
        earliest::finish_ns(self.probe.as_ref().and_then(tcp::backlog), len)
    }
}

/// A chunk ready to go out: to the compress stage, or to the senders' queue.
pub(super) struct Outgoing {
    pub(super) header: ChunkHeader,
    pub(super) segments: Vec<Segment>,
    /// The payload; or, when `in_file` is set, a slot held empty, so the chunks in
    /// flight stay bounded by the pool as before.
    pub(super) slot: Slot,
    /// Where the payload is instead: left in the file's page cache, to be sent from
    /// there (a clear-text session that does not compress).
    pub(super) in_file: Option<InFile>,
}

/// A chunk's payload left in the page cache: `header.wire_len` bytes of `file` at
/// `offset`, checksummed as they were read.
pub(super) struct InFile {
    pub(super) file: Arc<File>,
    pub(super) offset: u64,
}

impl Outgoing {
    /// Sends the chunk on `c`: its payload from the slot, or from the page cache.
    fn send_on(&self, c: &mut ChunkSender) -> Result<(), EngineError> {
        match &self.in_file {
            Some(f) => c.send_file(&self.header, &self.segments, &f.file, f.offset),
            None => c.send(&self.header, &self.segments, self.slot.filled_bytes()),
        }
    }

    /// Counts the chunk once sent: its wire bytes, and those that went by `sendfile`.
    fn count_sent(&self, stats: &Stats, channel: u32) {
        let len = u64::from(self.header.wire_len);
        stats.add_wire(channel, len);
        if self.in_file.is_some() {
            stats.add_sendfile(len);
        }
    }
}

/// The session's data connections, grouped by the channel their net thread belongs to
/// on this host.
pub(super) struct Conns {
    by_channel: HashMap<u32, Vec<Arc<Conn>>>,
    all: Vec<Arc<Conn>>,
}

impl Conns {
    /// `conns` in stream order, stream `i` on the channel of net-send thread `i`.
    pub(super) fn group(runtime: &Runtime, conns: Vec<ChunkSender>) -> Conns {
        let mut by_channel: HashMap<u32, Vec<Arc<Conn>>> = HashMap::new();
        let mut all = Vec::with_capacity(conns.len());
        for (i, c) in conns.into_iter().enumerate() {
            let (channel, _) = runtime.pool_for(Role::NetSend, index(i));
            let probe = c.probe();
            let conn = Arc::new(Conn {
                sender: Mutex::new(c),
                probe,
            });
            by_channel
                .entry(channel)
                .or_default()
                .push(Arc::clone(&conn));
            all.push(conn);
        }
        Conns { by_channel, all }
    }

    /// Data connections.
    pub(super) fn count(&self) -> u32 {
        index(self.all.len())
    }

    /// Whether every data connection is clear text: chunks may then go from the page
    /// cache (`sendfile`), which TLS in this process cannot encrypt.
    pub(super) fn all_clear(&self) -> bool {
        !self.all.is_empty() && self.all.iter().all(|c| !c.lock().is_tls())
    }

    /// Tells the sink that no more chunks follow on each data connection.
    pub(super) fn close_all(&self) {
        for conn in &self.all {
            let mut c = conn.lock();
            let _ = c.send_frame(&Close {
                reason: CloseReason::Done,
            });
            c.shutdown();
        }
    }
}

fn index(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}

/// Where the threads holding chunks send them: the connections, and (queued pipeline)
/// one bounded queue per channel drained by that channel's net-send threads.
pub(super) struct Outlets {
    pub(super) inline: bool,
    pub(super) conns: Conns,
    queues: Queues<Outgoing>,
    stats: Arc<Stats>,
    /// The session's bandwidth limit, taken before each chunk is sent.
    pace: Pace,
}

impl Outlets {
    pub(super) fn new(inline: bool, conns: Conns, stats: &Arc<Stats>, pace: &Pace) -> Outlets {
        Outlets {
            inline,
            conns,
            queues: HashMap::new(),
            stats: Arc::clone(stats),
            pace: pace.clone(),
        }
    }

    /// Starts the net-send threads, one per connection, when the pipeline is queued.
    pub(super) fn start_senders(
        &mut self,
        stages: &mut Stages,
        runtime: &Arc<Runtime>,
        abort: &Arc<AtomicBool>,
    ) -> Result<(), EngineError> {
        if self.inline {
            return Ok(());
        }
        for (i, conn) in self.conns.all.iter().enumerate() {
            let i = index(i);
            let (channel, pool) = runtime.pool_for(Role::NetSend, i);
            let (_, rx) = self
                .queues
                .entry(channel)
                .or_insert_with(|| bounded(pool.slots() as usize))
                .clone();
            let conn = Arc::clone(conn);
            let (stats, abort) = (Arc::clone(&self.stats), Arc::clone(abort));
            let pace = self.pace.clone();
            stages.spawn(runtime, Role::NetSend, i, move || {
                send_queued(&rx, &conn, channel, (&stats, &pace), &abort)
            })?;
        }
        Ok(())
    }

    /// How thread `k` of `channel` gets its chunks onto the wire.
    pub(super) fn dispatch(&self, channel: u32, k: u32) -> Dispatch {
        Dispatch {
            channel,
            inline: self.inline,
            queue: queue_for(&self.queues, channel, k),
            own: self
                .conns
                .by_channel
                .get(&channel)
                .cloned()
                .unwrap_or_else(|| self.conns.all.clone()),
            rr: k as usize,
            finish: Vec::new(),
            order: Vec::new(),
            clock: self.stats.clock(channel),
            home: Stage::Read,
            stats: Arc::clone(&self.stats),
            pace: self.pace.clone(),
        }
    }

    /// Drops the queues' last senders held here: the net-send threads end once every
    /// thread holding a [`Dispatch`] has.
    pub(super) fn seal(&mut self) {
        self.queues.clear();
    }
}

/// A net-send thread's body: sends what its channel's queue holds until it closes.
fn send_queued(
    rx: &Receiver<Outgoing>,
    conn: &Conn,
    channel: u32,
    (stats, pace): (&Stats, &Pace),
    abort: &AtomicBool,
) -> Result<(), EngineError> {
    let mut clock = stats.clock(channel);
    while let Ok(out) = rx.recv() {
        clock.dequeued(Stage::Send);
        clock.lap(Stage::Send, Time::Idle);
        if abort.load(Ordering::Relaxed) {
            break;
        }
        pace.wait(u64::from(out.header.wire_len));
        let mut c = conn.lock();
        out.send_on(&mut c)?;
        clock.worked(Stage::Send, u64::from(out.header.wire_len));
        out.count_sent(stats, channel);
    }
    Ok(())
}

/// Starts the compress stage (seed 001) when the session compresses and the plan has
/// compress threads: io-read threads hand their chunks to them through bounded
/// per-channel queues; each compress thread compresses and sends (or queues for the
/// senders). Returns the queues (empty: the io-read threads compress themselves).
pub(super) fn start_compress_stage(
    stages: &mut Stages,
    runtime: &Arc<Runtime>,
    outlets: &Outlets,
    (codec, auto): (CodecPlan, &Arc<SharedAuto>),
    abort: &Arc<AtomicBool>,
) -> Result<Queues<Outgoing>, EngineError> {
    let (mode, threads) = (codec.mode, codec.compress_threads);
    let mut stage: Queues<Outgoing> = HashMap::new();
    if !codec.staged_compress() {
        return Ok(stage);
    }
    outlets.stats.set_codec_threads(threads);
    tracing::info!("compress stage: {threads} threads");
    for c in 0..threads {
        let (channel, _) = runtime.pool_for(Role::Compress, c);
        // Two read-ahead slots per compress thread keep it busy; more would only hold
        // slots the readers could use.
        let (_, rx) = stage
            .entry(channel)
            .or_insert_with(|| bounded(2 * threads as usize))
            .clone();
        let mut dispatch = outlets.dispatch(channel, c).homed(Stage::Compress);
        let (abort, auto) = (Arc::clone(abort), Arc::clone(auto));
        stages.spawn(runtime, Role::Compress, c, move || {
            let mut compressor = Compressor::sharing(mode, &auto);
            while let Ok(out) = rx.recv() {
                dispatch.clock.dequeued(Stage::Compress);
                dispatch.clock.lap(Stage::Compress, Time::Idle);
                if abort.load(Ordering::Relaxed) || dispatch.ship(out, &mut compressor)?.is_none() {
                    break;
                }
            }
            Ok(())
        })?;
    }
    Ok(stage)
}

/// How a thread holding a chunk ready to go (an io-read thread, or a compress thread)
/// gets it onto the wire: compressed when the session compresses, then sent on one of
/// its channel's connections (inline, seed 003) or queued for the channel's senders.
pub(super) struct Dispatch {
    channel: u32,
    inline: bool,
    queue: Option<Sender<Outgoing>>,
    /// Connections this thread sends on inline: its channel's, or every one.
    own: Vec<Arc<Conn>>,
    /// Round-robin start over `own`.
    rr: usize,
    /// Per connection of `own`, when the chunk in hand would have left it; and `own`'s
    /// indices ranked by it (both reused chunk after chunk).
    finish: Vec<u128>,
    order: Vec<usize>,
    /// The thread's stage clock (its stages' time and chunks).
    pub(super) clock: StageClock,
    /// The stage of the thread holding it (read, or compress): where the time it waits
    /// for the senders' queue counts.
    home: Stage,
    stats: Arc<Stats>,
    pace: Pace,
}

impl Dispatch {
    /// This dispatch for a thread of stage `home`.
    fn homed(mut self, home: Stage) -> Dispatch {
        self.home = home;
        self
    }

    /// Compresses (when on) and sends or queues one chunk. Gives back the chunk's
    /// segment list for reuse when it sent it itself (empty when queued); `Ok(None)`: the
    /// senders are gone (the session is ending).
    pub(super) fn ship(
        &mut self,
        mut out: Outgoing,
        compressor: &mut Compressor,
    ) -> Result<Option<Vec<Segment>>, EngineError> {
        debug_assert!(
            out.in_file.is_none() || compressor.is_off(),
            "a chunk left in the page cache is not compressed"
        );
        if !compressor.is_off() {
            compress(&mut out, compressor);
            self.clock
                .worked(Stage::Compress, u64::from(out.header.raw_len));
        }
        if out.in_file.is_some() {
            crate::fault::corrupt_checksum_if_chosen(&mut out.header.checksum);
        } else {
            let filled = out.slot.filled();
            crate::fault::corrupt_if_chosen(&mut out.slot[..filled]);
        }
        crate::fault::misfit_if_chosen(&mut out.header, &mut out.segments);
        self.stats
            .add_payload(self.channel, u64::from(out.header.raw_len));
        let payload = out.header.raw_len as usize;
        let key = (out.header.file_id, out.header.offset);
        let handing = std::time::Instant::now();
        match &self.queue {
            Some(q) if !self.inline => {
                // A full queue holds the thread back: `auto` sees the senders' pace.
                if q.send(out).is_err() {
                    return Ok(None);
                }
                self.clock.enqueued(Stage::Send);
                self.clock.lap(self.home, Time::Blocked);
                compressor.record_sent(key, payload, handing.elapsed());
                Ok(Some(Vec::new()))
            }
            _ => {
                let segments = self.send_inline(out)?;
                compressor.record_sent(key, payload, handing.elapsed());
                Ok(Some(segments))
            }
        }
    }

    /// Sends on the free connection of this channel where the chunk would leave
    /// soonest ([`earliest`]), or waits for the soonest one when none is free; gives the
    /// segment list back, emptied.
    fn send_inline(&mut self, mut out: Outgoing) -> Result<Vec<Segment>, EngineError> {
        let len = u64::from(out.header.wire_len);
        self.pace.wait(len);
        let mut c = choose(&self.own, len, self.rr, (&mut self.finish, &mut self.order));
        self.clock.lap(self.home, Time::Blocked);
        out.send_on(&mut c)?;
        drop(c);
        self.rr = self.rr.wrapping_add(1);
        self.clock.worked(Stage::Send, len);
        out.count_sent(&self.stats, self.channel);
        out.segments.clear();
        Ok(out.segments)
    }
}

/// Locks the connection of `own` a chunk of `len` bytes goes on: the free one where it
/// would leave soonest, else (none free) the soonest one once it is; `rr` is the
/// round-robin turn among equals. `finish` and `order` are the caller's, reused.
fn choose<'a>(
    own: &'a [Arc<Conn>],
    len: u64,
    rr: usize,
    (finish, order): (&mut Vec<u128>, &mut Vec<usize>),
) -> MutexGuard<'a, ChunkSender> {
    debug_assert!(!own.is_empty(), "a dispatch has a connection");
    finish.clear();
    if own.len() > 1 {
        finish.extend(own.iter().map(|c| c.finish_ns(len)));
    } else {
        finish.push(u128::MAX);
    }
    earliest::rank(finish, rr, order);
    let free = order.iter().find_map(|&k| own[k].sender.try_lock().ok());
    free.unwrap_or_else(|| own[order[0]].lock())
}

/// Compresses the chunk in place when that pays; its header then says so.
fn compress(out: &mut Outgoing, compressor: &mut Compressor) {
    let raw_len = out.header.raw_len;
    let done = compressor.compress(&mut out.slot, raw_len as usize);
    if done.compression != Compression::None {
        out.header = done.describe(out.header);
        out.slot.set_filled(done.wire_len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::tls::Link;
    use crate::testing::{fill_until_blocked, tcp_pair};

    fn conn(stream: TcpStream) -> Arc<Conn> {
        let sender = ChunkSender::new(Link::plain(stream));
        let probe = sender.probe();
        assert!(probe.is_some());
        Arc::new(Conn {
            sender: Mutex::new(sender),
            probe,
        })
    }

    #[test]
    fn a_chunk_goes_where_it_leaves_soonest_and_a_held_connection_is_passed_over() {
        let (mut stalled, _stalled_peer) = tcp_pair();
        fill_until_blocked(&mut stalled);
        let (idle, _idle_peer) = tcp_pair();
        let own = vec![conn(stalled), conn(idle)];
        assert!(own[0].finish_ns(4 << 20) > own[1].finish_ns(4 << 20));
        let (mut finish, mut order) = (Vec::new(), Vec::new());
        for rr in 0..4 {
            let g = choose(&own, 4 << 20, rr, (&mut finish, &mut order));
            assert_eq!(order[0], 1, "the idle connection ranks first (turn {rr})");
            assert!(
                own[0].sender.try_lock().is_ok(),
                "the stalled one is left free"
            );
            assert!(own[1].sender.try_lock().is_err(), "the idle one is taken");
            drop(g);
        }
        // The idle connection held by another thread: the stalled one is free, and taken.
        let held = own[1].lock();
        let g = choose(&own, 4 << 20, 0, (&mut finish, &mut order));
        assert!(
            own[0].sender.try_lock().is_err(),
            "the free connection is taken"
        );
        drop((g, held));
    }
}
