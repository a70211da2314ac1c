//! Handshake and join state machines over an in-memory pair: bytes move between the two
//! sides through `FrameDecoder`s, in pieces of a chosen size, with no sockets.

// Helpers outside #[test] fns too: a panic in a test is a failed assertion.
#![allow(clippy::unwrap_used)]

use sluice_wire::*;

/// What one side ended with.
type Outcome = Option<Result<Established, HandshakeError>>;

/// Client and server wired back to back.
struct Pair {
    client: ClientHandshake,
    server: ServerHandshake,
    to_server: Vec<u8>,
    to_client: Vec<u8>,
    server_in: FrameDecoder,
    client_in: FrameDecoder,
    client_out: Outcome,
    server_out: Outcome,
    /// Bytes moved per step; 1 exercises every truncation point.
    piece: usize,
    /// The server nonce a bound client takes from TLS (`start_bound`), if bound.
    bound: Option<[u8; 32]>,
}

impl Pair {
    fn new(client_token: Option<&[u8]>, server_token: Option<&[u8]>) -> Pair {
        let tok = |t: Option<&[u8]>| t.map(|t| Token::new(t.to_vec()).unwrap());
        Pair {
            client: ClientHandshake::new(ClientConfig::new(tok(client_token)), [0xC1; 32]),
            server: ServerHandshake::new(ServerConfig::new(tok(server_token)), [0x5E; 32]),
            to_server: Vec::new(),
            to_client: Vec::new(),
            server_in: FrameDecoder::new(),
            client_in: FrameDecoder::new(),
            client_out: None,
            server_out: None,
            piece: usize::MAX,
            bound: None,
        }
    }

    /// A pair whose client starts bound to the server's nonce, as over TLS with
    /// [`BOUND_ALPN`].
    fn bound(client_token: Option<&[u8]>, server_token: Option<&[u8]>) -> Pair {
        let mut p = Pair::new(client_token, server_token);
        p.bound = Some([0x5E; 32]);
        p
    }

    /// Runs until neither side has anything to say (bounded, like quinn's `drive_bounded`).
    fn drive(&mut self) {
        match self.bound {
            Some(nonce) => self.client.start_bound(nonce, &mut self.to_server),
            None => self.client.start(&mut self.to_server),
        }
        for _ in 0..10_000 {
            let moved_s = deliver(&mut self.to_server, &mut self.server_in, self.piece);
            for f in self.server_in.by_ref() {
                let r = self.server.handle(&f.unwrap(), &mut self.to_client);
                record(&mut self.server_out, r);
            }
            let moved_c = deliver(&mut self.to_client, &mut self.client_in, self.piece);
            for f in self.client_in.by_ref() {
                let r = self.client.handle(&f.unwrap(), &mut self.to_server);
                record(&mut self.client_out, r);
            }
            if moved_s == 0 && moved_c == 0 {
                return;
            }
        }
        panic!("handshake did not settle");
    }

    fn both_done(&self) -> (Established, Established) {
        match (&self.client_out, &self.server_out) {
            (Some(Ok(c)), Some(Ok(s))) => (c.clone(), s.clone()),
            other => panic!("not both done: {other:?}"),
        }
    }
}

fn deliver(from: &mut Vec<u8>, to: &mut FrameDecoder, piece: usize) -> usize {
    let n = to.feed(&from[..from.len().min(piece)]);
    from.drain(..n);
    n
}

fn record(slot: &mut Outcome, r: Result<HandshakeStatus, HandshakeError>) {
    match r {
        Ok(HandshakeStatus::InProgress) => {}
        Ok(HandshakeStatus::Done(e)) => *slot = Some(Ok(e)),
        Err(e) => {
            if slot.is_none() {
                *slot = Some(Err(e));
            }
        }
    }
}

fn decode_all(bytes: &[u8]) -> Vec<Frame> {
    let mut d = FrameDecoder::new();
    d.feed(bytes);
    d.by_ref().map(Result::unwrap).collect()
}

