//! Every codec decision of a transfer in one place: which codec threads the plan holds,
//! which mode goes toward the peer, whether compress/decompress stage threads run and
//! how many, and what `auto` is told about the threads around it.

use super::{CompressMode, Compressor, SharedAuto, Unshuffles};
use crate::runtime::Runtime;
use sluice_placement::Role;
use sluice_wire::Compression;
use std::sync::Arc;

/// The program that plans a transfer's threads, as far as its codec goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Planner {
    /// `sluice cp` with its `--compress`: codec threads only when it compresses.
    Copy(CompressMode),
    /// `sluice serve`: any session may ask to compress or decompress, so codec threads
    /// are planned always (and spawned only for sessions that compress).
    Daemon,
    /// `sluice stream`: its net threads compress and decompress their own records.
    Stream,
}

impl Default for Planner {
    /// A copy that does not compress: no codec threads unless asked for.
    fn default() -> Planner {
        Planner::Copy(CompressMode::None)
    }
}

impl Planner {
    /// Whether the plan holds codec threads by default.
    #[must_use]
    pub fn compressing(self) -> bool {
        match self {
            Planner::Copy(mode) => mode != CompressMode::None,
            Planner::Daemon => true,
            Planner::Stream => false,
        }
    }

    /// The compress and decompress threads to plan: `--compress-threads` and
    /// `--decompress-threads` where given, else `--io-threads` compress and
    /// `--streams` decompress threads where [`Self::compressing`], else none (0: the
    /// io-read and net-recv threads run the codec inline).
    #[must_use]
    pub fn codec_threads(
        self,
        io_threads: u32,
        streams: u32,
        (compress_flag, decompress_flag): (Option<u32>, Option<u32>),
    ) -> (u32, u32) {
        let on = self.compressing();
        (
            compress_flag.unwrap_or(if on { io_threads } else { 0 }),
            decompress_flag.unwrap_or(if on { streams } else { 0 }),
        )
    }
}

/// Which end of which transfer a codec decision is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodecSite {
    /// A file session's sending side (`cp` pushing, a daemon serving a pull).
    Source,
    /// A file session's receiving side.
    Sink,
    /// A live stream's sender: each net-send thread compresses its own records.
    StreamSender,
    /// A live stream's receiver: each net-recv thread decompresses its own records.
    StreamReceiver,
}

/// What a codec decision depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodecInputs {
    /// Which end.
    pub site: CodecSite,
    /// The mode asked for (`--compress`, or what a daemon runs for the client's
    /// [`asked_by_peer`]).
    pub asked: CompressMode,
    /// Whether the peer is this very host (see [`CompressMode::toward`]).
    pub peer_is_this_host: bool,
    /// Compress threads the plan holds.
    pub planned_compress: u32,
    /// Decompress threads the plan holds.
    pub planned_decompress: u32,
    /// The session's io-read (io-write) threads.
    pub io_threads: u32,
    /// The session's data connections.
    pub streams: u32,
    /// What the peer un-shuffles ([`Unshuffles::of`] the session's capabilities).
    pub peer_unshuffles: Unshuffles,
}

impl CodecInputs {
    /// The inputs of a session at `site` run on `runtime`'s plan.
    #[must_use]
    pub fn on(runtime: &Runtime, site: CodecSite, asked: CompressMode) -> CodecInputs {
        CodecInputs {
            site,
            asked,
            peer_is_this_host: false,
            planned_compress: runtime.planned(Role::Compress),
            planned_decompress: runtime.planned(Role::Decompress),
            io_threads: 1,
            streams: 1,
            peer_unshuffles: Unshuffles::Nothing,
        }
    }
}

/// The codec decisions of one end of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodecPlan {
    /// The mode chunks are sent with ([`CompressMode::None`] at a receiving end that
    /// was asked for none).
    pub mode: CompressMode,
    /// Compress threads to spawn as a stage of their own (0: the threads that read
    /// chunks, or a stream's net-send threads, compress inline).
    pub compress_threads: u32,
    /// Decompress threads to spawn (0: the net-recv threads decompress inline).
    pub decompress_threads: u32,
    /// Threads that compress for `auto` (a codec's CPU ceiling is its speed times this).
    pub auto_threads: u32,
    /// Threads that hand raw chunks to the wire (`auto` measures the link's share of
    /// their time).
    pub auto_senders: u32,
    /// The shuffles chunks of typed elements may go through before they are compressed:
    /// what the peer undoes, at a sending end that compresses; nothing otherwise.
    pub shuffle: Unshuffles,
}

