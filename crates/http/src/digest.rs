//! RFC 3230 instance digests: `Want-Digest` parsed, `Digest` answered, with `adler32`
//! (what FTS3 compares, 8 hex digits) and `md5` (base64, as RFC 3230 says).
//!
//! Digests are computed while data moves (a PUT or a pulled copy) and kept with the file
//! in the extended attribute [`XATTR`], with the size and modification time they are
//! valid for; a file that arrived otherwise (over sluice's own protocol, or changed
//! since) is read once when a digest is asked for, and its attribute written then.

use std::fmt::Write as _;
use std::io::Read;
use std::os::fd::AsFd;

/// The extended attribute holding a file's digests.
pub const XATTR: &str = "user.sluice.digest";

/// The algorithms this server computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algo {
    /// Adler-32, answered as 8 lowercase hex digits.
    Adler32,
    /// MD5, answered in base64.
    Md5,
}

/// The digests of a file's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Digests {
    /// Adler-32.
    pub adler32: u32,
    /// MD5.
    pub md5: [u8; 16],
}

/// Digests being computed over bytes as they pass.
#[derive(Clone)]
pub struct Running {
    adler: adler2::Adler32,
    md5: md5::Md5,
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Running")
    }
}

impl Default for Running {
    fn default() -> Running {
        Running::new()
    }
}

impl Running {
    /// Nothing seen yet.
    pub fn new() -> Running {
        use md5::Digest as _;
        Running {
            adler: adler2::Adler32::new(),
            md5: md5::Md5::new(),
        }
    }

    /// Takes in `bytes`.
    pub fn update(&mut self, bytes: &[u8]) {
        use md5::Digest as _;
        self.adler.write_slice(bytes);
        self.md5.update(bytes);
    }

    /// The digests of everything seen.
    pub fn finish(self) -> Digests {
        use md5::Digest as _;
        Digests {
            adler32: self.adler.checksum(),
            md5: self.md5.finalize().into(),
        }
    }
}

impl Digests {
    /// The `Digest` header's value for `algos` (in the order asked).
    pub fn header(&self, algos: &[Algo]) -> String {
        use base64::Engine as _;
        let mut out = String::new();
        for a in algos {
            if !out.is_empty() {
                out.push(',');
            }
            match a {
                Algo::Adler32 => {
                    let _ = write!(out, "adler32={:08x}", self.adler32);
                }
                Algo::Md5 => {
                    let b64 = base64::engine::general_purpose::STANDARD.encode(self.md5);
                    let _ = write!(out, "md5={b64}");
                }
            }
        }
        out
    }
}

/// The algorithms a `Want-Digest` value asks for that this server has, best first
/// (by `q`, then adler32 before md5); `q=0` excludes one.
pub fn wanted(value: &str) -> Vec<Algo> {
    let mut found: Vec<(u16, Algo)> = Vec::new();
    for item in value.split(',') {
        let mut parts = item.split(';');
        let name = parts.next().unwrap_or("").trim();
        let algo = if name.eq_ignore_ascii_case("adler32") {
            Algo::Adler32
        } else if name.eq_ignore_ascii_case("md5") {
            Algo::Md5
        } else {
            continue;
        };
        let q = parts
            .filter_map(|p| p.trim().strip_prefix("q="))
            .find_map(qvalue)
            .unwrap_or(1000);
        if q > 0 && !found.iter().any(|(_, a)| *a == algo) {
            found.push((q, algo));
        }
    }
    found.sort_by_key(|(q, a)| (std::cmp::Reverse(*q), *a == Algo::Md5));
    found.into_iter().map(|(_, a)| a).collect()
}

/// A `q` value (RFC 9110: `0`, `1`, `0.5`, `0.125`, at most 3 decimals) in
/// thousandths.
fn qvalue(s: &str) -> Option<u16> {
    let (whole, frac) = s.trim().split_once('.').unwrap_or((s.trim(), ""));
    let whole: u16 = match whole {
        "0" => 0,
        "1" => 1,
        _ => return None,
    };
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut thousandths = 0u16;
    for (i, b) in frac.bytes().enumerate() {
        thousandths += u16::from(b - b'0') * [100, 10, 1][i];
    }
    let q = whole * 1000 + thousandths;
    (q <= 1000).then_some(q)
}

/// Checks a request's `Digest` header (RFC 3230: what the sender says it sent) against
/// the digests of what arrived; algorithms this server does not compute are ignored.
///
/// # Errors
/// One line naming the algorithm and both values.
pub fn check(claimed: &str, got: &Digests) -> Result<(), String> {
    for item in claimed.split(',') {
        let Some((name, value)) = item.trim().split_once('=') else {
            continue;
        };
        let algo = match name.trim().to_ascii_lowercase().as_str() {
            "adler32" => Algo::Adler32,
            "md5" => Algo::Md5,
            _ => continue,
        };
        let ours = got.header(&[algo]);
        let (_, ours) = ours.split_once('=').unwrap_or(("", ""));
        let same = match algo {
            Algo::Adler32 => u32::from_str_radix(value.trim(), 16).ok() == Some(got.adler32),
            Algo::Md5 => value.trim() == ours,
        };
        if !same {
            return Err(format!(
                "Digest: {} {} was sent, {ours} arrived",
                name.trim(),
                value.trim()
            ));
        }
    }
    Ok(())
}

