//! `sluice serve --http`: the WebDAV subset and RFC 3230 digests driven by gfal2's own
//! client (`gfal-copy -K ADLER32`, `gfal-ls`, `gfal-sum`, `gfal-rm`), davix and curl,
//! and the error cases (no or wrong token, rights, paths outside the root, a PUT that
//! breaks off) with nothing written.

// Test helpers may unwrap: a panic there is a failed assertion.
#![allow(clippy::unwrap_used)]

mod common;
#[path = "http/tools.rs"]
mod tools;

use common::Daemon;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use tools::{adler32, curl, data, have, http_addr, run, GFAL_INSECURE};

const TOKEN: &str = "http-test-token-0123456789";

fn s(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

/// A daemon with one token and `--http` on loopback, serving `root`.
fn daemon(dir: &Path, root: &Path, extra: &[&str]) -> (Daemon, String) {
    let tok = dir.join("token");
    std::fs::write(&tok, TOKEN).unwrap();
    std::fs::set_permissions(&tok, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut args = vec!["--token-file", s(&tok)];
    if !extra.contains(&"--http") {
        args.extend(["--http", "127.0.0.1:0"]);
    }
    args.extend_from_slice(extra);
    let d = Daemon::start_with(root, &args, &[]);
    let addr = http_addr(&d);
    (d, addr)
}

fn setup() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    (dir, root)
}

/// Names in `dir`, sorted (temporary files included: none may be left).
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn gfal_copy_up_and_down_with_adler32_ls_sum_rm() {
    if !have("gfal-copy") {
        return;
    }
    let (dir, root) = setup();
    let (_d, addr) = daemon(dir.path(), &root, &[]);
    let bytes = data(5_000_000, 1);
    let src = dir.path().join("src.bin");
    std::fs::write(&src, &bytes).unwrap();
    let env = [("BEARER_TOKEN", TOKEN)];
    let url = format!("davs://{addr}/up.bin");
    let local = format!("file://{}", s(&src));
    run(
        "gfal-copy",
        &["-D", GFAL_INSECURE, "-K", "ADLER32", &local, &url],
        &env,
    )
    .ok("gfal-copy up");
    assert_eq!(std::fs::read(root.join("up.bin")).unwrap(), bytes);
    let back = dir.path().join("back.bin");
    let back_url = format!("file://{}", s(&back));
    run(
        "gfal-copy",
        &["-D", GFAL_INSECURE, "-K", "ADLER32", &url, &back_url],
        &env,
    )
    .ok("gfal-copy down");
    assert_eq!(std::fs::read(&back).unwrap(), bytes);

    let ls = run(
        "gfal-ls",
        &["-l", "-D", GFAL_INSECURE, &format!("davs://{addr}/")],
        &env,
    );
    ls.ok("gfal-ls");
    assert!(
        ls.stdout.contains("up.bin") && ls.stdout.contains("5000000"),
        "{ls:?}"
    );
    let sum = run("gfal-sum", &["-D", GFAL_INSECURE, &url, "ADLER32"], &env);
    sum.ok("gfal-sum");
    assert!(
        sum.stdout.contains(&format!("{:08x}", adler32(&bytes))),
        "{sum:?}"
    );
    run("gfal-rm", &["-D", GFAL_INSECURE, &url], &env).ok("gfal-rm");
    assert_eq!(names(&root), Vec::<String>::new());
    // Without the token gfal-copy fails and writes nothing.
    let refused = run("gfal-copy", &["-D", GFAL_INSECURE, &local, &url], &[]);
    assert_ne!(refused.code, Some(0), "{refused:?}");
    assert_eq!(names(&root), Vec::<String>::new());
}

#[test]
fn davix_put_and_get() {
    if !have("davix-put") {
        return;
    }
    let (dir, root) = setup();
    let (_d, addr) = daemon(dir.path(), &root, &[]);
    let bytes = data(3_000_001, 2);
    let src = dir.path().join("src.bin");
    std::fs::write(&src, &bytes).unwrap();
    let auth = format!("Authorization: Bearer {TOKEN}");
    let url = format!("https://{addr}/dv.bin");
    run("davix-put", &["-k", "-H", &auth, s(&src), &url], &[]).ok("davix-put");
    let got = dir.path().join("got.bin");
    run("davix-get", &["-k", "-H", &auth, &url, s(&got)], &[]).ok("davix-get");
    assert_eq!(std::fs::read(&got).unwrap(), bytes);
    assert_eq!(std::fs::read(root.join("dv.bin")).unwrap(), bytes);
}

#[test]
fn curl_digests_ranges_and_dav_methods() {
    if !have("curl") {
        return;
    }
    let (dir, root) = setup();
    let (_d, addr) = daemon(dir.path(), &root, &[]);
    let bytes = data(1_000_000, 3);
    let src = dir.path().join("src.bin");
    std::fs::write(&src, &bytes).unwrap();
    let auth = format!("Authorization: Bearer {TOKEN}");
    let base = format!("https://{addr}");
    assert_eq!(
        curl(&["-H", &auth, "-X", "MKCOL", &format!("{base}/d")]).0,
        201
    );
    assert_eq!(
        curl(&["-H", &auth, "-T", s(&src), &format!("{base}/d/f.bin")]).0,
        201
    );
    assert_eq!(
        curl(&["-H", &auth, "-T", s(&src), &format!("{base}/d/f.bin")]).0,
        204
    );
    let (code, head) = curl(&[
        "-H",
        &auth,
        "-I",
        "-H",
        "Want-Digest: md5;q=0.5, adler32",
        &format!("{base}/d/f.bin"),
    ]);
    assert_eq!(code, 200);
    let want = format!("digest: adler32={:08x},md5=", adler32(&bytes));
    assert!(head.to_lowercase().contains(&want), "{head}");
    let (code, part) =
        tools::curl_bytes(&["-H", &auth, "-r", "100-199", &format!("{base}/d/f.bin")]);
    assert_eq!((code, part.as_slice()), (206, &bytes[100..200]));
    assert_eq!(
        curl(&["-H", &auth, "-r", "2000000-", &format!("{base}/d/f.bin")]).0,
        416
    );
    let (code, xml) = curl(&[
        "-H",
        &auth,
        "-X",
        "PROPFIND",
        "-H",
        "Depth: 1",
        &format!("{base}/d/"),
    ]);
    assert_eq!(code, 207);
    assert!(
        xml.contains("<D:href>/d/f.bin</D:href>") && xml.contains("1000000"),
        "{xml}"
    );
    assert_eq!(
        curl(&[
            "-H",
            &auth,
            "-X",
            "PROPFIND",
            "-H",
            "Depth: infinity",
            &format!("{base}/")
        ])
        .0,
        403
    );
    assert_eq!(
        curl(&["-H", &auth, "-X", "MKCOL", &format!("{base}/no/such")]).0,
        409
    );
    assert_eq!(
        curl(&["-H", &auth, "-T", s(&src), &format!("{base}/no/such")]).0,
        409
    );
    assert_eq!(
        curl(&["-H", &auth, "-X", "DELETE", &format!("{base}/d")]).0,
        204
    );
    assert_eq!(names(&root), Vec::<String>::new());
    assert_eq!(
        curl(&["-H", &auth, "-X", "DELETE", &format!("{base}/d")]).0,
        404
    );
}

#[test]
fn curl_errors_write_nothing() {
    if !have("curl") {
        return;
    }
    let (dir, root) = setup();
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("secret"), b"s").unwrap();
    std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
    let (_d, addr) = daemon(dir.path(), &root, &[]);
    let src = dir.path().join("src.bin");
    std::fs::write(&src, b"payload").unwrap();
    let base = format!("https://{addr}");
    let auth = format!("Authorization: Bearer {TOKEN}");
    let (code, body) = curl(&["-T", s(&src), &format!("{base}/a")]);
    assert_eq!(code, 401, "{body}");
    let (code, body) = curl(&[
        "-H",
        "Authorization: Bearer wrong",
        "-T",
        s(&src),
        &format!("{base}/a"),
    ]);
    assert_eq!(code, 401, "{body}");
    let (code, body) = curl(&[
        "-H",
        &auth,
        "--path-as-is",
        "-T",
        s(&src),
        &format!("{base}/../a"),
    ]);
    assert_eq!(code, 403, "{body}");
    let (code, body) = curl(&["-H", &auth, "-T", s(&src), &format!("{base}/link/x")]);
    assert_eq!(code, 403, "{body}");
    assert_eq!(curl(&["-H", &auth, &format!("{base}/link/secret")]).0, 403);
    assert_eq!(names(&root), vec!["link".to_string()]);
    assert_eq!(names(&outside), vec!["secret".to_string()]);
    assert!(!dir.path().join("a").exists());
}

