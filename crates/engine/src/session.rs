//! A session once its connections are up, as both drivers (daemon and client) run it:
//! which half this side plays (`Role`), where a sink puts what arrives ([`DestMap`])
//! and what a source sends ([`source_start`]): the path rules of both sides in one
//! place.
//!
//! Opening a session is the network layer's ([`crate::net`]); its drivers are
//! re-exported here at their former paths.

pub use crate::net::accept::send_accept;
pub use crate::net::connect::{open_session, open_session_sized, Opened};
pub use crate::net::handshake::{client_handshake, random, server_handshake, HANDSHAKE_TIMEOUT};

use crate::control::{spawn_reader, spawn_writer, Wiring};
use crate::error::EngineError;
use crate::fs::Root;
use crate::net::tls::Link;
use crate::runtime::Runtime;
use crate::source::ScanSpec;
use crate::stats::Stats;
use crate::transport::{ChunkReceiver, ChunkSender, FrameReader};
use crate::SessionOptions;
use sluice_placement::Role as PlanRole;
use sluice_wire::{ClientJoin, ErrorFrame, Frame, RelPath};
use std::sync::Arc;

/// Where the sink puts what arrives: under `base`, with the top-level name replaced by
/// `rename_top` when the destination named a new file or directory (`cp a b` where `b`
/// does not exist).
#[derive(Debug, Clone, Default)]
pub struct DestMap {
    /// Directory under the sink's root.
    pub base: Option<RelPath>,
    /// New name of the top-level entry.
    pub rename_top: Option<String>,
}

impl DestMap {
    /// The destination of a manifest path, or None if it cannot be represented.
    pub fn map(&self, path: &RelPath) -> Option<RelPath> {
        let mapped = match &self.rename_top {
            Some(new) => match path.as_str().split_once('/') {
                Some((_, rest)) => format!("{new}/{rest}"),
                None => new.clone(),
            },
            None => path.as_str().to_string(),
        };
        let full = match &self.base {
            Some(b) => format!("{}/{mapped}", b.as_str()),
            None => mapped,
        };
        RelPath::parse(&full).ok()
    }

    /// The mapping for a destination typed as `raw` (relative to a root): a directory
    /// when it ends in '/', is the root, or `is_dir` says it exists as one; otherwise the
    /// new name of a single source.
    ///
    /// # Errors
    /// The path is not a valid relative path.
    pub fn for_destination(
        raw: &str,
        is_dir: impl Fn(&RelPath) -> bool,
    ) -> Result<DestMap, String> {
        let trimmed = raw.trim_matches('/');
        if trimmed.is_empty() {
            return Ok(DestMap::default());
        }
        let rel = RelPath::parse(trimmed).map_err(|e| e.to_string())?;
        if dest_is_directory(raw, is_dir(&rel), false) {
            return Ok(DestMap {
                base: Some(rel),
                rename_top: None,
            });
        }
        Ok(DestMap {
            base: rel.parent(),
            rename_top: Some(rel.file_name().to_string()),
        })
    }
}

/// Whether a destination typed as `raw` is a directory that receives the sources under
/// their own names (rather than the new name of a single source): it ends in '/', is a
/// root (empty or '/'), `exists_as_dir`, or `into_dir` because several sources or a
/// directory's contents go there. The one rule both a daemon (push) and a client
/// (pull) apply.
pub fn dest_is_directory(raw: &str, exists_as_dir: bool, into_dir: bool) -> bool {
    raw.ends_with('/') || raw.trim_matches('/').is_empty() || exists_as_dir || into_dir
}

/// Source-side mapping of a path typed as `raw` under a root: (start, prefix). A
/// trailing '/' (or a last component '.') sends a directory's contents, and so does the
/// root itself, which has no name of its own (`sluice://HOST/` and `sluice://HOST`
/// alike); otherwise the entry keeps its own name.
///
/// # Errors
/// The path is not a valid relative path.
pub fn source_start(raw: &str) -> Result<(Option<RelPath>, Option<RelPath>), String> {
    let (body, contents) = match raw.strip_suffix("/.") {
        Some(body) => (body, true),
        None => (raw, raw.ends_with('/')),
    };
    let trimmed = body.trim_matches('/');
    if trimmed.is_empty() || trimmed == "." {
        return Ok((None, None));
    }
    let rel = RelPath::parse(trimmed).map_err(|e| e.to_string())?;
    if contents {
        return Ok((Some(rel), None));
    }
    let name = RelPath::parse(rel.file_name()).map_err(|e| e.to_string())?;
    Ok((Some(rel), Some(name)))
}

