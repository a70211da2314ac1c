//! `sluice plan`: where every thread and buffer of a transfer lives, and proof of it.

use crate::exit::{bad_input, ExitCode};
use crate::{output, svg};
use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use sluice_engine::codec::Planner;
use sluice_placement::{describe, plan, Job, ManualPlacement, Plan, PlanError, Policy, Role};
use sluice_topology::{cpulist, discover, Machine, TopologySource};
use std::fmt::Write as _;
use std::path::PathBuf;

/// Default chunk (slot) size. 4 MiB: large enough that per-chunk costs (a frame header,
/// a checksum finalisation, a syscall) vanish, small enough that a 256 MiB cap still
/// gives every thread several slots in flight.
pub const DEFAULT_CHUNK: &str = "4MiB";
/// A stream's chunk size where `--chunk-size` is not given: a slot holds a whole record.
pub const DEFAULT_STREAM_CHUNK: &str = "16MiB";
/// Default total buffer memory: sized by the job (see
/// [`sluice_engine::options::auto_buffer_bytes`]).
pub const DEFAULT_BUFFER_MEM: &str = "auto";

/// Which side of a transfer the plan is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Side {
    /// Source host: read from storage, send.
    Send,
    /// Sink host: receive, write to storage.
    Recv,
    /// A daemon serving both directions.
    Both,
}

/// The job description shared by every command that plans (`plan`, later `serve`/`cp`).
#[derive(Debug, Clone, Args)]
pub struct JobArgs {
    /// Placement policy: auto, os, bind, smts, nmts or mts.
    #[arg(long, value_name = "P", default_value = "auto")]
    pub policy: String,
    /// Data connections (net-send / net-recv threads) per direction. [default: 2; `cp`
    /// not given one opens 8 where the control connection's round-trip time is 20 ms
    /// or more, which its plan's 2 threads serve]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=256))]
    pub streams: Option<u32>,
    /// Storage threads (io-read / io-write) per direction (`stream` plans them but runs
    /// none: its net threads read and write the records).
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub io_threads: u32,
    /// Large-file chunk reads each io-read thread keeps in flight with O_DIRECT
    /// (io_uring), so the disk always has work queued while the thread checksums and
    /// sends; 1 reads one chunk at a time.
    #[arg(long, value_name = "N", default_value_t = sluice_engine::DEFAULT_READ_DEPTH,
          value_parser = clap::value_parser!(u32).range(1..=64))]
    pub read_depth: u32,
    /// Compression threads (sender side), a stage of their own between storage and
    /// network. 0: the io-read threads compress. [default: --io-threads when the
    /// transfer compresses (`serve`: always planned; `stream`: 0, its net threads
    /// compress their own records), else 0]
    #[arg(long, value_name = "N")]
    pub compress_threads: Option<u32>,
    /// Decompression threads (receiver side). 0: the net-recv threads decompress.
    /// [default: --streams when the transfer compresses (`serve`: always planned;
    /// `stream`: 0), else 0]
    #[arg(long, value_name = "N")]
    pub decompress_threads: Option<u32>,
    /// Which program plans the transfer (a copy and its `--compress`, a daemon, a
    /// stream): the default codec-thread counts follow it (set by the command, not a
    /// flag).
    #[arg(skip)]
    pub planner: Planner,
    /// NIC whose NUMA node the data threads and buffers go to (repeatable); a daemon
    /// also advertises its addresses for the data connections. Connections follow the
    /// routing table: a client does not bind them to it. Default: every NIC with a known
    /// NUMA node.
    #[arg(long = "nic", value_name = "NAME")]
    pub nics: Vec<String>,
    /// Block device the transfer reads or writes (repeatable), e.g. nvme0n1.
    #[arg(long = "storage", value_name = "DEV")]
    pub storage: Vec<String>,
    /// CPUs never to use, as a list such as `0,2-3` (seed 002's core zoning).
    #[arg(long, value_name = "LIST")]
    pub reserve_cores: Option<String>,
    /// Manual placement of a role: `ROLE=mem:N,exec:A[+B]` or `ROLE=mem:N,exec:os`
    /// (seed 001's configurations A-H), repeatable.
    #[arg(long = "place", value_name = "ROLE=SPEC")]
    pub place: Vec<String>,
    /// Total buffer memory for all channels, e.g. 256MiB or 1GiB, allocated once at
    /// start-up; `auto`: 4 chunk slots per data thread, plus --read-depth - 1 per
    /// io-read thread (at least 8).
    #[arg(long, value_name = "BYTES", default_value = DEFAULT_BUFFER_MEM)]
    pub buffer_mem: String,
    /// Chunk (buffer slot) size: a power of two from 64KiB to 64MiB (what the protocol
    /// carries). [default: 4MiB; `stream`: 16MiB, so that a slot holds a whole record]
    #[arg(long, value_name = "BYTES")]
    pub chunk_size: Option<String>,
    /// Adaptive placement while transfers run: `on` moves a thread the plan pins to one
    /// core to a free core of the same node when other processes take its core (never
    /// to another node, nor to a --reserve-cores CPU); `off` leaves every thread where
    /// the plan put it. An ssh-started far side follows the copy's setting.
    #[arg(long, value_enum, value_name = "on|off", default_value_t = Adapt::On)]
    pub adapt: Adapt,
}

