//! Simulated pipelines driving the controller: each test states a machine (link, CPU,
//! codec speeds and ratios, buffers) and what `auto` must choose on it.

use super::*;
use crate::time::Instant;
use std::time::Duration;

const MB: f64 = 1e6;
const CHUNK: f64 = 4.0 * 1048576.0;

/// `t` seconds after the origin.
fn at(t: f64) -> Instant {
    Instant::from_origin(Duration::from_secs_f64(t))
}

/// A simulated pipeline: codec `i` delivers min(its CPU speed, link / its ratio)
/// original bytes per second (raw: the link). Drives `n` chunks of 4 MiB through the
/// controller with that clock; returns the codec it judges best.
fn drive(
    a: &mut AutoController,
    t: &mut f64,
    cpu: [f64; 3],
    ratio: [f64; 3],
    link: f64,
    n: u32,
) -> Codec {
    for _ in 0..n {
        let pick = a.pick();
        if let Some(d) = pick.dry {
            a.observe_speed(d, cpu[d], ratio[d]);
        }
        let i = pick.codec;
        let goodput = (link / ratio[i]).min(cpu[i]);
        *t += CHUNK / goodput;
        a.sent(pick.epoch, CHUNK as u64, at(*t), None);
    }
    CANDIDATES[a.best()]
}

fn settle(cpu: [f64; 3], ratio: [f64; 3], link: f64) -> Codec {
    drive(
        &mut AutoController::default(),
        &mut 0.0,
        cpu,
        ratio,
        link,
        400,
    )
}

#[test]
fn auto_compresses_only_while_the_link_is_the_bottleneck() {
    // Per core, seed 001's data: LZ4 ~500 MB/s at 2:1, zstd-1 ~200 MB/s at 2.6:1.
    let cpu = [f64::INFINITY, 500.0 * MB, 200.0 * MB];
    let ratio = [1.0, 0.5, 0.38];
    // 1 Gbit/s: LZ4 doubles the goodput (250 vs 125 MB/s); zstd is CPU-bound at 200.
    assert_eq!(settle(cpu, ratio, 125.0 * MB), Codec::Lz4);
    // 100 Mbit/s: the stronger codec wins (33 vs 25 MB/s).
    assert_eq!(settle(cpu, ratio, 12.5 * MB), Codec::Zstd(1));
    // Loopback at 2 GB/s: the CPU is the bottleneck, send raw.
    assert_eq!(settle(cpu, ratio, 2000.0 * MB), Codec::Raw);
    // Incompressible data on a slow link: equal goodput, so the cheapest (raw).
    assert_eq!(settle(cpu, [1.0, 1.004, 1.001], 125.0 * MB), Codec::Raw);
}

#[test]
fn auto_follows_a_change_of_link_and_ignores_chunks_of_an_earlier_epoch() {
    let mut a = AutoController::default();
    let mut t = 0.0;
    let (cpu, ratio) = ([f64::INFINITY, 500.0 * MB, 200.0 * MB], [1.0, 0.5, 0.38]);
    assert_eq!(
        drive(&mut a, &mut t, cpu, ratio, 125.0 * MB, 300),
        Codec::Lz4
    );
    assert_eq!(
        drive(&mut a, &mut t, cpu, ratio, 2000.0 * MB, 600),
        Codec::Raw,
        "the link got fast: stop compressing"
    );
    // A chunk of an earlier epoch arriving late changes nothing.
    let before = a.clone();
    let late = a.sent(a.epoch.wrapping_sub(1), 1 << 30, at(t + 1e-6), None);
    assert!(late.is_none());
    assert_eq!(
        (a.bytes, a.chunks, a.epoch),
        (before.bytes, before.chunks, before.epoch)
    );
}