impl CodecPlan {
    /// Decides. A source compresses in a stage of its own where its mode compresses
    /// and the plan has compress threads, else in its io-read threads; a sink
    /// decompresses in a stage where it was asked for compression and the plan has
    /// decompress threads; a stream's net threads run the codec of their own records.
    #[must_use]
    pub fn decide(i: &CodecInputs) -> CodecPlan {
        let io = i.io_threads.max(1);
        let streams = i.streams.max(1);
        let sending = matches!(i.site, CodecSite::Source | CodecSite::StreamSender);
        let mode = if sending {
            i.asked.toward(i.peer_is_this_host)
        } else {
            i.asked
        };
        let shuffle = if sending && mode != CompressMode::None {
            i.peer_unshuffles
        } else {
            Unshuffles::Nothing
        };
        let plan = match i.site {
            CodecSite::Source => {
                let staged = if mode == CompressMode::None {
                    0
                } else {
                    i.planned_compress
                };
                CodecPlan {
                    mode,
                    compress_threads: staged,
                    decompress_threads: 0,
                    auto_threads: if staged > 0 { staged } else { i.io_threads },
                    // Raw chunks are handed to the wire by the io-read threads themselves.
                    auto_senders: io,
                    shuffle,
                }
            }
            CodecSite::Sink => CodecPlan {
                mode,
                compress_threads: 0,
                decompress_threads: if mode == CompressMode::None {
                    0
                } else {
                    i.planned_decompress
                },
                auto_threads: 1,
                auto_senders: 1,
                shuffle,
            },
            CodecSite::StreamSender | CodecSite::StreamReceiver => CodecPlan {
                mode,
                compress_threads: 0,
                decompress_threads: 0,
                auto_threads: streams,
                auto_senders: streams,
                shuffle,
            },
        };
        debug_assert!(sending || plan.compress_threads == 0);
        debug_assert!(sending || !plan.shuffle.any());
        plan
    }

    /// Whether compression runs in a stage of its own.
    #[must_use]
    pub fn staged_compress(&self) -> bool {
        self.compress_threads > 0
    }

    /// The session's `auto` controller, told about the threads around it; it measures
    /// on the sink's acknowledgements where `acked`.
    #[must_use]
    pub fn auto(&self, acked: bool) -> Arc<SharedAuto> {
        let auto = SharedAuto::new();
        if acked {
            auto.measure_on_ack();
        }
        auto.set_senders(self.auto_senders);
        auto.set_threads(self.auto_threads);
        auto
    }

    /// A compressor for one thread of the session (allowed the shuffles of
    /// [`Self::shuffle`]).
    #[must_use]
    pub fn compressor(&self, auto: &Arc<SharedAuto>) -> Compressor {
        Compressor::sharing(self.mode, auto).with_shuffle(self.shuffle)
    }
}

/// The compression a client announces in `Open` for `asked`: a file session names the
/// codec family (`auto` as LZ4), a stream announces LZ4 for any codec (its receiver
/// decompresses whatever each record says).
#[must_use]
pub fn announce(asked: CompressMode, site: CodecSite) -> Compression {
    match (asked, site) {
        (CompressMode::None, _) => Compression::None,
        (CompressMode::Zstd(_), CodecSite::Source | CodecSite::Sink) => Compression::Zstd,
        _ => Compression::Lz4,
    }
}

/// What a daemon runs for the compression its client announced: the client chooses
/// per chunk on a pull too, so `auto` when it asked for any.
#[must_use]
pub fn asked_by_peer(announced: Compression) -> CompressMode {
    match announced {
        Compression::None => CompressMode::None,
        _ => CompressMode::Auto,
    }
}
