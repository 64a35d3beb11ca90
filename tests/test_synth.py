"""Tests of the synthetic GWF dataset (offline_iaas.data.synth)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gwpy.io.gwf import get_channel_names
from gwpy.timeseries import TimeSeries, TimeSeriesDict
from scipy import signal

from offline_iaas.config import CampaignConfig, config_from_dict
from offline_iaas.data.synth import design_asd, write_synthetic_dataset
from offline_iaas.errors import ConfigError
from offline_iaas.search.draw_injections import psd_span
from offline_iaas.search.injection_file import (
    InjectionSet,
    read_injection_list,
    read_injection_set,
    write_injection_set,
)
from offline_iaas.search.population import luminosity_distance_mpc
from offline_iaas.search.waveforms import (
    BinaryParameters,
    detector_strain,
    median_inverse_bias,
    polarizations,
)
from tests.test_waveforms import delay_by_hand

START = 1262304000
STRAIN = ["H1:GDS-CALIB_STRAIN", "L1:GDS-CALIB_STRAIN"]
WITNESSES = {ifo: [f"{ifo}:PEM-SYNTH_WITNESS_{i}" for i in range(2)] for ifo in ("H1", "L1")}
FIELDS = [f.name for f in dataclasses.fields(BinaryParameters)]


def make_config(tmp_path: Path, frames: str = "frames", duration: float = 24,
                **synth: Any) -> CampaignConfig:
    """3 files x 8 s at 256 Hz (``duration``), two interferometers, two witnesses, two
    injections."""
    values = {
        "file_duration": 8,
        "frame_sample_rate": 256,
        "witnesses": 2,
        "injections": 2,
        "seed": 7,
        # the nearby population these checks were written for, every draw injected (the
        # default z_max and SNR cut: tests/test_population.py)
        "redshift_max": 0.4,
        "network_snr_min": 0.0,
    }
    values.update(synth)
    raw = {
        "data": {
            "frames": frames,
            "channels": STRAIN,
            "start": START,
            "duration": duration,
            "sample_rate": 256,
        },
        "model": {"repository": "repo"},
        "synth": values,
    }
    return config_from_dict(raw, tmp_path / "c.toml")


def read_all(directory: Path, ifo: str, channels: list[str]) -> np.ndarray:
    paths = sorted(str(p) for p in directory.glob(f"{ifo[0]}-{ifo}_*.gwf"))
    data = TimeSeriesDict.read(paths, channels, start=START, end=START + 24, format="gwf")
    return np.array([data[ch].value for ch in channels])


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[CampaignConfig, dict]:
    tmp = tmp_path_factory.mktemp("synth")
    config = make_config(tmp)
    return config, write_synthetic_dataset(config)


def test_file_names_and_cache(dataset: tuple[CampaignConfig, dict]) -> None:
    config, summary = dataset
    out = Path(config.data.frames)
    names = sorted(p.name for p in out.glob("*.gwf"))
    expected = sorted(
        f"{ifo[0]}-{ifo}_SYNTH-{START + 8 * i}-8.gwf" for ifo in ("H1", "L1") for i in range(3)
    )
    assert names == expected
    lines = (out / "frames.lcf").read_text().splitlines()
    assert len(lines) == 6
    assert (
        lines[0] == f"H H1_SYNTH {START} 8 file://localhost{out.resolve()}/H-H1_SYNTH-{START}-8.gwf"
    )
    assert lines[1].startswith(f"L L1_SYNTH {START} 8 file://localhost/")
    assert [int(line.split()[2]) for line in lines] == sorted(int(x.split()[2]) for x in lines)
    assert len(summary["files"]) == 6
    assert summary["directory"] == str(out.resolve())


def test_summary_json_matches_return(dataset: tuple[CampaignConfig, dict]) -> None:
    config, summary = dataset
    on_disk = json.loads((Path(config.data.frames) / "synth.json").read_text())
    assert on_disk == json.loads(json.dumps(summary))
    assert summary["strain_channels"] == STRAIN
    assert summary["witness_channels"] == WITNESSES["H1"] + WITNESSES["L1"]
    coupling = summary["coupling"]
    assert "w0 + w0 * w1" in coupling["formula"]
    assert coupling["witness_coupling"] == 0.5
    assert coupling["line_scale"] == pytest.approx(100 * design_asd(np.array([60.0]))[0])


def test_frames_read_back_with_gwpy(dataset: tuple[CampaignConfig, dict]) -> None:
    config, summary = dataset
    for entry in summary["files"]:
        ifo = entry["ifo"]
        channels = [f"{ifo}:GDS-CALIB_STRAIN"] + WITNESSES[ifo]
        assert sorted(get_channel_names(entry["path"])) == sorted(channels)
        data = TimeSeriesDict.read(
            entry["path"],
            channels,
            start=entry["gps_start"],
            end=entry["gps_start"] + 8,
            format="gwf",
        )
        for ch in channels:
            ts = data[ch]
            assert ts.sample_rate.value == 256
            assert ts.t0.value == entry["gps_start"]
            assert ts.dtype == np.float64
            assert len(ts) == 8 * 256
            assert np.all(np.isfinite(ts.value))


def test_no_seam_split_files_equal_one_long_file(
    dataset: tuple[CampaignConfig, dict], tmp_path: Path
) -> None:
    config, _ = dataset
    long = write_synthetic_dataset(make_config(tmp_path, file_duration=24))
    assert len(long["files"]) == 2
    for ifo in ("H1", "L1"):
        channels = [f"{ifo}:GDS-CALIB_STRAIN"] + WITNESSES[ifo]
        split = read_all(Path(config.data.frames), ifo, channels)
        single = read_all(tmp_path / "frames", ifo, channels)
        np.testing.assert_array_equal(split, single)


def test_deterministic_for_a_seed(dataset: tuple[CampaignConfig, dict], tmp_path: Path) -> None:
    config, summary = dataset
    again = write_synthetic_dataset(make_config(tmp_path), tmp_path / "again")
    channels = ["H1:GDS-CALIB_STRAIN"] + WITNESSES["H1"]
    first = read_all(Path(config.data.frames), "H1", channels)
    np.testing.assert_array_equal(first, read_all(tmp_path / "again", "H1", channels))
    assert again["injections"] == summary["injections"]
    write_synthetic_dataset(make_config(tmp_path, seed=8), tmp_path / "other")
    other = read_all(tmp_path / "other", "H1", channels)
    assert np.abs(first[0] - other[0]).max() > 0.1 * np.std(first[0])


def test_coupling_follows_the_recorded_formula(
    dataset: tuple[CampaignConfig, dict], tmp_path: Path
) -> None:
    config, summary = dataset
    write_synthetic_dataset(make_config(tmp_path, witness_coupling=0.0), tmp_path / "clean")
    scale = summary["coupling"]["witness_coupling"] * summary["coupling"]["line_scale"]
    for ifo in ("H1", "L1"):
        channels = [f"{ifo}:GDS-CALIB_STRAIN"] + WITNESSES[ifo]
        coupled = read_all(Path(config.data.frames), ifo, channels)
        clean = read_all(tmp_path / "clean", ifo, channels)
        np.testing.assert_array_equal(coupled[1:], clean[1:])  # same witnesses
        w0, w1 = coupled[1], coupled[2]
        expected = scale * (w0 + w0 * w1)
        np.testing.assert_allclose(
            coupled[0] - clean[0], expected, rtol=0, atol=1e-9 * np.abs(expected).max()
        )
        # observed 1.1e-14 of the largest; control: the witnesses one sample later (1.3x
        # the largest off) fail the same comparison
        later = scale * (np.roll(w0, 1) + np.roll(w0, 1) * np.roll(w1, 1))
        assert not np.allclose(coupled[0] - clean[0], later, rtol=0,
                               atol=1e-9 * np.abs(expected).max())


def binary_of(inj: dict) -> BinaryParameters:
    return BinaryParameters(**{k: v for k, v in inj["parameters"].items() if k in FIELDS})


def strain_of(directory: Path, ifo: str) -> np.ndarray:
    return read_all(directory, ifo, [f"{ifo}:GDS-CALIB_STRAIN"])[0]


def expected_signal(summary: dict, ifo: str, n: int) -> np.ndarray:
    """Every recorded injection projected here with search/waveforms.py, on the frame grid."""
    out = np.zeros(n)
    wave = summary["injection_waveform"]
    for inj in summary["injections"]:
        params = binary_of(inj)
        waves = polarizations(params, wave["approximant"], 256.0, wave["f_lower_hz"])
        first, samples = detector_strain(params, waves, ifo, START)
        lo, hi = max(first, 0), min(first + len(samples), n)
        out[lo:hi] += samples[lo - first : hi - first]
    return out


def independent_snr(values: np.ndarray, psd: Any = None) -> float:
    """Optimal SNR from 20 Hz, zero-padded to 32 s, against ``psd(f)`` (default the design
    ASD squared)."""
    fs, n = 256, 32 * 256
    spectrum = np.fft.rfft(values, n=n) / fs
    freqs = np.fft.rfftfreq(n, 1 / fs)
    band = (freqs >= 20) & (freqs < fs / 2)
    noise = design_asd(freqs[band]) ** 2 if psd is None else psd(freqs[band])
    return float(np.sqrt(4 * np.sum(np.abs(spectrum[band]) ** 2 / noise) / 32))


def measured_psd(directory: Path, ifo: str, rec: dict) -> Any:
    """The PSD of the frames over ``rec["psd_span"]`` from its definition: 4 s segments every
    2 s, those touching a span of ``rec["psd_excluded"]`` left out, each mean-removed, Hann
    windowed, one-sided periodogram; their median over the median's bias; each frequency
    taking its nearest 0.25 Hz bin, times ``E[S/S^]`` of that median (``median_inverse_bias``,
    checked against a Monte Carlo in test_waveforms.py) so that 1/PSD is unbiased. The
    frames read with gwpy."""
    lo, hi = rec["psd_span"]
    paths = sorted(str(p) for p in directory.glob(f"{ifo[0]}-{ifo}_*.gwf"))
    data = TimeSeries.read(paths, f"{ifo}:GDS-CALIB_STRAIN", start=lo, end=hi).value
    n, fs = 1024, 256.0
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)
    periodograms = []
    for first in range(0, len(data) - n + 1, n // 2):
        start, end = lo + first / fs, lo + (first + n) / fs
        if any(a < end and start < b for a, b in rec["psd_excluded"]):
            continue
        x = data[first : first + n]
        power = np.abs(np.fft.rfft((x - x.mean()) * window)) ** 2 / (fs * np.sum(window**2))
        power[1:-1] *= 2
        periodograms.append(power)
    m = len(periodograms) if len(periodograms) % 2 else len(periodograms) - 1
    bias = sum((-1) ** (k + 1) / k for k in range(1, m + 1))
    psd = np.median(periodograms, axis=0) / bias * median_inverse_bias(len(periodograms))
    return lambda f: psd[np.minimum(np.round(np.asarray(f) * n / fs).astype(int), n // 2)]


@pytest.fixture(scope="module")
def quiet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The dataset without injections."""
    tmp = tmp_path_factory.mktemp("quiet")
    write_synthetic_dataset(make_config(tmp, injections=0), tmp / "quiet")
    return tmp / "quiet"


