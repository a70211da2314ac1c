//! Every length and count limit is enforced, with an error naming the field (or, where
//! the header alone already breaks the limit, the frame) and the limit.

// Helpers outside #[test] fns too: a panic in a test is a failed assertion.
#![allow(clippy::unwrap_used)]

use sluice_wire::*;

/// A frame from raw parts, bypassing the encoders' checked constructors.
fn raw_frame(t: FrameType, flags: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![t as u8, flags];
    v.extend_from_slice(&u32::try_from(body.len()).unwrap().to_le_bytes());
    v.extend_from_slice(body);
    v
}

fn entry_bytes(path: &[u8], kind: u8, target: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&1u64.to_le_bytes()); // file_id
    b.push(kind);
    b.extend_from_slice(&0o644u32.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes()); // size
    b.extend_from_slice(&0i64.to_le_bytes()); // mtime
    b.extend_from_slice(&u16::try_from(path.len()).unwrap().to_le_bytes());
    b.extend_from_slice(&u16::try_from(target.len()).unwrap().to_le_bytes());
    b.extend_from_slice(path);
    b.extend_from_slice(target);
    b
}

fn manifest_of(count: u16, entries: &[Vec<u8>]) -> Vec<u8> {
    let mut body = count.to_le_bytes().to_vec();
    for e in entries {
        body.extend_from_slice(e);
    }
    raw_frame(FrameType::Manifest, 0, &body)
}

fn assert_limit(e: DecodeError, field: &str, limit: u64) {
    match &e {
        DecodeError::LimitExceeded {
            field: f, limit: l, ..
        } => {
            assert_eq!((*f, *l), (field, limit), "{e}");
        }
        other => panic!("expected LimitExceeded on {field}, got {other:?}"),
    }
    let text = e.to_string();
    assert!(
        text.contains(field) && text.contains(&limit.to_string()),
        "{text}"
    );
}

#[test]
fn oversized_path_in_manifest() {
    let long = "a/".repeat(2048) + "bc"; // 4098 bytes
    let bytes = manifest_of(1, &[entry_bytes(long.as_bytes(), 0, b"")]);
    assert_limit(
        Frame::decode(&bytes).unwrap_err(),
        "FileEntry.path",
        MAX_PATH_BYTES as u64,
    );
}

