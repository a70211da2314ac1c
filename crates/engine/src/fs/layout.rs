//! Layout-aware I/O scheduling (LADS, seed 000): know which storage target holds each
//! byte, and hand I/O threads work from the target with the fewest requests in flight,
//! so that threads spread over object storage targets (OSTs) or disks instead of piling
//! onto one.
//!
//! * A [`Layout`] maps an offset of *one file* to a [`TargetId`]; get one per file (a
//!   [`LustreLayout`] from `lfs getstripe`) or one per root shared by all its files (a
//!   [`BlockDeviceLayout`]). [`SimulatedStripes`] is for tests and benchmarks.
//! * [`LayoutScheduler`] holds a bounded set of pending [`WorkItem`]s per target and
//!   picks the next one for an idle I/O thread.
//!
//! Not done: the `LL_IOC_LOV_GETSTRIPE` ioctl (it needs Lustre's headers and a Lustre
//! client to test against); [`LustreLayout::query`] runs `lfs getstripe -y` instead.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::{Path, PathBuf};

/// A storage target: a Lustre OST index, or a number given to a block device by a
/// [`TargetTable`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TargetId(pub u32);

impl TargetId {
    /// Where the layout does not say (an uninstantiated Lustre component).
    pub const UNKNOWN: TargetId = TargetId(u32::MAX);
    /// A Lustre Data-on-MDT component: the bytes live on the metadata target.
    pub const METADATA: TargetId = TargetId(u32::MAX - 1);
}

/// Which storage target holds each byte of one file.
pub trait Layout: Send + Sync + std::fmt::Debug {
    /// The target holding byte `offset`.
    fn target(&self, offset: u64) -> TargetId;
}

/// Round-robin stripes over `targets`, `stripe_bytes` each (RAID-0, like a plain
/// Lustre layout): byte `o` is on `targets[(o / stripe_bytes) % targets.len()]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimulatedStripes {
    /// Bytes of one stripe (0 is treated as 1).
    pub stripe_bytes: u64,
    /// The targets in stripe order (empty: every byte is [`TargetId::UNKNOWN`]).
    pub targets: Vec<TargetId>,
}

impl Layout for SimulatedStripes {
    fn target(&self, offset: u64) -> TargetId {
        stripe_target(&self.targets, self.stripe_bytes, offset)
    }
}

fn stripe_target(targets: &[TargetId], stripe_bytes: u64, offset: u64) -> TargetId {
    if targets.is_empty() {
        return TargetId::UNKNOWN;
    }
    let stripe = offset / stripe_bytes.max(1);
    // The remainder is below targets.len(), a usize.
    targets[usize::try_from(stripe % targets.len() as u64).unwrap_or(0)]
}

/// Names block devices with dense [`TargetId`]s (`sda` → 0, `nvme0n1` → 1, ...).
#[derive(Debug, Clone, Default)]
pub struct TargetTable {
    names: Vec<String>,
}

impl TargetTable {
    /// An empty table.
    pub fn new() -> TargetTable {
        TargetTable::default()
    }

    /// The id of `name`, given a new one if unseen.
    pub fn intern(&mut self, name: &str) -> TargetId {
        if let Some(i) = self.names.iter().position(|n| n == name) {
            return TargetId(u32::try_from(i).unwrap_or(u32::MAX - 2));
        }
        self.names.push(name.to_owned());
        TargetId(u32::try_from(self.names.len() - 1).unwrap_or(u32::MAX - 2))
    }

    /// The name of `id`, if it was interned here.
    pub fn name(&self, id: TargetId) -> Option<&str> {
        self.names.get(id.0 as usize).map(String::as_str)
    }
}

/// Every byte on one target: the block device holding the file (or, on tmpfs, NFS and
/// the like, a single pseudo-target named `"(no block device)"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockDeviceLayout {
    /// The whole disk (`sda`, `nvme0n1`), if the path is on one.
    pub device: Option<String>,
    /// Its target id.
    pub target: TargetId,
}

