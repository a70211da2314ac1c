//! Frames over TCP: reading and writing `sluice-wire` frames and chunks on sockets.
//!
//! Control connections carry small frames and go through a [`FrameDecoder`]. Data
//! connections carry chunks: the 42-byte header and segment table are read exactly, then
//! the payload is read straight into a NUMA-local buffer slot, so a chunk's bytes are
//! copied once, by the kernel (on a clear link; a TLS [`Link`] decrypts into the slot).

mod chunks;

pub use chunks::{ChunkReceiver, ChunkSender, DataEvent};

use super::tls::Link;
use crate::error::EngineError;
use sluice_wire::{ClientJoin, Codec, Frame, FrameDecoder, FrameHeader, FRAME_HEADER_BYTES};
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Configures a freshly connected or accepted socket: no Nagle delay. A data
/// connection's buffers and congestion control are set by [`super::tuning`] once the
/// session knows its path (an explicit size here would stop the kernel's autotuning).
pub fn tune(stream: &TcpStream, data: bool) -> io::Result<()> {
    let _ = data;
    stream.set_nodelay(true)
}

/// Whether `stream`'s peer is this very host (loopback, or the socket's own address).
pub fn peer_is_this_host(stream: &TcpStream) -> bool {
    match (stream.peer_addr(), stream.local_addr()) {
        (Ok(peer), Ok(local)) => peer.ip().is_loopback() || peer.ip() == local.ip(),
        _ => false,
    }
}

/// The peer's address as text, for messages.
pub fn peer_name(stream: &TcpStream) -> String {
    stream
        .peer_addr()
        .map_or_else(|_| "peer".to_string(), |a| a.to_string())
}

/// Reads exactly one frame and not a byte more: the answer to a data connection's
/// `Join`, after which the daemon may at once send chunks on it (a [`FrameReader`] could
/// read them into its buffer, where they would be lost). `Ok(None)`: the peer closed.
///
/// # Errors
/// A socket error (a timeout included), a malformed frame, or a close inside the frame.
pub fn read_one_frame(stream: &mut Link, state: &str) -> Result<Option<Frame>, EngineError> {
    read_frame_within(stream, state, usize::MAX)
}

/// The longest first frame of a connection: a `Hello` (a `Join` is shorter). A header
/// announcing more is refused before its body is read, so an unauthenticated
/// connection costs no buffer beyond this.
const FIRST_FRAME_BYTES: usize = FRAME_HEADER_BYTES + 256;

/// [`read_one_frame`] of a frame no longer than `max_len` bytes, header included.
fn read_frame_within(
    stream: &mut Link,
    state: &str,
    max_len: usize,
) -> Result<Option<Frame>, EngineError> {
    let peer = peer_name(stream.stream());
    let mut buf = vec![0u8; FRAME_HEADER_BYTES];
    let mut filled = 0;
    while filled < FRAME_HEADER_BYTES {
        match stream.read(&mut buf[filled..]) {
            Ok(0) if filled == 0 => return Ok(None),
            Ok(0) => {
                return Err(EngineError::Disconnected {
                    peer,
                    state: state.to_string(),
                })
            }
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(EngineError::io(
                    format!("reading from {peer} while {state}"),
                    e,
                ))
            }
        }
    }
    let protocol = |cause| EngineError::Protocol {
        peer: peer.clone(),
        cause,
    };
    // The header's length is checked against its type's limit before anything is read.
    let (head, _) = FrameHeader::decode(&buf).map_err(protocol)?;
    if head.frame_len() > max_len {
        return Err(EngineError::Unexpected {
            peer,
            got: format!(
                "a {} frame of {} bytes",
                head.frame_type.name(),
                head.frame_len()
            ),
            state: state.to_string(),
        });
    }
    buf.resize(head.frame_len(), 0);
    stream
        .read_exact(&mut buf[FRAME_HEADER_BYTES..])
        .map_err(|e| EngineError::io(format!("reading from {peer} while {state}"), e))?;
    let (frame, _) = Frame::decode(&buf).map_err(protocol)?;
    Ok(Some(frame))
}

