use super::facts::{bracketed, cap_eff, fs_of};
use super::host::kernel_at_least;
use std::path::Path;

#[test]
fn kernel_files_parse() {
    assert_eq!(
        bracketed("always [madvise] never").as_deref(),
        Some("madvise")
    );
    assert_eq!(bracketed("always madvise never"), None);
    assert_eq!(
        cap_eff("CapPrm:\t0\nCapEff:\t0000000000004000\n"),
        Some(1 << 14)
    );
    let mounts = "/dev/sda1 / ext4 rw 0 0\ntmpfs /srv/data tmpfs rw 0 0\n";
    assert_eq!(
        fs_of(mounts, Path::new("/srv/data/x")).as_deref(),
        Some("tmpfs")
    );
    assert_eq!(fs_of(mounts, Path::new("/srv")).as_deref(), Some("ext4"));
    assert!(kernel_at_least(Some("6.8.0-45-generic"), (6, 6)));
    assert!(!kernel_at_least(Some("5.15.0"), (6, 6)));
    assert!(!kernel_at_least(None, (6, 6)));
}
