//! Chunk frames: the fixed-size [`ChunkHeader`], the packed-chunk segment table, and
//! [`Chunk`], which is both.
//!
//! On a data connection a chunk is sent as
//!
//! ```text
//! common header (6)  type=0x22, flags=ChunkFlags, body_len = 36 + 12 × segments
//! fixed body (36)    file_id u64, offset u64, raw_len u32, wire_len u32,
//!                    checksum u64, segments u16, reserved u16 (= 0)
//! segment table      segments × (file_id u64, len u32)         (PACKED only)
//! payload            wire_len bytes                            (NOT counted in body_len)
//! ```
//!
//! The payload is the original `raw_len` bytes, or their LZ4 block or zstd frame; with
//! `SHUFFLED`, the compression of their bit-shuffle, or with `BYTE_SHUFFLED` too of their
//! byte-shuffle ([`crate::shuffle`]). The checksum is
//! always that of the original bytes, so it checks decompression and unshuffling too.
//!
//! Decoding never touches the payload: the I/O layer decodes the 42-byte header, learns
//! `wire_len` (already checked against the chunk-size limit), and reads the payload
//! straight into a buffer slot of its own.

use crate::codec::{
    bitflags_type, check_limit, encode_frame, Codec, FrameHeader, FrameType, Put, Reader,
};
use crate::error::DecodeError;
use crate::frame::{Capabilities, Compression};
use crate::integrity::{
    chunk_checksum, chunk_checksum_parts, chunk_count, chunk_range, is_valid_chunk_bytes,
};
use crate::limits::{
    CHUNK_FIXED_BODY_BYTES, CHUNK_HEADER_BYTES, FRAME_HEADER_BYTES, MAX_CHUNK_BYTES,
    MAX_PACK_SEGMENTS, SEGMENT_BYTES,
};
use crate::shuffle::{ElementSize, Shuffle};

bitflags_type! {
    /// Flags of a chunk, carried in the common header's flags byte.
    ChunkFlags: u8 {
        /// The payload is an LZ4 block; `wire_len ≤ raw_len`.
        const COMPRESSED_LZ4 = 1 << 0;
        /// The payload is a zstd frame; `wire_len ≤ raw_len`.
        const COMPRESSED_ZSTD = 1 << 1;
        /// Several small whole files back to back, described by the segment table.
        const PACKED = 1 << 2;
        /// The chunk ends its file (always set on packed chunks).
        const LAST = 1 << 3;
        /// The original bytes were bit-shuffled ([`crate::shuffle`]) before they were
        /// compressed; the element size is in `ELEM_LOG2_LOW` / `ELEM_LOG2_HIGH`. Only
        /// on a compressed chunk, and only toward a peer that offered
        /// [`crate::Capabilities::SHUFFLE`].
        const SHUFFLED = 1 << 4;
        /// Bit 0 of `log2` of the shuffle's element size (with `SHUFFLED` only).
        const ELEM_LOG2_LOW = 1 << 5;
        /// Bit 1 of `log2` of the shuffle's element size (with `SHUFFLED` only).
        const ELEM_LOG2_HIGH = 1 << 6;
        /// With `SHUFFLED`: the shuffle was of bytes ([`crate::shuffle::byteshuffle`]),
        /// not bits. Only toward a peer that offered
        /// [`crate::Capabilities::BYTE_SHUFFLE`].
        const BYTE_SHUFFLED = 1 << 7;
    }
}

impl ChunkFlags {
    /// Every flag: what a receiver permits before a session has agreed on any.
    pub const ANY: ChunkFlags = ChunkFlags::from_bits_retain(u8::MAX);

