//! A pull: `GET` the source (with the client's `TransferHeader*`), its body streamed
//! into an [`Upload`] (temporary file, digests, rename when complete), a perf marker
//! every interval. It fails (the `failure:` line, nothing under the final name) when
//! the source refuses, sends fewer bytes than it announced, breaks off or stalls, and
//! it is cancelled when the client that asked for it goes away.

use super::marker;
use super::peer::{self, Peer};
use crate::upload::Upload;
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::header::{HeaderName, HeaderValue};
use hyper::StatusCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::mpsc;

/// How long the source may send nothing before the copy fails.
pub const STALL_TIMEOUT: Duration = Duration::from_secs(120);

/// One pull, ready to run.
#[derive(Debug)]
pub struct Pull {
    /// The source.
    pub peer: Peer,
    /// Headers sent to it.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Where its bytes go.
    pub upload: Upload,
    /// How the source's certificate is checked.
    pub tls: Arc<rustls::ClientConfig>,
    /// Perf marker period.
    pub interval: Duration,
    /// The destination as the client named it (for the log).
    pub shown: String,
}

/// Runs `job`, writing its markers and final line to `tx`.
pub async fn run(job: Pull, tx: mpsc::Sender<Bytes>) {
    let shown = job.shown.clone();
    let line = match transfer(job, &tx).await {
        Ok(n) => {
            tracing::info!("http: COPY into {shown}: {n} bytes");
            marker::SUCCESS.to_owned()
        }
        Err(why) => {
            tracing::info!("http: COPY into {shown} failed: {why}");
            marker::failure(&why)
        }
    };
    let _ = tx.send(Bytes::from(line)).await;
}

async fn transfer(mut job: Pull, tx: &mpsc::Sender<Bytes>) -> Result<u64, String> {
    let _ = tx
        .send(Bytes::from(marker::block(SystemTime::now(), 0, None)))
        .await;
    let mut conn = peer::connect(&job.peer, &job.tls).await?;
    let remote = marker::remote(conn.addr);
    let mut req = hyper::Request::get(job.peer.path.as_str())
        .header(hyper::header::HOST, job.peer.authority.as_str())
        .header(
            hyper::header::USER_AGENT,
            concat!("sluice/", env!("CARGO_PKG_VERSION")),
        );
    for (n, v) in &job.headers {
        req = req.header(n, v);
    }
    let req = req
        .body(crate::body::Out::empty())
        .map_err(|e| e.to_string())?;
    let resp = conn
        .sender
        .send_request(req)
        .await
        .map_err(|e| format!("GET from the source: {e}"))?;
    if resp.status() != StatusCode::OK {
        return Err(format!("the source answered {}", resp.status()));
    }
    let announced = resp
        .headers()
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.parse::<u64>().ok());
    let mut body = resp.into_body();
    let mut tick = tokio::time::interval(job.interval);
    tick.tick().await;
    loop {
        tokio::select! {
            () = tx.closed() => return Err("the client went away: copy cancelled".into()),
            _ = tick.tick() => {
                let m = marker::block(SystemTime::now(), job.upload.written(), Some(&remote));
                if tx.send(Bytes::from(m)).await.is_err() {
                    return Err("the client went away: copy cancelled".into());
                }
            }
            frame = tokio::time::timeout(STALL_TIMEOUT, body.frame()) => {
                let Ok(frame) = frame else {
                    return Err(format!("the source sent nothing for {} s", STALL_TIMEOUT.as_secs()));
                };
                match frame {
                    None => break,
                    Some(Err(e)) => return Err(format!("the source broke off after {} bytes: {e}", job.upload.written())),
                    Some(Ok(f)) => {
                        if let Some(d) = f.data_ref() {
                            job.upload.write(d).await.map_err(|e| e.message)?;
                        }
                    }
                }
            }
        }
    }
    let n = job.upload.written();
    if announced.is_some_and(|a| a != n) {
        return Err(format!(
            "the source sent {n} of the {} bytes it announced",
            announced.unwrap_or(0)
        ));
    }
    job.upload.commit().await.map_err(|e| e.message)?;
    Ok(n)
}
