//! A server's TLS identity: its certificate chain and private key, from PEM files
//! (`--cert`/`--key`, e.g. from an ACME or site CA) or a self-signed certificate created
//! on first start in a state directory and reused afterwards.

use super::fingerprint::Fingerprint;
use crate::error::EngineError;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls_pki_types::pem::PemObject;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The file in the state directory holding the self-signed certificate and its key.
pub const IDENTITY_FILE: &str = "identity.pem";

/// A certificate chain (leaf first) and its private key.
#[derive(Debug)]
pub struct Identity {
    /// The chain, leaf first.
    pub(crate) certs: Vec<CertificateDer<'static>>,
    /// The leaf's key.
    pub(crate) key: PrivateKeyDer<'static>,
}

fn config_error(what: &Path, flag: &str, e: impl std::fmt::Display) -> EngineError {
    EngineError::Config(format!("{flag} {}: {e}", what.display()))
}

impl Identity {
    /// Reads a PEM certificate chain and a PEM private key.
    ///
    /// # Errors
    /// A file cannot be read or holds no certificate / key (the line names it).
    pub fn from_pem_files(cert: &Path, key: &Path) -> Result<Identity, EngineError> {
        let certs = CertificateDer::pem_file_iter(cert)
            .map_err(|e| config_error(cert, "--cert", e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| config_error(cert, "--cert", e))?;
        if certs.is_empty() {
            return Err(config_error(cert, "--cert", "no PEM certificate in it"));
        }
        let key = PrivateKeyDer::from_pem_file(key).map_err(|e| config_error(key, "--key", e))?;
        Ok(Identity { certs, key })
    }

    /// The identity kept in `state_dir` ([`IDENTITY_FILE`]), created there (a new
    /// ECDSA P-256 key and a self-signed certificate for `names`) when missing. The
    /// file is written atomically with mode 0600. Where it cannot be written (a
    /// read-only file system), the new identity serves this run only, with a warning:
    /// clients that pinned it will see a changed certificate after a restart.
    ///
    /// # Errors
    /// The file exists but cannot be read or holds no certificate and key.
    pub fn load_or_create(state_dir: &Path, names: &[String]) -> Result<Identity, EngineError> {
        let file = state_dir.join(IDENTITY_FILE);
        if file.exists() {
            return Identity::from_pem_files(&file, &file);
        }
        let (pem, identity) = self_signed_pem(names)?;
        let kept = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(state_dir)
            .and_then(|()| write_private(&file, pem.as_bytes()));
        match kept {
            // Read back: a daemon started at the same moment may have renamed its own.
            Ok(()) => Identity::from_pem_files(&file, &file),
            Err(e) => {
                tracing::warn!(
                    "cannot keep the TLS identity in {}: {e}; this run's certificate is new and changes at the next start",
                    file.display()
                );
                Ok(identity)
            }
        }
    }

    /// A self-signed identity held in memory only (a one-shot server).
    ///
    /// # Errors
    /// Key generation failed.
    pub fn ephemeral(names: &[String]) -> Result<Identity, EngineError> {
        let (_, identity) = self_signed_pem(names)?;
        Ok(identity)
    }

    /// The leaf certificate's fingerprint.
    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint::of(self.certs[0].as_ref())
    }
}

/// A new key and self-signed certificate for `names`: as one PEM text (certificate,
/// then key) and as an identity.
fn self_signed_pem(names: &[String]) -> Result<(String, Identity), EngineError> {
    let names: Vec<String> = if names.is_empty() {
        vec!["localhost".into()]
    } else {
        names.to_vec()
    };
    let made = rcgen::generate_simple_self_signed(names)
        .map_err(|e| EngineError::Config(format!("creating a TLS certificate: {e}")))?;
    let pem = format!("{}{}", made.cert.pem(), made.signing_key.serialize_pem());
    let key = PrivateKeyDer::try_from(made.signing_key.serialize_der())
        .map_err(|e| EngineError::Config(format!("creating a TLS key: {e}")))?;
    let identity = Identity {
        certs: vec![made.cert.der().clone()],
        key,
    };
    Ok((pem, identity))
}

/// Writes `bytes` to `path` through a temporary file (mode 0600) renamed into place.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// The state directory by default: `$SLUICE_STATE_DIR`, else `$XDG_STATE_HOME/sluice`,
/// else `$HOME/.local/state/sluice`.
pub fn default_state_dir() -> Option<PathBuf> {
    env_path("SLUICE_STATE_DIR")
        .or_else(|| env_path("XDG_STATE_HOME").map(|p| p.join("sluice")))
        .or_else(|| env_path("HOME").map(|p| p.join(".local/state/sluice")))
}

pub(crate) fn env_path(var: &str) -> Option<PathBuf> {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// This host's name, for the self-signed certificate.
pub fn host_name() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}
