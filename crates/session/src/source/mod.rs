//! The source side of a session as a state machine: the window of announced files,
//! `Manifest` batching, `Have` -> schedule, `ChunkNack` -> resend, `FileDone` /
//! `FileFailed`, and the close handshake. No I/O: the driver (the engine's master
//! thread, or a simulation) feeds it events and carries out the [`SourceAction`]s it
//! queues, before the next event:
//!
//! * from the scanner: [`SourceCore::on_entry`], [`SourceCore::on_scan_error`],
//!   [`SourceCore::on_scan_idle`] (nothing now, or held back), [`SourceCore::on_scan_end`];
//! * from the sink: [`SourceCore::on_frame`], [`SourceCore::on_idle`] (nothing now),
//!   [`SourceCore::on_peer_closed`];
//! * from the data path: [`SourceCore::on_read_failed`] (a file could not be read),
//!   [`SourceCore::on_data_sent`] (every chunk sent, the data connections closed), and
//!   the clock: [`SourceCore::on_tick`].
//!
//! [`SourceCore::waiting_for`] says what it waits for; [`SourceCore::can_announce`]
//! whether the scanner may hand it another entry (at most [`MAX_FILES_IN_FLIGHT`] files
//! are announced and not yet answered). The chunks themselves never pass through here:
//! [`SourceAction::Schedule`] hands a file to the scheduler ([`crate::sched`]), and the
//! driver's readers read and send it.
//!
//! ```
//! use sluice_session::source::{SourceAction, SourceConfig, SourceCore, Waiting};
//! use sluice_session::time::Instant;
//! use sluice_wire::{CloseAck, FileDone, FileEntry, FileKind, Frame, RelPath};
//!
//! // The driver carries out every action before the next event.
//! fn drain(core: &mut SourceCore, sent: &mut Vec<Frame>) {
//!     while let Some(action) = core.poll_action() {
//!         match action {
//!             SourceAction::Send(frame) => sent.push(frame),
//!             SourceAction::Schedule { file_id, .. } => assert_eq!(file_id, 1),
//!             _ => {} // the statistics, the scheduler's packs and end
//!         }
//!     }
//! }
//! let mut core = SourceCore::new(SourceConfig::new(1 << 20, false));
//! let mut sent = Vec::new();
//! let entry = FileEntry {
//!     file_id: 1,
//!     path: RelPath::parse("a").unwrap(),
//!     kind: FileKind::File,
//!     size: 10,
//!     mode: 0o644,
//!     mtime_ns: 0,
//!     symlink_target: None,
//! };
//! core.on_entry(0, entry);
//! drain(&mut core, &mut sent);
//! core.on_scan_end();
//! drain(&mut core, &mut sent);
//! assert!(matches!(&sent[..], [Frame::Manifest(_), Frame::ManifestEnd(_)]));
//! let done = Frame::FileDone(FileDone { file_id: 1, digest: [0; 16] });
//! core.on_frame(done, Instant::ZERO).unwrap();
//! drain(&mut core, &mut sent);
//! assert_eq!(core.waiting_for(), Waiting::DataSent);
//! core.on_data_sent(Instant::ZERO); // every chunk went out: `Close`
//! drain(&mut core, &mut sent);
//! core.on_frame(Frame::CloseAck(CloseAck), Instant::ZERO).unwrap();
//! assert_eq!(core.waiting_for(), Waiting::Finished);
//! ```

use crate::time::Instant;
use sluice_wire::{
    Close, CloseReason, ErrorCode, FileEntry, FileFailed, FileKind, Frame, ManifestBatch,
    ManifestEnd,
};
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// Files announced but not yet answered by the sink, at most (bounds source memory).
pub const MAX_FILES_IN_FLIGHT: usize = 16_384;
/// Files up to this size travel packed (when the chunk is larger).
pub const SMALL_FILE_MAX_BYTES: u64 = 256 << 10;
/// The `file_id` of a `FileFailed` for an entry the source could not describe (it could
/// not be scanned, so it has no manifest entry); the message names it. Scanned entries
/// are numbered from 1.
pub const UNDESCRIBED_FILE_ID: u64 = 0;
/// How long the sink has to acknowledge the close (it sets directory times first).
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(60);
/// Actions one event queues at most (a `ChunkNack` past the resend budget: `Refused`,
/// the batch, `Cancel`, `FileFailed`, the report; or the end of files).
const MAX_ACTIONS_PER_EVENT: usize = 5;
/// Times one chunk is sent again after the sink refused it; once more, and its file
/// fails (a path that damages the same chunk every time would otherwise loop for ever).
pub const MAX_CHUNK_RESENDS: u32 = 3;
/// Chunks of one file the source remembers a refusal of; a sink refusing more of them
/// fails the file (bounds the memory a broken or hostile sink can make the source use).
pub const MAX_REFUSED_CHUNKS_PER_FILE: usize = 4096;

