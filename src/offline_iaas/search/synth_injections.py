"""The synthetic dataset's injections: which binaries, when, their strain in each detector, and
their optimal SNRs.

Binaries
    Drawn from the ``[synth]`` population (``search/population.py``; ``synth.injections`` of
    them, seeded by ``synth.seed``), or read from ``synth.injection_file`` (its rows whose
    geocentre time lies in the span; its approximant, ``f_lower`` and reference frequency where
    it says them).
Draws below the SNR cut (drawn binaries)
    A draw whose optimal network SNR against the design ASD at its own time (its slot's
    antenna patterns and delays: ``draw_injections.draw_above_cut``, the one implementation
    of the draw) is below ``synth.network_snr_min`` is not injected: each slot draws until
    one passes, and the set records ``drawn`` (all draws) and ``injected`` beside the cut, so
    that VT counts the draws left out as missed (``science/bbhnet/sensitivity.py``). With a
    cut of 0 every draw is injected.
Times (drawn binaries)
    Spread evenly over the span: ``t_j = start + lead + usable (j + 1/2) / n`` with
    ``lead`` the population's longest waveform before its coalescence
    (``draw_injections.waveform_bounds``) plus ``MARGIN_SECONDS`` and ``usable`` the span
    less ``lead`` and the longest ringdown plus the margin, so every
    waveform lies inside the span; neighbours must be further apart than the longest
    waveform plus the margin (else ConfigError naming ``synth.injections``).
Strain and SNRs
    ``waveforms.detector_strain`` on the frame grid (``start + k / fs``). Each detector's optimal
    SNR (``waveforms.optimal_snr``, from ``f_lower``) against two PSDs
    (``search/injection_set.py``):
    ``snr_design`` against the design ASD the noise is coloured with (``plan_injections``), and
    ``snr`` against a PSD measured from the frames once they are written (``measure_snrs``): median
    Welch (``waveforms.welch_asd``, 4 s Hann segments, half overlapping, ``1/PSD`` bias-corrected so
    the SNR is unbiased) over ``MEASURED_PSD_SECONDS`` of the detector's first strain channel
    centred on the arrival time (moved inside the span at its ends; the whole span when it is
    shorter), leaving out the segments that overlap an injection (this one or another): the noise
    the data hold, its drift, the coupled 60 Hz line and its sidebands, and not the signals (kept
    in, the loudest demo injection, SNR 52, lost 2 % of its SNR to itself). Where fewer than
    ``MIN_CLEAR_SEGMENTS`` segments are clear of injections (a span of a few tens of seconds) the
    median of so few is too noisy: every segment is used, injections included, with a warning;
    ``synth.json`` records the segments used and what was left out.
"""

from __future__ import annotations

import dataclasses
import logging
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from offline_iaas.config import CampaignConfig
from offline_iaas.config_sections import DataConfig
from offline_iaas.errors import ConfigError
from offline_iaas.search.draw_injections import (
    MARGIN_SECONDS,
    draw_above_cut,
    psd_span,
    waveform_bounds,
)
from offline_iaas.search.injection_file import read_injection_set
from offline_iaas.search.injection_set import InjectionSet
from offline_iaas.search.population import population_spec
from offline_iaas.search.waveforms import (
    BinaryParameters,
    arrival_time,
    check_approximant,
    detector_strain,
    network_snr,
    optimal_snr,
    polarizations,
    welch_asd,
    welch_segments,
)

logger = logging.getLogger(__name__)

MIN_CLEAR_SEGMENTS = 9
"""The fewest Welch segments clear of injections a measured PSD is the median of (with
fewer, the injections stay in: module docstring)."""


