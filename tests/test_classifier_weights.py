"""``export`` of the classifier mode given a weight file that is not the classifier's
state_dict: refused in one line naming the file, through the real command line (in-process),
never with torch's own text (whose advice, for a pickled object, is to allow its code)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from offline_iaas.cli import main
from offline_iaas.errors import ModelError, exit_code
from offline_iaas.science.classifier.network import Classifier
from tests.error_catalogue import documented

PREFIX = "offline-iaas export: error: "
UNPRIVILEGED = (["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
                if os.geteuid() == 0 else [])
"""As root, a command without the capabilities that read through a file's mode."""


class Settings:
    """An object a checkpoint may pickle beside its tensors (not a module)."""

    def __init__(self) -> None:
        self.width = 8


def saved(value: object, path: Path) -> Path:
    torch.save(value, path)
    return path


def export(config: Path, weights: Path, capsys: pytest.CaptureFixture) -> tuple[int, list[str]]:
    """``offline-iaas export <config> --weights <weights>``: its exit code and stderr lines."""
    capsys.readouterr()
    code = main(["export", str(config), "--weights", str(weights)])
    return code, capsys.readouterr().err.strip().splitlines()


def refusal(lines: list[str]) -> str:
    """The one error line's message, without the command's prefix."""
    assert len(lines) == 1 and lines[0].startswith(PREFIX), lines
    return lines[0].removeprefix(PREFIX)


def test_a_pickled_module_is_refused_saying_to_save_its_state_dict(
        small_config_file: Path, capsys: pytest.CaptureFixture) -> None:
    ws = small_config_file.parent
    network = Classifier(2)
    module = saved(network, ws / "module.pt")
    legacy = ws / "module-legacy.pt"  # torch's format before 1.6: one pickle, not a zip
    torch.save(network, legacy, _use_new_zipfile_serialization=False)
    for path in (legacy, module):
        code, lines = export(small_config_file, path, capsys)
        message = refusal(lines)
        assert code == exit_code(ModelError), lines
        assert message.startswith(f"{path}: holds a pickled torch module (torch.save(model)), "
                                  "not a state_dict"), message
        assert "torch.save(model.state_dict(), path)" in message, message
        assert "add_safe_globals" not in message, message
    documented("weights-pickled-module", message, {ws: "<ws>"}, exit_code=code)
    # control: the same network's state_dict is the classifier's weights
    code, lines = export(small_config_file, saved(network.state_dict(), ws / "state.pt"), capsys)
    assert code == 0, lines


def test_a_pickled_object_that_is_not_a_module_is_named_not_called_a_module(
        small_config_file: Path, capsys: pytest.CaptureFixture) -> None:
    ws = small_config_file.parent
    checkpoint = {"state_dict": Classifier(2).state_dict(), "settings": Settings()}
    path = saved(checkpoint, ws / "checkpoint.pt")
    code, lines = export(small_config_file, path, capsys)
    message = refusal(lines)
    assert code == exit_code(ModelError), lines
    assert f"holds a pickled Python object ({__name__}.Settings)" in message, message
    assert "module" not in message.replace(f"{__name__}.", ""), message
    assert "add_safe_globals" not in message, message
    documented("weights-pickled-object", message, {ws: "<ws>"}, exit_code=code)
    # control: the module pickled alone is called one
    code, lines = export(small_config_file, saved(Classifier(2), ws / "module.pt"), capsys)
    assert "holds a pickled torch module" in refusal(lines), lines


def test_another_networks_state_dict_is_refused_listing_a_few_of_its_names(
        small_config_file: Path, capsys: pytest.CaptureFixture) -> None:
    from offline_iaas.models.weights import build_network

    ws = small_config_file.parent
    state = build_network("bbhnet", {"ifos": 2}).state_dict()
    needed = Classifier(2).state_dict()
    missing, extra = set(needed) - set(state), set(state) - set(needed)
    path = saved(state, ws / "bbhnet.pt")
    code, lines = export(small_config_file, path, capsys)
    message = refusal(lines)
    assert code == exit_code(ModelError), lines
    assert message.startswith(f"{path}: not a classifier state_dict: missing "), message
    assert f" and {len(missing) - 3} more; unexpected " in message, message
    assert message.endswith(f" and {len(extra) - 3} more"), message
    assert len(message.removeprefix(str(path))) < 200, message  # torch listed all: 2.2 kB
    documented("weights-another-network", message, {ws: "<ws>"}, exit_code=code)
    # control: one name missing is named alone, with no count
    del needed["head.bias"]
    code, lines = export(small_config_file, saved(needed, ws / "headless.pt"), capsys)
    assert refusal(lines) == f"{ws / 'headless.pt'}: not a classifier state_dict: missing " \
        "head.bias", lines


