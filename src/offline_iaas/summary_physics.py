"""The physics sections of the campaign summary (``RUN/output/campaign.json``), as types.

The merge computes these numbers (``merge/postprocess.summarize``: the mode's package's
``summarize``) and ``summaries.CampaignSummary`` carries them at its top level, beside the
merge's own fields. Each section's type is its mode package's (``ModePackage.
summary_sections``: DeepClean's ASD numbers and GWF gate per interferometer in
``science/deepclean/summary.py``, BBHnet's triggers, background, found/missed and VT in
``science/bbhnet/summary.py``; another distribution's one section under ``package_sections``,
its ``summary`` type). ``physics_type(mode)`` is the summary's physics with the sections of
``mode``: the merge's log, the demo and the report read them through it, so a field renamed or
missing is one ``RunError`` naming the file and the field when the summary is read, not a
number that silently turns into a blank. A value a campaign cannot give (no time slides, no
injection list, no population volume) is None; ``reason`` and ``note`` fields say why.

The JSON layout is the one the merge has always written, so summaries written before these
types read unchanged.
"""

from __future__ import annotations

import functools
import json
from typing import Any, ClassVar, Optional, TypeVar

from pydantic import BaseModel, ConfigDict, create_model
from pydantic_core import to_jsonable_python

from offline_iaas.mode_packages import mode_package


class Numbers(BaseModel):
    """A section of the campaign summary: strict types, no unknown fields. A number that is
    NaN or infinite is written as such (``NaN``, as Python's json does), not as null, so it
    reads back as the number it was."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid",
                              ser_json_inf_nan="constants")


class Physics(Numbers):
    """The physics sections of ``campaign.json`` that every mode may have; ``physics_type``
    adds its mode's. A section the campaign did not produce is None."""

    MODE: ClassVar[str | None] = None
    """The mode whose sections these are (``physics_type``); None: none of a mode."""

    package_sections: dict[str, dict[str, Any]] | None = None
    """A mode package's section (``mode_packages.py``), under its mode's name: read back as
    its package's ``summary`` type (``package_section``)."""


@functools.cache
def physics_type(mode: str) -> type[Physics]:
    """``Physics`` of ``mode``: with the sections of its package (``ModePackage.
    summary_sections``, each None by default). ConfigError where the package cannot be
    loaded."""
    package = mode_package(mode)
    sections = {} if package is None else package.built_in.summary_sections
    typed = create_model(f"Physics[{mode}]", __base__=Physics,
                         **{name: (Optional[kind], None)  # noqa: UP045 (a runtime type)
                            for name, kind in sections.items()})
    typed.MODE = mode
    return typed


def package_section(physics: Physics, mode: str) -> Numbers | None:
    """The section the package of ``mode`` wrote (its ``summary`` type); None where there is
    none. ConfigError where the package cannot be loaded."""
    found = (physics.package_sections or {}).get(mode)
    package = mode_package(mode)
    if found is None or package is None or package.summary is None:
        return None
    return section(package.summary, found)


N = TypeVar("N", bound=BaseModel)


def section(kind: type[N], numbers: object) -> N:
    """``numbers`` (a section as computed: dicts, lists, numbers) as its type, checked as
    strictly as one read back from ``campaign.json``."""
    return kind.model_validate_json(json.dumps(to_jsonable_python(numbers)))
