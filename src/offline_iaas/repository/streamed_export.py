"""The networks a repository serves streamed layer by layer (``model.streamed``), exported.

``export`` asks here before it writes the fused model. With ``false``, or where the config
keeps the networks whole-window (``network_streaming.whole_window_reason``), nothing is
exported. Otherwise each ``streamed`` stage's network is exported by its mode package's
``StreamedExport`` (``science/bbhnet/streamed.py``, ``science/deepclean/streamed.py``);
weights or a stride the network cannot be streamed with raise ``NotStreamable``, which
``true`` lets through (export refuses) and ``auto`` turns into the whole-window graphs, with
the reason in one line.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from offline_iaas.config import CampaignConfig
from offline_iaas.errors import NotStreamable
from offline_iaas.mode_packages import StreamedExport, mode_package
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
        exports = mode_package(config.model.mode).built_in.streamed
        try:
            out = _export(served_as(config, True), exports, weights, canary_weights, tmp)
        except NotStreamable as err:
            if config.model.streamed is True:
                raise
            reason = err.reason
        else:
            if config.model.streamed == AUTO:
                titles = sorted({exports[network].title for network in out})
                logger.info("model.streamed = auto: %s streamed layer by layer (each layer "
                            "once per sample)", " and ".join(titles))
            return out
    logger.info("model.streamed = auto: the networks are served on whole windows: %s", reason)
    return {}


def _export(config: CampaignConfig, exports: Mapping[str, StreamedExport],
            weights: Path | None, canary_weights: Path | None, tmp: Path) -> dict[str, Path]:
    """Each streamed stage's network exported into ``tmp`` by its mode package's
    ``StreamedExport`` (``exports``): network name → directory."""
    out = {}
    for stage in pipeline.stages(config):
        network = stage.params.get("network") if stage.kind == "streamed" else None
        if network is None or network in out:
            continue
        if network not in exports:
            raise NotStreamable(f"mode {config.model.mode!r} has no streamed export of its "
                                f"network {network!r}")
        chosen = canary_weights if exports[network].canary else weights
        out[network] = exports[network].export(config, chosen, tmp)
    return out
