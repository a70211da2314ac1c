//! Chunk geometry, per-chunk checksums and per-file digests.
//!
//! * A file of `size` bytes is cut into `chunk_count(size, chunk_bytes)` chunks; chunk `i`
//!   starts at `i * chunk_bytes` and is `chunk_bytes` long, except the last, which holds the
//!   rest. Offsets are file-relative, so they do not depend on the number of streams.
//! * Each chunk carries `chunk_checksum` (xxh3-64) of its *original* bytes.
//! * A file's digest is xxh3-128 over the ordered `(index u64 LE, checksum u64 LE)` pairs of
//!   its chunks, so it can be computed while chunks arrive in any order, without reading
//!   the file again, in 8 bytes of memory a chunk.

use std::hash::Hasher as _;
use twox_hash::xxhash3_64::{RawHasher, SecretBuffer, DEFAULT_SECRET_LENGTH};
use twox_hash::XxHash3_64;
use xxhash_rust::xxh3::Xxh3;

use crate::limits::{MAX_CHUNK_BYTES, MAX_FILE_CHUNKS, MIN_CHUNK_BYTES};

/// The xxh3-64 checksum of a chunk's original (uncompressed) bytes.
///
/// Computed by `twox-hash`, which picks AVX2 at run time where the CPU has it: a
/// portable build of `xxhash-rust` hashes with SSE2 only, at 8.7-13.3 GB/s against
/// 16.0-23.2 on the build VM, and the checksum is paid on both sides for every byte
/// moved. Both compute the same function (a test holds them equal), so peers built with
/// either agree.
///
/// ```
/// let c = sluice_wire::chunk_checksum(b"hello");
/// assert_eq!(c, sluice_wire::chunk_checksum(b"hello"));
/// assert_ne!(c, sluice_wire::chunk_checksum(b"hellO"));
/// ```
pub fn chunk_checksum(data: &[u8]) -> u64 {
    XxHash3_64::oneshot(data)
}

/// [`chunk_checksum`] of the concatenation of `parts`, hashed in one streaming pass
/// without joining them (a record whose head is in a slot and whose payload is in the
/// caller's memory): the same value for the same bytes however they are split.
///
/// ```
/// let c = sluice_wire::chunk_checksum_parts(&[b"hel", b"lo"]);
/// assert_eq!(c, sluice_wire::chunk_checksum(b"hello"));
/// ```
pub fn chunk_checksum_parts(parts: &[&[u8]]) -> u64 {
    let mut h = ChunkChecksum::new();
    for p in parts {
        h.update(p);
    }
    h.value()
}

/// [`chunk_checksum`] computed a piece at a time, as the pieces come (a chunk read
/// through a small buffer, then sent from the page cache): the same value for the same
/// bytes however they are split, with the same AVX2 code, and nothing allocated.
///
/// ```
/// let mut h = sluice_wire::ChunkChecksum::new();
/// let bytes: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
/// for piece in bytes.chunks(333) {
///     h.update(piece);
/// }
/// assert_eq!(h.value(), sluice_wire::chunk_checksum(&bytes));
/// ```
#[derive(Clone)]
pub struct ChunkChecksum(RawHasher<&'static [u8; DEFAULT_SECRET_LENGTH]>);

impl ChunkChecksum {
    /// A checksum of no bytes yet.
    pub fn new() -> ChunkChecksum {
        ChunkChecksum(RawHasher::new(SecretBuffer::default()))
    }

    /// Adds the next bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.write(bytes);
    }

    /// The checksum of every byte added so far.
    pub fn value(&self) -> u64 {
        self.0.finish()
    }
}

impl Default for ChunkChecksum {
    fn default() -> Self {
        ChunkChecksum::new()
    }
}

impl std::fmt::Debug for ChunkChecksum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkChecksum").finish_non_exhaustive()
    }
}

/// Whether `chunk_bytes` is a valid session chunk size: a power of two in
/// [`MIN_CHUNK_BYTES`]`..=`[`MAX_CHUNK_BYTES`].
pub fn is_valid_chunk_bytes(chunk_bytes: u32) -> bool {
    chunk_bytes.is_power_of_two() && (MIN_CHUNK_BYTES..=MAX_CHUNK_BYTES).contains(&chunk_bytes)
}