def test_injections_are_the_recorded_binaries_projected(
    dataset: tuple[CampaignConfig, dict], quiet: Path
) -> None:
    config, summary = dataset
    injections = summary["injections"]
    assert len(injections) == 2
    assert summary["injection_waveform"]["approximant"] == "IMRPhenomD"
    for inj in injections:
        params = binary_of(inj)
        assert params.gps_time == inj["gps_time"]
        assert inj["parameters"]["chirp_mass"] == pytest.approx(params.chirp_mass)
        waves = polarizations(params, "IMRPhenomD", 256.0, 20.0)
        # the whole waveform lies in the span
        assert START + waves.seconds_before < inj["gps_time"] < START + 24 - waves.seconds_after
        for ifo in ("H1", "L1"):
            rec = inj["ifos"][ifo]
            # the arrival: geocentre time plus the delay computed by hand (lal's vertex
            # positions, -r.n/c), to a microsecond: GPS times are ~1.26e9, no relative slack
            arrival = inj["gps_time"] + delay_by_hand(ifo, params.ra, params.dec,
                                                      params.gps_time)
            assert rec["gps_time"] == pytest.approx(arrival, rel=0, abs=1e-6)
            # control: the arrival one sample (1/256 s) later does not pass
            assert rec["gps_time"] != pytest.approx(arrival + 1 / 256, rel=0, abs=1e-6)
            assert abs(rec["time_offset"]) <= 0.0214  # the Earth's radius / c
        for kind in ("snr", "snr_design"):
            assert inj[f"network_{kind}"] == pytest.approx(
                np.hypot(inj["ifos"]["H1"][kind], inj["ifos"]["L1"][kind]))
    for ifo in ("H1", "L1"):
        diff = strain_of(Path(config.data.frames), ifo) - strain_of(quiet, ifo)
        expected = expected_signal(summary, ifo, len(diff))
        assert np.abs(expected).max() > 0
        np.testing.assert_allclose(diff, expected, rtol=0, atol=1e-9 * np.abs(expected).max())
        shifted = np.roll(expected, 1)  # control: one sample later does not match
        assert np.abs(diff - shifted).max() > 0.01 * np.abs(expected).max()
        for inj in injections:
            rec = inj["ifos"][ifo]
            t = rec["gps_time"] - START
            window = diff[max(0, int((t - 8) * 256)) : int((t + 1) * 256)]
            assert independent_snr(window) == pytest.approx(rec["snr_design"], rel=0.01)
            # the PSD measured from the frames: the 24 s span is shorter than 64 s, all of it;
            # 3 of its 11 segments are clear of the two injections, too few: all are used
            assert rec["psd_span"] == [START, START + 24]
            assert (rec["psd_excluded"], rec["psd_segments"]) == ([], 11)
            measured = measured_psd(Path(config.data.frames), ifo, rec)
            assert independent_snr(window, measured) == pytest.approx(rec["snr"], rel=0.005)
            assert rec["snr_design"] != pytest.approx(rec["snr"], rel=0.01)  # control
    listed, volume = read_injection_list(Path(config.data.frames) / "synth.json")
    assert [(i.gps_time, i.network_snr, i.chirp_mass, i.distance_mpc) for i in listed] == [
        (inj["gps_time"], inj["network_snr"], inj["parameters"]["chirp_mass"],
         inj["parameters"]["luminosity_distance"]) for inj in injections]
    assert volume == summary["population"]["time_volume_gpc3"] > 0


