//! The client side of opening a session: connect, handshake, `Open`, the daemon's
//! `Accept` (and `Addresses`), then one joined data connection per stream.

use super::handshake::{
    client_handshake_early, client_handshake_offering, handshake_error, Early, HANDSHAKE_TIMEOUT,
};
use super::predial::{self, Dialled, Predialled};
use super::tcp;
use super::tls::{secure_control, ClientTls, DataDial, Encrypt, Fingerprint, Link};
use super::transport::{self, FrameReader, FrameWriter};
use crate::error::EngineError;
use crossbeam_channel::Receiver;
use sluice_wire::{
    Accept, Addresses, Capabilities, ClientConfig, ClientJoin, Direction, ErrorCode, Established,
    Frame, Open, Token,
};
use std::net::TcpStream;
use std::time::Duration;

/// How long a data connection to an address the daemon advertised may take before the
/// client falls back to the address it was given.
const ADVERTISED_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

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
    /// The data connections, joined, or with their `Join` sent.
    pub data: Vec<Link>,
    /// For each data connection, its `Join` when the answer is still to be read (a
    /// source's, with `CHUNKS_AFTER_JOIN`: [`ChunkSender::joining`]).
    ///
    /// [`ChunkSender::joining`]: super::transport::ChunkSender::joining
    pub joining: Vec<Option<ClientJoin>>,
    /// The capabilities both sides agreed on.
    pub capabilities: Capabilities,
    /// The fingerprint of the certificate the daemon presented (None: clear text).
    pub fingerprint: Option<Fingerprint>,
}

/// Connects to `addrs`, runs the handshake, sends `open`, and joins every data
/// connection the daemon accepts (used by `cp` and by streams), several at once. `tls` says whether the
/// connections are encrypted (all of them or none) and whom to trust; the data
/// connections are pinned to the certificate the control connection presented.
///
/// `addrs` may list several addresses of one daemon, comma-separated (one per NIC):
/// the control connection goes to the first, data connection `i` to address `i mod n`,
/// so the streams spread over the links the routes lead through.
///
/// # Errors
/// Connection, handshake, refusal (`Error` frame) or join failures.
pub fn open_session(
    addrs: &str,
    token: Option<Token>,
    open: Open,
    tls: &ClientTls,
) -> Result<Opened, EngineError> {
    let asked = open.options.streams;
    open_session_sized(addrs, token, open, tls, |_| asked)
}

