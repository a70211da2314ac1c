"""Runs the Python streaming benchmark: sluice against pyzmq (and pvapy) with seed 001's
frames, on loopback and on a 1 Gbit/s tbf link between two network namespaces, and
with a consumer that sleeps 50 ms per frame. Writes results.json and results.md to
--out. Run as root from a venv with sluice, pyzmq, lz4 and pvapy installed (see
README.md). Rounds interleave the tools so that drift on a shared machine hits all."""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time
from typing import Any, Optional

HERE = pathlib.Path(__file__).resolve().parent
FRAME_BYTES = 2560 * 2160 * 2
NS_A, NS_B = "py-a", "py-b"             # sender's and receiver's namespaces
ADDR_B = "10.65.0.2"


def ns(name: Optional[str]) -> list[str]:
    return ["ip", "netns", "exec", name] if name else []


def peer(role: str, tool: str, where: Optional[str], *args: str) -> subprocess.Popen[str]:
    cmd = [*ns(where), sys.executable, str(HERE / "peers.py"), role, tool, *args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def last_json(p: subprocess.Popen[str], what: str, timeout: float) -> dict[str, Any]:
    try:
        stdout, stderr = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        stdout, stderr = p.communicate()
        return {"error": f"{what} timed out", "stderr": stderr[-2000:]}
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if p.returncode != 0 or not lines:
        return {"error": f"{what} exit {p.returncode}", "stderr": stderr[-2000:]}
    return json.loads(lines[-1])


def stream(tool: str, frames: int, link: str, sleep: float = 0.0, compress: str = "none",
           data: str = "random", port: int = 7990, extra: tuple[str, ...] = (),
           rx_extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """One run of `tool` (sluice, zmq, ...) sending `frames` frames."""
    remote = link == "tbf"
    addr = f"{ADDR_B if remote else '127.0.0.1'}:{port}"
    common = ["--addr", addr, "--frames", str(frames), "--data", data]
    rx = peer("recv", tool, NS_B if remote else None, *common, *extra, *rx_extra, "--sleep", str(sleep))
    assert rx.stdout is not None
    ready = rx.stdout.readline()
    if not ready:
        return last_json(rx, "receiver", 10)
    tx = peer("send", tool, NS_A if remote else None, *common, *extra, "--compress", compress)
    sent = last_json(tx, "sender", 600)
    got = last_json(rx, "receiver", 120 if "error" not in sent else 5)
    return summarise(tool, compress, link, sleep, frames, sent, got)


def summarise(tool: str, compress: str, link: str, sleep: float, frames: int,
              sent: dict[str, Any], got: dict[str, Any]) -> dict[str, Any]:
    r: dict[str, Any] = dict(tool=tool, compress=compress, link=link, sleep_s=sleep,
                             frames=frames, sender=sent, receiver=got)
    if "error" in sent or "error" in got:
        r["error"] = sent.get("error") or got.get("error")
        return r
    n = got["frames"]
    r["received"] = n
    r["lost"] = frames - n
    r["receiver_max_rss_mib"] = got["max_rss_mib"]
    span = got["t_last"] - got["t_first"]
    r["steady_gbps"] = (n - 1) * FRAME_BYTES * 8 / span / 1e9 if n > 1 and span > 0 else None
    total = got["t_last"] - sent["t_start"]
    r["end_to_end_gbps"] = n * FRAME_BYTES * 8 / total / 1e9 if total > 0 else None
    return r


def pva(frames_per_s: int, seconds: float, sleep: float, link: str) -> dict[str, Any]:
    """pvapy: its simulated area detector publishes 2560x2160 uint16 frames at
    `frames_per_s`; one monitor consumes for `seconds`."""
    remote = link == "tbf"
    server = subprocess.Popen(
        [*ns(NS_A if remote else None), str(pathlib.Path(sys.executable).parent / "pvapy-ad-sim-server"),
         "-cn", "bench:image", "-nx", "2560", "-ny", "2160", "-dt", "uint16", "-nf", "8",
         "-cs", "8", "-fps", str(frames_per_s), "-rt", str(seconds + 25), "-std", "2",
         "-shd", "1", "-rp", "0", "-dc"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    env = dict(os.environ)
    if remote:
        env.update(EPICS_PVA_ADDR_LIST="10.65.0.1", EPICS_PVA_AUTO_ADDR_LIST="NO")
    time.sleep(4)
    cmd = [*ns(NS_B if remote else None), sys.executable, str(HERE / "peers.py"), "recv", "pva",
           "--channel", "bench:image", "--seconds", str(seconds), "--sleep", str(sleep)]
    rx = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    got = last_json(rx, "pvapy monitor", seconds + 60)
    server.terminate()
    server.wait(timeout=30)
    r: dict[str, Any] = dict(tool="pvapy", compress="none", link=link, sleep_s=sleep,
                             published_fps=frames_per_s, receiver=got)
    if "error" in got:
        r["error"] = got["error"]
        return r
    n = got["frames"]
    span = got["t_last"] - got["t_first"]
    r["received"] = n
    r["lost"] = got["missing_ids"]          # frames published after the first, not seen
    r["steady_gbps"] = (n - 1) * FRAME_BYTES * 8 / span / 1e9 if n > 1 and span > 0 else None
    r["receiver_max_rss_mib"] = got["max_rss_mib"]
    return r


def netns_up() -> None:
    subprocess.run(["sh", str(HERE / "netns.sh"), "up"], check=True)


def netns_down() -> None:
    subprocess.run(["sh", str(HERE / "netns.sh"), "down"], check=False)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--frames", type=int, default=150)
    p.add_argument("--wan-frames", type=int, default=60)
    p.add_argument("--slow-frames", type=int, default=60)
    p.add_argument("--skip", default="", help="comma-separated parts: loopback,tbf,slow,pva")
    a = p.parse_args()
    skip = set(filter(None, a.skip.split(",")))
    results: list[dict[str, Any]] = []

    def keep(r: dict[str, Any]) -> None:
        results.append(r)
        print(json.dumps({k: v for k, v in r.items() if k not in ("sender", "receiver")}),
              flush=True)

    for rnd in range(a.rounds):
        if "loopback" not in skip:
            for tool, comp in [("sluice", "none"), ("zmq", "none"), ("zmq-lz4", "none"),
                               ("sluice", "lz4")]:
                keep(dict(stream(tool, a.frames, "loopback", compress=comp), round=rnd))
        if "pva" not in skip:
            keep(dict(pva(1000, 12, 0.0, "loopback"), round=rnd))
    if "tbf" not in skip:
        netns_up()
        try:
            for rnd in range(a.rounds):
                for tool, comp in [("sluice", "none"), ("zmq", "none"), ("zmq-lz4", "none"),
                                   ("sluice", "lz4"), ("sluice", "zstd"), ("sluice", "zstd:3")]:
                    keep(dict(stream(tool, a.wan_frames, "tbf", compress=comp, data="tomo"),
                              round=rnd))
        finally:
            netns_down()
    if "slow" not in skip:
        for tool in ["sluice", "zmq", "zmq-pub", "zmq-noblock"]:
            keep(dict(stream(tool, a.slow_frames, "loopback", sleep=0.05), round=0))
        if "pva" not in skip:
            keep(dict(pva(50, 12, 0.05, "loopback"), round=0))
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / "results.md").write_text(report(results))
    print(f"wrote {out / 'results.json'} and results.md")


def report(results: list[dict[str, Any]]) -> str:
    """The table of every run and, per round, sluice's steady rate against pyzmq
    PUSH/PULL's (and its lz4 against pyzmq with the user's lz4)."""
    def num(v: Any, fmt: str = "{:.2f}") -> str:
        return "" if v is None else fmt.format(v)

    lines = ["# Python streaming: sluice vs pyzmq vs pvapy", "",
             "See README.md beside this file for the conditions.", "",
             "| round | link | tool | compress | consumer sleep s | frames sent (pvapy: fps) "
             "| received | lost | steady Gbit/s | end-to-end Gbit/s | receiver max RSS MiB | error |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        sent = r.get("frames", r.get("published_fps"))
        lines.append(f"| {r.get('round')} | {r.get('link')} | {r.get('tool')} | {r.get('compress', '')} "
                     f"| {num(r.get('sleep_s'))} | {sent} | {num(r.get('received'), '{}')} "
                     f"| {num(r.get('lost'), '{}')} | {num(r.get('steady_gbps'))} "
                     f"| {num(r.get('end_to_end_gbps'))} | {num(r.get('receiver_max_rss_mib'), '{}')} "
                     f"| {r.get('error', '')} |")

    def steady(rnd: Any, link: str, tool: str, comp: str) -> float | None:
        for r in results:
            if (r.get("round"), r.get("link"), r.get("tool"), r.get("compress", "none"),
                    r.get("sleep_s", 0.0)) == (rnd, link, tool, comp, 0.0):
                return r.get("steady_gbps")
        return None

    lines += ["", "## Ratios (sluice / pyzmq PUSH-PULL, steady rate, same round)", ""]
    rounds = sorted({r.get("round") for r in results if r.get("round") is not None})
    for link, pairs in [("loopback", [("none", "zmq", "none"), ("lz4", "zmq-lz4", "none")]),
                        ("tbf", [("none", "zmq", "none"), ("lz4", "zmq", "none"),
                                 ("zstd", "zmq", "none"), ("zstd:3", "zmq", "none"),
                                 ("lz4", "zmq-lz4", "none")])]:
        for comp, peer, peer_comp in pairs:
            vals = []
            for rnd in rounds:
                a, b = steady(rnd, link, "sluice", comp), steady(rnd, link, peer, peer_comp)
                if a and b:
                    vals.append(f"{a / b:.2f}")
            if vals:
                lines.append(f"* {link}: sluice {comp} / {peer}: {', '.join(vals)}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