#[test]
fn success_without_token() {
    let mut p = Pair::new(None, None);
    p.drive();
    let (c, s) = p.both_done();
    assert_eq!(c, s);
    assert!(!c.authenticated());
    assert_eq!(c.version, PROTOCOL_VERSION);
    assert_eq!(c.capabilities, Capabilities::ALL);
    // Without a token the join key is the session secret itself.
    assert_eq!(c.join_key(&[3; 32]), [3; 32]);
}

#[test]
fn success_with_token_in_every_piece_size() {
    for piece in [1, 2, 5, 6, 7, 33, 64, usize::MAX] {
        let mut p = Pair::new(Some(b"s3cret"), Some(b"s3cret"));
        p.piece = piece;
        p.drive();
        let (c, s) = p.both_done();
        assert!(c.authenticated() && s.authenticated());
        assert_eq!(c, s);
        assert_ne!(c.join_key(&[3; 32]), [3; 32]);
        assert!(p.client_in.finish().is_ok() && p.server_in.finish().is_ok());
    }
}

#[test]
fn capabilities_are_intersected() {
    let mut p = Pair::new(None, None);
    p.client = ClientHandshake::new(
        ClientConfig {
            capabilities: Capabilities::RESUME
                | Capabilities::COMPRESS_LZ4
                | Capabilities::from_bits_retain(1 << 40),
            token: None,
        },
        [1; 32],
    );
    p.server = ServerHandshake::new(
        ServerConfig {
            capabilities: Capabilities::RESUME | Capabilities::PACKED,
            token: None,
        },
        [2; 32],
    );
    p.drive();
    assert_eq!(p.both_done().0.capabilities, Capabilities::RESUME);
}

#[test]
fn wrong_client_token_is_refused_by_server() {
    refused_for_its_token(Pair::new(Some(b"guess"), Some(b"s3cret")));
}

/// Drives `p`, whose client has the wrong token: the server refuses the proof, and the
/// client hears `AuthFailed`.
fn refused_for_its_token(mut p: Pair) {
    p.drive();
    assert_eq!(p.server_out, Some(Err(HandshakeError::ClientAuthFailed)));
    match &p.client_out {
        Some(Err(HandshakeError::Peer { code, .. })) => assert_eq!(*code, ErrorCode::AuthFailed),
        other => panic!("{other:?}"),
    }
}

#[test]
fn impostor_server_is_refused_by_client() {
    // A server that does not know the token: it accepts any proof and answers with a
    // made-up AuthOk.
    let mut client = ClientHandshake::new(
        ClientConfig::new(Some(Token::new(*b"s3cret").unwrap())),
        [1; 32],
    );
    let mut out = Vec::new();
    client.start(&mut out);
    let welcome = Frame::Welcome(Welcome {
        version: 1,
        capabilities: Capabilities::EMPTY,
        server_nonce: [9; 32],
        auth_required: true,
    });
    out.clear();
    assert_eq!(
        client.handle(&welcome, &mut out),
        Ok(HandshakeStatus::InProgress)
    );
    assert!(matches!(decode_all(&out)[..], [Frame::AuthProof(_)]));
    out.clear();
    // Replaying the client's own proof as the server's must fail too (distinct labels).
    let proof = auth::client_proof(&Token::new(*b"s3cret").unwrap(), &[1; 32], &[9; 32]);
    let r = client.handle(&Frame::AuthOk(AuthOk { mac: proof }), &mut out);
    assert_eq!(r, Err(HandshakeError::ServerAuthFailed));
    match &decode_all(&out)[..] {
        [Frame::Error(e)] => assert_eq!(e.code, ErrorCode::AuthFailed),
        other => panic!("{other:?}"),
    }
    // The machine is spent.
    assert_eq!(
        client.handle(&welcome, &mut out),
        Err(HandshakeError::Finished)
    );
}

