"""What made a product (``campaign_provenance``), written into the campaign file's
``provenance`` attribute and into every cleaned GWF file's frame history (after
``PROVENANCE_MARK``), and read back from either (``read_provenance``, ``offline-iaas inspect``).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from offline_iaas import __version__
from offline_iaas.config import CampaignConfig
from offline_iaas.errors import DataError
from offline_iaas.records import BadFile, ServedModel

PROVENANCE_MARK = "offline-iaas provenance: "
"""The comment of the frame history entry starts with this, the JSON follows."""

GWF_MAGIC = b"IGWD\0"
"""The first bytes of every frame file (the frame format's file header)."""


def campaign_provenance(config: CampaignConfig, model: ServedModel | None,
                        bad_files: list[BadFile] | None = None) -> dict[str, Any]:
    """What made a product: software, the stream and merge hashes, the served model
    (``model``: the run's record, ``repository.export.model_record``) and the bad frame files
    whose spans are gaps (``data.on_bad_file = "gap"``; listed only when there are some)."""
    found = {"software": f"offline-iaas {__version__}", "stream_hash": config.stream_hash(),
             "merge_hash": config.merge_hash(), "mode": config.model.mode,
             "model": dataclasses.asdict(model) if model is not None else {}}
    if bad_files:
        found["bad_frame_files"] = [dataclasses.asdict(e) for e in bad_files]
    return found


def read_gwf_provenance(path: Path) -> dict[str, Any]:
    """The provenance a cleaned GWF file's frame history holds; DataError if it has none."""
    data = Path(path).read_bytes()
    if not data.startswith(GWF_MAGIC):
        raise DataError(f"{path}: not a GWF file (a frame file starts with IGWD)")
    start = data.find(PROVENANCE_MARK.encode())
    if start < 0:
        raise DataError(f"{path}: no offline-iaas frame history entry (not a cleaned frame "
                        "written by offline-iaas)")
    start += len(PROVENANCE_MARK)
    end = data.find(b"\0", start)  # frame strings end with a NUL
    try:
        if end < 0:
            raise ValueError("the entry has no end (a cut file?)")
        return json.loads(data[start:end].decode())
    except ValueError as err:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise DataError(f"{path}: unreadable provenance in the frame history: {err}") from None


def read_provenance(path: Path) -> dict[str, Any]:
    """The provenance of a product: a cleaned GWF file's frame history, or the attribute of a
    campaign HDF5 file. DataError if ``path`` holds none."""
    path = Path(path)
    if path.is_dir():
        raise DataError(f"{path}: a directory, not a product file (a cleaned GWF file or a "
                        "campaign HDF5 file)")
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    if path.suffix == ".gwf":
        return read_gwf_provenance(path)
    import h5py

    try:
        with h5py.File(path, "r") as f:
            text, node = f.attrs.get("provenance"), f.attrs.get("node")
    except OSError as err:
        raise DataError(f"{path}: not a GWF or HDF5 file ({err})") from None
    if text is None and node is not None:  # a part: the run's provenance is the merge's
        raise DataError(f"{path}: {node}'s part of a run, not a product: the merge writes "
                        "the campaign's provenance into the run's output/campaign.h5")
    if text is None:
        raise DataError(f"{path}: no provenance attribute (not written by offline-iaas)")
    return json.loads(text)
