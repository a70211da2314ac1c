//! `PROPFIND` with `Depth: 0` or `1` (no header: 1; `infinity` is refused with 403 as
//! RFC 4918 allows): a 207 multistatus of every entry's type, size, modification time
//! and name. The request body is read (bounded) and every property is answered, as for
//! `allprop`.

use super::{blocking, internal, response, Reply};
use crate::auth::{Activity, Grant};
use crate::body::Out;
use crate::error::Fail;
use crate::target::{href, Target};
use cap_std::fs::{Dir, Metadata};
use hyper::header;
use hyper::StatusCode;
use sluice_wire::RelPath;
use std::fmt::Write as _;
use std::sync::Arc;

/// Most entries one listing answers.
pub const MAX_ENTRIES: usize = 100_000;

/// How deep a `PROPFIND` goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Depth {
    /// The entry itself.
    Zero,
    /// The entry and, for a directory, its children.
    One,
}

/// The depth the `Depth` header asks for.
///
/// # Errors
/// 403 for `infinity`, 400 for anything else unknown.
pub fn depth(value: Option<&str>) -> Result<Depth, Fail> {
    match value.map(str::trim) {
        None | Some("1") => Ok(Depth::One),
        Some("0") => Ok(Depth::Zero),
        Some(v) if v.eq_ignore_ascii_case("infinity") => {
            Err(Fail::forbidden("Depth: infinity is not served; use 0 or 1"))
        }
        Some(v) => Err(Fail::bad(format!("Depth: {v:?} is not 0, 1 or infinity"))),
    }
}

/// `PROPFIND`.
pub async fn propfind(grant: &Grant, target: Target, depth_hdr: Option<&str>) -> Reply {
    grant.allow(Activity::List, &target)?;
    let depth = depth(depth_hdr)?;
    let root = Arc::clone(&grant.account.root);
    let xml = blocking(move || {
        let dir = root.open_dir(None)?;
        listing(&dir, target.rel.as_ref(), depth)
    })
    .await?;
    response(StatusCode::MULTI_STATUS)
        .header(header::CONTENT_TYPE, "application/xml; charset=utf-8")
        .body(Out::text(xml))
        .map_err(internal)
}

fn listing(root: &Dir, rel: Option<&RelPath>, depth: Depth) -> Result<String, Fail> {
    let shown = rel.map_or("", RelPath::as_str);
    let meta = match rel {
        Some(r) => root
            .metadata(r.as_str())
            .map_err(|e| Fail::io("stat", shown, &e))?,
        None => root
            .dir_metadata()
            .map_err(|e| Fail::io("stat", shown, &e))?,
    };
    let mut xml = String::from(
        "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<D:multistatus xmlns:D=\"DAV:\">\n",
    );
    entry(&mut xml, rel, &meta);
    if depth == Depth::One && meta.is_dir() {
        let dir = match rel {
            Some(r) => root
                .open_dir(r.as_str())
                .map_err(|e| Fail::io("opening", shown, &e))?,
            None => root
                .try_clone()
                .map_err(|e| Fail::io("opening", shown, &e))?,
        };
        children(&mut xml, &dir, rel)?;
    }
    xml.push_str("</D:multistatus>\n");
    Ok(xml)
}

fn children(xml: &mut String, dir: &Dir, rel: Option<&RelPath>) -> Result<(), Fail> {
    let shown = rel.map_or("", RelPath::as_str);
    let mut n = 0usize;
    for item in dir.entries().map_err(|e| Fail::io("listing", shown, &e))? {
        let item = item.map_err(|e| Fail::io("listing", shown, &e))?;
        let Some(name) = item.file_name().to_str().map(str::to_owned) else {
            continue; // not UTF-8: no URL names it
        };
        let child = match rel {
            Some(r) => r.join(&name),
            None => RelPath::parse(&name),
        };
        let (Ok(child), Ok(m)) = (child, item.metadata()) else {
            continue;
        };
        n += 1;
        if n > MAX_ENTRIES {
            return Err(Fail::new(
                StatusCode::INSUFFICIENT_STORAGE,
                format!("/{shown}: more than {MAX_ENTRIES} entries"),
            ));
        }
        entry(xml, Some(&child), &m);
    }
    Ok(())
}

fn entry(xml: &mut String, rel: Option<&RelPath>, m: &Metadata) {
    let dir = m.is_dir();
    let name = rel.map_or("", RelPath::file_name);
    let _ = write!(
        xml,
        "<D:response><D:href>{}</D:href><D:propstat><D:prop>",
        escape(&href(rel, dir))
    );
    if dir {
        xml.push_str(
            "<D:resourcetype><D:collection/></D:resourcetype><D:iscollection>1</D:iscollection>",
        );
    } else {
        let _ = write!(xml, "<D:resourcetype/><D:iscollection>0</D:iscollection><D:getcontentlength>{}</D:getcontentlength>", m.len());
    }
    if let Ok(t) = m.modified() {
        let t = t.into_std();
        let _ = write!(
            xml,
            "<D:getlastmodified>{}</D:getlastmodified>",
            httpdate::fmt_http_date(t)
        );
    }
    let _ = write!(xml, "<D:displayname>{}</D:displayname>", escape(name));
    xml.push_str("</D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>\n");
}

/// `s` with XML's special characters escaped.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if (c as u32) < 0x20 && c != '\t' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depths() {
        assert_eq!(depth(None), Ok(Depth::One));
        assert_eq!(depth(Some("0")), Ok(Depth::Zero));
        assert_eq!(
            depth(Some("infinity")).err().map(|f| f.status),
            Some(StatusCode::FORBIDDEN)
        );
        assert_eq!(
            depth(Some("2")).err().map(|f| f.status),
            Some(StatusCode::BAD_REQUEST)
        );
    }

    #[test]
    fn escapes() {
        assert_eq!(escape("a<b>&\"'"), "a&lt;b&gt;&amp;&quot;&apos;");
    }
}
