//! The handshake of a control connection, as two no-I/O state machines.
//!
//! ```text
//! client                                   server
//!   Hello{version, min, caps, cn}  ──────▶
//!                                  ◀──────  Welcome{version, caps ∩, sn, auth_required}
//!   (auth_required)
//!   AuthProof{HMAC(token, "sluice-v1 client"‖cn‖sn)} ──▶
//!                                  ◀──────  AuthOk{HMAC(token, "sluice-v1 server"‖cn‖sn)}
//! ```
//!
//! Each side is fed decoded frames with `handle(frame, out)`; it appends the frames it
//! wants sent to `out` and returns [`HandshakeStatus::Done`] with the negotiated
//! [`Established`] when finished. On failure it appends an `Error` frame for the peer
//! (where one is due) and returns a [`HandshakeError`]; flush `out`, then close.
//! Nonces are passed in: this crate has no randomness.
//!
//! ```
//! use sluice_wire::*;
//! let token = Token::new(*b"correct horse")?;
//! let mut client = ClientHandshake::new(ClientConfig::new(Some(token.clone())), [1; 32]);
//! let mut server = ServerHandshake::new(ServerConfig::new(Some(token)), [2; 32]);
//! let (mut to_server, mut to_client) = (Vec::new(), Vec::new());
//! client.start(&mut to_server);
//! let (hello, _) = Frame::decode(&to_server)?;
//! server.handle(&hello, &mut to_client)?;                      // Welcome
//! let (welcome, _) = Frame::decode(&to_client)?;
//! to_server.clear();
//! client.handle(&welcome, &mut to_server)?;                    // AuthProof
//! let (proof, _) = Frame::decode(&to_server)?;
//! to_client.clear();
//! let HandshakeStatus::Done(s) = server.handle(&proof, &mut to_client)? else { panic!() };
//! let (ok, _) = Frame::decode(&to_client)?;
//! let HandshakeStatus::Done(c) = client.handle(&ok, &mut Vec::new())? else { panic!() };
//! assert!(c.authenticated() && s.authenticated());
//! assert_eq!(c.join_key(&[7; 32]), s.join_key(&[7; 32]));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::auth::{self, Token};
use crate::codec::{Codec, FrameType};
use crate::error::ErrorCode;
use crate::frame::{AuthOk, AuthProof, Capabilities, ErrorFrame, Frame, Hello, Welcome};
use crate::limits::{MIN_PROTOCOL_VERSION, PROTOCOL_VERSION};

/// What the client offers.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Capabilities offered.
    pub capabilities: Capabilities,
    /// The shared token, if the user gave one. With a token the client insists on mutual
    /// authentication and refuses a server that does not ask for it.
    pub token: Option<Token>,
}

impl ClientConfig {
    /// Every capability this version knows, and `token`.
    pub fn new(token: Option<Token>) -> ClientConfig {
        ClientConfig {
            capabilities: Capabilities::ALL,
            token,
        }
    }
}

/// What the server supports and requires.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Capabilities supported.
    pub capabilities: Capabilities,
    /// The shared token; `Some` makes authentication required.
    pub token: Option<Token>,
}

impl ServerConfig {
    /// Every capability this version knows, and `token`.
    pub fn new(token: Option<Token>) -> ServerConfig {
        ServerConfig {
            capabilities: Capabilities::ALL,
            token,
        }
    }
}

/// The result of a successful handshake, the same on both sides.
#[derive(Clone, PartialEq, Eq)]
pub struct Established {
    /// Protocol version in use.
    pub version: u16,
    /// Capabilities both sides support.
    pub capabilities: Capabilities,
    /// The client's nonce.
    pub client_nonce: [u8; 32],
    /// The server's nonce.
    pub server_nonce: [u8; 32],
    session_key: Option<[u8; 32]>,
}

impl Established {
    /// Whether both sides proved knowledge of the token.
    pub fn authenticated(&self) -> bool {
        self.session_key.is_some()
    }

