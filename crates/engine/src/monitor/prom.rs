//! The process's metrics in the OpenMetrics text format (`prometheus-client`): stage
//! counters, totals, buffer pools, data connections (`TCP_INFO`), per-node cores,
//! memory and NUMA counts, NIC bytes. Counters end in `_total`; units are in the names.

use super::machine::{self, NodeState};
use super::{global, Stage};
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::fmt::Error;

/// A metric's labels.
pub(super) type Labels = Vec<(&'static str, String)>;

/// The media type of [`render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The media type of [`render_classic`]'s text.
pub const CLASSIC_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[derive(Debug)]
struct Collector;

impl prometheus_client::collector::Collector for Collector {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), Error> {
        stages(&mut e)?;
        totals(&mut e)?;
        pools(&mut e)?;
        connections(&mut e)?;
        let nodes = machine::nodes();
        cores(&mut e, &nodes)?;
        node_memory(&mut e, &nodes)?;
        super::mover::metrics(&mut e)?;
        nics(&mut e)
    }
}

/// The text a scrape gets: every metric of this process now.
pub fn render() -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Collector));
    let mut out = String::new();
    if prometheus_client::encoding::text::encode(&mut out, &registry).is_err() {
        out = "# EOF\n".into();
    }
    out
}

/// The same metrics in Prometheus' classic text format (0.0.4), for scrapers and
/// tools that do not ask for OpenMetrics (`promtool check metrics`, curl): a counter's
/// `HELP` and `TYPE` name its `_total` samples, and there is no `# EOF`.
pub fn render_classic() -> String {
    classic(&render())
}

