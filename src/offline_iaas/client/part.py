"""A client's part of the campaign: ``parts/<node>.h5`` and its sidecar ``parts/<node>.json``.

The HDF5 file holds one dataset per ensemble output, one row per window the client's stream
produced (warm-up included; the merge trims it). Both files are written under temporary names
and renamed; the sidecar, written last, says ``"complete": true`` and carries the HDF5 file's
SHA-256, so a part that exists and is complete is never redone and a half-written one is never
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

from offline_iaas.errors import RunError
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


def write_part(
    run_dir: Path, segment: ClientSegment, outputs: dict[str, np.ndarray], config_hash: str
) -> None:
    """Write a client's outputs atomically, then its sidecar."""
    h5_path, json_path = part_paths(run_dir, segment.node)
    h5_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = h5_path.with_name(f".{h5_path.name}.{os.getpid()}.tmp")
    with h5py.File(tmp, "w") as f:
        for name, values in outputs.items():
            if len(values) != segment.windows:
                raise RunError(
                    f"{segment.node}: output {name} has {len(values)} windows, "
                    f"expected {segment.windows}"
                )
            f.create_dataset(name, data=values)
        f.attrs["config_hash"] = config_hash
        f.attrs["node"] = segment.node
    os.replace(tmp, h5_path)
    sidecar = {
        **segment.to_dict(),
        "config_hash": config_hash,
        "outputs": sorted(outputs),
        "sha256": file_sha256(h5_path),
        "complete": True,
    }
    tmp_json = json_path.with_name(f".{json_path.name}.{os.getpid()}.tmp")
    tmp_json.write_text(json.dumps(sidecar, indent=2))
    os.replace(tmp_json, json_path)


def read_part(run_dir: Path, node: str) -> dict[str, np.ndarray]:
    """Every output dataset of a part."""
    with h5py.File(part_paths(run_dir, node)[0], "r") as f:
        return {name: f[name][()] for name in f}
