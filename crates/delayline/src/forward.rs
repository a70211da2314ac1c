//! One direction of one link: read packets from the input TUN, let the shaper decide
//! (drop, or due when), hold them in the ring, write them to the output TUN when due.
//! One thread, no allocation per packet, no locks: ppoll sleeps until the next packet is
//! due or one arrives.

use crate::ring::Ring;
use crate::shaper::{Shaper, Verdict};
use crate::tun::VNET_HDR_BYTES;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

/// The largest packet read or written: the virtio header and 64 KiB of IP.
pub const PACKET_BYTES_MAX: usize = VNET_HDR_BYTES + 65_536;
/// Packets read per wake-up before the due ones are sent again.
const READ_BURST: usize = 64;
/// Longest sleep, so that a stop request is seen.
const IDLE_NS: u64 = 100_000_000;

/// Counters of one direction (written by its thread only; read at exit).
#[derive(Default)]
pub struct Stats {
    pub packets_in: AtomicU64,
    pub wire_bytes_in: AtomicU64,
    pub packets_out: AtomicU64,
    pub wire_bytes_out: AtomicU64,
    pub lost: AtomicU64,
    pub queue_full: AtomicU64,
    pub ring_full: AtomicU64,
    pub write_errors: AtomicU64,
    pub ring_peak_bytes: AtomicU64,
}

/// Everything one direction owns.
pub struct Direction {
    pub input: RawFd,
    pub output: RawFd,
    pub shaper: Shaper,
    pub ring: Ring,
    pub scratch: Vec<u8>,
}

/// The monotonic clock in ns.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

/// Wake-ups within a microsecond of the due time (not the default 50 us) and, when asked,
/// real-time priority, so that a busy machine does not hold packets past their due time.
/// An error here is reported and the forwarder goes on at normal priority.
pub fn tune_thread(realtime: bool) -> Result<(), std::io::Error> {
    // SAFETY: prctl with PR_SET_TIMERSLACK only changes this thread's timer slack.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong) };
    if !realtime {
        return Ok(());
    }
    let param = libc::sched_param { sched_priority: 10 };
    // SAFETY: this thread's handle and a valid sched_param.
    let rc = unsafe { libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_FIFO, &param) };
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Runs until `stop` is set.
pub fn run(mut d: Direction, stats: &Stats, stop: &AtomicBool) {
    while !stop.load(Relaxed) {
        let now = now_ns();
        send_due(&mut d, stats, now);
        let wait_ns = d
            .ring
            .front()
            .map_or(IDLE_NS, |(due, _)| due.saturating_sub(now).min(IDLE_NS));
        if wait_ns > 0 && !wait_readable(d.input, wait_ns) {
            continue;
        }
        read_burst(&mut d, stats);
    }
}

fn send_due(d: &mut Direction, stats: &Stats, now: u64) {
    while let Some((due, packet)) = d.ring.front() {
        if due > now {
            break;
        }
        // SAFETY: packet is a live slice of the ring; output is an open TUN fd.
        let n = unsafe { libc::write(d.output, packet.as_ptr().cast(), packet.len()) };
        if usize::try_from(n).ok() == Some(packet.len()) {
            let (wire, _) = wire_size(packet);
            stats.packets_out.fetch_add(1, Relaxed);
            stats.wire_bytes_out.fetch_add(wire, Relaxed);
        } else {
            stats.write_errors.fetch_add(1, Relaxed);
        }
        d.ring.pop();
    }
}

/// Sleeps until `fd` is readable or `wait_ns` passed; true when readable.
fn wait_readable(fd: RawFd, wait_ns: u64) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: libc::time_t::try_from(wait_ns / 1_000_000_000).unwrap_or(0),
        tv_nsec: libc::c_long::try_from(wait_ns % 1_000_000_000).unwrap_or(0),
    };
    // SAFETY: one valid pollfd, a valid timeout, no signal mask change.
    let r = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
    r > 0 && pfd.revents & libc::POLLIN != 0
}

