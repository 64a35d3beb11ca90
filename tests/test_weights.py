"""User weight files: state_dict, TorchScript and ONNX accepted; wrong ones refused clearly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from offline_iaas.errors import ModelError, exit_code
from offline_iaas.models.weights import export_onnx, load_network
from offline_iaas.science.bbhnet.network import BBHnet
from offline_iaas.science.deepclean.network import DeepClean
from tests.error_catalogue import documented

DC = {"witnesses": 2, "kernel_samples": 64}
BBH = {"ifos": 2, "kernel_samples": 256, "width": 4, "depth": 2}


def deepclean(witnesses: int = 2) -> DeepClean:
    torch.manual_seed(0)
    return DeepClean(witnesses, [1.0] * witnesses, [2.0] * witnesses, 0.0, 3.0).eval()


def bbhnet(width: int = 4, depth: int = 2, ifos: int = 2, taps: int = 33) -> BBHnet:
    torch.manual_seed(0)
    return BBHnet(ifos, np.ones((ifos, taps)) / taps, 1.0, width=width, depth=depth).eval()


def save(obj: object, path: Path) -> Path:
    torch.save(obj, path)
    return path


def test_state_dict_is_loaded_with_its_statistics(tmp_path: Path) -> None:
    model = deepclean()
    loaded = load_network("deepclean", save(model.state_dict(), tmp_path / "dc.pt"), DC)
    assert isinstance(loaded, DeepClean) and not loaded.training
    x = torch.randn(3, 2, 64)
    with torch.no_grad():
        np.testing.assert_array_equal(loaded(x).numpy(), model(x).numpy())
    assert float(loaded.strain_std) == 3.0


def test_bbhnet_state_dict_keeps_its_whitening_length(tmp_path: Path) -> None:
    model = bbhnet(taps=33)
    loaded = load_network("bbhnet", save(model.state_dict(), tmp_path / "b.pth"), BBH)
    assert isinstance(loaded, BBHnet) and loaded.whitening_taps == 33
    checkpoint = save({"state_dict": model.state_dict(), "epoch": 3}, tmp_path / "ckpt.pt")
    assert isinstance(load_network("bbhnet", checkpoint, BBH), BBHnet)


def test_wrong_channel_count_names_expected_and_found_shapes(tmp_path: Path) -> None:
    path = save(deepclean(21).state_dict(), tmp_path / "x.pt")
    with pytest.raises(ModelError) as err:
        load_network("deepclean", path, DC)
    assert str(err.value).startswith(
        f"deepclean weights {path}: input_conv.weight has shape (21, 21, 7), the campaign "
        "needs (2, 2, 7) (2 witness channels)"
    )
    assert "more" in str(err.value)  # every layer touching the witnesses is wrong too


def test_wrong_width_names_the_parameter(tmp_path: Path) -> None:
    path = save(bbhnet(width=8).state_dict(), tmp_path / "wide.pt")
    with pytest.raises(ModelError, match=r"stem\.0\.weight has shape \(8, 2, 7\), the campaign "
                       r"needs \(4, 2, 7\) \(2 interferometers, width 4, depth 2\)"):
        load_network("bbhnet", path, BBH)
    path = save(bbhnet(ifos=3).state_dict(), tmp_path / "three.pt")
    with pytest.raises(ModelError, match=r"stem\.0\.weight has shape \(4, 3, 7\), the campaign "
                       r"needs \(4, 2, 7\) .*\(also whitening\)"):
        load_network("bbhnet", path, BBH)
    path = save(bbhnet(taps=300).state_dict(), tmp_path / "long.pt")
    with pytest.raises(ModelError, match="300 taps"):
        load_network("bbhnet", path, BBH)


def test_other_architecture_is_refused(tmp_path: Path) -> None:
    path = save(bbhnet().state_dict(), tmp_path / "bbh.pt")
    with pytest.raises(ModelError, match="not a deepclean of the campaign's architecture.*"
                       "missing .*input_conv.weight"):
        load_network("deepclean", path, DC)
    path = save(bbhnet(depth=3).state_dict(), tmp_path / "deep.pt")
    with pytest.raises(ModelError, match=r"unexpected stages\.2"):
        load_network("bbhnet", path, BBH)


@pytest.mark.parametrize(
    "content",
    [b"hello, I am not a model\n", b"", bytes(range(256)) * 4, b"\x08\x07garbage",
     b"\x80\x02not really a pickle" * 4],
    ids=["text", "empty", "bytes", "protobuf-ish", "pickle-ish"],
)
def test_not_a_model(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "weights.pt"
    path.write_bytes(content)
    with pytest.raises(ModelError, match="is not a torch state_dict, TorchScript or ONNX file"):
        load_network("deepclean", path, DC)


def test_non_tensor_pickle_and_whole_module(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="not a state_dict"):
        load_network("deepclean", save([1, 2, 3], tmp_path / "list.pt"), DC)
    with pytest.raises(ModelError, match=r"pickled torch module \(torch.save\(model\)\), not a "
                       r"state_dict .*: save torch.save\(model.state_dict\(\), path\) instead, "
                       "or a TorchScript or ONNX file$") as caught:
        load_network("deepclean", save(deepclean(), tmp_path / "deepclean-H1.pt"), DC)
    documented("weights-pickled-module-of-a-network", str(caught.value), {tmp_path: "W"},
               exit_code=exit_code(caught.value))
    # control: its state_dict is its weights
    load_network("deepclean", save(deepclean().state_dict(), tmp_path / "deepclean-H1.pt"), DC)
    with pytest.raises(ModelError, match="file not found"):
        load_network("deepclean", tmp_path / "missing.pt", DC)
    with pytest.raises(ModelError, match="unknown network kind"):
        load_network("resnet", tmp_path / "missing.pt", DC)


def test_torchscript_accepted_and_checked(tmp_path: Path) -> None:
    path = tmp_path / "dc.ts"
    torch.jit.save(torch.jit.trace(deepclean(), torch.zeros(1, 2, 64)), path)
    loaded = load_network("deepclean", path, DC)
    assert isinstance(loaded, torch.jit.ScriptModule)
    wrong = tmp_path / "dc21.ts"
    torch.jit.save(torch.jit.trace(deepclean(21), torch.zeros(1, 21, 64)), wrong)
    with pytest.raises(ModelError, match=r"input_conv.weight has shape \(21, 21, 7\), the "
                       r"campaign needs \(2, 2, 7\)"):
        load_network("deepclean", wrong, DC)


class _OneChannel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(2, 1, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def test_foreign_torchscript_checked_by_running_it(tmp_path: Path) -> None:
    path = tmp_path / "foreign.pt"
    torch.jit.save(torch.jit.script(_OneChannel()), path)
    with pytest.raises(ModelError, match=r"on input \(2, 2, 64\) returns \(2, 1, 64\), the "
                       r"campaign needs \(2, 64\)"):
        load_network("deepclean", path, DC)
    with pytest.raises(ModelError, match=r"fails on the campaign's input shape \(2, 3, 64\)"):
        load_network("deepclean", path, {"witnesses": 3, "kernel_samples": 64})


class _SingletonClassAxis(nn.Module):
    """An aframe-style classifier: ``[n, ifos, kernel]`` → ``[n, 1]`` (ml4gw's ResNet1D)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(2, 4, 7, padding=3)
        self.fc = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.conv(x).mean(-1))


