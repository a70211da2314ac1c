//! `sluice oneshot` (hidden): the far side `sluice cp` starts over ssh. It reads the
//! session's secret as one line on stdin (never argv: argv is visible in ps), listens
//! on the address the ssh connection arrived at (`SSH_CONNECTION`; 127.0.0.1 with
//! `--via-ssh`), prints one ready line on stdout, serves exactly one session confined
//! to the named path, and exits. It exits at once when its stdin reaches EOF before the
//! session is over (the ssh connection went away: the client was killed) and when no
//! client connects within `--wait`.

use crate::cp_cmd::runtime_for;
use crate::exit::{bad_input, ExitCode};
use crate::plan_cmd::{JobArgs, Side};
use crate::remote::{split_remote_path, Ready};
use anyhow::{anyhow, Context, Result};
use clap::{Args, ValueEnum};
use sluice_engine::net::tls::{Encrypt, ServerTls};
use sluice_engine::oneshot::{serve_one, OneShotConfig};
use sluice_wire::{Direction, Token};
use std::io::{BufRead, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The longest secret line read from stdin.
const SECRET_LINE_MAX: u64 = 1024;
/// The far side's exit code when its client went away.
const GONE_EXIT: i32 = 3;

/// Which way the far side moves data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum WayArg {
    /// The far side receives.
    Push,
    /// The far side sends.
    Pull,
}

/// Arguments of `sluice oneshot`.
#[derive(Debug, Args)]
pub struct OneShotArgs {
    /// push: receive into PATH; pull: send PATH.
    #[arg(value_enum)]
    pub way: WayArg,
    /// The path as the client typed it after `host:` (relative to this home).
    pub path: String,
    /// Listen on 127.0.0.1 only: the client comes through the ssh connection.
    #[arg(long)]
    pub via_ssh: bool,
    /// Seconds to wait for the client's connections.
    #[arg(long, value_name = "S", default_value_t = 30)]
    pub wait: u64,
    #[command(flatten)]
    pub job: JobArgs,
}

/// Runs `sluice oneshot`.
pub fn run(args: &OneShotArgs) -> Result<ExitCode> {
    let token = read_secret()?;
    let done = Arc::new(AtomicBool::new(false));
    watch_stdin(Arc::clone(&done))?;
    let (root, path) = split_remote_path(&args.path);
    if !Path::new(&root).is_dir() {
        return Err(bad_input(format!(
            "{:?}: {root:?} is not a directory on the far side",
            args.path
        )));
    }
    let ip = listen_ip(args.via_ssh)?;
    let listener = TcpListener::bind((ip, 0)).with_context(|| format!("cannot listen on {ip}"))?;
    let (direction, side) = match args.way {
        WayArg::Push => (Direction::Push, Side::Recv),
        WayArg::Pull => (Direction::Pull, Side::Send),
    };
    let job = JobArgs {
        planner: sluice_engine::codec::Planner::Daemon,
        ..args.job.clone()
    };
    let runtime = runtime_for(&job, "this", side)?;
    // A certificate of this session's own; ssh carries its fingerprint to the client,
    // which pins it. Through the tunnel (`--via-ssh`) connections arrive from loopback
    // and may stay clear (ssh encrypts them); direct ones must be TLS.
    let tls = ServerTls::ephemeral(Encrypt::Auto)?;
    let ready = Ready {
        addr: SocketAddr::new(ip, listener.local_addr()?.port()),
        fingerprint: Some(tls.fingerprint().to_string()),
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", ready.line()).and_then(|()| out.flush())?;
    drop(out);
    let cfg = OneShotConfig {
        root: root.into(),
        path,
        direction,
        token,
        runtime,
        io_threads: args.job.io_threads,
        read_depth: args.job.read_depth,
        wait: Duration::from_secs(args.wait),
        tls,
    };
    let result = serve_one(&listener, &cfg);
    done.store(true, Ordering::SeqCst);
    result?;
    Ok(ExitCode::Ok)
}

/// The session's secret: the first line of stdin.
fn read_secret() -> Result<Token> {
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .take(SECRET_LINE_MAX)
        .read_line(&mut line)
        .context("reading the session key from stdin")?;
    let secret = line.strip_suffix('\n').ok_or_else(|| {
        bad_input("no session key on stdin: this command is started by sluice cp")
    })?;
    Token::new(secret.as_bytes().to_vec()).map_err(|e| bad_input(format!("the session key: {e}")))
}

/// Exits the process as soon as stdin reaches EOF (or fails) before `done` is set:
/// the client is gone. The sink writes to temporary names (`.NAME.sluice-part`), so
/// nothing half written is ever under a final name; the partials stay for `--resume`.
fn watch_stdin(done: Arc<AtomicBool>) -> Result<()> {
    std::thread::Builder::new()
        .name("stdin-watch".into())
        .spawn(move || {
            let mut sink = [0u8; 256];
            let mut stdin = std::io::stdin().lock();
            while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
            if !done.load(Ordering::SeqCst) {
                crate::output::stderr_line(
                    "sluice: the client went away (ssh closed stdin): exiting",
                );
                std::process::exit(GONE_EXIT);
            }
        })
        .map(|_| ())
        .map_err(|e| anyhow!("cannot start the stdin watchdog: {e}"))
}

/// Where to listen: 127.0.0.1 with `--via-ssh`, else the server address of
/// `SSH_CONNECTION` (`client_ip client_port server_ip server_port`).
fn listen_ip(via_ssh: bool) -> Result<IpAddr> {
    if via_ssh {
        return Ok(IpAddr::V4(Ipv4Addr::LOCALHOST));
    }
    let conn = std::env::var("SSH_CONNECTION").map_err(|_| {
        bad_input("SSH_CONNECTION is not set: this command is started by sluice cp over ssh")
    })?;
    server_ip(&conn).ok_or_else(|| bad_input(format!("SSH_CONNECTION {conn:?} is not understood")))
}

/// The server address in an `SSH_CONNECTION` value.
fn server_ip(conn: &str) -> Option<IpAddr> {
    let ip = conn.split_whitespace().nth(2)?;
    // A link-local IPv6 address may carry its zone (`fe80::1%eth0`): not bindable as is.
    ip.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listening_address_is_the_one_ssh_arrived_at() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(
            server_ip("10.43.0.1 51234 10.43.0.2 22"),
            Some(ip("10.43.0.2"))
        );
        assert_eq!(server_ip("fd00::1 5 fd00::2 22"), Some(ip("fd00::2")));
        assert_eq!(server_ip("10.43.0.1 51234"), None);
        assert_eq!(server_ip(""), None);
        assert_eq!(listen_ip(true).unwrap(), ip("127.0.0.1"));
    }
}
