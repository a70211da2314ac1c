//! The options a Python caller gives, turned into what the engine takes: a plan and its
//! runtime (`policy`, `streams`, `chunk_size`, `buffer_mem`, as `sluice plan` takes
//! them), the shared secret and the TLS settings, with the CLI's defaults.

use crate::errors::usage;
use pyo3::prelude::*;
use sluice_engine::codec::Planner;
use sluice_engine::net::tls::{
    default_known_hosts, default_state_dir, host_name, ClientTls, Encrypt, Identity, ServerTls,
    Trust,
};
use sluice_engine::{Populate, Runtime};
use sluice_placement::{plan, Job, Policy, Role};
use sluice_topology::{discover, TopologySource};
use sluice_wire::Token;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

/// Streams (data connections) at most, as the CLI allows.
pub const STREAMS_MAX: u32 = 256;

/// Which end of a transfer a plan is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Reads and sends.
    Send,
    /// Receives and writes.
    Recv,
}

/// What the plan of one end is made of (the CLI's `JobArgs`).
#[derive(Debug, Clone)]
pub struct JobSpec {
    /// `auto`, `os`, `bind`, `smts`, `nmts` or `mts`.
    pub policy: String,
    /// Data connections.
    pub streams: u32,
    /// io-read or io-write threads (files only).
    pub io_threads: u32,
    /// Reads in flight per io-read thread.
    pub read_depth: u32,
    /// Slot size in bytes.
    pub chunk_bytes: u64,
    /// Buffer memory in bytes; `None`: sized from the threads (`--buffer-mem auto`).
    pub buffer_bytes: Option<u64>,
    /// Who decides the codec threads.
    pub planner: Planner,
}

/// A size given as an int (bytes) or a string such as `"16MiB"`; `what` names the
/// argument in the message.
pub fn size_arg(what: &str, value: &Bound<'_, PyAny>) -> PyResult<u64> {
    if let Ok(n) = value.extract::<u64>() {
        return Ok(n);
    }
    let text: String = value.extract().map_err(|_| {
        usage(format!(
            "{what} must be a number of bytes or a size such as \"16MiB\""
        ))
    })?;
    parse_size::Config::new()
        .with_binary()
        .parse_size(&text)
        .map_err(|e| {
            usage(format!(
                "{what} {text:?} is not a size: {e} (expected e.g. 4MiB, 1GiB, 65536)"
            ))
        })
}

/// `buffer_mem`: `"auto"` or a size.
pub fn buffer_arg(value: &Bound<'_, PyAny>) -> PyResult<Option<u64>> {
    match value.extract::<String>() {
        Ok(s) if s.trim() == "auto" => Ok(None),
        _ => size_arg("buffer_mem", value).map(Some),
    }
}

impl JobSpec {
    /// The threads of each role one end runs (`JobArgs::thread_counts`).
    fn threads(&self, side: Side) -> Vec<(Role, u32)> {
        let (compress, decompress) =
            self.planner
                .codec_threads(self.io_threads, self.streams, (None, None));
        let mut threads = vec![(Role::Control, 1)];
        match side {
            Side::Send => {
                threads.push((Role::NetSend, self.streams));
                threads.push((Role::IoRead, self.io_threads));
                threads.push((Role::Compress, compress));
            }
            Side::Recv => {
                threads.push((Role::NetRecv, self.streams));
                threads.push((Role::IoWrite, self.io_threads));
                threads.push((Role::Decompress, decompress));
            }
        }
        threads.retain(|(_, n)| *n > 0);
        threads
    }

    /// Plans this machine for `side` and allocates the plan's buffer pools, populated
    /// as `populate` says: at once for a stream's `Sender` and `Receiver`, which cycle
    /// through their whole pool for as long as they live; on demand for a `copy`, one
    /// job that may touch two slots of twenty (ARCHITECTURE's "a daemon prefaults").
    pub fn runtime(&self, side: Side, populate: Populate) -> PyResult<Arc<Runtime>> {
        if self.streams == 0 || self.streams > STREAMS_MAX {
            return Err(usage(format!(
                "streams={} is out of range: expected 1 to {STREAMS_MAX}",
                self.streams
            )));
        }
        let policy: Policy = self
            .policy
            .parse()
            .map_err(|e| usage(format!("policy={:?}: {e}", self.policy)))?;
        let threads = self.threads(side);
        let buffer_bytes = self.buffer_bytes.unwrap_or_else(|| {
            sluice_engine::options::auto_buffer_bytes(&threads, self.chunk_bytes, self.read_depth)
        });
        let job = Job {
            threads,
            nics: Vec::new(),
            storage: Vec::new(),
            buffer_bytes,
            chunk_bytes: self.chunk_bytes,
            reserved_cpus: Vec::new(),
            placements: Vec::new(),
        };
        let source: TopologySource = "this".parse().map_err(usage)?;
        let machine = discover(&source).map_err(usage)?;
        let plan = plan(&machine, &job, policy).map_err(usage)?;
        let runtime = Runtime::new(plan, populate).map_err(crate::errors::engine)?;
        Ok(Arc::new(runtime))
    }
}

