//! `sluice cp` and `sluice serve`: the transfer commands.

use crate::exit::{bad_input, ExitCode};
use crate::plan_cmd::{parse_bytes, JobArgs, Side};
use crate::tls_args::{ClientTlsArgs, ServerTlsArgs};
use crate::topo_cmd::load_machine;
use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use sluice_engine::client::{copy, CopyConfig, CopyError, Endpoint};
use sluice_engine::daemon::{serve_shared, ServeConfig};
use sluice_engine::options::advertised_addresses;
use sluice_engine::runtime::Populate;
use sluice_engine::stats::Stats;
use sluice_engine::{Pipeline, Runtime, SessionOptions};
use sluice_placement::Plan;
use sluice_topology::Machine;
use sluice_wire::{Recovery, Token};
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The data path between I/O and network threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PipelineArg {
    /// Inline unless readers far outnumber connections.
    Auto,
    /// The reading thread sends; the receiving thread writes (Tyche's inline path).
    Inline,
    /// Bounded per-channel queues between I/O and network threads.
    Queued,
}

impl From<PipelineArg> for Pipeline {
    fn from(p: PipelineArg) -> Pipeline {
        match p {
            PipelineArg::Auto => Pipeline::Auto,
            PipelineArg::Inline => Pipeline::Inline,
            PipelineArg::Queued => Pipeline::Queued,
        }
    }
}

/// Arguments of `sluice cp`.
#[derive(Debug, Args)]
pub struct CpArgs {
    /// Sources then destination: local paths, `sluice://HOST[:PORT]/PATH`, or
    /// `[user@]host:path` (started over ssh, as scp and rsync do). A trailing
    /// '/' on a source directory copies its contents; a destination that is an existing
    /// directory (or ends with '/') receives the sources under their own names.
    #[arg(value_name = "SRC... DST", num_args = 2.., required = true)]
    pub paths: Vec<String>,
    /// Copy directories recursively.
    #[arg(short, long)]
    pub recursive: bool,
    #[command(flatten)]
    pub job: JobArgs,
    /// Data path: auto, inline or queued.
    #[arg(long, value_enum, default_value_t = PipelineArg::Auto)]
    pub pipeline: PipelineArg,
    /// Never replace an existing destination file.
    #[arg(long)]
    pub no_clobber: bool,
    /// Skip files whose destination has the same size and modification time.
    #[arg(long)]
    pub update: bool,
    /// Re-read every written file and compare its digest before it is renamed into place.
    #[arg(long)]
    pub verify: bool,
    /// Continue from what the destination already holds, chunk by chunk.
    #[arg(long)]
    pub resume: bool,
    /// Make every file durable (fsync) before renaming it into place.
    #[arg(long)]
    pub fsync: bool,
    /// Read and write large files with O_DIRECT on both hosts (the default): the disk
    /// DMAs straight to and from the NUMA-local buffer slots, with no copy into the page
    /// cache and no write-back after the run. Where a file system refuses O_DIRECT, its
    /// files go through the page cache; a file's unaligned tail always does.
    #[arg(long, conflicts_with = "buffered")]
    pub direct: bool,
    /// Read and write large files through the page cache instead of O_DIRECT (a source
    /// that is hot in the cache, a file system that handles direct I/O badly).
    #[arg(long)]
    pub buffered: bool,
    /// Compression on the wire: none, lz4, zstd[:LEVEL] or auto (compress only while the
    /// link, not the CPU, is the bottleneck). On a pull the daemon compresses, and any
    /// codec asked for means `auto` there (it may send a chunk raw).
    #[arg(long, value_name = "CODEC", default_value = "none")]
    pub compress: String,
    /// Print one JSON summary object instead of the human summary.
    #[arg(long)]
    pub json: bool,
    /// Limit this transfer to RATE bytes per second (500M, 2G: SI; 100Mi: IEC; at least
    /// 1M), paced
    /// chunk by chunk where the bytes leave or arrive on this host.
    #[arg(long, value_name = "RATE")]
    pub bwlimit: Option<String>,
    /// File holding the shared secret of the daemon (not for a `host:path` side: the
    /// far side ssh starts has a secret of its own, and its certificate is pinned by
    /// the fingerprint ssh carries back, in place of --ca/--known-hosts).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    #[command(flatten)]
    pub ssh: crate::ssh::SshArgs,
    #[command(flatten)]
    pub tls: ClientTlsArgs,
    #[command(flatten)]
    pub metrics: crate::metrics_args::MetricsArgs,
}

