//! `COPY`: the WLCG HTTP third-party copy. With `Source: URL` this daemon pulls the
//! URL into the request's path ([`pull`]); with `Destination: URL` it sends the
//! request's file there ([`push`]).
//! Both headers at once is 400. The answer is `202 Accepted` with a
//! `text/perf-marker-stream` ([`marker`]); at the concurrency limit, 429.

pub mod marker;
pub mod native;
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

/// The header of a copy's 202 saying how the bytes move: `sluice` (the native
/// protocol) or `http`.
pub const TRANSPORT_HEADER: &str = "x-sluice-transport";

/// `COPY`.
pub async fn copy(state: &State, grant: &Grant, target: Target, req: Request<Incoming>) -> Reply {
    let source = header_str(&req, "source");
    let destination = header_str(&req, "destination");
    if let Some(r) = elsewhere(state, &req).await {
        return r;
    }
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
    if url
        .trim_start()
        .to_ascii_lowercase()
        .starts_with("sluice://")
    {
        return native_pull(state, grant, &target, &req, &url).await;
    }
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
    let headers = peer::forwarded(req.headers());
    if let Some(native) = &state.cfg.native {
        if let Some(source) =
            native::probe(&peer, hyper::Method::HEAD, &headers, &state.cfg.client_tls).await
        {
            let job = native_job(grant, &rel, source, &headers, native, state).await?;
            return Ok(spawn_native(job, permit));
        }
    }
    let upload =
        crate::upload::Upload::begin(std::sync::Arc::clone(&grant.account.root), rel).await?;
    let job = pull::Pull {
        peer,
        headers,
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
    accepted(rx, "http")
}

/// `COPY` with a `sluice://` source: native bytes, or 501 where this daemon has no
/// native side.
async fn native_pull(
    state: &State,
    grant: &Grant,
    target: &Target,
    req: &Request<Incoming>,
    url: &str,
) -> Reply {
    let Some(native) = &state.cfg.native else {
        return Err(Fail::new(
            StatusCode::NOT_IMPLEMENTED,
            "sluice:// sources need the daemon's sluice side",
        ));
    };
    let rel = target.file("COPY")?.clone();
    let source = native::named(url, native)?;
    let permit = slot(state)?;
    let headers = peer::forwarded(req.headers());
    let job = native_job(grant, &rel, source, &headers, native, state).await?;
    Ok(spawn_native(job, permit))
}

async fn native_job(
    grant: &Grant,
    rel: &sluice_wire::RelPath,
    source: native::Source,
    headers: &[(hyper::header::HeaderName, hyper::header::HeaderValue)],
    native: &native::Native,
    state: &State,
) -> Result<native::Pull, Fail> {
    let root = std::sync::Arc::clone(&grant.account.root);
    let r = rel.clone();
    let dest = crate::dav::blocking(move || native::local_destination(&root, &r)).await?;
    Ok(native::Pull {
        source,
        token: native::bearer(headers),
        dest,
        push: false,
        native: native.clone(),
        interval: state.cfg.marker_interval,
    })
}

fn spawn_native(
    job: native::Pull,
    permit: tokio::sync::OwnedSemaphorePermit,
) -> hyper::Response<Out> {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::spawn(async move {
        native::run(job, tx).await;
        drop(permit);
    });
    accepted(rx, "sluice").unwrap_or_else(|f| crate::serve::fail_response(&f))
}

/// A 307 to a less-loaded daemon of the site, when this one is busy and one is.
async fn elsewhere(state: &State, req: &Request<Incoming>) -> Option<Reply> {
    let mine = state.running_copies();
    if mine == 0 || state.cfg.site.is_empty() {
        return None;
    }
    let base = state
        .cfg
        .site
        .less_loaded(mine, &state.cfg.client_tls)
        .await?;
    let pq = req.uri().path_and_query().map_or("/", |p| p.as_str());
    tracing::info!("http: COPY {pq}: {mine} copies here, handed to {base}");
    Some(crate::site::redirect(&base, pq))
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
    let r = rel.clone();
    let (file, len) = crate::dav::blocking(move || {
        let f = root.open_read(&r)?;
        let len = f
            .metadata()
            .map_err(|e| Fail::io("stat", r.as_str(), &e))?
            .len();
        Ok((f, len))
    })
    .await?;
    let permit = slot(state)?;
    let headers = peer::forwarded(req.headers());
    if let Some(native) = &state.cfg.native {
        let probed = native::probe(
            &peer,
            hyper::Method::OPTIONS,
            &headers,
            &state.cfg.client_tls,
        );
        if let Some(remote) = probed.await {
            let root = std::sync::Arc::clone(&grant.account.root);
            let local = crate::dav::blocking(move || native::local_source(&root, &rel)).await?;
            let job = native::Pull {
                source: remote,
                token: native::bearer(&headers),
                dest: local,
                push: true,
                native: native.clone(),
                interval: state.cfg.marker_interval,
            };
            return Ok(spawn_native(job, permit));
        }
    }
    let job = push::Push {
        peer,
        headers,
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
    accepted(rx, "http")
}

/// The 202 whose body is the copy's marker stream.
fn accepted(rx: tokio::sync::mpsc::Receiver<bytes::Bytes>, transport: &'static str) -> Reply {
    response(StatusCode::ACCEPTED)
        .header(header::CONTENT_TYPE, marker::CONTENT_TYPE)
        .header(TRANSPORT_HEADER, transport)
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Out::Channel(rx))
        .map_err(internal)
}
