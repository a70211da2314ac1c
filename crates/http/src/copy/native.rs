//! Sluice-native bytes: when the source of a pull is also sluice, the data moves over
//! sluice's own NUMA-aware parallel protocol (`sluice_engine::client::copy`, a pull
//! into the account's root) instead of one HTTP stream.
//!
//! The source is sluice when the client names a `sluice://HOST:PORT/PATH` source, or
//! when an HTTPS source answers an authenticated `HEAD` with [`ENDPOINT_HEADER`] and
//! [`FINGERPRINT_HEADER`] (every sluice daemon's HTTP face does, over TLS only): the
//! native session then pins that certificate, learnt over the HTTPS connection this
//! daemon verified, and proves the bearer token the client forwarded
//! (`TransferHeaderAuthorization`), which is the same account's token on both faces.

use super::marker;
use super::peer::{self, Peer};
use crate::error::Fail;
use bytes::Bytes;
use hyper::header::{HeaderName, HeaderValue};
use sluice_engine::client::{CopyConfig, Endpoint};
use sluice_engine::fs::Root;
use sluice_engine::net::tls::{ClientTls, Encrypt, Fingerprint, Trust};
use sluice_engine::runtime::Runtime;
use sluice_engine::stats::Stats;
use sluice_engine::SessionOptions;
use sluice_wire::{RelPath, Token};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::mpsc;

/// The response header naming a daemon's sluice endpoint (`sluice://IP:PORT`).
pub const ENDPOINT_HEADER: &str = "x-sluice-endpoint";
/// The response header with the fingerprint of the certificate both faces present.
pub const FINGERPRINT_HEADER: &str = "x-sluice-fingerprint";

/// What this daemon needs to move bytes over sluice's protocol, and to say it can.
#[derive(Debug, Clone)]
pub struct Native {
    /// The daemon's plan and buffer pools.
    pub runtime: Arc<Runtime>,
    /// The port of its sluice listener.
    pub port: u16,
    /// Its certificate's fingerprint (the same identity on both faces).
    pub fingerprint: Fingerprint,
    /// Session options for native pulls (the daemon's job flags).
    pub opts: SessionOptions,
    /// CA certificates for `sluice://` sources named by clients (`--http-ca`).
    pub ca: Option<PathBuf>,
}

/// The headers a sluice daemon adds to an authenticated answer over TLS, reached at
/// `local` (the address the client dialled).
pub fn advertise(native: &Native, local: std::net::SocketAddr) -> [(HeaderName, HeaderValue); 2] {
    let ep = std::net::SocketAddr::new(local.ip(), native.port);
    let v = |s: String| HeaderValue::from_str(&s).unwrap_or_else(|_| HeaderValue::from_static(""));
    [
        (
            HeaderName::from_static(ENDPOINT_HEADER),
            v(format!("sluice://{ep}")),
        ),
        (
            HeaderName::from_static(FINGERPRINT_HEADER),
            v(native.fingerprint.to_string()),
        ),
    ]
}

/// A sluice source: its address, the path under its account's root, whom to trust.
#[derive(Debug, Clone)]
pub struct Source {
    /// `host:port`.
    pub addr: String,
    /// The path as the source's daemon names it.
    pub path: String,
    /// How its certificate is checked.
    pub trust: Trust,
}

/// The sluice source a `sluice://` URL names.
///
/// # Errors
/// 400 for a URL without a host or path.
pub fn named(url: &str, native: &Native) -> Result<Source, Fail> {
    let Ok(Endpoint::Remote { addr, path }) = Endpoint::parse(url.trim()) else {
        return Err(Fail::bad(format!(
            "{url:?}: expected sluice://HOST[:PORT]/PATH"
        )));
    };
    if path.is_empty() {
        return Err(Fail::bad(format!("{url:?}: no path")));
    }
    let trust = match &native.ca {
        Some(ca) => Trust::Ca(ca.clone()),
        None => Trust::KnownHosts {
            file: None,
            strict: true,
        },
    };
    Ok(Source { addr, path, trust })
}

