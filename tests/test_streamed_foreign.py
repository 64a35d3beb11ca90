"""Graphs of other architectures cut into stream layers from their own ONNX operators
(``repository/streamed_foreign.py``): streamed, they give what the graph gives on whole
windows, run by onnxruntime; what cannot be cut is named."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from onnx import numpy_helper

from offline_iaas.errors import NotStreamable
from offline_iaas.models.weights import export_onnx
from offline_iaas.repository.backend.streamed_network import Conv, open_streamed_network
from offline_iaas.repository.streamed_foreign import cut_into_stream, write_cut
from tests.helpers import a_sample_late, relative_difference, save_traced
from tests.test_recognised_graphs import ResNetShaped

KERNEL = 192
IFOS = 2
BOUND = 1e-5
"""Streamed against whole windows, relative to the largest |statistic|."""


def _randomised(network: torch.nn.Module, seed: int) -> torch.nn.Module:
    """``network`` with random BatchNorm statistics and affine terms (so that none is the
    identity), in eval mode."""
    generator = torch.Generator().manual_seed(seed)
    for module in network.modules():
        if isinstance(module, torch.nn.BatchNorm1d):
            count = module.num_features
            module.running_mean.copy_(0.3 * torch.randn(count, generator=generator))
            module.running_var.copy_(0.5 + torch.rand(count, generator=generator))
            module.weight.data.copy_(1 + 0.3 * torch.randn(count, generator=generator))
            module.bias.data.copy_(0.3 * torch.randn(count, generator=generator))
    return network.eval()


class Branchy(torch.nn.Module):
    """What else a user's graph holds: its input standardised (not zero on the stream's
    zeros), a dilated convolution, a gate (``x * sigmoid(x)``:
    a tensor two operators read), two branches joined by ``Concat``, a BatchNorm after the
    join (not folded into a convolution), ml4gw's pool (``AdaptiveAvgPool1d(1)``, flatten)
    and a head ending in a sigmoid."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Conv1d(IFOS, 6, 5, stride=2, padding=2)
        self.dilated = torch.nn.Conv1d(6, 4, 3, padding=2, dilation=2)
        self.strided = torch.nn.Conv1d(6, 4, 3, stride=1, padding=1)
        self.norm = torch.nn.BatchNorm1d(8)
        self.down = torch.nn.AvgPool1d(2, stride=2)
        self.pool = torch.nn.AdaptiveAvgPool1d(1)
        self.head = torch.nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem((x * 1e21 - 0.25) / 1.5)  # a standardisation: not zero at zero
        x = x * torch.sigmoid(x)
        x = torch.cat([self.dilated(x), torch.relu(self.strided(x))], dim=1)
        x = self.down(torch.relu(self.norm(x)))
        return torch.sigmoid(self.head(torch.flatten(self.pool(x), 1)))


def _onnx(network: torch.nn.Module, path: Path) -> onnx.ModelProto:
    return onnx.load(str(export_onnx(network, path, "windows", "statistic", (1, IFOS, KERNEL))))


def _whole_windows(model: onnx.ModelProto, stream: np.ndarray, stride: int, count: int
                   ) -> np.ndarray:
    """The graph on each window of ``stream`` (K zeros first, as a stream starts), by
    onnxruntime: the definition the streamed graphs are checked against."""
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    windows = np.stack([stream[:, (j + 1) * stride : (j + 1) * stride + KERNEL]
                        for j in range(count)])
    return session.run(None, {"windows": windows})[0].reshape(-1)


def _streamed(directory: Path, samples: np.ndarray, stride: int) -> np.ndarray:
    """The cut graphs on ``samples``, sent in requests of 3, 1, 5, 2, ... strides."""
    network = open_streamed_network(directory)
    state, out, first = network.initial_state(), [], 0
    sizes = iter([3, 1, 5, 2] * 100)
    while first < samples.shape[1]:
        end = min(samples.shape[1], first + next(sizes) * stride)
        out.append(network.update(state, samples[:, first:end]))
        first = end
    return np.concatenate(out)


@pytest.mark.parametrize(("name", "stride"), [("resnet", 16), ("resnet", 6), ("branchy", 8),
                                              ("branchy", 6)])
