//! The source side, driven as the engine's shell drives it (`crates/engine/src/source`):
//! the master feeds the scanner's entries and the sink's frames to a `SourceCore` and
//! carries out its actions on a `Scheduler` (`master.rs`); the io-read threads are in
//! [`crate::reader`]. Once every file is answered and the readers have drained the
//! scheduler, the data connections close and the close handshake runs.

use crate::run::{instant, say, End, Ev, Outcome, Sim};
use crate::world::World;
use sluice_session::sched::{ChunkFile, Scheduler, TargetId, Work};
use sluice_session::source::{
    Report, Resend, SourceAction, SourceConfig, SourceCore, Waiting, SMALL_FILE_MAX_BYTES,
};
use sluice_wire::Frame;

/// Between two scan steps, µs.
const SCAN_STEP: u64 = 3;
/// The master's pause while the window or the scheduler is full (`FULL_PAUSE`), µs.
const FULL_PAUSE: u64 = 2_000;
/// How long the master waits for an answer before it looks again (`ANSWER_WAIT`), µs.
const ANSWER_WAIT: u64 = 100_000;
/// Scan steps at which the scanner has nothing within `SCAN_WAIT`, per mille.
const SCAN_IDLE_PM: u64 = 100;

/// A source file as the scheduler sees it: id, size, and where its bytes are.
#[derive(Debug, Clone)]
pub struct SimFile {
    pub id: u64,
    pub size: u64,
    first: u32,
    targets: u32,
    stripe: u64,
}

impl ChunkFile for SimFile {
    fn id(&self) -> u64 {
        self.id
    }
    fn size(&self) -> u64 {
        self.size
    }
    fn target(&self, offset: u64) -> TargetId {
        let stripe = offset / self.stripe;
        TargetId(self.first + u32::try_from(stripe % u64::from(self.targets)).expect("small"))
    }
}

/// An io-read thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    /// Waiting for work (or sending what it read).
    Idle,
    /// Reading.
    Busy,
    /// The scheduler is closed and drained: the thread has ended.
    Ended,
}

/// The source side's state.
pub struct Source {
    pub core: SourceCore,
    pub sched: Scheduler<SimFile>,
    pub readers: Vec<Reader>,
    /// A `ReaderWake` is scheduled for the reader.
    pub woken: Vec<bool>,
    /// Entries handed to the core so far.
    scanned: usize,
    data_closed: bool,
    pub end: End,
    frames: Vec<Frame>,
}

impl Source {
    pub fn new(w: &World) -> Source {
        let cfg = SourceConfig {
            sink_closes: w.opts.sink_closes,
            ..SourceConfig::new(w.chunk_bytes, w.opts.negotiates())
        };
        Source {
            core: SourceCore::new(cfg),
            sched: Scheduler::new(w.chunk_bytes, SMALL_FILE_MAX_BYTES),
            readers: vec![Reader::Idle; w.shape.readers],
            woken: vec![false; w.shape.readers],
            scanned: 0,
            data_closed: false,
            end: End::Running,
            frames: Vec::new(),
        }
    }
}

impl Sim {
    /// The master's step: one scanner item while scanning; while waiting for answers,
    /// the pack released (`on_idle`) and the next look after `ANSWER_WAIT`.
    pub fn src_wake(&mut self) {
        if self.src.end != End::Running {
            return;
        }
        match self.src.core.waiting_for() {
            Waiting::Entries => self.scan_step(),
            Waiting::Answers => {
                self.src.core.on_idle();
                self.src_carry_out();
                self.q.at(self.now + ANSWER_WAIT, Ev::SrcWake);
            }
            _ => {}
        }
    }

