//! The bit- and byte-shuffle's throughput on one core: `cargo run --release -p sluice-wire
//! --example shuffle_speed [REPEATS]`. Shuffles and unshuffles a 2560 x 2160 frame of
//! 16-bit counts (seed 001's detector frame, 11 MB) as 1-, 2-, 4- and 8-byte elements
//! and prints GB/s of original bytes for each direction, beside a plain copy of the
//! frame (the memory's own speed on this machine, for scale).

use sluice_wire::shuffle::{bitshuffle, bitunshuffle, byteshuffle, byteunshuffle, ElementSize};
use std::time::Instant;

/// Bytes of one frame: 2560 x 2160 pixels of 2 bytes.
const FRAME_BYTES: usize = 2560 * 2160 * 2;

fn main() {
    let repeats: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let frame = frame();
    let mut shuffled = vec![0u8; FRAME_BYTES];
    let mut back = vec![0u8; FRAME_BYTES];
    println!("{FRAME_BYTES}-byte frame, best of {repeats}, one thread");
    let copy = time(repeats, || shuffled.copy_from_slice(&frame));
    println!("copy: {copy:.2} GB/s");
    for elem in ElementSize::ALL {
        let out = time(repeats, || bitshuffle(&frame, elem, &mut shuffled));
        let back_speed = time(repeats, || bitunshuffle(&shuffled, elem, &mut back));
        assert!(back == frame, "the round trip changed the frame");
        println!("{elem}: bitshuffle {out:.2} GB/s, bitunshuffle {back_speed:.2} GB/s");
        let out = time(repeats, || byteshuffle(&frame, elem, &mut shuffled));
        let back_speed = time(repeats, || byteunshuffle(&shuffled, elem, &mut back));
        assert!(back == frame, "the byte round trip changed the frame");
        println!("{elem}: byteshuffle {out:.2} GB/s, byteunshuffle {back_speed:.2} GB/s");
    }
}

/// Counts around 1000 with noise in their low 6 bits, little-endian.
fn frame() -> Vec<u8> {
    let mut x = 0x9E37_79B9_7F4A_7C15_u64;
    (0..FRAME_BYTES / 2)
        .flat_map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (1000 + u16::from(x.to_le_bytes()[0] & 0x3F)).to_le_bytes()
        })
        .collect()
}

/// GB/s of `f` over `FRAME_BYTES`, best of `repeats` runs (after one to warm up).
fn time(repeats: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut best = f64::INFINITY;
    for _ in 0..repeats.max(1) {
        let started = Instant::now();
        f();
        best = best.min(started.elapsed().as_secs_f64());
    }
    FRAME_BYTES as f64 / best / 1e9
}
