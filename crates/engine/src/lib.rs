//! The sluice transfer engine: the daemon, the client and the per-channel data path
//! (read → send → receive → write) that the plan places on NUMA nodes. The engine is the
//! I/O shell around `sluice-session`, which decides the protocol with no I/O: the engine
//! owns the threads, sockets, files and clocks, feeds the session core events and
//! carries out its actions.
//!
//! * [`daemon::serve`] accepts sessions under a confined root.
//! * [`client::copy`] pushes or pulls files, trees and lots of small files.
//! * [`oneshot::serve_one`] serves exactly one session: the far side `sluice cp` starts
//!   over ssh.
//! * [`session`] runs one side of a session once its connections are up (the same for
//!   both drivers) and holds the path rules of both sides; [`source`] and [`sink`] are
//!   its two halves, identical for push and pull; [`runtime::Runtime`] holds the plan's
//!   buffer pools and pins its threads.
//! * [`options`] is a transfer's one options type ([`SessionOptions`], to and from the
//!   wire's `OpenOptions`) and the decisions derived from it (buffer sizing, advertised
//!   addresses, threads beyond the plan).
//! * [`net`] is the only module that turns `sluice-wire` frames into socket I/O
//!   ([`transport`] for one connection, [`control`] for a running session's control
//!   connection, the handshake, connect and accept drivers).

mod access;
pub mod accounts;
pub mod audit;
pub mod bwlimit;
pub mod client;
pub mod codec;
pub mod daemon;
pub mod drain;
pub mod error;
mod fault;
pub mod fs;
pub mod guard;
pub mod monitor;
pub mod net;
pub mod notify;
pub mod oneshot;
pub mod options;
pub mod pipeline;
mod readahead;
pub mod runtime;
pub mod sched;
pub mod session;
pub mod shared;
pub mod sink;
pub mod source;
pub mod stats;
pub mod stream;
#[cfg(test)]
mod testing;
pub mod thirdparty;

/// The network layer's modules at their former paths (`crate::transport`,
/// `crate::control`).
pub use net::{control, transport};

pub use codec::CompressMode;
pub use error::EngineError;
pub use options::{Pipeline, SessionOptions, DEFAULT_READ_DEPTH};
pub use runtime::{Populate, Runtime};
pub use sluice_wire::Compression;
pub use stats::Summary;
