"""Names of the campaign's HDF5 output (``merge/output.py`` writes it, ``merge/postprocess.py``
adds the cleaned strain): dataset names from GPS times and gwpy's TimeSeries attributes (each
output's first GPS time over a stretch is ``stretches.output_x0``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import h5py
import numpy as np

from offline_iaas.config import CampaignConfig
from offline_iaas.mode_packages import mode_package
from offline_iaas.modes import Outputs
from offline_iaas.stretches import Stretch

WINDOW_GROUPS: tuple[str, ...] = ("statistic", "slides")
"""Groups of per-window series: the statistic and the slides' background."""


def series_groups(mode: str, outputs: Outputs) -> tuple[str, ...]:
    """Groups of time series in a merge's file of a campaign of ``mode`` (``model.mode``),
    which the index stitches across the shards: the per-window ``WINDOW_GROUPS``, the
    per-sample ``outputs`` (``noise``, ``noise_canary``), and the per-sample series the mode's
    post-processing writes (``BuiltInParts.series_products``: ``clean``, ``clean_canary``)."""
    package = mode_package(mode)
    products = package.built_in.series_products if package is not None else ()
    return WINDOW_GROUPS + outputs.sample_series + products


def campaign_root_attrs(config: CampaignConfig, stretches: Sequence[Stretch],
                        provenance: dict[str, Any]) -> dict[str, Any]:
    """The root attributes every campaign file carries (a merge's, the index's, the
    in-process reference's): the hashes it was made under, its stretches' GPS bounds, the
    mode and the provenance (``provenance.campaign_provenance``) as JSON."""
    bounds = np.array([[s.gps_start, s.gps_end] for s in stretches], dtype=np.float64)
    return {"stream_hash": config.stream_hash(), "merge_hash": config.merge_hash(),
            "stretches": bounds, "mode": config.model.mode,
            "provenance": json.dumps(provenance, sort_keys=True)}


def statistic_channel(ifos: tuple[str, ...]) -> str:
    """The statistic's channel name: the detectors it searched, as one prefix."""
    return f"{''.join(sorted(ifos))}:OFFLINE_IAAS-STATISTIC"


def timeseries_attrs(dataset: h5py.Dataset, channel: str, name: str, x0: float, dx: float,
                     unit: str = "") -> None:
    """gwpy's TimeSeries attributes on ``dataset``."""
    dataset.attrs.update(
        {"channel": channel, "name": name, "unit": unit, "x0": x0, "dx": dx, "xunit": "s"}
    )


def series_attrs(dataset: h5py.Dataset, config: CampaignConfig, group: str, ifo_index: int,
                 x0: float) -> None:
    """The attributes of a series of ``group`` (``statistic``, ``slides``, ``noise``,
    ``clean`` and their ``_canary``) starting at GPS ``x0``, for interferometer
    ``config.ifos[ifo_index]`` (strain groups)."""
    if group == "statistic":
        timeseries_attrs(dataset, statistic_channel(config.ifos), "statistic", x0,
                         config.stride_seconds)
        return
    if group == "slides":
        dataset.attrs.update({"x0": x0, "dx": config.stride_seconds,
                              "shift_seconds": config.search.slide_seconds})
        return
    strain = config.data.channels[ifo_index]
    package = mode_package(config.model.mode)
    if package is None or package.built_in.series_channel is None:
        raise ValueError(f"mode {config.model.mode!r} names no channel of its {group!r}")
    channel = package.built_in.series_channel(config, group, strain)
    timeseries_attrs(dataset, channel, group, x0, 1 / config.data.sample_rate, "strain")
