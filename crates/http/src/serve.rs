//! The HTTP listener: a tokio runtime on threads of its own, TLS (the daemon's identity,
//! ALPN `http/1.1`) or clear text, one hyper HTTP/1.1 connection per client, and the
//! dispatch of each request to its method.

use crate::auth::{self, Grant};
use crate::body::Out;
use crate::dav::{self, Reply};
use crate::error::Fail;
use crate::macaroon::Key;
use crate::target::{self, Target};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use sluice_engine::accounts::Live;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::{oneshot, Semaphore};

/// How long a client has to finish its TLS handshake, or to send a request's headers.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long stopping waits for work on the blocking pool.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// Largest request body read whole (`PROPFIND`, macaroon requests).
pub const MAX_SMALL_BODY: usize = 64 << 10;

/// The HTTP face's settings.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// Where to listen.
    pub listen: SocketAddr,
    /// TLS with the daemon's identity (ALPN `http/1.1` is added).
    pub tls: Arc<rustls::ServerConfig>,
    /// Whether clear-text HTTP is admitted too (loopback, or `--http-insecure`): the
    /// first byte tells a TLS handshake from a request.
    pub admit_clear: bool,
    /// The accounts served (a request uses those in force when it arrives).
    pub accounts: Arc<Live>,
    /// Whether SIGHUP re-reads the accounts file (`--accounts`), as the daemon does.
    pub reload_on_hup: bool,
    /// Connections served at once; more wait in the kernel's backlog.
    pub max_connections: usize,
    /// Third-party copies at once; more are answered 429.
    pub max_copies: usize,
    /// The scoped tokens' key file (`None`: a random key per start).
    pub token_key: Option<std::path::PathBuf>,
    /// How often a copy's perf marker is sent.
    pub marker_interval: Duration,
    /// How this daemon checks the servers it copies from (HTTPS sources).
    pub client_tls: Arc<rustls::ClientConfig>,
    /// The other daemons of the site (a busy daemon redirects copies to them).
    pub site: crate::site::Site,
    /// The daemon's sluice side, for native bytes between sluice daemons.
    pub native: Option<crate::copy::native::Native>,
}

/// What every request handler shares.
pub struct State {
    /// The settings.
    pub cfg: HttpConfig,
    /// The scoped tokens' signing key.
    pub key: Key,
    /// A permit per running copy.
    pub copies: Arc<Semaphore>,
    tls: tokio_rustls::TlsAcceptor,
}

impl State {
    /// Copies running now.
    pub fn running_copies(&self) -> usize {
        self.cfg.max_copies - self.copies.available_permits()
    }
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

/// Whether a request came over TLS, and the address it reached (a request
/// extension).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnInfo {
    /// Over TLS.
    pub tls: bool,
    /// This server's address on the connection.
    pub local: SocketAddr,
}

/// A running HTTP face.
#[derive(Debug)]
pub struct HttpServer {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl HttpServer {
    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting and waits for the accept loop to end.
    pub fn stop(mut self) {
        self.shut();
    }

