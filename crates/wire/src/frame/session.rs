//! Session frames: `Open`, `Accept`, `Addresses` (control connection), `Join`, `Joined`
//! (data connections). `Delegate` (third-party copies) is in its own module.

use super::Body;
use crate::codec::{bitflags_type, FrameType, Put, Reader};
use crate::error::DecodeError;
use crate::integrity::is_valid_chunk_bytes;
use crate::limits::{MAX_CHANNELS, MAX_PATH_BYTES, MAX_STREAMS};
use crate::path::{PathError, RelPath};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Which way the data flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// The client is the source, the daemon the sink (`sluice cp local host:path`).
    Push = 0,
    /// The daemon is the source, the client the sink (`sluice cp host:path local`).
    Pull = 1,
    /// The daemon is the source and delivers to another daemon, named by the
    /// `Delegate` frame that follows (a third-party copy; the client relays the control
    /// frames and no payload passes through it).
    Deliver = 2,
}

/// How chunk payloads may be compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Compression {
    /// Never.
    #[default]
    None = 0,
    /// LZ4 block format.
    Lz4 = 1,
    /// zstd frame format.
    Zstd = 2,
}

impl Compression {
    /// The capability both sides must have negotiated for it (none for `None`).
    #[must_use]
    pub fn capability(self) -> super::Capabilities {
        match self {
            Compression::None => super::Capabilities::EMPTY,
            Compression::Lz4 => super::Capabilities::COMPRESS_LZ4,
            Compression::Zstd => super::Capabilities::COMPRESS_ZSTD,
        }
    }

    pub(crate) fn from_u8(v: u8, field: &'static str) -> Result<Compression, DecodeError> {
        match v {
            0 => Ok(Compression::None),
            1 => Ok(Compression::Lz4),
            2 => Ok(Compression::Zstd),
            _ => Err(DecodeError::InvalidValue {
                field,
                value: v.into(),
            }),
        }
    }
}

bitflags_type! {
    /// The boolean options of an `Open`, as sent on the wire (`options u16`).
    OptionBits: u16 {
        /// Resume: the sink reports what it holds.
        const RESUME = 1 << 0;
        /// Never replace an existing file.
        const NO_CLOBBER = 1 << 1;
        /// Replace only files older than the source's.
        const UPDATE = 1 << 2;
        /// fsync each file before renaming it into place.
        const FSYNC = 1 << 3;
        /// Read each file back after writing and compare its digest.
        const VERIFY = 1 << 4;
        /// Copy directories recursively.
        const RECURSIVE = 1 << 5;
        /// The server reads (pull) or writes (push) large files with `O_DIRECT`; only
        /// with the `DIRECT_IO` capability negotiated.
        const DIRECT = 1 << 6;
    }
}

/// The options of a transfer, as the client asks for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OpenOptions {
    /// Data connections wanted in total (1..=[`MAX_STREAMS`]); the server may grant fewer.
    pub streams: u16,
    /// Chunk size wanted; 0 lets the server choose. Otherwise a power of two in
    /// `MIN_CHUNK_BYTES..=MAX_CHUNK_BYTES`.
    pub chunk_bytes: u32,
    /// Skip what the sink already holds.
    pub resume: bool,
    /// Never replace an existing file.
    pub no_clobber: bool,
    /// Replace only files older than the source's.
    pub update: bool,
    /// fsync each file before renaming it into place.
    pub fsync: bool,
    /// Read each file back after writing and compare digests.
    pub verify: bool,
    /// Copy directories recursively.
    pub recursive: bool,
    /// Compression the client wants (must be in the negotiated capabilities).
    pub compress: Compression,
    /// The server's large-file I/O bypasses its page cache (`O_DIRECT`); only with the
    /// `DIRECT_IO` capability negotiated.
    pub direct: bool,
}

impl Default for OpenOptions {
    fn default() -> OpenOptions {
        OpenOptions {
            streams: 1,
            chunk_bytes: 0,
            resume: false,
            no_clobber: false,
            update: false,
            fsync: false,
            verify: false,
            recursive: false,
            compress: Compression::None,
            direct: false,
        }
    }
}

/// Client → server: start a transfer.
///
/// Body: `direction u8`, `compress u8`, `options u16` (bits: RESUME 0x01, NO_CLOBBER 0x02,
/// UPDATE 0x04, FSYNC 0x08, VERIFY 0x10, RECURSIVE 0x20, DIRECT 0x40), `streams u16`, `chunk_bytes u32`,
/// `path_len u16`, `path [path_len]` (UTF-8, ≤ 4096 bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Open {
    /// Push or pull.
    pub direction: Direction,
    /// The path on the daemon, relative to its root, as the user typed it; the daemon
    /// checks it with [`Open::target`] and answers `Error { PathOutsideRoot }` if unsafe.
    pub path: String,
    /// Options.
    pub options: OpenOptions,
}

