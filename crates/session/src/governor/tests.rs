use super::*;

const MS: u64 = 1000;
const MIB: u64 = 1 << 20;

/// A connection's counters after `secs` more seconds at `rate` bytes/s acknowledged,
/// with `loss` of the bytes sent retransmitted.
fn advance(s: Sample, secs: f64, rate: f64, loss: f64) -> Sample {
    let acked = bytes(rate * secs);
    let sent = bytes(acked as f64 / (1.0 - loss));
    Sample {
        at_us: s.at_us + bytes(secs * 1e6),
        bytes_sent: s.bytes_sent + sent,
        bytes_retrans: s.bytes_retrans + sent - acked,
        bytes_acked: s.bytes_acked + acked,
        delivery_rate: bytes(rate),
        min_rtt_us: s.min_rtt_us,
    }
}

fn start(rtt_ms: u64) -> Sample {
    Sample {
        min_rtt_us: u32::try_from(rtt_ms * MS).unwrap(),
        ..Sample::default()
    }
}

#[test]
fn random_loss_never_clamps() {
    // 0.1 % random loss, the worst lossy path: far below HIGH_LOSS.
    let mut g = Governor::new(2, 64 * MIB, 8 * MIB);
    let mut s = [start(50), start(50)];
    for _ in 0..50 {
        s = s.map(|x| advance(x, 0.2, 60e6, 0.001));
        assert!(g.tick(&s.map(Some)).is_empty());
    }
    assert_eq!(g.clamps(), 0);
}

#[test]
fn overrun_clamps_to_the_achieved_window_and_shrinks_while_losing() {
    let mut g = Governor::new(1, 64 * MIB, 8 * MIB);
    let mut s = advance(start(50), 0.2, 150e6, 0.0);
    assert!(
        g.tick(&[Some(s)]).is_empty(),
        "the first sample only sets the origin"
    );
    s = advance(s, 0.2, 150e6, 0.12);
    let c = g.tick(&[Some(s)]);
    // 150 MB/s x 50 ms = 7.5 MB achieved; x 1.25 in flight.
    let want = bytes(150e6 * 0.05 * GAIN);
    assert_eq!(c.len(), 1);
    let k = c[0].inflight.unwrap();
    assert!(k.abs_diff(want) < want / 100, "{k} vs {want}");
    assert_eq!(c[0].unsent, k / 4);
    // Still losing: it shrinks by DECREASE each interval, never below the floor.
    s = advance(s, 0.2, 150e6, 0.05);
    let k2 = g.tick(&[Some(s)])[0].inflight.unwrap();
    assert!(k2 < k && k2.abs_diff(k.mul_f(DECREASE)) <= 1);
    for _ in 0..60 {
        s = advance(s, 0.2, 150e6, 0.05);
        g.tick(&[Some(s)]);
    }
    assert_eq!(g.clamp_of(0), Some(FLOOR_BYTES));
    s = advance(s, 0.2, 150e6, 0.05);
    assert!(g.tick(&[Some(s)]).is_empty(), "nothing below the floor");
}

#[test]
fn a_calm_path_grows_the_clamp_back_and_lifts_it() {
    let mut g = Governor::new(1, 16 * MIB, 8 * MIB);
    let mut s = advance(start(50), 0.2, 100e6, 0.0);
    g.tick(&[Some(s)]);
    s = advance(s, 0.2, 100e6, 0.2);
    let k = g.tick(&[Some(s)])[0].inflight.unwrap();
    let mut grew = 0;
    let mut lifted = false;
    for i in 0..100 {
        s = advance(s, 0.2, 100e6, 0.0);
        for c in g.tick(&[Some(s)]) {
            assert_eq!(i % 2, 1, "grows only after {CALM_TICKS} calm intervals");
            match c.inflight {
                Some(n) => {
                    assert!(n > k && n < 16 * MIB);
                    grew += 1;
                }
                None => {
                    assert_eq!(c.unsent, 8 * MIB);
                    lifted = true;
                }
            }
        }
        if lifted {
            break;
        }
    }
    assert!(lifted && grew > 3, "grew {grew} times, lifted {lifted}");
    assert_eq!(g.clamp_of(0), None);
}

