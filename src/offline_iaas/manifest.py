"""The model repository's manifest as a record (``records.py``'s framework: typed, versioned,
read and written only through it). ``repository/export.py`` writes it, ``repository/served.py``
checks a repository against a campaign with it; the server, make-dag, the reference, ``plan``
and the report read it (``read_manifest``). Its field names are the repository's since before
versions (version 1: the same fields).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from offline_iaas.bounded_read import NotRegularFile, TooLarge, read_text
from offline_iaas.errors import ModelError, RunError, cannot_read
from offline_iaas.records import Record, parse

MANIFEST_FILE = "manifest.json"
"""The manifest's name in the repository, beside the models' directories (not a model name)."""


@dataclass(frozen=True)
class ManifestShape:
    """The served model's input: channels, window and stride in samples."""

    channels: int
    kernel_samples: int
    stride_samples: int


@dataclass(frozen=True)
class ManifestNetwork:
    """A network graph of the repository."""

    path: str
    """Relative to the repository."""
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    batched: bool
    weights_sha256: dict[str, str]


class Manifest(Record):
    """``<repository>/manifest.json``: what ``export`` built the repository for (its field
    names are the repository's; ``repository/export.py`` writes it, ``repository/served.py``
    checks it)."""

    KIND: ClassVar[str] = "model repository manifest"

    ensemble: str
    """The model clients call (``model.name``)."""
    flavor: str
    served: str
    """``fused`` or ``ensemble``."""
    device: str | None = None
    """The fused model's device (``fused`` only)."""
    models: tuple[str, ...]
    """The models a server must have ready."""
    mode: str
    channels: tuple[str, ...]
    sample_rate: float
    shape: ManifestShape
    sequence_slots: int
    """Sequence slots per served model: at most this many clients per server."""
    outputs: tuple[str, ...]
    time_slides: tuple[int, ...]
    """``(slides, samples between them, first window a slide may reach)``; ``(0, 0)``
    without (a repository exported before slides were formed only inside the stretch has
    the first two only, and is refused)."""
    whitening: str | dict[str, float | str]
    """``fixed``, or the rolling whitening's parameters (with ``foreground_psd =
    "background"`` where a foreground is whitened with the background's PSD)."""
    versions: dict[str, int]
    networks: dict[str, ManifestNetwork]
    streamed: dict[str, str] = {}
    """Each network served streamed layer by layer (``model.streamed``): the directory of its
    graphs, relative to the repository; none without."""
    training: dict[str, tuple[float, float]] = {}
    """GPS ``[start, end]`` of each network's training data, where the weights say."""
    files: dict[str, str] = {}
    """SHA-256 of every file tritonserver reads for the served models (each one's
    ``config.pbtxt`` and its latest version's files; relative to the repository): a file
    missing or changed since the export is named before a server starts on it (none: a
    repository exported before this record)."""


def read_manifest(repo: Path) -> Manifest:
    """The repository's manifest; ModelError (as every problem with a repository) when it is
    missing, damaged or misses a field (export again), or cannot be read for the OS's reason
    (``errors.cannot_read``: exporting again gives no access)."""
    path = repo / MANIFEST_FILE
    try:
        text = read_text(path)  # a FIFO is not waited on, /dev/zero not read to the end
    except (FileNotFoundError, NotADirectoryError):
        raise ModelError(f"{repo}: not a model repository written by offline-iaas export "
                         f"(no {MANIFEST_FILE})") from None
    except OSError as err:
        raise ModelError(cannot_read(path, err)) from None
    except (NotRegularFile, TooLarge) as err:  # export reads it too: no "export again"
        raise ModelError(f"{path}: cannot read: {err}") from None
    except UnicodeDecodeError as err:
        raise ModelError(f"{path}: cannot read: {err}; export the repository again") from None
    try:
        return parse(Manifest, text, path)
    except RunError as err:
        raise ModelError(f"{err}; export the repository again") from None
