//! The codecs round-trip, and the codec decisions of each site.

// Test data generators truncate on purpose.
#![allow(clippy::cast_possible_truncation)]

use super::plan::{announce, asked_by_peer};
use super::*;
use sluice_wire::{Compression, ElementSize, Shuffle};

fn compressible(n: usize) -> Vec<u8> {
    (0..n).map(|i| ((i / 7) % 13) as u8).collect()
}

fn random(n: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Compresses `data` with `mode` as untyped bytes (nothing to shuffle), checks the
/// round trip and returns what was sent.
fn round_trip(mode: CompressMode, data: &[u8]) -> Compressed {
    round_trip_elements(mode, data, None)
}

#[test]
fn every_codec_round_trips_compressible_random_and_mixed_data() {
    let mut mixed = compressible(1 << 19);
    mixed.extend(random(1 << 19));
    for mode in [
        CompressMode::None,
        CompressMode::Lz4,
        CompressMode::Zstd(1),
        CompressMode::Zstd(9),
        CompressMode::Auto,
    ] {
        for data in [
            compressible(1 << 20),
            random(1 << 20),
            mixed.clone(),
            vec![],
            vec![7],
        ] {
            round_trip(mode, &data);
        }
    }
}

#[test]
fn a_chunk_that_does_not_shrink_travels_raw() {
    let out = round_trip(CompressMode::Lz4, &random(1 << 20));
    assert_eq!(out.compression, Compression::None);
    assert_eq!(out.wire_len, 1 << 20);
    let out = round_trip(CompressMode::Lz4, &compressible(1 << 20));
    assert_eq!(out.compression, Compression::Lz4);
    assert!(out.wire_len < 1 << 18);
}

#[test]
fn a_corrupt_compressed_chunk_is_an_error() {
    let data = compressible(1 << 16);
    let mut slot = data.clone();
    let out = Compressor::new(CompressMode::Lz4).compress(&mut slot, data.len());
    slot[out.wire_len / 2] ^= 0xff;
    slot[1] ^= 0x55;
    let mut d = Decompressor::new();
    let r = d.decompress(out.compression, None, &mut slot, out.wire_len, data.len());
    // Either the decoder refuses it, or it decodes to other bytes, which the chunk
    // checksum then refuses: it never silently yields the original length of garbage
    // without one of the two checks failing.
    if r.is_ok() {
        assert_ne!(&slot[..data.len()], &data[..]);
    }
    let mut zslot = data.clone();
    let zout = Compressor::new(CompressMode::Zstd(3)).compress(&mut zslot, data.len());
    zslot[zout.wire_len - 3] ^= 0xff;
    assert!(d
        .decompress(
            zout.compression,
            None,
            &mut zslot,
            zout.wire_len,
            data.len()
        )
        .is_err());
}

#[test]
fn modes_parse_and_print() {
    for s in ["none", "lz4", "zstd:3", "zstd:19", "auto"] {
        assert_eq!(s.parse::<CompressMode>().unwrap().to_string(), s);
    }
    assert_eq!(
        "zstd".parse::<CompressMode>().unwrap(),
        CompressMode::Zstd(3)
    );
    for bad in ["gzip", "zstd:0", "zstd:x", ""] {
        assert!(bad.parse::<CompressMode>().unwrap_err().contains(bad));
    }
}

fn inputs(site: CodecSite, asked: CompressMode) -> CodecInputs {
    CodecInputs {
        site,
        asked,
        peer_is_this_host: false,
        planned_compress: 4,
        planned_decompress: 3,
        io_threads: 2,
        streams: 3,
        peer_unshuffles: Unshuffles::BitsAndBytes,
    }
}

#[test]
fn a_source_compresses_in_a_stage_where_the_plan_has_threads_else_inline() {
    let p = CodecPlan::decide(&inputs(CodecSite::Source, CompressMode::Lz4));
    assert_eq!(
        (p.mode, p.compress_threads, p.decompress_threads),
        (CompressMode::Lz4, 4, 0)
    );
    assert_eq!((p.auto_threads, p.auto_senders), (4, 2));
    assert!(p.staged_compress());
    // --compress-threads 0: the io-read threads compress, and auto counts them.
    let inline = CodecPlan::decide(&CodecInputs {
        planned_compress: 0,
        ..inputs(CodecSite::Source, CompressMode::Auto)
    });
    assert_eq!((inline.compress_threads, inline.auto_threads), (0, 2));
    assert!(!inline.staged_compress());
    // No compression: no stage, whatever the plan holds.
    let none = CodecPlan::decide(&inputs(CodecSite::Source, CompressMode::None));
    assert_eq!((none.compress_threads, none.auto_threads), (0, 2));
}

#[test]
fn auto_toward_this_very_host_sends_raw_and_spawns_no_stage() {
    let p = CodecPlan::decide(&CodecInputs {
        peer_is_this_host: true,
        ..inputs(CodecSite::Source, CompressMode::Auto)
    });
    assert_eq!((p.mode, p.compress_threads), (CompressMode::None, 0));
    // An explicit codec is kept.
    let p = CodecPlan::decide(&CodecInputs {
        peer_is_this_host: true,
        ..inputs(CodecSite::StreamSender, CompressMode::Zstd(5))
    });
    assert_eq!(p.mode, CompressMode::Zstd(5));
}

#[test]
fn a_sink_decompresses_in_a_stage_only_when_asked_to_compress() {
    let p = CodecPlan::decide(&inputs(CodecSite::Sink, CompressMode::Auto));
    assert_eq!(
        (p.mode, p.compress_threads, p.decompress_threads),
        (CompressMode::Auto, 0, 3)
    );
    let p = CodecPlan::decide(&inputs(CodecSite::Sink, CompressMode::None));
    assert_eq!(p.decompress_threads, 0);
    // A receiving end never says "sending raw" (it does not choose).
    let p = CodecPlan::decide(&CodecInputs {
        peer_is_this_host: true,
        ..inputs(CodecSite::Sink, CompressMode::Auto)
    });
    assert_eq!(p.mode, CompressMode::Auto);
}

#[test]
fn a_streams_net_threads_run_the_codec_of_their_own_records() {
    for site in [CodecSite::StreamSender, CodecSite::StreamReceiver] {
        let p = CodecPlan::decide(&inputs(site, CompressMode::Lz4));
        assert_eq!(
            (p.compress_threads, p.decompress_threads),
            (0, 0),
            "{site:?}"
        );
        assert_eq!((p.auto_threads, p.auto_senders), (3, 3), "{site:?}");
    }
}

#[test]
fn the_plan_holds_codec_threads_as_each_program_needs() {
    let flags = (None, None);
    assert_eq!(
        Planner::Copy(CompressMode::Lz4).codec_threads(2, 3, flags),
        (2, 3)
    );
    assert_eq!(
        Planner::Copy(CompressMode::None).codec_threads(2, 3, flags),
        (0, 0)
    );
    assert_eq!(Planner::Daemon.codec_threads(4, 8, flags), (4, 8));
    assert_eq!(Planner::Stream.codec_threads(4, 8, flags), (0, 0));
    assert_eq!(Planner::default().codec_threads(4, 8, flags), (0, 0));
    // The flags win, 0 included.
    assert_eq!(
        Planner::Daemon.codec_threads(4, 8, (Some(0), Some(1))),
        (0, 1)
    );
    assert_eq!(Planner::Stream.codec_threads(4, 8, (Some(2), None)), (2, 0));
}

#[test]
fn what_a_client_announces_and_what_a_daemon_runs_for_it() {
    use CodecSite::{Sink, Source, StreamSender};
    assert_eq!(announce(CompressMode::None, Source), Compression::None);
    assert_eq!(announce(CompressMode::Zstd(3), Sink), Compression::Zstd);
    assert_eq!(announce(CompressMode::Auto, Source), Compression::Lz4);
    assert_eq!(announce(CompressMode::Lz4, Sink), Compression::Lz4);
    // A stream announces LZ4 for any codec, as it always has.
    assert_eq!(
        announce(CompressMode::Zstd(3), StreamSender),
        Compression::Lz4
    );
    assert_eq!(
        announce(CompressMode::None, StreamSender),
        Compression::None
    );
    assert_eq!(asked_by_peer(Compression::None), CompressMode::None);
    assert_eq!(asked_by_peer(Compression::Zstd), CompressMode::Auto);
    assert_eq!(asked_by_peer(Compression::Lz4), CompressMode::Auto);
}

#[test]
fn the_plans_auto_measures_on_acknowledgements_with_its_counts() {
    let p = CodecPlan::decide(&inputs(CodecSite::Source, CompressMode::Auto));
    let auto = p.auto(true);
    let mut c = p.compressor(&auto);
    assert!(!c.is_off());
    assert!(!auto.compressing(), "auto starts raw");
    let data = compressible(1 << 16);
    let mut slot = data.clone();
    let out = c.compress(&mut slot, data.len());
    assert_eq!(out.compression, Compression::None);
    assert_eq!(c.current(), "none");
    c.record_sent((1, 0), data.len(), std::time::Duration::ZERO);
    auto.delivered((1, 0), std::time::Instant::now());
    auto.refused((1, 64));
}

/// A `width` x `height` frame of 16-bit counts, little-endian: Poisson noise around a
/// smooth image of about `mean` counts (the noise as its normal approximation, which is
/// close at these counts: variance = mean), like a detector frame of a flat sample.
pub(crate) fn poisson_frame(width: usize, height: usize, mean: f64) -> Vec<u8> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut uniform = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut out = Vec::with_capacity(width * height * 2);
    for y in 0..height {
        for col in 0..width {
            let smooth = 1.0 + 0.3 * (col as f64 / 300.0).sin() * (y as f64 / 250.0).cos();
            let lambda = mean * smooth;
            // Irwin-Hall: twelve uniforms make a standard normal.
            let normal: f64 = (0..12).map(|_| uniform()).sum::<f64>() - 6.0;
            let count = (lambda + lambda.sqrt() * normal)
                .round()
                .clamp(0.0, 65535.0) as u16;
            out.extend_from_slice(&count.to_le_bytes());
        }
    }
    out
}

