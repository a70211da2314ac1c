//! A push: the request's file sent with `PUT` to the destination URL (with the client's
//! `TransferHeader*`), a perf marker every interval; it succeeds when the destination
//! answers 2xx, and is cancelled (the connection to the destination dropped, so it
//! keeps nothing of a PUT it did not receive whole) when the client goes away.

use super::marker;
use super::peer::{self, Peer};
use crate::body::{FileBody, Out};
use bytes::Bytes;
use hyper::header::{HeaderName, HeaderValue};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::mpsc;

/// One push, ready to run.
#[derive(Debug)]
pub struct Push {
    /// The destination.
    pub peer: Peer,
    /// Headers sent to it.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// The file sent, and its length.
    pub file: std::fs::File,
    /// Its length.
    pub len: u64,
    /// How the destination's certificate is checked.
    pub tls: Arc<rustls::ClientConfig>,
    /// Perf marker period.
    pub interval: Duration,
    /// The source as the client named it (for the log).
    pub shown: String,
}

/// Runs `job`, writing its markers and final line to `tx`.
pub async fn run(job: Push, tx: mpsc::Sender<Bytes>) {
    let shown = job.shown.clone();
    let line = match transfer(job, &tx).await {
        Ok(n) => {
            tracing::info!("http: COPY of {shown} pushed {n} bytes");
            marker::SUCCESS.to_owned()
        }
        Err(why) => {
            tracing::info!("http: COPY of {shown} failed: {why}");
            marker::failure(&why)
        }
    };
    let _ = tx.send(Bytes::from(line)).await;
}

const GONE: &str = "the client went away: copy cancelled";

async fn transfer(job: Push, tx: &mpsc::Sender<Bytes>) -> Result<u64, String> {
    let _ = tx
        .send(Bytes::from(marker::block(SystemTime::now(), 0, None)))
        .await;
    let mut conn = peer::connect(&job.peer, &job.tls).await?;
    let remote = marker::remote(conn.addr);
    let sent = Arc::new(AtomicU64::new(0));
    let body = FileBody::counted(
        tokio::fs::File::from_std(job.file),
        job.len,
        Arc::clone(&sent),
    );
    let mut req = hyper::Request::put(job.peer.path.as_str())
        .header(hyper::header::HOST, job.peer.authority.as_str())
        .header(hyper::header::CONTENT_LENGTH, job.len)
        .header(
            hyper::header::USER_AGENT,
            concat!("sluice/", env!("CARGO_PKG_VERSION")),
        );
    for (n, v) in &job.headers {
        req = req.header(n, v);
    }
    let req = req.body(Out::File(body)).map_err(|e| e.to_string())?;
    let answer = conn.sender.send_request(req);
    tokio::pin!(answer);
    let mut tick = tokio::time::interval(job.interval);
    tick.tick().await;
    let resp = loop {
        tokio::select! {
            () = tx.closed() => return Err(GONE.into()),
            _ = tick.tick() => {
                let m = marker::block(SystemTime::now(), sent.load(Ordering::Relaxed), Some(&remote));
                if tx.send(Bytes::from(m)).await.is_err() {
                    return Err(GONE.into());
                }
            }
            r = &mut answer => break r.map_err(|e| format!("PUT to the destination: {e}"))?,
        }
    };
    if !resp.status().is_success() {
        return Err(format!("the destination answered {}", resp.status()));
    }
    Ok(sent.load(Ordering::Relaxed))
}
