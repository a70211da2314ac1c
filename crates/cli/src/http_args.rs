//! `sluice serve --http ADDR`: the HTTP/WebDAV face for FTS3 and gfal2 (`sluice-http`),
//! started beside the daemon with the same accounts and TLS identity.

use crate::exit::bad_input;
use anyhow::Result;
use clap::Args;
use sluice_engine::accounts::{Accounts, Live};
use sluice_engine::net::tls::ServerTls;
use sluice_engine::runtime::Runtime;
use sluice_engine::SessionOptions;
use sluice_http::copy::native::Native;
use sluice_http::HttpServer;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The HTTP face's flags of `sluice serve`.
#[derive(Debug, Clone, Args)]
pub struct HttpArgs {
    /// Also serve HTTPS on ADDR:PORT: a WebDAV subset and HTTP third-party copies
    /// (COPY), for FTS3/gfal2/davix, with the daemon's accounts and TLS identity.
    #[arg(long, value_name = "ADDR:PORT")]
    pub http: Option<SocketAddr>,
    /// Admit clear-text HTTP on a non-loopback --http address (tokens and data cross
    /// the network unencrypted). Loopback admits it without this flag.
    #[arg(long)]
    pub http_insecure: bool,
    /// Third-party copies (HTTP COPY) run at once; more are answered 429.
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub http_max_copies: usize,
    /// Another daemon of this site (its HTTP base URL, e.g. https://dtn2:8443), sharing
    /// this one's storage and accounts: while copies run here, a new COPY is redirected
    /// (307) to the least-loaded such daemon with fewer. Repeatable.
    #[arg(long, value_name = "URL")]
    pub http_peer: Vec<String>,
    /// File holding the key (32 bytes or more, mode 600) that signs the scoped tokens
    /// (macaroons) this daemon issues; give the daemons of a site the same file so a
    /// token stays good after a redirect. Default: a random key per start.
    #[arg(long, value_name = "FILE")]
    pub http_token_key: Option<PathBuf>,
    /// PEM certificates trusted, besides the system's CAs, for HTTPS peers of copies
    /// (a site CA, or another daemon's certificate).
    #[arg(long, value_name = "FILE")]
    pub http_ca: Option<PathBuf>,
}

/// What a start takes from checked `--http*` flags.
struct Checked {
    listen: std::net::SocketAddr,
    client_tls: sluice_http::copy::peer::ClientTls,
    site: sluice_http::site::Site,
}

impl HttpArgs {
    /// Checks the `--http*` flags without starting anything (`serve --check` too): the
    /// HTTP-only flags need `--http`, `--http-max-copies` is at least 1, and the CA,
    /// the token key and the peers' URLs load.
    ///
    /// # Errors
    /// One line naming the flag and what is wrong with it.
    pub fn check(&self) -> Result<()> {
        self.checked().map(drop)
    }

    /// [`Self::check`], giving what a start needs from the flags: the address, the
    /// client TLS of copies and the site's peers (`None` without `--http`).
    fn checked(&self) -> Result<Option<Checked>> {
        let Some(listen) = self.http else {
            let http_only = self.http_insecure
                || self.http_ca.is_some()
                || self.http_token_key.is_some()
                || !self.http_peer.is_empty();
            if http_only {
                return Err(bad_input(
                    "--http-insecure, --http-ca, --http-peer and --http-token-key need --http ADDR:PORT",
                ));
            }
            return Ok(None);
        };
        if self.http_max_copies == 0 {
            return Err(bad_input("--http-max-copies must be at least 1"));
        }
        let client_tls =
            sluice_http::copy::peer::client_tls(self.http_ca.as_deref()).map_err(bad_input)?;
        if let Some(p) = &self.http_token_key {
            sluice_http::macaroon::Key::from_file(p).map_err(bad_input)?;
        }
        let site = sluice_http::site::Site::new(&self.http_peer).map_err(bad_input)?;
        Ok(Some(Checked {
            listen,
            client_tls,
            site,
        }))
    }

    /// Starts the HTTP face if `--http` was given; it runs until the process ends.
    ///
    /// # Errors
    /// A bad flag, or the address cannot be bound.
    pub fn start(
        &self,
        tls: &ServerTls,
        max_connections: usize,
        accounts: impl FnOnce() -> Result<Accounts>,
        native: impl FnOnce() -> Result<Native>,
    ) -> Result<Option<HttpServer>> {
        let Some(Checked {
            listen,
            client_tls,
            site,
        }) = self.checked()?
        else {
            return Ok(None);
        };
        let admit_clear = listen.ip().is_loopback() || self.http_insecure;
        let accounts = accounts()?;
        let mut native = native()?;
        native.ca = self.http_ca.clone();
        let cfg = sluice_http::HttpConfig {
            listen,
            tls: tls.config(),
            admit_clear,
            reload_on_hup: accounts.source().is_some(),
            accounts: Arc::new(Live::new(accounts)),
            max_connections: max_connections.max(1),
            max_copies: self.http_max_copies,
            marker_interval: Duration::from_secs(5),
            token_key: self.http_token_key.clone(),
            client_tls,
            native: Some(native),
            site,
        };
        let server = sluice_http::start(cfg)
            .map_err(|e| anyhow::anyhow!("--http {listen}: cannot listen: {e}"))?;
        crate::output::stderr_line(&format!(
            "sluice: http: serving WebDAV and HTTP-TPC on {} (TLS{})",
            server.local_addr(),
            if admit_clear {
                " or clear text"
            } else {
                " only"
            }
        ));
        Ok(Some(server))
    }
}

/// The daemon's sluice side as the HTTP face uses it: native bytes between sluice
/// daemons, through the daemon's `runtime` and its listener's `port`.
pub fn native(
    runtime: &Arc<Runtime>,
    port: u16,
    tls: &ServerTls,
    opts: SessionOptions,
) -> Result<Native> {
    Ok(Native {
        runtime: Arc::clone(runtime),
        port,
        fingerprint: tls.fingerprint(),
        opts,
        ca: None,
    })
}
