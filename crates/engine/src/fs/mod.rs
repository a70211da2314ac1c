//! Everything that touches the file system: the confined root, the streaming scanner,
//! the sink's temporary files and the storage layout used for scheduling.
//!
//! * [`Root`] confines every path to one directory (cap-std, `openat2(RESOLVE_BENEATH)`).
//! * [`Scanner`] walks a tree lazily, in a deterministic order, in bounded memory.
//! * [`SinkFile`], [`write_small_file`], [`make_symlink`], [`make_dir`]: the sink writes
//!   under temporary names and renames into place; partials are resumable.
//! * [`layout`]: which storage target holds each byte, and a scheduler that spreads I/O
//!   over targets (LADS).
//! * [`spec`]: the rsync-like rules mapping `cp SRC... DST` onto roots and prefixes.
//!
//! Every error is an [`FsError`] (or a [`ScanError`] for one scanned entry) naming the
//! path, the root and the cause, with [`FsError::recovery`] saying whether to retry,
//! resume or abort. The sink reports a file's failure as the session core's
//! [`FileError`](sluice_session::sink::FileError), built from an `FsError` (`From`) or
//! an OS error ([`io_file_error`], [`file_error`]) with the error's own code.

mod error;
pub mod layout;
mod partial_log;
mod root;
mod scan;
mod sink;
pub mod spec;

pub use error::{file_error, io_file_error, FsError, Op};
pub use layout::{BlockDeviceLayout, Layout, LayoutScheduler, SingleTarget, TargetId, WorkItem};
pub use root::{EntryKind, EntryMeta, Root};
pub use scan::{ScanError, Scanner, SourceMap, KEEP_OPEN_DIRS};
pub use sink::{
    finish_dir, is_partial_name, make_dir, make_symlink, same_size_and_mtime, temp_name,
    write_small_file, Clobber, Incoming, ResumeMode, SinkFile, SmallWriter, LOG_SUFFIX,
    PART_SUFFIX,
};
pub use spec::{map_copy, CopyArgs, Mapping, SpecError};

/// tmpfs and ramfs: memory, not blocks.
const MEMORY_FS_MAGIC: [i64; 2] = [0x0102_1994, 0x8584_58f6];

/// Whether `file` lives in memory (tmpfs, ramfs), where there is no device for
/// `O_DIRECT` to bypass the page cache to; with it, the file system's free space in
/// bytes (`f_blocks` 0: no limit, `None`).
pub(crate) fn memory_fs(file: &std::fs::File) -> Option<Option<u64>> {
    let st = rustix::fs::fstatfs(file).ok()?;
    #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
    if !MEMORY_FS_MAGIC.contains(&(st.f_type as i64)) {
        return None;
    }
    #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
    let free = (st.f_bavail as u64).saturating_mul(st.f_bsize as u64);
    Some((st.f_blocks != 0).then_some(free))
}
