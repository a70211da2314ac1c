//! Session plumbing shared by the daemon and the client: randomness, the handshake
//! drivers around `sluice-wire`'s state machines, and destination mapping.

use crate::error::EngineError;
use crate::transport;
use crate::transport::{FrameReader, FrameWriter};
use sluice_wire::{
    Accept, Addresses, Capabilities, ClientConfig, ClientHandshake, ClientJoin, Established, Frame,
    HandshakeStatus, Open, RelPath, ServerConfig, ServerHandshake, Token,
};
use std::net::TcpStream;
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
        if dest_is_directory(raw, is_dir(&rel), false) {
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

/// Whether a destination typed as `raw` is a directory that receives the sources under
/// their own names (rather than the new name of a single source): it ends in '/', is a
/// root (empty or '/'), `exists_as_dir`, or `into_dir` because several sources or a
/// directory's contents go there. The one rule both a daemon (push) and a client
/// (pull) apply.
pub fn dest_is_directory(raw: &str, exists_as_dir: bool, into_dir: bool) -> bool {
    raw.ends_with('/') || raw.trim_matches('/').is_empty() || exists_as_dir || into_dir
}

/// Source-side mapping of a path typed as `raw` under a root: (start, prefix). A
/// trailing '/' (or a last component '.') sends a directory's contents, and so does the
/// root itself, which has no name of its own (`sluice://HOST/` and `sluice://HOST`
/// alike); otherwise the entry keeps its own name.
///
/// # Errors
/// The path is not a valid relative path.
pub fn source_start(raw: &str) -> Result<(Option<RelPath>, Option<RelPath>), String> {
    let (body, contents) = match raw.strip_suffix("/.") {
        Some(body) => (body, true),
        None => (raw, raw.ends_with('/')),
    };
    let trimmed = body.trim_matches('/');
    if trimmed.is_empty() || trimmed == "." {
        return Ok((None, None));
    }
    let rel = RelPath::parse(trimmed).map_err(|e| e.to_string())?;
    if contents {
        return Ok((Some(rel), None));
    }
    let name = RelPath::parse(rel.file_name()).map_err(|e| e.to_string())?;
    Ok((Some(rel), Some(name)))
}

/// Whether a source typed as `raw` under a root is sent as its contents (no name of its
/// own under the destination), by the rule of [`source_start`]. A path that rule
/// refuses counts as named; the daemon refuses it when the session opens.
pub fn sends_contents(raw: &str) -> bool {
    source_start(raw).is_ok_and(|(_, prefix)| prefix.is_none())
}

/// A session opened by a client: the control connection, the daemon's `Accept`, and
/// every data connection joined (in stream order).
#[derive(Debug)]
pub struct Opened {
    /// The control connection's reading half.
    pub reader: FrameReader,
    /// The control connection's writing half.
    pub writer: FrameWriter,
    /// What the daemon accepted.
    pub accept: Accept,
    /// The data connections, joined.
    pub data: Vec<TcpStream>,
    /// The capabilities both sides agreed on.
    pub capabilities: Capabilities,
}

/// Connects to `addr`, runs the handshake, sends `open`, and joins every data
/// connection the daemon accepts (used by `cp` and by streams).
///
/// # Errors
/// Connection, handshake, refusal (`Error` frame) or join failures.
pub fn open_session(addrs: &str, token: Option<Token>, open: Open) -> Result<Opened, EngineError> {
    // `addrs` may list several addresses of one daemon, comma-separated (one per NIC):
    // the control connection goes to the first, data connection `i` to address `i mod n`,
    // so the streams spread over the links the routes lead through.
    let all: Vec<&str> = addrs.split(',').filter(|a| !a.is_empty()).collect();
    let addr = all.first().copied().unwrap_or(addrs);
    let stream = TcpStream::connect(addr)
        .map_err(|e| EngineError::io(format!("connecting to {addr}"), e))?;
    transport::tune(&stream, false).map_err(|e| EngineError::io("configuring a socket", e))?;
    let (mut reader, mut writer) = transport::control_halves(stream)?;
    let est = client_handshake(&mut reader, &mut writer, token)?;
    let mut open = open;
    if open.options.direct && !est.capabilities.contains(Capabilities::DIRECT_IO) {
        tracing::warn!("--direct: the daemon at {addr} does not offer direct I/O; its side goes through its page cache");
        open.options.direct = false;
    }
    writer.send(&Frame::Open(open))?;
    let accept = expect(&mut reader, addr, "Accept", |f| match f {
        Frame::Accept(a) => Ok(a),
        other => Err(other),
    })?;
    let advertised = if est.capabilities.contains(Capabilities::ADDRESSES) {
        expect(&mut reader, addr, "Addresses", |f| match f {
            Frame::Addresses(a) => Ok(a),
            other => Err(other),
        })?
    } else {
        Addresses::default()
    };
    let key = est.join_key(&accept.session_secret);
    let mut conns = Vec::new();
    for i in 0..accept.streams() {
        let (s, addr) = connect_data(i, &all, addr, &advertised)?;
        let addr = addr.as_str();
        transport::tune(&s, true).map_err(|e| EngineError::io("configuring a socket", e))?;
        let mut join = ClientJoin::new(&accept, &key, i).map_err(|e| EngineError::Handshake {
            peer: addr.to_string(),
            message: e.to_string(),
        })?;
        let mut out = Vec::new();
        join.start(&mut out);
        let mut w = FrameWriter::new(
            s.try_clone()
                .map_err(|e| EngineError::io("cloning a socket", e))?,
        );
        w.send_raw(&out)?;
        let mut s = s;
        s.set_read_timeout(Some(HANDSHAKE_TIMEOUT))
            .map_err(|e| EngineError::io("setting a timeout", e))?;
        // Exactly the answer: on a pull, chunks may follow it at once.
        let frame = transport::read_one_frame(&mut s, "joining")?.ok_or_else(|| {
            EngineError::Disconnected {
                peer: addr.to_string(),
                state: "joining".into(),
            }
        })?;
        if let Frame::Error(e) = &frame {
            return Err(EngineError::Remote {
                code: e.code,
                message: e.message.clone(),
            });
        }
        join.handle(&frame).map_err(|e| EngineError::Handshake {
            peer: addr.to_string(),
            message: e.to_string(),
        })?;
        s.set_read_timeout(None)
            .map_err(|e| EngineError::io("clearing a timeout", e))?;
        conns.push(s);
    }
    reader
        .set_timeout(None)
        .map_err(|e| EngineError::io("clearing a timeout", e))?;
    Ok(Opened {
        reader,
        writer,
        accept,
        data: conns,
        capabilities: est.capabilities,
    })
}

/// The next frame on the control connection, taken by `want` (which hands back any
/// other frame): the peer's `Error` is its refusal, another frame is out of place.
fn expect<T>(
    reader: &mut FrameReader,
    peer: &str,
    what: &str,
    want: impl FnOnce(Frame) -> Result<T, Frame>,
) -> Result<T, EngineError> {
    let state = format!("waiting for {what}");
    match reader.next(&state)?.map(want) {
        Some(Ok(v)) => Ok(v),
        Some(Err(Frame::Error(e))) => Err(EngineError::Remote {
            code: e.code,
            message: e.message,
        }),
        Some(Err(other)) => Err(EngineError::Unexpected {
            peer: peer.to_string(),
            got: other.frame_type().name().to_string(),
            state,
        }),
        None => Err(EngineError::Disconnected {
            peer: peer.to_string(),
            state,
        }),
    }
}

/// How long a data connection to an address the daemon advertised may take before the
/// client falls back to the address it was given.
const ADVERTISED_CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// Opens data connection `i`: to the user's host list when it names several addresses
/// (`i mod n`), else to the address the daemon advertised for stream `i` (the NIC of
/// the channel that serves it), falling back to `named` when that one cannot be reached.
/// Returns the connection and where it went.
fn connect_data(
    i: u16,
    hosts: &[&str],
    named: &str,
    advertised: &Addresses,
) -> Result<(TcpStream, String), EngineError> {
    let target = match advertised.of(i) {
        Some(a) if hosts.len() <= 1 => {
            match TcpStream::connect_timeout(&a, ADVERTISED_CONNECT_TIMEOUT) {
                Ok(s) => {
                    tracing::debug!("data connection {i} to {a}, as the daemon advertised");
                    return Ok((s, a.to_string()));
                }
                Err(e) => {
                    tracing::warn!(
                        "data connection {i}: the daemon's address {a} cannot be reached ({e}); using {named}"
                    );
                    named
                }
            }
        }
        _ => hosts
            .get(usize::from(i) % hosts.len().max(1))
            .copied()
            .unwrap_or(named),
    };
    TcpStream::connect(target)
        .map(|s| (s, target.to_string()))
        .map_err(|e| EngineError::io(format!("opening data connection {i} to {target}"), e))
}

/// Sends `Accept` and, when the client understands it, the `Addresses` that follow it.
///
/// # Errors
/// The control connection failed.
pub fn send_accept(
    writer: &mut FrameWriter,
    est: &Established,
    accept: &Accept,
    addresses: Addresses,
) -> Result<(), EngineError> {
    writer.send(&Frame::Accept(accept.clone()))?;
    if est.capabilities.contains(Capabilities::ADDRESSES) {
        writer.send(&Frame::Addresses(addresses))?;
    }
    Ok(())
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
        assert_eq!(
            source_start("a/data/.").unwrap(),
            (Some(rp("a/data")), None)
        );
    }

    #[test]
    fn regression_pull_root_into_a_new_directory_sends_contents() {
        // `sluice cp -r sluice://HOST/ new` and `sluice://HOST new`: the root has no
        // name, so it is always sent as its contents, into a directory.
        for raw in ["", "/", ".", "./"] {
            assert_eq!(source_start(raw).unwrap(), (None, None), "{raw:?}");
            assert!(sends_contents(raw), "{raw:?}");
        }
        assert!(sends_contents("sub/"));
        assert!(!sends_contents("sub"));
        assert!(!sends_contents("../x"));
        assert!(dest_is_directory("new", false, sends_contents("")));
        assert!(!dest_is_directory("new", false, sends_contents("sub")));
    }

    #[test]
    fn a_destination_is_a_directory_by_slash_root_existence_or_need() {
        assert!(dest_is_directory("d/", false, false));
        assert!(dest_is_directory("", false, false));
        assert!(dest_is_directory("/", false, false));
        assert!(dest_is_directory("d", true, false));
        assert!(dest_is_directory("d", false, true));
        assert!(!dest_is_directory("d", false, false));
    }
}
