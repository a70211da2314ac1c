//! The keys of the configuration file: every long flag of `sluice serve` (its own, the
//! flattened groups and the global ones), found by asking clap, so a flag added to
//! `ServeArgs` is a key with no code here. A key's value becomes the flag's argument
//! and goes through the flag's own parser, so the file and the command line accept
//! exactly the same values.

use super::file::{Entry, Value};
use clap::{Arg, ArgAction, Command};
use std::any::TypeId;

/// Flags that are not keys: the file itself, the mode, clap's own.
const NOT_KEYS: [&str; 4] = ["config", "check", "help", "version"];

/// The key of the inline accounts (`[[account]]` tables, the accounts-file format).
pub const ACCOUNT: &str = "account";

/// The flag a key sets, or `None` when `key` is not one.
pub fn arg<'c>(serve: &'c Command, key: &str) -> Option<&'c Arg> {
    serve
        .get_arguments()
        .find(|a| a.get_long() == Some(key) && !NOT_KEYS.contains(&key) && !a.is_hide_set())
}

/// Every key, in `--help` order.
pub fn all(serve: &Command) -> Vec<&str> {
    let mut keys: Vec<&str> = serve
        .get_arguments()
        .filter(|a| !a.is_hide_set())
        .filter_map(Arg::get_long)
        .filter(|l| !NOT_KEYS.contains(l))
        .collect();
    keys.push(ACCOUNT);
    keys
}

/// What a flag's value must be in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Flag,
    Integer,
    Text,
    List,
}

fn shape(a: &Arg) -> Shape {
    let numeric = [
        TypeId::of::<u8>(),
        TypeId::of::<u16>(),
        TypeId::of::<u32>(),
        TypeId::of::<u64>(),
        TypeId::of::<usize>(),
        TypeId::of::<i64>(),
    ];
    let t = a.get_value_parser().type_id();
    match a.get_action() {
        ArgAction::SetTrue => Shape::Flag,
        ArgAction::Append => Shape::List,
        _ if numeric.iter().any(|n| t == *n) => Shape::Integer,
        _ => Shape::Text,
    }
}

fn expected(a: &Arg) -> String {
    let name = a
        .get_value_names()
        .and_then(|n| n.first())
        .map_or_else(|| "VALUE".to_string(), ToString::to_string);
    match shape(a) {
        Shape::Flag => "true or false".into(),
        Shape::Integer => format!("an integer ({name})"),
        Shape::Text => format!("a string ({name})"),
        Shape::List => format!("an array of strings ({name})"),
    }
}

/// The command-line arguments `e` stands for (none for `false`).
///
/// # Errors
/// The value has the wrong type for the flag: what was expected.
pub fn to_args(a: &Arg, e: &Entry) -> Result<Vec<String>, String> {
    let flag = format!("--{}", e.key);
    let one = |v: &str| vec![format!("{flag}={v}")];
    match (shape(a), &e.value) {
        (Shape::Flag, Value::Bool(true)) => Ok(vec![flag]),
        (Shape::Flag, Value::Bool(false)) => Ok(Vec::new()),
        (Shape::Integer, Value::Int(n)) => Ok(one(n)),
        (Shape::Text | Shape::List, Value::Str(s) | Value::Int(s)) => Ok(one(s)),
        (Shape::List, Value::List(items)) => {
            Ok(items.iter().map(|v| format!("{flag}={v}")).collect())
        }
        (_, got) => Err(format!("expected {}, got {}", expected(a), got.kind())),
    }
}

/// Runs `args` (one key's) through the flag's own parser: the file accepts what the
/// command line accepts.
///
/// # Errors
/// The flag refuses the value: clap's reason, on one line, and what was expected.
pub fn check_value(serve: &Command, a: &Arg, args: &[String]) -> Result<(), String> {
    use clap::error::ErrorKind;
    let argv = std::iter::once("serve".to_string()).chain(args.iter().cloned());
    match serve.clone().try_get_matches_from(argv) {
        Err(e)
            if matches!(
                e.kind(),
                ErrorKind::InvalidValue | ErrorKind::ValueValidation | ErrorKind::InvalidUtf8
            ) =>
        {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or_default();
            let reason = first.strip_prefix("error: ").unwrap_or(first);
            Err(format!("{reason} (expected {})", expected(a)))
        }
        // Other errors (a missing --root, a conflict) are about the whole set of
        // flags, not this value: the merged command line reports them.
        _ => Ok(()),
    }
}
