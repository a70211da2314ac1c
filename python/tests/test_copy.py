"""sluice.copy against a `sluice serve` daemon: files and trees arrive, the summary is
the CLI's, progress is reported, and errors carry the CLI's class and message."""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any

import pytest

import sluice
from conftest import Daemon, run_cli


def make_tree(root: pathlib.Path) -> dict[str, bytes]:
    files = {
        "a.bin": os.urandom(3 << 20),
        "sub/b.txt": b"hello\n" * 1000,
        "sub/deeper/c": b"",
    }
    for name, data in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return files


def test_a_tree_is_pushed_with_progress_and_summary(tmp_path: pathlib.Path, daemon: Daemon) -> None:
    src = tmp_path / "src"
    files = make_tree(src)
    seen: list[dict[str, int]] = []
    summary = sluice.copy(src, daemon.url("dst"), recursive=True, verify=True,
                          progress=seen.append, progress_interval=0.05)
    for name, data in files.items():
        assert (daemon.root / "dst" / name).read_bytes() == data, name
    assert summary["files"] == len(files)
    assert summary["bytes"] == sum(len(d) for d in files.values())
    assert summary["files_failed"] == 0
    assert seen, "progress was never called"
    assert seen[-1]["bytes"] == summary["bytes"]
    assert seen[-1]["files_done"] == len(files)
    assert all(set(p) == {"bytes", "total_bytes", "files_done", "files"} for p in seen)


def test_the_summary_has_the_fields_of_cp_json(tmp_path: pathlib.Path, daemon: Daemon) -> None:
    src = tmp_path / "one.bin"
    src.write_bytes(b"x" * 100_000)
    summary = sluice.copy(str(src), daemon.url("py.bin"))
    cli = run_cli("cp", "--json", str(src), daemon.url("cli.bin"))
    assert cli.returncode == 0, cli.stderr
    assert set(summary) == set(json.loads(cli.stdout))
    assert (daemon.root / "py.bin").read_bytes() == src.read_bytes()


def test_a_file_is_pulled(tmp_path: pathlib.Path, daemon: Daemon) -> None:
    (daemon.root / "remote.bin").write_bytes(b"y" * 5000)
    dst = tmp_path / "here.bin"
    summary = sluice.copy(daemon.url("remote.bin"), dst)
    assert dst.read_bytes() == b"y" * 5000
    assert summary["files"] == 1


def test_bwlimit_paces_the_copy(tmp_path: pathlib.Path, daemon: Daemon) -> None:
    """20 MB at 10 MB/s cannot arrive in much under 2 s (the band is generous: only a
    limiter that does nothing fails), and a rate that is not one is a usage error."""
    import time
    src = tmp_path / "paced.bin"
    src.write_bytes(os.urandom(20_000_000))
    started = time.monotonic()
    summary = sluice.copy(src, daemon.url("paced.bin"), bwlimit="10M")
    assert time.monotonic() - started > 1.5
    assert summary["bytes"] == 20_000_000
    with pytest.raises(sluice.UsageError, match="bwlimit"):
        sluice.copy(src, daemon.url("x.bin"), bwlimit="fast")


def same_error_as_cli(err: sluice.SluiceError, *args: str) -> None:
    """The exception's CLI message is the first line `sluice` prints on stderr."""
    cli = run_cli(*args)
    assert cli.returncode == err.exit_code, cli.stderr
    first = cli.stderr.strip().splitlines()[0]
    assert err.cli_message == first


def test_a_missing_source_raises_what_the_cli_prints(tmp_path: pathlib.Path, daemon: Daemon) -> None:
    with pytest.raises(sluice.SluiceError) as info:
        sluice.copy(daemon.url("nothing-here"), tmp_path / "x")
    assert info.value.recovery == "abort"
    assert info.value.code == "NotFound", info.value.code
    same_error_as_cli(info.value, "cp", daemon.url("nothing-here"), str(tmp_path / "x"))


def test_both_sides_local_is_a_usage_error(tmp_path: pathlib.Path) -> None:
    with pytest.raises(sluice.UsageError) as info:
        sluice.copy(tmp_path, tmp_path / "y")
    same_error_as_cli(info.value, "cp", str(tmp_path), str(tmp_path / "y"))


def test_nobody_listening_raises_what_the_cli_prints(tmp_path: pathlib.Path) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"z")
    with pytest.raises(sluice.AbortError) as info:
        sluice.copy(f, "sluice://127.0.0.1:1/f")
    same_error_as_cli(info.value, "cp", str(f), "sluice://127.0.0.1:1/f")


def test_an_exception_in_progress_is_raised_after_the_copy(tmp_path: pathlib.Path, daemon: Daemon) -> None:
    src = tmp_path / "big.bin"
    src.write_bytes(os.urandom(2 << 20))

    def boom(_: Any) -> None:
        raise RuntimeError("stop watching")

    with pytest.raises(RuntimeError, match="stop watching"):
        sluice.copy(src, daemon.url("big.bin"), progress=boom, progress_interval=0.01)
    # The copy itself was not interrupted.
    assert (daemon.root / "big.bin").read_bytes() == src.read_bytes()
