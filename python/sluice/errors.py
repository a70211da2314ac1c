"""The exceptions of sluice, by the classes of errors the ``sluice`` CLI tells apart.

Every exception is a :class:`SluiceError` and carries:

* ``str(err)``: what went wrong, naming the value, with the advice for a caller;
* ``cli_message``: the line ``sluice`` prints on stderr for the same error
  (``sluice: error: ...``);
* ``recovery``: ``"retry"``, ``"resume"`` or ``"abort"`` (rclone's error classes: send
  again, start again (a copy with ``resume=True``), or change something first);
* ``code``: the wire error code's name (``"NotFound"``, ``"NoSpace"``...) or ``None``;
* ``kind``: the engine's error variant (``"Io"``, ``"Disconnected"``, ``"Handshake"``...),
  ``"Usage"`` for bad input the extension refused, ``""`` for errors raised in Python;
* ``exit_code``: the exit status ``sluice`` would end with (2: bad input, 1: failure).
"""

from __future__ import annotations

from typing import Any, Optional


class SluiceError(Exception):
    """Any error of sluice."""

    exit_code: int = 1
    cli_message: str = ""
    recovery: str = "abort"
    code: Optional[str] = None
    kind: str = ""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.cli_message = f"sluice: error: {message}"


class UsageError(SluiceError, ValueError):
    """Bad input: nothing was done (the CLI's exit code 2)."""

    exit_code = 2


class TransferError(SluiceError):
    """The work started and failed (the CLI's exit code 1)."""


class RetryError(TransferError):
    """A failure that sending again within a session gets past."""

    recovery = "retry"


class ResumeError(TransferError):
    """The session was lost (a connection, a full disk, a busy daemon): call a copy
    again with ``resume=True``, or open a stream again; what arrived is kept."""

    recovery = "resume"


class AbortError(TransferError):
    """A failure that repeats until something changes (a missing path, a refused
    secret, nobody listening)."""

    recovery = "abort"


class FilesFailedError(TransferError):
    """The copy ran but some files failed; ``summary`` holds the copy's summary with
    its ``failures``."""

    def __init__(self, message: str, summary: Optional[dict[str, Any]] = None) -> None:
        super().__init__(message)
        self.summary = summary or {}


__all__ = [
    "SluiceError",
    "UsageError",
    "TransferError",
    "RetryError",
    "ResumeError",
    "AbortError",
    "FilesFailedError",
]
