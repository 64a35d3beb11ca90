"""The rules every number of a campaign config meets, whatever its key (``check_config`` runs
them): finite and at most the largest float32, never negative, positive where zero means
nothing, an integer below 2**63, a length of time (``TIME_SUFFIXES``) at most
``MAX_SECONDS``, and a count that a scheduler or Triton takes (retries, throttles, a server's
GPUs, cores, GPU memory and model instances: ``COUNT_BOUNDS``) at most its bound. And
``off_grid``: whether a GPS time lies off a sample rate's grid (``data.start``).

The numeric fields are found from the sections' dataclasses (a mode package's section's too),
so a new field is checked without being listed here. Zero is refused for a time
(``*_seconds``, ``data.duration``), a rate or frequency (``*_rate``, ``*_hz``), a mass, a
threshold in years, and the counts and factor of ``POSITIVE_KEYS``, unless the key is in
``ZERO_ALLOWED`` (where zero means something: "off", "one merge", "no crop"). These sign rules
are the config's only ones (``check_signs``, run before any rule that computes with a number);
the other rules say more of a key. The failures are ``<file>: '<key>' <why>``, like every
other rule's.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Callable, Collection, Iterator
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from offline_iaas.config import CampaignConfig

POSITIVE_SUFFIXES: tuple[str, ...] = ("_seconds", "duration", "_rate", "_hz", "_msun",
                                      "_years", "_fftlength", "_ratio", "_drift")
"""Keys ending so are a length of time, a rate, a mass... that must be above zero."""
ZERO_ALLOWED: dict[str, str] = {
    "merge.shard_seconds": "one merge",
    "client.failover_seconds": "never fail over",
    "server.monitor_seconds": "no monitor",
    "server.unresponsive_seconds": "a hung server is never ended",
    "synth.witness_sample_rate": "the strain's rate",
    "search.whitening_crop_seconds": "no crop",
}
"""The core's keys where zero means something, and what (a negative value's message says it); a
mode package's section names its own in a class variable ``ZERO_ALLOWED`` (DeepClean's
``guard_hz``: no guard band)."""
POSITIVE_KEYS: frozenset[str] = frozenset({
    "model.batch_size", "layout.servers", "layout.clients_per_server", "server.instances",
    "client.in_flight", "client.checkpoint_requests",  # counts of at least one
    "model.input_scale",  # 0 made every input zero: the networks saw no data
})
"""Keys that no suffix of ``POSITIVE_SUFFIXES`` names but whose zero means nothing too."""


def numeric_fields(config_class: type, prefix: str = "") -> Iterator[tuple[str, type]]:
    """Every int or float field (not bool) of a config dataclass and its sections, as
    (``section.key``, type)."""
    hints = typing.get_type_hints(config_class)
    for field in dataclasses.fields(config_class):
        kind = hints[field.name]
        if dataclasses.is_dataclass(kind):
            yield from numeric_fields(kind, f"{prefix}{field.name}.")  # type: ignore[arg-type]
        elif kind in (int, float):
            yield f"{prefix}{field.name}", kind


def must_be_positive(key: str, zero_allowed: Collection[str] = frozenset(ZERO_ALLOWED)) -> bool:
    """Whether zero is refused for ``key`` (module docstring)."""
    return (key.endswith(POSITIVE_SUFFIXES) or key in POSITIVE_KEYS) and key not in zero_allowed


def _value(config: Any, key: str) -> Any:
    for name in key.split("."):
        config = getattr(config, name)
    return config


def numbers(c: CampaignConfig) -> Iterator[tuple[str, Any]]:
    """``(section.key, value)`` of every number of ``c``: its sections' and its mode
    package's section's (``CampaignConfig.mode_section_name``)."""
    for key, _ in numeric_fields(type(c)):
        yield key, _value(c, key)
    if c.mode_section is not None:
        for key, _ in numeric_fields(type(c.mode_section)):
            yield f"{c.mode_section_name}.{key}", _value(c.mode_section, key)


INTEGER_LIMIT = 2**63
"""Every integer of a config is below this: a seed goes to numpy, torch and HDF5 attributes
(``synth.json``, the injection files) as a 64-bit signed integer, and a count beyond it is
a typo (TOML itself reads integers up to it; ``--set`` reads any)."""


TIME_SUFFIXES: tuple[str, ...] = ("_seconds", "duration", "_fftlength")
"""Keys ending so are a length of time in seconds (``data.duration``, ``model.kernel_seconds``,
``server.sequence_idle_seconds``, a mode package's ``deepclean.frame_seconds`` ...)."""
MAX_SECONDS = 10**9
"""Every length of time of a config is at most this (31.7 years: longer than any detector has
recorded, and than any wait). Each becomes an integer somewhere, and at this bound every one
fits: its microseconds Triton's uint64 ``max_sequence_idle_microseconds`` (10**15), its whole
seconds Triton's int32 ``--exit-timeout-secs`` (below 2**31), its samples at the fastest
rate (65536 Hz) a 64-bit count, a wait ``threading.TIMEOUT_MAX`` (9.2e9 s). Beyond it, a
typo's exponent (1e308 crashed in ``round``, 1e14 in Triton's config)."""
MAX_SECONDS_TEXT = "10**9 s"
"""``MAX_SECONDS`` as a message writes it."""


MAX_RETRIES = 1000
"""Every retry count is at most this. DAGMan reads ``RETRY`` as a C int (``(int) strtol``:
10**12 wraps to a negative count, which it refuses), and run-local tries a node that many
times: a retry mends a preempted slot or a lost server, a handful of times, and a node that
failed a thousand times has a cause no retry mends; a larger count only delays the failure
that names it."""
MAX_PARALLEL_NODES = 10**6
"""``workflow.max_parallel_clients`` and ``max_parallel_merges`` are at most this: DAGMan's
``MAXJOBS``, which it reads as a C int (``(int) strtol``): 10**12 and 2**31 wrapped to a
negative count, which refuses the DAG at submission, and 2**32 + 1 to 1, one client at a time
without a word. A million is more nodes than a campaign has (O3: 1,600 clients, 6,163 shard
merges) and than a pool runs at once: a throttle that high throttles nothing (0 says so)."""
MAX_SERVER_GPUS = 128
"""``server.gpus`` (HTCondor's ``request_gpus``) is at most this: one server is one machine,
and none holds more GPUs (8 or 10 cards; 70 as the MIG slices of 10 A100s); a job asking for
more never matches a slot, and waits in the queue while its clients give up."""
MAX_SERVER_CORES = 4096
"""``server.cpus`` (``request_cpus``) and ``server.instances`` (Triton's instance count: one
python-backend process and, on CPU, one onnxruntime thread each) are at most this: more than
one machine's hardware threads (8 sockets of 60 cores, two threads each: 960), and the
layout counts ``plan`` recommends (``bench.results.MAX_LAYOUT_COUNT``). Beyond, a job that
never matches, and from 2**31 instances an ``export`` that crashed (Triton's int32 count)."""
MAX_GPU_MEMORY_MB = 2**20
"""``server.gpu_memory_mb`` (``gpus_minimum_memory``, in MB) is at most this, 1 TiB: more
than any GPU holds (288 GB); a job asking for more never matches a slot."""
_RETRIES = (MAX_RETRIES, "a count of retries: what fails that often has a cause no retry "
            "mends")
_THROTTLE = (MAX_PARALLEL_NODES, "DAGMan's MAXJOBS, a C int: more nodes than any pool runs "
             "at once; 0 is no limit")
COUNT_BOUNDS: dict[str, tuple[int, str]] = {
    "workflow.retries": _RETRIES,
    "client.max_reconnects": _RETRIES,
    "workflow.max_parallel_clients": _THROTTLE,
    "workflow.max_parallel_merges": _THROTTLE,
    "server.gpus": (MAX_SERVER_GPUS, "HTCondor's request_gpus: more than one machine holds"),
    "server.cpus": (MAX_SERVER_CORES, "HTCondor's request_cpus: more than one machine's "
                    "hardware threads"),
    "server.instances": (MAX_SERVER_CORES, "Triton's instance count, a process each: more "
                         "than one machine's hardware threads"),
    "server.gpu_memory_mb": (MAX_GPU_MEMORY_MB, "HTCondor's gpus_minimum_memory: 1 TiB, more "
                             "than any GPU holds"),
}
"""Each key's largest value and why (the message's words): the counts a scheduler or Triton
takes, each a typo's exponent beyond its bound (the constants above say what it did)."""


FLOAT32_MAX = float(np.finfo(np.float32).max)
"""Every other number of a config is at most the largest float32: the networks compute in
float32, and a larger ``model.input_scale`` (1e308, a typo's exponent) was an infinite buffer
in the exported graph, whose every output was NaN, without a word."""


def check_finite(c: CampaignConfig, fail: Callable[[str, str], None]) -> None:
    """Every number finite (before any rule computes with one: NaN passes every comparison),
    every integer below ``INTEGER_LIMIT`` (before anything is written with one), and every
    length of time at most ``MAX_SECONDS`` (before any is counted in samples)."""
    for key, value in numbers(c):
        if isinstance(value, float) and not math.isfinite(value):
            fail(key, f"must be a finite number, got {value}")

        if isinstance(value, int) and value >= INTEGER_LIMIT:
            fail(key, f"must be below 2**63 (a 64-bit integer), got {value}")
        if key.endswith(TIME_SUFFIXES) and value > MAX_SECONDS:
            fail(key, f"must be at most {MAX_SECONDS_TEXT} (31.7 years: its count of samples or "
                 f"microseconds then fits a 64-bit integer), got {value:g}")


def off_grid(gps: float, sample_rate: float) -> bool:
    """Whether ``gps`` is off the grid of ``sample_rate`` counted from a whole GPS second (where
    frame files start), by more than the float's own resolution (``math.ulp``: a decimal GPS
    time near 1.26e9 is held to 2.4e-7 s). Exact: the float's binary value, as a fraction."""
    position = (Fraction(gps) - math.floor(gps)) * Fraction(sample_rate)
    return abs(position - round(position)) / Fraction(sample_rate) > Fraction(math.ulp(gps))


def check_signs(c: CampaignConfig, fail: Callable[[str, str], None]) -> None:
    """Every number not negative, and above zero where zero means nothing (an integer: at least
    1), before any rule computes with one (a rate divides, a count splits the span)."""
    own = getattr(type(c.mode_section), "ZERO_ALLOWED", frozenset())
    allowed = {**ZERO_ALLOWED, **{f"{c.mode_section_name}.{key}": "" for key in own}}
    for key, value in numbers(c):
        if value < 0:
            meaning = f" (0: {allowed[key]})" if allowed.get(key) else ""
            fail(key, f"must not be negative{meaning}, got {value:g}")
        if value == 0 and must_be_positive(key, allowed):
            least = "at least 1" if isinstance(value, int) else "positive"
            fail(key, f"must be {least}, got {value:g}")


def check_magnitudes(c: CampaignConfig, fail: Callable[[str, str], None]) -> None:
    """Every number at most ``FLOAT32_MAX`` and every count of ``COUNT_BOUNDS`` at most its
    bound (after the rules that say more of a key: a rate's own range names its unit)."""
    for key, value in numbers(c):
        if value > FLOAT32_MAX:
            fail(key, f"must be at most {FLOAT32_MAX:.2g} (the largest float32, which the "
                 f"networks compute in), got {value:g}")
        bound, why = COUNT_BOUNDS.get(key, (value, ""))
        if value > bound:
            fail(key, f"must be at most {bound} ({why}), got {value}")
