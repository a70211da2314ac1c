//! Lending a received record's slot to the caller for as long as it likes (the Python
//! package hands a frame out as a numpy array over the slot, without a copy), without
//! ever stalling the stream.
//!
//! The receiving side's pools are fixed. Each connection's net-recv thread holds up to
//! `QUEUE_RECORDS + 1` slots of its pool (its queue, and the record arriving) and the
//! caller one more (the record it is reading): `3 * connections + 1`, the minimum the
//! stream asks of the pools when it starts. A slot the caller keeps is one the stream
//! cannot use: were the caller to keep them all, the connection whose record is due
//! would wait for a free slot while the caller waits for that record, forever.
//!
//! So a pool lends only its *spare* slots, those beyond that minimum
//! ([`spare_slots`]), counted exactly: a loan is taken when a slot is lent and given
//! back when its [`LentSlot`] is dropped, on whichever thread drops it (the slot goes
//! back to its pool first, then the loan). A record that cannot be lent stays with the
//! caller as an ordinary [`Slot`] to copy out and drop. With at most the spare slots
//! lent, the rest of the pool is the stream's minimum, so the connection whose record is
//! due always finds a free slot: the others hold at most `QUEUE_RECORDS + 1` each, and
//! the caller, waiting for that record, holds none.
//!
//! Loans are counted, not read off the pool's free count: that is lowest exactly when
//! the caller is slower than the network (every queue full), when a copy saved matters
//! most, and a rule on it would then never lend.

use super::QUEUE_RECORDS;
use sluice_buffers::{BufferPool, Slot};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Slots of a pool of `slots` that a stream's caller may keep while `connections`
/// net-recv threads draw from it: those beyond `(QUEUE_RECORDS + 1) * connections + 1`
/// (each connection's queue and arriving record, and the record the caller reads).
pub fn spare_slots(slots: u32, connections: usize) -> usize {
    let reserve = (QUEUE_RECORDS + 1)
        .saturating_mul(connections)
        .saturating_add(1);
    (slots as usize).saturating_sub(reserve)
}

/// A received record's slot in the caller's hands beyond the stream's reserve (see
/// [`StreamReceiver::lend`](super::StreamReceiver::lend)). Dropping it, on any thread,
/// gives the slot back to its pool and then the loan back to the stream.
#[derive(Debug)]
pub struct LentSlot {
    // Field order is drop order: the slot is back in its pool before the loan is.
    slot: Slot,
    _loan: Loan,
}

impl LentSlot {
    /// The record's slot (its bytes are the slot's `filled_bytes`).
    pub fn slot(&self) -> &Slot {
        &self.slot
    }
}

/// One slot lent from a pool: the pool's count of lent slots, taken back on drop.
#[derive(Debug)]
struct Loan(Arc<AtomicUsize>);

impl Drop for Loan {
    fn drop(&mut self) {
        let before = self.0.fetch_sub(1, Ordering::AcqRel);
        assert!(before > 0, "a loan was given back twice");
    }
}

/// One pool that net-recv threads draw from: how many of its slots may be lent, and
/// how many are.
#[derive(Debug)]
struct Lending {
    pool: Arc<BufferPool>,
    spare: usize,
    lent: Arc<AtomicUsize>,
}

/// The loans of a stream's receiving side, by pool: a handle that clones cheaply and
/// counts on after the stream has ended, while lent slots live on.
#[derive(Debug, Clone)]
pub struct Loans {
    pools: Arc<[Lending]>,
}

impl Loans {
    /// The loans of connections drawing from `pools` (one entry per connection, in
    /// stream order; connections may share a pool).
    pub(super) fn new(pools: &[Arc<BufferPool>]) -> Loans {
        let mut lendings: Vec<Lending> = Vec::new();
        for pool in pools {
            if lendings.iter().any(|l| Arc::ptr_eq(&l.pool, pool)) {
                continue;
            }
            let connections = pools.iter().filter(|p| Arc::ptr_eq(p, pool)).count();
            lendings.push(Lending {
                pool: Arc::clone(pool),
                spare: spare_slots(pool.slots(), connections),
                lent: Arc::new(AtomicUsize::new(0)),
            });
        }
        Loans {
            pools: lendings.into(),
        }
    }

