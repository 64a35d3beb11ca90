"""Mode deepclean with DeepClean streamed layer by layer (``model.streamed``, issue #42).

The chain is ``update ─► deepclean (streamed) ─► prediction ─► averager ─► noise`` with no
snapshotter (``backend/streamed_deepclean.py`` on the graphs ``export`` writes into
``deepclean.streamed/``), the canary alike (``deepclean_canary.streamed/``, its own weights).
Checked on SMALL_CAMPAIGN's 64 s (256 Hz, 1-s windows every 1/4 s, untrained DeepClean scaled
for strain): in process, the noise of both networks equals the whole-window chain's within
``WHOLE_WINDOW_BOUND`` and a sample late fails (measured 6.9e-7 to 1.5e-6 over 16,000
samples per detector, ``pytest -s`` at ``7af0f09`` and ``ed976e3``); served by a real
tritonserver, the campaign equals its reference; TorchScript weights are refused in one line.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from offline_iaas.config import load_config
from offline_iaas.errors import ModelError, exit_code
from offline_iaas.merge.output import compare_outputs
from offline_iaas.repository.export import export_repository
from offline_iaas.repository.pipeline import stages
from offline_iaas.repository.served import check_repository
from tests.error_catalogue import documented
from tests.helpers import (
    WITNESSES,
    relative_difference,
    run_dag,
    save_traced,
    small_campaign,
    untrained_weights,
)
from tests.oracle import read_series
from tests.streamed_runs import exported_both_ways

pytest.importorskip("torch")

WHOLE_WINDOW_BOUND = 1e-5
"""Streamed noise against the whole-window chain's, relative to its largest value."""
DEEPCLEAN = ['model.mode="deepclean"', f"data.witnesses={WITNESSES}", "deepclean.canary=true"]


