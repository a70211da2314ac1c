"""Frames for the benchmark: seed 001's 2560 x 2160 uint16 detector frames.

`tomo` frames are projections of a phantom as a tomography detector records them: a
flat field of about 3000 counts attenuated by a cylinder and a few inclusions, with
Poisson noise (so they compress about as real projections do, not as zeros do).
`random` frames are uniform noise (incompressible)."""

from __future__ import annotations

import numpy as np

NY, NX = 2160, 2560


def tomo(count: int, seed: int = 1) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:NY, 0:NX].astype(np.float32)
    out = []
    for k in range(count):
        angle = np.pi * k / max(count, 1)
        cx = NX / 2 + 300 * np.cos(angle)
        path = np.sqrt(np.clip(900.0**2 - (x - NX / 2) ** 2, 0, None)) / 450.0
        incl = np.sqrt(np.clip(120.0**2 - (x - cx) ** 2, 0, None)) / 60.0
        band = (np.abs(y - NY / 2) < 900).astype(np.float32)
        counts = 3000.0 * np.exp(-0.6 * path * band - 0.8 * incl * band)
        out.append(rng.poisson(counts).astype(np.uint16))
    return out


def random(count: int, seed: int = 1) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 65535, size=(NY, NX), dtype=np.uint16) for _ in range(count)]


def make(kind: str, count: int) -> list[np.ndarray]:
    return tomo(count) if kind == "tomo" else random(count)
