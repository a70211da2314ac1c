//! Which block device holds a path, so that its NUMA node can be looked up with
//! [`Machine::block_device`](crate::Machine::block_device).

use crate::error::TopologyError;
use crate::sysfs::Sysfs;
use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

/// The whole disk (`sda`, `nvme0n1`, `vda`, `dm-0`) that holds `path`, or `None` when
/// the path lives on no block device (tmpfs, overlay on tmpfs, procfs, NFS).
///
/// `stat(path)` gives the device number; `/sys/dev/block/MAJ:MIN` names it, and a
/// partition (`sda2`) is followed to its disk. File systems that report an anonymous
/// device number (btrfs, overlayfs) are looked up in `/proc/self/mountinfo`: if the mount
/// source is a block device under `/dev`, that device is used.
///
/// # Errors
///
/// [`TopologyError::PathUnreadable`] if `path` cannot be `stat`ed;
/// [`TopologyError::Sysfs`] if `/proc/self/mountinfo` is needed and unreadable.
pub fn storage_for_path(path: impl AsRef<Path>) -> Result<Option<String>, TopologyError> {
    let path = path.as_ref();
    let meta = fs::metadata(path).map_err(|error| TopologyError::PathUnreadable {
        path: path.to_path_buf(),
        error,
    })?;
    let sysfs = Sysfs::system();
    let (major, minor) = dev_major_minor(meta.dev());
    if major != 0 {
        return Ok(sysfs.whole_disk_of_dev(major, minor));
    }
    let mountinfo_path = Path::new("/proc/self/mountinfo");
    let mountinfo = fs::read_to_string(mountinfo_path).map_err(|error| TopologyError::Sysfs {
        path: mountinfo_path.to_path_buf(),
        error,
    })?;
    let Some(source) = mount_source(&mountinfo, major, minor) else {
        return Ok(None);
    };
    if !source.starts_with("/dev/") {
        return Ok(None);
    }
    match fs::metadata(source) {
        Ok(dev) if dev.file_type().is_block_device() => {
            let (major, minor) = dev_major_minor(dev.rdev());
            Ok(sysfs.whole_disk_of_dev(major, minor))
        }
        _ => Ok(None),
    }
}

/// Splits a Linux `dev_t` into (major, minor), as glibc's `gnu_dev_major/minor` do:
/// major in bits 8..20 and 32..44, minor in bits 0..8 and 20..32.
pub(crate) fn dev_major_minor(dev: u64) -> (u32, u32) {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & 0xffff_f000);
    let minor = (dev & 0xff) | ((dev >> 12) & 0xffff_ff00);
    // Both are masked to 32 bits above, so the conversions cannot fail.
    (
        u32::try_from(major).unwrap_or(u32::MAX),
        u32::try_from(minor).unwrap_or(u32::MAX),
    )
}

/// The mount source (`/dev/sda2`, `overlay`, `tmpfs`) of the first mount whose
/// device is `major:minor`, from the text of `/proc/self/mountinfo`.
fn mount_source(mountinfo: &str, major: u32, minor: u32) -> Option<&str> {
    let wanted = format!("{major}:{minor}");
    mountinfo.lines().find_map(|line| {
        let (mount, fs) = line.split_once(" - ")?;
        if mount.split(' ').nth(2)? != wanted {
            return None;
        }
        // After the separator: fstype, source, super options.
        fs.split(' ').nth(1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_device_numbers_like_glibc() {
        assert_eq!(dev_major_minor(0xfe00), (254, 0));
        assert_eq!(dev_major_minor(0x0801), (8, 1));
        assert_eq!(dev_major_minor(0x1b), (0, 27));
        // glibc's makedev, large numbers included.
        let makedev = |major: u64, minor: u64| {
            ((major & 0xfff) << 8)
                | ((major & !0xfff) << 32)
                | (minor & 0xff)
                | ((minor & !0xff) << 12)
        };
        assert_eq!(dev_major_minor(makedev(259, 65536)), (259, 65536));
        assert_eq!(dev_major_minor(makedev(4100, 1_048_577)), (4100, 1_048_577));
    }

    #[test]
    fn finds_mount_sources_in_mountinfo() {
        let info = "22 27 0:21 / /proc rw,relatime - proc proc rw\n\
                    27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard\n\
                    40 27 0:35 /@home /home rw shared:5 - btrfs /dev/nvme0n1p2 rw\n";
        assert_eq!(mount_source(info, 254, 0), Some("/dev/vda"));
        assert_eq!(mount_source(info, 0, 35), Some("/dev/nvme0n1p2"));
        assert_eq!(mount_source(info, 0, 21), Some("proc"));
        assert_eq!(mount_source(info, 0, 99), None);
    }

    #[test]
    fn memory_file_systems_have_no_block_device() {
        assert_eq!(storage_for_path("/proc/self").unwrap(), None);
        if Path::new("/dev/shm").is_dir() {
            assert_eq!(storage_for_path("/dev/shm").unwrap(), None);
        }
    }

    #[test]
    fn a_missing_path_is_an_error_naming_it() {
        let err = storage_for_path("/no/such/sluice/path").unwrap_err();
        assert_eq!(
            err.to_string(),
            "cannot examine \"/no/such/sluice/path\": No such file or directory"
        );
    }
}
