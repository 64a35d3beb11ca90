"""From the TOML a user wrote to a checked campaign config (``config.py`` holds the sections).

Values
    ``--set`` overrides, plain TOML data turned into the sections' fields (each value checked
    against the field's type, relative paths taken from the config file's directory) and
    fields written back as TOML.
Rules
    What a loaded config must meet (``check_config``), checked once when it is loaded: its
    steps in order, the numbers' rules (``config_numbers``), each section's own
    (``config_section_rules``), and here the mode's and the search's, across sections.

Each failure is one ``ConfigError`` naming the file and the key: ``<file>: '<key>' <why>``.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import tomllib
import types
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any

from offline_iaas.config_numbers import check_finite, check_magnitudes, check_signs
from offline_iaas.config_section_rules import (
    check_channels,
    check_data,
    check_layout,
    check_merge,
    check_model,
    check_population,
    check_server_and_site,
)
from offline_iaas.config_sections import ModelConfig, SearchConfig
from offline_iaas.digests import file_sha256
from offline_iaas.errors import ConfigError, NotStreamable
from offline_iaas.mode_packages import ENTRY_POINT_GROUP, find_mode, mode_names, mode_package
from offline_iaas.modes import BUILT_IN_MODES
from offline_iaas.network_streaming import whole_window_reason

if TYPE_CHECKING:
    from offline_iaas.config import CampaignConfig

RENAMED_KEYS: dict[tuple[str, str], str] = {
    ("client", "chunk_seconds"): "read_seconds",
    ("merge", "chunk_seconds"): "shard_seconds",
    ("search", "time_shifts"): "slides",
    ("search", "shift_seconds"): "slide_seconds",
}
"""Keys renamed by the glossary (#38), ``(section, old key)``: the new key. The old one still
sets the new field, with one deprecation warning (``renamed_keys``)."""
RENAMED_SECTIONS: dict[str, str] = {"bbhnet": "search"}
"""Sections renamed, old name: new name, their keys the same. ``[bbhnet]`` became ``[search]``
(#43: the search's settings are the core's, whichever mode's statistic it searches). The old
name still loads, with one deprecation warning; both given is refused."""
FORMER_SECTIONS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "deepclean": ({"canary": False}, {
        "band_low_hz": 55.0, "band_high_hz": 65.0, "filter_order": 8, "frame_seconds": 64.0,
        "asd_fftlength": 4.0, "guard_hz": 2.0, "channel_suffix": "DC", "frame_type": "HOFT_DC",
        "gate": "flag", "gate_tolerance": 0.05, "gate_line_ratio": 1.0}),
}
"""Sections of the core that a mode package took over (#43: ``[deepclean]``, DeepClean's, in
modes deepclean and e2e), with their keys' defaults then: those the clients read, and those
only the merge read. Every campaign had the section, so a campaign whose mode has none now
hashes these defaults as it did (the merge-only ones in ``merge_hash`` only), and keeps its
run directories' parts; its ``campaign.toml`` written then holds the section, which reads
and is dropped (``former_sections``). Frozen: the package's defaults may change, these may
not."""
_log = logging.getLogger(__name__)


def check_config(c: CampaignConfig, path: Path) -> None:
    """ConfigError naming the file and key of the first invalid value of ``c``: its numbers'
    rules first (finite, signs: before any rule computes with one), each section's own, the
    mode's and the search's across sections, and the numbers' upper bounds last (after the
    rules that say more of a key)."""
    def fail(key: str, why: str) -> None:
        raise ConfigError(f"{path}: '{key}' {why}")

    check_finite(c, fail)
    check_signs(c, fail)
    check_data(c.data, fail)
    check_channels(c.data, fail)
    check_model(c, fail)
    check_layout(c, fail)
    check_server_and_site(c.server, c.site, fail)
    check_merge(c.merge, fail)
    check_population(c.synth, fail)
    _check_mode(c, fail)
    _check_streamed(c, fail)
    check_magnitudes(c, fail)


def _check_slides(c: CampaignConfig, fail: typing.Callable[[str, str], None]) -> None:
    search = c.search
    _check_whitening(c, fail)
    _check_inject(c, fail)
    if not search.slides:
        return
    if not c.mode.triggers:
        fail("search.slides", f"needs a BBHnet mode ({_modes_that('triggers')}), not "
             f"{c.model.mode!r}")
    if len(c.data.channels) != 2:
        fail("search.slides", "shifts the second detector against the first: "
             f"data.channels must name two, got {list(c.data.channels)}")
    strides = search.slide_seconds * c.model.inference_rate
    if abs(strides - round(strides)) > 1e-9:
        fail("search.slide_seconds", f"must be a positive whole number of strides "
             f"(1 / model.inference_rate = {1 / c.model.inference_rate:g} s), got "
             f"{search.slide_seconds}")
    if search.slide_seconds < c.model.kernel_seconds:  # slide k+1, Δ later: the same 2nd window
        fail("search.slide_seconds", f"({search.slide_seconds:g} s) must be at least "
             f"model.kernel_seconds ({c.model.kernel_seconds:g} s): neighbouring shorter slides "
             "share overlapping windows, so they are not independent draws of the background")


def _modes_that(does: str, quoted: bool = False) -> str:
    """The built-in modes whose record has ``does`` (``triggers``, ``averages``), as a
    message lists them (``bbhnet, e2e``; quoted: ``'bbhnet' or 'e2e'``): only they may."""
    names = [m for m in BUILT_IN_MODES if getattr(find_mode(m), does)]
    return " or ".join(f"'{m}'" for m in names) if quoted else ", ".join(names)


def _check_inject(c: CampaignConfig, fail: typing.Callable[[str, str], None]) -> None:
    search = c.search
    if not search.inject:
        return
    if not c.mode.triggers:
        fail("search.inject", f"(injections on the fly) needs a BBHnet search (mode "
             f"{_modes_that('triggers', quoted=True)}), not mode {c.model.mode!r}")
    if c.mode.witnesses and search.whitening != "fixed":  # e2e: BBHnet on the cleaned strain
        fail("search.inject", f"(injections on the fly) in mode {c.model.mode!r} needs "
             "search.whitening = "
             "'fixed' (the rolling whitening of the cleaned strain would whiten the foreground "
             "with its own PSD: not yet supported)")
    if search.injections is None:
        fail("search.inject", "needs search.injections: the set to add on the fly")
    if c.data.on_bad_file != "fail":
        fail("search.inject", "(injections on the fly) needs data.on_bad_file = 'fail' "
             "(a foreground streamed around a gap is not yet supported)")


def _check_whitening(c: CampaignConfig, fail: typing.Callable[[str, str], None]) -> None:
    search = c.search
    if search.whitening not in ("fixed", "rolling"):
        fail("search.whitening", f"must be 'fixed' or 'rolling', got {search.whitening!r}")
    if search.whitening == "fixed":
        return
    if not c.mode.triggers:
        fail("search.whitening", f"'rolling' needs a BBHnet mode ({_modes_that('triggers')}), "
             f"not {c.model.mode!r}")
    rate = c.data.sample_rate
    for key, value in (("psd_fftlength", search.psd_fftlength), ("psd_seconds", search.psd_seconds),
                       ("whitening_crop_seconds", search.whitening_crop_seconds)):
        samples = value * rate
        if abs(samples - round(samples)) > 1e-9 or round(samples) % 2:
            fail(f"search.{key}", f"must be an even, non-negative number of samples at "
                 f"{rate:g} Hz, got {value}")
    if search.psd_seconds < 2 * search.psd_fftlength:
        fail("search.psd_seconds", f"must hold at least two Welch segments of "
             f"search.psd_fftlength ({search.psd_fftlength:g} s), got {search.psd_seconds}")
    if search.whitening_crop_seconds >= c.model.kernel_seconds:
        fail("search.whitening_crop_seconds", f"must be shorter than model.kernel_seconds "
             f"({c.model.kernel_seconds:g} s), got {search.whitening_crop_seconds}")


def _check_streamed(c: CampaignConfig, fail: typing.Callable[[str, str], None]) -> None:
    """``model.streamed = true`` where the config keeps the networks whole-window
    (``network_streaming.whole_window_reason``; ``auto`` serves them so). What the weights
    decide is checked at export."""
    if c.model.streamed is not True:
        return
    found = whole_window_reason(c)
    if found is not None:
        key, reason = found
        fail(key, NotStreamable.refusal(reason))


def _check_mode(c: CampaignConfig, fail: typing.Callable[[str, str], None]) -> None:
    search = c.search
    if search.exclusion_seconds < search.found_seconds:
        fail("search.exclusion_seconds", f"({search.exclusion_seconds:g} s) must be at least "
             f"search.found_seconds ({search.found_seconds:g} s): a trigger that finds an "
             "injection must not also stand in the background")
    try:
        find_mode(c.model.mode)
    except KeyError:
        fail("model.mode", f"must be one of {', '.join(mode_names())}, got {c.model.mode!r} "
             "(a mode from outside the project is a package installed in this Python, "
             f"registered under the entry point group {ENTRY_POINT_GROUP})")
    except ConfigError as err:
        fail("model.mode", f"= {c.model.mode!r}: {err}")
    _check_slides(c, fail)
    package = mode_package(c.model.mode)
    if package is not None and package.check_config is not None:
        package.check_config(c, fail)


# ---- TOML values and the sections' fields --------------------------------------------------


def plain_value(value: Any) -> Any:
    """A field's value as TOML holds it (paths as strings, tuples as lists)."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return list(value)
    return value


def parse_override(text: str) -> tuple[str, str, Any]:
    """Split ``section.key=value`` into its parts, parsing the value as TOML."""
    if "=" not in text or "." not in text.split("=", 1)[0]:
        raise ConfigError(f"override {text!r} is not of the form section.key=value")
    dotted, raw = text.split("=", 1)
    section, key = dotted.strip().split(".", 1)
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return section, key.strip(), value


def renamed_keys(raw: dict[str, Any], path: Path) -> dict[str, Any]:
    """``raw`` with each old section of ``RENAMED_SECTIONS`` and each old key of
    ``RENAMED_KEYS`` moved to its new name, logging one deprecation warning per name;
    ConfigError naming both when both are given."""
    renamed_sections(raw, path)
    for name, values in raw.items():
        if isinstance(values, dict):
            _renamed(name, values, path)
    return raw


def renamed_sections(raw: dict[str, Any], path: Path) -> dict[str, Any]:
    """``raw`` with each old section of ``RENAMED_SECTIONS`` under its new name, logging one
    deprecation warning per section; ConfigError naming both when both are given."""
    for old, new in RENAMED_SECTIONS.items():
        if old not in raw:
            continue
        if new in raw:
            raise ConfigError(f"{path}: [{old}] and [{new}] are both given: [{old}] is "
                              f"deprecated, keep only [{new}] (the same keys)")
        _log.warning("%s: [%s] is deprecated: use [%s] (the same keys)", path, old, new)
        raw[new] = raw.pop(old)
    return raw


def current_name(section: str, key: str) -> tuple[str, str]:
    """``section.key`` as it is named now (``RENAMED_SECTIONS``, then ``RENAMED_KEYS``)."""
    section = RENAMED_SECTIONS.get(section, section)
    return section, RENAMED_KEYS.get((section, key), key)


def _renamed(name: str, values: dict[str, Any], path: Path) -> None:
    for (section, old), new in RENAMED_KEYS.items():
        if section != name or old not in values:
            continue
        if new in values:
            raise ConfigError(f"{path}: '{section}.{old}' and '{section}.{new}' are both given: "
                              f"'{section}.{old}' is deprecated, keep only '{section}.{new}'")
        _log.warning("%s: %s.%s is deprecated: use %s.%s", path, section, old, section, new)
        values[new] = values.pop(old)


def hashed_names(plain: dict[str, Any], search: SearchConfig | None = None, merge: bool = True
                 ) -> dict[str, Any]:
    """``plain`` (sections of ``CampaignConfig.to_dict``) with the keys of ``RENAMED_KEYS``
    and the sections of ``RENAMED_SECTIONS`` under their old names, and each section of
    ``FORMER_SECTIONS`` it lacks at its defaults then (``merge``: with its merge-only keys):
    the config hashes, and so a run directory's finished parts and merges, do not change with
    the renames and moves. With ``search.inject`` the clients stream the injection set (its
    bytes) and its found windows: both join every hash."""
    if search is not None and search.inject and "search" in plain:
        path = search.injections
        known = path is not None and path.is_file()
        plain["search"]["foreground"] = {
            "set_sha256": file_sha256(path) if known else None,
            "found_seconds": search.found_seconds}
    if "model" in plain and plain["model"].get("streamed") is not True:
        # false or "auto": earlier runs' hashes hold (what auto chose is the repository's:
        # exported again, its versions differ from those run.json pins, binding.py)
        del plain["model"]["streamed"]
    for (section, old), new in RENAMED_KEYS.items():
        if section in plain and new in plain[section]:
            plain[section][old] = plain[section].pop(new)
    for old, new in RENAMED_SECTIONS.items():
        if new in plain:
            plain[old] = plain.pop(new)
    for name, (streamed, merged) in FORMER_SECTIONS.items():
        if name not in plain:  # the campaign's mode has no such section
            plain[name] = {**streamed, **(merged if merge else {})}
    return plain


def former_sections(raw: dict[str, Any], own: str | None, path: Path) -> None:
    """Drop from ``raw`` each section of ``FORMER_SECTIONS`` that the campaign's mode has not
    (``own``: the name of its section): silently where it says the defaults then (the
    ``campaign.toml`` of a run written before #43); with one warning where a key only the
    merge read says another value (none of that mode's code reads it: a template shared
    between modes). ConfigError naming the key where one the clients read says another (a
    canary that mode would not serve) or the key is unknown."""
    for name, (streamed, merged) in FORMER_SECTIONS.items():
        values = raw.get(name)
        if name == own or not isinstance(values, dict):
            continue
        model = raw.get("model")
        mode = model.get("mode", ModelConfig.mode) if isinstance(model, dict) else None
        wrong = sorted(k for k, v in values.items() if k not in merged and streamed.get(k) != v)
        if wrong:
            raise ConfigError(f"{path}: '{name}.{wrong[0]}' is not a key of mode {mode!r} "
                              f"([{name}] is the section of the modes whose package has it): "
                              "remove it")
        other = sorted(k for k, v in values.items() if k in merged and v != merged[k])
        if other:
            _log.warning("%s: [%s] is not a section of mode %r (%s.%s is set there): ignored",
                         path, name, mode, name, other[0])
        del raw[name]


def apply_overrides(raw: dict[str, Any], overrides: list[str] | tuple[str, ...], path: Path
                    ) -> dict[str, Any]:
    """``raw`` (the sections of a config file, ``path``) with ``section.key=value`` applied
    (an old name of ``RENAMED_SECTIONS`` or ``RENAMED_KEYS`` sets its new one, with a
    deprecation warning)."""
    renamed_keys(raw, path)
    given = {parse_override(text)[:2] for text in overrides}
    for text in overrides:
        section, key, value = parse_override(text)
        new = current_name(section, key)
        if new != (section, key):
            now = ".".join(new)
            if new in given:
                raise ConfigError(f"{path}: --set '{section}.{key}' and '{now}' are both "
                                  f"given: '{section}.{key}' is deprecated, keep only '{now}'")
            _log.warning("%s: --set %s.%s is deprecated: use %s", path, section, key, now)
            section, key = new
        raw.setdefault(section, {})
        if not isinstance(raw[section], dict):
            raise ConfigError(f"{path}: override {text!r}: [{section}] is not a section")
        raw[section][key] = value
    return raw


def build_section(cls: type, name: str, values: dict, path: Path, base: Path) -> Any:
    """Section ``name`` (dataclass ``cls``) from its TOML values; ConfigError naming the key."""
    _renamed(name, values, path)
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in dataclasses.fields(cls)}
    for key in values:
        if key not in known:
            raise ConfigError(
                f"{path}: unknown key '{name}.{key}' (known in [{name}]: {', '.join(known)})"
            )
    kwargs = {}
    for key, f in known.items():
        if key not in values:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ConfigError(f"{path}: missing required key '{name}.{key}'")
            continue
        kwargs[key] = coerce(values[key], hints[key], f"{name}.{key}", path, base)
    return cls(**kwargs)