    /// The flags a session's chunks may carry, from the capabilities both sides agreed
    /// (`caps`) and whether `Open` asked for compression (`compressed`): `LAST` always;
    /// `PACKED` with [`Capabilities::PACKED`]; each compression flag with its codec's
    /// capability, and the shuffle flags (element size included) with
    /// [`Capabilities::SHUFFLE`] and [`Capabilities::BYTE_SHUFFLE`], where compression
    /// was asked for. A file session's sink refuses a chunk with any other flag.
    #[must_use]
    pub fn permitted(caps: Capabilities, compressed: bool) -> ChunkFlags {
        let mut flags = ChunkFlags::LAST;
        flags.set(ChunkFlags::PACKED, caps.contains(Capabilities::PACKED));
        if !compressed {
            return flags;
        }
        flags.set(
            ChunkFlags::COMPRESSED_LZ4,
            caps.contains(Capabilities::COMPRESS_LZ4),
        );
        flags.set(
            ChunkFlags::COMPRESSED_ZSTD,
            caps.contains(Capabilities::COMPRESS_ZSTD),
        );
        let shuffled = ChunkFlags::SHUFFLED
            .union(ChunkFlags::ELEM_LOG2_LOW)
            .union(ChunkFlags::ELEM_LOG2_HIGH);
        flags.set(shuffled, caps.contains(Capabilities::SHUFFLE));
        flags.set(
            ChunkFlags::BYTE_SHUFFLED,
            caps.contains(Capabilities::SHUFFLE.union(Capabilities::BYTE_SHUFFLE)),
        );
        flags
    }
}

/// Where the chunk flags carry `log2` of a shuffle's element size: bits 5 and 6.
const ELEM_LOG2_SHIFT: u32 = 5;
const _: () = assert!(ChunkFlags::ELEM_LOG2_LOW.bits() == 1 << ELEM_LOG2_SHIFT);
const _: () = assert!(ChunkFlags::ELEM_LOG2_HIGH.bits() == 2 << ELEM_LOG2_SHIFT);

/// The fixed part of a chunk frame: 42 bytes on the wire, common header included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkHeader {
    /// The file; for a packed chunk, the file of the first segment.
    pub file_id: u64,
    /// File-relative offset, a multiple of the chunk size; 0 for a packed chunk.
    pub offset: u64,
    /// Original bytes, 1..=chunk size.
    pub raw_len: u32,
    /// Payload bytes on the wire: `raw_len` if uncompressed, else ≤ `raw_len`.
    pub wire_len: u32,
    /// Compression, packing, last-of-file.
    pub flags: ChunkFlags,
    /// xxh3-64 of the original `raw_len` bytes ([`chunk_checksum`]).
    pub checksum: u64,
    /// Entries in the segment table; 0 unless `PACKED`.
    pub segments: u16,
}

/// One file inside a packed chunk: its bytes are the next `len` bytes of the raw payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Segment {
    /// The file (a whole small file, so offset 0 and chunk index 0).
    pub file_id: u64,
    /// Its size, ≥ 1.
    pub len: u32,
}

/// A chunk header with its segment table (empty unless packed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// The fixed part.
    pub header: ChunkHeader,
    /// The segment table, sorted by strictly increasing `file_id`.
    pub segments: Vec<Segment>,
}

impl ChunkHeader {
    /// The header of an uncompressed, unpacked chunk of `raw`, checksum computed.
    pub fn plain(file_id: u64, offset: u64, raw: &[u8], last: bool) -> ChunkHeader {
        ChunkHeader::plain_checked(file_id, offset, raw.len(), chunk_checksum(raw), last)
    }

    /// [`Self::plain`] of the concatenation of `parts` (a record's head in a slot and
    /// its payload elsewhere), checksummed in one streaming pass without joining them:
    /// the header is the one [`Self::plain`] makes of the same bytes.
    pub fn plain_parts(file_id: u64, offset: u64, parts: &[&[u8]], last: bool) -> ChunkHeader {
        let len = parts.iter().map(|p| p.len()).sum();
        ChunkHeader::plain_checked(file_id, offset, len, chunk_checksum_parts(parts), last)
    }

    /// A plain header of `len` raw bytes whose checksum is `checksum`, computed by the
    /// caller ([`crate::ChunkChecksum`]: bytes hashed a piece at a time and sent from
    /// elsewhere than one buffer).
    pub fn plain_checked(
        file_id: u64,
        offset: u64,
        len: usize,
        checksum: u64,
        last: bool,
    ) -> ChunkHeader {
        let raw_len = u32::try_from(len).unwrap_or(u32::MAX);
        let mut flags = ChunkFlags::EMPTY;
        flags.set(ChunkFlags::LAST, last);
        ChunkHeader {
            file_id,
            offset,
            raw_len,
            wire_len: raw_len,
            flags,
            checksum,
            segments: 0,
        }
    }

