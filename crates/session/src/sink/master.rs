//! The sink's control plane: what to do with each manifest entry (make a directory, a
//! symlink, an empty file, or receive a data file; with resume/update/no-clobber, what to
//! answer), the source's `FileFailed`, and `Close`.
//!
//! Facts about the destination (does it exist, same size and mtime, what a partial
//! holds) are I/O: [`Master::probe`] names the next one it needs, the engine looks it up
//! and fills it into [`DestFacts`], and [`Master::announce`] decides from the values.

use std::collections::VecDeque;

use sluice_wire::{
    chunk_count, chunk_range, CloseAck, ErrorCode, ErrorFrame, FileDigest, FileEntry, FileFailed,
    FileKind, Frame, FrameType, Have, HaveState, RelPath, SkipReason,
};

use super::chunks::ChunkAccount;
use super::error::FileError;

/// What the session asked of the sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Continue from what the destination already holds (`--resume`).
    pub resume: bool,
    /// Skip files whose destination has the same size and mtime (`--update`).
    pub update: bool,
    /// Never replace an existing destination (`--no-clobber`).
    pub no_clobber: bool,
    /// The session's chunk size.
    pub chunk_bytes: u32,
}

impl Options {
    /// Whether each data file is answered with a `Have` before its chunks come.
    #[must_use]
    pub fn negotiates(&self) -> bool {
        self.resume || self.update || self.no_clobber
    }
}

/// A fact about an entry's destination that [`Master::announce`] needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// Does the destination exist (as anything)? Fill [`DestFacts::exists`].
    Exists,
    /// Is it a regular file of the entry's size and mtime? Fill
    /// [`DestFacts::same_size_and_mtime`].
    SameSizeAndMtime,
    /// The digest of the destination's content, read back chunk by chunk. Fill
    /// [`DestFacts::whole_digest`].
    WholeDigest,
    /// Open the destination's partial for resume (verifying the chunks its log names).
    /// Fill [`DestFacts::partial`]; keep the open partial until the actions say what
    /// becomes of it ([`Action::Receive`] with `resumed`, or [`Action::DiscardPartial`]).
    Partial,
}

/// What the destination of one entry is, as far as [`Master::probe`] asked. `None`: not
/// looked up.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DestFacts {
    /// The destination exists (a lookup error counts as `false`).
    pub exists: Option<bool>,
    /// It is a regular file of the entry's size and mtime (an error counts as `false`).
    pub same_size_and_mtime: Option<bool>,
    /// The digest of what is there, or why it could not be read.
    pub whole_digest: Option<Result<[u8; 16], FileError>>,
    /// What a partial of the file holds.
    pub partial: Option<PartialFacts>,
}

/// What the destination's partial holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PartialFacts {
    /// No partial.
    Absent,
    /// A partial whose log was written for this version of the file (size, mtime, chunk
    /// size), holding these chunks, `(index, checksum)`, each re-read and verified. Empty:
    /// a partial of another version, reset.
    Held(Vec<(u64, u64)>),
    /// It could not be opened or read.
    Failed(FileError),
}

