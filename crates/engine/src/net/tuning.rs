//! A session's data connections tuned to the path, without flags (issue 15): once the
//! control connection is up (its handshake took several round trips, so the kernel has
//! RTT samples), each side reads the round-trip time from `TCP_INFO`, the link rate of
//! the NIC the connection leaves through (where sysfs knows it), and sizes every data
//! connection's socket buffers with [`path::plan`]; every data connection uses the best
//! congestion control the kernel offers ([`tcp::best_congestion`], per socket). At the
//! end, each data connection's `TCP_INFO` goes into the summary ([`NetworkReport`]).
//!
//! The memory cap: the kernel's socket buffers are counted against `--buffer-mem`'s
//! value (the pools' total) as a network share of the same size; each connection still
//! gets at least [`path::FLOOR_SOCKET_BYTES`] (what sluice always used), and when the
//! path needs more than the share the plan says so and names `--buffer-mem`.

use super::path::{self, PathFacts, PathPlan};
use super::tcp::{self, TcpFigures};
use super::tls::Link;
use serde::Serialize;
use std::net::{IpAddr, TcpStream};
use std::time::Duration;

/// Bytes a data connection's send buffer holds beyond those in flight: the sender
/// blocks above it (`TCP_NOTSENT_LOWAT`), so kernel memory follows the path's window, not
/// the buffer's size, and a killed sender leaves little queued behind it. 8 MiB: two
/// chunks, 6.7 ms at 10 Gbit/s.
pub const NOTSENT_LOWAT_BYTES: u32 = 8 << 20;

/// The round-trip time from which data connections are paced at their NIC's share
/// ([`pacing_caps`]): a path long enough for BBR's start-up to overrun a link's queue.
pub const PACE_FROM_RTT: Duration = Duration::from_millis(1);

/// How this side tunes a session's data connections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tuning {
    /// The control connection's round-trip time (zero where the kernel had no sample).
    pub rtt: Duration,
    /// The link rate of the NIC the control connection uses, bits/s, where known.
    pub link_bits: Option<u64>,
    /// The buffers each data connection gets, and why.
    pub plan: PathPlan,
    /// The congestion control every data connection uses (None: the kernel's default).
    pub congestion: Option<&'static str>,
    /// What the kernel did not grant, where it capped the buffers (this process may not
    /// force them past `net.core.[rw]mem_max`).
    pub kernel_note: Option<String>,
    /// The lowest pacing cap a data connection got, bytes/s (its NIC's rate shared by
    /// the connections through it); `None` where no NIC reported its rate.
    pub pacing: Option<u64>,
    /// Why the session has the connections it has, where this side chose them for the
    /// path (it goes first in [`Tuning::reason`]).
    pub streams_note: Option<String>,
}

/// Decides the tuning of `streams` data connections from the control connection
/// `control`, within `cap_bytes` of kernel socket memory.
pub fn decide(control: &TcpStream, streams: u16, cap_bytes: u64) -> Tuning {
    let rtt = tcp::rtt(control).unwrap_or(Duration::ZERO);
    let link_bits = control.local_addr().ok().and_then(|a| link_bits_of(a.ip()));
    let plan = path::plan(&PathFacts {
        rtt,
        link_bits,
        streams: streams.max(1),
        cap_bytes,
    });
    Tuning {
        rtt,
        link_bits,
        plan,
        congestion: tcp::best_congestion(),
        kernel_note: None,
        pacing: None,
        streams_note: None,
    }
}

impl Tuning {
    /// Sizes one data connection's buffers and sets its congestion control. A refusal
    /// costs speed, not correctness: it is logged and the connection keeps the kernel's
    /// choice.
    pub fn apply(&self, s: &TcpStream) -> Option<tcp::Granted> {
        let bytes = usize::try_from(self.plan.socket_bytes).unwrap_or(usize::MAX);
        let granted = tcp::size_buffers(s, bytes)
            .inspect_err(|e| tracing::warn!("data connection buffers of {bytes} bytes: {e}"))
            .ok();
        // Sized to the path, a send buffer could queue its whole size of data the
        // network has not taken yet; only what is in flight needs it.
        if let Err(e) = tcp::set_notsent_lowat(s, NOTSENT_LOWAT_BYTES) {
            tracing::warn!("TCP_NOTSENT_LOWAT refused on a data connection: {e}");
        }
        if let Some(cc) = self.congestion {
            if let Err(e) = tcp::set_congestion(s, cc) {
                tracing::warn!("congestion control {cc} refused on a data connection: {e}");
            }
        }
        granted
    }

