"""Injections on the fly (``search.inject``): the set's signals added to the strain as it is read.

Each binary of ``search.injections`` (an injection set file: ``injections.h5``, aframe's or
LIGO_LW) is projected onto each detector exactly as ``synth`` bakes it into its frames
(``search/synth_injections.py``): ``waveforms.polarizations`` at the frame's own sample rate, then
``waveforms.detector_strain`` (antenna pattern and light-travel delay at the injection's own
time) on the frame grid ``data.start + k / rate``. The samples are added to the strain channel's
frame-rate samples after they are read and before they are resampled to the model rate
(``data/frames.py``), so the model sees what it sees in frames with the set baked in; the
frames are never written to. Waveforms are made lazily, once per binary and rate (its
detectors projected together), and dropped once a read has passed them.

Where the projected samples come from is the ``source``: lalsimulation from the set's
parameters (``LalsimulationSource``), or, when ``search.injections`` is an aframe
``InterferometerResponseSet`` (a ``waveforms`` group), the file's projected waveforms read as
they are and placed as aframe's ``inject`` places them (``search/response_set.py``; its
parameters are still read, for the times, the shift's refusal and the merge's counts).
Adding them to the strain is ``OnTheFly.add``, for either.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

from offline_iaas.config_sections import ifo_of
from offline_iaas.search.injection_file import UNRECORDED, read_injection_set
from offline_iaas.search.injection_set import InjectionSet
from offline_iaas.search.response_set import check_detectors, read_response_set
from offline_iaas.search.waveforms import detector_strain, polarizations


class ProjectedSource(Protocol):
    """Where the projected signals come from: per injection, the GPS extent its samples can
    touch, and its samples in a detector on a frame grid."""

    def extent(self, index: int, shift_seconds: float = 0.0) -> tuple[float, float]: ...

    def projected(self, index: int, ifo: str, rate: float, grid_gps_start: float,
                  shift_seconds: float = 0.0) -> tuple[int, np.ndarray]: ...


@dataclass(frozen=True)
class LalsimulationSource:
    """The set's binaries made with lalsimulation and projected as ``synth`` bakes them in."""

    injections: InjectionSet
    _last: dict[tuple[int, float, float], object] = field(default_factory=dict, compare=False)
    """The last binary's polarizations (its detectors are projected one after the other)."""

    def extent(self, index: int, shift_seconds: float = 0.0) -> tuple[float, float]:
        """A generous GPS extent, to skip the waveform of a binary a read cannot touch."""
        b = self.injections.binaries[index]
        t = b.gps_time + shift_seconds
        return (t - 64.0 - _chirp_seconds(b.mass_1_detector, b.mass_2_detector,
                                          self.injections.f_lower_hz), t + 8.0)

    def projected(self, index: int, ifo: str, rate: float, grid_gps_start: float,
                  shift_seconds: float = 0.0) -> tuple[int, np.ndarray]:
        s = self.injections
        binary = s.binaries[index]
        if shift_seconds:
            binary = replace(binary, gps_time=binary.gps_time + shift_seconds)
        key = (index, rate, shift_seconds)
        if key not in self._last:
            self._last.clear()
            self._last[key] = polarizations(binary, s.approximant, rate, s.f_lower_hz,
                                            s.reference_frequency_hz)
        return detector_strain(binary, self._last[key], ifo, grid_gps_start)


@dataclass
class OnTheFly:
    """Adds an injection set's projected signals to strain channels read from frames."""

    injections: InjectionSet
    strain_channels: tuple[str, ...]
    grid_gps_start: float
    """Frame sample ``k`` is at ``grid_gps_start + k / rate`` (``data.start``, as synth's)."""
    shift_seconds: float = 0.0
    """Added to every injection's time (0; tests move the set to fail on purpose)."""
    source: ProjectedSource | None = None
    """The projected samples (module docstring); None: ``LalsimulationSource(injections)``."""
    _strain: dict[tuple[int, str, float], tuple[int, np.ndarray]] = field(default_factory=dict)
    _extent: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))

    def __post_init__(self) -> None:
        if self.source is None:
            self.source = LalsimulationSource(self.injections)
        # a generous GPS extent per binary, to skip the waveform of one a read cannot touch
        # (an array: a read of a month's set looks at every binary's)
        self._extent = np.array([self.source.extent(i, self.shift_seconds)
                                 for i in range(len(self.injections))]).reshape(-1, 2)

    def add(self, channel: str, gps_first: float, rate: float, values: np.ndarray
            ) -> np.ndarray:
        """``values`` (samples of ``channel`` at ``rate`` from GPS ``gps_first``) with every
        signal that reaches them added (float64), or ``values`` unchanged for a channel that
        is not strain."""
        if channel not in self.strain_channels:
            return values
        ifo = ifo_of(channel)
        first = int(round((gps_first - self.grid_gps_start) * rate))
        end = first + len(values)
        gps_end = gps_first + len(values) / rate
        out = None
        lo, hi = self._extent[:, 0], self._extent[:, 1]
        # reads go forward in time: a projection that ends before this read is dropped (made
        # again should a read go back), so a month's share holds only the ones it is reading
        for key in [k for k in self._strain if hi[k[0]] <= gps_first]:
            del self._strain[key]
        for index in np.flatnonzero((hi > gps_first) & (lo < gps_end)):
            start, samples = self._projected(int(index), ifo, rate)
            a, b = max(first, start), min(end, start + len(samples))
            if a < b:
                out = values.astype(np.float64) if out is None else out
                out[a - first : b - first] += samples[a - start : b - start]
        return values if out is None else out

    def _ifos(self) -> list[str]:
        return list(dict.fromkeys(ifo_of(c) for c in self.strain_channels))

    def _projected(self, index: int, ifo: str, rate: float) -> tuple[int, np.ndarray]:
        key = (index, ifo, rate)
        if key not in self._strain:
            assert self.source is not None
            for ifo_made in self._ifos():  # every detector at once: one waveform for all
                self._strain[index, ifo_made, rate] = self.source.projected(
                    index, ifo_made, rate, self.grid_gps_start, self.shift_seconds)
        return self._strain[key]


def _chirp_seconds(mass_1: float, mass_2: float, f_lower_hz: float) -> float:
    """Newtonian time to coalescence from ``f_lower_hz`` (s), a bound on the waveform's lead."""
    total = (mass_1 + mass_2) * 4.925491e-6
    eta = mass_1 * mass_2 / (mass_1 + mass_2) ** 2
    return 5.0 / (256.0 * eta) * total * (np.pi * total * f_lower_hz) ** (-8.0 / 3.0)


def on_the_fly(config, shift_seconds: float = 0.0) -> OnTheFly | None:
    """The campaign's ``OnTheFly`` (None unless ``search.inject``): an aframe
    ``InterferometerResponseSet``'s own waveforms, else lalsimulation's of the set.

    Raises DataError naming the file when its waveforms lack a strain channel's detector or
    contradict aframe's schema (``response_set``)."""
    if not config.search.inject:
        return None
    path = config.search.injections
    channels = tuple(config.data.channels)
    responses = read_response_set(path)
    if responses is None:
        return OnTheFly(read_injection_set(path), channels, config.data.start, shift_seconds)
    check_detectors(responses, channels)
    # its parameters give the times (and refuse a non-zero shift); no waveform is made from
    # them, so the approximant and f_lower stand in as unrecorded where aframe's do not say
    injections = read_injection_set(path, approximant=UNRECORDED, f_lower_hz=math.nan)
    return OnTheFly(injections, channels, config.data.start, shift_seconds, responses)