def test_a_classifier_of_another_channel_count_or_no_state_dict_is_refused_naming_why(
        small_config_file: Path, capsys: pytest.CaptureFixture) -> None:
    ws = small_config_file.parent
    code, lines = export(small_config_file, saved(Classifier(3).state_dict(), ws / "c3.pt"),
                         capsys)
    message = refusal(lines)
    assert code == exit_code(ModelError), lines
    assert message == (f"{ws / 'c3.pt'}: features.0.weight has shape (8, 3, 7), the campaign "
                       "needs (8, 2, 7) (2 channels)"), message
    documented("classifier-weights-channel-count", message, {ws: "<ws>"}, exit_code=code)
    code, lines = export(small_config_file, saved([1.0, 2.0], ws / "list.pt"), capsys)
    message = refusal(lines)
    assert code == exit_code(ModelError), lines
    documented("weights-not-a-state-dict", message, {ws: "<ws>"}, exit_code=code)
    # control: the campaign's two channels
    code, lines = export(small_config_file, saved(Classifier(2).state_dict(), ws / "c2.pt"),
                         capsys)
    assert code == 0, lines


def test_weights_dir_holds_the_classifiers_file_as_in_the_other_modes(
        small_config_file: Path, capsys: pytest.CaptureFixture) -> None:
    """``--weights DIR`` reads ``DIR/classifier.pt``, as DeepClean and BBHnet read theirs (the
    weights' digest was already taken from there); a directory where that file goes is named
    (Python's ``[Errno 21] Is a directory`` under "not a torch state_dict" before)."""
    ws = small_config_file.parent
    directory = ws / "weights"
    directory.mkdir()
    code, lines = export(small_config_file, directory, capsys)
    assert code == exit_code(ModelError), lines
    assert refusal(lines) == (f"weights {directory}: no file for classifier (looked for "
                              "classifier{.pt,.pth,.ts,.onnx})"), lines
    (directory / "classifier.pt").mkdir()
    code, lines = export(small_config_file, directory, capsys)
    message = refusal(lines)
    assert code == exit_code(ModelError), lines
    assert message == (f"{directory}/classifier.pt: is a directory, not a weight file (a "
                       "state_dict saved with torch.save(model.state_dict(), path))"), message
    documented("weights-is-a-directory", message, {ws: "<ws>"}, exit_code=code)
    # control: a state_dict's file there is the classifier's weights
    (directory / "classifier.pt").rmdir()
    saved(Classifier(2).state_dict(), directory / "classifier.pt")
    code, lines = export(small_config_file, directory, capsys)
    assert code == 0, lines


def test_an_unreadable_weight_file_is_named_with_the_os_reason_not_called_no_state_dict(
        small_config_file: Path) -> None:
    """"not a torch state_dict ([Errno 13] Permission denied: ...)" before; for real: the
    file's mode is 0 and the command cannot read through it."""
    ws = small_config_file.parent
    state = saved(Classifier(2).state_dict(), ws / "state.pt")

    def export_process() -> subprocess.CompletedProcess[str]:
        return subprocess.run([*UNPRIVILEGED, sys.executable, "-m", "offline_iaas.cli",
                               "export", str(small_config_file), "--weights", str(state)],
                              capture_output=True, text=True, timeout=120)

    state.chmod(0)
    try:
        done = export_process()
    finally:
        state.chmod(0o644)
    message = refusal(done.stderr.strip().splitlines())
    assert message == f"{state}: cannot read: Permission denied", message
    assert done.returncode == exit_code(ModelError), done.stderr
    documented("weights-unreadable", message, {ws: "<ws>"}, exit_code=done.returncode)
    # control: the same file, readable, exports (in this process)
    assert main(["export", str(small_config_file), "--weights", str(state)]) == 0


