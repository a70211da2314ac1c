//! `sluice-delayline`: a user-space WAN emulator for sluice's benchmarks (the kernel here
//! has no netem). Two network namespaces, a TUN device per link in each, and a forwarder
//! thread per direction that holds every packet for a fixed one-way delay, with an
//! optional rate limit (serialisation behind a tail-drop queue) and seeded random loss.
//!
//! ```text
//! ns A: dla1 SUBNET.1.1 --> [ring: shaper, delay] --> dlb1 SUBNET.1.2 :ns B
//!                       <-- [ring: shaper, delay] <--
//! ```
//!
//! Bounded: each direction holds its packets in one ring allocated at start (`--ring-mib`,
//! by default rate x (delay + queue) x 1.5 within 32 MiB..1 GiB). A packet that finds the
//! ring full is still read from its TUN device and dropped at the tail, counted as
//! `ring_full` in the counters printed on exit: a loss of the forwarder, not of the path,
//! which a benchmark must see as 0. The rate limit's own queue (`--queue-ms`, default one
//! RTT) drops at the tail too (`queue_full`): that one is the path's router.
//!
//! With TSO offload (the default) the kernel hands over 64 KiB super-packets: the rate
//! counts every segment's headers, and random loss drops a super-packet of n segments
//! with 1 - (1 - p)^n, so loss events come at the per-segment rate, each a burst.
//!
//! Bench tooling, not part of the product. See bench/delay/prove.sh for its proof.

mod config;
mod forward;
mod ring;
mod shaper;
mod tun;

use anyhow::{Context, Result};
use clap::Parser;
use config::{Cli, Command, Config};
use forward::{Direction, Stats, PACKET_BYTES_MAX};
use ring::Ring;
use shaper::Shaper;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use tun::{Namespaces, Tun};

fn main() {
    let cli = Cli::parse();
    let Command::Up(args) = cli.command;
    let config = match args.check() {
        Ok(c) => c,
        Err(line) => {
            eprintln!("sluice-delayline: {line}");
            std::process::exit(2);
        }
    };
    if let Err(e) = up(&config) {
        eprintln!("sluice-delayline: {e:#}");
        std::process::exit(1);
    }
}

/// One link: its two devices.
struct Link {
    a: Arc<Tun>,
    b: Arc<Tun>,
}

fn up(c: &Config) -> Result<()> {
    let mut namespaces = Namespaces::default();
    namespaces.ensure(&c.ns_a)?;
    namespaces.ensure(&c.ns_b)?;
    let mut links = Vec::new();
    for k in 1..=c.links {
        links.push(open_link(c, k)?);
    }
    let signals = block_signals()?;
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    for (i, link) in links.iter().enumerate() {
        for (j, (from, to)) in [(&link.a, &link.b), (&link.b, &link.a)]
            .into_iter()
            .enumerate()
        {
            let stream = (i * 2 + j) as u64;
            let d = Direction {
                input: from.raw(),
                output: to.raw(),
                shaper: Shaper::new(
                    c.delay_ns,
                    c.rate_bps,
                    c.queue_bytes,
                    c.loss,
                    c.seed.wrapping_mul(0x1000_0001).wrapping_add(stream),
                ),
                ring: Ring::new(c.ring_bytes, PACKET_BYTES_MAX),
                scratch: vec![0; PACKET_BYTES_MAX],
            };
            let stats = Arc::new(Stats::default());
            let realtime = c.realtime;
            let (s, stop) = (Arc::clone(&stats), Arc::clone(&stop));
            let name = format!("dl{}{}", i + 1, if j == 0 { "ab" } else { "ba" });
            let handle = std::thread::Builder::new()
                .name(name.clone())
                .spawn(move || {
                    if let Err(e) = forward::tune_thread(realtime) {
                        eprintln!("sluice-delayline: forwarder at normal priority (real-time refused: {e}); --sched normal silences this");
                    }
                    forward::run(d, &s, &stop)
                })?;
            threads.push((name, stats, handle));
        }
    }
    println!("{}", ready_line(c));
    wait_for(&signals)?;
    stop.store(true, Relaxed);
    let mut parts = Vec::new();
    for (name, stats, handle) in threads {
        if handle.join().is_err() {
            eprintln!("sluice-delayline: forwarder {name} panicked");
        }
        parts.push(stats_json(&name, &stats));
    }
    println!("{{\"directions\":[{}]}}", parts.join(","));
    drop(links);
    Ok(())
}

