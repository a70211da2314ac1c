//! The master thread: control frames from the source go into the session core's
//! [`Master`]; the file work it asks for (destination facts, directories, links, empty
//! files, partials) is done here and reported back; its frames go to the source.

use super::complete::{complete, finish_entry, reread_digest};
use super::write::direct_writes;
use super::{lock, Entry, EntryState, Shared};
use crate::control::ControlEvent;
use crate::error::EngineError;
use crate::fs::{self as sinkfs, io_file_error, ResumeMode, SinkFile};
use crate::session::DestMap;
use crate::stats::FileOutcome;
use crossbeam_channel::{select, Receiver};
use sluice_session::sink::{
    Action, ChunkAccount, DestFacts, FileChunks, FileError, Flow, Forgotten, Master, Options,
    PartialFacts, Probe,
};
use sluice_wire::{ErrorCode, FileEntry, RelPath};
use std::sync::{Arc, Mutex};

/// Runs the control loop until `Close` (or the source's error, or a lost connection);
/// where the sink closes by itself, until the manifest has ended and the last file
/// (`settled` wakes this thread when another one ends it).
pub(super) fn run(
    shared: &Arc<Shared>,
    dest: &DestMap,
    events: &Receiver<ControlEvent>,
    settled: &Receiver<()>,
) -> Result<(), EngineError> {
    let o = &shared.opts;
    let mut core = Master::new(Options {
        resume: o.resume,
        update: o.update,
        no_clobber: o.no_clobber,
        chunk_bytes: shared.chunk_bytes,
        sink_closes: o.sink_closes,
    });
    loop {
        let ev = select! {
            recv(events) -> ev => ev,
            recv(settled) -> _ => {
                if close_if_settled(shared, &mut core)? {
                    return Ok(());
                }
                continue;
            }
        };
        let ev = ev.map_err(|_| EngineError::Disconnected {
            peer: "source".into(),
            state: "receiving files".into(),
        })?;
        let frame = ev.into_frame("source", "receiving files")?;
        let ended = matches!(frame, sluice_wire::Frame::ManifestEnd(_));
        let flow = core.on_frame(frame).map_err(|e| EngineError::Remote {
            code: e.code,
            message: e.message,
        })?;
        match flow {
            Flow::Continue => drain(shared, &mut core, None)?,
            Flow::Announce(entries) => {
                for entry in entries {
                    announce(shared, &mut core, dest, &entry)?;
                }
            }
            Flow::Closed => return drain(shared, &mut core, None),
        }
        // `ManifestEnd` (and a forgotten file after it) may leave nothing in flight.
        if ended {
            shared.settle.end_manifest();
        }
        if close_if_settled(shared, &mut core)? {
            return Ok(());
        }
    }
}

/// The sink's own close, where it closes by itself and nothing is in flight after
/// `ManifestEnd`: the directories' modes and times, then `CloseAck`. Returns whether
/// the session closed.
fn close_if_settled(shared: &Shared, core: &mut Master) -> Result<bool, EngineError> {
    if !shared.settle.settled() || !core.settled() {
        return Ok(false);
    }
    drain(shared, core, None)?;
    Ok(true)
}

/// The entry being announced, and what its actions left here.
struct Announcing<'a> {
    entry: &'a FileEntry,
    /// The partial opened by [`Probe::Partial`], until kept or discarded.
    opened: Option<SinkFile>,
    /// The data file just put in the table.
    received: Option<Arc<Entry>>,
}

/// Applies one manifest entry: looks up what the core asks about its destination, then
/// carries out its decision.
fn announce(
    shared: &Shared,
    core: &mut Master,
    dest_map: &DestMap,
    entry: &FileEntry,
) -> Result<(), EngineError> {
    let dest = dest_map.map(&entry.path);
    let mut at = Announcing {
        entry,
        opened: None,
        received: None,
    };
    let facts = match &dest {
        Some(d) => probe(shared, core, entry, d, &mut at.opened),
        None => DestFacts::default(),
    };
    core.announce(entry, dest, facts);
    drain(shared, core, Some(&mut at))
}

