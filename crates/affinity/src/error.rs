//! The one error type of this crate.

use hwlocality::cpu::binding::CpuBindingError;
use hwlocality::errors::{HybridError, RawHwlocError};
use sluice_placement::Role;
use std::io;

/// Why a binding, an allocation or a read-back failed.
///
/// Plan-shaped variants ([`UnknownPlanCpu`](Self::UnknownPlanCpu),
/// [`UnknownPlanNode`](Self::UnknownPlanNode), [`EmptyPlanCpus`](Self::EmptyPlanCpus)) mean
/// the plan was made for another machine: make a new plan for this one. The others mean
/// the kernel refused something: the message names the call and the errno.
#[derive(Debug, thiserror::Error)]
pub enum AffinityError {
    /// hwloc could not discover this machine's topology (needed to bind anything).
    #[error("cannot read this machine's topology with hwloc: {0}")]
    Topology(#[source] RawHwlocError),

    /// A thread of the plan is placed on a CPU this process cannot use (the plan was made
    /// for another, possibly synthetic, machine).
    #[error(
        "plan puts {role} {index} (channel {channel}) on CPU {cpu}, but this machine has CPUs {available}"
    )]
    UnknownPlanCpu {
        /// Channel of the thread.
        channel: u32,
        /// Role of the thread.
        role: Role,
        /// Index of the thread within its role.
        index: u32,
        /// The CPU that does not exist here.
        cpu: u32,
        /// The CPUs this process may use, as a list (`0-1`).
        available: String,
    },

    /// A thread of the plan is bound to an empty CPU list (`Some([])`), which no kernel
    /// accepts; an unbound thread is written `None`.
    #[error("plan binds {role} {index} (channel {channel}) to an empty CPU list")]
    EmptyPlanCpus {
        /// Channel of the thread.
        channel: u32,
        /// Role of the thread.
        role: Role,
        /// Index of the thread within its role.
        index: u32,
    },

    /// A channel's buffer memory is placed on a NUMA node this machine does not have.
    #[error(
        "plan puts channel {channel}'s buffers on NUMA node {node}, but this machine has nodes {available}"
    )]
    UnknownPlanNode {
        /// The channel.
        channel: u32,
        /// The node that does not exist here.
        node: u32,
        /// The nodes this process may allocate from, as a list.
        available: String,
    },

    /// [`bind_current_thread`](crate::bind_current_thread) was given a CPU this process
    /// cannot use.
    #[error("cannot bind to CPU {cpu}: this machine has CPUs {available}")]
    CpuNotAvailable {
        /// The CPU asked for.
        cpu: u32,
        /// The CPUs this process may use, as a list.
        available: String,
    },

    /// [`bind_current_thread`](crate::bind_current_thread) was given no CPU at all.
    #[error("cannot bind a thread to an empty CPU list")]
    EmptyCpuList,

    /// Memory binding was asked for a NUMA node this process cannot allocate from.
    #[error("cannot bind memory to NUMA node {node}: this machine has nodes {available}")]
    NodeNotAvailable {
        /// The node asked for.
        node: u32,
        /// The nodes this process may allocate from, as a list.
        available: String,
    },

    /// The kernel (through hwloc) refused to bind the current thread.
    #[error("binding the current thread to CPUs {cpus} failed: {source}")]
    BindThread {
        /// The CPUs asked for, as a list.
        cpus: String,
        /// hwloc's error.
        #[source]
        source: HybridError<CpuBindingError>,
    },

    /// The kernel refused to bind a memory area (`mbind`).
    #[error("binding {len} bytes at {addr:#x} to NUMA nodes {nodes} failed (mbind): {source}")]
    BindMemory {
        /// Start of the area.
        addr: usize,
        /// Length of the area in bytes.
        len: usize,
        /// The nodes asked for, as a list (empty: reset to the default policy).
        nodes: String,
        /// The errno.
        #[source]
        source: io::Error,
    },

    /// A memory area to bind does not start on a page boundary (mbind requires it).
    #[error("memory area at {addr:#x} is not aligned to the {page_bytes}-byte page size")]
    Unaligned {
        /// Start of the area.
        addr: usize,
        /// The page size.
        page_bytes: usize,
    },

    /// [`NodeMemory`](crate::NodeMemory) was asked for zero bytes.
    #[error("cannot map a zero-length memory region")]
    ZeroLength,

    /// The requested length overflows when rounded up to the huge page size.
    #[error("cannot map {len} bytes: the size overflows when rounded up to 2 MiB")]
    TooLarge {
        /// The length asked for.
        len: usize,
    },

    /// `mmap` failed (usually out of address space or memory).
    #[error("mmap of {len} bytes failed: {source}")]
    Map {
        /// Bytes asked for (including the alignment slack).
        len: usize,
        /// The errno.
        #[source]
        source: io::Error,
    },

    /// A read-back system call failed (`move_pages`, `sched_getaffinity`, `sched_getcpu`,
    /// `get_mempolicy`, reading `/proc`). On a kernel without NUMA support, `move_pages`
    /// and `get_mempolicy` fail with ENOSYS.
    #[error("{call} failed: {source}")]
    Syscall {
        /// The call that failed.
        call: &'static str,
        /// The errno, or the I/O error.
        #[source]
        source: io::Error,
    },

    /// A verification thread could not be started.
    #[error("cannot start verification thread for {role} {index}: {source}")]
    Spawn {
        /// Role of the thread.
        role: Role,
        /// Index of the thread within its role.
        index: u32,
        /// The error from the OS.
        #[source]
        source: io::Error,
    },

    /// A verification thread panicked (a bug in this crate).
    #[error("verification thread for {role} {index} panicked")]
    ThreadPanicked {
        /// Role of the thread.
        role: Role,
        /// Index of the thread within its role.
        index: u32,
    },
}

impl AffinityError {
    /// A [`Syscall`](Self::Syscall) error carrying the current `errno`.
    pub(crate) fn last_os(call: &'static str) -> Self {
        AffinityError::Syscall {
            call,
            source: io::Error::last_os_error(),
        }
    }
}
