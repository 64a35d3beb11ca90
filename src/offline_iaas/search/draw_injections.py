"""Drawing an injection population above an SNR cut, each binary judged at its own time.

``draw_above_cut`` is the one implementation of the draw: ``synth`` (against the design PSD)
and ``offline-iaas draw-injections`` (against the PSD measured from any frames) both use it.

Times
    ``slot_times``: one injection per ``interval_seconds`` over the span,
    ``t_j = start + lead + interval (j + 1/2)`` for as many ``j`` as fit in the span less
    ``lead`` (the population's longest waveform before its coalescence plus ``MARGIN_SECONDS``)
    and ``trail`` (its longest ringdown plus the margin). The longest waveforms are bounds over
    the population (``waveform_bounds``): the lightest binary (both masses at the minimum,
    ``z = 0``, spins aligned at ``+spin_max``) inspirals longest, the heaviest in the detector
    frame (both at the maximum, ``z = redshift_max``) rings longest.
The cut
    For the slot at ``t``, binaries are drawn one at a time from the population, their
    coalescence put at ``t``, projected onto each detector with its antenna pattern and
    light-travel delay at ``t`` (the Earth has turned since the middle of the span: over hours
    a binary's SNR changes), and the first whose optimal network SNR against ``asd_at(ifo,
    t)`` reaches ``network_snr_min`` is kept; the others are rejected and counted. ``drawn``
    (kept plus rejected) is what a found fraction is taken of: every draw is an injection
    of the population, the rejected ones missed by construction.

``draw_injection_set`` (the command) measures the PSD at each slot from the campaign's frames
(``data.frames`` or datafind, read at ``data.sample_rate`` by the frame reader): median Welch
of ``MEASURED_PSD_SECONDS`` around ``t`` with the ``1/PSD`` bias corrected
(``waveforms.welch_asd(..., inverse_unbiased=True)``), the same PSD the kept binary's recorded
``snr`` is computed against.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from offline_iaas.config import CampaignConfig
from offline_iaas.config_sections import DataConfig, ifo_of
from offline_iaas.errors import ConfigError, DataError
from offline_iaas.search.injection_set import InjectionSet
from offline_iaas.search.population import PopulationSpec, draw_binaries, population_spec
from offline_iaas.search.waveforms import (
    BinaryParameters,
    Polarizations,
    arrival_time,
    detector_strain,
    network_snr,
    optimal_snr,
    polarizations,
    welch_asd,
)

MARGIN_SECONDS = 1.0
"""Room (s) between a waveform and the span's ends or the next waveform (light travel time,
interpolation kernel)."""
MEASURED_PSD_SECONDS = 64.0
"""Length (s) of the data around an injection its measured PSD is estimated from."""
DRAWS_PER_INJECTION_MAX = 1000
"""``draw_above_cut`` gives up after this many draws per injection wanted."""

AsdAt = Callable[[str, float], Callable[[np.ndarray], np.ndarray]]
"""``asd_at(ifo, gps)``: the ASD (1/sqrt(Hz)) of detector ``ifo`` around ``gps``."""


@dataclass(frozen=True)
class Draw:
    """What ``draw_above_cut`` kept: the binaries (at their slot times), their waveforms and
    per-detector SNRs against ``asd_at`` at their time, and how many were drawn in all."""

    binaries: list[BinaryParameters]
    waves: list[Polarizations]
    snr: list[dict[str, float]]
    drawn: int

    @property
    def rejected(self) -> int:
        return self.drawn - len(self.binaries)


def waveform_bounds(spec: PopulationSpec, sample_rate: float) -> tuple[float, float]:
    """``(before, after)``: seconds the population's longest waveform lasts before its
    coalescence, and after it (module docstring)."""
    def wave(mass: float, redshift: float) -> Polarizations:
        from offline_iaas.search.population import luminosity_distance_mpc

        binary = BinaryParameters(
            mass_1=mass, mass_2=mass, redshift=redshift,
            luminosity_distance=max(float(luminosity_distance_mpc(redshift)), 1.0),
            inclination=0.0, polarization=0.0, ra=0.0, dec=0.0, coalescence_phase=0.0,
            gps_time=0.0, spin_1z=spec.spin_max, spin_2z=spec.spin_max)
        return polarizations(binary, spec.approximant, sample_rate, spec.f_lower_hz)

    light = wave(spec.mass_min_msun, 0.0)
    heavy = wave(spec.mass_max_msun, spec.redshift_max)
    return (max(light.seconds_before, heavy.seconds_before),
            max(light.seconds_after, heavy.seconds_after))


def slot_times(gps_start: float, duration: float, interval_seconds: float,
               bounds: tuple[float, float]) -> list[float]:
    """The injections' coalescence times, one per ``interval_seconds`` (module docstring);
    [] when none fits."""
    before, after = bounds
    lead, trail = before + MARGIN_SECONDS, after + MARGIN_SECONDS
    usable = duration - lead - trail
    count = max(0, math.floor(usable / interval_seconds)) if usable > 0 else 0
    return [gps_start + lead + interval_seconds * (j + 0.5) for j in range(count)]


def draw_above_cut(
    spec: PopulationSpec, times: Sequence[float], ifos: Sequence[str], sample_rate: float,
    asd_at: AsdAt, network_snr_min: float, rng: np.random.Generator,
    what: str = "'synth.network_snr_min'",
) -> Draw:
    """One binary per time of ``times`` at or above ``network_snr_min`` at that time
    (module docstring); ConfigError naming ``what`` after ``DRAWS_PER_INJECTION_MAX`` draws
    per injection."""
    binaries, waves, snrs = [], [], []
    count = 0
    for t in times:
        asds = {ifo: asd_at(ifo, t) for ifo in ifos}
        while True:
            if count >= DRAWS_PER_INJECTION_MAX * len(times):
                raise ConfigError(
                    f"only {len(binaries)} of {count} binaries drawn reach {what} "
                    f"({network_snr_min:g}); lower it or synth.redshift_max")
            count += 1
            binary = draw_binaries(spec, 1, rng, gps_time=t)[0]
            wave = polarizations(binary, spec.approximant, sample_rate, spec.f_lower_hz)
            snr = {ifo: optimal_snr(detector_strain(binary, wave, ifo, t)[1], sample_rate,
                                    asds[ifo], spec.f_lower_hz) for ifo in ifos}
            if network_snr(list(snr.values())) >= network_snr_min:
                binaries.append(binary)
                waves.append(wave)
                snrs.append(snr)
                break
    return Draw(binaries, waves, snrs, count)


def measured_asd_at(
    read_strain: Callable[[str, float, float], np.ndarray], gps_start: float, gps_end: float,
    sample_rate: float,
) -> AsdAt:
    """``asd_at`` measuring the PSD of ``MEASURED_PSD_SECONDS`` around each time from
    ``read_strain(ifo, lo, hi)`` (module docstring)."""
    def asd_at(ifo: str, gps: float) -> Callable[[np.ndarray], np.ndarray]:
        lo, hi = psd_span(gps, gps_start, gps_end, sample_rate)
        return welch_asd(read_strain(ifo, lo, hi), sample_rate, inverse_unbiased=True)

    return asd_at


def psd_span(arrival_gps: float, gps_start: float, gps_end: float, sample_rate: float
             ) -> tuple[float, float]:
    """The GPS span ``[lo, hi)`` of ``MEASURED_PSD_SECONDS`` centred on ``arrival_gps``,
    moved inside ``[gps_start, gps_end)`` at its ends (the whole span when shorter), on the
    sample grid from ``gps_start``."""
    if gps_end - gps_start <= MEASURED_PSD_SECONDS:
        return gps_start, gps_end
    lo = min(max(arrival_gps - MEASURED_PSD_SECONDS / 2, gps_start),
             gps_end - MEASURED_PSD_SECONDS)
    lo = gps_start + math.floor((lo - gps_start) * sample_rate) / sample_rate
    return lo, lo + MEASURED_PSD_SECONDS


def draw_injection_set(
    config: CampaignConfig, interval_seconds: float, network_snr_min: float, seed: int,
    read_strain: Callable[[str, float, float], np.ndarray],
) -> tuple[InjectionSet, Draw]:
    """The injection set ``offline-iaas draw-injections`` writes (module docstring): the
    ``[synth]`` population, one binary per ``interval_seconds`` of the ``[data]`` span, cut at
    ``network_snr_min`` against the PSD measured by ``read_strain(ifo, lo, hi)`` (samples of
    the detector's strain channel at ``data.sample_rate``), and the draw behind it."""
    data = config.data
    spec = population_spec(config.synth, config.source)
    rate = data.sample_rate
    if rate / 2 <= spec.f_lower_hz:
        raise ConfigError(f"{config.source}: 'data.sample_rate' ({rate:g} Hz) leaves nothing "
                          f"above synth.f_lower_hz ({spec.f_lower_hz:g} Hz)")
    try:
        bounds = waveform_bounds(spec, rate)
    except DataError as err:  # the population's extreme binaries: the config's doing
        raise ConfigError(
            f"{config.source}: 'synth.approximant' {spec.approximant} cannot generate the "
            f"population's extreme binaries ({spec.mass_min_msun:g} and "
            f"{spec.mass_max_msun:g} Msun, aligned spins {spec.spin_max:g}, from "
            f"{spec.f_lower_hz:g} Hz at {rate:g} Hz): lalsimulation: "
            f"{str(err).split('): ', 1)[-1]}"
        ) from None
    if interval_seconds < sum(bounds) + MARGIN_SECONDS:
        raise ConfigError(
            f"{config.source}: an injection every {interval_seconds:g} s overlaps the next: "
            f"the population's waveforms last up to {sum(bounds):.1f} s (a longer interval, "
            "heavier masses or a higher synth.f_lower_hz)")
    # on the data's sample grid (aframe's inject places a waveform by whole samples)
    times = [data.start + round((t - data.start) * rate) / rate
             for t in slot_times(data.start, data.duration, interval_seconds, bounds)]
    if not times:
        raise ConfigError(
            f"{config.source}: data.duration ({data.duration:g} s) holds no injection every "
            f"{interval_seconds:g} s (waveforms of up to {sum(bounds):.1f} s)")
    ifos = [ifo_of(channel) for channel in data.channels]
    end = data.start + data.duration
    asd_at = measured_asd_at(read_strain, data.start, end, rate)
    rng = np.random.default_rng([seed % 2**63, 41])
    drawn = draw_above_cut(spec, times, ifos, rate, asd_at, network_snr_min, rng,
                           "the --network-snr-min")
    attrs = spec.attrs()
    attrs.update(network_snr_min=network_snr_min, drawn=drawn.drawn,
                 injected=len(drawn.binaries), seed=seed, interval_seconds=interval_seconds)
    injections = InjectionSet(
        binaries=tuple(drawn.binaries), approximant=spec.approximant,
        f_lower_hz=spec.f_lower_hz,
        snr={ifo: tuple(s[ifo] for s in drawn.snr) for ifo in ifos},
        arrival_time={ifo: tuple(arrival_time(b, ifo) for b in drawn.binaries)
                      for ifo in ifos},
        attrs=attrs,
        snr_psd={"snr": f"median Welch PSD (4 s Hann segments, half overlapping, 1/PSD "
                        f"bias-corrected) of {MEASURED_PSD_SECONDS:g} s of "
                        f"{', '.join(data.channels)} around the coalescence time"},
    )
    return injections, drawn


def frame_strain_reader(data: DataConfig) -> Callable[[str, float, float], np.ndarray]:
    """``read(ifo, lo, hi)``: detector ``ifo``'s strain channel of ``[lo, hi)`` at
    ``data.sample_rate`` from the campaign's frames (``data.frames`` or datafind; the frame
    reader's grid and resampling over the whole ``[data]`` span)."""
    from offline_iaas.data.discovery import discover_frames
    from offline_iaas.data.frames import read_span

    frames = tuple(discover_frames(data))
    span = (data.start, data.start + data.duration)
    channel = {ifo_of(c): c for c in data.channels}

    def read(ifo: str, lo: float, hi: float) -> np.ndarray:
        return np.asarray(read_span(frames, (channel[ifo],), lo, hi, data.sample_rate, span)[0],
                          np.float64)

    return read

