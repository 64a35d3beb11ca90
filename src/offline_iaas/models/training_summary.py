"""The training summary beside the weights (``demo-models.json``): each network's training span.

``train-demo`` writes it (``models/training.py``: each network's configuration, statistics and
span); users may write their own, ``{"networks": {"deepclean-H1": {"gps_start": ...,
"gps_end": ...}, "bbhnet": {...}}}``. ``export --weights DIR`` reads it
(``weights_training_spans``) before it writes anything to the repository, and refuses a file
that is not one in one line naming the file and, where one is wrong, the network and field: a
span is two finite GPS times, the start before the end (JSON's ``NaN``, ``Infinity`` and
``1e999`` are read as numbers, and would be recorded in the manifest as spans no time is in).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from offline_iaas.bounded_read import NotRegularFile, TooLarge, read_text
from offline_iaas.errors import ModelError
from offline_iaas.gps import gps_text
from offline_iaas.json_values import finite_number, json_kind

TRAINING_SUMMARY = "demo-models.json"
"""Written by ``train-demo`` beside the weights; each network's ``gps_start``/``gps_end``."""
FORM = '{"networks": {"<network>": {"gps_start": <GPS>, "gps_end": <GPS>}, ...}}'
"""What a training summary holds, as a refusal says it."""
FIELDS = ("gps_start", "gps_end")


def weights_training_spans(weights: Path | None) -> dict[str, list[float]]:
    """GPS ``[start, end]`` of each network's training data, from the weights directory's
    ``demo-models.json``. Empty when the weights do not say (no such file, or the weights are
    one file): the merge then reports its physics numbers over all the data and says so.
    ModelError, one line naming the file (and the network and field), for a file that cannot
    be read, is not JSON, or whose spans are not pairs of finite GPS times, start first."""
    if weights is None or not Path(weights).is_dir():
        return {}
    path = Path(weights) / TRAINING_SUMMARY
    if not path.exists():
        return {}
    try:  # a FIFO (its open would wait for a writer) and /dev/zero refused, not read
        summary = json.loads(read_text(path))
    except NotRegularFile as err:
        raise ModelError(f"{path}: is {err.kind}, not a training summary ({FORM})") from None
    except OSError as err:
        raise ModelError(f"{path}: cannot read: {err.strerror or err}") from None
    except TooLarge as err:
        raise _not_a_summary(path, str(err)) from None
    except ValueError as err:  # not JSON, or not UTF-8 text
        raise _not_a_summary(path, f"not JSON ({err})") from None
    networks = summary.get("networks") if isinstance(summary, dict) else None
    if not isinstance(networks, dict):
        held = ("no 'networks'" if not isinstance(summary, dict) or "networks" not in summary
                else f"'networks' is {_shown(networks)}, not an object of networks")
        raise _not_a_summary(path, held)
    return {name: _span(path, name, report) for name, report in networks.items()}


def _span(path: Path, name: str, report: Any) -> list[float]:
    """Network ``name``'s ``[gps_start, gps_end]`` from its entry ``report``, or ModelError."""
    where = f"{path}: networks.{name}"
    if not isinstance(report, dict):
        raise ModelError(f"{where} must be an object holding gps_start and gps_end, got "
                         f"{_shown(report)}")
    span = []
    for field in FIELDS:
        value = report.get(field)
        if not finite_number(value):
            got = "nothing" if field not in report else _shown(value)
            raise ModelError(f"{where}.{field} must be a finite GPS time, got {got}")
        span.append(float(value))
    if not span[0] < span[1]:
        start, end = (gps_text(time) for time in span)
        raise ModelError(f"{where}: gps_start {start} is not before gps_end {end} (the span of "
                         "the data the network trained on)")
    return span


def _not_a_summary(path: Path, why: str) -> ModelError:
    return ModelError(f"{path}: not a training summary ({FORM}): {why}")


def _shown(value: Any) -> str:
    """``value`` as a refusal quotes it: a number as written (``nan``, ``inf``), else JSON's
    kind of value and, for a string, itself."""
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return repr(value)
    return json_kind(value)
