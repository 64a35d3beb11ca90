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


def binaries_from_columns(path: Path, values: Mapping[str, tuple[str, Any]], n: int
                          ) -> tuple[BinaryParameters, ...]:
    """``n`` binaries from ``{BinaryParameters field: (column name, values)}``; DataError
    naming the column of a non-finite value."""
    checked = {name: finite(path, column, v) for name, (column, v) in values.items()}
    for name, column in checked.items():
        if len(column) != n:
            raise DataError(f"{path}: column '{values[name][0]}' has {len(column)} rows, "
                            f"the set {n}")
    return tuple(
        BinaryParameters(**{name: column[i] for name, column in checked.items()})
        for i in range(n)
    )