def test_a_singleton_class_axis_is_dropped(tmp_path: Path) -> None:
    torch.manual_seed(0)
    net = _SingletonClassAxis().eval()
    path = tmp_path / "aframe.pt"
    torch.jit.save(torch.jit.script(net), path)
    loaded = load_network("bbhnet", path, BBH)
    x = torch.randn(3, 2, 256)
    with torch.no_grad():
        assert loaded(x).shape == (3,)
        torch.testing.assert_close(loaded(x), net(x)[:, 0])
    graph = export_onnx(loaded, tmp_path / "model.onnx", "windows", "statistic", (1, 2, 256))
    assert load_network("bbhnet", graph, BBH) == graph  # the exported graph returns [n]


def test_an_onnx_singleton_class_axis_is_squeezed(tmp_path: Path) -> None:
    import onnxruntime

    torch.manual_seed(0)
    net = _SingletonClassAxis().eval()
    source = export_onnx(net, tmp_path / "aframe.onnx", "windows", "statistic", (1, 2, 256))
    loaded = load_network("bbhnet", source, BBH)
    graph = export_onnx(loaded, tmp_path / "repo" / "model.onnx", "windows", "statistic",
                        (1, 2, 256))
    x = torch.randn(3, 2, 256)
    session = onnxruntime.InferenceSession(str(graph), providers=["CPUExecutionProvider"])
    out = session.run(["statistic"], {"windows": x.numpy()})[0]
    assert out.shape == (3,)
    with torch.no_grad():
        np.testing.assert_allclose(out, net(x)[:, 0].numpy(), rtol=1e-5, atol=1e-6, equal_nan=False)
    assert load_network("bbhnet", graph, BBH) == graph  # the written graph returns [n]
    # an axis of two is a shape the campaign cannot take, not a class axis to drop
    class TwoClasses(_SingletonClassAxis):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 2)

    two = export_onnx(TwoClasses().eval(), tmp_path / "two.onnx", "windows", "statistic",
                      (1, 2, 256))
    with pytest.raises(ModelError, match=r"'statistic' has shape \(batch, 2\)"):
        load_network("bbhnet", two, BBH)


