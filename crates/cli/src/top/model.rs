//! What one frame of `sluice top` shows, from two scrapes `dt` seconds apart: rates are
//! the differences of the counters over `dt`.

use super::scrape::Sample;
use sluice_engine::monitor::{Bottleneck, CellFigures, Stage};
use std::collections::BTreeMap;

/// One stage of one channel over the interval.
#[derive(Debug, Clone, PartialEq)]
pub struct StageView {
    /// The stage.
    pub stage: Stage,
    /// Busy threads (seconds of work per second).
    pub busy: f64,
    /// Threads waiting for input.
    pub idle: f64,
    /// Threads waiting for the next stage.
    pub blocked: f64,
    /// Bytes per second.
    pub rate: f64,
}

/// One channel.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChannelView {
    /// The plan's channel id.
    pub id: String,
    /// Buffer slots, and those in use now.
    pub slots: (f64, f64),
    /// Its stages that ran.
    pub stages: Vec<StageView>,
}

/// One NUMA node.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NodeView {
    /// The node's id.
    pub id: String,
    /// Each CPU's busy share over the interval (0-1).
    pub cpus: Vec<(String, f64)>,
    /// Free and total memory, bytes.
    pub memory: (f64, f64),
    /// `numa_miss` and `other_node` pages per second.
    pub misses: (f64, f64),
}

/// One frame.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    /// Payload and wire bytes per second.
    pub rates: (f64, f64),
    /// Sessions running now.
    pub sessions: f64,
    /// Chunks resent in all.
    pub resent: f64,
    /// The bottleneck over the interval.
    pub bottleneck: Bottleneck,
    /// Every channel with a stage that ran.
    pub channels: Vec<ChannelView>,
    /// Every node.
    pub nodes: Vec<NodeView>,
    /// Chunks queued in front of each stage that has a queue.
    pub queues: Vec<(String, f64)>,
    /// Data connections: label, RTT (s), retransmits per second.
    pub connections: Vec<(String, f64, f64)>,
    /// NICs: name (node), received and sent bytes per second.
    pub nics: Vec<(String, f64, f64)>,
}

type Key = (String, Vec<(String, String)>);

/// Two scrapes indexed by name and labels.
struct Pair {
    prev: BTreeMap<Key, f64>,
    cur: Vec<Sample>,
    dt: f64,
}

fn key(s: &Sample) -> Key {
    (
        s.name.clone(),
        s.labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    )
}

impl Pair {
    /// Per second, over the interval, of the series `s` (its current sample).
    fn rate(&self, s: &Sample) -> f64 {
        let before = self.prev.get(&key(s)).copied().unwrap_or(0.0);
        ((s.value - before) / self.dt).max(0.0)
    }

    fn named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Sample> + 'a {
        self.cur.iter().filter(move |s| s.name == name)
    }

    fn value(&self, name: &str) -> f64 {
        self.named(name).map(|s| s.value).sum()
    }

    /// The rate of `name`'s series whose label `key` is `value`, summed.
    fn rate_where(&self, name: &str, key: &str, value: &str) -> f64 {
        self.named(name)
            .filter(|s| s.label(key) == value)
            .map(|s| self.rate(s))
            .sum()
    }
}

impl Frame {
    /// The frame between scrapes `prev` and `cur`, `dt` seconds apart.
    pub fn between(prev: &[Sample], cur: Vec<Sample>, dt: f64) -> Frame {
        let p = Pair {
            prev: prev.iter().map(|s| (key(s), s.value)).collect(),
            cur,
            dt: dt.max(1e-3),
        };
        let channels = channels(&p);
        Frame {
            rates: (
                p.named("sluice_payload_bytes_total")
                    .map(|s| p.rate(s))
                    .sum(),
                p.named("sluice_wire_bytes_total").map(|s| p.rate(s)).sum(),
            ),
            sessions: p.value("sluice_sessions_active"),
            resent: p.value("sluice_chunks_resent_total"),
            bottleneck: bottleneck(&channels, p.dt),
            channels,
            nodes: nodes(&p),
            queues: p
                .named("sluice_stage_queued_chunks")
                .map(|s| (s.label("stage").to_string(), s.value))
                .collect(),
            connections: p
                .named("sluice_connection_rtt_seconds")
                .map(|s| {
                    let c = s.label("connection");
                    let r = p.rate_where("sluice_connection_retransmits_total", "connection", c);
                    (c.to_string(), s.value, r)
                })
                .collect(),
            nics: p
                .named("sluice_nic_received_bytes_total")
                .map(|s| {
                    let nic = s.label("nic");
                    let tx = p.rate_where("sluice_nic_sent_bytes_total", "nic", nic);
                    (format!("{nic} (node {})", s.label("node")), p.rate(s), tx)
                })
                .collect(),
        }
    }
}

