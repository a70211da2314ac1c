//! `COPY`: the WLCG HTTP third-party copy.

use crate::auth::Grant;
use crate::dav::Reply;
use crate::error::Fail;
use crate::serve::State;
use crate::target::Target;
use hyper::body::Incoming;
use hyper::{Request, StatusCode};

/// `COPY`.
pub async fn copy(
    _state: &State,
    _grant: &Grant,
    _target: Target,
    _req: Request<Incoming>,
) -> Reply {
    Err(Fail::new(StatusCode::NOT_IMPLEMENTED, "COPY: not yet"))
}