    /// Notes what the kernel granted a data connection, where it is less than asked (the
    /// kernel reports twice the size it was asked for).
    fn note_granted(&mut self, g: &tcp::Granted) {
        let asked = usize::try_from(self.plan.socket_bytes).unwrap_or(usize::MAX);
        if g.forced || g.send >= asked.saturating_mul(2) {
            return;
        }
        self.kernel_note = Some(format!(
            "the kernel let this process have {} KiB of send buffer (net.core.wmem_max; CAP_NET_ADMIN lifts it)",
            g.send >> 10
        ));
    }

    /// The one-line sentence of the human summary and the `--json` `reason`.
    pub fn reason(&self) -> String {
        let cc = self.congestion.unwrap_or("the kernel's default");
        let paced = match self.pacing {
            Some(b) => format!(
                ", paced at most {} Mbit/s each (the NIC's rate shared)",
                b * 8 / 1_000_000
            ),
            None => String::new(),
        };
        let chosen = self
            .streams_note
            .as_ref()
            .map_or(String::new(), |note| format!("{note}; "));
        let kernel = self
            .kernel_note
            .as_ref()
            .map_or(String::new(), |note| format!("; {note}"));
        format!(
            "{chosen}{}{kernel}; congestion control {cc}{paced}",
            self.plan.reason
        )
    }
}

/// One data connection at the end of a session, from `TCP_INFO`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConnectionReport {
    /// Bytes this side sent (each once: retransmissions not counted) or received,
    /// whichever is larger: the connection's payload, whichever way it went.
    pub bytes: u64,
    /// Segments retransmitted.
    pub retransmits: u32,
    /// Smoothed round-trip time at the end, ms.
    pub rtt_ms: f64,
    /// The kernel's last delivery-rate sample, bits/s (0 on the receiving side).
    pub rate: u64,
    /// Congestion window at the end, segments.
    pub cwnd: u32,
}

impl ConnectionReport {
    /// The report of one connection's figures.
    pub fn of(f: &TcpFigures) -> ConnectionReport {
        ConnectionReport {
            bytes: f
                .bytes_sent
                .saturating_sub(f.bytes_retrans)
                .max(f.bytes_received),
            retransmits: f.retransmits,
            rtt_ms: f64::from(f.rtt_us) / 1e3,
            rate: f.delivery_rate.saturating_mul(8),
            cwnd: f.snd_cwnd,
        }
    }
}

/// The `network` object of the `--json` summary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NetworkReport {
    /// The control connection's round-trip time when the session opened, ms.
    pub rtt_ms: f64,
    /// The congestion control of the data connections.
    pub congestion: String,
    /// Socket buffer bytes asked for on each data connection.
    pub socket_bytes: u64,
    /// The path's bandwidth-delay product, bytes.
    pub bdp_bytes: u64,
    /// The link rate the plan used, bits/s, and whether it was assumed.
    pub link_bits: u64,
    /// Whether the link rate was assumed (the NIC did not say: veth, tun).
    pub link_assumed: bool,
    /// Whether `--buffer-mem` kept the buffers below what the path needs.
    pub capped: bool,
    /// One sentence: why these buffers.
    pub reason: String,
    /// Each data connection at the end, in stream order.
    pub connections: Vec<ConnectionReport>,
}

impl NetworkReport {
    /// The report of `t`, with the data connections' figures at the end.
    pub fn new(t: &Tuning, connections: Vec<ConnectionReport>) -> NetworkReport {
        NetworkReport {
            rtt_ms: t.rtt.as_secs_f64() * 1e3,
            congestion: t.congestion.unwrap_or("default").to_string(),
            socket_bytes: t.plan.socket_bytes,
            bdp_bytes: t.plan.bdp_bytes,
            link_bits: t.link_bits.unwrap_or(path::ASSUMED_LINK_BITS),
            link_assumed: t.link_bits.is_none(),
            capped: t.plan.capped,
            reason: t.reason(),
            connections,
        }
    }

    /// Retransmitted segments over every data connection.
    pub fn retransmits(&self) -> u64 {
        self.connections
            .iter()
            .map(|c| u64::from(c.retransmits))
            .sum()
    }
}

/// Tunes a session's data connections `data` to the path measured on `control`, within
/// `cap_bytes`; returns the tuning and a handle of each data socket, for its figures at
/// the end ([`final_figures`]).
pub fn tune_session(control: &Link, data: &[Link], cap_bytes: u64) -> (Tuning, Vec<TcpStream>) {
    let streams = u16::try_from(data.len()).unwrap_or(u16::MAX);
    let mut t = decide(control.stream(), streams, cap_bytes);
    let granted: Vec<tcp::Granted> = data.iter().filter_map(|d| t.apply(d.stream())).collect();
    if let Some(g) = granted.first() {
        t.note_granted(g);
    }
    // On a LAN start-up cannot overrun anything, and a virtual NIC's rate (veth says
    // 10 Gbit/s) is no limit there: sluice moves more over veth.
    t.pacing = (t.rtt >= PACE_FROM_RTT).then(|| pace(data)).flatten();
    tracing::info!("{}", t.reason());
    let handles = data
        .iter()
        .filter_map(|d| d.stream().try_clone().ok())
        .collect();
    (t, handles)
}

