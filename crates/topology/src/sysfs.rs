//! This machine's devices, read from sysfs: its network interfaces and whole disks, the
//! NUMA node of each (that of the nearest device above it with a `numa_node`: a NIC's
//! PCI function, a virtio device's PCI function, a SCSI disk's HBA), link speeds, MACs,
//! disk sizes and rotational flags. hwloc discovers the CPUs and memory only.
//!
//! Every reader takes the sysfs root as data ([`Sysfs::at`]) so that unit tests run on a
//! fake tree. A missing or unreadable file means "unknown" (`None`), never an error:
//! sysfs differs between kernels and devices, and discovery must not fail over a detail.

use std::fs;
use std::path::{Path, PathBuf};

/// How far [`Sysfs::block_numa_node`] follows stacked devices (dm on md on disks).
const STACK_DEPTH_MAX: u32 = 4;

/// A sysfs tree (normally `/sys`).
#[derive(Debug, Clone)]
pub(crate) struct Sysfs {
    /// The directory that plays `/sys`.
    root: PathBuf,
}

impl Sysfs {
    /// The real `/sys`.
    pub(crate) fn system() -> Sysfs {
        Sysfs::at("/sys")
    }

    /// A sysfs tree rooted elsewhere (tests).
    pub(crate) fn at(root: impl Into<PathBuf>) -> Sysfs {
        Sysfs { root: root.into() }
    }

    /// The contents of `root/rel`, trimmed; `None` if it cannot be read.
    fn read(&self, rel: impl AsRef<Path>) -> Option<String> {
        fs::read_to_string(self.root.join(rel))
            .ok()
            .map(|s| s.trim().to_string())
    }

    /// Entry names of the directory `root/rel`, sorted; empty if it cannot be read.
    fn list(&self, rel: &str) -> Vec<String> {
        let Ok(entries) = fs::read_dir(self.root.join(rel)) else {
            return Vec::new();
        };
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        names.sort();
        names
    }

    /// Network interfaces (`/sys/class/net`), `lo` included.
    pub(crate) fn net_interfaces(&self) -> Vec<String> {
        self.list("class/net")
    }

    /// Link speed in Mbit/s (`/sys/class/net/NAME/speed`); `None` when the link is down,
    /// the driver reports `-1` (virtio) or the file is unreadable (`lo`: EINVAL).
    pub(crate) fn net_speed_mbps(&self, name: &str) -> Option<u64> {
        let speed: i64 = self.read(format!("class/net/{name}/speed"))?.parse().ok()?;
        u64::try_from(speed).ok().filter(|&s| s > 0)
    }

    /// Hardware address (`/sys/class/net/NAME/address`); `None` if empty or all zeros
    /// (`lo`).
    pub(crate) fn net_mac(&self, name: &str) -> Option<String> {
        let mac = self.read(format!("class/net/{name}/address"))?;
        let all_zero = mac.chars().all(|c| c == '0' || c == ':');
        (!all_zero).then_some(mac)
    }

    /// NUMA node of the interface's device, if the kernel knows it.
    pub(crate) fn net_numa_node(&self, name: &str) -> Option<u32> {
        self.device_numa_node(&format!("class/net/{name}/device"))
    }

    /// The CPUs local to the interface's device (`local_cpulist` of the nearest device
    /// above it that has one: its PCI function), for a device whose node is unknown.
    pub(crate) fn net_local_cpus(&self, name: &str) -> Option<Vec<u32>> {
        self.device_local_cpus(&format!("class/net/{name}/device"))
    }

    /// PCI bus id of the interface's device (`0000:81:00.0`), if it is on PCI.
    pub(crate) fn net_pci_bus_id(&self, name: &str) -> Option<String> {
        self.device_pci_bus_id(&format!("class/net/{name}/device"))
    }

