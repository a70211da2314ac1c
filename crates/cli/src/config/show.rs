//! The effective settings of `sluice serve --check`: every key, its value and where the
//! value came from, written as the TOML it could be in the file.

use super::Loaded;
use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, Command};

/// One key's effective value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    /// The key.
    pub key: String,
    /// Its value as TOML, `None` when unset.
    pub value: Option<String>,
    /// `file:LINE`, `command line`, `environment` or `default`.
    pub from: String,
}

/// Every key of `serve` with its value in `m`.
pub fn effective(serve: &Command, m: &ArgMatches, loaded: &Loaded) -> Vec<Setting> {
    super::keys::all(serve)
        .into_iter()
        .filter(|k| *k != super::keys::ACCOUNT)
        .filter_map(|k| super::keys::arg(serve, k))
        .map(|a| {
            let id = a.get_id().as_str();
            let key = a.get_long().unwrap_or(id).to_string();
            let line = loaded
                .applied
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, l)| *l);
            let from = match (line, m.value_source(id)) {
                (Some(l), _) => format!("file:{l}"),
                (None, Some(ValueSource::CommandLine)) => "command line".into(),
                (None, Some(ValueSource::EnvVariable)) => "environment".into(),
                (None, _) => "default".into(),
            };
            let raw: Option<Vec<String>> = m
                .get_raw(id)
                .map(|vs| vs.map(|v| v.to_string_lossy().into_owned()).collect());
            let list = matches!(a.get_action(), ArgAction::Append);
            Setting {
                key,
                value: raw.map(|v| toml_value(&v, list)),
                from,
            }
        })
        .collect()
}

fn toml_value(v: &[String], list: bool) -> String {
    let one = |s: &String| {
        if s == "true" || s == "false" || (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())) {
            s.clone()
        } else {
            format!("{s:?}")
        }
    };
    match v {
        [single] if !list => one(single),
        many => format!(
            "[{}]",
            many.iter()
                .map(|s| format!("{s:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The settings as lines of TOML, each with where it came from.
pub fn render(settings: &[Setting], inline_accounts: bool) -> String {
    let mut out = String::new();
    for s in settings {
        let line = match &s.value {
            Some(v) if s.key == "accounts" && inline_accounts => {
                format!("# accounts: the [[account]] tables of {v}")
            }
            Some(v) => format!("{} = {v}", s.key),
            None => format!("# {} (not set)", s.key),
        };
        out.push_str(&format!("{line:<48} # {}\n", s.from));
    }
    out
}
