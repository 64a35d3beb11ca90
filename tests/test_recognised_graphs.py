"""Our networks are recognised inside TorchScript graphs users bring, and streamed
(``models/recognised.py``); a graph that is not one of ours is not: an ONNX graph, a graph
whose parameters are named otherwise, and one with our parameters computing something else."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from offline_iaas.errors import NotStreamable, WholeWindowLayer
from offline_iaas.models.recognised import per_window_layer, streamable_network
from offline_iaas.models.weights import export_onnx, load_network
from offline_iaas.science.bbhnet.network import BBHnet
from offline_iaas.science.deepclean.network import DeepClean
from tests.helpers import save_traced
from tests.test_streamed_bbhnet import random_bbhnet

KERNEL = 192
BBHNET = {"ifos": 2, "kernel_samples": KERNEL}


class Doubled(BBHnet):
    """BBHnet's parameters, twice its statistic."""

    def forward(self, strain: torch.Tensor) -> torch.Tensor:
        return 2 * super().forward(strain)


def _probe() -> torch.Tensor:
    rng = np.random.default_rng(7)
    return torch.from_numpy(rng.standard_normal((5, 2, KERNEL)).astype(np.float32))


def test_a_traced_bbhnet_is_rebuilt_with_its_layers_and_computes_what_the_graph_does(
        tmp_path: Path) -> None:
    network = random_bbhnet(33, 8, 3, KERNEL)
    path = save_traced(network, tmp_path / "bbhnet.ts", (2, 2, KERNEL))
    loaded = load_network("bbhnet", path, BBHNET)
    assert not isinstance(loaded, BBHnet)  # the graph, as the whole-window path serves it
    rebuilt = streamable_network("bbhnet", path, loaded, BBHNET)
    assert isinstance(rebuilt, BBHnet) and not rebuilt.training
    for name, value in network.state_dict().items():
        assert torch.equal(rebuilt.state_dict()[name], value), name
    with torch.no_grad():
        graph, ours = loaded(_probe()).reshape(-1), rebuilt(_probe()).reshape(-1)
    assert float((graph - ours).abs().max()) <= 1e-6 * float(graph.abs().max())
    assert float(graph.std()) > 0.1  # the statistic depends on the data
    # a state_dict's network is taken as it is
    assert streamable_network("bbhnet", path, network, BBHNET) is network


def test_graphs_that_are_not_ours_are_not_streamed_and_say_why(tmp_path: Path) -> None:
    network = random_bbhnet(33, 8, 3, KERNEL)
    torch.manual_seed(1)
    other = save_traced(ResNetShaped(torch.nn.BatchNorm1d).eval(), tmp_path / "other.ts",
                        (2, 2, KERNEL))
    with pytest.raises(NotStreamable, match="other.ts: a TorchScript graph whose "
                       "parameters are not BBHnet's, and model.streamed"):
        streamable_network("bbhnet", other, load_network("bbhnet", other, BBHNET), BBHNET)

    doubled = Doubled(2, np.ones((2, 33)), 1.0, 8, 3)
    doubled.load_state_dict(network.state_dict())
    path = save_traced(doubled, tmp_path / "doubled.ts", (2, 2, KERNEL))
    with pytest.raises(NotStreamable, match="doubled.ts: a TorchScript graph with BBHnet's "
                       "parameters that computes something else"):
        streamable_network("bbhnet", path, load_network("bbhnet", path, BBHNET), BBHNET)

    onnx = export_onnx(doubled, tmp_path / "doubled.onnx", "windows", "statistic",
                       (1, 2, KERNEL))
    with pytest.raises(NotStreamable, match="doubled.onnx: an ONNX graph with BBHnet's layers "
                       "that computes something else"):
        streamable_network("bbhnet", onnx, load_network("bbhnet", onnx, BBHNET), BBHNET)
    # DeepClean standardising its witnesses otherwise than by one Sub and one Div
    expected = {"witnesses": 3, "kernel_samples": 256}
    deepclean = export_onnx(Unstandardised(3, [0.0] * 3, [1.0] * 3, 0.0, 1.0).eval(),
                            tmp_path / "deepclean-H1.onnx", "windows", "prediction", (1, 3, 256))
    with pytest.raises(NotStreamable, match="deepclean-H1.onnx: an ONNX graph whose layers "
                       "are not DeepClean's \\(its input is not standardised"):
        streamable_network("deepclean", deepclean,
                           load_network("deepclean", deepclean, expected), expected)


class Unstandardised(DeepClean):
    """DeepClean's layers on witnesses scaled by 2 instead of standardised."""

    def forward(self, witnesses: torch.Tensor) -> torch.Tensor:
        return super().forward(self.witness_std[:, None] * 2 * witnesses
                               + self.witness_mean[:, None])