/// Runs 600 raw chunks at `raw` goodput past a controller for 2 compressing threads
/// whose codecs' dry runs give `speed` and `ratio`, and fails if any chunk of them
/// is picked for compression.
fn assert_never_compresses(speed: [f64; 3], ratio: [f64; 3], raw: f64, what: &str) {
    let mut a = AutoController {
        threads: 2,
        ..AutoController::default()
    };
    let mut t = 0.0;
    for _ in 0..600 {
        let pick = a.pick();
        if let Some(d) = pick.dry {
            a.observe_speed(d, speed[d], ratio[d]);
        }
        assert_eq!(pick.codec, 0, "{what}: epoch {} compressed", pick.epoch);
        t += 4.0 * 1048576.0 / raw;
        a.sent(pick.epoch, 4 << 20, at(t), None);
    }
}

#[test]
fn auto_never_tries_a_codec_that_cannot_beat_raw() {
    // Loopback at 2 GB/s, compressors at 500 and 200 MB/s on 2 threads: no epoch is
    // ever spent compressing (the dry runs cost CPU, not goodput).
    let speed = [f64::INFINITY, 500.0 * MB, 200.0 * MB];
    assert_never_compresses(speed, [1.0, 0.5, 0.5], 2000.0 * MB, "fast link");
}

#[test]
fn auto_never_tries_a_codec_on_data_it_cannot_shrink_nor_on_a_thin_promise() {
    // Random data behind a 1 Gbit/s link: the link is the bottleneck and LZ4 runs at
    // 700 MB/s, but its dry runs shrink nothing (ratio 1.0): fewer bytes cannot be
    // sent, so no epoch compresses.
    let speed = [f64::INFINITY, 700.0 * MB, 300.0 * MB];
    assert_never_compresses(speed, [1.0, 1.0, 0.99], 125.0 * MB, "random");
    // Compressible data at 1.3 GB/s raw, LZ4 able to carry 1.5 GB/s by its dry runs:
    // not enough above raw to pay for a trial that the receiver's decompression and
    // the shared cores would likely lose.
    let speed = [f64::INFINITY, 750.0 * MB, 300.0 * MB];
    assert_never_compresses(speed, [1.0, 0.5, 0.5], 1300.0 * MB, "thin");
}

/// Drives `a` with chunks that leave every `CHUNK / goodput` seconds, the sending
/// threads waiting on the wire for `wait` of their time (raw: `wait[0]`); returns
/// the codecs used.
fn drive_waiting(
    a: &mut AutoController,
    (speed, ratio): ([f64; 3], [f64; 3]),
    goodput: [f64; 3],
    wait: f64,
    n: u32,
) -> Vec<usize> {
    let mut t = 0.0;
    let mut codecs = Vec::new();
    for _ in 0..n {
        let pick = a.pick();
        if let Some(d) = pick.dry {
            a.observe_speed(d, speed[d], ratio[d]);
        }
        let dt = CHUNK / goodput[pick.codec];
        t += dt;
        // Each sender hands every `senders`-th chunk: its cycle is senders * dt.
        let blocked = Duration::from_secs_f64(wait * dt * f64::from(a.senders));
        a.handed(pick.epoch, blocked, at(t));
        a.sent(pick.epoch, CHUNK as u64, at(t), None);
        codecs.push(pick.codec);
    }
    codecs
}

#[test]
fn auto_leaves_a_pipeline_that_never_waits_on_its_link_alone() {
    // A disk read at 900 MB/s feeding a fast link: the senders hardly ever wait on
    // the wire (5 % of their time), the CPU has room and LZ4 would halve the bytes,
    // but fewer bytes cannot make the disk faster. No epoch compresses.
    let codecs = ([f64::INFINITY, 1500.0 * MB, 500.0 * MB], [1.0, 0.5, 0.5]);
    let two = || {
        let mut a = AutoController::default();
        a.set_threads(2);
        a.set_senders(2);
        a
    };
    let mut a = two();
    let used = drive_waiting(&mut a, codecs, [900.0 * MB; 3], 0.05, 600);
    assert!(used.iter().all(|&c| c == 0), "{used:?}");
    assert!(a.link_share.is_some_and(|f| f < 0.1), "{:?}", a.link_share);
    // The same senders behind a 1 Gbit/s link wait 95 % of their time: LZ4 is tried
    // and kept (halving the bytes doubles the goodput).
    let mut a = two();
    let goodput = [120.0 * MB, 240.0 * MB, 250.0 * MB];
    let used = drive_waiting(&mut a, codecs, goodput, 0.95, 600);
    let compressed = used[300..].iter().filter(|&&c| c != 0).count();
    assert!(compressed >= 300 - 300 / 8, "{compressed} of 300");
    // Once LZ4 runs, zstd-1 (ratio 0.4, fast enough) is tried against it and kept:
    // its promise is measured from LZ4's goodput, not only from raw's.
    let mut a = two();
    let zstd = ([f64::INFINITY, 1500.0 * MB, 800.0 * MB], [1.0, 0.5, 0.4]);
    let goodput = [120.0 * MB, 240.0 * MB, 300.0 * MB];
    let used = drive_waiting(&mut a, zstd, goodput, 0.95, 600);
    let on_zstd = used[300..].iter().filter(|&&c| c == 2).count();
    assert!(on_zstd >= 300 - 300 / 8, "{on_zstd} of 300 on zstd");
}

