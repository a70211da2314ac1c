//! The daemon's limits and timeouts: connections per source address, sessions at once,
//! the handshake deadline and the idle timeout.
//!
//! * Per address, [`Guard`] counts connections that have not yet authenticated (a
//!   control connection until its handshake and `Open`, a data connection until its
//!   `Join` is accepted): an unauthenticated flood from one address is refused early,
//!   while an authenticated session's data connections (bounded by
//!   [`sluice_wire::MAX_STREAMS`] and `--max-connections`) are not counted.
//! * [`Watchdog`] is one thread that enforces, by shutting the socket down, a total
//!   deadline on each connection's handshake (a slowloris sending a byte every few
//!   seconds passes any per-read timeout) and the idle timeout of running sessions.
//!   A session is idle when none of its connections has received a byte from the
//!   peer for the idle timeout (the kernel's `tcpi_last_data_recv`, so nothing is
//!   counted on the data path). While a transfer runs, a live peer always sends: a
//!   pushing client its manifest and chunks, a pulling client its `Have` answers and
//!   chunk acknowledgements; so only a dead or stuck peer reaches it, and the wire is
//!   unchanged. (A pulling client without `CHUNK_ACKS` is silent while it receives:
//!   its sessions have no idle timeout.)

mod watchdog;

pub use watchdog::{Armed, Watchdog, Watched};

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The daemon's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Sessions running at once.
    pub max_sessions: usize,
    /// Unauthenticated connections from one address at once.
    pub max_per_address: usize,
    /// Total time a connection has to finish its handshake (or `Join`).
    pub handshake_timeout: Duration,
    /// A running session whose peer sends nothing for this long is ended; zero: never.
    pub idle_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_sessions: 64,
            max_per_address: 32,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
        }
    }
}

/// The idle timeout of a session: none when this side `sends` (a pull) to a client
/// that does not acknowledge chunks (no `CHUNK_ACKS`: such a client sends nothing while
/// it receives, however long the transfer).
pub fn idle_timeout(limits: Limits, sends: bool, chunk_acks: bool) -> Duration {
    if sends && !chunk_acks {
        Duration::ZERO
    } else {
        limits.idle_timeout
    }
}

/// Counts what [`Limits`] bounds.
#[derive(Debug)]
pub struct Guard {
    limits: Limits,
    per_address: Mutex<HashMap<IpAddr, usize>>,
    sessions: AtomicUsize,
}

/// A limit that refused a connection, with the message for the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal(pub String);

impl Guard {
    /// A guard enforcing `limits`.
    pub fn new(limits: Limits) -> Arc<Guard> {
        Arc::new(Guard {
            limits,
            per_address: Mutex::new(HashMap::new()),
            sessions: AtomicUsize::new(0),
        })
    }

    /// The limits enforced.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, usize>> {
        self.per_address
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Counts an unauthenticated connection from `ip` until the ticket is dropped (or
    /// [`AddressTicket::authenticated`]).
    ///
    /// # Errors
    /// `ip` already has `max_per_address` unauthenticated connections.
    pub fn connection(self: &Arc<Guard>, ip: IpAddr) -> Result<AddressTicket, Refusal> {
        let mut map = self.map();
        let n = map.entry(ip).or_default();
        if *n >= self.limits.max_per_address {
            return Err(Refusal(format!(
                "too many unauthenticated connections from {ip} (at most {}); try again later",
                self.limits.max_per_address
            )));
        }
        *n += 1;
        Ok(AddressTicket {
            guard: Arc::clone(self),
            ip: Some(ip),
        })
    }

    /// Counts a session until the ticket is dropped.
    ///
    /// # Errors
    /// `max_sessions` are running.
    pub fn session(self: &Arc<Guard>) -> Result<SessionTicket, Refusal> {
        let max = self.limits.max_sessions;
        let taken = self
            .sessions
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < max).then_some(n + 1)
            });
        match taken {
            Ok(_) => Ok(SessionTicket(Arc::clone(self))),
            Err(_) => Err(Refusal(format!(
                "the daemon runs {max} sessions, its most; try again later"
            ))),
        }
    }

    /// Sessions running now.
    pub fn sessions(&self) -> usize {
        self.sessions.load(Ordering::SeqCst)
    }

    /// Unauthenticated connections from `ip` now.
    pub fn unauthenticated(&self, ip: IpAddr) -> usize {
        self.map().get(&ip).copied().unwrap_or(0)
    }

    fn release(&self, ip: IpAddr) {
        let mut map = self.map();
        if let Some(n) = map.get_mut(&ip) {
            debug_assert!(*n > 0);
            *n -= 1;
            if *n == 0 {
                map.remove(&ip);
            }
        }
    }
}

/// An unauthenticated connection counted against its address.
#[derive(Debug)]
pub struct AddressTicket {
    guard: Arc<Guard>,
    ip: Option<IpAddr>,
}

impl AddressTicket {
    /// The connection authenticated: it no longer counts against its address.
    pub fn authenticated(&mut self) {
        if let Some(ip) = self.ip.take() {
            self.guard.release(ip);
        }
    }
}

impl Drop for AddressTicket {
    fn drop(&mut self) {
        self.authenticated();
    }
}

/// A running session, counted.
#[derive(Debug)]
pub struct SessionTicket(Arc<Guard>);

impl Drop for SessionTicket {
    fn drop(&mut self) {
        let before = self.0.sessions.fetch_sub(1, Ordering::SeqCst);
        debug_assert!(before > 0);
    }
}

/// Raises this process's open-file limit to its hard limit (a daemon holds a few
/// descriptors per connection); returns the soft limit now in force.
pub fn raise_fd_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 0;
        }
        if lim.rlim_cur < lim.rlim_max {
            let want = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &want) == 0 {
                lim = want;
            }
        }
    }
    lim.rlim_cur
}

#[cfg(test)]
mod tests;
