// Test data is small; truncation cannot happen.
#![allow(clippy::cast_possible_truncation)]

use super::*;
use proptest::prelude::*;
use sluice_wire::{
    ChunkAck, ChunkNack, ChunkSet, CloseAck, ErrorFrame, FileDone, Have, HaveState, RelPath,
    SkipReason, MAX_MANIFEST_ENTRIES,
};

const CHUNK: u32 = 1 << 20;
const MTIME: i64 = 1_700_000_000_000_000_000;

fn at(ms: u64) -> Instant {
    Instant::from_origin(Duration::from_millis(ms))
}

fn file(id: u64, size: u64) -> FileEntry {
    FileEntry {
        file_id: id,
        path: RelPath::parse(&format!("f{id}")).unwrap(),
        kind: FileKind::File,
        size,
        mode: 0o644,
        mtime_ns: MTIME,
        symlink_target: None,
    }
}

fn dir(id: u64) -> FileEntry {
    FileEntry {
        kind: FileKind::Dir,
        size: 0,
        ..file(id, 0)
    }
}

fn core(negotiate: bool) -> SourceCore {
    SourceCore::new(SourceConfig::new(CHUNK, negotiate))
}

fn actions(c: &mut SourceCore) -> Vec<SourceAction> {
    std::iter::from_fn(|| c.poll_action()).collect()
}

fn have(id: u64, state: HaveState) -> Frame {
    Frame::Have(Have { file_id: id, state })
}

fn done(id: u64) -> Frame {
    Frame::FileDone(FileDone {
        file_id: id,
        digest: [7; 16],
    })
}

fn nack(id: u64, offset: u64) -> Frame {
    Frame::ChunkNack(ChunkNack {
        file_id: id,
        offset,
        reason: ErrorCode::ChecksumMismatch,
    })
}

fn scheduled(acts: &[SourceAction]) -> Vec<(u64, Option<ChunkSet>)> {
    acts.iter()
        .filter_map(|a| match a {
            SourceAction::Schedule { file_id, skip } => Some((*file_id, skip.clone())),
            _ => None,
        })
        .collect()
}

fn sent(acts: &[SourceAction]) -> Vec<&Frame> {
    acts.iter()
        .filter_map(|a| match a {
            SourceAction::Send(f) => Some(f),
            _ => None,
        })
        .collect()
}

/// Announces `entries` and ends the scan; returns the actions of it all.
fn scan(c: &mut SourceCore, entries: Vec<FileEntry>) -> Vec<SourceAction> {
    let mut all = Vec::new();
    for e in entries {
        c.on_entry(0, e);
        all.extend(actions(c));
    }
    c.on_scan_end();
    all.extend(actions(c));
    all
}

#[test]
fn without_negotiation_data_files_are_scheduled_as_announced() {
    let mut c = core(false);
    let acts = scan(
        &mut c,
        vec![dir(1), file(2, 10), file(3, 0), file(4, 5 << 20)],
    );
    assert_eq!(scheduled(&acts), vec![(2, None), (4, None)]);
    let frames = sent(&acts);
    let Frame::Manifest(m) = frames[0] else {
        panic!("a manifest first: {frames:?}")
    };
    assert_eq!(m.entries.len(), 4);
    assert_eq!(
        frames[1],
        &Frame::ManifestEnd(ManifestEnd {
            files: 4,
            bytes: 10 + (5 << 20),
        })
    );
    assert_eq!(c.waiting_for(), Waiting::Answers);
    assert_eq!(c.in_flight(), 4);
    assert_eq!(c.announced(), (4, 10 + (5 << 20)));
}

#[test]
fn every_file_answered_ends_the_files_then_close_is_acknowledged() {
    let mut c = core(false);
    scan(&mut c, vec![dir(1), file(2, 10)]);
    c.on_frame(done(1), at(1)).unwrap();
    let acts = actions(&mut c);
    assert!(
        matches!(&acts[..], [SourceAction::Report(Report::Done { entry, .. })] if entry.file_id == 1)
    );
    c.on_frame(done(2), at(2)).unwrap();
    let acts = actions(&mut c);
    assert_eq!(acts.last(), Some(&SourceAction::EndOfFiles));
    assert_eq!(c.waiting_for(), Waiting::DataSent);
    c.on_data_sent(at(10));
    let acts = actions(&mut c);
    assert_eq!(
        sent(&acts),
        vec![&Frame::Close(Close {
            reason: CloseReason::Done
        })]
    );
    let deadline = at(10) + CLOSE_TIMEOUT;
    assert_eq!(c.waiting_for(), Waiting::CloseAck { deadline });
    // Late answers are ignored; the acknowledgement finishes the session.
    c.on_frame(done(2), at(11)).unwrap();
    c.on_tick(at(12)).unwrap();
    c.on_frame(Frame::CloseAck(CloseAck), at(13)).unwrap();
    assert_eq!(c.waiting_for(), Waiting::Finished);
    assert!(actions(&mut c).is_empty());
    assert_eq!(c.on_peer_closed(), Ok(()));
}