    /// The same header for a payload compressed to `wire_len` bytes. The checksum stays
    /// that of the original bytes. Send uncompressed when compression does not shrink.
    pub fn compressed(mut self, compression: Compression, wire_len: u32) -> ChunkHeader {
        self.flags
            .set(ChunkFlags::COMPRESSED_LZ4, compression == Compression::Lz4);
        self.flags.set(
            ChunkFlags::COMPRESSED_ZSTD,
            compression == Compression::Zstd,
        );
        self.wire_len = match compression {
            Compression::None => self.raw_len,
            _ => wire_len,
        };
        self
    }

    /// The same header for a compressed payload whose original bytes went through
    /// `shuffle` before they were compressed (`None`: they did not).
    ///
    /// # Panics
    /// If `shuffle` is given for a chunk that is not compressed: a shuffled payload
    /// always travels compressed (one that does not shrink travels as the original
    /// bytes).
    pub fn shuffled(mut self, shuffle: Option<Shuffle>) -> ChunkHeader {
        assert!(
            shuffle.is_none() || self.compression() != Compression::None,
            "a shuffled chunk must be compressed"
        );
        let log2 = shuffle.map_or(0, |s| s.elem().log2());
        self.flags.set(ChunkFlags::SHUFFLED, shuffle.is_some());
        self.flags.set(
            ChunkFlags::BYTE_SHUFFLED,
            matches!(shuffle, Some(Shuffle::Bytes(_))),
        );
        self.flags.set(ChunkFlags::ELEM_LOG2_LOW, log2 & 1 != 0);
        self.flags.set(ChunkFlags::ELEM_LOG2_HIGH, log2 & 2 != 0);
        self
    }

    /// The shuffle the original bytes went through before compression, or `None` if
    /// they did not.
    pub fn shuffle(&self) -> Option<Shuffle> {
        if !self.flags.contains(ChunkFlags::SHUFFLED) {
            return None;
        }
        let elem = ElementSize::from_log2(self.flags.bits() >> ELEM_LOG2_SHIFT);
        Some(if self.flags.contains(ChunkFlags::BYTE_SHUFFLED) {
            Shuffle::Bytes(elem)
        } else {
            Shuffle::Bits(elem)
        })
    }

    /// How the payload is compressed.
    pub fn compression(&self) -> Compression {
        if self.flags.contains(ChunkFlags::COMPRESSED_LZ4) {
            Compression::Lz4
        } else if self.flags.contains(ChunkFlags::COMPRESSED_ZSTD) {
            Compression::Zstd
        } else {
            Compression::None
        }
    }

    /// Whether this is a packed chunk.
    pub fn is_packed(&self) -> bool {
        self.flags.contains(ChunkFlags::PACKED)
    }

    /// Whether the chunk ends its file.
    pub fn is_last(&self) -> bool {
        self.flags.contains(ChunkFlags::LAST)
    }

    /// Bytes of the segment table that follow the header.
    pub fn table_len(&self) -> usize {
        usize::from(self.segments) * SEGMENT_BYTES
    }

    /// Whether `raw` (the decompressed payload) is what the header describes: the pair
    /// check of the checksum computed when the chunk was framed.
    pub fn verify(&self, raw: &[u8]) -> bool {
        raw.len() == self.raw_len as usize && chunk_checksum(raw) == self.checksum
    }

    /// Checks an unpacked chunk against the session's chunk size and the file's size from
    /// the manifest: aligned offset, the exact length of that chunk, `LAST` exactly on the
    /// file's last chunk. For a packed chunk, checks `raw_len ≤ chunk_bytes` only (segment
    /// lengths are checked against the manifest by the engine).
    ///
    /// # Errors
    /// [`DecodeError::Inconsistent`] naming the field that does not fit.
    pub fn validate_geometry(&self, chunk_bytes: u32, file_size: u64) -> Result<(), DecodeError> {
        let bad = |field, reason| Err(DecodeError::Inconsistent { field, reason });
        if !is_valid_chunk_bytes(chunk_bytes) {
            return bad("Chunk.chunk_bytes", "not a valid chunk size");
        }
        if self.raw_len > chunk_bytes {
            return bad("Chunk.raw_len", "larger than the session's chunk size");
        }
        if self.is_packed() {
            return Ok(());
        }
        if !self.offset.is_multiple_of(u64::from(chunk_bytes)) {
            return bad("Chunk.offset", "not a multiple of the chunk size");
        }
        let index = self.offset / u64::from(chunk_bytes);
        match chunk_range(file_size, chunk_bytes, index) {
            None => bad("Chunk.offset", "past the end of the file"),
            Some((_, len)) if len != self.raw_len => {
                bad("Chunk.raw_len", "not the length of this chunk of the file")
            }
            Some(_) if self.is_last() != (index + 1 == chunk_count(file_size, chunk_bytes)) => bad(
                "Chunk.flags",
                "LAST set on a chunk that does not end the file, or missing",
            ),
            Some(_) => Ok(()),
        }
    }

