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
                with search.inject, the raw strain subtract took ``cleaned`` from, ``raw``
                (delayed like ``cleaned``): raw ─► snapshotter_raw ─► raw_windows ─► bbhnet
                ─► statistic_raw (time slides: timeslides_raw ─► background_raw)

A mode's chain is its package's (``BuiltInParts.stages``: ``science/<mode>/stages.py``); the
classifier's, and a mode of another distribution's, is the one-network chain of ``stages``.
``update`` is ``[channels, n S]`` of the streamed channels (``CampaignConfig.stream_channels``);
with the rolling whitening in mode bbhnet a foreground's requests (``search.inject``) carry
``psd_update`` too, the clean strain at the same times: the whitening estimates its PSD from it
and whitens the injected strain with it (the background's PSD, as aframe whitens its injections);
``statistic`` is ``[n]``, one per window; ``noise`` is ``[ifos, n S]``, the averaged prediction
of the strides the request's windows completed (``averaging_delay_windows`` behind them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from offline_iaas.config import CampaignConfig
from offline_iaas.mode_packages import mode_package
from offline_iaas.network_streaming import streams
from offline_iaas.repository.backend.stateful import PSD_UPDATE


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
    """The mode's stages, in order: its package's (``BuiltInParts.stages``), or one network on
    the snapshotter's windows (streamed on the update itself with ``model.streamed``)."""
    package = mode_package(config.model.mode)
    if package is not None and package.built_in.stages is not None:
        return list(package.built_in.stages(config))
    (network,) = config.mode.networks
    channels = len(config.stream_channels)
    if streams(config):
        return [Stage(network, "streamed", {"update": "update"}, {"statistic": "statistic"},
                      channels, {"network": network})]
    return [snapshot_stage(channels),
            Stage(network, "network", {"windows": "windows"}, {"statistic": "statistic"})]


def snapshot_stage(channels: int) -> Stage:
    """The snapshotter on the ``channels`` streamed channels: ``update`` → ``windows``."""
    return Stage("snapshotter", "snapshot", {"update": "update"}, {"windows": "windows"},
                 channels)


def takes_psd_update(config: CampaignConfig) -> bool:
    """Whether the chain takes ``psd_update``: the clean strain a foreground's requests carry
    beside the injected one, whose PSD whitens them (the rolling whitening, mode bbhnet)."""
    return any(PSD_UPDATE in stage.inputs.values() for stage in stages(config))


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
