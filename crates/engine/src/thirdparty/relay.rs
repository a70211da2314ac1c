//! The client's half of a third-party copy once both daemons are wired: it relays the
//! control frames between the source daemon and the sink daemon, unchanged (each is
//! decoded on the way, so a malformed frame stops at the client), and counts what the
//! sink reports for the progress bar and the summary. No chunk ever comes here: the
//! data connections run from source to sink directly.

use crate::error::EngineError;
use crate::stats::{FileOutcome, Stats};
use crate::transport::{FrameReader, FrameWriter};
use sluice_wire::{ErrorFrame, FileEntry, Frame};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Files announced but not yet reported done or failed; bounded by the source's window
/// of files in flight (`sluice_session::source::MAX_FILES_IN_FLIGHT`), since the source
/// announces no more until the sink finishes some.
type InFlight = Arc<Mutex<HashMap<u64, FileEntry>>>;

/// One direction of the relay.
struct Leg {
    from: FrameReader,
    to: FrameWriter,
    /// "source" or "sink": who `from` is, for messages.
    name: &'static str,
    /// Set by either leg once the close handshake has passed (`CloseAck` relayed): the
    /// session is complete, and a daemon that then resets its connection (closing it
    /// with our half-close's bytes unread) ends its leg like a clean close.
    over: Arc<AtomicBool>,
}

/// What one direction saw.
#[derive(Debug, Default)]
struct LegEnd {
    /// The `Error` frame one side sent (forwarded to the other).
    error: Option<ErrorFrame>,
    /// Whether the close handshake passed through (`CloseAck`).
    closed: bool,
}

/// Relays until both daemons have closed their control connections; the session's
/// result is the first `Error` either side sent, or a failure to relay.
///
/// # Errors
/// A daemon's `Error` (as [`EngineError::Remote`]), a malformed frame, or a connection
/// lost before the close handshake.
pub fn relay(
    source: (FrameReader, FrameWriter),
    sink: (FrameReader, FrameWriter),
    stats: &Arc<Stats>,
) -> Result<(), EngineError> {
    let in_flight: InFlight = Arc::default();
    let over = Arc::new(AtomicBool::new(false));
    let down = Leg {
        from: source.0,
        to: sink.1,
        name: "source",
        over: Arc::clone(&over),
    };
    let up = Leg {
        from: sink.0,
        to: source.1,
        name: "sink",
        over,
    };
    let (s, f) = (Arc::clone(stats), Arc::clone(&in_flight));
    let downstream = std::thread::Builder::new()
        .name("relay-down".into())
        .spawn(move || pump(down, &s, &f))
        .map_err(|e| EngineError::io("starting the relay", e))?;
    let upstream = pump(up, stats, &in_flight);
    let downstream = downstream
        .join()
        .unwrap_or_else(|_| Err(EngineError::Config("the relay thread panicked".into())));
    finish(downstream, upstream)
}

/// The session's outcome from both directions' ends.
fn finish(
    down: Result<LegEnd, EngineError>,
    up: Result<LegEnd, EngineError>,
) -> Result<(), EngineError> {
    let (down, up) = (down?, up?);
    if let Some(e) = down.error.or(up.error) {
        return Err(EngineError::Remote {
            code: e.code,
            message: e.message,
        });
    }
    if !(down.closed || up.closed) {
        return Err(EngineError::Disconnected {
            peer: "the daemons".into(),
            state: "relaying a third-party session before its close".into(),
        });
    }
    Ok(())
}

/// Forwards frames from one daemon to the other until the first closes its side;
/// then half-closes the other so it sees the end too.
fn pump(mut leg: Leg, stats: &Stats, in_flight: &InFlight) -> Result<LegEnd, EngineError> {
    let mut end = LegEnd::default();
    let state = format!("relaying from the {}", leg.name);
    loop {
        let frame = match leg.from.next(&state) {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e) if leg.over.load(Ordering::SeqCst) => {
                tracing::debug!("the {} closed after the session ended: {e}", leg.name);
                break;
            }
            Err(e) => {
                let _ = leg.to.send(&ErrorFrame::new(e.code(), e.to_string()));
                leg.to.shutdown();
                return Err(e);
            }
        };
        count(&frame, stats, in_flight);
        match &frame {
            Frame::Error(e) => end.error = Some(e.clone()),
            Frame::CloseAck(_) => end.closed = true,
            Frame::Chunk(_) => {
                // Never on a control connection; the decoder already refuses it.
                debug_assert!(false, "a chunk on a control connection");
            }
            _ => {}
        }
        // A daemon that went away after its last word is not an error of the relay;
        // the other leg reports how the session ended.
        if leg.to.send(&frame).is_err() {
            break;
        }
        // After `CloseAck` the session is over: the side that asked to close sees the
        // end of its control connection (as it would from a client), closes it, and
        // that end travels on through the other leg to the other side.
        if end.closed {
            leg.over.store(true, Ordering::SeqCst);
            leg.to.shutdown();
        }
    }
    leg.to.shutdown();
    Ok(end)
}

/// Progress from the frames that pass: announced entries, and the sink's verdicts.
fn count(frame: &Frame, stats: &Stats, in_flight: &InFlight) {
    let mut map = in_flight
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    match frame {
        Frame::Manifest(m) => {
            for e in &m.entries {
                stats.file_announced(e.size);
                map.insert(e.file_id, e.clone());
            }
        }
        Frame::FileDone(d) => {
            if let Some(e) = map.remove(&d.file_id) {
                stats.add_payload(0, e.size);
                stats.file_done(&e, FileOutcome::Done { digest: d.digest });
            }
        }
        Frame::Have(h) => {
            use sluice_session::source::{names_another_version, sink_keeps};
            let Some(e) = map.get(&h.file_id) else {
                return;
            };
            if sink_keeps(e, &h.state) {
                stats.file_skipped(e);
                map.remove(&h.file_id);
            } else if names_another_version(e, &h.state) {
                let message = "BadFrame: the sink answered Complete for another version".into();
                stats.file_done(e, FileOutcome::Failed { message });
                map.remove(&h.file_id);
            }
        }
        Frame::FileFailed(f) => {
            if let Some(e) = map.remove(&f.file_id) {
                let message = format!("{}: {}", f.code.name(), f.message);
                stats.file_done(&e, FileOutcome::Failed { message });
            }
        }
        _ => {}
    }
}
