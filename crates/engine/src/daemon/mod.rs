//! `sluice serve`: accepts sessions and serves files under a confined root.
//!
//! Every connection starts with one frame: `Hello` opens a control connection (a new
//! session), `Join` attaches a data connection to a session that is waiting for its
//! streams. A malformed frame, a wrong secret or a failed session ends that connection
//! only; the daemon keeps serving. The protocol's server side is [`crate::net::accept`];
//! a session, once its connections are up, runs as `session::run_role` does it.
//!
//! * this module: the listener, admission (limits, the handshake deadline), the first
//!   frame, the audit record of a control connection and its end;
//! * `session.rs`: a control connection's handshake, `Open`, rights, and its session;
//! * `join.rs`: data connections, their joins and where each should go.

use crate::access::{allowed, busy, describe, role_for};
use crate::accounts::handshake::server_handshake;
use crate::accounts::{Account, Live};
use crate::audit::{Auditor, Record};
use crate::drain::{Drain, Drained};
use crate::error::EngineError;
use crate::fs::Root;
use crate::guard::{AddressTicket, Armed, Guard, Watchdog};
use crate::net::accept;
use crate::net::tls::{Link, ServerTls};
use crate::options::{ServerSide, SessionOptions};
use crate::runtime::Runtime;
use crate::session::{run_role, Connections, HANDSHAKE_TIMEOUT};
pub use crate::shared::Shared;
use crate::stats::Stats;
use crate::thirdparty::deliver;
use crate::transport::{self, FrameReader, FrameWriter};

use crossbeam_channel::{bounded, Receiver, Sender};
use sluice_placement::Role as PlanRole;
use sluice_wire::{
    Accept, Addresses, Direction, ErrorCode, ErrorFrame, Established, Frame, Join, JoinTable, Open,
    StreamAddress, Token,
};
use std::cell::Cell;
use std::collections::HashMap;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

mod join;
mod session;

pub use join::stream_addresses;

/// Stack of a connection's thread until its session starts (then the session runs on
/// a thread of the default size): pre-authentication costs little.
const CONN_STACK_BYTES: usize = 256 << 10;

/// Daemon settings.
#[derive(Debug)]
pub struct ServeConfig {
    /// The served directory; nothing outside it is ever touched.
    pub root: std::path::PathBuf,
    /// Shared secret; `None` only for loopback or with `--insecure-no-auth`.
    pub token: Option<Token>,
    /// The daemon's plan, pools allocated once at start-up.
    pub runtime: Arc<Runtime>,
    /// Storage threads per session.
    pub io_threads: u32,
    /// Large-file reads each io-read thread keeps in flight (pulls from the daemon).
    pub read_depth: u32,
    /// Connections handled at once (control + data); more are refused.
    pub max_connections: usize,
    /// The address clients reach each NIC of the plan at, by NIC name: a session
    /// advertises, for each data connection, the NIC of the channel whose thread serves
    /// it (Tyche's channels mapped to NICs). Empty: clients use the address they dialled
    /// (a daemon listening on one address can only be reached there).
    pub nic_addresses: Vec<(String, std::net::IpAddr)>,
    /// TLS: the identity presented and the clear-text policy (`--encrypt`).
    pub tls: ServerTls,
}

/// A session waiting for its data connections.
struct Pending {
    table: JoinTable,
    streams: Sender<(u16, Link)>,
    /// Its control connection is TLS: so must its data connections be.
    encrypted: bool,
}

struct Daemon {
    cfg: ServeConfig,
    accounts: Arc<Live>,
    pending: Mutex<HashMap<u64, Pending>>,
    connections: AtomicUsize,
    /// The port the daemon listens on (advertised with its NICs' addresses).
    port: u16,
    guard: Arc<Guard>,
    dog: Watchdog,
    audit: Auditor,
    drain: Arc<Drain>,
    /// `--bwlimit`: the daemon's total, shared fairly by its sessions.
    bwlimit: Option<Arc<crate::bwlimit::Limiter>>,
}

/// What the daemon keeps of one connection while serving it.
struct Conn {
    /// Counts it against its address until it authenticates.
    ticket: Option<AddressTicket>,
    /// Its handshake deadline.
    armed: Armed,
    started: Instant,
    /// The audit result when a timer or a drain, not the error, ended it.
    outcome: Option<&'static str>,
    /// The account's root, once known (to keep it out of messages).
    root: Option<Arc<Root>>,
}

