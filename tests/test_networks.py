"""DeepClean and BBHnet: shapes, baked-in scaling and whitening, ONNX export, averaging."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime
import pytest
import torch
from scipy import signal

from offline_iaas.data.synth import design_asd
from offline_iaas.models.weights import export_onnx
from offline_iaas.science.bbhnet.network import BBHnet, whitening_filter
from offline_iaas.science.deepclean import network as deepclean_network
from offline_iaas.science.deepclean import settings as deepclean_settings
from offline_iaas.science.deepclean.network import DeepClean, average_overlapping

RATE = 1024.0


def deepclean(witnesses: int = 2, strain_std: float = 1.0, seed: int = 0, **stats) -> DeepClean:
    torch.manual_seed(seed)
    model = DeepClean(
        witnesses,
        stats.get("witness_mean", [0.0] * witnesses),
        stats.get("witness_std", [1.0] * witnesses),
        stats.get("strain_mean", 0.0),
        strain_std,
    )
    return model.eval()


def test_deepclean_shapes() -> None:
    model = deepclean(3)
    out = model(torch.randn(5, 3, 128))
    assert out.shape == (5, 128)
    with pytest.raises(ValueError, match="multiple of 16"):
        model(torch.randn(2, 3, 100))
    with pytest.raises(ValueError, match=r"\[batch, 3, kernel_samples\]"):
        model(torch.randn(2, 4, 128))
    with pytest.raises(ValueError, match="3 values each"):
        DeepClean(3, [0.0, 0.0], [1.0, 1.0, 1.0], 0.0, 1.0)


def test_the_config_rule_s_downsampling_is_the_network_s() -> None:
    """``settings.DOWNSAMPLING`` is kept beside the config so that loading one needs no torch:
    it must be what the encoder's strided convolutions divide a window's length by."""
    encoder = deepclean_network.ENCODER_CHANNELS
    assert deepclean_settings.DOWNSAMPLING == deepclean_network.DOWNSAMPLING == 2 ** len(encoder)


def test_deepclean_architecture() -> None:
    """Input conv N→N k7; encoder 8, 16, 32, 64 (stride 2); decoder 32, 16, 8, N; output N→1."""
    model = deepclean(21)
    state = model.state_dict()
    assert state["input_conv.weight"].shape == (21, 21, 7)
    assert [state[f"encoder.{i}.0.weight"].shape[0] for i in range(4)] == [8, 16, 32, 64]
    assert [state[f"decoder.{i}.0.weight"].shape[1] for i in range(4)] == [32, 16, 8, 21]
    assert state["output_conv.weight"].shape == (1, 21, 7)
    for key in ("witness_mean", "witness_std", "strain_mean", "strain_std"):
        assert key in state


def test_deepclean_scaling_is_baked_in() -> None:
    """Output scales with strain_std (plus strain_mean); inputs are standardised per channel."""
    x = torch.randn(4, 2, 64, generator=torch.Generator().manual_seed(0))
    base = deepclean(2, 1.0, seed=3)
    scaled = deepclean(2, 1e-21, seed=3, strain_mean=5e-22)
    scaled.load_state_dict({**base.state_dict(), "strain_std": torch.tensor(1e-21),
                            "strain_mean": torch.tensor(5e-22)})
    with torch.no_grad():
        np.testing.assert_allclose(
            scaled(x).numpy(), base(x).numpy() * 1e-21 + 5e-22, rtol=1e-5, atol=1e-28
        )
    mean, std = [3.0, -2.0], [10.0, 0.5]
    standardised = deepclean(2, 1.0, seed=3, witness_mean=mean, witness_std=std)
    standardised.load_state_dict(
        {**base.state_dict(), "witness_mean": torch.tensor(mean),
         "witness_std": torch.tensor(std)}
    )
    raw = x * torch.tensor(std)[:, None] + torch.tensor(mean)[:, None]
    with torch.no_grad():
        np.testing.assert_allclose(standardised(raw).numpy(), base(x).numpy(), atol=1e-5,
                                   equal_nan=False)
        late = base(torch.roll(x, 1, dims=-1)).numpy()  # the control: a sample late
        assert not np.allclose(standardised(raw).numpy(), late, atol=1e-5)


def test_average_overlapping_matches_a_loop() -> None:
    rng = np.random.default_rng(0)
    predictions = rng.standard_normal((11, 40))
    stride = 12
    total = np.zeros(10 * stride + 40)
    count = np.zeros_like(total)
    for j, row in enumerate(predictions):
        total[j * stride : j * stride + 40] += row
        count[j * stride : j * stride + 40] += 1
    np.testing.assert_allclose(average_overlapping(predictions, stride), total / count)
    # a constant prediction stays constant whatever the overlap
    np.testing.assert_allclose(average_overlapping(np.ones((7, 64)), 16), 1.0)
    with pytest.raises(ValueError, match="stride"):
        average_overlapping(predictions, 41)


def coloured_noise(seconds: float, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gaussian noise with the aLIGO design ASD, scaled by 1e21; and (freqs, ASD) of it."""
    rng = np.random.default_rng(seed)
    n = int(seconds * RATE)
    freqs = np.fft.rfftfreq(n, 1 / RATE)
    asd = design_asd(freqs) * 1e21
    # one-sided PSD asd^2: |X_k|^2 = PSD * n * fs / 2
    spectrum = (rng.standard_normal(len(freqs)) + 1j * rng.standard_normal(len(freqs))) / np.sqrt(2)
    noise = np.fft.irfft(spectrum * asd * np.sqrt(n * RATE / 2), n=n)
    return noise, freqs[1:], asd[1:]


