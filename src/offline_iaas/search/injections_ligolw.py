"""LIGO_LW ``sim_inspiral`` injection sets, as LAL's C reader and igwn-ligolw read them.

Writing (``write_ligolw``)
    A ``process`` table with one row (program ``offline-iaas``, the package version, ``ifos``
    the injected detectors), a ``process_params`` table under it, and a ``sim_inspiral`` table
    with every column LAL's ``lalmetaio.SimInspiralTableFromLIGOLw`` requires (``LAL_COLUMNS``)
    and one row per injection, ``process:process_id`` the process row's. Per row:
    ``geocent_end_time``/``_ns`` (the geocentre coalescence time, to the ns of the float64
    GPS time), ``end_time_gmst`` (rad), ``mass1``, ``mass2``, ``mchirp`` (detector frame, LIGO_LW's
    convention), ``eta``, ``distance`` (Mpc), ``longitude`` (ra), ``latitude`` (dec),
    ``inclination``, ``polarization``, ``coa_phase``, ``spin1x`` ... ``spin2z`` (at the reference
    frequency), ``waveform`` (the approximant), ``f_lower``; for each of the table's sites H1,
    L1, G1, T1 (TAMA) and V1 the arrival time (``h_end_time``/``_ns``, ...) and effective
    distance (``eff_dist_h``, ...) from the geometry; the optimal SNRs against the measured
    PSD in ``alpha1``/``alpha2``/``alpha3`` (H1/L1/V1, as ``pycbc_optimal_snr`` fills them) and
    against the design PSD in ``alpha4``/``alpha5``/``alpha6``; ``taper`` ``TAPER_NONE``,
    ``amp_order`` -1, and the rest 0 or empty. ``process_params`` records the population's
    description (``PopulationSpec.attrs``, one ``--key`` per attribute, underscores as
    dashes), ``--approximant``, ``--f-lower-hz``, ``--reference-frequency-hz``,
    ``--mass-frame detector``, ``--snr-columns`` and
    ``--snr-design-columns`` (``H1:alpha1,L1:alpha2``) and what each SNR's PSD was
    (``--snr-measured-psd``, ``--snr-design-psd``).
Reading (``read_ligolw``)
    Any ``sim_inspiral`` table with ``REQUIRED`` (igwn-ligolw parses it). The table has no
    redshift: it is recomputed from ``distance`` (``population.COSMOLOGY``) and the
    source-frame masses are ``mass / (1 + z)``. When the file has this project's process
    (program ``offline-iaas``), its parameters give back the population, the reference
    frequency and the SNR columns, and its ``ifos`` the detectors whose arrival times are kept;
    otherwise the reference frequency is ``f_lower`` (lalsimulation's default), the arrival
    times are those of the sites with a time in every row, and ``alpha1``-``alpha3`` are read
    as H1/L1/V1 SNRs when positive in every row (a table filled by ``pycbc_optimal_snr``).
    The columns are single precision (``real_4``): a round trip keeps ~7 significant digits;
    times keep their nanoseconds.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from offline_iaas import __version__
from offline_iaas.errors import DataError
from offline_iaas.search.injection_set import (
    SNR_KINDS,
    InjectionSet,
    binaries_from_columns,
    finite,
    positive,
    refuse_rows,
    said_or,
)
from offline_iaas.search.population import redshift_at_distance
from offline_iaas.search.waveforms import arrival_time, effective_distance

PROGRAM = "offline-iaas"
"""The ``process`` table's ``program`` of the files this project writes."""
LAL_COLUMNS: tuple[str, ...] = (
    "process:process_id", "simulation_id", "waveform", "source", "geocent_end_time",
    "geocent_end_time_ns", *(f"{s}_end_time{ns}" for s in "hlgtv" for ns in ("", "_ns")),
    "end_time_gmst", "mass1", "mass2", "mchirp", "eta", "distance", "longitude", "latitude",
    "inclination", "coa_phase", "polarization", "psi0", "psi3", "alpha",
    *(f"alpha{i}" for i in range(1, 7)), "beta",
    *(f"spin{i}{a}" for i in (1, 2) for a in "xyz"), "theta0", "phi0", "f_lower", "f_final",
    *(f"eff_dist_{s}" for s in "hlgtv"), "numrel_mode_min", "numrel_mode_max", "numrel_data",
    "amp_order", "taper", "bandpass",
)
"""Every column ``lalmetaio.SimInspiralTableFromLIGOLw`` requires (LAL's ``sim_inspiral.c``)."""
REQUIRED: tuple[str, ...] = (
    "geocent_end_time", "geocent_end_time_ns", "mass1", "mass2", "distance", "longitude",
    "latitude", "inclination", "polarization", "coa_phase",
)
"""What this project needs of a ``sim_inspiral`` table to read it."""
SITE = {"H1": "h", "L1": "l", "G1": "g", "T1": "t", "V1": "v"}
"""Detector → the prefix of its ``_end_time`` and ``eff_dist_`` columns."""
SNR_COLUMNS = {
    "snr": {"H1": "alpha1", "L1": "alpha2", "V1": "alpha3"},
    "snr_design": {"H1": "alpha4", "L1": "alpha5", "V1": "alpha6"},
}
"""``InjectionSet`` SNR field → detector → the column this project writes it in."""
PSD_PARAM = {"snr": "snr_measured_psd", "snr_design": "snr_design_psd"}
COLUMNS_PARAM = {"snr": "snr_columns", "snr_design": "snr_design_columns"}
LAYOUT_PARAMS = ("approximant", "f_lower_hz", "reference_frequency_hz", "mass_frame",
                 *PSD_PARAM.values(), *COLUMNS_PARAM.values())
