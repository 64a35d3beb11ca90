"""``export`` of the DeepClean and BBHnet modes refuses weights that do not fit the campaign,
naming the expected and found shapes, before it touches the repository."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import onnxruntime
import pytest
import torch

from offline_iaas.config import CampaignConfig, load_config
from offline_iaas.errors import ModelError, exit_code
from offline_iaas.manifest import read_manifest
from offline_iaas.models.weights import build_network
from offline_iaas.repository.export import export_repository
from offline_iaas.science.e2e.graphs import subtract_onnx
from tests.error_catalogue import documented, documented_refusals
from tests.helpers import WITNESSES, assert_same_samples, untrained_weights


def config_for(path: Path, mode: str) -> CampaignConfig:
    return load_config(path, [f'model.mode="{mode}"', f"data.witnesses={WITNESSES}"])


def test_e2e_export_writes_every_stage_and_a_manifest(small_config_file: Path) -> None:
    config = config_for(small_config_file, "e2e")
    repo = export_repository(config, untrained_weights(small_config_file.parent / "w"))
    manifest = read_manifest(repo)
    assert manifest.mode == "e2e" and manifest.outputs == ("noise", "statistic")
    assert manifest.versions == {"deepclean": 1, "subtract": 1, "bbhnet": 1}
    assert manifest.served == "fused" and manifest.models == (config.model.name,)
    for graph in ("deepclean", "subtract", "bbhnet"):
        assert (repo / manifest.networks[graph].path).exists(), graph
    ensemble = load_config(small_config_file, ['model.mode="e2e"', f"data.witnesses={WITNESSES}",
                                               'model.repository="ensemble-repository"'])
    repo = export_repository(ensemble, small_config_file.parent / "w", ensemble=True)
    assert read_manifest(repo).served == "ensemble"
    for model in ("snapshotter", "deepclean", "averager", "subtract", "snapshotter_clean",
                  "bbhnet", config.model.name):
        assert (repo / model / "config.pbtxt").exists(), model


def test_wrong_witness_count_is_refused_with_both_shapes(small_config_file: Path) -> None:
    config = config_for(small_config_file, "deepclean")
    weights = untrained_weights(small_config_file.parent / "w")
    torch.save(build_network("deepclean", {"witnesses": 5}).state_dict(),
               weights / "deepclean-L1.pt")
    with pytest.raises(ModelError, match=r"deepclean-L1\.pt: input_conv\.weight has shape "
                       r"\(5, 5, 7\), the campaign needs \(1, 1, 7\) \(1 witness channel\)"
                       ) as caught:
        export_repository(config, weights)
    documented("deepclean-weights-witness-count", str(caught.value), {weights: "W"},
               exit_code=exit_code(ModelError))
    assert not config.model.repository.exists()


def test_wrong_bbhnet_shapes_and_non_models_are_refused(small_config_file: Path) -> None:
    config = config_for(small_config_file, "bbhnet")
    weights = untrained_weights(small_config_file.parent / "w")
    torch.save(build_network("bbhnet", {"ifos": 3}).state_dict(), weights / "bbhnet.pt")
    refusals = {}
    with pytest.raises(ModelError, match=r"stem\.0\.weight has shape \(8, 3, 7\), the campaign "
                       r"needs \(8, 2, 7\)") as refusals["bbhnet-weights-detector-count"]:
        export_repository(config, weights)
    (weights / "bbhnet.pt").write_text("not a model at all\n")
    with pytest.raises(ModelError, match="is not a torch state_dict, TorchScript or ONNX "
                       "file") as refusals["weights-not-a-model"]:
        export_repository(config, weights)
    (weights / "bbhnet.pt").unlink()
    with pytest.raises(ModelError, match=r"no file for bbhnet \(looked for "
                       r"bbhnet") as refusals["weights-missing-for-a-network"]:
        export_repository(config, weights)
    documented_refusals(refusals, {weights: "W"})
    assert not config.model.repository.exists()


def test_export_command_exits_4_naming_the_shapes(small_config_file: Path) -> None:
    weights = untrained_weights(small_config_file.parent / "w")
    torch.save(build_network("deepclean", {"witnesses": 4}).state_dict(),
               weights / "deepclean-H1.pt")
    result = subprocess.run(
        [sys.executable, "-m", "offline_iaas.cli", "export", str(small_config_file),
         "--set", 'model.mode="deepclean"', "--set", f"data.witnesses={WITNESSES}",
         "--weights", str(weights)],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 4, result.stderr
    assert "(4, 4, 7), the campaign needs (2, 2, 7)" in result.stderr


def test_subtract_graph_takes_the_stride_the_average_completed(small_config_file: Path) -> None:
    import numpy as np

    config = config_for(small_config_file, "e2e")
    session = onnxruntime.InferenceSession(subtract_onnx(config).SerializeToString())
    rng = np.random.default_rng(0)
    n, s = 3, config.stride_samples
    windows = rng.normal(size=(1, n, 5, config.kernel_samples)).astype(np.float32)
    noise = rng.normal(size=(1, 2, n * s)).astype(np.float32)
    (cleaned,) = session.run(None, {"windows": windows, "noise": noise})
    for ifo in range(2):  # strain channels come first in e2e's stream
        strain = windows[0, :, ifo, :s].reshape(-1)
        assert_same_samples(cleaned[0, ifo], strain - noise[0, ifo])


def saved_as(network: torch.nn.Module, path: Path) -> Path:
    """``network`` written to ``path`` as its suffix says: a state_dict (``.pt``), TorchScript
    (``.ts``) or ONNX (``.onnx``, in one file)."""
    import warnings

    path.parent.mkdir(parents=True, exist_ok=True)
    example = torch.zeros(2, 2, 256)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if path.suffix == ".pt":
            torch.save(network.state_dict(), path)
        elif path.suffix == ".ts":
            torch.jit.trace(network, example).save(str(path))
        else:
            torch.onnx.export(network, (example,), str(path), input_names=["windows"],
                              output_names=["statistic"], opset_version=17, dynamo=False,
                              dynamic_axes={"windows": {0: "batch"}, "statistic": {0: "batch"}})
    return path


FORMS = {".pt": "weights", ".ts": "TorchScript", ".onnx": "ONNX"}
"""How a refusal names a BBHnet weight file of each suffix (``saved_as``)."""
STREAMED = {"auto": 'model.streamed="auto"', "false": "model.streamed=false"}


def trained_bbhnet(weights: Path) -> torch.nn.Module:
    """``untrained_weights``' BBHnet (``weights/bbhnet.pt``), loaded, in eval mode."""
    network = build_network("bbhnet", {"ifos": 2}, whitening_taps=33)
    network.load_state_dict(torch.load(weights / "bbhnet.pt"))
    return network.eval()


