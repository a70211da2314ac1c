//! [`NodeMemory`]: an anonymous, 2 MiB-aligned, node-bound, locked region, prefaulted or
//! populated on demand ([`Populate`]).

use crate::bind::bind_memory;
use crate::error::AffinityError;
use crate::kernel::{memory_policy, page_bytes, page_nodes, MemPolicy};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io;
use std::ptr::NonNull;
use std::sync::Once;

/// Size and alignment of a transparent huge page on x86-64 and arm64 (4 KiB base pages).
pub const HUGE_PAGE_BYTES: usize = 2 << 20;

/// Makes the mlock warning appear once per process, not once per region.
static MLOCK_WARNING: Once = Once::new();

/// An anonymous memory region placed on chosen NUMA nodes before its first touch.
///
/// Construction, in this order (the order is the point):
/// 1. `mmap` `len` rounded up to 2 MiB, over-mapped by 2 MiB and trimmed so the start is
///    2 MiB-aligned (transparent huge pages need both);
/// 2. `madvise(MADV_HUGEPAGE)` (failure ignored: THP may be off);
/// 3. bound to the nodes with [`bind_memory`] (`MPOL_BIND`, strict) while no page exists
///    yet, so no page is ever allocated elsewhere and then migrated;
/// 4. locked so pages cannot be swapped out (failure is not an error: one warning per
///    process, and the transfer continues with pageable memory): `mlock` with
///    [`Populate::Now`], `mlock2(MLOCK_ONFAULT)` with [`Populate::OnDemand`];
/// 5. with [`Populate::Now`], every page written once (prefault), so placement has
///    happened and [`verify_node`](Self::verify_node) reports facts, not intentions.
///    With [`Populate::OnDemand`] a page is allocated at its first touch, on the bound
///    nodes all the same (the policy of step 3 decides where), and locked from then on.
///
/// `Drop` unmaps the region (which also unlocks it).
#[derive(Debug)]
pub struct NodeMemory {
    ptr: NonNull<u8>,
    len: usize,
    mapped_len: usize,
    nodes: Vec<u32>,
    mlocked: bool,
    hugepage_advised: bool,
    populate: Populate,
}

/// When a region's pages are allocated. Either way its size, binding and lock are
/// settled at construction; only the moment each page is first written differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Populate {
    /// Every page at construction: a long-lived process (the daemon) pays once, at
    /// start-up, and never takes a page fault on its data path.
    Now,
    /// Each page at its first touch: a process that runs one job (a client) pays only
    /// for the pages its job uses, not for the whole cap before its first byte moves.
    OnDemand,
}

impl std::fmt::Display for Populate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Populate::Now => "now",
            Populate::OnDemand => "on-demand",
        })
    }
}

// SAFETY: NodeMemory owns its mapping exclusively (no other value refers to it), so moving
// it to another thread moves that ownership. Shared references (`&NodeMemory`) only hand
// out the raw pointer and read immutable fields; writing through the pointer needs
// `unsafe` code whose author must arrange exclusive access (as `sluice-buffers` does with
// disjoint slots), exactly as for a `Vec<u8>` shared behind a raw pointer.
unsafe impl Send for NodeMemory {}
// SAFETY: see `Send`: no method of `&NodeMemory` mutates the region or its fields.
unsafe impl Sync for NodeMemory {}

impl NodeMemory {
    /// Maps at least `len` bytes bound to `node` (`None`: unbound, the OS places pages on
    /// first touch, normally on the toucher's node).
    ///
    /// # Errors
    /// See [`on_nodes`](Self::on_nodes).
    pub fn new(len: usize, node: Option<u32>) -> Result<NodeMemory, AffinityError> {
        NodeMemory::populated(len, node, Populate::Now)
    }

