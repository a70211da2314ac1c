//! The queue from the scanner thread to the master: bounded, and woken precisely. A
//! scanner ahead of the master waits on the full queue until the master has taken half
//! of it (one wake per half queue, not per entry: no ping-pong of `futex` calls, and no
//! `sched_yield` spinning before a wait); the master is woken only when it waits.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Why [`ScanRx::recv_timeout`] returned nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RecvError {
    /// Nothing came in time.
    Timeout,
    /// Nothing will: the sender is gone and the queue is empty.
    Disconnected,
}

struct State<T> {
    items: VecDeque<T>,
    sender_waits: bool,
    receiver_waits: bool,
    sender_gone: bool,
    receiver_gone: bool,
}

struct Queue<T> {
    state: Mutex<State<T>>,
    not_empty: Condvar,
    drained: Condvar,
    cap: usize,
}

impl<T> Queue<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The scanner's end.
pub(super) struct ScanTx<T>(Arc<Queue<T>>);

/// The master's end.
pub(super) struct ScanRx<T>(Arc<Queue<T>>);

/// A queue of `cap` items at most (at least 2).
pub(super) fn scan_queue<T>(cap: usize) -> (ScanTx<T>, ScanRx<T>) {
    let cap = cap.max(2);
    let q = Arc::new(Queue {
        state: Mutex::new(State {
            items: VecDeque::with_capacity(cap),
            sender_waits: false,
            receiver_waits: false,
            sender_gone: false,
            receiver_gone: false,
        }),
        not_empty: Condvar::new(),
        drained: Condvar::new(),
        cap,
    });
    (ScanTx(Arc::clone(&q)), ScanRx(q))
}

impl<T> ScanTx<T> {
    /// Queues `item`, waiting while the queue is full; `Err(item)` once the receiver
    /// is gone.
    pub(super) fn send(&self, item: T) -> Result<(), T> {
        let q = &self.0;
        let mut s = q.lock();
        while s.items.len() >= q.cap && !s.receiver_gone {
            s.sender_waits = true;
            s = q.drained.wait(s).unwrap_or_else(PoisonError::into_inner);
        }
        if s.receiver_gone {
            return Err(item);
        }
        s.items.push_back(item);
        if s.receiver_waits {
            s.receiver_waits = false;
            drop(s);
            q.not_empty.notify_one();
        }
        Ok(())
    }
}

impl<T> ScanRx<T> {
    /// The next item, waiting up to `timeout` for one.
    pub(super) fn recv_timeout(&self, timeout: Duration) -> Result<T, RecvError> {
        let q = &self.0;
        let deadline = Instant::now() + timeout;
        let mut s = q.lock();
        loop {
            if let Some(item) = s.items.pop_front() {
                if s.sender_waits && s.items.len() <= q.cap / 2 {
                    s.sender_waits = false;
                    drop(s);
                    q.drained.notify_one();
                }
                return Ok(item);
            }
            if s.sender_gone {
                return Err(RecvError::Disconnected);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(RecvError::Timeout);
            }
            s.receiver_waits = true;
            s = q
                .not_empty
                .wait_timeout(s, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            s.receiver_waits = false;
        }
    }
}

impl<T> Drop for ScanTx<T> {
    fn drop(&mut self) {
        self.0.lock().sender_gone = true;
        self.0.not_empty.notify_all();
    }
}

impl<T> Drop for ScanRx<T> {
    fn drop(&mut self) {
        self.0.lock().receiver_gone = true;
        self.0.drained.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_arrive_in_order_through_a_full_queue_and_the_end_is_seen() {
        let (tx, rx) = scan_queue::<u32>(4);
        let producer = std::thread::spawn(move || {
            for i in 0..1000 {
                tx.send(i).unwrap();
            }
        });
        let mut got = Vec::new();
        loop {
            match rx.recv_timeout(Duration::from_secs(30)) {
                Ok(i) => got.push(i),
                Err(e) => {
                    assert_eq!(e, RecvError::Disconnected);
                    break;
                }
            }
        }
        producer.join().unwrap();
        assert_eq!(got, (0..1000).collect::<Vec<_>>());
    }

    #[test]
    fn an_empty_queue_times_out_and_a_gone_receiver_fails_the_send() {
        let (tx, rx) = scan_queue::<u32>(2);
        assert_eq!(
            rx.recv_timeout(Duration::from_millis(1)),
            Err(RecvError::Timeout)
        );
        tx.send(1).unwrap();
        tx.send(2).unwrap();
        // Full: a third send waits until the receiver goes, then gives the item back.
        let blocked = std::thread::spawn(move || tx.send(3));
        drop(rx);
        assert_eq!(blocked.join().unwrap(), Err(3));
    }
}
