//! The flags of `sluice serve` for a daemon shared by several users: accounts, audit
//! log, limits, timeouts and drain.

use anyhow::Result;
use clap::Args;
use sluice_engine::daemon::Shared;
use sluice_engine::drain::{Drained, OnReload};
use sluice_engine::guard::Limits;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// `sluice serve`'s accounts, audit and hardening flags.
#[derive(Debug, Clone, Args)]
pub struct SharedArgs {
    /// Accounts file (TOML): several `[[account]]` entries, each with its own token,
    /// root and rights; SIGHUP re-reads it. Replaces --root and --token-file.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["root", "token_file", "insecure_no_auth"])]
    pub accounts: Option<PathBuf>,
    /// Append one JSON line per session (and per refused connection) to FILE.
    #[arg(long, value_name = "FILE")]
    pub audit_log: Option<PathBuf>,
    /// Seconds a connection has, in all, to finish its handshake (or its join).
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    pub handshake_timeout: u64,
    /// Seconds a running session's peer may send nothing before the session is ended
    /// (0: never).
    #[arg(long, value_name = "SECS", default_value_t = 300)]
    pub idle_timeout: u64,
    /// Sessions served at once.
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub max_sessions: usize,
    /// Connections from one address that have not yet authenticated.
    #[arg(long, value_name = "N", default_value_t = 32)]
    pub max_per_address: usize,
    /// Seconds running sessions may finish after SIGTERM or SIGINT before they are
    /// aborted.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    pub drain_timeout: u64,
    /// Limit the daemon to RATE bytes per second in all (500M, 2G: SI; 100Mi: IEC; at least 1M),
    /// shared fairly by its running sessions; an account's own `bwlimit` applies too.
    #[arg(long, value_name = "RATE")]
    pub bwlimit: Option<String>,
    /// Read the settings from FILE (TOML): every long flag of `sluice serve` is a key
    /// (`listen = "0.0.0.0:7878"`, `max-sessions = 64`), accounts may be inline
    /// `[[account]]` tables; flags on the command line, and the environment variables
    /// that stand for flags (`SLUICE_LOG`, `SLUICE_LOG_FORMAT`), override the file.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Validate the settings (and the file), print the effective settings and the plan,
    /// and exit without listening.
    #[arg(long)]
    pub check: bool,
    /// The configuration file as applied (set after parsing, not a flag).
    #[arg(skip)]
    pub loaded: Option<Arc<crate::config::Loaded>>,
}

impl SharedArgs {
    /// The engine's settings for these flags (signals handled: this is `sluice serve`),
    /// with the `--token-file` a SIGHUP re-reads.
    ///
    /// # Errors
    /// A limit of zero, a zero handshake timeout, a bad `--bwlimit`.
    pub fn shared(&self, token_file: Option<PathBuf>) -> Result<Shared> {
        for (flag, v) in [
            ("--max-sessions", self.max_sessions),
            ("--max-per-address", self.max_per_address),
            (
                "--handshake-timeout",
                usize::from(self.handshake_timeout > 0),
            ),
        ] {
            if v == 0 {
                return Err(crate::exit::bad_input(format!("{flag} must be at least 1")));
            }
        }
        let on_reload = self.loaded.clone().map(|l| {
            let hook = crate::config::reload::Reloader::new((*l).clone());
            OnReload(Arc::new(move || hook.reload()))
        });
        Ok(Shared {
            accounts_file: self.accounts.clone(),
            accounts_embedded: self.loaded.as_ref().is_some_and(|l| l.inline_accounts),
            token_file,
            on_reload,
            bwlimit: rate(self.bwlimit.as_deref())?,
            audit_log: self.audit_log.clone(),
            limits: Limits {
                max_sessions: self.max_sessions,
                max_per_address: self.max_per_address,
                handshake_timeout: Duration::from_secs(self.handshake_timeout),
                idle_timeout: Duration::from_secs(self.idle_timeout),
            },
            drain_timeout: Duration::from_secs(self.drain_timeout),
            signals: true,
        })
    }
}