def test_onnx_accepted_and_copied_as_is(tmp_path: Path) -> None:
    source = export_onnx(bbhnet(), tmp_path / "user.onnx", "windows", "statistic", (1, 2, 256))
    assert load_network("bbhnet", source, BBH) == source
    copy = export_onnx(source, tmp_path / "repo" / "model.onnx", "windows", "statistic",
                       (1, 2, 256))
    assert copy.read_bytes() == source.read_bytes()
    with pytest.raises(ModelError, match="needs input 'strain'"):
        export_onnx(source, tmp_path / "x.onnx", "strain", "statistic", (1, 2, 256))


def test_onnx_wrong_shapes_and_names(tmp_path: Path) -> None:
    path = export_onnx(deepclean(21), tmp_path / "dc21.onnx", "windows", "prediction",
                       (1, 21, 64))
    with pytest.raises(ModelError, match=r"'windows' has shape \(batch, 21, 64\), the campaign "
                       r"needs \(batch, 2, 64\) \(2 witness channels\)"):
        load_network("deepclean", path, DC)
    with pytest.raises(ModelError, match="the campaign needs input 'witnesses'"):
        load_network("deepclean", path, {**DC, "witnesses": 21, "input_name": "witnesses"})
    longer = {"witnesses": 21, "kernel_samples": 128}
    with pytest.raises(ModelError, match=r"\(batch, 21, 64\), the campaign needs "
                       r"\(batch, 21, 128\)"):
        load_network("deepclean", path, longer)


def test_onnx_fixed_batch_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "fixed.onnx"
    torch.onnx.export(deepclean(), (torch.zeros(4, 2, 64),), str(path), input_names=["windows"],
                      output_names=["prediction"], dynamo=False)
    with pytest.raises(ModelError, match="fixed batch size 4"):
        load_network("deepclean", path, DC)


@pytest.mark.parametrize("kind", ["deepclean", "bbhnet"])
def test_a_directory_where_a_weight_file_goes_is_named_a_directory_not_missing(
        tmp_path: Path, kind: str) -> None:
    """"file not found" before, of a path that was there."""
    network = deepclean() if kind == "deepclean" else bbhnet()
    expected = DC if kind == "deepclean" else BBH
    directory = tmp_path / f"{kind}.pt"
    directory.mkdir()
    with pytest.raises(ModelError) as err:
        load_network(kind, directory, expected)
    assert str(err.value) == (
        f"{kind} weights {directory}: is a directory, not a weight file (a state_dict saved "
        "with torch.save(model.state_dict(), path), or a TorchScript or ONNX file)")
    # control: the network's state_dict beside it loads
    loaded = load_network(kind, save(network.state_dict(), tmp_path / "w.pt"), expected)
    assert isinstance(loaded, type(network))