fn stage_of(name: &str) -> Option<Stage> {
    Stage::ALL.into_iter().find(|s| s.name() == name)
}

fn channels(p: &Pair) -> Vec<ChannelView> {
    let mut out: BTreeMap<String, ChannelView> = BTreeMap::new();
    for s in p.named("sluice_stage_busy_seconds_total") {
        let (id, Some(stage)) = (s.label("channel"), stage_of(s.label("stage"))) else {
            continue;
        };
        let of = |name: &str| {
            p.named(name)
                .filter(|x| x.label("channel") == id && x.label("stage") == s.label("stage"))
                .map(|x| p.rate(x))
                .sum::<f64>()
        };
        let view = StageView {
            stage,
            busy: p.rate(s),
            idle: of("sluice_stage_idle_seconds_total"),
            blocked: of("sluice_stage_blocked_seconds_total"),
            rate: of("sluice_stage_bytes_total"),
        };
        let ch = out.entry(id.to_string()).or_insert_with(|| ChannelView {
            id: id.to_string(),
            ..ChannelView::default()
        });
        ch.stages.push(view);
    }
    for ch in out.values_mut() {
        let of = |name: &str| {
            p.named(name)
                .filter(|x| x.label("channel") == ch.id)
                .map(|x| x.value)
                .sum::<f64>()
        };
        ch.slots = (of("sluice_pool_slots"), of("sluice_pool_slots_in_use"));
        ch.stages.sort_by_key(|s| s.stage);
    }
    out.into_values().collect()
}

/// The engine's attribution over the interval: each stage's threads are those its
/// accounted time shows (at least one).
// Non-negative rates times an interval of seconds: `as` saturates, nothing wraps.
#[allow(clippy::cast_possible_truncation)]
fn bottleneck(channels: &[ChannelView], dt: f64) -> Bottleneck {
    let mut by_stage: BTreeMap<Stage, CellFigures> = BTreeMap::new();
    for s in channels.iter().flat_map(|c| c.stages.iter()) {
        let f = by_stage.entry(s.stage).or_default();
        let ns = |x: f64| (x * dt * 1e9) as u64;
        f.busy_ns += ns(s.busy);
        f.idle_ns += ns(s.idle);
        f.blocked_ns += ns(s.blocked);
        f.threads += ((s.busy + s.idle + s.blocked).ceil() as u64).max(1);
        f.bytes += (s.rate * dt) as u64;
    }
    let figures: Vec<(Stage, CellFigures)> = by_stage.into_iter().collect();
    Bottleneck::attribute(&figures, (dt * 1e9) as u64)
}

