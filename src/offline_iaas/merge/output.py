"""The campaign's HDF5 output, written by the merge and by the reference alike.

One dataset per output and analysable stretch, at ``<output>/<GPS start of its first window>``
(e.g. ``statistic/1262304001``), in gwpy's TimeSeries layout, so each reads with
``TimeSeries.read(path, format="hdf5", path="statistic/1262304001")`` (``read_campaign`` reads
them all). A value is stamped at the end of its window (``dx`` = stride). There are no samples
inside gaps. Provenance goes on the file's attributes (gwpy refuses extra dataset attributes),
with the stretches as ``stretches`` (rows of GPS start, end).

Datasets are written slice by slice into a temporary file renamed on ``commit``, so memory does
not grow with the span and a half-written file never carries the final name.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from offline_iaas.config import CampaignConfig
from offline_iaas.workflow.plan import Stretch, stride_seconds, window_gps

OUTPUTS = ("statistic",)


def statistic_channel(config: CampaignConfig) -> str:
    ifos = "".join(sorted({ch.split(":", 1)[0] for ch in config.data.channels}))
    return f"{ifos}:OFFLINE_IAAS-STATISTIC"


def gps_text(gps: float) -> str:
    """A GPS time as a dataset name: no trailing zeros (``1262304001``, ``1262304000.125``)."""
    return f"{gps:.6f}".rstrip("0").rstrip(".")


class CampaignWriter:
    """Writes the campaign file stretch by stretch, slice by slice.

    Parameters
    ----------
    path
        Final path; the file is written under a temporary name until ``commit``.
    config, stretches
        The campaign and its analysable stretches.
    """

    def __init__(self, path: Path, config: CampaignConfig, stretches: list[Stretch]) -> None:
        self.path = path
        self.config = config
        self.stretches = stretches
        path.parent.mkdir(parents=True, exist_ok=True)
        for stale in path.parent.glob(f".{path.name}.*.tmp"):  # left by a killed writer
            stale.unlink(missing_ok=True)
        self.tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        self.file = h5py.File(self.tmp, "w")
        self.names: dict[tuple[str, int], str] = {}
        for output in OUTPUTS:
            for stretch in stretches:
                first = window_gps(config, stretch, config.warmup_windows)
                name = f"{output}/{gps_text(first)}"
                dataset = self.file.create_dataset(
                    name, shape=(stretch.kept_windows(config),), dtype=np.float32
                )
                dataset.attrs.update(
                    {
                        "channel": statistic_channel(config),
                        "name": output,
                        "unit": "",
                        "x0": first,
                        "dx": stride_seconds(config),
                        "xunit": "s",
                    }
                )
                self.names[(output, stretch.index)] = name

    def write(self, output: str, stretch: int, kept_offset: int, values: np.ndarray) -> None:
        """Write ``values`` at kept window ``kept_offset`` of a stretch."""
        dataset = self.file[self.names[(output, stretch)]]
        dataset[kept_offset : kept_offset + len(values)] = values

    def commit(self, attrs: dict[str, Any]) -> Path:
        """Add provenance, close, and give the file its final name."""
        bounds = np.array([[s.gps_start, s.gps_end] for s in self.stretches], dtype=np.float64)
        self.file.attrs.update(
            {**attrs, "config_hash": self.config.config_hash(), "stretches": bounds}
        )
        self.file.close()
        os.replace(self.tmp, self.path)
        return self.path

    def discard(self) -> None:
        """Close and delete the temporary file (after a failure)."""
        if self.file.id.valid:
            self.file.close()
        self.tmp.unlink(missing_ok=True)


def read_outputs(path: Path) -> dict[str, tuple[np.ndarray, float, float]]:
    """Every dataset of an output file as ``name -> (values, x0, dx)``."""
    found: dict[str, tuple[np.ndarray, float, float]] = {}

    def visit(name: str, item: Any) -> None:
        if isinstance(item, h5py.Dataset):
            found[name] = (item[()], float(item.attrs["x0"]), float(item.attrs["dx"]))

    with h5py.File(path, "r") as f:
        f.visititems(visit)
    return found


def read_campaign(path: Path, output: str = "statistic") -> list:
    """An output's stretches as gwpy TimeSeries, in time order."""
    from gwpy.timeseries import TimeSeries

    with h5py.File(path, "r") as f:
        names = sorted(f[output], key=float)
    return [TimeSeries.read(path, format="hdf5", path=f"{output}/{n}") for n in names]


def max_relative_difference(campaign: Path, reference: Path) -> dict[str, float]:
    """Per dataset: max |campaign - reference| / max |reference|.

    Relative to the reference's largest magnitude rather than element by element, so values
    crossing zero do not blow the ratio up. A dataset missing on either side, or with another
    length or time stamps, gives inf.
    """
    ours, theirs = read_outputs(campaign), read_outputs(reference)
    result = {}
    for name in sorted(set(ours) | set(theirs)):
        if name not in ours or name not in theirs:
            result[name] = float("inf")
            continue
        (a, a0, adx), (b, b0, bdx) = ours[name], theirs[name]
        if a.shape != b.shape or a0 != b0 or adx != bdx:
            result[name] = float("inf")
            continue
        scale = float(np.max(np.abs(b))) if b.size else 1.0
        diff = float(np.max(np.abs(a.astype(np.float64) - b))) if a.size else 0.0
        result[name] = diff / (scale or 1.0)
    return result
