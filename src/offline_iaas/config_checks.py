"""From the TOML a user wrote to a checked campaign config (``config.py`` holds the sections).

Values
    ``--set`` overrides, plain TOML data turned into the sections' fields (each value checked
    against the field's type, relative paths taken from the config file's directory) and
    fields written back as TOML.
Rules
    What a loaded config must meet across its keys (``check_config``), checked once when it
    is loaded.

Each failure is one ``ConfigError`` naming the file and the key: ``<file>: '<key>' <why>``.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import re
import tomllib
import types
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any

from offline_iaas.config_numbers import check_finite, check_ranges, off_grid
from offline_iaas.config_sections import DataConfig, ModelConfig, SearchConfig, SynthConfig
from offline_iaas.digests import file_sha256
from offline_iaas.errors import ConfigError, NotStreamable
from offline_iaas.manifest import MANIFEST_FILE
from offline_iaas.mode_packages import ENTRY_POINT_GROUP, find_mode, mode_names, mode_package
from offline_iaas.modes import BUILT_IN_MODES
from offline_iaas.network_streaming import whole_window_reason

if TYPE_CHECKING:
    from offline_iaas.config import CampaignConfig

SITE_PROFILES: tuple[str, ...] = ("local", "ldg", "osg", "hepcloud")
SERVER_RUNTIMES: tuple[str, ...] = ("native", "apptainer", "singularity")
BAD_FILE_CHOICES: tuple[str, ...] = ("fail", "gap")
"""``data.on_bad_file``: stop at a bad frame file, or make its span a gap."""
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
_SIZE = re.compile(r"[0-9]+(\.[0-9]+)?[KMGT]B?", re.IGNORECASE)
_log = logging.getLogger(__name__)
MODEL_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}")
"""``model.name``: the served model's directory in the repository and its name in Triton's
URLs (``/v2/models/<name>``); not hidden, no path, no option, at most a file name's 255."""


GPS_END = 1e10
"""GPS seconds of the year 2296: later starts are typos (frame names hold 10 digits)."""
SAMPLE_RATES_HZ = (16.0, 65536.0)
"""``data.sample_rate`` and ``synth.frame_sample_rate``: from LIGO's slowest recorded channels
to its fastest; beyond, a typo's exponent (a stride or file of no sample, a file of 1e300)."""
F_LOWER_MIN_HZ = 1.0
"""``synth.f_lower_hz`` floor: below the seismic wall of any ground-based detector, and a
waveform from lower lasts days (from 0, forever: lalsimulation crashed)."""
REDSHIFTS = (1e-3, 20.0)
"""``synth.redshift_max``: from 4 Mpc (a nearer population is no population) to before the
first stars (Planck18's distance and volume crashed at 1e300)."""


