//! The network layer's two sides against each other over loopback: a client opening a
//! session with [`open_session`] and a one-session server built from [`accept`]'s
//! functions, as the stream receiver builds one.

use super::accept;
use super::connect::open_session;
use super::tls::{ClientTls, Encrypt, Link, ServerTls, Trust};
use crate::error::EngineError;
use sluice_wire::{
    Codec, Direction, ErrorCode, Frame, JoinTable, Open, OpenOptions, Token, MIN_CHUNK_BYTES,
};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};

/// Serves one session on `listener`: handshake, `Open`, `Accept` with `streams`, then
/// the joins; returns what the client opened with and the data connections in order.
fn serve_one(
    listener: &TcpListener,
    token: Option<Token>,
    streams: u16,
    tls: &ServerTls,
) -> Result<(Open, Vec<Link>), EngineError> {
    let (s, _) = listener.accept().expect("the control connection");
    let (mut reader, mut writer) = accept::incoming(s, tls)?;
    let hello = accept::read_first(&mut reader, &mut writer)?.expect("a first frame");
    assert!(matches!(hello, Frame::Hello(_)), "{hello:?}");
    accept::admit(&reader, &mut writer, tls)?;
    let encrypted = reader.is_tls();
    let est = accept::server_handshake(hello, &mut reader, &mut writer, token)?;
    let open = accept::read_open(&mut reader)?.expect("an Open");
    let accept = accept::new_accept(streams, MIN_CHUNK_BYTES)?;
    let mut table = JoinTable::new(&accept, est.join_key(&accept.session_secret));
    accept::send_accept(
        &mut writer,
        &est,
        &accept,
        sluice_wire::Addresses::default(),
    )?;
    let mut conns: Vec<Option<Link>> = (0..streams).map(|_| None).collect();
    for _ in 0..streams {
        let (i, s) = accept::accept_join(listener, &mut table, tls, encrypted)?;
        assert!(
            conns[usize::from(i)].replace(s).is_none(),
            "stream {i} twice"
        );
    }
    Ok((open, conns.into_iter().flatten().collect()))
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

fn clear() -> ClientTls {
    ClientTls {
        encrypt: Encrypt::Never,
        ..ClientTls::default()
    }
}

fn server_tls(encrypt: Encrypt) -> ServerTls {
    ServerTls::ephemeral(encrypt).expect("an identity")
}

/// Opens a 3-stream session with `client` against a server with `server`; checks that
/// each stream carries bytes to its own index and that every connection is encrypted
/// or clear, as `tls` says.
fn open_and_carry(client: &ClientTls, server: ServerTls, tls: bool) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let token = Token::new(b"secret".to_vec()).expect("a token");
    let server_token = token.clone();
    let server = std::thread::spawn(move || serve_one(&listener, Some(server_token), 3, &server));
    let opened = open_session(&addr, Some(token), open_frame(3), client).expect("opened");
    let (open, mut served) = server.join().expect("server thread").expect("served");
    assert_eq!(open.path, "x");
    assert_eq!(opened.accept.streams(), 3);
    assert_eq!((opened.data.len(), served.len()), (3, 3));
    assert_eq!(opened.fingerprint.is_some(), tls);
    assert!(opened
        .data
        .iter()
        .chain(served.iter())
        .all(|l| l.is_tls() == tls));
    // Stream i of the client is stream i of the server.
    for ((mut c, s), mark) in opened.data.into_iter().zip(served.iter_mut()).zip(0u8..) {
        c.write_all(&[mark; 4]).expect("write");
        let mut got = [0u8; 4];
        s.read_exact(&mut got).expect("read");
        assert_eq!(got, [mark; 4]);
    }
}

#[test]
fn a_client_and_a_server_open_a_session_and_its_streams_carry_bytes() {
    open_and_carry(&clear(), server_tls(Encrypt::Auto), false);
}

