//! `COPY`: the WLCG HTTP third-party copy. With `Source: URL` this daemon pulls the
//! URL into the request's path ([`pull`]); with `Destination:`, push (not yet: 501).
//! Both headers at once is 400. The answer is `202 Accepted` with a
//! `text/perf-marker-stream` ([`marker`]); at the concurrency limit, 429.

pub mod marker;
pub mod peer;
pub mod pull;

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
        (None, Some(_)) => {
            return Err(Fail::new(
                StatusCode::NOT_IMPLEMENTED,
                "COPY with Destination (push) is not served yet",
            ))
        }
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
    let permit = std::sync::Arc::clone(&state.copies)
        .try_acquire_owned()
        .map_err(|_| {
            Fail::new(
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "{} copies are running, the most this daemon runs at once: try again later",
                    state.cfg.max_copies
                ),
            )
        })?;
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
    response(StatusCode::ACCEPTED)
        .header(header::CONTENT_TYPE, marker::CONTENT_TYPE)
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Out::Channel(rx))
        .map_err(internal)
}
