//! SplitMix64: small, seeded, the same on every machine; and the mixing function the
//! simulation derives file contents and its trace hash from.

/// A seeded generator (SplitMix64).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// The generator of `seed` for `stream` (the world and the run draw from two, so a
    /// change in how the run draws does not change the world a seed describes).
    pub fn new(seed: u64, stream: u64) -> Rng {
        Rng(mix(seed, stream))
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        finalize(self.0)
    }

    /// Uniform in `0..n` (`n` of 0 counts as 1).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        debug_assert!(lo <= hi);
        lo + self.below(hi - lo + 1)
    }

    /// An index into a slice of `n`.
    pub fn index(&mut self, n: usize) -> usize {
        usize::try_from(self.below(n as u64)).expect("below n, which is a usize")
    }

    /// True `per_mille` times in a thousand.
    pub fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }

    pub fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.index(xs.len())]
    }
}

/// SplitMix64's finalizer: every input bit moves every output bit.
fn finalize(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A hash of two words (not commutative).
pub fn mix(a: u64, b: u64) -> u64 {
    finalize(a.rotate_left(17) ^ finalize(b.wrapping_add(0x2545_f491_4f6c_dd1d)))
}

/// `len` bytes that depend on every key and on the position: a file's content as a
/// function of (seed, file id, version).
pub fn bytes(keys: [u64; 3], len: usize) -> Vec<u8> {
    let base = mix(mix(keys[0], keys[1]), keys[2]);
    let mut out = Vec::with_capacity(len + 8);
    let mut k = 0u64;
    while out.len() < len {
        out.extend_from_slice(&finalize(base ^ k).to_le_bytes());
        k += 1;
    }
    out.truncate(len);
    out
}
