"""aframe's HDF5 layout of an injection set: the ``ledger`` package's ``InjectionParameterSet``.

Read from aframe's published source, github.com/ML4GW/aframe at commit
``6a45a6e9cef86c4542acb27e3e3b7db65051eb82`` (2026-05-09): ``libs/ledger/ledger/ledger.py``
(``Ledger.write``/``read``), ``libs/ledger/ledger/injections.py`` (the parameter sets),
``projects/data/data/waveforms/rejection.py`` and ``testing.py`` (what its data generation
writes), ``libs/utils/utils/cosmology.py`` (``DEFAULT_COSMOLOGY``) and
``aframe/pipelines/sandbox/configs/base.cfg`` (its reference frequency). What it writes:

Root attributes
    ``length`` (the number of rows) and ``ifos`` (detector prefixes, the column order of
    ``ifo_snrs``); a file of injected signals (``InterferometerResponseSet``,
    ``waveforms.hdf5``) also ``sample_rate``, ``duration``, ``right_pad``, ``num_injections``.
Group ``parameters``, one dataset per field, one row per injection
    ``mass_1``, ``mass_2`` (Msun, **detector frame**: aframe's ``mass_1_source`` is
    ``mass_1 / (1 + redshift)``), ``a_1``, ``a_2``, ``tilt_1``, ``tilt_2``, ``phi_12``,
    ``phi_jl`` (spin magnitudes and angles, bilby's convention), ``ra``, ``dec``, ``redshift``,
    ``psi``, ``theta_jn``, ``phase``, ``snr`` (network) and ``ifo_snrs`` (2-D: row, detector);
    the injected set adds ``injection_time`` (GPS; the waveform's coalescence at the
    geocentre) and ``shift`` (2-D: each detector's time shift) and a group ``waveforms`` (the
    projected strain per detector, ``h1``, ``l1``). There is no distance column: aframe takes
    the luminosity distance of ``redshift`` in astropy's ``Planck15``.

Reading (``read_aframe``): source-frame masses ``mass / (1 + redshift)`` (once), distance
from ``redshift`` in ``Planck15``, and lalsimulation's
``SimInspiralTransformPrecessingNewInitialConditions`` (what aframe's
``convert_to_lal_param_set`` calls) turns ``theta_jn``, the spin angles and
``phase`` into the inclination and Cartesian spins at the reference frequency: the file's
``reference_frequency_hz`` attribute (this project writes it), else the reader's stand-in,
else ``AFRAME_REFERENCE_FREQUENCY_HZ`` (aframe's configs). ``ifo_snrs`` becomes the SNR
against the measured PSD (aframe computes it against a PSD of background data). A file
without ``injection_time`` (an ``InjectionParameterSet`` alone, such as aframe's
``rejected-parameters.hdf5``) has no times to inject at and is refused as the set to inject.
The ``waveforms`` group is not read here: ``search/response_set.py`` reads it for injections
on the fly; converting, and the merge's counts, read the parameters.

What VT needs (``aframe_population``)
    ``shift``: a row whose shift is not zero was injected by aframe into time-shifted
    background; this project injects and counts at zero lag, so such a file is refused
    (``refuse_shifts``), never read as if unshifted. The draws: aframe's rejection sampling
    (``rejection.py``) writes the accepted rows and, beside them, the draws below its SNR cut
    as ``rejected-parameters.hdf5``; ``num_injections`` counts every draw it made (also the
    few past the last accepted one, which it neither kept nor rejected). So ``drawn`` =
    injected + rejected when the rejected file lies beside the set (refused when that exceeds
    ``num_injections`` or its ``ifos`` differ: another campaign's; or when it is no regular
    file, a FIFO or a directory: not opened), else ``num_injections``.
    The volume: aframe takes it from its source prior, which its files do not record; unless
    the file has ``time_volume_gpc3``, the population is aframe's ``UniformSourceFrame`` (p(z)
    ~ dVc/dz / (1 + z)) in ``Planck15`` to the root attribute ``redshift_max``, else to the
    largest drawn redshift (short of the prior's bound by about 1 / draws of the volume), and
    the population's description says which.
Reference frequency
    aframe reads ``reference_frequency`` from its pipeline's configuration (``[luigi_base]`` in
    ``aframe/pipelines/sandbox/configs/base.cfg``: 50 Hz) and passes it to
    ``convert_to_lal_param_set``; no ledger field holds it. A file aframe wrote is therefore
    read at ``AFRAME_REFERENCE_FREQUENCY_HZ`` (or the reader's stand-in, for a pipeline
    configured otherwise). ``write_aframe`` says in one line where aframe reads it and what to
    set there (``reference_frequency = X`` in its config's ``[luigi_base]``), a warning when
    precessing spins are defined at another frequency than aframe's 50 Hz default (aframe
    would read their angles at its own), and writes it as the attribute
    ``reference_frequency_hz`` that this project's reader reads. An
    ``InterferometerResponseSet``'s projected waveforms are injected as they are
    (``search/response_set.py``): no reference frequency is involved.

``add_responses`` makes such a file an ``InterferometerResponseSet`` (``waveforms`` and the
metadata ``sample_rate``, ``duration``, ``right_pad``; ``offline-iaas draw-injections
--layout aframe``); ``write_aframe`` writes ``num_injections`` = the set's ``drawn``.

Writing (``write_aframe``): every ``InjectionParameterSet`` field as aframe writes it (float64
datasets, ``length``, ``ifos``), with ``snr``/``ifo_snrs`` the SNR against the measured PSD,
``injection_time`` and a zero ``shift`` as in aframe's injected set, and ``redshift`` such that
``Planck15`` gives back the set's luminosity distance (so aframe generates the same signal;
its source-frame masses then follow ``Planck15``). Beside them, which aframe's reader ignores:
``ifo_snrs_design`` (against the design PSD) and attributes ``mass_frame = "detector"``,
``approximant``, ``f_lower_hz``, ``reference_frequency_hz``, ``ifo_snrs_psd``,
``ifo_snrs_design_psd`` and the population's description.

aframe's data generation projects with ``ra`` as the source's azimuth from the geocentre's
meridian (ml4gw's ``compute_observed_strain`` ``phi``), without the sidereal time; this
project reads ``ra`` as a right ascension, as the field's name says.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from offline_iaas.data.gwf_reader import reader
from offline_iaas.data.hdf5_probe import readable_hdf5
from offline_iaas.errors import DataError, not_a_regular_file
from offline_iaas.search import population
from offline_iaas.search.injection_set import (
    InjectionSet,
    attr_value,
    binaries_from_columns,
    detector_names,
    finite,
    number_attribute,
    refuse_rows,
    required,
    said_or,
)
from offline_iaas.search.waveforms import MSUN_SI

logger = logging.getLogger(__name__)

AFRAME_COMMIT = "6a45a6e9cef86c4542acb27e3e3b7db65051eb82"
"""The commit of github.com/ML4GW/aframe this layout was read from."""
AFRAME_COSMOLOGY = "Planck15"
"""aframe's ``DEFAULT_COSMOLOGY`` (astropy): the luminosity distance of ``redshift``."""
AFRAME_REFERENCE_FREQUENCY_HZ = 50.0
"""aframe's ``reference_frequency`` in its pipeline configs: where ``theta_jn``, the spin
angles and ``phase`` are defined when a file does not say."""
INTRINSIC = ("mass_1", "mass_2", "a_1", "a_2", "tilt_1", "tilt_2", "phi_12", "phi_jl")
EXTRINSIC = ("ra", "dec", "redshift", "psi", "theta_jn", "phase")
FIELDS = (*INTRINSIC, *EXTRINSIC, "snr", "ifo_snrs")
"""``InjectionParameterSet``'s parameter fields, in aframe's dataclass order."""
IN_PLANE = ("spin_1x", "spin_1y", "spin_2x", "spin_2y")
"""Cartesian spin components whose angles depend on the reference frequency (precession)."""
MARKERS = ("theta_jn", "a_1", "a_2", "tilt_1", "tilt_2", "phi_12", "phi_jl")
"""Fields only aframe's layout has: a file with any of them is read as aframe's."""
TIME = "injection_time"
REQUIRED = (*INTRINSIC, *EXTRINSIC, TIME)
"""The fields ``read_aframe`` needs in ``parameters``."""
REJECTED_FILE = "rejected-parameters.hdf5"
"""aframe's name for the draws its rejection sampling left out, an ``InjectionParameterSet``
written beside ``waveforms.hdf5`` (``projects/data/data/waveforms/testing.py``)."""
OWN_ATTRS = ("length", "ifos", "sample_rate", "duration", "right_pad", "num_injections",
             "mass_frame", "approximant", "f_lower_hz", "reference_frequency_hz",
             "ifo_snrs_psd", "ifo_snrs_design_psd")


