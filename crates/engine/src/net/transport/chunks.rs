//! Data connections: [`ChunkSender`] writes a chunk's header, segment table and payload
//! with vectored writes, or (clear text) the header then the payload straight from a
//! file's page cache; [`ChunkReceiver`] reads the header and table exactly, then the
//! payload straight into the caller's slot.

use super::{await_joined, peer_is_this_host, peer_name};
use crate::error::EngineError;
use crate::net::tls::Link;
use sluice_wire::{
    ChunkFlags, ChunkHeader, ClientJoin, Codec, DecodeError, Frame, FrameHeader, FrameType,
    Segment, CHUNK_HEADER_BYTES, FRAME_HEADER_BYTES,
};
use std::fs::File;
use std::io::{self, IoSlice, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// How long a source that sent chunks right behind its `Join` waits for `Joined`
/// once its first chunk is in the socket.
const JOINED_WAIT: Duration = crate::net::handshake::HANDSHAKE_TIMEOUT;

/// How long a failed write waits for the daemon's refusal of an unanswered `Join`,
/// which would explain the failure.
const REFUSAL_WAIT: Duration = Duration::from_secs(1);

/// The sending half of a data connection.
#[derive(Debug)]
pub struct ChunkSender {
    stream: Link,
    head: Vec<u8>,
    peer: String,
    /// A `Join` sent with no answer read yet (`CHUNKS_AFTER_JOIN`): the answer is read
    /// after the first write, which leaves a chunk queued in the socket meanwhile.
    joining: Option<ClientJoin>,
}

impl ChunkSender {
    /// Wraps a data connection.
    pub fn new(stream: Link) -> ChunkSender {
        let peer = peer_name(stream.stream());
        ChunkSender {
            stream,
            head: Vec::with_capacity(CHUNK_HEADER_BYTES + 4096),
            peer,
            joining: None,
        }
    }

    /// The same, for a connection whose `Join` was sent and not yet answered: the
    /// answer is read and checked after the first chunk or frame is written.
    pub fn joining(mut self, join: Option<ClientJoin>) -> ChunkSender {
        self.joining = join;
        self
    }

    /// The senders of a source's data connections `data`, in stream order, each with its
    /// `Join` still unanswered where `joining` holds one (`joining` may be shorter:
    /// empty where every `Joined` was read).
    pub fn for_connections(data: Vec<Link>, joining: Vec<Option<ClientJoin>>) -> Vec<ChunkSender> {
        debug_assert!(joining.len() <= data.len(), "a join per connection at most");
        let joining = joining.into_iter().chain(std::iter::repeat_with(|| None));
        data.into_iter()
            .zip(joining)
            .map(|(link, join)| ChunkSender::new(link).joining(join))
            .collect()
    }

    /// Reads and checks the answer to a `Join` still unanswered.
    fn joined(&mut self) -> Result<(), EngineError> {
        match self.joining.as_mut() {
            Some(join) => {
                await_joined(&mut self.stream, join, JOINED_WAIT)?;
                self.joining = None;
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// `e`, a failed write, or the daemon's refusal of an unanswered `Join` that
    /// explains it.
    fn write_failed(&mut self, what: &str, e: io::Error) -> EngineError {
        let written = EngineError::io(format!("{what} to {}", self.peer), e);
        match self.joining.take() {
            Some(mut join) => match await_joined(&mut self.stream, &mut join, REFUSAL_WAIT) {
                Err(refusal @ EngineError::Remote { .. }) => refusal,
                _ => written,
            },
            None => written,
        }
    }

    /// A second handle on the connection's socket, for reading its `TCP_INFO` while
    /// another thread writes (`None` where the descriptor could not be duplicated).
    pub fn probe(&self) -> Option<std::net::TcpStream> {
        self.stream.stream().try_clone().ok()
    }

    /// Whether the connection is encrypted (its chunks cannot go by `sendfile`).
    pub fn is_tls(&self) -> bool {
        self.stream.is_tls()
    }

    /// Whether the peer is this very host (loopback, or this socket's own address): the
    /// bytes then never cross a wire, only memory, copied by the same CPUs.
    pub fn peer_is_this_host(&self) -> bool {
        peer_is_this_host(self.stream.stream())
    }

    /// Sends a chunk header, its segment table and its payload with vectored writes
    /// (no copy of the payload in user space).
    ///
    /// # Errors
    /// The socket write failed.
    pub fn send(
        &mut self,
        header: &ChunkHeader,
        segments: &[Segment],
        payload: &[u8],
    ) -> Result<(), EngineError> {
        self.send_parts(header, segments, payload, &[])
    }

    /// [`Self::send`] of a payload in two parts, `payload` then `more` (a record's
    /// head in its slot, then bytes pinned in the caller's memory), in the same
    /// vectored writes: the peer sees one payload, and neither part is copied in user
    /// space.
    ///
    /// # Errors
    /// The socket write failed.
    pub fn send_parts(
        &mut self,
        header: &ChunkHeader,
        segments: &[Segment],
        payload: &[u8],
        more: &[u8],
    ) -> Result<(), EngineError> {
        self.head.clear();
        header.encode(&mut self.head);
        Segment::encode_table(segments, &mut self.head);
        let mut slices = [
            IoSlice::new(&self.head),
            IoSlice::new(payload),
            IoSlice::new(more),
        ];
        let mut bufs: &mut [IoSlice<'_>] = &mut slices;
        while !bufs.is_empty() {
            match self.stream.write_vectored(bufs) {
                Ok(0) => {
                    let e = io::Error::from(io::ErrorKind::WriteZero);
                    return Err(self.write_failed("sending a chunk", e));
                }
                Ok(n) => IoSlice::advance_slices(&mut bufs, n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.write_failed("sending a chunk", e)),
            }
        }
        self.joined()
    }

    /// Sends a chunk whose payload is the `header.wire_len` bytes of `file` at `offset`,
    /// straight from the page cache (`sendfile`: the payload is never copied into this
    /// process, and on a NIC that offloads, not by the CPU at all). The header and
    /// segment table go first with `MSG_MORE`, so they leave in the payload's first
    /// segment. The caller checksummed those bytes as it read them; should the file
    /// change meanwhile, the sink finds the checksum wrong and asks for the chunk again.
    /// A file that became shorter is padded with zeros to the length the header
    /// announced, so the stream stays framed (the sink refuses the chunk, and the
    /// source's new read reports the file shorter than scanned). Clear-text links only:
    /// TLS must encrypt the bytes in this process.
    ///
    /// # Errors
    /// The link is encrypted, or the socket write failed.
    pub fn send_file(
        &mut self,
        header: &ChunkHeader,
        segments: &[Segment],
        file: &File,
        offset: u64,
    ) -> Result<(), EngineError> {
        debug_assert!(!self.stream.is_tls(), "sendfile on a TLS link");
        if self.stream.is_tls() {
            let e = io::Error::other("a chunk from the page cache on an encrypted connection");
            return Err(EngineError::io(
                format!("sending a chunk to {}", self.peer),
                e,
            ));
        }
        self.head.clear();
        header.encode(&mut self.head);
        Segment::encode_table(segments, &mut self.head);
        let len = u64::from(header.wire_len);
        if let Err(e) = send_head_and_file(self.stream.stream(), &self.head, file, offset, len) {
            return Err(self.write_failed("sending a chunk", e));
        }
        self.joined()
    }

    /// Sends a control frame on the data connection (only `Close`).
    ///
    /// # Errors
    /// The socket write failed.
    pub fn send_frame<C: Codec>(&mut self, frame: &C) -> Result<(), EngineError> {
        self.head.clear();
        frame.encode(&mut self.head);
        if let Err(e) = self.stream.write_all(&self.head) {
            return Err(self.write_failed("sending", e));
        }
        self.joined()
    }

    /// Shuts the write half down (orderly close: `close_notify` on TLS), having read
    /// the answer to a `Join` no write ever waited for (a connection that carried
    /// nothing), so the socket is closed with nothing unread.
    pub fn shutdown(&mut self) {
        if let Err(e) = self.joined() {
            tracing::debug!("data connection to {}: {e}", self.peer);
        }
        self.stream.close();
    }
}

/// The most bytes one `sendfile` call is asked for (the kernel's own cap is
/// 0x7ffff000).
const SENDFILE_MAX: usize = 1 << 30;

/// Zeros that pad a payload whose file became shorter than its header says.
static ZEROS: [u8; 64 << 10] = [0; 64 << 10];

/// Writes `head` with `MSG_MORE`, then `len` bytes of `file` at `offset` with
/// `sendfile`, then zeros for whatever the file no longer holds.
fn send_head_and_file(
    sock: &TcpStream,
    head: &[u8],
    file: &File,
    offset: u64,
    len: u64,
) -> io::Result<()> {
    use rustix::io::Errno;
    use rustix::net::SendFlags;
    let mut sent = 0;
    while sent < head.len() {
        match rustix::net::send(sock, &head[sent..], SendFlags::MORE) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => sent += n,
            Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let (mut at, end) = (offset, offset + len);
    while at < end {
        let want = usize::try_from(end - at).map_or(SENDFILE_MAX, |n| n.min(SENDFILE_MAX));
        match rustix::fs::sendfile(sock, file, Some(&mut at), want) {
            Ok(0) => return pad(sock, end - at),
            Ok(_) => {}
            Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Writes `missing` zeros.
fn pad(mut sock: &TcpStream, mut missing: u64) -> io::Result<()> {
    tracing::debug!("a file became shorter while sent: {missing} bytes of zeros pad its chunk");
    while missing > 0 {
        let n = usize::try_from(missing).map_or(ZEROS.len(), |m| m.min(ZEROS.len()));
        sock.write_all(&ZEROS[..n])?;
        missing -= n as u64;
    }
    Ok(())
}

/// What arrived on a data connection.
#[derive(Debug)]
pub enum DataEvent {
    /// A chunk header; its segment table is in the receiver's `segments()`, and exactly
    /// `header.wire_len` payload bytes must now be read with [`ChunkReceiver::payload`].
    Chunk(ChunkHeader),
    /// Any other frame (the source's `Close`).
    Frame(Frame),
    /// The peer closed the connection between frames.
    End,
}

/// The receiving half of a data connection.
#[derive(Debug)]
pub struct ChunkReceiver {
    stream: Link,
    head: Vec<u8>,
    segments: Vec<Segment>,
    max_chunk_bytes: u32,
    permitted: ChunkFlags,
    peer: String,
}

impl ChunkReceiver {
    /// Wraps a data connection accepting chunks up to `max_chunk_bytes`, with any flags
    /// (see [`Self::permitting`]).
    pub fn new(stream: Link, max_chunk_bytes: u32) -> ChunkReceiver {
        let peer = peer_name(stream.stream());
        ChunkReceiver {
            stream,
            head: vec![0; FRAME_HEADER_BYTES],
            segments: Vec::new(),
            max_chunk_bytes,
            permitted: ChunkFlags::ANY,
            peer,
        }
    }

    /// Accepts only chunks whose flags are all in `permitted` (what the session
    /// negotiated and asked for: [`ChunkFlags::permitted`]); one with another flag is a
    /// protocol error.
    #[must_use]
    pub fn permitting(mut self, permitted: ChunkFlags) -> ChunkReceiver {
        self.permitted = permitted;
        self
    }

    /// The peer's address.
    pub fn peer(&self) -> &str {
        &self.peer
    }

    /// Another handle to the connection's socket, to stop a thread blocked reading it
    /// (`shutdown(Read)`: its read returns the end) once the session no longer needs it.
    ///
    /// # Errors
    /// The OS refused to duplicate the socket.
    pub fn stopper(&self) -> io::Result<std::net::TcpStream> {
        self.stream.stream().try_clone()
    }

    /// The segment table of the last packed chunk.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    fn read_exact(&mut self, from: usize, to: usize, what: &str) -> Result<bool, EngineError> {
        let mut filled = from;
        while filled < to {
            match self.stream.read(&mut self.head[filled..to]) {
                Ok(0) if filled == 0 => return Ok(false),
                Ok(0) => {
                    return Err(EngineError::Disconnected {
                        peer: self.peer.clone(),
                        state: format!("reading {what}"),
                    })
                }
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(EngineError::io(
                        format!("reading {what} from {}", self.peer),
                        e,
                    ))
                }
            }
        }
        Ok(true)
    }

    /// Reads the next frame header (and, for a chunk, its segment table).
    ///
    /// # Errors
    /// A socket error or a malformed frame.
    pub fn next_event(&mut self) -> Result<DataEvent, EngineError> {
        self.head.resize(FRAME_HEADER_BYTES, 0);
        if !self.read_exact(0, FRAME_HEADER_BYTES, "a frame header")? {
            return Ok(DataEvent::End);
        }
        let protocol = |peer: &str, e| EngineError::Protocol {
            peer: peer.to_string(),
            cause: e,
        };
        let (fh, _) = FrameHeader::decode(&self.head).map_err(|e| protocol(&self.peer, e))?;
        let total = fh.frame_len();
        self.head.resize(total, 0);
        self.read_exact(FRAME_HEADER_BYTES, total, "a frame body")?;
        if fh.frame_type != FrameType::Chunk {
            let (frame, _) = Frame::decode(&self.head).map_err(|e| protocol(&self.peer, e))?;
            return Ok(DataEvent::Frame(frame));
        }
        let (header, used) = ChunkHeader::decode_limited(&self.head, self.max_chunk_bytes)
            .map_err(|e| protocol(&self.peer, e))?;
        Segment::decode_table(&self.head[used..], &header, &mut self.segments)
            .map_err(|e| protocol(&self.peer, e))?;
        if !self.permitted.contains(header.flags) {
            let e = DecodeError::Inconsistent {
                field: "Chunk.flags",
                reason:
                    "a compression, shuffle or packing the session did not negotiate or ask for",
            };
            return Err(protocol(&self.peer, e));
        }
        Ok(DataEvent::Chunk(header))
    }

    /// Reads exactly `dst.len()` payload bytes straight into `dst` (a buffer slot).
    ///
    /// # Errors
    /// A socket error or an end of stream inside the payload.
    pub fn payload(&mut self, dst: &mut [u8]) -> Result<(), EngineError> {
        let peer = &self.peer;
        self.stream.read_exact(dst).map_err(|e| {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                EngineError::Disconnected {
                    peer: peer.clone(),
                    state: "reading a chunk payload".into(),
                }
            } else {
                EngineError::io(format!("reading a chunk payload from {peer}"), e)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::tcp_pair;
    use sluice_wire::{chunk_checksum, Close, CloseReason};
    use std::io::{Seek, SeekFrom};

    fn pattern(len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| u8::try_from(i * 31 % 251).expect("a byte"))
            .collect()
    }

    /// Sends chunk `header` from `file` at `offset`, then a `Close`, on one side of a
    /// loopback pair; returns what the other side read: the header, the payload and the
    /// frame behind them.
    fn send_and_receive(file: File, header: ChunkHeader, offset: u64) -> (ChunkHeader, Vec<u8>) {
        let (c, s) = tcp_pair();
        let sender = std::thread::spawn(move || {
            let mut tx = ChunkSender::new(Link::plain(c));
            tx.send_file(&header, &[], &file, offset).unwrap();
            tx.send_frame(&Close {
                reason: CloseReason::Done,
            })
            .unwrap();
        });
        let mut rx = ChunkReceiver::new(Link::plain(s), 8 << 20);
        let DataEvent::Chunk(got) = rx.next_event().unwrap() else {
            panic!("a chunk first")
        };
        let mut payload = vec![0u8; got.wire_len as usize];
        rx.payload(&mut payload).unwrap();
        match rx.next_event().unwrap() {
            DataEvent::Frame(Frame::Close(c)) => assert_eq!(c.reason, CloseReason::Done),
            other => panic!("the Close right behind the payload, got {other:?}"),
        }
        sender.join().unwrap();
        (got, payload)
    }

    #[test]
    fn a_chunk_sent_from_the_page_cache_arrives_whole_and_verifies() {
        let bytes = pattern(3 << 20);
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&bytes).unwrap();
        let (offset, len) = (1 << 20, 2 << 20);
        let part = &bytes[offset..offset + len];
        let header = ChunkHeader::plain(9, offset as u64, part, true);
        let (got, payload) = send_and_receive(f, header, offset as u64);
        assert_eq!(got, header);
        assert_eq!(payload, part);
        assert!(got.verify(&payload));
    }

    #[test]
    fn a_file_that_became_shorter_is_padded_so_the_stream_stays_framed_and_the_chunk_fails() {
        let bytes = pattern(1 << 20);
        let header = ChunkHeader::plain(4, 0, &bytes, true);
        // Checksummed whole, then cut to 600,000 bytes before it is sent.
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&bytes[..600_000]).unwrap();
        f.seek(SeekFrom::Start(0)).unwrap();
        let (got, payload) = send_and_receive(f, header, 0);
        assert_eq!(payload.len(), bytes.len());
        assert_eq!(&payload[..600_000], &bytes[..600_000]);
        assert!(payload[600_000..].iter().all(|&b| b == 0), "zeros pad it");
        assert!(!got.verify(&payload), "the sink refuses it");
        assert_ne!(chunk_checksum(&payload), header.checksum);
    }
}
