"""What made a product (``campaign_provenance``), written into the campaign file's
``provenance`` attribute and into every cleaned GWF file's frame history (after
``PROVENANCE_MARK``), and read back from either (``read_provenance``, ``offline-iaas inspect``).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any, BinaryIO

from offline_iaas import __version__
from offline_iaas.config import CampaignConfig
from offline_iaas.data.gwf_reader import reader
from offline_iaas.data.hdf5_probe import every_object
from offline_iaas.errors import DataError, not_a_regular_file
from offline_iaas.records import BadFile, ServedModel

PROVENANCE_MARK = "offline-iaas provenance: "
"""The comment of the frame history entry starts with this, the JSON follows."""

GWF_MAGIC = b"IGWD\0"
"""The first bytes of every frame file (the frame format's file header)."""
INSPECT_FLOOR_SECONDS = 30.0
"""What ``inspect`` waits for any product's checksums or root attributes, however small
(milliseconds on a local disk; room for a slow filesystem's open and the reader's start)."""
INSPECT_READ_BYTES_PER_SECOND = 8 * 2**20
"""The slowest read ``inspect`` still calls reading, added per byte of the product to the
floor (``inspect_timeout_seconds``): LALFrame reads a whole frame file for its checksums, and
8 MiB/s is well under a busy NFS mount's rate (a 1 Gb/s link shared a dozen ways), so a good
file of several GB (about 9 min for 4 GiB) is read, not called hung; a hung one is still named."""
HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
"""The HDF5 signature (at the file's start, or after a user block of 512, 1024 ... bytes)."""


def inspect_timeout_seconds(size_bytes: int) -> float:
    """How long ``inspect`` waits for the frame reader on a product of ``size_bytes``:
    ``INSPECT_FLOOR_SECONDS`` plus its read at ``INSPECT_READ_BYTES_PER_SECOND``, rounded up to
    whole seconds (the hung file's message names them); after it the file is called hung."""
    return float(math.ceil(INSPECT_FLOOR_SECONDS + size_bytes / INSPECT_READ_BYTES_PER_SECOND))


def campaign_provenance(config: CampaignConfig, model: ServedModel | None,
                        bad_files: list[BadFile] | None = None) -> dict[str, Any]:
    """What made a product: software, the stream and merge hashes, the served model
    (``model``: the run's record, ``repository.served.model_record``) and the bad frame files
    whose spans are gaps (``data.on_bad_file = "gap"``; listed only when there are some)."""
    found = {"software": f"offline-iaas {__version__}", "stream_hash": config.stream_hash(),
             "merge_hash": config.merge_hash(), "mode": config.model.mode,
             "model": dataclasses.asdict(model) if model is not None else {}}
    if bad_files:
        found["bad_frame_files"] = [dataclasses.asdict(e) for e in bad_files]
    return found


def read_gwf_provenance(path: Path) -> dict[str, Any]:
    """The provenance a cleaned GWF file's frame history holds; DataError if it has none, or
    if the file is not intact (``_intact_frame_file``: its checksums)."""
    data = Path(path).read_bytes()
    if not data.startswith(GWF_MAGIC):
        raise DataError(f"{path}: not a GWF file (a frame file starts with IGWD)")
    reader().call(_intact_frame_file, path, "GWF", inspect_timeout_seconds(len(data)))
    start = data.find(PROVENANCE_MARK.encode())
    if start < 0:
        raise DataError(f"{path}: no offline-iaas frame history entry (not a cleaned frame "
                        "written by offline-iaas)")
    start += len(PROVENANCE_MARK)
    end = data.find(b"\0", start)  # frame strings end with a NUL
    if end < 0:
        raise DataError(f"{path}: unreadable provenance in the frame history: the entry has "
                        "no end (a cut file?)")
    return _provenance_object(path, data[start:end], "in the frame history")


def _intact_frame_file(path: Path) -> None:
    """DataError unless LALFrame finds the frame file's checksums (the frame format's CRCs)
    match its bytes: a cut file, or a byte changed since it was written. In the frame
    reader's process (``GwfReader.call``): LALFrame crashes on some cut files."""
    import lalframe

    try:
        valid = lalframe.FrameUFileCksumValid(lalframe.FrameUFrFileOpen(str(path), "r"))
    except RuntimeError:  # LALFrame's "Generic failure": a checksum that does not match
        valid = False
    if not valid:
        raise DataError(f"{path}: not an intact GWF file: its checksums do not match its "
                        "bytes (cut, or a byte changed since it was written)")


def _provenance_object(path: Path, text: Any, where: str) -> dict[str, Any]:
    """The provenance JSON ``text`` holds (bytes or str); DataError naming ``path`` for text
    that is not UTF-8 or not a JSON object."""
    try:
        if isinstance(text, bytes):
            text = text.decode()
        if not isinstance(text, str):
            raise ValueError(f"a {type(text).__name__}, not text")
        text.encode()  # h5py hands over bytes that are not UTF-8 as surrogates
        found = json.loads(text)
    except UnicodeError:
        raise DataError(f"{path}: unreadable provenance {where}: not UTF-8 text") from None
    except ValueError as err:  # JSONDecodeError is one
        raise DataError(f"{path}: unreadable provenance {where}: {err}") from None
    if not isinstance(found, dict):
        raise DataError(f"{path}: unreadable provenance {where}: a JSON "
                        f"{type(found).__name__}, not an object")
    return found


def _has_hdf5_signature(file: BinaryIO) -> bool:
    """Whether the open ``file`` has the HDF5 signature where the format puts it: at its
    start, or after a user block of 512 bytes times a power of two."""
    offset = 0
    while True:
        file.seek(offset)
        head = file.read(len(HDF5_MAGIC))
        if head == HDF5_MAGIC:
            return True
        if len(head) < len(HDF5_MAGIC):
            return False
        offset = 512 if offset == 0 else 2 * offset


def _hdf5_provenance(path: Path) -> tuple[Any, Any]:
    """The root attributes ``provenance`` and ``node`` of the HDF5 file ``path``, once every
    object's metadata has been read (``every_object``: damage anywhere in it is an error, as
    a frame file's checksums are); in the frame reader's process (``GwfReader.call``)."""
    root = every_object(path)
    return root.get("provenance"), root.get("node")


def read_provenance(path: Path) -> dict[str, Any]:
    """The provenance of a product: a cleaned GWF file's frame history, or the attribute of a
    campaign HDF5 file (told apart by their first bytes, whatever the name). DataError if
    ``path`` holds none, or is damaged where it is read."""
    path = Path(path)
    if (why := not_a_regular_file(path)) is not None:  # a FIFO's open would wait: not opened
        raise DataError(f"product file {path} {why} (a product is a cleaned GWF file or a "
                        "campaign HDF5 file)")
    with open(path, "rb") as file:
        if path.suffix.lower() == ".gwf" or file.read(len(GWF_MAGIC)) == GWF_MAGIC:
            return read_gwf_provenance(path)
        if not _has_hdf5_signature(file):
            raise DataError(f"{path}: not a GWF or HDF5 file (it starts with neither "
                            "signature)")
    text, node = reader().call(_hdf5_provenance, path, "HDF5",
                               inspect_timeout_seconds(path.stat().st_size))
    if text is None and node is not None:  # a part: the run's provenance is the merge's
        raise DataError(f"{path}: {node}'s part of a run, not a product: the merge writes "
                        "the campaign's provenance into the run's output/campaign.h5")
    if text is None:
        raise DataError(f"{path}: no provenance attribute (not written by offline-iaas)")
    return _provenance_object(path, text, "attribute")