/// What the engine does for the sink: frames to send, file-system work to carry out
/// (reporting each result back), and bookkeeping.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Send this frame to the source.
    Send(Frame),
    /// Create the directory `dest` (writable by its owner until [`Action::SetDirTimes`]
    /// at `Close`); report with [`Master::made`].
    MakeDir {
        /// The entry.
        file_id: u64,
        /// Where.
        dest: RelPath,
        /// Its permission bits.
        mode: u32,
    },
    /// Create the symlink `dest` -> `target`; report with [`Master::made`].
    MakeSymlink {
        /// The entry.
        file_id: u64,
        /// Where.
        dest: RelPath,
        /// The target, stored verbatim.
        target: String,
        /// Its mtime.
        mtime_ns: i64,
    },
    /// Write the empty file `dest`; report with [`Master::made`].
    WriteEmpty {
        /// The entry.
        file_id: u64,
        /// Where.
        dest: RelPath,
        /// Its permission bits.
        mode: u32,
        /// Its mtime.
        mtime_ns: i64,
    },
    /// A data file: put it in the file table with this account; its chunks will come.
    Receive {
        /// The entry.
        file_id: u64,
        /// Where.
        dest: RelPath,
        /// What is written already (the partial's chunks when `resumed`).
        account: ChunkAccount,
        /// Write into the partial opened by [`Probe::Partial`].
        resumed: bool,
    },
    /// Remove the partial opened by [`Probe::Partial`]: it is of another version.
    DiscardPartial {
        /// The entry.
        file_id: u64,
    },
    /// The partial held every chunk: complete the file just received (no data comes).
    Complete {
        /// The entry.
        file_id: u64,
    },
    /// The file stays as it is: count it skipped.
    Skipped {
        /// The entry.
        file_id: u64,
        /// The destination's digest, when it was whole already.
        whole: Option<[u8; 16]>,
    },
    /// The partial held this many bytes (counted, so that a pull's summary shows them).
    Resumed {
        /// The entry.
        file_id: u64,
        /// Bytes held.
        bytes: u64,
    },
    /// The entry ended (made, or failed): report it with `FileDone`/`FileFailed` (see
    /// [`super::ended_frame`]) and count it.
    Ended {
        /// The entry.
        file_id: u64,
        /// Its digest, or why it failed.
        result: Result<[u8; 16], FileError>,
    },
    /// The manifest has announced `file_id` (after its entry, if any, is in the table).
    Announced {
        /// The entry.
        file_id: u64,
    },
    /// The source could not read the file: [`super::FileTable::forget`] it (its partial
    /// stays for resume).
    Forget {
        /// The entry.
        file_id: u64,
        /// The source's message.
        message: String,
    },
    /// `Close` arrived: the data threads stop (nothing more comes).
    Stop,
    /// Set a received directory's mtime, now that its contents are in (deepest first).
    SetDirTimes {
        /// The directory.
        dest: RelPath,
        /// Its mtime.
        mtime_ns: i64,
    },
    /// A frame the sink does not handle.
    Ignored(FrameType),
}

/// What the engine does after [`Master::on_frame`] (then it drains the actions).
#[derive(Debug, PartialEq, Eq)]
pub enum Flow {
    /// Wait for the next frame.
    Continue,
    /// Announce these entries, in order: for each, probe, [`Master::announce`], drain.
    Announce(Vec<FileEntry>),
    /// The session is closed: drain the actions (the last is `CloseAck`) and stop.
    Closed,
}

/// The sink's control plane. Events in ([`Master::on_frame`], [`Master::announce`],
/// [`Master::made`]), actions out ([`Master::poll_action`]).
#[derive(Debug)]
pub struct Master {
    opts: Options,
    actions: VecDeque<Action>,
    /// Directories made, whose mtime is set at `Close`, deepest (latest) first. One per
    /// directory received: bounded by the tree, as `cp -a` and rsync keep them too.
    dirs: Vec<(RelPath, i64)>,
    closing: bool,
    close_acked: bool,
}

impl Master {
    /// The control plane of a sink with these options.
    #[must_use]
    pub fn new(opts: Options) -> Master {
        debug_assert!(opts.chunk_bytes > 0);
        Master {
            opts,
            actions: VecDeque::new(),
            dirs: Vec::new(),
            closing: false,
            close_acked: false,
        }
    }

    /// The options.
    #[must_use]
    pub fn options(&self) -> &Options {
        &self.opts
    }

    /// The next action, in order; `None` when there is nothing to do.
    pub fn poll_action(&mut self) -> Option<Action> {
        if let Some(a) = self.actions.pop_front() {
            return Some(a);
        }
        if !self.closing || self.close_acked {
            return None;
        }
        if let Some((dest, mtime_ns)) = self.dirs.pop() {
            return Some(Action::SetDirTimes { dest, mtime_ns });
        }
        self.close_acked = true;
        Some(Action::Send(Frame::CloseAck(CloseAck)))
    }

    /// A control frame from the source.
    ///
    /// # Errors
    /// The source reported an error and ended the session (its `Error` frame).
    pub fn on_frame(&mut self, frame: Frame) -> Result<Flow, ErrorFrame> {
        assert!(!self.closing, "no frame is handled after Close");
        match frame {
            Frame::Manifest(m) => return Ok(Flow::Announce(m.entries)),
            Frame::ManifestEnd(_) => {}
            Frame::FileFailed(f) => self.actions.push_back(Action::Forget {
                file_id: f.file_id,
                message: f.message,
            }),
            Frame::Close(_) => {
                self.closing = true;
                self.actions.push_back(Action::Stop);
                return Ok(Flow::Closed);
            }
            Frame::Error(e) => return Err(e),
            other => self.actions.push_back(Action::Ignored(other.frame_type())),
        }
        Ok(Flow::Continue)
    }