/// Asks an HTTPS peer whether it is sluice (an authenticated `HEAD` of a source, or an
/// `OPTIONS` of a destination, with the client's forwarded headers); `None` for
/// anything else (then HTTP carries the copy).
pub async fn probe(
    peer: &Peer,
    method: hyper::Method,
    headers: &[(HeaderName, HeaderValue)],
    tls: &Arc<rustls::ClientConfig>,
) -> Option<Source> {
    if !peer.tls {
        return None;
    }
    let mut conn = peer::connect(peer, tls).await.ok()?;
    let mut req = hyper::Request::builder()
        .method(method)
        .uri(peer.path.as_str())
        .header(hyper::header::HOST, peer.authority.as_str());
    for (n, v) in headers {
        req = req.header(n, v);
    }
    let resp = conn
        .sender
        .send_request(req.body(crate::body::Out::empty()).ok()?)
        .await
        .ok()?;
    if !resp.status().is_success() {
        return None;
    }
    let h = |n: &str| {
        resp.headers()
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let fingerprint: Fingerprint = h(FINGERPRINT_HEADER)?.parse().ok()?;
    let Ok(Endpoint::Remote { addr, .. }) = Endpoint::parse(&format!("{}/", h(ENDPOINT_HEADER)?))
    else {
        return None;
    };
    let path = percent_encoding::percent_decode_str(peer.path.split('?').next().unwrap_or(""))
        .decode_utf8()
        .ok()?
        .trim_start_matches('/')
        .to_owned();
    Some(Source {
        addr,
        path,
        trust: Trust::Pinned(fingerprint),
    })
}

/// The bearer token among forwarded headers (`Authorization: Bearer X`).
pub fn bearer(headers: &[(HeaderName, HeaderValue)]) -> Option<Token> {
    let (_, v) = headers
        .iter()
        .find(|(n, _)| n == hyper::header::AUTHORIZATION)?;
    let s = v.to_str().ok()?;
    let t = s.get(..7).filter(|p| p.eq_ignore_ascii_case("bearer "))?;
    Token::new(s[t.len()..].trim().as_bytes().to_vec()).ok()
}

/// Where the engine writes `rel`: its directory, resolved and checked to be inside
/// `root` (the engine opens it by path), and its name.
///
/// # Errors
/// 409 when the directory does not exist, 403 when it resolves outside the root.
pub fn local_destination(root: &Root, rel: &RelPath) -> Result<PathBuf, Fail> {
    let (_, name) = crate::dav::parent(root, rel, hyper::StatusCode::CONFLICT)?;
    let base = std::fs::canonicalize(root.path()).map_err(|e| Fail::io("resolving", "", &e))?;
    let parent = rel.parent().map_or_else(
        || root.path().to_path_buf(),
        |p| root.path().join(p.as_str()),
    );
    let dir =
        std::fs::canonicalize(&parent).map_err(|e| Fail::io("resolving", rel.as_str(), &e))?;
    if !dir.starts_with(&base) {
        return Err(Fail::forbidden(format!(
            "/{}: outside the account's root",
            rel.as_str()
        )));
    }
    Ok(dir.join(name))
}

/// The local file `rel` a push sends: a regular file, resolved and checked to be
/// inside `root` (the engine opens it by path).
///
/// # Errors
/// 404 when it does not exist, 403 when it resolves outside the root.
pub fn local_source(root: &Root, rel: &RelPath) -> Result<PathBuf, Fail> {
    drop(root.open_read(rel)?);
    let base = std::fs::canonicalize(root.path()).map_err(|e| Fail::io("resolving", "", &e))?;
    let file = std::fs::canonicalize(root.path().join(rel.as_str()))
        .map_err(|e| Fail::io("resolving", rel.as_str(), &e))?;
    if !file.starts_with(&base) {
        return Err(Fail::forbidden(format!(
            "/{}: outside the account's root",
            rel.as_str()
        )));
    }
    Ok(file)
}

/// One native copy, ready to run.
#[derive(Debug)]
pub struct Pull {
    /// The other sluice daemon (the source of a pull, the destination of a push).
    pub source: Source,
    /// Its token.
    pub token: Option<Token>,
    /// The local file (from [`local_destination`] for a pull, [`local_source`] for a
    /// push).
    pub dest: PathBuf,
    /// Whether this daemon sends (a push).
    pub push: bool,
    /// The engine.
    pub native: Native,
    /// Perf marker period.
    pub interval: Duration,
}

/// Runs `job` on a thread of the blocking pool, a perf marker every interval, the
/// final line at the end. A client that goes away stops the markers; the session runs
/// to its end (the engine's client has no cancellation), and its partial file is the
/// engine's (`.NAME.sluice-part`), never the final name.
pub async fn run(job: Pull, tx: mpsc::Sender<Bytes>) {
    let _ = tx
        .send(Bytes::from(marker::block(SystemTime::now(), 0, None)))
        .await;
    let stats = Arc::new(Stats::new());
    let remote = format!("tcp:{}", job.source.addr);
    let shown = job.dest.display().to_string();
    let every = job.interval;
    let st = Arc::clone(&stats);
    let mut handle = tokio::task::spawn_blocking(move || copy(&job, &st));
    let mut tick = tokio::time::interval(every);
    tick.tick().await;
    let outcome = loop {
        tokio::select! {
            r = &mut handle => break r.map_err(|e| e.to_string()).and_then(|r| r),
            _ = tick.tick() => {
                let m = marker::block(SystemTime::now(), stats.payload_bytes(), Some(&remote));
                let _ = tx.send(Bytes::from(m)).await;
            }
        }
    };
    let line = match outcome {
        Ok(()) => {
            tracing::info!(
                "http: COPY into {shown} over sluice: {} bytes",
                stats.payload_bytes()
            );
            marker::SUCCESS.to_owned()
        }
        Err(why) => {
            tracing::info!("http: COPY into {shown} over sluice failed: {why}");
            marker::failure(&why)
        }
    };
    let _ = tx.send(Bytes::from(line)).await;
}

fn copy(job: &Pull, stats: &Arc<Stats>) -> Result<(), String> {
    let remote = Endpoint::Remote {
        addr: job.source.addr.clone(),
        path: job.source.path.clone(),
    };
    let local = Endpoint::Local(job.dest.to_string_lossy().into_owned());
    let (source, dest) = if job.push {
        (local, remote)
    } else {
        (remote, local)
    };
    let cfg = CopyConfig {
        sources: vec![source],
        dest,
        opts: job.native.opts.clone(),
        token: job.token.clone(),
        tls: ClientTls {
            encrypt: Encrypt::Auto,
            trust: job.source.trust.clone(),
        },
        far: None,
    };
    sluice_engine::client::copy(&cfg, &job.native.runtime, stats)
        .map_err(|e| format!("over sluice with {}: {e}", job.source.addr))
}
