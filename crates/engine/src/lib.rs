//! The sluice transfer engine: the daemon, the client and the per-channel data path
//! (read → send → receive → write) that the plan places on NUMA nodes.
//!
//! * [`daemon::serve`] accepts sessions under a confined root.
//! * [`client::copy`] pushes or pulls files, trees and lots of small files.
//! * [`source`] and [`sink`] are the two halves of a session, identical for push and
//!   pull; [`runtime::Runtime`] holds the plan's buffer pools and pins its threads.
//! * [`transport`] is the only module that turns `sluice-wire` frames into socket I/O.

pub mod client;
pub mod codec;
pub mod control;
pub mod daemon;
pub mod error;
mod fault;
pub mod fs;
pub mod pipeline;
mod readahead;
pub mod runtime;
pub mod sched;
pub mod session;
pub mod sink;
pub mod source;
pub mod stats;
pub mod stream;
#[cfg(test)]
mod testing;
pub mod transport;

pub use codec::CompressMode;
pub use error::EngineError;
pub use runtime::Runtime;
pub use sluice_wire::Compression;
pub use stats::Summary;

/// Large-file reads an io-read thread keeps in flight by default: enough to keep a disk's
/// queue busy while the thread checksums and sends (4 KiB-aligned `O_DIRECT` chunks of
/// 4 MiB each: 16 MiB per thread in flight).
pub const DEFAULT_READ_DEPTH: u32 = 4;

/// How chunks travel from the thread that read them to the socket (seed 003).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pipeline {
    /// Chosen per session: inline unless readers far outnumber connections.
    #[default]
    Auto,
    /// The thread that reads a chunk sends it (and the receiving thread writes it).
    Inline,
    /// Bounded per-channel queues between I/O threads and network threads.
    Queued,
}

/// What a session does, as the client asked for it.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// Data connections.
    pub streams: u16,
    /// The session's chunk size, agreed in `Accept` (at most either side's slot size).
    pub chunk_bytes: u32,
    /// Storage threads on each side.
    pub io_threads: u32,
    /// Large-file reads each io-read thread keeps in flight with `O_DIRECT` (io_uring);
    /// 1 reads one chunk at a time.
    pub read_depth: u32,
    /// Continue from what the destination already holds.
    pub resume: bool,
    /// Never replace an existing destination file.
    pub no_clobber: bool,
    /// Skip files whose destination has the same size and mtime.
    pub update: bool,
    /// Make each file durable before renaming it into place.
    pub fsync: bool,
    /// Re-read each written file and compare its digest before renaming it into place.
    pub verify: bool,
    /// Descend into directories.
    pub recursive: bool,
    /// Compression on the wire.
    pub compress: CompressMode,
    /// Inline or queued data path.
    pub pipeline: Pipeline,
    /// Read and write large files with `O_DIRECT` (bypassing the page cache), where
    /// supported; a daemon does as its client asks.
    pub direct: bool,
    /// The sink acknowledges every chunk (`CHUNK_ACKS` negotiated): the source's `auto`
    /// then measures delivered goodput instead of bytes handed to its sockets.
    pub chunk_acks: bool,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            streams: 2,
            chunk_bytes: 4 << 20,
            io_threads: 2,
            read_depth: DEFAULT_READ_DEPTH,
            resume: false,
            no_clobber: false,
            update: false,
            fsync: false,
            verify: false,
            recursive: false,
            compress: CompressMode::None,
            pipeline: Pipeline::Auto,
            direct: true,
            chunk_acks: true,
        }
    }
}
