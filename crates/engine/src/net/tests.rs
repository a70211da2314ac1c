//! The network layer's two sides against each other over loopback: a client opening a
//! session with [`open_session`] and a one-session server built from [`accept`]'s
//! functions, as the stream receiver builds one.

use super::accept;
use super::connect::open_session;
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
) -> Result<(Open, Vec<TcpStream>), EngineError> {
    let (s, _) = listener.accept().expect("the control connection");
    let (mut reader, mut writer) = accept::incoming(s)?;
    let hello = accept::read_first(&mut reader, &mut writer)?.expect("a first frame");
    assert!(matches!(hello, Frame::Hello(_)), "{hello:?}");
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
    let mut conns: Vec<Option<TcpStream>> = (0..streams).map(|_| None).collect();
    for _ in 0..streams {
        let (i, s) = accept::accept_join(listener, &mut table)?;
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

#[test]
fn a_client_and_a_server_open_a_session_and_its_streams_carry_bytes() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let token = Token::new(b"secret".to_vec()).expect("a token");
    let server_token = token.clone();
    let server = std::thread::spawn(move || serve_one(&listener, Some(server_token), 3));
    let opened = open_session(&addr, Some(token), open_frame(3)).expect("opened");
    let (open, mut served) = server.join().expect("server thread").expect("served");
    assert_eq!(open.path, "x");
    assert_eq!(opened.accept.streams(), 3);
    assert_eq!((opened.data.len(), served.len()), (3, 3));
    // Stream i of the client is stream i of the server.
    for ((mut c, s), mark) in opened.data.into_iter().zip(served.iter_mut()).zip(0u8..) {
        c.write_all(&[mark; 4]).expect("write");
        let mut got = [0u8; 4];
        s.read_exact(&mut got).expect("read");
        assert_eq!(got, [mark; 4]);
    }
}

#[test]
fn a_wrong_token_is_a_refusal_with_its_code() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let server_token = Token::new(b"right".to_vec()).expect("a token");
    let server = std::thread::spawn(move || serve_one(&listener, Some(server_token), 1));
    let wrong = Token::new(b"wrong".to_vec()).expect("a token");
    let err = open_session(&addr, Some(wrong), open_frame(1)).expect_err("refused");
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
    let err = accept::accept_join(&listener, &mut table).expect_err("not a join");
    assert!(matches!(err, EngineError::Handshake { .. }), "{err:?}");
    let answer = client.join().expect("client thread");
    let (frame, _) = <Frame as Codec>::decode(&answer).expect("an Error frame");
    assert!(
        matches!(&frame, Frame::Error(e) if e.code == ErrorCode::BadFrame),
        "{frame:?}"
    );
}
