"""The record of one measurement, and the bench's results file (``results.json``)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from offline_iaas.atomic import write_text_atomic
from offline_iaas.bench.provenance import SOURCE_ROOT
from offline_iaas.bounded_read import NotRegularFile, TooLarge, read_text
from offline_iaas.config_numbers import MAX_SERVER_CORES
from offline_iaas.errors import ConfigError, names_text
from offline_iaas.json_values import json_kind

PATHS: tuple[str, ...] = ("limit", "service", "naive", "ensemble", "whole-window",
                          "whole-window-limit")
"""``ensemble``: the cpu flavor's snapshotter → network ensemble, for comparison;
``whole-window``: a streamed workload's model served with ``model.streamed = false`` (the
snapshotter and the whole-window graphs: what a whole-window server does, the peer's path);
``whole-window-limit``: the same graphs in-process (a user's own whole-window loop)."""


@dataclass(frozen=True)
class Measurement:
    """Throughput and cost of one path at one point of the sweep.

    Parameters
    ----------
    path
        One of ``PATHS``.
    workload
        Workload name.
    batch_size
        Windows per request (per onnxruntime call for the limit).
    clients
        Client processes (``k``); for the limit, the ``k`` of the sweep point it was measured
        at (it runs one worker process per server instance, whatever ``k``).
    threads
        onnxruntime threads in all (limit: the same as the server's).
    data_seconds
        Data streamed, in seconds.
    wall_seconds
        From the start signal to the last response.
    client_cpu_seconds, server_cpu_seconds
        CPU time of the client processes (the limit's process) and of tritonserver with its
        python-backend stubs (0 for the limit).
    bytes_sent, bytes_received
        TCP payload clients sent and received (0 for the limit).
    other_cpu_seconds
        CPU time other processes of the machine took during the measurement.
    streamed
        The path ran the networks streamed layer by layer (``model.streamed``: the limit and
        the service of a streamed workload); false in results written before it existed.
    """

    path: str
    workload: str
    batch_size: int
    clients: int
    threads: int
    data_seconds: float
    wall_seconds: float
    client_cpu_seconds: float
    server_cpu_seconds: float = 0.0
    bytes_sent: int = 0
    bytes_received: int = 0
    other_cpu_seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    streamed: bool = False

    @property
    def data_seconds_per_second(self) -> float:
        return self.data_seconds / self.wall_seconds

    @property
    def bytes_sent_per_data_second(self) -> float:
        return self.bytes_sent / self.data_seconds

    @property
    def bytes_received_per_data_second(self) -> float:
        return self.bytes_received / self.data_seconds

    @property
    def cpu_seconds(self) -> float:
        """Client and server CPU time."""
        return self.client_cpu_seconds + self.server_cpu_seconds

    @property
    def data_seconds_per_cpu_second(self) -> float:
        """Throughput per CPU second spent (client and server): insensitive to other load."""
        return self.data_seconds / self.cpu_seconds

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["data_seconds_per_second"] = self.data_seconds_per_second
        out["bytes_sent_per_data_second"] = self.bytes_sent_per_data_second
        out["bytes_received_per_data_second"] = self.bytes_received_per_data_second
        out["data_seconds_per_cpu_second"] = self.data_seconds_per_cpu_second
        return out

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Measurement:
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in values.items() if k in names})


def best_by_path(measurements: list[Measurement]) -> dict[str, Measurement]:
    """The fastest measurement (data seconds per wall second) of each path."""
    best: dict[str, Measurement] = {}
    for m in measurements:
        if m.path not in best or m.data_seconds_per_second > best[m.path].data_seconds_per_second:
            best[m.path] = m
    return best


def cpu_efficiency_by_path(measurements: list[Measurement]) -> dict[str, float]:
    """The highest data seconds per CPU second of each path: its least-disturbed cost.

    Other processes on the machine only ever add to a path's CPU time per data second (cache
    and memory-bandwidth contention), so the cheapest repeat is the closest to its own cost.
    """
    best: dict[str, float] = {}
    for m in measurements:
        best[m.path] = max(best.get(m.path, 0.0), m.data_seconds_per_cpu_second)
    return best


def write_results(path: Path, header: dict[str, Any], measurements: list[Measurement]) -> Path:
    """Write ``results.json``: the run's description and every measurement."""
    data = {**header, "measurements": [m.to_dict() for m in measurements]}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(data, indent=1) + "\n")
    return path


def default_results() -> Path:
    """``plan``'s results file without ``--from-bench``: the source tree's
    ``benchmarks/results.json`` (whatever the working directory); ConfigError when this
    offline-iaas has none (installed from a wheel, which carries no benchmarks)."""
    path = SOURCE_ROOT / "benchmarks" / "results.json"
    if not path.is_file():
        raise ConfigError(f"no bench results at {path} (plan's default): pass --from-bench "
                          "FILE (offline-iaas bench's results.json) or --from-run RUN (a "
                          "finished pilot campaign)")
    return path


