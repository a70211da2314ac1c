//! `sluice serve`: accepts sessions and serves files under a confined root.
//!
//! Every connection starts with one frame: `Hello` opens a control connection (a new
//! session), `Join` attaches a data connection to a session that is waiting for its
//! streams. A malformed frame, a wrong secret or a failed session ends that connection
//! only; the daemon keeps serving.

use crate::control::{spawn_reader, spawn_writer, Wiring};
use crate::error::EngineError;
use crate::fs::{EntryKind, Root};
use crate::runtime::Runtime;
use crate::session::{self, source_start, DestMap, HANDSHAKE_TIMEOUT};
use crate::source::ScanSpec;
use crate::stats::Stats;
use crate::transport::{self, ChunkReceiver, ChunkSender, FrameReader, FrameWriter};
use crate::SessionOptions;
use crossbeam_channel::{bounded, Sender};
use sluice_placement::Role as PlanRole;
use sluice_wire::{
    Accept, Addresses, Direction, ErrorCode, ErrorFrame, Frame, JoinTable, StreamAddress, Token,
    MAX_STREAMS,
};
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
    streams: Sender<(u16, TcpStream)>,
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
        let stream = match conn {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                continue;
            }
        };
        if daemon.connections.fetch_add(1, Ordering::SeqCst) >= daemon.cfg.max_connections {
            daemon.connections.fetch_sub(1, Ordering::SeqCst);
            let mut w = FrameWriter::new(stream);
            let _ = w.send(&ErrorFrame::new(
                ErrorCode::Busy,
                "too many connections; try again later",
            ));
            continue;
        }
        let d = Arc::clone(&daemon);
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
    Ok(())
}

