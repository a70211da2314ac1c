//! The far side as this process holds it: the ssh child that runs it, the secret on
//! its stdin, its ready line, the last lines of ssh's stderr (for the one-line error
//! when it fails), and how it ends.

use super::tunnel::{self, Control};
use super::{SshArgs, Way};
use crate::exit::bad_input;
use crate::remote::{shell_quote, split_command, Ready, SshTarget};
use anyhow::{anyhow, Result};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, IsTerminal, Read, Write};
use std::net::SocketAddr;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// How long the far side may take to print its ready line (login included) when ssh
/// cannot prompt; with a terminal, a person may be typing a password.
const READY_WAIT: Duration = Duration::from_secs(60);
const READY_WAIT_TTY: Duration = Duration::from_secs(300);
/// How long ssh may take to exit once its stdin is closed.
const EXIT_WAIT: Duration = Duration::from_secs(30);
/// Lines of ssh's stderr kept for the error message.
const STDERR_LINES: usize = 16;
/// The longest ready line read.
const READY_LINE_MAX: u64 = 4096;

/// A far side started over ssh (ready once [`FarSide::ready`] returned). Dropping it closes ssh's stdin (the far
/// side exits at once if its session has not ended) and reaps ssh.
#[derive(Debug)]
pub struct FarSide {
    child: Child,
    stdin: Option<ChildStdin>,
    stderr: Arc<Mutex<VecDeque<String>>>,
    /// The thread reading ssh's stderr (ends when ssh's stderr closes).
    stderr_reader: Option<std::thread::JoinHandle<()>>,
    dest: String,
    ready: Ready,
    connect: SocketAddr,
    /// With `--via-ssh`: the ssh control master's private directory.
    control: Option<Control>,
    /// The remote shell's words (`--rsh`).
    words: Vec<String>,
}

impl FarSide {
    /// Runs ssh to start the far side for `target` and hands it `secret`; [`ready`]
    /// then waits for it (this side plans and allocates its own pools meanwhile).
    ///
    /// # Errors
    /// A bad `--rsh`, or ssh cannot be run.
    ///
    /// [`ready`]: FarSide::ready
    pub fn spawn(
        target: &SshTarget,
        way: Way,
        args: &SshArgs,
        far_job: &[String],
        secret: &str,
    ) -> Result<FarSide> {
        let words = split_command(&args.rsh).map_err(|e| bad_input(format!("--rsh: {e}")))?;
        let control = args.via_ssh.then(Control::new).transpose()?;
        let mut cmd = ssh_command(&words, control.as_ref(), &target.dest);
        cmd.arg(remote_command(target, way, args, far_job));
        let mut child = cmd
            .spawn()
            .map_err(|e| anyhow!("cannot run the remote shell {:?}: {e}", words[0]))?;
        let (stderr, stderr_reader) = collect_stderr(&mut child);
        let mut stdin = child.stdin.take();
        if let Some(s) = stdin.as_mut() {
            // A far side that is already gone shows up as the missing ready line.
            let _ = s
                .write_all(format!("{secret}\n").as_bytes())
                .and_then(|()| s.flush());
        }
        let nowhere = SocketAddr::from(([0, 0, 0, 0], 0));
        Ok(FarSide {
            child,
            stdin,
            stderr,
            stderr_reader,
            dest: target.dest.clone(),
            ready: Ready {
                addr: nowhere,
                fingerprint: None,
            },
            connect: nowhere,
            // Kept here: the directory goes only after ssh has exited.
            control,
            words,
        })
    }

    /// Waits for the far side's ready line (with `--via-ssh`, then forwards a local
    /// port to it): [`FarSide::connect_to`] is then where to connect.
    ///
    /// # Errors
    /// One line: ssh's own failure, a missing far binary, or the far side's refusal.
    pub fn ready(&mut self, sluice_path: &str) -> Result<()> {
        self.ready = self.await_ready(sluice_path)?;
        tracing::info!("far side ready: {}", self.ready.line());
        let port = self.ready.addr.port();
        self.connect = match &self.control {
            Some(c) => tunnel::forward(&self.words, c, &self.dest, port)?,
            None => self.ready.addr,
        };
        Ok(())
    }

    /// Where the copy connects: the far side's address, or the local end of the
    /// forward through ssh.
    pub fn connect_to(&self) -> SocketAddr {
        self.connect
    }

    /// The far side's certificate fingerprint from its ready line (`None` until it has
    /// TLS). TLS (connected to the TLS trust at merge): this is the one place the copy
    /// learns what to pin.
    pub fn fingerprint(&self) -> Option<&str> {
        self.ready.fingerprint.as_deref()
    }

    /// Ends a far side whose session is over: it exits by itself once its session is
    /// done, so ssh is waited for with its stdin still open (closing it first could
    /// stop a far side that is still finishing); one that does not exit in time gets
    /// its stdin closed (and is stopped by `Drop`). A far side that exits badly after a
    /// copy that succeeded is a warning, not an error: the files are in place.
    pub fn finish(mut self) {
        let status = wait_for(&mut self.child, EXIT_WAIT);
        self.stdin = None;
        match status {
            Some(status) if status.success() => {}
            Some(status) => tracing::warn!(
                "the far side on {} exited with {status}: {}",
                self.dest,
                self.last_line().unwrap_or_default()
            ),
            None => tracing::warn!("the far side on {} did not exit; stopping it", self.dest),
        }
    }