impl Open {
    /// The target under the daemon root: `None` for the root itself.
    ///
    /// # Errors
    /// [`PathError`] if the path is not a safe relative path.
    pub fn target(&self) -> Result<Option<RelPath>, PathError> {
        RelPath::parse_target(&self.path)
    }
}

impl Body for Open {
    const TYPE: FrameType = FrameType::Open;

    fn encode_body(&self, out: &mut Vec<u8>) {
        let o = &self.options;
        let mut bits = OptionBits::EMPTY;
        bits.set(OptionBits::RESUME, o.resume);
        bits.set(OptionBits::NO_CLOBBER, o.no_clobber);
        bits.set(OptionBits::UPDATE, o.update);
        bits.set(OptionBits::FSYNC, o.fsync);
        bits.set(OptionBits::VERIFY, o.verify);
        bits.set(OptionBits::RECURSIVE, o.recursive);
        bits.set(OptionBits::DIRECT, o.direct);
        out.push(self.direction as u8);
        out.push(o.compress as u8);
        out.put_u16(bits.bits());
        out.put_u16(o.streams);
        out.put_u32(o.chunk_bytes);
        out.put_str16(self.path.as_bytes());
    }

    fn decode_body(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let direction = match r.u8("Open.direction")? {
            0 => Direction::Push,
            1 => Direction::Pull,
            2 => Direction::Deliver,
            v => {
                return Err(DecodeError::InvalidValue {
                    field: "Open.direction",
                    value: v.into(),
                })
            }
        };
        let compress = Compression::from_u8(r.u8("Open.compress")?, "Open.compress")?;
        let raw = r.u16("Open.options")?;
        let bits = OptionBits::from_bits(raw).ok_or(DecodeError::InvalidValue {
            field: "Open.options",
            value: raw.into(),
        })?;
        let streams = r.u16("Open.streams")?;
        if streams == 0 {
            return Err(DecodeError::InvalidValue {
                field: "Open.streams",
                value: 0,
            });
        }
        crate::codec::check_limit("Open.streams", streams.into(), MAX_STREAMS.into())?;
        let chunk_bytes = r.u32("Open.chunk_bytes")?;
        if chunk_bytes != 0 && !is_valid_chunk_bytes(chunk_bytes) {
            return Err(DecodeError::InvalidValue {
                field: "Open.chunk_bytes",
                value: chunk_bytes.into(),
            });
        }
        let path = r.str16(MAX_PATH_BYTES, "Open.path")?.to_owned();
        Ok(Open {
            direction,
            path,
            options: OpenOptions {
                streams,
                chunk_bytes,
                resume: bits.contains(OptionBits::RESUME),
                no_clobber: bits.contains(OptionBits::NO_CLOBBER),
                update: bits.contains(OptionBits::UPDATE),
                fsync: bits.contains(OptionBits::FSYNC),
                verify: bits.contains(OptionBits::VERIFY),
                recursive: bits.contains(OptionBits::RECURSIVE),
                compress,
                direct: bits.contains(OptionBits::DIRECT),
            },
        })
    }
}

/// Server → client: the transfer is granted.
///
/// Body (48 bytes): `session_id u64`, `session_secret [32]`, `channels u16`,
/// `streams_per_channel u16`, `chunk_bytes u32`. The client opens
/// `channels × streams_per_channel` data connections; stream `i` belongs to channel
/// `i / streams_per_channel`.
#[derive(Clone, PartialEq, Eq)]
pub struct Accept {
    /// Names the session in `Join`.
    pub session_id: u64,
    /// Random per session; data connections prove knowledge of a key derived from it
    /// (see [`crate::auth::join_key`]) and never send it.
    pub session_secret: [u8; 32],
    /// Channels (NUMA nodes driving a NIC), 1..=[`MAX_CHANNELS`].
    pub channels: u16,
    /// Data connections per channel, ≥ 1; `channels × streams_per_channel ≤ MAX_STREAMS`.
    pub streams_per_channel: u16,
    /// The session's chunk size (valid, see [`crate::is_valid_chunk_bytes`]).
    pub chunk_bytes: u32,
}

impl Accept {
    /// Data connections in total.
    pub fn streams(&self) -> u16 {
        self.channels.saturating_mul(self.streams_per_channel)
    }

    /// The channel of stream `stream_index`.
    pub fn channel_of(&self, stream_index: u16) -> u16 {
        stream_index / self.streams_per_channel.max(1)
    }
}

