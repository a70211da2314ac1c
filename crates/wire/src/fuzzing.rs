//! Entry points for fuzzers and property tests: each runs decoders over arbitrary bytes.
//!
//! No decoder they call may panic, and none may allocate more than the limits allow,
//! whatever the input. They also `assert!` properties of what does decode (canonical
//! re-encoding, limits respected, state machines emitting decodable frames): a panic here
//! is a finding. The cargo-fuzz targets in `fuzz/` call them, and so does the proptest in
//! `tests/fuzz_decode.rs`.

use crate::chunk::{Chunk, ChunkHeader, Segment};
use crate::codec::{Codec, FrameHeader};
use crate::decoder::FrameDecoder;
use crate::frame::*;
use crate::handshake::{ClientConfig, ClientHandshake, ServerConfig, ServerHandshake};
use crate::join::{ClientJoin, JoinTable};
use crate::path::RelPath;
use crate::{auth::Token, MIN_CHUNK_BYTES};

/// Runs every decoder family on `data`.
pub fn fuzz_decode_all(data: &[u8]) {
    frame(data);
    chunk_header(data);
    manifest(data);
    handshake(data);
}

/// `Frame::decode`, every typed decoder, and `FrameDecoder` fed in uneven pieces.
pub fn frame(data: &[u8]) {
    let _ = FrameHeader::decode(data);
    if let Ok((f, n)) = Frame::decode(data) {
        assert!(n <= data.len());
        // Whatever decodes re-encodes to the same bytes (canonical encoding); `Hello` and
        // `Welcome` may carry ignored extension bytes, and chunk payload is not part of it.
        let mut again = Vec::new();
        f.encode(&mut again);
        if !matches!(f, Frame::Hello(_) | Frame::Welcome(_)) {
            assert_eq!(again, data[..n]);
        }
    }
    let _ = Frame::decode_limited(data, MIN_CHUNK_BYTES);
    let _ = Hello::decode(data);
    let _ = Welcome::decode(data);
    let _ = AuthProof::decode(data);
    let _ = AuthOk::decode(data);
    let _ = Open::decode(data).map(|(o, _)| o.target());
    let _ = Accept::decode(data);
    let _ = Addresses::decode(data);
    let _ = Delegate::decode(data);
    let _ = Join::decode(data);
    let _ = Joined::decode(data);
    let _ = ChunkAck::decode(data);
    let _ = ChunkNack::decode(data);
    let _ = FileDone::decode(data);
    let _ = FileFailed::decode(data);
    let _ = ErrorFrame::decode(data);
    let _ = Close::decode(data);
    let _ = CloseAck::decode(data);

    // Piece sizes from the first byte, so the fuzzer explores splits.
    let step = usize::from(data.first().copied().unwrap_or(1)).max(1);
    let mut dec = FrameDecoder::with_max_chunk_bytes(MIN_CHUNK_BYTES);
    let mut slot = vec![0u8; 4096];
    let mut rest = data;
    let mut frames = 0usize;
    loop {
        let n = dec.feed(&rest[..rest.len().min(step)]);
        rest = &rest[n..];
        loop {
            match dec.next() {
                Some(Ok(_)) => frames += 1,
                Some(Err(_)) => break,
                None if dec.payload_remaining() > 0 && dec.buffered() > 0 => {
                    dec.read_payload(&mut slot);
                }
                None => break,
            }
        }
        if n == 0 || rest.is_empty() || dec.is_failed() {
            break;
        }
    }
    let _ = dec.finish();
    assert!(dec.buffered() <= FrameDecoder::CAPACITY);
    assert!(frames <= data.len());
}

/// `ChunkHeader`, the segment table and `Chunk`, with several chunk limits.
pub fn chunk_header(data: &[u8]) {
    for max in [
        MIN_CHUNK_BYTES,
        crate::DEFAULT_CHUNK_BYTES,
        crate::MAX_CHUNK_BYTES,
    ] {
        if let Ok((h, n)) = ChunkHeader::decode_limited(data, max) {
            assert!(h.wire_len <= max && h.raw_len <= max);
            let mut segs = Vec::new();
            if Segment::decode_table(&data[n..], &h, &mut segs).is_ok() {
                assert_eq!(segs.len(), usize::from(h.segments));
            }
            let _ = h.validate_geometry(max, u64::from(h.raw_len));
            let _ = h.verify(&data[n..]);
            if let Some(shuffle) = h.shuffle() {
                // Unshuffling takes any bytes: it must neither fail nor panic.
                let payload = &data[n..];
                let mut out = vec![0; payload.len()];
                shuffle.undo(payload, &mut out);
            }
        }
        let _ = Chunk::decode_limited(data, max);
    }
}

/// `Manifest`, `ManifestEnd`, `Have` and `RelPath`.
pub fn manifest(data: &[u8]) {
    let _ = Manifest::decode(data);
    let _ = ManifestEnd::decode(data);
    if let Ok((
        Have {
            state: HaveState::Partial { chunks, .. },
            ..
        },
        _,
    )) = Have::decode(data)
    {
        assert!(chunks.len() <= chunks.chunk_count());
    }
    let s = String::from_utf8_lossy(data);
    if let Ok(p) = RelPath::parse(&s) {
        assert!(!p.as_str().is_empty() && !p.components().any(|c| c == ".." || c.is_empty()));
    }
    let _ = RelPath::parse_target(&s);
}

/// The handshake and join state machines, driven by frames decoded from `data`.
pub fn handshake(data: &[u8]) {
    let token = Token::new(*b"fuzz-token").ok();
    let mut server = ServerHandshake::new(ServerConfig::new(token.clone()), [1; 32]);
    let mut open_server = ServerHandshake::new(ServerConfig::new(None), [2; 32]);
    let mut client = ClientHandshake::new(ClientConfig::new(token), [3; 32]);
    let mut out = Vec::new();
    client.start(&mut out);
    let accept = Accept {
        session_id: 9,
        session_secret: [4; 32],
        channels: 2,
        streams_per_channel: 2,
        chunk_bytes: MIN_CHUNK_BYTES,
    };
    let mut table = JoinTable::new(&accept, [5; 32]);
    let mut client_join = ClientJoin::new(&accept, &[5; 32], 1).ok();

    let mut dec = FrameDecoder::new();
    dec.feed(data);
    for frame in dec.by_ref().take(64) {
        let Ok(frame) = frame else { break };
        out.clear();
        let _ = server.handle(&frame, &mut out);
        let _ = open_server.handle(&frame, &mut out);
        let _ = client.handle(&frame, &mut out);
        if let Frame::Join(j) = &frame {
            let _ = table.handle(j, &mut out);
        }
        if let Some(cj) = client_join.as_mut() {
            let _ = cj.handle(&frame);
        }
        // Whatever the state machines wrote must decode.
        let mut check = FrameDecoder::new();
        check.feed(&out);
        for f in check.by_ref() {
            assert!(f.is_ok());
        }
    }
    assert!(table.joined_count() <= table.streams());
}
