//! Drawing packages, nodes, cores, the legend and the footer.

use super::model::*;
use super::*;
use sluice_placement::Role;
use sluice_topology::{cpulist, Core, Machine, Node};
use std::fmt::Write as _;

/// Where the packages ended: the bottom of their last row, and the right edge of the
/// widest row plus the margin.
pub(super) struct Extent {
    pub(super) bottom: u32,
    pub(super) width: u32,
}

/// The machine's nodes grouped by package, in node order; nodes outside any package
/// form their own group.
pub(super) fn package_groups(machine: &Machine) -> Vec<(Option<u32>, Vec<usize>)> {
    let mut groups: Vec<(Option<u32>, Vec<usize>)> = Vec::new();
    for (i, node) in machine.nodes.iter().enumerate() {
        match groups.iter_mut().find(|(p, _)| *p == node.package) {
            Some((_, nodes)) => nodes.push(i),
            None => groups.push((node.package, vec![i])),
        }
    }
    groups
}

/// Draws every package with its nodes, left to right, wrapping into rows.
pub(super) fn draw_packages(
    body: &mut String,
    machine: &Machine,
    texts: &[NodeText],
    layout: &Layout,
    placed: Option<&Placed<'_>>,
) -> Extent {
    let top = 48u32;
    let (mut x, mut y, mut row_h, mut width) = (MARGIN, top, 0u32, 0u32);
    for (pkg, nodes) in &package_groups(machine) {
        let cols = u32_of(nodes.len().clamp(1, NODE_COLS_MAX));
        let rows = u32_of(nodes.len().div_ceil(NODE_COLS_MAX).max(1));
        let label = package_label(*pkg, placed);
        let pkg_w = (cols * (layout.node_w + GAP) + GAP).max(text_w(&label, 13) + 2 * GAP);
        let pkg_h = PKG_HEAD + rows * (layout.node_h + GAP);
        if x > MARGIN && x + pkg_w > MARGIN + ROW_W_MAX {
            x = MARGIN;
            y += row_h + 16;
            row_h = 0;
        }
        let _ = writeln!(
            body,
            r##"<rect x="{x}" y="{y}" width="{pkg_w}" height="{pkg_h}" rx="6" fill="#f4f1ea" stroke="#555"/>"##
        );
        let _ = writeln!(
            body,
            r#"<text x="{}" y="{}" font-size="13" font-weight="bold">{}</text>"#,
            x + GAP,
            y + 20,
            esc(&label)
        );
        for (k, &i) in nodes.iter().enumerate() {
            let k = u32_of(k);
            let nx = x + GAP + (k % cols) * (layout.node_w + GAP);
            let ny = y + PKG_HEAD + (k / cols) * (layout.node_h + GAP);
            draw_node(body, &machine.nodes[i], &texts[i], (nx, ny), layout, placed);
        }
        width = width.max(x + pkg_w + MARGIN);
        row_h = row_h.max(pkg_h);
        x += pkg_w + 16;
    }
    Extent {
        bottom: y + row_h,
        width,
    }
}

/// `Package 1`, with the buffers of the channels that span its nodes (`smts`).
pub(super) fn package_label(pkg: Option<u32>, placed: Option<&Placed<'_>>) -> String {
    let mut label = pkg.map_or_else(|| "no package".to_string(), |p| format!("Package {p}"));
    let spanning = placed.and_then(|p| p.spanning_by_package.get(&pkg));
    for span in spanning.into_iter().flatten() {
        let _ = write!(
            label,
            " · channel {}: buffer {} MiB on nodes {}",
            span.channel,
            span.bytes >> 20,
            cpulist::format(&span.nodes)
        );
    }
    label
}

/// The legend of the plan's roles on the line at `fy`; returns where it ends.
pub(super) fn draw_legend(body: &mut String, placed: &Placed<'_>, fy: u32) -> u32 {
    let mut lx = MARGIN;
    for role in &placed.roles {
        let _ = writeln!(
            body,
            r##"<rect x="{lx}" y="{}" width="14" height="14" fill="{}" stroke="#333"/><text x="{}" y="{fy}">{}</text>"##,
            fy - 11,
            role_color(*role),
            lx + 18,
            role
        );
        lx += 18 + text_w(role.as_str(), 12) + 18;
    }
    lx
}