def luminosity_distance_mpc(redshift: np.ndarray) -> np.ndarray:
    """aframe's luminosity distance (Mpc) of ``redshift``: ``Planck15``."""
    return population.luminosity_distance_mpc(redshift, AFRAME_COSMOLOGY)


def redshift_of_distance(distance_mpc: np.ndarray) -> np.ndarray:
    """The redshift whose ``Planck15`` luminosity distance is ``distance_mpc``."""
    return population.redshift_at_distance(distance_mpc, AFRAME_COSMOLOGY)


# ---- spins --------------------------------------------------------------------------------


def cartesian_spins(
    theta_jn: float, phi_jl: float, tilt_1: float, tilt_2: float, phi_12: float,
    a_1: float, a_2: float, mass_1_detector: float, mass_2_detector: float,
    reference_frequency_hz: float, phase: float,
) -> tuple[float, ...]:
    """``(inclination, spin_1x, spin_1y, spin_1z, spin_2x, spin_2y, spin_2z)`` of aframe's
    (bilby's) spin angles at ``reference_frequency_hz``
    (``SimInspiralTransformPrecessingNewInitialConditions``; masses in Msun)."""
    import lalsimulation as ls

    out = ls.SimInspiralTransformPrecessingNewInitialConditions(
        theta_jn, phi_jl, tilt_1, tilt_2, phi_12, a_1, a_2,
        mass_1_detector * MSUN_SI, mass_2_detector * MSUN_SI, reference_frequency_hz, phase)
    return tuple(float(v) for v in out)