#[test]
fn an_encrypted_session_is_tls_on_every_connection() {
    let server = server_tls(Encrypt::Always);
    let client = ClientTls {
        encrypt: Encrypt::Always,
        trust: Trust::Pinned(server.fingerprint()),
    };
    open_and_carry(&client, server, true);
}

#[test]
fn clear_text_to_a_server_that_requires_tls_names_both_settings() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let tls = server_tls(Encrypt::Always);
    let server = std::thread::spawn(move || serve_one(&listener, None, 1, &tls));
    let err = open_session(&addr, None, open_frame(1), &clear()).expect_err("refused");
    assert_eq!(err.code(), ErrorCode::EncryptionRequired);
    assert_eq!(
        err.to_string(),
        format!("{addr} requires encryption (daemon: --encrypt always, TLS from every peer; this client: --encrypt never)")
    );
    let served = server.join().expect("server thread");
    assert!(
        matches!(served, Err(EngineError::Refused { .. })),
        "{served:?}"
    );
}

#[test]
fn a_pinned_fingerprint_that_does_not_match_refuses_the_server() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let tls = server_tls(Encrypt::Always);
    let other = server_tls(Encrypt::Always).fingerprint();
    let server = std::thread::spawn(move || serve_one(&listener, None, 1, &tls));
    let client = ClientTls {
        encrypt: Encrypt::Always,
        trust: Trust::Pinned(other),
    };
    let err = open_session(&addr, None, open_frame(1), &client).expect_err("refused");
    assert!(
        err.to_string().contains(&format!("not the pinned {other}")),
        "{err}"
    );
    assert!(server.join().expect("server thread").is_err());
}

#[test]
fn a_wrong_token_is_a_refusal_with_its_code() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let server_token = Token::new(b"right".to_vec()).expect("a token");
    let tls = server_tls(Encrypt::Auto);
    let server = std::thread::spawn(move || serve_one(&listener, Some(server_token), 1, &tls));
    let wrong = Token::new(b"wrong".to_vec()).expect("a token");
    let err = open_session(&addr, Some(wrong), open_frame(1), &clear()).expect_err("refused");
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
    assert_eq!(err.recovery(), sluice_wire::Recovery::Abort);
    let served = server.join().expect("server thread");
    assert!(
        matches!(served, Err(EngineError::Handshake { .. })),
        "{served:?}"
    );
}

#[test]
fn a_connection_that_does_not_join_is_answered_and_refused() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let accept = accept::new_accept(1, MIN_CHUNK_BYTES).expect("accept");
    let mut table = JoinTable::new(&accept, [7; 32]);
    let client = std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).expect("connect");
        let mut buf = Vec::new();
        Frame::Open(open_frame(1)).encode(&mut buf);
        s.write_all(&buf).expect("write");
        let mut answer = Vec::new();
        let _ = s.read_to_end(&mut answer);
        answer
    });
    let tls = server_tls(Encrypt::Auto);
    let err = accept::accept_join(&listener, &mut table, &tls, false).expect_err("not a join");
    assert!(matches!(err, EngineError::Handshake { .. }), "{err:?}");
    let answer = client.join().expect("client thread");
    let (frame, _) = <Frame as Codec>::decode(&answer).expect("an Error frame");
    assert!(
        matches!(&frame, Frame::Error(e) if e.code == ErrorCode::BadFrame),
        "{frame:?}"
    );
}

