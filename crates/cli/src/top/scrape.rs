//! One scrape of a metrics endpoint: `GET /metrics` (HTTP/1.0, classic text format)
//! and the samples parsed out of it.

use anyhow::{anyhow, bail, Context, Result};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// The most a scrape may return.
const MAX_BYTES: u64 = 16 << 20;

/// One sample: its metric name, labels and value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The sample's name (`sluice_stage_bytes_total`).
    pub name: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its value.
    pub value: f64,
}

impl Sample {
    /// The value of label `key` ("" when absent).
    pub fn label(&self, key: &str) -> &str {
        self.labels.get(key).map_or("", String::as_str)
    }
}

/// Fetches `http://addr/metrics` with `token` as a bearer token.
///
/// # Errors
/// The endpoint cannot be reached, does not answer 200, or sends too much.
pub fn fetch(addr: SocketAddr, token: Option<&str>) -> Result<Vec<Sample>> {
    let timeout = Duration::from_secs(10);
    let mut s = TcpStream::connect_timeout(&addr, timeout)
        .with_context(|| format!("cannot reach the metrics endpoint at {addr}"))?;
    s.set_read_timeout(Some(timeout))?;
    let auth = token.map_or_else(String::new, |t| format!("Authorization: Bearer {t}\r\n"));
    write!(s, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n{auth}\r\n")?;
    let mut raw = Vec::new();
    s.take(MAX_BYTES)
        .read_to_end(&mut raw)
        .with_context(|| format!("reading the metrics of {addr}"))?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow!("{addr} did not answer HTTP"))?;
    let status = head.lines().next().unwrap_or_default();
    if !status.contains(" 200") {
        let hint = if status.contains(" 401") {
            " (give --metrics-token-file FILE)"
        } else {
            ""
        };
        bail!("{addr} answered {status:?}{hint}");
    }
    Ok(parse(body))
}

/// Parses the classic text format's sample lines (comments skipped).
pub fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(parse_line)
        .collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let (series, value) = line.rsplit_once(' ')?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    let (name, labels) = match series.split_once('{') {
        Some((name, rest)) => (name, labels(rest.strip_suffix('}')?)?),
        None => (series, BTreeMap::new()),
    };
    Some(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// `a="x",b="y\"z"` into a map.
fn labels(mut rest: &str) -> Option<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    while !rest.is_empty() {
        let (key, after) = rest.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                (_, c) => value.push(c),
            }
        };
        out.insert(key.trim_start_matches(',').to_string(), value);
        rest = after[end + 1..].trim_start_matches(',');
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sample_lines_parse_with_their_labels() {
        let s = parse("# HELP x y\nsluice_stage_bytes_total{stage=\"read\",channel=\"0\"} 42\nup 1\nq{a=\"x\\\"y\",b=\"\"} 1.5e3\n");
        assert_eq!(s.len(), 3);
        assert_eq!(s[0].name, "sluice_stage_bytes_total");
        assert_eq!((s[0].label("stage"), s[0].label("channel")), ("read", "0"));
        assert!((s[0].value - 42.0).abs() < 1e-9);
        assert!(s[1].labels.is_empty());
        assert_eq!((s[2].label("a"), s[2].label("b")), ("x\"y", ""));
        assert!((s[2].value - 1500.0).abs() < 1e-9);
        assert!(parse("broken{a=\"x} 1\n").is_empty());
    }
}
