//! Proves that, once a pool is built, acquiring and releasing slots allocates nothing:
//! a counting global allocator watches the calling thread while it acquires and releases
//! through every path (try, blocking, with timeout, blocking until another thread
//! releases). Its own test binary, so the counting allocator affects nothing else.

use sluice_buffers::BufferPool;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::{Arc, Barrier};
use std::time::Duration;

/// Counts allocations made by the current thread (thread-local, so the test harness and
/// helper threads do not disturb the count).
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn count() {
    // `try_with`: during thread teardown the slot may be gone; those are not ours.
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

// SAFETY: every method forwards to the system allocator with the caller's arguments; the
// count is a side effect that neither allocates nor touches the memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: forwarded unchanged; the caller upholds `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: forwarded unchanged.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

fn exercise(pool: &Arc<BufferPool>) {
    for _ in 0..100 {
        let mut a = pool.try_acquire().expect("free slot");
        let mut b = pool.acquire();
        let c = pool
            .acquire_timeout(Duration::from_millis(1))
            .expect("free slot");
        assert!(pool.try_acquire().is_none());
        assert!(pool.acquire_timeout(Duration::from_micros(50)).is_none()); // times out
        a[0] = 1;
        a.set_filled(1);
        b.set_filled(b.len());
        drop((a, b, c));
        let _ = pool.stats();
    }
}

#[test]
fn acquire_and_release_allocate_nothing_after_construction() {
    let before = allocations();
    let sentinel = std::hint::black_box(vec![1u8; 10]);
    assert!(
        allocations() > before,
        "the counting allocator does not count"
    );
    drop(sentinel);
    let node = sluice_affinity::allowed_nodes().expect("hwloc")[0];
    for node in [None, Some(node)] {
        let pool = Arc::new(BufferPool::new(node, 3 * 4096, 4096).expect("pool"));
        exercise(&pool); // warm-up: lazily initialized runtime state, if any
        let before = allocations();
        exercise(&pool);
        assert_eq!(
            allocations() - before,
            0,
            "node {node:?}: the data path allocated"
        );
    }
}

#[test]
fn a_blocking_acquire_woken_by_another_thread_allocates_nothing() {
    let pool = Arc::new(BufferPool::new(None, 4096, 4096).expect("pool"));
    let barrier = Arc::new(Barrier::new(2));
    let helper = {
        let (pool, barrier) = (Arc::clone(&pool), Arc::clone(&barrier));
        std::thread::spawn(move || {
            for _ in 0..10 {
                let slot = pool.acquire();
                barrier.wait(); // the main thread now blocks in acquire()
                std::thread::sleep(Duration::from_millis(5));
                drop(slot);
                barrier.wait(); // the main thread got it and released it
            }
        })
    };
    let before = allocations();
    for _ in 0..10 {
        barrier.wait();
        let slot = pool.acquire(); // blocks until the helper releases
        drop(slot);
        barrier.wait();
    }
    assert_eq!(allocations() - before, 0, "the blocking path allocated");
    helper.join().expect("helper");
}
