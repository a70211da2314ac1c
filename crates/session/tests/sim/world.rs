//! What one seed is: the source tree (with its bytes), the session's options, the
//! destination found at the start, the shape of the network and the faults to inject.
//! All of it drawn from the seed alone.

use crate::fs::{DestFs, Head, Node};
use crate::rng::{bytes, Rng};
use sluice_wire::{chunk_checksum, chunk_count, chunk_range, FileDigest, FileEntry, FileKind};
use sluice_wire::{RelPath, MAX_FILE_CHUNKS};

/// Chunks of the largest file.
const MAX_CHUNKS: u64 = 8;

/// The session's options (the transfer flags the cores see).
#[derive(Debug, Clone, Copy)]
pub struct Opts {
    pub resume: bool,
    pub update: bool,
    pub no_clobber: bool,
    pub chunk_acks: bool,
    /// `SINK_CLOSES`: the sink ends the session itself, the source sends no `Close`.
    pub sink_closes: bool,
}

impl Opts {
    pub fn negotiates(&self) -> bool {
        self.resume || self.update || self.no_clobber
    }
}

/// A side of the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Source,
    Sink,
}

/// What goes wrong in a seed.
#[derive(Debug, Clone, Copy)]
pub struct Faults {
    /// Data transmissions whose payload is damaged in flight, per mille.
    pub corrupt_pm: u64,
    /// Data transmissions sent twice (the copy on any connection), per mille.
    pub dup_pm: u64,
    /// Sink writes that fail (`EIO`/`ENOSPC`), per mille.
    pub disk_fail_pm: u64,
    /// Source reads that fail (a file unreadable after its scan), per mille.
    pub read_fail_pm: u64,
    /// Disk operations that stall for long (a slow disk), per mille.
    pub stall_pm: u64,
    /// Manifests the sink's master applies only after `ENTRY_WAIT` (a master stuck on
    /// a slow file system), per mille: chunks that overtook them are late.
    pub master_stall_pm: u64,
    /// The side that stops, after this many events: its connections close.
    pub crash: Option<(Side, u64)>,
}

/// The network and the threads.
#[derive(Debug, Clone)]
pub struct Shape {
    /// Data connections.
    pub conns: usize,
    /// The source's io-read threads.
    pub readers: usize,
    /// The sink's buffer slots (chunks held between its socket and its disk).
    pub slots: usize,
    /// One-way latency of the control connection, µs (each frame adds jitter).
    pub ctl_latency: u64,
    /// One-way latency of each data connection, µs.
    pub conn_latency: Vec<u64>,
    /// Transmission time of each data connection, ns per byte.
    pub conn_ns_per_byte: Vec<u64>,
}

/// One entry of the source tree.
#[derive(Debug, Clone)]
pub struct SrcFile {
    pub entry: FileEntry,
    pub data: Vec<u8>,
    /// Checksum of each chunk.
    pub sums: Vec<u64>,
    /// Its storage targets: the first, how many, the stripe.
    pub targets: (u32, u32, u64),
}

impl SrcFile {
    pub fn path(&self) -> &str {
        self.entry.path.as_str()
    }

    /// The digest the sink reports for it (of zero chunks for anything without data).
    pub fn digest(&self) -> [u8; 16] {
        match self.entry.kind {
            FileKind::File => FileDigest::of_ordered(&self.sums),
            _ => [0; 16],
        }
    }

    pub fn has_data(&self) -> bool {
        self.entry.kind == FileKind::File && self.entry.size > 0
    }
}

/// Everything a seed describes.
#[derive(Debug, Clone)]
pub struct World {
    pub seed: u64,
    /// 0 for the seed's session; 1 for the session resumed after it (a crash, a disk
    /// that failed).
    pub round: u64,
    pub chunk_bytes: u32,
    pub opts: Opts,
    pub faults: Faults,
    pub shape: Shape,
    /// The tree in scan order; entry `i` has file id `i + 1`.
    pub files: Vec<SrcFile>,
    /// The destination at the start.
    pub dest: DestFs,
}

impl World {
    pub fn draw(seed: u64) -> World {
        let mut rng = Rng::new(seed, 1);
        let chunk_bytes = rng.pick(&[16u32, 32, 64, 128, 256]);
        let opts = Opts {
            resume: rng.chance(400),
            update: rng.chance(250),
            no_clobber: rng.chance(200),
            chunk_acks: rng.chance(600),
            // Its own stream, so the worlds drawn before it stay as they were.
            sink_closes: Rng::new(seed, 0).chance(500),
        };
        let faults = draw_faults(&mut rng);
        let shape = draw_shape(&mut rng);
        let files = draw_tree(&mut rng, seed, chunk_bytes);
        let dest = draw_dest(&mut rng, seed, &files, chunk_bytes);
        World {
            seed,
            round: 0,
            chunk_bytes,
            opts,
            faults,
            shape,
            files,
            dest,
        }
    }