fn sink_closing(negotiate: bool) -> SourceCore {
    SourceCore::new(SourceConfig {
        sink_closes: true,
        ..SourceConfig::new(CHUNK, negotiate)
    })
}

#[test]
fn a_sink_that_closes_itself_is_answered_with_no_close() {
    // Its `CloseAck` behind the last `FileDone`, before the data path has ended.
    let mut c = sink_closing(false);
    scan(&mut c, vec![dir(1), file(2, 10)]);
    c.on_frame(done(1), at(1)).unwrap();
    actions(&mut c);
    c.on_frame(done(2), at(2)).unwrap();
    actions(&mut c);
    c.on_frame(Frame::CloseAck(CloseAck), at(2)).unwrap();
    assert!(actions(&mut c).is_empty());
    assert_eq!(
        c.waiting_for(),
        Waiting::DataSent,
        "the data path still drains"
    );
    assert_eq!(c.on_peer_closed(), Ok(()), "the sink may hang up now");
    c.on_data_sent(at(3));
    assert!(actions(&mut c).is_empty(), "no Close");
    assert_eq!(c.waiting_for(), Waiting::Finished);

    // Its `CloseAck` after the data path has ended: awaited, by the close's deadline.
    let mut c = sink_closing(false);
    scan(&mut c, vec![file(2, 10)]);
    c.on_frame(done(2), at(2)).unwrap();
    actions(&mut c);
    c.on_data_sent(at(10));
    assert!(sent(&actions(&mut c)).is_empty(), "no Close");
    let deadline = at(10) + CLOSE_TIMEOUT;
    assert_eq!(c.waiting_for(), Waiting::CloseAck { deadline });
    c.on_frame(Frame::CloseAck(CloseAck), at(11)).unwrap();
    assert_eq!(c.waiting_for(), Waiting::Finished);

    // No `CloseAck` at all: the same time-out as an unanswered `Close`.
    let mut c = sink_closing(false);
    scan(&mut c, Vec::new());
    c.on_data_sent(at(0));
    assert!(sent(&actions(&mut c)).is_empty());
    assert!(c.on_tick(at(60_000)).is_err());
}

#[test]
fn a_close_ack_before_every_file_is_answered_fails_the_session() {
    let mut c = sink_closing(false);
    scan(&mut c, vec![file(2, 10), file(3, 10)]);
    c.on_frame(done(2), at(1)).unwrap();
    actions(&mut c);
    let e = c.on_frame(Frame::CloseAck(CloseAck), at(2)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "the sink sent CloseAck while files are unanswered"
    );
    assert_eq!(c.waiting_for(), Waiting::Failed);

    let mut c = sink_closing(false);
    c.on_entry(0, file(2, 10));
    actions(&mut c);
    let e = c.on_frame(Frame::CloseAck(CloseAck), at(1)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "the sink sent CloseAck while the scan goes on"
    );

    // Without `SINK_CLOSES`, an early `CloseAck` is ignored, as before.
    let mut c = core(false);
    scan(&mut c, vec![file(2, 10)]);
    c.on_frame(Frame::CloseAck(CloseAck), at(1)).unwrap();
    assert_eq!(c.waiting_for(), Waiting::Answers);
}

#[test]
fn an_empty_scan_goes_straight_to_the_close() {
    let mut c = core(true);
    let acts = scan(&mut c, Vec::new());
    assert_eq!(
        acts,
        vec![
            SourceAction::Send(Frame::ManifestEnd(ManifestEnd { files: 0, bytes: 0 })),
            SourceAction::ReleasePacks,
            SourceAction::EndOfFiles,
        ]
    );
    assert_eq!(c.waiting_for(), Waiting::DataSent);
}

