"""BBHnet's whitening that follows the data (issue #17): ``search.whitening = "rolling"``.

The served model whitens each window with the Welch PSD of the data just before it
(``stateful.RollingWhitening``), and the graph is exported without its fixed FIR. Checked: the
whitening's output is unit-variance white noise where the input is Gaussian, whatever its
level; real campaigns (one tritonserver, two clients) equal their reference and the
independent oracle, which whitens with scipy from the definition; and on data whose noise
level doubles over the span, the rolling background stays put where the fixed one does not.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import numpy as np
import pytest

from offline_iaas.config import load_config
from offline_iaas.data.synth import write_synthetic_dataset
from offline_iaas.errors import ConfigError, ModelError, exit_code
from offline_iaas.merge.output import compare_outputs
from offline_iaas.merge.reference import run_reference
from offline_iaas.physics import whitening_band
from offline_iaas.repository.backend.stateful import RollingWhitening
from offline_iaas.repository.export import export_repository
from offline_iaas.repository.served import check_repository
from tests.error_catalogue import documented, documented_refusals
from tests.helpers import SMALL_CAMPAIGN, WITNESSES, run_dag, untrained_weights
from tests.oracle import read_series, run_problems

TOLERANCE = 1e-4
RATE, KERNEL, STRIDE = 256, 256, 64


def whitener(psd_samples: int = 8192, fft_samples: int = 256, crop: int = 32
             ) -> RollingWhitening:
    band = whitening_band(np.fft.rfftfreq(KERNEL, 1 / RATE), 20.0, 0.8 * RATE / 2)
    return RollingWhitening(2, KERNEL, STRIDE, psd_samples, fft_samples, crop, RATE,
                            band.tolist())


@pytest.mark.parametrize("level", [1e-21, 1.0, 3e3])
def test_rolling_whitening_makes_gaussian_noise_unit_variance_whatever_its_level(
        level: float) -> None:
    rng = np.random.default_rng(4)
    # coloured noise: white through a first-order low-pass, louder at low frequencies
    white = rng.standard_normal((2, 600 * STRIDE))
    coloured = np.copy(white)
    for i in range(1, white.shape[1]):
        coloured[:, i] = 0.9 * coloured[:, i - 1] + white[:, i]
    windows = whitener().update((level * coloured).astype(np.float32))
    valid = windows[(8192 + KERNEL) // STRIDE :]  # the PSD from the stream's own data
    assert valid.shape[2] == KERNEL - 32
    # a PSD estimated from 63 Welch segments divides by a slightly low ASD as often as by a
    # slightly high one: the variance comes out a little above 1 (1.02 here)
    assert np.std(valid) == pytest.approx(1.0, rel=0.03)
    # white in the band: equal power below and above 60 Hz (band 30-92 Hz at full gain)
    spectrum = np.abs(np.fft.rfft(valid, axis=-1)) ** 2
    freqs = np.fft.rfftfreq(valid.shape[2], 1 / RATE)
    low = spectrum[..., (freqs > 32) & (freqs < 60)].mean()
    high = spectrum[..., (freqs > 60) & (freqs < 88)].mean()
    assert low / high == pytest.approx(1.0, rel=0.1)
    # negative control: the unwhitened windows are far from white
    raw = np.abs(np.fft.rfft(coloured[:, -KERNEL:], axis=-1)) ** 2
    rf = np.fft.rfftfreq(KERNEL, 1 / RATE)
    assert raw[:, (rf > 32) & (rf < 60)].mean() / raw[:, (rf > 60) & (rf < 88)].mean() > 1.5


def test_rolling_whitening_needs_a_bbhnet_mode_and_whole_even_samples(tmp_path: Path) -> None:
    (tmp_path / "campaign.toml").write_text(SMALL_CAMPAIGN)
    rolling = 'search.whitening="rolling"'
    refusals = {}
    with pytest.raises(ConfigError, match="search.whitening.*BBHnet "
                       "mode") as refusals["rolling-whitening-outside-bbhnet"]:
        load_config(tmp_path / "campaign.toml", [rolling])  # classifier
    bbhnet = ['model.mode="bbhnet"', rolling]
    with pytest.raises(ConfigError, match="search.whitening.*'fixed' or 'rolling'"):
        load_config(tmp_path / "campaign.toml", ['model.mode="bbhnet"', 'search.whitening="x"'])
    with pytest.raises(ConfigError, match="search.psd_seconds.*two Welch "
                       "segments") as refusals["rolling-whitening-psd-too-short"]:
        load_config(tmp_path / "campaign.toml", [*bbhnet, "search.psd_seconds=2",
                                                 "search.psd_fftlength=2"])
    with pytest.raises(ConfigError, match="search.psd_fftlength."
                       "*even") as refusals["rolling-whitening-odd-fft"]:
        load_config(tmp_path / "campaign.toml", [*bbhnet, "search.psd_fftlength=0.1"])
    with pytest.raises(ConfigError, match="whitening_crop_seconds."
                       "*shorter") as refusals["rolling-whitening-crop-too-long"]:
        load_config(tmp_path / "campaign.toml", [*bbhnet, "search.whitening_crop_seconds=1"])
    documented_refusals(refusals, {tmp_path / "campaign.toml": "C"})
    config = load_config(tmp_path / "campaign.toml", [*bbhnet, "search.psd_seconds=8"])
    assert config.warmup_windows == 3 + 8 * 4  # the PSD's 8 s at 4 windows per second


def test_rolling_whitening_refuses_a_graph_that_keeps_its_own_filter(tmp_path: Path) -> None:
    import torch

    (tmp_path / "campaign.toml").write_text(SMALL_CAMPAIGN)
    weights = untrained_weights(tmp_path / "weights")
    network = torch.jit.trace(_bbhnet_module(weights), torch.zeros(2, 2, 256))
    scripted = tmp_path / "scripted"
    scripted.mkdir()
    torch.jit.save(network, scripted / "bbhnet.ts")
    config = load_config(tmp_path / "campaign.toml", [
        'model.mode="bbhnet"', 'search.whitening="rolling"',
        f'model.repository="{tmp_path / "repo"}"'])
    with pytest.raises(ModelError, match="needs its weights as a state_dict") as graph:
        export_repository(config, scripted)
    with pytest.raises(ModelError, match="steps of the fused model") as ensemble:
        export_repository(config, weights, ensemble=True)
    for row, caught in (("rolling-whitening-graph-weights", graph),
                        ("ensemble-with-rolling-whitening", ensemble)):
        documented(row, str(caught.value), {scripted: "W", weights: "W", tmp_path / "repo": "R"},
                   exit_code=exit_code(ModelError))
    assert not (tmp_path / "repo").exists()


def _bbhnet_module(weights: Path):
    import torch

    from offline_iaas.models.weights import build_network

    network = build_network("bbhnet", {"ifos": 2}, whitening_taps=33)
    network.load_state_dict(torch.load(weights / "bbhnet.pt"))
    return network.eval()


# ---- real campaigns over a noise level that doubles --------------------------------------------

SLIDES = 4
ROLLING = ['search.whitening="rolling"', "search.psd_seconds=8", "search.psd_fftlength=1"]


@pytest.fixture(scope="module")
def drifting(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple]:
    """128 s of frames whose noise grows linearly to twice its level; bbhnet with the fixed
    and the rolling whitening (4 slides), and e2e with the rolling one."""
    root = tmp_path_factory.mktemp("rolling")
    (root / "campaign.toml").write_text(
        SMALL_CAMPAIGN.replace("duration = 64", "duration = 128")
        .replace("file_duration = 16", "file_duration = 32\nnoise_drift = 2.0"))
    write_synthetic_dataset(load_config(root / "campaign.toml"))
    weights = untrained_weights(root / "weights")
    runs = {}
    for name, mode, extra in (("fixed", "bbhnet", []), ("rolling", "bbhnet", ROLLING),
                              ("e2e", "e2e", ROLLING)):
        config = load_config(root / "campaign.toml", [
            f'model.mode="{mode}"', f"data.witnesses={WITNESSES}", "model.batch_size=5",
            f'model.repository="{root / name / "repository"}"',
            f"search.slides={SLIDES}", *extra])
        export_repository(config, weights)
        runs[name] = (config, run_dag(config, root / name / "run"))
    return runs


@pytest.mark.slow
@pytest.mark.parametrize("name", ["rolling", "e2e"])
def test_a_rolling_whitening_campaign_equals_its_reference_and_the_oracle(drifting,
                                                                          name) -> None:
    config, run_dir = drifting[name]
    reference, _ = run_reference(config, run_dir.parent / "reference.h5")
    comparison = compare_outputs(run_dir / "output" / "campaign.h5", reference)
    assert comparison.problems == [] and comparison.worst <= TOLERANCE
    assert run_problems(run_dir) == []
    series = read_series(run_dir / "output" / "campaign.h5")
    for group in ("statistic", "slides"):
        late = copy.deepcopy(series)
        x0, dx, values = late[group][0]
        late[group][0] = (x0, dx, np.concatenate([values[:1], values[:-1]]))
        problems = run_problems(run_dir, series=late)
        assert problems and all(p.startswith(group) for p in problems), problems


@pytest.mark.slow
def test_a_repository_with_the_fixed_whitening_is_refused_for_a_rolling_campaign(
        drifting) -> None:
    rolling, _ = drifting["rolling"]
    fixed, _ = drifting["fixed"]
    with pytest.raises(ModelError, match="exported with the search's whitening fixed") as caught:
        check_repository(dataclasses.replace(rolling, model=fixed.model))
    documented("repository-with-fixed-whitening", str(caught.value),
               {fixed.model.repository: "R"}, exit_code=exit_code(ModelError))


def background_quarters(run_dir: Path) -> dict[str, float]:
    """The slides' statistic in the first and the last quarter of the span where every slide
    is formed (the same windows as when slides delayed the zero lag): medians, 90th
    percentiles, the two-sample Kolmogorov-Smirnov distance between them (0: the same
    distribution; 1: no overlap), and the fraction of the last quarter above the first
    quarter's 90th percentile (0.1 for a background that stays put)."""
    from scipy.stats import ks_2samp

    (_, _, values), = read_series(run_dir / "output" / "campaign.h5")["slides"]
    values = values[np.isfinite(values).all(axis=1)]  # from where every slide is formed
    quarter = len(values) // 4
    first, last = values[:quarter].ravel(), values[-quarter:].ravel()
    return {"median_first": float(np.median(first)), "median_last": float(np.median(last)),
            "p90_first": float(np.percentile(first, 90)),
            "p90_last": float(np.percentile(last, 90)),
            "ks": float(ks_2samp(first, last).statistic),
            "above": float(np.mean(last > np.percentile(first, 90)))}


@pytest.mark.slow
def test_the_rolling_background_stays_put_where_the_fixed_one_moves(drifting, capsys) -> None:
    found = {name: background_quarters(drifting[name][1]) for name in ("fixed", "rolling")}
    with capsys.disabled():
        print("\nbackground statistic (time slides), first and last quarter of a span whose "
              "noise doubles:")
        for name, q in found.items():
            print(f"  {name:8s} median {q['median_first']:8.4f} -> {q['median_last']:8.4f}, "
                  f"90th percentile {q['p90_first']:8.4f} -> {q['p90_last']:8.4f}, "
                  f"KS distance {q['ks']:.2f}, above the first quarter's 90th percentile: "
                  f"{100 * q['above']:.0f} %")
    # measured: fixed 0.34, rolling 0.12 (128 s); 0.38 and 0.11 over 256 s
    assert found["fixed"]["ks"] > 0.25
    assert found["rolling"]["ks"] < 0.5 * found["fixed"]["ks"]