def test_bbhnet_weights_with_nan_or_inf_are_refused_in_every_file_kind(
        small_config_file: Path) -> None:
    """A state_dict's or TorchScript file's tensors, an ONNX graph's initialisers: exported
    before, the NaN statistic was found only at the shard merge."""
    ws = small_config_file.parent
    config = config_for(small_config_file, "bbhnet")
    good = trained_bbhnet(untrained_weights(ws / "w"))
    bad = trained_bbhnet(ws / "w")
    with torch.no_grad():
        bad.stem[0].weight[0, 0, 0] = float("nan")
    refusals = {}
    for suffix in (".pt", ".ts", ".onnx"):
        path = saved_as(bad, ws / f"bad{suffix}" / f"bbhnet{suffix}")
        with pytest.raises(ModelError, match=r"holds 1 non-finite value of 112 \(first: nan\)"
                           ) as caught:
            export_repository(config, path.parent)
        named = "stem.0.weight" if suffix != ".onnx" else ""  # ONNX: the folded layer's name
        assert str(caught.value).startswith(f"bbhnet {FORMS[suffix]} {path}: tensor {named}"
                                            ), caught.value
        if suffix == ".ts":
            refusals["network-weights-not-finite"] = caught
    documented_refusals(refusals, {ws: "W"})
    assert not config.model.repository.exists()
    for suffix in (".pt", ".ts", ".onnx"):  # control: the same network, finite
        export_repository(config, saved_as(good, ws / f"good{suffix}" / f"bbhnet{suffix}").parent)
    assert read_manifest(config.model.repository).versions == {"bbhnet": 3}