#[test]
fn a_close_not_acknowledged_in_time_fails() {
    let mut c = core(false);
    scan(&mut c, Vec::new());
    c.on_data_sent(at(0));
    actions(&mut c);
    c.on_tick(at(59_999)).unwrap();
    assert_eq!(
        c.on_tick(at(60_000)),
        Err(SourceError::Disconnected {
            state: "waiting for the close to be acknowledged"
        })
    );
    assert_eq!(c.waiting_for(), Waiting::Failed);
}

#[test]
fn the_peer_going_away_says_what_this_side_was_doing() {
    let mut c = core(false);
    assert_eq!(
        c.on_peer_closed(),
        Err(SourceError::Disconnected {
            state: "sending files"
        })
    );
    let mut c = core(false);
    scan(&mut c, Vec::new());
    c.on_data_sent(at(0));
    actions(&mut c);
    let e = c.on_peer_closed().unwrap_err();
    assert_eq!(
        e.to_string(),
        "sink disconnected while waiting for the close to be acknowledged"
    );
}

#[test]
fn an_error_from_the_sink_is_fatal_in_any_phase() {
    let error = || Frame::Error(ErrorFrame::new(ErrorCode::Io, "disk on fire"));
    let mut c = core(false);
    let e = c.on_frame(error(), at(0)).unwrap_err();
    assert!(
        matches!(e, SourceError::Remote { code: ErrorCode::Io, ref message } if message == "disk on fire")
    );
    assert_eq!(c.waiting_for(), Waiting::Failed);
    let mut c = core(false);
    scan(&mut c, Vec::new());
    c.on_data_sent(at(0));
    actions(&mut c);
    assert!(c.on_frame(error(), at(1)).is_err());
}

#[test]
fn a_full_batch_goes_out_while_scanning_and_idle_sends_the_rest() {
    let mut c = core(false);
    let mut frames = Vec::new();
    for id in 1..=MAX_MANIFEST_ENTRIES as u64 + 1 {
        c.on_entry(0, dir(id));
        frames.extend(sent(&actions(&mut c)).into_iter().cloned());
    }
    assert!(matches!(&frames[..], [Frame::Manifest(m)] if m.entries.len() == MAX_MANIFEST_ENTRIES));
    c.on_scan_idle();
    let acts = actions(&mut c);
    assert!(
        matches!(&acts[..], [SourceAction::Send(Frame::Manifest(m)), SourceAction::ReleasePacks] if m.entries.len() == 1)
    );
    c.on_scan_idle();
    assert_eq!(
        actions(&mut c),
        vec![SourceAction::ReleasePacks],
        "no empty batch"
    );
}

#[test]
fn the_window_holds_at_most_max_files_in_flight() {
    let mut c = core(false);
    for id in 1..=MAX_FILES_IN_FLIGHT as u64 {
        assert!(c.can_announce());
        c.on_entry(0, dir(id));
        actions(&mut c);
    }
    assert!(!c.can_announce());
    c.on_frame(done(5), at(0)).unwrap();
    actions(&mut c);
    assert!(c.can_announce());
    c.on_scan_end();
    actions(&mut c);
    assert!(!c.can_announce(), "the scan is over");
}

#[test]
fn with_negotiation_nothing_is_scheduled_before_have() {
    let mut c = core(true);
    let acts = scan(&mut c, vec![file(1, 3 << 20), dir(2), file(3, 10)]);
    assert!(scheduled(&acts).is_empty());
    c.on_frame(have(1, HaveState::Missing), at(0)).unwrap();
    assert_eq!(scheduled(&actions(&mut c)), vec![(1, None)]);
    // A second answer is ignored.
    c.on_frame(have(1, HaveState::Missing), at(0)).unwrap();
    assert!(actions(&mut c).is_empty());
    // Missing without data: nothing to read; its FileDone comes.
    c.on_frame(have(2, HaveState::Missing), at(0)).unwrap();
    assert!(actions(&mut c).is_empty());
    assert_eq!(c.entry(3).map(|(s, e)| (s, e.size)), Some((0, 10)));
}

