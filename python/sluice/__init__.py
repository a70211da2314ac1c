"""sluice from Python: stream numpy frames to a consumer without dropping any, and copy
files and trees, through sluice's NUMA-aware channels.

Streaming (a detector's frames to a reconstruction)::

    import numpy as np, sluice

    with sluice.Receiver(listen="0.0.0.0:7879", token_file="secret") as rx:
        ...                                   # on the consumer: rx.address
        for frame, meta in rx:                 # in order, dtype and shape restored
            reconstruct(frame, meta["angle"])

    with sluice.Sender("sluice://consumer:7879", streams=4, compress="lz4",
                       token_file="secret") as tx:
        tx.begin_series({"scan": 17})
        for angle, frame in detector:          # any buffer: numpy, bytes, memoryview
            tx.send(frame, meta={"angle": angle})   # blocks while the consumer is slower
        tx.end_series()

Without compression ``send`` does not copy the array: it is sent from its own memory
and held until the receiver acknowledges it, so it must not be written meanwhile
(``tx.flush()`` waits for that; ``tx.send(frame, copy=True)`` copies, for a caller that
refills one array). See :class:`Sender`.

Nothing is dropped: a consumer that falls behind fills the bounded queues, TCP's window
closes and ``send`` waits (with the GIL released). Every record is checksummed, sent
again if damaged, and acknowledged; ``close`` returns once the receiver has every frame.

A received frame is not copied where that can be avoided: the array is a writable view
of the receiver's buffer slot, which goes back to the receiver when the array is
dropped (see :class:`Receiver`; ``copy()`` arrays to keep many of them).

With ``compress``, typed frames are shuffled by their itemsize before they are
compressed (``shuffle="auto"``: bit-planes for LZ4; for zstd byte- or bit-planes,
whichever sends fewer bytes), so that a ``uint16`` detector frame with Poisson noise,
which LZ4 alone cannot shrink, travels in about half its bytes.

Copying (``sluice cp`` as a function)::

    summary = sluice.copy("data/", "sluice://dtn:7878/incoming/", recursive=True,
                          progress=lambda p: print(p["bytes"], "/", p["total_bytes"]))

Errors are :mod:`sluice.errors` exceptions carrying the CLI's error class and message.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, Iterator, Optional, Sequence, Tuple, Union

import numpy as np

from . import errors
from ._sluice import RawReceiver, RawSender, __version__
from ._sluice import copy as _copy
from .errors import (
    AbortError,
    FilesFailedError,
    ResumeError,
    RetryError,
    SluiceError,
    TransferError,
    UsageError,
)

# Message kinds on the wire (python/src/frame.rs).
_FRAME, _SERIES_START, _SERIES_END = 0, 1, 2
_EVENTS = {_FRAME: "frame", _SERIES_START: "series_start", _SERIES_END: "series_end"}

Size = Union[int, str]
PathLike = Union[str, "os.PathLike[str]"]


class Meta(dict):  # type: ignore[type-arg]
    """The ``meta`` dict a frame was sent with, plus where it stands in the stream.

    Attributes:
        frame_id: the frame's number in the stream (0, 1, 2, ...).
        series: the series it belongs to (1, 2, ...), or ``None`` outside one.
        event: ``"frame"``, or ``"series_start"`` / ``"series_end"`` for the series
            markers a ``Receiver(series_events=True)`` yields (with ``None`` as array).
    """

    frame_id: int
    series: Optional[int]
    event: str


def _as_bytes_view(obj: Any) -> Tuple[memoryview, np.dtype, Tuple[int, ...]]:
    """A C-contiguous byte view of ``obj`` (no copy where it is contiguous already),
    its dtype and shape."""
    if isinstance(obj, np.ndarray):
        arr = obj if obj.flags.c_contiguous else np.ascontiguousarray(obj)
    else:
        view = memoryview(obj)
        arr = np.frombuffer(view, dtype=np.dtype(view.format)).reshape(view.shape) \
            if view.c_contiguous else np.ascontiguousarray(view)
    if arr.dtype.hasobject:
        raise UsageError("arrays of Python objects cannot be sent: expected numbers")
    flat = arr.reshape(-1).view(np.uint8) if arr.size else np.empty(0, np.uint8)
    return memoryview(flat), arr.dtype, tuple(int(n) for n in arr.shape)


# Element sizes the shuffles take (python/src/sender.rs, crates/wire/src/shuffle.rs).
_SHUFFLE_SIZES = (1, 2, 4, 8)
# Kinds of numpy dtypes whose elements "auto" shuffles: booleans, integers, floats,
# complex numbers, dates and durations.
_SHUFFLE_KINDS = "biufcmM"


def _shuffle_arg(shuffle: Union[str, int], compress: str) -> Union[str, int]:
    """``Sender``'s ``shuffle``, checked: ``"auto"``, ``"none"`` or an element size;
    ``"none"`` where nothing is compressed (the shuffle only helps a codec)."""
    if isinstance(shuffle, bool) or not isinstance(shuffle, (str, int)):
        raise UsageError(f"shuffle={shuffle!r}: expected 'auto', 'none' or 1, 2, 4, 8")
    if isinstance(shuffle, int) and shuffle not in _SHUFFLE_SIZES:
        raise UsageError(f"shuffle={shuffle}: an element size is 1, 2, 4 or 8 bytes")
    if isinstance(shuffle, str) and shuffle not in ("auto", "none"):
        raise UsageError(f"shuffle={shuffle!r}: expected 'auto', 'none' or 1, 2, 4, 8")
    return "none" if compress == "none" else shuffle


def _elem_bytes(shuffle: Union[str, int], dtype: np.dtype, typed: bool) -> int:
    """The element size to shuffle a payload of ``dtype`` as (0: none): the forced
    size, or for ``"auto"`` the itemsize of a numeric array (``typed``: not plain bytes,
    whose bits have no planes to find) when it is 1, 2, 4 or 8."""
    if isinstance(shuffle, int):
        return shuffle
    if shuffle == "auto" and typed and dtype.kind in _SHUFFLE_KINDS \
            and dtype.itemsize in _SHUFFLE_SIZES:
        return int(dtype.itemsize)
    return 0


def _is_typed(obj: Any) -> bool:
    """Whether ``obj`` says what its elements are: a numpy array, or a buffer of a
    format other than plain bytes (``bytes``, ``bytearray``, ``memoryview`` of ``B``)."""
    if isinstance(obj, np.ndarray):
        return True
    return memoryview(obj).format not in ("B", "b", "c")


class Sender:
    """The sending end of a stream of arrays to a :class:`Receiver`.

    Args:
        url: the receiver, ``sluice://HOST:PORT`` (or ``HOST:PORT``).
        streams: data connections (each with a net-send thread placed by the plan).
        compress: ``"none"``, ``"lz4"``, ``"zstd"``, ``"zstd:LEVEL"`` or ``"auto"``, per
            record, on the net-send threads.
        shuffle: shuffle each frame's records before they are compressed, so that
            typed data compresses (a detector's ``uint16`` counts with Poisson noise do
            not shrink under LZ4 as they are; bit-shuffled, LZ4 sends them in about half
            the bytes). LZ4 gets the bit-shuffle; zstd the byte-shuffle or the
            bit-shuffle, whichever sent fewer bytes on a sample of a recent frame. ``"auto"`` (the default): by the array's itemsize, where
            ``compress`` is not ``"none"`` and the array is numeric with an itemsize of
            1, 2, 4 or 8 bytes (``bytes`` and byte buffers are sent as they are);
            ``"none"``: never; 1, 2, 4 or 8: as elements of that many bytes, whatever
            the array. Records go compressed but unshuffled to a receiver that cannot
            un-shuffle, and each record that does not shrink goes as it is.
        policy: the placement policy (``auto``, ``os``, ``bind``, ``smts``, ``nmts``,
            ``mts``), as ``sluice plan --policy``.
        chunk_size: bytes per record and buffer slot (default 16 MiB); a frame larger
            than a record spans several.
        buffer_mem: buffer memory of the plan, ``"auto"`` or a size.
        token, token_file: the shared secret the receiver asks for.
        encrypt: ``"auto"`` (TLS 1.3 unless the receiver is on loopback), ``"always"``,
            ``"never"``; ``ca``, ``known_hosts``, ``strict_host_key``: whom to trust.

    Arrays without a copy: where the stream does not compress (``compress="none"``,
    or ``"auto"`` toward this very host; see :attr:`zero_copy`), ``send`` does not copy
    the array. Its records point into the array's own memory, from which they are sent
    (and sent again if one arrives damaged), and the sender holds a reference to the
    array and its exported buffer until the receiver has acknowledged all of it. **Until
    then the caller must not write into the array** (nor resize the object behind it):
    the receiver would get the new bytes, or a record that fails its checksum every
    time it is sent, and the stream would fail. Immutable objects (``bytes``) and a
    fresh array per frame need no care. To reuse one array, call :meth:`flush` (it
    returns once every array sent is released) before writing into it again, or send
    with ``copy=True``. A non-contiguous array is made contiguous first, and that copy
    is what is held.

    Otherwise (a compressing stream, or ``copy=True``) each ``send`` copies the array
    once, with the GIL released, into a NUMA-local slot that stays until the receiver
    acknowledges it, and the array is the caller's again when ``send`` returns.

    Either way ``send`` blocks while the receiver is slower, so nothing is ever
    dropped, and what is held is bounded: every record in flight holds one of the
    sender's buffer slots (``buffer_mem``), so the arrays held at once are those of at
    most that many records. Arrays acknowledged are released at the next ``send``,
    :meth:`flush`, :meth:`close` or :meth:`abort` (on the caller's thread: the sender's
    own threads never take the GIL). Use it as a context manager: leaving the block
    normally closes the stream (waiting for the receiver), leaving it by an exception
    abandons it (a receiver that got any of it raises; one that got nothing yet sees
    an empty stream end).
    """

    def __init__(self, url: str, *, streams: int = 2, compress: str = "none",
                 shuffle: Union[str, int] = "auto",
                 policy: str = "auto", chunk_size: Optional[Size] = None,
                 buffer_mem: Optional[Size] = None, token: Union[str, bytes, None] = None,
                 token_file: Optional[PathLike] = None, encrypt: str = "auto",
                 ca: Optional[PathLike] = None, known_hosts: Optional[PathLike] = None,
                 strict_host_key: bool = False) -> None:
        self._shuffle = _shuffle_arg(shuffle, compress)
        self._raw = RawSender(
            url, streams=streams, compress=compress, policy=policy, chunk_size=chunk_size,
            buffer_mem=buffer_mem, token=token, token_file=_path(token_file),
            encrypt=encrypt, ca=_path(ca), known_hosts=_path(known_hosts),
            strict_host_key=strict_host_key)
        self._series = 0
        self._in_series: Optional[int] = None
        self._aborted = False
        self.summary: Optional[dict[str, Any]] = None

    def send(self, array: Any, meta: Optional[dict[str, Any]] = None, *,
             copy: bool = False) -> int:
        """Sends one array (any object with the buffer protocol: numpy arrays, bytes,
        memoryviews) with ``meta`` (a JSON-serialisable dict); returns its frame id.
        Blocks while the receiver is slower.

        Where :attr:`zero_copy` and not ``copy``, the array is sent from its own
        memory and held until the receiver has acknowledged it: do not write into it
        until then (:meth:`flush` waits for that). ``copy=True`` copies it into the
        sender's buffers instead, so that it may be written again as soon as ``send``
        returns."""
        view, dtype, shape = _as_bytes_view(array)
        info = self._info({"dtype": dtype.str, "shape": shape, "meta": meta or {}})
        elem = _elem_bytes(self._shuffle, dtype, _is_typed(array))
        return self._raw.send(_FRAME, self._in_series or 0, info, view, elem, copy)

    def flush(self) -> None:
        """Waits until the receiver has acknowledged every array sent without a copy,
        and releases them: the caller may write into them again. Arrays copied need no
        flush."""
        self._raw.flush()

    @property
    def zero_copy(self) -> bool:
        """Whether ``send`` sends arrays from their own memory, without a copy (the
        stream does not compress), unless told ``copy=True``."""
        return self._raw.zero_copy

    @property
    def arrays_held(self) -> int:
        """Arrays sent without a copy that the receiver has not acknowledged yet."""
        return self._raw.pinned

    def begin_series(self, meta: Optional[dict[str, Any]] = None) -> int:
        """Starts a series of frames (a scan); returns its number (1, 2, ...). The
        receiver sees each frame's ``meta.series``."""
        if self._in_series is not None:
            raise UsageError(f"series {self._in_series} has not ended")
        self._series += 1
        self._in_series = self._series
        self._raw.send(_SERIES_START, self._series, self._info({"meta": meta or {}}))
        return self._series

    def end_series(self, meta: Optional[dict[str, Any]] = None) -> None:
        """Ends the series begun last."""
        if self._in_series is None:
            raise UsageError("no series has begun")
        self._raw.send(_SERIES_END, self._in_series, self._info({"meta": meta or {}}))
        self._in_series = None

    def close(self) -> dict[str, Any]:
        """Ends the stream and waits until the receiver has every frame; returns the
        summary (``bytes``, ``wire_bytes``, ``records``, ``records_resent``,
        ``seconds``). Every array held is released."""
        if self.summary is None:
            self.summary = json.loads(self._raw.close())
        return self.summary

    def abort(self) -> None:
        """Abandons the stream: a receiver that got any of it raises rather than see it
        end (one that got nothing yet sees an empty stream end). Arrays
        still held are released as the receiver acknowledges them or the connections
        close (:meth:`flush` waits for that)."""
        self._aborted = True
        self._raw.abort()

    def __enter__(self) -> "Sender":
        return self

    def __exit__(self, kind: Any, value: Any, tb: Any) -> None:
        if kind is None and not self._aborted:
            self.close()
        else:
            self.abort()

    @staticmethod
    def _info(info: dict[str, Any]) -> bytes:
        try:
            return json.dumps(info, separators=(",", ":")).encode()
        except (TypeError, ValueError) as e:
            raise UsageError(f"meta is not JSON-serialisable: {e}") from None