/// Compresses `data` with `mode`, as `elem`-byte elements toward a peer that un-shuffles
/// bits and bytes, checks the round trip and returns what was sent.
fn round_trip_elements(mode: CompressMode, data: &[u8], elem: Option<ElementSize>) -> Compressed {
    round_trip_toward(Unshuffles::BitsAndBytes, mode, data, elem)
}

/// [`round_trip_elements`] toward a peer that un-shuffles what `peer` says.
fn round_trip_toward(
    peer: Unshuffles,
    mode: CompressMode,
    data: &[u8],
    elem: Option<ElementSize>,
) -> Compressed {
    let mut slot = data.to_vec();
    let mut c = Compressor::new(mode).with_shuffle(peer);
    let out = c.compress_elements(&mut slot, data.len(), elem);
    let mut d = Decompressor::new();
    d.decompress(
        out.compression,
        out.shuffle,
        &mut slot,
        out.wire_len,
        data.len(),
    )
    .unwrap();
    assert_eq!(&slot[..data.len()], data, "{mode} {elem:?} round trip");
    out
}

proptest::proptest! {
    /// Any length (odd tails, partial elements) and every element size: the chunk comes
    /// back whole, and what the compressor says it did is what the header will say:
    /// bytes for zstd toward a peer that undoes them, bits otherwise.
    #[test]
    fn shuffled_chunks_round_trip(
        len in 0usize..40_000,
        elem in proptest::sample::select(ElementSize::ALL.to_vec()),
        zstd in proptest::bool::ANY,
        bytes in proptest::bool::ANY,
    ) {
        let data = poisson_frame(len / 2 + 1, 1, 200.0);
        let data = &data[..len];
        let mode = if zstd { CompressMode::Zstd(1) } else { CompressMode::Lz4 };
        let peer = if bytes { Unshuffles::BitsAndBytes } else { Unshuffles::Bits };
        let out = round_trip_toward(peer, mode, data, Some(elem));
        proptest::prop_assert!(out.wire_len <= len);
        if out.compression == Compression::None {
            proptest::prop_assert_eq!((out.shuffle, out.wire_len), (None, len));
        } else if zstd && bytes {
            // Either, as the trial found on this chunk.
            let either = [Some(Shuffle::Bytes(elem)), Some(Shuffle::Bits(elem))];
            proptest::prop_assert!(either.contains(&out.shuffle));
        } else {
            proptest::prop_assert_eq!(out.shuffle, Some(Shuffle::Bits(elem)));
        }
    }
}

