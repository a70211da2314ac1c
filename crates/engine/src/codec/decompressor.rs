//! Decompression of one thread's chunks (and un-shuffling of those that were bit- or
//! byte-shuffled before they were compressed).

use sluice_wire::Compression;
use sluice_wire::Shuffle;
use std::fmt;

/// Decompresses chunks for one thread.
pub struct Decompressor {
    scratch: Vec<u8>,
    zstd: Option<zstd::bulk::Decompressor<'static>>,
}

impl fmt::Debug for Decompressor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Decompressor").finish_non_exhaustive()
    }
}

impl Default for Decompressor {
    fn default() -> Self {
        Decompressor::new()
    }
}

impl Decompressor {
    /// A decompressor; its scratch buffer grows once to the largest chunk.
    pub fn new() -> Decompressor {
        Decompressor {
            scratch: Vec::new(),
            zstd: None,
        }
    }

    /// Replaces the `wire_len` encoded bytes at the start of `chunk` by the `raw_len`
    /// original bytes: decompressed, then un-shuffled where `shuffle` says how they were
    /// shuffled (straight from the scratch buffer into `chunk`, so
    /// a shuffled chunk costs no extra copy). A payload that does not decode to exactly
    /// `raw_len` bytes is an error: the chunk is corrupt and must never be written.
    ///
    /// # Errors
    /// The payload is not a valid `compression` encoding of `raw_len` bytes, or it is
    /// said to be shuffled but not compressed.
    pub fn decompress(
        &mut self,
        compression: Compression,
        shuffle: Option<Shuffle>,
        chunk: &mut [u8],
        wire_len: usize,
        raw_len: usize,
    ) -> Result<(), String> {
        if compression == Compression::None {
            return match shuffle {
                None => Ok(()),
                Some(_) => Err("a shuffled chunk that is not compressed".into()),
            };
        }
        if raw_len > chunk.len() {
            return Err(format!(
                "{raw_len} original bytes exceed the {}-byte slot",
                chunk.len()
            ));
        }
        if self.scratch.len() < raw_len {
            self.scratch.resize(raw_len, 0);
        }
        let input = &chunk[..wire_len];
        let out = &mut self.scratch[..raw_len];
        let n = match compression {
            Compression::Lz4 => {
                lz4_flex::block::decompress_into(input, out).map_err(|e| format!("lz4: {e}"))?
            }
            Compression::Zstd => {
                if self.zstd.is_none() {
                    self.zstd = zstd::bulk::Decompressor::new().ok();
                }
                let z = self
                    .zstd
                    .as_mut()
                    .ok_or("zstd: cannot create a decompression context")?;
                z.decompress_to_buffer(input, out)
                    .map_err(|e| format!("zstd: {e}"))?
            }
            Compression::None => raw_len,
        };
        if n != raw_len {
            return Err(format!("decoded {n} bytes, the header says {raw_len}"));
        }
        let decoded = &self.scratch[..raw_len];
        match shuffle {
            Some(s) => s.undo(decoded, &mut chunk[..raw_len]),
            None => chunk[..raw_len].copy_from_slice(decoded),
        }
        Ok(())
    }
}
