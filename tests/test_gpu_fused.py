"""The gpu flavor (``export --flavor gpu``): the fused model with its networks on CUDA.

No GPU here: the flavor's own ``model.py`` is loaded from the exported repository and driven
the way Triton's python backend drives it (``initialize`` with the parsed ``config.pbtxt``,
``execute`` with several sequences' requests in one call), with one thing switched: the
``device`` parameter, ``cuda`` → ``cpu``, so onnxruntime's CPU provider runs the same code.
Every mode's output equals the in-process reference over the whole stream.
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import json_format

from offline_iaas.config import CampaignConfig, load_config
from offline_iaas.errors import ModelError, ServerError
from offline_iaas.manifest import read_manifest
from offline_iaas.modes import BUILT_IN_MODES
from offline_iaas.repository import model_configs as mcfg
from offline_iaas.repository.export import export_repository
from offline_iaas.repository.pipeline import mode_stream
from offline_iaas.repository.served import network_sessions
from offline_iaas.serve.startup_checks import check_flavor_runnable
from tests.helpers import (
    SMALL_CAMPAIGN,
    WITNESSES,
    a_sample_late,
    parse_pbtxt,
    untrained_weights,
)

pytest.importorskip("torch")

STRAIN_SCALE = 1e-21


# ---- a stand-in for triton_python_backend_utils: the calls fused.py makes ------------------
class _Input:
    def __init__(self, value: np.ndarray) -> None:
        self.value = value

    def as_numpy(self) -> np.ndarray:
        return self.value


class _Response:
    def __init__(self, output_tensors=None, error=None) -> None:
        self.tensors = {t.name: t.value for t in output_tensors or []}
        self.error = error


class _Tensor:
    def __init__(self, name: str, value: np.ndarray) -> None:
        self.name, self.value = name, value


def _backend_utils() -> types.ModuleType:
    module = types.ModuleType("triton_python_backend_utils")
    # as Triton's: None for an optional input the request leaves out (psd_update)
    module.get_input_tensor_by_name = (
        lambda request, name: _Input(request[name]) if name in request else None)
    module.Tensor = _Tensor
    module.InferenceResponse = _Response
    module.TritonError = str
    return module


def request(update: np.ndarray, corrid: int, start: bool, end: bool) -> dict[str, np.ndarray]:
    """What the direct sequence batcher hands the model for one slot."""
    return {"update": update[None].astype(np.float32),
            "START": np.array([[int(start)]], np.int32), "END": np.array([[int(end)]], np.int32),
            "CORRID": np.array([[corrid]], np.uint64)}


def load_served_model(config: CampaignConfig, device: str):
    """The repository's fused ``model.py``, initialised as Triton would, ``device`` switched."""
    model_dir = config.model.repository / config.model.name
    parsed = parse_pbtxt((model_dir / "config.pbtxt").read_text())
    as_json = json_format.MessageToDict(parsed, preserving_proto_field_name=True)
    as_json["parameters"]["device"] = {"string_value": device}
    sys.modules["triton_python_backend_utils"] = _backend_utils()
    version = str(max(int(p.name) for p in model_dir.iterdir() if p.name.isdigit()))
    namespace: dict = {}
    source = model_dir / version / "model.py"
    exec(compile(source.read_text(), str(source), "exec"), namespace)  # noqa: S102
    model = namespace["TritonPythonModel"]()
    model.initialize({"model_config": json.dumps(as_json), "model_repository": str(model_dir),
                      "model_version": version, "model_instance_kind": "GPU",
                      "model_instance_device_id": "0"})
    return model


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("gpu-fused")
    (root / "campaign.toml").write_text(SMALL_CAMPAIGN)
    untrained_weights(root / "weights")
    return root


def gpu_campaign(root: Path, mode: str, flavor: str = "gpu", streamed: bool = False
                 ) -> CampaignConfig:
    config = load_config(root / "campaign.toml", [
        f'model.repository="{root / mode / flavor}{"-streamed" if streamed else ""}"',
        f'model.mode="{mode}"', f"data.witnesses={WITNESSES}", "model.batch_size=8",
        f"model.streamed={str(streamed).lower()}",
    ])
    export_repository(config, root / "weights" if config.mode.needs_weights else None,
                      flavor=flavor)
    return config


@pytest.mark.parametrize("mode", BUILT_IN_MODES)
def test_gpu_flavor_serves_every_mode_with_its_networks_on_cuda(root: Path, mode: str) -> None:
    gpu = gpu_campaign(root, mode)
    cpu = gpu_campaign(root, mode, "cpu")
    manifest = read_manifest(gpu.model.repository)
    assert (manifest.flavor, manifest.served, manifest.device) == ("gpu", "fused", "cuda")
    name = gpu.model.name
    served = parse_pbtxt((gpu.model.repository / name / "config.pbtxt").read_text())
    assert served.backend == "python"
    assert [g.kind for g in served.instance_group] == [mcfg.mc.ModelInstanceGroup.KIND_GPU]
    assert served.parameters["device"].string_value == "cuda"
    # the device is the only difference from the cpu flavor: kind and parameter, same code
    on_cpu = parse_pbtxt((cpu.model.repository / name / "config.pbtxt").read_text())
    assert [g.kind for g in on_cpu.instance_group] == [mcfg.mc.ModelInstanceGroup.KIND_CPU]
    assert on_cpu.parameters["device"].string_value == "cpu"
    for config in (served, on_cpu):
        del config.instance_group[:]
        del config.parameters["device"]
    assert served == on_cpu
    for code in ("model.py", "stateful.py"):
        assert ((gpu.model.repository / name / "1" / code).read_text()
                == (cpu.model.repository / name / "1" / code).read_text())