/// LZ4's ratio of `data` as it is, even where it does not shrink (the compressor would
/// then send it raw).
fn lz4_ratio(data: &[u8]) -> f64 {
    data.len() as f64 / lz4_flex::block::compress(data).len() as f64
}

#[test]
fn a_poisson_u16_frame_compresses_only_when_bit_shuffled() {
    // A quarter of seed 001's frame: 1280 x 1080 counts of about 1000.
    let frame = poisson_frame(1280, 1080, 1000.0);
    let plain = round_trip_elements(CompressMode::Lz4, &frame, None);
    let shuffled = round_trip_elements(CompressMode::Lz4, &frame, Some(ElementSize::Two));
    let zstd = round_trip_elements(CompressMode::Zstd(3), &frame, None);
    let zstd_shuffled = round_trip_elements(CompressMode::Zstd(3), &frame, Some(ElementSize::Two));
    let ratio = |c: Compressed| frame.len() as f64 / c.wire_len as f64;
    println!(
        "Poisson uint16 frame, mean 1000: lz4 {:.3} (sent {:.3}), lz4+shuffle {:.3}, zstd:3 {:.3}, zstd:3+shuffle {:.3}",
        lz4_ratio(&frame),
        ratio(plain),
        ratio(shuffled),
        ratio(zstd),
        ratio(zstd_shuffled)
    );
    assert!(lz4_ratio(&frame) < 1.1, "LZ4 alone finds next to nothing");
    assert_eq!(shuffled.compression, Compression::Lz4);
    assert_eq!(shuffled.shuffle, Some(Shuffle::Bits(ElementSize::Two)));
    assert!(
        ratio(shuffled) > 1.5,
        "bit-shuffled, LZ4 finds the constant high bits"
    );
    assert!(ratio(shuffled) > 1.4 * ratio(plain));
    assert!(ratio(zstd_shuffled) > ratio(zstd));
}

