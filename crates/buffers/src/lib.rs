//! NUMA-local fixed-size buffer pools, allocated once at start-up.
//!
//! A [`BufferPool`] is one [`NodeMemory`] region (2 MiB-aligned, bound to a node before
//! first touch, locked when the system allows, prefaulted or populated on demand) cut
//! into equal slots. Chunks
//! travel through the pipeline in [`Slot`]s: RAII guards that go back to the pool when
//! dropped, on whichever thread drops them.
//!
//! # Design decisions
//! - **Sized once.** The pool's memory and its free list are allocated in
//!   [`BufferPool::new`]; [`try_acquire`](BufferPool::try_acquire),
//!   [`acquire`](BufferPool::acquire), [`acquire_timeout`](BufferPool::acquire_timeout)
//!   and the release in `Drop` allocate nothing (`tests/no_alloc.rs` counts).
//! - **A slot never used is handed out last.** The free list starts empty and a counter
//!   issues slots never used before, in index order, only when no used slot is free. So
//!   a job touches as many slots as it ever holds at once, not the whole pool: with
//!   [`Populate::OnDemand`] (a client: one job per process) only those pages are ever
//!   allocated. Measured on the 2-core VM (stop 28): a client's 88 MiB pool prefaulted
//!   took 0.14-0.67 s of its start-up for a one-file copy, and 0.35 s of a 20,000-file
//!   copy's 0.97 s. With [`Populate::Now`] (the daemon) the order changes nothing.
//! - **Bounded, lock-free free list.** A `crossbeam_queue::ArrayQueue<u32>` of slot
//!   indexes. Waiting for a slot uses a `Mutex<()>` + `Condvar` that releasers touch only
//!   when a waiter has announced itself, so the uncontended path takes no lock.
//! - **Pair assertions on the node** (TigerBeetle style): for a bound pool, the node of
//!   a slot's first page is read back from the kernel (`move_pages`, one page, one system
//!   call) when the slot is acquired and again when it is released, with `assert!`, in
//!   release builds too. A slot on the wrong node is a bug in binding (the region is
//!   `MPOL_BIND` and the kernel never places its pages elsewhere), not a runtime
//!   condition to handle, and it would silently cost the throughput the pool exists
//!   for. The price is one system call per acquire and one per release: measured on the
//!   2-core CI machine (release build, `micro_benchmark_acquire_release`), an
//!   acquire+release pair costs about 20 ns unbound and 1.5 us bound. Against a 1 MiB
//!   chunk moved at 3 GB/s (~330 us) that is under 0.5 %; with 64 KiB chunks it nears
//!   7 %, which is the point to revisit this choice (e.g. check every Nth hand-out). Only if the region could not be locked
//!   may a page be absent (swapped out, `-ENOENT`): that is accepted, since it returns
//!   on the bound node.
//! - **Every slot is page-aligned** (`slot_bytes` is a multiple of 4096 and the region
//!   starts on 2 MiB), so slots can be used for `O_DIRECT` I/O.
//!
//! # Example
//! ```
//! use sluice_buffers::BufferPool;
//! use std::sync::Arc;
//!
//! # fn main() -> Result<(), sluice_buffers::BufferError> {
//! let pool = Arc::new(BufferPool::new(None, 4 << 20, 1 << 20)?); // 4 slots of 1 MiB
//! let mut slot = pool.acquire();
//! slot[..5].copy_from_slice(b"chunk");
//! slot.set_filled(5);
//! assert_eq!(slot.filled_bytes(), b"chunk");
//! assert_eq!(pool.stats().free, 3);
//! drop(slot); // back to the pool
//! assert_eq!(pool.stats().free, 4);
//! # Ok(())
//! # }
//! ```

