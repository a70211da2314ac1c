//! Binding through hwloc: the current thread to CPUs, a memory area to NUMA nodes.

use crate::error::AffinityError;
use crate::kernel::page_bytes;
use hwlocality::cpu::binding::CpuBindingFlags;
use hwlocality::cpu::cpuset::CpuSet;
use hwlocality::errors::RawHwlocError;
use hwlocality::Topology;
use std::sync::OnceLock;

/// This machine's hwloc topology, discovered once per process (discovery reads sysfs and
/// takes milliseconds; binding calls need the topology object but not a fresh one).
static THIS_MACHINE: OnceLock<Result<Topology, RawHwlocError>> = OnceLock::new();

pub(crate) fn topology() -> Result<&'static Topology, AffinityError> {
    THIS_MACHINE
        .get_or_init(Topology::new)
        .as_ref()
        .map_err(|e| AffinityError::Topology(*e))
}

/// The CPUs (OS indexes) this process may be bound to: hwloc's allowed cpuset, i.e. the
/// online CPUs of this process's cgroup cpuset. Ascending.
///
/// # Errors
/// [`AffinityError::Topology`] if hwloc cannot read this machine.
pub fn allowed_cpus() -> Result<Vec<u32>, AffinityError> {
    let topology = topology()?;
    Ok(topology
        .allowed_cpuset()
        .iter_set()
        .filter_map(|i| u32::try_from(usize::from(i)).ok())
        .collect())
}

/// The NUMA nodes (OS indexes) this process may allocate memory from: hwloc's allowed
/// nodeset. Ascending.
///
/// # Errors
/// [`AffinityError::Topology`] if hwloc cannot read this machine.
pub fn allowed_nodes() -> Result<Vec<u32>, AffinityError> {
    let topology = topology()?;
    Ok(topology
        .allowed_nodeset()
        .iter_set()
        .filter_map(|i| u32::try_from(usize::from(i)).ok())
        .collect())
}

/// Binds the calling thread to `cpus` (OS indexes): hwloc `set_cpubind` with
/// `CpuBindingFlags::THREAD`, which is `sched_setaffinity` on the calling thread. The
/// thread may then run on any of them and on no other CPU.
///
/// # Errors
/// - [`AffinityError::EmptyCpuList`] if `cpus` is empty,
/// - [`AffinityError::CpuNotAvailable`] naming the first CPU this process may not use,
/// - [`AffinityError::BindThread`] if the kernel refuses,
/// - [`AffinityError::Topology`] if hwloc cannot read this machine.
pub fn bind_current_thread(cpus: &[u32]) -> Result<(), AffinityError> {
    if cpus.is_empty() {
        return Err(AffinityError::EmptyCpuList);
    }
    let topology = topology()?;
    let allowed = allowed_cpus()?;
    let mut set = CpuSet::new();
    for &cpu in cpus {
        if !allowed.contains(&cpu) {
            return Err(AffinityError::CpuNotAvailable {
                cpu,
                available: crate::list(&allowed),
            });
        }
        set.set(cpu as usize); // an allowed CPU, so within hwloc's index range
    }
    topology
        .bind_cpu(&set, CpuBindingFlags::THREAD)
        .map_err(|source| AffinityError::BindThread {
            cpus: crate::list(cpus),
            source,
        })
}

/// Binds the pages of `[ptr, ptr + len)` to the NUMA nodes `nodes` (OS indexes):
/// `mbind(MPOL_BIND, MPOL_MF_STRICT | MPOL_MF_MOVE)`. Pages already present are moved,
/// and the call fails rather than leave one elsewhere; pages faulted in later come from
/// these nodes only. An empty `nodes` resets the area to the default policy.
///
/// This is the raw system call, not hwlocality: hwlocality 1.0.0-alpha.13 refuses
/// `MIGRATE` for area bindings (`MemoryBindingFlags::validate` returns `BadFlags` for
/// `Area` + `Bind` + `MIGRATE`, although hwloc itself supports it on Linux), and it
/// wants a `&[u8]` of memory that may not be ours to reference. The call is safe:
/// the kernel checks the range (`EFAULT`/`ENOMEM` for unmapped addresses) and moving a
/// page never changes its contents.
///
/// `ptr` must be page-aligned (mbind's rule); `len` is rounded up to whole pages.
///
/// # Errors
/// - [`AffinityError::Unaligned`] if `ptr` is not page-aligned,
/// - [`AffinityError::NodeNotAvailable`] naming the first node this process may not use,
/// - [`AffinityError::BindMemory`] if the kernel refuses (or a page cannot be moved),
/// - [`AffinityError::Topology`] if hwloc cannot read this machine.
pub fn bind_memory(ptr: *const u8, len: usize, nodes: &[u32]) -> Result<(), AffinityError> {
    const MPOL_DEFAULT: libc::c_int = 0;
    const MPOL_BIND: libc::c_int = 2;
    const MPOL_MF_STRICT: libc::c_uint = 1;
    const MPOL_MF_MOVE: libc::c_uint = 1 << 1;
    let addr = ptr as usize;
    let page = page_bytes();
    if !addr.is_multiple_of(page) {
        return Err(AffinityError::Unaligned {
            addr,
            page_bytes: page,
        });
    }
    if len == 0 {
        return Ok(());
    }
    let mask = node_mask(nodes)?;
    let (mode, flags) = if nodes.is_empty() {
        (MPOL_DEFAULT, 0)
    } else {
        (MPOL_BIND, MPOL_MF_STRICT | MPOL_MF_MOVE)
    };
    // The kernel reads `maxnode - 1` bits (numactl passes bits + 1 for the same reason).
    let maxnode = if mask.is_empty() {
        0
    } else {
        mask.len() * 64 + 1
    };
    let mask_ptr = if mask.is_empty() {
        std::ptr::null()
    } else {
        mask.as_ptr()
    };
    // SAFETY: `mask_ptr` is NULL or points at `mask`, which holds `maxnode - 1` bits;
    // the address range is validated by the kernel (errors, never faults, for memory
    // that is not mapped); mbind changes placement policy and moves pages, never their
    // contents, so no Rust reference into the range can observe a change.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            addr as *mut libc::c_void,
            len,
            mode,
            mask_ptr,
            maxnode,
            flags,
        )
    };
    if ret != 0 {
        return Err(AffinityError::BindMemory {
            addr,
            len,
            nodes: crate::list(nodes),
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// The kernel node mask of `nodes` (bit `n` of word `n / 64`), empty for no node.
///
/// # Errors
/// [`AffinityError::NodeNotAvailable`] naming the first node this process may not use,
/// [`AffinityError::Topology`] if hwloc cannot read this machine.
fn node_mask(nodes: &[u32]) -> Result<Vec<libc::c_ulong>, AffinityError> {
    let mut mask: Vec<libc::c_ulong> = Vec::new();
    if nodes.is_empty() {
        return Ok(mask);
    }
    let allowed = allowed_nodes()?;
    for &node in nodes {
        if !allowed.contains(&node) {
            return Err(AffinityError::NodeNotAvailable {
                node,
                available: crate::list(&allowed),
            });
        }
        let (word, bit) = ((node / 64) as usize, node % 64);
        if mask.len() <= word {
            mask.resize(word + 1, 0);
        }
        mask[word] |= 1 << bit;
    }
    Ok(mask)
}
