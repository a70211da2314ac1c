//! The resume log beside a partial file: which chunks were written, with their checksums.
//!
//! Layout (little-endian):
//! * header, [`HEADER_BYTES`]: `magic [8] = "SLPLOG01"`, `chunk_bytes u32`, `zero u32`,
//!   `size u64`, `mtime_ns i64` (of the source file the partial is written from),
//!   `check u64` = xxh3-64 of the 32 bytes before it;
//! * then records, [`RECORD_BYTES`] each: `index u64`, `checksum u64`, `check u64` =
//!   xxh3-64 of the 16 bytes before it.
//!
//! Records are appended (`O_APPEND`, one `write` each, so writer threads never interleave
//! bytes) and not synced: after a crash the tail may be torn or zero-filled, and the
//! data they describe may not have reached the disk. Reading stops at the first record
//! whose check fails, and every chunk a record names is re-read and verified before it
//! is reported as held.

use sluice_wire::chunk_checksum;

/// Bytes of the header.
pub(crate) const HEADER_BYTES: usize = 40;
/// Bytes of one record.
pub(crate) const RECORD_BYTES: usize = 24;
const MAGIC: [u8; 8] = *b"SLPLOG01";

/// What the partial was written from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub chunk_bytes: u32,
    pub size: u64,
    pub mtime_ns: i64,
}

pub(crate) fn encode_header(h: &Header) -> [u8; HEADER_BYTES] {
    let mut b = [0u8; HEADER_BYTES];
    b[0..8].copy_from_slice(&MAGIC);
    b[8..12].copy_from_slice(&h.chunk_bytes.to_le_bytes());
    b[16..24].copy_from_slice(&h.size.to_le_bytes());
    b[24..32].copy_from_slice(&h.mtime_ns.to_le_bytes());
    let check = chunk_checksum(&b[0..32]);
    b[32..40].copy_from_slice(&check.to_le_bytes());
    b
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

pub(crate) fn decode_header(b: &[u8]) -> Option<Header> {
    if b.len() < HEADER_BYTES || b[0..8] != MAGIC || b[12..16] != [0; 4] {
        return None;
    }
    if u64_at(b, 32) != chunk_checksum(&b[0..32]) {
        return None;
    }
    let mut cb = [0u8; 4];
    cb.copy_from_slice(&b[8..12]);
    Some(Header {
        chunk_bytes: u32::from_le_bytes(cb),
        size: u64_at(b, 16),
        // Same bits, reinterpreted.
        mtime_ns: i64::from_le_bytes(b[24..32].try_into().ok()?),
    })
}

pub(crate) fn encode_record(index: u64, checksum: u64) -> [u8; RECORD_BYTES] {
    let mut b = [0u8; RECORD_BYTES];
    b[0..8].copy_from_slice(&index.to_le_bytes());
    b[8..16].copy_from_slice(&checksum.to_le_bytes());
    let check = chunk_checksum(&b[0..16]);
    b[16..24].copy_from_slice(&check.to_le_bytes());
    b
}

/// `(index, checksum)` if the record's check holds.
pub(crate) fn decode_record(b: &[u8]) -> Option<(u64, u64)> {
    if b.len() < RECORD_BYTES || u64_at(b, 16) != chunk_checksum(&b[0..16]) {
        return None;
    }
    Some((u64_at(b, 0), u64_at(b, 8)))
}

/// Keeps the last record of each index, sorted by index (a chunk written twice, e.g.
/// after a retry, is described by its later record).
pub(crate) fn last_per_index(mut records: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    // Stable: among equal indexes, log order is kept, so the last one is the newest.
    records.sort_by_key(|r| r.0);
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(records.len());
    for r in records {
        match out.last_mut() {
            Some(last) if last.0 == r.0 => *last = r,
            _ => out.push(r),
        }
    }
    out
}

#[cfg(test)]
// Test data and counters are small; truncation cannot happen.
#[allow(clippy::cast_possible_truncation)]
mod tests {
    use super::*;

    #[test]
    fn header_and_records_round_trip() {
        let h = Header {
            chunk_bytes: 1 << 16,
            size: 12345,
            mtime_ns: -42,
        };
        assert_eq!(decode_header(&encode_header(&h)), Some(h));
        assert_eq!(decode_record(&encode_record(7, 99)), Some((7, 99)));
    }

    #[test]
    fn torn_or_zeroed_records_are_rejected() {
        let r = encode_record(7, 99);
        assert_eq!(decode_record(&r[..20]), None);
        assert_eq!(decode_record(&[0u8; RECORD_BYTES]), None);
        let mut flipped = r;
        flipped[3] ^= 1;
        assert_eq!(decode_record(&flipped), None);
        let mut h = encode_header(&Header {
            chunk_bytes: 4,
            size: 1,
            mtime_ns: 0,
        });
        h[20] ^= 0x80;
        assert_eq!(decode_header(&h), None);
    }

    #[test]
    fn last_record_per_index_wins() {
        let v = last_per_index(vec![(3, 1), (1, 5), (3, 2), (0, 9), (1, 6)]);
        assert_eq!(v, vec![(0, 9), (1, 6), (3, 2)]);
    }
}
