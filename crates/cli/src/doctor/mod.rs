//! `sluice doctor`: checks this host as a data-transfer node against ESnet's host-tuning
//! guidance (fasterdata) and prints, per finding, what it found, why it matters at this
//! NIC speed and RTT, and the exact command or file change that fixes it.
//!
//! Every check reads the kernel's own files (`/proc`, `/sys`) under `--sysroot` (`/`;
//! tests point it at fixture trees) and changes nothing. Exit 0 when nothing keeps the
//! host below the NIC's line rate, 1 otherwise; advice alone does not fail.

mod facts;
mod finding;
mod host;
mod irq;
mod net;
mod report;
mod settings;
#[cfg(test)]
mod tests;

use crate::exit::{bad_input, ExitCode};
use crate::plan_cmd::{JobArgs, Side};
use anyhow::Result;
use clap::{Args, Parser};
use facts::{Facts, NicFacts, Sysroot};
use finding::{Finding, Status, Target};
use settings::Daemon;
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `sluice doctor`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// Round-trip time of the paths this host serves, in ms, 1 to 10000 (socket buffers
    /// must hold the bandwidth-delay product at the NIC's speed).
    #[arg(long, value_name = "MS", default_value_t = 100,
          value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub rtt: u64,
    /// The data NIC to check (repeatable). Default: the config file's `nic`, else every
    /// NIC with a device that is up (every NIC when none is).
    #[arg(long = "nic", value_name = "NAME")]
    pub nics: Vec<String>,
    /// Data connections per transfer (as `sluice serve --streams`). [default: the config
    /// file's `streams`, else 2]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=256))]
    pub streams: Option<u32>,
    /// The daemon's buffer memory (as `sluice serve --buffer-mem`): a size or auto.
    /// [default: the config file's `buffer-mem`, else auto]
    #[arg(long, value_name = "BYTES")]
    pub buffer_mem: Option<String>,
    /// The directory the daemon serves (its file system decides O_DIRECT). [default: the
    /// config file's `root`, else /]
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// Judge the host for the daemon this configuration file describes (its `streams`,
    /// `buffer-mem`, `root` and `nic` keys), e.g. /etc/sluice/sluice.toml.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print one JSON object: the target, `limited` and every finding.
    #[arg(long)]
    pub json: bool,
    /// Read the kernel's files under DIR instead of `/` (tests: fixture trees).
    #[arg(long, value_name = "DIR", default_value = "/", hide = true)]
    pub sysroot: PathBuf,
}

/// Runs `sluice doctor`.
pub fn run(args: &DoctorArgs) -> Result<ExitCode> {
    if !args.sysroot.is_dir() {
        return Err(bad_input(format!(
            "--sysroot {}: not a directory",
            args.sysroot.display()
        )));
    }
    let daemon = settings::resolve(args)?;
    let facts = facts::read(&Sysroot::new(&args.sysroot), &daemon.root);
    let nics = chosen_nics(&facts, &daemon.nics)?;
    let target = target(args.rtt, &daemon, &nics)?;
    let findings = diagnose(&facts, &target, &nics, &daemon.root.display().to_string());
    let limited = findings.iter().any(|f| f.status == Status::Limit);
    let text = if args.json {
        report::json(&target, &findings)?
    } else {
        report::text(&target, &findings)
    };
    crate::output::stdout(&text)?;
    Ok(if limited {
        ExitCode::Failed
    } else {
        ExitCode::Ok
    })
}

/// Every finding, in report order.
pub fn diagnose(f: &Facts, t: &Target, nics: &[&NicFacts], served: &str) -> Vec<Finding> {
    let mut out = vec![link(t)];
    out.extend(host::checks(f, t, served));
    out.extend(net::checks(f, t, nics));
    out.extend(irq::checks(f, t, nics));
    out
}

/// The NICs `--nic` names, or every NIC that is up (all of them when none is).
fn chosen_nics<'a>(f: &'a Facts, names: &[String]) -> Result<Vec<&'a NicFacts>> {
    if names.is_empty() {
        let up: Vec<&NicFacts> = f.nics.iter().filter(|n| n.up).collect();
        return Ok(if up.is_empty() {
            f.nics.iter().collect()
        } else {
            up
        });
    }
    names
        .iter()
        .map(|name| {
            f.nics.iter().find(|n| &n.name == name).ok_or_else(|| {
                let known: Vec<&str> = f.nics.iter().map(|n| n.name.as_str()).collect();
                bad_input(format!(
                    "--nic {name}: no such NIC with a device under /sys/class/net (expected \
                     one of: {})",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ))
            })
        })
        .collect()
}

/// The transfer to check for: line rate of the fastest checked NIC, the RTT, the
/// engine's socket buffer plan and the daemon's planned buffer memory.
fn target(rtt_ms: u64, daemon: &Daemon, nics: &[&NicFacts]) -> Result<Target> {
    let speed = nics.iter().filter_map(|n| n.speed_mbps).max();
    let link_bits = speed.map_or(sluice_engine::net::path::ASSUMED_LINK_BITS, |m| {
        m.saturating_mul(1_000_000)
    });
    let plan = sluice_engine::net::path::plan(&sluice_engine::net::path::PathFacts {
        rtt: Duration::from_millis(rtt_ms),
        link_bits: Some(link_bits),
        streams: u16::try_from(daemon.streams).unwrap_or(u16::MAX),
        cap_bytes: u64::MAX,
    });
    Ok(Target {
        nics: nics.iter().map(|n| n.name.clone()).collect(),
        link_bits,
        link_known: speed.is_some(),
        rtt_ms,
        bdp_bytes: plan.bdp_bytes,
        streams: daemon.streams,
        socket_bytes: plan.socket_bytes,
        buffer_bytes: daemon_buffer_bytes(daemon)?,
    })
}

/// The buffer memory `sluice serve --streams N --buffer-mem X` plans, by the same code.
fn daemon_buffer_bytes(daemon: &Daemon) -> Result<u64> {
    #[derive(Parser)]
    struct Job {
        #[command(flatten)]
        job: JobArgs,
    }
    let streams = daemon.streams.to_string();
    let argv = [
        "doctor",
        "--streams",
        &streams,
        "--buffer-mem",
        &daemon.buffer_mem,
    ];
    let parsed = Job::try_parse_from(argv).map_err(|e| bad_input(e.to_string().trim()))?;
    let job = JobArgs {
        planner: sluice_engine::codec::Planner::Daemon,
        ..parsed.job
    };
    Ok(job.job(Side::Both)?.buffer_bytes)
}

/// The line rate and where it came from.
fn link(t: &Target) -> Finding {
    let found = if t.link_known {
        format!("{} at {}", t.nics.join(", "), t.rate())
    } else if t.nics.is_empty() {
        format!("no NIC with a device: checked for an assumed {}", t.rate())
    } else {
        format!(
            "{}: no speed reported, checked for an assumed {}",
            t.nics.join(", "),
            t.rate()
        )
    };
    let why = "every check below is judged against this line rate (sys/class/net/NIC/speed)";
    Finding::ok("link", found, why)
}
