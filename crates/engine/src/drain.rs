//! Signals of `sluice serve`: SIGHUP re-reads the accounts file and runs the command's
//! own reload ([`OnReload`]: its configuration file, its log filter); SIGTERM and SIGINT
//! drain: the daemon stops accepting, lets running sessions finish for up to the drain
//! timeout, then aborts the rest (their files stay under temporary names or are
//! removed, as for any failed session), and reports which it aborted. A second SIGTERM
//! or SIGINT aborts at once.

use crate::accounts::Live;
use crate::guard::{Guard, Watchdog};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// How long aborted sessions get to clean up after their sockets were shut down.
const ABORT_GRACE: Duration = Duration::from_secs(40);
/// How often the drain looks at the running sessions.
const POLL: Duration = Duration::from_millis(50);

/// Whether a drain was asked for, and how many times (a second request aborts).
#[derive(Debug, Default)]
pub struct Drain {
    asked: Mutex<usize>,
    changed: Condvar,
    signals: AtomicUsize,
}

/// What a SIGHUP reloads besides the accounts: the command's own settings (its log
/// filter, its configuration file), which the engine does not know.
#[derive(Clone)]
pub struct OnReload(pub Arc<dyn Fn() + Send + Sync>);

impl std::fmt::Debug for OnReload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnReload")
    }
}

/// How a drain ended.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Drained {
    /// Sessions that finished by themselves during the drain.
    pub finished: usize,
    /// One line per session aborted when the drain timed out.
    pub aborted: Vec<String>,
}

impl Drain {
    /// A drain not yet asked for.
    pub fn new() -> Arc<Drain> {
        Arc::new(Drain::default())
    }

    /// Whether the daemon is draining (no new session may start).
    pub fn draining(&self) -> bool {
        *self.lock() > 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, usize> {
        self.asked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Asks for a drain (a second call: abort now).
    pub fn ask(&self) {
        *self.lock() += 1;
        self.changed.notify_all();
    }

    /// Signals handled so far (for tests and logs).
    pub fn signals(&self) -> usize {
        self.signals.load(Ordering::SeqCst)
    }

    /// Waits for the running sessions to finish, for up to `timeout` (or until a second
    /// request), then aborts those left through `dog` and waits for them to clean up.
    pub fn finish(&self, guard: &Guard, dog: &Watchdog, timeout: Duration) -> Drained {
        let running = guard.sessions();
        let deadline = Instant::now() + timeout;
        let mut asked = self.lock();
        while guard.sessions() > 0 && *asked < 2 && Instant::now() < deadline {
            let wait = deadline.saturating_duration_since(Instant::now()).min(POLL);
            asked = self
                .changed
                .wait_timeout(asked, wait)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        drop(asked);
        let mut out = Drained::default();
        if guard.sessions() > 0 {
            out.aborted = dog.abort_sessions();
            let grace = Instant::now() + ABORT_GRACE;
            while guard.sessions() > 0 && Instant::now() < grace {
                std::thread::sleep(POLL);
            }
        }
        out.finished = running.saturating_sub(out.aborted.len());
        out
    }
}

/// Starts the thread that handles SIGTERM and SIGINT (drain: `listener` stops
/// accepting) and, with `accounts` from a file or an `on_reload`, SIGHUP (reload).
///
/// # Errors
/// The handlers or the thread cannot be installed.
pub fn handle_signals(
    listener: Arc<TcpListener>,
    accounts: Option<Arc<Live>>,
    on_reload: Option<OnReload>,
    drain: Arc<Drain>,
) -> std::io::Result<()> {
    let mut wanted = vec![SIGTERM, SIGINT];
    if accounts.is_some() || on_reload.is_some() {
        wanted.push(SIGHUP);
    }
    let mut signals = signal_hook::iterator::Signals::new(&wanted)?;
    std::thread::Builder::new()
        .name("signals".into())
        .stack_size(256 << 10)
        .spawn(move || {
            for sig in signals.forever() {
                drain.signals.fetch_add(1, Ordering::SeqCst);
                if sig == SIGHUP {
                    crate::notify::reloading();
                    if let Some(live) = &accounts {
                        reload(live);
                    }
                    if let Some(hook) = &on_reload {
                        (hook.0)();
                    }
                    crate::notify::ready("reloaded; serving");
                    continue;
                }
                let first = !drain.draining();
                drain.ask();
                if first {
                    tracing::warn!("draining: no new sessions; running sessions may finish");
                    crate::notify::stopping("draining: running sessions may finish");
                    stop_accepting(&listener);
                } else {
                    tracing::warn!("asked again: aborting the running sessions now");
                }
            }
        })?;
    Ok(())
}

/// Re-reads the accounts file; one line either way.
fn reload(live: &Live) {
    let path = live
        .current()
        .reload_source()
        .map_or_else(String::new, |p| p.display().to_string());
    match live.reload() {
        Ok(n) => tracing::warn!("SIGHUP: {n} accounts reloaded from {path}"),
        Err(e) => tracing::error!(
            "SIGHUP: {e}; keeping the {} accounts in force",
            live.current().len()
        ),
    }
}

/// Wakes the thread blocked in `accept` on `listener` (Linux returns `EINVAL` from an
/// `accept` on a socket shut down for reading) so that it sees the drain.
pub fn stop_accepting(listener: &TcpListener) {
    // SAFETY: shutdown on a descriptor `listener` owns and keeps open.
    let rc = unsafe { libc::shutdown(listener.as_raw_fd(), libc::SHUT_RD) };
    if rc != 0 {
        tracing::warn!(
            "cannot stop the listener: {}",
            std::io::Error::last_os_error()
        );
    }
}
