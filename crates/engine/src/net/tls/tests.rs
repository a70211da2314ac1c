//! Links over loopback with real TLS: frames and chunks both ways, halves used from two
//! threads at once with large writes in both directions, orderly and bare closes, and
//! the client's trust (pinning, known hosts).

#![allow(clippy::cast_possible_truncation)] // test data sizes and byte patterns

use super::trust::secure_control;
use super::*;
use crate::error::EngineError;
use crate::net::transport::{ChunkReceiver, ChunkSender, DataEvent, FrameReader, FrameWriter};
use sluice_wire::{ChunkHeader, Close, CloseReason, Codec, Frame, Segment};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

const T: Duration = Duration::from_secs(30);

/// A connected (client, server) pair of TLS links, and the server's fingerprint.
fn pair() -> (Link, Link, Fingerprint) {
    let server = ServerTls::ephemeral(Encrypt::Always).expect("an identity");
    let fp = server.fingerprint();
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let accepting = std::thread::spawn(move || {
        let (s, _) = listener.accept().expect("accept");
        Link::accept_tls(s, server.config()).expect("server handshake")
    });
    let s = TcpStream::connect(&addr).expect("connect");
    let dial = DataDial::pinned(&addr, fp).expect("a dial");
    let client = dial.secure(s, T).expect("client handshake");
    let server = accepting.join().expect("server thread");
    (client, server, fp)
}

#[test]
fn a_tls_pair_is_tls_1_3_with_aes_128_gcm_and_pins_the_certificate() {
    let (client, server, fp) = pair();
    assert!(client.is_tls() && server.is_tls());
    assert_eq!(client.peer_fingerprint(), Some(fp));
    assert_eq!(
        client.cipher_suite().as_deref(),
        Some("TLS13_AES_128_GCM_SHA256")
    );
}

#[test]
fn frames_go_both_ways_over_split_halves() {
    let (client, server, _) = pair();
    let mut cw = FrameWriter::new(client.try_clone().expect("clone"));
    let mut cr = FrameReader::new(client);
    let mut sw = FrameWriter::new(server.try_clone().expect("clone"));
    let mut sr = FrameReader::new(server);
    let close = Close {
        reason: CloseReason::Done,
    };
    cw.send(&close).expect("send");
    assert!(matches!(
        sr.next("test").expect("read"),
        Some(Frame::Close(_))
    ));
    sw.send(&Frame::CloseAck(sluice_wire::CloseAck))
        .expect("send");
    assert!(matches!(
        cr.next("test").expect("read"),
        Some(Frame::CloseAck(_))
    ));
    // An orderly close (close_notify) between frames is a clean end.
    cw.shutdown();
    assert!(sr.next("test").expect("a clean end").is_none());
}

#[test]
fn a_chunk_payload_arrives_whole_in_its_slot() {
    let (client, server, _) = pair();
    let payload: Vec<u8> = (0..3_000_001u32).map(|i| (i * 7 % 251) as u8).collect();
    let header = ChunkHeader {
        file_id: 9,
        offset: 0,
        raw_len: payload.len() as u32,
        wire_len: payload.len() as u32,
        flags: sluice_wire::ChunkFlags::EMPTY,
        checksum: sluice_wire::chunk_checksum(&payload),
        segments: 0,
    };
    let sent = payload.clone();
    let sender = std::thread::spawn(move || {
        let mut tx = ChunkSender::new(client);
        tx.send(&header, &[] as &[Segment], &sent).expect("send");
        tx.shutdown();
    });
    let mut rx = ChunkReceiver::new(server, 4 << 20);
    let DataEvent::Chunk(h) = rx.next_event().expect("an event") else {
        panic!("not a chunk")
    };
    let mut slot = vec![0u8; h.wire_len as usize];
    rx.payload(&mut slot).expect("the payload");
    assert_eq!(slot, payload);
    assert!(matches!(rx.next_event().expect("the end"), DataEvent::End));
    sender.join().expect("sender thread");
}

