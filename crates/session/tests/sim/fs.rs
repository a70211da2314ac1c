//! The simulated destination file system: finished entries by path, and partials (the
//! engine's temporary file and its resume log) apart from them. A received file appears
//! at its destination only when its partial is renamed into place, as the engine's
//! `SinkFile::finish` does; a small file is written whole and renamed the same way.
//!
//! Each operation mirrors the engine's function of the same name in
//! `crates/engine/src/fs/sink` (its refusals with `--no-clobber`, its resume rules), on
//! values instead of files.

use sluice_session::sink::FileError;
use sluice_wire::{chunk_checksum, chunk_count, chunk_range, ErrorCode, FileDigest};
use std::collections::BTreeMap;

/// A finished entry at the destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    File {
        data: Vec<u8>,
        mode: u32,
        mtime: i64,
    },
    Dir {
        mode: u32,
        mtime: i64,
    },
    Link {
        target: String,
        mtime: i64,
    },
}

/// What a partial's log says it was written for (the engine's `partial_log::Header`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    pub size: u64,
    pub mtime: i64,
    pub chunk_bytes: u32,
}

/// A temporary file being received, and its resume log.
#[derive(Debug, Clone)]
pub struct Partial {
    pub data: Vec<u8>,
    pub head: Head,
    /// `(index, checksum)` records, in the order written.
    pub log: Vec<(u64, u64)>,
    /// Which creation this is: a handle to an earlier one writes to an unlinked file.
    pub gen: u64,
}

/// The destination: finished entries and partials, by destination path.
#[derive(Debug, Clone, Default)]
pub struct DestFs {
    pub nodes: BTreeMap<String, Node>,
    pub partials: BTreeMap<String, Partial>,
    gen: u64,
}

fn exists_error(path: &str) -> FileError {
    FileError::new(ErrorCode::Exists, format!("{path:?} exists (--no-clobber)"))
}

impl DestFs {
    pub fn exists(&self, path: &str) -> bool {
        self.nodes.contains_key(path)
    }

    /// `--update`'s quick check (`fs::same_size_and_mtime`).
    pub fn same_size_and_mtime(&self, path: &str, size: u64, mtime: i64) -> bool {
        matches!(self.nodes.get(path), Some(Node::File { data, mtime: m, .. })
            if data.len() as u64 == size && *m == mtime)
    }

    /// The digest of what is at `path`, read back chunk by chunk (`reread_digest`).
    pub fn whole_digest(&self, path: &str, size: u64, cb: u32) -> Result<[u8; 16], FileError> {
        let Some(Node::File { data, .. }) = self.nodes.get(path) else {
            return Err(FileError::new(ErrorCode::Io, "not a file"));
        };
        digest_of(data, size, cb).ok_or_else(|| FileError::new(ErrorCode::Io, "short file"))
    }

    pub fn has_partial(&self, path: &str) -> bool {
        self.partials.contains_key(path)
    }

    fn refuse(&self, path: &str, refuse: bool) -> Result<(), FileError> {
        if refuse && self.exists(path) {
            return Err(exists_error(path));
        }
        Ok(())
    }

    /// `SinkFile::create` with `ResumeMode::Resume`: the partial and the chunks of it
    /// that verify, if it was written for `head`; else a fresh one and none.
    pub fn open_resume(
        &mut self,
        path: &str,
        head: Head,
        refuse: bool,
    ) -> Result<(u64, Vec<(u64, u64)>), FileError> {
        self.refuse(path, refuse)?;
        match self.partials.get(path) {
            Some(p) if p.head == head && p.data.len() as u64 == head.size => {
                let held = verified(p);
                Ok((p.gen, held))
            }
            _ => Ok((self.create(path, head), Vec::new())),
        }
    }

    /// `SinkFile::create` with `ResumeMode::Fresh`.
    pub fn open_fresh(&mut self, path: &str, head: Head, refuse: bool) -> Result<u64, FileError> {
        self.refuse(path, refuse)?;
        Ok(self.create(path, head))
    }

    /// A new partial, preallocated (zeros), with an empty log.
    fn create(&mut self, path: &str, head: Head) -> u64 {
        self.gen += 1;
        let size = usize::try_from(head.size).expect("a small file");
        let p = Partial {
            data: vec![0; size],
            head,
            log: Vec::new(),
            gen: self.gen,
        };
        self.partials.insert(path.to_string(), p);
        self.gen
    }

    /// A partial made before the session (the world's draw).
    pub fn put_partial(&mut self, path: &str, data: Vec<u8>, head: Head, log: Vec<(u64, u64)>) {
        self.gen += 1;
        let gen = self.gen;
        let p = Partial {
            data,
            head,
            log,
            gen,
        };
        self.partials.insert(path.to_string(), p);
    }

