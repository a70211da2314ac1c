//! The two forms of the doctor's report: text for a person, JSON for a fleet.

use super::finding::{size, Finding, Status, Target};
use anyhow::Result;

/// The text report: a header line, one block per finding, a verdict line.
pub fn text(t: &Target, findings: &[Finding]) -> String {
    let mut out = format!(
        "sluice doctor: {} ({}), RTT {} ms, {} connection(s), {} of buffers\n",
        t.rate(),
        if t.nics.is_empty() {
            "no NIC".to_string()
        } else {
            t.nics.join(", ")
        },
        t.rtt_ms,
        t.streams,
        size(t.buffer_bytes)
    );
    for f in findings {
        out += &format!("{:<7} {}: {}\n", f.status.label(), f.check, f.found);
        if f.status != Status::Ok {
            out += &format!("        why: {}\n        fix: {}\n", f.why, f.fix);
        }
    }
    let limits = findings
        .iter()
        .filter(|f| f.status == Status::Limit)
        .count();
    let advice = findings
        .iter()
        .filter(|f| f.status == Status::Advice)
        .count();
    out += &if limits == 0 {
        format!(
            "nothing limits this host below {} ({advice} advice)\n",
            t.rate()
        )
    } else {
        format!(
            "{limits} finding(s) limit this host below {} ({advice} advice)\n",
            t.rate()
        )
    };
    out
}

/// The JSON report: `{"target": {...}, "limited": bool, "findings": [...]}`.
pub fn json(t: &Target, findings: &[Finding]) -> Result<String> {
    let limited = findings.iter().any(|f| f.status == Status::Limit);
    let value = serde_json::json!({
        "target": t,
        "limited": limited,
        "findings": findings,
    });
    Ok(serde_json::to_string(&value)? + "\n")
}