class Receiver:
    """The receiving end: iterate over it for ``(array, meta)`` pairs, in order, with
    dtype and shape restored (or call :meth:`recv_into` with a preallocated array).

    Args:
        listen: ``ADDR:PORT`` to listen on (port 0 picks one: see :attr:`address`).
        streams, policy, chunk_size, buffer_mem: the plan of this end, as for
            :class:`Sender`.
        token, token_file: the secret the sender must prove it knows (required off
            loopback unless ``insecure_no_auth``).
        encrypt, cert, key, state_dir: TLS, as ``sluice stream recv``.
        series_events: also yield ``(None, meta)`` for series starts and ends
            (``meta.event``).

    The sender is accepted at the first read. A frame is acknowledged once it is
    in this process; the stream's end is confirmed to the sender when iteration ends.

    Arrays without a copy: a frame that travelled whole in one record (one that fits
    the sender's ``chunk_size``, 16 MiB by default, with its header) is yielded as a
    writable numpy array over the receiver's buffer slot that holds it, not copied out
    (``arr.base`` is a ``sluice._sluice.SlotView``). The slot is the array's until the
    array and every view of it are dropped, on any thread; then it goes back to this
    receiver's pool. A receiver lends only its spare slots (:attr:`slots_spare`: in each
    buffer pool, those beyond three per connection on it and one, which the stream needs
    to keep going); while
    all of them are held, and for frames spanning records, frames come in fresh
    arrays, copied. So holding arrays never stalls the stream, but each one held keeps
    a whole slot from the receiver: ``copy()`` the arrays to keep many of them (or use
    :meth:`recv_into`, which always copies into the caller's buffer).
    """

    def __init__(self, listen: str = "127.0.0.1:0", *, streams: int = 2,
                 policy: str = "auto", chunk_size: Optional[Size] = None,
                 buffer_mem: Optional[Size] = None, token: Union[str, bytes, None] = None,
                 token_file: Optional[PathLike] = None, insecure_no_auth: bool = False,
                 encrypt: str = "auto", cert: Optional[PathLike] = None,
                 key: Optional[PathLike] = None, state_dir: Optional[PathLike] = None,
                 series_events: bool = False) -> None:
        self._raw = RawReceiver(
            listen, streams=streams, policy=policy, chunk_size=chunk_size,
            buffer_mem=buffer_mem, token=token, token_file=_path(token_file),
            insecure_no_auth=insecure_no_auth, encrypt=encrypt, cert=_path(cert),
            key=_path(key), state_dir=_path(state_dir))
        self._series_events = series_events
        self._held: Optional[Tuple[int, dict[str, Any], int, Meta]] = None

    @property
    def address(self) -> str:
        """``HOST:PORT`` this receiver listens on."""
        return self._raw.address

    @property
    def url(self) -> str:
        """``sluice://HOST:PORT``, for a :class:`Sender`."""
        return "sluice://" + self._raw.address

    @property
    def fingerprint(self) -> str:
        """The SHA-256 fingerprint of this receiver's TLS certificate."""
        return self._raw.fingerprint

    @property
    def summary(self) -> Optional[dict[str, Any]]:
        """The stream's totals once it has ended, else ``None``."""
        s = self._raw.summary()
        return None if s is None else json.loads(s)

    @property
    def slots_lent(self) -> int:
        """Buffer slots held now by arrays this receiver yielded without a copy."""
        return self._raw.slots_lent

    @property
    def slots_spare(self) -> int:
        """Buffer slots that arrays may hold at once (0 until the sender is accepted)."""
        return self._raw.slots_spare

    def __iter__(self) -> Iterator[Tuple[Optional[np.ndarray], Meta]]:
        return self

    def __next__(self) -> Tuple[Optional[np.ndarray], Meta]:
        got = self.recv()
        if got is None:
            raise StopIteration
        return got

    def recv(self) -> Optional[Tuple[Optional[np.ndarray], Meta]]:
        """The next frame as ``(array, meta)``, or ``None`` at the end. The array is
        writable and new to the caller: a view of the receiver's slot where the frame
        lies whole in one and a slot can be spared, else a fresh copy (see
        :class:`Receiver`)."""
        while True:
            head = self._next()
            if head is None:
                return None
            kind, info, nbytes, meta = head
            if kind != _FRAME:
                if self._series_events:
                    return None, meta
                continue
            return self._payload(info, nbytes, meta.frame_id), meta

    def recv_into(self, out: Any) -> Optional[Meta]:
        """Receives the next frame into ``out`` (a writable C-contiguous buffer of
        exactly the frame's size, e.g. a preallocated numpy array); returns its meta,
        or ``None`` at the end of the stream. Series markers are skipped (or, with
        ``series_events``, returned without touching ``out``). A buffer of the wrong
        size raises :class:`UsageError` and leaves the frame to the next call."""
        while True:
            head = self._next()
            if head is None:
                return None
            kind, _, _, meta = head
            if kind == _FRAME:
                try:
                    self._raw.read_payload(_writable_view(out))
                except UsageError:
                    self._held = head                 # the frame waits for a right buffer
                    raise
                return meta
            if self._series_events:
                return meta

    def _payload(self, info: dict[str, Any], nbytes: int, frame_id: int) -> np.ndarray:
        """The pending frame's array: its slot lent where it can be, else a copy."""
        dtype, shape = _layout(info, nbytes, frame_id)
        lent = self._raw.lend_payload()
        if lent is not None:
            return np.ndarray(shape, dtype=dtype, buffer=lent)    # arr.base is `lent`
        arr = np.empty(shape, dtype=dtype)
        self._raw.read_payload(_writable_view(arr))
        return arr

    def _next(self) -> Optional[Tuple[int, dict[str, Any], int, Meta]]:
        held, self._held = self._held, None
        if held is not None:
            return held
        got = self._raw.next_header()
        if got is None:
            return None
        kind, frame_id, series, info_bytes, nbytes = got
        info = json.loads(info_bytes)
        meta = Meta(info.get("meta") or {})
        meta.frame_id = frame_id
        meta.series = series or None
        meta.event = _EVENTS.get(kind, "frame")
        return kind, info, nbytes, meta

    def close(self) -> None:
        """Stops receiving; a stream not yet ended is abandoned."""
        self._raw.close()

    def __enter__(self) -> "Receiver":
        return self

    def __exit__(self, kind: Any, value: Any, tb: Any) -> None:
        self.close()


