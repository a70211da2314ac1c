//! The daemon `sluice doctor` judges the host for: its flags, else the keys of the
//! daemon's configuration file (`--config /etc/sluice/sluice.toml`), else the defaults
//! of `sluice serve`.

use super::DoctorArgs;
use crate::config::file::{ConfigFile, Value};
use crate::exit::bad_input;
use anyhow::Result;
use std::path::PathBuf;

/// The daemon's settings that decide what the host must provide.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Daemon {
    /// Data connections per transfer (`streams`).
    pub streams: u32,
    /// Buffer memory, as written (`buffer-mem`: a size or auto).
    pub buffer_mem: String,
    /// The served root (`root`).
    pub root: PathBuf,
    /// The data NICs (`nic`); empty: every NIC that is up.
    pub nics: Vec<String>,
}

/// The settings from `args`, then `args.config`'s keys, then serve's defaults.
///
/// # Errors
/// The file cannot be read or parsed, or one of these keys has the wrong type (bad
/// input naming the file, line and key).
pub fn resolve(args: &DoctorArgs) -> Result<Daemon> {
    let file = match &args.config {
        Some(path) => Some(ConfigFile::read(path).map_err(bad_input)?),
        None => None,
    };
    let key = |name: &str| file.as_ref().and_then(|f| f.get(name).map(|e| (f, e)));
    let text = |name: &str| -> Result<Option<String>> {
        match key(name) {
            None => Ok(None),
            Some((_, e)) => match &e.value {
                Value::Str(s) | Value::Int(s) => Ok(Some(s.clone())),
                other => Err(wrong(file.as_ref(), e.line, name, "a string", other)),
            },
        }
    };
    let streams = match (args.streams, text("streams")?) {
        (Some(n), _) => n,
        (None, Some(s)) => s
            .parse()
            .ok()
            .filter(|n| (1..=256).contains(n))
            .ok_or_else(|| {
                let line = key("streams").map_or(0, |(_, e)| e.line);
                let path = file
                    .as_ref()
                    .map(|f| f.path.display().to_string())
                    .unwrap_or_default();
                bad_input(format!(
                    "{path}:{line}: streams: expected an integer from 1 to 256"
                ))
            })?,
        (None, None) => DEFAULT_STREAMS,
    };
    let nics = match (&args.nics[..], key("nic")) {
        ([], Some((_, e))) => match &e.value {
            Value::List(names) => names.clone(),
            other => {
                return Err(wrong(
                    file.as_ref(),
                    e.line,
                    "nic",
                    "an array of strings",
                    other,
                ))
            }
        },
        (given, _) => given.to_vec(),
    };
    Ok(Daemon {
        streams,
        buffer_mem: args
            .buffer_mem
            .clone()
            .or(text("buffer-mem")?)
            .unwrap_or_else(|| crate::plan_cmd::DEFAULT_BUFFER_MEM.to_string()),
        root: args
            .root
            .clone()
            .or(text("root")?.map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from("/")),
        nics,
    })
}

/// `sluice serve --streams`'s default.
const DEFAULT_STREAMS: u32 = 2;

fn wrong(
    file: Option<&ConfigFile>,
    line: usize,
    key: &str,
    want: &str,
    got: &Value,
) -> anyhow::Error {
    let path = file
        .map(|f| f.path.display().to_string())
        .unwrap_or_default();
    bad_input(format!(
        "{path}:{line}: {key}: expected {want}, found {}",
        got.kind()
    ))
}
