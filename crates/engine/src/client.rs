//! `sluice cp`: connects to a daemon, opens a session and runs its side of it.

use crate::error::EngineError;
use crate::fs::spec::{map_copy, CopyArgs};
use crate::fs::{FsError, Root};
use crate::net::tls::ClientTls;
use crate::runtime::Runtime;
use crate::session::{self, run_role, Connections, DestMap, Role};
use crate::source::ScanSpec;
use crate::stats::Stats;
use crate::SessionOptions;
use sluice_wire::{Direction, Open, Recovery, Token};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One side of a copy as the user typed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A local path, kept as typed (the trailing '/' matters).
    Local(String),
    /// `sluice://HOST[:PORT]/PATH`.
    Remote {
        /// `host:port`.
        addr: String,
        /// The path under the daemon's root, as typed (trailing '/' kept).
        path: String,
    },
}

/// The default daemon port.
pub const DEFAULT_PORT: u16 = 7878;

impl Endpoint {
    /// Parses `sluice://HOST[:PORT]/PATH` or a local path. `HOST` may list several
    /// addresses of one daemon, comma-separated (`sluice://10.0.1.2,10.0.2.2:7878/x`, one
    /// per NIC): the port, given once at the end, applies to all; data connections are
    /// spread over them (`addr` keeps them comma-separated, each with its port).
    ///
    /// # Errors
    /// A `sluice://` URL without a host, or with an empty one in its list.
    pub fn parse(s: &str) -> Result<Endpoint, String> {
        let Some(rest) = s.strip_prefix("sluice://") else {
            return Ok(Endpoint::Local(s.to_string()));
        };
        let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
        if host.is_empty() {
            return Err(format!(
                "{s:?} has no host: expected sluice://HOST[:PORT]/PATH"
            ));
        }
        let hosts: Vec<&str> = host.split(',').collect();
        if hosts.iter().any(|h| h.is_empty()) {
            return Err(format!(
                "{s:?} has an empty host in its list: expected sluice://HOST[,HOST...][:PORT]/PATH"
            ));
        }
        let port_of = |h: &str| -> Option<String> {
            if h.starts_with('[') {
                h.split_once("]:").map(|(_, p)| p.to_string())
            } else {
                h.split_once(':').map(|(_, p)| p.to_string())
            }
        };
        let port = hosts
            .last()
            .and_then(|h| port_of(h))
            .unwrap_or_else(|| DEFAULT_PORT.to_string());
        let addr = hosts
            .iter()
            .map(|h| {
                if port_of(h).is_some() {
                    (*h).to_string()
                } else {
                    format!("{h}:{port}")
                }
            })
            .collect::<Vec<_>>()
            .join(",");
        Ok(Endpoint::Remote {
            addr,
            path: path.to_string(),
        })
    }
}

/// What to copy and how.
#[derive(Debug)]
pub struct CopyConfig {
    /// Sources, all local (push) or all on one daemon (pull).
    pub sources: Vec<Endpoint>,
    /// Destination.
    pub dest: Endpoint,
    /// Session options (`chunk_bytes`: the chunk size asked for).
    pub opts: SessionOptions,
    /// Shared secret for the daemon.
    pub token: Option<Token>,
    /// Encryption and trust (`--encrypt`, `--known-hosts`, `--ca`).
    pub tls: ClientTls,
    /// An endpoint of a daemon-to-daemon copy whose credentials are not `token` and
    /// `tls`: the far side ssh started (its own session secret, its certificate pinned).
    pub far: Option<FarEnd>,
}

/// The ssh-started far side of a daemon-to-daemon copy, with the credentials it made
/// for this one session.
#[derive(Debug, Clone)]
pub struct FarEnd {
    /// Whether it is the copy's source (else its destination).
    pub is_source: bool,
    /// Its session secret.
    pub token: Token,
    /// Its certificate, pinned.
    pub tls: ClientTls,
}

