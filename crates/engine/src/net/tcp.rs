//! TCP below the frames: the kernel's view of a connection (`TCP_INFO`), the congestion
//! control chosen per socket, and socket buffers sized to the path.
//!
//! Linux grows a socket's buffers by itself (autotuning) up to `net.ipv4.tcp_rmem` /
//! `tcp_wmem`'s maximum, but only while the application has not set them: an explicit
//! `SO_SNDBUF`/`SO_RCVBUF` locks the size, and it is capped at `net.core.[rw]mem_max`
//! unless the process may force it (`CAP_NET_ADMIN`: `SO_SNDBUFFORCE`). A long fat path
//! needs a window of its bandwidth-delay product, which the defaults of most distributions
//! (4-6 MiB) do not reach beyond a few tens of milliseconds at 1 Gbit/s. [`size_buffers`]
//! sets exactly what [`super::path`] planned, forcing it past the `*mem_max` cap when
//! allowed, and reports what the kernel granted.

use std::io;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::OnceLock;
use std::time::Duration;

/// What the kernel knows of one connection, from `TCP_INFO`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct TcpFigures {
    /// Smoothed round-trip time, µs.
    pub rtt_us: u32,
    /// Smallest round-trip time seen, µs (the path's own delay, without queueing).
    pub min_rtt_us: u32,
    /// Segments retransmitted over the connection's life.
    pub retransmits: u32,
    /// Bytes sent, retransmissions included.
    pub bytes_sent: u64,
    /// Bytes retransmitted.
    pub bytes_retrans: u64,
    /// Bytes the peer acknowledged.
    pub bytes_acked: u64,
    /// Bytes received.
    pub bytes_received: u64,
    /// The kernel's latest delivery-rate sample, bytes/s.
    pub delivery_rate: u64,
    /// Congestion window, segments.
    pub snd_cwnd: u32,
    /// Milliseconds since payload bytes last arrived (the daemon's idle timeout).
    pub last_data_recv_ms: u32,
}

/// The connection's `TCP_INFO`, or `None` where the kernel gives none.
pub fn figures(stream: &TcpStream) -> Option<TcpFigures> {
    let info = tcp_info(stream)?;
    Some(TcpFigures {
        rtt_us: info.tcpi_rtt,
        min_rtt_us: info.tcpi_min_rtt,
        retransmits: info.tcpi_total_retrans,
        bytes_sent: info.tcpi_bytes_sent,
        bytes_retrans: info.tcpi_bytes_retrans,
        bytes_acked: info.tcpi_bytes_acked,
        bytes_received: info.tcpi_bytes_received,
        delivery_rate: info.tcpi_delivery_rate,
        snd_cwnd: info.tcpi_snd_cwnd,
        last_data_recv_ms: info.tcpi_last_data_recv,
    })
}

/// What a sending connection still has to send, and how fast it sends now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backlog {
    /// Bytes written to the socket and not yet sent (`tcpi_notsent_bytes`).
    pub unsent: u64,
    /// The rate the kernel paces the connection at, bytes/s (`tcpi_pacing_rate`: the
    /// congestion control's estimate of its share of the path, within
    /// `SO_MAX_PACING_RATE`).
    pub rate: u64,
}

/// The connection's [`Backlog`] now, or `None` where the kernel gives no `TCP_INFO`.
pub fn backlog(stream: &TcpStream) -> Option<Backlog> {
    let info = tcp_info(stream)?;
    Some(Backlog {
        unsent: u64::from(info.tcpi_notsent_bytes),
        rate: info.tcpi_pacing_rate,
    })
}

fn tcp_info(stream: &TcpStream) -> Option<libc::tcp_info> {
    // SAFETY: tcp_info is plain old data; all-zero is a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = libc::socklen_t::try_from(std::mem::size_of::<libc::tcp_info>()).ok()?;
    // SAFETY: the fd is a live TCP socket owned by `stream`; `info` and `len` are valid
    // for writes of `len` bytes, and the kernel writes at most that many.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            std::ptr::addr_of_mut!(info).cast(),
            &mut len,
        )
    };
    (rc == 0).then_some(info)
}

/// The path's round-trip time as the kernel measured it on `stream` (its minimum, else
/// the smoothed value), or `None` before any sample.
pub fn rtt(stream: &TcpStream) -> Option<Duration> {
    let f = figures(stream)?;
    let us = if f.min_rtt_us > 0 && f.min_rtt_us != u32::MAX {
        f.min_rtt_us
    } else {
        f.rtt_us
    };
    (us > 0).then(|| Duration::from_micros(u64::from(us)))
}

/// Congestion controls in order of preference for bulk transfers over long paths
/// (ESnet's DTN guidance: BBR, else H-TCP, else the kernel's CUBIC).
const PREFERRED: [&str; 3] = ["bbr", "htcp", "cubic"];