def check_config(c: CampaignConfig, path: Path) -> None:
    """ConfigError naming the file and key of the first invalid value of ``c``."""
    def fail(key: str, why: str) -> None:
        raise ConfigError(f"{path}: '{key}' {why}")

    check_finite(c, fail)
    if not 0 <= c.data.start < GPS_END:  # a typo's exponent: no frame file holds it
        fail("data.start", f"must be a GPS time in [0, {GPS_END:.0e}) s, got {c.data.start:g}")
    if c.data.duration <= 0:
        fail("data.duration", f"must be positive, got {c.data.duration}")
    if c.data.sample_rate <= 0:
        fail("data.sample_rate", f"must be positive, got {c.data.sample_rate}")
    if not SAMPLE_RATES_HZ[0] <= c.data.sample_rate <= SAMPLE_RATES_HZ[1]:
        fail("data.sample_rate", f"must be in [{SAMPLE_RATES_HZ[0]:g}, {SAMPLE_RATES_HZ[1]:g}] "
             f"Hz, got {c.data.sample_rate:g}")
    if off_grid(c.data.start, c.data.sample_rate):  # every client failed at its first read
        fail("data.start", f"must be on the data.sample_rate sample grid (a multiple of "
             f"1/{c.data.sample_rate:g} s after a whole GPS second), got {c.data.start!r}")
    if (c.data.frames is None) == (not c.data.datafind_server):
        fail("data.frames", "or data.datafind_server must be set, and not both")
    if c.data.on_bad_file not in BAD_FILE_CHOICES:
        fail("data.on_bad_file", f"must be one of {', '.join(map(repr, BAD_FILE_CHOICES))}, "
             f"got {c.data.on_bad_file!r}")
    if c.data.datafind_server and not c.data.frametypes:
        fail("data.frametypes", "must list the frame types to read with data.datafind_server")
    samples = c.data.duration * c.data.sample_rate
    if abs(samples - round(samples)) > 1e-6:
        fail(
            "data.duration",
            f"({c.data.duration} s) must be a whole number of samples at data.sample_rate "
            f"({c.data.sample_rate} Hz)",
        )
    if not c.data.channels:
        fail("data.channels", "must name at least one channel")
    for ch in c.data.channels:
        if not _is_channel_name(ch):
            fail("data.channels", f"entry {ch!r} is not of the form IFO:NAME")
    if (twice := _listed_twice(c.data.channels)) is not None:
        fail("data.channels", f"lists the channel {twice} twice")
    if not MODEL_NAME.fullmatch(c.model.name):  # a directory of the model repository
        fail("model.name", "must be a model name Triton takes (letters, digits, '_', '-', '.'; "
             f"not starting with '.' or '-'; at most 255), got {c.model.name!r}")
    if c.model.name == MANIFEST_FILE:
        fail("model.name", f"must not be {MANIFEST_FILE!r}: the model repository's manifest "
             "file has that name")
    if c.model.inference_rate <= 0:
        fail("model.inference_rate", f"must be positive, got {c.model.inference_rate}")
    stride = c.data.sample_rate / c.model.inference_rate
    if abs(stride - round(stride)) > 1e-9:
        fail(
            "model.inference_rate",
            f"({c.model.inference_rate} Hz) must divide data.sample_rate "
            f"({c.data.sample_rate} Hz) into a whole number of samples",
        )
    if round(stride) < 1:  # 1e12 Hz: a stride of no sample
        fail("model.inference_rate", f"({c.model.inference_rate:g} Hz) must not exceed "
             f"data.sample_rate ({c.data.sample_rate:g} Hz): a stride is at least one sample")
    kernel = c.model.kernel_seconds * c.data.sample_rate
    if c.model.kernel_seconds <= 0 or abs(kernel - round(kernel)) > 1e-9 or round(kernel) < 1:
        fail("model.kernel_seconds", "must be a positive whole number of samples")
    if c.kernel_samples < c.stride_samples:
        fail(
            "model.kernel_seconds",
            f"({c.model.kernel_seconds} s) must not be shorter than the stride "
            f"({1 / c.model.inference_rate} s)",
        )
    if c.model.batch_size < 1:
        fail("model.batch_size", f"must be at least 1, got {c.model.batch_size}")
    if c.layout.servers < 1:
        fail("layout.servers", f"must be at least 1, got {c.layout.servers}")
    if c.layout.clients_per_server < 1:
        fail("layout.clients_per_server", f"must be at least 1, got {c.layout.clients_per_server}")
    clients = c.layout.servers * c.layout.clients_per_server
    if c.total_windows < clients:
        fail(
            "data.duration",
            f"({c.data.duration} s) holds {c.total_windows} windows, fewer than the "
            f"{clients} client shares of the layout",
        )
    if c.server.runtime not in SERVER_RUNTIMES:
        known = ", ".join(SERVER_RUNTIMES)
        fail("server.runtime", f"must be one of {known}, got {c.server.runtime!r}")
    if c.server.runtime != "native" and not c.server.image:
        fail("server.image", f"must name the Triton image (server.runtime = {c.server.runtime!r})")
    for key, value in (("server.memory", c.server.memory), ("server.disk", c.server.disk),
                       ("site.client_memory", c.site.client_memory),
                       ("site.client_disk", c.site.client_disk),
                       ("site.merge_memory", c.site.merge_memory),
                       ("site.merge_disk", c.site.merge_disk)):
        if not _SIZE.fullmatch(value):
            fail(key, f"must be a size with its unit (e.g. '4GB', '512MB'), got {value!r}")
    if c.site.profile not in SITE_PROFILES:
        fail("site.profile", f"must be one of {', '.join(SITE_PROFILES)}, got {c.site.profile!r}")
    if c.site.filesystem not in ("", "shared", "transfer"):
        fail("site.filesystem", f"must be 'shared', 'transfer' or '' (the profile's), got "
             f"{c.site.filesystem!r}")
    if c.server.instances < 1:
        fail("server.instances", f"must be at least 1, got {c.server.instances}")
    if c.client.in_flight < 1:
        fail("client.in_flight", f"must be at least 1, got {c.client.in_flight}")
    if c.client.checkpoint_requests < 1:
        fail("client.checkpoint_requests", "must be at least 1")
    if c.client.failover_seconds < 0:
        fail("client.failover_seconds", f"must not be negative (0: never fail over), got "
             f"{c.client.failover_seconds}")
    if c.merge.shard_seconds < 0:
        fail("merge.shard_seconds", f"must not be negative (0: one merge), got "
             f"{c.merge.shard_seconds}")
    if 0 < c.merge.shard_seconds < 1:  # 1e-300: a shard per no time
        fail("merge.shard_seconds", f"must be 0 (one merge) or at least 1 s, got "
             f"{c.merge.shard_seconds:g}")
    if abs(c.merge.shard_seconds - round(c.merge.shard_seconds)) > 1e-9:
        fail("merge.shard_seconds", f"must be a whole number of seconds, got "
             f"{c.merge.shard_seconds:g}")
    _check_population(c.synth, fail)
    _check_mode(c, fail)
    _check_streamed(c, fail)
    check_ranges(c, fail)


