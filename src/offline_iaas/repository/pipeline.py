"""The steps of each campaign mode's server ensemble, and the same steps run in-process.

A mode is a chain of **stages**: stateful ones (``snapshot``, ``average``: one state per
stream, ``repository/backend/stateful.py``) and stateless ONNX networks
(built by the mode packages, ``science/<mode>/graphs.py``). ``export`` writes each stage as
a model and the chain as the ensemble clients call (``export --ensemble``); by default the cpu
flavor serves the whole chain as one fused model (``backend/fused.py``), whose per-stream
step ``backend/stateful.ModeStream`` is also what ``mode_stream`` runs in one process (the
reference). Tensors are named as in the ensemble::

    classifier  update ─► snapshotter ─► windows ─► classifier ─► statistic
                (model.streamed: update ─► classifier (streamed layer by layer) ─► statistic)
    bbhnet      update ─► snapshotter ─► windows ─► bbhnet ─► statistic
                (model.streamed: update ─► bbhnet (streamed layer by layer) ─► statistic;
                 in e2e alike: cleaned ─► bbhnet (streamed) ─► statistic, raw ─► bbhnet_raw)
                (time slides: update ─► timeslides (runs bbhnet's graph) ─► background)
    deepclean   update ─► snapshotter ─► windows ─► deepclean ─► prediction ─► averager ─► noise
                (model.streamed: update ─► deepclean (streamed) ─► prediction ─► averager; e2e
                 keeps the snapshotter for subtract's windows)
    e2e         ... ─► averager ─► noise; (windows, noise) ─► subtract ─► cleaned
                    ─► snapshotter_clean ─► clean_windows ─► bbhnet ─► statistic
                (time slides: cleaned ─► timeslides (runs bbhnet's graph) ─► background)
                with bbhnet.inject, the raw strain subtract took ``cleaned`` from, ``raw``
                (delayed like ``cleaned``): raw ─► snapshotter_raw ─► raw_windows ─► bbhnet
                ─► statistic_raw (time slides: timeslides_raw ─► background_raw)

``update`` is ``[channels, n S]`` of the streamed channels (``CampaignConfig.stream_channels``);
with the rolling whitening in mode bbhnet a foreground's requests (``bbhnet.inject``) carry
``psd_update`` too, the clean strain at the same times: the whitening estimates its PSD from it
and whitens the injected strain with it (the background's PSD, as aframe whitens its injections);
``statistic`` is ``[n]``, one per window; ``noise`` is ``[ifos, n S]``, the averaged prediction
of the strides the request's windows completed (``averaging_delay_windows`` behind them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from offline_iaas.config import CampaignConfig
from offline_iaas.modes import RAW
from offline_iaas.network_streaming import streams
from offline_iaas.physics import WHITENING_HIGH_FRACTION, WHITENING_LOW_HZ, whitening_band
from offline_iaas.repository.backend.stateful import PSD_UPDATE

CANARY_NETWORK = "deepclean_canary"
"""The canary DeepClean's graph and stage (``deepclean.canary``)."""


@dataclass(frozen=True)
class Stage:
    """One model of the ensemble."""

    model: str
    kind: str
    """``snapshot``, ``average``, ``timeslide``, ``whiten``, ``streamed`` (stateful: a network
    streamed layer by layer, ``backend/streamed_network.py``), ``streamed_timeslide`` (its
    time slides) or ``network`` (an ONNX graph)."""
    inputs: dict[str, str] = field(default_factory=dict)
    """Model tensor name → ensemble tensor name."""
    outputs: dict[str, str] = field(default_factory=dict)
    channels: int = 0
    """Channels of a stateful stage's state."""
    params: dict[str, object] = field(default_factory=dict)
    """A ``timeslide`` or ``whiten`` stage's parameters (``stateful.TimeSlides``,
    ``stateful.RollingWhitening``); a ``streamed`` stage's ``network`` (its graphs)."""

    @property
    def stateful(self) -> bool:
        return self.kind != "network"

    def to_dict(self) -> dict[str, object]:
        """The stage as ``backend/stateful.ModeStream`` takes it (JSON in the fused model)."""
        return {"model": self.model, "kind": self.kind, "inputs": dict(self.inputs),
                "outputs": dict(self.outputs), "channels": self.channels,
                "params": dict(self.params)}


