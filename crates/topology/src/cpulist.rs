//! CPU lists in the kernel's notation: `"0-3,8"` for CPUs 0, 1, 2, 3 and 8.
//!
//! This is the format of `/sys/devices/system/node/node0/cpulist`, `taskset -c` and
//! `numactl -C`; sluice uses it for `--reserve-cores LIST` and in human output.
//!
//! ```
//! use sluice_topology::cpulist;
//! assert_eq!(cpulist::format(&[8, 0, 1, 2, 3]), "0-3,8");
//! assert_eq!(cpulist::parse("0-3,8").unwrap(), vec![0, 1, 2, 3, 8]);
//! ```

use thiserror::Error;

/// CPU indexes must be below this (Linux's largest `NR_CPUS` is 8192); it keeps a typo
/// such as `0-4000000000` from allocating gigabytes.
pub const CPU_INDEX_LIMIT: u32 = 1 << 16;

/// Why a CPU list could not be parsed. The message names the offending item only, so
/// that callers can put it after the whole list.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum CpuListError {
    /// An item between commas is empty (`"0,,3"` or a trailing comma).
    #[error("empty item (expected a CPU number or a range such as 0-3)")]
    EmptyItem,
    /// An item is not a decimal CPU number.
    #[error("\"{item}\" is not a CPU number (expected e.g. 8 or 0-3)")]
    NotANumber {
        /// The offending text.
        item: String,
    },
    /// A range ends before it starts (`"5-2"`).
    #[error("range \"{item}\" ends before it starts")]
    ReversedRange {
        /// The offending range.
        item: String,
    },
    /// A CPU index is at or above [`CPU_INDEX_LIMIT`].
    #[error("CPU {cpu} is too large (CPU indexes must be below {CPU_INDEX_LIMIT})")]
    TooLarge {
        /// The offending index.
        cpu: u64,
    },
}

/// Formats CPU indexes as a kernel CPU list: sorted, duplicates removed, consecutive
/// runs as `a-b`, as the kernel writes them (`[0,1,2,3,8]` gives `"0-3,8"`, `[4,5]`
/// gives `"4-5"`).
/// An empty slice gives an empty string, as the kernel writes an empty set.
pub fn format(cpus: &[u32]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut out = String::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            i += 1;
            end = sorted[i];
        }
        if !out.is_empty() {
            out.push(',');
        }
        if end == start {
            out.push_str(&start.to_string());
        } else {
            out.push_str(&format!("{start}-{end}"));
        }
        i += 1;
    }
    out
}

/// Parses a kernel CPU list (`"0-3,8"`, spaces around items allowed) into sorted,
/// deduplicated CPU indexes. An empty or all-blank string is the empty set.
///
/// # Errors
///
/// [`CpuListError`] for an empty item, a non-number, a reversed range or an index at or
/// above [`CPU_INDEX_LIMIT`].
pub fn parse(list: &str) -> Result<Vec<u32>, CpuListError> {
    let mut cpus = Vec::new();
    if list.trim().is_empty() {
        return Ok(cpus);
    }
    for raw in list.split(',') {
        let item = raw.trim();
        if item.is_empty() {
            return Err(CpuListError::EmptyItem);
        }
        let (first, last) = match item.split_once('-') {
            Some((a, b)) => (parse_cpu(a.trim(), item)?, parse_cpu(b.trim(), item)?),
            None => {
                let cpu = parse_cpu(item, item)?;
                (cpu, cpu)
            }
        };
        if last < first {
            return Err(CpuListError::ReversedRange {
                item: item.to_string(),
            });
        }
        cpus.extend(first..=last);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// One CPU number of `item`, checked against [`CPU_INDEX_LIMIT`].
fn parse_cpu(text: &str, item: &str) -> Result<u32, CpuListError> {
    let not_a_number = || CpuListError::NotANumber {
        item: item.to_string(),
    };
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(not_a_number());
    }
    // All digits: the only failure left is overflow, which is "too large" too.
    let cpu: u64 = text.parse().unwrap_or(u64::MAX);
    if cpu >= u64::from(CPU_INDEX_LIMIT) {
        return Err(CpuListError::TooLarge { cpu });
    }
    u32::try_from(cpu).map_err(|_| CpuListError::TooLarge { cpu })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn formats_runs_and_singles() {
        assert_eq!(format(&[0, 1, 2, 3, 8]), "0-3,8");
        assert_eq!(format(&[8, 3, 2, 1, 0, 3]), "0-3,8");
        assert_eq!(format(&[4, 5]), "4-5");
        assert_eq!(format(&[7]), "7");
        assert_eq!(format(&[]), "");
        assert_eq!(format(&[0, 2, 4, 64, 65, 66]), "0,2,4,64-66");
    }

    #[test]
    fn parses_kernel_lists() {
        assert_eq!(parse("0-3,8").unwrap(), vec![0, 1, 2, 3, 8]);
        assert_eq!(parse(" 0 - 1 , 4 ").unwrap(), vec![0, 1, 4]);
        assert_eq!(parse("3,1,1-2").unwrap(), vec![1, 2, 3]);
        assert_eq!(parse("").unwrap(), Vec::<u32>::new());
        assert_eq!(parse("\n").unwrap(), Vec::<u32>::new());
    }

    #[test]
    fn rejects_malformed_lists_with_a_message_naming_the_item() {
        assert_eq!(parse("0,,3"), Err(CpuListError::EmptyItem));
        assert_eq!(parse("0,"), Err(CpuListError::EmptyItem));
        let err = parse("0-x").unwrap_err();
        assert_eq!(
            err.to_string(),
            "\"0-x\" is not a CPU number (expected e.g. 8 or 0-3)"
        );
        assert!(matches!(parse("-3"), Err(CpuListError::NotANumber { .. })));
        assert!(matches!(
            parse("1-2-3"),
            Err(CpuListError::NotANumber { .. })
        ));
        assert!(matches!(parse("+1"), Err(CpuListError::NotANumber { .. })));
        assert_eq!(
            parse("5-2"),
            Err(CpuListError::ReversedRange { item: "5-2".into() })
        );
        assert_eq!(
            parse("0-4000000000"),
            Err(CpuListError::TooLarge { cpu: 4_000_000_000 })
        );
        assert_eq!(
            parse("99999999999999999999999"),
            Err(CpuListError::TooLarge { cpu: u64::MAX })
        );
        assert!(parse("65535").is_ok());
        assert!(parse("65536").is_err());
    }

    proptest! {
        #[test]
        fn format_then_parse_round_trips(cpus in proptest::collection::vec(0u32..512, 0..200)) {
            let mut expected = cpus.clone();
            expected.sort_unstable();
            expected.dedup();
            prop_assert_eq!(parse(&format(&cpus)).unwrap(), expected);
        }

        #[test]
        fn parse_then_format_is_canonical(cpus in proptest::collection::btree_set(0u32..300, 0..100)) {
            let canonical = format(&cpus.iter().copied().collect::<Vec<_>>());
            let again = format(&parse(&canonical).unwrap());
            prop_assert_eq!(again, canonical);
        }
    }
}
