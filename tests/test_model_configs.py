from pathlib import Path

import pytest

from offline_iaas.config import load_config
from offline_iaas.errors import ModelError
from offline_iaas.repository import model_configs as mcfg
from offline_iaas.repository.export import ensemble_shape, export_repository
from offline_iaas.repository.served import check_repository, network_onnx_path
from tests.helpers import parse_pbtxt


def test_configs_round_trip_through_triton_model_config(small_config_file: Path) -> None:
    shape = ensemble_shape(load_config(small_config_file))
    windows = ("windows", (-1, shape.channels, shape.kernel_samples))
    ens = mcfg.pipeline_config(
        "ens", (("update", (shape.channels, -1)),), (("statistic", (-1,)),),
        [(mcfg.SNAPSHOTTER, {"update": "update"}, {"windows": "windows"}),
         ("classifier", {"windows": "windows"}, {"statistic": "statistic"})])
    for config in (
        mcfg.snapshotter_config(shape),
        mcfg.network_config("classifier", (windows,), (("statistic", (-1,)),), shape),
        ens,
    ):
        assert parse_pbtxt(mcfg.to_pbtxt(config)) == config
    snap = mcfg.snapshotter_config(shape)
    assert snap.sequence_batching.HasField("direct")
    assert [c.name for c in snap.sequence_batching.control_input] == ["START", "END", "CORRID"]
    assert snap.max_batch_size >= 2  # both clients of a server stream at once
    assert [s.model_name for s in ens.ensemble_scheduling.step] == ["snapshotter", "classifier"]


def test_export_writes_a_versioned_repository(small_config_file: Path) -> None:
    pytest.importorskip("torch")
    config = load_config(small_config_file)
    repo = export_repository(config)
    # the fused model: one model, the graphs beside its code in each version
    assert sorted(p.name for p in repo.iterdir()) == sorted([config.model.name, "manifest.json"])
    fused = parse_pbtxt((repo / config.model.name / "config.pbtxt").read_text())
    assert fused.name == config.model.name and fused.sequence_batching.HasField("direct")
    assert network_onnx_path(repo, "classifier").parent.name == "1"
    export_repository(config)
    assert network_onnx_path(repo, "classifier").parent.name == "2"
    assert (repo / config.model.name / "1" / "classifier.onnx").exists()
    check_repository(config)
    with pytest.raises(ModelError, match=r"\(fused\).*\(ensemble\)"):
        export_repository(config, ensemble=True)
    ensemble = load_config(small_config_file, [f'model.repository="{repo}-ensemble"'])
    export_repository(ensemble, ensemble=True)
    for model in ("snapshotter", "classifier", config.model.name):
        text = (ensemble.model.repository / model / "config.pbtxt").read_text()
        assert parse_pbtxt(text).name == model
    other = load_config(small_config_file, ["model.kernel_seconds=2"])
    with pytest.raises(ModelError, match="exported for"):
        check_repository(other)
    with pytest.raises(ModelError, match="holds mode 'classifier'.*shape"):
        export_repository(other)