    /// Whole disks (`/sys/block`), without empty ones (unused loop and ram devices,
    /// empty CD drives).
    pub(crate) fn block_disks(&self) -> Vec<String> {
        self.list("block")
            .into_iter()
            .filter(|n| self.block_size_bytes(n) != Some(0))
            .collect()
    }

    /// Size in bytes (`/sys/class/block/NAME/size` counts 512-byte sectors whatever the
    /// device's block size).
    pub(crate) fn block_size_bytes(&self, name: &str) -> Option<u64> {
        let sectors: u64 = self
            .read(format!("class/block/{name}/size"))?
            .parse()
            .ok()?;
        sectors.checked_mul(512)
    }

    /// Whether the disk says it is rotational (`/sys/block/NAME/queue/rotational`).
    pub(crate) fn block_rotational(&self, name: &str) -> Option<bool> {
        match self
            .read(format!("block/{name}/queue/rotational"))?
            .as_str()
        {
            "0" => Some(false),
            "1" => Some(true),
            _ => None,
        }
    }

    /// NUMA node of a disk's controller. A stacked device without a `device` link
    /// (device mapper, md) gets the node its underlying disks share, if they share one.
    pub(crate) fn block_numa_node(&self, name: &str) -> Option<u32> {
        self.block_numa_node_at_depth(name, 0)
    }

    /// [`Sysfs::block_numa_node`] with a bound on stacking depth.
    fn block_numa_node_at_depth(&self, name: &str, depth: u32) -> Option<u32> {
        let device = format!("class/block/{name}/device");
        if self.root.join(&device).exists() {
            return self.device_numa_node(&device);
        }
        if depth >= STACK_DEPTH_MAX {
            return None;
        }
        let slaves = self.list(&format!("class/block/{name}/slaves"));
        let mut nodes = slaves.iter().map(|s| {
            let disk = self.whole_disk_of(s).unwrap_or_else(|| s.clone());
            self.block_numa_node_at_depth(&disk, depth + 1)
        });
        let first = nodes.next()??;
        nodes.all(|n| n == Some(first)).then_some(first)
    }

    /// The CPUs local to a disk's controller ([`Sysfs::net_local_cpus`]'s rule); `None`
    /// for a stacked device.
    pub(crate) fn block_local_cpus(&self, name: &str) -> Option<Vec<u32>> {
        self.device_local_cpus(&format!("class/block/{name}/device"))
    }

    /// The whole disk that holds block device `MAJ:MIN` (`sda` for `sda2`, `nvme0n1`
    /// for `nvme0n1p1`, `dm-0` for itself), or `None` if sysfs has no such device.
    pub(crate) fn whole_disk_of_dev(&self, major: u32, minor: u32) -> Option<String> {
        let dir = fs::canonicalize(self.root.join(format!("dev/block/{major}:{minor}"))).ok()?;
        whole_disk_of_dir(&dir)
    }

    /// The whole disk holding block device `name` (a partition or a disk).
    fn whole_disk_of(&self, name: &str) -> Option<String> {
        let dir = fs::canonicalize(self.root.join(format!("class/block/{name}"))).ok()?;
        whole_disk_of_dir(&dir)
    }

    /// The NUMA distance matrix between `nodes` (OS indexes), one row per node in that
    /// order, from `/sys/devices/system/node/nodeN/distance`. Each of those files is a
    /// space-separated row over the *online* nodes in ascending order
    /// (`devices/system/node/online`), so the columns are picked by position in that
    /// list. `None` when a file is missing or unreadable, a row's length does not match
    /// the online list, or one of `nodes` is not online: a partial matrix would be
    /// worse than none.
    pub(crate) fn node_distances(&self, nodes: &[u32]) -> Option<Vec<Vec<u32>>> {
        let online = crate::cpulist::parse(&self.read("devices/system/node/online")?).ok()?;
        let columns: Vec<usize> = nodes
            .iter()
            .map(|n| online.iter().position(|o| o == n))
            .collect::<Option<_>>()?;
        nodes
            .iter()
            .map(|n| {
                let text = self.read(format!("devices/system/node/node{n}/distance"))?;
                let row: Vec<u32> = text
                    .split_whitespace()
                    .map(|v| v.parse().ok())
                    .collect::<Option<_>>()?;
                if row.len() != online.len() {
                    return None;
                }
                Some(columns.iter().map(|&c| row[c]).collect())
            })
            .collect()
    }

