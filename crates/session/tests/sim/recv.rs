//! The sink's net-recv threads, one per data connection, as the engine's inline pipeline
//! runs them (`crates/engine/src/sink/recv.rs`, `write.rs`): a thread takes a buffer
//! slot, reads the next chunk off its socket and verifies it (a damaged one is asked for
//! again and never written); a packed chunk's files are written whole, one after the
//! other; a piece of a large file is offered to its file's `FileChunks`, and the thread
//! that becomes the file's writer writes it, and every chunk other threads leave with
//! it meanwhile (flat combining), while they go back to their sockets. A chunk that
//! overtook its file's manifest entry waits for it, up to the `ENTRY_WAIT` deadline.

use crate::net::Tx;
use crate::run::{instant, say, End, Ev, Sim};
use crate::sink::Shared;
use sluice_session::sink::{ack, nack, nacks, FileError, Lookup, Next, Offer, ENTRY_WAIT};
use sluice_wire::{chunk_checksum, ChunkHeader, ErrorCode, FileDigest, Frame, Segment};

/// A verified chunk of a large file, waiting for (or with) its writer.
#[derive(Debug)]
pub struct Pending {
    pub header: ChunkHeader,
    pub data: Vec<u8>,
}

/// What a net-recv thread holds.
pub enum Job {
    /// A packed chunk: its files written whole, one after the other.
    Packed {
        header: ChunkHeader,
        segs: Vec<Segment>,
        data: Vec<u8>,
        /// The segment at hand, and where its bytes start.
        seg: usize,
        at: usize,
        /// Until when the segment's file may be waited for.
        deadline: Option<u64>,
        found: Option<Shared>,
    },
    /// A piece of a large file looking for its file.
    Lookup { chunk: Pending, deadline: u64 },
    /// The thread is the writer of `entry` (whose partial is creation `gen`), writing
    /// `chunk`.
    Write {
        entry: Shared,
        chunk: Pending,
        gen: u64,
    },
}

/// A net-recv thread.
pub enum Recv {
    /// Reading its socket (or nothing there).
    Idle,
    /// Waiting for a file's manifest entry.
    Waiting(Job),
    /// A write in progress: `WriteDone` goes on.
    Writing(Job),
}

/// Where a chunk's file stands.
enum Look {
    Found(Shared),
    Gone,
    Late,
    Wait,
}

fn entry_wait_us() -> u64 {
    u64::try_from(ENTRY_WAIT.as_micros()).expect("small")
}

impl Sim {
    /// A chunk reaches the sink end of connection `i`.
    pub fn data_arrives(&mut self, i: usize, tx: Box<Tx>) {
        if self.snk.end == End::Crashed || self.snk.stopped {
            return;
        }
        self.snk.inboxes[i].push_back(tx);
        self.recv_take(i);
    }

    /// Thread `i` goes on: a chunk waiting for its entry looks again, then the socket.
    pub fn recv_wake(&mut self, i: usize) {
        self.snk.recv_woken[i] = false;
        if self.snk.end == End::Crashed {
            return;
        }
        self.resume_waiting(i);
        self.recv_take(i);
    }

    pub fn entry_deadline(&mut self, i: usize) {
        if self.snk.end == End::Crashed {
            return;
        }
        self.resume_waiting(i);
        self.recv_take(i);
    }

    /// Thread `i`'s write finished: the next step of what it holds, then its socket.
    pub fn write_done(&mut self, i: usize) {
        if self.snk.end == End::Crashed {
            return;
        }
        let Recv::Writing(job) = std::mem::replace(&mut self.snk.recv[i], Recv::Idle) else {
            panic!("a write finished that was not started");
        };
        match job {
            Job::Packed { .. } => self.packed_written(i, job),
            Job::Write { entry, chunk, gen } => self.large_write_done(i, entry, chunk, gen),
            Job::Lookup { .. } => unreachable!("a lookup writes nothing"),
        }
        self.recv_take(i);
    }

