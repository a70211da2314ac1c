//! Applies a sluice [`Plan`](sluice_placement::Plan) to the running process: pins
//! threads, binds memory, and reads both back from the kernel to prove it.
//!
//! The planner (`sluice-placement`) decides; this crate is the only one that asks the
//! kernel to place threads and pages, and it never trusts its own bookkeeping: every
//! claim in a [`VerifyReport`] is a kernel read-back (`sched_getcpu`, `/proc`,
//! `sched_getaffinity`, `move_pages`, `get_mempolicy`).
//!
//! # How binding is done
//! - Threads: hwlocality (`Topology::bind_cpu` with `CpuBindingFlags::THREAD`, on a
//!   topology of this machine discovered once per process), i.e. `sched_setaffinity`.
//! - Memory: the raw `mbind` system call (`MPOL_BIND`, `MPOL_MF_STRICT |
//!   MPOL_MF_MOVE`). hwlocality was the first choice, but its `bind_memory_area`
//!   refuses `MemoryBindingFlags::MIGRATE` for areas (a `BadFlags` error, by its own
//!   flag validation) and needs a `&[u8]` of the area; see [`bind_memory`].
//! - Read-backs use libc directly (`sched_getcpu`, and the raw `sched_getaffinity`,
//!   `move_pages`, `get_mempolicy` system calls): hwloc answers some of these from its
//!   own view, and a witness must come from the kernel. `move_pages` is called with a
//!   NULL node list, so it only reports; it batches 1024 pages per call and retries
//!   pages reported `-EBUSY`.
//!
//! # Example
//! ```
//! use sluice_affinity::{bind_current_thread, current_cpu, thread_affinity, NodeMemory};
//!
//! # fn main() -> Result<(), sluice_affinity::AffinityError> {
//! let last = *thread_affinity()?.last().expect("at least one CPU");
//! bind_current_thread(&[last])?;
//! assert_eq!(current_cpu()?, last);
//!
//! let memory = NodeMemory::new(4 << 20, Some(0))?; // bound, locked, touched
//! assert!(memory.verify_node()?.all_on_node());
//! # Ok(())
//! # }
//! ```

mod bind;
mod error;
mod kernel;
mod memory;
mod policy;
mod rebind;
mod verify;

pub use bind::{allowed_cpus, allowed_nodes, bind_current_thread, bind_memory};
pub use error::AffinityError;
pub use kernel::{
    current_cpu, memory_policy, page_bytes, page_node, page_nodes, stat_cpu, task_affinity,
    thread_affinity, MemPolicy, PolicyMode,
};
pub use memory::{NodeMemory, PageReport, Populate, HUGE_PAGE_BYTES};
pub use policy::{batch_current_thread, task_policy};
pub use rebind::{current_tid, rebind_thread};
pub use verify::{
    apply_and_verify, PartitionRow, ThreadRow, VerifyReport, CPU_SAMPLES_PER_THREAD,
    VERIFY_BYTES_MAX_PER_CHANNEL,
};

/// `0-3,8,10-11`: CPUs or nodes as `taskset`, `numactl` and `/sys` write them.
/// `-` for an empty list. Input need not be sorted.
pub(crate) fn list(items: &[u32]) -> String {
    let items = kernel::sorted(items.iter().copied());
    if items.is_empty() {
        return "-".to_string();
    }
    let mut parts = Vec::new();
    let mut i = 0;
    while i < items.len() {
        let mut j = i;
        while j + 1 < items.len() && items[j + 1] == items[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            items[i].to_string()
        } else {
            format!("{}-{}", items[i], items[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    #[test]
    fn lists_compress_runs() {
        assert_eq!(super::list(&[3, 0, 1, 2, 8, 10, 11]), "0-3,8,10-11");
        assert_eq!(super::list(&[5]), "5");
        assert_eq!(super::list(&[]), "-");
    }
}
