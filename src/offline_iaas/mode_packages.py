"""Science modes from outside the project: Python packages registered under the entry point
group ``offline_iaas.modes`` (``ENTRY_POINT_GROUP``), each entry point naming a
``ModePackage``.

A mode package hands the core what it asks of a mode, and nothing else: its record
(``modes.Mode``: what it streams, its network, what its clients store), how to build its
network's graph for the model repository, and, if it has them, its own product (written into
the campaign file by the merge, with a typed section of the campaign summary) and its section
of the report. The core finds a package by the mode's name (``model.mode``) through
``importlib.metadata`` and never imports one: no core module names a mode package. The user
guide's "Write your own mode" walks through one (``tests/fixtures/power_mode``).

What a package's mode may be: one network on the snapshotter's windows, its clients storing
``statistic`` (one value per window), served on whole windows. Chains, the online average,
triggers, time slides and the streamed graphs are the built-in modes' (``modes.MODES``); a
package asking for them is refused at lookup with one line saying so.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from offline_iaas.errors import ConfigError
from offline_iaas.modes import MODES, Mode

ENTRY_POINT_GROUP = "offline_iaas.modes"
"""The entry point group a mode package registers under (``name = "module:OBJECT"``, the name
being its ``model.mode``)."""


@dataclass(frozen=True)
class ModePackage:
    """What a mode package gives the core.

    Parameters
    ----------
    mode
        Its record; ``mode.name`` is the entry point's name and ``model.mode``.
    graphs
        Its network (``mode.networks``' one name) → a function ``(config, weights, out_dir)``
        that writes the network's graph into ``out_dir`` and returns it as a list of
        ``repository.networks.Graph`` (input ``windows [N, C, K]``, output ``statistic [N]``);
        ``weights`` is ``export --weights`` (None where the package seeds its own).
    summarize
        The merge's post-processing of the campaign file (``h5py.File``, open for writing,
        its ``statistic`` datasets written), given ``(file, config, stretches)``: writes its
        product under the group named for the mode and returns its summary section, an
        instance of ``summary``. None: no product.
    summary
        The type of its summary section (a ``summary_physics.Numbers``), by which the
        campaign summary's ``mode_package`` section is read back.
    report
        Draws its report section, given ``(its summary section, report.page.Section)``.
    title
        The report section's title.
    """

    mode: Mode
    graphs: Mapping[str, Callable[..., list]]
    summarize: Callable[..., Any] | None = None
    summary: type | None = None
    report: Callable[[Any, Any], None] | None = None
    title: str = ""


_FOUND: dict[str, ModePackage] = {}
"""Packages loaded so far, by mode name (looked up again only for a name not found)."""


def mode_package(name: str) -> ModePackage | None:
    """The package registered for mode ``name``; None for a built-in mode or no package.
    ConfigError naming the entry point for a package that cannot be loaded or asks for what
    a package's mode cannot be (module docstring)."""
    if name in MODES:
        return None
    if name in _FOUND:
        return _FOUND[name]
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP, name=name):
        where = f"mode package {entry.value!r} (entry point {name!r} of {ENTRY_POINT_GROUP})"
        try:
            package = entry.load()
        except Exception as err:  # a broken third-party package: say which
            raise ConfigError(f"{where}: cannot be loaded: {type(err).__name__}: {err}"
                              ) from None
        _FOUND[name] = _checked(package, name, where)
        return _FOUND[name]
    return None


def find_mode(name: str) -> Mode:
    """The record of mode ``name``: a built-in mode's, or its package's. KeyError for none."""
    package = mode_package(name)
    return MODES[name] if package is None else package.mode


def mode_names() -> tuple[str, ...]:
    """The built-in modes, then the names registered under ``ENTRY_POINT_GROUP``."""
    registered = sorted({e.name for e in importlib.metadata.entry_points(
        group=ENTRY_POINT_GROUP)} - set(MODES))
    return (*MODES, *registered)


def _checked(package: object, name: str, where: str) -> ModePackage:
    if not isinstance(package, ModePackage):
        raise ConfigError(f"{where}: names a {type(package).__name__}, not an "
                          "offline_iaas.mode_packages.ModePackage")
    mode = package.mode
    plain = dataclasses.replace(mode, snapshots=1, averages=False, triggers=False,
                                native_gpu=False, streamable=False, outputs=("statistic",))
    problems = [
        *([f"its mode is named {mode.name!r}"] if mode.name != name else []),
        *(["its mode asks for what only the built-in modes have (a chain, the online "
           "average, triggers, the native gpu layout, streamed graphs or outputs other than "
           "'statistic')"] if mode != plain or len(mode.networks) != 1 else []),
        *([f"no graph builder for its network {mode.networks[0]!r}"]
          if mode.networks and mode.networks[0] not in package.graphs else []),
        *(["summarize without a summary type"] if package.summarize and not package.summary
          else []),
    ]
    if problems:
        raise ConfigError(f"{where}: " + "; ".join(problems))
    return package
