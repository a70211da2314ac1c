//! The sink core as the engine drives it: announce decisions for every kind of entry and
//! option, `Close`, the chunk and file-end frames, and one file received end to end by
//! the pieces together (as a simulation composes them).

use super::*;
use crate::time::Instant;
use sluice_wire::{
    chunk_checksum, Close, CloseReason, ErrorFrame, FileDigest, FileEntry, FileKind, FrameType,
    Have, HaveState, ManifestEnd, Recovery, RelPath, SkipReason,
};

const CB: u32 = 1 << 16;

fn opts(resume: bool, update: bool, no_clobber: bool) -> Options {
    Options {
        resume,
        update,
        no_clobber,
        chunk_bytes: CB,
        sink_closes: false,
    }
}

fn entry(file_id: u64, path: &str, kind: FileKind, size: u64) -> FileEntry {
    FileEntry {
        file_id,
        path: RelPath::parse(path).expect("a valid path"),
        kind,
        size,
        mode: 0o640,
        mtime_ns: 7,
        symlink_target: (kind == FileKind::Symlink).then(|| "target".to_string()),
    }
}

fn drain(m: &mut Master) -> Vec<Action> {
    std::iter::from_fn(|| m.poll_action()).collect()
}

/// Announces `e` answering each probe from `answer`; returns the probes asked and the
/// actions.
fn announce_with(
    m: &mut Master,
    e: &FileEntry,
    answer: impl Fn(Probe, &mut DestFacts),
) -> (Vec<Probe>, Vec<Action>) {
    let mut facts = DestFacts::default();
    let mut asked = Vec::new();
    while let Some(p) = m.probe(e, &facts) {
        assert!(!asked.contains(&p), "{p:?} asked twice");
        asked.push(p);
        answer(p, &mut facts);
    }
    m.announce(e, Some(e.path.clone()), facts);
    (asked, drain(m))
}

fn have(file_id: u64, state: HaveState) -> Action {
    Action::Send(Frame::Have(Have { file_id, state }))
}

fn skip(file_id: u64) -> Vec<Action> {
    vec![
        have(file_id, HaveState::Skip(SkipReason::Exists)),
        Action::Skipped {
            file_id,
            whole: None,
        },
        Action::Announced { file_id },
    ]
}

/// Facts of a destination that does not exist.
fn nothing_there(p: Probe, f: &mut DestFacts) {
    match p {
        Probe::Exists => f.exists = Some(false),
        Probe::SameSizeAndMtime => f.same_size_and_mtime = Some(false),
        Probe::WholeDigest => unreachable!("not the same file"),
        Probe::Partial => f.partial = Some(PartialFacts::Absent),
    }
}

/// Facts of a destination that holds the same file.
fn same_there(p: Probe, f: &mut DestFacts) {
    match p {
        Probe::Exists => f.exists = Some(true),
        Probe::SameSizeAndMtime => f.same_size_and_mtime = Some(true),
        Probe::WholeDigest => f.whole_digest = Some(Ok([9; 16])),
        Probe::Partial => unreachable!("whole already"),
    }
}

#[test]
fn directories_are_made_at_once_and_get_their_modes_and_times_at_close_deepest_first() {
    let mut m = Master::new(opts(false, false, false));
    for (id, path, mode) in [(1, "d", 0o555), (2, "d/e", 0o751), (3, "x", 0o700)] {
        let mut e = entry(id, path, FileKind::Dir, 0);
        e.mode = mode;
        let (asked, actions) = announce_with(&mut m, &e, nothing_there);
        assert!(asked.is_empty());
        let dest = e.path.clone();
        let make = Action::MakeDir {
            file_id: id,
            dest: dest.clone(),
            mode: e.mode,
        };
        assert_eq!(actions, [make, Action::Announced { file_id: id }]);
        let result = if id == 3 {
            Err(FileError::new(ErrorCode::Io, "cannot create"))
        } else {
            Ok(())
        };
        m.made(&e, dest, result.clone());
        let result = result.map(|()| [0; 16]);
        assert_eq!(
            drain(&mut m),
            [Action::Ended {
                file_id: id,
                result
            }]
        );
    }
    let close = Frame::Close(Close {
        reason: CloseReason::Done,
    });
    assert_eq!(m.on_frame(close), Ok(Flow::Closed));
    let finish = |p: &str, mode| Action::FinishDir {
        dest: RelPath::parse(p).expect("valid"),
        mode,
        mtime_ns: 7,
    };
    let ack = Action::Send(Frame::CloseAck(sluice_wire::CloseAck));
    // The directory that failed is not finished; a read-only one gets its mode back.
    let closing = [Action::Stop, finish("d/e", 0o751), finish("d", 0o555), ack];
    assert_eq!(drain(&mut m), closing);
    assert_eq!(m.poll_action(), None);
}

