"""The three campaign modes end to end (2 servers x 2 clients, real tritonservers) = reference.

The networks are freshly initialised (not trained): the equality of campaign and reference does
not depend on what the weights are; the physics of the trained demo networks is checked in
``test_demo_physics.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest
from gwpy.timeseries import TimeSeries

from offline_iaas.config import CampaignConfig, load_config
from offline_iaas.merge.output import compare_outputs, read_campaign
from offline_iaas.merge.reference import run_reference
from offline_iaas.repository.export import export_repository
from offline_iaas.rundir import RunDir
from offline_iaas.workflow.local import run_local
from offline_iaas.workflow.make_dag import make_dag
from tests.helpers import (
    TOLERANCE,
    WITNESSES,
    assert_same_samples,
    captured_log,
    processes_mentioning,
    run_dag,
)
from tests.oracle import analysed_spans

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def dataset(small_campaign_dir) -> Path:
    """Frames for 64 s of H1/L1 with two witnesses each, and untrained weights."""
    return small_campaign_dir(export=False, weights=True)


def mode_campaign(root: Path, mode: str) -> CampaignConfig:
    config = load_config(
        root / "campaign.toml",
        [
            f'model.repository="{root / mode / "model-repository"}"',
            f'model.mode="{mode}"',
            f"data.witnesses={WITNESSES}",
            f'search.injections="{root / "frames" / "synth.json"}"',
            "layout.servers=2",
            "layout.clients_per_server=2",
            "deepclean.frame_seconds=16",
            "deepclean.asd_fftlength=1",
        ],
    )
    export_repository(config, root / "weights")
    return config


def run_mode(root: Path, mode: str) -> tuple[CampaignConfig, Path, Path, list[str]]:
    config = mode_campaign(root, mode)
    run_dir = root / mode / "run"
    make_dag(config, RunDir(run_dir))
    try:
        with captured_log() as log:
            run_local(RunDir(run_dir))
    finally:
        assert processes_mentioning(str(run_dir)) == []
    reference, _ = run_reference(config, root / mode / "reference.h5")
    return config, run_dir / "output" / "campaign.h5", reference, log


def _without(spans: list[tuple[float, float]], cuts: list[tuple[float, float]]
             ) -> list[tuple[float, float]]:
    """``spans`` less every ``cut`` (half-open intervals)."""
    for c0, c1 in cuts:
        spans = [piece for a, b in spans
                 for piece in ((a, min(b, c0)), (max(a, c1), b)) if piece[1] > piece[0]]
    return spans


def found_missed_problems(config: CampaignConfig, campaign: Path, trim_seconds: float = 0.0
                          ) -> list[str]:
    """Found/missed without time slides from the output file and synth.json by its definition,
    sharing no code with the merge: the analysed time is ``oracle.analysed_spans``
    (``trim_seconds`` off each end: a control); the background
    is that time less ``exclusion_seconds`` around every injection, its threshold the loudest
    trigger in it (a trigger stamped at its stride's end: a span's end is its last stamp; a
    cut ``[t - e, t + e)``); an injection in the analysed time is found when a trigger
    within ``found_seconds`` is louder."""
    bbhnet = json.loads((campaign.parent / "campaign.json").read_text())["bbhnet"]
    with h5py.File(campaign, "r") as f:
        times, values = f["triggers"]["time"], f["triggers"]["statistic"].astype(np.float64)
        spans = analysed_spans(f, trim_seconds)
    listed = [i["gps_time"] for i in json.loads(config.search.injections.read_text())[
        "injections"]]
    exclusion, found_seconds = config.search.exclusion_seconds, config.search.found_seconds
    cuts = [(t - exclusion, t + exclusion) for t in listed]
    background = _without(spans, cuts)
    times = np.asarray(times, np.float64)
    stamped = np.zeros(len(times), bool)  # a value is stamped at its stride's end
    for a, b in spans:
        stamped |= (times > a) & (times <= b)
    inside = stamped & np.all([(times < c0) | (times >= c1) for c0, c1 in cuts] or [True],
                              axis=0)
    threshold = values[inside].max() if inside.any() else np.inf
    counted = [t for t in listed if any(a <= t < b for a, b in spans)]
    found = sum(bool(np.any((np.abs(times - t) <= found_seconds) & (values > threshold)))
                for t in counted)
    here = {"threshold": threshold, "found": found, "missed": len(counted) - found,
            "background_seconds": sum(b - a for a, b in background)}
    return [f"{name}: campaign {bbhnet[name]}, here {value}" for name, value in here.items()
            if not np.isclose(bbhnet[name], value, rtol=0, atol=1e-6)]


@pytest.mark.parametrize("mode", ["deepclean", "bbhnet", "e2e"])
def test_mode_campaign_equals_reference(dataset: Path, mode: str) -> None:
    config, campaign, reference, _ = run_mode(dataset, mode)
    comparison = compare_outputs(campaign, reference)
    with h5py.File(campaign, "r") as f:
        groups = set(f)
    expected = {"deepclean": {"noise", "clean"}, "bbhnet": {"statistic", "triggers"},
                "e2e": {"noise", "clean", "statistic", "triggers"}}[mode]
    assert groups == expected
    assert comparison.passes(TOLERANCE), comparison.describe()
    summary = json.loads((campaign.parent / "campaign.json").read_text())
    if "statistic" in groups:
        assert summary["bbhnet"]["found"] + summary["bbhnet"]["missed"] == 1  # synth's injection
        assert found_missed_problems(config, campaign) == []
        # control: the analysed time one stride shorter at each end
        assert found_missed_problems(config, campaign, config.stride_seconds) != []
    if "clean" in groups:
        # the cleaned strain is in the GWF files too, under <IFO>:<strain>_DC (gate "flag":
        # a flagged file still holds the cleaned strain)
        clean = read_campaign(campaign, "clean/H1")[0]
        files = sorted((campaign.parent / "frames" / "H1").glob("H-H1_HOFT_DC-*.gwf"))
        assert len(files) >= 4
        channel = f"{config.data.channels[0]}_DC"
        from_gwf = TimeSeries.read([str(f) for f in files], channel, format="gwf")
        assert from_gwf.t0.value == pytest.approx(clean.t0.value, abs=1e-6)
        assert_same_samples(from_gwf.value, clean.value)
        assert set(summary["deepclean"]) == {"H1", "L1"}


def test_deepclean_outputs_start_after_the_averaging_latency(dataset: Path) -> None:
    """Each stretch's cleaned strain starts K - S after it (the first averaged stride whose
    windows all hold data) and ends K - S before its last window's end."""
    config = mode_campaign(dataset, "deepclean")
    out, _ = run_reference(config, dataset / "latency.h5")
    (clean,) = read_campaign(out, "clean/L1")
    lag = (config.kernel_samples - config.stride_samples) / config.data.sample_rate
    sample = 1 / config.data.sample_rate
    # absolute tolerances: GPS times are ~1.26e9, a relative 1e-6 would be +-1262 s
    assert clean.t0.value == pytest.approx(config.data.start + lag, rel=0, abs=1e-6)
    # control: one sample later is not the start
    assert clean.t0.value != pytest.approx(config.data.start + lag + sample, rel=0, abs=1e-6)
    end = config.data.start + config.data.duration
    stop = clean.t0.value + clean.duration.value
    assert stop == pytest.approx(end - lag, rel=0, abs=1e-6)
    assert stop != pytest.approx(end - lag - sample, rel=0, abs=1e-6)  # control: a sample early


