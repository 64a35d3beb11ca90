"""DeepClean's products (issue #18): frames a datafind server publishes, provenance in every
frame, and the validity gate, on a real campaign (run-local: one tritonserver, two clients)
whose DeepClean is a bad model: its prediction is band-limited noise larger than the strain,
as if noise were added to a trained network's output. Every cleaned frame must be flagged;
with ``deepclean.gate = "replace"`` each holds the raw strain. (The trained demo DeepClean
passes the gate in every frame: ``test_demo_physics.py``.)
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import gwdatafind
import h5py
import numpy as np
import pytest
import torch
from gwpy.segments import DataQualityFlag, SegmentList
from gwpy.timeseries import TimeSeries

from offline_iaas.cli import main
from offline_iaas.config import CampaignConfig, load_config
from offline_iaas.data.synth import write_synthetic_dataset
from offline_iaas.errors import ConfigError, DataError, ModelError, exit_code
from offline_iaas.manifest import read_manifest
from offline_iaas.merge.output import compare_outputs, read_campaign
from offline_iaas.merge.provenance import read_provenance
from offline_iaas.merge.reference import run_reference
from offline_iaas.records import read_run_info
from offline_iaas.repository.export import export_repository
from offline_iaas.rundir import RunDir
from offline_iaas.science.deepclean.frames import frame_verdict
from tests.datafind_server import running_datafind_server
from tests.helpers import (
    SMALL_CAMPAIGN,
    WITNESSES,
    assert_same_samples,
    relative_difference,
    run_dag,
    untrained_weights,
)

pytestmark = pytest.mark.slow

STRAIN = "H1:GDS-CALIB_STRAIN"


def bad_weights(directory: Path) -> Path:
    """Untrained DeepClean per detector with its output scale raised to 1e-17: a prediction
    about twice the synthetic strain's rms (4.5e-20) after the band-pass, noise the line lacks."""
    untrained_weights(directory)
    for ifo in ("H1", "L1"):
        path = directory / f"deepclean-{ifo}.pt"
        state = torch.load(path)
        state["strain_std"] = torch.tensor(1e-17)
        torch.save(state, path)
    return directory


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> tuple[CampaignConfig, Path]:
    root = tmp_path_factory.mktemp("products")
    (root / "campaign.toml").write_text(SMALL_CAMPAIGN)
    write_synthetic_dataset(load_config(root / "campaign.toml"))
    config = load_config(root / "campaign.toml", [
        f'model.repository="{root / "model-repository"}"', 'model.mode="deepclean"',
        f"data.witnesses={WITNESSES}", "deepclean.frame_seconds=16",
        "deepclean.asd_fftlength=1", 'deepclean.gate="replace"',
    ])
    export_repository(config, bad_weights(root / "weights"))
    return config, run_dag(config, root / "run")


def gwf_files(run_dir: Path, ifo: str) -> list[Path]:
    return sorted((run_dir / "output" / "frames" / ifo).glob("*.gwf"))


def test_cleaned_frames_are_named_and_cached_for_publishing(campaign) -> None:
    config, run_dir = campaign
    frames = run_dir / "output" / "frames"
    for ifo in config.ifos:
        names = [p.name for p in gwf_files(run_dir, ifo)]
        assert len(names) >= 4
        assert all(n.startswith(f"{ifo[0]}-{ifo}_HOFT_DC-") for n in names), names
    cached = [line.split() for line in (frames / "deepclean.lcf").read_text().splitlines()]
    assert sorted(Path(e[4].removeprefix("file://localhost")) for e in cached) == sorted(
        gwf_files(run_dir, "H1") + gwf_files(run_dir, "L1"))
    assert {(e[0], e[1]) for e in cached} == {("H", "H1_HOFT_DC"), ("L", "L1_HOFT_DC")}


def test_a_datafind_server_publishes_the_cleaned_frames(campaign) -> None:
    config, run_dir = campaign
    start, end = config.data.start, config.data.start + config.data.duration
    with running_datafind_server(run_dir / "output" / "frames") as url:
        urls = gwdatafind.find_urls("H", "H1_HOFT_DC", start, end, host=url, on_gaps="ignore")
    paths = sorted(Path(u.removeprefix("file://localhost")) for u in urls)
    assert paths == gwf_files(run_dir, "H1")
    series = TimeSeries.read([str(p) for p in paths], f"{STRAIN}_DC", format="gwf")
    assert series.sample_rate.value == config.data.sample_rate
    assert np.isfinite(series.value).all()


