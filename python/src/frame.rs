//! How a Python message travels in a stream's records (no I/O): a message starts a
//! record with a fixed 40-byte header and the JSON `info` (dtype, shape, the caller's
//! meta), then the payload, continued in as many whole records as it needs; the next
//! message starts a new record. The engine keeps records in order and their
//! boundaries, so the receiver reassembles a message without scanning.
//!
//! The sender pads the info with trailing spaces (JSON whitespace, which the receiver's
//! parser skips) so that the payload starts at a multiple of [`PAYLOAD_ALIGN_BYTES`] in
//! the record, and so its elements at their own multiples: a record shuffled as
//! elements ([`sluice_wire::shuffle`]) then has whole elements where it expects them.
//!
//! ```text
//! 0  magic "SLPY"      4 version (1)   5 kind   6 reserved (0, u16)
//! 8  frame id (u64)   16 series (u64, 0: none)   24 payload bytes (u64)
//! 32 info bytes (u32) 36 reserved (0, u32)      40 info (UTF-8 JSON)
//! ```
//! All integers are little-endian.

/// The first four bytes of every message.
pub const MAGIC: [u8; 4] = *b"SLPY";
/// The layout's version.
pub const VERSION: u8 = 1;
/// The fixed part of a header.
pub const FIXED_BYTES: usize = 40;
/// The largest `info` (dtype, shape and meta as JSON) a message may carry, padding
/// included.
pub const INFO_BYTES_MAX: usize = 1 << 20;
/// Where a message's payload starts in its first record: a multiple of this (the
/// largest element size, 8, and a cache line), where the padding fits.
pub const PAYLOAD_ALIGN_BYTES: usize = 64;

/// The length to give an info of `info_bytes`, padded with trailing spaces, so that the
/// payload starts at a multiple of [`PAYLOAD_ALIGN_BYTES`] in a record of
/// `record_bytes`; `info_bytes` itself where the padded info would exceed
/// [`INFO_BYTES_MAX`] or the record (the payload is then merely unaligned).
pub fn padded_info_bytes(info_bytes: usize, record_bytes: usize) -> usize {
    let aligned = (FIXED_BYTES + info_bytes).next_multiple_of(PAYLOAD_ALIGN_BYTES) - FIXED_BYTES;
    debug_assert!(aligned >= info_bytes && aligned - info_bytes < PAYLOAD_ALIGN_BYTES);
    if aligned <= INFO_BYTES_MAX && FIXED_BYTES + aligned <= record_bytes {
        aligned
    } else {
        info_bytes
    }
}

/// What a message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An array (`Sender.send`).
    Frame = 0,
    /// A series begins (`Sender.begin_series`).
    SeriesStart = 1,
    /// A series ends (`Sender.end_series`).
    SeriesEnd = 2,
    /// The stream ends (`Sender.close`): its record is the one marked last.
    End = 3,
}

impl Kind {
    /// The kind numbered `n`.
    pub fn from_u8(n: u8) -> Option<Kind> {
        match n {
            0 => Some(Kind::Frame),
            1 => Some(Kind::SeriesStart),
            2 => Some(Kind::SeriesEnd),
            3 => Some(Kind::End),
            _ => None,
        }
    }
}

/// A message's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// What the message is.
    pub kind: Kind,
    /// The frame's number in the stream (0, 1, ...); for other kinds, the next one's.
    pub frame_id: u64,
    /// The series it belongs to (0: none).
    pub series: u64,
    /// Bytes of payload after the info.
    pub payload_bytes: u64,
    /// Bytes of info after the fixed part.
    pub info_bytes: u32,
}

impl Header {
    /// Bytes of the header with its info.
    pub fn head_bytes(&self) -> usize {
        FIXED_BYTES + self.info_bytes as usize
    }

    /// Writes the fixed part into `out` (at least [`FIXED_BYTES`]).
    pub fn encode(&self, out: &mut [u8]) {
        assert!(out.len() >= FIXED_BYTES);
        out[..4].copy_from_slice(&MAGIC);
        out[4] = VERSION;
        out[5] = self.kind as u8;
        out[6..8].fill(0);
        out[8..16].copy_from_slice(&self.frame_id.to_le_bytes());
        out[16..24].copy_from_slice(&self.series.to_le_bytes());
        out[24..32].copy_from_slice(&self.payload_bytes.to_le_bytes());
        out[32..36].copy_from_slice(&self.info_bytes.to_le_bytes());
        out[36..40].fill(0);
    }

    /// Reads the header at the start of `record` (the first record of a message),
    /// checking that its info is within the record.
    ///
    /// # Errors
    /// What is wrong with it, in words.
    pub fn decode(record: &[u8]) -> Result<Header, String> {
        let Some(fixed) = record.get(..FIXED_BYTES) else {
            return Err(format!(
                "a record of {} bytes is too short for a message header",
                record.len()
            ));
        };
        if fixed[..4] != MAGIC {
            return Err("a record does not start a sluice Python message (is the sender `sluice stream send`?)".into());
        }
        if fixed[4] != VERSION {
            return Err(format!(
                "message layout version {} is not {VERSION}",
                fixed[4]
            ));
        }
        let kind =
            Kind::from_u8(fixed[5]).ok_or_else(|| format!("unknown message kind {}", fixed[5]))?;
        let u64_at = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&fixed[at..at + 8]);
            u64::from_le_bytes(b)
        };
        let mut info = [0u8; 4];
        info.copy_from_slice(&fixed[32..36]);
        let header = Header {
            kind,
            frame_id: u64_at(8),
            series: u64_at(16),
            payload_bytes: u64_at(24),
            info_bytes: u32::from_le_bytes(info),
        };
        if header.info_bytes as usize > INFO_BYTES_MAX || header.head_bytes() > record.len() {
            return Err(format!(
                "a message's info of {} bytes does not fit its {}-byte record",
                header.info_bytes,
                record.len()
            ));
        }
        let carried = (record.len() - header.head_bytes()) as u64;
        if carried > header.payload_bytes {
            return Err(format!(
                "a record carries {carried} payload bytes, more than its message's {}",
                header.payload_bytes
            ));
        }
        Ok(header)
    }
}
