//! A one-shot server: exactly ONE session on a listener, for the far side that
//! `sluice cp` starts over ssh. It is the daemon's session without the daemon: the
//! server side of opening a session ([`crate::net::accept`]), then
//! `session::run_role`, like a stream receiver ([`crate::stream`]'s `accept`).
//!
//! The path is fixed by whoever started it: the session's `Open` must name `path`
//! (a trailing '/' may be added or left out), in the direction it was started for;
//! anything else is refused. A connection that fails the handshake (a port scan, a
//! wrong token) is dropped and the server waits for the next one, until `wait` has
//! passed since it started: then it gives up.

use crate::error::EngineError;
use crate::fs::Root;
use crate::net::accept;
use crate::net::tls::{Link, ServerTls};
use crate::options::{ServerSide, SessionOptions};
use crate::runtime::Runtime;
use crate::session::{self, run_role, Connections, HANDSHAKE_TIMEOUT};
use crate::stats::{Stats, Summary};
use crate::thirdparty::deliver;
use crate::transport::{FrameReader, FrameWriter};
use sluice_wire::{
    Addresses, Direction, ErrorCode, ErrorFrame, Established, Frame, JoinTable, Open, Token,
};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Control connections that fail their handshake before the server gives up.
const MAX_ATTEMPTS: u32 = 16;

/// What the one session may do.
#[derive(Debug)]
pub struct OneShotConfig {
    /// The directory the session is confined to.
    pub root: PathBuf,
    /// The one path under `root` the session may name (as the daemon reads an `Open`'s
    /// path: `name`, `name/`, or `/` for the root itself).
    pub path: String,
    /// Push (this side receives) or pull (this side sends).
    pub direction: Direction,
    /// The session's secret (handed over the ssh channel, never on a command line).
    pub token: Token,
    /// This side's plan, pools allocated once.
    pub runtime: Arc<Runtime>,
    /// Storage threads.
    pub io_threads: u32,
    /// Large-file reads each io-read thread keeps in flight.
    pub read_depth: u32,
    /// How long to wait for the client's control connection (and for each data
    /// connection) before giving up.
    pub wait: Duration,
    /// This side's TLS identity (made for this one session; its fingerprint travels to
    /// the client over the ssh channel) and clear-text policy.
    pub tls: ServerTls,
}

/// Serves exactly one session on `listener` and returns its summary.
///
/// # Errors
/// No client came within `cfg.wait`, the root cannot be opened, the client asked for
/// another path or direction (told in an `Error` frame), or the session failed.
pub fn serve_one(listener: &TcpListener, cfg: &OneShotConfig) -> Result<Summary, EngineError> {
    let root = Arc::new(Root::open(&cfg.root)?);
    let deadline = Instant::now() + cfg.wait;
    let (mut reader, mut writer, est) = first_session(listener, cfg, deadline)?;
    let Some(open) = accept::read_open(&mut reader)? else {
        return Err(EngineError::Disconnected {
            peer: reader.peer().to_string(),
            state: "waiting for Open".into(),
        });
    };
    let agreed = SessionOptions::check_open(&open.options, est.capabilities).map_err(|message| {
        EngineError::Refused {
            code: ErrorCode::BadFrame,
            message,
        }
    });
    let role = agreed
        .and_then(|()| check_open(&open, cfg.direction, &cfg.path))
        .and_then(|()| crate::access::role_for(&root, &open));
    let role = role.inspect_err(|e| {
        let msg = crate::sink::redact_root(&e.to_string(), &root);
        let _ = writer.send(&ErrorFrame::new(e.code(), msg));
    })?;
    let server = ServerSide {
        slot_bytes: cfg.runtime.chunk_bytes(),
        io_threads: cfg.io_threads,
        read_depth: cfg.read_depth,
    };
    let mut opts = SessionOptions::served(&open.options, server, est.capabilities);
    // A daemon-to-daemon copy from this side: the destination's session comes in
    // `Delegate`, and this side dials it (as the daemon does, `crate::thirdparty`).
    let delegate = if open.direction == Direction::Deliver {
        Some(deliver::take(
            &mut reader,
            &mut opts,
            cfg.runtime.chunk_bytes(),
        )?)
    } else {
        None
    };
    let stats = Arc::new(Stats::new());
    let sends = open.direction != Direction::Push;
    session::state_threads_beyond_plan(
        &cfg.runtime,
        &opts,
        sends,
        &stats,
        ("the one session", true),
    );
    let data = match &delegate {
        Some(d) => {
            let accept = accept::new_accept(opts.streams, opts.chunk_bytes)?;
            deliver::join_and_confirm(d, cfg.tls.encrypt(), &mut writer, accept)?
        }
        None => {
            let encrypted = writer.is_tls();
            gather(listener, &est, &opts, &mut writer, cfg, encrypted)?
        }
    };
    reader
        .set_timeout(None)
        .map_err(|e| EngineError::io("clearing a timeout", e))?;
    let conns = Connections {
        control_stream: writer.stream_clone()?,
        reader,
        data,
        joining: Vec::new(),
    };
    run_role(role, &cfg.runtime, &opts, opts.chunk_bytes, conns, &stats)?;
    Ok(stats.summary(cfg.runtime.plan()))
}

