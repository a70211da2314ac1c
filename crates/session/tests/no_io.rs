//! The session core stays free of I/O: no sockets, files, threads or clocks in its
//! sources (the engine passes those in as values).

use std::path::Path;

const FORBIDDEN: [&str; 8] = [
    "std::net",
    "std::fs",
    "std::thread",
    "std::time::Instant",
    "SystemTime",
    "Instant::now",
    "std::process",
    "std::io::Read",
];

fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).expect("reading the crate's sources") {
        let p = e.expect("a directory entry").path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn the_session_core_does_no_io() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    assert!(
        files.len() >= 6,
        "found only {} sources under {src:?}",
        files.len()
    );
    let mut found = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).expect("reading a source file");
        for word in FORBIDDEN {
            if text.contains(word) {
                found.push(format!("{}: {word}", f.display()));
            }
        }
    }
    assert!(found.is_empty(), "I/O in the session core: {found:#?}");
}
