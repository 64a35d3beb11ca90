"""DeepClean's settings: the campaign config's ``[deepclean]`` section (modes ``deepclean``
and ``e2e``: ``ModePackage.config_section``) and the checks the package adds to the core's
(``ModePackage.check_config``). Loading a config imports this module, so it needs no torch.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from offline_iaas.config_sections import ifo_of
from offline_iaas.modes import CANARY

CANARY_SUFFIX = "_CANARY"
"""The canary's channel is the production one's with this appended (not gated)."""
CANARY_NETWORK = "deepclean_canary"
"""The canary DeepClean's graph and stage (``deepclean.canary``)."""
SERIES_PRODUCTS: tuple[str, ...] = ("clean", "clean_canary")
"""HDF5 groups of the cleaned strain, the production network's and the canary's
(``products.PRODUCTION``, ``products.CANARY``), one series per detector."""

if TYPE_CHECKING:
    import numpy as np

    from offline_iaas.config import CampaignConfig

DOWNSAMPLING = 16
"""``science.deepclean.network.DOWNSAMPLING`` (kept here so loading a config needs no torch;
``tests/test_networks.py`` holds them equal)."""
MERGE_ONLY: tuple[str, ...] = (
    "band_low_hz", "band_high_hz", "filter_order", "frame_seconds", "asd_fftlength",
    "guard_hz", "channel_suffix", "frame_type", "gate", "gate_tolerance", "gate_line_ratio")
"""Its keys that only the merge reads (the band-pass, GWF files and gate of DeepClean's
products): in ``merge_hash``, not in ``stream_hash`` (``ModePackage.merge_only``)."""


@dataclass(frozen=True)
class DeepCleanConfig:
    """The merge's post-processing of DeepClean's averaged prediction (modes deepclean, e2e).
    Until #43 a section of the core (``config_checks.FORMER_SECTIONS``)."""

    ZERO_ALLOWED: ClassVar[frozenset[str]] = frozenset({"guard_hz"})
    """Its keys where zero means something (``config_numbers``): no guard band."""

    band_low_hz: float = 55.0
    """The band-pass's lower edge (Hz); the band: ``band_high_hz``'s text."""
    band_high_hz: float = 65.0
    """Band of the zero-phase Butterworth band-pass applied to the prediction before it is
    subtracted (the band the network was trained on)."""
    filter_order: int = 8
    """Order of that Butterworth band-pass (run forward and backward: zero phase)."""
    frame_seconds: float = 64.0
    """Length of each GWF file of cleaned strain."""
    asd_fftlength: float = 4.0
    """FFT length (s) of the cleaned/raw ASD ratio the merge reports."""
    guard_hz: float = 2.0
    """The reported "outside the band" starts this far beyond the band's edges (the
    coupling's side bands and the band-pass's roll-off reach past them)."""
    channel_suffix: str = "DC"
    """The cleaned strain's channel is ``<strain>_<suffix>`` (``H1:GDS-CALIB_STRAIN_DC``)."""
    frame_type: str = "HOFT_DC"
    """GWF files are ``<O>-<IFO>_<frame_type>-<GPS>-<DUR>.gwf``; their frame type (what a
    datafind server publishes them under) is ``<IFO>_<frame_type>``."""
    gate: str = "flag"
    """A frame the gate fails is listed in the flagged segments (``flag``), and with
    ``replace`` its channel holds the raw strain instead of the cleaned."""
    gate_tolerance: float = 0.05
    """Largest rise of the cleaned/raw ASD outside the band (beyond ``guard_hz``) a frame may
    show (fraction: 0.05 is 5 %)."""
    gate_line_ratio: float = 1.0
    """The cleaned/raw ASD at the band's line must fall below this (1: lowered at all)."""
    canary: bool = False
    """Serve a canary DeepClean per detector beside the production one, on the same windows
    (``export --canary-weights``): output ``noise_canary``, channel
    ``<strain>_<suffix>_CANARY``."""


def deepclean_settings(config: CampaignConfig) -> DeepCleanConfig:
    """The ``[deepclean]`` section of a campaign of mode ``deepclean`` or ``e2e``."""
    settings = config.mode_section
    if not isinstance(settings, DeepCleanConfig):
        raise TypeError(f"mode {config.model.mode!r} has no [deepclean] section")
    return settings


def frame_file_seconds(settings: DeepCleanConfig) -> float:
    """The length of each GWF file of cleaned strain (``BuiltInParts.file_seconds``)."""
    return settings.frame_seconds


