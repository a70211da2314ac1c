//! `GET` and `HEAD`: a file's bytes, all or one range, with `Digest` when asked for and
//! the whole file is sent; a directory answers `HEAD` with 200 and no body.

use super::range::{self, Wanted};
use super::{blocking, internal, response, Reply};
use crate::auth::{Activity, Grant};
use crate::body::{FileBody, Out};
use crate::digest::{self, Algo};
use crate::error::Fail;
use crate::target::Target;
use hyper::header;
use hyper::http::response::Builder;
use hyper::{Request, StatusCode};
use sluice_engine::fs::Root;
use std::sync::Arc;
use tokio::io::AsyncSeekExt;

/// What `GET`/`HEAD` found at a path (no file: a directory).
struct Found {
    file: Option<std::fs::File>,
    len: u64,
    modified: Option<std::time::SystemTime>,
    digest: Option<String>,
}

const DIRECTORY: Found = Found {
    file: None,
    len: 0,
    modified: None,
    digest: None,
};

fn open_for_get(root: &Root, target: &Target, want: &[Algo]) -> Result<Found, Fail> {
    let Some(rel) = &target.rel else {
        return Ok(DIRECTORY);
    };
    if root.entry_metadata(rel)?.kind == sluice_engine::fs::EntryKind::Dir {
        return Ok(DIRECTORY);
    }
    let file = root.open_read(rel)?;
    let m = file
        .metadata()
        .map_err(|e| Fail::io("stat", rel.as_str(), &e))?;
    let digest = if want.is_empty() {
        None
    } else {
        let second = root.open_read(rel)?;
        let d = digest::of_file(&second).map_err(|e| Fail::io("reading", rel.as_str(), &e))?;
        Some(d.header(want))
    };
    Ok(Found {
        file: Some(file),
        len: m.len(),
        modified: m.modified().ok(),
        digest,
    })
}

fn header_text<B>(req: &Request<B>, name: impl header::AsHeaderName) -> Option<String> {
    req.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// `GET` (`head`: `HEAD`).
pub async fn get(
    grant: &Grant,
    target: Target,
    req: &Request<hyper::body::Incoming>,
    head: bool,
) -> Reply {
    let activity = if head {
        Activity::List
    } else {
        Activity::Download
    };
    grant.allow(activity, &target)?;
    let range_hdr = header_text(req, header::RANGE).filter(|_| !head);
    // A digest describes the whole file: none for a range.
    let want = match (&range_hdr, header_text(req, "want-digest")) {
        (None, Some(w)) => digest::wanted(&w),
        _ => Vec::new(),
    };
    let root = Arc::clone(&grant.account.root);
    let t = target.clone();
    let found = blocking(move || open_for_get(&root, &t, &want)).await?;
    let Some(file) = found.file else {
        return directory(&target, head);
    };
    let mut b = response(StatusCode::OK)
        .header(header::ACCEPT_RANGES, "bytes")
        .header(header::CONTENT_TYPE, "application/octet-stream");
    if let Some(t) = found.modified {
        b = b.header(header::LAST_MODIFIED, httpdate::fmt_http_date(t));
    }
    if let Some(d) = &found.digest {
        b = b.header("Digest", d);
    }
    let wanted = range_hdr.map_or(Wanted::Whole, |r| range::parse(&r, found.len));
    let Some((b, start, len)) = ranged(b, wanted, found.len) else {
        return response(StatusCode::RANGE_NOT_SATISFIABLE)
            .header(header::CONTENT_RANGE, format!("bytes */{}", found.len))
            .body(Out::empty())
            .map_err(internal);
    };
    if head {
        return b.body(Out::empty()).map_err(internal);
    }
    let mut f = tokio::fs::File::from_std(file);
    if start > 0 {
        f.seek(std::io::SeekFrom::Start(start))
            .await
            .map_err(|e| Fail::io("seeking", &target.display()[1..], &e))?;
    }
    b.body(Out::File(FileBody::new(f, len))).map_err(internal)
}

/// A directory: 200 with no body to `HEAD`, 405 to `GET`.
fn directory(target: &Target, head: bool) -> Reply {
    if head {
        return response(StatusCode::OK)
            .header(header::CONTENT_TYPE, "httpd/unix-directory")
            .body(Out::empty())
            .map_err(internal);
    }
    Err(Fail::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{} is a directory: PROPFIND lists it", target.display()),
    ))
}

/// The builder, first byte and length for `wanted` of a file of `size` bytes; `None`
/// when nothing satisfies it (416).
fn ranged(b: Builder, wanted: Wanted, size: u64) -> Option<(Builder, u64, u64)> {
    let (b, start, len) = match wanted {
        Wanted::Whole => (b, 0, size),
        Wanted::Part { start, len } => {
            let end = start + len - 1;
            let b = b
                .status(StatusCode::PARTIAL_CONTENT)
                .header(header::CONTENT_RANGE, format!("bytes {start}-{end}/{size}"));
            (b, start, len)
        }
        Wanted::Unsatisfiable => return None,
    };
    Some((b.header(header::CONTENT_LENGTH, len), start, len))
}