/// Arguments of `sluice serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The served directory: every path a client names stays inside it.
    #[arg(long, value_name = "DIR", required_unless_present = "accounts")]
    pub root: Option<PathBuf>,
    /// Address to listen on (loopback by default; port 0 picks a free one).
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:7878")]
    pub listen: SocketAddr,
    /// Topology to plan for (this machine by default; others are shown, not applied).
    #[arg(long, value_name = "SRC", default_value = "this")]
    pub topology: String,
    #[command(flatten)]
    pub job: JobArgs,
    /// File holding the shared secret clients must prove they know.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Allow a non-loopback address without a token (anyone who can connect can write).
    #[arg(long)]
    pub insecure_no_auth: bool,
    /// Connections (control + data) served at once, at least 1.
    #[arg(long, value_name = "N", default_value_t = 256,
          value_parser = at_least_one)]
    pub max_connections: usize,
    /// Print the listening address, plan and certificate fingerprint as one JSON line
    /// when ready.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub shared: crate::serve_args::SharedArgs,
    #[command(flatten)]
    pub tls: ServerTlsArgs,
    #[command(flatten)]
    pub http: Box<crate::http_args::HttpArgs>,
    #[command(flatten)]
    pub metrics: crate::metrics_args::MetricsArgs,
}

/// Reads a shared secret from a file (one trailing newline ignored).
pub fn read_token(path: &PathBuf) -> Result<Token> {
    let bytes = std::fs::read(path).map_err(|e| {
        bad_input(format!(
            "--token-file {}: cannot read it: {e}",
            path.display()
        ))
    })?;
    let trimmed = bytes.strip_suffix(b"\n").unwrap_or(&bytes).to_vec();
    Token::new(trimmed).map_err(|e| bad_input(format!("--token-file {}: {e}", path.display())))
}

/// Plans and allocates this process's runtime (pools sized once, here).
/// A process that runs one job (a client, the far end of an ssh copy): pages of its
/// pools are allocated as its job first uses them.
pub(crate) fn runtime_for(job: &JobArgs, topology: &str, side: Side) -> Result<Arc<Runtime>> {
    runtime_on(
        &load_machine(topology)?,
        job,
        topology,
        side,
        Populate::OnDemand,
    )
}

fn runtime_on(
    machine: &Machine,
    job: &JobArgs,
    topology: &str,
    side: Side,
    populate: Populate,
) -> Result<Arc<Runtime>> {
    let mut plan = job.plan(machine, side)?;
    job.apply_adapt();
    if topology != "this" {
        tracing::warn!(
            "the plan is for {topology}, not this machine: threads and buffers run unbound here"
        );
        unbind(&mut plan);
    }
    Ok(Arc::new(
        Runtime::new(plan, populate).context("allocating buffer pools")?,
    ))
}

fn unbind(plan: &mut Plan) {
    for ch in &mut plan.channels {
        ch.numa_node = None;
        for t in &mut ch.threads {
            t.cpus = None;
        }
    }
}

