//! Re-pinning a running thread of this process by its kernel thread id: what adaptive
//! placement (issue 17 part 5) does when foreign load takes a bound thread's core.

use crate::error::AffinityError;

/// The calling thread's kernel thread id (`gettid`), the id [`rebind_thread`] takes.
pub fn current_tid() -> i32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::gettid() }
}

/// Pins thread `tid` of this process to `cpu` alone (`sched_setaffinity(tid)`), then
/// reads the kernel's mask back: it is an error unless the mask is exactly `[cpu]`.
///
/// # Errors
/// - [`AffinityError::CpuNotAvailable`] if this process may not use `cpu`,
/// - [`AffinityError::Syscall`] if the kernel refuses (`ESRCH`: the thread is gone) or
///   the read-back differs.
pub fn rebind_thread(tid: i32, cpu: u32) -> Result<(), AffinityError> {
    let allowed = crate::allowed_cpus()?;
    if !allowed.contains(&cpu) {
        return Err(AffinityError::CpuNotAvailable {
            cpu,
            available: crate::list(&allowed),
        });
    }
    let (word, bit) = ((cpu / 64) as usize, cpu % 64);
    let mut mask = vec![0u64; word + 1];
    mask[word] |= 1 << bit;
    let bytes = mask.len() * std::mem::size_of::<u64>();
    // SAFETY: `mask` is a live buffer of exactly `bytes` bytes that the kernel only
    // reads; `tid` is a thread id, checked by the kernel (ESRCH when not ours or gone).
    let ret = unsafe { libc::syscall(libc::SYS_sched_setaffinity, tid, bytes, mask.as_ptr()) };
    if ret != 0 {
        return Err(AffinityError::last_os("sched_setaffinity"));
    }
    let back = crate::task_affinity(tid)?;
    if back != [cpu] {
        return Err(AffinityError::Syscall {
            call: "sched_getaffinity read-back",
            source: std::io::Error::other(format!(
                "thread {tid} asked onto CPU {cpu} runs on {}",
                crate::list(&back)
            )),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_rebound_by_its_id_reads_back_on_that_cpu() {
        let last = *crate::allowed_cpus()
            .expect("topology")
            .last()
            .expect("a CPU");
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            tx.send(current_tid()).expect("send tid");
            done_rx.recv().ok();
            crate::current_cpu().expect("cpu")
        });
        let tid = rx.recv().expect("tid");
        rebind_thread(tid, last).expect("rebind");
        assert_eq!(crate::task_affinity(tid).expect("read-back"), [last]);
        done_tx.send(()).expect("wake");
        assert_eq!(t.join().expect("join"), last);
    }

    #[test]
    fn a_cpu_this_process_may_not_use_is_refused() {
        assert!(matches!(
            rebind_thread(current_tid(), 60_000),
            Err(AffinityError::CpuNotAvailable { cpu: 60_000, .. })
        ));
    }
}
