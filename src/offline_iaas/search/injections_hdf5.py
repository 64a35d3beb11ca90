"""This project's own HDF5 layout of an injection set (``layout = "offline-iaas"``).

Root attributes
    ``layout`` = ``"offline-iaas"``, ``mass_frame`` = ``"source"`` (the frame of
    ``mass_1``/``mass_2``/``chirp_mass``; a file made by hand may say ``"detector"``),
    ``length`` (rows), ``approximant``, ``f_lower_hz``, ``reference_frequency_hz``, ``ifos``,
    ``snr_measured_psd`` and ``snr_design_psd`` (what each SNR was computed against, when
    known), and the population's description (``PopulationSpec.attrs``: ``redshift_max``,
    ``cosmology``, ``comoving_volume_gpc3``, ``time_volume_gpc3``, mass and spin ranges, ...).
Group ``parameters``, one 1-D float64 dataset per column, one row per injection
    ``mass_1``, ``mass_2``, ``chirp_mass`` (Msun, in ``mass_frame``), ``mass_1_detector``,
    ``mass_2_detector`` (Msun, detector frame: ``mass (1 + z)``; checked against the others
    when read), ``redshift``, ``luminosity_distance`` (Mpc), ``ra``, ``dec``, ``psi``,
    ``inclination``, ``phase`` (at the reference frequency), ``spin_1x`` ... ``spin_2z``
    (Cartesian, at the reference frequency), ``injection_time`` (GPS coalescence time at the
    geocentre), and when known per detector ``<ifo>_time`` (GPS arrival time),
    ``<ifo>_snr_measured`` and ``<ifo>_snr_design`` (``h1_snr_measured``, ...; the two SNRs of
    ``search/injection_set.py``) and the network SNRs ``snr_measured``, ``snr_design``.

Reading needs ``REQUIRED``; spins default to 0 and ``redshift``, when absent, is recomputed
from ``luminosity_distance`` (``population.COSMOLOGY``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from offline_iaas.errors import DataError
from offline_iaas.search.injection_set import (
    InjectionSet,
    binaries_from_columns,
    detector_names,
    finite,
    positive,
    required,
    said_or,
)
from offline_iaas.search.population import redshift_at_distance
from offline_iaas.search.waveforms import chirp_mass

LAYOUT = "offline-iaas"
"""The ``layout`` attribute of this project's files."""
MASS_FRAMES = ("source", "detector")
FIELD_OF_COLUMN: dict[str, str] = {
    "mass_1": "mass_1", "mass_2": "mass_2", "redshift": "redshift",
    "luminosity_distance": "luminosity_distance", "ra": "ra", "dec": "dec",
    "psi": "polarization", "inclination": "inclination", "phase": "coalescence_phase",
    "injection_time": "gps_time",
    **{f"spin_{i}{a}": f"spin_{i}{a}" for i in (1, 2) for a in "xyz"},
}
"""Column → ``BinaryParameters`` field."""
REQUIRED: tuple[str, ...] = (
    "mass_1", "mass_2", "luminosity_distance", "ra", "dec", "psi", "inclination", "phase",
    "injection_time",
)
SNR_COLUMN_SUFFIX = {"snr": "snr_measured", "snr_design": "snr_design"}
"""``InjectionSet`` SNR field → the suffix of its columns (``h1_snr_measured``)."""
PSD_ATTR = {"snr": "snr_measured_psd", "snr_design": "snr_design_psd"}
"""``InjectionSet`` SNR field → the root attribute that says what its PSD was."""
OWN_ATTRS = ("layout", "mass_frame", "length", "approximant", "f_lower_hz",
             "reference_frequency_hz", "ifos", *PSD_ATTR.values())