    /// The key data connections prove knowledge of, for the `session_secret` of `Accept`
    /// ([`auth::join_key`]).
    pub fn join_key(&self, session_secret: &[u8; 32]) -> [u8; 32] {
        auth::join_key(self.session_key.as_ref(), session_secret)
    }

    fn new(welcome: &Welcome, client_nonce: [u8; 32], token: Option<&Token>) -> Established {
        Established {
            version: welcome.version,
            capabilities: welcome.capabilities,
            client_nonce,
            server_nonce: welcome.server_nonce,
            session_key: token.map(|t| auth::session_key(t, &client_nonce, &welcome.server_nonce)),
        }
    }
}

impl std::fmt::Debug for Established {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Established")
            .field("version", &self.version)
            .field("capabilities", &self.capabilities)
            .field("authenticated", &self.authenticated())
            .finish_non_exhaustive()
    }
}

/// Progress of a handshake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandshakeStatus {
    /// Waiting for the peer's next frame.
    InProgress,
    /// Finished; the session may begin (`Open`).
    Done(Established),
}

/// Why a handshake failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    /// The version ranges do not overlap.
    #[error("no common protocol version: we speak {our_min}..={our_max}, the peer {peer_min}..={peer_max}")]
    UnsupportedVersion {
        /// Oldest we speak.
        our_min: u16,
        /// Newest we speak.
        our_max: u16,
        /// Oldest the peer speaks (as far as we know).
        peer_min: u16,
        /// Newest the peer speaks.
        peer_max: u16,
    },
    /// The client's proof did not verify (server side): wrong token.
    #[error("the client's proof did not verify: wrong token")]
    ClientAuthFailed,
    /// The server's proof did not verify (client side): wrong token, or an impostor.
    #[error("the server's proof did not verify: wrong token, or not the daemon we meant")]
    ServerAuthFailed,
    /// The server requires a token and the client has none.
    #[error("the daemon requires a token and none was given")]
    TokenRequired,
    /// The client has a token but the server did not ask for authentication.
    #[error("a token was given but the daemon did not ask for authentication; refusing")]
    AuthDowngrade,
    /// A frame that has no place at this point of the handshake.
    #[error("unexpected {frame} frame while {state}")]
    UnexpectedFrame {
        /// The frame received.
        frame: FrameType,
        /// What the state machine was waiting for.
        state: &'static str,
    },
    /// The server chose capabilities the client did not offer, or (bound) fewer than
    /// [`BOUND_CAPABILITIES`] promises.
    #[error(
        "the server chose capabilities that were not offered or fewer than it promised: {0:?}"
    )]
    BadCapabilities(Capabilities),
    /// A bound handshake's `Welcome` carried another nonce than the TLS session's.
    #[error(
        "the daemon selected the bound handshake but its Welcome is not bound to this TLS session"
    )]
    Unbound,
    /// The peer sent an `Error` frame.
    #[error("peer reported {code}: {message}")]
    Peer {
        /// Its code.
        code: ErrorCode,
        /// Its message.
        message: String,
    },
    /// `handle` after the handshake finished or failed.
    #[error("the handshake already finished or failed")]
    Finished,
}

impl HandshakeError {
    /// The code to report it with.
    pub fn code(&self) -> ErrorCode {
        match self {
            HandshakeError::UnsupportedVersion { .. } => ErrorCode::UnsupportedVersion,
            HandshakeError::ClientAuthFailed
            | HandshakeError::ServerAuthFailed
            | HandshakeError::TokenRequired
            | HandshakeError::AuthDowngrade => ErrorCode::AuthFailed,
            HandshakeError::UnexpectedFrame { .. }
            | HandshakeError::BadCapabilities(_)
            | HandshakeError::Unbound
            | HandshakeError::Finished => ErrorCode::BadFrame,
            HandshakeError::Peer { code, .. } => *code,
        }
    }
}

