"""A client's part of the campaign: ``parts/<node>.h5`` and its sidecar ``parts/<node>.json``.

The HDF5 file holds, for each output and each piece of the client's segment, one dataset
``<output>/<piece>`` with a row per window the piece's stream produced (warm-up included; the
merge trims it). Rows are written as responses arrive, into a temporary file renamed when the
part is complete; the sidecar, written last, says ``"complete": true`` and carries the file's
SHA-256. A part that exists and is complete is never redone, and a half-written one is never
taken for complete.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from offline_iaas.workflow.plan import ClientSegment


def part_paths(run_dir: Path, node: str) -> tuple[Path, Path]:
    return run_dir / "parts" / f"{node}.h5", run_dir / "parts" / f"{node}.json"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_sidecar(run_dir: Path, node: str) -> dict[str, Any] | None:
    try:
        return json.loads(part_paths(run_dir, node)[1].read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def part_is_complete(run_dir: Path, node: str, config_hash: str) -> bool:
    sidecar = read_sidecar(run_dir, node)
    return bool(
        sidecar
        and sidecar.get("complete")
        and sidecar.get("config_hash") == config_hash
        and part_paths(run_dir, node)[0].exists()
    )


def peak_rss_mb() -> float:
    """This process's peak resident memory in MiB."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class PartWriter:
    """Writes a client's outputs piece by piece, then commits the part atomically."""

    def __init__(
        self, run_dir: Path, segment: ClientSegment, outputs: tuple[str, ...], config_hash: str
    ) -> None:
        self.run_dir = run_dir
        self.segment = segment
        self.outputs = outputs
        self.config_hash = config_hash
        self.h5_path, self.json_path = part_paths(run_dir, segment.node)
        self.h5_path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = self.h5_path.with_name(f".{self.h5_path.name}.{os.getpid()}.tmp")
        self.file = h5py.File(self.tmp, "w")
        for output in outputs:
            for number, piece in enumerate(segment.pieces):
                self.file.create_dataset(
                    f"{output}/{number}", shape=(piece.windows,), dtype=np.float32
                )
        self.file.attrs["config_hash"] = config_hash
        self.file.attrs["node"] = segment.node

    def write(self, output: str, piece: int, offset: int, values: np.ndarray) -> None:
        """Write the rows of windows ``offset, offset + 1, ...`` of a piece's stream."""
        self.file[f"{output}/{piece}"][offset : offset + len(values)] = values

    def commit(self, extra: dict[str, Any] | None = None) -> None:
        """Close, rename, then write the sidecar that marks the part complete."""
        self.file.close()
        os.replace(self.tmp, self.h5_path)
        sidecar = {
            **self.segment.to_dict(),
            "config_hash": self.config_hash,
            "outputs": list(self.outputs),
            "sha256": file_sha256(self.h5_path),
            **(extra or {}),
            "complete": True,
        }
        tmp_json = self.json_path.with_name(f".{self.json_path.name}.{os.getpid()}.tmp")
        tmp_json.write_text(json.dumps(sidecar, indent=2))
        os.replace(tmp_json, self.json_path)

    def discard(self) -> None:
        if self.file.id.valid:
            self.file.close()
        self.tmp.unlink(missing_ok=True)


def read_piece_rows(
    run_dir: Path, node: str, output: str, piece: int, start: int, stop: int
) -> np.ndarray:
    """Rows ``[start, stop)`` of one piece's dataset in a part."""
    with h5py.File(part_paths(run_dir, node)[0], "r") as f:
        return f[f"{output}/{piece}"][start:stop]