def stages(config: CampaignConfig) -> list[Stage]:
    """The mode's stages, in order."""
    mode, ifos = config.mode, len(config.ifos)
    snapshot = Stage("snapshotter", "snapshot", {"update": "update"}, {"windows": "windows"},
                     len(config.stream_channels))
    if not mode.averages:  # one network on the windows: the statistic
        (network,) = mode.networks
        if mode.triggers:
            return _bbhnet(config, "update", snapshot)
        if streams(config):
            return [Stage(network, "streamed", {"update": "update"}, {"statistic": "statistic"},
                          len(config.stream_channels), {"network": network})]
        return [snapshot, Stage(network, "network", {"windows": "windows"},
                                {"statistic": "statistic"})]
    chain = [
        *([] if streams(config) and mode.snapshots == 1 else [snapshot]),
        _deepclean(config, "deepclean", "prediction"),
        Stage("averager", "average", {"prediction": "prediction"}, {"noise": "noise"}, ifos),
    ]
    if config.deepclean.canary:  # the canary on the same data, averaged on its own
        chain += [
            _deepclean(config, CANARY_NETWORK, "canary_prediction"),
            Stage("averager_canary", "average", {"prediction": "canary_prediction"},
                  {"noise": "noise_canary"}, ifos),
        ]
    if mode.snapshots == 2:  # the cleaned strain windowed again for BBHnet
        raw = config.outputs.searches_raw_strain
        chain += [
            Stage("subtract", "network", {"windows": "windows", "noise": "noise"},
                  {"cleaned": "cleaned", **({"strain": "raw"} if raw else {})}),
            *_bbhnet(config, "cleaned", Stage("snapshotter_clean", "snapshot",
                                              {"update": "cleaned"},
                                              {"windows": "clean_windows"}, ifos)),
        ]
        if raw:  # the same search on the strain before the subtraction, delayed alike
            chain += _bbhnet(config, "raw", Stage("snapshotter_raw", "snapshot",
                                                  {"update": "raw"},
                                                  {"windows": "raw_windows"}, ifos), RAW)
    return chain


def _deepclean(config: CampaignConfig, network: str, prediction: str) -> Stage:
    """DeepClean's window predictions: the network on the snapshotter's windows, or with
    ``model.streamed`` streamed layer by layer on the update itself."""
    if streams(config):
        return Stage(network, "streamed", {"update": "update"}, {"prediction": prediction},
                     len(config.stream_channels), {"network": network})
    return Stage(network, "network", {"windows": "windows"}, {"prediction": prediction})


def _bbhnet(config: CampaignConfig, strain: str, snapshot: Stage, suffix: str = ""
            ) -> list[Stage]:
    """BBHnet on windows of the ``strain`` tensor (``[ifos, n S]``): the ``snapshot`` stage's
    (or, with the rolling whitening, the whitened windows), the network, and the time
    slides; their outputs (and stateful stages) named with ``suffix``. With
    ``model.streamed``, one ``streamed`` stage on the strain itself."""
    b, ifos = config.bbhnet, len(config.ifos)
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


def takes_psd_update(config: CampaignConfig) -> bool:
    """Whether the chain takes ``psd_update``: the clean strain a foreground's requests carry
    beside the injected one, whose PSD whitens them (the rolling whitening, mode bbhnet)."""
    return any(PSD_UPDATE in stage.inputs.values() for stage in stages(config))


def _time_slides(config: CampaignConfig, windows: str, suffix: str = "",
                 kind: str = "timeslide") -> list[Stage]:
    """BBHnet on the slid pairs of the ``windows`` tensor (``bbhnet.slides``): the
    ``background`` output, ``[n * slides]`` per request (NaN where a slide's second window is
    in the stream's warm-up); ``streamed_timeslide``: of the strain tensor ``windows`` names,
    each slide streamed layer by layer."""
    if not config.has_slides:
        return []
    tensor = "windows" if kind == "timeslide" else "update"
    return [Stage(f"timeslides{suffix}", kind, {tensor: windows},
                  {"background": f"background{suffix}"}, 2, {"slide_windows": config.slide_windows,
                      "slides": config.bbhnet.slides,
                      "warmup_windows": config.stretch_warmup_windows, "network": "bbhnet"})]


def onnx_session(path: Path, threads: int = 1, device: str = "cpu"):
    """An onnxruntime session configured like the fused model's (``stateful.open_session``)."""
    from offline_iaas.repository.backend.stateful import open_session

    return open_session(str(path), device, 0, threads)


def mode_stream(config: CampaignConfig, sessions: dict[str, object]):
    """The mode's stages for one stream, in-process (``backend/stateful.ModeStream``, the
    fused model's step): ``.update([channels, n S])`` → ``{output: values}``.

    ``sessions``: one onnxruntime session per network stage (model name → session), shared by
    every stream.
    """
    from offline_iaas.repository.backend.stateful import ModeStream

    return ModeStream([stage.to_dict() for stage in stages(config)], config.kernel_samples,
                      config.stride_samples, list(config.outputs.names), sessions)
