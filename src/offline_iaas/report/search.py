"""The statistic series of the campaign file for plotting (reduced when long): every mode
storing ``statistic`` has them.

The statistic is read a slice at a time; when a campaign has more values than a plot can
show, each block of consecutive values is reduced to its largest, so no peak is lost.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

READ_SLICE = 1 << 20
"""Values read from a dataset at a time."""


@dataclass(frozen=True)
class StatisticTrace:
    """One stretch of the statistic, possibly reduced: time (GPS) and value."""

    time: np.ndarray
    value: np.ndarray
    block: int
    """Values reduced into each point (1: not reduced)."""


def block_maxima(values: np.ndarray, block: int) -> np.ndarray:
    """The largest value of each block of ``block`` consecutive values (the last may be short)."""
    if block <= 1:
        return values
    full = len(values) // block * block
    head = values[:full].reshape(-1, block).max(axis=1)
    return np.concatenate([head, values[full:].max(keepdims=True)]) if full < len(values) else head


def statistic_traces(path: Path, max_points: int = 20000) -> list[StatisticTrace]:
    """Every stretch of ``statistic/`` in time order, with at most about ``max_points`` in all.

    Returns an empty list when the file has no statistic.
    """
    with h5py.File(path, "r") as f:
        group = f.get("statistic")
        if not isinstance(group, h5py.Group) or not len(group):
            return []
        names = sorted(group, key=float)
        total = sum(len(group[n]) for n in names)
        block = max(1, -(-total // max_points))
        traces = []
        for name in names:
            data = group[name]
            x0, dx = float(data.attrs["x0"]), float(data.attrs["dx"])
            step = READ_SLICE // block * block or block
            reduced = [block_maxima(np.asarray(data[i : i + step]), block)
                       for i in range(0, len(data), step)]
            values = np.concatenate(reduced) if reduced else np.empty(0, np.float32)
            # a reduced point sits at the start of its block
            times = x0 + np.arange(len(values)) * dx * block
            traces.append(StatisticTrace(times, values, block))
    return traces
