//! Relative paths that cannot leave the directory they are joined to.
//!
//! A [`RelPath`] is checked lexically: no leading `/`, no empty, `.` or `..` component, no
//! NUL byte, bounded length. That is all a protocol crate can check. Whether joining it to
//! the root crosses a symlink that points outside needs the filesystem, so the engine does
//! that (`openat2(RESOLVE_BENEATH)` or a component-by-component `O_NOFOLLOW` walk).

use crate::limits::{MAX_COMPONENT_BYTES, MAX_PATH_BYTES};

/// A relative, `/`-separated path proven free of lexical escapes.
///
/// Invariants: non-empty; at most [`MAX_PATH_BYTES`] bytes; no leading `/`; every component
/// non-empty, at most [`MAX_COMPONENT_BYTES`] bytes, neither `.` nor `..`; no NUL.
///
/// ```
/// use sluice_wire::RelPath;
/// let p = RelPath::parse("photos/2024/a.jpg")?;
/// assert_eq!(p.components().count(), 3);
/// assert!(RelPath::parse("../etc/passwd").is_err());
/// assert!(RelPath::parse("/etc/passwd").is_err());
/// # Ok::<(), sluice_wire::PathError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RelPath(String);

/// A path was rejected; carries the path (an excerpt if it is huge) and the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unsafe path {path:?}: {reason}")]
pub struct PathError {
    /// The rejected path (its first [`MAX_PATH_BYTES`] bytes, lossily decoded).
    pub path: String,
    /// Why.
    pub reason: PathErrorKind,
}

