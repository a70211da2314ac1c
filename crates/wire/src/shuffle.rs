//! Bit-shuffle and byte-shuffle: the filters a chunk's payload may pass through before it
//! is compressed (`SHUFFLED` in the chunk flags, with `BYTE_SHUFFLED` for the second), so
//! that typed data compresses. [`Shuffle`] names one of them with its element size.
//!
//! The byte-shuffle ([`byteshuffle`]) is Blosc's: byte `j` of every element together,
//! the whole chunk as one block. zstd, whose entropy coder takes each 128 KiB block at its
//! own rate, often does better with it than with bit-planes; LZ4, which only finds runs,
//! needs the bit-planes. The rest of this documentation is the bit-shuffle's.
//!
//! A detector frame of 16-bit counts with Poisson noise does not compress with LZ4 as it
//! is (ratio ~1.0): the noisy low bits of every element sit next to its constant high
//! bits. Bit-shuffle (Kiyoshi Masui's *bitshuffle*, the HDF5 filter 32008 that Blosc and
//! HDF5 users put before LZ4) regroups the bytes by bit: within a block, element `i`'s
//! bit `b` moves to bit-plane `b`, so the high bits that never change become long runs
//! of zeros that LZ4 and zstd squeeze.
//!
//! The layout is the reference implementation's (`bshuf_bitshuffle` with its default
//! block size), so a payload here is a bitshuffle payload there:
//!
//! * The input is cut into blocks of [`BLOCK_BYTES`] bytes (`8192 / E` elements of `E`
//!   bytes, a multiple of 8 elements). After the whole blocks, the rest is one more,
//!   shorter block of as many elements as make a multiple of 8; the last `< 8` elements,
//!   and any bytes after the last whole element, are copied as they are.
//! * A block of `n` elements becomes `8 × E` bit-planes of `n / 8` bytes each: plane
//!   `8 j + k` holds bit `k` of byte `j` of every element, element `i` at bit `i % 8` of
//!   the plane's byte `i / 8` (bytes and bits little-endian, least significant first).
//!
//! The transform is a bit-matrix transpose, done with 64-bit masks and shifts (the 8 × 8
//! transpose of Hacker's Delight, as the reference's scalar code does), in safe Rust.
//! Neither direction allocates: a block-sized scratch lives on the stack.
//!
//! ```
//! use sluice_wire::shuffle::{bitshuffle, bitunshuffle, ElementSize};
//! // Eight 16-bit values 1..=8: bit-plane 0 holds their lowest bits (1,0,1,0,1,0,1,0).
//! let values: Vec<u8> = (1u16..=8).flat_map(u16::to_le_bytes).collect();
//! let mut shuffled = vec![0; values.len()];
//! bitshuffle(&values, ElementSize::Two, &mut shuffled);
//! assert_eq!(shuffled[..4], [0b0101_0101, 0b0110_0110, 0b0111_1000, 0b1000_0000]);
//! assert!(shuffled[4..].iter().all(|&b| b == 0)); // the 12 high bit-planes: all zeros
//! let mut back = vec![0; values.len()];
//! bitunshuffle(&shuffled, ElementSize::Two, &mut back);
//! assert_eq!(back, values);
//! ```

/// Bytes of a whole block (the reference's `BSHUF_TARGET_BLOCK_SIZE_B`).
pub const BLOCK_BYTES: usize = 8192;

/// Elements that a block's element count is a multiple of (`BSHUF_BLOCKED_MULT`).
const GROUP_ELEMENTS: usize = 8;

// Every element size makes a whole block of whole groups of elements.
const _: () = assert!(BLOCK_BYTES.is_multiple_of(GROUP_ELEMENTS * 8));

/// The size of the elements a payload was bit-shuffled as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ElementSize {
    /// 1-byte elements (`uint8`).
    One,
    /// 2-byte elements (`uint16`: detector counts).
    Two,
    /// 4-byte elements (`uint32`, `float32`).
    Four,
    /// 8-byte elements (`uint64`, `float64`).
    Eight,
}

impl ElementSize {
    /// Every element size, smallest first.
    pub const ALL: [ElementSize; 4] = [
        ElementSize::One,
        ElementSize::Two,
        ElementSize::Four,
        ElementSize::Eight,
    ];

    /// The element size of `bytes` bytes, or `None` unless it is 1, 2, 4 or 8.
    pub fn from_bytes(bytes: usize) -> Option<ElementSize> {
        match bytes {
            1 => Some(ElementSize::One),
            2 => Some(ElementSize::Two),
            4 => Some(ElementSize::Four),
            8 => Some(ElementSize::Eight),
            _ => None,
        }
    }

