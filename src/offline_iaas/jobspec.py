"""The job specs: what ``make-dag`` asks of each node, written to ``RUN/jobs/<node>.json``.

A client's spec is its ``ClientSegment`` (its pieces of the analysable stretches, each under
its own sequence ID) beside the campaign's config hash; a chunk merge's is its ``MergeChunk``
(a GPS interval and the clients whose parts it reads). ``make-dag`` writes them, the client,
chunk merge, merge, ``status``, ``report`` and ``plan --simulate`` read them, all through the
functions here.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from offline_iaas.atomic import write_text_atomic
from offline_iaas.errors import RunError
from offline_iaas.rundir import RunDir, read_record


@dataclass(frozen=True)
class Piece:
    """One stream of a client: part of one stretch, under its own sequence ID."""

    stretch: int
    sequence_id: int
    """Triton sequence (correlation) ID, unique on its server; never 0."""
    first_window: int
    """First window the stream produces (within the stretch, warm-up included)."""
    output_start: int
    """First window kept (within the stretch)."""
    output_stop: int
    """One past the last window kept."""
    gps_start: float
    """GPS time of the first sample streamed."""
    gps_end: float
    """GPS time one sample after the last sample streamed."""
    stretch_gps_start: float
    """Bounds of the piece's stretch: data is read (and resampled) within them only."""
    stretch_gps_end: float

    @property
    def warmup_windows(self) -> int:
        return self.output_start - self.first_window

    @property
    def windows(self) -> int:
        """Windows the stream produces, warm-up included."""
        return self.output_stop - self.first_window


@dataclass(frozen=True)
class ClientSegment:
    """One client's share of the campaign."""

    index: int
    node: str
    """DAG node name, e.g. ``client3``."""
    server: str
    """DAG node name of its server, e.g. ``server1``."""
    pieces: tuple[Piece, ...]

    @property
    def kept_windows(self) -> int:
        return sum(p.output_stop - p.output_start for p in self.pieces)

    @property
    def streamed_seconds(self) -> float:
        """Data seconds the client streams (warm-ups included)."""
        return sum(p.gps_end - p.gps_start for p in self.pieces)

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "node": self.node,
            "server": self.server,
            "pieces": [asdict(p) for p in self.pieces],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClientSegment:
        return cls(
            index=data["index"],
            node=data["node"],
            server=data["server"],
            pieces=tuple(Piece(**p) for p in data["pieces"]),
        )



@dataclass(frozen=True)
class MergeChunk:
    """One chunk merge node: its GPS interval, its parent clients, the data it owns."""

    index: int
    node: str
    gps_start: float
    gps_end: float
    clients: tuple[str, ...]
    data_seconds: float
    """Seconds of data whose outputs it writes."""

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "node": self.node, "gps_start": self.gps_start,
                "gps_end": self.gps_end, "clients": list(self.clients),
                "data_seconds": self.data_seconds}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MergeChunk:
        return cls(int(data["index"]), str(data["node"]), float(data["gps_start"]),
                   float(data["gps_end"]), tuple(data["clients"]), float(data["data_seconds"]))


def _read_spec(run: RunDir, node: str) -> dict[str, Any]:
    path = run.job(node)
    if not path.exists():
        raise RunError(f"{path}: no job spec for node {node}")
    return read_record(path)


def write_client_job(run: RunDir, segment: ClientSegment, common: dict[str, Any]) -> None:
    """Write a client's spec: its segment and ``common`` (config hash, model, ...)."""
    _write(run, segment.node, {**segment.to_dict(), **common})


def read_client_job(run: RunDir, node: str) -> ClientSegment:
    """A client's segment (RunError naming the file when it is missing or unreadable)."""
    path = run.job(node)
    try:
        return ClientSegment.from_dict(_read_spec(run, node))
    except (KeyError, TypeError, ValueError) as err:
        raise RunError(f"{path}: not a client job spec ({err})") from None


def write_chunk_job(run: RunDir, chunk: MergeChunk, config_hash: str) -> None:
    """Write a chunk merge's spec."""
    _write(run, chunk.node, {**chunk.to_dict(), "config_hash": config_hash})


def read_chunk_job(run: RunDir, node: str) -> MergeChunk:
    """A chunk merge's spec (RunError naming the file when it is missing or unreadable)."""
    path = run.job(node)
    try:
        return MergeChunk.from_dict(_read_spec(run, node))
    except (KeyError, TypeError, ValueError) as err:
        raise RunError(f"{path}: not a chunk merge job spec ({err})") from None


def _write(run: RunDir, node: str, spec: dict[str, Any]) -> None:
    write_text_atomic(run.job(node), json.dumps(spec, indent=2) + "\n")