def test_whitening_filter_whitens_coloured_noise() -> None:
    noise, freqs, asd = coloured_noise(256, seed=1)
    taps = whitening_filter(freqs, asd, RATE, 257)
    assert taps.shape == (257,)
    np.testing.assert_allclose(taps, taps[::-1], atol=1e-9 * np.abs(taps).max())  # linear phase
    model = BBHnet(1, taps[None], input_scale=1.0)
    with torch.no_grad():
        white = model.whiten(torch.as_tensor(noise[None, None], dtype=torch.float32))[0, 0]
    white = white.numpy().astype(float)
    assert 0.9 < white.var() < 1.1
    f, psd = signal.welch(white, RATE, nperseg=256)
    band = (f >= 40) & (f <= 360)  # the gain tapers off from 0.9 x 0.8 x Nyquist
    flat = psd[band] / psd[band].mean()
    assert flat.min() > 0.8 and flat.max() < 1.2, (flat.min(), flat.max())
    assert psd[f <= 12].max() < 0.01 * psd[band].mean()  # the seismic wall is gone


def test_whitening_filter_rejects_bad_arguments() -> None:
    freqs = np.linspace(1, 512, 100)
    with pytest.raises(ValueError, match="odd"):
        whitening_filter(freqs, np.ones(100), RATE, 256)
    with pytest.raises(ValueError, match="band"):
        whitening_filter(freqs, np.ones(100), RATE, 257, low_hz=600)


def bbhnet(seed: int = 0, taps: int = 65, width: int = 4, depth: int = 2) -> BBHnet:
    torch.manual_seed(seed)
    whitening = np.random.default_rng(seed).standard_normal((2, taps)) * 0.1
    return BBHnet(2, whitening, input_scale=1e21, width=width, depth=depth).eval()


def test_bbhnet_shapes_and_whitening_buffer() -> None:
    model = bbhnet()
    out = model(torch.randn(3, 2, 256) * 1e-21)
    assert out.shape == (3,)
    assert model.whitening_taps == 65
    state = model.state_dict()
    assert state["whitening"].shape == (2, 1, 65)
    assert "whitening" not in dict(model.named_parameters())
    # width and depth: stem -> width channels, each stage doubles
    deep = bbhnet(width=8, depth=3)
    assert deep.head.in_features == 64
    with pytest.raises(ValueError, match="shorter than its whitening"):
        model(torch.zeros(1, 2, 64))
    with pytest.raises(ValueError, match=r"\[batch, 2, kernel_samples\]"):
        model(torch.zeros(1, 3, 256))


def test_bbhnet_output_depends_on_the_stream_only() -> None:
    """Eval mode: a window's statistic does not depend on the rest of the batch (observed
    <= 7.5e-9 apart, statistics ~0.12); control: each window shifted one sample, alone,
    fails the same comparison (>= 9.5e-5 apart)."""
    model = bbhnet()
    x = torch.randn(6, 2, 256) * 1e-21
    with torch.no_grad():
        together = model(x).numpy()
        alone = np.array([model(x[i : i + 1]).item() for i in range(6)])
        shifted = np.array([model(torch.roll(x[i : i + 1], 1, dims=-1)).item()
                            for i in range(6)])
    np.testing.assert_allclose(together, alone, rtol=1e-5, atol=1e-6, equal_nan=False)
    assert not np.isclose(together, shifted, rtol=1e-5, atol=1e-6).any()


@pytest.mark.parametrize("kind", ["deepclean", "bbhnet"])
def test_onnx_export_equals_torch(kind: str, tmp_path: Path) -> None:
    if kind == "deepclean":
        model, shape, output = deepclean(3, 1.0, seed=2), (1, 3, 128), "prediction"
        x = np.random.default_rng(0).standard_normal((5, 3, 128)).astype(np.float32)
    else:
        model, shape, output = bbhnet(seed=2), (1, 2, 256), "statistic"
        x = (np.random.default_rng(0).standard_normal((5, 2, 256)) * 1e-21).astype(np.float32)
    path = export_onnx(model, tmp_path / "model.onnx", "windows", output, shape)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run([output], {"windows": x})[0]  # batch 5 through a graph traced with 1
    with torch.no_grad():
        want = model(torch.as_tensor(x)).numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max(),
                               equal_nan=False)
    late = np.roll(want, 1, axis=-1)  # the control: a sample late
    assert not np.allclose(got, late, rtol=1e-5, atol=1e-5 * np.abs(want).max())
