use super::*;
use std::sync::Barrier;

const SLOT: usize = 64 << 10;

fn pool(node: Option<u32>, slots: u64) -> Arc<BufferPool> {
    Arc::new(BufferPool::new(node, slots * SLOT as u64, SLOT).expect("pool"))
}

fn first_node() -> u32 {
    sluice_affinity::allowed_nodes().expect("hwloc")[0]
}

// Slots move between pipeline threads; the pool is shared by them.
const _: fn() = || {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Slot>();
    send_sync::<BufferPool>();
};

#[test]
fn all_slots_taken_then_none_then_one_released_is_available() {
    let pool = pool(None, 4);
    let mut slots: Vec<Slot> = (0..4)
        .map(|_| pool.try_acquire().expect("free slot"))
        .collect();
    assert!(pool.try_acquire().is_none());
    assert_eq!(pool.stats().free, 0);
    let released = slots.remove(2);
    let released_index = released.index();
    drop(released);
    assert_eq!(pool.stats().free, 1);
    let again = pool.try_acquire().expect("released slot");
    assert_eq!(again.index(), released_index);
    assert!(pool.try_acquire().is_none());
    drop((slots, again));
    assert_eq!(pool.stats().free, 4);
}

#[test]
fn a_blocked_acquire_wakes_when_another_thread_releases() {
    let pool = pool(None, 1);
    let held = pool.acquire();
    let started = Arc::new(Barrier::new(2));
    let waiter = {
        let (pool, started) = (Arc::clone(&pool), Arc::clone(&started));
        std::thread::spawn(move || {
            started.wait();
            let t = Instant::now();
            let slot = pool.acquire();
            (slot.index(), t.elapsed())
        })
    };
    started.wait();
    std::thread::sleep(Duration::from_millis(30));
    drop(held);
    let (index, waited) = waiter.join().expect("waiter");
    assert_eq!(index, 0);
    assert!(
        waited >= Duration::from_millis(20),
        "did not block: {waited:?}"
    );
    assert_eq!(pool.stats().free, 1);
}

#[test]
fn acquire_timeout_gives_up_at_the_deadline_and_succeeds_on_release() {
    let pool = pool(None, 1);
    let held = pool.acquire();
    let t = Instant::now();
    assert!(pool.acquire_timeout(Duration::from_millis(20)).is_none());
    assert!(t.elapsed() >= Duration::from_millis(20));
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(10));
        drop(held); // released on another thread than the one that acquired it
    });
    assert!(pool.acquire_timeout(Duration::from_secs(10)).is_some());
    releaser.join().expect("releaser");
}

#[test]
fn slots_never_alias() {
    let pool = pool(None, 16);
    let mut slots: Vec<Slot> = (0..16).map(|_| pool.acquire()).collect();
    for slot in &mut slots {
        let pattern = slot.index().to_le_bytes()[0] ^ 0xA5;
        slot.fill(pattern);
        assert_eq!(slot.len(), SLOT);
        assert_eq!(slot.as_ptr() as usize % SLOT_ALIGN_BYTES, 0);
    }
    for slot in &slots {
        let pattern = slot.index().to_le_bytes()[0] ^ 0xA5;
        assert!(
            slot.iter().all(|&b| b == pattern),
            "slot {} overwritten",
            slot.index()
        );
    }
    let mut ranges: Vec<(usize, usize)> = slots
        .iter()
        .map(|s| (s.as_ptr() as usize, s.as_ptr() as usize + s.len()))
        .collect();
    ranges.sort_unstable();
    assert!(
        ranges.windows(2).all(|w| w[0].1 <= w[1].0),
        "overlapping slots"
    );
    let mut indexes: Vec<u32> = slots.iter().map(Slot::index).collect();
    indexes.sort_unstable();
    assert_eq!(indexes, (0..16).collect::<Vec<_>>());
}

#[test]
fn filled_marks_the_valid_prefix() {
    let pool = pool(None, 1);
    let mut slot = pool.acquire();
    assert_eq!(slot.filled(), 0);
    slot[..3].copy_from_slice(b"abc");
    slot.set_filled(3);
    assert_eq!(slot.filled_bytes(), b"abc");
    drop(slot);
    assert_eq!(pool.acquire().filled(), 0, "a reacquired slot starts empty");
}

