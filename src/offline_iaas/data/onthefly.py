"""Injections on the fly (``bbhnet.inject``): the set's signals added to the strain as it is read.

Each binary of ``bbhnet.injections`` (an injection set file: ``injections.h5``, aframe's or
LIGO_LW) is projected onto each detector exactly as ``synth`` bakes it into its frames
(``data/synth_injections.py``): ``waveforms.polarizations`` at the frame's own sample rate, then
``waveforms.detector_strain`` (antenna pattern and light-travel delay at the injection's own
time) on the frame grid ``data.start + k / rate``. The samples are added to the strain channel's
frame-rate samples after they are read and before they are resampled to the model rate
(``data/frames.py``), so the model sees what it sees in frames with the set baked in; the
frames are never written to. Waveforms are made lazily, once per binary, detector and rate.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from offline_iaas.data.injection_file import read_injection_set
from offline_iaas.data.injection_set import InjectionSet
from offline_iaas.data.waveforms import detector_strain, polarizations


@dataclass
class OnTheFly:
    """Adds an injection set's projected signals to strain channels read from frames."""

    injections: InjectionSet
    strain_channels: tuple[str, ...]
    grid_gps_start: float
    """Frame sample ``k`` is at ``grid_gps_start + k / rate`` (``data.start``, as synth's)."""
    shift_seconds: float = 0.0
    """Added to every injection's time (0; tests move the set to fail on purpose)."""
    _strain: dict[tuple[int, str, float], tuple[int, np.ndarray]] = field(default_factory=dict)
    _waves: dict[tuple[int, float], object] = field(default_factory=dict)
    _extent: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))

    def __post_init__(self) -> None:
        # a generous GPS extent per binary, to skip the waveform of one a read cannot touch
        # (an array: a read of a month's set looks at every binary's)
        self._extent = np.array([
            (b.gps_time + self.shift_seconds - 64.0
             - _chirp_seconds(b.mass_1_detector, b.mass_2_detector, self.injections.f_lower_hz),
             b.gps_time + self.shift_seconds + 8.0)
            for b in self.injections.binaries]).reshape(-1, 2)

    def add(self, channel: str, gps_first: float, rate: float, values: np.ndarray
            ) -> np.ndarray:
        """``values`` (samples of ``channel`` at ``rate`` from GPS ``gps_first``) with every
        signal that reaches them added (float64), or ``values`` unchanged for a channel that
        is not strain."""
        if channel not in self.strain_channels:
            return values
        ifo = channel.split(":", 1)[0]
        first = int(round((gps_first - self.grid_gps_start) * rate))
        end = first + len(values)
        gps_end = gps_first + len(values) / rate
        out = None
        lo, hi = self._extent[:, 0], self._extent[:, 1]
        for index in np.flatnonzero((hi > gps_first) & (lo < gps_end)):
            start, samples = self._projected(int(index), ifo, rate)
            a, b = max(first, start), min(end, start + len(samples))
            if a < b:
                out = values.astype(np.float64) if out is None else out
                out[a - first : b - first] += samples[a - start : b - start]
        return values if out is None else out

    def _projected(self, index: int, ifo: str, rate: float) -> tuple[int, np.ndarray]:
        key = (index, ifo, rate)
        if key not in self._strain:
            s = self.injections
            binary = s.binaries[index]
            if self.shift_seconds:
                from dataclasses import replace
                binary = replace(binary, gps_time=binary.gps_time + self.shift_seconds)
            if (index, rate) not in self._waves:  # one waveform for every detector
                self._waves[index, rate] = polarizations(binary, s.approximant, rate,
                                                         s.f_lower_hz, s.reference_frequency_hz)
            self._strain[key] = detector_strain(binary, self._waves[index, rate], ifo,
                                                self.grid_gps_start)
            if all((index, c.split(":", 1)[0], rate) in self._strain
                   for c in self.strain_channels):
                del self._waves[index, rate]  # every detector has its projection
        return self._strain[key]


def _chirp_seconds(mass_1: float, mass_2: float, f_lower_hz: float) -> float:
    """Newtonian time to coalescence from ``f_lower_hz`` (s), a bound on the waveform's lead."""
    total = (mass_1 + mass_2) * 4.925491e-6
    eta = mass_1 * mass_2 / (mass_1 + mass_2) ** 2
    return 5.0 / (256.0 * eta) * total * (np.pi * total * f_lower_hz) ** (-8.0 / 3.0)


def on_the_fly(config, shift_seconds: float = 0.0) -> OnTheFly | None:
    """The campaign's ``OnTheFly`` (None unless ``bbhnet.inject``)."""
    if not config.bbhnet.inject:
        return None
    return OnTheFly(read_injection_set(config.bbhnet.injections), tuple(config.data.channels),
                    config.data.start, shift_seconds)
