//! Where a [`Machine`](crate::Machine) comes from: this machine, a synthetic hwloc
//! description, or an hwloc XML file.

use crate::error::TopologyError;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// A topology source, as given to `--topology`.
///
/// Parsing (`"...".parse()`):
/// - `this` (or an empty string): this machine, as the current process sees it;
/// - `synthetic:DESC`: hwloc's synthetic description, e.g.
///   `synthetic:"pack:2 numa:2 core:8 pu:1"` (the quotes are optional);
/// - anything else: the path of an hwloc XML file (`./this` for a file named `this`).
///
/// Parsing only checks the shape; hwloc validates the description or the file when
/// [`discover`](crate::discover) loads it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum TopologySource {
    /// This machine, with the process's allowed CPUs (taskset, cgroup cpuset).
    #[default]
    This,
    /// An hwloc synthetic description (without the `synthetic:` prefix).
    Synthetic(String),
    /// An hwloc XML file (`lstopo --of xml`).
    Xml(PathBuf),
}

/// The prefix of a synthetic source.
const SYNTHETIC_PREFIX: &str = "synthetic:";

impl FromStr for TopologySource {
    type Err = TopologyError;

    /// # Errors
    ///
    /// [`TopologyError::InvalidSynthetic`] for a `synthetic:` source with nothing after
    /// the prefix.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let trimmed = s.trim();
        if trimmed.is_empty() || trimmed == "this" {
            return Ok(TopologySource::This);
        }
        if let Some(rest) = trimmed.strip_prefix(SYNTHETIC_PREFIX) {
            let description = strip_quotes(rest.trim()).trim();
            if description.is_empty() {
                return Err(TopologyError::InvalidSynthetic {
                    description: String::new(),
                });
            }
            return Ok(TopologySource::Synthetic(description.to_string()));
        }
        Ok(TopologySource::Xml(PathBuf::from(s)))
    }
}

/// `"x"` or `'x'` gives `x`; anything else is returned as is.
fn strip_quotes(s: &str) -> &str {
    for quote in ['"', '\''] {
        if let Some(inner) = s.strip_prefix(quote).and_then(|r| r.strip_suffix(quote)) {
            return inner;
        }
    }
    s
}

impl fmt::Display for TopologySource {
    /// `this machine`, `synthetic:DESC` or the XML path: what [`Machine::source`]
    /// holds.
    ///
    /// [`Machine::source`]: crate::Machine::source
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TopologySource::This => f.write_str("this machine"),
            TopologySource::Synthetic(d) => write!(f, "{SYNTHETIC_PREFIX}{d}"),
            TopologySource::Xml(p) => write!(f, "{}", p.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> TopologySource {
        s.parse().unwrap()
    }

    #[test]
    fn parses_the_three_kinds() {
        assert_eq!(parse("this"), TopologySource::This);
        assert_eq!(parse(""), TopologySource::This);
        assert_eq!(TopologySource::default(), TopologySource::This);
        let want = TopologySource::Synthetic("pack:2 numa:2 core:8 pu:1".into());
        assert_eq!(parse("synthetic:pack:2 numa:2 core:8 pu:1"), want);
        assert_eq!(parse("synthetic:\"pack:2 numa:2 core:8 pu:1\""), want);
        assert_eq!(parse("synthetic:'pack:2 numa:2 core:8 pu:1'"), want);
        assert_eq!(parse("a/b.xml"), TopologySource::Xml("a/b.xml".into()));
        assert_eq!(parse("./this"), TopologySource::Xml("./this".into()));
    }

    #[test]
    fn empty_synthetic_is_an_error() {
        let err = "synthetic:\"\"".parse::<TopologySource>().unwrap_err();
        assert!(
            matches!(err, TopologyError::InvalidSynthetic { .. }),
            "{err}"
        );
        assert!("synthetic:".parse::<TopologySource>().is_err());
    }

    #[test]
    fn displays_as_machine_source() {
        assert_eq!(TopologySource::This.to_string(), "this machine");
        assert_eq!(
            parse("synthetic:\"pack:2 pu:2\"").to_string(),
            "synthetic:pack:2 pu:2"
        );
        assert_eq!(parse("/t/x.xml").to_string(), "/t/x.xml");
    }
}
