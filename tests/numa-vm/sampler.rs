//! numa-vm sampler: what the kernel says about one process, every PERIOD_MS, without forking
//! (a busybox shell loop manages about one sample a second under TCG on a busy host).
//!
//!   sluice-vm-sampler PID RAW STOP_FILE TIMEOUT_S [PERIOD_MS]
//!
//! Appends to RAW, per sample (the format tests/numa-vm/scenarios/transfer.sh parses):
//!   @T N PID
//!   @S  /proc/PID/task/*/stat, one line per thread (field 39: the CPU it last ran on)
//!   @A  /proc/PID/task/TID/status:Cpus_allowed_list:<TAB>LIST, one line per thread
//!   @V  the lines of /proc/PID/maps of anonymous VMAs of 2 MiB or more (pool candidates)
//!   @M  the lines of /proc/PID/numa_maps of those VMAs that have present pages (anon=)
//! Samples start once the process is `sluice` (exec done) and stop when it exits or is a
//! zombie, or when STOP_FILE exists. Past TIMEOUT_S the process is killed (SIGKILL) and the
//! exit status is 3. Built by tests/numa-vm/transfer.sh with `rustc -O` (std only).

use std::collections::HashSet;
use std::fs;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::process::{exit, Command};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// VMAs smaller than this cannot be a buffer pool.
const MIN_VMA_BYTES: u64 = 2 << 20;

fn usage() -> ! {
    eprintln!("usage: sluice-vm-sampler PID RAW STOP_FILE TIMEOUT_S [PERIOD_MS]");
    exit(2)
}

/// The state letter of /proc/PID/stat (after the last ')'), or None when it is gone.
fn state(pid: u32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.trim_start().chars().next()
}

fn sample(pid: u32, n: u64, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(out, "@T {n} {pid}")?;
    let mut tids: Vec<u32> = match fs::read_dir(format!("/proc/{pid}/task")) {
        Ok(d) => d
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect(),
        Err(_) => return Ok(()),
    };
    tids.sort_unstable();
    writeln!(out, "@S")?;
    for tid in &tids {
        if let Ok(s) = fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")) {
            writeln!(out, "{}", s.trim_end())?;
        }
    }
    writeln!(out, "@A")?;
    for tid in &tids {
        if let Ok(s) = fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")) {
            if let Some(l) = s.lines().find(|l| l.starts_with("Cpus_allowed_list:")) {
                writeln!(out, "/proc/{pid}/task/{tid}/status:{l}")?;
            }
        }
    }
    // Buffer pools are 2 MiB-aligned mappings of at least 2 MiB: smaller VMAs and file
    // mappings are left out, which keeps a sample small enough for busybox awk under TCG.
    writeln!(out, "@V")?;
    let mut starts = HashSet::new();
    if let Ok(s) = fs::read_to_string(format!("/proc/{pid}/maps")) {
        // start-end perms offset dev inode [path]: anonymous when there is no path
        for l in s.lines() {
            let mut fields = l.split_whitespace();
            let range = fields.next().unwrap_or_default();
            if fields.nth(4).is_some_and(|p| !p.starts_with('[')) {
                continue;
            }
            let Some((a, b)) = range.split_once('-') else {
                continue;
            };
            let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16)) else {
                continue;
            };
            if b.saturating_sub(a) >= MIN_VMA_BYTES {
                writeln!(out, "{l}")?;
                starts.insert(a);
            }
        }
    }
    writeln!(out, "@M")?;
    if let Ok(s) = fs::read_to_string(format!("/proc/{pid}/numa_maps")) {
        for l in s.lines().filter(|l| l.contains(" anon=")) {
            let start = l.split(' ').next().unwrap_or_default();
            if u64::from_str_radix(start, 16).is_ok_and(|a| starts.contains(&a)) {
                writeln!(out, "{l}")?;
            }
        }
    }
    out.flush()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 5 || args.len() > 6 {
        usage();
    }
    let pid: u32 = args[1].parse().unwrap_or_else(|_| usage());
    let stop = Path::new(&args[3]);
    let timeout = Duration::from_secs(args[4].parse().unwrap_or_else(|_| usage()));
    let period = Duration::from_millis(match args.get(5) {
        Some(p) => p.parse().unwrap_or_else(|_| usage()),
        None => 100,
    });
    let file = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&args[2])
        .unwrap_or_else(|e| {
            eprintln!("sluice-vm-sampler: cannot open {}: {e}", args[2]);
            exit(2)
        });
    let mut out = BufWriter::new(file);
    let start = Instant::now();
    let mut n = 0u64;
    loop {
        if stop.exists() {
            break;
        }
        match state(pid) {
            None | Some('Z' | 'X') => break,
            Some(_) => {}
        }
        let tick = Instant::now();
        if start.elapsed() > timeout {
            eprintln!(
                "FAIL pid {pid} still running after {} s: killed",
                timeout.as_secs()
            );
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            exit(3);
        }
        // between fork and exec the child is still the shell
        let comm = fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if comm.trim_end() != "sluice" {
            sleep(Duration::from_millis(20));
            continue;
        }
        n += 1;
        if let Err(e) = sample(pid, n, &mut out) {
            eprintln!("sluice-vm-sampler: writing {}: {e}", args[2]);
            exit(2);
        }
        if let Some(rest) = period.checked_sub(tick.elapsed()) {
            sleep(rest);
        }
    }
}
