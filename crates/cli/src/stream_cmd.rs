//! `sluice stream send|recv`: a live byte stream (a detector's output) through sluice's
//! channels, in order, with placement, compression, integrity and authentication.

use crate::cp_cmd::read_token;
use crate::exit::{bad_input, ExitCode};
use crate::plan_cmd::{parse_bytes, JobArgs, Side};
use crate::tls_args::{ClientTlsArgs, ServerTlsArgs};
use crate::topo_cmd::load_machine;
use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use sluice_engine::client::Endpoint;
use sluice_engine::codec::Planner;
use sluice_engine::stream::{receive_to, send_from, StreamOptions, DEFAULT_RECORD_BYTES};
use sluice_engine::{CompressMode, Populate, Runtime};
use sluice_wire::ElementSize;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::Arc;

/// Arguments of `sluice stream`.
#[derive(Debug, Args)]
pub struct StreamArgs {
    #[command(subcommand)]
    pub side: StreamSide,
}

/// Which end.
#[derive(Debug, Subcommand)]
pub enum StreamSide {
    /// Read a stream from stdin (or FILE, e.g. a named pipe) and send it.
    Send(SendArgs),
    /// Receive one stream and write it, in order, to stdout (or --output).
    Recv(RecvArgs),
}

/// Arguments of `sluice stream send`.
#[derive(Debug, Args)]
pub struct SendArgs {
    /// The receiver: `sluice://HOST:PORT`.
    pub to: String,
    /// Input: a file or named pipe; stdin when absent or `-`.
    pub input: Option<PathBuf>,
    /// Bytes per record (seed 001's 2560x2160 16-bit frame by default).
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_RECORD_BYTES.to_string())]
    pub record_size: String,
    /// Compression: none, lz4, zstd[:LEVEL] or auto.
    #[arg(long, value_name = "CODEC", default_value = "none")]
    pub compress: String,
    /// Bit-shuffle each record as elements of N bytes (1, 2, 4 or 8) before it is
    /// compressed, so that typed data compresses (2 for 16-bit detector counts: LZ4 then
    /// shrinks a noisy frame instead of sending it raw). Needs --compress; the record
    /// size must be a multiple of N. A receiver that cannot un-shuffle gets the records
    /// compressed as they are.
    #[arg(long, value_name = "N", value_parser = parse_shuffle)]
    pub shuffle: Option<ElementSize>,
    /// File holding the shared secret.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    #[command(flatten)]
    pub job: JobArgs,
    /// Print the summary as JSON on stderr.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub tls: ClientTlsArgs,
}

/// Arguments of `sluice stream recv`.
#[derive(Debug, Args)]
pub struct RecvArgs {
    /// Address to listen on (port 0 picks one; the address is printed on stderr).
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:7879")]
    pub listen: SocketAddr,
    /// Write the stream here instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// File holding the shared secret the sender must prove it knows.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Allow a non-loopback address without a token.
    #[arg(long)]
    pub insecure_no_auth: bool,
    #[command(flatten)]
    pub job: JobArgs,
    /// Print the listening address (with the certificate's fingerprint) and the summary
    /// as JSON lines on stderr.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub tls: ServerTlsArgs,
}

/// `--shuffle N`: an element size of 1, 2, 4 or 8 bytes.
fn parse_shuffle(s: &str) -> Result<ElementSize, String> {
    s.parse::<usize>()
        .ok()
        .and_then(ElementSize::from_bytes)
        .ok_or_else(|| format!("{s:?} is not an element size: expected 1, 2, 4 or 8 (bytes)"))
}

/// Streams need slots that hold a whole record: 16 MiB unless --chunk-size says otherwise.
/// Their net threads run the codec of their own records: no codec threads by default.
fn stream_runtime(job: &JobArgs, side: Side) -> Result<Arc<Runtime>> {
    let mut job = job.clone();
    // Its default chunk size follows (`JobArgs::chunk_size`).
    job.planner = Planner::Stream;
    let plan = job.plan(&load_machine("this")?, side)?;
    job.apply_adapt();
    Ok(Arc::new(
        // A stream cycles through its whole pool for as long as it runs (a receiver's
        // slots go round as records arrive): prefaulted at start, like the daemon's, so
        // that no record pays a page fault (on-demand pages cost the Python stream 10-25 %
        // of its loopback rate; see ARCHITECTURE's "a daemon prefaults").
        Runtime::new(plan, Populate::Now).context("allocating buffer pools")?,
    ))
}

