//! hwloc -> [`Machine`]: load a topology (this machine, synthetic, XML) and copy what
//! sluice needs into plain data, with OS indexes throughout.

use crate::error::{io_reason, TopologyError, XML_SIZE_LIMIT_BYTES};
use crate::model::{BlockDevice, Core, Machine, Nic, Node, Package};
use crate::netif;
use crate::source::TopologySource;
use crate::sysfs::Sysfs;
use hwlocality::cpu::binding::CpuBindingFlags;
use hwlocality::cpu::cpuset::CpuSet;
use hwlocality::errors::RawHwlocError;
use hwlocality::object::attributes::ObjectAttributes;
use hwlocality::object::distance::DistancesKind;
use hwlocality::object::types::{OSDeviceType, ObjectType};
use hwlocality::object::TopologyObject;
use hwlocality::topology::builder::TypeFilter;
use hwlocality::Topology;
use std::collections::BTreeSet;
use std::io::Read;
use std::panic::{self, AssertUnwindSafe};
use std::path::Path;

/// Info key sluice reads on network OS devices of an XML topology for the link speed in
/// Mbit/s. hwloc does not write it; hand-made fixtures add it.
pub const LINK_SPEED_INFO: &str = "LinkSpeedMbps";

/// hwloc's discovery components for GPUs and co-processors, which sluice never places
/// anything near. Each start-up (every `sluice cp`, the daemon, `sluice.copy`) loaded
/// them: `gl` connected to every X display it could find (`:0`, `:1`, ... over Unix
/// sockets and TCP ports 6000 and up; 55 `connect` calls on the build VM, which has no
/// X server), and the vendor ones load their drivers' libraries where a GPU is
/// installed. On the build VM, which has only `gl` and `opencl`, the time a one-file
/// copy takes (about 40 ms) did not change measurably.
const UNUSED_COMPONENTS: [&str; 6] = ["gl", "opencl", "cuda", "nvml", "rsmi", "levelzero"];

/// Builds the [`Machine`] described by `source`.
///
/// - [`TopologySource::This`]: this machine's packages, nodes and cores as hwloc sees
///   them, restricted to the PUs this process may use (cgroup cpuset and CPU affinity,
///   e.g. `taskset`); its NICs and disks as sysfs lists them (hwloc lists none), with
///   locality, link speed, MAC, IP addresses, disk size and rotational flag.
/// - [`TopologySource::Synthetic`] and [`TopologySource::Xml`]: all PUs allowed; devices
///   and their infos as the XML gives them (`Address` for a MAC, `Size` in KiB for a
///   disk, [`LINK_SPEED_INFO`] for a link speed).
///
/// Nodes, packages and PUs carry OS indexes. A device's node is known when its nearest
/// non-I/O ancestor covers exactly one NUMA node.
///
/// # Errors
///
/// - [`TopologyError::InvalidSynthetic`]: hwloc rejects the synthetic description;
/// - [`TopologyError::XmlUnreadable`] / [`TopologyError::InvalidXml`]: the XML file
///   cannot be read, or is not a topology hwloc loads;
/// - [`TopologyError::Hwloc`]: hwloc fails on this machine;
/// - [`TopologyError::Unusable`]: the topology lacks OS indexes or PUs.
pub fn discover(source: &TopologySource) -> Result<Machine, TopologyError> {
    let topology = load(source)?;
    extract(&topology, source)
}

/// Which I/O objects hwloc keeps for `source`.
///
/// An XML or synthetic machine's devices exist only in its description: hwloc keeps the
/// important ones (PCI devices, NICs, disks). This machine's devices come from sysfs
/// alone ([`complete_from_sysfs`]), which gives each NIC and disk the node of the
/// nearest device above it that has a `numa_node`, as hwloc's I/O discovery does. That
/// discovery reads every PCI function's configuration space, which in a VM traps to the
/// hypervisor for each dword: on the build VM (6 PCI functions) it took 22 of the 28 ms
/// `sluice topo` spent discovering, and every `sluice cp` pays it before its first byte.
fn io_filter(source: &TopologySource) -> TypeFilter {
    match source {
        TopologySource::This => TypeFilter::KeepNone,
        TopologySource::Synthetic(_) | TopologySource::Xml(_) => TypeFilter::KeepImportant,
    }
}