/// `--adapt`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Adapt {
    /// Move threads off cores taken by foreign load.
    On,
    /// Leave threads where the plan put them.
    Off,
}

/// Data connections per direction where `--streams` is not given.
pub const DEFAULT_STREAMS: u32 = 2;

impl JobArgs {
    /// `--streams`, or [`DEFAULT_STREAMS`].
    pub fn streams(&self) -> u32 {
        self.streams.unwrap_or(DEFAULT_STREAMS)
    }

    /// `--chunk-size` as given, or the planner's default ([`DEFAULT_CHUNK`];
    /// [`DEFAULT_STREAM_CHUNK`] for a stream).
    pub fn chunk_size(&self) -> &str {
        match (&self.chunk_size, self.planner) {
            (Some(given), _) => given,
            (None, Planner::Stream) => DEFAULT_STREAM_CHUNK,
            (None, _) => DEFAULT_CHUNK,
        }
    }

    /// Applies `--adapt` to this process, and `--reserve-cores` to where it may move
    /// threads (the list was checked when the job was planned).
    pub fn apply_adapt(&self) {
        use sluice_engine::monitor::mover;
        mover::set_enabled(self.adapt == Adapt::On);
        let reserved = self.reserve_cores.as_deref().map(cpulist::parse);
        mover::set_reserved(reserved.and_then(Result::ok).unwrap_or_default());
    }
}

/// Arguments of `sluice plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Topology source: this machine (default), `synthetic:"pack:2 numa:2 core:8 pu:1"`,
    /// or the path of an hwloc XML file.
    #[arg(long, value_name = "SRC", default_value = "this")]
    pub topology: String,
    /// Which side of a transfer to plan for.
    #[arg(long, value_enum, default_value_t = Side::Both)]
    pub side: Side,
    #[command(flatten)]
    pub job: JobArgs,
    /// Print the plan as JSON.
    #[arg(long)]
    pub json: bool,
    /// Also draw the plan on the machine as SVG into FILE.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// Say why the policy was chosen and where each role went.
    #[arg(long)]
    pub explain: bool,
    /// Apply the plan on this machine: spawn and pin its threads, bind its buffers, and
    /// read both back from the kernel.
    #[arg(long)]
    pub apply: bool,
    /// With --apply: exit 1 when any thread or buffer page is not where planned.
    #[arg(long, requires = "apply")]
    pub verify: bool,
}

/// Why a job has no threads of `role`: the side excludes it, or its count is zero.
fn why_no_threads(role: Role, side: Side) -> &'static str {
    let sends = matches!(side, Side::Send | Side::Both);
    let recvs = matches!(side, Side::Recv | Side::Both);
    match role {
        Role::NetSend | Role::IoRead | Role::Compress if !sends => "--side recv runs none",
        Role::NetRecv | Role::IoWrite | Role::Decompress if !recvs => "--side send runs none",
        Role::NetSend | Role::NetRecv => "--streams is 0",
        Role::IoRead | Role::IoWrite => "--io-threads is 0",
        Role::Compress => "--compress-threads is 0",
        Role::Decompress => "--decompress-threads is 0",
        Role::Control => "no control thread",
    }
}