#[test]
fn moderate_loss_holds_and_idle_intervals_do_not_count() {
    let mut g = Governor::new(1, 64 * MIB, 8 * MIB);
    let mut s = advance(start(50), 0.2, 100e6, 0.0);
    g.tick(&[Some(s)]);
    s = advance(s, 0.2, 100e6, 0.1);
    let k = g.tick(&[Some(s)])[0].inflight.unwrap();
    for _ in 0..10 {
        s = advance(s, 0.2, 100e6, 0.01); // between LOW and HIGH: hold
        assert!(g.tick(&[Some(s)]).is_empty());
    }
    for _ in 0..10 {
        s = advance(s, 0.2, 1e5, 0.5); // 20 KB in an interval: idle, not judged
        assert!(g.tick(&[Some(s)]).is_empty());
    }
    assert_eq!(g.clamp_of(0), Some(k));
    assert_eq!(g.tick(&[None]), vec![]);
}

/// A fluid model of `n` BBR-like connections through one bottleneck of `cap` bytes/s
/// with a queue of one bandwidth-delay product: each keeps twice its estimate of its
/// share's window in flight, the estimate a max filter that remembers its last probe
/// (1.25 times the share), and probes 1.25 times higher one interval in eight; whatever
/// is in flight beyond the pipe and the queue is lost. Returns the delivered rate and
/// the loss share, averaged over the last quarter of the intervals.
fn simulate(n: usize, cap: f64, rtt_ms: u64, governed: bool, ticks: usize) -> (f64, f64) {
    let rtt = rtt_ms as f64 / 1e3;
    let bdp = cap * rtt;
    let planned = bytes(4.0 * bdp);
    let mut g = Governor::new(n, planned, 8 * MIB);
    let mut samples = vec![start(rtt_ms); n];
    let mut tail = (0.0, 0.0, 0.0);
    let period = Governor::period(Duration::from_millis(rtt_ms)).as_secs_f64();
    for t in 0..ticks {
        let gain = if t % 8 == 0 { 1.25 } else { 1.0 }; // ProbeBW's up phase
        let want: Vec<f64> = (0..n)
            .map(|i| {
                let own = 2.0 * 1.25 * bdp / n as f64 * gain;
                match g.clamp_of(i) {
                    Some(k) if governed => own.min(k as f64),
                    _ => own.min(planned as f64),
                }
            })
            .collect();
        let total: f64 = want.iter().sum();
        let loss = ((total - 2.0 * bdp) / total).max(0.0);
        let rate = (total / rtt).min(cap);
        for (i, s) in samples.iter_mut().enumerate() {
            *s = advance(*s, period, rate * want[i] / total, loss);
        }
        if governed {
            g.tick(&samples.iter().copied().map(Some).collect::<Vec<_>>());
        }
        if t >= ticks - ticks / 4 {
            tail = (tail.0 + rate, tail.1 + loss, tail.2 + 1.0);
        }
    }
    (tail.0 / tail.2, tail.1 / tail.2)
}

#[test]
fn two_connections_through_a_shallow_queue_stop_losing_and_keep_the_rate() {
    let cap = 375e6; // 3 Gbit/s
    let (rate, loss) = simulate(2, cap, 50, false, 80);
    assert!(loss > HIGH_LOSS, "ungoverned, the model overruns: {loss}");
    assert!(rate >= cap * 0.99);
    for n in [1, 2, 4, 8] {
        let (rate, loss) = simulate(n, cap, 50, true, 200);
        assert!(loss < HIGH_LOSS, "{n} connections: loss {loss}");
        assert!(rate >= cap * 0.95, "{n} connections: {rate} of {cap}");
    }
}