/// Loads the hwloc topology of `source`, with I/O objects kept as [`io_filter`] says.
fn load(source: &TopologySource) -> Result<Topology, TopologyError> {
    let source_name = source.to_string();
    let hwloc_error = |operation: &'static str, reason: String| TopologyError::Hwloc {
        source_name: source_name.clone(),
        operation,
        reason,
    };
    // Build flags stay empty: without INCLUDE_DISALLOWED, hwloc drops the PUs and nodes
    // outside the process's cgroup cpuset from the topology itself.
    let mut builder = Topology::builder()
        .with_io_type_filter(io_filter(source))
        .map_err(|e| hwloc_error("type filter setup", e.to_string()))?;
    // hwloc refuses to exclude a component it does not have (and the refused builder
    // is gone), so each is tried on a builder of its own first.
    let present = UNUSED_COMPONENTS
        .into_iter()
        .filter(|c| Topology::builder().without_component(c).is_ok());
    for component in present {
        builder = builder
            .without_component(component)
            .map_err(|e| hwloc_error("component setup", e.to_string()))?;
    }
    let builder = match source {
        TopologySource::This => builder,
        TopologySource::Synthetic(description) => {
            let invalid = || TopologyError::InvalidSynthetic {
                description: description.clone(),
            };
            // hwlocality answers errno values hwloc does not document with a panic
            // (`unreachable!`); a bad description must still be a plain error.
            guarded(|| builder.from_synthetic(description).ok()).ok_or_else(invalid)?
        }
        TopologySource::Xml(path) => {
            let text = read_xml(path)?;
            let invalid = || TopologyError::InvalidXml {
                path: path.clone(),
                reason: "hwloc could not parse it".to_string(),
            };
            guarded(|| builder.from_xml(&text).ok()).ok_or_else(invalid)?
        }
    };
    match guarded(|| Some(builder.build())) {
        Some(Ok(topology)) => Ok(topology),
        failed => {
            let reason = match failed {
                Some(Err(e)) => raw_reason(&e),
                _ => "hwlocality panicked".to_string(),
            };
            Err(match source {
                TopologySource::This => hwloc_error("topology load", reason),
                TopologySource::Synthetic(d) => TopologyError::InvalidSynthetic {
                    description: d.clone(),
                },
                TopologySource::Xml(path) => TopologyError::InvalidXml {
                    path: path.clone(),
                    reason: format!("hwloc could not load it: {reason}"),
                },
            })
        }
    }
}

/// The errno text of a failed hwloc call (`Invalid argument`), or its entry point when
/// hwloc set no errno.
fn raw_reason(error: &RawHwlocError) -> String {
    match error.errno {
        Some(errno) => io_reason(&std::io::Error::from_raw_os_error(errno.0)),
        None => format!("{} failed", error.api),
    }
}

/// Runs `f`, turning a panic inside hwlocality into `None`.
fn guarded<T>(f: impl FnOnce() -> Option<T>) -> Option<T> {
    panic::catch_unwind(AssertUnwindSafe(f)).ok().flatten()
}

