//! A certificate's fingerprint: SHA-256 of its DER bytes, written `sha256:<hex>`.

use std::fmt;
use std::str::FromStr;

/// SHA-256 of a certificate's DER encoding (what `openssl x509 -fingerprint -sha256`
/// shows, in lower-case hex without colons).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint(pub [u8; 32]);

impl Fingerprint {
    /// The fingerprint of a DER certificate.
    pub fn of(der: &[u8]) -> Fingerprint {
        let d = ring::digest::digest(&ring::digest::SHA256, der);
        let mut out = [0u8; 32];
        out.copy_from_slice(d.as_ref());
        Fingerprint(out)
    }

    /// Compares in constant time.
    pub fn matches(&self, other: &Fingerprint) -> bool {
        use subtle::ConstantTimeEq as _;
        bool::from(self.0.ct_eq(&other.0))
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("sha256:")?;
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl FromStr for Fingerprint {
    type Err = String;

    /// Parses `sha256:<64 hex digits>` (colons between bytes allowed, any case).
    fn from_str(s: &str) -> Result<Fingerprint, String> {
        let hex: String = s
            .strip_prefix("sha256:")
            .ok_or_else(|| format!("{s:?} is not a fingerprint: expected sha256:<64 hex digits>"))?
            .chars()
            .filter(|c| *c != ':')
            .collect();
        let bad = || format!("{s:?} is not a fingerprint: expected sha256:<64 hex digits>");
        if hex.len() != 64 || !hex.is_ascii() {
            return Err(bad());
        }
        let mut out = [0u8; 32];
        for (i, b) in out.iter_mut().enumerate() {
            *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(Fingerprint(out))
    }
}
