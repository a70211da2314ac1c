//! Several daemons behind one name: a daemon busy with a copy hands the next `COPY` to
//! a less-loaded daemon of its site (`--http-peer`) with a 307, which curl and gfal2
//! follow; both daemons share one storage directory.

// Test helpers may unwrap: a panic there is a failed assertion.
#![allow(clippy::unwrap_used)]

mod common;
#[path = "http/tools.rs"]
mod tools;

use common::Daemon;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use tools::{curl, data, free_port, have, run, GFAL_INSECURE};

const TOKEN: &str = "http-site-token-0123456789";

fn s(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

/// A source that sends part of a large body and holds the connection open.
fn held_source() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        let Ok((mut c, _)) = l.accept() else { return };
        let mut req = [0u8; 4096];
        let _ = c.read(&mut req);
        let _ = write!(c, "HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n\r\n");
        let _ = c.write_all(&[1u8; 100_000]);
        let mut b = [0u8; 64];
        while matches!(c.read(&mut b), Ok(n) if n > 0) {}
    });
    format!("http://{addr}/held")
}

#[test]
fn a_busy_daemon_redirects_copies_to_a_less_loaded_one() {
    if !have("curl") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("shared");
    std::fs::create_dir(&root).unwrap();
    let tok = dir.path().join("token");
    std::fs::write(&tok, TOKEN).unwrap();
    std::fs::set_permissions(&tok, std::fs::Permissions::from_mode(0o600)).unwrap();
    let state = dir.path().join("state");
    let ca = state.join("identity.pem");
    let (pa, pb) = (free_port(), free_port());
    let start = |me: u16, other: u16| {
        let http = format!("127.0.0.1:{me}");
        let peer = format!("https://127.0.0.1:{other}");
        Daemon::start_with(
            &root,
            &[
                "--token-file",
                s(&tok),
                "--state-dir",
                s(&state),
                "--http",
                &http,
                "--http-peer",
                &peer,
                "--http-ca",
                s(&ca),
            ],
            &[],
        )
    };
    let _a = start(pa, pb);
    let _b = start(pb, pa);
    let a = format!("https://127.0.0.1:{pa}");
    // A copy held running on A (clear text: loopback admits it).
    let mut held = std::net::TcpStream::connect(("127.0.0.1", pa)).unwrap();
    let mut seen = String::new();
    write!(
        held,
        "COPY /held.bin HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nSource: {}\r\n\r\n",
        held_source()
    )
    .unwrap();
    let mut buf = [0u8; 4096];
    while !seen.contains("End\n") {
        let n = held.read(&mut buf).unwrap();
        assert!(n > 0, "{seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert!(seen.starts_with("HTTP/1.1 202"), "{seen}");
    // The next COPY to A is handed to B.
    std::fs::write(root.join("src.bin"), data(3_000_000, 5)).unwrap();
    let auth = format!("Authorization: Bearer {TOKEN}");
    let src = format!("Source: {a}/src.bin");
    let fwd = format!("TransferHeaderAuthorization: Bearer {TOKEN}");
    let (code, head) = curl(&[
        "-i",
        "-X",
        "COPY",
        "-H",
        &auth,
        "-H",
        &src,
        "-H",
        &fwd,
        &format!("{a}/copy1.bin"),
    ]);
    assert_eq!(code, 307, "{head}");
    assert!(
        head.to_lowercase()
            .contains(&format!("location: https://127.0.0.1:{pb}/copy1.bin")),
        "{head}"
    );
    let (code, body) = curl(&[
        "-L",
        "--location-trusted",
        "-N",
        "-X",
        "COPY",
        "-H",
        &auth,
        "-H",
        &src,
        "-H",
        &fwd,
        &format!("{a}/copy1.bin"),
    ]);
    assert_eq!(code, 202, "{body}");
    assert!(body.ends_with("success: Created\n"), "{body}");
    assert_eq!(
        std::fs::read(root.join("copy1.bin")).unwrap(),
        std::fs::read(root.join("src.bin")).unwrap()
    );
    // gfal2 follows the redirect too.
    if have("gfal-copy") {
        let env = [("BEARER_TOKEN", TOKEN)];
        let args = [
            "-D",
            GFAL_INSECURE,
            "-D",
            "HTTP PLUGIN:ENABLE_FALLBACK_TPC_COPY=false",
            "--copy-mode",
            "pull",
            &format!("davs://127.0.0.1:{pa}/src.bin"),
            &format!("davs://127.0.0.1:{pa}/copy2.bin"),
        ];
        let r = run("gfal-copy", &args, &env);
        assert_eq!(r.code, Some(0), "{r:?}");
        assert_eq!(
            std::fs::read(root.join("copy2.bin")).unwrap(),
            std::fs::read(root.join("src.bin")).unwrap()
        );
    }
    drop(held);
}
