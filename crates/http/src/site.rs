//! Several daemons behind one name: a daemon busy with copies hands a new `COPY` to a
//! less-loaded daemon of its site (`--http-peer URL`, the other daemons, sharing its
//! storage and accounts) with `307 Temporary Redirect`, as the HTTP-TPC draft allows
//! and XRootD and Globus redirectors do; davix (gfal2, FTS3) follows the `Location`.
//!
//! Load is the number of copies running, which each daemon answers at [`LOAD_PATH`]
//! (no credentials: a count). A daemon asks its peers only when it is itself busy, and
//! redirects to the least loaded one whose load is lower than its own.

use crate::copy::peer::{self, Peer};
use crate::error::Fail;
use http_body_util::BodyExt;
use std::sync::Arc;
use std::time::Duration;

/// Where a daemon answers its load (`{"copies": N}`).
pub const LOAD_PATH: &str = "/.well-known/sluice-load";
/// How long asking a peer its load may take.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// The other daemons of the site.
#[derive(Debug, Clone, Default)]
pub struct Site {
    peers: Vec<(String, Peer)>,
}

impl Site {
    /// The site of the peers' base URLs (`https://host:port`).
    ///
    /// # Errors
    /// A URL that does not parse or has another scheme.
    pub fn new(urls: &[String]) -> Result<Site, String> {
        let mut peers = Vec::with_capacity(urls.len());
        for u in urls {
            let base = u.trim_end_matches('/').to_owned();
            let p = peer::parse(&format!("{base}{LOAD_PATH}"))
                .map_err(|f| format!("--http-peer {u}: {}", f.message))?;
            peers.push((base, p));
        }
        Ok(Site { peers })
    }

    /// Whether there are peers.
    pub fn is_empty(&self) -> bool {
        self.peers.is_empty()
    }

    /// The base URL of the least-loaded peer whose load is below `mine`, if any.
    pub async fn less_loaded(
        &self,
        mine: usize,
        tls: &Arc<rustls::ClientConfig>,
    ) -> Option<String> {
        let mut best: Option<(usize, &str)> = None;
        for (base, p) in &self.peers {
            let Ok(Some(load)) = tokio::time::timeout(PROBE_TIMEOUT, load_of(p, tls)).await else {
                continue;
            };
            if load < mine && best.is_none_or(|(b, _)| load < b) {
                best = Some((load, base));
            }
        }
        best.map(|(_, b)| b.to_owned())
    }
}

async fn load_of(p: &Peer, tls: &Arc<rustls::ClientConfig>) -> Option<usize> {
    let mut conn = peer::connect(p, tls).await.ok()?;
    let req = hyper::Request::get(p.path.as_str())
        .header(hyper::header::HOST, p.authority.as_str())
        .body(crate::body::Out::empty())
        .ok()?;
    let resp = conn.sender.send_request(req).await.ok()?;
    if !resp.status().is_success() {
        return None;
    }
    let body = http_body_util::Limited::new(resp.into_body(), 4096)
        .collect()
        .await
        .ok()?
        .to_bytes();
    let v: serde_json::Value = serde_json::from_slice(&body).ok()?;
    v["copies"].as_u64().and_then(|n| usize::try_from(n).ok())
}

/// The body of [`LOAD_PATH`].
pub fn load_body(copies: usize) -> String {
    format!("{{\"copies\":{copies}}}\n")
}

/// The 307 answer sending a request for `path_and_query` to `base`.
///
/// # Errors
/// Never in practice (a header that does not build).
pub fn redirect(
    base: &str,
    path_and_query: &str,
) -> Result<hyper::Response<crate::body::Out>, Fail> {
    crate::dav::response(hyper::StatusCode::TEMPORARY_REDIRECT)
        .header(hyper::header::LOCATION, format!("{base}{path_and_query}"))
        .body(crate::body::Out::empty())
        .map_err(crate::dav::internal)
}