/// Reads the daemon's answer to `join`, sent earlier on `stream`, and checks it: the
/// daemon's `Error` is its refusal, a `Joined` must echo the join. Waits at most
/// `wait`.
///
/// # Errors
/// The daemon refused, answered out of turn, closed, or did not answer in time.
pub(crate) fn await_joined(
    stream: &mut Link,
    join: &mut ClientJoin,
    wait: Duration,
) -> Result<(), EngineError> {
    let peer = peer_name(stream.stream());
    stream
        .set_read_timeout(Some(wait))
        .map_err(|e| EngineError::io("setting a timeout", e))?;
    let frame = read_one_frame(stream, "joining")?.ok_or_else(|| EngineError::Disconnected {
        peer: peer.clone(),
        state: "joining".into(),
    })?;
    if let Frame::Error(e) = &frame {
        return Err(EngineError::Remote {
            code: e.code,
            message: e.message.clone(),
        });
    }
    join.handle(&frame)
        .map_err(|e| super::handshake::handshake_error(&peer, e))?;
    stream
        .set_read_timeout(None)
        .map_err(|e| EngineError::io("clearing a timeout", e))
}

/// Splits a fresh control connection into its reading half (with the handshake
/// timeout) and its writing half.
///
/// # Errors
/// The socket could not be duplicated or configured.
pub fn control_halves(stream: Link) -> Result<(FrameReader, FrameWriter), EngineError> {
    let writer = FrameWriter::new(
        stream
            .try_clone()
            .map_err(|e| EngineError::io("cloning a socket", e))?,
    );
    let reader = FrameReader::new(stream);
    reader
        .set_timeout(Some(super::handshake::HANDSHAKE_TIMEOUT))
        .map_err(|e| EngineError::io("setting a timeout", e))?;
    Ok((reader, writer))
}

/// The read buffer of a [`FrameReader`] once its peer sends in bulk.
const SCRATCH_BYTES: usize = 64 << 10;

/// Reads control frames from a connection.
#[derive(Debug)]
pub struct FrameReader {
    stream: Link,
    decoder: FrameDecoder,
    scratch: Vec<u8>,
    peer: String,
}

impl FrameReader {
    /// Wraps a connection (a clone of the stream may be written concurrently).
    pub fn new(stream: Link) -> FrameReader {
        let peer = peer_name(stream.stream());
        FrameReader {
            stream,
            decoder: FrameDecoder::new(),
            // Small until the peer sends more (a connection that has not authenticated
            // costs little); grown to SCRATCH_BYTES by the first read that fills it.
            scratch: vec![0; 4 << 10],
            peer,
        }
    }

    /// The peer's address.
    pub fn peer(&self) -> &str {
        &self.peer
    }

    /// The first frame of a connection, read exactly ([`read_one_frame`]): chunks that
    /// follow a data connection's `Join` stay in the socket for its chunk receiver
    /// (`CHUNKS_AFTER_JOIN`). `Ok(None)`: the peer closed before sending one.
    ///
    /// # Errors
    /// A socket error (a timeout included), a malformed frame, a close inside it, or a
    /// frame longer than a `Hello` ([`EngineError::Unexpected`], its body unread).
    pub fn first(&mut self, state: &str) -> Result<Option<Frame>, EngineError> {
        debug_assert_eq!(self.decoder.buffered(), 0, "the first frame comes first");
        read_frame_within(&mut self.stream, state, FIRST_FRAME_BYTES)
    }

    /// Gives the connection back, for a data connection after its `Join`. Nothing may
    /// be buffered: its first frame was read exactly ([`Self::first`]); an error says
    /// so if anything was.
    ///
    /// # Errors
    /// [`EngineError::Unexpected`] when bytes are buffered.
    pub fn into_inner(self) -> Result<Link, EngineError> {
        if self.decoder.buffered() > 0 {
            return Err(EngineError::Unexpected {
                peer: self.peer,
                got: "data before the join was answered".into(),
                state: "joining a data connection".into(),
            });
        }
        Ok(self.stream)
    }

    /// Whether the connection is encrypted.
    pub fn is_tls(&self) -> bool {
        self.stream.is_tls()
    }

    /// The connection (its socket's addresses and options).
    pub fn link(&self) -> &Link {
        &self.stream
    }