#[test]
fn a_sink_that_closes_itself_does_so_once_the_manifest_ended_and_the_files_settled() {
    let closing_opts = Options {
        sink_closes: true,
        ..opts(false, false, false)
    };
    let mut m = Master::new(closing_opts);
    let mut d = entry(1, "d", FileKind::Dir, 0);
    d.mode = 0o750;
    let (_, _) = announce_with(&mut m, &d, nothing_there);
    m.made(&d, d.path.clone(), Ok(()));
    drain(&mut m);
    assert!(!m.settled(), "the manifest may announce more");
    assert!(!m.manifest_ended());
    let end = Frame::ManifestEnd(sluice_wire::ManifestEnd { files: 1, bytes: 0 });
    assert_eq!(m.on_frame(end), Ok(Flow::Continue));
    assert!(m.manifest_ended());
    assert_eq!(drain(&mut m), []);
    assert!(m.settled());
    let finish = Action::FinishDir {
        dest: RelPath::parse("d").expect("valid"),
        mode: 0o750,
        mtime_ns: 7,
    };
    let ack = Action::Send(Frame::CloseAck(sluice_wire::CloseAck));
    assert_eq!(drain(&mut m), [finish, ack], "no Stop: stray chunks drain");
    assert!(!m.settled(), "once");
    assert_eq!(m.poll_action(), None);

    // Without the option the sink waits for the source's `Close`.
    let mut m = Master::new(opts(false, false, false));
    let end = Frame::ManifestEnd(sluice_wire::ManifestEnd { files: 0, bytes: 0 });
    assert_eq!(m.on_frame(end), Ok(Flow::Continue));
    assert!(!m.settled());
    assert_eq!(m.poll_action(), None);
}

#[test]
fn symlinks_are_kept_only_under_no_clobber() {
    for (no_clobber, update) in [(false, false), (false, true), (true, false), (true, true)] {
        let mut m = Master::new(opts(false, update, no_clobber));
        let e = entry(4, "l", FileKind::Symlink, 0);
        let (asked, actions) = announce_with(&mut m, &e, same_there);
        if no_clobber {
            assert_eq!(asked, [Probe::Exists], "exists: the rest is not looked up");
            assert_eq!(actions, skip(4));
        } else {
            assert!(asked.is_empty(), "--update always re-creates links");
            let make = Action::MakeSymlink {
                file_id: 4,
                dest: e.path.clone(),
                target: "target".into(),
                mtime_ns: 7,
            };
            assert_eq!(actions, [make, Action::Announced { file_id: 4 }]);
        }
    }
}

#[test]
fn an_empty_file_is_written_whole_or_skipped() {
    let mut m = Master::new(opts(false, true, false));
    let e = entry(5, "empty", FileKind::File, 0);
    let (asked, actions) = announce_with(&mut m, &e, same_there);
    assert_eq!(asked, [Probe::SameSizeAndMtime]);
    assert_eq!(actions, skip(5));
    let (asked, actions) = announce_with(&mut m, &e, nothing_there);
    assert_eq!(asked, [Probe::SameSizeAndMtime]);
    let write = Action::WriteEmpty {
        file_id: 5,
        dest: e.path.clone(),
        mode: 0o640,
        mtime_ns: 7,
    };
    assert_eq!(actions, [write, Action::Announced { file_id: 5 }]);
    m.made(&e, e.path.clone(), Ok(()));
    let result = Ok(FileDigest::of_ordered(&[]));
    assert_eq!(drain(&mut m), [Action::Ended { file_id: 5, result }]);
}