#[test]
fn a_partial_of_the_same_version_resumes_and_counts_held_bytes_exactly() {
    let size = 3 * u64::from(CHUNK) + 100; // 4 chunks, the last of 100 bytes
    let mut chunks = ChunkSet::new(4).unwrap();
    chunks.insert(0);
    chunks.insert(3);
    let mut c = core(true);
    scan(&mut c, vec![file(1, size), file(2, size)]);
    let partial = |mtime_ns| HaveState::Partial {
        size,
        mtime_ns,
        chunks: chunks.clone(),
    };
    c.on_frame(have(1, partial(MTIME)), at(0)).unwrap();
    let acts = actions(&mut c);
    assert_eq!(
        acts,
        vec![
            SourceAction::Report(Report::Resumed {
                bytes: u64::from(CHUNK) + 100
            }),
            SourceAction::Schedule {
                file_id: 1,
                skip: Some(chunks.clone())
            },
        ]
    );
    // Changed since the partial was written: sent whole, nothing counted resumed.
    c.on_frame(have(2, partial(MTIME + 1)), at(0)).unwrap();
    assert_eq!(
        actions(&mut c),
        vec![SourceAction::Schedule {
            file_id: 2,
            skip: None
        }]
    );
}

#[test]
fn held_bytes_without_the_last_chunk_are_whole_chunks() {
    let mut chunks = ChunkSet::new(4).unwrap();
    chunks.insert(1);
    chunks.insert(2);
    assert_eq!(rules::held_bytes(3 * 1024 + 1, 1024, &chunks), 2048);
    chunks.insert(3);
    assert_eq!(rules::held_bytes(3 * 1024 + 1, 1024, &chunks), 2049);
}

#[test]
fn complete_or_skip_ends_the_file_and_a_complete_of_another_version_fails_it() {
    let mut c = core(true);
    scan(&mut c, vec![file(1, 10), file(2, 10), file(3, 10)]);
    let complete = |size, mtime_ns| HaveState::Complete {
        size,
        mtime_ns,
        digest: [0; 16],
    };
    c.on_frame(have(1, complete(10, MTIME)), at(0)).unwrap();
    assert!(
        matches!(&actions(&mut c)[..], [SourceAction::Report(Report::Skipped(e))] if e.file_id == 1)
    );
    c.on_frame(have(2, complete(11, MTIME)), at(0)).unwrap();
    let acts = actions(&mut c);
    assert!(
        scheduled(&acts).is_empty(),
        "nothing of it is sent: {acts:?}"
    );
    assert!(
        matches!(&acts[..], [SourceAction::Report(Report::Failed { entry, message })]
            if entry.file_id == 2 && message.contains("another version") && message.contains("BadFrame")),
        "{acts:?}"
    );
    c.on_frame(have(3, HaveState::Skip(SkipReason::Exists)), at(0))
        .unwrap();
    let acts = actions(&mut c);
    assert!(
        matches!(&acts[..], [SourceAction::Report(Report::Skipped(e)), SourceAction::EndOfFiles] if e.file_id == 3),
        "every file ended: {acts:?}"
    );
    assert_eq!(c.in_flight(), 0);
}

#[test]
fn sink_keeps_says_what_the_core_decides_for_an_answer() {
    // The rule a relay applies from outside agrees with the core's own decisions above.
    let complete = |size, mtime_ns| HaveState::Complete {
        size,
        mtime_ns,
        digest: [0; 16],
    };
    let f = file(1, 10);
    assert!(super::sink_keeps(&f, &complete(10, MTIME)));
    assert!(!super::sink_keeps(&f, &complete(11, MTIME)));
    assert!(!super::sink_keeps(&f, &complete(10, MTIME + 1)));
    assert!(!super::names_another_version(&f, &complete(10, MTIME)));
    assert!(super::names_another_version(&f, &complete(11, MTIME)));
    assert!(super::names_another_version(&f, &complete(10, MTIME + 1)));
    assert!(!super::names_another_version(&f, &HaveState::Missing));
    assert!(super::sink_keeps(&f, &HaveState::Skip(SkipReason::Exists)));
    assert!(!super::sink_keeps(&f, &HaveState::Missing));
}

