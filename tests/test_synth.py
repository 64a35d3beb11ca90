"""Tests of the synthetic GWF dataset (offline_iaas.data.synth)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gwpy.io.gwf import get_channel_names
from gwpy.timeseries import TimeSeriesDict
from scipy import signal

from offline_iaas.config import CampaignConfig, SynthConfig, config_from_dict
from offline_iaas.data.injection_file import (
    InjectionSet,
    read_injection_list,
    read_injection_set,
    write_injection_set,
)
from offline_iaas.data.population import luminosity_distance_mpc
from offline_iaas.data.synth import design_asd, write_synthetic_dataset
from offline_iaas.data.waveforms import (
    BinaryParameters,
    detector_strain,
    light_travel_delay,
    polarizations,
)
from offline_iaas.errors import ConfigError

START = 1262304000
STRAIN = ["H1:GDS-CALIB_STRAIN", "L1:GDS-CALIB_STRAIN"]
WITNESSES = {ifo: [f"{ifo}:PEM-SYNTH_WITNESS_{i}" for i in range(2)] for ifo in ("H1", "L1")}
FIELDS = [f.name for f in dataclasses.fields(BinaryParameters)]


def make_config(tmp_path: Path, frames: str = "frames", **synth: Any) -> CampaignConfig:
    """3 files x 8 s at 256 Hz, two interferometers, two witnesses, two injections."""
    values = {
        "file_duration": 8,
        "frame_sample_rate": 256,
        "witnesses": 2,
        "injections": 2,
        "seed": 7,
        # every draw injected: the same binaries whatever the noise (the SNR cut:
        # tests/test_population.py)
        "network_snr_min": 0.0,
    }
    values.update(synth)
    raw = {
        "data": {
            "frames": frames,
            "channels": STRAIN,
            "start": START,
            "duration": 24,
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


def binary_of(inj: dict) -> BinaryParameters:
    return BinaryParameters(**{k: v for k, v in inj["parameters"].items() if k in FIELDS})


def strain_of(directory: Path, ifo: str) -> np.ndarray:
    return read_all(directory, ifo, [f"{ifo}:GDS-CALIB_STRAIN"])[0]


def expected_signal(summary: dict, ifo: str, n: int) -> np.ndarray:
    """Every recorded injection projected here with data/waveforms.py, on the frame grid."""
    out = np.zeros(n)
    wave = summary["injection_waveform"]
    for inj in summary["injections"]:
        params = binary_of(inj)
        waves = polarizations(params, wave["approximant"], 256.0, wave["f_lower_hz"])
        first, samples = detector_strain(params, waves, ifo, START)
        lo, hi = max(first, 0), min(first + len(samples), n)
        out[lo:hi] += samples[lo - first : hi - first]
    return out


def independent_snr(values: np.ndarray, level: float = 1.0) -> float:
    """Optimal SNR against level x the design ASD from 20 Hz, zero-padded to 32 s."""
    fs, n = 256, 32 * 256
    spectrum = np.fft.rfft(values, n=n) / fs
    freqs = np.fft.rfftfreq(n, 1 / fs)
    band = (freqs >= 20) & (freqs < fs / 2)
    return float(np.sqrt(4 * np.sum(np.abs(spectrum[band]) ** 2
                                    / (level * design_asd(freqs[band])) ** 2) / 32))


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
            assert rec["gps_time"] == pytest.approx(
                inj["gps_time"] + light_travel_delay(ifo, params.ra, params.dec, params.gps_time))
            assert abs(rec["time_offset"]) <= 0.0214  # the Earth's radius / c
        assert inj["network_snr"] == pytest.approx(
            np.hypot(inj["ifos"]["H1"]["snr"], inj["ifos"]["L1"]["snr"]))
    for ifo in ("H1", "L1"):
        diff = strain_of(Path(config.data.frames), ifo) - strain_of(quiet, ifo)
        expected = expected_signal(summary, ifo, len(diff))
        assert np.abs(expected).max() > 0
        np.testing.assert_allclose(diff, expected, rtol=0, atol=1e-9 * np.abs(expected).max())
        shifted = np.roll(expected, 1)  # control: one sample later does not match
        assert np.abs(diff - shifted).max() > 0.01 * np.abs(expected).max()
        for inj in injections:
            t = inj["ifos"][ifo]["gps_time"] - START
            window = diff[max(0, int((t - 8) * 256)) : int((t + 1) * 256)]
            assert independent_snr(window) == pytest.approx(inj["ifos"][ifo]["snr"], rel=0.01)
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
        assert written.snr[ifo] == tuple(inj["ifos"][ifo]["snr"] for inj in summary["injections"])
    assert written.attrs["redshift_max"] == SynthConfig().redshift_max
    assert written.attrs["seed"] == 7 and written.attrs["drawn"] == 2
    assert written.attrs["time_volume_gpc3"] == pytest.approx(
        summary["population"]["time_volume_gpc3"])


def test_snr_follows_the_noise_drift(dataset: tuple[CampaignConfig, dict], tmp_path: Path
                                     ) -> None:
    _, steady = dataset
    drifting = write_synthetic_dataset(make_config(tmp_path, noise_drift=3.0))
    for a, b in zip(steady["injections"], drifting["injections"], strict=True):
        assert a["parameters"] == b["parameters"]
        level = 1 + 2.0 * (b["ifos"]["H1"]["gps_time"] - START) / 24
        assert b["ifos"]["H1"]["snr"] == pytest.approx(a["ifos"]["H1"]["snr"] / level, rel=1e-6)
        assert b["ifos"]["H1"]["snr"] != pytest.approx(a["ifos"]["H1"]["snr"], rel=0.05)


@pytest.mark.parametrize("name", ["mine.h5", "mine.xml.gz"])
def test_a_users_injection_file_is_injected(
    tmp_path: Path, quiet: Path, name: str
) -> None:
    inside = BinaryParameters(
        mass_1=40.0, mass_2=32.0, redshift=0.05,
        luminosity_distance=float(luminosity_distance_mpc(0.05)), inclination=0.4,
        polarization=0.3, ra=1.0, dec=0.6, coalescence_phase=1.0, gps_time=START + 12.25,
        spin_1z=0.1)
    outside = dataclasses.replace(inside, gps_time=START + 40.0)
    write_injection_set(tmp_path / name, InjectionSet((inside, outside), "IMRPhenomD", 20.0))
    summary = write_synthetic_dataset(
        make_config(tmp_path, injection_file=str(tmp_path / name)))
    [inj] = summary["injections"]
    assert inj["gps_time"] == pytest.approx(START + 12.25, abs=2e-9)
    assert inj["parameters"]["mass_1"] == pytest.approx(40.0, rel=1e-6)
    diff = strain_of(tmp_path / "frames", "H1") - strain_of(quiet, "H1")
    expected = expected_signal(summary, "H1", len(diff))
    np.testing.assert_allclose(diff, expected, rtol=0, atol=1e-9 * np.abs(expected).max())
    assert independent_snr(diff) == pytest.approx(inj["ifos"]["H1"]["snr"], rel=0.01)
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
