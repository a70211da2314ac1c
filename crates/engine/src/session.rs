//! Session plumbing shared by the daemon and the client: randomness, the handshake
//! drivers around `sluice-wire`'s state machines, and destination mapping.

use crate::error::EngineError;
use crate::transport::{FrameReader, FrameWriter};
use sluice_wire::{
    ClientConfig, ClientHandshake, Established, Frame, HandshakeStatus, RelPath, ServerConfig,
    ServerHandshake, Token,
};
use std::time::Duration;

/// How long the handshake and the joins may take.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// Random bytes from the OS.
///
/// # Errors
/// The OS random source failed.
pub fn random<const N: usize>() -> Result<[u8; N], EngineError> {
    let mut b = [0u8; N];
    getrandom::fill(&mut b).map_err(|e| {
        EngineError::io(
            "reading the OS random source",
            std::io::Error::other(e.to_string()),
        )
    })?;
    Ok(b)
}

fn handshake_error(peer: &str, e: impl std::fmt::Display) -> EngineError {
    EngineError::Handshake {
        peer: peer.to_string(),
        message: e.to_string(),
    }
}

/// Runs the client handshake on a fresh control connection.
///
/// # Errors
/// The server refused (version, authentication) or the connection failed.
pub fn client_handshake(
    reader: &mut FrameReader,
    writer: &mut FrameWriter,
    token: Option<Token>,
) -> Result<Established, EngineError> {
    let mut hs = ClientHandshake::new(ClientConfig::new(token), random()?);
    let mut out = Vec::new();
    hs.start(&mut out);
    writer.send_raw(&out)?;
    loop {
        let frame = reader
            .next("handshaking")?
            .ok_or_else(|| EngineError::Disconnected {
                peer: reader.peer().to_string(),
                state: "handshaking".into(),
            })?;
        out.clear();
        let status = hs.handle(&frame, &mut out);
        if !out.is_empty() {
            let _ = writer.send_raw(&out);
        }
        match status.map_err(|e| handshake_error(reader.peer(), e))? {
            HandshakeStatus::Done(est) => return Ok(est),
            HandshakeStatus::InProgress => {}
        }
    }
}

/// Runs the server handshake; `first` is the client's `Hello`, already read.
///
/// # Errors
/// The client failed authentication or spoke another version.
pub fn server_handshake(
    first: Frame,
    reader: &mut FrameReader,
    writer: &mut FrameWriter,
    token: Option<Token>,
) -> Result<Established, EngineError> {
    let mut hs = ServerHandshake::new(ServerConfig::new(token), random()?);
    let mut out = Vec::new();
    let mut frame = first;
    loop {
        out.clear();
        let status = hs.handle(&frame, &mut out);
        if !out.is_empty() {
            let _ = writer.send_raw(&out);
        }
        match status.map_err(|e| handshake_error(reader.peer(), e))? {
            HandshakeStatus::Done(est) => return Ok(est),
            HandshakeStatus::InProgress => {}
        }
        frame = reader
            .next("handshaking")?
            .ok_or_else(|| EngineError::Disconnected {
                peer: reader.peer().to_string(),
                state: "handshaking".into(),
            })?;
    }
}

/// Where the sink puts what arrives: under `base`, with the top-level name replaced by
/// `rename_top` when the destination named a new file or directory (`cp a b` where `b`
/// does not exist).
#[derive(Debug, Clone, Default)]
pub struct DestMap {
    /// Directory under the sink's root.
    pub base: Option<RelPath>,
    /// New name of the top-level entry.
    pub rename_top: Option<String>,
}

impl DestMap {
    /// The destination of a manifest path, or None if it cannot be represented.
    pub fn map(&self, path: &RelPath) -> Option<RelPath> {
        let mapped = match &self.rename_top {
            Some(new) => match path.as_str().split_once('/') {
                Some((_, rest)) => format!("{new}/{rest}"),
                None => new.clone(),
            },
            None => path.as_str().to_string(),
        };
        let full = match &self.base {
            Some(b) => format!("{}/{mapped}", b.as_str()),
            None => mapped,
        };
        RelPath::parse(&full).ok()
    }

    /// The mapping for a destination typed as `raw` (relative to a root): a directory
    /// when it ends in '/', is the root, or `is_dir` says it exists as one; otherwise the
    /// new name of a single source.
    ///
    /// # Errors
    /// The path is not a valid relative path.
    pub fn for_destination(
        raw: &str,
        is_dir: impl Fn(&RelPath) -> bool,
    ) -> Result<DestMap, String> {
        let trimmed = raw.trim_matches('/');
        if trimmed.is_empty() {
            return Ok(DestMap::default());
        }
        let rel = RelPath::parse(trimmed).map_err(|e| e.to_string())?;
        if raw.ends_with('/') || is_dir(&rel) {
            return Ok(DestMap {
                base: Some(rel),
                rename_top: None,
            });
        }
        Ok(DestMap {
            base: rel.parent(),
            rename_top: Some(rel.file_name().to_string()),
        })
    }
}

/// Source-side mapping of a path typed as `raw` under a root: (start, prefix). A
/// trailing '/' sends a directory's contents; otherwise the entry keeps its own name.
///
/// # Errors
/// The path is not a valid relative path.
pub fn source_start(raw: &str) -> Result<(Option<RelPath>, Option<RelPath>), String> {
    let trimmed = raw.trim_matches('/');
    if trimmed.is_empty() {
        return Ok((None, None));
    }
    let rel = RelPath::parse(trimmed).map_err(|e| e.to_string())?;
    if raw.ends_with('/') {
        return Ok((Some(rel), None));
    }
    let name = RelPath::parse(rel.file_name()).map_err(|e| e.to_string())?;
    Ok((Some(rel), Some(name)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rp(s: &str) -> RelPath {
        RelPath::parse(s).unwrap()
    }

    #[test]
    fn destination_directory_keeps_names() {
        let m = DestMap::for_destination("out/", |_| false).unwrap();
        assert_eq!(m.map(&rp("src/a.txt")).unwrap().as_str(), "out/src/a.txt");
        let m = DestMap::for_destination("out", |_| true).unwrap();
        assert_eq!(m.map(&rp("src")).unwrap().as_str(), "out/src");
    }

    #[test]
    fn new_destination_renames_the_top_entry() {
        let m = DestMap::for_destination("dir/new", |_| false).unwrap();
        assert_eq!(m.map(&rp("src")).unwrap().as_str(), "dir/new");
        assert_eq!(m.map(&rp("src/x/y")).unwrap().as_str(), "dir/new/x/y");
        let m = DestMap::for_destination("", |_| false).unwrap();
        assert_eq!(m.map(&rp("a")).unwrap().as_str(), "a");
    }

    #[test]
    fn trailing_slash_sends_contents() {
        assert_eq!(source_start("data/").unwrap(), (Some(rp("data")), None));
        assert_eq!(
            source_start("a/data").unwrap(),
            (Some(rp("a/data")), Some(rp("data")))
        );
        assert_eq!(source_start("/").unwrap(), (None, None));
        assert!(source_start("../x").is_err());
    }
}
