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
use sluice_topology::{cpulist, Core, Machine, Node};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Space between and inside boxes.
const GAP: u32 = 8;
/// Core boxes per row inside a node.
const CORE_COLS_MAX: usize = 4;
/// Node boxes per row inside a package.
const NODE_COLS_MAX: usize = 2;
/// Beyond this width, packages wrap onto a new row.
const ROW_W_MAX: u32 = 1600;
/// Height of a core box: name, PUs, two lines of thread names, the role stripe.
const CORE_H: u32 = 66;
/// Height of the role stripe at the bottom of a core.
const STRIPE_H: u32 = 8;
/// Narrowest core box.
const CORE_W_MIN: u32 = 84;
/// Line height of 12 px text.
const LINE_H: u32 = 16;
/// Height of a package's title band.
const PKG_HEAD: u32 = 30;
/// Left margin of the drawing.
const MARGIN: u32 = 16;

fn role_color(role: Role) -> &'static str {
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

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A generous estimate of the width of `s` in pixels at `size` px sans-serif (0.62 em
/// per character; DejaVu Sans, the usual fallback, averages about 0.55 em).
fn text_w(s: &str, size: u32) -> u32 {
    let chars = u32::try_from(s.chars().count()).unwrap_or(u32::MAX);
    chars.saturating_mul(size).saturating_mul(62) / 100
}

fn u32_of(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Memory as an operator reads it: `64 GiB`, `1.5 GiB`, `448 MiB`, `3.5 TiB`.
fn memory(bytes: u64) -> String {
    const GIB: u64 = 1 << 30;
    const TIB: u64 = 1 << 40;
    if bytes >= TIB {
        format!("{:.1} TiB", bytes as f64 / TIB as f64)
    } else if bytes >= GIB && bytes % GIB == 0 {
        format!("{} GiB", bytes / GIB)
    } else if bytes >= GIB {
        format!("{:.1} GiB", bytes as f64 / GIB as f64)
    } else {
        format!("{} MiB", bytes >> 20)
    }
}

fn link_speed(mbps: u64) -> String {
    if mbps >= 1000 && mbps % 1000 == 0 {
        format!("{} Gb/s", mbps / 1000)
    } else if mbps >= 1000 {
        format!("{:.1} Gb/s", mbps as f64 / 1000.0)
    } else {
        format!("{mbps} Mb/s")
    }
}

/// A channel whose buffer spans several nodes (`smts`: a socket's nodes).
struct Spanning {
    channel: u32,
    bytes: u64,
    nodes: Vec<u32>,
}

/// Who is bound to each CPU, and what each node's channels hold.
struct Placed<'a> {
    by_cpu: BTreeMap<u32, Vec<(Role, u32)>>,
    /// Buffer bytes and channel ids bound to exactly one node, by node.
    buffer_by_node: BTreeMap<u32, (u64, Vec<u32>)>,
    /// Channels whose buffer spans several nodes (`smts`), by package.
    spanning_by_package: BTreeMap<Option<u32>, Vec<Spanning>>,
    unbound: Vec<(Role, u32)>,
    unbound_buffer_bytes: u64,
    roles: Vec<Role>,
    plan: &'a Plan,
}

impl<'a> Placed<'a> {
    fn new(plan: &'a Plan) -> Self {
        let mut by_cpu: BTreeMap<u32, Vec<(Role, u32)>> = BTreeMap::new();
        let mut buffer_by_node: BTreeMap<u32, (u64, Vec<u32>)> = BTreeMap::new();
        let mut spanning_by_package: BTreeMap<Option<u32>, Vec<Spanning>> = BTreeMap::new();
        let mut unbound = Vec::new();
        let mut unbound_buffer_bytes = 0;
        for ch in &plan.channels {
            match ch.numa_node {
                Some(_) if ch.nodes.len() > 1 => spanning_by_package
                    .entry(ch.package)
                    .or_default()
                    .push(Spanning {
                        channel: ch.id,
                        bytes: ch.buffer_bytes,
                        nodes: ch.nodes.clone(),
                    }),
                Some(node) => {
                    let entry = buffer_by_node.entry(node).or_default();
                    entry.0 += ch.buffer_bytes;
                    entry.1.push(ch.id);
                }
                None => unbound_buffer_bytes += ch.buffer_bytes,
            }
            for t in &ch.threads {
                match &t.cpus {
                    Some(cpus) => {
                        for cpu in cpus {
                            by_cpu.entry(*cpu).or_default().push((t.role, t.index));
                        }
                    }
                    None => unbound.push((t.role, t.index)),
                }
            }
        }
        let roles = Role::ALL
            .into_iter()
            .filter(|r| plan.threads().any(|(_, t)| t.role == *r))
            .collect();
        Placed {
            by_cpu,
            buffer_by_node,
            spanning_by_package,
            unbound,
            unbound_buffer_bytes,
            roles,
            plan,
        }
    }

    /// The threads bound to any PU of `pus`, each once, in plan order per PU.
    fn threads_on(&self, pus: &[u32]) -> Vec<(Role, u32)> {
        let mut threads: Vec<(Role, u32)> = Vec::new();
        for t in pus.iter().filter_map(|pu| self.by_cpu.get(pu)).flatten() {
            if !threads.contains(t) {
                threads.push(*t);
            }
        }
        threads
    }
}

/// The text lines of one node's box.
struct NodeText {
    head: String,
    cpus: String,
    buffer: Option<String>,
    devices: Vec<(&'static str, String)>,
}

impl NodeText {
    fn new(machine: &Machine, node: &Node, placed: Option<&Placed<'_>>) -> Self {
        let head = format!(
            "NUMA node {} · {}",
            node.os_index,
            memory(node.memory_bytes)
        );
        let cpus = if node.cpus.is_empty() {
            "no CPUs".to_string()
        } else {
            format!("cpus {}", cpulist::format(&node.cpus))
        };
        let buffer = placed
            .and_then(|p| p.buffer_by_node.get(&node.os_index))
            .map(|(bytes, channels)| {
                let ids: Vec<String> = channels.iter().map(u32::to_string).collect();
                let s = if ids.len() == 1 { "" } else { "s" };
                format!("buffer {} MiB · channel{s} {}", bytes >> 20, ids.join(","))
            });
        let mut devices = Vec::new();
        for nic in machine
            .nics
            .iter()
            .filter(|n| n.numa_node == Some(node.os_index))
        {
            let mut line = format!("⇄ NIC {}", nic.name);
            if let Some(mbps) = nic.link_speed_mbps {
                let _ = write!(line, " {}", link_speed(mbps));
            }
            if let Some(p) = placed {
                let users: Vec<String> = p
                    .plan
                    .channels
                    .iter()
                    .filter(|c| c.nics.contains(&nic.name))
                    .map(|c| c.id.to_string())
                    .collect();
                match users.len() {
                    0 => line.push_str(" · not used"),
                    1 => {
                        let _ = write!(line, " · channel {}", users[0]);
                    }
                    _ => {
                        let _ = write!(line, " · channels {}", users.join(","));
                    }
                }
            }
            devices.push(("#0a4", line));
        }
        for disk in machine
            .block_devices
            .iter()
            .filter(|d| d.numa_node == Some(node.os_index))
        {
            let size = disk.size_bytes.map(|b| format!(" {}", memory(b)));
            devices.push((
                "#a40",
                format!("▤ disk {}{}", disk.name, size.unwrap_or_default()),
            ));
        }
        NodeText {
            head,
            cpus,
            buffer,
            devices,
        }
    }

    fn lines(&self) -> u32 {
        2 + u32::from(self.buffer.is_some())
    }

    fn width(&self) -> u32 {
        let head = text_w(&self.head, 13).max(text_w(&self.cpus, 12));
        let buffer = self.buffer.as_deref().map_or(0, |b| text_w(b, 12));
        let devices = self
            .devices
            .iter()
            .map(|(_, d)| text_w(d, 12))
            .max()
            .unwrap_or(0);
        head.max(buffer).max(devices) + 2 * GAP
    }
}

/// Sizes shared by every node box, so that the grid lines up.
struct Layout {
    core_w: u32,
    node_w: u32,
    node_h: u32,
    head_h: u32,
}

impl Layout {
    fn new(machine: &Machine, texts: &[NodeText]) -> Self {
        let core_w = machine
            .nodes
            .iter()
            .flat_map(|n| &n.cores)
            .map(|c| text_w(&format!("PU {}", cpulist::format(&c.pus)), 10) + GAP)
            .max()
            .unwrap_or(0)
            .max(CORE_W_MIN);
        let cores_max = machine
            .nodes
            .iter()
            .map(|n| n.cores.len())
            .max()
            .unwrap_or(0);
        let cols = u32_of(cores_max.clamp(1, CORE_COLS_MAX));
        let rows = u32_of(cores_max.div_ceil(CORE_COLS_MAX).max(1));
        let lines = texts.iter().map(NodeText::lines).max().unwrap_or(2);
        let devices = texts
            .iter()
            .map(|t| u32_of(t.devices.len()))
            .max()
            .unwrap_or(0);
        let head_h = 10 + lines * LINE_H;
        let grid_w = cols * (core_w + GAP) + GAP;
        let node_w = texts.iter().map(NodeText::width).fold(grid_w, u32::max);
        let node_h = head_h + rows * (CORE_H + GAP) + devices * LINE_H + GAP;
        Layout {
            core_w,
            node_w,
            node_h,
            head_h,
        }
    }
}

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

/// Where the packages ended: the bottom of their last row, and the right edge of the
/// widest row plus the margin.
struct Extent {
    bottom: u32,
    width: u32,
}

/// The machine's nodes grouped by package, in node order; nodes outside any package
/// form their own group.
fn package_groups(machine: &Machine) -> Vec<(Option<u32>, Vec<usize>)> {
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
fn draw_packages(
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
fn package_label(pkg: Option<u32>, placed: Option<&Placed<'_>>) -> String {
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
fn draw_legend(body: &mut String, placed: &Placed<'_>, fy: u32) -> u32 {
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
fn footer_lines(machine: &Machine, placed: Option<&Placed<'_>>) -> Vec<(String, &'static str)> {
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
fn draw_footer(body: &mut String, footer: &[(String, &str)], width: u32, mut fy: u32) -> u32 {
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
fn draw_node(
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
fn draw_core(
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
fn fit_lines(names: &[String], chars: usize, lines_max: usize) -> Vec<String> {
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
fn wrap(text: &str, chars: usize) -> Vec<String> {
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

fn short(role: Role, index: u32) -> String {
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