    fn shut(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.shut();
    }
}

/// Binds `cfg.listen` and serves on threads of its own until stopped.
///
/// # Errors
/// The address cannot be bound, or the runtime or the signing key cannot be made.
pub fn start(cfg: HttpConfig) -> std::io::Result<HttpServer> {
    assert!(cfg.max_connections > 0 && cfg.max_copies > 0);
    let listener = std::net::TcpListener::bind(cfg.listen)?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(64)
        .thread_name("http")
        .enable_all()
        .build()?;
    let mut tls = (*cfg.tls).clone();
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let state = Arc::new(State {
        key: match &cfg.token_key {
            Some(p) => Key::from_file(p).map_err(std::io::Error::other)?,
            None => Key::random()?,
        },
        copies: Arc::new(Semaphore::new(cfg.max_copies)),
        tls: tokio_rustls::TlsAcceptor::from(Arc::new(tls)),
        cfg,
    });
    if state.cfg.reload_on_hup {
        reload_on_hup(Arc::clone(&state.cfg.accounts))?;
    }
    let (tx, rx) = oneshot::channel();
    let thread = std::thread::Builder::new()
        .name("http-accept".into())
        .spawn(move || {
            rt.block_on(accept_loop(listener, state, rx));
            // Running requests are dropped (an upload's temporary file is removed);
            // a native copy on the blocking pool gets a moment to end.
            rt.shutdown_timeout(SHUTDOWN_GRACE);
        })?;
    Ok(HttpServer {
        addr,
        stop: Some(tx),
        thread: Some(thread),
    })
}

/// Re-reads the accounts file on every SIGHUP (beside the daemon's own handler, which
/// reloads the sluice side's accounts): a token removed from the file stops working on
/// both faces.
fn reload_on_hup(live: Arc<Live>) -> std::io::Result<()> {
    let mut signals = signal_hook::iterator::Signals::new([signal_hook::consts::SIGHUP])?;
    std::thread::Builder::new()
        .name("http-sighup".into())
        .stack_size(256 << 10)
        .spawn(move || {
            for _ in signals.forever() {
                match live.reload() {
                    Ok(n) => tracing::warn!("http: SIGHUP: {n} accounts reloaded"),
                    Err(e) => tracing::error!("http: SIGHUP: {e}; keeping the accounts in force"),
                }
            }
        })?;
    Ok(())
}

async fn accept_loop(
    listener: std::net::TcpListener,
    state: Arc<State>,
    mut stop: oneshot::Receiver<()>,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("http: cannot listen: {e}");
            return;
        }
    };
    let slots = Arc::new(Semaphore::new(state.cfg.max_connections));
    loop {
        let Ok(permit) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let accepted = tokio::select! {
            _ = &mut stop => return,
            a = listener.accept() => a,
        };
        match accepted {
            Ok((stream, peer)) => {
                let st = Arc::clone(&state);
                tokio::spawn(async move {
                    connection(st, stream, peer).await;
                    drop(permit);
                });
            }
            Err(e) => {
                tracing::warn!("http: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

async fn connection(state: Arc<State>, stream: tokio::net::TcpStream, peer: SocketAddr) {
    let _ = stream.set_nodelay(true);
    let Ok(local) = stream.local_addr() else {
        return;
    };
    if state.cfg.admit_clear {
        let mut first = [0u8; 1];
        match tokio::time::timeout(HEADER_TIMEOUT, stream.peek(&mut first)).await {
            Ok(Ok(1)) if first[0] != TLS_HANDSHAKE_BYTE => {
                return http1(state, stream, peer, local, false).await
            }
            Ok(Ok(1)) => {}
            _ => return,
        }
    }
    let acceptor = state.tls.clone();
    match tokio::time::timeout(HEADER_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(s)) => http1(state, s, peer, local, true).await,
        Ok(Err(e)) => tracing::debug!("http: {peer}: TLS handshake failed: {e}"),
        Err(_) => tracing::debug!("http: {peer}: TLS handshake timed out"),
    }
}

/// The first byte of a TLS handshake record.
const TLS_HANDSHAKE_BYTE: u8 = 0x16;

async fn http1<S>(state: Arc<State>, stream: S, peer: SocketAddr, local: SocketAddr, tls: bool)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
        req.extensions_mut().insert(ConnInfo { tls, local });
        let st = Arc::clone(&state);
        async move { Ok::<_, std::convert::Infallible>(handle(&st, req, peer).await) }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service)
        .await;
    if let Err(e) = served {
        tracing::debug!("http: {peer}: {e}");
    }
}

async fn handle(state: &State, req: Request<Incoming>, peer: SocketAddr) -> Response<Out> {
    let what = format!("{} {}", req.method(), req.uri().path());
    match route(state, req).await {
        Ok(r) => {
            tracing::debug!("http: {peer}: {what}: {}", r.status());
            r
        }
        Err(f) => {
            tracing::info!("http: {peer}: {what}: {f}");
            fail_response(&f)
        }
    }
}

/// The response for a failure: its status, the reason as one line of text, and
/// `WWW-Authenticate: Bearer` on a 401.
pub fn fail_response(f: &Fail) -> Response<Out> {
    let mut r = Response::new(Out::text(format!("{}\n", f.message)));
    *r.status_mut() = f.status;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if f.status == StatusCode::UNAUTHORIZED {
        h.insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer realm=\"sluice\""),
        );
    }
    r
}

