//! A request's path: percent-decoded, checked by `sluice-wire`'s path rules (no `..`,
//! no empty or `.` components, bounded length) and resolved under the account's root,
//! whose cap-std handle refuses any symlink that leads out.

use crate::error::Fail;
use sluice_wire::RelPath;

/// Where a request points under the account's root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The path under the root; `None`: the root itself.
    pub rel: Option<RelPath>,
    /// Whether the request's path ended in `/` (a collection was named).
    pub slash: bool,
}

impl Target {
    /// The path as a client sees it (`/` for the root).
    pub fn display(&self) -> String {
        match &self.rel {
            Some(r) => format!("/{}", r.as_str()),
            None => "/".into(),
        }
    }

    /// The path under the root, or a 403 for the root itself (`what` the operation).
    ///
    /// # Errors
    /// The request names the root.
    pub fn file(&self, what: &str) -> Result<&RelPath, Fail> {
        self.rel
            .as_ref()
            .ok_or_else(|| Fail::forbidden(format!("{what} /: the root itself cannot be used")))
    }
}

/// The target of the URI path `raw` (as in the request line, before `?`).
///
/// # Errors
/// 400 for a path that is not valid percent-encoded UTF-8; 403 for one that leaves the
/// root (`..`) or breaks the path rules.
pub fn parse(raw: &str) -> Result<Target, Fail> {
    let decoded = percent_encoding::percent_decode_str(raw)
        .decode_utf8()
        .map_err(|_| Fail::bad(format!("path {raw:?}: not UTF-8 once decoded")))?;
    if decoded.contains('\0') {
        return Err(Fail::bad(format!("path {raw:?}: holds a NUL byte")));
    }
    let slash = decoded.len() > 1 && decoded.ends_with('/');
    let trimmed = decoded.trim_matches('/');
    if trimmed.is_empty() {
        return Ok(Target { rel: None, slash });
    }
    // Repeated slashes are one separator, as every HTTP server treats them.
    let joined: Vec<&str> = trimmed.split('/').filter(|c| !c.is_empty()).collect();
    let joined = joined.join("/");
    let rel = RelPath::parse(&joined).map_err(|e| {
        Fail::forbidden(format!(
            "path {decoded:?}: outside the account's root ({e})"
        ))
    })?;
    Ok(Target {
        rel: Some(rel),
        slash,
    })
}

/// `rel` percent-encoded for an `href` (every byte but unreserved ones and `/`).
pub fn href(rel: Option<&RelPath>, collection: bool) -> String {
    const SET: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'/')
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'~');
    let mut out = String::from("/");
    if let Some(r) = rel {
        out.push_str(&percent_encoding::utf8_percent_encode(r.as_str(), SET).to_string());
        if collection {
            out.push('/');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_and_confines() {
        let t = parse("/a%20b//c/").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(t.rel.as_ref().map(RelPath::as_str), Some("a b/c"));
        assert!(t.slash);
        assert_eq!(parse("/").map(|t| t.rel), Ok(None));
        for bad in ["/../etc/passwd", "/a/%2e%2e/%2e%2e/x", "/a/./b"] {
            let e = parse(bad).err().map(|f| f.status);
            assert_eq!(e, Some(hyper::StatusCode::FORBIDDEN), "{bad}");
        }
        assert_eq!(
            parse("/%ff").err().map(|f| f.status),
            Some(hyper::StatusCode::BAD_REQUEST)
        );
    }

    #[test]
    fn href_encodes() {
        let r = RelPath::parse("d ir/f#1").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(href(Some(&r), false), "/d%20ir/f%231");
        assert_eq!(href(None, true), "/");
    }
}
