//! Joining data connections to a session, as no-I/O state machines.
//!
//! ```text
//! client (per data connection)                       server (per session)
//!   Join{session_id, mac, stream_index, channel} ──▶  JoinTable::handle
//!                                           ◀──────  Joined{stream_index, channel}
//!                                                    or Error{JoinRejected}
//! ```
//!
//! `mac = HMAC-SHA256(join_key, "sluice-v1 join" ‖ session_id ‖ stream_index)`; the
//! `join_key` comes from [`crate::Established::join_key`]. The server accepts each stream
//! index once, so a recorded `Join` cannot be replayed into a live session.

use crate::auth::{self, verify_join_mac};
use crate::codec::{Codec, FrameType};
use crate::error::ErrorCode;
use crate::frame::{Accept, ErrorFrame, Frame, Join, Joined};
use crate::limits::MAX_STREAMS;

/// Why a data connection could not join.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JoinError {
    /// `Join.session_id` names another session.
    #[error("join for session {got:#x}, expected {expected:#x}")]
    WrongSession {
        /// This table's session.
        expected: u64,
        /// The one named.
        got: u64,
    },
    /// `stream_index` is not below the session's stream count.
    #[error("stream index {stream_index} out of range (session has {streams} streams)")]
    StreamOutOfRange {
        /// The index named.
        stream_index: u16,
        /// Streams in the session.
        streams: u16,
    },
    /// `channel` is not `stream_index / streams_per_channel`.
    #[error("stream {stream_index} belongs to channel {expected}, not {got}")]
    WrongChannel {
        /// The index named.
        stream_index: u16,
        /// Its channel.
        expected: u16,
        /// The channel named.
        got: u16,
    },
    /// The MAC did not verify: the peer does not know the join key.
    #[error("bad join MAC for stream {stream_index}")]
    BadMac {
        /// The index named.
        stream_index: u16,
    },
    /// The stream already joined (a replay, or a client bug).
    #[error("stream {stream_index} already joined")]
    AlreadyJoined {
        /// The index named.
        stream_index: u16,
    },
    /// `Joined` does not echo what was asked.
    #[error("server answered with stream {got_stream}/channel {got_channel}, expected {stream_index}/{channel}")]
    Mismatch {
        /// Stream asked for.
        stream_index: u16,
        /// Channel asked for.
        channel: u16,
        /// Stream echoed.
        got_stream: u16,
        /// Channel echoed.
        got_channel: u16,
    },
    /// A frame that has no place here.
    #[error("unexpected {0} frame while joining")]
    UnexpectedFrame(FrameType),
    /// The peer sent an `Error` frame.
    #[error("peer reported {code}: {message}")]
    Peer {
        /// Its code.
        code: ErrorCode,
        /// Its message.
        message: String,
    },
}

/// The server's record of a session's data connections.
#[derive(Clone)]
pub struct JoinTable {
    session_id: u64,
    join_key: [u8; 32],
    channels: u16,
    streams_per_channel: u16,
    joined: [u64; (MAX_STREAMS as usize).div_ceil(64)],
}

impl std::fmt::Debug for JoinTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JoinTable")
            .field("session_id", &self.session_id)
            .field("streams", &self.streams())
            .field("joined", &self.joined_count())
            .finish_non_exhaustive()
    }
}

impl JoinTable {
    /// The table for the session granted by `accept`, whose data connections prove
    /// `join_key` ([`crate::Established::join_key`] of `accept.session_secret`).
    pub fn new(accept: &Accept, join_key: [u8; 32]) -> JoinTable {
        JoinTable {
            session_id: accept.session_id,
            join_key,
            channels: accept.channels,
            streams_per_channel: accept.streams_per_channel,
            joined: [0; (MAX_STREAMS as usize).div_ceil(64)],
        }
    }

    /// Streams in the session.
    pub fn streams(&self) -> u16 {
        self.channels
            .saturating_mul(self.streams_per_channel)
            .min(MAX_STREAMS)
    }

