//! Whom a client trusts, and the client side of a TLS session.
//!
//! A control connection is verified by the client's [`Trust`]: a known-hosts file
//! (trust on first use, like ssh), a CA bundle (webpki: chain and host name), or a
//! fingerprint the caller already knows. Pinning never skips the TLS 1.3 handshake
//! signature: the peer must hold the pinned certificate's key. The data connections of
//! the session are then pinned to the certificate the control connection presented.

use super::fingerprint::Fingerprint;
use super::identity::env_path;
use super::link::Link;
use super::{provider, Encrypt};
use crate::error::EngineError;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use std::io::Write;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Whom a client trusts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trust {
    /// Trust on first use: an unknown server's fingerprint is added to `file` (None:
    /// [`default_known_hosts`]); `strict` refuses unknown servers instead. A changed
    /// certificate is always refused.
    KnownHosts {
        /// The known-hosts file.
        file: Option<PathBuf>,
        /// Refuse servers not in the file.
        strict: bool,
    },
    /// A PEM bundle of CA certificates: the chain and the host name are validated.
    Ca(PathBuf),
    /// Exactly the certificate with this fingerprint (learnt over another channel,
    /// e.g. ssh).
    Pinned(Fingerprint),
}

/// How a client encrypts and whom it trusts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientTls {
    /// When to encrypt.
    pub encrypt: Encrypt,
    /// Whom to trust.
    pub trust: Trust,
}

impl Default for ClientTls {
    fn default() -> ClientTls {
        ClientTls {
            encrypt: Encrypt::Auto,
            trust: Trust::KnownHosts {
                file: None,
                strict: false,
            },
        }
    }
}

/// The known-hosts file by default: `$SLUICE_KNOWN_HOSTS`, else
/// `$XDG_CONFIG_HOME/sluice/known_hosts`, else `$HOME/.config/sluice/known_hosts`.
pub fn default_known_hosts() -> Option<PathBuf> {
    env_path("SLUICE_KNOWN_HOSTS")
        .or_else(|| env_path("XDG_CONFIG_HOME").map(|p| p.join("sluice/known_hosts")))
        .or_else(|| env_path("HOME").map(|p| p.join(".config/sluice/known_hosts")))
}

/// What the pinning verifier expects of the certificate.
#[derive(Debug)]
enum Expect {
    /// Anything (an unknown host, trusted on first use).
    Any,
    /// Refuse whatever comes (an unknown host under `--strict-host-key`).
    Unknown { file: PathBuf },
    /// This fingerprint; `pinned_at` is the known-hosts line that says so.
    Exactly {
        fp: Fingerprint,
        pinned_at: Option<(PathBuf, usize)>,
    },
}

/// Pins the server certificate by fingerprint and checks the handshake signature.
#[derive(Debug)]
struct PinVerifier {
    host: String,
    expect: Expect,
    provider: Arc<CryptoProvider>,
    /// Why the certificate was refused, in words for the user.
    refusal: Mutex<Option<String>>,
}

impl PinVerifier {
    fn verdict(&self, seen: Fingerprint) -> Result<(), String> {
        let host = &self.host;
        match &self.expect {
            Expect::Any => Ok(()),
            Expect::Exactly { fp, .. } if fp.matches(&seen) => Ok(()),
            Expect::Exactly {
                fp,
                pinned_at: Some((file, line)),
            } => Err(format!(
                "the certificate of {host} CHANGED: it presents {seen}, but {} line {line} pins {fp}; if the change is expected, remove line {line} of {}",
                file.display(),
                file.display()
            )),
            Expect::Exactly { fp, .. } => Err(format!(
                "{host} presents certificate {seen}, not the pinned {fp}"
            )),
            Expect::Unknown { file } => Err(format!(
                "{host} is not in {} (it presents {seen}): --strict-host-key refuses unknown hosts",
                file.display()
            )),
        }
    }
}

