"""Injection sets on disk: which format and layout a file is, and the merge's injection list.

Formats, by suffix
    ``.h5``/``.hdf5``: HDF5 in one of two layouts, told apart by their content:

    - this project's (``search/injections_hdf5.py``): root attribute ``mass_frame``
      (``"source"`` as written; ``layout = "offline-iaas"``), Cartesian spins, source-frame
      masses, both SNRs per detector;
    - aframe's ``InjectionParameterSet`` (``search/injections_aframe.py``, read from
      github.com/ML4GW/aframe at commit ``injections_aframe.AFRAME_COMMIT``): a ``parameters``
      group with ``theta_jn``, ``a_1``, ``tilt_1``, ... and detector-frame masses.

    A file with neither (a ``parameters`` group whose masses could be source or detector
    frame) is refused (DataError naming the file): reading it either way could be wrong by
    ``1 + z``.
    ``.xml``/``.xml.gz``: LIGO_LW ``sim_inspiral`` (``search/injections_ligolw.py``), read by
    LAL's ``lalmetaio`` and igwn-ligolw.

``write_injection_set`` writes this project's HDF5 layout, or aframe's with
``layout="aframe"`` (``offline-iaas convert-injections --layout aframe``), or LIGO_LW.
``read_injection_list`` (what the merge counts) also takes ``synth.json`` or a JSON list.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from offline_iaas.atomic import replaced_atomically
from offline_iaas.bounded_read import NotRegularFile, TooLarge, read_text
from offline_iaas.data.gwf_reader import reader
from offline_iaas.data.hdf5_probe import readable_hdf5
from offline_iaas.errors import ConfigError, DataError, not_a_regular_file
from offline_iaas.json_values import finite_number, json_kind
from offline_iaas.physics import Injection
from offline_iaas.search.injection_set import InjectionSet, attr_value, number_attribute
from offline_iaas.search.injections_aframe import MARKERS, read_aframe, write_aframe
from offline_iaas.search.injections_aframe import REQUIRED as AFRAME_REQUIRED
from offline_iaas.search.injections_hdf5 import LAYOUT, MASS_FRAMES, REQUIRED, read_hdf5, write_hdf5
from offline_iaas.search.injections_ligolw import read_ligolw, write_ligolw

__all__ = ["InjectionListing", "InjectionSet", "LAYOUTS", "file_format", "hdf5_layout",
           "read_injection_list", "read_injection_listing", "read_injection_set",
           "write_injection_set"]

JSON_SUFFIXES = (".json",)
HDF5_SUFFIXES = (".h5", ".hdf5")
XML_SUFFIXES = (".xml", ".xml.gz")
LAYOUTS = (LAYOUT, "aframe")
"""The HDF5 layouts ``write_injection_set`` writes: this project's, aframe's."""
UNRECORDED = "unrecorded"
"""The approximant read where a file does not record one (its ``f_lower_hz`` then NaN)."""


def file_format(path: Path) -> str:
    """``hdf5`` or ``xml`` by ``path``'s suffix; ConfigError naming the file otherwise."""
    name = Path(path).name.lower()
    if name.endswith(HDF5_SUFFIXES):
        return "hdf5"
    if name.endswith(XML_SUFFIXES):
        return "xml"
    raise ConfigError(
        f"{path}: an injection file must end in {', '.join(HDF5_SUFFIXES + XML_SUFFIXES)}"
    )


def write_injection_set(path: Path, injections: InjectionSet, layout: str = LAYOUT) -> None:
    """Write ``injections`` to ``path`` (format by suffix; an HDF5 file in ``layout``,
    ``"offline-iaas"`` or ``"aframe"``), through a temporary file."""
    path = Path(path)
    kind = file_format(path)
    if layout not in LAYOUTS:
        raise ConfigError(f"{path}: unknown injection file layout {layout!r} "
                          f"({', '.join(LAYOUTS)})")
    if kind == "xml" and layout != LAYOUT:
        raise ConfigError(f"{path}: layout {layout!r} is an HDF5 layout; a .xml file is "
                          "LIGO_LW sim_inspiral")
    with replaced_atomically(path) as tmp:
        if kind == "xml":
            write_ligolw(tmp, injections, gzip=path.name.lower().endswith(".gz"))
        elif layout == "aframe":
            write_aframe(tmp, injections, final_path=path)
        else:
            write_hdf5(tmp, injections)


def read_injection_set(
    path: Path, approximant: str | None = None, f_lower_hz: float | None = None,
    reference_frequency_hz: float | None = None,
) -> InjectionSet:
    """Read an injection set (format by suffix, HDF5 layout by content). ``approximant``,
    ``f_lower_hz`` and ``reference_frequency_hz`` stand in where the file does not say them.

    Raises
    ------
    ConfigError
        The file is missing or its suffix unknown.
    DataError
        The file is unreadable, its HDF5 masses' frame is ambiguous, or it lacks a column
        (named) or holds a non-finite value.
    """
    path = Path(path)
    kind = file_format(path)
    if (why := not_a_regular_file(path)) is not None:  # a FIFO: h5py's open would wait on it
        raise ConfigError(f"injection file {path} {why}")
    if kind == "xml":
        found = read_ligolw(path, approximant, f_lower_hz, reference_frequency_hz)
    else:
        layout, attrs, datasets = _open_hdf5(path)
        reader = read_aframe if layout == "aframe" else read_hdf5
        found = reader(path, attrs, datasets, approximant, f_lower_hz, reference_frequency_hz)
    return _described(path, found)


