//! The WebDAV subset: `HEAD`, `GET` (one `Range`), `PUT`, `DELETE`, `MKCOL`,
//! `PROPFIND` (depth 0 and 1, in [`propfind`]) and `OPTIONS`, each on the account's
//! root, each checked against the account's rights and the token's scope first.

pub mod get;
pub mod propfind;
pub mod range;

use crate::auth::{Activity, Grant};
use crate::body::Out;
use crate::digest::Algo;
use crate::error::Fail;
use crate::target::Target;
use crate::upload::Upload;
use http_body_util::BodyExt;
use hyper::header;
use hyper::{Request, Response, StatusCode};
use sluice_engine::fs::Root;

pub use get::get;
use std::sync::Arc;

/// A response being built.
pub type Reply = Result<Response<Out>, Fail>;

/// The methods `OPTIONS` lists.
pub const ALLOW: &str = "OPTIONS, GET, HEAD, PUT, DELETE, MKCOL, PROPFIND, COPY, POST";

/// Runs `f` on the blocking pool (file system calls).
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, Fail> + Send + 'static,
) -> Result<T, Fail> {
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        Fail::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("a file operation did not finish: {e}"),
        )
    })?
}

/// `OPTIONS`: what this server does (class 1 WebDAV, no locks).
pub fn options() -> Reply {
    response(StatusCode::OK)
        .header("DAV", "1")
        .header(header::ALLOW, ALLOW)
        .body(Out::empty())
        .map_err(internal)
}

pub(crate) fn internal(e: impl std::fmt::Display) -> Fail {
    Fail::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
}

pub(crate) fn response(status: StatusCode) -> hyper::http::response::Builder {
    Response::builder().status(status)
}

/// `PUT`: the body streamed into a temporary file, renamed into place when complete
/// (201 new, 204 replaced); a body shorter than its `Content-Length` leaves nothing.
pub async fn put(grant: &Grant, target: Target, req: Request<hyper::body::Incoming>) -> Reply {
    grant.allow(Activity::Upload, &target)?;
    let rel = target.file("PUT")?.clone();
    let expected = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .map(|v| {
            v.to_str()
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or_else(|| Fail::bad("Content-Length: not a number"))
        })
        .transpose()?;
    let claimed = req
        .headers()
        .get("digest")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let mut up = Upload::begin(Arc::clone(&grant.account.root), rel).await?;
    let mut body = req.into_body();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| {
            Fail::bad(format!(
                "PUT {}: the body ended early: {e}",
                target.display()
            ))
        })?;
        if let Some(data) = frame.data_ref() {
            up.write(data).await?;
        }
    }
    if let Some(n) = expected {
        if n != up.written() {
            return Err(Fail::bad(format!(
                "PUT {}: {} bytes received, Content-Length said {n}",
                target.display(),
                up.written()
            )));
        }
    }
    if let Some(claimed) = &claimed {
        crate::digest::check(claimed, &up.digests())
            .map_err(|m| Fail::bad(format!("PUT {}: {m}: nothing kept", target.display())))?;
    }
    let done = up.commit().await?;
    let status = if done.replaced {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::CREATED
    };
    response(status)
        .header("Digest", done.digests.header(&[Algo::Adler32, Algo::Md5]))
        .body(Out::empty())
        .map_err(internal)
}

/// `DELETE`: a file, or a directory with everything in it (204).
pub async fn delete(grant: &Grant, target: Target) -> Reply {
    grant.allow(Activity::Delete, &target)?;
    let rel = target.file("DELETE")?.clone();
    let root = Arc::clone(&grant.account.root);
    blocking(move || {
        let (dir, name) = parent(&root, &rel, StatusCode::NOT_FOUND)?;
        let meta = dir
            .symlink_metadata(&name)
            .map_err(|e| Fail::io("stat", rel.as_str(), &e))?;
        let gone = if meta.is_dir() {
            dir.remove_dir_all(&name)
        } else {
            dir.remove_file(&name)
        };
        gone.map_err(|e| Fail::io("removing", rel.as_str(), &e))
    })
    .await?;
    response(StatusCode::NO_CONTENT)
        .body(Out::empty())
        .map_err(internal)
}

/// `MKCOL`: one directory, whose parent exists (409 otherwise; 405 if it exists).
pub async fn mkcol(grant: &Grant, target: Target) -> Reply {
    grant.allow(Activity::Manage, &target)?;
    let rel = target.file("MKCOL")?.clone();
    let root = Arc::clone(&grant.account.root);
    blocking(move || {
        let (dir, name) = parent(&root, &rel, StatusCode::CONFLICT)?;
        dir.create_dir(&name).map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => Fail::new(
                StatusCode::METHOD_NOT_ALLOWED,
                format!("/{}: already exists", rel.as_str()),
            ),
            _ => Fail::io("creating", rel.as_str(), &e),
        })
    })
    .await?;
    response(StatusCode::CREATED)
        .body(Out::empty())
        .map_err(internal)
}

/// The directory holding `rel` and its last component; a missing directory is
/// `missing` (404 for DELETE, 409 for MKCOL and PUT).
pub(crate) fn parent(
    root: &Root,
    rel: &sluice_wire::RelPath,
    missing: StatusCode,
) -> Result<(cap_std::fs::Dir, String), Fail> {
    let dir = root.open_dir(rel.parent().as_ref()).map_err(|e| {
        let f = Fail::from(e);
        if f.status == StatusCode::NOT_FOUND || f.status == StatusCode::CONFLICT {
            Fail::new(
                missing,
                format!("/{}: its directory does not exist", rel.as_str()),
            )
        } else {
            f
        }
    })?;
    Ok((dir, rel.file_name().to_owned()))
}