impl BlockDeviceLayout {
    /// Finds the disk holding `path` (`sluice_topology::storage_for_path`) and names it
    /// in `table`. One call per root is enough: its files share the device (mount points
    /// inside the root are not told apart).
    ///
    /// # Errors
    /// The topology error if `path` cannot be `stat`ed.
    pub fn discover(
        path: &Path,
        table: &mut TargetTable,
    ) -> Result<BlockDeviceLayout, sluice_topology::TopologyError> {
        let device = sluice_topology::storage_for_path(path)?;
        let target = table.intern(device.as_deref().unwrap_or("(no block device)"));
        Ok(BlockDeviceLayout { device, target })
    }
}

impl Layout for BlockDeviceLayout {
    fn target(&self, _offset: u64) -> TargetId {
        self.target
    }
}

/// One component of a Lustre layout: bytes `start..end` striped over `osts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LustreComponent {
    /// First byte.
    pub start: u64,
    /// One past the last byte (`u64::MAX`: to the end of the file).
    pub end: u64,
    /// `lmm_stripe_size`.
    pub stripe_bytes: u64,
    /// OST indexes in stripe order (`l_ost_idx` / `obdidx`); empty if not instantiated.
    pub osts: Vec<u32>,
    /// A Data-on-MDT component (`lmm_pattern: mdt`).
    pub on_mdt: bool,
}

/// A Lustre file's layout, plain or composite (PFL, mirrors: the first component that
/// covers an offset wins), parsed from `lfs getstripe` output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LustreLayout {
    /// Components in the order printed.
    pub components: Vec<LustreComponent>,
}

/// `lfs getstripe` output could not be understood, or `lfs` could not be run.
#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    /// No layout in the text.
    #[error("no stripe layout found in lfs getstripe output")]
    NoLayout,
    /// A value that should be a number is not.
    #[error("lfs getstripe output: cannot parse {key} value {value:?}")]
    BadValue {
        /// The key.
        key: String,
        /// The value as printed.
        value: String,
    },
    /// `lfs` failed or is missing.
    #[error("cannot run `lfs getstripe -y {}`: {cause}", path.display())]
    Lfs {
        /// The file.
        path: PathBuf,
        /// Why.
        cause: String,
    },
}

/// `statfs` magic of a Lustre client mount (`LL_SUPER_MAGIC`).
pub const LUSTRE_SUPER_MAGIC: u64 = 0x0BD0_0BD0;

/// Whether `path` is on a Lustre file system.
///
/// # Errors
/// The OS error of `statfs`.
pub fn is_lustre(path: &Path) -> std::io::Result<bool> {
    let st = rustix::fs::statfs(path)?;
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    let magic = st.f_type as u64;
    Ok(magic == LUSTRE_SUPER_MAGIC)
}

#[derive(Debug, Default)]
struct Partial {
    start: u64,
    end: Option<u64>,
    stripe_bytes: Option<u64>,
    stripe_count: Option<i64>,
    stripe_offset: Option<i64>,
    osts: Vec<u32>,
    on_mdt: bool,
}

impl Partial {
    fn finish(self) -> LustreComponent {
        let mut osts = self.osts;
        if osts.is_empty() && self.stripe_count == Some(1) {
            if let Some(o) = self.stripe_offset.and_then(|o| u32::try_from(o).ok()) {
                osts.push(o);
            }
        }
        LustreComponent {
            start: self.start,
            end: self.end.unwrap_or(u64::MAX),
            stripe_bytes: self.stripe_bytes.unwrap_or(1 << 20),
            osts,
            on_mdt: self.on_mdt,
        }
    }
}

fn leading_number(s: &str) -> Option<u64> {
    let s = s.trim_start();
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    s[..end].parse().ok()
}