/// [`render_classic`]'s rewrite of an OpenMetrics text.
pub fn classic(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| Some((p, line.strip_prefix(p)?)));
        match meta {
            Some((prefix, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                let suffix = if counters.contains(name) {
                    "_total"
                } else {
                    ""
                };
                out.push_str(&format!("{prefix}{name}{suffix} {tail}"));
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

pub(super) fn counters<V>(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: Vec<(Labels, V)>,
) -> Result<(), Error>
where
    V: prometheus_client::encoding::EncodeCounterValue,
{
    let mut family = e.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, v) in rows {
        ConstCounter::new(v).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

pub(super) fn gauges<V>(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: Vec<(Labels, V)>,
) -> Result<(), Error>
where
    V: prometheus_client::encoding::EncodeGaugeValue,
{
    let mut family = e.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, v) in rows {
        ConstGauge::new(v).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

fn seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}

fn stages(e: &mut DescriptorEncoder) -> Result<(), Error> {
    let c = global().stages();
    let mut cells = Vec::new();
    for stage in Stage::ALL {
        for ch in c.channels() {
            let f = c.figures(stage, ch);
            if f.threads > 0 {
                cells.push((
                    vec![
                        ("stage", stage.name().to_string()),
                        ("channel", ch.to_string()),
                    ],
                    f,
                ));
            }
        }
    }
    let rows = |pick: fn(&super::CellFigures) -> u64| -> Vec<(Labels, u64)> {
        cells.iter().map(|(l, f)| (l.clone(), pick(f))).collect()
    };
    let secs = |pick: fn(&super::CellFigures) -> u64| -> Vec<(Labels, f64)> {
        cells
            .iter()
            .map(|(l, f)| (l.clone(), seconds(pick(f))))
            .collect()
    };
    counters(
        e,
        "sluice_stage_bytes",
        "Bytes through a stage (payload; wire bytes for send and recv).",
        rows(|f| f.bytes),
    )?;
    counters(
        e,
        "sluice_stage_chunks",
        "Chunks through a stage.",
        rows(|f| f.chunks),
    )?;
    counters(
        e,
        "sluice_stage_busy_seconds",
        "Seconds a stage's threads worked.",
        secs(|f| f.busy_ns),
    )?;
    counters(
        e,
        "sluice_stage_idle_seconds",
        "Seconds a stage's threads waited for input.",
        secs(|f| f.idle_ns),
    )?;
    counters(
        e,
        "sluice_stage_blocked_seconds",
        "Seconds a stage's threads waited for the next stage (slots, queue room).",
        secs(|f| f.blocked_ns),
    )?;
    counters(
        e,
        "sluice_stage_threads",
        "Threads that ran a stage.",
        rows(|f| f.threads),
    )?;
    let queued = Stage::ALL
        .iter()
        .filter(|s| c.total(**s).enqueued > 0)
        .map(|s| (vec![("stage", s.name().to_string())], c.queued(*s)))
        .collect();
    gauges(
        e,
        "sluice_stage_queued_chunks",
        "Chunks waiting in the queues in front of a stage.",
        queued,
    )
}

fn totals(e: &mut DescriptorEncoder) -> Result<(), Error> {
    let t = global().totals();
    let one = |v: u64| vec![(Labels::new(), v)];
    counters(
        e,
        "sluice_payload_bytes",
        "Payload bytes read (sending) or received and verified (receiving).",
        one(t.payload_bytes),
    )?;
    counters(
        e,
        "sluice_wire_bytes",
        "Chunk bytes that crossed the network.",
        one(t.wire_bytes),
    )?;
    counters(
        e,
        "sluice_sendfile_bytes",
        "Payload bytes sent straight from the page cache (sendfile): large files, clear \
         text, no compression, toward another host.",
        one(t.sendfile_bytes),
    )?;
    counters(
        e,
        "sluice_chunks_resent",
        "Chunks sent again (or asked for again) after a failed checksum.",
        one(t.chunks_resent),
    )?;
    counters(
        e,
        "sluice_files_done",
        "Entries transferred.",
        one(t.files_done),
    )?;
    counters(
        e,
        "sluice_files_failed",
        "Entries that failed.",
        one(t.files_failed),
    )?;
    counters(e, "sluice_sessions", "Sessions started.", one(t.sessions))?;
    gauges(
        e,
        "sluice_sessions_active",
        "Sessions running now.",
        one(t.sessions.saturating_sub(t.sessions_ended)),
    )
}

fn pools(e: &mut DescriptorEncoder) -> Result<(), Error> {
    let pools = global().pools();
    let labels = |channel: u32, node: Option<u32>| -> Labels {
        let node = node.map_or_else(|| "none".to_string(), |n| n.to_string());
        vec![("channel", channel.to_string()), ("node", node)]
    };
    let slots = pools
        .iter()
        .map(|p| (labels(p.channel, p.node), u64::from(p.slots)))
        .collect();
    let used = pools
        .iter()
        .map(|p| (labels(p.channel, p.node), u64::from(p.in_use)))
        .collect();
    gauges(
        e,
        "sluice_pool_slots",
        "Buffer slots of a channel's pool.",
        slots,
    )?;
    gauges(
        e,
        "sluice_pool_slots_in_use",
        "Buffer slots holding chunks in flight (queued or in a stage).",
        used,
    )
}

fn connections(e: &mut DescriptorEncoder) -> Result<(), Error> {
    let conns = global().connections();
    let l = |c: &super::ConnNow| vec![("connection", c.label.clone())];
    let rtt = conns
        .iter()
        .map(|c| (l(c), f64::from(c.figures.rtt_us) / 1e6))
        .collect();
    let retrans = conns
        .iter()
        .map(|c| (l(c), u64::from(c.figures.retransmits)))
        .collect();
    let sent = conns.iter().map(|c| (l(c), c.figures.bytes_sent)).collect();
    let recv = conns
        .iter()
        .map(|c| (l(c), c.figures.bytes_received))
        .collect();
    let cwnd = conns
        .iter()
        .map(|c| (l(c), u64::from(c.figures.snd_cwnd)))
        .collect();
    gauges(
        e,
        "sluice_connection_rtt_seconds",
        "Smoothed round-trip time of a data connection (TCP_INFO).",
        rtt,
    )?;
    counters(
        e,
        "sluice_connection_retransmits",
        "Segments a data connection retransmitted (TCP_INFO).",
        retrans,
    )?;
    counters(
        e,
        "sluice_connection_sent_bytes",
        "Bytes a data connection sent, retransmissions included (TCP_INFO).",
        sent,
    )?;
    counters(
        e,
        "sluice_connection_received_bytes",
        "Bytes a data connection received (TCP_INFO).",
        recv,
    )?;
    gauges(
        e,
        "sluice_connection_cwnd_segments",
        "Congestion window of a data connection (TCP_INFO).",
        cwnd,
    )
}

fn cores(e: &mut DescriptorEncoder, nodes: &[NodeState]) -> Result<(), Error> {
    let mut rows = Vec::new();
    for n in nodes {
        for c in &n.cpus {
            for (mode, v) in [
                ("user", c.user),
                ("system", c.system),
                ("iowait", c.iowait),
                ("idle", c.idle),
                ("steal", c.steal),
            ] {
                rows.push((
                    vec![
                        ("node", n.node.to_string()),
                        ("cpu", c.cpu.to_string()),
                        ("mode", mode.to_string()),
                    ],
                    v,
                ));
            }
        }
    }
    counters(
        e,
        "sluice_node_cpu_seconds",
        "Seconds each CPU of a node spent in each mode (/proc/stat).",
        rows,
    )
}

fn node_memory(e: &mut DescriptorEncoder, nodes: &[NodeState]) -> Result<(), Error> {
    let l = |n: &NodeState| vec![("node", n.node.to_string())];
    let rows =
        |pick: fn(&NodeState) -> u64| nodes.iter().map(|n| (l(n), pick(n))).collect::<Vec<_>>();
    gauges(
        e,
        "sluice_node_memory_bytes",
        "Memory of a node.",
        rows(|n| n.mem_total),
    )?;
    gauges(
        e,
        "sluice_node_memory_free_bytes",
        "Free memory of a node.",
        rows(|n| n.mem_free),
    )?;
    counters(
        e,
        "sluice_node_numa_hit_pages",
        "Pages allocated on a node as intended (numastat numa_hit).",
        rows(|n| n.numa_hit),
    )?;
    counters(
        e,
        "sluice_node_numa_miss_pages",
        "Pages allocated on a node though intended elsewhere (numastat numa_miss).",
        rows(|n| n.numa_miss),
    )?;
    counters(
        e,
        "sluice_node_other_node_pages",
        "Pages allocated on a node for a process running elsewhere (numastat other_node).",
        rows(|n| n.other_node),
    )
}

fn nics(e: &mut DescriptorEncoder) -> Result<(), Error> {
    let nics = machine::nics();
    let l = |n: &machine::NicState| {
        let node = n.node.map_or_else(|| "none".to_string(), |x| x.to_string());
        vec![("nic", n.name.clone()), ("node", node)]
    };
    let rx = nics.iter().map(|n| (l(n), n.rx_bytes)).collect();
    let tx = nics.iter().map(|n| (l(n), n.tx_bytes)).collect();
    counters(
        e,
        "sluice_nic_received_bytes",
        "Bytes a network interface received.",
        rx,
    )?;
    counters(
        e,
        "sluice_nic_sent_bytes",
        "Bytes a network interface sent.",
        tx,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_has_the_families_and_ends_in_eof() {
        let text = render();
        for name in [
            "sluice_payload_bytes_total",
            "sluice_sendfile_bytes_total",
            "sluice_sessions_active",
            "# TYPE sluice_stage_bytes counter",
            "sluice_node_cpu_seconds_total{node=",
            "sluice_node_memory_bytes{node=",
        ] {
            assert!(text.contains(name), "{name} missing from:\n{text}");
        }
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn the_grafana_dashboard_charts_only_metrics_that_exist() {
        let dashboard: serde_json::Value =
            serde_json::from_str(include_str!("../../../../docs/grafana/sluice.json")).unwrap();
        let text = render_classic();
        let mut seen = 0;
        for panel in dashboard["panels"].as_array().unwrap() {
            for target in panel["targets"].as_array().unwrap() {
                let expr = target["expr"].as_str().unwrap();
                for (at, _) in expr.match_indices("sluice_") {
                    let name: String = expr[at..]
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    assert!(
                        text.contains(&format!("# TYPE {name} ")),
                        "{name} is not exported"
                    );
                    seen += 1;
                }
            }
        }
        assert!(seen > 10);
    }

    #[test]
    fn the_classic_text_names_counters_by_their_samples() {
        let om = "# HELP a_bytes Bytes.\n# TYPE a_bytes counter\na_bytes_total 3\n# HELP g A gauge.\n# TYPE g gauge\ng 1\n# EOF\n";
        assert_eq!(
            classic(om),
            "# HELP a_bytes_total Bytes.\n# TYPE a_bytes_total counter\na_bytes_total 3\n# HELP g A gauge.\n# TYPE g gauge\ng 1\n"
        );
    }
}
