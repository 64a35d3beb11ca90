"""What the merge (and the reference) compute from the stitched outputs: the statistic's
series, then the mode's package's products (``ModePackage.postprocess`` per merge,
``ModePackage.summarize`` over every merge's ``ShardProducts``; DeepClean's cleaned strain and
ASD numbers are ``science/deepclean/products.py``'s, BBHnet's triggers, FAR and found/missed
``science/bbhnet/products.py``'s), and the summary's lines (``physics_lines``).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from offline_iaas.config import CampaignConfig
from offline_iaas.merge.injections import injection_lines
from offline_iaas.merge.layout import gps_text, series_attrs
from offline_iaas.mode_packages import SummaryRequest, mode_package
from offline_iaas.physics import SECONDS_PER_YEAR
from offline_iaas.stretches import Stretch, output_x0
from offline_iaas.summary_physics import Physics, section

logger = logging.getLogger(__name__)


@dataclass
class ShardProducts:
    """What one merge's post-processing hands to :func:`summarize` (the single merge's whole
    campaign, or one shard's, read back by the index: ``merge/index.py``)."""

    triggers: np.ndarray | None = None
    """The owned clustered statistic: ``time``, ``statistic`` (modes with triggers)."""
    background: np.ndarray | None = None
    """The owned clustered slides, less the cuts: ``shift``, ``time``, ``statistic``."""
    held_out: dict[str, tuple[float, np.ndarray, np.ndarray]] = field(default_factory=dict)
    """Per ``<output>/<IFO>``, the owned part of the held-out run (``held_out_choice``): GPS
    of its first sample, the raw and the cleaned strain (float64)."""
    frame_files: list[tuple[str, Path, int, int]] = field(default_factory=list)
    """The GWF files written: interferometer, final path, GPS start, seconds."""
    frame_spans: dict[str, dict[str, list[tuple[float, float]]]] = field(default_factory=dict)
    """Per interferometer, the ``valid`` and ``flagged`` spans of those files."""
    foreground: np.ndarray | None = None
    """With ``bbhnet.inject``: the foreground's ``time``, ``statistic``
    (``merge/foreground.py``)."""
    raw: ShardProducts | None = None
    """e2e's search on the raw strain (``statistic_raw``): its ``triggers`` and
    ``background``, made as the cleaned strain's are."""


def postprocess(writer: Any, frames: list | None, frames_dir: Path | None) -> ShardProducts:
    """Write ``writer``'s owned values (a ``CampaignWriter``): the statistic's series, then the
    mode's package's products (``ModePackage.postprocess``: DeepClean's cleaned strain and its
    GWF files into ``frames_dir``, BBHnet's clustered triggers)."""
    products = ShardProducts()
    if "statistic" in writer.outputs:
        _copy_owned(writer)
    package = mode_package(writer.config.model.mode)
    if package is not None and package.postprocess is not None:
        package.postprocess(writer, frames, frames_dir, products)
    return products


def _copy_owned(writer: Any) -> None:
    """The owned rows of the staged statistic (and slides) into the output."""
    config = writer.config
    for e in writer.extents:
        a, b = e.statistic_rows
        if b <= a and not writer.whole:
            continue
        x0 = output_x0(config.geometry, e.stretch, "statistic") + a * config.stride_seconds
        at = a - e.rows[0]
        staged = writer.stage[writer.names[("statistic", e.stretch.index)][0]]
        dataset = writer.file.create_dataset(f"statistic/{gps_text(x0)}",
                                             data=staged[at : at + b - a])
        series_attrs(dataset, config, "statistic", 0, x0)
        if "background" in writer.outputs:
            staged = writer.stage[writer.names[("background", e.stretch.index)][0]]
            dataset = writer.file.create_dataset(f"slides/{gps_text(x0)}",
                                                 data=staged[at : at + b - a])
            series_attrs(dataset, config, "slides", 0, x0)


def summarize(file: Any, config: CampaignConfig, stretches: list[Stretch],
              training: dict[str, list[float]], products: list[ShardProducts],
              frames_dir: Path | None) -> dict[str, Any]:
    """The campaign-wide numbers from every merge's products, in time order: the mode's
    package's (``ModePackage.summarize``).

    Returns the summary's physics: a built-in mode's sections of ``Physics`` (``deepclean``:
    numbers per interferometer, ``bbhnet``: triggers and found/missed), or a package's own
    section under ``package_sections``, that :func:`physics_lines` describes.
    """
    package = mode_package(config.model.mode)
    if package is None or package.summarize is None:
        return {}
    numbers = package.summarize(SummaryRequest(file, config, stretches, training, products,
                                               frames_dir))
    if package.summary is None:  # a built-in mode's: sections of the summary's Physics
        return dict(numbers)
    return {"package_sections": {config.model.mode: section(package.summary, numbers)
                                 .model_dump(mode="json")}}


def physics_lines(physics: Physics) -> list[str]:
    """One line per DeepClean interferometer and one for BBHnet, from :func:`postprocess`'s
    summary (``CampaignSummary.physics``, read from ``output/campaign.json``)."""
    lines = []
    for ifo, numbers in (physics.deepclean or {}).items():
        start, end = numbers.held_out_gps
        training = numbers.training_gps
        data = (f"held-out GPS {start:.0f}-{end:.0f}, after training on GPS {training[0]:.0f}-"
                f"{training[1]:.0f}" if training else f"GPS {start:.0f}-{end:.0f}, training "
                "span unknown")
        lines.append(
            f"DeepClean {ifo}: cleaned/raw ASD {numbers.ratio_at_line:.3f} at the "
            f"{numbers.line_hz:.2f} Hz line, within "
            f"{100 * numbers.max_deviation_outside_band:.2f} % of 1 outside the band "
            f"(+- {numbers.guard_hz:g} Hz guard; {data})"
        )
    search = physics.bbhnet
    if search is None:
        return lines
    lines.append(f"BBHnet: {search.triggers} triggers (statistic clustered over "
                 f"{search.cluster_seconds:g} s)")
    livetime = search.background_livetime_seconds
    if search.slid and livetime is not None:
        lines.append(
            f"BBHnet: {search.background_triggers} background triggers from "
            f"{search.time_shifts} time slides of {search.shift_seconds:g} s "
            f"({livetime:.0f} s = {livetime / SECONDS_PER_YEAR:.2g} yr of livetime); loudest "
            f"trigger's IFAR {search.loudest_ifar_years:.2g} yr")
    lines += injection_lines(search)
    raw = search.without_cleaning  # e2e's same search on the raw strain
    return lines + ([] if raw is None else [
        line.replace("BBHnet:", "BBHnet without cleaning:", 1) for line in injection_lines(raw)])
