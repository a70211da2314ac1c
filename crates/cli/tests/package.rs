//! The Debian package end to end, as root on this machine (issue 22): build it with
//! scripts/package.sh (a release build: minutes), `dpkg -i`, `systemd-analyze verify`
//! and `security` on the installed unit, start the daemon exactly as the unit's
//! ExecStart says as the `sluice` user with the unit's capabilities and limits
//! (`prlimit`, `setpriv`) and its readiness over a real NOTIFY_SOCKET, serve a push,
//! `man -w sluice-cp`, the installed completions, `dpkg -r`.

mod common;

use common::{have, run_in, skip};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const UNIT: &str = "/lib/systemd/system/sluice.service";
/// How long the release build and cargo-deb may take (2 shared cores: ~10 min).
const BUILD_TIMEOUT: Duration = Duration::from_secs(3600);
/// How long the daemon may take to say READY=1.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `program args` to the end within `limit`; (exit code, stdout, stderr).
fn run_long(program: &str, args: &[&str], limit: Duration) -> (Option<i32>, String, String) {
    let mut child = Command::new(program)
        .args(args)
        .current_dir(workspace())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{program} runs: {e}"));
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{program} {args:?}: still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = child.wait_with_output().expect("output");
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

/// Removes the package (and what the test wrote) however the test ends.
struct Installed;

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = std::fs::remove_file("/var/lib/sluice/data/pushed.bin");
        let _ = Command::new("dpkg").args(["--purge", "sluice"]).output();
    }
}

/// The daemon, killed if the test ends before it stopped.
struct DaemonGuard(Child);

impl Drop for DaemonGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The unit's `KEY=` value.
fn unit_value(unit: &str, key: &str) -> String {
    unit.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("the unit has no {key}="))
        .to_string()
}

/// Waits for a datagram on the notify socket that holds `what`.
fn wait_notify(sock: &UnixDatagram, what: &str, seen: &mut String) {
    let deadline = Instant::now() + READY_TIMEOUT;
    let mut buf = [0u8; 4096];
    while !seen.contains(what) {
        assert!(
            Instant::now() < deadline,
            "no {what} in {READY_TIMEOUT:?}: {seen:?}"
        );
        if let Ok(n) = sock.recv(&mut buf) {
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
            seen.push('\n');
        }
    }
}

#[test]
fn the_package_installs_serves_a_push_and_is_removed() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return skip("the package test installs with dpkg: run as root");
    }
    for tool in ["dpkg", "systemd-analyze", "setpriv", "prlimit", "man"] {
        if !have(tool) {
            return skip(&format!("{tool} is not installed"));
        }
    }
    let started = Instant::now();
    let out_dir = tempfile::tempdir().expect("tempdir");
    let out = out_dir.path().display().to_string();
    let (code, stdout, stderr) = run_long("scripts/package.sh", &[&out], BUILD_TIMEOUT);
    assert_eq!(code, Some(0), "package.sh: {stdout}{stderr}");
    let deb = stdout
        .lines()
        .last()
        .expect("package.sh prints the .deb")
        .to_string();
    eprintln!("package.sh built {deb} in {:?}", started.elapsed());
    assert!(
        !stderr.contains("SKIPPED"),
        "package.sh skipped a step: {stderr}"
    );

    let _installed = Installed;
    let install = run_in("dpkg", &["-i", &deb], None);
    assert_eq!(
        install.code,
        Some(0),
        "dpkg -i: {}{}",
        install.stdout,
        install.stderr
    );
    check_installed_files();
    check_unit();
    serve_a_push();
    let remove = run_in("dpkg", &["-r", "sluice"], None);
    assert_eq!(
        remove.code,
        Some(0),
        "dpkg -r: {}{}",
        remove.stdout,
        remove.stderr
    );
    assert!(
        !Path::new("/usr/bin/sluice").exists(),
        "dpkg -r left the binary"
    );
    assert!(
        Path::new("/etc/sluice/sluice.toml").exists(),
        "a conffile stays until purge"
    );
}

