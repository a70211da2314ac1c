//! The receiving end's side of a stream's set-up: the control connection's handshake,
//! the sender's `Open`, the `Accept`, and the data connections' joins. Kept in one
//! function ([`accept_session`]) so that the daemon can share it.

use super::total_slots;
use crate::error::EngineError;
use crate::runtime::Runtime;
use crate::session::{self, HANDSHAKE_TIMEOUT};
use crate::transport::{self, FrameReader, FrameWriter};
use sluice_wire::{Accept, Capabilities, ErrorCode, ErrorFrame, Frame, JoinTable, Open, Token};
use std::net::{TcpListener, TcpStream};

/// A session accepted on a listener: its control connection, what was agreed, and the
/// joined data connections in stream order.
pub(super) struct Accepted {
    pub reader: FrameReader,
    pub writer: FrameWriter,
    /// Whether the sender wants every record acknowledged (`CHUNK_ACKS`).
    pub acked: bool,
    pub data: Vec<TcpStream>,
}

/// Accepts one session on `listener`: the handshake (with `token`), the `Open`, an
/// `Accept` for as many streams as `runtime`'s slots keep busy, then that many joins.
///
/// # Errors
/// Handshake or join failures.
pub(super) fn accept_session(
    listener: &TcpListener,
    token: Option<Token>,
    runtime: &Runtime,
) -> Result<Accepted, EngineError> {
    let (stream, _) = listener
        .accept()
        .map_err(|e| EngineError::io("accepting the sender", e))?;
    let _ = transport::tune(&stream, false);
    let (mut reader, mut writer) = transport::control_halves(stream)?;
    let hello = reader
        .next("waiting for Hello")?
        .ok_or_else(|| EngineError::Disconnected {
            peer: reader.peer().to_string(),
            state: "waiting for Hello".into(),
        })?;
    let est = session::server_handshake(hello, &mut reader, &mut writer, token)?;
    let acked = est.capabilities.contains(Capabilities::CHUNK_ACKS);
    let open = wait_open(&mut reader)?;
    let streams = streams_for(&open, total_slots(runtime));
    let accept = Accept {
        session_id: u64::from_le_bytes(session::random()?),
        session_secret: session::random()?,
        channels: 1,
        streams_per_channel: streams,
        chunk_bytes: runtime.chunk_bytes(),
    };
    let mut table = JoinTable::new(&accept, est.join_key(&accept.session_secret));
    session::send_accept(
        &mut writer,
        &est,
        &accept,
        sluice_wire::Addresses::default(),
    )?;
    let data = join_all(listener, streams, &mut table)?;
    reader
        .set_timeout(None)
        .map_err(|e| EngineError::io("clearing a timeout", e))?;
    Ok(Accepted {
        reader,
        writer,
        acked,
        data,
    })
}

fn wait_open(reader: &mut FrameReader) -> Result<Open, EngineError> {
    match reader.next("waiting for Open")? {
        Some(Frame::Open(o)) => Ok(o),
        _ => Err(EngineError::Disconnected {
            peer: reader.peer().to_string(),
            state: "waiting for Open".into(),
        }),
    }
}

/// The streams granted: what was asked (1 to 64), as many as `slots` keep busy. Each
/// connection holds up to three records (two queued, one arriving) and the writer one:
/// fewer slots could stall the in-order writer.
fn streams_for(open: &Open, slots: u32) -> u16 {
    open.options.streams.clamp(1, 64).min(
        u16::try_from((slots.saturating_sub(1)) / 3)
            .unwrap_or(1)
            .max(1),
    )
}

/// Accepts `streams` data connections and their joins; returns them in stream order.
fn join_all(
    listener: &TcpListener,
    streams: u16,
    table: &mut JoinTable,
) -> Result<Vec<TcpStream>, EngineError> {
    let mut conns: Vec<Option<TcpStream>> = (0..streams).map(|_| None).collect();
    for _ in 0..streams {
        let (index, s) = join_one(listener, table)?;
        // The join table admits only indexes below `streams`.
        if let Some(c) = conns.get_mut(usize::from(index)) {
            *c = Some(s);
        }
    }
    conns
        .into_iter()
        .map(|c| {
            c.ok_or_else(|| EngineError::Handshake {
                peer: "sender".into(),
                message: "a stream index joined twice".into(),
            })
        })
        .collect()
}

/// Accepts one data connection and checks its `Join`: its stream index and socket.
fn join_one(
    listener: &TcpListener,
    table: &mut JoinTable,
) -> Result<(u16, TcpStream), EngineError> {
    let (s, _) = listener
        .accept()
        .map_err(|e| EngineError::io("accepting a data connection", e))?;
    let mut w = FrameWriter::new(
        s.try_clone()
            .map_err(|e| EngineError::io("cloning a socket", e))?,
    );
    let mut r = FrameReader::new(s);
    r.set_timeout(Some(HANDSHAKE_TIMEOUT))
        .map_err(|e| EngineError::io("setting a timeout", e))?;
    let Some(Frame::Join(join)) = r.next("joining")? else {
        let _ = w.send(&ErrorFrame::new(ErrorCode::BadFrame, "expected Join"));
        return Err(EngineError::Handshake {
            peer: r.peer().to_string(),
            message: "expected Join".into(),
        });
    };
    let mut out = Vec::new();
    let joined = table.handle(&join, &mut out);
    w.send_raw(&out)?;
    let joined = joined.map_err(|e| EngineError::Handshake {
        peer: r.peer().to_string(),
        message: e.to_string(),
    })?;
    let s = r.into_inner()?;
    let _ = s.set_read_timeout(None);
    let _ = transport::tune(&s, true);
    Ok((joined.stream_index, s))
}
