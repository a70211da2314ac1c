//! `sluice serve`: accepts sessions and serves files under a confined root.
//!
//! Every connection starts with one frame: `Hello` opens a control connection (a new
//! session), `Join` attaches a data connection to a session that is waiting for its
//! streams. A malformed frame, a wrong secret or a failed session ends that connection
//! only; the daemon keeps serving. The protocol's server side is [`crate::net::accept`];
//! a session, once its connections are up, runs as `session::run_role` does it.

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
    Accept, Addresses, Capabilities, Direction, ErrorCode, ErrorFrame, Established, Frame, Join,
    JoinTable, Open, StreamAddress, Token,
};
use std::cell::Cell;
use std::collections::HashMap;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

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

/// Where each of `streams` data connections should go: data connection `i` is served
/// by a thread of channel `channel_of(i)`, whose NICs are `nics_of(channel)`; the
/// channel's streams take its NICs that have an address in `nic_addresses` in turn.
/// Streams of a channel with no such NIC get no entry (they go where the client
/// dialled).
pub fn stream_addresses<'a>(
    streams: u16,
    channel_of: impl Fn(u16) -> u32,
    nics_of: impl Fn(u32) -> &'a [String],
    nic_addresses: &[(String, std::net::IpAddr)],
    port: u16,
) -> Addresses {
    let mut taken: HashMap<u32, usize> = HashMap::new();
    let mut entries = Vec::new();
    for i in 0..streams {
        let channel = channel_of(i);
        let ips: Vec<std::net::IpAddr> = nics_of(channel)
            .iter()
            .filter_map(|n| nic_addresses.iter().find(|(name, _)| name == n))
            .map(|(_, ip)| *ip)
            .collect();
        if ips.is_empty() {
            continue;
        }
        let k = taken.entry(channel).or_default();
        entries.push(StreamAddress {
            stream_index: i,
            addr: std::net::SocketAddr::new(ips[*k % ips.len()], port),
        });
        *k += 1;
    }
    Addresses { entries }
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
        let live = shared
            .accounts_file
            .as_ref()
            .map(|_| Arc::clone(&daemon.accounts));
        crate::drain::handle_signals(Arc::clone(&listener), live, Arc::clone(&daemon.drain))
            .map_err(|e| EngineError::io("installing the signal handlers", e))?;
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
        result
    }

    /// A data connection presenting a session's secret: answered against that
    /// session's join table, then handed to the session's control thread.
    fn join(
        &self,
        join: &Join,
        reader: FrameReader,
        mut writer: FrameWriter,
        conn: &mut Conn,
    ) -> Result<(), EngineError> {
        let peer = reader.peer().to_string();
        let joined = self.join_session(join, reader, &mut writer, conn);
        if let Err(e) = &joined {
            let result = conn.outcome.unwrap_or(e.code().name());
            self.audit.refused(&peer, result, conn.started.elapsed());
        }
        joined
    }

    /// [`Daemon::join`] without the audit.
    fn join_session(
        &self,
        join: &Join,
        reader: FrameReader,
        writer: &mut FrameWriter,
        conn: &mut Conn,
    ) -> Result<(), EngineError> {
        let mut out = Vec::new();
        let mut pending = self
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(p) = pending.get_mut(&join.session_id) else {
            drop(pending);
            let _ = writer.send(&ErrorFrame::new(ErrorCode::JoinRejected, "no such session"));
            return Err(EngineError::Handshake {
                peer: reader.peer().to_string(),
                message: format!("join for unknown session {}", join.session_id),
            });
        };
        if p.encrypted && !reader.is_tls() {
            drop(pending);
            return accept::refuse_clear(&reader, writer, accept::ENCRYPTED_SESSION);
        }
        let joined = p.table.handle(join, &mut out);
        let streams = p.streams.clone();
        drop(pending);
        let (index, stream) = accept::finish_join(joined, &out, reader, writer)?;
        conn.armed.disarm();
        if conn.armed.fired() {
            conn.outcome = Some("Timeout");
            return Err(EngineError::Aborted(
                "the join came after the handshake deadline".into(),
            ));
        }
        if let (Ok(peer), Ok(local)) = (stream.stream().peer_addr(), stream.stream().local_addr()) {
            tracing::info!(
                "session {}: data connection {index} from {peer} on {local}",
                join.session_id
            );
        }
        let _ = streams.send((index, stream));
        Ok(())
    }

    /// A control connection: handshake, open, rights and limits, then the session.
    /// `told` is set when the peer has already been sent the `Error` for the failure.
    fn session(
        &self,
        hello: Frame,
        reader: &mut FrameReader,
        writer: &mut FrameWriter,
        told: &Cell<bool>,
        conn: &mut Conn,
        rec: &mut Record,
    ) -> Result<(), EngineError> {
        // The handshake answers its own failures with an Error frame.
        let accounts = self.accounts.current();
        let now = SystemTime::now();
        let proved = &mut rec.identity;
        let admitted = server_handshake(hello, reader, writer, &accounts, now, proved)
            .inspect_err(|e| {
                told.set(matches!(
                    e,
                    EngineError::Handshake { .. } | EngineError::HandshakeRefused { .. }
                ));
            })?;
        drop(accounts);
        let account = admitted.account;
        conn.root = Some(Arc::clone(&account.root));
        if let Some(t) = conn.ticket.as_mut() {
            t.authenticated();
        }
        let Some(open) = accept::read_open(reader)? else {
            return Ok(());
        };
        conn.armed.disarm();
        rec.open(open.direction, &open.path);
        allowed(&account, open.direction)?;
        if self.drain.draining() {
            return Err(busy("the daemon is shutting down; try again later".into()));
        }
        let _running = self.guard.session().map_err(|r| busy(r.0))?;
        let est = admitted.established;
        self.run(&est, &open, &account, reader, writer, told, conn, rec)
    }

    /// Runs an opened session: accept, wait for streams, run the role on a thread of
    /// its own, count its totals into `rec`.
    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        est: &Established,
        open: &Open,
        account: &Account,
        reader: &mut FrameReader,
        writer: &mut FrameWriter,
        told: &Cell<bool>,
        conn: &mut Conn,
        rec: &mut Record,
    ) -> Result<(), EngineError> {
        let chunk_acks = est.capabilities.contains(Capabilities::CHUNK_ACKS);
        let mut opts = SessionOptions::served(&open.options, self.server_side(), chunk_acks);
        // The path is checked before anything is allocated or created.
        let role = role_for(&account.root, open)?;
        // A third-party copy's source takes the destination's session from `Delegate`.
        let delegate = match open.direction {
            Direction::Deliver => Some(self.delegate(reader, &mut opts)?),
            Direction::Push | Direction::Pull => None,
        };
        let accept = accept::new_accept(opts.streams, opts.chunk_bytes)?;
        let stats = Arc::new(Stats::new());
        let sends = open.direction != Direction::Push;
        let what = match &delegate {
            Some(d) => format!("delivery to session {}", d.session_id),
            None => format!("session {}", accept.session_id),
        };
        crate::session::state_threads_beyond_plan(&self.cfg.runtime, &opts, sends, &stats, &what);
        let about = describe(&what, rec);
        let watched = self.dog.watch(
            about,
            vec![tcp_clone(&writer.stream_clone()?)?],
            crate::guard::idle_timeout(self.guard.limits(), sends, chunk_acks),
        );
        let data = match &delegate {
            Some(d) => {
                let data = deliver::dial(d, self.cfg.tls.encrypt())?;
                // Only `Accept`: the data connections went elsewhere, no `Addresses`.
                writer.send(&Frame::Accept(accept.clone()))?;
                data
            }
            None => self.gather(est, &accept, open.direction, reader.peer(), writer)?,
        };
        watched.add(data.iter().filter_map(|d| tcp_clone(d).ok()).collect());
        let _ = reader.set_timeout(None);
        let conns = Connections {
            reader: std::mem::replace(reader, FrameReader::new(writer.stream_clone()?)),
            control_stream: writer.stream_clone()?,
            data,
        };
        // run_role reports its own failure on the control connection.
        told.set(true);
        let runtime = &self.cfg.runtime;
        let result = std::thread::scope(|s| {
            std::thread::Builder::new()
                .name("session".into())
                .spawn_scoped(s, || {
                    run_role(role, runtime, &opts, opts.chunk_bytes, conns, &stats)
                })
                .map_err(|e| EngineError::io("starting a session thread", e))?
                .join()
                .unwrap_or_else(|_| Err(EngineError::Aborted("the session thread panicked".into())))
        });
        let s = stats.summary(runtime.plan());
        (rec.bytes, rec.files) = (s.bytes, s.files);
        conn.outcome = match (watched.aborted(), watched.idled()) {
            (true, _) => Some(ErrorCode::Cancelled.name()),
            (false, true) => Some("IdleTimeout"),
            _ => None,
        };
        tracing::info!(
            "{what} done: {} files, {} bytes in {:.2} s, {} failed, io {}",
            s.files,
            s.bytes,
            s.seconds,
            s.files_failed,
            s.io_mode
        );
        result
    }

    /// The `Delegate` that follows `Open { direction: Deliver }`, checked, with the
    /// destination's session shape taken into `opts`.
    fn delegate(
        &self,
        reader: &mut FrameReader,
        opts: &mut SessionOptions,
    ) -> Result<sluice_wire::Delegate, EngineError> {
        let delegate = deliver::read_delegate(reader)?;
        deliver::check(&delegate, self.cfg.runtime.chunk_bytes())?;
        opts.streams = delegate.streams();
        opts.chunk_bytes = delegate.chunk_bytes;
        Ok(delegate)
    }

    /// What the daemon decides for every session.
    fn server_side(&self) -> ServerSide {
        ServerSide {
            slot_bytes: self.cfg.runtime.chunk_bytes(),
            io_threads: self.cfg.io_threads,
            read_depth: self.cfg.read_depth,
        }
    }

    /// Registers the session for its joins, sends `Accept` (with the address of each
    /// data connection's NIC), and waits for every data connection to join.
    fn gather(
        &self,
        est: &Established,
        accept: &Accept,
        direction: Direction,
        peer: &str,
        writer: &mut FrameWriter,
    ) -> Result<Vec<Link>, EngineError> {
        let streams = accept.streams();
        let (tx, rx) = bounded(usize::from(streams));
        let table = JoinTable::new(accept, est.join_key(&accept.session_secret));
        let pending = Pending {
            table,
            streams: tx,
            encrypted: writer.is_tls(),
        };
        self.pending_map().insert(accept.session_id, pending);
        let addresses = self.addresses(streams, direction);
        let sent = accept::send_accept(writer, est, accept, addresses);
        let data = sent.and_then(|()| collect_streams(&rx, streams, peer));
        self.pending_map().remove(&accept.session_id);
        data
    }

    fn pending_map(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Pending>> {
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Where each data connection should go: the NIC of the channel whose network
    /// thread serves it.
    fn addresses(&self, streams: u16, direction: Direction) -> Addresses {
        let runtime = &self.cfg.runtime;
        let net_role = match direction {
            Direction::Push => PlanRole::NetRecv,
            Direction::Pull | Direction::Deliver => PlanRole::NetSend,
        };
        let plan = runtime.plan();
        stream_addresses(
            streams,
            |i| runtime.pool_for(net_role, u32::from(i)).0,
            |c| {
                plan.channels
                    .iter()
                    .find(|ch| ch.id == c)
                    .map_or(&[][..], |ch| &ch.nics[..])
            },
            &self.cfg.nic_addresses,
            self.port,
        )
    }
}

/// Another handle of a link's socket, for the watchdog (which only shuts sockets down).
fn tcp_clone(link: &Link) -> Result<TcpStream, EngineError> {
    link.stream()
        .try_clone()
        .map_err(|e| EngineError::io("cloning a socket", e))
}

/// The data connections of a session in stream order, as their joins arrive on `rx`,
/// within [`HANDSHAKE_TIMEOUT`].
fn collect_streams(
    rx: &Receiver<(u16, Link)>,
    streams: u16,
    peer: &str,
) -> Result<Vec<Link>, EngineError> {
    let mut conns: Vec<Option<Link>> = (0..streams).map(|_| None).collect();
    let deadline = std::time::Instant::now() + HANDSHAKE_TIMEOUT;
    let mut got = 0;
    while got < usize::from(streams) {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let Ok((i, s)) = rx.recv_timeout(left) else {
            break;
        };
        // The join table admits each index once; a duplicate is not counted.
        if let Some(slot) = conns.get_mut(usize::from(i)) {
            if slot.replace(s).is_none() {
                got += 1;
            }
        }
    }
    if got < usize::from(streams) {
        return Err(EngineError::Handshake {
            peer: peer.to_string(),
            message: format!("only {got} of {streams} data connections joined in time"),
        });
    }
    let conns: Vec<Link> = conns.into_iter().flatten().collect();
    debug_assert_eq!(conns.len(), usize::from(streams));
    Ok(conns)
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
mod tests {
    use super::*;
    use std::net::IpAddr;

    #[test]
    fn each_stream_gets_a_nic_of_the_channel_that_serves_it_in_turn() {
        // Streams alternate over two channels; channel 0 drives eth1, channel 1 drives
        // eth2 and eth3 (eth3 without an address); channel 2 drives nothing.
        let nics: [Vec<String>; 3] = [
            vec!["eth1".into()],
            vec!["eth2".into(), "eth3".into(), "eth4".into()],
            vec![],
        ];
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let addrs = vec![
            ("eth1".to_string(), ip("10.0.1.2")),
            ("eth2".to_string(), ip("10.0.2.2")),
            ("eth4".to_string(), ip("fd00::4")),
        ];
        let a = stream_addresses(
            6,
            |i| u32::from(i % 2),
            |c| &nics[c as usize][..],
            &addrs,
            7878,
        );
        let got: Vec<String> = (0..6).map(|i| a.of(i).unwrap().to_string()).collect();
        assert_eq!(
            got,
            [
                "10.0.1.2:7878",
                "10.0.2.2:7878",
                "10.0.1.2:7878",
                "[fd00::4]:7878",
                "10.0.1.2:7878",
                "10.0.2.2:7878",
            ]
        );
        // A channel without a NIC that has an address: its streams get no entry.
        let a = stream_addresses(
            3,
            |i| if i == 1 { 2 } else { 0 },
            |c| &nics[c as usize][..],
            &addrs,
            1,
        );
        assert_eq!(
            a.entries.iter().map(|e| e.stream_index).collect::<Vec<_>>(),
            [0, 2]
        );
        assert!(
            stream_addresses(4, |_| 0, |c| &nics[c as usize][..], &[], 1)
                .entries
                .is_empty()
        );
    }
}
