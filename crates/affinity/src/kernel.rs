//! Read-backs straight from the kernel: where this thread runs, which CPUs it may run on,
//! which node each page lives on, which memory policy an address has.
//!
//! Nothing here consults our own bookkeeping or hwloc's: these are the witnesses that a
//! binding really happened.

use crate::error::AffinityError;
use std::collections::BTreeSet;
use std::io;

/// Pages asked about per `move_pages` call (keeps the two scratch arrays at 16 KiB).
const MOVE_PAGES_BATCH: usize = 1024;
/// Attempts for a page (or a call) the kernel reports busy (`EBUSY`, as during a
/// migration) before its status is reported as is.
const BUSY_RETRIES_MAX: u32 = 5;
/// Largest CPU mask asked for with `sched_getaffinity`: 65 536 CPUs.
const AFFINITY_MASK_BYTES_MAX: usize = 8192;

/// The page size of this machine in bytes (`sysconf(_SC_PAGESIZE)`, 4096 on x86-64).
pub fn page_bytes() -> usize {
    // SAFETY: sysconf has no preconditions; it only reads a constant of the C library.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n)
        .ok()
        .filter(|n| n.is_power_of_two())
        .unwrap_or(4096)
}

/// The CPU the calling thread is running on right now (`sched_getcpu`).
///
/// # Errors
/// [`AffinityError::Syscall`] if the C library cannot tell (no `getcpu` support).
pub fn current_cpu() -> Result<u32, AffinityError> {
    // SAFETY: sched_getcpu takes no arguments and only returns a value.
    let cpu = unsafe { libc::sched_getcpu() };
    u32::try_from(cpu).map_err(|_| AffinityError::last_os("sched_getcpu"))
}

/// The CPU the kernel last ran the calling thread on, from field 39 ("processor") of
/// `/proc/thread-self/stat` (the same file as `/proc/self/task/<tid>/stat`). A second,
/// independent witness of [`current_cpu`]; allocates, so not for the data path.
///
/// # Errors
/// [`AffinityError::Syscall`] if the file cannot be read or has an unexpected shape.
pub fn stat_cpu() -> Result<u32, AffinityError> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").map_err(|source| {
        AffinityError::Syscall {
            call: "read /proc/thread-self/stat",
            source,
        }
    })?;
    parse_stat_processor(&stat).ok_or_else(|| AffinityError::Syscall {
        call: "parse /proc/thread-self/stat",
        source: io::Error::new(io::ErrorKind::InvalidData, "no processor field (39)"),
    })
}

/// Field 39 of a `/proc/.../stat` line. The command name (field 2) may contain spaces
/// and parentheses, so fields are counted after the last `)`, where field 3 starts.
fn parse_stat_processor(stat: &str) -> Option<u32> {
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_ascii_whitespace().nth(39 - 3)?.parse().ok()
}

/// The CPUs the calling thread may run on (`sched_getaffinity`), ascending.
///
/// # Errors
/// [`AffinityError::Syscall`] if the kernel refuses even the largest mask (65 536 CPUs).
pub fn thread_affinity() -> Result<Vec<u32>, AffinityError> {
    task_affinity(0)
}

/// The CPUs thread `tid` of this process may run on (`sched_getaffinity(tid)`; 0 is the
/// calling thread), ascending: the read-back of [`crate::rebind_thread`].
///
/// # Errors
/// [`AffinityError::Syscall`] if the thread is gone (`ESRCH`) or the kernel refuses even
/// the largest mask (65 536 CPUs).
pub fn task_affinity(tid: i32) -> Result<Vec<u32>, AffinityError> {
    let mut words = 16usize; // 1024 CPUs, glibc's cpu_set_t
    loop {
        let mut mask = vec![0u64; words];
        let bytes = words * std::mem::size_of::<u64>();
        // SAFETY: `mask` is a live, writable buffer of exactly `bytes` bytes; `tid` is a
        // thread id (0: the calling thread), checked by the kernel; the kernel writes at most `bytes` bytes and returns how many.
        let ret =
            unsafe { libc::syscall(libc::SYS_sched_getaffinity, tid, bytes, mask.as_mut_ptr()) };
        if ret >= 0 {
            return Ok(mask_to_cpus(&mask));
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::EINVAL) && bytes < AFFINITY_MASK_BYTES_MAX {
            words *= 2; // the kernel's mask is larger than ours: ask again
            continue;
        }
        return Err(AffinityError::Syscall {
            call: "sched_getaffinity",
            source: err,
        });
    }
}

