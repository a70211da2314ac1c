//! The source daemon's half of a third-party copy: `Open { direction: Deliver }`, then
//! `Delegate`; it dials the other daemon, joins every data connection with the
//! delegated key, answers the client with `Accept`, and runs the source with the
//! client's control connection (which the client relays to the sink) and the joined
//! data connections.

use crate::error::EngineError;
use crate::net::connect::join_data;
use crate::net::tls::{DataDial, Encrypt, Fingerprint, Link};
use crate::transport::FrameReader;
use sluice_wire::{Accept, Delegate, ErrorCode, Frame};
use std::net::TcpStream;
use std::time::Duration;

/// How long dialling one data connection to the sink may take.
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// Reads the `Delegate` that must follow `Open { direction: Deliver }`.
///
/// # Errors
/// Another frame, a close, or a malformed frame.
pub fn read_delegate(reader: &mut FrameReader) -> Result<Delegate, EngineError> {
    let state = "waiting for Delegate";
    match reader.next(state)? {
        Some(Frame::Delegate(d)) => Ok(d),
        Some(other) => Err(EngineError::Unexpected {
            peer: reader.peer().to_string(),
            got: other.frame_type().name().to_string(),
            state: state.into(),
        }),
        None => Err(EngineError::Disconnected {
            peer: reader.peer().to_string(),
            state: state.into(),
        }),
    }
}

/// Checks a delegation against this daemon before anything is dialled: its chunks must
/// fit this side's slots.
///
/// # Errors
/// [`EngineError::Refused`] naming the mismatch.
pub fn check(delegate: &Delegate, slot_bytes: u32) -> Result<(), EngineError> {
    if delegate.chunk_bytes > slot_bytes {
        return Err(EngineError::Refused {
            code: ErrorCode::TooLarge,
            message: format!(
                "the destination daemon chose {}-byte chunks; this daemon's slots hold {slot_bytes}",
                delegate.chunk_bytes
            ),
        });
    }
    debug_assert_eq!(usize::from(delegate.streams()), delegate.targets.len());
    Ok(())
}

/// Dials and joins every data connection of the delegated session, in stream order:
/// inside TLS pinned to the destination's certificate when the delegation says so;
/// in clear text only where this daemon's `--encrypt` policy would accept clear text
/// from that address (`auto`: loopback only), never silently.
///
/// # Errors
/// A target that cannot be reached, a refused clear-text delivery, a certificate that
/// is not the pinned one, or a refused join.
pub fn dial(delegate: &Delegate, encrypt: Encrypt) -> Result<Vec<Link>, EngineError> {
    // The join state machine needs only the session's id and shape from an `Accept`;
    // the secret stays with the client (the delegated key is what proves the join).
    let shape = Accept {
        session_id: delegate.session_id,
        session_secret: [0; 32],
        channels: delegate.channels,
        streams_per_channel: delegate.streams_per_channel,
        chunk_bytes: delegate.chunk_bytes,
    };
    let mut data = Vec::with_capacity(delegate.targets.len());
    for t in &delegate.targets {
        let s = TcpStream::connect_timeout(&t.addr, DIAL_TIMEOUT).map_err(|e| {
            EngineError::io(
                format!(
                    "delivering: opening data connection {} to {}",
                    t.stream_index, t.addr
                ),
                e,
            )
        })?;
        let name = t.addr.to_string();
        let link = if delegate.tls {
            let fp = Fingerprint(delegate.fingerprint);
            DataDial::pinned(&t.addr.ip().to_string(), fp)?.secure(s, DIAL_TIMEOUT)?
        } else {
            encrypt.server_admits_clear(&s).map_err(|why| EngineError::Refused {
                code: ErrorCode::EncryptionRequired,
                message: format!(
                    "refusing to deliver to {name} in clear text (this daemon: {why}); the client must reach the destination daemon over TLS"
                ),
            })?;
            Link::plain(s)
        };
        data.push(join_data(
            link,
            &name,
            &shape,
            &delegate.join_key,
            t.stream_index,
        )?);
    }
    Ok(data)
}

/// The `Delegate` that must follow `Open { direction: Deliver }`, checked against this
/// side's `slot_bytes`, with the destination's session shape (streams, chunk size)
/// taken into `opts`: what the daemon and the ssh-started far side both do.
///
/// # Errors
/// As [`read_delegate`] and [`check`].
pub(crate) fn take(
    reader: &mut FrameReader,
    opts: &mut crate::SessionOptions,
    slot_bytes: u32,
) -> Result<Delegate, EngineError> {
    let delegate = read_delegate(reader)?;
    check(&delegate, slot_bytes)?;
    opts.streams = delegate.streams();
    opts.chunk_bytes = delegate.chunk_bytes;
    Ok(delegate)
}

/// Dials and joins the destination ([`dial`]), then confirms to the client with
/// `accept` alone: the data connections went elsewhere, so no `Addresses` follows.
///
/// # Errors
/// As [`dial`], or the control connection failed.
pub(crate) fn join_and_confirm(
    delegate: &Delegate,
    encrypt: Encrypt,
    writer: &mut crate::transport::FrameWriter,
    accept: Accept,
) -> Result<Vec<Link>, EngineError> {
    let data = dial(delegate, encrypt)?;
    writer.send(&Frame::Accept(accept))?;
    Ok(data)
}
