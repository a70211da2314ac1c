//! The receiving end's side of a stream's set-up: the control connection's handshake,
//! the sender's `Open`, the `Accept`, and the data connections' joins, through the
//! server side the daemon uses too (`net::accept`).

use super::total_slots;
use crate::error::EngineError;
use crate::net::accept;
use crate::net::tls::{Link, ServerTls};
use crate::runtime::Runtime;
use crate::transport::{FrameReader, FrameWriter};
use sluice_wire::{Capabilities, JoinTable, Open, Token};
use std::net::TcpListener;

/// A session accepted on a listener: its control connection, what was agreed, and the
/// joined data connections in stream order.
pub(super) struct Accepted {
    pub reader: FrameReader,
    pub writer: FrameWriter,
    /// Whether the sender wants every record acknowledged (`CHUNK_ACKS`).
    pub acked: bool,
    pub data: Vec<Link>,
}

/// Accepts one session on `listener`: TLS by the sender's first byte (clear text as
/// `tls`'s policy allows), the handshake (with `token`), the `Open`, an `Accept` for as
/// many streams as `runtime`'s slots keep busy, then that many joins (TLS if the
/// control connection is).
///
/// # Errors
/// Handshake or join failures, or clear text refused.
pub(super) fn accept_session(
    listener: &TcpListener,
    token: Option<Token>,
    tls: &ServerTls,
    runtime: &Runtime,
) -> Result<Accepted, EngineError> {
    let (stream, _) = listener
        .accept()
        .map_err(|e| EngineError::io("accepting the sender", e))?;
    let (mut reader, mut writer) = accept::incoming(stream, tls)?;
    let hello =
        accept::read_first(&mut reader, &mut writer)?.ok_or_else(|| EngineError::Disconnected {
            peer: reader.peer().to_string(),
            state: "waiting for Hello".into(),
        })?;
    accept::admit(&reader, &mut writer, tls)?;
    let est = accept::server_handshake(hello, &mut reader, &mut writer, token)?;
    let acked = est.capabilities.contains(Capabilities::CHUNK_ACKS);
    let open = accept::read_open(&mut reader)?.ok_or_else(|| EngineError::Disconnected {
        peer: reader.peer().to_string(),
        state: "waiting for Open".into(),
    })?;
    let streams = streams_for(&open, total_slots(runtime));
    let accept = accept::new_accept(streams, runtime.chunk_bytes())?;
    let mut table = JoinTable::new(&accept, est.join_key(&accept.session_secret));
    accept::send_accept(
        &mut writer,
        &est,
        &accept,
        sluice_wire::Addresses::default(),
    )?;
    let data = join_all(listener, streams, &mut table, tls, writer.is_tls())?;
    let cap = runtime.plan().buffer_bytes();
    crate::net::tuning::tune_session(reader.link(), &data, cap);
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
    tls: &ServerTls,
    encrypted: bool,
) -> Result<Vec<Link>, EngineError> {
    let mut conns: Vec<Option<Link>> = (0..streams).map(|_| None).collect();
    for _ in 0..streams {
        let (index, s) = accept::accept_join(listener, table, tls, encrypted)?;
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