fn mask_to_cpus(mask: &[u64]) -> Vec<u32> {
    let mut cpus = Vec::new();
    for (w, &word) in (0u32..).zip(mask) {
        let mut bits = word;
        while bits != 0 {
            cpus.push(w * 64 + bits.trailing_zeros());
            bits &= bits - 1;
        }
    }
    cpus
}

/// The NUMA node of every page of `[ptr, ptr + len)` as the kernel reports it with
/// `move_pages(0, n, pages, NULL, status, 0)`: a node number, or a negative errno for a
/// page without a node (`-ENOENT` not present, `-EFAULT` not mapped). One entry per
/// page of the page-aligned range that covers the area.
///
/// This only reads page tables: any address is safe to ask about (the kernel answers
/// `-EFAULT` for unmapped ones). Pages reported `-EBUSY` are asked again, up to 5 times.
///
/// # Errors
/// [`AffinityError::Syscall`] if `move_pages` itself fails (ENOSYS on a kernel built
/// without NUMA).
pub fn page_nodes(ptr: *const u8, len: usize) -> Result<Vec<i32>, AffinityError> {
    let page = page_bytes();
    let start = (ptr as usize) & !(page - 1);
    let end = (ptr as usize).saturating_add(len);
    let count = end.saturating_sub(start).div_ceil(page);
    let mut nodes = Vec::with_capacity(count);
    let mut pages: Vec<*mut libc::c_void> = Vec::with_capacity(MOVE_PAGES_BATCH.min(count));
    let mut status = vec![0i32; MOVE_PAGES_BATCH.min(count)];
    let mut first = 0usize;
    while first < count {
        let n = MOVE_PAGES_BATCH.min(count - first);
        pages.clear();
        pages.extend((first..first + n).map(|i| (start + i * page) as *mut libc::c_void));
        query_pages(&mut pages, &mut status[..n])?;
        nodes.extend_from_slice(&status[..n]);
        first += n;
    }
    Ok(nodes)
}

/// The NUMA node of the page holding `ptr` (see [`page_nodes`]): one `move_pages` call,
/// no allocation, so it may run on the data path (the buffer pools' pair assertions).
///
/// # Errors
/// [`AffinityError::Syscall`] if `move_pages` fails.
pub fn page_node(ptr: *const u8) -> Result<i32, AffinityError> {
    let page = page_bytes();
    let mut pages = [((ptr as usize) & !(page - 1)) as *mut libc::c_void];
    let mut status = [0i32];
    query_pages(&mut pages, &mut status)?;
    Ok(status[0])
}

/// One `move_pages` query for `pages`, statuses into `status` (same length), with the
/// EBUSY retries.
fn query_pages(pages: &mut [*mut libc::c_void], status: &mut [i32]) -> Result<(), AffinityError> {
    debug_assert_eq!(pages.len(), status.len());
    let mut attempt = 0;
    loop {
        // SAFETY: `pages` and `status` are live arrays of `pages.len()` elements; nodes is
        // NULL so the kernel only writes one status per page and moves nothing; pid 0 is
        // this process. The page addresses need not be valid: the kernel checks them.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_move_pages,
                0,
                pages.len(),
                pages.as_mut_ptr(),
                std::ptr::null::<i32>(),
                status.as_mut_ptr(),
                0,
            )
        };
        attempt += 1;
        if ret < 0 {
            let err = io::Error::last_os_error();
            let transient = matches!(
                err.raw_os_error(),
                Some(libc::EBUSY | libc::EAGAIN | libc::EINTR)
            );
            if transient && attempt < BUSY_RETRIES_MAX {
                std::thread::yield_now();
                continue;
            }
            return Err(AffinityError::Syscall {
                call: "move_pages",
                source: err,
            });
        }
        if !status.contains(&-libc::EBUSY) || attempt >= BUSY_RETRIES_MAX {
            return Ok(());
        }
        // Ask again about the busy pages only (rare: a migration was in flight).
        for i in 0..pages.len() {
            if status[i] == -libc::EBUSY {
                std::thread::yield_now();
                query_pages_once(pages[i], &mut status[i]);
            }
        }
        if !status.contains(&-libc::EBUSY) {
            return Ok(());
        }
    }
}

fn query_pages_once(page: *mut libc::c_void, status: &mut i32) {
    let mut pages = [page];
    // SAFETY: as in `query_pages`, for a one-element array; `status` is a live i32.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            0,
            1usize,
            pages.as_mut_ptr(),
            std::ptr::null::<i32>(),
            status as *mut i32,
            0,
        )
    };
    if ret < 0 {
        *status = -libc::EBUSY; // keep it busy; the caller gives up after its retries
    }
}