/// Appends an `Error` frame describing `e`, unless it came from the peer.
fn report(e: &HandshakeError, out: &mut Vec<u8>) {
    if !matches!(e, HandshakeError::Peer { .. } | HandshakeError::Finished) {
        ErrorFrame::new(e.code(), e.to_string()).encode(out);
    }
}

fn peer_error(frame: &Frame) -> Option<HandshakeError> {
    match frame {
        Frame::Error(e) => Some(HandshakeError::Peer {
            code: e.code,
            message: e.message.clone(),
        }),
        _ => None,
    }
}

/// The ALPN protocol id of a control connection whose handshake is bound to its TLS
/// session. A server that selects it takes the TLS exporter value ([`BINDING_LABEL`],
/// 32 bytes, no context) as its `server_nonce`, so the client knows that nonce as soon
/// as TLS is up and sends `Hello`, `AuthProof` and `Open` in one flight
/// ([`ClientHandshake::start_bound`]). Selecting it also promises at least
/// [`BOUND_CAPABILITIES`].
pub const BOUND_ALPN: &[u8] = b"sluice/1";

/// The TLS exporter label of the bound `server_nonce` (RFC 8446 section 7.5).
pub const BINDING_LABEL: &[u8] = b"EXPORTER-sluice-v1 handshake";

/// What a server that selects [`BOUND_ALPN`] offers at least: every capability of the
/// version that introduced it. A client that sends `Open` before `Welcome` builds it
/// from these; a server offering fewer must not select [`BOUND_ALPN`].
pub const BOUND_CAPABILITIES: Capabilities = Capabilities::RESUME
    .union(Capabilities::PACKED)
    .union(Capabilities::COMPRESS_LZ4)
    .union(Capabilities::COMPRESS_ZSTD)
    .union(Capabilities::DIRECT_IO)
    .union(Capabilities::ADDRESSES)
    .union(Capabilities::CHUNK_ACKS)
    .union(Capabilities::SHUFFLE)
    .union(Capabilities::BYTE_SHUFFLE);

#[derive(Debug, Clone)]
enum ClientState {
    Start,
    AwaitWelcome,
    /// `Hello` (and `AuthProof`) went in one flight for this bound `server_nonce`.
    AwaitBoundWelcome([u8; 32]),
    AwaitAuthOk(Welcome),
    Done,
    Failed,
}

/// The client side of the handshake.
#[derive(Debug, Clone)]
pub struct ClientHandshake {
    config: ClientConfig,
    client_nonce: [u8; 32],
    state: ClientState,
}

impl ClientHandshake {
    /// A client that will offer `config`, with a fresh random `client_nonce`.
    pub fn new(config: ClientConfig, client_nonce: [u8; 32]) -> ClientHandshake {
        ClientHandshake {
            config,
            client_nonce,
            state: ClientState::Start,
        }
    }

    /// Appends the `Hello` (once; later calls append nothing).
    pub fn start(&mut self, out: &mut Vec<u8>) {
        if matches!(self.state, ClientState::Start) {
            Hello {
                version: PROTOCOL_VERSION,
                min_version: MIN_PROTOCOL_VERSION,
                capabilities: self.config.capabilities,
                client_nonce: self.client_nonce,
            }
            .encode(out);
            self.state = ClientState::AwaitWelcome;
        }
    }

    /// Appends `Hello` and, with a token, the `AuthProof` for `server_nonce` at once
    /// (once; later calls append nothing): for a connection whose TLS bound the
    /// server's nonce ([`BOUND_ALPN`]), so the client need not wait for `Welcome` to
    /// prove the token. `Welcome` must then carry the same nonce.
    pub fn start_bound(&mut self, server_nonce: [u8; 32], out: &mut Vec<u8>) {
        if !matches!(self.state, ClientState::Start) {
            return;
        }
        self.start(out);
        if let Some(t) = &self.config.token {
            AuthProof {
                mac: auth::client_proof(t, &self.client_nonce, &server_nonce),
            }
            .encode(out);
        }
        self.state = ClientState::AwaitBoundWelcome(server_nonce);
    }

