//! Storage layouts and layout-aware I/O scheduling (LADS, seed 000): know which storage
//! target holds each byte, and hand I/O threads work from the target with the fewest
//! reads in flight, so that threads spread over disks instead of piling onto one.
//!
//! * A [`Layout`] maps an offset of one file to a [`TargetId`]. The engine gives every
//!   file of a source root the root's block device (`fs::layout::BlockDeviceLayout`), or
//!   a [`SingleTarget`] where the device cannot be found.
//! * [`LayoutScheduler`] holds a bounded set of pending [`WorkItem`]s per target and
//!   picks the next one for an idle I/O thread.

use std::collections::BTreeMap;
use std::ops::Bound;

/// A storage target: a number the engine gives to a block device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TargetId(pub u32);

impl TargetId {
    /// Where the layout does not say (the block device could not be found).
    pub const UNKNOWN: TargetId = TargetId(u32::MAX);
}

/// Which storage target holds each byte of one file.
pub trait Layout: Send + Sync + std::fmt::Debug {
    /// The target holding byte `offset`.
    fn target(&self, offset: u64) -> TargetId;
}

/// Every byte on one target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SingleTarget(pub TargetId);

impl Layout for SingleTarget {
    fn target(&self, _offset: u64) -> TargetId {
        self.0
    }
}

/// One piece of I/O: `len` bytes at `offset` of file `file_id`, on `target`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkItem {
    /// The file (manifest id).
    pub file_id: u64,
    /// Byte offset in the file.
    pub offset: u64,
    /// Bytes.
    pub len: u32,
    /// Where the bytes live.
    pub target: TargetId,
}

/// Why [`LayoutScheduler::push`] gave an item back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushError {
    /// The scheduler holds `capacity` items: hand some out first.
    Full(WorkItem),
    /// The same (file, offset) is already pending (a caller bug).
    Duplicate(WorkItem),
}

impl std::fmt::Display for PushError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PushError::Full(_) => f.write_str("scheduler full"),
            PushError::Duplicate(_) => f.write_str("work item already pending"),
        }
    }
}

impl std::error::Error for PushError {}

#[derive(Debug, Default)]
struct TargetQueue {
    pending: BTreeMap<(u64, u64), WorkItem>,
    in_flight: u32,
}

/// Pending work per storage target, handed out least-loaded target first.
///
/// [`LayoutScheduler::next`] picks, among targets with pending work, the one with the
/// fewest items in flight; ties go round-robin (the first such target after the one
/// chosen last). Within a target, items go by (file id, offset), so each file is read
/// front to back on each target. [`LayoutScheduler::done`] reports an item finished.
/// With `T` threads and `k` targets holding pending work, the target chosen ends with at
/// most `ceil(T / k)` items in flight: `ceil(T / N)` while all `N` targets have work (at
/// 4 disks and 3 threads, never two threads on one disk).
///
/// Plain data, no locking, deterministic.
#[derive(Debug)]
pub struct LayoutScheduler {
    capacity: usize,
    queued: usize,
    targets: BTreeMap<TargetId, TargetQueue>,
    last: Option<TargetId>,
}

impl LayoutScheduler {
    /// A scheduler holding at most `capacity` pending items (at least 1).
    #[must_use]
    pub fn new(capacity: usize) -> LayoutScheduler {
        LayoutScheduler {
            capacity: capacity.max(1),
            queued: 0,
            targets: BTreeMap::new(),
            last: None,
        }
    }

    /// Adds an item.
    ///
    /// # Errors
    /// [`PushError::Full`] at capacity, [`PushError::Duplicate`] if the same (file,
    /// offset) is pending; the item comes back in both.
    pub fn push(&mut self, item: WorkItem) -> Result<(), PushError> {
        if self.queued >= self.capacity {
            return Err(PushError::Full(item));
        }
        let q = self.targets.entry(item.target).or_default();
        let key = (item.file_id, item.offset);
        if q.pending.contains_key(&key) {
            return Err(PushError::Duplicate(item));
        }
        q.pending.insert(key, item);
        self.queued += 1;
        debug_assert!(self.queued <= self.capacity);
        Ok(())
    }

