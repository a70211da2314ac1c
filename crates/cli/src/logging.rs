//! The log: tracing to stderr, as text or JSON, with a filter a SIGHUP can change.
//!
//! Text for a person at a terminal has timestamps; under journald (`$JOURNAL_STREAM`) or
//! any stderr that is not a terminal it has none (the journal and log collectors stamp
//! each line themselves) and no colours, and the level stays first on the line.
//! `--log-format json` writes one JSON object per event for log shippers.

use clap::ValueEnum;
use std::io::IsTerminal;
use std::sync::OnceLock;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter, Registry};

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human text (timestamps only on a terminal).
    Text,
    /// One JSON object per line (timestamp, level, fields, message).
    Json,
}

/// The handle that swaps the filter in force.
static FILTER: OnceLock<reload::Handle<EnvFilter, Registry>> = OnceLock::new();

/// Whether lines go to the journal or to a file or pipe rather than a terminal.
fn collected() -> bool {
    std::env::var_os("JOURNAL_STREAM").is_some() || !std::io::stderr().is_terminal()
}

fn filter_of(spec: &str) -> Result<EnvFilter, String> {
    EnvFilter::try_new(spec).map_err(|e| format!("log filter {spec:?}: {e}"))
}

/// Installs the log (once per process). A filter that does not parse falls back to
/// `warn` with one warning.
pub fn init(spec: &str, format: LogFormat) {
    let (filter, bad) = match filter_of(spec) {
        Ok(f) => (f, None),
        Err(e) => (EnvFilter::new("warn"), Some(e)),
    };
    let (filter, handle) = reload::Layer::new(filter);
    let _ = FILTER.set(handle);
    let plain = collected();
    let registry = tracing_subscriber::registry().with(filter);
    let installed = match (format, plain) {
        (LogFormat::Json, _) => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_writer(std::io::stderr),
            )
            .try_init(),
        (LogFormat::Text, true) => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .without_time()
                    .with_ansi(false)
                    .with_target(false)
                    .with_writer(std::io::stderr),
            )
            .try_init(),
        (LogFormat::Text, false) => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_target(false)
                    .with_writer(std::io::stderr),
            )
            .try_init(),
    };
    if installed.is_ok() {
        if let Some(e) = bad {
            tracing::warn!("{e}; using \"warn\"");
        }
    }
}

/// Puts `spec` in force as the log filter (SIGHUP).
///
/// # Errors
/// The filter does not parse, or no log was installed; the filter in force stays.
pub fn set_filter(spec: &str) -> Result<(), String> {
    let filter = filter_of(spec)?;
    FILTER
        .get()
        .ok_or("no log installed")?
        .reload(filter)
        .map_err(|e| format!("log filter: {e}"))
}
