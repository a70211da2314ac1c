//! The Python package (`python/`) end to end: a virtual environment under `target/`,
//! `pip install ./python` (maturin builds the extension, in the dev profile to keep the
//! test short), then its pytest suite against this build's `sluice` binary.
//!
//! Needs `python3` with `venv` and `ensurepip` (Debian: python3-venv, python3-dev) and
//! PyPI for maturin, numpy and pytest; without venv it skips LOUDLY. `SLUICE_PYTHON`
//! names another interpreter.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_sluice");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `cmd`, failing the test with its output if it fails.
fn run(what: &str, cmd: &mut Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The interpreter, or why there is none that can make a venv.
fn python() -> Result<String, String> {
    let python = std::env::var("SLUICE_PYTHON").unwrap_or_else(|_| "python3".into());
    let probe = Command::new(&python)
        .args(["-c", "import venv, ensurepip"])
        .output()
        .map_err(|e| format!("{python}: {e}"))?;
    if !probe.status.success() {
        return Err(format!(
            "{python} has no venv/ensurepip (Debian: apt-get install python3-venv python3-dev)"
        ));
    }
    Ok(python)
}

/// A venv under target/ with maturin, numpy and pytest (made once, then reused).
fn venv(python: &str) -> PathBuf {
    let dir = repo().join("target/python-venv");
    let py = dir.join("bin/python");
    if !py.exists() {
        run(
            "python3 -m venv",
            Command::new(python).args(["-m", "venv"]).arg(&dir),
        );
    }
    run(
        "pip install maturin numpy pytest",
        Command::new(&py).args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "maturin>=1.9,<2",
            "numpy",
            "pytest",
        ]),
    );
    py
}

/// `$PATH` with the venv's `bin/` first.
fn with_venv_path(py: &Path) -> std::ffi::OsString {
    let bin = py.parent().map(Path::to_path_buf).unwrap_or_default();
    let rest = std::env::var_os("PATH").unwrap_or_default();
    std::env::join_paths(std::iter::once(bin).chain(std::env::split_paths(&rest))).unwrap_or(rest)
}

#[test]
fn the_python_package_installs_and_its_tests_pass() {
    let python = match python() {
        Ok(p) => p,
        Err(why) => {
            common::skip(&format!(
                "the Python package's tests need a python3 with venv: {why}"
            ));
            return;
        }
    };
    let py = venv(&python);
    let package = repo().join("python");
    run(
        "pip install ./python",
        Command::new(&py)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-build-isolation",
                "--force-reinstall",
                "--no-deps",
            ])
            .arg(&package)
            // maturin's PEP 517 backend: a dev build, not the release profile's LTO;
            // it runs the venv's `maturin`.
            .env("MATURIN_PEP517_ARGS", "--profile dev")
            .env("PATH", with_venv_path(&py)),
    );
    run(
        "pytest python/tests",
        Command::new(&py)
            .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
            .arg(package.join("tests"))
            .env("SLUICE_BIN", BIN)
            // The tests import the installed package, not the source tree's.
            .current_dir(repo().join("target")),
    );
}