/// Reports a drain on stderr (one line per aborted session) and chooses the exit:
/// 0 when every session finished, 1 when some were aborted.
pub fn report_drain(d: &Drained) -> crate::exit::ExitCode {
    for what in &d.aborted {
        crate::output::stderr_line(&format!("sluice: drain: aborted {what}"));
    }
    crate::output::stderr_line(&format!(
        "sluice: drained: {} session(s) finished, {} aborted",
        d.finished,
        d.aborted.len()
    ));
    if d.aborted.is_empty() {
        crate::exit::ExitCode::Ok
    } else {
        crate::exit::ExitCode::Failed
    }
}

/// Binds the daemon's listener; an address in use or not this host's is bad input (one
/// line, exit 2), not a failure.
pub fn bind(listen: SocketAddr) -> Result<TcpListener> {
    use std::io::ErrorKind;
    TcpListener::bind(listen).map_err(|e| {
        let why = match e.kind() {
            ErrorKind::AddrInUse => "the port is in use (another daemon?)".to_string(),
            ErrorKind::AddrNotAvailable => "not an address of this host".to_string(),
            ErrorKind::PermissionDenied => {
                "permission denied (a port below 1024 needs CAP_NET_BIND_SERVICE)".to_string()
            }
            _ => return anyhow::Error::new(e).context(format!("cannot listen on {listen}")),
        };
        crate::exit::bad_input(format!("--listen {listen}: {why}"))
    })
}

/// `err` with the configuration file's name, line and key in front when it names a
/// flag whose value came from the file (bad input stays bad input).
pub fn attribute(loaded: Option<&crate::config::Loaded>, err: anyhow::Error) -> anyhow::Error {
    let message = format!("{err:#}");
    match loaded.and_then(|l| l.attribute(&message)) {
        Some(m) if crate::exit::code_of(&err) == crate::exit::ExitCode::Usage => {
            crate::exit::bad_input(m)
        }
        Some(m) => anyhow::anyhow!(m),
        None => err,
    }
}

/// `sluice serve --check`: loads the certificate (when one is given) and plans, then
/// prints the effective settings and the plan on stdout; the caller has validated
/// everything else that does not need the listener.
pub fn check(
    serve: &crate::cp_cmd::ServeArgs,
    job: &crate::plan_cmd::JobArgs,
) -> Result<crate::exit::ExitCode> {
    if serve.tls.cert.is_some() {
        serve.tls.server_tls(serve.listen)?;
    }
    let machine = crate::topo_cmd::load_machine(&serve.topology)?;
    let plan = job.plan(&machine, crate::plan_cmd::Side::Both)?;
    let (args, listen) = (&serve.shared, serve.listen);
    let mut out = String::new();
    match &args.loaded {
        Some(l) => {
            out.push_str(&format!("# {}: valid\n", l.file.path.display()));
            out.push_str(&crate::config::show_settings(l));
        }
        None => out.push_str("# no --config: the command line's settings are valid\n"),
    }
    out.push_str(&format!(
        "# plan: listen on {listen}, policy {}, {} channel(s), {} MiB of buffers\n",
        plan.policy,
        plan.channels.len(),
        plan.buffer_bytes() >> 20
    ));
    for line in sluice_placement::describe(&plan).lines() {
        out.push_str(&format!("#   {line}\n"));
    }
    out.push_str("# --check: nothing was started\n");
    let _ = crate::output::stdout(&out);
    Ok(crate::exit::ExitCode::Ok)
}

/// `--bwlimit RATE` in bytes per second.
///
/// # Errors
/// Not a rate (bad input, naming the flag).
pub fn rate(text: Option<&str>) -> Result<Option<u64>> {
    text.map(|t| {
        sluice_engine::bwlimit::parse_rate(t)
            .map_err(|e| crate::exit::bad_input(format!("--bwlimit {e}")))
    })
    .transpose()
}
