//! CPU lists in the kernel's notation (`0-3,8`), as `taskset -c`, `numactl` and
//! `/sys/devices/system/cpu/online` write them.
//!
//! The topology crate has its own parser and formatter behind its `discover` feature;
//! the planner keeps this small formatter so that it depends only on the plain model.

/// Formats CPU (or node) indexes as a kernel-style list: sorted, duplicates removed,
/// runs of consecutive indexes as `a-b`, joined by commas. An empty input gives `""`.
///
/// ```
/// use sluice_placement::format_cpulist;
/// assert_eq!(format_cpulist(&[8, 0, 1, 2, 3, 10, 11]), "0-3,8,10-11");
/// assert_eq!(format_cpulist(&[]), "");
/// ```
pub fn format_cpulist(cpus: &[u32]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            i += 1;
            end = sorted[i];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_runs_singletons_and_duplicates() {
        assert_eq!(format_cpulist(&[0]), "0");
        assert_eq!(format_cpulist(&[0, 1]), "0-1");
        assert_eq!(format_cpulist(&[3, 1, 2, 2, 7, 9]), "1-3,7,9");
        assert_eq!(
            format_cpulist(&[u32::MAX, u32::MAX - 1]),
            "4294967294-4294967295"
        );
    }
}
