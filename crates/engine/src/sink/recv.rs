//! Receiving: one net-recv thread per data connection reads each chunk into a slot of
//! its channel's pool; the chunk is decoded and verified (here, or by a decompress
//! thread) and written (here, or by an io-write thread). A chunk that does not decode or
//! verify is asked for again and never written.

use super::{write, Received, Shared, ABORT_POLL};
use crate::codec::{CodecInputs, CodecPlan, CodecSite, Decompressor};
use crate::error::EngineError;
use crate::monitor::{Stage, StageClock, Time};
use crate::pipeline::Stages;
use crate::runtime::{self, queue_for, Runtime};
use crate::transport::{ChunkReceiver, DataEvent};
use crossbeam_channel::{bounded, Sender};
use sluice_buffers::{BufferPool, Slot};
use sluice_placement::Role;
use sluice_wire::{ChunkHeader, Compression, Segment};
use std::collections::HashMap;
use std::sync::Arc;

/// The queues of a channel's later stages (empty maps where a stage has no threads).
pub(super) struct Queues<'a> {
    /// To the io-write threads (queued pipeline).
    pub(super) writers: &'a runtime::Queues<Received>,
    /// To the decompress threads.
    pub(super) decompressors: &'a runtime::Queues<Received>,
}

/// Decompression stage (seed 001): when the session compresses and the plan has
/// decompress threads, net-recv threads hand compressed chunks to them through bounded
/// per-channel queues; each decompresses, verifies and writes (or queues for the
/// writers). Otherwise the net-recv thread decompresses itself.
pub(super) fn spawn_decompressors(
    stages: &mut Stages,
    runtime: &Arc<Runtime>,
    shared: &Arc<Shared>,
    writers: &runtime::Queues<Received>,
) -> Result<runtime::Queues<Received>, EngineError> {
    let codec = CodecPlan::decide(&CodecInputs::on(
        runtime,
        CodecSite::Sink,
        shared.opts.compress,
    ));
    let threads = codec.decompress_threads;
    let mut queues: runtime::Queues<Received> = HashMap::new();
    if threads == 0 {
        return Ok(queues);
    }
    shared.stats.set_codec_threads(threads);
    tracing::info!("decompress stage: {threads} threads");
    for d in 0..threads {
        let (channel, _) = runtime.pool_for(Role::Decompress, d);
        // Short: a deep queue would only hide from the source's `auto` what its choice
        // costs here (TCP back pressure has to reach it within an epoch).
        let (_, rx) = queues
            .entry(channel)
            .or_insert_with(|| bounded(2 * threads as usize))
            .clone();
        let to_writer = queue_for(writers, channel, d);
        let shared = Arc::clone(shared);
        stages.spawn(runtime, Role::Decompress, d, move || {
            let mut decompressor = Decompressor::new();
            let mut clock = shared.stats.clock(channel).homed(Stage::Decompress);
            while let Ok(inc) = rx.recv() {
                clock.dequeued(Stage::Decompress);
                clock.lap(Stage::Decompress, Time::Idle);
                let chunk = (inc.header, &inc.segments[..], inc.slot);
                let to = to_writer.as_ref();
                let codec = (&mut decompressor, &mut clock);
                if !accept_chunk(&shared, codec, channel, chunk, to) {
                    break;
                }
            }
            Ok(())
        })?;
    }
    Ok(queues)
}

/// One net-recv thread per connection, on the channel the plan gives it. A channel
/// without io-write (decompress) threads of its own hands its chunks to every
/// channel's, connection by connection.
pub(super) fn spawn_receivers(
    stages: &mut Stages,
    runtime: &Arc<Runtime>,
    shared: &Arc<Shared>,
    queues: &Queues<'_>,
    conns: Vec<ChunkReceiver>,
) -> Result<(), EngineError> {
    for (i, conn) in conns.into_iter().enumerate() {
        let i = u32::try_from(i).unwrap_or(u32::MAX);
        let (channel, pool) = runtime.pool_for(Role::NetRecv, i);
        let to = Next {
            writer: queue_for(queues.writers, channel, i),
            decompressor: queue_for(queues.decompressors, channel, i),
        };
        let shared = Arc::clone(shared);
        stages.spawn(runtime, Role::NetRecv, i, move || {
            receive(&shared, conn, (channel, &pool), &to)
        })?;
    }
    Ok(())
}

/// Where a net-recv thread's chunks go next.
struct Next {
    writer: Option<Sender<Received>>,
    decompressor: Option<Sender<Received>>,
}