    /// The NUMA node of the device behind the link `rel`: the first `numa_node` file
    /// found walking up from the device (a virtio device has it one level up on its PCI
    /// function, a SCSI disk a few levels up on its HBA). `-1` means unknown.
    fn device_numa_node(&self, rel: &str) -> Option<u32> {
        self.nearest_attribute(rel, "numa_node")?
            .parse::<i64>()
            .ok()
            .and_then(|n| u32::try_from(n).ok())
    }

    /// The first `local_cpulist` found walking up from the device behind the link `rel`
    /// (a PCI function has one; a virtual device has none).
    fn device_local_cpus(&self, rel: &str) -> Option<Vec<u32>> {
        crate::cpulist::parse(&self.nearest_attribute(rel, "local_cpulist")?)
            .ok()
            .filter(|cpus| !cpus.is_empty())
    }

    /// The trimmed contents of the first file `attribute` found walking up from the
    /// device behind the link `rel`, inside `devices/`.
    fn nearest_attribute(&self, rel: &str, attribute: &str) -> Option<String> {
        let devices = fs::canonicalize(self.root.join("devices")).ok()?;
        let mut dir = fs::canonicalize(self.root.join(rel)).ok()?;
        while dir.starts_with(&devices) && dir != devices {
            if let Ok(text) = fs::read_to_string(dir.join(attribute)) {
                return Some(text.trim().to_string());
            }
            if !dir.pop() {
                break;
            }
        }
        None
    }

    /// The PCI bus id of the nearest PCI function at or above the device behind `rel`.
    fn device_pci_bus_id(&self, rel: &str) -> Option<String> {
        let dir = fs::canonicalize(self.root.join(rel)).ok()?;
        dir.ancestors()
            .filter_map(|d| d.file_name()?.to_str())
            .find(|name| is_pci_bus_id(name))
            .map(str::to_string)
    }
}

/// The disk name for a canonical `/sys/devices/.../block/DISK[/PART]` directory.
fn whole_disk_of_dir(dir: &Path) -> Option<String> {
    let disk_dir = if dir.join("partition").exists() {
        dir.parent()?
    } else {
        dir
    };
    disk_dir.file_name()?.to_str().map(str::to_string)
}

