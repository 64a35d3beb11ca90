"""The injected population beside its VT (offline_iaas.search.population,
offline_iaas.search.injection_list): the default z_max lies beyond the demo network's horizon,
draws below the SNR cut are counted, and every VT carries the population's description."""

from __future__ import annotations

import dataclasses
import json
import math
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from offline_iaas.config import config_from_dict, load_config
from offline_iaas.config_sections import SynthConfig
from offline_iaas.data.synth import asd_path, design_asd, write_synthetic_dataset
from offline_iaas.search.injection_file import InjectionSet, write_injection_set
from offline_iaas.search.injection_list import read_campaign_injections
from offline_iaas.search.population import (
    POPULATION_KEYS,
    horizon_redshift,
    luminosity_distance_mpc,
    population_spec,
)
from offline_iaas.search.waveforms import BinaryParameters

START = 1262304000


def demo_config(tmp_path: Path):
    source = resources.files("offline_iaas.campaigns").joinpath("demo.toml")
    (tmp_path / "demo.toml").write_text(source.read_text())
    return load_config(tmp_path / "demo.toml")


def snr_by_lalsimulation(redshift: float, mass: float, spin: float, rate: float) -> float:
    """Optimal SNR of a face-on equal-mass binary overhead one design detector: lalsimulation
    called here, the ASD read from its file, numpy's FFT (none of the project's code)."""
    import lal
    import lalsimulation as ls
    from astropy.cosmology import Planck18

    distance = Planck18.luminosity_distance(redshift).to_value("Mpc")
    m = mass * (1 + redshift) * lal.MSUN_SI
    hp, _ = ls.SimInspiralTD(m, m, 0, 0, spin, 0, 0, spin, distance * 1e6 * lal.PC_SI, 0.0,
                             0.0, 0.0, 0.0, 0.0, 1 / rate, 20.0, 20.0, None,
                             ls.GetApproximantFromString("IMRPhenomD"))
    h = np.array(hp.data.data)
    n = 1 << int(np.ceil(np.log2(max(len(h), 4 * rate))))
    spectrum = np.fft.rfft(h, n) / rate
    f = np.fft.rfftfreq(n, 1 / rate)
    table = np.loadtxt(asd_path())
    keep = (f >= 20.0) & (f < rate / 2)
    asd = np.exp(np.interp(np.log(f[keep]), np.log(table[:, 0]), np.log(table[:, 1])))
    return float(np.sqrt(4 * np.sum(np.abs(spectrum[keep]) ** 2 / asd**2) * rate / n))


def test_the_default_z_max_reaches_beyond_the_demo_networks_horizon(tmp_path: Path) -> None:
    config = demo_config(tmp_path)
    spec = population_spec(config.synth)
    rate = config.synth.frame_sample_rate
    horizon = horizon_redshift(spec, design_asd, rate, detectors=2)
    assert horizon == pytest.approx(2.79, abs=0.01)
    # at the horizon the loudest binary has network SNR 8 (two optimal detectors)
    at = snr_by_lalsimulation(horizon, spec.mass_max_msun, spec.spin_max, rate) * math.sqrt(2)
    assert at == pytest.approx(8.0, rel=2e-3)
    assert snr_by_lalsimulation(1.02 * horizon, spec.mass_max_msun, spec.spin_max,
                                rate) * math.sqrt(2) < 7.9  # control: beyond it, quieter
    assert SynthConfig().redshift_max > horizon
    assert config.synth.redshift_max > horizon
    assert 0.4 < horizon  # the old default lay inside
    assert horizon_redshift(spec, design_asd, rate, detectors=1) < horizon


def test_the_population_attrs_are_its_description() -> None:
    spec = population_spec(SynthConfig())
    attrs = spec.attrs()
    assert set(attrs) <= set(POPULATION_KEYS)
    assert attrs["luminosity_distance_max_mpc"] == pytest.approx(
        float(luminosity_distance_mpc(spec.redshift_max)))
    for key in ("mass_distribution", "spin_distribution", "redshift_distribution"):
        assert attrs[key]


def tiny_config(tmp_path: Path, **synth):
    raw = {"data": {"frames": "frames", "channels": ["H1:GDS-CALIB_STRAIN",
                                                     "L1:GDS-CALIB_STRAIN"],
                    "start": START, "duration": 64, "sample_rate": 256},
           "model": {"repository": "repo"},
           "synth": {"file_duration": 16, "frame_sample_rate": 256, "injections": 3, "seed": 5,
                     **synth}}
    return config_from_dict(raw, tmp_path / "c.toml")


def test_draws_below_the_snr_cut_are_counted_not_injected(tmp_path: Path) -> None:
    summary = write_synthetic_dataset(tiny_config(tmp_path / "cut", network_snr_min=8.0))
    population = summary["population"]
    assert population["injected"] == 3 and population["network_snr_min"] == 8.0
    assert population["drawn"] > 3  # z_max 3: most draws are far below SNR 8
    # the cut is on the design-PSD SNR at each injection's own time (the strain on the frame
    # grid differs from the cut's by a sub-sample shift only)
    assert all(i["network_snr_design"] >= 8.0 * (1 - 1e-6) for i in summary["injections"])
    assert all(i["network_snr"] > 7.5 for i in summary["injections"])
    every = write_synthetic_dataset(tiny_config(tmp_path / "all", network_snr_min=0.0))
    assert every["population"]["drawn"] == 3
    assert min(i["network_snr"] for i in every["injections"]) < min(
        i["network_snr"] for i in summary["injections"])
    # the record beside the VT carries it, read back from synth.json and injections.h5
    for name in ("synth.json", "injections.h5"):
        record = read_campaign_injections(tmp_path / "cut" / "frames" / name).population
        assert (record["drawn"], record["injected"], record["listed"]) == (
            population["drawn"], 3, 3)
        assert record["approximant"] == "IMRPhenomD" and record["f_lower_hz"] == 20.0
        assert record["time_volume_gpc3"] == pytest.approx(population["time_volume_gpc3"])
        assert record["redshift_max"] == SynthConfig().redshift_max


def test_a_list_without_a_population_has_none(tmp_path: Path) -> None:
    binary = BinaryParameters(mass_1=30.0, mass_2=25.0, redshift=0.1, luminosity_distance=460.0,
                              inclination=0.3, polarization=0.2, ra=1.0, dec=0.5,
                              coalescence_phase=0.1, gps_time=START + 10.0)
    foreign = InjectionSet((binary,), "IMRPhenomD", 20.0, {"H1": (8.0,), "L1": (6.0,)})
    write_injection_set(tmp_path / "foreign.xml", foreign)
    assert read_campaign_injections(tmp_path / "foreign.xml").population is None
    (tmp_path / "list.json").write_text(json.dumps([{"gps_time": 1.0, "network_snr": 9.0}]))
    assert read_campaign_injections(tmp_path / "list.json").population is None
    # a partial description: what it says, None for the rest; the distance from z_max
    described = dataclasses.replace(foreign, attrs={"redshift_max": 0.5})
    write_injection_set(tmp_path / "partial.h5", described)
    record = read_campaign_injections(tmp_path / "partial.h5").population
    assert record["time_volume_gpc3"] is None and record["drawn"] is None
    assert record["luminosity_distance_max_mpc"] == pytest.approx(
        float(luminosity_distance_mpc(0.5)))
    assert record["approximant"] == "IMRPhenomD" and record["injected"] == 1
