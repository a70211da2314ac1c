//! The io-read threads: take work from the scheduler, read it into this channel's slots
//! (a large file's `O_DIRECT` chunks through the thread's ring, several at a time) and
//! ship each chunk on: to the compress stage, or to [`Dispatch`].

use super::dispatch::{Dispatch, InFile, Outgoing};
use super::packs::PackReads;
use super::read::{chunk_header, read_work, Failures, OpenFile, ReadFailure};
use crate::codec::{CompressMode, Compressor, SharedAuto};
use crate::error::EngineError;
use crate::monitor::{Stage, Time};
use crate::readahead::{self, ReadAhead};
use crate::sched::{Scheduler, Work};
use crate::stats::Stats;
use crossbeam_channel::Sender;
use sluice_buffers::{BufferPool, Slot};
use sluice_wire::{ChunkHeader, Segment};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long a reader waits for work or a slot before it looks at the abort flag again.
const POLL: Duration = Duration::from_millis(200);

/// What an io-read thread is given; [`Reader::run`] is its body.
pub(super) struct Reader {
    pub(super) pool: Arc<BufferPool>,
    pub(super) sched: Arc<Scheduler>,
    pub(super) stats: Arc<Stats>,
    pub(super) abort: Arc<AtomicBool>,
    /// Where files that cannot be read are reported (the master).
    pub(super) failed: Sender<ReadFailure>,
    /// The channel's compress stage, when the session has one.
    pub(super) to_compress: Option<Sender<Outgoing>>,
    pub(super) mode: CompressMode,
    pub(super) auto: Arc<SharedAuto>,
    pub(super) inline: bool,
    pub(super) direct: bool,
    /// Chunks read through the page cache are sent from it (`sendfile`): the session is
    /// clear text and does not compress.
    pub(super) in_place: bool,
    /// Chunks between this reader's successive chunks of a file (the reader count).
    pub(super) prefetch_stride: u64,
    /// Large-file reads kept in flight through io_uring (1: none, read in turn).
    pub(super) read_depth: u32,
}

/// An io-read thread at work: its scratch state besides what it was given.
struct Reading {
    compressor: Compressor,
    open: OpenFile,
    /// A packed chunk's segment list, reused (inline, it travels and comes back).
    segments: Vec<Segment>,
    ahead: Option<ReadAhead>,
    /// Scratch for reading packs of small files a batch at a time.
    packs: PackReads,
    /// Reads the ring finished, waiting to be shipped (room for `read_depth`, reused).
    finished: Vec<readahead::Finished>,
    /// The most reads this thread had in flight at once (reported when it ends).
    deepest: u32,
}

impl Reader {
    /// Takes work from the scheduler until it closes (or the session aborts), reads it
    /// into this channel's slots and ships each chunk. A large file's chunks opened with
    /// `O_DIRECT` go through the thread's ring, up to `read_depth` at a time: the disk
    /// keeps requests queued while the thread checksums and sends; a pack's small files
    /// are asked for a batch at a time ([`PackReads`]); a large file's chunks through
    /// the page cache are read in turn.
    pub(super) fn run(self, mut dispatch: Dispatch) -> Result<(), EngineError> {
        let mut r = Reading {
            compressor: Compressor::sharing(self.mode, &self.auto),
            open: OpenFile::new(self.direct, self.prefetch_stride, self.in_place),
            segments: Vec::new(),
            ahead: self.ring(),
            packs: PackReads::default(),
            finished: Vec::with_capacity(self.read_depth as usize),
            deepest: 1,
        };
        let result = self.work(&mut r, &mut dispatch);
        self.stats.note_read_depth(r.deepest);
        result
    }

    /// The thread's ring for reads in flight, when it reads with `O_DIRECT` more than
    /// one at a time and the kernel allows io_uring (said once per process when not).
    fn ring(&self) -> Option<ReadAhead> {
        if !self.direct || self.read_depth <= 1 {
            return None;
        }
        ReadAhead::new(self.read_depth)
            .inspect_err(|e| {
                static NO_RING: std::sync::Once = std::sync::Once::new();
                NO_RING.call_once(|| {
                    tracing::warn!(
                        "io_uring unavailable ({e}): large files are read one chunk at a time"
                    );
                });
            })
            .ok()
    }

    fn work(&self, r: &mut Reading, dispatch: &mut Dispatch) -> Result<(), EngineError> {
        loop {
            if self.abort.load(Ordering::Relaxed) {
                return Ok(());
            }
            let idle = r.ahead.as_ref().is_none_or(ReadAhead::is_empty);
            let next = if idle {
                match self.sched.next(POLL) {
                    None => return Ok(()),
                    Some(Err(())) => continue,
                    Some(Ok(work)) => match self.acquire(dispatch) {
                        Some(slot) => Some((work, slot)),
                        None => return Ok(()),
                    },
                }
            } else if r.ahead.as_ref().is_some_and(ReadAhead::has_room) {
                // Top the ring up only with what is ready now, and a slot free now.
                self.pool
                    .try_acquire()
                    .and_then(|slot| self.sched.try_next().map(|work| (work, slot)))
            } else {
                None
            };
            let going = match next {
                Some((work, slot)) => self.take(r, dispatch, work, slot)?,
                None => self.reap(r, dispatch)?,
            };
            if !going {
                return Ok(());
            }
        }
    }

