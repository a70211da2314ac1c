//! A transfer's options, from the command line to the wire, and the decisions derived
//! from them, each made here once:
//!
//! * [`SessionOptions`]: what a session does, the engine's one options type. A client
//!   builds it from its flags; [`SessionOptions::open_options`] is what goes into
//!   `Open`; a daemon builds its own with [`SessionOptions::served`] from the `Open` it
//!   receives and its own settings ([`ServerSide`]).
//! * [`auto_buffer_bytes`]: the buffer memory `--buffer-mem auto` plans.
//! * [`advertised_addresses`]: the NIC addresses a daemon advertises for its data
//!   connections.
//! * [`beyond_plan`]: threads a session runs beyond what the plan placed.
//!
//! (The codec's decisions, compress and decompress thread counts included, are
//! [`crate::codec`]'s; the commands say only whether a transfer may compress.)

use crate::codec::CompressMode;
use serde::Serialize;
use sluice_placement::{Plan, Role};
use sluice_topology::Machine;
use sluice_wire::{Accept, Capabilities, ChunkFlags, Compression, OpenOptions, MAX_STREAMS};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// Large-file reads an io-read thread keeps in flight by default: enough to keep a disk's
/// queue busy while the thread checksums and sends (4 KiB-aligned `O_DIRECT` chunks of
/// 4 MiB each: 16 MiB per thread in flight).
pub const DEFAULT_READ_DEPTH: u32 = 4;

/// `--buffer-mem auto`: chunk slots per data thread. Four keep a thread busy while its
/// neighbours hold one each (in a queue, on the wire, being written); more only cost
/// start-up time (every page is touched and locked: about 3 ms per MiB on the VM this
/// was measured on, 0.6 s for 256 MiB) and memory.
pub const AUTO_SLOTS_PER_THREAD: u64 = 4;

/// `--buffer-mem auto`: at least this many slots (a stream needs 3 per connection + 1).
pub const AUTO_MIN_SLOTS: u64 = 8;

/// How chunks travel from the thread that read them to the socket (seed 003).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pipeline {
    /// Chosen per session: inline unless readers far outnumber connections.
    #[default]
    Auto,
    /// The thread that reads a chunk sends it (and the receiving thread writes it).
    Inline,
    /// Bounded per-channel queues between I/O threads and network threads.
    Queued,
}

/// The control connection's round-trip time from which a path counts as long: there
/// TCP's start-up, from one initial window per connection to the path's rate, takes
/// about ten round trips, and more connections start more windows at once.
pub const LONG_PATH_RTT: Duration = Duration::from_millis(20);

/// The data connections a client opens on a long path when the user set none: 8 initial
/// windows reach 1 Gbit/s at 100 ms about a round trip sooner than 2 (a 1 GiB push took
/// 10.07 s against 10.26 s, `bench/runs/2026-11-28-vm-wan-earliest`); all 8 are
/// connected during the control handshake.
pub const LONG_PATH_STREAMS: u16 = 8;