/// The lines below the drawing, with their colours: what the plan leaves unbound,
/// devices without locality, the plan's notes.
pub(super) fn footer_lines(
    machine: &Machine,
    placed: Option<&Placed<'_>>,
) -> Vec<(String, &'static str)> {
    let mut footer: Vec<(String, &'static str)> = Vec::new();
    if let Some(p) = placed {
        if !p.unbound.is_empty() {
            let names: Vec<String> = p.unbound.iter().map(|(r, i)| format!("{r} {i}")).collect();
            footer.push((
                format!(
                    "threads not bound (the OS places them): {}",
                    names.join(", ")
                ),
                "#000",
            ));
        }
        if p.unbound_buffer_bytes > 0 {
            footer.push((
                format!(
                    "buffer not bound: {} MiB (pages go where first touched)",
                    p.unbound_buffer_bytes >> 20
                ),
                "#000",
            ));
        }
    }
    let unlocated: Vec<String> = machine
        .nics
        .iter()
        .filter(|n| n.numa_node.is_none())
        .map(|n| format!("NIC {}", n.name))
        .chain(
            machine
                .block_devices
                .iter()
                .filter(|d| d.numa_node.is_none())
                .map(|d| format!("disk {}", d.name)),
        )
        .collect();
    if !unlocated.is_empty() {
        footer.push((
            format!("no NUMA locality: {}", unlocated.join(", ")),
            "#444",
        ));
    }
    if let Some(p) = placed {
        for note in &p.plan.notes {
            footer.push((format!("note: {note}"), "#444"));
        }
    }
    footer
}

/// Writes `footer` from `fy` down, wrapped to `width`; returns the line after the last.
pub(super) fn draw_footer(
    body: &mut String,
    footer: &[(String, &str)],
    width: u32,
    mut fy: u32,
) -> u32 {
    let chars_per_line = usize::try_from((width - 2 * MARGIN) * 100 / (12 * 62)).unwrap_or(80);
    for (text, color) in footer {
        for (i, line) in wrap(text, chars_per_line).iter().enumerate() {
            let lx = if i == 0 { MARGIN } else { MARGIN + 16 };
            let _ = writeln!(
                body,
                r#"<text x="{lx}" y="{fy}" fill="{color}">{}</text>"#,
                esc(line)
            );
            fy += LINE_H + 2;
        }
    }
    fy
}

/// Draws one node's box at `(x, y)`: its title lines, its cores, its devices.
pub(super) fn draw_node(
    body: &mut String,
    node: &Node,
    text: &NodeText,
    (x, y): (u32, u32),
    layout: &Layout,
    placed: Option<&Placed<'_>>,
) {
    let Layout {
        core_w,
        node_w,
        node_h,
        head_h,
    } = *layout;
    let _ = writeln!(
        body,
        r##"<rect x="{x}" y="{y}" width="{node_w}" height="{node_h}" rx="4" fill="#e3ecf7" stroke="#336"/>"##
    );
    let tx = x + GAP;
    let _ = writeln!(
        body,
        r#"<text x="{tx}" y="{}" font-size="13" font-weight="bold">{}</text>"#,
        y + 18,
        esc(&text.head)
    );
    let _ = writeln!(
        body,
        r#"<text x="{tx}" y="{}">{}</text>"#,
        y + 18 + LINE_H,
        esc(&text.cpus)
    );
    if let Some(buffer) = &text.buffer {
        let _ = writeln!(
            body,
            r##"<text x="{tx}" y="{}" fill="#335">{}</text>"##,
            y + 18 + 2 * LINE_H,
            esc(buffer)
        );
    }
    let mut grid_bottom = y + head_h;
    for (i, core) in node.cores.iter().enumerate() {
        let i = u32_of(i);
        let cols = u32_of(CORE_COLS_MAX);
        let cx = x + GAP + (i % cols) * (core_w + GAP);
        let cy = y + head_h + (i / cols) * (CORE_H + GAP);
        grid_bottom = grid_bottom.max(cy + CORE_H + GAP);
        let threads = placed.map(|p| p.threads_on(&core.pus)).unwrap_or_default();
        draw_core(body, core, &threads, (cx, cy), core_w);
    }
    let mut dy = grid_bottom + 12;
    for (color, device) in &text.devices {
        let _ = writeln!(
            body,
            r#"<text x="{tx}" y="{dy}" fill="{color}">{}</text>"#,
            esc(device)
        );
        dy += LINE_H;
    }
}

/// Draws one core's box at `(cx, cy)`: its name and PUs, the names of the `threads`
/// bound to it, and one segment per thread in its role's colour.
pub(super) fn draw_core(
    body: &mut String,
    core: &Core,
    threads: &[(Role, u32)],
    (cx, cy): (u32, u32),
    core_w: u32,
) {
    let fill = if threads.is_empty() {
        "#ffffff"
    } else {
        "#fffdf5"
    };
    let _ = writeln!(
        body,
        r##"<rect x="{cx}" y="{cy}" width="{core_w}" height="{CORE_H}" fill="{fill}" stroke="#333"/>"##
    );
    let _ = writeln!(
        body,
        r#"<text x="{}" y="{}" font-size="11" font-weight="bold">core {}</text><text x="{}" y="{}" font-size="10">PU {}</text>"#,
        cx + 4,
        cy + 13,
        core.index,
        cx + 4,
        cy + 25,
        esc(&cpulist::format(&core.pus))
    );
    let label_chars = usize::try_from((core_w - GAP) / 6).unwrap_or(12);
    let names: Vec<String> = threads.iter().map(|(r, i)| short(*r, *i)).collect();
    for (line, text) in fit_lines(&names, label_chars, 2).iter().enumerate() {
        let _ = writeln!(
            body,
            r#"<text x="{}" y="{}" font-size="10">{}</text>"#,
            cx + 4,
            cy + 38 + u32_of(line) * 12,
            esc(text)
        );
    }
    let n = u32_of(threads.len());
    for (k, (role, _)) in threads.iter().enumerate() {
        let k = u32_of(k);
        let sx = cx + 1 + k * (core_w - 2) / n;
        let sw = (k + 1) * (core_w - 2) / n - k * (core_w - 2) / n;
        let _ = writeln!(
            body,
            r#"<rect x="{sx}" y="{}" width="{sw}" height="{STRIPE_H}" fill="{}"/>"#,
            cy + CORE_H - STRIPE_H - 1,
            role_color(*role)
        );
    }
}

/// Packs `names` into at most `lines_max` lines of `chars` characters; when they do not
/// all fit, the last line ends with `+N` for the N names left out.
pub(super) fn fit_lines(names: &[String], chars: usize, lines_max: usize) -> Vec<String> {
    let width = |line: &[String]| line.iter().map(|w| w.chars().count() + 1).sum::<usize>();
    let mut lines: Vec<Vec<String>> = Vec::new();
    for name in names {
        match lines.last_mut() {
            Some(line) if width(line) + name.chars().count() <= chars => line.push(name.clone()),
            _ => lines.push(vec![name.clone()]),
        }
    }
    if lines.len() > lines_max {
        lines.truncate(lines_max);
        let left_out =
            |lines: &[Vec<String>]| names.len() - lines.iter().map(Vec::len).sum::<usize>();
        let mut more = format!("+{}", left_out(&lines));
        while let Some(last) = lines.last_mut() {
            if last.is_empty() || width(last) + more.len() <= chars {
                last.push(more);
                break;
            }
            last.pop();
            more = format!("+{}", left_out(&lines));
        }
    }
    lines.iter().map(|l| l.join(" ")).collect()
}

/// Splits `text` into lines of at most `chars` characters at spaces (a longer word is
/// kept whole on its own line).
pub(super) fn wrap(text: &str, chars: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split(' ') {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > chars {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    lines.push(line);
    lines
}

pub(super) fn short(role: Role, index: u32) -> String {
    let abbrev = match role {
        Role::Control => "ctl",
        Role::NetSend => "ns",
        Role::NetRecv => "nr",
        Role::IoRead => "ir",
        Role::IoWrite => "iw",
        Role::Compress => "cz",
        Role::Decompress => "dz",
    };
    format!("{abbrev}{index}")
}
