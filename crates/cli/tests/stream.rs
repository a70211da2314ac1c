//! `sluice stream` and `--compress` end to end with the real binary over loopback.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_sluice");

/// Kills its child when dropped, so no test leaves a process behind.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Deterministic data: `compressible` repeats a pattern, otherwise xorshift noise.
fn data(n: usize, compressible: bool) -> Vec<u8> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    (0..n)
        .map(|i| {
            if compressible && (i / 4096) % 2 == 0 {
                u8::try_from(i % 251).unwrap_or(0)
            } else {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x.to_le_bytes()[0]
            }
        })
        .collect()
}

/// Starts `sluice stream recv` on a free port writing to `out`; returns it and its address.
fn receiver(out: &std::path::Path, extra: &[&str]) -> (Guard, String) {
    let mut child = Command::new(BIN)
        .args([
            "stream",
            "recv",
            "--listen",
            "127.0.0.1:0",
            "--json",
            "--buffer-mem",
            "16MiB",
        ])
        .args(["--chunk-size", "1MiB", "--output"])
        .arg(out)
        .args(extra)
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the receiver");
    let stderr = child.stderr.take().expect("stderr");
    let mut reader = BufReader::new(stderr);
    let mut line = String::new();
    reader
        .read_line(&mut line)
        .expect("the receiver's address line");
    // Keep draining stderr so the receiver's summary line has somewhere to go.
    std::thread::spawn(move || std::io::copy(&mut reader, &mut std::io::sink()));
    let v: serde_json::Value = serde_json::from_str(&line).expect("JSON address line");
    (
        Guard(child),
        v["listen"].as_str().expect("listen").to_string(),
    )
}

fn send(addr: &str, input: &[u8], extra: &[&str]) -> std::process::Output {
    send_env(addr, input, extra, &[])
}

/// `send`, with `env` set for the sender.
fn send_env(
    addr: &str,
    input: &[u8],
    extra: &[&str],
    env: &[(&str, &str)],
) -> std::process::Output {
    let mut child = Command::new(BIN)
        .args([
            "stream",
            "send",
            &format!("sluice://{addr}"),
            "--json",
            "--buffer-mem",
            "16MiB",
        ])
        .args(["--chunk-size", "1MiB", "--record-size", "200000"])
        .args(extra)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the sender");
    let mut stdin = child.stdin.take().expect("stdin");
    let input = input.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().expect("sender output");
    let _ = feeder.join();
    out
}

/// The receiver `rx` ends well and wrote exactly `input`, in order, to `out`.
fn assert_received(rx: Guard, out: &std::path::Path, input: &[u8], what: &str) {
    assert!(
        wait_exit(rx, Duration::from_secs(60)).success(),
        "{what}: receiver failed"
    );
    let got = std::fs::read(out).expect("output");
    assert!(
        got == input,
        "{what}: {} bytes out for {} in, or reordered",
        got.len(),
        input.len()
    );
}

fn wait_exit(mut g: Guard, limit: Duration) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(s) = g.0.try_wait().expect("wait") {
            return s;
        }
        assert!(
            start.elapsed() < limit,
            "the receiver did not finish in {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn stream_preserves_order_and_bytes_for_every_codec_and_data_kind() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (i, (codec, compressible)) in [
        ("none", false),
        ("lz4", true),
        ("lz4", false),
        ("zstd:3", true),
        ("auto", true),
    ]
    .into_iter()
    .enumerate()
    {
        let input = data(3_000_017, compressible);
        let out = dir.path().join(format!("out{i}"));
        let (rx, addr) = receiver(&out, &[]);
        let sent = send(&addr, &input, &["--compress", codec, "--streams", "3"]);
        assert!(
            sent.status.success(),
            "{codec}: {}",
            String::from_utf8_lossy(&sent.stderr)
        );
        assert_received(rx, &out, &input, codec);
        let summary = summary_of(&sent.stderr);
        let (bytes, wire) = (
            summary["bytes"].as_u64().unwrap(),
            summary["wire_bytes"].as_u64().unwrap(),
        );
        assert_eq!(bytes, input.len() as u64);
        if codec == "lz4" || codec == "zstd:3" {
            if compressible {
                assert!(
                    wire < bytes,
                    "{codec}: compressible data shrinks on the wire ({wire} of {bytes})"
                );
            } else {
                assert_eq!(wire, bytes, "{codec}: incompressible chunks travel raw");
            }
        }
    }
}

#[test]
fn an_empty_stream_arrives_empty() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("empty");
    let (rx, addr) = receiver(&out, &[]);
    let sent = send(&addr, &[], &[]);
    assert!(
        sent.status.success(),
        "{}",
        String::from_utf8_lossy(&sent.stderr)
    );
    assert!(wait_exit(rx, Duration::from_secs(30)).success());
    assert_eq!(std::fs::metadata(&out).expect("output").len(), 0);
}