def test_every_frame_and_the_output_name_their_provenance(campaign, capsys) -> None:
    config, run_dir = campaign
    repo = config.model.repository
    manifest = read_manifest(repo)
    graph = repo / manifest.networks["deepclean"].path
    expected_sha = hashlib.sha256(graph.read_bytes()).hexdigest()
    weights = {f"deepclean-{ifo}.pt": hashlib.sha256(
        (run_dir.parent / "weights" / f"deepclean-{ifo}.pt").read_bytes()).hexdigest()
        for ifo in ("H1", "L1")}
    for path in [*gwf_files(run_dir, "H1"), run_dir / "output" / "campaign.h5"]:
        assert main(["inspect", str(path)]) == 0
        provenance = json.loads(capsys.readouterr().out)
        assert provenance == read_provenance(path)
        assert provenance["stream_hash"] == config.stream_hash()
        assert provenance["merge_hash"] == config.merge_hash()
        assert provenance["software"].startswith("offline-iaas ")
        network = provenance["model"]["networks"]["deepclean"]  # both detectors
        assert network == {"version": 1, "sha256": expected_sha, "weights_sha256": weights}
    with pytest.raises(DataError, match="no offline-iaas frame history"):
        read_provenance(sorted((run_dir.parent / "frames").rglob("*.gwf"))[0])  # a raw frame
    assert main(["inspect", str(run_dir / "campaign.toml")]) == exit_code(DataError)


def test_a_bad_model_is_flagged_and_replaced_by_the_raw_strain(campaign) -> None:
    config, run_dir = campaign
    segments = run_dir / "output" / "frames" / "segments"
    summary = json.loads((run_dir / "output" / "campaign.json").read_text())
    for ifo in config.ifos:
        gate = summary["deepclean_gate"][ifo]
        assert gate["files_flagged"] == gate["files"] >= 4 and gate["valid_seconds"] == 0
        flagged = SegmentList.read(str(segments / f"{ifo}_HOFT_DC_FLAGGED.txt"),
                                   format="segwizard")
        assert abs(flagged) == pytest.approx(gate["flagged_seconds"])
        flag = DataQualityFlag.read(str(segments / f"{ifo}_HOFT_DC.xml"),
                                    f"{ifo}:DEEPCLEAN-DC_VALID:1", format="ligolw")
        assert flag.known == flagged and abs(flag.active) == 0
    # with gate = "replace" the published channel is the raw strain, read from the input frames
    published = TimeSeries.read([str(p) for p in gwf_files(run_dir, "H1")], f"{STRAIN}_DC",
                                format="gwf")
    raw = TimeSeries.read(sorted(str(p) for p in (run_dir.parent / "frames").rglob("H-*.gwf")),
                          STRAIN, format="gwf").crop(published.span[0], published.span[1])
    assert len(raw) == len(published) > 0
    np.testing.assert_array_equal(published.value, raw.value.astype(np.float32))
    # negative controls: the HDF5 keeps the (bad) cleaned strain, which is not the raw strain;
    # and the raw strain one sample late is not what was published
    clean = read_campaign(run_dir / "output" / "campaign.h5", "clean/H1")[0]
    overlap = raw.crop(clean.span[0], clean.span[1])
    kept = np.asarray(clean.value[: len(overlap)], np.float64)
    assert len(kept) > 0 and np.isfinite(kept).all()
    assert relative_difference(kept, overlap.value) > 0.1
    assert not np.array_equal(published.value[1:], raw.value[:-1].astype(np.float32))


def test_frame_verdicts() -> None:
    good = {"max_ratio_outside_band": 1.01, "ratio_at_line": 0.05, "line_hz": 60.0}
    assert frame_verdict(good, tolerance=0.05, line_ratio=1.0) is None
    raised = {**good, "max_ratio_outside_band": 1.2}
    assert "raised 20.0 % outside the band" in frame_verdict(raised, 0.05, 1.0)
    kept_line = {**good, "ratio_at_line": 1.0}
    assert "not lowered" in frame_verdict(kept_line, 0.05, 1.0)
    assert frame_verdict({**good, "ratio_at_line": float("nan")}, 0.05, 1.0) is not None


@pytest.mark.parametrize(("override", "key"), [
    ('deepclean.channel_suffix="dc-1"', "deepclean.channel_suffix"),
    ('deepclean.frame_type="HOFT-DC"', "deepclean.frame_type"),
    ('deepclean.gate="drop"', "deepclean.gate"),
    ("deepclean.gate_tolerance=-0.1", "deepclean.gate_tolerance"),
])
def test_product_settings_are_checked(tmp_path: Path, override: str, key: str) -> None:
    (tmp_path / "campaign.toml").write_text(SMALL_CAMPAIGN)
    deepclean = ['model.mode="deepclean"', f"data.witnesses={WITNESSES}"]
    load_config(tmp_path / "campaign.toml", deepclean)  # the defaults pass
    with pytest.raises(ConfigError, match=key):
        load_config(tmp_path / "campaign.toml", [*deepclean, override])