/// What the attribute records: the digests and the size and mtime they belong to.
fn encode(d: &Digests, size: u64, mtime_ns: i128) -> String {
    let mut md5 = String::with_capacity(32);
    for b in d.md5 {
        let _ = write!(md5, "{b:02x}");
    }
    format!("v1 {size} {mtime_ns} {:08x} {md5}", d.adler32)
}

fn decode(text: &str, size: u64, mtime_ns: i128) -> Option<Digests> {
    let mut f = text.split(' ');
    if f.next()? != "v1" || f.next()?.parse::<u64>().ok()? != size {
        return None;
    }
    if f.next()?.parse::<i128>().ok()? != mtime_ns {
        return None;
    }
    let adler32 = u32::from_str_radix(f.next()?, 16).ok()?;
    let hex = f.next()?;
    if hex.len() != 32 {
        return None;
    }
    let mut md5 = [0u8; 16];
    for (i, b) in md5.iter_mut().enumerate() {
        *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(Digests { adler32, md5 })
}

fn stamp(file: &std::fs::File) -> std::io::Result<(u64, i128)> {
    let st = rustix::fs::fstat(file.as_fd())?;
    let mtime = i128::from(st.st_mtime) * 1_000_000_000 + i128::from(st.st_mtime_nsec);
    Ok((u64::try_from(st.st_size).unwrap_or(0), mtime))
}

/// Keeps `d` with `file` (as of its size and mtime now). A file system without user
/// extended attributes keeps nothing: the digests are computed again when asked for.
pub fn keep(file: &std::fs::File, d: &Digests) {
    let Ok((size, mtime)) = stamp(file) else {
        return;
    };
    let value = encode(d, size, mtime);
    let set = rustix::fs::fsetxattr(
        file.as_fd(),
        XATTR,
        value.as_bytes(),
        rustix::fs::XattrFlags::empty(),
    );
    if let Err(e) = set {
        tracing::debug!("cannot keep the digests in {XATTR}: {e}");
    }
}

/// The digests of `file`: the kept ones when still valid, else computed by reading it
/// whole (blocking) and kept.
///
/// # Errors
/// The file cannot be read.
pub fn of_file(file: &std::fs::File) -> std::io::Result<Digests> {
    let (size, mtime) = stamp(file)?;
    let mut buf = [0u8; 256];
    if let Ok(n) = rustix::fs::fgetxattr(file.as_fd(), XATTR, &mut buf) {
        let kept = std::str::from_utf8(&buf[..n])
            .ok()
            .and_then(|t| decode(t, size, mtime));
        if let Some(d) = kept {
            return Ok(d);
        }
    }
    let mut running = Running::new();
    let mut chunk = vec![0u8; 1 << 20];
    let mut reader = file;
    loop {
        let n = reader.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        running.update(&chunk[..n]);
    }
    let d = running.finish();
    keep(file, &d);
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        let mut r = Running::new();
        r.update(b"Wikipedia");
        let d = r.finish();
        assert_eq!(d.adler32, 0x11E6_0398);
        assert_eq!(d.header(&[Algo::Adler32]), "adler32=11e60398");
        let mut e = Running::new();
        e.update(b"");
        assert_eq!(
            e.finish().header(&[Algo::Md5]),
            "md5=1B2M2Y8AsgTpgAmY7PhCfg=="
        );
    }

    #[test]
    fn want_digest_parsing() {
        assert_eq!(wanted("ADLER32"), vec![Algo::Adler32]);
        assert_eq!(
            wanted("md5;q=0.3, adler32;q=0.5"),
            vec![Algo::Adler32, Algo::Md5]
        );
        assert_eq!(wanted("sha-256, md5;q=0"), vec![]);
        assert_eq!(wanted("md5, adler32"), vec![Algo::Adler32, Algo::Md5]);
        assert_eq!(qvalue("0.125"), Some(125));
        assert_eq!(qvalue("1"), Some(1000));
        assert_eq!(qvalue("1.5"), None);
        assert_eq!(qvalue("x"), None);
    }

    #[test]
    fn claimed_digests_are_checked() {
        let mut r = Running::new();
        r.update(b"Wikipedia");
        let d = r.finish();
        assert_eq!(check("adler32=11e60398", &d), Ok(()));
        assert_eq!(check("ADLER32=11E60398, sha-256=xyz", &d), Ok(()));
        assert!(check("adler32=00000001", &d).is_err());
        assert!(check("md5=AAAAAAAAAAAAAAAAAAAAAA==", &d).is_err());
    }

    #[test]
    fn attribute_round_trip_and_staleness() {
        let d = Digests {
            adler32: 7,
            md5: [9; 16],
        };
        let t = encode(&d, 10, 55);
        assert_eq!(decode(&t, 10, 55), Some(d));
        assert_eq!(decode(&t, 11, 55), None);
        assert_eq!(decode(&t, 10, 56), None);
    }

    #[test]
    fn kept_with_the_file() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let p = dir.path().join("f");
        std::fs::write(&p, b"Wikipedia").unwrap_or_else(|e| panic!("{e}"));
        let f = std::fs::File::open(&p).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(of_file(&f).map(|d| d.adler32).ok(), Some(0x11E6_0398));
        let mut buf = [0u8; 256];
        match rustix::fs::getxattr(&p, XATTR, &mut buf) {
            Ok(n) => assert!(std::str::from_utf8(&buf[..n]).is_ok_and(|t| t.contains("11e60398"))),
            Err(e) => eprintln!("SKIP: no user xattrs on this file system ({e})"),
        }
    }
}
