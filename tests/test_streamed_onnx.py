"""BBHnet (and the classifier) streamed on their exported per-layer ONNX graphs, without torch
(issue #42).

``repository/streamed.export_streamed`` writes what ``StreamedBBHnet`` runs as ONNX graphs;
``backend/streamed_network.open_streamed_network`` runs them with onnxruntime and numpy. Against
the whole-window BBHnet graph (``models/weights.export_onnx``, what the served repository runs)
on every window, fed as requests of uneven sizes; tolerance and random networks as in
``test_streamed_bbhnet.py``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
import onnxruntime  # noqa: E402  (a dependency: missing, the module fails, not skips)

from offline_iaas.models.weights import export_onnx  # noqa: E402
from offline_iaas.repository.backend import streamed_network  # noqa: E402
from offline_iaas.repository.backend.streamed_network import (  # noqa: E402
    PhasedNetwork,
    PhasedState,
    StreamState,
    open_streamed_network,
)
from offline_iaas.science.bbhnet.streamed import export_streamed  # noqa: E402
from tests.helpers import assert_same_samples, relative_difference  # noqa: E402
from tests.streamed_runs import (  # noqa: E402
    resumed_from_a_checkpoint,
    stream,
    stream_without_torch,
)
from tests.test_streamed_bbhnet import (  # noqa: E402
    GEOMETRIES,
    OFF_GRID,
    TOLERANCE,
    random_bbhnet,
    samples_of,
    whole_windows,
)

REQUESTS = [3, 1, 7, 2, 5, 11]
"""Strides per request, cycled: uneven sizes."""


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict:
    """Per geometry: the streamed graphs' directory and the whole-window graph's session."""
    graphs = {}
    for name in ("k/s=6", "k/s=24 (aframe's)", *OFF_GRID):
        kernel, stride, taps, width, depth = {**GEOMETRIES, **OFF_GRID}[name]
        network = random_bbhnet(taps, width, depth, kernel)
        directory = tmp_path_factory.mktemp("streamed")
        export_streamed(network, kernel, stride, directory / "bbhnet")
        whole = export_onnx(network, directory / "bbhnet.onnx", "windows", "statistic",
                            (2, 2, kernel))
        session = onnxruntime.InferenceSession(str(whole), providers=["CPUExecutionProvider"])
        graphs[name] = (directory / "bbhnet", session)
    return graphs


def whole_graph(session, samples: np.ndarray, kernel: int, stride: int) -> np.ndarray:
    return session.run(None, {"windows": whole_windows(samples, kernel, stride)})[0]


@pytest.mark.parametrize("name", ["k/s=6", "k/s=24 (aframe's)", *OFF_GRID])
def test_streamed_onnx_graphs_equal_the_whole_window_graph_on_every_window(exported, name):
    kernel, stride = {**GEOMETRIES, **OFF_GRID}[name][:2]
    directory, session = exported[name]
    samples = samples_of(3 * kernel // stride + 29, stride)
    reference = whole_graph(session, samples, kernel, stride)
    values = stream(open_streamed_network(directory), samples, REQUESTS)
    assert values.shape == reference.shape and values.dtype == np.float32
    error = relative_difference(values, reference)
    print(f"{name}: {len(values)} windows, relative error {error:.2e}")
    assert error <= TOLERANCE, f"{name}: relative error {error:.2e}"


def test_streamed_onnx_graphs_on_input_shifted_by_one_sample_differ(exported):
    """Negative control: the comparison can fail."""
    kernel, stride = GEOMETRIES["k/s=6"][:2]
    directory, session = exported["k/s=6"]
    samples = samples_of(40, stride)
    reference = whole_graph(session, samples, kernel, stride)
    shifted = np.concatenate([samples[:, 1:], samples[:, :1]], axis=1)
    values = stream(open_streamed_network(directory), shifted, REQUESTS)
    assert relative_difference(values, reference) > 100 * TOLERANCE


def test_streamed_onnx_state_saved_mid_stream_continues_bit_identically_in_a_new_runner(
        exported, tmp_path):
    stride = GEOMETRIES["k/s=6"][1]
    directory = exported["k/s=6"][0]
    resumed, uninterrupted = resumed_from_a_checkpoint(
        lambda: open_streamed_network(directory), StreamState.from_arrays,
        samples_of(50, stride), REQUESTS, tmp_path)
    assert_same_samples(resumed, uninterrupted)


@pytest.mark.parametrize("name", list(OFF_GRID))
def test_a_phased_stream_saved_mid_stream_continues_bit_identically_in_a_new_runner(
        exported, tmp_path, name):
    stride = OFF_GRID[name][1]
    directory = exported[name][0]
    assert isinstance(open_streamed_network(directory), PhasedNetwork)
    resumed, uninterrupted = resumed_from_a_checkpoint(
        lambda: open_streamed_network(directory), PhasedState.from_arrays,
        samples_of(50, stride), REQUESTS, tmp_path)
    assert_same_samples(resumed, uninterrupted)


def test_streamed_onnx_runner_runs_without_torch_or_the_package(exported, tmp_path):
    """As the server's python stub loads it: by file path (``layer_stream.open_streamed``
    choosing it), with numpy and onnxruntime only."""
    stride = GEOMETRIES["k/s=6"][1]
    directory = exported["k/s=6"][0]
    samples = samples_of(24, stride)
    expected = stream(open_streamed_network(directory), samples, [4])
    assert_same_samples(stream_without_torch(directory, samples, tmp_path), expected)
    assert Path(streamed_network.__file__).read_text().count("import torch") == 0


def test_streamed_graphs_whose_manifest_names_no_known_runner_are_refused_naming_it(
        exported, tmp_path):
    """The manifest's ``runner`` picks the module that runs the graphs; one written without
    it (or naming another) is refused with the file and what to do, not run by a guess."""
    from offline_iaas.repository.backend.layer_stream import STREAM_SPEC, open_streamed

    copy = tmp_path / "bbhnet"
    shutil.copytree(exported["k/s=6"][0], copy)
    assert isinstance(open_streamed(copy), type(open_streamed_network(copy)))  # control
    spec = json.loads((copy / STREAM_SPEC).read_text())
    assert spec.pop("runner") == "streamed_network"
    (copy / STREAM_SPEC).write_text(json.dumps({**spec, "network": "bbhnet"}))
    with pytest.raises(ValueError, match=rf"{copy / STREAM_SPEC}: runner None is none of "
                       r"streamed_network, streamed_deepclean: .* export the repository again"):
        open_streamed(copy)


def test_mode_stream_with_a_streamed_stage_equals_the_snapshotter_and_whole_window_graph(
        exported):
    """Two streams interleaved through ``ModeStream``: each keeps its own ``StreamState``
    beside the shared runner, and yields what the snapshotter and the whole-window graph do."""
    from offline_iaas.repository.backend.stateful import ModeStream

    kernel, stride = GEOMETRIES["k/s=6"][:2]
    directory, session = exported["k/s=6"]
    whole = [{"model": "snapshotter", "kind": "snapshot", "inputs": {"update": "update"},
              "outputs": {"windows": "windows"}, "channels": 2, "params": {}},
             {"model": "bbhnet", "kind": "network", "inputs": {"windows": "windows"},
              "outputs": {"statistic": "statistic"}, "channels": 0, "params": {}}]
    streamed = [{"model": "bbhnet", "kind": "streamed", "inputs": {"update": "update"},
                 "outputs": {"statistic": "statistic"}, "channels": 2,
                 "params": {"network": "bbhnet"}}]
    runner = open_streamed_network(directory)
    streams = {seed: (ModeStream(whole, kernel, stride, ["statistic"], {"bbhnet": session}),
                      ModeStream(streamed, kernel, stride, ["statistic"], {"bbhnet": runner}),
                      samples_of(58, stride, seed)) for seed in (1, 2)}
    out = {seed: ([], []) for seed in streams}
    at = 0
    for size in REQUESTS * 2:
        for seed, (by_window, by_stream, samples) in streams.items():
            chunk = samples[:, at * stride : (at + size) * stride]
            out[seed][0].append(by_window.update(chunk)["statistic"])
            out[seed][1].append(by_stream.update(chunk)["statistic"])
        at += size
    for seed, (reference, values) in out.items():
        reference, values = np.concatenate(reference), np.concatenate(values)
        assert len(values) == 58 and values.dtype == np.float32
        assert relative_difference(values, reference) <= TOLERANCE, seed
    # the streams differ (else sharing one state would pass too)
    assert relative_difference(np.concatenate(out[1][1]), np.concatenate(out[2][1])) > 0.1


@pytest.mark.parametrize(("length", "step"), [(155, 32), (160, 32), (20, 32), (64, 16)])
def test_window_sums_equal_each_window_summed_on_its_own(length: int, step: int) -> None:
    from offline_iaas.repository.backend.streamed_network import _window_sums

    rng = np.random.default_rng(length)
    first = 5 + step * np.arange(9)
    for end in (first[-1] + length, first[-1] + length + 7):  # the last window at the end too
        values = rng.standard_normal((3, end)).astype(np.float32)
        direct = np.stack([values[:, f : f + length].sum(axis=1, dtype=np.float64)
                           for f in first], axis=1)
        np.testing.assert_allclose(_window_sums(values, first, length, step), direct,
                                   rtol=1e-12, atol=1e-12)
        # negative control: windows one position late
        assert not np.allclose(_window_sums(values, first + 1, length - 1, step), direct)


@pytest.mark.parametrize("stride", [32, 12])  # on the grid of 8; off it (2 phases)
def test_streamed_classifier_graphs_equal_its_whole_window_graph_on_every_window(tmp_path,
                                                                                  stride):
    """The classifier (three strided convolutions, a mean, a head) streamed on the same
    runner as BBHnet, its input scale as a one-tap whitening, against its whole-window graph
    on every window of strain-sized samples; shifted by one sample, the comparison fails."""
    import torch

    from offline_iaas.science.classifier.network import Classifier

    kernel = 192
    torch.manual_seed(3)
    network = Classifier(2, input_scale=1e21).eval()
    directory = export_streamed(network, kernel, stride, tmp_path / "classifier")
    spec = json.loads((directory / "streamed.json").read_text())
    assert spec["whitening_taps"] == 1 and [n["conv"] for n in spec["nodes"]] == [[7, 2, 3]] * 3
    whole = export_onnx(network, tmp_path / "classifier.onnx", "windows", "statistic",
                        (2, 2, kernel))
    session = onnxruntime.InferenceSession(str(whole), providers=["CPUExecutionProvider"])
    samples = samples_of(3 * kernel // stride + 29, stride) * np.float32(1e-21)
    reference = whole_graph(session, samples, kernel, stride)
    values = stream(open_streamed_network(directory), samples, REQUESTS)
    assert values.shape == reference.shape and np.isfinite(values).all()
    error = relative_difference(values, reference)
    print(f"classifier at a stride of {stride}: {len(values)} windows, relative error "
          f"{error:.2e}")
    assert error <= TOLERANCE
    shifted = np.concatenate([samples[:, 1:], samples[:, :1]], axis=1)
    late = stream(open_streamed_network(directory), shifted, REQUESTS)
    assert relative_difference(late, reference) > 100 * TOLERANCE
