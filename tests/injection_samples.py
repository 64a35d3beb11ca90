"""Injection sets the injection-file tests write and compare (tests/test_injection*.py)."""

from __future__ import annotations

import dataclasses

import numpy as np

from offline_iaas.search.injection_set import InjectionSet
from offline_iaas.search.population import PopulationSpec, draw_binaries
from offline_iaas.search.waveforms import BinaryParameters

SPEC = PopulationSpec("IMRPhenomD", 20.0, 20.0, 50.0, 0.5, 0.4)
FIELDS = [f.name for f in dataclasses.fields(BinaryParameters)]
FLOAT32 = 2e-7
"""LIGO_LW's sim_inspiral columns are real_4: relative precision ~6e-8, 1e-7 after the
redshift is recomputed from the distance."""
START = 1262304000.0


def sample_set(n: int = 6) -> InjectionSet:
    """``n`` binaries of ``SPEC`` (precessing from the second on), both SNRs, two detectors'
    arrival times, the population's attributes."""
    binaries = draw_binaries(SPEC, n, np.random.default_rng(2))
    binaries = [dataclasses.replace(b, gps_time=START + 30.0 * i + 0.123456789,
                                    spin_1x=0.05 * i, spin_2y=-0.03 * i)
                for i, b in enumerate(binaries)]
    snr = {"H1": tuple(5.0 + i for i in range(n)), "L1": tuple(3.0 + 2 * i for i in range(n))}
    design = {ifo: tuple(1.035 * v for v in values) for ifo, values in snr.items()}
    arrival = {ifo: tuple(b.gps_time + d for b in binaries)
               for ifo, d in (("H1", 0.0051), ("L1", -0.0032))}
    return InjectionSet(tuple(binaries), "IMRPhenomD", 20.0, snr, arrival,
                        {**SPEC.attrs(), "seed": 7}, snr_design=design,
                        reference_frequency_hz=25.0,
                        snr_psd={"snr": "Welch of the frames", "snr_design": "design"})


def assert_same_binaries(a: InjectionSet, b: InjectionSet, rtol: float,
                         fields: list[str] | None = None) -> None:
    """Every field of every binary within ``rtol`` (of max(1, |value|)); times to 2 ns."""
    assert len(a) == len(b)
    for x, y in zip(a.binaries, b.binaries, strict=True):
        for name in fields or FIELDS:
            tolerance = 2e-9 if name == "gps_time" else rtol * max(1.0, abs(getattr(x, name)))
            assert abs(getattr(x, name) - getattr(y, name)) <= tolerance, (name, x, y)