#[test]
fn auto_explores_little_once_settled() {
    // Chunks on the best codec after the first three epochs: at least 1 - 1/PROBE_EVERY.
    let mut a = AutoController::default();
    let mut t = 0.0;
    let (cpu, ratio) = ([f64::INFINITY, 500.0 * MB, 200.0 * MB], [1.0, 0.5, 0.38]);
    drive(&mut a, &mut t, cpu, ratio, 125.0 * MB, 3 * EPOCH_CHUNKS);
    let mut on_best = 0u32;
    for _ in 0..800 {
        let pick = a.pick();
        if let Some(d) = pick.dry {
            a.observe_speed(d, cpu[d], ratio[d]);
        }
        let i = pick.codec;
        on_best += u32::from(i == 1);
        t += 4.0 * 1048576.0 / (125.0 * MB / ratio[i]).min(cpu[i]);
        a.sent(pick.epoch, 4 << 20, at(t), None);
    }
    assert!(
        on_best >= 800 - 800 / PROBE_EVERY - EPOCH_CHUNKS,
        "{on_best} of 800"
    );
}

/// A machine of `cores` CPUs on which sending raw (both ends, as on loopback) costs
/// `raw_cost` CPU seconds per byte and codec `i` another `1 / speed[i]`: codec `i`
/// delivers min(link / ratio, threads × speed, cores / its whole cost). The CPU
/// counters the controller reads are this machine's, read only when it asks for them.
/// Returns the codec of each chunk.
fn drive_cpu(
    a: &mut AutoController,
    speed: [f64; 3],
    ratio: [f64; 3],
    link: f64,
    raw_cost: f64,
    n: u32,
) -> Vec<usize> {
    let (mut t, mut busy, mut idle) = (0.0, 0.0, 0.0);
    let (cores, threads) = (a.cores, f64::from(a.threads));
    let mut codecs = Vec::new();
    let mut reads = 0u32;
    for _ in 0..n {
        let pick = a.pick();
        if let Some(d) = pick.dry {
            a.observe_speed(d, speed[d], ratio[d]);
        }
        let i = pick.codec;
        let cost = raw_cost + if i == 0 { 0.0 } else { 1.0 / speed[i] };
        let goodput = (link / ratio[i]).min(threads * speed[i]).min(cores / cost);
        let dt = CHUNK / goodput;
        let used = goodput * cost;
        t += dt;
        busy += used * dt;
        idle += (cores - used) * dt;
        let clock = a.wants_cpu(pick.epoch).then_some(CpuClock {
            process: busy,
            idle,
        });
        reads += u32::from(clock.is_some());
        a.sent(pick.epoch, CHUNK as u64, at(t), clock);
        codecs.push(i);
    }
    // At most twice an epoch: the counters are a file read in the engine.
    assert!(
        reads <= 2 * (n / EPOCH_CHUNKS + 1),
        "{reads} reads for {n} chunks"
    );
    codecs
}