def test_an_onnx_graph_with_external_data_is_refused_naming_the_file(
        small_config_file: Path) -> None:
    """Its weights in ``bbhnet.onnx.data``: the streamed export failed with onnx's traceback;
    with ``model.streamed = false`` the graph alone was copied into the repository, which
    ``check`` then called half-copied."""
    import onnx

    ws = small_config_file.parent
    good = saved_as(trained_bbhnet(untrained_weights(ws / "w")), ws / "one" / "bbhnet.onnx")
    (ws / "ext").mkdir()
    onnx.save_model(onnx.load(str(good)), str(ws / "ext" / "bbhnet.onnx"),
                    save_as_external_data=True, location="bbhnet.onnx.data", size_threshold=0)
    refusals = {}
    for streamed in ("auto", "false"):
        config = load_config(small_config_file, ['model.mode="bbhnet"', STREAMED[streamed]])
        with pytest.raises(ModelError) as refusals["weights-onnx-external-data"]:
            export_repository(config, ws / "ext")
        assert str(refusals["weights-onnx-external-data"].value) == (
            f"bbhnet ONNX {ws}/ext/bbhnet.onnx: holds its weights as external data "
            "(bbhnet.onnx.data): save the graph in one file (onnx.save_model(model, path, "
            "save_as_external_data=False))")
        assert not config.model.repository.exists()
    documented_refusals(refusals, {ws: "W"})
    # control: the same graph in one file is exported, and the repository checks out whole
    from offline_iaas.repository.served import repository_problems

    for streamed in ("auto", "false"):
        config = load_config(small_config_file, ['model.mode="bbhnet"', STREAMED[streamed]])
        export_repository(config, good.parent)
        assert repository_problems(config)[1] == []


def test_a_weight_file_with_a_byte_changed_is_refused_by_its_crc(
        small_config_file: Path) -> None:
    """A byte of a tensor flipped in a state_dict file, its mtime kept: torch.load reads the
    changed weight (up to 383 off in a bad-input hunt) and export went on; the zip entry's
    CRC, which torch does not check, refuses it."""
    import os
    import struct
    import zipfile

    config = config_for(small_config_file, "bbhnet")
    weights = untrained_weights(small_config_file.parent / "w")
    path = weights / "bbhnet.pt"
    with zipfile.ZipFile(path) as archive:
        entry = max((i for i in archive.infolist() if "/data/" in i.filename),
                    key=lambda i: i.file_size)
    raw = bytearray(path.read_bytes())
    name_length, extra_length = struct.unpack("<HH", raw[entry.header_offset + 26:
                                                         entry.header_offset + 30])
    at = entry.header_offset + 30 + name_length + extra_length + entry.file_size // 2
    kept = path.stat()
    raw[at] ^= 0x10
    path.write_bytes(raw)
    os.utime(path, ns=(kept.st_atime_ns, kept.st_mtime_ns))
    assert torch.load(path, weights_only=True)  # torch itself reads it
    refusals = {}
    with pytest.raises(ModelError, match="fails its CRC") as refusals["weights-crc"]:
        export_repository(config, weights)
    documented_refusals(refusals, {weights: "W"})
    assert not config.model.repository.exists()
    raw[at] ^= 0x10  # control: the byte back
    path.write_bytes(raw)
    export_repository(config, weights)
