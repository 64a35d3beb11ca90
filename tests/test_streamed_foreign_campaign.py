"""A BBHnet-mode graph of another architecture served streamed in a campaign: ml4gw's
``ResNet1D`` shape with BatchNorm, brought as ONNX, cut into stream layers from its own
operators (``repository/streamed_foreign.py``).

On SMALL_CAMPAIGN's 64 s with three time slides: the streamed reference equals the
whole-window one (the user's graph run by onnxruntime on every window) within
``WHOLE_WINDOW_BOUND``, a window late fails; served by a real tritonserver, the campaign equals
its reference and the independent oracle (the whole-window graph, from the definition)
accepts it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from offline_iaas.config import CampaignConfig, load_config
from offline_iaas.merge.output import compare_outputs
from offline_iaas.merge.reference import run_reference
from offline_iaas.repository.export import export_repository
from offline_iaas.repository.served import check_repository
from tests.helpers import relative_difference, run_dag, small_campaign
from tests.oracle import run_problems
from tests.test_streamed_campaign import (
    BBHNET,
    REFERENCE_TOLERANCE,
    SLIDES,
    STREAMED,
    WHOLE_WINDOW_BOUND,
    _slides,
    _statistic,
)

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def foreign(tmp_path_factory: pytest.TempPathFactory) -> dict[str, CampaignConfig]:
    """The campaign with the user's ONNX graph, exported whole-window and streamed."""
    import torch

    from offline_iaas.models.weights import export_onnx
    from tests.test_recognised_graphs import ResNetShaped
    from tests.test_streamed_foreign import _randomised

    root = tmp_path_factory.mktemp("streamed_foreign_campaign")
    torch.manual_seed(8)
    export_onnx(_randomised(ResNetShaped(torch.nn.BatchNorm1d), 8),
                root / "weights" / "bbhnet.onnx", "windows", "statistic", (1, 2, 256))
    configs = {}
    for name, switch in (("whole", BBHNET), ("streamed", STREAMED)):
        overrides = [*switch, *SLIDES, f'model.repository="{root / name}"']
        configs[name] = (small_campaign(root, overrides, export=False) if name == "whole"
                         else load_config(root / "campaign.toml", overrides))
        export_repository(configs[name], root / "weights")
    return configs


def test_the_cut_graph_streams_what_the_graph_gives_on_whole_windows(foreign):
    root = foreign["whole"].source.parent
    (directory,) = check_repository(foreign["streamed"], load_graphs=True).streamed.values()
    layers = (foreign["streamed"].model.repository / directory).glob("n0*.onnx")
    assert len(list(layers)) == 6  # its input scale, 4 layers, the residual sum
    outputs = {name: run_reference(config, root / f"reference-{name}.h5")[0]
               for name, config in foreign.items()}
    streamed, whole = (_statistic(outputs[name]) for name in ("streamed", "whole"))
    slid, whole_slid = (_slides(outputs[name]) for name in ("streamed", "whole"))
    formed = np.isfinite(whole_slid)
    print(f"ResNet cut from its ONNX operators: {len(whole)} windows, relative difference "
          f"{relative_difference(streamed, whole):.2e}; {formed.sum()} slides, "
          f"{relative_difference(slid[formed], whole_slid[formed]):.2e}")
    assert streamed.shape == whole.shape and np.std(whole) > 1e-3 * np.abs(whole).max()
    assert relative_difference(streamed, whole) <= WHOLE_WINDOW_BOUND
    assert formed.sum() > 400 and np.array_equal(np.isfinite(slid), formed)
    assert relative_difference(slid[formed], whole_slid[formed]) <= WHOLE_WINDOW_BOUND
    late = np.concatenate([whole[:1], whole[:-1]])
    assert relative_difference(streamed, late) > 100 * WHOLE_WINDOW_BOUND


@pytest.mark.slow
def test_a_served_campaign_of_the_cut_graph_equals_its_reference_and_the_oracle(foreign):
    config = foreign["streamed"]
    root = config.source.parent
    run_dir = run_dag(config, root / "run-streamed")
    reference, _ = run_reference(config, root / "reference-served.h5")
    comparison = compare_outputs(Path(run_dir) / "output" / "campaign.h5", reference)
    print(f"served vs reference, worst {comparison.worst:.2e}")
    assert comparison.problems == [] and comparison.worst <= REFERENCE_TOLERANCE
    assert any(key.startswith("slides/") for key in comparison.relative)
    assert run_problems(run_dir) == []
