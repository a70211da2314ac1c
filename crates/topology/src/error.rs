//! The one error type of topology discovery.
//!
//! Every message is one line that names the value at fault and, where the user can fix
//! it, what was expected. Underlying I/O errors are part of the message (not a
//! `source()`), so that printing the whole chain does not repeat them.

use std::io;
use std::path::PathBuf;
use thiserror::Error;

/// The largest topology XML sluice reads. Real exports of large machines (hundreds of
/// cores, PCI trees included) are a few MiB; anything much bigger is not a topology.
pub const XML_SIZE_LIMIT_BYTES: u64 = 64 << 20;

/// What went wrong while parsing a topology source, discovering a machine or locating
/// the storage of a path.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum TopologyError {
    /// hwloc rejected a synthetic topology description (`synthetic:...`).
    #[error(
        "invalid synthetic topology \"{description}\": hwloc could not parse it \
         (expected e.g. \"pack:2 numa:2 core:8 pu:1\")"
    )]
    InvalidSynthetic {
        /// The description as given, without the `synthetic:` prefix and quotes.
        description: String,
    },

    /// A topology XML file could not be read (missing, unreadable, a directory).
    #[error("cannot read topology XML \"{}\": {}", .path.display(), io_reason(.error))]
    XmlUnreadable {
        /// The path as given.
        path: PathBuf,
        /// The error reading it.
        error: io::Error,
    },

    /// A topology XML file was read but is not a topology hwloc can load.
    #[error(
        "invalid topology XML \"{}\": {reason} (expected an hwloc XML export, \
         e.g. from `lstopo --of xml`)",
        .path.display()
    )]
    InvalidXml {
        /// The path as given.
        path: PathBuf,
        /// What is wrong with it, as far as can be told.
        reason: String,
    },

    /// hwloc failed while configuring or building a topology (for this machine, an
    /// unusual system or a resource limit; for a file, a topology hwloc refuses).
    #[error("cannot build the topology of {source_name}: hwloc {operation} failed: {reason}")]
    Hwloc {
        /// The topology source (`this machine`, `synthetic:...` or the XML path).
        source_name: String,
        /// The hwloc operation that failed.
        operation: &'static str,
        /// hwloc's error.
        reason: String,
    },

    /// hwloc built a topology that sluice cannot describe (no PUs, a NUMA node or PU
    /// without an OS index, an infinite cpuset).
    #[error("the topology of {source_name} is not usable: {reason}")]
    Unusable {
        /// The topology source (`this machine`, `synthetic:...` or the XML path).
        source_name: String,
        /// What is missing or inconsistent.
        reason: String,
    },

    /// A path whose storage was asked for could not be examined (`stat` failed).
    #[error("cannot examine \"{}\": {}", .path.display(), io_reason(.error))]
    PathUnreadable {
        /// The path as given.
        path: PathBuf,
        /// The error from `stat`.
        error: io::Error,
    },

    /// A sysfs or procfs file that should exist could not be read.
    #[error("cannot read \"{}\": {}", .path.display(), io_reason(.error))]
    Sysfs {
        /// The file under `/sys` or `/proc`.
        path: PathBuf,
        /// The error reading it.
        error: io::Error,
    },
}

/// The message of an I/O error without Rust's ` (os error N)` suffix:
/// `No such file or directory`, as `strerror` and the shell say it.
pub(crate) fn io_reason(error: &io::Error) -> String {
    let text = error.to_string();
    match text.rfind(" (os error ") {
        Some(at) if text.ends_with(')') => text[..at].to_string(),
        _ => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_reason_drops_the_os_error_suffix() {
        let e = io::Error::from_raw_os_error(2); // ENOENT on Linux
        assert_eq!(io_reason(&e), "No such file or directory");
        let custom = io::Error::other("plain words");
        assert_eq!(io_reason(&custom), "plain words");
    }

    #[test]
    fn messages_name_the_value_and_what_is_expected() {
        let e = TopologyError::InvalidSynthetic {
            description: "pack:x".into(),
        };
        assert_eq!(
            e.to_string(),
            "invalid synthetic topology \"pack:x\": hwloc could not parse it \
             (expected e.g. \"pack:2 numa:2 core:8 pu:1\")"
        );
        let e = TopologyError::XmlUnreadable {
            path: "/x.xml".into(),
            error: io::Error::from_raw_os_error(2),
        };
        assert_eq!(
            e.to_string(),
            "cannot read topology XML \"/x.xml\": No such file or directory"
        );
    }
}