    /// Bytes per element.
    pub const fn bytes(self) -> usize {
        1 << self.log2()
    }

    /// `log2` of the bytes per element (0 to 3): how the chunk flags carry it.
    pub const fn log2(self) -> u8 {
        match self {
            ElementSize::One => 0,
            ElementSize::Two => 1,
            ElementSize::Four => 2,
            ElementSize::Eight => 3,
        }
    }

    /// The element size whose [`Self::log2`] is `log2` (only its two low bits count).
    pub const fn from_log2(log2: u8) -> ElementSize {
        match log2 & 3 {
            0 => ElementSize::One,
            1 => ElementSize::Two,
            2 => ElementSize::Four,
            _ => ElementSize::Eight,
        }
    }
}

impl std::fmt::Display for ElementSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-byte elements", self.bytes())
    }
}

/// Bit-shuffles `input` as elements of `elem` bytes into `out`, block by block (see the
/// module's documentation for the layout).
///
/// # Panics
/// If `out` is not exactly as long as `input`.
pub fn bitshuffle(input: &[u8], elem: ElementSize, out: &mut [u8]) {
    assert_eq!(
        input.len(),
        out.len(),
        "bitshuffle: output of another length"
    );
    match elem {
        ElementSize::One => blocks::<1>(input, out, shuffle_block::<1>),
        ElementSize::Two => blocks::<2>(input, out, shuffle_block::<2>),
        ElementSize::Four => blocks::<4>(input, out, shuffle_block::<4>),
        ElementSize::Eight => blocks::<8>(input, out, shuffle_block::<8>),
    }
}

/// Undoes [`bitshuffle`]: `out` gets the original bytes of the `input` that `bitshuffle`
/// made with the same `elem`.
///
/// # Panics
/// If `out` is not exactly as long as `input`.
pub fn bitunshuffle(input: &[u8], elem: ElementSize, out: &mut [u8]) {
    assert_eq!(
        input.len(),
        out.len(),
        "bitunshuffle: output of another length"
    );
    match elem {
        ElementSize::One => blocks::<1>(input, out, unshuffle_block::<1>),
        ElementSize::Two => blocks::<2>(input, out, unshuffle_block::<2>),
        ElementSize::Four => blocks::<4>(input, out, unshuffle_block::<4>),
        ElementSize::Eight => blocks::<8>(input, out, unshuffle_block::<8>),
    }
}

/// Byte-shuffles `input` as elements of `elem` bytes into `out`: Blosc's shuffle with the
/// whole input as one block. Byte `j` of element `i` goes to `out[j n + i]` for the `n`
/// whole elements; the bytes after the last whole element are copied as they are, at
/// the end. Where bit-planes suit LZ4, byte-planes suit zstd: the high bytes of 16-bit
/// counts become one run of small values, the noisy low bytes another, and zstd's
/// entropy coder takes each at its own rate (on the bench's tomography frames zstd:1
/// sends 1/1.78 of the bytes byte-shuffled against 1/1.74 bit-shuffled).
///
/// # Panics
/// If `out` is not exactly as long as `input`.
pub fn byteshuffle(input: &[u8], elem: ElementSize, out: &mut [u8]) {
    assert_eq!(
        input.len(),
        out.len(),
        "byteshuffle: output of another length"
    );
    let whole = input.len() - input.len() % elem.bytes();
    match elem {
        ElementSize::One => out[..whole].copy_from_slice(&input[..whole]),
        ElementSize::Two => split_bytes::<2>(&input[..whole], &mut out[..whole]),
        ElementSize::Four => split_bytes::<4>(&input[..whole], &mut out[..whole]),
        ElementSize::Eight => split_bytes::<8>(&input[..whole], &mut out[..whole]),
    }
    out[whole..].copy_from_slice(&input[whole..]);
}

/// Undoes [`byteshuffle`]: `out` gets the original bytes of the `input` that
/// `byteshuffle` made with the same `elem`.
///
/// # Panics
/// If `out` is not exactly as long as `input`.
pub fn byteunshuffle(input: &[u8], elem: ElementSize, out: &mut [u8]) {
    assert_eq!(
        input.len(),
        out.len(),
        "byteunshuffle: output of another length"
    );
    let whole = input.len() - input.len() % elem.bytes();
    match elem {
        ElementSize::One => out[..whole].copy_from_slice(&input[..whole]),
        ElementSize::Two => merge_bytes::<2>(&input[..whole], &mut out[..whole]),
        ElementSize::Four => merge_bytes::<4>(&input[..whole], &mut out[..whole]),
        ElementSize::Eight => merge_bytes::<8>(&input[..whole], &mut out[..whole]),
    }
    out[whole..].copy_from_slice(&input[whole..]);
}

