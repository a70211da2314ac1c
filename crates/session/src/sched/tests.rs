// Test data and counters are small; truncation cannot happen.
#![allow(clippy::cast_possible_truncation)]

use super::layout::Striped;
use super::*;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

const MIB: u32 = 1 << 20;

/// A file as the tests see it: an id, a size and a striped layout.
#[derive(Debug, Clone)]
struct TestFile {
    id: u64,
    size: u64,
    layout: Striped,
}

impl ChunkFile for TestFile {
    fn id(&self) -> u64 {
        self.id
    }
    fn size(&self) -> u64 {
        self.size
    }
    fn target(&self, offset: u64) -> TargetId {
        self.layout.target(offset)
    }
}

fn striped(id: u64, size: u64, targets: u32, stripe_bytes: u64) -> TestFile {
    TestFile {
        id,
        size,
        layout: Striped {
            stripe_bytes,
            targets: (0..targets.max(1)).map(TargetId).collect(),
        },
    }
}

fn file(id: u64, size: u64, targets: u32) -> TestFile {
    striped(id, size, targets, u64::from(MIB))
}

/// Everything `s` hands out until it is drained, each chunk reported done at once.
fn drain(s: &mut Scheduler<TestFile>) -> Vec<Work<TestFile>> {
    let mut all = Vec::new();
    while let Some(w) = s.next() {
        if let Some(t) = w.target() {
            s.done(t);
        }
        all.push(w);
    }
    all
}

#[test]
fn readers_spread_over_striped_targets() {
    // 4 disks, 1 MiB stripes, 1 MiB chunks, 3 readers: while every disk has work, no
    // two reads are in flight on one disk.
    let mut s = Scheduler::new(MIB, 0);
    s.add(file(1, 64 * u64::from(MIB), 4), None);
    let mut in_flight: Vec<TargetId> = (0..3)
        .map(|_| s.next().and_then(|w| w.target()).expect("a chunk"))
        .collect();
    let distinct: BTreeSet<_> = in_flight.iter().collect();
    assert_eq!(
        distinct.len(),
        3,
        "three reads on three targets: {in_flight:?}"
    );
    // Each finished read is replaced by one on the least busy target.
    for _ in 0..40 {
        let done = in_flight.pop().expect("a read in flight");
        s.done(done);
        let t = s.next().and_then(|w| w.target()).expect("a chunk");
        assert!(
            !in_flight.contains(&t),
            "{t:?} given a second read while others idle"
        );
        in_flight.insert(0, t);
    }
}

#[test]
fn every_chunk_is_handed_out_once_and_held_chunks_are_skipped() {
    let mut s = Scheduler::new(MIB, 0);
    let mut held = ChunkSet::new(10).expect("a set");
    held.insert(0);
    held.insert(7);
    s.add(file(1, 10 * u64::from(MIB) - 5, 2), Some(held));
    s.add(file(2, 3 * u64::from(MIB), 2), None);
    s.close();
    let mut got: Vec<(u64, u64, u32)> = drain(&mut s)
        .into_iter()
        .map(|w| match w {
            Work::Chunk {
                file, index, len, ..
            } => (file.id, index, len),
            Work::Pack(_) => panic!("no small files here"),
        })
        .collect();
    got.sort_unstable();
    let want: Vec<(u64, u64)> = [1, 2, 3, 4, 5, 6, 8, 9]
        .iter()
        .map(|&i| (1, i))
        .chain((0..3).map(|i| (2, i)))
        .collect();
    assert_eq!(
        got.iter().map(|&(f, i, _)| (f, i)).collect::<Vec<_>>(),
        want
    );
    assert_eq!(
        got.iter().find(|g| g.0 == 1 && g.1 == 9).map(|g| g.2),
        Some(MIB - 5)
    );
    assert_eq!(s.in_flight(), 0);
}

