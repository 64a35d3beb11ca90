"""The synthetic dataset's injections: which binaries, when, their strain in each detector, and
their optimal SNR against the dataset's noise.

Binaries
    Drawn from the ``[synth]`` population (``data/population.py``; ``synth.injections`` of
    them, seeded by ``synth.seed``), or read from ``synth.injection_file`` (its rows whose
    geocentre time lies in the span; its approximant and ``f_lower`` where it says them).
Draws below the SNR cut (drawn binaries)
    A draw whose optimal network SNR (at the middle of the span; the Earth turns the antenna
    patterns a little by each injection's own time) is below ``synth.network_snr_min`` is
    not injected: draws go on until ``synth.injections`` pass, and the set records
    ``drawn`` (all draws) and ``injected`` beside the cut, so that VT counts the draws left
    out as missed (``sensitivity.py``). With a cut of 0 every draw is injected.
Times (drawn binaries)
    Spread evenly over the span: ``t_j = start + lead + usable (j + 1/2) / n`` with
    ``lead`` the longest waveform before its coalescence plus ``MARGIN_SECONDS`` and
    ``usable`` the span less ``lead`` and the longest ringdown plus the margin, so every
    waveform lies inside the span; neighbours must be further apart than the longest
    waveform plus the margin (else ConfigError naming ``synth.injections``).
Strain and SNR
    ``waveforms.detector_strain`` on the frame grid (``start + k / fs``); each detector's
    optimal SNR against the noise there: the ASD synth colours its noise with, times the
    noise drift at the signal's arrival, from ``f_lower`` (``waveforms.optimal_snr``).
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from offline_iaas.config import CampaignConfig
from offline_iaas.data.injection_file import InjectionSet, read_injection_set
from offline_iaas.data.population import draw_binaries, population_spec
from offline_iaas.data.waveforms import (
    BinaryParameters,
    Polarizations,
    arrival_time,
    check_approximant,
    detector_strain,
    network_snr,
    optimal_snr,
    polarizations,
)
from offline_iaas.errors import ConfigError

MARGIN_SECONDS = 1.0
"""Room (s) between a waveform and the span's ends or the next waveform (light travel time,
interpolation kernel)."""


@dataclass(frozen=True)
class PlannedInjection:
    """One injection as synth adds it: the binary, and per detector the first sample index on
    the frame grid and the samples, the optimal SNR and the GPS arrival time."""

    params: BinaryParameters
    strain: dict[str, tuple[int, np.ndarray]]
    snr: dict[str, float]
    arrival_time: dict[str, float]

    @property
    def network_snr(self) -> float:
        return network_snr(list(self.snr.values()))

    def summary(self, gps_start: float) -> dict[str, Any]:
        """The row of ``synth.json``'s ``injections``."""
        p = self.params
        return {
            "gps_time": p.gps_time,
            "seconds_from_start": p.gps_time - gps_start,
            "network_snr": self.network_snr,
            "parameters": {
                **dataclasses.asdict(p),
                "chirp_mass": p.chirp_mass,
                "mass_1_detector": p.mass_1_detector,
                "mass_2_detector": p.mass_2_detector,
            },
            "ifos": {
                ifo: {"gps_time": self.arrival_time[ifo],
                      "time_offset": self.arrival_time[ifo] - p.gps_time,
                      "snr": self.snr[ifo]}
                for ifo in self.snr
            },
        }