/// How many chunks a file of `size` bytes has: `ceil(size / chunk_bytes)`; 0 for an empty
/// file (it needs no data: the sink creates it from its manifest entry).
///
/// `chunk_bytes` should be valid ([`is_valid_chunk_bytes`]); 0 is treated as 1 rather than
/// panicking.
pub fn chunk_count(size: u64, chunk_bytes: u32) -> u64 {
    size.div_ceil(u64::from(chunk_bytes.max(1)))
}

/// Offset and length of chunk `index` of a file of `size` bytes, or `None` past the end.
///
/// ```
/// use sluice_wire::chunk_range;
/// let mib = 1 << 20;
/// assert_eq!(chunk_range(10 * mib, 4 << 20, 2), Some((8 * mib, 2 << 20)));
/// assert_eq!(chunk_range(10 * mib, 4 << 20, 3), None);
/// ```
pub fn chunk_range(size: u64, chunk_bytes: u32, index: u64) -> Option<(u64, u32)> {
    let cb = u64::from(chunk_bytes.max(1));
    let offset = index.checked_mul(cb)?;
    if offset >= size {
        return None;
    }
    let len = (size - offset).min(cb);
    // len ≤ chunk_bytes, which is a u32.
    Some((offset, u32::try_from(len).ok()?))
}

/// The index of the chunk starting at `offset`, or `None` if `offset` is not a multiple of
/// `chunk_bytes`.
pub fn chunk_index(offset: u64, chunk_bytes: u32) -> Option<u64> {
    let cb = u64::from(chunk_bytes.max(1));
    offset.is_multiple_of(cb).then_some(offset / cb)
}

/// Why a [`FileDigest`] could not take a chunk or produce a digest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DigestError {
    /// The file has more chunks than [`MAX_FILE_CHUNKS`] (memory bound).
    #[error("file has {chunks} chunks, limit {limit}: use a larger chunk size")]
    TooManyChunks {
        /// Chunks asked for.
        chunks: u64,
        /// [`MAX_FILE_CHUNKS`].
        limit: u64,
    },
    /// A chunk index past the end of the file.
    #[error("chunk index {index} out of range (file has {chunks} chunks)")]
    OutOfRange {
        /// The index.
        index: u64,
        /// Chunks in the file.
        chunks: u64,
    },
    /// The same chunk was added twice with different checksums.
    #[error("chunk {index} added twice with different checksums ({first:#018x}, {second:#018x})")]
    Conflict {
        /// The index.
        index: u64,
        /// Checksum added first.
        first: u64,
        /// Checksum added second.
        second: u64,
    },
    /// `finish` before every chunk was added.
    #[error("{missing} of {chunks} chunks missing")]
    Incomplete {
        /// Chunks not yet added.
        missing: u64,
        /// Chunks in the file.
        chunks: u64,
    },
}

/// Builds a file's digest from chunk checksums added in any order.
///
/// ```
/// use sluice_wire::{chunk_checksum, FileDigest};
/// let chunks = [&b"first"[..], b"second", b"third"];
/// let mut d = FileDigest::new(3)?;
/// for i in [2u64, 0, 1] {
///     d.add(i, chunk_checksum(chunks[i as usize]))?;
/// }
/// let sums: Vec<u64> = chunks.iter().map(|c| chunk_checksum(c)).collect();
/// assert_eq!(d.finish()?, FileDigest::of_ordered(&sums));
/// # Ok::<(), sluice_wire::DigestError>(())
/// ```
#[derive(Debug, Clone)]
pub struct FileDigest {
    checksums: Vec<u64>,
    present: Vec<u64>,
    added: u64,
}