#[test]
fn a_killed_receiver_gives_the_sender_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("cut");
    let (mut rx, addr) = receiver(&out, &[]);
    let mut child = Command::new(BIN)
        .args([
            "stream",
            "send",
            &format!("sluice://{addr}"),
            "--buffer-mem",
            "16MiB",
        ])
        .args(["--chunk-size", "1MiB", "--record-size", "200000"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the sender");
    let mut stdin = child.stdin.take().expect("stdin");
    // Some records through, then the receiver dies while the producer keeps writing.
    stdin
        .write_all(&data(1_000_000, false))
        .expect("first records");
    std::thread::sleep(Duration::from_millis(300));
    rx.0.kill().expect("kill the receiver");
    let feeder = std::thread::spawn(move || {
        let chunk = data(1 << 20, false);
        for _ in 0..200 {
            if stdin.write_all(&chunk).is_err() {
                break;
            }
        }
    });
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the sender hung after the receiver died"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let _ = feeder.join();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut err)
        .expect("stderr");
    assert!(!status.success(), "the sender must fail");
    assert!(
        err.contains("closed the stream")
            || err.contains("Connection reset")
            || err.contains("Broken pipe"),
        "the error says the receiver went away: {err}"
    );
}

/// `n` 16-bit counts, little-endian: Poisson noise (its normal approximation, close at
/// these counts) around a smooth image of about 1000 counts, rows of 1280.
fn poisson_counts(n: usize) -> Vec<u8> {
    poisson_counts_around(n, 1000.0)
}

/// [`poisson_counts`] around `mean` (at least 100: the approximation's).
fn poisson_counts_around(n: usize, mean: f64) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut uniform = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 11) as f64 / (1u64 << 53) as f64
    };
    (0..n)
        .flat_map(|i| {
            let (row, col) = ((i / 1280) as f64, (i % 1280) as f64);
            let lambda = mean * (1.0 + 0.3 * (col / 300.0).sin() * (row / 250.0).cos());
            let normal: f64 = (0..12).map(|_| uniform()).sum::<f64>() - 6.0;
            // Counts of 500 to 1500 and noise of a few times 40: within u16.
            #[allow(clippy::cast_possible_truncation)]
            let count = (lambda + lambda.sqrt() * normal).round() as u16;
            count.to_le_bytes()
        })
        .collect()
}

/// Sends `input` with `extra` options to a fresh receiver: the sender's summary, once
/// the receiver wrote exactly `input`.
fn stream_through(input: &[u8], extra: &[&str], what: &str) -> serde_json::Value {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out");
    let (rx, addr) = receiver(&out, &[]);
    let sent = send(&addr, input, extra);
    assert!(
        sent.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&sent.stderr)
    );
    assert_received(rx, &out, input, what);
    summary_of(&sent.stderr)
}

#[test]
fn shuffle_makes_poisson_u16_frames_compress_with_lz4() {
    // Twenty 200,000-byte records of 16-bit counts.
    let input = poisson_counts(2_000_000);
    let ratio = |s: &serde_json::Value| {
        assert_eq!(s["bytes"].as_u64(), Some(input.len() as u64));
        input.len() as f64 / s["wire_bytes"].as_f64().expect("wire_bytes")
    };
    let lz4 = ratio(&stream_through(&input, &["--compress", "lz4"], "lz4"));
    let args = ["--compress", "lz4", "--shuffle", "2", "--streams", "3"];
    let shuffled = ratio(&stream_through(&input, &args, "lz4 --shuffle 2"));
    let args = ["--compress", "zstd:3", "--shuffle", "2"];
    let zstd = ratio(&stream_through(&input, &args, "zstd:3 --shuffle 2"));
    eprintln!("Poisson uint16 stream: lz4 {lz4:.3}, lz4 --shuffle 2 {shuffled:.3}, zstd:3 --shuffle 2 {zstd:.3}");
    assert!(lz4 < 1.05, "LZ4 alone sends the noisy counts raw: {lz4:.3}");
    assert!(
        shuffled > 1.5,
        "bit-shuffled, LZ4 squeezes them: {shuffled:.3}"
    );
    assert!(zstd > 1.5, "and so does zstd: {zstd:.3}");
}

#[test]
fn zstd_records_come_back_whole_byte_or_bit_shuffled() {
    // Counts about 100 and about 3000, where zstd's trial finds the byte-shuffle smaller
    // on large chunks (the engine's codec tests check which one it picks): each stream
    // arrives byte for byte.
    for mean in [100.0, 3000.0] {
        let input = poisson_counts_around(1_000_000, mean);
        let what = format!("zstd:1 --shuffle 2, mean {mean}");
        let args = ["--compress", "zstd:1", "--shuffle", "2", "--streams", "2"];
        let s = stream_through(&input, &args, &what);
        let ratio = input.len() as f64 / s["wire_bytes"].as_f64().expect("wire_bytes");
        eprintln!("{what}: {ratio:.3}");
        assert!(ratio > 1.5, "{what}: {ratio:.3}");
    }
}