/// `dddd:bb:dd.f` in lowercase hex, as sysfs names PCI functions.
fn is_pci_bus_id(name: &str) -> bool {
    let b = name.as_bytes();
    let hex = |r: std::ops::Range<usize>| b[r].iter().all(|c| c.is_ascii_hexdigit());
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && hex(0..4)
        && hex(5..7)
        && hex(8..10)
        && (b'0'..=b'7').contains(&b[11])
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A fresh empty directory under the system temp dir, removed on drop.
    pub(crate) struct TempDir(pub PathBuf);

    impl TempDir {
        pub(crate) fn new(tag: &str) -> TempDir {
            use std::sync::atomic::{AtomicU32, Ordering};
            static NEXT: AtomicU32 = AtomicU32::new(0);
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let dir = std::env::temp_dir()
                .join(format!("sluice-topology-{tag}-{}-{n}", std::process::id()));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn write(root: &Path, rel: &str, text: &str) {
        let path = root.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    fn link(root: &Path, rel: &str, target: &str) {
        let path = root.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        symlink(target, path).unwrap();
    }

    /// A VM-like tree: virtio NIC and disk on PCI functions of node 1, `lo`, a SATA disk
    /// with one partition behind an HBA on node 0, an empty loop device, and dm-0 on the
    /// SATA partition.
    fn fake_sysfs() -> TempDir {
        let t = TempDir::new("sysfs");
        let r = &t.0;
        let pci_nic = "devices/pci0000:20/0000:20:00.0/0000:21:00.0";
        write(r, &format!("{pci_nic}/numa_node"), "1\n");
        write(r, &format!("{pci_nic}/virtio2/net/eth0/speed"), "-1\n");
        write(
            r,
            &format!("{pci_nic}/virtio2/net/eth0/address"),
            "52:54:00:12:00:01\n",
        );
        link(
            r,
            &format!("{pci_nic}/virtio2/net/eth0/device"),
            "../../../virtio2",
        );
        link(
            r,
            "class/net/eth0",
            &format!("../../{pci_nic}/virtio2/net/eth0"),
        );
        write(r, "devices/virtual/net/lo/address", "00:00:00:00:00:00\n");
        link(r, "class/net/lo", "../../devices/virtual/net/lo");

        let pci_disk = "devices/pci0000:20/0000:20:01.0/0000:22:00.0";
        write(r, &format!("{pci_disk}/numa_node"), "1\n");
        let vda = format!("{pci_disk}/virtio3/block/vda");
        write(r, &format!("{vda}/size"), "2097152\n");
        write(r, &format!("{vda}/queue/rotational"), "1\n");
        link(r, &format!("{vda}/device"), "../../../virtio3");
        link(r, "block/vda", &format!("../{vda}"));
        link(r, "class/block/vda", &format!("../../{vda}"));
        link(r, "dev/block/254:0", &format!("../../{vda}"));

        let hba = "devices/pci0000:00/0000:00:1f.2";
        write(r, &format!("{hba}/numa_node"), "0\n");
        let scsi = format!("{hba}/ata1/host0/target0:0:0/0:0:0:0");
        let sda = format!("{scsi}/block/sda");
        write(r, &format!("{sda}/size"), "1000\n");
        write(r, &format!("{sda}/queue/rotational"), "0\n");
        link(r, &format!("{sda}/device"), "../../../0:0:0:0");
        write(r, &format!("{sda}/sda1/partition"), "1\n");
        write(r, &format!("{sda}/sda1/size"), "900\n");
        link(r, "block/sda", &format!("../{sda}"));
        link(r, "class/block/sda", &format!("../../{sda}"));
        link(r, "class/block/sda1", &format!("../../{sda}/sda1"));
        link(r, "dev/block/8:1", &format!("../../{sda}/sda1"));

        write(r, "devices/virtual/block/loop0/size", "0\n");
        link(r, "block/loop0", "../devices/virtual/block/loop0");
        link(r, "class/block/loop0", "../../devices/virtual/block/loop0");

        write(r, "devices/virtual/block/dm-0/size", "800\n");
        link(
            r,
            "devices/virtual/block/dm-0/slaves/sda1",
            &format!("../../../../{sda}/sda1"),
        );
        link(r, "block/dm-0", "../devices/virtual/block/dm-0");
        link(r, "class/block/dm-0", "../../devices/virtual/block/dm-0");

        let pci_nic2 = "devices/pci0000:40/0000:40:00.0/0000:41:00.0";
        write(r, &format!("{pci_nic2}/numa_node"), "-1\n");
        write(r, &format!("{pci_nic2}/local_cpulist"), "8-11,14\n");
        write(r, &format!("{pci_nic2}/net/eth1/speed"), "25000\n");
        link(
            r,
            &format!("{pci_nic2}/net/eth1/device"),
            "../../../0000:41:00.0",
        );
        link(r, "class/net/eth1", &format!("../../{pci_nic2}/net/eth1"));
        t
    }

    #[test]
    fn reads_nics_from_a_vm_like_tree() {
        let t = fake_sysfs();
        let s = Sysfs::at(&t.0);
        assert_eq!(s.net_interfaces(), vec!["eth0", "eth1", "lo"]);
        assert_eq!(
            s.net_numa_node("eth0"),
            Some(1),
            "virtio: node on the PCI function"
        );
        assert_eq!(s.net_numa_node("lo"), None);
        assert_eq!(s.net_speed_mbps("eth0"), None, "-1 is unknown");
        assert_eq!(s.net_mac("eth0").as_deref(), Some("52:54:00:12:00:01"));
        assert_eq!(s.net_mac("lo"), None);
        assert_eq!(s.net_pci_bus_id("eth0").as_deref(), Some("0000:21:00.0"));
        assert_eq!(s.net_pci_bus_id("lo"), None);
    }

    #[test]
    fn a_device_of_unknown_node_gives_its_local_cpus() {
        let t = fake_sysfs();
        let s = Sysfs::at(&t.0);
        assert_eq!(s.net_numa_node("eth1"), None, "-1 is unknown");
        assert_eq!(s.net_local_cpus("eth1"), Some(vec![8, 9, 10, 11, 14]));
        assert_eq!(s.net_speed_mbps("eth1"), Some(25000));
        assert_eq!(s.net_local_cpus("lo"), None, "a virtual device has none");
        assert_eq!(
            s.block_local_cpus("dm-0"),
            None,
            "a stack has no controller"
        );
    }

    #[test]
    fn reads_disks_partitions_and_stacks() {
        let t = fake_sysfs();
        let s = Sysfs::at(&t.0);
        assert_eq!(
            s.block_disks(),
            vec!["dm-0", "sda", "vda"],
            "empty loop0 skipped"
        );
        assert_eq!(s.block_size_bytes("vda"), Some(2097152 * 512));
        assert_eq!(s.block_rotational("vda"), Some(true));
        assert_eq!(s.block_rotational("sda"), Some(false));
        assert_eq!(s.block_numa_node("vda"), Some(1));
        assert_eq!(
            s.block_numa_node("sda"),
            Some(0),
            "SCSI: node found on the HBA"
        );
        assert_eq!(s.block_numa_node("dm-0"), Some(0), "dm: node of its slaves");
        assert_eq!(s.whole_disk_of_dev(8, 1).as_deref(), Some("sda"));
        assert_eq!(s.whole_disk_of_dev(254, 0).as_deref(), Some("vda"));
        assert_eq!(s.whole_disk_of_dev(9, 9), None);
    }

    #[test]
    fn reads_node_distances_by_online_position() {
        let t = TempDir::new("distance");
        let r = &t.0;
        write(r, "devices/system/node/online", "0-1,3\n");
        write(r, "devices/system/node/node0/distance", "10 21 31\n");
        write(r, "devices/system/node/node1/distance", "21 10 31\n");
        write(r, "devices/system/node/node3/distance", "31 31 10\n");
        let s = Sysfs::at(r);
        assert_eq!(
            s.node_distances(&[0, 1, 3]),
            Some(vec![vec![10, 21, 31], vec![21, 10, 31], vec![31, 31, 10]])
        );
        // Nodes hidden from the process (cgroup mems) are skipped by column.
        assert_eq!(
            s.node_distances(&[0, 3]),
            Some(vec![vec![10, 31], vec![31, 10]])
        );
        // A node that is not online, a short row, or no file at all: no matrix.
        assert_eq!(s.node_distances(&[2]), None);
        write(r, "devices/system/node/node1/distance", "21 10\n");
        assert_eq!(s.node_distances(&[0, 1]), None);
        assert_eq!(Sysfs::at(r.join("missing")).node_distances(&[0]), None);
    }

    #[test]
    fn recognizes_pci_bus_ids() {
        assert!(is_pci_bus_id("0000:81:00.0"));
        assert!(!is_pci_bus_id("pci0000:00"));
        assert!(!is_pci_bus_id("virtio2"));
        assert!(!is_pci_bus_id("0000:81:00.8"));
    }
}
