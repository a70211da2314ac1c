//! Small files, written whole: one of a packed chunk's segments, or an empty file.

use std::io::Write;

use cap_std::fs::OpenOptionsExt;
use sluice_wire::RelPath;

use super::super::error::{FsError, Op};
use super::super::root::Root;
use super::{
    io_err, open_dir_fd, open_opts, refuse_if_exists, remove_if_exists, rename_into_place,
    set_mode_and_mtime, temp_name, Clobber,
};

/// Writes a whole small file (one of a packed chunk's segments): to a temporary name,
/// then mode, mtime, optional `fsync`, and a rename over `rel`, so a failure never
/// leaves a half file at the destination (the temporary is removed on failure).
///
/// # Errors
/// [`FsError::AlreadyExists`] with [`Clobber::Refuse`]; [`FsError::OutsideRoot`];
/// [`FsError::Io`].
pub fn write_small_file(
    root: &Root,
    rel: &RelPath,
    data: &[u8],
    mode: u32,
    mtime_ns: i64,
    fsync: bool,
    clobber: Clobber,
) -> Result<(), FsError> {
    let (dir, name) = root.parent_of(rel, true)?;
    refuse_if_exists(root, &dir, rel, name, clobber)?;
    let tmp = temp_name(name);
    let err = |op| io_err(root, rel, op);
    remove_if_exists(&dir, &tmp).map_err(err(Op::Remove))?;
    let mut o = open_opts(false, true);
    o.create_new(true).mode(0o600);
    let file = dir.open_with(&tmp, &o).map_err(err(Op::Create))?.into_std();
    let result = (|| {
        (&file).write_all(data).map_err(err(Op::Write))?;
        set_mode_and_mtime(&file, mode, mtime_ns)
            .map_err(|(op, e)| root.err(op, rel.as_str(), e))?;
        if fsync {
            file.sync_all().map_err(err(Op::Sync))?;
        }
        rename_into_place(root.path(), rel, &dir, &tmp, name, clobber)?;
        if fsync {
            open_dir_fd(&dir, ".")
                .and_then(|d| d.sync_all())
                .map_err(err(Op::Sync))?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = dir.remove_file(&tmp);
    }
    result
}
