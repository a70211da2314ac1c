//! From the paths a scan emitted back to the paths under the root.

use sluice_wire::RelPath;

/// Maps a path the scanner emitted back to the path under the root it was read from,
/// so that the source can open the file a manifest entry names.
///
/// `prefix` = `None` means `start` is a directory whose *contents* were sent (what
/// [`map_copy`](crate::fs::map_copy) produces; a single file is always sent with a prefix).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceMap {
    start: Option<RelPath>,
    prefix: Option<RelPath>,
}

impl SourceMap {
    /// The map of a [`Scanner`](super::Scanner) built with the same `start` and `prefix`.
    pub fn new(start: Option<RelPath>, prefix: Option<RelPath>) -> SourceMap {
        SourceMap { start, prefix }
    }

    /// The path under the root that `emitted` was read from; `None` if `emitted` is not
    /// under the prefix, or names the root itself (never a file).
    pub fn to_source(&self, emitted: &RelPath) -> Option<RelPath> {
        let rest = match &self.prefix {
            None => Some(emitted.as_str()),
            Some(p) if emitted == p => None,
            Some(p) => Some(
                emitted
                    .as_str()
                    .strip_prefix(p.as_str())?
                    .strip_prefix('/')?,
            ),
        };
        match (&self.start, rest) {
            (start, None) => start.clone(),
            (None, Some(rest)) => RelPath::parse(rest).ok(),
            (Some(s), Some(rest)) => s.join(rest).ok(),
        }
    }
}
