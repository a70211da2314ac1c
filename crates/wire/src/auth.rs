//! Authentication: the shared token, the handshake proofs and the join MAC.
//!
//! All MACs are HMAC-SHA256 over a fixed label followed by fixed-size fields, so no two
//! messages of different kinds can collide, and a proof of one kind cannot be replayed as
//! another (the labels differ). The token itself never crosses the wire; each proof binds
//! both sides' fresh nonces, so a recorded proof is worthless in a later session.
//! Comparison is constant-time (`hmac`'s `verify_slice`).

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Label of the client's proof.
pub const CLIENT_LABEL: &[u8] = b"sluice-v1 client";
/// Label of the server's proof.
pub const SERVER_LABEL: &[u8] = b"sluice-v1 server";
/// Label of the session key derivation.
pub const SESSION_LABEL: &[u8] = b"sluice-v1 session";
/// Label of the join key derivation.
pub const JOIN_KEY_LABEL: &[u8] = b"sluice-v1 join-key";
/// Label of a data connection's join MAC.
pub const JOIN_LABEL: &[u8] = b"sluice-v1 join";

/// Longest token accepted, in bytes.
pub const MAX_TOKEN_BYTES: usize = 1024;

/// The secret shared by client and daemon (`--token-file`). `Debug` does not print it.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(Vec<u8>);

/// A token was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Empty token: it would authenticate anybody.
    #[error("empty token")]
    Empty,
    /// Longer than [`MAX_TOKEN_BYTES`].
    #[error("token is {len} bytes, limit {max}")]
    TooLong {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
}

impl Token {
    /// Wraps the token bytes (any bytes: a random 32-byte key or a passphrase).
    ///
    /// # Errors
    /// [`TokenError`] if empty or too long.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Token, TokenError> {
        let bytes = bytes.into();
        if bytes.is_empty() {
            return Err(TokenError::Empty);
        }
        if bytes.len() > MAX_TOKEN_BYTES {
            return Err(TokenError::TooLong {
                len: bytes.len(),
                max: MAX_TOKEN_BYTES,
            });
        }
        Ok(Token(bytes))
    }

    /// The token bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Token(<{} bytes redacted>)", self.0.len())
    }
}

fn mac(key: &[u8], parts: &[&[u8]]) -> HmacSha256 {
    // HMAC takes keys of any length; `new_from_slice` cannot fail for it.
    let mut m = match HmacSha256::new_from_slice(key) {
        Ok(m) => m,
        Err(_) => unreachable_hmac(),
    };
    for p in parts {
        m.update(p);
    }
    m
}

#[cold]
fn unreachable_hmac() -> HmacSha256 {
    // Not reachable: HMAC accepts every key length. Fall back to an empty key rather
    // than panic; a wrong MAC then fails verification, which is safe.
    <HmacSha256 as hmac::digest::KeyInit>::new(&Default::default())
}

fn tag(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    mac(key, parts).finalize().into_bytes().into()
}

fn verify(key: &[u8], parts: &[&[u8]], expected: &[u8; 32]) -> bool {
    mac(key, parts).verify_slice(expected).is_ok()
}

/// `HMAC-SHA256(token, "sluice-v1 client" ‖ client_nonce ‖ server_nonce)`, sent in
/// `AuthProof`.
pub fn client_proof(token: &Token, client_nonce: &[u8; 32], server_nonce: &[u8; 32]) -> [u8; 32] {
    tag(&token.0, &[CLIENT_LABEL, client_nonce, server_nonce])
}

/// `HMAC-SHA256(token, "sluice-v1 server" ‖ client_nonce ‖ server_nonce)`, sent in
/// `AuthOk`.
pub fn server_proof(token: &Token, client_nonce: &[u8; 32], server_nonce: &[u8; 32]) -> [u8; 32] {
    tag(&token.0, &[SERVER_LABEL, client_nonce, server_nonce])
}

/// Whether `mac` is the client's proof for these nonces (constant-time).
#[must_use]
pub fn verify_client_proof(
    token: &Token,
    client_nonce: &[u8; 32],
    server_nonce: &[u8; 32],
    mac: &[u8; 32],
) -> bool {
    verify(&token.0, &[CLIENT_LABEL, client_nonce, server_nonce], mac)
}