@pytest.mark.parametrize("form", ["torchscript", "onnx"])
def test_an_aframe_style_classifier_with_a_class_axis_serves_in_bbhnet_mode(
    dataset: Path, tmp_path: Path, form: str
) -> None:
    """A foreign network (ml4gw-ResNet1D-shaped: ``[n, ifos, kernel]`` → ``[n, 1]``) as
    TorchScript or ONNX: export drops the class axis, the campaign serves it and equals the
    reference."""
    import torch
    from torch import nn

    from offline_iaas.models.weights import export_onnx

    class ClassAxis(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv1d(2, 8, 7, padding=3)
            self.fc = nn.Linear(8, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(torch.relu(self.conv(x * 1e21)).mean(-1))

    torch.manual_seed(1)
    weights = tmp_path / "weights"
    weights.mkdir()
    if form == "torchscript":
        torch.jit.save(torch.jit.script(ClassAxis().eval()), weights / "bbhnet.ts")
    else:
        export_onnx(ClassAxis().eval(), weights / "bbhnet.onnx", "windows", "statistic",
                    (1, 2, 256))
    config = load_config(dataset / "campaign.toml", [
        f'model.repository="{tmp_path / "model-repository"}"', 'model.mode="bbhnet"',
        "layout.servers=1", "layout.clients_per_server=2",
    ])
    export_repository(config, weights)
    run_dir = run_dag(config, tmp_path / "run")
    reference, _ = run_reference(config, tmp_path / "reference.h5")
    comparison = compare_outputs(run_dir / "output" / "campaign.h5", reference)
    assert comparison.passes(TOLERANCE), comparison.describe()
    (statistic,) = read_campaign(run_dir / "output" / "campaign.h5", "statistic")
    assert np.ptp(statistic.value) > 0  # the network's own answers, not a constant