    /// [`new`](Self::new), with its pages allocated as `populate` says.
    ///
    /// # Errors
    /// See [`on_nodes`](Self::on_nodes).
    pub fn populated(
        len: usize,
        node: Option<u32>,
        populate: Populate,
    ) -> Result<NodeMemory, AffinityError> {
        match node {
            Some(node) => NodeMemory::on_nodes_populated(len, &[node], populate),
            None => NodeMemory::on_nodes_populated(len, &[], populate),
        }
    }

    /// Maps at least `len` bytes bound to the set `nodes` (`MPOL_BIND` over several nodes
    /// allocates from the nearest of them); empty `nodes` means unbound.
    ///
    /// # Errors
    /// - [`AffinityError::ZeroLength`] / [`AffinityError::TooLarge`] for bad lengths,
    /// - [`AffinityError::Map`] if `mmap` fails,
    /// - [`AffinityError::NodeNotAvailable`] / [`AffinityError::BindMemory`] if the
    ///   binding is refused.
    ///
    /// A failed `mlock` is not an error (see the type's docs).
    pub fn on_nodes(len: usize, nodes: &[u32]) -> Result<NodeMemory, AffinityError> {
        NodeMemory::on_nodes_populated(len, nodes, Populate::Now)
    }

    /// [`on_nodes`](Self::on_nodes), with its pages allocated as `populate` says.
    ///
    /// # Errors
    /// See [`on_nodes`](Self::on_nodes).
    pub fn on_nodes_populated(
        len: usize,
        nodes: &[u32],
        populate: Populate,
    ) -> Result<NodeMemory, AffinityError> {
        if len == 0 {
            return Err(AffinityError::ZeroLength);
        }
        let mapped_len = len
            .checked_next_multiple_of(HUGE_PAGE_BYTES)
            .ok_or(AffinityError::TooLarge { len })?;
        let over_len = mapped_len
            .checked_add(HUGE_PAGE_BYTES)
            .ok_or(AffinityError::TooLarge { len })?;
        let ptr = map_aligned(mapped_len, over_len)?;
        // From here on `memory` owns the mapping: an early return unmaps it.
        let mut memory = NodeMemory {
            ptr,
            len,
            mapped_len,
            nodes: crate::kernel::sorted(nodes.iter().copied()),
            mlocked: false,
            hugepage_advised: false,
            populate,
        };
        // SAFETY: the range is exactly our fresh mapping; MADV_HUGEPAGE only changes how
        // future faults are served and never the contents.
        memory.hugepage_advised =
            unsafe { libc::madvise(ptr.as_ptr().cast(), mapped_len, libc::MADV_HUGEPAGE) == 0 };
        if !memory.nodes.is_empty() {
            bind_memory(ptr.as_ptr(), mapped_len, &memory.nodes)?;
        }
        // SAFETY: the range is exactly our mapping; locking does not change its contents.
        let locked = unsafe {
            match populate {
                Populate::Now => libc::mlock(ptr.as_ptr().cast(), mapped_len),
                Populate::OnDemand => {
                    libc::mlock2(ptr.as_ptr().cast(), mapped_len, libc::MLOCK_ONFAULT)
                }
            }
        };
        if locked == 0 {
            memory.mlocked = true;
        } else {
            let err = io::Error::last_os_error();
            MLOCK_WARNING.call_once(|| {
                tracing::warn!(
                    bytes = mapped_len,
                    error = %err,
                    "mlock of buffer memory failed ({err}; RLIMIT_MEMLOCK too low and no \
                     CAP_IPC_LOCK?): continuing with pageable memory, which the kernel may \
                     swap out or move; raise `ulimit -l` or grant CAP_IPC_LOCK to lock it"
                );
            });
        }
        if populate == Populate::Now {
            memory.prefault();
        }
        Ok(memory)
    }