use crossbeam_queue::ArrayQueue;
use sluice_affinity::{page_node, AffinityError, PageReport, HUGE_PAGE_BYTES};
pub use sluice_affinity::{NodeMemory, Populate};
use std::collections::BTreeMap;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{fence, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Slot sizes must be a multiple of this (the base page size), so every slot starts on
/// a page: `O_DIRECT` needs it and the node check looks at a slot's own first page.
pub const SLOT_ALIGN_BYTES: usize = 4096;
const _: () = assert!(SLOT_ALIGN_BYTES.is_power_of_two());
// The region starts on a huge page, so slot starts are page-aligned too.
const _: () = assert!(HUGE_PAGE_BYTES.is_multiple_of(SLOT_ALIGN_BYTES));

/// Most slots a pool may have: indexes are `u32` in the free list.
pub const SLOTS_MAX: u64 = u32::MAX as u64;

/// Why a pool could not be built. Every variant names the sizes involved.
#[derive(Debug, thiserror::Error)]
pub enum BufferError {
    /// The slot size is zero or not a multiple of [`SLOT_ALIGN_BYTES`].
    #[error(
        "slot size {slot_bytes} bytes is invalid: expected a positive multiple of {SLOT_ALIGN_BYTES} bytes"
    )]
    SlotNotPageMultiple {
        /// The slot size asked for.
        slot_bytes: usize,
    },
    /// The total is smaller than one slot.
    #[error(
        "a pool of {total_bytes} bytes has no room for one {slot_bytes}-byte slot: give it at least {slot_bytes} bytes"
    )]
    NoSlots {
        /// The total asked for.
        total_bytes: u64,
        /// The slot size asked for.
        slot_bytes: usize,
    },
    /// More slots than [`SLOTS_MAX`], or more bytes than this machine can address.
    #[error(
        "a pool of {total_bytes} bytes in {slot_bytes}-byte slots is too large: {slots} slots (at most {SLOTS_MAX}) of addressable memory"
    )]
    TooLarge {
        /// The total asked for.
        total_bytes: u64,
        /// The slot size asked for.
        slot_bytes: usize,
        /// The slot count it would make.
        slots: u64,
    },
    /// Mapping or binding the pool's memory failed.
    #[error("cannot allocate the pool's memory: {0}")]
    Memory(#[from] AffinityError),
    /// The region was bound, but the kernel reports pages on other nodes (checked once at
    /// construction for every page).
    #[error(
        "pool memory bound to NUMA node {node} has {misplaced} of {pages} pages elsewhere (by node: {elsewhere:?})"
    )]
    Misplaced {
        /// The node asked for.
        node: u32,
        /// Pages checked.
        pages: usize,
        /// Pages not on `node`.
        misplaced: usize,
        /// Those pages by node (negative: errno, e.g. -2 for not present).
        elsewhere: BTreeMap<i32, usize>,
    },
}

/// A fixed set of equal, page-aligned buffers on one NUMA node (or unbound).
///
/// Share it with `Arc`: [`Slot`]s keep the pool alive and return to it when dropped.
pub struct BufferPool {
    memory: NodeMemory,
    node: Option<u32>,
    slot_bytes: usize,
    slot_count: u32,
    /// Indexes of free slots that were used before. Invariant: every index below
    /// `fresh` is either here or held by exactly one live [`Slot`], never both; no index
    /// at or above `fresh` is either.
    free: ArrayQueue<u32>,
    /// Slots never handed out are `fresh..slot_count`; only grows, up to `slot_count`.
    fresh: AtomicU32,
    /// Threads inside `wait_for_slot`; releasers notify only when it is non-zero.
    waiters: AtomicUsize,
    wait_lock: Mutex<()>,
    released: Condvar,
}

/// A snapshot of a pool's shape and state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolStats {
    /// Number of slots.
    pub slots: u32,
    /// Slots free right now (a racy snapshot when other threads use the pool).
    pub free: usize,
    /// Size of each slot in bytes.
    pub slot_bytes: usize,
    /// Bytes in slots (`slots * slot_bytes`; the mapping is rounded up to 2 MiB).
    pub bytes: u64,
    /// The node the memory is bound to; `None` when unbound.
    pub node: Option<u32>,
    /// Whether the memory is locked in RAM.
    pub mlocked: bool,
    /// Whether transparent huge pages were requested for it (and accepted by madvise).
    pub hugepage_advised: bool,
    /// When its pages are allocated.
    pub populate: Populate,
    /// Slots handed out at least once (the most the pool's users ever held at once).
    pub used: u32,
}

