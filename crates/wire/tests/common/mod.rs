//! Proptest strategies for every frame, shared by the round-trip and fuzz tests.
#![allow(dead_code)]

use proptest::prelude::*;
use sluice_wire::*;

pub fn arb_component() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z0-9_.-]{1,12}",
        "\\PC{1,8}",
        Just("x".repeat(MAX_COMPONENT_BYTES)),
    ]
    .prop_filter("not . or ..", |c| {
        c != "."
            && c != ".."
            && !c.contains('/')
            && !c.contains('\0')
            && c.len() <= MAX_COMPONENT_BYTES
    })
}

pub fn arb_relpath() -> impl Strategy<Value = RelPath> {
    prop::collection::vec(arb_component(), 1..6)
        .prop_filter_map("too long", |cs| RelPath::parse(&cs.join("/")).ok())
}

pub fn arb_caps() -> impl Strategy<Value = Capabilities> {
    any::<u64>().prop_map(Capabilities::from_bits_retain)
}

pub fn arb_code() -> impl Strategy<Value = ErrorCode> {
    prop::sample::select(ErrorCode::ALL.to_vec())
}

pub fn arb_message() -> impl Strategy<Value = String> {
    prop_oneof!["\\PC{0,40}", Just("é".repeat(MAX_MESSAGE_BYTES / 2))]
}

pub fn arb_chunk_bytes() -> impl Strategy<Value = u32> {
    (16u32..=26).prop_map(|s| 1 << s)
}

pub fn arb_compression() -> impl Strategy<Value = Compression> {
    prop_oneof![
        Just(Compression::None),
        Just(Compression::Lz4),
        Just(Compression::Zstd)
    ]
}

pub fn arb_entry() -> impl Strategy<Value = FileEntry> {
    (
        any::<u64>(),
        arb_relpath(),
        0u8..3,
        any::<u64>(),
        0u32..=0o7777,
        any::<i64>(),
        "[^\0]{1,30}",
    )
        .prop_map(|(file_id, path, kind, size, mode, mtime_ns, target)| {
            let kind = [FileKind::File, FileKind::Dir, FileKind::Symlink][kind as usize];
            FileEntry {
                file_id,
                path,
                kind,
                size: if kind == FileKind::File { size } else { 0 },
                mode,
                mtime_ns,
                symlink_target: (kind == FileKind::Symlink).then_some(target),
            }
        })
}

pub fn arb_chunk_set() -> impl Strategy<Value = ChunkSet> {
    (1u64..2000, prop::collection::vec(any::<u64>(), 0..50)).prop_map(|(n, idx)| {
        let mut s = ChunkSet::new(n).unwrap();
        for i in idx {
            s.insert(i % n);
        }
        s
    })
}

pub fn arb_have_state() -> impl Strategy<Value = HaveState> {
    prop_oneof![
        Just(HaveState::Missing),
        (any::<u64>(), any::<i64>(), any::<[u8; 16]>()).prop_map(|(size, mtime_ns, digest)| {
            HaveState::Complete {
                size,
                mtime_ns,
                digest,
            }
        }),
        (any::<u64>(), any::<i64>(), arb_chunk_set()).prop_map(|(size, mtime_ns, chunks)| {
            HaveState::Partial {
                size,
                mtime_ns,
                chunks,
            }
        }),
        Just(HaveState::Skip(SkipReason::Exists)),
        Just(HaveState::Skip(SkipReason::Newer)),
    ]
}

pub fn arb_chunk() -> impl Strategy<Value = Chunk> {
    let plain = (
        any::<u64>(),
        0u64..(1 << 40),
        1u32..=MAX_CHUNK_BYTES,
        any::<u64>(),
        arb_compression(),
        any::<bool>(),
        any::<prop::sample::Index>(),
        prop::option::of((
            prop::sample::select(shuffle::ElementSize::ALL.to_vec()),
            any::<bool>(),
        )),
    )
        .prop_map(
            |(file_id, offset, raw_len, checksum, comp, last, w, elem)| {
                let mut h = ChunkHeader::plain(file_id, offset, &[], last);
                h.raw_len = raw_len;
                h.wire_len = raw_len;
                h.checksum = checksum;
                let wire_len = u32::try_from(w.index(raw_len as usize)).unwrap() + 1;
                // Only a compressed chunk may be shuffled.
                let shuffle = elem
                    .filter(|_| comp != Compression::None)
                    .map(|(e, bytes)| {
                        if bytes {
                            shuffle::Shuffle::Bytes(e)
                        } else {
                            shuffle::Shuffle::Bits(e)
                        }
                    });
                Chunk {
                    header: h.compressed(comp, wire_len).shuffled(shuffle),
                    segments: Vec::new(),
                }
            },
        );
    let packed = (
        any::<u32>(),
        prop::collection::vec((1u64..1000, 1u32..5000), 1..64),
        any::<u64>(),
    )
        .prop_map(|(base, parts, checksum)| {
            let mut id = u64::from(base);
            let segments: Vec<Segment> = parts
                .into_iter()
                .map(|(step, len)| {
                    id += step;
                    Segment { file_id: id, len }
                })
                .collect();
            let mut c = Chunk::packed(segments, &[]);
            c.header.raw_len = c.segments.iter().map(|s| s.len).sum();
            c.header.wire_len = c.header.raw_len;
            c.header.checksum = checksum;
            c
        });
    prop_oneof![plain, packed]
}

