use super::*;

fn target(s: &str) -> Option<(String, String)> {
    parse_scp(s).map(|r| {
        let t = r.unwrap();
        (t.dest, t.path)
    })
}

fn pair(a: &str, b: &str) -> Option<(String, String)> {
    Some((a.to_string(), b.to_string()))
}

#[test]
fn scp_rule_decides_what_is_remote() {
    assert_eq!(target("host:/data/x"), pair("host", "/data/x"));
    assert_eq!(target("me@host:rel/x"), pair("me@host", "rel/x"));
    assert_eq!(target("host:"), pair("host", ""));
    assert_eq!(target("[fd00::2]:/x"), pair("fd00::2", "/x"));
    assert_eq!(target("me@[fd00::2]:x"), pair("me@fd00::2", "x"));
    // A '/' before the ':' (or a leading ':') keeps a path local, as in scp.
    for local in [
        "./a:b",
        "/x/a:b",
        "dir/a:b",
        ":x",
        "plain",
        "sluice://h:7878/x",
    ] {
        assert_eq!(target(local), None, "{local}");
    }
    assert!(parse_scp("me@:x").unwrap().is_err());
    assert!(parse_scp("@h:x").unwrap().is_err());
}

#[test]
fn a_remote_path_splits_into_its_parent_as_root_and_its_name() {
    let split = |s| {
        let (r, p) = split_remote_path(s);
        (r, p)
    };
    let p = |a: &str, b: &str| (a.to_string(), b.to_string());
    assert_eq!(split("/data/out"), p("/data", "out"));
    assert_eq!(split("/data/out/"), p("/data", "out/"));
    assert_eq!(split("/out"), p("/", "out"));
    assert_eq!(split("rel/f.bin"), p("rel", "f.bin"));
    assert_eq!(split("f.bin"), p(".", "f.bin"));
    assert_eq!(split("~/f.bin"), p(".", "f.bin"));
    // A directory's contents: its own root.
    assert_eq!(split("/"), p("/", "/"));
    assert_eq!(split(""), p(".", "/"));
    assert_eq!(split("~"), p(".", "/"));
    assert_eq!(split("."), p(".", "/"));
    assert_eq!(split("/data/."), p("/data/.", "/"));
    assert_eq!(split(".."), p("..", "/"));
}

#[test]
fn the_ready_line_round_trips_and_anything_else_is_not_one() {
    let r = Ready {
        addr: "10.43.0.2:40000".parse().unwrap(),
        fingerprint: None,
    };
    assert_eq!(
        r.line(),
        "SLUICE1 READY port=40000 host=10.43.0.2 fingerprint=none"
    );
    assert_eq!(Ready::parse(&(r.line() + "\n")), Some(r));
    let r6 = Ready {
        addr: "[fd00::2]:7".parse().unwrap(),
        fingerprint: Some("sha256:ab12".into()),
    };
    assert_eq!(Ready::parse(&r6.line()), Some(r6));
    let extra = "SLUICE1 READY port=1 host=127.0.0.1 fingerprint=none future=x";
    assert!(Ready::parse(extra).is_some());
    for bad in [
        "bash: sluice: command not found",
        "SLUICE1 READY port=0 host=127.0.0.1 fingerprint=none",
        "SLUICE1 READY port=1 fingerprint=none",
        "SLUICE1 READY port=1 host=127.0.0.1",
        "SLUICE1 READY port=1 host=127.0.0.1 fingerprint=md5:x",
        "SLUICE2 READY port=1 host=127.0.0.1 fingerprint=none",
    ] {
        assert_eq!(Ready::parse(bad), None, "{bad}");
    }
}

#[test]
fn quoting_survives_a_shell_and_commands_split_like_one() {
    assert_eq!(shell_quote("a b"), "'a b'");
    assert_eq!(shell_quote("it's"), r"'it'\''s'");
    let w = split_command(r#"ssh -p 2222 -i 'my key' -o "A=b c" x\ y"#).unwrap();
    assert_eq!(
        w,
        ["ssh", "-p", "2222", "-i", "my key", "-o", "A=b c", "x y"]
    );
    assert_eq!(split_command(r#""a\"b""#).unwrap(), [r#"a"b"#]);
    assert_eq!(split_command("''").unwrap(), [""]);
    assert!(split_command("ssh 'x").is_err());
    assert!(split_command("ssh \"x").is_err());
    assert!(split_command("   ").is_err());
}
