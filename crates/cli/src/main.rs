//! `sluice`: a NUMA-aware bulk data mover.
//!
//! This binary is thin: argument parsing, output formatting and exit codes. The
//! decisions live in the library crates (`sluice-topology`, `sluice-placement`,
//! `sluice-affinity`, `sluice-buffers`, `sluice-engine`).

// The flags' doc comments are their `--help` text, written as users read it
// (`zstd[:LEVEL]`), not as rustdoc links.
#![allow(rustdoc::broken_intra_doc_links)]

mod completions;
mod config;
mod cp_cmd;
mod demo_cmd;
mod doctor;
mod exit;
mod gen_cmd;
mod http_args;
mod logging;
mod man;
mod metrics_args;
mod output;
mod plan_cmd;
mod remote;
mod remote_end;
mod serve_args;
mod ssh;
mod stream_cmd;
mod svg;
mod tls_args;
mod top;
mod topo_cmd;

use clap::{CommandFactory, Parser, Subcommand};

/// A NUMA-aware bulk data mover for data-transfer nodes.
#[derive(Debug, Parser)]
// `about` is spelled out: the crate's description is the Debian package's, which may not
// start with the package name.
#[command(name = "sluice", version, about = "sluice: a NUMA-aware bulk data mover", long_about = None, propagate_version = true)]
struct Cli {
    /// Log filter (tracing's env-filter syntax), e.g. `info` or `sluice=debug`.
    #[arg(long, global = true, env = "SLUICE_LOG", default_value = "warn")]
    log: String,

    /// Log lines as text (no timestamps under journald or when stderr is not a
    /// terminal) or as JSON objects for log shippers.
    #[arg(long, global = true, value_enum, env = "SLUICE_LOG_FORMAT", default_value_t = logging::LogFormat::Text)]
    log_format: logging::LogFormat,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show the machine: sockets, NUMA nodes, cores, NICs and disks with their locality.
    Topo(topo_cmd::TopoArgs),
    /// Plan where every thread and buffer of a transfer lives; optionally apply and verify.
    Plan(plan_cmd::PlanArgs),
    /// Serve a directory to sluice clients (the daemon).
    Serve(cp_cmd::ServeArgs),
    /// Copy files, trees and lots of small files to or from a daemon.
    Cp(cp_cmd::CpArgs),
    /// The main job on an embedded default: a loopback daemon, a generated data set, a
    /// verified transfer and its summary.
    Demo(demo_cmd::DemoArgs),
    /// Generate deterministic test data (tomography-like detector frames).
    Gen(gen_cmd::GenArgs),
    /// Send or receive a live byte stream, in order (a detector's output).
    Stream(stream_cmd::StreamArgs),
    /// A live view of a running daemon or client, read from its `--metrics` endpoint.
    Top(top::TopArgs),
    /// The far side of `sluice cp [user@]host:path`, started over ssh: one session.
    #[command(hide = true)]
    Oneshot(remote_end::OneShotArgs),
    /// Check this host as a data-transfer node: what limits it below the NIC's line rate
    /// at an RTT, why, and the exact fix.
    Doctor(doctor::DoctorArgs),
    /// Print the shell completion script for bash, zsh or fish.
    Completions(completions::CompletionsArgs),
    /// Write the man pages (sluice.1, sluice-SUB.1) into a directory (packaging).
    #[command(hide = true)]
    Man(man::ManArgs),
}

fn main() -> std::process::ExitCode {
    let cli = match parse_command_line() {
        Ok(cli) => cli,
        Err(err) => return fail(&err),
    };
    logging::init(&cli.log, cli.log_format);
    let result = match &cli.command {
        Command::Topo(args) => topo_cmd::run(args),
        Command::Plan(args) => plan_cmd::run(args),
        Command::Serve(args) => cp_cmd::serve_run(args),
        Command::Cp(args) => cp_cmd::cp_run(args),
        Command::Demo(args) => demo_cmd::run(args),
        Command::Gen(args) => gen_cmd::run(args),
        Command::Stream(args) => stream_cmd::run(args),
        Command::Top(args) => top::run(args),
        Command::Oneshot(args) => remote_end::run(args),
        Command::Doctor(args) => doctor::run(args),
        Command::Completions(args) => completions::run(args, Cli::command()),
        Command::Man(args) => man::run(args, Cli::command()),
    };
    match result {
        Ok(code) => code.into(),
        Err(err) => fail(&err),
    }
}

/// The command line, with `serve --config FILE`'s keys merged in.
fn parse_command_line() -> anyhow::Result<Cli> {
    let (mut cli, loaded) = config::parse::<Cli>(std::env::args_os().collect())?;
    if let Command::Serve(args) = &mut cli.command {
        args.shared.loaded = loaded.map(std::sync::Arc::new);
    }
    Ok(cli)
}

/// Reports `err` on one line and chooses the exit code.
fn fail(err: &anyhow::Error) -> std::process::ExitCode {
    let code = exit::code_of(err);
    // One line whatever the chain holds: scripts read the first line of stderr.
    let message = format!("{err:#}").replace('\n', " ");
    output::stderr_line(&format!("sluice: error: {message}"));
    code.into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit::ExitCode;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn exit_code_values_are_the_documented_ones() {
        assert_eq!(ExitCode::Ok as u8, 0);
        assert_eq!(ExitCode::Failed as u8, 1);
        assert_eq!(ExitCode::Usage as u8, 2);
    }
}
