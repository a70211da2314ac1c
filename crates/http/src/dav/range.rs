//! One `Range: bytes=...` of a `GET`. Several ranges, or a unit other than bytes, are
//! answered with the whole file, as RFC 9110 allows.

/// What part of a file to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wanted {
    /// All of it (200).
    Whole,
    /// `len` bytes from `start` (206); `len >= 1`.
    Part {
        /// First byte.
        start: u64,
        /// How many.
        len: u64,
    },
    /// Nothing of a file of this size satisfies it (416).
    Unsatisfiable,
}

/// The part of a file of `size` bytes that `header` asks for.
pub fn parse(header: &str, size: u64) -> Wanted {
    let Some(spec) = header.trim().strip_prefix("bytes=") else {
        return Wanted::Whole;
    };
    if spec.contains(',') {
        return Wanted::Whole;
    }
    let Some((a, b)) = spec.trim().split_once('-') else {
        return Wanted::Whole;
    };
    let (a, b) = (a.trim(), b.trim());
    let parsed = match (a.is_empty(), b.is_empty()) {
        (true, false) => b
            .parse::<u64>()
            .ok()
            .map(|n| (size.saturating_sub(n), size.min(n))),
        (false, _) => a.parse::<u64>().ok().and_then(|s| {
            let last = if b.is_empty() {
                Some(u64::MAX)
            } else {
                b.parse::<u64>().ok()
            }?;
            (last >= s).then(|| {
                (
                    s,
                    last.min(size.saturating_sub(1))
                        .saturating_sub(s)
                        .saturating_add(1),
                )
            })
        }),
        (true, true) => None,
    };
    match parsed {
        None => Wanted::Whole,
        Some((start, len)) if start >= size || len == 0 => Wanted::Unsatisfiable,
        Some((start, len)) => Wanted::Part { start, len },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(parse("bytes=0-9", 100), Wanted::Part { start: 0, len: 10 });
        assert_eq!(parse("bytes=90-", 100), Wanted::Part { start: 90, len: 10 });
        assert_eq!(parse("bytes=-5", 100), Wanted::Part { start: 95, len: 5 });
        assert_eq!(
            parse("bytes=95-200", 100),
            Wanted::Part { start: 95, len: 5 }
        );
        assert_eq!(parse("bytes=100-", 100), Wanted::Unsatisfiable);
        assert_eq!(parse("bytes=-0", 100), Wanted::Unsatisfiable);
        assert_eq!(parse("bytes=5-3", 100), Wanted::Whole);
        assert_eq!(parse("bytes=0-1,5-6", 100), Wanted::Whole);
        assert_eq!(parse("items=0-1", 100), Wanted::Whole);
    }
}
