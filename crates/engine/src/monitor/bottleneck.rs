//! Which resource bound a transfer, from its stage counters: the stage whose threads
//! were busy the largest share of the time names it (its disk, the network, its CPU);
//! a receiving side whose stages mostly waited for data was bound by its peer (the
//! sending side, or the path to it).

use super::stage::{CellFigures, Stage};
use serde::Serialize;
use std::collections::BTreeMap;

/// Below this busy share no stage counts as saturated.
const SATURATED: f64 = 0.5;

/// One stage's time, as shares of its threads' time (0-1 each).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StageShare {
    /// Working.
    pub busy: f64,
    /// Waiting for input.
    pub idle: f64,
    /// Waiting for the next stage.
    pub blocked: f64,
    /// Threads that ran the stage.
    pub threads: u64,
    /// Payload (or wire) bytes through it.
    pub bytes: u64,
}

/// The `bottleneck` object of the `--json` summary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Bottleneck {
    /// `disk read`, `disk write`, `network`, `cpu`, `peer` or `none`.
    pub resource: &'static str,
    /// The stage that names it (`read`, `compress`, `send`, `recv`, `decompress`,
    /// `verify`, `write`); absent for `none`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stage: Option<Stage>,
    /// The share of the time the resource bound the transfer (0-1).
    pub share: f64,
    /// Every stage that ran, with its shares.
    pub stages: BTreeMap<&'static str, StageShare>,
}

impl Bottleneck {
    /// Attributes `wall_ns` of a transfer from its stages' figures (totals, or the
    /// differences between two readings).
    pub fn attribute(figures: &[(Stage, CellFigures)], wall_ns: u64) -> Bottleneck {
        let stages: BTreeMap<&'static str, StageShare> = figures
            .iter()
            .filter(|(_, f)| f.threads > 0)
            .map(|(s, f)| (s.name(), share(f, wall_ns)))
            .collect();
        let top = figures
            .iter()
            .filter(|(_, f)| f.threads > 0)
            .map(|(s, f)| (*s, share(f, wall_ns)))
            .max_by(|a, b| a.1.busy.total_cmp(&b.1.busy));
        let Some((stage, top)) = top else {
            return Bottleneck {
                resource: "none",
                stage: None,
                share: 0.0,
                stages,
            };
        };
        let starved = stages.get(Stage::Recv.name()).map_or(0.0, |r| r.idle);
        if top.busy < SATURATED && starved > top.busy {
            return Bottleneck {
                resource: "peer",
                stage: Some(Stage::Recv),
                share: starved,
                stages,
            };
        }
        Bottleneck {
            resource: resource_of(stage),
            stage: Some(stage),
            share: top.busy,
            stages,
        }
    }

    /// The text summary's line.
    pub fn line(&self) -> String {
        let pct = self.share * 100.0;
        match (self.resource, self.stage) {
            ("none", _) | (_, None) => "bottleneck: none measured".into(),
            ("peer", _) => format!(
                "bottleneck: peer (this side waited for its data {pct:.0}% of the time: the sending side or the path)"
            ),
            ("cpu", Some(s)) => {
                format!("bottleneck: cpu of the {} stage ({pct:.0}% of the time)", s.name())
            }
            (r, Some(s)) => format!("bottleneck: {r} ({} stage busy {pct:.0}% of the time)", s.name()),
        }
    }
}

/// The resource a saturated stage stands for.
pub fn resource_of(stage: Stage) -> &'static str {
    match stage {
        Stage::Read => "disk read",
        Stage::Write => "disk write",
        Stage::Send | Stage::Recv => "network",
        Stage::Compress | Stage::Decompress | Stage::Verify => "cpu",
    }
}

fn share(f: &CellFigures, wall_ns: u64) -> StageShare {
    let total = (f.threads.max(1) as f64) * (wall_ns.max(1) as f64);
    let s = |ns: u64| (ns as f64 / total).clamp(0.0, 1.0);
    StageShare {
        busy: s(f.busy_ns),
        idle: s(f.idle_ns),
        blocked: s(f.blocked_ns),
        threads: f.threads,
        bytes: f.bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(threads: u64, busy: u64, idle: u64, blocked: u64) -> CellFigures {
        CellFigures {
            threads,
            busy_ns: busy,
            idle_ns: idle,
            blocked_ns: blocked,
            ..CellFigures::default()
        }
    }

    #[test]
    fn the_busiest_stage_names_the_resource() {
        let b = Bottleneck::attribute(
            &[
                (Stage::Read, f(2, 200, 1000, 800)),
                (Stage::Send, f(2, 1800, 0, 100)),
            ],
            1000,
        );
        assert_eq!((b.resource, b.stage), ("network", Some(Stage::Send)));
        assert!((b.share - 0.9).abs() < 1e-9);
        let b = Bottleneck::attribute(
            &[
                (Stage::Read, f(1, 100, 0, 0)),
                (Stage::Compress, f(1, 800, 0, 0)),
                (Stage::Send, f(1, 100, 0, 0)),
            ],
            1000,
        );
        assert_eq!((b.resource, b.stage), ("cpu", Some(Stage::Compress)));
        assert!(
            b.line().contains("cpu of the compress stage (80%"),
            "{}",
            b.line()
        );
    }

    #[test]
    fn a_receiver_that_mostly_waited_was_bound_by_its_peer() {
        let b = Bottleneck::attribute(
            &[
                (Stage::Recv, f(1, 100, 850, 0)),
                (Stage::Write, f(1, 200, 0, 0)),
            ],
            1000,
        );
        assert_eq!(b.resource, "peer");
        assert!((b.share - 0.85).abs() < 1e-9);
        let disk = Bottleneck::attribute(
            &[
                (Stage::Recv, f(1, 100, 100, 700)),
                (Stage::Write, f(1, 900, 0, 0)),
            ],
            1000,
        );
        assert_eq!(disk.resource, "disk write");
    }

    #[test]
    fn nothing_ran_nothing_measured() {
        let b = Bottleneck::attribute(&[(Stage::Read, f(0, 0, 0, 0))], 1000);
        assert_eq!((b.resource, b.stage), ("none", None));
        assert!(b.stages.is_empty());
    }
}