#[test]
fn bytes_written_through_the_raw_pointer_are_the_slots() {
    let pool = pool(None, 2);
    let other = pool.acquire();
    let slot = pool.acquire();
    let ptr = slot.as_mut_ptr();
    assert_eq!(ptr.cast_const(), slot.as_ptr());
    assert_ne!(ptr, other.as_mut_ptr());
    // SAFETY: `ptr` addresses the slot's SLOT bytes, which no slice of `slot` borrows
    // while they are written; the slice below is made afterwards.
    unsafe { std::ptr::copy_nonoverlapping(b"lent".as_ptr(), ptr.add(SLOT - 4), 4) };
    assert_eq!(&slot[SLOT - 4..], b"lent");
    assert!(
        other.iter().all(|&b| b == 0),
        "the write stayed in its slot"
    );
}

#[test]
#[should_panic(expected = "filled 65537 > slot size 65536")]
fn filling_past_the_slot_is_a_bug() {
    pool(None, 1).acquire().set_filled(SLOT + 1);
}

#[test]
fn a_bound_pool_has_every_page_on_its_node() {
    let node = first_node();
    let pool = pool(Some(node), 64); // 4 MiB
    let stats = pool.stats();
    assert_eq!(stats.node, Some(node));
    assert_eq!((stats.slots, stats.free, stats.bytes), (64, 64, 4 << 20));
    let report = pool.verify_node().expect("move_pages");
    assert_eq!(report.on_node, report.pages, "{report:?}");
    assert_eq!(report.pages, (4 << 20) / sluice_affinity::page_bytes());
    // And each slot as the pair assertions see it.
    let slots: Vec<Slot> = (0..64).map(|_| pool.acquire()).collect();
    for slot in &slots {
        assert_eq!(
            sluice_affinity::page_node(slot.as_ptr()).expect("move_pages"),
            node as i32
        );
    }
}

#[test]
fn a_used_slot_is_handed_out_before_one_never_used() {
    let pool = pool(None, 8);
    assert_eq!((pool.stats().free, pool.stats().used), (8, 0));
    // One at a time, as a pipeline that never holds two: slot 0 over and over.
    for _ in 0..5 {
        let s = pool.acquire();
        assert_eq!(s.index(), 0);
    }
    assert_eq!(pool.stats().used, 1);
    // Three held at once: slots 0-2, and no others ever.
    for _ in 0..5 {
        let held: Vec<Slot> = (0..3).map(|_| pool.acquire()).collect();
        let mut idx: Vec<u32> = held.iter().map(Slot::index).collect();
        idx.sort_unstable();
        assert_eq!(idx, vec![0, 1, 2]);
    }
    assert_eq!((pool.stats().free, pool.stats().used), (8, 3));
    let all: Vec<Slot> = (0..8).map(|_| pool.acquire()).collect();
    assert_eq!((pool.stats().free, pool.stats().used), (0, 8));
    assert!(pool.try_acquire().is_none());
    drop(all);
    assert_eq!(pool.stats().free, 8);
}

#[test]
fn an_on_demand_pool_allocates_only_the_slots_it_hands_out_on_its_node() {
    let node = first_node();
    // 2 MiB slots: a huge page each where THP serves them, never shared by two slots.
    let slot = 2 << 20;
    let pool = Arc::new(
        BufferPool::populated(Some(node), 8 * slot as u64, slot, Populate::OnDemand).expect("pool"),
    );
    assert_eq!(pool.stats().populate, Populate::OnDemand);
    let present = |p: &BufferPool| p.verify_node().expect("move_pages").on_node;
    assert_eq!(present(&pool), 0, "no page before the first hand-out");
    let a = pool.acquire();
    let b = pool.acquire();
    // The pair assertion ran on both (a page absent would have panicked), and their
    // first pages are on the node.
    for s in [&a, &b] {
        assert_eq!(
            sluice_affinity::page_node(s.as_ptr()).expect("move_pages"),
            node as i32
        );
    }
    let pages = present(&pool);
    let per_slot = slot / sluice_affinity::page_bytes();
    assert!(
        pages >= 2 && pages <= 2 * per_slot,
        "{pages} pages for two slots"
    );
    drop((a, b));
    let again: Vec<Slot> = (0..2).map(|_| pool.acquire()).collect();
    assert_eq!(present(&pool), pages, "slots used again allocate nothing");
    assert_eq!(pool.stats().used, 2);
    drop(again);
    let report = pool.verify_node().expect("move_pages");
    assert_eq!(
        report.by_node.get(&(node as i32)),
        Some(&pages),
        "{report:?}"
    );
}