/// Bad input found before any connection was made (exit code 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Why a copy failed: what was asked cannot be done, or doing it failed.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// An impossible request, found before any connection was made.
    #[error(transparent)]
    Usage(#[from] UsageError),
    /// A failure while copying.
    #[error(transparent)]
    Engine(#[from] EngineError),
}

impl From<FsError> for CopyError {
    fn from(e: FsError) -> CopyError {
        CopyError::Engine(e.into())
    }
}

impl CopyError {
    /// What to do about it: a usage error needs another command line; a failure
    /// tells by its own class ([`EngineError::recovery`]).
    pub fn recovery(&self) -> Recovery {
        match self {
            CopyError::Usage(_) => Recovery::Abort,
            CopyError::Engine(e) => e.recovery(),
        }
    }
}

/// Runs a copy, counting into `stats` (one session, or one per source for a pull from
/// several remote sources); `stats.summary()` is the result.
///
/// # Errors
/// [`CopyError::Usage`] for impossible requests, [`CopyError::Engine`] for failures.
pub fn copy(cfg: &CopyConfig, runtime: &Arc<Runtime>, stats: &Arc<Stats>) -> Result<(), CopyError> {
    let all_local = cfg.sources.iter().all(|s| matches!(s, Endpoint::Local(_)));
    let all_remote = cfg
        .sources
        .iter()
        .all(|s| matches!(s, Endpoint::Remote { .. }));
    match (&cfg.dest, all_local, all_remote) {
        (Endpoint::Remote { addr, path }, true, _) => push(cfg, addr, path, runtime, stats),
        (Endpoint::Remote { addr, path }, _, true) => third_party(cfg, addr, path, stats),
        (Endpoint::Local(dst), _, true) => pull(cfg, dst, runtime, stats),
        (Endpoint::Local(_), true, _) => Err(UsageError(
            "both sides are local: sluice moves data between hosts; use a sluice:// URL for one side".into(),
        ).into()),
        _ => Err(UsageError(
            "sources must be all local (push) or all remote (pull), and the destination the other kind".into(),
        ).into()),
    }
}

/// Copies the one remote source to `path` on the daemon at `addr`, daemon to daemon
/// ([`crate::thirdparty`]): the payload does not pass through this host.
fn third_party(
    cfg: &CopyConfig,
    addr: &str,
    path: &str,
    stats: &Arc<Stats>,
) -> Result<(), CopyError> {
    let [Endpoint::Remote {
        addr: src_addr,
        path: src_path,
    }] = &cfg.sources[..]
    else {
        return Err(
            UsageError("a copy between two daemons takes exactly one source".into()).into(),
        );
    };
    let party = |addr: &str, path: &str, source: bool| {
        let far = cfg.far.as_ref().filter(|f| f.is_source == source);
        crate::thirdparty::Party {
            addr: addr.to_string(),
            path: path.to_string(),
            token: far.map_or_else(|| cfg.token.clone(), |f| Some(f.token.clone())),
            tls: far.map_or_else(|| cfg.tls.clone(), |f| f.tls.clone()),
        }
    };
    crate::thirdparty::copy(
        &party(src_addr, src_path, true),
        &party(addr, path, false),
        &cfg.opts,
        stats,
    )?;
    Ok(())
}

/// Pushes every (local) source to `path` on the daemon at `addr`, in one session.
fn push(
    cfg: &CopyConfig,
    addr: &str,
    path: &str,
    runtime: &Arc<Runtime>,
    stats: &Arc<Stats>,
) -> Result<(), CopyError> {
    let mut specs = Vec::with_capacity(cfg.sources.len());
    for s in &cfg.sources {
        let Endpoint::Local(p) = s else {
            unreachable!("checked all local")
        };
        specs.push(local_spec(p, cfg.opts.recursive)?);
    }
    // Several sources, or a directory's contents, always go into a directory: the
    // daemon reads that from the trailing '/' (its half of the rule).
    let into_dir = cfg.sources.len() > 1 || specs.iter().any(|s| s.prefix.is_none());
    let remote_path = if into_dir && !path.ends_with('/') {
        format!("{path}/")
    } else {
        path.to_string()
    };
    let started = start_session(addr, Direction::Push, &remote_path, cfg, runtime, stats)?;
    started.run(Role::Source(specs), runtime, stats)
}

/// Pulls every (remote) source into the local `dst`, one session per source. The
/// destination is created only once the first daemon has accepted (a refused pull
/// leaves nothing behind, as `cp` leaves nothing when its source is missing).
fn pull(
    cfg: &CopyConfig,
    dst: &str,
    runtime: &Arc<Runtime>,
    stats: &Arc<Stats>,
) -> Result<(), CopyError> {
    let target = pull_destination(cfg, dst)?;
    // An existing directory is opened (and checked) before any connection is made.
    let mut root = match target.create {
        false => Some(Arc::new(target.open()?)),
        true => None,
    };
    for s in &cfg.sources {
        let Endpoint::Remote { addr, path } = s else {
            unreachable!("checked all remote")
        };
        let started = start_session(addr, Direction::Pull, path, cfg, runtime, stats)?;
        let root = match &root {
            Some(r) => Arc::clone(r),
            None => Arc::clone(root.insert(Arc::new(target.open()?))),
        };
        let dest = target.dest.clone();
        started.run(Role::Sink { root, dest }, runtime, stats)?;
    }
    Ok(())
}

/// Where a pull writes: the local directory to open as the sink's root (created first
/// when `create`), and where entries land under it.
#[derive(Debug)]
struct PullTarget {
    dir: PathBuf,
    create: bool,
    dest: DestMap,
}

impl PullTarget {
    fn open(&self) -> Result<Root, EngineError> {
        if self.create {
            std::fs::create_dir_all(&self.dir)
                .map_err(|e| EngineError::io(format!("creating {:?}", self.dir), e))?;
        }
        Ok(Root::open(&self.dir)?)
    }
}

/// The local target of a pull, by the rules the daemon applies to a push
/// ([`session::dest_is_directory`]): a source sent as its contents (a trailing '/', or
/// the daemon's root, which has no name) needs a directory, created if missing; several
/// sources need one that exists or ends in '/'.
fn pull_destination(cfg: &CopyConfig, dst: &str) -> Result<PullTarget, UsageError> {
    let several = cfg.sources.len() > 1;
    let dst_path = Path::new(dst);
    let contents = cfg
        .sources
        .iter()
        .any(|s| matches!(s, Endpoint::Remote { path, .. } if session::sends_contents(path)));
    if session::dest_is_directory(dst, dst_path.is_dir(), contents) {
        return Ok(PullTarget {
            dir: dst_path.to_path_buf(),
            create: true,
            dest: DestMap::default(),
        });
    }
    if several {
        return Err(UsageError(format!(
            "{dst:?} must be an existing directory (or end with '/') when copying several sources"
        )));
    }
    let parent = dst_path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = dst_path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| UsageError(format!("{dst:?} has no usable file name")))?;
    Ok(PullTarget {
        dir: parent.to_path_buf(),
        create: false,
        dest: DestMap {
            base: None,
            rename_top: Some(name.to_string()),
        },
    })
}

