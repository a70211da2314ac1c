//! Manifest and resume frames: `Manifest`, `ManifestEnd`, `Have`.

use super::Body;
use crate::codec::{check_limit, FrameType, Put, Reader};
use crate::error::DecodeError;
use crate::limits::{
    MAX_CONTROL_BODY_BYTES, MAX_FILE_CHUNKS, MAX_MANIFEST_ENTRIES, MAX_PATH_BYTES,
    MAX_SYMLINK_TARGET_BYTES,
};
use crate::path::RelPath;

/// What a manifest entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileKind {
    /// A regular file; its bytes travel in chunks.
    File = 0,
    /// A directory; created by the sink, no data.
    Dir = 1,
    /// A symbolic link; its target travels in the entry, no data.
    Symlink = 2,
}

/// One file, directory or symlink of the source tree.
///
/// Wire (33 bytes + strings): `file_id u64`, `kind u8`, `mode u32`, `size u64`,
/// `mtime_ns i64`, `path_len u16`, `target_len u16`, `path [path_len]`,
/// `target [target_len]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileEntry {
    /// Names the file in chunks, `Have`, `FileDone`, ...; unique within a session.
    pub file_id: u64,
    /// Path relative to the transfer's root.
    pub path: RelPath,
    /// File, directory or symlink.
    pub kind: FileKind,
    /// Bytes; 0 for directories and symlinks.
    pub size: u64,
    /// Permission bits (`mode & 0o7777`); the type is in `kind`.
    pub mode: u32,
    /// Modification time, nanoseconds since the Unix epoch.
    pub mtime_ns: i64,
    /// The link's target (any string without NUL, ≤ 4096 bytes, not checked as a path:
    /// it is stored, never followed, by the sink); `Some` exactly for symlinks.
    pub symlink_target: Option<String>,
}

/// Fixed bytes of an encoded [`FileEntry`].
const ENTRY_FIXED_BYTES: usize = 33;

impl FileEntry {
    /// Bytes of this entry inside a `Manifest` body.
    pub fn encoded_len(&self) -> usize {
        ENTRY_FIXED_BYTES
            + self.path.as_str().len()
            + self.symlink_target.as_ref().map_or(0, String::len)
    }

    fn encode(&self, out: &mut Vec<u8>) {
        let target = self.symlink_target.as_deref().unwrap_or("");
        out.put_u64(self.file_id);
        out.push(self.kind as u8);
        out.put_u32(self.mode);
        out.put_u64(self.size);
        out.put_i64(self.mtime_ns);
        out.put_u16(u16::try_from(self.path.as_str().len()).unwrap_or(u16::MAX));
        out.put_u16(u16::try_from(target.len()).unwrap_or(u16::MAX));
        out.extend_from_slice(self.path.as_str().as_bytes());
        out.extend_from_slice(target.as_bytes());
    }

    fn decode(r: &mut Reader<'_>) -> Result<FileEntry, DecodeError> {
        let file_id = r.u64("FileEntry.file_id")?;
        let kind = FileKind::decode(r.u8("FileEntry.kind")?)?;
        let mode = r.u32("FileEntry.mode")?;
        if mode & !0o7777 != 0 {
            return Err(DecodeError::InvalidValue {
                field: "FileEntry.mode",
                value: mode.into(),
            });
        }
        let size = r.u64("FileEntry.size")?;
        let mtime_ns = r.i64("FileEntry.mtime_ns")?;
        let path_len = r.u16("FileEntry.path_len")?;
        let target_len = r.u16("FileEntry.target_len")?;
        let path = r.str_of_len(path_len.into(), MAX_PATH_BYTES, "FileEntry.path")?;
        let path = RelPath::parse(path).map_err(|source| DecodeError::Path {
            field: "FileEntry.path",
            source,
        })?;
        let target = r.str_of_len(
            target_len.into(),
            MAX_SYMLINK_TARGET_BYTES,
            "FileEntry.symlink_target",
        )?;
        let symlink_target = kind.symlink_target(target)?;
        if kind != FileKind::File && size != 0 {
            return Err(DecodeError::Inconsistent {
                field: "FileEntry.size",
                reason: "non-zero for a directory or symlink",
            });
        }
        Ok(FileEntry {
            file_id,
            path,
            kind,
            size,
            mode,
            mtime_ns,
            symlink_target,
        })
    }
}