impl std::fmt::Debug for Accept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Accept")
            .field("session_id", &self.session_id)
            .field("session_secret", &"<redacted>")
            .field("channels", &self.channels)
            .field("streams_per_channel", &self.streams_per_channel)
            .field("chunk_bytes", &self.chunk_bytes)
            .finish()
    }
}

impl Body for Accept {
    const TYPE: FrameType = FrameType::Accept;

    fn encode_body(&self, out: &mut Vec<u8>) {
        out.put_u64(self.session_id);
        out.extend_from_slice(&self.session_secret);
        out.put_u16(self.channels);
        out.put_u16(self.streams_per_channel);
        out.put_u32(self.chunk_bytes);
    }

    fn decode_body(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let a = Accept {
            session_id: r.u64("Accept.session_id")?,
            session_secret: r.array("Accept.session_secret")?,
            channels: r.u16("Accept.channels")?,
            streams_per_channel: r.u16("Accept.streams_per_channel")?,
            chunk_bytes: r.u32("Accept.chunk_bytes")?,
        };
        if a.channels == 0 {
            return Err(DecodeError::InvalidValue {
                field: "Accept.channels",
                value: 0,
            });
        }
        crate::codec::check_limit("Accept.channels", a.channels.into(), MAX_CHANNELS.into())?;
        if a.streams_per_channel == 0 {
            return Err(DecodeError::InvalidValue {
                field: "Accept.streams_per_channel",
                value: 0,
            });
        }
        let total = u64::from(a.channels) * u64::from(a.streams_per_channel);
        crate::codec::check_limit("Accept.streams_per_channel", total, MAX_STREAMS.into())?;
        if !is_valid_chunk_bytes(a.chunk_bytes) {
            return Err(DecodeError::InvalidValue {
                field: "Accept.chunk_bytes",
                value: a.chunk_bytes.into(),
            });
        }
        Ok(a)
    }
}

/// Where the server wants one data connection: the address of a NIC of the channel
/// whose threads will serve that stream (Tyche's channels mapped to NICs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamAddress {
    /// The data connection, `0..channels × streams_per_channel` of the `Accept`.
    pub stream_index: u16,
    /// Where to connect it.
    pub addr: SocketAddr,
}

/// Server → client, right after `Accept` when the `ADDRESSES` capability is negotiated
/// (possibly empty): where each data connection should go. A stream without an entry
/// goes where the control connection went.
///
/// Body: `count u16` (≤ [`MAX_STREAMS`]), then per entry `stream_index u16`, `family u8`
/// (4 or 6), `ip [4 | 16]`, `port u16` (not 0). Stream indexes are strictly increasing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Addresses {
    /// One entry per stream that has an address of its own.
    pub entries: Vec<StreamAddress>,
}

impl Addresses {
    /// The address for data connection `stream_index`, if the server named one.
    pub fn of(&self, stream_index: u16) -> Option<SocketAddr> {
        self.entries
            .iter()
            .find(|e| e.stream_index == stream_index)
            .map(|e| e.addr)
    }
}

impl Body for Addresses {
    const TYPE: FrameType = FrameType::Addresses;

    fn encode_body(&self, out: &mut Vec<u8>) {
        encode_addresses(&self.entries, out);
    }

    fn decode_body(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Addresses {
            entries: decode_addresses(r, &ADDRESSES_FIELDS)?,
        })
    }
}

/// Appends an `Addresses` body: `count u16`, then the entries.
pub(crate) fn encode_addresses(entries: &[StreamAddress], out: &mut Vec<u8>) {
    out.put_u16(u16::try_from(entries.len()).unwrap_or(u16::MAX));
    for e in entries {
        out.put_u16(e.stream_index);
        match e.addr.ip() {
            IpAddr::V4(ip) => {
                out.push(4);
                out.extend_from_slice(&ip.octets());
            }
            IpAddr::V6(ip) => {
                out.push(6);
                out.extend_from_slice(&ip.octets());
            }
        }
        out.put_u16(e.addr.port());
    }
}

/// The field names an address list is reported under, per frame that carries one.
pub(crate) struct AddressFields {
    count: &'static str,
    stream_index: &'static str,
    family: &'static str,
    ip: &'static str,
    port: &'static str,
}

/// In `Addresses`.
pub(crate) const ADDRESSES_FIELDS: AddressFields = AddressFields {
    count: "Addresses.count",
    stream_index: "Addresses.stream_index",
    family: "Addresses.family",
    ip: "Addresses.ip",
    port: "Addresses.port",
};

