"""DeepClean's stages: the snapshot, the network (or, with ``model.streamed``, the network
streamed on the update itself), the online average, and the canary beside them
(``repository/pipeline.py`` says what a stage is)."""

from __future__ import annotations

from offline_iaas.config import CampaignConfig
from offline_iaas.network_streaming import streams
from offline_iaas.repository.pipeline import Stage, snapshot_stage
from offline_iaas.science.deepclean.settings import CANARY_NETWORK, deepclean_settings


def cleaning_stages(config: CampaignConfig) -> list[Stage]:
    """DeepClean's averaged prediction (``noise``) of the streamed channels, and the canary's
    (``noise_canary``) with ``deepclean.canary``. The snapshot is left out where DeepClean
    streams and nothing after it needs the windows (mode ``deepclean``)."""
    ifos = len(config.ifos)
    windowed = not streams(config) or config.mode.snapshots > 1
    chain = [
        *([snapshot_stage(len(config.stream_channels))] if windowed else []),
        _deepclean(config, "deepclean", "prediction"),
        Stage("averager", "average", {"prediction": "prediction"}, {"noise": "noise"}, ifos),
    ]
    if deepclean_settings(config).canary:  # the canary on the same data, averaged on its own
        chain += [
            _deepclean(config, CANARY_NETWORK, "canary_prediction"),
            Stage("averager_canary", "average", {"prediction": "canary_prediction"},
                  {"noise": "noise_canary"}, ifos),
        ]
    return chain


def _deepclean(config: CampaignConfig, network: str, prediction: str) -> Stage:
    """DeepClean's window predictions: the network on the snapshotter's windows, or with
    ``model.streamed`` streamed layer by layer on the update itself."""
    if streams(config):
        return Stage(network, "streamed", {"update": "update"}, {"prediction": prediction},
                     len(config.stream_channels), {"network": network})
    return Stage(network, "network", {"windows": "windows"}, {"prediction": prediction})
