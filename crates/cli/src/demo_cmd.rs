//! `sluice demo`: the main job on an embedded default. Starts a daemon on loopback,
//! generates a data set (one big file and a tree of small files), pushes it with
//! `--verify`, compares both trees byte for byte and prints the summary.

use crate::cp_cmd::job_options;
use crate::exit::ExitCode;
use crate::plan_cmd::{parse_bytes, JobArgs, Side};
use crate::topo_cmd::load_machine;
use anyhow::{bail, Context, Result};
use clap::Args;
use sluice_engine::client::{copy, CopyConfig, Endpoint};
use sluice_engine::daemon::{serve, ServeConfig};
use sluice_engine::stats::Stats;
use sluice_engine::{Populate, Runtime, SessionOptions, Summary};
use sluice_topology::Machine;
use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Arguments of `sluice demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Working directory (a fresh one under the system temp dir by default; kept).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Size of the big file.
    #[arg(long, value_name = "BYTES", default_value = "1GiB")]
    pub big: String,
    /// Number of small files (0-64 KiB each, in nested directories).
    #[arg(long, value_name = "N", default_value_t = 5000)]
    pub small_files: u32,
    #[command(flatten)]
    pub job: JobArgs,
    /// Print the transfer summary as JSON.
    #[arg(long)]
    pub json: bool,
}

/// xorshift64*: deterministic, fast, incompressible-looking bytes.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let v = self.next().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

/// Writes the demo data set under `src`; returns (files, bytes).
pub fn generate(src: &Path, big_bytes: u64, small_files: u32) -> Result<(u64, u64)> {
    std::fs::create_dir_all(src)?;
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let mut buf = vec![0u8; 8 << 20];
    let mut f = std::fs::File::create(src.join("big.bin"))?;
    let mut left = big_bytes;
    while left > 0 {
        let n = usize::try_from(left).map_or(buf.len(), |l| l.min(buf.len()));
        rng.fill(&mut buf[..n]);
        f.write_all(&buf[..n])?;
        left -= n as u64;
    }
    let mut bytes = big_bytes;
    for i in 0..small_files {
        let dir = src.join(format!("tree/d{:02}/e{:02}", i % 37, (i / 37) % 11));
        if i < 37 * 11 {
            std::fs::create_dir_all(&dir)?;
        }
        let len = (rng.next() % (64 << 10)) as usize;
        rng.fill(&mut buf[..len]);
        std::fs::write(dir.join(format!("f{i:06}.dat")), &buf[..len])?;
        bytes += len as u64;
    }
    std::fs::create_dir_all(src.join("tree/empty-dir"))?;
    std::fs::write(src.join("tree/empty.txt"), b"")?;
    Ok((u64::from(small_files) + 2, bytes))
}

/// Compares two trees: same entries, sizes and bytes; returns files compared.
pub fn compare_trees(a: &Path, b: &Path) -> Result<u64> {
    let mut stack = vec![PathBuf::new()];
    let mut files = 0;
    while let Some(rel) = stack.pop() {
        let (da, db) = (a.join(&rel), b.join(&rel));
        let mut names: Vec<_> = std::fs::read_dir(&da)?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<Result<_, _>>()?;
        names.sort();
        let mut other: Vec<_> = std::fs::read_dir(&db)?
            .map(|e| e.map(|e| e.file_name()))
            .collect::<Result<_, _>>()?;
        other.sort();
        if names != other {
            bail!(
                "{} and {} list different entries",
                da.display(),
                db.display()
            );
        }
        for n in names {
            let r = rel.join(&n);
            let ma = std::fs::symlink_metadata(a.join(&r))?;
            if ma.is_dir() {
                stack.push(r);
            } else {
                let (x, y) = (std::fs::read(a.join(&r))?, std::fs::read(b.join(&r))?);
                if x != y {
                    bail!("{} differs", r.display());
                }
                files += 1;
            }
        }
    }
    Ok(files)
}

/// Runs `sluice demo`.
pub fn run(args: &DemoArgs) -> Result<ExitCode> {
    let big = parse_bytes("--big", &args.big)?;
    let dir = match &args.dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("sluice-demo-{}", std::process::id())),
    };
    let (src, dst) = (dir.join("src"), dir.join("dst"));
    prepare(&src, &dst, big, args.small_files)?;
    let machine = load_machine("this")?;
    let addr = start_daemon(args, &machine, &dst)?;
    crate::output::stderr_line(&format!(
        "demo: daemon on {addr}, pushing {}/ with --verify",
        src.display()
    ));
    args.job.apply_adapt();
    // As the real ones: the client populates on demand, the daemon at start-up.
    let client_runtime = Arc::new(Runtime::new(
        args.job.plan(&machine, Side::Send)?,
        Populate::OnDemand,
    )?);
    let cfg = CopyConfig {
        sources: vec![Endpoint::Local(format!("{}/", src.display()))],
        dest: Endpoint::parse(&format!("sluice://{addr}/")).map_err(|e| anyhow::anyhow!(e))?,
        opts: SessionOptions {
            recursive: true,
            verify: true,
            ..job_options(&args.job)?
        },
        token: None,
        tls: sluice_engine::net::tls::ClientTls::default(),
        far: None,
    };
    let stats = Arc::new(Stats::new());
    copy(&cfg, &client_runtime, &stats)?;
    let summary = stats.summary(client_runtime.plan());
    let compared = compare_trees(&src, &dst).context("comparing source and destination")?;
    report(args, &summary, cfg.opts.streams, compared, &dst)?;
    Ok(if summary.files_failed > 0 {
        ExitCode::Failed
    } else {
        ExitCode::Ok
    })
}

/// Clears the destination and generates the data set.
fn prepare(src: &Path, dst: &Path, big: u64, small_files: u32) -> Result<()> {
    if dst.exists() {
        std::fs::remove_dir_all(dst).with_context(|| format!("clearing {}", dst.display()))?;
    }
    std::fs::create_dir_all(dst)?;
    crate::output::stderr_line(&format!(
        "demo: generating {} MiB + {small_files} small files in {}",
        big >> 20,
        src.display()
    ));
    let (files, bytes) = generate(src, big, small_files)?;
    crate::output::stderr_line(&format!("demo: {files} files, {} MiB", bytes >> 20));
    Ok(())
}

/// Starts a daemon serving `dst` on a loopback port; returns its address.
fn start_daemon(args: &DemoArgs, machine: &Machine, dst: &Path) -> Result<SocketAddr> {
    let server_runtime = Arc::new(Runtime::new(
        args.job.plan(machine, Side::Recv)?,
        Populate::Now,
    )?);
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let cfg = ServeConfig {
        root: dst.to_path_buf(),
        token: None,
        io_threads: args.job.io_threads,
        read_depth: args.job.read_depth,
        max_connections: 64,
        runtime: server_runtime,
        nic_addresses: Vec::new(),
        tls: sluice_engine::net::tls::ServerTls::ephemeral(sluice_engine::net::tls::Encrypt::Auto)?,
    };
    std::thread::Builder::new()
        .name("daemon".into())
        .spawn(move || {
            if let Err(e) = serve(listener, cfg) {
                crate::output::stderr_line(&format!("demo: daemon failed: {e}"));
            }
        })?;
    Ok(addr)
}

/// Prints the summary (JSON, or two lines).
fn report(
    args: &DemoArgs,
    summary: &Summary,
    streams: u16,
    compared: u64,
    dst: &Path,
) -> Result<()> {
    if args.json {
        let _ = crate::output::stdout(&(serde_json::to_string(summary)? + "\n"));
        return Ok(());
    }
    let _ = crate::output::stdout(&(format!(
        "demo: moved {} files ({} directories, {} links), {:.1} MiB in {:.2} s ({:.1} MiB/s) over {streams} stream(s), pipeline {}, policy {}",
        summary.files,
        summary.dirs,
        summary.symlinks,
        summary.bytes as f64 / 1048576.0,
        summary.seconds,
        summary.throughput_bytes_per_sec / 1048576.0,
        summary.pipeline,
        summary.plan.policy
    ) + "\n"));
    let _ = crate::output::stdout(
        &(format!(
            "demo: verified: {compared} files byte-identical in {}",
            dst.display()
        ) + "\n"),
    );
    Ok(())
}