    /// `SinkFile::write_at` and `record_chunk`, through a handle to creation `gen`:
    /// `false` if that partial is gone (the bytes went to an unlinked file).
    pub fn write_at(&mut self, path: &str, gen: u64, offset: u64, bytes: &[u8], sum: u64) -> bool {
        let Some(p) = self.partials.get_mut(path).filter(|p| p.gen == gen) else {
            return false;
        };
        let at = usize::try_from(offset).expect("a small file");
        let end = at + bytes.len();
        assert!(
            end <= p.data.len(),
            "{path}: a write past the announced size"
        );
        p.data[at..end].copy_from_slice(bytes);
        let index = offset / u64::from(p.head.chunk_bytes);
        p.log.push((index, sum));
        true
    }

    /// `SinkFile::finish`: the partial of creation `gen` renamed into place with its mode
    /// and mtime; the partial and its log are gone. Refused (the partial kept) when
    /// `refuse` and something is there.
    pub fn finish(
        &mut self,
        path: &str,
        gen: u64,
        mode: u32,
        mtime: i64,
        refuse: bool,
    ) -> Result<(), FileError> {
        let Some(p) = self.partials.get(path) else {
            return Err(FileError::new(ErrorCode::Io, "the partial is gone"));
        };
        assert_eq!(
            p.gen, gen,
            "{path}: the partial was replaced under its writer"
        );
        self.refuse(path, refuse)?;
        let p = self.partials.remove(path).expect("just seen");
        let node = Node::File {
            data: p.data,
            mode,
            mtime,
        };
        self.nodes.insert(path.to_string(), node);
        Ok(())
    }

    /// `SinkFile::discard`: the partial and its log removed.
    pub fn discard(&mut self, path: &str) {
        self.partials.remove(path);
    }

    /// `fs::write_small_file`: written under the temporary name (replacing a partial
    /// there), then renamed into place.
    pub fn write_small(
        &mut self,
        path: &str,
        data: &[u8],
        mode: u32,
        mtime: i64,
        refuse: bool,
    ) -> Result<(), FileError> {
        self.refuse(path, refuse)?;
        self.partials.remove(path);
        let node = Node::File {
            data: data.to_vec(),
            mode,
            mtime,
        };
        self.nodes.insert(path.to_string(), node);
        Ok(())
    }

    /// `fs::make_dir`: an existing directory is accepted; it gets `mode | 0o700` until
    /// its times are set at `Close`.
    pub fn make_dir(&mut self, path: &str, mode: u32, mtime: i64) -> Result<(), FileError> {
        let writable = (mode & 0o7777) | 0o700;
        match self.nodes.get_mut(path) {
            Some(Node::Dir { mode: m, .. }) => {
                *m = writable;
                Ok(())
            }
            Some(_) => Err(FileError::new(ErrorCode::Io, "not a directory")),
            None => {
                let node = Node::Dir {
                    mode: writable,
                    mtime,
                };
                self.nodes.insert(path.to_string(), node);
                Ok(())
            }
        }
    }

    /// `fs::make_symlink`.
    pub fn make_symlink(
        &mut self,
        path: &str,
        target: &str,
        mtime: i64,
        refuse: bool,
    ) -> Result<(), FileError> {
        self.refuse(path, refuse)?;
        let node = Node::Link {
            target: target.to_string(),
            mtime,
        };
        self.nodes.insert(path.to_string(), node);
        Ok(())
    }

    /// `fs::finish_dir`: a directory's exact mode and its mtime.
    pub fn finish_dir(&mut self, path: &str, mode: u32, mtime: i64) {
        if let Some(Node::Dir { mode: m, mtime: t }) = self.nodes.get_mut(path) {
            (*m, *t) = (mode & 0o7777, mtime);
        }
    }
}

/// The log's records, the last one per chunk, whose chunk still has the logged checksum
/// (`partial::try_resume`'s verification), sorted by index.
pub fn verified(p: &Partial) -> Vec<(u64, u64)> {
    let count = chunk_count(p.head.size, p.head.chunk_bytes);
    let mut last: BTreeMap<u64, u64> = BTreeMap::new();
    for &(index, sum) in &p.log {
        if index < count {
            last.insert(index, sum);
        }
    }
    last.into_iter()
        .filter(|&(index, sum)| {
            chunk_range(p.head.size, p.head.chunk_bytes, index).is_some_and(|(at, len)| {
                let at = usize::try_from(at).expect("small");
                chunk_checksum(&p.data[at..at + len as usize]) == sum
            })
        })
        .collect()
}

/// The digest of the first `size` bytes of `data` in chunks of `cb`; `None` if shorter.
pub fn digest_of(data: &[u8], size: u64, cb: u32) -> Option<[u8; 16]> {
    let mut sums = Vec::new();
    for index in 0..chunk_count(size, cb) {
        let (at, len) = chunk_range(size, cb, index)?;
        let at = usize::try_from(at).ok()?;
        sums.push(chunk_checksum(data.get(at..at + len as usize)?));
    }
    Some(FileDigest::of_ordered(&sums))
}
