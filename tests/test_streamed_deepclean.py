"""DeepClean streamed layer by layer equals DeepClean on every whole window (issue #42).

``science/deepclean/streamed.export_streamed_deepclean`` writes the layers' ONNX graphs;
``backend/streamed_deepclean.open_streamed_deepclean`` runs them with onnxruntime and numpy.
Two interferometers with different witnesses out of five shared channels, random weights and
BatchNorm statistics, witnesses of standard deviations 1e-3 to 1e2 standardised by the baked-in
statistics and a strain standard deviation of 1e-21 (so the prediction is ~1e-21): the windows a
snapshotter would cut from the stream (``K`` zeros first), through each network in float64
(the definition) and through its whole-window ONNX graph (float32), against the streamed
prediction (float32) fed in requests of 1 and of 3, 5, 1, 7 strides. Tolerance:
``max |streamed - whole| <= 1e-5 * max |whole|`` per interferometer.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import onnxruntime
import pytest
import torch

from offline_iaas.models.weights import export_onnx
from offline_iaas.repository.backend import layer_stream
from offline_iaas.science.deepclean.backend import streamed_deepclean
from offline_iaas.science.deepclean.backend.streamed_deepclean import (
    DeepCleanState,
    open_streamed_deepclean,
)
from offline_iaas.science.deepclean.network import DeepClean
from offline_iaas.science.deepclean.streamed import (
    export_streamed_deepclean,
    torch_streamed_deepclean,
)
from tests.helpers import assert_same_samples, relative_difference
from tests.streamed_runs import (
    randomise_batch_norms,
    resumed_from_a_checkpoint,
    stream,
    stream_without_torch,
)

TOLERANCE = 1e-5
"""Relative to the largest prediction of the run, per interferometer."""
GEOMETRIES = {"k/s=8": (256, 32), "k/s=5": (320, 64),  # (kernel, stride)
              # strides off the alignment 16 (``PhasedDeepClean``): 2 and 4 phases
              "s=24, 2 phases": (240, 24), "s=4, 4 phases": (256, 4)}
SPLITS = {"1": [1], "3/5/1/7": [3, 5, 1, 7]}
"""Strides per request, cycled."""
CHANNELS = 5
WITNESSES = {"H1": [0, 2, 3], "L1": [4, 2]}
"""Each interferometer's witnesses among the streamed channels (channel 2 shared)."""
STRAIN_STD = 1e-21