/// What a session does, as the client asked for it.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// Data connections.
    pub streams: u16,
    /// Data connections on a long path ([`LONG_PATH_RTT`]) where the user did not set
    /// `--streams` (`None`: always `streams`); see [`SessionOptions::streams_for`].
    pub long_path_streams: Option<u16>,
    /// The session's chunk size, agreed in `Accept` (at most either side's slot size).
    pub chunk_bytes: u32,
    /// Storage threads on each side.
    pub io_threads: u32,
    /// Large-file reads each io-read thread keeps in flight with `O_DIRECT` (io_uring);
    /// 1 reads one chunk at a time.
    pub read_depth: u32,
    /// Continue from what the destination already holds.
    pub resume: bool,
    /// Never replace an existing destination file.
    pub no_clobber: bool,
    /// Skip files whose destination has the same size and mtime.
    pub update: bool,
    /// Make each file durable before renaming it into place.
    pub fsync: bool,
    /// Re-read each written file and compare its digest before renaming it into place.
    pub verify: bool,
    /// Descend into directories.
    pub recursive: bool,
    /// Compression on the wire.
    pub compress: CompressMode,
    /// Inline or queued data path.
    pub pipeline: Pipeline,
    /// Read and write large files with `O_DIRECT` (bypassing the page cache), where
    /// supported; a daemon does as its client asks.
    pub direct: bool,
    /// The sink acknowledges every chunk (`CHUNK_ACKS` negotiated): the source's `auto`
    /// then measures delivered goodput instead of bytes handed to its sockets.
    pub chunk_acks: bool,
    /// The sink ends the session by itself (`SINK_CLOSES` negotiated): it sends
    /// `CloseAck` unasked behind the last final word, and the source sends no `Close`.
    pub sink_closes: bool,
    /// The session's bandwidth limit on this host (`--bwlimit`; none by default).
    pub pace: crate::bwlimit::Pace,
    /// The flags its chunks may carry: what the handshake agreed and `Open` asked for
    /// ([`ChunkFlags::permitted`]); a sink refuses others. Every flag until agreed.
    pub chunk_flags: ChunkFlags,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            streams: 2,
            long_path_streams: None,
            chunk_bytes: 4 << 20,
            io_threads: 2,
            read_depth: DEFAULT_READ_DEPTH,
            resume: false,
            no_clobber: false,
            update: false,
            fsync: false,
            verify: false,
            recursive: false,
            compress: CompressMode::None,
            pipeline: Pipeline::Auto,
            direct: true,
            chunk_acks: true,
            sink_closes: false,
            pace: crate::bwlimit::Pace::none(),
            chunk_flags: ChunkFlags::ANY,
        }
    }
}

/// What a daemon decides for every session, whatever its client asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerSide {
    /// The daemon's slot size: a session's chunks are at most this.
    pub slot_bytes: u32,
    /// Storage threads per session.
    pub io_threads: u32,
    /// Large-file reads each io-read thread keeps in flight.
    pub read_depth: u32,
}

impl SessionOptions {
    /// The data connections to ask for on a path whose control connection measured
    /// `rtt`: `long_path_streams` (never fewer than `streams`) from [`LONG_PATH_RTT`] on,
    /// else `streams`.
    pub fn streams_for(&self, rtt: Option<Duration>) -> u16 {
        match (self.long_path_streams, rtt) {
            (Some(n), Some(rtt)) if rtt >= LONG_PATH_RTT => self.streams.max(n),
            _ => self.streams,
        }
    }

    /// The options a client sends in `Open` (the wire's ten transfer flags).
    pub fn open_options(&self) -> OpenOptions {
        OpenOptions {
            streams: self.streams,
            chunk_bytes: self.chunk_bytes,
            resume: self.resume,
            no_clobber: self.no_clobber,
            update: self.update,
            fsync: self.fsync,
            verify: self.verify,
            recursive: self.recursive,
            compress: crate::codec::plan::announce(self.compress, crate::codec::CodecSite::Source),
            direct: self.direct,
        }
    }

    /// Whether `open` asks only for what the handshake agreed (`capabilities`): resume,
    /// no-clobber and update need `RESUME`, direct I/O `DIRECT_IO`, a compression its
    /// codec's capability. A daemon refuses any other `Open` (`BadFrame`).
    ///
    /// # Errors
    /// What `open` asks for that was not agreed, as the peer reads it.
    pub fn check_open(open: &OpenOptions, capabilities: Capabilities) -> Result<(), String> {
        let needs = [
            (
                open.resume || open.no_clobber || open.update,
                Capabilities::RESUME,
                "RESUME",
            ),
            (open.direct, Capabilities::DIRECT_IO, "DIRECT_IO"),
            (true, open.compress.capability(), "its compression's codec"),
        ];
        match needs
            .iter()
            .find(|(asked, cap, _)| *asked && !capabilities.contains(*cap))
        {
            Some((_, _, name)) => Err(format!(
                "Open asks for what the handshake did not agree: {name} was not negotiated"
            )),
            None => Ok(()),
        }
    }

