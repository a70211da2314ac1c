//! Test-only fault injection, for the integration tests of the retry paths; never set it
//! in production. `SLUICE_FAULT_CORRUPT_CHUNK=N` (read once per process) corrupts the
//! N-th chunk (1-based) this process sends, after its checksum was computed, so that the
//! receiver rejects it and asks for it again. Only that one send is corrupted.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

static CHOSEN: OnceLock<Option<u64>> = OnceLock::new();
static SENT: AtomicU64 = AtomicU64::new(0);

/// Whether the chunk about to go out is the one to corrupt (counts it).
fn this_one() -> bool {
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

/// Flips a byte of `payload` if it is the chosen chunk; a file source's resend is a new
/// read, so the slot may stay corrupted.
pub(crate) fn corrupt_if_chosen(payload: &mut [u8]) {
    if !payload.is_empty() && this_one() {
        payload[0] ^= 0x5a;
    }
}

/// Sends `payload` with `send`, corrupted on the way if it is the chosen chunk: the byte
/// is flipped back afterwards, as if the damage happened on the wire, so that a stream
/// source can send the record again from the same slot.
pub(crate) fn send_maybe_corrupted<T>(payload: &mut [u8], send: impl FnOnce(&[u8]) -> T) -> T {
    let hit = !payload.is_empty() && this_one();
    if hit {
        payload[0] ^= 0x5a;
    }
    let result = send(payload);
    if hit {
        payload[0] ^= 0x5a;
    }
    result
}
