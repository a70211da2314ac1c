"""Type stubs of the extension module ``sluice._sluice`` (the Rust half of sluice).

Callers use :mod:`sluice`; these are its building blocks."""

import os
from typing import Any, Callable, Optional, Union

__version__: str

_Size = Union[int, str]
_Token = Union[str, bytes, None]
_Path = Union[str, os.PathLike[str]]

class RawSender:
    """The sending end of a stream of messages (see ``sluice.Sender``)."""

    @property
    def record_bytes(self) -> int: ...
    def __init__(
        self,
        url: str,
        *,
        streams: int = 2,
        compress: str = "none",
        policy: str = "auto",
        chunk_size: Optional[_Size] = None,
        buffer_mem: Optional[_Size] = None,
        token: _Token = None,
        token_file: Optional[_Path] = None,
        encrypt: str = "auto",
        ca: Optional[_Path] = None,
        known_hosts: Optional[_Path] = None,
        strict_host_key: bool = False,
    ) -> None: ...
    def send(
        self,
        kind: int,
        series: int,
        info: bytes,
        payload: Any = None,
        elem_bytes: int = 0,
        copy: bool = False,
    ) -> int:
        """Sends one message (kind 0 frame, 1 series start, 2 series end) with its
        JSON info and a C-contiguous byte buffer; returns the frame id. ``elem_bytes``
        (1, 2, 4 or 8; 0: none): the payload's element size, as which its records are
        shuffled before they are compressed (where the stream compresses and the
        receiver un-shuffles). Blocks, the GIL released, while the receiver is slower.
        Where ``zero_copy`` and not ``copy``, the payload is not copied: its buffer is
        held (pinned) until the receiver has acknowledged it."""
    def flush(self) -> None:
        """Waits until no payload is pinned, and releases the pinned buffers."""
    def close(self) -> str:
        """Ends the stream, waits for the receiver: the summary as JSON. Every pinned
        buffer is released."""
    def abort(self) -> None:
        """Abandons the stream without its end."""
    @property
    def zero_copy(self) -> bool:
        """Whether payloads go pinned, without a copy (the stream does not compress)."""
    @property
    def pinned(self) -> int:
        """Payloads pinned now, not yet acknowledged."""

class RawReceiver:
    """The receiving end of a stream of messages (see ``sluice.Receiver``)."""

    address: str
    fingerprint: str
    def __init__(
        self,
        listen: str = "127.0.0.1:0",
        *,
        streams: int = 2,
        policy: str = "auto",
        chunk_size: Optional[_Size] = None,
        buffer_mem: Optional[_Size] = None,
        token: _Token = None,
        token_file: Optional[_Path] = None,
        insecure_no_auth: bool = False,
        encrypt: str = "auto",
        cert: Optional[_Path] = None,
        key: Optional[_Path] = None,
        state_dir: Optional[_Path] = None,
    ) -> None: ...
    def next_header(self) -> Optional[tuple[int, int, int, bytes, int]]:
        """``(kind, frame_id, series, info, payload_bytes)`` of the next message, or
        ``None`` at the end; a payload left unread is skipped."""
    def read_payload(self, out: Any) -> None:
        """Copies the pending payload into a writable C-contiguous buffer of its size."""
    def lend_payload(self) -> Optional[SlotView]:
        """The pending payload left in its buffer slot and lent, where it lies whole in
        the message's first record, 64-byte aligned, not empty, and the stream can
        spare the slot; else ``None``, and the payload stays for ``read_payload``."""
    @property
    def slots_lent(self) -> int:
        """Slots held now by ``SlotView`` objects (and the arrays over them)."""
    @property
    def slots_spare(self) -> int:
        """Slots that may be lent at once: those beyond three per connection and one
        (0 until the sender is accepted)."""
    def summary(self) -> Optional[str]:
        """The totals as JSON once the stream has ended."""
    def close(self) -> None:
        """Stops receiving; a stream not yet ended is abandoned."""

class SlotView:
    """A received payload in the receiver's buffer slot, lent: it exports the payload
    as a writable one-dimensional byte buffer (``np.ndarray(shape, dtype,
    buffer=view)`` makes the array), and gives the slot back to the receiver's pool
    when it and every export and array over it are dropped, on any thread."""

    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __release_buffer__(self, buffer: memoryview, /) -> None: ...
    def __repr__(self) -> str: ...

def copy(
    sources: list[str],
    dst: str,
    *,
    recursive: bool = False,
    streams: int = 2,
    io_threads: int = 2,
    compress: str = "none",
    verify: bool = False,
    resume: bool = False,
    no_clobber: bool = False,
    update: bool = False,
    fsync: bool = False,
    buffered: bool = False,
    policy: str = "auto",
    chunk_size: Optional[_Size] = None,
    buffer_mem: Optional[_Size] = None,
    token: _Token = None,
    token_file: Optional[_Path] = None,
    encrypt: str = "auto",
    ca: Optional[_Path] = None,
    known_hosts: Optional[_Path] = None,
    strict_host_key: bool = False,
    bwlimit: Optional[str] = None,
    progress: Optional[Callable[[dict[str, int]], Any]] = None,
    progress_interval: float = 0.2,
) -> str:
    """``sluice cp`` as a function: the summary as JSON."""