#[test]
fn a_cancelled_file_hands_out_no_more_chunks() {
    let mut s = Scheduler::new(MIB, 0);
    s.add(file(1, 40 * u64::from(MIB), 2), None);
    s.add(file(2, 2 * u64::from(MIB), 2), None);
    let Some(Work::Chunk {
        file: first,
        target: Some(t),
        ..
    }) = s.next()
    else {
        panic!("a chunk")
    };
    s.done(t);
    s.cancel(first.id);
    s.close();
    let rest: Vec<u64> = drain(&mut s)
        .into_iter()
        .filter_map(|w| match w {
            Work::Chunk { file, .. } => Some(file.id),
            Work::Pack(_) => None,
        })
        .collect();
    assert!(
        !rest.contains(&first.id),
        "chunks of the cancelled file: {rest:?}"
    );
    assert!(!rest.is_empty(), "the other file still travels");
}

#[test]
fn small_files_are_packed_up_to_the_chunk_size() {
    let mut s = Scheduler::new(MIB, 256 << 10);
    for id in 0..10 {
        s.add(file(id, 200 << 10, 1), None);
    }
    s.close();
    let packs: Vec<Vec<u64>> = drain(&mut s)
        .into_iter()
        .map(|w| match w {
            Work::Pack(p) => p.iter().map(|f| f.id).collect(),
            Work::Chunk { .. } => panic!("small files travel packed"),
        })
        .collect();
    // 5 x 200 KiB fit in 1 MiB, the sixth does not.
    assert_eq!(packs, vec![vec![0, 1, 2, 3, 4], vec![5, 6, 7, 8, 9]]);
}

#[test]
fn a_partly_filled_pack_waits_for_flush_or_close() {
    let mut s = Scheduler::new(MIB, 256 << 10);
    s.add(file(1, 10, 1), None);
    assert!(s.next().is_none(), "the open pack waits for more files");
    s.flush();
    assert!(matches!(s.next(), Some(Work::Pack(p)) if p.len() == 1));
    s.add(file(2, 10, 1), None);
    s.close();
    assert!(s.is_closed());
    assert!(matches!(s.next(), Some(Work::Pack(p)) if p[0].id == 2));
    assert!(s.next().is_none());
}

#[test]
fn retries_go_first_and_a_cancel_drops_them() {
    let mut s = Scheduler::new(MIB, 0);
    s.add(file(1, 4 * u64::from(MIB), 1), None);
    let retry = |id| Work::Chunk {
        file: file(id, 4 * u64::from(MIB), 1),
        index: 2,
        offset: 2 * u64::from(MIB),
        len: MIB,
        target: None,
    };
    s.retry(retry(1));
    s.retry(retry(9));
    s.cancel(9);
    let w = s.next().expect("the retry");
    assert!(matches!(&w, Work::Chunk { file, target: None, index: 2, .. } if file.id == 1));
    assert!(matches!(
        s.next(),
        Some(Work::Chunk {
            target: Some(_),
            ..
        })
    ));
}

#[test]
fn room_is_bounded_by_active_files_and_queued_packs() {
    let mut s = Scheduler::new(MIB, 256 << 10);
    for id in 0..MAX_ACTIVE_FILES as u64 {
        assert!(s.has_room());
        s.add(file(id, 2 * u64::from(MIB), 1), None);
    }
    assert!(!s.has_room(), "{MAX_ACTIVE_FILES} large files wait");
    let mut s = Scheduler::new(256 << 10, 256 << 10);
    for id in 0..=MAX_QUEUED_PACKS as u64 {
        assert!(s.has_room());
        s.add(file(id, 256 << 10, 1), None); // one file fills a pack
    }
    assert!(!s.has_room(), "{MAX_QUEUED_PACKS} packs wait");
    assert!(s.is_small(1 << 18) && !s.is_small(0) && !s.is_small((1 << 18) + 1));
}

/// One file of a property test: its size, layout, the chunks the sink holds (a bit
/// pattern) and whether (and when) the sink gives it up.
#[derive(Debug, Clone)]
struct Case {
    size: u64,
    targets: u32,
    stripe_bytes: u64,
    held: Option<u64>,
    cancel_at: Option<usize>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        0u64..400,
        1u32..5,
        1u64..50,
        proptest::option::of(any::<u64>()),
        proptest::option::of(0usize..60),
    )
        .prop_map(|(size, targets, stripe_bytes, held, cancel_at)| Case {
            size,
            targets,
            stripe_bytes,
            held,
            cancel_at,
        })
}