    /// `Master::scan_step`: an entry, a scan error, the scanner idle, or its end.
    fn scan_step(&mut self) {
        let core = &mut self.src.core;
        if !core.can_announce() || !self.src.sched.has_room() {
            core.on_scan_idle();
            self.src_carry_out();
            self.q.at(self.now + FULL_PAUSE, Ev::SrcWake);
            return;
        }
        // The scanner runs ahead of the master: a few items per step.
        for _ in 0..self.rng.range(1, 4) {
            let core = &mut self.src.core;
            if !core.can_announce() {
                break;
            }
            if self.rng.chance(SCAN_IDLE_PM) {
                core.on_scan_idle();
            } else if let Some(f) = self.w.files.get(self.src.scanned) {
                say!(
                    self,
                    "scan: {} ({:?}, {} B)",
                    f.path(),
                    f.entry.kind,
                    f.entry.size
                );
                core.on_entry(0, f.entry.clone());
                self.src.scanned += 1;
            } else {
                say!(self, "scan: end");
                core.on_scan_end();
            }
            self.src_carry_out();
        }
        let pause = SCAN_STEP + self.rng.below(SCAN_STEP);
        self.q.at(self.now + pause, Ev::SrcWake);
    }

    /// Frames from the sink, one event each to the core.
    pub fn src_frames(&mut self, bytes: &[u8]) {
        if self.src.end != End::Running {
            return;
        }
        let mut frames = std::mem::take(&mut self.src.frames);
        self.to_source.receive(bytes, &mut frames);
        for frame in frames.drain(..) {
            if self.src.end != End::Running {
                break;
            }
            say!(self, "source <- {}", brief(&frame));
            match self.src.core.on_frame(frame, instant(self.now)) {
                Ok(()) => self.src_carry_out(),
                Err(e) => self.src_fail(e.to_string()),
            }
        }
        self.src.frames = frames;
        // The engine releases the pack whenever no frame is waiting; here, at random.
        if self.src.core.waiting_for() == Waiting::Answers && self.rng.chance(500) {
            self.src.core.on_idle();
            self.src_carry_out();
        }
        self.src_progress();
    }

    /// The sink closed the control connection.
    pub fn src_ctl_end(&mut self) {
        if self.src.end != End::Running {
            return;
        }
        say!(self, "source: the sink closed the control connection");
        if let Err(e) = self.src.core.on_peer_closed() {
            self.src_fail(e.to_string());
        }
        self.src_progress();
    }

    pub fn src_close_deadline(&mut self) {
        if self.src.end != End::Running {
            return;
        }
        if let Waiting::CloseAck { deadline } = self.src.core.waiting_for() {
            if instant(self.now) >= deadline {
                if let Err(e) = self.src.core.on_tick(instant(self.now)) {
                    self.src_fail(e.to_string());
                }
            }
        }
    }

    /// After an event: the data path closes once every file is answered and the readers
    /// have ended; the session ends with the `CloseAck`.
    pub fn src_progress(&mut self) {
        if self.src.end != End::Running {
            return;
        }
        match self.src.core.waiting_for() {
            Waiting::DataSent => self.src_data_sent(),
            Waiting::Finished => {
                say!(self, "source: finished");
                self.src.end = End::Finished;
                self.src_close_connections();
            }
            Waiting::Failed => panic!("the core failed without an error"),
            _ => {}
        }
    }

    /// `source::run` after `Master::run`: the readers joined, the data connections
    /// closed, then `Close` (or, where the sink closes by itself, its `CloseAck`).
    fn src_data_sent(&mut self) {
        if self.src.data_closed || self.src.readers.iter().any(|r| *r != Reader::Ended) {
            return;
        }
        assert!(self.src.sched.is_closed());
        assert_eq!(self.src.sched.in_flight(), 0);
        self.src.data_closed = true;
        self.close_data();
        say!(self, "source: every chunk sent; the close");
        self.src.core.on_data_sent(instant(self.now));
        self.src_carry_out();
        match self.src.core.waiting_for() {
            Waiting::CloseAck { deadline } => {
                let at = deadline.since_origin().as_micros();
                self.q
                    .at(u64::try_from(at).expect("small"), Ev::SrcCloseDeadline);
            }
            // The sink closed by itself before the data path ended.
            Waiting::Finished => self.src_progress(),
            _ => {}
        }
    }

    fn close_data(&mut self) {
        for i in 0..self.data.len() {
            if let Some(at) = self.data[i].close(self.now) {
                self.q.at(at, Ev::DataEnd(i));
            }
        }
    }

    /// The session failed here: the readers stop, the connections close.
    fn src_fail(&mut self, why: String) {
        say!(self, "source: FAILED: {why}");
        while self.src.core.poll_action().is_some() {}
        self.src.end = End::Failed(why);
        self.src_close_connections();
    }

