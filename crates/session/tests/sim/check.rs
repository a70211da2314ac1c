//! The properties every run must keep.
//!
//! Always: each file has at most one final word at the source; a `FileDone`'s digest is
//! the digest of the source's chunk checksums; no destination entry holds anything but
//! what it held before or the source's entry (a partial is never renamed in; the bytes
//! of every write were checked as they were written).
//!
//! Without a crash: both sides finished; every file has exactly one final word, the one
//! the options and the destination found call for (skipped files unchanged, copied ones
//! equal to the source in bytes, mode and mtime; a failure only where the disk was made
//! to fail, the destination then unchanged); resume sent only the chunks the partial
//! lacked; every chunk the sink took was answered once (its slot freed).
//!
//! With a crash: the side that stopped is stopped, the other one ended (no hang).

use crate::fs::{verified, DestFs, Node};
use crate::run::{End, Outcome, Sim};
use crate::world::{Side, SrcFile, World};
use sluice_wire::{chunk_range, FileKind};

/// What the options and the destination found call for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Skip,
    Copy,
}

pub fn check(sim: &Sim) {
    always(sim);
    match sim.log.crashed {
        None => clean(sim),
        Some(side) => crashed(sim, side),
    }
}

fn always(sim: &Sim) {
    let w = &sim.w;
    for f in &w.files {
        let path = f.path();
        let now = sim.fs.nodes.get(path);
        let before = w.dest.nodes.get(path);
        if now != before {
            let now = now.unwrap_or_else(|| panic!("{path}: removed from the destination"));
            assert!(
                is_source_entry(now, f, false),
                "{path}: {now:?} is not the source's {f:?}"
            );
        }
        if let Some(Outcome::Done(digest)) = sim.log.outcomes.get(&f.entry.file_id) {
            assert_eq!(*digest, f.digest(), "{path}: FileDone's digest");
            let node = now.unwrap_or_else(|| panic!("{path}: done, yet not at the destination"));
            let closed = sim.snk.end == End::Finished;
            assert!(
                is_source_entry(node, f, closed),
                "{path}: done, yet {node:?}"
            );
        }
        let ends = sim.log.sink_ends.get(&f.entry.file_id);
        for digest in ends.map_or(&[][..], Vec::as_slice).iter().flatten() {
            assert_eq!(*digest, f.digest(), "{path}: the sink's digest");
        }
    }
}

/// Whether `node` is the source's entry `f` (a directory is writable by its owner until
/// `Close`, which gives it its mode and mtime).
fn is_source_entry(node: &Node, f: &SrcFile, closed: bool) -> bool {
    let e = &f.entry;
    match node {
        Node::File { data, mode, mtime } => {
            e.kind == FileKind::File && *data == f.data && *mode == e.mode && *mtime == e.mtime_ns
        }
        Node::Dir { mode, mtime } => {
            e.kind == FileKind::Dir
                && if closed {
                    *mode == e.mode && *mtime == e.mtime_ns
                } else {
                    *mode == e.mode | 0o700 || *mode == e.mode
                }
        }
        Node::Link { target, mtime } => {
            e.kind == FileKind::Symlink
                && Some(target) == e.symlink_target.as_ref()
                && *mtime == e.mtime_ns
        }
    }
}

fn clean(sim: &Sim) {
    let w = &sim.w;
    assert_eq!(sim.src.end, End::Finished, "the source finished");
    assert_eq!(sim.snk.end, End::Finished, "the sink finished");
    assert_eq!(
        sim.log.outcomes.len(),
        w.files.len(),
        "every file has its final word"
    );
    let mut resumed = 0;
    for f in &w.files {
        let path = f.path();
        let id = f.entry.file_id;
        let outcome = &sim.log.outcomes[&id];
        let before = w.dest.nodes.get(path);
        let now = sim.fs.nodes.get(path);
        let dup = w.faults.dup_pm > 0;
        match (expect(w, f), outcome) {
            (Expect::Skip, Outcome::Skipped) => assert_eq!(now, before, "{path}: skipped"),
            (Expect::Copy, Outcome::Done(_)) => {}
            (Expect::Copy, Outcome::Failed(m))
                if m.starts_with("injected")
                    || (w.faults.corrupt_pm > 0 && m.contains("the sink refused the chunk")) =>
            {
                // (Unless a duplicate was written after the failure.)
                let again = dup && now.is_some_and(|n| is_source_entry(n, f, true));
                assert!(now == before || again, "{path}: failed, yet {now:?}");
            }
            (want, got) => panic!("{path}: {want:?} expected, {got:?} came"),
        }
        if expect(w, f) == Expect::Copy && f.has_data() {
            let held = held(w, f);
            resumed += held_bytes(f, w.chunk_bytes, &held);
            let want = (!held.is_empty()).then_some(held);
            let skip = sim
                .log
                .skips
                .get(&id)
                .map(|s| s.as_ref().map(|s| s.iter().collect()));
            assert_eq!(skip, Some(want), "{path}: what was sent of it");
        }
        check_sink_ends(sim, f);
    }
    assert_eq!(sim.log.resumed_src, resumed, "bytes resumed, at the source");
    assert_eq!(sim.log.resumed_snk, resumed, "bytes resumed, at the sink");
    assert_eq!(
        sim.snk.slots, w.shape.slots,
        "every chunk taken was answered once"
    );
    assert!(
        sim.snk.table.is_empty(),
        "every file the sink took in has ended"
    );
}

