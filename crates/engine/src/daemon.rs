//! `sluice serve`: accepts sessions and serves files under a confined root.
//!
//! Every connection starts with one frame: `Hello` opens a control connection (a new
//! session), `Join` attaches a data connection to a session that is waiting for its
//! streams. A malformed frame, a wrong secret or a failed session ends that connection
//! only; the daemon keeps serving. The protocol's server side is [`crate::net::accept`];
//! a session, once its connections are up, runs as `session::run_role` does it.

use crate::error::EngineError;
use crate::fs::{EntryKind, Root};
use crate::net::accept;
use crate::net::tls::{Link, ServerTls};
use crate::options::{ServerSide, SessionOptions};
use crate::runtime::Runtime;
use crate::session::{self, run_role, source_start, Connections, DestMap, Role, HANDSHAKE_TIMEOUT};
use crate::source::ScanSpec;
use crate::stats::Stats;
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
    root: Arc<Root>,
    pending: Mutex<HashMap<u64, Pending>>,
    connections: AtomicUsize,
    /// The port the daemon listens on (advertised with its NICs' addresses).
    port: u16,
}

/// Serves forever on `listener` (bound by the caller, so it can print the address).
///
/// # Errors
/// The root cannot be opened, or accepting fails persistently.
pub fn serve(listener: TcpListener, cfg: ServeConfig) -> Result<(), EngineError> {
    let root = Arc::new(Root::open(&cfg.root)?);
    let port = listener
        .local_addr()
        .map_err(|e| EngineError::io("reading the listening address", e))?
        .port();
    let daemon = Arc::new(Daemon {
        cfg,
        root,
        pending: Mutex::new(HashMap::new()),
        connections: AtomicUsize::new(0),
        port,
    });
    for conn in listener.incoming() {
        match conn {
            Ok(stream) => admit(&daemon, stream),
            Err(e) => tracing::warn!("accept failed: {e}"),
        }
    }
    Ok(())
}