/// Reads an XML topology file as UTF-8 text of at most [`XML_SIZE_LIMIT_BYTES`].
fn read_xml(path: &Path) -> Result<String, TopologyError> {
    let unreadable = |error| TopologyError::XmlUnreadable {
        path: path.to_path_buf(),
        error,
    };
    let invalid = |reason: &str| TopologyError::InvalidXml {
        path: path.to_path_buf(),
        reason: reason.into(),
    };
    let file = std::fs::File::open(path).map_err(unreadable)?;
    let mut bytes = Vec::new();
    file.take(XML_SIZE_LIMIT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    if u64::try_from(bytes.len()).map_or(true, |n| n > XML_SIZE_LIMIT_BYTES) {
        return Err(invalid("it is larger than 64 MiB"));
    }
    let text = String::from_utf8(bytes).map_err(|_| invalid("it is not UTF-8 text"))?;
    if text.contains('\0') {
        return Err(invalid("it contains a NUL byte"));
    }
    if text.trim().is_empty() {
        return Err(invalid("it is empty"));
    }
    Ok(text)
}

/// Copies the topology into a [`Machine`].
fn extract(topology: &Topology, source: &TopologySource) -> Result<Machine, TopologyError> {
    let source_name = source.to_string();
    let unusable = |reason: &str| TopologyError::Unusable {
        source_name: source_name.clone(),
        reason: reason.to_string(),
    };
    let is_this = matches!(source, TopologySource::This);

    let allowed = allowed_cpuset(topology, is_this);
    let allowed_cpus = cpus_in(&allowed, &allowed);
    if allowed_cpus.is_empty() {
        return Err(unusable("no PU is allowed"));
    }
    let mut packages: Vec<(u32, &TopologyObject)> = topology
        .objects_with_type(ObjectType::Package)
        .map(|p| (package_index(p), p))
        .collect();
    packages.sort_by_key(|(index, _)| *index);
    let numa = numa_nodes(topology).map_err(unusable)?;

    let sysfs = is_this.then(Sysfs::system);
    let nodes = nodes_of(topology, &numa, &packages, &allowed, sysfs.as_ref());
    let packages = packages
        .iter()
        .map(|(index, pkg)| Package {
            os_index: *index,
            nodes: nodes
                .iter()
                .filter(|n| n.package == Some(*index))
                .map(|n| n.os_index)
                .collect(),
            cpus: pkg
                .cpuset()
                .map(|s| cpus_in(&s, &allowed))
                .unwrap_or_default(),
        })
        .collect();

    let (mut nics, mut block_devices) = io_devices(topology);
    if let Some(sysfs) = &sysfs {
        complete_from_sysfs(sysfs, &node_cpus(&numa), &mut nics, &mut block_devices);
    }
    nics.sort_by(|a, b| a.name.cmp(&b.name));
    block_devices.sort_by(|a, b| a.name.cmp(&b.name));

    Ok(Machine {
        source: source_name,
        packages,
        nodes,
        nics,
        block_devices,
        allowed_cpus,
    })
}

/// Every CPU of each NUMA node of `numa`, allowed or not, by the node's OS index.
fn node_cpus(numa: &[(u32, &TopologyObject)]) -> Vec<(u32, Vec<u32>)> {
    numa.iter()
        .map(|(index, node)| {
            let cpus = node.cpuset().map(|s| cpus_in(&s, &s)).unwrap_or_default();
            (*index, cpus)
        })
        .collect()
}

/// The node of a device whose kernel gives no `numa_node` but lists its local CPUs:
/// the one node holding all of `cpus`, as hwloc places such a device (so on a machine
/// of one node, that node). `None` where the CPUs span nodes.
fn node_holding(node_cpus: &[(u32, Vec<u32>)], cpus: &[u32]) -> Option<u32> {
    let mut holding = node_cpus
        .iter()
        .filter(|(_, node)| cpus.iter().all(|c| node.contains(c)));
    let (index, _) = holding.next()?;
    holding.next().is_none().then_some(*index)
}

/// The NUMA nodes by OS index, sorted; the reason why the topology is unusable when
/// there is none or one lacks an OS index.
fn numa_nodes(topology: &Topology) -> Result<Vec<(u32, &TopologyObject)>, &'static str> {
    let mut numa: Vec<(u32, &TopologyObject)> = Vec::new();
    for node in topology.objects_with_type(ObjectType::NUMANode) {
        let os_index = os_index_u32(node).ok_or("a NUMA node has no OS index")?;
        numa.push((os_index, node));
    }
    numa.sort_by_key(|(index, _)| *index);
    if numa.is_empty() {
        return Err("it has no NUMA node");
    }
    Ok(numa)
}