#[test]
fn oversized_component_in_manifest() {
    let long = format!("ok/{}", "c".repeat(256));
    let bytes = manifest_of(1, &[entry_bytes(long.as_bytes(), 0, b"")]);
    match Frame::decode(&bytes).unwrap_err() {
        DecodeError::Path { field, source } => {
            assert_eq!(field, "FileEntry.path");
            assert_eq!(
                source.reason,
                PathErrorKind::ComponentTooLong {
                    index: 1,
                    len: 256,
                    max: 255
                }
            );
            assert!(source.to_string().contains("limit 255"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn unsafe_paths_in_manifest() {
    for p in [
        &b"/etc/passwd"[..],
        b"a/../../x",
        b"a//b",
        b"./a",
        b"a\0b",
        b"",
    ] {
        let bytes = manifest_of(1, &[entry_bytes(p, 0, b"")]);
        assert!(
            matches!(
                Frame::decode(&bytes),
                Err(DecodeError::Path {
                    field: "FileEntry.path",
                    ..
                })
            ),
            "{p:?}"
        );
    }
}

#[test]
fn oversized_symlink_target() {
    let bytes = manifest_of(1, &[entry_bytes(b"l", 2, &[b't'; 4097])]);
    assert_limit(
        Frame::decode(&bytes).unwrap_err(),
        "FileEntry.symlink_target",
        4096,
    );
}

#[test]
fn manifest_count_over_limit() {
    let bytes = manifest_of(1025, &[entry_bytes(b"a", 0, b"")]);
    assert_limit(
        Frame::decode(&bytes).unwrap_err(),
        "Manifest.entries",
        MAX_MANIFEST_ENTRIES as u64,
    );
}

#[test]
fn manifest_count_larger_than_body_does_not_allocate_for_it() {
    // 1024 entries claimed, one present: fails as truncated, having reserved for one.
    let bytes = manifest_of(1024, &[entry_bytes(b"a", 0, b"")]);
    assert!(matches!(
        Frame::decode(&bytes),
        Err(DecodeError::Truncated {
            field: "FileEntry.file_id"
        })
    ));
}

#[test]
fn control_body_over_one_mib() {
    let mut header = vec![FrameType::Manifest as u8, 0];
    header.extend_from_slice(&(MAX_CONTROL_BODY_BYTES + 1).to_le_bytes());
    // Refused from the 6-byte header alone, before any body arrives.
    let e = Frame::decode(&header).unwrap_err();
    assert_eq!(
        e,
        DecodeError::BodyLength {
            frame: "Manifest",
            len: MAX_CONTROL_BODY_BYTES + 1,
            min: 2,
            max: MAX_CONTROL_BODY_BYTES
        }
    );
    assert!(e.to_string().contains("1048576"));
}

#[test]
fn open_path_over_limit_is_refused_by_its_header() {
    let mut body = vec![0, 0, 0, 0, 1, 0, 0, 0, 0, 0];
    body.extend_from_slice(&4097u16.to_le_bytes());
    body.extend_from_slice(&[b'a'; 4097]);
    let e = Frame::decode(&raw_frame(FrameType::Open, 0, &body)).unwrap_err();
    assert!(
        matches!(
            e,
            DecodeError::BodyLength {
                frame: "Open",
                max: 4108,
                ..
            }
        ),
        "{e:?}"
    );
    // With a body that fits but a length field that lies.
    let mut body = vec![0, 0, 0, 0, 1, 0, 0, 0, 0, 0];
    body.extend_from_slice(&5000u16.to_le_bytes());
    body.extend_from_slice(&[b'a'; 10]);
    assert_limit(
        Frame::decode(&raw_frame(FrameType::Open, 0, &body)).unwrap_err(),
        "Open.path",
        4096,
    );
}

#[test]
fn open_streams_over_limit() {
    let mut body = vec![0, 0, 0, 0];
    body.extend_from_slice(&(MAX_STREAMS + 1).to_le_bytes());
    body.extend_from_slice(&0u32.to_le_bytes());
    body.extend_from_slice(&0u16.to_le_bytes());
    assert_limit(
        Frame::decode(&raw_frame(FrameType::Open, 0, &body)).unwrap_err(),
        "Open.streams",
        MAX_STREAMS.into(),
    );
}

#[test]
fn accept_channel_and_stream_limits() {
    let mk = |channels: u16, spc: u16| {
        let mut b = vec![0u8; 8 + 32];
        b.extend_from_slice(&channels.to_le_bytes());
        b.extend_from_slice(&spc.to_le_bytes());
        b.extend_from_slice(&DEFAULT_CHUNK_BYTES.to_le_bytes());
        raw_frame(FrameType::Accept, 0, &b)
    };
    assert_limit(
        Frame::decode(&mk(MAX_CHANNELS + 1, 1)).unwrap_err(),
        "Accept.channels",
        MAX_CHANNELS.into(),
    );
    assert_limit(
        Frame::decode(&mk(16, 17)).unwrap_err(),
        "Accept.streams_per_channel",
        MAX_STREAMS.into(),
    );
    assert!(Frame::decode(&mk(16, 16)).is_ok());
}

#[test]
fn addresses_are_bounded_ordered_and_well_formed() {
    let entry = |stream: u16, family: u8, ip: &[u8], port: u16| {
        let mut b = stream.to_le_bytes().to_vec();
        b.push(family);
        b.extend_from_slice(ip);
        b.extend_from_slice(&port.to_le_bytes());
        b
    };
    let mk = |count: u16, entries: &[Vec<u8>]| {
        let mut b = count.to_le_bytes().to_vec();
        for e in entries {
            b.extend_from_slice(e);
        }
        raw_frame(FrameType::Addresses, 0, &b)
    };
    let v4 = |s| entry(s, 4, &[10, 0, 1, 2], 7878);
    let (ok, _) = Frame::decode(&mk(2, &[v4(0), entry(3, 6, &[0; 16], 1)])).unwrap();
    let Frame::Addresses(a) = ok else {
        panic!("{ok:?}")
    };
    assert_eq!(a.of(0), Some("10.0.1.2:7878".parse().unwrap()));
    assert_eq!(a.of(3), Some("[::]:1".parse().unwrap()));
    assert_eq!(a.of(1), None);
    // More entries than streams can exist: refused before anything is allocated.
    assert_limit(
        Frame::decode(&mk(MAX_STREAMS + 1, &[])).unwrap_err(),
        "Addresses.count",
        MAX_STREAMS.into(),
    );
    let invalid = |bytes: Vec<u8>, field: &str| {
        let e = Frame::decode(&bytes).unwrap_err();
        assert!(
            matches!(&e, DecodeError::InvalidValue { field: f, .. } if *f == field),
            "{field}: {e:?}"
        );
    };
    invalid(mk(2, &[v4(1), v4(1)]), "Addresses.stream_index");
    invalid(mk(2, &[v4(2), v4(1)]), "Addresses.stream_index");
    invalid(mk(1, &[v4(MAX_STREAMS)]), "Addresses.stream_index");
    invalid(mk(1, &[entry(0, 5, &[1, 2, 3, 4], 1)]), "Addresses.family");
    invalid(mk(1, &[entry(0, 4, &[1, 2, 3, 4], 0)]), "Addresses.port");
}

#[test]
fn a_delegate_names_every_stream_once_and_its_flags_and_key_are_checked() {
    let target = |stream: u16| {
        let mut b = stream.to_le_bytes().to_vec();
        b.push(4);
        b.extend_from_slice(&[10, 0, 0, 2]);
        b.extend_from_slice(&7878u16.to_le_bytes());
        b
    };
    let mk = |channels: u16, spc: u16, flags: u8, fp: u8, streams: &[u16]| {
        let mut b = 9u64.to_le_bytes().to_vec();
        b.extend_from_slice(&[7; 32]);
        b.extend_from_slice(&channels.to_le_bytes());
        b.extend_from_slice(&spc.to_le_bytes());
        b.extend_from_slice(&(4u32 << 20).to_le_bytes());
        b.push(flags);
        b.extend_from_slice(&[fp; 32]);
        b.extend_from_slice(&u16::try_from(streams.len()).unwrap().to_le_bytes());
        for s in streams {
            b.extend_from_slice(&target(*s));
        }
        raw_frame(FrameType::Delegate, 0, &b)
    };
    let (ok, _) = Frame::decode(&mk(1, 2, DELEGATE_TLS, 3, &[0, 1])).unwrap();
    let Frame::Delegate(d) = ok else {
        panic!("{ok:?}")
    };
    assert_eq!((d.streams(), d.tls, d.fingerprint), (2, true, [3; 32]));
    assert!(
        !format!("{d:?}").contains("7, 7"),
        "the join key is redacted in Debug"
    );
    let invalid = |bytes: Vec<u8>, field: &str| {
        let e = Frame::decode(&bytes).unwrap_err();
        assert!(
            matches!(&e, DecodeError::InvalidValue { field: f, .. } if *f == field),
            "{field}: {e:?}"
        );
    };
    // A stream without a target, one named twice, or one too many.
    invalid(mk(1, 2, 0, 0, &[0]), "Delegate.count");
    invalid(mk(1, 2, 0, 0, &[0, 0]), "Delegate.stream_index");
    invalid(mk(1, 2, 0, 0, &[0, 2]), "Delegate.count");
    invalid(mk(1, 1, 0, 0, &[0, 1]), "Delegate.count");
    invalid(mk(0, 1, 0, 0, &[]), "Delegate.channels");
    invalid(mk(1, 0, 0, 0, &[]), "Delegate.streams_per_channel");
    invalid(mk(64, 5, 0, 0, &[]), "Delegate.streams_per_channel");
    invalid(mk(1, 1, 0x02, 0, &[0]), "Delegate.flags");
    // A fingerprint without TLS would pin nothing: not canonical, refused.
    invalid(mk(1, 1, 0, 1, &[0]), "Delegate.fingerprint");
}

fn chunk_bytes_raw(raw_len: u32, wire_len: u32, segments: u16, flags: u8, table: usize) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&1u64.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes());
    b.extend_from_slice(&raw_len.to_le_bytes());
    b.extend_from_slice(&wire_len.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes());
    b.extend_from_slice(&segments.to_le_bytes());
    b.extend_from_slice(&0u16.to_le_bytes());
    b.extend(std::iter::repeat_n(0u8, table));
    raw_frame(FrameType::Chunk, flags, &b)
}

#[test]
fn wire_len_over_max_chunk() {
    let bytes = chunk_bytes_raw(MAX_CHUNK_BYTES + 1, MAX_CHUNK_BYTES + 1, 0, 0, 0);
    assert_limit(
        ChunkHeader::decode(&bytes).unwrap_err(),
        "Chunk.wire_len",
        MAX_CHUNK_BYTES.into(),
    );
    assert_limit(
        Frame::decode(&bytes).unwrap_err(),
        "Chunk.wire_len",
        MAX_CHUNK_BYTES.into(),
    );
    // Against the session's chunk size, in the decoder too.
    let bytes = chunk_bytes_raw(DEFAULT_CHUNK_BYTES + 1, DEFAULT_CHUNK_BYTES + 1, 0, 0, 0);
    assert_limit(
        ChunkHeader::decode_limited(&bytes, DEFAULT_CHUNK_BYTES).unwrap_err(),
        "Chunk.wire_len",
        DEFAULT_CHUNK_BYTES.into(),
    );
    let mut dec = FrameDecoder::with_max_chunk_bytes(DEFAULT_CHUNK_BYTES);
    dec.feed(&bytes);
    assert_limit(
        dec.next().unwrap().unwrap_err(),
        "Chunk.wire_len",
        DEFAULT_CHUNK_BYTES.into(),
    );
}

#[test]
fn raw_len_over_max_chunk_with_small_wire_len() {
    let lz4 = ChunkFlags::COMPRESSED_LZ4.bits();
    let bytes = chunk_bytes_raw(MAX_CHUNK_BYTES + 1, 10, 0, lz4, 0);
    assert_limit(
        ChunkHeader::decode(&bytes).unwrap_err(),
        "Chunk.raw_len",
        MAX_CHUNK_BYTES.into(),
    );
}

#[test]
fn segment_count_over_limit() {
    let packed = (ChunkFlags::PACKED | ChunkFlags::LAST).bits();
    // A segments field that exceeds the limit while body_len is in range.
    let bytes = chunk_bytes_raw(100, 100, MAX_PACK_SEGMENTS + 1, packed, 12);
    assert_limit(
        ChunkHeader::decode(&bytes).unwrap_err(),
        "Chunk.segments",
        MAX_PACK_SEGMENTS.into(),
    );
    // A body too long for any table is refused from the header.
    let bytes = chunk_bytes_raw(100, 100, 1, packed, 12 * (MAX_PACK_SEGMENTS as usize + 1));
    assert!(matches!(
        ChunkHeader::decode(&bytes),
        Err(DecodeError::BodyLength { frame: "Chunk", .. })
    ));
}

#[test]
fn have_chunk_count_over_limit() {
    let mut b = Vec::new();
    b.extend_from_slice(&1u64.to_le_bytes());
    b.push(2); // Partial
    b.extend_from_slice(&0u64.to_le_bytes());
    b.extend_from_slice(&0i64.to_le_bytes());
    b.extend_from_slice(&(u32::try_from(MAX_FILE_CHUNKS).unwrap() + 1).to_le_bytes());
    b.extend_from_slice(&[0; 16]);
    assert_limit(
        Frame::decode(&raw_frame(FrameType::Have, 0, &b)).unwrap_err(),
        "Have.chunk_count",
        MAX_FILE_CHUNKS,
    );
}

#[test]
fn messages_over_limit() {
    let mut b = 1u16.to_le_bytes().to_vec();
    b.extend_from_slice(&1025u16.to_le_bytes());
    b.extend_from_slice(&[b'm'; 1020]);
    assert_limit(
        Frame::decode(&raw_frame(FrameType::Error, 0, &b)).unwrap_err(),
        "Error.message",
        1024,
    );
    // Constructors cut long messages so that they always encode validly.
    let f = ErrorFrame::new(ErrorCode::Io, "é".repeat(2000));
    assert!(f.message.len() <= MAX_MESSAGE_BYTES);
    let mut out = Vec::new();
    f.encode(&mut out);
    assert_eq!(ErrorFrame::decode(&out).unwrap().0, f);
}

#[test]
fn flags_and_trailing_bytes() {
    let mut out = Vec::new();
    CloseAck.encode(&mut out);
    out[1] = 0x80;
    assert!(matches!(
        Frame::decode(&out),
        Err(DecodeError::BadFlags {
            frame: "CloseAck",
            flags: 0x80
        })
    ));
    // FileDone is fixed at 24 bytes; 25 is refused by the header.
    let bytes = raw_frame(FrameType::FileDone, 0, &[0; 25]);
    assert!(matches!(
        Frame::decode(&bytes),
        Err(DecodeError::BodyLength { .. })
    ));
    // Manifest with a spare byte after its last entry.
    let mut m = manifest_of(1, &[entry_bytes(b"a", 0, b"")]);
    m.push(0);
    let len = u32::try_from(m.len() - 6).unwrap();
    m[2..6].copy_from_slice(&len.to_le_bytes());
    assert!(matches!(
        Frame::decode(&m),
        Err(DecodeError::TrailingBytes {
            frame: "Manifest",
            extra: 1
        })
    ));
}