impl ServerCertVerifier for PinVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.verdict(Fingerprint::of(end_entity.as_ref())) {
            Ok(()) => Ok(ServerCertVerified::assertion()),
            Err(m) => {
                *self
                    .refusal
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(m.clone());
                Err(rustls::Error::General(m))
            }
        }
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        // Never called: only TLS 1.3 is offered.
        Err(rustls::Error::General("TLS 1.2 is not offered".into()))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// A client configuration (TLS 1.3 only) with `verifier`.
fn client_config(
    provider: Arc<CryptoProvider>,
    verifier: Arc<dyn ServerCertVerifier>,
) -> Result<Arc<ClientConfig>, EngineError> {
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| EngineError::Config(format!("TLS: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    // Offered, not required: a daemon that does not select it gets the unbound
    // handshake, a round trip longer.
    config.alpn_protocols = vec![sluice_wire::BOUND_ALPN.to_vec()];
    Ok(Arc::new(config))
}

/// How the data connections of an encrypted session are opened: pinned to the
/// certificate the control connection presented.
#[derive(Debug, Clone)]
pub(crate) struct DataDial {
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
    host: String,
}

impl DataDial {
    /// The dial for a session whose control connection presented `fp`.
    pub(crate) fn pinned(host: &str, fp: Fingerprint) -> Result<DataDial, EngineError> {
        let (config, _) = pinned_config(host, fp)?;
        Ok(DataDial {
            config,
            name: server_name(host)?,
            host: host.to_string(),
        })
    }

    /// Runs the TLS handshake on a data connection.
    pub(crate) fn secure(&self, stream: TcpStream, timeout: Duration) -> Result<Link, EngineError> {
        handshake(
            stream,
            &self.config,
            self.name.clone(),
            &self.host,
            None,
            timeout,
        )
    }
}

fn pinned_config(
    host: &str,
    fp: Fingerprint,
) -> Result<(Arc<ClientConfig>, Arc<PinVerifier>), EngineError> {
    let provider = provider();
    let v = Arc::new(PinVerifier {
        host: host.to_string(),
        expect: Expect::Exactly {
            fp,
            pinned_at: None,
        },
        provider: Arc::clone(&provider),
        refusal: Mutex::new(None),
    });
    Ok((client_config(provider, v.clone())?, v))
}

/// The TLS name of `addr` (`host:port`, `[v6]:port`): an IP address or a DNS name.
fn server_name(addr: &str) -> Result<ServerName<'static>, EngineError> {
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_string())
        .map_err(|e| EngineError::Config(format!("{host:?} is not a TLS server name: {e}")))
}

fn handshake(
    stream: TcpStream,
    config: &Arc<ClientConfig>,
    name: ServerName<'static>,
    peer: &str,
    verifier: Option<&PinVerifier>,
    timeout: Duration,
) -> Result<Link, EngineError> {
    stream
        .set_read_timeout(Some(timeout))
        .map_err(|e| EngineError::io("setting a timeout", e))?;
    let link = Link::connect_tls(stream, Arc::clone(config), name).map_err(|e| {
        let ours = verifier.and_then(|v| {
            v.refusal
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take()
        });
        EngineError::Handshake {
            peer: peer.to_string(),
            message: ours.unwrap_or_else(|| tls_failure(&e)),
        }
    })?;
    link.set_read_timeout(None)
        .map_err(|e| EngineError::io("clearing a timeout", e))?;
    Ok(link)
}

/// A failed client handshake in words; a server that answered in clear text is named
/// as such (a sluice without TLS, or a refusal sent before TLS, such as `Busy`).
fn tls_failure(e: &std::io::Error) -> String {
    let clear = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .is_some_and(|r| {
            matches!(
                r,
                rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType)
            )
        });
    match clear {
        true => format!("TLS: {e} (the server answered in clear text: a sluice without TLS, or a refusal such as Busy sent before TLS)"),
        false => format!("TLS: {e}"),
    }
}