/// One [`Node`] per NUMA node of `numa`: its package, allowed PUs, cores (those with
/// an allowed PU), local memory and distance row.
fn nodes_of(
    topology: &Topology,
    numa: &[(u32, &TopologyObject)],
    packages: &[(u32, &TopologyObject)],
    allowed: &CpuSet,
    sysfs: Option<&Sysfs>,
) -> Vec<Node> {
    let core_objects: Vec<&TopologyObject> = {
        let cores: Vec<_> = topology.objects_with_type(ObjectType::Core).collect();
        if cores.is_empty() {
            // Some synthetic or XML topologies have no Core level: each PU is a core.
            topology.objects_with_type(ObjectType::PU).collect()
        } else {
            cores
        }
    };
    let node_indexes: Vec<u32> = numa.iter().map(|(index, _)| *index).collect();
    let mut rows = node_distances(topology, &node_indexes, sysfs).into_iter();
    let mut nodes = Vec::with_capacity(numa.len());
    for (os_index, node) in numa {
        let node_set = node.cpuset().map(|s| s.clone_target()).unwrap_or_default();
        let cores = core_objects
            .iter()
            .filter(|core| {
                core.cpuset()
                    .is_some_and(|c| !c.is_empty() && node_set.includes(&*c))
            })
            .filter_map(|core| {
                let pus = cpus_in(&*core.cpuset()?, allowed);
                let index = u32::try_from(core.logical_index()).ok()?;
                (!pus.is_empty()).then_some(Core { index, pus })
            })
            .collect();
        nodes.push(Node {
            os_index: *os_index,
            package: package_of(node, packages),
            cpus: cpus_in(&node_set, allowed),
            cores,
            memory_bytes: local_memory_bytes(node),
            distances: rows.next().unwrap_or_default(),
        });
    }
    nodes
}

/// The PUs this process may use: hwloc's allowed cpuset (cgroup), and for this machine
/// also the process's CPU binding (`taskset`, `sched_setaffinity`).
fn allowed_cpuset(topology: &Topology, is_this: bool) -> CpuSet {
    let mut allowed = &*topology.allowed_cpuset() & &*topology.cpuset();
    if is_this {
        // The union of the binding of all threads. If it cannot be read, the cgroup's
        // set stands; an empty intersection (a binding outside the cgroup) is ignored.
        if let Ok(bound) = topology.cpu_binding(CpuBindingFlags::PROCESS) {
            let restricted = &allowed & &bound;
            if !restricted.is_empty() {
                allowed = restricted;
            }
        }
    }
    allowed
}

/// OS indexes of the PUs in `set` that are also in `allowed` (a finite set), ascending.
fn cpus_in(set: &CpuSet, allowed: &CpuSet) -> Vec<u32> {
    let both = set & allowed;
    // A cpuset index is a C unsigned int, so it always fits in a u32.
    both.iter_set()
        .filter_map(|i| u32::try_from(usize::from(i)).ok())
        .collect()
}

/// The OS index of an object as a u32.
fn os_index_u32(obj: &TopologyObject) -> Option<u32> {
    obj.os_index().and_then(|i| u32::try_from(i).ok())
}

/// A package's OS index (`physical_package_id`); packages of XML files that lack one
/// fall back to hwloc's logical index, the only number left.
fn package_index(pkg: &TopologyObject) -> u32 {
    os_index_u32(pkg).unwrap_or_else(|| u32::try_from(pkg.logical_index()).unwrap_or(u32::MAX))
}