/// Whether `mac` is the server's proof for these nonces (constant-time).
#[must_use]
pub fn verify_server_proof(
    token: &Token,
    client_nonce: &[u8; 32],
    server_nonce: &[u8; 32],
    mac: &[u8; 32],
) -> bool {
    verify(&token.0, &[SERVER_LABEL, client_nonce, server_nonce], mac)
}

/// The session key both sides derive after an authenticated handshake:
/// `HMAC-SHA256(token, "sluice-v1 session" ‖ client_nonce ‖ server_nonce)`. Never sent.
pub fn session_key(token: &Token, client_nonce: &[u8; 32], server_nonce: &[u8; 32]) -> [u8; 32] {
    tag(&token.0, &[SESSION_LABEL, client_nonce, server_nonce])
}

/// The key that data connections prove knowledge of.
///
/// With a session key (authenticated handshake):
/// `HMAC-SHA256(session_key, "sluice-v1 join-key" ‖ session_secret)`, so an eavesdropper
/// who read `Accept` still cannot join without the token. Without one, the
/// `session_secret` from `Accept` itself.
pub fn join_key(session_key: Option<&[u8; 32]>, session_secret: &[u8; 32]) -> [u8; 32] {
    match session_key {
        Some(k) => tag(k, &[JOIN_KEY_LABEL, session_secret]),
        None => *session_secret,
    }
}

/// `HMAC-SHA256(join_key, "sluice-v1 join" ‖ session_id u64 LE ‖ stream_index u16 LE)`,
/// sent in `Join`.
pub fn join_mac(join_key: &[u8; 32], session_id: u64, stream_index: u16) -> [u8; 32] {
    tag(
        join_key,
        &[
            JOIN_LABEL,
            &session_id.to_le_bytes(),
            &stream_index.to_le_bytes(),
        ],
    )
}

/// Whether `mac` is the join MAC for this session and stream (constant-time).
#[must_use]
pub fn verify_join_mac(
    join_key: &[u8; 32],
    session_id: u64,
    stream_index: u16,
    mac: &[u8; 32],
) -> bool {
    verify(
        join_key,
        &[
            JOIN_LABEL,
            &session_id.to_le_bytes(),
            &stream_index.to_le_bytes(),
        ],
        mac,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc4231_case_2() {
        // HMAC-SHA256 test vector (RFC 4231 §4.3): key "Jefe".
        let t = tag(b"Jefe", &[b"what do ya want ", b"for nothing?"]);
        let hex: String = t.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn proofs_are_distinct_and_verify() {
        let t = Token::new(*b"secret").unwrap();
        let (c, s) = ([1u8; 32], [2u8; 32]);
        let cp = client_proof(&t, &c, &s);
        let sp = server_proof(&t, &c, &s);
        assert_ne!(cp, sp);
        assert!(verify_client_proof(&t, &c, &s, &cp));
        assert!(!verify_client_proof(&t, &c, &s, &sp));
        assert!(verify_server_proof(&t, &c, &s, &sp));
        assert!(!verify_server_proof(&t, &s, &c, &sp));
        let other = Token::new(*b"secreT").unwrap();
        assert!(!verify_client_proof(&other, &c, &s, &cp));
    }

    #[test]
    fn join_key_depends_on_token() {
        let secret = [9u8; 32];
        assert_eq!(join_key(None, &secret), secret);
        let k1 = session_key(&Token::new(*b"a").unwrap(), &[0; 32], &[0; 32]);
        let k2 = session_key(&Token::new(*b"b").unwrap(), &[0; 32], &[0; 32]);
        assert_ne!(join_key(Some(&k1), &secret), join_key(Some(&k2), &secret));
        let jk = join_key(Some(&k1), &secret);
        let m = join_mac(&jk, 7, 3);
        assert!(verify_join_mac(&jk, 7, 3, &m));
        assert!(!verify_join_mac(&jk, 7, 4, &m));
        assert!(!verify_join_mac(&jk, 8, 3, &m));
    }

    #[test]
    fn token_limits_and_redaction() {
        assert_eq!(Token::new(Vec::new()), Err(TokenError::Empty));
        assert!(Token::new(vec![0; MAX_TOKEN_BYTES + 1]).is_err());
        assert!(!format!("{:?}", Token::new(*b"hunter2").unwrap()).contains("hunter2"));
    }
}
