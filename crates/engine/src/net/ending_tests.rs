//! How many one-way trips a whole small push takes, from the first byte to the
//! client's return, counted by [`FlightProxy`] (not timed) between a real client and a
//! real daemon: the sink closes the session by itself (`SINK_CLOSES`), so its
//! `CloseAck` travels with the last `FileDone`, and stops reading its data connections
//! without waiting for the source to end them.

use super::flights::FlightProxy;
use super::tls::{ClientTls, Encrypt, ServerTls, Trust};
use crate::client::{copy, CopyConfig, Endpoint};
use crate::daemon::{serve, ServeConfig};
use crate::stats::Stats;
use crate::{Populate, Runtime, SessionOptions};
use sluice_placement::{plan, Job, Policy, Role};
use sluice_topology::{discover, TopologySource};
use sluice_wire::Token;
use std::net::TcpListener;
use std::sync::Arc;

/// A small plan of this machine with every role a daemon or a client needs.
fn runtime(populate: Populate) -> Arc<Runtime> {
    let threads = vec![
        (Role::Control, 1),
        (Role::NetSend, 2),
        (Role::NetRecv, 2),
        (Role::IoRead, 1),
        (Role::IoWrite, 1),
    ];
    let chunk_bytes = 1 << 20;
    let job = Job {
        threads,
        nics: Vec::new(),
        storage: Vec::new(),
        buffer_bytes: 16 * chunk_bytes,
        chunk_bytes,
        reserved_cpus: Vec::new(),
        placements: Vec::new(),
    };
    let source: TopologySource = "this".parse().expect("this machine");
    let machine = discover(&source).expect("its topology");
    let plan = plan(&machine, &job, Policy::Os).expect("a plan");
    Arc::new(Runtime::new(plan, populate).expect("a runtime"))
}

fn payload() -> Vec<u8> {
    (0..4096u32).map(|i| (i * 31 % 253) as u8).collect()
}

/// Pushes (or pulls) one 4 KiB file to (from) a daemon through the proxy; returns the
/// flights taken until the client's copy returned, and the bytes that arrived.
fn copy_small_file(pull: bool) -> (usize, Vec<u8>) {
    let root = tempfile::tempdir().expect("the daemon's root");
    let here = tempfile::tempdir().expect("this side's directory");
    let file = here.path().join("f.bin");
    let there = root.path().join("f.bin");
    std::fs::write(if pull { &there } else { &file }, payload()).expect("the source file");
    let token = Token::new(b"secret".to_vec()).expect("a token");
    let tls = ServerTls::ephemeral(Encrypt::Always).expect("an identity");
    let client_tls = ClientTls {
        encrypt: Encrypt::Always,
        trust: Trust::Pinned(tls.fingerprint()),
    };
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let proxy = FlightProxy::start(listener.local_addr().expect("addr"));
    let cfg = ServeConfig {
        root: root.path().to_path_buf(),
        token: Some(token.clone()),
        runtime: runtime(Populate::OnDemand),
        io_threads: 1,
        read_depth: 1,
        max_connections: 64,
        nic_addresses: Vec::new(),
        tls,
    };
    // Serves for the rest of the test process.
    std::thread::spawn(move || serve(listener, cfg));
    let local = Endpoint::Local(file.display().to_string());
    let remote = Endpoint::Remote {
        addr: proxy.addr().to_string(),
        path: "f.bin".into(),
    };
    let (from, to) = if pull {
        (remote, local)
    } else {
        (local, remote)
    };
    let copy_cfg = CopyConfig {
        sources: vec![from],
        dest: to,
        opts: SessionOptions::default(),
        token: Some(token),
        tls: client_tls,
        far: None,
    };
    let stats = Arc::new(Stats::new());
    copy(&copy_cfg, &runtime(Populate::OnDemand), &stats).expect("the copy");
    let flights = proxy.flights();
    let arrived = std::fs::read(if pull { &file } else { &there }).expect("the file arrived");
    (flights, arrived)
}

/// 6 flights from the first byte until the push returns: the 5 of the opening (see
/// `opening_tests`; the chunk goes in the fifth, behind `Join`), then the sink's
/// `FileDone` with its own `CloseAck`. With the source's `Close` it took 8: `FileDone`,
/// `Close`, `CloseAck`. (`Manifest` and `ManifestEnd` ride with `Open`'s flight or the
/// next; the client's closing of its connections comes after it returned.)
#[test]
fn a_small_push_ends_with_the_sinks_own_close_in_six_flights() {
    copies_whole_in_six_flights(false, "push");
}

/// A pull: this side is the sink, and returns once its `CloseAck` is on its way: 6
/// flights. It took 8 while it waited for the daemon to end its data connections and
/// send `Close`, which the daemon does only once it has read the last `FileDone`.
#[test]
fn a_small_pull_returns_without_waiting_for_the_daemon_in_six_flights() {
    copies_whole_in_six_flights(true, "pull");
}

/// The file arrives whole, and the copy takes at most 6 flights.
fn copies_whole_in_six_flights(pull: bool, what: &str) {
    let (flights, arrived) = copy_small_file(pull);
    assert_eq!(arrived, payload());
    eprintln!("the {what} took {flights} flights");
    assert!(
        flights <= 6,
        "{flights} one-way trips for a whole small {what}"
    );
}
