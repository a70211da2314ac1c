//! `sluice gen`: deterministic test data. `tomo` writes tomography-like detector frames
//! (seed 001: 16-bit pixels, 2560 x 2160 = 11.0592 MB per frame, about 2:1 with LZ4).

use crate::exit::ExitCode;
use crate::plan_cmd::parse_bytes;
use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use std::io::Write;
use std::path::PathBuf;

/// Arguments of `sluice gen`.
#[derive(Debug, Args)]
pub struct GenArgs {
    #[command(subcommand)]
    pub what: GenWhat,
}

/// What to generate.
#[derive(Debug, Subcommand)]
pub enum GenWhat {
    /// Tomography-like detector frames (16-bit, 2560 x 2160, a rotating sample over a
    /// flat field, with noise); `-` writes to stdout.
    Tomo {
        /// Output file, or `-` for stdout (for `sluice stream send`).
        out: PathBuf,
        /// Total size (rounded down to whole pixels).
        #[arg(long, default_value = "1GiB")]
        size: String,
        /// Seed: the same seed gives the same bytes.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
}

/// Frame geometry of seed 001's data set.
pub const WIDTH: usize = 2560;
/// Rows per frame.
pub const HEIGHT: usize = 2160;
/// Bytes per frame (11.0592 MB).
pub const FRAME_BYTES: usize = WIDTH * HEIGHT * 2;

/// Deterministic generator of detector frames.
pub struct Tomo {
    rng: u64,
    frame: u64,
}

impl Tomo {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Tomo {
        Tomo {
            rng: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
            frame: 0,
        }
    }

    fn next_rand(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }

    /// Writes the next frame (little-endian u16 pixels) into `out` (`FRAME_BYTES` long).
    pub fn frame(&mut self, out: &mut [u8]) {
        let angle = self.frame as f64 * 0.0123;
        self.frame += 1;
        let (cx, cy) = (WIDTH as f64 / 2.0, HEIGHT as f64 / 2.0);
        let radius = HEIGHT as f64 * 0.38;
        for (y, row) in out.chunks_exact_mut(WIDTH * 2).take(HEIGHT).enumerate() {
            let dy = y as f64 - cy;
            for (x, px) in row.chunks_exact_mut(2).enumerate() {
                let dx = x as f64 - cx;
                let r = (dx * dx + dy * dy).sqrt();
                // Flat field outside the sample; attenuated, slowly varying inside.
                let base = if r > radius {
                    3200.0
                } else {
                    let t = (dx * angle.cos() + dy * angle.sin()) / 90.0;
                    1400.0 + 500.0 * t.sin() + 300.0 * (r / radius)
                };
                // Quantized signal (runs of equal pixels) plus photon noise on a fraction
                // of the pixels: close to 2:1 with LZ4, like seed 001's frames.
                // base is within 900..3500 by construction: the cast cannot truncate.
                #[allow(clippy::cast_possible_truncation)]
                let mut v = (base as u16) & !0x7;
                let n = self.next_rand();
                if n % 100 < 33 {
                    v = v.wrapping_add(u16::try_from((n >> 8) % 16).unwrap_or(0));
                }
                px.copy_from_slice(&v.to_le_bytes());
            }
        }
    }
}

/// Runs `sluice gen`.
pub fn run(args: &GenArgs) -> Result<ExitCode> {
    match &args.what {
        GenWhat::Tomo { out, size, seed } => {
            // Whole 16-bit pixels: an odd size loses its last byte.
            let total = parse_bytes("--size", size)? / 2 * 2;
            let mut sink: Box<dyn Write> = if out.as_os_str() == "-" {
                Box::new(std::io::stdout().lock())
            } else {
                Box::new(std::io::BufWriter::new(
                    std::fs::File::create(out)
                        .with_context(|| format!("creating {}", out.display()))?,
                ))
            };
            let mut gen = Tomo::new(*seed);
            let mut frame = vec![0u8; FRAME_BYTES];
            let mut left = total;
            while left > 0 {
                gen.frame(&mut frame);
                let n = usize::try_from(left).map_or(FRAME_BYTES, |l| l.min(FRAME_BYTES));
                match sink.write_all(&frame[..n]) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
                        return Ok(ExitCode::Ok)
                    }
                    Err(e) => return Err(e).context("writing frames"),
                }
                left -= n as u64;
            }
            sink.flush().context("writing frames")?;
            Ok(ExitCode::Ok)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_engine::codec::{CompressMode, Compressor};

    #[test]
    fn frames_are_deterministic_by_seed() {
        let (mut a, mut b, mut c) = (Tomo::new(7), Tomo::new(7), Tomo::new(8));
        let (mut fa, mut fb, mut fc) = (
            vec![0; FRAME_BYTES],
            vec![0; FRAME_BYTES],
            vec![0; FRAME_BYTES],
        );
        a.frame(&mut fa);
        b.frame(&mut fb);
        c.frame(&mut fc);
        assert_eq!(fa, fb);
        assert_ne!(fa, fc);
    }

    #[test]
    fn frames_compress_about_two_to_one_with_lz4() {
        let mut g = Tomo::new(1);
        let mut f = vec![0; FRAME_BYTES];
        g.frame(&mut f);
        let out = Compressor::new(CompressMode::Lz4).compress(&mut f, FRAME_BYTES);
        let ratio = FRAME_BYTES as f64 / out.wire_len as f64;
        assert!(
            (1.6..=2.6).contains(&ratio),
            "LZ4 ratio {ratio:.2}, seed 001 reports about 2:1"
        );
    }
}
