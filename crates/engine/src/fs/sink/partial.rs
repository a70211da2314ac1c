//! Resuming a partial: its log is read back and every chunk it names re-read and
//! verified before it counts as held.

use std::fs::File;
use std::os::unix::fs::FileExt;

use cap_std::fs::Dir;
use sluice_wire::{chunk_checksum, chunk_count, chunk_range, RelPath};

use super::super::error::{FsError, Op};
use super::super::partial_log::{self, Header, HEADER_BYTES, RECORD_BYTES};
use super::super::root::Root;
use super::{io_err, open_opts, temp_name, SinkFile};

/// An existing partial, its log, and the chunks that verified.
pub(super) type Resumed = (File, File, Vec<(u64, u64)>);

/// Log records read per `pread` (about 64 KiB).
const RECORDS_PER_READ: usize = 2730;

/// Opens the existing partial `tmp` of `rel` and its log `log_name` if they match
/// `header`; verifies the logged chunks. `None`: nothing usable, start fresh.
pub(super) fn try_resume(
    root: &Root,
    rel: &RelPath,
    dir: &Dir,
    (tmp, log_name): (&str, &str),
    header: &Header,
) -> Result<Option<Resumed>, FsError> {
    let err = |op| io_err(root, rel, op);
    let file = match dir.open_with(tmp, &open_opts(true, true)) {
        Ok(f) => f.into_std(),
        Err(_) => return Ok(None),
    };
    let meta = file.metadata().map_err(err(Op::Stat))?;
    if !meta.is_file() || meta.len() != header.size {
        return Ok(None);
    }
    let mut o = open_opts(true, false);
    o.append(true);
    let log = match dir.open_with(log_name, &o) {
        Ok(f) => f.into_std(),
        Err(_) => return Ok(None),
    };
    let mut head = [0u8; HEADER_BYTES];
    if log.read_exact_at(&mut head, 0).is_err()
        || partial_log::decode_header(&head) != Some(*header)
    {
        return Ok(None);
    }
    let records = read_records(&log, header).map_err(err(Op::Read))?;
    let held = verify_records(root, rel, &file, header, records)?;
    Ok(Some((file, log, held)))
}

/// The log's records up to the first torn or corrupt one, the last per chunk, sorted;
/// a torn tail is cut so that new records follow valid ones.
fn read_records(log: &File, header: &Header) -> std::io::Result<Vec<(u64, u64)>> {
    let chunks = chunk_count(header.size, header.chunk_bytes);
    let mut records = Vec::new();
    let mut buf = vec![0u8; RECORD_BYTES * RECORDS_PER_READ];
    let mut at = HEADER_BYTES as u64;
    'read: loop {
        let n = read_full_at(log, &mut buf, at)?;
        let whole = n - n % RECORD_BYTES;
        for rec in buf[..whole].chunks_exact(RECORD_BYTES) {
            match partial_log::decode_record(rec) {
                Some((index, sum)) if index < chunks => records.push((index, sum)),
                _ => break 'read,
            }
            at += RECORD_BYTES as u64;
        }
        if n < buf.len() {
            break;
        }
    }
    log.set_len(at)?;
    Ok(partial_log::last_per_index(records))
}

/// The records whose chunk, re-read from the partial, still has the logged checksum.
/// Reads each chunk once into one buffer of `chunk_bytes`.
fn verify_records(
    root: &Root,
    rel: &RelPath,
    file: &File,
    header: &Header,
    records: Vec<(u64, u64)>,
) -> Result<Vec<(u64, u64)>, FsError> {
    let mut held = Vec::with_capacity(records.len());
    if records.is_empty() {
        return Ok(held);
    }
    let cap = u64::from(header.chunk_bytes).min(header.size);
    let mut data = vec![0u8; usize::try_from(cap).unwrap_or(0)];
    for (index, sum) in records {
        let Some((offset, len)) = chunk_range(header.size, header.chunk_bytes, index) else {
            continue;
        };
        let chunk = &mut data[..len as usize];
        match file.read_exact_at(chunk, offset) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => continue,
            Err(e) => return Err(root.err(Op::Read, rel.as_str(), e)),
        }
        if chunk_checksum(chunk) == sum {
            held.push((index, sum));
        }
    }
    Ok(held)
}

impl SinkFile {
    /// Whether `rel` has a partial file to resume from (a cheap `lstat`).
    pub fn has_partial(root: &Root, rel: &RelPath) -> bool {
        let tmp = temp_name(rel.file_name());
        let partial = match rel.parent() {
            Some(p) => format!("{}/{tmp}", p.as_str()),
            None => tmp,
        };
        RelPath::parse(&partial).is_ok_and(|p| root.exists(&p).unwrap_or(false))
    }
}

/// Reads into `buf` at `offset` until it is full or the file ends; returns bytes read.
fn read_full_at(f: &File, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read_at(&mut buf[n..], offset + n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}
