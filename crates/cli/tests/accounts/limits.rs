//! Limits: unauthenticated connections per address, sessions at once, the handshake
//! deadline; each refusal answered `Busy` and audited.

use super::netns::{big_file, daemon_for, until, wait, Netns};
use super::*;
use sluice_wire::{ClientConfig, ClientHandshake, Codec, ErrorCode, Frame, Token};

/// The bytes of a client's `Hello`.
pub fn hello_bytes() -> Vec<u8> {
    let mut c = ClientHandshake::new(ClientConfig::new(Token::new("x").ok()), [7; 32]);
    let mut out = Vec::new();
    c.start(&mut out);
    out
}

/// Everything the daemon sends on `sock` until it closes, decoded as frames.
pub fn frames_until_close(sock: &mut TcpStream) -> Vec<Frame> {
    sock.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut bytes = Vec::new();
    let _ = sock.read_to_end(&mut bytes);
    let mut frames = Vec::new();
    let mut at = 0;
    while let Ok((f, used)) = Frame::decode(&bytes[at..]) {
        frames.push(f);
        at += used;
    }
    frames
}

fn busy_message(frames: &[Frame]) -> Option<String> {
    frames.iter().find_map(|f| match f {
        Frame::Error(e) if e.code == ErrorCode::Busy => Some(e.message.clone()),
        _ => None,
    })
}

#[test]
fn unauthenticated_connections_per_address_are_bounded_and_refusals_audited() {
    let site = Site::new();
    let root = site.root("a");
    let audit = site.path("audit.jsonl");
    let d = Daemon::start_with(
        &root,
        &["--max-per-address", "3", "--audit-log", s(&audit)],
        &[],
    );
    let addr: SocketAddr = d.addr.parse().unwrap();
    let mut held: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(addr).unwrap()).collect();
    // The accept thread counts them in order: the fourth is refused.
    let mut fourth = TcpStream::connect(addr).unwrap();
    let msg = busy_message(&frames_until_close(&mut fourth)).expect("a Busy frame");
    assert!(
        msg.contains("127.0.0.1") && msg.contains("at most 3"),
        "{msg}"
    );
    // An authenticated connection does not count: with one slot free, a copy works
    // (its control connection holds the slot only until it has authenticated, its data
    // connection until it has joined; a client joins up to 8 at once, so one data
    // connection here, where the limit is 3).
    let last = held.pop().unwrap();
    drop(last);
    let src = site.path("f.txt");
    std::fs::write(&src, b"f").unwrap();
    until(Duration::from_secs(10), "the slot is free", || {
        let out = cp(&["--streams", "1", s(&src), &d.url("f.txt")], None);
        out.code == Some(0) || !out.stderr.contains("unauthenticated")
    });
    assert_eq!(std::fs::read(root.join("f.txt")).unwrap(), b"f");
    drop(held);
    let lines = audit_lines(&audit);
    assert!(
        lines
            .iter()
            .any(|l| l["result"] == "Busy" && l["identity"].is_null()),
        "{lines:?}"
    );
}

#[test]
fn a_slowloris_handshake_is_cut_at_the_deadline() {
    let site = Site::new();
    let root = site.root("a");
    let audit = site.path("audit.jsonl");
    let d = Daemon::start_with(
        &root,
        &["--handshake-timeout", "2", "--audit-log", s(&audit)],
        &[],
    );
    let mut sock = TcpStream::connect(d.addr.as_str()).unwrap();
    // One byte a second: each read returns well within the 30 s per-read timeout, so
    // only a total deadline ends it, before the Hello is complete.
    let hello = hello_bytes();
    assert!(hello.len() > 10);
    let started = Instant::now();
    let mut sent = 0;
    for b in &hello {
        if sock.write_all(&[*b]).is_err() {
            break;
        }
        sent += 1;
        std::thread::sleep(Duration::from_millis(500));
        let mut probe = [0u8; 1];
        sock.set_nonblocking(true).unwrap();
        let closed = matches!(sock.read(&mut probe), Ok(0));
        sock.set_nonblocking(false).unwrap();
        if closed {
            break;
        }
    }
    assert!(
        sent < hello.len(),
        "the whole Hello went through ({sent} bytes)"
    );
    eprintln!("cut after {sent} bytes, {:?}", started.elapsed());
    until(Duration::from_secs(10), "the audit line", || {
        audit_lines(&audit).iter().any(|l| l["result"] == "Timeout")
    });
}

#[test]
fn sessions_beyond_max_sessions_are_refused_busy() {
    let Some(ns) = Netns::new("ses", 14, "20mbit") else {
        return;
    };
    let site = Site::new();
    site.root("a");
    let accounts = site.accounts(&entry("alice", "t-secret", "a", "\"read\", \"write\"", ""));
    let audit = site.path("audit.jsonl");
    let d = daemon_for(
        &ns,
        &site.path("a"),
        &accounts,
        &["--max-sessions", "1", "--audit-log", s(&audit)],
    );
    let tok = site.token("t", "t-secret");
    let big = site.path("big.bin");
    big_file(&big, 16);
    let mut push = ns.spawn_cp(&[
        "--token-file",
        s(&tok),
        s(&big),
        &format!("sluice://{}/big.bin", d.addr),
    ]);
    until(Duration::from_secs(30), "the push starts", || {
        d.log().contains("data connection")
    });
    let small = site.path("s.txt");
    std::fs::write(&small, b"s").unwrap();
    let out = ns.cp(&[
        "--token-file",
        s(&tok),
        s(&small),
        &format!("sluice://{}/s.txt", d.addr),
    ]);
    assert_refused(&out, "1 sessions");
    assert!(out.stderr.contains("Busy"), "{out:?}");
    let (code, err) = wait(&mut push, Duration::from_secs(90));
    assert_eq!(code, Some(0), "{err}");
    let lines = audit_lines(&audit);
    let busy = lines
        .iter()
        .find(|l| l["result"] == "Busy")
        .expect("an audited refusal");
    assert_eq!(busy["identity"], "alice");
    assert_eq!(busy["op"], "push");
    assert!(
        busy["peer"].as_str().unwrap().starts_with(&ns.client_ip()),
        "{busy}"
    );
}
