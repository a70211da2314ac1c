//! The master: a scanner thread streams the tree; the calling thread feeds its entries
//! and the sink's answers to the [`SourceCore`] and carries out what it asks (frames to
//! send, files to schedule or cancel, chunks to resend, figures for the statistics and
//! for `auto`), then runs the close handshake once the data threads have ended.

use super::read::ReadFailure;
use super::scanq;
use super::{ScanSpec, Sources};
use crate::codec::SharedAuto;
use crate::control::{ControlEvent, ControlTx, Wiring};
use crate::error::EngineError;
use crate::fs::{Root, Scanner};
use crate::sched::{Scheduler, Work};
use crate::stats::{FileOutcome, Stats};
use crossbeam_channel::{select, Receiver, RecvTimeoutError, Sender};
use sluice_session::source::{Report, Resend, SourceAction, SourceCore, SourceError, Waiting};
use sluice_session::time::Instant;
use sluice_wire::{FileEntry, Frame, RelPath};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Entries the scanner may be ahead of the master.
const SCAN_QUEUE: usize = 1024;
/// How long the master waits for an entry before it sends what it has batched.
const SCAN_WAIT: Duration = Duration::from_millis(5);
/// How long the master pauses while the window or the scheduler is full.
const FULL_PAUSE: Duration = Duration::from_millis(2);
/// How long the master waits for an answer after the scan before it looks again.
const ANSWER_WAIT: Duration = Duration::from_millis(100);

/// One item from the scanner: the scan spec it came from, and an entry or why not.
type ScanItem = (usize, Result<FileEntry, String>);
/// Where the master takes the scanner's entries from.
type ScanRx = super::scanq::ScanRx<ScanItem>;

/// The session's clock: the core's time is the time since the master started.
#[derive(Debug, Clone, Copy)]
struct Clock {
    origin: std::time::Instant,
}

impl Clock {
    fn now(self) -> Instant {
        self.at(std::time::Instant::now())
    }

    fn at(self, t: std::time::Instant) -> Instant {
        Instant::from_origin(t.saturating_duration_since(self.origin))
    }

    fn real(self, t: Instant) -> std::time::Instant {
        self.origin + t.since_origin()
    }
}

/// What the master drives the core with.
pub(super) struct Master<'a> {
    sources: &'a Sources,
    sched: &'a Scheduler,
    control: &'a ControlTx,
    events: &'a Receiver<ControlEvent>,
    stats: &'a Stats,
    auto: &'a SharedAuto,
    /// Files the data path could not read (and the master itself, for a file whose path
    /// does not map back into its root), for the core.
    failures: (Sender<ReadFailure>, Receiver<ReadFailure>),
    clock: Clock,
}