/// zstd level 1's bytes for `frame` put through `shuffle`.
fn zstd_bytes(frame: &[u8], shuffle: Shuffle) -> usize {
    let mut shuffled = vec![0; frame.len()];
    shuffle.apply(frame, &mut shuffled);
    zstd::bulk::compress(&shuffled, 1).unwrap().len()
}

#[test]
fn zstd_gets_the_shuffle_that_sends_fewer_bytes() {
    // Counts about 1000 (the bits win) and about 3000, the bench's tomography frames
    // (the bytes win): neither shuffle is best for both.
    let two = ElementSize::Two;
    for (mean, winner) in [(1000.0, Shuffle::Bits(two)), (3000.0, Shuffle::Bytes(two))] {
        let frame = poisson_frame(1280, 1080, mean);
        let (bits, bytes) = (
            zstd_bytes(&frame, Shuffle::Bits(two)),
            zstd_bytes(&frame, Shuffle::Bytes(two)),
        );
        println!("Poisson uint16 frame, mean {mean}, zstd:1: bit-shuffled {bits} B, byte-shuffled {bytes} B");
        let smaller = if bytes < bits {
            Shuffle::Bytes(two)
        } else {
            Shuffle::Bits(two)
        };
        assert_eq!(smaller, winner, "mean {mean}");
        let sent = round_trip_elements(CompressMode::Zstd(1), &frame, Some(two));
        assert_eq!(sent.shuffle, Some(winner), "mean {mean}");
        assert_eq!(sent.wire_len, bits.min(bytes));
        // A peer that undoes only the bit-shuffle gets it.
        let bits_only =
            round_trip_toward(Unshuffles::Bits, CompressMode::Zstd(1), &frame, Some(two));
        assert_eq!(bits_only.shuffle, Some(Shuffle::Bits(two)));
    }
}

#[test]
fn the_compressor_shuffles_only_toward_a_peer_that_unshuffles() {
    let frame = poisson_frame(256, 64, 1000.0);
    let mut slot = frame.clone();
    let out = Compressor::new(CompressMode::Lz4).compress_elements(
        &mut slot,
        frame.len(),
        Some(ElementSize::Two),
    );
    assert_eq!(out.shuffle, None, "not allowed: not shuffled");
    // Nor does a compressor that does not compress.
    let out = round_trip_elements(CompressMode::None, &frame, Some(ElementSize::Two));
    assert_eq!((out.compression, out.shuffle), (Compression::None, None));
}