impl FileDigest {
    /// A digest for a file of `chunk_count` chunks; allocates 8 bytes (plus one bit) a chunk.
    ///
    /// # Errors
    /// [`DigestError::TooManyChunks`] above [`MAX_FILE_CHUNKS`].
    pub fn new(chunk_count: u64) -> Result<FileDigest, DigestError> {
        if chunk_count > MAX_FILE_CHUNKS {
            return Err(DigestError::TooManyChunks {
                chunks: chunk_count,
                limit: MAX_FILE_CHUNKS,
            });
        }
        // chunk_count ≤ 2^22, fits usize everywhere.
        let n = usize::try_from(chunk_count).unwrap_or(0);
        Ok(FileDigest {
            checksums: vec![0; n],
            present: vec![0; n.div_ceil(64)],
            added: 0,
        })
    }

    /// Chunks in the file.
    pub fn chunk_count(&self) -> u64 {
        self.checksums.len() as u64
    }

    /// Records chunk `index`'s checksum. Adding the same pair again is a no-op (a chunk
    /// re-sent after a lost ack).
    ///
    /// # Errors
    /// [`DigestError::OutOfRange`] or [`DigestError::Conflict`].
    pub fn add(&mut self, index: u64, checksum: u64) -> Result<(), DigestError> {
        let chunks = self.chunk_count();
        let i = usize::try_from(index)
            .ok()
            .filter(|&i| i < self.checksums.len())
            .ok_or(DigestError::OutOfRange { index, chunks })?;
        let (word, bit) = (i / 64, 1u64 << (i % 64));
        if self.present[word] & bit != 0 {
            let first = self.checksums[i];
            return if first == checksum {
                Ok(())
            } else {
                Err(DigestError::Conflict {
                    index,
                    first,
                    second: checksum,
                })
            };
        }
        self.present[word] |= bit;
        self.checksums[i] = checksum;
        self.added += 1;
        Ok(())
    }

    /// Chunks not yet added.
    pub fn missing(&self) -> u64 {
        self.chunk_count() - self.added
    }

    /// Whether every chunk was added.
    pub fn is_complete(&self) -> bool {
        self.missing() == 0
    }

    /// The 16-byte file digest.
    ///
    /// # Errors
    /// [`DigestError::Incomplete`] if a chunk is missing.
    pub fn finish(&self) -> Result<[u8; 16], DigestError> {
        if !self.is_complete() {
            return Err(DigestError::Incomplete {
                missing: self.missing(),
                chunks: self.chunk_count(),
            });
        }
        Ok(FileDigest::of_ordered(&self.checksums))
    }

    /// The digest of a file whose chunk checksums are given in index order.
    pub fn of_ordered(checksums: &[u64]) -> [u8; 16] {
        let mut h = Xxh3::new();
        for (i, c) in checksums.iter().enumerate() {
            let mut pair = [0u8; 16];
            pair[..8].copy_from_slice(&(i as u64).to_le_bytes());
            pair[8..].copy_from_slice(&c.to_le_bytes());
            h.update(&pair);
        }
        // XXH128 canonical form: big-endian, as `xxhsum -H2` prints it.
        h.digest128().to_be_bytes()
    }

