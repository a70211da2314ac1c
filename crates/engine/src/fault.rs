//! Fault injection for the integration tests of the retry paths, compiled only with the
//! `fault-injection` cargo feature (the cli's tests enable it through a dev-dependency;
//! `cargo build --release` does not). Without the feature every function is an inline
//! no-op and the environment variables below are never read.
//!
//! With it, `SLUICE_FAULT_CORRUPT_CHUNK=N` (read once per process) corrupts the N-th chunk
//! (1-based) this process sends, after its checksum was computed, so that the receiver
//! rejects it and asks for it again (a chunk sent from the page cache gets its checksum
//! damaged instead). Only that one send is corrupted. And
//! `SLUICE_FAULT_READ_FAIL=NAME` makes every open for reading of a file named `NAME`
//! fail with `EIO`, as a failing disk would (the source's read-failure path).
//! `SLUICE_FAULT_JOIN_STALL=I` makes a client's data connection `I` stop before its
//! `Join`, as a client that hangs half-way through its start would (the daemon's idle
//! timeout during the gather of a session's data connections).
//! `SLUICE_FAULT_HOLD_AT_END=1` makes a client stop for good once its session ended,
//! before it closes anything, as a client that hangs at its very end would (the
//! daemon's end of a control connection whose client never closes it).
//! `SLUICE_FAULT_MISFIT_CHUNK=N` makes the N-th chunk (1-based) this process sends, or
//! the first after it that can be, misfit its files as the manifest announced them,
//! its bytes and checksum intact, as a faulty peer's would: a piece of a large file has
//! its `LAST` flag flipped; a pack of two or more files has one byte of length moved
//! between its first two segments (the sink's geometry checks).

#[cfg(feature = "fault-injection")]
use sluice_wire::ChunkFlags;
use sluice_wire::{ChunkHeader, Segment};

#[cfg(feature = "fault-injection")]
mod injected {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;

    static CHOSEN: OnceLock<Option<u64>> = OnceLock::new();
    static SENT: AtomicU64 = AtomicU64::new(0);

    /// The byte pattern a corrupted chunk's first byte is XORed with.
    pub(super) const FLIP: u8 = 0x5a;

    /// Whether the chunk about to go out is the one to corrupt (counts it).
    pub(super) fn this_one() -> bool {
        let chosen = CHOSEN.get_or_init(|| {
            std::env::var("SLUICE_FAULT_CORRUPT_CHUNK")
                .ok()
                .and_then(|v| v.parse().ok())
        });
        let Some(n) = *chosen else { return false };
        let hit = SENT.fetch_add(1, Ordering::Relaxed) + 1 == n;
        if hit {
            tracing::warn!("SLUICE_FAULT_CORRUPT_CHUNK: corrupting chunk {n} (test only)");
        }
        hit
    }
}

/// Flips a byte of `payload` if it is the chosen chunk; a file source's resend is a new
/// read, so the slot may stay corrupted.
#[cfg(feature = "fault-injection")]
pub(crate) fn corrupt_if_chosen(payload: &mut [u8]) {
    if !payload.is_empty() && injected::this_one() {
        payload[0] ^= injected::FLIP;
    }
}

/// Damages the checksum of a chunk whose payload goes from the page cache, never
/// through this process (`sendfile`), if it is the chosen chunk: the sink sees the same
/// mismatch as for a damaged payload.
#[cfg(feature = "fault-injection")]
pub(crate) fn corrupt_checksum_if_chosen(checksum: &mut u64) {
    if injected::this_one() {
        *checksum ^= u64::from(injected::FLIP);
    }
}

/// Sends a payload of two parts, `head` (in a slot) then `tail` (a caller's pinned
/// bytes, never written), with `send`, corrupted on the way if it is the chosen chunk:
/// the head's first byte is flipped, and back afterwards, as if the damage happened on
/// the wire, so that a stream source can send the record again from the same slot; a
/// record with no head goes as a damaged copy of `tail`.
#[cfg(feature = "fault-injection")]
pub(crate) fn send_parts_maybe_corrupted<T>(
    head: &mut [u8],
    tail: &[u8],
    send: impl FnOnce(&[u8], &[u8]) -> T,
) -> T {
    let hit = !(head.is_empty() && tail.is_empty()) && injected::this_one();
    if !hit {
        return send(head, tail);
    }
    if head.is_empty() {
        let mut damaged = tail.to_vec();
        damaged[0] ^= injected::FLIP;
        return send(head, &damaged);
    }
    head[0] ^= injected::FLIP;
    let result = send(head, tail);
    head[0] ^= injected::FLIP;
    result
}