def coerce(value: Any, hint: Any, key: str, path: Path, base: Path) -> Any:
    """``value`` as the type ``hint`` of field ``key``; ConfigError when it is not one."""
    def bad(expected: str) -> ConfigError:
        shown = (f"the date/time {value.isoformat()}"  # as TOML wrote it, not Python's repr
                 if isinstance(value, (datetime.date, datetime.time)) else repr(value))
        return ConfigError(f"{path}: '{key}' must be {expected}, got {shown}")

    if typing.get_origin(hint) in (types.UnionType, typing.Union):
        inner = [h for h in typing.get_args(hint) if h is not type(None)]
        words = [w for h in inner if typing.get_origin(h) is typing.Literal
                 for w in typing.get_args(h)]
        if words and value in words and not isinstance(value, bool):
            return value
        if words and not isinstance(value, inner[0]):  # e.g. true, false or "auto"
            raise bad(f"{toml_value(True)}, {toml_value(False)} or "
                      f"{' or '.join(toml_value(w) for w in words)}")
        return coerce(value, inner[0], key, path, base)
    if hint is Path:
        if not isinstance(value, str) or not value:
            raise bad("a path string")
        p = Path(value).expanduser()
        return p if p.is_absolute() else (base / p)
    if hint is bool:
        if not isinstance(value, bool):
            raise bad("true or false")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad("an integer")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise bad("a number")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise bad("a string")
        return value
    if typing.get_origin(hint) is tuple or isinstance(hint, types.GenericAlias):
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise bad("a list of non-empty strings")
        return tuple(value)
    raise TypeError(f"unsupported config type {hint!r} for {key}")  # programming error


def toml_value(value: Any) -> str:
    """A plain value as TOML text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(str(value))
