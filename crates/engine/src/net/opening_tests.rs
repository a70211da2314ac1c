//! How many one-way trips opening a session takes, counted by [`FlightProxy`] (not
//! timed), against a server that answers its data connections concurrently as the
//! daemon does; and that a pipelined `Open` behind a wrong proof is still refused.

use super::accept;
use super::connect::open_session;
use super::flights::FlightProxy;
use super::tls::{ClientTls, Encrypt, Link, ServerTls, Trust};
use super::transport::{ChunkReceiver, ChunkSender, DataEvent};
use crate::error::EngineError;
use sluice_wire::{
    Capabilities, ChunkHeader, Direction, ErrorCode, Frame, JoinTable, Open, OpenOptions, Segment,
    Token, MIN_CHUNK_BYTES,
};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

type Table = Arc<Mutex<Option<JoinTable>>>;
/// What a server answers a session with: the client's `Open` and the data connections.
type Served = Result<(Open, Vec<Link>), EngineError>;

/// Serves one session on `listener` like the daemon: every connection on a thread of
/// its own from the moment it is accepted (data connections may arrive before the
/// session is opened). Returns the `Open` and the data connections in stream order.
///
/// It closes the first `refuse` data connections at once (as a daemon at its limit of
/// unauthenticated connections per address does) and sends `Accept` only once it has:
/// those are the ones the client dialled ahead. With `wrong_key` its join table checks
/// `Join`s against another key than the client's.
fn serve_refusing(
    listener: TcpListener,
    token: Option<Token>,
    streams: u16,
    tls: ServerTls,
    refuse: usize,
    wrong_key: bool,
) -> Served {
    let table: Table = Arc::new(Mutex::new(None));
    let (tx, rx) = crossbeam_channel::unbounded();
    let (refused_tx, refused) = crossbeam_channel::unbounded();
    let (s, _) = listener.accept().expect("the control connection");
    let tls = Arc::new(tls);
    let (t, d) = (Arc::clone(&table), Arc::clone(&tls));
    std::thread::spawn(move || {
        let mut conns = listener.incoming();
        for conn in conns.by_ref().take(refuse) {
            drop(conn);
            let _ = refused_tx.send(());
        }
        for conn in conns.take(usize::from(streams)) {
            let (t, d, tx) = (Arc::clone(&t), Arc::clone(&d), tx.clone());
            let conn = conn.expect("a data connection");
            std::thread::spawn(move || {
                let _ = tx.send(join_one(conn, &t, &d));
            });
        }
    });
    let (mut reader, mut writer) = accept::incoming(s, &tls)?;
    let hello = accept::read_first(&mut reader, &mut writer)?.expect("a first frame");
    let est = accept::server_handshake(hello, &mut reader, &mut writer, token)?;
    let open = accept::read_open(&mut reader)?.expect("an Open");
    for _ in 0..refuse {
        let wait = std::time::Duration::from_secs(30);
        refused
            .recv_timeout(wait)
            .expect("a connection dialled ahead");
    }
    let accept = accept::new_accept(streams, MIN_CHUNK_BYTES)?;
    let mut key = est.join_key(&accept.session_secret);
    if wrong_key {
        key[0] ^= 1;
    }
    *table.lock().expect("the table") = Some(JoinTable::new(&accept, key));
    accept::send_accept(
        &mut writer,
        &est,
        &accept,
        sluice_wire::Addresses::default(),
    )?;
    let mut conns: Vec<Option<Link>> = (0..streams).map(|_| None).collect();
    for _ in 0..streams {
        let (i, link) = rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("a join's outcome")?;
        assert!(conns[usize::from(i)].replace(link).is_none(), "{i} twice");
    }
    Ok((open, conns.into_iter().flatten().collect()))
}

/// One data connection: TLS, its `Join` answered against the session's table.
fn join_one(
    conn: std::net::TcpStream,
    table: &Table,
    tls: &ServerTls,
) -> Result<(u16, Link), EngineError> {
    let (mut reader, mut writer) = accept::incoming(conn, tls)?;
    let Some(Frame::Join(join)) = reader.first("joining")? else {
        return Err(EngineError::Aborted("expected Join".into()));
    };
    let mut out = Vec::new();
    let joined = {
        let mut t = table.lock().expect("the table");
        let t = t.as_mut().expect("the session is open before any Join");
        t.handle(&join, &mut out)
    };
    accept::finish_join(joined, &out, reader, &mut writer)
}