fn receive(actions: &[Action]) -> (&ChunkAccount, bool) {
    let found = actions.iter().find_map(|a| match a {
        Action::Receive {
            account, resumed, ..
        } => Some((account, *resumed)),
        _ => None,
    });
    found.expect("a Receive action")
}

#[test]
fn a_data_file_without_negotiation_is_received_unasked() {
    let mut m = Master::new(opts(false, false, false));
    let e = entry(6, "big", FileKind::File, 3 * u64::from(CB) + 1);
    let (asked, actions) = announce_with(&mut m, &e, same_there);
    assert!(asked.is_empty(), "no lookups at all");
    assert_eq!(actions.len(), 2, "{actions:?}");
    let (account, resumed) = receive(&actions);
    assert_eq!(
        (account.count(), account.remaining(), resumed),
        (4, 4, false)
    );
    assert_eq!(actions[1], Action::Announced { file_id: 6 });
}

#[test]
fn no_clobber_and_update_answer_skip_or_missing() {
    let e = entry(7, "f", FileKind::File, 10);
    for (update, no_clobber) in [(true, false), (false, true), (true, true)] {
        let mut m = Master::new(opts(false, update, no_clobber));
        let (asked, actions) = announce_with(&mut m, &e, same_there);
        assert_eq!(
            asked.len(),
            1,
            "the first fact that skips is enough: {asked:?}"
        );
        assert_eq!(actions, skip(7));
        let (_, actions) = announce_with(&mut m, &e, nothing_there);
        assert_eq!(actions.len(), 3, "{actions:?}");
        assert_eq!(receive(&actions).0.remaining(), 1);
        assert_eq!(actions[1], have(7, HaveState::Missing));
        assert_eq!(actions[2], Action::Announced { file_id: 7 });
    }
}

#[test]
fn resume_of_a_whole_destination_answers_complete_and_skips() {
    let mut m = Master::new(opts(true, false, false));
    let e = entry(8, "f", FileKind::File, 10);
    let (asked, actions) = announce_with(&mut m, &e, same_there);
    assert_eq!(asked, [Probe::SameSizeAndMtime, Probe::WholeDigest]);
    let complete = HaveState::Complete {
        size: 10,
        mtime_ns: 7,
        digest: [9; 16],
    };
    let skipped = Action::Skipped {
        file_id: 8,
        whole: Some([9; 16]),
    };
    let announced = Action::Announced { file_id: 8 };
    assert_eq!(actions, [have(8, complete), skipped, announced]);
}

#[test]
fn resume_of_an_unreadable_whole_destination_looks_for_a_partial() {
    let mut m = Master::new(opts(true, false, false));
    let e = entry(9, "f", FileKind::File, 10);
    let (asked, actions) = announce_with(&mut m, &e, |p, f| match p {
        Probe::SameSizeAndMtime => f.same_size_and_mtime = Some(true),
        Probe::WholeDigest => {
            f.whole_digest = Some(Err(FileError::new(ErrorCode::Io, "unreadable")));
        }
        Probe::Partial => f.partial = Some(PartialFacts::Absent),
        Probe::Exists => unreachable!(),
    });
    assert_eq!(
        asked,
        [Probe::SameSizeAndMtime, Probe::WholeDigest, Probe::Partial]
    );
    assert_eq!(actions[1], have(9, HaveState::Missing));
}

fn resume_with(size: u64, partial: PartialFacts) -> Vec<Action> {
    let mut m = Master::new(opts(true, false, false));
    let e = entry(10, "f", FileKind::File, size);
    let (asked, actions) = announce_with(&mut m, &e, |p, f| match p {
        Probe::SameSizeAndMtime => f.same_size_and_mtime = Some(false),
        Probe::Partial => f.partial = Some(partial.clone()),
        _ => unreachable!(),
    });
    assert_eq!(asked, [Probe::SameSizeAndMtime, Probe::Partial]);
    actions
}