    /// Streams joined so far.
    pub fn joined_count(&self) -> u16 {
        let n: u32 = self.joined.iter().map(|w| w.count_ones()).sum();
        u16::try_from(n).unwrap_or(u16::MAX)
    }

    /// Whether every stream has joined.
    pub fn is_complete(&self) -> bool {
        self.joined_count() == self.streams()
    }

    /// Checks a `Join`; appends `Joined` or `Error { JoinRejected }` to `out`.
    ///
    /// # Errors
    /// [`JoinError`] (after appending the `Error` frame); close the connection.
    pub fn handle(&mut self, join: &Join, out: &mut Vec<u8>) -> Result<Joined, JoinError> {
        let result = self.check(join);
        match &result {
            Ok(j) => j.encode(out),
            Err(e) => ErrorFrame::new(ErrorCode::JoinRejected, e.to_string()).encode(out),
        }
        result
    }

    fn check(&mut self, join: &Join) -> Result<Joined, JoinError> {
        if join.session_id != self.session_id {
            return Err(JoinError::WrongSession {
                expected: self.session_id,
                got: join.session_id,
            });
        }
        let i = join.stream_index;
        if i >= self.streams() {
            return Err(JoinError::StreamOutOfRange {
                stream_index: i,
                streams: self.streams(),
            });
        }
        let expected = i / self.streams_per_channel.max(1);
        if join.channel != expected {
            return Err(JoinError::WrongChannel {
                stream_index: i,
                expected,
                got: join.channel,
            });
        }
        // The MAC before the duplicate check, so that without the key nobody learns
        // which streams are joined.
        if !verify_join_mac(&self.join_key, self.session_id, i, &join.mac) {
            return Err(JoinError::BadMac { stream_index: i });
        }
        let (word, bit) = (usize::from(i) / 64, 1u64 << (i % 64));
        if self.joined[word] & bit != 0 {
            return Err(JoinError::AlreadyJoined { stream_index: i });
        }
        self.joined[word] |= bit;
        Ok(Joined {
            stream_index: i,
            channel: expected,
        })
    }
}

/// The client side of one data connection's join.
#[derive(Debug, Clone)]
pub struct ClientJoin {
    join: Join,
    done: bool,
}

impl ClientJoin {
    /// The join of stream `stream_index` of the session granted by `accept`.
    ///
    /// # Errors
    /// [`JoinError::StreamOutOfRange`] if the session has no such stream.
    pub fn new(
        accept: &Accept,
        join_key: &[u8; 32],
        stream_index: u16,
    ) -> Result<ClientJoin, JoinError> {
        if stream_index >= accept.streams() {
            return Err(JoinError::StreamOutOfRange {
                stream_index,
                streams: accept.streams(),
            });
        }
        Ok(ClientJoin {
            join: Join {
                session_id: accept.session_id,
                mac: auth::join_mac(join_key, accept.session_id, stream_index),
                stream_index,
                channel: accept.channel_of(stream_index),
            },
            done: false,
        })
    }

    /// Appends the `Join`.
    pub fn start(&self, out: &mut Vec<u8>) {
        self.join.encode(out);
    }

    /// Takes the server's answer.
    ///
    /// # Errors
    /// [`JoinError`]: the server refused, or answered out of turn.
    pub fn handle(&mut self, frame: &Frame) -> Result<Joined, JoinError> {
        match frame {
            Frame::Joined(j) if !self.done => {
                if (j.stream_index, j.channel) != (self.join.stream_index, self.join.channel) {
                    return Err(JoinError::Mismatch {
                        stream_index: self.join.stream_index,
                        channel: self.join.channel,
                        got_stream: j.stream_index,
                        got_channel: j.channel,
                    });
                }
                self.done = true;
                Ok(*j)
            }
            Frame::Error(e) => Err(JoinError::Peer {
                code: e.code,
                message: e.message.clone(),
            }),
            f => Err(JoinError::UnexpectedFrame(f.frame_type())),
        }
    }
}