/// Runs `sluice stream`.
pub fn run(args: &StreamArgs) -> Result<ExitCode> {
    match &args.side {
        StreamSide::Send(a) => send(a),
        StreamSide::Recv(a) => recv(a),
    }
}

fn send(a: &SendArgs) -> Result<ExitCode> {
    let addr = match Endpoint::parse(&a.to).map_err(bad_input)? {
        Endpoint::Remote { addr, .. } => addr,
        Endpoint::Local(p) => {
            return Err(bad_input(format!(
                "{p:?} is not a receiver: expected sluice://HOST:PORT"
            )))
        }
    };
    let record = parse_bytes("--record-size", &a.record_size)?;
    let compress = a.compress.parse::<CompressMode>().map_err(bad_input)?;
    if a.shuffle.is_some() && compress == CompressMode::None {
        return Err(bad_input(
            "--shuffle needs --compress (lz4, zstd or auto): it only helps a codec",
        ));
    }
    let opts = StreamOptions {
        streams: u16::try_from(a.job.streams())
            .map_err(|_| bad_input("--streams is too large"))?
            .max(1),
        record_bytes: u32::try_from(record)
            .map_err(|_| bad_input(format!("--record-size {record} is too large")))?,
        compress,
        shuffle: a.shuffle,
        token: a.token_file.as_ref().map(read_token).transpose()?,
        tls: a.tls.client_tls()?,
    };
    let runtime = stream_runtime(&a.job, Side::Send)?;
    let summary = match &a.input {
        Some(p) if p.as_os_str() != "-" => {
            let f =
                std::fs::File::open(p).map_err(|e| bad_input(format!("{}: {e}", p.display())))?;
            send_from(&addr, &opts, runtime, f)?
        }
        _ => send_from(&addr, &opts, runtime, std::io::stdin().lock())?,
    };
    report(&summary, a.json);
    Ok(ExitCode::Ok)
}

fn recv(a: &RecvArgs) -> Result<ExitCode> {
    let token = a.token_file.as_ref().map(read_token).transpose()?;
    if !a.listen.ip().is_loopback() && token.is_none() && !a.insecure_no_auth {
        return Err(bad_input(format!(
            "--listen {} is not a loopback address: give --token-file FILE (or --insecure-no-auth)",
            a.listen
        )));
    }
    let tls = a.tls.server_tls(a.listen)?;
    let runtime = stream_runtime(&a.job, Side::Recv)?;
    let listener =
        TcpListener::bind(a.listen).with_context(|| format!("cannot listen on {}", a.listen))?;
    let addr = listener.local_addr()?;
    if a.json {
        crate::output::stderr_line(&format!(
            "{}",
            serde_json::json!({ "listen": addr.to_string(), "fingerprint": tls.fingerprint().to_string() })
        ));
    } else {
        crate::output::stderr_line(&format!(
            "sluice: waiting for a stream on {addr} (certificate {})",
            tls.fingerprint()
        ));
    }
    let summary = match &a.output {
        Some(p) => {
            let f =
                std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?;
            receive_to(
                &listener,
                token,
                &tls,
                runtime,
                std::io::BufWriter::with_capacity(1 << 20, f),
            )?
        }
        None => receive_to(&listener, token, &tls, runtime, std::io::stdout().lock())?,
    };
    report(&summary, a.json);
    Ok(ExitCode::Ok)
}

fn report(s: &sluice_engine::stream::StreamSummary, json: bool) {
    if json {
        crate::output::stderr_line(&serde_json::to_string(s).unwrap_or_default());
    } else {
        let resent = if s.records_resent > 0 {
            format!(", {} sent again (damaged on the way)", s.records_resent)
        } else {
            String::new()
        };
        crate::output::stderr_line(&format!(
            "sluice: {} record(s), {:.1} MiB ({:.1} MiB on the wire) in {:.2} s{resent}",
            s.records,
            s.bytes as f64 / 1048576.0,
            s.wire_bytes as f64 / 1048576.0,
            s.seconds
        ));
    }
}