@dataclass(frozen=True)
class PlannedInjection:
    """One injection as synth adds it: the binary, and per detector the first sample index on
    the frame grid and the samples, the GPS arrival time and the optimal SNRs (``snr``, against
    the measured PSD, once ``measure_snrs`` has run; ``snr_design``) and the GPS span the
    measured PSD is estimated from, with the GPS spans of the injections in it that its Welch
    segments leave out and the number of segments it is the median of."""

    params: BinaryParameters
    strain: dict[str, tuple[int, np.ndarray]]
    snr_design: dict[str, float]
    arrival_time: dict[str, float]
    snr: dict[str, float] = dataclasses.field(default_factory=dict)
    psd_span: dict[str, tuple[float, float]] = dataclasses.field(default_factory=dict)
    psd_excluded: dict[str, list[tuple[float, float]]] = dataclasses.field(default_factory=dict)
    psd_segments: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def network_snr(self) -> float:
        """Against the measured PSD (NaN before ``measure_snrs``)."""
        return network_snr(list(self.snr.values())) if self.snr else float("nan")

    @property
    def network_snr_design(self) -> float:
        return network_snr(list(self.snr_design.values()))

    def summary(self, gps_start: float) -> dict[str, Any]:
        """The row of ``synth.json``'s ``injections``."""
        p = self.params
        return {
            "gps_time": p.gps_time,
            "seconds_from_start": p.gps_time - gps_start,
            "network_snr": self.network_snr,
            "network_snr_design": self.network_snr_design,
            "parameters": {
                **dataclasses.asdict(p),
                "chirp_mass": p.chirp_mass,
                "mass_1_detector": p.mass_1_detector,
                "mass_2_detector": p.mass_2_detector,
            },
            "ifos": {
                ifo: {"gps_time": self.arrival_time[ifo],
                      "time_offset": self.arrival_time[ifo] - p.gps_time,
                      "snr": self.snr.get(ifo, float("nan")),
                      "snr_design": self.snr_design[ifo],
                      "psd_span": list(self.psd_span.get(ifo, ())),
                      "psd_excluded": [list(r) for r in self.psd_excluded.get(ifo, [])],
                      "psd_segments": self.psd_segments.get(ifo, 0)}
                for ifo in self.snr_design
            },
        }


@dataclass(frozen=True)
class InjectionPlan:
    """The dataset's injections and what their set says of them."""

    injections: list[PlannedInjection]
    approximant: str
    f_lower_hz: float
    reference_frequency_hz: float | None
    attrs: dict[str, Any]

    def injection_set(self, snr_psd: dict[str, str]) -> InjectionSet:
        """The injection set (what ``injections.h5`` holds); ``snr_psd`` says what each SNR
        was computed against."""
        planned = self.injections
        ifos = list(planned[0].snr_design) if planned else []
        return InjectionSet(
            binaries=tuple(p.params for p in planned), approximant=self.approximant,
            f_lower_hz=self.f_lower_hz,
            snr={ifo: tuple(p.snr[ifo] for p in planned) for ifo in ifos
                 if all(ifo in p.snr for p in planned)},
            arrival_time={ifo: tuple(p.arrival_time[ifo] for p in planned) for ifo in ifos},
            attrs=self.attrs,
            snr_design={ifo: tuple(p.snr_design[ifo] for p in planned) for ifo in ifos},
            reference_frequency_hz=self.reference_frequency_hz,
            snr_psd=snr_psd,
        )


def plan_injections(
    config: CampaignConfig,
    ifos: list[str],
    sample_rate: float,
    design_asd: Callable[[np.ndarray], np.ndarray],
) -> InjectionPlan:
    """The dataset's injections (module docstring) with their SNRs against ``design_asd``
    (1/sqrt(Hz)); ``measure_snrs`` adds the measured ones."""
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
        f_ref = source.reference_frequency_hz
        attrs["source_file"] = str(synth.injection_file)
        waves = [polarizations(b, approximant, sample_rate, f_lower, f_ref) for b in binaries]
    else:
        spec = population_spec(synth, config.source)
        approximant, f_lower, attrs = spec.approximant, spec.f_lower_hz, spec.attrs()
        f_ref = None
        attrs["seed"] = synth.seed
        if synth.injections <= 0:
            return InjectionPlan([], approximant, f_lower, f_ref, attrs)
        # synth's stream for the role "injections" (synth_noise._rng)
        rng = np.random.default_rng([synth.seed % 2**63, zlib.crc32(b"injections")])
        times = _spread_times(config.data, config.source, synth.injections,
                              waveform_bounds(spec, sample_rate))
        drawn = draw_above_cut(spec, times, ifos, sample_rate, lambda ifo, t: design_asd,
                               synth.network_snr_min, rng)
        attrs.update(network_snr_min=synth.network_snr_min, drawn=drawn.drawn,
                     injected=synth.injections)
        binaries, waves = drawn.binaries, drawn.waves
    planned = []
    for params, wave in zip(binaries, waves, strict=True):
        strain, snr, arrival = {}, {}, {}
        for ifo in ifos:
            first, samples = detector_strain(params, wave, ifo, data.start)
            arrival[ifo] = arrival_time(params, ifo)
            strain[ifo] = (first, samples)
            snr[ifo] = optimal_snr(samples, sample_rate, design_asd, f_lower)
        planned.append(PlannedInjection(params, strain, snr, arrival))
    return InjectionPlan(planned, approximant, f_lower, f_ref, attrs)


