"""What the merge (and the reference) compute from the stitched outputs: the statistic's
series, then the mode's package's products (``BuiltInParts.postprocess`` per merge,
``ModePackage.summarize`` over every merge's ``ShardProducts``; DeepClean's cleaned strain and
ASD numbers are ``science/deepclean/products.py``'s, BBHnet's triggers, FAR and found/missed
``science/bbhnet/products.py``'s), and the summary's lines (``physics_lines``: the
package's ``summary_lines``).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from offline_iaas.config import CampaignConfig
from offline_iaas.gps import gps_text
from offline_iaas.merge.layout import series_attrs
from offline_iaas.mode_packages import SummaryRequest, mode_package
from offline_iaas.stretches import Stretch, output_x0
from offline_iaas.summary_physics import Physics, section

logger = logging.getLogger(__name__)


@dataclass
class ShardProducts:
    """What one merge's post-processing hands to :func:`summarize` (the single merge's whole
    campaign, or one shard's, read back by the index: ``merge/index.py``)."""

    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    """The mode's own, by ``/``-separated name (BBHnet's ``triggers``, ``background``;
    DeepClean's ``held_out/<output>/<IFO>/raw``, ...): a shard merge keeps each in its file's
    ``products`` group for the index (``merge/shard_merge.py``)."""
    frame_files: list[tuple[str, Path, int, int]] = field(default_factory=list)
    """The GWF files the mode published: interferometer, final path, GPS start, seconds (the
    index links a shard's into the campaign's)."""
    frame_spans: dict[str, dict[str, list[tuple[float, float]]]] = field(default_factory=dict)
    """Per interferometer, the ``valid`` and ``flagged`` spans of those files."""
    foreground: np.ndarray | None = None
    """With ``search.inject``: the foreground's ``time``, ``statistic``
    (``merge/foreground.py``)."""


def postprocess(writer: Any, frames: list | None, frames_dir: Path | None) -> ShardProducts:
    """Write ``writer``'s owned values (a ``CampaignWriter``): the statistic's series, then the
    mode's package's products (``BuiltInParts.postprocess``: DeepClean's cleaned strain and its
    GWF files into ``frames_dir``, BBHnet's clustered triggers)."""
    products = ShardProducts()
    if "statistic" in writer.outputs:
        _copy_owned(writer)
    package = mode_package(writer.config.model.mode)
    if package is not None and package.built_in.postprocess is not None:
        package.built_in.postprocess(writer, frames, frames_dir, products)
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

    Returns the summary's physics: a built-in mode's sections (``ModePackage.
    summary_sections``: ``deepclean``, numbers per interferometer; ``bbhnet``, triggers and
    found/missed), or a package's own section under ``package_sections``, that
    :func:`physics_lines` describes.
    """
    package = mode_package(config.model.mode)
    if package is None or package.summarize is None:
        return {}
    numbers = package.summarize(SummaryRequest(file, config, stretches, training, products,
                                               frames_dir))
    if package.summary is None:  # a built-in mode's: its summary_sections
        return dict(numbers)
    return {"package_sections": {config.model.mode: section(package.summary, numbers)
                                 .model_dump(mode="json")}}


def physics_lines(physics: Physics) -> list[str]:
    """The lines that say :func:`summarize`'s numbers (``CampaignSummary.physics``, read from
    ``output/campaign.json``): its mode's package's ``summary_lines``."""
    package = None if physics.MODE is None else mode_package(physics.MODE)
    if package is None or package.built_in.summary_lines is None:
        return []
    return package.built_in.summary_lines(physics)