impl LustreLayout {
    /// Parses the output of `lfs getstripe FILE` or `lfs getstripe -y FILE`: plain
    /// layouts (with the `obdidx` table or `lmm_objects` list) and composite ones
    /// (`lcme_id`, `lcme_extent.e_start/e_end` per component).
    ///
    /// # Errors
    /// [`LayoutError::NoLayout`] if no `lmm_*` keys are found; [`LayoutError::BadValue`]
    /// for a malformed number.
    pub fn parse_getstripe(text: &str) -> Result<LustreLayout, LayoutError> {
        let mut done: Vec<LustreComponent> = Vec::new();
        let mut cur: Option<Partial> = None;
        let mut in_obdidx = false;
        let bad = |key: &str, value: &str| LayoutError::BadValue {
            key: key.to_owned(),
            value: value.to_owned(),
        };
        for line in text.lines() {
            let t = line.trim();
            let t = t.strip_prefix("- ").unwrap_or(t).trim();
            if t.starts_with("obdidx") {
                in_obdidx = true;
                continue;
            }
            if in_obdidx {
                let mut tokens = t.split_whitespace();
                match (
                    tokens.next().and_then(|x| x.parse::<u32>().ok()),
                    tokens.next(),
                ) {
                    (Some(idx), Some(_)) => {
                        cur.get_or_insert_with(Partial::default).osts.push(idx);
                        continue;
                    }
                    _ => in_obdidx = false,
                }
            }
            if let Some(at) = t.find("l_ost_idx:") {
                let v = &t[at + "l_ost_idx:".len()..];
                let idx = leading_number(v).ok_or_else(|| bad("l_ost_idx", v))?;
                let idx = u32::try_from(idx).map_err(|_| bad("l_ost_idx", v))?;
                cur.get_or_insert_with(Partial::default).osts.push(idx);
                continue;
            }
            let Some((key, value)) = t.split_once(':') else {
                continue;
            };
            let (key, value) = (key.trim(), value.trim());
            let int = |v: &str| v.parse::<i64>().map_err(|_| bad(key, v));
            match key {
                "lcme_id" => {
                    if let Some(p) = cur.take() {
                        done.push(p.finish());
                    }
                    cur = Some(Partial::default());
                }
                "lcme_extent.e_start" => {
                    cur.get_or_insert_with(Partial::default).start =
                        value.parse().map_err(|_| bad(key, value))?;
                }
                "lcme_extent.e_end" => {
                    let end = if value == "EOF" {
                        u64::MAX
                    } else {
                        value.parse().map_err(|_| bad(key, value))?
                    };
                    cur.get_or_insert_with(Partial::default).end = Some(end);
                }
                "lmm_stripe_count" => {
                    cur.get_or_insert_with(Partial::default).stripe_count = Some(int(value)?);
                }
                "lmm_stripe_size" => {
                    let v = u64::try_from(int(value)?).map_err(|_| bad(key, value))?;
                    cur.get_or_insert_with(Partial::default).stripe_bytes = Some(v);
                }
                "lmm_stripe_offset" => {
                    cur.get_or_insert_with(Partial::default).stripe_offset = Some(int(value)?);
                }
                "lmm_pattern" => {
                    cur.get_or_insert_with(Partial::default).on_mdt =
                        value.split(',').any(|p| p.trim() == "mdt");
                }
                _ => {}
            }
        }
        if let Some(p) = cur.take() {
            done.push(p.finish());
        }
        if done.is_empty() {
            return Err(LayoutError::NoLayout);
        }
        Ok(LustreLayout { components: done })
    }

    /// Runs `lfs getstripe -y path` and parses it; `Ok(None)` if `path` is not on Lustre.
    ///
    /// # Errors
    /// [`LayoutError::Lfs`] if `lfs` is missing or fails; parse errors.
    pub fn query(path: &Path) -> Result<Option<LustreLayout>, LayoutError> {
        let lfs_err = |cause: String| LayoutError::Lfs {
            path: path.to_path_buf(),
            cause,
        };
        if !is_lustre(path).map_err(|e| lfs_err(e.to_string()))? {
            return Ok(None);
        }
        let out = std::process::Command::new("lfs")
            .arg("getstripe")
            .arg("-y")
            .arg(path)
            .output()
            .map_err(|e| lfs_err(e.to_string()))?;
        if !out.status.success() {
            return Err(lfs_err(
                String::from_utf8_lossy(&out.stderr).trim().to_owned(),
            ));
        }
        LustreLayout::parse_getstripe(&String::from_utf8_lossy(&out.stdout)).map(Some)
    }
}

