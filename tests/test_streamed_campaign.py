"""BBHnet served streamed layer by layer in a campaign (``model.streamed``, issue #42).

The fused model's chain is one ``streamed`` stage (``backend/streamed_network.py`` on the graphs
``export`` writes into ``bbhnet.streamed/``). Checked on SMALL_CAMPAIGN's 64 s (256 Hz, window
256, stride 64, untrained BBHnet of depth 3: cumulative stride 16), with real tritonservers: the
streamed campaign equals its in-process reference for two splits, equals the same campaign run
whole-window (switch off) within ``WHOLE_WINDOW_BOUND``, and the independent oracle (which runs
the whole-window graph from the definition) accepts it; without a server, what the switch cannot
serve yet is refused in one line.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import h5py
import numpy as np
import pytest

from offline_iaas.config import CampaignConfig, load_config
from offline_iaas.errors import ConfigError, ModelError, exit_code
from offline_iaas.merge.output import compare_outputs
from offline_iaas.merge.reference import run_reference
from offline_iaas.network_streaming import streams
from offline_iaas.repository.export import export_repository
from offline_iaas.repository.served import check_repository
from offline_iaas.rundir import RunDir
from offline_iaas.workflow.local import run_local
from offline_iaas.workflow.make_dag import make_dag
from tests.error_catalogue import documented, documented_refusals
from tests.faults.test_faults import FAST_FAILURE
from tests.helpers import (
    processes_mentioning,
    relative_difference,
    run_dag,
    save_traced,
    small_campaign,
)
from tests.oracle import read_series, run_problems

pytest.importorskip("torch")

REFERENCE_TOLERANCE = 1e-5
"""Campaign against its reference (``compare_outputs``' worst, relative to the largest value):
the same code on the same requests, split among clients at other windows."""
WHOLE_WINDOW_BOUND = 1e-5
"""Streamed statistic against the whole-window one, relative to max |statistic| (measured
1.4e-7 on this campaign, 253 windows; a window's shift: ~1)."""
BBHNET = ['model.mode="bbhnet"', "model.streamed=false"]
"""Whole-window (the networks on the snapshotter's windows)."""
STREAMED = ['model.mode="bbhnet"', "model.streamed=true"]
AUTO = ['model.mode="bbhnet"', 'model.streamed="auto"']


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, CampaignConfig]:
    """SMALL_CAMPAIGN's frames and untrained weights; mode bbhnet exported whole-window
    (``whole``) and streamed (``streamed``), each to its own repository."""
    root = tmp_path_factory.mktemp("streamed_campaign")
    whole = small_campaign(root, [*BBHNET, f'model.repository="{root / "whole"}"'],
                           weights=root / "weights")
    streamed = load_config(root / "campaign.toml",
                           [*STREAMED, f'model.repository="{root / "streamed"}"'])
    export_repository(streamed, root / "weights")
    return {"whole": whole, "streamed": streamed}


def _statistic(output: Path) -> np.ndarray:
    """The statistic of every segment of an output file, end to end."""
    return np.concatenate([values for _, _, values in read_series(output)["statistic"]])




# ---- without a server ---------------------------------------------------------------------------


def test_the_streamed_repository_holds_the_layers_beside_the_whole_window_graph(exported):
    config = exported["streamed"]
    manifest = check_repository(config, load_graphs=True)
    (directory,) = manifest.streamed.values()
    served = config.model.repository / directory
    assert (served / "streamed.json").is_file() and (served / "head.onnx").is_file()
    assert (served.parent / "streamed_network.py").is_file()
    fused = (served.parent.parent / "config.pbtxt").read_text()
    assert '\\"kind\\": \\"streamed\\"' in fused and "snapshot" not in fused
    assert (config.model.repository / manifest.networks["bbhnet"].path).is_file()
    assert check_repository(exported["whole"]).streamed == {}  # the switch off: as before


def test_a_half_copied_streamed_graph_is_found_by_the_repository_check(exported, tmp_path):
    import shutil

    streamed = exported["streamed"]
    repo = shutil.copytree(streamed.model.repository, tmp_path / "repo")
    config = load_config(streamed.source, [*STREAMED, f'model.repository="{repo}"'])
    check_repository(config, load_graphs=True)  # negative control: the copy is whole
    (directory,) = check_repository(config).streamed.values()
    head = repo / directory / "head.onnx"
    head.write_bytes(head.read_bytes()[: head.stat().st_size // 2])
    check_repository(config)  # without loading the graphs, nothing to see
    with pytest.raises(ModelError, match="cannot load the streamed bbhnet graphs") as caught:
        check_repository(config, load_graphs=True)
    documented("repository-streamed-graph-unloadable", str(caught.value), {repo: "R"},
               exit_code=exit_code(ModelError))


def test_a_repository_exported_with_the_other_switch_is_refused(exported):
    whole, streamed = exported["whole"], exported["streamed"]
    with pytest.raises(ModelError, match="model.streamed = false.*export again") as off:
        check_repository(load_config(whole.source, [*STREAMED, "model.repository="
                                                    f'"{whole.model.repository}"']))
    with pytest.raises(ModelError, match="model.streamed = true.*export again") as on:
        check_repository(load_config(streamed.source, [*BBHNET, "model.repository="
                                                       f'"{streamed.model.repository}"']))
    for row, caught, repo in (("repository-not-streamed", off, whole),
                              ("repository-streamed", on, streamed)):
        documented(row, str(caught.value), {repo.model.repository: "R"},
                   exit_code=exit_code(ModelError))


def test_streamed_refuses_what_it_cannot_serve_yet_in_one_line(exported):
    toml = exported["whole"].source
    refusals = {}
    for row, overrides, pattern in (
            ("streamed-rolling-whitening", [*STREAMED, 'search.whitening="rolling"'],
             "'search.whitening' the 'rolling' whitening .* served on whole windows"),
            ("streamed-kernel-not-strides", [*STREAMED, "model.kernel_seconds=1.125",
                                             "model.inference_rate=2"],
             "'model.kernel_seconds' a window of 1.125 s is not a whole number of strides")):
        with pytest.raises(ConfigError, match=pattern) as refusals[row]:
            load_config(toml, overrides)
    documented_refusals(refusals, {toml: "C"})
    # negative controls: the same keys load without the switch, and with auto (the default),
    # which serves the networks whole-window; the classifier's mode streams too
    assert not streams(load_config(toml, ['model.mode="bbhnet"', 'search.whitening="rolling"']))
    assert streams(load_config(toml, ['model.mode="classifier"', "model.streamed=true"]))
    with pytest.raises(ConfigError, match="'model.streamed' must be true, false or \"auto\""):
        load_config(toml, ['model.streamed="yes"'])


def test_the_switch_off_or_auto_keeps_the_config_hashes_and_on_changes_them(exported):
    """Off, and auto (the default), run directories planned before the switch existed keep
    their hashes (what auto chose is the repository's: exported again, its versions differ
    from those run.json pins); on, the clients' parts are redone (the statistic is not
    bit-identical)."""
    from offline_iaas.config_checks import hashed_names

    whole, streamed = exported["whole"], exported["streamed"]
    plain = whole.to_dict()
    assert plain["model"]["streamed"] is False
    assert "streamed" not in hashed_names(plain, whole.search)["model"]
    assert "streamed" in hashed_names(streamed.to_dict(), streamed.search)["model"]
    repository = f'model.repository="{whole.model.repository}"'
    on = load_config(whole.source, [*STREAMED, repository])
    assert on.stream_hash() != whole.stream_hash() and on.merge_hash() != whole.merge_hash()
    auto = load_config(whole.source, ['model.mode="bbhnet"', repository])
    assert auto.model.streamed == "auto"
    assert auto.stream_hash() == whole.stream_hash() and auto.merge_hash() == whole.merge_hash()


def test_streamed_export_refuses_the_ensemble_and_graph_weights(exported, tmp_path):
    import torch

    from tests.test_recognised_graphs import ResNetShaped
    from tests.test_streamed_foreign import MaxPooled

    weights = exported["whole"].source.parent / "weights"
    toml = exported["whole"].source
    repo = tmp_path / "repo"
    config = load_config(toml, [*STREAMED, f'model.repository="{repo}"'])
    caught = {}
    with pytest.raises(ModelError, match="not the --ensemble layout") as caught["ensemble"]:
        export_repository(config, weights, ensemble=True)
    scripted = tmp_path / "scripted"
    scripted.mkdir()  # pooled by the window's maximum: neither ours nor cut into layers
    save_traced(MaxPooled().eval(), scripted / "bbhnet.ts", (2, 2, 256))
    with pytest.raises(ModelError, match="a TorchScript graph whose parameters are not "
                       "BBHnet's, and its own operators cannot be cut into stream layers: "
                       "ReduceMax") as caught["ts"]:
        export_repository(config, scripted)
    # a layer no stream can share between windows (ml4gw's ResNet1D's default norm) is named
    torch.manual_seed(4)
    save_traced(ResNetShaped(lambda channels: torch.nn.GroupNorm(4, channels)).eval(),
                scripted / "bbhnet.ts", (2, 2, 256))
    with pytest.raises(ModelError, match=r"a layer that normalises each window by its own "
                       r"statistics \(aten::group_norm\)") as caught["per-window"]:
        export_repository(config, scripted)
    assert not repo.exists()  # nothing written
    for row, key in (("streamed-export-ensemble", "ensemble"), ("streamed-graph-weights", "ts"),
                     ("streamed-per-window-layer", "per-window")):
        documented(row, str(caught[key].value), {scripted: "W"},
                   exit_code=exit_code(ModelError))
    # negative control: a stride off BBHnet's grid (32 Hz: 8 samples, 2 phases) exports
    export_repository(load_config(toml, [*STREAMED, "model.inference_rate=32",
                                         f'model.repository="{repo}"']), weights)


def test_a_stride_whose_phases_would_cost_a_whole_window_is_not_streamed(exported, tmp_path):
    """Unreachable with BBHnet's depth 3 on the campaign's windows (``g S`` is then 16 samples
    for every stride off its grid); its guard, on a window of 48 samples and a stride of 24
    (2 phases of 16: 48 samples a window), and on 25 (the control: 1 phase)."""
    from types import SimpleNamespace

    from offline_iaas.errors import NotStreamable
    from offline_iaas.science.bbhnet.streamed import _export_campaign_streamed, bbhnet_nodes
    from tests.test_rolling_whitening import _bbhnet_module

    network = _bbhnet_module(exported["whole"].source.parent / "weights")
    geometry = SimpleNamespace(kernel_samples=48, stride_samples=24)
    with pytest.raises(NotStreamable, match="a stride of 24 samples puts the windows on 2 "
                       "phases of BBHnet's cumulative stride 16") as caught:
        _export_campaign_streamed(network, bbhnet_nodes(network), geometry, tmp_path)
    documented("streamed-stride-phases-cost-a-window", str(caught.value),
               exit_code=exit_code(ModelError))
    assert not any(tmp_path.iterdir())
    geometry = SimpleNamespace(kernel_samples=192, stride_samples=32)  # on the grid
    assert (_export_campaign_streamed(network, bbhnet_nodes(network), geometry, tmp_path)
            / "streamed.json").is_file()


def test_auto_streams_what_it_can_and_says_in_one_line_why_the_rest_is_whole_window(
        exported, tmp_path, caplog):
    """``model.streamed = "auto"`` (the default): the state_dict, our BBHnet traced or
    exported to ONNX, a stride off BBHnet's grid (on its phases) and our BBHnet inside a
    user's wrapper (its parameters under the wrapper's ``inner.``) stream; a graph whose
    operators cannot be cut (``streamed_foreign.py``: pooled by the
    window's maximum) and the --ensemble layout are served on whole windows, each with one
    line naming why, and the repository check and the reference take either."""
    import logging

    import torch

    from offline_iaas.models.weights import export_onnx
    from tests.test_rolling_whitening import _bbhnet_module
    from tests.test_streamed_foreign import MaxPooled

    weights = exported["whole"].source.parent / "weights"
    toml = exported["whole"].source
    scripted, traced, maxima = tmp_path / "scripted", tmp_path / "traced", tmp_path / "maxima"
    for directory in (scripted, traced, maxima):
        directory.mkdir()
    save_traced(_bbhnet_module(weights), scripted / "bbhnet.ts", (2, 2, 256), wrapped=True)
    torch.manual_seed(2)
    save_traced(MaxPooled().eval(), maxima / "bbhnet.ts", (2, 2, 256))
    save_traced(_bbhnet_module(weights), traced / "bbhnet.ts", (2, 2, 256))
    (tmp_path / "onnx").mkdir()
    export_onnx(_bbhnet_module(weights), tmp_path / "onnx" / "bbhnet.onnx", "windows",
                "statistic", (1, 2, 256))
    cases = {"state_dict": ([], weights, False, "BBHnet streamed layer by layer"),
             "traced": ([], traced, False, "BBHnet streamed layer by layer"),
             "onnx": ([], tmp_path / "onnx", False, "BBHnet streamed layer by layer"),
             "wrapped": ([], scripted, False, "BBHnet streamed layer by layer"),
             "maxima": ([], maxima, False, "bbhnet.ts: a TorchScript graph whose parameters "
                        "are not BBHnet's, and its own operators cannot be cut into stream "
                        "layers: ReduceMax"),
             "off grid": (["model.inference_rate=32"], weights, False,
                          "BBHnet streamed layer by layer"),
             "ensemble": ([], weights, True, "the --ensemble layout serves whole windows")}
    for name, (overrides, given, ensemble, line) in cases.items():
        repo = tmp_path / "repositories" / name.replace(" ", "_")
        config = load_config(toml, [*AUTO, *overrides, f'model.repository="{repo}"'])
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="offline_iaas"):
            export_repository(config, given, ensemble=ensemble)
        said = [r.getMessage() for r in caplog.records if "model.streamed = auto" in r.getMessage()]
        assert len(said) == 1 and line in said[0], (name, said)
        manifest = check_repository(config, load_graphs=True)
        assert bool(manifest.streamed) == (name in ("state_dict", "traced", "onnx",
                                                    "off grid", "wrapped")), name
    # the traced network, wrapped or not, streams as its state_dict does: the same graphs,
    # byte for byte
    repositories = tmp_path / "repositories"
    streamed = sorted((repositories / "state_dict").rglob("bbhnet.streamed/*"))
    assert len(streamed) > 5
    for path, form in ((path, form) for path in streamed for form in ("traced", "wrapped")):
        twin = repositories / form / path.relative_to(repositories / "state_dict")
        assert twin.read_bytes() == path.read_bytes(), (form, path.name)
    # the whole-window repository serves auto's campaign as false's: the same statistic
    statistics = {}
    for name, switch in (("maxima", AUTO), ("maxima_off", BBHNET)):
        config = load_config(toml, [*switch, f'model.repository="{repositories / name}"'])
        if name == "maxima_off":
            export_repository(config, maxima)
        statistics[name] = _statistic(run_reference(config, tmp_path / f"{name}.h5")[0])
    assert np.array_equal(statistics["maxima"], statistics["maxima_off"])
    root = exported["whole"].source.parent
    whole = _statistic(run_reference(exported["whole"], root / "auto_whole.h5")[0])
    # the ONNX graph's BBHnet, rebuilt from its folded layers, streams what whole windows give
    onnx = load_config(toml, [*AUTO, f'model.repository="{repositories / "onnx"}"'])
    from_onnx = _statistic(run_reference(onnx, tmp_path / "onnx.h5")[0])
    print(f"BBHnet rebuilt from its ONNX graph, streamed: {len(whole)} windows, relative "
          f"difference {relative_difference(from_onnx, whole):.2e}")
    assert relative_difference(from_onnx, whole) <= WHOLE_WINDOW_BOUND
    late = np.concatenate([whole[:1], whole[:-1]])
    assert relative_difference(from_onnx, late) > 100 * WHOLE_WINDOW_BOUND
    # a streamed repository under a campaign auto keeps whole-window is refused (negative
    # control for the check taking either)
    rolling = load_config(toml, [*AUTO, 'search.whitening="rolling"',
                                 f'model.repository="{repositories / "state_dict"}"'])
    with pytest.raises(ModelError, match="exported with its networks streamed, the campaign "
                       "serves them on whole windows .*'rolling' whitening"):
        check_repository(rolling)


def test_the_streamed_reference_equals_the_whole_window_reference(exported):
    """In process (the code the fused model runs): the bound holds, and a statistic shifted
    by one window breaks it (negative control)."""
    root = exported["whole"].source.parent
    whole = _statistic(run_reference(exported["whole"], root / "whole_reference.h5")[0])
    streamed = _statistic(run_reference(exported["streamed"], root / "reference.h5")[0])
    assert streamed.shape == whole.shape
    assert relative_difference(streamed, whole) <= WHOLE_WINDOW_BOUND
    late = np.concatenate([whole[:1], whole[:-1]])
    assert relative_difference(streamed, late) > 100 * WHOLE_WINDOW_BOUND


def test_a_stride_off_bbhnets_grid_streams_on_its_phases_equal_to_whole_windows(
        exported, tmp_path):
    """32 Hz: a stride of 8 samples, half BBHnet's cumulative stride 16 (two phases), time
    slides included; in process, against the whole-window reference; a window late fails."""
    root = exported["whole"].source.parent
    statistics = {}
    for name, switch in (("whole", BBHNET), ("streamed", STREAMED)):
        config = load_config(exported["whole"].source, [
            *switch, "model.inference_rate=32", *SLIDES, f'model.repository="{tmp_path / name}"'])
        export_repository(config, root / "weights")
        output = run_reference(config, tmp_path / f"{name}.h5")[0]
        statistics[name] = (_statistic(output), _slides(output))
    (streamed, slid), (whole, whole_slid) = statistics["streamed"], statistics["whole"]
    assert streamed.shape == whole.shape and len(whole) > 1000
    print(f"{len(whole)} windows: relative difference {relative_difference(streamed, whole):.2e}"
          f", slides {relative_difference(slid[~np.isnan(slid)], whole_slid[~np.isnan(slid)]):.2e}")
    assert relative_difference(streamed, whole) <= WHOLE_WINDOW_BOUND
    formed = ~np.isnan(whole_slid)
    assert formed.sum() > 1000 and np.array_equal(formed, ~np.isnan(slid))
    assert relative_difference(slid[formed], whole_slid[formed]) <= WHOLE_WINDOW_BOUND
    late = np.concatenate([whole[:1], whole[:-1]])
    assert relative_difference(streamed, late) > 100 * WHOLE_WINDOW_BOUND


SLIDES = ["search.slides=3", "search.slide_seconds=4"]
"""Three slides of 4 s (16 windows each): the background of ``streamed_timeslide``."""


def _slides(output: Path) -> np.ndarray:
    with h5py.File(output) as f:
        (slides,) = f["slides"].values()
        return slides[()]


def test_streamed_time_slides_equal_the_whole_window_slides(exported):
    """Each slide streams the first detector beside the second one ``k`` slides earlier: the
    background equals ``TimeSlides`` on the snapshotter's windows (the same slides formed,
    NaN elsewhere; measured 2.3e-7 over 663 formed slides), and each slide against another's
    breaks it (negative control: 0.96)."""
    root = exported["whole"].source.parent
    outputs = {}
    for name, config in exported.items():
        slid = load_config(config.source, [*(STREAMED if name == "streamed" else BBHNET),
                                           *SLIDES, f'model.repository="{root / name}-slides"'])
        export_repository(slid, root / "weights")
        outputs[name] = _slides(run_reference(slid, root / f"{name}-slides.h5")[0])
    streamed, whole = outputs["streamed"], outputs["whole"]
    assert streamed.shape == whole.shape and streamed.shape[1] == 3
    formed = np.isfinite(whole)
    assert np.array_equal(np.isfinite(streamed), formed) and formed.sum() > 400
    assert relative_difference(streamed[formed], whole[formed]) <= WHOLE_WINDOW_BOUND
    other = whole[:, [1, 2, 0]]  # each slide against another's background
    both = formed & np.isfinite(other)
    assert relative_difference(streamed[both], other[both]) > 100 * WHOLE_WINDOW_BOUND


# ---- real campaigns -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def campaigns(exported) -> dict[str, tuple[CampaignConfig, Path]]:
    """The streamed campaign run by run-local, 1 server x 2 clients and 1 x 1, and the
    whole-window one (1 x 2)."""
    root = exported["whole"].source.parent
    runs = {}
    for name, config, clients in (("1x2", exported["streamed"], 2),
                                  ("1x1", exported["streamed"], 1),
                                  ("whole", exported["whole"], 2)):
        split = load_config(config.source, [
            *(STREAMED if name != "whole" else BBHNET),
            f'model.repository="{config.model.repository}"',
            f"layout.clients_per_server={clients}"])
        runs[name] = (split, run_dag(split, root / f"run-{name}"))
    return runs


@pytest.mark.slow
@pytest.mark.parametrize("split", ["1x2", "1x1"])
def test_a_streamed_campaign_equals_its_reference(campaigns, split):
    config, run_dir = campaigns[split]
    reference, _ = run_reference(config, run_dir.parent / f"reference-{split}.h5")
    comparison = compare_outputs(run_dir / "output" / "campaign.h5", reference)
    print(f"{split}: campaign vs reference, worst {comparison.worst:.2e}")
    assert comparison.problems == [] and comparison.worst <= REFERENCE_TOLERANCE


@pytest.mark.slow
def test_a_streamed_campaign_equals_the_same_campaign_run_whole_window(campaigns):
    streamed = _statistic(campaigns["1x2"][1] / "output" / "campaign.h5")
    whole = _statistic(campaigns["whole"][1] / "output" / "campaign.h5")
    assert streamed.shape == whole.shape
    difference = relative_difference(streamed, whole)
    print(f"streamed vs whole-window campaign: {len(whole)} windows, {difference:.2e}")
    assert difference <= WHOLE_WINDOW_BOUND
    # negative control: the whole-window statistic one window late
    late = np.concatenate([whole[:1], whole[:-1]])
    assert relative_difference(streamed, late) > 100 * WHOLE_WINDOW_BOUND


@pytest.mark.slow
def test_the_oracle_accepts_a_streamed_campaign_as_the_whole_window_one(campaigns):
    for name in ("1x2", "whole"):
        assert run_problems(campaigns[name][1]) == [], name
    series = read_series(campaigns["1x2"][1] / "output" / "campaign.h5")
    late = copy.deepcopy(series)
    x0, dx, values = late["statistic"][0]
    late["statistic"][0] = (x0, dx, np.concatenate([values[:1], values[:-1]]))
    problems = run_problems(campaigns["1x2"][1], series=late)
    assert problems and all(p.startswith("statistic") for p in problems), problems


@pytest.mark.slow
@pytest.mark.parametrize("newest_checkpoint", ["kept", "emptied"])
def test_a_streamed_client_killed_mid_stream_resumes_and_equals_the_reference(
        exported, newest_checkpoint):
    """client0 SIGKILLs itself mid-stream (tests/faults/inject.py); run-local retries it, it
    resumes from its checkpoint on a new sequence (the streamed state rebuilt from the
    samples it sends again) and the output still equals the reference. With its newest
    checkpoint emptied first (a power loss after the rename), the retry removes it, says so,
    and streams its rows again (it was a traceback in every attempt)."""
    streamed = exported["streamed"]
    root = streamed.source.parent
    config = load_config(streamed.source, [*STREAMED, *FAST_FAILURE, "client.in_flight=2",
                                           f'model.repository="{streamed.model.repository}"'])
    run_dir = root / f"run-killed-{newest_checkpoint}"
    make_dag(config, RunDir(run_dir))
    damage = [{"point": "mid-stream", "action": "truncate",
               "path": "parts/client0.checkpoints/*.npz"}] * (newest_checkpoint == "emptied")
    (run_dir / "faults.json").write_text(json.dumps(
        {"client0": [*damage, {"point": "mid-stream", "action": "sigkill"}]}))
    try:
        run_local(RunDir(run_dir))
    finally:
        assert processes_mentioning(str(run_dir)) == []
    out = (run_dir / "logs" / "client0.out").read_text()
    assert "injected fault 'sigkill' at mid-stream" in out
    damaged = "is damaged (EOFError" in (run_dir / "logs" / "client0.err").read_text() + out
    assert damaged == (newest_checkpoint == "emptied")
    resumed = [int(line.split("resuming after ")[1].split()[0])
               for line in out.splitlines() if "resuming after" in line]
    if newest_checkpoint == "kept":
        assert resumed and resumed[0] > 0, out
    else:  # back to where the damaged checkpoint's windows begin: only those streamed again
        [(first, end)] = re.findall(r"checkpoints/p0-(\d+)-(\d+)\.npz is damaged", out)
        assert resumed == [int(first)] and int(first) < int(end), out
    reference, _ = run_reference(config, root / "reference-killed.h5")
    comparison = compare_outputs(run_dir / "output" / "campaign.h5", reference)
    assert comparison.problems == [] and comparison.worst <= REFERENCE_TOLERANCE


@pytest.mark.slow
def test_a_streamed_campaign_with_time_slides_equals_its_reference_and_the_oracle(exported):
    root = exported["streamed"].source.parent
    config = load_config(exported["streamed"].source, [
        *STREAMED, *SLIDES, f'model.repository="{root / "streamed"}-slides"'])
    if not (root / "streamed-slides").exists():
        export_repository(config, root / "weights")
    run_dir = run_dag(config, root / "run-slides")
    reference, _ = run_reference(config, root / "reference-slides.h5")
    comparison = compare_outputs(run_dir / "output" / "campaign.h5", reference)
    assert comparison.problems == [] and comparison.worst <= REFERENCE_TOLERANCE
    assert any(key.startswith("slides/") for key in comparison.relative)
    assert run_problems(run_dir) == []
