//! The sluice session protocol as deterministic state machines, with no I/O at all.
//!
//! Like `quinn-proto` (and `sluice-wire` below it), this crate has no sockets, files,
//! threads or clocks: the engine feeds it events (frames received, chunks read or
//! written, the disk's answers as plain values) together with the current time as a
//! value, and carries out the actions it returns (frames to send, chunks to schedule,
//! files to complete). Every edge case of a session is therefore a unit test, and
//! `tests/sim.rs` runs a source and a sink against each other over a simulated network
//! (reordering, loss, duplicates, corruption, a peer that stops, slow disks) for
//! thousands of seeds; a failing seed is printed and replays exactly.
//!
//! * [`source`]: the sending side: manifest window, `Have` -> schedule, `ChunkNack` ->
//!   resend, `FileDone`/`FileFailed`, `Close`.
//! * [`sink`]: the receiving side: announce -> `Have`/`Skip`, chunk accounting,
//!   completion.
//! * [`sched`]: the chunk scheduler (large files in chunks, small files packed, the
//!   storage target with the fewest reads in flight first).
//! * [`stream`]: a live stream's record window and go-back-N resend.
//! * [`auto`]: the `--compress auto` controller (goodput per codec, measured).
//! * [`time`]: time as a value.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod auto;
pub mod sched;
pub mod sink;
pub mod source;
pub mod stream;
pub mod time;