/// A net-recv thread: reads chunks off `conn` until it ends or the session does.
fn receive(
    shared: &Shared,
    mut conn: ChunkReceiver,
    (channel, pool): (u32, &Arc<BufferPool>),
    to: &Next,
) -> Result<(), EngineError> {
    let mut decompressor = Decompressor::new();
    let mut clock = shared.stats.clock(channel).homed(Stage::Recv);
    // Once the session has ended (complete, or stopped), a connection whose reading was
    // stopped ends this thread quietly, whatever the read saw.
    let ended = |e: EngineError| if shared.aborted() { Ok(()) } else { Err(e) };
    loop {
        let header = match conn.next_event() {
            Ok(DataEvent::Chunk(h)) => h,
            Ok(DataEvent::Frame(_) | DataEvent::End) => return Ok(()),
            Err(e) => return ended(e),
        };
        clock.lap(Stage::Recv, Time::Idle);
        let Some(mut slot) = next_slot(shared, pool) else {
            return Ok(());
        };
        clock.blocked();
        let wire = header.wire_len as usize;
        if wire > slot.len() {
            return Err(EngineError::Config(format!(
                "chunk of {wire} bytes exceeds the {}-byte buffer slot",
                slot.len()
            )));
        }
        if let Err(e) = conn.payload(&mut slot[..wire]) {
            return ended(e);
        }
        clock.worked(Stage::Recv, u64::from(header.wire_len));
        slot.set_filled(wire);
        // A limited session reads no faster than its rate: TCP's window holds the
        // source back (`crate::bwlimit`).
        shared.opts.pace.wait(u64::from(header.wire_len));
        shared.stats.add_wire(channel, u64::from(header.wire_len));
        if let (Some(q), true) = (&to.decompressor, header.compression() != Compression::None) {
            let segments = conn.segments().to_vec();
            if q.send(Received {
                header,
                segments,
                slot,
            })
            .is_err()
            {
                return Ok(());
            }
            clock.enqueued(Stage::Decompress);
            clock.blocked();
            continue;
        }
        let chunk = (header, conn.segments(), slot);
        if !accept_chunk(
            shared,
            (&mut decompressor, &mut clock),
            channel,
            chunk,
            to.writer.as_ref(),
        ) {
            return Ok(());
        }
    }
}

/// A slot, or `None` at the session's end: never wait forever on slots held by a queue
/// whose writers are gone.
fn next_slot(shared: &Shared, pool: &Arc<BufferPool>) -> Option<Slot> {
    loop {
        if shared.aborted() {
            return None;
        }
        if let Some(s) = pool.acquire_timeout(ABORT_POLL) {
            return Some(s);
        }
    }
}

/// Decodes (a compressed chunk that does not decode is corrupt: re-sent, never
/// written), verifies (a mismatch is re-sent, never written) and writes a received
/// chunk (its header, segment table and slot, as they came off the wire), itself or
/// through `to_writer`. `false`: the writers are gone.
pub(super) fn accept_chunk(
    shared: &Shared,
    (decompressor, clock): (&mut Decompressor, &mut StageClock),
    channel: u32,
    (header, segments, mut slot): (ChunkHeader, &[Segment], Slot),
    to_writer: Option<&Sender<Received>>,
) -> bool {
    let compression = header.compression();
    if compression != Compression::None {
        let (wire, raw) = (header.wire_len as usize, header.raw_len as usize);
        let shuffle = header.shuffle();
        if let Err(e) = decompressor.decompress(compression, shuffle, &mut slot, wire, raw) {
            tracing::warn!("chunk of file {} does not decompress: {e}", header.file_id);
            nack(shared, &header, segments);
            return true;
        }
        clock.worked(Stage::Decompress, header.raw_len.into());
        slot.set_filled(raw);
    }
    let verified = header.verify(slot.filled_bytes());
    clock.worked(Stage::Verify, u64::from(header.raw_len));
    if !verified {
        nack(shared, &header, segments);
        return true;
    }
    shared.stats.add_payload(channel, u64::from(header.raw_len));
    match to_writer {
        Some(q) => {
            let segments = segments.to_vec();
            let sent = q
                .send(Received {
                    header,
                    segments,
                    slot,
                })
                .is_ok();
            clock.enqueued(Stage::Write);
            clock.blocked();
            sent
        }
        None => {
            write::write_chunk(shared, &header, segments, slot);
            clock.worked(Stage::Write, u64::from(header.raw_len));
            true
        }
    }
}

/// Asks the source to send a corrupted chunk again (each file of a packed chunk).
fn nack(shared: &Shared, header: &ChunkHeader, segments: &[Segment]) {
    tracing::warn!(
        "chunk of file {} at offset {} failed its checksum: asking the source to send it again",
        header.file_id,
        header.offset
    );
    // Counted here too, so that a pull's summary (the client is the sink) shows it.
    shared.stats.chunk_resent();
    for frame in sluice_session::sink::nacks(header, segments) {
        shared.control.send(frame);
    }
}