    /// Decodes a header whose chunk may be at most `max_chunk_bytes` (the session's chunk
    /// size): `raw_len` and `wire_len` are checked against it, so the caller may read
    /// `wire_len` payload bytes into a slot of `max_chunk_bytes`.
    ///
    /// # Errors
    /// [`DecodeError::LimitExceeded`] for `Chunk.wire_len` / `Chunk.raw_len` /
    /// `Chunk.segments`, and the other variants for malformed headers.
    pub fn decode_limited(
        buf: &[u8],
        max_chunk_bytes: u32,
    ) -> Result<(ChunkHeader, usize), DecodeError> {
        let (frame, _) = FrameHeader::decode(buf)?;
        if frame.frame_type != FrameType::Chunk {
            return Err(DecodeError::UnexpectedFrameType {
                expected: "Chunk",
                found: frame.frame_type.name(),
            });
        }
        let Some(fixed) = buf.get(FRAME_HEADER_BYTES..CHUNK_HEADER_BYTES) else {
            return Err(DecodeError::Incomplete {
                needed: CHUNK_HEADER_BYTES,
                have: buf.len(),
            });
        };
        let header =
            ChunkHeader::decode_fixed(frame, &mut Reader::new(fixed, "Chunk"), max_chunk_bytes)?;
        Ok((header, CHUNK_HEADER_BYTES))
    }

    /// Reads and validates the 36-byte fixed body.
    fn decode_fixed(
        frame: FrameHeader,
        r: &mut Reader<'_>,
        max_chunk_bytes: u32,
    ) -> Result<ChunkHeader, DecodeError> {
        let max = u64::from(max_chunk_bytes.min(MAX_CHUNK_BYTES));
        let flags = ChunkFlags::from_bits_retain(frame.flags);
        let h = ChunkHeader {
            file_id: r.u64("Chunk.file_id")?,
            offset: r.u64("Chunk.offset")?,
            raw_len: r.u32("Chunk.raw_len")?,
            wire_len: r.u32("Chunk.wire_len")?,
            checksum: r.u64("Chunk.checksum")?,
            segments: r.u16("Chunk.segments")?,
            flags,
        };
        let reserved = r.u16("Chunk.reserved")?;
        check_limit("Chunk.wire_len", h.wire_len.into(), max)?;
        check_limit("Chunk.raw_len", h.raw_len.into(), max)?;
        check_limit(
            "Chunk.segments",
            h.segments.into(),
            MAX_PACK_SEGMENTS.into(),
        )?;
        if reserved != 0 {
            return Err(DecodeError::InvalidValue {
                field: "Chunk.reserved",
                value: reserved.into(),
            });
        }
        if h.raw_len == 0 {
            return Err(DecodeError::InvalidValue {
                field: "Chunk.raw_len",
                value: 0,
            });
        }
        h.check_consistent(frame.body_len)?;
        Ok(h)
    }