impl FileKind {
    fn decode(value: u8) -> Result<FileKind, DecodeError> {
        match value {
            0 => Ok(FileKind::File),
            1 => Ok(FileKind::Dir),
            2 => Ok(FileKind::Symlink),
            v => Err(DecodeError::InvalidValue {
                field: "FileEntry.kind",
                value: v.into(),
            }),
        }
    }

    /// An entry's decoded link `target` as the entry holds it: required (non-empty,
    /// without NUL) for a symlink, absent for a file or directory.
    fn symlink_target(self, target: &str) -> Result<Option<String>, DecodeError> {
        let inconsistent = |reason| DecodeError::Inconsistent {
            field: "FileEntry.symlink_target",
            reason,
        };
        match self {
            FileKind::Symlink if target.is_empty() => Err(inconsistent("empty for a symlink")),
            FileKind::Symlink if target.contains('\0') => Err(inconsistent("contains NUL")),
            FileKind::Symlink => Ok(Some(target.to_owned())),
            FileKind::File | FileKind::Dir if !target.is_empty() => {
                Err(inconsistent("present on a file or directory"))
            }
            FileKind::File | FileKind::Dir => Ok(None),
        }
    }
}

/// Source → sink: a batch of entries, sent while the source is still scanning.
///
/// Body: `count u16` (1..=1024), then `count` entries. The body is at most 1 MiB; build it
/// with [`Manifest::try_push`], which refuses an entry that would not fit.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Manifest {
    /// The entries, in scan order; a directory comes before anything inside it.
    pub entries: Vec<FileEntry>,
}

impl Manifest {
    /// An empty batch.
    pub fn new() -> Manifest {
        Manifest::default()
    }

    /// Bytes of the encoded body.
    pub fn encoded_body_len(&self) -> usize {
        2 + self
            .entries
            .iter()
            .map(FileEntry::encoded_len)
            .sum::<usize>()
    }

    /// Appends `entry` if the batch stays within its count and byte limits.
    ///
    /// # Errors
    /// Gives `entry` back when the batch is full: send it, then start a new one.
    pub fn try_push(&mut self, entry: FileEntry) -> Result<(), FileEntry> {
        if has_room(
            self.entries.len(),
            self.encoded_body_len(),
            entry.encoded_len(),
        ) {
            self.entries.push(entry);
            Ok(())
        } else {
            Err(entry)
        }
    }

    /// Whether the batch has no entry (an empty batch must not be sent).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Whether a manifest of `entries` entries and a `body_len`-byte body stays within the
/// count and byte limits with one more entry of `len` bytes.
fn has_room(entries: usize, body_len: usize, len: usize) -> bool {
    entries < MAX_MANIFEST_ENTRIES && body_len + len <= MAX_CONTROL_BODY_BYTES as usize
}

/// A [`Manifest`] being filled, which keeps its encoded size as it grows: a push
/// measures the one entry, where [`Manifest::try_push`] sums the whole batch (a batch
/// of 1,024 entries filled that way visits half a million entries).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestBatch {
    manifest: Manifest,
    /// `manifest.encoded_body_len()`, kept up to date by every push and take.
    body_len: usize,
}

impl Default for ManifestBatch {
    fn default() -> ManifestBatch {
        ManifestBatch::new()
    }
}

impl ManifestBatch {
    /// An empty batch.
    pub fn new() -> ManifestBatch {
        let manifest = Manifest::new();
        let body_len = manifest.encoded_body_len();
        ManifestBatch { manifest, body_len }
    }

    /// Appends `entry` if the batch stays within its count and byte limits: exactly
    /// the entries [`Manifest::try_push`] would take.
    ///
    /// # Errors
    /// Gives `entry` back when the batch is full: take it, send it, push again.
    pub fn try_push(&mut self, entry: FileEntry) -> Result<(), FileEntry> {
        let len = entry.encoded_len();
        if !has_room(self.manifest.entries.len(), self.body_len, len) {
            return Err(entry);
        }
        self.manifest.entries.push(entry);
        self.body_len += len;
        Ok(())
    }

