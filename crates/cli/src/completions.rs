//! `sluice completions bash|zsh|fish`: the shell completion script, generated from the
//! same clap definition as `--help`, so it can never drift from the flags.

use crate::exit::ExitCode;
use anyhow::Result;
use clap::{Args, ValueEnum};

/// The shells `sluice completions` writes a script for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CompletionShell {
    /// GNU bash (`/usr/share/bash-completion/completions/sluice`).
    Bash,
    /// zsh (`/usr/share/zsh/vendor-completions/_sluice`).
    Zsh,
    /// fish (`/usr/share/fish/vendor_completions.d/sluice.fish`).
    Fish,
}

/// Arguments of `sluice completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to write the completion script for.
    #[arg(value_enum)]
    pub shell: CompletionShell,
}

/// Prints the completion script for `args.shell` to stdout.
pub fn run(args: &CompletionsArgs, mut cmd: clap::Command) -> Result<ExitCode> {
    let text = script(args.shell, &mut cmd);
    crate::output::stdout(&text)?;
    Ok(ExitCode::Ok)
}

/// The completion script for `shell` as a string.
pub fn script(shell: CompletionShell, cmd: &mut clap::Command) -> String {
    let generator = match shell {
        CompletionShell::Bash => clap_complete::Shell::Bash,
        CompletionShell::Zsh => clap_complete::Shell::Zsh,
        CompletionShell::Fish => clap_complete::Shell::Fish,
    };
    let name = cmd.get_name().to_string();
    let mut buf = Vec::new();
    clap_complete::generate(generator, cmd, name, &mut buf);
    String::from_utf8_lossy(&buf).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toy() -> clap::Command {
        clap::Command::new("sluice")
            .subcommand(clap::Command::new("cp").arg(clap::Arg::new("streams").long("streams")))
    }

    #[test]
    fn every_shell_names_the_subcommands_and_flags() {
        for shell in [
            CompletionShell::Bash,
            CompletionShell::Zsh,
            CompletionShell::Fish,
        ] {
            let text = script(shell, &mut toy());
            assert!(text.contains("cp"), "{shell:?}: {text}");
            assert!(text.contains("streams"), "{shell:?}: {text}");
        }
    }
}
