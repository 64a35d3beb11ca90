"""Every record of the run directory (and the model repository's manifest), as a type.

The run directory is the campaign's database: every node reads and writes it, and
``run-local``, ``status``, ``report`` and the merge decide from it what is done. Its JSON
documents are written and read only through its framework, each as a pydantic model with a
schema version (``schema_version``; a document without one is version 1, the layout before
versions, read where it can be without guessing):

==================  ==============================  =======  ===================================
record              file                            version  written by
==================  ==============================  =======  ===================================
``RunInfo``         ``RUN/run.json``                2        make-dag
``ClientJob``       ``RUN/jobs/<client>.json``      2        make-dag (a ``ClientShare``;
                                                             ``job_specs.py``)
``ShardJob``        ``RUN/jobs/<shard>.json``       2        make-dag (a ``MergeShard``;
                                                             ``job_specs.py``)
``PartRecord``      ``RUN/parts/<client>.json``     2        the client (its part's sidecar)
``CheckpointStamp`` ``parts/<client>.checkpoints/   2        the client, before it streams
                    share.json``
``BadFiles``        ``parts/<client>.checkpoints/   2        the client, while it streams
                    bad-files.json``
``ShardSummary``    ``RUN/output/shards/<c>.json``  2        a shard merge (``summaries.py``)
``CampaignSummary`` ``RUN/output/campaign.json``    2        the merge (``summaries.py``)
``Manifest``        ``<repository>/manifest.json``  2        export (``manifest.py``)
``LocalState``      ``RUN/local-state.json``        2        run-local (``local_state.py``)
``ServerAddress``   ``RUN/servers/<node>.json``     2        serve (``rendezvous/addresses.py``)
``UnhealthyReport`` ``RUN/servers/<node>          2        a client (``rendezvous/
                    .unhealthy``                             addresses.py``)
``Claim``           ``RUN/parts/<client>.claim``    2        the client (``client/balance.py``)
``FinalSummary``    ``RUN/summary.json``            2        the FINAL node (``workflow/
                                                             status.py``: a ``RunStatus``)
==================  ==============================  =======  ===================================

The values records share are plain frozen dataclasses, validated where they are embedded:
``BadFile`` (a frame file left out as a gap: preflight → run.json → bad-files.json → the
sidecar → the merge → the output's provenance), ``Piece`` (a share's part of one stretch).
A client's share is one type, ``ClientShare``, and a shard merge's interval and parents one,
``MergeShard`` (frozen pydantic models), whose fields the records that carry one
(``ShareRecord``: the job spec, the sidecar, the checkpoint stamp; ``ShardJob``) hold as
their own. The merge's summaries are ``summaries.py``'s; the campaign summary's physics
sections are its mode package's types.

Reading a record that is missing, is not JSON, misses a field, has a field of the wrong type
(a number that is NaN or infinite included) or an unknown one, or whose version is newer than
this code's raises one ``RunError`` (exit code 6) naming the file and the field (``read``).
Whether a node's record makes it complete
is ``completeness.py``'s.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import to_jsonable_python

from offline_iaas.atomic import write_text_atomic
from offline_iaas.bounded_read import read_text
from offline_iaas.errors import RunError
from offline_iaas.rundir import RunDir, restore_advice_for

V1_HASH_PREFIX = "v1:"
"""A version-1 record's ``config_hash`` (one hash of the whole output, before the stream
and merge hashes) is read as ``v1:<hash>``: it matches a campaign whose
``CampaignConfig.v1_hash`` it is (``completeness.Hashes``)."""


# ---- values shared by records ----------------------------------------------------------
@dataclass(frozen=True)
class BadFile:
    """A frame file the frame library cannot read, or that lies about its span, whose span
    is a gap (``data.on_bad_file = "gap"``)."""

    path: str
    gps_start: float
    gps_end: float
    error: str
    """Why it is bad (the frame reader's message)."""

    @property
    def span(self) -> tuple[float, float]:
        return self.gps_start, self.gps_end


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


class ClientShare(BaseModel):
    """One client's share of the campaign; the records that carry one (``ShareRecord``) hold
    these fields as their own."""

    model_config = ConfigDict(strict=True, frozen=True)

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


class MergeShard(BaseModel):
    """One shard merge node: its GPS interval, its parent clients, the data it owns; its job
    spec (``ShardJob``) holds these fields as its own."""

    model_config = ConfigDict(strict=True, frozen=True)

    index: int
    node: str
    gps_start: float
    gps_end: float
    clients: tuple[str, ...]
    data_seconds: float
    """Seconds of data whose outputs it writes."""


# ---- the framework -----------------------------------------------------------------------
class Record(BaseModel):
    """A JSON document of the run directory: strict types, no unknown fields, a version, and
    every number of its own fields finite (JSON's ``NaN`` and ``Infinity`` are refused: a time,
    a size or a count that is not a number is a damaged record). The campaign summary's physics
    sections are their own types (``summary_physics.Numbers``) and keep a NaN they computed."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid", allow_inf_nan=False)
    VERSION: ClassVar[int] = 2
    """The version this code writes and the newest it reads."""
    KIND: ClassVar[str] = "record"
    """What the document is, for messages."""
    RENAMED: ClassVar[dict[str, str]] = {}
    """Fields renamed by the glossary (#38), old: new. A document with an old one is of a run
    directory written before, which is not migrated: refused, naming the field."""

    schema_version: int = 2

    @classmethod
    def damaged_remedy(cls, path: Path) -> str:
        """What a message says to do with ``path`` when it is not JSON (``DAMAGED_REMEDY``:
        its writer makes it again on the next run)."""
        return DAMAGED_REMEDY

    @classmethod
    def from_v1(cls, data: dict[str, Any], path: Path) -> dict[str, Any]:
        """A version-1 document as this version's fields (RunError where it cannot be read
        without guessing)."""
        return data

    @classmethod
    def document_type(cls, data: dict[str, Any]) -> type[Record]:
        """The type that reads ``data``: ``cls``, or its subtype that a field names."""
        return cls


R = TypeVar("R", bound=Record)

DAMAGED_REMEDY = "delete it and run again"
"""What a message says to do with a damaged record that its writer makes again on the next
run (a job spec says make-dag's restoring command instead)."""


def v1_hash_fields(data: dict[str, Any], *names: str) -> dict[str, Any]:
    """``config_hash`` of a version-1 document as ``v1:<hash>`` under ``names``."""
    out = dict(data)
    if "config_hash" in out:
        recorded = out.pop("config_hash")
        for name in names:
            out[name] = f"{V1_HASH_PREFIX}{recorded}" if isinstance(recorded, str) else recorded
    return out


def _field(loc: tuple[Any, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(the document)"


def read(kind: type[R], path: Path, remedy: str | None = None) -> R:
    """The record of type ``kind`` in ``path`` (``remedy``: what to do when it is not JSON;
    by default ``kind.damaged_remedy``).

    Raises
    ------
    RunError
        One line naming the file and what is wrong: missing, unreadable, not a JSON object,
        a newer version than this code reads, or a field missing, of the wrong type (a number
        NaN or infinite) or unknown.
    """
    try:
        text = read_text(path)  # a FIFO is not waited on, /dev/zero not read to the end
    except FileNotFoundError:
        raise RunError(f"{path} does not exist (is this a run directory of make-dag?)") from None
    except (OSError, ValueError) as err:  # NotRegularFile, TooLarge, UnicodeDecodeError
        raise RunError(f"{path}: cannot read: {err}") from None
    return parse(kind, text, path, remedy)


def parse(kind: type[R], text: str, path: Path, remedy: str | None = None) -> R:
    """``read`` of a document's text (``path`` names it in errors)."""
    remedy = remedy if remedy is not None else kind.damaged_remedy(path)
    try:
        data = json.loads(text)
    except ValueError as err:
        raise RunError(f"{path}: not a JSON document ({err}); the {kind.KIND} is damaged: "
                       f"{remedy}") from None
    if not isinstance(data, dict):
        raise RunError(f"{path}: not a JSON object (a {kind.KIND} is one)")
    version = data.get("schema_version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise RunError(f"{path}: field schema_version: {version!r} is not a version number")
    if version > kind.VERSION:
        raise RunError(f"{path}: {kind.KIND} of schema version {version}, newer than this "
                       f"offline-iaas reads ({kind.VERSION}): use the offline-iaas that wrote it")
    for old, new in kind.RENAMED.items():
        if old in data:
            raise RunError(f"{path}: field {old}: a {kind.KIND} written before {old} was renamed "
                           f"{new} (#38): run make-dag again into a new run directory")
    if version < kind.VERSION:
        data = {**kind.from_v1(data, path), "schema_version": kind.VERSION}
        text = json.dumps(data)
    kind = kind.document_type(data)
    try:
        return kind.model_validate_json(text)
    except ValidationError as err:
        first = err.errors()[0]
        more = err.error_count() - 1
        raise RunError(
            f"{path}: field {_field(first['loc'])}: {first['msg']} (a {kind.KIND}, schema "
            f"version {version}" + (f"; {more} more problem(s)" if more else "") + ")"
        ) from None


def written_version(path: Path) -> int | None:
    """The schema version ``path``'s record was written with (1 without a
    ``schema_version``: ``read`` converts it in memory, so the record itself says the
    current one); None where the file cannot be read or holds no version number (``read``
    says why)."""
    try:
        data = json.loads(read_text(path))
    except (OSError, ValueError):  # ValueError: NotRegularFile, TooLarge, not text or JSON
        return None
    version = data.get("schema_version", 1) if isinstance(data, dict) else None
    return version if isinstance(version, int) and not isinstance(version, bool) else None


def read_optional(kind: type[R], path: Path) -> R | None:
    """``read``, or None when the file does not exist (RunError when it is there but not a
    valid record)."""
    if not path.exists():
        return None
    try:
        return read(kind, path)
    except RunError:
        if not path.exists():  # removed while being read
            return None
        raise


def read_or_none(kind: type[R], path: Path, problems: list[str] | None = None) -> R | None:
    """``read``, or None when the file is missing or not a valid record (for a reader that
    shows what is there: another line says what is wrong); a damaged one's ``RunError`` line
    is added to ``problems`` where given."""
    try:
        return read_optional(kind, path)
    except RunError as err:
        if problems is not None:
            problems.append(str(err))
        return None


def build(kind: type[R], fields: dict[str, Any]) -> R:
    """A record from the values a node computed (dataclasses, tuples, paths, numbers), checked
    as strictly as a record read back (pydantic's ValidationError: a defect of the writer)."""
    kind = kind.document_type(fields)
    return kind.model_validate_json(json.dumps(to_jsonable_python(fields)))


def write(record: Record, path: Path) -> None:
    """Write ``record`` to ``path`` atomically."""
    write_text_atomic(path, record.model_dump_json(indent=2) + "\n")


# ---- the records ---------------------------------------------------------------------------
@dataclass(frozen=True)
class NetworkGraph:
    """A served network graph, as the products' provenance names it."""

    version: int | None
    sha256: str
    """Of the ONNX graph served."""
    weights_sha256: dict[str, str]
    """Of the weight files it was exported from."""


@dataclass(frozen=True)
class ServedModel:
    """The served model (``served.model_record``): name, flavor, each network's graph."""

    name: str | None
    flavor: str | None
    networks: dict[str, NetworkGraph]


class RunInfo(Record):
    """``RUN/run.json``: the run's identity, hashes, nodes and what the products name."""

    KIND: ClassVar[str] = "run record (run.json)"
    RENAMED: ClassVar[dict[str, str]] = {"chunks": "shards"}

    @classmethod
    def damaged_remedy(cls, path: Path) -> str:
        """make-dag writes run.json once: restore it (``rundir.restore_advice``, as ``status``
        and ``merge`` say), not run again."""
        return restore_advice_for(path)

    run_id: str
    stream_hash: str
    """``CampaignConfig.stream_hash`` of the campaign make-dag wrote."""
    merge_hash: str
    """``CampaignConfig.merge_hash`` of the same."""
    sequence_base: int
    servers: tuple[str, ...]
    clients: tuple[str, ...]
    shards: tuple[str, ...] = ()
    """Shard merge nodes (none: one merge node)."""
    created: str
    training: dict[str, tuple[float, float]] = {}
    """GPS ``[start, end]`` of each network's training data (the manifest's)."""
    model: ServedModel | None = None
    bad_frame_files: tuple[BadFile, ...] = ()
    """Frame files make-dag left out as gaps (``data.on_bad_file = "gap"``)."""
    job_sha256: dict[str, str] = {}
    """SHA-256 of each node's job spec as make-dag wrote it (none in an older run's record:
    ``binding.check_job_specs`` then checks nothing)."""

    @classmethod
    def from_v1(cls, data: dict[str, Any], path: Path) -> dict[str, Any]:
        out = v1_hash_fields(data, "stream_hash", "merge_hash")
        if out.get("model") == {}:
            out["model"] = None
        return out


class ShareRecord(Record, ClientShare):
    """A record that carries a client's share (``ClientShare``'s fields, at its top level)."""

    @property
    def share(self) -> ClientShare:
        """The share alone (equal to the ``ClientShare`` it was made of)."""
        return ClientShare(**share_fields(self))


def share_fields(share: ClientShare) -> dict[str, Any]:
    """A share's fields (a record's too), to build a record or a share with."""
    return fields_of(share, ClientShare)


def fields_of(value: BaseModel, kind: type[BaseModel]) -> dict[str, Any]:
    """``kind``'s fields of ``value`` (a ``kind``, or a record holding its fields)."""
    return {name: getattr(value, name) for name in kind.model_fields}


def read_run_info(run: RunDir) -> RunInfo:
    """``RUN/run.json`` (RunError naming the file where it is missing or damaged; damaged:
    with make-dag's restoring command)."""
    return read(RunInfo, run.run_info)


class ClientRun(BaseModel):
    """How a client ran, in its sidecar."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")

    wall_seconds: float
    peak_rss_mb: float
    reconnects: int
    first_request_unix: float | None
    last_response_unix: float | None
    tensor_bytes_sent: int
    servers: tuple[str, ...]
    """The servers it streamed to, in order (a move: failover or rebalance)."""


class PartRecord(ShareRecord, ClientRun):
    """``RUN/parts/<client>.json``, a part's sidecar: written last, once the part file is in
    place; its share, hash, the file's size and SHA-256, and how the client ran."""

    KIND: ClassVar[str] = "part sidecar"

    complete: bool
    stream_hash: str
    """The campaign's ``stream_hash`` the part was made under."""
    outputs: tuple[str, ...]
    sha256: str
    """Of the part file's bytes."""
    bytes: int | None
    """The part file's size (None in version 1: its checksum is then always verified)."""
    bad_files: tuple[BadFile, ...] = ()
    """The bad frame files the client met (streamed around as gaps)."""

    @classmethod
    def from_v1(cls, data: dict[str, Any], path: Path) -> dict[str, Any]:
        return {"bytes": None, **v1_hash_fields(data, "stream_hash")}


class CheckpointStamp(ShareRecord):
    """``parts/<client>.checkpoints/share.json``: what a client's checkpoints were made for (its
    share and the stream hash); checkpoints of anything else are discarded."""

    KIND: ClassVar[str] = "checkpoint stamp"

    stream_hash: str

    @classmethod
    def of(cls, share: ClientShare, stream_hash: str) -> CheckpointStamp:
        return cls(**share_fields(share), stream_hash=stream_hash)


class BadFiles(Record):
    """``parts/<client>.checkpoints/bad-files.json``: the bad frame files a client met so far (its
    retries stream around them from the start)."""

    KIND: ClassVar[str] = "client's bad-file list"

    files: tuple[BadFile, ...]

    @classmethod
    def from_v1(cls, data: dict[str, Any], path: Path) -> dict[str, Any]:
        raise RunError(f"{path}: a bad-file list of an older offline-iaas; delete {path.parent} "
                       "(the client's checkpoints) and run again")


def bad_files_of(entries: Iterable[BadFile]) -> list[BadFile]:
    """Each file once (the first entry of a path), in GPS order."""
    found: dict[str, BadFile] = {}
    for entry in entries:
        found.setdefault(entry.path, entry)
    return sorted(found.values(), key=lambda e: (e.gps_start, e.path))