/// The package a NUMA node belongs to: its Package ancestor, or else (topologies where
/// the node sits above the package) the package whose PUs include the node's.
fn package_of(node: &TopologyObject, packages: &[(u32, &TopologyObject)]) -> Option<u32> {
    if let Some(pkg) = node.first_ancestor_with_type(ObjectType::Package) {
        return Some(package_index(pkg));
    }
    let set = node.cpuset()?;
    if set.is_empty() {
        return None;
    }
    packages
        .iter()
        .find(|(_, pkg)| pkg.cpuset().is_some_and(|p| p.includes(&*set)))
        .map(|(index, _)| *index)
}

/// A NUMA node's local memory in bytes (0 if hwloc does not know it).
fn local_memory_bytes(node: &TopologyObject) -> u64 {
    match node.attributes() {
        Some(ObjectAttributes::NUMANode(attrs)) => attrs.local_memory().map_or(0, |m| m.get()),
        _ => 0,
    }
}

/// One distance row per node of `node_indexes` (in that order): hwloc's matrix
/// ([`distance_rows`]); else, on this machine (`sysfs` given), the kernel's rows in
/// `/sys/devices/system/node/nodeN/distance`; else, for a single node, `[10]` (a node's
/// distance to itself, as in the ACPI SLIT). Several nodes without any matrix keep
/// empty rows: inventing remote distances would mislead the planner and the operator.
fn node_distances(
    topology: &Topology,
    node_indexes: &[u32],
    sysfs: Option<&Sysfs>,
) -> Vec<Vec<u32>> {
    let rows = distance_rows(topology, node_indexes);
    if rows.iter().any(|r| !r.is_empty()) {
        return rows;
    }
    if let Some(rows) = sysfs.and_then(|s| s.node_distances(node_indexes)) {
        return rows;
    }
    if node_indexes.len() == 1 {
        return vec![vec![10]];
    }
    rows
}

/// One distance row per node of `node_indexes` (in that order), from hwloc's NUMA
/// latency matrix (`NUMALatency`, else any latency matrix between NUMA nodes, else any
/// matrix between them). All rows are empty if there is none or it misses a node.
fn distance_rows(topology: &Topology, node_indexes: &[u32]) -> Vec<Vec<u32>> {
    let empty = vec![Vec::new(); node_indexes.len()];
    let Ok(matrices) = topology.distances_with_type(None, ObjectType::NUMANode) else {
        return empty;
    };
    let chosen = matrices
        .iter()
        .find(|d| d.name().is_some_and(|n| n.to_bytes() == b"NUMALatency"))
        .or_else(|| {
            matrices
                .iter()
                .find(|d| d.kind().contains(DistancesKind::MEANS_LATENCY))
        })
        .or_else(|| matrices.first());
    let Some(matrix) = chosen else {
        return empty;
    };
    let positions: Option<Vec<usize>> = node_indexes
        .iter()
        .map(|os| {
            matrix
                .objects()
                .position(|o| o.and_then(os_index_u32) == Some(*os))
        })
        .collect();
    let Some(positions) = positions else {
        return empty;
    };
    let n = matrix.num_objects();
    let values = matrix.distances();
    positions
        .iter()
        .map(|&from| {
            positions
                .iter()
                .map(|&to| {
                    let value = values.get(from * n + to).copied().unwrap_or(0);
                    u32::try_from(value).unwrap_or(u32::MAX)
                })
                .collect()
        })
        .collect()
}

/// NICs (network OS devices) and block devices (storage OS devices) that hwloc lists.
fn io_devices(topology: &Topology) -> (Vec<Nic>, Vec<BlockDevice>) {
    let mut nics = Vec::new();
    let mut disks = Vec::new();
    let mut seen = BTreeSet::new();
    for obj in topology.os_devices() {
        let Some(ObjectAttributes::OSDevice(attrs)) = obj.attributes() else {
            continue;
        };
        let Some(name) = obj.name().map(|n| n.to_string_lossy().into_owned()) else {
            continue;
        };
        match attrs.device_type() {
            OSDeviceType::Network if seen.insert(("net", name.clone())) => nics.push(Nic {
                numa_node: io_numa_node(obj),
                link_speed_mbps: info(obj, LINK_SPEED_INFO).and_then(|s| s.parse().ok()),
                mac: info(obj, "Address").filter(|a| !a.is_empty()),
                addresses: Vec::new(),
                pci_bus_id: pci_bus_id(obj),
                name,
            }),
            OSDeviceType::Storage if seen.insert(("block", name.clone())) => {
                disks.push(BlockDevice {
                    numa_node: io_numa_node(obj),
                    // hwloc's Size info is in KiB.
                    size_bytes: info(obj, "Size")
                        .and_then(|s| s.parse::<u64>().ok())
                        .and_then(|kib| kib.checked_mul(1024)),
                    rotational: None,
                    name,
                });
            }
            _ => {}
        }
    }
    (nics, disks)
}

