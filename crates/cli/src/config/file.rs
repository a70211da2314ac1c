//! Reading the configuration file: TOML, each top-level key with the line it is on.
//!
//! No key is interpreted here (that is [`super::keys`]); this module only turns the text
//! into `(key, line, value)` entries and says where a syntax error is.

use sluice_engine::accounts::file::read_bounded;
use std::path::{Path, PathBuf};
use toml::de::{DeTable, DeValue};

/// A top-level value as the keys need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// `true` / `false`.
    Bool(bool),
    /// An integer, as written in decimal.
    Int(String),
    /// A string.
    Str(String),
    /// An array of strings (or integers, as their text).
    List(Vec<String>),
    /// The `[[account]]` tables (checked by the accounts loader, not here).
    Tables,
    /// Anything else: its TOML type name, for the error.
    Other(&'static str),
}

impl Value {
    /// The value's TOML type, as an error says what it got.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Bool(_) => "a boolean",
            Value::Int(_) => "an integer",
            Value::Str(_) => "a string",
            Value::List(_) => "an array",
            Value::Tables => "tables",
            Value::Other(k) => k,
        }
    }
}

/// One top-level key of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The key as written (`max-sessions`).
    pub key: String,
    /// Its 1-based line.
    pub line: usize,
    /// Its value.
    pub value: Value,
}

/// The file, read and parsed.
#[derive(Debug, Clone)]
pub struct ConfigFile {
    /// Where it was read from (absolute when it could be made so).
    pub path: PathBuf,
    /// Its top-level keys in the order written.
    pub entries: Vec<Entry>,
}

impl ConfigFile {
    /// Reads and parses `path`.
    ///
    /// # Errors
    /// One line: the file and what is wrong (with the line for a syntax error).
    pub fn read(path: &Path) -> Result<ConfigFile, String> {
        let shown = path.display();
        let text = read_bounded(path).map_err(|e| format!("{shown}: {e}"))?;
        let entries = parse(&text).map_err(|(line, e)| format!("{shown}:{line}: {e}"))?;
        let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        Ok(ConfigFile { path, entries })
    }

    /// The entry of `key`, if the file has it.
    pub fn get(&self, key: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.key == key)
    }
}

/// Parses the text of a configuration file.
///
/// # Errors
/// The line and a one-line message for a TOML syntax error or an unusable value.
pub fn parse(text: &str) -> Result<Vec<Entry>, (usize, String)> {
    let table = DeTable::parse(text).map_err(|e| {
        let line = e.span().map_or(1, |s| line_of(text, s.start));
        (line, format!("not valid TOML: {}", one_line(e.message())))
    })?;
    let mut entries = Vec::with_capacity(table.get_ref().len());
    for (key, value) in table.get_ref() {
        let line = line_of(text, key.span().start);
        entries.push(Entry {
            key: key.get_ref().to_string(),
            line,
            value: value_of(value.get_ref()),
        });
    }
    entries.sort_by_key(|e| e.line);
    Ok(entries)
}

fn value_of(v: &DeValue<'_>) -> Value {
    match v {
        DeValue::Boolean(b) => Value::Bool(*b),
        DeValue::Integer(i) => integer(i.as_str(), i.radix())
            .map_or(Value::Other("an integer out of range"), Value::Int),
        DeValue::String(s) => Value::Str(s.to_string()),
        DeValue::Array(a) if !a.is_empty() && a.iter().all(|x| x.get_ref().is_table()) => {
            Value::Tables
        }
        DeValue::Array(a) => {
            let items: Option<Vec<String>> = a
                .iter()
                .map(|x| match value_of(x.get_ref()) {
                    Value::Str(s) | Value::Int(s) => Some(s),
                    _ => None,
                })
                .collect();
            items.map_or(Value::Other("an array of non-strings"), Value::List)
        }
        DeValue::Float(_) => Value::Other("a float"),
        DeValue::Datetime(_) => Value::Other("a date"),
        DeValue::Table(_) => Value::Other("a table"),
    }
}

/// A TOML integer's digits (`1_000`, `0x10`) as a decimal string.
fn integer(digits: &str, radix: u32) -> Option<String> {
    let clean: String = digits.chars().filter(|c| *c != '_').collect();
    i64::from_str_radix(&clean, radix)
        .ok()
        .map(|n| n.to_string())
}

/// The 1-based line of byte `offset` in `text`.
pub fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|b| **b == b'\n')
        .count()
        + 1
}

fn one_line(s: &str) -> String {
    s.split('\n')
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_come_with_their_lines_and_types() {
        let text = "# a comment\nlisten = \"0.0.0.0:7878\"\nmax-sessions = 1_0\n\nencrypt = \"always\"\nnic = [\"eth0\", \"eth1\"]\nfsync = true\n[[account]]\nname = \"a\"\n[[account]]\nname = \"b\"\n";
        let e = parse(text).unwrap();
        let got: Vec<(&str, usize)> = e.iter().map(|e| (e.key.as_str(), e.line)).collect();
        assert_eq!(
            got,
            [
                ("listen", 2),
                ("max-sessions", 3),
                ("encrypt", 5),
                ("nic", 6),
                ("fsync", 7),
                ("account", 8)
            ]
        );
        assert_eq!(e[1].value, Value::Int("10".into()));
        assert_eq!(e[3].value, Value::List(vec!["eth0".into(), "eth1".into()]));
        assert_eq!(e[4].value, Value::Bool(true));
        assert_eq!(e[5].value, Value::Tables);
    }

    #[test]
    fn a_syntax_error_names_its_line() {
        let (line, msg) = parse("listen = \"a\"\n\nroot = /data\n").unwrap_err();
        assert_eq!(line, 3);
        assert!(msg.starts_with("not valid TOML"), "{msg}");
        assert!(!msg.contains('\n'));
    }

    #[test]
    fn odd_values_say_what_they_are() {
        let e = parse("a = 1.5\nb = [1.5]\nc = {x = 1}\n").unwrap();
        assert_eq!(e[0].value.kind(), "a float");
        assert_eq!(e[1].value.kind(), "an array of non-strings");
        assert_eq!(e[2].value.kind(), "a table");
    }
}
