//! `sluice cp` over ssh, the client's side: runs the system OpenSSH client (so
//! `~/.ssh/config`, agents and jump hosts apply) to start a one-shot `sluice` on the far
//! side (`remote_end`), hands it the session's secret on ssh's stdin, reads its ready
//! line, and tells the copy where to connect. Closing ssh's stdin (this process ending,
//! even by SIGKILL) is what ends the far side.

mod far;
mod tunnel;

use crate::exit::bad_input;
use crate::remote::{parse_scp, split_remote_path, SshTarget};
use anyhow::Result;
use clap::Args;
use sluice_engine::client::{CopyConfig, Endpoint, FarEnd};
use sluice_wire::Token;

pub use far::FarSide;

/// The flags of `sluice cp` for `[user@]host:path` endpoints.
#[derive(Debug, Clone, Args)]
pub struct SshArgs {
    /// The remote shell that starts the far side for `[user@]host:path` endpoints, like
    /// rsync's -e: e.g. "ssh -p 2222 -i KEY -o ...". Runs without prompting
    /// (BatchMode) unless stdin is a terminal.
    #[arg(
        short = 'e',
        long = "rsh",
        value_name = "CMD",
        env = "SLUICE_RSH",
        default_value = "ssh"
    )]
    pub rsh: String,
    /// The far side's sluice binary (like rsync's --rsync-path), if it is not `sluice`
    /// on the remote PATH.
    #[arg(long, value_name = "PATH", default_value = "sluice")]
    pub sluice_path: String,
    /// Carry the data and control connections through the ssh connection (when only
    /// port 22 is open): the far side listens on its loopback only, and ssh encrypts
    /// (so `--encrypt never` is allowed). For a `host:path` side only.
    #[arg(long)]
    pub via_ssh: bool,
}

/// Which way the far side moves data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// The far side receives.
    Push,
    /// The far side sends.
    Pull,
}

impl Way {
    /// The word the far side's command line takes.
    pub fn word(self) -> &'static str {
        match self {
            Way::Push => "push",
            Way::Pull => "pull",
        }
    }
}

/// The one `[user@]host:path` endpoint of `cfg`, if any, and which way it goes. Every
/// `[user@]host:path` was parsed as a local path by [`Endpoint::parse`].
///
/// # Errors
/// Several remote sources, both sides remote, or ssh and `sluice://` mixed.
fn ssh_endpoint(cfg: &CopyConfig) -> Result<Option<(Way, SshTarget)>> {
    let scp = |e: &Endpoint| match e {
        Endpoint::Local(s) => parse_scp(s),
        Endpoint::Remote { .. } => None,
    };
    let dest = scp(&cfg.dest).transpose().map_err(bad_input)?;
    let mut sources = Vec::new();
    for s in &cfg.sources {
        sources.extend(scp(s).transpose().map_err(bad_input)?);
    }
    let daemon = std::iter::once(&cfg.dest)
        .chain(&cfg.sources)
        .any(|e| matches!(e, Endpoint::Remote { .. }));
    match (dest, sources.len(), daemon) {
        (Some(_), n, _) if n > 0 => Err(bad_input(
            "both sides are [user@]host:path: give one of them as sluice:// (a daemon) or local",
        )),
        // A daemon-to-daemon copy with the far side ssh starts as one of the daemons.
        (Some(t), _, true) if cfg.sources.len() == 1 => Ok(Some((Way::Push, t))),
        (None, 1, true) if cfg.sources.len() == 1 && is_daemon(&cfg.dest) => {
            Ok(sources.pop().map(|t| (Way::Pull, t)))
        }
        (Some(_), _, true) | (None, 1.., true) => Err(bad_input(
            "a copy between [user@]host:path and a sluice:// daemon takes one source and one destination",
        )),
        (Some(t), _, false) => Ok(Some((Way::Push, t))),
        (None, 0, _) => Ok(None),
        (None, 1, false) => Ok(sources.pop().map(|t| (Way::Pull, t))),
        (None, _, false) => Err(bad_input(
            "give one [user@]host:path source per copy (several remote sources need one command each)",
        )),
    }
}

fn is_daemon(e: &Endpoint) -> bool {
    matches!(e, Endpoint::Remote { .. })
}

/// Whether one endpoint of the copy is a sluice:// daemon and the other `[user@]host:path`:
/// the far side ssh starts is then one of the two daemons of a third-party copy.
fn daemon_to_daemon(cfg: &CopyConfig) -> bool {
    let ends = || std::iter::once(&cfg.dest).chain(&cfg.sources);
    ends().any(is_daemon)
        && ends().any(|e| matches!(e, Endpoint::Local(l) if parse_scp(l).is_some()))
}

