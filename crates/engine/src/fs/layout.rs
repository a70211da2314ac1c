//! Where a source root's bytes live, for layout-aware scheduling (LADS, seed 000): each
//! root gets the block device holding it ([`BlockDeviceLayout`], found through sysfs),
//! named with a dense [`TargetId`] by a [`TargetTable`]. The pure side (the [`Layout`]
//! trait, [`SingleTarget`], and the scheduler that hands reads to the least busy target)
//! lives in [`sluice_session::sched`].

use std::path::Path;

pub use sluice_session::sched::{Layout, LayoutScheduler, SingleTarget, TargetId, WorkItem};

/// Names block devices with dense [`TargetId`]s (`sda` → 0, `nvme0n1` → 1, ...).
#[derive(Debug, Clone, Default)]
pub struct TargetTable {
    names: Vec<String>,
}

impl TargetTable {
    /// An empty table.
    pub fn new() -> TargetTable {
        TargetTable::default()
    }

    /// The id of `name`, given a new one if unseen.
    pub fn intern(&mut self, name: &str) -> TargetId {
        if let Some(i) = self.names.iter().position(|n| n == name) {
            return TargetId(u32::try_from(i).unwrap_or(u32::MAX - 1));
        }
        self.names.push(name.to_owned());
        TargetId(u32::try_from(self.names.len() - 1).unwrap_or(u32::MAX - 1))
    }

    /// The name of `id`, if it was interned here.
    pub fn name(&self, id: TargetId) -> Option<&str> {
        self.names.get(id.0 as usize).map(String::as_str)
    }
}

/// Every byte on one target: the block device holding the file (or, on tmpfs, NFS and
/// the like, a single pseudo-target named `"(no block device)"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockDeviceLayout {
    /// The whole disk (`sda`, `nvme0n1`), if the path is on one.
    pub device: Option<String>,
    /// Its target id.
    pub target: TargetId,
}

impl BlockDeviceLayout {
    /// Finds the disk holding `path` (`sluice_topology::storage_for_path`) and names it
    /// in `table`. One call per root is enough: its files share the device (mount points
    /// inside the root are not told apart).
    ///
    /// # Errors
    /// The topology error if `path` cannot be `stat`ed.
    pub fn discover(
        path: &Path,
        table: &mut TargetTable,
    ) -> Result<BlockDeviceLayout, sluice_topology::TopologyError> {
        let device = sluice_topology::storage_for_path(path)?;
        let target = table.intern(device.as_deref().unwrap_or("(no block device)"));
        Ok(BlockDeviceLayout { device, target })
    }
}

impl Layout for BlockDeviceLayout {
    fn target(&self, _offset: u64) -> TargetId {
        self.target
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_device_layout_is_one_target() {
        let mut table = TargetTable::new();
        let l = BlockDeviceLayout::discover(Path::new("/"), &mut table).unwrap();
        assert_eq!(l.target(0), l.target(u64::MAX / 2));
        assert_eq!(
            table.intern(table.name(l.target).unwrap().to_owned().as_str()),
            l.target
        );
    }

    #[test]
    fn a_table_names_devices_densely() {
        let mut table = TargetTable::new();
        assert_eq!(table.intern("sda"), TargetId(0));
        assert_eq!(table.intern("nvme0n1"), TargetId(1));
        assert_eq!(table.intern("sda"), TargetId(0));
        assert_eq!(table.name(TargetId(1)), Some("nvme0n1"));
        assert_eq!(table.name(TargetId(2)), None);
    }
}