"""``process_params`` that describe the set and the file, not the population (the
approximant and ``f_lower`` also for a table without rows)."""


def split_gps(seconds: float) -> tuple[int, int]:
    """``(seconds, nanoseconds)`` of a GPS time, the nanoseconds rounded."""
    whole = math.floor(seconds)
    ns = int(round((seconds - whole) * 1e9))
    return (whole + 1, 0) if ns >= 1_000_000_000 else (whole, ns)


def _param_value(value: Any) -> Any:
    """A ``process_params`` value: str, int or float (numpy scalars as Python's)."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_param_value(v) for v in value]
    return value if isinstance(value, (str, int, float)) else str(value)


def write_ligolw(path: Path, injections: InjectionSet, gzip: bool) -> None:
    """Write ``injections`` to ``path`` as LIGO_LW (module docstring)."""
    import lal
    from igwn_ligolw import ligolw, lsctables
    from igwn_ligolw import utils as ligolw_utils

    columns = {kind: {ifo: column for ifo, column in SNR_COLUMNS[kind].items()
                      if ifo in getattr(injections, kind)} for kind in SNR_KINDS}
    params: dict[str, Any] = {
        key: _param_value(value) for key, value in injections.attrs.items()
        if key not in LAYOUT_PARAMS}
    params["approximant"] = injections.approximant
    params["f_lower_hz"] = float(injections.f_lower_hz)
    params["reference_frequency_hz"] = injections.reference_hz
    params["mass_frame"] = "detector"
    for kind in SNR_KINDS:
        if columns[kind]:
            params[COLUMNS_PARAM[kind]] = ",".join(f"{i}:{c}" for i, c in columns[kind].items())
        if kind in injections.snr_psd:
            params[PSD_PARAM[kind]] = injections.snr_psd[kind]
    xmldoc = ligolw.Document()
    xmldoc.appendChild(ligolw.LIGO_LW())
    process = xmldoc.register_process(
        PROGRAM, params, version=__version__, instruments=injections.ifos or None,
        comment="injection set")
    table = xmldoc.childNodes[0].appendChild(lsctables.SimInspiralTable.new(
        columns=list(LAL_COLUMNS)))
    for i, b in enumerate(injections.binaries):
        row = table.RowType()
        for name in LAL_COLUMNS:
            name = name.split(":")[-1]
            kind = lsctables.SimInspiralTable.validcolumns.get(name, "int_8s")
            setattr(row, name, "" if kind == "lstring" else 0)
        row.process_id, row.simulation_id = process.process_id, i
        row.waveform, row.taper, row.amp_order = injections.approximant, "TAPER_NONE", -1
        row.f_lower = injections.f_lower_hz
        row.geocent_end_time, row.geocent_end_time_ns = split_gps(b.gps_time)
        row.end_time_gmst = math.fmod(lal.GreenwichMeanSiderealTime(
            lal.LIGOTimeGPS(row.geocent_end_time, row.geocent_end_time_ns)), 2 * math.pi)
        m1, m2 = b.mass_1_detector, b.mass_2_detector
        row.mass1, row.mass2, row.mchirp = m1, m2, b.chirp_mass_detector
        row.eta = m1 * m2 / (m1 + m2) ** 2
        row.distance, row.longitude, row.latitude = b.luminosity_distance, b.ra, b.dec
        row.inclination, row.polarization, row.coa_phase = (
            b.inclination, b.polarization, b.coalescence_phase)
        for name in (f"spin_{k}{a}" for k in (1, 2) for a in "xyz"):
            setattr(row, name.replace("_", ""), getattr(b, name))
        for ifo, site in SITE.items():
            times = injections.arrival_time.get(ifo)
            seconds = times[i] if times is not None else arrival_time(b, ifo)
            setattr(row, f"{site}_end_time", split_gps(seconds)[0])
            setattr(row, f"{site}_end_time_ns", split_gps(seconds)[1])
            setattr(row, f"eff_dist_{site}", effective_distance(b, ifo))
        for kind in SNR_KINDS:
            for ifo, column in columns[kind].items():
                setattr(row, column, getattr(injections, kind)[ifo][i])
        table.append(row)
    ligolw_utils.write_filename(xmldoc, str(path), compress="gz" if gzip else False,
                                with_mv=False)


def read_ligolw(
    path: Path, approximant: str | None, f_lower_hz: float | None,
    reference_frequency_hz: float | None,
) -> InjectionSet:
    """The set in a LIGO_LW file (module docstring); ``approximant``, ``f_lower_hz`` and
    ``reference_frequency_hz`` stand in where the file does not say them."""
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
    for name in REQUIRED:
        if name not in names:
            raise DataError(f"{path}: sim_inspiral table has no column '{name}'")
    rows = list(table)
    ours, ifos, params = _our_process(xmldoc)

    def column(name: str, default: float | None = None) -> np.ndarray:
        """The column as floats: ``default`` where it is absent or a row leaves it empty
        (NULL); NaN there without a default, and a NaN written in the file stays NaN (the
        readers refuse it: a NaN spin was read as 0)."""
        fill = np.nan if default is None else default
        if name not in names:
            return np.full(len(rows), fill)
        return np.array([fill if getattr(r, name) is None else float(getattr(r, name))
                         for r in rows])

    for name in sorted(n for n in names if n.endswith("_end_time_ns")):
        nanoseconds = column(name, 0.0)
        refuse_rows(path, name, nanoseconds, (nanoseconds < 0) | (nanoseconds >= 1e9),
                    "must be in [0, 10**9) ns")
    distance = positive(path, "distance", column("distance"))
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
    binaries = binaries_from_columns(path, values, len(rows))
    arrival = {}
    for ifo, site in SITE.items():
        seconds = column(f"{site}_end_time", 0.0)
        keep = ifo in ifos if ours else bool(rows) and bool(np.all(seconds > 0))
        if keep:
            arrival[ifo] = finite(path, f"{site}_end_time",
                                  seconds + 1e-9 * column(f"{site}_end_time_ns", 0.0))
    snrs: dict[str, dict[str, tuple[float, ...]]] = {kind: {} for kind in SNR_KINDS}
    for kind in SNR_KINDS:
        if ours:
            mapping = _snr_columns(path, COLUMNS_PARAM[kind],
                                   str(params.get(COLUMNS_PARAM[kind], "")))
        else:
            mapping = SNR_COLUMNS[kind] if kind == "snr" else {}
        for ifo, name in mapping.items():
            values_of = column(name)
            if ours or (bool(rows) and bool(np.all(values_of > 0))):
                snrs[kind][ifo] = finite(path, name, values_of)
    reference = said_or(path, "reference_frequency_hz", params.get("reference_frequency_hz"),
                        reference_frequency_hz)
    return InjectionSet(
        binaries=binaries,
        approximant=_one_value(path, "waveform", rows, names,
                               params.get("approximant", approximant)),
        f_lower_hz=float(_one_value(path, "f_lower", rows, names, said_or(
            path, "f_lower_hz", params.get("f_lower_hz"), f_lower_hz))),
        snr=snrs["snr"], arrival_time=arrival, snr_design=snrs["snr_design"],
        attrs={k: v for k, v in params.items() if k not in LAYOUT_PARAMS},
        reference_frequency_hz=None if reference is None else float(reference),
        snr_psd={kind: str(params[name]) for kind, name in PSD_PARAM.items() if name in params},
    )


def _snr_columns(path: Path, param: str, text: str) -> dict[str, str]:
    """Our process parameter ``param``, ``IFO:column,...``, as a mapping; DataError naming it
    for an item that is not one ``IFO:column`` pair."""
    pairs = [item.split(":") for item in text.split(",") if item]
    if any(len(pair) != 2 or not all(pair) for pair in pairs):
        raise DataError(f"{path}: process parameter '{param}' must be IFO:column pairs "
                        f"separated by commas, got {text!r}")
    return dict(pairs)


def _our_process(xmldoc: Any) -> tuple[bool, list[str], dict[str, Any]]:
    """Whether the document has this project's process row, its ``ifos`` and its
    parameters (``--key`` as ``key``; a repeated one as a list)."""
    from igwn_ligolw import lsctables

    try:
        processes = [p for p in lsctables.ProcessTable.get_table(xmldoc)
                     if p.program == PROGRAM]
    except ValueError:
        return False, [], {}
    if not processes:
        return False, [], {}
    process = processes[-1]
    params: dict[str, Any] = {}
    try:
        rows = lsctables.ProcessParamsTable.get_table(xmldoc)
    except ValueError:
        rows = []
    for row in rows:
        if row.process_id != process.process_id:
            continue
        key = row.param.removeprefix("--").replace("-", "_")
        value = row.pyvalue
        if key in params:
            previous = params[key]
            params[key] = [*(previous if isinstance(previous, list) else [previous]), value]
        else:
            params[key] = value
    return True, sorted(process.instruments or []), params


def _one_value(path: Path, name: str, rows: list, names: set[str], default: Any) -> Any:
    """The one value of column ``name`` in every row (``default`` where absent, empty or 0:
    tables that do not set ``f_lower`` leave it 0)."""
    found = {getattr(r, name) for r in rows} - {None, "", 0} if name in names else set()
    bad = [v for v in found if isinstance(v, (int, float)) and not (math.isfinite(v) and v > 0)]
    if bad:  # before the rows are compared: NaNs would "differ"
        raise DataError(f"{path}: sim_inspiral column '{name}' must be a positive number, got "
                        f"{bad[0]!r}")
    if len(found) > 1:
        raise DataError(f"{path}: sim_inspiral rows differ in '{name}' ({sorted(found)}); "
                        "an injection set has one")
    value = found.pop() if found else default
    if value is None:
        raise DataError(f"{path}: sim_inspiral table has no column '{name}'")
    return value
