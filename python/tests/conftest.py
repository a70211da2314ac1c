"""Fixtures: a `sluice serve` daemon for the copy tests (the binary comes from
$SLUICE_BIN, which crates/cli/tests/python.rs sets, or target/debug/sluice)."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from typing import Iterator

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


def sluice_bin() -> str:
    path = os.environ.get("SLUICE_BIN") or str(REPO / "target" / "debug" / "sluice")
    if not os.access(path, os.X_OK):
        print(f"SKIP: no sluice binary at {path} (set SLUICE_BIN)", file=sys.stderr)
        pytest.skip(f"no sluice binary at {path} (set SLUICE_BIN)")
    return path


class Daemon:
    """A `sluice serve` on loopback under `root`."""

    def __init__(self, root: pathlib.Path) -> None:
        self.root = root
        self.proc = subprocess.Popen(
            [sluice_bin(), "serve", "--root", str(root), "--listen", "127.0.0.1:0",
             "--json", "--buffer-mem", "64MiB"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"sluice serve did not start: {self.proc.stderr.read()}")
        self.address = json.loads(line)["listen"]

    def url(self, path: str = "") -> str:
        return f"sluice://{self.address}/{path}"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


@pytest.fixture
def daemon(tmp_path: pathlib.Path) -> Iterator[Daemon]:
    root = tmp_path / "root"
    root.mkdir()
    d = Daemon(root)
    try:
        yield d
    finally:
        d.stop()


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """Runs the sluice binary (for comparing its messages with the exceptions')."""
    return subprocess.run([sluice_bin(), *args], capture_output=True, text=True, timeout=120)