/// The destination facts the core needs, looked up one by one.
fn probe(
    shared: &Shared,
    core: &Master,
    entry: &FileEntry,
    dest: &RelPath,
    opened: &mut Option<SinkFile>,
) -> DestFacts {
    let root = &shared.root;
    let mut facts = DestFacts::default();
    while let Some(p) = core.probe(entry, &facts) {
        match p {
            Probe::Exists => facts.exists = Some(root.exists(dest).unwrap_or(false)),
            Probe::SameSizeAndMtime => {
                let same = sinkfs::same_size_and_mtime(root, dest, entry.size, entry.mtime_ns);
                facts.same_size_and_mtime = Some(same);
            }
            Probe::WholeDigest => facts.whole_digest = Some(whole_digest(shared, entry, dest)),
            Probe::Partial => facts.partial = Some(open_partial(shared, entry, dest, opened)),
        }
    }
    facts
}

/// Already whole at the destination (same size and mtime, rsync's quick check): the
/// digest of what is there.
fn whole_digest(shared: &Shared, entry: &FileEntry, dest: &RelPath) -> Result<[u8; 16], FileError> {
    let digest = shared
        .root
        .open_read(dest)
        .map_err(FileError::from)
        .and_then(|f| {
            reread_digest(&f, entry.size, shared.chunk_bytes).map_err(|e| io_file_error(&e))
        });
    if let Err(err) = &digest {
        tracing::warn!(
            "cannot read {:?} to resume it: {err}; sending it again",
            dest.as_str()
        );
    }
    digest
}

/// Opens the partial of a file for resume: the chunks that still verify. Creates
/// nothing where there is none (a small file travels packed and is written whole, so a
/// partial made here would be left behind).
fn open_partial(
    shared: &Shared,
    entry: &FileEntry,
    dest: &RelPath,
    opened: &mut Option<SinkFile>,
) -> PartialFacts {
    if !SinkFile::has_partial(&shared.root, dest) {
        return PartialFacts::Absent;
    }
    let incoming = shared.incoming(entry);
    let clobber = shared.clobber();
    match SinkFile::create(&shared.root, dest, incoming, ResumeMode::Resume, clobber) {
        Ok((file, held)) => {
            *opened = Some(file);
            PartialFacts::Held(held)
        }
        Err(err) => {
            tracing::warn!("cannot resume {:?}: {err}; sending it whole", dest.as_str());
            PartialFacts::Failed(err.into())
        }
    }
}

/// Carries out the core's actions, in order; `at`: those of the entry being announced.
fn drain(
    shared: &Shared,
    core: &mut Master,
    mut at: Option<&mut Announcing<'_>>,
) -> Result<(), EngineError> {
    while let Some(action) = core.poll_action() {
        match action {
            Action::Send(frame) => shared.control.send(frame),
            Action::Forget { file_id, message } => forget(shared, file_id, message),
            Action::Stop => shared.stop(),
            Action::FinishDir {
                dest,
                mode,
                mtime_ns,
            } => {
                let _ = sinkfs::finish_dir(&shared.root, &dest, mode, mtime_ns);
            }
            Action::Ignored(t) => tracing::debug!("sink ignores {t:?}"),
            entry_action => {
                let Some(at) = at.as_deref_mut() else {
                    return Err(internal(format!("{entry_action:?} outside an announce")));
                };
                apply(shared, core, at, entry_action)?;
            }
        }
    }
    Ok(())
}