def spin_angles(
    inclination: float, spins: tuple[float, ...], mass_1_detector: float,
    mass_2_detector: float, reference_frequency_hz: float, phase: float,
) -> dict[str, float]:
    """aframe's ``theta_jn``, ``phi_jl``, ``tilt_1``, ``tilt_2``, ``phi_12``, ``a_1``, ``a_2`` of
    an inclination and Cartesian ``spins`` (``SimInspiralTransformPrecessingWvf2PE``, the
    inverse of ``cartesian_spins``); a tilt is 0 where its spin is 0, as aframe writes it."""
    import lalsimulation as ls

    values = ls.SimInspiralTransformPrecessingWvf2PE(
        inclination, *spins, mass_1_detector, mass_2_detector, reference_frequency_hz, phase)
    names = ("theta_jn", "phi_jl", "tilt_1", "tilt_2", "phi_12", "a_1", "a_2")
    out = {name: float(v) for name, v in zip(names, values, strict=True)}
    for k in (1, 2):
        if out[f"a_{k}"] == 0.0:
            out[f"tilt_{k}"] = 0.0
    return out


# ---- files --------------------------------------------------------------------------------


def write_aframe(path: Path, injections: InjectionSet, final_path: Path | None = None) -> None:
    """Write ``injections`` to ``path`` in aframe's layout (module docstring). The message
    names ``final_path``, the file the user asked for, where ``path`` is its temporary file."""
    import h5py

    binaries = injections.binaries
    n, f_ref = len(binaries), injections.reference_hz
    precessing = sum(any(getattr(b, name) != 0.0 for name in IN_PLANE) for b in binaries)
    differs = precessing and f_ref != AFRAME_REFERENCE_FREQUENCY_HZ
    logger.log(
        logging.WARNING if differs else logging.INFO,
        f"{(final_path or path).name}: aframe reads the reference frequency from its config, "
        f"not from this file: set reference_frequency = {f_ref:g} in its [luigi_base] (the spins, "
        f"inclination and phase are defined at {f_ref:g} Hz, attribute reference_frequency_hz"
        + (f"; {precessing} precessing binaries differ at aframe's default "
           f"{AFRAME_REFERENCE_FREQUENCY_HZ:g} Hz)" if differs else ")"))
    distance = np.array([b.luminosity_distance for b in binaries], np.float64)
    columns: dict[str, np.ndarray] = {
        "mass_1": np.array([b.mass_1_detector for b in binaries], np.float64),
        "mass_2": np.array([b.mass_2_detector for b in binaries], np.float64),
        "ra": np.array([b.ra for b in binaries], np.float64),
        "dec": np.array([b.dec for b in binaries], np.float64),
        "redshift": redshift_of_distance(distance),
        "psi": np.array([b.polarization for b in binaries], np.float64),
        "phase": np.array([b.coalescence_phase for b in binaries], np.float64),
        TIME: np.array([b.gps_time for b in binaries], np.float64),
    }
    angles = [spin_angles(b.inclination, (b.spin_1x, b.spin_1y, b.spin_1z, b.spin_2x,
                                          b.spin_2y, b.spin_2z),
                          b.mass_1_detector, b.mass_2_detector, f_ref, b.coalescence_phase)
              for b in binaries]
    for name in ("a_1", "a_2", "tilt_1", "tilt_2", "phi_12", "phi_jl", "theta_jn"):
        columns[name] = np.array([a[name] for a in angles], np.float64)
    ifos = list(injections.snr)
    columns["ifo_snrs"] = _rows_by_ifo(injections.snr, ifos, n)
    columns["snr"] = (injections.network_snr if ifos else np.full(n, np.nan)).astype(np.float64)
    columns["shift"] = np.zeros((n, len(ifos)))
    if injections.snr_design:
        columns["ifo_snrs_design"] = _rows_by_ifo(injections.snr_design, ifos, n)
    with h5py.File(path, "w") as f:
        for key, value in injections.attrs.items():
            f.attrs[key] = value
        f.attrs["length"] = n
        if injections.attrs.get("drawn") is not None:  # aframe's drawn total
            f.attrs["num_injections"] = int(injections.attrs["drawn"])
        f.attrs["ifos"] = ifos
        f.attrs["mass_frame"] = "detector"
        f.attrs["approximant"] = injections.approximant
        f.attrs["f_lower_hz"] = injections.f_lower_hz
        f.attrs["reference_frequency_hz"] = f_ref
        for kind, name in (("snr", "ifo_snrs_psd"), ("snr_design", "ifo_snrs_design_psd")):
            if kind in injections.snr_psd:
                f.attrs[name] = injections.snr_psd[kind]
        group = f.create_group("parameters")
        for name in (*FIELDS, TIME, "shift", "ifo_snrs_design"):
            if name in columns:
                group.create_dataset(name, data=columns[name])


