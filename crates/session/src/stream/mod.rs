//! A live stream's record window and go-back-N resend, without I/O.
//!
//! The stream is cut into records; record `k` travels on data connection `k mod N`
//! ([`RecordOrder`]), so the receiver's writer takes them from the connections in turn
//! and order needs no reordering buffer.
//!
//! * Sender: a pipe cannot be re-read, so each connection keeps the records it sent
//!   until the receiver acknowledges them ([`SendWindow`]: the buffer slots are the
//!   window). A `ChunkNack` sends the record again followed by every later record that
//!   connection had sent (go-back-N), at most [`MAX_RESENDS`] times; the control
//!   reader routes each word to the connection that sent the record ([`AckRoutes`]).
//! * Receiver: each connection checks its records ([`check_record`]) in order; a
//!   damaged one is answered with `ChunkNack` and what that connection brings is
//!   dropped until it arrives again ([`RecvConn`]). Nothing after the last good record
//!   is ever delivered.
//!
//! Every structure is sized when the stream starts; nothing allocates per record.

mod recv;
mod send;

pub use recv::{Arrival, RecvConn, Verdict};
pub use send::{AckRoutes, RoutesFull, SendWindow, Word};

use sluice_wire::{ChunkHeader, Compression, ErrorCode};
use std::fmt;

/// Times one record may be sent again before the stream is given up.
pub const MAX_RESENDS: u32 = 3;

/// Why a record was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Damage {
    /// Its payload is not a valid encoding (the decoder's words).
    Undecodable(String),
    /// Its bytes do not match the checksum (after decompression).
    Checksum,
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Damage::Undecodable(why) => write!(f, "does not decompress ({why})"),
            Damage::Checksum => f.write_str("failed its checksum"),
        }
    }
}

/// Why a stream stops (each is the end of the stream, never a retry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamError {
    /// The receiver asked again for a record this connection does not hold.
    NotHeld {
        /// The record's offset.
        offset: u64,
    },
    /// The sender was asked for one record more than [`MAX_RESENDS`] times.
    TooManyResends {
        /// The record's offset.
        offset: u64,
    },
    /// A damaged record where the sender keeps nothing to send again.
    Damaged {
        /// The record's offset.
        offset: u64,
        /// What was wrong.
        damage: Damage,
    },
    /// A record arrived damaged more than [`MAX_RESENDS`] times.
    DamagedAgain {
        /// The record's offset.
        offset: u64,
        /// What was wrong the last time.
        damage: Damage,
        /// Times it arrived damaged.
        tries: u32,
    },
    /// The connection ended before the record asked for again came back.
    NotSentAgain {
        /// The record's offset.
        offset: u64,
    },
    /// A packed chunk (a file transfer's) on a stream.
    Packed,
    /// The writer's next record is not the one due.
    OutOfOrder {
        /// The record's offset.
        offset: u64,
        /// The offset due.
        expected: u64,
    },
}

impl fmt::Display for StreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StreamError::NotHeld { offset } => write!(
                f,
                "the receiver asked again for the record at byte {offset}, which this connection does not hold"
            ),
            StreamError::TooManyResends { offset } => write!(
                f,
                "the record at byte {offset} failed its checksum {} times; the stream stops before it",
                MAX_RESENDS + 1
            ),
            StreamError::Damaged { offset, damage } => write!(
                f,
                "the record at byte {offset} {damage}; the stream stops before it"
            ),
            StreamError::DamagedAgain {
                offset,
                damage,
                tries,
            } => write!(
                f,
                "the record at byte {offset} {damage}, {tries} times; the stream stops before it"
            ),
            StreamError::NotSentAgain { offset } => write!(
                f,
                "the sender closed the connection before it sent the record at byte {offset} again"
            ),
            StreamError::Packed => f.write_str("a packed chunk on a stream"),
            StreamError::OutOfOrder { offset, expected } => write!(
                f,
                "record at byte {offset} arrived where byte {expected} was due"
            ),
        }
    }
}

impl std::error::Error for StreamError {}

/// Where the stream is, walked the same way by both ends: record `k` at its offset, on
/// connection `k mod N`; the receiver also counts what it took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordOrder {
    connections: u64,
    records: u64,
    offset: u64,
    wire_bytes: u64,
}

impl RecordOrder {
    /// A stream over `connections` data connections (at least one).
    #[must_use]
    pub fn new(connections: usize) -> RecordOrder {
        assert!(connections > 0, "a stream needs a connection");
        RecordOrder {
            connections: connections as u64,
            records: 0,
            offset: 0,
            wire_bytes: 0,
        }
    }

    /// The connection the next record travels on.
    #[must_use]
    pub fn next_connection(&self) -> usize {
        // Less than `connections`, which came from a usize.
        usize::try_from(self.records % self.connections).unwrap_or(0)
    }

    /// The next record's offset in the stream.
    #[must_use]
    pub fn next_offset(&self) -> u64 {
        self.offset
    }

    /// The sender produced the next record, of `len` bytes.
    pub fn pushed(&mut self, len: u64) {
        self.records += 1;
        self.offset += len;
    }

    /// The receiver's writer took `header` from [`Self::next_connection`]: whether it
    /// was the stream's last record.
    ///
    /// # Errors
    /// It is not the record due (nothing of it may be written).
    pub fn arrived(&mut self, header: &ChunkHeader) -> Result<bool, StreamError> {
        if header.offset != self.offset {
            return Err(StreamError::OutOfOrder {
                offset: header.offset,
                expected: self.offset,
            });
        }
        self.pushed(u64::from(header.raw_len));
        self.wire_bytes += u64::from(header.wire_len);
        Ok(header.is_last())
    }

    /// Records so far.
    #[must_use]
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Stream bytes so far (the next offset).
    #[must_use]
    pub fn bytes(&self) -> u64 {
        self.offset
    }

    /// Bytes on the wire of the records [`Self::arrived`].
    #[must_use]
    pub fn wire_bytes(&self) -> u64 {
        self.wire_bytes
    }
}

/// Checks a record that arrived in `buf` (its `wire_len` payload bytes first): where it
/// is compressed, `decode` replaces them by the `raw_len` original bytes (the engine's
/// decompressor); then the checksum must match. Returns the record's length.
///
/// # Errors
/// It does not decode, or its bytes are not the ones the sender framed.
pub fn check_record(
    header: &ChunkHeader,
    buf: &mut [u8],
    decode: impl FnOnce(Compression, &mut [u8]) -> Result<(), String>,
) -> Result<usize, Damage> {
    let compression = header.compression();
    let len = if compression == Compression::None {
        header.wire_len as usize
    } else {
        decode(compression, buf).map_err(Damage::Undecodable)?;
        header.raw_len as usize
    };
    let bytes = buf.get(..len).ok_or_else(|| {
        Damage::Undecodable(format!("{len} bytes exceed the {}-byte slot", buf.len()))
    })?;
    if header.verify(bytes) {
        Ok(len)
    } else {
        Err(Damage::Checksum)
    }
}

/// The code a `ChunkNack` for `header` carries.
#[must_use]
pub fn nack_reason(header: &ChunkHeader) -> ErrorCode {
    if header.compression() == Compression::None {
        ErrorCode::ChecksumMismatch
    } else {
        ErrorCode::DecompressFailed
    }
}

#[cfg(test)]
mod sim;
#[cfg(test)]
mod tests;