/// Says the daemon is ready: its address, plan and certificate fingerprint as one JSON
/// line (`--json`), or one line on stderr.
fn announce(args: &ServeArgs, addr: SocketAddr, plan: &Plan, fingerprint: &str) {
    if args.json {
        let v = serde_json::json!({ "listen": addr.to_string(), "root": args.root, "accounts": args.shared.accounts, "plan": plan, "fingerprint": fingerprint });
        let _ = crate::output::stdout(&(format!("{v}") + "\n"));
    } else {
        let what = match (&args.root, &args.shared.accounts) {
            (Some(root), _) => root.display().to_string(),
            (None, Some(file)) => format!("the accounts of {}", file.display()),
            (None, None) => String::new(),
        };
        crate::output::stderr_line(&format!(
            "sluice: serving {what} on {addr} (policy {}, {} channel(s), {} MiB of buffers, certificate {fingerprint})",
            plan.policy,
            plan.channels.len(),
            plan.buffer_bytes() >> 20
        ));
    }
}

/// Runs `sluice serve` (an error that names a flag set in `--config` names its line).
pub fn serve_run(args: &ServeArgs) -> Result<ExitCode> {
    serve_checked(args).map_err(|e| crate::serve_args::attribute(args.shared.loaded.as_deref(), e))
}

fn serve_checked(args: &ServeArgs) -> Result<ExitCode> {
    let token = args.token_file.as_ref().map(read_token).transpose()?;
    let shared = args.shared.shared(args.token_file.clone())?;
    args.metrics.checked()?;
    let authenticated = token.is_some() || shared.accounts_file.is_some();
    if !args.listen.ip().is_loopback() && !authenticated && !args.insecure_no_auth {
        return Err(bad_input(format!(
            "--listen {} is not a loopback address: give --token-file FILE (or --insecure-no-auth to accept anyone)",
            args.listen
        )));
    }
    // With --accounts each account's root is checked when the file is loaded, here
    // first so that a bad file is refused before the daemon says it is ready.
    if shared.accounts_file.is_some() {
        shared
            .accounts(std::path::Path::new(""), None)
            .map_err(bad_input)?;
    }
    let root = args.root.clone().unwrap_or_default();
    if args.root.is_some() && !root.is_dir() {
        return Err(bad_input(format!(
            "--root {}: not a directory",
            root.display()
        )));
    }
    // A daemon may be asked to compress or decompress by any session: codec threads
    // are always planned (the counts are `JobArgs::job`'s, which the codec's plan
    // decides).
    let job = JobArgs {
        planner: sluice_engine::codec::Planner::Daemon,
        ..args.job.clone()
    };
    if args.shared.check {
        args.http.check()?;
        return crate::serve_args::check(args, &job);
    }
    args.metrics.start()?;
    let tls = args.tls.server_tls(args.listen)?;
    let machine = load_machine(&args.topology)?;
    // The daemon prefaults once at start-up: no session ever takes a page fault.
    let runtime = runtime_on(&machine, &job, &args.topology, Side::Both, Populate::Now)?;
    let listener = crate::serve_args::bind(args.listen)?;
    let nic_addresses = advertised_addresses(
        &machine,
        runtime.plan(),
        args.listen,
        args.topology == "this",
    );
    for (nic, ip) in &nic_addresses {
        tracing::info!("advertising {ip} for the data connections of the channel of {nic}");
    }
    let port = listener.local_addr()?.port();
    let accounts = || shared.accounts(&root, token.clone()).map_err(bad_input);
    let native = || crate::http_args::native(&runtime, port, &tls, job_options(&args.job)?);
    let _http = args
        .http
        .start(&tls, args.max_connections, accounts, native)?;
    let fingerprint = tls.fingerprint().to_string();
    announce(args, listener.local_addr()?, runtime.plan(), &fingerprint);
    let cfg = ServeConfig {
        root,
        token,
        io_threads: args.job.io_threads,
        read_depth: args.job.read_depth,
        max_connections: args.max_connections,
        runtime,
        nic_addresses,
        tls,
    };
    match serve_shared(listener, cfg, shared) {
        Ok(drained) => Ok(crate::serve_args::report_drain(&drained)),
        Err(e @ sluice_engine::EngineError::Config(_)) => Err(bad_input(e)),
        Err(e) => Err(e.into()),
    }
}

/// A count of at least 1 (`--max-connections`).
fn at_least_one(s: &str) -> std::result::Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("{s:?} is not a whole number of at least 1")),
    }
}