    /// The session run again with `--resume` over what the first one left at `dest`:
    /// the same tree, network and damage in flight; no crash, no failing disk.
    pub fn resumed(&self, dest: DestFs) -> World {
        let mut w = self.clone();
        w.round = self.round + 1;
        w.opts.resume = true;
        w.faults.crash = None;
        w.faults.disk_fail_pm = 0;
        w.faults.read_fail_pm = 0;
        w.dest = dest;
        w
    }

    /// The entry of `file_id`.
    pub fn file(&self, file_id: u64) -> &SrcFile {
        let i = usize::try_from(file_id).expect("small") - 1;
        &self.files[i]
    }
}

fn draw_faults(rng: &mut Rng) -> Faults {
    let crash = rng.chance(250).then(|| {
        let side = if rng.chance(500) {
            Side::Source
        } else {
            Side::Sink
        };
        (side, rng.range(1, 500))
    });
    Faults {
        corrupt_pm: rng.pick(&[0, 0, 10, 40, 100]),
        dup_pm: rng.pick(&[0, 0, 20, 100]),
        disk_fail_pm: rng.pick(&[0, 0, 0, 0, 0, 20, 100]),
        read_fail_pm: rng.pick(&[0, 0, 0, 0, 0, 20, 100]),
        stall_pm: rng.pick(&[0, 10, 50]),
        master_stall_pm: rng.pick(&[0, 0, 0, 0, 0, 0, 0, 100]),
        crash,
    }
}

fn draw_shape(rng: &mut Rng) -> Shape {
    let conns = usize::try_from(rng.range(1, 4)).expect("small");
    let readers = usize::try_from(rng.range(1, 4)).expect("small");
    let slots = conns + usize::try_from(rng.range(0, 6)).expect("small");
    Shape {
        conns,
        readers,
        slots,
        ctl_latency: rng.pick(&[20, 200, 2_000]),
        conn_latency: (0..conns)
            .map(|_| rng.pick(&[10, 100, 1_000, 5_000]))
            .collect(),
        conn_ns_per_byte: (0..conns).map(|_| rng.pick(&[1, 10, 100])).collect(),
    }
}

/// 5 to 60 entries: directories before their contents (the scanner's order),
/// symlinks, empty files, small files (packed) and large ones of several chunks.
fn draw_tree(rng: &mut Rng, seed: u64, cb: u32) -> Vec<SrcFile> {
    let n = rng.range(5, 60);
    let mut dirs: Vec<String> = vec![String::new()];
    let mut files = Vec::new();
    for id in 1..=n {
        let parent = dirs[rng.index(dirs.len())].clone();
        let roll = rng.below(100);
        let (kind, name, size) = match roll {
            0..=11 => (FileKind::Dir, "d", 0),
            12..=19 => (FileKind::Symlink, "l", 0),
            20..=27 => (FileKind::File, "e", 0),
            28..=64 => (FileKind::File, "s", rng.range(1, u64::from(cb))),
            _ => (
                FileKind::File,
                "f",
                rng.range(u64::from(cb) + 1, MAX_CHUNKS * u64::from(cb)),
            ),
        };
        let path = if parent.is_empty() {
            format!("{name}{id}")
        } else {
            format!("{parent}/{name}{id}")
        };
        if kind == FileKind::Dir {
            dirs.push(path.clone());
        }
        let mode = match kind {
            FileKind::Dir => rng.pick(&[0o755, 0o750, 0o700, 0o555, 0o511]),
            _ => rng.pick(&[0o644, 0o600, 0o755, 0o444, 0o640]),
        };
        let entry = FileEntry {
            file_id: id,
            path: RelPath::parse(&path).expect("a valid path"),
            kind,
            size,
            mode,
            mtime_ns: mtime(rng),
            symlink_target: (kind == FileKind::Symlink).then(|| format!("../t{id}")),
        };
        let data = bytes([seed, id, 0], usize::try_from(size).expect("small"));
        let sums = sums_of(&data, size, cb);
        let first = u32::try_from(rng.below(3)).expect("small");
        let count = u32::try_from(rng.range(1, 3)).expect("small");
        let stripe = u64::from(cb) * rng.range(1, 3);
        files.push(SrcFile {
            entry,
            data,
            sums,
            targets: (first, count, stripe),
        });
    }
    files
}