/// In `Delegate`.
pub(crate) const DELEGATE_FIELDS: AddressFields = AddressFields {
    count: "Delegate.count",
    stream_index: "Delegate.stream_index",
    family: "Delegate.family",
    ip: "Delegate.ip",
    port: "Delegate.port",
};

/// Reads an address list (an `Addresses` body, or the tail of `Delegate`'s): a count
/// within [`MAX_STREAMS`], stream indexes strictly increasing, family 4 or 6, port not 0.
pub(crate) fn decode_addresses(
    r: &mut Reader<'_>,
    f: &AddressFields,
) -> Result<Vec<StreamAddress>, DecodeError> {
    let count = r.u16(f.count)?;
    crate::codec::check_limit(f.count, count.into(), MAX_STREAMS.into())?;
    // Room for what the body can hold (an entry takes at least 9 bytes), not for
    // what `count` claims: a lying count allocates nothing the bytes do not back.
    const MIN_ENTRY_BYTES: usize = 2 + 1 + 4 + 2;
    let mut entries = Vec::with_capacity(usize::from(count).min(r.remaining() / MIN_ENTRY_BYTES));
    for _ in 0..count {
        let stream_index = r.u16(f.stream_index)?;
        if stream_index >= MAX_STREAMS
            || entries
                .last()
                .is_some_and(|p: &StreamAddress| p.stream_index >= stream_index)
        {
            return Err(DecodeError::InvalidValue {
                field: f.stream_index,
                value: stream_index.into(),
            });
        }
        let ip = match r.u8(f.family)? {
            4 => IpAddr::V4(Ipv4Addr::from(r.array::<4>(f.ip)?)),
            6 => IpAddr::V6(Ipv6Addr::from(r.array::<16>(f.ip)?)),
            v => {
                return Err(DecodeError::InvalidValue {
                    field: f.family,
                    value: v.into(),
                })
            }
        };
        let port = r.u16(f.port)?;
        if port == 0 {
            return Err(DecodeError::InvalidValue {
                field: f.port,
                value: 0,
            });
        }
        entries.push(StreamAddress {
            stream_index,
            addr: SocketAddr::new(ip, port),
        });
    }
    Ok(entries)
}

/// Client → server, the first frame on a data connection.
///
/// Body (44 bytes): `session_id u64`, `mac [32]`, `stream_index u16`, `channel u16`, where
/// `mac = HMAC-SHA256(join_key, "sluice-v1 join" ‖ session_id u64 LE ‖ stream_index u16 LE)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Join {
    /// From `Accept`.
    pub session_id: u64,
    /// See [`crate::auth::join_mac`].
    pub mac: [u8; 32],
    /// Which data connection this is, `0..channels × streams_per_channel`.
    pub stream_index: u16,
    /// Its channel, `stream_index / streams_per_channel`.
    pub channel: u16,
}

impl Join {
    /// The `Join` for one data connection, with its MAC computed.
    pub fn new(session_id: u64, join_key: &[u8; 32], stream_index: u16, channel: u16) -> Join {
        Join {
            session_id,
            mac: crate::auth::join_mac(join_key, session_id, stream_index),
            stream_index,
            channel,
        }
    }
}

impl Body for Join {
    const TYPE: FrameType = FrameType::Join;

    fn encode_body(&self, out: &mut Vec<u8>) {
        out.put_u64(self.session_id);
        out.extend_from_slice(&self.mac);
        out.put_u16(self.stream_index);
        out.put_u16(self.channel);
    }

    fn decode_body(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let j = Join {
            session_id: r.u64("Join.session_id")?,
            mac: r.array("Join.mac")?,
            stream_index: r.u16("Join.stream_index")?,
            channel: r.u16("Join.channel")?,
        };
        crate::codec::check_limit(
            "Join.stream_index",
            j.stream_index.into(),
            (MAX_STREAMS - 1).into(),
        )?;
        crate::codec::check_limit("Join.channel", j.channel.into(), (MAX_CHANNELS - 1).into())?;
        Ok(j)
    }
}

/// Server → client: the data connection is part of the session.
/// Body (4 bytes): `stream_index u16`, `channel u16` (echoed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Joined {
    /// Echo of `Join.stream_index`.
    pub stream_index: u16,
    /// Echo of `Join.channel`.
    pub channel: u16,
}

impl Body for Joined {
    const TYPE: FrameType = FrameType::Joined;

    fn encode_body(&self, out: &mut Vec<u8>) {
        out.put_u16(self.stream_index);
        out.put_u16(self.channel);
    }

    fn decode_body(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Joined {
            stream_index: r.u16("Joined.stream_index")?,
            channel: r.u16("Joined.channel")?,
        })
    }
}