/// What a source session does, fixed at its start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceConfig {
    /// The session's chunk size.
    pub chunk_bytes: u32,
    /// Files up to this size (and at most one chunk) travel packed: the scheduler's rule,
    /// which a resend follows.
    pub small_max_bytes: u64,
    /// Resume, update or no-clobber: a file is scheduled only once the sink's `Have`
    /// says what it holds.
    pub negotiate: bool,
    /// How long the sink has to acknowledge the close.
    pub close_timeout: Duration,
    /// The sink ends the session by itself (`SINK_CLOSES` negotiated): its `CloseAck`
    /// comes unasked behind the last final word, and no `Close` is sent.
    pub sink_closes: bool,
}

impl SourceConfig {
    /// The engine's defaults for `chunk_bytes` chunks.
    #[must_use]
    pub fn new(chunk_bytes: u32, negotiate: bool) -> SourceConfig {
        SourceConfig {
            chunk_bytes,
            small_max_bytes: SMALL_FILE_MAX_BYTES,
            negotiate,
            close_timeout: CLOSE_TIMEOUT,
            sink_closes: false,
        }
    }
}

const SENDING: &str = "sending files";
const CLOSING: &str = "waiting for the close to be acknowledged";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Scanning,
    Answering,
    Sending,
    Closing { deadline: Instant },
    Closed,
    Failed,
}

/// A file announced and not yet answered.
#[derive(Debug)]
struct Announced {
    /// The scan spec it was found by (the driver maps it back to a root).
    spec: usize,
    entry: FileEntry,
    /// Scheduled already, or answered by a `Have`: a further `Have` is ignored.
    answered: bool,
    /// Chunks the sink refused, by offset, with how many times (at most
    /// [`MAX_REFUSED_CHUNKS_PER_FILE`] entries).
    refused: BTreeMap<u64, u32>,
}

/// The source side's state machine. Deterministic: the same events give the same
/// actions.
#[derive(Debug)]
pub struct SourceCore {
    cfg: SourceConfig,
    phase: Phase,
    /// Files announced and not yet answered, by id (at most [`MAX_FILES_IN_FLIGHT`]).
    pending: BTreeMap<u64, Announced>,
    /// The batch being filled.
    manifest: ManifestBatch,
    files_total: u64,
    bytes_total: u64,
    actions: VecDeque<SourceAction>,
    /// The sink's unasked `CloseAck` has come (`sink_closes`), before the data path
    /// ended.
    close_acked: bool,
}

impl SourceCore {
    /// A core for a session of `cfg`, expecting the scanner's first entry.
    #[must_use]
    pub fn new(cfg: SourceConfig) -> SourceCore {
        assert!(cfg.chunk_bytes > 0, "a chunk holds at least one byte");
        SourceCore {
            cfg,
            phase: Phase::Scanning,
            pending: BTreeMap::new(),
            manifest: ManifestBatch::new(),
            files_total: 0,
            bytes_total: 0,
            actions: VecDeque::with_capacity(MAX_ACTIONS_PER_EVENT),
            close_acked: false,
        }
    }

    /// The session's configuration.
    #[must_use]
    pub fn config(&self) -> &SourceConfig {
        &self.cfg
    }

    /// What the core waits for.
    #[must_use]
    pub fn waiting_for(&self) -> Waiting {
        match self.phase {
            Phase::Scanning => Waiting::Entries,
            Phase::Answering => Waiting::Answers,
            Phase::Sending => Waiting::DataSent,
            Phase::Closing { deadline } => Waiting::CloseAck { deadline },
            Phase::Closed => Waiting::Finished,
            Phase::Failed => Waiting::Failed,
        }
    }

    /// Whether the scanner may hand over another entry: the scan goes on and fewer than
    /// [`MAX_FILES_IN_FLIGHT`] files wait for the sink's answer.
    #[must_use]
    pub fn can_announce(&self) -> bool {
        self.phase == Phase::Scanning && self.pending.len() < MAX_FILES_IN_FLIGHT
    }