def add_responses(path: Path, responses: dict[str, np.ndarray], sample_rate: float,
                  duration: float, right_pad: float) -> None:
    """Make ``write_aframe``'s file at ``path`` an ``InterferometerResponseSet``: group
    ``waveforms`` with one float64 dataset per detector, named by its lower-case prefix, of
    ``rows x duration * sample_rate`` samples (each injection's projected strain, its
    coalescence at the geocentre ``duration - right_pad`` s from its first sample: aframe's
    ``inject`` puts sample ``k`` at ``injection_time - (duration - right_pad) + k /
    sample_rate``), and root attributes ``sample_rate``, ``duration``, ``right_pad``."""
    import h5py

    with h5py.File(path, "a") as f:
        group = f.create_group("waveforms")
        for ifo, values in responses.items():
            group.create_dataset(ifo.lower(), data=np.asarray(values, np.float64))
        f.attrs.update({"sample_rate": float(sample_rate), "duration": float(duration),
                        "right_pad": float(right_pad)})


def _rows_by_ifo(snr: Any, ifos: list[str], n: int) -> np.ndarray:
    """``[row, detector]`` of per-detector SNRs (NaN for a detector without them)."""
    out = np.full((n, len(ifos)), np.nan)
    for j, ifo in enumerate(ifos):
        if ifo in snr:
            out[:, j] = snr[ifo]
    return out


