"""Injections on the fly under the rolling whitening (issue #41): the foreground is whitened with
the background's PSD.

Each foreground request carries the injected strain (``update``) and the clean strain at the
same times (``psd_update``); the served model's rolling whitening estimates its PSD from the
clean one, so a loud injection does not whiten itself away. Checked against the independent
oracle (``tests/oracle.py``: gwpy reads, scipy's Welch, the exported graph in onnxruntime): the
foreground statistic of every window equals BBHnet on the frames with the set baked in (the
injected strain) whitened with the PSD of the clean frames (the same seed's noise, no set), and
not the one whitened with the injected strain's own PSD (the negative control: the set is loud,
so its own PSD moves the statistic measurably); campaigns of two splits equal the reference; a
repository exported before the foreground could be whitened so is refused with one line.
"""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest

from offline_iaas.config import CampaignConfig, load_config
from offline_iaas.data.synth import INJECTION_SET
from offline_iaas.errors import ModelError, exit_code
from offline_iaas.merge.output import compare_outputs
from offline_iaas.merge.reference import run_reference
from offline_iaas.repository.export import export_repository
from offline_iaas.repository.served import check_repository
from tests.error_catalogue import documented
from tests.helpers import SMALL_CAMPAIGN, SPLITS, run_split, untrained_weights
from tests.oracle import _graph, read_series, read_stretch, run_network, whiten
from tests.test_injections_on_the_fly import write_baked_and_clean

TOLERANCE = 1e-4
"""Largest |campaign or reference - oracle| / max |oracle| (float32 whitening in the served
chain against float64 scipy in the oracle), as ``tests/test_rolling_whitening.py``."""
ROLLING = ['model.mode="bbhnet"', 'search.whitening="rolling"', "search.psd_seconds=8",
           "search.psd_fftlength=1"]


def _campaign_text(injections: int) -> str:
    # 40 s: each injection's found window (2 s) lies after the 8 s PSD and the warm-up; loud
    # binaries (z <= 0.05, network SNR in the hundreds) so that their own PSD differs
    return (SMALL_CAMPAIGN.replace("duration = 64", "duration = 40")
            .replace("injections = 1", f"injections = {injections}\nredshift_max = 0.05"))