def _layout(info: dict[str, Any], nbytes: int,
            frame_id: int) -> Tuple[np.dtype, Tuple[int, ...]]:
    """The dtype and shape of a frame of `nbytes` described by the sender's `info`,
    checked before anything is allocated or viewed: a plain dtype (no Python objects,
    whose bytes would be pointers) and a shape whose size is exactly the payload's."""
    what = f"frame {frame_id}: dtype {info.get('dtype')!r}, shape {info.get('shape')!r}"
    try:
        dtype = np.dtype(info["dtype"])
        shape = tuple(int(n) for n in info["shape"])
    except (KeyError, TypeError, ValueError):
        raise TransferError(f"{what}: not an array description") from None
    if dtype.hasobject or any(n < 0 for n in shape):
        raise TransferError(f"{what}: not an array of plain values")
    size = dtype.itemsize
    for n in shape:
        size *= n
    if size != nbytes:
        raise TransferError(f"{what}: {size} bytes, but the frame carries {nbytes}")
    return dtype, shape


def _writable_view(out: Any) -> memoryview:
    view = memoryview(out)
    if view.readonly:
        raise UsageError("the output buffer is read-only")
    if not view.c_contiguous:
        raise UsageError("the output buffer is not C-contiguous")
    if view.nbytes == 0:
        return memoryview(bytearray())
    return view.cast("B") if view.ndim != 1 or view.format != "B" else view