    /// The relations between a decoded header's fields (codec flags and lengths, packed
    /// chunks' segments, offset and `LAST`) and its frame's `body_len`.
    fn check_consistent(&self, body_len: u32) -> Result<(), DecodeError> {
        let h = self;
        let bad = |field, reason| Err(DecodeError::Inconsistent { field, reason });
        if h.flags
            .contains(ChunkFlags::COMPRESSED_LZ4 | ChunkFlags::COMPRESSED_ZSTD)
        {
            return bad("Chunk.flags", "both LZ4 and zstd");
        }
        let elem_bits = ChunkFlags::ELEM_LOG2_LOW | ChunkFlags::ELEM_LOG2_HIGH;
        if !h.flags.contains(ChunkFlags::SHUFFLED) && h.flags.intersection(elem_bits).bits() != 0 {
            return bad("Chunk.flags", "an element size without SHUFFLED");
        }
        if !h.flags.contains(ChunkFlags::SHUFFLED) && h.flags.contains(ChunkFlags::BYTE_SHUFFLED) {
            return bad("Chunk.flags", "BYTE_SHUFFLED without SHUFFLED");
        }
        if h.compression() == Compression::None {
            if h.shuffle().is_some() {
                return bad("Chunk.flags", "SHUFFLED on an uncompressed chunk");
            }
            if h.wire_len != h.raw_len {
                return bad(
                    "Chunk.wire_len",
                    "differs from raw_len on an uncompressed chunk",
                );
            }
        } else if h.wire_len == 0 || h.wire_len > h.raw_len {
            return bad(
                "Chunk.wire_len",
                "compressed payload empty or larger than raw_len",
            );
        }
        if h.offset.checked_add(h.raw_len.into()).is_none() {
            return bad("Chunk.offset", "offset + raw_len overflows");
        }
        if h.is_packed() {
            if h.segments == 0 {
                return bad("Chunk.segments", "zero on a packed chunk");
            }
            if h.offset != 0 {
                return bad("Chunk.offset", "non-zero on a packed chunk");
            }
            if !h.is_last() {
                return bad("Chunk.flags", "packed chunk without LAST");
            }
        } else if h.segments != 0 {
            return bad("Chunk.segments", "non-zero on an unpacked chunk");
        }
        if body_len as usize != CHUNK_FIXED_BODY_BYTES + h.table_len() {
            return bad("Chunk.body_len", "does not match 36 + 12 × segments");
        }
        Ok(())
    }

    fn encode_fixed(&self, out: &mut Vec<u8>) {
        out.put_u64(self.file_id);
        out.put_u64(self.offset);
        out.put_u32(self.raw_len);
        out.put_u32(self.wire_len);
        out.put_u64(self.checksum);
        out.put_u16(self.segments);
        out.put_u16(0);
    }
}

impl Codec for ChunkHeader {
    /// Writes the 42-byte header; for a packed chunk the caller writes the table next
    /// ([`Segment::encode_table`]), then the payload.
    fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        FrameHeader {
            frame_type: FrameType::Chunk,
            flags: self.flags.bits(),
            body_len: u32::try_from(CHUNK_FIXED_BODY_BYTES + self.table_len()).unwrap_or(u32::MAX),
        }
        .encode(out);
        self.encode_fixed(out);
        debug_assert_eq!(out.len() - start, CHUNK_HEADER_BYTES);
    }

    fn decode(buf: &[u8]) -> Result<(ChunkHeader, usize), DecodeError> {
        ChunkHeader::decode_limited(buf, MAX_CHUNK_BYTES)
    }
}

impl Segment {
    /// Appends a segment table.
    pub fn encode_table(segments: &[Segment], out: &mut Vec<u8>) {
        for s in segments {
            out.put_u64(s.file_id);
            out.put_u32(s.len);
        }
    }

    /// Decodes the segment table of `header` from the front of `buf` into `out` (cleared
    /// first, so a caller can reuse one allocation); returns the bytes consumed.
    ///
    /// # Errors
    /// [`DecodeError::Incomplete`] if `buf` is shorter than the table;
    /// [`DecodeError::Inconsistent`] if the table does not describe exactly `raw_len` bytes
    /// of distinct files, sorted, the first being `header.file_id`.
    pub fn decode_table(
        buf: &[u8],
        header: &ChunkHeader,
        out: &mut Vec<Segment>,
    ) -> Result<usize, DecodeError> {
        out.clear();
        if !header.is_packed() {
            return Ok(0);
        }
        let len = header.table_len();
        let Some(table) = buf.get(..len) else {
            return Err(DecodeError::Incomplete {
                needed: len,
                have: buf.len(),
            });
        };
        let mut r = Reader::new(table, "Chunk");
        let mut sum = 0u64;
        out.reserve_exact(header.segments.into());
        for _ in 0..header.segments {
            let s = Segment {
                file_id: r.u64("Segment.file_id")?,
                len: r.u32("Segment.len")?,
            };
            if s.len == 0 {
                return Err(DecodeError::InvalidValue {
                    field: "Segment.len",
                    value: 0,
                });
            }
            match out.last() {
                None if s.file_id != header.file_id => {
                    return Err(DecodeError::Inconsistent {
                        field: "Segment.file_id",
                        reason: "first segment is not the chunk's file_id",
                    })
                }
                Some(prev) if s.file_id <= prev.file_id => {
                    return Err(DecodeError::Inconsistent {
                        field: "Segment.file_id",
                        reason: "not strictly increasing",
                    })
                }
                _ => {}
            }
            sum += u64::from(s.len);
            out.push(s);
        }
        if sum != u64::from(header.raw_len) {
            return Err(DecodeError::Inconsistent {
                field: "Segment.len",
                reason: "segment lengths do not add up to raw_len",
            });
        }
        Ok(len)
    }
}

