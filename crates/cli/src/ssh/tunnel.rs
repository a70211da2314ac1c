//! `--via-ssh`: the session's connections go through the ssh connection. ssh starts as
//! a control master (a socket in a private directory); once the far side is ready, a
//! local port is forwarded to its loopback port through that master
//! (`ssh -O forward -L`), and the copy connects to the local port.

use anyhow::{anyhow, Context, Result};
use std::net::{SocketAddr, TcpListener};
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// Local ports tried before giving up (another program may take the free port between
/// its release and ssh's bind).
const ATTEMPTS: usize = 8;

/// The control master's private directory (mode 0700), removed when dropped.
#[derive(Debug)]
pub struct Control {
    dir: PathBuf,
}

impl Control {
    /// Creates the private directory under the temporary directory.
    ///
    /// # Errors
    /// It cannot be created.
    pub fn new() -> Result<Control> {
        let tag: String = sluice_engine::session::random::<6>()?
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let dir = std::env::temp_dir().join(format!("sluice-ssh-{tag}"));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .with_context(|| format!("creating {}", dir.display()))?;
        Ok(Control { dir })
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("cm")
    }

    /// The options that make the ssh starting the far side a control master.
    pub fn master_options(&self) -> Vec<String> {
        vec![
            "-o".into(),
            "ControlMaster=yes".into(),
            "-o".into(),
            format!("ControlPath={}", self.socket().display()),
            "-o".into(),
            "ControlPersist=no".into(),
        ]
    }
}

impl Drop for Control {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Forwards a free local port on 127.0.0.1 to `remote_port` on the far side's
/// loopback through the master; returns the local address to connect to.
///
/// # Errors
/// ssh refused every attempt (its last message is shown).
pub fn forward(
    words: &[String],
    control: &Control,
    dest: &str,
    remote_port: u16,
) -> Result<SocketAddr> {
    let mut last = String::new();
    for _ in 0..ATTEMPTS {
        let local = free_port()?;
        let out = Command::new(&words[0])
            .args(&words[1..])
            .arg("-o")
            .arg(format!("ControlPath={}", control.socket().display()))
            .args(["-O", "forward", "-L"])
            .arg(format!(
                "127.0.0.1:{}:127.0.0.1:{remote_port}",
                local.port()
            ))
            .arg("--")
            .arg(dest)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {:?} -O forward", words[0]))?;
        if out.status.success() {
            return Ok(local);
        }
        last = String::from_utf8_lossy(&out.stderr)
            .trim()
            .replace('\n', " ");
    }
    Err(anyhow!(
        "ssh {dest}: cannot forward a local port through the ssh connection: {last}"
    ))
}

/// A port on 127.0.0.1 that was free a moment ago.
fn free_port() -> Result<SocketAddr> {
    let l = TcpListener::bind("127.0.0.1:0").context("finding a free local port")?;
    Ok(l.local_addr()?)
}