# ---- the canary -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def canary_runs(tmp_path_factory: pytest.TempPathFactory):
    """The same DeepClean campaign twice, without and with a canary (other weights)."""
    root = tmp_path_factory.mktemp("canary")
    (root / "campaign.toml").write_text(SMALL_CAMPAIGN)
    write_synthetic_dataset(load_config(root / "campaign.toml"))
    weights = untrained_weights(root / "weights")
    canary_weights = untrained_weights(root / "canary-weights", seed=5)
    runs = {}
    for name, canary in (("plain", False), ("canary", True)):
        config = load_config(root / "campaign.toml", [
            f'model.repository="{root / name / "model-repository"}"', 'model.mode="deepclean"',
            f"data.witnesses={WITNESSES}", "deepclean.frame_seconds=16",
            "deepclean.asd_fftlength=1", f"deepclean.canary={str(canary).lower()}",
        ])
        export_repository(config, weights, canary_weights=canary_weights if canary else None)
        runs[name] = (config, run_dag(config, root / name / "run"))
    return runs


def test_a_canary_campaign_equals_its_reference_in_both_channels(canary_runs) -> None:
    config, run_dir = canary_runs["canary"]
    campaign = run_dir / "output" / "campaign.h5"
    reference, _ = run_reference(config, run_dir.parent / "reference.h5")
    comparison = compare_outputs(campaign, reference)
    assert comparison.passes(1e-5), comparison.describe()
    with h5py.File(campaign, "r") as f:
        assert set(f) == {"noise", "clean", "noise_canary", "clean_canary"}
    clean = read_campaign(campaign, "clean/H1")[0]
    canary = read_campaign(campaign, "clean_canary/H1")[0]
    assert canary.t0 == clean.t0 and len(canary) == len(clean)
    # another network: another cleaning (relative: strain is ~1e-20, under allclose's atol)
    assert not np.allclose(canary.value, clean.value, rtol=1e-3, atol=0)
    # the plain campaign's production channel is the same network on the same data
    plain = read_campaign(canary_runs["plain"][1] / "output" / "campaign.h5", "clean/H1")[0]
    # (to the largest sample: a one-ulp difference near a zero crossing is no difference)
    assert np.isfinite(clean.value).all() and np.isfinite(plain.value).all()
    assert np.abs(clean.value - plain.value).max() <= 1e-6 * np.abs(plain.value).max()
    # both channels in the same GWF files; the canary's is the HDF5's canary
    files = [str(p) for p in gwf_files(run_dir, "H1")]
    from_gwf = TimeSeries.read(files, f"{STRAIN}_DC_CANARY", format="gwf")
    assert_same_samples(from_gwf.value, canary.value.astype(np.float32))
    assert len(TimeSeries.read(files, f"{STRAIN}_DC", format="gwf")) == len(from_gwf)
    summary = json.loads((run_dir / "output" / "campaign.json").read_text())
    assert set(summary["deepclean_canary"]) == set(summary["deepclean"]) == {"H1", "L1"}
    report = (run_dir / "report" / "index.html").read_text()
    assert "<th>canary</th>" in report and "<th>production</th>" in report


def test_the_canary_sends_no_more_bytes_per_data_second(canary_runs) -> None:
    sent = {}
    for name, (config, run_dir) in canary_runs.items():
        records = [json.loads(RunDir(run_dir).part(node)[1].read_text())
                   for node in read_run_info(RunDir(run_dir)).clients]
        data_seconds = config.total_windows * config.stride_seconds
        sent[name] = sum(r["tensor_bytes_sent"] for r in records) / data_seconds
    # every streamed sample once, float32, plus the warm-up windows streamed again per piece
    config = canary_runs["plain"][0]
    floor = len(config.stream_channels) * config.data.sample_rate * 4
    assert floor <= sent["plain"] < 1.2 * floor
    assert sent["canary"] == sent["plain"]


def test_canary_weights_need_a_canary_config_and_back(tmp_path: Path) -> None:
    (tmp_path / "campaign.toml").write_text(SMALL_CAMPAIGN)
    weights = untrained_weights(tmp_path / "weights")
    deepclean = ['model.mode="deepclean"', f"data.witnesses={WITNESSES}"]
    plain = load_config(tmp_path / "campaign.toml", deepclean)
    with pytest.raises(ModelError, match="does not ask for a canary"):
        export_repository(plain, weights, canary_weights=weights)
    canary = load_config(tmp_path / "campaign.toml", [*deepclean, "deepclean.canary=true"])
    with pytest.raises(ModelError, match="needs --canary-weights"):
        export_repository(canary, weights)
    with pytest.raises(ConfigError, match="deepclean.canary"):
        load_config(tmp_path / "campaign.toml", ["deepclean.canary=true"])  # classifier mode