def sequence_outputs(model, streams: dict[int, list[np.ndarray]]) -> dict[int, dict]:
    """Send every sequence's requests, the i-th request of each in one ``execute`` call (the
    sequences batched together, an idle slot beside them); each sequence's outputs joined."""
    got: dict[int, dict[str, list[np.ndarray]]] = {corrid: {} for corrid in streams}
    for i in range(max(len(parts) for parts in streams.values())):
        live = [(c, parts) for c, parts in streams.items() if i < len(parts)]
        batch = [request(parts[i], c, i == 0, i == len(parts) - 1) for c, parts in live]
        batch.append(request(live[0][1][i], 0, False, False))  # an idle slot's null request
        responses = model.execute(batch)
        assert len(responses) == len(batch)
        for (corrid, _), response in zip(live, responses, strict=False):
            assert response.error is None, response.error
            for output, value in response.tensors.items():
                got[corrid].setdefault(output, []).append(value[0])
    return {c: {k: np.concatenate(v, axis=-1) for k, v in outs.items()}
            for c, outs in got.items()}


@pytest.mark.parametrize(("mode", "streamed"), [*((m, False) for m in BUILT_IN_MODES),
                                                *((m, True) for m in BUILT_IN_MODES)])
def test_device_switched_gpu_flavor_equals_the_reference(root: Path, mode: str,
                                                         streamed: bool) -> None:
    """With ``model.streamed`` the gpu flavor streams the same graphs (``layer_stream``'s
    sessions opened on the device like the fused model's)."""
    config = gpu_campaign(root, mode, streamed=streamed)
    if streamed:
        assert read_manifest(config.model.repository).streamed
    model = load_served_model(config, device="cpu")
    stride, channels = config.stride_samples, len(config.stream_channels)
    rng = np.random.default_rng(11)
    # two sequences of different lengths, batched together; each ends on a shorter request
    split_strides = {7: [8, 3, 16, 5], 9: [5, 8, 2]}
    # strain at its size, witnesses at theirs: the test weights standardise a witness by 1,
    # so one at 1e-21 is zero to the network and DeepClean's output a constant
    scales = np.array([1.0 if c in config.data.witnesses else STRAIN_SCALE
                       for c in config.stream_channels])[:, None]
    whole, parts = {}, {}
    for corrid, strides in split_strides.items():
        samples = rng.standard_normal((channels, sum(strides) * stride)) * scales
        whole[corrid] = samples.astype(np.float32)
        edges = np.cumsum([0, *strides]) * stride
        parts[corrid] = [whole[corrid][:, a:b] for a, b in zip(edges[:-1], edges[1:],
                                                               strict=True)]
    got = sequence_outputs(model, parts)
    sessions = network_sessions(config)
    for corrid in split_strides:
        expected = mode_stream(config, sessions).update(whole[corrid])
        # negative control: the reference of the input one sample late (every channel)
        late = mode_stream(config, sessions).update(a_sample_late(whole[corrid]))
        assert set(got[corrid]) == set(expected) == set(config.mode.outputs)
        for output, values in expected.items():
            scale = float(np.abs(values).max())
            assert scale > 0 and np.isfinite(got[corrid][output]).all()
            np.testing.assert_allclose(got[corrid][output], values, rtol=1e-5,
                                       atol=1e-6 * scale)
            assert not np.allclose(got[corrid][output], late[output], rtol=1e-5,
                                   atol=1e-6 * scale), output
    assert model.streams == {}  # END freed both sequences


def test_cuda_without_a_cuda_provider_is_refused_at_load(root: Path) -> None:
    config = gpu_campaign(root, "classifier")
    with pytest.raises(RuntimeError, match="CUDAExecutionProvider.*onnxruntime-gpu"):
        load_served_model(config, device="cuda")


def test_native_gpu_layout_stays_an_option_for_the_single_network_modes(root: Path) -> None:
    config = load_config(root / "campaign.toml", [
        f'model.repository="{root / "native"}"', 'model.mode="deepclean"',
        f"data.witnesses={WITNESSES}",
    ])
    with pytest.raises(ModelError, match="--ensemble.*classifier, bbhnet.*default gpu flavor"):
        export_repository(config, root / "weights", flavor="gpu", ensemble=True)


def test_the_gpu_flavor_needs_a_gpu_and_the_python_backend(tmp_path: Path) -> None:
    (tmp_path / "python").mkdir()
    with pytest.raises(ServerError, match="no GPU.*--flavor cpu"):
        check_flavor_runnable("gpu", "fused", tmp_path, gpus=0)
    check_flavor_runnable("gpu", "fused", tmp_path, gpus=1)
    check_flavor_runnable("gpu", "fused", None, gpus=0)  # a container's own: Triton decides
    with pytest.raises(ServerError, match="onnxruntime backend"):
        check_flavor_runnable("gpu", "ensemble", tmp_path, gpus=1)