#[test]
fn auto_never_compresses_when_the_cpu_not_the_link_is_the_limit() {
    // Loopback on 2 cores: raw saturates both at 600 MB/s. By their dry runs LZ4
    // (700 MB/s per thread) and zstd-1 (300) on 2 threads could carry 1,400 and 600
    // MB/s, but every byte they compress is CPU that raw sending needs: no epoch may
    // compress (that cost 7-47 % of loopback goodput before the CPU was counted).
    let two_cores = || {
        let mut a = AutoController::new(2);
        a.set_threads(2);
        a
    };
    let mut a = two_cores();
    let (speed, ratio) = ([f64::INFINITY, 700.0 * MB, 300.0 * MB], [1.0, 0.5, 0.38]);
    let codecs = drive_cpu(&mut a, speed, ratio, 3000.0 * MB, 2.0 / (600.0 * MB), 800);
    assert!(codecs.iter().all(|&c| c == 0), "{codecs:?}");
    assert!(a.raw_cost.is_some(), "the CPU counters were read");
    // The same machine behind a 1 Gbit/s link: the CPU is mostly idle, so a codec
    // is tried and kept.
    let mut a = two_cores();
    let codecs = drive_cpu(&mut a, speed, ratio, 125.0 * MB, 2.0 / (600.0 * MB), 800);
    let compressed = codecs[400..].iter().filter(|&&c| c != 0).count();
    assert!(
        compressed >= 400 - 400 / PROBE_EVERY as usize - EPOCH_CHUNKS as usize,
        "{compressed} of 400"
    );
}

/// A pipeline with buffers between the sender's sockets and the receiver: the
/// sockets take a chunk as long as `buffer` wire bytes are not yet drained; the
/// receiver drains chunks in order, each in `orig / rx[codec] + wire / link` seconds
/// (its own work per original byte, the link per wire byte); the sender compresses at
/// `tx[codec]`. Returns the codec of every chunk.
fn drive_pipeline(
    auto: &mut Auto,
    (tx, rx, ratio): ([f64; 3], [f64; 3], [f64; 3]),
    link: f64,
    buffer: f64,
    n: u64,
) -> Vec<usize> {
    use std::collections::VecDeque;
    // In the buffers: (key, wire bytes, when the receiver is done with it).
    let mut queue: VecDeque<(ChunkKey, f64, f64)> = VecDeque::new();
    let (mut t, mut rx_done) = (0.0f64, 0.0f64);
    let mut codecs = Vec::new();
    for k in 0..n {
        let pick = auto.controller_mut().pick();
        if let Some(d) = pick.dry {
            auto.controller_mut().observe_speed(d, tx[d], ratio[d]);
        }
        let i = pick.codec;
        t += if i == 0 { 0.0 } else { CHUNK / tx[i] };
        let wire = CHUNK * ratio[i];
        let ready = t;
        // Wait for room, delivering what the receiver finished meanwhile.
        loop {
            let held: f64 = queue.iter().map(|q| q.1).sum();
            while let Some(&(key, _, done)) = queue.front() {
                if done > t {
                    break;
                }
                queue.pop_front();
                auto.delivered(key, at(done), None);
            }
            if held + wire <= buffer || queue.is_empty() {
                break;
            }
            t = t.max(queue.front().map_or(t, |q| q.2));
        }
        rx_done = rx_done.max(t) + CHUNK / rx[i] + wire / link;
        let key = (1, k * CHUNK as u64);
        queue.push_back((key, wire, rx_done));
        let departure = Departure {
            key,
            epoch: pick.epoch,
            payload: CHUNK as u64,
            at: at(t),
            blocked: Duration::from_secs_f64(t - ready),
        };
        auto.sent(departure, None);
        codecs.push(i);
    }
    codecs
}

fn acked_auto() -> Auto {
    let mut ctl = AutoController::default();
    ctl.set_threads(2);
    let mut a = Auto::with(ctl);
    a.measure_on_ack();
    a
}

