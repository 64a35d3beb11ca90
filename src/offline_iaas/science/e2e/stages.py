"""e2e's chain: DeepClean's stages, ``subtract``, and BBHnet on windows of the cleaned strain
(and, with injections on the fly, of the raw strain too, delayed alike)."""

from __future__ import annotations

from offline_iaas.config import CampaignConfig
from offline_iaas.modes import RAW
from offline_iaas.repository.pipeline import Stage
from offline_iaas.science.bbhnet.stages import bbhnet_stages
from offline_iaas.science.deepclean.stages import cleaning_stages


def chain_stages(config: CampaignConfig) -> list[Stage]:
    """The cleaned strain windowed again for BBHnet."""
    ifos, raw = len(config.ifos), config.outputs.searches_raw_strain
    chain = [
        *cleaning_stages(config),
        Stage("subtract", "network", {"windows": "windows", "noise": "noise"},
              {"cleaned": "cleaned", **({"strain": "raw"} if raw else {})}),
        *bbhnet_stages(config, "cleaned", Stage("snapshotter_clean", "snapshot",
                                                {"update": "cleaned"},
                                                {"windows": "clean_windows"}, ifos)),
    ]
    if raw:  # the same search on the strain before the subtraction, delayed alike
        chain += bbhnet_stages(config, "raw", Stage("snapshotter_raw", "snapshot",
                                                    {"update": "raw"},
                                                    {"windows": "raw_windows"}, ifos), RAW)
    return chain
