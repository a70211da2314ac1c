//! The server side of opening a session, shared by the daemon and the stream receiver:
//! the first frame of a connection, the server handshake, `Open`, `Accept`, and the
//! answer to a data connection's `Join` against the session's [`JoinTable`].
//!
//! A server runs, on a control connection:
//! [`incoming`] (TLS or clear, by the first byte) → [`read_first`] (`Hello`) →
//! [`admit`] (the clear-text policy) → [`server_handshake`] → [`read_open`] →
//! [`new_accept`] + [`send_accept`]; then, for each data connection, [`answer_join`]
//! (a table the thread owns, or [`accept_join`] straight off a listener), or
//! [`finish_join`] after the table was consulted under a lock (the daemon's sessions
//! wait for their joins in a shared map).

pub use super::handshake::server_handshake;
use super::handshake::{handshake_error, random, HANDSHAKE_TIMEOUT};
use super::tls::{Link, ServerTls, TLS_HANDSHAKE_BYTE};
use super::transport::{self, FrameReader, FrameWriter};
use crate::error::EngineError;
use sluice_wire::{
    Accept, Addresses, Capabilities, ErrorCode, ErrorFrame, Established, Frame, Join, JoinError,
    JoinTable, Joined, Open,
};
use std::net::{TcpListener, TcpStream};

/// What a clear-text `Join` to an encrypted session is told.
pub const ENCRYPTED_SESSION: &str = "this session is encrypted: its data connections must be TLS";

/// A freshly accepted connection, tuned for control traffic, its TLS handshake run
/// when its first byte opens one, and split into its reading half (with the handshake
/// timeout) and its writing half.
///
/// # Errors
/// The socket could not be duplicated or configured, or the TLS handshake failed.
pub fn incoming(
    stream: TcpStream,
    tls: &ServerTls,
) -> Result<(FrameReader, FrameWriter), EngineError> {
    let _ = transport::tune(&stream, false);
    let peer = transport::peer_name(&stream);
    stream
        .set_read_timeout(Some(HANDSHAKE_TIMEOUT))
        .map_err(|e| EngineError::io("setting a timeout", e))?;
    let mut first = [0u8; 1];
    let link = match stream.peek(&mut first) {
        Ok(1) if first[0] == TLS_HANDSHAKE_BYTE => Link::accept_tls(stream, tls.config())
            .map_err(|e| handshake_error(&peer, format_args!("TLS: {e}")))?,
        _ => Link::plain(stream),
    };
    transport::control_halves(link)
}

/// Applies the server's clear-text policy to a connection whose first frame was read:
/// a TLS connection passes; clear text from a peer the policy refuses is answered with
/// an `EncryptionRequired` error naming the server's setting.
///
/// # Errors
/// [`EngineError::Refused`] when the peer must encrypt.
pub fn admit(
    reader: &FrameReader,
    writer: &mut FrameWriter,
    tls: &ServerTls,
) -> Result<(), EngineError> {
    if reader.is_tls() {
        return Ok(());
    }
    tls.encrypt()
        .server_admits_clear(reader.link().stream())
        .or_else(|setting| refuse_clear(reader, writer, setting))
}

/// Tells a clear-text peer that encryption is required (`setting` says why).
///
/// # Errors
/// Always: [`EngineError::Refused`].
pub fn refuse_clear(
    reader: &FrameReader,
    writer: &mut FrameWriter,
    setting: &str,
) -> Result<(), EngineError> {
    let code = ErrorCode::EncryptionRequired;
    let _ = writer.send(&ErrorFrame::new(code, setting));
    writer.shutdown();
    Err(EngineError::Refused {
        code,
        message: format!("{}: clear text refused ({setting})", reader.peer()),
    })
}

/// The first frame of a connection (`Hello` opens a session, `Join` attaches a data
/// connection); `Ok(None)` when the peer closed before sending one. A frame that cannot
/// be read is answered with an `Error` frame before the error is returned.
///
/// # Errors
/// A socket error or a malformed frame.
pub fn read_first(
    reader: &mut FrameReader,
    writer: &mut FrameWriter,
) -> Result<Option<Frame>, EngineError> {
    reader
        .first("waiting for the first frame")
        .inspect_err(|e| {
            let _ = writer.send(&ErrorFrame::new(e.code(), e.to_string()));
        })
}