    /// The options a daemon runs a session with: the client's flags from `open`, at most
    /// [`MAX_STREAMS`] streams (at least 1) and the daemon's slot size, and the daemon's
    /// own storage settings; chunk acknowledgements and the sink's own close where the
    /// handshake agreed on them (`capabilities`).
    pub fn served(
        open: &OpenOptions,
        server: ServerSide,
        capabilities: Capabilities,
    ) -> SessionOptions {
        let opts = SessionOptions {
            streams: open.streams.clamp(1, MAX_STREAMS),
            long_path_streams: None,
            // 0: the server's choice, its slot size.
            chunk_bytes: match open.chunk_bytes {
                0 => server.slot_bytes,
                asked => asked.min(server.slot_bytes),
            },
            io_threads: server.io_threads,
            read_depth: server.read_depth,
            resume: open.resume,
            no_clobber: open.no_clobber,
            update: open.update,
            fsync: open.fsync,
            verify: open.verify,
            recursive: open.recursive,
            compress: crate::codec::plan::asked_by_peer(open.compress),
            pipeline: Pipeline::Auto,
            direct: open.direct,
            chunk_acks: capabilities.contains(Capabilities::CHUNK_ACKS),
            sink_closes: capabilities.contains(Capabilities::SINK_CLOSES),
            pace: crate::bwlimit::Pace::none(),
            chunk_flags: ChunkFlags::permitted(capabilities, open.compress != Compression::None),
        };
        debug_assert!((1..=MAX_STREAMS).contains(&opts.streams));
        debug_assert!(opts.chunk_bytes <= server.slot_bytes);
        opts
    }
}

impl SessionOptions {
    /// A client's options once the daemon accepted: its streams, its chunk size (which
    /// must fit this side's `slot_bytes`), whether chunks are acknowledged and whether
    /// the sink closes the session by itself.
    ///
    /// # Errors
    /// The daemon chose a chunk size this side cannot hold (the message says why).
    pub fn accepted(
        &self,
        accept: &Accept,
        capabilities: Capabilities,
        slot_bytes: u32,
    ) -> Result<SessionOptions, String> {
        if accept.chunk_bytes > slot_bytes || !sluice_wire::is_valid_chunk_bytes(accept.chunk_bytes)
        {
            return Err(format!(
                "the daemon chose {}-byte chunks; this side's slots hold {slot_bytes}",
                accept.chunk_bytes
            ));
        }
        Ok(SessionOptions {
            streams: accept.streams(),
            chunk_bytes: accept.chunk_bytes,
            chunk_acks: capabilities.contains(Capabilities::CHUNK_ACKS),
            sink_closes: capabilities.contains(Capabilities::SINK_CLOSES),
            chunk_flags: ChunkFlags::permitted(
                capabilities,
                self.open_options().compress != Compression::None,
            ),
            ..self.clone()
        })
    }
}

/// `--buffer-mem auto`: [`AUTO_SLOTS_PER_THREAD`] chunk slots per data thread of
/// `threads` (the control thread holds none), plus `read_depth - 1` per io-read thread
/// for the reads it keeps in flight, at least [`AUTO_MIN_SLOTS`], times `chunk_bytes`.
pub fn auto_buffer_bytes(threads: &[(Role, u32)], chunk_bytes: u64, read_depth: u32) -> u64 {
    let data_threads: u64 = threads
        .iter()
        .filter(|(role, _)| *role != Role::Control)
        .map(|(_, n)| u64::from(*n))
        .sum();
    let reading: u64 = threads
        .iter()
        .filter(|(role, _)| *role == Role::IoRead)
        .map(|(_, n)| u64::from(*n) * u64::from(read_depth.max(1) - 1))
        .sum();
    (AUTO_SLOTS_PER_THREAD * data_threads + reading)
        .max(AUTO_MIN_SLOTS)
        .saturating_mul(chunk_bytes)
}

