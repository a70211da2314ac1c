//! `sluice top --once` against a daemon's metrics endpoint: one frame as text with the
//! stages of a channel that ran, the nodes and the bottleneck; its bad input.

#![allow(clippy::unwrap_used)]

mod common;

use common::{cp, free_port, run_in, Daemon, BIN};

#[test]
fn once_prints_a_frame_of_a_daemon_that_received_a_file() {
    let (src, dst, etc) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let token = etc.path().join("t");
    let (d, metrics) = Daemon::with_metrics(dst.path(), &token, "top-secret", &[]);
    let tok = token.to_str().unwrap();
    let file = src.path().join("f.bin");
    std::fs::write(&file, vec![7u8; 8 << 20]).unwrap();
    let out = cp(&[file.to_str().unwrap(), &d.url("f.bin")], None);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let top = run_in(
        BIN,
        &[
            "top",
            &metrics,
            "--once",
            "--interval",
            "0.2",
            "--metrics-token-file",
            tok,
        ],
        None,
    );
    assert_eq!(top.code, Some(0), "{}", top.stderr);
    let text = &top.stdout;
    assert!(
        text.starts_with(&format!("sluice top: {metrics}")),
        "{text}"
    );
    assert!(text.contains("0 session(s) running"), "{text}");
    assert!(
        text.lines().any(|l| l.starts_with("bottleneck: ")),
        "{text}"
    );
    assert!(text.contains("channel 0: 0 of "), "{text}");
    for stage in ["recv", "verify", "write"] {
        assert!(
            text.lines().any(|l| l.trim_start().starts_with(stage)),
            "no {stage} row:\n{text}"
        );
    }
    assert!(
        text.lines().any(|l| l.starts_with("node 0: memory")),
        "{text}"
    );
    assert!(text.contains("cpu0"), "{text}");
}

#[test]
fn top_says_what_is_wrong_with_the_endpoint() {
    let etc = tempfile::tempdir().unwrap();
    let token = etc.path().join("t");
    std::fs::write(&token, "right\n").unwrap();
    let metrics = format!("127.0.0.1:{}", free_port());
    let root = tempfile::tempdir().unwrap();
    let _d = Daemon::start_with(
        root.path(),
        &[
            "--metrics",
            &metrics,
            "--metrics-token-file",
            token.to_str().unwrap(),
        ],
        &[],
    );
    let no_token = run_in(BIN, &["top", &metrics, "--once", "--interval", "0.1"], None);
    assert_eq!(no_token.code, Some(1), "{}", no_token.stderr);
    assert!(
        no_token.stderr.contains("401") && no_token.stderr.contains("--metrics-token-file"),
        "{}",
        no_token.stderr
    );
    let closed = format!("127.0.0.1:{}", free_port());
    let gone = run_in(BIN, &["top", &closed, "--once"], None);
    assert_eq!(gone.code, Some(1), "{}", gone.stderr);
    assert!(
        gone.stderr
            .contains(&format!("cannot reach the metrics endpoint at {closed}")),
        "{}",
        gone.stderr
    );
    let bad = run_in(BIN, &["top", &metrics, "--once", "--interval", "0"], None);
    assert_eq!(bad.code, Some(2), "{}", bad.stderr);
}