def test_a_graph_of_another_architecture_streams_what_it_gives_on_whole_windows(
        tmp_path: Path, name: str, stride: int) -> None:
    """ml4gw's ``ResNet1D`` shape with BatchNorm and ``Branchy``, on and off their grids
    (both of cumulative stride 4: a stride of 6 samples puts the windows on 2 phases), every
    window against the whole-window graph; a sample late fails."""
    torch.manual_seed(5)
    network = _randomised(ResNetShaped(torch.nn.BatchNorm1d) if name == "resnet"
                          else Branchy(), 6)
    model = _onnx(network, tmp_path / f"{name}.onnx")
    cut = cut_into_stream(model, IFOS, KERNEL, "statistic", name)
    directory = write_cut(cut, model, IFOS, KERNEL, stride, "statistic", tmp_path / "cut", name)
    rng = np.random.default_rng(11)
    count = 60
    samples = (1e-21 * rng.standard_normal((IFOS, count * stride))).astype(np.float32)
    stream = np.concatenate([np.zeros((IFOS, KERNEL), np.float32), samples], axis=1)
    whole = _whole_windows(model, stream, stride, count)
    streamed = _streamed(directory, samples, stride)
    print(f"{name} at stride {stride}: {len(cut.nodes)} stream layers, relative difference "
          f"{relative_difference(streamed, whole):.2e}")
    assert streamed.shape == whole.shape and np.std(whole) > 1e-3 * np.abs(whole).max()
    assert relative_difference(streamed, whole) <= BOUND
    late = a_sample_late(stream)
    assert relative_difference(streamed, _whole_windows(model, late, stride, count)) > 100 * BOUND


def test_the_cut_of_the_resnet_is_its_layers_each_with_what_follows_it(tmp_path: Path) -> None:
    model = _onnx(_randomised(ResNetShaped(torch.nn.BatchNorm1d), 1), tmp_path / "r.onnx")
    cut = cut_into_stream(model, IFOS, KERNEL, "statistic", "r.onnx")
    names = [node.name for node in cut.nodes]
    assert [(node.inputs, node.conv and node.conv.spec()) for node in cut.nodes] == [
        (("whitened",), ["conv", 1, 1, 0]),  # the input scale, on each raw sample
        ((names[0],), ["conv", 7, 2, 3]),  # the stem, its BatchNorm folded, its ReLU
        ((names[1],), ["conv", 3, 2, 1]),  # the max pool
        ((names[2],), ["conv", 3, 1, 1]),
        ((names[3],), ["conv", 3, 1, 1]),
        ((names[2], names[4]), None)]  # the residual sum and its ReLU
    assert set(cut.graphs) == {"whitened", "edges", "head", *names}
    assert [op.op_type for op in cut.graphs["whitened"].graph.node] == ["Identity"]
    assert [op.op_type for op in cut.graphs[names[0]].graph.node
            if op.op_type != "Constant"] == ["Mul", "Identity"]


def test_a_cut_that_misreads_a_layer_is_caught_before_it_is_written(tmp_path: Path) -> None:
    """Negative controls of the probe check: a layer's taps reversed (its geometry kept; the
    statistic offset by 300, far beyond its spread over windows, so that the bound must be
    the spread's), and its padding one sample more (the layers no longer fit)."""
    model = _onnx(_randomised(Offset(), 1), tmp_path / "r.onnx")
    cut = cut_into_stream(model, IFOS, KERNEL, "statistic", "r.onnx")
    third = next(index for index, node in enumerate(cut.nodes)
                 if node.conv and node.conv.spec() == ["conv", 3, 1, 1])
    layer = cut.graphs[cut.nodes[third].name].graph
    (weight,) = [i for i in layer.initializer if len(i.dims) == 3]
    weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight)[..., ::-1].copy(),
                                            weight.name))
    with pytest.raises(NotStreamable, match=r"^r.onnx: so cut, it differs from the graph on "
                       r"the whole windows of a probe of amplitude 1e-21 by"):
        write_cut(cut, model, IFOS, KERNEL, 16, "statistic", tmp_path / "cut", "r.onnx")
    cut = cut_into_stream(model, IFOS, KERNEL, "statistic", "r.onnx")
    node = cut.nodes[third]
    cut.nodes[third] = type(node)(node.name, node.inputs, Conv(3, 1, 2))
    with pytest.raises(NotStreamable, match=r"^r.onnx: so cut, its stream layers do not run "
                       r"together \(ValueError: n005_add: its inputs have different lengths"):
        write_cut(cut, model, IFOS, KERNEL, 16, "statistic", tmp_path / "cut", "r.onnx")
    assert not (tmp_path / "cut").exists()
    assert not any(path.name.startswith(".cut-") for path in tmp_path.iterdir())