fn mtime(rng: &mut Rng) -> i64 {
    1_600_000_000_000_000_000 + i64::try_from(rng.below(1 << 50)).expect("small")
}

pub fn sums_of(data: &[u8], size: u64, cb: u32) -> Vec<u64> {
    (0..chunk_count(size, cb))
        .map(|i| {
            let (at, len) = chunk_range(size, cb, i).expect("in range");
            let at = usize::try_from(at).expect("small");
            chunk_checksum(&data[at..at + len as usize])
        })
        .collect()
}

/// What the destination holds before the session: per entry nothing, the same entry
/// whole, another version, or partials (of this version, holding some of its chunks,
/// maybe one torn; or of another version).
fn draw_dest(rng: &mut Rng, seed: u64, files: &[SrcFile], cb: u32) -> DestFs {
    let mut fs = DestFs::default();
    for f in files {
        let e = &f.entry;
        let path = f.path().to_string();
        match e.kind {
            FileKind::Dir if rng.chance(300) => {
                let node = Node::Dir {
                    mode: 0o755,
                    mtime: mtime(rng),
                };
                fs.nodes.insert(path, node);
            }
            FileKind::Symlink if rng.chance(300) => {
                let node = Node::Link {
                    target: "old".into(),
                    mtime: mtime(rng),
                };
                fs.nodes.insert(path, node);
            }
            FileKind::File => draw_file_dest(rng, seed, f, cb, &mut fs),
            _ => {}
        }
    }
    fs
}

fn draw_file_dest(rng: &mut Rng, seed: u64, f: &SrcFile, cb: u32, fs: &mut DestFs) {
    match rng.below(100) {
        0..=34 => {} // nothing there
        35..=49 => {
            let whole = Node::File {
                data: f.data.clone(),
                mode: f.entry.mode,
                mtime: f.entry.mtime_ns,
            };
            fs.nodes.insert(f.path().into(), whole);
        }
        50..=69 => put_other_version(rng, seed, f, cb, fs),
        _ if !f.has_data() => put_other_version(rng, seed, f, cb, fs),
        70..=84 => put_partial_of_this_version(rng, f, cb, fs),
        85..=92 => {
            // A partial of another version: reset when resumed.
            let e = &f.entry;
            let head = Head {
                size: e.size,
                mtime: e.mtime_ns + 1,
                chunk_bytes: cb,
            };
            let data = vec![0; usize::try_from(e.size).expect("small")];
            fs.put_partial(f.path(), data, head, vec![(0, 0)]);
        }
        _ => {
            put_other_version(rng, seed, f, cb, fs);
            put_partial_of_this_version(rng, f, cb, fs);
        }
    }
}

/// Another version: other bytes, another mtime, maybe another size.
fn put_other_version(rng: &mut Rng, seed: u64, f: &SrcFile, cb: u32, fs: &mut DestFs) {
    let e = &f.entry;
    let size = if rng.chance(500) {
        e.size
    } else {
        rng.range(0, MAX_CHUNKS * u64::from(cb))
    };
    let data = bytes([seed, e.file_id, 1], usize::try_from(size).expect("small"));
    let mtime = e.mtime_ns - 1 - i64::try_from(rng.below(1000)).expect("small");
    let node = Node::File {
        data,
        mode: 0o644,
        mtime,
    };
    fs.nodes.insert(f.path().into(), node);
}

/// A partial of this version holding a random subset of the chunks (all of them
/// sometimes), and maybe a torn record: logged, but its bytes never written.
fn put_partial_of_this_version(rng: &mut Rng, f: &SrcFile, cb: u32, fs: &mut DestFs) {
    let e = &f.entry;
    let count = chunk_count(e.size, cb);
    assert!(count <= MAX_FILE_CHUNKS);
    let mut data = vec![0u8; usize::try_from(e.size).expect("small")];
    let mut log = Vec::new();
    let all = rng.chance(150);
    for index in 0..count {
        let (at, len) = chunk_range(e.size, cb, index).expect("in range");
        let sum = f.sums[usize::try_from(index).expect("small")];
        let (at, len) = (usize::try_from(at).expect("small"), len as usize);
        if all || rng.chance(500) {
            data[at..at + len].copy_from_slice(&f.data[at..at + len]);
            log.push((index, sum));
        } else if rng.chance(150) && f.data[at..at + len].iter().any(|b| *b != 0) {
            log.push((index, sum)); // torn: the bytes never made it
        }
    }
    let head = Head {
        size: e.size,
        mtime: e.mtime_ns,
        chunk_bytes: cb,
    };
    fs.put_partial(f.path(), data, head, log);
}