#[test]
fn auto_measures_what_the_receiver_gets_not_what_the_sockets_took() {
    // A receiver that writes 1,000 MB/s raw but only 800 MB/s when it also has to
    // decompress, behind 64 MB of buffers (loopback: 16 MB of socket buffers per
    // connection, the sink's slots), on a link that is no limit: raw is the faster
    // choice. Counted when the socket takes a chunk, a codec that halves the bytes
    // looks better than it is while the buffers fill with twice the data: this
    // simulation then compressed 564 of the last 600 chunks (any buffer from 48 MB
    // up). Counted on the receiver's acknowledgement, raw wins.
    let machine = (
        [f64::INFINITY, 1500.0 * MB, 400.0 * MB],
        [1000.0 * MB, 800.0 * MB, 700.0 * MB],
        [1.0, 0.5, 0.38],
    );
    let codecs = drive_pipeline(&mut acked_auto(), machine, 1e12, 64.0 * MB, 1200);
    let compressed = codecs[600..].iter().filter(|&&c| c != 0).count();
    assert!(
        compressed <= 600 / 8,
        "acknowledged: {compressed} of the last 600 chunks compressed"
    );
    // The same link at 1 Gbit/s: now the bytes on the wire are the limit and the
    // acknowledged goodput says so.
    let codecs = drive_pipeline(&mut acked_auto(), machine, 125.0 * MB, 64.0 * MB, 1200);
    let compressed = codecs[600..].iter().filter(|&&c| c != 0).count();
    assert!(
        compressed >= 600 - 600 / 8,
        "1 Gbit/s: {compressed} of the last 600 chunks compressed"
    );
}

#[test]
fn counted_at_the_socket_the_buffers_fool_auto() {
    // The first case above without acknowledgements: the pipeline's buffers make a
    // codec look faster than it is (the reason goodput is measured on delivery).
    let machine = (
        [f64::INFINITY, 1500.0 * MB, 400.0 * MB],
        [1000.0 * MB, 800.0 * MB, 700.0 * MB],
        [1.0, 0.5, 0.38],
    );
    let mut ctl = AutoController::default();
    ctl.set_threads(2);
    let codecs = drive_pipeline(&mut Auto::with(ctl), machine, 1e12, 64.0 * MB, 1200);
    let compressed = codecs[600..].iter().filter(|&&c| c != 0).count();
    assert!(compressed > 600 / 2, "unacknowledged: {compressed} of 600");
}

fn departure(key: ChunkKey, epoch: u64, t: f64) -> Departure {
    Departure {
        key,
        epoch,
        payload: 1 << 20,
        at: at(t),
        blocked: Duration::ZERO,
    }
}

#[test]
fn acknowledged_chunks_count_once_on_delivery_and_refused_ones_never() {
    let mut a = acked_auto();
    for k in 0..EPOCH_CHUNKS {
        let pick = a.controller_mut().pick();
        assert!(a
            .sent(departure((1, u64::from(k)), pick.epoch, 0.0), None)
            .is_none());
    }
    assert_eq!(a.in_flight(), EPOCH_CHUNKS as usize);
    assert_eq!(a.controller().chunks, 0, "nothing counts before its word");
    a.refused((1, 0));
    assert!(
        a.delivered((1, 0), at(0.1), None).is_none(),
        "refused: forgotten"
    );
    assert!(a.delivered((9, 9), at(0.1), None).is_none(), "never sent");
    let mut reports = 0;
    for k in 1..EPOCH_CHUNKS {
        let t = 0.01 * f64::from(k);
        reports += usize::from(a.delivered((1, u64::from(k)), at(t), None).is_some());
        assert!(
            a.delivered((1, u64::from(k)), at(t), None).is_none(),
            "twice"
        );
    }
    assert_eq!(a.in_flight(), 0);
    assert_eq!(a.controller().chunks, EPOCH_CHUNKS - 1);
    assert_eq!(reports, 0, "one chunk short of an epoch");
    let pick = a.controller_mut().pick();
    a.sent(departure((2, 0), pick.epoch, 0.2), None);
    let report = a.delivered((2, 0), at(0.3), None).expect("the epoch ends");
    assert_eq!((report.epoch, report.codec), (0, Codec::Raw));
    assert!(
        report.to_string().starts_with("auto: epoch 0 Raw ran at "),
        "{report}"
    );
}

