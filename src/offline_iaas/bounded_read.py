"""Small text files a user names (a campaign config, a bench's ``results.json``) read with a
bound: a path to an endless file (``/dev/zero``, ``/dev/urandom``) or a huge one is refused
in one line, instead of read into memory until the process dies of a ``MemoryError``."""

from __future__ import annotations

from pathlib import Path

MAX_TEXT_BYTES = 64 * 2**20
"""More than any config or results file holds (they are kilobytes)."""


class TooLarge(ValueError):
    """A file larger than ``MAX_TEXT_BYTES``."""


def read_text(path: Path, encoding: str = "utf-8") -> str:
    """The text of ``path``, at most ``MAX_TEXT_BYTES`` of it.

    Raises
    ------
    TooLarge
        If it holds more (its message: ``larger than 64 MiB``).
    OSError, UnicodeDecodeError
        As ``Path.read_text`` would.
    """
    with open(path, "rb") as f:
        data = f.read(MAX_TEXT_BYTES + 1)
    if len(data) > MAX_TEXT_BYTES:
        raise TooLarge(f"larger than {MAX_TEXT_BYTES // 2**20} MiB")
    return data.decode(encoding)