impl BufferPool {
    /// Builds a pool of `total_bytes / slot_bytes` slots of `slot_bytes` bytes on `node`
    /// (`None`: unbound). The remainder of `total_bytes` is not used. For a bound pool
    /// every page is located once (`move_pages`) before the pool is returned.
    ///
    /// # Errors
    /// [`BufferError::SlotNotPageMultiple`], [`BufferError::NoSlots`] and
    /// [`BufferError::TooLarge`] for sizes; [`BufferError::Memory`] if mapping or binding
    /// fails (e.g. the node does not exist); [`BufferError::Misplaced`] if pages landed
    /// elsewhere despite the binding.
    pub fn new(
        node: Option<u32>,
        total_bytes: u64,
        slot_bytes: usize,
    ) -> Result<BufferPool, BufferError> {
        BufferPool::populated(node, total_bytes, slot_bytes, Populate::Now)
    }

    /// [`new`](Self::new), with its pages allocated as `populate` says. With
    /// [`Populate::OnDemand`] a slot's pages appear when it is first used (its first
    /// page when it is handed out, for the node check); the binding is not read back at
    /// construction, since no page exists yet.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn populated(
        node: Option<u32>,
        total_bytes: u64,
        slot_bytes: usize,
        populate: Populate,
    ) -> Result<BufferPool, BufferError> {
        if slot_bytes == 0 || !slot_bytes.is_multiple_of(SLOT_ALIGN_BYTES) {
            return Err(BufferError::SlotNotPageMultiple { slot_bytes });
        }
        let slots = total_bytes / slot_bytes as u64;
        if slots == 0 {
            return Err(BufferError::NoSlots {
                total_bytes,
                slot_bytes,
            });
        }
        let too_large = BufferError::TooLarge {
            total_bytes,
            slot_bytes,
            slots,
        };
        let (Ok(slot_count), Ok(slots_usize)) = (u32::try_from(slots), usize::try_from(slots))
        else {
            return Err(too_large);
        };
        let Some(bytes) = slots_usize.checked_mul(slot_bytes) else {
            return Err(too_large);
        };
        let memory = NodeMemory::populated(bytes, node, populate)?;
        if let (Some(node), Populate::Now) = (node, populate) {
            let report: PageReport = memory.verify_node()?;
            if !report.all_on_node() {
                return Err(BufferError::Misplaced {
                    node,
                    pages: report.pages,
                    misplaced: report.pages - report.on_node,
                    elsewhere: report.elsewhere,
                });
            }
        }
        Ok(BufferPool {
            memory,
            node,
            slot_bytes,
            slot_count,
            free: ArrayQueue::new(slots_usize),
            fresh: AtomicU32::new(0),
            waiters: AtomicUsize::new(0),
            wait_lock: Mutex::new(()),
            released: Condvar::new(),
        })
    }

    /// A free slot, or `None` if all are in use. Never blocks, never allocates.
    pub fn try_acquire(self: &Arc<Self>) -> Option<Slot> {
        let index = self.free.pop().or_else(|| self.take_fresh())?;
        Some(self.hand_out(index))
    }

    /// The lowest slot never handed out, if one is left (it stays taken: `fresh` only
    /// grows). Its first page is written here, so that an on-demand pool's node check
    /// finds it present.
    fn take_fresh(&self) -> Option<u32> {
        let index = self
            .fresh
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.slot_count).then_some(n + 1)
            })
            .ok()?;
        if self.memory.populate() == Populate::OnDemand {
            // SAFETY: `index < slot_count`, so the byte lies in the mapping, and the slot
            // was never handed out: no reference to its bytes exists. It holds zero
            // (fresh anonymous memory); writing zero only makes the kernel allocate the
            // page, under the region's binding.
            unsafe { self.slot_ptr(index).write_volatile(0) };
        }
        Some(index)
    }

    /// A free slot, waiting for one to be released if necessary. Never allocates.
    ///
    /// Waits forever if no slot is ever released: size pools so that every thread that
    /// waits can be served (the planner gives each data-path thread at least one slot).
    pub fn acquire(self: &Arc<Self>) -> Slot {
        loop {
            if let Some(slot) = self.try_acquire() {
                return slot;
            }
            if let Some(index) = self.wait_for_slot(None) {
                return self.hand_out(index);
            }
        }
    }

    /// A free slot, waiting at most `timeout` for one. Never allocates.
    pub fn acquire_timeout(self: &Arc<Self>, timeout: Duration) -> Option<Slot> {
        if let Some(slot) = self.try_acquire() {
            return Some(slot);
        }
        // A timeout too large for an Instant is a wait without deadline.
        let deadline = Instant::now().checked_add(timeout);
        loop {
            if let Some(index) = self.wait_for_slot(deadline) {
                return Some(self.hand_out(index));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return None;
            }
        }
    }

    /// Pops a free index, sleeping on the condition variable until a release or the
    /// deadline. `None` only at the deadline (or on a spurious wake-up without deadline,
    /// which the caller loops over).
    fn wait_for_slot(&self, deadline: Option<Instant>) -> Option<u32> {
        self.waiters.fetch_add(1, Ordering::SeqCst);
        // Pairs with the fence in `release`: either the releaser sees this waiter and
        // notifies, or this thread's pop below sees the released index.
        fence(Ordering::SeqCst);
        let mut guard = self
            .wait_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let index = loop {
            if let Some(index) = self.free.pop() {
                break Some(index);
            }
            match deadline {
                None => {
                    guard = self
                        .released
                        .wait(guard)
                        .unwrap_or_else(PoisonError::into_inner);
                }
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        break self.free.pop();
                    }
                    guard = self
                        .released
                        .wait_timeout(guard, deadline - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
            }
        };
        drop(guard);
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        index
    }

    fn hand_out(self: &Arc<Self>, index: u32) -> Slot {
        debug_assert!(index < self.slot_count);
        self.assert_slot_node(index, "acquire");
        Slot {
            pool: Arc::clone(self),
            index,
            filled: 0,
        }
    }

    /// Takes back slot `index` (called by `Slot::drop` only).
    fn release(&self, index: u32) {
        self.assert_slot_node(index, "release");
        // Full would mean a slot was released twice: the free-list invariant is broken.
        let pushed = self.free.push(index);
        assert!(
            pushed.is_ok(),
            "slot {index} released into a full free list"
        );
        fence(Ordering::SeqCst); // see `wait_for_slot`
        if self.waiters.load(Ordering::SeqCst) > 0 {
            let _guard = self
                .wait_lock
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            self.released.notify_one();
        }
    }

    /// The pair assertion: a bound pool's slot is on its node (see the crate docs).
    fn assert_slot_node(&self, index: u32, when: &'static str) {
        let Some(node) = self.node else { return };
        let found = page_node(self.slot_ptr(index));
        let ok = match &found {
            Ok(n) => {
                i32::try_from(node) == Ok(*n) || (*n == -libc::ENOENT && !self.memory.mlocked())
            }
            Err(_) => false,
        };
        assert!(
            ok,
            "slot {index} of a pool bound to NUMA node {node} found at {found:?} on {when}: \
             memory binding is broken"
        );
    }

    fn slot_ptr(&self, index: u32) -> *mut u8 {
        // `index < slot_count`, so the offset is below `slot_count * slot_bytes`, the
        // mapped length, and fits usize (checked in `new`).
        let offset = index as usize * self.slot_bytes;
        self.memory.as_mut_ptr().wrapping_add(offset)
    }

    /// Size of each slot in bytes.
    pub fn slot_bytes(&self) -> usize {
        self.slot_bytes
    }

    /// Number of slots.
    pub fn slots(&self) -> u32 {
        self.slot_count
    }

    /// The pool's shape and how many slots are free now.
    pub fn stats(&self) -> PoolStats {
        PoolStats {
            slots: self.slot_count,
            free: self.free.len() + (self.slot_count - self.used()) as usize,
            slot_bytes: self.slot_bytes,
            bytes: u64::from(self.slot_count) * self.slot_bytes as u64,
            node: self.node,
            mlocked: self.memory.mlocked(),
            hugepage_advised: self.memory.hugepage_advised(),
            populate: self.memory.populate(),
            used: self.used(),
        }
    }

    /// Slots handed out at least once.
    fn used(&self) -> u32 {
        self.fresh.load(Ordering::Acquire).min(self.slot_count)
    }

    /// Locates every page of the pool's memory now (`move_pages`; allocates, not for the
    /// data path).
    ///
    /// # Errors
    /// [`AffinityError::Syscall`] if `move_pages` fails.
    pub fn verify_node(&self) -> Result<PageReport, AffinityError> {
        self.memory.verify_node()
    }
}

