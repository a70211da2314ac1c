//! Data connections dialled while the control handshake still runs.
//!
//! On a long path each data connection costs a TCP and a TLS round trip before its
//! `Join` can go; neither needs anything the control handshake settles. The TCP
//! handshake needs nothing at all, so an encrypting client connects the first group of
//! data connections (up to 8) as soon as its control connection is connected (after
//! it, so a server that accepts one connection after the other takes the control
//! connection first), while the control connection's TLS handshake runs. Their TLS is
//! pinned to the certificate the control connection presented, so each starts its TLS
//! handshake once the control connection is secured ([`Predialled::secure`]), and each
//! `Join` goes the moment `Accept` names the key. A connection the session
//! turns out not to need (the daemon granted fewer streams, or advertised another
//! address for it, or the control connection went out in clear text after all) is
//! closed in order; one that failed (a daemon at its per-address limit of
//! unauthenticated connections answers a clear `Busy`, which fails the TLS handshake)
//! is dialled again the ordinary way once the control connection has authenticated, so
//! the user sees the same outcome as before. Clear-text sessions dial after `Accept` as
//! before: there a refusal would show only at the `Join`.

use super::handshake::HANDSHAKE_TIMEOUT;
use super::tls::{DataDial, Link};
use crate::error::EngineError;
use crossbeam_channel::{bounded, Receiver, Sender};
use std::net::TcpStream;

/// A data connection dialled ahead: the link and the address it went to.
pub(crate) type Dialled = Result<(Link, String), EngineError>;

/// The data connections dialled ahead, by stream index.
pub(crate) struct Predialled {
    slots: Vec<Option<Receiver<Dialled>>>,
    /// How each connection is to be secured, once the control connection knows: a
    /// `DataDial`, or `None` to close it (the session went out in clear text).
    decisions: Vec<Sender<Option<DataDial>>>,
}

impl Predialled {
    /// Starts connecting streams `0..count`, each on a thread of its own: stream `i` to
    /// `hosts[i mod n]` (the user's list), else to `named`. Each waits for
    /// [`Self::secure`] before its TLS handshake.
    pub(crate) fn connect(hosts: &[&str], named: &str, count: u16) -> Predialled {
        let (slots, decisions) = (0..count)
            .filter_map(|i| {
                let target = hosts
                    .get(usize::from(i) % hosts.len().max(1))
                    .copied()
                    .unwrap_or(named)
                    .to_string();
                spawn_dial(i, target)
            })
            .map(|(rx, decide)| (Some(rx), decide))
            .unzip();
        Predialled { slots, decisions }
    }

    /// Secures every connection with `dial` (the control connection's TLS is up), or
    /// closes them all when the session is in clear text (`None`).
    pub(crate) fn secure(&mut self, dial: Option<&DataDial>) {
        for decide in self.decisions.drain(..) {
            let _ = decide.send(dial.cloned());
        }
    }

    /// Stream `i`'s connection dialled ahead, if one was (received by whoever joins it).
    pub(crate) fn take(&mut self, i: u16) -> Option<Receiver<Dialled>> {
        self.slots.get_mut(usize::from(i)).and_then(Option::take)
    }
}

impl Drop for Predialled {
    /// Closes, in order, every connection dialled ahead that nobody took.
    fn drop(&mut self) {
        // A connection still waiting to be secured is closed by its own thread.
        self.decisions.clear();
        for rx in self.slots.iter_mut().filter_map(Option::take) {
            if let Ok(Ok((link, _))) = rx.try_recv() {
                link.close();
            }
            // One still dialling finds the receiver gone and closes its own.
        }
    }
}

/// Connects `target` for stream `i` on a thread, which then secures the connection as
/// its decision says; `None` when no thread could start (the stream is then dialled
/// the ordinary way).
fn spawn_dial(i: u16, target: String) -> Option<(Receiver<Dialled>, Sender<Option<DataDial>>)> {
    let (tx, rx) = bounded(1);
    let (decide, decision) = bounded::<Option<DataDial>>(1);
    let spawned =
        std::thread::Builder::new()
            .name(format!("dial-{i}"))
            .spawn(move || match dial_one(i, &target, &decision) {
                Ok(None) => {}
                Ok(Some(link)) => {
                    if let Err(e) = tx.send(Ok((link, target))) {
                        if let Ok((link, _)) = e.into_inner() {
                            link.close();
                        }
                    }
                }
                Err(e) => {
                    let _ = tx.send(Err(e));
                }
            });
    spawned.ok().map(|_| (rx, decide))
}

/// Data connection `i` to `target`: connected at once, then secured as `decision`
/// says; `Ok(None)` when the decision is to close it (or nobody decides).
fn dial_one(
    i: u16,
    target: &str,
    decision: &Receiver<Option<DataDial>>,
) -> Result<Option<Link>, EngineError> {
    let s = TcpStream::connect(target)
        .map_err(|e| EngineError::io(format!("opening data connection {i} to {target}"), e))?;
    match decision.recv() {
        Ok(Some(d)) => Ok(Some(d.secure(s, HANDSHAKE_TIMEOUT)?)),
        Ok(None) | Err(_) => Ok(None),
    }
}

/// Whether a connection dialled ahead to `peer` may serve a stream the daemon
/// advertised `advertised` for (`None`: no advertisement, or the user named several
/// hosts and the list decides).
pub(crate) fn fits(
    peer: Option<std::net::SocketAddr>,
    advertised: Option<std::net::SocketAddr>,
) -> bool {
    match advertised {
        None => true,
        Some(a) => peer == Some(a),
    }
}

#[cfg(test)]
mod tests {
    use super::fits;

    #[test]
    fn a_connection_dialled_ahead_fits_where_no_other_address_was_advertised() {
        let dialled: std::net::SocketAddr = "192.0.2.1:7000".parse().unwrap();
        let other: std::net::SocketAddr = "192.0.2.2:7000".parse().unwrap();
        assert!(fits(Some(dialled), None));
        assert!(fits(Some(dialled), Some(dialled)));
        assert!(
            !fits(Some(dialled), Some(other)),
            "the daemon wants another NIC"
        );
        assert!(!fits(None, Some(other)));
    }
}