/// The best congestion control this kernel offers, read once.
pub fn best_congestion() -> Option<&'static str> {
    static BEST: OnceLock<Option<&'static str>> = OnceLock::new();
    *BEST.get_or_init(|| {
        let offered =
            std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
                .unwrap_or_default();
        pick_congestion(&offered)
    })
}

/// The first of the preferred controls (BBR, H-TCP, CUBIC) in the kernel's list `offered` (space-separated).
pub fn pick_congestion(offered: &str) -> Option<&'static str> {
    let names: Vec<&str> = offered.split_whitespace().collect();
    PREFERRED.into_iter().find(|p| names.contains(p))
}

/// Sets the congestion control of `stream` (per socket; the system default is left
/// alone).
///
/// # Errors
/// The kernel refused (not offered, or not allowed to this process).
pub fn set_congestion(stream: &TcpStream, name: &str) -> io::Result<()> {
    // SAFETY: the fd is live; the name is a valid buffer of its length.
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr().cast(),
            libc::socklen_t::try_from(name.len()).unwrap_or(0),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The congestion control `stream` uses.
pub fn congestion_of(stream: &TcpStream) -> Option<String> {
    let mut buf = [0u8; 16];
    let mut len = libc::socklen_t::try_from(buf.len()).ok()?;
    // SAFETY: the fd is live; `buf` is valid for writes of `len` bytes.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            buf.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return None;
    }
    let name = &buf[..usize::try_from(len).unwrap_or(0).min(buf.len())];
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    Some(String::from_utf8_lossy(&name[..end]).into_owned())
}

/// Sets how many bytes not yet sent `stream` may queue (`TCP_NOTSENT_LOWAT`): a writer
/// blocks above it, whatever room the send buffer has.
///
/// # Errors
/// The kernel refused.
pub fn set_notsent_lowat(stream: &TcpStream, bytes: u32) -> io::Result<()> {
    let bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
    set_int(
        stream.as_raw_fd(),
        libc::IPPROTO_TCP,
        libc::TCP_NOTSENT_LOWAT,
        bytes,
    )
}

/// The `TCP_NOTSENT_LOWAT` of `stream`.
pub fn notsent_lowat(stream: &TcpStream) -> Option<u32> {
    get_int(
        stream.as_raw_fd(),
        libc::IPPROTO_TCP,
        libc::TCP_NOTSENT_LOWAT,
    )
    .ok()
    .and_then(|v| u32::try_from(v).ok())
}

/// Caps the rate the kernel paces `stream` at (`SO_MAX_PACING_RATE`), bytes/s. It also
/// turns the kernel's own pacing on where the congestion control does not ask for it.
///
/// # Errors
/// The kernel refused.
pub fn set_max_pacing_rate(stream: &TcpStream, bytes_per_sec: u64) -> io::Result<()> {
    let v: u64 = bytes_per_sec;
    // SAFETY: the fd is live; `v` is a valid u64 for the call's duration (the kernel
    // takes the option as an unsigned long where the length says so).
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MAX_PACING_RATE,
            std::ptr::addr_of!(v).cast(),
            libc::socklen_t::try_from(std::mem::size_of::<u64>()).unwrap_or(8),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The pacing cap of `stream`, bytes/s (`u64::MAX`: none).
pub fn max_pacing_rate(stream: &TcpStream) -> Option<u64> {
    let mut v: u64 = 0;
    let mut len = libc::socklen_t::try_from(std::mem::size_of::<u64>()).unwrap_or(8);
    // SAFETY: the fd is live; `v` and `len` are valid for writes of their sizes.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MAX_PACING_RATE,
            std::ptr::addr_of_mut!(v).cast(),
            &mut len,
        )
    };
    (rc == 0).then_some(v)
}

/// What [`size_buffers`] got from the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Granted {
    /// The send buffer the kernel reports (it doubles what was asked, for its overhead).
    pub send: usize,
    /// The receive buffer.
    pub recv: usize,
    /// Whether the size was forced past `net.core.[rw]mem_max`.
    pub forced: bool,
}

/// Sets both socket buffers of `stream` to `bytes`, past the `*mem_max` cap where this
/// process may (`SO_*BUFFORCE`), else within it, or leaves a direction to the kernel's
/// autotuning where that grows further than the cap allows.
///
/// # Errors
/// The kernel refused even the capped size.
pub fn size_buffers(stream: &TcpStream, bytes: usize) -> io::Result<Granted> {
    let fd = stream.as_raw_fd();
    let forced = set_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, bytes).is_ok()
        && set_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, bytes).is_ok();
    if !forced {
        // An explicit size is capped at net.core.*mem_max and stops the kernel's
        // autotuning, which may grow a buffer further (tcp_*mem's maximum): a direction
        // is set only where the cap gives more than autotuning would.
        let dirs = [
            (libc::SO_SNDBUF, "core/wmem_max", "ipv4/tcp_wmem"),
            (libc::SO_RCVBUF, "core/rmem_max", "ipv4/tcp_rmem"),
        ];
        for (opt, cap, auto) in dirs {
            let capped = bytes.min(sysctl_last(cap).unwrap_or(usize::MAX));
            if sysctl_last(auto).unwrap_or(0) < capped.saturating_mul(2) {
                set_int(fd, libc::SOL_SOCKET, opt, bytes)?;
            }
        }
    }
    Ok(Granted {
        send: get_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUF)?,
        recv: get_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF)?,
        forced,
    })
}

