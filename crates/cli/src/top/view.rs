//! A frame as lines of text: printed by `--once`, drawn by the live view.

use super::model::{ChannelView, Frame, NodeView};

fn mib(bytes_per_s: f64) -> String {
    format!("{:.1} MiB/s", bytes_per_s / f64::from(1u32 << 20))
}

fn gib(bytes: f64) -> String {
    format!("{:.1} GiB", bytes / f64::from(1u32 << 30))
}

/// The frame's lines, headed by where it came from.
pub fn lines(f: &Frame, addr: &str, dt: f64) -> Vec<String> {
    let mut out = vec![
        format!("sluice top: {addr}, {dt:.1} s between scrapes"),
        format!(
            "throughput: payload {}, wire {}; {} session(s) running; {} chunk(s) resent",
            mib(f.rates.0),
            mib(f.rates.1),
            f.sessions,
            f.resent
        ),
        f.bottleneck.line(),
        String::new(),
    ];
    if !f.queues.is_empty() {
        let q: Vec<String> = f.queues.iter().map(|(s, n)| format!("{s} {n}")).collect();
        out.push(format!("queued chunks: {}", q.join(", ")));
    }
    for c in &f.channels {
        channel(&mut out, c);
    }
    for n in &f.nodes {
        node(&mut out, n);
    }
    for (c, rtt, retrans) in &f.connections {
        out.push(format!(
            "connection {c}: rtt {:.2} ms, {retrans:.1} retransmits/s",
            rtt * 1e3
        ));
    }
    for (nic, rx, tx) in &f.nics {
        out.push(format!("nic {nic}: rx {}, tx {}", mib(*rx), mib(*tx)));
    }
    out
}

fn channel(out: &mut Vec<String>, c: &ChannelView) {
    out.push(format!(
        "channel {}: {} of {} buffer slots in use",
        c.id, c.slots.1, c.slots.0
    ));
    out.push(format!(
        "  {:<11}{:>7}{:>9}{:>9}{:>14}",
        "stage", "busy", "waiting", "blocked", "rate"
    ));
    for s in &c.stages {
        out.push(format!(
            "  {:<11}{:>7.2}{:>9.2}{:>9.2}{:>14}",
            s.stage.name(),
            s.busy,
            s.idle,
            s.blocked,
            mib(s.rate)
        ));
    }
    out.push(String::new());
}

fn node(out: &mut Vec<String>, n: &NodeView) {
    out.push(format!(
        "node {}: memory {} free of {}; numa_miss {:.0}/s, other_node {:.0}/s",
        n.id,
        gib(n.memory.0),
        gib(n.memory.1),
        n.misses.0,
        n.misses.1
    ));
    for row in n.cpus.chunks(8) {
        let cells: Vec<String> = row
            .iter()
            .map(|(c, load)| format!("cpu{c:<3}{:>4.0}%", load * 100.0))
            .collect();
        out.push(format!("  {}", cells.join("  ")));
    }
    out.push(String::new());
}
