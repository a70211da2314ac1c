//! One run of a seed: both sides, the network and the destination in one state, and the
//! loop that pops events in (time, sequence) order until none is left.

use crate::fs::DestFs;
use crate::net::{CtlLink, DataConn, Queue, Tx};
use crate::rng::{mix, Rng};
use crate::sink::Sink;
use crate::source::{SimFile, Source};
use crate::world::{Side, World};
use sluice_session::sched::Work;
use sluice_session::source::MAX_FILES_IN_FLIGHT;
use sluice_session::time::Instant;
use sluice_wire::ChunkSet;
use std::collections::BTreeMap;
use std::time::Duration;

/// Events one run may take at most: more is a session that does not end.
const MAX_STEPS: u64 = 200_000;
/// Virtual time one run may take at most, µs (the cores' own timeouts are 60 s).
const MAX_TIME: u64 = 600_000_000;

/// What happens next.
pub enum Ev {
    /// The source master's next scan step, or its wait for answers timing out.
    SrcWake,
    /// Control bytes from the sink reach the source.
    SrcFrame(Vec<u8>),
    /// The sink's end of the control connection closed.
    SrcCtlEnd,
    /// The close is due to be acknowledged by now.
    SrcCloseDeadline,
    /// Io-read thread `r` has read `work`.
    ReadDone(usize, Box<Work<SimFile>>),
    /// Io-read thread `r` looks for work.
    ReaderWake(usize),
    /// Control bytes from the source reach the sink.
    SnkFrame(Vec<u8>),
    /// The source's end of the control connection closed.
    SnkCtlEnd,
    /// The sink master takes its next frame.
    SnkMaster,
    /// A chunk arrives on data connection `i`.
    Data(usize, Box<Tx>),
    /// Data connection `i` ends.
    DataEnd(usize),
    /// Net-recv thread `i` goes on (a slot was freed, a file was announced).
    RecvWake(usize),
    /// Net-recv thread `i`'s write finished.
    WriteDone(usize),
    /// Net-recv thread `i` has waited for a file's entry until its deadline.
    EntryDeadline(usize),
    /// The sink's last data file has ended after `ManifestEnd` (`SINK_CLOSES`).
    SnkSettled,
}

impl Ev {
    /// A number per kind and the event's key, for the trace.
    fn key(&self) -> (u64, u64) {
        match self {
            Ev::SrcWake => (1, 0),
            Ev::SrcFrame(b) => (2, b.len() as u64),
            Ev::SrcCtlEnd => (3, 0),
            Ev::SrcCloseDeadline => (4, 0),
            Ev::ReadDone(r, w) => (5, mix(*r as u64, work_key(w))),
            Ev::ReaderWake(r) => (6, *r as u64),
            Ev::SnkFrame(b) => (7, b.len() as u64),
            Ev::SnkCtlEnd => (8, 0),
            Ev::SnkMaster => (9, 0),
            Ev::Data(i, tx) => (10, mix(*i as u64, tx.id)),
            Ev::DataEnd(i) => (11, *i as u64),
            Ev::RecvWake(i) => (12, *i as u64),
            Ev::WriteDone(i) => (13, *i as u64),
            Ev::EntryDeadline(i) => (14, *i as u64),
            Ev::SnkSettled => (15, 0),
        }
    }
}

fn work_key(w: &Work<SimFile>) -> u64 {
    match w {
        Work::Chunk { file, offset, .. } => mix(file.id, *offset),
        Work::Pack(files) => files.iter().fold(7, |h, f| mix(h, f.id)),
    }
}

/// How a side stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    Running,
    Finished,
    Failed(String),
    Crashed,
}

/// A file's final word at the source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Done([u8; 16]),
    Skipped,
    Failed(String),
}

/// What the run saw, for the checks and for the coverage of the seeds.
#[derive(Debug, Default, Clone)]
pub struct Log {
    /// The source's final word on each file.
    pub outcomes: BTreeMap<u64, Outcome>,
    /// Each end the sink reported per file (`FileDone`'s digest, or `FileFailed`'s text).
    pub sink_ends: BTreeMap<u64, Vec<Result<[u8; 16], String>>>,
    /// What the source scheduled of each file (the chunks the sink already held).
    pub skips: BTreeMap<u64, Option<ChunkSet>>,
    pub resumed_src: u64,
    pub resumed_snk: u64,
    pub resent: u64,
    pub acked: u64,
    pub refused: u64,
    pub sent: u64,
    pub damaged: u64,
    pub duplicated: u64,
    pub nacked: u64,
    pub received: u64,
    pub queued: u64,
    pub waited: u64,
    pub dropped: u64,
    /// Chunks whose entry did not come in time, asked for again.
    pub late: u64,
    /// Manifests the sink's master took past `ENTRY_WAIT` to apply.
    pub master_stalls: u64,
    pub disk_failures: u64,
    pub read_failures: u64,
    pub completed_held: u64,
    pub skipped_snk: u64,
    pub crashed: Option<Side>,
    /// Events the run took.
    pub steps: u64,
}

/// Everything of one run.
pub struct Sim {
    pub w: World,
    pub now: u64,
    pub q: Queue<Ev>,
    pub rng: Rng,
    pub to_sink: CtlLink,
    pub to_source: CtlLink,
    pub data: Vec<DataConn>,
    pub src: Source,
    pub snk: Sink,
    pub fs: DestFs,
    pub log: Log,
    pub steps: u64,
    pub trace: u64,
    pub verbose: bool,
    pub next_tx: u64,
}

