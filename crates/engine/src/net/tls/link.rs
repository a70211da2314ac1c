//! [`Link`]: one TCP connection, in clear text or inside TLS 1.3.
//!
//! A clear link is the `TcpStream` itself: reads and writes go straight to the socket
//! (vectored writes included), with no lock and no copy. A TLS link shares one
//! `rustls::Connection` between its clones (the control connection is read by one
//! thread and written by another), behind a mutex that is NEVER held while blocking on
//! the socket: the peer may be blocked writing to us, and we must go on reading.
//!
//! * reading: raw bytes come off the socket into the link's own buffer (grown once,
//!   from one record to 64 KiB) under the receive lock only; then, under the
//!   connection lock, `read_tls` + `process_new_packets` decrypt them and the
//!   plaintext is copied out. Plaintext of an earlier record is served first.
//! * writing: under the send lock, the connection lock is taken to encrypt up to
//!   [`TX_BATCH_BYTES`] of plaintext (vectored writes coalesced into full records) into
//!   the link's reused buffer, released, and the buffer is written to the socket: one
//!   `write` call, one batch (`write_all` loops). The send lock keeps records of two
//!   writers in order.
//!
//! Orderly shutdown ([`Link::close`]) sends `close_notify`, then shuts the write half.
//! A peer that closes without `close_notify` reads as an end of stream, as a clear
//! close does: between frames it is the protocol's clean end (its own end frames and
//! digests catch a truncation), inside a frame the caller's `Disconnected`.