impl<'a> Master<'a> {
    pub(super) fn new(
        sources: &'a Sources,
        sched: &'a Scheduler,
        wiring: Wiring<'a>,
        auto: &'a SharedAuto,
        failures: (Sender<ReadFailure>, Receiver<ReadFailure>),
    ) -> Master<'a> {
        let clock = Clock {
            origin: std::time::Instant::now(),
        };
        Master {
            sources,
            sched,
            control: wiring.control,
            events: wiring.events,
            stats: wiring.stats,
            auto,
            failures,
            clock,
        }
    }

    /// Scans, announces and schedules until every file is answered.
    pub(super) fn run(&self, core: &mut SourceCore, recursive: bool) -> Result<(), EngineError> {
        let (scanner, entries) = spawn_scanner(&self.sources.specs, recursive)?;
        loop {
            self.answers(core)?;
            match core.waiting_for() {
                Waiting::Entries => self.scan_step(core, &entries),
                Waiting::Answers => {}
                _ => break,
            }
        }
        debug_assert_eq!(core.waiting_for(), Waiting::DataSent);
        let _ = scanner.join();
        Ok(())
    }

    /// Everything the sink said so far; after the scan, waits a while for it.
    fn answers(&self, core: &mut SourceCore) -> Result<(), EngineError> {
        loop {
            self.read_failures(core);
            let ev = if core.waiting_for() == Waiting::Answers {
                if self.events.is_empty() {
                    core.on_idle();
                    self.carry_out(core);
                }
                select! {
                    recv(self.events) -> ev => ev.unwrap_or(ControlEvent::Closed),
                    recv(self.failures.1) -> failed => {
                        if let Ok((file_id, message)) = failed {
                            core.on_read_failed(file_id, message);
                            self.carry_out(core);
                        }
                        continue;
                    }
                    default(ANSWER_WAIT) => return Ok(()),
                }
            } else {
                match self.events.try_recv() {
                    Ok(ev) => ev,
                    Err(_) => return Ok(()),
                }
            };
            self.event(core, ev)?;
        }
    }

    /// Files the data path could not read, each ended by the core.
    fn read_failures(&self, core: &mut SourceCore) {
        while let Ok((file_id, message)) = self.failures.1.try_recv() {
            core.on_read_failed(file_id, message);
            self.carry_out(core);
        }
    }

    /// One event from the control connection, handed to the core.
    fn event(&self, core: &mut SourceCore, ev: ControlEvent) -> Result<(), EngineError> {
        let result = match ev {
            ControlEvent::Frame(frame) => core.on_frame(frame, self.clock.now()),
            ControlEvent::Ack(ack, at) => core.on_frame(Frame::ChunkAck(ack), self.clock.at(at)),
            ControlEvent::Closed => core.on_peer_closed(),
            ControlEvent::Failed(e) => return Err(e),
        };
        result.map_err(source_error)?;
        self.carry_out(core);
        Ok(())
    }

    /// One entry from the scanner into the core, or a pause while there is no room.
    fn scan_step(&self, core: &mut SourceCore, entries: &ScanRx) {
        if !core.can_announce() || !self.sched.has_room() {
            core.on_scan_idle();
            self.carry_out(core);
            std::thread::sleep(FULL_PAUSE);
            return;
        }
        match entries.recv_timeout(SCAN_WAIT) {
            Ok((spec, Ok(entry))) => core.on_entry(spec, entry),
            Ok((_, Err(msg))) => core.on_scan_error(msg),
            Err(scanq::RecvError::Timeout) => core.on_scan_idle(),
            Err(scanq::RecvError::Disconnected) => core.on_scan_end(),
        }
        self.carry_out(core);
    }

    /// Carries out every action the core queued.
    fn carry_out(&self, core: &mut SourceCore) {
        while let Some(action) = core.poll_action() {
            match action {
                SourceAction::Send(frame) => self.control.send(frame),
                SourceAction::Schedule { file_id, skip } => match self.file(core, file_id) {
                    Some(file) => self.sched.add(file, skip),
                    None => self.unmapped(file_id),
                },
                SourceAction::Resend { file_id, work } => {
                    if let Some(work) = self.resend(core, file_id, work) {
                        self.sched.retry(work);
                    }
                }
                SourceAction::Cancel { file_id } => self.sched.cancel(file_id),
                SourceAction::ReleasePacks => self.sched.flush(),
                SourceAction::EndOfFiles => self.sched.close(),
                SourceAction::Delivered { key, at } => {
                    self.auto.delivered(key, self.clock.real(at))
                }
                SourceAction::Refused { key } => self.auto.refused(key),
                SourceAction::Report(report) => self.report(report),
            }
        }
    }

    /// A file whose manifest path does not map back into its root cannot be read: it
    /// fails like one the data path could not read (the core learns it next).
    fn unmapped(&self, file_id: u64) {
        let message = format!("file {file_id}: its path does not map back into its root");
        tracing::warn!("{message}");
        let _ = self.failures.0.try_send((file_id, message));
    }

    /// The file to read for announced file `file_id`.
    fn file(&self, core: &SourceCore, file_id: u64) -> Option<Arc<crate::sched::SrcFile>> {
        let (spec, entry) = core.entry(file_id)?;
        self.sources.file(spec, entry)
    }

    fn resend(&self, core: &SourceCore, file_id: u64, work: Resend) -> Option<Work> {
        let file = self.file(core, file_id)?;
        Some(match work {
            Resend::Pack => Work::Pack(vec![file]),
            Resend::Chunk { index, offset, len } => Work::Chunk {
                file,
                index,
                offset,
                len,
                target: None,
            },
        })
    }

    fn report(&self, report: Report) {
        match report {
            Report::Announced { size } => self.stats.file_announced(size),
            Report::ScanError(msg) => {
                tracing::warn!("scan: {msg}");
                self.stats.scan_error(&msg);
            }
            Report::Skipped(entry) => self.stats.file_skipped(&entry),
            Report::Done { entry, digest } => {
                self.stats.file_done(&entry, FileOutcome::Done { digest });
            }
            Report::Failed { entry, message } => {
                self.stats
                    .file_done(&entry, FileOutcome::Failed { message });
            }
            Report::Resumed { bytes } => self.stats.resumed_bytes(bytes),
            Report::ChunkResent => self.stats.chunk_resent(),
        }
    }

    /// The orderly close, once every chunk is sent: `Close`, then the sink sets
    /// directory times and acknowledges.
    pub(super) fn close(&self, core: &mut SourceCore) -> Result<(), EngineError> {
        core.on_data_sent(self.clock.now());
        self.carry_out(core);
        while let Waiting::CloseAck { deadline } = core.waiting_for() {
            let left = deadline.saturating_since(self.clock.now());
            let result = match self.events.recv_timeout(left) {
                Ok(ev) => {
                    self.event(core, ev)?;
                    continue;
                }
                Err(RecvTimeoutError::Timeout) => core.on_tick(self.clock.now()),
                Err(RecvTimeoutError::Disconnected) => core.on_peer_closed(),
            };
            result.map_err(source_error)?;
        }
        Ok(())
    }
}