    /// Writes one byte in every base page so each is allocated now, under the binding.
    fn prefault(&mut self) {
        let page = page_bytes();
        let base = self.ptr.as_ptr();
        for offset in (0..self.mapped_len).step_by(page) {
            // SAFETY: offset < mapped_len, so the byte lies in our writable mapping, which
            // nobody else can see yet; writing the zero it already holds changes nothing
            // but makes the kernel allocate the page. Volatile so it is not optimized out.
            unsafe { base.add(offset).write_volatile(0) };
        }
    }

    /// The region as a mutable slice (its first [`len`](Self::len) bytes).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: ptr..ptr+len lies in our readable, writable mapping, all bytes are
        // initialized (anonymous memory is zero-filled) and `&mut self` guarantees that no
        // other reference to the region exists for the slice's lifetime.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Start of the region (2 MiB-aligned). Writing through it requires that the writer
    /// has exclusive access to the bytes written (see the `Sync` SAFETY argument).
    pub fn as_mut_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Bytes usable, as asked for (the mapping behind them is rounded up to 2 MiB).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: a zero-length region cannot be constructed.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes mapped, bound and locked: [`len`](Self::len) rounded up to 2 MiB.
    pub fn mapped_len(&self) -> usize {
        self.mapped_len
    }

    /// The nodes the region is bound to, ascending; empty when unbound.
    pub fn nodes(&self) -> &[u32] {
        &self.nodes
    }

    /// Whether `mlock` succeeded (pages cannot be swapped out).
    pub fn mlocked(&self) -> bool {
        self.mlocked
    }

    /// When its pages are allocated.
    pub fn populate(&self) -> Populate {
        self.populate
    }

    /// Whether `madvise(MADV_HUGEPAGE)` was accepted.
    pub fn hugepage_advised(&self) -> bool {
        self.hugepage_advised
    }

    /// The memory policy the kernel holds for the region (read back, not remembered).
    ///
    /// # Errors
    /// [`AffinityError::Syscall`] if `get_mempolicy` fails.
    pub fn policy(&self) -> Result<MemPolicy, AffinityError> {
        memory_policy(self.ptr.as_ptr())
    }

    /// Asks the kernel where every mapped page is (`move_pages`, see
    /// [`page_nodes`]) and compares with the binding.
    ///
    /// # Errors
    /// [`AffinityError::Syscall`] if `move_pages` fails.
    pub fn verify_node(&self) -> Result<PageReport, AffinityError> {
        let statuses = page_nodes(self.ptr.as_ptr(), self.mapped_len)?;
        Ok(PageReport::from_statuses(&statuses, &self.nodes))
    }
}

impl Drop for NodeMemory {
    fn drop(&mut self) {
        // SAFETY: ptr..ptr+mapped_len is exactly the mapping this value owns; no reference
        // into it outlives `self` (slices borrow `self`), so unmapping cannot leave one
        // dangling.
        let ret = unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.mapped_len) };
        debug_assert_eq!(ret, 0, "munmap of our own mapping failed");
    }
}

/// Maps `over_len` bytes and trims them to a 2 MiB-aligned `mapped_len` bytes.
fn map_aligned(mapped_len: usize, over_len: usize) -> Result<NonNull<u8>, AffinityError> {
    // SAFETY: a fresh private anonymous mapping at an address the kernel picks: it cannot
    // overlap anything Rust owns.
    let raw = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            over_len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        return Err(AffinityError::Map {
            len: over_len,
            source: io::Error::last_os_error(),
        });
    }
    let base = raw as usize;
    let start = base.next_multiple_of(HUGE_PAGE_BYTES);
    let head = start - base;
    let tail = over_len - head - mapped_len;
    // SAFETY: [base, start) and [start + mapped_len, base + over_len) are page-aligned
    // parts of the mapping just made (mmap returns page-aligned memory and all sizes are
    // multiples of 2 MiB), nothing refers to them, and unmapping them leaves
    // [start, start + mapped_len) mapped.
    unsafe {
        if head > 0 {
            libc::munmap(raw, head);
        }
        if tail > 0 {
            libc::munmap((start + mapped_len) as *mut libc::c_void, tail);
        }
    }
    NonNull::new(start as *mut u8).ok_or(AffinityError::Map {
        len: over_len,
        source: io::Error::other("mmap returned a null address"),
    })
}