#[test]
fn a_full_map_drops_earlier_epochs_then_counts_at_the_socket() {
    let mut a = acked_auto();
    for k in 0..MAX_TRACKED as u64 {
        a.sent(departure((1, k), 0, 0.0), None);
    }
    assert_eq!(a.in_flight(), MAX_TRACKED);
    assert!(a.wants_cpu_on_send(0) == a.controller().wants_cpu(0));
    // Full of epoch 0's chunks: the next is counted as it leaves.
    a.sent(departure((2, 0), 0, 0.0), None);
    assert_eq!(a.in_flight(), MAX_TRACKED);
    assert_eq!(a.controller().chunks, 1);
    // A later epoch's chunk makes room by dropping epoch 0's.
    a.sent(departure((3, 0), 1, 0.0), None);
    assert_eq!(a.in_flight(), 1);
}

#[test]
fn the_cpu_counters_are_wanted_only_at_a_raw_epochs_two_marks() {
    let mut a = AutoController::default();
    let mut wanted = Vec::new();
    for k in 0..2 * EPOCH_CHUNKS {
        let pick = a.pick();
        if a.wants_cpu(pick.epoch) {
            wanted.push(k);
        }
        a.sent(pick.epoch, 1 << 20, at(f64::from(k) * 0.01), None);
    }
    let w = EPOCH_WARMUP - 1;
    let e = EPOCH_CHUNKS - 1;
    assert_eq!(wanted, [w, e, EPOCH_CHUNKS + w, EPOCH_CHUNKS + e]);
    assert!(!a.wants_cpu(a.epoch + 1), "not for another epoch");
}

#[test]
fn the_report_prints_as_the_engine_logged_it() {
    let r = EpochReport {
        epoch: 3,
        codec: Codec::Zstd(1),
        rate: 123.4e6,
        rates: [Some(100.0e6), None, Some(123.4e6)],
        link_share: 0.5,
        ceilings: [Some(1500.0e6), None],
        next: Codec::Lz4,
    };
    assert_eq!(
        r.to_string(),
        "auto: epoch 3 Zstd(1) ran at 123 MB/s; goodput raw/lz4/zstd [Some(100.0), None, Some(123.0)] MB/s, link share 0.50, ceilings [Some(1500.0), None] MB/s; next Lz4"
    );
}

#[test]
fn an_acknowledgement_read_before_its_departure_was_recorded_counts_when_it_is() {
    // A sending thread records a chunk once its write returns; a fast sink's word can
    // be read first. Regression: it was dropped, and a short stream never ended its
    // first epoch.
    let mut a = acked_auto();
    let mut reports = Vec::new();
    for k in 0..EPOCH_CHUNKS {
        let key = (1, u64::from(k));
        let t = 0.01 * f64::from(k);
        assert!(a.delivered(key, at(t), None).is_none(), "not counted yet");
        let pick = a.controller_mut().pick();
        reports.extend(a.sent(departure(key, pick.epoch, t + 0.001), None));
    }
    assert_eq!(a.in_flight(), 0, "each counted once, on its departure");
    assert_eq!(a.controller().chunks, 0, "the epoch ended");
    let report = reports.pop().expect("the epoch ends on its last chunk");
    assert!(reports.is_empty());
    assert_eq!((report.epoch, report.codec), (0, Codec::Raw));
    // Only the latest MAX_EARLY words are kept: an older one is forgotten, and its
    // chunk waits for a word that never comes.
    for k in 0..MAX_EARLY as u64 + 1 {
        a.delivered((2, k), at(1.0), None);
    }
    let pick = a.controller_mut().pick();
    a.sent(departure((2, 0), pick.epoch, 1.1), None);
    assert_eq!(a.in_flight(), 1, "forgotten");
    a.sent(departure((2, 1), pick.epoch, 1.1), None);
    assert_eq!(a.in_flight(), 1, "kept, and counted");
    // A refused chunk's early word is dropped with it.
    a.delivered((3, 0), at(1.2), None);
    a.refused((3, 0));
    a.sent(departure((3, 0), pick.epoch, 1.3), None);
    assert_eq!(a.in_flight(), 2);
}