/// Makes `header` (and its `segments`) misfit its files if it is the chosen chunk
/// (`SLUICE_FAULT_MISFIT_CHUNK`: the N-th sent, or the first after it that can be made
/// to misfit): `LAST` flipped on a piece of a large file, one byte of length moved
/// between a pack's first two segments (a pack of one file waits for the next).
#[cfg(feature = "fault-injection")]
pub(crate) fn misfit_if_chosen(header: &mut ChunkHeader, segments: &mut [Segment]) {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    static CHOSEN: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    static SENT: AtomicU64 = AtomicU64::new(0);
    static DONE: AtomicBool = AtomicBool::new(false);
    let chosen = CHOSEN.get_or_init(|| {
        std::env::var("SLUICE_FAULT_MISFIT_CHUNK")
            .ok()
            .and_then(|v| v.parse().ok())
    });
    let Some(n) = *chosen else { return };
    let count = SENT.fetch_add(1, Ordering::Relaxed) + 1;
    let shiftable = match segments {
        [first, second, ..] => first.len > 1 || second.len > 1,
        _ => false,
    };
    if count < n || (header.is_packed() && !shiftable) || DONE.swap(true, Ordering::Relaxed) {
        return;
    }
    tracing::warn!("SLUICE_FAULT_MISFIT_CHUNK: chunk {count} misfits its file (test only)");
    if !header.is_packed() {
        let last = header.is_last();
        header.flags.set(ChunkFlags::LAST, !last);
        return;
    }
    if let [first, second, ..] = segments {
        let (from, to) = if first.len > 1 {
            (first, second)
        } else {
            (second, first)
        };
        from.len -= 1;
        to.len += 1;
    }
}

/// The error an open for reading of a file named `name` fails with, if it is the
/// chosen one (`SLUICE_FAULT_READ_FAIL`).
#[cfg(feature = "fault-injection")]
pub(crate) fn read_error(name: &str) -> Option<std::io::Error> {
    static CHOSEN: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let chosen = CHOSEN.get_or_init(|| std::env::var("SLUICE_FAULT_READ_FAIL").ok());
    (chosen.as_deref() == Some(name)).then(|| {
        tracing::warn!("SLUICE_FAULT_READ_FAIL: failing the read of {name:?} (test only)");
        std::io::Error::from_raw_os_error(libc::EIO)
    })
}

/// Stops this thread for good if data connection `i` is the chosen one
/// (`SLUICE_FAULT_JOIN_STALL`): it connected, and never sends its `Join`.
#[cfg(feature = "fault-injection")]
pub(crate) fn stall_join(i: u16) {
    static CHOSEN: std::sync::OnceLock<Option<u16>> = std::sync::OnceLock::new();
    let chosen = CHOSEN.get_or_init(|| {
        std::env::var("SLUICE_FAULT_JOIN_STALL")
            .ok()
            .and_then(|v| v.parse().ok())
    });
    if *chosen == Some(i) {
        tracing::warn!(
            "SLUICE_FAULT_JOIN_STALL: data connection {i} stops before its Join (test only)"
        );
        loop {
            std::thread::park();
        }
    }
}

/// Stops this thread for good once the session ended, before anything is closed, if
/// `SLUICE_FAULT_HOLD_AT_END` is set.
#[cfg(feature = "fault-injection")]
pub(crate) fn hold_at_end() {
    if std::env::var_os("SLUICE_FAULT_HOLD_AT_END").is_some() {
        tracing::warn!("SLUICE_FAULT_HOLD_AT_END: the client stops at its end (test only)");
        loop {
            std::thread::park();
        }
    }
}

/// Without `fault-injection`: the client goes on to close its connections.
#[cfg(not(feature = "fault-injection"))]
#[inline]
pub(crate) fn hold_at_end() {}

/// Without `fault-injection`: no data connection stalls.
#[cfg(not(feature = "fault-injection"))]
#[inline]
pub(crate) fn stall_join(i: u16) {
    let _ = i;
}

/// Without `fault-injection`: no read fails.
#[cfg(not(feature = "fault-injection"))]
#[inline]
pub(crate) fn read_error(name: &str) -> Option<std::io::Error> {
    let _ = name;
    None
}

/// Without `fault-injection`: leaves `payload` as it is.
#[cfg(not(feature = "fault-injection"))]
#[inline]
pub(crate) fn corrupt_if_chosen(payload: &mut [u8]) {
    let _ = payload;
}

/// Without `fault-injection`: leaves the chunk as it is.
#[cfg(not(feature = "fault-injection"))]
#[inline]
pub(crate) fn misfit_if_chosen(header: &mut ChunkHeader, segments: &mut [Segment]) {
    let _ = (header, segments);
}

/// Without `fault-injection`: leaves `checksum` as it is.
#[cfg(not(feature = "fault-injection"))]
#[inline]
pub(crate) fn corrupt_checksum_if_chosen(checksum: &mut u64) {
    let _ = checksum;
}

/// Without `fault-injection`: sends both parts unchanged.
#[cfg(not(feature = "fault-injection"))]
#[inline]
pub(crate) fn send_parts_maybe_corrupted<T>(
    head: &mut [u8],
    tail: &[u8],
    send: impl FnOnce(&[u8], &[u8]) -> T,
) -> T {
    send(head, tail)
}
