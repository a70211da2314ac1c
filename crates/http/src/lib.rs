//! sluice's HTTP face (`sluice serve --http ADDR`): a WebDAV subset and the WLCG HTTP
//! third-party copy (HTTP-TPC), so that FTS3 and Rucio, through gfal2 and davix, can
//! drive a sluice daemon as they drive dCache, XRootD or EOS.
//!
//! The engine stays thread-based; this crate runs a tokio runtime on threads of its own
//! (`http-*`) and uses the engine only through its accounts, confined roots and TLS
//! identity.
//!
//! * [`serve`]: the listener, TLS, one hyper connection per client, method dispatch.
//! * [`auth`]: `Authorization: Bearer` mapped to the daemon's accounts (constant time),
//!   or to a scoped token the daemon issued ([`macaroon`]).
//! * [`target`]: a request's path, decoded and confined under the account's root.
//! * [`dav`]: `HEAD`, `GET` (with `Range`), `PUT`, `DELETE`, `MKCOL`, `PROPFIND`,
//!   `OPTIONS`.
//! * [`digest`]: RFC 3230 `Want-Digest`/`Digest` (adler32, md5), computed while data
//!   moves and kept with the file in an extended attribute.
//! * [`upload`]: a file arriving (PUT or a pulled copy): a temporary file renamed into
//!   place only when complete.
//! * [`copy`]: `COPY` with `Source:` (pull) or `Destination:` (push), the
//!   perf-marker stream, sluice-native bytes between sluice daemons.
//! * [`site`]: a busy daemon's `307` to a less-loaded daemon of its site.

pub mod auth;
pub mod body;
pub mod copy;
pub mod dav;
pub mod digest;
pub mod error;
pub mod macaroon;
pub mod serve;
pub mod site;
pub mod target;
pub mod upload;

pub use error::Fail;
pub use serve::{start, HttpConfig, HttpServer};