def test_injection_set_file_holds_the_injections(dataset: tuple[CampaignConfig, dict]) -> None:
    config, summary = dataset
    assert summary["injection_file"] == str(Path(config.data.frames).resolve() / "injections.h5")
    written = read_injection_set(Path(summary["injection_file"]))
    assert [dataclasses.asdict(b) for b in written.binaries] == [
        {k: v for k, v in inj["parameters"].items() if k in FIELDS}
        for inj in summary["injections"]]
    for ifo in ("H1", "L1"):
        for kind in ("snr", "snr_design"):
            assert getattr(written, kind)[ifo] == tuple(
                inj["ifos"][ifo][kind] for inj in summary["injections"])
    assert "median Welch" in written.snr_psd["snr"] and "H1:GDS-CALIB_STRAIN" in (
        written.snr_psd["snr"])
    assert "LIGO-T1800044-v5" in written.snr_psd["snr_design"]
    assert summary["injection_waveform"]["snr_psd"] == written.snr_psd
    assert written.attrs["redshift_max"] == 0.4
    assert written.attrs["seed"] == 7 and written.attrs["drawn"] == 2
    assert written.attrs["time_volume_gpc3"] == pytest.approx(
        summary["population"]["time_volume_gpc3"])


def test_measured_snr_follows_the_noise_drift(dataset: tuple[CampaignConfig, dict],
                                              tmp_path: Path) -> None:
    """With the noise's amplitude growing from 1 to 3 over the 24 s, the PSD measured over
    them is about 2^2 that of the steady noise (the median segment's level), so the measured
    SNRs fall to about a half (0.53-0.56 over seeds 7-10: the median over segments of
    unequal level, and the line, which does not drift); the design SNRs do not change."""
    _, steady = dataset
    drifting = write_synthetic_dataset(make_config(tmp_path, noise_drift=3.0))
    for a, b in zip(steady["injections"], drifting["injections"], strict=True):
        assert a["parameters"] == b["parameters"]
        for ifo in ("H1", "L1"):
            assert b["ifos"][ifo]["snr_design"] == a["ifos"][ifo]["snr_design"]
            assert 0.45 < b["ifos"][ifo]["snr"] / a["ifos"][ifo]["snr"] < 0.62