/// Each side writes `n` bytes on one thread while another reads the peer's `n`: with a
/// lock held across a blocking write, both writers would wait for readers that wait
/// for the lock.
#[test]
fn large_writes_both_ways_at_once_do_not_deadlock() {
    const N: usize = 48 << 20;
    let (client, server, _) = pair();
    let mut threads = Vec::new();
    for (link, seed) in [(client, 1u8), (server, 2u8)] {
        let mut w = link.try_clone().expect("clone");
        threads.push(std::thread::spawn(move || {
            let block: Vec<u8> = (0..1 << 20).map(|i| (i as u8).wrapping_mul(seed)).collect();
            for _ in 0..N / block.len() {
                w.write_all(&block).expect("write");
            }
            w.close();
            0u64
        }));
        let mut r = link;
        threads.push(std::thread::spawn(move || {
            let peer_seed = 3 - seed;
            let mut buf = vec![0u8; 1 << 16];
            let (mut total, mut pos) = (0u64, 0usize);
            loop {
                let n = r.read(&mut buf).expect("read");
                if n == 0 {
                    return total;
                }
                for &b in &buf[..n] {
                    assert_eq!(b, ((pos % (1 << 20)) as u8).wrapping_mul(peer_seed));
                    pos += 1;
                }
                total += n as u64;
            }
        }));
    }
    let got: Vec<u64> = threads
        .into_iter()
        .map(|t| t.join().expect("thread"))
        .collect();
    assert_eq!(got, [0, N as u64, 0, N as u64]);
}

#[test]
fn a_bare_close_is_an_end_between_frames_and_a_disconnect_inside_one() {
    // Between frames: the peer's socket closes without close_notify.
    let (client, server, _) = pair();
    drop(client);
    let mut sr = FrameReader::new(server);
    assert!(sr.next("test").expect("an end").is_none());
    // Inside a frame.
    let (mut client, server, _) = pair();
    let mut frame = Vec::new();
    Close {
        reason: CloseReason::Done,
    }
    .encode(&mut frame);
    client.write_all(&frame[..frame.len() - 1]).expect("write");
    drop(client);
    let mut sr = FrameReader::new(server);
    let err = sr.next("test").expect_err("a cut frame");
    assert!(matches!(err, EngineError::Disconnected { .. }), "{err:?}");
}

/// A server on loopback that presents, to each connection in turn, the next of
/// `servers`; returns its address.
fn handshakes(servers: Vec<ServerTls>) -> (String, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let t = std::thread::spawn(move || {
        for tls in servers {
            let (s, _) = listener.accept().expect("accept");
            let _ = Link::accept_tls(s, tls.config());
        }
    });
    (addr, t)
}

fn control_to(addr: &str, trust: &Trust) -> Result<Fingerprint, EngineError> {
    let s = TcpStream::connect(addr).expect("connect");
    let (link, _) = secure_control(s, addr, trust, T)?;
    Ok(link.peer_fingerprint().expect("a fingerprint"))
}

#[test]
fn known_hosts_pin_on_first_use_and_refuse_a_changed_certificate() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let file = dir.path().join("sub/known_hosts");
    let tofu = Trust::KnownHosts {
        file: Some(file.clone()),
        strict: false,
    };
    let strict = Trust::KnownHosts {
        file: Some(file.clone()),
        strict: true,
    };
    let identity = Identity::ephemeral(&["localhost".into()]).expect("an identity");
    let same = || ServerTls::new(&identity, Encrypt::Always).expect("a server");
    let other = ServerTls::ephemeral(Encrypt::Always).expect("another identity");
    let (addr, t) = handshakes(vec![same(), same(), same(), other]);
    // Strict and unknown: refused, nothing written.
    let err = control_to(&addr, &strict).expect_err("unknown host");
    assert!(err.to_string().contains("--strict-host-key"), "{err}");
    assert!(!file.exists());
    // First use: pinned.
    let fp = control_to(&addr, &tofu).expect("pinned on first use");
    let text = std::fs::read_to_string(&file).expect("the file");
    assert_eq!(text, format!("{addr} {fp}\n"));
    // Known: accepted (strictly too), nothing added.
    assert_eq!(control_to(&addr, &strict).expect("known"), fp);
    assert_eq!(std::fs::read_to_string(&file).expect("the file"), text);
    // A new certificate under the same name: refused, naming the line to remove.
    std::fs::write(&file, format!("# comment\n{text}")).expect("write");
    let msg = control_to(&addr, &tofu).expect_err("changed").to_string();
    t.join().expect("server thread");
    assert!(
        msg.contains("CHANGED") && msg.contains("remove line 2 of"),
        "{msg}"
    );
    assert!(msg.contains(&file.display().to_string()), "{msg}");
}