use super::fingerprint::Fingerprint;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, Connection, ServerConfig, ServerConnection};
use std::io::{self, IoSlice, Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// Raw TLS bytes read from the socket at once: one full record at first, this much
/// once the peer sends faster than one record per read (an idle connection holds
/// little).
const RX_BUFFER_BYTES: usize = 64 << 10;
/// The first size of the receive buffer: a whole TLS record with its overhead.
const RX_FIRST_BYTES: usize = 17 << 10;
/// Plaintext encrypted per lock (and per socket write) at most: four records. Measured
/// on a 2 GiB push over veth (2 cores): 256 KiB took 2.26 s, 64 KiB 1.99 s, 32 KiB
/// 1.94 s (the batch stays in cache between encryption and the socket's copy).
pub const TX_BATCH_BYTES: usize = 64 << 10;

/// Raw bytes read off the socket and not yet handed to rustls.
struct RxBuf {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

/// The TLS state every clone of a link shares.
struct Shared {
    /// The handshake's bound server nonce, when the peers agreed on
    /// [`sluice_wire::BOUND_ALPN`]: the TLS exporter's value for
    /// [`sluice_wire::BINDING_LABEL`].
    binding: Option<[u8; 32]>,
    conn: Mutex<Connection>,
    rx: Mutex<RxBuf>,
    tx: Mutex<Vec<u8>>,
}

/// A TCP connection, clear or TLS; see the module doc.
pub struct Link {
    stream: TcpStream,
    tls: Option<Arc<Shared>>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link")
            .field("stream", &self.stream)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

/// The exporter value that binds the sluice handshake to `conn`'s TLS session, if the
/// peers selected [`sluice_wire::BOUND_ALPN`].
fn binding(conn: &Connection) -> io::Result<Option<[u8; 32]>> {
    if conn.alpn_protocol() != Some(sluice_wire::BOUND_ALPN) {
        return Ok(None);
    }
    let out = conn
        .export_keying_material([0u8; 32], sluice_wire::BINDING_LABEL, None)
        .map_err(tls_error)?;
    Ok(Some(out))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn tls_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

impl Link {
    /// A clear-text link.
    pub fn plain(stream: TcpStream) -> Link {
        Link { stream, tls: None }
    }

    /// Runs the TLS client handshake on `stream` (blocking, within the socket's read
    /// timeout) and returns the encrypted link.
    ///
    /// # Errors
    /// The handshake failed (the verifier refused the certificate, the peer does not
    /// speak TLS 1.3, the connection broke).
    pub fn connect_tls(
        stream: TcpStream,
        config: Arc<ClientConfig>,
        name: ServerName<'static>,
    ) -> io::Result<Link> {
        let conn = ClientConnection::new(config, name).map_err(tls_error)?;
        Link::handshake(stream, conn.into())
    }

    /// Runs the TLS server handshake on `stream`.
    ///
    /// # Errors
    /// The handshake failed.
    pub fn accept_tls(stream: TcpStream, config: Arc<ServerConfig>) -> io::Result<Link> {
        let conn = ServerConnection::new(config).map_err(tls_error)?;
        Link::handshake(stream, conn.into())
    }

    fn handshake(stream: TcpStream, mut conn: Connection) -> io::Result<Link> {
        let mut io = &stream;
        while conn.is_handshaking() {
            conn.complete_io(&mut io)?;
        }
        while conn.wants_write() {
            conn.write_tls(&mut io)?;
        }
        conn.set_buffer_limit(Some(TX_BATCH_BYTES));
        let binding = binding(&conn)?;
        let shared = Shared {
            binding,
            conn: Mutex::new(conn),
            rx: Mutex::new(RxBuf {
                buf: vec![0; RX_FIRST_BYTES],
                start: 0,
                end: 0,
            }),
            // Grows to one batch of records on the first large write, then is reused.
            tx: Mutex::new(Vec::new()),
        };
        Ok(Link {
            stream,
            tls: Some(Arc::new(shared)),
        })
    }

    /// Whether the link is encrypted.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The server nonce this connection's TLS session binds, when both ends agreed on
    /// the bound handshake ([`sluice_wire::BOUND_ALPN`]); `None` in clear text or with
    /// a peer that did not offer it.
    pub fn binding(&self) -> Option<[u8; 32]> {
        self.tls.as_ref()?.binding
    }

    /// The socket (timeouts, options, addresses).
    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }

    /// The fingerprint of the certificate the peer presented (a TLS link to a server).
    pub fn peer_fingerprint(&self) -> Option<Fingerprint> {
        let shared = self.tls.as_ref()?;
        let conn = lock(&shared.conn);
        conn.peer_certificates()
            .and_then(|c| c.first())
            .map(|c| Fingerprint::of(c.as_ref()))
    }

    /// The negotiated cipher suite's name (`TLS13_AES_128_GCM_SHA256`), if encrypted.
    pub fn cipher_suite(&self) -> Option<String> {
        let shared = self.tls.as_ref()?;
        let conn = lock(&shared.conn);
        conn.negotiated_cipher_suite()
            .map(|s| format!("{:?}", s.suite()))
    }

    /// Another handle to the same connection (and the same TLS session).
    ///
    /// # Errors
    /// The OS refused to duplicate the socket.
    pub fn try_clone(&self) -> io::Result<Link> {
        Ok(Link {
            stream: self.stream.try_clone()?,
            tls: self.tls.clone(),
        })
    }

    /// Sets the socket's read timeout (None: block).
    ///
    /// # Errors
    /// The OS refused.
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        self.stream.set_read_timeout(t)
    }

    /// Orderly close of the sending direction: `close_notify` (TLS), then a TCP
    /// half-close. Best effort.
    pub fn close(&self) {
        if let Some(shared) = &self.tls {
            let mut tx = lock(&shared.tx);
            tx.clear();
            {
                let mut conn = lock(&shared.conn);
                conn.send_close_notify();
                let _ = drain(&mut conn, &mut tx);
            }
            let _ = (&self.stream).write_all(&tx);
        }
        let _ = self.stream.shutdown(std::net::Shutdown::Write);
    }

    fn tls_read(&self, shared: &Shared, out: &mut [u8]) -> io::Result<usize> {
        if out.is_empty() {
            return Ok(0);
        }
        let mut rx = lock(&shared.rx);
        loop {
            {
                let mut conn = lock(&shared.conn);
                match conn.reader().read(out) {
                    // Ok(0): the peer's close_notify.
                    Ok(n) => return Ok(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
                if rx.start < rx.end {
                    let mut raw = &rx.buf[rx.start..rx.end];
                    let n = conn.read_tls(&mut raw)?;
                    if n == 0 {
                        return Ok(0); // close_notify seen: nothing more is read
                    }
                    rx.start += n;
                    conn.process_new_packets().map_err(tls_error)?;
                    continue;
                }
            }
            // Nothing buffered: wait for the socket without the connection lock.
            let n = loop {
                match (&self.stream).read(&mut rx.buf) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    r => break r?,
                }
            };
            if n == 0 {
                return Ok(0); // closed without close_notify: an end of stream
            }
            rx.start = 0;
            rx.end = n;
            if n == rx.buf.len() && n < RX_BUFFER_BYTES {
                rx.buf.resize(RX_BUFFER_BYTES, 0); // keeps the bytes just read
            }
        }
    }

    /// Encrypts up to [`TX_BATCH_BYTES`] of `bufs` (the slices coalesced into full
    /// records: a chunk header shares its record with the payload) and sends them;
    /// returns how many plaintext bytes went out, as `write_vectored` does.
    fn tls_write_batch(&self, shared: &Shared, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let mut tx = lock(&shared.tx);
        tx.clear();
        let n = {
            let mut conn = lock(&shared.conn);
            let n = conn.writer().write_vectored(bufs)?;
            drain(&mut conn, &mut tx)?;
            n
        };
        (&self.stream).write_all(&tx)?;
        Ok(n)
    }
}

/// Moves every encrypted record rustls holds into `tx`.
fn drain(conn: &mut Connection, tx: &mut Vec<u8>) -> io::Result<()> {
    while conn.wants_write() {
        conn.write_tls(tx)?;
    }
    Ok(())
}

impl Read for Link {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match &self.tls {
            None => (&self.stream).read(buf),
            Some(shared) => self.tls_read(shared, buf),
        }
    }
}

impl Write for Link {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &self.tls {
            None => (&self.stream).write(buf),
            Some(shared) => self.tls_write_batch(shared, &[IoSlice::new(buf)]),
        }
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match &self.tls {
            None => (&self.stream).write_vectored(bufs),
            Some(shared) => self.tls_write_batch(shared, bufs),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