def channel_statistics(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Per streamed channel: mean and standard deviation (witness units, 1e-3 to 1e2)."""
    rng = np.random.default_rng(seed)
    std = 10.0 ** rng.uniform(-3, 2, CHANNELS)
    return std * rng.uniform(-1, 1, CHANNELS), std


def random_deepclean(witnesses: list[int], seed: int) -> DeepClean:
    """A DeepClean in eval mode on ``witnesses`` (channel indices): random weights, BatchNorm
    statistics and affine terms, the channels' statistics baked in, strain std 1e-21."""
    torch.manual_seed(seed)
    mean, std = channel_statistics()
    network = DeepClean(len(witnesses), mean[witnesses], std[witnesses], 3e-23, STRAIN_STD)
    randomise_batch_norms(network)
    return network.eval()


def samples_of(strides: int, stride: int, seed: int = 0) -> np.ndarray:
    """``[channels, strides * stride]`` witnesses around each channel's mean and std."""
    mean, std = channel_statistics()
    noise = np.random.default_rng(seed + 10).standard_normal((CHANNELS, strides * stride))
    return (mean[:, None] + std[:, None] * noise).astype(np.float32)


def whole_windows(samples: np.ndarray, kernel: int, stride: int) -> np.ndarray:
    """The windows a snapshotter cuts, ``[n, channels, K]`` (the stream starts with zeros)."""
    full = np.concatenate([np.zeros((samples.shape[0], kernel), np.float32), samples], axis=1)
    n = samples.shape[1] // stride
    return np.stack([full[:, (j + 1) * stride : (j + 1) * stride + kernel] for j in range(n)])


def whole_float64(networks: dict[str, DeepClean], windows: np.ndarray) -> np.ndarray:
    """Each network on its witnesses of ``windows`` in float64, ``[n, ifos, K]``."""
    out = []
    for ifo, network in networks.items():
        exact = copy.deepcopy(network).double()
        with torch.no_grad():
            out.append(exact(torch.from_numpy(
                windows[:, WITNESSES[ifo]].astype(np.float64))).numpy())
    return np.stack(out, axis=1)


def relative_errors(values: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Per interferometer: max |values - reference| / max |reference|. An array, so that its
    ``.max()``/``.min()`` is NaN where any is (Python's ``max`` of a list skips a NaN that is
    not first, and a comparison with it would pass)."""
    return np.array([relative_difference(values[:, i], reference[:, i])
                     for i in range(reference.shape[1])])


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict:
    """Per geometry: the networks, the streamed graphs' directory, the whole-window graphs'
    sessions."""
    graphs = {}
    for name, (kernel, stride) in GEOMETRIES.items():
        networks = {ifo: random_deepclean(index, seed)
                    for seed, (ifo, index) in enumerate(WITNESSES.items())}
        directory = tmp_path_factory.mktemp("streamed")
        export_streamed_deepclean(networks, WITNESSES, kernel, stride,
                                  directory / "deepclean.streamed")
        sessions = {ifo: onnxruntime.InferenceSession(
            str(export_onnx(network, directory / f"{ifo}.onnx", "windows", "prediction",
                            (2, network.witnesses, kernel))),
            providers=["CPUExecutionProvider"]) for ifo, network in networks.items()}
        graphs[name] = (networks, directory / "deepclean.streamed", sessions)
    return graphs


def whole_graphs(sessions: dict, windows: np.ndarray) -> np.ndarray:
    return np.stack([session.run(None, {"windows": windows[:, WITNESSES[ifo]]})[0]
                     for ifo, session in sessions.items()], axis=1)


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_streamed_deepclean_graphs_equal_the_whole_window_network_on_every_window(
        exported, geometry, split):
    kernel, stride = GEOMETRIES[geometry]
    networks, directory, sessions = exported[geometry]
    samples = samples_of(2 * kernel // stride + 23, stride)
    windows = whole_windows(samples, kernel, stride)
    values = stream(open_streamed_deepclean(directory), samples, SPLITS[split])
    assert values.shape == (len(windows), 2, kernel) and values.dtype == np.float32
    for reference, what in ((whole_float64(networks, windows), "float64 network"),
                            (whole_graphs(sessions, windows), "whole-window ONNX graph")):
        assert 1e-22 < np.abs(reference).max() < 1e-19  # strain units
        errors = relative_errors(values, reference)
        print(f"{geometry}, requests of {split}: {len(values)} windows, against the {what}: "
              f"relative error {errors.max():.2e}")
        assert errors.max() <= TOLERANCE, (what, errors)


def test_streamed_deepclean_in_torch_equals_the_float64_network(exported):
    kernel, stride = GEOMETRIES["k/s=5"]
    networks = exported["k/s=5"][0]
    samples = samples_of(30, stride)
    values = stream(torch_streamed_deepclean(networks, WITNESSES, kernel, stride), samples,
                    SPLITS["3/5/1/7"])
    reference = whole_float64(networks, whole_windows(samples, kernel, stride))
    assert relative_errors(values, reference).max() <= TOLERANCE


def test_streamed_deepclean_on_input_shifted_by_one_sample_differs(exported):
    """Negative control: the comparison can fail."""
    kernel, stride = GEOMETRIES["k/s=8"]
    networks, directory, _ = exported["k/s=8"]
    samples = samples_of(30, stride)
    reference = whole_float64(networks, whole_windows(samples, kernel, stride))
    shifted = np.concatenate([samples[:, 1:], samples[:, :1]], axis=1)
    values = stream(open_streamed_deepclean(directory), shifted, SPLITS["3/5/1/7"])
    assert relative_errors(values, reference).min() > 100 * TOLERANCE


@pytest.mark.parametrize("short", [8, 48])
def test_streamed_deepclean_with_stream_values_at_its_left_edge_differs(exported, short):
    """Negative control: the edges matter, up to the last position the padding reaches: the
    last ``short`` of the left edge taken from the stream fail (the right edge's stream values
    do not exist yet when its window is due; the stream's first value lies after the first
    window's start, so the whole edge cannot be taken from it either)."""
    kernel, stride = GEOMETRIES["k/s=5"]
    networks, directory, _ = exported["k/s=5"]
    samples = samples_of(30, stride)
    reference = whole_float64(networks, whole_windows(samples, kernel, stride))
    runner = open_streamed_deepclean(directory)
    reach = runner.plan.left
    runner.plan = dataclasses.replace(runner.plan, left=reach - short)
    values = stream(runner, samples, SPLITS["3/5/1/7"])
    print(f"left edge of {runner.plan.left} instead of {reach}: relative error "
          f"{relative_errors(values, reference).min():.2e}")
    assert relative_errors(values, reference).min() > 30 * TOLERANCE


def test_deepclean_padding_reaches_exactly_the_planned_edges(exported):
    """A window equals the network on a longer stretch around it except in the first
    ``left`` and last ``right`` samples, and differs in the ``left``-th and last
    ``right``-th (so the edges recomputed per window are neither short nor long)."""
    kernel, stride = GEOMETRIES["k/s=8"]
    networks, directory, _ = exported["k/s=8"]
    plan = open_streamed_deepclean(directory).plan
    margin = 256  # a multiple of the alignment 16, longer than the reach
    exact = copy.deepcopy(networks["H1"]).double()
    longer = torch.from_numpy(samples_of(1, kernel + 2 * margin)[WITNESSES["H1"]][None]
                              .astype(np.float64))
    with torch.no_grad():
        window = exact(longer[..., margin : margin + kernel])[0].numpy()
        around = exact(longer)[0, margin : margin + kernel].numpy()
    agrees = np.abs(window - around) <= 1e-12 * np.abs(around).max()  # NaN agrees nowhere
    assert (plan.left, plan.right) == (81, 96)  # computed by layer_stream.edge_plan
    assert not agrees[plan.left - 1] and not agrees[kernel - plan.right]
    assert agrees[plan.left : kernel - plan.right].all()


def test_deepclean_edge_graphs_read_exactly_what_their_kept_outputs_depend_on(exported):
    """Each edge graph's cone (``EdgeCone``): the raw samples it reads (directly, or through the
    input conv's stream values) are exactly those the kept outputs of the float64 network
    have a non-zero gradient on, so the cone is neither short nor long."""
    kernel = GEOMETRIES["k/s=8"][0]
    networks, directory, _ = exported["k/s=8"]
    runner = open_streamed_deepclean(directory)
    first = runner.nodes[0].conv
    exact = copy.deepcopy(networks["H1"]).double()
    for edge, (lo, hi) in {"left": (0, 81), "right": (kernel - 96, kernel)}.items():
        cone = runner.cones[edge]
        window = torch.from_numpy(samples_of(1, kernel)[WITNESSES["H1"]][None]
                                  .astype(np.float64)).requires_grad_()
        exact(window)[0, lo:hi].sum().backward()
        depends = np.flatnonzero(np.abs(window.grad[0].numpy()).sum(axis=0))
        reads = [(max(0, first.first_input(f0)), min(kernel, first.end_input(f1)))
                 if source == "features" else (f0, f1) for source, f0, f1 in cone.spans()]
        assert (depends[0], depends[-1] + 1) == (min(r[0] for r in reads),
                                                 max(r[1] for r in reads)), edge
        assert len(depends) == depends[-1] + 1 - depends[0]
        assert (cone.cuts[-1].lo, cone.cuts[-1].hi) == (lo, hi)
    assert [c.hi - c.lo for c in runner.cones["left"].cuts] == [174, 86, 42, 20, 9, 14, 24, 44,
                                                                84, 81]
    assert [c.hi - c.lo for c in runner.cones["right"].cuts] == [189, 93, 45, 21, 9, 15, 27,
                                                                 51, 99, 96]


def test_streamed_deepclean_manifest_of_other_edge_graphs_is_refused(exported, tmp_path):
    """A ``streamed.json`` whose edges are not the runner's (one exported before the edge
    cones: the whole padded network on 192 samples, no ``edges``) is refused, not run."""
    directory = tmp_path / "deepclean.streamed"
    shutil.copytree(exported["k/s=8"][1], directory)
    open_streamed_deepclean(directory)  # the copy as exported opens
    manifest = directory / "streamed.json"
    spec = json.loads(manifest.read_text())
    del spec["edges"]
    manifest.write_text(json.dumps(spec))
    with pytest.raises(ValueError, match="its edge graphs are not the ones this runner "
                                         "computes .*: export again"):
        open_streamed_deepclean(directory)


def test_streamed_deepclean_state_saved_mid_stream_continues_bit_identically_in_a_new_runner(
        exported, tmp_path):
    stride = GEOMETRIES["k/s=5"][1]
    directory = exported["k/s=5"][1]
    resumed, uninterrupted = resumed_from_a_checkpoint(
        lambda: open_streamed_deepclean(directory), DeepCleanState.from_arrays,
        samples_of(40, stride), [3, 1, 7, 2, 5, 11], tmp_path)
    assert_same_samples(resumed, uninterrupted)


@pytest.mark.parametrize("geometry", ["s=24, 2 phases", "s=4, 4 phases"])
def test_phased_deepclean_with_its_phases_misaligned_differs(exported, geometry):
    """Negative control of the phases: phase 0 delayed by one sample more than its
    ``(g - 1) S`` (its windows, every ``g``-th, a sample late; the others right) fails the
    comparison; an empty update gives no window."""
    kernel, stride = GEOMETRIES[geometry]
    networks, directory, _ = exported[geometry]
    samples = samples_of(2 * kernel // stride + 5, stride)
    reference = whole_float64(networks, whole_windows(samples, kernel, stride))
    runner = open_streamed_deepclean(directory)
    state = runner.initial_state()
    assert runner.update(state, samples[:, :0]).shape == (0, 2, kernel)
    late = state.queued[0]
    state.queued[0] = np.concatenate([np.zeros((late.shape[0], 1), np.float32), late], axis=1)
    values = stream(runner, samples, SPLITS["3/5/1/7"], state)
    assert relative_errors(values, reference).min() > 100 * TOLERANCE


def test_the_on_grid_runner_refuses_a_stride_off_the_alignment(exported):
    networks, directory, _ = exported["s=24, 2 phases"]
    runner = open_streamed_deepclean(directory)
    with pytest.raises(ValueError, match="stride of 24 samples is not a multiple of "
                       "DeepClean's alignment 16 .*: windows fall on 2 downsampling phases"):
        streamed_deepclean.StreamedDeepClean(runner.nodes, WITNESSES, 240, 24, {})


def test_a_phased_window_costs_what_its_phase_stride_costs_on_the_grid(exported):
    """Each of the ``g`` phases runs every layer on every sample: per window, the layers'
    MACs at stride ``S`` off the grid are those at ``g S`` on it; the edges are the same."""
    from offline_iaas.science.deepclean.streamed import macs_per_window

    network = exported["k/s=8"][0]["H1"]
    phased, on_grid = macs_per_window(network, 240, 24), macs_per_window(network, 240, 48)
    assert phased["streamed_layers"] == pytest.approx(on_grid["streamed_layers"], rel=1e-12)
    assert phased["edges"] == on_grid["edges"] > 0


def test_phased_deepclean_state_saved_mid_stream_continues_bit_identically(exported, tmp_path):
    from offline_iaas.science.deepclean.backend.streamed_deepclean import (
        PhasedDeepClean,
        PhasedDeepCleanState,
    )

    kernel, stride = GEOMETRIES["s=24, 2 phases"]
    directory = exported["s=24, 2 phases"][1]
    assert isinstance(open_streamed_deepclean(directory), PhasedDeepClean)
    resumed, uninterrupted = resumed_from_a_checkpoint(
        lambda: open_streamed_deepclean(directory), PhasedDeepCleanState.from_arrays,
        samples_of(40, stride), [3, 1, 7, 2, 5, 11], tmp_path)
    assert_same_samples(resumed, uninterrupted)


@pytest.mark.parametrize("geometry", ["k/s=8", "s=4, 4 phases"])
def test_streamed_deepclean_runner_runs_without_torch_or_the_package(exported, tmp_path,
                                                                     geometry):
    """As the server's python stub loads it: by file path (``layer_stream.open_streamed``
    choosing it, ``layer_stream.py`` beside it as ``export`` copies them), with numpy and
    onnxruntime only, importing nothing of this package; the same predictions bit for bit,
    on the grid and off it."""
    stride = GEOMETRIES[geometry][1]
    directory = exported[geometry][1]
    samples = samples_of(24, stride)
    expected = stream(open_streamed_deepclean(directory), samples, [4])
    assert_same_samples(stream_without_torch(directory, samples, tmp_path), expected)
    for module in (streamed_deepclean, layer_stream):
        assert "import torch" not in Path(module.__file__).read_text()


@pytest.mark.parametrize(("kernel", "stride", "message"), [
    (240, 120, "a stride of 120 samples puts the windows on 2 phases of DeepClean's "
               "alignment 16: each phase would stream 240 samples a window, not less than "
               "the window of 240"),
    (160, 32, "a window of 160 samples is all edge"),
])
def test_export_refuses_a_geometry_deepclean_cannot_stream(exported, tmp_path, kernel, stride,
                                                           message):
    networks = exported["k/s=8"][0]
    with pytest.raises(ValueError, match=message):
        export_streamed_deepclean(networks, WITNESSES, kernel, stride, tmp_path / "streamed")
    assert not (tmp_path / "streamed").exists()


class _GatheredGraphs:
    """The served ``deepclean`` graph's interface over the per-interferometer whole-window
    sessions: ``windows`` [n, channels, K] → ``prediction`` [n, ifos, K]."""

    def __init__(self, sessions: dict) -> None:
        self.sessions = sessions

    def get_inputs(self):
        return [dataclasses.make_dataclass("Input", ["name", "shape"])("windows", [0, 0, 0])]

    def get_outputs(self):
        return [dataclasses.make_dataclass("Output", ["name"])("prediction")]

    def run(self, _names, feeds: dict) -> list[np.ndarray]:
        return [whole_graphs(self.sessions, feeds["windows"])]


def test_mode_stream_with_streamed_deepclean_averages_as_the_snapshotter_and_whole_graph(
        exported):
    """The deepclean chain with the snapshotter and whole-window graph replaced by one
    ``streamed`` stage: the online average downstream, unchanged, gives the same noise."""
    from offline_iaas.repository.backend.stateful import ModeStream

    kernel, stride = GEOMETRIES["k/s=8"]
    _, directory, sessions = exported["k/s=8"]
    average = {"model": "averager", "kind": "average", "inputs": {"prediction": "prediction"},
               "outputs": {"noise": "noise"}, "channels": 2, "params": {}}
    whole = [{"model": "snapshotter", "kind": "snapshot", "inputs": {"update": "update"},
              "outputs": {"windows": "windows"}, "channels": CHANNELS, "params": {}},
             {"model": "deepclean", "kind": "network", "inputs": {"windows": "windows"},
              "outputs": {"prediction": "prediction"}, "channels": 0, "params": {}}, average]
    streamed = [{"model": "deepclean", "kind": "streamed", "inputs": {"update": "update"},
                 "outputs": {"prediction": "prediction"}, "channels": CHANNELS,
                 "params": {"network": "deepclean"}}, average]
    by_window = ModeStream(whole, kernel, stride, ["noise"],
                           {"deepclean": _GatheredGraphs(sessions)})
    by_stream = ModeStream(streamed, kernel, stride, ["noise"],
                           {"deepclean": open_streamed_deepclean(directory)})
    samples = samples_of(40, stride)
    reference, values, at = [], [], 0
    for size in [3, 5, 1, 7, 0] * 2 + [3, 5, 1, 7, 8]:  # 40 strides, empty requests too
        chunk = samples[:, at * stride : (at + size) * stride]
        reference.append(by_window.update(chunk)["noise"])
        values.append(by_stream.update(chunk)["noise"])
        at += size
    reference, values = np.concatenate(reference, axis=1), np.concatenate(values, axis=1)
    assert values.shape == reference.shape == (2, 40 * stride)
    error = np.abs(values - reference).max(axis=1) / np.abs(reference).max(axis=1)
    assert error.max() <= TOLERANCE, error
