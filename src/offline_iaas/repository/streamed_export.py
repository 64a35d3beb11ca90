"""The networks a repository serves streamed layer by layer (``model.streamed``), exported.

``export`` asks here before it writes the fused model. With ``false``, or where the config
keeps the networks whole-window (``network_streaming.whole_window_reason``), nothing is
exported. Otherwise each ``streamed`` stage's network is exported (``streamed.py``,
``streamed_deepclean.py``); weights or a stride the network cannot be streamed with raise
``NotStreamable``, which ``true`` lets through (export refuses) and ``auto`` turns into the
whole-window graphs, with the reason in one line.
"""

from __future__ import annotations

import logging
from pathlib import Path

from offline_iaas.config import CampaignConfig
from offline_iaas.errors import NotStreamable
from offline_iaas.network_streaming import AUTO, served_as, whole_window_reason
from offline_iaas.repository import pipeline

logger = logging.getLogger(__name__)


def streamed_networks(config: CampaignConfig, weights: Path | None,
                      canary_weights: Path | None, tmp: Path, ensemble: bool = False
                      ) -> dict[str, Path]:
    """Each network the repository serves streamed, its graphs exported into ``tmp``
    (network name → directory); none for the whole-window graphs. With ``auto`` one line
    says which it is and why."""
    if config.model.streamed is False:
        return {}
    # true past the config check and export's --ensemble refusal: found is None, no ensemble
    found = whole_window_reason(config)
    if found is not None or ensemble:
        reason = found[1] if found else "the --ensemble layout serves whole windows"
    else:
        try:
            out = _export(served_as(config, True), weights, canary_weights, tmp)
        except NotStreamable as err:
            if config.model.streamed is True:
                raise
            reason = err.reason
        else:
            if config.model.streamed == AUTO:
                logger.info("model.streamed = auto: %s streamed layer by layer (each layer "
                            "once per sample)", " and ".join(sorted({_NAMES[n] for n in out})))
            return out
    logger.info("model.streamed = auto: the networks are served on whole windows: %s", reason)
    return {}


_NAMES = {"bbhnet": "BBHnet", "deepclean": "DeepClean", pipeline.CANARY_NETWORK: "DeepClean",
          "classifier": "the classifier"}


def _export(config: CampaignConfig, weights: Path | None, canary_weights: Path | None,
            tmp: Path) -> dict[str, Path]:
    """Each streamed stage's network exported into ``tmp``: network name → directory."""
    streamed = {stage.params["network"] for stage in pipeline.stages(config)
                if stage.kind == "streamed"}
    out = {}
    if "classifier" in streamed:
        from offline_iaas.repository.streamed import export_campaign_classifier

        out["classifier"] = export_campaign_classifier(config, weights, tmp)
    if "bbhnet" in streamed:
        from offline_iaas.repository.streamed import export_campaign_network

        out["bbhnet"] = export_campaign_network(config, weights, tmp)
    if streamed & {"deepclean", pipeline.CANARY_NETWORK}:
        from offline_iaas.repository.streamed_deepclean import export_campaign_deepclean

        out["deepclean"] = export_campaign_deepclean(config, weights, tmp)
        if pipeline.CANARY_NETWORK in streamed:
            out[pipeline.CANARY_NETWORK] = export_campaign_deepclean(
                config, canary_weights, tmp, pipeline.CANARY_NETWORK)
    return out