    fn resume_waiting(&mut self, i: usize) {
        if !matches!(self.snk.recv[i], Recv::Waiting(_)) {
            return;
        }
        let Recv::Waiting(job) = std::mem::replace(&mut self.snk.recv[i], Recv::Idle) else {
            unreachable!()
        };
        match job {
            Job::Packed { .. } => self.packed_step(i, job),
            Job::Lookup { chunk, deadline } => self.large_lookup(i, chunk, deadline),
            Job::Write { .. } => unreachable!("a writer does not wait"),
        }
    }

    /// While idle (and not stopped), with a slot free: the next chunk off the socket.
    fn recv_take(&mut self, i: usize) {
        while matches!(self.snk.recv[i], Recv::Idle) && !self.snk.stopped && self.snk.slots > 0 {
            let Some(tx) = self.snk.inboxes[i].pop_front() else {
                return;
            };
            self.snk.slots -= 1;
            self.recv_chunk(i, &tx);
        }
    }

    /// `receive` + `accept_chunk`: decoded, verified, then written or asked for again.
    fn recv_chunk(&mut self, i: usize, tx: &Tx) {
        let mut payload = std::mem::take(&mut self.snk.payload);
        let chunk = self.data[i].receive(tx, &mut payload);
        self.log.received += 1;
        let ok = chunk.header.verify(&payload);
        assert_eq!(
            ok, !tx.damaged,
            "verification tells exactly the damaged chunks"
        );
        let header = chunk.header;
        if !ok {
            say!(
                self,
                "recv {i}: file {} at {} DAMAGED: nack",
                header.file_id,
                header.offset
            );
            self.log.nacked += 1;
            let frames: Vec<Frame> = nacks(&header, &chunk.segments).collect();
            for f in frames {
                self.send_to_source(f);
            }
            self.snk.payload = payload;
            self.release_slot();
            return;
        }
        say!(
            self,
            "recv {i}: file {} at {} ({} B)",
            header.file_id,
            header.offset,
            payload.len()
        );
        if header.is_packed() {
            let job = Job::Packed {
                header,
                segs: chunk.segments,
                data: payload,
                seg: 0,
                at: 0,
                deadline: None,
                found: None,
            };
            self.packed_step(i, job);
        } else {
            let deadline = self.now + entry_wait_us();
            let chunk = Pending {
                header,
                data: payload,
            };
            self.large_lookup(i, chunk, deadline);
        }
    }

    /// `FileTable::wait` once: found, gone (dropped), or wait (`Gone` once stopped).
    fn look(&self, file_id: u64, deadline: u64) -> Look {
        match self
            .snk
            .table
            .lookup(file_id, instant(self.now), instant(deadline))
        {
            Lookup::Found(e) => Look::Found(e.clone()),
            Lookup::Gone => Look::Gone,
            Lookup::Late => Look::Late,
            Lookup::Wait if self.snk.stopped => Look::Gone,
            Lookup::Wait => Look::Wait,
        }
    }

    /// `write_packed`: the next file of the pack whose entry is there is written; at the
    /// end the chunk is acknowledged.
    fn packed_step(&mut self, i: usize, mut job: Job) {
        let Job::Packed {
            header,
            segs,
            seg,
            at,
            deadline,
            found,
            ..
        } = &mut job
        else {
            unreachable!()
        };
        loop {
            let Some(s) = segs.get(*seg).copied() else {
                let h = *header;
                self.delivered(&h);
                return;
            };
            let until = *deadline.get_or_insert(self.now + entry_wait_us());
            match self.look(s.file_id, until) {
                Look::Found(e) => {
                    *found = Some(e);
                    let delay = self.disk_delay(s.len as usize);
                    self.snk.recv[i] = Recv::Writing(job);
                    self.q.at(self.now + delay, Ev::WriteDone(i));
                    return;
                }
                Look::Wait => {
                    self.log.waited += 1;
                    self.snk.recv[i] = Recv::Waiting(job);
                    self.q.at(until, Ev::EntryDeadline(i));
                    return;
                }
                // Not written: its file ended (dropped), or its entry did not come in
                // time (asked for again); the pack goes on with its next file.
                look @ (Look::Gone | Look::Late) => {
                    if matches!(look, Look::Late) {
                        self.ask_again(s.file_id, 0);
                    } else {
                        self.log.dropped += 1;
                    }
                    *at += s.len as usize;
                    *seg += 1;
                    *deadline = None;
                }
            }
        }
    }