impl Layout for LustreLayout {
    fn target(&self, offset: u64) -> TargetId {
        let Some(c) = self
            .components
            .iter()
            .find(|c| c.start <= offset && offset < c.end)
        else {
            return TargetId::UNKNOWN;
        };
        if c.on_mdt {
            return TargetId::METADATA;
        }
        let osts: Vec<TargetId> = c.osts.iter().map(|&o| TargetId(o)).collect();
        stripe_target(&osts, c.stripe_bytes, offset - c.start)
    }
}

/// One piece of I/O: `len` bytes at `offset` of file `file_id`, on `target`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkItem {
    /// The file (manifest id).
    pub file_id: u64,
    /// Byte offset in the file.
    pub offset: u64,
    /// Bytes.
    pub len: u32,
    /// Where the bytes live.
    pub target: TargetId,
}

impl WorkItem {
    /// An item whose target comes from `layout`.
    pub fn new(file_id: u64, offset: u64, len: u32, layout: &dyn Layout) -> WorkItem {
        WorkItem {
            file_id,
            offset,
            len,
            target: layout.target(offset),
        }
    }
}

/// Why [`LayoutScheduler::push`] gave an item back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PushError {
    /// The scheduler holds `capacity` items: hand some out first.
    #[error("scheduler full")]
    Full(WorkItem),
    /// The same (file, offset) is already pending (a caller bug).
    #[error("work item already pending")]
    Duplicate(WorkItem),
}

#[derive(Debug, Default)]
struct TargetQueue {
    pending: BTreeMap<(u64, u64), WorkItem>,
    in_flight: u32,
}

/// Pending work per storage target, handed out least-loaded target first.
///
/// [`LayoutScheduler::next`] picks, among targets with pending work, the one with the
/// fewest items in flight; ties go round-robin (the first such target after the one
/// chosen last). Within a target, items go by (file id, offset), so each file is read
/// or written front to back on each target. [`LayoutScheduler::done`] reports an item
/// finished. With `T` threads and `k` targets holding pending work, the target chosen
/// ends with at most `ceil(T / k)` items in flight: `ceil(T / N)` while all `N` targets
/// have work (at 4 OSTs and 3 threads, never two threads on one OST).
///
/// Plain data, no locking: share it behind a `Mutex` (the critical sections are a few
/// map operations).
#[derive(Debug)]
pub struct LayoutScheduler {
    capacity: usize,
    queued: usize,
    targets: BTreeMap<TargetId, TargetQueue>,
    last: Option<TargetId>,
}

impl LayoutScheduler {
    /// A scheduler holding at most `capacity` pending items (at least 1).
    pub fn new(capacity: usize) -> LayoutScheduler {
        LayoutScheduler {
            capacity: capacity.max(1),
            queued: 0,
            targets: BTreeMap::new(),
            last: None,
        }
    }

    /// Adds an item.
    ///
    /// # Errors
    /// [`PushError::Full`] at capacity, [`PushError::Duplicate`] if the same (file,
    /// offset) is pending; the item comes back in both.
    pub fn push(&mut self, item: WorkItem) -> Result<(), PushError> {
        if self.queued >= self.capacity {
            return Err(PushError::Full(item));
        }
        let q = self.targets.entry(item.target).or_default();
        let key = (item.file_id, item.offset);
        if q.pending.contains_key(&key) {
            return Err(PushError::Duplicate(item));
        }
        q.pending.insert(key, item);
        self.queued += 1;
        Ok(())
    }

