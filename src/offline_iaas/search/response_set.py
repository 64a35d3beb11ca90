"""aframe's ``InterferometerResponseSet`` as an injection source: its projected waveforms, written
by this project and added to the strain on the fly as they are (no waveform is generated).

The layout (``injections_aframe``: github.com/ML4GW/aframe at ``AFRAME_COMMIT``,
``libs/ledger/ledger/injections.py``): the injected set's ``parameters`` (``injection_time``,
``shift``, ...), one dataset ``waveforms/<ifo>`` per detector (lower-case prefix) of ``rows x
duration * sample_rate`` projected strain samples, and root attributes ``sample_rate``,
``duration`` and ``right_pad``.

Placement (aframe's ``InterferometerResponseSet.inject(x, start)``)
    sample ``k`` of row ``i`` is added to sample ``int((t_i - start) * sample_rate) -
    int(left_pad * sample_rate) + k`` of data ``x`` that starts at GPS ``start``, ``t_i`` the
    row's ``injection_time`` and ``left_pad = duration - right_pad``: the waveform's sample
    ``k`` is at ``t_i - left_pad + k / sample_rate``, a time off the data's sample grid
    truncated to the sample before it (aframe does not shift by a fraction of a sample). Here
    the grid is the frames' (``data.start + j / rate``) and ``int`` is ``floor`` with
    ``GRID_TOLERANCE`` of a sample, so that a time on the grid that float arithmetic puts a
    hair below it is not moved a whole sample early. ``project_responses`` writes each row so
    that a time on the data's grid (``draw-injections`` puts them there) gets exactly the
    strain ``waveforms.detector_strain`` adds there (lalsimulation's sub-sample placement).
Rates
    aframe injects at its file's ``sample_rate`` into data at that rate. A client adds the
    signals to the strain channel at its frame rate (``search/onthefly.py``), before resampling
    to the model rate: a file at the frame rate is added sample for sample; at another rate
    each row is resampled to the frame rate with ``scipy.signal.resample_poly`` (the rates'
    ratio ``p/q`` in lowest terms, default Kaiser window; the row first prepended with as
    many zeros as put its first sample on the frame grid;
    ``tests/test_injections_response_set.py`` checks it on a sinusoid). ``draw-injections``
    writes the file at ``data.sample_rate`` (the model's, as aframe's are at its model's
    rate), with lalsimulation's waveforms made at that rate: ``SimInspiralTD`` conditions a
    waveform differently at another rate (at 256 Hz a 25-40 Msun IMRPhenomD binary is not the
    1024 Hz one resampled, even below 100 Hz), so such a file's foreground is that of its own
    waveforms, not of lalsimulation's at the frame rate (measured on the test's campaign:
    1.2e-3 of the statistic's scale apart, where the signals move it by 9e-4). For the
    foreground of lalsimulation's waveforms, give the parameters (any layout without
    ``waveforms``) or write the response set at the frame rate.
``shift``
    read with the parameters (``injections_aframe.refuse_shifts``): a non-zero one is refused.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from offline_iaas.config_sections import ifo_of
from offline_iaas.data.gwf_reader import reader
from offline_iaas.data.hdf5_probe import HDF5_DAMAGE, readable_hdf5
from offline_iaas.errors import ConfigError, DataError
from offline_iaas.search.injection_set import InjectionSet, attr_value, number_attribute
from offline_iaas.search.waveforms import BinaryParameters, Polarizations, detector_strain

GRID_TOLERANCE = 1e-6
"""Fraction of a sample by which a time below a grid point still counts as on it."""
MARGIN_SECONDS = 1.0
"""Room (s) ``project_responses`` leaves each side of the longest waveform (the delay to a
detector, the sub-sample interpolation)."""
WAVEFORMS = "waveforms"
METADATA = ("sample_rate", "duration", "right_pad")


@dataclass
class ResponseSet:
    """The projected waveforms of an ``InterferometerResponseSet`` file, read lazily per row
    and detector (the file is opened per read)."""

    path: Path
    times: np.ndarray
    """``parameters/injection_time`` (GPS, geocentre)."""
    ifos: tuple[str, ...]
    """The detectors of ``waveforms/<ifo>``, upper case (``H1``)."""
    sample_rate: float
    duration: float
    right_pad: float

    @property
    def left_pad(self) -> float:
        """Seconds from a row's first sample to its ``injection_time``."""
        return self.duration - self.right_pad

    def extent(self, index: int, shift_seconds: float = 0.0) -> tuple[float, float]:
        """GPS ``[lo, hi)`` row ``index`` can touch (one sample to spare each side)."""
        t = self.times[index] + shift_seconds
        spare = 1.0 / self.sample_rate
        return t - self.left_pad - spare, t + self.right_pad + spare

    def row(self, index: int, ifo: str) -> np.ndarray:
        """Row ``index`` of ``waveforms/<ifo>`` (float64)."""
        import h5py

        try:
            with h5py.File(self.path, "r") as f:
                return np.asarray(f[WAVEFORMS][ifo.lower()][index], np.float64)
        except HDF5_DAMAGE as err:
            raise DataError(f"{self.path}: cannot read row {index} of "
                            f"'{WAVEFORMS}/{ifo.lower()}': {err}") from None

    def projected(self, index: int, ifo: str, rate: float, grid_gps_start: float,
                  shift_seconds: float = 0.0) -> tuple[int, np.ndarray]:
        """Row ``index`` of detector ``ifo`` on the grid ``grid_gps_start + j / rate``: the
        index of its first sample and the samples (module docstring: placement, rates)."""
        at = (self.times[index] + shift_seconds - grid_gps_start) * self.sample_rate
        first = math.floor(at + GRID_TOLERANCE) - math.floor(
            self.left_pad * self.sample_rate + GRID_TOLERANCE)
        samples = self.row(index, ifo)
        if rate == self.sample_rate:
            return first, samples
        from scipy import signal

        ratio = Fraction(rate) / Fraction(self.sample_rate)
        up, down = ratio.numerator, ratio.denominator
        lead = first % down  # zeros before the row put its first sample on the frame grid
        padded = np.concatenate([np.zeros(lead), samples])
        return (first - lead) * up // down, signal.resample_poly(padded, up, down)


