//! `_sluice.copy`: `sluice cp` as a function. The copy runs on its own thread while
//! the caller's thread waits with the GIL released and, every `progress_interval`
//! seconds, calls `progress` with the counts `sluice cp`'s progress bar shows.

use crate::errors::{copy as copy_error, usage};
use crate::options::{buffer_arg, client_tls, size_arg, token_arg, JobSpec, Side};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use sluice_engine::bwlimit::{parse_rate, Pace};
use sluice_engine::client::{copy as run_copy, CopyConfig, CopyError, Endpoint};
use sluice_engine::codec::Planner;
use sluice_engine::stats::Stats;
use sluice_engine::{CompressMode, Pipeline, Populate, SessionOptions};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// What a copy asks for beyond its endpoints (`sluice cp`'s flags).
#[derive(Debug, Clone, Copy)]
struct Flags {
    recursive: bool,
    verify: bool,
    resume: bool,
    no_clobber: bool,
    update: bool,
    fsync: bool,
    buffered: bool,
}

/// The pace `bwlimit` asks for (`cp --bwlimit`'s rates: `500M`, `2G`, `100Mi`).
fn pace(bwlimit: Option<&str>) -> PyResult<Pace> {
    let rate = bwlimit
        .map(|r| parse_rate(r).map_err(|e| usage(format!("bwlimit: {e}"))))
        .transpose()?;
    Ok(Pace::new(rate, &[]))
}

/// Copies `sources` to `dst` (see `sluice.copy`); returns the summary as JSON.
#[pyfunction]
#[pyo3(signature = (sources, dst, *, recursive=false, streams=2, io_threads=2, compress="none",
    verify=false, resume=false, no_clobber=false, update=false, fsync=false, buffered=false,
    policy="auto", chunk_size=None, buffer_mem=None, token=None, token_file=None,
    encrypt="auto", ca=None, known_hosts=None, strict_host_key=false, bwlimit=None,
    progress=None, progress_interval=0.2))]
#[allow(clippy::too_many_arguments)]
pub fn copy(
    py: Python<'_>,
    sources: Vec<String>,
    dst: &str,
    recursive: bool,
    streams: u32,
    io_threads: u32,
    compress: &str,
    verify: bool,
    resume: bool,
    no_clobber: bool,
    update: bool,
    fsync: bool,
    buffered: bool,
    policy: &str,
    chunk_size: Option<&Bound<'_, PyAny>>,
    buffer_mem: Option<&Bound<'_, PyAny>>,
    token: Option<&Bound<'_, PyAny>>,
    token_file: Option<PathBuf>,
    encrypt: &str,
    ca: Option<PathBuf>,
    known_hosts: Option<PathBuf>,
    strict_host_key: bool,
    bwlimit: Option<&str>,
    progress: Option<Py<PyAny>>,
    progress_interval: f64,
) -> PyResult<String> {
    let flags = Flags {
        recursive,
        verify,
        resume,
        no_clobber,
        update,
        fsync,
        buffered,
    };
    let compress: CompressMode = compress
        .parse()
        .map_err(|e| usage(format!("compress={compress:?}: {e}")))?;
    let spec = JobSpec {
        policy: policy.to_string(),
        streams,
        io_threads: io_threads.max(1),
        read_depth: sluice_engine::DEFAULT_READ_DEPTH,
        chunk_bytes: chunk_size.map_or(Ok(4 << 20), |c| size_arg("chunk_size", c))?,
        buffer_bytes: buffer_mem.map(buffer_arg).transpose()?.flatten(),
        planner: Planner::Copy(compress),
    };
    let mut cfg = config(&sources, dst, &spec, compress, flags)?;
    cfg.opts.pace = pace(bwlimit)?;
    let cfg = CopyConfig {
        token: token_arg(token, token_file)?,
        tls: client_tls(encrypt, ca, known_hosts, strict_host_key)?,
        ..cfg
    };
    let side = if matches!(cfg.dest, Endpoint::Remote { .. }) {
        Side::Send
    } else {
        Side::Recv
    };
    let runtime = spec.runtime(side, Populate::OnDemand)?;
    let stats = Arc::new(Stats::new());
    let interval = Duration::from_secs_f64(progress_interval.clamp(0.01, 3600.0));
    let result = run_watched(
        py,
        cfg,
        Arc::clone(&runtime),
        Arc::clone(&stats),
        progress,
        interval,
    )?;
    result.map_err(|e| copy_error(&e, resume))?;
    let summary = stats.summary(runtime.plan());
    serde_json::to_string(&summary).map_err(|e| usage(format!("summary: {e}")))
}