#[test]
fn token_mismatch_of_presence() {
    let mut p = Pair::new(Some(b"s3cret"), None);
    p.drive();
    assert_eq!(p.client_out, Some(Err(HandshakeError::AuthDowngrade)));
    let mut p = Pair::new(None, Some(b"s3cret"));
    p.drive();
    assert_eq!(p.client_out, Some(Err(HandshakeError::TokenRequired)));
    assert!(matches!(
        p.server_out,
        Some(Err(HandshakeError::Peer {
            code: ErrorCode::AuthFailed,
            ..
        }))
    ));
}

#[test]
fn unknown_version_gets_unsupported_version() {
    let mut server = ServerHandshake::new(ServerConfig::new(None), [2; 32]);
    let hello = Frame::Hello(Hello {
        version: 7,
        min_version: 5,
        capabilities: Capabilities::ALL,
        client_nonce: [1; 32],
    });
    let mut out = Vec::new();
    let r = server.handle(&hello, &mut out);
    assert!(matches!(
        r,
        Err(HandshakeError::UnsupportedVersion {
            peer_min: 5,
            peer_max: 7,
            ..
        })
    ));
    match &decode_all(&out)[..] {
        [Frame::Error(e)] => {
            assert_eq!(e.code, ErrorCode::UnsupportedVersion);
            assert!(e.message.contains("5..=7"), "{}", e.message);
        }
        other => panic!("{other:?}"),
    }

    // A newer client that still speaks v1 gets v1.
    let mut server = ServerHandshake::new(ServerConfig::new(None), [2; 32]);
    let hello = Frame::Hello(Hello {
        version: 3,
        min_version: 1,
        capabilities: Capabilities::ALL,
        client_nonce: [1; 32],
    });
    let Ok(HandshakeStatus::Done(e)) = server.handle(&hello, &mut Vec::new()) else {
        panic!()
    };
    assert_eq!(e.version, 1);

    // And a client told to use a version it does not speak refuses.
    let mut client = ClientHandshake::new(ClientConfig::new(None), [1; 32]);
    client.start(&mut Vec::new());
    let mut out = Vec::new();
    let r = client.handle(
        &Frame::Welcome(Welcome {
            version: 9,
            capabilities: Capabilities::EMPTY,
            server_nonce: [0; 32],
            auth_required: false,
        }),
        &mut out,
    );
    assert!(matches!(r, Err(HandshakeError::UnsupportedVersion { .. })));
    assert!(
        matches!(&decode_all(&out)[..], [Frame::Error(e)] if e.code == ErrorCode::UnsupportedVersion)
    );
}

#[test]
fn server_choosing_unoffered_capabilities_is_refused() {
    let mut client = ClientHandshake::new(
        ClientConfig {
            capabilities: Capabilities::RESUME,
            token: None,
        },
        [1; 32],
    );
    client.start(&mut Vec::new());
    let r = client.handle(
        &Frame::Welcome(Welcome {
            version: 1,
            capabilities: Capabilities::PACKED,
            server_nonce: [0; 32],
            auth_required: false,
        }),
        &mut Vec::new(),
    );
    assert_eq!(
        r,
        Err(HandshakeError::BadCapabilities(Capabilities::PACKED))
    );
}

#[test]
fn truncated_hello_never_completes() {
    let mut client = ClientHandshake::new(ClientConfig::new(None), [1; 32]);
    let mut hello = Vec::new();
    client.start(&mut hello);
    for cut in 0..hello.len() {
        let mut dec = FrameDecoder::new();
        dec.feed(&hello[..cut]);
        assert!(dec.next().is_none(), "cut {cut}");
        if cut > 0 {
            assert!(matches!(
                dec.finish(),
                Err(DecodeError::TruncatedStream { .. })
            ));
        }
    }
}

#[test]
fn garbage_is_rejected_by_the_decoder() {
    for garbage in [
        &b"GET / HTTP/1.1\r\n\r\n"[..],
        b"SSH-2.0-OpenSSH_9.6\r\n",
        &[0xff; 64],
        &[0x01, 0x00, 0xff, 0xff, 0xff, 0xff],
    ] {
        let mut dec = FrameDecoder::new();
        dec.feed(garbage);
        assert!(matches!(dec.next(), Some(Err(_))), "{garbage:?}");
    }
    // A Hello with a bad magic.
    let mut bytes = Vec::new();
    Hello {
        version: 1,
        min_version: 1,
        capabilities: Capabilities::EMPTY,
        client_nonce: [0; 32],
    }
    .encode(&mut bytes);
    bytes[6] = b'X';
    assert_eq!(Frame::decode(&bytes).unwrap_err(), DecodeError::BadMagic);
}

