use super::*;
use crate::{Cli, Command as Cmd};
use std::io::Write;

fn file(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(text.as_bytes()).unwrap();
    f
}

fn run(text: &str, extra: &[&str]) -> anyhow::Result<(Cli, Option<Loaded>)> {
    let f = file(text);
    let mut argv: Vec<OsString> = ["sluice", "serve", "--config"]
        .iter()
        .map(OsString::from)
        .collect();
    argv.push(f.path().into());
    argv.extend(extra.iter().map(OsString::from));
    let out = parse::<Cli>(argv);
    drop(f);
    out
}

fn serve(cli: &Cli) -> &crate::cp_cmd::ServeArgs {
    match &cli.command {
        Cmd::Serve(a) => a,
        _ => panic!("not serve"),
    }
}

fn err(text: &str) -> String {
    let e = run(text, &[]).unwrap_err();
    assert_eq!(
        crate::exit::code_of(&e),
        crate::exit::ExitCode::Usage,
        "{e:#}"
    );
    format!("{e:#}")
}

#[test]
fn keys_set_flags_and_the_command_line_overrides_them() {
    let text = "root = \"/srv\"\nlisten = \"127.0.0.1:9000\"\nmax-sessions = 7\nnic = [\"eth0\", \"eth1\"]\nlog = \"info\"\nbuffer-mem = \"128MiB\"\n";
    let (cli, loaded) = run(text, &["--max-sessions", "9"]).unwrap();
    let a = serve(&cli);
    assert_eq!(a.root.as_deref(), Some(std::path::Path::new("/srv")));
    assert_eq!(a.listen.to_string(), "127.0.0.1:9000");
    assert_eq!(a.shared.max_sessions, 9);
    assert_eq!(a.job.nics, ["eth0", "eth1"]);
    assert_eq!(a.job.buffer_mem, "128MiB");
    assert_eq!(cli.log, "info");
    let loaded = loaded.unwrap();
    assert!(loaded.applied.iter().any(|(k, l)| k == "listen" && *l == 2));
    assert!(!loaded.applied.iter().any(|(k, _)| k == "max-sessions"));
    let settings = show_settings(&loaded);
    assert!(settings.contains("max-sessions = 9"), "{settings}");
    assert!(settings.contains("command line"), "{settings}");
    assert!(settings.contains("file:2"), "{settings}");
}

#[test]
fn a_conflicting_flag_on_the_command_line_wins_over_the_file() {
    let (cli, _) = run("root = \"/srv\"\n", &["--accounts", "/etc/a.toml"]).unwrap();
    let a = serve(&cli);
    assert!(a.root.is_none());
    assert!(a.shared.accounts.is_some());
}

#[test]
fn booleans_are_flags() {
    let (cli, _) = run(
        "root = \"/srv\"\ninsecure-no-auth = true\njson = false\n",
        &[],
    )
    .unwrap();
    assert!(serve(&cli).insecure_no_auth);
    assert!(!serve(&cli).json);
}

#[test]
fn an_unknown_key_names_the_file_line_and_the_keys() {
    let m = err("root = \"/srv\"\n\nlisen = \"127.0.0.1:1\"\n");
    assert!(m.contains(":3: lisen: unknown key"), "{m}");
    assert!(m.contains("listen"), "{m}");
    assert!(!m.contains('\n'));
}

#[test]
fn a_wrong_type_says_what_was_expected() {
    let m = err("root = \"/srv\"\nmax-sessions = \"many\"\n");
    assert!(
        m.contains(":2: max-sessions: expected an integer (N), got a string"),
        "{m}"
    );
    let m = err("root = \"/srv\"\njson = 1\n");
    assert!(m.contains(":2: json: expected true or false"), "{m}");
    let m = err("root = 1.5\n");
    assert!(
        m.contains(":1: root: expected a string (DIR), got a float"),
        "{m}"
    );
}

#[test]
fn a_value_its_flag_refuses_is_named() {
    let m = err("root = \"/srv\"\nlisten = \"nowhere\"\n");
    assert!(m.contains(":2: listen: invalid value 'nowhere'"), "{m}");
    let m = err("root = \"/srv\"\nencrypt = \"sometimes\"\n");
    assert!(m.contains(":2: encrypt:"), "{m}");
    let m = err("root = \"/srv\"\nread-depth = 0\n");
    assert!(m.contains(":2: read-depth:"), "{m}");
}

#[test]
fn a_syntax_error_names_its_line() {
    let m = err("root = \"/srv\"\nlisten = \n");
    assert!(m.contains(":2: not valid TOML"), "{m}");
}

#[test]
fn inline_accounts_make_the_file_the_accounts_file() {
    let (cli, loaded) = run("[[account]]\nname = \"a\"\n", &[]).unwrap();
    let loaded = loaded.unwrap();
    assert!(loaded.inline_accounts);
    assert_eq!(
        serve(&cli).shared.accounts.as_ref(),
        Some(&loaded.file.path)
    );
    let m = err("accounts = \"/a.toml\"\n[[account]]\nname = \"a\"\n");
    assert!(
        m.contains(":1: accounts: give accounts = FILE or [[account]] tables"),
        "{m}"
    );
    let m = err("account = \"x\"\n");
    assert!(
        m.contains(":1: account: expected [[account]] tables"),
        "{m}"
    );
}

#[test]
fn conflicting_keys_in_the_file_are_one_line_naming_it() {
    let m = err("root = \"/srv\"\n[[account]]\nname = \"a\"\n");
    assert!(!m.contains('\n'), "{m}");
    assert!(m.contains("--accounts") || m.contains("--root"), "{m}");
}

#[test]
fn errors_naming_a_flag_from_the_file_get_its_line() {
    let (_, loaded) = run("root = \"/srv\"\nmax-sessions = 0\n", &[]).unwrap();
    let loaded = loaded.unwrap();
    let m = loaded
        .attribute("--max-sessions must be at least 1")
        .unwrap();
    assert!(
        m.ends_with(":2: max-sessions: --max-sessions must be at least 1"),
        "{m}"
    );
    assert!(loaded.attribute("--max-sessionsx").is_none());
    assert!(loaded.attribute("--listen is bad").is_none());
}

#[test]
fn without_config_the_command_line_is_parsed_as_before() {
    let argv: Vec<OsString> = ["sluice", "serve", "--root", "/srv"]
        .iter()
        .map(OsString::from)
        .collect();
    let (cli, loaded) = parse::<Cli>(argv).unwrap();
    assert!(loaded.is_none());
    assert_eq!(serve(&cli).shared.max_sessions, 64);
}

#[test]
fn a_missing_file_is_one_line() {
    let argv: Vec<OsString> = ["sluice", "serve", "--config", "/nonexistent/sluice.toml"]
        .iter()
        .map(OsString::from)
        .collect();
    let e = parse::<Cli>(argv).unwrap_err();
    assert!(format!("{e:#}").contains("/nonexistent/sluice.toml: cannot read it"));
}