    /// One small file of a pack written whole (`write_small_file`) and ended.
    fn packed_written(&mut self, i: usize, mut job: Job) {
        let Job::Packed {
            segs,
            data,
            seg,
            at,
            deadline,
            found,
            ..
        } = &mut job
        else {
            unreachable!()
        };
        let s = segs[*seg];
        let shared = found.take().expect("the segment's file was found");
        let bytes = data[*at..*at + s.len as usize].to_vec();
        *at += s.len as usize;
        *seg += 1;
        *deadline = None;
        let entry = shared.borrow().entry.clone();
        let path = entry.path.as_str();
        let result = match self.disk_failure() {
            Some(err) => Err(err),
            None => {
                let refuse = self.w.opts.no_clobber;
                let (mode, mtime) = (entry.mode, entry.mtime_ns);
                self.fs.write_small(path, &bytes, mode, mtime, refuse)
            }
        };
        if result.is_ok() {
            assert_eq!(
                bytes,
                self.w.file(entry.file_id).data,
                "{path}: written whole"
            );
        }
        say!(self, "recv {i}: wrote {path} whole: {result:?}");
        let digest = FileDigest::of_ordered(&[chunk_checksum(&bytes)]);
        self.finish_entry(&entry, result.map(|()| digest));
        self.packed_step(i, job);
    }

    /// A piece of a large file finds its file (or waits for it, or is dropped).
    fn large_lookup(&mut self, i: usize, chunk: Pending, deadline: u64) {
        match self.look(chunk.header.file_id, deadline) {
            Look::Gone => {
                self.log.dropped += 1;
                self.delivered(&chunk.header);
            }
            Look::Late => {
                self.ask_again(chunk.header.file_id, chunk.header.offset);
                self.release_slot();
            }
            Look::Wait => {
                self.log.waited += 1;
                self.snk.recv[i] = Recv::Waiting(Job::Lookup { chunk, deadline });
                self.q.at(deadline, Ev::EntryDeadline(i));
            }
            Look::Found(e) => self.offer(i, e, chunk),
        }
    }

    /// `become_writer`: this thread writes the chunk (its file's partial opened if it is
    /// not yet), or leaves it with the writer there is, or drops it (the file ended).
    fn offer(&mut self, i: usize, shared: Shared, chunk: Pending) {
        let offered = shared.borrow_mut().chunks.offer(chunk);
        let chunk = match offered {
            Offer::Queued => {
                self.log.queued += 1;
                return;
            }
            Offer::Ended(c) => return self.delivered(&c.header),
            Offer::Write(c) => c,
        };
        let open = shared.borrow().partial;
        let gen = match open {
            Some(gen) => gen,
            None => {
                let entry = shared.borrow().entry.clone();
                let head = self.head(&entry);
                let refuse = self.w.opts.no_clobber;
                match self.fs.open_fresh(entry.path.as_str(), head, refuse) {
                    Ok(gen) => {
                        shared.borrow_mut().partial = Some(gen);
                        gen
                    }
                    Err(err) => return self.write_failed(&shared, err, chunk),
                }
            }
        };
        self.large_write(i, shared, chunk, gen);
    }

    /// The writer writes `chunk` unless its file holds it already.
    fn large_write(&mut self, i: usize, entry: Shared, chunk: Pending, gen: u64) {
        let index = chunk.header.offset / u64::from(self.w.chunk_bytes);
        if entry.borrow().chunks.is_held(index) {
            return self.large_written(i, entry, chunk, gen);
        }
        let delay = self.disk_delay(chunk.data.len());
        self.snk.recv[i] = Recv::Writing(Job::Write { entry, chunk, gen });
        self.q.at(self.now + delay, Ev::WriteDone(i));
    }

