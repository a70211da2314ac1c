//! How `sluice cp SRC... DST` names things: which directory to open on each side, what
//! to send, and under which name it lands.
//!
//! # Rules
//!
//! A source is sent either as a *unit* (it keeps a name under the destination) or as
//! its *contents* (what is inside it lands directly in the destination):
//!
//! | command                      | destination                | result              |
//! |------------------------------|----------------------------|---------------------|
//! | `cp -r src dst/`             | any (created if missing)   | `dst/src/...`       |
//! | `cp -r src dst`              | `dst` is a directory       | `dst/src/...`       |
//! | `cp -r src dst`              | `dst` is missing (or not a directory) | `dst/...` (a copy of `src` named `dst`) |
//! | `cp -r src/ dst` (or `src/.`)| any (created if missing)   | `dst/...`           |
//! | `cp file dst/`               | any (created if missing)   | `dst/file`          |
//! | `cp file dst`                | `dst` is a directory       | `dst/file`          |
//! | `cp file newname`            | `newname` is not a directory | `newname`         |
//! | `cp a b c dst`               | must be a directory, or end with `/` (then created) | each as above into `dst` |
//!
//! * A trailing `/` on a source (or a last component `.` or `..`) means "its contents",
//!   as in rsync; it is an error on a source that is not a directory.
//! * A trailing `/` on the destination means "a directory"; it is created if missing
//!   (its parent must exist). Without it, a missing destination is the new name of a
//!   single source (as `cp` does), and its parent must exist.
//! * Symlinks given as sources are sent as symlinks, except with a trailing `/`, where
//!   the directory they point to is sent (rsync's behaviour).

use sluice_wire::{PathError, RelPath};

/// What the command line says about one source and the destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyArgs<'a> {
    /// The source, as typed.
    pub source: &'a str,
    /// Whether the source is a directory (after following a symlink).
    pub source_is_dir: bool,
    /// The destination, as typed.
    pub dest: &'a str,
    /// Whether the destination exists and is a directory.
    pub dest_is_dir: bool,
    /// Sources on the command line.
    pub source_count: usize,
}

/// Where one source's entries come from and where they land.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// The directory to open as the source [`Root`](super::Root).
    pub source_root: String,
    /// What to send, relative to `source_root`; `None`: the root itself.
    pub start: Option<RelPath>,
    /// The directory to open as the destination root.
    pub dest_root: String,
    /// Whether `dest_root` may not exist yet and is to be created.
    pub create_dest_root: bool,
    /// The name the source gets under `dest_root`; `None`: its contents land there.
    /// Feed `start` and `prefix` to [`Scanner::new`](super::Scanner::new).
    pub prefix: Option<RelPath>,
}

/// The command line cannot be mapped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// An empty source or destination.
    #[error("empty {what} path")]
    Empty {
        /// "source" or "destination".
        what: &'static str,
    },
    /// Several sources and the destination is not a directory.
    #[error("cannot copy {sources} sources to {dest:?}: it is not a directory (add a trailing '/' to create one)")]
    DestNotDirectory {
        /// The destination.
        dest: String,
        /// How many sources.
        sources: usize,
    },
    /// A trailing `/` on a source that is not a directory.
    #[error("{source_path:?} is not a directory, but the trailing '/' asks for its contents")]
    SourceNotDirectory {
        /// The source.
        source_path: String,
    },
    /// A name that cannot be carried as a path component.
    #[error("cannot use {name:?} as a name: {error}")]
    BadName {
        /// The name.
        name: String,
        /// Why.
        error: PathError,
    },
}

/// Splits `p` (no trailing slash, not empty) into (directory, last component).
fn split(p: &str) -> (String, &str) {
    match p.rsplit_once('/') {
        Some(("", base)) => ("/".to_owned(), base),
        Some((dir, base)) => (dir.to_owned(), base),
        None => (".".to_owned(), p),
    }
}

fn name(s: &str) -> Result<RelPath, SpecError> {
    RelPath::parse(s).map_err(|error| SpecError::BadName {
        name: s.to_owned(),
        error,
    })
}