#[test]
fn read_only_account_is_refused_writes() {
    if !have("curl") {
        return;
    }
    let (dir, root) = setup();
    std::fs::write(root.join("f"), b"hello").unwrap();
    let accounts = dir.path().join("accounts.toml");
    let text = format!(
        "[[account]]\nname = \"reader\"\ntoken = \"reader-token-0123456789\"\nroot = \"{}\"\nrights = [\"read\"]\n",
        s(&root)
    );
    std::fs::write(&accounts, text).unwrap();
    std::fs::set_permissions(&accounts, std::fs::Permissions::from_mode(0o600)).unwrap();
    let d = Daemon::start_with(
        &root,
        &["--accounts", s(&accounts), "--http", "127.0.0.1:0"],
        &[],
    );
    let base = format!("https://{}", http_addr(&d));
    let auth = "Authorization: Bearer reader-token-0123456789";
    let (code, body) = curl(&["-H", auth, &format!("{base}/f")]);
    assert_eq!((code, body.as_str()), (200, "hello"));
    let (code, body) = curl(&["-H", auth, "-X", "DELETE", &format!("{base}/f")]);
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("lacks the write right"), "{body}");
    assert_eq!(
        curl(&["-H", auth, "-X", "MKCOL", &format!("{base}/d")]).0,
        403
    );
    assert_eq!(names(&root), vec!["f".to_string()]);
}