    /// Files announced and not yet answered.
    #[must_use]
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }

    /// Entries and bytes announced so far.
    #[must_use]
    pub fn announced(&self) -> (u64, u64) {
        (self.files_total, self.bytes_total)
    }

    /// File `file_id` while it waits for its answer: the scan spec it was found by, and
    /// its entry.
    #[must_use]
    pub fn entry(&self, file_id: u64) -> Option<(usize, &FileEntry)> {
        self.pending.get(&file_id).map(|a| (a.spec, &a.entry))
    }

    /// The next action to carry out; call until `None` after every event.
    pub fn poll_action(&mut self) -> Option<SourceAction> {
        self.actions.pop_front()
    }

    /// The scanner found `entry` under scan spec `spec`. Call only while
    /// [`SourceCore::can_announce`].
    pub fn on_entry(&mut self, spec: usize, entry: FileEntry) {
        self.begin();
        assert_eq!(self.phase, Phase::Scanning, "an entry after the scan ended");
        debug_assert!(
            self.pending.len() < MAX_FILES_IN_FLIGHT,
            "the window is full"
        );
        debug_assert_ne!(entry.file_id, UNDESCRIBED_FILE_ID, "scanned ids start at 1");
        debug_assert!(
            !self.pending.contains_key(&entry.file_id),
            "a file id twice"
        );
        self.files_total += 1;
        self.bytes_total += entry.size;
        self.push(SourceAction::Report(Report::Announced { size: entry.size }));
        let data = entry.kind == FileKind::File && entry.size > 0;
        let file_id = entry.file_id;
        self.batch(entry.clone());
        if data && !self.cfg.negotiate {
            self.push(SourceAction::Schedule {
                file_id,
                skip: None,
            });
        }
        let answered = !self.cfg.negotiate;
        let a = Announced {
            spec,
            entry,
            answered,
            refused: BTreeMap::new(),
        };
        self.pending.insert(file_id, a);
        self.check();
    }

    /// An entry of the tree could not be scanned: it is counted failed, and the sink is
    /// told (on a pull, it is the user's side).
    pub fn on_scan_error(&mut self, message: String) {
        self.begin();
        assert_eq!(
            self.phase,
            Phase::Scanning,
            "a scan error after the scan ended"
        );
        self.push(SourceAction::Report(Report::ScanError(message.clone())));
        let failed = FileFailed::new(UNDESCRIBED_FILE_ID, ErrorCode::Io, message);
        self.push(SourceAction::Send(Frame::FileFailed(failed)));
        self.check();
    }

    /// The scanner has nothing right now, or is held back (the window or the scheduler
    /// is full): the batch goes out, and the partly filled pack is released.
    pub fn on_scan_idle(&mut self) {
        self.begin();
        assert_eq!(self.phase, Phase::Scanning);
        self.send_manifest();
        self.push(SourceAction::ReleasePacks);
        self.check();
    }

    /// The scan ended: the last batch and `ManifestEnd` go out.
    pub fn on_scan_end(&mut self) {
        self.begin();
        assert_eq!(self.phase, Phase::Scanning, "the scan ended twice");
        self.send_manifest();
        let end = ManifestEnd {
            files: self.files_total,
            bytes: self.bytes_total,
        };
        self.push(SourceAction::Send(Frame::ManifestEnd(end)));
        self.push(SourceAction::ReleasePacks);
        self.phase = Phase::Answering;
        self.settle();
        self.check();
    }

    /// Nothing from the sink right now: after the scan, small files answered by `Have`
    /// wait in the scheduler's open pack; release it before waiting, or they would never
    /// be sent.
    pub fn on_idle(&mut self) {
        self.begin();
        if self.phase == Phase::Answering {
            self.push(SourceAction::ReleasePacks);
        }
        self.check();
    }

    /// A frame from the sink, read at `now`.
    ///
    /// # Errors
    /// The sink sent `Error`: the session fails.
    pub fn on_frame(&mut self, frame: Frame, now: Instant) -> Result<(), SourceError> {
        self.begin();
        let result = match self.phase {
            Phase::Scanning | Phase::Answering | Phase::Sending => self.answer(frame, now),
            Phase::Closing { .. } => self.closing(frame),
            Phase::Closed | Phase::Failed => Ok(()),
        };
        if result.is_err() {
            self.phase = Phase::Failed;
        }
        self.settle();
        self.check();
        result
    }

    /// A reader could not read file `file_id` (a chunk of it, or the pack it is in): the
    /// file fails at this side. `FileFailed` is its final word (the sink forgets it and
    /// keeps its partial for resume), none of the rest of it is read, and it leaves the
    /// window, so the session can end. The batch goes out first: the file's entry may be
    /// in it, and the sink must know the file before it forgets it. A file already
    /// answered is left as it is (a second chunk of it failing, or the sink's word first).
    pub fn on_read_failed(&mut self, file_id: u64, message: String) {
        self.begin();
        if !matches!(self.phase, Phase::Scanning | Phase::Answering) {
            return; // every file is answered already
        }
        self.fail_here(file_id, ErrorCode::Io, message);
        self.settle();
        self.check();
    }

    /// Ends file `file_id` at this side, failed with `code`: `FileFailed` is its final
    /// word (the sink forgets it and keeps its partial for resume), none of the rest of
    /// it is read, and it leaves the window. The batch goes out first: the file's entry
    /// may be in it, and the sink must know the file before it forgets it. Nothing for a
    /// file already answered.
    fn fail_here(&mut self, file_id: u64, code: ErrorCode, message: String) {
        let Some(a) = self.pending.remove(&file_id) else {
            return;
        };
        self.send_manifest();
        self.push(SourceAction::Cancel { file_id });
        let failed = FileFailed::new(file_id, code, message.clone());
        self.push(SourceAction::Send(Frame::FileFailed(failed)));
        let entry = a.entry;
        self.push(SourceAction::Report(Report::Failed { entry, message }));
    }

    /// The sink closed the control connection.
    ///
    /// # Errors
    /// Unless the close was acknowledged already: the session fails.
    pub fn on_peer_closed(&mut self) -> Result<(), SourceError> {
        self.begin();
        let state = match self.phase {
            Phase::Closed => return Ok(()),
            // The sink closed the session itself and then its connection.
            _ if self.close_acked => return Ok(()),
            Phase::Closing { .. } => CLOSING,
            _ => SENDING,
        };
        self.phase = Phase::Failed;
        Err(SourceError::Disconnected { state })
    }

    /// The data path has sent every chunk and closed its connections: the orderly close
    /// starts (`Close`, then the sink's `CloseAck` by `now` + the close timeout). Where
    /// the sink closes by itself, no `Close` goes: the session is closed if its
    /// `CloseAck` came already, else it is awaited by the same deadline.
    pub fn on_data_sent(&mut self, now: Instant) {
        self.begin();
        assert_eq!(self.phase, Phase::Sending, "the data path ended early");
        if self.close_acked {
            self.phase = Phase::Closed;
            self.check();
            return;
        }
        if !self.cfg.sink_closes {
            self.push(SourceAction::Send(Frame::Close(Close {
                reason: CloseReason::Done,
            })));
        }
        self.phase = Phase::Closing {
            deadline: now + self.cfg.close_timeout,
        };
        self.check();
    }

    /// The time is `now`.
    ///
    /// # Errors
    /// The close was not acknowledged by its deadline.
    pub fn on_tick(&mut self, now: Instant) -> Result<(), SourceError> {
        self.begin();
        match self.phase {
            Phase::Closing { deadline } if now >= deadline => {
                self.phase = Phase::Failed;
                Err(SourceError::Disconnected { state: CLOSING })
            }
            _ => Ok(()),
        }
    }

    fn push(&mut self, action: SourceAction) {
        self.actions.push_back(action);
    }

    /// Every event starts with the last one's actions carried out.
    fn begin(&self) {
        debug_assert!(
            self.actions.is_empty(),
            "the last event's actions were not carried out: {:?}",
            self.actions
        );
    }

    /// Adds `entry` to the batch; a full batch goes out first.
    fn batch(&mut self, entry: FileEntry) {
        if let Err(entry) = self.manifest.try_push(entry) {
            self.send_manifest();
            let pushed = self.manifest.try_push(entry);
            debug_assert!(pushed.is_ok(), "an entry fits an empty batch");
        }
    }

    fn send_manifest(&mut self) {
        if !self.manifest.is_empty() {
            let batch = self.manifest.take();
            self.push(SourceAction::Send(Frame::Manifest(batch)));
        }
    }

    /// Once the scan ended and every file is answered, no more files will be scheduled.
    fn settle(&mut self) {
        if self.phase == Phase::Answering && self.pending.is_empty() {
            self.phase = Phase::Sending;
            self.push(SourceAction::EndOfFiles);
        }
    }

    /// The invariants, checked after every event.
    fn check(&self) {
        assert!(
            self.pending.len() <= MAX_FILES_IN_FLIGHT,
            "the window overflowed"
        );
        debug_assert!(self.pending.len() as u64 <= self.files_total);
        debug_assert!(self.actions.len() <= MAX_ACTIONS_PER_EVENT);
        match self.phase {
            Phase::Scanning | Phase::Failed => {}
            Phase::Answering => debug_assert!(self.manifest.is_empty()),
            Phase::Sending | Phase::Closing { .. } | Phase::Closed => {
                debug_assert!(self.manifest.is_empty() && self.pending.is_empty());
            }
        }
    }
}

mod action;
mod answer;
mod rules;

pub use action::{ChunkKey, Report, Resend, SourceAction, SourceError, Waiting};
pub use rules::{names_another_version, sink_keeps};

#[cfg(test)]
mod tests;
