//! Bandwidth limits (`--bwlimit RATE`, the rsync/rclone habit): a rate in bytes per
//! second, a [`Limiter`] that one daemon (or one account) shares fairly between its
//! running sessions, and a session's [`Pace`].
//!
//! A session is paced where its bytes cross the wire on this host: before a chunk is
//! sent (source: `source/dispatch.rs`, inline or queued) and after a chunk is read off
//! a data connection (sink: `sink/recv.rs`, so TCP's window holds the far source back).
//! The pace is a token bucket kept as a virtual clock (GCRA): each chunk reserves
//! `bytes / rate` of it under a mutex held only for the arithmetic, and the thread
//! sleeps outside the lock until its reservation is due. Chunks go out at a steady
//! rate with a burst of at most [`BURST`]; nothing sleeps per file.
//!
//! Fair share: a session's rate is the smallest of its own (`cp --bwlimit`) and, for
//! each limiter it joined (the daemon's, its account's), that limiter's rate divided by
//! the sessions running under it, read again for every chunk, so a session that starts
//! or ends changes the others' shares at once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Lowest limit accepted, bytes per second: below it one chunk would take seconds.
pub const MIN_RATE: u64 = 1_000_000;
/// How far ahead of the steady rate a session may send after being idle.
pub const BURST: Duration = Duration::from_millis(50);

/// Parses a rate: bytes per second with an optional SI (`k`, `M`, `G`, `T`: powers of
/// 1000) or IEC (`Ki`, `Mi`, `Gi`, `Ti`: powers of 1024) suffix, optionally followed by
/// `B` and `/s`: `500M`, `2G`, `1.5Gi`, `20MB/s`, `250000000`.
///
/// # Errors
/// Not a rate, zero, or below [`MIN_RATE`]: one line saying what was expected.
pub fn parse_rate(text: &str) -> Result<u64, String> {
    let bad = || {
        format!("{text:?} is not a rate (expected bytes per second such as 500M, 2G, 100Mi or 250000000)")
    };
    let t = text.trim();
    let t = t.strip_suffix("/s").unwrap_or(t);
    let t = t.strip_suffix('B').unwrap_or(t);
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, suffix) = t.split_at(split);
    let number: f64 = number.parse().map_err(|_| bad())?;
    let scale: f64 = match suffix {
        "" => 1.0,
        "k" | "K" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return Err(bad()),
    };
    let rate = number * scale;
    if !rate.is_finite() || rate > 1e15 {
        return Err(bad());
    }
    // In range (checked above): the cast keeps the integer part.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let rate = rate as u64;
    if rate < MIN_RATE {
        return Err(format!(
            "{text:?} is below the lowest limit, {MIN_RATE} bytes per second (1M)"
        ));
    }
    Ok(rate)
}

/// A rate as people write it: `20 MB/s`, `1.25 GB/s`.
pub fn describe(rate: u64) -> String {
    let r = rate as f64;
    match rate {
        0..=999_999 => format!("{:.0} kB/s", r / 1e3),
        1_000_000..=999_999_999 => format!("{:.3} MB/s", r / 1e6).replace(".000", ""),
        _ => format!("{:.3} GB/s", r / 1e9).replace(".000", ""),
    }
}

/// A rate shared fairly by the sessions that joined it (a daemon's `--bwlimit`, an
/// account's `bwlimit`).
#[derive(Debug)]
pub struct Limiter {
    rate: u64,
    sessions: AtomicUsize,
}

impl Limiter {
    /// A limiter of `rate` bytes per second (at least 1).
    pub fn new(rate: u64) -> Arc<Limiter> {
        Arc::new(Limiter {
            rate: rate.max(1),
            sessions: AtomicUsize::new(0),
        })
    }

    /// Its rate.
    pub fn rate(&self) -> u64 {
        self.rate
    }

    /// Sessions running under it now.
    pub fn sessions(&self) -> usize {
        self.sessions.load(Ordering::Relaxed)
    }

