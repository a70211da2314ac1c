//! Test-only: a TCP proxy that counts *flights*, the one-way trips a session's opening
//! takes, without timing anything.
//!
//! Every byte either side sends through it is held until both sides have been quiet
//! for [`QUIET`]; then everything held is delivered at once and the flight count goes
//! up by one. A side that answers what it received sends in the next flight; a side
//! that sends without waiting (a pipelined frame, a connection opened alongside
//! another) rides in the same flight. Two flights are one round trip. A slow side can
//! only add flights, never remove one, so `flights <= N` is a sound assertion on a
//! loaded machine (TCP's own SYN/SYN-ACK is not seen: the proxy accepts at once).

use crossbeam_channel::{unbounded, Receiver, RecvTimeoutError, Sender};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long both sides must be quiet before the held bytes go out as one flight: far
/// above the time a side takes to answer (a TLS handshake step), so a flight is never
/// split by a slow answer.
const QUIET: Duration = Duration::from_millis(500);

/// What a pump thread reports to the scheduler.
enum Event {
    /// A new connection: the writing handles of its client and server sides.
    Open(usize, TcpStream, TcpStream),
    /// Bytes read from one side of a connection (`to_server`: read from the client).
    Bytes(usize, bool, Vec<u8>),
    /// One side closed its sending direction.
    Eof(usize, bool),
}

/// The proxy: connect to [`FlightProxy::addr`] instead of the server.
pub(super) struct FlightProxy {
    addr: SocketAddr,
    flights: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl FlightProxy {
    /// A proxy in front of `server`, on a loopback port of its own.
    pub(super) fn start(server: SocketAddr) -> FlightProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a proxy listener");
        let addr = listener.local_addr().expect("its address");
        let flights = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = unbounded();
        let (f, s) = (Arc::clone(&flights), Arc::clone(&stop));
        std::thread::spawn(move || schedule(&rx, &f, &s));
        let s = Arc::clone(&stop);
        std::thread::spawn(move || accept_loop(&listener, server, &tx, &s));
        FlightProxy {
            addr,
            flights,
            stop,
        }
    }

    /// Where clients connect.
    pub(super) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Flights delivered so far.
    pub(super) fn flights(&self) -> usize {
        self.flights.load(Ordering::SeqCst)
    }
}

impl Drop for FlightProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

/// Accepts clients, dials `server` for each, and starts a pump per direction.
fn accept_loop(listener: &TcpListener, server: SocketAddr, tx: &Sender<Event>, stop: &AtomicBool) {
    for (id, conn) in listener.incoming().enumerate() {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = conn else { continue };
        let Ok(upstream) = TcpStream::connect(server) else {
            continue;
        };
        let _ = client.set_nodelay(true);
        let _ = upstream.set_nodelay(true);
        let handles = (client.try_clone(), upstream.try_clone());
        let (Ok(cw), Ok(sw)) = handles else { continue };
        let _ = tx.send(Event::Open(id, cw, sw));
        pump(client, id, true, tx.clone());
        pump(upstream, id, false, tx.clone());
    }
}

/// Reads `from` until it closes, reporting each read.
fn pump(mut from: TcpStream, id: usize, to_server: bool, tx: Sender<Event>) {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx
                        .send(Event::Bytes(id, to_server, buf[..n].to_vec()))
                        .is_err()
                    {
                        return;
                    }
                }
            }
        }
        let _ = tx.send(Event::Eof(id, to_server));
    });
}

/// Holds what the pumps report and delivers it as one flight once they are quiet.
fn schedule(rx: &Receiver<Event>, flights: &AtomicUsize, stop: &AtomicBool) {
    let mut conns: HashMap<usize, (TcpStream, TcpStream)> = HashMap::new();
    let mut held: Vec<Event> = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        match rx.recv_timeout(QUIET) {
            Ok(Event::Open(id, c, s)) => {
                conns.insert(id, (c, s));
            }
            Ok(e) => held.push(e),
            Err(RecvTimeoutError::Timeout) if !held.is_empty() => {
                for e in held.drain(..) {
                    deliver(&conns, e);
                }
                flights.fetch_add(1, Ordering::SeqCst);
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// Passes one held event on to the other side of its connection.
fn deliver(conns: &HashMap<usize, (TcpStream, TcpStream)>, e: Event) {
    let (id, to_server) = match &e {
        Event::Bytes(id, t, _) | Event::Eof(id, t) => (*id, *t),
        Event::Open(..) => return,
    };
    let Some((client, server)) = conns.get(&id) else {
        return;
    };
    let mut to = if to_server { server } else { client };
    match e {
        Event::Bytes(_, _, bytes) => {
            let _ = to.write_all(&bytes);
        }
        _ => {
            let _ = to.shutdown(Shutdown::Write);
        }
    }
}