#[test]
fn frames_out_of_order_are_refused() {
    let mut server =
        ServerHandshake::new(ServerConfig::new(Some(Token::new(*b"t").unwrap())), [2; 32]);
    let mut out = Vec::new();
    let r = server.handle(&Frame::AuthProof(AuthProof { mac: [0; 32] }), &mut out);
    assert!(matches!(
        r,
        Err(HandshakeError::UnexpectedFrame {
            frame: FrameType::AuthProof,
            ..
        })
    ));
    assert!(matches!(&decode_all(&out)[..], [Frame::Error(e)] if e.code == ErrorCode::BadFrame));

    let mut client = ClientHandshake::new(ClientConfig::new(None), [1; 32]);
    client.start(&mut Vec::new());
    let r = client.handle(&Frame::CloseAck(CloseAck), &mut Vec::new());
    assert!(matches!(
        r,
        Err(HandshakeError::UnexpectedFrame {
            frame: FrameType::CloseAck,
            ..
        })
    ));
}

// ---- join ----

fn accept() -> Accept {
    Accept {
        session_id: 0xfeed,
        session_secret: [0x77; 32],
        channels: 2,
        streams_per_channel: 3,
        chunk_bytes: DEFAULT_CHUNK_BYTES,
    }
}

/// A finished authenticated handshake's view on both sides.
fn established() -> (Established, Established) {
    let mut p = Pair::new(Some(b"s3cret"), Some(b"s3cret"));
    p.drive();
    p.both_done()
}

#[test]
fn every_stream_joins_once() {
    let (c, s) = established();
    let a = accept();
    let mut table = JoinTable::new(&a, s.join_key(&a.session_secret));
    for i in 0..a.streams() {
        let mut cj = ClientJoin::new(&a, &c.join_key(&a.session_secret), i).unwrap();
        let mut wire = Vec::new();
        cj.start(&mut wire);
        let Frame::Join(j) = Frame::decode(&wire).unwrap().0 else {
            panic!()
        };
        assert_eq!(j.channel, i / 3);
        let mut back = Vec::new();
        let joined = table.handle(&j, &mut back).unwrap();
        assert_eq!(cj.handle(&Frame::decode(&back).unwrap().0).unwrap(), joined);
        // Replay of the same Join.
        let mut back = Vec::new();
        assert_eq!(
            table.handle(&j, &mut back),
            Err(JoinError::AlreadyJoined { stream_index: i })
        );
        let err = cj.handle(&Frame::decode(&back).unwrap().0).unwrap_err();
        assert!(matches!(
            err,
            JoinError::Peer {
                code: ErrorCode::JoinRejected,
                ..
            }
        ));
    }
    assert!(table.is_complete());
}