    /// The next item for an idle I/O thread, counted in flight on its target until
    /// [`LayoutScheduler::done`]; `None` if nothing is pending.
    // Not an `Iterator`: `None` means "nothing pending now", and more may be pushed.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<WorkItem> {
        let t = self.least_loaded()?;
        let q = self.targets.get_mut(&t)?;
        let (_, item) = q.pending.pop_first()?;
        debug_assert_eq!(item.target, t, "an item queued under another target");
        q.in_flight += 1;
        self.queued -= 1;
        self.last = Some(t);
        Some(item)
    }

    /// Among targets with pending work, the one with the fewest items in flight; ties go
    /// to the first after the one chosen last.
    fn least_loaded(&self) -> Option<TargetId> {
        let after = match self.last {
            Some(t) => (Bound::Excluded(t), Bound::Unbounded),
            None => (Bound::Unbounded, Bound::Unbounded),
        };
        let before = match self.last {
            Some(t) => (Bound::Unbounded, Bound::Included(t)),
            None => (Bound::Unbounded, Bound::Excluded(TargetId(0))),
        };
        let mut best: Option<(TargetId, u32)> = None;
        for (&t, q) in self.targets.range(after).chain(self.targets.range(before)) {
            if !q.pending.is_empty() && best.is_none_or(|(_, f)| q.in_flight < f) {
                best = Some((t, q.in_flight));
            }
        }
        best.map(|(t, _)| t)
    }

    /// An item of `target` handed out by [`LayoutScheduler::next`] is finished.
    pub fn done(&mut self, target: TargetId) {
        debug_assert!(
            self.targets.contains_key(&target),
            "done() on {target:?} with nothing handed out"
        );
        let Some(q) = self.targets.get_mut(&target) else {
            return;
        };
        debug_assert!(q.in_flight > 0, "done() without next() on {target:?}");
        q.in_flight = q.in_flight.saturating_sub(1);
        if q.in_flight == 0 && q.pending.is_empty() {
            self.targets.remove(&target);
        }
    }

    /// Items in flight on `target`.
    #[must_use]
    pub fn in_flight(&self, target: TargetId) -> u32 {
        self.targets.get(&target).map_or(0, |q| q.in_flight)
    }

    /// Items in flight on every target together.
    #[must_use]
    pub fn in_flight_total(&self) -> u64 {
        self.targets.values().map(|q| u64::from(q.in_flight)).sum()
    }

    /// Items pending on `target`.
    #[must_use]
    pub fn pending_on(&self, target: TargetId) -> usize {
        self.targets.get(&target).map_or(0, |q| q.pending.len())
    }

    /// Items pending in all.
    #[must_use]
    pub fn pending(&self) -> usize {
        self.queued
    }

    /// Whether another item can be pushed.
    #[must_use]
    pub fn has_room(&self) -> bool {
        self.queued < self.capacity
    }
}

/// Round-robin stripes over `targets`, `stripe_bytes` each (RAID-0): byte `o` is on
/// `targets[(o / stripe_bytes) % targets.len()]`. For tests of the scheduling only: no
/// file system in use reports such a layout to sluice.
#[cfg(test)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Striped {
    /// Bytes of one stripe (0 is treated as 1).
    pub stripe_bytes: u64,
    /// The targets in stripe order (at least one).
    pub targets: Vec<TargetId>,
}

#[cfg(test)]
impl Layout for Striped {
    fn target(&self, offset: u64) -> TargetId {
        let n = self.targets.len() as u64;
        let stripe = offset / self.stripe_bytes.max(1);
        self.targets[usize::try_from(stripe % n.max(1)).unwrap_or(0)]
    }
}

#[cfg(test)]
// Test data and counters are small; truncation cannot happen.
#[allow(clippy::cast_possible_truncation)]
mod tests {
    use super::*;
    use std::collections::{HashMap, HashSet};

    const MIB: u64 = 1 << 20;

    fn stripes(n: u32) -> Striped {
        Striped {
            stripe_bytes: MIB,
            targets: (0..n).map(TargetId).collect(),
        }
    }

    fn item(layout: &dyn Layout, file_id: u64, offset: u64, len: u32) -> WorkItem {
        WorkItem {
            file_id,
            offset,
            len,
            target: layout.target(offset),
        }
    }

    #[test]
    fn single_target_puts_every_byte_on_one_target() {
        let l = SingleTarget(TargetId(3));
        assert_eq!(l.target(0), TargetId(3));
        assert_eq!(l.target(u64::MAX), TargetId(3));
        assert_eq!(stripes(2).target(MIB), TargetId(1));
    }