impl Chunk {
    /// An uncompressed packed chunk of whole small files whose bytes, back to back in
    /// `segments` order, are `raw`. `segments` must be sorted by `file_id`.
    pub fn packed(segments: Vec<Segment>, raw: &[u8]) -> Chunk {
        let mut header =
            ChunkHeader::plain(segments.first().map_or(0, |s| s.file_id), 0, raw, true);
        header.flags.set(ChunkFlags::PACKED, true);
        header.segments = u16::try_from(segments.len()).unwrap_or(u16::MAX);
        Chunk { header, segments }
    }

    /// Decodes header and table with chunks limited to `max_chunk_bytes`.
    ///
    /// # Errors
    /// As [`ChunkHeader::decode_limited`] and [`Segment::decode_table`].
    pub fn decode_limited(buf: &[u8], max_chunk_bytes: u32) -> Result<(Chunk, usize), DecodeError> {
        let (header, n) = ChunkHeader::decode_limited(buf, max_chunk_bytes)?;
        let mut segments = Vec::new();
        let m = Segment::decode_table(&buf[n..], &header, &mut segments)?;
        Ok((Chunk { header, segments }, n + m))
    }

    /// Decodes a complete body (for [`crate::Frame::decode_limited`]).
    pub(crate) fn decode_body(
        frame: FrameHeader,
        body: &[u8],
        max_chunk_bytes: u32,
    ) -> Result<Chunk, DecodeError> {
        let (fixed, table) = body.split_at(CHUNK_FIXED_BODY_BYTES.min(body.len()));
        let header =
            ChunkHeader::decode_fixed(frame, &mut Reader::new(fixed, "Chunk"), max_chunk_bytes)?;
        let mut segments = Vec::new();
        Segment::decode_table(table, &header, &mut segments)?;
        Ok(Chunk { header, segments })
    }
}

impl Codec for Chunk {
    fn encode(&self, out: &mut Vec<u8>) {
        let header = ChunkHeader {
            segments: u16::try_from(self.segments.len()).unwrap_or(u16::MAX),
            ..self.header
        };
        encode_frame(out, FrameType::Chunk, header.flags.bits(), |o| {
            header.encode_fixed(o);
            Segment::encode_table(&self.segments, o);
        });
    }

