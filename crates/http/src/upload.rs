//! A file arriving over HTTP (a `PUT`, or the bytes of a pulled copy): written to a
//! temporary file next to its final name while its digests are computed, renamed over
//! the final name only once complete; on any failure, or when dropped before
//! [`Upload::commit`], the temporary file is removed and nothing is under the final
//! name.

use crate::digest::{self, Digests, Running};
use crate::error::Fail;
use cap_std::fs::{Dir, OpenOptions};
use hyper::StatusCode;
use sluice_engine::fs::Root;
use sluice_wire::RelPath;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;

/// Longest part of the final name kept in the temporary file's name.
const NAME_IN_TEMP: usize = 160;

/// A file being received.
#[derive(Debug)]
pub struct Upload {
    dir: Arc<Dir>,
    name: String,
    tmp: String,
    shown: String,
    file: Option<tokio::fs::File>,
    running: Running,
    written: u64,
    committed: bool,
}

/// What a completed upload did.
#[derive(Debug, Clone, Copy)]
pub struct Committed {
    /// The file's digests.
    pub digests: Digests,
    /// Its size.
    pub bytes: u64,
    /// Whether it replaced a file (204) or is new (201).
    pub replaced: bool,
}

fn blocking_failed(e: tokio::task::JoinError) -> Fail {
    Fail::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("a file operation did not finish: {e}"),
    )
}

impl Upload {
    /// Starts receiving `rel` under `root`: its directory must exist (409 otherwise) and
    /// it must not be a directory (405).
    ///
    /// # Errors
    /// As above, or the temporary file cannot be created.
    pub async fn begin(root: Arc<Root>, rel: RelPath) -> Result<Upload, Fail> {
        tokio::task::spawn_blocking(move || Upload::begin_blocking(&root, &rel))
            .await
            .map_err(blocking_failed)?
    }

    fn begin_blocking(root: &Root, rel: &RelPath) -> Result<Upload, Fail> {
        let shown = format!("/{}", rel.as_str());
        let parent = rel.parent();
        let dir = root.open_dir(parent.as_ref()).map_err(|e| {
            let f = Fail::from(e);
            if f.status == StatusCode::NOT_FOUND || f.status == StatusCode::CONFLICT {
                Fail::new(
                    StatusCode::CONFLICT,
                    format!("{shown}: its directory does not exist (MKCOL it first)"),
                )
            } else {
                f
            }
        })?;
        let name = rel.file_name().to_owned();
        if dir.symlink_metadata(&name).is_ok_and(|m| m.is_dir()) {
            return Err(Fail::new(
                StatusCode::METHOD_NOT_ALLOWED,
                format!("{shown} is a directory"),
            ));
        }
        let mut cut = NAME_IN_TEMP.min(name.len());
        while !name.is_char_boundary(cut) {
            cut -= 1;
        }
        let mut rnd = [0u8; 6];
        getrandom::fill(&mut rnd)
            .map_err(|e| Fail::new(StatusCode::INTERNAL_SERVER_ERROR, format!("random: {e}")))?;
        let suffix: String = rnd.iter().map(|b| format!("{b:02x}")).collect();
        let tmp = format!(".{}.sluice-http-{suffix}", &name[..cut]);
        let mut opts = OpenOptions::new();
        opts.write(true).create_new(true);
        cap_std::fs::OpenOptionsExt::mode(&mut opts, 0o644);
        let file = dir
            .open_with(&tmp, &opts)
            .map_err(|e| Fail::io("creating", rel.as_str(), &e))?;
        Ok(Upload {
            dir: Arc::new(dir),
            name,
            tmp,
            shown,
            file: Some(tokio::fs::File::from_std(file.into_std())),
            running: Running::new(),
            written: 0,
            committed: false,
        })
    }

    /// The digests of the bytes written so far.
    pub fn digests(&self) -> Digests {
        self.running.clone().finish()
    }

    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Appends `bytes`.
    ///
    /// # Errors
    /// The write failed (a full disk is 507).
    pub async fn write(&mut self, bytes: &[u8]) -> Result<(), Fail> {
        let Some(f) = self.file.as_mut() else {
            return Err(Fail::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the upload is closed",
            ));
        };
        f.write_all(bytes)
            .await
            .map_err(|e| Fail::io("writing", &self.shown[1..], &e))?;
        self.running.update(bytes);
        self.written += bytes.len() as u64;
        Ok(())
    }

    /// Completes the file: flushed, its digests kept with it, renamed over the final
    /// name.
    ///
    /// # Errors
    /// The flush or the rename failed (the temporary file is removed).
    pub async fn commit(mut self) -> Result<Committed, Fail> {
        let Some(mut f) = self.file.take() else {
            return Err(Fail::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the upload is closed",
            ));
        };
        f.flush()
            .await
            .map_err(|e| Fail::io("writing", &self.shown[1..], &e))?;
        let std_file = f.into_std().await;
        let digests = std::mem::take(&mut self.running).finish();
        let (dir, tmp, name, shown) = (
            Arc::clone(&self.dir),
            self.tmp.clone(),
            self.name.clone(),
            self.shown.clone(),
        );
        let replaced = tokio::task::spawn_blocking(move || {
            digest::keep(&std_file, &digests);
            drop(std_file);
            let replaced = dir.symlink_metadata(&name).is_ok();
            dir.rename(&tmp, &dir, &name)
                .map(|()| replaced)
                .map_err(|e| Fail::io("renaming into", &shown[1..], &e))
        })
        .await
        .map_err(blocking_failed)??;
        self.committed = true;
        Ok(Committed {
            digests,
            bytes: self.written,
            replaced,
        })
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        if !self.committed {
            drop(self.file.take());
            if let Err(e) = self.dir.remove_file(&self.tmp) {
                tracing::warn!("cannot remove the incomplete {}: {e}", self.tmp);
            }
        }
    }
}