    /// The next item for an idle I/O thread, counted in flight on its target until
    /// [`LayoutScheduler::done`]; `None` if nothing is pending.
    // Not an `Iterator`: `None` means "nothing pending now", and more may be pushed.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<WorkItem> {
        let after = match self.last {
            Some(t) => (Bound::Excluded(t), Bound::Unbounded),
            None => (Bound::Unbounded, Bound::Unbounded),
        };
        let before = match self.last {
            Some(t) => (Bound::Unbounded, Bound::Included(t)),
            None => (Bound::Unbounded, Bound::Excluded(TargetId(0))),
        };
        let mut best: Option<(TargetId, u32)> = None;
        for (&t, q) in self.targets.range(after).chain(self.targets.range(before)) {
            if q.pending.is_empty() {
                continue;
            }
            if best.is_none_or(|(_, f)| q.in_flight < f) {
                best = Some((t, q.in_flight));
            }
        }
        let (t, _) = best?;
        let q = self.targets.get_mut(&t)?;
        let (_, item) = q.pending.pop_first()?;
        q.in_flight += 1;
        self.queued -= 1;
        self.last = Some(t);
        Some(item)
    }

    /// An item of `target` handed out by [`LayoutScheduler::next`] is finished.
    pub fn done(&mut self, target: TargetId) {
        if let Some(q) = self.targets.get_mut(&target) {
            debug_assert!(q.in_flight > 0, "done() without next() on {target:?}");
            q.in_flight = q.in_flight.saturating_sub(1);
            if q.in_flight == 0 && q.pending.is_empty() {
                self.targets.remove(&target);
            }
        }
    }

    /// Items in flight on `target`.
    pub fn in_flight(&self, target: TargetId) -> u32 {
        self.targets.get(&target).map_or(0, |q| q.in_flight)
    }

    /// Items pending on `target`.
    pub fn pending_on(&self, target: TargetId) -> usize {
        self.targets.get(&target).map_or(0, |q| q.pending.len())
    }

    /// Items pending in all.
    pub fn pending(&self) -> usize {
        self.queued
    }

    /// Whether another item can be pushed.
    pub fn has_room(&self) -> bool {
        self.queued < self.capacity
    }
}

#[cfg(test)]
// Test data and counters are small; truncation cannot happen.
#[allow(clippy::cast_possible_truncation)]
mod tests {
    use super::*;
    use std::collections::{HashMap, HashSet};

    const MIB: u64 = 1 << 20;

    /// `lfs getstripe` (text) of a plain 4-stripe file, Lustre 2.x.
    const PLAIN_TEXT: &str = "\
/mnt/lustre/big.dat
lmm_stripe_count:  4
lmm_stripe_size:   1048576
lmm_pattern:       raid0
lmm_layout_gen:    0
lmm_stripe_offset: 2
\tobdidx\t\t objid\t\t objid\t\t group
\t     2\t        1234567\t     0x12d687\t             0
\t     3\t        1234501\t     0x12d645\t             0
\t     0\t        1234520\t     0x12d658\t             0
\t     1\t        1234533\t     0x12d665\t             0
";

    /// `lfs getstripe -y` of a plain 2-stripe file.
    const PLAIN_YAML: &str = "\
lmm_stripe_count:  2
lmm_stripe_size:   4194304
lmm_pattern:       raid0
lmm_layout_gen:    0
lmm_stripe_offset: 5
lmm_objects:
      - l_ost_idx: 5
        l_fid:     0x100050000:0x2a:0x0
      - l_ost_idx: 7
        l_fid:     0x100070000:0x2a:0x0
";

    /// `lfs getstripe` of a PFL file: 1 MiB on OST 0, then 4 stripes of 4 MiB to EOF.
    const PFL_TEXT: &str = "\
/mnt/testfs/pfl
  lcm_layout_gen:    3
  lcm_mirror_count:  1
  lcm_entry_count:   2
    lcme_id:             1
    lcme_mirror_id:      0
    lcme_flags:          init
    lcme_extent.e_start: 0
    lcme_extent.e_end:   1048576
      lmm_stripe_count:  1
      lmm_stripe_size:   1048576
      lmm_pattern:       raid0
      lmm_layout_gen:    0
      lmm_stripe_offset: 0
      lmm_objects:
      - 0: { l_ost_idx: 0, l_fid: [0x100000000:0x2:0x0] }

    lcme_id:             2
    lcme_mirror_id:      0
    lcme_flags:          init
    lcme_extent.e_start: 1048576
    lcme_extent.e_end:   EOF
      lmm_stripe_count:  4
      lmm_stripe_size:   4194304
      lmm_pattern:       raid0
      lmm_layout_gen:    0
      lmm_stripe_offset: 3
      lmm_objects:
      - 0: { l_ost_idx: 3, l_fid: [0x100030000:0x2:0x0] }
      - 1: { l_ost_idx: 4, l_fid: [0x100040000:0x2:0x0] }
      - 2: { l_ost_idx: 5, l_fid: [0x100050000:0x2:0x0] }
      - 3: { l_ost_idx: 6, l_fid: [0x100060000:0x2:0x0] }
";