def write_hdf5(path: Path, injections: InjectionSet) -> None:
    """Write ``injections`` to ``path`` in this project's layout (module docstring)."""
    import h5py

    binaries = injections.binaries
    columns = {column: np.array([getattr(b, name) for b in binaries], np.float64)
               for column, name in FIELD_OF_COLUMN.items()}
    columns["chirp_mass"] = chirp_mass(columns["mass_1"], columns["mass_2"])
    columns["mass_1_detector"] = np.array([b.mass_1_detector for b in binaries], np.float64)
    columns["mass_2_detector"] = np.array([b.mass_2_detector for b in binaries], np.float64)
    for kind, suffix in SNR_COLUMN_SUFFIX.items():
        snr = getattr(injections, kind)
        for ifo, values in snr.items():
            columns[f"{ifo.lower()}_{suffix}"] = np.asarray(values, np.float64)
        if snr:
            columns[suffix] = (injections.network_snr if kind == "snr"
                               else injections.network_snr_design)
    for ifo, values in injections.arrival_time.items():
        columns[f"{ifo.lower()}_time"] = np.asarray(values, np.float64)
    with h5py.File(path, "w") as f:
        for key, value in injections.attrs.items():
            f.attrs[key] = value
        f.attrs["layout"] = LAYOUT
        f.attrs["mass_frame"] = "source"
        f.attrs["length"] = len(injections)
        f.attrs["approximant"] = injections.approximant
        f.attrs["f_lower_hz"] = injections.f_lower_hz
        f.attrs["reference_frequency_hz"] = injections.reference_hz
        f.attrs["ifos"] = injections.ifos
        for kind, name in PSD_ATTR.items():
            if kind in injections.snr_psd:
                f.attrs[name] = injections.snr_psd[kind]
        group = f.create_group("parameters")
        for name, values in columns.items():
            group.create_dataset(name, data=values)


def read_hdf5(
    path: Path, attrs: dict[str, Any], columns: dict[str, np.ndarray],
    approximant: str | None, f_lower_hz: float | None,
    reference_frequency_hz: float | None,
) -> InjectionSet:
    """The set in a file of this layout, from its root ``attrs`` and 1-D ``columns``
    (``injection_file`` opened it). ``approximant``, ``f_lower_hz`` and
    ``reference_frequency_hz`` stand in where the file does not say them."""
    mass_frame = attrs["mass_frame"]
    for name in REQUIRED:
        if name not in columns:
            raise DataError(f"{path}: injection file has no column 'parameters/{name}'")
    n = len(columns["injection_time"])
    if "redshift" not in columns:
        columns["redshift"] = redshift_at_distance(
            positive(path, "luminosity_distance", columns["luminosity_distance"]))
    if mass_frame == "detector":
        for name in ("mass_1", "mass_2"):
            columns[name] = columns[name] / (1.0 + columns["redshift"])
    binaries = binaries_from_columns(
        path, {FIELD_OF_COLUMN[c]: (c, v) for c, v in columns.items() if c in FIELD_OF_COLUMN},
        n)
    for name in ("mass_1", "mass_2"):
        if f"{name}_detector" in columns:
            detector = np.array([getattr(b, f"{name}_detector") for b in binaries])
            if not np.allclose(columns[f"{name}_detector"], detector, rtol=1e-9, atol=0):
                raise DataError(
                    f"{path}: column 'parameters/{name}_detector' is not {name} (1 + redshift) "
                    f"with the file's mass_frame = {mass_frame!r}")
    ifos = detector_names(path, attrs.get("ifos"))
    snrs = {
        kind: {ifo: finite(path, f"{ifo.lower()}_{suffix}", columns[f"{ifo.lower()}_{suffix}"])
               for ifo in ifos if f"{ifo.lower()}_{suffix}" in columns}
        for kind, suffix in SNR_COLUMN_SUFFIX.items()
    }
    arrival = {ifo: finite(path, f"{ifo.lower()}_time", columns[f"{ifo.lower()}_time"])
               for ifo in ifos if f"{ifo.lower()}_time" in columns}
    reference = said_or(path, "reference_frequency_hz", attrs.get("reference_frequency_hz"),
                        reference_frequency_hz)
    return InjectionSet(
        binaries=binaries,
        approximant=required(path, "approximant", attrs.get("approximant", approximant)),
        f_lower_hz=float(required(path, "f_lower_hz", said_or(
            path, "f_lower_hz", attrs.get("f_lower_hz"), f_lower_hz))),
        snr=snrs["snr"], arrival_time=arrival, snr_design=snrs["snr_design"],
        attrs={k: v for k, v in attrs.items() if k not in OWN_ATTRS},
        reference_frequency_hz=None if reference is None else float(reference),
        snr_psd={kind: str(attrs[name]) for kind, name in PSD_ATTR.items() if name in attrs},
    )
