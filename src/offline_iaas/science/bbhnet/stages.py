"""BBHnet's stages on windows of a strain tensor: the snapshot (or the rolling whitening),
the network, and the time slides; with ``model.streamed``, one streamed stage on the strain
itself (``repository/pipeline.py`` says what a stage is)."""

from __future__ import annotations

import numpy as np

from offline_iaas.config import CampaignConfig
from offline_iaas.network_streaming import streams
from offline_iaas.physics import WHITENING_HIGH_FRACTION, WHITENING_LOW_HZ, whitening_band
from offline_iaas.repository.backend.stateful import PSD_UPDATE
from offline_iaas.repository.pipeline import Stage, snapshot_stage


def search_stages(config: CampaignConfig) -> list[Stage]:
    """Mode ``bbhnet``: the search on the streamed strain."""
    return bbhnet_stages(config, "update", snapshot_stage(len(config.stream_channels)))


def bbhnet_stages(config: CampaignConfig, strain: str, snapshot: Stage, suffix: str = ""
                  ) -> list[Stage]:
    """BBHnet on windows of the ``strain`` tensor (``[ifos, n S]``): the ``snapshot`` stage's
    (or, with the rolling whitening, the whitened windows), the network, and the time
    slides; their outputs (and stateful stages) named with ``suffix``. With
    ``model.streamed``, one ``streamed`` stage on the strain itself."""
    b, ifos = config.search, len(config.ifos)
    if streams(config):  # no windows: the layers on the stream (fixed whitening)
        return [Stage(f"bbhnet{suffix}", "streamed", {"update": strain},
                      {"statistic": f"statistic{suffix}"}, ifos, {"network": "bbhnet"}),
                *_time_slides(config, strain, suffix, "streamed_timeslide")]
    first = snapshot
    if config.rolling_whitening:
        rate = config.data.sample_rate
        # on the streamed strain (mode bbhnet) a foreground's requests may carry the clean
        # strain, whose PSD whitens them
        inputs = {"update": strain, **({PSD_UPDATE: PSD_UPDATE} if strain == "update" else {})}
        first = Stage("whitening", "whiten", inputs, {"windows": "white_windows"},
                      ifos, {"psd_samples": round(b.psd_seconds * rate),
                             "fft_samples": round(b.psd_fftlength * rate),
                             "crop_samples": round(b.whitening_crop_seconds * rate),
                             "sample_rate": rate, "band": whitening_band(
                                 np.fft.rfftfreq(config.kernel_samples, 1 / rate),
                                 WHITENING_LOW_HZ, WHITENING_HIGH_FRACTION * rate / 2).tolist()})
    (windows,) = first.outputs.values()
    return [first, Stage("bbhnet", "network", {"windows": windows},
                         {"statistic": f"statistic{suffix}"}),
            *_time_slides(config, windows, suffix)]


def _time_slides(config: CampaignConfig, windows: str, suffix: str = "",
                 kind: str = "timeslide") -> list[Stage]:
    """BBHnet on the slid pairs of the ``windows`` tensor (``search.slides``): the
    ``background`` output, ``[n * slides]`` per request (NaN where a slide's second window is
    in the stream's warm-up); ``streamed_timeslide``: of the strain tensor ``windows`` names,
    each slide streamed layer by layer."""
    if not config.has_slides:
        return []
    tensor = "windows" if kind == "timeslide" else "update"
    return [Stage(f"timeslides{suffix}", kind, {tensor: windows},
                  {"background": f"background{suffix}"}, 2, {"slide_windows": config.slide_windows,
                      "slides": config.search.slides,
                      "warmup_windows": config.stretch_warmup_windows, "network": "bbhnet"})]