    /// Counts a session in until the returned share is dropped.
    pub fn join(self: &Arc<Limiter>) -> Share {
        self.sessions.fetch_add(1, Ordering::Relaxed);
        Share(Arc::clone(self))
    }

    fn share(&self) -> u64 {
        self.rate / self.sessions().max(1) as u64
    }
}

/// One session's place under a [`Limiter`].
#[derive(Debug)]
pub struct Share(Arc<Limiter>);

impl Drop for Share {
    fn drop(&mut self) {
        self.0.sessions.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A session's pace: none (the default) or a token bucket at the session's rate.
/// Cloning shares the bucket.
#[derive(Debug, Clone, Default)]
pub struct Pace(Option<Arc<Paced>>);

#[derive(Debug)]
struct Paced {
    own: Option<u64>,
    shares: Vec<Share>,
    /// When the bytes reserved so far will have gone out at the rate (the bucket).
    clock: Mutex<Option<Instant>>,
}

impl Pace {
    /// No limit.
    pub fn none() -> Pace {
        Pace(None)
    }

    /// A pace at `own` bytes per second (if any) and within a fair share of each of
    /// `limiters` that is there; no limit when there is neither.
    pub fn new(own: Option<u64>, limiters: &[Option<&Arc<Limiter>>]) -> Pace {
        let shares: Vec<Share> = limiters.iter().flatten().map(|l| l.join()).collect();
        if own.is_none() && shares.is_empty() {
            return Pace(None);
        }
        Pace(Some(Arc::new(Paced {
            own,
            shares,
            clock: Mutex::new(None),
        })))
    }

    /// Whether this pace limits anything.
    pub fn is_limited(&self) -> bool {
        self.0.is_some()
    }

    /// The session's rate now, bytes per second (`None`: unlimited).
    pub fn rate(&self) -> Option<u64> {
        let p = self.0.as_ref()?;
        let shares = p.shares.iter().map(|s| s.0.share());
        shares.chain(p.own).min().map(|r| r.max(1))
    }

    /// Waits until `bytes` more may cross the wire at the session's rate.
    pub fn wait(&self, bytes: u64) {
        if let Some(at) = self.reserve(bytes, Instant::now()) {
            let now = Instant::now();
            if at > now {
                std::thread::sleep(at - now);
            }
        }
    }

    /// Reserves `bytes` at `now`: when they may go (`None`: unlimited).
    fn reserve(&self, bytes: u64, now: Instant) -> Option<Instant> {
        let rate = self.rate()?;
        let p = self.0.as_ref()?;
        let cost = Duration::from_secs_f64(bytes as f64 / rate as f64);
        let mut clock = p.clock.lock().unwrap_or_else(PoisonError::into_inner);
        let floor = now.checked_sub(BURST).unwrap_or(now);
        let start = clock.map_or(floor, |c| c.max(floor));
        *clock = Some(start + cost);
        Some(start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_take_si_and_iec_suffixes() {
        assert_eq!(parse_rate("500M"), Ok(500_000_000));
        assert_eq!(parse_rate("2G"), Ok(2_000_000_000));
        assert_eq!(parse_rate("20MB/s"), Ok(20_000_000));
        assert_eq!(parse_rate("100Mi"), Ok(100 << 20));
        assert_eq!(parse_rate("1.5Gi"), Ok(3 << 29));
        assert_eq!(parse_rate("1500k"), Ok(1_500_000));
        assert_eq!(parse_rate("250000000"), Ok(250_000_000));
        for bad in ["", "fast", "10X", "-5M", "M", "1e99G"] {
            let e = parse_rate(bad).unwrap_err();
            assert!(e.contains("not a rate"), "{bad}: {e}");
        }
        assert!(parse_rate("100k").unwrap_err().contains("below the lowest"));
    }

    #[test]
    fn describe_is_short() {
        assert_eq!(describe(20_000_000), "20 MB/s");
        assert_eq!(describe(2_500_000_000), "2.500 GB/s");
    }

    #[test]
    fn the_bucket_spaces_chunks_at_the_rate_after_a_burst() {
        let pace = Pace::new(Some(10_000_000), &[]);
        let t0 = Instant::now() + Duration::from_secs(1);
        // 1 MB chunks at 10 MB/s: 100 ms apart, the first at once (within the burst).
        let at: Vec<Instant> = (0..5)
            .map(|_| pace.reserve(1_000_000, t0).unwrap())
            .collect();
        assert!(at[0] <= t0);
        for w in at.windows(2) {
            assert_eq!(w[1] - w[0], Duration::from_millis(100));
        }
        // 50 MB at 10 MB/s: the last reservation is due ~5 s after the first.
        let pace = Pace::new(Some(10_000_000), &[]);
        let mut last = t0;
        for _ in 0..50 {
            last = pace.reserve(1_000_000, t0).unwrap();
        }
        assert_eq!(last + BURST - t0, Duration::from_millis(4900));
    }

    #[test]
    fn an_idle_session_gets_only_the_burst_back() {
        let pace = Pace::new(Some(10_000_000), &[]);
        let t0 = Instant::now() + Duration::from_secs(1);
        pace.reserve(1_000_000, t0);
        let later = t0 + Duration::from_secs(10);
        assert_eq!(pace.reserve(1_000_000, later), Some(later - BURST));
    }

    #[test]
    fn a_limiter_is_shared_fairly_and_shares_come_back() {
        let daemon = Limiter::new(30_000_000);
        let a = Pace::new(None, &[Some(&daemon)]);
        assert_eq!(a.rate(), Some(30_000_000));
        let b = Pace::new(None, &[Some(&daemon)]);
        let c = Pace::new(Some(5_000_000), &[Some(&daemon)]);
        assert_eq!(daemon.sessions(), 3);
        assert_eq!(a.rate(), Some(10_000_000));
        assert_eq!(c.rate(), Some(5_000_000), "its own limit is lower");
        drop((b, c));
        assert_eq!(daemon.sessions(), 1);
        assert_eq!(a.rate(), Some(30_000_000));
    }

    #[test]
    fn an_account_limit_and_the_daemon_limit_both_hold() {
        let daemon = Limiter::new(100_000_000);
        let alice = Limiter::new(20_000_000);
        let a1 = Pace::new(None, &[Some(&daemon), Some(&alice)]);
        let a2 = Pace::new(None, &[Some(&daemon), Some(&alice)]);
        let bob = Pace::new(None, &[Some(&daemon)]);
        assert_eq!(a1.rate(), Some(10_000_000));
        assert_eq!(a2.rate(), Some(10_000_000));
        assert_eq!(bob.rate(), Some(33_333_333));
    }

    #[test]
    fn an_account_may_have_a_bwlimit() {
        let head = "[[account]]\nname = \"a\"\ntoken = \"t\"\nroot = \"r\"\nrights = [\"read\"]\n";
        let e = crate::accounts::file::parse(&format!("{head}bwlimit = \"500M\"\n")).unwrap();
        assert_eq!(e[0].bwlimit, Some(500_000_000));
        let e = crate::accounts::file::parse(&format!("{head}bwlimit = 2000000\n")).unwrap();
        assert_eq!(e[0].bwlimit, Some(2_000_000));
        let e = crate::accounts::file::parse(head).unwrap();
        assert_eq!(e[0].bwlimit, None);
        let err = crate::accounts::file::parse(&format!("{head}bwlimit = \"fast\"\n")).unwrap_err();
        assert!(
            err.starts_with("account 1 (\"a\"): bwlimit: \"fast\" is not a rate"),
            "{err}"
        );
    }

    #[test]
    fn no_limit_reserves_nothing() {
        let p = Pace::none();
        assert!(!p.is_limited());
        assert_eq!(p.reserve(1 << 20, Instant::now()), None);
        assert!(!Pace::new(None, &[None]).is_limited());
    }
}
