"""Frames received without a copy: a frame whole in one record comes as an array over
the receiver's buffer slot, which goes back to the receiver when the array is dropped;
arrays held never stall the stream (past the spare slots, frames come copied)."""

from __future__ import annotations

import queue
import threading
from typing import Any, Callable

import numpy as np
import pytest

import sluice
from sluice._sluice import SlotView
from test_stream import frame, run_sender

# 1 MiB slots; a receiver's buffer_mem in MiB is its number of slots. With two
# connections the stream keeps 3 * 2 + 1 = 7 of them: the rest are spare.
SLOT = "1MiB"


def receiver(slots: int) -> sluice.Receiver:
    return sluice.Receiver(streams=2, chunk_size=SLOT, buffer_mem=f"{slots}MiB")


def send(rx: sluice.Receiver, items: list[Any]) -> tuple[threading.Thread, dict[str, Any]]:
    def body() -> None:
        with sluice.Sender(rx.url, streams=2, chunk_size=SLOT, buffer_mem="16MiB") as tx:
            for a in items:
                tx.send(a)

    return run_sender(body)


def within(seconds: float, rx: sluice.Receiver, fn: Callable[[], Any]) -> Any:
    """`fn()`, run on a thread; the test fails (and the receiver is closed, which ends
    the wait) if it takes longer than `seconds`: the stream stalled."""
    t, out = run_sender(fn)
    t.join(seconds)
    if t.is_alive():
        rx.close()
        t.join(30)
        pytest.fail(f"the stream stalled: not received within {seconds} s")
    if "error" in out:
        raise out["error"]
    return out.get("result")


def lent(arr: np.ndarray) -> bool:
    """Whether `arr` is a view of a receiver's slot rather than an array of its own."""
    return isinstance(arr.base, SlotView)


def check_views(got: list[np.ndarray], sent: list[np.ndarray]) -> None:
    """Each array is its frame, writable and aligned, over the bytes of its slot."""
    for arr, want in zip(got, sent):
        assert arr.dtype == want.dtype and arr.shape == want.shape
        assert np.array_equal(arr, want)
        assert lent(arr), f"{arr.shape} {arr.dtype}: copied, not lent"
        assert not arr.flags.owndata and arr.flags.writeable
        assert arr.flags.c_contiguous and arr.flags.aligned
        assert len(arr.base) == arr.nbytes
        raw = np.frombuffer(arr.base, np.uint8)      # a second export of the same bytes
        assert np.shares_memory(arr, raw)
        assert raw.tobytes() == np.ascontiguousarray(want).tobytes()


def test_a_frame_whole_in_one_record_is_a_writable_view_of_its_slot() -> None:
    rx = receiver(16)
    whole = [frame(0), frame(1, (3, 4, 5), np.float64), frame(2, (), np.int32),
             frame(3, (40, 30), np.uint16).T]
    big = frame(4, (1500, 1000), np.uint32)            # 6 MB over 1 MiB records
    empty = np.zeros((0, 3), np.float32)
    t, out = send(rx, whole + [big, empty])
    got = within(120, rx, lambda: [arr for arr, _ in rx])
    t.join()
    assert "error" not in out, out
    assert len(got) == len(whole) + 2
    check_views(got[:len(whole)], whole)
    assert rx.slots_spare == 16 - 7
    assert rx.slots_lent == len(whole)
    # A frame over several records, and an empty one, are copied as before.
    assert np.array_equal(got[-2], big) and not lent(got[-2]) and got[-2].flags.owndata
    assert got[-1].shape == (0, 3) and not lent(got[-1])
    # Written through the array, read through another view: the same bytes.
    second = np.frombuffer(got[0].base, np.uint16)
    got[0][0, 0] = 54321
    assert second[0] == 54321
    # The arrays outlive the stream; their slots go back when they are dropped.
    rx.close()
    assert np.array_equal(got[1], whole[1])
    del got, second
    assert rx.slots_lent == 0


def test_holding_more_arrays_than_spare_slots_neither_stalls_nor_loses_frames() -> None:
    """The caller keeps every array. Three are lent (10 slots, 7 kept by the stream);
    every later frame comes copied, and all of them arrive."""
    count = 40
    rx = receiver(10)
    sent = [frame(i) for i in range(count)]
    t, out = send(rx, sent)
    got = within(120, rx, lambda: [arr for arr, _ in rx])
    t.join()
    assert "error" not in out, out
    assert len(got) == count
    assert all(np.array_equal(a, b) for a, b in zip(got, sent)), "a frame differs"
    assert [lent(a) for a in got] == [True] * 3 + [False] * (count - 3)
    assert rx.slots_spare == rx.slots_lent == 3
    assert all(a.flags.owndata and a.flags.writeable for a in got[3:])
    del got
    assert rx.slots_lent == 0


def test_arrays_dropped_each_time_give_their_slots_back_to_a_small_pool() -> None:
    """One spare slot (8 slots): every frame is lent in it, which only works if each
    array dropped gives the slot back; a slot kept from the pool would stall it."""
    count = 200
    rx = receiver(8)
    t, out = send(rx, [frame(i) for i in range(count)])

    def receive() -> int:
        views = 0
        while True:
            got = rx.recv()
            if got is None:
                return views
            arr, meta = got
            assert np.array_equal(arr, frame(meta.frame_id)), f"frame {meta.frame_id}"
            views += lent(arr)
            del arr, got                              # the slot goes back now

    views = within(120, rx, receive)
    t.join()
    assert "error" not in out, out
    assert rx.slots_spare == 1
    assert views == count, f"{count - views} of {count} frames were copied"
    assert rx.slots_lent == 0


def test_arrays_dropped_on_another_thread_give_their_slots_back() -> None:
    """Each array is handed to a worker thread, which drops it; the receiver waits for
    that before the next frame, so every frame finds the spare slot free again."""
    count = 60
    rx = receiver(8)
    t, out = send(rx, [frame(i) for i in range(count)])
    handed: queue.Queue[Any] = queue.Queue(maxsize=1)
    seen: list[tuple[int, bool]] = []

    def worker() -> None:
        for _ in range(count):
            item = handed.get()
            try:
                arr, frame_id = item
                seen.append((frame_id, lent(arr)))
                assert np.array_equal(arr, frame(frame_id)), f"frame {frame_id}"
            finally:
                del item, arr                         # the last reference, on this thread
                handed.task_done()

    w, failed = run_sender(worker)

    def receive() -> None:
        for arr, meta in rx:
            handed.put((arr, meta.frame_id))
            del arr
            handed.join()                             # dropped by the worker

    within(120, rx, receive)
    w.join(30)
    t.join()
    assert "error" not in out, out
    assert "error" not in failed, failed
    assert seen == [(i, True) for i in range(count)]
    assert rx.slots_lent == 0