/// Prints a line of the trace when replaying one seed.
macro_rules! say {
    ($sim:expr, $($fmt:tt)+) => {
        if $sim.verbose {
            println!("{:>12}us  {}", $sim.now, format!($($fmt)+));
        }
    };
}
pub(crate) use say;

/// The core's time for `us` µs of the run.
pub fn instant(us: u64) -> Instant {
    Instant::from_origin(Duration::from_micros(us))
}

impl Sim {
    pub fn new(w: World, verbose: bool) -> Sim {
        let rng = Rng::new(w.seed, 2 + w.round);
        let s = &w.shape;
        let data = (0..s.conns)
            .map(|i| DataConn::new(s.conn_latency[i], s.conn_ns_per_byte[i], w.chunk_bytes))
            .collect();
        Sim {
            to_sink: CtlLink::new(s.ctl_latency),
            to_source: CtlLink::new(s.ctl_latency),
            data,
            src: Source::new(&w),
            snk: Sink::new(&w),
            fs: w.dest.clone(),
            log: Log::default(),
            now: 0,
            q: Queue::new(),
            rng,
            steps: 0,
            trace: mix(w.seed, w.round),
            verbose,
            next_tx: 0,
            w,
        }
    }

    /// Runs to the end: until no event is left.
    pub fn run(&mut self) {
        say!(self, "world: {}", self.describe());
        self.q.at(0, Ev::SrcWake);
        while let Some((at, ev)) = self.q.pop() {
            assert!(at >= self.now, "time goes forward");
            self.now = at;
            self.steps += 1;
            assert!(
                self.steps <= MAX_STEPS && at <= MAX_TIME,
                "no end after {} events and {at} us (a hang): source {:?} waiting for {:?}, sink {:?}",
                self.steps,
                self.src.end,
                self.src.core.waiting_for(),
                self.snk.end
            );
            let (kind, key) = ev.key();
            self.trace = mix(mix(self.trace, at), mix(kind, key));
            if let Some((side, step)) = self.w.faults.crash {
                if step == self.steps {
                    self.crash(side);
                }
            }
            self.dispatch(ev);
            self.flush_control();
            self.check_bounds();
        }
        self.log.steps = self.steps;
        say!(
            self,
            "end: source {:?}, sink {:?}",
            self.src.end,
            self.snk.end
        );
    }

    fn dispatch(&mut self, ev: Ev) {
        match ev {
            Ev::SrcWake => self.src_wake(),
            Ev::SrcFrame(bytes) => self.src_frames(&bytes),
            Ev::SrcCtlEnd => self.src_ctl_end(),
            Ev::SrcCloseDeadline => self.src_close_deadline(),
            Ev::ReadDone(r, work) => self.read_done(r, *work),
            Ev::ReaderWake(r) => self.reader_wake(r),
            Ev::SnkFrame(bytes) => self.snk_frames(&bytes),
            Ev::SnkCtlEnd => self.snk_ctl_end(),
            Ev::SnkMaster => self.snk_master(),
            Ev::Data(i, tx) => self.data_arrives(i, tx),
            Ev::DataEnd(i) => say!(self, "data connection {i} ends"),
            Ev::RecvWake(i) => self.recv_wake(i),
            Ev::WriteDone(i) => self.write_done(i),
            Ev::EntryDeadline(i) => self.entry_deadline(i),
            Ev::SnkSettled => self.snk_settled(),
        }
    }

    /// `side` stops: its connections close, it does nothing more.
    fn crash(&mut self, side: Side) {
        match side {
            Side::Source if self.src.end == End::Running => {
                say!(self, "CRASH: the source stops");
                self.src.end = End::Crashed;
                self.log.crashed = Some(side);
                self.src_close_connections();
            }
            Side::Sink if self.snk.end == End::Running => {
                say!(self, "CRASH: the sink stops");
                self.snk.end = End::Crashed;
                self.log.crashed = Some(side);
                self.snk_close_connection();
            }
            _ => {}
        }
    }

    /// The frames each side wrote during an event go out together.
    pub fn flush_control(&mut self) {
        if let Some((at, bytes)) = self.to_sink.flush(self.now, &mut self.rng) {
            self.q.at(at, Ev::SnkFrame(bytes));
        }
        if let Some((at, bytes)) = self.to_source.flush(self.now, &mut self.rng) {
            self.q.at(at, Ev::SrcFrame(bytes));
        }
    }

    /// The bounds that hold after every event.
    fn check_bounds(&self) {
        assert!(self.src.core.in_flight() <= MAX_FILES_IN_FLIGHT);
        assert!(self.snk.table.len() <= sluice_session::sink::MAX_OPEN_FILES);
        assert!(self.snk.slots <= self.w.shape.slots, "a slot freed twice");
    }

    /// The delay of one disk operation on `bytes` bytes: usually short, sometimes a
    /// stall (a slow disk).
    pub fn disk_delay(&mut self, bytes: usize) -> u64 {
        let base = self.rng.range(2, 30) + bytes as u64 / 64;
        if self.rng.chance(self.w.faults.stall_pm) {
            base + self.rng.range(1_000, 80_000)
        } else {
            base
        }
    }

    fn describe(&self) -> String {
        let w = &self.w;
        let kinds: Vec<String> = w
            .files
            .iter()
            .map(|f| format!("{}:{:?}/{}", f.entry.file_id, f.entry.kind, f.entry.size))
            .collect();
        format!(
            "seed {}, chunk {} B, {:?}, {:?}, {:?}, files [{}]",
            w.seed,
            w.chunk_bytes,
            w.opts,
            w.faults,
            w.shape,
            kinds.join(" ")
        )
    }
}