    /// One simulated I/O thread hand-out: the LADS invariants checked against the
    /// scheduler's state just before it.
    fn check_choice(
        s: &LayoutScheduler,
        before: &HashMap<TargetId, (u32, usize)>,
        item: WorkItem,
        threads: u32,
    ) {
        let targets = before.len() as u32;
        // Least loaded: no other target with work had fewer in flight.
        let mine = before[&item.target].0;
        for (t, (f, p)) in before {
            if *p > 0 && *t != item.target {
                assert!(
                    mine <= *f,
                    "{item:?} chosen with {mine} in flight, {t:?} has {f}"
                );
            }
        }
        // With k targets holding work, the chosen one ends at most ceil(T / k) in
        // flight; while every target has work, that is ceil(T / N).
        let k = before.values().filter(|(_, p)| *p > 0).count() as u32;
        assert!(s.in_flight(item.target) <= threads.div_ceil(k));
        if k == targets {
            assert!(s.in_flight(item.target) <= threads.div_ceil(targets));
        }
    }

    /// Drives a scheduler with `threads` simulated I/O threads that finish items in a
    /// pseudo-random order; checks the LADS invariants on every hand-out.
    fn simulate(targets: u32, threads: usize, items: u64, seed: u64) {
        let layout = stripes(targets);
        let mut s = LayoutScheduler::new(items as usize);
        for i in 0..items {
            s.push(item(&layout, 1, i * MIB, MIB as u32)).unwrap();
        }
        let mut running: Vec<WorkItem> = Vec::new();
        let mut seen = HashSet::new();
        let mut last_offset: HashMap<TargetId, u64> = HashMap::new();
        let mut rng = seed;
        loop {
            while running.len() < threads {
                let before: HashMap<TargetId, (u32, usize)> = (0..targets)
                    .map(|t| {
                        (
                            TargetId(t),
                            (s.in_flight(TargetId(t)), s.pending_on(TargetId(t))),
                        )
                    })
                    .collect();
                let Some(item) = s.next() else { break };
                check_choice(&s, &before, item, threads as u32);
                assert!(seen.insert(item.offset), "handed out twice: {item:?}");
                if let Some(prev) = last_offset.insert(item.target, item.offset) {
                    assert!(
                        prev < item.offset,
                        "out of offset order on {:?}",
                        item.target
                    );
                }
                running.push(item);
            }
            if running.is_empty() {
                break;
            }
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let k = (rng >> 33) as usize % running.len();
            let finished = running.swap_remove(k);
            s.done(finished.target);
        }
        assert_eq!(seen.len() as u64, items);
        assert_eq!(s.pending(), 0);
        assert_eq!(s.in_flight_total(), 0);
    }

    #[test]
    fn four_targets_three_threads() {
        for seed in 0..20 {
            simulate(4, 3, 64, seed);
        }
    }

    #[test]
    fn more_threads_than_targets() {
        for seed in 0..20 {
            simulate(2, 5, 40, seed);
            simulate(3, 8, 61, seed);
        }
    }

    #[test]
    fn ties_go_round_robin() {
        let layout = stripes(4);
        let mut s = LayoutScheduler::new(100);
        for i in 0..16 {
            s.push(item(&layout, 0, i * MIB, 1)).unwrap();
        }
        // One thread: each item done before the next; targets rotate.
        let order: Vec<u32> = (0..8)
            .map(|_| {
                let it = s.next().unwrap();
                s.done(it.target);
                it.target.0
            })
            .collect();
        assert_eq!(order, [0, 1, 2, 3, 0, 1, 2, 3]);
    }

    #[test]
    fn capacity_and_duplicates() {
        let mut s = LayoutScheduler::new(2);
        let it = |o| WorkItem {
            file_id: 0,
            offset: o,
            len: 1,
            target: TargetId(0),
        };
        s.push(it(0)).unwrap();
        assert_eq!(s.push(it(0)), Err(PushError::Duplicate(it(0))));
        s.push(it(1)).unwrap();
        assert!(!s.has_room());
        assert_eq!(s.push(it(2)), Err(PushError::Full(it(2))));
        assert_eq!(s.next(), Some(it(0)));
        assert!(s.has_room());
        assert_eq!(s.in_flight(TargetId(0)), 1);
        s.done(TargetId(0));
        assert_eq!(s.next(), Some(it(1)));
        s.done(TargetId(0));
        assert_eq!(s.next(), None);
        assert_eq!(s.in_flight_total(), 0);
    }
}
