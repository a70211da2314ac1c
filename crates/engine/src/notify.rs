//! systemd's readiness protocol (`Type=notify`, sd_notify(3)): one datagram of
//! `KEY=VALUE` lines to the unix socket named by `$NOTIFY_SOCKET` (a path, or an
//! abstract name written with a leading `@`). Without the variable every call does
//! nothing, so a daemon run from a shell behaves as before.
//!
//! The daemon says `READY=1` once its listeners are bound and its accounts loaded,
//! `STOPPING=1` when a drain starts, `RELOADING=1` … `READY=1` around a SIGHUP, and
//! `STATUS=` lines a person reads in `systemctl status`.

use std::os::unix::net::UnixDatagram;

/// The variable systemd sets for a `Type=notify` service.
pub const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";
/// Longest message sent (systemd reads far more; a status line is short).
const MAX_MESSAGE: usize = 4096;

/// Sends `state` (newline-separated `KEY=VALUE` lines) to the service manager, if one
/// listens; a failure is logged once per call, never fatal (the daemon serves anyway).
pub fn notify(state: &str) {
    let Some(socket) = std::env::var_os(NOTIFY_SOCKET) else {
        return;
    };
    let Some(socket) = socket.to_str() else {
        tracing::warn!("${NOTIFY_SOCKET} is not UTF-8: not telling systemd {state:?}");
        return;
    };
    if let Err(e) = send(socket, state) {
        tracing::warn!("cannot tell systemd {state:?} through {socket}: {e}");
    }
}

/// `READY=1` with a status line.
pub fn ready(status: &str) {
    notify(&format!("READY=1\nSTATUS={}", one_line(status)));
}

/// `STOPPING=1` with a status line.
pub fn stopping(status: &str) {
    notify(&format!("STOPPING=1\nSTATUS={}", one_line(status)));
}

/// `RELOADING=1` (a SIGHUP is being handled) with the monotonic time systemd asks for;
/// [`ready`] ends it.
pub fn reloading() {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given, which lives on this stack.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    let usec = i128::from(ts.tv_sec) * 1_000_000 + i128::from(ts.tv_nsec) / 1_000;
    notify(&format!("RELOADING=1\nMONOTONIC_USEC={usec}"));
}

/// A status line only.
pub fn status(status: &str) {
    notify(&format!("STATUS={}", one_line(status)));
}

fn one_line(s: &str) -> String {
    s.replace('\n', " ")
}

/// One datagram to `socket` (a path or `@abstract`).
fn send(socket: &str, state: &str) -> std::io::Result<()> {
    use std::io::{Error, ErrorKind};
    if state.len() > MAX_MESSAGE {
        return Err(Error::new(ErrorKind::InvalidInput, "message too long"));
    }
    let sock = UnixDatagram::unbound()?;
    match socket.strip_prefix('@') {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
            sock.send_to_addr(state.as_bytes(), &addr)?;
        }
        None if socket.starts_with('/') => {
            sock.send_to(state.as_bytes(), socket)?;
        }
        None => {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                "neither a path nor @name",
            ))
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_reaches_a_path_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let server = UnixDatagram::bind(&path).unwrap();
        send(path.to_str().unwrap(), "READY=1\nSTATUS=serving").unwrap();
        let mut buf = [0u8; 256];
        let n = server.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1\nSTATUS=serving");
    }

    #[test]
    fn a_message_reaches_an_abstract_socket() {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("sluice-notify-test-{}", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let server = UnixDatagram::bind_addr(&addr).unwrap();
        send(&format!("@{name}"), "STOPPING=1").unwrap();
        let mut buf = [0u8; 64];
        let n = server.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"STOPPING=1");
    }

    #[test]
    fn a_relative_name_is_refused() {
        assert!(send("relative/path", "READY=1").is_err());
    }
}