/// Where the pages of an area are, compared with where they should be.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PageReport {
    /// Pages examined (base pages: a 2 MiB huge page counts 512 times).
    pub pages: usize,
    /// Pages on one of the expected nodes. For unbound memory every page present on
    /// some node counts.
    pub on_node: usize,
    /// Pages not on an expected node, by node number, or by negative errno for pages the
    /// kernel places on no node (`-2` ENOENT: not present, e.g. swapped out; `-14` EFAULT).
    pub elsewhere: BTreeMap<i32, usize>,
    /// Every page by node (or negative errno): the whole histogram.
    pub by_node: BTreeMap<i32, usize>,
}

impl PageReport {
    /// Tallies `move_pages` statuses against the expected `nodes` (empty: any node).
    pub fn from_statuses(statuses: &[i32], nodes: &[u32]) -> PageReport {
        let mut by_node = BTreeMap::new();
        for &s in statuses {
            *by_node.entry(s).or_insert(0usize) += 1;
        }
        let expected = |s: i32| match u32::try_from(s) {
            Ok(node) => nodes.is_empty() || nodes.contains(&node),
            Err(_) => false,
        };
        let on_node = by_node
            .iter()
            .filter(|(&s, _)| expected(s))
            .map(|(_, n)| n)
            .sum();
        let elsewhere = by_node
            .iter()
            .filter(|(&s, _)| !expected(s))
            .map(|(&s, &n)| (s, n))
            .collect();
        PageReport {
            pages: statuses.len(),
            on_node,
            elsewhere,
            by_node,
        }
    }

    /// Whether every page is where it should be (vacuously true for no pages).
    pub fn all_on_node(&self) -> bool {
        self.on_node == self.pages
    }

    /// Fraction of pages on the expected nodes, 0.0 to 1.0 (1.0 for no pages).
    pub fn share(&self) -> f64 {
        if self.pages == 0 {
            1.0
        } else {
            self.on_node as f64 / self.pages as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_report_counts_expected_and_stray_pages() {
        let r = PageReport::from_statuses(&[0, 0, 1, -2, 0], &[0]);
        assert_eq!((r.pages, r.on_node), (5, 3));
        assert_eq!(r.elsewhere, BTreeMap::from([(-2, 1), (1, 1)]));
        assert!(!r.all_on_node());
        assert!((r.share() - 0.6).abs() < 1e-9);
        let unbound = PageReport::from_statuses(&[0, 1, -2], &[]);
        assert_eq!(unbound.on_node, 2);
        assert_eq!(unbound.by_node.len(), 3);
        assert!(PageReport::from_statuses(&[], &[0]).all_on_node());
    }

    #[test]
    fn regions_are_rounded_and_aligned_to_huge_pages() {
        let mut m = NodeMemory::new(5000, None).expect("map");
        assert_eq!(m.len(), 5000);
        assert_eq!(m.mapped_len(), HUGE_PAGE_BYTES);
        assert_eq!(m.as_mut_ptr() as usize % HUGE_PAGE_BYTES, 0);
        m.as_mut_slice()[4999] = 7;
        assert_eq!(m.as_mut_slice()[4999], 7);
        let report = m.verify_node().expect("move_pages");
        assert_eq!(report.pages, HUGE_PAGE_BYTES / page_bytes());
        assert!(report.all_on_node(), "{report:?}");
        assert!(matches!(
            NodeMemory::new(0, None),
            Err(AffinityError::ZeroLength)
        ));
        assert!(matches!(
            NodeMemory::new(usize::MAX - 5, None),
            Err(AffinityError::TooLarge { .. })
        ));
    }
}
