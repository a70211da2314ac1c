//! `Delegate`: the capability a client hands a source daemon for a third-party copy.
//!
//! A third-party copy moves files from daemon A to daemon B while the client holds only
//! the two control connections. The client opens a push session with B (B's `Accept`
//! and `Addresses` tell it the session and where its data connections go), then opens a
//! session with A with `Open { direction: Deliver }` followed by `Delegate`: B's session
//! id, the join key of that one session (derived by the client from its handshake with
//! B), the session's shape, where to dial, and the fingerprint of B's certificate. A
//! dials B, joins every data connection with the key and answers the client with
//! `Accept`; the client then relays the control frames between A and B unchanged.
//!
//! The key is the capability: it opens only that one session of B (already scoped by
//! B's `Open` to one path and by B's account to its rights), each stream at most once
//! (the join table refuses a replay), and it dies with the session.

use super::session::{decode_addresses, encode_addresses, StreamAddress, DELEGATE_FIELDS};
use super::Body;
use crate::codec::{FrameType, Put, Reader};
use crate::error::DecodeError;
use crate::integrity::is_valid_chunk_bytes;
use crate::limits::{MAX_CHANNELS, MAX_STREAMS};

/// Flag bit of `Delegate.flags`: the source must reach B over TLS, pinned to
/// `fingerprint`.
pub const DELEGATE_TLS: u8 = 0x01;

/// Client → source daemon, right after `Open { direction: Deliver }`.
///
/// Body: `session_id u64`, `join_key [32]`, `channels u16`, `streams_per_channel u16`,
/// `chunk_bytes u32`, `flags u8` (TLS 0x01), `fingerprint [32]` (SHA-256 of B's
/// certificate, DER; zero without TLS), then an `Addresses` body with exactly one entry
/// per stream, in order.
#[derive(Clone, PartialEq, Eq)]
pub struct Delegate {
    /// B's session, from B's `Accept`.
    pub session_id: u64,
    /// The key B's join table checks (`crate::auth` `join_key` of the client's handshake
    /// with B); a secret, never logged.
    pub join_key: [u8; 32],
    /// From B's `Accept`.
    pub channels: u16,
    /// From B's `Accept`.
    pub streams_per_channel: u16,
    /// B's chunk size, from its `Accept`: the source cuts its files to it.
    pub chunk_bytes: u32,
    /// Whether the data connections to B must be TLS, pinned to `fingerprint`.
    pub tls: bool,
    /// SHA-256 of B's certificate as the client saw it (zero without TLS).
    pub fingerprint: [u8; 32],
    /// Where each data connection goes: one entry per stream `0..streams()`.
    pub targets: Vec<StreamAddress>,
}

impl Delegate {
    /// Data connections in total.
    pub fn streams(&self) -> u16 {
        self.channels.saturating_mul(self.streams_per_channel)
    }
}

impl std::fmt::Debug for Delegate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delegate")
            .field("session_id", &self.session_id)
            .field("join_key", &"<redacted>")
            .field("channels", &self.channels)
            .field("streams_per_channel", &self.streams_per_channel)
            .field("chunk_bytes", &self.chunk_bytes)
            .field("tls", &self.tls)
            .field("targets", &self.targets)
            .finish_non_exhaustive()
    }
}

fn invalid(field: &'static str, value: u64) -> DecodeError {
    DecodeError::InvalidValue { field, value }
}

impl Body for Delegate {
    const TYPE: FrameType = FrameType::Delegate;

    fn encode_body(&self, out: &mut Vec<u8>) {
        out.put_u64(self.session_id);
        out.extend_from_slice(&self.join_key);
        out.put_u16(self.channels);
        out.put_u16(self.streams_per_channel);
        out.put_u32(self.chunk_bytes);
        out.push(if self.tls { DELEGATE_TLS } else { 0 });
        out.extend_from_slice(&self.fingerprint);
        encode_addresses(&self.targets, out);
    }

    fn decode_body(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let session_id = r.u64("Delegate.session_id")?;
        let join_key = r.array("Delegate.join_key")?;
        let channels = r.u16("Delegate.channels")?;
        let streams_per_channel = r.u16("Delegate.streams_per_channel")?;
        let chunk_bytes = r.u32("Delegate.chunk_bytes")?;
        if channels == 0 || channels > MAX_CHANNELS {
            return Err(invalid("Delegate.channels", channels.into()));
        }
        let total = u64::from(channels) * u64::from(streams_per_channel);
        if streams_per_channel == 0 || total > u64::from(MAX_STREAMS) {
            return Err(invalid("Delegate.streams_per_channel", total));
        }
        if !is_valid_chunk_bytes(chunk_bytes) {
            return Err(invalid("Delegate.chunk_bytes", chunk_bytes.into()));
        }
        let flags = r.u8("Delegate.flags")?;
        if flags & !DELEGATE_TLS != 0 {
            return Err(invalid("Delegate.flags", flags.into()));
        }
        let fingerprint: [u8; 32] = r.array("Delegate.fingerprint")?;
        let tls = flags & DELEGATE_TLS != 0;
        if !tls && fingerprint != [0; 32] {
            return Err(invalid("Delegate.fingerprint", 1));
        }
        let targets = decode_addresses(r, &DELEGATE_FIELDS)?;
        // Exactly one target per stream, in order: the source never guesses where a
        // stream goes (and the encoding stays canonical).
        if targets.len() as u64 != total
            || targets
                .iter()
                .enumerate()
                .any(|(i, t)| usize::from(t.stream_index) != i)
        {
            return Err(invalid("Delegate.count", targets.len() as u64));
        }
        Ok(Delegate {
            session_id,
            join_key,
            channels,
            streams_per_channel,
            chunk_bytes,
            tls,
            fingerprint,
            targets,
        })
    }
}