/// The copy's configuration, less its secret and TLS.
fn config(
    sources: &[String],
    dst: &str,
    spec: &JobSpec,
    compress: CompressMode,
    f: Flags,
) -> PyResult<CopyConfig> {
    if sources.is_empty() {
        return Err(usage("copy needs at least one source"));
    }
    let dest = Endpoint::parse(dst).map_err(usage)?;
    let sources = sources
        .iter()
        .map(|s| Endpoint::parse(s))
        .collect::<Result<Vec<_>, _>>()
        .map_err(usage)?;
    let chunk_bytes = u32::try_from(spec.chunk_bytes).map_err(|_| {
        usage(format!(
            "chunk_size {} is larger than 64 MiB",
            spec.chunk_bytes
        ))
    })?;
    let opts = SessionOptions {
        streams: u16::try_from(spec.streams.max(1)).unwrap_or(u16::MAX),
        // `streams` is always given here (2 by default): no choice by the path.
        long_path_streams: None,
        chunk_bytes,
        io_threads: spec.io_threads,
        read_depth: spec.read_depth,
        resume: f.resume,
        no_clobber: f.no_clobber,
        update: f.update,
        fsync: f.fsync,
        verify: f.verify,
        recursive: f.recursive,
        compress,
        pipeline: Pipeline::Auto,
        direct: !f.buffered,
        chunk_acks: true,
        // The handshake decides (`SessionOptions::accepted`).
        sink_closes: false,
        pace: Pace::none(),
        chunk_flags: SessionOptions::default().chunk_flags,
    };
    Ok(CopyConfig {
        sources,
        dest,
        opts,
        token: None,
        tls: Default::default(),
        far: None,
    })
}

/// Runs the copy on its own thread; meanwhile calls `progress` every `interval` with
/// the GIL held and waits with it released. An exception from `progress` stops the
/// calls and is raised once the copy has ended (the copy is not interrupted: its
/// destination is left whole or resumable).
fn run_watched(
    py: Python<'_>,
    cfg: CopyConfig,
    runtime: Arc<sluice_engine::Runtime>,
    stats: Arc<Stats>,
    progress: Option<Py<PyAny>>,
    interval: Duration,
) -> PyResult<Result<(), CopyError>> {
    let (tx, rx) = crossbeam_channel::bounded(1);
    let st = Arc::clone(&stats);
    std::thread::Builder::new()
        .name("sluice-copy".into())
        .spawn(move || {
            let _ = tx.send(run_copy(&cfg, &runtime, &st));
        })
        .map_err(|e| usage(format!("cannot start the copy's thread: {e}")))?;
    let mut progress = progress;
    let mut raised = None;
    loop {
        match py.detach(|| rx.recv_timeout(interval)) {
            Ok(result) => {
                if let Some(cb) = &progress {
                    let _ = report(py, cb, &stats);
                }
                return raised.map_or(Ok(result), Err);
            }
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                return Err(usage("the copy's thread ended without a result"));
            }
        }
        if let Some(cb) = &progress {
            if let Err(e) = report(py, cb, &stats) {
                raised = Some(e);
                progress = None;
            }
        }
    }
}

/// Calls `cb` with a dict of the counts so far.
fn report(py: Python<'_>, cb: &Py<PyAny>, stats: &Stats) -> PyResult<()> {
    let (files, bytes) = stats.announced();
    let d = PyDict::new(py);
    d.set_item("bytes", stats.payload_bytes())?;
    d.set_item("total_bytes", bytes)?;
    d.set_item("files_done", stats.files_finished())?;
    d.set_item("files", files)?;
    cb.call1(py, (d,))?;
    Ok(())
}