/// Serves `stream` on a thread of its own, or refuses it (`Busy`) when the daemon
/// already serves `max_connections`.
fn admit(daemon: &Arc<Daemon>, stream: TcpStream) {
    if daemon.connections.fetch_add(1, Ordering::SeqCst) >= daemon.cfg.max_connections {
        daemon.connections.fetch_sub(1, Ordering::SeqCst);
        let mut w = FrameWriter::new(Link::plain(stream));
        let _ = w.send(&ErrorFrame::new(
            ErrorCode::Busy,
            "too many connections; try again later",
        ));
        return;
    }
    let d = Arc::clone(daemon);
    let spawned = std::thread::Builder::new()
        .name("conn".into())
        .spawn(move || {
            let peer = transport::peer_name(&stream);
            if let Err(e) = d.handle(stream) {
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
    fn handle(&self, stream: TcpStream) -> Result<(), EngineError> {
        let (mut reader, mut writer) = accept::incoming(stream, &self.cfg.tls)?;
        let Some(first) = accept::read_first(&mut reader, &mut writer)? else {
            return Ok(());
        };
        accept::admit(&reader, &mut writer, &self.cfg.tls)?;
        match first {
            Frame::Join(join) => self.join(&join, reader, writer),
            hello @ Frame::Hello(_) => self.control(hello, &mut reader, &mut writer),
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

    /// A control connection: runs its session and reports a failure to the client in
    /// one `Error` frame, unless the session already sent it.
    fn control(
        &self,
        hello: Frame,
        reader: &mut FrameReader,
        writer: &mut FrameWriter,
    ) -> Result<(), EngineError> {
        let told = Cell::new(false);
        let result = self.session(hello, reader, writer, &told);
        if let Err(e) = &result {
            if !told.get() {
                let msg = crate::sink::redact_root(&wire_message(e), &self.root);
                let _ = writer.send(&ErrorFrame::new(e.code(), msg));
            }
        }
        result
    }

    /// A data connection presenting a session's secret: answered against that
    /// session's join table, then handed to the session's control thread.
    fn join(
        &self,
        join: &Join,
        reader: FrameReader,
        mut writer: FrameWriter,
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
            return accept::refuse_clear(&reader, &mut writer, accept::ENCRYPTED_SESSION);
        }
        let joined = p.table.handle(join, &mut out);
        let streams = p.streams.clone();
        drop(pending);
        let (index, stream) = accept::finish_join(joined, &out, reader, &mut writer)?;
        if let (Ok(peer), Ok(local)) = (stream.stream().peer_addr(), stream.stream().local_addr()) {
            tracing::info!(
                "session {}: data connection {index} from {peer} on {local}",
                join.session_id
            );
        }
        let _ = streams.send((index, stream));
        Ok(())
    }

    /// A control connection: handshake, open, accept, wait for streams, run.
    /// `told` is set when the peer has already been sent the `Error` for the failure.
    fn session(
        &self,
        hello: Frame,
        reader: &mut FrameReader,
        writer: &mut FrameWriter,
        told: &Cell<bool>,
    ) -> Result<(), EngineError> {
        // The handshake state machine answers its own failures with an Error frame.
        let est = accept::server_handshake(hello, reader, writer, self.cfg.token.clone())
            .inspect_err(|e| {
                told.set(matches!(
                    e,
                    EngineError::Handshake { .. } | EngineError::HandshakeRefused { .. }
                ));
            })?;
        let Some(open) = accept::read_open(reader)? else {
            return Ok(());
        };
        let chunk_acks = est.capabilities.contains(Capabilities::CHUNK_ACKS);
        let opts = SessionOptions::served(&open.options, self.server_side(), chunk_acks);
        // The path is checked before anything is allocated or created.
        let role = self.role_for(&open)?;
        let accept = accept::new_accept(opts.streams, opts.chunk_bytes)?;
        let stats = Arc::new(Stats::new());
        let sends = open.direction == Direction::Pull;
        let what = format!("session {}", accept.session_id);
        session::state_threads_beyond_plan(&self.cfg.runtime, &opts, sends, &stats, &what);
        let data = self.gather(&est, &accept, open.direction, reader.peer(), writer)?;
        let _ = reader.set_timeout(None);
        let conns = Connections {
            reader: std::mem::replace(reader, FrameReader::new(writer.stream_clone()?)),
            control_stream: writer.stream_clone()?,
            data,
        };
        // run_role reports its own failure on the control connection.
        told.set(true);
        let runtime = &self.cfg.runtime;
        let result = run_role(role, runtime, &opts, opts.chunk_bytes, conns, &stats);
        let s = stats.summary(runtime.plan());
        tracing::info!(
            "session {} done: {} files, {} bytes in {:.2} s, {} failed, io {}",
            accept.session_id,
            s.files,
            s.bytes,
            s.seconds,
            s.files_failed,
            s.io_mode
        );
        result
    }

    /// What the daemon decides for every session.
    fn server_side(&self) -> ServerSide {
        ServerSide {
            slot_bytes: self.cfg.runtime.chunk_bytes(),
            io_threads: self.cfg.io_threads,
            read_depth: self.cfg.read_depth,
        }
    }

    /// The half of the session this daemon runs for `open`: a sink for a push, a
    /// source for a pull, with the path checked under the root.
    fn role_for(&self, open: &Open) -> Result<Role, EngineError> {
        match open.direction {
            Direction::Push => self.sink_role(&open.path),
            Direction::Pull => self.source_role(&open.path),
        }
    }

    /// Receives under the destination typed as `raw` (its directory created).
    fn sink_role(&self, raw: &str) -> Result<Role, EngineError> {
        let root = &self.root;
        let dest = DestMap::for_destination(raw, |p| {
            root.entry_metadata(p)
                .is_ok_and(|m| m.kind == EntryKind::Dir)
        })
        .map_err(|m| bad_path(format!("destination {raw:?}: {m}")))?;
        if let Some(base) = &dest.base {
            self.root.create_dir_all(base, 0o755)?;
        }
        Ok(Role::Sink {
            root: Arc::clone(&self.root),
            dest,
        })
    }

    /// Sends the source typed as `raw`, which must exist (and be a directory when its
    /// contents are asked for: `cp` and rsync refuse `file/`).
    fn source_role(&self, raw: &str) -> Result<Role, EngineError> {
        let (start, prefix) =
            source_start(raw).map_err(|m| bad_path(format!("source {raw:?}: {m}")))?;
        if let Some(s) = &start {
            if !self.root.exists(s)? {
                return Err(EngineError::Refused {
                    code: ErrorCode::NotFound,
                    message: format!("{raw:?} does not exist on the server"),
                });
            }
            let kind = self.root.entry_metadata(s)?.kind;
            if prefix.is_none() && !matches!(kind, EntryKind::Dir | EntryKind::Symlink) {
                return Err(EngineError::Refused {
                    code: ErrorCode::NotFound,
                    message: format!(
                        "{raw:?} is not a directory, but the trailing '/' asks for its contents"
                    ),
                });
            }
        }
        Ok(Role::Source(vec![ScanSpec {
            root: Arc::clone(&self.root),
            start,
            prefix,
        }]))
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
            Direction::Pull => PlanRole::NetSend,
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

fn bad_path(message: String) -> EngineError {
    EngineError::Refused {
        code: ErrorCode::PathOutsideRoot,
        message,
    }
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