/// The last number of `/proc/sys/net/NAME` (the maximum of `tcp_rmem`'s three).
fn sysctl_last(name: &str) -> Option<usize> {
    let text = std::fs::read_to_string(format!("/proc/sys/net/{name}")).ok()?;
    text.split_whitespace().last()?.parse().ok()
}

/// Sets an integer socket option `opt` at `level`.
fn set_int(fd: i32, level: libc::c_int, opt: libc::c_int, value: usize) -> io::Result<()> {
    let v = libc::c_int::try_from(value).unwrap_or(libc::c_int::MAX);
    // SAFETY: the fd is live; `v` is a valid c_int for the call's duration.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            std::ptr::addr_of!(v).cast(),
            libc::socklen_t::try_from(std::mem::size_of::<libc::c_int>()).unwrap_or(4),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Reads an integer socket option `opt` at `level`.
fn get_int(fd: i32, level: libc::c_int, opt: libc::c_int) -> io::Result<usize> {
    let mut v: libc::c_int = 0;
    let mut len = libc::socklen_t::try_from(std::mem::size_of::<libc::c_int>()).unwrap_or(4);
    // SAFETY: the fd is live; `v` and `len` are valid for writes.
    let rc =
        unsafe { libc::getsockopt(fd, level, opt, std::ptr::addr_of_mut!(v).cast(), &mut len) };
    if rc == 0 {
        Ok(usize::try_from(v).unwrap_or(0))
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testing::tcp_pair as pair;

    #[test]
    fn the_preferred_congestion_control_is_bbr_then_htcp_then_cubic() {
        assert_eq!(pick_congestion("reno bbr cubic"), Some("bbr"));
        assert_eq!(pick_congestion("reno cubic htcp"), Some("htcp"));
        assert_eq!(pick_congestion("reno cubic"), Some("cubic"));
        assert_eq!(pick_congestion("reno"), None);
        assert_eq!(pick_congestion(""), None);
    }

    #[test]
    fn a_socket_takes_the_best_congestion_control_and_reports_its_figures() {
        let (mut c, mut s) = pair();
        if let Some(best) = best_congestion() {
            set_congestion(&c, best).unwrap();
            assert_eq!(congestion_of(&c).as_deref(), Some(best));
        } else {
            eprintln!("SKIP: this kernel lists no congestion control we prefer");
        }
        assert!(set_congestion(&c, "no-such-cc").is_err());
        use std::io::{Read, Write};
        c.write_all(&[7; 100_000]).unwrap();
        let mut buf = vec![0; 100_000];
        s.read_exact(&mut buf).unwrap();
        let f = figures(&c).expect("TCP_INFO on Linux");
        assert!(f.bytes_sent >= 100_000, "{f:?}");
        assert_eq!(figures(&s).unwrap().bytes_received, 100_000);
        assert!(rtt(&c).is_some(), "loopback has an RTT sample after data");
    }

    #[test]
    fn the_backlog_counts_what_the_peer_has_not_taken() {
        let (mut c, s) = pair();
        let idle = backlog(&c).expect("TCP_INFO on Linux");
        assert_eq!(idle.unsent, 0, "{idle:?}");
        assert!(idle.rate > 0, "{idle:?}");
        // The peer reads nothing: once its window is full, what follows stays unsent.
        let written = crate::testing::fill_until_blocked(&mut c);
        let full = backlog(&c).unwrap();
        assert!(
            full.unsent > 0 && full.unsent <= written,
            "{full:?} of {written}"
        );
        drop(s);
    }

    #[test]
    fn buffers_are_set_and_the_kernel_reports_what_it_granted() {
        let (c, _s) = pair();
        let g = size_buffers(&c, 1 << 20).unwrap();
        // The kernel doubles the request for its bookkeeping.
        assert!(g.send >= 1 << 20 && g.recv >= 1 << 20, "{g:?}");
    }

    #[test]
    fn a_pacing_cap_is_set_and_read_back() {
        let (c, _s) = pair();
        assert_eq!(
            max_pacing_rate(&c),
            Some(u64::MAX),
            "no cap on a new socket"
        );
        set_max_pacing_rate(&c, 62_500_000).unwrap();
        assert_eq!(max_pacing_rate(&c), Some(62_500_000));
    }
}