/// An info value of an object, as a String.
fn info(obj: &TopologyObject, key: &str) -> Option<String> {
    obj.info(key).map(|v| v.to_string_lossy().into_owned())
}

/// The NUMA node of an I/O object: that of its first non-I/O ancestor, when that
/// ancestor covers exactly one node.
fn io_numa_node(obj: &TopologyObject) -> Option<u32> {
    let nodeset = obj.first_non_io_ancestor()?.nodeset()?;
    if nodeset.weight() != Some(1) {
        return None;
    }
    nodeset
        .first_set()
        .and_then(|i| u32::try_from(usize::from(i)).ok())
}

/// The bus id (`0000:81:00.0`) of the PCI device an OS device hangs from.
fn pci_bus_id(obj: &TopologyObject) -> Option<String> {
    obj.ancestors().find_map(|a| match a.attributes() {
        Some(ObjectAttributes::PCIDevice(pci)) => Some(format!(
            "{:04x}:{:02x}:{:02x}.{:x}",
            pci.domain(),
            pci.bus_id(),
            pci.bus_device(),
            pci.function()
        )),
        _ => None,
    })
}

/// Adds what sysfs and getifaddrs know on this machine: every network interface and
/// whole disk (hwloc lists none of this machine's, [`io_filter`]) with its locality, and
/// the link speeds, MACs and IP addresses of the NICs and the sizes and rotational flags
/// of the disks.
fn complete_from_sysfs(
    sysfs: &Sysfs,
    node_cpus: &[(u32, Vec<u32>)],
    nics: &mut Vec<Nic>,
    disks: &mut Vec<BlockDevice>,
) {
    let local = |cpus: Option<Vec<u32>>| cpus.and_then(|cpus| node_holding(node_cpus, &cpus));
    let mut addresses = netif::interface_addresses();
    for name in sysfs.net_interfaces() {
        if nics.iter().all(|n| n.name != name) {
            nics.push(Nic {
                numa_node: sysfs
                    .net_numa_node(&name)
                    .or_else(|| local(sysfs.net_local_cpus(&name))),
                link_speed_mbps: None,
                mac: None,
                addresses: Vec::new(),
                pci_bus_id: sysfs.net_pci_bus_id(&name),
                name,
            });
        }
    }
    for nic in nics.iter_mut() {
        nic.link_speed_mbps = nic
            .link_speed_mbps
            .or_else(|| sysfs.net_speed_mbps(&nic.name));
        nic.mac = nic.mac.take().or_else(|| sysfs.net_mac(&nic.name));
        nic.addresses = addresses
            .remove(&nic.name)
            .unwrap_or_default()
            .into_iter()
            .map(|a| a.to_string())
            .collect();
    }
    for name in sysfs.block_disks() {
        if disks.iter().all(|d| d.name != name) {
            disks.push(BlockDevice {
                numa_node: sysfs
                    .block_numa_node(&name)
                    .or_else(|| local(sysfs.block_local_cpus(&name))),
                size_bytes: None,
                rotational: None,
                name,
            });
        }
    }
    for disk in disks.iter_mut() {
        disk.size_bytes = disk
            .size_bytes
            .or_else(|| sysfs.block_size_bytes(&disk.name));
        disk.rotational = disk
            .rotational
            .or_else(|| sysfs.block_rotational(&disk.name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disallowed_pus_are_not_included_by_default() {
        use hwlocality::topology::builder::BuildFlags;
        let topology = load(&TopologySource::This).unwrap();
        assert!(!topology
            .build_flags()
            .contains(BuildFlags::INCLUDE_DISALLOWED));
    }

    #[test]
    fn a_device_of_unknown_node_is_on_the_one_node_holding_its_local_cpus() {
        let nodes = vec![(0, vec![0, 1, 2, 3]), (1, vec![]), (2, vec![4, 5, 6, 7])];
        assert_eq!(node_holding(&nodes, &[5, 7]), Some(2));
        assert_eq!(node_holding(&nodes, &[0]), Some(0));
        assert_eq!(node_holding(&nodes, &[3, 4]), None, "spans two nodes");
        assert_eq!(node_holding(&nodes, &[9]), None, "no node has it");
        let one = vec![(0, vec![0, 1])];
        assert_eq!(node_holding(&one, &[0, 1]), Some(0), "a one-node machine");
    }

    #[test]
    fn this_machine_lists_no_device_through_hwloc() {
        let topology = load(&TopologySource::This).unwrap();
        assert_eq!(topology.os_devices().count(), 0);
        assert_eq!(topology.pci_devices().count(), 0);
        let synthetic = TopologySource::Synthetic("pack:1 core:1 pu:1".into());
        assert_eq!(io_filter(&synthetic), TypeFilter::KeepImportant);
    }

    #[test]
    fn synthetic_machine_has_every_pu_allowed() {
        let source = TopologySource::Synthetic("pack:2 numa:2 core:2 pu:2".into());
        let m = discover(&source).unwrap();
        assert_eq!(m.allowed_cpus, (0..16).collect::<Vec<_>>());
        assert_eq!(m.nodes.len(), 4);
        assert_eq!(m.nodes[1].cores.len(), 2);
        assert_eq!(m.nodes[1].cores[0].pus, vec![4, 5]);
        assert!(m.nics.is_empty() && m.block_devices.is_empty());
    }

    #[test]
    fn topologies_without_cores_get_one_core_per_pu() {
        let m = discover(&TopologySource::Synthetic("numa:2 pu:3".into())).unwrap();
        assert_eq!(m.nodes[1].cpus, vec![3, 4, 5]);
        let pus: Vec<_> = m.nodes[1].cores.iter().map(|c| c.pus.clone()).collect();
        assert_eq!(pus, vec![vec![3], vec![4], vec![5]]);
        assert!(m.packages.is_empty());
        assert_eq!(m.nodes[0].package, None);
    }

    #[test]
    fn synthetic_distances_are_ignored_when_absent() {
        let m = discover(&TopologySource::Synthetic("pack:2 numa:1 pu:2".into())).unwrap();
        assert!(m.nodes.iter().all(|n| n.distances.is_empty()));
        assert_eq!(m.distance(0, 1), 20);
    }

    #[test]
    fn a_single_node_without_a_matrix_is_at_distance_10_from_itself() {
        let m = discover(&TopologySource::Synthetic("core:2 pu:1".into())).unwrap();
        assert_eq!(m.nodes.len(), 1);
        assert_eq!(m.nodes[0].distances, vec![10]);
    }

    #[test]
    fn xml_read_limits_are_typed_errors() {
        let dir = crate::sysfs::tests::TempDir::new("xml");
        let bad = dir.0.join("bad.xml");
        std::fs::write(&bad, [0xff, 0xfe, b'<']).unwrap();
        let err = discover(&TopologySource::Xml(bad.clone())).unwrap_err();
        assert!(err.to_string().contains("it is not UTF-8 text"), "{err}");
        std::fs::write(&bad, "").unwrap();
        let err = discover(&TopologySource::Xml(bad)).unwrap_err();
        assert!(err.to_string().contains("it is empty"), "{err}");
    }
}
