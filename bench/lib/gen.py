#!/usr/bin/env python3
"""Deterministic data sets and the memory-copy ceiling (no network, no randomness
from the machine: every byte follows from the seed).

  gen.py tree OUT --files N [--seed S] [--max-bytes B] [--min-bytes B] [--fanout F] [--kernel-like]
  gen.py tomo OUT --frames N [--seed S] [--width 2560 --height 2160]
  gen.py memcpy [--mib 512] [--reps 5]            prints "<bytes/s> memcpy"
  gen.py stats PATH                                prints "<files> <bytes>"
"""
import argparse
import math
import os
import random
import sys
import time


def cmd_tree(a):
    """N files of min..max bytes in a two-level fan-out of directories; with
    --kernel-like also some executables, relative symlinks and empty directories."""
    rng = random.Random(a.seed)
    pool = rng.randbytes(1 << 20)  # file contents are slices of one random block
    os.makedirs(a.out, exist_ok=True)
    per_dir = a.fanout
    ndirs = max(1, math.ceil(a.files / per_dir))
    files = []
    for i in range(a.files):
        d = os.path.join(a.out, f"d{(i // per_dir) // 100:03d}", f"d{(i // per_dir) % 100:02d}")
        if i % per_dir == 0:
            os.makedirs(d, exist_ok=True)
        size = rng.randint(a.min_bytes, a.max_bytes)
        off = rng.randrange(0, len(pool) - a.max_bytes)
        p = os.path.join(d, f"f{i:07d}")
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        if size:
            os.write(fd, pool[off:off + size])
        os.close(fd)
        if a.kernel_like and rng.random() < 0.05:
            os.chmod(p, 0o755)
        files.append(p)
    if a.kernel_like:
        for j in range(max(1, a.files // 100)):
            target = files[rng.randrange(len(files))]
            link_dir = os.path.dirname(files[rng.randrange(len(files))])
            link = os.path.join(link_dir, f"l{j:05d}")
            os.symlink(os.path.relpath(target, link_dir), link)
        for j in range(max(1, ndirs // 20)):
            os.makedirs(os.path.join(a.out, "empty", f"e{j:03d}"), exist_ok=True)
    return 0


def cmd_tomo(a):
    """Raw 16-bit detector frames of a rotating object, like a tomography scan:
    flat field x transmission of a few ellipsoids at the frame's angle, plus shot
    noise, inside a round beam (zeros outside it); lz4 makes about 2:1 of it. One file per frame (2560 x 2160 x 2 bytes = 11.0592 MB, seed 001's chunk)."""
    import numpy as np

    w, h = a.width, a.height
    os.makedirs(a.out, exist_ok=True)
    x = (np.arange(w) - w / 2) / (w / 2)  # detector column, -1..1
    z = (np.arange(h) - h / 2) / (h / 2)  # detector row, -1..1
    ellipses = [  # (cx, cy, a, b, attenuation, z half-height)
        (0.0, 0.0, 0.70, 0.55, 1.2, 0.9),
        (0.25, 0.1, 0.20, 0.30, -0.6, 0.6),
        (-0.3, -0.2, 0.15, 0.10, 2.0, 0.4),
        (0.1, -0.35, 0.08, 0.12, 3.0, 0.7),
    ]
    flat = 30000.0 * (1.0 - 0.15 * (x[None, :] ** 2 + z[:, None] ** 2))
    # round beam on the scintillator: outside it the dark-subtracted detector reads 0
    xp, zp = np.arange(w) - w / 2, np.arange(h) - h / 2
    beam = (xp[None, :] ** 2 + zp[:, None] ** 2) <= (0.88 * h / 2) ** 2
    for k in range(a.frames):
        theta = math.pi * k / max(1, a.frames)
        c, s = math.cos(theta), math.sin(theta)
        mu = np.zeros((h, w))
        for cx, cy, ea, eb, att, zh in ellipses:
            t = x - (cx * c + cy * s)  # offset of the ray from the centre
            r2 = (ea * c) ** 2 + (eb * s) ** 2
            chord = 2 * ea * eb * np.sqrt(np.clip(r2 - t * t, 0, None)) / r2
            zw = np.sqrt(np.clip(1 - (z / zh) ** 2, 0, None))
            mu += att * np.outer(zw, chord)
        mean = flat * np.exp(-mu)
        rng = np.random.default_rng(a.seed * 100003 + k)
        frame = mean + rng.standard_normal((h, w)) * np.sqrt(mean)
        frame[~beam] = 0
        np.clip(frame, 0, 65535, out=frame)
        frame.astype("<u2").tofile(os.path.join(a.out, f"proj_{k:05d}.raw"))
    return 0


def cmd_memcpy(a):
    n = a.mib << 20
    src = bytearray(b"\x5a") * n  # every page touched
    dst = bytearray(n)
    dst[:] = src  # fault the destination in
    best = 0.0
    for _ in range(a.reps):
        t = time.perf_counter()
        dst[:] = src
        best = max(best, n / (time.perf_counter() - t))
    print(f"{best:.0f} memcpy")
    return 0


def cmd_stats(a):
    if os.path.isfile(a.path):
        print(1, os.path.getsize(a.path))
        return 0
    files = size = 0
    for root, _dirs, names in os.walk(a.path):
        for n in names:
            p = os.path.join(root, n)
            if os.path.isfile(p) and not os.path.islink(p):
                files += 1
                size += os.path.getsize(p)
    print(files, size)
    return 0


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tree")
    t.add_argument("out")
    t.add_argument("--files", type=int, required=True)
    t.add_argument("--seed", type=int, default=1)
    t.add_argument("--min-bytes", type=int, default=0)
    t.add_argument("--max-bytes", type=int, default=4096)
    t.add_argument("--fanout", type=int, default=1000)
    t.add_argument("--kernel-like", action="store_true")
    m = sub.add_parser("tomo")
    m.add_argument("out")
    m.add_argument("--frames", type=int, required=True)
    m.add_argument("--seed", type=int, default=1)
    m.add_argument("--width", type=int, default=2560)
    m.add_argument("--height", type=int, default=2160)
    c = sub.add_parser("memcpy")
    c.add_argument("--mib", type=int, default=512)
    c.add_argument("--reps", type=int, default=5)
    s = sub.add_parser("stats")
    s.add_argument("path")
    a = p.parse_args()
    return {"tree": cmd_tree, "tomo": cmd_tomo, "memcpy": cmd_memcpy, "stats": cmd_stats}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
