//! The receiver's side of one connection: records checked in order, a damaged one
//! asked for again and what follows it on this connection dropped until it comes back.

use super::{Damage, StreamError, MAX_RESENDS};
use sluice_wire::{ChunkFlags, ChunkHeader};

/// What to do with a record that is arriving (its payload must be read either way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// Check it ([`super::check_record`]) and report with [`RecvConn::checked`].
    Check,
    /// Drop it: it was sent before the sender heard of a damaged record, and comes
    /// again after it.
    Drop,
}

/// What to do with a record once checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Whole: acknowledge it (where the sender wants words) and hand it to the writer.
    Deliver,
    /// Damaged: answer `ChunkNack` and wait for it again.
    AskAgain {
        /// Times it arrived damaged so far.
        tries: u32,
        /// What was wrong.
        damage: Damage,
    },
    /// The stream stops before this record.
    Fail(StreamError),
}

/// One data connection of a receiving stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvConn {
    /// Whether the sender keeps records to send again (`CHUNK_ACKS`).
    acked: bool,
    /// The record asked for again, and how many times it came damaged.
    awaiting: Option<(u64, u32)>,
}

impl RecvConn {
    /// A connection whose sender keeps its records until acknowledged (`acked`), or
    /// does not (a damaged record then ends the stream).
    #[must_use]
    pub fn new(acked: bool) -> RecvConn {
        RecvConn {
            acked,
            awaiting: None,
        }
    }

    /// A record's header arrived.
    ///
    /// # Errors
    /// It is not a stream's record.
    pub fn arrives(&self, header: &ChunkHeader) -> Result<Arrival, StreamError> {
        if header.flags.contains(ChunkFlags::PACKED) {
            return Err(StreamError::Packed);
        }
        Ok(match self.awaiting {
            Some((offset, _)) if offset != header.offset => Arrival::Drop,
            _ => Arrival::Check,
        })
    }

    /// The record at `offset` was checked (after [`Arrival::Check`]).
    pub fn checked(&mut self, offset: u64, result: Result<(), Damage>) -> Verdict {
        debug_assert!(self.awaiting.is_none_or(|(o, _)| o == offset));
        let damage = match result {
            Ok(()) => {
                self.awaiting = None;
                return Verdict::Deliver;
            }
            Err(d) => d,
        };
        if !self.acked {
            return Verdict::Fail(StreamError::Damaged { offset, damage });
        }
        let tries = self.awaiting.map_or(1, |(_, t)| t + 1);
        if tries > MAX_RESENDS {
            return Verdict::Fail(StreamError::DamagedAgain {
                offset,
                damage,
                tries,
            });
        }
        self.awaiting = Some((offset, tries));
        Verdict::AskAgain { tries, damage }
    }

    /// The connection ended (the sender closed it).
    ///
    /// # Errors
    /// A record asked for again never came back.
    pub fn ended(&self) -> Result<(), StreamError> {
        match self.awaiting {
            None => Ok(()),
            Some((offset, _)) => Err(StreamError::NotSentAgain { offset }),
        }
    }

    /// The record asked for again, if any.
    #[must_use]
    pub fn awaiting(&self) -> Option<u64> {
        self.awaiting.map(|(o, _)| o)
    }
}