def test_an_onnx_deepclean_is_rebuilt_with_its_standardisation_and_computes_what_it_does(
        tmp_path: Path) -> None:
    """DeepClean's exporter folds the witnesses' standardisation into unnamed constants and
    the encoder's BatchNorms into their convolutions (the decoder's stay): rebuilt, it
    predicts what the graph does; a sample late does not."""
    import onnxruntime

    from tests.test_streamed_deepclean import random_deepclean

    network = random_deepclean([0, 2, 3], 4)
    expected = {"witnesses": 3, "kernel_samples": 256}
    path = export_onnx(network, tmp_path / "deepclean-H1.onnx", "windows", "prediction",
                       (1, 3, 256))
    rebuilt = streamable_network("deepclean", path, load_network("deepclean", path, expected),
                                 expected)
    assert isinstance(rebuilt, DeepClean) and not rebuilt.training
    assert torch.allclose(rebuilt.witness_std, network.witness_std)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(8)
    data = (network.witness_mean[:, None].numpy() + network.witness_std[:, None].numpy()
            * rng.standard_normal((4, 3, 256))).astype(np.float32)
    graph = session.run(None, {"windows": data})[0]
    with torch.no_grad():
        ours = rebuilt(torch.from_numpy(data)).numpy()
        late = rebuilt(torch.from_numpy(np.roll(data, 1, axis=2))).numpy()
    scale = np.abs(graph).max()
    assert 1e-23 < scale < 1e-19  # strain
    assert np.abs(ours - graph).max() <= 1e-5 * scale
    assert np.abs(late - graph).max() > 1e-3 * scale  # the comparison can fail


def test_an_onnx_bbhnet_is_rebuilt_from_its_folded_layers_and_computes_what_the_graph_does(
        tmp_path: Path) -> None:
    """The exporter folds each BatchNorm into its convolution and renames both: BBHnet is
    rebuilt from the graph's convolutions in call order, and answers as the graph does (run
    by onnxruntime) on data it was not probed with; a sample late does not."""
    import onnxruntime

    network = random_bbhnet(33, 8, 3, KERNEL)
    path = export_onnx(network, tmp_path / "bbhnet.onnx", "windows", "statistic",
                       (1, 2, KERNEL))
    rebuilt = streamable_network("bbhnet", path, load_network("bbhnet", path, BBHNET), BBHNET)
    assert isinstance(rebuilt, BBHnet) and rebuilt is not network and not rebuilt.training
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    data = _probe().numpy()  # random_bbhnet's input scale is 1: unit data
    graph = session.run(None, {"windows": data})[0].reshape(-1)
    with torch.no_grad():
        ours = rebuilt(torch.from_numpy(data)).numpy().reshape(-1)
        late = rebuilt(torch.from_numpy(np.roll(data, 1, axis=2))).numpy().reshape(-1)
    scale = np.abs(graph).max()
    assert np.abs(ours - graph).max() <= 1e-5 * scale
    assert np.abs(late - graph).max() > 1e-3 * scale  # the comparison can fail
    assert float(graph.std()) > 0.1  # the statistic depends on the data


def test_a_traced_deepclean_is_rebuilt_in_a_wrapper_or_not_and_another_is_not(
        tmp_path: Path) -> None:
    expected = {"witnesses": 3, "kernel_samples": 256}
    torch.manual_seed(2)
    network = DeepClean(3, [0.0] * 3, [1.0] * 3, 0.0, 1.0).eval()
    path = save_traced(network, tmp_path / "deepclean-H1.ts", (2, 3, 256))
    rebuilt = streamable_network("deepclean", path, load_network("deepclean", path, expected),
                                 expected)
    assert isinstance(rebuilt, DeepClean)
    for name, value in network.state_dict().items():
        assert torch.equal(rebuilt.state_dict()[name], value), name
    # in a user's wrapper (its names begin with ``inner.``) it is ours still
    wrapped = save_traced(network, tmp_path / "wrapped.ts", (2, 3, 256), wrapped=True)
    unwrapped = streamable_network("deepclean", wrapped,
                                   load_network("deepclean", wrapped, expected), expected)
    for name, value in network.state_dict().items():
        assert torch.equal(unwrapped.state_dict()[name], value), name
    other = save_traced(OtherCleaner(3).eval(), tmp_path / "other.ts", (2, 3, 256))
    with pytest.raises(NotStreamable, match="other.ts: a TorchScript graph whose parameters "
                       "are not DeepClean's, and model.streamed"):
        streamable_network("deepclean", other, load_network("deepclean", other, expected),
                           expected)


