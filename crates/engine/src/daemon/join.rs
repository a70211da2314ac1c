//! A daemon's data connections: a session registers for its joins, advertises where
//! each data connection should go, and collects them as their `Join`s arrive.

use super::*;

/// Where each of `streams` data connections should go: data connection `i` is served
/// by a thread of channel `channel_of(i)`, whose NICs are `nics_of(channel)`; the
/// channel's streams take its NICs that have an address in `nic_addresses` in turn.
/// Streams of a channel with no such NIC get no entry (they go where the client
/// dialled).
pub fn stream_addresses<'a>(
    streams: u16,
    channel_of: impl Fn(u16) -> u32,
    nics_of: impl Fn(u32) -> &'a [String],
    nic_addresses: &[(String, std::net::IpAddr)],
    port: u16,
) -> Addresses {
    let mut taken: HashMap<u32, usize> = HashMap::new();
    let mut entries = Vec::new();
    for i in 0..streams {
        let channel = channel_of(i);
        let ips: Vec<std::net::IpAddr> = nics_of(channel)
            .iter()
            .filter_map(|n| nic_addresses.iter().find(|(name, _)| name == n))
            .map(|(_, ip)| *ip)
            .collect();
        if ips.is_empty() {
            continue;
        }
        let k = taken.entry(channel).or_default();
        entries.push(StreamAddress {
            stream_index: i,
            addr: std::net::SocketAddr::new(ips[*k % ips.len()], port),
        });
        *k += 1;
    }
    Addresses { entries }
}
impl Daemon {
    /// A data connection presenting a session's secret: answered against that
    /// session's join table, then handed to the session's control thread.
    pub(super) fn join(
        &self,
        join: &Join,
        reader: FrameReader,
        mut writer: FrameWriter,
        conn: &mut Conn,
    ) -> Result<(), EngineError> {
        let peer = reader.peer().to_string();
        let joined = self.join_session(join, reader, &mut writer, conn);
        if let Err(e) = &joined {
            let result = conn.outcome.unwrap_or(e.code().name());
            self.audit.refused(&peer, result, conn.started.elapsed());
        }
        joined
    }

    /// [`Daemon::join`] without the audit.
    pub(super) fn join_session(
        &self,
        join: &Join,
        reader: FrameReader,
        writer: &mut FrameWriter,
        conn: &mut Conn,
    ) -> Result<(), EngineError> {
        let mut out = Vec::new();
        let mut pending = self
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(p) = pending.get_mut(&join.session_id) else {
            drop(pending);
            let _ = writer.send(&ErrorFrame::new(ErrorCode::JoinRejected, "no such session"));
            return Err(EngineError::Handshake {
                peer: reader.peer().to_string(),
                message: format!("join for unknown session {}", join.session_id),
            });
        };
        if p.encrypted && !reader.is_tls() {
            drop(pending);
            return accept::refuse_clear(&reader, writer, accept::ENCRYPTED_SESSION);
        }
        let joined = p.table.handle(join, &mut out);
        let streams = p.streams.clone();
        drop(pending);
        let (index, stream) = accept::finish_join(joined, &out, reader, writer)?;
        conn.armed.disarm();
        if conn.armed.fired() {
            conn.outcome = Some("Timeout");
            return Err(EngineError::Aborted(
                "the join came after the handshake deadline".into(),
            ));
        }
        if let (Ok(peer), Ok(local)) = (stream.stream().peer_addr(), stream.stream().local_addr()) {
            tracing::info!(
                "session {}: data connection {index} from {peer} on {local}",
                join.session_id
            );
        }
        let _ = streams.send((index, stream));
        Ok(())
    }
    /// Registers the session for its joins, sends `Accept` (with the address of each
    /// data connection's NIC), and waits for every data connection to join.
    pub(super) fn gather(
        &self,
        est: &Established,
        accept: &Accept,
        direction: Direction,
        peer: &str,
        writer: &mut FrameWriter,
    ) -> Result<Vec<Link>, EngineError> {
        let streams = accept.streams();
        let (tx, rx) = bounded(usize::from(streams));
        let table = JoinTable::new(accept, est.join_key(&accept.session_secret));
        let pending = Pending {
            table,
            streams: tx,
            encrypted: writer.is_tls(),
        };
        self.pending_map().insert(accept.session_id, pending);
        let addresses = self.addresses(streams, direction);
        let sent = accept::send_accept(writer, est, accept, addresses);
        let data = sent.and_then(|()| collect_streams(&rx, streams, peer));
        self.pending_map().remove(&accept.session_id);
        data
    }

    pub(super) fn pending_map(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Pending>> {
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Where each data connection should go: the NIC of the channel whose network
    /// thread serves it.
    pub(super) fn addresses(&self, streams: u16, direction: Direction) -> Addresses {
        let runtime = &self.cfg.runtime;
        let net_role = match direction {
            Direction::Push => PlanRole::NetRecv,
            Direction::Pull | Direction::Deliver => PlanRole::NetSend,
        };
        let plan = runtime.plan();
        stream_addresses(
            streams,
            |i| runtime.pool_for(net_role, u32::from(i)).0,
            |c| {
                plan.channels
                    .iter()
                    .find(|ch| ch.id == c)
                    .map_or(&[][..], |ch| &ch.nics[..])
            },
            &self.cfg.nic_addresses,
            self.port,
        )
    }
}

/// The data connections of a session in stream order, as their joins arrive on `rx`,
/// within [`HANDSHAKE_TIMEOUT`].
pub(super) fn collect_streams(
    rx: &Receiver<(u16, Link)>,
    streams: u16,
    peer: &str,
) -> Result<Vec<Link>, EngineError> {
    let mut conns: Vec<Option<Link>> = (0..streams).map(|_| None).collect();
    let deadline = std::time::Instant::now() + HANDSHAKE_TIMEOUT;
    let mut got = 0;
    while got < usize::from(streams) {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let Ok((i, s)) = rx.recv_timeout(left) else {
            break;
        };
        // The join table admits each index once; a duplicate is not counted.
        if let Some(slot) = conns.get_mut(usize::from(i)) {
            if slot.replace(s).is_none() {
                got += 1;
            }
        }
    }
    if got < usize::from(streams) {
        return Err(EngineError::Handshake {
            peer: peer.to_string(),
            message: format!("only {got} of {streams} data connections joined in time"),
        });
    }
    let conns: Vec<Link> = conns.into_iter().flatten().collect();
    debug_assert_eq!(conns.len(), usize::from(streams));
    Ok(conns)
}