/// Maps one source of a copy; see the [module docs](self) for the rules.
///
/// # Errors
/// [`SpecError`] for an empty path, several sources into a non-directory, a trailing
/// `/` on a file, or a name the protocol cannot carry.
pub fn map_copy(args: &CopyArgs<'_>) -> Result<Mapping, SpecError> {
    if args.source.is_empty() {
        return Err(SpecError::Empty { what: "source" });
    }
    if args.dest.is_empty() {
        return Err(SpecError::Empty {
            what: "destination",
        });
    }
    // The source: unit or contents.
    let src = args.source.trim_end_matches('/');
    let (source_root, start, base) = if src.is_empty() {
        ("/".to_owned(), None, None) // "/" itself
    } else {
        let (dir, base) = split(src);
        if base == "." || base == ".." || args.source.ends_with('/') {
            (src.to_owned(), None, None)
        } else {
            (dir, Some(name(base)?), Some(base))
        }
    };
    let contents = base.is_none();
    if contents && !args.source_is_dir {
        return Err(SpecError::SourceNotDirectory {
            source_path: args.source.to_owned(),
        });
    }
    // Sent as contents, the source root is the directory itself.
    let start = if contents { None } else { start };

    // The destination: a directory to put things in, or a new name.
    let dst = args.dest.trim_end_matches('/');
    let dst_last = dst.rsplit('/').next().unwrap_or(dst);
    let dest_dir_like = args.dest_is_dir
        || args.dest.ends_with('/')
        || dst.is_empty()
        || dst_last == "."
        || dst_last == "..";
    let dest_full = if dst.is_empty() { "/" } else { dst }.to_owned();
    if args.source_count > 1 && !dest_dir_like {
        return Err(SpecError::DestNotDirectory {
            dest: args.dest.to_owned(),
            sources: args.source_count,
        });
    }
    let (dest_root, create_dest_root, prefix) = match (dest_dir_like, base) {
        // Into a directory: the unit keeps its name, contents merge.
        (true, Some(b)) => (dest_full, !args.dest_is_dir, Some(name(b)?)),
        (true, None) => (dest_full, !args.dest_is_dir, None),
        // A new name for a single unit: open its parent, name it.
        (false, Some(_)) => {
            let (dir, new) = split(dst);
            (dir, false, Some(name(new)?))
        }
        // Contents into a directory that does not exist yet.
        (false, None) => (dest_full, true, None),
    };
    Ok(Mapping {
        source_root,
        start,
        dest_root,
        create_dest_root,
        prefix,
    })
}

#[cfg(test)]
// Test data and counters are small; truncation cannot happen.
#[allow(clippy::cast_possible_truncation)]
mod tests {
    use super::*;

    /// (source, source_is_dir, dest, dest_is_dir, count) →
    /// (source_root, start, dest_root, create, prefix)
    type Row = (
        &'static str,
        bool,
        &'static str,
        bool,
        usize,
        (
            &'static str,
            Option<&'static str>,
            &'static str,
            bool,
            Option<&'static str>,
        ),
    );