/// Parses a byte size such as `4MiB`, `1G` or `65536`; errors name the flag.
pub fn parse_bytes(flag: &str, value: &str) -> Result<u64> {
    parse_size::Config::new()
        .with_binary()
        .parse_size(value)
        .map_err(|e| {
            bad_input(format!(
                "{flag} {value:?} is not a size: {e} (expected e.g. 4MiB, 1GiB, 65536)"
            ))
        })
}

impl JobArgs {
    /// The policy asked for.
    pub fn policy(&self) -> Result<Policy> {
        self.policy.parse().map_err(bad_input)
    }

    /// Builds the planner's job for one side of a transfer.
    pub fn job(&self, side: Side) -> Result<Job> {
        let threads = self.thread_counts(side);
        let reserved_cpus = match &self.reserve_cores {
            None => Vec::new(),
            Some(list) => cpulist::parse(list).map_err(|e| {
                bad_input(format!(
                    "--reserve-cores {list:?} is not a CPU list such as 0,2-3: {e}"
                ))
            })?,
        };
        let placements = self.placements(&threads, side)?;
        let chunk_bytes = parse_bytes("--chunk-size", self.chunk_size())?;
        let wire_size = u32::try_from(chunk_bytes).is_ok_and(sluice_wire::is_valid_chunk_bytes);
        if !wire_size {
            return Err(bad_input(format!(
                "--chunk-size {:?} is invalid: expected a power of two from 64KiB to 64MiB, e.g. 4MiB",
                self.chunk_size()
            )));
        }
        let buffer_bytes = self.buffer_bytes(&threads, chunk_bytes)?;
        Ok(Job {
            threads,
            nics: self.nics.clone(),
            storage: self.storage.clone(),
            buffer_bytes,
            chunk_bytes,
            reserved_cpus,
            placements,
        })
    }

    /// Threads per role on `side` (roles without threads left out).
    fn thread_counts(&self, side: Side) -> Vec<(Role, u32)> {
        let (compress, decompress) = self.planner.codec_threads(
            self.io_threads,
            self.streams(),
            (self.compress_threads, self.decompress_threads),
        );
        let mut threads = vec![(Role::Control, 1)];
        if matches!(side, Side::Send | Side::Both) {
            threads.push((Role::NetSend, self.streams()));
            threads.push((Role::IoRead, self.io_threads));
            threads.push((Role::Compress, compress));
        }
        if matches!(side, Side::Recv | Side::Both) {
            threads.push((Role::NetRecv, self.streams()));
            threads.push((Role::IoWrite, self.io_threads));
            threads.push((Role::Decompress, decompress));
        }
        threads.retain(|(_, n)| *n > 0);
        threads
    }

    /// The `--place` placements, each for a role the job runs.
    fn placements(&self, threads: &[(Role, u32)], side: Side) -> Result<Vec<ManualPlacement>> {
        let mut placements = Vec::with_capacity(self.place.len());
        for spec in &self.place {
            let placement: ManualPlacement = spec.parse().map_err(bad_input)?;
            // A placement for a role the job does not run would be silently ignored.
            if !threads.iter().any(|(role, _)| *role == placement.role) {
                return Err(bad_input(format!(
                    "--place {spec:?}: the plan has no {} threads ({}): expected a role it runs",
                    placement.role,
                    why_no_threads(placement.role, side)
                )));
            }
            placements.push(placement);
        }
        Ok(placements)
    }

    /// `--buffer-mem`: a size, or `auto`, sized by the job's data threads (the engine
    /// decides how: `sluice_engine::options::auto_buffer_bytes`).
    fn buffer_bytes(&self, threads: &[(Role, u32)], chunk_bytes: u64) -> Result<u64> {
        if self.buffer_mem.trim() != "auto" {
            return parse_size::Config::new()
                .with_binary()
                .parse_size(&self.buffer_mem)
                .map_err(|e| {
                    bad_input(format!(
                        "--buffer-mem {:?} is not a size: {e} (expected auto or a size such as \
                         256MiB, 1GiB)",
                        self.buffer_mem
                    ))
                });
        }
        Ok(sluice_engine::options::auto_buffer_bytes(
            threads,
            chunk_bytes,
            self.read_depth,
        ))
    }

    /// Plans the job on a machine; planner errors are bad input (exit 2).
    pub fn plan(&self, machine: &Machine, side: Side) -> Result<Plan> {
        let job = self.job(side)?;
        plan(machine, &job, self.policy()?).map_err(|e| bad_input(self.plan_error(e)))
    }

