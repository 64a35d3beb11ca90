"""e2e's products: DeepClean's (the cleaned strain, its GWF files, the ASD numbers), then
BBHnet's on the cleaned strain (triggers, FAR, found/missed; with the raw strain searched too,
the same without cleaning)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from offline_iaas.merge.postprocess import ShardProducts
from offline_iaas.mode_packages import SummaryRequest
from offline_iaas.science.bbhnet.products import (
    search_lines,
    search_summary,
    triggers_and_background,
)
from offline_iaas.science.deepclean.products import clean_strain, cleaning_summary
from offline_iaas.science.deepclean.summary import cleaning_lines


def chain_postprocess(writer: Any, frames: list | None, frames_dir: Path | None,
                      products: ShardProducts) -> None:
    """One merge's cleaned strain, then its clustered triggers."""
    clean_strain(writer, frames, frames_dir, products)
    triggers_and_background(writer, frames, frames_dir, products)


def chain_summary(request: SummaryRequest) -> dict[str, Any]:
    """DeepClean's sections of the campaign summary, then BBHnet's."""
    return {**cleaning_summary(request), **search_summary(request)}


def chain_lines(physics: Any) -> list[str]:
    """DeepClean's lines of the campaign summary, then BBHnet's."""
    return cleaning_lines(physics) + search_lines(physics)
