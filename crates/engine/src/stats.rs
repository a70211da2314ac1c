//! Counters and the per-file report of a session, turned into the `--json` summary.

use crate::monitor::{self, Bottleneck, Stage, StageClock, StageCounters};
use crate::net::tuning::NetworkReport;
use crate::options::BeyondPlan;
use serde::Serialize;
use sluice_wire::FileEntry;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Per-file rows kept for the summary at most; beyond it only counts grow, so memory
/// stays bounded for trees of millions of files.
pub const MAX_REPORTED_FILES: usize = 10_000;

/// How one file ended.
#[derive(Debug, Clone)]
pub enum FileOutcome {
    /// Written, verified and renamed into place.
    Done {
        /// The per-file digest (xxh3-128 over the chunk checksums).
        digest: [u8; 16],
    },
    /// Not transferred.
    Failed {
        /// Why.
        message: String,
    },
}

/// One row of the per-file report.
#[derive(Debug, Clone, Serialize)]
pub struct FileRow {
    /// Destination-relative path.
    pub path: String,
    /// Bytes.
    pub size: u64,
    /// `done`, `skipped` or `failed`.
    pub status: &'static str,
    /// Hex digest for transferred files.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// The error, for failed files.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Per-channel throughput figures.
#[derive(Debug, Default, Clone, Serialize)]
pub struct ChannelFigures {
    /// Payload bytes through this channel.
    pub bytes: u64,
    /// Bytes on the wire through this channel.
    pub wire_bytes: u64,
    /// Chunks through this channel.
    pub chunks: u64,
}

/// One channel's counters: relaxed atomics, a cache line of their own (no lock per
/// chunk).
#[derive(Debug, Default)]
#[repr(align(128))]
struct ChannelCell {
    bytes: AtomicU64,
    wire_bytes: AtomicU64,
    chunks: AtomicU64,
}

#[derive(Debug, Default)]
struct Inner {
    /// Channels whose id is at or beyond [`monitor::stage::MAX_CHANNELS`] (none in the
    /// plans sluice makes).
    channels: BTreeMap<u32, ChannelFigures>,
    rows: Vec<FileRow>,
    failures: Vec<FileRow>,
    scan_errors: Vec<String>,
    pipeline: &'static str,
    io_mode: &'static str,
    read_depth: u32,
    codec_threads: u32,
    beyond_plan: Vec<BeyondPlan>,
    network: Option<NetworkReport>,
}

/// Thread-safe session statistics.
#[derive(Debug)]
pub struct Stats {
    started: Instant,
    files_announced: AtomicU64,
    bytes_announced: AtomicU64,
    files_done: AtomicU64,
    dirs_done: AtomicU64,
    symlinks_done: AtomicU64,
    files_failed: AtomicU64,
    files_skipped: AtomicU64,
    bytes_done: AtomicU64,
    payload_bytes: AtomicU64,
    wire_bytes: AtomicU64,
    chunks_resent: AtomicU64,
    sendfile_bytes: AtomicU64,
    bytes_resumed: AtomicU64,
    channels: Box<[ChannelCell]>,
    stages: Arc<StageCounters>,
    inner: Mutex<Inner>,
    /// Whether per-file rows are kept for the summary's `file_report` (the daemon and a
    /// client that prints no `--json` summary keep none: no allocation per file).
    file_report: bool,
}

impl Default for Stats {
    fn default() -> Self {
        Stats::new()
    }
}

fn hex(d: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(2 * d.len());
    for b in d {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    out
}

impl Stats {
    /// Starts the clock; keeps per-file rows for the summary's `file_report`.
    pub fn new() -> Stats {
        Stats::reporting(true)
    }

    /// Starts the clock; keeps no per-file rows (`file_report` stays empty): for a side
    /// whose summary nobody reads file by file.
    pub fn without_file_report() -> Stats {
        Stats::reporting(false)
    }

    fn reporting(file_report: bool) -> Stats {
        Stats {
            started: Instant::now(),
            files_announced: AtomicU64::new(0),
            bytes_announced: AtomicU64::new(0),
            files_done: AtomicU64::new(0),
            dirs_done: AtomicU64::new(0),
            symlinks_done: AtomicU64::new(0),
            files_failed: AtomicU64::new(0),
            files_skipped: AtomicU64::new(0),
            bytes_done: AtomicU64::new(0),
            payload_bytes: AtomicU64::new(0),
            wire_bytes: AtomicU64::new(0),
            chunks_resent: AtomicU64::new(0),
            sendfile_bytes: AtomicU64::new(0),
            bytes_resumed: AtomicU64::new(0),
            channels: (0..monitor::stage::MAX_CHANNELS)
                .map(|_| ChannelCell::default())
                .collect(),
            stages: Arc::new(StageCounters::new()),
            inner: Mutex::new(Inner::default()),
            file_report,
        }
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records which pipeline ran.
    pub fn set_pipeline(&self, name: &'static str) {
        self.inner().pipeline = name;
    }

    /// Records how this side reads or writes large files (`direct` or `buffered`).
    pub fn set_io_mode(&self, direct: bool) {
        self.inner().io_mode = if direct { "direct" } else { "buffered" };
    }

    /// Records the most large-file reads an io-read thread kept in flight (source; 1:
    /// one at a time, as buffered reads and a kernel without io_uring do).
    pub fn note_read_depth(&self, depth: u32) {
        let mut i = self.inner();
        i.read_depth = i.read_depth.max(depth);
    }

    /// Records how many compress (source) or decompress (sink) threads ran.
    pub fn set_codec_threads(&self, n: u32) {
        self.inner().codec_threads = n;
    }

    /// A chunk's payload was read (source) or received (sink) in `channel`.
    pub fn add_payload(&self, channel: u32, bytes: u64) {
        self.payload_bytes.fetch_add(bytes, Ordering::Relaxed);
        monitor::global().add_payload(bytes);
        match self.channels.get(channel as usize) {
            Some(c) => {
                c.bytes.fetch_add(bytes, Ordering::Relaxed);
                c.chunks.fetch_add(1, Ordering::Relaxed);
            }
            None => {
                let mut i = self.inner();
                let c = i.channels.entry(channel).or_default();
                c.bytes += bytes;
                c.chunks += 1;
            }
        }
    }

    /// Bytes crossed the wire in `channel`.
    pub fn add_wire(&self, channel: u32, bytes: u64) {
        self.wire_bytes.fetch_add(bytes, Ordering::Relaxed);
        monitor::global().add_wire(bytes);
        match self.channels.get(channel as usize) {
            Some(c) => {
                c.wire_bytes.fetch_add(bytes, Ordering::Relaxed);
            }
            None => self.inner().channels.entry(channel).or_default().wire_bytes += bytes,
        }
    }

    /// A stopwatch for a stage thread of `channel` (its laps count in this session's
    /// stage counters and the process's).
    pub fn clock(&self, channel: u32) -> StageClock {
        StageClock::new(&self.stages, channel)
    }

    /// This session's stage counters.
    pub fn stages(&self) -> &StageCounters {
        &self.stages
    }

    /// Which resource bound the transfer so far, from the stage counters.
    pub fn bottleneck(&self) -> Bottleneck {
        let figures: Vec<_> = Stage::ALL
            .iter()
            .map(|s| (*s, self.stages.total(*s)))
            .collect();
        Bottleneck::attribute(&figures, self.stages.wall_ns())
    }

    /// Every channel's figures (those counted without a lock, and any beyond them).
    fn channel_figures(
        &self,
        beyond: &BTreeMap<u32, ChannelFigures>,
    ) -> BTreeMap<u32, ChannelFigures> {
        let mut out = beyond.clone();
        for (id, c) in (0u32..).zip(self.channels.iter()) {
            let f = ChannelFigures {
                bytes: c.bytes.load(Ordering::Relaxed),
                wire_bytes: c.wire_bytes.load(Ordering::Relaxed),
                chunks: c.chunks.load(Ordering::Relaxed),
            };
            if f.bytes + f.wire_bytes + f.chunks > 0 {
                out.insert(id, f);
            }
        }
        out
    }

    /// The scanner found a file.
    pub fn file_announced(&self, size: u64) {
        self.files_announced.fetch_add(1, Ordering::Relaxed);
        self.bytes_announced.fetch_add(size, Ordering::Relaxed);
    }

    /// Bytes the sink already held (resume).
    pub fn resumed_bytes(&self, bytes: u64) {
        self.bytes_resumed.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Payload bytes sent straight from the page cache (`sendfile`).
    pub fn add_sendfile(&self, bytes: u64) {
        self.sendfile_bytes.fetch_add(bytes, Ordering::Relaxed);
        monitor::global().add_sendfile(bytes);
    }

    /// Counts a chunk sent again (source) or asked for again (sink).
    pub fn chunk_resent(&self) {
        self.chunks_resent.fetch_add(1, Ordering::Relaxed);
        monitor::global().chunk_resent();
    }

    /// An entry of the tree could not be scanned.
    pub fn scan_error(&self, msg: &str) {
        self.files_failed.fetch_add(1, Ordering::Relaxed);
        monitor::global().file_ended(false);
        let mut i = self.inner();
        if i.scan_errors.len() < MAX_REPORTED_FILES {
            i.scan_errors.push(msg.to_string());
        }
    }

    /// The sink already had the file (no-clobber, update).
    pub fn file_skipped(&self, entry: &FileEntry) {
        self.files_skipped.fetch_add(1, Ordering::Relaxed);
        self.push_row(|| FileRow {
            path: entry.path.as_str().to_string(),
            size: entry.size,
            status: "skipped",
            digest: None,
            error: None,
        });
    }

    /// A file ended.
    pub fn file_done(&self, entry: &FileEntry, outcome: FileOutcome) {
        match outcome {
            FileOutcome::Done { digest } => {
                match entry.kind {
                    sluice_wire::FileKind::File => &self.files_done,
                    sluice_wire::FileKind::Dir => &self.dirs_done,
                    sluice_wire::FileKind::Symlink => &self.symlinks_done,
                }
                .fetch_add(1, Ordering::Relaxed);
                monitor::global().file_ended(true);
                self.bytes_done.fetch_add(entry.size, Ordering::Relaxed);
                self.push_row(|| FileRow {
                    path: entry.path.as_str().to_string(),
                    size: entry.size,
                    status: "done",
                    digest: (entry.kind == sluice_wire::FileKind::File).then(|| hex(&digest)),
                    error: None,
                });
            }
            FileOutcome::Failed { message } => {
                self.files_failed.fetch_add(1, Ordering::Relaxed);
                monitor::global().file_ended(false);
                let row = FileRow {
                    path: entry.path.as_str().to_string(),
                    size: entry.size,
                    status: "failed",
                    digest: None,
                    error: Some(message),
                };
                let mut i = self.inner();
                if i.failures.len() < MAX_REPORTED_FILES {
                    i.failures.push(row);
                }
            }
        }
    }

    /// Keeps the row `row` builds, if this side keeps a file report and it has room
    /// (no row is built otherwise: no allocation per file).
    fn push_row(&self, row: impl FnOnce() -> FileRow) {
        if !self.file_report {
            return;
        }
        let mut i = self.inner();
        if i.rows.len() < MAX_REPORTED_FILES {
            i.rows.push(row());
        }
    }

    /// Files failed so far (scan errors included).
    pub fn failed(&self) -> u64 {
        self.files_failed.load(Ordering::Relaxed)
    }

    /// Payload bytes so far, for progress bars.
    pub fn payload_bytes(&self) -> u64 {
        self.payload_bytes.load(Ordering::Relaxed)
    }

    /// Files finished so far (done, skipped or failed), for progress bars.
    pub fn files_finished(&self) -> u64 {
        self.files_done.load(Ordering::Relaxed)
            + self.files_skipped.load(Ordering::Relaxed)
            + self.files_failed.load(Ordering::Relaxed)
    }

    /// Files and bytes the scanner found so far, for progress bars.
    pub fn announced(&self) -> (u64, u64) {
        (
            self.files_announced.load(Ordering::Relaxed),
            self.bytes_announced.load(Ordering::Relaxed),
        )
    }

    /// Records threads of one role that run beyond the plan (the most per role, over
    /// every session this side ran).
    pub fn record_beyond_plan(&self, b: BeyondPlan) {
        debug_assert!(b.running > b.planned, "only threads beyond the plan");
        let mut i = self.inner();
        match i.beyond_plan.iter_mut().find(|x| x.role == b.role) {
            Some(x) if x.running >= b.running => {}
            Some(x) => *x = b,
            None => i.beyond_plan.push(b),
        }
    }

    /// Records how the data connections were tuned to the path and how they ended
    /// (the last session's, on a side that ran several).
    pub fn set_network(&self, report: NetworkReport) {
        self.inner().network = Some(report);
    }

    /// The summary object printed by `--json`.
    pub fn summary(&self, plan: &sluice_placement::Plan) -> Summary {
        let seconds = self.started.elapsed().as_secs_f64();
        let bottleneck = self.bottleneck();
        let (placement_moves, placement_refusals) = monitor::mover::since(self.started);
        let i = self.inner();
        let bytes = self.payload_bytes.load(Ordering::Relaxed);
        let files_done = self.files_done.load(Ordering::Relaxed);
        let dirs = self.dirs_done.load(Ordering::Relaxed);
        let symlinks = self.symlinks_done.load(Ordering::Relaxed);
        let files_failed = self.files_failed.load(Ordering::Relaxed);
        let files_skipped = self.files_skipped.load(Ordering::Relaxed);
        Summary {
            ok: files_failed == 0,
            bytes,
            wire_bytes: self.wire_bytes.load(Ordering::Relaxed),
            files: files_done,
            dirs,
            symlinks,
            files_skipped,
            files_failed,
            bytes_resumed: self.bytes_resumed.load(Ordering::Relaxed),
            chunks_resent: self.chunks_resent.load(Ordering::Relaxed),
            sendfile_bytes: self.sendfile_bytes.load(Ordering::Relaxed),
            seconds,
            throughput_bytes_per_sec: if seconds > 0.0 {
                bytes as f64 / seconds
            } else {
                0.0
            },
            pipeline: i.pipeline,
            io_mode: i.io_mode,
            read_depth: i.read_depth,
            codec_threads: i.codec_threads,
            threads_beyond_plan: i.beyond_plan.clone(),
            network: i.network.clone(),
            channels: self.channel_figures(&i.channels),
            bottleneck,
            placement_moves,
            placement_refusals,
            plan: plan.clone(),
            failures: i.failures.clone(),
            scan_errors: i.scan_errors.clone(),
            file_report: i.rows.clone(),
            file_report_truncated: self.file_report
                && files_done + dirs + symlinks + files_skipped > i.rows.len() as u64,
        }
    }
}

/// The `--json` summary of a transfer.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Whether every file arrived.
    pub ok: bool,
    /// Payload bytes moved in this run (resumed bytes not counted).
    pub bytes: u64,
    /// Bytes that crossed the network (chunk payloads; equals `bytes` uncompressed).
    pub wire_bytes: u64,
    /// Regular files transferred (empty ones included).
    pub files: u64,
    /// Directories created or brought up to date.
    pub dirs: u64,
    /// Symbolic links created (never followed).
    pub symlinks: u64,
    /// Files skipped (already present: `--update`, `--no-clobber`).
    pub files_skipped: u64,
    /// Files that failed.
    pub files_failed: u64,
    /// Bytes the destination already held and were not sent again (`--resume`).
    pub bytes_resumed: u64,
    /// Chunks sent again after the sink rejected a corrupted copy (a source counts what
    /// it sent again, a sink what it asked for again).
    pub chunks_resent: u64,
    /// Payload bytes this side sent straight from the page cache (`sendfile`, never
    /// copied into the process): large files read through the page cache, in a session
    /// that neither encrypts nor compresses; 0 on the receiving side.
    pub sendfile_bytes: u64,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// `bytes / seconds`.
    pub throughput_bytes_per_sec: f64,
    /// `inline` or `queued`.
    pub pipeline: &'static str,
    /// How this side read or wrote large files: `direct` (`O_DIRECT`, where the file
    /// system allowed it) or `buffered` (the page cache).
    pub io_mode: &'static str,
    /// The most large-file reads an io-read thread had in flight at once (at most
    /// `--read-depth`; 1 where reads went one at a time: buffered, or no io_uring); 0 on
    /// the receiving side.
    pub read_depth: u32,
    /// Compress (this side sends) or decompress (this side receives) threads the session
    /// ran as a stage of their own; 0: the I/O or network threads did it themselves.
    pub codec_threads: u32,
    /// Roles whose threads this side ran beyond those its plan placed (the extra ones
    /// share the planned threads' CPUs); empty when the plan held every thread.
    pub threads_beyond_plan: Vec<BeyondPlan>,
    /// The path as this side measured it, the tuning of the data connections and each
    /// one's `TCP_INFO` at the end; absent where no session ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkReport>,
    /// Per-channel figures of this side.
    pub channels: BTreeMap<u32, ChannelFigures>,
    /// Which resource bound the transfer on this side, and for what share of the time
    /// (from the stage counters).
    pub bottleneck: Bottleneck,
    /// Threads adaptive placement moved to a free core of their node while this
    /// transfer ran (`--adapt on`), in order.
    pub placement_moves: Vec<monitor::mover::PlacementMove>,
    /// Threads whose core foreign load took that stayed: their node had no free core
    /// (a move to another node is never made).
    pub placement_refusals: Vec<monitor::mover::PlacementRefusal>,
    /// The plan this side used.
    pub plan: sluice_placement::Plan,
    /// Every failed file with its error.
    pub failures: Vec<FileRow>,
    /// Entries the scanner could not read.
    pub scan_errors: Vec<String>,
    /// Per-file rows with digests (at most [`MAX_REPORTED_FILES`]).
    pub file_report: Vec<FileRow>,
    /// Whether `file_report` was cut at its limit.
    pub file_report_truncated: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn beyond(role: &str, planned: u32, running: u32) -> BeyondPlan {
        BeyondPlan {
            role: role.into(),
            planned,
            running,
        }
    }

    fn empty_plan() -> sluice_placement::Plan {
        sluice_placement::Plan {
            policy: sluice_placement::Policy::Os,
            requested_policy: sluice_placement::Policy::Os,
            chunk_bytes: 1 << 20,
            channels: Vec::new(),
            notes: Vec::new(),
            explain: Vec::new(),
        }
    }

    fn file(id: u64, path: &str) -> FileEntry {
        FileEntry {
            file_id: id,
            path: sluice_wire::RelPath::parse(path).unwrap(),
            kind: sluice_wire::FileKind::File,
            size: 10,
            mode: 0o644,
            mtime_ns: 0,
            symlink_target: None,
        }
    }

    #[test]
    fn digests_print_as_lowercase_hex_two_digits_a_byte() {
        assert_eq!(hex(&[0x00, 0xab, 0x0f, 0xf0, 0x9c]), "00ab0ff09c");
        assert_eq!(hex(&[]), "");
    }

    #[test]
    fn a_side_without_a_file_report_counts_files_but_keeps_no_rows() {
        let mut digest = [0u8; 16];
        digest[0] = 0xfe;
        for (stats, rows) in [(Stats::new(), 2), (Stats::without_file_report(), 0)] {
            stats.file_done(&file(1, "a"), FileOutcome::Done { digest });
            stats.file_skipped(&file(2, "b"));
            let s = stats.summary(&empty_plan());
            assert_eq!((s.files, s.files_skipped), (1, 1));
            assert_eq!(s.file_report.len(), rows);
            assert!(!s.file_report_truncated);
            if rows > 0 {
                assert_eq!(
                    s.file_report[0].digest.as_deref(),
                    Some("fe000000000000000000000000000000")
                );
            }
        }
    }

    #[test]
    fn threads_beyond_the_plan_keep_the_most_per_role_in_the_summary() {
        let stats = Stats::new();
        let plan = empty_plan();
        assert!(stats.summary(&plan).threads_beyond_plan.is_empty());
        stats.record_beyond_plan(beyond("net-recv", 2, 4));
        stats.record_beyond_plan(beyond("net-recv", 2, 3));
        stats.record_beyond_plan(beyond("io-write", 1, 2));
        stats.record_beyond_plan(beyond("net-recv", 2, 8));
        let s = stats.summary(&plan);
        assert_eq!(
            s.threads_beyond_plan,
            [beyond("net-recv", 2, 8), beyond("io-write", 1, 2)]
        );
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(
            v["threads_beyond_plan"][0],
            serde_json::json!({"role": "net-recv", "planned": 2, "running": 8})
        );
    }
}
