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
    FileKind, Frame, Have, HaveState, RelPath, SkipReason,
};

use super::action::{Action, DestFacts, Flow, Options, PartialFacts, Probe};
use super::chunks::ChunkAccount;
use super::error::FileError;

/// The sink's control plane. Events in ([`Master::on_frame`], [`Master::announce`],
/// [`Master::made`]), actions out ([`Master::poll_action`]).
#[derive(Debug)]
pub struct Master {
    opts: Options,
    actions: VecDeque<Action>,
    /// Directories made, with the mode and mtime they get at `Close`, deepest (latest)
    /// first. One per directory received: bounded by the tree, as `cp -a` and rsync keep
    /// them too.
    dirs: Vec<(RelPath, u32, i64)>,
    /// `ManifestEnd` has come: no entry will be announced any more.
    manifest_ended: bool,
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
            manifest_ended: false,
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
        if let Some((dest, mode, mtime_ns)) = self.dirs.pop() {
            return Some(Action::FinishDir {
                dest,
                mode,
                mtime_ns,
            });
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
            Frame::ManifestEnd(_) => self.manifest_ended = true,
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

    /// Whether `ManifestEnd` has come: every entry of the session is announced.
    #[must_use]
    pub fn manifest_ended(&self) -> bool {
        self.manifest_ended
    }

    /// The engine has no data file in flight any more: each one it received has had
    /// its final word (`FileDone` or `FileFailed`, already handed to the control
    /// connection) or was forgotten at the source's `FileFailed`. Every other entry
    /// got its final word while it was announced. Where the sink closes by itself
    /// ([`Options::sink_closes`]) and the manifest has ended, the session is complete:
    /// the close starts as at the source's `Close` (the directories, then `CloseAck`),
    /// and no frame is handled after it. Unlike at `Close`, no [`Action::Stop`]: chunks
    /// of a file that failed may still be on their way (the source stops sending them
    /// only when it reads the failure), so the receiving threads go on to the end of
    /// their connections, dropping them; the engine stops them sooner where nothing more
    /// can come. Returns whether it started; calling it again (two threads may both see
    /// the end) does nothing.
    pub fn settled(&mut self) -> bool {
        if !(self.opts.sink_closes && self.manifest_ended) || self.closing {
            return false;
        }
        self.closing = true;
        true
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
                self.dirs.push((dest, entry.mode, entry.mtime_ns));
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