    /// `slot` lent, if its pool has a spare slot not lent yet; else `slot` back, to be
    /// copied out and dropped. A slot of a pool no connection draws from is not lent.
    pub(super) fn lend(&self, slot: Slot) -> Result<LentSlot, Slot> {
        let Some(l) = self
            .pools
            .iter()
            .find(|l| Arc::ptr_eq(&l.pool, slot.pool()))
        else {
            return Err(slot);
        };
        let taken = l
            .lent
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < l.spare).then_some(n + 1)
            });
        match taken {
            Ok(_) => Ok(LentSlot {
                slot,
                _loan: Loan(Arc::clone(&l.lent)),
            }),
            Err(_) => Err(slot),
        }
    }

    /// Slots lent now and not yet dropped, in all pools.
    pub fn lent(&self) -> usize {
        self.pools
            .iter()
            .map(|l| l.lent.load(Ordering::Acquire))
            .sum()
    }

    /// Slots that may be lent at once, in all pools.
    pub fn spare(&self) -> usize {
        self.pools.iter().map(|l| l.spare).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::{bounded, RecvTimeoutError};
    use std::time::Duration;

    const SLOT: usize = 4096;

    fn pool(slots: u64) -> Arc<BufferPool> {
        Arc::new(BufferPool::new(None, slots * SLOT as u64, SLOT).expect("pool"))
    }

    #[test]
    fn a_pool_lends_what_lies_beyond_every_connections_queue_and_the_callers_record() {
        assert_eq!(QUEUE_RECORDS, 2, "the numbers below assume queues of two");
        assert_eq!(spare_slots(16, 2), 9); // Python's auto buffer_mem with streams=2
        assert_eq!(spare_slots(8, 2), 1);
        assert_eq!(spare_slots(7, 2), 0); // the minimum: nothing to lend
        assert_eq!(spare_slots(3, 2), 0);
        assert_eq!(spare_slots(4, 0), 3);
    }

    #[test]
    fn loans_stop_at_the_spare_slots_and_resume_when_one_is_dropped_on_another_thread() {
        let p = pool(10); // two connections: 10 - 7 = 3 spare
        let loans = Loans::new(&[Arc::clone(&p), Arc::clone(&p)]);
        assert_eq!(loans.spare(), 3);
        let mut lent: Vec<LentSlot> = (0..3)
            .map(|_| loans.lend(p.acquire()).expect("a spare slot"))
            .collect();
        assert_eq!(loans.lent(), 3);
        let refused = loans.lend(p.acquire()).expect_err("no spare slot left");
        assert_eq!(
            p.stats().free,
            6,
            "the refused slot is the caller's to drop"
        );
        drop(refused);
        let one = lent.pop().expect("a loan");
        std::thread::spawn(move || drop(one))
            .join()
            .expect("dropping thread");
        assert_eq!((loans.lent(), p.stats().free), (2, 8));
        let again = loans.lend(p.acquire()).expect("the loan given back");
        assert_eq!(loans.lent(), 3);
        drop((lent, again));
        assert_eq!((loans.lent(), p.stats().free), (0, 10));
    }

    #[test]
    fn each_pool_lends_by_its_own_connections_and_a_foreign_slot_is_refused() {
        let (a, b, foreign) = (pool(6), pool(4), pool(20));
        // Connection 0 on `a` (6 - 4 = 2 spare), connection 1 on `b` (none).
        let loans = Loans::new(&[Arc::clone(&a), Arc::clone(&b)]);
        assert_eq!(loans.spare(), 2);
        assert!(loans.lend(b.acquire()).is_err());
        assert!(loans.lend(foreign.acquire()).is_err());
        let kept: Vec<LentSlot> = (0..2)
            .map(|_| loans.lend(a.acquire()).expect("spare"))
            .collect();
        assert!(loans.lend(a.acquire()).is_err());
        assert_eq!(kept[0].slot().pool().slots(), 6);
    }

    /// The rule against a model of the receiving side: `connections` threads each fill
    /// slots of one shared pool into a queue of `QUEUE_RECORDS`, and a caller takes the
    /// records in turn and keeps every one it may. Every record arrives: the threads
    /// never starve for a slot while the caller waits.
    #[test]
    fn a_caller_keeping_every_lent_record_never_stalls_the_stream() {
        for (connections, slots) in [(1, 4), (2, 7), (2, 8), (3, 16), (4, 13), (2, 64)] {
            let p = pool(slots);
            let records = 40;
            let mut queues = Vec::new();
            let mut threads = Vec::new();
            for c in 0..connections {
                let (tx, rx) = bounded::<Slot>(QUEUE_RECORDS);
                queues.push(rx);
                let p = Arc::clone(&p);
                threads.push(std::thread::spawn(move || {
                    for k in (c..records).step_by(connections) {
                        let mut slot = p.acquire();
                        let tag = k.to_le_bytes();
                        slot[..tag.len()].copy_from_slice(&tag);
                        slot.set_filled(tag.len());
                        if tx.send(slot).is_err() {
                            return;
                        }
                    }
                }));
            }
            let loans = Loans::new(&vec![Arc::clone(&p); connections]);
            let mut kept = Vec::new();
            for k in 0..records {
                let slot = match queues[k % connections].recv_timeout(Duration::from_secs(10)) {
                    Ok(slot) => slot,
                    Err(RecvTimeoutError::Timeout) => {
                        panic!("record {k} of {connections} connections, {slots} slots: stalled")
                    }
                    Err(RecvTimeoutError::Disconnected) => panic!("record {k} never came"),
                };
                assert_eq!(slot.filled_bytes(), k.to_le_bytes(), "records in order");
                match loans.lend(slot) {
                    Ok(lent) => kept.push(lent),
                    Err(copied) => drop(copied),
                }
                assert!(loans.lent() <= loans.spare());
            }
            assert_eq!(kept.len(), loans.spare().min(records));
            for t in threads {
                t.join().expect("a connection's thread");
            }
        }
    }
}