def bandpass_sos(settings: DeepCleanConfig, sample_rate: float) -> np.ndarray:
    """DeepClean's band-pass (``deepclean.band_*_hz``, ``filter_order``) at ``sample_rate``,
    as second-order sections."""
    from scipy import signal  # loading a config needs no scipy

    band_hz = (settings.band_low_hz, settings.band_high_hz)
    return signal.butter(settings.filter_order, band_hz, btype="bandpass", fs=sample_rate,
                         output="sos")


def output_channel(settings: DeepCleanConfig, strain: str) -> str:
    """The cleaned strain's channel name: ``<strain>_<suffix>``."""
    return f"{strain}_{settings.channel_suffix}"


def series_channel(config: CampaignConfig, group: str, strain: str) -> str:
    """The channel of DeepClean's series ``group`` (``noise``, ``clean``, their ``_canary``)
    of detector ``strain``'s (``BuiltInParts.series_channel``)."""
    suffix = CANARY_SUFFIX if group.endswith(CANARY) else ""
    if group.startswith("noise"):
        return f"{strain}_DEEPCLEAN_NOISE{suffix}"
    return output_channel(deepclean_settings(config), strain) + suffix


def check_deepclean(c: CampaignConfig, fail: Callable[[str, str], None]) -> None:
    """DeepClean's rules, after the core's: a strain channel and witnesses per detector, a
    kernel DeepClean can average and downsample, and the ``[deepclean]`` section's values (the
    signs of its numbers are the core's rule, ``config_numbers``)."""
    if len(c.ifos) != len(c.data.channels):
        fail("data.channels", f"must name one strain channel per interferometer in mode "
             f"{c.model.mode!r}, got {list(c.data.channels)}")
    for ifo in c.ifos:
        if not c.witnesses_of(ifo):
            fail("data.witnesses", f"has no witness channel of {ifo} (mode {c.model.mode!r} "
                 "runs a DeepClean per interferometer)")
    strangers = sorted({ifo_of(w) for w in c.data.witnesses} - set(c.ifos))
    if strangers:
        fail("data.witnesses", f"names interferometer {strangers[0]}, which has no strain "
             f"channel in data.channels")
    if c.kernel_samples % c.stride_samples or c.kernel_samples == c.stride_samples:
        fail("model.kernel_seconds", f"({c.model.kernel_seconds} s) must be a multiple of the "
             f"stride ({1 / c.model.inference_rate} s), and longer, to average DeepClean's "
             "overlapping predictions")
    if c.kernel_samples % DOWNSAMPLING:
        fail("model.kernel_seconds", f"must hold a multiple of {DOWNSAMPLING} "
             f"samples for DeepClean, got {c.kernel_samples}")
    d = deepclean_settings(c)
    nyquist = c.data.sample_rate / 2
    if not 0 < d.band_low_hz < d.band_high_hz < nyquist:
        key = "band_low_hz" if not 0 < d.band_low_hz < nyquist else "band_high_hz"
        fail(f"deepclean.{key}", f"must satisfy 0 < band_low_hz < band_high_hz < {nyquist} Hz "
             f"(Nyquist), got {d.band_low_hz}, {d.band_high_hz}")
    if d.filter_order < 1:
        fail("deepclean.filter_order", f"must be at least 1, got {d.filter_order}")
    if d.frame_seconds <= 0 or abs(d.frame_seconds - round(d.frame_seconds)) > 1e-9:
        fail("deepclean.frame_seconds", f"must be a positive whole number, got {d.frame_seconds}")
    shards = c.merge.shard_seconds / d.frame_seconds
    if c.merge.shard_seconds > 0 and abs(shards - round(shards)) > 1e-9:
        fail("merge.shard_seconds", f"must be a multiple of deepclean.frame_seconds "
             f"({d.frame_seconds:g} s: a cleaned frame file lies in one shard), got "
             f"{c.merge.shard_seconds:g}")
    for key in ("channel_suffix", "frame_type"):
        if not re.fullmatch(r"[A-Z0-9]+(_[A-Z0-9]+)*", getattr(d, key)):
            fail(f"deepclean.{key}", f"must be upper-case letters, digits and single '_' (a "
                 f"frame file name's field), got {getattr(d, key)!r}")
    if d.gate not in ("flag", "replace"):
        fail("deepclean.gate", f"must be \"flag\" or \"replace\", got {d.gate!r}")
