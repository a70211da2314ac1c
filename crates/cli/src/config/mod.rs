//! `sluice serve --config FILE`: a TOML file whose keys are `serve`'s long flags.
//!
//! The file is turned into the flags it stands for and parsed with the command line,
//! so the file accepts exactly what the command line accepts:
//!
//! 1. a first pass over the command line finds `--config` and which flags it gives;
//! 2. each key of the file is checked (a known flag, the right TOML type, a value the
//!    flag's own parser takes) and becomes `--key=value`, unless the command line gives
//!    that flag (or one that conflicts with it): flags override the file;
//! 3. inline `[[account]]` tables make the file its own accounts file;
//! 4. the merged command line is parsed as usual.
//!
//! Every error is one line naming the file, the line, the key and what was expected.

pub mod file;
pub mod keys;
pub mod reload;
mod show;

use crate::exit::bad_input;
use clap::parser::ValueSource;
use clap::{ArgMatches, Command};
use file::{ConfigFile, Value};
use std::ffi::OsString;
use std::path::PathBuf;

/// A configuration file as it was applied to the command line.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The file.
    pub file: ConfigFile,
    /// The keys whose values were taken from the file, with their lines.
    pub applied: Vec<(String, usize)>,
    /// The file's `[[account]]` tables are the daemon's accounts.
    pub inline_accounts: bool,
    /// The keys the command line (or the environment) gives: the file's never apply.
    pub from_command_line: Vec<String>,
    /// Every key's effective value and where it came from (for `--check`).
    pub effective: Vec<show::Setting>,
}

/// Parses the command line into `T`, merging in `serve --config FILE`'s keys.
///
/// # Errors
/// The file cannot be read, or a key is unknown, of the wrong type or refused by its
/// flag (bad input, one line).
pub fn parse<T: clap::Parser>(argv: Vec<OsString>) -> anyhow::Result<(T, Option<Loaded>)> {
    let mut cmd = T::command();
    cmd.build();
    let Some(path) = config_path(&cmd, &argv) else {
        return Ok((T::parse_from(argv), None));
    };
    let first = cmd
        .clone()
        .ignore_errors(true)
        .try_get_matches_from(&argv)
        .map_err(|e| bad_input(e.to_string().lines().next().unwrap_or_default().to_string()))?;
    let on_line = first
        .subcommand_matches("serve")
        .cloned()
        .unwrap_or_default();
    let file = ConfigFile::read(&path).map_err(bad_input)?;
    let serve = cmd.find_subcommand("serve").cloned().unwrap_or_default();
    let (extra, applied, inline_accounts) =
        file_args(&serve, &on_line, &file).map_err(bad_input)?;
    let merged: Vec<OsString> = argv
        .into_iter()
        .chain(extra.into_iter().map(OsString::from))
        .collect();
    let matches = match cmd.try_get_matches_from_mut(merged) {
        Ok(m) => m,
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or_default();
            let reason = first.strip_prefix("error: ").unwrap_or(first);
            return Err(bad_input(format!("{}: {reason}", file.path.display())));
        }
    };
    let value = T::from_arg_matches(&matches).map_err(|e| bad_input(e.to_string()))?;
    let from_command_line = serve
        .get_arguments()
        .filter(|a| given(&on_line, a.get_id().as_str()))
        .filter_map(|a| a.get_long().map(str::to_string))
        .collect();
    let mut loaded = Loaded {
        file,
        applied,
        inline_accounts,
        from_command_line,
        effective: Vec::new(),
    };
    if let Some(sm) = matches.subcommand_matches("serve") {
        loaded.effective = show::effective(&serve, sm, &loaded);
    }
    Ok((value, Some(loaded)))
}

/// The `--config` of a `serve` command line, if any (a quick look: clap's own pass
/// follows).
fn config_path(cmd: &Command, argv: &[OsString]) -> Option<PathBuf> {
    let m = cmd
        .clone()
        .ignore_errors(true)
        .try_get_matches_from(argv)
        .ok()?;
    m.subcommand_matches("serve")?
        .get_one::<PathBuf>("config")
        .cloned()
}

