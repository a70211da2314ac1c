//! The fuzz seed corpus: one valid byte stream per scenario, so the fuzzers start from
//! well-formed frames instead of discovering the header layout by chance.
//!
//! Always checks that every seed decodes. With `SLUICE_FUZZ_SEEDS=DIR` set, also writes
//! the seeds to `DIR` (this is how `fuzz/seeds/` was made; `fuzz/run.sh` feeds them to
//! every target).

// Helpers outside #[test] fns too: a panic in a test is a failed assertion.
#![allow(clippy::unwrap_used)]

use sluice_wire::*;

fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let mut seeds = Vec::new();
    let mut add = |name: &'static str, frames: &[Frame], payload: &[u8]| {
        let mut b = Vec::new();
        for f in frames {
            f.encode(&mut b);
        }
        b.extend_from_slice(payload);
        seeds.push((name, b));
    };

    // A full authenticated handshake, as the server sees it and as the client sees it.
    let token = Token::new(*b"fuzz-token").unwrap();
    let (cn, sn) = ([3; 32], [1; 32]);
    add(
        "handshake-client-to-server",
        &[
            Frame::Hello(Hello {
                version: 1,
                min_version: 1,
                capabilities: Capabilities::ALL,
                client_nonce: cn,
            }),
            Frame::AuthProof(AuthProof {
                mac: auth::client_proof(&token, &cn, &sn),
            }),
        ],
        &[],
    );
    add(
        "handshake-server-to-client",
        &[
            Frame::Welcome(Welcome {
                version: 1,
                capabilities: Capabilities::ALL,
                server_nonce: sn,
                auth_required: true,
            }),
            Frame::AuthOk(AuthOk {
                mac: auth::server_proof(&token, &cn, &sn),
            }),
        ],
        &[],
    );
    let accept = Accept {
        session_id: 9,
        session_secret: [4; 32],
        channels: 2,
        streams_per_channel: 2,
        chunk_bytes: MIN_CHUNK_BYTES,
    };
    add(
        "session",
        &[
            Frame::Open(Open {
                direction: Direction::Push,
                path: "backup/2024".into(),
                options: OpenOptions {
                    streams: 4,
                    resume: true,
                    ..OpenOptions::default()
                },
            }),
            Frame::Accept(accept.clone()),
            Frame::Addresses(Addresses {
                entries: vec![
                    StreamAddress {
                        stream_index: 0,
                        addr: "10.0.1.2:7878".parse().unwrap(),
                    },
                    StreamAddress {
                        stream_index: 1,
                        addr: "[fd00::2]:7878".parse().unwrap(),
                    },
                ],
            }),
            Frame::Open(Open {
                direction: Direction::Deliver,
                path: "run42".into(),
                options: OpenOptions::default(),
            }),
            Frame::Delegate(Delegate {
                session_id: 7,
                join_key: [3; 32],
                channels: 1,
                streams_per_channel: 2,
                chunk_bytes: MIN_CHUNK_BYTES,
                tls: true,
                fingerprint: [9; 32],
                targets: vec![
                    StreamAddress {
                        stream_index: 0,
                        addr: "10.0.1.2:7878".parse().unwrap(),
                    },
                    StreamAddress {
                        stream_index: 1,
                        addr: "10.0.2.2:7878".parse().unwrap(),
                    },
                ],
            }),
        ],
        &[],
    );
    add(
        "join",
        &[
            Frame::Join(Join::new(9, &[5; 32], 1, 0)),
            Frame::Joined(Joined {
                stream_index: 1,
                channel: 0,
            }),
        ],
        &[],
    );
    let entry = |id, path: &str, kind, size, target: Option<&str>| FileEntry {
        file_id: id,
        path: RelPath::parse(path).unwrap(),
        kind,
        size,
        mode: 0o644,
        mtime_ns: 1_700_000_000_000_000_000,
        symlink_target: target.map(str::to_owned),
    };
    add(
        "manifest",
        &[
            Frame::Manifest(Manifest {
                entries: vec![
                    entry(1, "d", FileKind::Dir, 0, None),
                    entry(2, "d/big.bin", FileKind::File, 200_000, None),
                    entry(3, "d/a.txt", FileKind::File, 5, None),
                    entry(4, "d/link", FileKind::Symlink, 0, Some("../elsewhere")),
                ],
            }),
            Frame::ManifestEnd(ManifestEnd {
                files: 4,
                bytes: 200_005,
            }),
        ],
        &[],
    );
    let mut partial = ChunkSet::new(4).unwrap();
    partial.insert(0);
    partial.insert(2);
    add(
        "have",
        &[
            Frame::Have(Have {
                file_id: 2,
                state: HaveState::Partial {
                    size: 200_000,
                    mtime_ns: 1,
                    chunks: partial,
                },
            }),
            Frame::Have(Have {
                file_id: 3,
                state: HaveState::Complete {
                    size: 5,
                    mtime_ns: 1,
                    digest: FileDigest::of_bytes(b"hello", MIN_CHUNK_BYTES),
                },
            }),
            Frame::Have(Have {
                file_id: 4,
                state: HaveState::Skip(SkipReason::Exists),
            }),
            Frame::Have(Have {
                file_id: 5,
                state: HaveState::Missing,
            }),
        ],
        &[],
    );
    let data = vec![0x5a; 1000];
    add(
        "chunk-plain",
        &[Frame::Chunk(Chunk {
            header: ChunkHeader::plain(2, 65_536, &data, false),
            segments: Vec::new(),
        })],
        &data,
    );
    add(
        "chunk-packed",
        &[Frame::Chunk(Chunk::packed(
            vec![
                Segment { file_id: 3, len: 5 },
                Segment { file_id: 6, len: 3 },
            ],
            b"helloabc",
        ))],
        b"helloabc",
    );
    add(
        "chunk-compressed",
        &[Frame::Chunk(Chunk {
            header: ChunkHeader::plain(2, 0, &data, true).compressed(Compression::Zstd, 12),
            segments: Vec::new(),
        })],
        &[0x28; 12],
    );
    add(
        "chunk-shuffled",
        &[Frame::Chunk(Chunk {
            header: ChunkHeader::plain(2, 0, &data, true)
                .compressed(Compression::Lz4, 12)
                .shuffled(Some(shuffle::Shuffle::Bits(shuffle::ElementSize::Two))),
            segments: Vec::new(),
        })],
        &[0x28; 12],
    );
    add(
        "chunk-byte-shuffled",
        &[Frame::Chunk(Chunk {
            header: ChunkHeader::plain(2, 0, &data, true)
                .compressed(Compression::Zstd, 12)
                .shuffled(Some(shuffle::Shuffle::Bytes(shuffle::ElementSize::Four))),
            segments: Vec::new(),
        })],
        &[0x28; 12],
    );
    add(
        "flow",
        &[
            Frame::ChunkAck(ChunkAck {
                file_id: 2,
                offset: 0,
            }),
            Frame::ChunkNack(ChunkNack {
                file_id: 2,
                offset: 65_536,
                reason: ErrorCode::ChecksumMismatch,
            }),
            Frame::FileDone(FileDone {
                file_id: 3,
                digest: [7; 16],
            }),
            Frame::FileFailed(FileFailed::new(
                4,
                ErrorCode::PermissionDenied,
                "d/x: EACCES",
            )),
            Frame::Error(ErrorFrame::new(ErrorCode::NoSpace, "ENOSPC")),
            Frame::Close(Close {
                reason: CloseReason::Done,
            }),
            Frame::CloseAck(CloseAck),
        ],
        &[],
    );
    seeds
}

#[test]
fn seeds_decode_and_are_written_on_request() {
    let seeds = seeds();
    for (name, bytes) in &seeds {
        let mut dec = FrameDecoder::new();
        assert_eq!(dec.feed(bytes), bytes.len());
        let mut frames = 0;
        loop {
            if dec.payload_remaining() > 0 {
                let mut slot = vec![0; dec.payload_remaining() as usize];
                assert_eq!(dec.read_payload(&mut slot), slot.len(), "{name}");
                continue;
            }
            match dec.next() {
                Some(f) => {
                    f.unwrap_or_else(|e| panic!("{name}: {e}"));
                    frames += 1;
                }
                None => break,
            }
        }
        assert!(frames > 0 && dec.finish().is_ok(), "{name}");
        fuzz_decode_all(bytes);
    }
    if let Some(dir) = std::env::var_os("SLUICE_FUZZ_SEEDS") {
        let dir = std::path::PathBuf::from(dir);
        std::fs::create_dir_all(&dir).unwrap();
        for (name, bytes) in &seeds {
            std::fs::write(dir.join(name), bytes).unwrap();
        }
    }
}