#[test]
fn resume_from_a_partial_answers_its_chunks_and_counts_their_exact_bytes() {
    let size = 2 * u64::from(CB) + 100;
    let actions = resume_with(size, PartialFacts::Held(vec![(0, 1), (2, 3)]));
    let resumed = Action::Resumed {
        file_id: 10,
        bytes: u64::from(CB) + 100,
    };
    assert_eq!(actions[0], resumed);
    let (account, resumed) = receive(&actions);
    assert!(resumed, "the opened partial is kept");
    assert_eq!(account.remaining(), 1);
    assert!(account.contains(0) && account.contains(2) && !account.contains(1));
    let chunks = account.received().clone();
    let partial = HaveState::Partial {
        size,
        mtime_ns: 7,
        chunks,
    };
    assert_eq!(actions[2], have(10, partial));
    assert_eq!(actions[3], Action::Announced { file_id: 10 });
}

#[test]
fn a_partial_holding_every_chunk_is_completed_at_once() {
    let actions = resume_with(100, PartialFacts::Held(vec![(0, 1)]));
    let kinds: Vec<_> = actions.iter().map(std::mem::discriminant).collect();
    assert_eq!(kinds.len(), 5, "{actions:?}");
    assert!(matches!(actions[2], Action::Send(Frame::Have(_))));
    assert_eq!(actions[3], Action::Complete { file_id: 10 });
    assert_eq!(receive(&actions).0.remaining(), 0);
}

#[test]
fn a_partial_of_another_version_is_discarded_and_a_failed_one_left_alone() {
    let actions = resume_with(100, PartialFacts::Held(Vec::new()));
    assert_eq!(actions[0], Action::DiscardPartial { file_id: 10 });
    assert!(!receive(&actions).1);
    assert_eq!(actions[2], have(10, HaveState::Missing));
    let failed = PartialFacts::Failed(FileError::new(ErrorCode::Io, "cannot open"));
    let actions = resume_with(100, failed);
    assert!(matches!(actions[0], Action::Receive { resumed: false, .. }));
    assert_eq!(actions[1], have(10, HaveState::Missing));
}

#[test]
fn a_destination_that_cannot_be_represented_fails_the_file_only_on_the_wire() {
    let mut m = Master::new(opts(true, true, true));
    let e = entry(11, "f", FileKind::File, 10);
    m.announce(&e, None, DestFacts::default());
    let failed = Frame::FileFailed(FileFailed::new(
        11,
        ErrorCode::PathOutsideRoot,
        "\"f\": destination path too long",
    ));
    let announced = Action::Announced { file_id: 11 };
    assert_eq!(drain(&mut m), [Action::Send(failed), announced]);
}

