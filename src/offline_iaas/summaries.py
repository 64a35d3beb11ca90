"""The merge's records: a shard merge's summary and the campaign summary, as types.

``ShardSummary`` is ``RUN/output/shards/<shard>.json`` (a shard merge's, written last);
``CampaignSummary`` is ``RUN/output/campaign.json`` (the single merge's or the index's,
written last), with its mode's physics sections (``summary_physics.physics_type``) at its top
level, read as ``summary_type(mode)``. Both are records of ``records.py``'s framework (typed,
versioned, read with one ``RunError`` naming the file and the field).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pydantic import create_model

from offline_iaas.records import BadFile, Record, v1_hash_fields
from offline_iaas.summary_physics import Physics, physics_type


@dataclass(frozen=True)
class DatasetOffset:
    """A series dataset of a shard merge's file: where its bytes are (for the index)."""

    name: str
    x0: float
    shape: tuple[int, ...]
    offset: int | None
    """Byte offset in the file (None: not contiguous; the index refuses it)."""
    nbytes: int


class ShardSummary(Record):
    """``RUN/output/shards/<shard>.json``: a shard merge's record, written last."""

    KIND: ClassVar[str] = "shard merge summary"

    complete: bool
    node: str
    gps: tuple[float, float]
    data_seconds: float
    analysed_seconds: float = 0.0
    """Of ``data_seconds``, those not in gaps of bad frame files."""
    clients: tuple[str, ...]
    wall_seconds: float
    setup_seconds: float = 0.0
    cpu_seconds: float = 0.0
    peak_rss_mb: float
    merge_hash: str
    """The campaign's ``merge_hash`` it was made under."""
    bytes: int
    sha256: str | None
    """Of the shard file (None in version 1: its size only is checked)."""
    datasets: tuple[DatasetOffset, ...]
    frame_files: tuple[tuple[str, str, int, int], ...] = ()
    """The GWF files written: interferometer, path in its frames directory, GPS, seconds."""
    frame_spans: dict[str, dict[str, tuple[tuple[float, float], ...]]] = {}
    """Per interferometer, the ``valid`` and ``flagged`` spans of those files."""
    bad_frame_files: tuple[BadFile, ...] = ()

    @classmethod
    def from_v1(cls, data: dict[str, Any], path: Path) -> dict[str, Any]:
        return {"sha256": None, "analysed_seconds": data.get("data_seconds"),
                **v1_hash_fields(data, "merge_hash")}


@dataclass(frozen=True)
class ShardWalls:
    total: float
    max: float


class CampaignSummary(Record, Physics):
    """``RUN/output/campaign.json``: the merge's record (the single merge's, or the index's),
    written last, with its mode's physics sections (``deepclean``, ``bbhnet``, ...:
    ``postprocess``'s) at its top level, read as ``summary_type(mode)``."""

    KIND: ClassVar[str] = "campaign summary"
    RENAMED: ClassVar[dict[str, str]] = {f"chunk{s}": f"shard{s}" for s in (
        "s", "_wall_seconds", "_setup_seconds", "_cpu_seconds", "_data_seconds")}

    complete: bool
    wall_seconds: float
    cpu_seconds: float
    peak_rss_mb: float
    sha256: str
    bytes: int | None
    """The output file's size (None in version 1)."""
    stream_hash: str
    merge_hash: str
    mode: str
    analysed_seconds: float = 0.0
    """Data seconds the output holds; a merge is complete only over more than zero."""
    planned_seconds: float | None = None
    """With no data analysed: the seconds planned (the bad frame files took the rest)."""
    run_dir: str = ""
    """The run directory the output was written in (it names that directory's files)."""
    shards: int = 0
    """Shard merges indexed (0: the single merge)."""
    shard_wall_seconds: ShardWalls | None = None
    shard_setup_seconds: float = 0.0
    shard_cpu_seconds: float = 0.0
    shard_data_seconds: float = 0.0
    bad_frame_files: tuple[BadFile, ...] = ()

    @classmethod
    def from_v1(cls, data: dict[str, Any], path: Path) -> dict[str, Any]:
        return {"bytes": None, **v1_hash_fields(data, "stream_hash", "merge_hash")}

    @classmethod
    def document_type(cls, data: dict[str, Any]) -> type[Record]:
        return summary_type(data["mode"]) if isinstance(data.get("mode"), str) else cls

    @property
    def physics(self) -> Physics:
        """The physics sections alone (``physics_type(mode)``)."""
        kind = physics_type(self.mode)
        return kind(**{name: getattr(self, name) for name in kind.model_fields})


@functools.cache
def summary_type(mode: str) -> type[CampaignSummary]:
    """``CampaignSummary`` with the physics sections of ``mode`` (``physics_type``)."""
    return create_model(f"CampaignSummary[{mode}]", __base__=(CampaignSummary,
                                                              physics_type(mode)))
