"""One end of one tool, as a process: `python peers.py ROLE TOOL ...` prints one JSON
line with what it did. Tools: sluice (sluice.Sender/Receiver), zmq (pyzmq PUSH/PULL,
blocking at the high-water mark), zmq-lz4 (the same, lz4 by the user's code as pyzmq
advises), zmq-pub (PUB/SUB with a small high-water mark: memory bounded like sluice's
window), zmq-noblock (PUSH with NOBLOCK: the sender skips a frame when the queue is
full, as tomostream does), pva (pvapy's monitor on pvapy-ad-sim-server's channel)."""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from typing import Any

import numpy as np

import frames as fr


def out(d: dict[str, Any]) -> None:
    d["max_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(json.dumps(d), flush=True)


class Counter:
    """What a receiver saw: frames, bytes, ids missing, first and last arrival."""

    def __init__(self, sleep: float) -> None:
        self.n = self.bytes = 0
        self.last_id = -1
        self.missing = 0
        self.t_first = self.t_last = 0.0
        self.sleep = sleep

    def saw(self, frame_id: int, nbytes: int) -> None:
        now = time.time()
        if self.n == 0:
            self.t_first = now
        self.t_last = now
        self.n += 1
        self.bytes += nbytes
        if frame_id > self.last_id + 1:
            self.missing += frame_id - self.last_id - 1
        self.last_id = max(self.last_id, frame_id)
        if self.sleep:
            time.sleep(self.sleep)

    def result(self, **extra: Any) -> dict[str, Any]:
        return dict(frames=self.n, bytes=self.bytes, missing_ids=self.missing,
                    t_first=self.t_first, t_last=self.t_last, **extra)


def recv(a: argparse.Namespace) -> None:
    c = Counter(a.sleep)
    if a.tool == "sluice":
        import sluice
        with sluice.Receiver(listen=a.addr, streams=a.streams, token=a.token, policy=a.policy,
                             insecure_no_auth=True, encrypt="never") as rx:
            print(json.dumps({"ready": rx.address}), flush=True)
            if a.into:
                buf = np.empty((fr.NY, fr.NX), np.uint16)
                while (meta := rx.recv_into(buf)) is not None:
                    c.saw(meta.frame_id, buf.nbytes)
            else:
                for arr, meta in rx:
                    c.saw(meta.frame_id, arr.nbytes)
        out(c.result(expected=a.frames))
        return
    if a.tool == "pva":
        recv_pva(a, c)
        return
    import zmq
    ctx = zmq.Context()
    kind = zmq.SUB if a.tool == "zmq-pub" else zmq.PULL
    s = ctx.socket(kind)
    if a.tool in ("zmq-pub", "zmq-noblock"):
        s.setsockopt(zmq.RCVHWM, a.hwm)
    if kind == zmq.SUB:
        s.setsockopt(zmq.SUBSCRIBE, b"")
    s.bind(f"tcp://{a.addr}")
    print(json.dumps({"ready": a.addr}), flush=True)
    if a.tool == "zmq-lz4":
        import lz4.frame
    while True:
        head, body = s.recv_multipart(copy=False)
        h = json.loads(bytes(head.buffer))
        if h.get("end"):
            break
        data = lz4.frame.decompress(body.buffer) if a.tool == "zmq-lz4" else body.buffer
        arr = np.frombuffer(data, dtype=h["dtype"]).reshape(h["shape"])
        c.saw(h["id"], arr.nbytes)
    out(c.result(expected=a.frames))


def recv_pva(a: argparse.Namespace, c: Counter) -> None:
    import os

    import pvaccess as pva
    ch = pva.Channel(a.channel, pva.PVA)
    first: list[int] = []
    stop: list[bool] = []

    def cb(pv: Any) -> None:
        if stop:
            return
        uid = pv["uniqueId"]
        if not first:
            first.append(uid)
        c.saw(uid - first[0], pv["value"][0]["ushortValue"].nbytes)

    ch.subscribe("bench", cb)
    ch.startMonitor("field()")
    print(json.dumps({"ready": a.channel}), flush=True)
    time.sleep(a.seconds)
    stop.append(True)
    out(c.result(expected=None))
    # Stopping the monitor while a callback sleeps aborts pvapy's thread ("exception
    # not rethrown"): leave without it.
    os._exit(0)


def send(a: argparse.Namespace) -> None:
    data = fr.make(a.data, a.distinct)
    t0 = time.time()
    if a.tool == "sluice":
        import sluice
        with sluice.Sender(f"sluice://{a.addr}", streams=a.streams, compress=a.compress,
                           policy=a.policy,
                           token=a.token, encrypt="never") as tx:
            for i in range(a.frames):
                tx.send(data[i % len(data)], meta={"i": i})
        out(dict(t_start=t0, t_end=time.time(), sent=a.frames, skipped=0,
                 summary=tx.summary))
        return
    import zmq
    ctx = zmq.Context()
    s = ctx.socket(zmq.PUB if a.tool == "zmq-pub" else zmq.PUSH)
    if a.tool in ("zmq-pub", "zmq-noblock"):
        s.setsockopt(zmq.SNDHWM, a.hwm)
    s.connect(f"tcp://{a.addr}")
    if a.tool == "zmq-pub":
        time.sleep(1.0)                       # the slow joiner: let the SUB connect
        t0 = time.time()
    if a.tool == "zmq-lz4":
        import lz4.frame
    skipped = 0
    for i in range(a.frames):
        f = data[i % len(data)]
        head = json.dumps({"id": i, "dtype": f.dtype.str, "shape": f.shape}).encode()
        body = lz4.frame.compress(f) if a.tool == "zmq-lz4" else f
        flags = zmq.NOBLOCK if a.tool == "zmq-noblock" else 0
        try:
            s.send_multipart([head, body], copy=False, flags=flags)
        except zmq.Again:
            skipped += 1                      # "queue is full, skip frame"
    t_end = time.time()
    end = json.dumps({"end": True}).encode()
    for _ in range(50 if a.tool == "zmq-pub" else 1):   # PUB may drop the end too
        try:
            s.send_multipart([end, b""], flags=0)
        except zmq.Again:
            pass
        if a.tool != "zmq-pub":
            break
        time.sleep(0.1)
    s.close(linger=0 if a.tool == "zmq-pub" else -1)
    ctx.term()
    out(dict(t_start=t0, t_end=t_end, sent=a.frames - skipped, skipped=skipped))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=["send", "recv"])
    p.add_argument("tool", choices=["sluice", "zmq", "zmq-lz4", "zmq-pub", "zmq-noblock", "pva"])
    p.add_argument("--addr", default="127.0.0.1:7990")
    p.add_argument("--frames", type=int, default=100)
    p.add_argument("--distinct", type=int, default=8)
    p.add_argument("--data", choices=["tomo", "random"], default="tomo")
    p.add_argument("--streams", type=int, default=2)
    p.add_argument("--compress", default="none")
    p.add_argument("--policy", default="auto", help="sluice: placement policy")
    p.add_argument("--sleep", type=float, default=0.0)
    p.add_argument("--into", action="store_true", help="sluice: recv_into one array")
    p.add_argument("--hwm", type=int, default=4)
    p.add_argument("--token", default=None)
    p.add_argument("--channel", default="pvapy:image")
    p.add_argument("--seconds", type=float, default=20.0)
    a = p.parse_args()
    (send if a.role == "send" else recv)(a)


if __name__ == "__main__":
    sys.exit(main())
