use super::far::failure;
use super::*;
use sluice_engine::SessionOptions;

fn config(paths: &[&str]) -> CopyConfig {
    let (dest, sources) = paths.split_last().unwrap();
    CopyConfig {
        sources: sources
            .iter()
            .map(|s| Endpoint::parse(s).unwrap())
            .collect(),
        dest: Endpoint::parse(dest).unwrap(),
        opts: SessionOptions::default(),
        token: None,
        tls: sluice_engine::net::tls::ClientTls::default(),
        far: None,
    }
}

fn way_of(paths: &[&str]) -> Option<(Way, String, String)> {
    ssh_endpoint(&config(paths))
        .unwrap()
        .map(|(w, t)| (w, t.dest, t.path))
}

#[test]
fn the_ssh_side_and_its_way_come_from_scp_syntax() {
    let push = way_of(&["data/", "me@h:/dst"]);
    assert_eq!(push, Some((Way::Push, "me@h".into(), "/dst".into())));
    let pull = way_of(&["h:f.bin", "."]);
    assert_eq!(pull, Some((Way::Pull, "h".into(), "f.bin".into())));
    assert_eq!(way_of(&["./a:b", "c"]), None);
    assert_eq!(way_of(&["a", "sluice://h/x"]), None);
    // A daemon-to-daemon copy with the far side as either daemon.
    let deliver = way_of(&["h:f.bin", "sluice://d/x"]);
    assert_eq!(deliver, Some((Way::Pull, "h".into(), "f.bin".into())));
    let receive = way_of(&["sluice://d/x", "h:y"]);
    assert_eq!(receive, Some((Way::Push, "h".into(), "y".into())));
}

#[test]
fn impossible_ssh_copies_are_refused_with_one_line() {
    for (paths, says) in [
        (&["h:a", "g:b"][..], "both sides are [user@]host:path"),
        (&["h:a", "h:b", "."][..], "one [user@]host:path source"),
        (
            &["h:a", "h:b", "sluice://d/x"][..],
            "takes one source and one destination",
        ),
        (&["a", "@h:x"][..], "has no host"),
    ] {
        let e = ssh_endpoint(&config(paths)).unwrap_err();
        assert!(e.to_string().contains(says), "{paths:?}: {e}");
        assert_eq!(crate::exit::code_of(&e), crate::exit::ExitCode::Usage);
    }
}

#[test]
fn a_far_side_that_never_got_ready_fails_with_the_right_line() {
    let f = |code, last: Option<&str>, path| failure("me@h", "h", code, last, path).to_string();
    assert_eq!(
        f(
            Some(255),
            Some("me@h: Permission denied (publickey)."),
            "sluice"
        ),
        "ssh me@h: Permission denied (publickey)."
    );
    assert_eq!(
        f(Some(255), Some("Host key verification failed."), "sluice"),
        "ssh me@h: Host key verification failed."
    );
    assert_eq!(
        f(
            Some(127),
            Some("bash: line 1: sluice: command not found"),
            "sluice"
        ),
        "sluice is not installed on h (or not on PATH): give --sluice-path"
    );
    assert!(f(Some(127), None, "/opt/x").contains("/opt/x is not found on h"));
    let refused = failure(
        "h",
        "h",
        Some(2),
        Some("sluice: error: \"/x\": nope"),
        "sluice",
    );
    assert_eq!(refused.to_string(), "h: \"/x\": nope");
    assert_eq!(crate::exit::code_of(&refused), crate::exit::ExitCode::Usage);
    assert!(f(Some(1), None, "sluice").contains("without saying why"));
}

#[test]
fn the_far_job_repeats_the_copys_plan_flags() {
    use clap::Parser;
    let cli = crate::Cli::try_parse_from([
        "sluice",
        "cp",
        "--streams",
        "3",
        "--adapt",
        "off",
        "-e",
        "ssh -p 2",
        "a",
        "h:b",
    ])
    .unwrap();
    let crate::Command::Cp(args) = cli.command else {
        panic!("cp")
    };
    let words = far_job(&args.job);
    assert!(words.contains(&"--streams=3".to_string()), "{words:?}");
    assert!(words.contains(&"--adapt=off".to_string()), "{words:?}");
    assert_eq!(args.ssh.rsh, "ssh -p 2");
    assert_eq!(args.ssh.sluice_path, "sluice");
}
