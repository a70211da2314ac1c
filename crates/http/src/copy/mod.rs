//! `COPY`: the WLCG HTTP third-party copy. With `Source: URL` this daemon pulls the
//! URL into the request's path ([`pull`]); with `Destination: URL` it sends the
//! request's file there ([`push`]).
//! Both headers at once is 400. The answer is `202 Accepted` with a
//! `text/perf-marker-stream` ([`marker`]); at the concurrency limit, 429.

pub mod marker;
pub mod peer;
pub mod pull;
pub mod push;

use crate::auth::{Activity, Grant};
use crate::body::Out;
use crate::dav::{internal, response, Reply};
use crate::error::Fail;
use crate::serve::{header_str, State};
use crate::target::Target;
use hyper::body::Incoming;
use hyper::{header, Request, StatusCode};

/// `COPY`.
pub async fn copy(state: &State, grant: &Grant, target: Target, req: Request<Incoming>) -> Reply {
    let source = header_str(&req, "source");
    let destination = header_str(&req, "destination");
    let url = match (source, destination) {
        (Some(_), Some(_)) => {
            return Err(Fail::bad(
                "COPY: give Source (pull) or Destination (push), not both",
            ))
        }
        (None, None) => {
            return Err(Fail::bad(
                "COPY: no Source (pull) or Destination (push) header",
            ))
        }
        (None, Some(d)) => return push_copy(state, grant, target, &req, &d).await,
        (Some(s), None) => s,
    };
    grant.allow(Activity::Upload, &target)?;
    let rel = target.file("COPY")?.clone();
    let peer = peer::parse(&url)?;
    if header_str(&req, "overwrite").is_some_and(|v| v.trim().eq_ignore_ascii_case("f")) {
        let root = std::sync::Arc::clone(&grant.account.root);
        let r = rel.clone();
        if crate::dav::blocking(move || Ok(root.exists(&r)?)).await? {
            return Err(Fail::new(
                StatusCode::PRECONDITION_FAILED,
                format!("{}: exists, and Overwrite: F", target.display()),
            ));
        }
    }
    let permit = slot(state)?;
    let upload =
        crate::upload::Upload::begin(std::sync::Arc::clone(&grant.account.root), rel).await?;
    let job = pull::Pull {
        peer,
        headers: peer::forwarded(req.headers()),
        upload,
        tls: std::sync::Arc::clone(&state.cfg.client_tls),
        interval: state.cfg.marker_interval,
        shown: target.display(),
    };
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::spawn(async move {
        pull::run(job, tx).await;
        drop(permit);
    });
    accepted(rx)
}

/// A copy's slot, or 429 at the limit.
fn slot(state: &State) -> Result<tokio::sync::OwnedSemaphorePermit, Fail> {
    std::sync::Arc::clone(&state.copies)
        .try_acquire_owned()
        .map_err(|_| {
            Fail::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "{} copies are running, the most this daemon runs at once: try again later",
                    state.cfg.max_copies
                ),
            )
        })
}

/// `COPY` with `Destination:`: the request's file pushed to `url`.
async fn push_copy(
    state: &State,
    grant: &Grant,
    target: Target,
    req: &Request<Incoming>,
    url: &str,
) -> Reply {
    grant.allow(Activity::Download, &target)?;
    let rel = target.file("COPY")?.clone();
    let peer = peer::parse(url)?;
    let root = std::sync::Arc::clone(&grant.account.root);
    let (file, len) = crate::dav::blocking(move || {
        let f = root.open_read(&rel)?;
        let len = f
            .metadata()
            .map_err(|e| Fail::io("stat", rel.as_str(), &e))?
            .len();
        Ok((f, len))
    })
    .await?;
    let permit = slot(state)?;
    let job = push::Push {
        peer,
        headers: peer::forwarded(req.headers()),
        file,
        len,
        tls: std::sync::Arc::clone(&state.cfg.client_tls),
        interval: state.cfg.marker_interval,
        shown: target.display(),
    };
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::spawn(async move {
        push::run(job, tx).await;
        drop(permit);
    });
    accepted(rx)
}

/// The 202 whose body is the copy's marker stream.
fn accepted(rx: tokio::sync::mpsc::Receiver<bytes::Bytes>) -> Reply {
    response(StatusCode::ACCEPTED)
        .header(header::CONTENT_TYPE, marker::CONTENT_TYPE)
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Out::Channel(rx))
        .map_err(internal)
}