#[test]
fn a_file_of_too_many_chunks_fails_as_too_large() {
    let mut m = Master::new(opts(false, false, false));
    let size = (sluice_wire::MAX_FILE_CHUNKS + 1) * u64::from(CB);
    let e = entry(12, "huge", FileKind::File, size);
    let (_, actions) = announce_with(&mut m, &e, nothing_there);
    match &actions[0] {
        Action::Ended {
            file_id: 12,
            result: Err(e),
        } => {
            assert_eq!(e.code, ErrorCode::TooLarge);
            assert_eq!(e.recovery(), Recovery::Abort);
            assert!(e.message.starts_with("\"huge\": file has"), "{e}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn control_frames_other_than_the_manifest() {
    let mut m = Master::new(opts(false, false, false));
    let end = Frame::ManifestEnd(ManifestEnd { files: 1, bytes: 2 });
    assert_eq!(m.on_frame(end), Ok(Flow::Continue));
    assert_eq!(m.poll_action(), None);
    let failed = Frame::FileFailed(FileFailed::new(3, ErrorCode::Io, "unreadable"));
    assert_eq!(m.on_frame(failed), Ok(Flow::Continue));
    let forget = Action::Forget {
        file_id: 3,
        message: "unreadable".into(),
    };
    assert_eq!(m.poll_action(), Some(forget));
    let ack = Frame::ChunkAck(sluice_wire::ChunkAck {
        file_id: 1,
        offset: 0,
    });
    assert_eq!(m.on_frame(ack), Ok(Flow::Continue));
    assert_eq!(m.poll_action(), Some(Action::Ignored(FrameType::ChunkAck)));
    let err = ErrorFrame::new(ErrorCode::Cancelled, "stop");
    assert_eq!(m.on_frame(Frame::Error(err.clone())), Err(err));
}

#[test]
fn every_probe_sequence_ends_and_asks_each_fact_once() {
    let kinds = [
        (FileKind::Dir, 0),
        (FileKind::Symlink, 0),
        (FileKind::File, 0),
        (FileKind::File, 10),
    ];
    for bits in 0..8u8 {
        let o = opts(bits & 1 != 0, bits & 2 != 0, bits & 4 != 0);
        for (kind, size) in kinds {
            for answers in 0..16u8 {
                let mut m = Master::new(o);
                let e = entry(1, "p", kind, size);
                // `announce_with` asserts that no probe repeats, so at most 4 are asked.
                let (asked, actions) = announce_with(&mut m, &e, |p, f| match p {
                    Probe::Exists => f.exists = Some(answers & 1 != 0),
                    Probe::SameSizeAndMtime => f.same_size_and_mtime = Some(answers & 2 != 0),
                    Probe::WholeDigest => {
                        f.whole_digest = Some(if answers & 4 != 0 {
                            Ok([1; 16])
                        } else {
                            Err(FileError::new(ErrorCode::Io, "x"))
                        });
                    }
                    Probe::Partial => f.partial = Some(PartialFacts::Absent),
                });
                assert!(asked.len() <= 4);
                if !o.negotiates() {
                    assert!(asked.is_empty(), "{o:?} {kind:?}: {asked:?}");
                }
                assert_eq!(actions.last(), Some(&Action::Announced { file_id: 1 }));
            }
        }
    }
}

#[test]
fn chunk_frames_nack_each_file_of_a_pack_and_ack_only_when_asked() {
    let mut header = sluice_wire::ChunkHeader::plain(4, u64::from(CB), b"abc", false);
    let nacks_of = |h: &sluice_wire::ChunkHeader, s: &[Segment]| nacks(h, s).collect::<Vec<_>>();
    let one = Frame::ChunkNack(sluice_wire::ChunkNack {
        file_id: 4,
        offset: u64::from(CB),
        reason: ErrorCode::ChecksumMismatch,
    });
    assert_eq!(nacks_of(&header, &[]), [one]);
    header.flags.set(sluice_wire::ChunkFlags::PACKED, true);
    let segs = [
        Segment { file_id: 4, len: 1 },
        Segment { file_id: 5, len: 2 },
    ];
    let frames = nacks_of(&header, &segs);
    let ids: Vec<_> = frames
        .iter()
        .map(|f| match f {
            Frame::ChunkNack(n) => (n.file_id, n.offset),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(ids, [(4, 0), (5, 0)]);
    assert_eq!(NACK_REASON.recovery(), Recovery::Retry);
    assert_eq!(ack(false, &header), None);
    assert!(matches!(ack(true, &header), Some(Frame::ChunkAck(a)) if a.file_id == 4));
}

#[test]
fn a_files_end_carries_its_digest_or_its_errors_code_redacted() {
    assert_eq!(
        ended_frame(3, &Ok([5; 16]), |_| unreachable!()),
        Frame::FileDone(FileDone {
            file_id: 3,
            digest: [5; 16]
        })
    );
    let err = FileError::new(ErrorCode::NoSpace, "cannot write /srv/x: No space left");
    let frame = ended_frame(3, &Err(err), |m| m.replace("/srv", "<root>"));
    let want = FileFailed::new(
        3,
        ErrorCode::NoSpace,
        "cannot write <root>/x: No space left",
    );
    assert_eq!(frame, Frame::FileFailed(want));
}

/// One data file through the pieces as a single-threaded sink (a simulation's) composes
/// them: chunks out of order, a duplicate, one overtaking the manifest.
#[test]
fn one_file_received_end_to_end_by_the_pieces_together() {
    let mut m = Master::new(opts(false, false, false));
    let mut table: FileTable<FileChunks<(u64, u64)>> = FileTable::default();
    let data: Vec<Vec<u8>> = (0..3u8).map(|i| vec![i; 100]).collect();
    let sums: Vec<u64> = data.iter().map(|d| chunk_checksum(d)).collect();
    let now = Instant::ZERO;
    let deadline = FileTable::<FileChunks<(u64, u64)>>::deadline(now);
    assert!(matches!(table.lookup(1, now, deadline), Lookup::Wait));
    let e = entry(1, "f", FileKind::File, 2 * u64::from(CB) + 100);
    m.announce(&e, Some(e.path.clone()), DestFacts::default());
    while let Some(a) = m.poll_action() {
        match a {
            Action::Receive {
                file_id, account, ..
            } => table
                .insert(file_id, FileChunks::new(account))
                .expect("room"),
            Action::Announced { file_id } => table.announced(file_id),
            other => panic!("{other:?}"),
        }
    }
    let mut ended = Vec::new();
    for index in [2usize, 0, 2, 1] {
        let Lookup::Found(_) = table.lookup(1, now, deadline) else {
            panic!("file 1 is announced");
        };
        let Some(file) = table.remove(1) else { break };
        let mut file = file;
        let mut next = match file.offer((index as u64, sums[index])) {
            Offer::Write(c) => Some(c),
            other => panic!("one thread, one writer: {other:?}"),
        };
        while let Some((i, sum)) = next.take() {
            match file.written(i, sum) {
                Next::Write(c) => next = Some(c),
                Next::Idle => {}
                Next::Complete { digest, dropped } => {
                    assert!(dropped.is_empty());
                    ended.push(ended_frame(1, &Ok(digest), str::to_string));
                }
                Next::Ended { .. } => panic!("not ended"),
            }
        }
        if !file.is_ended() {
            table.insert(1, file).expect("room");
        }
    }
    let digest = FileDigest::of_ordered(&sums);
    assert_eq!(ended, [Frame::FileDone(FileDone { file_id: 1, digest })]);
    assert!(matches!(table.lookup(1, now, deadline), Lookup::Gone));
}

#[test]
fn a_piece_that_does_not_fit_its_file_ends_it_with_bad_frame() {
    let size = 2 * u64::from(CB) + 100;
    let piece =
        |offset: u64, len: usize, last: bool| ChunkHeader::plain(3, offset, &vec![7u8; len], last);
    let cb = CB as usize;
    assert_eq!(check_piece(&piece(0, cb, false), CB, size, "d/f"), Ok(()));
    assert_eq!(
        check_piece(&piece(2 * u64::from(CB), 100, true), CB, size, "d/f"),
        Ok(())
    );
    let misfits = [
        (piece(1, cb, false), "Chunk.offset: not a multiple"),
        (piece(u64::from(CB), cb - 1, false), "Chunk.raw_len"),
        (piece(2 * u64::from(CB), 99, true), "Chunk.raw_len"),
        (piece(0, cb, true), "Chunk.flags: LAST"),
        (piece(2 * u64::from(CB), 100, false), "Chunk.flags: LAST"),
        (
            piece(3 * u64::from(CB), 100, true),
            "Chunk.offset: past the end",
        ),
    ];
    for (header, why) in misfits {
        let e = check_piece(&header, CB, size, "d/f").expect_err(why);
        assert_eq!(e.code, ErrorCode::BadFrame, "{why}");
        assert!(
            e.message.starts_with("\"d/f\": the chunk at offset"),
            "{e:?}"
        );
        assert!(e.message.contains(why), "{why}: {e:?}");
    }
}

#[test]
fn a_packed_segment_is_the_whole_file_or_ends_it_with_bad_frame() {
    let seg = Segment {
        file_id: 4,
        len: 100,
    };
    assert_eq!(check_segment(&seg, 100, "s"), Ok(()));
    for size in [99, 101, 0] {
        let e = check_segment(&seg, size, "s").expect_err("a misfit");
        assert_eq!(e.code, ErrorCode::BadFrame);
        assert!(e.message.contains("100 bytes for a file of"), "{e:?}");
    }
}