/// The conffile, the user, the man pages and the completions.
fn check_installed_files() {
    let conf = run_in("dpkg-query", &["-W", "-f=${Conffiles}", "sluice"], None);
    assert!(
        conf.stdout.contains("/etc/sluice/sluice.toml"),
        "conffiles: {}",
        conf.stdout
    );
    let user = run_in("getent", &["passwd", "sluice"], None);
    assert_eq!(user.code, Some(0), "no sluice user");
    assert!(user.stdout.contains("nologin"), "{}", user.stdout);
    let man = run_in("man", &["-w", "sluice-cp"], None);
    assert_eq!(man.code, Some(0), "man -w sluice-cp: {}", man.stderr);
    assert!(
        man.stdout
            .trim()
            .ends_with("/usr/share/man/man1/sluice-cp.1.gz"),
        "{}",
        man.stdout
    );
    let probe = "source /usr/share/bash-completion/completions/sluice && complete -p sluice";
    let bash = run_in("bash", &["--norc", "-c", probe], None);
    assert!(
        bash.stdout.contains("_sluice"),
        "{}{}",
        bash.stdout,
        bash.stderr
    );
    for file in [
        "/usr/share/zsh/vendor-completions/_sluice",
        "/usr/share/fish/vendor_completions.d/sluice.fish",
        "/usr/lib/sysusers.d/sluice.conf",
    ] {
        assert!(Path::new(file).is_file(), "{file} not installed");
    }
}

/// `systemd-analyze verify` clean and exposure at most 4.0 on the installed unit.
fn check_unit() {
    let verify = run_in("systemd-analyze", &["verify", UNIT], None);
    assert_eq!(
        verify.code,
        Some(0),
        "verify: {}{}",
        verify.stdout,
        verify.stderr
    );
    assert!(
        verify.stderr.trim().is_empty(),
        "verify is not clean: {}",
        verify.stderr
    );
    let security = run_in(
        "systemd-analyze",
        &["security", "--offline=true", "--threshold=40", UNIT],
        None,
    );
    let score = security
        .stdout
        .lines()
        .find(|l| l.contains("Overall exposure level"))
        .unwrap_or_default()
        .to_string();
    eprintln!("systemd-analyze security: {score}");
    assert_eq!(security.code, Some(0), "exposure above 4.0: {score}");
}

/// The daemon exactly as ExecStart says, as `sluice` with the unit's capabilities and
/// limits; READY=1 over NOTIFY_SOCKET; a push lands in the served root, owned by
/// `sluice`; SIGTERM gives STOPPING=1 and a clean exit.
fn serve_a_push() {
    let unit = std::fs::read_to_string(UNIT).expect("the installed unit");
    let exec: Vec<String> = unit_value(&unit, "ExecStart")
        .split_whitespace()
        .map(str::to_string)
        .collect();
    let caps = unit_value(&unit, "AmbientCapabilities");
    assert_eq!(caps, unit_value(&unit, "CapabilityBoundingSet"));
    let caps: Vec<String> = caps
        .split_whitespace()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase()))
        .collect();
    let caps = caps.join(",");

    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let sock_path = dir.path().join("notify");
    let sock = UnixDatagram::bind(&sock_path).expect("notify socket");
    std::fs::set_permissions(&sock_path, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");

    let mut argv = unit_limits(&unit);
    argv.push("setpriv".into());
    argv.extend(
        [
            "--reuid=sluice",
            "--regid=sluice",
            "--init-groups",
            &format!("--inh-caps=-all,{caps}"),
            &format!("--ambient-caps=-all,{caps}"),
            &format!("--bounding-set=-all,{caps}"),
            "--no-new-privs",
            "--",
        ]
        .map(str::to_string),
    );
    argv.extend(exec.iter().cloned());
    let log = dir.path().join("daemon.log");
    let child = Command::new("prlimit")
        .args(&argv)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("NOTIFY_SOCKET", &sock_path)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log).expect("log"))
        .stderr(std::fs::File::create(dir.path().join("daemon.err")).expect("log"))
        .spawn()
        .expect("prlimit setpriv sluice serve");
    let mut daemon = DaemonGuard(child);
    let mut seen = String::new();
    let daemon_log = || std::fs::read_to_string(dir.path().join("daemon.err")).unwrap_or_default();
    if daemon.0.try_wait().expect("wait").is_some() {
        panic!("the daemon exited at once: {}", daemon_log());
    }
    wait_notify(&sock, "READY=1", &mut seen);
    check_daemon_caps(daemon.0.id());
    push(&daemon_log());
    // SAFETY: the pid is our live child's.
    unsafe { libc::kill(i32::try_from(daemon.0.id()).expect("pid"), libc::SIGTERM) };
    wait_notify(&sock, "STOPPING=1", &mut seen);
    let status = daemon.0.wait().expect("the daemon exits");
    assert!(
        status.success(),
        "after SIGTERM: {status:?}: {}",
        daemon_log()
    );
}