fn open_frame(streams: u16) -> Open {
    Open {
        direction: Direction::Push,
        path: "x".into(),
        options: OpenOptions {
            streams,
            ..OpenOptions::default()
        },
    }
}

/// A TLS server with a token and a client pinned to it, through a [`FlightProxy`]:
/// (the proxy, the client's result, the server's result).
fn open_through_proxy(
    client_token: &[u8],
    streams: u16,
    bound: bool,
) -> (
    FlightProxy,
    Result<super::connect::Opened, EngineError>,
    Served,
) {
    open_through_proxy_keyed(client_token, streams, bound, false)
}

/// [`open_through_proxy`], the server's join table keyed wrongly when `wrong_key`.
fn open_through_proxy_keyed(
    client_token: &[u8],
    streams: u16,
    bound: bool,
    wrong_key: bool,
) -> (
    FlightProxy,
    Result<super::connect::Opened, EngineError>,
    Served,
) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let proxy = FlightProxy::start(listener.local_addr().expect("addr"));
    let mut server = ServerTls::ephemeral(Encrypt::Always).expect("an identity");
    if !bound {
        server = server.unbound();
    }
    let client = ClientTls {
        encrypt: Encrypt::Always,
        trust: Trust::Pinned(server.fingerprint()),
    };
    let token = Token::new(b"secret".to_vec()).expect("a token");
    let served = std::thread::spawn(move || {
        serve_refusing(listener, Some(token), streams, server, 0, wrong_key)
    });
    let theirs = Token::new(client_token.to_vec()).expect("a token");
    let addr = proxy.addr().to_string();
    let opened = open_session(&addr, Some(theirs), open_frame(streams), &client);
    let served = served.join().expect("the server thread");
    (proxy, opened, served)
}

/// The data connections are connected right after the control connection and secured
/// while its handshake runs; the TLS session binds the server's nonce, so `Hello`,
/// `AuthProof` and `Open` go in the client's first flight after TLS; every `Join` goes
/// as soon as `Accept` names the key, and a source does not wait for `Joined`: 5
/// flights until the session is open and chunks may go (ClientHello; the server's
/// flight; Finished + Hello + AuthProof + Open + the data ClientHellos; Welcome +
/// AuthOk + Accept + the data servers' flights; the data Finished + Join, with the
/// first chunks behind). Unbound, with the data connections dialled after the control
/// connection's TLS and `Joined` waited for, it took 8; one step after the other, 12.
/// With the TCP handshakes, which the proxy does not see and which now all run at
/// once, a push's chunks leave 3 round trips after the first SYN.
#[test]
fn a_session_opens_in_five_flights_through_tls_with_a_token() {
    let (proxy, opened, served) = open_through_proxy(b"secret", 3, true);
    let flights = proxy.flights();
    let mut opened = opened.expect("opened");
    let (open, mut data) = served.expect("served");
    assert_eq!(open.path, "x");
    assert_eq!((opened.data.len(), data.len()), (3, 3));
    assert!(opened.data.iter().all(Link::is_tls));
    eprintln!("opening took {flights} flights");
    assert!(
        flights <= 5,
        "{flights} one-way trips until the session is open"
    );
    // Each stream carries bytes to its own index on the other side.
    for ((c, s), mark) in opened.data.iter_mut().zip(data.iter_mut()).zip(0u8..) {
        c.write_all(&[mark; 2]).expect("write");
        let mut got = [0u8; 2];
        s.read_exact(&mut got).expect("read");
        assert_eq!(got, [mark; 2]);
    }
}

/// A daemon that does not select the bound handshake (an older one, or TLS without
/// ALPN) gets the unbound one: `Hello` alone, then `AuthProof` and `Open` after
/// `Welcome`, 7 flights; the session opens all the same.
#[test]
fn a_daemon_without_the_bound_handshake_is_served_unbound() {
    let (proxy, opened, served) = open_through_proxy(b"secret", 2, false);
    let flights = proxy.flights();
    let opened = opened.expect("opened");
    let (open, data) = served.expect("served");
    assert_eq!(open.path, "x");
    assert_eq!((opened.data.len(), data.len()), (2, 2));
    assert!(
        flights == 7,
        "{flights} one-way trips: the unbound handshake takes one round trip more"
    );
}