/// A far side being started over ssh, for the one `[user@]host:path` endpoint of a
/// copy.
#[derive(Debug)]
pub struct Starting {
    far: FarSide,
    way: Way,
    /// The session's path under the far side's root.
    path: String,
    token: Token,
}

/// Starts the far side when `cfg` names a `[user@]host:path` endpoint (ssh logs in
/// while this side plans; [`Starting::ready`] waits for it). `far_job` are the job
/// flags the far side plans with.
///
/// # Errors
/// Bad endpoints or flags (exit 2), or ssh cannot be run.
pub fn begin(
    cfg: &CopyConfig,
    args: &SshArgs,
    has_token_file: bool,
    far_job: &[String],
) -> Result<Option<Starting>> {
    let Some((way, target)) = ssh_endpoint(cfg)? else {
        return Ok(None);
    };
    if has_token_file && !daemon_to_daemon(cfg) {
        return Err(bad_input(
            "--token-file is for sluice:// daemons: over ssh each copy makes its own session key",
        ));
    }
    let secret = hex(&sluice_engine::session::random::<32>()?);
    let token = Token::new(secret.clone().into_bytes()).map_err(|e| anyhow::anyhow!("{e}"))?;
    if args.via_ssh && daemon_to_daemon(cfg) {
        return Err(bad_input(
            "--via-ssh cannot carry a copy between two daemons: the other daemon must reach the far side directly",
        ));
    }
    let far = FarSide::spawn(&target, way, args, far_job, &secret)?;
    let (_, path) = split_remote_path(&target.path);
    Ok(Some(Starting {
        far,
        way,
        path,
        token,
    }))
}

impl Starting {
    /// Whether this side sends (the far side receives).
    pub fn pushes(&self) -> bool {
        self.way == Way::Push
    }

    /// Waits for the far side to be ready, then rewrites the `[user@]host:path`
    /// endpoint of `cfg` into the address to connect to, with the session's fresh
    /// secret as `cfg`'s token.
    ///
    /// # Errors
    /// One line: ssh's own failure, a missing far binary, or the far side's refusal.
    pub fn ready(mut self, cfg: &mut CopyConfig, args: &SshArgs) -> Result<FarSide> {
        self.far.ready(&args.sluice_path)?;
        let remote = Endpoint::Remote {
            addr: self.far.connect_to().to_string(),
            path: self.path,
        };
        let between_daemons = daemon_to_daemon(cfg);
        match self.way {
            Way::Push => cfg.dest = remote,
            Way::Pull => cfg.sources = vec![remote],
        }
        if between_daemons {
            // The other endpoint keeps the user's token and trust.
            cfg.far = Some(FarEnd {
                is_source: self.way == Way::Pull,
                token: self.token,
                tls: cfg.tls.clone(),
            });
        } else {
            cfg.token = Some(self.token);
        }
        Ok(self.far)
    }
}

/// Trusts exactly the certificate the far side announced over the ssh channel (which
/// ssh already authenticated), for every connection to it. A far side without one can
/// only be reached through the tunnel (`--via-ssh`), never in clear text.
///
/// # Errors
/// A fingerprint that does not parse, or none where the copy would go in clear text.
pub fn trust_far_side(
    cfg: &mut CopyConfig,
    fingerprint: Option<&str>,
    via_ssh: bool,
) -> Result<()> {
    let tls = match &mut cfg.far {
        Some(far) => &mut far.tls,
        None => &mut cfg.tls,
    };
    match fingerprint {
        Some(f) => {
            let fp = f
                .parse()
                .map_err(|e| anyhow::anyhow!("the far side's ready line: {e}"))?;
            tls.trust = sluice_engine::net::tls::Trust::Pinned(fp);
        }
        None if !via_ssh => anyhow::bail!(
            "the far side announced no TLS certificate: refusing to copy in clear text (upgrade it, or use --via-ssh)"
        ),
        None => {}
    }
    Ok(())
}

/// The job flags the far side plans with: the copy's own (streams, threads, chunk and
/// buffer sizes, adaptive placement), so both ends plan for the same session.
pub fn far_job(job: &crate::plan_cmd::JobArgs) -> Vec<String> {
    vec![
        format!("--streams={}", job.streams()),
        format!("--io-threads={}", job.io_threads),
        format!("--read-depth={}", job.read_depth),
        format!("--chunk-size={}", job.chunk_size()),
        format!("--buffer-mem={}", job.buffer_mem),
        format!(
            "--adapt={}",
            if job.adapt == crate::plan_cmd::Adapt::On {
                "on"
            } else {
                "off"
            }
        ),
    ]
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests;
