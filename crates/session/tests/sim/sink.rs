//! The sink's master, driven as the engine's shell drives it
//! (`crates/engine/src/sink/master.rs`, `complete.rs`): control frames into a `Master`,
//! one at a time; each manifest entry's destination facts looked up in the simulated
//! file system; its actions carried out (directories, links, empty files, the file table,
//! resumed partials, completions) and its frames sent.

use crate::fs::Head;
use crate::net::Tx;
use crate::recv::{Pending, Recv};
use crate::run::{say, End, Ev, Sim};
use crate::source::brief;
use crate::world::World;
use sluice_session::sink::{
    ended_frame, Action, ChunkAccount, DestFacts, FileChunks, FileError, FileTable, Flow,
    Forgotten, Master, Options, PartialFacts, Probe, ENTRY_WAIT,
};
use sluice_wire::{FileEntry, Frame};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

/// A data file being received (the engine's `Entry`, shared by the table and its writer).
pub struct Entry {
    pub entry: FileEntry,
    pub chunks: FileChunks<Pending>,
    /// The open partial (which creation of it), once a writer opened it or resume did.
    pub partial: Option<u64>,
}

pub type Shared = Rc<RefCell<Entry>>;

/// The sink side's state.
pub struct Sink {
    pub master: Master,
    pub table: FileTable<Shared>,
    /// Control frames waiting for the master.
    inbox: VecDeque<Frame>,
    /// A `SnkMaster` event is scheduled.
    busy: bool,
    /// The frame at the head of the inbox has stalled the master once already.
    stalled: bool,
    /// The net-recv threads, one per data connection, and what waits on each socket.
    pub recv: Vec<Recv>,
    pub inboxes: Vec<VecDeque<Box<Tx>>>,
    pub recv_woken: Vec<bool>,
    /// Buffer slots free.
    pub slots: usize,
    /// `Action::Stop` (or a failure): the receiving threads take nothing more.
    pub stopped: bool,
    /// Data files put in the table whose final word is not yet sent (the engine's
    /// `Settle`).
    unsettled: usize,
    pub end: End,
    frames: Vec<Frame>,
    pub payload: Vec<u8>,
}

/// The entry being announced, and what its actions left (the engine's `Announcing`).
struct Announcing {
    entry: FileEntry,
    /// The partial opened for resume, until kept or discarded.
    opened: Option<u64>,
    /// The data file just put in the table.
    received: Option<Shared>,
}

impl Sink {
    pub fn new(w: &World) -> Sink {
        let o = w.opts;
        let n = w.shape.conns;
        Sink {
            master: Master::new(Options {
                resume: o.resume,
                update: o.update,
                no_clobber: o.no_clobber,
                chunk_bytes: w.chunk_bytes,
                sink_closes: o.sink_closes,
            }),
            table: FileTable::default(),
            inbox: VecDeque::new(),
            busy: false,
            stalled: false,
            recv: (0..n).map(|_| Recv::Idle).collect(),
            inboxes: (0..n).map(|_| VecDeque::new()).collect(),
            recv_woken: vec![false; n],
            slots: w.shape.slots,
            stopped: false,
            unsettled: 0,
            end: End::Running,
            frames: Vec::new(),
            payload: Vec::new(),
        }
    }
}

impl Sim {
    /// Frames from the source wait for the master.
    pub fn snk_frames(&mut self, bytes: &[u8]) {
        if self.snk.end != End::Running {
            return;
        }
        let mut frames = std::mem::take(&mut self.snk.frames);
        self.to_sink.receive(bytes, &mut frames);
        self.snk.inbox.extend(frames.drain(..));
        self.snk.frames = frames;
        if !self.snk.busy {
            self.snk.busy = true;
            self.q.at(self.now, Ev::SnkMaster);
        }
    }