/// The scan spec of a local source path, by the rules of [`crate::fs::spec`] (a trailing
/// '/' sends a directory's contents; otherwise the entry keeps its name). The daemon
/// applies the destination half of the rules, where the destination is.
fn local_spec(p: &str, recursive: bool) -> Result<ScanSpec, CopyError> {
    let meta = std::fs::metadata(p).map_err(|e| EngineError::io(format!("reading {p:?}"), e))?;
    if meta.is_dir() && !recursive {
        return Err(UsageError(format!("{p:?} is a directory: use -r to copy it")).into());
    }
    let mapping = map_copy(&CopyArgs {
        source: p,
        source_is_dir: meta.is_dir(),
        dest: "./",
        dest_is_dir: true,
        source_count: 1,
    })
    .map_err(|e| UsageError(e.to_string()))?;
    let root = Root::open(&mapping.source_root)?;
    Ok(ScanSpec {
        root: Arc::new(root),
        start: mapping.start,
        prefix: mapping.prefix,
    })
}

/// A session this client opened, its options settled with the daemon's `Accept`.
struct Started {
    conns: Connections,
    opts: SessionOptions,
}

impl Started {
    /// Runs this side of the session.
    fn run(self, role: Role, runtime: &Arc<Runtime>, stats: &Arc<Stats>) -> Result<(), CopyError> {
        let chunk_bytes = self.opts.chunk_bytes;
        run_role(role, runtime, &self.opts, chunk_bytes, self.conns, stats)?;
        crate::fault::hold_at_end();
        Ok(())
    }
}

/// Opens a session with the daemon at `addr` for `path` and settles its options with
/// the daemon's `Accept`.
fn start_session(
    addr: &str,
    direction: Direction,
    path: &str,
    cfg: &CopyConfig,
    runtime: &Arc<Runtime>,
    stats: &Stats,
) -> Result<Started, CopyError> {
    let open = Open {
        direction,
        path: path.to_string(),
        options: cfg.opts.open_options(),
    };
    let opened = session::open_session_sized(addr, cfg.token.clone(), open, &cfg.tls, |rtt| {
        cfg.opts.streams_for(rtt)
    })?;
    let opts = cfg
        .opts
        .accepted(&opened.accept, opened.capabilities, runtime.chunk_bytes())
        .map_err(|message| EngineError::Handshake {
            peer: addr.to_string(),
            message,
        })?;
    let sends = direction == Direction::Push;
    // Connections this side chose for a long path are no user's request to warn about;
    // the summary still lists the threads beyond the plan.
    let chosen = cfg.opts.long_path_streams.is_some() && opts.streams > cfg.opts.streams;
    session::state_threads_beyond_plan(runtime, &opts, sends, stats, ("this side", !chosen));
    let conns = Connections {
        control_stream: opened.writer.stream_clone()?,
        reader: opened.reader,
        data: opened.data,
        joining: opened.joining,
    };
    Ok(Started { conns, opts })
}