/// The options every command that moves data takes from its job flags.
pub fn job_options(job: &JobArgs) -> Result<SessionOptions> {
    let chunk_bytes = parse_bytes("--chunk-size", job.chunk_size())?;
    let chunk_bytes = u32::try_from(chunk_bytes)
        .map_err(|_| bad_input(format!("--chunk-size {chunk_bytes} is larger than 64 MiB")))?;
    let streams = u16::try_from(job.streams()).map_err(|_| {
        bad_input(format!(
            "--streams {} is too many (at most 256)",
            job.streams()
        ))
    })?;
    Ok(SessionOptions {
        streams: streams.max(1),
        chunk_bytes,
        io_threads: job.io_threads.max(1),
        read_depth: job.read_depth,
        ..SessionOptions::default()
    })
}

impl CpArgs {
    /// `cp`'s flags as a session's options: the one conversion from the command line.
    pub fn session_options(&self) -> Result<SessionOptions> {
        let job = job_options(&self.job)?;
        Ok(SessionOptions {
            resume: self.resume,
            no_clobber: self.no_clobber,
            update: self.update,
            fsync: self.fsync,
            verify: self.verify,
            recursive: self.recursive,
            compress: self.compress.parse().map_err(bad_input)?,
            pipeline: self.pipeline.into(),
            direct: !self.buffered,
            chunk_acks: true,
            pace: sluice_engine::bwlimit::Pace::new(
                crate::serve_args::rate(self.bwlimit.as_deref())?,
                &[],
            ),
            long_path_streams: self
                .job
                .streams
                .is_none()
                .then_some(sluice_engine::options::LONG_PATH_STREAMS),
            ..job
        })
    }

    /// What to copy: the endpoints as typed, the options, the secret.
    fn copy_config(&self) -> Result<CopyConfig> {
        let (dest, sources) = self
            .paths
            .split_last()
            .ok_or_else(|| bad_input("cp needs SRC... DST"))?;
        let dest = Endpoint::parse(dest).map_err(bad_input)?;
        let sources = sources
            .iter()
            .map(|s| Endpoint::parse(s))
            .collect::<Result<Vec<_>, _>>()
            .map_err(bad_input)?;
        let opts = self.session_options()?;
        let token = self.token_file.as_ref().map(read_token).transpose()?;
        Ok(CopyConfig {
            sources,
            dest,
            opts,
            token,
            tls: self.tls.client_tls()?,
            far: None,
        })
    }
}

/// Runs `sluice cp`.
pub fn cp_run(args: &CpArgs) -> Result<ExitCode> {
    let mut cfg = args.copy_config()?;
    args.metrics.start()?;
    // `[user@]host:path`: a far side started over ssh, logging in while this side plans.
    let far_job = crate::ssh::far_job(&args.job);
    let starting = crate::ssh::begin(&cfg, &args.ssh, args.token_file.is_some(), &far_job)?;
    let pushes = starting.as_ref().map(crate::ssh::Starting::pushes);
    let side = if pushes.unwrap_or(matches!(cfg.dest, Endpoint::Remote { .. })) {
        Side::Send
    } else {
        Side::Recv
    };
    // Codec threads are planned only where the transfer compresses (the counts are
    // `JobArgs::job`'s, which the codec's plan decides).
    let job = JobArgs {
        planner: sluice_engine::codec::Planner::Copy(cfg.opts.compress),
        ..args.job.clone()
    };
    let runtime = runtime_for(&job, "this", side)?;
    // `cfg` now names the far side's address.
    let far = starting.map(|s| s.ready(&mut cfg, &args.ssh)).transpose()?;
    if let Some(f) = &far {
        crate::ssh::trust_far_side(&mut cfg, f.fingerprint(), args.ssh.via_ssh)?;
    }
    // Per-file rows only for the `--json` summary that prints them.
    let stats = Arc::new(if args.json {
        Stats::new()
    } else {
        Stats::without_file_report()
    });
    let progress = (!args.json && std::io::stderr().is_terminal()).then(|| spawn_progress(&stats));
    let result = copy(&cfg, &runtime, &stats);
    if let Some((bar, done)) = progress {
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        bar.finish_and_clear();
    }
    result.map_err(|e| copy_error(e, cfg.opts.resume))?;
    if let Some(far) = far {
        far.finish();
    }
    let summary = stats.summary(runtime.plan());
    if args.json {
        let _ = crate::output::stdout(&(serde_json::to_string(&summary)? + "\n"));
    } else {
        print_summary(&summary);
    }
    Ok(if summary.files_failed > 0 {
        ExitCode::Failed
    } else {
        ExitCode::Ok
    })
}

