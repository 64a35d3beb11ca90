"""Whether a campaign's networks are served streamed layer by layer (``model.streamed``).

``true`` streams them or refuses the campaign; ``false`` serves them on whole windows (the
snapshotter's); ``auto`` (the default) streams them where they can be streamed and serves
them whole-window otherwise, with one line saying why. What the config alone decides is
here (``whole_window_reason``); what the weights decide (an ONNX graph or a TorchScript graph
not made from our networks, a stride off DeepClean's grid) is found at export
(``repository/streamed_export.py``), which records the outcome in the repository's manifest;
``served_as`` then gives the config the repository serves.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from offline_iaas.config import CampaignConfig

AUTO: Literal["auto"] = "auto"
"""``model.streamed = "auto"``: stream what can be streamed, serve the rest whole-window."""


def whole_window_reason(config: CampaignConfig) -> tuple[str, str] | None:
    """The config key, and the reason, that keep the campaign's networks off the streamed
    graphs; None where the config allows streaming them."""
    if not config.mode.streamable:
        return ("model.mode", f"the mode package of {config.model.mode!r} is served on whole "
                "windows")
    if config.rolling_whitening:
        return ("search.whitening", f"the {config.search.whitening!r} whitening (each window "
                "whitened by its own PSD) is served on whole windows")
    if config.kernel_samples % config.stride_samples:
        return ("model.kernel_seconds", f"a window of {config.model.kernel_seconds:g} s is not "
                f"a whole number of strides ({1 / config.model.inference_rate:g} s)")
    return None


def streams(config: CampaignConfig) -> bool:
    """Whether the config streams its networks (``auto``: where ``whole_window_reason`` finds
    nothing; the weights may still turn it down at export, see ``served_as``)."""
    if config.model.streamed == AUTO:
        return whole_window_reason(config) is None
    return bool(config.model.streamed)


def served_as(config: CampaignConfig, streamed: bool) -> CampaignConfig:
    """``config`` with ``model.streamed`` settled to ``streamed`` (what export chose for
    ``auto``, or what a repository's manifest records); the config itself where it says so."""
    if config.model.streamed is streamed:
        return config
    return dataclasses.replace(config, model=dataclasses.replace(config.model,
                                                                 streamed=streamed))
