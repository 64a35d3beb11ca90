"""End to end: real GWF frames, real tritonservers, the written DAG executed by run-local.

The campaign's merged output must equal the in-process reference; nothing may stay running.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import pytest
from gwpy.timeseries import TimeSeries

from offline_iaas.config import CampaignConfig, load_config
from offline_iaas.errors import RunError
from offline_iaas.gps import gps_text
from offline_iaas.merge.output import compare_outputs, read_campaign
from offline_iaas.merge.reference import run_reference
from offline_iaas.repository.export import export_repository
from offline_iaas.rundir import RunDir
from offline_iaas.workflow.local import run_local
from offline_iaas.workflow.make_dag import make_dag
from tests.helpers import TOLERANCE, processes_mentioning
from tests.oracle import run_problems

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def dataset(small_campaign_dir) -> Path:
    """Frames for 64 s of H1/L1 at 256 Hz, shared by the tests of this module."""
    return small_campaign_dir(export=False)


def campaign(root: Path, name: str, overrides: list[str]) -> CampaignConfig:
    config = load_config(
        root / "campaign.toml",
        [f'model.repository="{root / name / "model-repository"}"', *overrides],
    )
    export_repository(config)
    return config


def run_and_compare(config: CampaignConfig, run_dir: Path) -> float:
    make_dag(config, RunDir(run_dir))
    try:
        run_local(RunDir(run_dir))
    finally:
        assert processes_mentioning(str(run_dir)) == []
        assert processes_mentioning(str(config.model.repository)) == []
    assert run_problems(run_dir) == []  # right, not only equal: the oracle's own windows
    reference, _ = run_reference(config, run_dir.parent / "reference.h5")
    return compare_outputs(run_dir / "output" / "campaign.h5", reference).worst


def test_two_servers_two_clients_equal_the_reference(
    dataset: Path, log_lines: list[str]
) -> None:
    config = campaign(dataset, "two-by-two", ["layout.servers=2", "layout.clients_per_server=2"])
    run_dir = dataset / "two-by-two" / "run"
    assert run_and_compare(config, run_dir) <= TOLERANCE
    # gwpy reads the merged output: one stretch, stamped at the end of each window, the first
    # window lying wholly inside the data
    first = config.data.start + (config.warmup_windows + 1) / config.model.inference_rate
    stat = TimeSeries.read(
        run_dir / "output" / "campaign.h5", format="hdf5", path=f"statistic/{gps_text(first)}"
    )
    assert len(stat) == config.total_windows - config.warmup_windows
    assert stat.t0.value == first
    assert stat.dt.value == 1 / config.model.inference_rate
    assert [len(s) for s in read_campaign(run_dir / "output" / "campaign.h5")] == [len(stat)]
    with h5py.File(run_dir / "output" / "campaign.h5") as f:
        assert f.attrs["stream_hash"] == config.stream_hash()
        assert f.attrs["merge_hash"] == config.merge_hash()
    # every node ran, and the second pass has nothing to do
    assert sorted(p.stem for p in (run_dir / "parts").glob("*.h5")) == [
        "client0",
        "client1",
        "client2",
        "client3",
    ]
    log_lines.clear()
    run_local(RunDir(run_dir))
    assert any("nothing to do" in line for line in log_lines)


def test_ragged_span_batch_and_stride_equal_the_reference(dataset: Path) -> None:
    # 61.5625 s: not a whole number of strides (0.125 s), of requests (7 windows) or of the
    # 5 client shares; a 1.5 s kernel is not a multiple of the stride either.
    config = campaign(
        dataset,
        "ragged",
        [
            "data.duration=61.5625",
            "model.inference_rate=8",
            "model.kernel_seconds=1.5",
            "model.batch_size=7",
            "layout.servers=1",
            "layout.clients_per_server=5",
        ],
    )
    kept = config.total_windows - config.warmup_windows
    assert kept % 7 and kept % 5
    assert config.data.duration * config.model.inference_rate % 1
    assert run_and_compare(config, dataset / "ragged" / "run") <= TOLERANCE


def test_failed_client_stops_every_server(dataset: Path) -> None:
    frames = dataset / "failing" / "frames"
    shutil.copytree(dataset / "frames", frames)
    config = campaign(
        dataset,
        "failing",
        [f'data.frames="{frames}"', "workflow.retries=0", "layout.servers=2"],
    )
    run_dir = dataset / "failing" / "run"
    make_dag(config, RunDir(run_dir))
    for gwf in frames.glob("L-*.gwf"):  # the clients cannot read L1 any more
        gwf.unlink()
    with pytest.raises(RunError, match="client"):
        run_local(RunDir(run_dir))
    assert processes_mentioning(str(run_dir)) == []
    assert processes_mentioning(str(config.model.repository)) == []
    assert not (run_dir / "output" / "campaign.h5").exists()


def test_demo_command_reports_equality_and_leaves_nothing_running(tmp_path: Path) -> None:
    workdir = tmp_path / "demo"
    result = subprocess.run(
        [
            sys.executable, "-m", "offline_iaas.cli", "demo", "--workdir", str(workdir),
            "--mode", "classifier", "--set", "data.duration=64", "--set", "layout.servers=1",
            "--set", "synth.injections=4",  # the demo's 24 need its 2048 s
        ],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    difference = [line for line in lines if line.startswith("max relative difference: ")]
    assert len(difference) == 1 and float(difference[0].split(": ")[1]) <= TOLERANCE
    for label in ("data seconds processed: 64.0", "wall time: ", "data-seconds per second: "):
        assert any(line.startswith(label) for line in lines), label
    (streaming,) = [line for line in lines if line.startswith("streaming: ")]
    number = r"([0-9,.]+)"
    match = re.fullmatch(
        rf"streaming: the same {number} analysed data seconds \(warm-ups excluded; the "
        rf"campaign's clients streamed {number} with theirs\): campaign {number} data-s/s "
        rf"\(1 server\(s\) x 2 client\(s\)\), reference {number} data-s/s \(one process\): "
        rf"{number} x per wall second; per CPU second \(every process, start to output\): "
        rf"campaign {number} data-s \({number} CPU-s\), reference {number} data-s \({number} "
        rf"CPU-s\): {number} x; networks streamed layer by layer \(model.streamed\)",
        streaming)
    assert match, streaming
    analysed, streamed, *rates = (float(v.replace(",", "")) for v in match.groups())
    config = load_config(workdir / "run" / "campaign.toml")
    expected = (config.total_windows - config.warmup_windows) * config.stride_seconds
    assert analysed == pytest.approx(expected, abs=0.05)  # printed to 0.1 s
    assert abs(analysed - expected - config.stride_seconds) > 0.05  # one window more fails
    assert streamed > analysed  # the second client's piece streams a warm-up again
    assert min(rates) > 0
    assert (workdir / "run" / "output" / "campaign.h5").exists()
    assert (workdir / "reference.h5").exists()
    assert lines[-1] == f"report: {workdir.resolve() / 'run' / 'report' / 'index.html'}"
    assert (workdir / "run" / "report" / "index.html").stat().st_size > 10_000
    assert processes_mentioning(str(workdir)) == []