    /// Whether the batch has no entry (an empty batch must not be sent).
    pub fn is_empty(&self) -> bool {
        self.manifest.is_empty()
    }

    /// The batch so far, leaving this one empty.
    pub fn take(&mut self) -> Manifest {
        std::mem::take(self).manifest
    }
}

impl Body for Manifest {
    const TYPE: FrameType = FrameType::Manifest;

    fn encode_body(&self, out: &mut Vec<u8>) {
        out.put_u16(u16::try_from(self.entries.len()).unwrap_or(u16::MAX));
        for e in &self.entries {
            e.encode(out);
        }
    }

    fn decode_body(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let count = r.u16("Manifest.entries")?;
        if count == 0 {
            return Err(DecodeError::InvalidValue {
                field: "Manifest.entries",
                value: 0,
            });
        }
        check_limit(
            "Manifest.entries",
            count.into(),
            MAX_MANIFEST_ENTRIES as u64,
        )?;
        // Allocate for no more entries than the body can hold.
        let cap = usize::from(count).min(r.remaining() / ENTRY_FIXED_BYTES);
        let mut entries = Vec::with_capacity(cap);
        for _ in 0..count {
            entries.push(FileEntry::decode(r)?);
        }
        Ok(Manifest { entries })
    }
}

/// Source → sink: the manifest is complete. Body (16 bytes): `files u64`, `bytes u64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ManifestEnd {
    /// Entries sent in all `Manifest` frames.
    pub files: u64,
    /// Sum of their sizes.
    pub bytes: u64,
}

impl Body for ManifestEnd {
    const TYPE: FrameType = FrameType::ManifestEnd;

    fn encode_body(&self, out: &mut Vec<u8>) {
        out.put_u64(self.files);
        out.put_u64(self.bytes);
    }

    fn decode_body(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(ManifestEnd {
            files: r.u64("ManifestEnd.files")?,
            bytes: r.u64("ManifestEnd.bytes")?,
        })
    }
}

/// A set of chunk indexes of one file, as a bitmap (bit `i % 8` of byte `i / 8`).
///
/// Wire: `chunk_count u32` (1..=[`MAX_FILE_CHUNKS`]), then `ceil(chunk_count / 8)` bytes;
/// bits at and past `chunk_count` are zero.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkSet {
    chunk_count: u32,
    bits: Vec<u8>,
}

impl ChunkSet {
    /// An empty set over a file of `chunk_count` chunks, or `None` if `chunk_count` is 0
    /// or above [`MAX_FILE_CHUNKS`].
    pub fn new(chunk_count: u64) -> Option<ChunkSet> {
        if chunk_count == 0 || chunk_count > MAX_FILE_CHUNKS {
            return None;
        }
        let chunk_count = u32::try_from(chunk_count).ok()?;
        Some(ChunkSet {
            chunk_count,
            bits: vec![0; chunk_count.div_ceil(8) as usize],
        })
    }

    /// Chunks in the file.
    pub fn chunk_count(&self) -> u64 {
        self.chunk_count.into()
    }

    /// Byte and mask of chunk `index`, or `None` out of range.
    fn bit(&self, index: u64) -> Option<(usize, u8)> {
        let i = usize::try_from(index)
            .ok()
            .filter(|&i| i < self.chunk_count as usize)?;
        Some((i / 8, 1 << (i % 8)))
    }

    /// Adds chunk `index`; returns false if it is out of range.
    pub fn insert(&mut self, index: u64) -> bool {
        match self.bit(index) {
            Some((byte, mask)) => {
                self.bits[byte] |= mask;
                true
            }
            None => false,
        }
    }

    /// Whether chunk `index` is in the set.
    pub fn contains(&self, index: u64) -> bool {
        self.bit(index)
            .is_some_and(|(byte, mask)| self.bits[byte] & mask != 0)
    }

