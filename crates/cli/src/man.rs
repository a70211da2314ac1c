//! `sluice man DIR` (hidden): writes the man pages, `sluice.1` and one `sluice-SUB.1`
//! per visible subcommand, generated from the clap definition that `--help` prints, so
//! the pages can never drift from the flags. The package build (`scripts/package.sh`)
//! runs it; nobody else needs to.

use crate::exit::{bad_input, ExitCode};
use anyhow::{Context, Result};
use clap::Args;
use std::path::{Path, PathBuf};

/// Arguments of `sluice man`.
#[derive(Debug, Args)]
pub struct ManArgs {
    /// The directory to write the pages into (created if missing).
    pub dir: PathBuf,
}

/// Writes every page into `args.dir` and prints one line per page written.
pub fn run(args: &ManArgs, cmd: clap::Command) -> Result<ExitCode> {
    if args.dir.exists() && !args.dir.is_dir() {
        return Err(bad_input(format!(
            "{} is not a directory",
            args.dir.display()
        )));
    }
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("cannot create {}", args.dir.display()))?;
    let pages = write_pages(cmd, &args.dir)?;
    let listing: String = pages.iter().map(|p| format!("{}\n", p.display())).collect();
    crate::output::stdout(&listing)?;
    Ok(ExitCode::Ok)
}

/// Writes the pages of `cmd` and its visible subcommands, nested ones included, into
/// `dir`; returns their paths.
pub fn write_pages(cmd: clap::Command, dir: &Path) -> Result<Vec<PathBuf>> {
    clap_mangen::generate_to(cmd.clone(), dir)
        .with_context(|| format!("cannot write man pages into {}", dir.display()))?;
    let mut names = Vec::new();
    page_names(&cmd, cmd.get_name(), &mut names);
    let pages: Vec<PathBuf> = names.iter().map(|n| dir.join(format!("{n}.1"))).collect();
    for page in &pages {
        anyhow::ensure!(
            page.is_file(),
            "man page {} was not written",
            page.display()
        );
    }
    Ok(pages)
}

/// The page names of `cmd` (`prefix`) and of its visible subcommands (`prefix-SUB`).
pub fn page_names(cmd: &clap::Command, prefix: &str, names: &mut Vec<String>) {
    names.push(prefix.to_string());
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        if sub.get_name() == "help" {
            continue;
        }
        page_names(sub, &format!("{prefix}-{}", sub.get_name()), names);
    }
}
