"""Names of the campaign's HDF5 output (``merge/output.py`` writes it, ``merge/postprocess.py``
adds the cleaned strain): dataset names from GPS times and gwpy's TimeSeries attributes (each
output's first GPS time over a stretch is ``stretches.output_x0``)."""

from __future__ import annotations

import h5py

from offline_iaas.config import CampaignConfig


def statistic_channel(config: CampaignConfig) -> str:
    ifos = "".join(sorted({ch.split(":", 1)[0] for ch in config.data.channels}))
    return f"{ifos}:OFFLINE_IAAS-STATISTIC"


def gps_text(gps: float) -> str:
    """A GPS time as a dataset name: no trailing zeros (``1262304001``, ``1262304000.125``)."""
    return f"{gps:.6f}".rstrip("0").rstrip(".")


def timeseries_attrs(dataset: h5py.Dataset, channel: str, name: str, x0: float, dx: float,
                     unit: str = "") -> None:
    """gwpy's TimeSeries attributes on ``dataset``."""
    dataset.attrs.update(
        {"channel": channel, "name": name, "unit": unit, "x0": x0, "dx": dx, "xunit": "s"}
    )