/// Carries out an action about the entry being announced.
fn apply(
    shared: &Shared,
    core: &mut Master,
    at: &mut Announcing<'_>,
    action: Action,
) -> Result<(), EngineError> {
    let (root, entry) = (&shared.root, at.entry);
    match action {
        Action::MakeDir { dest, mode, .. } => {
            let made = sinkfs::make_dir(root, &dest, mode);
            core.made(entry, dest, made.map_err(FileError::from));
        }
        Action::MakeSymlink {
            dest,
            target,
            mtime_ns,
            ..
        } => {
            let made = sinkfs::make_symlink(root, &dest, &target, mtime_ns, shared.clobber());
            core.made(entry, dest, made.map_err(FileError::from));
        }
        Action::WriteEmpty {
            dest,
            mode,
            mtime_ns,
            ..
        } => {
            let (fsync, clobber) = (shared.opts.fsync, shared.clobber());
            let made = sinkfs::write_small_file(root, &dest, &[], mode, mtime_ns, fsync, clobber);
            core.made(entry, dest, made.map_err(FileError::from));
        }
        Action::Receive {
            dest,
            account,
            resumed,
            ..
        } => receive(shared, at, dest, account, resumed)?,
        Action::DiscardPartial { .. } => {
            if let Some(f) = at.opened.take() {
                f.discard();
            }
        }
        Action::Complete { .. } => complete_now(shared, at.received.take())?,
        Action::Skipped { whole, .. } => {
            shared.stats.file_skipped(entry);
            if let Some(digest) = whole {
                tracing::debug!("{:?} already whole ({digest:02x?})", entry.path.as_str());
            }
        }
        Action::Resumed { bytes, .. } => shared.stats.resumed_bytes(bytes),
        Action::Ended { result, .. } => finish_entry(shared, entry, result),
        Action::Announced { file_id } => shared.table.announced(file_id),
        other => return Err(internal(format!("{other:?} inside an announce"))),
    }
    Ok(())
}

/// Puts a data file in the table (with the partial opened for it when `resumed`).
fn receive(
    shared: &Shared,
    at: &mut Announcing<'_>,
    dest: RelPath,
    account: ChunkAccount,
    resumed: bool,
) -> Result<(), EngineError> {
    let file = match (resumed, at.opened.take()) {
        (false, _) => None,
        (true, Some(mut f)) => {
            tracing::info!("resuming {:?}", dest.as_str());
            direct_writes(shared, &mut f);
            Some(Arc::new(f))
        }
        (true, None) => return Err(internal("a resumed file without its partial".into())),
    };
    let e = Arc::new(Entry {
        entry: at.entry.clone(),
        dest,
        state: Mutex::new(EntryState {
            file,
            chunks: FileChunks::new(account),
        }),
    });
    at.received = Some(Arc::clone(&e));
    // Counted before it is in the table: a chunk waiting for it may end it at once.
    shared.settle.received();
    shared.table.insert(e).map_err(|err| {
        shared.settle.unreceived();
        EngineError::Refused {
            code: ErrorCode::BadFrame,
            message: err.to_string(),
        }
    })
}

/// The partial already holds every chunk: no data will come; complete it now.
fn complete_now(shared: &Shared, e: Option<Arc<Entry>>) -> Result<(), EngineError> {
    let Some(e) = e else {
        return Err(internal("a file completed before it was received".into()));
    };
    let mut st = lock(&e.state);
    let digest = st
        .chunks
        .finish()
        .map_err(|err| internal(format!("completing a held partial: {err}")))?;
    let handle = st.file.take();
    drop(st);
    complete(shared, &e, handle, digest);
    Ok(())
}

/// The source could not read a file: forget it (its partial stays for resume).
fn forget(shared: &Shared, file_id: u64, message: String) {
    match shared.table.forget(file_id) {
        Forgotten::Entry(e) => {
            shared.settle.file_failed();
            shared.settle.ended();
            let mut st = lock(&e.state);
            let first = st.chunks.end();
            st.file = None; // dropped = abandoned: the partial stays for resume
            drop(st);
            // Not when it ended here first: that end is reported by whoever ended it.
            if first {
                let outcome = FileOutcome::Failed { message };
                shared.stats.file_done(&e.entry, outcome);
            }
        }
        // An entry the source could not scan (on a pull: the daemon's side).
        Forgotten::Undescribed => shared.stats.scan_error(&message),
        Forgotten::Unknown => {}
    }
}

fn internal(message: String) -> EngineError {
    EngineError::Refused {
        code: ErrorCode::Internal,
        message: format!("internal: {message}"),
    }
}
