#!/usr/bin/env python3
"""Byte-for-byte verification of one transfer: verify.py SRC DST.

SRC is a file (then DST/<name of SRC> must match it) or a directory (then DST must hold
the same tree). Compared without following symlinks: entry type (file, directory,
symlink), permission bits, symlink targets, sizes and every byte of every file; entries
missing from or added to DST are failures. Owners and timestamps are not compared (peers
that write as an unprivileged user cannot keep owners). Prints one line, "ok ..." or
"FAILED: ...", and exits 0 or 1.
"""
import os
import stat
import sys
from multiprocessing import Pool

BLOCK = 8 << 20


def same_bytes(pair):
    a, b = pair
    try:
        with open(a, "rb", buffering=0) as fa, open(b, "rb", buffering=0) as fb:
            while True:
                x = fa.read(BLOCK)
                y = fb.read(BLOCK)
                if x != y:
                    return a
                if not x:
                    return None
    except OSError as e:
        return f"{a} ({e.strerror})"


def kind(mode):
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    return "other"


def walk(root):
    """Relative path -> lstat of everything under root (root itself excluded)."""
    out = {}
    stack = [""]
    while stack:
        rel = stack.pop()
        base = os.path.join(root, rel) if rel else root
        try:
            it = os.scandir(base)
        except OSError:
            continue
        with it:
            for e in it:
                r = os.path.join(rel, e.name) if rel else e.name
                st = e.stat(follow_symlinks=False)
                out[r] = st
                if stat.S_ISDIR(st.st_mode):
                    stack.append(r)
    return out


def main():
    src, dst = sys.argv[1], sys.argv[2]
    problems = {}
    examples = []

    def bad(what, path):
        problems[what] = problems.get(what, 0) + 1
        if len(examples) < 3:
            examples.append(f"{what}: {path}")

    if os.path.isdir(src) and not os.path.islink(src):
        s, d = walk(src), walk(dst) if os.path.isdir(dst) else {}
        src_root, dst_root = src, dst
    else:
        name = os.path.basename(src.rstrip("/"))
        src_root, dst_root = os.path.dirname(os.path.abspath(src)), dst
        s = {name: os.lstat(src)}
        try:
            d = {name: os.lstat(os.path.join(dst, name))}
        except OSError:
            d = {}
        if os.path.isdir(dst):
            for e in os.listdir(dst):
                if e != name:
                    d[e] = os.lstat(os.path.join(dst, e))
    pairs = []
    nbytes = 0
    for rel, st in s.items():
        dt = d.get(rel)
        if dt is None:
            bad("missing", rel)
            continue
        ks, kd = kind(st.st_mode), kind(dt.st_mode)
        if ks != kd:
            bad(f"{ks} became {kd}", rel)
            continue
        if stat.S_IMODE(st.st_mode) != stat.S_IMODE(dt.st_mode) and ks != "symlink":
            bad("mode", f"{rel} {stat.S_IMODE(st.st_mode):o}->{stat.S_IMODE(dt.st_mode):o}")
        if ks == "symlink":
            if os.readlink(os.path.join(src_root, rel)) != os.readlink(os.path.join(dst_root, rel)):
                bad("symlink target", rel)
        elif ks == "file":
            nbytes += st.st_size
            if st.st_size != dt.st_size:
                bad("size", f"{rel} {st.st_size}->{dt.st_size}")
            else:
                pairs.append((os.path.join(src_root, rel), os.path.join(dst_root, rel)))
    for rel in d:
        if rel not in s:
            bad("extra", rel)
    if len(pairs) > 64:
        with Pool(max(2, os.cpu_count() or 2)) as pool:
            results = list(pool.imap_unordered(same_bytes, pairs, chunksize=256))
    else:
        results = [same_bytes(p) for p in pairs]
    for r in results:
        if r is not None:
            bad("content", os.path.relpath(r.split(" (")[0], src_root))
    nfiles = sum(1 for st in s.values() if stat.S_ISREG(st.st_mode))
    if problems:
        summary = ", ".join(f"{k} {v}" for k, v in sorted(problems.items()))
        print(f"FAILED: {summary} (of {len(s)} entries; e.g. {'; '.join(examples)})")
        return 1
    print(f"ok {len(s)} entries, {nfiles} files, {nbytes} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