class OtherCleaner(torch.nn.Module):
    """A cleaning network of another architecture: witnesses ``[n, W, K]`` → ``[n, K]``."""

    def __init__(self, witnesses: int) -> None:
        super().__init__()
        self.first = torch.nn.Conv1d(witnesses, 4, 7, padding=3)
        self.last = torch.nn.Conv1d(4, 1, 7, padding=3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.last(torch.tanh(self.first(x)))[:, 0]


class WindowNorm(torch.nn.Module):
    """Each channel standardised by its window's own mean and mean square, written out (the
    arithmetic of ml4gw's ``GroupNorm1D`` with a group per channel, its ``ResNet1D``'s
    default norm layer): no ``group_norm`` operator, only reductions over the samples."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(channels))
        self.bias = torch.nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(-1, keepdim=True)
        variance = (x**2).mean(-1, keepdim=True) - mean**2
        return ((x - mean) / (variance + 1e-5) ** 0.5 * self.weight[:, None]
                + self.bias[:, None])


class ResNetShaped(torch.nn.Module):
    """ml4gw's ``ResNet1D`` in small (stem conv k7 stride 2, norm, ReLU, max pool, one basic
    block, mean, linear head: ``[n, ifos, kernel]`` → ``[n, 1]``), its norm layer given:
    ml4gw's default normalises over groups of channels and the window's samples."""

    def __init__(self, norm) -> None:
        super().__init__()
        self.stem = torch.nn.Conv1d(2, 8, 7, stride=2, padding=3, bias=False)
        self.norm0, self.norm1, self.norm2 = norm(8), norm(8), norm(8)
        self.pool = torch.nn.MaxPool1d(3, stride=2, padding=1)
        self.conv1 = torch.nn.Conv1d(8, 8, 3, padding=1, bias=False)
        self.conv2 = torch.nn.Conv1d(8, 8, 3, padding=1, bias=False)
        self.head = torch.nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(torch.relu(self.norm0(self.stem(x * 1e21))))
        y = self.norm2(self.conv2(torch.relu(self.norm1(self.conv1(x)))))
        return self.head(torch.relu(x + y).mean(-1))


@pytest.mark.parametrize("form", ["torchscript", "onnx"])
def test_a_graph_normalising_each_window_by_its_own_statistics_says_so(
        tmp_path: Path, form: str) -> None:
    """A norm over the window (GroupNorm; ml4gw's default, written out as reductions)
    forbids streaming whoever's graph it is, and the reason names it; the same graph with
    BatchNorm (running statistics) is only not ours."""
    torch.manual_seed(3)
    reasons, kinds = {}, {}
    for name, norm in (("group", lambda c: torch.nn.GroupNorm(4, c)), ("window", WindowNorm),
                       ("batch", torch.nn.BatchNorm1d)):
        network = ResNetShaped(norm).eval()
        if form == "torchscript":
            path = save_traced(network, tmp_path / f"{name}.ts", (2, 2, KERNEL))
        else:
            path = export_onnx(network, tmp_path / f"{name}.onnx", "windows", "statistic",
                               (1, 2, KERNEL))
        with pytest.raises(NotStreamable) as refused:
            streamable_network("bbhnet", path, load_network("bbhnet", path, BBHNET), BBHNET)
        reasons[name], kinds[name] = refused.value.reason, type(refused.value)
    assert reasons["group"].startswith(f"{tmp_path / 'group'}")
    assert "a layer that normalises each window by its own statistics (" in reasons["group"]
    assert re.search(r"\((aten::group_norm|GroupNormalization|InstanceNormalization)\)",
                     reasons["group"]), reasons["group"]
    # written out by hand, the norm is found by its reductions over the samples
    assert "a layer that reduces over the window's samples ahead of a later convolution" in \
        reasons["window"], reasons["window"]
    assert re.search(r"\((aten::mean|ReduceMean)\)", reasons["window"]), reasons["window"]
    # the control: running statistics carry from window to window; the graph is just not ours
    # (the campaign then cuts it from its operators: tests/test_streamed_foreign.py)
    said = reasons["batch"].split(": ", 1)[1]  # past the file's path
    assert "normalis" not in said and "reduces" not in said
    assert ("a TorchScript graph whose parameters are not BBHnet's" in reasons["batch"]
            if form == "torchscript" else
            "an ONNX graph whose layers are not BBHnet's" in reasons["batch"]), reasons["batch"]
    assert kinds == {"group": WholeWindowLayer, "window": WholeWindowLayer,
                     "batch": NotStreamable}


def test_our_graphs_have_no_layer_that_needs_the_whole_window(tmp_path: Path) -> None:
    network = random_bbhnet(33, 8, 3, KERNEL)
    traced = save_traced(network, tmp_path / "bbhnet.ts", (2, 2, KERNEL))
    onnx = export_onnx(network, tmp_path / "bbhnet.onnx", "windows", "statistic",
                       (1, 2, KERNEL))
    deepclean = save_traced(DeepClean(3, [0.0] * 3, [1.0] * 3, 0.0, 1.0).eval(),
                            tmp_path / "deepclean.ts", (2, 3, 256))
    assert per_window_layer(traced, "TorchScript") is None
    assert per_window_layer(onnx, "ONNX") is None
    assert per_window_layer(deepclean, "TorchScript") is None