def _number(value: Any) -> bool:
    """A finite JSON number (not a boolean, nor an integer too large for a float)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_POSITIVE = ("a positive finite number", lambda v: _number(v) and v > 0)
_NOT_NEGATIVE = ("a finite number, 0 or more", lambda v: _number(v) and v >= 0)
_COUNT = ("a positive integer", lambda v: _integer(v) and v > 0)
_BYTES = ("an integer, 0 or more", lambda v: _integer(v) and v >= 0)
FIELD_KINDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "path": ("a string", lambda v: isinstance(v, str)),
    "workload": ("a string", lambda v: isinstance(v, str)),
    "batch_size": _COUNT, "clients": _COUNT, "threads": _COUNT,
    "data_seconds": _POSITIVE, "wall_seconds": _POSITIVE, "client_cpu_seconds": _POSITIVE,
    "server_cpu_seconds": _NOT_NEGATIVE, "other_cpu_seconds": _NOT_NEGATIVE,
    "bytes_sent": _BYTES, "bytes_received": _BYTES,
    "extra": ("an object", lambda v: isinstance(v, dict)),
    "streamed": ("true or false", lambda v: isinstance(v, bool)),
}
"""What each field of a measurement must be (``read_results``): the plan divides by the
times and counts, so they are positive and finite."""


def _shown(value: Any, most: int = 40) -> str:
    """``value`` as a message shows it: its repr, cut short after ``most`` characters."""
    text = repr(value)
    return text if len(text) <= most else text[: most - 3] + "..."


MAX_RATE, MAX_RATE_TEXT = 1e9, "10**9"
"""Data seconds per wall second no server measures (31.7 years a second): a rate beyond it is
a damaged file (a wall time of 1e-300 s planned a campaign of 0 s)."""


MAX_LAYOUT_COUNT = MAX_SERVER_CORES
"""A measured layout's ``batch_size``, ``clients`` and ``threads`` (``server.instances``) are at
most this (4096, the config's bound of ``server.instances``): ``plan`` recommends the layout it
measured, and more (a million instances) is a damaged file, not a server."""
LAYOUT_COUNTS = ("batch_size", "clients", "threads")


def measurement_problem(row: dict[str, Any]) -> str | None:
    """What is wrong with the fields of one measurement read back (None: nothing): the first
    field not of its kind (``FIELD_KINDS``), a layout count beyond ``MAX_LAYOUT_COUNT``, or a
    rate that is not a positive finite number."""
    for name, (kind, valid) in FIELD_KINDS.items():
        if name in row and not valid(row[name]):
            return f"{name} must be {kind}, got {_shown(row[name])}"
    for name in LAYOUT_COUNTS:
        if row.get(name, 0) > MAX_LAYOUT_COUNT:
            return (f"{name} must be at most {MAX_LAYOUT_COUNT} (a layout plan would recommend), "
                    f"got {_shown(row[name])}")
    rate = row["data_seconds"] / row["wall_seconds"]
    if not 0 < rate <= MAX_RATE:
        return (f"data_seconds / wall_seconds must be a positive rate of at most "
                f"{MAX_RATE_TEXT}, got "
                f"{_shown(row['data_seconds'])} / {_shown(row['wall_seconds'])}")
    return None


def read_results(path: Path) -> tuple[dict[str, Any], list[Measurement]]:
    """The header and measurements of a ``results.json``; ConfigError naming the file when it
    is unreadable, a measurement lacks a field or has one of the wrong kind, or its
    ``machine`` is no object (or ``machine.cores`` no count)."""
    def refuse(why: str) -> ConfigError:
        return ConfigError(f"{path}: not a bench results file (offline-iaas bench's "
                           f"results.json): {why}")

    try:
        data = json.loads(read_text(Path(path)))
    except FileNotFoundError:
        raise ConfigError(f"{path}: bench results file not found") from None
    except (TooLarge, NotRegularFile) as err:  # a FIFO: not waited on; /dev/zero: not read
        raise refuse(str(err)) from None
    except UnicodeDecodeError:
        raise refuse("not text") from None
    except json.JSONDecodeError as err:
        raise refuse(f"not valid JSON at line {err.lineno} column {err.colno} ({err.msg})"
                     ) from None
    except ValueError:  # an integer of more digits than Python reads (sys.int_info)
        raise refuse("a number of too many digits to read") from None
    rows = data.get("measurements") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        raise refuse("no list 'measurements'")
    required = [f.name for f in fields(Measurement)
                if f.default is MISSING and f.default_factory is MISSING]
    for number, row in enumerate(rows, start=1):
        if not isinstance(row, dict):
            raise refuse(f"measurement {number} is not an object")
        lacking = [name for name in required if name not in row]
        if lacking:
            raise refuse(f"measurement {number} has no {names_text(lacking, shown=3)}")
        problem = measurement_problem(row)
        if problem:
            raise refuse(f"measurement {number}'s {problem}")
    machine = data.get("machine", {})
    if not isinstance(machine, dict):
        raise refuse(f"'machine' is {json_kind(machine)}, not an object")
    cores = machine.get("cores")
    if cores is not None and (isinstance(cores, bool) or not isinstance(cores, int) or cores < 1):
        raise refuse(f"'machine.cores' is {_shown(cores)}, not a count of cores")
    header = {k: v for k, v in data.items() if k != "measurements"}
    return header, [Measurement.from_dict(row) for row in rows]
