//! The network layer: the only code that turns `sluice-wire` frames and chunks into
//! socket I/O. Everything above it (the daemon, the client, the stream, the two halves
//! of a session) hands it frames and buffer slots and gets frames and slots back.
//!
//! * [`transport`]: frames and chunks on one TCP connection (`FrameReader`,
//!   `FrameWriter`, `ChunkSender`, `ChunkReceiver`), socket tuning.
//! * [`control`]: the control connection while a session runs (a batching writer
//!   thread, a reader thread that turns frames into events).
//! * [`handshake`]: the client and server handshake drivers, OS randomness.
//! * [`connect`]: the client side of opening a session (`open_session`).
//! * [`accept`]: the server side, shared by the daemon and the stream receiver.
//! * [`tls`]: TLS 1.3 on every connection ([`tls::Link`]), the `--encrypt` policy,
//!   server identities and client trust.
//! * [`tcp`]: `TCP_INFO`, the congestion control per socket, socket buffers.
//! * [`path`]: socket buffers sized to the path's bandwidth-delay product (pure).
//! * [`tuning`]: a session's data connections tuned to the path; the `network` report.

pub mod accept;
pub mod connect;
pub mod control;
pub mod handshake;
pub mod path;
mod predial;
pub mod tcp;
pub mod tls;
pub mod transport;
pub mod tuning;

#[cfg(test)]
mod ending_tests;
#[cfg(test)]
mod flights;
#[cfg(test)]
mod opening_tests;
#[cfg(test)]
mod tests;