    /// Indexes in the set, ascending.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.chunk_count()).filter(|&i| self.contains(i))
    }

    /// Chunks in the set.
    pub fn len(&self) -> u64 {
        self.bits.iter().map(|b| u64::from(b.count_ones())).sum()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.bits.iter().all(|&b| b == 0)
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.put_u32(self.chunk_count);
        out.extend_from_slice(&self.bits);
    }

    fn decode(r: &mut Reader<'_>) -> Result<ChunkSet, DecodeError> {
        let chunk_count = r.u32("Have.chunk_count")?;
        if chunk_count == 0 {
            return Err(DecodeError::InvalidValue {
                field: "Have.chunk_count",
                value: 0,
            });
        }
        check_limit("Have.chunk_count", chunk_count.into(), MAX_FILE_CHUNKS)?;
        let n = chunk_count.div_ceil(8) as usize;
        let bits = r.bytes(n, "Have.bitmap")?;
        let tail_bits = chunk_count % 8;
        if tail_bits != 0 && bits[n - 1] >> tail_bits != 0 {
            return Err(DecodeError::Inconsistent {
                field: "Have.bitmap",
                reason: "bits set past chunk_count",
            });
        }
        Ok(ChunkSet {
            chunk_count,
            bits: bits.to_vec(),
        })
    }
}

/// Why the sink does not want a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SkipReason {
    /// The destination stays: it exists under `no_clobber`, or has the entry's size and
    /// mtime under `update`.
    Exists = 0,
    /// Reserved (the sink's copy is newer under `update`): this version never sends it,
    /// and a source takes it as any `Skip`.
    Newer = 1,
}

/// What the sink holds of one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HaveState {
    /// Nothing: send the whole file. (tag 0, no fields)
    Missing,
    /// A complete file (tag 1): `size u64`, `mtime_ns i64`, `digest [16]`. The source skips
    /// the file if size and mtime equal its own (and, with `verify`, the digest too);
    /// otherwise it sends the whole file.
    Complete {
        /// Size of the sink's file.
        size: u64,
        /// Its mtime.
        mtime_ns: i64,
        /// Its digest ([`crate::FileDigest`]).
        digest: [u8; 16],
    },
    /// A partial file (tag 2): `size u64`, `mtime_ns i64` of the *source* file the partial
    /// was written from, then a [`ChunkSet`] of the chunks whose checksums verified, in the
    /// session's chunk size. The source sends the other chunks if size and mtime still
    /// match, else the whole file.
    Partial {
        /// Source size the partial was written from.
        size: u64,
        /// Source mtime the partial was written from.
        mtime_ns: i64,
        /// Verified chunks.
        chunks: ChunkSet,
    },
    /// The sink does not want the file (tag 3): `reason u8`.
    Skip(SkipReason),
}

/// Sink → source, with resume on: the answer to one manifest entry.
///
/// Body: `file_id u64`, `state u8`, then the state's fields (see [`HaveState`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Have {
    /// The entry answered.
    pub file_id: u64,
    /// What the sink holds.
    pub state: HaveState,
}

impl Body for Have {
    const TYPE: FrameType = FrameType::Have;

    fn encode_body(&self, out: &mut Vec<u8>) {
        out.put_u64(self.file_id);
        match &self.state {
            HaveState::Missing => out.push(0),
            HaveState::Complete {
                size,
                mtime_ns,
                digest,
            } => {
                out.push(1);
                out.put_u64(*size);
                out.put_i64(*mtime_ns);
                out.extend_from_slice(digest);
            }
            HaveState::Partial {
                size,
                mtime_ns,
                chunks,
            } => {
                out.push(2);
                out.put_u64(*size);
                out.put_i64(*mtime_ns);
                chunks.encode(out);
            }
            HaveState::Skip(reason) => {
                out.push(3);
                out.push(*reason as u8);
            }
        }
    }