/// Runs the TLS handshake of a control connection to `addr` under `trust`; returns the
/// link and the dial of the session's data connections. An unknown host trusted on
/// first use is added to the known-hosts file once its handshake has succeeded.
pub(crate) fn secure_control(
    stream: TcpStream,
    addr: &str,
    trust: &Trust,
    timeout: Duration,
) -> Result<(Link, DataDial), EngineError> {
    let name = server_name(addr)?;
    let (link, pin_to) = match trust {
        Trust::Ca(file) => {
            let config = ca_config(file)?;
            (handshake(stream, &config, name, addr, None, timeout)?, None)
        }
        Trust::Pinned(fp) => {
            let (config, v) = pinned_config(addr, *fp)?;
            (
                handshake(stream, &config, name, addr, Some(&v), timeout)?,
                None,
            )
        }
        Trust::KnownHosts { file, strict } => {
            let file = match file {
                Some(f) => f.clone(),
                None => default_known_hosts().ok_or_else(|| {
                    EngineError::Config(
                        "no known-hosts file: give --known-hosts FILE (or set $SLUICE_KNOWN_HOSTS or $HOME)".into(),
                    )
                })?,
            };
            let expect = expectation(&file, addr, *strict)?;
            let unknown = matches!(expect, Expect::Any);
            let provider = provider();
            let v = Arc::new(PinVerifier {
                host: addr.to_string(),
                expect,
                provider: Arc::clone(&provider),
                refusal: Mutex::new(None),
            });
            let config = client_config(provider, v.clone())?;
            let link = handshake(stream, &config, name, addr, Some(&v), timeout)?;
            (link, unknown.then_some(file))
        }
    };
    let fp = link
        .peer_fingerprint()
        .ok_or_else(|| EngineError::Handshake {
            peer: addr.to_string(),
            message: "the server presented no certificate".into(),
        })?;
    if let Some(file) = pin_to {
        pin(&file, addr, fp)?;
    }
    Ok((link, DataDial::pinned(addr, fp)?))
}

/// A webpki-validating configuration trusting the CA certificates in `file`.
fn ca_config(file: &Path) -> Result<Arc<ClientConfig>, EngineError> {
    let bad =
        |e: &dyn std::fmt::Display| EngineError::Config(format!("--ca {}: {e}", file.display()));
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(file).map_err(|e| bad(&e))? {
        roots.add(cert.map_err(|e| bad(&e))?).map_err(|e| bad(&e))?;
    }
    if roots.is_empty() {
        return Err(bad(&"no PEM certificate in it"));
    }
    let provider = provider();
    let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| bad(&e))?;
    client_config(provider, verifier)
}

/// What `file` says of `host`: its pinned fingerprint (and where), or nothing.
fn expectation(file: &Path, host: &str, strict: bool) -> Result<Expect, EngineError> {
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(EngineError::io(format!("reading {}", file.display()), e)),
    };
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut fields = line.split_whitespace();
        if fields.next() != Some(host) {
            continue;
        }
        let fp = fields
            .next()
            .unwrap_or_default()
            .parse::<Fingerprint>()
            .map_err(|e| EngineError::Config(format!("{} line {}: {e}", file.display(), i + 1)))?;
        return Ok(Expect::Exactly {
            fp,
            pinned_at: Some((file.to_path_buf(), i + 1)),
        });
    }
    Ok(match strict {
        true => Expect::Unknown {
            file: file.to_path_buf(),
        },
        false => Expect::Any,
    })
}

/// Appends `host fp` to the known-hosts `file` and says so on stderr.
fn pin(file: &Path, host: &str, fp: Fingerprint) -> Result<(), EngineError> {
    let err = |e| EngineError::io(format!("adding {host} to {}", file.display()), e);
    if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
        .map_err(err)?;
    f.write_all(format!("{host} {fp}\n").as_bytes())
        .map_err(err)?;
    eprintln!("sluice: pinned {host} ({fp}) in {}", file.display());
    Ok(())
}