/// A failed copy as the command reports it: bad input (exit 2), or a failure (exit 1)
/// that says how to continue where its class is [`Recovery::Resume`] (what arrived is
/// kept).
fn copy_error(e: CopyError, resuming: bool) -> anyhow::Error {
    match e {
        CopyError::Usage(u) => bad_input(u),
        e if e.recovery() == Recovery::Resume => anyhow::Error::new(Resumable {
            hint: if resuming {
                "run the same command again to continue"
            } else {
                "run the same command with --resume to continue"
            },
            err: e,
        }),
        e => anyhow::Error::new(e),
    }
}

/// A failure a new session can continue from, with the hint that says how.
#[derive(Debug)]
struct Resumable {
    err: CopyError,
    hint: &'static str,
}

impl std::fmt::Display for Resumable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.err, self.hint)
    }
}

impl std::error::Error for Resumable {}

fn print_summary(s: &sluice_engine::Summary) {
    let mib = s.bytes as f64 / f64::from(1u32 << 20);
    let _ = crate::output::stdout(&(format!(
        "{} file(s) ({} directories, {} links), {:.1} MiB in {:.2} s ({:.1} MiB/s), {} skipped, {} failed, pipeline {}, policy {}",
        s.files,
        s.dirs,
        s.symlinks,
        mib,
        s.seconds,
        if s.seconds > 0.0 { mib / s.seconds } else { 0.0 },
        s.files_skipped,
        s.files_failed,
        s.pipeline,
        s.plan.policy
    ) + "\n"));
    let _ = crate::output::stdout(&(s.bottleneck.line() + "\n"));
    for line in sluice_engine::monitor::mover::lines(&s.placement_moves, &s.placement_refusals) {
        let _ = crate::output::stdout(&(line + "\n"));
    }
    if let Some(n) = &s.network {
        let _ = crate::output::stdout(
            &(format!(
                "network: {}; {} retransmitted segment(s)",
                n.reason,
                n.retransmits()
            ) + "\n"),
        );
    }
    if s.bytes_resumed > 0 {
        let _ = crate::output::stdout(
            &(format!(
                "resumed: {} bytes already at the destination",
                s.bytes_resumed
            ) + "\n"),
        );
    }
    if s.chunks_resent > 0 {
        let _ = crate::output::stdout(
            &(format!(
                "{} corrupted chunk(s) detected and sent again",
                s.chunks_resent
            ) + "\n"),
        );
    }
    for f in &s.failures {
        crate::output::stderr_line(&format!(
            "failed: {}: {}",
            f.path,
            f.error.as_deref().unwrap_or("unknown error")
        ));
    }
    for e in &s.scan_errors {
        crate::output::stderr_line(&format!("failed: {e}"));
    }
}

fn spawn_progress(
    stats: &Arc<Stats>,
) -> (indicatif::ProgressBar, Arc<std::sync::atomic::AtomicBool>) {
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:30} {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta} {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (b, d, st) = (bar.clone(), Arc::clone(&done), Arc::clone(stats));
    std::thread::spawn(move || {
        while !d.load(std::sync::atomic::Ordering::Relaxed) {
            let (files, bytes) = st.announced();
            b.set_length(bytes);
            b.set_position(st.payload_bytes());
            b.set_message(format!("{}/{files} files", st.files_finished()));
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    (bar, done)
}
