"""SHA-256 of a file, the one digest the run's records, the manifest and the config hashes
name files by (read in blocks: a weight file or a part may be large)."""

from __future__ import annotations

import hashlib
from pathlib import Path


def file_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes (hex; read in 1 MiB blocks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def bytes_sha256(data: bytes) -> str:
    """SHA-256 of bytes read already (hex): ``file_sha256`` of the file that holds them."""
    return hashlib.sha256(data).hexdigest()