    /// Takes the server's next frame.
    ///
    /// # Errors
    /// [`HandshakeError`]; an `Error` frame for the server has been appended to `out`
    /// where one is due, and the handshake is over.
    pub fn handle(
        &mut self,
        frame: &Frame,
        out: &mut Vec<u8>,
    ) -> Result<HandshakeStatus, HandshakeError> {
        let state = std::mem::replace(&mut self.state, ClientState::Failed);
        let result = self.step(state, frame, out);
        if let Err(e) = &result {
            self.state = ClientState::Failed;
            report(e, out);
        }
        result
    }

    fn step(
        &mut self,
        state: ClientState,
        frame: &Frame,
        out: &mut Vec<u8>,
    ) -> Result<HandshakeStatus, HandshakeError> {
        if let Some(e) = peer_error(frame) {
            return Err(e);
        }
        match (state, frame) {
            (ClientState::AwaitWelcome, Frame::Welcome(w)) => self.welcome(w, None, out),
            (ClientState::AwaitBoundWelcome(nonce), Frame::Welcome(w)) => {
                self.welcome(w, Some(nonce), out)
            }
            (ClientState::AwaitAuthOk(w), Frame::AuthOk(ok)) => {
                let Some(t) = &self.config.token else {
                    return Err(HandshakeError::TokenRequired);
                };
                if !auth::verify_server_proof(t, &self.client_nonce, &w.server_nonce, &ok.mac) {
                    return Err(HandshakeError::ServerAuthFailed);
                }
                self.state = ClientState::Done;
                Ok(HandshakeStatus::Done(Established::new(
                    &w,
                    self.client_nonce,
                    Some(t),
                )))
            }
            (ClientState::Done | ClientState::Failed, _) => Err(HandshakeError::Finished),
            (state, f) => Err(HandshakeError::UnexpectedFrame {
                frame: f.frame_type(),
                state: match state {
                    ClientState::Start => "not started",
                    ClientState::AwaitWelcome | ClientState::AwaitBoundWelcome(_) => {
                        "awaiting Welcome"
                    }
                    _ => "awaiting AuthOk",
                },
            }),
        }
    }
}

impl ClientHandshake {
    /// The server's `Welcome`; `bound` is the nonce a bound start already proved.
    fn welcome(
        &mut self,
        w: &Welcome,
        bound: Option<[u8; 32]>,
        out: &mut Vec<u8>,
    ) -> Result<HandshakeStatus, HandshakeError> {
        if !(MIN_PROTOCOL_VERSION..=PROTOCOL_VERSION).contains(&w.version) {
            return Err(HandshakeError::UnsupportedVersion {
                our_min: MIN_PROTOCOL_VERSION,
                our_max: PROTOCOL_VERSION,
                peer_min: w.version,
                peer_max: w.version,
            });
        }
        if !self.config.capabilities.contains(w.capabilities) {
            return Err(HandshakeError::BadCapabilities(w.capabilities));
        }
        if let Some(nonce) = bound {
            if w.server_nonce != nonce {
                return Err(HandshakeError::Unbound);
            }
            let promised = self.config.capabilities.intersection(BOUND_CAPABILITIES);
            if !w.capabilities.contains(promised) {
                return Err(HandshakeError::BadCapabilities(w.capabilities));
            }
        }
        match (&self.config.token, w.auth_required) {
            (None, false) => {
                self.state = ClientState::Done;
                Ok(HandshakeStatus::Done(Established::new(
                    w,
                    self.client_nonce,
                    None,
                )))
            }
            (Some(_), false) => Err(HandshakeError::AuthDowngrade),
            (None, true) => Err(HandshakeError::TokenRequired),
            (Some(t), true) => {
                if bound.is_none() {
                    AuthProof {
                        mac: auth::client_proof(t, &self.client_nonce, &w.server_nonce),
                    }
                    .encode(out);
                }
                self.state = ClientState::AwaitAuthOk(w.clone());
                Ok(HandshakeStatus::InProgress)
            }
        }
    }
}

