"""Injection sets on disk: HDF5 (aframe/ml4gw ``ledger`` layout) and LIGO_LW ``sim_inspiral``.

The format follows the file's suffix: ``.h5``/``.hdf5`` or ``.xml``/``.xml.gz``;
``read_injection_list`` (what the merge counts) also takes ``synth.json`` or a JSON list.

HDF5
    One 1-D dataset per parameter in the group ``parameters``, one row per injection, as
    aframe's ``ledger`` writes an ``InjectionParameterSet``; the set's description in the
    root's attributes (``length``, ``approximant``, ``f_lower_hz``, ``ifos`` and the
    population's: ``redshift_max``, ``cosmology``, ``comoving_volume_gpc3``,
    ``time_volume_gpc3``, mass and spin ranges). Parameters (``HDF5_COLUMNS``):
    ``mass_1``, ``mass_2``, ``chirp_mass`` (source frame, Msun), ``redshift``,
    ``luminosity_distance`` (Mpc), ``ra``, ``dec``, ``psi``, ``inclination``, ``phase``
    (coalescence phase), ``spin_1x`` ... ``spin_2z``, ``injection_time`` (GPS coalescence
    time at the geocentre), and when known ``snr`` (network optimal SNR), ``<ifo>_snr`` and
    ``<ifo>_time`` (optimal SNR and GPS arrival time per detector, ``h1_snr``, ``l1_time``).
    Reading needs ``REQUIRED_HDF5``; spins default to 0, and ``redshift`` (when absent) is
    recomputed from ``luminosity_distance``.
LIGO_LW
    One ``sim_inspiral`` row per injection: ``geocent_end_time``/``_ns``, ``mass1``,
    ``mass2`` and ``mchirp`` in the detector frame (LIGO_LW's convention), ``distance``
    (Mpc), ``longitude`` (ra), ``latitude`` (dec), ``inclination``, ``polarization``,
    ``coa_phase``, ``spin1x`` ... ``spin2z``, ``waveform``, ``f_lower``, and per detector the
    arrival time (``h_end_time``/``_ns``, ``l_...``, ``v_...``, ``g_...``) and optimal SNR in
    ``alpha1``/``alpha2``/``alpha3`` for H1/L1/V1 (as ``pycbc_optimal_snr`` fills them by
    default). The table has no redshift: it is recomputed from ``distance`` with the
    population's cosmology (``population.COSMOLOGY``) and the source-frame masses are
    ``mass / (1 + z)``. The population's volumes are not carried. The table's columns are
    single precision (``real_4``): a round trip keeps ~7 significant digits (times keep
    their nanoseconds).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from offline_iaas.data.population import redshift_at_distance
from offline_iaas.data.waveforms import BinaryParameters, chirp_mass
from offline_iaas.errors import ConfigError, DataError
from offline_iaas.physics import Injection

JSON_SUFFIXES = (".json",)
HDF5_SUFFIXES = (".h5", ".hdf5")
XML_SUFFIXES = (".xml", ".xml.gz")
FIELD_OF_COLUMN: dict[str, str] = {
    "mass_1": "mass_1", "mass_2": "mass_2", "redshift": "redshift",
    "luminosity_distance": "luminosity_distance", "ra": "ra", "dec": "dec",
    "psi": "polarization", "inclination": "inclination", "phase": "coalescence_phase",
    "injection_time": "gps_time",
    **{f"spin_{i}{a}": f"spin_{i}{a}" for i in (1, 2) for a in "xyz"},
}
"""HDF5 column → ``BinaryParameters`` field."""
HDF5_COLUMNS: tuple[str, ...] = (*FIELD_OF_COLUMN, "chirp_mass")
REQUIRED_HDF5: tuple[str, ...] = (
    "mass_1", "mass_2", "luminosity_distance", "ra", "dec", "psi", "inclination", "phase",
    "injection_time",
)
REQUIRED_XML: tuple[str, ...] = (
    "geocent_end_time", "geocent_end_time_ns", "mass1", "mass2", "distance", "longitude",
    "latitude", "inclination", "polarization", "coa_phase",
)
XML_SITE = {"H1": "h", "L1": "l", "V1": "v", "G1": "g"}
"""Detector → the prefix of its arrival-time columns in ``sim_inspiral``."""
XML_SNR_COLUMN = {"H1": "alpha1", "L1": "alpha2", "V1": "alpha3"}


@dataclass(frozen=True)
class InjectionSet:
    """Injections of one approximant: parameters, and when known per-detector SNRs and
    arrival times (GPS) keyed by detector prefix, and the population's description
    (``PopulationSpec.attrs``)."""

    binaries: tuple[BinaryParameters, ...]
    approximant: str
    f_lower_hz: float
    snr: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    arrival_time: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    attrs: Mapping[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.binaries)

    @property
    def network_snr(self) -> np.ndarray:
        """``sqrt(sum over detectors of snr^2)`` per injection (NaN without SNRs)."""
        if not self.snr:
            return np.full(len(self), np.nan)
        return np.sqrt(sum(np.asarray(v, np.float64) ** 2 for v in self.snr.values()))


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


def write_injection_set(path: Path, injections: InjectionSet) -> None:
    """Write ``injections`` to ``path`` (format by suffix), through a temporary file."""
    path = Path(path)
    kind = file_format(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        if kind == "hdf5":
            _write_hdf5(tmp, injections)
        else:
            _write_xml(tmp, injections, gzip=path.name.lower().endswith(".gz"))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def read_injection_set(
    path: Path, approximant: str | None = None, f_lower_hz: float | None = None
) -> InjectionSet:
    """Read an injection set (format by suffix). ``approximant`` and ``f_lower_hz`` stand in
    where the file does not say them.

    Raises
    ------
    ConfigError
        The file is missing or its suffix unknown.
    DataError
        The file is unreadable, or lacks a column (named) or holds a non-finite value.
    """
    path = Path(path)
    kind = file_format(path)
    if not path.is_file():
        raise ConfigError(f"{path}: injection file not found")
    reader = _read_hdf5 if kind == "hdf5" else _read_xml
    return reader(path, approximant, f_lower_hz)


# ---- HDF5 ------------------------------------------------------------------------------------


def _write_hdf5(path: Path, injections: InjectionSet) -> None:
    import h5py

    columns = {column: np.array([getattr(b, name) for b in injections.binaries], np.float64)
               for column, name in FIELD_OF_COLUMN.items()}
    columns["chirp_mass"] = chirp_mass(columns["mass_1"], columns["mass_2"])
    if injections.snr:
        columns["snr"] = injections.network_snr
    for ifo, values in injections.snr.items():
        columns[f"{ifo.lower()}_snr"] = np.asarray(values, np.float64)
    for ifo, values in injections.arrival_time.items():
        columns[f"{ifo.lower()}_time"] = np.asarray(values, np.float64)
    with h5py.File(path, "w") as f:
        f.attrs["length"] = len(injections)
        f.attrs["approximant"] = injections.approximant
        f.attrs["f_lower_hz"] = injections.f_lower_hz
        f.attrs["ifos"] = list(injections.snr or injections.arrival_time)
        for key, value in injections.attrs.items():
            if key not in ("approximant", "f_lower_hz"):
                f.attrs[key] = value
        group = f.create_group("parameters")
        for name, values in columns.items():
            group.create_dataset(name, data=values)


def _attr(value: Any) -> Any:
    """An HDF5 attribute as plain Python (str, float, int or list)."""
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.ndarray):
        return [_attr(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _read_hdf5(path: Path, approximant: str | None, f_lower_hz: float | None) -> InjectionSet:
    import h5py

    try:
        with h5py.File(path, "r") as f:
            attrs = {k: _attr(v) for k, v in f.attrs.items()}
            group = f.get("parameters")
            if not isinstance(group, h5py.Group):
                raise DataError(f"{path}: no group 'parameters' (one dataset per parameter)")
            # one row per injection: 1-D numeric datasets (others, e.g. aframe's 2-D
            # ``shift``, are not ours to read)
            columns = {name: np.asarray(group[name][()], np.float64) for name in group
                       if isinstance(group[name], h5py.Dataset) and group[name].ndim == 1
                       and group[name].dtype.kind in "fiu"}
    except OSError as err:
        raise DataError(f"{path}: not a readable HDF5 file: {err}") from None
    for name in REQUIRED_HDF5:
        if name not in columns:
            raise DataError(f"{path}: injection file has no column 'parameters/{name}'")
    n = len(columns["injection_time"])
    for name, values in columns.items():
        if len(values) != n:
            raise DataError(f"{path}: column '{name}' has {len(values)} rows, "
                            f"'injection_time' {n}")
    if "redshift" not in columns:
        columns["redshift"] = redshift_at_distance(columns["luminosity_distance"])
    binaries = _binaries(path, {FIELD_OF_COLUMN[c]: (c, v) for c, v in columns.items()
                                if c in FIELD_OF_COLUMN}, n)
    ifos = [str(i) for i in attrs.get("ifos", [])]
    snr = {ifo: _finite(path, f"{ifo.lower()}_snr", columns[f"{ifo.lower()}_snr"])
           for ifo in ifos if f"{ifo.lower()}_snr" in columns}
    arrival = {ifo: _finite(path, f"{ifo.lower()}_time", columns[f"{ifo.lower()}_time"])
               for ifo in ifos if f"{ifo.lower()}_time" in columns}
    return InjectionSet(
        binaries=binaries,
        approximant=_required(path, "approximant", attrs.get("approximant", approximant)),
        f_lower_hz=float(_required(path, "f_lower_hz", attrs.get("f_lower_hz", f_lower_hz))),
        snr=snr, arrival_time=arrival,
        attrs={k: v for k, v in attrs.items()
               if k not in ("length", "approximant", "f_lower_hz", "ifos")},
    )


def _required(path: Path, name: str, value: Any) -> Any:
    if value is None:
        raise DataError(f"{path}: injection file does not say its '{name}'")
    return value


def _finite(path: Path, name: str, values: np.ndarray) -> tuple[float, ...]:
    values = np.asarray(values, np.float64)
    if not np.all(np.isfinite(values)):
        row = int(np.flatnonzero(~np.isfinite(values))[0])
        raise DataError(f"{path}: column '{name}' is not finite in row {row}")
    return tuple(float(v) for v in values)


def _binaries(path: Path, values: dict[str, tuple[str, np.ndarray]], n: int
              ) -> tuple[BinaryParameters, ...]:
    """``n`` binaries from ``{field: (column name, values)}``; DataError naming the column
    of a non-finite value."""
    checked = {name: _finite(path, column, v) for name, (column, v) in values.items()}
    return tuple(
        BinaryParameters(**{name: column[i] for name, column in checked.items()})
        for i in range(n)
    )


# ---- LIGO_LW ---------------------------------------------------------------------------------


def _split_gps(seconds: float) -> tuple[int, int]:
    whole = math.floor(seconds)
    ns = int(round((seconds - whole) * 1e9))
    return (whole + 1, 0) if ns >= 1_000_000_000 else (whole, ns)


def _write_xml(path: Path, injections: InjectionSet, gzip: bool) -> None:
    from igwn_ligolw import ligolw, lsctables
    from igwn_ligolw import utils as ligolw_utils

    ifos = [ifo for ifo in injections.arrival_time if ifo in XML_SITE]
    snr_ifos = [ifo for ifo in injections.snr if ifo in XML_SNR_COLUMN]
    columns = [
        "process:process_id", "simulation_id", "waveform", "f_lower", "geocent_end_time",
        "geocent_end_time_ns", "mass1", "mass2", "mchirp", "eta", "distance", "longitude",
        "latitude", "inclination", "polarization", "coa_phase",
        *(f"spin{i}{a}" for i in (1, 2) for a in "xyz"),
        *(f"{XML_SITE[ifo]}_end_time{ns}" for ifo in ifos for ns in ("", "_ns")),
        *(XML_SNR_COLUMN[ifo] for ifo in snr_ifos),
    ]
    xmldoc = ligolw.Document()
    root = xmldoc.appendChild(ligolw.LIGO_LW())
    table = root.appendChild(lsctables.SimInspiralTable.new(columns=columns))
    for i, b in enumerate(injections.binaries):
        row = table.RowType()
        row.process_id = 0
        row.simulation_id = i
        row.waveform = injections.approximant
        row.f_lower = injections.f_lower_hz
        row.geocent_end_time, row.geocent_end_time_ns = _split_gps(b.gps_time)
        m1, m2 = b.mass_1_detector, b.mass_2_detector
        row.mass1, row.mass2 = m1, m2
        row.mchirp = b.chirp_mass_detector
        row.eta = m1 * m2 / (m1 + m2) ** 2
        row.distance = b.luminosity_distance
        row.longitude, row.latitude = b.ra, b.dec
        row.inclination, row.polarization, row.coa_phase = (
            b.inclination, b.polarization, b.coalescence_phase)
        for name in (f"spin_{k}{a}" for k in (1, 2) for a in "xyz"):
            setattr(row, name.replace("_", ""), getattr(b, name))
        for ifo in ifos:
            site = XML_SITE[ifo]
            seconds, ns = _split_gps(injections.arrival_time[ifo][i])
            setattr(row, f"{site}_end_time", seconds)
            setattr(row, f"{site}_end_time_ns", ns)
        for ifo in snr_ifos:
            setattr(row, XML_SNR_COLUMN[ifo], injections.snr[ifo][i])
        table.append(row)
    ligolw_utils.write_filename(xmldoc, str(path), compress="gz" if gzip else False,
                                with_mv=False)


def _read_xml(path: Path, approximant: str | None, f_lower_hz: float | None) -> InjectionSet:
    from igwn_ligolw import lsctables
    from igwn_ligolw import utils as ligolw_utils

    try:
        xmldoc = ligolw_utils.load_filename(str(path))
        table = lsctables.SimInspiralTable.get_table(xmldoc)
    except ValueError as err:
        raise DataError(f"{path}: no sim_inspiral table: {err}") from None
    except Exception as err:  # the SAX parser's and gzip's errors have no common base
        raise DataError(f"{path}: not a readable LIGO_LW file: {err}") from None
    names = set(table.columnnames)
    for name in REQUIRED_XML:
        if name not in names:
            raise DataError(f"{path}: sim_inspiral table has no column '{name}'")
    rows = list(table)

    def column(name: str, default: float | None = None) -> np.ndarray:
        if name not in names and default is not None:
            return np.full(len(rows), default)
        out = np.array([np.nan if getattr(r, name) is None else float(getattr(r, name))
                        for r in rows])
        if default is not None:
            out[np.isnan(out)] = default
        return out

    distance = np.array(_finite(path, "distance", column("distance")))
    redshift = redshift_at_distance(distance)
    values = {
        "gps_time": ("geocent_end_time",
                     column("geocent_end_time") + 1e-9 * column("geocent_end_time_ns")),
        "mass_1": ("mass1", column("mass1") / (1 + redshift)),
        "mass_2": ("mass2", column("mass2") / (1 + redshift)),
        "redshift": ("distance", redshift), "luminosity_distance": ("distance", distance),
        "ra": ("longitude", column("longitude")), "dec": ("latitude", column("latitude")),
        "inclination": ("inclination", column("inclination")),
        "polarization": ("polarization", column("polarization")),
        "coalescence_phase": ("coa_phase", column("coa_phase")),
        **{f"spin_{k}{a}": (f"spin{k}{a}", column(f"spin{k}{a}", 0.0))
           for k in (1, 2) for a in "xyz"},
    }
    binaries = _binaries(path, values, len(rows))
    arrival = {
        ifo: _finite(path, f"{site}_end_time",
                     column(f"{site}_end_time") + 1e-9 * column(f"{site}_end_time_ns", 0.0))
        for ifo, site in XML_SITE.items()
        if f"{site}_end_time" in names and all(getattr(r, f"{site}_end_time") for r in rows)
    }
    snr = {ifo: _finite(path, name, column(name)) for ifo, name in XML_SNR_COLUMN.items()
           if name in names and all(getattr(r, name) is not None for r in rows)}
    return InjectionSet(
        binaries=binaries,
        approximant=_one_value(path, "waveform", rows, names, approximant),
        f_lower_hz=float(_one_value(path, "f_lower", rows, names, f_lower_hz)),
        snr=snr, arrival_time=arrival,
    )


def _one_value(path: Path, name: str, rows: list, names: set[str], default: Any) -> Any:
    """The one value of column ``name`` in every row (``default`` where absent)."""
    found = {getattr(r, name) for r in rows} - {None, ""} if name in names else set()
    if len(found) > 1:
        raise DataError(f"{path}: sim_inspiral rows differ in '{name}' ({sorted(found)}); "
                        "an injection set has one")
    value = found.pop() if found else default
    if value is None:
        raise DataError(f"{path}: sim_inspiral table has no column '{name}'")
    return value


def read_injection_list(path: Path) -> tuple[list[Injection], float | None]:
    """What the merge counts of ``bbhnet.injections``: each injection (time, network SNR, and
    when known chirp mass and distance) and the population's volume ``time_volume_gpc3``
    (None when the file does not say it: no VT then, found fractions only).

    ``path`` is ``synth.json`` (its ``injections`` and ``population``), a JSON list of
    ``{"gps_time": ..., "network_snr": ...}``, or an injection set (HDF5, LIGO_LW), whose
    per-detector SNRs make the network SNR.

    Raises
    ------
    ConfigError
        Naming ``bbhnet.injections`` and the file: missing, not JSON, an injection without a
        time or SNR, an unknown suffix.
    DataError
        From ``read_injection_set``.
    """
    path = Path(path)
    if not path.name.lower().endswith(JSON_SUFFIXES):
        injections = read_injection_set(path)
        snr = injections.network_snr
        found = [Injection(b.gps_time, float(s), b.chirp_mass, b.luminosity_distance)
                 for b, s in zip(injections.binaries, snr, strict=True)]
        volume = injections.attrs.get("time_volume_gpc3")
        return found, None if volume is None else float(volume)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"bbhnet.injections: {path}: file not found") from None
    except json.JSONDecodeError as err:
        raise ConfigError(f"bbhnet.injections: {path}: not JSON: {err}") from None
    rows = data.get("injections", []) if isinstance(data, dict) else data
    found = []
    for row in rows:
        try:
            if "network_snr" in row:
                snr = float(row["network_snr"])
            else:
                snr = float(np.sqrt(sum(v["snr"] ** 2 for v in row["ifos"].values())))
            parameters = row.get("parameters", {})
            found.append(Injection(float(row["gps_time"]), snr,
                                   float(parameters.get("chirp_mass", math.nan)),
                                   float(parameters.get("luminosity_distance", math.nan))))
        except (KeyError, TypeError, ValueError, AttributeError):
            raise ConfigError(
                f"bbhnet.injections: {path}: an injection without gps_time and network_snr "
                f"(or per-ifo snr): {row!r}"
            ) from None
    population = data.get("population", {}) if isinstance(data, dict) else {}
    volume = population.get("time_volume_gpc3")
    return found, None if volume is None else float(volume)