#[test]
fn a_pool_on_each_node_is_on_that_node() {
    for node in sluice_affinity::allowed_nodes().expect("hwloc") {
        let pool = pool(Some(node), 32);
        let report = pool.verify_node().expect("move_pages");
        assert_eq!(
            report.by_node.keys().copied().collect::<Vec<_>>(),
            vec![node as i32]
        );
        drop(pool.acquire()); // both pair assertions run against `node`
    }
}

#[test]
fn bad_sizes_are_named() {
    let err = BufferPool::new(None, 1 << 20, 1000).expect_err("1000");
    assert!(
        matches!(err, BufferError::SlotNotPageMultiple { slot_bytes: 1000 }),
        "{err}"
    );
    assert!(err.to_string().contains("slot size 1000 bytes"), "{err}");
    let err = BufferPool::new(None, 1 << 20, 0).expect_err("0");
    assert!(
        matches!(err, BufferError::SlotNotPageMultiple { slot_bytes: 0 }),
        "{err}"
    );
    let err = BufferPool::new(None, 8191, 8192).expect_err("too small");
    assert!(
        matches!(
            err,
            BufferError::NoSlots {
                total_bytes: 8191,
                slot_bytes: 8192
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("8191 bytes") && err.to_string().contains("8192-byte"));
    let err = BufferPool::new(None, u64::MAX, 4096).expect_err("too many");
    assert!(matches!(err, BufferError::TooLarge { .. }), "{err}");
    let err = BufferPool::new(Some(4000), 1 << 20, 4096).expect_err("node 4000");
    assert!(
        matches!(err, BufferError::Memory(_)) && err.to_string().contains("4000"),
        "{err}"
    );
}

#[test]
fn many_threads_share_a_small_pool_without_losing_slots() {
    let pool = pool(Some(first_node()), 3);
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let pool = Arc::clone(&pool);
            std::thread::spawn(move || {
                for i in 0..300u32 {
                    let mut slot = match i % 3 {
                        0 => pool.acquire(),
                        1 => pool.acquire_timeout(Duration::from_secs(10)).expect("slot"),
                        _ => loop {
                            if let Some(s) = pool.try_acquire() {
                                break s;
                            }
                            std::thread::yield_now();
                        },
                    };
                    let tag = (t * 7 + i).to_le_bytes()[0];
                    slot[0] = tag;
                    slot[SLOT - 1] = tag;
                    std::thread::yield_now();
                    assert_eq!((slot[0], slot[SLOT - 1]), (tag, tag), "slot shared");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("worker");
    }
    assert_eq!(pool.stats().free, 3);
}

/// Micro-benchmark, tiny so it runs in every `cargo test` and cannot rot. Prints ns per
/// acquire+release pair; run with `--release -- --nocapture micro_benchmark` to read it.
#[test]
fn micro_benchmark_acquire_release() {
    const ITERATIONS: u32 = 2_000;
    for node in [None, Some(first_node())] {
        let pool = pool(node, 4);
        let t = Instant::now();
        for _ in 0..ITERATIONS {
            let mut slot = pool.try_acquire().expect("free slot");
            slot.set_filled(1);
            drop(slot);
        }
        let per_pair = t.elapsed() / ITERATIONS;
        eprintln!("acquire+release, node {node:?}: {per_pair:?} per pair");
        assert_eq!(pool.stats().free, 4);
    }
}