/// A memory policy mode as `get_mempolicy` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyMode {
    /// `MPOL_DEFAULT`: the thread's policy (usually local allocation) applies.
    Default,
    /// `MPOL_PREFERRED`: try the nodes first, fall back elsewhere.
    Preferred,
    /// `MPOL_BIND`: only these nodes.
    Bind,
    /// `MPOL_INTERLEAVE`: round-robin over the nodes.
    Interleave,
    /// `MPOL_LOCAL`: the node of the CPU that faults the page in.
    Local,
    /// Another mode number (newer kernels: preferred-many, weighted interleave).
    Other(i32),
}

/// The memory policy of an address: mode and node mask, as the kernel holds it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MemPolicy {
    /// The mode.
    pub mode: PolicyMode,
    /// The nodes of the mask, ascending (empty for default and local).
    pub nodes: Vec<u32>,
}

impl std::fmt::Display for MemPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mode = match self.mode {
            PolicyMode::Default => return f.write_str("default"),
            PolicyMode::Local => return f.write_str("local"),
            PolicyMode::Preferred => "preferred",
            PolicyMode::Bind => "bind",
            PolicyMode::Interleave => "interleave",
            PolicyMode::Other(n) => return write!(f, "mode-{n}:{}", crate::list(&self.nodes)),
        };
        write!(f, "{mode}:{}", crate::list(&self.nodes))
    }
}

/// The memory policy governing the page at `ptr` (`get_mempolicy` with `MPOL_F_ADDR`).
/// On a one-node machine this is the witness that a binding was applied at all: every
/// page is on node 0 whether bound or not, but only a bound area reports `bind:0`.
///
/// # Errors
/// [`AffinityError::Syscall`] if the address is not mapped (EFAULT) or the kernel has no
/// NUMA support (ENOSYS).
pub fn memory_policy(ptr: *const u8) -> Result<MemPolicy, AffinityError> {
    const MPOL_F_ADDR: libc::c_ulong = 1 << 1;
    const MODE_FLAGS: i32 = !((1 << 13) - 1); // MPOL_F_STATIC_NODES and friends
    let mut mask = [0u64; 16]; // 1024 nodes
    let mut mode: libc::c_int = 0;
    let maxnode = mask.len() * 64;
    // The kernel only looks the address up; it need not be valid, so no dereference.
    let addr = ptr as usize;
    // SAFETY: `mode` and `mask` are live and writable; `maxnode` bits fit in `mask`;
    // with MPOL_F_ADDR the kernel looks `addr` up and returns EFAULT if it is not mapped.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut mode as *mut libc::c_int,
            mask.as_mut_ptr(),
            maxnode,
            addr as *const libc::c_void,
            MPOL_F_ADDR,
        )
    };
    if ret < 0 {
        return Err(AffinityError::last_os("get_mempolicy"));
    }
    let mode = match mode & !MODE_FLAGS {
        0 => PolicyMode::Default,
        1 => PolicyMode::Preferred,
        2 => PolicyMode::Bind,
        3 => PolicyMode::Interleave,
        4 => PolicyMode::Local,
        n => PolicyMode::Other(n),
    };
    Ok(MemPolicy {
        mode,
        nodes: mask_to_cpus(&mask),
    })
}

/// CPUs (or nodes) as a set, for the thread rows.
pub(crate) fn sorted(v: impl IntoIterator<Item = u32>) -> Vec<u32> {
    v.into_iter().collect::<BTreeSet<_>>().into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_processor_is_field_39_even_with_parentheses_in_the_name() {
        let mut line = String::from("1234 (a) b (c)) S");
        for field in 4..=45 {
            line.push_str(&format!(" {}", if field == 39 { 7 } else { field * 100 }));
        }
        assert_eq!(parse_stat_processor(&line), Some(7));
        assert_eq!(parse_stat_processor("1 (x) S 1 2"), None);
    }

    #[test]
    fn masks_list_set_bits_in_order() {
        assert_eq!(mask_to_cpus(&[0b1011, 1 << 63, 1]), vec![0, 1, 3, 127, 128]);
        assert!(mask_to_cpus(&[0, 0]).is_empty());
    }

    #[test]
    fn this_thread_runs_on_a_cpu_it_may_run_on() {
        let allowed = thread_affinity().expect("sched_getaffinity");
        assert!(!allowed.is_empty());
        let cpu = current_cpu().expect("sched_getcpu");
        assert!(allowed.contains(&cpu), "{cpu} not in {allowed:?}");
        let stat = stat_cpu().expect("/proc stat");
        assert!(allowed.contains(&stat), "{stat} not in {allowed:?}");
    }

    #[test]
    fn unmapped_pages_report_efault_not_an_error() {
        let nodes = page_nodes(std::ptr::null(), 1).expect("move_pages");
        assert_eq!(nodes, vec![-libc::EFAULT]);
    }
}
