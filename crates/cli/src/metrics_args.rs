//! `--metrics ADDR` and `--metrics-token-file FILE` of `sluice serve` and `sluice cp`:
//! the Prometheus endpoint (`GET /metrics`), started before the work.

use crate::exit::bad_input;
use anyhow::Result;
use clap::Args;
use sluice_engine::monitor::http::{self, BearerToken};
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;

/// The metrics endpoint's flags.
#[derive(Debug, Clone, Args)]
pub struct MetricsArgs {
    /// Serve Prometheus metrics on http://ADDR/metrics (a non-loopback address needs
    /// --metrics-token-file: metrics name channels, nodes and connections).
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics: Option<SocketAddr>,
    /// File holding the bearer token a scrape must present (`Authorization: Bearer ...`).
    #[arg(long, value_name = "FILE", requires = "metrics")]
    pub metrics_token_file: Option<PathBuf>,
}

impl MetricsArgs {
    /// Checks the flags without listening (`serve --check`): the address and token
    /// the endpoint would use.
    ///
    /// # Errors
    /// Bad input (exit 2): a non-loopback address without a token, an unreadable or
    /// empty token file.
    pub fn checked(&self) -> Result<Option<(SocketAddr, Option<BearerToken>)>> {
        let Some(addr) = self.metrics else {
            return Ok(None);
        };
        let token = self
            .metrics_token_file
            .as_ref()
            .map(read_token)
            .transpose()?;
        if !addr.ip().is_loopback() && token.is_none() {
            return Err(bad_input(format!(
                "--metrics {addr} is not a loopback address: give --metrics-token-file FILE (metrics name channels, nodes and connections)"
            )));
        }
        Ok(Some((addr, token)))
    }

    /// Starts the endpoint when asked (its address, said on stderr).
    ///
    /// # Errors
    /// Bad input (exit 2): what [`MetricsArgs::checked`] refuses, an address in use or
    /// not this host's.
    pub fn start(&self) -> Result<Option<SocketAddr>> {
        let Some((addr, token)) = self.checked()? else {
            return Ok(None);
        };
        let listener = TcpListener::bind(addr)
            .map_err(|e| bad_input(format!("--metrics {addr}: cannot listen there: {e}")))?;
        let bound = http::spawn(listener, token)
            .map_err(|e| anyhow::anyhow!("starting the metrics endpoint on {addr}: {e}"))?;
        crate::output::stderr_line(&format!("sluice: metrics on http://{bound}/metrics"));
        if !addr.ip().is_loopback() {
            tracing::warn!(
                "the metrics endpoint on {bound} is plain HTTP: its bearer token and metrics cross the network unencrypted (use a management network, or a TLS proxy)"
            );
        }
        Ok(Some(bound))
    }
}

/// The bearer token of `path` (one trailing newline ignored; never empty).
fn read_token(path: &PathBuf) -> Result<BearerToken> {
    let bytes = std::fs::read(path).map_err(|e| {
        bad_input(format!(
            "--metrics-token-file {}: cannot read it: {e}",
            path.display()
        ))
    })?;
    let secret = bytes.strip_suffix(b"\n").unwrap_or(&bytes);
    if secret.is_empty()
        || secret
            .iter()
            .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
    {
        return Err(bad_input(format!(
            "--metrics-token-file {}: the token must be one non-empty word",
            path.display()
        )));
    }
    Ok(BearerToken::new(secret))
}
