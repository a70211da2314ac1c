//! SIGHUP with `--config`: re-read the file, put in force what can change live (the log
//! filter; the accounts and their tokens are re-read by the engine) and say in the log
//! which changed keys need a restart.

use super::file::{ConfigFile, Entry};
use super::Loaded;
use std::sync::Mutex;

/// Keys a SIGHUP applies without a restart.
const LIVE: [&str; 2] = ["log", super::keys::ACCOUNT];

/// The configuration file as last applied, and what a SIGHUP does with its new text.
#[derive(Debug)]
pub struct Reloader {
    loaded: Loaded,
    /// The file's entries in force (the last that loaded).
    current: Mutex<Vec<Entry>>,
}

/// What a reload found: keys applied live, keys that need a restart.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Changed keys now in force.
    pub reloaded: Vec<String>,
    /// Changed keys that keep their old value until a restart.
    pub restart: Vec<String>,
}

impl Reloader {
    /// A reloader for the file `loaded` came from.
    pub fn new(loaded: Loaded) -> Reloader {
        let current = Mutex::new(loaded.file.entries.clone());
        Reloader { loaded, current }
    }

    /// Re-reads the file and logs the outcome (one line), or why the settings in force
    /// stay.
    pub fn reload(&self) {
        let path = self.loaded.file.path.display();
        match ConfigFile::read(&self.loaded.file.path) {
            Ok(fresh) => {
                let outcome = self.apply(&fresh.entries);
                tracing::warn!("SIGHUP: {path}: {}", outcome.describe());
            }
            Err(e) => tracing::error!("SIGHUP: {e}; keeping the settings in force"),
        }
    }

    /// Puts `fresh`'s live keys in force and sorts the changed keys.
    fn apply(&self, fresh: &[Entry]) -> Outcome {
        let mut current = self
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut out = Outcome::default();
        for key in changed(&current, fresh) {
            let overridden = self.loaded.from_command_line.contains(&key)
                || (self.loaded.file.get(&key).is_some()
                    && !self.loaded.applied.iter().any(|(k, _)| *k == key));
            if overridden {
                continue;
            }
            if !LIVE.contains(&key.as_str()) {
                out.restart.push(key);
                continue;
            }
            if key == "log" {
                let spec = log_spec(fresh);
                if let Err(e) = crate::logging::set_filter(&spec) {
                    tracing::error!("SIGHUP: {e}; keeping the log filter in force");
                    continue;
                }
            }
            out.reloaded.push(key);
        }
        *current = fresh.to_vec();
        out
    }
}

impl Outcome {
    /// One line for the log.
    pub fn describe(&self) -> String {
        let list = |v: &[String]| {
            if v.is_empty() {
                "nothing".into()
            } else {
                v.join(", ")
            }
        };
        format!(
            "reloaded: {} (accounts and their tokens are re-read on every SIGHUP); needs a restart: {}",
            list(&self.reloaded),
            list(&self.restart)
        )
    }
}

/// The log filter `entries` ask for (`warn`, the default, when none).
fn log_spec(entries: &[Entry]) -> String {
    match entries.iter().find(|e| e.key == "log").map(|e| &e.value) {
        Some(super::file::Value::Str(s)) => s.clone(),
        _ => "warn".into(),
    }
}

/// Keys added, removed or given another value.
fn changed(old: &[Entry], new: &[Entry]) -> Vec<String> {
    let value = |list: &[Entry], k: &str| list.iter().find(|e| e.key == k).map(|e| e.value.clone());
    let mut keys: Vec<String> = old.iter().chain(new).map(|e| e.key.clone()).collect();
    keys.sort();
    keys.dedup();
    keys.retain(|k| value(old, k) != value(new, k));
    keys
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::file::parse;

    fn reloader(text: &str) -> Reloader {
        let entries = parse(text).unwrap();
        let applied = entries.iter().map(|e| (e.key.clone(), e.line)).collect();
        Reloader::new(Loaded {
            file: ConfigFile {
                path: "/x.toml".into(),
                entries,
            },
            applied,
            inline_accounts: false,
            from_command_line: Vec::new(),
            effective: Vec::new(),
        })
    }

    #[test]
    fn changed_keys_are_sorted_into_live_and_restart() {
        let r = reloader("listen = \"127.0.0.1:1\"\nmax-sessions = 4\n");
        let fresh =
            parse("listen = \"127.0.0.1:2\"\nmax-sessions = 4\nidle-timeout = 5\n").unwrap();
        let out = r.apply(&fresh);
        assert_eq!(out.reloaded, Vec::<String>::new());
        assert_eq!(out.restart, ["idle-timeout", "listen"]);
        // Applying the same text again changes nothing.
        assert_eq!(r.apply(&fresh), Outcome::default());
    }

    #[test]
    fn accounts_are_live() {
        let r = reloader("[[account]]\nname = \"a\"\n");
        let out = r.apply(&parse("[[account]]\nname = \"b\"\n").unwrap());
        assert!(out.restart.is_empty(), "{out:?}");
    }

    #[test]
    fn a_key_the_command_line_overrides_is_not_reported() {
        let entries = parse("listen = \"127.0.0.1:1\"\n").unwrap();
        let r = Reloader::new(Loaded {
            file: ConfigFile {
                path: "/x.toml".into(),
                entries,
            },
            applied: Vec::new(),
            inline_accounts: false,
            from_command_line: Vec::new(),
            effective: Vec::new(),
        });
        assert_eq!(
            r.apply(&parse("listen = \"127.0.0.1:2\"\n").unwrap()),
            Outcome::default()
        );
    }
}