    /// The bytes reached the partial (`write_at`, `record_chunk`), or the disk failed.
    fn large_write_done(&mut self, i: usize, shared: Shared, chunk: Pending, gen: u64) {
        if let Some(err) = self.disk_failure() {
            return self.write_failed(&shared, err, chunk);
        }
        let entry = shared.borrow().entry.clone();
        let (offset, len) = (chunk.header.offset, chunk.data.len());
        let at = usize::try_from(offset).expect("small");
        let truth = &self.w.file(entry.file_id).data;
        assert!(
            truth.get(at..at + len) == Some(&chunk.data[..]),
            "{}: the bytes written at {offset} are not the source's",
            entry.path.as_str()
        );
        let sum = chunk.header.checksum;
        self.fs
            .write_at(entry.path.as_str(), gen, offset, &chunk.data, sum);
        self.large_written(i, shared, chunk, gen);
    }

    /// `FileChunks::written`: the next chunk left with this writer, or idle, or the
    /// file's end (complete: renamed into place).
    fn large_written(&mut self, i: usize, shared: Shared, chunk: Pending, gen: u64) {
        let index = chunk.header.offset / u64::from(self.w.chunk_bytes);
        self.delivered(&chunk.header);
        let next = shared
            .borrow_mut()
            .chunks
            .written(index, chunk.header.checksum);
        match next {
            Next::Write(c) => self.large_write(i, shared, c, gen),
            Next::Idle => {}
            Next::Ended { dropped } => {
                for c in dropped {
                    self.delivered(&c.header);
                }
            }
            Next::Complete { digest, dropped } => {
                let handle = shared.borrow_mut().partial.take();
                self.complete(&shared, handle, digest);
                for c in dropped {
                    self.delivered(&c.header);
                }
            }
        }
    }

    /// `write_failed`: the file ends (its partial kept for resume), reported once; the
    /// chunk and those left with this writer are dropped.
    fn write_failed(&mut self, shared: &Shared, err: FileError, chunk: Pending) {
        let (first, dropped) = {
            let mut e = shared.borrow_mut();
            e.partial = None;
            e.chunks.write_failed()
        };
        if first {
            let entry = shared.borrow().entry.clone();
            self.finish_entry(&entry, Err(err));
        }
        self.delivered(&chunk.header);
        for c in dropped {
            self.delivered(&c.header);
        }
    }

    /// A disk write that fails (the seed's faults), or none.
    fn disk_failure(&mut self) -> Option<FileError> {
        if !self.rng.chance(self.w.faults.disk_fail_pm) {
            return None;
        }
        self.log.disk_failures += 1;
        let code = self.rng.pick(&[ErrorCode::NoSpace, ErrorCode::Io]);
        Some(FileError::new(code, "injected: the disk refused a write"))
    }

    /// A chunk is done with (written, or dropped): acknowledged where the session asks,
    /// its slot freed.
    /// The engine's `ask_again`: a chunk whose entry did not come in time is asked for
    /// again, never dropped.
    fn ask_again(&mut self, file_id: u64, offset: u64) {
        say!(
            self,
            "recv: file {file_id} at {offset}: no entry in time: nack"
        );
        self.log.late += 1;
        self.send_to_source(nack(file_id, offset));
    }

    fn delivered(&mut self, header: &ChunkHeader) {
        if let Some(frame) = ack(self.w.opts.chunk_acks, header) {
            self.send_to_source(frame);
        }
        self.release_slot();
    }

    fn release_slot(&mut self) {
        self.snk.slots += 1;
        assert!(self.snk.slots <= self.w.shape.slots, "a slot freed twice");
        for j in 0..self.snk.recv.len() {
            if matches!(self.snk.recv[j], Recv::Idle) && !self.snk.inboxes[j].is_empty() {
                self.wake_recv(j);
            }
        }
    }

    fn wake_recv(&mut self, j: usize) {
        if !self.snk.recv_woken[j] {
            self.snk.recv_woken[j] = true;
            self.q.at(self.now, Ev::RecvWake(j));
        }
    }

    /// Threads whose chunk waits for its entry look again (an entry was announced, or the
    /// session stopped).
    pub fn wake_waiting(&mut self) {
        for j in 0..self.snk.recv.len() {
            if matches!(self.snk.recv[j], Recv::Waiting(_)) {
                self.wake_recv(j);
            }
        }
    }
}