fn deadline_from_now(cfg: &OneShotConfig) -> Instant {
    Instant::now() + cfg.wait
}

/// The first control connection that completes the handshake with the token, before
/// `deadline`; the ones that fail it are dropped.
fn first_session(
    listener: &TcpListener,
    cfg: &OneShotConfig,
    deadline: Instant,
) -> Result<(FrameReader, FrameWriter, Established), EngineError> {
    let mut last = None;
    for _ in 0..MAX_ATTEMPTS {
        let stream = accept_before(listener, deadline, "the client's control connection")?;
        match handshake(stream, cfg, deadline) {
            Ok(done) => return Ok(done),
            Err(e) => {
                tracing::warn!("a connection failed the handshake: {e}");
                last = Some(e);
            }
        }
    }
    Err(last.unwrap_or_else(|| EngineError::Config("no client connected".into())))
}

/// The server handshake on `stream`, each read bounded by what is left until
/// `deadline` (a connection that says nothing cannot hold the one session's place
/// beyond it).
fn handshake(
    stream: TcpStream,
    cfg: &OneShotConfig,
    deadline: Instant,
) -> Result<(FrameReader, FrameWriter, Established), EngineError> {
    let token = &cfg.token;
    let (mut reader, mut writer) = accept::incoming(stream, &cfg.tls)?;
    let left = deadline.saturating_duration_since(Instant::now());
    reader
        .set_timeout(Some(
            left.clamp(Duration::from_millis(100), HANDSHAKE_TIMEOUT),
        ))
        .map_err(|e| EngineError::io("setting a timeout", e))?;
    let first = accept::read_first(&mut reader, &mut writer)?;
    accept::admit(&reader, &mut writer, &cfg.tls)?;
    let hello = match first {
        Some(hello @ Frame::Hello(_)) => hello,
        other => {
            let _ = writer.send(&ErrorFrame::new(ErrorCode::BadFrame, "expected Hello"));
            return Err(EngineError::Handshake {
                peer: reader.peer().to_string(),
                message: format!(
                    "expected Hello, got {}",
                    other.map_or("nothing", |f| f.frame_type().name())
                ),
            });
        }
    };
    let est = accept::server_handshake(hello, &mut reader, &mut writer, Some(token.clone()))?;
    Ok((reader, writer, est))
}

/// Accepts the next connection on `listener` before `deadline` (`what` names it in the
/// error when none comes).
fn accept_before(
    listener: &TcpListener,
    deadline: Instant,
    what: &str,
) -> Result<TcpStream, EngineError> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(EngineError::Config(format!(
                "gave up waiting for {what}: none came within the time allowed"
            )));
        }
        if readable(listener, left)? {
            let (s, _) = listener
                .accept()
                .map_err(|e| EngineError::io(format!("accepting {what}"), e))?;
            return Ok(s);
        }
    }
}

