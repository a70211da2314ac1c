//! `fuzz_decode_all` on random bytes and on mutated valid frames: it must never panic, and
//! no single allocation may exceed what the bytes actually received justify (a length
//! field claiming gigabytes must not make anything allocate them).
//!
//! A counting global allocator records the largest allocation made by this thread while
//! a probe is running; other test threads are not counted.

// Helpers outside #[test] fns too: a panic in a test is a failed assertion.
#![allow(clippy::unwrap_used)]

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use common::{arb_frame, encode};
use proptest::prelude::*;
use sluice_wire::{fuzz_decode_all, FrameDecoder};

struct Counting;

thread_local! {
    static TRACKING: Cell<bool> = const { Cell::new(false) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    // `try_with`: the thread-locals may be gone while a thread exits.
    let _ = TRACKING.try_with(|t| {
        if t.get() {
            let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
        }
    });
}

// SAFETY: forwards every call to `System` unchanged; only records sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Runs the probe and returns the largest single allocation it made.
fn largest_allocation(data: &[u8]) -> usize {
    LARGEST.with(|l| l.set(0));
    TRACKING.with(|t| t.set(true));
    fuzz_decode_all(data);
    TRACKING.with(|t| t.set(false));
    LARGEST.with(Cell::get)
}

/// What `data.len()` bytes may justify: a few times the input (decoded structs are
/// larger than their encoding; lossy UTF-8 triples invalid bytes) plus fixed scratch.
fn allowance(data: &[u8]) -> usize {
    4 * data.len() + 8192
}

fn check(data: &[u8]) -> Result<(), TestCaseError> {
    let largest = largest_allocation(data);
    prop_assert!(
        largest <= allowance(data) && largest <= FrameDecoder::CAPACITY,
        "{} bytes of input made a {}-byte allocation",
        data.len(),
        largest
    );
    Ok(())
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(prop::sample::Index, u8),
    Set(prop::sample::Index, u8),
    Truncate(prop::sample::Index),
    Insert(prop::sample::Index, Vec<u8>),
    /// Overwrite a little-endian length-ish field with a huge value.
    Huge(prop::sample::Index),
}

fn arb_mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<prop::sample::Index>(), 1u8..).prop_map(|(i, b)| Mutation::Flip(i, b)),
        (any::<prop::sample::Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::Set(i, b)),
        any::<prop::sample::Index>().prop_map(Mutation::Truncate),
        (
            any::<prop::sample::Index>(),
            prop::collection::vec(any::<u8>(), 1..16)
        )
            .prop_map(|(i, b)| Mutation::Insert(i, b)),
        any::<prop::sample::Index>().prop_map(Mutation::Huge),
    ]
}

fn apply(mut bytes: Vec<u8>, muts: &[Mutation]) -> Vec<u8> {
    for m in muts {
        if bytes.is_empty() {
            break;
        }
        match m {
            Mutation::Flip(i, b) => {
                let i = i.index(bytes.len());
                bytes[i] ^= b;
            }
            Mutation::Set(i, b) => {
                let i = i.index(bytes.len());
                bytes[i] = *b;
            }
            Mutation::Truncate(i) => bytes.truncate(i.index(bytes.len())),
            Mutation::Insert(i, b) => {
                let i = i.index(bytes.len());
                bytes.splice(i..i, b.iter().copied());
            }
            Mutation::Huge(i) => {
                let i = i.index(bytes.len());
                for (k, b) in bytes[i..].iter_mut().take(4).enumerate() {
                    *b = if k == 3 { 0x7f } else { 0xff };
                }
            }
        }
    }
    bytes
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn random_bytes(data in prop::collection::vec(any::<u8>(), 0..2048)) {
        check(&data)?;
    }

    #[test]
    fn mutated_valid_frames(
        frames in prop::collection::vec(arb_frame(), 1..4),
        muts in prop::collection::vec(arb_mutation(), 1..6),
    ) {
        let mut bytes = Vec::new();
        for f in &frames {
            bytes.extend(encode(f));
        }
        check(&apply(bytes, &muts))?;
    }

    #[test]
    fn valid_frames_unmodified(frames in prop::collection::vec(arb_frame(), 1..4)) {
        let mut bytes = Vec::new();
        for f in &frames {
            bytes.extend(encode(f));
        }
        check(&bytes)?;
    }
}

#[test]
fn huge_claims_allocate_nothing_large() {
    // Header-level claims of the largest bodies, with no body behind them.
    for t in sluice_wire::FrameType::ALL {
        let (_, max) = t.body_len_range();
        let mut b = vec![*t as u8, 0];
        b.extend_from_slice(&max.to_le_bytes());
        b.extend_from_slice(&[0xff; 64]);
        let largest = largest_allocation(&b);
        assert!(largest <= allowance(&b), "{t}: {largest}");
    }
}

#[test]
fn regression_a_count_that_lies_allocated_for_the_claim_not_the_bytes() {
    // An `Addresses` frame claiming 256 entries with one behind it (found by
    // `mutated_valid_frames`): the decoder reserved room for 256 (8 KiB for 20 bytes).
    let mut body = 256u16.to_le_bytes().to_vec();
    body.extend_from_slice(&[0, 0, 4, 10, 0, 0, 1, 0x1f, 0x90]);
    let mut b = vec![sluice_wire::FrameType::Addresses as u8, 0];
    b.extend_from_slice(&u32::try_from(body.len()).unwrap_or(0).to_le_bytes());
    b.extend_from_slice(&body);
    let largest = largest_allocation(&b);
    // The decoder's own 4 KiB scratch, and a few times the input; not 256 entries.
    let claimed = 256 * std::mem::size_of::<sluice_wire::StreamAddress>();
    assert!(
        largest <= 4096 + 4 * b.len() && largest < claimed,
        "{} bytes made {largest}",
        b.len()
    );
}

#[test]
fn the_counter_counts() {
    LARGEST.with(|l| l.set(0));
    TRACKING.with(|t| t.set(true));
    let v = std::hint::black_box(vec![0u8; 123_456]);
    TRACKING.with(|t| t.set(false));
    drop(v);
    assert!(LARGEST.with(Cell::get) >= 123_456);
}