/// Why a path was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PathErrorKind {
    /// The path is empty.
    #[error("empty path")]
    Empty,
    /// The path starts with `/`.
    #[error("absolute path (starts with '/')")]
    Absolute,
    /// Two consecutive `/` or a trailing `/`.
    #[error("empty component #{index}")]
    EmptyComponent {
        /// Index of the component, from 0.
        index: usize,
    },
    /// A `.` component.
    #[error("'.' component #{index}")]
    Dot {
        /// Index of the component, from 0.
        index: usize,
    },
    /// A `..` component.
    #[error("'..' component #{index}")]
    DotDot {
        /// Index of the component, from 0.
        index: usize,
    },
    /// A NUL byte.
    #[error("NUL byte at offset {offset}")]
    Nul {
        /// Byte offset of the NUL.
        offset: usize,
    },
    /// Longer than [`MAX_PATH_BYTES`].
    #[error("{len} bytes long, limit {max}")]
    TooLong {
        /// Length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A component longer than [`MAX_COMPONENT_BYTES`].
    #[error("component #{index} is {len} bytes long, limit {max}")]
    ComponentTooLong {
        /// Index of the component, from 0.
        index: usize,
        /// Its length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
}

impl PathError {
    fn new(path: &str, reason: PathErrorKind) -> PathError {
        let mut end = path.len().min(MAX_PATH_BYTES);
        while !path.is_char_boundary(end) {
            end -= 1;
        }
        PathError {
            path: path[..end].to_owned(),
            reason,
        }
    }
}

impl RelPath {
    /// Checks `s` and wraps it.
    ///
    /// # Errors
    /// [`PathError`] naming `s` and the first rule it breaks.
    pub fn parse(s: &str) -> Result<RelPath, PathError> {
        check(s)?;
        Ok(RelPath(s.to_owned()))
    }

    /// Parses the target path of an `Open`, as the user typed it: `""`, `"."` and `"/"`
    /// mean the daemon root itself (`None`); leading and trailing `/` are dropped, since
    /// the daemon root is the client's `/`; anything else must be a valid [`RelPath`].
    ///
    /// # Errors
    /// [`PathError`] if what remains is not a valid relative path.
    pub fn parse_target(s: &str) -> Result<Option<RelPath>, PathError> {
        let trimmed = s.trim_matches('/');
        if trimmed.is_empty() || trimmed == "." {
            if s.contains('\0') {
                return Err(PathError::new(s, PathErrorKind::Nul { offset: 0 }));
            }
            return Ok(None);
        }
        check(trimmed).map_err(|e| PathError::new(s, e.reason))?;
        Ok(Some(RelPath(trimmed.to_owned())))
    }

    /// The path as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Its components, in order.
    pub fn components(&self) -> impl Iterator<Item = &str> {
        self.0.split('/')
    }

    /// The last component.
    pub fn file_name(&self) -> &str {
        self.0.rsplit('/').next().unwrap_or(&self.0)
    }

    /// The path without its last component, or `None` for a single component.
    pub fn parent(&self) -> Option<RelPath> {
        self.0.rsplit_once('/').map(|(p, _)| RelPath(p.to_owned()))
    }

    /// `self/child`, checked.
    ///
    /// # Errors
    /// [`PathError`] if `child` or the joined path breaks a rule.
    pub fn join(&self, child: &str) -> Result<RelPath, PathError> {
        RelPath::parse(&format!("{}/{}", self.0, child))
    }

    /// Unwraps the string.
    pub fn into_string(self) -> String {
        self.0
    }
}

impl std::fmt::Display for RelPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for RelPath {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::str::FromStr for RelPath {
    type Err = PathError;
    fn from_str(s: &str) -> Result<RelPath, PathError> {
        RelPath::parse(s)
    }
}

fn check(s: &str) -> Result<(), PathError> {
    let fail = |reason| Err(PathError::new(s, reason));
    if s.is_empty() {
        return fail(PathErrorKind::Empty);
    }
    if s.len() > MAX_PATH_BYTES {
        return fail(PathErrorKind::TooLong {
            len: s.len(),
            max: MAX_PATH_BYTES,
        });
    }
    if let Some(offset) = s.bytes().position(|b| b == 0) {
        return fail(PathErrorKind::Nul { offset });
    }
    if s.starts_with('/') {
        return fail(PathErrorKind::Absolute);
    }
    for (index, c) in s.split('/').enumerate() {
        match c {
            "" => return fail(PathErrorKind::EmptyComponent { index }),
            "." => return fail(PathErrorKind::Dot { index }),
            ".." => return fail(PathErrorKind::DotDot { index }),
            _ if c.len() > MAX_COMPONENT_BYTES => {
                return fail(PathErrorKind::ComponentTooLong {
                    index,
                    len: c.len(),
                    max: MAX_COMPONENT_BYTES,
                })
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(s: &str) -> PathErrorKind {
        RelPath::parse(s).unwrap_err().reason
    }

    #[test]
    fn accepts_ordinary_paths() {
        for p in ["a", "a/b", "a.b/.c/..d/d..", "with space/ü", "x/.../y"] {
            assert_eq!(RelPath::parse(p).unwrap().as_str(), p);
        }
    }

    #[test]
    fn rejects_each_escape_with_its_reason() {
        assert_eq!(reason(""), PathErrorKind::Empty);
        assert_eq!(reason("/a"), PathErrorKind::Absolute);
        assert_eq!(reason("a//b"), PathErrorKind::EmptyComponent { index: 1 });
        assert_eq!(reason("a/"), PathErrorKind::EmptyComponent { index: 1 });
        assert_eq!(reason("./a"), PathErrorKind::Dot { index: 0 });
        assert_eq!(reason("a/../b"), PathErrorKind::DotDot { index: 1 });
        assert_eq!(reason("a\0b"), PathErrorKind::Nul { offset: 1 });
        let long = "a/".repeat(2048) + "b";
        assert!(matches!(
            reason(&long),
            PathErrorKind::TooLong {
                len: 4097,
                max: 4096
            }
        ));
        let comp = "x".repeat(256);
        assert!(matches!(
            reason(&format!("a/{comp}")),
            PathErrorKind::ComponentTooLong {
                index: 1,
                len: 256,
                max: 255
            }
        ));
        assert!(RelPath::parse(&"x".repeat(255)).is_ok());
    }

    #[test]
    fn error_names_path_and_reason() {
        let e = RelPath::parse("a/../../etc").unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("a/../../etc") && text.contains("'..'"),
            "{text}"
        );
    }

    #[test]
    fn target_maps_root_and_trims_slashes() {
        assert_eq!(RelPath::parse_target("").unwrap(), None);
        assert_eq!(RelPath::parse_target(".").unwrap(), None);
        assert_eq!(RelPath::parse_target("/").unwrap(), None);
        assert_eq!(
            RelPath::parse_target("/data/x/").unwrap().unwrap().as_str(),
            "data/x"
        );
        assert!(RelPath::parse_target("/../x").is_err());
        assert!(RelPath::parse_target("\0").is_err());
    }

    #[test]
    fn parent_file_name_join() {
        let p = RelPath::parse("a/b/c").unwrap();
        assert_eq!(p.file_name(), "c");
        assert_eq!(p.parent().unwrap().as_str(), "a/b");
        assert_eq!(RelPath::parse("a").unwrap().parent(), None);
        assert_eq!(p.join("d").unwrap().as_str(), "a/b/c/d");
        assert!(p.join("..").is_err());
    }
}