/// The address a daemon advertises for each NIC of its plan, by NIC name, so that each
/// data connection goes to the NIC of the channel that serves it. Only a daemon that
/// listens on every address (`listen` unspecified) and planned for this very machine
/// (`this_machine`) can: one listening on one address is reached only there.
pub fn advertised_addresses(
    machine: &Machine,
    plan: &Plan,
    listen: SocketAddr,
    this_machine: bool,
) -> Vec<(String, IpAddr)> {
    if !listen.ip().is_unspecified() || !this_machine {
        return Vec::new();
    }
    nic_addresses(machine, plan, listen.is_ipv6())
}

/// One address for each NIC of `plan`'s channels that has one: its first IPv4 address,
/// or (listening on IPv6, which also takes IPv4) its first IPv6 address that is not
/// link-local (those need a scope the client cannot know).
fn nic_addresses(machine: &Machine, plan: &Plan, ipv6: bool) -> Vec<(String, IpAddr)> {
    let mut out: Vec<(String, IpAddr)> = Vec::new();
    for name in plan.channels.iter().flat_map(|c| c.nics.iter()) {
        if out.iter().any(|(n, _)| n == name) {
            continue;
        }
        let Some(nic) = machine.nic(name) else {
            continue;
        };
        let ips: Vec<IpAddr> = nic
            .addresses
            .iter()
            .filter_map(|a| a.parse().ok())
            .collect();
        let v4 = ips.iter().find(|ip| ip.is_ipv4());
        let v6 = ips.iter().find(|ip| match ip {
            IpAddr::V6(v6) => !v6.is_unicast_link_local() && !v6.is_unspecified(),
            IpAddr::V4(_) => false,
        });
        if let Some(ip) = v4.or(v6.filter(|_| ipv6)) {
            out.push((name.clone(), *ip));
        }
    }
    out
}

/// Threads of one role a session runs beyond those the plan placed: the extra ones share
/// the planned threads' CPUs (thread `i` runs where planned thread `i mod planned` does),
/// which the daemon's log and the `--json` summary state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BeyondPlan {
    /// The role (`net-recv`, `io-write`, ...).
    pub role: String,
    /// Threads of it the plan placed.
    pub planned: u32,
    /// Threads of it the session runs.
    pub running: u32,
}

/// For each `(role, running)` a session runs, the roles that run more threads than the
/// plan placed (`planned(role)`).
pub fn beyond_plan(running: &[(Role, u32)], planned: impl Fn(Role) -> u32) -> Vec<BeyondPlan> {
    running
        .iter()
        .filter_map(|&(role, running)| {
            let planned = planned(role);
            (running > planned).then(|| BeyondPlan {
                role: role.to_string(),
                planned,
                running,
            })
        })
        .collect()
}