    fn decode(buf: &[u8]) -> Result<(Chunk, usize), DecodeError> {
        Chunk::decode_limited(buf, MAX_CHUNK_BYTES)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_header_in_parts_is_the_plain_header_of_the_whole() {
        let raw: Vec<u8> = (0..5000u32).map(|i| (i % 253).to_le_bytes()[0]).collect();
        let whole = ChunkHeader::plain(1, 4096, &raw, true);
        let (head, tail) = raw.split_at(104);
        assert_eq!(
            ChunkHeader::plain_parts(1, 4096, &[head, tail], true),
            whole
        );
        assert_eq!(ChunkHeader::plain_parts(1, 4096, &[&[], &raw], true), whole);
        assert!(whole.verify(&raw));
    }

    #[test]
    fn header_is_42_bytes_and_payload_untouched() {
        let raw = vec![7u8; 1000];
        let h = ChunkHeader::plain(3, 0, &raw, true);
        let mut wire = Vec::new();
        h.encode(&mut wire);
        assert_eq!(wire.len(), 42);
        wire.extend_from_slice(&raw);
        let (d, n) = ChunkHeader::decode(&wire).unwrap();
        assert_eq!((d, n), (h, 42));
        assert!(d.verify(&wire[n..n + d.wire_len as usize]));
    }

    #[test]
    fn wire_len_over_session_limit_is_rejected() {
        let raw = vec![0u8; 70_000];
        let mut wire = Vec::new();
        ChunkHeader::plain(1, 0, &raw, true).encode(&mut wire);
        let e = ChunkHeader::decode_limited(&wire, 65_536).unwrap_err();
        assert_eq!(
            e,
            DecodeError::LimitExceeded {
                field: "Chunk.wire_len",
                value: 70_000,
                limit: 65_536
            }
        );
        assert!(e.to_string().contains("Chunk.wire_len") && e.to_string().contains("65536"));
    }

    #[test]
    fn packed_round_trip_and_table_checks() {
        let segs = vec![
            Segment { file_id: 5, len: 3 },
            Segment { file_id: 9, len: 2 },
        ];
        let c = Chunk::packed(segs, b"abcde");
        let mut wire = Vec::new();
        c.encode(&mut wire);
        assert_eq!(wire.len(), 42 + 24);
        assert_eq!(Chunk::decode(&wire).unwrap(), (c.clone(), wire.len()));
        // Lengths not adding up.
        let mut bad = c.clone();
        bad.segments[1].len = 3;
        let mut w = Vec::new();
        bad.encode(&mut w);
        assert!(matches!(
            Chunk::decode(&w),
            Err(DecodeError::Inconsistent {
                field: "Segment.len",
                ..
            })
        ));
        // Unsorted.
        let mut bad = c;
        bad.segments[1].file_id = 1;
        let mut w = Vec::new();
        bad.encode(&mut w);
        assert!(matches!(
            Chunk::decode(&w),
            Err(DecodeError::Inconsistent {
                field: "Segment.file_id",
                ..
            })
        ));
    }

    #[test]
    fn geometry_checks() {
        let cb = 1 << 16;
        let size = 3 * u64::from(cb) + 10;
        let full = vec![0u8; cb as usize];
        let h = ChunkHeader::plain(1, u64::from(cb), &full, false);
        h.validate_geometry(cb, size).unwrap();
        let tail = ChunkHeader::plain(1, 3 * u64::from(cb), &[0; 10], true);
        tail.validate_geometry(cb, size).unwrap();
        assert!(ChunkHeader::plain(1, 3 * u64::from(cb), &[0; 10], false)
            .validate_geometry(cb, size)
            .is_err());
        assert!(ChunkHeader::plain(1, 5, &[0; 10], false)
            .validate_geometry(cb, size)
            .is_err());
        assert!(ChunkHeader::plain(1, 4 * u64::from(cb), &[0; 10], true)
            .validate_geometry(cb, size)
            .is_err());
    }

    #[test]
    fn shuffled_chunks_carry_their_shuffle_and_element_size() {
        let raw = vec![1u8; 100];
        for elem in ElementSize::ALL {
            for shuffle in [Shuffle::Bits(elem), Shuffle::Bytes(elem)] {
                let h = ChunkHeader::plain(1, 0, &raw, true)
                    .compressed(Compression::Lz4, 10)
                    .shuffled(Some(shuffle));
                let mut w = Vec::new();
                h.encode(&mut w);
                let (d, _) = ChunkHeader::decode(&w).unwrap();
                assert_eq!(
                    (d.shuffle(), d.compression()),
                    (Some(shuffle), Compression::Lz4)
                );
                assert!(d.is_last());
                let cleared = d.shuffled(None);
                assert_eq!(cleared.shuffle(), None);
                assert_eq!(cleared.flags, ChunkFlags::LAST | ChunkFlags::COMPRESSED_LZ4);
            }
        }
        let plain = ChunkHeader::plain(1, 0, &raw, false).compressed(Compression::Zstd, 9);
        assert_eq!(plain.shuffle(), None);
        assert_eq!(plain.shuffled(None), plain);
    }

    /// A header whose flags byte is `flags`, otherwise a valid compressed chunk.
    fn with_flags(flags: u8) -> Vec<u8> {
        let raw = vec![1u8; 100];
        let mut w = Vec::new();
        ChunkHeader::plain(1, 0, &raw, true)
            .compressed(Compression::Lz4, 10)
            .encode(&mut w);
        w[1] = flags;
        w
    }

    #[test]
    fn shuffle_without_compression_is_rejected() {
        let last = ChunkFlags::LAST.bits();
        let shuffled = ChunkFlags::SHUFFLED.bits() | ChunkFlags::ELEM_LOG2_LOW.bits();
        // SHUFFLED on a chunk that is not compressed (wire_len = raw_len, as it must be).
        let raw = vec![1u8; 100];
        let mut w = Vec::new();
        ChunkHeader::plain(1, 0, &raw, true).encode(&mut w);
        w[1] = last | shuffled;
        assert_eq!(
            ChunkHeader::decode(&w),
            Err(DecodeError::Inconsistent {
                field: "Chunk.flags",
                reason: "SHUFFLED on an uncompressed chunk"
            })
        );
        // An element size without SHUFFLED.
        for bits in [ChunkFlags::ELEM_LOG2_LOW, ChunkFlags::ELEM_LOG2_HIGH] {
            let w = with_flags(last | ChunkFlags::COMPRESSED_LZ4.bits() | bits.bits());
            assert!(matches!(
                ChunkHeader::decode(&w),
                Err(DecodeError::Inconsistent {
                    field: "Chunk.flags",
                    ..
                })
            ));
        }
        // BYTE_SHUFFLED without SHUFFLED.
        let byte = ChunkFlags::BYTE_SHUFFLED.bits();
        let w = with_flags(last | ChunkFlags::COMPRESSED_LZ4.bits() | byte);
        assert_eq!(
            ChunkHeader::decode(&w),
            Err(DecodeError::Inconsistent {
                field: "Chunk.flags",
                reason: "BYTE_SHUFFLED without SHUFFLED"
            })
        );
        // And the valid combinations decode.
        let w = with_flags(last | ChunkFlags::COMPRESSED_LZ4.bits() | shuffled);
        assert_eq!(
            ChunkHeader::decode(&w).unwrap().0.shuffle(),
            Some(Shuffle::Bits(ElementSize::Two))
        );
        let w = with_flags(last | ChunkFlags::COMPRESSED_ZSTD.bits() | shuffled | byte);
        assert_eq!(
            ChunkHeader::decode(&w).unwrap().0.shuffle(),
            Some(Shuffle::Bytes(ElementSize::Two))
        );
    }

    #[test]
    #[should_panic(expected = "must be compressed")]
    fn shuffling_an_uncompressed_header_is_a_bug() {
        let _ = ChunkHeader::plain(1, 0, &[1; 10], true)
            .shuffled(Some(Shuffle::Bits(ElementSize::Two)));
    }

    #[test]
    fn compressed_rules() {
        let raw = vec![1u8; 100];
        let h = ChunkHeader::plain(1, 0, &raw, true).compressed(Compression::Zstd, 10);
        let mut w = Vec::new();
        h.encode(&mut w);
        assert_eq!(
            ChunkHeader::decode(&w).unwrap().0.compression(),
            Compression::Zstd
        );
        let h = ChunkHeader::plain(1, 0, &raw, true).compressed(Compression::Lz4, 101);
        let mut w = Vec::new();
        h.encode(&mut w);
        assert!(matches!(
            ChunkHeader::decode(&w),
            Err(DecodeError::Inconsistent {
                field: "Chunk.wire_len",
                ..
            })
        ));
    }

    #[test]
    fn a_session_permits_the_flags_it_negotiated_and_asked_for() {
        let all = Capabilities::PACKED
            .union(Capabilities::COMPRESS_LZ4)
            .union(Capabilities::COMPRESS_ZSTD)
            .union(Capabilities::SHUFFLE)
            .union(Capabilities::BYTE_SHUFFLE);
        let plain = ChunkFlags::permitted(all, false);
        assert_eq!(plain, ChunkFlags::LAST.union(ChunkFlags::PACKED));
        assert_eq!(
            ChunkFlags::permitted(Capabilities::EMPTY, true),
            ChunkFlags::LAST
        );
        assert_eq!(
            ChunkFlags::permitted(all, true),
            ChunkFlags::ANY,
            "every flag"
        );
        let lz4 = ChunkFlags::permitted(Capabilities::COMPRESS_LZ4, true);
        assert_eq!(lz4, ChunkFlags::LAST.union(ChunkFlags::COMPRESSED_LZ4));
        let bits = ChunkFlags::permitted(
            Capabilities::COMPRESS_ZSTD.union(Capabilities::SHUFFLE),
            true,
        );
        assert!(bits.contains(ChunkFlags::SHUFFLED.union(ChunkFlags::ELEM_LOG2_HIGH)));
        assert!(!bits.contains(ChunkFlags::BYTE_SHUFFLED) && !bits.contains(ChunkFlags::PACKED));
        let bytes_alone = ChunkFlags::permitted(Capabilities::BYTE_SHUFFLE, true);
        assert_eq!(
            bytes_alone,
            ChunkFlags::LAST,
            "byte-shuffle needs SHUFFLE too"
        );
    }
}