def read_response_set(path: Path) -> ResponseSet | None:
    """The projected waveforms of the aframe ``InterferometerResponseSet`` at ``path``; None
    when the file has no ``waveforms`` group (a parameter set: lalsimulation makes its
    waveforms). DataError naming the file and field when its metadata or shapes contradict
    aframe's schema (``InjectionMetadata.__post_init__``)."""
    from offline_iaas.search.injection_file import HDF5_SUFFIXES

    path = Path(path)
    if not path.name.lower().endswith(HDF5_SUFFIXES) or not path.is_file():
        return None  # read_injection_set says what is wrong with it
    header = reader().call(_read_header, path)
    if header is None:
        return None
    metadata, times, shapes = header
    rate, duration = (number_attribute(path, name, metadata[name]) for name in METADATA[:2])
    right_pad = metadata[METADATA[2]]
    if isinstance(right_pad, bool) or not isinstance(right_pad, (int, float)):
        raise DataError(f"{path}: attribute '{METADATA[2]}' must be a number, got "
                        f"{right_pad!r}")
    if times is None:
        raise DataError(f"{path}: an InterferometerResponseSet needs "
                        "'parameters/injection_time'")
    if not (rate > 0 and 0 <= right_pad <= duration):
        raise DataError(f"{path}: sample_rate {rate:g} Hz, duration {duration:g} s, right_pad "
                        f"{right_pad:g} s: not a waveform of duration s with right_pad s after "
                        "its coalescence")
    length = int(round(duration * rate))
    for ifo, shape in shapes.items():
        if shape != (len(times), length):
            raise DataError(
                f"{path}: '{WAVEFORMS}/{ifo.lower()}' has shape {shape}, expected "
                f"({len(times)}, {length}): one row of duration x sample_rate samples per "
                "injection_time")
    return ResponseSet(path, times, tuple(shapes), rate, duration, right_pad)


