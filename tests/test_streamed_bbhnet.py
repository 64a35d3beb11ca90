"""BBHnet streamed (``science/bbhnet/streamed.py``) equals BBHnet on every whole window (issue #42).

Small geometries (seconds each): the windows a snapshotter would cut from the stream (``K``
zeros first), through the network in float64 (the definition) and through its exported ONNX
graph (float32), against the streamed evaluation (float32) fed in several chunkings.
Tolerance: ``max |streamed - whole| <= 1e-5 * max |whole|`` over the windows, with a head
that centres the statistic of noise (so the bound is on the data's effect, not on a constant:
the global pool's constant part cancels in the head, which costs float32 digits; the float32
whole-window network itself is 2.6e-6 to 1.1e-5 from float64 here).
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from offline_iaas.repository.backend.streamed_network import PhasedNetwork
from offline_iaas.science.bbhnet.network import BBHnet
from offline_iaas.science.bbhnet.streamed import (
    StreamedBBHnet,
    StreamState,
    macs_per_window,
    streamed_in_torch,
)
from tests.helpers import a_sample_late, assert_same_samples, relative_difference
from tests.streamed_runs import (
    randomise_batch_norms,
    resumed_from_a_checkpoint,
    stream,
)

TOLERANCE = 1e-5
"""Relative to the largest statistic of the run."""

GEOMETRIES = {  # (kernel, stride, whitening taps, width, depth); K/S none a power of two
    "k/s=6": (192, 32, 33, 4, 3),
    "k/s=5, odd taps": (240, 48, 17, 4, 3),
    "k/s=24 (aframe's)": (384, 16, 33, 3, 3),
    "depth 2": (120, 24, 9, 3, 2),
}


def random_bbhnet(taps: int, width: int, depth: int, kernel: int, seed: int = 0) -> BBHnet:
    """A BBHnet in eval mode whose statistic depends on the data: random whitening taps,
    BatchNorm statistics and affine terms, and a head that centres and scales the statistic
    of noise windows of ``kernel`` samples to mean 0 and standard deviation 1 (so a tolerance
    relative to the largest statistic is one on the data's effect, not on a constant)."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    network = BBHnet(2, rng.standard_normal((2, taps)) / np.sqrt(taps), 1.0, width, depth)
    randomise_batch_norms(network)
    with torch.no_grad():
        network.eval()
        noise = torch.randn((64, 2, kernel), generator=torch.Generator().manual_seed(seed))
        statistic = network(noise)
        network.head.weight.div_(statistic.std())
        network.head.bias.sub_(statistic.mean()).div_(statistic.std())
    return network


def whole_windows(samples: np.ndarray, kernel: int, stride: int) -> np.ndarray:
    """The windows a snapshotter cuts: ``[n, ifos, K]``, window ``j`` ending after ``j + 1``
    strides of ``samples``, the stream starting with ``K`` zeros."""
    full = np.concatenate([np.zeros((samples.shape[0], kernel), np.float32), samples], axis=1)
    n = samples.shape[1] // stride
    return np.stack([full[:, (j + 1) * stride : (j + 1) * stride + kernel] for j in range(n)])


def whole_statistics(network: BBHnet, windows: np.ndarray) -> np.ndarray:
    """The whole-window network on ``windows``, in float64."""
    exact = copy.deepcopy(network).double()
    with torch.no_grad():
        return exact(torch.from_numpy(windows.astype(np.float64))).numpy()


OFF_GRID = {  # strides off BBHnet's cumulative stride 16: windows on 2 and 4 of its phases
    "off grid, 2 phases": (240, 40, 33, 4, 3),
    "off grid, 4 phases": (192, 12, 17, 4, 3),
}


def samples_of(strides: int, stride: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((2, strides * stride), dtype=np.float32)


@pytest.mark.parametrize("name", list(GEOMETRIES))
def test_streamed_bbhnet_equals_every_whole_window_for_any_chunking(name):
    kernel, stride, taps, width, depth = GEOMETRIES[name]
    network = random_bbhnet(taps, width, depth, kernel)
    streamed = StreamedBBHnet(network, kernel, stride)
    samples = samples_of(3 * kernel // stride + 13, stride)
    reference = whole_statistics(network, whole_windows(samples, kernel, stride))
    # the statistic depends on the data, not only on the biases
    assert np.std(reference[kernel // stride :]) > 0.2 * np.max(np.abs(reference))
    for chunks in ([1], [8], [3, 5, 1, 7]):
        values = stream(streamed, samples, chunks)
        assert values.shape == reference.shape
        error = relative_difference(values, reference)
        assert error <= TOLERANCE, f"{name}, chunks {chunks}: relative error {error:.2e}"


@pytest.mark.parametrize("name", list(OFF_GRID))
def test_a_stride_off_the_grid_streams_on_its_phases_equal_to_every_whole_window(name):
    kernel, stride, taps, width, depth = OFF_GRID[name]
    network = random_bbhnet(taps, width, depth, kernel)
    streamed = streamed_in_torch(network, kernel, stride)
    assert isinstance(streamed, PhasedNetwork) and streamed.phases == 16 // math.gcd(16, stride)
    samples = samples_of(3 * kernel // stride + 13, stride)
    reference = whole_statistics(network, whole_windows(samples, kernel, stride))
    for chunks in ([1], [8], [3, 5, 1, 7]):
        values = stream(streamed, samples, chunks)
        assert values.shape == reference.shape
        error = relative_difference(values, reference)
        assert error <= TOLERANCE, f"{name}, chunks {chunks}: relative error {error:.2e}"
    shifted = np.concatenate([samples[:, 1:], samples[:, :1]], axis=1)
    assert relative_difference(stream(streamed, shifted, [4]), reference) > 100 * TOLERANCE


def test_streamed_bbhnet_restarted_from_a_checkpoint_equals_the_uninterrupted_stream(tmp_path):
    kernel, stride, taps, width, depth = GEOMETRIES["k/s=6"]
    streamed = StreamedBBHnet(random_bbhnet(taps, width, depth, kernel), kernel, stride)
    resumed, uninterrupted = resumed_from_a_checkpoint(
        lambda: streamed, StreamState.from_arrays, samples_of(40, stride), [3] * 14, tmp_path)
    assert_same_samples(resumed, uninterrupted)


def test_an_empty_update_yields_no_window_and_leaves_the_stream_as_it_was():
    """A sequence's START or END may come alone, with no samples (the hostile clients'
    empty sequences): no statistic, and the stream goes on as if it had not come."""
    kernel, stride, taps, width, depth = GEOMETRIES["k/s=6"]
    streamed = StreamedBBHnet(random_bbhnet(taps, width, depth, kernel), kernel, stride)
    samples = samples_of(20, stride)
    state = streamed.initial_state()
    empty = streamed.update(state, np.zeros((2, 0), np.float32))
    assert empty.shape == (0,) and empty.dtype == np.float32 and state.windows == 0
    first = stream(streamed, samples[:, : 8 * stride], [4], state)
    assert streamed.update(state, np.zeros((2, 0), np.float32)).shape == (0,)
    rest = stream(streamed, samples[:, 8 * stride :], [4], state)
    assert_same_samples(np.concatenate([first, rest]), stream(streamed, samples, [4]))


@pytest.mark.parametrize("name", ["k/s=6", "k/s=5, odd taps"])
def test_streamed_bbhnet_equals_the_exported_onnx_graph_on_every_window(tmp_path, name):
    import onnxruntime

    from offline_iaas.models.weights import export_onnx

    kernel, stride, taps, width, depth = GEOMETRIES[name]
    network = random_bbhnet(taps, width, depth, kernel)
    path = export_onnx(network, tmp_path / "bbhnet.onnx", "windows", "statistic",
                       (2, 2, kernel))
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    samples = samples_of(60, stride)
    graph = session.run(None, {"windows": whole_windows(samples, kernel, stride)})[0]
    values = stream(StreamedBBHnet(network, kernel, stride), samples, [7])
    assert relative_difference(values, graph) <= TOLERANCE
    late = a_sample_late(samples)
    late_graph = session.run(None, {"windows": whole_windows(late, kernel, stride)})[0]
    assert relative_difference(values, late_graph) > 100 * TOLERANCE  # the control


def test_streamed_bbhnet_on_input_shifted_by_one_sample_differs():
    """Negative control: the comparison can fail."""
    kernel, stride, taps, width, depth = GEOMETRIES["k/s=6"]
    network = random_bbhnet(taps, width, depth, kernel)
    samples = samples_of(30, stride)
    reference = whole_statistics(network, whole_windows(samples, kernel, stride))
    shifted = np.concatenate([samples[:, 1:], samples[:, :1]], axis=1)
    values = stream(StreamedBBHnet(network, kernel, stride), shifted, [4])
    assert relative_difference(values, reference) > 100 * TOLERANCE


def test_streamed_bbhnet_without_its_edges_differs(monkeypatch):
    """The windows' padded edges are what the stream cannot give: leaving them out fails."""
    kernel, stride, taps, width, depth = GEOMETRIES["k/s=6"]
    network = random_bbhnet(taps, width, depth, kernel)
    streamed = StreamedBBHnet(network, kernel, stride)
    samples = samples_of(30, stride)
    reference = whole_statistics(network, whole_windows(samples, kernel, stride))
    monkeypatch.setattr(streamed, "_edge_sums", lambda state, starts: 0.0)
    assert relative_difference(stream(streamed, samples, [4]), reference) > 100 * TOLERANCE


def test_streamed_bbhnet_refuses_a_stride_off_the_downsampling_grid_and_training_mode():
    network = random_bbhnet(33, 4, 3, 192)
    with pytest.raises(ValueError, match="not a multiple of the network's cumulative stride 16"
                       ".* 2 downsampling phases"):
        StreamedBBHnet(network, 240, 40)
    with pytest.raises(ValueError, match="eval mode"):
        StreamedBBHnet(network.train(), 192, 32)


def test_macs_per_window_of_the_whole_graph_match_its_convolutions():
    kernel, stride, taps, width, depth = GEOMETRIES["k/s=6"]
    network = random_bbhnet(taps, width, depth, kernel)
    counted = []

    def count(module, inputs, output):
        counted.append(module.in_channels * module.out_channels // module.groups
                       * module.kernel_size[0] * output.shape[-1])

    hooks = [m.register_forward_hook(count) for m in network.modules()
             if isinstance(m, torch.nn.Conv1d)]
    with torch.no_grad():
        network(torch.zeros((1, 2, kernel)))
    for hook in hooks:
        hook.remove()
    whitening = 2 * taps * (kernel - taps + 1)
    head = network.head.in_features
    cost = macs_per_window(network, kernel, stride)
    assert cost["whole"] == sum(counted) + whitening + head
    # the bench's geometry (2048 Hz, 1.5 s every 0.25 s, 0.25 s whitening, width 8, depth 3)
    bench = BBHnet(2, np.ones((2, 513)), 1.0)
    cost = macs_per_window(bench, 3072, 512)
    assert cost["edge_lower_bound"] < cost["edges"] < cost["streamed"] < cost["whole"] / 2