/// What a property run saw handed out.
#[derive(Default)]
struct Seen {
    chunks: BTreeMap<(u64, u64), usize>,
    packed: BTreeMap<u64, usize>,
    cancelled: BTreeSet<u64>,
}

impl Seen {
    fn record(&mut self, w: &Work<TestFile>, chunk_bytes: u32) {
        match w {
            Work::Chunk {
                file,
                index,
                offset,
                len,
                ..
            } => {
                assert!(
                    !self.cancelled.contains(&file.id),
                    "a chunk of cancelled {}",
                    file.id
                );
                assert_eq!(
                    chunk_range(file.size, chunk_bytes, *index),
                    Some((*offset, *len))
                );
                *self.chunks.entry((file.id, *index)).or_default() += 1;
            }
            Work::Pack(p) => {
                let bytes: u64 = p.iter().map(|f| f.size).sum();
                assert!(bytes <= u64::from(chunk_bytes), "a pack of {bytes} bytes");
                assert!(!p.is_empty() && p.len() <= usize::from(MAX_PACK_SEGMENTS));
                for f in p {
                    *self.packed.entry(f.id).or_default() += 1;
                }
            }
        }
    }
}

fn held_set(c: &Case, chunk_bytes: u32) -> Option<ChunkSet> {
    let bits = c.held?;
    let count = chunk_count(c.size, chunk_bytes);
    let mut set = ChunkSet::new(count)?;
    for i in (0..count).filter(|i| bits >> (i % 64) & 1 == 1) {
        set.insert(i);
    }
    Some(set)
}

/// Drives a scheduler with `threads` readers finishing in an order drawn from `seed`,
/// cancelling files at their step; returns what was handed out.
fn run(cases: &[Case], chunk_bytes: u32, small: u64, threads: usize, seed: u64) -> Seen {
    let mut s = Scheduler::new(chunk_bytes, small);
    for (i, c) in cases.iter().enumerate() {
        let f = striped(i as u64 + 1, c.size, c.targets, c.stripe_bytes);
        s.add(f, held_set(c, chunk_bytes));
    }
    s.close();
    let (mut seen, mut rng, mut running) = (Seen::default(), seed, Vec::new());
    for step in 0.. {
        for (i, c) in cases.iter().enumerate() {
            if c.cancel_at == Some(step) {
                s.cancel(i as u64 + 1);
                seen.cancelled.insert(i as u64 + 1);
            }
        }
        while running.len() < threads {
            let Some(w) = s.next() else { break };
            seen.record(&w, chunk_bytes);
            running.extend(w.target());
        }
        if running.is_empty() {
            break; // `next` gave `None` with nothing in flight: drained
        }
        rng = rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let k = (rng >> 33) as usize % running.len();
        s.done(running.swap_remove(k));
    }
    assert_eq!(
        s.in_flight(),
        0,
        "reads counted in flight after all were done"
    );
    seen
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_chunk_is_handed_out_exactly_once(
        cases in proptest::collection::vec(case(), 0..12),
        chunk_bytes in 1u32..64,
        small in 0u64..80,
        threads in 1usize..6,
        seed in any::<u64>(),
    ) {
        let seen = run(&cases, chunk_bytes, small, threads, seed);
        for (i, c) in cases.iter().enumerate() {
            let id = i as u64 + 1;
            let held = held_set(c, chunk_bytes);
            let packed = is_small(c.size, chunk_bytes, small) && held.is_none();
            let cancelled = seen.cancelled.contains(&id);
            prop_assert_eq!(seen.packed.get(&id).copied().unwrap_or(0), usize::from(packed));
            for index in 0..chunk_count(c.size, chunk_bytes) {
                let n = seen.chunks.get(&(id, index)).copied().unwrap_or(0);
                let is_held = held.as_ref().is_some_and(|h| h.contains(index));
                if packed || is_held {
                    prop_assert_eq!(n, 0, "file {} chunk {} held or packed", id, index);
                } else if cancelled {
                    prop_assert!(n <= 1);
                } else {
                    prop_assert_eq!(n, 1, "file {} chunk {}", id, index);
                }
            }
        }
        let ids = 1..=cases.len() as u64;
        prop_assert!(seen.chunks.keys().all(|(id, _)| ids.contains(id)));
    }
}
