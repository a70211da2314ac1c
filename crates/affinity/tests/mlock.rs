//! A failed mlock degrades to pageable memory with one warning. Its own test binary (so
//! its own process): the warning is once per process, and no other test may use it up,
//! and the test lowers the process's RLIMIT_MEMLOCK so that mlock fails even where the
//! limit was unlimited.

use sluice_affinity::{allowed_nodes, NodeMemory};
use std::io::Write;
use std::sync::{Arc, Mutex};

/// A shared buffer the tracing subscriber writes into.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("lock").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Drops CAP_IPC_LOCK from the calling thread's effective set (capabilities are
/// per-thread on Linux), so that RLIMIT_MEMLOCK applies to it even when run as root.
fn drop_ipc_lock_capability() {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    const CAP_IPC_LOCK: u32 = 14;
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    // SAFETY: header and data are live, writable and laid out as the kernel's
    // __user_cap_header_struct and two __user_cap_data_struct (version 3).
    let ret = unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) };
    assert_eq!(ret, 0, "capget");
    data[0].effective &= !(1 << CAP_IPC_LOCK);
    // SAFETY: as above; lowering our own effective set is always permitted.
    let ret = unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) };
    assert_eq!(ret, 0, "capset");
}

/// Reports a check that cannot run here: a `SKIPPED:` line on stderr, written past the
/// test harness's capture so that it shows, or, where `CI` is set (CI runs as root, so
/// nothing may be refused), a failure.
fn skip(reason: &str) {
    assert!(
        std::env::var_os("CI").is_none(),
        "CI is set, so this check must run: {reason}"
    );
    let line = format!("SKIPPED: {reason}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// The soft RLIMIT_MEMLOCK this process runs under, in bytes: lowered first to `LOWERED`
/// where it is higher or unlimited (root, many containers), for this process only (this
/// test binary holds this one test; the hard limit stays, so lowering is always allowed).
/// `None` where even that is refused.
fn finite_memlock_limit() -> Option<u64> {
    const LOWERED: u64 = 1 << 20;
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a live, writable rlimit.
    let ret = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) };
    assert_eq!(ret, 0, "getrlimit");
    if limit.rlim_cur != libc::RLIM_INFINITY && limit.rlim_cur <= LOWERED {
        return Some(limit.rlim_cur);
    }
    limit.rlim_cur = LOWERED;
    // SAFETY: `limit` is a live, initialized rlimit; only this process's soft limit moves.
    let ret = unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &limit) };
    if ret != 0 {
        let e = std::io::Error::last_os_error();
        skip(&format!(
            "RLIMIT_MEMLOCK cannot be lowered to {LOWERED} bytes ({e}): mlock cannot be made to fail"
        ));
        return None;
    }
    Some(LOWERED)
}

#[test]
fn a_failed_mlock_warns_once_and_is_not_an_error() {
    let Some(limit_bytes) = finite_memlock_limit() else {
        return;
    };
    let captured = Captured::default();
    let writer = captured.clone();
    std::thread::spawn(move || {
        drop_ipc_lock_capability();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            // Larger than the limit, so mlock must fail without CAP_IPC_LOCK.
            let len = usize::try_from(limit_bytes).expect("limit fits usize") + (4 << 20);
            let node = allowed_nodes().expect("hwloc")[0];
            let memory = NodeMemory::new(len, Some(node)).expect("not an error");
            assert!(!memory.mlocked());
            assert!(memory.verify_node().expect("move_pages").all_on_node());
            let again = NodeMemory::new(len, Some(node)).expect("not an error");
            assert!(!again.mlocked());
        });
    })
    .join()
    .expect("thread");
    let log = String::from_utf8(captured.0.lock().expect("lock").clone()).expect("utf-8");
    assert_eq!(
        log.matches("mlock of buffer memory failed").count(),
        1,
        "{log}"
    );
    assert!(
        log.contains("WARN") && log.contains("continuing with pageable memory"),
        "{log}"
    );
}