/// A wrong proof with `Open` pipelined behind it: the server refuses the proof and
/// never reads the `Open`; the user sees the same refusal as without pipelining.
#[test]
fn a_pipelined_open_behind_a_wrong_proof_is_refused_as_before() {
    let (_proxy, opened, served) = open_through_proxy(b"wrong", 1, true);
    let err = opened.expect_err("refused");
    assert!(
        matches!(
            err,
            EngineError::HandshakeRefused {
                code: ErrorCode::AuthFailed,
                ..
            }
        ),
        "{err:?}"
    );
    let served = served.expect_err("the server refused");
    assert!(
        matches!(served, EngineError::Handshake { .. }),
        "{served:?}"
    );
}

/// Data connections dialled ahead that the server closed (refused) are dialled again
/// once the session is open: the session still gets every stream.
#[test]
fn data_connections_refused_while_dialled_ahead_are_dialled_again() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let server = ServerTls::ephemeral(Encrypt::Always).expect("an identity");
    let client = ClientTls {
        encrypt: Encrypt::Always,
        trust: Trust::Pinned(server.fingerprint()),
    };
    let token = Token::new(b"secret".to_vec()).expect("a token");
    let theirs = token.clone();
    // Both of the client's connections dialled ahead are closed unanswered.
    let served =
        std::thread::spawn(move || serve_refusing(listener, Some(token), 2, server, 2, false));
    let opened = open_session(&addr, Some(theirs), open_frame(2), &client).expect("opened");
    let (_, data) = served.join().expect("the server thread").expect("served");
    assert_eq!((opened.data.len(), data.len()), (2, 2));
}

fn chunk_of(payload: &[u8]) -> ChunkHeader {
    let len = u32::try_from(payload.len()).expect("a chunk's length");
    ChunkHeader {
        file_id: 1,
        offset: 0,
        raw_len: len,
        wire_len: len,
        flags: sluice_wire::ChunkFlags::EMPTY,
        checksum: sluice_wire::chunk_checksum(payload),
        segments: 0,
    }
}

/// A source's data connections carry their first chunk right behind `Join`: the
/// server reads the `Join` exactly, so the chunk arrives whole behind it, and the
/// sender reads and checks `Joined` after its write.
#[test]
fn a_chunk_sent_right_behind_join_arrives_whole() {
    let (_proxy, opened, served) = open_through_proxy(b"secret", 2, true);
    let opened = opened.expect("opened");
    assert!(opened
        .capabilities
        .contains(Capabilities::CHUNKS_AFTER_JOIN));
    assert!(
        opened.joining.iter().all(Option::is_some),
        "no Joined waited for"
    );
    let payload: Vec<u8> = (0..1_000_003u32).map(|i| (i * 13 % 251) as u8).collect();
    let (_, data) = served.expect("served");
    let receivers: Vec<_> = data
        .into_iter()
        .map(|link| {
            std::thread::spawn(move || {
                let mut rx = ChunkReceiver::new(link, 4 << 20);
                let DataEvent::Chunk(h) = rx.next_event().expect("an event") else {
                    panic!("not a chunk")
                };
                let mut slot = vec![0u8; h.wire_len as usize];
                rx.payload(&mut slot).expect("the payload");
                slot
            })
        })
        .collect();
    for (link, join) in opened.data.into_iter().zip(opened.joining) {
        let mut tx = ChunkSender::new(link).joining(join);
        tx.send(&chunk_of(&payload), &[] as &[Segment], &payload)
            .expect("sent, and Joined checked");
        tx.shutdown();
    }
    for r in receivers {
        assert_eq!(r.join().expect("a receiver"), payload);
    }
}

/// A `Join` the server refuses, with a chunk already sent behind it: the sender
/// reports the server's refusal, not a broken pipe.
#[test]
fn a_refused_join_behind_which_a_chunk_went_reports_the_refusal() {
    let (_proxy, opened, served) = open_through_proxy_keyed(b"secret", 1, true, true);
    let opened = opened.expect("opened: its Join is not waited for");
    let payload = vec![7u8; 64 << 10];
    let (link, join) = opened
        .data
        .into_iter()
        .zip(opened.joining)
        .next()
        .expect("one data connection");
    let mut tx = ChunkSender::new(link).joining(join);
    let err = tx
        .send(&chunk_of(&payload), &[] as &[Segment], &payload)
        .expect_err("refused");
    assert!(
        matches!(
            err,
            EngineError::Remote {
                code: ErrorCode::JoinRejected,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(served.is_err(), "the server saw its join refused");
}