    /// The master takes one frame; it is busy a while for each entry it applies.
    pub fn snk_master(&mut self) {
        self.snk.busy = false;
        if self.snk.end != End::Running {
            return;
        }
        let Some(frame) = self.snk.inbox.pop_front() else {
            return;
        };
        if self.master_stalls(&frame) {
            self.snk.inbox.push_front(frame);
            return;
        }
        say!(self, "sink <- {}", brief(&frame));
        let mut cost = 1;
        match self.snk.master.on_frame(frame) {
            Err(e) => self.snk_fail(format!("the source's error {e:?}")),
            Ok(Flow::Continue) => {
                self.snk_drain(None);
                self.snk_check_settled();
            }
            Ok(Flow::Announce(entries)) => {
                for entry in &entries {
                    if self.snk.end != End::Running {
                        break;
                    }
                    self.snk_announce(entry);
                    cost += self.rng.range(1, 10);
                }
            }
            Ok(Flow::Closed) => {
                self.snk_drain(None);
                say!(self, "sink: closed");
                self.snk.end = End::Finished;
                self.snk_close_connection();
            }
        }
        if self.snk.end == End::Running && !self.snk.inbox.is_empty() {
            self.snk.busy = true;
            self.q.at(self.now + cost, Ev::SnkMaster);
        }
    }

    /// Whether the master stalls before applying `frame` (a manifest, at most once):
    /// it takes it up again once `ENTRY_WAIT` has passed, so chunks of its files that
    /// arrived meanwhile are late.
    fn master_stalls(&mut self, frame: &Frame) -> bool {
        let stall = matches!(frame, Frame::Manifest(_))
            && !self.snk.stalled
            && self.rng.chance(self.w.faults.master_stall_pm);
        self.snk.stalled = stall;
        if stall {
            say!(self, "sink: the master stalls past the entry wait");
            self.log.master_stalls += 1;
            self.snk.busy = true;
            let wait = u64::try_from(ENTRY_WAIT.as_micros()).expect("small");
            self.q.at(self.now + wait + 1_000_000, Ev::SnkMaster);
        }
        stall
    }

    /// The source closed the control connection.
    pub fn snk_ctl_end(&mut self) {
        if self.snk.end == End::Running {
            self.snk_fail("the source disconnected while receiving files".into());
        }
    }

    /// The session failed here: the receiving threads stop, the control closes.
    fn snk_fail(&mut self, why: String) {
        say!(self, "sink: FAILED: {why}");
        self.snk.end = End::Failed(why);
        self.snk_stop();
        self.snk_close_connection();
    }

    pub fn snk_close_connection(&mut self) {
        self.flush_control();
        if let Some(at) = self.to_source.close(self.now, &mut self.rng) {
            self.q.at(at, Ev::SrcCtlEnd);
        }
    }

    /// The engine's `announce`: the facts the core asks for, its decision, its actions.
    fn snk_announce(&mut self, entry: &FileEntry) {
        let path = entry.path.as_str();
        let mut facts = DestFacts::default();
        let mut opened = None;
        while let Some(p) = self.snk.master.probe(entry, &facts) {
            match p {
                Probe::Exists => facts.exists = Some(self.fs.exists(path)),
                Probe::SameSizeAndMtime => {
                    let same = self
                        .fs
                        .same_size_and_mtime(path, entry.size, entry.mtime_ns);
                    facts.same_size_and_mtime = Some(same);
                }
                Probe::WholeDigest => {
                    let d = self.fs.whole_digest(path, entry.size, self.w.chunk_bytes);
                    facts.whole_digest = Some(d);
                }
                Probe::Partial => facts.partial = Some(self.open_partial(entry, &mut opened)),
            }
        }
        say!(self, "announce {path}: {facts:?}");
        self.snk
            .master
            .announce(entry, Some(entry.path.clone()), facts);
        let mut at = Announcing {
            entry: entry.clone(),
            opened,
            received: None,
        };
        self.snk_drain(Some(&mut at));
        assert!(
            at.opened.is_none(),
            "{path}: a partial opened for resume was neither kept nor discarded"
        );
    }

