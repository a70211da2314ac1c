//! The handshake drivers: `sluice-wire`'s client and server state machines run over a
//! control connection, with the OS randomness they need.

use super::transport::{FrameReader, FrameWriter};
use crate::error::EngineError;
use sluice_wire::{
    Capabilities, ClientConfig, ClientHandshake, Codec, Established, Frame, HandshakeError,
    HandshakeStatus, ServerConfig, ServerHandshake, Token, BOUND_CAPABILITIES,
};
use std::time::Duration;

/// How long the handshake and the joins may take.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// Random bytes from the OS.
///
/// # Errors
/// The OS random source failed.
pub fn random<const N: usize>() -> Result<[u8; N], EngineError> {
    let mut b = [0u8; N];
    getrandom::fill(&mut b).map_err(|e| {
        EngineError::io(
            "reading the OS random source",
            std::io::Error::other(e.to_string()),
        )
    })?;
    Ok(b)
}

pub(crate) fn handshake_error(peer: &str, e: impl std::fmt::Display) -> EngineError {
    EngineError::Handshake {
        peer: peer.to_string(),
        message: e.to_string(),
    }
}

/// A failed handshake as an engine error: the peer's own refusal keeps its code.
fn failed(peer: &str, e: HandshakeError) -> EngineError {
    match e {
        HandshakeError::Peer { code, message } => EngineError::HandshakeRefused {
            peer: peer.to_string(),
            code,
            message,
        },
        other => handshake_error(peer, other),
    }
}

/// The next frame on a control connection, or [`EngineError::Disconnected`] when the
/// peer closed it while this side was `state`.
///
/// # Errors
/// A socket error, a malformed frame, or a close.
pub(crate) fn next_frame(reader: &mut FrameReader, state: &str) -> Result<Frame, EngineError> {
    reader
        .next(state)?
        .ok_or_else(|| EngineError::Disconnected {
            peer: reader.peer().to_string(),
            state: state.into(),
        })
}

/// Runs the client handshake on a fresh control connection.
///
/// # Errors
/// The server refused (version, authentication) or the connection failed.
pub fn client_handshake(
    reader: &mut FrameReader,
    writer: &mut FrameWriter,
    token: Option<Token>,
) -> Result<Established, EngineError> {
    client_handshake_offering(reader, writer, ClientConfig::new(token))
}

/// [`client_handshake`] offering `config`'s capabilities (a third-party copy withholds
/// one).
///
/// # Errors
/// As [`client_handshake`].
pub(crate) fn client_handshake_offering(
    reader: &mut FrameReader,
    writer: &mut FrameWriter,
    config: ClientConfig,
) -> Result<Established, EngineError> {
    client_handshake_early(reader, writer, config, None).map(|(est, _)| est)
}

/// Builds, from the capabilities the server chose, the frame that may follow the
/// client's `AuthProof` at once (a client's `Open`).
pub(crate) type Early<'a> = &'a dyn Fn(Capabilities) -> Frame;

/// [`client_handshake`], sending `early`'s frame (a client's `Open`) before the
/// server's `AuthOk`. Only for a connection whose server TLS already authenticated:
/// the frame reaches the server before the client's proof is checked. A server that
/// refuses the proof never reads the frame and answers `AuthFailed`, the same refusal
/// as without it; the client still checks `AuthOk` before it acts on any answer.
///
/// Where the TLS session binds the server's nonce ([`FrameWriter::binding`]), `Hello`,
/// `AuthProof` and the frame go in one flight, built for [`BOUND_CAPABILITIES`] (two
/// round trips less than waiting for `Welcome` and then `AuthOk`). Otherwise the frame
/// goes right behind `AuthProof`, after `Welcome` (one less), or, when the server asks
/// for no proof, not at all. Returns whether the frame went.
///
/// # Errors
/// As [`client_handshake`].
pub(crate) fn client_handshake_early(
    reader: &mut FrameReader,
    writer: &mut FrameWriter,
    config: ClientConfig,
    early: Option<Early<'_>>,
) -> Result<(Established, bool), EngineError> {
    let bound_caps = config.capabilities.intersection(BOUND_CAPABILITIES);
    let mut hs = ClientHandshake::new(config, random()?);
    let mut out = Vec::new();
    let mut sent = false;
    match writer.binding() {
        Some(nonce) => {
            hs.start_bound(nonce, &mut out);
            if let Some(build) = early {
                build(bound_caps).encode(&mut out);
                sent = true;
            }
        }
        None => hs.start(&mut out),
    }
    writer.send_raw(&out)?;
    loop {
        let frame = next_frame(reader, "handshaking")?;
        out.clear();
        let status = hs.handle(&frame, &mut out);
        if let (Some(build), Frame::Welcome(w), Ok(HandshakeStatus::InProgress), false) =
            (early, &frame, &status, sent)
        {
            debug_assert!(
                !out.is_empty(),
                "AuthProof answers an auth_required Welcome"
            );
            build(w.capabilities).encode(&mut out);
            sent = true;
        }
        if !out.is_empty() {
            let _ = writer.send_raw(&out);
        }
        match status.map_err(|e| failed(reader.peer(), e))? {
            HandshakeStatus::Done(est) => return Ok((est, sent)),
            HandshakeStatus::InProgress => {}
        }
    }
}

/// The server's nonce for the handshake on `writer`'s connection: the one its TLS
/// session binds where the client asked for that ([`sluice_wire::BOUND_ALPN`]), else
/// fresh random bytes.
///
/// # Errors
/// The system's random source failed.
pub(crate) fn server_nonce(writer: &FrameWriter) -> Result<[u8; 32], EngineError> {
    match writer.binding() {
        Some(nonce) => Ok(nonce),
        None => random(),
    }
}

/// Runs the server handshake; `first` is the client's `Hello`, already read. The
/// state machine answers its own failures with an `Error` frame
/// ([`EngineError::Handshake`]); other errors have told the peer nothing.
///
/// # Errors
/// The client failed authentication or spoke another version.
pub fn server_handshake(
    first: Frame,
    reader: &mut FrameReader,
    writer: &mut FrameWriter,
    token: Option<Token>,
) -> Result<Established, EngineError> {
    let mut hs = ServerHandshake::new(ServerConfig::new(token), server_nonce(writer)?);
    let mut out = Vec::new();
    let mut frame = first;
    loop {
        out.clear();
        let status = hs.handle(&frame, &mut out);
        if !out.is_empty() {
            let _ = writer.send_raw(&out);
        }
        match status.map_err(|e| failed(reader.peer(), e))? {
            HandshakeStatus::Done(est) => return Ok(est),
            HandshakeStatus::InProgress => {}
        }
        frame = next_frame(reader, "handshaking")?;
    }
}
