//! Third-party copies: `sluice cp sluice://A/x sluice://B/y` moves files from daemon A
//! to daemon B directly. The client holds only the two control connections:
//!
//! 1. it opens a push session with B for `y` (handshake, `Open { Push }`, B's `Accept`
//!    and `Addresses`), without opening any data connection;
//! 2. it opens a session with A for `x` with `Open { Deliver }` and hands A a
//!    [`Delegate`]: B's session, the join key the client derived with B, where each
//!    data connection goes, and B's certificate fingerprint. A dials B, joins, and
//!    answers `Accept`;
//! 3. it relays the control frames between A and B ([`relay`]) until both close; the
//!    chunks flow from A to B and never through the client.
//!
//! The delegated key opens one session of B, already confined by B's `Open` to one
//! path and by the client's account on B to its rights; each stream joins once.

pub mod deliver;
pub mod relay;

use crate::error::EngineError;
use crate::net::connect::{connect_control, expect, read_accept};
use crate::net::tls::ClientTls;
use crate::session;
use crate::stats::Stats;
use crate::transport::{FrameReader, FrameWriter};
use crate::SessionOptions;
use sluice_wire::{
    Accept, Addresses, Capabilities, Delegate, Direction, Established, Frame, Open, StreamAddress,
    Token,
};
use std::net::SocketAddr;
use std::sync::Arc;

/// One daemon of a third-party copy.
#[derive(Debug, Clone)]
pub struct Party {
    /// `host:port` as the user named it.
    pub addr: String,
    /// The path under its root, as typed.
    pub path: String,
    /// Its account's token.
    pub token: Option<Token>,
    /// Encryption and trust for the control connection to it.
    pub tls: ClientTls,
}

/// A control connection opened and authenticated.
struct Control {
    reader: FrameReader,
    writer: FrameWriter,
    est: Established,
    /// Where the connection went (the address the other daemon is told to dial when
    /// this one advertises none).
    peer: SocketAddr,
}

fn open_control(p: &Party) -> Result<Control, EngineError> {
    let (reader, writer, est, _) = connect_control(&p.addr, p.token.clone(), &p.tls)?;
    let peer = writer
        .stream_clone()?
        .stream()
        .peer_addr()
        .map_err(|e| EngineError::io(format!("reading the address of {}", p.addr), e))?;
    Ok(Control {
        reader,
        writer,
        est,
        peer,
    })
}

/// Copies `source` (on daemon A) to `dest` (on daemon B) with the payload going from A
/// to B directly, counting what B reports into `stats`.
///
/// # Errors
/// Either daemon refused or failed, or the daemons cannot agree (different features,
/// chunks that do not fit).
pub fn copy(
    source: &Party,
    dest: &Party,
    opts: &SessionOptions,
    stats: &Arc<Stats>,
) -> Result<(), EngineError> {
    stats.set_pipeline("third-party");
    let mut sink = open_control(dest)?;
    let mut src = open_control(source)?;
    agree(&src.est, &sink.est, opts, &source.addr, &dest.addr)?;
    let dest_path = if session::sends_contents(&source.path) && !dest.path.ends_with('/') {
        format!("{}/", dest.path)
    } else {
        dest.path.clone()
    };
    sink.writer.send(&Frame::Open(Open {
        direction: Direction::Push,
        path: dest_path,
        options: opts.open_options(),
    }))?;
    let (accept, advertised) = read_accept(&mut sink.reader, &sink.est, &dest.addr)?;
    let delegate = delegation(&sink, &accept, &advertised);
    let mut options = opts.open_options();
    options.streams = accept.streams();
    options.chunk_bytes = accept.chunk_bytes;
    src.writer.send(&Frame::Open(Open {
        direction: Direction::Deliver,
        path: source.path.clone(),
        options,
    }))?;
    src.writer.send(&Frame::Delegate(delegate))?;
    expect(&mut src.reader, &source.addr, "Accept", |f| match f {
        Frame::Accept(a) => Ok(a),
        other => Err(other),
    })?;
    for c in [&src.reader, &sink.reader] {
        c.set_timeout(None)
            .map_err(|e| EngineError::io("clearing a timeout", e))?;
    }
    relay::relay((src.reader, src.writer), (sink.reader, sink.writer), stats)
}

/// Both daemons must speak the features the session relies on alike: the sink
/// acknowledges chunks only if the source expects it, takes packs only if the source
/// packs, and a codec must be known to both.
fn agree(
    a: &Established,
    b: &Established,
    opts: &SessionOptions,
    a_name: &str,
    b_name: &str,
) -> Result<(), EngineError> {
    let features = [
        (Capabilities::CHUNK_ACKS, "chunk acknowledgements"),
        (Capabilities::PACKED, "packed small files"),
    ];
    for (cap, what) in features {
        if a.capabilities.contains(cap) != b.capabilities.contains(cap) {
            return Err(EngineError::Handshake {
                peer: format!("{a_name} and {b_name}"),
                message: format!("the two daemons run different protocol features ({what}): upgrade the older one"),
            });
        }
    }
    let wire = opts.open_options().compress;
    let needs = wire.capability();
    if !(a.capabilities.contains(needs) && b.capabilities.contains(needs)) {
        return Err(EngineError::Handshake {
            peer: format!("{a_name} and {b_name}"),
            message: format!("--compress {wire:?} is not offered by both daemons"),
        });
    }
    Ok(())
}

/// The capability for the source: B's session and where each of its data connections
/// goes (B's advertised address, else where the client reached B).
fn delegation(sink: &Control, accept: &Accept, advertised: &Addresses) -> Delegate {
    let targets = (0..accept.streams())
        .map(|i| StreamAddress {
            stream_index: i,
            addr: advertised.of(i).unwrap_or(sink.peer),
        })
        .collect();
    // The source reaches B over TLS exactly when this client does, pinned to the
    // certificate B showed this client; in clear text the source's own `--encrypt`
    // decides whether it may (loopback only, by default).
    let fingerprint = sink.writer.peer_fingerprint();
    Delegate {
        session_id: accept.session_id,
        join_key: sink.est.join_key(&accept.session_secret),
        channels: accept.channels,
        streams_per_channel: accept.streams_per_channel,
        chunk_bytes: accept.chunk_bytes,
        tls: fingerprint.is_some(),
        fingerprint: fingerprint.map_or([0; 32], |f| f.0),
        targets,
    }
}