pub fn arb_frame() -> impl Strategy<Value = Frame> {
    prop_oneof![
        (any::<u16>(), arb_caps(), any::<[u8; 32]>()).prop_flat_map(|(v, caps, nonce)| {
            (1..=v.max(1)).prop_map(move |min| {
                Frame::Hello(Hello {
                    version: v.max(1),
                    min_version: min,
                    capabilities: caps,
                    client_nonce: nonce,
                })
            })
        }),
        (1u16.., arb_caps(), any::<[u8; 32]>(), any::<bool>()).prop_map(
            |(version, capabilities, server_nonce, auth_required)| {
                Frame::Welcome(Welcome {
                    version,
                    capabilities,
                    server_nonce,
                    auth_required,
                })
            }
        ),
        any::<[u8; 32]>().prop_map(|mac| Frame::AuthProof(AuthProof { mac })),
        any::<[u8; 32]>().prop_map(|mac| Frame::AuthOk(AuthOk { mac })),
        (
            0u8..3,
            "[^\0]{0,64}",
            1u16..=MAX_STREAMS,
            prop_oneof![Just(0u32), arb_chunk_bytes()],
            any::<[bool; 7]>(),
            arb_compression()
        )
            .prop_map(|(d, path, streams, chunk_bytes, b, compress)| {
                Frame::Open(Open {
                    direction: match d {
                        0 => Direction::Push,
                        1 => Direction::Pull,
                        _ => Direction::Deliver,
                    },
                    path,
                    options: OpenOptions {
                        streams,
                        chunk_bytes,
                        resume: b[0],
                        no_clobber: b[1],
                        update: b[2],
                        fsync: b[3],
                        verify: b[4],
                        recursive: b[5],
                        compress,
                        direct: b[6],
                    },
                })
            }),
        (
            any::<u64>(),
            any::<[u8; 32]>(),
            1u16..=8,
            1u16..=32,
            arb_chunk_bytes()
        )
            .prop_map(|(session_id, session_secret, channels, spc, chunk_bytes)| {
                Frame::Accept(Accept {
                    session_id,
                    session_secret,
                    channels,
                    streams_per_channel: spc,
                    chunk_bytes,
                })
            }),
        prop::collection::btree_map(
            0u16..MAX_STREAMS,
            (any::<std::net::IpAddr>(), 1u16..),
            0..12
        )
        .prop_map(|m| Frame::Addresses(Addresses {
            entries: m
                .into_iter()
                .map(|(stream_index, (ip, port))| StreamAddress {
                    stream_index,
                    addr: std::net::SocketAddr::new(ip, port),
                })
                .collect(),
        })),
        (
            any::<u64>(),
            any::<[u8; 32]>(),
            1u16..=4,
            1u16..=8,
            arb_chunk_bytes(),
            prop::option::of(any::<[u8; 32]>()),
            prop::collection::vec((any::<std::net::IpAddr>(), 1u16..), 32),
        )
            .prop_map(
                |(session_id, join_key, channels, spc, chunk_bytes, fp, addrs)| {
                    let streams = usize::from(channels * spc);
                    Frame::Delegate(Delegate {
                        session_id,
                        join_key,
                        channels,
                        streams_per_channel: spc,
                        chunk_bytes,
                        tls: fp.is_some(),
                        fingerprint: fp.unwrap_or([0; 32]),
                        targets: addrs
                            .into_iter()
                            .take(streams)
                            .enumerate()
                            .map(|(i, (ip, port))| StreamAddress {
                                stream_index: u16::try_from(i).unwrap(),
                                addr: std::net::SocketAddr::new(ip, port),
                            })
                            .collect(),
                    })
                }
            ),
        (
            any::<u64>(),
            any::<[u8; 32]>(),
            0u16..MAX_STREAMS,
            0u16..MAX_CHANNELS
        )
            .prop_map(
                |(session_id, mac, stream_index, channel)| Frame::Join(Join {
                    session_id,
                    mac,
                    stream_index,
                    channel
                })
            ),
        (any::<u16>(), any::<u16>()).prop_map(|(stream_index, channel)| Frame::Joined(Joined {
            stream_index,
            channel
        })),
        arb_chunk().prop_map(Frame::Chunk),
        prop::collection::vec(arb_entry(), 1..20)
            .prop_map(|entries| Frame::Manifest(Manifest { entries })),
        (any::<u64>(), any::<u64>())
            .prop_map(|(files, bytes)| Frame::ManifestEnd(ManifestEnd { files, bytes })),
        (any::<u64>(), arb_have_state())
            .prop_map(|(file_id, state)| Frame::Have(Have { file_id, state })),
        (any::<u64>(), any::<u64>())
            .prop_map(|(file_id, offset)| Frame::ChunkAck(ChunkAck { file_id, offset })),
        (any::<u64>(), any::<u64>(), arb_code()).prop_map(|(file_id, offset, reason)| {
            Frame::ChunkNack(ChunkNack {
                file_id,
                offset,
                reason,
            })
        }),
        (any::<u64>(), any::<[u8; 16]>())
            .prop_map(|(file_id, digest)| Frame::FileDone(FileDone { file_id, digest })),
        (any::<u64>(), arb_code(), arb_message()).prop_map(|(file_id, code, message)| {
            Frame::FileFailed(FileFailed::new(file_id, code, message))
        }),
        (arb_code(), arb_message())
            .prop_map(|(code, message)| Frame::Error(ErrorFrame::new(code, message))),
        prop_oneof![
            Just(CloseReason::Done),
            Just(CloseReason::Cancelled),
            Just(CloseReason::Failed)
        ]
        .prop_map(|reason| Frame::Close(Close { reason })),
        Just(Frame::CloseAck(CloseAck)),
    ]
}

pub fn encode(f: &Frame) -> Vec<u8> {
    let mut out = Vec::new();
    f.encode(&mut out);
    out
}
