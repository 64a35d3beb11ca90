"""An injection set in memory (``InjectionSet``) and the checks its file readers share.

What the files on disk look like is in ``search/injection_file.py`` (which layout a file is)
and one module per layout: ``injections_hdf5.py`` (this project's), ``injections_aframe.py``
(aframe's ``InjectionParameterSet``), ``injections_ligolw.py`` (LIGO_LW ``sim_inspiral``).

Two optimal SNRs per injection and detector (``waveforms.optimal_snr``), each named for the
PSD it is computed against:

``snr``
    against a PSD measured from the frames the injection was added to (``synth``: median
    Welch around the injection, ``search/synth_injections.py``); what the network SNR of the
    merge's found/missed tables is made of (``network_snr``). aframe's ``ifo_snrs`` is this one
    (aframe measures its PSD from background data).
``snr_design``
    against the aLIGO design PSD the synthetic noise is coloured with.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from offline_iaas.errors import DataError
from offline_iaas.search.waveforms import BinaryParameters

SNR_KINDS = ("snr", "snr_design")
"""The names of the two SNRs (module docstring), as ``InjectionSet`` fields."""


@dataclass(frozen=True)
class InjectionSet:
    """Injections of one approximant: the binaries, per-detector SNRs and arrival times (GPS)
    keyed by detector prefix where known, and the population's description
    (``PopulationSpec.attrs``: what the sensitive volume is computed from)."""

    binaries: tuple[BinaryParameters, ...]
    approximant: str
    f_lower_hz: float
    snr: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    """Optimal SNR against the PSD measured from the data (module docstring)."""
    arrival_time: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    attrs: Mapping[str, Any] = field(default_factory=dict)
    snr_design: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    """Optimal SNR against the design PSD."""
    reference_frequency_hz: float | None = None
    """Where the spins, inclination and phase are defined; None: ``f_lower_hz``."""
    snr_psd: Mapping[str, str] = field(default_factory=dict)
    """What each SNR was computed against, keyed ``snr`` / ``snr_design`` (one line each)."""

    def __len__(self) -> int:
        return len(self.binaries)

    @property
    def reference_hz(self) -> float:
        """The reference frequency (Hz): ``reference_frequency_hz`` or ``f_lower_hz``."""
        if self.reference_frequency_hz is None:
            return float(self.f_lower_hz)
        return float(self.reference_frequency_hz)

    @property
    def ifos(self) -> list[str]:
        """The detectors with SNRs or arrival times, in their first-seen order."""
        out: list[str] = []
        for mapping in (self.snr, self.snr_design, self.arrival_time):
            out += [ifo for ifo in mapping if ifo not in out]
        return out

    @property
    def network_snr(self) -> np.ndarray:
        """``sqrt(sum over detectors of snr^2)`` per injection (NaN without SNRs)."""
        return _network(self.snr, len(self))

    @property
    def network_snr_design(self) -> np.ndarray:
        """The network SNR against the design PSD (NaN without it)."""
        return _network(self.snr_design, len(self))


def _network(snr: Mapping[str, tuple[float, ...]], n: int) -> np.ndarray:
    if not snr:
        return np.full(n, np.nan)
    return np.sqrt(sum(np.asarray(v, np.float64) ** 2 for v in snr.values()))


# ---- what every reader checks -----------------------------------------------------------------

def attr_value(value: Any) -> Any:
    """An HDF5 attribute as plain Python (str, float, int or list)."""
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.ndarray):
        return [attr_value(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    return value


def required(path: Path, name: str, value: Any) -> Any:
    """``value``, or DataError naming ``path`` and ``name`` when it is None."""
    if value is None:
        raise DataError(f"{path}: injection file does not say its '{name}'")
    return value


def finite(path: Path, name: str, values: Any) -> tuple[float, ...]:
    """``values`` as floats; DataError naming the column and the first non-finite row."""
    values = np.asarray(values, np.float64)
    if not np.all(np.isfinite(values)):
        row = int(np.flatnonzero(~np.isfinite(values))[0])
        raise DataError(f"{path}: column '{name}' is not finite in row {row}")
    return tuple(float(v) for v in values)


def refuse_rows(path: Path, name: str, values: np.ndarray, bad: np.ndarray, rule: str) -> None:
    """DataError naming column ``name``, its ``rule`` and its first row where ``bad``."""
    if np.any(bad):
        row = int(np.flatnonzero(bad)[0])
        raise DataError(f"{path}: column '{name}' {rule}, got {values[row]:g} in row {row}")


def positive(path: Path, name: str, values: Any) -> np.ndarray:
    """``values`` as floats; DataError naming the column and the first row that is not a
    finite positive number (a mass, a distance: a negative one made complex numbers)."""
    column = np.array(finite(path, name, values))
    refuse_rows(path, name, column, column <= 0, "must be positive")
    return column


def is_number(value: Any, whole: bool = False) -> bool:
    """Whether ``value`` is a finite positive number (``whole``: a count, 0 too): what an
    injection file's numeric attribute, and the option standing in for it, must be."""
    return (not isinstance(value, bool) and isinstance(value, (int, float, np.number))
            and math.isfinite(value)
            and (float(value).is_integer() and value >= 0 if whole else value > 0))


