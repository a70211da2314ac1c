//! A failed mlock degrades to pageable memory with one warning. Its own test binary (so
//! its own process): the warning is once per process, and no other test may use it up.

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

#[test]
fn a_failed_mlock_warns_once_and_is_not_an_error() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a live, writable rlimit.
    let ret = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) };
    assert_eq!(ret, 0, "getrlimit");
    if limit.rlim_cur == libc::RLIM_INFINITY {
        eprintln!("RLIMIT_MEMLOCK is unlimited here: mlock cannot be made to fail; skipped");
        return;
    }
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
            let len = usize::try_from(limit.rlim_cur).expect("limit fits usize") + (4 << 20);
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