def read_aframe(
    path: Path, attrs: dict[str, Any], datasets: dict[str, np.ndarray],
    approximant: str | None, f_lower_hz: float | None, reference_frequency_hz: float | None,
) -> InjectionSet:
    """The set in an aframe file, from its root ``attrs`` and its ``parameters`` datasets
    (``injection_file`` opened it; module docstring). ``approximant``, ``f_lower_hz`` and
    ``reference_frequency_hz`` stand in where the file does not say them."""
    if attrs.get("mass_frame", "detector") != "detector":
        raise DataError(
            f"{path}: aframe's layout (parameters/theta_jn, ...) has detector-frame masses, "
            f"but the file's mass_frame attribute says {attrs['mass_frame']!r}")
    for name in (*INTRINSIC, *EXTRINSIC):
        if name not in datasets:
            raise DataError(f"{path}: aframe injection file has no field 'parameters/{name}'")
    if TIME not in datasets:
        raise DataError(
            f"{path}: aframe injection file has no 'parameters/{TIME}': an "
            "InjectionParameterSet alone (e.g. aframe's rejected-parameters.hdf5) has no times "
            "to inject at; give the injected set (aframe's waveforms.hdf5): the rejected "
            f"draws are read from {REJECTED_FILE} beside it")
    n = len(datasets[TIME])
    if number_attribute(path, "length", attrs.get("length"), whole=True) not in (None, n):
        raise DataError(f"{path}: attribute length = {attrs['length']} but "
                        f"'parameters/{TIME}' has {n} rows")
    refuse_shifts(path, datasets.get("shift"), n)
    col = {name: np.array(finite(path, name, datasets[name])) for name in
           (*INTRINSIC, *EXTRINSIC, TIME)}
    for name, values in col.items():
        if len(values) != n:
            raise DataError(f"{path}: field '{name}' has {len(values)} rows, '{TIME}' {n}")
    f_ref = float(said_or(path, "reference_frequency_hz", attrs.get("reference_frequency_hz"),
                          reference_frequency_hz or AFRAME_REFERENCE_FREQUENCY_HZ))
    for name in ("a_1", "a_2"):  # spin magnitudes, before lalsimulation refuses them
        refuse_rows(path, name, col[name], (col[name] < 0) | (col[name] > 1),
                    "(a spin's magnitude) must be in [0, 1]")
    # before the masses are divided by 1 + z
    refuse_rows(path, "redshift", col["redshift"], col["redshift"] < 0, "must not be negative")
    converted = np.array([
        cartesian_spins(col["theta_jn"][i], col["phi_jl"][i], col["tilt_1"][i],
                        col["tilt_2"][i], col["phi_12"][i], col["a_1"][i], col["a_2"][i],
                        col["mass_1"][i], col["mass_2"][i], f_ref, col["phase"][i])
        for i in range(n)]).reshape(n, 7)
    z = col["redshift"]
    values: dict[str, tuple[str, Any]] = {
        "mass_1": ("mass_1", col["mass_1"] / (1.0 + z)),
        "mass_2": ("mass_2", col["mass_2"] / (1.0 + z)),
        "redshift": ("redshift", z),
        "luminosity_distance": ("redshift", luminosity_distance_mpc(z)),
        "ra": ("ra", col["ra"]), "dec": ("dec", col["dec"]),
        "polarization": ("psi", col["psi"]), "coalescence_phase": ("phase", col["phase"]),
        "gps_time": (TIME, col[TIME]),
        "inclination": ("theta_jn", converted[:, 0]),
        **{f"spin_{k}{a}": (f"a_{k}", converted[:, 1 + 3 * (k - 1) + j])
           for k in (1, 2) for j, a in enumerate("xyz")},
    }
    ifos = detector_names(path, attrs.get("ifos"))
    own = {k: v for k, v in attrs.items() if k not in OWN_ATTRS}
    own.update(aframe_population(path, attrs, z, ifos))
    return InjectionSet(
        binaries=binaries_from_columns(path, values, n),
        approximant=required(path, "approximant", attrs.get("approximant", approximant)),
        f_lower_hz=float(required(path, "f_lower_hz", said_or(
            path, "f_lower_hz", attrs.get("f_lower_hz"), f_lower_hz))),
        snr=_per_ifo(path, "ifo_snrs", datasets.get("ifo_snrs"), ifos, n),
        snr_design=_per_ifo(path, "ifo_snrs_design", datasets.get("ifo_snrs_design"), ifos, n),
        attrs=own,
        reference_frequency_hz=f_ref,
        snr_psd={kind: str(attrs[name]) for kind, name in
                 (("snr", "ifo_snrs_psd"), ("snr_design", "ifo_snrs_design_psd"))
                 if name in attrs}
        or ({"snr": "aframe's ifo_snrs (its PSD of background data)"}
            if "ifo_snrs" in datasets and ifos else {}),
    )


