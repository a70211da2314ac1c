//! TUN devices opened inside a network namespace, and the namespaces themselves.
//! The only kernel-facing code besides the forwarding loop's read/write/ppoll.

use anyhow::{bail, Context, Result};
use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::process::Command;

// <linux/if_tun.h>
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const TUNSETOFFLOAD: libc::c_ulong = 0x4004_54d0;
const IFF_TUN: i16 = 0x0001;
const IFF_NO_PI: i16 = 0x1000;
const IFF_VNET_HDR: i16 = 0x4000;
const TUN_F_CSUM: libc::c_uint = 0x01;
const TUN_F_TSO4: libc::c_uint = 0x02;
const TUN_F_TSO6: libc::c_uint = 0x04;

/// Bytes of the `virtio_net_hdr` in front of every packet read or written.
pub const VNET_HDR_BYTES: usize = 10;

/// An open TUN device (it exists as long as this fd is open).
pub struct Tun {
    fd: OwnedFd,
    /// Its name inside its namespace.
    pub name: String,
}

impl Tun {
    /// The raw fd, for read/write/ppoll.
    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Namespaces this process made, deleted again when dropped.
#[derive(Default)]
pub struct Namespaces {
    made: Vec<String>,
}

impl Namespaces {
    /// Makes `name` unless it exists.
    pub fn ensure(&mut self, name: &str) -> Result<()> {
        if Path::new("/run/netns").join(name).exists() {
            return Ok(());
        }
        ip(&["netns", "add", name]).with_context(|| format!("cannot make namespace {name}"))?;
        self.made.push(name.to_string());
        ip(&["-n", name, "link", "set", "lo", "up"])
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for n in &self.made {
            if let Err(e) = ip(&["netns", "del", n]) {
                eprintln!("sluice-delayline: could not delete namespace {n}: {e:#}");
            }
        }
    }
}

/// Runs `ip ARGS`, failing with its stderr.
pub fn ip(args: &[&str]) -> Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("cannot run `ip` (iproute2)")?;
    if !out.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Opens TUN device `name` inside namespace `ns` (this thread enters it and comes back).
pub fn open_in(ns: &str, name: &str, offload: bool) -> Result<Tun> {
    let home = File::open("/proc/thread-self/ns/net")
        .context("cannot open this thread's network namespace")?;
    let there = File::open(Path::new("/run/netns").join(ns))
        .with_context(|| format!("no namespace {ns}"))?;
    set_ns(there.as_raw_fd()).with_context(|| format!("cannot enter namespace {ns}"))?;
    let opened = wait_name_free(name).and_then(|()| open_here(name, offload));
    set_ns(home.as_raw_fd()).context("cannot return to the original network namespace")?;
    opened.with_context(|| format!("cannot open TUN device {name} in namespace {ns}"))
}

fn set_ns(fd: RawFd) -> Result<()> {
    // SAFETY: fd is an open namespace file; setns only changes this thread's namespace.
    if unsafe { libc::setns(fd, libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    Ok(())
}

/// A device of the same name that a forwarder which just exited left is still being torn
/// down: wait (up to 3 s) rather than attach to it.
fn wait_name_free(name: &str) -> Result<()> {
    let c_name = CString::new(name)?;
    for _ in 0..300 {
        // SAFETY: a valid C string; if_nametoindex only looks the name up.
        if unsafe { libc::if_nametoindex(c_name.as_ptr()) } == 0 {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    bail!("device {name} already exists (is another sluice-delayline joining these namespaces?)")
}

fn open_here(name: &str, offload: bool) -> Result<Tun> {
    let path = CString::new("/dev/net/tun")?;
    // SAFETY: a valid C string; the fd returned is owned below.
    let raw = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_RDWR | libc::O_CLOEXEC | libc::O_NONBLOCK,
        )
    };
    if raw < 0 {
        return Err(std::io::Error::last_os_error()).context("/dev/net/tun");
    }
    // SAFETY: raw is a fresh fd nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // struct ifreq: 16 bytes of name, then a union whose first member is the short flags
    let mut ifr = [0u8; 40];
    if name.is_empty() || name.len() >= 16 {
        bail!("device name {name:?}: 1 to 15 bytes");
    }
    ifr[..name.len()].copy_from_slice(name.as_bytes());
    ifr[16..18].copy_from_slice(&(IFF_TUN | IFF_NO_PI | IFF_VNET_HDR).to_ne_bytes());
    // SAFETY: ifr is a 40-byte struct ifreq the kernel reads and writes in place.
    if unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETIFF, ifr.as_mut_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error()).context("TUNSETIFF");
    }
    let flags = if offload {
        TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6
    } else {
        0
    };
    // SAFETY: TUNSETOFFLOAD takes its argument by value.
    if unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETOFFLOAD, libc::c_ulong::from(flags)) } != 0 {
        return Err(std::io::Error::last_os_error()).context("TUNSETOFFLOAD");
    }
    Ok(Tun {
        fd,
        name: name.to_string(),
    })
}

/// Gives `tun` (in `ns`) its MTU, address `local` with `peer` on the other end, and up.
pub fn configure(ns: &str, tun: &Tun, mtu: u32, local: &str, peer: &str) -> Result<()> {
    let mtu = mtu.to_string();
    ip(&[
        "-n",
        ns,
        "link",
        "set",
        "dev",
        &tun.name,
        "mtu",
        &mtu,
        "txqueuelen",
        "1000",
        "up",
    ])?;
    ip(&[
        "-n",
        ns,
        "addr",
        "add",
        local,
        "peer",
        &format!("{peer}/32"),
        "dev",
        &tun.name,
    ])
}
