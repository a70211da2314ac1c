//! The daemon's memory under 1,000 connections that send nothing and 1,000 that
//! trickle a byte a second, with the per-address limit raised (all are served) and at
//! its default (most are refused); a real transfer from another address succeeds
//! meanwhile.
//!
//! The bound: every connection waiting for its handshake costs its thread's touched
//! stack (a 256 KiB stack, of which a few pages are used), its read buffers and the
//! kernel's socket (not in the daemon's RSS). 2,000 of them must stay under 64 MiB
//! above the daemon's RSS before them (its buffer pools already counted there): 32 KiB
//! each.

use super::limits::hello_bytes;
use super::netns::until;
use super::*;
use std::os::fd::FromRawFd;

/// Extra RSS allowed for 2,000 waiting connections.
const BOUND_KIB: u64 = 64 << 10;
const IDLE: usize = 1000;
const TRICKLE: usize = 1000;

fn proc_field(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn rss_kib(pid: u32) -> u64 {
    proc_field(pid, "VmRSS:")
}

fn threads(pid: u32) -> u64 {
    proc_field(pid, "Threads:")
}

fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: the struct outlives the calls.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        lim.rlim_cur = lim.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
    }
    assert!(
        lim.rlim_cur >= 4 * (IDLE + TRICKLE) as u64,
        "need more descriptors: {}",
        lim.rlim_cur
    );
}

/// A connection to `to` from 127.0.0.2 (another client than `sluice cp`'s 127.0.0.1).
fn connect_from_2(to: SocketAddr) -> std::io::Result<TcpStream> {
    let SocketAddr::V4(to) = to else {
        panic!("IPv4 expected")
    };
    let sa = |ip: [u8; 4], port: u16| libc::sockaddr_in {
        sin_family: libc::sa_family_t::try_from(libc::AF_INET).expect("AF_INET fits"),
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes(ip),
        },
        sin_zero: [0; 8],
    };
    let len = libc::socklen_t::try_from(std::mem::size_of::<libc::sockaddr_in>()).expect("fits");
    // SAFETY: plain socket calls on a descriptor owned here (wrapped in TcpStream,
    // which closes it, as soon as it exists).
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let stream = TcpStream::from_raw_fd(fd);
        let local = sa([127, 0, 0, 2], 0);
        if libc::bind(fd, std::ptr::addr_of!(local).cast(), len) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let remote = sa(to.ip().octets(), to.port());
        if libc::connect(fd, std::ptr::addr_of!(remote).cast(), len) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(stream)
    }
}

/// What one flood measured.
#[derive(Debug)]
struct Flood {
    before_kib: u64,
    during_kib: u64,
    served: usize,
    refused: usize,
}

/// Opens the idle and trickling connections against `d`, measures, runs a real copy
/// meanwhile, then closes them.
fn flood(d: &Daemon, site: &Site, expect_all: bool) -> Flood {
    let pid = d.child.0.id();
    let addr: SocketAddr = d.addr.parse().unwrap();
    // Warm the daemon's session path up first (its pools and first session).
    let src = site.path("warm.txt");
    std::fs::write(&src, vec![7u8; 1 << 20]).unwrap();
    assert_ok(&cp(&[s(&src), &d.url("warm.txt")], None));
    std::thread::sleep(Duration::from_millis(300));
    let before_kib = rss_kib(pid);
    let base_threads = threads(pid);
    let mut socks: Vec<TcpStream> = (0..IDLE + TRICKLE)
        .map(|_| connect_from_2(addr).expect("a connection"))
        .collect();
    let hello = hello_bytes();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let trickle: Vec<TcpStream> = socks[IDLE..]
        .iter()
        .map(|t| t.try_clone().unwrap())
        .collect();
    let stop2 = std::sync::Arc::clone(&stop);
    let trickler = std::thread::spawn(move || {
        let mut trickle = trickle;
        let mut i = 0;
        while !stop2.load(std::sync::atomic::Ordering::SeqCst) && i < hello.len() {
            for t in &mut trickle {
                let _ = t.write(&hello[i..=i]);
            }
            i += 1;
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    if expect_all {
        let want = base_threads + (IDLE + TRICKLE) as u64;
        until(Duration::from_secs(60), "every connection served", || {
            threads(pid) >= want
        });
    } else {
        std::thread::sleep(Duration::from_secs(3));
    }
    std::thread::sleep(Duration::from_secs(2));
    let during_kib = rss_kib(pid);
    let served = usize::try_from(threads(pid).saturating_sub(base_threads)).unwrap_or(0);
    // Meanwhile a real transfer from 127.0.0.1 succeeds.
    let data = site.path("real.bin");
    std::fs::write(&data, vec![42u8; 4 << 20]).unwrap();
    assert_ok(&cp(&[s(&data), &d.url("real.bin")], None));
    assert_eq!(
        std::fs::read(site.path("a/real.bin")).unwrap().len(),
        4 << 20
    );
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let _ = trickler.join();
    let refused = count_refused(&mut socks);
    Flood {
        before_kib,
        during_kib,
        served,
        refused,
    }
}

/// How many of `socks` the daemon has closed: those refused at once (answered `Busy`;
/// a trickled byte that reached one after it closed may have reset it) and any past
/// their handshake deadline.
fn count_refused(socks: &mut [TcpStream]) -> usize {
    let mut n = 0;
    for sock in socks.iter_mut() {
        sock.set_nonblocking(true).unwrap();
        let mut b = [0u8; 256];
        match sock.read(&mut b) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            _ => n += 1,
        }
    }
    n
}

#[test]
fn memory_stays_bounded_under_idle_and_slowloris_connections() {
    raise_fd_limit();
    let site = Site::new();
    let root = site.root("a");
    let raised = Daemon::start_with(
        &root,
        &[
            "--max-per-address",
            "5000",
            "--max-connections",
            "5000",
            "--handshake-timeout",
            "300",
        ],
        &[],
    );
    let all = flood(&raised, &site, true);
    drop(raised);
    let default = Daemon::start_with(&root, &["--max-connections", "5000"], &[]);
    let limited = flood(&default, &site, false);
    let report = format!(
        "RSS with --max-per-address 5000: {} KiB before, {} KiB with {} waiting connections (+{} KiB, {} B each); \
         at the default 32: {} KiB before, {} KiB during (+{} KiB), {} closed by the daemon (refused Busy, or the 32 served cut at the handshake deadline)\n",
        all.before_kib,
        all.during_kib,
        all.served,
        all.during_kib.saturating_sub(all.before_kib),
        (all.during_kib.saturating_sub(all.before_kib) << 10) / (all.served.max(1) as u64),
        limited.before_kib,
        limited.during_kib,
        limited.during_kib.saturating_sub(limited.before_kib),
        limited.refused,
    );
    eprint!("{report}");
    let _ = std::fs::write(std::env::temp_dir().join("sluice-rss-report.txt"), &report);
    assert!(all.served >= IDLE + TRICKLE, "{all:?}");
    assert!(all.during_kib <= all.before_kib + BOUND_KIB, "{report}");
    assert!(
        limited.during_kib <= limited.before_kib + BOUND_KIB,
        "{report}"
    );
    assert!(limited.refused >= IDLE + TRICKLE - 32, "{limited:?}");
}
