//! Shell completions and man pages, generated from the clap definition: each completion
//! script loads in its real shell and completes a subcommand and a flag; every visible
//! subcommand has a man page and `man -l` renders it.

mod common;

use common::{have, run_in, skip, BIN};
use std::path::Path;

/// The script `sluice completions SHELL` prints, written to `dir/name`.
fn script(shell: &str, dir: &Path, name: &str) -> String {
    let out = run_in(BIN, &["completions", shell], None);
    assert_eq!(out.code, Some(0), "completions {shell}: {}", out.stderr);
    assert!(
        out.stdout.len() > 200,
        "completions {shell}: {}",
        out.stdout
    );
    let path = dir.join(name);
    std::fs::write(&path, &out.stdout).expect("write the script");
    path.display().to_string()
}

/// Runs `shell args...`, returns stdout; fails the test with stderr on a non-zero exit.
fn shell_run(shell: &str, args: &[&str]) -> String {
    let out = run_in(shell, args, None);
    assert_eq!(
        out.code,
        Some(0),
        "{shell} {args:?}: {}{}",
        out.stdout,
        out.stderr
    );
    out.stdout
}

#[test]
fn bash_completion_loads_and_completes() {
    if !have("bash") {
        return skip("bash is not installed (apt-get install -y bash)");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let file = script("bash", dir.path(), "sluice");
    let probe = format!(
        "source {file} && complete -p sluice && COMP_WORDS=(sluice c) COMP_CWORD=1 && \
         _sluice sluice c sluice && echo \"${{COMPREPLY[@]}}\" && \
         COMP_WORDS=(sluice cp --stre) COMP_CWORD=2 && _sluice sluice --stre cp && \
         echo \"${{COMPREPLY[@]}}\""
    );
    let out = shell_run("bash", &["--norc", "--noprofile", "-c", &probe]);
    assert!(out.contains("-F _sluice sluice"), "{out}");
    assert!(out.contains("cp") && out.contains("completions"), "{out}");
    assert!(out.contains("--streams"), "{out}");
}

#[test]
fn zsh_completion_loads_and_registers() {
    if !have("zsh") {
        return skip("zsh is not installed (apt-get install -y zsh)");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let file = script("zsh", dir.path(), "_sluice");
    let probe = format!(
        "autoload -Uz compinit && compinit -u -D && source {file} && \
         print -r -- ${{_comps[sluice]}} && whence -w _sluice"
    );
    let out = shell_run("zsh", &["-f", "-c", &probe]);
    assert!(out.contains("_sluice\n"), "{out}");
    assert!(out.contains("_sluice: function"), "{out}");
}

#[test]
fn fish_completion_loads_and_completes() {
    if !have("fish") {
        return skip("fish is not installed (apt-get install -y fish)");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let file = script("fish", dir.path(), "sluice.fish");
    let probe =
        format!("source {file}; and complete -C'sluice c'; and complete -C'sluice cp --stre'");
    let out = shell_run("fish", &["--no-config", "-c", &probe]);
    assert!(out.contains("cp\t"), "{out}");
    assert!(out.contains("completions\t"), "{out}");
    assert!(out.contains("--streams"), "{out}");
}

#[test]
fn an_unknown_shell_is_bad_input() {
    let out = run_in(BIN, &["completions", "tcsh"], None);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stdout.is_empty());
}

/// The visible subcommands that `sluice --help` lists.
fn subcommands() -> Vec<String> {
    let help = run_in(BIN, &["--help"], None).stdout;
    let list = help.split("Commands:").nth(1).expect("a Commands section");
    let list = list.split("Options:").next().unwrap_or(list);
    list.lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

#[test]
fn every_subcommand_has_a_man_page_that_renders() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = run_in(BIN, &["man", &dir.path().display().to_string()], None);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let subs = subcommands();
    assert!(
        subs.len() >= 8 && subs.iter().any(|s| s == "cp"),
        "{subs:?}"
    );
    assert!(
        !subs.iter().any(|s| s == "man" || s == "oneshot"),
        "hidden ones listed: {subs:?}"
    );
    let mut pages = vec!["sluice".to_string()];
    pages.extend(subs.iter().map(|s| format!("sluice-{s}")));
    for page in &pages {
        let path = dir.path().join(format!("{page}.1"));
        assert!(path.is_file(), "{page}.1 missing; printed: {}", out.stdout);
        assert!(
            out.stdout.contains(&format!("{page}.1")),
            "{page}.1 not listed"
        );
        if !have("man") {
            skip("man is not installed (apt-get install -y man-db groff-base)");
            continue;
        }
        let shown = run_in(
            "man",
            &["-P", "cat", "-l", &path.display().to_string()],
            None,
        );
        assert_eq!(shown.code, Some(0), "man -l {page}.1: {}", shown.stderr);
        assert!(
            shown.stdout.contains("SYNOPSIS"),
            "man -l {page}.1: {}",
            shown.stdout
        );
        assert!(
            shown.stdout.contains("--help"),
            "man -l {page}.1 lacks the options"
        );
    }
    let cp = std::fs::read_to_string(dir.path().join("sluice-cp.1")).expect("sluice-cp.1");
    assert!(cp.contains("streams"), "sluice-cp.1 lacks --streams");
}

#[test]
fn man_into_a_file_is_bad_input() {
    let file = tempfile::NamedTempFile::new().expect("tempfile");
    let out = run_in(BIN, &["man", &file.path().display().to_string()], None);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("not a directory"), "{}", out.stderr);
}
