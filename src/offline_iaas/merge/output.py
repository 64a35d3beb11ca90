"""The campaign's HDF5 output, written by the merge and by the reference alike.

One gwpy TimeSeries dataset per output, readable with
``TimeSeries.read(path, format="hdf5", path="statistic")``. The statistic is stamped at the end
of each window (``x0`` = span start + one stride, ``dx`` = stride). Provenance goes on the file's
attributes (gwpy refuses extra attributes on a dataset).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from offline_iaas.config import CampaignConfig
from offline_iaas.workflow.plan import window_gps


def statistic_channel(config: CampaignConfig) -> str:
    ifos = "".join(sorted({ch.split(":", 1)[0] for ch in config.data.channels}))
    return f"{ifos}:OFFLINE_IAAS-STATISTIC"


def write_output(
    path: Path, config: CampaignConfig, outputs: dict[str, np.ndarray], attrs: dict[str, Any]
) -> None:
    """Write the outputs atomically (temporary name, then rename)."""
    from gwpy.timeseries import TimeSeries

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    stride_seconds = config.stride_samples / config.data.sample_rate
    try:
        with h5py.File(tmp, "w") as f:
            for name, values in outputs.items():
                series = TimeSeries(
                    values,
                    t0=window_gps(config, 0),
                    dt=stride_seconds,
                    name=name,
                    channel=statistic_channel(config),
                )
                series.write(f, path=name, format="hdf5")
            for key, value in {**attrs, "config_hash": config.config_hash()}.items():
                f.attrs[key] = value
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def read_outputs(path: Path) -> dict[str, tuple[np.ndarray, float, float]]:
    """Every dataset of an output file as (values, x0, dx)."""
    with h5py.File(path, "r") as f:
        return {
            name: (f[name][()], float(f[name].attrs["x0"]), float(f[name].attrs["dx"]))
            for name in f
        }


def max_relative_difference(campaign: Path, reference: Path) -> dict[str, float]:
    """Per output: max |campaign - reference| / max |reference|.

    Relative to the reference's largest magnitude rather than element by element, so values
    crossing zero do not blow the ratio up. Mismatched names, lengths or time stamps give inf.
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
        scale = float(np.max(np.abs(b))) or 1.0
        result[name] = float(np.max(np.abs(a.astype(np.float64) - b))) / scale
    return result