impl Daemon {
    fn handle(&self, stream: TcpStream) -> Result<(), EngineError> {
        let _ = transport::tune(&stream, false);
        let writer_stream = stream
            .try_clone()
            .map_err(|e| EngineError::io("cloning a socket", e))?;
        let mut writer = FrameWriter::new(writer_stream);
        let mut reader = FrameReader::new(stream);
        let _ = reader.set_timeout(Some(HANDSHAKE_TIMEOUT));
        let first = match reader.next("waiting for the first frame") {
            Ok(Some(f)) => f,
            Ok(None) => return Ok(()),
            Err(e) => {
                let _ = writer.send(&ErrorFrame::new(e.code(), e.to_string()));
                return Err(e);
            }
        };
        match first {
            Frame::Join(join) => self.join(join, reader, writer),
            hello @ Frame::Hello(_) => {
                let told = std::cell::Cell::new(false);
                let result = self.session(hello, &mut reader, &mut writer, &told);
                if let Err(e) = &result {
                    // One Error frame, then close: only if the session did not send it.
                    if !told.get() {
                        let msg = crate::sink::redact_root(&wire_message(e), &self.root);
                        let _ = writer.send(&ErrorFrame::new(e.code(), msg));
                    }
                }
                result
            }
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

    /// A data connection presenting a session's secret.
    fn join(
        &self,
        join: sluice_wire::Join,
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
        let result = p.table.handle(&join, &mut out);
        let streams = p.streams.clone();
        drop(pending);
        writer.send_raw(&out)?;
        let joined = result.map_err(|e| EngineError::Handshake {
            peer: reader.peer().to_string(),
            message: e.to_string(),
        })?;
        let stream = reader.into_inner()?;
        let _ = stream.set_read_timeout(None);
        let _ = transport::tune(&stream, true);
        if let (Ok(peer), Ok(local)) = (stream.peer_addr(), stream.local_addr()) {
            tracing::info!(
                "session {}: data connection {} from {peer} on {local}",
                join.session_id,
                joined.stream_index
            );
        }
        let _ = streams.send((joined.stream_index, stream));
        Ok(())
    }

    /// A control connection: handshake, open, accept, wait for streams, run.
    /// `told` is set when the peer has already been sent the `Error` for the failure.
    fn session(
        &self,
        hello: Frame,
        reader: &mut FrameReader,
        writer: &mut FrameWriter,
        told: &std::cell::Cell<bool>,
    ) -> Result<(), EngineError> {
        // The handshake state machine answers its own failures with an Error frame.
        let est = session::server_handshake(hello, reader, writer, self.cfg.token.clone())
            .inspect_err(|e| told.set(matches!(e, EngineError::Handshake { .. })))?;
        let open = match reader.next("waiting for Open")? {
            Some(Frame::Open(o)) => o,
            Some(other) => {
                return Err(EngineError::Unexpected {
                    peer: reader.peer().to_string(),
                    got: other.frame_type().name().to_string(),
                    state: "waiting for Open".into(),
                })
            }
            None => return Ok(()),
        };
        let bad_path = |msg: String| EngineError::Refused {
            code: ErrorCode::PathOutsideRoot,
            message: msg,
        };
        // Validate the path before anything is allocated or created.
        let raw = open.path.clone();
        let runtime = &self.cfg.runtime;
        let chunk_bytes = open.options.chunk_bytes.min(runtime.chunk_bytes());
        let streams = open.options.streams.clamp(1, MAX_STREAMS);
        let opts = SessionOptions {
            streams,
            chunk_bytes,
            io_threads: self.cfg.io_threads,
            read_depth: self.cfg.read_depth,
            resume: open.options.resume,
            no_clobber: open.options.no_clobber,
            update: open.options.update,
            fsync: open.options.fsync,
            verify: open.options.verify,
            recursive: open.options.recursive,
            // The client chooses per chunk on a pull too: `auto` when it asked for any.
            compress: match open.options.compress {
                sluice_wire::Compression::None => crate::CompressMode::None,
                _ => crate::CompressMode::Auto,
            },
            pipeline: crate::Pipeline::Auto,
            direct: open.options.direct,
            chunk_acks: est
                .capabilities
                .contains(sluice_wire::Capabilities::CHUNK_ACKS),
        };
        let role = match open.direction {
            Direction::Push => {
                let root = &self.root;
                let dest = DestMap::for_destination(&raw, |p| {
                    root.entry_metadata(p)
                        .is_ok_and(|m| m.kind == crate::fs::EntryKind::Dir)
                })
                .map_err(|m| bad_path(format!("destination {raw:?}: {m}")))?;
                if let Some(base) = &dest.base {
                    self.root.create_dir_all(base, 0o755)?;
                }
                Role::Sink {
                    root: Arc::clone(&self.root),
                    dest,
                }
            }
            Direction::Pull => {
                let (start, prefix) =
                    source_start(&raw).map_err(|m| bad_path(format!("source {raw:?}: {m}")))?;
                if let Some(s) = &start {
                    if !self.root.exists(s)? {
                        return Err(EngineError::Refused {
                            code: ErrorCode::NotFound,
                            message: format!("{raw:?} does not exist on the server"),
                        });
                    }
                    // Contents of a file: refused, as `cp` and rsync refuse `file/`.
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
                Role::Source(vec![ScanSpec {
                    root: Arc::clone(&self.root),
                    start,
                    prefix,
                }])
            }
        };
        let accept = Accept {
            session_id: u64::from_le_bytes(session::random()?),
            session_secret: session::random()?,
            channels: 1,
            streams_per_channel: streams,
            chunk_bytes,
        };
        let (tx, rx) = bounded(usize::from(streams));
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(
                accept.session_id,
                Pending {
                    table: JoinTable::new(&accept, est.join_key(&accept.session_secret)),
                    streams: tx,
                },
            );
        let net_role = match open.direction {
            Direction::Push => PlanRole::NetRecv,
            Direction::Pull => PlanRole::NetSend,
        };
        let plan = runtime.plan();
        let addresses = stream_addresses(
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
        );
        session::send_accept(writer, &est, &accept, addresses)?;
        // Collect the data connections.
        let mut conns: Vec<Option<TcpStream>> = (0..streams).map(|_| None).collect();
        let deadline = std::time::Instant::now() + HANDSHAKE_TIMEOUT;
        let mut got = 0;
        while got < usize::from(streams) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok((i, s)) => {
                    if let Some(slot) = conns.get_mut(usize::from(i)) {
                        if slot.replace(s).is_none() {
                            got += 1;
                        }
                    }
                }
                Err(_) => break,
            }
        }
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&accept.session_id);
        if got < usize::from(streams) {
            return Err(EngineError::Handshake {
                peer: reader.peer().to_string(),
                message: format!("only {got} of {streams} data connections joined in time"),
            });
        }
        let conns: Vec<TcpStream> = conns.into_iter().flatten().collect();
        let _ = reader.set_timeout(None);
        let control_stream = writer.stream_clone()?;
        let reader = std::mem::replace(reader, FrameReader::new(writer.stream_clone()?));
        let stats = Arc::new(Stats::new());
        let conns = Connections {
            reader,
            control_stream,
            data: conns,
        };
        // run_role reports its own failure on the control connection.
        told.set(true);
        let result = run_role(role, runtime, &opts, chunk_bytes, conns, &stats);
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
}

/// The text of the `Error` frame for `e`: a refusal built as [`EngineError::Remote`]
/// goes out as its own message, not as "the peer reported ...".
fn wire_message(e: &EngineError) -> String {
    match e {
        EngineError::Remote { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

/// Which half of the session this side runs.
pub(crate) enum Role {
    /// Receive into `dest` under `root`.
    Sink {
        /// The confined directory written to.
        root: Arc<Root>,
        /// Where entries go under it.
        dest: DestMap,
    },
    /// Send these.
    Source(Vec<ScanSpec>),
}

/// A session's connections once every data connection has joined.
pub(crate) struct Connections {
    /// The control connection's reading half.
    pub reader: FrameReader,
    /// A handle of the control connection for the writer thread.
    pub control_stream: TcpStream,
    /// The data connections in stream order.
    pub data: Vec<TcpStream>,
}

/// Runs one side of a session once its connections are up, counting into `stats`.
pub(crate) fn run_role(
    role: Role,
    runtime: &Arc<Runtime>,
    opts: &SessionOptions,
    chunk_bytes: u32,
    conns: Connections,
    stats: &Arc<Stats>,
) -> Result<(), EngineError> {
    let Connections {
        reader,
        control_stream,
        data: conns,
    } = conns;
    // This thread is the session's master (seed 000's MT): it and the control-plane
    // threads it starts (reader, writer, scanner) run where the plan puts control 0.
    runtime.pin_current(PlanRole::Control, 0);
    let events =
        spawn_reader(reader).map_err(|e| EngineError::io("starting the control reader", e))?;
    let (control, writer_thread) = spawn_writer(control_stream)
        .map_err(|e| EngineError::io("starting the control writer", e))?;
    let root = match &role {
        Role::Sink { root, .. } => Some(Arc::clone(root)),
        Role::Source(specs) => specs.first().map(|s| Arc::clone(&s.root)),
    };
    let wiring = Wiring {
        control: &control,
        events: &events,
        stats,
    };
    let result = match role {
        Role::Sink { root, dest } => {
            let conns = conns
                .into_iter()
                .map(|c| ChunkReceiver::new(c, chunk_bytes))
                .collect();
            crate::sink::run(runtime, root, dest, opts, wiring, conns)
        }
        Role::Source(spec) => {
            let conns = conns.into_iter().map(ChunkSender::new).collect();
            crate::source::run(runtime, spec, opts, wiring, conns)
        }
    };
    if let Err(e) = &result {
        let msg = match &root {
            Some(r) => crate::sink::redact_root(&e.to_string(), r),
            None => e.to_string(),
        };
        control.send(Frame::Error(ErrorFrame::new(e.code(), msg)));
    }
    drop(control);
    let _ = writer_thread.join();
    result
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