/// How a chunk's original bytes were shuffled before they were compressed: which
/// transform, and the size of the elements it took them as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Shuffle {
    /// [`bitshuffle`] (chunk flag `SHUFFLED`): what LZ4 needs, which has no entropy
    /// coder and finds only runs.
    Bits(ElementSize),
    /// [`byteshuffle`] (`SHUFFLED` and `BYTE_SHUFFLED`): what zstd does best with.
    Bytes(ElementSize),
}

impl Shuffle {
    /// The size of the elements the bytes were shuffled as.
    #[must_use]
    pub const fn elem(self) -> ElementSize {
        match self {
            Shuffle::Bits(e) | Shuffle::Bytes(e) => e,
        }
    }

    /// Shuffles `input` into `out` (of the same length).
    ///
    /// # Panics
    /// If `out` is not exactly as long as `input`.
    pub fn apply(self, input: &[u8], out: &mut [u8]) {
        match self {
            Shuffle::Bits(e) => bitshuffle(input, e, out),
            Shuffle::Bytes(e) => byteshuffle(input, e, out),
        }
    }

    /// Undoes [`Self::apply`]: `out` gets the original bytes.
    ///
    /// # Panics
    /// If `out` is not exactly as long as `input`.
    pub fn undo(self, input: &[u8], out: &mut [u8]) {
        match self {
            Shuffle::Bits(e) => bitunshuffle(input, e, out),
            Shuffle::Bytes(e) => byteunshuffle(input, e, out),
        }
    }
}

impl std::fmt::Display for Shuffle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Shuffle::Bits(e) => write!(f, "bit-shuffle of {e}"),
            Shuffle::Bytes(e) => write!(f, "byte-shuffle of {e}"),
        }
    }
}

/// The transform of one block of whole groups: input, output, a scratch of its length.
type BlockFn = fn(&[u8], &mut [u8], &mut [u8]);

/// Applies `block` to each whole block of `input`, then to the shorter block of whole
/// groups after them, and copies what is left (fewer than 8 elements, and a partial
/// element) as it is. The two directions cut the input the same way.
fn blocks<const E: usize>(input: &[u8], out: &mut [u8], block: BlockFn) {
    debug_assert_eq!(input.len(), out.len());
    let mut scratch = [0u8; BLOCK_BYTES];
    let whole = input.len() - input.len() % BLOCK_BYTES;
    let (head_in, rest_in) = input.split_at(whole);
    let (head_out, rest_out) = out.split_at_mut(whole);
    for (i, o) in head_in
        .chunks_exact(BLOCK_BYTES)
        .zip(head_out.chunks_exact_mut(BLOCK_BYTES))
    {
        block(i, o, &mut scratch);
    }
    let group_bytes = GROUP_ELEMENTS * E;
    let last = rest_in.len() - rest_in.len() % group_bytes;
    debug_assert!(last < BLOCK_BYTES);
    if last > 0 {
        block(
            &rest_in[..last],
            &mut rest_out[..last],
            &mut scratch[..last],
        );
    }
    rest_out[last..].copy_from_slice(&rest_in[last..]);
}

/// Bit-shuffles one block of `n` elements (a multiple of 8): byte `j` of every element
/// into byte-plane `j` of `scratch`, then each byte-plane into its 8 bit-planes.
fn shuffle_block<const E: usize>(input: &[u8], out: &mut [u8], scratch: &mut [u8]) {
    let n = input.len() / E;
    assert!(
        input.len() == n * E && n.is_multiple_of(GROUP_ELEMENTS) && scratch.len() >= input.len()
    );
    let planes: &[u8] = if E == 1 {
        input
    } else {
        split_bytes::<E>(input, &mut scratch[..input.len()]);
        &scratch[..input.len()]
    };
    for (plane, bits) in planes.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
        bit_planes(plane, bits);
    }
}

