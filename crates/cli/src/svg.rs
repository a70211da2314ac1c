//! SVG drawings of a machine and of a plan placed on it.
//!
//! Packages are drawn left to right, their NUMA nodes inside them, each node's cores
//! as a grid of boxes labelled with their PUs, and the node's NICs and disks beneath.
//! With a plan, every core is coloured by the roles bound to it, each node shows its
//! channel's buffer partition, and unbound threads are listed apart.

use sluice_placement::{Plan, Role};
use sluice_topology::{cpulist, Machine, Node};
use std::collections::BTreeMap;
use std::fmt::Write as _;

const CORE_W: u32 = 76;
const CORE_H: u32 = 46;
const GAP: u32 = 8;
const COLS_MAX: u32 = 8;
const NODE_HEAD: u32 = 40;
const PKG_HEAD: u32 = 28;

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
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// Who is bound to each CPU, and what each node's channel holds.
struct Placed<'a> {
    by_cpu: BTreeMap<u32, Vec<(Role, u32)>>,
    buffer_by_node: BTreeMap<u32, u64>,
    unbound: Vec<(Role, u32)>,
    plan: &'a Plan,
}

impl<'a> Placed<'a> {
    fn new(plan: &'a Plan) -> Self {
        let mut by_cpu: BTreeMap<u32, Vec<(Role, u32)>> = BTreeMap::new();
        let mut unbound = Vec::new();
        let mut buffer_by_node = BTreeMap::new();
        for ch in &plan.channels {
            if let Some(node) = ch.numa_node {
                *buffer_by_node.entry(node).or_insert(0) += ch.buffer_bytes;
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
        Placed { by_cpu, buffer_by_node, unbound, plan }
    }
}

fn node_size(node: &Node, devices: usize) -> (u32, u32) {
    let cores = u32::try_from(node.cores.len().max(1)).unwrap_or(u32::MAX);
    let cols = cores.min(COLS_MAX);
    let rows = cores.div_ceil(cols);
    let w = cols * (CORE_W + GAP) + GAP;
    let dev_rows = u32::try_from(devices).unwrap_or(0);
    let h = NODE_HEAD + rows * (CORE_H + GAP) + dev_rows * 18 + GAP;
    (w.max(220), h)
}

/// Renders the machine, and the plan on it if given, as a standalone SVG document.
pub fn render(machine: &Machine, plan: Option<&Plan>) -> String {
    let placed = plan.map(Placed::new);
    // Group nodes by package; nodes outside any package form their own group.
    let mut groups: Vec<(Option<u32>, Vec<&Node>)> = Vec::new();
    for node in &machine.nodes {
        match groups.iter_mut().find(|(p, _)| *p == node.package) {
            Some((_, nodes)) => nodes.push(node),
            None => groups.push((node.package, vec![node])),
        }
    }
    let devices_of = |n: &Node| {
        machine.nics.iter().filter(|x| x.numa_node == Some(n.os_index)).count()
            + machine.block_devices.iter().filter(|d| d.numa_node == Some(n.os_index)).count()
    };
    let mut body = String::new();
    let mut x = 16u32;
    let top = 56u32;
    let mut height = 0u32;
    for (pkg, nodes) in &groups {
        let sizes: Vec<(u32, u32)> = nodes.iter().map(|n| node_size(n, devices_of(n))).collect();
        let pkg_w = sizes.iter().map(|(w, _)| w + GAP).sum::<u32>() + GAP;
        let pkg_h = PKG_HEAD + sizes.iter().map(|(_, h)| *h).max().unwrap_or(0) + GAP;
        let label = pkg.map_or_else(|| "no package".to_string(), |p| format!("Package {p}"));
        let _ = writeln!(
            body,
            r##"<rect x="{x}" y="{top}" width="{pkg_w}" height="{pkg_h}" rx="6" fill="#f4f1ea" stroke="#555"/><text x="{}" y="{}" font-weight="bold">{}</text>"##,
            x + 8,
            top + 19,
            esc(&label)
        );
        let mut nx = x + GAP;
        for (node, (w, h)) in nodes.iter().zip(&sizes) {
            draw_node(&mut body, machine, node, nx, top + PKG_HEAD, *w, *h, placed.as_ref());
            nx += w + GAP;
        }
        x += pkg_w + 16;
        height = height.max(top + pkg_h);
    }
    let mut y = height + 24;
    if let Some(p) = &placed {
        let legend: Vec<Role> = Role::ALL.to_vec();
        let mut lx = 16;
        for role in legend {
            let _ = writeln!(
                body,
                r#"<rect x="{lx}" y="{}" width="14" height="14" fill="{}"/><text x="{}" y="{}">{}</text>"#,
                y - 11,
                role_color(role),
                lx + 18,
                y,
                role
            );
            lx += 110;
        }
        y += 22;
        if !p.unbound.is_empty() {
            let names: Vec<String> = p.unbound.iter().map(|(r, i)| format!("{r} {i}")).collect();
            let _ = writeln!(
                body,
                r#"<text x="16" y="{y}">unbound (the OS places them): {}</text>"#,
                esc(&names.join(", "))
            );
            y += 20;
        }
        for note in &p.plan.notes {
            let _ = writeln!(body, r#"<text x="16" y="{y}" fill="#444">note: {}</text>"#, esc(note));
            y += 18;
        }
    }
    let title = match plan {
        Some(p) => format!(
            "sluice plan — policy {} on {} ({} channel(s), {} MiB buffers)",
            p.policy,
            machine.source,
            p.channels.len(),
            p.buffer_bytes() >> 20
        ),
        None => format!("sluice topo — {}", machine.source),
    };
    let width = x.max(760);
    format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="16" y="30" font-size="16" font-weight="bold">{}</text>
{body}</svg>
"##,
        esc(&title),
        h = y + 16
    )
}

#[allow(clippy::too_many_arguments)]
fn draw_node(
    body: &mut String,
    machine: &Machine,
    node: &Node,
    x: u32,
    y: u32,
    w: u32,
    h: u32,
    placed: Option<&Placed<'_>>,
) {
    let _ = writeln!(
        body,
        r##"<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="4" fill="#e3ecf7" stroke="#336"/>"##
    );
    let mut head = format!(
        "NUMA node {} · {} GiB · cpus {}",
        node.os_index,
        node.memory_bytes >> 30,
        if node.cpus.is_empty() { "none".into() } else { cpulist::format(&node.cpus) }
    );
    if let Some(bytes) = placed.and_then(|p| p.buffer_by_node.get(&node.os_index)) {
        let _ = write!(head, " · buffer {} MiB", bytes >> 20);
    }
    let _ = writeln!(body, r#"<text x="{}" y="{}">{}</text>"#, x + 8, y + 17, esc(&head));
    let cols = u32::try_from(node.cores.len().max(1)).unwrap_or(1).min(COLS_MAX);
    let mut last_y = y + NODE_HEAD;
    for (i, core) in node.cores.iter().enumerate() {
        let i = u32::try_from(i).unwrap_or(0);
        let cx = x + GAP + (i % cols) * (CORE_W + GAP);
        let cy = y + NODE_HEAD - 12 + (i / cols) * (CORE_H + GAP);
        let threads: Vec<(Role, u32)> = placed
            .map(|p| core.pus.iter().flat_map(|pu| p.by_cpu.get(pu).into_iter().flatten()).copied().collect())
            .unwrap_or_default();
        let fill = threads.first().map_or("#ffffff", |(r, _)| role_color(*r));
        let _ = writeln!(
            body,
            r##"<rect x="{cx}" y="{cy}" width="{CORE_W}" height="{CORE_H}" fill="{fill}" stroke="#333"/><text x="{}" y="{}" font-size="10">core {} · PU {}</text>"##,
            cx + 4,
            cy + 13,
            core.index,
            esc(&cpulist::format(&core.pus))
        );
        let mut names: Vec<String> = threads.iter().map(|(r, i)| short(*r, *i)).collect();
        names.dedup();
        for (line, chunk) in names.chunks(3).take(2).enumerate() {
            let ly = cy + 27 + u32::try_from(line).unwrap_or(0) * 12;
            let _ = writeln!(
                body,
                r#"<text x="{}" y="{ly}" font-size="10">{}</text>"#,
                cx + 4,
                esc(&chunk.join(" "))
            );
        }
        last_y = cy + CORE_H + GAP;
    }
    let mut dy = last_y + 14;
    for nic in machine.nics.iter().filter(|n| n.numa_node == Some(node.os_index)) {
        let speed = nic.link_speed_mbps.map(|s| format!(" {} Gb/s", s / 1000)).unwrap_or_default();
        let _ = writeln!(
            body,
            r##"<text x="{}" y="{dy}" fill="#0a4">⇄ NIC {}{}</text>"##,
            x + 8,
            esc(&nic.name),
            speed
        );
        dy += 18;
    }
    for disk in machine.block_devices.iter().filter(|d| d.numa_node == Some(node.os_index)) {
        let _ = writeln!(
            body,
            r##"<text x="{}" y="{dy}" fill="#a40">▤ disk {}</text>"##,
            x + 8,
            esc(&disk.name)
        );
        dy += 18;
    }
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
        assert_eq!(svg.matches("core ").count(), 8);
    }
}
