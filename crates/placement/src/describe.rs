//! A compact human table of a plan, for `sluice plan` without `--json`.

use crate::cpulist::format_cpulist;
use crate::types::{Channel, Plan, Role, ThreadPlan};
use std::fmt::Write as _;

const MIB: u64 = 1 << 20;

/// Renders `plan` as a small table: one row per role of each channel, with the
/// channel's node (and the nodes it spans, for `smts`), package, NICs, buffer partition
/// in MiB, the number of threads and the CPUs they are bound to as a kernel CPU list
/// (`0-3,8`), `unbound` when the scheduler places them. Manual placements are marked.
/// The plan's notes and explanation are not included: callers print them as they like.
///
/// ```
/// use sluice_placement::{describe, plan, Job, Policy, Role};
/// use sluice_topology::Machine;
///
/// let machine = Machine::uniform(1, 2, 2, 1, 1 << 30);
/// let job = Job {
///     threads: vec![(Role::IoRead, 2)],
///     nics: vec![],
///     storage: vec![],
///     buffer_bytes: 8 << 20,
///     chunk_bytes: 1 << 20,
///     reserved_cpus: vec![],
///     placements: vec![],
/// };
/// let table = describe(&plan(&machine, &job, Policy::Nmts).unwrap());
/// assert!(table.starts_with("policy nmts"));
/// assert!(table.contains("io-read"));
/// ```
pub fn describe(plan: &Plan) -> String {
    let mut out = header(plan);
    let mut rows: Vec<Row> = vec![[
        "channel".into(),
        "node".into(),
        "package".into(),
        "nics".into(),
        "buffer MiB".into(),
        "role".into(),
        "threads".into(),
        "cpus".into(),
    ]];
    for channel in &plan.channels {
        channel_rows(channel, &mut rows);
    }
    write_table(&rows, &mut out);
    out
}

/// One row of the table: the channel's five columns, then role, threads and CPUs.
type Row = [String; 8];

/// The first line: policy, channels, threads and buffer.
fn header(plan: &Plan) -> String {
    let mut out = String::new();
    let threads = plan.channels.iter().map(|c| c.threads.len()).sum::<usize>();
    let requested = if plan.requested_policy == plan.policy {
        String::new()
    } else {
        format!(" (requested {})", plan.requested_policy)
    };
    let _ = writeln!(
        out,
        "policy {}{requested}: {} channel{}, {threads} thread{}, buffer {} in {} slots",
        plan.policy,
        plan.channels.len(),
        if plan.channels.len() == 1 { "" } else { "s" },
        if threads == 1 { "" } else { "s" },
        bytes(plan.buffer_bytes()),
        bytes(plan.chunk_bytes),
    );
    out
}

/// One row per role of `channel` (the channel's columns filled on the first only), or
/// one row saying it has no thread.
fn channel_rows(channel: &Channel, rows: &mut Vec<Row>) {
    let node = match channel.numa_node {
        None => "-".to_string(),
        Some(n) if channel.nodes.len() > 1 => {
            format!("{n} [{}]", format_cpulist(&channel.nodes))
        }
        Some(n) => n.to_string(),
    };
    let mut head = [
        channel.id.to_string(),
        node,
        channel
            .package
            .map_or_else(|| "-".to_string(), |p| p.to_string()),
        if channel.nics.is_empty() {
            "-".to_string()
        } else {
            channel.nics.join(",")
        },
        mib(channel.buffer_bytes),
    ];
    let mut first = true;
    for role in Role::ALL {
        let of_role: Vec<_> = channel.threads.iter().filter(|t| t.role == role).collect();
        if of_role.is_empty() {
            continue;
        }
        let lead = if first {
            std::mem::take(&mut head)
        } else {
            Default::default()
        };
        first = false;
        let [a, b, c, d, e] = lead;
        let count = of_role.len().to_string();
        rows.push([a, b, c, d, e, role.to_string(), count, cpus_cell(&of_role)]);
    }
    if first {
        let [a, b, c, d, e] = head;
        rows.push([a, b, c, d, e, "-".into(), "0".into(), "-".into()]);
    }
}

/// Where threads of one role run: a CPU list, `unbound`, or both; `(manual)` when
/// placed by `--place`.
fn cpus_cell(of_role: &[&ThreadPlan]) -> String {
    let mut cpus: Vec<u32> = Vec::new();
    let mut unbound = 0;
    for t in of_role {
        match &t.cpus {
            Some(c) => cpus.extend(c),
            None => unbound += 1,
        }
    }
    let mut cell = match (cpus.is_empty(), unbound) {
        (true, _) => "unbound".to_string(),
        (false, 0) => format_cpulist(&cpus),
        (false, n) => format!("{} + {n} unbound", format_cpulist(&cpus)),
    };
    if of_role.iter().any(|t| t.manual) {
        cell.push_str(" (manual)");
    }
    cell
}

/// `rows` in left-aligned columns, trailing spaces trimmed.
fn write_table(rows: &[Row], out: &mut String) {
    let mut widths = [0usize; 8];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<width$}  ", width = widths[i]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

/// Bytes as MiB with one decimal.
fn mib(bytes: u64) -> String {
    let tenths = (u128::from(bytes) * 10 + u128::from(MIB) / 2) / u128::from(MIB);
    format!("{}.{}", tenths / 10, tenths % 10)
}

/// Bytes in the largest binary unit that divides them.
fn bytes(n: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (MIB, "MiB"), (1 << 10, "KiB")];
    for (size, name) in UNITS {
        if n >= size && n.is_multiple_of(size) {
            return format!("{} {name}", n / size);
        }
    }
    if n >= MIB {
        return format!("{} MiB", mib(n));
    }
    format!("{n} B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_print_in_their_natural_unit() {
        assert_eq!(bytes(4 << 20), "4 MiB");
        assert_eq!(bytes(1 << 30), "1 GiB");
        assert_eq!(bytes(4096), "4 KiB");
        assert_eq!(bytes(100), "100 B");
        assert_eq!(bytes((1 << 20) + 1), "1.0 MiB");
        assert_eq!(mib(3 << 19), "1.5");
        assert_eq!(mib(0), "0.0");
    }
}