    /// Data-on-MDT for the first MiB, then an uninstantiated component.
    const DOM_TEXT: &str = "\
test2_domfile
  lcm_layout_gen:    2
  lcm_mirror_count:  1
  lcm_entry_count:   2
    lcme_id:             1
    lcme_mirror_id:      0
    lcme_flags:          init
    lcme_extent.e_start: 0
    lcme_extent.e_end:   1048576
      lmm_stripe_count:  0
      lmm_stripe_size:   1048576
      lmm_pattern:       mdt
      lmm_layout_gen:    0
      lmm_stripe_offset: 0

    lcme_id:             2
    lcme_mirror_id:      0
    lcme_flags:          0
    lcme_extent.e_start: 1048576
    lcme_extent.e_end:   EOF
      lmm_stripe_count:  -1
      lmm_stripe_size:   4194304
      lmm_pattern:       raid0
      lmm_layout_gen:    0
      lmm_stripe_offset: -1
";

    #[test]
    fn parses_plain_text_obdidx_table() {
        let l = LustreLayout::parse_getstripe(PLAIN_TEXT).unwrap();
        assert_eq!(l.components.len(), 1);
        let c = &l.components[0];
        assert_eq!((c.start, c.end, c.stripe_bytes), (0, u64::MAX, MIB));
        assert_eq!(c.osts, [2, 3, 0, 1]);
        let t: Vec<u32> = (0..6).map(|i| l.target(i * MIB + 7).0).collect();
        assert_eq!(t, [2, 3, 0, 1, 2, 3]);
    }

    #[test]
    fn parses_yaml_objects() {
        let l = LustreLayout::parse_getstripe(PLAIN_YAML).unwrap();
        assert_eq!(l.components[0].osts, [5, 7]);
        assert_eq!(l.components[0].stripe_bytes, 4 * MIB);
        assert_eq!(l.target(0), TargetId(5));
        assert_eq!(l.target(4 * MIB), TargetId(7));
        assert_eq!(l.target(8 * MIB), TargetId(5));
    }

    #[test]
    fn parses_composite_layouts() {
        let l = LustreLayout::parse_getstripe(PFL_TEXT).unwrap();
        assert_eq!(l.components.len(), 2);
        assert_eq!(l.components[0].osts, [0]);
        assert_eq!(
            (l.components[1].start, l.components[1].end),
            (MIB, u64::MAX)
        );
        assert_eq!(l.target(MIB - 1), TargetId(0));
        assert_eq!(l.target(MIB), TargetId(3));
        assert_eq!(l.target(MIB + 4 * MIB), TargetId(4));
        assert_eq!(l.target(MIB + 16 * MIB), TargetId(3));

        let l = LustreLayout::parse_getstripe(DOM_TEXT).unwrap();
        assert_eq!(l.target(0), TargetId::METADATA);
        assert_eq!(l.target(2 * MIB), TargetId::UNKNOWN);
    }

    #[test]
    fn rejects_garbage() {
        assert!(matches!(
            LustreLayout::parse_getstripe("hello\nworld\n"),
            Err(LayoutError::NoLayout)
        ));
        assert!(matches!(
            LustreLayout::parse_getstripe("lmm_stripe_size: lots\n"),
            Err(LayoutError::BadValue { .. })
        ));
    }

    #[test]
    fn block_device_layout_is_one_target() {
        let mut table = TargetTable::new();
        let l = BlockDeviceLayout::discover(Path::new("/"), &mut table).unwrap();
        assert_eq!(l.target(0), l.target(u64::MAX / 2));
        assert_eq!(
            table.intern(table.name(l.target).unwrap().to_owned().as_str()),
            l.target
        );
        assert!(!is_lustre(Path::new("/")).unwrap());
        assert!(LustreLayout::query(Path::new("/")).unwrap().is_none());
    }