fn nodes(p: &Pair) -> Vec<NodeView> {
    let mut out: BTreeMap<String, NodeView> = BTreeMap::new();
    let mut cpu: BTreeMap<(String, String), (f64, f64)> = BTreeMap::new();
    for s in p.named("sluice_node_cpu_seconds_total") {
        let r = p.rate(s);
        let e = cpu
            .entry((s.label("node").to_string(), s.label("cpu").to_string()))
            .or_default();
        e.1 += r;
        if s.label("mode") != "idle" {
            e.0 += r;
        }
    }
    for ((node, c), (busy, all)) in cpu {
        let load = if all > 0.0 { busy / all } else { 0.0 };
        out.entry(node).or_default().cpus.push((c, load));
    }
    for s in p.named("sluice_node_memory_bytes") {
        let id = s.label("node").to_string();
        let free = p
            .named("sluice_node_memory_free_bytes")
            .filter(|x| x.label("node") == id)
            .map(|x| x.value)
            .sum();
        let n = out.entry(id.clone()).or_default();
        n.memory = (free, s.value);
        n.misses = (
            p.rate_where("sluice_node_numa_miss_pages_total", "node", &id),
            p.rate_where("sluice_node_other_node_pages_total", "node", &id),
        );
    }
    for (id, n) in &mut out {
        n.id.clone_from(id);
        n.cpus
            .sort_by_key(|(c, _)| c.parse::<u32>().unwrap_or(u32::MAX));
    }
    out.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::super::scrape::parse;
    use super::*;

    #[test]
    fn two_scrapes_give_rates_loads_and_the_bottleneck() {
        let before = parse(concat!(
            "sluice_payload_bytes_total 0\n",
            "sluice_stage_busy_seconds_total{stage=\"send\",channel=\"0\"} 1\n",
            "sluice_stage_bytes_total{stage=\"send\",channel=\"0\"} 0\n",
            "sluice_stage_busy_seconds_total{stage=\"read\",channel=\"0\"} 0\n",
            "sluice_stage_idle_seconds_total{stage=\"read\",channel=\"0\"} 0\n",
            "sluice_node_cpu_seconds_total{node=\"0\",cpu=\"1\",mode=\"user\"} 10\n",
            "sluice_node_cpu_seconds_total{node=\"0\",cpu=\"1\",mode=\"idle\"} 10\n",
        ));
        let after = parse(concat!(
            "sluice_payload_bytes_total 4194304\n",
            "sluice_sessions_active 1\n",
            "sluice_stage_busy_seconds_total{stage=\"send\",channel=\"0\"} 2.9\n",
            "sluice_stage_bytes_total{stage=\"send\",channel=\"0\"} 4194304\n",
            "sluice_stage_busy_seconds_total{stage=\"read\",channel=\"0\"} 0.2\n",
            "sluice_stage_idle_seconds_total{stage=\"read\",channel=\"0\"} 1.6\n",
            "sluice_pool_slots{channel=\"0\",node=\"none\"} 64\n",
            "sluice_pool_slots_in_use{channel=\"0\",node=\"none\"} 12\n",
            "sluice_node_cpu_seconds_total{node=\"0\",cpu=\"1\",mode=\"user\"} 11.5\n",
            "sluice_node_cpu_seconds_total{node=\"0\",cpu=\"1\",mode=\"idle\"} 10.5\n",
            "sluice_node_memory_bytes{node=\"0\"} 1000\n",
            "sluice_node_memory_free_bytes{node=\"0\"} 250\n",
            "sluice_stage_queued_chunks{stage=\"write\"} 3\n",
        ));
        let f = Frame::between(&before, after, 2.0);
        assert!((f.rates.0 - 2_097_152.0).abs() < 1e-6);
        assert!((f.sessions - 1.0).abs() < 1e-9);
        let ch = &f.channels[0];
        assert_eq!(ch.slots, (64.0, 12.0));
        assert_eq!(ch.stages[0].stage, Stage::Read);
        assert!((ch.stages[1].busy - 0.95).abs() < 1e-9);
        assert_eq!(
            (f.bottleneck.resource, f.bottleneck.stage),
            ("network", Some(Stage::Send))
        );
        let n = &f.nodes[0];
        assert_eq!(n.memory, (250.0, 1000.0));
        assert_eq!(n.cpus.len(), 1);
        assert!((n.cpus[0].1 - 0.75).abs() < 1e-9, "{:?}", n.cpus);
        let text = super::super::view::lines(&f, "x:1", 2.0).join("\n");
        assert!(
            text.contains("channel 0: 12 of 64 buffer slots in use"),
            "{text}"
        );
        assert!(
            text.contains("bottleneck: network (send stage busy 95%"),
            "{text}"
        );
        assert!(text.contains("queued chunks: write 3"), "{text}");
    }
}
