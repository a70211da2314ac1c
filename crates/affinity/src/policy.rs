//! The kernel scheduling policy of the calling thread.

use crate::error::AffinityError;

/// Puts the calling thread under `SCHED_BATCH` (threads it creates afterwards inherit
/// it). Woken, such a thread does not preempt the thread running on its CPU: it takes
/// an idle CPU, or waits until the running thread's slice ends. Its share of the CPU
/// is unchanged, and no privilege is needed.
///
/// For threads woken often for little work (the control connection's), so that each
/// wake-up does not take the CPU from a data thread in the middle of its work.
///
/// # Errors
/// [`AffinityError::Syscall`] if the kernel refuses.
pub fn batch_current_thread() -> Result<(), AffinityError> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid sched_param that outlives the call; pid 0 names the
    // calling thread.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) };
    if rc != 0 {
        return Err(AffinityError::last_os("sched_setscheduler(SCHED_BATCH)"));
    }
    Ok(())
}

/// The scheduling policy (`SCHED_OTHER`, `SCHED_BATCH`, ...) of thread `tid` of this
/// process (0: the calling thread), as [`task_affinity`](crate::task_affinity) reads
/// its CPUs.
///
/// # Errors
/// [`AffinityError::Syscall`] if the thread is gone (`ESRCH`) or the kernel refuses.
pub fn task_policy(tid: i32) -> Result<i32, AffinityError> {
    // SAFETY: no pointer arguments; the kernel checks `tid` (0: the calling thread).
    let policy = unsafe { libc::sched_getscheduler(tid) };
    if policy < 0 {
        return Err(AffinityError::last_os("sched_getscheduler"));
    }
    Ok(policy)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_thread_reads_back_batch_and_its_children_inherit_it() {
        let before = task_policy(0).unwrap();
        std::thread::spawn(|| {
            batch_current_thread().unwrap();
            assert_eq!(task_policy(0).unwrap(), libc::SCHED_BATCH);
            let child = std::thread::spawn(|| task_policy(0).unwrap());
            assert_eq!(child.join().unwrap(), libc::SCHED_BATCH);
        })
        .join()
        .unwrap();
        // Only the thread that asked (and its children) changed.
        assert_eq!(task_policy(0).unwrap(), before);
    }
}
