"""Science modes as packages: Python packages registered under the entry point group
``offline_iaas.modes`` (``ENTRY_POINT_GROUP``), each entry point naming a ``ModePackage``.
The built-in modes are packages too (``offline_iaas.science.<mode>``, registered by this
project's own ``pyproject.toml``); a user's mode registers the same way from its own
distribution.

A mode package hands the core what it asks of a mode, and nothing else: its record
(``modes.Mode``: what it streams, its networks, what its clients store), how to build each
network's graph for the model repository (``graphs``, given a ``GraphRequest``), and, if it
has them, its own settings (``config_section``: the campaign config's ``[<mode>]`` section),
its own product (written into the campaign file by the merge, with typed sections
of the campaign summary and the lines that say them) and its section of the report. The
core finds a package by the mode's name (``model.mode``) through ``importlib.metadata`` and
never imports one: no core module names a mode package (``tests/test_layering.py``). The
user guide's "Write your own mode" walks through one (``tests/fixtures/power_mode``).

What a mode of another distribution may be: one network on the snapshotter's windows, its
clients storing ``statistic`` (one value per window), served on whole windows. Chains, the
online average, triggers, time slides and the streamed graphs are the built-in modes'
(``modes.BUILT_IN_MODES``); a package asking for them is refused at lookup with one line
saying so.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from offline_iaas.errors import ConfigError, ModelError
from offline_iaas.modes import BUILT_IN_MODES, Mode, NetworkKind

ENTRY_POINT_GROUP = "offline_iaas.modes"
"""The entry point group a mode package registers under (``name = "module:OBJECT"``, the name
being its ``model.mode``)."""
HOME_DISTRIBUTION = "offline-iaas"
"""The distribution whose packages are the built-in modes (registered by its pyproject)."""


@dataclass(frozen=True)
class GraphRequest:
    """What a graph builder of ``ModePackage.graphs`` is given.

    Parameters
    ----------
    config
        The campaign (``config.CampaignConfig``).
    weights
        ``export --weights``: a directory of weight files, or a single-network mode's one
        file; None where the mode seeds its own network.
    out_dir
        Where to write the graph files (``<model name>.onnx``).
    canary_weights
        ``export --canary-weights`` (a second DeepClean per detector, ``deepclean.canary``).
    single_file
        The mode serves one network, so ``weights`` may be that network's one file.
    """

    config: Any
    weights: Path | None
    out_dir: Path
    canary_weights: Path | None = None
    single_file: bool = False


@dataclass(frozen=True)
class SummaryRequest:
    """What ``ModePackage.summarize`` is given: the campaign file and every merge's products.

    Parameters
    ----------
    file
        The campaign file (``h5py.File``, open for writing, its ``statistic/<gps>`` series
        written: gwpy TimeSeries attributes ``x0``, ``dx``).
    config
        The campaign (``config.CampaignConfig``).
    stretches
        The campaign's stretches (``stretches.Stretch``), in time order.
    training
        The networks' training spans as the weights record them (network → ``[start, end]``).
    products
        Every merge's ``merge.postprocess.ShardProducts``, in time order.
    frames_dir
        Where the merge publishes GWF files (None: none).
    """

    file: Any
    config: Any
    stretches: list
    training: dict[str, list[float]]
    products: list
    frames_dir: Path | None


@dataclass(frozen=True)
class StreamedExport:
    """How a network of a built-in mode is exported streamed layer by layer.

    Parameters
    ----------
    title
        The network as the log names it (``BBHnet``).
    export
        ``export(config, weights, directory)`` writes the network's streamed graphs into
        ``directory/<network>.streamed`` and returns that directory; ``NotStreamable`` where
        the weights or the stride cannot be streamed (``repository/streamed_export.py`` asks,
        with the canary's weights for a ``canary`` network).
    canary
        The network is a canary's (``CampaignConfig.canary``): exported with the canary's
        weights (``export --canary-weights``).
    runner
        The module (dotted name) that runs those graphs, where it is the package's own: its
        ``open_<module name>(directory, intra_op_threads, device, device_id)`` opens them, and
        the manifest's ``runner`` is its module name. Self-contained (numpy, onnxruntime and
        ``layer_stream``), it is copied beside ``repository/backend/layer_stream.py`` in the
        fused model, where the server loads it by path. None: the core's ``streamed_network``.
    """

    title: str
    export: Callable[[Any, Path | None, Path], Path]
    canary: bool = False
    runner: str | None = None


@dataclass(frozen=True)
class ReportSection:
    """One section of the report.

    Parameters
    ----------
    anchor
        The section's HTML id.
    title
        Its heading.
    draw
        ``draw(run, section)`` appends the section's parts (``report.page``: ``paragraph``,
        ``table``, ``figure``) to ``section.parts``, reading the run directory through
        ``run`` (``report.run_view.ReportRun``: its config, physics, output file, and
        ``package_section``, the section of the campaign summary the package wrote).
    """

    anchor: str
    title: str
    draw: Callable[[Any, Any], None]


@dataclass(frozen=True)
class BuiltInParts:
    """What only a built-in mode's package gives: the parts by which a mode is more than one
    network on the snapshotter's windows storing ``statistic`` (``mode_packages._checked``
    refuses them from a mode of another distribution).

    Parameters
    ----------
    stages
        The mode's chain of stages (``repository.pipeline.Stage``) given the campaign config;
        None: one network on the snapshotter's windows (``pipeline.stages``).
    postprocess
        Run by every merge (the single merge, or each shard's) after the statistic's series
        are written: ``postprocess(writer, frames, frames_dir, products)`` writes the mode's
        owned products into the writer's file (``merge.output.CampaignWriter``) and hands
        what ``summarize`` needs into ``products`` (``merge.postprocess.ShardProducts``).
    summary_sections
        Its sections of the campaign summary, at its top level: name → type
        (``summary_physics.physics_type`` reads them back).
    summary_lines
        The lines that say its summary sections in the merge's log and the demo's output,
        given the summary's physics (``physics_type(mode)``).
    streamed
        Each network of its stages that ``model.streamed`` serves layer by layer → its
        ``StreamedExport``.
    network_kinds
        The trained networks whose architecture it owns, that users bring weights for
        (``export --weights``, ``train-demo``): their ``NetworkKind`` records.
    file_seconds
        Given its config section: the length of the files its products are written in (GWF
        frames); the merge's shards are a multiple of it, so that a file lies in one shard.
        None: 1 s.
    series_channel
        ``series_channel(config, group, strain)``: the channel name of its strain-like output
        series ``group`` (``noise``, ``clean``, their ``_canary``) of detector ``strain``'s,
        which the merge and the index write in the series' attributes.
    series_products
        The per-sample series its post-processing writes besides the outputs (``clean``,
        ``clean_canary``), which the index stitches across the shards as it does the
        outputs'.
    """

    stages: Callable[[Any], list] | None = None
    postprocess: Callable[[Any, Any, Any, Any], None] | None = None
    summary_sections: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    summary_lines: Callable[[Any], list[str]] | None = None
    streamed: Mapping[str, StreamedExport] = dataclasses.field(default_factory=dict)
    network_kinds: tuple[NetworkKind, ...] = ()
    file_seconds: Callable[[Any], float] | None = None
    series_channel: Callable[[Any, str, str], str] | None = None
    series_products: tuple[str, ...] = ()


NO_PARTS = BuiltInParts()
"""A package with none of the built-in parts (every mode of another distribution)."""


@dataclass(frozen=True)
class ModePackage:
    """What a mode package gives the core: the protocol a mode of any distribution follows,
    and a built-in mode's further parts (``built_in``).

    Parameters
    ----------
    mode
        Its record; ``mode.name`` is the entry point's name and ``model.mode``.
    graphs
        Each network of ``mode.networks`` → a function of a ``GraphRequest`` that writes the
        network's graph(s) into ``request.out_dir`` and returns them as a list of
        ``repository.networks.Graph`` (for a mode of another distribution: input
        ``windows [N, C, K]``, output ``statistic [N]``).
    summarize
        The merge's post-processing of the whole campaign, given a ``SummaryRequest``: writes
        the mode's campaign-wide products into ``request.file`` and returns its summary
        section, an instance of ``summary``; with ``summary`` None (the built-in modes'), a
        dict of the campaign summary's ``Physics`` sections. None: no product.
    summary
        The type of its summary section (a ``summary_physics.Numbers``), by which the
        campaign summary's ``package_sections`` entry is read back.
    report_sections
        Its sections of the report, drawn first, in order (``ReportSection``).
    config_section
        A frozen dataclass of the mode's own settings: the campaign config's section named
        for the mode (``[power]``), each key a field with a default (the config checks each
        value's type and each number as they check the core's). A campaign of the mode holds
        it as ``config.mode_section``; it is in both config hashes, so changing it redoes
        the clients' parts. None: the mode has no settings of its own. A boolean ``canary``
        field asks for a canary of its networks (``CampaignConfig.canary``); a class variable
        ``ZERO_ALLOWED`` names its keys where zero means something (``config_numbers``).
    config_section_name
        The section's name where it is not the mode's: a chain of modes reads its first
        mode's (``e2e`` reads DeepClean's ``[deepclean]``).
    merge_only
        Keys of its section that only the merge reads (its products' post-processing): in
        ``merge_hash``, not ``stream_hash``, so changing one redoes the merges, not the parts.
    check_config
        Its own rules, run after the core's: ``check_config(config, fail)`` calls
        ``fail(key, why)`` for the first invalid value (the core's message: file and key).
    built_in
        A built-in mode's further parts (``BuiltInParts``); none for a mode of another
        distribution.
    """

    mode: Mode
    graphs: Mapping[str, Callable[..., list]]
    summarize: Callable[..., Any] | None = None
    summary: type | None = None
    report_sections: tuple[ReportSection, ...] = ()
    config_section: type | None = None
    config_section_name: str | None = None
    merge_only: tuple[str, ...] = ()
    check_config: Callable[[Any, Callable[[str, str], None]], None] | None = None
    built_in: BuiltInParts = NO_PARTS

    @property
    def section_name(self) -> str | None:
        """The name of its config section: ``config_section_name`` or its mode's; None
        where it has no section."""
        if self.config_section is None:
            return None
        return self.config_section_name or self.mode.name


def deferred(target: str) -> Callable[..., Any]:
    """The function ``target`` (``"module:function"``), imported when first called.

    A package gives its heavy parts (graphs, products, report) this way, so that loading it
    costs its record and its summary types only: reading a campaign summary loads its mode's
    package (``summary_physics.physics_type``), and ``status`` should not pay for scipy and
    matplotlib to do it.
    """
    module, _, name = target.partition(":")

    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    call.__qualname__ = call.__name__ = target
    return call


_FOUND: dict[str, ModePackage] = {}
"""Packages loaded so far, by mode name (looked up again only for a name not found)."""


def mode_package(name: str) -> ModePackage | None:
    """The package registered for mode ``name``; None where none is.

    A built-in mode's is this project's own (another distribution's entry point of the same
    name is not taken). ConfigError naming the entry point for a package that cannot be
    loaded or asks for what a package's mode cannot be (module docstring), and for a built-in
    mode whose entry point is missing (an install without this project's entry points).
    """
    if name in _FOUND:
        return _FOUND[name]
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP, name=name):
        home = _distribution(entry) == HOME_DISTRIBUTION
        if name in BUILT_IN_MODES and not home:
            continue
        where = f"mode package {entry.value!r} (entry point {name!r} of {ENTRY_POINT_GROUP})"
        try:
            package = entry.load()
        except Exception as err:  # a broken package: say which
            raise ConfigError(f"{where}: cannot be loaded: {type(err).__name__}: {err}"
                              ) from None
        _FOUND[name] = package if home else _checked(package, name, where)
        return _FOUND[name]
    if name in BUILT_IN_MODES:
        raise ConfigError(
            f"built-in mode {name!r}: no entry point {name!r} of {ENTRY_POINT_GROUP} from "
            f"{HOME_DISTRIBUTION} (installed without its entry points? reinstall it: "
            "pip install -e . or make install)")
    return None


def find_mode(name: str) -> Mode:
    """The record of mode ``name``, its package's (``ModePackage.mode``; loading a package
    costs its record and types, its functions being ``deferred``). KeyError for none."""
    package = mode_package(name)
    if package is None:
        raise KeyError(name)
    return package.mode


def streamed_runners() -> dict[str, str]:
    """The built-in packages' own runners of streamed graphs (``StreamedExport.runner``): module
    name (a manifest's ``runner``) → dotted name."""
    runners: dict[str, str] = {}
    for name in BUILT_IN_MODES:
        package = mode_package(name)
        for export in package.built_in.streamed.values() if package is not None else ():
            if export.runner is not None:
                runners[export.runner.rpartition(".")[2]] = export.runner
    return runners


def network_kinds() -> dict[str, NetworkKind]:
    """The network kinds of the built-in packages (``BuiltInParts.network_kinds``), by name, in
    the order of ``BUILT_IN_MODES`` (a chain's package names its links' kinds again)."""
    kinds: dict[str, NetworkKind] = {}
    for name in BUILT_IN_MODES:
        package = mode_package(name)
        for kind in package.built_in.network_kinds if package is not None else ():
            kinds.setdefault(kind.name, kind)
    return kinds


def network_kind(name: str) -> NetworkKind:
    """The record of network kind ``name`` (``network_kinds``). ModelError naming the known
    ones for another name."""
    kinds = network_kinds()
    if name not in kinds:
        raise ModelError(f"unknown network kind {name!r} (known: {', '.join(kinds)})")
    return kinds[name]


def _distribution(entry: importlib.metadata.EntryPoint) -> str:
    """The normalised name of the distribution registering ``entry`` ("" where unknown)."""
    dist = getattr(entry, "dist", None)
    name = dist.metadata["Name"] if dist is not None else ""
    return (name or "").lower().replace("_", "-")


def mode_names() -> tuple[str, ...]:
    """The built-in modes, then the names registered under ``ENTRY_POINT_GROUP``."""
    registered = sorted({e.name for e in importlib.metadata.entry_points(
        group=ENTRY_POINT_GROUP)} - set(BUILT_IN_MODES))
    return (*BUILT_IN_MODES, *registered)


def _frozen_dataclass(cls: Any) -> bool:
    return (isinstance(cls, type) and dataclasses.is_dataclass(cls)
            and cls.__dataclass_params__.frozen)


def _checked(package: object, name: str, where: str) -> ModePackage:
    if not isinstance(package, ModePackage):
        raise ConfigError(f"{where}: names a {type(package).__name__}, not an "
                          "offline_iaas.mode_packages.ModePackage")
    mode = package.mode
    plain = dataclasses.replace(mode, snapshots=1, averages=False, triggers=False,
                                native_gpu=False, streamable=False, outputs=("statistic",))
    parts = package.built_in
    extras = ([f.name for f in dataclasses.fields(BuiltInParts)
               if getattr(parts, f.name) != getattr(NO_PARTS, f.name)]
              if isinstance(parts, BuiltInParts) else [type(parts).__name__])
    problems = [
        *([f"its mode is named {mode.name!r}"] if mode.name != name else []),
        *(["its mode asks for what only the built-in modes have (a chain, the online "
           "average, triggers, the native gpu layout, streamed graphs or outputs other than "
           "'statistic')"] if mode != plain or len(mode.networks) != 1 else []),
        *([f"no graph builder for its network {mode.networks[0]!r}"]
          if mode.networks and mode.networks[0] not in package.graphs else []),
        *(["summarize without a summary type"] if package.summarize and not package.summary
          else []),
        *([f"parts only the built-in modes' packages have (built_in: {', '.join(extras)})"]
          if extras else []),
        *(["a config_section that is not a frozen dataclass"]
          if package.config_section is not None and not _frozen_dataclass(package.config_section)
          else []),
    ]
    if problems:
        raise ConfigError(f"{where}: " + "; ".join(problems))
    return package
