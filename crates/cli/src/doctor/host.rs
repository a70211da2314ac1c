//! The checks of the host itself: locked memory, io_uring, O_DIRECT, the CPU clock and
//! transparent huge pages.

use super::facts::Facts;
use super::finding::{size, sysctl_fix, Finding, Status, Target};

/// Every host check, in the order the report prints them.
pub fn checks(f: &Facts, t: &Target, served: &str) -> Vec<Finding> {
    vec![
        memlock(f, t),
        io_uring(f, t),
        o_direct(f, served),
        governor(f, t),
        thp(f),
    ]
}

/// RLIMIT_MEMLOCK against the daemon's planned buffer memory.
pub fn memlock(f: &Facts, t: &Target) -> Finding {
    const CHECK: &str = "memlock";
    let why = format!(
        "sluice locks its {} of buffer pools (mlock) so the kernel can neither swap them \
         out nor migrate them off their NUMA node; an unlocked page that faults or moves \
         stalls a channel {}",
        size(t.buffer_bytes),
        t.at()
    );
    let limit = match f.memlock_bytes {
        None => "unlimited".to_string(),
        Some(b) => size(b),
    };
    if f.cap_ipc_lock {
        let found = format!("CAP_IPC_LOCK held: RLIMIT_MEMLOCK ({limit}) does not apply");
        return Finding::ok(CHECK, found, why);
    }
    if !f.memlock_known {
        let found = "cannot read RLIMIT_MEMLOCK from /proc/self/limits";
        return Finding::needs(Status::Advice, CHECK, found, why, memlock_fix());
    }
    match f.memlock_bytes {
        Some(b) if b < t.buffer_bytes => {
            let found = format!(
                "RLIMIT_MEMLOCK is {limit} (/proc/self/limits), the daemon plans {} of buffers",
                size(t.buffer_bytes)
            );
            Finding::needs(Status::Limit, CHECK, found, why, memlock_fix())
        }
        _ => {
            let found = format!(
                "RLIMIT_MEMLOCK is {limit}, enough for {}",
                size(t.buffer_bytes)
            );
            Finding::ok(CHECK, found, why)
        }
    }
}

fn memlock_fix() -> String {
    "run the daemon from its unit (sluice.service: AmbientCapabilities=CAP_IPC_LOCK, \
     LimitMEMLOCK at least buffer-mem); from a shell: add `sluice - memlock unlimited` to \
     /etc/security/limits.d/sluice.conf and log in again"
        .to_string()
}

/// `kernel.io_uring_disabled`: the reads sluice keeps in flight need io_uring.
pub fn io_uring(f: &Facts, t: &Target) -> Finding {
    const CHECK: &str = "io_uring";
    let why = format!(
        "each io-read thread keeps --read-depth O_DIRECT reads in flight through io_uring; \
         without it a thread waits for one chunk at a time and the disks idle between \
         reads, {}",
        t.at()
    );
    match f.io_uring_disabled {
        None => {
            let release = f.osrelease.as_deref().unwrap_or("unknown");
            let found = format!(
                "no kernel.io_uring_disabled (Linux {release}, before 6.6): io_uring is \
                 available where the kernel was built with it"
            );
            Finding::ok(CHECK, found, why)
        }
        Some(0) => Finding::ok(CHECK, "kernel.io_uring_disabled = 0: io_uring is on", why),
        Some(n) => {
            let found = format!(
                "kernel.io_uring_disabled = {n}: io_uring is {}",
                if n == 1 {
                    "only for members of kernel.io_uring_group"
                } else {
                    "off"
                }
            );
            let fix = sysctl_fix("kernel.io_uring_disabled", "0");
            Finding::needs(Status::Limit, CHECK, found, why, fix)
        }
    }
}

/// File systems that refuse `O_DIRECT` (tmpfs took it in Linux 6.6).
pub fn o_direct(f: &Facts, served: &str) -> Finding {
    const CHECK: &str = "o_direct";
    let why = "large files move by O_DIRECT straight between the disk and the NUMA-local \
               buffers; a file system that refuses it sends them through the page cache, \
               one more copy of every byte and write-back after the run";
    let Some(fs) = f.root_fs.as_deref() else {
        let found = format!("cannot tell the file system of {served} (/proc/self/mounts)");
        return Finding::ok(CHECK, found, why);
    };
    let new_tmpfs = kernel_at_least(f.osrelease.as_deref(), (6, 6));
    let refuses = fs == "ramfs" || (fs == "tmpfs" && !new_tmpfs) || fs.starts_with("fuse");
    let found = format!("{served} is on {fs}");
    if refuses {
        let fix = format!(
            "serve from a file system with direct I/O (xfs or ext4 on the NVMe drives): \
             `sluice serve --root DIR` there, and in /etc/sluice/sluice.toml `root = \"DIR\"` \
             (now {served})"
        );
        let found = format!("{found}, which refuses O_DIRECT on this kernel");
        return Finding::needs(Status::Advice, CHECK, found, why, fix);
    }
    Finding::ok(CHECK, format!("{found}: O_DIRECT works"), why)
}

/// Whether `release` (`6.8.0-45-generic`) is at least `min` (major, minor).
pub fn kernel_at_least(release: Option<&str>, min: (u32, u32)) -> bool {
    let Some(release) = release else {
        return false;
    };
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next().and_then(|p| p.parse::<u32>().ok());
    let minor = parts.next().and_then(|p| p.parse::<u32>().ok());
    matches!((major, minor), (Some(a), Some(b)) if (a, b) >= min)
}

/// The CPU frequency governor: anything but `performance` lowers the clock.
pub fn governor(f: &Facts, t: &Target) -> Finding {
    const CHECK: &str = "cpu_governor";
    let why = format!(
        "a governor other than performance lowers the clock between bursts and raises it \
         late; per-packet and checksum work {} needs every core at full clock",
        t.at()
    );
    if f.governors.is_empty() {
        let found = "no cpufreq in /sys/devices/system/cpu (a VM or a fixed clock)";
        return Finding::ok(CHECK, found, why);
    }
    let total: usize = f.governors.values().sum();
    let slow: Vec<String> = f
        .governors
        .iter()
        .filter(|(g, _)| g.as_str() != "performance")
        .map(|(g, n)| format!("{n} of {total} CPUs use {g}"))
        .collect();
    if slow.is_empty() {
        return Finding::ok(CHECK, format!("all {total} CPUs use performance"), why);
    }
    let fix = "cpupower frequency-set -g performance (package linux-cpupower), or `echo \
               performance | tee /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor`; \
               keep it with the firmware's performance profile or a boot-time unit";
    Finding::needs(Status::Limit, CHECK, slow.join(", "), why, fix)
}

/// Transparent huge pages: sluice asks for them on its buffer pools (MADV_HUGEPAGE).
pub fn thp(f: &Facts) -> Finding {
    const CHECK: &str = "thp";
    let why = "sluice asks for huge pages on its buffer pools (madvise); with THP off every \
               4 KiB of a pool takes its own TLB entry and DMA mapping";
    match f.thp.as_deref() {
        None => Finding::ok(CHECK, "no /sys/kernel/mm/transparent_hugepage", why),
        Some("never") => {
            let found = "transparent_hugepage/enabled is [never]";
            let fix = "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled; keep it \
                       with transparent_hugepage=madvise on the kernel command line";
            Finding::needs(Status::Advice, CHECK, found, why, fix)
        }
        Some(mode) => {
            let found = format!("transparent_hugepage/enabled is [{mode}]");
            Finding::ok(CHECK, found, why)
        }
    }
}