def _described(path: Path, injections: InjectionSet) -> InjectionSet:
    """``injections``, once its approximant is a name and the numbers of its population that
    VT is computed from are numbers (DataError naming the file and the attribute: a text was
    carried into the output, or a traceback at the merge)."""
    if not isinstance(injections.approximant, str) or not injections.approximant:
        raise DataError(f"{path}: attribute 'approximant' must be a waveform approximant's "
                        f"name, got {injections.approximant!r}")
    for name in ("time_volume_gpc3", "comoving_volume_gpc3", "redshift_max"):
        number_attribute(path, name, injections.attrs.get(name))
    for name in ("drawn", "injected"):
        number_attribute(path, name, injections.attrs.get(name), whole=True)
    return injections


def hdf5_layout(path: Path) -> str:
    """The layout of the HDF5 injection file ``path``: ``"offline-iaas"`` or ``"aframe"``
    (DataError when it is neither, naming the file)."""
    return _open_hdf5(Path(path))[0]


def _open_hdf5(path: Path) -> tuple[str, dict[str, Any], dict[str, np.ndarray]]:
    """The file's layout, root attributes and ``parameters`` datasets (numeric ones); the one
    place an injection set's HDF5 file is read, in the frame reader's process
    (``GwfReader.call``): a damaged one is a DataError naming it, even where it crashes or
    hangs the HDF5 library."""
    attrs, datasets, not_numbers = reader().call(_read_parameters, path)
    if any(name in datasets for name in MARKERS):
        _refuse_unusable(path, datasets, not_numbers, AFRAME_REQUIRED)
        return "aframe", attrs, datasets
    frame = attrs.get("mass_frame")
    if frame is None:
        raise DataError(
            f"{path}: the frame of 'parameters/mass_1' is ambiguous: the file has neither "
            "this project's root attribute mass_frame ('source' or 'detector') nor aframe's "
            "InjectionParameterSet fields (theta_jn, a_1, tilt_1, ...); set mass_frame on "
            "the file, or write it in aframe's layout")
    if frame not in MASS_FRAMES:
        raise DataError(f"{path}: root attribute mass_frame is {frame!r}, not one of "
                        f"{', '.join(MASS_FRAMES)}")
    _refuse_unusable(path, datasets, not_numbers, REQUIRED)
    one_d = {name: v.astype(np.float64) for name, v in datasets.items() if v.ndim == 1}
    return LAYOUT, attrs, one_d


def _read_parameters(path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray],
                                          dict[str, np.dtype]]:
    """The HDF5 file's root attributes, its ``parameters`` datasets of numbers, and the dtype
    of each other dataset there (in the frame reader's process, ``GwfReader.call``)."""
    import h5py

    with readable_hdf5(path), h5py.File(path, "r") as f:
        attrs = {k: attr_value(v) for k, v in f.attrs.items()}
        group = f.get("parameters")
        if not isinstance(group, h5py.Group):
            raise DataError(f"{path}: no group 'parameters' (one dataset per parameter)")
        datasets = {name: np.asarray(group[name][()]) for name in group
                    if isinstance(group[name], h5py.Dataset)
                    and group[name].dtype.kind in "fiu"}
        not_numbers = {name: group[name].dtype for name in group
                       if isinstance(group[name], h5py.Dataset) and name not in datasets}
    return attrs, datasets, not_numbers


def _refuse_unusable(path: Path, datasets: dict[str, np.ndarray],
                     not_numbers: dict[str, np.dtype], required: tuple[str, ...]) -> None:
    """DataError naming the first column the layout needs that holds no numbers (text, say:
    the readers skip such datasets, and would call it missing) or more than one value per
    injection."""
    for name in required:
        if name in not_numbers:
            dtype = not_numbers[name]
            held = "text" if dtype.kind in "SUO" else f"values of type {dtype}"
            raise DataError(f"{path}: column 'parameters/{name}' holds {held}, not numbers")
        if name in datasets and datasets[name].ndim != 1:
            raise DataError(f"{path}: column 'parameters/{name}' has shape "
                            f"{datasets[name].shape}, not one value per injection")


def read_injection_list(path: Path) -> tuple[list[Injection], float | None]:
    """What the merge counts of ``search.injections``: each injection (time, network SNR
    against the measured PSD, and when known chirp mass, distance and network SNR against
    the design PSD) and the population's
    volume ``time_volume_gpc3`` (None when the file does not say it: no VT then, found
    fractions only).

    ``path`` is ``synth.json`` (its ``injections`` and ``population``), a JSON list of
    ``{"gps_time": ..., "network_snr": ...}``, or an injection set (HDF5, LIGO_LW), whose
    per-detector SNRs make the network SNR.

    Raises
    ------
    ConfigError
        Naming ``search.injections`` and the file: missing, not JSON, not a list of injections
        (nor an object with one under ``injections``), an injection without a time or SNR or
        with a time that is not finite, an unknown suffix.
    DataError
        From ``read_injection_set``.
    """
    listing = read_injection_listing(path)
    return listing.injections, listing.volume