def _per_ifo(path: Path, name: str, values: np.ndarray | None, ifos: list[str], n: int
             ) -> dict[str, tuple[float, ...]]:
    """A 2-D ``(row, detector)`` SNR field per detector of ``ifos``; {} when absent or all NaN
    (not computed)."""
    if values is None or not ifos:
        return {}
    values = np.asarray(values, np.float64)
    if values.shape != (n, len(ifos)):
        raise DataError(f"{path}: field '{name}' has shape {values.shape}, expected "
                        f"({n}, {len(ifos)}) for ifos {ifos}")
    if np.all(np.isnan(values)):
        return {}
    return {ifo: finite(path, f"{name}[:, {i}]", values[:, i]) for i, ifo in enumerate(ifos)}


# ---- what VT needs: zero lag, the draws, the volume ----------------------------------------


def refuse_shifts(path: Path, shift: np.ndarray | None, n: int) -> None:
    """DataError when any row's ``shift`` is not zero: aframe injected it into background
    whose detectors were shifted against each other, and this project injects and counts at
    zero lag only (applying the shift would put each detector's signal at another time)."""
    if shift is None:
        return
    values = np.asarray(shift, np.float64)
    if values.ndim != 2:  # aframe's one shift per detector; 1-D: one per row
        values = values.reshape(values.size, 1)
    if len(values) != n:
        raise DataError(f"{path}: field 'shift' has {len(values)} rows, '{TIME}' {n}")
    moved = np.flatnonzero(np.any(values != 0, axis=1))
    if len(moved):
        first = moved[0]
        raise DataError(
            f"{path}: {len(moved)} of {n} injections have a non-zero 'parameters/shift' (row "
            f"{first}: {values[first].tolist()} s): aframe injected them into time-shifted "
            "background, and this project injects and counts at zero lag only; give the rows "
            "of shift 0 with the draws behind them")


