//! SVG drawings of a machine and of a plan placed on it.
//!
//! Packages flow left to right and wrap into rows; inside each, its NUMA nodes form a
//! grid of at most [`NODE_COLS_MAX`] columns; inside each node, its cores form a grid of
//! at most [`CORE_COLS_MAX`] columns, each core labelled with its PUs, and the node's
//! NICs and disks are listed beneath. With a plan, every core names the threads bound to
//! it and shows one coloured segment per thread (the legend lists the plan's roles),
//! each node shows its channel's buffer partition, and unbound threads, unbound buffers,
//! devices without locality and the plan's notes are written below the drawing.
//!
//! No font metrics are available here, so text widths are estimated generously
//! ([`text_w`]) and every box is sized from the longest text it holds.

use sluice_placement::{Plan, Role};
use sluice_topology::Machine;

/// Space between and inside boxes.
pub(super) const GAP: u32 = 8;
/// Core boxes per row inside a node.
pub(super) const CORE_COLS_MAX: usize = 4;
/// Node boxes per row inside a package.
pub(super) const NODE_COLS_MAX: usize = 2;
/// Beyond this width, packages wrap onto a new row.
pub(super) const ROW_W_MAX: u32 = 1600;
/// Height of a core box: name, PUs, two lines of thread names, the role stripe.
pub(super) const CORE_H: u32 = 66;
/// Height of the role stripe at the bottom of a core.
pub(super) const STRIPE_H: u32 = 8;
/// Narrowest core box.
pub(super) const CORE_W_MIN: u32 = 84;
/// Line height of 12 px text.
pub(super) const LINE_H: u32 = 16;
/// Height of a package's title band.
pub(super) const PKG_HEAD: u32 = 30;
/// Left margin of the drawing.
pub(super) const MARGIN: u32 = 16;

pub(super) fn role_color(role: Role) -> &'static str {
    match role {
        Role::Control => "#9e9e9e",
        Role::NetSend => "#1f77b4",
        Role::NetRecv => "#17becf",
        Role::IoRead => "#2ca02c",
        Role::IoWrite => "#98df8a",
        Role::Compress => "#ff7f0e",
        Role::Decompress => "#ffbb78",
    }
}