/// Serves forever on `listener` (bound by the caller, so it can print the address).
///
/// # Errors
/// The root cannot be opened, or accepting fails persistently.
pub fn serve(listener: TcpListener, cfg: ServeConfig) -> Result<(), EngineError> {
    serve_shared(listener, cfg, Shared::default()).map(|_| ())
}

/// Serves on `listener` with `shared`'s accounts, audit log and limits until a drain
/// (SIGTERM, SIGINT) ends it; returns how the drain went.
///
/// # Errors
/// The root or the accounts cannot be loaded, the audit log cannot be opened, or the
/// signal handlers cannot be installed.
pub fn serve_shared(
    listener: TcpListener,
    cfg: ServeConfig,
    shared: Shared,
) -> Result<Drained, EngineError> {
    let daemon = Arc::new(Daemon::new(&listener, cfg, &shared)?);
    let listener = Arc::new(listener);
    if shared.signals {
        let reloadable = daemon.accounts.current().reload_source().is_some();
        let live = reloadable.then(|| Arc::clone(&daemon.accounts));
        crate::drain::handle_signals(
            Arc::clone(&listener),
            live,
            shared.on_reload.clone(),
            Arc::clone(&daemon.drain),
        )
        .map_err(|e| EngineError::io("installing the signal handlers", e))?;
        crate::notify::ready(&ready_status(&listener, &daemon));
    }
    for conn in listener.incoming() {
        if daemon.drain.draining() {
            break;
        }
        match conn {
            Ok(stream) => admit(&daemon, stream),
            Err(e) => tracing::warn!("accept failed: {e}"),
        }
    }
    let drained = daemon
        .drain
        .finish(&daemon.guard, &daemon.dog, shared.drain_timeout);
    daemon.dog.stop();
    Ok(drained)
}

/// The status line systemd shows once the daemon serves.
fn ready_status(listener: &TcpListener, daemon: &Daemon) -> String {
    let addr = listener
        .local_addr()
        .map_or_else(|_| "?".into(), |a| a.to_string());
    format!(
        "serving on {addr}, {} account(s)",
        daemon.accounts.current().len()
    )
}