    /// Drives a scheduler with `threads` simulated I/O threads that finish items in a
    /// pseudo-random order; checks the LADS invariants on every hand-out.
    fn simulate(targets: u32, threads: usize, items: u64, seed: u64) {
        let layout = SimulatedStripes {
            stripe_bytes: MIB,
            targets: (0..targets).map(TargetId).collect(),
        };
        let mut s = LayoutScheduler::new(items as usize);
        for i in 0..items {
            s.push(WorkItem::new(1, i * MIB, MIB as u32, &layout))
                .unwrap();
        }
        let bound = (threads as u32).div_ceil(targets);
        let mut running: Vec<WorkItem> = Vec::new();
        let mut seen = HashSet::new();
        let mut last_offset: HashMap<TargetId, u64> = HashMap::new();
        let mut rng = seed;
        loop {
            while running.len() < threads {
                let before: HashMap<TargetId, (u32, usize)> = (0..targets)
                    .map(|t| {
                        let t = TargetId(t);
                        (t, (s.in_flight(t), s.pending_on(t)))
                    })
                    .collect();
                let Some(item) = s.next() else { break };
                // Least loaded: no other target with work had fewer in flight.
                let mine = before[&item.target].0;
                for (t, (f, p)) in &before {
                    if *p > 0 && *t != item.target {
                        assert!(
                            mine <= *f,
                            "{item:?} chosen with {mine} in flight, {t:?} has {f}"
                        );
                    }
                }
                // With k targets holding work, the chosen one ends at most ceil(T / k)
                // in flight; while every target has work, that is ceil(T / N).
                let k = before.values().filter(|(_, p)| *p > 0).count() as u32;
                assert!(s.in_flight(item.target) <= (threads as u32).div_ceil(k));
                if k == targets {
                    assert!(
                        s.in_flight(item.target) <= bound,
                        "over ceil(threads/targets)"
                    );
                }
                assert!(seen.insert(item.offset), "handed out twice: {item:?}");
                if let Some(prev) = last_offset.insert(item.target, item.offset) {
                    assert!(
                        prev < item.offset,
                        "out of offset order on {:?}",
                        item.target
                    );
                }
                running.push(item);
            }
            if running.is_empty() {
                break;
            }
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let k = (rng >> 33) as usize % running.len();
            let finished = running.swap_remove(k);
            s.done(finished.target);
        }
        assert_eq!(seen.len() as u64, items);
        assert_eq!(s.pending(), 0);
        assert!((0..targets).all(|t| s.in_flight(TargetId(t)) == 0));
    }

    #[test]
    fn four_osts_three_threads() {
        for seed in 0..20 {
            simulate(4, 3, 64, seed);
        }
    }

    #[test]
    fn more_threads_than_targets() {
        for seed in 0..20 {
            simulate(2, 5, 40, seed);
            simulate(3, 8, 61, seed);
        }
    }

    #[test]
    fn ties_go_round_robin() {
        let layout = SimulatedStripes {
            stripe_bytes: MIB,
            targets: (0..4).map(TargetId).collect(),
        };
        let mut s = LayoutScheduler::new(100);
        for i in 0..16 {
            s.push(WorkItem::new(0, i * MIB, 1, &layout)).unwrap();
        }
        // One thread: each item done before the next; targets rotate.
        let order: Vec<u32> = (0..8)
            .map(|_| {
                let it = s.next().unwrap();
                s.done(it.target);
                it.target.0
            })
            .collect();
        assert_eq!(order, [0, 1, 2, 3, 0, 1, 2, 3]);
    }

    #[test]
    fn capacity_and_duplicates() {
        let mut s = LayoutScheduler::new(2);
        let it = |o| WorkItem {
            file_id: 0,
            offset: o,
            len: 1,
            target: TargetId(0),
        };
        s.push(it(0)).unwrap();
        assert_eq!(s.push(it(0)), Err(PushError::Duplicate(it(0))));
        s.push(it(1)).unwrap();
        assert!(!s.has_room());
        assert_eq!(s.push(it(2)), Err(PushError::Full(it(2))));
        assert_eq!(s.next(), Some(it(0)));
        assert!(s.has_room());
        assert_eq!(s.in_flight(TargetId(0)), 1);
        s.done(TargetId(0));
        assert_eq!(s.next(), Some(it(1)));
        s.done(TargetId(0));
        assert_eq!(s.next(), None);
    }
}
