//! Fuzz target: `sluice_wire::fuzzing::handshake` must never panic on any input.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    sluice_wire::fuzzing::handshake(data);
});