def aframe_population(path: Path, attrs: dict[str, Any], redshift: np.ndarray,
                      ifos: list[str]) -> dict[str, Any]:
    """What VT needs of an aframe set that this project's population attributes do not give
    (module docstring): ``injected`` (the rows) and ``drawn`` (the rows plus those of
    ``REJECTED_FILE`` beside it, else ``num_injections``) and, without ``time_volume_gpc3``,
    the volume of aframe's population: uniform in comoving volume and source-frame time (its
    ``UniformSourceFrame``) in ``Planck15`` to ``redshift_max`` (the attribute, else the
    largest redshift drawn). {} when neither the draws nor the volume are known."""
    injected = len(redshift)
    found: dict[str, Any] = {}
    rejected_z = _rejected_redshifts(path, ifos)
    num = attrs.get("num_injections")
    num = None if num in (None, 0) else number_attribute(path, "num_injections", num,
                                                          whole=True)
    if num is not None and num < injected:
        raise DataError(f"{path}: attribute num_injections = {num} is fewer than its "
                        f"{injected} injections")
    if rejected_z is not None:
        drawn = injected + len(rejected_z)
        if num is not None and drawn > num:
            raise DataError(
                f"{path}: {injected} injections and {len(rejected_z)} rejected draws in "
                f"{path.with_name(REJECTED_FILE).name} make {drawn} draws, more than its "
                f"num_injections = {num}: not one campaign's files")
        found = {"drawn": drawn, "injected": injected,
                 "rejected_source": str(path.with_name(REJECTED_FILE))}
    elif num is not None:
        found = {"drawn": num, "injected": injected}
    if not found or attrs.get("time_volume_gpc3") is not None:
        return found
    draws = np.concatenate([redshift, rejected_z if rejected_z is not None else []])
    if attrs.get("redshift_max") is not None:
        z_max = number_attribute(path, "redshift_max", attrs["redshift_max"])
        where = "the file's redshift_max"
    else:
        z_max = float(draws.max(initial=0.0))
        where = (f"the largest of the {len(draws)} drawn redshifts (aframe's files do not "
                 "record its prior's bound; set root attribute redshift_max to give it)")
    if not z_max > 0:
        return found
    return {**found, "redshift_max": z_max, "cosmology": AFRAME_COSMOLOGY,
            "redshift_distribution": f"assumed p(z) ~ dVc/dz / (1 + z) on [0, z_max] "
                                     f"(aframe's UniformSourceFrame), z_max {where}",
            "luminosity_distance_max_mpc": float(luminosity_distance_mpc(np.array(z_max))),
            "comoving_volume_gpc3": population.comoving_volume_gpc3(z_max, AFRAME_COSMOLOGY),
            "time_volume_gpc3": population.time_volume_gpc3(z_max, AFRAME_COSMOLOGY)}


def _rejected_redshifts(path: Path, ifos: list[str]) -> np.ndarray | None:
    """The redshifts of the draws in ``REJECTED_FILE`` beside ``path`` (aframe's
    ``InjectionParameterSet`` of the draws below its SNR cut), or None with nothing of that
    name there. Something there that is no regular file (a FIFO, a device, a directory, a
    link that leads nowhere) is refused as an unreadable one is, by ``stat`` alone: skipped,
    it made the count of draws another's without a word (``num_injections``)."""
    rejected = path.with_name(REJECTED_FILE)
    if rejected == path or not (rejected.exists() or rejected.is_symlink()):
        return None
    if (why := not_a_regular_file(rejected)) is not None:  # a FIFO: never opened
        raise DataError(f"{rejected} {why}: aframe's rejected draws beside {path.name} count "
                        "its draws; give the file aframe wrote, or none")
    ifos_attr, length, z = reader().call(_read_rejected, rejected)
    theirs = detector_names(rejected, ifos_attr)
    rows = number_attribute(rejected, "length", length, whole=True)
    if z is None or rows is None or len(z) != rows:
        raise DataError(f"{rejected}: aframe's rejected draws need attribute length and "
                        "'parameters/redshift' of that many rows")
    if ifos and theirs and theirs != ifos:
        raise DataError(f"{rejected}: ifos {theirs}, but {path.name} has {ifos}: not one "
                        "campaign's files")
    return np.array(finite(rejected, "redshift", z))


def _read_rejected(rejected: Path) -> tuple[Any, Any, np.ndarray | None]:
    """The rejected draws' ``ifos`` and ``length`` attributes as they are and
    ``parameters/redshift`` (None where absent; in the frame reader's process,
    ``GwfReader.call``: the caller checks them)."""
    import h5py

    with readable_hdf5(rejected), h5py.File(rejected, "r") as f:
        ifos = attr_value(f.attrs["ifos"]) if "ifos" in f.attrs else None
        length = attr_value(f.attrs["length"]) if "length" in f.attrs else None
        z = f["parameters/redshift"][()] if "parameters/redshift" in f else None
    return ifos, length, z