/// A first frame whose header announces more than a `Hello` is refused from its
/// header alone: no buffer for its body, no wait for it, and an `Error` back.
#[test]
fn a_first_frame_longer_than_a_hello_is_refused_before_its_body() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let client = std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).expect("connect");
        // A Manifest header announcing a 1 MiB body, and none of the body.
        let mut head = vec![0x30, 0];
        head.extend_from_slice(&(1u32 << 20).to_le_bytes());
        s.write_all(&head).expect("write");
        let mut answer = Vec::new();
        let _ = s.read_to_end(&mut answer);
        answer
    });
    let (s, _) = listener.accept().expect("accept");
    let tls = server_tls(Encrypt::Auto);
    let (mut reader, mut writer) = accept::incoming(s, &tls).expect("incoming");
    // Reading the body would wait out the read timeout and fail with another error.
    let err = accept::read_first(&mut reader, &mut writer).expect_err("refused");
    assert!(
        err.to_string().contains("Manifest frame of 1048582 bytes"),
        "{err}"
    );
    drop((reader, writer));
    let answer = client.join().expect("client thread");
    let (frame, _) = <Frame as Codec>::decode(&answer).expect("an Error frame");
    assert!(matches!(&frame, Frame::Error(_)), "{frame:?}");
}

#[test]
fn a_clear_join_to_an_encrypted_session_is_refused() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let accept = accept::new_accept(1, MIN_CHUNK_BYTES).expect("accept");
    let key = [7; 32];
    let mut table = JoinTable::new(&accept, key);
    let client = std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).expect("connect");
        let join = sluice_wire::ClientJoin::new(&accept, &key, 0).expect("a join");
        let mut buf = Vec::new();
        join.start(&mut buf);
        s.write_all(&buf).expect("write");
        let mut answer = Vec::new();
        let _ = s.read_to_end(&mut answer);
        answer
    });
    // The server's policy admits clear text from loopback, but not into a TLS session.
    let tls = server_tls(Encrypt::Auto);
    let err = accept::accept_join(&listener, &mut table, &tls, true).expect_err("clear join");
    assert_eq!(err.code(), ErrorCode::EncryptionRequired, "{err:?}");
    let answer = client.join().expect("client thread");
    let (frame, _) = <Frame as Codec>::decode(&answer).expect("an Error frame");
    assert!(
        matches!(&frame, Frame::Error(e) if e.code == ErrorCode::EncryptionRequired),
        "{frame:?}"
    );
}

/// The id of this process's thread named `name` that is not in `seen`, found through
/// /proc/self/task.
fn new_thread(name: &str, seen: &[i32]) -> Option<i32> {
    std::fs::read_dir("/proc/self/task")
        .ok()?
        .flatten()
        .find_map(|task| {
            let tid: i32 = task.file_name().to_str()?.parse().ok()?;
            let comm = std::fs::read_to_string(task.path().join("comm")).ok()?;
            (comm.trim_end() == name && !seen.contains(&tid)).then_some(tid)
        })
}

#[test]
fn control_frames_pass_through_the_control_threads_which_run_batched() {
    use super::control::{spawn_reader, spawn_writer, ControlEvent};
    use super::transport::FrameReader;
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let a = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
    let (b, _) = listener.accept().expect("accept");
    // Control threads of tests running beside this one: not the ones checked here.
    let before: Vec<i32> = std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .flatten()
        .filter_map(|t| t.file_name().to_str()?.parse().ok())
        .collect();
    let (tx, writer) = spawn_writer(Link::plain(a)).expect("writer");
    let events = spawn_reader(FrameReader::new(Link::plain(b))).expect("reader");
    let failed = sluice_wire::FileFailed::new(9, ErrorCode::Io, "gone");
    tx.send(Frame::FileFailed(failed.clone()));
    match events.recv().expect("an event") {
        ControlEvent::Frame(Frame::FileFailed(f)) => assert_eq!(f, failed),
        other => panic!("{other:?}"),
    }
    for name in ["control-tx", "control-rx"] {
        let tid = new_thread(name, &before).expect(name);
        let policy = sluice_affinity::task_policy(tid).expect("its policy");
        assert_eq!(policy, libc::SCHED_BATCH, "{name} (thread {tid})");
    }
    drop(tx);
    writer
        .join()
        .expect("writer thread")
        .expect("all frames sent");
    assert!(matches!(events.recv(), Ok(ControlEvent::Closed)));
}