    /// `open_partial`: the chunks of the partial that still verify.
    fn open_partial(&mut self, entry: &FileEntry, opened: &mut Option<u64>) -> PartialFacts {
        let path = entry.path.as_str();
        if !self.fs.has_partial(path) {
            return PartialFacts::Absent;
        }
        let head = self.head(entry);
        match self.fs.open_resume(path, head, self.w.opts.no_clobber) {
            Ok((gen, held)) => {
                *opened = Some(gen);
                PartialFacts::Held(held)
            }
            Err(e) => PartialFacts::Failed(e),
        }
    }

    pub fn head(&self, entry: &FileEntry) -> Head {
        Head {
            size: entry.size,
            mtime: entry.mtime_ns,
            chunk_bytes: self.w.chunk_bytes,
        }
    }

    /// Carries out the master's actions; `at`: those of the entry being announced.
    fn snk_drain(&mut self, mut at: Option<&mut Announcing>) {
        while let Some(action) = self.snk.master.poll_action() {
            match action {
                Action::Send(frame) => self.send_to_source(frame),
                Action::Forget { file_id, .. } => self.forget(file_id),
                Action::Stop => self.snk_stop(),
                Action::FinishDir {
                    dest,
                    mode,
                    mtime_ns,
                } => self.fs.finish_dir(dest.as_str(), mode, mtime_ns),
                Action::Ignored(t) => panic!("the source sent the sink a {t:?}"),
                entry_action => {
                    let at = at
                        .as_deref_mut()
                        .expect("an entry's action inside its announce");
                    self.snk_apply(at, entry_action);
                }
            }
        }
    }

    /// The engine's `apply`: an action about the entry being announced.
    fn snk_apply(&mut self, at: &mut Announcing, action: Action) {
        let refuse = self.w.opts.no_clobber;
        let e = at.entry.clone();
        match action {
            Action::MakeDir { dest, mode, .. } => {
                let made = self.fs.make_dir(dest.as_str(), mode, e.mtime_ns);
                self.snk.master.made(&e, dest, made);
            }
            Action::MakeSymlink {
                dest,
                target,
                mtime_ns,
                ..
            } => {
                let made = self
                    .fs
                    .make_symlink(dest.as_str(), &target, mtime_ns, refuse);
                self.snk.master.made(&e, dest, made);
            }
            Action::WriteEmpty {
                dest,
                mode,
                mtime_ns,
                ..
            } => {
                let made = self
                    .fs
                    .write_small(dest.as_str(), &[], mode, mtime_ns, refuse);
                self.snk.master.made(&e, dest, made);
            }
            Action::Receive {
                file_id,
                dest,
                account,
                resumed,
            } => {
                assert_eq!(dest, e.path);
                self.snk_receive(at, file_id, account, resumed);
            }
            Action::DiscardPartial { .. } => {
                if at.opened.take().is_some() {
                    self.fs.discard(e.path.as_str());
                }
            }
            Action::Complete { .. } => self.complete_held(at),
            Action::Skipped { .. } => self.log.skipped_snk += 1,
            Action::Resumed { bytes, .. } => self.log.resumed_snk += bytes,
            Action::Ended { result, .. } => self.finish_entry(&e, result),
            Action::Announced { file_id } => {
                self.snk.table.announced(file_id);
                self.wake_waiting();
            }
            other => panic!("{other:?} inside an announce"),
        }
    }

    /// `receive`: a data file into the table (with the partial opened for it when
    /// `resumed`).
    fn snk_receive(&mut self, at: &mut Announcing, id: u64, account: ChunkAccount, resumed: bool) {
        let partial = if resumed {
            Some(
                at.opened
                    .take()
                    .expect("a resumed file has its partial open"),
            )
        } else {
            None
        };
        let shared = Rc::new(RefCell::new(Entry {
            entry: at.entry.clone(),
            chunks: FileChunks::new(account),
            partial,
        }));
        at.received = Some(Rc::clone(&shared));
        match self.snk.table.insert(id, shared) {
            Ok(()) => self.snk.unsettled += 1,
            Err(err) => self.snk_fail(err.to_string()),
        }
    }