/// The engine's error for the core's.
fn source_error(e: SourceError) -> EngineError {
    match e {
        SourceError::Remote { code, message } => EngineError::Remote { code, message },
        SourceError::Disconnected { state } => EngineError::Disconnected {
            peer: "sink".into(),
            state: state.into(),
        },
        SourceError::Unexpected { got, state } => EngineError::Unexpected {
            peer: "sink".into(),
            got: got.into(),
            state: state.into(),
        },
    }
}

/// Starts the scanner thread: it walks every spec in turn (file ids go on from one to
/// the next) and ends when all are walked, or when the master stops listening.
fn spawn_scanner(
    specs: &[ScanSpec],
    recursive: bool,
) -> Result<(JoinHandle<()>, ScanRx), EngineError> {
    // A scanner ahead of the master waits for half the queue to drain (see `scanq`).
    let (tx, rx) = scanq::scan_queue::<ScanItem>(SCAN_QUEUE);
    let specs: Vec<(Arc<Root>, Option<RelPath>, Option<RelPath>)> = specs
        .iter()
        .map(|s| (Arc::clone(&s.root), s.start.clone(), s.prefix.clone()))
        .collect();
    let scan = move || {
        let mut next_id = 1u64;
        for (i, (root, start, prefix)) in specs.into_iter().enumerate() {
            let scanner = match Scanner::new(&root, start, prefix, next_id, recursive) {
                Ok(s) => s,
                Err(e) => {
                    let _ = tx.send((i, Err(e.to_string())));
                    continue;
                }
            };
            for item in scanner {
                let item = item.map_err(|e| e.to_string());
                if let Ok(e) = &item {
                    next_id = next_id.max(e.file_id + 1);
                }
                if tx.send((i, item)).is_err() {
                    return;
                }
            }
        }
    };
    let handle = std::thread::Builder::new()
        .name("scan".into())
        .spawn(scan)
        .map_err(|e| EngineError::io("starting the scanner", e))?;
    Ok((handle, rx))
}