/// The sink reports a file's end once, the one the source heard. (A small file can be
/// written twice where its pack was duplicated in flight: the engine's `write_packed`
/// does not keep the one-writer rule, and the second end is ignored by the source.)
fn check_sink_ends(sim: &Sim, f: &SrcFile) {
    let id = f.entry.file_id;
    let ends = sim.log.sink_ends.get(&id).map_or(&[][..], Vec::as_slice);
    let twice = sim.w.faults.dup_pm > 0 && f.entry.size <= u64::from(sim.w.chunk_bytes);
    assert!(ends.len() <= 1 || twice, "{}: ended {ends:?}", f.path());
    match (&sim.log.outcomes[&id], ends.first()) {
        // The source's own failure: the sink forgot the file (or, the source's word
        // overtaken by a duplicate, completed it, the bytes right).
        (Outcome::Failed(m), _)
            if m.starts_with("injected: cannot read")
                || m.contains("the sink refused the chunk") => {}
        (Outcome::Skipped, None) => {}
        (Outcome::Done(d), Some(Ok(e))) => assert_eq!(d, e),
        (Outcome::Failed(m), Some(Err(e))) => assert_eq!(m, e),
        (o, e) => panic!("{}: the source heard {o:?}, the sink said {e:?}", f.path()),
    }
}

fn crashed(sim: &Sim, side: Side) {
    let (stopped, other) = match side {
        Side::Source => (&sim.src.end, &sim.snk.end),
        Side::Sink => (&sim.snk.end, &sim.src.end),
    };
    assert_eq!(*stopped, End::Crashed);
    assert_ne!(
        *other,
        End::Running,
        "the other side noticed the crash and ended"
    );
}

/// The policy the sink core implements, stated from the options and the destination.
fn expect(w: &World, f: &SrcFile) -> Expect {
    let o = &w.opts;
    let e = &f.entry;
    let path = f.path();
    let d = &w.dest;
    let exists = d.exists(path);
    let same = d.same_size_and_mtime(path, e.size, e.mtime_ns);
    let skip = match e.kind {
        FileKind::Dir => false,
        FileKind::Symlink => o.no_clobber && exists,
        FileKind::File if e.size == 0 => (o.no_clobber && exists) || (o.update && same),
        FileKind::File => {
            o.negotiates()
                && ((o.no_clobber && exists)
                    || (o.update && same)
                    || (o.resume && same && d.whole_digest(path, e.size, w.chunk_bytes).is_ok()))
        }
    };
    if skip {
        Expect::Skip
    } else {
        Expect::Copy
    }
}

/// The chunks of a copied data file that its partial holds for this version (resume).
fn held(w: &World, f: &SrcFile) -> Vec<u64> {
    if !w.opts.resume {
        return Vec::new();
    }
    partial_held(&w.dest, f, w.chunk_bytes)
}

fn partial_held(d: &DestFs, f: &SrcFile, cb: u32) -> Vec<u64> {
    let e = &f.entry;
    match d.partials.get(f.path()) {
        Some(p)
            if p.head.size == e.size
                && p.head.mtime == e.mtime_ns
                && p.head.chunk_bytes == cb
                && p.data.len() as u64 == e.size =>
        {
            verified(p).into_iter().map(|(i, _)| i).collect()
        }
        _ => Vec::new(),
    }
}

fn held_bytes(f: &SrcFile, cb: u32, held: &[u64]) -> u64 {
    held.iter()
        .map(|i| u64::from(chunk_range(f.entry.size, cb, *i).expect("in range").1))
        .sum()
}