    /// `complete_now`: the partial already holds every chunk; no data will come.
    fn complete_held(&mut self, at: &mut Announcing) {
        let shared = at.received.take().expect("completed after its Receive");
        let digest = shared.borrow_mut().chunks.finish();
        let digest = digest.expect("a partial holding every chunk has its digest");
        let handle = shared.borrow_mut().partial.take();
        self.log.completed_held += 1;
        self.complete(&shared, handle, digest);
    }

    /// `complete`: every chunk is in; the partial renamed into place, the end reported.
    pub fn complete(&mut self, shared: &Shared, handle: Option<u64>, digest: [u8; 16]) {
        let e = shared.borrow().entry.clone();
        let path = e.path.as_str();
        let result = match handle {
            None => Err(FileError::new(
                sluice_wire::ErrorCode::Internal,
                "internal: file handle missing",
            )),
            Some(gen) => {
                let refuse = self.w.opts.no_clobber;
                self.fs.finish(path, gen, e.mode, e.mtime_ns, refuse)
            }
        };
        if result.is_ok() {
            let f = self.w.file(e.file_id);
            let node = self.fs.nodes.get(path);
            assert!(
                matches!(node, Some(crate::fs::Node::File { data, .. }) if *data == f.data),
                "{path}: a file renamed into place does not hold the source's bytes"
            );
            assert_eq!(
                digest,
                f.digest(),
                "{path}: the digest of the chunks written"
            );
        }
        say!(self, "complete {path}: {result:?}");
        self.finish_entry(&e, result.map(|()| digest));
    }

    /// `finish_entry`: out of the table, its end reported to the source.
    pub fn finish_entry(&mut self, entry: &FileEntry, result: Result<[u8; 16], FileError>) {
        let file_id = entry.file_id;
        let was_in = self.snk.table.remove(file_id).is_some();
        let frame = ended_frame(file_id, &result, str::to_string);
        self.send_to_source(frame);
        let end = result.map_err(|e| e.message);
        self.log.sink_ends.entry(file_id).or_default().push(end);
        if was_in {
            self.snk.unsettled -= 1;
            self.snk_check_settled();
        }
    }

    /// After a data file's final word, or a frame: with none in flight once the
    /// manifest ended, the master is told (an event of its own, as the engine's
    /// writer signals the master thread).
    fn snk_check_settled(&mut self) {
        if self.w.opts.sink_closes
            && self.snk.unsettled == 0
            && self.snk.master.manifest_ended()
            && self.snk.end == End::Running
        {
            self.q.at(self.now, Ev::SnkSettled);
        }
    }

    /// The master learns that nothing is in flight: it closes the session itself.
    pub fn snk_settled(&mut self) {
        if self.snk.end != End::Running || self.snk.unsettled != 0 {
            return;
        }
        if self.snk.master.settled() {
            self.snk_drain(None);
            say!(self, "sink: settled; closed");
            self.snk.end = End::Finished;
            self.snk_close_connection();
        }
    }

    /// The source could not read the file: forgotten (its partial stays for resume).
    fn forget(&mut self, file_id: u64) {
        if let Forgotten::Entry(shared) = self.snk.table.forget(file_id) {
            self.snk.unsettled -= 1;
            let mut e = shared.borrow_mut();
            e.chunks.end();
            e.partial = None;
        }
    }

    /// `Action::Stop` or a failure: the receiving threads finish what they hold and take
    /// nothing more; chunks waiting for an entry give up.
    fn snk_stop(&mut self) {
        self.snk.stopped = true;
        for i in 0..self.snk.recv.len() {
            self.snk.inboxes[i].clear();
        }
        self.wake_waiting();
    }

    pub fn send_to_source(&mut self, frame: Frame) {
        say!(self, "sink -> {}", brief(&frame));
        self.to_source.send(frame);
    }
}