def test_a_torchscript_or_onnx_classifier_is_refused_in_one_line_without_torchs_warning(
        small_config_file: Path, capsys: pytest.CaptureFixture) -> None:
    """The classifier takes a state_dict only: a TorchScript file went to torch.load, which
    printed its UserWarning and relayed its advice to load with weights_only=False ("can result
    in arbitrary code execution"); now the file's kind is told first, from its content."""
    import warnings

    ws = small_config_file.parent
    network = Classifier(2).eval()
    example = torch.zeros(2, 2, 256)
    (ws / "ts").mkdir()
    traced = ws / "ts" / "classifier.pt"  # named as a state_dict: told by content
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.jit.trace(network, example).save(str(traced))
        graph = ws / "classifier.onnx"
        torch.onnx.export(network, (example,), str(graph), input_names=["windows"],
                          output_names=["statistic"], dynamo=False)
    for path, kind in ((traced, "a TorchScript file"), (graph, "an ONNX file")):
        with warnings.catch_warnings(record=True) as shown:
            warnings.simplefilter("always")
            code, lines = export(small_config_file, path.parent if path == traced else path,
                                 capsys)
        message = refusal(lines)
        assert code == exit_code(ModelError), lines
        assert message == (f"{path}: {kind}, not a state_dict: the classifier's weights are a "
                           "state_dict saved with torch.save(model.state_dict(), path) "
                           "(TorchScript and ONNX files are taken for the DeepClean and BBHnet "
                           "networks only)"), message
        assert [str(w.message) for w in shown] == [], shown
    documented("classifier-weights-graph-file", message, {ws: "<ws>"}, exit_code=code)
    # control: the same network's state_dict, in the same directory
    saved(network.state_dict(), traced)
    code, lines = export(small_config_file, traced.parent, capsys)
    assert code == 0, lines


def test_classifier_weights_with_nan_or_inf_are_refused_naming_the_tensor(
        small_config_file: Path, capsys: pytest.CaptureFixture) -> None:
    """Exported before, and served the whole campaign: the failure showed only at the shard
    merge ("holds no finite statistic")."""
    ws = small_config_file.parent
    state = Classifier(2).state_dict()
    state["features.0.weight"][0, 0, 0] = float("nan")
    code, lines = export(small_config_file, saved(state, ws / "nan.pt"), capsys)
    message = refusal(lines)
    assert code == exit_code(ModelError), lines
    assert message.startswith(f"{ws / 'nan.pt'}: tensor features.0.weight holds 1 non-finite "
                              "value of 112 (first: nan)"), message
    documented("weights-not-finite", message, {ws: "<ws>"}, exit_code=code)
    state = Classifier(2).state_dict()
    state["input_scale"].fill_(float("inf"))  # a buffer
    code, lines = export(small_config_file, saved(state, ws / "inf.pt"), capsys)
    assert code == exit_code(ModelError), lines
    assert refusal(lines).startswith(f"{ws / 'inf.pt'}: tensor input_scale holds 1 non-finite "
                                     "value of 1 (first: inf)"), lines
    assert not (ws / "model-repository").exists()
    # control: the finite state_dict
    code, lines = export(small_config_file, saved(Classifier(2).state_dict(), ws / "ok.pt"),
                         capsys)
    assert code == 0, lines


@pytest.mark.parametrize("kind", ["sparse", "meta"])
def test_a_sparse_or_meta_tensor_in_the_weights_is_refused_naming_it(
        kind: str, small_config_file: Path, capsys: pytest.CaptureFixture) -> None:
    """A sparse tensor gave numpy's TypeError from the finite check (torch's RuntimeError from
    load_state_dict before it), a meta tensor holds no values at all."""
    ws = small_config_file.parent
    state = Classifier(2).state_dict()
    weight = state["head.weight"]
    state["head.weight"] = weight.to_sparse() if kind == "sparse" else weight.to("meta")
    code, lines = export(small_config_file, saved(state, ws / f"{kind}.pt"), capsys)
    assert code == exit_code(ModelError), lines
    message = refusal(lines)
    assert message.startswith(f"{ws / f'{kind}.pt'}: tensor head.weight is a "
                              f"{'sparse_coo' if kind == 'sparse' else 'meta'} tensor"), message
    if kind == "sparse":
        documented("weights-tensor-without-values", message, {ws: "<ws>"}, exit_code=code)
    state["head.weight"] = weight  # control: the dense tensor
    code, lines = export(small_config_file, saved(state, ws / "dense.pt"), capsys)
    assert code == 0, lines