    pub fn src_close_connections(&mut self) {
        self.flush_control();
        if let Some(at) = self.to_sink.close(self.now, &mut self.rng) {
            self.q.at(at, Ev::SnkCtlEnd);
        }
        self.close_data();
    }

    /// `Master::carry_out`: every action the core queued.
    pub fn src_carry_out(&mut self) {
        let mut wake = false;
        while let Some(action) = self.src.core.poll_action() {
            match action {
                SourceAction::Send(frame) => {
                    assert!(
                        !(self.w.opts.sink_closes && matches!(frame, Frame::Close(_))),
                        "the source sent Close to a sink that closes by itself"
                    );
                    self.send_to_sink(frame);
                }
                SourceAction::Schedule { file_id, skip } => {
                    say!(self, "schedule {file_id} less {skip:?}");
                    let file = self.sim_file(file_id);
                    let first = self.log.skips.insert(file_id, skip.clone());
                    assert!(first.is_none(), "file {file_id} scheduled twice");
                    self.src.sched.add(file, skip);
                    wake = true;
                }
                SourceAction::Resend { file_id, work } => {
                    say!(self, "resend {file_id} {work:?}");
                    let file = self.sim_file(file_id);
                    self.src.sched.retry(match work {
                        Resend::Pack => Work::Pack(vec![file]),
                        Resend::Chunk { index, offset, len } => Work::Chunk {
                            file,
                            index,
                            offset,
                            len,
                            target: None,
                        },
                    });
                    wake = true;
                }
                SourceAction::Cancel { file_id } => self.src.sched.cancel(file_id),
                SourceAction::ReleasePacks => wake |= self.src.sched.flush(),
                SourceAction::EndOfFiles => {
                    self.src.sched.close();
                    wake = true;
                }
                SourceAction::Delivered { .. } => self.log.acked += 1,
                SourceAction::Refused { .. } => self.log.refused += 1,
                SourceAction::Report(r) => self.src_report(r),
            }
        }
        if wake {
            self.wake_readers();
        }
    }

    fn src_report(&mut self, r: Report) {
        let outcome = match r {
            Report::Skipped(e) => (e.file_id, Outcome::Skipped),
            Report::Done { entry, digest } => (entry.file_id, Outcome::Done(digest)),
            Report::Failed { entry, message } => (entry.file_id, Outcome::Failed(message)),
            Report::Resumed { bytes } => return self.log.resumed_src += bytes,
            Report::ChunkResent => return self.log.resent += 1,
            Report::Announced { .. } | Report::ScanError(_) => return,
        };
        say!(self, "source: file {} ends: {:?}", outcome.0, outcome.1);
        let earlier = self.log.outcomes.insert(outcome.0, outcome.1);
        assert!(
            earlier.is_none(),
            "file {} ended twice at the source",
            outcome.0
        );
    }

    /// The file to read for `file_id`, which the core must still know.
    fn sim_file(&self, file_id: u64) -> SimFile {
        let (_, entry) = self.src.core.entry(file_id).expect("an announced file");
        let f = self.w.file(file_id);
        assert_eq!(entry, &f.entry);
        let (first, targets, stripe) = f.targets;
        SimFile {
            id: file_id,
            size: entry.size,
            first,
            targets,
            stripe,
        }
    }

    pub fn wake_readers(&mut self) {
        for r in 0..self.src.readers.len() {
            if self.src.readers[r] == Reader::Idle && !self.src.woken[r] {
                self.src.woken[r] = true;
                self.q.at(self.now, Ev::ReaderWake(r));
            }
        }
    }

    fn send_to_sink(&mut self, frame: Frame) {
        say!(self, "source -> {}", brief(&frame));
        self.to_sink.send(frame);
    }
}

/// A frame in a trace line (manifests by their ids only).
pub fn brief(frame: &Frame) -> String {
    match frame {
        Frame::Manifest(m) => {
            let ids: Vec<u64> = m.entries.iter().map(|e| e.file_id).collect();
            format!("Manifest {ids:?}")
        }
        other => format!("{other:?}"),
    }
}