pub(super) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A generous estimate of the width of `s` in pixels at `size` px sans-serif (0.62 em
/// per character; DejaVu Sans, the usual fallback, averages about 0.55 em).
pub(super) fn text_w(s: &str, size: u32) -> u32 {
    let chars = u32::try_from(s.chars().count()).unwrap_or(u32::MAX);
    chars.saturating_mul(size).saturating_mul(62) / 100
}

pub(super) fn u32_of(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Memory as an operator reads it: `64 GiB`, `1.5 GiB`, `448 MiB`, `3.5 TiB`.
pub(super) fn memory(bytes: u64) -> String {
    const GIB: u64 = 1 << 30;
    const TIB: u64 = 1 << 40;
    if bytes >= TIB {
        format!("{:.1} TiB", bytes as f64 / TIB as f64)
    } else if bytes >= GIB && bytes.is_multiple_of(GIB) {
        format!("{} GiB", bytes / GIB)
    } else if bytes >= GIB {
        format!("{:.1} GiB", bytes as f64 / GIB as f64)
    } else {
        format!("{} MiB", bytes >> 20)
    }
}

pub(super) fn link_speed(mbps: u64) -> String {
    if mbps >= 1000 && mbps.is_multiple_of(1000) {
        format!("{} Gb/s", mbps / 1000)
    } else if mbps >= 1000 {
        format!("{:.1} Gb/s", mbps as f64 / 1000.0)
    } else {
        format!("{mbps} Mb/s")
    }
}

/// A channel whose buffer spans several nodes (`smts`: a socket's nodes).
mod draw;
mod model;

use draw::*;
use model::*;

/// Renders the machine, and the plan on it if given, as a standalone SVG document.
pub fn render(machine: &Machine, plan: Option<&Plan>) -> String {
    let placed = plan.map(Placed::new);
    let texts: Vec<NodeText> = machine
        .nodes
        .iter()
        .map(|n| NodeText::new(machine, n, placed.as_ref()))
        .collect();
    let layout = Layout::new(machine, &texts);
    let mut body = String::new();
    let drawn = draw_packages(&mut body, machine, &texts, &layout, placed.as_ref());
    let mut width = drawn.width;

    // Below the drawing: legend, what is not placed on a node, notes. Long lines wrap.
    let mut fy = drawn.bottom + 28;
    if let Some(p) = &placed {
        width = width.max(draw_legend(&mut body, p, fy) + MARGIN);
        fy += 24;
    }
    let footer = footer_lines(machine, placed.as_ref());
    let title = match plan {
        Some(p) => format!(
            "sluice plan — policy {} on {} ({} channel{}, {} MiB buffers)",
            p.policy,
            machine.source,
            p.channels.len(),
            if p.channels.len() == 1 { "" } else { "s" },
            p.buffer_bytes() >> 20
        ),
        None => format!("sluice topo — {}", machine.source),
    };
    width = width.max(text_w(&title, 17) + 2 * MARGIN).max(640);
    let fy = draw_footer(&mut body, &footer, width, fy);
    format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h}" viewBox="0 0 {width} {h}" font-family="DejaVu Sans, Verdana, sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{MARGIN}" y="30" font-size="16" font-weight="bold">{}</text>
{body}</svg>
"##,
        esc(&title),
        h = fy + 4
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_topology::Nic;

    #[test]
    fn machine_svg_names_every_node_core_and_device() {
        let mut m = Machine::uniform(2, 2, 2, 1, 1 << 30);
        m.nics.push(Nic {
            name: "eth1".into(),
            numa_node: Some(3),
            link_speed_mbps: Some(40_000),
            mac: None,
            addresses: vec![],
            pci_bus_id: None,
        });
        let svg = render(&m, None);
        assert!(svg.starts_with("<svg"));
        assert!(svg.trim_end().ends_with("</svg>"));
        for n in 0..4 {
            assert!(svg.contains(&format!("NUMA node {n} ")), "node {n} missing");
        }
        assert!(svg.contains("Package 1"));
        assert!(svg.contains("NIC eth1 40 Gb/s"));
        assert_eq!(svg.matches(">core ").count(), 8);
    }

    #[test]
    fn fit_lines_counts_what_does_not_fit() {
        let names: Vec<String> = (0..9).map(|i| format!("ns{i}")).collect();
        let lines = fit_lines(&names, 12, 2);
        assert_eq!(lines, ["ns0 ns1 ns2", "ns3 ns4 +4"]);
        for line in &lines {
            assert!(line.chars().count() <= 12, "{line:?} is too long");
        }
        assert_eq!(fit_lines(&names[..2], 12, 2), ["ns0 ns1"]);
        assert!(fit_lines(&[], 12, 2).is_empty());
    }

    #[test]
    fn wrap_keeps_every_word_and_the_width() {
        let text = "note: socket 1 has no selected NIC: its chunks cross the interconnect once";
        let lines = wrap(text, 20);
        assert_eq!(lines.join(" "), text);
        assert!(lines.iter().all(|l| l.chars().count() <= 20), "{lines:?}");
    }

    #[test]
    fn sizes_read_as_an_operator_writes_them() {
        assert_eq!(memory(64 << 30), "64 GiB");
        assert_eq!(memory(3 << 29), "1.5 GiB");
        assert_eq!(memory(448 << 20), "448 MiB");
        assert_eq!(memory(7 << 39), "3.5 TiB");
        assert_eq!(link_speed(40_000), "40 Gb/s");
        assert_eq!(link_speed(2_500), "2.5 Gb/s");
        assert_eq!(link_speed(100), "100 Mb/s");
    }
}