#[test]
fn fingerprints_print_and_parse_back() {
    let fp = Fingerprint::of(b"a certificate");
    let text = fp.to_string();
    assert!(
        text.starts_with("sha256:") && text.len() == 7 + 64,
        "{text}"
    );
    assert_eq!(text.parse::<Fingerprint>(), Ok(fp));
    assert!("sha256:12".parse::<Fingerprint>().is_err());
    assert!("md5:00".parse::<Fingerprint>().is_err());
}

#[test]
fn a_state_directory_identity_is_created_once_private_and_reused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("a temp dir");
    let state = dir.path().join("state");
    let a = Identity::load_or_create(&state, &["localhost".into()]).expect("created");
    let mode = std::fs::metadata(state.join(IDENTITY_FILE))
        .expect("the file")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let b = Identity::load_or_create(&state, &["other".into()]).expect("reused");
    assert_eq!(a.fingerprint(), b.fingerprint());
    ServerTls::new(&b, Encrypt::Auto).expect("a usable identity");
    // A state directory that cannot be created (under a file): this run's own identity.
    let blocked = state.join(IDENTITY_FILE).join("sub");
    let c = Identity::load_or_create(&blocked, &["localhost".into()]).expect("in memory");
    assert_ne!(c.fingerprint(), a.fingerprint());
    assert!(!blocked.exists());
    // A corrupt identity file is an error naming it.
    std::fs::write(state.join(IDENTITY_FILE), "not PEM").expect("write");
    let err = Identity::load_or_create(&state, &[]).expect_err("corrupt");
    assert!(err.to_string().contains(IDENTITY_FILE), "{err}");
}

/// CPU seconds (user + system) this process has used.
fn cpu_seconds() -> f64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes one rusage into the valid, writable buffer it is given.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(usage.ru_utime) + t(usage.ru_stime)
}

/// Not a test: the per-record cost of a TLS link against a clear one over loopback
/// (`cargo test --release -p sluice-engine --lib link_cost -- --ignored --nocapture`).
#[test]
#[ignore = "a measurement, run by hand in a release build"]
fn link_cost() {
    const N: usize = 2 << 30;
    const CHUNK: usize = 4 << 20;
    for tls in [false, true, false, true, false, true] {
        let (client, server) = if tls {
            let (c, s, _) = pair();
            (c, s)
        } else {
            let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
            let c = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
            let (s, _) = listener.accept().expect("accept");
            (Link::plain(c), Link::plain(s))
        };
        let (cpu0, t0) = (cpu_seconds(), std::time::Instant::now());
        let reader = std::thread::spawn(move || {
            let mut rx = ChunkReceiver::new(server, CHUNK as u32);
            let mut slot = vec![0u8; CHUNK];
            for _ in 0..N / CHUNK {
                rx.payload(&mut slot).expect("read");
            }
        });
        let mut w = client;
        let block = vec![7u8; CHUNK];
        for _ in 0..N / CHUNK {
            w.write_all(&block).expect("write");
        }
        reader.join().expect("reader");
        let (cpu, secs) = (cpu_seconds() - cpu0, t0.elapsed().as_secs_f64());
        let gb = N as f64 / 1e9;
        let records = (N / (16 << 10)) as f64;
        eprintln!(
            "tls={tls}: {:.2} GB/s, {:.3} CPU s/GB (both ends), {:.2} us CPU per 16 KiB record",
            gb / secs,
            cpu / gb,
            cpu / records * 1e6
        );
    }
}

#[test]
fn a_server_answering_in_clear_text_is_named_as_such() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let t = std::thread::spawn(move || {
        let (s, _) = listener.accept().expect("accept");
        let mut w = FrameWriter::new(Link::plain(s));
        let busy = sluice_wire::ErrorFrame::new(sluice_wire::ErrorCode::Busy, "too many");
        w.send(&busy).expect("send");
        w.shutdown();
    });
    let s = TcpStream::connect(&addr).expect("connect");
    let fp = Fingerprint::of(b"any");
    let err = secure_control(s, &addr, &Trust::Pinned(fp), T).expect_err("not TLS");
    t.join().expect("server thread");
    assert!(err.to_string().contains("answered in clear text"), "{err}");
}
