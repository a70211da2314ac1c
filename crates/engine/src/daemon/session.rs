//! A daemon's control connection once its first frame is `Hello`: the handshake
//! against the accounts, `Open`, rights and limits, then the session on a thread of
//! its own (a third-party copy's source dials its data connections instead).

use super::*;

impl Daemon {
    /// A control connection: handshake, open, rights and limits, then the session.
    /// `told` is set when the peer has already been sent the `Error` for the failure.
    pub(super) fn session(
        &self,
        hello: Frame,
        reader: &mut FrameReader,
        writer: &mut FrameWriter,
        told: &Cell<bool>,
        conn: &mut Conn,
        rec: &mut Record,
    ) -> Result<(), EngineError> {
        // The handshake answers its own failures with an Error frame.
        let accounts = self.accounts.current();
        let now = SystemTime::now();
        let proved = &mut rec.identity;
        let admitted = server_handshake(hello, reader, writer, &accounts, now, proved)
            .inspect_err(|e| {
                told.set(matches!(
                    e,
                    EngineError::Handshake { .. } | EngineError::HandshakeRefused { .. }
                ));
            })?;
        drop(accounts);
        let account = admitted.account;
        conn.root = Some(Arc::clone(&account.root));
        if let Some(t) = conn.ticket.as_mut() {
            t.authenticated();
        }
        let Some(open) = accept::read_open(reader)? else {
            return Ok(());
        };
        conn.armed.disarm();
        rec.open(open.direction, &open.path);
        allowed(&account, open.direction)?;
        if self.drain.draining() {
            return Err(busy("the daemon is shutting down; try again later".into()));
        }
        let _running = self.guard.session().map_err(|r| busy(r.0))?;
        let est = admitted.established;
        self.run(&est, &open, &account, reader, writer, told, conn, rec)
    }

    /// Runs an opened session: accept, wait for streams, run the role on a thread of
    /// its own, count its totals into `rec`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn run(
        &self,
        est: &Established,
        open: &Open,
        account: &Account,
        reader: &mut FrameReader,
        writer: &mut FrameWriter,
        told: &Cell<bool>,
        conn: &mut Conn,
        rec: &mut Record,
    ) -> Result<(), EngineError> {
        SessionOptions::check_open(&open.options, est.capabilities).map_err(|message| {
            EngineError::Refused {
                code: ErrorCode::BadFrame,
                message,
            }
        })?;
        let mut opts = SessionOptions::served(&open.options, self.server_side(), est.capabilities);
        let chunk_acks = opts.chunk_acks;
        let limits = [self.bwlimit.as_ref(), account.bwlimit.as_ref()];
        opts.pace = crate::bwlimit::Pace::new(None, &limits);
        // The path is checked before anything is allocated or created.
        let role = role_for(&account.root, open)?;
        // A third-party copy's source takes the destination's session from `Delegate`.
        let delegate = match open.direction {
            Direction::Deliver => Some(deliver::take(
                reader,
                &mut opts,
                self.cfg.runtime.chunk_bytes(),
            )?),
            Direction::Push | Direction::Pull => None,
        };
        let accept = accept::new_accept(opts.streams, opts.chunk_bytes)?;
        // Nobody reads the daemon's summary file by file: it keeps no per-file rows.
        let stats = Arc::new(Stats::without_file_report());
        let sends = open.direction != Direction::Push;
        let what = match &delegate {
            Some(d) => format!("delivery to session {}", d.session_id),
            None => format!("session {}", accept.session_id),
        };
        crate::session::state_threads_beyond_plan(
            &self.cfg.runtime,
            &opts,
            sends,
            &stats,
            (&what, true),
        );
        let about = describe(&what, rec);
        let watched = self.dog.watch(
            about,
            vec![tcp_clone(&writer.stream_clone()?)?],
            crate::guard::idle_timeout(self.guard.limits(), sends, chunk_acks),
        );
        // Every exit from here on records what the watchdog did: a client that goes
        // silent before its data connections joined fails the gather, and the audit
        // still says it idled (or that a drain aborted it).
        let result = (|| {
            let data = match &delegate {
                Some(d) => {
                    deliver::join_and_confirm(d, self.cfg.tls.encrypt(), writer, accept.clone())?
                }
                None => self.gather(est, &accept, open.direction, reader.peer(), writer)?,
            };
            watched.add(data.iter().filter_map(|d| tcp_clone(d).ok()).collect());
            let _ = reader.set_timeout(None);
            let conns = Connections {
                reader: std::mem::replace(reader, FrameReader::new(writer.stream_clone()?)),
                control_stream: writer.stream_clone()?,
                data,
                joining: Vec::new(),
            };
            // run_role reports its own failure on the control connection.
            told.set(true);
            let runtime = &self.cfg.runtime;
            let result = std::thread::scope(|s| {
                std::thread::Builder::new()
                    .name("session".into())
                    .spawn_scoped(s, || {
                        run_role(role, runtime, &opts, opts.chunk_bytes, conns, &stats)
                    })
                    .map_err(|e| EngineError::io("starting a session thread", e))?
                    .join()
                    .unwrap_or_else(|_| {
                        Err(EngineError::Aborted("the session thread panicked".into()))
                    })
            });
            let s = stats.summary(runtime.plan());
            (rec.bytes, rec.files) = (s.bytes, s.files);
            tracing::info!(
                "{what} done: {} files, {} bytes in {:.2} s, {} failed, io {}",
                s.files,
                s.bytes,
                s.seconds,
                s.files_failed,
                s.io_mode
            );
            result
        })();
        conn.outcome = watch_outcome(&watched);
        result
    }

    /// What the daemon decides for every session.
    pub(super) fn server_side(&self) -> ServerSide {
        ServerSide {
            slot_bytes: self.cfg.runtime.chunk_bytes(),
            io_threads: self.cfg.io_threads,
            read_depth: self.cfg.read_depth,
        }
    }
}

/// What the watchdog did to a session, for its audit record: a drain's abort, an idle
/// timeout, or nothing.
fn watch_outcome(watched: &crate::guard::Watched) -> Option<&'static str> {
    match (watched.aborted(), watched.idled()) {
        (true, _) => Some(ErrorCode::Cancelled.name()),
        (false, true) => Some("IdleTimeout"),
        _ => None,
    }
}