    fn decode_body(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let file_id = r.u64("Have.file_id")?;
        let state = match r.u8("Have.state")? {
            0 => HaveState::Missing,
            1 => HaveState::Complete {
                size: r.u64("Have.size")?,
                mtime_ns: r.i64("Have.mtime_ns")?,
                digest: r.array("Have.digest")?,
            },
            2 => HaveState::Partial {
                size: r.u64("Have.size")?,
                mtime_ns: r.i64("Have.mtime_ns")?,
                chunks: ChunkSet::decode(r)?,
            },
            3 => HaveState::Skip(match r.u8("Have.skip_reason")? {
                0 => SkipReason::Exists,
                1 => SkipReason::Newer,
                v => {
                    return Err(DecodeError::InvalidValue {
                        field: "Have.skip_reason",
                        value: v.into(),
                    })
                }
            }),
            v => {
                return Err(DecodeError::InvalidValue {
                    field: "Have.state",
                    value: v.into(),
                })
            }
        };
        Ok(Have { file_id, state })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_set_basics() {
        assert!(ChunkSet::new(0).is_none());
        assert!(ChunkSet::new(MAX_FILE_CHUNKS + 1).is_none());
        let mut s = ChunkSet::new(10).unwrap();
        assert!(s.insert(0) && s.insert(9) && !s.insert(10));
        assert!(s.contains(9) && !s.contains(5) && !s.contains(100));
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![0, 9]);
        assert_eq!(s.len(), 2);
        assert!(!s.is_empty());
    }

    #[test]
    fn a_batch_splits_entries_exactly_where_try_push_does() {
        // Paths of every length up to the limit: half of the first 2,500 are long (the
        // byte limit ends those batches), the rest short (the count limit does).
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let entries: Vec<FileEntry> = (0..5000u64)
            .map(|i| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let len = if i < 2500 && i % 2 == 0 {
                    1 + usize::try_from(seed % MAX_PATH_BYTES as u64).unwrap()
                } else {
                    1 + usize::try_from(seed % 40).unwrap()
                };
                // Components of at most 200 bytes, `len` bytes in all.
                let mut path: String = (0..len)
                    .map(|k| if k % 201 == 200 { '/' } else { 'p' })
                    .collect();
                if path.ends_with('/') {
                    path.pop();
                }
                FileEntry {
                    file_id: i,
                    path: RelPath::parse(&path).unwrap(),
                    kind: FileKind::File,
                    size: i,
                    mode: 0o644,
                    mtime_ns: 0,
                    symlink_target: None,
                }
            })
            .collect();
        let (mut by_manifest, mut m) = (Vec::new(), Manifest::new());
        let (mut by_batch, mut b) = (Vec::new(), ManifestBatch::new());
        for e in &entries {
            if let Err(e) = m.try_push(e.clone()) {
                by_manifest.push(std::mem::take(&mut m));
                m.try_push(e).unwrap();
            }
            if let Err(e) = b.try_push(e.clone()) {
                by_batch.push(b.take());
                assert!(b.is_empty());
                b.try_push(e).unwrap();
            }
        }
        by_manifest.push(m);
        by_batch.push(b.take());
        assert!(by_manifest
            .iter()
            .any(|m| m.entries.len() == MAX_MANIFEST_ENTRIES));
        let last = by_manifest.len() - 1;
        assert!(
            by_manifest[..last]
                .iter()
                .any(|m| m.entries.len() < MAX_MANIFEST_ENTRIES),
            "a batch ended at the byte limit"
        );
        assert_eq!(by_batch, by_manifest);
        for m in &by_batch {
            assert!(m.encoded_body_len() <= MAX_CONTROL_BODY_BYTES as usize);
        }
    }

    #[test]
    fn try_push_respects_count_limit() {
        let mut m = Manifest::new();
        let e = FileEntry {
            file_id: 0,
            path: RelPath::parse("a").unwrap(),
            kind: FileKind::File,
            size: 1,
            mode: 0o644,
            mtime_ns: 0,
            symlink_target: None,
        };
        for _ in 0..MAX_MANIFEST_ENTRIES {
            m.try_push(e.clone()).unwrap();
        }
        assert!(m.try_push(e).is_err());
    }

    #[test]
    fn try_push_respects_byte_limit() {
        let mut m = Manifest::new();
        let long = vec!["x".repeat(255); 16].join("/");
        let e = FileEntry {
            file_id: 0,
            path: RelPath::parse(&long).unwrap(),
            kind: FileKind::Symlink,
            size: 0,
            mode: 0o777,
            mtime_ns: 0,
            symlink_target: Some("t".repeat(MAX_SYMLINK_TARGET_BYTES)),
        };
        let mut n = 0;
        while m.try_push(e.clone()).is_ok() {
            n += 1;
        }
        assert!(n < MAX_MANIFEST_ENTRIES);
        assert!(m.encoded_body_len() <= MAX_CONTROL_BODY_BYTES as usize);
    }
}
