"""Training the demo networks: a fast smoke test and the pinned numerics proven on an emulated
other CPU (the full demo networks' physics: ``test_demo_physics.py``)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from offline_iaas.cli import main as cli_main
from offline_iaas.config import CampaignConfig, load_config
from offline_iaas.data.synth import write_synthetic_dataset
from offline_iaas.errors import ConfigError, OfflineIaasError
from offline_iaas.models.numerics import run_in_child
from offline_iaas.models.training import train_demo
from offline_iaas.models.weights import load_network
from offline_iaas.science.bbhnet.network import BBHnet
from offline_iaas.science.bbhnet.training import _allowed_starts, whiten_windows
from offline_iaas.science.deepclean.network import DeepClean
from offline_iaas.science.deepclean.settings import bandpass_sos, deepclean_settings
from offline_iaas.science.deepclean.training import bandpass
from tests.helpers import SMALL_CAMPAIGN, WITNESSES, captured_log


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> CampaignConfig:
    """64 s at 256 Hz, two detectors with two witnesses each, one injection."""
    tmp = tmp_path_factory.mktemp("training")
    path = tmp / "campaign.toml"
    path.write_text(SMALL_CAMPAIGN)
    config = load_config(path)
    write_synthetic_dataset(config)
    return config


TINY: dict[str, Any] = {
    "deepclean": {"epochs": 2, "seconds": 32.0, "windows_per_epoch": 64, "batch_size": 16},
    "bbhnet": {"epochs": 2, "seconds": 32.0, "windows_per_epoch": 64, "batch_size": 16,
               "width": 4, "depth": 2},
}
"""A few steps of each network on ``small``: the demo's code path, in seconds."""


@pytest.fixture(scope="module")
def pinned_run(
    small: CampaignConfig, tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict[str, Path], list[str], tuple[int, int]]:
    """``TINY`` trained under the pinned numerics (the default), its log lines, and this
    process's torch threads before and after."""
    threads_before = torch.get_num_threads()
    torch.set_num_threads(3)  # not the 2 the training child pins: a change would show
    try:
        with captured_log() as lines:
            paths = train_demo(small, tmp_path_factory.mktemp("pinned") / "weights", **TINY)
        threads_after = torch.get_num_threads()
    finally:
        torch.set_num_threads(threads_before)
    return paths, lines, (3, threads_after)


def test_train_demo_smoke(
    small: CampaignConfig, pinned_run: tuple[dict[str, Path], list[str], tuple[int, int]]
) -> None:
    paths, lines, (threads_before, threads_after) = pinned_run
    assert set(paths) == {"deepclean-H1", "deepclean-L1", "bbhnet", "summary"}
    # the pin is the training child's: the caller's torch keeps its own threads
    assert threads_after == threads_before
    summary = json.loads(paths["summary"].read_text())
    kernel = small.kernel_samples
    for name in ("deepclean-H1", "deepclean-L1"):
        report = summary["networks"][name]
        assert report["witness_channels"] == [f"{name[-2:]}:PEM-SYNTH_WITNESS_{i}" for i in (0, 1)]
        assert len(report["loss"]) == 2 and all(math.isfinite(x) for x in report["loss"])
        assert report["threads"] == 2
        model = load_network("deepclean", paths[name], {"witnesses": 2, "kernel_samples": kernel})
        assert isinstance(model, DeepClean)
        assert float(model.strain_std) == pytest.approx(report["strain_std"])
        with torch.no_grad():
            assert model(torch.zeros(3, 2, kernel)).shape == (3, kernel)
    report = summary["networks"]["bbhnet"]
    assert report["whitening_taps"] == 65 and len(report["psd"]) == 2
    model = load_network(
        "bbhnet", paths["bbhnet"], {"ifos": 2, "kernel_samples": kernel, "width": 4, "depth": 2}
    )
    assert isinstance(model, BBHnet) and model.whitening_taps == 65
    # the child's log lines come back through this process's loggers
    assert any("deepclean H1: epoch 2/2" in line for line in lines)
    assert any("bbhnet: epoch 2/2" in line for line in lines)


def _weights(paths: dict[str, Path]) -> dict[str, dict[str, torch.Tensor]]:
    return {name: torch.load(path) for name, path in paths.items() if name != "summary"}


def _differing(
    a: dict[str, dict[str, torch.Tensor]], b: dict[str, dict[str, torch.Tensor]]
) -> list[str]:
    """The tensors whose bits differ (``torch.equal``: a NaN is never equal)."""
    assert a.keys() == b.keys() and all(a[net].keys() == b[net].keys() for net in a)
    return [f"{net}.{k}" for net in a for k in a[net] if not torch.equal(a[net][k], b[net][k])]


def emulated_cpu() -> dict[str, str]:
    """Environment that makes every library that picks its code by the CPU take another path
    than this CPU's: ATen's AVX2 kernels (an AVX2-only CPU's, such as an older EPYC's), numpy
    without its AVX-512 kernels, oneDNN's AVX kernels (no FMA: no x86-64-v3 CPU's own choice,
    so the emulated CPU differs from this one whatever this one is), and MKL's AVX kernels
    (honoured on Intel CPUs; MKL on AMD ignores it)."""
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__  # numpy >= 2
    except ImportError:
        from numpy.core._multiarray_umath import __cpu_dispatch__
    return {
        "ATEN_CPU_CAPABILITY": "avx2",
        "NPY_DISABLE_CPU_FEATURES": " ".join(f for f in __cpu_dispatch__ if f.startswith("AVX512")),
        "ONEDNN_MAX_CPU_ISA": "AVX",
        "MKL_ENABLE_INSTRUCTIONS": "AVX",
    }


