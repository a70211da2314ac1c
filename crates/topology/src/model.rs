//! The plain-data machine model: what the planner reads and `sluice topo --json` prints.
//!
//! Everything here is owned data with OS indexes (the numbers `numactl`, `taskset` and
//! `/sys` use), never hwloc logical indexes, so that a [`Machine`] can be serialized,
//! compared in golden tests and built by hand in property tests.

use serde::{Deserialize, Serialize};

/// A whole machine as sluice sees it: sockets, NUMA nodes, cores and the devices that
/// matter for data movement (NICs and block devices), with their locality.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Machine {
    /// Where this description came from: `"this machine"`, `"synthetic:..."` or an XML path.
    pub source: String,
    /// Physical packages (sockets), ordered by OS index.
    pub packages: Vec<Package>,
    /// NUMA nodes, ordered by OS index. Nodes without CPUs (memory-only) are listed too.
    pub nodes: Vec<Node>,
    /// Network interfaces with their NUMA locality.
    pub nics: Vec<Nic>,
    /// Block devices with their NUMA locality.
    pub block_devices: Vec<BlockDevice>,
    /// PUs this process may run on (taskset, cgroup cpuset), a subset of all PUs.
    pub allowed_cpus: Vec<u32>,
}

/// A physical package (socket).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Package {
    /// OS index of the package (`physical_package_id`).
    pub os_index: u32,
    /// OS indexes of the NUMA nodes inside this package.
    pub nodes: Vec<u32>,
    /// OS indexes of the PUs of this package that this process may use (as for
    /// [`Node::cpus`]; on synthetic and XML topologies every PU is allowed).
    pub cpus: Vec<u32>,
}

/// A NUMA node: a memory domain and the PUs local to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    /// OS index of the node (`/sys/devices/system/node/nodeN`).
    pub os_index: u32,
    /// OS index of the package this node belongs to, if it lies inside one.
    pub package: Option<u32>,
    /// OS indexes of the PUs local to this node that this process may use.
    pub cpus: Vec<u32>,
    /// Cores local to this node, each with its allowed PUs (hyperthreads).
    pub cores: Vec<Core>,
    /// Local memory in bytes (0 for a node hwloc reports without memory).
    pub memory_bytes: u64,
    /// Row of the distance matrix for this node, in the order of [`Machine::nodes`]
    /// (10 = local, as in the ACPI SLIT): hwloc's matrix, else on this machine the
    /// kernel's `/sys/devices/system/node/nodeN/distance` row, else `[10]` for a
    /// single-node machine. Empty only when a machine of several nodes has no distances
    /// at all (a synthetic or XML topology without a matrix); [`Machine::distance`] then
    /// falls back to 10 local / 20 remote.
    pub distances: Vec<u32>,
}

/// A physical core and its PUs (hardware threads).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Core {
    /// Logical index of the core within the machine (hwloc's core numbering is not
    /// guaranteed to carry OS indexes on synthetic or XML topologies).
    pub index: u32,
    /// OS indexes of this core's allowed PUs.
    pub pus: Vec<u32>,
}

/// A network interface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Nic {
    /// Interface name (`eth0`, `ens1f0`).
    pub name: String,
    /// OS index of the NUMA node the NIC is attached to, if known.
    pub numa_node: Option<u32>,
    /// Link speed in megabits per second, if the kernel reports one.
    pub link_speed_mbps: Option<u64>,
    /// Hardware address, if any.
    pub mac: Option<String>,
    /// IP addresses (v4 and v6) configured on the interface, when read from this machine.
    pub addresses: Vec<String>,
    /// PCI bus id (`0000:81:00.0`), if the NIC is a PCI device.
    pub pci_bus_id: Option<String>,
}

/// A block device (disk, NVMe namespace, virtio disk).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockDevice {
    /// Kernel name (`nvme0n1`, `sda`, `vda`).
    pub name: String,
    /// OS index of the NUMA node the device's controller is attached to, if known.
    pub numa_node: Option<u32>,
    /// Size in bytes, if known.
    pub size_bytes: Option<u64>,
    /// Whether the device reports itself as rotational, if known.
    pub rotational: Option<bool>,
}