    /// The next fact [`Master::announce`] needs about `entry`'s destination, given
    /// `facts` so far; `None`: announce now. Asks each fact once, and only what today's
    /// options need (no lookups without `--resume`, `--update` or `--no-clobber`).
    #[must_use]
    pub fn probe(&self, entry: &FileEntry, facts: &DestFacts) -> Option<Probe> {
        let o = &self.opts;
        match entry.kind {
            FileKind::Dir => None,
            // --update always re-creates links, which is cheap; no-clobber keeps them.
            FileKind::Symlink if !o.no_clobber => None,
            FileKind::Symlink => self.skip_probe(facts),
            FileKind::File if entry.size == 0 => self.skip_probe(facts),
            FileKind::File if !o.negotiates() => None,
            FileKind::File => {
                if let Some(p) = self.skip_probe(facts) {
                    return Some(p);
                }
                if self.skips(facts) {
                    return None;
                }
                self.resume_probe(facts)
            }
        }
    }

    fn skip_probe(&self, facts: &DestFacts) -> Option<Probe> {
        if self.opts.no_clobber && facts.exists.is_none() {
            return Some(Probe::Exists);
        }
        if self.opts.update && facts.exists != Some(true) && facts.same_size_and_mtime.is_none() {
            return Some(Probe::SameSizeAndMtime);
        }
        None
    }

    fn resume_probe(&self, facts: &DestFacts) -> Option<Probe> {
        if !self.opts.resume {
            return None;
        }
        match (&facts.same_size_and_mtime, &facts.whole_digest) {
            (None, _) => Some(Probe::SameSizeAndMtime),
            (Some(true), None) => Some(Probe::WholeDigest),
            (_, Some(Ok(_))) => None,
            _ => facts.partial.is_none().then_some(Probe::Partial),
        }
    }

    /// Whether the destination stays (`--no-clobber` and it exists, or `--update` and it
    /// has the same size and mtime).
    fn skips(&self, facts: &DestFacts) -> bool {
        (self.opts.no_clobber && facts.exists == Some(true))
            || (self.opts.update && facts.same_size_and_mtime == Some(true))
    }

    /// Decides what becomes of `entry`, whose destination is `dest` (`None`: it cannot be
    /// represented under the root), from `facts` (every [`Master::probe`] answered).
    pub fn announce(&mut self, entry: &FileEntry, dest: Option<RelPath>, facts: DestFacts) {
        let file_id = entry.file_id;
        match dest {
            None => self.send(Frame::FileFailed(FileFailed::new(
                file_id,
                ErrorCode::PathOutsideRoot,
                format!("{:?}: destination path too long", entry.path.as_str()),
            ))),
            Some(dest) => {
                debug_assert_eq!(self.probe(entry, &facts), None, "every fact is in");
                self.announce_at(entry, dest, facts);
            }
        }
        self.actions.push_back(Action::Announced { file_id });
    }

    fn announce_at(&mut self, entry: &FileEntry, dest: RelPath, facts: DestFacts) {
        let file_id = entry.file_id;
        let (mode, mtime_ns) = (entry.mode, entry.mtime_ns);
        let action = match entry.kind {
            FileKind::Dir => Action::MakeDir {
                file_id,
                dest,
                mode,
            },
            FileKind::Symlink => {
                if self.opts.no_clobber && self.skip(entry, &facts) {
                    return;
                }
                let target = entry.symlink_target.clone().unwrap_or_default();
                Action::MakeSymlink {
                    file_id,
                    dest,
                    target,
                    mtime_ns,
                }
            }
            FileKind::File if entry.size == 0 => {
                if self.skip(entry, &facts) {
                    return;
                }
                Action::WriteEmpty {
                    file_id,
                    dest,
                    mode,
                    mtime_ns,
                }
            }
            FileKind::File => return self.announce_data(entry, dest, facts),
        };
        self.actions.push_back(action);
    }

