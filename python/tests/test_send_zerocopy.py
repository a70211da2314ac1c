"""Frames sent without a copy: where the stream does not compress, `send` pins the
array and its records point into it until the receiver acknowledges them; the array is
released at the next call after that (`flush`, `close`, `send`); `copy=True` copies."""

from __future__ import annotations

import gc
import weakref
from typing import Any, Callable

import numpy as np
import pytest

import sluice
from sluice._sluice import SlotView
from test_stream import frame, run_sender

SMALL = {"chunk_size": "1MiB", "buffer_mem": "16MiB"}


def exchange(send: Callable[[sluice.Sender], Any],
             **opts: Any) -> tuple[list[tuple[np.ndarray, sluice.Meta]], Any]:
    """Runs `send(tx)` on a sender thread while this thread receives every frame."""
    rx = sluice.Receiver(**SMALL)

    def body() -> Any:
        with sluice.Sender(rx.url, **{**SMALL, **opts}) as tx:
            return send(tx)

    t, out = run_sender(body)
    got = list(rx)
    t.join()
    if "error" in out:
        raise out["error"]
    return got, out.get("result")


def owned(i: int, shape: tuple[int, ...] = (216, 256), dtype: Any = np.uint16) -> np.ndarray:
    """A frame that owns its memory: a weak reference to it tells when its memory is
    let go (`frame` returns a view, whose memory outlives it in its base)."""
    arr = frame(i, shape, dtype).copy()
    assert arr.base is None and arr.flags.owndata
    return arr


def as_array(obj: Any) -> np.ndarray:
    """What a receiver makes of `obj`: byte buffers become `uint8` arrays."""
    return obj if isinstance(obj, np.ndarray) else np.frombuffer(obj, dtype=np.uint8)


def test_frames_sent_without_a_copy_arrive_byte_identical_with_dtype_and_shape() -> None:
    sent: list[Any] = [frame(i) for i in range(4)] + [
        frame(9, (3, 4, 5), np.float64),
        np.arange(10, dtype=np.int32)[::2],           # not contiguous: its copy is pinned
        frame(3, (40, 30), np.uint16).T,              # Fortran order
        np.zeros((0, 3), np.float32),                 # empty: nothing to pin
        np.array([[True, False], [False, True]]),
        b"immutable bytes" * 100,
        bytearray(range(256)) * 40,
    ]

    def send(tx: sluice.Sender) -> list[int]:
        assert tx.zero_copy
        return [tx.send(a, meta={"i": i}) for i, a in enumerate(sent)]

    got, ids = exchange(send)
    assert ids == list(range(len(sent)))
    assert len(got) == len(sent)
    for i, ((arr, meta), obj) in enumerate(zip(got, sent)):
        want = as_array(obj)
        assert arr.dtype == want.dtype and arr.shape == want.shape, f"frame {i}"
        assert arr.tobytes() == np.ascontiguousarray(want).tobytes(), f"frame {i} differs"
        assert dict(meta) == {"i": i}
    # The receiver cannot tell: a frame whole in one record is still lent in its slot.
    assert isinstance(got[0][0].base, SlotView)


def test_an_array_is_held_until_acknowledged_and_flush_releases_it() -> None:
    def send(tx: sluice.Sender) -> tuple[bool, bool, int]:
        arr = owned(1)
        ref = weakref.ref(arr)
        tx.send(arr)
        del arr
        gc.collect()
        # Released only at a call after the receiver's acknowledgement: held here.
        held = ref() is not None
        tx.flush()
        gc.collect()
        return held, ref() is None, tx.arrays_held

    got, result = exchange(send)
    assert result == (True, True, 0)
    assert np.array_equal(got[0][0], frame(1))


def test_close_releases_every_array() -> None:
    rx = sluice.Receiver(**SMALL)
    refs: list[weakref.ref[np.ndarray]] = []

    def body() -> None:
        with sluice.Sender(rx.url, **SMALL) as tx:
            for i in range(5):
                arr = owned(i, (512, 1024), np.uint8)
                refs.append(weakref.ref(arr))
                tx.send(arr)
                del arr

    t, out = run_sender(body)
    got = list(rx)
    t.join()
    assert "error" not in out, out
    gc.collect()
    assert [r() for r in refs] == [None] * 5, "arrays still held after close"
    assert [int(a[0, 0]) for a, _ in got] == list(range(5))


def test_copy_true_copies_and_one_array_can_be_refilled() -> None:
    def send(tx: sluice.Sender) -> tuple[bool, int]:
        buf = np.empty((216, 256), np.uint16)
        for i in range(4):
            buf[:] = frame(i)
            tx.send(buf, copy=True)                   # buf is the caller's at once
        for i in range(4, 8):
            buf[:] = frame(i)
            tx.send(buf)
            tx.flush()                                # ... or after the flush
        arr = owned(9)
        ref = weakref.ref(arr)
        tx.send(arr, copy=True)
        del arr
        gc.collect()
        return ref() is None, tx.arrays_held

    got, result = exchange(send)
    assert result == (True, 0)
    assert len(got) == 9
    for i, (arr, _) in enumerate(got):
        assert np.array_equal(arr, frame(9 if i == 8 else i)), f"frame {i} differs"


def test_large_arrays_span_records_pinned_beyond_the_senders_buffer_memory() -> None:
    """Each record in flight holds one of the sender's 16 slots: a 22 MB array (22
    records) is sent in turns as the receiver acknowledges, from the array itself."""
    big = [frame(5, (2560 * 2, 2160), np.uint16), frame(6, (1500, 1000), np.uint32)]

    def send(tx: sluice.Sender) -> dict[str, Any]:
        for a in big:
            tx.send(a)
        tx.send(b"after")
        return tx.close()

    got, summary = exchange(send, streams=3)
    assert len(got) == 3
    for (arr, _), want in zip(got, big):
        assert arr.dtype == want.dtype and arr.shape == want.shape
        assert np.array_equal(arr, want)
    assert got[2][0].tobytes() == b"after"
    assert summary["records"] >= 22 + 6 + 1
    assert summary["bytes"] >= sum(a.nbytes for a in big)


@pytest.mark.parametrize("compress", ["lz4", "zstd"])
def test_a_compressing_stream_copies(compress: str) -> None:
    def send(tx: sluice.Sender) -> tuple[bool, bool]:
        arr = owned(2)
        ref = weakref.ref(arr)
        tx.send(arr)
        del arr
        gc.collect()
        return tx.zero_copy, ref() is None

    got, result = exchange(send, compress=compress)
    assert result == (False, True)
    assert np.array_equal(got[0][0], frame(2))
