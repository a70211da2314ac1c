//! Which data connection an inline sender puts a chunk on: the one where it would
//! leave soonest.
//!
//! A connection the sender finds unlocked may still hold megabytes it has not sent
//! (up to `TCP_NOTSENT_LOWAT` beyond the last chunk written into it). Where one
//! connection's congestion control settled far below the others' (BBR flows over a
//! long path often do: one ran at 10 Mbit/s while seven ran at 100-250), a chunk put
//! there by turn waits behind that backlog, and the session ends only when its last
//! chunk arrives: 1.4 s after the last of the seven others had finished, in one 1 GiB
//! push over 8 connections at 100 ms (`bench/runs/2026-11-28-vm-wan-earliest`). Ranking the
//! connections by when the chunk would leave (unsent bytes plus the chunk, over the
//! pacing rate, both from `TCP_INFO`) sends it where it finishes first, the way an
//! MPTCP scheduler picks its subflow (Earliest Completion First).

use crate::net::tcp::Backlog;

/// When the last byte of a chunk of `len` bytes would leave a connection with backlog
/// `b`, nanoseconds from now; `u128::MAX` where the kernel told nothing (or no rate).
pub(super) fn finish_ns(b: Option<Backlog>, len: u64) -> u128 {
    match b {
        Some(b) if b.rate > 0 => {
            (u128::from(b.unsent) + u128::from(len)) * 1_000_000_000 / u128::from(b.rate)
        }
        _ => u128::MAX,
    }
}

/// Fills `order` with the connections `0..finish.len()` by `finish` (earliest first);
/// equal times in round-robin order from `rr`, so that connections the kernel says the
/// same of (or nothing of) take chunks in turn.
pub(super) fn rank(finish: &[u128], rr: usize, order: &mut Vec<usize>) {
    let n = finish.len();
    order.clear();
    order.extend(0..n);
    if n == 0 {
        return;
    }
    let turn = |k: usize| (k + n - rr % n) % n;
    order.sort_unstable_by_key(|&k| (finish[k], turn(k)));
    debug_assert_eq!(order.len(), n);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(unsent: u64, rate: u64) -> Option<Backlog> {
        Some(Backlog { unsent, rate })
    }

    #[test]
    fn the_finish_counts_the_backlog_and_the_chunk_at_the_rate() {
        assert_eq!(finish_ns(b(0, 1_000_000), 1_000_000), 1_000_000_000);
        assert_eq!(finish_ns(b(3_000_000, 1_000_000), 1_000_000), 4_000_000_000);
        assert_eq!(finish_ns(b(5, 0), 1), u128::MAX, "no rate: unknown");
        assert_eq!(finish_ns(None, 1), u128::MAX);
        assert_eq!(
            finish_ns(b(u64::MAX, 1), u64::MAX),
            u128::from(u64::MAX) * 2 * 1_000_000_000,
            "no overflow"
        );
    }

    #[test]
    fn a_slow_connection_with_a_backlog_comes_last() {
        // 8 MiB unsent on each; one at 1.25 MB/s (10 Mbit/s), the others at 12.5-31 MB/s.
        let chunk = 4 << 20;
        let finish: Vec<u128> = [12_500_000, 1_250_000, 31_000_000, 15_000_000]
            .iter()
            .map(|&rate| finish_ns(b(8 << 20, rate), chunk))
            .collect();
        let mut order = Vec::new();
        rank(&finish, 1, &mut order);
        assert_eq!(order, vec![2, 3, 0, 1]);
        // An idle slow connection still loses to a fast one with a backlog: 4 MiB at
        // 1.25 MB/s is 3.4 s, 12 MiB at 31 MB/s 0.4 s.
        let finish = [
            finish_ns(b(0, 1_250_000), chunk),
            finish_ns(b(8 << 20, 31_000_000), chunk),
        ];
        rank(&finish, 0, &mut order);
        assert_eq!(order, vec![1, 0]);
    }

    #[test]
    fn equal_or_unknown_connections_take_chunks_in_turn() {
        let mut order = Vec::new();
        for rr in 0..6 {
            rank(&[u128::MAX; 3], rr, &mut order);
            assert_eq!(order[0], rr % 3, "round robin where nothing is known");
            assert_eq!(order, vec![rr % 3, (rr + 1) % 3, (rr + 2) % 3]);
        }
        // Known connections go before unknown ones; among equals, the turn decides.
        rank(&[u128::MAX, 7, 7], 2, &mut order);
        assert_eq!(order, vec![2, 1, 0]);
        rank(&[], 3, &mut order);
        assert!(order.is_empty());
    }
}
