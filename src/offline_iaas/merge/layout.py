"""Names and time stamps of the campaign's HDF5 output (``merge/output.py`` writes it,
``merge/postprocess.py`` adds the cleaned strain): dataset names from GPS times, each output's
first GPS time over a stretch, and gwpy's TimeSeries attributes."""

from __future__ import annotations

import h5py

from offline_iaas.config import CampaignConfig
from offline_iaas.stretches import Stretch, window_gps


def statistic_channel(config: CampaignConfig) -> str:
    ifos = "".join(sorted({ch.split(":", 1)[0] for ch in config.data.channels}))
    return f"{ifos}:OFFLINE_IAAS-STATISTIC"


def gps_text(gps: float) -> str:
    """A GPS time as a dataset name: no trailing zeros (``1262304001``, ``1262304000.125``)."""
    return f"{gps:.6f}".rstrip("0").rstrip(".")


def output_x0(config: CampaignConfig, stretch: Stretch, output: str) -> float:
    """GPS of the first value of an output over a stretch.

    The statistic is stamped at the end of its window; the averaged prediction (``noise``)
    at the start of its sample. Both lag the row that carries them by the averaging delay.
    """
    first_row = config.warmup_windows - config.averaging_delay_windows
    if output == "statistic":
        return window_gps(config, stretch, first_row)
    return stretch.gps_start + first_row * config.stride_seconds


def timeseries_attrs(dataset: h5py.Dataset, channel: str, name: str, x0: float, dx: float,
                     unit: str = "") -> None:
    """gwpy's TimeSeries attributes on ``dataset``."""
    dataset.attrs.update(
        {"channel": channel, "name": name, "unit": unit, "x0": x0, "dx": dx, "xunit": "s"}
    )
