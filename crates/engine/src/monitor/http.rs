//! `GET /metrics` over HTTP/1.1: hyper on a current-thread tokio runtime in a thread of
//! its own, so a scrape never runs on a data-path thread. A bearer token, where given,
//! is checked in constant time (both sides hashed first, so lengths do not leak).

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Scrapes served at once at most; more connections are closed at once.
const MAX_CONNECTIONS: usize = 16;

/// How long a client has to send its request head.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// The token a scrape must present (`Authorization: Bearer TOKEN`), kept hashed.
#[derive(Clone)]
pub struct BearerToken([u8; 32]);

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BearerToken(..)")
    }
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    let d = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

impl BearerToken {
    /// The token `secret` (never logged).
    pub fn new(secret: &[u8]) -> BearerToken {
        BearerToken(digest(secret))
    }

    /// Whether `header` (an `Authorization` value) carries this token; constant time.
    pub fn admits(&self, header: Option<&[u8]>) -> bool {
        let presented = header
            .and_then(|h| h.strip_prefix(b"Bearer "))
            .unwrap_or_default();
        use subtle::ConstantTimeEq as _;
        let same = bool::from(self.0.ct_eq(&digest(presented)));
        header.is_some() && same
    }
}

/// Serves `/metrics` on `listener` until the process ends. Returns the bound address.
///
/// # Errors
/// The listener cannot be made non-blocking, or the thread or runtime cannot start.
pub fn spawn(
    listener: std::net::TcpListener,
    token: Option<BearerToken>,
) -> std::io::Result<SocketAddr> {
    let addr = listener.local_addr()?;
    listener.set_nonblocking(true)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()?;
    std::thread::Builder::new()
        .name("metrics-http".into())
        .spawn(move || {
            runtime.block_on(async move {
                if let Err(e) = accept_loop(listener, token).await {
                    tracing::warn!("metrics endpoint stopped: {e}");
                }
            });
        })?;
    Ok(addr)
}

async fn accept_loop(
    listener: std::net::TcpListener,
    token: Option<BearerToken>,
) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let token = Arc::new(token);
    let open = Arc::new(AtomicUsize::new(0));
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!("metrics endpoint: accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if open.fetch_add(1, Ordering::Relaxed) >= MAX_CONNECTIONS {
            open.fetch_sub(1, Ordering::Relaxed);
            continue;
        }
        let (token, open) = (Arc::clone(&token), Arc::clone(&open));
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let token = Arc::clone(&token);
                async move { Ok::<_, std::convert::Infallible>(answer(&req, token.as_ref().as_ref())) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), service);
            if let Err(e) = conn.await {
                tracing::debug!("metrics endpoint: connection: {e}");
            }
            open.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *r.status_mut() = status;
    r
}

/// The response to one request.
fn answer(req: &Request<Incoming>, token: Option<&BearerToken>) -> Response<Full<Bytes>> {
    if req.uri().path() != "/metrics" {
        return text(StatusCode::NOT_FOUND, "only /metrics is served here\n");
    }
    if req.method() != hyper::Method::GET && req.method() != hyper::Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "GET /metrics\n");
    }
    if let Some(t) = token {
        let auth = req
            .headers()
            .get(hyper::header::AUTHORIZATION)
            .map(|v| v.as_bytes());
        if !t.admits(auth) {
            let mut r = text(StatusCode::UNAUTHORIZED, "a bearer token is required\n");
            r.headers_mut().insert(
                hyper::header::WWW_AUTHENTICATE,
                hyper::header::HeaderValue::from_static("Bearer"),
            );
            return r;
        }
    }
    // OpenMetrics to a scraper that asks for it (Prometheus does), the classic text
    // format to anything else.
    let openmetrics = req.headers().get(hyper::header::ACCEPT).is_some_and(|a| {
        a.as_bytes()
            .windows(19)
            .any(|w| w == b"application/openmet")
    });
    let (body, kind) = if openmetrics {
        (super::prom::render(), super::prom::CONTENT_TYPE)
    } else {
        (
            super::prom::render_classic(),
            super::prom::CLASSIC_CONTENT_TYPE,
        )
    };
    let mut r = Response::new(Full::new(Bytes::from(body)));
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(kind),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_admits_only_its_bearer() {
        let t = BearerToken::new(b"s3cret");
        assert!(t.admits(Some(b"Bearer s3cret")));
        assert!(!t.admits(Some(b"Bearer s3cre")));
        assert!(!t.admits(Some(b"Bearer s3cret ")));
        assert!(!t.admits(Some(b"Basic s3cret")));
        assert!(!t.admits(None));
        assert!(!format!("{t:?}").contains("s3cret"));
    }

    #[test]
    fn a_scrape_gets_the_text_and_a_wrong_token_a_401() {
        use std::io::{Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = spawn(l, Some(BearerToken::new(b"tok"))).unwrap();
        let get = |auth: &str| {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            write!(
                s,
                "GET /metrics HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n"
            )
            .unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).unwrap();
            out
        };
        let ok = get("Authorization: Bearer tok\r\n");
        assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
        assert!(ok.contains("sluice_payload_bytes_total"));
        assert!(get("Authorization: Bearer nope\r\n").starts_with("HTTP/1.1 401"));
        assert!(get("").starts_with("HTTP/1.1 401"));
    }
}