def test_measured_psd_is_the_noise_around_each_injection(tmp_path: Path) -> None:
    """160 s with the noise growing from 1 to 2: each injection's PSD is measured over the
    64 s around it, its own samples left out (the PSD from its definition over the recorded
    span and segments agrees), so its measured SNR is its design SNR over the noise's level
    there (0.94-0.98 of it over seeds 7-11 with the 1/PSD bias corrected: the level grows
    by 40 % across the 64 s), not over the span's (16-19 % off)."""
    config = make_config(tmp_path, duration=160, file_duration=32, noise_drift=2.0)
    summary = write_synthetic_dataset(config)
    levels = []
    for inj in summary["injections"]:
        for ifo in ("H1", "L1"):
            rec = inj["ifos"][ifo]
            lo, hi = rec["psd_span"]
            assert hi - lo == 64 and lo < rec["gps_time"] < hi
            assert abs((lo + hi) / 2 - rec["gps_time"]) <= 1 / 256
            # the injection's own samples (the one in these 64 s) are left out: 4 of the
            # 31 segments touch its ~3 s
            [(a, b)] = rec["psd_excluded"]
            assert a < rec["gps_time"] < b < a + 4 and rec["psd_segments"] == 27
            signal_ = expected_signal(summary, ifo, 160 * 256)
            t = rec["gps_time"] - START
            window = signal_[int((t - 8) * 256) : int((t + 1) * 256)]
            measured = measured_psd(Path(config.data.frames), ifo, rec)
            assert independent_snr(window, measured) == pytest.approx(rec["snr"], rel=0.005)
            level = 1 + (rec["gps_time"] - START) / 160
            assert rec["snr"] * level / rec["snr_design"] == pytest.approx(0.96, abs=0.05)
            levels.append(level)
    assert max(levels) / min(levels) > 1.3  # the two injections see different noise