#[test]
fn a_put_that_breaks_off_leaves_nothing() {
    use std::io::Write;
    let (dir, root) = setup();
    let (_d, addr) = daemon(dir.path(), &root, &[]);
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    write!(s, "PUT /cut.bin HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: 1000000\r\n\r\n").unwrap();
    s.write_all(&[7u8; 4096]).unwrap();
    drop(s);
    // The daemon notices the end of the body; poll (no timing assertion) until the
    // temporary file is gone, for at most 30 s.
    for _ in 0..300 {
        if names(&root).is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(names(&root), Vec::<String>::new());
}

#[test]
fn clear_text_only_on_loopback_or_when_insecure() {
    if !have("curl") {
        return;
    }
    let (dir, root) = setup();
    let (_d, addr) = daemon(dir.path(), &root, &["--http", "0.0.0.0:0"]);
    let port = addr.rsplit(':').next().unwrap();
    let auth = format!("Authorization: Bearer {TOKEN}");
    let (code, _) = curl(&[
        "-H",
        &auth,
        "-X",
        "PROPFIND",
        &format!("http://127.0.0.1:{port}/"),
    ]);
    assert_eq!(code, 0, "clear text was answered on a wildcard address");
    let (code, _) = curl(&[
        "-H",
        &auth,
        "-X",
        "PROPFIND",
        &format!("https://127.0.0.1:{port}/"),
    ]);
    assert_eq!(code, 207);
    let (_d2, addr2) = daemon(
        dir.path(),
        &root,
        &["--http", "0.0.0.0:0", "--http-insecure"],
    );
    let port2 = addr2.rsplit(':').next().unwrap();
    let (code, _) = curl(&[
        "-H",
        &auth,
        "-X",
        "PROPFIND",
        &format!("http://127.0.0.1:{port2}/"),
    ]);
    assert_eq!(code, 207);
}

/// A scoped token asked for with `POST` `application/macaroon-request`.
fn macaroon(base: &str, path: &str, auth: &str, body: &str) -> (u16, String) {
    let (code, text) = curl(&[
        "-X",
        "POST",
        "-H",
        auth,
        "-H",
        "Content-Type: application/macaroon-request",
        "--data-binary",
        body,
        &format!("{base}{path}"),
    ]);
    if code != 200 {
        return (code, text);
    }
    let v: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    (code, v["macaroon"].as_str().unwrap_or_default().to_string())
}

#[test]
fn macaroons_are_scoped_to_path_activity_and_time() {
    if !have("curl") {
        return;
    }
    let (dir, root) = setup();
    std::fs::create_dir(root.join("d")).unwrap();
    std::fs::write(root.join("d/f"), b"inside").unwrap();
    std::fs::write(root.join("g"), b"outside").unwrap();
    let (_d, addr) = daemon(dir.path(), &root, &[]);
    let base = format!("https://{addr}");
    let auth = format!("Authorization: Bearer {TOKEN}");
    let req = r#"{"caveats": ["activity:DOWNLOAD,LIST"], "validity": "PT10M"}"#;
    let (code, m) = macaroon(&base, "/d/", &auth, req);
    assert_eq!(code, 200, "{m}");
    let with = format!("Authorization: Bearer {m}");
    assert_eq!(
        curl(&["-H", &with, &format!("{base}/d/f")]),
        (200, "inside".into())
    );
    assert_eq!(
        curl(&[&format!("{base}/d/f?authz={m}")]),
        (200, "inside".into())
    );
    assert_eq!(curl(&["-H", &with, &format!("{base}/g")]).0, 403);
    let src = dir.path().join("up");
    std::fs::write(&src, b"x").unwrap();
    assert_eq!(
        curl(&["-H", &with, "-T", s(&src), &format!("{base}/d/new")]).0,
        403
    );
    assert_eq!(
        curl(&["-H", &with, "-X", "DELETE", &format!("{base}/d/f")]).0,
        403
    );
    // A token cannot grant more than it has.
    let wider = r#"{"caveats": ["activity:DOWNLOAD,UPLOAD"]}"#;
    assert_eq!(macaroon(&base, "/d/", &with, wider).0, 403);
    assert_eq!(macaroon(&base, "/", &with, r#"{"caveats": []}"#).0, 403);
    // Forged, expired, malformed.
    let mut forged = m.clone().into_bytes();
    let i = forged.len() - 3;
    forged[i] = if forged[i] == b'A' { b'B' } else { b'A' };
    let forged = format!(
        "Authorization: Bearer {}",
        String::from_utf8(forged).unwrap()
    );
    assert_eq!(curl(&["-H", &forged, &format!("{base}/d/f")]).0, 401);
    let (code, gone) = macaroon(&base, "/d/", &auth, r#"{"validity": "PT0S"}"#);
    assert_eq!(code, 200);
    let gone = format!("Authorization: Bearer {gone}");
    assert_eq!(curl(&["-H", &gone, &format!("{base}/d/f")]).0, 401);
    assert_eq!(macaroon(&base, "/d/", &auth, "not json").0, 400);
    assert_eq!(
        macaroon(&base, "/d/", &auth, r#"{"caveats": ["color:red"]}"#).0,
        400
    );
    assert_eq!(macaroon(&base, "/d/", "X-None: 1", req).0, 401);
    let (code, _) = curl(&[
        "-X",
        "POST",
        "-H",
        &auth,
        "--data-binary",
        "{}",
        &format!("{base}/d/"),
    ]);
    assert_eq!(code, 415);
    // An upload token writes where it is scoped, and only there.
    let (code, up) = macaroon(&base, "/d/", &auth, r#"{"caveats": ["activity:UPLOAD"]}"#);
    assert_eq!(code, 200);
    let up = format!("Authorization: Bearer {up}");
    assert_eq!(
        curl(&["-H", &up, "-T", s(&src), &format!("{base}/d/new")]).0,
        201
    );
    assert_eq!(
        curl(&["-H", &up, "-T", s(&src), &format!("{base}/new")]).0,
        403
    );
    assert_eq!(names(&root), vec!["d".to_string(), "g".to_string()]);
}

#[test]
fn sighup_rotates_http_tokens_too() {
    if !have("curl") {
        return;
    }
    let (dir, root) = setup();
    std::fs::write(root.join("f"), b"data").unwrap();
    let accounts = dir.path().join("accounts.toml");
    let write = |name: &str, token: &str| {
        let text = format!(
            "[[account]]\nname = \"{name}\"\ntoken = \"{token}\"\nroot = \"{}\"\nrights = [\"read\"]\n",
            s(&root)
        );
        std::fs::write(&accounts, text).unwrap();
        std::fs::set_permissions(&accounts, std::fs::Permissions::from_mode(0o600)).unwrap();
    };
    write("old", "old-token-0123456789");
    let d = Daemon::start_with(
        &root,
        &["--accounts", s(&accounts), "--http", "127.0.0.1:0"],
        &[],
    );
    let url = format!("https://{}/f", http_addr(&d));
    assert_eq!(
        curl(&["-H", "Authorization: Bearer old-token-0123456789", &url]).0,
        200
    );
    write("new", "new-token-0123456789");
    let pid = i32::try_from(d.child.0.id()).unwrap();
    // SAFETY: kill(2) on our own child's pid with a valid signal number.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
    let mut rotated = false;
    for _ in 0..300 {
        if curl(&["-H", "Authorization: Bearer new-token-0123456789", &url]).0 == 200 {
            rotated = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(rotated, "the new token never worked over HTTP: {}", d.log());
    assert_eq!(
        curl(&["-H", "Authorization: Bearer old-token-0123456789", &url]).0,
        401
    );
}

#[test]
fn sigterm_leaves_no_partial_upload() {
    use std::io::Write;
    let (dir, root) = setup();
    let (mut d, addr) = daemon(dir.path(), &root, &[]);
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    write!(s, "PUT /held.bin HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: 1000000\r\n\r\n").unwrap();
    s.write_all(&[7u8; 4096]).unwrap();
    // Wait until the upload's temporary file exists (at most 30 s).
    for _ in 0..300 {
        if !names(&root).is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(names(&root).len(), 1, "no temporary file appeared");
    let pid = i32::try_from(d.child.0.id()).unwrap();
    // SAFETY: kill(2) on our own child's pid with a valid signal number.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let status = d.child.0.wait().unwrap();
    assert!(status.success(), "{status:?}: {}", d.log());
    assert_eq!(names(&root), Vec::<String>::new());
    drop(s);
}

#[test]
fn a_put_whose_digest_does_not_match_is_not_kept() {
    if !have("curl") {
        return;
    }
    let (dir, root) = setup();
    let (_d, addr) = daemon(dir.path(), &root, &[]);
    let bytes = data(100_000, 4);
    let src = dir.path().join("src.bin");
    std::fs::write(&src, &bytes).unwrap();
    let auth = format!("Authorization: Bearer {TOKEN}");
    let url = format!("https://{addr}/f.bin");
    let (code, body) = curl(&[
        "-H",
        &auth,
        "-H",
        "Digest: adler32=00000001",
        "-T",
        s(&src),
        &url,
    ]);
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("adler32"), "{body}");
    assert_eq!(names(&root), Vec::<String>::new());
    let good = format!("Digest: adler32={:08x}", adler32(&bytes));
    assert_eq!(
        curl(&["-H", &auth, "-H", &good, "-T", s(&src), &url]).0,
        201
    );
    assert_eq!(std::fs::read(root.join("f.bin")).unwrap(), bytes);
}

#[test]
fn https_presents_the_daemons_tls_identity() {
    if !have("curl") {
        return;
    }
    let (dir, root) = setup();
    std::fs::write(root.join("f"), b"hello").unwrap();
    let state = dir.path().join("state");
    let (_d, addr) = daemon(dir.path(), &root, &["--state-dir", s(&state)]);
    let ca = state.join("identity.pem");
    let auth = format!("Authorization: Bearer {TOKEN}");
    let url = format!("https://{addr}/f");
    // Verified against the daemon's own certificate (no -k): the same identity as the
    // sluice protocol's.
    let r = run("curl", &["-sS", "--cacert", s(&ca), "-H", &auth, &url], &[]);
    assert_eq!((r.code, r.stdout.as_str()), (Some(0), "hello"), "{r:?}");
    let other = tempfile::NamedTempFile::new().unwrap();
    let r = run(
        "curl",
        &["-sS", "--cacert", s(other.path()), "-H", &auth, &url],
        &[],
    );
    assert_ne!(r.code, Some(0), "{r:?}");
}

#[test]
fn a_shared_token_key_makes_scoped_tokens_good_across_a_site() {
    if !have("curl") {
        return;
    }
    let (dir, root) = setup();
    std::fs::write(root.join("f"), b"shared").unwrap();
    let key = dir.path().join("token.key");
    std::fs::write(&key, "0123456789abcdef0123456789abcdef-site-key").unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (_a, a) = daemon(dir.path(), &root, &["--http-token-key", s(&key)]);
    let (_b, b) = daemon(dir.path(), &root, &["--http-token-key", s(&key)]);
    let (_c, c) = daemon(dir.path(), &root, &[]);
    let auth = format!("Authorization: Bearer {TOKEN}");
    let (code, m) = macaroon(&format!("https://{a}"), "/f", &auth, "{}");
    assert_eq!(code, 200, "{m}");
    let with = format!("Authorization: Bearer {m}");
    assert_eq!(
        curl(&["-H", &with, &format!("https://{b}/f")]),
        (200, "shared".into())
    );
    assert_eq!(curl(&["-H", &with, &format!("https://{c}/f")]).0, 401);
    // A key file others may read is refused at start.
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let tok = dir.path().join("token");
    let r = run(
        common::BIN,
        &[
            "serve",
            "--root",
            s(&root),
            "--token-file",
            s(&tok),
            "--listen",
            "127.0.0.1:0",
            "--http",
            "127.0.0.1:0",
            "--http-token-key",
            s(&key),
        ],
        &[],
    );
    assert_eq!(r.code, Some(2), "{r:?}");
    assert!(
        r.stderr.contains("--http-token-key") && r.stderr.contains("chmod 600"),
        "{r:?}"
    );
}