#[test]
fn join_refusals() {
    let (c, s) = established();
    let a = accept();
    let key = c.join_key(&a.session_secret);
    let mut table = JoinTable::new(&a, s.join_key(&a.session_secret));
    let mut out = Vec::new();

    // Someone who read the session secret off the wire but has no token.
    let eavesdropper = Join::new(a.session_id, &a.session_secret, 0, 0);
    assert_eq!(
        table.handle(&eavesdropper, &mut out),
        Err(JoinError::BadMac { stream_index: 0 })
    );
    // A MAC for another stream index.
    let mut j = Join::new(a.session_id, &key, 1, 0);
    j.stream_index = 2;
    assert_eq!(
        table.handle(&j, &mut out),
        Err(JoinError::BadMac { stream_index: 2 })
    );
    // Out of range, wrong channel, wrong session.
    assert!(matches!(
        table.handle(&Join::new(a.session_id, &key, 6, 2), &mut out),
        Err(JoinError::StreamOutOfRange { .. })
    ));
    assert!(matches!(
        table.handle(&Join::new(a.session_id, &key, 4, 0), &mut out),
        Err(JoinError::WrongChannel { expected: 1, .. })
    ));
    assert!(matches!(
        table.handle(&Join::new(1, &key, 0, 0), &mut out),
        Err(JoinError::WrongSession { .. })
    ));
    assert_eq!(table.joined_count(), 0);
    // Each refusal was answered with Error{JoinRejected}.
    let frames = decode_all(&out);
    assert_eq!(frames.len(), 5);
    assert!(frames
        .iter()
        .all(|f| matches!(f, Frame::Error(e) if e.code == ErrorCode::JoinRejected)));

    assert!(ClientJoin::new(&a, &key, 6).is_err());
    let mut cj = ClientJoin::new(&a, &key, 0).unwrap();
    let wrong = Frame::Joined(Joined {
        stream_index: 1,
        channel: 0,
    });
    assert!(matches!(cj.handle(&wrong), Err(JoinError::Mismatch { .. })));
    assert!(matches!(
        cj.handle(&Frame::CloseAck(CloseAck)),
        Err(JoinError::UnexpectedFrame(FrameType::CloseAck))
    ));
}

#[test]
fn a_bound_client_proves_its_token_in_its_first_flight() {
    for piece in [1, 7, 33, usize::MAX] {
        let mut p = Pair::bound(Some(b"s3cret"), Some(b"s3cret"));
        p.piece = piece;
        p.client.start_bound([0x5E; 32], &mut p.to_server);
        let first: Vec<FrameType> = decode_all(&p.to_server)
            .iter()
            .map(Frame::frame_type)
            .collect();
        assert_eq!(first, [FrameType::Hello, FrameType::AuthProof]);
        p.drive();
        let (c, s) = p.both_done();
        assert!(c.authenticated() && s.authenticated());
        assert_eq!(c, s);
        assert_eq!(c.server_nonce, [0x5E; 32]);
    }
}

#[test]
fn a_bound_client_without_a_token_sends_hello_alone_and_finishes_at_welcome() {
    let mut p = Pair::bound(None, None);
    p.client.start_bound([0x5E; 32], &mut p.to_server);
    assert_eq!(decode_all(&p.to_server).len(), 1);
    p.drive();
    let (c, s) = p.both_done();
    assert_eq!(c, s);
    assert!(!c.authenticated());
}

#[test]
fn a_bound_client_with_the_wrong_token_is_refused_by_the_server() {
    refused_for_its_token(Pair::bound(Some(b"guess"), Some(b"s3cret")));
}

#[test]
fn a_welcome_not_bound_to_the_tls_session_is_refused() {
    // The server's nonce is its own random one, not the TLS exporter's: the proof the
    // client sent does not verify, and the client refuses the Welcome before that.
    let mut p = Pair::bound(Some(b"s3cret"), Some(b"s3cret"));
    p.bound = Some([0x77; 32]);
    p.drive();
    assert_eq!(p.client_out, Some(Err(HandshakeError::Unbound)));
    let mut p = Pair::bound(None, None);
    p.bound = Some([0x77; 32]);
    p.drive();
    assert_eq!(p.client_out, Some(Err(HandshakeError::Unbound)));
}

#[test]
fn a_bound_server_offering_less_than_it_promised_is_refused() {
    // A server that offers every promised capability but RESUME.
    let short = || {
        ServerHandshake::new(
            ServerConfig {
                capabilities: BOUND_CAPABILITIES.intersection(Capabilities::from_bits_retain(!1)),
                token: None,
            },
            [0x5E; 32],
        )
    };
    let mut p = Pair::bound(None, None);
    p.server = short();
    p.drive();
    assert!(matches!(
        p.client_out,
        Some(Err(HandshakeError::BadCapabilities(_)))
    ));
    // Unbound, the same server is fine: the client adapts its Open to the Welcome.
    let mut p = Pair::new(None, None);
    p.server = short();
    p.drive();
    p.both_done();
}