/// The roles of a session's threads whose counts follow its options: its network
/// threads (one per data connection) and storage threads, on its sending or receiving
/// side.
pub fn session_threads(opts: &SessionOptions, sends: bool) -> [(Role, u32); 2] {
    let streams = u32::from(opts.streams);
    if sends {
        [(Role::NetSend, streams), (Role::IoRead, opts.io_threads)]
    } else {
        [(Role::NetRecv, streams), (Role::IoWrite, opts.io_threads)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_path_gets_more_connections_only_where_the_user_set_none() {
        let ms = |m| Some(Duration::from_millis(m));
        let auto = SessionOptions {
            long_path_streams: Some(LONG_PATH_STREAMS),
            ..SessionOptions::default()
        };
        assert_eq!(auto.streams_for(ms(100)), LONG_PATH_STREAMS);
        assert_eq!(auto.streams_for(ms(20)), LONG_PATH_STREAMS);
        assert_eq!(auto.streams_for(ms(19)), 2, "below the threshold");
        assert_eq!(auto.streams_for(None), 2, "no RTT sample");
        let set = SessionOptions {
            streams: 3,
            ..SessionOptions::default()
        };
        assert_eq!(set.streams_for(ms(100)), 3, "--streams given: kept");
        let more = SessionOptions {
            streams: 16,
            long_path_streams: Some(LONG_PATH_STREAMS),
            ..SessionOptions::default()
        };
        assert_eq!(more.streams_for(ms(100)), 16, "never fewer");
    }

    #[test]
    fn open_options_round_trip_through_a_daemon() {
        let asked = SessionOptions {
            streams: 300,
            chunk_bytes: 8 << 20,
            resume: true,
            no_clobber: true,
            update: true,
            fsync: true,
            verify: true,
            recursive: true,
            compress: CompressMode::Zstd(3),
            direct: false,
            ..SessionOptions::default()
        };
        let open = asked.open_options();
        assert_eq!(open.streams, 300);
        assert_eq!(open.compress, sluice_wire::Compression::Zstd);
        let server = ServerSide {
            slot_bytes: 4 << 20,
            io_threads: 3,
            read_depth: 1,
        };
        let served = SessionOptions::served(&open, server, Capabilities::EMPTY);
        assert_eq!(served.streams, MAX_STREAMS, "at most MAX_STREAMS");
        assert_eq!(served.chunk_bytes, 4 << 20, "at most the daemon's slot");
        assert_eq!((served.io_threads, served.read_depth), (3, 1));
        assert!(served.resume && served.no_clobber && served.update && served.fsync);
        assert!(served.verify && served.recursive && !served.direct && !served.chunk_acks);
        assert!(!served.sink_closes);
        assert_eq!(served.compress, CompressMode::Auto);
        let none = SessionOptions {
            streams: 0,
            ..SessionOptions::default()
        };
        let agreed = Capabilities::CHUNK_ACKS.union(Capabilities::SINK_CLOSES);
        let served = SessionOptions::served(&none.open_options(), server, agreed);
        assert_eq!(served.streams, 1, "at least one stream");
        assert_eq!(served.compress, CompressMode::None);
        assert!(served.direct && served.chunk_acks && served.sink_closes);
        let open = OpenOptions {
            chunk_bytes: 0,
            ..none.open_options()
        };
        let served = SessionOptions::served(&open, server, agreed);
        assert_eq!(
            served.chunk_bytes,
            4 << 20,
            "0: the daemon's choice, its slot"
        );
        let open = OpenOptions {
            chunk_bytes: 1 << 20,
            ..open
        };
        let served = SessionOptions::served(&open, server, agreed);
        assert_eq!(
            served.chunk_bytes,
            1 << 20,
            "what the client asked, under the slot"
        );
    }

    #[test]
    fn an_open_asks_only_for_what_the_handshake_agreed() {
        let all = Capabilities::RESUME
            .union(Capabilities::DIRECT_IO)
            .union(Capabilities::COMPRESS_LZ4)
            .union(Capabilities::COMPRESS_ZSTD);
        let plain = OpenOptions {
            direct: false,
            ..SessionOptions::default().open_options()
        };
        assert_eq!(
            SessionOptions::check_open(&plain, Capabilities::EMPTY),
            Ok(())
        );
        let asks = [
            (
                OpenOptions {
                    resume: true,
                    ..plain
                },
                Capabilities::RESUME,
                "RESUME",
            ),
            (
                OpenOptions {
                    no_clobber: true,
                    ..plain
                },
                Capabilities::RESUME,
                "RESUME",
            ),
            (
                OpenOptions {
                    update: true,
                    ..plain
                },
                Capabilities::RESUME,
                "RESUME",
            ),
            (
                OpenOptions {
                    direct: true,
                    ..plain
                },
                Capabilities::DIRECT_IO,
                "DIRECT_IO",
            ),
            (
                OpenOptions {
                    compress: Compression::Lz4,
                    ..plain
                },
                Capabilities::COMPRESS_LZ4,
                "codec",
            ),
            (
                OpenOptions {
                    compress: Compression::Zstd,
                    ..plain
                },
                Capabilities::COMPRESS_ZSTD,
                "codec",
            ),
        ];
        for (open, needed, name) in asks {
            assert_eq!(SessionOptions::check_open(&open, all), Ok(()), "{open:?}");
            assert_eq!(
                SessionOptions::check_open(&open, needed),
                Ok(()),
                "{open:?}"
            );
            let others = Capabilities::from_bits_retain(all.bits() & !needed.bits());
            let e = SessionOptions::check_open(&open, others).expect_err(name);
            assert!(e.contains(name), "{e}");
        }
    }

    #[test]
    fn auto_buffers_are_four_slots_per_data_thread_at_least_eight() {
        let mib = 1 << 20;
        // control 1 + net 2 + io 2: 4 data threads, 16 slots, 3 more per reader.
        let threads = [(Role::Control, 1), (Role::NetSend, 2), (Role::IoRead, 2)];
        assert_eq!(auto_buffer_bytes(&threads, mib, 1), 16 * mib);
        assert_eq!(auto_buffer_bytes(&threads, mib, 4), (16 + 6) * mib);
        assert_eq!(auto_buffer_bytes(&[(Role::NetRecv, 1)], mib, 4), 8 * mib);
        assert_eq!(auto_buffer_bytes(&[], mib, 0), 8 * mib);
    }

    fn nic(name: &str, addresses: &[&str]) -> sluice_topology::Nic {
        sluice_topology::Nic {
            name: name.into(),
            numa_node: Some(0),
            link_speed_mbps: None,
            mac: None,
            addresses: addresses.iter().map(|a| (*a).to_string()).collect(),
            pci_bus_id: None,
        }
    }

    #[test]
    fn advertising_needs_a_wildcard_listener_on_this_machine() {
        let machine = Machine {
            source: "test".into(),
            packages: Vec::new(),
            nodes: Vec::new(),
            nics: vec![
                nic("eth1", &["fe80::1", "10.0.1.2"]),
                nic("eth2", &["fe80::2", "fd00::2"]),
                nic("eth3", &[]),
            ],
            block_devices: Vec::new(),
            allowed_cpus: Vec::new(),
        };
        let channel = |id, nics: &[&str]| sluice_placement::Channel {
            id,
            numa_node: None,
            nodes: Vec::new(),
            package: None,
            nics: nics.iter().map(|n| (*n).to_string()).collect(),
            buffer_bytes: 1 << 20,
            threads: Vec::new(),
        };
        let plan = Plan {
            policy: sluice_placement::Policy::Os,
            requested_policy: sluice_placement::Policy::Os,
            chunk_bytes: 1 << 20,
            channels: vec![channel(0, &["eth1", "eth3"]), channel(1, &["eth2", "eth1"])],
            notes: Vec::new(),
            explain: Vec::new(),
        };
        let v4: SocketAddr = "0.0.0.0:7878".parse().unwrap();
        let v6: SocketAddr = "[::]:7878".parse().unwrap();
        let one: SocketAddr = "10.0.0.1:7878".parse().unwrap();
        assert!(advertised_addresses(&machine, &plan, one, true).is_empty());
        assert!(advertised_addresses(&machine, &plan, v4, false).is_empty());
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(
            advertised_addresses(&machine, &plan, v4, true),
            [("eth1".to_string(), ip("10.0.1.2"))],
            "IPv4 only, each NIC once"
        );
        assert_eq!(
            advertised_addresses(&machine, &plan, v6, true),
            [
                ("eth1".to_string(), ip("10.0.1.2")),
                ("eth2".to_string(), ip("fd00::2"))
            ],
            "IPv4 first, then an IPv6 address that is not link-local"
        );
    }

    #[test]
    fn threads_beyond_the_plan_are_named_with_both_counts() {
        let planned = |r: Role| if r == Role::NetRecv { 2 } else { 4 };
        let got = beyond_plan(&[(Role::NetRecv, 5), (Role::IoWrite, 4)], planned);
        assert_eq!(
            got,
            [BeyondPlan {
                role: Role::NetRecv.to_string(),
                planned: 2,
                running: 5
            }]
        );
        assert!(beyond_plan(&[(Role::NetRecv, 2)], planned).is_empty());
        let opts = SessionOptions {
            streams: 3,
            io_threads: 1,
            ..SessionOptions::default()
        };
        assert_eq!(
            session_threads(&opts, false),
            [(Role::NetRecv, 3), (Role::IoWrite, 1)]
        );
        assert_eq!(
            session_threads(&opts, true),
            [(Role::NetSend, 3), (Role::IoRead, 1)]
        );
    }
}
