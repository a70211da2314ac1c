//! The TLS flags: `--encrypt` on both sides, the server's identity (`--cert`, `--key`,
//! `--state-dir`) and the client's trust (`--known-hosts`, `--strict-host-key`, `--ca`).

use crate::exit::bad_input;
use anyhow::Result;
use clap::{Args, ValueEnum};
use sluice_engine::net::tls::{
    default_known_hosts, default_state_dir, host_name, ClientTls, Encrypt, Identity, ServerTls,
    Trust,
};
use std::net::SocketAddr;
use std::path::PathBuf;

/// `--encrypt`: when connections are encrypted (TLS 1.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EncryptArg {
    /// Client: TLS unless the peer is on loopback. Server: clear text from this host only.
    Auto,
    /// TLS on every connection; a server refuses clear text from every peer.
    Always,
    /// Client: clear text. Server: clear text from anyone (TLS still served on request).
    Never,
}

impl From<EncryptArg> for Encrypt {
    fn from(e: EncryptArg) -> Encrypt {
        match e {
            EncryptArg::Auto => Encrypt::Auto,
            EncryptArg::Always => Encrypt::Always,
            EncryptArg::Never => Encrypt::Never,
        }
    }
}

/// A client's TLS flags (`cp`, `stream send`).
#[derive(Debug, Clone, Args)]
pub struct ClientTlsArgs {
    /// Encrypt the connections (TLS 1.3): auto (unless the daemon is on loopback),
    /// always or never. A TLS failure is an error, never a fall-back to clear text.
    #[arg(long, value_enum, default_value_t = EncryptArg::Auto)]
    pub encrypt: EncryptArg,
    /// Known-hosts file pinning daemons' certificates (trust on first use)
    /// [default: $SLUICE_KNOWN_HOSTS, else $XDG_CONFIG_HOME/sluice/known_hosts, else
    /// ~/.config/sluice/known_hosts].
    #[arg(long, value_name = "FILE")]
    pub known_hosts: Option<PathBuf>,
    /// Refuse a daemon that is not in the known-hosts file instead of pinning it.
    #[arg(long)]
    pub strict_host_key: bool,
    /// Validate the daemon's certificate chain and host name against these CA
    /// certificates (PEM) instead of pinning it.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["known_hosts", "strict_host_key"])]
    pub ca: Option<PathBuf>,
}

impl ClientTlsArgs {
    /// The engine's client TLS settings.
    ///
    /// # Errors
    /// `--ca` names no readable file (bad input).
    pub fn client_tls(&self) -> Result<ClientTls> {
        let trust = match &self.ca {
            Some(ca) if !ca.is_file() => {
                return Err(bad_input(format!(
                    "--ca {}: not a readable file",
                    ca.display()
                )))
            }
            Some(ca) => Trust::Ca(ca.clone()),
            None => Trust::KnownHosts {
                file: self.known_hosts.clone().or_else(default_known_hosts),
                strict: self.strict_host_key,
            },
        };
        Ok(ClientTls {
            encrypt: self.encrypt.into(),
            trust,
        })
    }
}

/// A server's TLS flags (`serve`, `stream recv`).
#[derive(Debug, Clone, Args)]
pub struct ServerTlsArgs {
    /// Clear text accepted: auto = from this host only, always = from no one (TLS
    /// required), never = from anyone. TLS is served whenever a client asks.
    #[arg(long, value_enum, default_value_t = EncryptArg::Auto)]
    pub encrypt: EncryptArg,
    /// Certificate chain (PEM) to present, e.g. from an ACME or site CA; with --key.
    #[arg(long, value_name = "FILE", requires = "key")]
    pub cert: Option<PathBuf>,
    /// Private key (PEM) of --cert.
    #[arg(long, value_name = "FILE", requires = "cert")]
    pub key: Option<PathBuf>,
    /// Where the self-signed identity is created on first start and kept
    /// [default: $SLUICE_STATE_DIR, else $XDG_STATE_HOME/sluice, else
    /// ~/.local/state/sluice].
    #[arg(long, value_name = "DIR", conflicts_with = "cert")]
    pub state_dir: Option<PathBuf>,
}

impl ServerTlsArgs {
    /// The server's TLS side: `--cert`/`--key`, else the state directory's identity
    /// (created for this host's name and `listen`'s address when missing).
    pub fn server_tls(&self, listen: SocketAddr) -> Result<ServerTls> {
        let identity = match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => Identity::from_pem_files(cert, key),
            _ => {
                let mut names: Vec<String> = host_name().into_iter().collect();
                if !listen.ip().is_unspecified() {
                    names.push(listen.ip().to_string());
                }
                match self.state_dir.clone().or_else(default_state_dir) {
                    Some(dir) => Identity::load_or_create(&dir, &names),
                    None => {
                        tracing::warn!("no state directory ($SLUICE_STATE_DIR, $XDG_STATE_HOME, $HOME): this run's TLS certificate is new and changes at the next start");
                        Identity::ephemeral(&names)
                    }
                }
            }
        }
        .map_err(bad_input)?;
        ServerTls::new(&identity, self.encrypt.into()).map_err(bad_input)
    }
}