class Offset(ResNetShaped):
    """The ResNet's statistic offset by 300."""

    def __init__(self) -> None:
        super().__init__(torch.nn.BatchNorm1d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) + 300


class MaxPooled(torch.nn.Module):
    """A classifier pooled by the window's maximum."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(IFOS, 4, 5, padding=2)
        self.head = torch.nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.conv(x * 1e21)).amax(-1))


class Dense(torch.nn.Module):
    """A dense layer over the window's samples."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(IFOS, 2, 5, stride=4, padding=2)
        self.head = torch.nn.Linear(2 * KERNEL // 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.conv(x * 1e21), 1))


@pytest.mark.parametrize(("network", "named"), [
    (MaxPooled, r"ReduceMax '[^']*' is none of what stream layers are cut from \(convolutions"),
    (Dense, r"Flatten '[^']*' is none of what stream layers are cut from \(convolutions")])
def test_an_operator_that_reads_the_samples_otherwise_stops_the_cut_by_name(
        tmp_path: Path, network, named: str) -> None:
    model = _onnx(network().eval(), tmp_path / "g.onnx")
    with pytest.raises(NotStreamable, match=r"^g.onnx: " + named):
        cut_into_stream(model, IFOS, KERNEL, "statistic", "g.onnx")


def test_a_torchscript_graph_of_another_architecture_is_converted_and_cut(tmp_path: Path
                                                                          ) -> None:
    """``export_campaign_network`` on a traced ResNet: read as ONNX, cut, and streamed equal
    to the TorchScript module itself on every window; the converted file is not left."""
    from types import SimpleNamespace

    from offline_iaas.science.bbhnet.streamed import export_campaign_network

    network = _randomised(ResNetShaped(torch.nn.BatchNorm1d), 3)
    weights = tmp_path / "weights"
    weights.mkdir()
    save_traced(network, weights / "bbhnet.ts", (2, IFOS, KERNEL))
    stride, count = 16, 40
    config = SimpleNamespace(ifos=["H1", "L1"], kernel_samples=KERNEL, stride_samples=stride)
    directory = export_campaign_network(config, weights, tmp_path)
    assert directory == tmp_path / "bbhnet.streamed"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["bbhnet.streamed", "weights"]
    samples = (1e-21 * np.random.default_rng(4).standard_normal((IFOS, count * stride))
               ).astype(np.float32)
    stream = np.concatenate([np.zeros((IFOS, KERNEL), np.float32), samples], axis=1)

    def whole(stream: np.ndarray) -> np.ndarray:
        windows = np.stack([stream[:, (j + 1) * stride : (j + 1) * stride + KERNEL]
                            for j in range(count)])
        with torch.no_grad():
            return network(torch.from_numpy(windows)).numpy().reshape(-1)

    streamed = _streamed(directory, samples, stride)
    assert relative_difference(streamed, whole(stream)) <= BOUND
    late = a_sample_late(stream)
    assert relative_difference(streamed, whole(late)) > 100 * BOUND


class TwoOutputs(torch.nn.Module):
    """A probability beside the statistic (``[n, 1]``, as the field's classifiers end)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv1d(IFOS, 4, 5, padding=2)
        self.head = torch.nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        statistic = self.head(torch.tanh(self.conv(x * 1e21)).mean(-1))
        return 100 * torch.sigmoid(statistic), statistic


class FeaturesOut(TwoOutputs):
    """The statistic, and the feature map beside it (a stream tensor as an output)."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = torch.tanh(self.conv(x * 1e21))
        return features, self.head(features.mean(-1))


def _exported(network: torch.nn.Module, path: Path, outputs: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.onnx.export(network.eval(), (torch.zeros(1, IFOS, KERNEL),), str(path),
                      input_names=["windows"], output_names=outputs, opset_version=17,
                      dynamic_axes={name: {0: "batch"} for name in ["windows", *outputs]},
                      dynamo=False)
    return path


def test_the_campaign_statistic_is_streamed_by_its_name_beside_other_outputs(
        tmp_path: Path) -> None:
    """Graphs whose first output is not the statistic (a probability; the feature map, a
    stream tensor): the cut streams ``statistic``, as the whole-window server reads it."""
    from types import SimpleNamespace

    from offline_iaas.science.bbhnet.streamed import export_campaign_network

    stride, count = 8, 30
    config = SimpleNamespace(ifos=["H1", "L1"], kernel_samples=KERNEL, stride_samples=stride)
    samples = (1e-21 * np.random.default_rng(3).standard_normal((IFOS, count * stride))
               ).astype(np.float32)
    stream = np.concatenate([np.zeros((IFOS, KERNEL), np.float32), samples], axis=1)
    windows = np.stack([stream[:, (j + 1) * stride : (j + 1) * stride + KERNEL]
                        for j in range(count)])
    for name, network, outputs in (("two", TwoOutputs, ["prob", "statistic"]),
                                   ("features", FeaturesOut, ["features", "statistic"])):
        torch.manual_seed(9)
        model = _exported(network(), tmp_path / name / "bbhnet.onnx", outputs)
        directory = export_campaign_network(config, model.parent, tmp_path / name)
        session = onnxruntime.InferenceSession(str(model), providers=["CPUExecutionProvider"])
        whole = session.run(["statistic"], {"windows": windows})[0].reshape(-1)
        streamed = _streamed(directory, samples, stride)
        assert relative_difference(streamed, whole) <= BOUND, name
        other = session.run([outputs[0]], {"windows": windows})[0].reshape(len(whole), -1)
        assert relative_difference(streamed, other[:, 0]) > 100 * BOUND, name  # control


def _hand_written(nodes: list, opset_version: int = 17) -> onnx.ModelProto:
    """A graph written with ``onnx.helper``: windows ``[n, 2, K]`` → ``statistic [n, 1]``,
    through a scale, a convolution of 5 taps (weights ``W``, ``B``) and a linear head."""
    from onnx import TensorProto, helper

    rng = np.random.default_rng(2)
    constants = {"scale": np.array([1e21], np.float32),
                 "W": (0.3 * rng.standard_normal((4, IFOS, 5))).astype(np.float32),
                 "B": (0.1 * rng.standard_normal(4)).astype(np.float32),
                 "Wh": rng.standard_normal((1, 4)).astype(np.float32),
                 "Bh": np.array([0.1], np.float32)}
    graph = helper.make_graph(
        nodes, "hand", [helper.make_tensor_value_info("windows", TensorProto.FLOAT,
                                                      ["n", IFOS, KERNEL])],
        [helper.make_tensor_value_info("statistic", TensorProto.FLOAT, ["n", 1])],
        [numpy_helper.from_array(value, name) for name, value in constants.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset_version)])
    onnx.checker.check_model(model)
    return model


def test_hand_written_graphs_stream_whatever_their_tensor_names_and_opset(
        tmp_path: Path) -> None:
    """Tensors named as the cut graphs' own (``x``, ``y``, ``column``, ``statistic_column``),
    and opset 18's ReduceMean reading its axes from a ``Constant`` of ints."""
    from onnx import helper

    named = _hand_written([
        helper.make_node("Mul", ["windows", "scale"], ["x"]),
        helper.make_node("Conv", ["x", "W", "B"], ["y"], pads=[2, 2]),
        helper.make_node("ReduceMean", ["y"], ["column"], axes=[2], keepdims=0),
        helper.make_node("Gemm", ["column", "Wh", "Bh"], ["statistic_column"], transB=1),
        helper.make_node("Identity", ["statistic_column"], ["statistic"])])
    axes = _hand_written([
        helper.make_node("Mul", ["windows", "scale"], ["scaled"]),
        helper.make_node("Conv", ["scaled", "W", "B"], ["features"], pads=[2, 2]),
        helper.make_node("Tanh", ["features"], ["activated"]),
        helper.make_node("Constant", [], ["axes"], value_ints=[-1]),
        helper.make_node("ReduceMean", ["activated", "axes"], ["pooled"], keepdims=0),
        helper.make_node("Gemm", ["pooled", "Wh", "Bh"], ["statistic"], transB=1)], 18)
    stride, count = 8, 40
    samples = (1e-21 * np.random.default_rng(6).standard_normal((IFOS, count * stride))
               ).astype(np.float32)
    stream = np.concatenate([np.zeros((IFOS, KERNEL), np.float32), samples], axis=1)
    for name, model in (("named", named), ("axes", axes)):
        cut = cut_into_stream(model, IFOS, KERNEL, "statistic", name)
        directory = write_cut(cut, model, IFOS, KERNEL, stride, "statistic",
                              tmp_path / name, name)
        whole = _whole_windows(model, stream, stride, count)
        streamed = _streamed(directory, samples, stride)
        assert relative_difference(streamed, whole) <= BOUND, name
        late = a_sample_late(stream)
        assert relative_difference(streamed, _whole_windows(model, late, stride, count)
                                   ) > 100 * BOUND, name  # the control: a sample late