    /// Sets a read timeout (None: block).
    pub fn set_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.stream.set_read_timeout(t)
    }

    /// The next frame; `Ok(None)` on a clean end of stream between frames.
    ///
    /// # Errors
    /// A socket error, a malformed frame, or an end of stream inside a frame.
    pub fn next(&mut self, state: &str) -> Result<Option<Frame>, EngineError> {
        loop {
            if let Some(frame) = self.decoder.next() {
                return frame.map(Some).map_err(|e| EngineError::Protocol {
                    peer: self.peer.clone(),
                    cause: e,
                });
            }
            // Never read more than the decoder can take, so nothing is ever held back.
            let room = FrameDecoder::CAPACITY - self.decoder.buffered();
            let want = room.min(self.scratch.len());
            if want == 0 || self.decoder.payload_remaining() > 0 {
                return Err(EngineError::Unexpected {
                    peer: self.peer.clone(),
                    got: "a chunk on the control connection".into(),
                    state: state.to_string(),
                });
            }
            let n = match self.stream.read(&mut self.scratch[..want]) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(EngineError::io(
                        format!("reading from {} while {state}", self.peer),
                        e,
                    ))
                }
            };
            if n == 0 {
                return match self.decoder.finish() {
                    Ok(()) => Ok(None),
                    Err(_) => Err(EngineError::Disconnected {
                        peer: self.peer.clone(),
                        state: state.to_string(),
                    }),
                };
            }
            let took = self.decoder.feed(&self.scratch[..n]);
            debug_assert_eq!(took, n, "read no more than the decoder's room");
            if n == self.scratch.len() && n < SCRATCH_BYTES {
                self.scratch.resize(SCRATCH_BYTES, 0);
            }
        }
    }
}

/// Writes frames to a connection, reusing one encode buffer.
#[derive(Debug)]
pub struct FrameWriter {
    stream: Link,
    buf: Vec<u8>,
    peer: String,
}

impl FrameWriter {
    /// Wraps a connection.
    pub fn new(stream: Link) -> FrameWriter {
        let peer = peer_name(stream.stream());
        FrameWriter {
            stream,
            buf: Vec::with_capacity(4096),
            peer,
        }
    }

    /// Encodes and sends one frame.
    ///
    /// # Errors
    /// The socket write failed.
    pub fn send<C: Codec>(&mut self, frame: &C) -> Result<(), EngineError> {
        self.buf.clear();
        frame.encode(&mut self.buf);
        self.stream
            .write_all(&self.buf)
            .map_err(|e| EngineError::io(format!("sending to {}", self.peer), e))
    }

    /// Sends bytes already encoded (a handshake state machine's output).
    ///
    /// # Errors
    /// The socket write failed.
    pub fn send_raw(&mut self, bytes: &[u8]) -> Result<(), EngineError> {
        self.stream
            .write_all(bytes)
            .map_err(|e| EngineError::io(format!("sending to {}", self.peer), e))
    }

    /// Shuts the write half down (orderly close: `close_notify` on TLS).
    pub fn shutdown(&self) {
        self.stream.close();
    }

    /// Ends the connection from this side: [`FrameWriter::shutdown`], then the reading
    /// half shut too, so that a reader blocked on this socket (another handle of it)
    /// sees its end even when the peer never closes its side.
    pub fn end(&self) {
        self.shutdown();
        let _ = self.stream.stream().shutdown(std::net::Shutdown::Read);
    }

    /// Whether the connection is encrypted.
    pub fn is_tls(&self) -> bool {
        self.stream.is_tls()
    }

    /// The server nonce the connection's TLS session binds ([`Link::binding`]).
    pub fn binding(&self) -> Option<[u8; 32]> {
        self.stream.binding()
    }

    /// The fingerprint of the certificate the peer presented (a TLS client's link).
    pub fn peer_fingerprint(&self) -> Option<super::tls::Fingerprint> {
        self.stream.peer_fingerprint()
    }

    /// Another handle to the same connection.
    ///
    /// # Errors
    /// The OS refused to duplicate the socket.
    pub fn stream_clone(&self) -> Result<Link, EngineError> {
        self.stream
            .try_clone()
            .map_err(|e| EngineError::io("cloning a socket", e))
    }
}