/// Whether a source typed as `raw` under a root is sent as its contents (no name of its
/// own under the destination), by the rule of [`source_start`]. A path that rule
/// refuses counts as named; the daemon refuses it when the session opens.
pub fn sends_contents(raw: &str) -> bool {
    source_start(raw).is_ok_and(|(_, prefix)| prefix.is_none())
}

/// States the threads `opts` makes this side run beyond what `runtime`'s plan placed
/// (a daemon plans `--streams` network threads, a client may open up to
/// [`sluice_wire::MAX_STREAMS`]): one warning per role naming both counts, and the same
/// in `stats` for the `--json` summary. The extra threads share the planned threads'
/// CPUs ([`Runtime::thread_plan`]); `who` names the session in the warning. `warn`
/// false says it at the info level (this side chose the connections itself).
pub(crate) fn state_threads_beyond_plan(
    runtime: &Runtime,
    opts: &SessionOptions,
    sends: bool,
    stats: &Stats,
    (who, warn): (&str, bool),
) {
    let running = crate::options::session_threads(opts, sends);
    for b in crate::options::beyond_plan(&running, |r| runtime.planned(r)) {
        let extra = b.running - b.planned;
        let (running, role, planned) = (b.running, &b.role, b.planned);
        if warn {
            tracing::warn!(
                "{who}: {running} {role} threads asked for, {planned} planned: the {extra} beyond the plan share the planned threads' CPUs"
            );
        } else {
            tracing::info!(
                "{who}: {running} {role} threads for the path, {planned} planned: the {extra} beyond the plan share the planned threads' CPUs"
            );
        }
        stats.record_beyond_plan(b);
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
    pub control_stream: Link,
    /// The data connections in stream order.
    pub data: Vec<Link>,
    /// A source client's `Join`s whose answers are still to be read, by stream (may be
    /// shorter than `data`; see [`crate::net::connect::Opened::joining`]).
    pub joining: Vec<Option<ClientJoin>>,
}

/// The kernel socket memory this side's data connections may take, and whether this
/// side chose more connections for a long path than its plan has network threads
/// ([`SessionOptions::streams_for`]): the pools' size, or there as much per connection as
/// a planned one has (8 connections sharing 2 connections' memory got 11 MiB of socket
/// buffers each, and a 1 GiB push at 100 ms took 10.27 s instead of 10.08 s).
fn network_cap(runtime: &Runtime, opts: &SessionOptions, sends: bool) -> (u64, bool) {
    let cap = runtime.plan().buffer_bytes();
    let planned = u64::from(runtime.planned(net_role(sends)).max(1));
    let streams = u64::from(opts.streams);
    if opts.long_path_streams.is_none() || streams <= planned {
        return (cap, false);
    }
    (cap.saturating_mul(streams) / planned, true)
}

fn net_role(sends: bool) -> PlanRole {
    if sends {
        PlanRole::NetSend
    } else {
        PlanRole::NetRecv
    }
}

/// Runs one side of a session once its connections are up, counting into `stats`. A
/// failure is reported to the peer in one `Error` frame (naming paths relative to the
/// root) before it is returned.
pub(crate) fn run_role(
    role: Role,
    runtime: &Arc<Runtime>,
    opts: &SessionOptions,
    chunk_bytes: u32,
    conns: Connections,
    stats: &Arc<Stats>,
) -> Result<(), EngineError> {
    debug_assert!(chunk_bytes <= runtime.chunk_bytes(), "chunks fit the slots");
    let Connections {
        reader,
        control_stream,
        data: conns,
        joining,
    } = conns;
    // This thread is the session's master (seed 000's MT): it and the control-plane
    // threads it starts (reader, writer, scanner) run where the plan puts control 0.
    runtime.pin_current(PlanRole::Control, 0);
    let sends = matches!(role, Role::Source(_));
    let (cap, chosen) = network_cap(runtime, opts, sends);
    let (mut tuning, probes) = crate::net::tuning::tune_session(&control_stream, &conns, cap);
    if chosen {
        tuning.streams_note = Some(format!(
            "{} data connections for a path of {:.1} ms (--streams sets them), with the network share of {} planned ones each",
            opts.streams,
            tuning.rtt.as_secs_f64() * 1e3,
            runtime.planned(net_role(sends)),
        ));
    }
    let watched = crate::monitor::global().session_started(&probes);
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
            debug_assert!(
                joining.iter().all(Option::is_none),
                "a sink reads its joins"
            );
            let conns = conns
                .into_iter()
                .map(|c| ChunkReceiver::new(c, chunk_bytes).permitting(opts.chunk_flags))
                .collect();
            crate::sink::run(runtime, root, dest, opts, wiring, conns)
        }
        Role::Source(spec) => {
            let conns = ChunkSender::for_connections(conns, joining);
            crate::source::run(runtime, spec, opts, wiring, conns)
        }
    };
    let figures = crate::net::tuning::final_figures(&probes);
    crate::monitor::global().session_ended(watched);
    stats.set_network(crate::net::tuning::NetworkReport::new(&tuning, figures));
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

    fn rp(s: &str) -> RelPath {
        RelPath::parse(s).unwrap()
    }

    #[test]
    fn destination_directory_keeps_names() {
        let m = DestMap::for_destination("out/", |_| false).unwrap();
        assert_eq!(m.map(&rp("src/a.txt")).unwrap().as_str(), "out/src/a.txt");
        let m = DestMap::for_destination("out", |_| true).unwrap();
        assert_eq!(m.map(&rp("src")).unwrap().as_str(), "out/src");
    }

    #[test]
    fn new_destination_renames_the_top_entry() {
        let m = DestMap::for_destination("dir/new", |_| false).unwrap();
        assert_eq!(m.map(&rp("src")).unwrap().as_str(), "dir/new");
        assert_eq!(m.map(&rp("src/x/y")).unwrap().as_str(), "dir/new/x/y");
        let m = DestMap::for_destination("", |_| false).unwrap();
        assert_eq!(m.map(&rp("a")).unwrap().as_str(), "a");
    }

    #[test]
    fn trailing_slash_sends_contents() {
        assert_eq!(source_start("data/").unwrap(), (Some(rp("data")), None));
        assert_eq!(
            source_start("a/data").unwrap(),
            (Some(rp("a/data")), Some(rp("data")))
        );
        assert_eq!(source_start("/").unwrap(), (None, None));
        assert!(source_start("../x").is_err());
        assert_eq!(
            source_start("a/data/.").unwrap(),
            (Some(rp("a/data")), None)
        );
    }

    #[test]
    fn regression_pull_root_into_a_new_directory_sends_contents() {
        // `sluice cp -r sluice://HOST/ new` and `sluice://HOST new`: the root has no
        // name, so it is always sent as its contents, into a directory.
        for raw in ["", "/", ".", "./"] {
            assert_eq!(source_start(raw).unwrap(), (None, None), "{raw:?}");
            assert!(sends_contents(raw), "{raw:?}");
        }
        assert!(sends_contents("sub/"));
        assert!(!sends_contents("sub"));
        assert!(!sends_contents("../x"));
        assert!(dest_is_directory("new", false, sends_contents("")));
        assert!(!dest_is_directory("new", false, sends_contents("sub")));
    }

    #[test]
    fn a_destination_is_a_directory_by_slash_root_existence_or_need() {
        assert!(dest_is_directory("d/", false, false));
        assert!(dest_is_directory("", false, false));
        assert!(dest_is_directory("/", false, false));
        assert!(dest_is_directory("d", true, false));
        assert!(dest_is_directory("d", false, true));
        assert!(!dest_is_directory("d", false, false));
    }
}
