//! The I/O shell of the send-window governor ([`sluice_session::governor`]): on a long
//! path (RTT of at least [`PACE_FROM_RTT`]) the sending side of a session samples its
//! data connections' `TCP_INFO` every few round trips on one thread, feeds the pure
//! governor, and carries out its clamps with `SO_SNDBUF` (the kernel keeps a
//! connection's unacknowledged and unsent bytes within it) and `TCP_NOTSENT_LOWAT`.

use super::tcp;
use super::tuning::{Tuning, NOTSENT_LOWAT_BYTES, PACE_FROM_RTT};
use sluice_session::governor::{Clamp, Governor, Sample};
use std::net::TcpStream;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A running governor; [`Running::stop`] ends it and says how many clamps it made.
#[derive(Debug)]
pub struct Running {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<u64>>,
}

/// Starts governing `data` (the sending side's data connections) where the path is
/// long; `None` on a LAN, where start-up overruns nothing, or where no thread starts.
pub fn start(data: &[TcpStream], tuning: &Tuning) -> Option<Running> {
    if tuning.rtt < PACE_FROM_RTT || data.is_empty() {
        return None;
    }
    let conns: Vec<TcpStream> = data.iter().filter_map(|s| s.try_clone().ok()).collect();
    let asked = tuning.plan.socket_bytes;
    // The kernel doubles what it is asked for; the unsent bytes share the buffer.
    let planned = (asked * 2).saturating_sub(u64::from(NOTSENT_LOWAT_BYTES));
    let governor = Governor::new(conns.len(), planned, u64::from(NOTSENT_LOWAT_BYTES));
    let period = Governor::period(tuning.rtt);
    let stop = Arc::new((Mutex::new(false), Condvar::new()));
    let flag = Arc::clone(&stop);
    let thread = std::thread::Builder::new()
        .name("net-governor".into())
        .spawn(move || run(&conns, governor, period, asked, &flag))
        .inspect_err(|e| tracing::warn!("the send-window governor did not start: {e}"))
        .ok()?;
    Some(Running {
        stop,
        thread: Some(thread),
    })
}

impl Running {
    /// Stops the governor; the number of clamps it made.
    pub fn stop(mut self) -> u64 {
        self.halt()
    }

    fn halt(&mut self) -> u64 {
        let (lock, cv) = &*self.stop;
        *lock.lock().unwrap_or_else(PoisonError::into_inner) = true;
        cv.notify_all();
        self.thread.take().and_then(|t| t.join().ok()).unwrap_or(0)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.halt();
    }
}

fn run(
    conns: &[TcpStream],
    mut g: Governor,
    period: Duration,
    asked: u64,
    stop: &(Mutex<bool>, Condvar),
) -> u64 {
    let origin = Instant::now();
    let (lock, cv) = stop;
    let mut stopped = lock.lock().unwrap_or_else(PoisonError::into_inner);
    loop {
        stopped = cv
            .wait_timeout_while(stopped, period, |s| !*s)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
        if *stopped {
            return g.clamps();
        }
        let at_us = u64::try_from(origin.elapsed().as_micros()).unwrap_or(u64::MAX);
        let samples: Vec<Option<Sample>> = conns.iter().map(|c| sample(c, at_us)).collect();
        for clamp in g.tick(&samples) {
            apply(&conns[clamp.conn], &clamp, asked);
        }
    }
}

fn sample(c: &TcpStream, at_us: u64) -> Option<Sample> {
    let f = tcp::figures(c)?;
    Some(Sample {
        at_us,
        bytes_sent: f.bytes_sent,
        bytes_retrans: f.bytes_retrans,
        bytes_acked: f.bytes_acked,
        delivery_rate: f.delivery_rate,
        min_rtt_us: f.min_rtt_us,
    })
}

/// Sets a connection's send buffer to hold `clamp`'s bytes in flight and unsent (the
/// kernel doubles what it is asked), or the planned `asked` bytes again.
fn apply(c: &TcpStream, clamp: &Clamp, asked: u64) {
    let bytes = clamp
        .inflight
        .map_or(asked, |k| (k + clamp.unsent).div_ceil(2));
    let lowat = u32::try_from(clamp.unsent).unwrap_or(NOTSENT_LOWAT_BYTES);
    let done = tcp::set_notsent_lowat(c, lowat)
        .and_then(|()| tcp::set_send_buffer(c, usize::try_from(bytes).unwrap_or(usize::MAX)));
    match (done, clamp.inflight) {
        (Err(e), _) => tracing::warn!("send window of {bytes} bytes refused: {e}"),
        (Ok(()), Some(k)) => tracing::info!(
            "data connection {}: retransmitting above {:.0} %: at most {} KiB in flight",
            clamp.conn,
            sluice_session::governor::HIGH_LOSS * 100.0,
            k >> 10
        ),
        (Ok(()), None) => tracing::info!(
            "data connection {}: calm: its planned {} KiB of send buffer again",
            clamp.conn,
            asked >> 10
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::path::PathPlan;
    use crate::testing::tcp_pair as pair;
    use socket2::SockRef;

    fn tuning(rtt: Duration, socket_bytes: u64) -> Tuning {
        Tuning {
            rtt,
            link_bits: None,
            plan: PathPlan {
                socket_bytes,
                bdp_bytes: socket_bytes,
                capped: false,
                reason: String::new(),
            },
            congestion: None,
            kernel_note: None,
            pacing: None,
        }
    }

    #[test]
    fn a_lan_is_not_governed_and_a_long_path_is_until_stopped() {
        let (d, _peer) = pair();
        let lan = tuning(Duration::from_micros(80), 8 << 20);
        assert!(start(std::slice::from_ref(&d), &lan).is_none());
        let wan = tuning(Duration::from_millis(50), 32 << 20);
        let running = start(std::slice::from_ref(&d), &wan).expect("a long path is governed");
        // Nothing moves on the connection: no interval counts, so nothing is clamped.
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(running.stop(), 0);
    }

    #[test]
    fn a_clamp_bounds_the_send_buffer_and_unsent_bytes_and_lifting_restores_the_plan() {
        let (d, _peer) = pair();
        let sock = SockRef::from(&d);
        let clamp = Clamp {
            conn: 0,
            inflight: Some(3 << 20),
            unsent: 512 << 10,
        };
        apply(&d, &clamp, 16 << 20);
        assert_eq!(tcp::notsent_lowat(&d), Some(512 << 10));
        let granted = sock.send_buffer_size().unwrap();
        // The kernel doubles (3 MiB + 512 KiB) / 2; without CAP_NET_ADMIN it is capped
        // at net.core.wmem_max.
        let max = std::fs::read_to_string("/proc/sys/net/core/wmem_max")
            .ok()
            .and_then(|s| s.trim().parse::<usize>().ok())
            .unwrap_or(0);
        assert!(
            granted == (3 << 20) + (512 << 10) || granted == 2 * max.min((7 << 20) / 4),
            "{granted}"
        );
        let lifted = Clamp {
            conn: 0,
            inflight: None,
            unsent: u64::from(NOTSENT_LOWAT_BYTES),
        };
        apply(&d, &lifted, 16 << 20);
        assert_eq!(tcp::notsent_lowat(&d), Some(NOTSENT_LOWAT_BYTES));
        assert!(sock.send_buffer_size().unwrap() > granted);
    }
}
