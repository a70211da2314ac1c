//! The link model, pure (time is a value): what happens to one packet that enters a
//! direction at `now_ns`. A router's output port: a tail-drop queue of `queue_bytes`,
//! serialisation at `rate_bps`, then random loss on the wire (seeded), then the fixed
//! one-way propagation delay. Departure times never decrease, so the ring stays a FIFO.

/// What the link does with one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Delivered at this time (ns on the monotonic clock).
    Due(u64),
    /// Dropped at the tail: the queue in front of the rate limit is full.
    QueueFull,
    /// Dropped on the wire by the random loss.
    Lost,
}

/// splitmix64: a small, seedable generator (the loss pattern repeats with the seed).
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// A uniform draw in [0, 1).
    pub fn unit(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One direction of one link.
pub struct Shaper {
    delay_ns: u64,
    rate_bps: u64,
    queue_bytes: u64,
    loss: f64,
    rng: Rng,
    link_free_ns: u64,
}

impl Shaper {
    /// `rate_bps == 0`: no rate limit (and no queue). `loss`: per wire segment, in [0, 1).
    pub fn new(delay_ns: u64, rate_bps: u64, queue_bytes: u64, loss: f64, seed: u64) -> Shaper {
        assert!((0.0..1.0).contains(&loss), "loss is a probability below 1");
        Shaper {
            delay_ns,
            rate_bps,
            queue_bytes,
            loss,
            rng: Rng::new(seed),
            link_free_ns: 0,
        }
    }

    /// A packet of `wire_bytes` (IP bytes of all its segments) and `segments` segments
    /// (more than 1 for a TSO super-packet) arrives at `now_ns`.
    ///
    /// A super-packet is lost whole with the probability that any of its segments would
    /// be: loss events come at the configured per-segment rate, each one a burst.
    pub fn admit(&mut self, now_ns: u64, wire_bytes: u64, segments: u32) -> Verdict {
        let mut depart_ns = now_ns;
        if self.rate_bps > 0 {
            let backlog_ns = self.link_free_ns.saturating_sub(now_ns);
            let backlog_bytes = mul_div(backlog_ns, self.rate_bps, 8_000_000_000);
            if backlog_bytes + wire_bytes > self.queue_bytes && backlog_bytes > 0 {
                return Verdict::QueueFull;
            }
            let serialise_ns = mul_div(wire_bytes, 8_000_000_000, self.rate_bps);
            self.link_free_ns = self.link_free_ns.max(now_ns) + serialise_ns;
            depart_ns = self.link_free_ns;
        }
        if self.loss > 0.0 {
            let keep = (1.0 - self.loss).powi(i32::try_from(segments).unwrap_or(i32::MAX));
            if self.rng.unit() >= keep {
                return Verdict::Lost;
            }
        }
        Verdict::Due(depart_ns + self.delay_ns)
    }
}

fn mul_div(a: u64, b: u64, c: u64) -> u64 {
    let q = u128::from(a) * u128::from(b) / u128::from(c);
    u64::try_from(q).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn no_rate_means_just_the_delay() {
        let mut s = Shaper::new(25 * MS, 0, 0, 0.0, 1);
        assert_eq!(s.admit(1000, 9000, 1), Verdict::Due(1000 + 25 * MS));
        assert_eq!(s.admit(1000, 64_000, 44), Verdict::Due(1000 + 25 * MS));
    }

    #[test]
    fn rate_serialises_and_the_queue_drops_at_the_tail() {
        // 1 Gbit/s: 125 bytes per microsecond; a queue of 125,000 bytes (1 ms)
        let mut s = Shaper::new(10 * MS, 1_000_000_000, 125_000, 0.0, 1);
        assert_eq!(s.admit(0, 12_500, 1), Verdict::Due(100_000 + 10 * MS));
        assert_eq!(s.admit(0, 12_500, 1), Verdict::Due(200_000 + 10 * MS));
        let mut due = 0;
        let mut dropped = 0;
        for _ in 0..20 {
            match s.admit(0, 12_500, 1) {
                Verdict::Due(t) => due = t,
                Verdict::QueueFull => dropped += 1,
                Verdict::Lost => unreachable!(),
            }
        }
        assert_eq!(
            due,
            1_000_000 + 10 * MS,
            "ten packets of 100 us fill the 1 ms queue"
        );
        assert_eq!(dropped, 12);
        // once the link drains, packets pass again and departures never go back in time
        assert_eq!(
            s.admit(5 * MS, 125, 1),
            Verdict::Due(5 * MS + 1000 + 10 * MS)
        );
    }

    #[test]
    fn loss_rate_matches_per_segment_probability() {
        let mut s = Shaper::new(0, 0, 0, 0.01, 7);
        let n = 200_000;
        let lost = (0..n)
            .filter(|_| s.admit(0, 1500, 1) == Verdict::Lost)
            .count();
        assert!((1600..2400).contains(&lost), "1 % of {n}, got {lost}");
        // a super-packet of 10 segments is lost with 1 - 0.99^10 = 9.6 %
        let lost = (0..n)
            .filter(|_| s.admit(0, 15_000, 10) == Verdict::Lost)
            .count();
        assert!((18_000..20_500).contains(&lost), "9.6 % of {n}, got {lost}");
    }

    #[test]
    fn same_seed_same_losses() {
        let pattern = |seed| {
            let mut s = Shaper::new(0, 0, 0, 0.1, seed);
            (0..1000)
                .map(|_| s.admit(0, 100, 1) == Verdict::Lost)
                .collect::<Vec<_>>()
        };
        assert_eq!(pattern(3), pattern(3));
        assert_ne!(pattern(3), pattern(4));
    }
}