#[test]
fn a_failed_file_is_cancelled_and_reported_once() {
    let mut c = core(false);
    scan(&mut c, vec![file(1, 5 << 20)]);
    let failed = || Frame::FileFailed(FileFailed::new(1, ErrorCode::Io, "no space"));
    c.on_frame(failed(), at(0)).unwrap();
    let acts = actions(&mut c);
    assert_eq!(acts[0], SourceAction::Cancel { file_id: 1 });
    assert!(
        matches!(&acts[1], SourceAction::Report(Report::Failed { entry, message }) if entry.file_id == 1 && message == "no space")
    );
    assert_eq!(acts[2], SourceAction::EndOfFiles);
    c.on_frame(failed(), at(0)).unwrap();
    assert_eq!(actions(&mut c), vec![SourceAction::Cancel { file_id: 1 }]);
}

#[test]
fn a_file_the_source_cannot_read_fails_here_once_and_leaves_the_window() {
    let mut c = core(false);
    scan(&mut c, vec![file(1, 5 << 20), file(2, 10)]);
    assert_eq!(c.waiting_for(), Waiting::Answers);
    c.on_read_failed(1, "reading \"f1\" at 0: EIO".into());
    let acts = actions(&mut c);
    assert_eq!(acts[0], SourceAction::Cancel { file_id: 1 });
    let failed = FileFailed::new(1, ErrorCode::Io, "reading \"f1\" at 0: EIO");
    assert_eq!(acts[1], SourceAction::Send(Frame::FileFailed(failed)));
    assert!(
        matches!(&acts[2], SourceAction::Report(Report::Failed { entry, message }) if entry.file_id == 1 && message.contains("EIO"))
    );
    assert_eq!(acts.len(), 3, "file 2 is still in flight");
    // Another chunk of it failing, or the sink's word on it, changes nothing.
    c.on_read_failed(1, "again".into());
    assert!(actions(&mut c).is_empty());
    c.on_frame(done(1), at(0)).unwrap();
    assert!(actions(&mut c).is_empty());
    // The last file failing ends the files: the session can close.
    c.on_read_failed(2, "gone".into());
    assert_eq!(actions(&mut c).last(), Some(&SourceAction::EndOfFiles));
    assert_eq!(c.waiting_for(), Waiting::DataSent);
    c.on_read_failed(2, "late".into());
    assert!(actions(&mut c).is_empty());
}

#[test]
fn a_file_that_fails_while_scanning_leaves_the_window_at_once() {
    let mut c = core(false);
    c.on_entry(0, file(1, 100));
    actions(&mut c);
    c.on_read_failed(1, "unreadable".into());
    let acts = actions(&mut c);
    assert_eq!(acts.len(), 4, "the batch, Cancel, FileFailed, the report");
    // The sink learns of the file before it learns that it failed.
    let frames = sent(&acts);
    assert!(
        matches!(frames[..], [Frame::Manifest(m), Frame::FileFailed(f)] if m.entries[0].file_id == 1 && f.file_id == 1)
    );
    assert_eq!(c.in_flight(), 0);
    c.on_scan_end();
    assert_eq!(actions(&mut c).last(), Some(&SourceAction::EndOfFiles));
}

#[test]
fn a_nack_resends_the_chunk_or_the_small_file() {
    let size = 2 * u64::from(CHUNK) + 9;
    let mut c = core(false);
    scan(&mut c, vec![file(1, size), file(2, 100)]);
    c.on_frame(nack(1, 2 * u64::from(CHUNK)), at(0)).unwrap();
    assert_eq!(
        actions(&mut c),
        vec![
            SourceAction::Refused {
                key: (1, 2 * u64::from(CHUNK))
            },
            SourceAction::Report(Report::ChunkResent),
            SourceAction::Resend {
                file_id: 1,
                work: Resend::Chunk {
                    index: 2,
                    offset: 2 * u64::from(CHUNK),
                    len: 9
                }
            },
        ]
    );
    c.on_frame(nack(2, 0), at(0)).unwrap();
    let acts = actions(&mut c);
    assert_eq!(
        acts[2],
        SourceAction::Resend {
            file_id: 2,
            work: Resend::Pack
        }
    );
    // A file no longer in flight: only `auto` hears of it.
    c.on_frame(nack(9, 0), at(0)).unwrap();
    assert_eq!(actions(&mut c), vec![SourceAction::Refused { key: (9, 0) }]);
}

#[test]
fn acks_reach_auto_with_their_arrival_time() {
    let mut c = core(false);
    let ack = Frame::ChunkAck(ChunkAck {
        file_id: 4,
        offset: 8,
    });
    c.on_frame(ack, at(42)).unwrap();
    assert_eq!(
        actions(&mut c),
        vec![SourceAction::Delivered {
            key: (4, 8),
            at: at(42)
        }]
    );
}