fn open_link(c: &Config, k: u32) -> Result<Link> {
    let (s0, s1) = c.subnet;
    let (addr_a, addr_b) = (format!("{s0}.{s1}.{k}.1"), format!("{s0}.{s1}.{k}.2"));
    let a = tun::open_in(&c.ns_a, &format!("dla{k}"), c.offload)?;
    let b = tun::open_in(&c.ns_b, &format!("dlb{k}"), c.offload)?;
    tun::configure(&c.ns_a, &a, c.mtu, &addr_a, &addr_b)
        .with_context(|| format!("link {k}, side A"))?;
    tun::configure(&c.ns_b, &b, c.mtu, &addr_b, &addr_a)
        .with_context(|| format!("link {k}, side B"))?;
    Ok(Link {
        a: Arc::new(a),
        b: Arc::new(b),
    })
}

fn ready_line(c: &Config) -> String {
    let (s0, s1) = c.subnet;
    let links: Vec<String> = (1..=c.links)
        .map(|k| format!("dla{k} {s0}.{s1}.{k}.1 <-> dlb{k} {s0}.{s1}.{k}.2"))
        .collect();
    format!(
        "ready {} <-> {}: {}; one-way delay {} ms, rate {}, queue {} bytes, loss {}, mtu {}, offload {}, sched {}, ring {} MiB per direction",
        c.ns_a,
        c.ns_b,
        links.join(", "),
        c.delay_ns as f64 / 1e6,
        if c.rate_bps == 0 { "none".to_string() } else { format!("{} bit/s", c.rate_bps) },
        c.queue_bytes,
        c.loss,
        c.mtu,
        if c.offload { "on" } else { "off" },
        if c.realtime { "fifo" } else { "normal" },
        c.ring_bytes >> 20
    )
}

fn stats_json(name: &str, s: &Stats) -> String {
    let v = |a: &std::sync::atomic::AtomicU64| a.load(Relaxed);
    format!(
        "{{\"direction\":\"{name}\",\"packets_in\":{},\"wire_bytes_in\":{},\"packets_out\":{},\"wire_bytes_out\":{},\"lost\":{},\"queue_full\":{},\"ring_full\":{},\"write_errors\":{},\"ring_peak_bytes\":{}}}",
        v(&s.packets_in),
        v(&s.wire_bytes_in),
        v(&s.packets_out),
        v(&s.wire_bytes_out),
        v(&s.lost),
        v(&s.queue_full),
        v(&s.ring_full),
        v(&s.write_errors),
        v(&s.ring_peak_bytes)
    )
}

/// Blocks SIGINT and SIGTERM in this thread (and the forwarders it starts), so that only
/// `wait_for` receives them.
fn block_signals() -> Result<libc::sigset_t> {
    // SAFETY: a zeroed sigset_t is valid storage; sigemptyset initialises it.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: set is valid; the signal numbers are valid.
    let rc = unsafe {
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut())
    };
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(rc)).context("pthread_sigmask");
    }
    Ok(set)
}

fn wait_for(set: &libc::sigset_t) -> Result<()> {
    let mut sig: libc::c_int = 0;
    // SAFETY: set holds blocked signals; sig is valid storage.
    let rc = unsafe { libc::sigwait(set, &mut sig) };
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(rc)).context("sigwait");
    }
    Ok(())
}