def _path(p: Optional[PathLike]) -> Optional[str]:
    return None if p is None else os.fspath(p)


def copy(src: Union[PathLike, Sequence[PathLike]], dst: PathLike, *,
         recursive: bool = False, streams: int = 2, io_threads: int = 2,
         compress: str = "none", verify: bool = False, resume: bool = False,
         no_clobber: bool = False, update: bool = False, fsync: bool = False,
         buffered: bool = False, policy: str = "auto", chunk_size: Optional[Size] = None,
         buffer_mem: Optional[Size] = None, token: Union[str, bytes, None] = None,
         token_file: Optional[PathLike] = None, encrypt: str = "auto",
         ca: Optional[PathLike] = None, known_hosts: Optional[PathLike] = None,
         strict_host_key: bool = False, bwlimit: Optional[str] = None,
         progress: Optional[Callable[[dict[str, int]], Any]] = None,
         progress_interval: float = 0.2, check: bool = True) -> dict[str, Any]:
    """Copies files and trees to or from a ``sluice serve`` daemon, as ``sluice cp``
    does with the same options (``recursive`` is ``-r``, ``buffered`` is
    ``--buffered``, ``bwlimit="500M"`` is ``--bwlimit 500M``...), except that
    ``streams`` is 2 unless given (``sluice cp`` opens 8 on a path of 20 ms or more).
    Either side is local or ``sluice://HOST:PORT/PATH``; both remote is a third-party
    copy between the two daemons.

    ``progress`` is called every ``progress_interval`` seconds (and once at the end)
    with ``{"bytes", "total_bytes", "files_done", "files"}``; the copy runs on its own
    threads meanwhile, the GIL released.

    Returns the summary ``sluice cp --json`` prints, as a dict. Raises a
    :mod:`sluice.errors` exception: :class:`UsageError` for bad input,
    :class:`ResumeError` / :class:`AbortError` / :class:`RetryError` for a failure by
    its class, and (with ``check``) :class:`FilesFailedError` when files failed.
    """
    sources = [src] if isinstance(src, (str, os.PathLike)) else list(src)
    summary = json.loads(_copy(
        [os.fspath(s) for s in sources], os.fspath(dst), recursive=recursive,
        streams=streams, io_threads=io_threads, compress=compress, verify=verify,
        resume=resume, no_clobber=no_clobber, update=update, fsync=fsync,
        buffered=buffered, policy=policy, chunk_size=chunk_size, buffer_mem=buffer_mem,
        token=token, token_file=_path(token_file), encrypt=encrypt, ca=_path(ca),
        known_hosts=_path(known_hosts), strict_host_key=strict_host_key,
        bwlimit=bwlimit, progress=progress, progress_interval=progress_interval))
    failed = summary.get("files_failed", 0)
    if check and failed:
        first = (summary.get("failures") or [{}])[0]
        err = FilesFailedError(
            f"{failed} file(s) failed, first {first.get('path')}: {first.get('error')}",
            summary)
        raise err
    return summary


__all__ = [
    "Sender", "Receiver", "Meta", "copy", "errors", "SluiceError", "UsageError",
    "TransferError", "RetryError", "ResumeError", "AbortError", "FilesFailedError",
    "__version__",
]