/// Undoes [`shuffle_block`]: each byte's 8 bit-planes into its byte-plane, then the
/// byte-planes back into elements.
fn unshuffle_block<const E: usize>(input: &[u8], out: &mut [u8], scratch: &mut [u8]) {
    let n = input.len() / E;
    assert!(
        input.len() == n * E && n.is_multiple_of(GROUP_ELEMENTS) && scratch.len() >= input.len()
    );
    if E == 1 {
        gather_bit_planes(input, out);
        return;
    }
    let planes = &mut scratch[..input.len()];
    for (bits, plane) in input.chunks_exact(n).zip(planes.chunks_exact_mut(n)) {
        gather_bit_planes(bits, plane);
    }
    merge_bytes::<E>(planes, out);
}

/// Byte-planes: `planes[j n + i] = input[i E + j]` for the `n` elements of `input`.
fn split_bytes<const E: usize>(input: &[u8], planes: &mut [u8]) {
    match E {
        2 => split_u16(input, planes),
        4 => split_u32(input, planes),
        _ => split_u64(input, planes),
    }
}

/// Undoes [`split_bytes`].
fn merge_bytes<const E: usize>(planes: &[u8], out: &mut [u8]) {
    match E {
        2 => merge_u16(planes, out),
        4 => merge_u32(planes, out),
        _ => merge_u64(planes, out),
    }
}

/// Elements that [`split_bytes`] and [`merge_bytes`] move at a time: as integers in a
/// local array (which nothing else can alias), so the compiler moves them with vector
/// instructions (masks and packs), 10 times as fast as byte by byte.
const LANES: usize = 16;

/// Defines the [`split_bytes`] of one element size, by its integer type.
macro_rules! byte_planes {
    ($split:ident, $int:ty) => {
        /// [`split_bytes`] for elements of this integer's size.
        // The truncating cast takes byte `j` of the element: the point of it.
        #[allow(clippy::cast_possible_truncation)]
        fn $split(input: &[u8], planes: &mut [u8]) {
            const E: usize = std::mem::size_of::<$int>();
            let n = input.len() / E;
            let whole = n - n % LANES;
            for (c, elements) in input[..whole * E].chunks_exact(LANES * E).enumerate() {
                let mut v: [$int; LANES] = [0; LANES];
                for (x, b) in v.iter_mut().zip(elements.chunks_exact(E)) {
                    let mut bytes = [0u8; E];
                    bytes.copy_from_slice(b);
                    *x = <$int>::from_le_bytes(bytes);
                }
                for j in 0..E {
                    let t: [u8; LANES] = std::array::from_fn(|i| (v[i] >> (8 * j)) as u8);
                    planes[j * n + c * LANES..][..LANES].copy_from_slice(&t);
                }
            }
            for i in whole..n {
                for j in 0..E {
                    planes[j * n + i] = input[i * E + j];
                }
            }
        }
    };
}

byte_planes!(split_u16, u16);
byte_planes!(split_u32, u32);
byte_planes!(split_u64, u64);

/// [`merge_bytes`] of 2-byte elements. This direction is fastest as a plain zip (the
/// compiler interleaves bytes with vector unpacks).
fn merge_u16(planes: &[u8], out: &mut [u8]) {
    let (p0, p1) = planes.split_at(out.len() / 2);
    for ((e, a), b) in out.chunks_exact_mut(2).zip(p0).zip(p1) {
        e.copy_from_slice(&[*a, *b]);
    }
}

/// [`merge_bytes`] of 4-byte elements.
fn merge_u32(planes: &[u8], out: &mut [u8]) {
    let n = out.len() / 4;
    let (p0, rest) = planes.split_at(n);
    let (p1, rest) = rest.split_at(n);
    let (p2, p3) = rest.split_at(n);
    for ((((e, a), b), c), d) in out.chunks_exact_mut(4).zip(p0).zip(p1).zip(p2).zip(p3) {
        e.copy_from_slice(&[*a, *b, *c, *d]);
    }
}

/// [`merge_bytes`] of 8-byte elements: two 4-byte halves.
fn merge_u64(planes: &[u8], out: &mut [u8]) {
    let n = out.len() / 8;
    for (i, e) in out.chunks_exact_mut(8).enumerate() {
        for (j, b) in e.iter_mut().enumerate() {
            *b = planes[j * n + i];
        }
    }
}