def _cpu_flags() -> set[str]:
    """This CPU's feature flags, as the kernel lists them (empty where it does not)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return set()
    return next((set(line.split(":", 1)[1].split()) for line in lines
                 if line.startswith("flags")), set())


@pytest.mark.slow  # three trainings in child processes: 15 s of CPU
@pytest.mark.skipif(not {"avx2", "fma"} <= _cpu_flags(),
                    reason="the pin holds on x86-64 CPUs with AVX2 and FMA only (numerics.py)")
def test_pinned_training_is_bit_identical_on_an_emulated_cpu(
    small: CampaignConfig, pinned_run: tuple[dict[str, Path], list[str], tuple[int, int]],
    tmp_path: Path,
) -> None:
    """The same seed and thread count train the same bits here and on an emulated other CPU
    under the pin; without it, the two CPUs train different networks (the negative control)."""
    there = {**os.environ, **emulated_cpu()}
    pinned_here = pinned_run[0]
    pinned_there = train_demo(small, tmp_path / "pinned-there", environment=there, **TINY)
    native_here = train_demo(small, tmp_path / "native-here", pinned=False, **TINY)
    native_there = train_demo(small, tmp_path / "native-there", pinned=False, environment=there,
                              **TINY)
    assert _differing(_weights(native_here), _weights(native_there)) != []
    assert _differing(_weights(pinned_here), _weights(pinned_there)) == []
    # and the pin changes what this CPU trains (it is not the machine's own choice)
    assert _differing(_weights(pinned_here), _weights(native_here)) != []
    numerics = {name: json.loads(paths["summary"].read_text())["numerics"] for name, paths in
                (("pinned_there", pinned_there), ("native_there", native_there))}
    assert numerics["pinned_there"]["holds"] and not numerics["pinned_there"]["mkldnn"]
    assert numerics["pinned_there"]["aten_capability"] == "AVX2"
    assert numerics["native_there"]["pin"] is None and numerics["native_there"]["mkldnn"]


def test_training_errors_in_the_child_reach_the_caller(
    small: CampaignConfig, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match="training needs at least 2.0 s of data"):
        train_demo(small, tmp_path / "weights", deepclean={"seconds": 1.0})
    assert not (tmp_path / "weights" / "deepclean-H1.pt").exists()


def test_a_child_that_dies_is_one_error_naming_it() -> None:
    with pytest.raises(OfflineIaasError, match="running os:_exit exited with code 3"):
        run_in_child("os:_exit", {"status": 3}, pinned=False)


def test_train_demo_command_reports_config_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert cli_main(["train-demo", str(tmp_path / "missing.toml")]) == 2
    assert "config file not found" in capsys.readouterr().err


def test_training_windows_avoid_the_datasets_injections() -> None:
    starts = _allowed_starts(1000, 100, 0.0, 10.0, exclude_gps=[50.0])
    ends = starts + 100
    # a window [t, t + 10 s) stays 4 s away from the injection at 50 s
    assert np.all((ends / 10 < 46) | (starts / 10 > 54))
    assert len(starts) > 0


def test_training_whitens_windows_as_the_network_does() -> None:
    """BBHnet trains on windows whitened outside it; the network's own convolution agrees."""
    rng = np.random.default_rng(5)
    taps = rng.normal(size=(2, 65))
    windows = (rng.normal(size=(3, 2, 256)) * 1e-21).astype(np.float32)
    network = BBHnet(2, taps, 1e21, width=4, depth=2)
    with torch.no_grad():
        inside = network.whiten(torch.as_tensor(windows)).numpy()
    outside = whiten_windows(windows, taps, 1e21)
    assert outside.shape == inside.shape == (3, 2, 192) and np.all(np.isfinite(outside))
    scale = np.max(np.abs(inside))
    np.testing.assert_allclose(outside, inside, rtol=0, atol=1e-5 * scale)
    late = whiten_windows(np.roll(windows, 1, axis=-1), taps, 1e21)  # one sample late
    assert np.max(np.abs(late - inside)) > 0.1 * scale


DEEPCLEAN = ['model.mode="deepclean"', f"data.witnesses={WITNESSES}"]


def test_bandpass_is_zero_phase_and_the_merges_band(small_config_file: Path) -> None:
    """Training's target and the evaluation band-pass as the merge does ([deepclean])."""
    config = load_config(small_config_file, DEEPCLEAN)
    rate = config.data.sample_rate
    t = np.arange(int(16 * rate)) / rate
    line, other = np.sin(2 * np.pi * 60 * t), np.sin(2 * np.pi * 20 * t)
    middle = slice(int(4 * rate), int(12 * rate))
    out = bandpass(line + other, bandpass_sos(deepclean_settings(config), rate))
    np.testing.assert_allclose(out[middle], line[middle], atol=1e-3)
    # another [deepclean] band in the config moves the band-pass with it
    moved = load_config(small_config_file, [*DEEPCLEAN, "deepclean.band_low_hz=15",
                                            "deepclean.band_high_hz=25"])
    out = bandpass(line + other, bandpass_sos(deepclean_settings(moved), rate))
    np.testing.assert_allclose(out[middle], other[middle], atol=1e-3)