/// `prlimit` options for the unit's LimitMEMLOCK and LimitNOFILE, each where this
/// process may raise its hard limit that far (a container without CAP_SYS_RESOURCE may
/// not: said on stderr; CAP_IPC_LOCK lets mlock pass RLIMIT_MEMLOCK anyway).
fn unit_limits(unit: &str) -> Vec<String> {
    let memlock = unit_value(unit, "LimitMEMLOCK");
    let memlock_bytes = memlock.trim_end_matches('G').parse::<u64>().expect("nG") << 30;
    let nofile = unit_value(unit, "LimitNOFILE");
    let mut args = Vec::new();
    for arg in [
        format!("--memlock={memlock_bytes}:{memlock_bytes}"),
        format!("--nofile={nofile}:{nofile}"),
    ] {
        if run_in("prlimit", &[&arg, "true"], None).code == Some(0) {
            args.push(arg);
        } else {
            let _ = writeln!(
                std::io::stderr(),
                "NOTE: prlimit {arg} refused here: not applied"
            );
        }
    }
    args
}

/// The daemon holds exactly CAP_IPC_LOCK (14) and CAP_SYS_NICE (23), as `sluice`.
fn check_daemon_caps(pid: u32) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| u64::from_str_radix(v.trim(), 16).expect("hex"))
            .expect("a capability line")
    };
    assert_eq!(field("CapEff:"), (1 << 14) | (1 << 23), "{status}");
    assert_eq!(field("CapBnd:"), (1 << 14) | (1 << 23), "{status}");
    let uid = run_in("id", &["-u", "sluice"], None)
        .stdout
        .trim()
        .to_string();
    let line = status
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .unwrap_or_default();
    assert!(line.split_whitespace().skip(1).all(|u| u == uid), "{line}");
}

/// Pushes a file to the daemon the default configuration describes.
fn push(daemon_log: &str) {
    let src = tempfile::tempdir().expect("tempdir");
    let file = src.path().join("pushed.bin");
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&file, &data).expect("write");
    let url = "sluice://127.0.0.1:7878/pushed.bin";
    let out = run_in(
        "/usr/bin/sluice",
        &["cp", &file.display().to_string(), url],
        None,
    );
    assert_eq!(
        out.code,
        Some(0),
        "push: {}{} (daemon: {daemon_log})",
        out.stdout,
        out.stderr
    );
    let landed = Path::new("/var/lib/sluice/data/pushed.bin");
    assert_eq!(std::fs::read(landed).expect("the pushed file"), data);
    let owner = std::fs::metadata(landed).expect("metadata").uid();
    let uid = run_in("id", &["-u", "sluice"], None)
        .stdout
        .trim()
        .to_string();
    assert_eq!(owner.to_string(), uid, "the daemon writes as sluice");
}

/// The packaged /etc/sluice/sluice.toml is a valid configuration (`--check`), with its
/// served root replaced by one that exists here (flags override the file).
#[test]
fn the_packaged_configuration_passes_check() {
    let conf = workspace().join("packaging/sluice.toml");
    let root = tempfile::tempdir().expect("tempdir");
    let out = run_in(
        common::BIN,
        &[
            "serve",
            "--config",
            &conf.display().to_string(),
            "--root",
            &root.path().display().to_string(),
            "--check",
        ],
        None,
    );
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("listen = \"127.0.0.1:7878\""),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("state-dir = \"/var/lib/sluice/state\""),
        "{}",
        out.stdout
    );
}

/// The unit's exposure in `systemd-analyze security --offline=true` is at most 4.0
/// ("OK"), checked on the source file (the installed one: the package test).
#[test]
fn the_unit_is_hardened() {
    if !have("systemd-analyze") {
        return skip("systemd-analyze is not installed (apt-get install -y systemd)");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let unit = dir.path().join("sluice.service");
    std::fs::copy(workspace().join("packaging/sluice.service"), &unit).expect("copy");
    let unit = unit.display().to_string();
    let out = run_in(
        "systemd-analyze",
        &["security", "--offline=true", "--threshold=40", &unit],
        None,
    );
    assert_eq!(
        out.code,
        Some(0),
        "exposure above 4.0: {}{}",
        out.stdout,
        out.stderr
    );
    assert!(
        out.stdout
            .contains("Overall exposure level for sluice.service: 1.8 OK"),
        "{}",
        out.stdout
    );
    let text = std::fs::read_to_string(workspace().join("packaging/sluice.service")).expect("unit");
    for line in [
        "Type=notify",
        "User=sluice",
        "AmbientCapabilities=CAP_IPC_LOCK CAP_SYS_NICE",
        "CapabilityBoundingSet=CAP_IPC_LOCK CAP_SYS_NICE",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ExecStart=/usr/bin/sluice serve --config /etc/sluice/sluice.toml",
    ] {
        assert!(text.lines().any(|l| l == line), "the unit lacks {line}");
    }
}
