//! Test-only helpers of the engine's in-module tests.

use std::io::Write;

/// A check that cannot run here says so in the test output (past libtest's capture,
/// which takes only `print!`/`eprint!`), and fails where `CI` is set unless
/// `allowed_in_ci` (a capability even root may lack in a container, such as io_uring).
pub(crate) fn skip(reason: &str, allowed_in_ci: bool) {
    let _ = writeln!(std::io::stderr(), "SKIPPED: {reason}");
    assert!(
        allowed_in_ci || std::env::var_os("CI").is_none(),
        "CI must run this check: {reason}"
    );
}

/// A fresh temp dir in memory (under `/dev/shm`, tmpfs), or `None` (said loudly, and
/// a failure where `CI` is set) on a machine without one.
pub(crate) fn in_memory_dir() -> Option<tempfile::TempDir> {
    let shm = std::path::Path::new("/dev/shm");
    if !shm.is_dir() {
        skip("no /dev/shm (tmpfs) on this machine", false);
        return None;
    }
    Some(tempfile::tempdir_in(shm).expect("a dir in /dev/shm"))
}

/// A connected pair of loopback TCP sockets (client, server).
pub(crate) fn tcp_pair() -> (std::net::TcpStream, std::net::TcpStream) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback listener");
    let c = std::net::TcpStream::connect(l.local_addr().expect("its address")).expect("connect");
    let (s, _) = l.accept().expect("accept");
    (c, s)
}

/// Writes into `s` until its socket takes no more (its peer reads nothing); returns the
/// bytes written. Fails past 256 MiB: a peer that reads would never fill it.
pub(crate) fn fill_until_blocked(s: &mut std::net::TcpStream) -> u64 {
    s.set_nonblocking(true).expect("non-blocking");
    let block = vec![7u8; 1 << 16];
    let mut written = 0u64;
    loop {
        match s.write(&block) {
            Ok(n) => {
                assert!(n > 0, "the socket took nothing");
                written += n as u64;
                assert!(written < 256 << 20, "{written} bytes taken: the peer reads");
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => panic!("{e}"),
        }
    }
    s.set_nonblocking(false).expect("blocking again");
    written
}
