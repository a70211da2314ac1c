//! TLS 1.3 on every connection (rustls, the ring provider: AES-GCM with AES-NI).
//!
//! * [`Link`]: one connection, clear or encrypted, what every frame and chunk
//!   reader and writer works on;
//! * [`Encrypt`]: the `--encrypt auto|always|never` policy of both sides;
//! * [`ServerTls`]: a server's TLS configuration and policy, from an [`Identity`];
//! * [`ClientTls`] and [`Trust`]: how a client decides to encrypt and whom it trusts
//!   (a known-hosts file, a CA, or a fingerprint given by the caller).
//!
//! Negotiation needs no frame: an encrypting client opens every connection, control
//! and data, with a TLS ClientHello; the server peeks at the first byte
//! ([`TLS_HANDSHAKE_BYTE`]) and otherwise reads a sluice frame in clear text. Inside
//! TLS the sluice handshake (token HMAC) and `Join` run unchanged.

mod fingerprint;
mod identity;
mod link;
mod trust;

#[cfg(test)]
mod tests;

pub use fingerprint::Fingerprint;
pub use identity::{default_state_dir, host_name, Identity, IDENTITY_FILE};
pub use link::{Link, TX_BATCH_BYTES};
pub use trust::{default_known_hosts, ClientTls, Trust};
pub(crate) use trust::{secure_control, DataDial};

use crate::error::EngineError;
use rustls::crypto::CryptoProvider;
use rustls::ServerConfig;
use std::net::TcpStream;
use std::sync::Arc;

/// The first byte of a TLS handshake record: a connection starting with it is TLS.
pub const TLS_HANDSHAKE_BYTE: u8 = 0x16;

/// When a connection is encrypted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Encrypt {
    /// Client: TLS unless the server is on loopback. Server: clear text accepted from
    /// this host only.
    #[default]
    Auto,
    /// TLS always; a server refuses clear text from every peer.
    Always,
    /// Client: clear text. Server: clear text accepted from anyone (TLS still served to
    /// a client that asks).
    Never,
}

impl std::fmt::Display for Encrypt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Encrypt::Auto => "auto",
            Encrypt::Always => "always",
            Encrypt::Never => "never",
        })
    }
}

impl Encrypt {
    /// Whether a client with this setting encrypts its connections to `stream`'s peer.
    pub fn client_encrypts(self, stream: &TcpStream) -> bool {
        match self {
            Encrypt::Always => true,
            Encrypt::Never => false,
            Encrypt::Auto => !stream.peer_addr().is_ok_and(|a| a.ip().is_loopback()),
        }
    }

    /// Whether a server with this setting accepts clear text from `stream`'s peer; the
    /// refusal says what the setting is (for the client's error line).
    ///
    /// # Errors
    /// The setting's description, when clear text is refused.
    pub fn server_admits_clear(self, stream: &TcpStream) -> Result<(), &'static str> {
        match self {
            Encrypt::Never => Ok(()),
            Encrypt::Auto if super::transport::peer_is_this_host(stream) => Ok(()),
            Encrypt::Auto => Err("--encrypt auto, clear text from loopback only"),
            Encrypt::Always => Err("--encrypt always, TLS from every peer"),
        }
    }
}

/// The crypto provider: ring, TLS 1.3 suites only, AES-128-GCM first.
pub(crate) fn provider() -> Arc<CryptoProvider> {
    use rustls::crypto::ring::cipher_suite as cs;
    let mut p = rustls::crypto::ring::default_provider();
    p.cipher_suites = vec![
        cs::TLS13_AES_128_GCM_SHA256,
        cs::TLS13_AES_256_GCM_SHA384,
        cs::TLS13_CHACHA20_POLY1305_SHA256,
    ];
    Arc::new(p)
}

/// A server's TLS side: its configuration (TLS 1.3 only, its own suite order, no
/// session tickets: nothing is ever sent after the handshake but records), its policy
/// and its fingerprint.
#[derive(Debug, Clone)]
pub struct ServerTls {
    config: Arc<ServerConfig>,
    encrypt: Encrypt,
    fingerprint: Fingerprint,
}

impl ServerTls {
    /// A server presenting `identity`, admitting clear text by `encrypt`.
    ///
    /// # Errors
    /// The key does not fit the certificate or is of an unsupported kind.
    pub fn new(identity: &Identity, encrypt: Encrypt) -> Result<ServerTls, EngineError> {
        let bad = |e: rustls::Error| EngineError::Config(format!("the TLS identity: {e}"));
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(bad)?
            .with_no_client_auth()
            .with_single_cert(identity.certs.clone(), identity.key.clone_key())
            .map_err(bad)?;
        config.send_tls13_tickets = 0;
        // Binds the handshake to the TLS session: the client proves its token in its
        // first flight (protocol.md, "Handshake").
        config.alpn_protocols = vec![sluice_wire::BOUND_ALPN.to_vec()];
        // AES-128-GCM first whatever the client prefers (OpenSSL asks for AES-256).
        config.ignore_client_order = true;
        Ok(ServerTls {
            config: Arc::new(config),
            encrypt,
            fingerprint: identity.fingerprint(),
        })
    }

    /// A server with a fresh in-memory self-signed identity (tests, one-shot servers).
    ///
    /// # Errors
    /// Key generation failed.
    pub fn ephemeral(encrypt: Encrypt) -> Result<ServerTls, EngineError> {
        ServerTls::new(&Identity::ephemeral(&["localhost".into()])?, encrypt)
    }

    /// The fingerprint of the certificate it presents.
    pub fn fingerprint(&self) -> Fingerprint {
        self.fingerprint
    }

    /// Its clear-text policy.
    pub fn encrypt(&self) -> Encrypt {
        self.encrypt
    }

    /// The same server without the bound handshake (as a daemon of a version before
    /// it): tests of the fallback.
    #[cfg(test)]
    pub(crate) fn unbound(mut self) -> ServerTls {
        let mut config = (*self.config).clone();
        config.alpn_protocols.clear();
        self.config = Arc::new(config);
        self
    }

    /// Its rustls configuration (the HTTP face clones it to add ALPN).
    pub fn config(&self) -> Arc<ServerConfig> {
        Arc::clone(&self.config)
    }
}
