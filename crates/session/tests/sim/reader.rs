//! The source's io-read threads, as the engine runs them
//! (`crates/engine/src/source/reader.rs`, `read.rs`): each takes work from the
//! scheduler, reads it after a disk delay, frames it (a large file's piece; small files
//! back to back with their segment table; the checksum computed) and sends it on a data
//! connection, where it may be damaged or duplicated in flight. An idle reader waits to
//! be woken; once the scheduler is closed and drained, it ends.

use crate::net::Tx;
use crate::run::{say, End, Ev, Sim};
use crate::source::{Reader, SimFile};
use sluice_session::sched::Work;
use sluice_wire::{chunk_checksum, Chunk, ChunkFlags, ChunkHeader, Codec, Segment};

impl Sim {
    /// An idle reader takes the next work; none, with the scheduler closed: it ends.
    pub fn reader_wake(&mut self, r: usize) {
        self.src.woken[r] = false;
        if self.src.end != End::Running || self.src.readers[r] != Reader::Idle {
            return;
        }
        match self.src.sched.next() {
            Some(work) => {
                let reading = self.src.sched.in_flight();
                assert!(
                    reading <= self.src.readers.len() as u64,
                    "more reads than readers"
                );
                self.src.readers[r] = Reader::Busy;
                let bytes = match &work {
                    Work::Chunk { len, .. } => *len as usize,
                    Work::Pack(files) => {
                        usize::try_from(files.iter().map(|f| f.size).sum::<u64>()).expect("small")
                    }
                };
                let delay = self.disk_delay(bytes);
                self.q.at(self.now + delay, Ev::ReadDone(r, Box::new(work)));
            }
            None if self.src.sched.is_closed() => {
                self.src.readers[r] = Reader::Ended;
                self.src_progress();
            }
            None => {}
        }
    }

    /// A read finished: framed and sent; the reader is free once its socket took it.
    pub fn read_done(&mut self, r: usize, work: Work<SimFile>) {
        if self.src.end != End::Running {
            return;
        }
        if let Some(t) = work.target() {
            self.src.sched.done(t);
        }
        let Some(work) = self.read_failures(work) else {
            self.src.readers[r] = Reader::Idle;
            self.wake_readers();
            return;
        };
        let (chunk, payload) = self.frame(&work);
        let free = self.send_chunk(chunk, &payload);
        self.src.readers[r] = Reader::Idle;
        self.src.woken[r] = true;
        self.q.at(free, Ev::ReaderWake(r));
    }

    /// Files that cannot be read (the seed's faults) fail at the source
    /// (`SourceCore::on_read_failed`) and are left out: a pack goes with the others, if
    /// any (`read_pack`).
    fn read_failures(&mut self, work: Work<SimFile>) -> Option<Work<SimFile>> {
        let pm = self.w.faults.read_fail_pm;
        let work = match work {
            Work::Pack(files) => {
                let (fail, read): (Vec<_>, Vec<_>) =
                    files.into_iter().partition(|_| self.rng.chance(pm));
                for f in fail {
                    self.read_failed(f.id);
                }
                (!read.is_empty()).then_some(Work::Pack(read))
            }
            chunk => {
                let Work::Chunk { file, .. } = &chunk else {
                    unreachable!()
                };
                let id = file.id;
                if self.rng.chance(pm) {
                    self.read_failed(id);
                    None
                } else {
                    Some(chunk)
                }
            }
        };
        self.src_progress();
        work
    }

    fn read_failed(&mut self, file_id: u64) {
        say!(self, "source: cannot read file {file_id}");
        self.log.read_failures += 1;
        let message = format!("injected: cannot read file {file_id}");
        self.src.core.on_read_failed(file_id, message);
        self.src_carry_out();
    }

    /// The chunk of `work` as `read.rs` frames it: a large file's piece, or small files
    /// back to back with their segment table.
    fn frame(&self, work: &Work<SimFile>) -> (Chunk, Vec<u8>) {
        match work {
            Work::Chunk {
                file,
                index,
                offset,
                len,
                target,
            } => {
                let skip = self.log.skips.get(&file.id).and_then(Option::as_ref);
                assert!(
                    target.is_none() || !skip.is_some_and(|s| s.contains(*index)),
                    "chunk {index} of file {} read although the sink holds it",
                    file.id
                );
                let at = usize::try_from(*offset).expect("small");
                let raw = &self.w.file(file.id).data[at..at + *len as usize];
                let last = offset + u64::from(*len) >= file.size;
                let header = ChunkHeader::plain(file.id, *offset, raw, last);
                let segments = Vec::new();
                (Chunk { header, segments }, raw.to_vec())
            }
            Work::Pack(files) => {
                let mut raw = Vec::new();
                let mut segments = Vec::new();
                for f in files {
                    raw.extend_from_slice(&self.w.file(f.id).data);
                    let len = u32::try_from(f.size).expect("small");
                    segments.push(Segment { file_id: f.id, len });
                }
                let first = segments.first().expect("a pack holds a file").file_id;
                let mut header = ChunkHeader::plain(first, 0, &raw, true);
                header.flags.set(ChunkFlags::PACKED, true);
                header.segments = u16::try_from(segments.len()).expect("small");
                header.checksum = chunk_checksum(&raw);
                (Chunk { header, segments }, raw)
            }
        }
    }

    /// Puts a chunk on a data connection (damaged in flight at random, sometimes sent
    /// twice); returns when the sender's socket is free again.
    fn send_chunk(&mut self, chunk: Chunk, payload: &[u8]) -> u64 {
        let conn = self.rng.index(self.data.len());
        let mut bytes = Vec::with_capacity(64 + payload.len());
        chunk.encode(&mut bytes);
        let head = bytes.len();
        bytes.extend_from_slice(payload);
        let twice = self.rng.chance(self.w.faults.dup_pm);
        let clean = twice.then(|| bytes.clone());
        let damaged = self.rng.chance(self.w.faults.corrupt_pm);
        if damaged {
            let at = head + self.rng.index(payload.len());
            bytes[at] ^= 1 << self.rng.below(8);
            self.log.damaged += 1;
        }
        say!(
            self,
            "send {:?} file {} at {} ({} B) on {conn}{}",
            chunk.segments.iter().map(|s| s.file_id).collect::<Vec<_>>(),
            chunk.header.file_id,
            chunk.header.offset,
            payload.len(),
            if damaged { ", DAMAGED" } else { "" }
        );
        self.log.sent += 1;
        let free = self.transmit(conn, bytes, &chunk, payload.len(), damaged);
        if let Some(clean) = clean {
            let again = self.rng.index(self.data.len());
            say!(self, "  and DUPLICATED on {again}");
            self.log.duplicated += 1;
            self.transmit(again, clean, &chunk, payload.len(), false);
        }
        free
    }

    fn transmit(
        &mut self,
        conn: usize,
        bytes: Vec<u8>,
        chunk: &Chunk,
        len: usize,
        damaged: bool,
    ) -> u64 {
        assert!(!self.data[conn].closed, "a chunk sent after the close");
        let (free, at) = self.data[conn].transmit(self.now, bytes.len());
        self.next_tx += 1;
        let tx = Tx {
            id: self.next_tx,
            bytes,
            sent: chunk.clone(),
            payload: len,
            damaged,
        };
        self.q.at(at, Ev::Data(conn, Box::new(tx)));
        free
    }
}