fn read_burst(d: &mut Direction, stats: &Stats) {
    for _ in 0..READ_BURST {
        let (buf, in_ring) = match d.ring.reserve() {
            Some(slot) => (slot, true),
            None => (&mut d.scratch[..], false),
        };
        // SAFETY: buf is a writable slice of PACKET_BYTES_MAX bytes; input is a TUN fd.
        let n = unsafe { libc::read(d.input, buf.as_mut_ptr().cast(), buf.len()) };
        let Ok(len) = usize::try_from(n) else { return }; // EAGAIN: drained
        let (wire, segments) = wire_size(&buf[..len]);
        stats.packets_in.fetch_add(1, Relaxed);
        stats.wire_bytes_in.fetch_add(wire, Relaxed);
        if !in_ring {
            stats.ring_full.fetch_add(1, Relaxed);
            continue;
        }
        match d.shaper.admit(now_ns(), wire, segments) {
            Verdict::Due(t) => d.ring.commit(len, t),
            Verdict::QueueFull => drop(stats.queue_full.fetch_add(1, Relaxed)),
            Verdict::Lost => drop(stats.lost.fetch_add(1, Relaxed)),
        }
        let used = d.ring.used_bytes() as u64;
        if used > stats.ring_peak_bytes.load(Relaxed) {
            stats.ring_peak_bytes.store(used, Relaxed);
        }
    }
}

/// IP bytes on the wire and segments of one packet as read (virtio header first): a TSO
/// super-packet of n segments counts n headers.
pub fn wire_size(packet: &[u8]) -> (u64, u32) {
    let Some(ip) = packet.get(VNET_HDR_BYTES..) else {
        return (0, 1);
    };
    let ip_bytes = ip.len() as u64;
    let gso_type = packet[1] & 0x7f;
    let gso_size = u64::from(u16::from_ne_bytes([packet[4], packet[5]]));
    if gso_type == 0 || gso_size == 0 || ip.is_empty() {
        return (ip_bytes, 1);
    }
    let ip_hdr = match ip[0] >> 4 {
        4 => usize::from(ip[0] & 0x0f) * 4,
        6 => 40,
        _ => return (ip_bytes, 1),
    };
    let Some(&offset_byte) = ip.get(ip_hdr + 12) else {
        return (ip_bytes, 1);
    };
    let headers = (ip_hdr + usize::from(offset_byte >> 4) * 4) as u64;
    let payload = ip_bytes.saturating_sub(headers);
    let segments = payload.div_ceil(gso_size).max(1);
    (
        ip_bytes + (segments - 1) * headers,
        u32::try_from(segments).unwrap_or(u32::MAX),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(gso_type: u8, gso_size: u16, ip_len: usize) -> Vec<u8> {
        let mut p = vec![0u8; VNET_HDR_BYTES + ip_len];
        p[1] = gso_type;
        p[4..6].copy_from_slice(&gso_size.to_ne_bytes());
        p[VNET_HDR_BYTES] = 0x45; // IPv4, 20-byte header
        p[VNET_HDR_BYTES + 20 + 12] = 8 << 4; // TCP header of 32 bytes
        p
    }

    #[test]
    fn a_super_packet_counts_every_segment_header() {
        // 52 bytes of headers + 10 x 1448 of payload: 10 segments of 1500 bytes on the wire
        assert_eq!(wire_size(&packet(1, 1448, 52 + 14_480)), (15_000, 10));
        // one byte more is an eleventh segment
        assert_eq!(wire_size(&packet(1, 1448, 52 + 14_481)), (15_053, 11));
        // the ECN bit of gso_type does not matter
        assert_eq!(wire_size(&packet(0x81, 1448, 52 + 14_480)), (15_000, 10));
        // a plain packet is itself
        assert_eq!(wire_size(&packet(0, 0, 1500)), (1500, 1));
        assert_eq!(wire_size(&[0u8; 4]), (0, 1));
    }
}