    /// `--no-clobber` / `--update`: answers `Skip` for a destination that stays.
    fn skip(&mut self, entry: &FileEntry, facts: &DestFacts) -> bool {
        if !self.skips(facts) {
            return false;
        }
        let file_id = entry.file_id;
        self.have(file_id, HaveState::Skip(SkipReason::Exists));
        self.actions.push_back(Action::Skipped {
            file_id,
            whole: None,
        });
        true
    }

    fn announce_data(&mut self, entry: &FileEntry, dest: RelPath, facts: DestFacts) {
        let file_id = entry.file_id;
        let negotiate = self.opts.negotiates();
        if negotiate && self.skip(entry, &facts) {
            return;
        }
        if let (true, Some(Ok(digest))) = (self.opts.resume, &facts.whole_digest) {
            // Whole already: answered, counted as skipped, never in the table.
            let state = HaveState::Complete {
                size: entry.size,
                mtime_ns: entry.mtime_ns,
                digest: *digest,
            };
            self.have(file_id, state);
            let whole = Some(*digest);
            self.actions.push_back(Action::Skipped { file_id, whole });
            return;
        }
        let count = chunk_count(entry.size, self.opts.chunk_bytes);
        let account = match ChunkAccount::new(count) {
            Ok(a) => a,
            Err(e) => {
                let message = format!("{:?}: {e}", dest.as_str());
                let result = Err(FileError::new(ErrorCode::TooLarge, message));
                self.actions.push_back(Action::Ended { file_id, result });
                return;
            }
        };
        if !negotiate {
            let resumed = false;
            self.actions.push_back(Action::Receive {
                file_id,
                dest,
                account,
                resumed,
            });
            return;
        }
        self.receive_negotiated(entry, dest, account, facts.partial);
    }

    /// A data file with a `Have` answer: `Partial` when the partial holds chunks of this
    /// version (and completes it now if it holds them all), else `Missing`.
    fn receive_negotiated(
        &mut self,
        entry: &FileEntry,
        dest: RelPath,
        mut account: ChunkAccount,
        partial: Option<PartialFacts>,
    ) {
        let file_id = entry.file_id;
        // The engine opened a partial exactly when it found one of this version.
        let (opened, held) = match partial {
            Some(PartialFacts::Held(held)) => (true, held),
            _ => (false, Vec::new()),
        };
        let mut bytes = 0u64;
        for &(index, checksum) in &held {
            if let (Ok(true), Some((_, len))) = (
                account.add(index, checksum),
                chunk_range(entry.size, self.opts.chunk_bytes, index),
            ) {
                bytes += u64::from(len);
            }
        }
        let resumed = !account.received().is_empty();
        debug_assert!(
            held.is_empty() || resumed,
            "the partial's chunks are in range"
        );
        if opened && !resumed {
            // Another version's partial, now reset: the file is written afresh.
            self.actions.push_back(Action::DiscardPartial { file_id });
        }
        let state = if resumed {
            self.actions.push_back(Action::Resumed { file_id, bytes });
            HaveState::Partial {
                size: entry.size,
                mtime_ns: entry.mtime_ns,
                chunks: account.received().clone(),
            }
        } else {
            HaveState::Missing
        };
        let complete = account.is_complete();
        self.actions.push_back(Action::Receive {
            file_id,
            dest,
            account,
            resumed,
        });
        self.have(file_id, state);
        if complete {
            // The partial already holds every chunk: no data will come.
            self.actions.push_back(Action::Complete { file_id });
        }
    }

    /// The directory, symlink or empty file of `entry` was made at `dest` (or not).
    pub fn made(&mut self, entry: &FileEntry, dest: RelPath, result: Result<(), FileError>) {
        let result = result.map(|()| match entry.kind {
            FileKind::Dir => {
                self.dirs.push((dest, entry.mtime_ns));
                [0; 16]
            }
            FileKind::Symlink => [0; 16],
            FileKind::File => {
                debug_assert_eq!(entry.size, 0, "only empty files are made whole");
                FileDigest::of_ordered(&[])
            }
        });
        let file_id = entry.file_id;
        self.actions.push_back(Action::Ended { file_id, result });
    }

    fn have(&mut self, file_id: u64, state: HaveState) {
        self.send(Frame::Have(Have { file_id, state }));
    }

    fn send(&mut self, frame: Frame) {
        self.actions.push_back(Action::Send(frame));
    }
}