def test_psd_span_is_centred_on_the_arrival_inside_the_data() -> None:
    assert psd_span(START + 10.3, START, START + 24, 256.0) == (START, START + 24)
    end = START + 1000
    assert psd_span(START + 500.5, START, end, 256.0) == (START + 468.5, START + 532.5)
    assert psd_span(START + 10.0, START, end, 256.0) == (START, START + 64)
    assert psd_span(START + 990.0, START, end, 256.0) == (end - 64, end)
    lo, _ = psd_span(START + 500.0 + 1e-4, START, end, 256.0)  # on the sample grid
    assert (lo - START) * 256 == int((lo - START) * 256)


@pytest.mark.parametrize("name, layout", [("mine.h5", "offline-iaas"),
                                          ("mine.xml.gz", "offline-iaas"),
                                          ("aframe.hdf5", "aframe")])
def test_a_users_injection_file_is_injected(
    tmp_path: Path, quiet: Path, name: str, layout: str
) -> None:
    inside = BinaryParameters(
        mass_1=40.0, mass_2=32.0, redshift=0.05,
        luminosity_distance=float(luminosity_distance_mpc(0.05)), inclination=0.4,
        polarization=0.3, ra=1.0, dec=0.6, coalescence_phase=1.0, gps_time=START + 12.25,
        spin_1z=0.1)
    outside = dataclasses.replace(inside, gps_time=START + 40.0)
    write_injection_set(tmp_path / name, InjectionSet((inside, outside), "IMRPhenomD", 20.0),
                        layout=layout)
    summary = write_synthetic_dataset(
        make_config(tmp_path, injection_file=str(tmp_path / name)))
    [inj] = summary["injections"]
    assert inj["gps_time"] == pytest.approx(START + 12.25, abs=2e-9)
    assert inj["parameters"]["mass_1_detector"] == pytest.approx(40.0 * 1.05, rel=1e-6)
    assert inj["parameters"]["luminosity_distance"] == pytest.approx(
        inside.luminosity_distance, rel=1e-6)
    diff = strain_of(tmp_path / "frames", "H1") - strain_of(quiet, "H1")
    expected = expected_signal(summary, "H1", len(diff))
    np.testing.assert_allclose(diff, expected, rtol=0, atol=1e-9 * np.abs(expected).max())
    late = np.roll(expected, 1)  # the control: a sample late
    assert not np.allclose(diff, late, rtol=0, atol=1e-9 * np.abs(expected).max())
    assert independent_snr(diff) == pytest.approx(inj["ifos"]["H1"]["snr_design"], rel=0.01)
    assert inj["network_snr"] > 20  # 230 Mpc