/// Serves `stream` on a thread of its own, or refuses it (`Busy`, audited) when the
/// daemon already serves `max_connections` or its address has too many
/// unauthenticated connections.
fn admit(daemon: &Arc<Daemon>, stream: TcpStream) {
    let peer = transport::peer_name(&stream);
    if daemon.connections.fetch_add(1, Ordering::SeqCst) >= daemon.cfg.max_connections {
        daemon.connections.fetch_sub(1, Ordering::SeqCst);
        daemon.refuse(stream, &peer, "too many connections; try again later");
        return;
    }
    let ticket = match stream.peer_addr().map(|a| daemon.guard.connection(a.ip())) {
        Ok(Err(refusal)) => {
            daemon.connections.fetch_sub(1, Ordering::SeqCst);
            daemon.refuse(stream, &peer, &refusal.0);
            return;
        }
        Ok(Ok(t)) => Some(t),
        Err(_) => None,
    };
    let mut conn = Conn {
        ticket,
        armed: daemon
            .dog
            .arm(&stream, daemon.guard.limits().handshake_timeout),
        started: Instant::now(),
        outcome: None,
        root: None,
    };
    let d = Arc::clone(daemon);
    let spawned = std::thread::Builder::new()
        .name("conn".into())
        .stack_size(CONN_STACK_BYTES)
        .spawn(move || {
            if let Err(e) = d.handle(stream, &mut conn) {
                tracing::warn!("{peer}: {e}");
            }
            d.connections.fetch_sub(1, Ordering::SeqCst);
        });
    if let Err(e) = spawned {
        tracing::warn!("cannot start a connection thread: {e}");
        daemon.connections.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Daemon {
    fn new(
        listener: &TcpListener,
        cfg: ServeConfig,
        shared: &Shared,
    ) -> Result<Daemon, EngineError> {
        let accounts = shared.accounts(&cfg.root, cfg.token.clone())?;
        let audit = shared.audit_log()?;
        let fds = crate::guard::raise_fd_limit();
        tracing::info!("{} accounts; up to {fds} open files", accounts.len());
        let port = listener
            .local_addr()
            .map_err(|e| EngineError::io("reading the listening address", e))?
            .port();
        Ok(Daemon {
            cfg,
            accounts: Arc::new(Live::new(accounts)),
            pending: Mutex::new(HashMap::new()),
            connections: AtomicUsize::new(0),
            port,
            guard: Guard::new(shared.limits),
            dog: Watchdog::start().map_err(|e| EngineError::io("starting the watchdog", e))?,
            audit: Auditor::new(audit),
            drain: Drain::new(),
            bwlimit: shared.bwlimit.map(crate::bwlimit::Limiter::new),
        })
    }

    /// Answers `Busy` with `why` and audits the refusal.
    fn refuse(&self, stream: TcpStream, peer: &str, why: &str) {
        // In clear text, before any TLS: the client learns why it was turned away.
        let mut w = FrameWriter::new(Link::plain(stream));
        let _ = w.send(&ErrorFrame::new(ErrorCode::Busy, why));
        self.audit
            .refused(peer, ErrorCode::Busy.name(), Duration::ZERO);
    }

    fn handle(&self, stream: TcpStream, conn: &mut Conn) -> Result<(), EngineError> {
        // The watchdog armed on the socket covers the TLS handshake too.
        let (mut reader, mut writer) = accept::incoming(stream, &self.cfg.tls)?;
        let first = accept::read_first(&mut reader, &mut writer);
        if conn.armed.fired() {
            self.audit
                .refused(reader.peer(), "Timeout", conn.started.elapsed());
            return Err(EngineError::Handshake {
                peer: reader.peer().to_string(),
                message: "no first frame within the handshake deadline".into(),
            });
        }
        let Some(first) = first? else {
            return Ok(());
        };
        accept::admit(&reader, &mut writer, &self.cfg.tls)?;
        match first {
            Frame::Join(join) => self.join(&join, reader, writer, conn),
            hello @ Frame::Hello(_) => self.control(hello, &mut reader, &mut writer, conn),
            other => {
                let msg = format!("expected Hello or Join, got {}", other.frame_type().name());
                let _ = writer.send(&ErrorFrame::new(ErrorCode::BadFrame, &msg));
                Err(EngineError::Unexpected {
                    peer: reader.peer().to_string(),
                    got: other.frame_type().name().to_string(),
                    state: "waiting for Hello or Join".into(),
                })
            }
        }
    }

    /// A control connection: runs its session, reports a failure to the client in
    /// one `Error` frame unless the session already sent it, and audits it.
    fn control(
        &self,
        hello: Frame,
        reader: &mut FrameReader,
        writer: &mut FrameWriter,
        conn: &mut Conn,
    ) -> Result<(), EngineError> {
        let told = Cell::new(false);
        let mut rec = Record::new(SystemTime::now(), reader.peer());
        let result = self.session(hello, reader, writer, &told, conn, &mut rec);
        if let Err(e) = &result {
            if !told.get() {
                let msg = match &conn.root {
                    Some(root) => crate::sink::redact_root(&wire_message(e), root),
                    None => wire_message(e),
                };
                let _ = writer.send(&ErrorFrame::new(e.code(), msg));
            }
        }
        rec.result(result.as_ref().err().map(EngineError::code));
        if conn.armed.fired() {
            conn.outcome = Some("Timeout");
        }
        if let Some(outcome) = conn.outcome {
            rec.result = outcome;
        }
        rec.stamp(SystemTime::now());
        rec.took(conn.started.elapsed());
        self.audit.write(&rec);
        // The session is over: its control reader, which holds a handle of this socket,
        // ends even when the client never closes its side (a stopped client would
        // otherwise keep that thread and the socket for as long as it lives).
        writer.end();
        result
    }
}

/// Another handle of a link's socket, for the watchdog (which only shuts sockets down).
fn tcp_clone(link: &Link) -> Result<TcpStream, EngineError> {
    link.stream()
        .try_clone()
        .map_err(|e| EngineError::io("cloning a socket", e))
}
/// The text of the `Error` frame for `e`: a refusal built as [`EngineError::Remote`]
/// goes out as its own message, not as "the peer reported ...".
fn wire_message(e: &EngineError) -> String {
    match e {
        EngineError::Remote { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests;