impl fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufferPool")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// One slot of a [`BufferPool`], held exclusively until dropped.
///
/// Derefs to the whole slot (`len()` is always the pool's `slot_bytes`); `filled` marks
/// how much of it holds valid data. Dropping it returns it to the pool, from any thread.
pub struct Slot {
    pool: Arc<BufferPool>,
    index: u32,
    filled: usize,
}

impl Slot {
    /// The slot's number in its pool, `0..slots`.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// Length of the valid prefix, bytes (0 when acquired).
    pub fn filled(&self) -> usize {
        self.filled
    }

    /// Marks the first `n` bytes as valid.
    ///
    /// # Panics
    /// If `n` exceeds the slot size (a caller bug: it wrote past the slot or miscounted).
    pub fn set_filled(&mut self, n: usize) {
        assert!(
            n <= self.pool.slot_bytes,
            "filled {n} > slot size {}",
            self.pool.slot_bytes
        );
        self.filled = n;
    }

    /// The valid prefix, `&self[..filled]`.
    pub fn filled_bytes(&self) -> &[u8] {
        &self[..self.filled]
    }

    /// The pool the slot returns to.
    pub fn pool(&self) -> &Arc<BufferPool> {
        &self.pool
    }

    /// The slot's first byte, for lending the slot's bytes to code outside Rust's
    /// borrows (a Python buffer export, which numpy may write). The pointer comes from
    /// the pool's mapping, not from a reference, and stays valid while this slot lives;
    /// writing through it is sound only while no slice from `Deref` or `DerefMut` of
    /// this slot is alive.
    pub fn as_mut_ptr(&self) -> *mut u8 {
        self.pool.slot_ptr(self.index)
    }
}

impl Deref for Slot {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: the slot's bytes lie inside the pool's mapping (index < slot_count),
        // are initialized (zero-filled anonymous memory, prefaulted), stay mapped while
        // `self.pool` is alive, and no other Slot covers them (free-list invariant); only
        // `&self` or `&mut self` of this Slot reach them, so Rust's aliasing rules hold.
        unsafe { std::slice::from_raw_parts(self.pool.slot_ptr(self.index), self.pool.slot_bytes) }
    }
}

impl DerefMut for Slot {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`; `&mut self` makes this the only reference to the bytes.
        unsafe {
            std::slice::from_raw_parts_mut(self.pool.slot_ptr(self.index), self.pool.slot_bytes)
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.pool.release(self.index);
    }
}

impl fmt::Debug for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Slot")
            .field("index", &self.index)
            .field("len", &self.pool.slot_bytes)
            .field("filled", &self.filled)
            .finish()
    }
}

#[cfg(test)]
mod tests;