impl Machine {
    /// The node with this OS index.
    pub fn node(&self, os_index: u32) -> Option<&Node> {
        self.nodes.iter().find(|n| n.os_index == os_index)
    }

    /// The NIC with this name.
    pub fn nic(&self, name: &str) -> Option<&Nic> {
        self.nics.iter().find(|n| n.name == name)
    }

    /// The block device with this kernel name.
    pub fn block_device(&self, name: &str) -> Option<&BlockDevice> {
        self.block_devices.iter().find(|b| b.name == name)
    }

    /// The NUMA node whose allowed PUs include `cpu`.
    pub fn node_of_cpu(&self, cpu: u32) -> Option<u32> {
        self.nodes
            .iter()
            .find(|n| n.cpus.contains(&cpu))
            .map(|n| n.os_index)
    }

    /// Distance from node `a` to node `b` (10 = local). Falls back to 10 for `a == b`
    /// and 20 otherwise when the source has no distance matrix.
    pub fn distance(&self, a: u32, b: u32) -> u32 {
        let idx_b = self.nodes.iter().position(|n| n.os_index == b);
        match (self.node(a), idx_b) {
            (Some(na), Some(ib)) if ib < na.distances.len() => na.distances[ib],
            _ if a == b => 10,
            _ => 20,
        }
    }

    /// Total number of allowed PUs.
    pub fn cpu_count(&self) -> usize {
        self.allowed_cpus.len()
    }
}

impl Machine {
    /// A regular machine built without hwloc: `packages` sockets of `nodes_per_package`
    /// nodes of `cores_per_node` cores with `pus_per_core` PUs each, PUs numbered
    /// consecutively, `memory_per_node_bytes` per node, distances 10 local / 21 same
    /// package / 32 remote. Meant for property tests and examples; devices are added by
    /// pushing to [`Machine::nics`] and [`Machine::block_devices`].
    pub fn uniform(
        packages: u32,
        nodes_per_package: u32,
        cores_per_node: u32,
        pus_per_core: u32,
        memory_per_node_bytes: u64,
    ) -> Machine {
        let node_count = packages * nodes_per_package;
        let mut nodes = Vec::new();
        let mut pkgs = Vec::new();
        let mut next_pu = 0u32;
        let mut next_core = 0u32;
        for p in 0..packages {
            let mut pkg = Package {
                os_index: p,
                nodes: Vec::new(),
                cpus: Vec::new(),
            };
            for k in 0..nodes_per_package {
                let os_index = p * nodes_per_package + k;
                let mut cores = Vec::new();
                let mut cpus = Vec::new();
                for _ in 0..cores_per_node {
                    let pus: Vec<u32> = (next_pu..next_pu + pus_per_core).collect();
                    next_pu += pus_per_core;
                    cpus.extend(&pus);
                    cores.push(Core {
                        index: next_core,
                        pus,
                    });
                    next_core += 1;
                }
                let distances = (0..node_count)
                    .map(|other| {
                        if other == os_index {
                            10
                        } else if other / nodes_per_package == p {
                            21
                        } else {
                            32
                        }
                    })
                    .collect();
                pkg.nodes.push(os_index);
                pkg.cpus.extend(&cpus);
                nodes.push(Node {
                    os_index,
                    package: Some(p),
                    cpus,
                    cores,
                    memory_bytes: memory_per_node_bytes,
                    distances,
                });
            }
            pkgs.push(pkg);
        }
        Machine {
            source: format!(
                "uniform:{packages}x{nodes_per_package}x{cores_per_node}x{pus_per_core}"
            ),
            packages: pkgs,
            nodes,
            nics: Vec::new(),
            block_devices: Vec::new(),
            allowed_cpus: (0..next_pu).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_machine_numbers_pus_and_nodes_consistently() {
        let m = Machine::uniform(2, 2, 3, 2, 1 << 30);
        assert_eq!(m.nodes.len(), 4);
        assert_eq!(m.cpu_count(), 24);
        assert_eq!(m.node_of_cpu(6), Some(1));
        assert_eq!(m.distance(0, 1), 21);
        assert_eq!(m.distance(0, 2), 32);
        assert_eq!(m.distance(3, 3), 10);
        assert_eq!(m.packages[1].nodes, vec![2, 3]);
    }
}