/// Whether the command line (or its environment variable) gives `id`.
fn given(m: &ArgMatches, id: &str) -> bool {
    matches!(
        m.value_source(id),
        Some(ValueSource::CommandLine | ValueSource::EnvVariable)
    )
}

type FileArgs = (Vec<String>, Vec<(String, usize)>, bool);

/// `file:LINE: key: msg`.
fn at(file: &ConfigFile, line: usize, key: &str, msg: &str) -> String {
    format!("{}:{line}: {key}: {msg}", file.path.display())
}

/// The flags the file stands for, minus those the command line overrides.
fn file_args(serve: &Command, cli: &ArgMatches, file: &ConfigFile) -> Result<FileArgs, String> {
    let mut extra = Vec::new();
    let mut applied = Vec::new();
    // A flag the command line gives, or one that conflicts with a flag it gives (either
    // way round), stays out.
    let on_line: Vec<&clap::Arg> = serve
        .get_arguments()
        .filter(|g| given(cli, g.get_id().as_str()))
        .collect();
    let conflict = |a: &clap::Arg, b: &clap::Arg| {
        let ids = serve.get_arg_conflicts_with(a);
        ids.iter().any(|c| c.get_id() == b.get_id())
    };
    let overridden = |a: &clap::Arg| {
        on_line
            .iter()
            .any(|g| g.get_id() == a.get_id() || conflict(a, g) || conflict(g, a))
    };
    for e in file.entries.iter().filter(|e| e.key != keys::ACCOUNT) {
        let Some(a) = keys::arg(serve, &e.key) else {
            let known = keys::all(serve).join(", ");
            let msg = format!("unknown key (expected one of: {known})");
            return Err(at(file, e.line, &e.key, &msg));
        };
        let args = keys::to_args(a, e).map_err(|m| at(file, e.line, &e.key, &m))?;
        keys::check_value(serve, a, &args).map_err(|m| at(file, e.line, &e.key, &m))?;
        if !overridden(a) {
            extra.extend(args);
            applied.push((e.key.clone(), e.line));
        }
    }
    let accounts = keys::arg(serve, "accounts").ok_or("no --accounts flag")?;
    let inline = inline_accounts(file)? && !overridden(accounts);
    if let (true, Some(e)) = (inline, file.get(keys::ACCOUNT)) {
        extra.push(format!("--accounts={}", file.path.display()));
        applied.push((e.key.clone(), e.line));
    }
    Ok((extra, applied, inline))
}

/// Whether the file holds `[[account]]` tables (and not `accounts = FILE` too).
fn inline_accounts(file: &ConfigFile) -> Result<bool, String> {
    let Some(e) = file.get(keys::ACCOUNT) else {
        return Ok(false);
    };
    if e.value != Value::Tables {
        let msg = format!("expected [[account]] tables, got {}", e.value.kind());
        return Err(at(file, e.line, &e.key, &msg));
    }
    if let Some(other) = file.get("accounts") {
        let msg = "give accounts = FILE or [[account]] tables, not both";
        return Err(at(file, other.line, "accounts", msg));
    }
    Ok(true)
}

/// The effective settings of `loaded`, as TOML lines with where each came from.
pub fn show_settings(loaded: &Loaded) -> String {
    show::render(&loaded.effective, loaded.inline_accounts)
}

impl Loaded {
    /// `message` with the file, line and key in front when it names a flag whose value
    /// came from the file (`--root /x: not a directory`).
    pub fn attribute(&self, message: &str) -> Option<String> {
        let (key, line) = self.applied.iter().find(|(k, _)| names_flag(message, k))?;
        Some(format!(
            "{}:{line}: {key}: {message}",
            self.file.path.display()
        ))
    }
}

/// Whether `message` names `--key` (as a whole flag, not a prefix of a longer one).
fn names_flag(message: &str, key: &str) -> bool {
    let flag = format!("--{key}");
    message.match_indices(&flag).any(|(i, _)| {
        let next = message[i + flag.len()..].chars().next();
        !next.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-')
    })
}

#[cfg(test)]
mod tests;