/// The 8 bit-planes of a byte-plane of `n` bytes (a multiple of 8): `out` is 8 rows of
/// `n / 8` bytes, row `k` holding bit `k` of every byte. Eight 8-byte words at a time:
/// each word's 8 × 8 bit matrix is transposed (its byte `k` is then bit `k` of its 8
/// bytes), and the 8 words' 8 × 8 byte matrix too, so that each row gets a whole word.
/// The last `< 8` words go the same way, padded, and each row gets a byte from each.
fn bit_planes(plane: &[u8], out: &mut [u8]) {
    let row = plane.len() / 8;
    debug_assert!(plane.len().is_multiple_of(8) && out.len() == plane.len());
    let wide = plane.len() - plane.len() % 64;
    for (g, bytes) in plane[..wide].chunks_exact(64).enumerate() {
        let mut words = [0u64; 8];
        for (w, b) in words.iter_mut().zip(bytes.chunks_exact(8)) {
            *w = load(b);
        }
        transpose_bits(&mut words);
        transpose_bytes(&mut words);
        for (k, w) in words.iter().enumerate() {
            out[k * row + 8 * g..][..8].copy_from_slice(&w.to_le_bytes());
        }
    }
    let mut words = [0u64; 8];
    let tail = plane[wide..].chunks_exact(8);
    let count = tail.len();
    for (w, b) in words.iter_mut().zip(tail) {
        *w = load(b);
    }
    transpose_bits(&mut words);
    for (g, w) in words.iter().take(count).enumerate() {
        for (k, b) in w.to_le_bytes().iter().enumerate() {
            out[k * row + wide / 8 + g] = *b;
        }
    }
}

/// Undoes [`bit_planes`] (both transposes are their own inverses).
fn gather_bit_planes(bits: &[u8], plane: &mut [u8]) {
    let row = bits.len() / 8;
    debug_assert!(bits.len().is_multiple_of(8) && plane.len() == bits.len());
    let wide = plane.len() - plane.len() % 64;
    for (g, bytes) in plane[..wide].chunks_exact_mut(64).enumerate() {
        let mut words = [0u64; 8];
        for (k, w) in words.iter_mut().enumerate() {
            *w = load(&bits[k * row + 8 * g..]);
        }
        transpose_bytes(&mut words);
        transpose_bits(&mut words);
        for (w, b) in words.iter().zip(bytes.chunks_exact_mut(8)) {
            b.copy_from_slice(&w.to_le_bytes());
        }
    }
    let mut words = [0u64; 8];
    let tail = plane[wide..].chunks_exact_mut(8);
    let count = tail.len();
    for (g, w) in words.iter_mut().take(count).enumerate() {
        let mut b = [0u8; 8];
        for (k, x) in b.iter_mut().enumerate() {
            *x = bits[k * row + wide / 8 + g];
        }
        *w = u64::from_le_bytes(b);
    }
    transpose_bits(&mut words);
    for (w, b) in words.iter().zip(tail) {
        b.copy_from_slice(&w.to_le_bytes());
    }
}

/// A little-endian word from the first 8 bytes of `b`.
fn load(b: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[..8]);
    u64::from_le_bytes(w)
}

/// Transposes, in each word, the 8 × 8 bit matrix whose row `r` is byte `r` (bit `c` of
/// the byte is column `c`): byte `k` then holds bit `k` of every byte the word had.
/// Hacker's Delight's `transpose8`, the reference's `TRANS_BIT_8X8`: swap the
/// off-diagonal 1 × 1, then 2 × 2, then 4 × 4 blocks. Inlined, so that the words stay
/// in registers (3 times as fast as a call).
#[inline(always)]
fn transpose_bits(words: &mut [u64; 8]) {
    swap_bits::<7>(words, 0x00AA_00AA_00AA_00AA);
    swap_bits::<14>(words, 0x0000_CCCC_0000_CCCC);
    swap_bits::<28>(words, 0x0000_0000_F0F0_F0F0);
}

/// In each word, swaps the bits under `mask` with those `SHIFT` bits above them. One
/// step over all 8 words, so that the compiler does two words per vector instruction
/// (4 times as fast as word by word).
#[inline(always)]
fn swap_bits<const SHIFT: u32>(words: &mut [u64; 8], mask: u64) {
    let mut t = [0u64; 8];
    for (t, w) in t.iter_mut().zip(words.iter()) {
        *t = (w ^ (w >> SHIFT)) & mask;
    }
    for (w, t) in words.iter_mut().zip(t) {
        *w ^= t ^ (t << SHIFT);
    }
}