def _read_header(path: Path) -> tuple[dict[str, Any], np.ndarray | None,
                                     dict[str, tuple[int, ...]]] | None:
    """The response set's ``METADATA`` attributes as they are (the caller checks them), its
    injection times and waveform shapes (by detector); None without a ``waveforms`` group (in
    the frame reader's process, ``GwfReader.call``)."""
    import h5py

    with readable_hdf5(path), h5py.File(path, "r") as f:
        group = f.get(WAVEFORMS)
        if not isinstance(group, h5py.Group):
            return None
        missing = [name for name in METADATA if name not in f.attrs]
        if missing:
            raise DataError(f"{path}: an InterferometerResponseSet ('{WAVEFORMS}' group) "
                            f"needs root attribute {missing[0]}")
        metadata = {name: attr_value(f.attrs[name]) for name in METADATA}
        times = np.asarray(f["parameters/injection_time"][()], np.float64) if (
            "parameters/injection_time" in f) else None
        shapes = {name.upper(): group[name].shape for name in group
                  if isinstance(group[name], h5py.Dataset)}
    return metadata, times, shapes


def check_detectors(responses: ResponseSet, channels: Sequence[str]) -> None:
    """DataError naming the file when a strain channel's detector has no waveforms there."""
    for channel in channels:
        ifo = ifo_of(channel)
        if ifo not in responses.ifos:
            raise DataError(
                f"{responses.path}: no '{WAVEFORMS}/{ifo.lower()}' for strain channel "
                f"{channel}: the InterferometerResponseSet holds projected waveforms for "
                f"{', '.join(responses.ifos) or 'no detector'} only")


def project_responses(binaries: Sequence[BinaryParameters], waves: Sequence[Polarizations],
                      ifos: Sequence[str]) -> tuple[dict[str, np.ndarray], float, float]:
    """The projected waveforms of an ``InterferometerResponseSet`` (module docstring): per
    detector, ``rows x duration * sample_rate`` samples, sample ``k`` of row ``i`` at ``t_i -
    (duration - right_pad) + k / sample_rate`` (``waveforms.detector_strain``, as synth adds
    it, on the grid from there); ``duration`` and ``right_pad`` whole seconds holding every
    row's waveform with ``MARGIN_SECONDS`` to spare. ``waves`` at one sample rate.

    Returns
    -------
    responses, duration, right_pad
        The rows per detector, and the seconds they last and last after ``t_i``."""
    rate = waves[0].sample_rate
    before = max(w.seconds_before for w in waves)
    after = max(w.seconds_after for w in waves)
    right_pad = float(math.ceil(after + MARGIN_SECONDS))
    duration = float(math.ceil(before + MARGIN_SECONDS) + right_pad)
    length = int(round(duration * rate))
    responses = {}
    for ifo in ifos:
        rows = np.zeros((len(binaries), length))
        for i, (binary, wave) in enumerate(zip(binaries, waves, strict=True)):
            first, samples = detector_strain(binary, wave, ifo,
                                             binary.gps_time - (duration - right_pad))
            rows[i, first : first + len(samples)] = samples
        responses[ifo] = rows
    return responses, duration, right_pad


def write_response_set(path: Path, injections: InjectionSet, sample_rate: float,
                       ifos: Sequence[str], waves: Sequence[Polarizations] | None = None
                       ) -> None:
    """Write ``injections`` at ``path`` as an aframe ``InterferometerResponseSet``: the
    parameters (``injections_aframe.write_aframe``) and the projected
    waveforms of ``ifos`` at ``sample_rate`` (``waves``: the binaries' polarisations at that
    rate, made with lalsimulation where not given)."""
    from offline_iaas.atomic import replaced_atomically
    from offline_iaas.search.injection_file import HDF5_SUFFIXES, file_format
    from offline_iaas.search.injections_aframe import add_responses, write_aframe
    from offline_iaas.search.waveforms import polarizations

    path = Path(path)
    if file_format(path) != "hdf5":
        raise ConfigError(f"{path}: an aframe response set is an HDF5 file "
                          f"({', '.join(HDF5_SUFFIXES)})")
    if waves is None:
        waves = [polarizations(b, injections.approximant, sample_rate, injections.f_lower_hz,
                               injections.reference_frequency_hz)
                 for b in injections.binaries]
    responses, duration, right_pad = project_responses(injections.binaries, waves, ifos)
    with replaced_atomically(path) as tmp:  # the waveforms join the parameters first
        write_aframe(tmp, injections, final_path=path)
        add_responses(tmp, responses, sample_rate, duration, right_pad)