    /// Reads the ready line; anything else is the far side's (or ssh's) error.
    fn await_ready(&mut self, sluice_path: &str) -> Result<Ready> {
        let wait = if std::io::stdin().is_terminal() {
            READY_WAIT_TTY
        } else {
            READY_WAIT
        };
        let lines = first_line(&mut self.child);
        let host = self
            .dest
            .rsplit_once('@')
            .map_or(self.dest.as_str(), |(_, h)| h)
            .to_string();
        match lines.recv_timeout(wait) {
            Ok(Some(line)) => Ready::parse(&line).ok_or_else(|| {
                let _ = self.child.kill();
                anyhow!("{host}: {}", line.trim_end())
            }),
            Ok(None) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                let status = wait_for(&mut self.child, EXIT_WAIT);
                let code = status.and_then(|s| s.code());
                self.await_stderr();
                let last = self.last_line();
                Err(failure(
                    &self.dest,
                    &host,
                    code,
                    last.as_deref(),
                    sluice_path,
                ))
            }
            Err(mpsc::RecvTimeoutError::Timeout) => Err(anyhow!(
                "{}: the far side did not say it was ready within {} s",
                self.dest,
                wait.as_secs()
            )),
        }
    }

    /// Lets the stderr reader take in ssh's last lines (it ends at EOF, once ssh and
    /// whatever it started are gone; a bounded wait).
    fn await_stderr(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(2);
        if let Some(t) = self.stderr_reader.take() {
            while !t.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }

    fn last_line(&self) -> Option<String> {
        let lines = self
            .stderr
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        lines.back().cloned()
    }
}

impl Drop for FarSide {
    fn drop(&mut self) {
        self.stdin = None;
        if wait_for(&mut self.child, Duration::from_secs(5)).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// ssh with its options: `-o BatchMode=yes` unless a person can answer a prompt, a
/// control master with `--via-ssh`, then the destination.
fn ssh_command(words: &[String], control: Option<&Control>, dest: &str) -> Command {
    let mut cmd = Command::new(&words[0]);
    cmd.args(&words[1..]);
    if !std::io::stdin().is_terminal() {
        cmd.args(["-o", "BatchMode=yes"]);
    }
    if let Some(c) = control {
        cmd.args(c.master_options());
    }
    cmd.arg("--").arg(dest);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// The command line the far side's shell runs: `SLUICE oneshot push|pull 'PATH'
/// [--via-ssh] JOB...` (the binary as given, like rsync's --rsync-path; the rest
/// quoted).
fn remote_command(target: &SshTarget, way: Way, args: &SshArgs, far_job: &[String]) -> String {
    let mut words = vec![
        args.sluice_path.clone(),
        "oneshot".into(),
        way.word().into(),
        "--".into(),
        shell_quote(&target.path),
    ];
    // Options go before `--`: insert them after the subcommand.
    let mut opts: Vec<String> = far_job.iter().map(|w| shell_quote(w)).collect();
    if args.via_ssh {
        opts.push("--via-ssh".into());
    }
    words.splice(3..3, opts);
    words.join(" ")
}

/// The one-line error for a far side that never said it was ready, from ssh's exit
/// code and the last line of its stderr.
pub(super) fn failure(
    dest: &str,
    host: &str,
    code: Option<i32>,
    last: Option<&str>,
    sluice_path: &str,
) -> anyhow::Error {
    let line = last.map(str::trim).filter(|l| !l.is_empty());
    match (code, line) {
        (Some(255), Some(l)) => {
            let l = l.strip_prefix(&format!("{dest}: ")).unwrap_or(l);
            anyhow!("ssh {dest}: {l}")
        }
        (Some(255), None) => anyhow!("ssh {dest} failed (exit 255) and said nothing"),
        (Some(127), _) if sluice_path == "sluice" => {
            anyhow!("sluice is not installed on {host} (or not on PATH): give --sluice-path")
        }
        (Some(127), _) => anyhow!(
            "{sluice_path} is not found on {host}: give --sluice-path the far side's sluice binary"
        ),
        (Some(2), l) => bad_input(format!("{host}: {}", far_message(l))),
        (code, l) => anyhow!(
            "{host}: {} (far side exit {})",
            far_message(l),
            code.map_or_else(|| "by a signal".to_string(), |c| c.to_string())
        ),
    }
}

/// The far side's own message without its `sluice: error: ` prefix.
fn far_message(line: Option<&str>) -> String {
    line.map_or_else(
        || "the far side exited without saying why".into(),
        |l| l.strip_prefix("sluice: error: ").unwrap_or(l).to_string(),
    )
}

/// Keeps the last lines of the child's stderr, read on a thread of its own.
fn collect_stderr(
    child: &mut Child,
) -> (
    Arc<Mutex<VecDeque<String>>>,
    Option<std::thread::JoinHandle<()>>,
) {
    let lines = Arc::new(Mutex::new(VecDeque::with_capacity(STDERR_LINES)));
    let mut reader = None;
    if let Some(err) = child.stderr.take() {
        let keep = Arc::clone(&lines);
        reader = Some(std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                tracing::debug!("far side: {line}");
                let mut l = keep
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                if l.len() == STDERR_LINES {
                    l.pop_front();
                }
                l.push_back(line);
            }
        }));
    }
    (lines, reader)
}

/// The child's first stdout line (at most [`READY_LINE_MAX`] bytes), or `None` at EOF,
/// read on a thread of its own.
fn first_line(child: &mut Child) -> mpsc::Receiver<Option<String>> {
    let (tx, rx) = mpsc::channel();
    if let Some(out) = child.stdout.take() {
        std::thread::spawn(move || {
            let mut line = String::new();
            let mut r = BufReader::new(out.take(READY_LINE_MAX));
            let got = r.read_line(&mut line).ok().filter(|n| *n > 0);
            let _ = tx.send(got.map(|_| line));
        });
    }
    rx
}

/// Waits up to `limit` for the child to exit.
fn wait_for(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => return None,
        }
    }
}
