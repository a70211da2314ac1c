//! One thread that ends connections past their handshake deadline and sessions idle
//! past the idle timeout, by shutting their sockets down (the thread blocked on them
//! then sees an error or an end of stream and cleans up as for any failure).

use std::collections::{BTreeMap, HashMap};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How often running sessions are checked for idleness.
const IDLE_CHECK: Duration = Duration::from_secs(1);

/// The watchdog; cloning shares the one thread.
#[derive(Debug, Clone)]
pub struct Watchdog(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Debug, Default)]
struct State {
    next_id: u64,
    deadlines: BTreeMap<(Instant, u64), Entry>,
    sessions: HashMap<u64, Session>,
    stopped: bool,
}

#[derive(Debug)]
struct Entry {
    stream: TcpStream,
    fired: Arc<AtomicBool>,
}

#[derive(Debug)]
struct Session {
    what: String,
    sockets: Vec<TcpStream>,
    idle: Duration,
    fired: Arc<AtomicBool>,
    aborted: Arc<AtomicBool>,
}

impl Watchdog {
    /// Starts the watchdog thread.
    ///
    /// # Errors
    /// The thread cannot be started.
    pub fn start() -> std::io::Result<Watchdog> {
        let w = Watchdog(Arc::new(Inner {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
        }));
        let inner = Arc::clone(&w.0);
        std::thread::Builder::new()
            .name("watchdog".into())
            .stack_size(256 << 10)
            .spawn(move || inner.run())?;
        Ok(w)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.0.lock()
    }

    /// Shuts `stream` down at `now + within` unless the returned guard is dropped or
    /// disarmed first. Without a clone of the socket (out of descriptors) nothing is
    /// armed and the per-read timeout still applies; that is logged.
    pub fn arm(&self, stream: &TcpStream, within: Duration) -> Armed {
        let fired = Arc::new(AtomicBool::new(false));
        let Ok(clone) = stream.try_clone() else {
            tracing::warn!("cannot arm a handshake deadline: no socket clone");
            return Armed {
                dog: None,
                key: None,
                fired,
            };
        };
        let mut st = self.lock();
        st.next_id += 1;
        let key = (Instant::now() + within, st.next_id);
        let entry = Entry {
            stream: clone,
            fired: Arc::clone(&fired),
        };
        let first = st.deadlines.keys().next().is_none_or(|k| key < *k);
        st.deadlines.insert(key, entry);
        drop(st);
        if first {
            self.0.wake.notify_one();
        }
        Armed {
            dog: Some(self.clone()),
            key: Some(key),
            fired,
        }
    }

    /// Watches a running session (`what` names it in a drain's report) on its
    /// `sockets` for `idle` (zero: never idle) and for a drain's abort, until the
    /// returned guard is dropped.
    pub fn watch(&self, what: String, sockets: Vec<TcpStream>, idle: Duration) -> Watched {
        let fired = Arc::new(AtomicBool::new(false));
        let aborted = Arc::new(AtomicBool::new(false));
        let mut st = self.lock();
        st.next_id += 1;
        let id = st.next_id;
        st.sessions.insert(
            id,
            Session {
                what,
                sockets,
                idle,
                fired: Arc::clone(&fired),
                aborted: Arc::clone(&aborted),
            },
        );
        Watched {
            dog: self.clone(),
            id,
            fired,
            aborted,
        }
    }

    /// Shuts down every watched session (a drain that ran out of time); returns what
    /// each was.
    pub fn abort_sessions(&self) -> Vec<String> {
        let st = self.lock();
        let mut aborted = Vec::with_capacity(st.sessions.len());
        for s in st.sessions.values() {
            s.aborted.store(true, Ordering::SeqCst);
            shut(&s.sockets);
            aborted.push(s.what.clone());
        }
        aborted
    }

    /// Stops the thread.
    pub fn stop(&self) {
        self.lock().stopped = true;
        self.0.wake.notify_one();
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn run(&self) {
        let mut st = self.lock();
        let mut next_idle_check = Instant::now() + IDLE_CHECK;
        while !st.stopped {
            let now = Instant::now();
            expire(&mut st.deadlines, now);
            if now >= next_idle_check {
                check_idle(&st.sessions);
                next_idle_check = now + IDLE_CHECK;
            }
            let until = st
                .deadlines
                .keys()
                .next()
                .map_or(next_idle_check, |(t, _)| (*t).min(next_idle_check));
            let wait = until.saturating_duration_since(Instant::now());
            st = self
                .wake
                .wait_timeout(st, wait)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }
}

fn expire(deadlines: &mut BTreeMap<(Instant, u64), Entry>, now: Instant) {
    while let Some(entry) = deadlines.first_entry() {
        if entry.key().0 > now {
            return;
        }
        let e = entry.remove();
        e.fired.store(true, Ordering::SeqCst);
        let _ = e.stream.shutdown(Shutdown::Both);
    }
}

fn check_idle(sessions: &HashMap<u64, Session>) {
    for s in sessions.values() {
        if s.idle.is_zero() || s.fired.load(Ordering::SeqCst) {
            continue;
        }
        let quiet = s.sockets.iter().map(since_last_received).min();
        if quiet.is_some_and(|q| q >= s.idle) {
            s.fired.store(true, Ordering::SeqCst);
            shut(&s.sockets);
        }
    }
}

fn shut(sockets: &[TcpStream]) {
    for sock in sockets {
        let _ = sock.shutdown(Shutdown::Both);
    }
}

/// How long ago `sock` last received payload bytes (the kernel's count); zero when it
/// cannot be read (such a socket never makes a session idle).
pub(crate) fn since_last_received(sock: &TcpStream) -> Duration {
    crate::net::tcp::figures(sock).map_or(Duration::ZERO, |f| {
        Duration::from_millis(u64::from(f.last_data_recv_ms))
    })
}

/// A handshake deadline; dropping it (or [`Armed::disarm`]) cancels it.
#[derive(Debug)]
pub struct Armed {
    dog: Option<Watchdog>,
    key: Option<(Instant, u64)>,
    fired: Arc<AtomicBool>,
}

impl Armed {
    /// Cancels the deadline.
    pub fn disarm(&mut self) {
        if let (Some(dog), Some(key)) = (&self.dog, self.key.take()) {
            dog.lock().deadlines.remove(&key);
        }
    }

    /// Whether the deadline passed and the socket was shut down.
    pub fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }
}

impl Drop for Armed {
    fn drop(&mut self) {
        self.disarm();
    }
}

/// A watched session; dropping it stops the watch.
#[derive(Debug)]
pub struct Watched {
    dog: Watchdog,
    id: u64,
    fired: Arc<AtomicBool>,
    aborted: Arc<AtomicBool>,
}

impl Watched {
    /// Adds sockets to the watch (a session's data connections once they joined).
    pub fn add(&self, sockets: Vec<TcpStream>) {
        let mut st = self.dog.lock();
        let aborted = self.aborted();
        if let Some(s) = st.sessions.get_mut(&self.id) {
            if aborted {
                shut(&sockets);
            }
            s.sockets.extend(sockets);
        }
    }

    /// Whether the session was ended for idleness.
    pub fn idled(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }

    /// Whether a drain aborted it.
    pub fn aborted(&self) -> bool {
        self.aborted.load(Ordering::SeqCst)
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.dog.lock().sessions.remove(&self.id);
    }
}
