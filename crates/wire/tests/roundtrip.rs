//! encode → decode is the identity for every frame, consuming exactly the encoded bytes,
//! through `Frame::decode`, the frame's own `Codec::decode`, and `FrameDecoder` fed in
//! random pieces.

// Helpers outside #[test] fns too: a panic in a test is a failed assertion.
#![allow(clippy::unwrap_used)]

mod common;

use common::{arb_frame, encode};
use proptest::prelude::*;
use sluice_wire::*;

/// Decodes `bytes` with the typed decoder of `frame`'s type.
fn typed(frame: &Frame, bytes: &[u8]) -> (Frame, usize) {
    fn d<T: Codec + Into<Frame>>(b: &[u8]) -> (Frame, usize) {
        let (v, n) = T::decode(b).unwrap();
        (v.into(), n)
    }
    match frame {
        Frame::Hello(_) => d::<Hello>(bytes),
        Frame::Welcome(_) => d::<Welcome>(bytes),
        Frame::AuthProof(_) => d::<AuthProof>(bytes),
        Frame::AuthOk(_) => d::<AuthOk>(bytes),
        Frame::Open(_) => d::<Open>(bytes),
        Frame::Accept(_) => d::<Accept>(bytes),
        Frame::Addresses(_) => d::<Addresses>(bytes),
        Frame::Delegate(_) => d::<Delegate>(bytes),
        Frame::Join(_) => d::<Join>(bytes),
        Frame::Joined(_) => d::<Joined>(bytes),
        Frame::Chunk(_) => d::<Chunk>(bytes),
        Frame::Manifest(_) => d::<Manifest>(bytes),
        Frame::ManifestEnd(_) => d::<ManifestEnd>(bytes),
        Frame::Have(_) => d::<Have>(bytes),
        Frame::ChunkAck(_) => d::<ChunkAck>(bytes),
        Frame::ChunkNack(_) => d::<ChunkNack>(bytes),
        Frame::FileDone(_) => d::<FileDone>(bytes),
        Frame::FileFailed(_) => d::<FileFailed>(bytes),
        Frame::Error(_) => d::<ErrorFrame>(bytes),
        Frame::Close(_) => d::<Close>(bytes),
        Frame::CloseAck(_) => d::<CloseAck>(bytes),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4000))]

    #[test]
    fn every_frame_round_trips(frame in arb_frame(), trailing in prop::collection::vec(any::<u8>(), 0..8)) {
        let bytes = encode(&frame);
        let (header, _) = FrameHeader::decode(&bytes).unwrap();
        prop_assert_eq!(header.frame_type, frame.frame_type());
        prop_assert_eq!(header.frame_len(), bytes.len());

        let mut with_tail = bytes.clone();
        with_tail.extend_from_slice(&trailing);
        let (decoded, n) = Frame::decode(&with_tail).unwrap();
        prop_assert_eq!(&decoded, &frame);
        prop_assert_eq!(n, bytes.len());
        prop_assert_eq!(typed(&frame, &with_tail), (frame.clone(), bytes.len()));

        // Every strict prefix is Incomplete, never an error or a different frame.
        for cut in [0, 1, 5, 6, bytes.len() / 2, bytes.len() - 1] {
            if cut < bytes.len() {
                let is_incomplete = matches!(Frame::decode(&bytes[..cut]), Err(DecodeError::Incomplete { .. }));
                prop_assert!(is_incomplete, "prefix {} of {:?}", cut, frame.frame_type());
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn decoder_reassembles_streams(frames in prop::collection::vec(arb_frame(), 1..8), piece in 1usize..3000) {
        let frames: Vec<Frame> = frames.into_iter().map(small_payload).collect();
        let mut wire = Vec::new();
        let mut payload_total = 0usize;
        for f in &frames {
            f.encode(&mut wire);
            if let Frame::Chunk(c) = f {
                payload_total += c.header.wire_len as usize;
                wire.extend(std::iter::repeat_n(0xAB, c.header.wire_len as usize));
            }
        }
        let mut dec = FrameDecoder::new();
        let mut got = Vec::new();
        let mut slot = vec![0u8; 4096];
        let mut payload_seen = 0usize;
        let mut rest = &wire[..];
        while !rest.is_empty() {
            let n = dec.feed(&rest[..rest.len().min(piece)]);
            rest = &rest[n..];
            loop {
                if dec.payload_remaining() > 0 {
                    if dec.buffered() == 0 {
                        break;
                    }
                    payload_seen += dec.read_payload(&mut slot);
                    continue;
                }
                match dec.next() {
                    Some(f) => got.push(f.unwrap()),
                    None => break,
                }
            }
        }
        prop_assert!(dec.finish().is_ok());
        prop_assert_eq!(got, frames);
        prop_assert_eq!(payload_seen, payload_total);
    }
}

/// Chunks with payloads small enough to send for real in a test.
fn small_payload(f: Frame) -> Frame {
    match f {
        Frame::Chunk(mut c) if !c.header.is_packed() => {
            c.header.raw_len = c.header.raw_len % 100_000 + 1;
            c.header.wire_len = match c.header.compression() {
                Compression::None => c.header.raw_len,
                _ => c.header.wire_len.min(c.header.raw_len),
            };
            Frame::Chunk(c)
        }
        f => f,
    }
}