/// Paces every data connection of `data` at most at its share of the link rate of the
/// NIC it leaves through ([`pacing_caps`]), so that BBR's start-up, which paces at
/// 2.89 times its estimate, cannot overrun the link into its queue; returns the lowest
/// cap set, bytes/s.
fn pace(data: &[Link]) -> Option<u64> {
    let locals: Vec<Option<IpAddr>> = data
        .iter()
        .map(|d| d.stream().local_addr().ok().map(|a| a.ip()))
        .collect();
    let caps = pacing_caps(&locals, link_bits_of);
    let mut lowest: Option<u64> = None;
    for (d, cap) in data.iter().zip(caps) {
        let Some(cap) = cap else { continue };
        match tcp::set_max_pacing_rate(d.stream(), cap) {
            Ok(()) => lowest = Some(lowest.map_or(cap, |l| l.min(cap))),
            Err(e) => tracing::warn!("a pacing cap of {cap} B/s refused on a data connection: {e}"),
        }
    }
    lowest
}

/// Each data connection's pacing cap, bytes/s, by its local address: the rate
/// `link_bits` reports for the NIC holding that address, shared equally by the data
/// connections that leave through it; `None` where the rate is unknown.
pub fn pacing_caps(
    locals: &[Option<IpAddr>],
    link_bits: impl Fn(IpAddr) -> Option<u64>,
) -> Vec<Option<u64>> {
    locals
        .iter()
        .map(|ip| {
            let ip = (*ip)?;
            let sharing = locals.iter().filter(|o| **o == Some(ip)).count();
            let sharing = u64::try_from(sharing).unwrap_or(1).max(1);
            Some((link_bits(ip)? / 8 / sharing).max(1))
        })
        .collect()
}

/// Each data connection's figures now (before close), in the order given.
pub fn final_figures(data: &[TcpStream]) -> Vec<ConnectionReport> {
    data.iter()
        .filter_map(tcp::figures)
        .map(|f| ConnectionReport::of(&f))
        .collect()
}

/// The link rate of the interface that holds `ip`, bits/s, where sysfs reports one
/// (veth, tun and loopback do not).
pub fn link_bits_of(ip: IpAddr) -> Option<u64> {
    let name = interface_of(ip.to_canonical())?;
    let text = std::fs::read_to_string(format!("/sys/class/net/{name}/speed")).ok()?;
    let mbit: i64 = text.trim().parse().ok()?;
    u64::try_from(mbit)
        .ok()
        .filter(|&m| m > 0)
        .map(|m| m * 1_000_000)
}

/// The name of the interface that holds `ip` (`getifaddrs`).
fn interface_of(ip: IpAddr) -> Option<String> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: `head` is a valid out-pointer; on success the list is freed below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return None;
    }
    let mut found = None;
    let mut cur = head;
    while !cur.is_null() && found.is_none() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, alive until freed.
        let ifa = unsafe { &*cur };
        // SAFETY: a non-null ifa_addr points at a sockaddr of its family's size.
        if !ifa.ifa_addr.is_null() && unsafe { sockaddr_ip(ifa.ifa_addr) } == Some(ip) {
            // SAFETY: ifa_name is a NUL-terminated string owned by the list.
            let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) };
            found = Some(name.to_string_lossy().into_owned());
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    found
}

/// The IP address of a socket address (v4 or v6).
///
/// # Safety
/// `sa` points at a valid socket address of its family's size.
unsafe fn sockaddr_ip(sa: *const libc::sockaddr) -> Option<IpAddr> {
    // SAFETY: the caller's contract: sa_family is readable, and the family says the size.
    match i32::from(unsafe { (*sa).sa_family }) {
        libc::AF_INET => {
            // SAFETY: the family is AF_INET, so `sa` points at a sockaddr_in.
            let v4 = unsafe { &*sa.cast::<libc::sockaddr_in>() };
            Some(IpAddr::from(u32::from_be(v4.sin_addr.s_addr).to_be_bytes()))
        }
        libc::AF_INET6 => {
            // SAFETY: the family is AF_INET6, so `sa` points at a sockaddr_in6.
            let v6 = unsafe { &*sa.cast::<libc::sockaddr_in6>() };
            Some(IpAddr::from(v6.sin6_addr.s6_addr))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests;