#[test]
fn shuffle_needs_a_codec_an_element_size_and_whole_elements_per_record() {
    for (extra, says) in [
        (&["--shuffle", "2"][..], "--shuffle needs --compress"),
        (
            &["--shuffle", "3", "--compress", "lz4"][..],
            "not an element size",
        ),
        (
            &[
                "--shuffle",
                "4",
                "--compress",
                "lz4",
                "--record-size",
                "200002",
            ][..],
            "not a multiple of the shuffle's 4-byte elements",
        ),
    ] {
        // Each is refused before the receiver is dialled.
        let sent = Command::new(BIN)
            .args(["stream", "send", "sluice://127.0.0.1:9"])
            .args(["--chunk-size", "1MiB", "--buffer-mem", "16MiB"])
            .args(extra)
            .stdin(Stdio::null())
            .output()
            .expect("run the sender");
        let err = String::from_utf8_lossy(&sent.stderr);
        assert!(
            !sent.status.success() && err.contains(says),
            "{extra:?}: {err}"
        );
    }
}

/// The JSON summary line a `sluice stream` process printed on stderr.
fn summary_of(stderr: &[u8]) -> serde_json::Value {
    serde_json::from_slice(
        stderr
            .split(|&b| b == b'\n')
            .find(|l| l.starts_with(b"{"))
            .expect("summary"),
    )
    .expect("JSON summary")
}

#[test]
fn a_damaged_record_is_sent_again_and_the_stream_arrives_whole_and_in_order() {
    // The sender damages its 3rd record on the way (after the checksum): raw, the
    // receiver's checksum refuses it; compressed, it does not decompress. Either way it
    // asks again, drops what that connection brings until the record comes back, and
    // the output is exactly the input, in order.
    let dir = tempfile::tempdir().expect("tempdir");
    for (i, codec) in ["none", "lz4"].into_iter().enumerate() {
        let input = data(3_000_017, true);
        let out = dir.path().join(format!("resent{i}"));
        let (rx, addr) = receiver(&out, &[]);
        let sent = send_env(
            &addr,
            &input,
            &["--streams", "2", "--compress", codec],
            &[("SLUICE_FAULT_CORRUPT_CHUNK", "3")],
        );
        assert!(
            sent.status.success(),
            "{codec}: {}",
            String::from_utf8_lossy(&sent.stderr)
        );
        let summary = summary_of(&sent.stderr);
        assert_eq!(
            summary["records_resent"].as_u64(),
            Some(1),
            "{codec}: one record sent again: {summary}"
        );
        assert_received(rx, &out, &input, codec);
    }
}

#[test]
fn auto_on_a_stream_measures_on_the_receivers_acknowledgements_and_says_raw_on_loopback() {
    // Over loopback `auto` sends raw (the test knob keeps it measuring). With it, an
    // epoch (12 records) ends only once the receiver's acknowledgements of those
    // records reach the controller through the sender's control reader: its debug line
    // proves the words arrive, and the stream still arrives whole. 64 records: the first
    // epoch's acknowledgements come back while most of the stream is still to be sent
    // (with 16, a sender that finished first could end before reading them).
    let dir = tempfile::tempdir().expect("tempdir");
    let input = data(12_000_017, true);
    let out = dir.path().join("auto");
    let (rx, addr) = receiver(&out, &[]);
    let log = ["--log", "sluice_engine::codec=debug"];
    let sent = send_env(
        &addr,
        &input,
        &["--streams", "2", "--compress", "auto", log[0], log[1]],
        &[("SLUICE_AUTO_ON_LOOPBACK", "1")],
    );
    let stderr = String::from_utf8_lossy(&sent.stderr);
    assert!(sent.status.success(), "{stderr}");
    assert!(stderr.contains("auto: epoch 0 "), "{stderr}");
    assert_received(rx, &out, &input, "auto");
    // Without the knob it sends raw to this very host, and says why.
    let out = dir.path().join("raw");
    let (rx, addr) = receiver(&out, &[]);
    let sent = send(&addr, &input, &["--compress", "auto", "--log", "info"]);
    let stderr = String::from_utf8_lossy(&sent.stderr);
    assert!(sent.status.success(), "{stderr}");
    assert!(stderr.contains("the peer is this host"), "{stderr}");
    let summary = summary_of(&sent.stderr);
    assert_eq!(summary["wire_bytes"], summary["bytes"], "{summary}");
    assert_received(rx, &out, &input, "auto toward loopback");
}