/// Whether `listener` has a connection to accept within `wait` (poll(2)).
fn readable(listener: &TcpListener, wait: Duration) -> Result<bool, EngineError> {
    let mut fds = [libc::pollfd {
        fd: listener.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }];
    let ms = libc::c_int::try_from(wait.as_millis().max(1)).unwrap_or(libc::c_int::MAX);
    // SAFETY: one valid pollfd for the listener's open descriptor, its length 1.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), 1, ms) };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(EngineError::io("waiting for a connection", e));
    }
    Ok(n > 0 && fds[0].revents & libc::POLLIN != 0)
}

/// Whether the `Open` is the one this server was started for: its direction and its
/// path (up to a trailing '/'). A refusal names both.
fn check_open(open: &Open, direction: Direction, path: &str) -> Result<(), EngineError> {
    // Started to send, it may send to this client or, for it, to another daemon.
    let delivers = direction == Direction::Pull && open.direction == Direction::Deliver;
    if open.direction != direction && !delivers {
        return Err(EngineError::Refused {
            code: ErrorCode::PathOutsideRoot,
            message: format!(
                "this server was started for a {:?}, not a {:?}",
                direction, open.direction
            ),
        });
    }
    let norm = |p: &str| p.trim_end_matches('/').to_string();
    if norm(&open.path) != norm(path) {
        return Err(EngineError::Refused {
            code: ErrorCode::PathOutsideRoot,
            message: format!(
                "{:?} is not the path this server was started for ({:?})",
                open.path, path
            ),
        });
    }
    Ok(())
}

/// Sends `Accept` (no addresses: the client dials the address it reached the control
/// connection at) and takes the session's data connections off the listener, each
/// within `cfg.wait`, in stream order; each must be TLS when the session is
/// `encrypted`. A connection that fails to join is dropped and the next one taken.
fn gather(
    listener: &TcpListener,
    est: &Established,
    opts: &SessionOptions,
    writer: &mut FrameWriter,
    cfg: &OneShotConfig,
    encrypted: bool,
) -> Result<Vec<Link>, EngineError> {
    let deadline = deadline_from_now(cfg);
    let accept = accept::new_accept(opts.streams, opts.chunk_bytes)?;
    let mut table = JoinTable::new(&accept, est.join_key(&accept.session_secret));
    accept::send_accept(writer, est, &accept, Addresses::default())?;
    let streams = usize::from(accept.streams());
    let mut conns: Vec<Option<Link>> = (0..streams).map(|_| None).collect();
    let mut got = 0;
    while got < streams {
        let s = accept_before(listener, deadline, "the session's data connections")?;
        match join_one(s, &mut table, &cfg.tls, encrypted) {
            Ok((i, link)) => {
                if let Some(slot) = conns.get_mut(usize::from(i)) {
                    got += usize::from(slot.replace(link).is_none());
                }
            }
            Err(e) => tracing::warn!("a data connection failed to join: {e}"),
        }
    }
    Ok(conns.into_iter().flatten().collect())
}

/// One data connection's TLS (when its first byte opens it), policy and `Join`.
fn join_one(
    s: TcpStream,
    table: &mut JoinTable,
    tls: &ServerTls,
    encrypted: bool,
) -> Result<(u16, Link), EngineError> {
    let (mut reader, mut w) = accept::incoming(s, tls)?;
    let first = reader.first("joining")?;
    accept::admit(&reader, &mut w, tls)?;
    if encrypted && !reader.is_tls() {
        accept::refuse_clear(&reader, &mut w, accept::ENCRYPTED_SESSION)?;
    }
    match first {
        Some(Frame::Join(join)) => accept::answer_join(table, &join, reader, &mut w),
        _ => {
            let _ = w.send(&ErrorFrame::new(ErrorCode::BadFrame, "expected Join"));
            Err(EngineError::Handshake {
                peer: reader.peer().to_string(),
                message: "expected Join".into(),
            })
        }
    }
}

#[cfg(test)]
mod tests;