#[test]
fn scan_errors_are_counted_and_told_to_the_sink() {
    let mut c = core(false);
    c.on_scan_error("a: permission denied".into());
    let acts = actions(&mut c);
    assert_eq!(
        acts[0],
        SourceAction::Report(Report::ScanError("a: permission denied".into()))
    );
    assert!(
        matches!(&acts[1], SourceAction::Send(Frame::FileFailed(f)) if f.file_id == UNDESCRIBED_FILE_ID && f.code == ErrorCode::Io)
    );
}

#[test]
fn idle_releases_packs_only_once_the_scan_ended() {
    let mut c = core(true);
    c.on_idle();
    assert!(actions(&mut c).is_empty());
    scan(&mut c, vec![file(1, 10)]);
    c.on_idle();
    assert_eq!(actions(&mut c), vec![SourceAction::ReleasePacks]);
}

#[test]
fn the_core_can_move_between_threads() {
    fn send<T: Send + std::fmt::Debug>() {}
    send::<SourceCore>();
}

/// A sink answer drawn by a property test.
#[derive(Debug, Clone)]
enum Answer {
    Missing,
    Partial,
    Complete,
    Skip,
    Done,
    Failed,
    Nack,
}

fn answer() -> impl Strategy<Value = (u64, Answer)> {
    let a = prop_oneof![
        Just(Answer::Missing),
        Just(Answer::Partial),
        Just(Answer::Complete),
        Just(Answer::Skip),
        Just(Answer::Done),
        Just(Answer::Failed),
        Just(Answer::Nack),
    ];
    (1u64..20, a)
}

fn frame_of(id: u64, a: &Answer, size: u64) -> Frame {
    let count = sluice_wire::chunk_count(size, CHUNK).max(1);
    match a {
        Answer::Missing => have(id, HaveState::Missing),
        Answer::Partial => have(
            id,
            HaveState::Partial {
                size,
                mtime_ns: MTIME,
                chunks: ChunkSet::new(count).unwrap(),
            },
        ),
        Answer::Complete => have(
            id,
            HaveState::Complete {
                size,
                mtime_ns: MTIME,
                digest: [0; 16],
            },
        ),
        Answer::Skip => have(id, HaveState::Skip(SkipReason::Newer)),
        Answer::Done => done(id),
        Answer::Failed => Frame::FileFailed(FileFailed::new(id, ErrorCode::Io, "x")),
        Answer::Nack => nack(id, 0),
    }
}

proptest! {
    /// Whatever the sink answers, in any order: a file is scheduled at most once and
    /// only while in flight, ends with at most one outcome, the files end exactly once
    /// when every file has its outcome, and the window never overflows.
    #[test]
    fn answers_in_any_order_keep_the_books(
        negotiate in any::<bool>(),
        sizes in proptest::collection::vec(0u64..(3 << 20), 1..20),
        answers in proptest::collection::vec(answer(), 0..80),
    ) {
        let mut c = core(negotiate);
        let n = sizes.len() as u64;
        let entries = sizes.iter().enumerate().map(|(i, &s)| file(i as u64 + 1, s)).collect();
        let mut acts = scan(&mut c, entries);
        for (id, a) in &answers {
            let size = sizes.get(*id as usize - 1).copied().unwrap_or(0);
            c.on_frame(frame_of(*id, a, size), at(0)).unwrap();
            acts.extend(actions(&mut c));
        }
        let mut outcomes = std::collections::BTreeMap::<u64, u32>::new();
        let mut schedules = std::collections::BTreeMap::<u64, u32>::new();
        let mut ends = 0;
        for a in &acts {
            match a {
                SourceAction::Schedule { file_id, .. } => *schedules.entry(*file_id).or_default() += 1,
                SourceAction::Report(Report::Done { entry, .. } | Report::Failed { entry, .. } | Report::Skipped(entry)) => {
                    *outcomes.entry(entry.file_id).or_default() += 1;
                }
                SourceAction::EndOfFiles => ends += 1,
                _ => {}
            }
        }
        prop_assert!(schedules.values().all(|&k| k == 1), "{:?}", schedules);
        prop_assert!(outcomes.values().all(|&k| k == 1), "{:?}", outcomes);
        prop_assert!(outcomes.keys().chain(schedules.keys()).all(|id| (1..=n).contains(id)));
        prop_assert_eq!(c.in_flight() as u64, n - outcomes.len() as u64);
        let all_ended = outcomes.len() as u64 == n;
        prop_assert_eq!(ends, u32::from(all_ended));
        prop_assert_eq!(c.waiting_for() == Waiting::DataSent, all_ended);
    }
}