/// The client's `Open`, after the handshake; `Ok(None)` when it closed instead.
///
/// # Errors
/// A socket error, a malformed frame, or another frame ([`EngineError::Unexpected`]).
pub fn read_open(reader: &mut FrameReader) -> Result<Option<Open>, EngineError> {
    match reader.next("waiting for Open")? {
        Some(Frame::Open(o)) => Ok(Some(o)),
        Some(other) => Err(EngineError::Unexpected {
            peer: reader.peer().to_string(),
            got: other.frame_type().name().to_string(),
            state: "waiting for Open".into(),
        }),
        None => Ok(None),
    }
}

/// A new session's `Accept`: a random id and join secret, `streams` data connections
/// on one channel (servers always say `channels: 1`), chunks of `chunk_bytes`.
///
/// # Errors
/// The OS random source failed.
pub fn new_accept(streams: u16, chunk_bytes: u32) -> Result<Accept, EngineError> {
    debug_assert!(streams >= 1, "a session has at least one data connection");
    Ok(Accept {
        session_id: u64::from_le_bytes(random()?),
        session_secret: random()?,
        channels: 1,
        streams_per_channel: streams,
        chunk_bytes,
    })
}

/// Sends `Accept` and, when the client understands it, the `Addresses` that follow it.
///
/// # Errors
/// The control connection failed.
pub fn send_accept(
    writer: &mut FrameWriter,
    est: &Established,
    accept: &Accept,
    addresses: Addresses,
) -> Result<(), EngineError> {
    writer.send(&Frame::Accept(accept.clone()))?;
    if est.capabilities.contains(Capabilities::ADDRESSES) {
        writer.send(&Frame::Addresses(addresses))?;
    }
    Ok(())
}

/// Answers a data connection's `join` against `table` and, when it joined, hands the
/// connection back ready for chunks, with its stream index.
///
/// # Errors
/// The join was refused (the peer was told why) or the answer could not be sent.
pub fn answer_join(
    table: &mut JoinTable,
    join: &Join,
    reader: FrameReader,
    writer: &mut FrameWriter,
) -> Result<(u16, Link), EngineError> {
    let mut out = Vec::new();
    let joined = table.handle(join, &mut out);
    finish_join(joined, &out, reader, writer)
}

/// The second half of [`answer_join`], for a caller that consulted its table itself
/// (under a lock): sends the table's answer `out`, then hands the connection back.
///
/// # Errors
/// The join was refused (the peer was told why) or the answer could not be sent.
pub fn finish_join(
    joined: Result<Joined, JoinError>,
    out: &[u8],
    reader: FrameReader,
    writer: &mut FrameWriter,
) -> Result<(u16, Link), EngineError> {
    writer.send_raw(out)?;
    let joined = joined.map_err(|e| handshake_error(reader.peer(), e))?;
    let stream = reader.into_inner()?;
    let _ = stream.set_read_timeout(None);
    let _ = transport::tune(stream.stream(), true);
    Ok((joined.stream_index, stream))
}

/// Accepts the next connection on `listener`, which must be a data connection of the
/// session `table` belongs to (a server with one session, such as a stream receiver);
/// it must be TLS when the session is `encrypted`.
///
/// # Errors
/// Accepting failed, the connection sent something other than `Join` (answered with an
/// `Error` frame), it is clear text where TLS is required, or the join was refused.
pub fn accept_join(
    listener: &TcpListener,
    table: &mut JoinTable,
    tls: &ServerTls,
    encrypted: bool,
) -> Result<(u16, Link), EngineError> {
    let (s, _) = listener
        .accept()
        .map_err(|e| EngineError::io("accepting a data connection", e))?;
    let (mut reader, mut writer) = incoming(s, tls)?;
    let first = reader.first("joining")?;
    admit(&reader, &mut writer, tls)?;
    if encrypted && !reader.is_tls() {
        refuse_clear(&reader, &mut writer, ENCRYPTED_SESSION)?;
    }
    match first {
        Some(Frame::Join(join)) => answer_join(table, &join, reader, &mut writer),
        _ => {
            let _ = writer.send(&ErrorFrame::new(ErrorCode::BadFrame, "expected Join"));
            Err(handshake_error(reader.peer(), "expected Join"))
        }
    }
}