#[test]
fn a_shuffled_chunk_that_is_not_compressed_is_an_error() {
    let mut slot = vec![1u8; 64];
    let mut d = Decompressor::new();
    assert!(d
        .decompress(
            Compression::None,
            Some(Shuffle::Bits(ElementSize::Two)),
            &mut slot,
            64,
            64
        )
        .is_err());
    assert!(d
        .decompress(Compression::None, None, &mut slot, 64, 64)
        .is_ok());
}

#[test]
fn describe_frames_the_header_of_what_was_sent() {
    let frame = poisson_frame(512, 64, 1000.0);
    let header = sluice_wire::ChunkHeader::plain(1, 0, &frame, true);
    let out = round_trip_elements(CompressMode::Lz4, &frame, Some(ElementSize::Two));
    let h = out.describe(header);
    assert_eq!(
        (h.compression(), h.shuffle(), h.wire_len as usize),
        (
            Compression::Lz4,
            Some(Shuffle::Bits(ElementSize::Two)),
            out.wire_len
        )
    );
    assert_eq!(
        h.checksum, header.checksum,
        "the checksum is the original bytes'"
    );
    let raw = round_trip_elements(CompressMode::Lz4, &random(4096), Some(ElementSize::Two));
    let plain = sluice_wire::ChunkHeader::plain(1, 0, &random(4096), true);
    assert_eq!(raw.describe(plain), plain);
}

#[test]
fn a_stream_sender_shuffles_only_when_it_compresses_toward_a_peer_that_unshuffles() {
    let p = CodecPlan::decide(&inputs(CodecSite::StreamSender, CompressMode::Lz4));
    assert_eq!(p.shuffle, Unshuffles::BitsAndBytes);
    assert!(p
        .compressor(&p.auto(false))
        .compress_elements(
            &mut poisson_frame(512, 64, 1000.0),
            512 * 64 * 2,
            Some(ElementSize::Two)
        )
        .shuffle
        .is_some());
    let p = CodecPlan::decide(&CodecInputs {
        peer_unshuffles: Unshuffles::Nothing,
        ..inputs(CodecSite::StreamSender, CompressMode::Lz4)
    });
    assert!(!p.shuffle.any());
    let p = CodecPlan::decide(&inputs(CodecSite::StreamSender, CompressMode::None));
    assert!(!p.shuffle.any());
    // Toward this very host, auto sends raw: nothing to shuffle for.
    let p = CodecPlan::decide(&CodecInputs {
        peer_is_this_host: true,
        ..inputs(CodecSite::StreamSender, CompressMode::Auto)
    });
    assert!(!p.shuffle.any());
    for site in [CodecSite::Sink, CodecSite::StreamReceiver] {
        assert!(!CodecPlan::decide(&inputs(site, CompressMode::Lz4))
            .shuffle
            .any());
    }
}

/// The ratios of a whole 2560 x 2160 Poisson frame, printed (for ARCHITECTURE.md):
/// `cargo test -p sluice-engine --lib whole_frame_ratios -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement: prints the ratios of a whole frame"]
fn whole_frame_ratios() {
    for mean in [100.0, 1000.0, 3000.0, 10_000.0] {
        let frame = poisson_frame(2560, 2160, mean);
        let sent = |peer, mode, elem| {
            let c = round_trip_toward(peer, mode, &frame, elem);
            frame.len() as f64 / c.wire_len as f64
        };
        let two = Some(ElementSize::Two);
        let (bits, bytes) = (Unshuffles::Bits, Unshuffles::BitsAndBytes);
        println!(
            "mean {mean}: lz4 {:.3} (sent {:.3}), lz4+bits {:.3}, zstd:1 {:.3}, zstd:1+bits {:.3}, zstd:1+bytes {:.3}, zstd:3 {:.3}, zstd:3+bits {:.3}, zstd:3+bytes {:.3}",
            lz4_ratio(&frame),
            sent(bits, CompressMode::Lz4, None),
            sent(bits, CompressMode::Lz4, two),
            sent(bits, CompressMode::Zstd(1), None),
            sent(bits, CompressMode::Zstd(1), two),
            sent(bytes, CompressMode::Zstd(1), two),
            sent(bits, CompressMode::Zstd(3), None),
            sent(bits, CompressMode::Zstd(3), two),
            sent(bytes, CompressMode::Zstd(3), two),
        );
    }
}
