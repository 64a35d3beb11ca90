"""Files a user names (a campaign config, a frame cache, an injection list, a repository's
manifest, a run directory's records, a bench's ``results.json``) read safely: a path that is
not a regular file (a FIFO, whose ``open`` waits for a writer that never comes; ``/dev/zero``
or ``/dev/urandom``, which never end; a directory) is refused before it is opened, and a
regular file is read with a bound, so that a huge one is refused in one line instead of read
into memory until the process dies of a ``MemoryError``.

Readers that open a file by its path themselves (h5py, igwn-ligolw, gwpy) call
``refuse_unless_regular`` first; those that read the whole file call ``read_bytes`` or
``read_text``. Each caller turns ``NotRegularFile`` and ``TooLarge`` into its own error type
with a line naming the file; ``read_text_or`` does that for the files the project writes and
reads back itself (the run's token, a server's epoch and refusal, the PRE script's deferral,
the job ads' stand-in, ``bench.regression --check``'s record).

The logs the project appends to (tritonserver's, serve's lines in it, a server's monitor CSV,
run-local's nodes' output and error) are opened by ``open_to_append``: a FIFO there with a
reader (an admin streaming the log) is written to (a reader that leaves later costs the
lines sent after it, not their writer: tritonserver runs with SIGPIPE ignored, the monitor
stops writing), one with none (whose ``open`` would wait for ever, SIGTERM retried through) is
refused at once, a character device (``/dev/null``, as
a submit file's ``output`` often is) is written to, and a directory, a block device or a
socket is refused before it is opened."""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

MAX_TEXT_BYTES = 64 * 2**20
"""More than any config, listing or record file holds (they are kilobytes to megabytes); the
files that grow with a campaign (a frame cache: about 100 MB for a year of 64 s frames of two
detectors; a monitor CSV: about 9 MB a day of four models, from their lines' lengths) are
read whole."""

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


class TooLarge(ValueError):
    """A file larger than ``MAX_TEXT_BYTES``."""


class NotRegularFile(ValueError):
    """A path (symbolic links followed) that names something other than a regular file: a
    FIFO, a device, a socket or a directory. Its message says which, e.g.
    ``a FIFO (named pipe), not a regular file``; ``kind`` is the first part."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"{kind}, not a regular file")
        self.kind = kind


class NoReader(NotRegularFile):
    """A FIFO to be written to that no process holds open for reading."""

    def __init__(self) -> None:
        ValueError.__init__(self, "a FIFO (named pipe) with no reader (start its reader "
                            "first, or remove it)")
        self.kind = "a FIFO (named pipe)"


def _refuse_mode(mode: int) -> None:
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "a special file")
        raise NotRegularFile(kind)


def refuse_unless_regular(path: Path | str) -> None:
    """Return if ``path`` (links followed) names a regular file, before anything opens it.

    Raises
    ------
    NotRegularFile
        If it names a FIFO, a device, a socket or a directory.
    OSError
        As ``os.stat`` would (``FileNotFoundError`` where nothing is there, a link that leads
        nowhere included).
    """
    _refuse_mode(os.stat(path).st_mode)


def read_bytes(path: Path | str, limit_bytes: int | None = MAX_TEXT_BYTES) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit_bytes`` of them (None: all of
    it, for a file that grows with the campaign: a year's frame cache, a server's monitor CSV).

    Raises
    ------
    NotRegularFile
        As ``refuse_unless_regular`` (checked again on the open file: a FIFO put in its place
        in between is not waited on).
    TooLarge
        If it holds more than ``limit_bytes`` (its message: ``larger than 64 MiB``).
    OSError
        As ``open`` would.
    """
    refuse_unless_regular(path)
    with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as f:
        _refuse_mode(os.fstat(f.fileno()).st_mode)
        data = f.read() if limit_bytes is None else f.read(limit_bytes + 1)
    if limit_bytes is not None and len(data) > limit_bytes:
        raise TooLarge(f"larger than {limit_bytes // 2**20} MiB")
    return data


def read_text(path: Path | str, encoding: str = "utf-8",
              limit_bytes: int | None = MAX_TEXT_BYTES) -> str:
    """``read_bytes`` of ``path`` decoded (``UnicodeDecodeError`` as ``Path.read_text``)."""
    return read_bytes(path, limit_bytes).decode(encoding)


def read_text_or(path: Path | str, error: Callable[[str], Exception],
                 limit_bytes: int | None = MAX_TEXT_BYTES) -> str:
    """``read_text`` of ``path`` for a reader of a file the project wrote itself (a run's
    token, a server's epoch, a recorded benchmark): one that is not a regular file (a FIFO put
    there: not waited on), too large or not UTF-8 is raised as ``error("<path>: cannot read:
    <why>")``, the reader's own error type; an ``OSError`` (``FileNotFoundError`` too) as
    ``open``'s."""
    try:
        return read_text(path, limit_bytes=limit_bytes)
    except (NotRegularFile, TooLarge, UnicodeDecodeError) as err:
        raise error(f"{path}: cannot read: {err}") from None


def open_to_append(path: Path | str) -> BinaryIO:
    """``path`` opened to append bytes to, created if absent: a regular file, a character
    device (``/dev/null``), or a FIFO that a reader holds open (opened without waiting, then
    written to blocking as a file is).

    Raises
    ------
    NoReader
        If it names a FIFO that no process reads (``open`` would wait for one for ever).
    NotRegularFile
        If it names a directory, a block device or a socket (refused before it is opened).
    OSError
        As ``os.open`` would.
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = stat.S_IFREG
    if not _appendable(mode):
        _refuse_mode(mode)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(path, flags | os.O_NONBLOCK, 0o666)
    except OSError as err:
        if err.errno == errno.ENXIO:
            raise NoReader() from None
        raise
    try:
        mode = os.fstat(fd).st_mode  # what was opened: a FIFO put there since is not waited on
        if not _appendable(mode):
            _refuse_mode(mode)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return open(fd, "ab")


def open_to_append_or(path: Path | str, error: Callable[[str], Exception]) -> BinaryIO:
    """``open_to_append`` of ``path`` for a writer of a log: one it refuses (a FIFO with no
    reader, a directory, a block device, a socket) is raised as ``error("<path> is <why>")``,
    e.g. ``error("/run/x.log is a directory, not a regular file")``, the writer's own error
    type; an ``OSError`` as ``os.open``'s."""
    try:
        return open_to_append(path)
    except NotRegularFile as err:
        raise error(f"{path} is {err}") from None


def _appendable(mode: int) -> bool:
    """Whether a file of ``mode`` is a log's to append to: a FIFO or a character device
    (``/dev/null``) besides a regular file (``_refuse_mode`` passes it)."""
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)