@dataclass(frozen=True)
class InjectionListing:
    """What ``read_injection_listing`` reads of one injection file."""

    injections: list[Injection]
    volume: float | None
    """The population's ``time_volume_gpc3``, None where the file does not say it."""
    attrs: dict[str, Any]
    """The population's description: an injection set's attributes, ``synth.json``'s
    ``population`` ({} where there is none)."""
    waveform: dict[str, Any]
    """The waveform's settings the file records (an injection set's approximant and
    ``f_lower_hz``, ``synth.json``'s ``injection_waveform``; {} where there are none)."""


def read_injection_listing(path: Path) -> InjectionListing:
    """``read_injection_list``'s injections and volume, and the file's description of the
    population and waveform, from one reading of ``path`` (raises as it)."""
    path = Path(path)
    if not path.name.lower().endswith(JSON_SUFFIXES):
        # the waveform's settings are not needed to count: stand-ins where not recorded
        injections = read_injection_set(path, approximant=UNRECORDED, f_lower_hz=math.nan)
        snr, design = injections.network_snr, injections.network_snr_design
        found = [Injection(b.gps_time, float(s), b.chirp_mass, b.luminosity_distance, float(d))
                 for b, s, d in zip(injections.binaries, snr, design, strict=True)]
        volume = injections.attrs.get("time_volume_gpc3")
        waveform = {"approximant": injections.approximant,
                    "f_lower_hz": injections.f_lower_hz}
        return InjectionListing(
            found, None if volume is None else float(volume), dict(injections.attrs),
            {k: v for k, v in waveform.items()
             if v != UNRECORDED and not (isinstance(v, float) and math.isnan(v))})
    if (why := not_a_regular_file(path)) is not None:  # a FIFO is not opened
        raise ConfigError(f"search.injections: injection file {path} {why}")
    try:
        data = json.loads(read_text(path))  # bounded; a FIFO put in its place is not waited on
    except (OSError, UnicodeDecodeError, NotRegularFile, TooLarge) as err:
        raise ConfigError(f"search.injections: {path}: cannot read: {err}") from None
    except json.JSONDecodeError as err:
        raise ConfigError(f"search.injections: {path}: not JSON: {err}") from None
    rows = data.get("injections") if isinstance(data, dict) else data
    if not isinstance(rows, list):
        what = json_kind(data)
        if isinstance(data, dict):
            what = (f"'injections' is {json_kind(rows)}" if "injections" in data
                    else "an object without 'injections'")
        raise ConfigError(
            f"search.injections: {path}: {what}, not a list of injections (synth.json, or a "
            'JSON list of {"gps_time": ..., "network_snr": ...})')
    found = [_json_injection(path, number, row) for number, row in enumerate(rows)]
    described = data if isinstance(data, dict) else {}
    population, waveform = described.get("population"), described.get("injection_waveform")
    population = population if isinstance(population, dict) else {}
    volume = population.get("time_volume_gpc3")
    if volume is not None and not finite_number(volume):
        raise ConfigError(f"search.injections: {path}: population.time_volume_gpc3 is "
                          f"{volume!r}, not a finite number")
    return InjectionListing(found, None if volume is None else float(volume), population,
                            waveform if isinstance(waveform, dict) else {})


def _json_injection(path: Path, number: int, row: Any) -> Injection:
    """Row ``number`` of a JSON injection list; ConfigError naming the file and the row when
    it lacks a time or SNR, or its time is not finite (as the HDF5 reader refuses one: NaN is
    no time outside the span). An SNR may be NaN: synth's where none was measured."""
    def number_of(key: str, value: object) -> float:
        try:
            return float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError, OverflowError):
            raise ConfigError(f"search.injections: {path}: injection {number} has {key} "
                              f"{value!r}, not a number") from None

    try:
        if "network_snr" in row:
            snr = number_of("network_snr", row["network_snr"])
        else:
            snr = float(np.sqrt(sum(v["snr"] ** 2 for v in row["ifos"].values())))
        parameters = row.get("parameters", {})
        design = row.get("network_snr_design")  # synth.json's
        injection = Injection(number_of("gps_time", row["gps_time"]), snr,
                              number_of("chirp_mass", parameters.get("chirp_mass", math.nan)),
                              number_of("luminosity_distance",
                                        parameters.get("luminosity_distance", math.nan)),
                              math.nan if design is None
                              else number_of("network_snr_design", design))
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError):
        raise ConfigError(
            f"search.injections: {path}: an injection without gps_time and network_snr "
            f"(or per-ifo snr): {row!r}"
        ) from None
    if not math.isfinite(injection.gps_time):
        raise ConfigError(f"search.injections: {path}: injection {number} has gps_time "
                          f"{injection.gps_time}, not a finite GPS time")
    return injection