/// [`open_session`], asking for `long_path(rtt)` data connections instead of `open`'s
/// ([`crate::options::SessionOptions::streams_for`]). `rtt` is the
/// lowest round trip the kernel measured on the control connection when `Open` goes
/// out: the TCP handshake's and, by then, at least one more exchange's (TLS, or the
/// clear-text handshake), so one late answer on a loaded host does not make a short path
/// look long. The TCP handshake's alone decides how many data connections are dialled
/// while the control handshake runs; those the session then does not need are closed
/// without a frame.
///
/// # Errors
/// As [`open_session`].
pub fn open_session_sized(
    addrs: &str,
    token: Option<Token>,
    open: Open,
    tls: &ClientTls,
    long_path: impl Fn(Option<Duration>) -> u16,
) -> Result<Opened, EngineError> {
    let hosts: Vec<&str> = addrs.split(',').filter(|a| !a.is_empty()).collect();
    let addr = hosts.first().copied().unwrap_or(addrs);
    let direction = open.direction;
    let stream = connect_tcp(addr)?;
    let asked = open.options.streams;
    let probe = stream
        .try_clone()
        .map_err(|e| EngineError::io("cloning a socket", e))?;
    let streams = || {
        let rtt = tcp::rtt(&probe);
        let n = long_path(rtt);
        if n != asked {
            tracing::info!(
                "{n} data connections instead of {asked}: the path's round-trip time is {:.1} ms",
                rtt.unwrap_or_default().as_secs_f64() * 1e3
            );
        }
        n
    };
    // The first group of data connections is connected while the control connection's
    // TLS handshake runs, and secured once it is up (TLS only: a refused clear-text
    // connection would show only at its `Join`). Connected after the control
    // connection, they reach a server's accept queue after it.
    let encrypts = tls.encrypt.client_encrypts(&stream);
    let ahead = if encrypts {
        long_path(tcp::rtt(&stream)).min(JOINS_AT_ONCE)
    } else {
        0
    };
    let mut early = Predialled::connect(&hosts, addr, ahead);
    let (link, dial) = secure_control_if(stream, addr, tls, encrypts)?;
    early.secure(dial.as_ref());
    let (mut reader, mut writer) = transport::control_halves(link)?;
    let fingerprint = writer.peer_fingerprint();
    let est = handshake_and_open(&mut reader, &mut writer, token, (open, &streams), tls, addr)?;
    let (accept, advertised) = read_accept(&mut reader, &est, addr)?;
    let key = est.join_key(&accept.session_secret);
    let dials = Dials {
        hosts: &hosts,
        named: addr,
        advertised: &advertised,
        dial: dial.as_ref(),
        accept: &accept,
        key: &key,
        chunks_after_join: direction == Direction::Push
            && est.capabilities.contains(Capabilities::CHUNKS_AFTER_JOIN),
    };
    let (data, joining) = dials
        .join_all(&mut early)?
        .into_iter()
        .unzip::<_, _, Vec<_>, Vec<_>>();
    debug_assert_eq!(data.len(), usize::from(accept.streams()));
    reader
        .set_timeout(None)
        .map_err(|e| EngineError::io("clearing a timeout", e))?;
    Ok(Opened {
        reader,
        writer,
        accept,
        data,
        joining,
        capabilities: est.capabilities,
        fingerprint,
    })
}

/// The client handshake, then `open` asking for `streams()` data connections (decided
/// as it goes out): inside TLS (the server already authenticated) `Open` goes right
/// behind the proof, in clear text only after the server's `AuthOk`.
fn handshake_and_open(
    reader: &mut FrameReader,
    writer: &mut FrameWriter,
    token: Option<Token>,
    (open, streams): (Open, &dyn Fn() -> u16),
    tls: &ClientTls,
    addr: &str,
) -> Result<Established, EngineError> {
    let build = |caps: Capabilities| {
        let mut open = open.clone();
        open.options.streams = streams();
        Frame::Open(offer_direct(open, caps, addr))
    };
    let early: Option<Early<'_>> = writer.is_tls().then_some(&build);
    let (est, sent) = client_handshake_early(reader, writer, ClientConfig::new(token), early)
        .map_err(|e| clear_text_refused(e, addr, tls.encrypt))?;
    if !sent {
        writer.send(&build(est.capabilities))?;
    }
    Ok(est)
}

/// Data connections joined at once at most: on a long path each costs several round
/// trips (TCP, TLS, `Join`), which would add up one after the other; a server that
/// answers joins one at a time (a stream receiver) keeps each within its timeout.
const JOINS_AT_ONCE: u16 = 8;

/// What every data connection of a session is opened with.
struct Dials<'a> {
    hosts: &'a [&'a str],
    named: &'a str,
    advertised: &'a Addresses,
    dial: Option<&'a DataDial>,
    accept: &'a Accept,
    key: &'a [u8; 32],
    /// Whether each TLS connection's `Joined` is left for its chunk sender to read.
    chunks_after_join: bool,
}

/// A data connection and, if its answer is left to be read, its `Join`.
type Joining = (Link, Option<ClientJoin>);