    /// The digest of a whole file held in memory (tests, `--verify` of small files).
    pub fn of_bytes(data: &[u8], chunk_bytes: u32) -> [u8; 16] {
        let sums: Vec<u64> = data
            .chunks(chunk_bytes.max(1) as usize)
            .map(chunk_checksum)
            .collect();
        FileDigest::of_ordered(&sums)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chunk_checksum_is_xxhash_rusts_xxh3_64_at_every_length_class() {
        let data: Vec<u8> = (0..(1usize << 20) + 4099)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13).to_le_bytes()[0])
            .collect();
        let lengths = (0..=300).chain([1023, 1024, 1025, 4096, 65_536 + 7, data.len()]);
        for len in lengths {
            for start in [0, 1, 63] {
                let part = &data[start..start + len.min(data.len() - start)];
                assert_eq!(
                    chunk_checksum(part),
                    xxhash_rust::xxh3::xxh3_64(part),
                    "{} bytes from {start}",
                    part.len()
                );
                assert_eq!(chunk_checksum_parts(&[part]), chunk_checksum(part));
            }
        }
    }

    #[test]
    fn geometry() {
        let cb = 4 << 20;
        assert_eq!(chunk_count(0, cb), 0);
        assert_eq!(chunk_count(1, cb), 1);
        assert_eq!(chunk_count(u64::from(cb), cb), 1);
        assert_eq!(chunk_count(u64::from(cb) + 1, cb), 2);
        assert_eq!(chunk_count(u64::MAX, cb), u64::MAX / u64::from(cb) + 1);
        assert_eq!(chunk_range(0, cb, 0), None);
        assert_eq!(chunk_range(5, cb, 0), Some((0, 5)));
        assert_eq!(chunk_range(u64::MAX, cb, u64::MAX), None);
        assert_eq!(chunk_index(8 << 20, cb), Some(2));
        assert_eq!(chunk_index(1, cb), None);
        assert_eq!(chunk_count(10, 0), 10);
        assert!(is_valid_chunk_bytes(cb));
        assert!(!is_valid_chunk_bytes(3 << 20));
        assert!(!is_valid_chunk_bytes(MAX_CHUNK_BYTES * 2));
        assert!(!is_valid_chunk_bytes(0));
    }

    #[test]
    fn a_checksum_in_parts_is_the_checksum_of_the_whole() {
        // Around xxh3's short-input (16, 128, 240 bytes) and stripe/block boundaries.
        let data: Vec<u8> = (0..70_000u32)
            .map(|i| (i * 7 + i / 251).to_le_bytes()[0])
            .collect();
        for len in [0, 1, 16, 17, 128, 129, 240, 241, 1024, 1025, 65_536, 70_000] {
            let whole = chunk_checksum(&data[..len]);
            for cut in [0, 1, len / 3, len / 2, len.saturating_sub(1), len] {
                let (a, b) = data[..len].split_at(cut.min(len));
                assert_eq!(chunk_checksum_parts(&[a, b]), whole, "len {len} cut {cut}");
            }
            assert_eq!(chunk_checksum_parts(&[&data[..len]]), whole);
        }
        assert_ne!(chunk_checksum_parts(&[b"ab", b"c"]), chunk_checksum(b"abd"));
    }

    #[test]
    fn digest_is_order_independent_and_idempotent() {
        let sums = [7u64, 9, 11, 13];
        let mut d = FileDigest::new(4).unwrap();
        for i in [3usize, 1, 0, 2, 1] {
            d.add(i as u64, sums[i]).unwrap();
        }
        assert_eq!(d.finish().unwrap(), FileDigest::of_ordered(&sums));
        assert_ne!(
            FileDigest::of_ordered(&sums),
            FileDigest::of_ordered(&[9, 7, 11, 13])
        );
    }

    #[test]
    fn digest_errors() {
        assert!(matches!(
            FileDigest::new(MAX_FILE_CHUNKS + 1),
            Err(DigestError::TooManyChunks { .. })
        ));
        let mut d = FileDigest::new(2).unwrap();
        assert_eq!(
            d.add(2, 0),
            Err(DigestError::OutOfRange {
                index: 2,
                chunks: 2
            })
        );
        d.add(0, 1).unwrap();
        assert!(matches!(
            d.add(0, 2),
            Err(DigestError::Conflict { index: 0, .. })
        ));
        assert_eq!(
            d.finish(),
            Err(DigestError::Incomplete {
                missing: 1,
                chunks: 2
            })
        );
        assert_eq!(
            FileDigest::new(0).unwrap().finish().unwrap(),
            FileDigest::of_ordered(&[])
        );
    }

    #[test]
    fn of_bytes_matches_chunked() {
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 31).to_le_bytes()[0]).collect();
        let cb = MIN_CHUNK_BYTES;
        let mut d = FileDigest::new(chunk_count(data.len() as u64, cb)).unwrap();
        for i in 0..d.chunk_count() {
            let (off, len) = chunk_range(data.len() as u64, cb, i).unwrap();
            let off = usize::try_from(off).unwrap();
            let c = &data[off..off + len as usize];
            d.add(i, chunk_checksum(c)).unwrap();
        }
        assert_eq!(d.finish().unwrap(), FileDigest::of_bytes(&data, cb));
    }
}