def test_bad_population_settings_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="'synth.approximant'.*'TaylorT9'"):
        write_synthetic_dataset(make_config(tmp_path, approximant="TaylorT9"))
    with pytest.raises(ConfigError, match="'synth.mass_max_msun'"):
        make_config(tmp_path, mass_min_msun=30.0, mass_max_msun=20.0)
    with pytest.raises(ConfigError, match="'synth.frame_sample_rate'"):
        write_synthetic_dataset(make_config(tmp_path, f_lower_hz=130.0))


def test_noise_follows_the_design_asd(tmp_path: Path) -> None:
    config = make_config(tmp_path, injections=0, witness_coupling=0.0, frame_sample_rate=512)
    write_synthetic_dataset(config)
    strain = read_all(tmp_path / "frames", "H1", ["H1:GDS-CALIB_STRAIN"])[0]
    freqs, psd = signal.welch(strain, fs=512, nperseg=1024)
    band = (freqs >= 20) & (freqs <= 200)
    ratio = psd[band] / design_asd(freqs[band]) ** 2
    assert 0.8 < np.median(ratio) < 1.25


def test_coupled_line_stands_above_the_noise(dataset: tuple[CampaignConfig, dict]) -> None:
    config, _ = dataset
    strain = read_all(Path(config.data.frames), "H1", ["H1:GDS-CALIB_STRAIN"])[0]
    freqs, psd = signal.welch(strain, fs=256, nperseg=256)
    line = np.argmin(np.abs(freqs - 60.0))
    assert psd[line] / design_asd(freqs[line : line + 1])[0] ** 2 > 100


def test_cache_path_in_config_puts_frames_next_to_it(tmp_path: Path) -> None:
    config = make_config(tmp_path, frames="data/frames.lcf", injections=0)
    summary = write_synthetic_dataset(config)
    assert summary["directory"] == str((tmp_path / "data").resolve())
    assert (tmp_path / "data" / "frames.lcf").is_file()
    assert len(list((tmp_path / "data").glob("*.gwf"))) == 6
    config = make_config(tmp_path, frames="ffl/x.ffl", injections=0)
    write_synthetic_dataset(config)
    first = (tmp_path / "ffl" / "x.ffl").read_text().splitlines()[0].split()
    assert first[0].endswith(f"H-H1_SYNTH-{START}-8.gwf")
    assert first[1:] == [str(START), "8", "0", "0"]


def test_rewrite_removes_stale_files(tmp_path: Path) -> None:
    write_synthetic_dataset(make_config(tmp_path, injections=0))
    write_synthetic_dataset(make_config(tmp_path, injections=0, file_duration=12))
    names = sorted(p.name for p in (tmp_path / "frames").glob("*.gwf"))
    assert names == sorted(
        f"{ifo[0]}-{ifo}_SYNTH-{START + 12 * i}-12.gwf" for ifo in ("H1", "L1") for i in range(2)
    )
    assert not list((tmp_path / "frames").glob(".*"))  # no temporary files left


def test_bad_synth_settings_raise_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="synth.file_duration"):
        write_synthetic_dataset(make_config(tmp_path, file_duration=8.5))
    raw = {
        "data": {
            "frames": "f",
            "channels": STRAIN,
            "start": START,
            "duration": 3,
            "sample_rate": 256,
        },
        "model": {"repository": "repo"},
        "synth": {"file_duration": 8, "frame_sample_rate": 256, "injections": 1},
    }
    with pytest.raises(ConfigError, match="synth.injections"):
        write_synthetic_dataset(config_from_dict(raw, tmp_path / "c.toml"))