@pytest.fixture(scope="module")
def chains(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """SMALL_CAMPAIGN's frames; mode deepclean with a canary, exported whole-window and
    streamed (the same weights, the canary's from another seed), and both references."""
    root = tmp_path_factory.mktemp("streamed-deepclean")
    small_campaign(root, export=False)
    weights = untrained_weights(root / "weights")
    canary = untrained_weights(root / "canary", seed=5)
    return {"root": root, "weights": weights, **exported_both_ways(
        root / "campaign.toml", DEEPCLEAN, root, weights, canary_weights=canary)}


def test_deepclean_streams_without_a_snapshotter_and_its_canary_alike(chains) -> None:
    chain = {stage.model: stage for stage in stages(chains["streamed"])}
    assert "snapshotter" not in chain
    assert {name: (chain[name].kind, chain[name].params) for name in
            ("deepclean", "deepclean_canary")} == {
        "deepclean": ("streamed", {"network": "deepclean"}),
        "deepclean_canary": ("streamed", {"network": "deepclean_canary"})}
    manifest = check_repository(chains["streamed"], load_graphs=True)
    assert set(manifest.streamed) == {"deepclean", "deepclean_canary"}


def test_the_streamed_noise_equals_the_whole_window_chain(chains) -> None:
    streamed, whole = read_series(chains["streamed_out"]), read_series(chains["whole_out"])
    names = [name for name in whole if name.startswith("noise")]
    assert {"noise/H1", "noise/L1", "noise_canary/H1", "noise_canary/L1"} <= set(names)
    for name in names:
        (_, _, mine), (_, _, theirs) = streamed[name][0], whole[name][0]
        assert mine.shape == theirs.shape and len(mine) > 10_000
        print(f"{name}: relative error {relative_difference(mine, theirs):.2e}")
        assert relative_difference(mine, theirs) <= WHOLE_WINDOW_BOUND, name
        late = np.concatenate([theirs[:1], theirs[:-1]])  # negative control: a sample late
        assert relative_difference(mine, late) > 100 * WHOLE_WINDOW_BOUND, name
    (_, _, main), (_, _, canary) = streamed["noise/H1"][0], streamed["noise_canary/H1"][0]
    assert relative_difference(canary, main) > 0.1  # the canary is a network of its own


def test_deepclean_off_its_grid_streams_in_phases_and_equals_the_whole_window_chain(
        chains, tmp_path: Path) -> None:
    """Windows every 1/32 s at 256 Hz: a stride of 8 samples, off DeepClean's alignment 16,
    so its windows fall on 2 phases (``PhasedDeepClean``); the noise still equals the
    whole-window chain's, and a sample late fails."""
    both = exported_both_ways(chains["root"] / "campaign.toml",
                              [*DEEPCLEAN[:2], "model.inference_rate=32"], tmp_path,
                              chains["weights"])
    assert both["streamed"].stride_samples == 8
    assert set(check_repository(both["streamed"]).streamed) == {"deepclean"}
    streamed, whole = read_series(both["streamed_out"]), read_series(both["whole_out"])
    for name in ("noise/H1", "noise/L1"):
        (_, _, mine), (_, _, theirs) = streamed[name][0], whole[name][0]
        assert mine.shape == theirs.shape and len(mine) > 10_000
        print(f"{name} at a stride of 8 samples: relative error "
              f"{relative_difference(mine, theirs):.2e}")
        assert relative_difference(mine, theirs) <= WHOLE_WINDOW_BOUND, name
        late = np.concatenate([theirs[:1], theirs[:-1]])  # negative control: a sample late
        assert relative_difference(mine, late) > 100 * WHOLE_WINDOW_BOUND, name


def test_onnx_deepclean_weights_stream_equal_to_the_whole_window_chain(chains, tmp_path: Path
                                                                      ) -> None:
    """The same networks exported to ONNX (``models/recognised.py`` rebuilds DeepClean from
    the folded graph): streamed, their noise equals the whole-window chain's; a sample late
    fails."""
    from offline_iaas.merge.reference import run_reference
    from offline_iaas.models.weights import export_onnx, load_network

    onnx = tmp_path / "onnx"
    for ifo, witnesses in (("H1", 2), ("L1", 1)):
        network = load_network("deepclean", chains["weights"] / f"deepclean-{ifo}.pt",
                               {"witnesses": witnesses, "kernel_samples": 256})
        export_onnx(network, onnx / f"deepclean-{ifo}.onnx", "windows", "prediction",
                    (1, witnesses, 256))
    config = load_config(chains["streamed"].source, [
        *DEEPCLEAN[:2], "model.streamed=true", f'model.repository="{tmp_path / "repo"}"'])
    export_repository(config, onnx)
    assert set(check_repository(config).streamed) == {"deepclean"}
    streamed = read_series(run_reference(config, tmp_path / "onnx.h5")[0])
    whole = read_series(chains["whole_out"])
    for name in ("noise/H1", "noise/L1"):
        (_, _, mine), (_, _, theirs) = streamed[name][0], whole[name][0]
        print(f"{name} from ONNX weights: relative error {relative_difference(mine, theirs):.2e}")
        assert relative_difference(mine, theirs) <= WHOLE_WINDOW_BOUND, name
        late = np.concatenate([theirs[:1], theirs[:-1]])
        assert relative_difference(mine, late) > 100 * WHOLE_WINDOW_BOUND, name


def test_streamed_deepclean_refuses_weights_without_layers(chains, tmp_path: Path) -> None:
    """A cleaning network that is neither ours nor a chain of layers (a U-Net's skip
    connection) is not streamed, in one line; ours traced, in a user's wrapper or not (its
    names then begin with the wrapper's attribute), is."""
    from offline_iaas.models.weights import build_network
    from tests.test_streamed_foreign_deepclean import Skipped

    scripted, traced = tmp_path / "scripted", tmp_path / "traced"
    scripted.mkdir()
    traced.mkdir()
    for ifo, witnesses in (("H1", 2), ("L1", 1)):
        net = build_network("deepclean", {"witnesses": witnesses}).eval()
        save_traced(Skipped(witnesses).eval(), scripted / f"deepclean-{ifo}.ts",
                    (2, witnesses, 256))
        save_traced(net, traced / f"deepclean-{ifo}.ts", (2, witnesses, 256),
                    wrapped=ifo == "H1")
    config = load_config(chains["streamed"].source, [
        *DEEPCLEAN[:2], "model.streamed=true", f'model.repository="{tmp_path / "repo"}"'])
    with pytest.raises(ModelError, match="deepclean-H1.ts: a TorchScript graph whose "
                       "parameters are not DeepClean's, and its own operators cannot be cut "
                       "into stream layers: Conv '[^']*' branches the chain") as caught:
        export_repository(config, scripted)
    assert not (tmp_path / "repo").exists()
    documented("streamed-deepclean-graph-weights", str(caught.value), {scripted: "W"},
               exit_code=exit_code(ModelError))
    export_repository(config, traced)  # the control: ours traced stream, wrapped or not
    assert (tmp_path / "repo" / "offline-iaas" / "1" / "deepclean.streamed").is_dir()


def test_cleaners_of_another_architecture_stream_equal_to_their_whole_window_chain(
        chains, tmp_path: Path) -> None:
    """Each detector's cleaner of another shape (``Cleaner``: standardised witnesses, strided
    and transposed convolutions, an offset output) as ONNX, cut from its operators
    (``science/deepclean/streamed_foreign.py``): its noise equals the same weights' whole-window
    chain; a sample late fails."""
    import torch

    from offline_iaas.merge.reference import run_reference
    from offline_iaas.models.weights import export_onnx
    from tests.test_streamed_foreign_deepclean import Cleaner

    weights = tmp_path / "weights"
    for ifo, witnesses in (("H1", 2), ("L1", 1)):
        torch.manual_seed({"H1": 1, "L1": 2}[ifo])
        export_onnx(Cleaner(witnesses).eval(), weights / f"deepclean-{ifo}.onnx", "windows",
                    "prediction", (1, witnesses, 256))
    noise, configs = {}, {}
    for name, switch in (("streamed", "model.streamed=true"), ("whole", "model.streamed=false")):
        configs[name] = load_config(chains["streamed"].source, [
            *DEEPCLEAN[:2], switch, f'model.repository="{tmp_path / name}"'])
        export_repository(configs[name], weights)
        noise[name] = read_series(run_reference(configs[name], tmp_path / f"{name}.h5")[0])
    assert set(check_repository(configs["streamed"]).streamed) == {"deepclean"}
    for series in ("noise/H1", "noise/L1"):
        (_, _, mine), (_, _, theirs) = noise["streamed"][series][0], noise["whole"][series][0]
        print(f"{series}, a cleaner cut from its ONNX operators: relative error "
              f"{relative_difference(mine, theirs):.2e}")
        assert relative_difference(mine, theirs) <= WHOLE_WINDOW_BOUND, series
        late = np.concatenate([theirs[:1], theirs[:-1]])
        assert relative_difference(mine, late) > 100 * WHOLE_WINDOW_BOUND, series


@pytest.mark.slow
def test_a_streamed_deepclean_campaign_equals_its_reference(chains) -> None:
    run_dir = run_dag(chains["streamed"], chains["root"] / "run")
    comparison = compare_outputs(run_dir / "output" / "campaign.h5", chains["streamed_out"])
    assert comparison.problems == [] and comparison.worst <= 1e-5, comparison.describe()
    for name in ("noise/H1/", "noise_canary/L1/"):
        assert any(key.startswith(name) for key in comparison.relative), name