#[derive(Debug, Clone)]
enum ServerState {
    AwaitHello,
    AwaitProof(Hello, Welcome),
    Done,
    Failed,
}

/// The server side of the handshake.
#[derive(Debug, Clone)]
pub struct ServerHandshake {
    config: ServerConfig,
    server_nonce: [u8; 32],
    state: ServerState,
}

impl ServerHandshake {
    /// A server with `config`, with a fresh random `server_nonce`.
    pub fn new(config: ServerConfig, server_nonce: [u8; 32]) -> ServerHandshake {
        ServerHandshake {
            config,
            server_nonce,
            state: ServerState::AwaitHello,
        }
    }

    /// Takes the client's next frame.
    ///
    /// A failed proof is answered with `Error { AuthFailed }` at once; rate-limiting
    /// failed attempts needs a clock and is the daemon's job.
    ///
    /// # Errors
    /// [`HandshakeError`]; an `Error` frame for the client has been appended to `out`
    /// where one is due, and the handshake is over.
    pub fn handle(
        &mut self,
        frame: &Frame,
        out: &mut Vec<u8>,
    ) -> Result<HandshakeStatus, HandshakeError> {
        let state = std::mem::replace(&mut self.state, ServerState::Failed);
        let result = self.step(state, frame, out);
        if let Err(e) = &result {
            self.state = ServerState::Failed;
            report(e, out);
        }
        result
    }

    fn step(
        &mut self,
        state: ServerState,
        frame: &Frame,
        out: &mut Vec<u8>,
    ) -> Result<HandshakeStatus, HandshakeError> {
        if let Some(e) = peer_error(frame) {
            return Err(e);
        }
        match (state, frame) {
            (ServerState::AwaitHello, Frame::Hello(h)) => {
                let version = h.version.min(PROTOCOL_VERSION);
                if version < h.min_version.max(MIN_PROTOCOL_VERSION) {
                    return Err(HandshakeError::UnsupportedVersion {
                        our_min: MIN_PROTOCOL_VERSION,
                        our_max: PROTOCOL_VERSION,
                        peer_min: h.min_version,
                        peer_max: h.version,
                    });
                }
                let welcome = Welcome {
                    version,
                    capabilities: h.capabilities.intersection(self.config.capabilities),
                    server_nonce: self.server_nonce,
                    auth_required: self.config.token.is_some(),
                };
                welcome.encode(out);
                if welcome.auth_required {
                    self.state = ServerState::AwaitProof(h.clone(), welcome);
                    Ok(HandshakeStatus::InProgress)
                } else {
                    self.state = ServerState::Done;
                    Ok(HandshakeStatus::Done(Established::new(
                        &welcome,
                        h.client_nonce,
                        None,
                    )))
                }
            }
            (ServerState::AwaitProof(h, w), Frame::AuthProof(p)) => {
                let Some(t) = &self.config.token else {
                    return Err(HandshakeError::ClientAuthFailed);
                };
                if !auth::verify_client_proof(t, &h.client_nonce, &self.server_nonce, &p.mac) {
                    return Err(HandshakeError::ClientAuthFailed);
                }
                AuthOk {
                    mac: auth::server_proof(t, &h.client_nonce, &self.server_nonce),
                }
                .encode(out);
                self.state = ServerState::Done;
                Ok(HandshakeStatus::Done(Established::new(
                    &w,
                    h.client_nonce,
                    Some(t),
                )))
            }
            (ServerState::Done | ServerState::Failed, _) => Err(HandshakeError::Finished),
            (state, f) => Err(HandshakeError::UnexpectedFrame {
                frame: f.frame_type(),
                state: match state {
                    ServerState::AwaitHello => "awaiting Hello",
                    _ => "awaiting AuthProof",
                },
            }),
        }
    }
}