@pytest.fixture(scope="module")
def frames(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The same seed's frames with 2 loud injections baked in and without any; the clean
    frames' campaign injecting the set on the fly with the rolling whitening; one
    repository."""
    root = tmp_path_factory.mktemp("rollfg")
    write_baked_and_clean(root, _campaign_text)
    weights = untrained_weights(root / "weights")
    overrides = [*ROLLING, f'model.repository="{root / "repository"}"',
                 f'search.injections="{root / "baked" / INJECTION_SET}"',
                 f'data.frames="{root / "clean"}"', "search.inject=true",
                 "search.found_seconds=2"]
    config = load_config(root / "clean.toml", overrides)
    export_repository(config, weights)
    return {"root": root, "config": config, "overrides": overrides}


def foreground_of(path: Path) -> np.ndarray:
    with h5py.File(path, "r") as f:
        return f["foreground"][()]


def oracle_config(config: CampaignConfig, frames: Path) -> dict:
    """The keys the oracle reads, as a resolved config holds them."""
    b = config.search
    return {"data": {"frames": str(frames), "sample_rate": config.data.sample_rate},
            "model": {"repository": str(config.model.repository)},
            "search": {"whitening": "rolling", "psd_seconds": b.psd_seconds,
                       "psd_fftlength": b.psd_fftlength,
                       "whitening_crop_seconds": b.whitening_crop_seconds}}


def oracle_foreground(config: CampaignConfig, root: Path, times: np.ndarray
                      ) -> dict[str, np.ndarray]:
    """BBHnet's statistic on the baked-in (injected) strain of the windows ending at
    ``times``, whitened with the clean strain's PSD (``background``) and with the injected
    strain's own (``own``), from the definition (``tests/oracle.py``)."""
    a, b = config.data.start, config.data.start + config.data.duration
    channels = list(config.data.channels)
    injected = read_stretch(oracle_config(config, root / "baked"), channels, a, b)
    clean = read_stretch(oracle_config(config, root / "clean"), channels, a, b)
    plain = oracle_config(config, root / "clean")
    rate, kernel, stride = config.data.sample_rate, config.kernel_samples, config.stride_samples
    dx = stride / rate
    # window j ends at (j + 1) S; absolute tolerance: GPS times are ~1.26e9
    ends = np.round((times - a) / dx).astype(int)
    assert np.allclose(a + ends * dx, times, rtol=0, atol=1e-6)
    # control: the check catches times a third of a stride off the grid
    shifted = times + 0.3 * dx
    assert not np.allclose(a + np.round((shifted - a) / dx).astype(int) * dx, shifted,
                           rtol=0, atol=1e-6)
    network = _graph(plain, "bbhnet")
    out = {}
    for name, psd_data in (("background", clean), ("own", injected)):
        windows = np.stack([whiten(plain, injected, j - 1, kernel, stride, psd_data)
                            for j in ends])
        out[name] = run_network(network, windows).reshape(-1)
    return out


def relative(actual: np.ndarray, expected: np.ndarray) -> float:
    return float(np.abs(actual - expected).max() / np.abs(expected).max())


def test_the_rolling_foreground_is_whitened_with_the_background_s_psd(frames, capsys) -> None:
    config, root = frames["config"], frames["root"]
    reference, _ = run_reference(config, root / "reference.h5")
    foreground = foreground_of(reference)
    assert len(foreground) >= 2 * 8  # two injections' found windows, 2 s each side at 4 Hz
    expected = oracle_foreground(config, root, foreground["time"])
    found = {name: relative(foreground["statistic"], values)
             for name, values in expected.items()}
    with capsys.disabled():
        print(f"\nforeground statistic against the oracle's, relative: whitened with the "
              f"background's PSD {found['background']:.1e}, with its own {found['own']:.1e}")
    assert found["background"] <= TOLERANCE
    # the negative control: the injected strain whitened with its own PSD (measured 0.3)
    assert found["own"] > 100 * TOLERANCE
    # the injections are in the foreground: the clean stream's statistic differs there
    [(x0, dx, values)] = read_series(reference)["statistic"]
    clean = values[np.round((foreground["time"] - x0) / dx).astype(int)].reshape(-1)
    assert relative(foreground["statistic"], clean) > 100 * TOLERANCE


@pytest.mark.slow
@pytest.mark.parametrize(("clients", "shard_seconds"), SPLITS)
def test_a_rolling_campaign_s_foreground_equals_the_reference_and_the_oracle(
        frames, clients: int, shard_seconds: int) -> None:
    root = frames["root"]
    config, run_dir = run_split(root / "clean.toml", frames["overrides"], clients,
                                shard_seconds)
    reference = root / "reference.h5"
    if not reference.exists():
        run_reference(config, reference)
    comparison = compare_outputs(run_dir / "output" / "campaign.h5", reference)
    assert comparison.problems == [] and comparison.worst <= TOLERANCE
    assert {"foreground/statistic", "foreground/time"} <= set(comparison.relative) | set(
        comparison.time_seconds)
    foreground = foreground_of(run_dir / "output" / "campaign.h5")
    expected = oracle_foreground(config, root, foreground["time"])
    assert relative(foreground["statistic"], expected["background"]) <= TOLERANCE
    assert relative(foreground["statistic"], expected["own"]) > 100 * TOLERANCE


def test_a_repository_exported_before_the_foreground_s_psd_is_refused(frames,
                                                                      tmp_path: Path) -> None:
    """A repository exported by the version before: its manifest's whitening record without
    the foreground's PSD (and its fused model without ``psd_update``). Refused for a campaign
    that injects; still served to one that does not."""
    import shutil

    config = frames["config"]
    old = tmp_path / "old-repository"
    shutil.copytree(config.model.repository, old)
    manifest = json.loads((old / "manifest.json").read_text())
    assert manifest["whitening"].pop("foreground_psd") == "background"
    (old / "manifest.json").write_text(json.dumps(manifest))
    pbtxt = next(old.glob("*/config.pbtxt"))
    text = pbtxt.read_text()
    start = text.index('input {\n  name: "psd_update"')
    pbtxt.write_text(text[:start] + text[text.index("}\n", start) + 2 :])
    overrides = [*frames["overrides"], f'model.repository="{old}"']
    injecting = load_config(frames["root"] / "clean.toml", overrides)
    with pytest.raises(ModelError, match="cannot whiten the foreground") as caught:
        check_repository(injecting)
    assert str(caught.value).count("\n") == 0
    documented("repository-without-foreground-psd", str(caught.value), {old: "R"},
               exit_code=exit_code(ModelError))
    plain = load_config(frames["root"] / "clean.toml",
                        [o for o in overrides if o != "search.inject=true"])
    check_repository(plain)  # no foreground: the earlier whitening serves it as before


def test_psd_update_equal_to_the_samples_whitens_as_the_stream_alone_and_cannot_come_and_go(
        ) -> None:
    from offline_iaas.physics import whitening_band
    from offline_iaas.repository.backend.stateful import RollingWhitening

    rate, kernel, stride = 256, 256, 64
    band = whitening_band(np.fft.rfftfreq(kernel, 1 / rate), 20.0, 0.8 * rate / 2).tolist()

    def whitener() -> RollingWhitening:
        return RollingWhitening(2, kernel, stride, 2048, 256, 32, rate, band)

    rng = np.random.default_rng(7)
    samples = rng.standard_normal((2, 80 * stride)).astype(np.float32)
    louder = 3 * samples
    alone, paired, other = whitener(), whitener(), whitener()
    assert np.array_equal(paired.update(samples, samples), alone.update(samples))
    # another stream's PSD does whiten: a PSD 9x higher scales the windows by 1/3
    expected = whitener().update(samples) / 3
    assert np.abs(expected).max() > 0.1
    assert np.allclose(other.update(samples, louder), expected, rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="in all of them or in none"):
        paired.update(samples)