def _check_population(s: SynthConfig, fail: typing.Callable[[str, str], None]) -> None:
    """``synth``'s numbers (above Nyquist, ``synth.f_lower_hz`` is refused by ``synth``)."""
    if s.file_duration < 1:
        fail("synth.file_duration", f"must be at least 1 s, got {s.file_duration:g}")
    if not SAMPLE_RATES_HZ[0] <= s.frame_sample_rate <= SAMPLE_RATES_HZ[1]:
        fail("synth.frame_sample_rate", f"must be in [{SAMPLE_RATES_HZ[0]:g}, "
             f"{SAMPLE_RATES_HZ[1]:g}] Hz, got {s.frame_sample_rate:g}")
    if s.f_lower_hz <= 0:
        fail("synth.f_lower_hz", f"must be positive, got {s.f_lower_hz}")
    if s.f_lower_hz < F_LOWER_MIN_HZ:
        fail("synth.f_lower_hz", f"must be at least {F_LOWER_MIN_HZ:g} Hz, got {s.f_lower_hz:g}")
    if s.mass_min_msun <= 0:
        fail("synth.mass_min_msun", f"must be positive, got {s.mass_min_msun}")
    if s.mass_max_msun < s.mass_min_msun:
        fail("synth.mass_max_msun", f"({s.mass_max_msun}) must be at least "
             f"synth.mass_min_msun ({s.mass_min_msun})")
    if not 0 <= s.spin_max < 1:
        fail("synth.spin_max", f"must be in [0, 1), got {s.spin_max}")
    if s.redshift_max <= 0:
        fail("synth.redshift_max", f"must be positive, got {s.redshift_max}")
    if not REDSHIFTS[0] <= s.redshift_max <= REDSHIFTS[1]:
        fail("synth.redshift_max", f"must be in [{REDSHIFTS[0]:g}, {REDSHIFTS[1]:g}], got "
             f"{s.redshift_max:g}")
    if not s.network_snr_min >= 0:
        fail("synth.network_snr_min", f"must not be negative, got {s.network_snr_min}")


def _check_slides(c: CampaignConfig, fail: typing.Callable[[str, str], None]) -> None:
    search = c.search
    if search.ifar_threshold_years <= 0:
        fail("search.ifar_threshold_years", f"must be positive, got {search.ifar_threshold_years}")
    if search.slides < 0:
        fail("search.slides", f"must not be negative, got {search.slides}")
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
    if search.slide_seconds <= 0 or abs(strides - round(strides)) > 1e-9:
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
        if value < 0 or abs(samples - round(samples)) > 1e-9 or round(samples) % 2:
            fail(f"search.{key}", f"must be an even, non-negative number of samples at "
                 f"{rate:g} Hz, got {value}")
    if search.psd_fftlength <= 0 or search.psd_seconds < 2 * search.psd_fftlength:
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
    for key, value in (("cluster_seconds", search.cluster_seconds), ("found_seconds",
                       search.found_seconds), ("exclusion_seconds", search.exclusion_seconds)):
        if value <= 0:
            fail(f"search.{key}", f"must be positive, got {value}")
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
    _check_witnesses(c.data, fail)
    package = mode_package(c.model.mode)
    if package is not None and package.check_config is not None:
        package.check_config(c, fail)


def _is_channel_name(channel: str) -> bool:
    """Whether ``channel`` is ``IFO:NAME``, neither part empty."""
    ifo, colon, name = channel.partition(":")
    return bool(ifo and colon and name)


def _listed_twice(channels: typing.Sequence[str]) -> str | None:
    """The first channel that ``channels`` lists again, None when each is listed once."""
    seen: set[str] = set()
    for ch in channels:
        if ch in seen:
            return ch
        seen.add(ch)
    return None


def _check_witnesses(data: DataConfig, fail: typing.Callable[[str, str], None]) -> None:
    for ch in data.witnesses:
        if not _is_channel_name(ch):
            fail("data.witnesses", f"entry {ch!r} is not of the form IFO:NAME")
    if (twice := _listed_twice(data.witnesses)) is not None:
        fail("data.witnesses", f"lists the channel {twice} twice")
    if set(data.witnesses) & set(data.channels):
        fail("data.witnesses", "lists a strain channel of data.channels")


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