    /// The planner's message, restated with the values as the user typed them where
    /// the planner only knows them as numbers (`--buffer-mem 16MiB`, not `16777216`).
    fn plan_error(&self, err: PlanError) -> String {
        match err {
            PlanError::BufferTooSmall {
                threads, needed, ..
            } => format!(
                "--buffer-mem {:?} is too small for --chunk-size {:?}: {threads} threads need \
                 one slot each, expected at least {needed} bytes ({} MiB) or a smaller chunk",
                self.buffer_mem,
                self.chunk_size(),
                needed.div_ceil(1 << 20)
            ),
            PlanError::BadChunkSize { chunk_bytes } => {
                let bytes = if self.chunk_size().trim() == chunk_bytes.to_string() {
                    String::new()
                } else {
                    format!(" ({chunk_bytes} bytes)")
                };
                format!(
                    "--chunk-size {:?}{bytes} is invalid: expected a positive multiple of \
                     4096 bytes, e.g. 4MiB",
                    self.chunk_size()
                )
            }
            PlanError::BadPlacementNode {
                role,
                node,
                problem,
            } => {
                let spec = self
                    .place
                    .iter()
                    .find(|p| p.parse::<ManualPlacement>().is_ok_and(|m| m.role == role))
                    .map_or_else(|| role.to_string(), |p| format!("{p:?}"));
                format!("--place {spec}: node {node} {problem}")
            }
            other => other.to_string(),
        }
    }
}

/// Runs `sluice plan`.
pub fn run(args: &PlanArgs) -> Result<ExitCode> {
    let source: TopologySource = args.topology.parse().map_err(bad_input)?;
    if args.apply && source != TopologySource::This {
        return Err(bad_input(format!(
            "--apply needs a plan for this machine, but --topology is {:?}: drop --topology to apply",
            args.topology
        )));
    }
    let machine = discover(&source).map_err(bad_input)?;
    let plan = args.job.plan(&machine, args.side)?;
    if let Some(path) = &args.svg {
        std::fs::write(path, svg::render(&machine, Some(&plan)))
            .with_context(|| format!("cannot write SVG to {}", path.display()))?;
    }
    let report = if args.apply {
        Some(sluice_affinity::apply_and_verify(&plan).context("applying the plan")?)
    } else {
        None
    };
    let mut text = String::new();
    if args.json {
        let mut value = serde_json::to_value(&plan)?;
        if let (Some(report), Some(obj)) = (&report, value.as_object_mut()) {
            let mut verification = serde_json::to_value(report)?;
            if let Some(v) = verification.as_object_mut() {
                // The verdict, so that scripts need not recompute it from the rows.
                v.insert("ok".into(), report.ok().into());
            }
            obj.insert("verification".into(), verification);
        }
        text = serde_json::to_string_pretty(&value)? + "\n";
    } else {
        text.push_str(&describe(&plan));
        for note in &plan.notes {
            let _ = writeln!(text, "note: {note}");
        }
        if args.explain {
            text.push_str("why:\n");
            for line in &plan.explain {
                let _ = writeln!(text, "  {line}");
            }
        }
        if let Some(report) = &report {
            let _ = write!(text, "{report}");
        }
    }
    output::stdout(&text)?;
    match report {
        Some(r) if args.verify && !r.ok() => {
            output::stderr_line(
                "sluice: verification failed: threads or buffer pages are not where planned",
            );
            Ok(ExitCode::Failed)
        }
        _ => Ok(ExitCode::Ok),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        job: JobArgs,
    }

    fn job(args: &[&str]) -> JobArgs {
        let argv = std::iter::once("t").chain(args.iter().copied());
        Cmd::try_parse_from(argv).expect("valid flags").job
    }

    #[test]
    fn a_streams_default_chunk_is_a_records_and_a_given_one_is_kept() {
        let mut given = job(&["--chunk-size", "4MiB"]);
        let mut default = job(&[]);
        assert_eq!(default.chunk_size(), DEFAULT_CHUNK);
        default.planner = Planner::Stream;
        given.planner = Planner::Stream;
        assert_eq!(default.chunk_size(), DEFAULT_STREAM_CHUNK);
        // Before, a stream took an explicit 4MiB for the default and made it 16MiB.
        assert_eq!(given.chunk_size(), "4MiB");
    }
}
