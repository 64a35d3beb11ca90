"""Tests of the synthetic GWF dataset (offline_iaas.data.synth)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gwpy.io.gwf import get_channel_names
from gwpy.timeseries import TimeSeriesDict
from scipy import signal

from offline_iaas.config import CampaignConfig, config_from_dict
from offline_iaas.data.synth import design_asd, write_synthetic_dataset
from offline_iaas.errors import ConfigError

START = 1262304000
STRAIN = ["H1:GDS-CALIB_STRAIN", "L1:GDS-CALIB_STRAIN"]
WITNESSES = {ifo: [f"{ifo}:PEM-SYNTH_WITNESS_{i}" for i in range(2)] for ifo in ("H1", "L1")}


def make_config(tmp_path: Path, frames: str = "frames", **synth: Any) -> CampaignConfig:
    """3 files x 8 s at 256 Hz, two interferometers, two witnesses, two injections."""
    values = {
        "file_duration": 8,
        "frame_sample_rate": 256,
        "witnesses": 2,
        "injections": 2,
        "injection_snr": 20.0,
        "seed": 7,
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


def test_injections_recorded_and_present(
    dataset: tuple[CampaignConfig, dict], tmp_path: Path
) -> None:
    config, summary = dataset
    injections = summary["injections"]
    assert len(injections) == 2
    for inj in injections:
        assert START + 2 <= inj["gps_time"] <= START + 22
        for ifo in ("H1", "L1"):
            rec = inj["ifos"][ifo]
            assert abs(rec["gps_time"] - inj["gps_time"]) <= 0.010
            assert rec["snr"] == pytest.approx(20.0, rel=1e-6)
    write_synthetic_dataset(make_config(tmp_path, injections=0), tmp_path / "quiet")
    fs = 256
    for ifo in ("H1", "L1"):
        with_inj = read_all(Path(config.data.frames), ifo, [f"{ifo}:GDS-CALIB_STRAIN"])[0]
        quiet = read_all(tmp_path / "quiet", ifo, [f"{ifo}:GDS-CALIB_STRAIN"])[0]
        diff = with_inj - quiet
        times = START + np.arange(len(diff)) / fs
        near = np.zeros(len(diff), dtype=bool)
        for inj in injections:
            t_c = inj["ifos"][ifo]["gps_time"]
            near |= np.abs(times - t_c) <= 1.0 + 1.0 / fs
            window = np.abs(times - t_c) <= 1.0 + 1.0 / fs
            peak = times[window][np.argmax(np.abs(diff[window]))]
            assert abs(peak - t_c) < 0.2
            # independent SNR estimate against the design ASD, zero-padded to 8 s
            segment = diff[window]
            spectrum = np.fft.rfft(segment, n=8 * fs) / fs
            freqs = np.fft.rfftfreq(8 * fs, 1 / fs)
            snr2 = 4 * np.sum(np.abs(spectrum[1:]) ** 2 / design_asd(freqs[1:]) ** 2) / 8
            assert np.sqrt(snr2) == pytest.approx(20.0, rel=0.02)
        assert np.all(diff[~near] == 0)


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
