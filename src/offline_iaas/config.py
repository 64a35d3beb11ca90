"""Campaign configuration: one TOML file, validated on load.

Each section of the file is a dataclass of ``config_sections.py``, or, for the campaign's
mode's own section (``[deepclean]`` in deepclean and e2e), of its package
(``ModePackage.config_section``); every field is a key
of that section. Unknown sections or keys, wrong types and impossible values raise ``ConfigError``
naming the key and the file. Relative paths are taken relative to the directory of the config file.

Overrides (``--set section.key=value``) are applied before validation; the value is parsed as
TOML (``4``, ``1.5``, ``"x"``, ``["a", "b"]``), falling back to a plain string.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from offline_iaas.bounded_read import NotRegularFile, TooLarge, read_text
from offline_iaas.config_checks import (
    apply_overrides,
    build_section,
    check_config,
    former_sections,
    hashed_names,
    plain_value,
    renamed_sections,
    toml_value,
)
from offline_iaas.config_sections import (
    ClientConfig,
    DataConfig,
    LayoutConfig,
    MergeConfig,
    ModelConfig,
    SearchConfig,
    ServerConfig,
    SiteConfig,
    SynthConfig,
    WorkflowConfig,
    ifo_of,
)
from offline_iaas.errors import ConfigError
from offline_iaas.geometry import StreamGeometry
from offline_iaas.mode_packages import find_mode, mode_package
from offline_iaas.modes import Mode, Outputs

OUTPUT_SECTIONS: tuple[str, ...] = ("data", "model", "layout", "synth", "search")
"""The sections the campaign's output depends on: the data, the networks and their windows,
the split into client shares, the synthetic data and the search (and the mode package's own
section, ``CampaignConfig.mode_section``). ``[server]``,
``[client]``, ``[workflow]`` and ``[site]`` only say how and where the jobs run (timeouts,
in-flight requests, instances, retries, resources): changing them keeps finished parts and
merges valid."""
HASH_EXEMPT: tuple[tuple[str, str], ...] = (("data", "on_bad_file"),)
"""Keys of those sections that only say what happens when something is wrong: a campaign
finished under either value has the same output (in neither hash)."""
MERGE_ONLY: tuple[tuple[str, str], ...] = tuple(("search", key) for key in (
    "cluster_seconds", "injections", "found_seconds", "exclusion_seconds",
    "ifar_threshold_years"))
"""Keys of ``OUTPUT_SECTIONS`` that only the merge reads (its post-processing: the search's
trigger clustering, found/missed and IFAR; a mode package's are its ``merge_only``): in
``merge_hash``, not in ``stream_hash``. No client or served model reads them
(``tests/test_config.py``)."""
MERGE_SECTIONS: tuple[str, ...] = ("merge",)
"""Whole sections only the merge reads (the merge tree): in ``merge_hash`` only."""



@dataclass(frozen=True)
class CampaignConfig:
    """A whole campaign: every section of the TOML file."""

    data: DataConfig
    model: ModelConfig
    layout: LayoutConfig = field(default_factory=LayoutConfig)
    server: ServerConfig = field(default_factory=ServerConfig)
    client: ClientConfig = field(default_factory=ClientConfig)
    workflow: WorkflowConfig = field(default_factory=WorkflowConfig)
    merge: MergeConfig = field(default_factory=MergeConfig)
    synth: SynthConfig = field(default_factory=SynthConfig)
    site: SiteConfig = field(default_factory=SiteConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    mode_section: Any = None
    """The settings of the mode package's own section (an instance of its
    ``ModePackage.config_section``), named ``mode_section_name``; None for a mode without
    one."""
    source: Path | None = None
    """The file it was loaded from (not a TOML key)."""

    # ---- derived quantities, in samples at the model rate -----------------------------
    @functools.cached_property
    def geometry(self) -> StreamGeometry:
        """The streams' window arithmetic alone (``geometry.py``), for code that reads no more
        (computed once: the config is frozen)."""
        return StreamGeometry(
            self.data.start, self.data.sample_rate, self.kernel_samples, self.stride_samples,
            self.stretch_warmup_windows, self.warmup_windows, self.slide_windows,
            self.search.slides, self.averaging_delay_windows)

    @property
    def stride_samples(self) -> int:
        """Samples between consecutive windows (``data.sample_rate / model.inference_rate``)."""
        return round(self.data.sample_rate / self.model.inference_rate)

    @property
    def stride_seconds(self) -> float:
        """Data seconds between consecutive windows (one stride)."""
        return self.geometry.stride_seconds

    @property
    def kernel_samples(self) -> int:
        """Samples in one window (``model.kernel_seconds`` at ``data.sample_rate``)."""
        return round(self.model.kernel_seconds * self.data.sample_rate)

    @property
    def stage_warmup_windows(self) -> int:
        """Windows of one stage's stream (a snapshot, an online average) that still hold
        zero-filled state: ``ceil(K / S) - 1``."""
        return -(-self.kernel_samples // self.stride_samples) - 1

    @property
    def stretch_warmup_windows(self) -> int:
        """Windows of a stretch before its first kept one (the zero lag starts at the next):
        a window warm-up per snapshot and per online average (``Mode.warmup_stages``:
        ``deepclean`` 2, ``e2e`` 3, others 1), plus the rolling whitening's PSD data. Slides
        add nothing: a slide is formed only where both its windows are kept
        (``stretches.slides_formed``)."""
        return self.mode.warmup_stages * self.stage_warmup_windows + self.psd_warmup_windows

    @property
    def warmup_windows(self) -> int:
        """Rows a stream begun inside a stretch discards before its outputs stop depending on
        where it started: the stretch's warm-up plus the longest slide's history (a stream
        from the stretch's start needs only ``stretch_warmup_windows``)."""
        return self.stretch_warmup_windows + self.slide_history_windows

    @property
    def has_slides(self) -> bool:
        """BBHnet's background is formed by time slides on the server (``search.slides``)."""
        return self.mode.triggers and self.search.slides > 0

    @property
    def rolling_whitening(self) -> bool:
        """BBHnet's windows are whitened by the served model (``search.whitening``)."""
        return self.mode.triggers and self.search.whitening == "rolling"

    @property
    def psd_warmup_windows(self) -> int:
        """Windows a stream waits until the rolling whitening's PSD comes from its own data
        only (``ceil(psd_seconds fs / S)``; 0 with the fixed whitening)."""
        if not self.rolling_whitening:
            return 0
        psd_samples = round(self.search.psd_seconds * self.data.sample_rate)
        return -(-psd_samples // self.stride_samples)

    @property
    def slide_samples(self) -> int:
        """``Δ`` of the time slides in samples at the model rate."""
        return round(self.search.slide_seconds * self.data.sample_rate)

    @property
    def slide_windows(self) -> int:
        """``Δ`` of the time slides in windows (a whole number of strides)."""
        return self.slide_samples // self.stride_samples

    @property
    def slide_history_windows(self) -> int:
        """Windows the longest slide reaches back (``N Δ / S``; 0 without slides)."""
        return self.search.slides * self.slide_windows if self.has_slides else 0

    @property
    def averaging_delay_windows(self) -> int:
        """Rows between a window and the averaged stride it completes (0 without averaging)."""
        return self.stage_warmup_windows if self.mode.averages else 0

    @property
    def mode(self) -> Mode:
        """The record of ``model.mode`` (``modes.py``, or its package's: ``mode_packages.py``)."""
        return find_mode(self.model.mode)

    @property
    def outputs(self) -> Outputs:
        """What clients request and store, and their rows (``modes.Outputs``)."""
        slides, inject = self.has_slides, self.search.inject
        return Outputs(self.mode.output_names(canary=self.canary,
                                              has_slides=slides, inject=inject),
                       len(self.ifos), self.stride_samples, self.search.slides)

    @property
    def mode_section_name(self) -> str | None:
        """The name of the mode package's section (``[deepclean]`` in e2e too:
        ``ModePackage.config_section_name``); None for a mode without one."""
        package = mode_package(self.model.mode)
        return package.section_name if package is not None else None

    @property
    def canary(self) -> bool:
        """Whether the mode's section asks for a canary of its networks (its ``canary`` key:
        ``ModePackage.config_section``)."""
        return bool(getattr(self.mode_section, "canary", False))

    @property
    def ifos(self) -> tuple[str, ...]:
        """Interferometer prefixes of ``data.channels``, in order."""
        return tuple(dict.fromkeys(ifo_of(ch) for ch in self.data.channels))

    def witnesses_of(self, ifo: str) -> tuple[str, ...]:
        """``data.witnesses`` of one interferometer, in order."""
        return tuple(w for w in self.data.witnesses if ifo_of(w) == ifo)

    @property
    def stream_channels(self) -> tuple[str, ...]:
        """The channels clients stream, in the order of the ``update`` tensor.

        ``deepclean`` needs only the witnesses (the merge reads the strain it subtracts from);
        ``e2e`` the strain and then the witnesses; the other modes the strain.
        """
        return (*(self.data.channels if self.mode.strain else ()),
                *(self.data.witnesses if self.mode.witnesses else ()))

    @property
    def frame_channels(self) -> tuple[str, ...]:
        """Every channel the campaign reads from the frames: the strain (the merge reads it in
        ``deepclean`` mode too) and the witnesses where the mode streams them."""
        return (*self.data.channels, *(self.data.witnesses if self.mode.witnesses else ()))

    @property
    def total_windows(self) -> int:
        """Windows over the whole span (a trailing part shorter than one stride is unused)."""
        return int(round(self.data.duration * self.data.sample_rate)) // self.stride_samples

    def to_dict(self) -> dict[str, Any]:
        """The configuration as TOML-ready plain data (paths as strings)."""
        out: dict[str, Any] = {}
        sections = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                    if f.name not in ("source", "mode_section")}
        if self.mode_section is not None:
            sections[self.mode_section_name] = self.mode_section
        for name, section in sections.items():
            out[name] = {k: plain_value(v) for k, v in dataclasses.asdict(section).items()}
        return out

    @property
    def _own_sections(self) -> tuple[str, ...]:
        """The mode package's section, where it has one: hashed with ``OUTPUT_SECTIONS``."""
        name = self.mode_section_name
        return (name,) if name is not None else ()

    @property
    def _own_merge_only(self) -> tuple[tuple[str, str], ...]:
        """The keys of the mode package's section that only the merge reads."""
        package = mode_package(self.model.mode)
        name = self.mode_section_name
        return tuple((name, key) for key in package.merge_only) if package and name else ()

    def stream_hash(self) -> str:
        """Hash of what the clients' parts depend on: ``OUTPUT_SECTIONS`` and the mode
        package's section less ``HASH_EXEMPT``, ``MERGE_ONLY`` and the package's
        ``merge_only``. A part's sidecar records it; a part recorded under another is redone."""
        return _digest(self._hashed((*OUTPUT_SECTIONS, *self._own_sections),
                                    (*HASH_EXEMPT, *MERGE_ONLY, *self._own_merge_only),
                                    merge=False))

    def merge_hash(self) -> str:
        """Hash of what the merge's outputs depend on: what ``stream_hash`` covers, the
        ``MERGE_ONLY`` keys and ``MERGE_SECTIONS``. The shard merges' and the merge's summaries
        record it: changing a merge-only setting redoes the merge nodes, not the clients."""
        return _digest(self._hashed((*OUTPUT_SECTIONS, *self._own_sections, *MERGE_SECTIONS),
                                    HASH_EXEMPT, merge=True))

    def v1_hash(self) -> str:
        """The one hash records of schema version 1 carry (``config_hash``, before the stream
        and merge hashes were split: ``OUTPUT_SECTIONS``, where ``[deepclean]`` was then, less
        ``HASH_EXEMPT``), so that a run directory written then keeps its parts and merges."""
        return _digest(self._hashed((*OUTPUT_SECTIONS, *self._own_sections), HASH_EXEMPT,
                                    merge=True))

    def _hashed(self, sections: tuple[str, ...], exempt: tuple[tuple[str, str], ...],
                merge: bool) -> dict[str, Any]:
        plain = {k: v for k, v in self.to_dict().items() if k in sections}
        for section, key in exempt:
            plain[section].pop(key, None)
        return hashed_names(plain, self.search, merge)


def _digest(plain: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(plain, sort_keys=True).encode()).hexdigest()[:16]


SECTIONS: dict[str, type] = {
    "data": DataConfig,
    "model": ModelConfig,
    "layout": LayoutConfig,
    "server": ServerConfig,
    "client": ClientConfig,
    "workflow": WorkflowConfig,
    "merge": MergeConfig,
    "synth": SynthConfig,
    "site": SiteConfig,
    "search": SearchConfig,
}


def load_config(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> CampaignConfig:
    """Load, override and validate a campaign config file (``read_config_text``, then
    ``config_from_text``).

    Parameters
    ----------
    path
        The TOML file.
    overrides
        ``section.key=value`` strings applied on top of the file.
    """
    path = Path(path)
    return config_from_text(read_config_text(path), path, overrides)


def read_config_text(path: Path) -> str:
    """The text of the config file ``path`` (a BOM, as some editors write, dropped): what
    ``config_from_text`` parses, for a reader that also shows the text (the report).

    Raises
    ------
    ConfigError
        One line naming the file: missing, not a regular file (a FIFO is not waited on), too
        large, unreadable, or not UTF-8.
    """
    try:
        return read_text(path, encoding="utf-8-sig")
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except (TooLarge, NotRegularFile) as err:  # a FIFO: not waited on; /dev/zero: not read
        raise ConfigError(f"{path}: cannot read the config file: {err}") from None
    except (OSError, UnicodeDecodeError) as err:  # no permission, not UTF-8
        why = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise ConfigError(f"{path}: cannot read the config file: {why}") from None


def config_from_text(text: str, path: Path, overrides: list[str] | tuple[str, ...] = ()
                     ) -> CampaignConfig:
    """Parse, override and validate the TOML ``text`` of the config file ``path`` (read
    already, ``read_config_text``); ConfigError naming ``path`` if it is not valid."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML: {err}") from None
    return config_from_dict(apply_overrides(raw, overrides, path), path)


def override_config(config: CampaignConfig, overrides: list[str] | tuple[str, ...]
                    ) -> CampaignConfig:
    """``config`` with ``section.key=value`` overrides applied, validated again."""
    path = config.source or Path("config.toml")
    raw = {section: {k: v for k, v in values.items() if v is not None}  # None: the default
           for section, values in config.to_dict().items()}
    return config_from_dict(apply_overrides(raw, overrides, path), path)


def config_from_dict(raw: dict[str, Any], path: Path) -> CampaignConfig:
    """Validate plain data (as read from TOML) into a ``CampaignConfig`` (a renamed section
    under its old name is read as the new one, with a deprecation warning)."""
    renamed_sections(raw, path)
    own = _mode_section(raw, path)
    former_sections(raw, own[0] if own else None, path)
    known = {**SECTIONS, **dict([own] if own else [])}
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise ConfigError(f"{path}: unknown section [{unknown[0]}] (known: {', '.join(known)})")
    base = path.parent.resolve()
    sections = {}
    for name, cls in known.items():
        values = raw.get(name, {})
        if not isinstance(values, dict):
            raise ConfigError(f"{path}: {name} must be a section [{name}]")
        sections[name] = build_section(cls, name, values, path, base)
    mode_section = sections.pop(own[0]) if own else None
    config = CampaignConfig(**sections, mode_section=mode_section, source=path.resolve())
    check_config(config, path)
    return config


def _mode_section(raw: dict[str, Any], path: Path) -> tuple[str, type] | None:
    """``(name, dataclass)`` of the section of ``raw``'s mode's package
    (``ModePackage.config_section``); None where it has none or the mode is not found
    (``check_config`` says so). A package refused is refused here, as ``check_config`` says it.
    """
    model = raw.get("model", {})
    name = model.get("mode", ModelConfig.mode) if isinstance(model, dict) else None
    try:
        package = mode_package(name) if isinstance(name, str) else None
    except ConfigError as err:
        raise ConfigError(f"{path}: 'model.mode' = {name!r}: {err}") from None
    section = package.section_name if package is not None else None
    if section is None:
        return None
    if section in SECTIONS:
        raise ConfigError(f"{path}: the package of mode {name!r} has a config section, whose "
                          f"name [{section}] is a section of offline-iaas itself")
    return section, package.config_section


def write_config(config: CampaignConfig, path: Path) -> None:
    """Write the resolved configuration as TOML (paths absolute)."""
    lines = []
    for section, values in config.to_dict().items():
        lines.append(f"[{section}]")
        for key, value in values.items():
            if value is not None:  # TOML has no null: an absent key is the default None
                lines.append(f"{key} = {toml_value(value)}")
        lines.append("")
    path.write_text("\n".join(lines))