def plan_injections(
    config: CampaignConfig,
    ifos: list[str],
    sample_rate: float,
    asd: Callable[[np.ndarray], np.ndarray],
    noise_level: Callable[[float], float],
) -> tuple[list[PlannedInjection], InjectionSet]:
    """The dataset's injections (module docstring) and their injection set (what
    ``injections.h5`` holds).

    ``asd`` is the noise's ASD (1/sqrt(Hz)) and ``noise_level(gps)`` its factor at a time.
    """
    synth, data = config.synth, config.data
    if (synth.injections > 0 or synth.injection_file) and sample_rate / 2 <= synth.f_lower_hz:
        raise ConfigError(
            f"{config.source}: 'synth.frame_sample_rate' ({sample_rate:g} Hz) leaves nothing "
            f"above synth.f_lower_hz ({synth.f_lower_hz:g} Hz) for the injections"
        )
    if synth.injection_file is not None:
        source = read_injection_set(synth.injection_file, synth.approximant, synth.f_lower_hz)
        check_approximant(source.approximant, f"approximant of {synth.injection_file}",
                          config.source)
        end = data.start + data.duration
        binaries = [b for b in source.binaries if data.start <= b.gps_time < end]
        approximant, f_lower, attrs = source.approximant, source.f_lower_hz, dict(source.attrs)
        attrs["source_file"] = str(synth.injection_file)
        waves = [polarizations(b, approximant, sample_rate, f_lower) for b in binaries]
    else:
        spec = population_spec(synth, config.source)
        approximant, f_lower, attrs = spec.approximant, spec.f_lower_hz, spec.attrs()
        attrs["seed"] = synth.seed
        if synth.injections <= 0:
            return [], InjectionSet((), approximant, f_lower, attrs=attrs)
        # synth's stream for the role "injections" (synth._rng)
        rng = np.random.default_rng([synth.seed % 2**63, zlib.crc32(b"injections")])
        drawn, waves, count = _draw_above_cut(config, ifos, sample_rate, asd, noise_level, rng)
        attrs.update(network_snr_min=synth.network_snr_min, drawn=count,
                     injected=synth.injections)
        times = _spread_times(config, waves)
        binaries = [dataclasses.replace(b, gps_time=t) for b, t in zip(drawn, times, strict=True)]
    planned = []
    for params, wave in zip(binaries, waves, strict=True):
        strain, snr, arrival = {}, {}, {}
        for ifo in ifos:
            first, samples = detector_strain(params, wave, ifo, data.start)
            arrival[ifo] = arrival_time(params, ifo)
            strain[ifo] = (first, samples)
            snr[ifo] = optimal_snr(samples, sample_rate, asd, f_lower, noise_level(arrival[ifo]))
        planned.append(PlannedInjection(params, strain, snr, arrival))
    injection_set = InjectionSet(
        binaries=tuple(binaries), approximant=approximant, f_lower_hz=f_lower,
        snr={ifo: tuple(p.snr[ifo] for p in planned) for ifo in ifos},
        arrival_time={ifo: tuple(p.arrival_time[ifo] for p in planned) for ifo in ifos},
        attrs=attrs,
    )
    return planned, injection_set


DRAWS_PER_INJECTION_MAX = 1000
"""``_draw_above_cut`` gives up after this many draws per injection wanted."""


def _draw_above_cut(
    config: CampaignConfig, ifos: list[str], sample_rate: float,
    asd: Callable[[np.ndarray], np.ndarray], noise_level: Callable[[float], float],
    rng: np.random.Generator,
) -> tuple[list[BinaryParameters], list[Polarizations], int]:
    """``synth.injections`` binaries of the population at or above ``synth.network_snr_min``
    (module docstring), their waveforms, and how many were drawn."""
    synth, data = config.synth, config.data
    spec = population_spec(synth, config.source)
    middle = data.start + data.duration / 2
    kept: list[tuple[BinaryParameters, Polarizations]] = []
    count = 0
    while len(kept) < synth.injections:
        if count >= DRAWS_PER_INJECTION_MAX * synth.injections:
            raise ConfigError(
                f"{config.source}: only {len(kept)} of {count} binaries drawn reach "
                f"'synth.network_snr_min' ({synth.network_snr_min:g}); lower it or "
                "synth.redshift_max")
        for binary in draw_binaries(spec, synth.injections, rng):
            if len(kept) == synth.injections:
                break
            count += 1
            wave = polarizations(binary, spec.approximant, sample_rate, spec.f_lower_hz)
            if synth.network_snr_min <= 0 or _network_snr_at(
                    dataclasses.replace(binary, gps_time=middle), wave, ifos, asd,
                    noise_level, spec.f_lower_hz) >= synth.network_snr_min:
                kept.append((binary, wave))
    return [b for b, _ in kept], [w for _, w in kept], count


def _network_snr_at(binary: BinaryParameters, wave: Polarizations, ifos: list[str],
                    asd: Callable[[np.ndarray], np.ndarray],
                    noise_level: Callable[[float], float], f_lower_hz: float) -> float:
    """Optimal network SNR of ``binary`` at its ``gps_time`` (as ``plan_injections``
    records it)."""
    snrs = []
    for ifo in ifos:
        _, samples = detector_strain(binary, wave, ifo, binary.gps_time)
        snrs.append(optimal_snr(samples, wave.sample_rate, asd, f_lower_hz,
                                noise_level(arrival_time(binary, ifo))))
    return network_snr(snrs)


def _spread_times(config: CampaignConfig, waves: list[Polarizations]) -> list[float]:
    data, n = config.data, len(waves)
    before = max(w.seconds_before for w in waves)
    after = max(w.seconds_after for w in waves)
    lead, trail = before + MARGIN_SECONDS, after + MARGIN_SECONDS
    usable = data.duration - lead - trail
    needed = before + after + MARGIN_SECONDS
    if usable <= 0 or usable / n < needed:
        raise ConfigError(
            f"{config.source}: 'synth.injections' ({n}) do not fit in data.duration "
            f"({data.duration:g} s): each waveform lasts up to {before + after:.1f} s and "
            f"they stay {MARGIN_SECONDS:g} s from the ends and each other (fewer injections, "
            "a longer span, heavier masses or a higher synth.f_lower_hz)"
        )
    return [data.start + lead + usable * (j + 0.5) / n for j in range(n)]