/// The shared secret: `token` (bytes or str) or the contents of `token_file` (one
/// trailing newline dropped, as `--token-file` reads it).
pub fn token_arg(
    token: Option<&Bound<'_, PyAny>>,
    file: Option<PathBuf>,
) -> PyResult<Option<Token>> {
    let bytes: Option<Vec<u8>> = match (token, file) {
        (Some(_), Some(_)) => {
            return Err(usage("give token or token_file, not both"));
        }
        (Some(t), None) => Some(match t.extract::<String>() {
            Ok(s) => s.into_bytes(),
            Err(_) => t
                .extract::<Vec<u8>>()
                .map_err(|_| usage("token must be str or bytes"))?,
        }),
        (None, Some(path)) => {
            let bytes = std::fs::read(&path).map_err(|e| {
                usage(format!(
                    "token_file {}: cannot read it: {e}",
                    path.display()
                ))
            })?;
            Some(bytes.strip_suffix(b"\n").unwrap_or(&bytes).to_vec())
        }
        (None, None) => None,
    };
    bytes
        .map(|b| Token::new(b).map_err(|e| usage(format!("token: {e}"))))
        .transpose()
}

/// `encrypt`: `"auto"` (TLS unless the peer is on loopback), `"always"` or `"never"`.
pub fn encrypt_arg(value: &str) -> PyResult<Encrypt> {
    match value {
        "auto" => Ok(Encrypt::Auto),
        "always" => Ok(Encrypt::Always),
        "never" => Ok(Encrypt::Never),
        other => Err(usage(format!(
            "encrypt={other:?}: expected \"auto\", \"always\" or \"never\""
        ))),
    }
}

/// The client's TLS: `encrypt`, and trust by a CA file or by known hosts (`sluice cp`'s
/// `--ca`, `--known-hosts`, `--strict-host-key`).
pub fn client_tls(
    encrypt: &str,
    ca: Option<PathBuf>,
    known_hosts: Option<PathBuf>,
    strict_host_key: bool,
) -> PyResult<ClientTls> {
    let trust = match ca {
        Some(ca) if !ca.is_file() => {
            return Err(usage(format!("ca {}: not a readable file", ca.display())))
        }
        Some(_) if known_hosts.is_some() || strict_host_key => {
            return Err(usage(
                "ca cannot be combined with known_hosts or strict_host_key",
            ))
        }
        Some(ca) => Trust::Ca(ca),
        None => Trust::KnownHosts {
            file: known_hosts.or_else(default_known_hosts),
            strict: strict_host_key,
        },
    };
    Ok(ClientTls {
        encrypt: encrypt_arg(encrypt)?,
        trust,
    })
}

/// The receiver's TLS identity: `cert` and `key`, or the one kept in `state_dir` (the
/// default state directory), as `sluice stream recv` makes it.
pub fn server_tls(
    listen: SocketAddr,
    encrypt: &str,
    cert_key: Option<(PathBuf, PathBuf)>,
    state_dir: Option<PathBuf>,
) -> PyResult<ServerTls> {
    let encrypt = encrypt_arg(encrypt)?;
    let identity = match cert_key {
        Some((cert, key)) => Identity::from_pem_files(&cert, &key),
        None => {
            let mut names: Vec<String> = host_name().into_iter().collect();
            if !listen.ip().is_unspecified() {
                names.push(listen.ip().to_string());
            }
            match state_dir.or_else(default_state_dir) {
                Some(dir) => Identity::load_or_create(&dir, &names),
                None => Identity::ephemeral(&names),
            }
        }
    }
    .map_err(usage)?;
    ServerTls::new(&identity, encrypt).map_err(usage)
}
