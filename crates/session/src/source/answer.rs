//! The sink's answers while files are in flight: `Have`, `FileDone`, `FileFailed`,
//! `ChunkNack`, `ChunkAck`, `Error`; and `CloseAck` at the end.

use super::rules::{self, Decision};
use super::{
    Phase, Report, SourceAction, SourceCore, SourceError, MAX_CHUNK_RESENDS,
    MAX_REFUSED_CHUNKS_PER_FILE,
};
use crate::time::Instant;
use sluice_wire::{ChunkNack, ErrorCode, FileDone, FileFailed, Frame, Have};

impl SourceCore {
    /// A frame while files are in flight (or just after the last was answered).
    pub(super) fn answer(&mut self, frame: Frame, now: Instant) -> Result<(), SourceError> {
        match frame {
            Frame::Have(have) => self.on_have(have),
            Frame::FileDone(done) => self.on_done(&done),
            Frame::FileFailed(failed) => self.on_failed(failed),
            Frame::ChunkNack(nack) => self.on_nack(&nack),
            Frame::ChunkAck(ack) => self.push(SourceAction::Delivered {
                key: (ack.file_id, ack.offset),
                at: now,
            }),
            Frame::Error(e) => {
                return Err(SourceError::Remote {
                    code: e.code,
                    message: e.message,
                })
            }
            Frame::CloseAck(_) if self.cfg.sink_closes => return self.closed_by_sink(),
            // Nothing else is for the source now (a `CloseAck` before `Close`).
            _ => {}
        }
        Ok(())
    }

    /// The sink's unasked `CloseAck`: it comes behind every final word, so only once
    /// the scan has ended and every file is answered (`Sending`: the data path may
    /// still be draining); earlier, the sink broke the protocol and the session fails.
    fn closed_by_sink(&mut self) -> Result<(), SourceError> {
        if self.phase != Phase::Sending {
            return Err(SourceError::Unexpected {
                got: "CloseAck",
                state: if self.phase == Phase::Scanning {
                    "the scan goes on"
                } else {
                    "files are unanswered"
                },
            });
        }
        self.close_acked = true;
        Ok(())
    }

    /// A frame once `Close` went out: only `CloseAck` (or an `Error`) matters.
    pub(super) fn closing(&mut self, frame: Frame) -> Result<(), SourceError> {
        match frame {
            Frame::CloseAck(_) => {
                self.phase = Phase::Closed;
                Ok(())
            }
            Frame::Error(e) => Err(SourceError::Remote {
                code: e.code,
                message: e.message,
            }),
            _ => Ok(()),
        }
    }

    /// What the sink holds of a file decides what is sent of it.
    fn on_have(&mut self, have: Have) {
        let chunk_bytes = self.cfg.chunk_bytes;
        let Some(a) = self.pending.get_mut(&have.file_id) else {
            return; // answered already (failed), or never announced
        };
        if a.answered {
            return; // a second answer: the first one holds
        }
        a.answered = true;
        match rules::decide(&a.entry, have.state, chunk_bytes) {
            Decision::Send { skip, resumed } => {
                if let Some(bytes) = resumed {
                    self.push(SourceAction::Report(Report::Resumed { bytes }));
                }
                self.push(SourceAction::Schedule {
                    file_id: have.file_id,
                    skip,
                });
            }
            Decision::Nothing => {}
            Decision::Mismatch => {
                if let Some(a) = self.pending.remove(&have.file_id) {
                    let message = format!(
                        "{:?}: the sink answered Complete for another version of the file ({})",
                        a.entry.path.as_str(),
                        ErrorCode::BadFrame.name()
                    );
                    let entry = a.entry;
                    self.push(SourceAction::Report(Report::Failed { entry, message }));
                }
            }
            Decision::Skipped => {
                if let Some(a) = self.pending.remove(&have.file_id) {
                    self.push(SourceAction::Report(Report::Skipped(a.entry)));
                }
            }
        }
    }

    fn on_done(&mut self, done: &FileDone) {
        if let Some(a) = self.pending.remove(&done.file_id) {
            self.push(SourceAction::Report(Report::Done {
                entry: a.entry,
                digest: done.digest,
            }));
        }
    }

    /// The sink gave the file up: read and send none of the rest of it.
    fn on_failed(&mut self, failed: FileFailed) {
        self.push(SourceAction::Cancel {
            file_id: failed.file_id,
        });
        if let Some(a) = self.pending.remove(&failed.file_id) {
            self.push(SourceAction::Report(Report::Failed {
                entry: a.entry,
                message: failed.message,
            }));
        }
    }

    /// The sink saw a corrupted chunk and wrote nothing: read and send it again.
    fn on_nack(&mut self, nack: &ChunkNack) {
        self.push(SourceAction::Refused {
            key: (nack.file_id, nack.offset),
        });
        let Some(a) = self.pending.get_mut(&nack.file_id) else {
            return;
        };
        let known = a.refused.len();
        let times = a.refused.entry(nack.offset).or_insert(0);
        *times += 1;
        if *times > MAX_CHUNK_RESENDS || known > MAX_REFUSED_CHUNKS_PER_FILE {
            let message = format!(
                "{:?}: the sink refused the chunk at byte {} {} times ({:?}): the file is given up",
                a.entry.path.as_str(),
                nack.offset,
                *times,
                nack.reason
            );
            self.fail_here(nack.file_id, nack.reason, message);
            return;
        }
        let work = rules::resend(&self.cfg, a.entry.size, nack);
        self.push(SourceAction::Report(Report::ChunkResent));
        self.push(SourceAction::Resend {
            file_id: nack.file_id,
            work,
        });
    }
}