async fn route(state: &State, req: Request<Incoming>) -> Reply {
    if req.method() == hyper::Method::OPTIONS {
        let mut r = dav::options()?;
        advertise(state, &req, &mut r);
        return Ok(r);
    }
    if req.method() == hyper::Method::GET && req.uri().path() == crate::site::LOAD_PATH {
        return dav::response(StatusCode::OK)
            .header(header::CONTENT_TYPE, "application/json")
            .body(Out::text(crate::site::load_body(state.running_copies())))
            .map_err(dav::internal);
    }
    let target = target::parse(req.uri().path())?;
    let grant = auth::authenticate(
        &state.cfg.accounts.current(),
        &state.key,
        req.headers(),
        req.uri().query(),
        SystemTime::now(),
    )?;
    match req.method().as_str() {
        "HEAD" => {
            let mut r = dav::get(&grant, target, &req, true).await?;
            advertise(state, &req, &mut r);
            Ok(r)
        }
        "GET" => dav::get(&grant, target, &req, false).await,
        "PUT" => dav::put(&grant, target, req).await,
        "DELETE" => dav::delete(&grant, target).await,
        "MKCOL" => dav::mkcol(&grant, target).await,
        "PROPFIND" => {
            let depth = header_str(&req, "depth");
            small_body(req).await?;
            dav::propfind::propfind(&grant, target, depth.as_deref()).await
        }
        "COPY" => crate::copy::copy(state, &grant, target, req).await,
        "POST" => post(state, &grant, target, req).await,
        m => Err(Fail::new(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("{m}: not served (served: {})", dav::ALLOW),
        )),
    }
}

/// Adds the daemon's sluice endpoint and fingerprint to an answer over TLS (a peer
/// daemon then moves a copy's bytes over sluice's protocol).
fn advertise<B>(state: &State, req: &Request<B>, r: &mut Response<Out>) {
    let info = req.extensions().get::<ConnInfo>().copied();
    if let (Some(native), Some(c)) = (&state.cfg.native, info) {
        if c.tls {
            r.headers_mut()
                .extend(crate::copy::native::advertise(native, c.local));
        }
    }
}

/// A header's value as text, if present and text.
pub(crate) fn header_str<B>(req: &Request<B>, name: &str) -> Option<String> {
    req.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// A request body of at most [`MAX_SMALL_BODY`] bytes, read whole.
///
/// # Errors
/// 413 for a larger one, 400 for one that breaks off.
pub(crate) async fn small_body(req: Request<Incoming>) -> Result<bytes::Bytes, Fail> {
    let limited = http_body_util::Limited::new(req.into_body(), MAX_SMALL_BODY);
    match limited.collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(Fail::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the request body is larger than {MAX_SMALL_BODY} bytes"),
        )),
        Err(e) => Err(Fail::bad(format!("the request body broke off: {e}"))),
    }
}

/// `POST` with `Content-Type: application/macaroon-request`: a scoped token for the
/// target (JSON `{"macaroon": ..., "uri": {...}}`).
async fn post(state: &State, grant: &Grant, target: Target, req: Request<Incoming>) -> Reply {
    let ct = header_str(&req, "content-type").unwrap_or_default();
    if !ct
        .trim()
        .to_ascii_lowercase()
        .starts_with("application/macaroon-request")
    {
        return Err(Fail::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "POST: only Content-Type application/macaroon-request is served",
        ));
    }
    let https = req.extensions().get::<ConnInfo>().is_some_and(|c| c.tls);
    let host = header_str(&req, "host").unwrap_or_else(|| state.cfg.listen.to_string());
    let body = small_body(req).await?;
    let scope = crate::macaroon::requested(grant, &target, &body, SystemTime::now())?;
    let token = state.key.issue(&scope);
    let scheme = if https { "https" } else { "http" };
    let base = format!(
        "{scheme}://{host}{}",
        target::href(target.rel.as_ref(), target.slash)
    );
    let v = serde_json::json!({
        "macaroon": token,
        "uri": {
            "target": base,
            "targetWithMacaroon": format!("{base}?authz={token}"),
            "baseWithMacaroon": format!("{scheme}://{host}/?authz={token}"),
        }
    });
    dav::response(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Out::text(format!("{v}\n")))
        .map_err(dav::internal)
}
