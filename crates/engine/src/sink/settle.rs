//! When a sink that closes by itself (`SINK_CLOSES`) may close: the manifest has ended
//! and every data file it received has had its final word. The net-recv and io-write
//! threads end files; the master thread learns of the last one here.

use crossbeam_channel::{bounded, Receiver, Sender};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Data files in flight, whether the manifest has ended, and the master's wake-up.
///
/// A file counts from its entry in the table until its final word (`FileDone` or
/// `FileFailed`) is handed to the control connection, or until the source's
/// `FileFailed` forgets it. The count falls only after the word is queued, so the
/// `CloseAck` the master queues once it reads zero goes behind every word.
#[derive(Debug)]
pub(super) struct Settle {
    in_flight: AtomicUsize,
    manifest_ended: AtomicBool,
    /// A file failed (here or at the source): its remaining chunks may still be on
    /// their way, so the data connections are read to their end.
    failed: AtomicBool,
    wake: Sender<()>,
}

impl Settle {
    /// The counter, and the receiver the master waits on beside its control events.
    pub(super) fn new() -> (Settle, Receiver<()>) {
        // One wake-up is enough: the master reads the count when it wakes.
        let (wake, woken) = bounded(1);
        let settle = Settle {
            in_flight: AtomicUsize::new(0),
            manifest_ended: AtomicBool::new(false),
            failed: AtomicBool::new(false),
            wake,
        };
        (settle, woken)
    }

    /// A data file goes into the table (the master thread, before `ManifestEnd`).
    /// Counted before it is in: a chunk that waits for it may end it at once.
    pub(super) fn received(&self) {
        debug_assert!(!self.manifest_ended.load(Ordering::SeqCst));
        self.in_flight.fetch_add(1, Ordering::SeqCst);
    }

    /// The table refused the file counted by [`Settle::received`] (the session fails).
    pub(super) fn unreceived(&self) {
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }

    /// A file that was in the table has had its final word (queued already), or was
    /// forgotten. The last one after `ManifestEnd` wakes the master.
    pub(super) fn ended(&self) {
        let before = self.in_flight.fetch_sub(1, Ordering::SeqCst);
        debug_assert!(before > 0, "more files ended than were received");
        if before == 1 && self.manifest_ended.load(Ordering::SeqCst) {
            let _ = self.wake.try_send(());
        }
    }

    /// The master handled `ManifestEnd`. With the two `SeqCst` orders, either the
    /// master's [`Settle::settled`] after this reads zero or the thread that ends the
    /// last file reads the flag and wakes it (both may happen).
    pub(super) fn end_manifest(&self) {
        self.manifest_ended.store(true, Ordering::SeqCst);
    }

    /// A file failed (the sink's `FileFailed`, or the source's).
    pub(super) fn file_failed(&self) {
        self.failed.store(true, Ordering::SeqCst);
    }

    /// Whether no chunk can still be on its way once settled: no file failed, so every
    /// chunk the source sent was needed and is in. (A failed file's chunks keep coming
    /// until the source reads the failure; cutting them off would reset the source's
    /// connection.)
    pub(super) fn nothing_more_comes(&self) -> bool {
        self.settled() && !self.failed.load(Ordering::SeqCst)
    }

    /// Whether the manifest has ended and no data file is in flight.
    pub(super) fn settled(&self) -> bool {
        self.manifest_ended.load(Ordering::SeqCst) && self.in_flight.load(Ordering::SeqCst) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_file_after_the_manifest_wakes_the_master_once_it_is_settled() {
        let (s, woken) = Settle::new();
        s.received();
        s.received();
        s.ended();
        assert!(woken.try_recv().is_err(), "the manifest may announce more");
        s.end_manifest();
        assert!(!s.settled(), "one file is in flight");
        s.ended();
        assert!(woken.try_recv().is_ok(), "the last one wakes the master");
        assert!(s.settled());
        assert!(s.nothing_more_comes());
        s.file_failed();
        assert!(
            !s.nothing_more_comes(),
            "a failed file's chunks may still come"
        );
    }

    #[test]
    fn a_manifest_ending_after_the_last_file_is_settled_at_once() {
        let (s, woken) = Settle::new();
        s.received();
        s.ended();
        assert!(!s.settled(), "the manifest has not ended");
        s.end_manifest();
        assert!(s.settled());
        assert!(woken.try_recv().is_err(), "nobody needs waking");
    }

    #[test]
    fn racing_threads_never_miss_the_end() {
        // Many times over: the master ends the manifest while another thread ends the
        // last file; at least one of them sees the end.
        for _ in 0..2000 {
            let (s, woken) = Settle::new();
            s.received();
            let s = std::sync::Arc::new(s);
            let t = {
                let s = std::sync::Arc::clone(&s);
                std::thread::spawn(move || s.ended())
            };
            s.end_manifest();
            let at_once = s.settled();
            t.join().unwrap();
            assert!(at_once || woken.try_recv().is_ok());
        }
    }
}