impl Dials<'_> {
    /// Every data connection of the session, in stream order, [`JOINS_AT_ONCE`] at a
    /// time, taking those dialled `early` where they fit; the first failure in stream
    /// order is the error.
    fn join_all(&self, early: &mut Predialled) -> Result<Vec<Joining>, EngineError> {
        let indexes: Vec<u16> = (0..self.accept.streams()).collect();
        let mut data = Vec::with_capacity(indexes.len());
        for group in indexes.chunks(usize::from(JOINS_AT_ONCE)) {
            let ahead: Vec<_> = group.iter().map(|&i| (i, early.take(i))).collect();
            let joined: Vec<Result<Joining, EngineError>> = std::thread::scope(|s| {
                let handles: Vec<_> = ahead
                    .into_iter()
                    .map(|(i, rx)| s.spawn(move || self.join_one(i, rx)))
                    .collect();
                handles
                    .into_iter()
                    .map(|h| {
                        h.join().unwrap_or_else(|_| {
                            Err(EngineError::Aborted(
                                "a data connection's thread panicked".into(),
                            ))
                        })
                    })
                    .collect()
            });
            for link in joined {
                data.push(link?);
            }
        }
        Ok(data)
    }

    /// Data connection `i`: the one dialled ahead when it fits, else connected and
    /// secured now; then joined.
    fn join_one(&self, i: u16, ahead: Option<Receiver<Dialled>>) -> Result<Joining, EngineError> {
        let (link, to) = match ahead.and_then(|rx| self.fitting(i, rx.recv().ok()?)) {
            Some(dialled) => dialled,
            None => {
                let (s, to) = connect_data(i, self.hosts, self.named, self.advertised)?;
                let link = match self.dial {
                    Some(d) => d.secure(s, HANDSHAKE_TIMEOUT)?,
                    None => Link::plain(s),
                };
                (link, to)
            }
        };
        crate::fault::stall_join(i);
        // In clear text a daemon at its connection limit answers the `Join` itself with
        // `Busy`, which the user must see as such; inside TLS that refusal fails the TLS
        // handshake, before any `Join`.
        if self.chunks_after_join && link.is_tls() {
            let join = send_join(&link, &to, self.accept, self.key, i)?;
            return Ok((link, Some(join)));
        }
        Ok((join_data(link, &to, self.accept, self.key, i)?, None))
    }

    /// A connection dialled ahead for stream `i`, if it went where stream `i` should
    /// go (the daemon may advertise another address for it); a failed one is dialled
    /// again the ordinary way, so its error is the one the user would have seen.
    fn fitting(&self, i: u16, dialled: Dialled) -> Option<(Link, String)> {
        let (link, to) = dialled
            .inspect_err(|e| tracing::debug!("data connection {i} dialled ahead: {e}"))
            .ok()?;
        let advertised = self.advertised.of(i).filter(|_| self.hosts.len() <= 1);
        if predial::fits(link.stream().peer_addr().ok(), advertised) {
            return Some((link, to));
        }
        link.close();
        None
    }
}

/// The control connection and what its handshakes settled: the sluice handshake's
/// result and, when encrypted, how to open the data connections.
pub(crate) type Control = (FrameReader, FrameWriter, Established, Option<DataDial>);

/// Opens the control connection of a third-party copy to `addr`, encrypted when `tls`
/// says so, and runs the client handshake on it. It offers every capability but
/// `SINK_CLOSES`: the client relays between two daemons, and a sink that closes by
/// itself needs a source that expects it, which two daemons of different versions
/// may not agree on; with the bit withheld, both run the `Close` exchange.
pub(crate) fn connect_control(
    addr: &str,
    token: Option<Token>,
    tls: &ClientTls,
) -> Result<Control, EngineError> {
    let (link, dial) = dial_control(addr, tls)?;
    let (mut reader, mut writer) = transport::control_halves(link)?;
    let mut config = ClientConfig::new(token);
    config.capabilities.set(Capabilities::SINK_CLOSES, false);
    let est = client_handshake_offering(&mut reader, &mut writer, config)
        .map_err(|e| clear_text_refused(e, addr, tls.encrypt))?;
    Ok((reader, writer, est, dial))
}

/// The control connection to `addr`, connected and, when `tls` says so, secured (with
/// how to open the data connections pinned to the same certificate).
fn dial_control(addr: &str, tls: &ClientTls) -> Result<(Link, Option<DataDial>), EngineError> {
    let stream = connect_tcp(addr)?;
    let encrypts = tls.encrypt.client_encrypts(&stream);
    secure_control_if(stream, addr, tls, encrypts)
}