def measure_snrs(
    plan: InjectionPlan,
    read_strain: Callable[[str, float, float], np.ndarray],
    gps_start: float,
    gps_end: float,
    sample_rate: float,
) -> InjectionPlan:
    """``plan`` with each injection's SNR against the PSD measured from the frames
    (module docstring). ``read_strain(ifo, lo, hi)`` reads the detector's strain of
    ``[lo, hi)`` from the written frames."""
    measured, crowded = [], 0
    for p in plan.injections:
        snr, spans, excluded, segments = {}, {}, {}, {}
        for ifo, (_, samples) in p.strain.items():
            lo, hi = spans[ifo] = psd_span(p.arrival_time[ifo], gps_start, gps_end,
                                           sample_rate)
            offset = int(round((lo - gps_start) * sample_rate))
            length = int(round((hi - lo) * sample_rate))
            signals = [(first - offset, first + len(values) - offset)
                       for first, values in (q.strain[ifo] for q in plan.injections)]
            signals = [(a, b) for a, b in signals if a < length and b > 0]
            clear = len(welch_segments(length, sample_rate, signals))
            if clear < MIN_CLEAR_SEGMENTS:
                crowded += 1
                signals = []
            excluded[ifo] = [(lo + a / sample_rate, lo + b / sample_rate) for a, b in signals]
            segments[ifo] = len(welch_segments(length, sample_rate, signals))
            asd = welch_asd(read_strain(ifo, lo, hi), sample_rate, exclude=signals,
                            inverse_unbiased=True)
            snr[ifo] = optimal_snr(samples, sample_rate, asd, plan.f_lower_hz)
        measured.append(dataclasses.replace(p, snr=snr, psd_span=spans,
                                            psd_excluded=excluded, psd_segments=segments))
    if crowded:
        pairs = sum(len(p.strain) for p in plan.injections)
        logger.warning(
            f"synth: {crowded} of the {pairs} measured PSDs (injection x detector) keep the "
            f"injections in: fewer than {MIN_CLEAR_SEGMENTS} of their Welch segments are "
            "clear of injections (a longer span, or fewer injections, would leave them out)")
    return dataclasses.replace(plan, injections=measured)


def _spread_times(data: DataConfig, source: Path | None, n: int, bounds: tuple[float, float]
                  ) -> list[float]:
    """``n`` injection times spread evenly over ``data``'s span, each waveform (``bounds``:
    seconds before and after its time) ``MARGIN_SECONDS`` from the ends and the others."""
    before, after = bounds
    lead, trail = before + MARGIN_SECONDS, after + MARGIN_SECONDS
    usable = data.duration - lead - trail
    needed = before + after + MARGIN_SECONDS
    if usable <= 0 or (n > 1 and usable / n < needed):  # one alone needs no spacing
        raise ConfigError(
            f"{source}: 'synth.injections' ({n}) do not fit in data.duration "
            f"({data.duration:g} s): each waveform lasts up to {before + after:.1f} s and "
            f"they stay {MARGIN_SECONDS:g} s from the ends and each other (fewer injections, "
            "a longer span, heavier masses or a higher synth.f_lower_hz)"
        )
    return [data.start + lead + usable * (j + 0.5) / n for j in range(n)]