    const ROWS: &[Row] = &[
        // cp -r src dst/ → dst/src
        (
            "src",
            true,
            "dst/",
            false,
            1,
            (".", Some("src"), "dst", true, Some("src")),
        ),
        (
            "src",
            true,
            "dst/",
            true,
            1,
            (".", Some("src"), "dst", false, Some("src")),
        ),
        // cp -r src dst, dst an existing directory → dst/src
        (
            "src",
            true,
            "dst",
            true,
            1,
            (".", Some("src"), "dst", false, Some("src")),
        ),
        // cp -r src dst, dst missing → dst is the copy
        (
            "src",
            true,
            "dst",
            false,
            1,
            (".", Some("src"), ".", false, Some("dst")),
        ),
        (
            "a/b/src",
            true,
            "x/y/dst",
            false,
            1,
            ("a/b", Some("src"), "x/y", false, Some("dst")),
        ),
        // cp -r src/ dst → contents into dst
        (
            "src/",
            true,
            "dst",
            true,
            1,
            ("src", None, "dst", false, None),
        ),
        (
            "src/",
            true,
            "dst",
            false,
            1,
            ("src", None, "dst", true, None),
        ),
        (
            "/data/src//",
            true,
            "/d/",
            true,
            1,
            ("/data/src", None, "/d", false, None),
        ),
        (
            "src/.",
            true,
            "dst",
            true,
            1,
            ("src/.", None, "dst", false, None),
        ),
        (".", true, "dst", true, 1, (".", None, "dst", false, None)),
        ("/", true, "dst", true, 1, ("/", None, "dst", false, None)),
        // cp file dst/ → dst/file
        (
            "file",
            false,
            "dst/",
            false,
            1,
            (".", Some("file"), "dst", true, Some("file")),
        ),
        (
            "dir/file",
            false,
            "dst",
            true,
            1,
            ("dir", Some("file"), "dst", false, Some("file")),
        ),
        // cp file newname → newname
        (
            "file",
            false,
            "newname",
            false,
            1,
            (".", Some("file"), ".", false, Some("newname")),
        ),
        (
            "/abs/file",
            false,
            "/newname",
            false,
            1,
            ("/abs", Some("file"), "/", false, Some("newname")),
        ),
        (
            "file",
            false,
            "dst/newname",
            false,
            1,
            (".", Some("file"), "dst", false, Some("newname")),
        ),
        // Destination "." or "/" is a directory.
        (
            "file",
            false,
            ".",
            true,
            1,
            (".", Some("file"), ".", false, Some("file")),
        ),
        (
            "file",
            false,
            "/",
            true,
            1,
            (".", Some("file"), "/", false, Some("file")),
        ),
        // Several sources into a directory.
        (
            "a",
            true,
            "dst",
            true,
            3,
            (".", Some("a"), "dst", false, Some("a")),
        ),
        ("b/", true, "dst", true, 3, ("b", None, "dst", false, None)),
        (
            "c",
            false,
            "new/",
            false,
            3,
            (".", Some("c"), "new", true, Some("c")),
        ),
        // Unicode names.
        (
            "données/日本語.txt",
            false,
            "out/",
            true,
            1,
            (
                "données",
                Some("日本語.txt"),
                "out",
                false,
                Some("日本語.txt"),
            ),
        ),
    ];

    #[test]
    fn table() {
        for &(source, source_is_dir, dest, dest_is_dir, source_count, want) in ROWS {
            let args = CopyArgs {
                source,
                source_is_dir,
                dest,
                dest_is_dir,
                source_count,
            };
            let m = map_copy(&args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
            let got = (
                m.source_root.as_str(),
                m.start.as_ref().map(RelPath::as_str),
                m.dest_root.as_str(),
                m.create_dest_root,
                m.prefix.as_ref().map(RelPath::as_str),
            );
            assert_eq!(got, want, "{args:?}");
        }
    }

    #[test]
    fn errors() {
        let a = |source, source_is_dir, dest, dest_is_dir, source_count| CopyArgs {
            source,
            source_is_dir,
            dest,
            dest_is_dir,
            source_count,
        };
        assert!(matches!(
            map_copy(&a("a", true, "dst", false, 2)),
            Err(SpecError::DestNotDirectory { sources: 2, .. })
        ));
        assert!(matches!(
            map_copy(&a("file/", false, "dst", true, 1)),
            Err(SpecError::SourceNotDirectory { .. })
        ));
        assert!(matches!(
            map_copy(&a("", false, "dst", true, 1)),
            Err(SpecError::Empty { what: "source" })
        ));
        assert!(matches!(
            map_copy(&a("f", false, "", true, 1)),
            Err(SpecError::Empty { .. })
        ));
        let long = "x".repeat(300);
        assert!(matches!(
            map_copy(&a(&long, false, "d/", true, 1)),
            Err(SpecError::BadName { .. })
        ));
        let e = map_copy(&a("a", true, "dst", false, 2)).unwrap_err();
        assert!(e.to_string().contains("\"dst\""), "{e}");
    }
}
