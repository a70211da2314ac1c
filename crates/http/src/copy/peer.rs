//! The other end of a copy: an HTTP(S) URL (`davs://` is `https://`, `dav://` is
//! `http://`), a connection to it (TLS checked against the daemon's trust), and one
//! request sent over it with the client's `TransferHeader*` headers.

use crate::error::Fail;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::{StatusCode, Uri};
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// How long connecting to a peer (and its TLS handshake) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// The prefix of the headers a client asks to be sent to the peer.
pub const FORWARD_PREFIX: &str = "transferheader";

/// A peer's URL, checked.
#[derive(Debug, Clone)]
pub struct Peer {
    /// TLS or not.
    pub tls: bool,
    /// Host name or address (for TLS's server name and the `Host` header).
    pub host: String,
    /// Port.
    pub port: u16,
    /// `Host` header value.
    pub authority: String,
    /// Path and query.
    pub path: String,
}

/// The peer `url` names.
///
/// # Errors
/// 400 for a URL that does not parse or names no host; 501 for a scheme this daemon
/// cannot copy with.
pub fn parse(url: &str) -> Result<Peer, Fail> {
    let uri: Uri = url
        .trim()
        .parse()
        .map_err(|e| Fail::bad(format!("{url:?}: not a URL ({e})")))?;
    let scheme = uri.scheme_str().unwrap_or("").to_ascii_lowercase();
    let tls = match scheme.as_str() {
        "https" | "davs" => true,
        "http" | "dav" => false,
        other => {
            return Err(Fail::new(
                StatusCode::NOT_IMPLEMENTED,
                format!("{url:?}: the scheme {other:?} is not supported (http, https, dav, davs)"),
            ))
        }
    };
    let auth = uri
        .authority()
        .ok_or_else(|| Fail::bad(format!("{url:?}: no host")))?;
    let host = auth
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = auth.port_u16().unwrap_or(if tls { 443 } else { 80 });
    Ok(Peer {
        tls,
        host,
        port,
        authority: auth.as_str().to_owned(),
        path: uri
            .path_and_query()
            .map_or("/".into(), |p| p.as_str().to_owned()),
    })
}

/// The headers to send to the peer: each `TransferHeaderNAME: V` of the client's
/// request as `NAME: V` (hop-by-hop and framing headers excepted).
pub fn forwarded(headers: &HeaderMap) -> Vec<(HeaderName, HeaderValue)> {
    const NEVER: [&str; 6] = [
        "host",
        "connection",
        "content-length",
        "transfer-encoding",
        "te",
        "upgrade",
    ];
    let mut out = Vec::new();
    for (name, value) in headers {
        let Some(rest) = name.as_str().strip_prefix(FORWARD_PREFIX) else {
            continue;
        };
        if rest.is_empty() || NEVER.contains(&rest) {
            continue;
        }
        if let Ok(n) = HeaderName::from_bytes(rest.as_bytes()) {
            out.push((n, value.clone()));
        }
    }
    out
}

/// A request sender on a connection to a peer, and the peer's address.
pub struct Connected {
    /// Sends requests.
    pub sender: hyper::client::conn::http1::SendRequest<crate::body::Out>,
    /// Where it connected.
    pub addr: SocketAddr,
}

/// Connects to `peer` (TLS with `tls` when its URL asks for it) and starts the
/// connection's driver task.
///
/// # Errors
/// A failure line naming the peer and what went wrong.
pub async fn connect(peer: &Peer, tls: &Arc<rustls::ClientConfig>) -> Result<Connected, String> {
    let at = format!("{}:{}", peer.host, peer.port);
    let tcp = tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(&at))
        .await
        .map_err(|_| format!("connecting to {at}: timed out"))?
        .map_err(|e| format!("connecting to {at}: {e}"))?;
    let _ = tcp.set_nodelay(true);
    let addr = tcp
        .peer_addr()
        .map_err(|e| format!("connecting to {at}: {e}"))?;
    if !peer.tls {
        return handshake(tcp, addr, &at).await;
    }
    let name = rustls_pki_types::ServerName::try_from(peer.host.clone())
        .map_err(|e| format!("{}: not a TLS server name ({e})", peer.host))?;
    let connector = tokio_rustls::TlsConnector::from(Arc::clone(tls));
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, connector.connect(name, tcp))
        .await
        .map_err(|_| format!("TLS with {at}: timed out"))?
        .map_err(|e| format!("TLS with {at}: {e}"))?;
    handshake(stream, addr, &at).await
}

async fn handshake<S>(stream: S, addr: SocketAddr, at: &str) -> Result<Connected, String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("HTTP with {at}: {e}"))?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!("http: copy peer connection: {e}");
        }
    });
    Ok(Connected { sender, addr })
}

/// The client TLS configuration of copies ([`client_tls`]).
pub type ClientTls = Arc<rustls::ClientConfig>;

/// The trust for HTTPS sources and destinations of copies: the system's CA bundle
/// (`/etc/ssl/certs/ca-certificates.crt`, if present) and the PEM certificates of
/// `extra` (`--http-ca`: a site CA, or a peer daemon's self-signed certificate).
///
/// # Errors
/// `extra` cannot be read or holds no certificate; no certificate is trusted at all.
pub fn client_tls(extra: Option<&std::path::Path>) -> Result<ClientTls, String> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    let system = std::path::Path::new("/etc/ssl/certs/ca-certificates.crt");
    if let Ok(iter) = CertificateDer::pem_file_iter(system) {
        let (ok, bad) = roots.add_parsable_certificates(iter.filter_map(Result::ok));
        tracing::debug!("http: {ok} system CA certificates ({bad} unusable)");
    }
    if let Some(p) = extra {
        let certs = CertificateDer::pem_file_iter(p)
            .and_then(|i| i.collect::<Result<Vec<_>, _>>())
            .map_err(|e| format!("--http-ca {}: {e}", p.display()))?;
        if certs.is_empty() {
            return Err(format!(
                "--http-ca {}: no PEM certificate in it",
                p.display()
            ));
        }
        for c in certs {
            roots
                .add(c)
                .map_err(|e| format!("--http-ca {}: {e}", p.display()))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let p = parse("davs://example.org/a/b?x=1").unwrap_or_else(|e| panic!("{e}"));
        assert!(p.tls && p.port == 443 && p.host == "example.org" && p.path == "/a/b?x=1");
        let p = parse("http://[::1]:8080/f").unwrap_or_else(|e| panic!("{e}"));
        assert!(!p.tls && p.port == 8080 && p.host == "::1" && p.authority == "[::1]:8080");
        assert_eq!(
            parse("gsiftp://h/f").err().map(|f| f.status),
            Some(StatusCode::NOT_IMPLEMENTED)
        );
        assert_eq!(
            parse("not a url").err().map(|f| f.status),
            Some(StatusCode::BAD_REQUEST)
        );
    }

    #[test]
    fn forwards_transfer_headers_only() {
        let mut h = HeaderMap::new();
        h.insert(
            "transferheaderauthorization",
            HeaderValue::from_static("Bearer x"),
        );
        h.insert("transferheaderhost", HeaderValue::from_static("evil"));
        h.insert("authorization", HeaderValue::from_static("Bearer mine"));
        let f = forwarded(&h);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].0.as_str(), "authorization");
        assert_eq!(f[0].1, "Bearer x");
    }
}