    /// A slot of this channel's pool, or `None` once the session aborts: never wait for
    /// ever on slots held by a queue whose senders are gone.
    fn acquire(&self, dispatch: &mut Dispatch) -> Option<Slot> {
        dispatch.clock.lap(Stage::Read, Time::Idle);
        loop {
            if self.abort.load(Ordering::Relaxed) {
                return None;
            }
            if let Some(s) = self.pool.acquire_timeout(POLL) {
                dispatch.clock.lap(Stage::Read, Time::Blocked);
                return Some(s);
            }
        }
    }

    fn failures(&self) -> Failures<'_> {
        Failures {
            to_master: &self.failed,
        }
    }

    /// Starts `work` on the ring when it is a large file's chunk read with `O_DIRECT`,
    /// else reads it now and ships it. `false`: the session is ending.
    fn take(
        &self,
        r: &mut Reading,
        dispatch: &mut Dispatch,
        mut work: Work,
        mut slot: Slot,
    ) -> Result<bool, EngineError> {
        let target = work.target();
        if let (Some(ahead), Work::Chunk { file, .. }) = (r.ahead.as_mut(), &work) {
            if let Ok((f, true)) = r.open.get(file) {
                match ahead.start(work, slot, f) {
                    Ok(()) => {
                        r.deepest = r.deepest.max(ahead.in_flight());
                        return Ok(true);
                    }
                    Err((w, s, e)) => {
                        tracing::debug!("read-ahead refused a chunk ({e}): read in turn");
                        (work, slot) = (w, s);
                    }
                }
            }
        }
        r.segments.clear();
        let read = read_work(
            &work,
            &mut r.open,
            &mut r.packs,
            &mut slot,
            &mut r.segments,
            self.failures(),
        );
        if let Some(t) = target {
            self.sched.done(t);
        }
        dispatch.clock.worked(
            Stage::Read,
            read.as_ref().map_or(0, |h| u64::from(h.0.raw_len)),
        );
        match read {
            Some((header, in_file)) => self.ship(r, dispatch, (header, in_file), slot),
            None => Ok(true),
        }
    }

    /// Waits for reads on the ring to finish and ships them. `false`: the session is
    /// ending.
    fn reap(&self, r: &mut Reading, dispatch: &mut Dispatch) -> Result<bool, EngineError> {
        let Some(ahead) = r.ahead.as_mut() else {
            return Ok(true);
        };
        let mut finished = std::mem::take(&mut r.finished);
        ahead
            .complete(|f| finished.push(f))
            .map_err(|e| EngineError::io("waiting for reads in flight", e))?;
        dispatch.clock.lap(Stage::Read, Time::Busy);
        let mut going = true;
        for f in finished.drain(..) {
            let (p, result) = match f {
                Ok(p) => (p, Ok(())),
                Err((p, e)) => (p, Err(e)),
            };
            let Work::Chunk {
                file,
                offset,
                target,
                ..
            } = &p.work
            else {
                continue;
            };
            if let Some(t) = target {
                self.sched.done(*t);
            }
            match result {
                Ok(()) if going => {
                    let header = chunk_header(file, *offset, &p.slot);
                    dispatch
                        .clock
                        .worked(Stage::Read, u64::from(header.raw_len));
                    r.segments.clear();
                    going = self.ship(r, dispatch, (header, None), p.slot)?;
                }
                Ok(()) => {}
                Err(e) => self.failures().fail(
                    file,
                    &format!("reading {:?} at {offset}: {e}", file.src_path.as_str()),
                ),
            }
        }
        r.finished = finished;
        Ok(going)
    }

    /// Hands a chunk read into `slot` (or left in the page cache, `in_file`) on: to the
    /// compress stage, or compressed (when on) and sent by this thread or queued for the
    /// senders. `false`: the session is ending.
    fn ship(
        &self,
        r: &mut Reading,
        dispatch: &mut Dispatch,
        (header, in_file): (ChunkHeader, Option<InFile>),
        slot: Slot,
    ) -> Result<bool, EngineError> {
        // While `auto` sends raw, the hand-off to a compress thread would only cost a
        // context switch: ship it from here.
        let stage = self
            .to_compress
            .as_ref()
            .filter(|_| in_file.is_none())
            .filter(|_| self.mode != CompressMode::Auto || self.auto.compressing());
        // Inline, the segment list goes out and comes back (no allocation); a queue gets
        // its own copy (packed chunks only: a large file's chunk has none).
        let handed = if stage.is_some() || !self.inline {
            r.segments.clone()
        } else {
            std::mem::take(&mut r.segments)
        };
        let out = Outgoing {
            header,
            segments: handed,
            slot,
            in_file,
        };
        match stage {
            Some(q) => {
                let sent = q.send(out).is_ok();
                dispatch.clock.enqueued(Stage::Compress);
                dispatch.clock.lap(Stage::Read, Time::Blocked);
                Ok(sent)
            }
            None => match dispatch.ship(out, &mut r.compressor)? {
                Some(back) if self.inline => {
                    r.segments = back;
                    Ok(true)
                }
                Some(_) => Ok(true),
                None => Ok(false),
            },
        }
    }
}
