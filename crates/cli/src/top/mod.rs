//! `sluice top [ADDR]`: a live view of a running daemon or client, read from its
//! metrics endpoint (`--metrics ADDR`): per channel the stages' busy and waiting
//! threads, rates and buffer slots; per node the cores' load, memory and NUMA misses;
//! the data connections and NICs; the current bottleneck. `--once` prints one frame as
//! text (two scrapes `--interval` apart) and exits.

mod model;
mod scrape;
mod view;

use crate::exit::{bad_input, ExitCode};
use anyhow::{Context, Result};
use clap::Args;
use model::Frame;
use ratatui::crossterm::event::{self, Event, KeyCode};
use ratatui::widgets::{Block, Paragraph};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Arguments of `sluice top`.
#[derive(Debug, Args)]
pub struct TopArgs {
    /// The metrics endpoint of a daemon or client (`--metrics ADDR`).
    #[arg(value_name = "ADDR:PORT", default_value = "127.0.0.1:9190")]
    pub addr: SocketAddr,
    /// Print one frame as text and exit.
    #[arg(long)]
    pub once: bool,
    /// Seconds between scrapes, 0.05 to 3600.
    #[arg(long, value_name = "SECS", default_value_t = 1.0)]
    pub interval: f64,
    /// File holding the endpoint's bearer token (`--metrics-token-file`).
    #[arg(long, value_name = "FILE")]
    pub metrics_token_file: Option<PathBuf>,
}

/// Runs `sluice top`.
///
/// # Errors
/// Bad flags (exit 2); the endpoint cannot be read (exit 1).
pub fn run(args: &TopArgs) -> Result<ExitCode> {
    if !(0.05..=3600.0).contains(&args.interval) {
        return Err(bad_input(
            "--interval must be between 0.05 and 3600 seconds",
        ));
    }
    let token = args
        .metrics_token_file
        .as_ref()
        .map(|p| {
            std::fs::read_to_string(p)
                .map(|t| t.trim_end_matches('\n').to_string())
                .map_err(|e| bad_input(format!("--metrics-token-file {}: {e}", p.display())))
        })
        .transpose()?;
    let mut scraper = Scraper {
        addr: args.addr,
        token,
        interval: Duration::from_secs_f64(args.interval),
        last: None,
    };
    if args.once {
        let (frame, dt) = scraper.frame()?;
        let text = view::lines(&frame, &args.addr.to_string(), dt).join("\n");
        let _ = crate::output::stdout(&(text + "\n"));
        return Ok(ExitCode::Ok);
    }
    live(&mut scraper, &args.addr.to_string())
}

/// Scrapes the endpoint, keeping the last scrape for the next frame's rates.
struct Scraper {
    addr: SocketAddr,
    token: Option<String>,
    interval: Duration,
    last: Option<(Instant, Vec<scrape::Sample>)>,
}

impl Scraper {
    /// The frame since the last scrape (the first scrapes twice, `interval` apart).
    fn frame(&mut self) -> Result<(Frame, f64)> {
        let (at, prev) = match self.last.take() {
            Some(last) => last,
            None => {
                let first = scrape::fetch(self.addr, self.token.as_deref())?;
                let at = Instant::now();
                std::thread::sleep(self.interval);
                (at, first)
            }
        };
        let cur = scrape::fetch(self.addr, self.token.as_deref())?;
        let now = Instant::now();
        let dt = now.duration_since(at).as_secs_f64();
        self.last = Some((now, cur.clone()));
        Ok((Frame::between(&prev, cur, dt), dt))
    }
}

/// The live view: a frame per interval until `q` or Esc.
fn live(scraper: &mut Scraper, addr: &str) -> Result<ExitCode> {
    let mut terminal = ratatui::try_init().context("starting the terminal view")?;
    let result = (|| -> Result<()> {
        loop {
            let (frame, dt) = scraper.frame()?;
            let text = view::lines(&frame, addr, dt).join("\n");
            terminal.draw(|f| {
                let block = Block::bordered().title(" sluice top (q quits) ");
                f.render_widget(Paragraph::new(text.as_str()).block(block), f.area());
            })?;
            let until = Instant::now() + scraper.interval;
            while let Some(left) = until.checked_duration_since(Instant::now()) {
                if event::poll(left)? {
                    if let Event::Key(k) = event::read()? {
                        if matches!(k.code, KeyCode::Char('q') | KeyCode::Esc) {
                            return Ok(());
                        }
                    }
                }
            }
        }
    })();
    ratatui::restore();
    result.map(|()| ExitCode::Ok)
}
