//! The server handshake against a daemon's accounts.
//!
//! `sluice-wire`'s [`ServerHandshake`] checks a proof against one token. With accounts
//! the daemon does not know the token until the proof arrives, so the handshake runs in
//! two steps, with no change on the wire: a decoy state machine (a random token no
//! client can know) answers `Hello` with the `Welcome` every account would give (the
//! `Welcome` depends on the `Hello`, the nonce and that a token is required, not on
//! which token); when the `AuthProof` arrives, [`Accounts::find`] names its account,
//! and a state machine for that account's token, fed the same `Hello` and nonce,
//! verifies the proof again and answers `AuthOk`. A proof no account matches goes to
//! the decoy, which answers `AuthFailed` exactly as a one-token daemon does.

use super::{Account, Accounts};
use crate::error::EngineError;
use crate::net::handshake::{random, server_handshake as one_token_handshake, server_nonce};
use crate::transport::{FrameReader, FrameWriter};
use sluice_wire::{
    ErrorCode, ErrorFrame, Established, Frame, HandshakeError, HandshakeStatus, ServerConfig,
    ServerHandshake, Token,
};
use std::sync::Arc;
use std::time::SystemTime;

/// An authenticated control connection: the negotiated session and whose it is.
#[derive(Debug)]
pub struct Admitted {
    /// The handshake's result.
    pub established: Established,
    /// The account the client proved (the implicit one without authentication).
    pub account: Arc<Account>,
}

/// Runs the server handshake for `hello` against `accounts` at time `now`. `proved`
/// is set to the account whose token the client proved, even when it is then refused
/// (expired): the audit log names it.
///
/// An unknown token, and an expired one whose proof verified, are both refused with
/// `AuthFailed`; only the latter is told "expired" (the client proved the token, so
/// nothing is revealed to a guesser).
///
/// # Errors
/// [`EngineError::Handshake`] (the client was sent the `Error`), or a connection error.
pub fn server_handshake(
    hello: Frame,
    reader: &mut FrameReader,
    writer: &mut FrameWriter,
    accounts: &Accounts,
    now: SystemTime,
    proved: &mut Option<String>,
) -> Result<Admitted, EngineError> {
    if let Some(account) = accounts.open_account() {
        let established = one_token_handshake(hello, reader, writer, None)?;
        return Ok(Admitted {
            established,
            account: Arc::clone(account),
        });
    }
    let Frame::Hello(h) = &hello else {
        let _ = writer.send(&ErrorFrame::new(ErrorCode::BadFrame, "expected Hello"));
        return Err(refused(reader, ErrorCode::BadFrame, "expected Hello"));
    };
    let nonce = server_nonce(writer)?;
    let decoy =
        Token::new(random::<32>()?.to_vec()).map_err(|e| EngineError::Config(e.to_string()))?;
    let mut hs = ServerHandshake::new(ServerConfig::new(Some(decoy)), nonce);
    let mut out = Vec::new();
    let status = hs.handle(&hello, &mut out);
    send(writer, &out);
    if let Ok(HandshakeStatus::Done(_)) | Err(_) = &status {
        return Err(failed(reader, status.err()));
    }
    let frame = crate::net::handshake::next_frame(reader, "handshaking")?;
    let account = match &frame {
        Frame::AuthProof(p) => accounts.find(&h.client_nonce, &nonce, &p.mac),
        _ => None,
    };
    let Some(account) = account else {
        out.clear();
        let status = hs.handle(&frame, &mut out);
        send(writer, &out);
        return Err(failed(reader, status.err()));
    };
    *proved = Some(account.name.clone());
    if account.expired(now) {
        let msg = format!("the token of account {:?} has expired", account.name);
        let _ = writer.send(&ErrorFrame::new(ErrorCode::AuthFailed, &msg));
        return Err(refused(reader, ErrorCode::AuthFailed, &msg));
    }
    let established =
        confirm(account, &hello, &frame, nonce, writer).map_err(|e| failed(reader, Some(e)))?;
    Ok(Admitted {
        established,
        account: Arc::clone(account),
    })
}

/// The handshake of `account`'s token replayed on the `Hello` and the proof that
/// [`Accounts::find`] matched to it: sends `AuthOk`.
fn confirm(
    account: &Account,
    hello: &Frame,
    proof: &Frame,
    nonce: [u8; 32],
    writer: &mut FrameWriter,
) -> Result<Established, HandshakeError> {
    let mut hs = ServerHandshake::new(ServerConfig::new(account.token().cloned()), nonce);
    let mut welcome = Vec::new();
    hs.handle(hello, &mut welcome)?;
    let mut out = Vec::new();
    let status = hs.handle(proof, &mut out);
    send(writer, &out);
    match status? {
        HandshakeStatus::Done(est) => Ok(est),
        HandshakeStatus::InProgress => Err(HandshakeError::Finished),
    }
}

fn send(writer: &mut FrameWriter, out: &[u8]) {
    if !out.is_empty() {
        let _ = writer.send_raw(out);
    }
}

/// A failed handshake whose `Error` (if one was due) was already sent.
fn failed(reader: &FrameReader, e: Option<HandshakeError>) -> EngineError {
    match e {
        Some(HandshakeError::Peer { code, message }) => EngineError::HandshakeRefused {
            peer: reader.peer().to_string(),
            code,
            message,
        },
        Some(other) => EngineError::Handshake {
            peer: reader.peer().to_string(),
            message: other.to_string(),
        },
        None => EngineError::Handshake {
            peer: reader.peer().to_string(),
            message: "the handshake ended early".into(),
        },
    }
}

fn refused(reader: &FrameReader, code: ErrorCode, message: &str) -> EngineError {
    EngineError::Handshake {
        peer: reader.peer().to_string(),
        message: format!("{code}: {message}"),
    }
}