/// Transposes the 8 × 8 byte matrix whose row `r` is `words[r]` (byte `c` of it is
/// column `c`): afterwards byte `c` of `words[r]` is what byte `r` of `words[c]` was.
/// Swaps the off-diagonal 4 × 4, then 2 × 2, then 1 × 1 blocks, four row pairs at a
/// time (two pairs per vector instruction). Inlined like [`transpose_bits`].
#[inline(always)]
fn transpose_bytes(words: &mut [u64; 8]) {
    let [w0, w1, w2, w3, w4, w5, w6, w7] = *words;
    let (a, b) = swap_blocks::<32>([w0, w1, w2, w3], [w4, w5, w6, w7], 0x0000_0000_FFFF_FFFF);
    let (c, d) = swap_blocks::<16>(
        [a[0], a[1], b[0], b[1]],
        [a[2], a[3], b[2], b[3]],
        0x0000_FFFF_0000_FFFF,
    );
    let (e, f) = swap_blocks::<8>(
        [c[0], d[0], c[2], d[2]],
        [c[1], d[1], c[3], d[3]],
        0x00FF_00FF_00FF_00FF,
    );
    *words = [e[0], f[0], e[1], f[1], e[2], f[2], e[3], f[3]];
}

/// For each pair of rows `(top[i], bottom[i])`, swaps the top row's bits outside `low`
/// with the bottom row's bits under it (`low`: the low `BITS` of every `2 × BITS`).
#[inline(always)]
fn swap_blocks<const BITS: u32>(top: [u64; 4], bottom: [u64; 4], low: u64) -> ([u64; 4], [u64; 4]) {
    let mut t = [0u64; 4];
    let mut b = [0u64; 4];
    for i in 0..4 {
        t[i] = (top[i] & low) | ((bottom[i] << BITS) & !low);
        b[i] = ((top[i] >> BITS) & low) | (bottom[i] & !low);
    }
    (t, b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The layout, bit by bit, as the module's documentation states it.
    fn naive(input: &[u8], elem: ElementSize) -> Vec<u8> {
        let e = elem.bytes();
        let mut out = input.to_vec();
        let mut start = 0;
        while start < input.len() {
            let left = (input.len() - start) / e;
            let n = (BLOCK_BYTES / e).min(left - left % 8);
            if n == 0 {
                break;
            }
            let block = &input[start..start + n * e];
            let planes = &mut out[start..start + n * e];
            planes.fill(0);
            for i in 0..n {
                for j in 0..e {
                    for k in 0..8 {
                        let bit = (block[i * e + j] >> k) & 1;
                        planes[(8 * j + k) * (n / 8) + i / 8] |= bit << (i % 8);
                    }
                }
            }
            start += n * e;
        }
        out
    }

    fn shuffled(input: &[u8], elem: ElementSize) -> Vec<u8> {
        let mut out = vec![0xEE; input.len()];
        bitshuffle(input, elem, &mut out);
        out
    }

    fn unshuffled(input: &[u8], elem: ElementSize) -> Vec<u8> {
        let mut out = vec![0xEE; input.len()];
        bitunshuffle(input, elem, &mut out);
        out
    }

    /// Eight uint16 values, worked out by hand: 0x8001, 0x0002, 0x0003, 0x00FF,
    /// 0x0100, 0x0000, 0xFFFF, 0x0001. Eight elements make one byte per bit-plane:
    /// bit `i` of plane `p`'s byte is bit `p` of value `i`.
    #[test]
    fn eight_u16_values_become_their_sixteen_bit_planes() {
        let values: [u16; 8] = [
            0x8001, 0x0002, 0x0003, 0x00FF, 0x0100, 0x0000, 0xFFFF, 0x0001,
        ];
        let input: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        // Plane 0 (bit 0): values 0, 2, 3, 6, 7 are odd -> bits 0, 2, 3, 6, 7.
        // Plane 1 (bit 1): values 1, 2, 3, 6 -> 0b0100_1110.
        // Planes 2-7: only 0x00FF (value 3) and 0xFFFF (value 6) -> 0b0100_1000.
        // Plane 8 (bit 8): 0x0100 (value 4) and 0xFFFF -> 0b0101_0000.
        // Planes 9-14: only 0xFFFF -> 0b0100_0000.
        // Plane 15 (bit 15): 0x8001 (value 0) and 0xFFFF -> 0b0100_0001.
        let expected: [u8; 16] = [
            0b1100_1101,
            0b0100_1110,
            0b0100_1000,
            0b0100_1000,
            0b0100_1000,
            0b0100_1000,
            0b0100_1000,
            0b0100_1000,
            0b0101_0000,
            0b0100_0000,
            0b0100_0000,
            0b0100_0000,
            0b0100_0000,
            0b0100_0000,
            0b0100_0000,
            0b0100_0001,
        ];
        assert_eq!(shuffled(&input, ElementSize::Two), expected);
        assert_eq!(naive(&input, ElementSize::Two), expected);
        assert_eq!(unshuffled(&expected, ElementSize::Two), input);
    }

    /// FNV-1a 64 of `bytes` (what the reference's test program printed).
    fn fnv1a(bytes: &[u8]) -> u64 {
        bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
        })
    }

    /// The reference implementation's output, as hashes: `bshuf_bitshuffle(in, out, n,
    /// elem, 0)` (default block size) of kiyo-masui/bitshuffle at 526440a, built from
    /// `src/bitshuffle_core.c` with a test program that fills `in` with this generator
    /// (xorshift64 seeded with `0x9E37_79B9_7F4A_7C15 ^ (1000 elem + n)`; the low nibble
    /// of each step, the whole low byte at each element's first byte) and prints
    /// `(elem, n, fnv1a(out))`. Whole blocks, a shorter last block, a tail of fewer than
    /// 8 elements, and every element size.
    #[test]
    fn matches_the_reference_implementation() {
        const REFERENCE: [(usize, usize, u64); 28] = [
            (1, 8, 0x22cfdba9639759f9),
            (1, 64, 0x3d4e4e5e1008b641),
            (1, 72, 0x6fb2c871deca28f3),
            (1, 4096, 0xc4b155369fd0eb24),
            (1, 4100, 0x1eab67feb18070a8),
            (1, 8272, 0xbe03d9a5a56cec54),
            (1, 25353, 0x3e4f8d4ab848fcb9),
            (2, 8, 0x984bb6d1d4c51b15),
            (2, 64, 0x44f1587ed61fa1d6),
            (2, 72, 0xe95c15d855741590),
            (2, 4096, 0xf35cdd2f90f67865),
            (2, 4100, 0xd237918601ac25ce),
            (2, 8272, 0x8c9004445b21676a),
            (2, 25353, 0xd7ce4d7a53a4fee9),
            (4, 8, 0x6e76a03f7e763aea),
            (4, 64, 0x9c82fbd141ff7122),
            (4, 72, 0xd41bface46b200fd),
            (4, 4096, 0xceda4c8de9f43abf),
            (4, 4100, 0x95305ff2b3d69e96),
            (4, 8272, 0x9e6fbef1570961c7),
            (4, 25353, 0x2bab34cf194d38b6),
            (8, 8, 0x31c5ab62b1bc1e1e),
            (8, 64, 0x9e2d0a6bae6b8ce4),
            (8, 72, 0x4ae36aae50678c37),
            (8, 4096, 0x6227578e4b16e94c),
            (8, 4100, 0xaa67ffb9e32981c1),
            (8, 8272, 0x22a7064f7c60c7b2),
            (8, 25353, 0xc96401d1764a480b),
        ];
        for (elem, n, hash) in REFERENCE {
            let len = n * elem;
            let mut x = 0x9E37_79B9_7F4A_7C15_u64 ^ (elem as u64 * 1000 + n as u64);
            let input: Vec<u8> = (0..len)
                .map(|i| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let b = x.to_le_bytes()[0];
                    if i % elem == 0 {
                        b
                    } else {
                        b & 0x0F
                    }
                })
                .collect();
            let size = ElementSize::from_bytes(elem).unwrap();
            let out = shuffled(&input, size);
            assert_eq!(fnv1a(&out), hash, "{elem}-byte elements, {n} of them");
            assert_eq!(unshuffled(&out, size), input);
        }
    }

    #[test]
    fn fewer_than_eight_elements_and_partial_elements_are_copied() {
        for elem in ElementSize::ALL {
            let input: Vec<u8> = (0..8 * elem.bytes() - 1)
                .map(|i| i.to_le_bytes()[0] ^ 0x5A)
                .collect();
            assert_eq!(shuffled(&input, elem), input, "{elem}");
            assert_eq!(unshuffled(&input, elem), input, "{elem}");
        }
        assert!(shuffled(&[], ElementSize::Eight).is_empty());
    }

    #[test]
    fn constant_high_bits_become_zero_planes() {
        // 4096 values below 1024 fill one block: planes 10 to 15 are all zeros.
        let input: Vec<u8> = (0..4096u16)
            .flat_map(|i| (i.wrapping_mul(2654) % 1024).to_le_bytes())
            .collect();
        let out = shuffled(&input, ElementSize::Two);
        let row = 4096 / 8;
        assert!(out[10 * row..].iter().all(|&b| b == 0));
        assert!(out[..10 * row].iter().any(|&b| b != 0));
    }

    #[test]
    fn transposes_are_their_own_inverses() {
        let mut w: [u64; 8] =
            std::array::from_fn(|r| 0x0706_0504_0302_0100 + 0x1010_1010_1010_1010 * r as u64);
        let before = w;
        transpose_bytes(&mut w);
        assert_eq!(w[2].to_le_bytes()[5], before[5].to_le_bytes()[2]);
        transpose_bytes(&mut w);
        assert_eq!(w, before);
        // A single bit moves to its mirror position: row 0 column 1 to row 1 column 0.
        let mut w = [1 << 1, 0x8040_2010_0804_0201, 0, 0, 0, 0, 0, 0];
        transpose_bits(&mut w);
        assert_eq!(w[..2], [1 << 8, 0x8040_2010_0804_0201]);
        transpose_bits(&mut w);
        assert_eq!(w[0], 1 << 1);
    }

    #[test]
    fn element_sizes_round_trip_through_log2() {
        for elem in ElementSize::ALL {
            assert_eq!(ElementSize::from_log2(elem.log2()), elem);
            assert_eq!(ElementSize::from_bytes(elem.bytes()), Some(elem));
        }
        assert_eq!(ElementSize::from_bytes(3), None);
        assert_eq!(ElementSize::from_bytes(16), None);
    }

    #[test]
    fn byte_shuffle_groups_byte_j_of_every_element() {
        // Three uint16 values and a stray byte: low bytes, then high bytes, then the tail.
        let input = [0x01, 0xA0, 0x02, 0xB0, 0x03, 0xC0, 0x7F];
        let mut out = [0xEE; 7];
        byteshuffle(&input, ElementSize::Two, &mut out);
        assert_eq!(out, [0x01, 0x02, 0x03, 0xA0, 0xB0, 0xC0, 0x7F]);
        let mut back = [0xEE; 7];
        byteunshuffle(&out, ElementSize::Two, &mut back);
        assert_eq!(back, input);
        // One-byte elements and inputs shorter than an element pass through.
        let mut one = [0; 7];
        byteshuffle(&input, ElementSize::One, &mut one);
        assert_eq!(one, input);
        let mut short = [0; 3];
        byteshuffle(&input[..3], ElementSize::Four, &mut short);
        assert_eq!(short, input[..3]);
    }

    #[test]
    fn a_shuffle_names_its_transform_and_elements() {
        let input: Vec<u8> = (0..64u8).collect();
        for elem in ElementSize::ALL {
            for (s, f) in [
                (
                    Shuffle::Bits(elem),
                    bitshuffle as fn(&[u8], ElementSize, &mut [u8]),
                ),
                (Shuffle::Bytes(elem), byteshuffle),
            ] {
                assert_eq!(s.elem(), elem);
                let (mut a, mut b) = (vec![0; 64], vec![0; 64]);
                s.apply(&input, &mut a);
                f(&input, elem, &mut b);
                assert_eq!(a, b, "{s}");
                s.undo(&a, &mut b);
                assert_eq!(b, input, "{s}");
            }
        }
    }

    fn arb_elem() -> impl Strategy<Value = ElementSize> {
        prop::sample::select(ElementSize::ALL.to_vec())
    }

    proptest! {
        /// Any length (whole blocks, a shorter last block, a tail of fewer than 8
        /// elements, a partial element): the layout is the naive one, and the inverse
        /// restores the input.
        #[test]
        fn round_trips_and_matches_the_layout(
            elem in arb_elem(),
            len in prop_oneof![0usize..300, 0usize..(3 * BLOCK_BYTES + 200)],
            seed in any::<u64>(),
        ) {
            let mut x = seed | 1;
            let input: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x.to_le_bytes()[0]
                })
                .collect();
            let out = shuffled(&input, elem);
            prop_assert_eq!(&out, &naive(&input, elem));
            prop_assert_eq!(unshuffled(&out, elem), input.clone());
            // The byte-shuffle: byte j of element i at j n + i, the tail as it is.
            let e = elem.bytes();
            let n = len / e;
            let mut bytes = vec![0xEE; len];
            byteshuffle(&input, elem, &mut bytes);
            for i in 0..n {
                for j in 0..e {
                    prop_assert_eq!(bytes[j * n + i], input[i * e + j]);
                }
            }
            prop_assert_eq!(&bytes[n * e..], &input[n * e..]);
            let mut back = vec![0xEE; len];
            byteunshuffle(&bytes, elem, &mut back);
            prop_assert_eq!(back, input);
        }
    }
}