/// Regression: a file the source could not read was told to the sink, which answers
/// nothing for it, while the source kept waiting for its answer: the session hung.
#[test]
fn a_file_the_source_cannot_read_ends_failed_and_the_session_goes_on() {
    let mut c = core(false);
    c.on_entry(0, file(1, 3 * u64::from(CHUNK)));
    actions(&mut c);
    c.on_entry(0, file(2, 10));
    actions(&mut c);
    c.on_scan_end();
    actions(&mut c);
    assert_eq!(c.waiting_for(), Waiting::Answers);
    c.on_read_failed(1, "reading \"f1\" at 0: Input/output error".into());
    let got = actions(&mut c);
    let failed = FileFailed::new(1, ErrorCode::Io, "reading \"f1\" at 0: Input/output error");
    assert_eq!(got[0], SourceAction::Cancel { file_id: 1 });
    assert_eq!(got[1], SourceAction::Send(Frame::FileFailed(failed)));
    assert!(
        matches!(&got[2], SourceAction::Report(Report::Failed { entry, .. }) if entry.file_id == 1),
        "{got:?}"
    );
    assert_eq!(got.len(), 3, "file 2 is still unanswered");
    // The same file failing again (another reader's chunk) changes nothing.
    c.on_read_failed(1, "again".into());
    assert!(actions(&mut c).is_empty());
    c.on_frame(done(2), at(1)).unwrap();
    assert!(actions(&mut c).contains(&SourceAction::EndOfFiles));
    assert_eq!(c.waiting_for(), Waiting::DataSent);
}

#[test]
fn the_last_files_read_failure_ends_the_files() {
    let mut c = core(false);
    c.on_entry(0, file(1, 10));
    actions(&mut c);
    c.on_scan_end();
    actions(&mut c);
    c.on_read_failed(1, "vanished".into());
    assert_eq!(actions(&mut c).last(), Some(&SourceAction::EndOfFiles));
    assert_eq!(c.waiting_for(), Waiting::DataSent);
}

/// A chunk the sink refuses every time is sent again at most `MAX_CHUNK_RESENDS` times;
/// the next refusal fails its file (it looped for ever before), and the session goes on.
#[test]
fn a_chunk_refused_past_its_resend_budget_fails_its_file() {
    let mut c = core(false);
    c.on_entry(0, file(1, 2 * u64::from(CHUNK)));
    actions(&mut c);
    c.on_scan_end();
    actions(&mut c);
    for n in 1..=MAX_CHUNK_RESENDS {
        c.on_frame(nack(1, u64::from(CHUNK)), at(u64::from(n)))
            .unwrap();
        let got = actions(&mut c);
        assert!(
            got.iter()
                .any(|a| matches!(a, SourceAction::Resend { file_id: 1, .. })),
            "resend {n}: {got:?}"
        );
    }
    // Another chunk of the file has its own budget.
    c.on_frame(nack(1, 0), at(9)).unwrap();
    assert!(actions(&mut c)
        .iter()
        .any(|a| matches!(a, SourceAction::Resend { file_id: 1, .. })));
    c.on_frame(nack(1, u64::from(CHUNK)), at(10)).unwrap();
    let got = actions(&mut c);
    assert!(
        !got.iter().any(|a| matches!(a, SourceAction::Resend { .. })),
        "{got:?}"
    );
    assert!(
        got.contains(&SourceAction::Cancel { file_id: 1 }),
        "{got:?}"
    );
    assert!(
        got.iter().any(|a| matches!(a,
            SourceAction::Send(Frame::FileFailed(f)) if f.file_id == 1 && f.code == ErrorCode::ChecksumMismatch)),
        "{got:?}"
    );
    assert!(
        got.iter().any(|a| matches!(a, SourceAction::Report(Report::Failed { entry, .. }) if entry.file_id == 1)),
        "{got:?}"
    );
    assert_eq!(got.last(), Some(&SourceAction::EndOfFiles));
    assert_eq!(c.waiting_for(), Waiting::DataSent);
}
