//! Every limit of protocol v1, in one place.
//!
//! "Put a limit on everything": each length or count read from the wire is checked against
//! one of these before anything is allocated for it. The relations between them are
//! checked at compile time at the bottom of this file.

/// The protocol version this crate speaks (the newest).
pub const PROTOCOL_VERSION: u16 = 1;
/// The oldest protocol version this crate speaks.
pub const MIN_PROTOCOL_VERSION: u16 = 1;
/// The six bytes that open every `Hello` body.
pub const MAGIC: [u8; 6] = *b"SLUICE";

/// Bytes of the common frame header: type u8, flags u8, body_len u32.
pub const FRAME_HEADER_BYTES: usize = 6;
/// Largest body of any control frame.
pub const MAX_CONTROL_BODY_BYTES: u32 = 1 << 20;
/// Largest body of `Hello` and `Welcome`; v1 bodies are shorter, later versions may append
/// fields up to this size and a v1 peer ignores them.
pub const MAX_HELLO_BODY_BYTES: u32 = 256;

/// Longest relative path, in bytes (Linux `PATH_MAX`).
pub const MAX_PATH_BYTES: usize = 4096;
/// Longest path component, in bytes (Linux `NAME_MAX`).
pub const MAX_COMPONENT_BYTES: usize = 255;
/// Longest symlink target, in bytes.
pub const MAX_SYMLINK_TARGET_BYTES: usize = 4096;
/// Longest human-readable message in `Error` and `FileFailed`, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 1024;

/// Most entries in one `Manifest` frame (the body limit applies as well).
pub const MAX_MANIFEST_ENTRIES: usize = 1024;

/// Smallest chunk size a session may use.
pub const MIN_CHUNK_BYTES: u32 = 64 << 10;
/// Chunk size used when the client asks for none.
pub const DEFAULT_CHUNK_BYTES: u32 = 4 << 20;
/// Largest chunk size a session may use, and the hard cap on `raw_len` and `wire_len`.
pub const MAX_CHUNK_BYTES: u32 = 64 << 20;
/// Most files packed into one chunk.
pub const MAX_PACK_SEGMENTS: u16 = 4096;
/// Most chunks in one file: bounds `FileDigest` (8 bytes a chunk, 32 MiB) and the `Have`
/// bitmap (512 KiB). The largest file is therefore `MAX_FILE_CHUNKS * chunk_bytes`
/// (16 TiB at 4 MiB chunks, 256 TiB at 64 MiB).
pub const MAX_FILE_CHUNKS: u64 = 1 << 22;

/// Most data connections in one session.
pub const MAX_STREAMS: u16 = 256;
/// Most channels (NUMA nodes driving a NIC) in one session.
pub const MAX_CHANNELS: u16 = 64;
/// Bytes of the largest `Addresses` entry: stream u16, family u8, IPv6 \[16\], port u16.
pub const ADDRESS_ENTRY_MAX_BYTES: usize = 21;

/// Bytes of `Delegate`'s fields before its address list: session id u64, join key
/// \[32\], channels u16, streams per channel u16, chunk bytes u32, flags u8,
/// fingerprint \[32\].
pub const DELEGATE_FIXED_BODY_BYTES: usize = 8 + 32 + 2 + 2 + 4 + 1 + 32;
/// Bytes of the fixed part of a chunk frame body (after the common header).
pub const CHUNK_FIXED_BODY_BYTES: usize = 36;
/// Bytes of one packed-chunk segment: file_id u64, len u32.
pub const SEGMENT_BYTES: usize = 12;
/// Bytes of a chunk header on the wire, common header included.
pub const CHUNK_HEADER_BYTES: usize = FRAME_HEADER_BYTES + CHUNK_FIXED_BODY_BYTES;

/// Largest `Have` bitmap, in bytes.
pub const MAX_HAVE_BITMAP_BYTES: usize = (MAX_FILE_CHUNKS / 8) as usize;

const _: () = assert!(MIN_PROTOCOL_VERSION <= PROTOCOL_VERSION);
const _: () = assert!(MIN_CHUNK_BYTES.is_power_of_two());
const _: () = assert!(DEFAULT_CHUNK_BYTES.is_power_of_two());
const _: () = assert!(MAX_CHUNK_BYTES.is_power_of_two());
const _: () =
    assert!(MIN_CHUNK_BYTES <= DEFAULT_CHUNK_BYTES && DEFAULT_CHUNK_BYTES <= MAX_CHUNK_BYTES);
// A `Have` with a full bitmap fits in one control frame.
const _: () = assert!(MAX_HAVE_BITMAP_BYTES + 64 <= MAX_CONTROL_BODY_BYTES as usize);
// A full pack table fits in one control-sized body.
const _: () = assert!(
    CHUNK_FIXED_BODY_BYTES + MAX_PACK_SEGMENTS as usize * SEGMENT_BYTES
        <= MAX_CONTROL_BODY_BYTES as usize
);
// An `Open` with the longest path fits.
const _: () = assert!(12 + MAX_PATH_BYTES <= MAX_CONTROL_BODY_BYTES as usize);
// The largest file's size is representable.
const _: () = assert!(MAX_FILE_CHUNKS
    .checked_mul(MAX_CHUNK_BYTES as u64)
    .is_some());
