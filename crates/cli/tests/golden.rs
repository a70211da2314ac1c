//! Golden files: `sluice topo --json` and `sluice plan --json` (every policy, and one
//! manual placement) for every fixture in `testdata/topologies/`, compared byte for byte
//! with `testdata/golden/`. A change in the planner or the JSON shows up here as a diff
//! to review.
//!
//! Regenerate after an intended change, then review the diff:
//!
//! ```sh
//! SLUICE_BLESS=1 cargo test -p sluice --test golden
//! git diff testdata/golden
//! ```
//!
//! This machine's own topology is never golden: it differs from machine to machine.

use std::path::{Path, PathBuf};
use std::process::Command;

const POLICIES: [&str; 6] = ["os", "bind", "smts", "nmts", "mts", "auto"];

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// One golden file and the command line that produces it.
struct Case {
    file: String,
    args: Vec<String>,
}

/// Every fixture, sorted, as a path relative to the workspace root (that path is part
/// of the output: `Machine::source`).
fn fixtures() -> Vec<String> {
    let dir = workspace_root().join("testdata/topologies");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".xml"))
        .collect();
    names.sort();
    assert!(!names.is_empty(), "no fixtures in {}", dir.display());
    names
        .into_iter()
        .map(|n| format!("testdata/topologies/{n}"))
        .collect()
}

fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for fixture in fixtures() {
        let stem = fixture
            .trim_start_matches("testdata/topologies/")
            .trim_end_matches(".xml")
            .to_string();
        let args =
            |extra: &[&str]| -> Vec<String> { extra.iter().map(|s| (*s).to_string()).collect() };
        cases.push(Case {
            file: format!("topo-{stem}.json"),
            args: args(&["topo", "--json", "--topology", &fixture]),
        });
        for policy in POLICIES {
            cases.push(Case {
                file: format!("plan-{stem}-{policy}.json"),
                args: args(&["plan", "--topology", &fixture, "--policy", policy, "--json"]),
            });
        }
        // Seed 001's configuration E: compression with buffers on node 0, running on
        // nodes 0 and 1.
        cases.push(Case {
            file: format!("plan-{stem}-place-compress.json"),
            args: args(&[
                "plan",
                "--topology",
                &fixture,
                "--place",
                "compress=mem:0,exec:0+1",
                "--compress-threads",
                "2",
                "--json",
            ]),
        });
    }
    cases
}

fn run(args: &[String]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .current_dir(workspace_root())
        .env_remove("SLUICE_LOG")
        .output()
        .expect("the sluice binary runs");
    assert!(
        output.status.success(),
        "sluice {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8 output")
}

/// The first differing line, with a little context, for the failure message.
fn first_difference(want: &str, got: &str) -> String {
    let (w, g): (Vec<&str>, Vec<&str>) = (want.lines().collect(), got.lines().collect());
    let at = w
        .iter()
        .zip(&g)
        .position(|(a, b)| a != b)
        .unwrap_or(w.len().min(g.len()));
    let from = at.saturating_sub(3);
    let show = |lines: &[&str]| {
        lines
            .iter()
            .skip(from)
            .take(at - from + 4)
            .copied()
            .collect::<Vec<_>>()
            .join("\n")
    };
    format!(
        "first difference at line {}:\n--- golden\n{}\n--- now\n{}",
        at + 1,
        show(&w),
        show(&g)
    )
}

#[test]
fn json_output_matches_the_golden_files() {
    let dir = workspace_root().join("testdata/golden");
    let bless = std::env::var_os("SLUICE_BLESS").is_some_and(|v| v != "0");
    if bless {
        std::fs::create_dir_all(&dir).expect("create testdata/golden");
    }
    let cases = cases();
    let mut failures = Vec::new();
    for case in &cases {
        let got = run(&case.args);
        // Every golden file is valid JSON: a truncated or mixed output is a bug.
        serde_json::from_str::<serde_json::Value>(&got)
            .unwrap_or_else(|e| panic!("sluice {}: not JSON: {e}", case.args.join(" ")));
        let path = dir.join(&case.file);
        if bless {
            std::fs::write(&path, &got).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(want) if want == got => {}
            Ok(want) => failures.push(format!(
                "{} differs from `sluice {}`; {}",
                case.file,
                case.args.join(" "),
                first_difference(&want, &got)
            )),
            Err(e) => failures.push(format!("{}: {e}", case.file)),
        }
    }
    // Golden files nobody produces any more are stale: bless removes them.
    let wanted: Vec<&str> = cases.iter().map(|c| c.file.as_str()).collect();
    for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".json") && !wanted.contains(&name.as_str()) {
            if bless {
                std::fs::remove_file(entry.path()).expect("remove a stale golden file");
            } else {
                failures.push(format!("{name}: stale golden file (no case produces it)"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} golden files do not match (if the change is intended: \
         SLUICE_BLESS=1 cargo test -p sluice --test golden, then review git diff testdata/golden):\n\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n\n")
    );
}