/// The control connection's socket, connected to `addr`.
fn connect_tcp(addr: &str) -> Result<TcpStream, EngineError> {
    let stream = TcpStream::connect(addr)
        .map_err(|e| EngineError::io(format!("connecting to {addr}"), e))?;
    transport::tune(&stream, false).map_err(|e| EngineError::io("configuring a socket", e))?;
    Ok(stream)
}

/// `stream` secured as `tls` trusts (with how to open the data connections pinned to
/// the same certificate) when `encrypts`, else in clear text.
fn secure_control_if(
    stream: TcpStream,
    addr: &str,
    tls: &ClientTls,
    encrypts: bool,
) -> Result<(Link, Option<DataDial>), EngineError> {
    if encrypts {
        let (link, dial) = secure_control(stream, addr, &tls.trust, HANDSHAKE_TIMEOUT)?;
        Ok((link, Some(dial)))
    } else {
        Ok((Link::plain(stream), None))
    }
}

/// A daemon's refusal of clear text as one line naming both sides' settings.
fn clear_text_refused(e: EngineError, addr: &str, ours: Encrypt) -> EngineError {
    match e {
        EngineError::HandshakeRefused {
            code: ErrorCode::EncryptionRequired,
            message,
            ..
        } => EngineError::Refused {
            code: ErrorCode::EncryptionRequired,
            message: format!(
                "{addr} requires encryption (daemon: {message}; this client: --encrypt {ours})"
            ),
        },
        other => other,
    }
}

/// `open` as it may go to a daemon that agreed `caps`: direct I/O only where offered.
fn offer_direct(mut open: Open, caps: Capabilities, addr: &str) -> Open {
    if open.options.direct && !caps.contains(Capabilities::DIRECT_IO) {
        tracing::warn!("--direct: the daemon at {addr} does not offer direct I/O; its side goes through its page cache");
        open.options.direct = false;
    }
    open
}

/// The daemon's `Accept`, and the `Addresses` that follow it where both sides
/// understand them.
pub(crate) fn read_accept(
    reader: &mut FrameReader,
    est: &Established,
    addr: &str,
) -> Result<(Accept, Addresses), EngineError> {
    let accept = expect(reader, addr, "Accept", |f| match f {
        Frame::Accept(a) => Ok(a),
        other => Err(other),
    })?;
    let advertised = if est.capabilities.contains(Capabilities::ADDRESSES) {
        expect(reader, addr, "Addresses", |f| match f {
            Frame::Addresses(a) => Ok(a),
            other => Err(other),
        })?
    } else {
        Addresses::default()
    };
    Ok((accept, advertised))
}

/// Joins data connection `i` (already connected to `addr`) to the session, reading
/// exactly the daemon's answer: on a pull, chunks may follow it at once.
pub(crate) fn join_data(
    s: Link,
    addr: &str,
    accept: &Accept,
    key: &[u8; 32],
    i: u16,
) -> Result<Link, EngineError> {
    let mut join = send_join(&s, addr, accept, key, i)?;
    let mut s = s;
    transport::await_joined(&mut s, &mut join, HANDSHAKE_TIMEOUT)?;
    Ok(s)
}

/// Sends data connection `i`'s `Join` (the connection already connected to `addr`),
/// returning it for its answer.
fn send_join(
    s: &Link,
    addr: &str,
    accept: &Accept,
    key: &[u8; 32],
    i: u16,
) -> Result<ClientJoin, EngineError> {
    transport::tune(s.stream(), true).map_err(|e| EngineError::io("configuring a socket", e))?;
    let join = ClientJoin::new(accept, key, i).map_err(|e| handshake_error(addr, e))?;
    let mut out = Vec::new();
    join.start(&mut out);
    let mut w = FrameWriter::new(
        s.try_clone()
            .map_err(|e| EngineError::io("cloning a socket", e))?,
    );
    w.send_raw(&out)?;
    Ok(join)
}

/// The next frame on the control connection, taken by `want` (which hands back any
/// other frame): the peer's `Error` is its refusal, another frame is out of place.
pub(crate) fn expect<T>(
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