def number_attribute(path: Path, name: str, value: Any, whole: bool = False
                     ) -> float | int | None:
    """The file's attribute (or parameter) ``name`` as a finite positive number (``whole``: a
    count, 0 too), None where it is absent; DataError naming the file and the attribute."""
    if value is None:
        return None
    if not is_number(value, whole):
        raise DataError(f"{path}: attribute '{name}' must be a "
                        f"{'whole number' if whole else 'positive number'}, got {value!r}")
    return int(value) if whole else float(value)


def said_or(path: Path, name: str, said: Any, stand_in: Any) -> Any:
    """The file's number ``name`` (``said``, checked by ``number_attribute``), else the
    caller's ``stand_in`` (an option's value, or NaN where it does not matter)."""
    value = number_attribute(path, name, said)
    return stand_in if value is None else value


def detector_names(path: Path, value: Any) -> list[str]:
    """The file's ``ifos`` attribute: a list of detector names (none where absent); DataError
    for anything else (a plain string was read letter by letter)."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) and v for v in value):
        return list(value)
    raise DataError(f"{path}: attribute 'ifos' must be a list of detector names (H1, L1 ...), "
                    f"got {value!r}")


SPIN_ROUNDING = 1e-6
"""How far above 1 a spin's magnitude may come back from rounding (float32 columns: ~1e-7)."""


def _refuse_unphysical(path: Path, values: Mapping[str, tuple[str, Any]],
                       checked: Mapping[str, tuple[float, ...]]) -> None:
    """DataError naming the column of the first mass or distance that is not positive, a
    negative redshift, or a spin of magnitude above 1 (what the waveform models refuse)."""
    for name in ("mass_1", "mass_2", "luminosity_distance"):
        if name in checked:
            positive(path, values[name][0], checked[name])
    if "redshift" in checked:
        redshift = np.asarray(checked["redshift"])
        refuse_rows(path, values["redshift"][0], redshift, redshift < 0, "must not be negative")
    for body in (1, 2):
        parts = [np.asarray(checked.get(f"spin_{body}{a}", ()), np.float64) for a in "xyz"]
        parts = [part for part in parts if len(part)]
        magnitude = np.sqrt(sum(part ** 2 for part in parts)) if parts else np.zeros(0)
        # 1 passes: a maximal spin comes back 1 + 4e-16 from aframe's angles, and float32
        # columns round it too
        if np.any(magnitude > 1 + SPIN_ROUNDING):
            row = int(np.flatnonzero(magnitude > 1 + SPIN_ROUNDING)[0])
            columns = sorted({values[f"spin_{body}{a}"][0] for a in "xyz"
                              if f"spin_{body}{a}" in values})
            raise DataError(f"{path}: the spin of body {body} ({', '.join(columns)}) has "
                            f"magnitude {magnitude[row]:.9g} in row {row}, above 1")


def binaries_from_columns(path: Path, values: Mapping[str, tuple[str, Any]], n: int
                          ) -> tuple[BinaryParameters, ...]:
    """``n`` binaries from ``{BinaryParameters field: (column name, values)}``; DataError
    naming the column of a non-finite value, or of an unphysical one
    (``_refuse_unphysical``)."""
    checked = {name: finite(path, column, v) for name, (column, v) in values.items()}
    for name, column in checked.items():
        if len(column) != n:
            raise DataError(f"{path}: column '{values[name][0]}' has {len(column)} rows, "
                            f"the set {n}")
    _refuse_unphysical(path, values, checked)
    return tuple(
        BinaryParameters(**{name: column[i] for name, column in checked.items()})
        for i in range(n)
    )
